/*
 * The few-row product (quant.h: quant_rows_fmt) on AArch64: generation's
 * mat-vec and several sequences decoding together, for Q4_0, Q5_0, Q4_1,
 * Q5_1, Q8_0, IQ4_NL, IQ4_XS, Q4_K, Q5_K and Q6_K, with SDOT where the CPU
 * has the dot-product extension and without it elsewhere (groups_dot). Only
 * the functions named *dotprod* carry SDOT (tests/cross/run_aarch64.sh
 * checks the objects).
 *
 * One weight row is walked four blocks of 32 (128 elements) at a time, in
 * the x86 families' layout (rows_x86.h): the four blocks are decoded once by
 * the GEMMs' decoders (gemm_neon_decode.h: value = sw * v - mw) and their
 * 32-bit words transposed into eight registers, register v lane i holding
 * elements 4v .. 4v + 3 of block i; each activation row, stored in the same
 * order, meets them in eight SDOT into one register whose lane i sums block
 * i, so that one conversion, one multiplication by the row's four block
 * scales and one FMA by the weights' make floats of 128 products, and the
 * types with a minimum (Q4_1, Q5_1, Q4_K, Q5_K) add it with one more FMA by
 * the row's block sums (d * sum of the codes). A K-quant or IQ4_XS
 * super-block is two such walks, its sub-blocks of 32 the blocks, with the
 * scales unpacked once for both. Q6_K's scales are per 16 elements: registers
 * 0-3 hold the first halves of its four sub-blocks and 4-7 the second, so
 * each row takes two sums, each with its own scales. A row whose blocks are
 * not a multiple of four ends with two (k is a multiple of 64), kept in
 * element order and summed block by block.
 *
 * Every activation row runs the same instructions in the same order whatever
 * the number of rows, and the integer sums are exact, so a row's result is
 * the same alone and in a batch, and with SDOT or without: a sequence's
 * logits do not depend on what it is decoded with (tests/test_rows.c checks
 * both bit for bit). docs/kernels.md, "The few-row product on AArch64".
 *
 * Layout of an activation row: its k codes (signed: SDOT multiplies signed
 * by signed, so no offset), each whole four blocks as eight 16-byte groups
 * (byte 4i + e of group v: element 4v + e of block i), the last two blocks in
 * element order; then one float per block of 32, its scale d rounded to fp16
 * as vec_dot's Q8_0 activations have it, then one float per block, d * (sum
 * of its codes).
 */
#include "quant/gemm_neon_decode.h"
#include "quant/q8_neon.h"
#include "quant/rows_kinds.h"

#include <string.h>

#define FORCE_INLINE static inline __attribute__((always_inline))
#define SUPER        256

/* ---- activations ---- */

FORCE_INLINE const float *row_scales(const uint8_t *row, int64_t k) {
    return (const float *)(const void *)(row + k);
}

/* where element 0 of block b's words sit, and how far apart (rows format:
 * the whole fours of blocks interleaved, the last two in element order) */
FORCE_INLINE size_t block_at(int64_t b, int64_t nb, size_t *word_step) {
    if (b < nb / 4 * 4) {
        *word_step = 16;
        return (size_t)(32 * (b - b % 4) + 4 * (b % 4));
    }
    *word_step = 4;
    return (size_t)(32 * b);
}

static void rows_from_float(const float *restrict x, int64_t k, void *restrict row) {
    int8_t *codes = row;
    const int64_t nb = k / 32;
    float *d = (float *)(void *)((uint8_t *)row + k);
    for (int64_t b = 0; b < nb; b++) {
        int8_t c[32];
        int half[2];
        const float db = f16_to_f32(f32_to_f16(q8_block_neon(x + 32 * b, c, half)));
        d[b] = db;
        d[nb + b] = db * (float)(half[0] + half[1]);
        size_t step;
        const size_t at = block_at(b, nb, &step);
        for (int w = 0; w < 8; w++) {
            memcpy(codes + at + (size_t)w * step, c + 4 * w, 4);
        }
    }
}

static void rows_to_q8_0(const void *restrict row, int64_t k, void *restrict blocks) {
    const float *d = row_scales(row, k);
    const int64_t nb = k / 32;
    block_q8_0 *out = blocks;
    for (int64_t b = 0; b < nb; b++) {
        out[b].d = f32_to_f16(d[b]);
        size_t step;
        const size_t at = block_at(b, nb, &step);
        for (int w = 0; w < 8; w++) {
            memcpy(out[b].qs + 4 * w, (const int8_t *)row + at + (size_t)w * step, 4);
        }
    }
}

static void rows_to_sums(const void *restrict row, int64_t k, float *restrict sums) {
    memcpy(sums, row_scales(row, k) + k / 32, sizeof(float) * (size_t)(8 * (k / SUPER)));
}

static const quant_rows_fmt rows_fmt = {
    .from_float = rows_from_float, .to_q8_0 = rows_to_q8_0, .to_sums = rows_to_sums};

/* ---- weights: four blocks of 32 in registers ---- */

typedef struct quad {
    int8x16_t g[8]; /* group v, lane i: elements 4v .. 4v + 3 of block i */
    float32x4_t sw; /* lane i: block i's scale */
    float32x4_t mw; /* lane i: its minimum (value = sw * v + mw) */
} quad;

/* out[w] lane i = 32-bit word w of in[i] */
FORCE_INLINE void words_4x4(const int8x16_t in[4], int8x16_t out[4]) {
    const int32x4_t a = vreinterpretq_s32_s8(in[0]), b = vreinterpretq_s32_s8(in[1]);
    const int32x4_t c = vreinterpretq_s32_s8(in[2]), d = vreinterpretq_s32_s8(in[3]);
    const int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(a, b)); /* a0 b0 a2 b2 */
    const int64x2_t t1 = vreinterpretq_s64_s32(vtrn2q_s32(a, b)); /* a1 b1 a3 b3 */
    const int64x2_t t2 = vreinterpretq_s64_s32(vtrn1q_s32(c, d));
    const int64x2_t t3 = vreinterpretq_s64_s32(vtrn2q_s32(c, d));
    out[0] = vreinterpretq_s8_s64(vtrn1q_s64(t0, t2));
    out[1] = vreinterpretq_s8_s64(vtrn1q_s64(t1, t3));
    out[2] = vreinterpretq_s8_s64(vtrn2q_s64(t0, t2));
    out[3] = vreinterpretq_s8_s64(vtrn2q_s64(t1, t3));
}

/* Four blocks' codes in element order (lo[i]: block i's elements 0..15,
 * hi[i]: 16..31) as the activations' eight groups: g[v] lane i holds
 * elements 4v .. 4v + 3 of block i */
FORCE_INLINE void blocks_to_groups(const int8x16_t lo[4], const int8x16_t hi[4], int8x16_t g[8]) {
    words_4x4(lo, g);
    words_4x4(hi, g + 4);
}

/* the fp16 words at p + i * bb for i < n (4, or 2: the rest 0) as floats */
FORCE_INLINE float32x4_t f16_words(const uint8_t *p, size_t bb, const int n) {
    uint16_t h[4] = {0};
#pragma GCC unroll 4
    for (int i = 0; i < n; i++) {
        memcpy(&h[i], p + (size_t)i * bb, sizeof h[i]);
    }
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* block b of a legacy type (or IQ4_NL) in element order: elements 0..15 in
 * *lo, 16..31 in *hi (the decoders' scalar scales go unused) */
FORCE_INLINE void legacy_block(enum rows_type t, const uint8_t *b, int8x16_t *lo, int8x16_t *hi) {
    float sw, mw;
    switch (t) {
    case R_Q4_0:
        dec_q4_0(b, lo, hi, &sw, &mw);
        break;
    case R_Q5_0:
        dec_q5_0(b, lo, hi, &sw, &mw);
        break;
    case R_Q4_1:
        dec_q4_1(b, lo, hi, &sw, &mw);
        break;
    case R_Q5_1:
        dec_q5_1(b, lo, hi, &sw, &mw);
        break;
    case R_Q8_0:
        dec_q8_0(b, lo, hi, &sw, &mw);
        break;
    default: /* R_IQ4_NL */
        dec_iq4_nl(b, lo, hi, &sw, &mw);
        break;
    }
}

/* the scales (d first in every legacy block) and minimums (Q4_1 and Q5_1:
 * m after d) of n blocks from p */
FORCE_INLINE void legacy_scales(enum rows_type t, const uint8_t *p, const int n, float32x4_t *sw,
                                float32x4_t *mw) {
    const size_t bb = rows_block_bytes(t);
    *sw = f16_words(p, bb, n);
    *mw = rows_has_min(t) ? f16_words(p + 2, bb, n) : vdupq_n_f32(0);
}

/* Blocks b0 .. b0 + 3 of a legacy row w (or IQ4_NL) as a quad. The types
 * whose codes are the nibbles of 16 bytes (Q4_0, Q4_1, IQ4_NL) transpose
 * those bytes' words before splitting them (byte j: element j low, j + 16
 * high, so word w's low nibbles are group w and its high ones group 4 + w):
 * one transpose of four registers instead of two of the decoded codes. */
FORCE_INLINE void legacy_quad(enum rows_type t, const uint8_t *w, int64_t b0, quad *q) {
    const size_t bb = rows_block_bytes(t);
    const uint8_t *p = w + (size_t)b0 * bb;
    if (t == R_Q4_0 || t == R_Q4_1 || t == R_IQ4_NL) {
        const size_t qs = t == R_IQ4_NL ? offsetof(block_iq4_nl, qs) : rows_qs_at(t);
        int8x16_t raw[4], tw[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            raw[i] = vld1q_s8((const int8_t *)(p + (size_t)i * bb + qs));
        }
        words_4x4(raw, tw);
        const int8x16_t book = vld1q_s8(iq4_s8);
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const uint8x16_t u = vreinterpretq_u8_s8(tw[v]);
            const uint8x16_t lo = vandq_u8(u, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(u, 4);
            if (t == R_IQ4_NL) {
                q->g[v] = vqtbl1q_s8(book, lo);
                q->g[4 + v] = vqtbl1q_s8(book, hi);
            } else if (t == R_Q4_0) {
                q->g[v] = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(8));
                q->g[4 + v] = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(8));
            } else {
                q->g[v] = vreinterpretq_s8_u8(lo);
                q->g[4 + v] = vreinterpretq_s8_u8(hi);
            }
        }
    } else {
        int8x16_t lo[4], hi[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            legacy_block(t, p + (size_t)i * bb, &lo[i], &hi[i]);
        }
        blocks_to_groups(lo, hi, q->g);
    }
    legacy_scales(t, p, 4, &q->sw, &q->mw);
}

/* The last two blocks' walk, in element order: the products of a block of
 * 32 (w0: elements 0..15, w1: 16..31) with the activation codes at a, summed
 * into the lanes: by SDOT, or on a CPU without it by SMULL/SMLAL pairs in
 * int16 lanes (at most 2 * 128 * 127) widened by SADDLP/SADALP. The lanes
 * hold other parts of the sum, the sum is the same integer, so the two walks
 * give the same floats. */
FORCE_INLINE int32x4_t block_dot(int8x16_t w0, int8x16_t w1, const int8_t *a, const bool sdot) {
    const int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16);
    if (sdot) {
        return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, a0), w1, a1);
    }
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(a0)), w0, a0);
    const int16x8_t q = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(a1)), w1, a1);
    return vpadalq_s16(vpaddlq_s16(p), q);
}

/* Groups g[0 .. n) (n even) against the activation groups at a: lane i the
 * sum of block i's products in them. By SDOT, one register for all four
 * blocks; without it SMULL/SMLAL pairs in int16 (two products, at most 2 *
 * 128 * 127) widened by SADALP, blocks 0-1 in one register and 2-3 in
 * another, added pairwise at the end: the same integers. */
FORCE_INLINE int32x4_t groups_dot(const int8x16_t *g, const int n, const int8_t *a,
                                  const bool sdot) {
    if (sdot) {
        int32x4_t s = vdupq_n_s32(0);
#pragma GCC unroll 8
        for (int v = 0; v < n; v++) {
            s = vdotq_s32(s, g[v], vld1q_s8(a + 16 * v));
        }
        return s;
    }
    int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
#pragma GCC unroll 4
    for (int v = 0; v < n; v += 2) {
        const int8x16_t a0 = vld1q_s8(a + 16 * v), a1 = vld1q_s8(a + 16 * (v + 1));
        const int16x8_t p = vmlal_s8(vmull_s8(vget_low_s8(g[v]), vget_low_s8(a0)),
                                     vget_low_s8(g[v + 1]), vget_low_s8(a1));
        const int16x8_t q = vmlal_high_s8(vmull_high_s8(g[v], a0), g[v + 1], a1);
        lo = vpadalq_s16(lo, p);
        hi = vpadalq_s16(hi, q);
    }
    return vpaddq_s32(lo, hi);
}

/* acc[c] plus activation row c's products with the quad of blocks b0 ..
 * b0 + 3 of the row (interleaved); with_min: add the minimums */
FORCE_INLINE void quad_products(const bool sdot, const int NC, const quad *q, bool with_min,
                                const uint8_t *restrict act, size_t ab, int64_t k, int64_t b0,
                                float32x4_t acc[8]) {
    const int64_t nb = k / 32;
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const uint8_t *row = act + (size_t)c * ab;
        const float *d = row_scales(row, k) + b0;
        const int32x4_t sum = groups_dot(q->g, 8, (const int8_t *)row + 32 * b0, sdot);
        acc[c] = vfmaq_f32(acc[c], vmulq_f32(vcvtq_f32_s32(sum), vld1q_f32(d)), q->sw);
        if (with_min) {
            acc[c] = vfmaq_f32(acc[c], vld1q_f32(d + nb), q->mw);
        }
    }
}

/* The same for the row's last two blocks b0, b0 + 1 (element order), in
 * lanes 0 and 1 */
FORCE_INLINE void pair_products(enum rows_type t, const bool sdot, const int NC,
                                const uint8_t *restrict w, bool with_min,
                                const uint8_t *restrict act, size_t ab, int64_t k, int64_t b0,
                                float32x4_t acc[8]) {
    const size_t bb = rows_block_bytes(t);
    const uint8_t *p = w + (size_t)b0 * bb;
    int8x16_t lo[2], hi[2];
    legacy_block(t, p, &lo[0], &hi[0]);
    legacy_block(t, p + bb, &lo[1], &hi[1]);
    float32x4_t sw, mw;
    legacy_scales(t, p, 2, &sw, &mw);
    const int64_t nb = k / 32;
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const uint8_t *row = act + (size_t)c * ab;
        const int8_t *a = (const int8_t *)row + 32 * b0;
        const float *d = row_scales(row, k) + b0;
        const int32x4_t s0 = block_dot(lo[0], hi[0], a, sdot);
        const int32x4_t s1 = block_dot(lo[1], hi[1], a + 32, sdot);
        const int32x4_t sum = vpaddq_s32(vpaddq_s32(s0, s1), vdupq_n_s32(0));
        const float32x4_t da = vcombine_f32(vld1_f32(d), vdup_n_f32(0));
        acc[c] = vfmaq_f32(acc[c], vmulq_f32(vcvtq_f32_s32(sum), da), sw);
        if (with_min) {
            acc[c] = vfmaq_f32(acc[c], vcombine_f32(vld1_f32(d + nb), vdup_n_f32(0)), mw);
        }
    }
}

/* Q6_K: sub-blocks 4h .. 4h + 3 of super-block b, interleaved as a quad,
 * against the activations' four blocks of the same elements of super-block
 * sb; the scales of their first halves of 16 are sw0, of their second sw1.
 * Groups 0-3 hold the first halves, 4-7 the second, so each row takes two
 * sums with a lane per sub-block. */
FORCE_INLINE void q6_K_quad_products(const bool sdot, const int NC, const uint8_t *b, int h,
                                     float32x4_t sw0, float32x4_t sw1, const uint8_t *restrict act,
                                     size_t ab, int64_t k, int64_t sb, float32x4_t acc[8]) {
    int8x16_t lo[4], hi[4], g[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        lo[i] = dec_q6_K_16(b, h, i, 0);
        hi[i] = dec_q6_K_16(b, h, i, 1);
    }
    blocks_to_groups(lo, hi, g);
    const int64_t blk = sb * 8 + 4 * h; /* the first activation block */
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const uint8_t *row = act + (size_t)c * ab;
        const int8_t *a = (const int8_t *)row + 32 * blk;
        const float32x4_t da = vld1q_f32(row_scales(row, k) + blk);
        const int32x4_t s0 = groups_dot(g, 4, a, sdot), s1 = groups_dot(g + 4, 4, a + 64, sdot);
        acc[c] = vfmaq_f32(acc[c], vmulq_f32(vcvtq_f32_s32(s0), da), sw0);
        acc[c] = vfmaq_f32(acc[c], vmulq_f32(vcvtq_f32_s32(s1), da), sw1);
    }
}

/* eight bytes as floats times m, four a vector (unsigned, signed) */
FORCE_INLINE void bytes_times(uint8x8_t v, float m, float32x4_t out[2]) {
    const uint16x8_t w = vmovl_u8(v);
    out[0] = vmulq_n_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(w))), m);
    out[1] = vmulq_n_f32(vcvtq_f32_u32(vmovl_high_u16(w)), m);
}

FORCE_INLINE void sbytes_times(int8x8_t v, float m, float32x4_t out[2]) {
    const int16x8_t w = vmovl_s8(v);
    out[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), m);
    out[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(w)), m);
}

/* Q4_K / Q5_K (d, dmin and the scales in the same places): the eight
 * sub-blocks' d * scale and -dmin * min, unpacked from the 12 bytes four at a
 * time (kquant_impl.h: kq_scale_min_k4 has the layout): the low 6 bits of
 * words 0 and 1 are scales and mins 0..3, and scale (min) j + 4 is the low
 * (high) nibble of byte j of word 2 with the top 2 bits of byte j of word 0
 * (1) above it */
FORCE_INLINE void k4_scales(const uint8_t *b, float32x4_t sw[2], float32x4_t mw[2]) {
    uint32_t w[3];
    memcpy(w, KQ_FIELD(b, block_q4_K, scales), sizeof w); /* little-endian */
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, top = 0x30303030;
    const uint64_t sc = (uint64_t)(w[0] & m6) | (uint64_t)((w[2] & m4) | ((w[0] >> 2) & top)) << 32;
    const uint64_t mn = (uint64_t)(w[1] & m6) | (uint64_t)(((w[2] >> 4) & m4) | ((w[1] >> 2) & top))
                                                    << 32;
    bytes_times(vcreate_u8(sc), h2f(KQ_FIELD(b, block_q4_K, d)), sw);
    bytes_times(vcreate_u8(mn), -h2f(KQ_FIELD(b, block_q4_K, dmin)), mw);
}

/* IQ4_XS: the eight sub-blocks' d * (ls - 32), ls_j nibble j of scales_l
 * with bits 2j, 2j + 1 of scales_h above it (kq_iq4xs_scale) */
FORCE_INLINE void iq4_xs_scales(const uint8_t *b, float32x4_t sw[2]) {
    uint32_t sl;
    memcpy(&sl, KQ_FIELD(b, block_iq4_xs, scales_l), sizeof sl);
    const uint16_t sh = rd_u16le(KQ_FIELD(b, block_iq4_xs, scales_h));
    static const uint8_t twice[8] = {0, 0, 1, 1, 2, 2, 3, 3};
    static const int8_t nib_shift[8] = {0, -4, 0, -4, 0, -4, 0, -4};
    static const uint8_t half[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    static const int8_t pair_shift[8] = {0, -2, -4, -6, 0, -2, -4, -6};
    const uint8x8_t lo = vand_u8(
        vshl_u8(vtbl1_u8(vcreate_u8(sl), vld1_u8(twice)), vld1_s8(nib_shift)), vdup_n_u8(0x0f));
    const uint8x8_t hi = vand_u8(
        vshl_u8(vtbl1_u8(vcreate_u8(sh), vld1_u8(half)), vld1_s8(pair_shift)), vdup_n_u8(3));
    const int8x8_t ls = vsub_s8(vreinterpret_s8_u8(vorr_u8(lo, vshl_n_u8(hi, 4))), vdup_n_s8(32));
    sbytes_times(ls, h2f(KQ_FIELD(b, block_iq4_xs, d)), sw);
}

/* the super-blocks of a K-quant or IQ4_XS row */
FORCE_INLINE void super_dots(enum rows_type t, const bool sdot, const int NC, int64_t k,
                             const uint8_t *restrict w, const uint8_t *restrict act, size_t ab,
                             float32x4_t acc[8]) {
    const size_t sbb = rows_chunk_bytes(t);
    for (int64_t sb = 0; sb < k / SUPER; sb++) {
        const uint8_t *b = w + (size_t)sb * sbb;
        if (t == R_Q6_K) {
            /* d * the scales of 16 elements: even ones the sub-blocks' first
             * halves, odd ones their second, four sub-blocks a vector */
            const float d = h2f(KQ_FIELD(b, block_q6_K, d));
            const int8x16_t sc = vld1q_s8((const int8_t *)KQ_FIELD(b, block_q6_K, scales));
            float32x4_t s0[2], s1[2];
            sbytes_times(vget_low_s8(vuzp1q_s8(sc, sc)), d, s0);
            sbytes_times(vget_low_s8(vuzp2q_s8(sc, sc)), d, s1);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                q6_K_quad_products(sdot, NC, b, h, s0[h], s1[h], act, ab, k, sb, acc);
            }
            continue;
        }
        float32x4_t sw[2], mw[2];
        if (t == R_IQ4_XS) {
            iq4_xs_scales(b, sw);
            mw[0] = mw[1] = vdupq_n_f32(0);
        } else {
            k4_scales(b, sw, mw);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            quad q;
            int8x16_t lo[4], hi[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                if (t == R_IQ4_XS) {
                    dec_iq4_xs_sub(b, 4 * h + i, &lo[i], &hi[i]);
                } else {
                    dec_q45_K_sub(b, 4 * h + i, t == R_Q5_K, &lo[i], &hi[i]);
                }
            }
            blocks_to_groups(lo, hi, q.g);
            q.sw = sw[h];
            q.mw = mw[h];
            quad_products(sdot, NC, &q, t != R_IQ4_XS, act, ab, k, sb * 8 + 4 * h, acc);
        }
    }
}

/* One weight row w of type t against NC activation rows: y[c * ldy] */
FORCE_INLINE void row_dots(enum rows_type t, const bool sdot, const int NC, int64_t k,
                           const uint8_t *restrict w, const uint8_t *restrict act, size_t ab,
                           float *restrict y, size_t ldy) {
    float32x4_t acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        acc[c] = vdupq_n_f32(0);
    }
    if (t == R_Q4_K || t == R_Q5_K || t == R_Q6_K || t == R_IQ4_XS) {
        super_dots(t, sdot, NC, k, w, act, ab, acc);
    } else {
        const bool with_min = rows_has_min(t);
        const int64_t nb = k / 32;
        int64_t b0 = 0;
        for (; b0 + 4 <= nb; b0 += 4) {
            quad q;
            legacy_quad(t, w, b0, &q);
            quad_products(sdot, NC, &q, with_min, act, ab, k, b0, acc);
        }
        if (b0 < nb) { /* two blocks left: k is a multiple of 64 */
            pair_products(t, sdot, NC, w, with_min, act, ab, k, b0, acc);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = vaddvq_f32(acc[c]);
    }
}

/* The drive (rows_drive.h) hands the walk the type it was defined with; the
 * walk without SDOT is asked for with R_PLAIN added to the type. */
#define R_PLAIN 0x40

FORCE_INLINE void row_dots_either(enum rows_type tp, const int NC, int64_t k,
                                  const uint8_t *restrict w, const uint8_t *restrict act, size_t ab,
                                  float *restrict y, size_t ldy) {
    const int v = (int)tp;
    row_dots((enum rows_type)(v & ~R_PLAIN), (v & R_PLAIN) == 0, NC, k, w, act, ab, y, ldy);
}

#define ROW_DOTS row_dots_either
#include "quant/rows_drive.h"

#define ROWS_BOTH(T, R)                                                                            \
    ROWS_DEFINE(rows_##T##_dotprod, R)                                                             \
    ROWS_DEFINE(rows_##T##_neon, R | R_PLAIN)
ROWS_BOTH(q4_0, R_Q4_0)
ROWS_BOTH(q5_0, R_Q5_0)
ROWS_BOTH(q4_1, R_Q4_1)
ROWS_BOTH(q5_1, R_Q5_1)
ROWS_BOTH(q8_0, R_Q8_0)
ROWS_BOTH(iq4_nl, R_IQ4_NL)
ROWS_BOTH(iq4_xs, R_IQ4_XS)
ROWS_BOTH(q4_K, R_Q4_K)
ROWS_BOTH(q5_K, R_Q5_K)
ROWS_BOTH(q6_K, R_Q6_K)

void quant_install_rows_neon(quant_traits *t, bool dotprod) {
#define SET(id, T) t[id].rows = dotprod ? rows_##T##_dotprod : rows_##T##_neon
    SET(GGUF_TYPE_Q4_0, q4_0);
    SET(GGUF_TYPE_Q5_0, q5_0);
    SET(GGUF_TYPE_Q4_1, q4_1);
    SET(GGUF_TYPE_Q5_1, q5_1);
    SET(GGUF_TYPE_Q8_0, q8_0);
    SET(GGUF_TYPE_IQ4_NL, iq4_nl);
    SET(GGUF_TYPE_IQ4_XS, iq4_xs);
    SET(GGUF_TYPE_Q4_K, q4_K);
    SET(GGUF_TYPE_Q5_K, q5_K);
    SET(GGUF_TYPE_Q6_K, q6_K);
#undef SET
    const uint32_t types[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q5_0,   GGUF_TYPE_Q4_1,   GGUF_TYPE_Q5_1,
                              GGUF_TYPE_Q8_0, GGUF_TYPE_IQ4_NL, GGUF_TYPE_IQ4_XS, GGUF_TYPE_Q4_K,
                              GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        t[types[i]].rows_fmt = &rows_fmt;
    }
}
