/*
 * The block types of the x86 few-row products (rows_avx512.c,
 * rows_avxvnni.c, rows_avx2.c: each installs those it walks), the bytes of
 * weights a walk advances per 32 elements, and IQ4_XS's sub-block scales,
 * which every family decodes alike. For files compiled with AVX2.
 */
#ifndef LARES_QUANT_ROWS_TYPES_H
#define LARES_QUANT_ROWS_TYPES_H

#include "quant/blocks.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

enum rows_type {
    R_Q4_0,
    R_Q8_0,
    R_IQ4_NL,
    R_IQ4_XS,
    R_Q4_K,
    R_Q5_K,
    R_Q6_K,
    R_Q5_0,
    R_Q4_1,
    R_Q5_1
};

/* bytes per 32 elements of the types walked eight blocks at a time (IQ4_XS:
 * its 136-byte super-block of 256) */
static inline size_t rows_block_bytes(enum rows_type t) {
    return t == R_Q4_0     ? sizeof(block_q4_0)
           : t == R_Q5_0   ? sizeof(block_q5_0)
           : t == R_Q4_1   ? sizeof(block_q4_1)
           : t == R_Q5_1   ? sizeof(block_q5_1)
           : t == R_IQ4_NL ? sizeof(block_iq4_nl)
           : t == R_IQ4_XS ? sizeof(block_iq4_xs) / 8
                           : sizeof(block_q8_0);
}

/* the legacy types walked with unsigned codes (Q4_0, Q5_0, Q4_1, Q5_1), those
 * of them with a fifth bit per element, and those with a minimum per block */
static inline bool rows_five_bits(enum rows_type t) {
    return t == R_Q5_0 || t == R_Q5_1;
}

static inline bool rows_has_min(enum rows_type t) {
    return t == R_Q4_1 || t == R_Q5_1;
}

static inline bool rows_unsigned(enum rows_type t) {
    return t == R_Q4_0 || t == R_Q4_1 || rows_five_bits(t);
}

/* where a block of the legacy types of unsigned codes keeps its nibbles and
 * (Q5_0, Q5_1) its fifth bits; Q4_1 and Q5_1 keep their minimum m after d */
static inline size_t rows_qs_at(enum rows_type t) {
    return t == R_Q4_0   ? offsetof(block_q4_0, qs)
           : t == R_Q5_0 ? offsetof(block_q5_0, qs)
           : t == R_Q4_1 ? offsetof(block_q4_1, qs)
                         : offsetof(block_q5_1, qs);
}

static inline size_t rows_qh_at(enum rows_type t) {
    return t == R_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
}

_Static_assert(offsetof(block_q4_1, m) == offsetof(block_q5_1, m), "one place for the minimum");

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
