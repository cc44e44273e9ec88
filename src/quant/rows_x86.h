/*
 * The 256-bit layout of the few-row product (quant.h: quant_rows_fmt) that
 * rows_avxvnni.c and rows_avx2.c share: a weight row is walked 256 elements
 * (eight blocks of 32) at a time, and an int32 lane holds one whole block, so
 * the scales of eight blocks are plain vectors.
 *
 * Layout of an activation row: the codes (xor `bias`: 0x80 makes them
 * VPDPBUSD's unsigned operand, 0 keeps them signed), for each 256 elements
 * eight 32-byte vectors (byte 4b + i of vector v: element 4v + i of block b),
 * then the last k % 256 in element order. A wide row (the 512-bit family,
 * rows_avx512.c) puts each 512 elements' two 256s side by side instead, vector
 * by vector: 64 bytes a vector, the first 256's 32 bytes then the second's, so
 * that a 512-bit register loads a vector of both (a last 256 without a
 * partner as above). Then one float per block of 32 (its
 * scale d), in element order; then, where the family asks for them, one float
 * per block, d * (sum of its signed codes), and one more per block, d * (sum
 * of the codes of its first 16 elements), which Q6_K's scales per 16 need.
 * For files compiled with AVX2.
 */
#ifndef LARES_QUANT_ROWS_X86_H
#define LARES_QUANT_ROWS_X86_H

#include "quant/kernels.h"
#include "quant/kquant_impl.h"
#include "quant/q8_avx2.h"
#include "quant/rows_types.h"

#include <immintrin.h>
#include <string.h>

#define FORCE_INLINE static inline __attribute__((always_inline))
#define SUPER        256

/* where the 4 bytes of vector vi of block g's codes go in a row of k (wide:
 * the 512-bit family's layout) */
static inline size_t rows256_at(int64_t g, int vi, int64_t k, bool wide) {
    const int64_t s = g / 8; /* the 256 */
    if (wide && s / 2 < k / (2 * SUPER)) {
        return (size_t)(s / 2) * 2 * SUPER + 64 * (size_t)vi + 32 * (size_t)(s % 2) +
               4 * (size_t)(g % 8);
    }
    if (s < k / SUPER) {
        return (size_t)s * SUPER + 32 * (size_t)vi + 4 * (size_t)(g % 8);
    }
    return (size_t)g * QUANT_PANEL_GROUP + 4 * (size_t)vi;
}

/* the row in the layout above; sums: also the block sums and half sums after
 * the scales */
static inline void rows256_from_float(const float *restrict x, int64_t k, void *restrict row,
                                      uint8_t bias, bool sums, bool wide) {
    uint8_t *codes = row;
    const int64_t n_blocks = k / QUANT_PANEL_GROUP;
    float *d = (float *)(void *)(codes + k);
    for (int64_t g = 0; g < n_blocks; g++) {
        __m256i q[4];
        /* the codes of vec_dot's Q8_0 activations, and their fp16-rounded scale */
        d[g] = _cvtsh_ss(_cvtss_sh(q8_codes_avx2(x + g * QUANT_PANEL_GROUP, q), 0));
        if (sums) {
            /* q[0], q[1]: elements 0..15, q[2], q[3]: 16..31 */
            const __m256i h0 = _mm256_add_epi32(q[0], q[1]), h1 = _mm256_add_epi32(q[2], q[3]);
            int32_t l0[8], l1[8];
            _mm256_storeu_si256((__m256i *)(void *)l0, h0);
            _mm256_storeu_si256((__m256i *)(void *)l1, h1);
            const int32_t first = l0[0] + l0[1] + l0[2] + l0[3] + l0[4] + l0[5] + l0[6] + l0[7];
            const int32_t second = l1[0] + l1[1] + l1[2] + l1[3] + l1[4] + l1[5] + l1[6] + l1[7];
            d[n_blocks + g] = d[g] * (float)(first + second);
            d[2 * n_blocks + g] = d[g] * (float)first;
        }
        uint8_t c[32];
        _mm256_storeu_si256((__m256i *)(void *)c,
                            _mm256_xor_si256(q8_pack_avx2(q), _mm256_set1_epi8((char)bias)));
        for (int vi = 0; vi < 8; vi++) {
            memcpy(codes + rows256_at(g, vi, k, wide), c + 4 * vi, 4);
        }
    }
}

/* the row back as Q8_0 blocks */
static inline void rows256_to_q8_0(const void *restrict row, int64_t k, void *restrict blocks,
                                   uint8_t bias, bool wide) {
    const uint8_t *codes = row;
    const float *d = (const float *)(const void *)(codes + k);
    block_q8_0 *out = blocks;
    for (int64_t g = 0; g < k / QUANT_PANEL_GROUP; g++) {
        uint8_t c[32];
        for (int vi = 0; vi < 8; vi++) {
            memcpy(c + 4 * vi, codes + rows256_at(g, vi, k, wide), 4);
        }
        out[g].d = (lares_f16)_cvtss_sh(d[g], 0);
        for (int e = 0; e < 32; e++) {
            out[g].qs[e] = (int8_t)(c[e] ^ bias);
        }
    }
}

/* the block sums of the row's whole 256s (made with sums: quant_rows_fmt.to_sums) */
static inline void rows256_to_sums(const void *restrict row, int64_t k, float *restrict sums) {
    const float *s = (const float *)(const void *)((const uint8_t *)row + k) + k / QUANT_PANEL_GROUP;
    memcpy(sums, s, sizeof(float) * (size_t)(8 * (k / SUPER)));
}

/* the eight blocks' fp16 scales, bb bytes apart, as floats */
FORCE_INLINE __m256 scales8(const uint8_t *p, size_t bb) {
    lares_f16 d[8];
#pragma GCC unroll 8
    for (int b = 0; b < 8; b++) {
        memcpy(&d[b], p + (size_t)b * bb, 2);
    }
    return _mm256_cvtph_ps(_mm_setr_epi16((short)d[0], (short)d[1], (short)d[2], (short)d[3],
                                          (short)d[4], (short)d[5], (short)d[6], (short)d[7]));
}

/* word j of the 16 bytes at p + b * bb, for blocks b = 0..7, in t[j] */
FORCE_INLINE void transpose8x4(const uint8_t *p, size_t bb, __m256i t[4]) {
    __m256i y[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        y[i] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + i * bb))),
            _mm_loadu_si128((const __m128i *)(const void *)(p + (4 + (size_t)i) * bb)), 1);
    }
    const __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
    t[0] = _mm256_unpacklo_epi64(t0, t2);
    t[1] = _mm256_unpackhi_epi64(t0, t2);
    t[2] = _mm256_unpacklo_epi64(t1, t3);
    t[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* the 32 nibbles of a Q4_0 block's qs as codes 0..15 in element order (low
 * nibbles are elements 0..15, high ones 16..31) */
FORCE_INLINE __m256i q4_0_codes(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs);
    return _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1),
        _mm256_set1_epi8(0x0f));
}

/* Eight blocks' 16 bytes of nibbles, bb bytes apart at qs (byte i: element
 * i in the low nibble, i + 16 in the high), as codes 0..15 in the eight
 * vectors of the layout */
FORCE_INLINE void eight_nibbles(const uint8_t *qs, size_t bb, __m256i v[8]) {
    __m256i w[4];
    transpose8x4(qs, bb, w);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_and_si256(w[j], m4);
        v[j + 4] = _mm256_and_si256(_mm256_srli_epi16(w[j], 4), m4);
    }
}

/* the 32-bit words at p, p + bb, p + 2 bb and p + 3 bb */
FORCE_INLINE __m128i words4(const uint8_t *p, size_t bb) {
    const __m128i a = _mm_unpacklo_epi32(_mm_loadu_si32(p), _mm_loadu_si32(p + bb));
    const __m128i b = _mm_unpacklo_epi32(_mm_loadu_si32(p + 2 * bb), _mm_loadu_si32(p + 3 * bb));
    return _mm_unpacklo_epi64(a, b);
}

/* 16 added to the codes of the layout whose fifth bit is set: bit e of each
 * Q5 block's 32-bit qh (bb bytes apart at qh) is element e's. Vector j holds
 * elements 4j .. 4j + 3 of each lane's block, so it takes bits 4 (j % 2) ..
 * 4 (j % 2) + 3 of the lane's qh byte j / 2, each byte tested against its own
 * bit. */
FORCE_INLINE void eight_fifth_bits(const uint8_t *qh, size_t bb, __m256i v[8]) {
    /* the words put together in registers: made from eight integers
     * (_mm256_setr_epi32), GCC stored them to the stack and loaded them back
     * as one vector, a failed store forwarding per 256 elements (Q5_1 one
     * row at half the row tiles' speed) */
    const __m256i words = _mm256_inserti128_si256(_mm256_castsi128_si256(words4(qh, bb)),
                                                  words4(qh + 4 * bb, bb), 1);
    /* byte m of each lane's word into all four of its bytes (VPSHUFB indexes
     * within 128 bits: lane L of a half starts at byte 4L) */
    const __m256i lane = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404,
                                           0x08080808, 0x0c0c0c0c);
    const __m256i low = _mm256_set1_epi32(0x08040201), high = _mm256_set1_epi32((int)0x80402010u);
    const __m256i k16 = _mm256_set1_epi8(16);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        const __m256i x =
            _mm256_shuffle_epi8(words, _mm256_add_epi8(lane, _mm256_set1_epi8((char)m)));
        const __m256i lo = _mm256_cmpeq_epi8(_mm256_and_si256(x, low), low);
        const __m256i hi = _mm256_cmpeq_epi8(_mm256_and_si256(x, high), high);
        v[2 * m] = _mm256_or_si256(v[2 * m], _mm256_and_si256(lo, k16));
        v[2 * m + 1] = _mm256_or_si256(v[2 * m + 1], _mm256_and_si256(hi, k16));
    }
}

/* One Q5 block's codes 0..31 in element order: its nibbles (q4_0_codes) with
 * 16 where bit e of its qh is set */
FORCE_INLINE __m256i q5_codes(const uint8_t *qs, const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    const __m256i sel = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                           0x0303030303030303ll);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel), bits);
    return _mm256_or_si256(q4_0_codes(qs), _mm256_and_si256(_mm256_cmpeq_epi8(x, bits),
                                                             _mm256_set1_epi8(16)));
}

/* Eight blocks of a type of unsigned codes (rows_unsigned) as the eight
 * vectors of the layout (codes 0..15, or 0..31 with the fifth bits), their
 * scales and (rows_has_min) their minimums */
FORCE_INLINE void eight_unsigned(enum rows_type t, const uint8_t *p, __m256i v[8], __m256 *dw,
                                 __m256 *mw) {
    const size_t bb = rows_block_bytes(t);
    eight_nibbles(p + rows_qs_at(t), bb, v);
    if (rows_five_bits(t)) {
        eight_fifth_bits(p + rows_qh_at(t), bb, v);
    }
    *dw = scales8(p, bb);
    if (rows_has_min(t)) {
        *mw = scales8(p + offsetof(block_q4_1, m), bb); /* block_q5_1's m alike */
    }
}

/* One block of such a type: its unsigned codes in element order */
FORCE_INLINE __m256i block_unsigned(enum rows_type t, const uint8_t *p) {
    return rows_five_bits(t) ? q5_codes(p + rows_qs_at(t), p + rows_qh_at(t))
                             : q4_0_codes(p + rows_qs_at(t));
}

/* One block's minimum (rows_has_min) over 8: its m s_a spread over the eight
 * lanes of a block's sums */
FORCE_INLINE float block_min_eighth(const uint8_t *p) {
    lares_f16 m16;
    memcpy(&m16, p + offsetof(block_q4_1, m), sizeof m16);
    return 0.125f * _cvtsh_ss(m16);
}

/* The IQ4 codebook (kq_iq4nl_values) in both 128-bit lanes for VPSHUFB, each
 * byte xor bias (0x80: the values plus 128, 1..241 unsigned) */
FORCE_INLINE __m256i iq4_codebook(uint8_t bias) {
    return _mm256_xor_si256(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)kq_iq4nl_values)),
        _mm256_set1_epi8((char)bias));
}

/* Eight blocks of IQ4 indices bb bytes apart (qs byte i: element i in the
 * low nibble, i + 16 in the high, as Q4_0) as the codebook's values (xor
 * bias) in the eight vectors of the layout */
FORCE_INLINE void eight_iq4(const uint8_t *qs, size_t bb, __m256i v[8], uint8_t bias) {
    __m256i w[4];
    transpose8x4(qs, bb, w);
    const __m256i m4 = _mm256_set1_epi8(0x0f), book = iq4_codebook(bias);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_shuffle_epi8(book, _mm256_and_si256(w[j], m4));
        v[j + 4] = _mm256_shuffle_epi8(book, _mm256_and_si256(_mm256_srli_epi16(w[j], 4), m4));
    }
}

/* Q4_K / Q5_K: the 6-bit scales and minimums of the eight sub-blocks, as
 * bytes 0..7 (scales) and 8..15 (minimums). Of the 12 bytes at s, as 32-bit
 * words u0 u1 u2 (kq_scale_min_k4): scale and minimum j < 4 are the low 6
 * bits of byte j of u0 and u1; for j >= 4 the low (scale) and high (minimum)
 * nibble of byte j - 4 of u2 hold their low 4 bits, and the top 2 bits of
 * byte j - 4 of u0 (scale) and u1 (minimum) their high 2. s is followed by 4
 * more bytes. */
FORCE_INLINE __m128i scales_mins_k4(const uint8_t *s) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)s);
    /* u0, u2, u1, u2 >> 4 */
    const __m128i low =
        _mm_srlv_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
    /* the top 2 bits of u0's and u1's bytes as bits 4, 5 of words 1 and 3 */
    const __m128i top =
        _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                      _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(
        _mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)), top);
}

/* the 8 lanes of v added */
FORCE_INLINE float hsum8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

#endif /* LARES_QUANT_ROWS_X86_H */
