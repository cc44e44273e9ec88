/*
 * NEON kernels of the legacy 32-element block formats (AArch64): dot products
 * of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights with Q8_0/Q8_1 activations (single
 * rows and tiles of up to 4x4), dequantization, and the activation quantizers.
 * The reference of each kernel is named beside it (legacy.c); layouts are in
 * quant/blocks.h.
 *
 * Every dot kernel exists twice, chosen by quant_install_neon(t, dotprod):
 *   - with the dot-product extension (ARMv8.2 DotProd): SDOT adds four int8
 *     products into each int32 lane;
 *   - plain NEON: SMULL/SMLAL into int16 lanes, then SADALP into int32.
 * The file is built with -march=armv8.2-a+dotprod+fp16, so only functions
 * instantiated with dotprod = true may execute SDOT: the plain ones are
 * explicit SMULL code, and their block loops hold no scalar int8 sums that a
 * vectorizer could turn into SDOT (tests/cross/run_aarch64.sh runs them on a
 * CPU without the extension).
 *
 * Codes are signed int8 for every format: q - 8 and q - 16 for Q4_0 and Q5_0,
 * q (0..31) for Q4_1 and Q5_1, so that one signed product serves all. In the
 * plain form an int16 lane adds two products of |x| <= 128 and |y| <= 127
 * (at most 32512) before SADALP widens it. Activation codes are in [-127, 127]
 * as the quantizers produce them; weights may hold any code.
 *
 * Float work per block is the reference's: d_x * d_y times the exact integer
 * sum, added in float lanes instead of double. Dequantization and quantization
 * perform the reference's float operations in the same order and are
 * bit-exact: q * d + m is a multiply and an add, never a fused FMLA, and the
 * quantizers round with FCVTAS, which rounds halves away from zero as roundf.
 */
#include "quant/kernels.h"

#include <arm_neon.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

#include "quant/legacy_fmt.h"
#include "quant/q8_neon.h"

/* ---- small helpers ---- */

static ALWAYS_INLINE uint16_t ld_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* four fp16 values as floats (FCVTL: exact for every input) */
static ALWAYS_INLINE float32x4_t f16x4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
    uint64_t h = (uint64_t)a | (uint64_t)b << 16 | (uint64_t)c << 32 | (uint64_t)d << 48;
    return vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(h)));
}

static ALWAYS_INLINE float f16f(uint16_t h) {
    return vgetq_lane_f32(f16x4(h, 0, 0, 0), 0);
}

/* byte j of the result: 0x10 when bit j + 16 * half of the little-endian qh is set */
static ALWAYS_INLINE uint8x16_t q5_high_bits(const uint8_t *qh, int half) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    static const uint8_t pick[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                                        {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}};
    uint32_t h;
    memcpy(&h, qh, sizeof h); /* AArch64 Linux and macOS are little-endian */
    uint8x16_t v = vqtbl1q_u8(vreinterpretq_u8_u32(vdupq_n_u32(h)), vld1q_u8(pick[half]));
    return vandq_u8(vtstq_u8(v, vld1q_u8(bit)), vdupq_n_u8(0x10));
}

/* ---- per-format access ---- */

/* The 32 signed codes of a weight block: elements 0..15 in *lo, 16..31 in *hi. */
static ALWAYS_INLINE void fmt_codes(enum fmt f, const uint8_t *blk, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    uint8x16_t q, l, h;
    switch (f) {
    case F_Q4_0:
        q = vld1q_u8(((const block_q4_0 *)blk)->qs);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), vdupq_n_s8(8));
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
        return;
    case F_Q4_1:
        q = vld1q_u8(((const block_q4_1 *)blk)->qs);
        *lo = vreinterpretq_s8_u8(vandq_u8(q, m4));
        *hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
        return;
    case F_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)blk;
        q = vld1q_u8(b->qs);
        l = vorrq_u8(vandq_u8(q, m4), q5_high_bits(b->qh, 0));
        h = vorrq_u8(vshrq_n_u8(q, 4), q5_high_bits(b->qh, 1));
        *lo = vsubq_s8(vreinterpretq_s8_u8(l), vdupq_n_s8(16));
        *hi = vsubq_s8(vreinterpretq_s8_u8(h), vdupq_n_s8(16));
        return;
    }
    case F_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)blk;
        q = vld1q_u8(b->qs);
        *lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, m4), q5_high_bits(b->qh, 0)));
        *hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), q5_high_bits(b->qh, 1)));
        return;
    }
    default:
        *lo = vld1q_s8(((const block_q8_0 *)blk)->qs);
        *hi = vld1q_s8(((const block_q8_0 *)blk)->qs + 16);
        return;
    }
}

/* fp16 d (first field of every legacy block) and m (second, *_1 formats) */
static ALWAYS_INLINE uint16_t fmt_d(const uint8_t *blk) {
    return ld_u16(blk);
}

static ALWAYS_INLINE uint16_t fmt_m(const uint8_t *blk) {
    return ld_u16(blk + 2);
}

/* activation blocks: Q8_0 {d, qs} or Q8_1 {d, s, qs} */
static ALWAYS_INLINE const int8_t *act_qs(enum fmt f, const uint8_t *blk) {
    return (const int8_t *)blk + act_qs_offset(f);
}

/* Sum of the 32 products of one block in four int32 lanes. */
static ALWAYS_INLINE int32x4_t dot32(int8x16_t xl, int8x16_t xh, const int8_t *y, bool dotprod) {
    const int8x16_t yl = vld1q_s8(y), yh = vld1q_s8(y + 16);
    if (dotprod) {
        return vdotq_s32(vdotq_s32(vdupq_n_s32(0), xl, yl), xh, yh);
    }
    int16x8_t pl = vmull_s8(vget_low_s8(xl), vget_low_s8(yl));
    pl = vmlal_high_s8(pl, xl, yl);
    int16x8_t ph = vmull_s8(vget_low_s8(xh), vget_low_s8(yh));
    ph = vmlal_high_s8(ph, xh, yh);
    return vpadalq_s16(vpaddlq_s16(pl), ph);
}

/* ---- single dot products ---- */

static ALWAYS_INLINE void dot_legacy(enum fmt f, bool dotprod, int64_t n, float *s, const void *vx,
                                     const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const size_t xs = fmt_bytes(f), ys = act_bytes(f);
    const int64_t nb = n / QK8_0;
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
    float32x4_t accm = vdupq_n_f32(0); /* m * s, *_1 formats */
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, x += 2 * xs, y += 2 * ys) {
        int8x16_t l0, h0, l1, h1;
        fmt_codes(f, x, &l0, &h0);
        fmt_codes(f, x + xs, &l1, &h1);
        int32x4_t i0 = dot32(l0, h0, act_qs(f, y), dotprod);
        int32x4_t i1 = dot32(l1, h1, act_qs(f, y + ys), dotprod);
        /* [dx0 dx1 m0 m1] * [dy0 dy1 s0 s1]: two scales and two m * s at once */
        float32x4_t a = f16x4(fmt_d(x), fmt_d(x + xs), fmt_has_min(f) ? fmt_m(x) : 0,
                              fmt_has_min(f) ? fmt_m(x + xs) : 0);
        float32x4_t c = f16x4(ld_u16(y), ld_u16(y + ys), fmt_has_min(f) ? ld_u16(y + 2) : 0,
                              fmt_has_min(f) ? ld_u16(y + ys + 2) : 0);
        float32x4_t d = vmulq_f32(a, c);
        acc0 = vfmaq_laneq_f32(acc0, vcvtq_f32_s32(i0), d, 0);
        acc1 = vfmaq_laneq_f32(acc1, vcvtq_f32_s32(i1), d, 1);
        if (fmt_has_min(f)) {
            accm = vaddq_f32(accm, d);
        }
    }
    float summ = fmt_has_min(f) ? vgetq_lane_f32(accm, 2) + vgetq_lane_f32(accm, 3) : 0.0f;
    if (b < nb) { /* an odd last block */
        int8x16_t l0, h0;
        fmt_codes(f, x, &l0, &h0);
        int32x4_t i0 = dot32(l0, h0, act_qs(f, y), dotprod);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(i0), f16f(fmt_d(x)) * f16f(ld_u16(y)));
        if (fmt_has_min(f)) {
            summ += f16f(fmt_m(x)) * f16f(ld_u16(y + 2));
        }
    }
    *s = vaddvq_f32(vaddq_f32(acc0, acc1)) + summ;
}

#define DEFINE_DOT(name, fmt, dotprod)                                                             \
    static void name(int64_t n, float *restrict s, const void *restrict x,                         \
                     const void *restrict y) {                                                     \
        dot_legacy(fmt, dotprod, n, s, x, y);                                                      \
    }

/* references: dot_q4_0_q8_0_ref, dot_q4_1_q8_1_ref, dot_q5_0_q8_0_ref,
 * dot_q5_1_q8_1_ref, dot_q8_0_q8_0_ref */
DEFINE_DOT(dot_q4_0_q8_0_dotprod, F_Q4_0, true)
DEFINE_DOT(dot_q4_1_q8_1_dotprod, F_Q4_1, true)
DEFINE_DOT(dot_q5_0_q8_0_dotprod, F_Q5_0, true)
DEFINE_DOT(dot_q5_1_q8_1_dotprod, F_Q5_1, true)
DEFINE_DOT(dot_q8_0_q8_0_dotprod, F_Q8_0, true)
DEFINE_DOT(dot_q4_0_q8_0_neon, F_Q4_0, false)
DEFINE_DOT(dot_q4_1_q8_1_neon, F_Q4_1, false)
DEFINE_DOT(dot_q5_0_q8_0_neon, F_Q5_0, false)
DEFINE_DOT(dot_q5_1_q8_1_neon, F_Q5_1, false)
DEFINE_DOT(dot_q8_0_q8_0_neon, F_Q8_0, false)

/* ---- tiles: up to 4 weight rows x NC activation rows ----
 *
 * AArch64 has 32 vector registers: the codes of four weight rows (8) stay in
 * registers while each activation block (2) passes them. Each (row, column)
 * pair gets an int32x4 of partial sums; ADDP folds the four columns of a row
 * into one int32x4 [c0 c1 c2 c3], which is converted once and scaled by
 * d_x(row) * [d_y(c0) .. d_y(c3)] into that row's float accumulator. Weight
 * blocks are unpacked once for all columns, activation blocks loaded once for
 * all rows. Rows past nr read a block of zeros (scale 0) so that every loop
 * has four constant iterations and unrolls into registers.
 */

static const uint8_t zero_block[sizeof(block_q8_1)] = {0};

/* v * a[lane] for a lane known once the caller is unrolled */
static ALWAYS_INLINE float32x4_t mul_lane(float32x4_t v, float32x4_t a, int lane) {
    switch (lane) {
    case 0:
        return vmulq_laneq_f32(v, a, 0);
    case 1:
        return vmulq_laneq_f32(v, a, 1);
    case 2:
        return vmulq_laneq_f32(v, a, 2);
    default:
        return vmulq_laneq_f32(v, a, 3);
    }
}

static ALWAYS_INLINE void tile_legacy(enum fmt f, bool dotprod, const int NC, int64_t n,
                                      float *restrict s, size_t ldc, const uint8_t *restrict x,
                                      size_t bx, const uint8_t *restrict y, size_t by, int nr) {
    const size_t xs = fmt_bytes(f), ys = act_bytes(f);
    const int64_t nb = n / QK8_0;
    const uint8_t *row[QUANT_TILE_MAX];
    size_t step[QUANT_TILE_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < QUANT_TILE_MAX; r++) {
        row[r] = r < nr ? x + (size_t)r * bx : zero_block;
        step[r] = r < nr ? xs : 0;
    }
    float32x4_t acc[QUANT_TILE_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < QUANT_TILE_MAX; r++) {
        acc[r] = vdupq_n_f32(0);
    }
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t xl[QUANT_TILE_MAX], xh[QUANT_TILE_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < QUANT_TILE_MAX; r++) {
            fmt_codes(f, row[r], &xl[r], &xh[r]);
        }
        const float32x4_t dx = f16x4(fmt_d(row[0]), fmt_d(row[1]), fmt_d(row[2]), fmt_d(row[3]));
        float32x4_t mx = vdupq_n_f32(0);
        if (fmt_has_min(f)) {
            mx = f16x4(fmt_m(row[0]), fmt_m(row[1]), fmt_m(row[2]), fmt_m(row[3]));
        }
        const uint8_t *yb = y + (size_t)b * ys;
        const float32x4_t dy =
            f16x4(ld_u16(yb), NC > 1 ? ld_u16(yb + by) : 0, NC > 2 ? ld_u16(yb + 2 * by) : 0,
                  NC > 3 ? ld_u16(yb + 3 * by) : 0);
        float32x4_t sy = vdupq_n_f32(0);
        if (fmt_has_min(f)) {
            sy = f16x4(ld_u16(yb + 2), NC > 1 ? ld_u16(yb + by + 2) : 0,
                       NC > 2 ? ld_u16(yb + 2 * by + 2) : 0, NC > 3 ? ld_u16(yb + 3 * by + 2) : 0);
        }
        int32x4_t p[QUANT_TILE_MAX][QUANT_TILE_MAX];
#pragma GCC unroll 4
        for (int c = 0; c < QUANT_TILE_MAX; c++) {
            const int8_t *yq = act_qs(f, yb + (size_t)c * by);
#pragma GCC unroll 4
            for (int r = 0; r < QUANT_TILE_MAX; r++) {
                p[r][c] = c < NC ? dot32(xl[r], xh[r], yq, dotprod) : vdupq_n_s32(0);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < QUANT_TILE_MAX; r++) {
            int32x4_t i = vpaddq_s32(vpaddq_s32(p[r][0], p[r][1]), vpaddq_s32(p[r][2], p[r][3]));
            acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(i), mul_lane(dy, dx, r));
            if (fmt_has_min(f)) {
                acc[r] = vaddq_f32(acc[r], mul_lane(sy, mx, r));
            }
            row[r] += step[r];
        }
    }
    for (int r = 0; r < nr; r++) {
        float t[QUANT_TILE_MAX];
        vst1q_f32(t, acc[r]);
        for (int c = 0; c < NC; c++) {
            s[(size_t)c * ldc + r] = t[c];
        }
    }
}

#define DEFINE_TILE(name, fmt, dotprod)                                                            \
    static void name(int64_t n, float *restrict s, size_t ldc, const void *restrict x, size_t bx,  \
                     const void *restrict y, size_t by, int nr, int nc) {                          \
        switch (nc) {                                                                              \
        case 1:                                                                                    \
            tile_legacy(fmt, dotprod, 1, n, s, ldc, x, bx, y, by, nr);                             \
            break;                                                                                 \
        case 2:                                                                                    \
            tile_legacy(fmt, dotprod, 2, n, s, ldc, x, bx, y, by, nr);                             \
            break;                                                                                 \
        case 3:                                                                                    \
            tile_legacy(fmt, dotprod, 3, n, s, ldc, x, bx, y, by, nr);                             \
            break;                                                                                 \
        default:                                                                                   \
            tile_legacy(fmt, dotprod, 4, n, s, ldc, x, bx, y, by, nr);                             \
            break;                                                                                 \
        }                                                                                          \
    }

/* references: the vec_dot references above, once per (row, column) pair */
DEFINE_TILE(tile_q4_0_q8_0_dotprod, F_Q4_0, true)
DEFINE_TILE(tile_q4_1_q8_1_dotprod, F_Q4_1, true)
DEFINE_TILE(tile_q5_0_q8_0_dotprod, F_Q5_0, true)
DEFINE_TILE(tile_q5_1_q8_1_dotprod, F_Q5_1, true)
DEFINE_TILE(tile_q8_0_q8_0_dotprod, F_Q8_0, true)
DEFINE_TILE(tile_q4_0_q8_0_neon, F_Q4_0, false)
DEFINE_TILE(tile_q4_1_q8_1_neon, F_Q4_1, false)
DEFINE_TILE(tile_q5_0_q8_0_neon, F_Q5_0, false)
DEFINE_TILE(tile_q5_1_q8_1_neon, F_Q5_1, false)
DEFINE_TILE(tile_q8_0_q8_0_neon, F_Q8_0, false)

/* ---- dequantization ---- */

/* 16 int8 values times d (the reference: (float)q * d), stored as floats */
static ALWAYS_INLINE void store_scaled(float *dst, int8x16_t q, float d) {
    int16x8_t l = vmovl_s8(vget_low_s8(q)), h = vmovl_high_s8(q);
    vst1q_f32(dst, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(l))), d));
    vst1q_f32(dst + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(l)), d));
    vst1q_f32(dst + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), d));
    vst1q_f32(dst + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(h)), d));
}

/* the same plus m as two roundings (the reference's q * d + m, not an FMLA) */
static ALWAYS_INLINE void store_scaled_min(float *dst, int8x16_t q, float d, float m) {
    const float32x4_t mv = vdupq_n_f32(m);
    int16x8_t l = vmovl_s8(vget_low_s8(q)), h = vmovl_high_s8(q);
    vst1q_f32(dst, vaddq_f32(vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(l))), d), mv));
    vst1q_f32(dst + 4, vaddq_f32(vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(l)), d), mv));
    vst1q_f32(dst + 8, vaddq_f32(vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), d), mv));
    vst1q_f32(dst + 12, vaddq_f32(vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(h)), d), mv));
}

static ALWAYS_INLINE void dequant_legacy(enum fmt f, const void *src, float *dst, int64_t n) {
    const uint8_t *x = src;
    const size_t xs = fmt_bytes(f);
    for (int64_t b = 0; b < n / QK8_0; b++, x += xs, dst += QK8_0) {
        int8x16_t lo, hi;
        fmt_codes(f, x, &lo, &hi);
        const float d = f16f(fmt_d(x));
        if (fmt_has_min(f)) {
            const float m = f16f(fmt_m(x));
            store_scaled_min(dst, lo, d, m);
            store_scaled_min(dst + 16, hi, d, m);
        } else {
            store_scaled(dst, lo, d);
            store_scaled(dst + 16, hi, d);
        }
    }
}

/* reference: dequant_q4_0_ref */
static void dequant_q4_0_neon(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q4_0, src, dst, n);
}

/* reference: dequant_q4_1_ref */
static void dequant_q4_1_neon(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q4_1, src, dst, n);
}

/* reference: dequant_q5_0_ref */
static void dequant_q5_0_neon(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q5_0, src, dst, n);
}

/* reference: dequant_q5_1_ref */
static void dequant_q5_1_neon(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q5_1, src, dst, n);
}

/* reference: dequant_q8_0_ref */
static void dequant_q8_0_neon(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q8_0, src, dst, n);
}

/* reference: dequant_q8_1_ref (s is not needed to dequantize) */
static void dequant_q8_1_neon(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q8_1 *x = src;
    for (int64_t b = 0; b < n / QK8_1; b++, dst += QK8_1) {
        const float d = f16f(x[b].d);
        store_scaled(dst, vld1q_s8(x[b].qs), d);
        store_scaled(dst + 16, vld1q_s8(x[b].qs + 16), d);
    }
}

/* ---- activation quantizers ---- */

/* reference: quant_q8_0_ref */
static void quant_q8_0_neon(const float *restrict x, void *restrict dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        int half[2];
        y[b].d = f32_to_f16(q8_block_neon(x, y[b].qs, half));
    }
}

/* reference: quant_q8_1_ref */
static void quant_q8_1_neon(const float *restrict x, void *restrict dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t b = 0; b < n / QK8_1; b++, x += QK8_1) {
        int half[2];
        const float d = q8_block_neon(x, y[b].qs, half);
        y[b].d = f32_to_f16(d);
        y[b].s = f32_to_f16((float)(half[0] + half[1]) * d);
    }
}

void quant_install_neon_legacy(quant_traits *t, bool dotprod) {
    if (dotprod) {
        t[GGUF_TYPE_Q4_0].vec_dot = dot_q4_0_q8_0_dotprod;
        t[GGUF_TYPE_Q4_0].vec_dot_tile = tile_q4_0_q8_0_dotprod;
        t[GGUF_TYPE_Q4_1].vec_dot = dot_q4_1_q8_1_dotprod;
        t[GGUF_TYPE_Q4_1].vec_dot_tile = tile_q4_1_q8_1_dotprod;
        t[GGUF_TYPE_Q5_0].vec_dot = dot_q5_0_q8_0_dotprod;
        t[GGUF_TYPE_Q5_0].vec_dot_tile = tile_q5_0_q8_0_dotprod;
        t[GGUF_TYPE_Q5_1].vec_dot = dot_q5_1_q8_1_dotprod;
        t[GGUF_TYPE_Q5_1].vec_dot_tile = tile_q5_1_q8_1_dotprod;
        t[GGUF_TYPE_Q8_0].vec_dot = dot_q8_0_q8_0_dotprod;
        t[GGUF_TYPE_Q8_0].vec_dot_tile = tile_q8_0_q8_0_dotprod;
    } else {
        t[GGUF_TYPE_Q4_0].vec_dot = dot_q4_0_q8_0_neon;
        t[GGUF_TYPE_Q4_0].vec_dot_tile = tile_q4_0_q8_0_neon;
        t[GGUF_TYPE_Q4_1].vec_dot = dot_q4_1_q8_1_neon;
        t[GGUF_TYPE_Q4_1].vec_dot_tile = tile_q4_1_q8_1_neon;
        t[GGUF_TYPE_Q5_0].vec_dot = dot_q5_0_q8_0_neon;
        t[GGUF_TYPE_Q5_0].vec_dot_tile = tile_q5_0_q8_0_neon;
        t[GGUF_TYPE_Q5_1].vec_dot = dot_q5_1_q8_1_neon;
        t[GGUF_TYPE_Q5_1].vec_dot_tile = tile_q5_1_q8_1_neon;
        t[GGUF_TYPE_Q8_0].vec_dot = dot_q8_0_q8_0_neon;
        t[GGUF_TYPE_Q8_0].vec_dot_tile = tile_q8_0_q8_0_neon;
    }
    t[GGUF_TYPE_Q4_0].to_float = dequant_q4_0_neon;
    t[GGUF_TYPE_Q4_1].to_float = dequant_q4_1_neon;
    t[GGUF_TYPE_Q5_0].to_float = dequant_q5_0_neon;
    t[GGUF_TYPE_Q5_1].to_float = dequant_q5_1_neon;
    t[GGUF_TYPE_Q8_0].to_float = dequant_q8_0_neon;
    t[GGUF_TYPE_Q8_1].to_float = dequant_q8_1_neon;
    t[GGUF_TYPE_Q8_0].from_float = quant_q8_0_neon;
    t[GGUF_TYPE_Q8_1].from_float = quant_q8_1_neon;
}
