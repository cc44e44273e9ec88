/*
 * Attention over a KV cache with NEON (4 floats a vector, fused multiply-add
 * and F16 conversion of ARMv8): the kernels of attend_simd.h at this width.
 * Reference: attend.c.
 */
#include "quant/half.h"
#include "quant/kernels.h"

#include <arm_neon.h>
#include <math.h>

#define ATT_LANES 4
typedef float32x4_t vf;
#define V_LOAD(p)       vld1q_f32(p)
#define V_STORE(p, x)   vst1q_f32(p, x)
#define V_ZERO()        vdupq_n_f32(0.0f)
#define V_SET1(f)       vdupq_n_f32(f)
#define V_ADD(a, b)     vaddq_f32(a, b)
#define V_MUL(a, b)     vmulq_f32(a, b)
#define V_SUB(a, b)     vsubq_f32(a, b)
#define V_DIV(a, b)     vdivq_f32(a, b)
#define V_MIN(a, b)     vminq_f32(a, b)
#define V_MAX(a, b)     vmaxq_f32(a, b)
#define V_FMA(a, b, c)  vfmaq_f32(c, a, b)
#define V_FNMA(a, b, c) vfmsq_f32(c, a, b)
#define V_ROUND(x)      vrndnq_f32(x)
#define V_HSUM(x)       vaddvq_f32(x)
#define V_HMAX(x)       vmaxvq_f32(x)
#define V_LOAD_F16(p)                                                                              \
    vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)(p))))

static inline vf V_POW2I(vf n) {
    const int32x4_t e = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}

/* lane r = the sum of a[r]'s lanes: two rounds of pairwise adds */
static inline vf reduce_keys(const vf a[4]) {
    return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}

#include "quant/attend_simd.h"
#include "quant/silu_simd.h"

void quant_install_neon_attend(quant_traits *t) {
    t[GGUF_TYPE_F32].kv_attend = attend_f32_simd;
    t[GGUF_TYPE_F16].kv_attend = attend_f16_simd;
    t[GGUF_TYPE_F32].kv_attend_rows = attend_rows_f32_simd;
    t[GGUF_TYPE_F16].kv_attend_rows = attend_rows_f16_simd;
    t[GGUF_TYPE_F32].silu_mul = silu_mul_simd; /* SwiGLU, with the softmax's exp */
}
