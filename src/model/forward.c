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
#include <stdatomic.h>

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
    size_t esz = ops_kv_elem_bytes(type), bytes;
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
    /* distinct from every other cache's, so that a device copy keyed by the
     * address of a freed cache is never taken for this one's */
    static _Atomic uint64_t next_epoch = 1;
    kv->epoch = atomic_fetch_add(&next_epoch, 1) << 32;
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

size_t model_kv_row_bytes(const model_kv *kv) {
    return kv->row_elems * ops_kv_elem_bytes(kv->type);
}

void model_kv_rows(model_kv *kv, int32_t layer, int32_t pos0, int32_t n, bool put, uint8_t *k,
                   uint8_t *v) {
    const ops_kv_view view = model_kv_view(kv, layer);
    const size_t row = model_kv_row_bytes(kv), bytes = (size_t)n * row;
    uint8_t *kp = (uint8_t *)view.k + (size_t)pos0 * row;
    uint8_t *vp = (uint8_t *)view.v + (size_t)pos0 * row;
    if (put) {
        kv->epoch++;
        memcpy(kp, k, bytes);
        memcpy(vp, v, bytes);
    } else {
        memcpy(k, kp, bytes);
        memcpy(v, vp, bytes);
    }
}

ops_kv_view model_kv_view(const model_kv *kv, int32_t layer) {
    const size_t per = model_kv_row_bytes(kv) * (size_t)kv->n_ctx;
    const size_t li = (size_t)(layer - kv->l0);
    const size_t n_layers = (size_t)(kv->l1 - kv->l0);
    ops_kv_view v = {.k = (uint8_t *)kv->mem + li * per,
                     .v = (uint8_t *)kv->mem + (n_layers + li) * per,
                     .type = kv->type,
                     .row_elems = kv->row_elems};
    return v;
}

/* ---- working memory ---- */

/* floats of attention scratch per thread: the scores of the query heads that
 * share a KV head over the context, then one K or V row */
static size_t attn_stride(const model_hparams *hp, int32_t n_ctx) {
    return ops_attention_scratch(hp->n_head, hp->n_head_kv > 0 ? hp->n_head_kv : 1, hp->head_dim,
                                 n_ctx);
}

/* The activation formats any product of the model asks for, largest wins. */
static size_t act_bytes_for(const model *m, int32_t n_batch) {
    const model_hparams *hp = &m->hp;
    const int64_t widest =
        LARES_MAX(LARES_MAX((int64_t)hp->n_embd, (int64_t)hp->n_ff),
                  LARES_MAX((int64_t)hp->n_head * hp->head_dim,
                            LARES_MAX((int64_t)hp->n_ff_exp, (int64_t)hp->n_ff_shexp)));
    size_t best = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer_plan *lp = &m->plan->layers[il];
        const model_layer *l = &m->layers[il];
        for (int gi = 0; gi < MODEL_GROUP_COUNT; gi++) {
            const model_group *g = &lp->g[gi];
            /* an experts' group quantizes every (token, chosen expert) row */
            const int64_t rows = (int64_t)n_batch * g->rows;
            for (int i = 0; i < g->n; i++) {
                const model_role r = g->member[i];
                const bool expert = lp->w[r].form == MODEL_FORM_EXPERTS;
                const ops_matrix *w = expert ? &l->exps[r][0] : &l->mat[r];
                /* a smaller batch may take the other format: room for both; an
                 * expert's rows start a panel of their own (ops_act_group_panels),
                 * so up to a panel more per expert */
                const uint32_t at = ops_act_type(NULL, w, rows);
                size_t b = LARES_MAX(ops_act_bytes(w->qt->vec_dot_type, rows, widest),
                                     ops_act_bytes(at, rows, widest));
                if (expert) { /* experts_act_type's format, or panels for any rows */
                    b = LARES_MAX(b, ops_act_bytes(ops_act_type(NULL, w, 1), rows, widest));
                    if (ops_gemm_takes(NULL, w)) {
                        const int64_t pad = (int64_t)hp->n_expert * quant_panels()->lanes;
                        b = LARES_MAX(b, ops_act_bytes(OPS_ACT_PANELS, rows + pad, widest));
                    }
                }
                best = b > best ? b : best;
            }
        }
    }
    const uint32_t at = ops_act_type(NULL, &m->output, n_batch);
    size_t b = LARES_MAX(ops_act_bytes(m->output.qt->vec_dot_type, n_batch, hp->n_embd),
                         ops_act_bytes(at, n_batch, hp->n_embd));
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
    /* the FFN buffers serve the dense FFN and the shared expert */
    const size_t ffw = (size_t)LARES_MAX(hp->n_ff, hp->n_ff_shexp);
    const size_t ku = (size_t)(hp->n_expert > 0 ? hp->n_expert_used : 0);
    const size_t fe = (size_t)hp->n_ff_exp;
    /* element counts of each buffer (floats, or 32-bit ids), each cut at a cache line */
    enum { N_BUF = 23 };
    const size_t counts[N_BUF] = {
        nb * (size_t)hp->n_embd,
        nb * qd,
        nb * kvd,
        nb * kvd,
        nb * qd,
        nb * (size_t)hp->n_embd,
        nb * ffw,
        nb * ffw,
        nb * (size_t)hp->n_rot,
        (size_t)nth * attn_stride(hp, n_ctx),
        /* MoE */
        nb * (size_t)hp->n_expert,
        nb * ku,
        nb * ku,
        nb * ku,
        nb * ku * (size_t)hp->n_embd,
        nb * ku * fe,
        nb * ku * fe,
        nb * ku * (size_t)hp->n_embd,
        (size_t)hp->n_layer * (size_t)hp->n_expert,
        (size_t)(hp->n_expert > 0 ? hp->n_expert + 1 : 0),
        (size_t)hp->n_expert,
        (size_t)hp->n_expert,
        (size_t)hp->n_expert,
    };
    size_t total = 0, off[N_BUF];
    for (size_t i = 0; i < N_BUF; i++) {
        off[i] = total;
        total += (counts[i] * 4 + 63) & ~(size_t)63; /* every element is 4 bytes */
    }
    cx->act_bytes = (act_bytes_for(m, n_batch) + 63) & ~(size_t)63;
    const size_t act_off = total;
    total += 2 * cx->act_bytes;
    cx->mem = lares_alloc_aligned(total, 64);
    /* a pass holds at most n_batch sequences (each has a row) */
    cx->attn_args = lares_calloc(nb, sizeof *cx->attn_args);
    if (cx->mem == NULL || cx->attn_args == NULL) {
        lares_free_aligned(cx->mem);
        lares_free(cx->attn_args);
        lares_free(cx);
        return lares_fail(err, LARES_ENOMEM, "model: cannot allocate %zu MiB of working memory",
                          total >> 20);
    }
    cx->bytes = total;
    uint8_t *p = cx->mem;
#define AT(i) (counts[i] ? (void *)(p + off[i]) : NULL)
    cx->xn = AT(0);
    cx->q = AT(1);
    cx->k = AT(2);
    cx->v = AT(3);
    cx->att = AT(4);
    cx->tmp = AT(5);
    cx->gate = AT(6);
    cx->up = AT(7);
    cx->rope_cs = AT(8);
    cx->attn_scratch = AT(9);
    cx->router = AT(10);
    cx->sel = AT(11);
    cx->sel_w = AT(12);
    cx->order = AT(13);
    cx->xg = AT(14);
    cx->hg = AT(15);
    cx->hu = AT(16);
    cx->og = AT(17);
    cx->route_counts = AT(18);
    cx->exp_cnt = AT(19);
    cx->exp_used = AT(20);
    cx->exp_start = AT(21);
    cx->exp_ready = AT(22);
#undef AT
    cx->act = p + act_off;
    cx->act2 = p + act_off + cx->act_bytes;
    if (cx->route_counts != NULL) {
        memset(cx->route_counts, 0, (size_t)hp->n_layer * (size_t)hp->n_expert * sizeof(uint32_t));
    }
    *out = cx;
    return LARES_OK;
}

void model_ctx_on_route(model_ctx *cx, model_route_fn fn, model_wait_fn wait, void *user) {
    cx->on_route = fn;
    cx->on_wait = wait;
    cx->route_user = user;
}

void model_ctx_on_layer(model_ctx *cx, model_layer_fn fn, void *user) {
    cx->on_layer = fn;
    cx->layer_user = fn != NULL ? user : NULL;
}

void model_ctx_on_part(model_ctx *cx, model_part_fn fn, void *user) {
    cx->on_part = fn;
    cx->part_user = user;
}

void model_ctx_free(model_ctx *cx) {
    if (cx == NULL) {
        return;
    }
    lares_free_aligned(cx->mem);
    lares_free(cx->attn_args);
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
    ops_pool_run_n(pool, norm_rows, &t,
                   ops_pool_threads_for(pool, (double)rows * (double)n, OPS_MIN_ELEMS_PER_THREAD));
}

void model_output(const model *m, model_ctx *cx, float *x, int32_t n_rows, float *logits) {
    const model_hparams *hp = &m->hp;
    norm_all(cx->pool, x, m->output_norm, hp->n_embd, hp->rms_eps, n_rows, x);
    ops_act a;
    ops_act_prepare(cx->pool, x, n_rows, hp->n_embd, ops_act_type(cx->pool, &m->output, n_rows),
                    cx->act, &a);
    const ops_matrix *ws[] = {&m->output};
    const ops_act *as[] = {&a};
    float *ys[] = {logits};
    ops_matmul(cx->pool, 1, ws, as, ys);
}

/* ---- one window ---- */

typedef struct attn_prep {
    const model *m;
    const model_layer *l;
    model_ctx *cx;
    int32_t il;
    const model_seq *seqs; /* each its rows [row0, row0 + n_rows) and its cache */
    int32_t n_seqs;
    const int32_t *pos; /* of every row of the pass */
    int32_t n_tok;      /* rows of the pass */
} attn_prep;

/* Biases, per-head norms, RoPE, and the store of K and V into the cache, of row t */
static void prep_row(const attn_prep *p, ops_kv_view kv, int64_t t) {
    const model_hparams *hp = &p->m->hp;
    const model_layer *l = p->l;
    const int64_t hd = hp->head_dim, qd = (int64_t)hp->n_head * hd,
                  kvd = (int64_t)hp->n_head_kv * hd;
    float *q = p->cx->q + t * qd, *k = p->cx->k + t * kvd, *v = p->cx->v + t * kvd;
    if (l->vec[MODEL_ROLE_Q_BIAS] != NULL) {
        ops_add(q, l->vec[MODEL_ROLE_Q_BIAS], qd);
        ops_add(k, l->vec[MODEL_ROLE_K_BIAS], kvd);
        ops_add(v, l->vec[MODEL_ROLE_V_BIAS], kvd);
    }
    const float *cs = p->cx->rope_cs + t * hp->n_rot;
    for (int64_t h = 0; h < hp->n_head; h++) {
        if (l->vec[MODEL_ROLE_Q_NORM] != NULL) {
            ops_rmsnorm(q + h * hd, l->vec[MODEL_ROLE_Q_NORM], hd, hp->rms_eps, q + h * hd);
        }
        ops_rope(q + h * hd, hd, hp->n_rot, cs, hp->rope_mode);
    }
    for (int64_t h = 0; h < hp->n_head_kv; h++) {
        if (l->vec[MODEL_ROLE_K_NORM] != NULL) {
            ops_rmsnorm(k + h * hd, l->vec[MODEL_ROLE_K_NORM], hd, hp->rms_eps, k + h * hd);
        }
        ops_rope(k + h * hd, hd, hp->n_rot, cs, hp->rope_mode);
    }
    const size_t row = (size_t)p->pos[t] * kv.row_elems;
    if (kv.type == GGUF_TYPE_F32) {
        memcpy((float *)kv.k + row, k, (size_t)kvd * sizeof(float));
        memcpy((float *)kv.v + row, v, (size_t)kvd * sizeof(float));
    } else {
        const quant_traits *f16 = quant_traits_of(GGUF_TYPE_F16);
        f16->from_float(k, (lares_f16 *)kv.k + row, kvd);
        f16->from_float(v, (lares_f16 *)kv.v + row, kvd);
    }
}

/* Biases, per-head norms, RoPE, and the store of K and V into each row's
 * sequence's cache, the pass's rows split over the threads: one job for every
 * sequence of a batch (a job a sequence cost a fork and a join each, per layer) */
static void prep_rows(void *vctx, int ith, int nth) {
    const attn_prep *p = vctx;
    int64_t lo, hi;
    ops_split(p->n_tok, ith, nth, &lo, &hi);
    for (int32_t s = 0; s < p->n_seqs; s++) {
        const int64_t a = LARES_MAX(lo, (int64_t)p->seqs[s].row0);
        const int64_t b = LARES_MIN(hi, (int64_t)p->seqs[s].row0 + p->seqs[s].n_rows);
        if (a < b) {
            const ops_kv_view kv = model_kv_view(p->seqs[s].kv, p->il);
            for (int64_t t = a; t < b; t++) {
                prep_row(p, kv, t);
            }
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

/* an element-wise task over `work` values, on as many threads as it deserves */
static void run_rows(ops_pool *pool, ops_task_fn fn, void *ctx, int64_t work) {
    ops_pool_run_n(pool, fn, ctx,
                   ops_pool_threads_for(pool, (double)work, OPS_MIN_ELEMS_PER_THREAD));
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
        const uint32_t type = ops_act_type(cx->pool, ws[i], n_rows);
        const ops_matrix *group[8];
        float *outs[8];
        int g = 0;
        for (int j = i; j < n; j++) {
            if (!done[j] && ops_act_type(cx->pool, ws[j], n_rows) == type) {
                group[g] = ws[j];
                outs[g++] = ys[j];
                done[j] = true;
            }
        }
        ops_act a;
        ops_act_prepare(cx->pool, x, n_rows, n_in, type, cx->act, &a);
        const ops_act *as[8];
        for (int j = 0; j < g; j++) {
            as[j] = &a;
        }
        ops_matmul(cx->pool, g, group, as, outs);
    }
}

/* The buffer a product writes. */
static float *out_of(model_ctx *cx, model_role r) {
    switch (r) {
    case MODEL_ROLE_Q:
        return cx->q;
    case MODEL_ROLE_K:
        return cx->k;
    case MODEL_ROLE_V:
        return cx->v;
    case MODEL_ROLE_GATE:
    case MODEL_ROLE_SH_GATE:
        return cx->gate;
    case MODEL_ROLE_UP:
    case MODEL_ROLE_SH_UP:
        return cx->up;
    case MODEL_ROLE_ROUTER:
        return cx->router;
    case MODEL_ROLE_SH_DOWN:
        return cx->og; /* added to the experts' sum behind its gate */
    default:
        return cx->tmp; /* O and DOWN: the block's output */
    }
}

/* The buffer a group reads (not the experts', which gather their own). */
static const float *in_of(const model_ctx *cx, model_input in) {
    switch (in) {
    case MODEL_IN_NORMED:
        return cx->xn;
    case MODEL_IN_ATTN:
        return cx->att;
    case MODEL_IN_FFN_MID:
        return cx->gate;
    default:
        return NULL;
    }
}

/* One group's products over n_tok rows. */
static void products(model_ctx *cx, const model_layer *l, const model_group *g, int32_t n_tok) {
    const ops_matrix *ws[MODEL_GROUP_MAX];
    float *ys[MODEL_GROUP_MAX];
    for (int i = 0; i < g->n; i++) {
        ws[i] = &l->mat[g->member[i]];
        ys[i] = out_of(cx, g->member[i]);
    }
    matmul_shared(cx, in_of(cx, g->input), n_tok, g->n_in, g->n, ws, ys);
}

/* gate = silu(gate) * up over n values, SwiGLU (Shazeer 2020) */
static void swiglu(model_ctx *cx, float *gate, const float *up, int64_t n) {
    ffn_task ft = {.gate = gate, .up = up, .n = n};
    run_rows(cx->pool, swiglu_rows, &ft, n);
}

/* Router: softmax over every expert, the top k (ties to the lower id), then
 * renormalised or not as the architecture says (Shazeer et al. 2017; Mixtral,
 * Jiang et al. 2024; Qwen-MoE). */
static void route(const model_hparams *hp, const float *logits, int32_t *sel, float *w) {
    const int32_t ne = hp->n_expert, k = hp->n_expert_used;
    float mx = logits[0];
    for (int32_t i = 1; i < ne; i++) {
        mx = logits[i] > mx ? logits[i] : mx;
    }
    double sum = 0;
    for (int32_t i = 0; i < ne; i++) {
        sum += exp((double)(logits[i] - mx));
    }
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t i = 0; i < ne; i++) {
            bool taken = false;
            for (int32_t q = 0; q < j; q++) {
                taken |= sel[q] == i;
            }
            if (!taken && (best < 0 || logits[i] > logits[best])) {
                best = i;
            }
        }
        sel[j] = best;
        w[j] = (float)(exp((double)(logits[best] - mx)) / sum);
    }
    if (hp->moe_norm == MODEL_MOE_RENORM) {
        double s = 0;
        for (int32_t j = 0; j < k; j++) {
            s += w[j];
        }
        for (int32_t j = 0; j < k; j++) {
            w[j] = (float)(w[j] / s);
        }
    }
}

typedef struct scatter_task {
    const model_hparams *hp;
    model_ctx *cx;
    const int32_t *row_of; /* (token, slot) -> row of og */
    int32_t n_tok;
} scatter_task;

/* tmp[t] = sum over the token's experts of weight * expert output */
static void scatter_rows(void *vctx, int ith, int nth) {
    const scatter_task *s = vctx;
    const int64_t e = s->hp->n_embd;
    const int32_t k = s->hp->n_expert_used;
    int64_t lo, hi;
    ops_split(s->n_tok, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *dst = s->cx->tmp + t * e;
        memset(dst, 0, (size_t)e * sizeof *dst);
        for (int32_t j = 0; j < k; j++) {
            const float w = s->cx->sel_w[t * k + j];
            const float *src = s->cx->og + (size_t)s->row_of[t * k + j] * (size_t)e;
            for (int64_t i = 0; i < e; i++) {
                dst[i] += w * src[i];
            }
        }
    }
}

/* qwen2moe's shared expert, weighted by a sigmoid gate per token, added to tmp */
static void shared_expert(const model *m, model_ctx *cx, int32_t il, int32_t n_tok) {
    const model_hparams *hp = &m->hp;
    const model_layer *l = &m->layers[il];
    const model_layer_plan *lp = &m->plan->layers[il];
    const int64_t e = hp->n_embd;
    const float *gate_w = l->vec[MODEL_ROLE_SH_GATE_INP];
    products(cx, l, &lp->g[MODEL_GROUP_SH_GATE_UP], n_tok);
    swiglu(cx, cx->gate, cx->up, (int64_t)n_tok * hp->n_ff_shexp);
    products(cx, l, &lp->g[MODEL_GROUP_SH_DOWN], n_tok);
    for (int32_t t = 0; t < n_tok; t++) {
        const float *xn = cx->xn + (size_t)t * (size_t)e;
        double z = 0;
        for (int64_t i = 0; i < e; i++) {
            z += (double)gate_w[i] * xn[i];
        }
        const float g = (float)(1.0 / (1.0 + exp(-z)));
        float *dst = cx->tmp + (size_t)t * (size_t)e;
        const float *src = cx->og + (size_t)t * (size_t)e;
        for (int64_t i = 0; i < e; i++) {
            dst[i] += g * src[i];
        }
    }
}

/* Whether the experts of set w take the packed GEMM for these rows: when a
 * dense product of the used experts' average rows would (past OPS_ROWS_MAX
 * where the type has the few-row product, else from a panel's worth; an
 * expert with fewer then multiplies some lanes of zeros). */
static bool experts_take_panels(const model_ctx *cx, const ops_matrix *w, int32_t rows,
                                int32_t n_used) {
    return n_used > 0 && ops_act_type(cx->pool, w, rows / n_used) == OPS_ACT_PANELS;
}

/* The experts' format otherwise: an expert has a few rows (fewer than a panel
 * on average), and the few-row product takes them where the type has one (in
 * groups past QUANT_ROWS_MAX), from one row: so a token's experts compute
 * alike alone and beside other tokens (a batch's sequences, a speculative
 * pass's drafts). The type's dot product was faster on one row an expert
 * (docs/performance.md, sessions 25 and 30) but sums K-quants over
 * activations of another format (a scale per 256, not per 32), so a batch
 * changed a sequence's logits. */
static uint32_t experts_act_type(const model_ctx *cx, const ops_matrix *w) {
    return ops_act_type(cx->pool, w, 1);
}

/* Runs one or two weight sets of the used experts (gate and up, or down) over
 * their grouped rows, at most OPS_MATMUL_MAX matrices per parallel pass. Row
 * formats are sliced by rows; panels (ops_act_group_panels) by each expert's panels. */
static void experts_matmul(model_ctx *cx, int n_sets, ops_matrix *const sets[2],
                           const ops_act *const a[2], float *const out[2], int64_t out_w,
                           const int32_t *used, const int32_t *start, int32_t u0, int32_t u1,
                           int32_t n_used, int32_t rows) {
    const ops_matrix *ws[OPS_MATMUL_MAX];
    const ops_act *as[OPS_MATMUL_MAX];
    float *ys[OPS_MATMUL_MAX];
    ops_act views[OPS_MATMUL_MAX];
    int n = 0;
    size_t panel = 0; /* the first panel of expert u */
    for (int32_t u = 0; u < u1; u++) {
        const int32_t r0 = start[u], r1 = u + 1 < n_used ? start[u + 1] : rows;
        for (int k = 0; k < n_sets && u >= u0; k++) {
            views[n] = *a[k];
            if (a[k]->type == OPS_ACT_PANELS) {
                views[n].data = (const uint8_t *)a[k]->data +
                                panel * quant_panel_bytes(quant_panels(), a[k]->n_in);
            } else {
                views[n].data = (const uint8_t *)a[k]->data + (size_t)r0 * a[k]->row_bytes;
            }
            views[n].n_rows = r1 - r0;
            ws[n] = &sets[k][used[u]];
            as[n] = &views[n];
            ys[n] = out[k] + (size_t)r0 * (size_t)out_w;
            n++;
        }
        if (n > 0 && (n + n_sets > OPS_MATMUL_MAX || u + 1 == u1)) {
            ops_matmul(cx->pool, n, ws, as, ys);
            n = 0;
        }
        if (a[0]->type == OPS_ACT_PANELS) {
            panel += (size_t)((r1 - r0 + quant_panels()->lanes - 1) / quant_panels()->lanes);
        }
    }
}

/* A mixture-of-experts FFN after its router's products: only the chosen
 * experts' weights are read. Rows (token, chosen expert) are grouped by expert
 * so each expert multiplies all its tokens at once, and the experts share
 * parallel passes. */
static void experts(const model *m, model_ctx *cx, int32_t il, int32_t n_tok) {
    const model_hparams *hp = &m->hp;
    const model_layer *l = &m->layers[il];
    const int64_t e = hp->n_embd, fe = hp->n_ff_exp;
    const int32_t k = hp->n_expert_used, ne = hp->n_expert;
    const int32_t rows = n_tok * k;

    ops_matrix *const exp_gate = l->exps[MODEL_ROLE_EXP_GATE];
    ops_matrix *const exp_up = l->exps[MODEL_ROLE_EXP_UP];
    ops_matrix *const exp_down = l->exps[MODEL_ROLE_EXP_DOWN];
    for (int32_t t = 0; t < n_tok; t++) {
        route(hp, cx->router + (size_t)t * (size_t)ne, cx->sel + (size_t)t * (size_t)k,
              cx->sel_w + (size_t)t * (size_t)k);
    }
    /* counting sort of the (token, slot) pairs by expert */
    int32_t *cnt = cx->exp_cnt, *used = cx->exp_used, *start = cx->exp_start;
    memset(cnt, 0, (size_t)(ne + 1) * sizeof *cnt);
    for (int32_t i = 0; i < rows; i++) {
        cnt[cx->sel[i] + 1]++;
    }
    int32_t n_used = 0;
    for (int32_t x = 0; x < ne; x++) {
        const int32_t c = cnt[x + 1];
        if (c > 0) {
            start[n_used] = c; /* the count for now, the first row below */
            used[n_used++] = x;
        }
        if (cx->route_counts != NULL) {
            cx->route_counts[(size_t)il * (size_t)ne + (size_t)x] += (uint32_t)c;
        }
    }
    /* experts still being read go last: the others compute meanwhile */
    int32_t n_ready = n_used;
    if (cx->on_route != NULL) {
        bool *ready = cx->exp_ready;
        for (int32_t u = 0; u < n_used; u++) {
            ready[u] = true;
        }
        const int32_t late = cx->on_route(cx->route_user, il, used, n_used, ready);
        if (late > 0) {
            n_ready = 0;
            for (int32_t u = 0; u < n_used; u++) { /* stable: ready first */
                if (ready[u]) {
                    const int32_t x = used[u], c = start[u];
                    memmove(used + n_ready + 1, used + n_ready,
                            (size_t)(u - n_ready) * sizeof *used);
                    memmove(start + n_ready + 1, start + n_ready,
                            (size_t)(u - n_ready) * sizeof *start);
                    used[n_ready] = x;
                    start[n_ready++] = c;
                }
            }
        }
    }
    for (int32_t u = 0, row = 0; u < n_used; u++) { /* rows of expert used[u] from start[u] */
        const int32_t c = start[u];
        start[u] = row;
        cnt[used[u]] = row;
        row += c;
    }
    int32_t *row_of = cx->order; /* (token, slot) -> grouped row */
    for (int32_t i = 0; i < rows; i++) {
        const int32_t row = cnt[cx->sel[i]]++;
        row_of[i] = row;
        memcpy(cx->xg + (size_t)row * (size_t)e, cx->xn + (size_t)(i / k) * (size_t)e,
               (size_t)e * sizeof(float));
    }
    /* gate and up: the gathered rows converted once per activation format
     * (panels serve both: the format is the kernel family's, not the type's) */
    ops_act ag, au;
    if (experts_take_panels(cx, &exp_gate[0], rows, n_used) &&
        experts_take_panels(cx, &exp_up[0], rows, n_used)) {
        ops_act_group_panels(cx->pool, cx->xg, rows, e, start, n_used, cx->act, &ag);
        au = ag;
    } else {
        const uint32_t gate_type = experts_act_type(cx, &exp_gate[0]);
        ops_act_prepare(cx->pool, cx->xg, rows, e, gate_type, cx->act, &ag);
        au = ag;
        const uint32_t up_type = experts_act_type(cx, &exp_up[0]);
        if (up_type != ag.type) {
            ops_act_prepare(cx->pool, cx->xg, rows, e, up_type, cx->act2, &au);
        }
    }
    ops_matrix *const gu_sets[2] = {exp_gate, exp_up};
    const ops_act *const gu_acts[2] = {&ag, &au};
    float *const gu_out[2] = {cx->hg, cx->hu};
    experts_matmul(cx, 2, gu_sets, gu_acts, gu_out, fe, used, start, 0, n_ready, n_used, rows);
    if (n_ready < n_used) {
        cx->on_wait(cx->route_user, il);
        experts_matmul(cx, 2, gu_sets, gu_acts, gu_out, fe, used, start, n_ready, n_used, n_used,
                       rows);
    }
    swiglu(cx, cx->hg, cx->hu, (int64_t)rows * fe);
    ops_act ad;
    if (experts_take_panels(cx, &exp_down[0], rows, n_used)) {
        ops_act_group_panels(cx->pool, cx->hg, rows, fe, start, n_used, cx->act, &ad);
    } else {
        const uint32_t down_type = experts_act_type(cx, &exp_down[0]);
        ops_act_prepare(cx->pool, cx->hg, rows, fe, down_type, cx->act, &ad);
    }
    ops_matrix *const d_sets[2] = {exp_down, NULL};
    const ops_act *const d_acts[2] = {&ad, NULL};
    float *const d_out[2] = {cx->og, NULL};
    experts_matmul(cx, 1, d_sets, d_acts, d_out, e, used, start, 0, n_used, n_used, rows);
    scatter_task st = {.hp = hp, .cx = cx, .row_of = row_of, .n_tok = n_tok};
    run_rows(cx->pool, scatter_rows, &st, (int64_t)n_tok * k * e);
}

/* Runs the layer's operations in the plan's order (plan.c, plan_ops): for a
 * dense layer
 *   normed = RMSNorm(x); q, k, v = products; RoPE, K and V into the cache;
 *   attention; x += Wo . attention
 *   normed = RMSNorm(x); gate, up = products; SwiGLU; x += Wdown . (silu(gate) * up)
 * and for a MoE layer the router's products and the experts in place of the FFN. */
/* ops [o0, o1) of layer il */
static void layer_forward(const model *m, const model_seq *seqs, int32_t n_seqs, model_ctx *cx,
                          int32_t il, int32_t o0, int32_t o1, const int32_t *pos, int32_t n_tok,
                          float *x) {
    const model_hparams *hp = &m->hp;
    const model_layer *l = &m->layers[il];
    const model_layer_plan *lp = &m->plan->layers[il];
    const int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
    ops_pool *pool = cx->pool;
    int part = -1;
    for (int32_t i = o0; i < o1; i++) {
        const model_op *op = &lp->ops[i];
        if (cx->on_part != NULL && lp->op_part[i] > part) {
            part = lp->op_part[i];
            cx->on_part(cx->part_user, il, (model_part)part);
        }
        switch (op->kind) {
        case MODEL_OP_NORM:
            norm_all(pool, x, l->vec[op->arg], e, hp->rms_eps, n_tok, cx->xn);
            break;
        case MODEL_OP_PRODUCTS:
            products(cx, l, &lp->g[op->arg], n_tok);
            break;
        case MODEL_OP_ROPE_STORE: { /* each sequence into its own cache */
            attn_prep ap = {.m = m,
                            .l = l,
                            .cx = cx,
                            .il = il,
                            .seqs = seqs,
                            .n_seqs = n_seqs,
                            .pos = pos,
                            .n_tok = n_tok};
            run_rows(pool, prep_rows, &ap,
                     (int64_t)n_tok * (hp->n_head + hp->n_head_kv) * hp->head_dim);
            break;
        }
        case MODEL_OP_ATTEND: /* each sequence over its own cache, one job for all */
            for (int32_t s = 0; s < n_seqs; s++) {
                const size_t r0 = (size_t)seqs[s].row0;
                cx->attn_args[s] = (ops_attn_args){.q = cx->q + r0 * (size_t)qd,
                                                   .out = cx->att + r0 * (size_t)qd,
                                                   .pos = pos + r0,
                                                   .n_tok = seqs[s].n_rows,
                                                   .n_head = hp->n_head,
                                                   .n_head_kv = hp->n_head_kv,
                                                   .head_dim = hp->head_dim,
                                                   .scale = 1.0f / sqrtf((float)hp->head_dim),
                                                   .kv = model_kv_view(seqs[s].kv, il),
                                                   .scratch = cx->attn_scratch,
                                                   .scratch_stride = attn_stride(hp, cx->n_ctx)};
            }
            ops_attention_seqs(pool, cx->attn_args, n_seqs);
            break;
        case MODEL_OP_SWIGLU:
            swiglu(cx, cx->gate, cx->up, (int64_t)n_tok * lp->g[op->arg].n_in);
            break;
        case MODEL_OP_EXPERTS:
            experts(m, cx, il, n_tok);
            break;
        case MODEL_OP_SHARED_EXPERT:
            shared_expert(m, cx, il, n_tok);
            break;
        case MODEL_OP_RESIDUAL:
            ops_add(x, cx->tmp, (int64_t)n_tok * e);
            break;
        }
    }
}

lares_status model_forward_halves(const model *m, const model_seq *seqs, int32_t n_seqs,
                                  model_ctx *cx, int32_t h0, int32_t h1, const int32_t *pos,
                                  int32_t n_tok, float *x, lares_error *err) {
    const int32_t l0 = h0 / 2, l1 = (h1 + 1) / 2; /* the layers touched */
    if (n_tok < 1 || n_tok > cx->n_batch) {
        return lares_fail(err, LARES_EINVAL, "forward: %d tokens (batch holds %d)", n_tok,
                          cx->n_batch);
    }
    if (n_seqs < 1) {
        return lares_fail(err, LARES_EINVAL, "forward: no sequence");
    }
    int32_t next = 0; /* the sequences tile the rows in order */
    for (int32_t s = 0; s < n_seqs; s++) {
        const model_seq *q = &seqs[s];
        if (q->kv == NULL || q->row0 != next || q->n_rows < 1) {
            return lares_fail(err, LARES_EINVAL,
                              "forward: sequence %d holds rows [%d, %d), expected a run from %d",
                              (int)s, (int)q->row0, (int)(q->row0 + q->n_rows), (int)next);
        }
        next += q->n_rows;
        if (h0 < 0 || l0 < q->kv->l0 || l1 > q->kv->l1 || h0 >= h1) {
            const bool whole = h0 % 2 == 0 && h1 % 2 == 0;
            return lares_fail(err, LARES_EINVAL,
                              "forward: window [%d, %d)%s outside the cache's [%d, %d)",
                              whole ? h0 / 2 : h0, whole ? h1 / 2 : h1,
                              whole ? "" : " of half layers", q->kv->l0, q->kv->l1);
        }
        for (int32_t t = q->row0; t < q->row0 + q->n_rows; t++) {
            if (pos[t] < 0 || pos[t] >= q->kv->n_ctx || pos[t] >= cx->n_ctx) {
                return lares_fail(err, LARES_ERANGE,
                                  "forward: position %d outside the context of %d", pos[t],
                                  q->kv->n_ctx);
            }
        }
    }
    if (next != n_tok) {
        return lares_fail(err, LARES_EINVAL, "forward: sequences hold %d of %d rows", (int)next,
                          (int)n_tok);
    }
    for (int32_t t = 0; t < n_tok; t++) {
        ops_rope_angles((float)pos[t], m->rope_inv_freq, m->hp.n_rot,
                        cx->rope_cs + (size_t)t * (size_t)m->hp.n_rot);
    }
    for (int32_t il = l0; il < l1; il++) {
        const model_layer_plan *lp = &m->plan->layers[il];
        const int32_t o0 = 2 * il < h0 ? lp->ffn_op : 0;
        const int32_t o1 = 2 * il + 2 > h1 ? lp->ffn_op : lp->n_ops;
        if (o0 > 0 || o1 < lp->n_ops) { /* half a layer: a hook runs whole ones */
            layer_forward(m, seqs, n_seqs, cx, il, o0, o1, pos, n_tok, x);
            continue;
        }
        if (cx->on_layer != NULL) {
            bool ran = false;
            lares_status st = cx->on_layer(cx->layer_user, seqs, n_seqs, il, l1, pos, n_tok,
                                           cx->rope_cs, x, &ran, err);
            if (st != LARES_OK) {
                return st;
            }
            if (ran) {
                continue;
            }
        }
        layer_forward(m, seqs, n_seqs, cx, il, 0, lp->n_ops, pos, n_tok, x);
    }
    return LARES_OK;
}

lares_status model_forward_seqs(const model *m, const model_seq *seqs, int32_t n_seqs,
                                model_ctx *cx, int32_t l0, int32_t l1, const int32_t *pos,
                                int32_t n_tok, float *x, lares_error *err) {
    if (l0 >= l1) {
        return lares_fail(err, LARES_EINVAL, "forward: window [%d, %d) is empty", l0, l1);
    }
    return model_forward_halves(m, seqs, n_seqs, cx, 2 * l0, 2 * l1, pos, n_tok, x, err);
}

lares_status model_forward(const model *m, model_kv *kv, model_ctx *cx, int32_t l0, int32_t l1,
                           const int32_t *pos, int32_t n_tok, float *x, lares_error *err) {
    const model_seq one = {.kv = kv, .row0 = 0, .n_rows = n_tok};
    return model_forward_seqs(m, &one, 1, cx, l0, l1, pos, n_tok, x, err);
}
