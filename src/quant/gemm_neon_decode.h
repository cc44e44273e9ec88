/*
 * Weight groups of 32 decoded to signed bytes for the AArch64 GEMMs
 * (gemm_neon.c: by-lane SDOT; gemm_neon_i8mm.c: SMMLA): elements 0..15 in
 * *w0, 16..31 in *w1, value = sw * v - mw. One function per format with one
 * scale per 32-element block; the K-quants' sub-block decoders take the
 * scales their caller unpacked once per super-block.
 */
#ifndef LARES_QUANT_GEMM_NEON_DECODE_H
#define LARES_QUANT_GEMM_NEON_DECODE_H

#include "quant/kquant_impl.h"

#include <arm_neon.h>

#define DECODE_INLINE static inline __attribute__((always_inline))

/* an fp16 word as a float by FCVTL: exact, and without the portable
 * conversion's branches (its loop over subnormals stayed in the kernels even
 * where the value went unused) */
DECODE_INLINE float h2f(const uint8_t *p) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(rd_u16le(p)))), 0);
}

/* bit i of qh (i < 16 for the low register, 16..31 the high one) as 0x10 in byte i */
DECODE_INLINE uint8x16_t bits_to_16(uint32_t qh, int half) {
    static const uint8_t sel[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                                       {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}};
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t rep = vqtbl1q_u8(vreinterpretq_u8_u32(vdupq_n_u32(qh)), vld1q_u8(sel[half]));
    return vandq_u8(vtstq_u8(rep, vld1q_u8(bit)), vdupq_n_u8(0x10));
}

static const int8_t iq4_s8[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};

#define DECODE_ARGS const uint8_t *b, int8x16_t *w0, int8x16_t *w1, float *sw, float *mw

DECODE_INLINE void dec_q4_0(DECODE_ARGS) {
    const uint8x16_t raw = vld1q_u8(KQ_FIELD(b, block_q4_0, qs));
    *w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    *w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), vdupq_n_s8(8));
    *sw = h2f(KQ_FIELD(b, block_q4_0, d));
    *mw = 0;
}

DECODE_INLINE void dec_q4_1(DECODE_ARGS) {
    const uint8x16_t raw = vld1q_u8(KQ_FIELD(b, block_q4_1, qs));
    *w0 = vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0f)));
    *w1 = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));
    *sw = h2f(KQ_FIELD(b, block_q4_1, d));
    *mw = -h2f(KQ_FIELD(b, block_q4_1, m));
}

DECODE_INLINE void dec_q5_0(DECODE_ARGS) {
    const uint8x16_t raw = vld1q_u8(KQ_FIELD(b, block_q5_0, qs));
    const uint32_t qh = rd_u32le(KQ_FIELD(b, block_q5_0, qh));
    *w0 =
        vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(raw, vdupq_n_u8(0x0f)), bits_to_16(qh, 0))),
                 vdupq_n_s8(16));
    *w1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(raw, 4), bits_to_16(qh, 1))),
                   vdupq_n_s8(16));
    *sw = h2f(KQ_FIELD(b, block_q5_0, d));
    *mw = 0;
}

DECODE_INLINE void dec_q5_1(DECODE_ARGS) {
    const uint8x16_t raw = vld1q_u8(KQ_FIELD(b, block_q5_1, qs));
    const uint32_t qh = rd_u32le(KQ_FIELD(b, block_q5_1, qh));
    *w0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(raw, vdupq_n_u8(0x0f)), bits_to_16(qh, 0)));
    *w1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(raw, 4), bits_to_16(qh, 1)));
    *sw = h2f(KQ_FIELD(b, block_q5_1, d));
    *mw = -h2f(KQ_FIELD(b, block_q5_1, m));
}

DECODE_INLINE void dec_q8_0(DECODE_ARGS) {
    *w0 = vld1q_s8((const int8_t *)KQ_FIELD(b, block_q8_0, qs));
    *w1 = vld1q_s8((const int8_t *)KQ_FIELD(b, block_q8_0, qs) + 16);
    *sw = h2f(KQ_FIELD(b, block_q8_0, d));
    *mw = 0;
}

DECODE_INLINE void dec_iq4_nl(DECODE_ARGS) {
    const uint8x16_t raw = vld1q_u8(KQ_FIELD(b, block_iq4_nl, qs));
    const int8x16_t tbl = vld1q_s8(iq4_s8);
    *w0 = vqtbl1q_s8(tbl, vandq_u8(raw, vdupq_n_u8(0x0f)));
    *w1 = vqtbl1q_s8(tbl, vshrq_n_u8(raw, 4));
    *sw = h2f(KQ_FIELD(b, block_iq4_nl, d));
    *mw = 0;
}

/* IQ4_XS sub-block j of super-block b (its scale: d (s_j - 32)) */
DECODE_INLINE void dec_iq4_xs_sub(const uint8_t *b, int j, int8x16_t *w0, int8x16_t *w1) {
    const uint8x16_t raw = vld1q_u8(KQ_FIELD(b, block_iq4_xs, qs) + 16 * j);
    const int8x16_t tbl = vld1q_s8(iq4_s8);
    *w0 = vqtbl1q_s8(tbl, vandq_u8(raw, vdupq_n_u8(0x0f)));
    *w1 = vqtbl1q_s8(tbl, vshrq_n_u8(raw, 4));
}

/* Q4_K / Q5_K sub-block j of super-block b: the low (j even) or high nibbles
 * of qs[32 (j / 2) ...], Q5_K's bit j of qh[e] as bit 4; levels 0..31 */
DECODE_INLINE void dec_q45_K_sub(const uint8_t *b, int j, bool five, int8x16_t *w0, int8x16_t *w1) {
    const uint8_t *qs = five ? KQ_FIELD(b, block_q5_K, qs) : KQ_FIELD(b, block_q4_K, qs);
    uint8x16_t lo = vld1q_u8(qs + 32 * (j / 2)), hi = vld1q_u8(qs + 32 * (j / 2) + 16);
    if (j % 2) {
        lo = vshrq_n_u8(lo, 4);
        hi = vshrq_n_u8(hi, 4);
    } else {
        lo = vandq_u8(lo, vdupq_n_u8(0x0f));
        hi = vandq_u8(hi, vdupq_n_u8(0x0f));
    }
    if (five) {
        const uint8_t *qh = KQ_FIELD(b, block_q5_K, qh);
        const int8x16_t sh = vdupq_n_s8((int8_t)(4 - j)); /* bit j to bit 4 */
        const uint8x16_t m = vdupq_n_u8(0x10);
        lo = vorrq_u8(lo, vandq_u8(vshlq_u8(vld1q_u8(qh), sh), m));
        hi = vorrq_u8(hi, vandq_u8(vshlq_u8(vld1q_u8(qh + 16), sh), m));
    }
    *w0 = vreinterpretq_s8_u8(lo);
    *w1 = vreinterpretq_s8_u8(hi);
}

/* Q6_K: in half h of super-block b, part p (0..3) of 32, its half `half` of
 * 16 (scale scales[8 h + 2 p + half]); v = 6 bits - 32 */
DECODE_INLINE int8x16_t dec_q6_K_16(const uint8_t *b, int h, int p, int half) {
    const uint8_t *ql = KQ_FIELD(b, block_q6_K, ql) + 64 * h;
    const uint8_t *qh = KQ_FIELD(b, block_q6_K, qh) + 32 * h;
    const int8x16_t sh = vdupq_n_s8((int8_t)(4 - 2 * p)); /* bits 2p, 2p + 1 to 4, 5 */
    uint8x16_t lo = vld1q_u8(ql + 32 * (p % 2) + 16 * half);
    lo = p / 2 ? vshrq_n_u8(lo, 4) : vandq_u8(lo, vdupq_n_u8(0x0f));
    const uint8x16_t hb = vandq_u8(vshlq_u8(vld1q_u8(qh + 16 * half), sh), vdupq_n_u8(0x30));
    return vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hb)), vdupq_n_s8(32));
}

/* Q2_K: in half h of super-block b, part p (0..3) of 32, its half `half` of
 * 16: bits 2p, 2p + 1 of qs[32 h + 16 half + l], levels 0..3 (scale byte
 * scales[8 h + 2 p + half]: scale low nibble, min multiplier high) */
DECODE_INLINE int8x16_t dec_q2_K_16(const uint8_t *b, int h, int p, int half) {
    const uint8x16_t q = vld1q_u8(KQ_FIELD(b, block_q2_K, qs) + 32 * h + 16 * half);
    return vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q, vdupq_n_s8((int8_t)(-2 * p))), vdupq_n_u8(3)));
}

/* Q3_K: the same levels plus bit 4 h + p of hmask[16 half + l] as bit 2,
 * minus 4: -4..3 (scale: the signed 6-bit scale 8 h + 2 p + half) */
DECODE_INLINE int8x16_t dec_q3_K_16(const uint8_t *b, int h, int p, int half) {
    const uint8x16_t q = vld1q_u8(KQ_FIELD(b, block_q3_K, qs) + 32 * h + 16 * half);
    const uint8x16_t hm = vld1q_u8(KQ_FIELD(b, block_q3_K, hmask) + 16 * half);
    const uint8x16_t lo = vandq_u8(vshlq_u8(q, vdupq_n_s8((int8_t)(-2 * p))), vdupq_n_u8(3));
    const uint8x16_t hi =
        vandq_u8(vshlq_u8(hm, vdupq_n_s8((int8_t)(2 - (4 * h + p)))), vdupq_n_u8(4));
    return vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), vdupq_n_s8(4));
}

#endif /* LARES_QUANT_GEMM_NEON_DECODE_H */
