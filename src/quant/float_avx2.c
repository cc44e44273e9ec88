/*
 * AVX2/FMA/F16C kernels of the float types (f32, f16, bf16). Each names its
 * reference in float.c; tails shorter than a vector fall to the scalar loop.
 * quant_install_avx2, the x86-64 installer, lives here and calls the other
 * *_avx2.c files' parts.
 */
#include "quant/kernels.h"

#include <immintrin.h>

static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* reference: dot_f32_f32_ref */
static void dot_f32_f32_avx2(int64_t n, float *restrict s, const void *restrict vx,
                             const void *restrict vy) {
    const float *x = vx, *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; k++) {
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k),
                                     acc[k]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    }
    float sum = hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += x[i] * y[i];
    }
    *s = sum;
}

/* reference: dot_f16_f32_ref */
static void dot_f16_f32_avx2(int64_t n, float *restrict s, const void *restrict vx,
                             const void *restrict vy) {
    const lares_f16 *x = vx;
    const float *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; k++) {
            __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8 * k)));
            acc[k] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y + i + 8 * k), acc[k]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        acc[0] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y + i), acc[0]);
    }
    float sum = hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += f16_to_f32(x[i]) * y[i];
    }
    *s = sum;
}

/* reference: dequant_f16_ref */
static void dequant_f16_avx2(const void *restrict src, float *restrict dst, int64_t n) {
    const lares_f16 *x = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    }
    for (; i < n; i++) {
        dst[i] = f16_to_f32(x[i]);
    }
}

/* reference: quant_f16_ref (round to nearest even, as f32_to_f16) */
static void quant_f16_avx2(const float *restrict src, void *restrict dst, int64_t n) {
    lares_f16 *y = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    }
    for (; i < n; i++) {
        y[i] = f32_to_f16(src[i]);
    }
}

/* eight bf16 as floats: the upper halves of fp32 (exact) */
static inline __m256 bf16x8(const lares_bf16 *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* reference: dot_bf16_f32_ref */
static void dot_bf16_f32_avx2(int64_t n, float *restrict s, const void *restrict vx,
                              const void *restrict vy) {
    const lares_bf16 *x = vx;
    const float *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; k++) {
            acc[k] = _mm256_fmadd_ps(bf16x8(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        acc[0] = _mm256_fmadd_ps(bf16x8(x + i), _mm256_loadu_ps(y + i), acc[0]);
    }
    float sum = hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += bf16_to_f32(x[i]) * y[i];
    }
    *s = sum;
}

/* reference: dequant_bf16_ref */
static void dequant_bf16_avx2(const void *restrict src, float *restrict dst, int64_t n) {
    const lares_bf16 *x = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, bf16x8(x + i));
    }
    for (; i < n; i++) {
        dst[i] = bf16_to_f32(x[i]);
    }
}

void quant_install_avx2(quant_traits *t) {
    quant_install_avx2_legacy(t);
    quant_install_avx2_kquants(t);
    t[GGUF_TYPE_BF16].vec_dot = dot_bf16_f32_avx2;
    t[GGUF_TYPE_BF16].to_float = dequant_bf16_avx2;
    t[GGUF_TYPE_F32].vec_dot = dot_f32_f32_avx2;
    t[GGUF_TYPE_F16].vec_dot = dot_f16_f32_avx2;
    t[GGUF_TYPE_F16].to_float = dequant_f16_avx2;
    t[GGUF_TYPE_F16].from_float = quant_f16_avx2;
}
