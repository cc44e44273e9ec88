/*
 * bench_gemm: the prompt-processing product of one weight matrix on one
 * thread, per kernel family: the packed-activation GEMM (quant.h) against the
 * row-tile path it replaces, the few-row product where c <= QUANT_ROWS_MAX
 * (quant.h: quant_rows_fmt), and the machine's int8 multiply-accumulate peak
 * measured with a loop of independent VPDPBUSD (or the AVX2 VPMADDUBSW pair)
 * so the GEMM's figure can be read as a fraction of it.
 *
 *   bench_gemm [--type q4_0] [-k 2048] [-n 2048] [-c 128] [--reps 5]
 *
 * Times are thread CPU time (CLOCK_THREAD_CPUTIME_ID), best of the reps, so
 * a loaded machine inflates them less than wall time would. One JSON object
 * per family on stdout; the CPU flags first.
 */
#include "core/core.h"
#include "quant/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(LARES_HAVE_X86)
#include <immintrin.h>
#endif

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(LARES_HAVE_X86)
/* int8 multiply-accumulates per second of one thread, in inline assembly:
 * written as C (an array of accumulators) GCC kept the chains in memory and
 * hoisted the AVX2 pair's products out of the loop, so until 2026-11-29 the
 * figure was a store-bound or add-bound loop's (half the VPDPBUSD rate of an
 * Intel Xeon family 6 model 207, whose two 512-bit ports both run it). Twelve
 * independent chains cover a latency of 6 cycles on two ports, each its own
 * variable (an array's elements were stored back after every statement). */
#define PEAK_ITERS 20000000L
#define PEAK_CHAINS 12

#define DP12(op)                                                                                   \
    op " %[a], %[b], %[x0]\n\t" op " %[a], %[b], %[x1]\n\t" op " %[a], %[b], %[x2]\n\t" op         \
       " %[a], %[b], %[x3]\n\t" op " %[a], %[b], %[x4]\n\t" op " %[a], %[b], %[x5]\n\t" op         \
       " %[a], %[b], %[x6]\n\t" op " %[a], %[b], %[x7]\n\t" op " %[a], %[b], %[x8]\n\t" op         \
       " %[a], %[b], %[x9]\n\t" op " %[a], %[b], %[x10]\n\t" op " %[a], %[b], %[x11]\n\t"
#define ACC12(c)                                                                                   \
    [x0] "+" c(x0), [x1] "+" c(x1), [x2] "+" c(x2), [x3] "+" c(x3), [x4] "+" c(x4),                \
        [x5] "+" c(x5), [x6] "+" c(x6), [x7] "+" c(x7), [x8] "+" c(x8), [x9] "+" c(x9),            \
        [x10] "+" c(x10), [x11] "+" c(x11)

/* the twelve accumulators, each a variable of its own, starting at 0..11 */
#define PEAK_ACCS(type, set1)                                                                      \
    type x0 = set1(0), x1 = set1(1), x2 = set1(2), x3 = set1(3), x4 = set1(4), x5 = set1(5),       \
         x6 = set1(6), x7 = set1(7), x8 = set1(8), x9 = set1(9), x10 = set1(10), x11 = set1(11)
#define PEAK_ACC_LIST {x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11}

/* the sum of the chains' lanes, so that the loop is not dead */
static void peak_sink(const void *sums, size_t bytes) {
    int64_t s = 0;
    for (size_t i = 0; i < bytes / sizeof(int32_t); i++) {
        int32_t v;
        memcpy(&v, (const uint8_t *)sums + i * sizeof(int32_t), sizeof(v));
        s += v;
    }
    if (s == 42) {
        fprintf(stderr, "?\n");
    }
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_avx512(void) {
    PEAK_ACCS(__m512i, _mm512_set1_epi32);
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    const double t0 = cpu_now();
    for (long it = 0; it < PEAK_ITERS / PEAK_CHAINS; it++) {
        __asm__ volatile(DP12("vpdpbusd") : ACC12("v") : [a] "v"(a), [b] "v"(b));
    }
    const double t = cpu_now() - t0;
    const __m512i x[PEAK_CHAINS] = PEAK_ACC_LIST;
    peak_sink(x, sizeof(x));
    return (double)(PEAK_ITERS / PEAK_CHAINS) * PEAK_CHAINS * 64 / t;
}

__attribute__((target("avx2,avxvnni"))) static double peak_avxvnni(void) {
    PEAK_ACCS(__m256i, _mm256_set1_epi32);
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
    const double t0 = cpu_now();
    for (long it = 0; it < PEAK_ITERS / PEAK_CHAINS; it++) {
        __asm__ volatile(DP12("%{vex%} vpdpbusd") : ACC12("x") : [a] "x"(a), [b] "x"(b));
    }
    const double t = cpu_now() - t0;
    const __m256i x[PEAK_CHAINS] = PEAK_ACC_LIST;
    peak_sink(x, sizeof(x));
    return (double)(PEAK_ITERS / PEAK_CHAINS) * PEAK_CHAINS * 32 / t;
}

/* AVX2 alone: VPMADDUBSW then VPMADDWD by ones then VPADDD, six chains (16
 * registers: six sums, six products, three operands) */
__attribute__((target("avx2"))) static double peak_avx2(void) {
    __m256i x0 = _mm256_set1_epi32(0), x1 = _mm256_set1_epi32(1), x2 = _mm256_set1_epi32(2);
    __m256i x3 = _mm256_set1_epi32(3), x4 = _mm256_set1_epi32(4), x5 = _mm256_set1_epi32(5);
    __m256i p0, p1, p2, p3, p4, p5;
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
#define PAIR(i)                                                                                    \
    "vpmaddubsw %[a], %[b], %[p" #i "]\n\tvpmaddwd %[one], %[p" #i "], %[p" #i "]\n\t"             \
    "vpaddd %[p" #i "], %[x" #i "], %[x" #i "]\n\t"
    const double t0 = cpu_now();
    for (long it = 0; it < PEAK_ITERS / 6; it++) {
        __asm__ volatile(PAIR(0) PAIR(1) PAIR(2) PAIR(3) PAIR(4) PAIR(5)
                         : [x0] "+x"(x0), [x1] "+x"(x1), [x2] "+x"(x2), [x3] "+x"(x3),
                           [x4] "+x"(x4), [x5] "+x"(x5), [p0] "=&x"(p0), [p1] "=&x"(p1),
                           [p2] "=&x"(p2), [p3] "=&x"(p3), [p4] "=&x"(p4), [p5] "=&x"(p5)
                         : [a] "x"(a), [b] "x"(b), [one] "x"(one));
    }
#undef PAIR
    const double t = cpu_now() - t0;
    const __m256i x[6] = {x0, x1, x2, x3, x4, x5};
    peak_sink(x, sizeof(x));
    return (double)(PEAK_ITERS / 6) * 6 * 32 / t;
}
#endif

int main(int argc, char **argv) {
    const char *type_name = "q4_0";
    int64_t k = 2048, n = 2048, c = 128;
    int reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--type") == 0) {
            type_name = argv[i + 1];
        } else if (strcmp(argv[i], "-k") == 0) {
            k = atoll(argv[i + 1]);
        } else if (strcmp(argv[i], "-n") == 0) {
            n = atoll(argv[i + 1]);
        } else if (strcmp(argv[i], "-c") == 0) {
            c = atoll(argv[i + 1]);
        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);
        } else {
            fprintf(stderr, "usage: %s [--type q4_0] [-k 2048] [-n 2048] [-c 128] [--reps 5]\n",
                    argv[0]);
            return 2;
        }
    }
    uint32_t type = GGUF_TYPE_COUNT;
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
        const quant_traits *q = quant_traits_ref(t);
        if (q != NULL && strcmp(q->name, type_name) == 0) {
            type = t;
        }
    }
    const quant_traits *ref = type < GGUF_TYPE_COUNT ? quant_traits_ref(type) : NULL;
    if (ref == NULL || ref->vec_dot == NULL || k % 256 != 0 || n < 1 || c < 1 || reps < 1) {
        fprintf(stderr, "bench_gemm: unknown type '%s' or bad sizes (k a multiple of 256)\n",
                type_name);
        return 2;
    }
    printf("{\"cpu_flags\": \"%s\", \"type\": \"%s\", \"k\": %lld, \"n\": %lld, \"c\": %lld}\n",
           quant_cpu_flags(), type_name, (long long)k, (long long)n, (long long)c);
    const size_t rb = quant_row_bytes(type, k);
    uint8_t *w = malloc(rb * (size_t)n);
    float *x = malloc(sizeof(float) * (size_t)(k * c));
    float *y = malloc(sizeof(float) * (size_t)(n * c));
    float *row = malloc(sizeof(float) * (size_t)k);
    uint64_t s = 88172645463325252ull;
    for (int64_t r = 0; r < n; r++) {
        for (int64_t i = 0; i < k; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            row[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
        }
        ref->from_float_ref(row, w + (size_t)r * rb, k);
    }
    for (int64_t i = 0; i < k * c; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    const struct {
        const char *name;
        quant_isa isa;
    } fams[] = {{"avx2", QUANT_ISA_AVX2},
                {"avxvnni", QUANT_ISA_AVXVNNI},
                {"avx512vnni", QUANT_ISA_AVX512},
                {"neon", QUANT_ISA_NEON},
                {"neon-i8mm", QUANT_ISA_NEON_I8MM}};
    const double macs = (double)k * (double)n * (double)c;
    for (size_t f = 0; f < LARES_ARRAY_LEN(fams); f++) {
        const quant_traits *t = quant_traits_isa(type, fams[f].isa);
        if (t == NULL) {
            continue;
        }
        double peak = 0;
#if defined(LARES_HAVE_X86)
        peak = fams[f].isa == QUANT_ISA_AVX512    ? peak_avx512()
               : fams[f].isa == QUANT_ISA_AVXVNNI ? peak_avxvnni()
                                                  : peak_avx2();
#endif
        /* the row-tile path: activations in the type's own format, 4x4 tiles */
        const quant_traits *at = quant_traits_isa(t->vec_dot_type, fams[f].isa);
        const size_t arb = quant_row_bytes(t->vec_dot_type, k);
        uint8_t *aq = lares_alloc_aligned(arb * (size_t)c + 64, 64);
        double best_tile = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = cpu_now();
            for (int64_t j = 0; j < c; j++) {
                at->from_float(x + j * k, aq + (size_t)j * arb, k);
            }
            for (int64_t r0 = 0; r0 < n; r0 += QUANT_TILE_MAX) {
                for (int64_t c0 = 0; c0 < c; c0 += QUANT_TILE_MAX) {
                    const int nr = (int)(n - r0 < QUANT_TILE_MAX ? n - r0 : QUANT_TILE_MAX);
                    const int nc = (int)(c - c0 < QUANT_TILE_MAX ? c - c0 : QUANT_TILE_MAX);
                    if (t->vec_dot_tile != NULL) {
                        t->vec_dot_tile(k, y + c0 * n + r0, (size_t)n, w + (size_t)r0 * rb, rb,
                                        aq + (size_t)c0 * arb, arb, nr, nc);
                    } else {
                        for (int jj = 0; jj < nc; jj++) {
                            for (int ii = 0; ii < nr; ii++) {
                                t->vec_dot(k, y + (c0 + jj) * n + r0 + ii,
                                           w + (size_t)(r0 + ii) * rb,
                                           aq + (size_t)(c0 + jj) * arb);
                            }
                        }
                    }
                }
            }
            const double dt = cpu_now() - t0;
            best_tile = dt < best_tile ? dt : best_tile;
        }
        lares_free_aligned(aq);
        double best_gemm = 0;
        int lanes = 0;
        if (t->gemm != NULL) {
            lanes = t->panel->lanes;
            const size_t pb = quant_panel_bytes(t->panel, k);
            const int64_t n_p = (c + lanes - 1) / lanes;
            uint8_t *panels = lares_alloc_aligned(pb * (size_t)n_p, 64);
            best_gemm = 1e30;
            for (int r = 0; r < reps; r++) {
                const double t0 = cpu_now();
                for (int64_t p = 0; p < n_p; p++) {
                    const int nn = (int)(c - p * lanes < lanes ? c - p * lanes : lanes);
                    t->panel->from_float(x + p * lanes * k, (size_t)k, nn, k,
                                         panels + (size_t)p * pb);
                }
                for (int64_t r0 = 0; r0 < n; r0 += 16) {
                    t->gemm(k, w + (size_t)r0 * rb, rb, n - r0 < 16 ? n - r0 : 16, panels, c,
                            y + r0, (size_t)n);
                }
                const double dt = cpu_now() - t0;
                best_gemm = dt < best_gemm ? dt : best_gemm;
            }
            lares_free_aligned(panels);
        }
        /* the few-row product (decoding up to QUANT_ROWS_MAX sequences together) */
        double best_rows = 0;
        if (t->rows != NULL && c <= QUANT_ROWS_MAX && k % QUANT_ROWS_GROUP == 0) {
            const size_t ab = quant_rows_bytes(k);
            uint8_t *act = lares_alloc_aligned(ab * (size_t)c, 64);
            best_rows = 1e30;
            /* the activations once: a product's rows are converted once for
             * all its weight rows (and for the matrices that share them) */
            for (int64_t j = 0; j < c; j++) {
                t->rows_fmt->from_float(x + j * k, k, act + (size_t)j * ab);
            }
            for (int r = 0; r < reps; r++) {
                const double t0 = cpu_now();
                t->rows(k, w, rb, n, act, ab, c, y, (size_t)n);
                const double dt = cpu_now() - t0;
                best_rows = dt < best_rows ? dt : best_rows;
            }
            lares_free_aligned(act);
        }
        printf("{\"family\": \"%s\", \"int8_peak_gmacs\": %.1f, \"tile_gmacs\": %.1f", fams[f].name,
               peak / 1e9, macs / best_tile / 1e9);
        if (best_rows > 0) {
            printf(", \"rows_gmacs\": %.1f, \"rows_over_tile\": %.2f", macs / best_rows / 1e9,
                   best_tile / best_rows);
        }
        if (best_gemm > 0) {
            printf(", \"gemm_lanes\": %d, \"gemm_gmacs\": %.1f, \"gemm_of_peak\": %.3f, "
                   "\"gemm_over_tile\": %.2f",
                   lanes, macs / best_gemm / 1e9, peak > 0 ? macs / best_gemm / peak : 0.0,
                   best_tile / best_gemm);
        }
        printf("}\n");
    }
    free(row);
    free(y);
    free(x);
    free(w);
    return 0;
}
