/*
 * The packed-activation GEMM (quant.h: quant_panel_fmt; docs/kernels.md) for
 * AArch64 with the int8 matrix-multiply extension (ARMv8.6 i8mm, FEAT_I8MM):
 * SMMLA multiplies a 2 x 8 block of signed bytes by the transpose of another
 * and adds the 2 x 2 int32 result, 32 products per instruction against by-lane
 * SDOT's 16. Two weight rows are decoded per group (gemm_neon_decode.h) and
 * zipped into 2 x 8 blocks; a panel holds 4 activation rows as two 2 x 8
 * blocks per 8 elements, so one group of 32 costs 8 SMMLA per panel for two
 * weight rows.
 *
 * Panel group layout (48 * 4 bytes, as gemm_neon.c's, with runs of 8: quant.h):
 * for 8-element chunk c (0..3) and row pair q (0..1) 16 bytes at 16 (2 c + q),
 * row 2q's 8 codes then row 2q + 1's, a 2 x 8 block as SMMLA reads it; then
 * the 4 x 4 floats d, d * sum, d * sum of each half.
 * Functions that carry SMMLA are named *i8mm* (tests/cross/run_aarch64.sh).
 */
#include "quant/gemm_neon_decode.h"
#include "quant/q8_neon.h"

#define LANES       4
#define GROUP_BYTES (48 * LANES)
#define KB_GROUPS   4
#define ROW_BLOCK   16
#define GEMM_NP     8 /* panels per pass: 32 activation rows */
#define GEMM_ROW_PAIRS

/* ---- activations into panels: the Q8_0 reference's codes and fp16 scale ---- */

static void panel_from_float_i8mm(const float *restrict x, size_t ldx, int n_rows, int64_t k,
                                  void *restrict panel) {
    uint8_t *pb = panel;
    const int64_t ng = k / QUANT_PANEL_GROUP;
    for (int i = 0; i < LANES; i++) {
        const float *xr = i < n_rows ? x + (size_t)i * ldx : x; /* no row past the last */
        for (int64_t g = 0; g < ng; g++) {
            uint8_t *grp = pb + (size_t)g * GROUP_BYTES;
            float *f = (float *)(void *)(grp + 32 * LANES);
            int8_t q[32] = {0};
            float d = 0;
            int32_t s0 = 0, s1 = 0;
            if (i < n_rows) {
                int half[2];
                d = f16_to_f32(f32_to_f16(q8_block_neon(xr + g * QUANT_PANEL_GROUP, q, half)));
                s0 = half[0];
                s1 = half[1];
            }
            for (int c = 0; c < 4; c++) {
                memcpy(grp + 16 * (2 * c + i / 2) + 8 * (i % 2), q + 8 * c, 8);
            }
            f[i] = d;
            f[LANES + i] = d * (float)(s0 + s1);
            f[2 * LANES + i] = d * (float)s0;
            f[3 * LANES + i] = d * (float)s1;
        }
    }
}

static const quant_panel_fmt panel_fmt_i8mm = {
    .lanes = LANES, .run = 8, .from_float = panel_from_float_i8mm};

/* ---- the inner step ---- */

#define FORCE_INLINE static inline __attribute__((always_inline))

/* 2 x 8 blocks of rows a and b: elements 0..7 (lo) and 8..15 (hi) of each */
FORCE_INLINE int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
FORCE_INLINE int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* the 2 x 4 products of chunks c0 .. c0 + nc - 1 (weights in blk[]) with a
 * panel, as row 0's and row 1's four lanes */
FORCE_INLINE void mmla_chunks_i8mm(const int8x16_t *blk, int c0, int nc, const int8_t *a,
                                   int32x4_t *r0, int32x4_t *r1) {
    int32x4_t s01 = vdupq_n_s32(0), s23 = vdupq_n_s32(0);
    for (int c = 0; c < nc; c++) {
        s01 = vmmlaq_s32(s01, blk[c], vld1q_s8(a + 16 * (2 * (c0 + c))));
        s23 = vmmlaq_s32(s23, blk[c], vld1q_s8(a + 16 * (2 * (c0 + c) + 1)));
    }
    /* s01 = [w0.a0, w0.a1, w1.a0, w1.a1], s23 the same for lanes 2, 3 */
    *r0 = vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(s01), vreinterpretq_s64_s32(s23)));
    *r1 = vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(s01), vreinterpretq_s64_s32(s23)));
}

/* a group of 32 of two rows: a0, a1 row 0's elements 0..15, 16..31; b0, b1 row 1's */
FORCE_INLINE void apply32_i8mm(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1, float sw0,
                               float mw0, float sw1, float mw1, const uint8_t *act, size_t pstride,
                               int np, float32x4_t *facc0, float32x4_t *facc1) {
    const int8x16_t blk[4] = {zip_lo(a0, b0), zip_hi(a0, b0), zip_lo(a1, b1), zip_hi(a1, b1)};
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        const uint8_t *ap = act + (size_t)p * pstride;
        int32x4_t r0, r1;
        mmla_chunks_i8mm(blk, 0, 4, (const int8_t *)ap, &r0, &r1);
        const float *f = (const float *)(const void *)(ap + 32 * LANES);
        const float32x4_t d = vld1q_f32(f), sum = vld1q_f32(f + LANES);
        facc0[p] =
            vfmsq_n_f32(vfmaq_n_f32(facc0[p], vmulq_f32(vcvtq_f32_s32(r0), d), sw0), sum, mw0);
        facc1[p] =
            vfmsq_n_f32(vfmaq_n_f32(facc1[p], vmulq_f32(vcvtq_f32_s32(r1), d), sw1), sum, mw1);
    }
}

/* half h of a group of two rows: a row 0's 16 weights, b row 1's */
FORCE_INLINE void apply16_i8mm(int8x16_t a, int8x16_t b, int h, float sw0, float mw0, float sw1,
                               float mw1, const uint8_t *act, size_t pstride, int np,
                               float32x4_t *facc0, float32x4_t *facc1) {
    const int8x16_t blk[2] = {zip_lo(a, b), zip_hi(a, b)};
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        const uint8_t *ap = act + (size_t)p * pstride;
        int32x4_t r0, r1;
        mmla_chunks_i8mm(blk, 2 * h, 2, (const int8_t *)ap, &r0, &r1);
        const float *f = (const float *)(const void *)(ap + 32 * LANES);
        const float32x4_t d = vld1q_f32(f), sum = vld1q_f32(f + (2 + h) * LANES);
        facc0[p] =
            vfmsq_n_f32(vfmaq_n_f32(facc0[p], vmulq_f32(vcvtq_f32_s32(r0), d), sw0), sum, mw0);
        facc1[p] =
            vfmsq_n_f32(vfmaq_n_f32(facc1[p], vmulq_f32(vcvtq_f32_s32(r1), d), sw1), sum, mw1);
    }
}

#include "quant/gemm_drive.h"

#define KB_LOAD_TILE()                                                                             \
    float32x4_t facc0[GEMM_NP], facc1[GEMM_NP];                                                    \
    _Pragma("GCC unroll 8") for (int p = 0; p < np; p++) {                                         \
        facc0[p] = vld1q_f32(tile + p * LANES);                                                    \
        facc1[p] = vld1q_f32(tile1 + p * LANES);                                                   \
    }
#define KB_STORE_TILE()                                                                            \
    _Pragma("GCC unroll 8") for (int p = 0; p < np; p++) {                                         \
        vst1q_f32(tile + p * LANES, facc0[p]);                                                     \
        vst1q_f32(tile1 + p * LANES, facc1[p]);                                                    \
    }

/* Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL: one 32-element block a group */
#define KB_LEGACY(T)                                                                               \
    FORCE_INLINE void kb_i8mm_##T(KB_ARGS, int np) {                                               \
        KB_LOAD_TILE();                                                                            \
        for (int g = 0; g < ng; g++) {                                                             \
            const size_t off = (size_t)(g0 + g) * sizeof(block_##T);                               \
            int8x16_t a0, a1, b0, b1;                                                              \
            float sw0, mw0, sw1, mw1;                                                              \
            dec_##T(w + off, &a0, &a1, &sw0, &mw0);                                                \
            dec_##T(w1 + off, &b0, &b1, &sw1, &mw1);                                               \
            apply32_i8mm(a0, a1, b0, b1, sw0, mw0, sw1, mw1, act + (size_t)g * GROUP_BYTES,        \
                         pstride, np, facc0, facc1);                                               \
        }                                                                                          \
        KB_STORE_TILE();                                                                           \
    }

KB_LEGACY(q4_0)
KB_LEGACY(q4_1)
KB_LEGACY(q5_0)
KB_LEGACY(q5_1)
KB_LEGACY(q8_0)
KB_LEGACY(iq4_nl)

/* IQ4_XS: half a super-block of each row */
FORCE_INLINE void kb_i8mm_iq4_xs(KB_ARGS, int np) {
    const size_t off = (size_t)(g0 / 8) * sizeof(block_iq4_xs);
    const uint8_t *b0 = w + off, *b1 = w1 + off;
    const int j0 = (int)(g0 % 8);
    const float d0 = h2f(KQ_FIELD(b0, block_iq4_xs, d)), d1 = h2f(KQ_FIELD(b1, block_iq4_xs, d));
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const int j = j0 + g;
        int8x16_t a0, a1, c0, c1;
        dec_iq4_xs_sub(b0, j, &a0, &a1);
        dec_iq4_xs_sub(b1, j, &c0, &c1);
        apply32_i8mm(a0, a1, c0, c1, d0 * (float)kq_iq4xs_scale(b0, j), 0,
                     d1 * (float)kq_iq4xs_scale(b1, j), 0, act + (size_t)g * GROUP_BYTES, pstride,
                     np, facc0, facc1);
    }
    KB_STORE_TILE();
}

/* Q4_K / Q5_K: half a super-block of each row */
FORCE_INLINE void kb_i8mm_q45_K(KB_ARGS, int np, bool five) {
    const size_t off = (size_t)(g0 / 8) * (five ? sizeof(block_q5_K) : sizeof(block_q4_K));
    const uint8_t *b0 = w + off, *b1 = w1 + off;
    const int j0 = (int)(g0 % 8);
    const float d0 = h2f(b0 + offsetof(block_q4_K, d)), d1 = h2f(b1 + offsetof(block_q4_K, d));
    const float m0 = h2f(b0 + offsetof(block_q4_K, dmin)),
                m1 = h2f(b1 + offsetof(block_q4_K, dmin));
    uint8_t sc0[8], mn0[8], sc1[8], mn1[8];
    kq_scale_min_k4(b0 + offsetof(block_q4_K, scales), sc0, mn0);
    kq_scale_min_k4(b1 + offsetof(block_q4_K, scales), sc1, mn1);
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const int j = j0 + g;
        int8x16_t a0, a1, c0, c1;
        dec_q45_K_sub(b0, j, five, &a0, &a1);
        dec_q45_K_sub(b1, j, five, &c0, &c1);
        apply32_i8mm(a0, a1, c0, c1, d0 * sc0[j], m0 * mn0[j], d1 * sc1[j], m1 * mn1[j],
                     act + (size_t)g * GROUP_BYTES, pstride, np, facc0, facc1);
    }
    KB_STORE_TILE();
}

FORCE_INLINE void kb_i8mm_q4_K(KB_ARGS, int np) {
    kb_i8mm_q45_K(w, w1, g0, ng, act, pstride, tile, tile1, np, false);
}

FORCE_INLINE void kb_i8mm_q5_K(KB_ARGS, int np) {
    kb_i8mm_q45_K(w, w1, g0, ng, act, pstride, tile, tile1, np, true);
}

/* Q6_K: half h of a super-block of each row, parts of 32, sub-blocks of 16 */
FORCE_INLINE void kb_i8mm_q6_K(KB_ARGS, int np) {
    const size_t off = (size_t)(g0 / 8) * sizeof(block_q6_K);
    const uint8_t *b0 = w + off, *b1 = w1 + off;
    const int h = (int)(g0 % 8) / 4;
    const float d0 = h2f(KQ_FIELD(b0, block_q6_K, d)), d1 = h2f(KQ_FIELD(b1, block_q6_K, d));
    const int8_t *sc0 = (const int8_t *)KQ_FIELD(b0, block_q6_K, scales) + 8 * h;
    const int8_t *sc1 = (const int8_t *)KQ_FIELD(b1, block_q6_K, scales) + 8 * h;
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        for (int half = 0; half < 2; half++) {
            apply16_i8mm(dec_q6_K_16(b0, h, p, half), dec_q6_K_16(b1, h, p, half), half,
                         d0 * (float)sc0[2 * p + half], 0, d1 * (float)sc1[2 * p + half], 0,
                         act + (size_t)p * GROUP_BYTES, pstride, np, facc0, facc1);
        }
    }
    KB_STORE_TILE();
}

/* Q2_K: half h of a super-block of each row, sub-blocks of 16 with a scale
 * and a min multiplier each */
FORCE_INLINE void kb_i8mm_q2_K(KB_ARGS, int np) {
    const size_t off = (size_t)(g0 / 8) * sizeof(block_q2_K);
    const uint8_t *b0 = w + off, *b1 = w1 + off;
    const int h = (int)(g0 % 8) / 4;
    const float d0 = h2f(KQ_FIELD(b0, block_q2_K, d)), d1 = h2f(KQ_FIELD(b1, block_q2_K, d));
    const float m0 = h2f(KQ_FIELD(b0, block_q2_K, dmin)), m1 = h2f(KQ_FIELD(b1, block_q2_K, dmin));
    const uint8_t *sc0 = KQ_FIELD(b0, block_q2_K, scales) + 8 * h;
    const uint8_t *sc1 = KQ_FIELD(b1, block_q2_K, scales) + 8 * h;
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        for (int half = 0; half < 2; half++) {
            const uint8_t s0 = sc0[2 * p + half], s1 = sc1[2 * p + half];
            apply16_i8mm(dec_q2_K_16(b0, h, p, half), dec_q2_K_16(b1, h, p, half), half,
                         d0 * (float)(s0 & 0xf), m0 * (float)(s0 >> 4), d1 * (float)(s1 & 0xf),
                         m1 * (float)(s1 >> 4), act + (size_t)p * GROUP_BYTES, pstride, np, facc0,
                         facc1);
        }
    }
    KB_STORE_TILE();
}

/* Q3_K: half h of a super-block of each row, sub-blocks of 16 */
FORCE_INLINE void kb_i8mm_q3_K(KB_ARGS, int np) {
    const size_t off = (size_t)(g0 / 8) * sizeof(block_q3_K);
    const uint8_t *b0 = w + off, *b1 = w1 + off;
    const int h = (int)(g0 % 8) / 4;
    const float d0 = h2f(KQ_FIELD(b0, block_q3_K, d)), d1 = h2f(KQ_FIELD(b1, block_q3_K, d));
    int sc0[16], sc1[16];
    kq_scales_q3(KQ_FIELD(b0, block_q3_K, scales), sc0);
    kq_scales_q3(KQ_FIELD(b1, block_q3_K, scales), sc1);
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        for (int half = 0; half < 2; half++) {
            const int j = 8 * h + 2 * p + half;
            apply16_i8mm(dec_q3_K_16(b0, h, p, half), dec_q3_K_16(b1, h, p, half), half,
                         d0 * (float)sc0[j], 0, d1 * (float)sc1[j], 0,
                         act + (size_t)p * GROUP_BYTES, pstride, np, facc0, facc1);
        }
    }
    KB_STORE_TILE();
}

#define GEMM_FAMILY    i8mm
#define KB_CALL_ARGS   w, w1, g0, ng, act, pstride, tile, tile1
#define GEMM_PANEL_FMT panel_fmt_i8mm
#define GEMM_INSTALL   quant_install_gemm_neon_i8mm
#include "quant/gemm_neon_types.h"
