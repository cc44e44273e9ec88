/*
 * Scaled dot-product attention (Vaswani et al. 2017) over a KV cache, with
 * grouped-query heads (Ainslie et al. 2023): query head h reads KV head
 * h / (n_head / n_head_kv). Token t attends to cache rows 0..pos[t] (causal).
 * Work is split over (token, KV head) pairs, each serving its group of query
 * heads with the cache type's kernel (quant_traits.kv_attend: each K and V row
 * is read once for the whole group); each thread keeps the group's scores in
 * its own scratch row. The sequences of a batch (each its own cache) go as one
 * job: with 8 sequences a job each had cost 8 forks and joins a layer.
 */
#include "ops/ops.h"

#include <assert.h>

typedef struct attn_task {
    const ops_attn_args *a; /* n attentions, each its own cache */
    int32_t n;
    quant_kv_attend_fn attend;
    quant_kv_attend_rows_fn rows; /* NULL: every attention a token at a time */
    double work; /* query-key products of all of them */
} attn_task;

/* Whether attention a goes by rows in lanes (quant_kv_attend_rows_fn): in a
 * pass of more than OPS_ROWS_MAX rows, whose products round otherwise than a
 * few rows' already (the GEMM), for a sequence with half a vector of query
 * rows per KV head or more; a pass of up to OPS_ROWS_MAX rows (generation,
 * drafts, a prompt's shares) attends as each token alone does. */
static bool by_rows(const attn_task *t, const ops_attn_args *a) {
    return t->rows != NULL && a->n_tok * (a->n_head / a->n_head_kv) >= QUANT_ATTEND_ROWS_MAX / 2;
}

/* The units of attention a by rows: KV head g, then blocks of up to
 * QUANT_ATTEND_ROWS_MAX of its query rows (token, head of the group) in
 * order, each unit run when its work starts in the thread's share */
static void rows_units(const attn_task *t, const ops_attn_args *a, double lo, double hi, int ith,
                       int nth, float *scratch, double *at) {
    const int64_t hd = a->head_dim, group = a->n_head / a->n_head_kv;
    const size_t esz = ops_kv_elem_bytes(a->kv.type);
    const size_t row_bytes = a->kv.row_elems * esz;
    const int64_t n_rows = a->n_tok * group;
    for (int64_t g = 0; g < a->n_head_kv; g++) {
        for (int64_t r0 = 0; r0 < n_rows; r0 += QUANT_ATTEND_ROWS_MAX) {
            const int nr = (int)LARES_MIN((int64_t)QUANT_ATTEND_ROWS_MAX, n_rows - r0);
            const float *q[QUANT_ATTEND_ROWS_MAX];
            float *out[QUANT_ATTEND_ROWS_MAX];
            int32_t len[QUANT_ATTEND_ROWS_MAX];
            double w = 0;
            for (int i = 0; i < nr; i++) {
                const int64_t tok = (r0 + i) / group, h = (r0 + i) % group;
                const int64_t off = (tok * a->n_head + g * group + h) * hd;
                q[i] = a->q + off;
                out[i] = a->out + off;
                len[i] = a->pos[tok] + 1;
                w += (double)len[i] * (double)hd;
            }
            if (*at >= lo && (*at < hi || ith == nth - 1)) {
                t->rows(nr, hd, q, len, (const uint8_t *)a->kv.k + (size_t)(g * hd) * esz,
                        (const uint8_t *)a->kv.v + (size_t)(g * hd) * esz, row_bytes, a->scale,
                        scratch, out);
            }
            *at += w;
        }
    }
}

/* The work of a's token t: its query-key products (the same for each KV head) */
static double token_work(const ops_attn_args *a, int64_t t) {
    return (double)(a->pos[t] + 1) * (double)(a->n_head / a->n_head_kv) * (double)a->head_dim;
}

/* Thread ith of nth takes the (token, KV head) pairs whose work starts in its
 * share of the total, walked in order over every attention: shares of work,
 * not of pairs, so that a prompt's late rows (long windows) do not all fall
 * to one thread. Each pair's result is the same on any thread. */
static void attn_worker(void *vctx, int ith, int nth) {
    const attn_task *t = vctx;
    const double lo = t->work * ith / nth, hi = t->work * (ith + 1) / nth;
    /* this thread's scores, then a converted K or V row (the last head_dim floats) */
    const int64_t hd = t->a[0].head_dim;
    float *scratch = t->a[0].scratch + (size_t)ith * t->a[0].scratch_stride;
    float *rowtmp = scratch + t->a[0].scratch_stride - (size_t)hd;
    double at = 0;
    for (int32_t i = 0; i < t->n; i++) {
        const ops_attn_args *a = &t->a[i];
        if (by_rows(t, a)) {
            rows_units(t, a, lo, hi, ith, nth, scratch, &at);
            continue;
        }
        const int64_t group = a->n_head / a->n_head_kv;
        const size_t esz = ops_kv_elem_bytes(a->kv.type);
        const size_t row_bytes = a->kv.row_elems * esz;
        for (int64_t tok = 0; tok < a->n_tok; tok++) {
            const double w = token_work(a, tok);
            for (int64_t g = 0; g < a->n_head_kv; g++, at += w) {
                /* the last thread also takes what rounding leaves past hi */
                if (at < lo || (at >= hi && ith < nth - 1)) {
                    continue;
                }
                const int64_t off = (tok * a->n_head + g * group) * hd; /* the group's heads */
                t->attend(a->q + off, group, hd, (const uint8_t *)a->kv.k + (size_t)(g * hd) * esz,
                          (const uint8_t *)a->kv.v + (size_t)(g * hd) * esz, row_bytes,
                          (int64_t)a->pos[tok] + 1, a->scale, scratch, rowtmp, a->out + off);
            }
        }
    }
}

void ops_attention_seqs(ops_pool *pool, const ops_attn_args *a, int32_t n) {
    if (n < 1) {
        return;
    }
    const quant_traits *qt = quant_traits_of(a[0].kv.type);
    attn_task t = {.a = a, .n = n, .attend = qt->kv_attend};
    int64_t rows = 0, longest = 0;
    for (int32_t i = 0; i < n; i++) {
        assert(a[i].kv.type == a[0].kv.type && a[i].head_dim == a[0].head_dim);
        rows += a[i].n_tok;
        for (int64_t tok = 0; tok < a[i].n_tok; tok++) {
            t.work += token_work(&a[i], tok) * (double)a[i].n_head_kv;
            longest = LARES_MAX(longest, (int64_t)a[i].pos[tok] + 1);
        }
    }
    if (rows > OPS_ROWS_MAX &&
        a[0].scratch_stride >= QUANT_ATTEND_ROWS_SCRATCH(a[0].head_dim, longest)) {
        t.rows = qt->kv_attend_rows;
    }
    /* a few thousand query-key products are not worth a second thread (8k:
     * each of 4 sequences' heads at position 0 is 2048 products) */
    const int nth = ops_pool_threads_for(pool, t.work, 8.0 * 1024);
    if (nth <= 1) {
        attn_worker(&t, 0, 1);
    } else {
        ops_pool_run_n(pool, attn_worker, &t, nth);
    }
}

size_t ops_attention_scratch(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_ctx) {
    const size_t tokens = (size_t)(n_head / n_head_kv) * (size_t)n_ctx + (size_t)head_dim;
    return LARES_MAX(tokens, QUANT_ATTEND_ROWS_SCRATCH(head_dim, n_ctx));
}

void ops_attention(ops_pool *pool, const ops_attn_args *a) {
    ops_attention_seqs(pool, a, 1);
}
