/*
 * The few-row product (quant.h: quant_rows_fmt, quant_rows_fn) of every
 * family this build and CPU carry, for every type that has one:
 *  1. the format: a row's codes and scales are the reference Q8_0
 *     quantization of it (the codes vec_dot's activations get; the VNNI
 *     families store them plus 128, AVX2 and NEON signed), and for each block of 32
 *     in the row's whole 256s
 *     s = d * (sum of the codes), which the K-quants' minimums need;
 *  2. the product against a float64 oracle on the same quantized data (the
 *     weights dequantized by the scalar reference, the activations read back
 *     from the format): only float32 accumulation separates them;
 *  3. a row's result does not depend on how many rows are multiplied with it
 *     (bit for bit), so a sequence decodes the same alone and in a batch;
 *  4. ragged shapes (k with and without a part past the last 256, 1 to 8 rows,
 *     9 and 17 weight rows, k past what 8 rows fit in L1, output strides
 *     wider than the rows; nothing written outside the product) and the
 *     largest codes of each type against +-127;
 *  5. weight blocks of random bytes (every code, scale and minimum a block
 *     can hold, not only what the quantizer writes), with sane fp16 scales;
 *  6. ops_matmul with the dispatched kernels: up to OPS_ROWS_MAX activation
 *     rows take the few-row product, past QUANT_ROWS_MAX in groups, and each
 *     row's result is still bit for bit the row's alone; one row more takes
 *     another format;
 *  7. on AArch64, the walk with SDOT against the one without, bit for bit.
 * A family this CPU lacks, or one without the product, is skipped.
 */
#include "check.h"
#include "ops/ops.h"
#include "quant/half.h"
#include "quant/kernels.h"

#include <stdint.h>

#define QUANT_ACTS_SEED 0x9e3779b97f4a7c15ull
#include "quant_acts.h"

static const uint32_t types[] = {GGUF_TYPE_Q4_0,   GGUF_TYPE_Q4_1,  GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1,
                                 GGUF_TYPE_Q8_0,   GGUF_TYPE_Q4_K,  GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K,
                                 GGUF_TYPE_IQ4_NL, GGUF_TYPE_IQ4_XS};

/* a row in the format as Q8_0 blocks, and its elements as floats */
static void row_values(const quant_rows_fmt *f, const uint8_t *row, int64_t k, double *out) {
    block_q8_0 *b = malloc(sizeof(block_q8_0) * (size_t)(k / 32));
    f->to_q8_0(row, k, b);
    for (int64_t i = 0; i < k; i++) {
        out[i] = (double)f16_to_f32(b[i / 32].d) * b[i / 32].qs[i % 32];
    }
    free(b);
}

static void test_format(const char *fam, const quant_rows_fmt *f) {
    const int64_t ks[] = {64, 192, 256, 320, 832, 2048};
    for (size_t ki = 0; ki < LARES_ARRAY_LEN(ks); ki++) {
        const int64_t k = ks[ki];
        float *x = malloc(sizeof(float) * (size_t)k);
        uint8_t *row = lares_alloc_aligned(quant_rows_bytes(k) + 64, 64);
        block_q8_0 *ref = malloc(sizeof(block_q8_0) * (size_t)(k / 32));
        block_q8_0 *got = malloc(sizeof(block_q8_0) * (size_t)(k / 32));
        const int64_t n_sums = 8 * (k / 256);
        float *sums = malloc(sizeof(float) * (size_t)(n_sums + 1));
        int bad = 0, overrun = 0, bad_sums = 0;
        for (int64_t r = 0; r < 6; r++) {
            for (int64_t i = 0; i < k; i++) {
                x[i] = act_value(r, i);
            }
            memset(row, 0xa5, quant_rows_bytes(k) + 64);
            f->from_float(x, k, row);
            for (int i = 0; i < 64; i++) {
                overrun += row[quant_rows_bytes(k) + (size_t)i] != 0xa5;
            }
            quant_q8_0_ref(x, ref, k);
            f->to_q8_0(row, k, got);
            bad += memcmp(ref, got, sizeof(block_q8_0) * (size_t)(k / 32)) != 0;
            if (f->to_sums != NULL) {
                f->to_sums(row, k, sums);
            }
            for (int64_t b = 0; f->to_sums != NULL && b < n_sums; b++) {
                int sum = 0;
                for (int e = 0; e < 32; e++) {
                    sum += ref[b].qs[e];
                }
                const float want = f16_to_f32(ref[b].d) * (float)sum;
                bad_sums += memcmp(&want, &sums[b], sizeof(float)) != 0;
            }
        }
        CHECKF(bad_sums == 0, "%s: k %lld: %d block sums are not d * (sum of the codes)", fam,
               (long long)k, bad_sums);
        free(sums);
        CHECKF(bad == 0, "%s: k %lld: the rows format holds the reference Q8_0 (%d rows differ)",
               fam, (long long)k, bad);
        CHECKF(overrun == 0, "%s: k %lld: written past quant_rows_bytes", fam, (long long)k);
        free(got);
        free(ref);
        lares_free_aligned(row);
        free(x);
    }
}

/* The blocks random_blocks knows: their bytes and the offsets of their fp16
 * scales (a second of 0: none) */
static const struct {
    uint32_t type;
    size_t bb, f16_at[2];
} random_kinds[] = {
    {GGUF_TYPE_Q4_0, sizeof(block_q4_0), {offsetof(block_q4_0, d), 0}},
    {GGUF_TYPE_Q5_0, sizeof(block_q5_0), {offsetof(block_q5_0, d), 0}},
    {GGUF_TYPE_Q4_1, sizeof(block_q4_1), {offsetof(block_q4_1, d), offsetof(block_q4_1, m)}},
    {GGUF_TYPE_Q5_1, sizeof(block_q5_1), {offsetof(block_q5_1, d), offsetof(block_q5_1, m)}},
    {GGUF_TYPE_Q8_0, sizeof(block_q8_0), {offsetof(block_q8_0, d), 0}},
    {GGUF_TYPE_Q4_K, sizeof(block_q4_K), {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)}},
    {GGUF_TYPE_Q5_K, sizeof(block_q5_K), {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)}},
    {GGUF_TYPE_Q6_K, sizeof(block_q6_K), {offsetof(block_q6_K, d), 0}},
    {GGUF_TYPE_IQ4_NL, sizeof(block_iq4_nl), {offsetof(block_iq4_nl, d), 0}},
    {GGUF_TYPE_IQ4_XS, sizeof(block_iq4_xs), {offsetof(block_iq4_xs, d), 0}},
};

/* Random bytes for n blocks of a type, with small positive fp16 scales;
 * false for a type this does not know. */
static bool random_blocks(uint32_t type, uint8_t *w, int64_t n) {
    size_t k = 0;
    while (k < LARES_ARRAY_LEN(random_kinds) && random_kinds[k].type != type) {
        k++;
    }
    if (k == LARES_ARRAY_LEN(random_kinds)) {
        return false;
    }
    const size_t bb = random_kinds[k].bb;
    const int n_f16 = random_kinds[k].f16_at[1] != 0 ? 2 : 1;
    const size_t *f16_at = random_kinds[k].f16_at;
    for (int64_t b = 0; b < n; b++) {
        uint8_t *p = w + (size_t)b * bb;
        for (size_t i = 0; i < bb; i++) {
            p[i] = (uint8_t)(rng_u64() >> 56);
        }
        for (int f = 0; f < n_f16; f++) {
            const lares_f16 h = f32_to_f16(0.001f + 0.01f * (float)(rng_u64() >> 40) / 16777216.0f);
            memcpy(p + f16_at[f], &h, sizeof(h));
        }
    }
    return true;
}

/* One shape: returns the worst error relative to sum |w a| (< 0: weights of
 * random bytes asked for a type random_blocks does not know) */
static double test_shape(const char *fam, const quant_traits *t, int64_t k, int64_t n_w,
                         int64_t n_c, bool random_bytes) {
    const size_t rb = quant_row_bytes(t->type, k);
    const size_t ab = quant_rows_bytes(k);
    const size_t ldy = (size_t)n_w + 3;
    uint8_t *w = malloc(rb * (size_t)n_w);
    float *wf = malloc(sizeof(float) * (size_t)k);
    float *x = malloc(sizeof(float) * (size_t)k);
    uint8_t *act = lares_alloc_aligned(ab * QUANT_ROWS_MAX, 64);
    float *y = malloc(sizeof(float) * ldy * QUANT_ROWS_MAX);
    float *y1 = malloc(sizeof(float) * (size_t)n_w);
    for (int64_t r = 0; r < n_w && !random_bytes; r++) {
        for (int64_t i = 0; i < k; i++) {
            wf[i] = rng_gauss() * (r % 3 == 1 ? 0.02f : 1.0f);
        }
        t->from_float_ref(wf, w + (size_t)r * rb, k);
    }
    if (random_bytes && !random_blocks(t->type, w, n_w * (k / t->blck_elems))) {
        free(y);
        lares_free_aligned(act);
        free(x);
        free(wf);
        free(w);
        return -1;
    }
    for (int64_t c = 0; c < n_c; c++) {
        for (int64_t i = 0; i < k; i++) {
            x[i] = act_value(c, i);
        }
        t->rows_fmt->from_float(x, k, act + (size_t)c * ab);
    }
    for (size_t i = 0; i < ldy * QUANT_ROWS_MAX; i++) {
        y[i] = -777.0f;
    }
    t->rows(k, w, rb, n_w, act, ab, 0, y, ldy); /* no rows: nothing written */
    t->rows(k, w, rb, n_w, act, ab, n_c, y, ldy);
    double worst = 0;
    int outside = 0, differs_alone = 0;
    for (int64_t c = 0; c < QUANT_ROWS_MAX; c++) {
        for (size_t r = 0; r < ldy; r++) {
            if (c >= n_c || r >= (size_t)n_w) {
                outside += y[(size_t)c * ldy + r] != -777.0f;
            }
        }
    }
    for (int64_t c = 0; c < n_c; c++) {
        /* the row alone: the same bits */
        t->rows(k, w, rb, n_w, act + (size_t)c * ab, ab, 1, y1, 1);
        for (int64_t r = 0; r < n_w; r++) {
            differs_alone += memcmp(&y1[r], &y[(size_t)c * ldy + (size_t)r], sizeof(float)) != 0;
        }
    }
    double *av = malloc(sizeof(double) * (size_t)(k * n_c));
    for (int64_t c = 0; c < n_c; c++) {
        row_values(t->rows_fmt, act + (size_t)c * ab, k, av + c * k);
    }
    for (int64_t r = 0; r < n_w; r++) {
        t->to_float(w + (size_t)r * rb, wf, k);
        for (int64_t c = 0; c < n_c; c++) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < k; i++) {
                exact += (double)wf[i] * av[c * k + i];
                mag += fabs((double)wf[i] * av[c * k + i]);
            }
            const double e = fabs(y[(size_t)c * ldy + (size_t)r] - exact) / (mag + 1e-30);
            worst = e > worst ? e : worst;
        }
    }
    free(av);
    CHECKF(outside == 0, "%s/%s k %lld n_w %lld n_c %lld: %d values written outside", fam, t->name,
           (long long)k, (long long)n_w, (long long)n_c, outside);
    CHECKF(differs_alone == 0,
           "%s/%s k %lld n_c %lld: %d results differ from the row multiplied alone", fam, t->name,
           (long long)k, (long long)n_c, differs_alone);
    free(y1);
    free(y);
    lares_free_aligned(act);
    free(x);
    free(wf);
    free(w);
    return worst;
}

/* the largest codes of the type against activations of +-127 */
static void test_extremes(const char *fam, const quant_traits *t) {
    const int64_t k = 256, n_w = 4;
    const size_t rb = quant_row_bytes(t->type, k), ab = quant_rows_bytes(k);
    uint8_t *w = malloc(rb * (size_t)n_w);
    float *wf = malloc(sizeof(float) * (size_t)k);
    float *x = malloc(sizeof(float) * (size_t)k);
    uint8_t *act = lares_alloc_aligned(ab * 2, 64);
    float y[2 * 4];
    for (int64_t r = 0; r < n_w; r++) {
        for (int64_t i = 0; i < k; i++) {
            wf[i] = (r % 2 == 0) ? -1.0f : (i % 2 ? 1.0f : -1.0f); /* the most negative code */
        }
        t->from_float_ref(wf, w + (size_t)r * rb, k);
    }
    for (int c = 0; c < 2; c++) {
        for (int64_t i = 0; i < k; i++) {
            x[i] = c == 0 ? -1.0f : 1.0f;
        }
        t->rows_fmt->from_float(x, k, act + (size_t)c * ab);
    }
    t->rows(k, w, rb, n_w, act, ab, 2, y, (size_t)n_w);
    double worst = 0;
    double av[2 * 256];
    row_values(t->rows_fmt, act, k, av);
    row_values(t->rows_fmt, act + ab, k, av + k);
    for (int64_t r = 0; r < n_w; r++) {
        t->to_float(w + (size_t)r * rb, wf, k);
        for (int c = 0; c < 2; c++) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < k; i++) {
                const double a = av[c * k + i];
                exact += (double)wf[i] * a;
                mag += fabs((double)wf[i] * a);
            }
            worst = fmax(worst, fabs(y[c * n_w + r] - exact) / (mag + 1e-30));
        }
    }
    CHECKF(worst <= 1e-5, "%s/%s: largest codes: %.2e of sum |w a|", fam, t->name, worst);
    lares_free_aligned(act);
    free(x);
    free(wf);
    free(w);
}

/* A family's walk t against its twin `other` of the same format (AArch64:
 * with SDOT and without): the same bits for every row count, as their
 * integer sums are exact and their float steps the same */
static void test_twin(const char *fam, const quant_traits *t, const quant_traits *other) {
    const int64_t k = 576, n_w = 9;
    const size_t rb = quant_row_bytes(t->type, k), ab = quant_rows_bytes(k);
    uint8_t *w = malloc(rb * (size_t)n_w);
    float *x = malloc(sizeof(float) * (size_t)k);
    uint8_t *act = lares_alloc_aligned(ab * QUANT_ROWS_MAX, 64);
    float y[QUANT_ROWS_MAX * 9], y2[QUANT_ROWS_MAX * 9];
    CHECK(random_blocks(t->type, w, n_w * (k / t->blck_elems)));
    for (int64_t c = 0; c < QUANT_ROWS_MAX; c++) {
        for (int64_t i = 0; i < k; i++) {
            x[i] = act_value(c, i);
        }
        t->rows_fmt->from_float(x, k, act + (size_t)c * ab);
    }
    int differs = 0;
    for (int64_t n_c = 1; n_c <= QUANT_ROWS_MAX; n_c++) {
        t->rows(k, w, rb, n_w, act, ab, n_c, y, (size_t)n_w);
        other->rows(k, w, rb, n_w, act, ab, n_c, y2, (size_t)n_w);
        differs += memcmp(y, y2, sizeof(float) * (size_t)(n_c * n_w)) != 0;
    }
    CHECKF(differs == 0, "%s/%s: %d row counts differ from the other walk of the family", fam,
           t->name, differs);
    lares_free_aligned(act);
    free(x);
    free(w);
}

static int test_family(const char *fam, quant_isa isa) {
    int tested = 0;
    const quant_rows_fmt *fmt = NULL;
    for (size_t ti = 0; ti < LARES_ARRAY_LEN(types); ti++) {
        const quant_traits *t = quant_traits_isa(types[ti], isa);
        if (t == NULL || t->rows == NULL) {
            continue;
        }
        CHECK(t->rows_fmt != NULL);
        if (fmt == NULL) {
            fmt = t->rows_fmt;
            test_format(fam, fmt);
        }
        CHECKF(t->rows_fmt == fmt, "%s: one rows format per family", fam);
        /* 8256 and 8448: 8 rows' activations past any L1 (the AVX-512 walk
         * then goes over k in slices, 8 weight rows at a time), with a tail
         * of two blocks and a lone 256 */
        const int64_t ks[] = {64, 192, 256, 576, 768, 832, 2048, 8256, 8448};
        double worst = 0;
        for (size_t a = 0; a < LARES_ARRAY_LEN(ks); a++) {
            if (ks[a] % t->blck_elems != 0) {
                continue;
            }
            for (int64_t n_c = 1; n_c <= QUANT_ROWS_MAX; n_c++) {
                worst = fmax(worst, test_shape(fam, t, ks[a], ks[a] >= 2048 ? 9 : 17, n_c, false));
            }
        }
        CHECKF(worst <= 1e-5, "%s/%s: %.2e of sum |w a| from the float64 product", fam, t->name,
               worst);
        double worst_random = -1; /* stays < 0 where random_blocks lacks the type */
        for (int64_t n_c = 1; n_c <= QUANT_ROWS_MAX; n_c++) {
            worst_random = fmax(worst_random, test_shape(fam, t, 512, 9, n_c, true));
        }
        CHECKF(worst_random >= 0, "%s/%s: the test makes no random blocks of this type", fam,
               t->name);
        CHECKF(worst_random <= 1e-5, "%s/%s: random blocks: %.2e of sum |w a|", fam, t->name,
               worst_random);
        test_extremes(fam, t);
        /* AArch64's walk with SDOT against the one without */
        const quant_traits *plain =
            isa == QUANT_ISA_NEON_NODOT ? NULL : quant_traits_isa(types[ti], QUANT_ISA_NEON_NODOT);
        if (plain != NULL && plain->rows != NULL && plain->rows != t->rows) {
            CHECKF(plain->rows_fmt == t->rows_fmt, "%s/%s: one rows format on AArch64", fam,
                   t->name);
            test_twin(fam, t, plain);
        }
        printf("  %s/%s: rows %.2e of the exact product (random blocks %.2e)\n", fam, t->name,
               worst, worst_random);
        tested++;
    }
    if (tested == 0) {
        printf("  %s: no few-row product in this family\n", fam);
    }
    return tested;
}

/* ops_matmul over n_c rows of the dispatched kernels against each row alone */
static void test_matmul_groups(ops_pool *pool) {
    const int64_t k = 2048, n_w = 300; /* a few GEMV chunks of weight rows */
    const int64_t counts[] = {1, 8, 9, 12, 16, 17, 33, OPS_ROWS_MAX, OPS_ROWS_MAX + 1};
    const int64_t most = OPS_ROWS_MAX + 1;
    float *x = malloc(sizeof(float) * (size_t)(k * most));
    for (int64_t c = 0; c < most; c++) {
        for (int64_t i = 0; i < k; i++) {
            x[c * k + i] = act_value(c, i);
        }
    }
    float *y = malloc(sizeof(float) * (size_t)(n_w * most));
    float *y1 = malloc(sizeof(float) * (size_t)n_w);
    int tested = 0;
    for (size_t ti = 0; ti < LARES_ARRAY_LEN(types); ti++) {
        const quant_traits *t = quant_traits_of(types[ti]);
        if (t == NULL || t->rows == NULL) {
            continue;
        }
        const size_t rb = quant_row_bytes(t->type, k);
        uint8_t *w = malloc(rb * (size_t)n_w);
        CHECK(random_blocks(t->type, w, n_w * (k / t->blck_elems)));
        ops_matrix m;
        lares_error err = {0};
        CHECK_OK(ops_matrix_init(&m, w, t->type, k, n_w, "w", &err), &err);
        const ops_matrix *ws[1] = {&m};
        for (size_t ci = 0; ci < LARES_ARRAY_LEN(counts); ci++) {
            const int64_t n_c = counts[ci];
            const uint32_t at = ops_act_type(pool, &m, n_c);
            if (n_c > OPS_ROWS_MAX) {
                CHECKF(at != OPS_ACT_ROWS, "%s: %lld rows take the few-row product", t->name,
                       (long long)n_c);
                continue;
            }
            CHECKF(at == OPS_ACT_ROWS, "%s: %lld rows do not take the few-row product", t->name,
                   (long long)n_c);
            void *buf = lares_alloc_aligned(ops_act_bytes(at, n_c, k), 64);
            ops_act a;
            ops_act_prepare(pool, x, n_c, k, at, buf, &a);
            const ops_act *as[1] = {&a};
            float *ys[1] = {y};
            ops_matmul(pool, 1, ws, as, ys);
            int differs = 0;
            for (int64_t c = 0; c < n_c; c++) {
                ops_act a1 = a;
                a1.data = (const uint8_t *)a.data + (size_t)c * a.row_bytes;
                a1.n_rows = 1;
                const ops_act *as1[1] = {&a1};
                float *ys1[1] = {y1};
                ops_matmul(pool, 1, ws, as1, ys1);
                differs += memcmp(y1, y + c * n_w, sizeof(float) * (size_t)n_w) != 0;
            }
            CHECKF(differs == 0, "%s: %lld rows: %d rows differ from the row alone", t->name,
                   (long long)n_c, differs);
            lares_free_aligned(buf);
        }
        free(w);
        tested++;
    }
    printf("  ops_matmul: %d types, up to %d rows in groups of %d, each row as alone\n", tested,
           OPS_ROWS_MAX, QUANT_ROWS_MAX);
    free(y1);
    free(y);
    free(x);
}

int main(void) {
    int tested = 0;
    for (size_t i = 0; i < LARES_ARRAY_LEN(families); i++) {
        if (quant_traits_isa(GGUF_TYPE_Q4_0, families[i].isa) == NULL) {
            printf("  %s: skipped, this CPU or build lacks it\n", families[i].name);
            continue;
        }
        tested += test_family(families[i].name, families[i].isa);
    }
    if (tested > 0) {
        ops_pool *pool = NULL;
        lares_error err = {0};
        CHECK_OK(ops_pool_create(2, &pool, &err), &err);
        test_matmul_groups(pool);
        ops_pool_free(pool);
    }
    if (tested == 0) {
        printf("rows: no family with a few-row product on this machine (x86: AVX2; AArch64: "
               "dotprod), nothing to test\n");
        return 77;
    }
    return check_finish("rows");
}
