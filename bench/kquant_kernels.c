/*
 * Micro benchmark of the K-quant and i-quant kernels (not a test: it times).
 *
 *   kquant_kernels [-t threads] [-r repeats] [-m rows] [-i scalar|avx2|neon|kq] [types...]
 *
 * For each weight type and matrix shape (rows x row length: 2048 x 2048 and
 * 5632 x 2048, the attention and FFN shapes of a 1.1B Llama; -m adds rows x 2048,
 * e.g. -m 65536 for a matrix larger than the last-level cache), reports
 *   1 activation row  (generation: vec_dot over every weight row), and
 *   128 activation rows (prompt processing: vec_dot_tile in 4x4 tiles, or
 *   vec_dot per pair where the type has no tile kernel)
 * as GFLOP/s (2 * rows * length * activation rows per second) and GB/s of
 * weight bytes streamed. Rows are split over the threads as ops does.
 * Weights are random bytes with finite scales: speed does not depend on them.
 */
#include "quant/kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct job {
    const quant_traits *t;
    const uint8_t *w;
    size_t wrow;
    const uint8_t *y;
    size_t yrow;
    int64_t k;  /* row length */
    int64_t m;  /* weight rows */
    int ncols;  /* activation rows */
    float *out; /* ncols x m */
    int ith, nth;
    int repeats;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    /* rows [lo, hi) of this thread, a multiple of the tile height */
    const int64_t per = (j->m / 4 + j->nth - 1) / j->nth * 4;
    const int64_t lo = LARES_MIN(j->m, per * j->ith), hi = LARES_MIN(j->m, lo + per);
    for (int rep = 0; rep < j->repeats; rep++) {
        if (j->ncols == 1) {
            for (int64_t r = lo; r < hi; r++) {
                j->t->vec_dot(j->k, &j->out[r], j->w + (size_t)r * j->wrow, j->y);
            }
            continue;
        }
        for (int64_t r = lo; r < hi; r += 4) {
            const int nr = (int)LARES_MIN(4, hi - r);
            for (int c = 0; c < j->ncols; c += 4) {
                const int nc = LARES_MIN(4, j->ncols - c);
                if (j->t->vec_dot_tile != NULL) {
                    j->t->vec_dot_tile(j->k, &j->out[(size_t)c * j->m + r], (size_t)j->m,
                                       j->w + (size_t)r * j->wrow, j->wrow,
                                       j->y + (size_t)c * j->yrow, j->yrow, nr, nc);
                } else {
                    for (int cc = c; cc < c + nc; cc++) {
                        for (int64_t rr = r; rr < r + nr; rr++) {
                            j->t->vec_dot(j->k, &j->out[(size_t)cc * j->m + rr],
                                          j->w + (size_t)rr * j->wrow, j->y + (size_t)cc * j->yrow);
                        }
                    }
                }
            }
        }
    }
    return NULL;
}

static double run(job *proto, int nth) {
    pthread_t th[64];
    job jobs[64];
    const uint64_t t0 = lares_now_ns();
    for (int i = 0; i < nth; i++) {
        jobs[i] = *proto;
        jobs[i].ith = i;
        jobs[i].nth = nth;
        if (i > 0) {
            pthread_create(&th[i], NULL, run_job, &jobs[i]);
        }
    }
    run_job(&jobs[0]);
    for (int i = 1; i < nth; i++) {
        pthread_join(th[i], NULL);
    }
    return (double)(lares_now_ns() - t0) / 1e9;
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint8_t rnd8(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)(rng >> 32);
}

/* -i kq: this work's installer on a copy of the reference table, whatever
 * dispatch.c chains (until quant_install_*_kquants is called from there) */
static quant_traits kq_table[GGUF_TYPE_COUNT];
static bool use_kq;

static const quant_traits *traits(uint32_t type, quant_isa isa) {
    if (!use_kq) {
        return quant_traits_isa(type, isa);
    }
    return type < GGUF_TYPE_COUNT && kq_table[type].name ? &kq_table[type] : NULL;
}

int main(int argc, char **argv) {
    int nth = 1, repeats = 0;
    int64_t big_rows = 0;
    quant_isa isa = QUANT_ISA_AUTO;
    const char *types[16];
    int ntypes = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            nth = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) {
            big_rows = atoll(argv[++i]) / 4 * 4;
        } else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
            repeats = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-i") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            use_kq = strcmp(v, "kq") == 0;
            isa = strcmp(v, "scalar") == 0 ? QUANT_ISA_SCALAR
                  : strcmp(v, "avx2") == 0 ? QUANT_ISA_AVX2
                  : strcmp(v, "neon") == 0 ? QUANT_ISA_NEON
                                           : QUANT_ISA_AUTO;
        } else if (ntypes < 16) {
            types[ntypes++] = argv[i];
        }
    }
    memcpy(kq_table, quant_ref_table, sizeof kq_table);
#if defined(LARES_HAVE_X86)
    if (use_kq && quant_cpu_features()->avx2) {
        quant_install_avx2_kquants(kq_table);
    }
#elif defined(LARES_HAVE_ARM64)
    if (use_kq) {
        quant_install_neon_kquants(kq_table, quant_cpu_features()->dotprod);
    }
#endif
    if (nth < 1 || nth > 64) {
        nth = 1;
    }
    if (ntypes == 0) {
        static const char *def[] = {"q4_K", "q5_K", "q6_K", "q2_K", "q3_K", "iq4_xs", "iq4_nl"};
        for (size_t i = 0; i < LARES_ARRAY_LEN(def); i++) {
            types[ntypes++] = def[i];
        }
    }
    const int64_t k = 2048;
    int64_t shapes[3] = {2048, 5632, 0};
    int nshapes = 2;
    if (big_rows > 0) { /* a third shape, e.g. larger than the last-level cache */
        shapes[nshapes++] = big_rows;
    }
    printf("kernels: %s, %d thread(s)\n",
           use_kq                  ? "kquant installer"
           : isa == QUANT_ISA_AUTO ? quant_isa_name()
                                   : quant_isa_family_name(isa),
           nth);
    printf("%-7s %-11s %10s %9s %9s | %10s %9s %9s\n", "type", "rows x len", "1 row ms", "GFLOP/s",
           "GB/s", "128 rows ms", "GFLOP/s", "GB/s");
    for (int ti = 0; ti < ntypes; ti++) {
        const int tid = gguf_type_from_name(types[ti]);
        const quant_traits *t = tid < 0 ? NULL : traits((uint32_t)tid, isa);
        if (t == NULL || t->vec_dot == NULL) {
            fprintf(stderr, "kquant_kernels: no kernels for type '%s'\n", types[ti]);
            return 1;
        }
        const quant_traits *yt = traits(t->vec_dot_type, isa);
        for (int si = 0; si < nshapes; si++) {
            const int64_t m = shapes[si];
            const size_t wrow = quant_row_bytes(t->type, k), yrow = quant_row_bytes(yt->type, k);
            uint8_t *w = malloc(wrow * (size_t)m);
            uint8_t *y = malloc(yrow * 128);
            float *yf = malloc(sizeof(float) * (size_t)k * 128);
            float *out = malloc(sizeof(float) * (size_t)m * 128);
            for (size_t i = 0; i < wrow * (size_t)m; i++) {
                w[i] = rnd8();
            }
            /* finite fp16 scales: patch every 16-bit word that is inf/NaN */
            for (size_t i = 0; i + 1 < wrow * (size_t)m; i += 2) {
                if ((w[i + 1] & 0x7c) == 0x7c) {
                    w[i + 1] &= 0x3f;
                }
            }
            for (int64_t i = 0; i < k * 128; i++) {
                yf[i] = (float)((int)rnd8() - 128) / 64.0f;
            }
            for (int c = 0; c < 128; c++) {
                yt->from_float(yf + (size_t)c * (size_t)k, y + (size_t)c * yrow, k);
            }
            job j = {
                .t = t, .w = w, .wrow = wrow, .y = y, .yrow = yrow, .k = k, .m = m, .out = out};
            /* generation: one activation row */
            j.ncols = 1;
            j.repeats = repeats > 0 ? repeats : 200;
            run(&j, nth); /* warm */
            double s1 = run(&j, nth) / j.repeats;
            /* prompt: 128 activation rows */
            j.ncols = 128;
            j.repeats = repeats > 0 ? LARES_MAX(1, repeats / 50) : 3;
            run(&j, nth);
            double s128 = run(&j, nth) / j.repeats;
            const double flop = 2.0 * (double)m * (double)k, bytes = (double)wrow * (double)m;
            char shape[32];
            snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64, m, k);
            printf("%-7s %-11s %10.3f %9.1f %9.1f | %10.2f %9.1f %9.1f\n", t->name, shape, s1 * 1e3,
                   flop / s1 / 1e9, bytes / s1 / 1e9, s128 * 1e3, flop * 128 / s128 / 1e9,
                   bytes / s128 / 1e9);
            free(w);
            free(y);
            free(yf);
            free(out);
        }
    }
    return 0;
}
