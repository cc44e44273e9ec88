/*
 * quant: the block formats and their kernels.
 *
 * Two oracles (docs/style.md, "Tests"):
 *   - outside truth for the scalar reference: GGML's quantization of a fixed
 *     tensor and its dequantization (derived/ggml-quant-test-vectors.gguf);
 *   - the scalar reference for every SIMD family this machine can run
 *     (AVX2 here; NEON with and without dotprod under qemu-aarch64), on seeded
 *     random data, edge values and odd lengths.
 * Every type with a trait row is covered through the table, so a new row is
 * tested without touching this file.
 *
 * Usage: test_quant [--isa scalar|avx2|avxvnni|avx512|neon|neon-nodot|neon-i8mm]
 * Without --isa every family available here is tested; a named family that
 * is absent is a failure (a forced ISA never silently falls back).
 */
#include "check.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <float.h>
#include <stdint.h>
#include <strings.h>

/* ---- seeded random data ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng_next(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

/* uniform in [-1, 1) with 24 random bits */
static float rng_unit(void) {
    return (float)(int32_t)(rng_next() >> 40) / 8388608.0f - 1.0f;
}

/* Values shaped like activations and weights: roughly normal (sum of three
 * uniforms) with a scale that changes every 32 elements over four decades, so
 * that block scales differ widely. */
static void fill_random(float *x, int64_t n) {
    float scale = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) {
            scale = powf(10.0f, 2.0f * rng_unit());
        }
        x[i] = scale * (rng_unit() + rng_unit() + rng_unit()) / 3.0f;
    }
}

static void fill_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(rng_next() >> 56);
    }
}

/* The generator must produce what the tests claim: signed values of varied
 * magnitude, not a constant (style.md: "seeded random inputs, checked for
 * spread"). */
static void test_random_spread(void) {
    enum { N = 1 << 14 };
    static float x[N];
    fill_random(x, N);
    double sum = 0, sum2 = 0;
    float mn = FLT_MAX, mx = -FLT_MAX;
    int neg = 0, tiny = 0, big = 0;
    for (int i = 0; i < N; i++) {
        sum += x[i];
        sum2 += (double)x[i] * x[i];
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
        neg += x[i] < 0;
        tiny += fabsf(x[i]) < 0.01f;
        big += fabsf(x[i]) > 10.0f;
    }
    double mean = sum / N, sd = sqrt(sum2 / N - mean * mean);
    CHECKF(neg > N * 2 / 5 && neg < N * 3 / 5, "negatives %d of %d", neg, N);
    CHECKF(fabs(mean) < 0.2 * sd, "mean %g sd %g", mean, sd);
    CHECKF(mn < -20.0f && mx > 20.0f, "range [%g, %g]", mn, mx);
    CHECKF(tiny > N / 50 && big > N / 50, "tiny %d big %d", tiny, big);
    int distinct = 0;
    for (int i = 1; i < 1000; i++) {
        distinct += x[i] != x[i - 1];
    }
    CHECKF(distinct > 990, "%d distinct neighbours of 999", distinct);

    uint8_t b[4096];
    fill_bytes(b, sizeof b);
    int ones = 0;
    for (size_t i = 0; i < sizeof b; i++) {
        ones += __builtin_popcount(b[i]);
    }
    CHECKF(ones > 4096 * 4 - 600 && ones < 4096 * 4 + 600, "%d one bits in 32768", ones);
}

/* ---- tolerances ----
 * A SIMD dot product consumes the same quantized blocks as the reference and
 * forms the same integer sum per block (checked bit for bit by check_exact,
 * where every sum is an integer that float holds); it differs only in float
 * rounding:
 * the reference accumulates in double, SIMD in float lanes after one float
 * product of the two block scales. The error is measured against
 *   B = sum over blocks of max|x in block| * sum|y in block|
 * (for floats, blocks of one: sum |x_i y_i|), which bounds every term either
 * side adds, including the m * s terms of Q4_1/Q5_1. With n <= 4096 a lane adds
 * at most 128 terms: worst case 128 * 2^-24 = 7.6e-6 of B. One wrong element
 * of average size moves the result by at least 1/n of B (2.4e-4 at n = 4096),
 * well above every bound below. */
#define TOL_DOT_FLOAT  1e-5 /* f32, f16, bf16 weights: float lanes of 4x8 */
#define TOL_DOT_LEGACY 2e-5 /* 32-element blocks: one extra rounding (d_x * d_y) per block */
#define TOL_DOT_OTHER  2e-5 /* rows added later (K-quants, i-quants) until they name their own */
#define N_MAX          4096

static double dot_tolerance(uint32_t type) {
    switch (type) {
    case GGUF_TYPE_F32:
    case GGUF_TYPE_F16:
    case GGUF_TYPE_BF16:
        return TOL_DOT_FLOAT;
    case GGUF_TYPE_Q4_0:
    case GGUF_TYPE_Q4_1:
    case GGUF_TYPE_Q5_0:
    case GGUF_TYPE_Q5_1:
    case GGUF_TYPE_Q8_0:
        return TOL_DOT_LEGACY;
    default:
        return TOL_DOT_OTHER;
    }
}

/* Dequantization is bit-exact in every family (each SIMD kernel performs the
 * reference's float operations in the same order), and so are the fast
 * activation quantizers: the AVX2 and NEON Q8_0/Q8_1 quantizers round half
 * away from zero exactly as roundf does. */

/* ---- families under test ---- */

static const struct {
    const char *name;
    quant_isa isa;
} families[] = {
    {"scalar", QUANT_ISA_SCALAR},
    {"avx2", QUANT_ISA_AVX2},
    {"avxvnni", QUANT_ISA_AVXVNNI},
    {"avx512", QUANT_ISA_AVX512},
    {"neon", QUANT_ISA_NEON},
    {"neon-nodot", QUANT_ISA_NEON_NODOT},
    {"neon-i8mm", QUANT_ISA_NEON_I8MM},
};

static const char *family_label(quant_isa isa) {
    for (size_t i = 0; i < LARES_ARRAY_LEN(families); i++) {
        if (families[i].isa == isa) {
            return families[i].name;
        }
    }
    return "?";
}

/* ---- helpers ---- */

static size_t row_bytes(const quant_traits *t, int64_t n) {
    return (size_t)(n / t->blck_elems) * t->blck_bytes;
}

/* finite and at most 1e30, so that float dot products of n <= N_MAX stay finite */
static bool all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || fabsf(x[i]) > 1e30f) {
            return false;
        }
    }
    return true;
}

/* Random raw blocks of any type: random bytes, redrawn until the reference
 * dequantizes the block to finite values of at most 1e30 (a random fp16 scale
 * is NaN or infinite one time in 32; a random f32 is above 1e30 one in nine). Raw bytes reach codes
 * a quantizer may never emit (Q8_0 weights of -128, every nibble and high-bit pattern). */
static void random_blocks(const quant_traits *r, void *dst, int64_t nb) {
    float tmp[1024];
    uint8_t *p = dst;
    for (int64_t b = 0; b < nb; b++, p += r->blck_bytes) {
        int tries = 0;
        do {
            fill_bytes(p, r->blck_bytes);
            r->to_float(p, tmp, r->blck_elems);
        } while (!all_finite(tmp, r->blck_elems) && ++tries < 1000);
        CHECKF(tries < 1000, "%s: no finite random block", r->name);
    }
}

/* B of the tolerance above, from the reference dequantization of both rows. */
static double dot_bound(const quant_traits *r, const quant_traits *ry, const void *x, const void *y,
                        int64_t n) {
    static float xf[N_MAX], yf[N_MAX];
    r->to_float(x, xf, n);
    ry->to_float(y, yf, n);
    double bound = 0;
    for (int64_t b = 0; b < n; b += r->blck_elems) {
        double amax = 0, ysum = 0;
        for (int64_t i = b; i < b + r->blck_elems; i++) {
            amax = fmax(amax, fabs(xf[i]));
            ysum += fabs(yf[i]);
        }
        bound += amax * ysum;
    }
    return bound;
}

static bool near(double got, double want, double tol, double bound) {
    return fabs(got - want) <= tol * bound + 1e-30;
}

/* ---- the reference against outside truth ---- */

typedef struct fixture_file {
    gguf_file *f;
    const float *x; /* rows x cols, F32 */
    int64_t rows, cols;
} fixture_file;

static bool open_vectors(fixture_file *v) {
    lares_error err = {0};
    memset(v, 0, sizeof *v);
    CHECK_OK(gguf_open(fixture("derived/ggml-quant-test-vectors.gguf"), NULL, &v->f, &err), &err);
    if (v->f == NULL) {
        return false;
    }
    const gguf_tensor *x = gguf_find_tensor(v->f, "x");
    CHECK(x != NULL && x->type == GGUF_TYPE_F32 && x->ne[0] == 512 && x->ne[1] == 8);
    if (x == NULL || x->type != GGUF_TYPE_F32) {
        return false;
    }
    v->x = x->data;
    v->cols = x->ne[0];
    v->rows = x->ne[1];
    return true;
}

/* For every "q.<type>" tensor whose type lares has a row for: the reference
 * and every family dequantize to "deq.<type>" bit for bit, and the reference
 * quantizer reproduces the blocks byte for byte. */
static void test_vectors(const quant_isa *isas, size_t n_isas) {
    fixture_file v;
    if (!open_vectors(&v)) {
        gguf_close(v.f);
        return;
    }
    int64_t n = v.rows * v.cols;
    float *deq = malloc((size_t)n * sizeof *deq);
    uint8_t *q = malloc((size_t)n * 4);
    int covered = 0;
    char missing[512] = "";
    for (uint64_t i = 0; i < gguf_n_tensors(v.f); i++) {
        const gguf_tensor *tq = gguf_tensor_at(v.f, i);
        if (strncmp(tq->name, "q.", 2) != 0) {
            continue;
        }
        const quant_traits *r = quant_traits_ref(tq->type);
        if (r == NULL) { /* a type lares cannot compute with (yet): listed below */
            size_t len = strlen(missing);
            snprintf(missing + len, sizeof missing - len, " %s", tq->name + 2);
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "deq.%s", tq->name + 2);
        const gguf_tensor *td = gguf_find_tensor(v.f, name);
        CHECKF(td != NULL && td->type == GGUF_TYPE_F32 && gguf_tensor_nelements(td) == n,
               "%s: missing or malformed", name);
        CHECK(tq->nbytes == row_bytes(r, v.cols) * (size_t)v.rows);
        if (td == NULL || td->type != GGUF_TYPE_F32 || tq->nbytes != row_bytes(r, n)) {
            continue;
        }
        covered++;

        /* reference dequantization, row by row as the kernels see rows */
        size_t rb = row_bytes(r, v.cols);
        for (int64_t row = 0; row < v.rows; row++) {
            r->to_float((const uint8_t *)tq->data + row * rb, deq + row * v.cols, v.cols);
        }
        CHECKF(memcmp(deq, td->data, (size_t)n * sizeof(float)) == 0,
               "%s: reference dequantization differs from %s", r->name, name);

        /* the reference quantizer against GGML's blocks */
        if (r->from_float_ref != NULL) {
            for (int64_t row = 0; row < v.rows; row++) {
                r->from_float_ref(v.x + row * v.cols, q + row * rb, v.cols);
            }
            size_t at = 0;
            while (at < tq->nbytes && q[at] == ((const uint8_t *)tq->data)[at]) {
                at++;
            }
            CHECKF(at == tq->nbytes, "%s: reference quantizer differs from %s at byte %zu", r->name,
                   tq->name, at);
        }

        for (size_t k = 0; k < n_isas; k++) {
            const quant_traits *t = quant_traits_isa(tq->type, isas[k]);
            for (int64_t row = 0; row < v.rows; row++) {
                t->to_float((const uint8_t *)tq->data + row * rb, deq + row * v.cols, v.cols);
            }
            CHECKF(memcmp(deq, td->data, (size_t)n * sizeof(float)) == 0,
                   "%s/%s: dequantization differs from %s", family_label(isas[k]), t->name, name);
            /* the fast quantizers are exact too (see above) */
            for (int64_t row = 0; row < v.rows; row++) {
                t->from_float(v.x + row * v.cols, q + row * rb, v.cols);
            }
            CHECKF(memcmp(q, tq->data, tq->nbytes) == 0, "%s/%s: fast quantizer differs from %s",
                   family_label(isas[k]), t->name, tq->name);
        }
    }
    /* the legacy and float formats at least must be there */
    CHECKF(covered >= 7, "only %d types covered by the vectors", covered);
    printf("  vectors: %d types checked; without a trait row:%s\n", covered, missing);
    free(deq);
    free(q);
    gguf_close(v.f);
}

/* ---- trait rows ---- */

static void test_geometry(const quant_isa *isas, size_t n_isas) {
    int rows = 0;
    for (uint32_t type = 0; type < GGUF_TYPE_COUNT; type++) {
        const quant_traits *r = quant_traits_ref(type);
        if (r == NULL) {
            for (size_t k = 0; k < n_isas; k++) {
                CHECK(quant_traits_isa(type, isas[k]) == NULL);
            }
            continue;
        }
        rows++;
        const gguf_type_info *g = gguf_type_info_of(type);
        CHECKF(g != NULL, "type %u has a trait row but no GGUF type info", type);
        if (g == NULL) {
            continue;
        }
        CHECKF(r->type == type && strcasecmp(r->name, g->name) == 0 &&
                   r->blck_elems == (int64_t)g->blck_elems && r->blck_bytes == g->blck_bytes,
               "row %u (%s: %" PRId64 " elements, %zu bytes) against gguf (%s: %u, %u)", type,
               r->name, r->blck_elems, r->blck_bytes, g->name, g->blck_elems, g->blck_bytes);
        CHECK(r->to_float != NULL && r->from_float != NULL);
        CHECK(r->is_quantized == (r->blck_elems > 1));
        CHECK(quant_row_bytes(type, 4 * r->blck_elems) == 4 * r->blck_bytes);
        if (r->vec_dot != NULL) {
            const quant_traits *ry = quant_traits_ref(r->vec_dot_type);
            CHECKF(ry != NULL && (ry->blck_elems == r->blck_elems || ry->blck_elems == 1),
                   "%s: activation type %u has no row or another block", r->name, r->vec_dot_type);
        }
        /* a family only swaps kernels: geometry and the reference quantizer stay */
        for (size_t k = 0; k < n_isas; k++) {
            const quant_traits *t = quant_traits_isa(type, isas[k]);
            CHECK(t != NULL);
            if (t == NULL) {
                continue;
            }
            CHECK(t->type == r->type && t->name == r->name && t->blck_elems == r->blck_elems &&
                  t->blck_bytes == r->blck_bytes && t->is_quantized == r->is_quantized &&
                  t->vec_dot_type == r->vec_dot_type && t->from_float_ref == r->from_float_ref);
            CHECK((t->vec_dot == NULL) == (r->vec_dot == NULL));
            CHECK(t->vec_dot_tile == NULL || t->vec_dot != NULL);
        }
    }
    CHECKF(rows >= 9, "%d trait rows", rows);
    CHECK(quant_traits_ref(GGUF_TYPE_COUNT) == NULL && quant_traits_of(GGUF_TYPE_COUNT) == NULL);
    CHECK(quant_traits_ref(4) == NULL); /* Q4_2, retired */
}

/* The dispatched choice is fixed after first use; families absent from this
 * build are refused, never replaced. */
static void test_dispatch(void) {
    lares_error err = {0};
    const quant_traits *t = quant_traits_of(GGUF_TYPE_Q4_0);
    CHECK(t != NULL);
    CHECK(quant_force_isa(QUANT_ISA_SCALAR, &err) == LARES_EINVAL);
    CHECK(strstr(err.msg, "already chosen") != NULL);
    CHECK(quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_AUTO) == t);
    CHECK(strcmp(quant_isa_family_name(QUANT_ISA_AUTO), quant_isa_name()) == 0);
    CHECK(quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_COUNT) == NULL);
    const quant_cpu *c = quant_cpu_features();
    bool avx2 = c->avx2 && c->fma && c->f16c;
#if defined(LARES_HAVE_X86)
    CHECK((quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_AVX2) != NULL) == avx2);
    CHECK(quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_NEON) == NULL);
    CHECK(quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_NEON_NODOT) == NULL);
    const bool vnni = avx2 && c->avxvnni;
    const bool avx512 = avx2 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512vnni;
    CHECK((quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_AVXVNNI) != NULL) == vnni);
    CHECK((quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_AVX512) != NULL) == avx512);
    /* the best family this CPU has is the default */
    CHECK(strcmp(quant_isa_name(), avx512 ? "avx512vnni"
                                   : vnni ? "avxvnni"
                                   : avx2 ? "avx2"
                                          : "scalar") == 0);
    CHECK(strstr(quant_cpu_flags(), avx2 ? "avx2" : "none") != NULL);
    if (!vnni) {
        printf("  (the avxvnni family is not tested: this CPU lacks AVX-VNNI)\n");
    }
    if (!avx512) {
        printf("  (the avx512 family is not tested: this CPU lacks AVX-512 F/BW/VL/VNNI)\n");
    }
#elif defined(LARES_HAVE_ARM64)
    CHECK(quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_AVX2) == NULL);
    CHECK(quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_NEON_NODOT) != NULL);
    CHECK(strcmp(quant_isa_name(), c->dotprod && c->i8mm ? "neon+i8mm"
                                   : c->dotprod          ? "neon+dotprod"
                                                         : "neon") == 0);
    CHECK(strcmp(quant_isa_family_name(QUANT_ISA_NEON_NODOT), "neon") == 0);
    CHECK((quant_traits_isa(GGUF_TYPE_Q4_0, QUANT_ISA_NEON_I8MM) != NULL) ==
          (c->dotprod && c->i8mm));
#endif
    (void)avx2;
    printf("  dispatch: %s\n", quant_isa_name());
}

/* ---- every family against the reference ---- */

/* lengths: odd block counts, and for floats every tail length of a vector */
static const int64_t float_lengths[] = {1,   2,   3,   4,    5,    7,    8,    9,   15,  16,
                                        17,  31,  32,  33,   63,   64,   65,   100, 127, 128,
                                        255, 256, 257, 1000, 1023, 2048, 4095, 4096};
static const int64_t block_counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 127, 128};

static int n_lengths(const quant_traits *r) {
    return r->blck_elems == 1 ? (int)LARES_ARRAY_LEN(float_lengths)
                              : (int)LARES_ARRAY_LEN(block_counts);
}

/* 0 past N_MAX (256-element super-blocks reach it sooner) */
static int64_t length_at(const quant_traits *r, int i) {
    int64_t n = r->blck_elems == 1 ? float_lengths[i] : block_counts[i] * r->blck_elems;
    return n <= N_MAX ? n : 0;
}

/* Edge inputs (NaN-free): zeros, all-equal blocks, extremes of each format. */
enum { EDGE_RANDOM, EDGE_ZERO, EDGE_EQUAL, EDGE_ALTERNATE, EDGE_SPIKE, EDGE_HALVES, EDGE_COUNT };
static const char *const edge_names[EDGE_COUNT] = {"random",    "zeros", "all-equal",
                                                   "alternate", "spike", "halves"};

static void fill_edge(float *x, int64_t n, int kind, float big) {
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case EDGE_ZERO:
            x[i] = 0.0f;
            break;
        case EDGE_EQUAL: /* every block one value, changing per block */
            x[i] = (i / 32) % 2 ? -2.5f : 0.37f;
            break;
        case EDGE_ALTERNATE: /* +-big: quantizes to the extreme codes */
            x[i] = (i % 3) ? big : -big;
            break;
        case EDGE_SPIKE: /* one large value among tiny ones in each block */
            x[i] = (i % 32 == 5) ? big : 1e-4f * (float)(i % 7 - 3);
            break;
        case EDGE_HALVES: /* with amax 127, q8 quantization sees exact halves */
            x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(i % 61) - 30) + 0.5f;
            break;
        default:
            fill_random(x, n);
            return;
        }
    }
}

/* the largest magnitude an edge case uses for a type: f16 and q-block scales
 * are fp16, so blocks stay below 65504 per unit of code */
static float edge_big(uint32_t type) {
    switch (type) {
    case GGUF_TYPE_F16:
        return 65504.0f;
    case GGUF_TYPE_BF16:
    case GGUF_TYPE_F32:
        return 1e30f;
    default:
        return 60000.0f;
    }
}

typedef struct bufs {
    float *xf, *yf, *out, *out_ref;
    uint8_t *x, *y, *q, *q_ref;
} bufs;

/* dequantize and fast quantize, both exact */
static void check_convert(const quant_traits *r, const quant_traits *t, const char *fam, bufs *b) {
    for (int li = 0; li < n_lengths(r); li++) {
        int64_t n = length_at(r, li);
        int64_t nb = n / r->blck_elems;
        if (n == 0) {
            continue;
        }
        random_blocks(r, b->x, nb);
        r->to_float(b->x, b->out_ref, n);
        t->to_float(b->x, b->out, n);
        CHECKF(memcmp(b->out, b->out_ref, (size_t)n * sizeof(float)) == 0,
               "%s/%s: dequantize of %" PRId64 " random blocks differs", fam, r->name, nb);
        for (int e = 0; e < EDGE_COUNT; e++) {
            fill_edge(b->xf, n, e, edge_big(r->type));
            r->from_float_ref(b->xf, b->q_ref, n);
            t->from_float(b->xf, b->q, n);
            CHECKF(memcmp(b->q, b->q_ref, row_bytes(r, n)) == 0,
                   "%s/%s: fast quantizer differs on %s, n %" PRId64, fam, r->name, edge_names[e],
                   n);
            r->to_float(b->q_ref, b->out_ref, n);
            t->to_float(b->q_ref, b->out, n);
            CHECKF(memcmp(b->out, b->out_ref, (size_t)n * sizeof(float)) == 0,
                   "%s/%s: dequantize differs on %s, n %" PRId64, fam, r->name, edge_names[e], n);
        }
    }
}

/* a weight row x (random raw blocks or quantized edge values) and an
 * activation row y (always from the activation type's quantizer, so Q8 values
 * stay in [-127, 127] as the kernels require) */
static void make_rows(const quant_traits *r, const quant_traits *ry, bufs *b, int64_t n, int kind,
                      int raw, uint8_t *x, uint8_t *y) {
    if (raw && kind == EDGE_RANDOM) {
        random_blocks(r, x, n / r->blck_elems);
    } else {
        fill_edge(b->xf, n, kind, edge_big(r->type));
        r->from_float_ref(b->xf, x, n);
    }
    /* activations: random, or the same edge shape at a size that keeps
     * float products finite */
    fill_edge(b->yf, n, kind == EDGE_ZERO && raw ? EDGE_RANDOM : kind,
              ry->type == GGUF_TYPE_F32 ? 1.0f : 1000.0f);
    ry->from_float_ref(b->yf, y, n);
}

static void check_dot(const quant_traits *r, const quant_traits *t, const char *fam, bufs *b) {
    const quant_traits *ry = quant_traits_ref(r->vec_dot_type);
    double tol = dot_tolerance(r->type);
    double worst = 0;
    for (int li = 0; li < n_lengths(r); li++) {
        int64_t n = length_at(r, li);
        for (int e = 0; e < EDGE_COUNT && n > 0; e++) {
            for (int raw = 0; raw < 2; raw++) {
                make_rows(r, ry, b, n, e, raw, b->x, b->y);
                float want = NAN, got = NAN;
                r->vec_dot(n, &want, b->x, b->y);
                t->vec_dot(n, &got, b->x, b->y);
                double bound = dot_bound(r, ry, b->x, b->y, n);
                CHECKF(isfinite(want) && near(got, want, tol, bound),
                       "%s/%s: dot n %" PRId64 " %s%s: %.9g, reference %.9g (bound %g)", fam,
                       r->name, n, edge_names[e], raw ? " raw" : "", got, want, bound);
                if (bound > 0) {
                    worst = fmax(worst, fabs(got - want) / bound);
                }
                if (e == EDGE_ZERO && !raw) {
                    CHECKF(got == 0.0f, "%s/%s: dot of zeros is %g", fam, r->name, got);
                }
            }
        }
    }
    printf("  %s/%s: dot worst error %.2e of bound (tolerance %.0e)\n", fam, r->name, worst, tol);
}

/* Tiles of every shape up to QUANT_TILE_MAX: each result as the reference
 * dot of its row pair; rows at strides wider than a row (as in a matrix with
 * padding) and results at a leading dimension wider than the tile, with every
 * element outside the tile left alone. */
static void check_tile(const quant_traits *r, const quant_traits *t, const char *fam, bufs *b) {
    const quant_traits *ry = quant_traits_ref(r->vec_dot_type);
    double tol = dot_tolerance(r->type);
    static const int64_t lens[] = {1, 2, 3, 7, 8, 9, 33, 64};
    for (size_t li = 0; li < LARES_ARRAY_LEN(lens); li++) {
        int64_t n = lens[li] * r->blck_elems;
        if (r->blck_elems == 1) {
            n = lens[li] * 5 + 3; /* odd float lengths */
        }
        if (n > N_MAX) {
            continue;
        }
        size_t bx = row_bytes(r, n) + r->blck_bytes * 3; /* keeps block alignment */
        size_t by = row_bytes(ry, n) + ry->blck_bytes;
        for (int e = 0; e < EDGE_COUNT; e++) {
            for (int i = 0; i < QUANT_TILE_MAX; i++) {
                make_rows(r, ry, b, n, e == EDGE_RANDOM ? e : (e + i) % EDGE_COUNT, i % 2,
                          b->x + i * bx, b->y + i * by);
            }
            for (int nr = 1; nr <= QUANT_TILE_MAX; nr++) {
                for (int nc = 1; nc <= QUANT_TILE_MAX; nc++) {
                    enum { LDC = QUANT_TILE_MAX + 3 };
                    float s[LDC * QUANT_TILE_MAX];
                    const float sentinel = -7.25e11f;
                    for (size_t k = 0; k < LARES_ARRAY_LEN(s); k++) {
                        s[k] = sentinel;
                    }
                    t->vec_dot_tile(n, s, LDC, b->x, bx, b->y, by, nr, nc);
                    for (int c = 0; c < QUANT_TILE_MAX; c++) {
                        for (int rr = 0; rr < LDC; rr++) {
                            float got = s[c * LDC + rr];
                            if (rr >= nr || c >= nc) {
                                CHECKF(got == sentinel, "%s/%s: tile %dx%d wrote (%d, %d)", fam,
                                       r->name, nr, nc, rr, c);
                                continue;
                            }
                            float want;
                            r->vec_dot(n, &want, b->x + rr * bx, b->y + c * by);
                            double bound = dot_bound(r, ry, b->x + rr * bx, b->y + c * by, n);
                            CHECKF(near(got, want, tol, bound),
                                   "%s/%s: tile %dx%d n %" PRId64 " %s (%d, %d): %.9g, reference "
                                   "%.9g",
                                   fam, r->name, nr, nc, n, edge_names[e], rr, c, got, want);
                        }
                    }
                }
            }
        }
    }
}

/* Integer sums exact: rows of small integers that quantize with scale 1 (and
 * min 0), so every block sum and every partial sum up to n = 1024 is an
 * integer below 2^24 that float holds exactly. Any family must then return
 * the reference's value bit for bit, through vec_dot and vec_dot_tile. The
 * code range of each format, and a value that pins the scale to 1: */
static const struct {
    uint32_t type;
    int lo, hi, pin; /* codes in [lo, hi]; one element per block is pin */
} exact_ranges[] = {
    {GGUF_TYPE_F32, -100, 100, 100},  {GGUF_TYPE_F16, -100, 100, 100},
    {GGUF_TYPE_BF16, -100, 100, 100}, {GGUF_TYPE_Q4_0, -8, 7, -8}, /* d = max / -8 */
    {GGUF_TYPE_Q4_1, 0, 15, 15}, /* d = (max - min) / 15, m = min (0 pinned below) */
    {GGUF_TYPE_Q5_0, -16, 15, -16},   {GGUF_TYPE_Q5_1, 0, 31, 31},
    {GGUF_TYPE_Q8_0, -127, 127, 127}, {GGUF_TYPE_Q8_1, -127, 127, 127},
};

static bool exact_range(uint32_t type, int *lo, int *hi, int *pin) {
    for (size_t i = 0; i < LARES_ARRAY_LEN(exact_ranges); i++) {
        if (exact_ranges[i].type == type) {
            *lo = exact_ranges[i].lo;
            *hi = exact_ranges[i].hi;
            *pin = exact_ranges[i].pin;
            return true;
        }
    }
    return false;
}

/* integers in [lo, hi]; per 32 elements one is pin and one is lo, so that
 * scales come out 1 and the mins of Q4_1/Q5_1 0 */
static void fill_integers(float *x, int64_t n, int lo, int hi, int pin) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(lo + (int)(rng_next() % (uint64_t)(hi - lo + 1)));
        if (i % 32 == 7) {
            x[i] = (float)pin;
        } else if (i % 32 == 19) {
            x[i] = (float)lo;
        }
    }
}

static void check_exact(const quant_traits *r, const quant_traits *t, const char *fam, bufs *b) {
    const quant_traits *ry = quant_traits_ref(r->vec_dot_type);
    int lo, hi, pin, ylo, yhi, ypin;
    if (!exact_range(r->type, &lo, &hi, &pin) || !exact_range(ry->type, &ylo, &yhi, &ypin)) {
        return;
    }
    static const int64_t lens[] = {32, 96, 160, 512, 1024};
    for (size_t li = 0; li < LARES_ARRAY_LEN(lens); li++) {
        const int64_t n = lens[li];
        const size_t bx = row_bytes(r, n), by = row_bytes(ry, n);
        for (int i = 0; i < QUANT_TILE_MAX; i++) {
            fill_integers(b->xf, n, lo, hi, pin);
            r->from_float_ref(b->xf, b->x + i * bx, n);
            fill_integers(b->yf, n, ylo, yhi, ypin);
            ry->from_float_ref(b->yf, b->y + i * by, n);
        }
        float want, got;
        r->vec_dot(n, &want, b->x, b->y);
        t->vec_dot(n, &got, b->x, b->y);
        CHECKF(got == want && want == floorf(want),
               "%s/%s: integer dot n %" PRId64 ": %.9g, reference %.9g", fam, r->name, n, got,
               want);
        if (t->vec_dot_tile != NULL) {
            float s[QUANT_TILE_MAX * QUANT_TILE_MAX];
            t->vec_dot_tile(n, s, QUANT_TILE_MAX, b->x, bx, b->y, by, QUANT_TILE_MAX,
                            QUANT_TILE_MAX);
            for (int c = 0; c < QUANT_TILE_MAX; c++) {
                for (int rr = 0; rr < QUANT_TILE_MAX; rr++) {
                    r->vec_dot(n, &want, b->x + rr * bx, b->y + c * by);
                    CHECKF(s[c * QUANT_TILE_MAX + rr] == want,
                           "%s/%s: integer tile n %" PRId64 " (%d, %d): %.9g, reference %.9g", fam,
                           r->name, n, rr, c, s[c * QUANT_TILE_MAX + rr], want);
                }
            }
        }
    }
}

/* The rows-in-lanes attention (kv_attend_rows) of each KV cache type against
 * the reference a row at a time: row counts below, at and past a vector's
 * lanes, each row its own causal window (rows of a token's group alike, the
 * next token's one longer, as a prompt's), widths that take the vector path
 * and ones that fall back, scales that underflow most probabilities; and a
 * row's result the same bit for bit whatever rows are beside it. */
static void check_attend_rows(quant_isa isa, const char *fam) {
    static const int64_t nrs[] = {1, 5, 8, 16, 23, 40};
    static const int64_t groups[] = {1, 4, 8};
    static const int64_t hds[] = {64, 128, 40};
    static const int64_t n0s[] = {1, 9, 300};
    static const float scales[] = {0.125f, 4.0f};
    const uint32_t types[] = {GGUF_TYPE_F32, GGUF_TYPE_F16};
    const int64_t n_max = 300 + 40, hd_max = 128, nr_max = 40, row_elems = 3 * hd_max;
    float *q = malloc(sizeof(float) * (size_t)(nr_max * hd_max));
    float *kf = malloc(sizeof(float) * (size_t)(n_max * row_elems));
    float *vf = malloc(sizeof(float) * (size_t)(n_max * row_elems));
    uint8_t *k = malloc(4 * (size_t)(n_max * row_elems));
    uint8_t *v = malloc(4 * (size_t)(n_max * row_elems));
    float *s = malloc(sizeof(float) * (size_t)n_max);
    float *tmp = malloc(sizeof(float) * (size_t)hd_max);
    float *scratch = malloc(sizeof(float) * QUANT_ATTEND_ROWS_SCRATCH(hd_max, n_max));
    float *out = malloc(sizeof(float) * (size_t)(nr_max * hd_max));
    float *alone = malloc(sizeof(float) * (size_t)hd_max);
    float *want = malloc(sizeof(float) * (size_t)hd_max);
    if (!q || !kf || !vf || !k || !v || !s || !tmp || !scratch || !out || !alone || !want) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < nr_max * hd_max; i++) {
        q[i] = rng_unit();
    }
    for (int64_t i = 0; i < n_max * row_elems; i++) {
        kf[i] = rng_unit();
        vf[i] = 4.0f * rng_unit();
    }
    int cases = 0;
    for (size_t ti = 0; ti < LARES_ARRAY_LEN(types); ti++) {
        const quant_traits *r = quant_traits_ref(types[ti]);
        const quant_traits *t = quant_traits_isa(types[ti], isa);
        if (t->kv_attend_rows == NULL) {
            continue; /* this family attends a token at a time */
        }
        r->from_float_ref(kf, k, n_max * row_elems);
        r->from_float_ref(vf, v, n_max * row_elems);
        const size_t row_bytes = (size_t)row_elems * r->blck_bytes;
        for (size_t a = 0; a < LARES_ARRAY_LEN(nrs); a++) {
            for (size_t g = 0; g < LARES_ARRAY_LEN(groups); g++) {
                for (size_t b = 0; b < LARES_ARRAY_LEN(hds); b++) {
                    for (size_t c = 0; c < LARES_ARRAY_LEN(n0s); c++) {
                        for (size_t d = 0; d < LARES_ARRAY_LEN(scales); d++) {
                            const int64_t nr = nrs[a], hd = hds[b];
                            const uint8_t *kh = k + (size_t)hd * r->blck_bytes;
                            const uint8_t *vh = v + (size_t)hd * r->blck_bytes;
                            const float *qs[40];
                            float *outs[40];
                            int32_t len[40];
                            for (int64_t i = 0; i < nr; i++) {
                                qs[i] = q + i * hd;
                                outs[i] = out + i * hd;
                                len[i] = (int32_t)(n0s[c] + i / groups[g]);
                            }
                            memset(out, 0xff, sizeof(float) * (size_t)(nr * hd)); /* NaN */
                            t->kv_attend_rows(nr, hd, qs, len, kh, vh, row_bytes, scales[d],
                                              scratch, outs);
                            float worst = 0;
                            bool same = true;
                            for (int64_t i = 0; i < nr; i++) {
                                r->kv_attend(qs[i], 1, hd, kh, vh, row_bytes, len[i], scales[d],
                                             s, tmp, want);
                                float *one[1] = {alone};
                                t->kv_attend_rows(1, hd, qs + i, len + i, kh, vh, row_bytes,
                                                  scales[d], scratch, one);
                                same = same && memcmp(alone, outs[i], sizeof(float) * (size_t)hd) == 0;
                                for (int64_t e = 0; e < hd; e++) {
                                    const float x = fabsf(outs[i][e] - want[e]);
                                    worst = x > worst || x != x ? x : worst;
                                }
                            }
                            const float tol = 2e-5f + 4.0f * scales[d] * (float)hd * 2.4e-7f;
                            CHECKF(worst <= tol, "%s/%s attention by rows: %" PRId64
                                   " rows, group %" PRId64 ", hd %" PRId64 ", from %" PRId64
                                   " keys, scale %g: off by %g",
                                   fam, r->name, nr, groups[g], hd, n0s[c], (double)scales[d],
                                   (double)worst);
                            CHECKF(same, "%s/%s attention by rows: %" PRId64 " rows, hd %" PRId64
                                   ": a row alone differs from the row among others",
                                   fam, r->name, nr, hd);
                            cases++;
                        }
                    }
                }
            }
        }
    }
    printf("  %s: %d attention-by-rows cases\n", fam, cases);
    free(q);
    free(kf);
    free(vf);
    free(k);
    free(v);
    free(s);
    free(tmp);
    free(scratch);
    free(out);
    free(alone);
    free(want);
}

/* The attention kernel of each KV cache type against the reference: groups
 * of 1 to 11 heads (more than the eight a kernel keeps in registers), head
 * widths that take the vector path and ones that fall back, key counts around
 * the vector width, rows interleaved with other heads' values as in a cache,
 * and scales large enough that most probabilities underflow. */
static void check_attend(quant_isa isa, const char *fam) {
    static const int64_t nqs[] = {1, 3, 4, 8, 11};
    static const int64_t hds[] = {64, 128, 48, 40, 20};
    static const int64_t ns[] = {1, 7, 8, 16, 17, 33, 100, 1030};
    static const float scales[] = {0.125f, 4.0f};
    const uint32_t types[] = {GGUF_TYPE_F32, GGUF_TYPE_F16};
    const int64_t n_max = 1030, hd_max = 128, nq_max = 11, row_elems = 3 * hd_max;
    float *q = malloc(sizeof(float) * (size_t)(nq_max * hd_max));
    float *kf = malloc(sizeof(float) * (size_t)(n_max * row_elems));
    float *vf = malloc(sizeof(float) * (size_t)(n_max * row_elems));
    uint8_t *k = malloc(4 * (size_t)(n_max * row_elems));
    uint8_t *v = malloc(4 * (size_t)(n_max * row_elems));
    float *s = malloc(sizeof(float) * (size_t)(nq_max * n_max));
    float *tmp = malloc(sizeof(float) * (size_t)hd_max);
    float *out = malloc(sizeof(float) * (size_t)(nq_max * hd_max));
    float *want = malloc(sizeof(float) * (size_t)(nq_max * hd_max));
    if (!q || !kf || !vf || !k || !v || !s || !tmp || !out || !want) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < nq_max * hd_max; i++) {
        q[i] = rng_unit();
    }
    for (int64_t i = 0; i < n_max * row_elems; i++) {
        kf[i] = rng_unit();
        vf[i] = 4.0f * rng_unit();
    }
    int cases = 0;
    for (size_t ti = 0; ti < LARES_ARRAY_LEN(types); ti++) {
        const quant_traits *r = quant_traits_ref(types[ti]);
        const quant_traits *t = quant_traits_isa(types[ti], isa);
        CHECKF(r->kv_attend != NULL && t->kv_attend != NULL, "%s/%s: no attention kernel", fam,
               r->name);
        if (r->kv_attend == NULL || t->kv_attend == NULL) {
            continue;
        }
        r->from_float_ref(kf, k, n_max * row_elems);
        r->from_float_ref(vf, v, n_max * row_elems);
        const size_t row_bytes = (size_t)row_elems * r->blck_bytes;
        for (size_t a = 0; a < LARES_ARRAY_LEN(nqs); a++) {
            for (size_t b = 0; b < LARES_ARRAY_LEN(hds); b++) {
                for (size_t c = 0; c < LARES_ARRAY_LEN(ns); c++) {
                    for (size_t d = 0; d < LARES_ARRAY_LEN(scales); d++) {
                        const int64_t nq = nqs[a], hd = hds[b], n = ns[c];
                        /* this head's columns start one head width into the row */
                        const uint8_t *kh = k + (size_t)hd * r->blck_bytes;
                        const uint8_t *vh = v + (size_t)hd * r->blck_bytes;
                        r->kv_attend(q, nq, hd, kh, vh, row_bytes, n, scales[d], s, tmp, want);
                        memset(out, 0xff, sizeof(float) * (size_t)(nq * hd)); /* NaN */
                        t->kv_attend(q, nq, hd, kh, vh, row_bytes, n, scales[d], s, tmp, out);
                        float worst = 0;
                        for (int64_t i = 0; i < nq * hd; i++) {
                            const float e = fabsf(out[i] - want[i]);
                            worst = e > worst || e != e ? e : worst;
                        }
                        /* values are within 4, and a score's float rounding (relative
                         * 2^-24 per product of hd, summed in another order) moves the
                         * probabilities by up to about scale * hd * 2^-22 */
                        const float tol = 2e-5f + 4.0f * scales[d] * (float)hd * 2.4e-7f;
                        CHECKF(worst <= tol, "%s/%s attention nq %" PRId64 " hd %" PRId64
                               " n %" PRId64 " scale %g: off by %g",
                               fam, r->name, nq, hd, n, (double)scales[d], (double)worst);
                        cases++;
                    }
                }
            }
        }
    }
    printf("  %s: %d attention cases\n", fam, cases);
    free(q);
    free(kf);
    free(vf);
    free(k);
    free(v);
    free(s);
    free(tmp);
    free(out);
    free(want);
}

/* The family's SwiGLU gate (F32's silu_mul, where it has one) against silu in
 * double: gates across the range where e^-g overflows or vanishes, lengths
 * around the vector width; and the same bits for an element whether it is
 * computed in the whole array or in a piece that starts elsewhere (threads
 * split a batch's rows at any element). */
static void check_silu(quant_isa isa, const char *fam) {
    const quant_traits *t = quant_traits_isa(GGUF_TYPE_F32, isa);
    if (t->silu_mul == NULL) {
        printf("  %s: no SwiGLU kernel (libm's expf)\n", fam);
        return;
    }
    enum { N = 1000 };
    static float g[N], u[N], whole[N], piece[N];
    for (int i = 0; i < N; i++) {
        /* mostly within +-8, every 50th far out (-120 .. 120) */
        g[i] = i % 50 == 7 ? 240.0f * (rng_unit() - 0.5f) : 16.0f * (rng_unit() - 0.5f);
        u[i] = 4.0f * (rng_unit() - 0.5f);
    }
    memcpy(whole, g, sizeof whole);
    t->silu_mul(whole, u, N);
    float worst = 0;
    for (int i = 0; i < N; i++) {
        const double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * (double)u[i];
        const double e = fabs((double)whole[i] - want) / (fabs(want) + 1e-30);
        if (fabs(want) > 1e-30) {
            worst = (float)e > worst || e != e ? (float)e : worst;
        } else {
            CHECKF(fabsf(whole[i]) < 1e-30f, "%s SwiGLU of %g: %g, not about 0", fam,
                   (double)g[i], (double)whole[i]);
        }
    }
    CHECKF(worst <= 1e-6f, "%s SwiGLU: relative error %g", fam, (double)worst);
    static const int cuts[] = {1, 3, 7, 16, 17, 333, 999};
    for (size_t c = 0; c < LARES_ARRAY_LEN(cuts); c++) {
        memcpy(piece, g, sizeof piece);
        t->silu_mul(piece, u, cuts[c]);
        t->silu_mul(piece + cuts[c], u + cuts[c], N - cuts[c]);
        CHECKF(memcmp(piece, whole, sizeof piece) == 0,
               "%s SwiGLU: split at %d differs from the whole array", fam, cuts[c]);
    }
    printf("  %s: SwiGLU within %.2g of double\n", fam, (double)worst);
}

static void test_family(quant_isa isa) {
    const char *fam = family_label(isa);
    bufs b;
    size_t elems = N_MAX + 64;
    b.xf = calloc(elems, sizeof(float));
    b.yf = calloc(elems, sizeof(float));
    b.out = calloc(elems, sizeof(float));
    b.out_ref = calloc(elems, sizeof(float));
    /* rows of up to 4 bytes per element, QUANT_TILE_MAX of them with padding */
    size_t bytes = (elems * 4 + 4096) * QUANT_TILE_MAX;
    b.x = calloc(bytes, 1);
    b.y = calloc(bytes, 1);
    b.q = calloc(bytes, 1);
    b.q_ref = calloc(bytes, 1);
    if (!b.xf || !b.yf || !b.out || !b.out_ref || !b.x || !b.y || !b.q || !b.q_ref) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    int tiles = 0;
    for (uint32_t type = 0; type < GGUF_TYPE_COUNT; type++) {
        const quant_traits *r = quant_traits_ref(type);
        const quant_traits *t = quant_traits_isa(type, isa);
        if (r == NULL || t == NULL || r->from_float_ref == NULL) {
            continue;
        }
        if (r->blck_elems > 1024 || r->blck_bytes > 4 * (size_t)r->blck_elems) {
            CHECKF(0, "%s: block too large for this test's buffers", r->name);
            continue;
        }
        check_convert(r, t, fam, &b);
        const quant_traits *ry = quant_traits_ref(r->vec_dot_type);
        if (r->vec_dot == NULL || ry == NULL || ry->from_float_ref == NULL) {
            continue;
        }
        check_dot(r, t, fam, &b);
        check_exact(r, t, fam, &b);
        if (t->vec_dot_tile != NULL) {
            check_tile(r, t, fam, &b);
            tiles++;
        }
    }
    printf("  %s: %d types with tile kernels\n", fam, tiles);
    check_attend(isa, fam);
    check_attend_rows(isa, fam);
    check_silu(isa, fam);
    free(b.xf);
    free(b.yf);
    free(b.out);
    free(b.out_ref);
    free(b.x);
    free(b.y);
    free(b.q);
    free(b.q_ref);
}

int main(int argc, char **argv) {
    quant_isa isas[LARES_ARRAY_LEN(families)];
    size_t n_isas = 0;
    const char *only = NULL;
    if (argc == 3 && strcmp(argv[1], "--isa") == 0) {
        only = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--isa scalar|avx2|avxvnni|avx512|neon|neon-nodot|neon-i8mm]\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < LARES_ARRAY_LEN(families); i++) {
        bool here = quant_traits_isa(GGUF_TYPE_F32, families[i].isa) != NULL;
        if (only != NULL && strcmp(only, families[i].name) != 0) {
            continue;
        }
        if (!here) {
            if (only != NULL) {
                fprintf(stderr, "test_quant: --isa %s: not available on this CPU or build\n", only);
                return 1;
            }
            continue;
        }
        isas[n_isas++] = families[i].isa;
        printf("family %s (%s)\n", families[i].name, quant_isa_family_name(families[i].isa));
    }
    if (n_isas == 0) {
        fprintf(stderr, "test_quant: unknown family '%s'\n", only);
        return 2;
    }

    test_random_spread();
    test_geometry(isas, n_isas);
    test_vectors(isas, n_isas);
    test_dispatch();
    for (size_t k = 0; k < n_isas; k++) {
        test_family(isas[k]);
    }
    return check_finish("test_quant");
}
