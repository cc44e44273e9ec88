/*
 * The packed-activation GEMM of every family this build and CPU carry
 * (quant.h: quant_panel_fmt, quant_gemm_fn), for every type that has one:
 *  1. panels: quantizing activations into panels and reading them back gives
 *     each row's Q8_0 quantization (the same codes and fp16 scale as the
 *     reference quantizer, sums exact), and the lanes past the last row are
 *     zero;
 *  2. the product against a float64 oracle on the same quantized data: the
 *     weights dequantized by the scalar reference, the activations read back
 *     from the panels. Only float32 accumulation separates the two, so the
 *     bound is tight (1e-5 of sum |w a|);
 *  3. the product against the plain float product (the activations before
 *     quantization): the error the int8 activations bring, no larger (RMS)
 *     than the reference dot product's with the type's own activation format;
 *  4. ragged shapes: weight rows not a multiple of 16, activation rows not a
 *     multiple of the lanes (1, 7, lanes + 1, 130), k not a multiple of the
 *     128-element block, output strides wider than the rows; nothing written
 *     outside the product.
 * A family this CPU lacks is skipped with a printed reason.
 */
#include "check.h"
#include "quant/kernels.h"

/* Debian's aarch64 GCC 12 stops with an internal error vectorising the
 * float64 oracle's reductions below; the oracle needs no vectors. */
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-vectorize")
#endif

#include <stdint.h>

#define QUANT_ACTS_SEED 0x2545f4914f6cdd1dull
#include "quant_acts.h"

/* the value of activation row c, element i, as the panels hold it */
static double panel_value(const quant_panel_fmt *f, const uint8_t *panels, int64_t k, int64_t c,
                          int64_t i) {
    const int L = f->lanes;
    const uint8_t *p = panels + (size_t)(c / L) * quant_panel_bytes(f, k);
    const int lane = (int)(c % L);
    const uint8_t *g = p + (size_t)(i / 32) * 48 * (size_t)L;
    const int e = (int)(i % 32);
    const int R = f->run;
    const int8_t q = (int8_t)g[(size_t)((e / R) * L + lane) * (size_t)R + (size_t)(e % R)];
    float d;
    memcpy(&d, g + 32 * L + 4 * lane, 4);
    return (double)d * q;
}

static const uint32_t types[] = {GGUF_TYPE_Q4_0,   GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0,
                                 GGUF_TYPE_Q5_1,   GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_K,
                                 GGUF_TYPE_Q5_K,   GGUF_TYPE_Q6_K, GGUF_TYPE_IQ4_NL,
                                 GGUF_TYPE_IQ4_XS, GGUF_TYPE_Q2_K, GGUF_TYPE_Q3_K};

/* the panels of one family: round trip of the quantization, zero lanes */
static void test_panels(const char *fam, const quant_panel_fmt *f) {
    const int64_t k = 160, n_rows = f->lanes + 3;
    float *x = malloc(sizeof(float) * (size_t)(k * n_rows));
    const size_t pb = quant_panel_bytes(f, k);
    uint8_t *panels = lares_alloc_aligned(2 * pb, 64);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < k; i++) {
            x[r * k + i] = act_value(r, i);
        }
    }
    f->from_float(x, (size_t)k, f->lanes, k, panels);
    f->from_float(x + f->lanes * k, (size_t)k, 3, k, panels + pb);
    int bad = 0, bad_sum = 0, nonzero_pad = 0;
    for (int64_t c = 0; c < 2 * f->lanes; c++) {
        for (int64_t g = 0; g < k / 32; g++) {
            double amax = 0, s0 = 0, s1 = 0;
            for (int e = 0; e < 32 && c < n_rows; e++) {
                amax = fmax(amax, fabs(x[c * k + g * 32 + e]));
            }
            for (int e = 0; e < 32; e++) {
                const double v = panel_value(f, panels, k, c, g * 32 + e);
                if (c >= n_rows) {
                    nonzero_pad += v != 0.0;
                    continue;
                }
                const float xv = x[c * k + g * 32 + e];
                if (e < 16) {
                    s0 += v;
                } else {
                    s1 += v;
                }
                /* half a step, plus what the fp16 rounding of d moves the largest code */
                bad += fabs(xv - v) > amax / 127.0 * (0.5 + 127.0 / 2048.0) + 1e-6 &&
                       fabs(xv - v) > 1e-30;
            }
            if (c >= n_rows) {
                continue;
            }
            /* d * sum: the stored s, s0, s1 */
            const uint8_t *p = panels + (size_t)(c / f->lanes) * pb;
            const uint8_t *gp = p + (size_t)g * 48 * (size_t)f->lanes;
            const int lane = (int)(c % f->lanes);
            float fs, fs0, fs1;
            memcpy(&fs, gp + 32 * f->lanes + 4 * (f->lanes + lane), 4);
            memcpy(&fs0, gp + 32 * f->lanes + 4 * (2 * f->lanes + lane), 4);
            memcpy(&fs1, gp + 32 * f->lanes + 4 * (3 * f->lanes + lane), 4);
            const double tol = 1e-6 * (fabs(s0) + fabs(s1) + 1e-3);
            bad_sum += fabs(fs - (s0 + s1)) > tol || fabs(fs0 - s0) > tol || fabs(fs1 - s1) > tol;
        }
    }
    CHECKF(bad == 0, "%s: %d quants off by more than half a step", fam, bad);
    /* the very codes and fp16 scales of the Q8_0 reference quantizer */
    const quant_traits *q8 = quant_traits_ref(GGUF_TYPE_Q8_0);
    block_q8_0 *ref = malloc(sizeof(block_q8_0) * (size_t)(k / 32));
    int differ = 0;
    for (int64_t c = 0; c < n_rows; c++) {
        q8->from_float_ref(x + c * k, ref, k);
        for (int64_t i = 0; i < k; i++) {
            const double want = (double)f16_to_f32(ref[i / 32].d) * ref[i / 32].qs[i % 32];
            differ += panel_value(f, panels, k, c, i) != want;
        }
    }
    free(ref);
    CHECKF(differ == 0, "%s: %d values differ from the Q8_0 reference quantizer's", fam, differ);
    CHECKF(bad_sum == 0, "%s: %d group sums wrong", fam, bad_sum);
    CHECKF(nonzero_pad == 0, "%s: %d padding values not zero", fam, nonzero_pad);
    printf("  %s: panels of %d lanes round-trip\n", fam, f->lanes);
    lares_free_aligned(panels);
    free(x);
}

/* one product shape: n_w weight rows x n_c activation rows of k */
/* squared errors against the unquantized product: this GEMM's, the reference dot's */
typedef struct err_sums {
    double gemm, ref;
} err_sums;

static void test_shape(const char *fam, const quant_traits *t, int64_t k, int64_t n_w, int64_t n_c,
                       double *worst_q, err_sums *ef) {
    const quant_traits *ref = quant_traits_ref(t->type);
    const size_t rb = quant_row_bytes(t->type, k);
    const size_t ldy = (size_t)n_w + 3; /* wider than the product: the gap must stay */
    float *wf = malloc(sizeof(float) * (size_t)(k * n_w));
    float *wd = malloc(sizeof(float) * (size_t)k);
    float *x = malloc(sizeof(float) * (size_t)(k * n_c));
    uint8_t *w = malloc(rb * (size_t)n_w + 1);
    const quant_traits *at = quant_traits_ref(ref->vec_dot_type);
    const size_t arb = quant_row_bytes(ref->vec_dot_type, k);
    uint8_t *aq = malloc(arb * (size_t)n_c + 1);
    const int L = t->panel->lanes;
    const int64_t n_p = (n_c + L - 1) / L;
    const size_t pb = quant_panel_bytes(t->panel, k);
    uint8_t *panels = lares_alloc_aligned(pb * (size_t)n_p, 64);
    float *y = malloc(sizeof(float) * ldy * (size_t)n_c);
    for (int64_t i = 0; i < k * n_w; i++) {
        wf[i] = rng_gauss() * 0.05f;
    }
    for (int64_t r = 0; r < n_w; r++) {
        ref->from_float_ref(wf + r * k, w + (size_t)r * rb, k);
    }
    for (int64_t c = 0; c < n_c; c++) {
        for (int64_t i = 0; i < k; i++) {
            x[c * k + i] = act_value(c, i);
        }
    }
    for (int64_t p = 0; p < n_p; p++) {
        const int n = (int)(n_c - p * L < L ? n_c - p * L : L);
        t->panel->from_float(x + p * L * k, (size_t)k, n, k, panels + (size_t)p * pb);
    }
    for (int64_t c = 0; c < n_c; c++) {
        at->from_float_ref(x + c * k, aq + (size_t)c * arb, k);
    }
    const float sentinel = -12345.0f;
    for (size_t i = 0; i < ldy * (size_t)n_c; i++) {
        y[i] = sentinel;
    }
    t->gemm(k, w, rb, n_w, panels, n_c, y, ldy);
    int outside = 0;
    for (int64_t r = 0; r < n_w; r++) {
        ref->to_float(w + (size_t)r * rb, wd, k);
        for (int64_t c = 0; c < n_c; c++) {
            double exact = 0, mag = 0, plain = 0;
            for (int64_t i = 0; i < k; i++) {
                const double a = panel_value(t->panel, panels, k, c, i);
                exact += (double)wd[i] * a;
                mag += fabs((double)wd[i] * a);
                plain += (double)wd[i] * x[c * k + i];
            }
            const double got = y[(size_t)c * ldy + (size_t)r];
            const double eq = fabs(got - exact) / (mag + 1e-30);
            *worst_q = eq > *worst_q ? eq : *worst_q;
            float rd;
            ref->vec_dot(k, &rd, w + (size_t)r * rb, aq + (size_t)c * arb);
            ef->gemm += (got - plain) * (got - plain);
            ef->ref += ((double)rd - plain) * ((double)rd - plain);
        }
    }
    for (int64_t c = 0; c < n_c; c++) {
        for (size_t r = (size_t)n_w; r < ldy; r++) {
            outside += y[(size_t)c * ldy + r] != sentinel;
        }
    }
    CHECKF(outside == 0, "%s/%s k=%lld %lldx%lld: %d values written outside the product", fam,
           t->name, (long long)k, (long long)n_w, (long long)n_c, outside);
    free(y);
    lares_free_aligned(panels);
    free(aq);
    free(w);
    free(x);
    free(wd);
    free(wf);
}

/* The largest sums a group can make: every code byte 0xff (the largest code
 * of each format), scales 1.0, and activation rows of equal values (codes all
 * +127, or all -127): an integer accumulation that could overflow or saturate
 * (the AVX2 family sums VPMADDUBSW pairs in int16) shows up here. */
static void test_extremes(const char *fam, const quant_traits *t) {
    const int64_t k = 512, n_w = 3, n_c = 2 * t->panel->lanes;
    const size_t rb = quant_row_bytes(t->type, k);
    uint8_t *w = malloc(rb * (size_t)n_w);
    float *wd = malloc(sizeof(float) * (size_t)k), *x = malloc(sizeof(float) * (size_t)(k * n_c));
    const size_t pb = quant_panel_bytes(t->panel, k);
    uint8_t *panels = lares_alloc_aligned(pb * 2, 64);
    float *y = malloc(sizeof(float) * (size_t)(n_w * n_c));
    memset(w, 0xff, rb * (size_t)n_w);
    /* the fp16 fields of each block: 1.0 (0x3c00) */
    size_t f16_at[2] = {0, 0};
    int n_f16 = 1;
    switch (t->type) {
    case GGUF_TYPE_Q4_1:
    case GGUF_TYPE_Q5_1:
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q5_K:
        f16_at[1] = 2;
        n_f16 = 2;
        break;
    case GGUF_TYPE_Q2_K:
        f16_at[0] = offsetof(block_q2_K, d);
        f16_at[1] = offsetof(block_q2_K, dmin);
        n_f16 = 2;
        break;
    case GGUF_TYPE_Q3_K:
        f16_at[0] = offsetof(block_q3_K, d);
        break;
    case GGUF_TYPE_Q6_K:
        f16_at[0] = offsetof(block_q6_K, d);
        break;
    case GGUF_TYPE_IQ4_XS:
        f16_at[0] = offsetof(block_iq4_xs, d);
        break;
    default:
        break;
    }
    for (size_t b = 0; b < rb * (size_t)n_w / t->blck_bytes; b++) {
        for (int i = 0; i < n_f16; i++) {
            uint8_t *p = w + b * t->blck_bytes + f16_at[i];
            p[0] = 0x00;
            p[1] = 0x3c;
        }
    }
    for (int64_t c = 0; c < n_c; c++) {
        for (int64_t i = 0; i < k; i++) {
            x[c * k + i] = c < t->panel->lanes ? 1.0f : -1.0f;
        }
    }
    for (int p = 0; p < 2; p++) {
        t->panel->from_float(x + (int64_t)p * t->panel->lanes * k, (size_t)k, t->panel->lanes, k,
                             panels + (size_t)p * pb);
    }
    t->gemm(k, w, rb, n_w, panels, n_c, y, (size_t)n_w);
    double worst = 0;
    for (int64_t r = 0; r < n_w; r++) {
        t->to_float(w + (size_t)r * rb, wd, k);
        for (int64_t c = 0; c < n_c; c++) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < k; i++) {
                const double a = panel_value(t->panel, panels, k, c, i);
                exact += (double)wd[i] * a;
                mag += fabs((double)wd[i] * a);
            }
            const double e = fabs(y[(size_t)c * (size_t)n_w + (size_t)r] - exact) / (mag + 1e-30);
            worst = e > worst ? e : worst;
        }
    }
    CHECKF(worst <= 1e-5, "%s/%s: largest codes: %.2e of sum |w a| from the float64 product", fam,
           t->name, worst);
    free(y);
    lares_free_aligned(panels);
    free(x);
    free(wd);
    free(w);
}

/* returns how many types of the family have a GEMM */
static int test_family(const char *fam, quant_isa isa) {
    int tested = 0;
    const quant_panel_fmt *fmt = NULL;
    for (size_t ti = 0; ti < LARES_ARRAY_LEN(types); ti++) {
        const quant_traits *t = quant_traits_isa(types[ti], isa);
        if (t == NULL || t->gemm == NULL) {
            continue;
        }
        CHECK(t->panel != NULL &&
              (t->panel->lanes == 4 || t->panel->lanes == 8 || t->panel->lanes == 16));
        if (fmt == NULL) {
            fmt = t->panel;
            test_panels(fam, fmt);
        }
        CHECKF(t->panel == fmt, "%s: one panel format per family", fam);
        const int64_t blk = t->blck_elems;
        /* k: one block, a ragged K block, a model-like width */
        const int64_t ks[] = {blk == 256 ? 256 : 32, blk == 256 ? 768 : 160, 2048};
        const int64_t nws[] = {1, 17, 40};
        const int64_t ncs[] = {1, 7, t->panel->lanes + 1, 130};
        double worst_q = 0;
        err_sums ef = {0, 0};
        for (size_t a = 0; a < LARES_ARRAY_LEN(ks); a++) {
            for (size_t b = 0; b < LARES_ARRAY_LEN(nws); b++) {
                for (size_t c = 0; c < LARES_ARRAY_LEN(ncs); c++) {
                    if (ks[a] == 2048 && (nws[b] != 17 || ncs[c] != 130)) {
                        continue; /* the wide case once, at full size */
                    }
                    test_shape(fam, t, ks[a], nws[b], ncs[c], &worst_q, &ef);
                }
            }
        }
        CHECKF(worst_q <= 1e-5, "%s/%s: %.2e of sum |w a| from the float64 product", fam, t->name,
               worst_q);
        test_extremes(fam, t);
        const double ratio = sqrt(ef.gemm / (ef.ref + 1e-300));
        CHECKF(ratio <= 1.1, "%s/%s: RMS error %.3g x the reference dot's", fam, t->name, ratio);
        printf("  %s/%s: gemm %.2e of the exact product; RMS error vs unquantized %.2f x the "
               "reference dot's\n",
               fam, t->name, worst_q, ratio);
        tested++;
    }
    if (tested == 0) {
        printf("  %s: no packed GEMM in this family on this CPU (ARM without dotprod)\n", fam);
        return 0;
    }
    printf("  %s: %d types with a packed GEMM\n", fam, tested);
    /* AVX2 without VNNI leaves Q8_0 to its row tiles (gemm_avx2.c) */
    const int want = isa == QUANT_ISA_AVX2 ? 11 : 12;
    CHECKF(tested >= want, "%s: only %d types have a GEMM", fam, tested);
    return tested;
}

int main(void) {
    int families_run = 0;
    for (size_t i = 0; i < LARES_ARRAY_LEN(families); i++) {
        if (quant_traits_isa(GGUF_TYPE_Q4_0, families[i].isa) == NULL) {
            printf("  %s: skipped, this CPU or build lacks it\n", families[i].name);
            continue;
        }
        families_run += test_family(families[i].name, families[i].isa) > 0;
    }
    /* the dispatched choice names its panels when it has a GEMM */
    const quant_traits *q4 = quant_traits_of(GGUF_TYPE_Q4_0);
    CHECK((q4->gemm != NULL) == (quant_panels() != NULL));
    if (families_run == 0) {
        printf("gemm: no family with a packed GEMM on this machine (AVX-VNNI, AVX-512 VNNI or "
               "NEON dotprod), nothing to test\n");
        return 77;
    }
    return check_finish("gemm");
}
