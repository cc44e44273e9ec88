/*
 * Scaled dot-product attention (Vaswani et al. 2017) over a KV cache, with
 * grouped-query heads (Ainslie et al. 2023): query head h reads KV head
 * h / (n_head / n_head_kv). Token t attends to cache rows 0..pos[t] (causal).
 * Work is split over (token, KV head) pairs, each serving its group of query
 * heads; each thread keeps the group's scores in its own scratch row.
 */
#include "ops/ops.h"
#include "quant/half.h"

#include <math.h>

/* The loops below are plain C; on x86-64 ELF targets the compiler builds them
 * for AVX-512 and AVX2/FMA as well and the loader picks the best the CPU has
 * (GCC/Clang function multi-versioning), since attention over a long context
 * is a third of a prompt's time and this module carries no ISA flags. */
#if defined(__x86_64__) && defined(__ELF__) && (defined(__GNUC__) || defined(__clang__)) &&        \
    !defined(LARES_NO_CLONES)
#define ATTN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_CLONES
#endif

typedef struct attn_task {
    const ops_attn_args *a;
    const quant_traits *kt; /* K/V rows (F16/F32) to F32 */
} attn_task;

/* a row of hd values of the cache as floats: F32 in place, F16 converted */
static const float *kv_row(const uint8_t *row, const quant_traits *kt, int64_t hd,
                           float *restrict tmp) {
    if (kt->type == GGUF_TYPE_F32) {
        return (const float *)(const void *)row;
    }
    kt->to_float(row, tmp, hd);
    return tmp;
}

/* q . k over hd values, in eight running sums so that the compiler can keep
 * them in vector registers (a single float sum must be added in order) */
static inline __attribute__((always_inline)) float dot_row(const float *restrict q,
                                                           const float *restrict k, int64_t hd) {
    float acc[8] = {0};
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
        for (int u = 0; u < 8; u++) {
            acc[u] += q[d + u] * k[d + u];
        }
    }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; d < hd; d++) {
        s += q[d] * k[d];
    }
    return s;
}

/* out += p * v over hd values, eight at a time (straight-line groups of eight
 * are what the compiler vectorises at -O2; a plain loop stayed scalar) */
static inline __attribute__((always_inline)) void
axpy_row(float *restrict out, const float *restrict v, float p, int64_t hd) {
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
        for (int u = 0; u < 8; u++) {
            out[d + u] += p * v[d + u];
        }
    }
    for (; d < hd; d++) {
        out[d] += p * v[d];
    }
}

/* One (token, KV head) pair serves all the query heads that share the KV head
 * (grouped-query attention): each K and V row is read and converted once for
 * the whole group instead of once per query head. */
ATTN_CLONES static void attn_worker(void *vctx, int ith, int nth) {
    const attn_task *t = vctx;
    const ops_attn_args *a = t->a;
    const int64_t hd = a->head_dim;
    const int64_t group = a->n_head / a->n_head_kv;
    const size_t esz = ops_kv_elem_bytes(a->kv.type);
    const size_t row_bytes = a->kv.row_elems * esz;
    float *scratch = a->scratch + (size_t)ith * a->scratch_stride;
    float *rowtmp = scratch + a->scratch_stride - (size_t)hd; /* the last head_dim floats */
    int64_t lo, hi;
    ops_split(a->n_tok * a->n_head_kv, ith, nth, &lo, &hi);
    for (int64_t w = lo; w < hi; w++) {
        const int64_t tok = w / a->n_head_kv, g = w % a->n_head_kv;
        const int64_t n_kv = (int64_t)a->pos[tok] + 1;
        const float *q0 = a->q + (tok * a->n_head + g * group) * hd; /* the group's heads */
        float *out0 = a->out + (tok * a->n_head + g * group) * hd;
        const uint8_t *kbase = (const uint8_t *)a->kv.k + (size_t)(g * hd) * esz;
        const uint8_t *vbase = (const uint8_t *)a->kv.v + (size_t)(g * hd) * esz;
        /* scores of head i of the group at scratch[i * n_kv ...] */
        for (int64_t j = 0; j < n_kv; j++) {
            const float *k = kv_row(kbase + (size_t)j * row_bytes, t->kt, hd, rowtmp);
            for (int64_t i = 0; i < group; i++) {
                scratch[i * n_kv + j] = dot_row(q0 + i * hd, k, hd) * a->scale;
            }
        }
        for (int64_t i = 0; i < group; i++) {
            ops_softmax(scratch + i * n_kv, n_kv);
        }
        memset(out0, 0, (size_t)(group * hd) * sizeof *out0);
        for (int64_t j = 0; j < n_kv; j++) {
            const float *v = kv_row(vbase + (size_t)j * row_bytes, t->kt, hd, rowtmp);
            for (int64_t i = 0; i < group; i++) {
                axpy_row(out0 + i * hd, v, scratch[i * n_kv + j], hd);
            }
        }
    }
}

void ops_attention(ops_pool *pool, const ops_attn_args *a) {
    attn_task t = {.a = a, .kt = quant_traits_of(a->kv.type)};
    /* work: query-key products; a few thousand are not worth a second thread */
    double work = 0;
    for (int64_t i = 0; i < a->n_tok; i++) {
        work += (double)(a->pos[i] + 1);
    }
    work *= (double)a->n_head * (double)a->head_dim;
    const int nth = ops_pool_threads_for(pool, work, 32.0 * 1024);
    if (nth <= 1) {
        attn_worker(&t, 0, 1);
    } else {
        ops_pool_run_n(pool, attn_worker, &t, nth);
    }
}
