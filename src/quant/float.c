/* Scalar reference kernels of the float types: f32, f16 (IEEE binary16), bf16. */
#include "quant/kernels.h"

void dequant_f32_ref(const void *restrict src, float *restrict dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void quant_f32_ref(const float *restrict src, void *restrict dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void dequant_f16_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const lares_f16 *h = src;
    for (int64_t i = 0; i < n; i++) {
        dst[i] = f16_to_f32(h[i]);
    }
}

void quant_f16_ref(const float *restrict src, void *restrict dst, int64_t n) {
    lares_f16 *h = dst;
    for (int64_t i = 0; i < n; i++) {
        h[i] = f32_to_f16(src[i]);
    }
}

void dequant_bf16_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const lares_bf16 *h = src;
    for (int64_t i = 0; i < n; i++) {
        dst[i] = bf16_to_f32(h[i]);
    }
}

void quant_bf16_ref(const float *restrict src, void *restrict dst, int64_t n) {
    lares_bf16 *h = dst;
    for (int64_t i = 0; i < n; i++) {
        h[i] = f32_to_bf16(src[i]);
    }
}

/* Dot products accumulate in double: the reference is the most exact answer,
 * and SIMD kernels are held to it within a tolerance. */
void dot_f32_f32_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const float *a = x, *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)a[i] * b[i];
    }
    *s = (float)sum;
}

void dot_f16_f32_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const lares_f16 *a = x;
    const float *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)f16_to_f32(a[i]) * b[i];
    }
    *s = (float)sum;
}

void dot_bf16_f32_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y) {
    const lares_bf16 *a = x;
    const float *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)bf16_to_f32(a[i]) * b[i];
    }
    *s = (float)sum;
}
