/*
 * The forward pass of a layer window, the KV cache it writes, and the working
 * memory it needs. Reads top to bottom in the order of the transformer block
 * (Vaswani et al. 2017, as arranged by LLaMA, Touvron et al. 2023):
 *
 *   x += Wo . attention(rope(Wq . norm(x)), rope(Wk . norm(x)), Wv . norm(x))
 *   x += Wdown . (silu(Wgate . norm(x)) * (Wup . norm(x)))
 */
#include "model/model.h"
#include "quant/half.h"

#include <math.h>

/* ---- KV cache ---- */

lares_status model_kv_create(const model *m, int32_t l0, int32_t l1, int32_t n_ctx, uint32_t type,
                             model_kv **out, lares_error *err) {
    const model_hparams *hp = &m->hp;
    if (l0 < 0 || l1 > hp->n_layer || l0 >= l1) {
        return lares_fail(err, LARES_EINVAL, "kv cache: window [%d, %d) outside 0..%d", l0, l1,
                          hp->n_layer);
    }
    if (n_ctx < 1) {
        return lares_fail(err, LARES_EINVAL, "kv cache: context length %d", n_ctx);
    }
    if (type != GGUF_TYPE_F16 && type != GGUF_TYPE_F32) {
        return lares_fail(err, LARES_EINVAL, "kv cache: type must be f16 or f32");
    }
    model_kv *kv = lares_calloc(1, sizeof *kv);
    if (kv == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    kv->l0 = l0;
    kv->l1 = l1;
    kv->n_ctx = n_ctx;
    kv->type = type;
    kv->row_elems = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    size_t esz = type == GGUF_TYPE_F32 ? 4 : 2, bytes;
    if (!lares_mul_size(kv->row_elems * esz, (size_t)n_ctx, &bytes) ||
        !lares_mul_size(bytes, 2 * (size_t)(l1 - l0), &bytes)) {
        lares_free(kv);
        return lares_fail(err, LARES_ENOMEM, "kv cache: size overflows");
    }
    /* large and mostly untouched at first: the OS commits pages as positions fill */
    kv->mem = lares_alloc_aligned(bytes, 64);
    if (kv->mem == NULL) {
        lares_free(kv);
        return lares_fail(err, LARES_ENOMEM,
                          "kv cache: cannot allocate %zu MiB for %d positions x %d layers",
                          bytes >> 20, n_ctx, l1 - l0);
    }
    kv->bytes = bytes;
    *out = kv;
    return LARES_OK;
}

void model_kv_free(model_kv *kv) {
    if (kv == NULL) {
        return;
    }
    lares_free_aligned(kv->mem);
    lares_free(kv);
}

ops_kv_view model_kv_view(const model_kv *kv, int32_t layer) {
    const size_t esz = kv->type == GGUF_TYPE_F32 ? 4 : 2;
    const size_t per = kv->row_elems * esz * (size_t)kv->n_ctx;
    const size_t li = (size_t)(layer - kv->l0);
    const size_t n_layers = (size_t)(kv->l1 - kv->l0);
    ops_kv_view v = {.k = (uint8_t *)kv->mem + li * per,
                     .v = (uint8_t *)kv->mem + (n_layers + li) * per,
                     .type = kv->type,
                     .row_elems = kv->row_elems};
    return v;
}

/* ---- working memory ---- */

/* The activation formats any matrix of the model asks for, largest row wins. */
static size_t act_bytes_for(const model *m, int32_t n_batch) {
    const model_hparams *hp = &m->hp;
    const int64_t widest = LARES_MAX(LARES_MAX((int64_t)hp->n_embd, (int64_t)hp->n_ff),
                                     (int64_t)hp->n_head * hp->head_dim);
    size_t best = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *l = &m->layers[il];
        const ops_matrix *ms[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < LARES_ARRAY_LEN(ms); i++) {
            size_t b = ops_act_bytes(ms[i]->qt->vec_dot_type, n_batch, widest);
            best = b > best ? b : best;
        }
    }
    size_t b = ops_act_bytes(m->output.qt->vec_dot_type, n_batch, hp->n_embd);
    return b > best ? b : best;
}

lares_status model_ctx_create(const model *m, ops_pool *pool, int32_t n_batch, int32_t n_ctx,
                              model_ctx **out, lares_error *err) {
    const model_hparams *hp = &m->hp;
    if (n_batch < 1 || n_ctx < 1) {
        return lares_fail(err, LARES_EINVAL, "model: batch %d / context %d", n_batch, n_ctx);
    }
    model_ctx *cx = lares_calloc(1, sizeof *cx);
    if (cx == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    cx->pool = pool;
    cx->n_batch = n_batch;
    cx->n_ctx = n_ctx;
    const size_t nb = (size_t)n_batch, qd = (size_t)hp->n_head * (size_t)hp->head_dim,
                 kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    const int nth = pool ? ops_pool_size(pool) : 1;
    /* float counts of each buffer, each rounded to a cache line */
    size_t counts[] = {
        nb * (size_t)hp->n_embd, nb * qd, nb * kvd, nb * kvd, nb * qd, nb * (size_t)hp->n_embd,
        nb * (size_t)hp->n_ff,   nb * (size_t)hp->n_ff,  nb * (size_t)hp->n_rot,
        (size_t)nth * (size_t)n_ctx,
    };
    float **dst[] = {&cx->xn, &cx->q, &cx->k, &cx->v, &cx->att, &cx->tmp,
                     &cx->gate, &cx->up, &cx->rope_cs, &cx->attn_scratch};
    size_t total = 0;
    for (size_t i = 0; i < LARES_ARRAY_LEN(counts); i++) {
        total += (counts[i] * sizeof(float) + 63) & ~(size_t)63;
    }
    cx->act_bytes = (act_bytes_for(m, n_batch) + 63) & ~(size_t)63;
    total += cx->act_bytes;
    cx->mem = lares_alloc_aligned(total, 64);
    if (cx->mem == NULL) {
        lares_free(cx);
        return lares_fail(err, LARES_ENOMEM, "model: cannot allocate %zu MiB of working memory",
                          total >> 20);
    }
    cx->bytes = total;
    uint8_t *p = cx->mem;
    for (size_t i = 0; i < LARES_ARRAY_LEN(counts); i++) {
        *dst[i] = (float *)p;
        p += (counts[i] * sizeof(float) + 63) & ~(size_t)63;
    }
    cx->act = p;
    *out = cx;
    return LARES_OK;
}

void model_ctx_free(model_ctx *cx) {
    if (cx == NULL) {
        return;
    }
    lares_free_aligned(cx->mem);
    lares_free(cx);
}

/* ---- embedding and output ---- */

lares_status model_embed(const model *m, const int32_t *tokens, int32_t n_tok, float *x,
                         lares_error *err) {
    const gguf_tensor *te = m->tok_embd;
    const quant_traits *qt = quant_traits_of(te->type);
    const size_t row_bytes = quant_row_bytes(te->type, te->ne[0]);
    for (int32_t t = 0; t < n_tok; t++) {
        if (tokens[t] < 0 || tokens[t] >= m->hp.n_vocab) {
            return lares_fail(err, LARES_EINVAL, "token id %d outside the vocabulary of %d",
                              tokens[t], m->hp.n_vocab);
        }
        qt->to_float((const uint8_t *)te->data + (size_t)tokens[t] * row_bytes,
                     x + (size_t)t * (size_t)m->hp.n_embd, te->ne[0]);
    }
    return LARES_OK;
}

typedef struct norm_task {
    const float *x;
    const float *w;
    float *out;
    int64_t n;
    float eps;
    int64_t rows;
} norm_task;

static void norm_rows(void *vctx, int ith, int nth) {
    const norm_task *t = vctx;
    int64_t lo, hi;
    ops_split(t->rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        ops_rmsnorm(t->x + r * t->n, t->w, t->n, t->eps, t->out + r * t->n);
    }
}

/* RMSNorm of each row; rows spread over the pool when there are several */
static void norm_all(ops_pool *pool, const float *x, const float *w, int64_t n, float eps,
                     int64_t rows, float *out) {
    norm_task t = {.x = x, .w = w, .out = out, .n = n, .eps = eps, .rows = rows};
    if (pool != NULL && rows > 1) {
        ops_pool_run(pool, norm_rows, &t);
    } else {
        norm_rows(&t, 0, 1);
    }
}

void model_output(const model *m, model_ctx *cx, float *x, int32_t n_rows, float *logits) {
    const model_hparams *hp = &m->hp;
    norm_all(cx->pool, x, m->output_norm, hp->n_embd, hp->rms_eps, n_rows, x);
    ops_act a;
    ops_act_prepare(cx->pool, x, n_rows, hp->n_embd, m->output.qt->vec_dot_type, cx->act, &a);
    const ops_matrix *ws[] = {&m->output};
    float *ys[] = {logits};
    ops_matmul(cx->pool, 1, ws, &a, ys);
}

/* ---- one window ---- */

typedef struct attn_prep {
    const model *m;
    const model_layer *l;
    model_ctx *cx;
    ops_kv_view kv;
    const int32_t *pos;
    int32_t n_tok;
} attn_prep;

/* Biases, per-head norms, RoPE, and the store of K and V into the cache, per token. */
static void prep_rows(void *vctx, int ith, int nth) {
    const attn_prep *p = vctx;
    const model_hparams *hp = &p->m->hp;
    const model_layer *l = p->l;
    const int64_t hd = hp->head_dim, qd = (int64_t)hp->n_head * hd,
                  kvd = (int64_t)hp->n_head_kv * hd;
    int64_t lo, hi;
    ops_split(p->n_tok, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *q = p->cx->q + t * qd, *k = p->cx->k + t * kvd, *v = p->cx->v + t * kvd;
        if (l->bq != NULL) {
            ops_add(q, l->bq, qd);
            ops_add(k, l->bk, kvd);
            ops_add(v, l->bv, kvd);
        }
        const float *cs = p->cx->rope_cs + t * hp->n_rot;
        for (int64_t h = 0; h < hp->n_head; h++) {
            if (l->q_norm != NULL) {
                ops_rmsnorm(q + h * hd, l->q_norm, hd, hp->rms_eps, q + h * hd);
            }
            ops_rope(q + h * hd, hd, hp->n_rot, cs, hp->rope_mode);
        }
        for (int64_t h = 0; h < hp->n_head_kv; h++) {
            if (l->k_norm != NULL) {
                ops_rmsnorm(k + h * hd, l->k_norm, hd, hp->rms_eps, k + h * hd);
            }
            ops_rope(k + h * hd, hd, hp->n_rot, cs, hp->rope_mode);
        }
        const size_t row = (size_t)p->pos[t] * p->kv.row_elems;
        if (p->kv.type == GGUF_TYPE_F32) {
            memcpy((float *)p->kv.k + row, k, (size_t)kvd * sizeof(float));
            memcpy((float *)p->kv.v + row, v, (size_t)kvd * sizeof(float));
        } else {
            const quant_traits *f16 = quant_traits_of(GGUF_TYPE_F16);
            f16->from_float(k, (lares_f16 *)p->kv.k + row, kvd);
            f16->from_float(v, (lares_f16 *)p->kv.v + row, kvd);
        }
    }
}

typedef struct ffn_task {
    float *gate;
    const float *up;
    int64_t n;
} ffn_task;

static void swiglu_rows(void *vctx, int ith, int nth) {
    const ffn_task *t = vctx;
    int64_t lo, hi;
    ops_split(t->n, ith, nth, &lo, &hi);
    ops_swiglu(t->gate + lo, t->up + lo, hi - lo);
}

static void run_rows(ops_pool *pool, ops_task_fn fn, void *ctx, int64_t work) {
    if (pool != NULL && work > 1) {
        ops_pool_run(pool, fn, ctx);
    } else {
        fn(ctx, 0, 1);
    }
}

/* y_i = W_i . act(x) for matrices that share one input; activations are
 * converted once per distinct format */
static void matmul_shared(model_ctx *cx, const float *x, int64_t n_rows, int64_t n_in, int n,
                          const ops_matrix *const *ws, float *const *ys) {
    bool done[8] = {false};
    for (int i = 0; i < n; i++) {
        if (done[i]) {
            continue;
        }
        const uint32_t type = ws[i]->qt->vec_dot_type;
        const ops_matrix *group[8];
        float *outs[8];
        int g = 0;
        for (int j = i; j < n; j++) {
            if (!done[j] && ws[j]->qt->vec_dot_type == type) {
                group[g] = ws[j];
                outs[g++] = ys[j];
                done[j] = true;
            }
        }
        ops_act a;
        ops_act_prepare(cx->pool, x, n_rows, n_in, type, cx->act, &a);
        ops_matmul(cx->pool, g, group, &a, outs);
    }
}

static void layer_forward(const model *m, model_kv *kv, model_ctx *cx, int32_t il,
                          const int32_t *pos, int32_t n_tok, float *x) {
    const model_hparams *hp = &m->hp;
    const model_layer *l = &m->layers[il];
    const int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
    ops_pool *pool = cx->pool;

    /* attention block */
    norm_all(pool, x, l->attn_norm, e, hp->rms_eps, n_tok, cx->xn);
    const ops_matrix *qkv_w[] = {&l->wq, &l->wk, &l->wv};
    float *qkv_y[] = {cx->q, cx->k, cx->v};
    matmul_shared(cx, cx->xn, n_tok, e, 3, qkv_w, qkv_y);

    attn_prep ap = {.m = m, .l = l, .cx = cx, .kv = model_kv_view(kv, il), .pos = pos,
                    .n_tok = n_tok};
    run_rows(pool, prep_rows, &ap, n_tok);

    ops_attn_args aa = {.q = cx->q,
                        .out = cx->att,
                        .pos = pos,
                        .n_tok = n_tok,
                        .n_head = hp->n_head,
                        .n_head_kv = hp->n_head_kv,
                        .head_dim = hp->head_dim,
                        .scale = 1.0f / sqrtf((float)hp->head_dim),
                        .kv = ap.kv,
                        .scratch = cx->attn_scratch,
                        .scratch_stride = (size_t)cx->n_ctx};
    ops_attention(pool, &aa);

    const ops_matrix *wo[] = {&l->wo};
    float *wo_y[] = {cx->tmp};
    matmul_shared(cx, cx->att, n_tok, qd, 1, wo, wo_y);
    ops_add(x, cx->tmp, (int64_t)n_tok * e);

    /* feed-forward block */
    norm_all(pool, x, l->ffn_norm, e, hp->rms_eps, n_tok, cx->xn);
    const ops_matrix *gu_w[] = {&l->w_gate, &l->w_up};
    float *gu_y[] = {cx->gate, cx->up};
    matmul_shared(cx, cx->xn, n_tok, e, 2, gu_w, gu_y);
    ffn_task ft = {.gate = cx->gate, .up = cx->up, .n = (int64_t)n_tok * hp->n_ff};
    run_rows(pool, swiglu_rows, &ft, ft.n);
    const ops_matrix *wd[] = {&l->w_down};
    float *wd_y[] = {cx->tmp};
    matmul_shared(cx, cx->gate, n_tok, hp->n_ff, 1, wd, wd_y);
    ops_add(x, cx->tmp, (int64_t)n_tok * e);
}

lares_status model_forward(const model *m, model_kv *kv, model_ctx *cx, int32_t l0, int32_t l1,
                           const int32_t *pos, int32_t n_tok, float *x, lares_error *err) {
    if (n_tok < 1 || n_tok > cx->n_batch) {
        return lares_fail(err, LARES_EINVAL, "forward: %d tokens (batch holds %d)", n_tok,
                          cx->n_batch);
    }
    if (l0 < kv->l0 || l1 > kv->l1 || l0 >= l1) {
        return lares_fail(err, LARES_EINVAL, "forward: window [%d, %d) outside the cache's [%d, %d)",
                          l0, l1, kv->l0, kv->l1);
    }
    for (int32_t t = 0; t < n_tok; t++) {
        if (pos[t] < 0 || pos[t] >= kv->n_ctx || pos[t] >= cx->n_ctx) {
            return lares_fail(err, LARES_ERANGE, "forward: position %d outside the context of %d",
                              pos[t], kv->n_ctx);
        }
        ops_rope_angles((float)pos[t], m->rope_inv_freq, m->hp.n_rot,
                        cx->rope_cs + (size_t)t * (size_t)m->hp.n_rot);
    }
    for (int32_t il = l0; il < l1; il++) {
        layer_forward(m, kv, cx, il, pos, n_tok, x);
    }
    return LARES_OK;
}
