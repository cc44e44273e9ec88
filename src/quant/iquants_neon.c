/*
 * NEON kernels of the non-linear 4-bit i-quants (IQ4_NL against Q8_0, IQ4_XS
 * against Q8_K) with and without the dot-product extension, and their
 * dequantization. Each names its reference in iquants.c. The indices select
 * codebook values with one TBL; values and activations are both signed bytes.
 */
#include "quant/kquant_impl.h"

#include <arm_neon.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE int32x4_t dot16(int8x16_t q, int8x16_t y, const bool dotprod) {
    if (dotprod) {
        return vdotq_s32(vdupq_n_s32(0), q, y);
    }
    const int16x8_t p0 = vmull_s8(vget_low_s8(q), vget_low_s8(y));
    const int16x8_t p1 = vmull_high_s8(q, y);
    return vpadalq_s16(vpaddlq_s16(p0), p1);
}

/* the 32 codebook values of a 16-byte index block: elements 0..15, 16..31 */
static ALWAYS_INLINE int8x16x2_t iq4_values(int8x16_t book, const uint8_t *qs) {
    const uint8x16_t raw = vld1q_u8(qs);
    int8x16x2_t v;
    v.val[0] = vqtbl1q_s8(book, vandq_u8(raw, vdupq_n_u8(0x0f)));
    v.val[1] = vqtbl1q_s8(book, vshrq_n_u8(raw, 4));
    return v;
}

/* sum over 32 elements of values x activations */
static ALWAYS_INLINE int32_t dot32(int8x16x2_t v, const int8_t *y, const bool dp) {
    return vaddvq_s32(
        vaddq_s32(dot16(v.val[0], vld1q_s8(y), dp), dot16(v.val[1], vld1q_s8(y + 16), dp)));
}

/* reference: dot_iq4_nl_q8_0_ref */
static ALWAYS_INLINE void dot_nl(int64_t n, float *restrict s, const void *restrict vx,
                                 const void *restrict vy, const bool dp) {
    const int8x16_t book = vld1q_s8(kq_iq4nl_values);
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_iq4_nl);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_0);
        const int32_t d = dot32(iq4_values(book, KQ_FIELD(bx, block_iq4_nl, qs)),
                                (const int8_t *)KQ_FIELD(by, block_q8_0, qs), dp);
        sum +=
            kq_f16(KQ_FIELD(bx, block_iq4_nl, d)) * kq_f16(KQ_FIELD(by, block_q8_0, d)) * (float)d;
    }
    *s = sum;
}

/* reference: dot_iq4_xs_q8_K_ref */
static ALWAYS_INLINE void dot_xs(int64_t n, float *restrict s, const void *restrict vx,
                                 const void *restrict vy, const bool dp) {
    const int8x16_t book = vld1q_s8(kq_iq4nl_values);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_iq4_xs);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_K);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_K, qs);
        int32_t isum = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int8x16x2_t v = iq4_values(book, KQ_FIELD(bx, block_iq4_xs, qs) + 16 * ib);
            isum += kq_iq4xs_scale(bx, ib) * dot32(v, q8 + 32 * ib, dp);
        }
        sum += kq_f16(KQ_FIELD(bx, block_iq4_xs, d)) * q8k_d(by) * (float)isum;
    }
    *s = sum;
}

static void dot_iq4_nl_q8_0_neon(int64_t n, float *restrict s, const void *restrict vx,
                                 const void *restrict vy) {
    dot_nl(n, s, vx, vy, false);
}
static void dot_iq4_nl_q8_0_dotprod(int64_t n, float *restrict s, const void *restrict vx,
                                    const void *restrict vy) {
    dot_nl(n, s, vx, vy, true);
}
static void dot_iq4_xs_q8_K_neon(int64_t n, float *restrict s, const void *restrict vx,
                                 const void *restrict vy) {
    dot_xs(n, s, vx, vy, false);
}
static void dot_iq4_xs_q8_K_dotprod(int64_t n, float *restrict s, const void *restrict vx,
                                    const void *restrict vy) {
    dot_xs(n, s, vx, vy, true);
}

static inline void store_s8x16(float *y, int8x16_t v, float dl) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
    const float32x4_t d = vdupq_n_f32(dl);
    vst1q_f32(y, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)))));
    vst1q_f32(y + 4, vmulq_f32(d, vcvtq_f32_s32(vmovl_high_s16(lo))));
    vst1q_f32(y + 8, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)))));
    vst1q_f32(y + 12, vmulq_f32(d, vcvtq_f32_s32(vmovl_high_s16(hi))));
}

/* reference: dequant_iq4_nl_ref */
static void dequant_iq4_nl_neon(const void *restrict src, float *restrict y, int64_t n) {
    const int8x16_t book = vld1q_s8(kq_iq4nl_values);
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_iq4_nl);
        const float d = kq_f16(KQ_FIELD(b, block_iq4_nl, d));
        const int8x16x2_t v = iq4_values(book, KQ_FIELD(b, block_iq4_nl, qs));
        store_s8x16(y, v.val[0], d);
        store_s8x16(y + 16, v.val[1], d);
    }
}

/* reference: dequant_iq4_xs_ref */
static void dequant_iq4_xs_neon(const void *restrict src, float *restrict y, int64_t n) {
    const int8x16_t book = vld1q_s8(kq_iq4nl_values);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_iq4_xs);
        const float d = kq_f16(KQ_FIELD(b, block_iq4_xs, d));
        for (int ib = 0; ib < QK_K / 32; ib++, y += 32) {
            const float dl = d * (float)kq_iq4xs_scale(b, ib);
            const int8x16x2_t v = iq4_values(book, KQ_FIELD(b, block_iq4_xs, qs) + 16 * ib);
            store_s8x16(y, v.val[0], dl);
            store_s8x16(y + 16, v.val[1], dl);
        }
    }
}

void quant_install_neon_iquants(quant_traits *t, bool dotprod) {
    t[GGUF_TYPE_IQ4_NL].vec_dot = dotprod ? dot_iq4_nl_q8_0_dotprod : dot_iq4_nl_q8_0_neon;
    t[GGUF_TYPE_IQ4_XS].vec_dot = dotprod ? dot_iq4_xs_q8_K_dotprod : dot_iq4_xs_q8_K_neon;
    t[GGUF_TYPE_IQ4_NL].to_float = dequant_iq4_nl_neon;
    t[GGUF_TYPE_IQ4_XS].to_float = dequant_iq4_xs_neon;
}
