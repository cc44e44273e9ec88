/*
 * The packed-activation GEMM (quant.h: quant_panel_fmt; docs/kernels.md) for
 * AArch64 with the dot-product extension: panels of 4 activation rows (one
 * 128-bit register holds the same 4-quant run of all 4 rows), and the by-lane
 * SDOT multiplies such a register with one 4-quant run of a weight row, held
 * in one lane of a register of 4 runs: 4 rows x 4 products per instruction,
 * the weights decoded once per group for every panel.
 *
 * SDOT is signed x signed, so weights decode to signed bytes v with value =
 * sw * v - mw (mw only where the format has a minimum: Q4_1, Q5_1, Q4_K, Q5_K)
 * instead of the unsigned bytes of the x86 kernels. Functions that carry SDOT
 * are named *dotprod* (tests/cross/run_aarch64.sh checks the objects).
 */
#include "quant/gemm_neon_decode.h"
#include "quant/q8_neon.h"

#define LANES       4
#define GROUP_BYTES (48 * LANES)
#define QUAD_BYTES  (4 * LANES)
#define KB_GROUPS   4
#define ROW_BLOCK   16
#define GEMM_NP     8 /* panels per pass: 32 activation rows */

/* ---- activations into panels: the Q8_0 reference's codes and fp16 scale ---- */

static void panel_from_float(const float *restrict x, size_t ldx, int n_rows, int64_t k,
                             void *restrict panel) {
    uint8_t *pb = panel;
    const int64_t ng = k / QUANT_PANEL_GROUP;
    for (int i = 0; i < LANES; i++) {
        const float *xr = i < n_rows ? x + (size_t)i * ldx : x; /* no row past the last */
        for (int64_t g = 0; g < ng; g++) {
            uint8_t *grp = pb + (size_t)g * GROUP_BYTES;
            float *f = (float *)(void *)(grp + 32 * LANES);
            if (i >= n_rows) {
                for (int q = 0; q < 8; q++) {
                    memset(grp + (size_t)(q * LANES + i) * 4, 0, 4);
                }
                f[i] = f[LANES + i] = f[2 * LANES + i] = f[3 * LANES + i] = 0;
                continue;
            }
            int8_t q[32];
            int half[2];
            const float d =
                f16_to_f32(f32_to_f16(q8_block_neon(xr + g * QUANT_PANEL_GROUP, q, half)));
            for (int j = 0; j < 8; j++) {
                memcpy(grp + (size_t)(j * LANES + i) * 4, q + 4 * j, 4);
            }
            const int32_t s0 = half[0], s1 = half[1];
            f[i] = d;
            f[LANES + i] = d * (float)(s0 + s1);
            f[2 * LANES + i] = d * (float)s0;
            f[3 * LANES + i] = d * (float)s1;
        }
    }
}

static const quant_panel_fmt panel_fmt_neon = {
    .lanes = LANES, .run = 4, .from_float = panel_from_float};

/* ---- the inner step ---- */

#define FORCE_INLINE static inline __attribute__((always_inline))

/* a group of 32: runs 0..3 in w0, 4..7 in w1 */
FORCE_INLINE void apply32_dotprod(int8x16_t w0, int8x16_t w1, float sw, float mw,
                                  const uint8_t *act, size_t pstride, int np, float32x4_t *facc) {
    int32x4_t acc[GEMM_NP];
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        const int8_t *a = (const int8_t *)(act + (size_t)p * pstride);
        int32x4_t s = vdupq_n_s32(0);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 0 * QUAD_BYTES), w0, 0);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 1 * QUAD_BYTES), w0, 1);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 2 * QUAD_BYTES), w0, 2);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 3 * QUAD_BYTES), w0, 3);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 4 * QUAD_BYTES), w1, 0);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 5 * QUAD_BYTES), w1, 1);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 6 * QUAD_BYTES), w1, 2);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 7 * QUAD_BYTES), w1, 3);
        acc[p] = s;
    }
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        const float *f = (const float *)(const void *)(act + (size_t)p * pstride + 32 * LANES);
        const float32x4_t t = vmulq_f32(vcvtq_f32_s32(acc[p]), vld1q_f32(f));
        facc[p] = vfmsq_n_f32(vfmaq_n_f32(facc[p], t, sw), vld1q_f32(f + LANES), mw);
    }
}

/* half h of a group: its 16 weights, runs 0..3 in w */
FORCE_INLINE void apply16_dotprod(int8x16_t w, int h, float sw, float mw, const uint8_t *act,
                                  size_t pstride, int np, float32x4_t *facc) {
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        const int8_t *a = (const int8_t *)(act + (size_t)p * pstride) + 4 * h * QUAD_BYTES;
        int32x4_t s = vdupq_n_s32(0);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 0 * QUAD_BYTES), w, 0);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 1 * QUAD_BYTES), w, 1);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 2 * QUAD_BYTES), w, 2);
        s = vdotq_laneq_s32(s, vld1q_s8(a + 3 * QUAD_BYTES), w, 3);
        const float *f = (const float *)(const void *)(act + (size_t)p * pstride + 32 * LANES);
        facc[p] = vfmsq_n_f32(vfmaq_n_f32(facc[p], vmulq_f32(vcvtq_f32_s32(s), vld1q_f32(f)), sw),
                              vld1q_f32(f + (2 + h) * LANES), mw);
    }
}

#include "quant/gemm_drive.h"

#define KB_LOAD_TILE()                                                                             \
    float32x4_t facc[GEMM_NP];                                                                     \
    _Pragma("GCC unroll 8") for (int p = 0; p < np; p++) facc[p] = vld1q_f32(tile + p * LANES)
#define KB_STORE_TILE()                                                                            \
    _Pragma("GCC unroll 8") for (int p = 0; p < np; p++) vst1q_f32(tile + p * LANES, facc[p])

/* Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL: one 32-element block a group */
#define KB_LEGACY(T)                                                                               \
    FORCE_INLINE void kb_dotprod_##T(KB_ARGS, int np) {                                            \
        KB_LOAD_TILE();                                                                            \
        for (int g = 0; g < ng; g++) {                                                             \
            int8x16_t w0, w1;                                                                      \
            float sw, mw;                                                                          \
            dec_##T(w + (size_t)(g0 + g) * sizeof(block_##T), &w0, &w1, &sw, &mw);                 \
            apply32_dotprod(w0, w1, sw, mw, act + (size_t)g * GROUP_BYTES, pstride, np, facc);     \
        }                                                                                          \
        KB_STORE_TILE();                                                                           \
    }

KB_LEGACY(q4_0)
KB_LEGACY(q4_1)
KB_LEGACY(q5_0)
KB_LEGACY(q5_1)
KB_LEGACY(q8_0)
KB_LEGACY(iq4_nl)

/* IQ4_XS: half a super-block, sub-block j like IQ4_NL with scale d (s_j - 32) */
FORCE_INLINE void kb_dotprod_iq4_xs(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_iq4_xs);
    const int j0 = (int)(g0 % 8);
    const float d = h2f(KQ_FIELD(b, block_iq4_xs, d));
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        int8x16_t w0, w1;
        dec_iq4_xs_sub(b, j0 + g, &w0, &w1);
        apply32_dotprod(w0, w1, d * (float)kq_iq4xs_scale(b, j0 + g), 0,
                        act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q4_K / Q5_K: half a super-block */
FORCE_INLINE void kb_dotprod_q45_K(KB_ARGS, int np, bool five) {
    const size_t bsz = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const uint8_t *b = w + (size_t)(g0 / 8) * bsz;
    const int j0 = (int)(g0 % 8);
    const float d = h2f(b + offsetof(block_q4_K, d));
    const float dmin = h2f(b + offsetof(block_q4_K, dmin));
    uint8_t sc[8], mn[8];
    kq_scale_min_k4(b + offsetof(block_q4_K, scales), sc, mn);
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const int j = j0 + g;
        int8x16_t w0, w1;
        dec_q45_K_sub(b, j, five, &w0, &w1);
        apply32_dotprod(w0, w1, d * sc[j], dmin * mn[j], act + (size_t)g * GROUP_BYTES, pstride, np,
                        facc);
    }
    KB_STORE_TILE();
}

FORCE_INLINE void kb_dotprod_q4_K(KB_ARGS, int np) {
    kb_dotprod_q45_K(w, g0, ng, act, pstride, tile, np, false);
}

FORCE_INLINE void kb_dotprod_q5_K(KB_ARGS, int np) {
    kb_dotprod_q45_K(w, g0, ng, act, pstride, tile, np, true);
}

/* Q6_K: half h of a super-block, parts p = 0..3 of 32, two sub-blocks of 16 each */
FORCE_INLINE void kb_dotprod_q6_K(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_q6_K);
    const int h = (int)(g0 % 8) / 4;
    const float d = h2f(KQ_FIELD(b, block_q6_K, d));
    const int8_t *scales = (const int8_t *)KQ_FIELD(b, block_q6_K, scales) + 8 * h;
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        for (int half = 0; half < 2; half++) {
            apply16_dotprod(dec_q6_K_16(b, h, p, half), half, d * (float)scales[2 * p + half], 0,
                            act + (size_t)p * GROUP_BYTES, pstride, np, facc);
        }
    }
    KB_STORE_TILE();
}

/* Q2_K: half h of a super-block, parts of 32, sub-blocks of 16 with a scale
 * and a min multiplier each */
FORCE_INLINE void kb_dotprod_q2_K(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_q2_K);
    const int h = (int)(g0 % 8) / 4;
    const float d = h2f(KQ_FIELD(b, block_q2_K, d)), dmin = h2f(KQ_FIELD(b, block_q2_K, dmin));
    const uint8_t *sc = KQ_FIELD(b, block_q2_K, scales) + 8 * h;
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        for (int half = 0; half < 2; half++) {
            const uint8_t s = sc[2 * p + half];
            apply16_dotprod(dec_q2_K_16(b, h, p, half), half, d * (float)(s & 0xf),
                            dmin * (float)(s >> 4), act + (size_t)p * GROUP_BYTES, pstride, np,
                            facc);
        }
    }
    KB_STORE_TILE();
}

/* Q3_K: half h of a super-block, parts of 32, sub-blocks of 16 */
FORCE_INLINE void kb_dotprod_q3_K(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_q3_K);
    const int h = (int)(g0 % 8) / 4;
    const float d = h2f(KQ_FIELD(b, block_q3_K, d));
    int scale[16];
    kq_scales_q3(KQ_FIELD(b, block_q3_K, scales), scale);
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        for (int half = 0; half < 2; half++) {
            apply16_dotprod(dec_q3_K_16(b, h, p, half), half,
                            d * (float)scale[8 * h + 2 * p + half], 0,
                            act + (size_t)p * GROUP_BYTES, pstride, np, facc);
        }
    }
    KB_STORE_TILE();
}

#define GEMM_FAMILY    dotprod
#define KB_CALL_ARGS   w, g0, ng, act, pstride, tile
#define GEMM_PANEL_FMT panel_fmt_neon
#define GEMM_INSTALL   quant_install_gemm_neon_dotprod
#include "quant/gemm_neon_types.h"
