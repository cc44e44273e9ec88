/*
 * Attention over a KV cache with AVX2/FMA/F16C (8 floats a vector): the
 * kernels of attend_simd.h at this width. Reference: attend.c.
 */
#include "quant/half.h"
#include "quant/kernels.h"

#include <immintrin.h>
#include <math.h>

#define ATT_LANES 8
typedef __m256 vf;
#define V_LOAD(p)       _mm256_loadu_ps(p)
#define V_STORE(p, x)   _mm256_storeu_ps(p, x)
#define V_ZERO()        _mm256_setzero_ps()
#define V_SET1(f)       _mm256_set1_ps(f)
#define V_ADD(a, b)     _mm256_add_ps(a, b)
#define V_MUL(a, b)     _mm256_mul_ps(a, b)
#define V_SUB(a, b)     _mm256_sub_ps(a, b)
#define V_DIV(a, b)     _mm256_div_ps(a, b)
#define V_MIN(a, b)     _mm256_min_ps(a, b)
#define V_MAX(a, b)     _mm256_max_ps(a, b)
#define V_FMA(a, b, c)  _mm256_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define V_ROUND(x)      _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_LOAD_F16(p)   _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))

static inline vf V_POW2I(vf n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}

static inline float V_HSUM(vf v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

static inline float V_HMAX(vf v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* lane r = the sum of a[r]'s lanes: two rounds of horizontal adds leave each
 * 128-bit half holding four rows' half sums; the halves are then added */
static inline vf reduce_keys(const vf a[8]) {
    const vf s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const vf s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                         _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

#define ATT_DB 8
#define ATT_KB 4
#define ATT_MR 2
#include "quant/attend_simd.h"
#include "quant/silu_simd.h"

void quant_install_avx2_attend(quant_traits *t) {
    t[GGUF_TYPE_F32].kv_attend = attend_f32_simd;
    t[GGUF_TYPE_F16].kv_attend = attend_f16_simd;
    t[GGUF_TYPE_F32].kv_attend_rows = attend_rows_f32_simd;
    t[GGUF_TYPE_F16].kv_attend_rows = attend_rows_f16_simd;
    t[GGUF_TYPE_F32].silu_mul = silu_mul_simd; /* SwiGLU, with the softmax's exp */
}
