/*
 * Scaled dot-product attention (Vaswani et al. 2017) over a KV cache, with
 * grouped-query heads (Ainslie et al. 2023): query head h reads KV head
 * h / (n_head / n_head_kv). Token t attends to cache rows 0..pos[t] (causal).
 * Work is split over (token, KV head) pairs, each serving its group of query
 * heads with the cache type's kernel (quant_traits.kv_attend: each K and V row
 * is read once for the whole group); each thread keeps the group's scores in
 * its own scratch row.
 */
#include "ops/ops.h"

typedef struct attn_task {
    const ops_attn_args *a;
    quant_kv_attend_fn attend;
} attn_task;

static void attn_worker(void *vctx, int ith, int nth) {
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
        const int64_t off = (tok * a->n_head + g * group) * hd; /* the group's heads */
        t->attend(a->q + off, group, hd, (const uint8_t *)a->kv.k + (size_t)(g * hd) * esz,
                  (const uint8_t *)a->kv.v + (size_t)(g * hd) * esz, row_bytes,
                  (int64_t)a->pos[tok] + 1, a->scale, scratch, rowtmp, a->out + off);
    }
}

void ops_attention(ops_pool *pool, const ops_attn_args *a) {
    attn_task t = {.a = a, .attend = quant_traits_of(a->kv.type)->kv_attend};
    /* work: query-key products; a few thousand are not worth a second thread
     * (8k: each of 4 sequences' heads at position 0 is 2048 products) */
    double work = 0;
    for (int64_t i = 0; i < a->n_tok; i++) {
        work += (double)(a->pos[i] + 1);
    }
    work *= (double)a->n_head * (double)a->head_dim;
    const int nth = ops_pool_threads_for(pool, work, 8.0 * 1024);
    if (nth <= 1) {
        attn_worker(&t, 0, 1);
    } else {
        ops_pool_run_n(pool, attn_worker, &t, nth);
    }
}
