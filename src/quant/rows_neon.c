/*
 * The few-row product (quant.h: quant_rows_fmt) on AArch64 with the
 * dot-product extension: generation's mat-vec and several sequences decoding
 * together, for Q4_0, Q5_0, Q4_1, Q5_1, Q8_0, IQ4_NL, IQ4_XS, Q4_K, Q5_K and
 * Q6_K. Functions that carry SDOT are named *dotprod*
 * (tests/cross/run_aarch64.sh checks the objects).
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
 * the same alone and in a batch: a sequence's logits do not depend on what it
 * is decoded with (tests/test_rows.c checks it bit for bit).
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
        int sum;
        const float db = f16_to_f32(f32_to_f16(q8_block_neon(x + 32 * b, codes + 32 * b, &sum)));
        d[b] = db;
        d[nb + b] = db * (float)sum;
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

/* acc[c] plus activation row c's products with the quad, whose n (2 or 4)
 * blocks are blocks b0 .. b0 + n - 1 of the row; with_min: add the minimums */
FORCE_INLINE void quad_products(const int NC, const quad *q, const int n, bool with_min,
                                const uint8_t *restrict act, size_t ab, int64_t k, int64_t b0,
                                float32x4_t acc[8]) {
    const int64_t nb = k / 32;
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const uint8_t *row = act + (size_t)c * ab;
        const int8_t *a = (const int8_t *)row + 32 * b0;
        const float *d = row_scales(row, k) + b0;
        int32x4_t s[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            s[i] = vdupq_n_s32(0);
            if (i < n) {
                s[i] = vdotq_s32(s[i], q->lo[i], vld1q_s8(a + 32 * i));
                s[i] = vdotq_s32(s[i], q->hi[i], vld1q_s8(a + 32 * i + 16));
            }
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
FORCE_INLINE void q6_K_pair_products(const int NC, const uint8_t *b, int h, const int p0,
                                     float32x4_t sw, const uint8_t *restrict act, size_t ab,
                                     int64_t k, int64_t sb, float32x4_t acc[8]) {
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
            s[i] = vdotq_s32(vdupq_n_s32(0), v[i], vld1q_s8(a + 16 * i));
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

/* the super-blocks of a K-quant or IQ4_XS row */
FORCE_INLINE void super_dots(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                             const uint8_t *restrict act, size_t ab, float32x4_t acc[8]) {
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
                q6_K_pair_products(NC, b, h, 0, h ? sw[2] : sw[0], act, ab, k, sb, acc);
                q6_K_pair_products(NC, b, h, 2, h ? sw[3] : sw[1], act, ab, k, sb, acc);
            }
            continue;
        }
        float sw[8], mw[8] = {0};
        if (t == R_IQ4_XS) {
            const float d = h2f(KQ_FIELD(b, block_iq4_xs, d));
            for (int j = 0; j < 8; j++) {
                sw[j] = d * (float)kq_iq4xs_scale(b, j);
            }
        } else { /* Q4_K and Q5_K: d, dmin and the scales in the same places */
            uint8_t sc[8], mn[8];
            kq_scale_min_k4(KQ_FIELD(b, block_q4_K, scales), sc, mn);
            const float d = h2f(KQ_FIELD(b, block_q4_K, d));
            const float dmin = h2f(KQ_FIELD(b, block_q4_K, dmin));
            for (int j = 0; j < 8; j++) {
                sw[j] = d * (float)sc[j];
                mw[j] = -dmin * (float)mn[j];
            }
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
            q.sw = vld1q_f32(sw + 4 * h);
            q.mw = vld1q_f32(mw + 4 * h);
            quad_products(NC, &q, 4, t != R_IQ4_XS, act, ab, k, sb * 8 + 4 * h, acc);
        }
    }
}

/* One weight row w of type t against NC activation rows: y[c * ldy] */
FORCE_INLINE void row_dots(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                           const uint8_t *restrict act, size_t ab, float *restrict y, size_t ldy) {
    float32x4_t acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        acc[c] = vdupq_n_f32(0);
    }
    if (t == R_Q4_K || t == R_Q5_K || t == R_Q6_K || t == R_IQ4_XS) {
        super_dots(t, NC, k, w, act, ab, acc);
    } else {
        const bool with_min = rows_has_min(t);
        const int64_t nb = k / 32;
        int64_t b0 = 0;
        for (; b0 + 4 <= nb; b0 += 4) {
            quad q;
            legacy_quad(t, w, b0, 4, &q);
            quad_products(NC, &q, 4, with_min, act, ab, k, b0, acc);
        }
        if (b0 < nb) { /* two blocks left: k is a multiple of 64 */
            quad q;
            legacy_quad(t, w, b0, 2, &q);
            quad_products(NC, &q, 2, with_min, act, ab, k, b0, acc);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = vaddvq_f32(acc[c]);
    }
}

#define ROW_DOTS row_dots
#include "quant/rows_drive.h"

ROWS_DEFINE(rows_q4_0_dotprod, R_Q4_0)
ROWS_DEFINE(rows_q5_0_dotprod, R_Q5_0)
ROWS_DEFINE(rows_q4_1_dotprod, R_Q4_1)
ROWS_DEFINE(rows_q5_1_dotprod, R_Q5_1)
ROWS_DEFINE(rows_q8_0_dotprod, R_Q8_0)
ROWS_DEFINE(rows_iq4_nl_dotprod, R_IQ4_NL)
ROWS_DEFINE(rows_iq4_xs_dotprod, R_IQ4_XS)
ROWS_DEFINE(rows_q4_K_dotprod, R_Q4_K)
ROWS_DEFINE(rows_q5_K_dotprod, R_Q5_K)
ROWS_DEFINE(rows_q6_K_dotprod, R_Q6_K)

void quant_install_rows_neon_dotprod(quant_traits *t) {
    t[GGUF_TYPE_Q4_0].rows = rows_q4_0_dotprod;
    t[GGUF_TYPE_Q5_0].rows = rows_q5_0_dotprod;
    t[GGUF_TYPE_Q4_1].rows = rows_q4_1_dotprod;
    t[GGUF_TYPE_Q5_1].rows = rows_q5_1_dotprod;
    t[GGUF_TYPE_Q8_0].rows = rows_q8_0_dotprod;
    t[GGUF_TYPE_IQ4_NL].rows = rows_iq4_nl_dotprod;
    t[GGUF_TYPE_IQ4_XS].rows = rows_iq4_xs_dotprod;
    t[GGUF_TYPE_Q4_K].rows = rows_q4_K_dotprod;
    t[GGUF_TYPE_Q5_K].rows = rows_q5_K_dotprod;
    t[GGUF_TYPE_Q6_K].rows = rows_q6_K_dotprod;
    const uint32_t types[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q5_0,   GGUF_TYPE_Q4_1,   GGUF_TYPE_Q5_1,
                              GGUF_TYPE_Q8_0, GGUF_TYPE_IQ4_NL, GGUF_TYPE_IQ4_XS, GGUF_TYPE_Q4_K,
                              GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        t[types[i]].rows_fmt = &rows_fmt;
    }
}
