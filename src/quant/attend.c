/*
 * Attention over a KV cache, reference: the scores of a group of query heads
 * against every cached key, a softmax per head (exp from libm, the sum in
 * double), then the probability-weighted sum of the cached values. The SIMD
 * families (attend_avx2.c, attend_avx512.c) are held to it by test_quant.
 */
#include "quant/kernels.h"

#include <math.h>

typedef void (*row_fn)(const void *restrict src, float *restrict dst, int64_t n);

static void softmax_row(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        mx = x[j] > mx ? x[j] : mx;
    }
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
        x[j] = expf(x[j] - mx);
        sum += x[j];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < n; j++) {
        x[j] *= inv;
    }
}

static void attend(row_fn to_float, const float *restrict q, int64_t nq, int64_t hd,
                   const uint8_t *k, const uint8_t *v, size_t row_bytes, int64_t n, float scale,
                   float *restrict s, float *restrict tmp, float *restrict out) {
    for (int64_t j = 0; j < n; j++) {
        to_float(k + (size_t)j * row_bytes, tmp, hd);
        for (int64_t i = 0; i < nq; i++) {
            const float *qi = q + i * hd;
            float dot = 0;
            for (int64_t d = 0; d < hd; d++) {
                dot += qi[d] * tmp[d];
            }
            s[i * n + j] = dot * scale;
        }
    }
    for (int64_t i = 0; i < nq; i++) {
        softmax_row(s + i * n, n);
    }
    memset(out, 0, (size_t)(nq * hd) * sizeof *out);
    for (int64_t j = 0; j < n; j++) {
        to_float(v + (size_t)j * row_bytes, tmp, hd);
        for (int64_t i = 0; i < nq; i++) {
            const float p = s[i * n + j];
            float *oi = out + i * hd;
            for (int64_t d = 0; d < hd; d++) {
                oi[d] += p * tmp[d];
            }
        }
    }
}

void attend_f32_ref(const float *restrict q, int64_t nq, int64_t hd, const void *k, const void *v,
                    size_t row_bytes, int64_t n, float scale, float *restrict s,
                    float *restrict tmp, float *restrict out) {
    attend(dequant_f32_ref, q, nq, hd, k, v, row_bytes, n, scale, s, tmp, out);
}

void attend_f16_ref(const float *restrict q, int64_t nq, int64_t hd, const void *k, const void *v,
                    size_t row_bytes, int64_t n, float scale, float *restrict s,
                    float *restrict tmp, float *restrict out) {
    attend(dequant_f16_ref, q, nq, hd, k, v, row_bytes, n, scale, s, tmp, out);
}
