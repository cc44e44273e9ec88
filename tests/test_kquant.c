/*
 * K-quants (Q2_K..Q6_K, Q8_K) and i-quants (IQ4_NL, IQ4_XS):
 *  1. the scalar reference against the reference engine's own output
 *     (derived/ggml-quant-test-vectors.gguf): dequantization bit for bit,
 *     quantization byte for byte;
 *  2. every SIMD kernel this build and CPU carry (dot, tile, dequantize, the
 *     Q8_K quantizer) against the scalar reference on seeded random blocks,
 *     edge values and several row lengths;
 *  3. quantize -> dequantize error per type against published bounds.
 */
#include "check.h"
#include "quant/kernels.h"
#include "quant/kquant_impl.h"

#include <float.h>
#include <stdint.h>

/* ---- seeded randomness (xorshift64*), checked for spread where used ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static float rng_uniform(void) { /* [0, 1) */
    return (float)(rng_u64() >> 40) / (float)(1u << 24);
}

static float rng_gauss(void) {
    float u = rng_uniform(), v = rng_uniform();
    if (u < 1e-7f) {
        u = 1e-7f;
    }
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

/* mean and standard deviation, to check that "random" data is spread */
static void spread(const float *x, size_t n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    *mean = s / (double)n;
    *sd = sqrt(s2 / (double)n - *mean * *mean);
}

/* ---- the types under test ---- */

typedef struct ktype {
    uint32_t type;
    const char *file_name; /* in the test-vector file */
    double dot_tol;        /* |simd - ref| <= dot_tol * ||w|| * ||y|| (float accumulation) */
    double ggml_err_bound; /* test-quantize-fns bound on sqrt(sum d^2) / n (2, 3 or 4+ bits) */
} ktype;

static const ktype ktypes[] = {
    {GGUF_TYPE_Q2_K, "q2_K", 2e-6, 0.0075},     {GGUF_TYPE_Q3_K, "q3_K", 2e-6, 0.0040},
    {GGUF_TYPE_Q4_K, "q4_K", 2e-6, 0.0020},     {GGUF_TYPE_Q5_K, "q5_K", 2e-6, 0.0020},
    {GGUF_TYPE_Q6_K, "q6_K", 2e-6, 0.0020},     {GGUF_TYPE_IQ4_NL, "iq4_nl", 2e-6, 0.0020},
    {GGUF_TYPE_IQ4_XS, "iq4_xs", 2e-6, 0.0020},
};

/* ---- kernel families: the reference table and every SIMD table we can run ---- */

typedef struct family {
    const char *name;
    const quant_traits *t; /* indexed by type */
} family;

static quant_traits own_tables[3][GGUF_TYPE_COUNT];
static family families[8];
static int n_families;

static void add_family(const char *name, const quant_traits *t) {
    families[n_families].name = name;
    families[n_families].t = t;
    n_families++;
}

/* the installers of this work, run directly (independent of how dispatch.c
 * chains installers), plus whatever the dispatched tables hold */
static void collect_families(void) {
    const quant_cpu *cpu = quant_cpu_features();
    (void)cpu;
#if defined(LARES_HAVE_X86)
    if (cpu->avx2 && cpu->fma && cpu->f16c) {
        memcpy(own_tables[0], quant_ref_table, sizeof own_tables[0]);
        quant_install_avx2_kquants(own_tables[0]);
        add_family("avx2 (kquant installer)", own_tables[0]);
    } else {
        printf("kquant: no AVX2/FMA/F16C on this CPU: AVX2 kernels not tested\n");
    }
#endif
#if defined(LARES_HAVE_ARM64)
    memcpy(own_tables[1], quant_ref_table, sizeof own_tables[1]);
    quant_install_neon_kquants(own_tables[1], false);
    add_family("neon (kquant installer)", own_tables[1]);
    if (cpu->dotprod) {
        memcpy(own_tables[2], quant_ref_table, sizeof own_tables[2]);
        quant_install_neon_kquants(own_tables[2], true);
        add_family("neon+dotprod (kquant installer)", own_tables[2]);
    } else {
        printf("kquant: no dot-product extension on this CPU: neon+dotprod not tested\n");
    }
#endif
    /* the dispatched families: the whole table as other modules see it */
    for (int isa = QUANT_ISA_SCALAR; isa < QUANT_ISA_COUNT; isa++) {
        const quant_traits *t = quant_traits_isa(GGUF_TYPE_F32, (quant_isa)isa);
        if (t != NULL) {
            add_family(quant_isa_family_name((quant_isa)isa), t - GGUF_TYPE_F32);
        }
    }
}

/* ---- 1. the reference against the reference engine ---- */

static void check_test_vectors(void) {
    lares_error err = {0};
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(fixture("derived/ggml-quant-test-vectors.gguf"), NULL, &f, &err), &err);
    if (f == NULL) {
        return;
    }
    const gguf_tensor *tx = gguf_find_tensor(f, "x");
    CHECK(tx != NULL && tx->type == GGUF_TYPE_F32);
    if (tx == NULL) {
        gguf_close(f);
        return;
    }
    const int64_t n = gguf_tensor_nelements(tx);
    float *x = malloc((size_t)n * sizeof(float));
    float *out = malloc((size_t)n * sizeof(float));
    uint8_t *q = malloc((size_t)n * 2);
    memcpy(x, tx->data, (size_t)n * sizeof(float));
    for (size_t k = 0; k < LARES_ARRAY_LEN(ktypes); k++) {
        const quant_traits *ref = quant_traits_ref(ktypes[k].type);
        char name[64];
        snprintf(name, sizeof name, "q.%s", ktypes[k].file_name);
        const gguf_tensor *tq = gguf_find_tensor(f, name);
        snprintf(name, sizeof name, "deq.%s", ktypes[k].file_name);
        const gguf_tensor *td = gguf_find_tensor(f, name);
        CHECKF(ref != NULL && tq != NULL && td != NULL, "%s: missing trait or tensor",
               ktypes[k].file_name);
        if (ref == NULL || tq == NULL || td == NULL) {
            continue;
        }
        CHECK(tq->type == ktypes[k].type && tq->nbytes == quant_row_bytes(ktypes[k].type, n));
        /* dequantization: bit for bit, in every family */
        for (int fam = -1; fam < n_families; fam++) {
            const quant_traits *t = fam < 0 ? ref : &families[fam].t[ktypes[k].type];
            memset(out, 0xff, (size_t)n * sizeof(float));
            t->to_float(tq->data, out, n);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                bad += memcmp(&out[i], (const float *)td->data + i, sizeof(float)) != 0;
            }
            CHECKF(bad == 0, "%s dequantize (%s): %d of %" PRId64 " values differ from deq.%s",
                   ktypes[k].file_name, fam < 0 ? "reference" : families[fam].name, bad, n,
                   ktypes[k].file_name);
        }
        /* quantization: byte for byte */
        memset(q, 0xa5, (size_t)n * 2);
        ref->from_float_ref(x, q, n);
        size_t bad_blocks = 0, nblocks = tq->nbytes / ref->blck_bytes;
        for (size_t b = 0; b < nblocks; b++) {
            bad_blocks +=
                memcmp(q + b * ref->blck_bytes, (const uint8_t *)tq->data + b * ref->blck_bytes,
                       ref->blck_bytes) != 0;
        }
        CHECKF(bad_blocks == 0, "%s quantize: %zu of %zu blocks differ from q.%s",
               ktypes[k].file_name, bad_blocks, nblocks, ktypes[k].file_name);
    }
    free(x);
    free(out);
    free(q);
    gguf_close(f);
}

/* ---- 2. SIMD against the reference ---- */

/* A weight row of random blocks: every byte random (all level, scale and
 * high-bit patterns), then the fp16 super-scales set to finite values.
 * mode 1: scales large (|d| up to 2^10), mode 2: scales zero. */
static void random_weight_row(uint32_t type, uint8_t *w, int64_t n, int mode) {
    const quant_traits *t = quant_traits_ref(type);
    const size_t bytes = quant_row_bytes(type, n);
    for (size_t i = 0; i < bytes; i++) {
        w[i] = (uint8_t)rng_u64();
    }
    for (int64_t b = 0; b < n / t->blck_elems; b++) {
        uint8_t *blk = w + (size_t)b * t->blck_bytes;
        float d = (rng_uniform() - 0.5f) * (mode == 1 ? 2048.f : 0.02f);
        float dmin = rng_uniform() * (mode == 1 ? 1024.f : 0.01f);
        if (mode == 2) {
            d = dmin = 0;
        }
        size_t off_d = 0, off_dmin = SIZE_MAX;
        switch (type) {
        case GGUF_TYPE_Q2_K:
            off_d = offsetof(block_q2_K, d);
            off_dmin = offsetof(block_q2_K, dmin);
            break;
        case GGUF_TYPE_Q3_K:
            off_d = offsetof(block_q3_K, d);
            break;
        case GGUF_TYPE_Q4_K:
            off_d = offsetof(block_q4_K, d);
            off_dmin = offsetof(block_q4_K, dmin);
            break;
        case GGUF_TYPE_Q5_K:
            off_d = offsetof(block_q5_K, d);
            off_dmin = offsetof(block_q5_K, dmin);
            break;
        case GGUF_TYPE_Q6_K:
            off_d = offsetof(block_q6_K, d);
            break;
        case GGUF_TYPE_IQ4_NL:
            off_d = offsetof(block_iq4_nl, d);
            break;
        case GGUF_TYPE_IQ4_XS:
            off_d = offsetof(block_iq4_xs, d);
            break;
        }
        wr_u16le(blk + off_d, f32_to_f16(d));
        if (off_dmin != SIZE_MAX) {
            wr_u16le(blk + off_dmin, f32_to_f16(dmin));
        }
    }
}

/* activations of one of several shapes, quantized by the reference */
enum { ACT_GAUSS, ACT_LARGE, ACT_ZERO, ACT_EQUAL, ACT_MIXED, ACT_COUNT };
static const char *act_names[ACT_COUNT] = {"gauss", "large", "zero", "equal", "mixed"};

static void activation_floats(float *y, int64_t n, int shape) {
    for (int64_t i = 0; i < n; i++) {
        switch (shape) {
        case ACT_GAUSS:
            y[i] = rng_gauss();
            break;
        case ACT_LARGE:
            y[i] = rng_gauss() * 3e4f;
            break;
        case ACT_ZERO:
            y[i] = 0;
            break;
        case ACT_EQUAL:
            y[i] = -1.75f;
            break;
        default: /* zero, equal and random blocks in one row */
            y[i] = (i / 256) % 3 == 0 ? 0.0f : (i / 256) % 3 == 1 ? 0.5f : rng_gauss();
            break;
        }
    }
}

/* ||w|| * ||y|| from dequantized rows: bounds every partial sum of the dot */
static double norm_product(const float *w, const float *y, int64_t n) {
    double a = 0, b = 0;
    for (int64_t i = 0; i < n; i++) {
        a += (double)w[i] * w[i];
        b += (double)y[i] * y[i];
    }
    return sqrt(a) * sqrt(b);
}

#define MAX_N (QK_K * 17)

static void check_kernels(void) {
    static const int64_t lengths[] = {QK_K, 2 * QK_K, 3 * QK_K, 8 * QK_K, 17 * QK_K};
    static const int64_t lengths_nl[] = {32, 64, 96, 256, 1024, 32 * 71};
    /* weight rows at odd addresses: blocks in a GGUF mapping are byte-aligned only */
    uint8_t *wbuf = malloc(QUANT_TILE_MAX * (MAX_N + 64) + 1);
    uint8_t *ybuf = malloc(QUANT_TILE_MAX * (MAX_N / QK_K * sizeof(block_q8_K) + 64));
    float *yf = malloc(MAX_N * sizeof(float));
    float *wf = malloc(MAX_N * sizeof(float));
    float *yd = malloc(MAX_N * sizeof(float));
    double worst[LARES_ARRAY_LEN(ktypes)] = {0};

    for (size_t k = 0; k < LARES_ARRAY_LEN(ktypes); k++) {
        const uint32_t type = ktypes[k].type;
        const quant_traits *ref = quant_traits_ref(type);
        const quant_traits *yref = quant_traits_ref(ref->vec_dot_type);
        const bool nl = type == GGUF_TYPE_IQ4_NL;
        const int64_t *lens = nl ? lengths_nl : lengths;
        const size_t nlens = nl ? LARES_ARRAY_LEN(lengths_nl) : LARES_ARRAY_LEN(lengths);
        for (size_t li = 0; li < nlens; li++) {
            const int64_t n = lens[li];
            const size_t wrow = quant_row_bytes(type, n) + 7; /* odd strides */
            /* activations live in lares's own buffers: aligned rows */
            const size_t yrow = quant_row_bytes(ref->vec_dot_type, n) + 4;
            for (int shape = 0; shape < ACT_COUNT; shape++) {
                const int wmode = shape == ACT_LARGE ? 1 : shape == ACT_ZERO ? 2 : 0;
                uint8_t *w = wbuf + 1, *y = ybuf;
                for (int r = 0; r < QUANT_TILE_MAX; r++) {
                    random_weight_row(type, w + r * wrow, n,
                                      r == 3 && shape == ACT_MIXED ? 2 : wmode);
                }
                for (int c = 0; c < QUANT_TILE_MAX; c++) {
                    activation_floats(yf, n, c == 1 && shape == ACT_GAUSS ? ACT_MIXED : shape);
                    if (shape == ACT_GAUSS && c == 0) {
                        double mean, sd;
                        spread(yf, (size_t)n, &mean, &sd);
                        CHECKF(fabs(mean) < 0.25 && sd > 0.8 && sd < 1.2,
                               "gaussian activations not spread: mean %g sd %g", mean, sd);
                    }
                    yref->from_float_ref(yf, y + c * yrow, n);
                }
                /* the reference answers */
                float sref[QUANT_TILE_MAX][QUANT_TILE_MAX];
                double bound[QUANT_TILE_MAX][QUANT_TILE_MAX];
                int distinct = 0;
                for (int r = 0; r < QUANT_TILE_MAX; r++) {
                    ref->to_float(w + r * wrow, wf, n);
                    for (int c = 0; c < QUANT_TILE_MAX; c++) {
                        yref->to_float(y + c * yrow, yd, n);
                        ref->vec_dot(n, &sref[r][c], w + r * wrow, y + c * yrow);
                        bound[r][c] = ktypes[k].dot_tol * norm_product(wf, yd, n) + 1e-30;
                        distinct += r + c > 0 && sref[r][c] != sref[0][0];
                    }
                }
                if (shape == ACT_GAUSS) {
                    CHECKF(distinct >= 14, "%s n=%" PRId64 ": reference dots not spread (%d)",
                           ktypes[k].file_name, n, distinct);
                }
                for (int fam = 0; fam < n_families; fam++) {
                    const quant_traits *t = &families[fam].t[type];
                    if (t->vec_dot == ref->vec_dot && t->vec_dot_tile == NULL) {
                        continue; /* nothing of its own for this type */
                    }
                    float sv[QUANT_TILE_MAX][QUANT_TILE_MAX];
                    for (int r = 0; r < QUANT_TILE_MAX; r++) {
                        for (int c = 0; c < QUANT_TILE_MAX; c++) {
                            t->vec_dot(n, &sv[r][c], w + r * wrow, y + c * yrow);
                            const double e = fabs((double)sv[r][c] - sref[r][c]);
                            if (e / bound[r][c] * ktypes[k].dot_tol > worst[k]) {
                                worst[k] = e / bound[r][c] * ktypes[k].dot_tol;
                            }
                            CHECKF(e <= bound[r][c],
                                   "%s dot (%s) n=%" PRId64
                                   " %s [%d][%d]: %.9g vs reference %.9g (bound %g)",
                                   ktypes[k].file_name, families[fam].name, n, act_names[shape], r,
                                   c, sv[r][c], sref[r][c], bound[r][c]);
                        }
                    }
                    if (t->vec_dot_tile == NULL) {
                        continue;
                    }
                    /* every tile shape: the same numbers as vec_dot, bit for bit */
                    for (int nr = 1; nr <= QUANT_TILE_MAX; nr++) {
                        for (int nc = 1; nc <= QUANT_TILE_MAX; nc++) {
                            const size_t ldc = QUANT_TILE_MAX + 1;
                            float st[QUANT_TILE_MAX * (QUANT_TILE_MAX + 1)];
                            memset(st, 0xff, sizeof st);
                            t->vec_dot_tile(n, st, ldc, w, wrow, y, yrow, nr, nc);
                            int bad = 0;
                            for (int r = 0; r < nr; r++) {
                                for (int c = 0; c < nc; c++) {
                                    bad += memcmp(&st[c * ldc + r], &sv[r][c], sizeof(float)) != 0;
                                }
                            }
                            CHECKF(bad == 0,
                                   "%s tile %dx%d (%s) n=%" PRId64 " %s: %d of %d differ "
                                   "from vec_dot",
                                   ktypes[k].file_name, nr, nc, families[fam].name, n,
                                   act_names[shape], bad, nr * nc);
                        }
                    }
                }
            }
        }
        /* dequantization of random blocks (every bit pattern): bit for bit */
        const int64_t n = nl ? 32 * 9 : QK_K * 5;
        uint8_t *w = wbuf + 1;
        for (int mode = 0; mode < 3; mode++) {
            random_weight_row(type, w, n, mode);
            ref->to_float(w, wf, n);
            for (int fam = 0; fam < n_families; fam++) {
                const quant_traits *t = &families[fam].t[type];
                memset(yd, 0xff, (size_t)n * sizeof(float));
                t->to_float(w, yd, n);
                CHECKF(memcmp(wf, yd, (size_t)n * sizeof(float)) == 0,
                       "%s dequantize (%s) of random blocks differs from the reference",
                       ktypes[k].file_name, families[fam].name);
            }
        }
    }
    printf("kquant: worst |simd - ref| / (||w|| ||y||) per type:");
    for (size_t k = 0; k < LARES_ARRAY_LEN(ktypes); k++) {
        printf(" %s %.2g", ktypes[k].file_name, worst[k]);
    }
    printf("\n");
    free(wbuf);
    free(ybuf);
    free(yf);
    free(wf);
    free(yd);
}

/* the Q8_K quantizer of every family, byte for byte with the reference */
static void check_q8_K(void) {
    const quant_traits *ref = quant_traits_ref(GGUF_TYPE_Q8_K);
    const int64_t n = 8 * QK_K;
    float *x = malloc((size_t)n * sizeof(float));
    uint8_t *a = malloc(quant_row_bytes(GGUF_TYPE_Q8_K, n) + 1);
    uint8_t *b = malloc(quant_row_bytes(GGUF_TYPE_Q8_K, n) + 1);
    const size_t bytes = quant_row_bytes(GGUF_TYPE_Q8_K, n);
    for (int shape = 0; shape < 7; shape++) {
        for (int64_t i = 0; i < n; i++) {
            const int blk = (int)(i / QK_K);
            switch (shape) {
            case 0: /* gaussian, one block per magnitude from 1e-30 to 1e30 */
                x[i] = rng_gauss() * powf(10.f, (float)(blk * 8 - 30));
                break;
            case 1: /* zeros, all-equal, +-max both present (first one wins), ties */
                x[i] = blk == 0   ? 0.0f
                       : blk == 1 ? 3.0f
                       : blk == 2 ? (i % 7 == 3   ? -2.0f
                                     : i % 7 == 5 ? 2.0f
                                                  : rng_gauss() * 0.3f)
                       : blk == 3 ? (float)((int)(i % 255) - 127) * 0.5f /* exact .5 levels */
                                  : rng_gauss();
                break;
            case 2: /* a single non-zero */
                x[i] = i % QK_K == (i / QK_K) * 31 % QK_K ? -1e-3f : 0.0f;
                break;
            default: /* uniform */
                x[i] = (rng_uniform() - 0.5f) * (float)shape;
                break;
            }
        }
        ref->from_float_ref(x, a + 1, n);
        for (int fam = 0; fam < n_families; fam++) {
            const quant_traits *t = &families[fam].t[GGUF_TYPE_Q8_K];
            memset(b, 0x5a, bytes + 1);
            t->from_float(x, b + 1, n);
            CHECKF(memcmp(a + 1, b + 1, bytes) == 0, "q8_K quantize (%s) shape %d differs",
                   families[fam].name, shape);
        }
    }
    /* the bsums are the sums of 16 (the reference's own invariant) */
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *blk = a + 1 + i * sizeof(block_q8_K);
        const int8_t *qs = (const int8_t *)KQ_FIELD(blk, block_q8_K, qs);
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                sum += qs[16 * g + l];
            }
            CHECK(sum == q8k_bsum(blk, g));
        }
    }
    free(x);
    free(a);
    free(b);
}

/* ---- 3. round-trip error ---- */

static void check_round_trip(void) {
    lares_error err = {0};
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(fixture("derived/ggml-quant-test-vectors.gguf"), NULL, &f, &err), &err);
    const gguf_tensor *tx = f ? gguf_find_tensor(f, "x") : NULL;
    const int64_t n = 4096;
    float *x = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    float *g = malloc(n * sizeof(float));
    uint8_t *q = malloc(n * 2);
    for (int64_t i = 0; i < n; i++) {
        g[i] = rng_gauss();
    }
    printf("kquant: round trip, RMSE / RMS(x): gaussian | test vectors x (reference engine) "
           "| ggml synthetic sqrt(sum d^2)/n (bound)\n");
    for (size_t k = 0; k < LARES_ARRAY_LEN(ktypes); k++) {
        const quant_traits *ref = quant_traits_ref(ktypes[k].type);
        double rel[2] = {0, 0}, rel_engine = 0;
        for (int set = 0; set < 2; set++) {
            const float *src = set == 0 ? g : (tx ? (const float *)tx->data : g);
            ref->from_float_ref(src, q, n);
            ref->to_float(q, out, n);
            double e2 = 0, x2 = 0;
            for (int64_t i = 0; i < n; i++) {
                e2 += ((double)out[i] - src[i]) * ((double)out[i] - src[i]);
                x2 += (double)src[i] * src[i];
            }
            rel[set] = sqrt(e2 / x2);
        }
        if (tx != NULL) {
            char name[64];
            snprintf(name, sizeof name, "deq.%s", ktypes[k].file_name);
            const gguf_tensor *td = gguf_find_tensor(f, name);
            double e2 = 0, x2 = 0;
            for (int64_t i = 0; td != NULL && i < n; i++) {
                const double xi = ((const float *)tx->data)[i];
                const double di = ((const float *)td->data)[i] - xi;
                e2 += di * di;
                x2 += xi * xi;
            }
            rel_engine = sqrt(e2 / x2);
        }
        /* GGML's test-quantize-fns data and measure: 0.1 + 2 cos(i + offset) */
        for (int64_t i = 0; i < n; i++) {
            x[i] = 0.1f + 2 * cosf((float)i + 0.25f);
        }
        ref->from_float_ref(x, q, n);
        ref->to_float(q, out, n);
        double e2 = 0;
        for (int64_t i = 0; i < n; i++) {
            e2 += ((double)out[i] - x[i]) * ((double)out[i] - x[i]);
        }
        const double ggml_err = sqrt(e2) / (double)n;
        printf("  %-7s %.5f | %.5f (%.5f) | %.6f (%.4f)\n", ktypes[k].file_name, rel[0], rel[1],
               rel_engine, ggml_err, ktypes[k].ggml_err_bound);
        CHECKF(ggml_err < ktypes[k].ggml_err_bound, "%s: round-trip error %g over GGML's bound %g",
               ktypes[k].file_name, ggml_err, ktypes[k].ggml_err_bound);
        /* no worse than the reference engine on the same data */
        CHECKF(rel[1] <= rel_engine * 1.0001 + 1e-12, "%s: round trip on x %g, reference engine %g",
               ktypes[k].file_name, rel[1], rel_engine);
        /* weight-like (gaussian) data fares no worse than the heavier-tailed x */
        CHECKF(rel[0] <= rel_engine * 1.25, "%s: gaussian round trip %g vs %g on x",
               ktypes[k].file_name, rel[0], rel_engine);
    }
    free(x);
    free(out);
    free(g);
    free(q);
    gguf_close(f);
}

int main(void) {
    collect_families();
    printf("kquant: families under test:");
    for (int i = 0; i < n_families; i++) {
        printf(" [%s]", families[i].name);
    }
    printf("\n");
    check_test_vectors();
    check_kernels();
    check_q8_K();
    check_round_trip();
    return check_finish("kquant");
}
