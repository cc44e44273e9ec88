/*
 * Activations to int8 codes as the Q8 reference quantizers make them
 * (quant_q8_0_ref) on AArch64: d = amax / 127, codes roundf(x * (1 / d)),
 * FCVTAS rounding halves away from zero as roundf does. Shared by the NEON
 * Q8_0/Q8_1 quantizers (legacy_neon.c), the few-row product's rows
 * (rows_neon.c) and the GEMMs' panels (gemm_neon.c, gemm_neon_i8mm.c), so
 * that a sequence's activations get the same codes whichever product
 * multiplies them. For files compiled for AArch64.
 */
#ifndef LARES_QUANT_Q8_NEON_H
#define LARES_QUANT_Q8_NEON_H

#include <arm_neon.h>
#include <stdint.h>

/* One block of 32 floats to the codes at qs; returns d (not yet rounded to
 * fp16); half[0] and half[1] get the sums of the codes of elements 0..15 and
 * 16..31. */
static inline __attribute__((always_inline)) float q8_block_neon(const float *x, int8_t *qs,
                                                                 int half[2]) {
    float32x4_t v[8];
    float32x4_t amax = vdupq_n_f32(0);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxq_f32(amax, vabsq_f32(v[k]));
    }
    const float d = vmaxvq_f32(amax) / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    int32x4_t q[8];
    int32x4_t s4[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int k = 0; k < 8; k++) {
        q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
        s4[k / 4] = vaddq_s32(s4[k / 4], q[k]);
    }
    half[0] = vaddvq_s32(s4[0]);
    half[1] = vaddvq_s32(s4[1]);
    for (int k = 0; k < 8; k += 2) {
        const int16x8_t h = vcombine_s16(vqmovn_s32(q[k]), vqmovn_s32(q[k + 1]));
        vst1_s8(qs + 4 * k, vqmovn_s16(h));
    }
    return d;
}

#endif /* LARES_QUANT_Q8_NEON_H */
