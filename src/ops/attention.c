/*
 * Scaled dot-product attention (Vaswani et al. 2017) over a KV cache, with
 * grouped-query heads (Ainslie et al. 2023): query head h reads KV head
 * h / (n_head / n_head_kv). Token t attends to cache rows 0..pos[t] (causal).
 * Work is split over (token, head) pairs; each thread keeps its scores in its
 * own scratch row.
 */
#include "ops/ops.h"
#include "quant/half.h"

#include <math.h>

typedef struct attn_task {
    const ops_attn_args *a;
    const quant_traits *kt; /* dot of a K row (F16/F32) with an F32 query; V rows to F32 */
} attn_task;

/* out += p * v over n values; F16 rows go through the type's (vectorised)
 * conversion into tmp first */
static void accumulate_row(float *restrict out, const void *vrow, const quant_traits *vt, float p,
                           int64_t n, float *restrict tmp) {
    const float *v = vrow;
    if (vt->type != GGUF_TYPE_F32) {
        vt->to_float(vrow, tmp, n);
        v = tmp;
    }
    for (int64_t d = 0; d < n; d++) {
        out[d] += p * v[d];
    }
}

static void attn_worker(void *vctx, int ith, int nth) {
    const attn_task *t = vctx;
    const ops_attn_args *a = t->a;
    const int64_t hd = a->head_dim;
    const int64_t group = a->n_head / a->n_head_kv;
    const size_t esz = a->kv.type == GGUF_TYPE_F32 ? 4 : 2;
    const size_t row_bytes = a->kv.row_elems * esz;
    float *scores = a->scratch + (size_t)ith * a->scratch_stride;
    float *vtmp = scores + a->scratch_stride - (size_t)hd; /* the row's last head_dim floats */
    int64_t lo, hi;
    ops_split(a->n_tok * a->n_head, ith, nth, &lo, &hi);
    for (int64_t w = lo; w < hi; w++) {
        const int64_t tok = w / a->n_head, h = w % a->n_head, g = h / group;
        const float *q = a->q + (tok * a->n_head + h) * hd;
        const int64_t n_kv = (int64_t)a->pos[tok] + 1;
        const uint8_t *kbase = (const uint8_t *)a->kv.k + (size_t)(g * hd) * esz;
        for (int64_t j = 0; j < n_kv; j++) {
            float s;
            t->kt->vec_dot(hd, &s, kbase + (size_t)j * row_bytes, q);
            scores[j] = s * a->scale;
        }
        ops_softmax(scores, n_kv);
        float *out = a->out + (tok * a->n_head + h) * hd;
        memset(out, 0, (size_t)hd * sizeof *out);
        const uint8_t *vbase = (const uint8_t *)a->kv.v + (size_t)(g * hd) * esz;
        for (int64_t j = 0; j < n_kv; j++) {
            accumulate_row(out, vbase + (size_t)j * row_bytes, t->kt, scores[j], hd, vtmp);
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
