/*
 * Scalar reference kernels of the non-linear 4-bit i-quants: IQ4_NL (blocks
 * of 32, one fp16 scale) and IQ4_XS (super-blocks of 256: fp16 scale and
 * eight 6-bit sub-block scales). Each 4-bit index selects a value of the
 * codebook kq_iq4nl_values (quant/kquant_impl.h), times the scale.
 *
 * The quantizer is the one GGML's files are made with (quantize_iq4_nl /
 * quantize_iq4_xs without importance matrix, the path ggml_quantize_chunk and
 * llama-quantize take): a weighted least-squares scale refined over 15 trial
 * scales, then every index re-chosen with the final (rounded) scale. Note that
 * GGML's quantize_row_iq4_nl_ref takes a cheaper path (no search, no
 * re-rounding); files made with it differ, both read the same.
 *
 * The dot products follow GGML's activation formats: Q8_0 for IQ4_NL, Q8_K
 * for IQ4_XS.
 */
#include "quant/kquant_impl.h"

#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define GROUP_MAX_EPS 1e-15f

static inline int nearest_int(float v) {
    float t = v + 12582912.0f; /* see kquants.c */
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Index of the codebook value nearest to v (ties to the larger value): the
 * codebook is sorted, so the answer is the number of midpoints v reaches.
 * Compares 2v with the sum of neighbours, both exact in float. */
static inline int nearest_index(float v) {
    const float v2 = v + v;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = v2 >= (float)(kq_iq4nl_values[j - 1] + kq_iq4nl_values[j]) ? j : idx;
    }
    return idx;
}

/*
 * Quantizes one super-block of nsub sub-blocks of 32 (nsub 1: IQ4_NL, 8:
 * IQ4_XS). Writes the fp16 scale to *dh, the indices to q4 (16 bytes per 32
 * elements: element l in the low nibble of byte l, element 16 + l in the high
 * nibble) and, for nsub > 1, the 6-bit sub-block scales.
 */
static void iq4_quantize(int nsub, const float *x, lares_f16 *dh, uint8_t *q4, uint16_t *scales_h,
                         uint8_t *scales_l) {
    const int ntry = 7;
    const int n = 32 * nsub;
    uint8_t L[QK_K];
    float weight[32], scales[QK_K / 32];
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < nsub; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        for (int j = 0; j < 32; j++) {
            weight[j] = xb[j] * xb[j];
        }
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            memset(Lb, 0, 32);
            continue;
        }
        float d = -max / kq_iq4nl_values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const int l = nearest_index(id * xb[j]);
            Lb[j] = (uint8_t)l;
            const float q = kq_iq4nl_values[l];
            sumqx += weight[j] * q * xb[j];
            sumq2 += weight[j] * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; itry++) {
            id = (itry + kq_iq4nl_values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                const float q = kq_iq4nl_values[nearest_index(id * xb[j])];
                sumqx += weight[j] * q * xb[j];
                sumq2 += weight[j] * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if (fabsf(d) > amax_scale) {
            amax_scale = fabsf(d);
            max_scale = d;
        }
    }
    if (nsub > 1) {
        /* 6-bit sub-block scales l - 32 of the super-scale -max_scale / 32 */
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = f32_to_f16(d);
        const float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < nsub; ib++) {
            int l = nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) {
                L[32 * ib + j] = (uint8_t)nearest_index(idl * x[32 * ib + j]);
            }
            l += 32;
            if (ib % 2 == 0) {
                scales_l[ib / 2] = (uint8_t)(l & 0xf);
            } else {
                scales_l[ib / 2] = (uint8_t)(scales_l[ib / 2] | ((l & 0xf) << 4));
            }
            *scales_h = (uint16_t)(*scales_h | ((l >> 4) << (2 * (ib % 8))));
        }
    } else {
        *dh = f32_to_f16(scales[0]);
        const float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < n; j++) {
            L[j] = (uint8_t)nearest_index(id * x[j]);
        }
    }
    for (int i = 0; i < n / 32; i++) {
        for (int j = 0; j < 16; j++) {
            q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
        }
    }
}

/* ---- IQ4_NL ---- */

void quant_iq4_nl_ref(const float *restrict x, void *restrict dst, int64_t n) {
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_iq4_nl);
        lares_f16 d;
        iq4_quantize(1, x + i * QK4_NL, &d, KQ_FIELD(b, block_iq4_nl, qs), NULL, NULL);
        wr_u16le(KQ_FIELD(b, block_iq4_nl, d), d);
    }
}

void dequant_iq4_nl_ref(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_iq4_nl);
        const float d = kq_f16(KQ_FIELD(b, block_iq4_nl, d));
        const uint8_t *qs = KQ_FIELD(b, block_iq4_nl, qs);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * (float)kq_iq4nl_values[qs[j] & 0xf];
            y[j + QK4_NL / 2] = d * (float)kq_iq4nl_values[qs[j] >> 4];
        }
    }
}

void dot_iq4_nl_q8_0_ref(int64_t n, float *restrict s, const void *restrict vx,
                         const void *restrict vy) {
    double sum = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_iq4_nl);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_0);
        const uint8_t *qs = KQ_FIELD(bx, block_iq4_nl, qs);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_0, qs);
        int dot = 0;
        for (int j = 0; j < QK4_NL / 2; j++) {
            dot += kq_iq4nl_values[qs[j] & 0xf] * q8[j];
            dot += kq_iq4nl_values[qs[j] >> 4] * q8[j + QK4_NL / 2];
        }
        sum += (double)kq_f16(KQ_FIELD(bx, block_iq4_nl, d)) * kq_f16(KQ_FIELD(by, block_q8_0, d)) *
               (double)dot;
    }
    *s = (float)sum;
}

/* ---- IQ4_XS ---- */

void quant_iq4_xs_ref(const float *restrict x, void *restrict dst, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_iq4_xs);
        lares_f16 d;
        uint16_t sh;
        iq4_quantize(QK_K / 32, x + i * QK_K, &d, KQ_FIELD(b, block_iq4_xs, qs), &sh,
                     KQ_FIELD(b, block_iq4_xs, scales_l));
        wr_u16le(KQ_FIELD(b, block_iq4_xs, d), d);
        wr_u16le(KQ_FIELD(b, block_iq4_xs, scales_h), sh);
    }
}

void dequant_iq4_xs_ref(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_iq4_xs);
        const float d = kq_f16(KQ_FIELD(b, block_iq4_xs, d));
        const uint8_t *qs = KQ_FIELD(b, block_iq4_xs, qs);
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, y += 32) {
            const float dl = d * (float)kq_iq4xs_scale(b, ib);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)kq_iq4nl_values[qs[j] & 0xf];
                y[j + 16] = dl * (float)kq_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

void dot_iq4_xs_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx,
                         const void *restrict vy) {
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_iq4_xs);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_K);
        const uint8_t *qs = KQ_FIELD(bx, block_iq4_xs, qs);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_K, qs);
        long long isum = 0;
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, q8 += 32) {
            int dot = 0;
            for (int j = 0; j < 16; j++) {
                dot += kq_iq4nl_values[qs[j] & 0xf] * q8[j];
                dot += kq_iq4nl_values[qs[j] >> 4] * q8[j + 16];
            }
            isum += kq_iq4xs_scale(bx, ib) * dot;
        }
        sum += (double)q8k_d(by) * kq_f16(KQ_FIELD(bx, block_iq4_xs, d)) * (double)isum;
    }
    *s = (float)sum;
}
