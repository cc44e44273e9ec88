/*
 * Activations to int8 codes as the Q8 reference quantizers make them
 * (quant_q8_0_ref): d = amax / 127, codes roundf(x * (1 / d)), half away
 * from zero. Shared by the AVX2 Q8_0/Q8_1 quantizers (legacy_avx2.c) and the
 * GEMM's panels (gemm_x86.h), so that a prompt's activations get the same
 * codes whichever path multiplies them. For files compiled with AVX2.
 */
#ifndef LARES_QUANT_Q8_AVX2_H
#define LARES_QUANT_Q8_AVX2_H

#include <immintrin.h>

static inline __attribute__((always_inline)) __m256 q8_round_half_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    __m256 ge = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(ge, step));
}

/* The 32 codes of x as four vectors of int32 (elements 8k .. 8k + 7 in
 * q[k]); returns d (not yet rounded to fp16). */
static inline __attribute__((always_inline)) float q8_codes_avx2(const float *x, __m256i q[4]) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    for (int k = 0; k < 4; k++) {
        q[k] = _mm256_cvtps_epi32(q8_round_half_away(_mm256_mul_ps(v[k], idv)));
    }
    return d;
}

/* the four vectors of codes as 32 int8 in element order (int32 -> int16 ->
 * int8 packs interleave 128-bit lanes; the permute restores the order) */
static inline __attribute__((always_inline)) __m256i q8_pack_avx2(const __m256i q[4]) {
    __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    return _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

#endif /* LARES_QUANT_Q8_AVX2_H */
