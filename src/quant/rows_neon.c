/*
 * The few-row product (quant.h: quant_rows_fmt) on AArch64: generation's
 * mat-vec and several sequences decoding together, for Q4_0, Q5_0, Q4_1,
 * Q5_1, Q8_0, IQ4_NL, IQ4_XS, Q4_K, Q5_K and Q6_K, with SDOT where the CPU
 * has the dot-product extension and without it elsewhere (block_dot). Only
 * the functions named *dotprod* carry SDOT (tests/cross/run_aarch64.sh
 * checks the objects).
 *
 * One weight row is walked four blocks of 32 (128 elements) at a time: the
 * four blocks are decoded once into eight registers of signed codes
 * (gemm_neon_decode.h: value = sw * v - mw, the decoders the GEMMs use) and
 * each activation row meets them in eight SDOT, four int32 sums a block;
 * two rounds of pairwise adds leave one lane per block, so that one
 * conversion, one multiplication by the row's four block scales and one FMA
 * by the weights' make floats of 128 products, and the types with a minimum
 * (Q4_1, Q5_1, Q4_K, Q5_K) add it with one more FMA by the row's block sums
 * (d * sum of the codes). A K-quant or IQ4_XS super-block is two such walks,
 * its sub-blocks of 32 the blocks, with the scales unpacked once for both.
 * Q6_K's scales are per 16 elements, so its walk takes two sub-blocks at a
 * time, a lane per 16 (four SDOT of one register each), and repeats each
 * activation block's scale for its two halves. A row whose blocks are not a
 * multiple of four ends with two (k is a multiple of 64), the missing lanes
 * zero.
 *
 * Every activation row runs the same instructions in the same order whatever
 * the number of rows, and the integer sums are exact, so a row's result is
 * the same alone and in a batch, and with SDOT or without: a sequence's
 * logits do not depend on what it is decoded with (tests/test_rows.c checks
 * both bit for bit). docs/kernels.md, "The few-row product on AArch64".
 *
 * Layout of an activation row: its k codes in element order (signed: SDOT
 * multiplies signed by signed, so no offset), then one float per block of
 * 32, its scale d rounded to fp16 as vec_dot's Q8_0 activations have it, then
 * one float per block, d * (sum of its codes).
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

static void rows_from_float(const float *restrict x, int64_t k, void *restrict row) {
    int8_t *codes = row;
    const int64_t nb = k / 32;
    float *d = (float *)(void *)((uint8_t *)row + k);
    for (int64_t b = 0; b < nb; b++) {
        int half[2];
        const float db = f16_to_f32(f32_to_f16(q8_block_neon(x + 32 * b, codes + 32 * b, half)));
        d[b] = db;
        d[nb + b] = db * (float)(half[0] + half[1]);
    }
}

static void rows_to_q8_0(const void *restrict row, int64_t k, void *restrict blocks) {
    const float *d = row_scales(row, k);
    block_q8_0 *out = blocks;
    for (int64_t b = 0; b < k / 32; b++) {
        out[b].d = f32_to_f16(d[b]);
        memcpy(out[b].qs, (const int8_t *)row + 32 * b, 32);
    }
}

static void rows_to_sums(const void *restrict row, int64_t k, float *restrict sums) {
    memcpy(sums, row_scales(row, k) + k / 32, sizeof(float) * (size_t)(8 * (k / SUPER)));
}

static const quant_rows_fmt rows_fmt = {
    .from_float = rows_from_float, .to_q8_0 = rows_to_q8_0, .to_sums = rows_to_sums};

/* ---- weights: four blocks of 32 in registers ---- */

typedef struct quad {
    int8x16_t lo[4], hi[4]; /* block i's codes: elements 0..15, 16..31 */
    float32x4_t sw;         /* lane i: block i's scale */
    float32x4_t mw;         /* lane i: its minimum (value = sw * v + mw) */
} quad;

/* the fp16 words at p + i * bb for i < n (4, or 2: the rest 0) as floats */
FORCE_INLINE float32x4_t f16_words(const uint8_t *p, size_t bb, const int n) {
    uint16_t h[4] = {0};
#pragma GCC unroll 4
    for (int i = 0; i < n; i++) {
        memcpy(&h[i], p + (size_t)i * bb, sizeof h[i]);
    }
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* Blocks b0 .. b0 + n - 1 (n: 4, or 2) of a legacy row w (or IQ4_NL) as a
 * quad, the lanes past n zero (the decoders' scalar scales go unused) */
FORCE_INLINE void legacy_quad(enum rows_type t, const uint8_t *w, int64_t b0, const int n,
                              quad *q) {
    const size_t bb = rows_block_bytes(t);
    const uint8_t *p = w + (size_t)b0 * bb;
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        q->lo[i] = q->hi[i] = vdupq_n_s8(0);
        if (i >= n) {
            continue;
        }
        const uint8_t *b = p + (size_t)i * bb;
        float sw, mw;
        switch (t) {
        case R_Q4_0:
            dec_q4_0(b, &q->lo[i], &q->hi[i], &sw, &mw);
            break;
        case R_Q5_0:
            dec_q5_0(b, &q->lo[i], &q->hi[i], &sw, &mw);
            break;
        case R_Q4_1:
            dec_q4_1(b, &q->lo[i], &q->hi[i], &sw, &mw);
            break;
        case R_Q5_1:
            dec_q5_1(b, &q->lo[i], &q->hi[i], &sw, &mw);
            break;
        case R_Q8_0:
            dec_q8_0(b, &q->lo[i], &q->hi[i], &sw, &mw);
            break;
        default: /* R_IQ4_NL */
            dec_iq4_nl(b, &q->lo[i], &q->hi[i], &sw, &mw);
            break;
        }
    }
    /* d first in every legacy block; Q4_1 and Q5_1 keep m after it */
    q->sw = f16_words(p, bb, n);
    q->mw = rows_has_min(t) ? f16_words(p + 2, bb, n) : vdupq_n_f32(0);
}

/* The products of a block of 32 (w0: elements 0..15, w1: 16..31) with the
 * activation codes at a, summed into the lanes: by SDOT, or on a CPU without
 * it by SMULL/SMLAL pairs in int16 lanes (at most 2 * 128 * 127) widened by
 * SADDLP/SADALP. The lanes hold other parts of the sum, the sum is the same
 * integer, so the two walks give the same floats. */
FORCE_INLINE int32x4_t block_dot(int8x16_t w0, int8x16_t w1, const int8_t *a, const bool sdot) {
    const int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16);
    if (sdot) {
        return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, a0), w1, a1);
    }
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(a0)), w0, a0);
    const int16x8_t q = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(a1)), w1, a1);
    return vpadalq_s16(vpaddlq_s16(p), q);
}

/* the same for 16 elements */
FORCE_INLINE int32x4_t half_dot(int8x16_t v, const int8_t *a, const bool sdot) {
    const int8x16_t a0 = vld1q_s8(a);
    if (sdot) {
        return vdotq_s32(vdupq_n_s32(0), v, a0);
    }
    return vpaddlq_s16(vmlal_high_s8(vmull_s8(vget_low_s8(v), vget_low_s8(a0)), v, a0));
}

/* acc[c] plus activation row c's products with the quad, whose n (2 or 4)
 * blocks are blocks b0 .. b0 + n - 1 of the row; with_min: add the minimums */
FORCE_INLINE void quad_products(const bool sdot, const int NC, const quad *q, const int n,
                                bool with_min, const uint8_t *restrict act, size_t ab, int64_t k,
                                int64_t b0, float32x4_t acc[8]) {
    const int64_t nb = k / 32;
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const uint8_t *row = act + (size_t)c * ab;
        const int8_t *a = (const int8_t *)row + 32 * b0;
        const float *d = row_scales(row, k) + b0;
        int32x4_t s[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            s[i] = i < n ? block_dot(q->lo[i], q->hi[i], a + 32 * i, sdot) : vdupq_n_s32(0);
        }
        const int32x4_t sum = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
        float32x4_t da, sa;
        if (n == 4) {
            da = vld1q_f32(d);
            sa = vld1q_f32(d + nb);
        } else {
            da = vcombine_f32(vld1_f32(d), vdup_n_f32(0));
            sa = vcombine_f32(vld1_f32(d + nb), vdup_n_f32(0));
        }
        acc[c] = vfmaq_f32(acc[c], vmulq_f32(vcvtq_f32_s32(sum), da), q->sw);
        if (with_min) {
            acc[c] = vfmaq_f32(acc[c], sa, q->mw);
        }
    }
}

/* Q6_K: sub-blocks 4h + p0 and 4h + p0 + 1 (p0: 0 or 2) of super-block b as
 * four halves of 16, whose scales are sw, against the activation codes of
 * the same elements of super-block sb */
FORCE_INLINE void q6_K_pair_products(const bool sdot, const int NC, const uint8_t *b, int h,
                                     const int p0, float32x4_t sw, const uint8_t *restrict act,
                                     size_t ab, int64_t k, int64_t sb, float32x4_t acc[8]) {
    int8x16_t v[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        v[i] = dec_q6_K_16(b, h, p0 + i / 2, i % 2);
    }
    const int64_t blk = sb * 8 + 4 * h + p0; /* the first activation block */
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const uint8_t *row = act + (size_t)c * ab;
        const int8_t *a = (const int8_t *)row + 32 * blk;
        int32x4_t s[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            s[i] = half_dot(v[i], a + 16 * i, sdot);
        }
        const int32x4_t sum = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
        /* the two blocks' scales, each twice (blocks blk + 2, blk + 3 read
         * but unused: at the row's end the block sums, inside the row) */
        const float32x4_t d4 = vld1q_f32(row_scales(row, k) + blk);
        const float32x4_t da = vzip1q_f32(d4, d4);
        acc[c] = vfmaq_f32(acc[c], vmulq_f32(vcvtq_f32_s32(sum), da), sw);
    }
}

/* bytes of a super-block of the K-quants and IQ4_XS */
FORCE_INLINE size_t super_bytes(enum rows_type t) {
    return t == R_Q4_K   ? sizeof(block_q4_K)
           : t == R_Q5_K ? sizeof(block_q5_K)
           : t == R_Q6_K ? sizeof(block_q6_K)
                         : sizeof(block_iq4_xs);
}

/* eight bytes as floats times m, four a vector */
FORCE_INLINE void bytes_times(uint8x8_t v, float m, float32x4_t out[2]) {
    const uint16x8_t w = vmovl_u8(v);
    out[0] = vmulq_n_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(w))), m);
    out[1] = vmulq_n_f32(vcvtq_f32_u32(vmovl_high_u16(w)), m);
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
    const int16x8_t ls =
        vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(vorr_u8(lo, vshl_n_u8(hi, 4)))), vdupq_n_s16(32));
    const float d = h2f(KQ_FIELD(b, block_iq4_xs, d));
    sw[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(ls))), d);
    sw[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(ls)), d);
}

/* the super-blocks of a K-quant or IQ4_XS row */
FORCE_INLINE void super_dots(enum rows_type t, const bool sdot, const int NC, int64_t k,
                             const uint8_t *restrict w, const uint8_t *restrict act, size_t ab,
                             float32x4_t acc[8]) {
    const size_t sbb = super_bytes(t);
    for (int64_t sb = 0; sb < k / SUPER; sb++) {
        const uint8_t *b = w + (size_t)sb * sbb;
        if (t == R_Q6_K) {
            /* the sixteen scales of 16 elements, d * scale, four a pair of sub-blocks */
            const float d = h2f(KQ_FIELD(b, block_q6_K, d));
            const int8x16_t sc = vld1q_s8((const int8_t *)KQ_FIELD(b, block_q6_K, scales));
            const int16x8_t lo = vmovl_s8(vget_low_s8(sc)), hi = vmovl_high_s8(sc);
            const float32x4_t sw[4] = {vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d),
                                       vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d),
                                       vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d),
                                       vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d)};
            /* the halves one after the other, not unrolled: four copies of
             * eight rows' walk spilled registers to the stack */
#pragma GCC unroll 1
            for (int h = 0; h < 2; h++) {
                q6_K_pair_products(sdot, NC, b, h, 0, h ? sw[2] : sw[0], act, ab, k, sb, acc);
                q6_K_pair_products(sdot, NC, b, h, 2, h ? sw[3] : sw[1], act, ab, k, sb, acc);
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
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                if (t == R_IQ4_XS) {
                    dec_iq4_xs_sub(b, 4 * h + i, &q.lo[i], &q.hi[i]);
                } else {
                    dec_q45_K_sub(b, 4 * h + i, t == R_Q5_K, &q.lo[i], &q.hi[i]);
                }
            }
            q.sw = sw[h];
            q.mw = mw[h];
            quad_products(sdot, NC, &q, 4, t != R_IQ4_XS, act, ab, k, sb * 8 + 4 * h, acc);
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
            legacy_quad(t, w, b0, 4, &q);
            quad_products(sdot, NC, &q, 4, with_min, act, ab, k, b0, acc);
        }
        if (b0 < nb) { /* two blocks left: k is a multiple of 64 */
            quad q;
            legacy_quad(t, w, b0, 2, &q);
            quad_products(sdot, NC, &q, 2, with_min, act, ab, k, b0, acc);
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
