/*
 * Block layouts, byte for byte as GGUF files store them (GGML's formats).
 * Scales are fp16 (lares_f16) unless noted. Every struct has its size pinned.
 *
 * Legacy 32-element blocks, element j of a block:
 *   Q4_0  qs[j % 16] low nibble for j < 16, high nibble for j >= 16;
 *         value = (q - 8) * d
 *   Q4_1  same nibbles; value = q * d + m
 *   Q5_0  the 4 low bits as Q4_0, bit 4 is bit j of the 32-bit qh (little-endian);
 *         value = (q - 16) * d
 *   Q5_1  same bits; value = q * d + m
 *   Q8_0  value = qs[j] * d
 *   Q8_1  as Q8_0 plus s = d * sum(qs), an activation format for the *_1 types
 */
#ifndef LARES_QUANT_BLOCKS_H
#define LARES_QUANT_BLOCKS_H

#include "quant/half.h"

#include <assert.h>

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K  256 /* super-block of the K-quants */
#define K_SCALE_SIZE 12
#define QK4_NL 32

typedef struct block_q4_0 {
    lares_f16 d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

typedef struct block_q4_1 {
    lares_f16 d;
    lares_f16 m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

typedef struct block_q5_0 {
    lares_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

typedef struct block_q5_1 {
    lares_f16 d;
    lares_f16 m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

typedef struct block_q8_0 {
    lares_f16 d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

typedef struct block_q8_1 {
    lares_f16 d;
    lares_f16 s; /* d * sum(qs) */
    int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

/*
 * K-quants: 256-element super-blocks of 16 or 8 sub-blocks with quantized
 * sub-block scales (and mins). Layouts as GGML's ggml-common.h (sizes and
 * element orders verified against derived/ggml-quant-test-vectors.gguf by
 * tests/test_kquant.c). Element e (0..255) of a super-block:
 *   Q2_K  bits 2 * ((e % 128) / 32) of qs[32 * (e / 128) + e % 32];
 *         value = d * (scales[e / 16] & 15) * q - dmin * (scales[e / 16] >> 4)
 *   Q3_K  low 2 bits as Q2_K, bit 2 is bit e / 32 of hmask[e % 32], the level is
 *         q - 4 when that bit is clear, q otherwise; value = d * (s[e / 16] - 32) * level
 *         (6-bit s: see kq_scales_q3 in quant/kquant_impl.h)
 *   Q4_K  nibble (e % 64) / 32 (low first) of qs[32 * (e / 64) + e % 32];
 *         value = d * sc[e / 32] * q - dmin * m[e / 32] (6-bit sc, m: kq_scale_min_k4)
 *   Q5_K  low 4 bits as Q4_K, bit 4 is bit e / 32 of qh[e % 32]
 *   Q6_K  part p = (e % 128) / 32, l = e % 32, h = e / 128: nibble p / 2 of
 *         ql[64 h + 32 (p % 2) + l], bits 4-5 are bits 2p..2p+1 of qh[32 h + l];
 *         value = d * scales[e / 16] * (q - 32)
 *   Q8_K  value = d * qs[e]; bsums[g] = sum of qs[16 g .. 16 g + 15]
 * IQ4_NL (32 elements) and IQ4_XS (256, sub-blocks of 32): element j of a
 * 32-element sub-block is the low nibble of qs[j] for j < 16, the high nibble
 * of qs[j - 16] otherwise, an index into the 16-value codebook; IQ4_XS scale of
 * sub-block i = (scales_l[i / 2] nibble i % 2) | (bits 2i..2i+1 of scales_h) << 4, - 32.
 */

/* 2.625 bits: 16 sub-blocks of 16, 4-bit scale and 4-bit min each */
typedef struct block_q2_K {
    uint8_t scales[QK_K / 16]; /* low nibble scale, high nibble min */
    uint8_t qs[QK_K / 4];      /* 2-bit quants */
    lares_f16 d;               /* super-block scale of the scales */
    lares_f16 dmin;            /* super-block scale of the mins */
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

/* 3.4375 bits: 16 sub-blocks of 16, 6-bit scales */
typedef struct block_q3_K {
    uint8_t hmask[QK_K / 8]; /* high bit of each quant */
    uint8_t qs[QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];      /* 16 6-bit scales */
    lares_f16 d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

/* 4.5 bits: 8 sub-blocks of 32, 6-bit scales and mins */
typedef struct block_q4_K {
    lares_f16 d;
    lares_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

/* 5.5 bits */
typedef struct block_q5_K {
    lares_f16 d;
    lares_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

/* 6.5625 bits: 16 sub-blocks of 16, 8-bit scales */
typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];     /* low 4 bits */
    uint8_t qh[QK_K / 4];     /* high 2 bits */
    int8_t scales[QK_K / 16];
    lares_f16 d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

/* activations for the K-quant dot products */
typedef struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16]; /* sums of groups of 16 */
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

/* 4.5 bits, non-linear: 32 elements, 4-bit indices into a 16-entry table */
typedef struct block_iq4_nl {
    lares_f16 d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

/* 4.25 bits: 256 elements, 8 sub-blocks of 32 with 6-bit scales */
typedef struct block_iq4_xs {
    lares_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

#endif /* LARES_QUANT_BLOCKS_H */
