/*
 * bench_kernels: speed of the quant kernels of one family (not a test).
 *
 *   matrix-matrix (prompt processing): W (m x k, the weight type) times A
 *   (n x k activations in the type's vec_dot_type) through vec_dot_tile in
 *   4 x 4 tiles, threads splitting the rows of W; GFLOP/s counts 2*m*n*k.
 *   matrix-vector (generation): one activation row against weight rows that
 *   together exceed the last-level cache, so the bytes come from memory;
 *   GB/s counts weight bytes read.
 *
 * Usage: bench_kernels [--isa NAME] [--threads N] [--type NAME]... [--m M] [--k K]
 *                      [--n N] [--gemv-mib MIB] [--gemv-tile] [--reps R]
 * --gemv-tile runs matrix-vector products as 4 x 1 tiles instead of single
 * dots; --gemv-mib 0 skips them, --n 0 skips matrix-matrix.
 * Defaults: every legacy type, the llama-1b shapes 2048x2048 and 5632x2048 with
 * n = 128, 2 threads, the dispatched family, 256 MiB of weights for mat-vec.
 * Each figure is the best of R repetitions (machines here are noisy); the
 * figure from the longest thread's CPU time is printed beside the wall-clock
 * one, since other programs on a shared machine disturb it less.
 */
#include "quant/quant.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- data ---- */

static uint64_t rng = 88172645463325252u;

static float rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

/* rows x k values of `type` from random floats, quantized row by row */
static uint8_t *make_rows(const quant_traits *t, int64_t rows, int64_t k) {
    size_t rb = quant_row_bytes(t->type, k);
    uint8_t *p = malloc(rb * (size_t)rows);
    float *tmp = malloc((size_t)k * sizeof(float));
    if (p == NULL || tmp == NULL) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i++) {
            tmp[i] = rnd();
        }
        t->from_float_ref(tmp, p + (size_t)r * rb, k);
    }
    free(tmp);
    return p;
}

/* ---- threads: each job splits [0, rows) in equal multiples of 4 ---- */

typedef struct job {
    const quant_traits *t;
    const uint8_t *w, *a;
    size_t wb; /* weight row bytes */
    float *out;
    int64_t m, n, k;
    int ith, nth;
    bool gemv;
    bool gemv_tile;
    uint64_t cpu_ns; /* out: this thread's CPU time */
} job;

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void run_rows(const job *j);

static void *run_job(void *arg) {
    job *j = arg;
    uint64_t t0 = thread_cpu_ns();
    run_rows(j);
    j->cpu_ns = thread_cpu_ns() - t0;
    return NULL;
}

static void run_rows(const job *j) {
    const size_t wb = j->wb;
    const size_t ab = j->t ? quant_row_bytes(j->t->vec_dot_type, j->k) : 0;
    int64_t per = (j->m / 4 + j->nth - 1) / j->nth * 4;
    int64_t r0 = per * j->ith, r1 = LARES_MIN(j->m, r0 + per);
    if (j->gemv && j->t == NULL) { /* the baseline: read the same bytes, add them up */
        typedef uint64_t v2u64 __attribute__((vector_size(16)));
        const uint8_t *p = j->w + (size_t)r0 * wb;
        size_t bytes = (size_t)(r1 - r0) * wb;
        v2u64 acc[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
        for (size_t i = 0; i + 64 <= bytes; i += 64) {
            for (int u = 0; u < 4; u++) {
                v2u64 v;
                memcpy(&v, p + i + 16 * u, sizeof v);
                acc[u] += v;
            }
        }
        v2u64 t = acc[0] ^ acc[1] ^ acc[2] ^ acc[3];
        j->out[r0] = (float)(t[0] ^ t[1]);
        return;
    }
    if (j->gemv && j->gemv_tile) { /* 4 x 1 tiles instead of single dots */
        for (int64_t r = r0; r < r1; r += 4) {
            j->t->vec_dot_tile(j->k, j->out + r, 1, j->w + (size_t)r * wb, wb, j->a, ab,
                               (int)LARES_MIN(4, r1 - r), 1);
        }
        return;
    }
    if (j->gemv) {
        for (int64_t r = r0; r < r1; r++) {
            j->t->vec_dot(j->k, j->out + r, j->w + (size_t)r * wb, j->a);
        }
        return;
    }
    /* 16 weight rows stay in L1/L2 while every activation row passes */
    for (int64_t rc = r0; rc < r1; rc += 16) {
        int64_t rc1 = LARES_MIN(rc + 16, r1);
        for (int64_t c = 0; c < j->n; c += 4) {
            int nc = (int)LARES_MIN(4, j->n - c);
            for (int64_t r = rc; r < rc1; r += 4) {
                int nr = (int)LARES_MIN(4, rc1 - r);
                j->t->vec_dot_tile(j->k, j->out + c * j->m + r, (size_t)j->m, j->w + (size_t)r * wb,
                                   wb, j->a + (size_t)c * ab, ab, nr, nc);
            }
        }
    }
}

/* Wall time of one parallel run in ns; *cpu gets the longest thread's CPU
 * time, the figure that other programs on a shared machine disturb least. */
static uint64_t run_parallel(job proto, int nth, uint64_t *cpu) {
    pthread_t th[64];
    job jobs[64];
    uint64_t t0 = lares_now_ns();
    for (int i = 0; i < nth; i++) {
        jobs[i] = proto;
        jobs[i].ith = i;
        jobs[i].nth = nth;
        if (i > 0 && pthread_create(&th[i], NULL, run_job, &jobs[i]) != 0) {
            fprintf(stderr, "bench_kernels: pthread_create failed\n");
            exit(1);
        }
    }
    run_job(&jobs[0]);
    for (int i = 1; i < nth; i++) {
        pthread_join(th[i], NULL);
    }
    uint64_t wall = lares_now_ns() - t0;
    *cpu = 0;
    for (int i = 0; i < nth; i++) {
        *cpu = LARES_MAX(*cpu, jobs[i].cpu_ns);
    }
    return wall;
}

static void bench_gemm(const quant_traits *t, int64_t m, int64_t k, int64_t n, int nth, int reps) {
    const quant_traits *ta = quant_traits_ref(t->vec_dot_type);
    uint8_t *w = make_rows(t, m, k);
    uint8_t *a = make_rows(ta, n, k);
    float *out = malloc((size_t)(m * n) * sizeof(float));
    job j = {.t = t,
             .w = w,
             .a = a,
             .out = out,
             .m = m,
             .n = n,
             .k = k,
             .wb = quant_row_bytes(t->type, k)};
    uint64_t best = UINT64_MAX, best_cpu = UINT64_MAX;
    for (int r = 0; r < reps; r++) {
        uint64_t cpu, ns = run_parallel(j, nth, &cpu);
        best = LARES_MIN(best, ns);
        best_cpu = LARES_MIN(best_cpu, cpu);
    }
    double flop = 2.0 * (double)m * (double)n * (double)k;
    double wbytes = (double)quant_row_bytes(t->type, k) * (double)m;
    printf("%-5s gemm %6" PRId64 " x %5" PRId64 " x n %4" PRId64 "  %8.3f ms  %6.1f GFLOP/s  "
           "%5.1f GB/s  (cpu time: %6.1f GFLOP/s)\n",
           t->name, m, k, n, (double)best / 1e6, flop / (double)best, wbytes / (double)best,
           flop / (double)best_cpu);
    free(w);
    free(a);
    free(out);
}

static void bench_gemv(const quant_traits *t, int64_t k, double mib, int nth, int reps, bool tile) {
    const quant_traits *ta = quant_traits_ref(t->vec_dot_type);
    size_t wb = quant_row_bytes(t->type, k);
    int64_t m = LARES_MAX(4, (int64_t)(mib * 1024 * 1024 / (double)wb) / 4 * 4);
    uint8_t *w = make_rows(t, m, k);
    uint8_t *a = make_rows(ta, 1, k);
    float *out = malloc((size_t)m * sizeof(float));
    job j = {.t = t,
             .w = w,
             .a = a,
             .out = out,
             .m = m,
             .n = 1,
             .k = k,
             .gemv = true,
             .gemv_tile = tile && t->vec_dot_tile != NULL,
             .wb = wb};
    /* the same bytes read by a plain loop, in turns with the kernel, so that
     * both see the same machine */
    job base = j;
    base.t = NULL;
    uint64_t best = UINT64_MAX, best_cpu = UINT64_MAX, best_base = UINT64_MAX;
    for (int r = 0; r < reps; r++) {
        uint64_t cpu, ns = run_parallel(j, nth, &cpu);
        best = LARES_MIN(best, ns);
        best_cpu = LARES_MIN(best_cpu, cpu);
        best_base = LARES_MIN(best_base, run_parallel(base, nth, &cpu));
    }
    double bytes = (double)wb * (double)m;
    printf("%-5s %s %6" PRId64 " x %5" PRId64 "           %8.3f ms  %6.1f GFLOP/s  "
           "%5.1f GB/s  (cpu time: %5.1f GB/s; plain read of the rows: %5.1f GB/s)\n",
           t->name, j.gemv_tile ? "gemv4" : "gemv ", m, k, (double)best / 1e6,
           2.0 * (double)m * (double)k / (double)best, bytes / (double)best,
           bytes / (double)best_cpu, bytes / (double)best_base);
    free(w);
    free(a);
    free(out);
}

static quant_isa parse_isa(const char *s) {
    static const struct {
        const char *name;
        quant_isa isa;
    } names[] = {{"scalar", QUANT_ISA_SCALAR},
                 {"avx2", QUANT_ISA_AVX2},
                 {"neon", QUANT_ISA_NEON},
                 {"neon-nodot", QUANT_ISA_NEON_NODOT},
                 {"neon-i8mm", QUANT_ISA_NEON_I8MM}};
    for (size_t i = 0; i < LARES_ARRAY_LEN(names); i++) {
        if (strcmp(s, names[i].name) == 0) {
            return names[i].isa;
        }
    }
    fprintf(stderr, "bench_kernels: unknown family '%s'\n", s);
    exit(2);
}

int main(int argc, char **argv) {
    quant_isa isa = QUANT_ISA_AUTO;
    int nth = 2, reps = 5, n_types = 0;
    int64_t m = 0, k = 2048, n = 128;
    double gemv_mib = 256;
    uint32_t types[16];
    bool gemv_tile = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--gemv-tile") == 0) {
            gemv_tile = true;
            continue;
        }
        if (val == NULL) {
            fprintf(stderr, "bench_kernels: %s needs a value\n", arg);
            return 2;
        }
        i++;
        if (strcmp(arg, "--isa") == 0) {
            isa = parse_isa(val);
        } else if (strcmp(arg, "--threads") == 0) {
            nth = LARES_MAX(1, LARES_MIN(64, atoi(val)));
        } else if (strcmp(arg, "--type") == 0 && n_types < 16) {
            int tt = gguf_type_from_name(val);
            if (tt < 0) {
                fprintf(stderr, "bench_kernels: unknown type '%s'\n", val);
                return 2;
            }
            types[n_types++] = (uint32_t)tt;
        } else if (strcmp(arg, "--m") == 0) {
            m = atoll(val);
        } else if (strcmp(arg, "--k") == 0) {
            k = atoll(val);
        } else if (strcmp(arg, "--n") == 0) {
            n = atoll(val);
        } else if (strcmp(arg, "--gemv-mib") == 0) {
            gemv_mib = atof(val);
        } else if (strcmp(arg, "--reps") == 0) {
            reps = LARES_MAX(1, atoi(val));
        } else {
            fprintf(stderr, "bench_kernels: unknown option %s\n", arg);
            return 2;
        }
    }
    if (n_types == 0) {
        const uint32_t legacy[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_1, GGUF_TYPE_Q5_0, GGUF_TYPE_Q5_1,
                                   GGUF_TYPE_Q8_0};
        memcpy(types, legacy, sizeof legacy);
        n_types = 5;
    }
    printf("family %s, %d threads, best of %d\n", quant_isa_family_name(isa), nth, reps);
    for (int i = 0; i < n_types; i++) {
        const quant_traits *t = quant_traits_isa(types[i], isa);
        if (t == NULL || t->vec_dot == NULL) {
            fprintf(stderr, "bench_kernels: no kernels for type %u in this family\n", types[i]);
            return 1;
        }
        if (t->vec_dot_tile != NULL && n > 0) {
            if (m > 0) {
                bench_gemm(t, m, k, n, nth, reps);
            } else {
                bench_gemm(t, 2048, 2048, n, nth, reps);
                bench_gemm(t, 5632, 2048, n, nth, reps);
            }
        }
        if (gemv_mib > 0) {
            bench_gemv(t, k, gemv_mib, nth, reps, gemv_tile);
        }
    }
    return 0;
}
