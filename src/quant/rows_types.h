/*
 * What the x86 few-row products (rows_avx512.c, rows_avxvnni.c, rows_avx2.c)
 * share beyond the block types of rows_kinds.h: IQ4_XS's sub-block scales,
 * which every x86 family decodes alike. For files compiled with AVX2.
 */
#ifndef LARES_QUANT_ROWS_TYPES_H
#define LARES_QUANT_ROWS_TYPES_H

#include "quant/rows_kinds.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* An IQ4_XS super-block's eight sub-block scales in block order, lane b: d * (ls_b - 32),
 * ls_b's low 4 bits nibble b of scales_l and its high 2 bits 2b, 2b + 1 of
 * scales_h (AVX2; the AVX-512 walk spreads them over its lanes) */
static inline __attribute__((always_inline)) __m256 iq4_xs_scales8(const block_iq4_xs *b) {
    uint32_t sl;
    memcpy(&sl, b->scales_l, sizeof sl);
    const __m256i at = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), at),
                                        _mm256_set1_epi32(0x0f));
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32((int)b->scales_h), _mm256_srli_epi32(at, 1)),
        _mm256_set1_epi32(3));
    const __m256i ls =
        _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(ls), _mm256_set1_ps(_cvtsh_ss(b->d)));
}

#endif /* LARES_QUANT_ROWS_TYPES_H */
