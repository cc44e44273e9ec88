/*
 * Scalar reference kernels of the legacy 32-element block formats: Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0 (weights) and Q8_0, Q8_1 (activations). The quantizers
 * reproduce GGML's reference quantizers bit for bit (checked against
 * derived/ggml-quant-test-vectors.gguf), so files lares writes read the same
 * everywhere. Layouts: quant/blocks.h.
 */
#include "quant/kernels.h"

#include <float.h>
#include <math.h>

/* round-to-nearest of a value already offset into [0, limit]; NaN-safe clamp */
static inline int clamp_q(float v, int hi) {
    int q = (int)v; /* truncation toward zero, as the reference does */
    return q < 0 ? 0 : q > hi ? hi : q;
}

/* the element of largest magnitude, keeping its sign */
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void minmax(const float *x, int n, float *mn, float *mx) {
    *mn = FLT_MAX;
    *mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        *mn = x[j] < *mn ? x[j] : *mn;
        *mx = x[j] > *mx ? x[j] : *mx;
    }
}

/* ---- Q4_0 ---- */

void quant_q4_0_ref(const float *restrict x, void *restrict dst, int64_t n) {
    block_q4_0 *y = dst;
    for (int64_t b = 0; b < n / QK4_0; b++, x += QK4_0) {
        const float max = signed_absmax(x, QK4_0);
        const float d = max / -8;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int q0 = clamp_q(x[j] * id + 8.5f, 15);
            int q1 = clamp_q(x[j + QK4_0 / 2] * id + 8.5f, 15);
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void dequant_q4_0_ref(const void *restrict src, float *restrict y, int64_t n) {
    const block_q4_0 *x = src;
    for (int64_t b = 0; b < n / QK4_0; b++, y += QK4_0) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = (float)((x[b].qs[j] & 0x0f) - 8) * d;
            y[j + QK4_0 / 2] = (float)((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- Q4_1 ---- */

void quant_q4_1_ref(const float *restrict x, void *restrict dst, int64_t n) {
    block_q4_1 *y = dst;
    for (int64_t b = 0; b < n / QK4_1; b++, x += QK4_1) {
        float mn, mx;
        minmax(x, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        y[b].m = f32_to_f16(mn);
        for (int j = 0; j < QK4_1 / 2; j++) {
            int q0 = clamp_q((x[j] - mn) * id + 0.5f, 15);
            int q1 = clamp_q((x[j + QK4_1 / 2] - mn) * id + 0.5f, 15);
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void dequant_q4_1_ref(const void *restrict src, float *restrict y, int64_t n) {
    const block_q4_1 *x = src;
    for (int64_t b = 0; b < n / QK4_1; b++, y += QK4_1) {
        const float d = f16_to_f32(x[b].d);
        const float m = f16_to_f32(x[b].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = (float)(x[b].qs[j] & 0x0f) * d + m;
            y[j + QK4_1 / 2] = (float)(x[b].qs[j] >> 4) * d + m;
        }
    }
}

/* ---- Q5_0 ---- */

void quant_q5_0_ref(const float *restrict x, void *restrict dst, int64_t n) {
    block_q5_0 *y = dst;
    for (int64_t b = 0; b < n / QK5_0; b++, x += QK5_0) {
        const float max = signed_absmax(x, QK5_0);
        const float d = max / -16;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            int q0 = clamp_q(x[j] * id + 16.5f, 31);
            int q1 = clamp_q(x[j + QK5_0 / 2] * id + 16.5f, 31);
            y[b].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + QK5_0 / 2);
        }
        wr_u32le(y[b].qh, qh);
    }
}

void dequant_q5_0_ref(const void *restrict src, float *restrict y, int64_t n) {
    const block_q5_0 *x = src;
    for (int64_t b = 0; b < n / QK5_0; b++, y += QK5_0) {
        const float d = f16_to_f32(x[b].d);
        const uint32_t qh = rd_u32le(x[b].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4;
            int h1 = (int)((qh >> (j + QK5_0 / 2)) & 1) << 4;
            y[j] = (float)(((x[b].qs[j] & 0x0f) | h0) - 16) * d;
            y[j + QK5_0 / 2] = (float)(((x[b].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

/* ---- Q5_1 ---- */

void quant_q5_1_ref(const float *restrict x, void *restrict dst, int64_t n) {
    block_q5_1 *y = dst;
    for (int64_t b = 0; b < n / QK5_1; b++, x += QK5_1) {
        float mn, mx;
        minmax(x, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        y[b].m = f32_to_f16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            int q0 = clamp_q((x[j] - mn) * id + 0.5f, 31);
            int q1 = clamp_q((x[j + QK5_1 / 2] - mn) * id + 0.5f, 31);
            y[b].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + QK5_1 / 2);
        }
        wr_u32le(y[b].qh, qh);
    }
}

void dequant_q5_1_ref(const void *restrict src, float *restrict y, int64_t n) {
    const block_q5_1 *x = src;
    for (int64_t b = 0; b < n / QK5_1; b++, y += QK5_1) {
        const float d = f16_to_f32(x[b].d);
        const float m = f16_to_f32(x[b].m);
        const uint32_t qh = rd_u32le(x[b].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4;
            int h1 = (int)((qh >> (j + QK5_1 / 2)) & 1) << 4;
            y[j] = (float)((x[b].qs[j] & 0x0f) | h0) * d + m;
            y[j + QK5_1 / 2] = (float)((x[b].qs[j] >> 4) | h1) * d + m;
        }
    }
}

/* ---- Q8_0, Q8_1 ---- */

void quant_q8_0_ref(const float *restrict x, void *restrict dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }
        const float d = amax / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) {
            y[b].qs[j] = (int8_t)roundf(x[j] * id);
        }
    }
}

void dequant_q8_0_ref(const void *restrict src, float *restrict y, int64_t n) {
    const block_q8_0 *x = src;
    for (int64_t b = 0; b < n / QK8_0; b++, y += QK8_0) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < QK8_0; j++) {
            y[j] = (float)x[b].qs[j] * d;
        }
    }
}

void quant_q8_1_ref(const float *restrict x, void *restrict dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t b = 0; b < n / QK8_1; b++, x += QK8_1) {
        float amax = 0;
        for (int j = 0; j < QK8_1; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }
        const float d = amax / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        int sum = 0;
        y[b].d = f32_to_f16(d);
        for (int j = 0; j < QK8_1; j++) {
            y[b].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[b].qs[j];
        }
        y[b].s = f32_to_f16((float)sum * d);
    }
}

void dequant_q8_1_ref(const void *restrict src, float *restrict y, int64_t n) {
    const block_q8_1 *x = src;
    for (int64_t b = 0; b < n / QK8_1; b++, y += QK8_1) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < QK8_1; j++) {
            y[j] = (float)x[b].qs[j] * d;
        }
    }
}

/* ---- dot products: integer sums per block, scaled once per block ---- */

void dot_q4_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    const block_q4_0 *x = vx;
    const block_q8_0 *y = vy;
    double sum = 0;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            sumi += ((x[b].qs[j] & 0x0f) - 8) * y[b].qs[j];
            sumi += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + QK8_0 / 2];
        }
        sum += (double)sumi * f16_to_f32(x[b].d) * f16_to_f32(y[b].d);
    }
    *s = (float)sum;
}

void dot_q4_1_q8_1_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    const block_q4_1 *x = vx;
    const block_q8_1 *y = vy;
    double sum = 0;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        int sumi = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            sumi += (x[b].qs[j] & 0x0f) * y[b].qs[j];
            sumi += (x[b].qs[j] >> 4) * y[b].qs[j + QK8_1 / 2];
        }
        sum += (double)sumi * f16_to_f32(x[b].d) * f16_to_f32(y[b].d) +
               (double)f16_to_f32(x[b].m) * f16_to_f32(y[b].s);
    }
    *s = (float)sum;
}

void dot_q5_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    const block_q5_0 *x = vx;
    const block_q8_0 *y = vy;
    double sum = 0;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const uint32_t qh = rd_u32le(x[b].qh);
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4;
            int h1 = (int)((qh >> (j + QK8_0 / 2)) & 1) << 4;
            sumi += (((x[b].qs[j] & 0x0f) | h0) - 16) * y[b].qs[j];
            sumi += (((x[b].qs[j] >> 4) | h1) - 16) * y[b].qs[j + QK8_0 / 2];
        }
        sum += (double)sumi * f16_to_f32(x[b].d) * f16_to_f32(y[b].d);
    }
    *s = (float)sum;
}

void dot_q5_1_q8_1_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    const block_q5_1 *x = vx;
    const block_q8_1 *y = vy;
    double sum = 0;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        const uint32_t qh = rd_u32le(x[b].qh);
        int sumi = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4;
            int h1 = (int)((qh >> (j + QK8_1 / 2)) & 1) << 4;
            sumi += ((x[b].qs[j] & 0x0f) | h0) * y[b].qs[j];
            sumi += ((x[b].qs[j] >> 4) | h1) * y[b].qs[j + QK8_1 / 2];
        }
        sum += (double)sumi * f16_to_f32(x[b].d) * f16_to_f32(y[b].d) +
               (double)f16_to_f32(x[b].m) * f16_to_f32(y[b].s);
    }
    *s = (float)sum;
}

void dot_q8_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    const block_q8_0 *x = vx;
    const block_q8_0 *y = vy;
    double sum = 0;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) {
            sumi += x[b].qs[j] * y[b].qs[j];
        }
        sum += (double)sumi * f16_to_f32(x[b].d) * f16_to_f32(y[b].d);
    }
    *s = (float)sum;
}
