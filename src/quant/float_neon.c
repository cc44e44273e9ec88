/*
 * NEON kernels of the float types (f32, f16, bf16) on AArch64. Each names its
 * reference in float.c; tails shorter than a vector fall to the scalar loop.
 * fp16 is converted with FCVTL/FCVTN (base ARMv8 NEON, exact to float, round
 * to nearest even from float), so no kernel here needs the FP16 arithmetic
 * extension. quant_install_neon, the AArch64 installer, lives here and calls
 * the other *_neon.c files' parts.
 */
#include "quant/kernels.h"

#include <arm_neon.h>

/* reference: dot_f32_f32_ref */
static void dot_f32_f32_neon(int64_t n, float *restrict s, const void *restrict vx,
                             const void *restrict vy) {
    const float *x = vx, *y = vy;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; k++) {
            acc[k] = vfmaq_f32(acc[k], vld1q_f32(x + i + 4 * k), vld1q_f32(y + i + 4 * k));
        }
    }
    for (; i + 4 <= n; i += 4) {
        acc[0] = vfmaq_f32(acc[0], vld1q_f32(x + i), vld1q_f32(y + i));
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += x[i] * y[i];
    }
    *s = sum;
}

static inline float32x4_t f16x4_load(const lares_f16 *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

/* reference: dot_f16_f32_ref */
static void dot_f16_f32_neon(int64_t n, float *restrict s, const void *restrict vx,
                             const void *restrict vy) {
    const lares_f16 *x = vx;
    const float *y = vy;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; k++) {
            acc[k] = vfmaq_f32(acc[k], f16x4_load(x + i + 4 * k), vld1q_f32(y + i + 4 * k));
        }
    }
    for (; i + 4 <= n; i += 4) {
        acc[0] = vfmaq_f32(acc[0], f16x4_load(x + i), vld1q_f32(y + i));
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += f16_to_f32(x[i]) * y[i];
    }
    *s = sum;
}

/* four bf16 as floats: the upper halves of fp32 (exact) */
static inline float32x4_t bf16x4_load(const lares_bf16 *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

/* reference: dot_bf16_f32_ref */
static void dot_bf16_f32_neon(int64_t n, float *restrict s, const void *restrict vx,
                              const void *restrict vy) {
    const lares_bf16 *x = vx;
    const float *y = vy;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; k++) {
            acc[k] = vfmaq_f32(acc[k], bf16x4_load(x + i + 4 * k), vld1q_f32(y + i + 4 * k));
        }
    }
    for (; i + 4 <= n; i += 4) {
        acc[0] = vfmaq_f32(acc[0], bf16x4_load(x + i), vld1q_f32(y + i));
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++) {
        sum += bf16_to_f32(x[i]) * y[i];
    }
    *s = sum;
}

/* reference: dequant_f16_ref */
static void dequant_f16_neon(const void *restrict src, float *restrict dst, int64_t n) {
    const lares_f16 *x = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        vst1q_f32(dst + i, f16x4_load(x + i));
    }
    for (; i < n; i++) {
        dst[i] = f16_to_f32(x[i]);
    }
}

/* reference: quant_f16_ref (FCVTN rounds to nearest even, as f32_to_f16) */
static void quant_f16_neon(const float *restrict src, void *restrict dst, int64_t n) {
    lares_f16 *y = dst;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    }
    for (; i < n; i++) {
        y[i] = f32_to_f16(src[i]);
    }
}

/* reference: dequant_bf16_ref */
static void dequant_bf16_neon(const void *restrict src, float *restrict dst, int64_t n) {
    const lares_bf16 *x = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        vst1q_f32(dst + i, bf16x4_load(x + i));
    }
    for (; i < n; i++) {
        dst[i] = bf16_to_f32(x[i]);
    }
}

void quant_install_neon(quant_traits *t, bool dotprod) {
    quant_install_neon_legacy(t, dotprod);
    quant_install_neon_kquants(t, dotprod);
    t[GGUF_TYPE_F32].vec_dot = dot_f32_f32_neon;
    t[GGUF_TYPE_F16].vec_dot = dot_f16_f32_neon;
    t[GGUF_TYPE_F16].to_float = dequant_f16_neon;
    t[GGUF_TYPE_F16].from_float = quant_f16_neon;
    t[GGUF_TYPE_BF16].vec_dot = dot_bf16_f32_neon;
    t[GGUF_TYPE_BF16].to_float = dequant_bf16_neon;
}
