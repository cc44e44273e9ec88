/*
 * NEON kernels of the K-quants (Q2_K..Q6_K against Q8_K), the Q8_K
 * activation quantizer and K-quant dequantization, with and without the
 * dot-product extension (SDOT). Each kernel names its reference in kquants.c.
 *
 * The scheme is that of kquants_avx2.c: a super-block is read as sixteen
 * groups of 16 unsigned levels (0..63) with an integer scale and an integer
 * multiplier of the Q8_K sum of the group's activations, so
 *   dot = d * dy * sum_g s_g * sum(q * y)  +  dm * dy * sum_g m_g * bsum_g.
 * A group's sum(q * y) is one SDOT (four s32 lanes), or without the extension
 * two SMULL (s8 x s8 -> s16, |63 * 127| fits) and a pairwise widening add;
 * then one multiply-accumulate by s_g. Levels fit s8, so both paths multiply
 * signed bytes. The tile kernel decodes each group once for up to four
 * activation rows. Only the functions built with dotprod = true execute SDOT.
 */
#include "quant/kquant_impl.h"

#include <arm_neon.h>
#include <math.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* sum(q * y) of 16 signed bytes, in four s32 lanes */
static ALWAYS_INLINE int32x4_t dot16(int8x16_t q, int8x16_t y, const bool dotprod) {
    if (dotprod) {
        return vdotq_s32(vdupq_n_s32(0), q, y);
    }
    const int16x8_t p0 = vmull_s8(vget_low_s8(q), vget_low_s8(y));
    const int16x8_t p1 = vmull_high_s8(q, y);
    return vpadalq_s16(vpaddlq_s16(p0), p1);
}

static inline int8x16_t ld_s8(const void *p) {
    return vreinterpretq_s8_u8(vld1q_u8((const uint8_t *)p));
}

/* the decoded scales of one weight super-block */
typedef struct nrow {
    int32_t sc[16];  /* scale of 16-group g */
    int16x8_t mb[2]; /* multipliers of bsum[0..7], bsum[8..15] */
    float d, dm;
} nrow;

/* Accumulates 16-group g (levels q) against the activation rows yq[c]. */
static ALWAYS_INLINE void mac_group(uint8x16_t q, const nrow *w, int g, const int8_t *const *yq,
                                    int32x4_t *acc, int nc, const bool dotprod) {
    const int8x16_t qs = vreinterpretq_s8_u8(q);
    for (int c = 0; c < nc; c++) {
        acc[c] = vmlaq_n_s32(acc[c], dot16(qs, vld1q_s8(yq[c] + 16 * g), dotprod), w->sc[g]);
    }
}

/* ---- per type: scales, then the sixteen groups ---- */

static ALWAYS_INLINE void prep_q2_K(const uint8_t *b, nrow *w) {
    const uint8_t *s = KQ_FIELD(b, block_q2_K, scales);
    for (int g = 0; g < 16; g++) {
        w->sc[g] = s[g] & 0xf;
    }
    const uint8x16_t v = vld1q_u8(s);
    const uint8x16_t m = vshrq_n_u8(v, 4);
    w->mb[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m)));
    w->mb[1] = vreinterpretq_s16_u16(vmovl_high_u8(m));
    w->d = kq_f16(KQ_FIELD(b, block_q2_K, d));
    w->dm = -kq_f16(KQ_FIELD(b, block_q2_K, dmin));
}

static ALWAYS_INLINE void groups_q2_K(const uint8_t *b, const nrow *w, const int8_t *const *yq,
                                      int32x4_t *acc, int nc, const bool dp) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = KQ_FIELD(b, block_q2_K, qs) + 32 * h;
        uint8x16_t r0 = vld1q_u8(q), r1 = vld1q_u8(q + 16);
        for (int j = 0; j < 4; j++) {
            /* chunk 4h + j: bits 2j of the 32 bytes */
            mac_group(vandq_u8(r0, m3), w, 8 * h + 2 * j, yq, acc, nc, dp);
            mac_group(vandq_u8(r1, m3), w, 8 * h + 2 * j + 1, yq, acc, nc, dp);
            r0 = vshrq_n_u8(r0, 2);
            r1 = vshrq_n_u8(r1, 2);
        }
    }
}

static ALWAYS_INLINE void prep_q3_K(const uint8_t *b, nrow *w) {
    int sc[16];
    kq_scales_q3(KQ_FIELD(b, block_q3_K, scales), sc);
    int16_t m[16];
    for (int g = 0; g < 16; g++) {
        w->sc[g] = sc[g];
        m[g] = (int16_t)sc[g];
    }
    w->mb[0] = vld1q_s16(m);
    w->mb[1] = vld1q_s16(m + 8);
    w->d = kq_f16(KQ_FIELD(b, block_q3_K, d));
    w->dm = -4.0f * w->d; /* levels are stored + 4 */
}

static ALWAYS_INLINE void groups_q3_K(const uint8_t *b, const nrow *w, const int8_t *const *yq,
                                      int32x4_t *acc, int nc, const bool dp) {
    const uint8x16_t m3 = vdupq_n_u8(3), one = vdupq_n_u8(1);
    uint8x16_t h0 = vld1q_u8(KQ_FIELD(b, block_q3_K, hmask));
    uint8x16_t h1 = vld1q_u8(KQ_FIELD(b, block_q3_K, hmask) + 16);
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = KQ_FIELD(b, block_q3_K, qs) + 32 * h;
        uint8x16_t r0 = vld1q_u8(q), r1 = vld1q_u8(q + 16);
        for (int j = 0; j < 4; j++) {
            /* bit k of hmask byte l is bit 2 of element 32k + l */
            const uint8x16_t l0 = vorrq_u8(vandq_u8(r0, m3), vshlq_n_u8(vandq_u8(h0, one), 2));
            const uint8x16_t l1 = vorrq_u8(vandq_u8(r1, m3), vshlq_n_u8(vandq_u8(h1, one), 2));
            mac_group(l0, w, 8 * h + 2 * j, yq, acc, nc, dp);
            mac_group(l1, w, 8 * h + 2 * j + 1, yq, acc, nc, dp);
            r0 = vshrq_n_u8(r0, 2);
            r1 = vshrq_n_u8(r1, 2);
            h0 = vshrq_n_u8(h0, 1);
            h1 = vshrq_n_u8(h1, 1);
        }
    }
}

static ALWAYS_INLINE void prep_q45_K(const uint8_t *b, nrow *w) {
    uint8_t sc[8], mn[8];
    kq_scale_min_k4(KQ_FIELD(b, block_q4_K, scales), sc, mn);
    for (int g = 0; g < 16; g++) {
        w->sc[g] = sc[g / 2];
    }
    /* each min covers two 16-groups */
    const uint8x8_t m = vld1_u8(mn);
    const uint8x8x2_t z = vzip_u8(m, m);
    w->mb[0] = vreinterpretq_s16_u16(vmovl_u8(z.val[0]));
    w->mb[1] = vreinterpretq_s16_u16(vmovl_u8(z.val[1]));
    w->d = kq_f16(KQ_FIELD(b, block_q4_K, d));
    w->dm = -kq_f16(KQ_FIELD(b, block_q4_K, dmin));
}

static ALWAYS_INLINE void groups_q4_K(const uint8_t *b, const nrow *w, const int8_t *const *yq,
                                      int32x4_t *acc, int nc, const bool dp) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    for (int j = 0; j < 4; j++) {
        const uint8_t *q = KQ_FIELD(b, block_q4_K, qs) + 32 * j;
        const uint8x16_t r0 = vld1q_u8(q), r1 = vld1q_u8(q + 16);
        mac_group(vandq_u8(r0, m4), w, 4 * j + 0, yq, acc, nc, dp);
        mac_group(vandq_u8(r1, m4), w, 4 * j + 1, yq, acc, nc, dp);
        mac_group(vshrq_n_u8(r0, 4), w, 4 * j + 2, yq, acc, nc, dp);
        mac_group(vshrq_n_u8(r1, 4), w, 4 * j + 3, yq, acc, nc, dp);
    }
}

static ALWAYS_INLINE void groups_q5_K(const uint8_t *b, const nrow *w, const int8_t *const *yq,
                                      int32x4_t *acc, int nc, const bool dp) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), one = vdupq_n_u8(1);
    uint8x16_t h0 = vld1q_u8(KQ_FIELD(b, block_q5_K, qh));
    uint8x16_t h1 = vld1q_u8(KQ_FIELD(b, block_q5_K, qh) + 16);
    for (int j = 0; j < 4; j++) {
        const uint8_t *q = KQ_FIELD(b, block_q5_K, qs) + 32 * j;
        const uint8x16_t r0 = vld1q_u8(q), r1 = vld1q_u8(q + 16);
        /* chunk 2j: bit 2j of qh; chunk 2j + 1: bit 2j + 1 */
        mac_group(vorrq_u8(vandq_u8(r0, m4), vshlq_n_u8(vandq_u8(h0, one), 4)), w, 4 * j + 0, yq,
                  acc, nc, dp);
        mac_group(vorrq_u8(vandq_u8(r1, m4), vshlq_n_u8(vandq_u8(h1, one), 4)), w, 4 * j + 1, yq,
                  acc, nc, dp);
        h0 = vshrq_n_u8(h0, 1);
        h1 = vshrq_n_u8(h1, 1);
        mac_group(vorrq_u8(vshrq_n_u8(r0, 4), vshlq_n_u8(vandq_u8(h0, one), 4)), w, 4 * j + 2, yq,
                  acc, nc, dp);
        mac_group(vorrq_u8(vshrq_n_u8(r1, 4), vshlq_n_u8(vandq_u8(h1, one), 4)), w, 4 * j + 3, yq,
                  acc, nc, dp);
        h0 = vshrq_n_u8(h0, 1);
        h1 = vshrq_n_u8(h1, 1);
    }
}

static ALWAYS_INLINE void prep_q6_K(const uint8_t *b, nrow *w) {
    const int8_t *s = (const int8_t *)KQ_FIELD(b, block_q6_K, scales);
    for (int g = 0; g < 16; g++) {
        w->sc[g] = s[g];
    }
    const int8x16_t v = ld_s8(s);
    w->mb[0] = vmovl_s8(vget_low_s8(v));
    w->mb[1] = vmovl_high_s8(v);
    w->d = kq_f16(KQ_FIELD(b, block_q6_K, d));
    w->dm = -32.0f * w->d; /* levels are stored + 32 */
}

static ALWAYS_INLINE void groups_q6_K(const uint8_t *b, const nrow *w, const int8_t *const *yq,
                                      int32x4_t *acc, int nc, const bool dp) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(3), m30 = vdupq_n_u8(0x30);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = KQ_FIELD(b, block_q6_K, ql) + 64 * h;
        const uint8_t *qh = KQ_FIELD(b, block_q6_K, qh) + 32 * h;
        for (int half = 0; half < 2; half++) {
            const uint8x16_t a = vld1q_u8(ql + 16 * half);      /* parts 0 and 2 */
            const uint8x16_t c = vld1q_u8(ql + 32 + 16 * half); /* parts 1 and 3 */
            const uint8x16_t hb = vld1q_u8(qh + 16 * half);
            const uint8x16_t q0 = vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(hb, m3), 4));
            const uint8x16_t q1 = vorrq_u8(vandq_u8(c, m4), vandq_u8(vshlq_n_u8(hb, 2), m30));
            const uint8x16_t q2 = vorrq_u8(vshrq_n_u8(a, 4), vandq_u8(hb, m30));
            const uint8x16_t q3 = vorrq_u8(vshrq_n_u8(c, 4), vandq_u8(vshrq_n_u8(hb, 2), m30));
            /* part p covers 16-groups 8h + 2p and 8h + 2p + 1 */
            mac_group(q0, w, 8 * h + 0 + half, yq, acc, nc, dp);
            mac_group(q1, w, 8 * h + 2 + half, yq, acc, nc, dp);
            mac_group(q2, w, 8 * h + 4 + half, yq, acc, nc, dp);
            mac_group(q3, w, 8 * h + 6 + half, yq, acc, nc, dp);
        }
    }
}

/* ---- the generic tile ---- */

typedef void (*prep_fn)(const uint8_t *b, nrow *w);
typedef void (*groups_fn)(const uint8_t *b, const nrow *w, const int8_t *const *yq, int32x4_t *acc,
                          int nc, const bool dp);

static ALWAYS_INLINE void tile_k(int64_t n, float *restrict s, size_t ldc, const uint8_t *x,
                                 size_t bx, const uint8_t *y, size_t by, int nr, const int NC,
                                 size_t bbytes, prep_fn prep, groups_fn groups, const bool dp) {
    float acc[QUANT_TILE_MAX][QUANT_TILE_MAX] = {{0}};
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const int8_t *yq[QUANT_TILE_MAX];
        int16x8_t bs[QUANT_TILE_MAX][2];
        float dy[QUANT_TILE_MAX];
        for (int c = 0; c < NC; c++) {
            const uint8_t *yb = y + c * by + ib * sizeof(block_q8_K);
            yq[c] = (const int8_t *)KQ_FIELD(yb, block_q8_K, qs);
            bs[c][0] = vreinterpretq_s16_u8(vld1q_u8(KQ_FIELD(yb, block_q8_K, bsums)));
            bs[c][1] = vreinterpretq_s16_u8(vld1q_u8(KQ_FIELD(yb, block_q8_K, bsums) + 16));
            dy[c] = q8k_d(yb);
        }
        for (int r = 0; r < nr; r++) {
            const uint8_t *xb = x + r * bx + ib * bbytes;
            nrow w;
            prep(xb, &w);
            int32x4_t sumi[QUANT_TILE_MAX];
            for (int c = 0; c < NC; c++) {
                sumi[c] = vdupq_n_s32(0);
            }
            groups(xb, &w, yq, sumi, NC, dp);
            for (int c = 0; c < NC; c++) {
                int32x4_t bias = vmull_s16(vget_low_s16(bs[c][0]), vget_low_s16(w.mb[0]));
                bias = vmlal_high_s16(bias, bs[c][0], w.mb[0]);
                bias = vmlal_s16(bias, vget_low_s16(bs[c][1]), vget_low_s16(w.mb[1]));
                bias = vmlal_high_s16(bias, bs[c][1], w.mb[1]);
                acc[r][c] += w.d * dy[c] * (float)vaddvq_s32(sumi[c]) +
                             w.dm * dy[c] * (float)vaddvq_s32(bias);
            }
        }
    }
    for (int r = 0; r < nr; r++) {
        for (int c = 0; c < NC; c++) {
            s[(size_t)c * ldc + (size_t)r] = acc[r][c];
        }
    }
}

/* vec_dot and vec_dot_tile of one K type, with (DP = true) or without SDOT */
#define KQ_KERNELS(T, PREP, SUFFIX, DP)                                                            \
    /* reference: dot_##T##_q8_K_ref */                                                            \
    static void dot_##T##_q8_K_##SUFFIX(int64_t n, float *restrict s, const void *restrict vx,     \
                                        const void *restrict vy) {                                 \
        tile_k(n, s, 1, vx, 0, vy, 0, 1, 1, sizeof(block_##T), PREP, groups_##T, DP);              \
    }                                                                                              \
    /* reference: dot_##T##_q8_K_ref, per pair */                                                  \
    static void tile_##T##_q8_K_##SUFFIX(int64_t n, float *restrict s, size_t ldc,                 \
                                         const void *restrict vx, size_t bx,                       \
                                         const void *restrict vy, size_t by, int nr, int nc) {     \
        switch (nc) {                                                                              \
        case 1:                                                                                    \
            tile_k(n, s, ldc, vx, bx, vy, by, nr, 1, sizeof(block_##T), PREP, groups_##T, DP);     \
            break;                                                                                 \
        case 2:                                                                                    \
            tile_k(n, s, ldc, vx, bx, vy, by, nr, 2, sizeof(block_##T), PREP, groups_##T, DP);     \
            break;                                                                                 \
        case 3:                                                                                    \
            tile_k(n, s, ldc, vx, bx, vy, by, nr, 3, sizeof(block_##T), PREP, groups_##T, DP);     \
            break;                                                                                 \
        default:                                                                                   \
            tile_k(n, s, ldc, vx, bx, vy, by, nr, 4, sizeof(block_##T), PREP, groups_##T, DP);     \
            break;                                                                                 \
        }                                                                                          \
    }

KQ_KERNELS(q2_K, prep_q2_K, neon, false)
KQ_KERNELS(q3_K, prep_q3_K, neon, false)
KQ_KERNELS(q4_K, prep_q45_K, neon, false)
KQ_KERNELS(q5_K, prep_q45_K, neon, false)
KQ_KERNELS(q6_K, prep_q6_K, neon, false)
KQ_KERNELS(q2_K, prep_q2_K, dotprod, true)
KQ_KERNELS(q3_K, prep_q3_K, dotprod, true)
KQ_KERNELS(q4_K, prep_q45_K, dotprod, true)
KQ_KERNELS(q5_K, prep_q45_K, dotprod, true)
KQ_KERNELS(q6_K, prep_q6_K, dotprod, true)

/* ---- Q8_K activations ---- */

/* reference: quant_q8_K_ref, bit for bit (FCVTNS rounds to nearest even, as
 * the reference's nearest_int does) */
static void quant_q8_K_neon(const float *restrict x, void *restrict dst, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_q8_K);
        float32x4_t vmax = vdupq_n_f32(0);
        for (int j = 0; j < QK_K; j += 4) {
            vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(x + j)));
        }
        const float amax = vmaxvq_f32(vmax);
        if (!(amax > 0)) {
            memset(b, 0, sizeof(block_q8_K));
            continue;
        }
        float max = 0;
        for (int j = 0; j < QK_K; j++) { /* the first of that magnitude gives the sign */
            if (fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        }
        const float iscale = -127.f / max;
        int8_t *qs = (int8_t *)KQ_FIELD(b, block_q8_K, qs);
        uint8_t *bsums = KQ_FIELD(b, block_q8_K, bsums);
        for (int j = 0; j < QK_K; j += 16) {
            int32x4_t v[4];
            for (int k = 0; k < 4; k++) {
                v[k] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k), iscale));
            }
            const int16x8_t w0 = vcombine_s16(vqmovn_s32(v[0]), vqmovn_s32(v[1]));
            const int16x8_t w1 = vcombine_s16(vqmovn_s32(v[2]), vqmovn_s32(v[3]));
            const int8x16_t q = vcombine_s8(vqmovn_s16(w0), vqmovn_s16(w1));
            vst1q_s8(qs + j, q);
            wr_u16le(bsums + 2 * (j / 16), (uint16_t)(int16_t)vaddlvq_s8(q));
        }
        wr_f32le(KQ_FIELD(b, block_q8_K, d), 1 / iscale);
    }
}

/* ---- dequantization: multiply, then subtract, as the references ---- */

static inline void store_u8x16(float *y, uint8x16_t q, float dl, float ml) {
    const uint16x8_t lo = vmovl_u8(vget_low_u8(q)), hi = vmovl_high_u8(q);
    const float32x4_t f[4] = {
        vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))), vcvtq_f32_u32(vmovl_high_u16(lo)),
        vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))), vcvtq_f32_u32(vmovl_high_u16(hi))};
    const float32x4_t d = vdupq_n_f32(dl), m = vdupq_n_f32(ml);
    for (int k = 0; k < 4; k++) {
        vst1q_f32(y + 4 * k, vsubq_f32(vmulq_f32(d, f[k]), m));
    }
}

/* reference: dequant_q4_K_ref */
static void dequant_q4_K_neon(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q4_K);
        const float d = kq_f16(KQ_FIELD(b, block_q4_K, d));
        const float min = kq_f16(KQ_FIELD(b, block_q4_K, dmin));
        uint8_t sc[8], mn[8];
        kq_scale_min_k4(KQ_FIELD(b, block_q4_K, scales), sc, mn);
        for (int j = 0; j < 4; j++, y += 64) {
            const uint8_t *q = KQ_FIELD(b, block_q4_K, qs) + 32 * j;
            const uint8x16_t r0 = vld1q_u8(q), r1 = vld1q_u8(q + 16), m4 = vdupq_n_u8(0x0f);
            const float d1 = d * sc[2 * j], m1 = min * mn[2 * j];
            const float d2 = d * sc[2 * j + 1], m2 = min * mn[2 * j + 1];
            store_u8x16(y, vandq_u8(r0, m4), d1, m1);
            store_u8x16(y + 16, vandq_u8(r1, m4), d1, m1);
            store_u8x16(y + 32, vshrq_n_u8(r0, 4), d2, m2);
            store_u8x16(y + 48, vshrq_n_u8(r1, 4), d2, m2);
        }
    }
}

/* reference: dequant_q5_K_ref */
static void dequant_q5_K_neon(const void *restrict src, float *restrict y, int64_t n) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), one = vdupq_n_u8(1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q5_K);
        const float d = kq_f16(KQ_FIELD(b, block_q5_K, d));
        const float min = kq_f16(KQ_FIELD(b, block_q5_K, dmin));
        uint8_t sc[8], mn[8];
        kq_scale_min_k4(KQ_FIELD(b, block_q5_K, scales), sc, mn);
        uint8x16_t h0 = vld1q_u8(KQ_FIELD(b, block_q5_K, qh));
        uint8x16_t h1 = vld1q_u8(KQ_FIELD(b, block_q5_K, qh) + 16);
        for (int sb = 0; sb < 8; sb++, y += 32) {
            const uint8_t *q = KQ_FIELD(b, block_q5_K, qs) + 32 * (sb / 2);
            uint8x16_t r0 = vld1q_u8(q), r1 = vld1q_u8(q + 16);
            if (sb % 2) {
                r0 = vshrq_n_u8(r0, 4);
                r1 = vshrq_n_u8(r1, 4);
            }
            r0 = vorrq_u8(vandq_u8(r0, m4), vshlq_n_u8(vandq_u8(h0, one), 4));
            r1 = vorrq_u8(vandq_u8(r1, m4), vshlq_n_u8(vandq_u8(h1, one), 4));
            store_u8x16(y, r0, d * sc[sb], min * mn[sb]);
            store_u8x16(y + 16, r1, d * sc[sb], min * mn[sb]);
            h0 = vshrq_n_u8(h0, 1);
            h1 = vshrq_n_u8(h1, 1);
        }
    }
}

/* reference: dequant_q6_K_ref ((d * scale) * q) */
static void dequant_q6_K_neon(const void *restrict src, float *restrict y, int64_t n) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(3), m30 = vdupq_n_u8(0x30);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q6_K);
        const float d = kq_f16(KQ_FIELD(b, block_q6_K, d));
        const int8_t *sc = (const int8_t *)KQ_FIELD(b, block_q6_K, scales);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = KQ_FIELD(b, block_q6_K, ql) + 64 * h;
            const uint8_t *qh = KQ_FIELD(b, block_q6_K, qh) + 32 * h;
            for (int half = 0; half < 2; half++) {
                const uint8x16_t a = vld1q_u8(ql + 16 * half), c = vld1q_u8(ql + 32 + 16 * half);
                const uint8x16_t hb = vld1q_u8(qh + 16 * half);
                const uint8x16_t q[4] = {
                    vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(hb, m3), 4)),
                    vorrq_u8(vandq_u8(c, m4), vandq_u8(vshlq_n_u8(hb, 2), m30)),
                    vorrq_u8(vshrq_n_u8(a, 4), vandq_u8(hb, m30)),
                    vorrq_u8(vshrq_n_u8(c, 4), vandq_u8(vshrq_n_u8(hb, 2), m30))};
                for (int p = 0; p < 4; p++) {
                    const int8x16_t v = vsubq_s8(vreinterpretq_s8_u8(q[p]), vdupq_n_s8(32));
                    const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
                    const float32x4_t dl = vdupq_n_f32(d * (float)sc[8 * h + 2 * p + half]);
                    float *o = y + 32 * p + 16 * half;
                    vst1q_f32(o, vmulq_f32(dl, vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)))));
                    vst1q_f32(o + 4, vmulq_f32(dl, vcvtq_f32_s32(vmovl_high_s16(lo))));
                    vst1q_f32(o + 8, vmulq_f32(dl, vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)))));
                    vst1q_f32(o + 12, vmulq_f32(dl, vcvtq_f32_s32(vmovl_high_s16(hi))));
                }
            }
        }
    }
}

void quant_install_neon_kquants(quant_traits *t, bool dotprod) {
    if (dotprod) {
        t[GGUF_TYPE_Q2_K].vec_dot = dot_q2_K_q8_K_dotprod;
        t[GGUF_TYPE_Q2_K].vec_dot_tile = tile_q2_K_q8_K_dotprod;
        t[GGUF_TYPE_Q3_K].vec_dot = dot_q3_K_q8_K_dotprod;
        t[GGUF_TYPE_Q3_K].vec_dot_tile = tile_q3_K_q8_K_dotprod;
        t[GGUF_TYPE_Q4_K].vec_dot = dot_q4_K_q8_K_dotprod;
        t[GGUF_TYPE_Q4_K].vec_dot_tile = tile_q4_K_q8_K_dotprod;
        t[GGUF_TYPE_Q5_K].vec_dot = dot_q5_K_q8_K_dotprod;
        t[GGUF_TYPE_Q5_K].vec_dot_tile = tile_q5_K_q8_K_dotprod;
        t[GGUF_TYPE_Q6_K].vec_dot = dot_q6_K_q8_K_dotprod;
        t[GGUF_TYPE_Q6_K].vec_dot_tile = tile_q6_K_q8_K_dotprod;
    } else {
        t[GGUF_TYPE_Q2_K].vec_dot = dot_q2_K_q8_K_neon;
        t[GGUF_TYPE_Q2_K].vec_dot_tile = tile_q2_K_q8_K_neon;
        t[GGUF_TYPE_Q3_K].vec_dot = dot_q3_K_q8_K_neon;
        t[GGUF_TYPE_Q3_K].vec_dot_tile = tile_q3_K_q8_K_neon;
        t[GGUF_TYPE_Q4_K].vec_dot = dot_q4_K_q8_K_neon;
        t[GGUF_TYPE_Q4_K].vec_dot_tile = tile_q4_K_q8_K_neon;
        t[GGUF_TYPE_Q5_K].vec_dot = dot_q5_K_q8_K_neon;
        t[GGUF_TYPE_Q5_K].vec_dot_tile = tile_q5_K_q8_K_neon;
        t[GGUF_TYPE_Q6_K].vec_dot = dot_q6_K_q8_K_neon;
        t[GGUF_TYPE_Q6_K].vec_dot_tile = tile_q6_K_q8_K_neon;
    }
    t[GGUF_TYPE_Q4_K].to_float = dequant_q4_K_neon;
    t[GGUF_TYPE_Q5_K].to_float = dequant_q5_K_neon;
    t[GGUF_TYPE_Q6_K].to_float = dequant_q6_K_neon;
    t[GGUF_TYPE_Q8_K].from_float = quant_q8_K_neon;
    quant_install_neon_iquants(t, dotprod);
}
