/*
 * bench_attend: attention of one group of query heads over a KV cache on one
 * thread, per kernel family and cache type (quant_traits.kv_attend), against
 * the reference kernel: the decode step's attention at a given depth.
 *
 *   bench_attend [-n 1024] [--heads 4] [--hd 64] [--kv-heads 8] [--reps 20]
 *
 * Times are thread CPU time (CLOCK_THREAD_CPUTIME_ID), best of the reps. One
 * JSON object per (family, type) on stdout, the CPU flags first.
 */
#include "core/core.h"
#include "quant/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long arg_long(const char *name, const char *v) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (v == NULL || *end != '\0' || x <= 0 || x > (1L << 24)) {
        fprintf(stderr, "bench_attend: %s wants a positive integer\n", name);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    long n = 1024, nq = 4, hd = 64, n_kv = 8, reps = 20;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "-n") == 0) {
            n = arg_long("-n", v);
        } else if (strcmp(argv[i], "--heads") == 0) {
            nq = arg_long("--heads", v);
        } else if (strcmp(argv[i], "--hd") == 0) {
            hd = arg_long("--hd", v);
        } else if (strcmp(argv[i], "--kv-heads") == 0) {
            n_kv = arg_long("--kv-heads", v);
        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = arg_long("--reps", v);
        } else {
            fprintf(stderr, "usage: bench_attend [-n 1024] [--heads 4] [--hd 64] [--kv-heads 8] "
                            "[--reps 20]\n");
            return 2;
        }
        i++;
    }
    const int64_t row_elems = n_kv * hd;
    float *q = malloc(sizeof(float) * (size_t)(nq * hd));
    float *vals = malloc(sizeof(float) * (size_t)(n * row_elems));
    uint8_t *k = malloc(4 * (size_t)(n * row_elems));
    uint8_t *v = malloc(4 * (size_t)(n * row_elems));
    float *s = malloc(sizeof(float) * (size_t)(nq * n));
    float *tmp = malloc(sizeof(float) * (size_t)hd);
    float *out = malloc(sizeof(float) * (size_t)(nq * hd));
    if (!q || !vals || !k || !v || !s || !tmp || !out) {
        fprintf(stderr, "bench_attend: out of memory\n");
        return 1;
    }
    uint32_t x = 12345;
    for (int64_t i = 0; i < n * row_elems; i++) {
        x = x * 1664525u + 1013904223u;
        vals[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
    }
    for (int64_t i = 0; i < nq * hd; i++) {
        q[i] = vals[i];
    }
    printf("{\"cpu_flags\": \"%s\", \"n\": %ld, \"heads\": %ld, \"hd\": %ld, \"kv_heads\": %ld}\n",
           quant_cpu_flags(), n, nq, hd, n_kv);
    static const quant_isa fams[] = {QUANT_ISA_SCALAR, QUANT_ISA_AVX2, QUANT_ISA_AVXVNNI,
                                     QUANT_ISA_AVX512, QUANT_ISA_NEON};
    const uint32_t types[] = {GGUF_TYPE_F32, GGUF_TYPE_F16};
    for (size_t ti = 0; ti < 2; ti++) {
        const quant_traits *r = quant_traits_ref(types[ti]);
        r->from_float_ref(vals, k, n * row_elems);
        r->from_float_ref(vals, v, n * row_elems);
        for (size_t f = 0; f < LARES_ARRAY_LEN(fams); f++) {
            const quant_traits *t = quant_traits_isa(types[ti], fams[f]);
            if (t == NULL) {
                continue;
            }
            double best = 1e30;
            for (long rep = 0; rep < reps; rep++) {
                const double t0 = cpu_now();
                /* every KV head of a layer, as a decode step does */
                for (long g = 0; g < n_kv; g++) {
                    t->kv_attend(q, nq, hd, k + (size_t)(g * hd) * r->blck_bytes,
                                 v + (size_t)(g * hd) * r->blck_bytes,
                                 (size_t)row_elems * r->blck_bytes, n, 0.125f, s, tmp, out);
                }
                const double dt = cpu_now() - t0;
                best = dt < best ? dt : best;
            }
            printf("{\"family\": \"%s\", \"kv_type\": \"%s\", \"us_per_layer\": %.1f, "
                   "\"ns_per_key_head\": %.3f}\n",
                   quant_isa_family_name(fams[f]), r->name, best * 1e6,
                   best * 1e9 / ((double)n * (double)nq * (double)n_kv));
        }
    }
    return 0;
}
