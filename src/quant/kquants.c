/*
 * Scalar reference kernels of the K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
 * (weights, 256-element super-blocks) and Q8_K (their activation format).
 *
 * Dequantization reproduces GGML's bit for bit, and the quantizers follow
 * GGML's imatrix-free reference quantizers (quantize_row_q{2..6}_K_ref, the
 * path ggml_quantize_chunk takes without an importance matrix) step for step,
 * in the same float operation order, so files lares writes are byte-identical
 * to the reference engine's (checked against derived/ggml-quant-test-vectors).
 * Layouts: quant/blocks.h. Dot products accumulate exact integer sums per
 * sub-block and scale them in double: the reference is the most exact answer.
 */
#include "quant/kquant_impl.h"

#include <math.h>

/* Float expressions below must round exactly as GGML's do: no fused
 * multiply-add where the source has a multiply and an add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even: adding 1.5 * 2^23 leaves the rounded
 * integer in the low mantissa bits (|v| < 2^22; GGML rounds this way). */
static inline int nearest_int(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* the element of largest magnitude (first one on ties), keeping its sign */
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    *amax_out = amax;
    return max;
}

/*
 * Symmetric scale for n values into [-nmax, nmax - 1], weighted by x^2: the
 * least-squares scale for the rounding at iscale = -nmax / max, then for 18
 * nearby iscales, keeping the best. L gets the levels offset by nmax.
 * (GGML's make_qx_quants with rmse_type 1 and no importance weights.)
 */
static float qx_scale(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) {
            continue;
        }
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                L[i] = (int8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/*
 * Symmetric 3-bit scale: round at -nmax / max, then up to 5 passes of
 * coordinate descent on single levels, each accepted only if it raises
 * sumlx^2 / suml2 (weights x^2). L gets levels offset by nmax.
 * (GGML's make_q3_quants with do_rmse.)
 */
static float q3_scale(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int nl = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (nl != L[i]) {
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) {
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        L[i] = (int8_t)(L[i] + nmax);
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/*
 * Asymmetric scale and min for n values into [0, nmax]: x ~ scale * L - min.
 * Starts from the min/max rounding, then tries nstep + 1 iscales
 * (rmin + rdelta * is + nmax) / (max - min), fitting scale and min by weighted
 * least squares to each rounding and keeping the one of least weighted error
 * (absolute error when use_mad). Returns scale; *the_min gets the (positive)
 * min. (GGML's make_qkx2_quants.)
 */
static float qkx2_scale_min(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                            float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                            bool use_mad) {
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) {
            min = x[i];
        }
        if (x[i] > max) {
            max = x[i];
        }
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) {
        min = 0;
    }
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)clampi(l, 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* packs 256 2-bit levels: byte l of each 32-byte half holds elements
 * l, l + 32, l + 64, l + 96 of that half in bits 0-1, 2-3, 4-5, 6-7 */
static void pack_2bit(const int8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; l++) {
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
        }
    }
}

/* ---- Q2_K ---- */

void quant_q2_K_ref(const float *restrict x, void *restrict dst, int64_t n) {
    int8_t L[QK_K];
    uint8_t Lu[16], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_q2_K);
        uint8_t *sc = KQ_FIELD(b, block_q2_K, scales);
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) {
                weights[l] = fabsf(x[16 * j + l]);
            }
            scales[j] = qkx2_scale_min(16, 3, x + 16 * j, weights, Lu, &mins[j], Laux, -0.5f, 0.1f,
                                       15, true);
            for (int l = 0; l < 16; l++) {
                L[16 * j + l] = (int8_t)Lu[l];
            }
            if (scales[j] > max_scale) {
                max_scale = scales[j];
            }
            if (mins[j] > max_min) {
                max_min = mins[j];
            }
        }
        lares_f16 d = 0, dmin = 0;
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                sc[j] = (uint8_t)nearest_int(iscale * scales[j]);
            }
            d = f32_to_f16(max_scale / q4scale);
        } else {
            memset(sc, 0, QK_K / 16);
            d = f32_to_f16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; j++) {
                sc[j] = (uint8_t)(sc[j] | ((unsigned)nearest_int(iscale * mins[j]) << 4));
            }
            dmin = f32_to_f16(max_min / q4scale);
        } else {
            dmin = f32_to_f16(0.f);
        }
        wr_u16le(KQ_FIELD(b, block_q2_K, d), d);
        wr_u16le(KQ_FIELD(b, block_q2_K, dmin), dmin);
        for (int j = 0; j < QK_K / 16; j++) {
            const float dl = f16_to_f32(d) * (sc[j] & 0xf);
            if (!dl) {
                continue;
            }
            const float ml = f16_to_f32(dmin) * (sc[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                L[16 * j + ii] = (int8_t)clampi(nearest_int((x[16 * j + ii] + ml) / dl), 0, 3);
            }
        }
        pack_2bit(L, KQ_FIELD(b, block_q2_K, qs));
    }
}

void dequant_q2_K_ref(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q2_K);
        const float d = kq_f16(KQ_FIELD(b, block_q2_K, d));
        const float min = kq_f16(KQ_FIELD(b, block_q2_K, dmin));
        const uint8_t *sc = KQ_FIELD(b, block_q2_K, scales);
        const uint8_t *q = KQ_FIELD(b, block_q2_K, qs);
        /* element 128h + 32s + l: bits 2s of q[32h + l], scale of 16-group 8h + 2s + l/16 */
        for (int h = 0; h < 2; h++, q += 32) {
            for (int s = 0; s < 4; s++) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t g = sc[8 * h + 2 * s + half];
                    const float dl = d * (g & 0xf);
                    const float ml = min * (g >> 4);
                    for (int l = 0; l < 16; l++) {
                        *y++ = dl * (float)((q[16 * half + l] >> (2 * s)) & 3) - ml;
                    }
                }
            }
        }
    }
}

/* level (0..3) of element e of a Q2_K block */
static inline int q2k_level(const uint8_t *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void dot_q2_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_q2_K);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_K);
        const uint8_t *sc = KQ_FIELD(bx, block_q2_K, scales);
        const uint8_t *qs = KQ_FIELD(bx, block_q2_K, qs);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_K, qs);
        long long isum = 0, msum = 0; /* sum sc * q * y and sum m * y */
        for (int g = 0; g < QK_K / 16; g++) {
            int dot = 0, ys = 0;
            for (int l = 0; l < 16; l++) {
                dot += q2k_level(qs, 16 * g + l) * q8[16 * g + l];
                ys += q8[16 * g + l];
            }
            isum += (sc[g] & 0xf) * dot;
            msum += (sc[g] >> 4) * ys;
        }
        const double dy = q8k_d(by);
        sum += dy * kq_f16(KQ_FIELD(bx, block_q2_K, d)) * (double)isum -
               dy * kq_f16(KQ_FIELD(bx, block_q2_K, dmin)) * (double)msum;
    }
    *s = (float)sum;
}

/* ---- Q3_K ---- */

void quant_q3_K_ref(const float *restrict x, void *restrict dst, int64_t n) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_q3_K);
        uint8_t *sc = KQ_FIELD(b, block_q3_K, scales);
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = q3_scale(16, 4, x + 16 * j, L + 16 * j);
            float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        memset(sc, 0, 12);
        lares_f16 d;
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                int l = clampi(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) {
                    sc[j] = (uint8_t)(l & 0xf);
                } else {
                    sc[j - 8] = (uint8_t)(sc[j - 8] | ((l & 0xf) << 4));
                }
                sc[j % 4 + 8] = (uint8_t)(sc[j % 4 + 8] | ((l >> 4) << (2 * (j / 4))));
            }
            d = f32_to_f16(1 / iscale);
        } else {
            d = f32_to_f16(0.f);
        }
        wr_u16le(KQ_FIELD(b, block_q3_K, d), d);
        int scale[16];
        kq_scales_q3(sc, scale);
        for (int j = 0; j < QK_K / 16; j++) {
            const float dl = f16_to_f32(d) * scale[j];
            if (!dl) {
                continue;
            }
            for (int ii = 0; ii < 16; ii++) {
                L[16 * j + ii] = (int8_t)(clampi(nearest_int(x[16 * j + ii] / dl), -4, 3) + 4);
            }
        }
        /* the high bit of element e goes to bit e / 32 of hmask[e % 32] */
        uint8_t *hm = KQ_FIELD(b, block_q3_K, hmask);
        memset(hm, 0, QK_K / 8);
        for (int e = 0; e < QK_K; e++) {
            if (L[e] > 3) {
                hm[e % 32] = (uint8_t)(hm[e % 32] | (1u << (e / 32)));
                L[e] = (int8_t)(L[e] - 4);
            }
        }
        pack_2bit(L, KQ_FIELD(b, block_q3_K, qs));
    }
}

/* signed level (-4..3) of element e of a Q3_K block */
static inline int q3k_level(const uint8_t *qs, const uint8_t *hm, int e) {
    int lo = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    return lo - ((hm[e % 32] >> (e / 32)) & 1 ? 0 : 4);
}

void dequant_q3_K_ref(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q3_K);
        const float d_all = kq_f16(KQ_FIELD(b, block_q3_K, d));
        const uint8_t *qs = KQ_FIELD(b, block_q3_K, qs);
        const uint8_t *hm = KQ_FIELD(b, block_q3_K, hmask);
        int scale[16];
        kq_scales_q3(KQ_FIELD(b, block_q3_K, scales), scale);
        for (int g = 0; g < QK_K / 16; g++) {
            const float dl = d_all * (float)scale[g];
            for (int l = 0; l < 16; l++) {
                *y++ = dl * (float)q3k_level(qs, hm, 16 * g + l);
            }
        }
    }
}

void dot_q3_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_q3_K);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_K);
        const uint8_t *qs = KQ_FIELD(bx, block_q3_K, qs);
        const uint8_t *hm = KQ_FIELD(bx, block_q3_K, hmask);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_K, qs);
        int scale[16];
        kq_scales_q3(KQ_FIELD(bx, block_q3_K, scales), scale);
        long long isum = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) {
                dot += q3k_level(qs, hm, 16 * g + l) * q8[16 * g + l];
            }
            isum += scale[g] * dot;
        }
        sum += (double)q8k_d(by) * kq_f16(KQ_FIELD(bx, block_q3_K, d)) * (double)isum;
    }
    *s = (float)sum;
}

/* ---- Q4_K, Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins ---- */

/* Fits 8 scales and mins to the 32-element sub-blocks of x, quantizes them
 * to 6 bits into sc (the 12-byte packing) and the two fp16 super-scales,
 * then requantizes every element to [0, nmax] with the rounded scales.
 * Shared by Q4_K (nmax 15) and Q5_K (nmax 31): GGML's Q4_K and Q5_K
 * reference quantizers differ only in nmax and the search range. */
static void q45k_fit(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t *sc,
                     lares_f16 *d_out, lares_f16 *dmin_out, uint8_t L[QK_K]) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) {
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        }
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) {
            weights[l] = av_x + fabsf(x[32 * j + l]);
        }
        scales[j] = qkx2_scale_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                   rdelta, nstep, false);
        if (scales[j] > max_scale) {
            max_scale = scales[j];
        }
        if (mins[j] > max_min) {
            max_min = mins[j];
        }
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            sc[j - 4] = (uint8_t)(sc[j - 4] | ((ls >> 4) << 6));
            sc[j] = (uint8_t)(sc[j] | ((lm >> 4) << 6));
        }
    }
    const lares_f16 d = f32_to_f16(max_scale / 63.f);
    const lares_f16 dmin = f32_to_f16(max_min / 63.f);
    uint8_t scale[8], mn[8];
    kq_scale_min_k4(sc, scale, mn);
    for (int j = 0; j < QK_K / 32; j++) {
        const float dl = f16_to_f32(d) * scale[j];
        if (!dl) {
            continue;
        }
        const float dm = f16_to_f32(dmin) * mn[j];
        for (int ii = 0; ii < 32; ii++) {
            L[32 * j + ii] = (uint8_t)clampi(nearest_int((x[32 * j + ii] + dm) / dl), 0, nmax);
        }
    }
    *d_out = d;
    *dmin_out = dmin;
}

void quant_q4_K_ref(const float *restrict x, void *restrict dst, int64_t n) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_q4_K);
        lares_f16 d, dmin;
        q45k_fit(x, 15, -1.f, 0.1f, 20, KQ_FIELD(b, block_q4_K, scales), &d, &dmin, L);
        wr_u16le(KQ_FIELD(b, block_q4_K, d), d);
        wr_u16le(KQ_FIELD(b, block_q4_K, dmin), dmin);
        /* 64-element group j: byte l holds element 64j + l (low) and 64j + 32 + l (high) */
        uint8_t *q = KQ_FIELD(b, block_q4_K, qs);
        for (int j = 0; j < QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; l++) {
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
            }
        }
    }
}

void dequant_q4_K_ref(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q4_K);
        const float d = kq_f16(KQ_FIELD(b, block_q4_K, d));
        const float min = kq_f16(KQ_FIELD(b, block_q4_K, dmin));
        const uint8_t *q = KQ_FIELD(b, block_q4_K, qs);
        uint8_t sc[8], mn[8];
        kq_scale_min_k4(KQ_FIELD(b, block_q4_K, scales), sc, mn);
        for (int j = 0; j < 4; j++, q += 32) {
            const float d1 = d * sc[2 * j], m1 = min * mn[2 * j];
            const float d2 = d * sc[2 * j + 1], m2 = min * mn[2 * j + 1];
            for (int l = 0; l < 32; l++) {
                *y++ = d1 * (float)(q[l] & 0xf) - m1;
            }
            for (int l = 0; l < 32; l++) {
                *y++ = d2 * (float)(q[l] >> 4) - m2;
            }
        }
    }
}

void dot_q4_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_q4_K);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_K);
        const uint8_t *q = KQ_FIELD(bx, block_q4_K, qs);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_K, qs);
        uint8_t sc[8], mn[8];
        kq_scale_min_k4(KQ_FIELD(bx, block_q4_K, scales), sc, mn);
        long long isum = 0, msum = 0;
        for (int sb = 0; sb < 8; sb++) {
            const int shift = 4 * (sb % 2);
            int dot = 0, ys = 0;
            for (int l = 0; l < 32; l++) {
                dot += ((q[32 * (sb / 2) + l] >> shift) & 0xf) * q8[32 * sb + l];
                ys += q8[32 * sb + l];
            }
            isum += sc[sb] * dot;
            msum += mn[sb] * ys;
        }
        const double dy = q8k_d(by);
        sum += dy * kq_f16(KQ_FIELD(bx, block_q4_K, d)) * (double)isum -
               dy * kq_f16(KQ_FIELD(bx, block_q4_K, dmin)) * (double)msum;
    }
    *s = (float)sum;
}

/* ---- Q5_K ---- */

void quant_q5_K_ref(const float *restrict x, void *restrict dst, int64_t n) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_q5_K);
        lares_f16 d, dmin;
        q45k_fit(x, 31, -0.5f, 0.1f, 15, KQ_FIELD(b, block_q5_K, scales), &d, &dmin, L);
        wr_u16le(KQ_FIELD(b, block_q5_K, d), d);
        wr_u16le(KQ_FIELD(b, block_q5_K, dmin), dmin);
        /* low nibbles as Q4_K; bit 4 of element 32k + l is bit k of qh[l] */
        uint8_t *qh = KQ_FIELD(b, block_q5_K, qh);
        uint8_t *ql = KQ_FIELD(b, block_q5_K, qs);
        memset(qh, 0, QK_K / 8);
        for (int j = 0; j < QK_K; j += 64, ql += 32) {
            for (int l = 0; l < 32; l++) {
                const int l1 = L[j + l], l2 = L[j + l + 32];
                qh[l] = (uint8_t)(qh[l] | ((l1 >> 4) << (j / 32)) | ((l2 >> 4) << (j / 32 + 1)));
                ql[l] = (uint8_t)((l1 & 0xf) | ((l2 & 0xf) << 4));
            }
        }
    }
}

static inline int q5k_level(const uint8_t *ql, const uint8_t *qh, int e) {
    const int lo = (ql[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 0xf;
    return lo | (((qh[e % 32] >> (e / 32)) & 1) << 4);
}

void dequant_q5_K_ref(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q5_K);
        const float d = kq_f16(KQ_FIELD(b, block_q5_K, d));
        const float min = kq_f16(KQ_FIELD(b, block_q5_K, dmin));
        const uint8_t *ql = KQ_FIELD(b, block_q5_K, qs);
        const uint8_t *qh = KQ_FIELD(b, block_q5_K, qh);
        uint8_t sc[8], mn[8];
        kq_scale_min_k4(KQ_FIELD(b, block_q5_K, scales), sc, mn);
        for (int sb = 0; sb < 8; sb++) {
            const float dl = d * sc[sb], ml = min * mn[sb];
            for (int l = 0; l < 32; l++) {
                *y++ = dl * (float)q5k_level(ql, qh, 32 * sb + l) - ml;
            }
        }
    }
}

void dot_q5_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_q5_K);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_K);
        const uint8_t *ql = KQ_FIELD(bx, block_q5_K, qs);
        const uint8_t *qh = KQ_FIELD(bx, block_q5_K, qh);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_K, qs);
        uint8_t sc[8], mn[8];
        kq_scale_min_k4(KQ_FIELD(bx, block_q5_K, scales), sc, mn);
        long long isum = 0, msum = 0;
        for (int sb = 0; sb < 8; sb++) {
            int dot = 0, ys = 0;
            for (int l = 0; l < 32; l++) {
                dot += q5k_level(ql, qh, 32 * sb + l) * q8[32 * sb + l];
                ys += q8[32 * sb + l];
            }
            isum += sc[sb] * dot;
            msum += mn[sb] * ys;
        }
        const double dy = q8k_d(by);
        sum += dy * kq_f16(KQ_FIELD(bx, block_q5_K, d)) * (double)isum -
               dy * kq_f16(KQ_FIELD(bx, block_q5_K, dmin)) * (double)msum;
    }
    *s = (float)sum;
}

/* ---- Q6_K: 16 sub-blocks of 16 with signed 8-bit scales ---- */

void quant_q6_K_ref(const float *restrict x, void *restrict dst, int64_t n) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_q6_K);
        float max_scale = 0, max_abs_scale = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            scales[g] = qx_scale(16, 32, x + 16 * g, L + 16 * g);
            const float a = fabsf(scales[g]);
            if (a > max_abs_scale) {
                max_abs_scale = a;
                max_scale = scales[g];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(b, 0, sizeof(block_q6_K));
            continue;
        }
        const float iscale = -128.f / max_scale;
        const lares_f16 d = f32_to_f16(1 / iscale);
        wr_u16le(KQ_FIELD(b, block_q6_K, d), d);
        int8_t *sc = (int8_t *)KQ_FIELD(b, block_q6_K, scales);
        for (int g = 0; g < QK_K / 16; g++) {
            const int l = nearest_int(iscale * scales[g]);
            sc[g] = (int8_t)(l < 127 ? l : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            const float dl = f16_to_f32(d) * sc[g];
            if (!dl) {
                continue;
            }
            for (int ii = 0; ii < 16; ii++) {
                L[16 * g + ii] = (int8_t)(clampi(nearest_int(x[16 * g + ii] / dl), -32, 31) + 32);
            }
        }
        /* 128-element half h, l < 32: ql[64h + l] holds elements 128h + l (low
         * nibble) and 128h + 64 + l (high); ql[64h + 32 + l] elements
         * 128h + 32 + l and 128h + 96 + l; qh[32h + l] bits 0-1, 2-3, 4-5, 6-7
         * are bits 4-5 of elements 128h + l, +32, +64, +96 */
        uint8_t *ql = KQ_FIELD(b, block_q6_K, ql);
        uint8_t *qh = KQ_FIELD(b, block_q6_K, qh);
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0xf) | ((q3 & 0xf) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xf) | ((q4 & 0xf) << 4));
                qh[l] =
                    (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

/* signed level (-32..31) of element e of a Q6_K block */
static inline int q6k_level(const uint8_t *ql, const uint8_t *qh, int e) {
    const int h = e / 128, r = e % 128, l = e % 32, part = r / 32; /* 0..3 */
    const int lo = (ql[64 * h + 32 * (part % 2) + l] >> (4 * (part / 2))) & 0xf;
    const int hi = (qh[32 * h + l] >> (2 * part)) & 3;
    return (lo | (hi << 4)) - 32;
}

void dequant_q6_K_ref(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q6_K);
        const float d = kq_f16(KQ_FIELD(b, block_q6_K, d));
        const uint8_t *ql = KQ_FIELD(b, block_q6_K, ql);
        const uint8_t *qh = KQ_FIELD(b, block_q6_K, qh);
        const int8_t *sc = (const int8_t *)KQ_FIELD(b, block_q6_K, scales);
        for (int e = 0; e < QK_K; e++) {
            /* (d * scale) * q, in GGML's order */
            *y++ = d * (float)sc[e / 16] * (float)q6k_level(ql, qh, e);
        }
    }
}

void dot_q6_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict vx,
                       const void *restrict vy) {
    double sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_q6_K);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_K);
        const uint8_t *ql = KQ_FIELD(bx, block_q6_K, ql);
        const uint8_t *qh = KQ_FIELD(bx, block_q6_K, qh);
        const int8_t *sc = (const int8_t *)KQ_FIELD(bx, block_q6_K, scales);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_K, qs);
        long long isum = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) {
                dot += q6k_level(ql, qh, 16 * g + l) * q8[16 * g + l];
            }
            isum += sc[g] * dot;
        }
        sum += (double)q8k_d(by) * kq_f16(KQ_FIELD(bx, block_q6_K, d)) * (double)isum;
    }
    *s = (float)sum;
}

/* ---- Q8_K: activations, symmetric 8-bit, with sums of 16 ---- */

void quant_q8_K_ref(const float *restrict x, void *restrict dst, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_q8_K);
        int8_t *qs = (int8_t *)KQ_FIELD(b, block_q8_K, qs);
        uint8_t *bsums = KQ_FIELD(b, block_q8_K, bsums);
        float amax;
        const float max = signed_absmax(x, QK_K, &amax);
        if (!amax) {
            memset(b, 0, sizeof(block_q8_K));
            continue;
        }
        /* -127 (not -128) so that every level fits a signed byte */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = nearest_int(iscale * x[j]);
            qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                sum += qs[16 * g + l];
            }
            wr_u16le(bsums + 2 * g, (uint16_t)(int16_t)sum);
        }
        wr_f32le(KQ_FIELD(b, block_q8_K, d), 1 / iscale);
    }
}

void dequant_q8_K_ref(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q8_K);
        const float d = q8k_d(b);
        const int8_t *qs = (const int8_t *)KQ_FIELD(b, block_q8_K, qs);
        for (int j = 0; j < QK_K; j++) {
            *y++ = d * (float)qs[j];
        }
    }
}
