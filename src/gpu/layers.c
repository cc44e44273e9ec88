/*
 * Whole layers on the device (docs/gpu.md, "Whole layers"): a layer all of
 * whose matrices the placement put on the device runs there from its first
 * norm to its last residual, following the layer's own op list (plan.h) with
 * device buffers in place of model_ctx's, and the sequences' K and V rows in
 * a device cache. The hidden state crosses the bus once per run of
 * consecutive device layers, not once per product.
 *
 * The host cache stays complete: the rows a device layer writes are copied
 * back to it at the end of the run, so anything that reads the host cache
 * (a ring's transfers, a CPU pass after a device failure) sees them. A host
 * cache written behind the forward pass's back (model_kv.epoch changed) is
 * read into the device again before its next use.
 */
#include "gpu/gpu_impl.h"
#include "gpu/gpu_types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* contexts whose scores the attention kernel keeps in shared memory (cuda/layer_ops.cu) */
#define LAYERS_CTX_MAX  8192
#define LAYERS_SEQS_MAX 64 /* device caches kept: a serving session's sequences */

typedef struct dev_cache {
    const model_kv *host; /* identity of the sequence's cache; NULL: free */
    uint64_t epoch;       /* the host's epoch the device copy matches */
    uint64_t last_use;    /* gpu_layers.stamp of its last pass */
    size_t bytes;         /* of each layer's K (and V) */
    void **k, **v;        /* owned: per layer (NULL for layers not on the device) */
} dev_cache;

struct gpu_layers {
    const model *mdl;
    const gpu_device_ops *ops;
    gpu_device *dev; /* borrowed from the session */
    int32_t n_layer, n_whole;
    bool *whole;                /* owned, n_layer */
    const gpu_dev_matrix **mat; /* owned, n_layer x MODEL_ROLE_COUNT */
    void **vec;                 /* owned device copies, n_layer x MODEL_ROLE_COUNT */
    /* working buffers for cap_rows rows */
    int64_t cap_rows;
    void *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp, *act, *pos, *cs;
    size_t act_row_max;
    bool x_on_dev;
    int32_t run_first; /* the first layer of the run x is on the device for */
    uint64_t stamp;    /* passes seen (caches' last use) */
    bool off; /* given up (a device failure, a context or cache type the device layers do not
                 take): the CPU runs every layer from then on, the host caches being complete */
    uint32_t kv_type;
    dev_cache cache[LAYERS_SEQS_MAX];
    uint64_t n_layers_run;
};

static const gpu_dev_matrix **mat_of(gpu_layers *g, int32_t il) {
    return g->mat + (size_t)il * MODEL_ROLE_COUNT;
}

static void **vec_of(gpu_layers *g, int32_t il) {
    return g->vec + (size_t)il * MODEL_ROLE_COUNT;
}

bool gpu_layer_plain(const model *mdl, int32_t il) {
    const model_layer *l = &mdl->layers[il];
    const model_layer_plan *lp = &mdl->plan->layers[il];
    if (l->vec[MODEL_ROLE_Q_BIAS] != NULL || l->vec[MODEL_ROLE_K_BIAS] != NULL ||
        l->vec[MODEL_ROLE_V_BIAS] != NULL || l->vec[MODEL_ROLE_Q_NORM] != NULL ||
        l->vec[MODEL_ROLE_K_NORM] != NULL) {
        return false;
    }
    for (int32_t i = 0; i < lp->n_ops; i++) {
        const model_op *op = &lp->ops[i];
        switch (op->kind) {
        case MODEL_OP_NORM:
            if (op->arg < 0 || op->arg >= MODEL_ROLE_COUNT || l->vec[op->arg] == NULL) {
                return false;
            }
            break;
        case MODEL_OP_PRODUCTS: {
            const model_group *gr = &lp->g[op->arg];
            if (gr->input != MODEL_IN_NORMED && gr->input != MODEL_IN_ATTN &&
                gr->input != MODEL_IN_FFN_MID) {
                return false;
            }
            for (int m = 0; m < gr->n; m++) {
                const model_role r = gr->member[m];
                if ((r != MODEL_ROLE_Q && r != MODEL_ROLE_K && r != MODEL_ROLE_V &&
                     r != MODEL_ROLE_O && r != MODEL_ROLE_GATE && r != MODEL_ROLE_UP &&
                     r != MODEL_ROLE_DOWN) ||
                    !gpu_type_ok(l->mat[r].qt->type)) {
                    return false;
                }
            }
            break;
        }
        case MODEL_OP_ROPE_STORE:
        case MODEL_OP_ATTEND:
        case MODEL_OP_SWIGLU:
        case MODEL_OP_RESIDUAL:
            break;
        default: /* experts, shared experts */
            return false;
        }
    }
    return lp->n_ops > 0;
}

/* Whether layer il runs whole here: plain, and every product's matrix uploaded. */
static bool eligible(const model *mdl, int32_t il, const gpu_dev_matrix *const *mat) {
    if (!gpu_layer_plain(mdl, il)) {
        return false;
    }
    const model_layer_plan *lp = &mdl->plan->layers[il];
    for (int32_t i = 0; i < lp->n_ops; i++) {
        const model_op *op = &lp->ops[i];
        for (int m = 0; op->kind == MODEL_OP_PRODUCTS && m < lp->g[op->arg].n; m++) {
            if (mat[lp->g[op->arg].member[m]] == NULL) {
                return false;
            }
        }
    }
    return true;
}

void gpu_layers_free(gpu_layers *g) {
    if (g == NULL) {
        return;
    }
    const gpu_device_ops *o = g->ops;
    for (int i = 0; i < LAYERS_SEQS_MAX; i++) {
        for (int32_t il = 0; g->cache[i].k != NULL && il < g->n_layer; il++) {
            o->release(g->dev, g->cache[i].k[il]);
            o->release(g->dev, g->cache[i].v[il]);
        }
        lares_free(g->cache[i].k);
        lares_free(g->cache[i].v);
    }
    void *bufs[] = {g->x,    g->xn, g->q,   g->k,   g->v,   g->att,
                    g->gate, g->up, g->tmp, g->act, g->pos, g->cs};
    for (size_t i = 0; i < LARES_ARRAY_LEN(bufs); i++) {
        o->release(g->dev, bufs[i]);
    }
    for (size_t i = 0; g->vec != NULL && i < (size_t)g->n_layer * MODEL_ROLE_COUNT; i++) {
        o->release(g->dev, g->vec[i]);
    }
    lares_free(g->vec);
    lares_free(g->mat);
    lares_free(g->whole);
    lares_free(g);
}

lares_status gpu_layers_create(const model *mdl, const gpu_device_ops *ops, gpu_device *dev,
                               const gpu_dev_matrix *mats, size_t n_mats, gpu_layers **out,
                               lares_error *err) {
    *out = NULL;
    if (ops->alloc == NULL) {
        return LARES_OK; /* a device without layer ops: products only */
    }
    const model_hparams *hp = &mdl->hp;
    gpu_layers *g = lares_calloc(1, sizeof(*g));
    if (g == NULL) {
        return lares_fail(err, LARES_ENOMEM, "gpu layers: out of memory");
    }
    g->mdl = mdl;
    g->ops = ops;
    g->dev = dev;
    g->n_layer = hp->n_layer;
    g->whole = lares_calloc((size_t)hp->n_layer, sizeof(bool));
    g->mat = lares_calloc((size_t)hp->n_layer * MODEL_ROLE_COUNT, sizeof(*g->mat));
    g->vec = lares_calloc((size_t)hp->n_layer * MODEL_ROLE_COUNT, sizeof(*g->vec));
    if (g->whole == NULL || g->mat == NULL || g->vec == NULL) {
        gpu_layers_free(g);
        return lares_fail(err, LARES_ENOMEM, "gpu layers: out of memory");
    }
    lares_status st = LARES_OK;
    for (int32_t il = 0; il < hp->n_layer && st == LARES_OK; il++) {
        const model_layer *l = &mdl->layers[il];
        const model_layer_plan *lp = &mdl->plan->layers[il];
        const gpu_dev_matrix **mat = mat_of(g, il);
        for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
            if (lp->w[r].form == MODEL_FORM_MATRIX && l->mat[r].data != NULL) {
                mat[r] = gpu_dev_matrix_find(mats, n_mats, &l->mat[r]);
            }
        }
        if (!eligible(mdl, il, mat)) {
            continue;
        }
        void **vec = vec_of(g, il);
        for (int32_t i = 0; i < lp->n_ops && st == LARES_OK; i++) {
            const model_op *op = &lp->ops[i];
            if (op->kind == MODEL_OP_NORM && vec[op->arg] == NULL) {
                st = ops->upload(dev, l->vec[op->arg], sizeof(float) * (size_t)hp->n_embd,
                                 &vec[op->arg], err);
            }
        }
        if (st == LARES_OK) {
            g->whole[il] = true;
            g->n_whole++;
        }
    }
    if (st != LARES_OK || g->n_whole == 0) {
        gpu_layers_free(g);
        return st;
    }
    /* the widest activation row any product reads */
    const int64_t widest = LARES_MAX(LARES_MAX((int64_t)hp->n_embd, (int64_t)hp->n_ff),
                                     (int64_t)hp->n_head * hp->head_dim);
    g->act_row_max = LARES_MAX(quant_row_bytes(GGUF_TYPE_Q8_K, (widest + 255) / 256 * 256),
                               quant_row_bytes(GGUF_TYPE_Q8_0, (widest + 31) / 32 * 32));
    g->act_row_max = LARES_MAX(g->act_row_max, sizeof(float) * (size_t)widest);
    *out = g;
    return LARES_OK;
}

int32_t gpu_layers_whole(const gpu_layers *g) {
    return g != NULL ? g->n_whole : 0;
}

bool gpu_layers_holds(const gpu_layers *g, int32_t il) {
    return g != NULL && il >= 0 && il < g->n_layer && g->whole[il];
}

uint64_t gpu_layers_run_count(const gpu_layers *g) {
    return g != NULL ? g->n_layers_run : 0;
}

/* working buffers for n rows */
static lares_status reserve(gpu_layers *g, int64_t n, lares_error *err) {
    if (n <= g->cap_rows) {
        return LARES_OK;
    }
    const model_hparams *hp = &g->mdl->hp;
    const size_t e = (size_t)hp->n_embd, qd = (size_t)hp->n_head * (size_t)hp->head_dim,
                 kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim, ff = (size_t)hp->n_ff;
    void **bufs[] = {&g->x,    &g->xn, &g->q,   &g->k,   &g->v,   &g->att,
                     &g->gate, &g->up, &g->tmp, &g->act, &g->pos, &g->cs};
    const size_t f = sizeof(float), rows = (size_t)n;
    const size_t bytes[] = {
        f * e * rows,          f * e * rows,           f * qd * rows,
        f * kvd * rows,        f * kvd * rows,         f * qd * rows,
        f * ff * rows,         f * ff * rows,          f * e * rows,
        g->act_row_max * rows, sizeof(int32_t) * rows, f * (size_t)hp->n_rot * rows};
    for (size_t i = 0; i < LARES_ARRAY_LEN(bufs); i++) {
        g->ops->release(g->dev, *bufs[i]);
        *bufs[i] = NULL;
    }
    g->cap_rows = 0;
    for (size_t i = 0; i < LARES_ARRAY_LEN(bufs); i++) {
        lares_status st = g->ops->alloc(g->dev, bytes[i] > 0 ? bytes[i] : 1, bufs[i], err);
        if (st != LARES_OK) {
            return st;
        }
    }
    g->cap_rows = n;
    return LARES_OK;
}

/* the device cache of a host cache, created or refreshed from the host: the
 * rows before `from`, the first position this pass writes (the pass writes
 * the rest before it reads them) */
static lares_status cache_of(gpu_layers *g, const model_kv *kv, int32_t from, dev_cache **out,
                             lares_error *err) {
    dev_cache *c = NULL, *free_slot = NULL, *lru = NULL;
    for (int i = 0; i < LAYERS_SEQS_MAX; i++) {
        dev_cache *ci = &g->cache[i];
        if (ci->host == kv) {
            c = ci;
            break;
        }
        if (ci->host == NULL && free_slot == NULL) {
            free_slot = ci;
        }
        if (ci->host != NULL && ci->last_use != g->stamp &&
            (lru == NULL || ci->last_use < lru->last_use)) {
            lru = ci;
        }
    }
    const size_t row = model_kv_row_bytes(kv), bytes = row * (size_t)kv->n_ctx;
    if (c == NULL) {
        /* a new sequence: a free slot, else the one unused longest (its
         * sequence is gone or will be read in again from its host cache) */
        c = free_slot != NULL ? free_slot : lru;
        if (c == NULL) {
            return lares_fail(err, LARES_ENOMEM, "gpu layers: more than %d sequences in a pass",
                              LAYERS_SEQS_MAX);
        }
        if (c->k != NULL && c->bytes != bytes) {
            for (int32_t il = 0; il < g->n_layer; il++) {
                g->ops->release(g->dev, c->k[il]);
                g->ops->release(g->dev, c->v[il]);
                c->k[il] = c->v[il] = NULL;
            }
        }
        c->host = NULL;
        c->bytes = bytes;
        if (c->k == NULL) {
            c->k = lares_calloc((size_t)g->n_layer, sizeof(void *));
            c->v = lares_calloc((size_t)g->n_layer, sizeof(void *));
            if (c->k == NULL || c->v == NULL) {
                return lares_fail(err, LARES_ENOMEM, "gpu layers: out of memory");
            }
        }
        for (int32_t il = kv->l0; il < kv->l1; il++) {
            if (!g->whole[il]) {
                continue;
            }
            lares_status st =
                c->k[il] == NULL ? g->ops->alloc(g->dev, bytes, &c->k[il], err) : LARES_OK;
            if (st == LARES_OK && c->v[il] == NULL) {
                st = g->ops->alloc(g->dev, bytes, &c->v[il], err);
            }
            if (st != LARES_OK) {
                lares_error_prefix(err, "gpu layers: the KV cache of layer %d: ", (int)il);
                return st;
            }
        }
        c->host = kv;
        c->epoch = kv->epoch - 1; /* read the host's rows below */
    }
    if (c->epoch != kv->epoch) {
        for (int32_t il = kv->l0; il < kv->l1; il++) {
            if (!g->whole[il]) {
                continue;
            }
            const ops_kv_view hv = model_kv_view(kv, il);
            const size_t n = row * (size_t)from;
            lares_status st = n > 0 ? g->ops->put(g->dev, c->k[il], hv.k, n, err) : LARES_OK;
            if (st == LARES_OK && n > 0) {
                st = g->ops->put(g->dev, c->v[il], hv.v, n, err);
            }
            if (st != LARES_OK) {
                return st;
            }
        }
        c->epoch = kv->epoch;
    }
    c->last_use = g->stamp;
    *out = c;
    return LARES_OK;
}

static float *out_buf(gpu_layers *g, model_role r) {
    switch (r) {
    case MODEL_ROLE_Q:
        return g->q;
    case MODEL_ROLE_K:
        return g->k;
    case MODEL_ROLE_V:
        return g->v;
    case MODEL_ROLE_GATE:
        return g->gate;
    case MODEL_ROLE_UP:
        return g->up;
    default:
        return g->tmp; /* O and DOWN */
    }
}

static const float *in_buf(gpu_layers *g, model_input in) {
    return in == MODEL_IN_ATTN ? g->att : in == MODEL_IN_FFN_MID ? g->gate : g->xn;
}

/* one group's products: activations in each distinct vec_dot_type, once */
static lares_status products(gpu_layers *g, int32_t il, const model_group *gr, int32_t n_tok,
                             lares_error *err) {
    const gpu_dev_matrix *const *mat = mat_of(g, il);
    const float *in = in_buf(g, gr->input);
    uint32_t have = UINT32_MAX;
    for (int i = 0; i < gr->n; i++) {
        const gpu_dev_matrix *w = mat[gr->member[i]];
        const uint32_t at = quant_traits_ref(w->type)->vec_dot_type;
        const void *act = in;
        size_t row_bytes = sizeof(float) * (size_t)gr->n_in;
        if (at != GGUF_TYPE_F32) {
            row_bytes = quant_row_bytes(at, gr->n_in);
            if (at != have) {
                lares_status st = g->ops->quant(g->dev, in, n_tok, gr->n_in, at, g->act, err);
                if (st != LARES_OK) {
                    return st;
                }
                have = at;
            }
            act = g->act;
        }
        lares_status st = g->ops->mm(g->dev, w->dev, w->type, w->n_in, w->n_out, act, row_bytes,
                                     n_tok, out_buf(g, gr->member[i]), err);
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

/* layer il on the device, x there */
static lares_status layer(gpu_layers *g, const model_seq *seqs, int32_t n_seqs, int32_t il,
                          dev_cache *const *caches, const int32_t *pos, int32_t n_tok,
                          lares_error *err) {
    const model_hparams *hp = &g->mdl->hp;
    const model_layer_plan *lp = &g->mdl->plan->layers[il];
    void **vec = vec_of(g, il);
    const gpu_device_ops *o = g->ops;
    const int64_t e = hp->n_embd, hd = hp->head_dim, qd = (int64_t)hp->n_head * hd,
                  kvd = (int64_t)hp->n_head_kv * hd;
    const bool f16 = g->kv_type == GGUF_TYPE_F16;
    lares_status st = LARES_OK;
    for (int32_t i = 0; i < lp->n_ops && st == LARES_OK; i++) {
        const model_op *op = &lp->ops[i];
        switch (op->kind) {
        case MODEL_OP_NORM:
            st = o->norm(g->dev, g->x, vec[op->arg], e, n_tok, hp->rms_eps, g->xn, err);
            break;
        case MODEL_OP_PRODUCTS:
            st = products(g, il, &lp->g[op->arg], n_tok, err);
            break;
        case MODEL_OP_ROPE_STORE:
            st = o->rope(g->dev, g->q, n_tok, hp->n_head, hd, hp->n_rot, g->cs, hp->rope_mode, err);
            if (st == LARES_OK) {
                st = o->rope(g->dev, g->k, n_tok, hp->n_head_kv, hd, hp->n_rot, g->cs,
                             hp->rope_mode, err);
            }
            for (int32_t s = 0; s < n_seqs && st == LARES_OK; s++) {
                const size_t r0 = (size_t)seqs[s].row0;
                const int32_t *sp = (const int32_t *)g->pos + r0;
                st = o->kv_store(g->dev, (const float *)g->k + r0 * (size_t)kvd, seqs[s].n_rows,
                                 kvd, sp, caches[s]->k[il], f16, err);
                if (st == LARES_OK) {
                    st = o->kv_store(g->dev, (const float *)g->v + r0 * (size_t)kvd, seqs[s].n_rows,
                                     kvd, sp, caches[s]->v[il], f16, err);
                }
            }
            break;
        case MODEL_OP_ATTEND:
            for (int32_t s = 0; s < n_seqs && st == LARES_OK; s++) {
                const size_t r0 = (size_t)seqs[s].row0;
                int32_t top = 0;
                for (int32_t t = 0; t < seqs[s].n_rows; t++) {
                    top = LARES_MAX(top, pos[r0 + (size_t)t] + 1);
                }
                const gpu_attend_args a = {.q = (const float *)g->q + r0 * (size_t)qd,
                                           .out = (float *)g->att + r0 * (size_t)qd,
                                           .pos = (const int32_t *)g->pos + r0,
                                           .n_tok = seqs[s].n_rows,
                                           .n_head = hp->n_head,
                                           .n_head_kv = hp->n_head_kv,
                                           .head_dim = hd,
                                           .scale = 1.0f / sqrtf((float)hd),
                                           .k = caches[s]->k[il],
                                           .v = caches[s]->v[il],
                                           .kv_f16 = f16,
                                           .n_kv_max = top};
                st = o->attend(g->dev, &a, err);
            }
            break;
        case MODEL_OP_SWIGLU:
            st = o->swiglu(g->dev, g->gate, g->up, (int64_t)n_tok * lp->g[op->arg].n_in, err);
            break;
        case MODEL_OP_RESIDUAL:
            st = o->add(g->dev, g->x, g->tmp, (int64_t)n_tok * e, err);
            break;
        default:
            st = lares_fail(err, LARES_EUNSUPPORTED, "gpu layers: op %d", (int)op->kind);
        }
    }
    return st;
}

/* the rows this pass wrote into the device caches of layers [il0, il1), back
 * into the host caches (consecutive positions in one copy) */
static lares_status mirror(gpu_layers *g, const model_seq *seqs, int32_t n_seqs,
                           dev_cache *const *caches, int32_t il0, int32_t il1, const int32_t *pos,
                           lares_error *err) {
    for (int32_t s = 0; s < n_seqs; s++) {
        const model_kv *kv = seqs[s].kv;
        const size_t row = model_kv_row_bytes(kv);
        for (int32_t il = il0; il < il1; il++) {
            const ops_kv_view hv = model_kv_view(kv, il);
            for (int32_t t = 0; t < seqs[s].n_rows;) {
                const int32_t p0 = pos[seqs[s].row0 + t];
                int32_t n = 1;
                while (t + n < seqs[s].n_rows && pos[seqs[s].row0 + t + n] == p0 + n) {
                    n++;
                }
                const size_t off = (size_t)p0 * row, bytes = (size_t)n * row;
                lares_status st = g->ops->get(g->dev, (uint8_t *)hv.k + off,
                                              (const uint8_t *)caches[s]->k[il] + off, bytes, err);
                if (st == LARES_OK) {
                    st = g->ops->get(g->dev, (uint8_t *)hv.v + off,
                                     (const uint8_t *)caches[s]->v[il] + off, bytes, err);
                }
                if (st != LARES_OK) {
                    return st;
                }
                t += n;
            }
        }
    }
    return LARES_OK;
}

lares_status gpu_layers_forward(void *user, const model_seq *seqs, int32_t n_seqs, int32_t il,
                                int32_t l_end, const int32_t *pos, int32_t n_tok,
                                const float *rope_cs, float *x, bool *ran, lares_error *err) {
    gpu_layers *g = user;
    *ran = false;
    if (!gpu_layers_holds(g, il) || g->off) {
        return LARES_OK;
    }
    const model_hparams *hp = &g->mdl->hp;
    dev_cache *caches[LAYERS_SEQS_MAX];
    lares_status st = LARES_OK;
    if (!g->x_on_dev) {
        /* what the device layers do not take: the CPU runs them all from now
         * on (nothing was written only to the device: the host caches are
         * complete) */
        const char *why =
            n_seqs > LAYERS_SEQS_MAX ? "more sequences in a pass than it keeps" : NULL;
        for (int32_t s = 0; s < n_seqs && why == NULL; s++) {
            const model_kv *kv = seqs[s].kv;
            why = kv->n_ctx > LAYERS_CTX_MAX                  ? "a context over 8192"
                  : g->kv_type != 0 && kv->type != g->kv_type ? "caches of two types"
                                                              : NULL;
            if (g->kv_type == 0) {
                g->kv_type = kv->type;
            }
        }
        if (why != NULL) {
            lares_log(LARES_LOG_WARN, "gpu: layers run product by product from now on (%s)", why);
            g->off = true;
            return LARES_OK;
        }
        g->stamp++; /* a new run: caches in use now are not evicted by this pass */
    }
    for (int32_t s = 0; s < n_seqs && st == LARES_OK; s++) {
        int32_t from = INT32_MAX;
        for (int32_t t = 0; t < seqs[s].n_rows; t++) {
            from = LARES_MIN(from, pos[seqs[s].row0 + t]);
        }
        st = cache_of(g, seqs[s].kv, from, &caches[s], err);
    }
    /* the first layer of a run: the hidden state, positions and angles over */
    if (st == LARES_OK && !g->x_on_dev) {
        st = reserve(g, n_tok, err);
        const size_t e = (size_t)hp->n_embd, nt = (size_t)n_tok;
        if (st == LARES_OK) {
            st = g->ops->put(g->dev, g->x, x, sizeof(float) * e * nt, err);
        }
        if (st == LARES_OK) {
            st = g->ops->put(g->dev, g->pos, pos, sizeof(int32_t) * nt, err);
        }
        if (st == LARES_OK) {
            st = g->ops->put(g->dev, g->cs, rope_cs, sizeof(float) * (size_t)hp->n_rot * nt, err);
        }
        g->x_on_dev = st == LARES_OK;
        g->run_first = il;
    }
    if (st == LARES_OK) {
        st = layer(g, seqs, n_seqs, il, caches, pos, n_tok, err);
    }
    const bool last = il + 1 >= l_end || !g->whole[il + 1];
    if (st == LARES_OK && last) {
        st = g->ops->get(g->dev, x, g->x, sizeof(float) * (size_t)hp->n_embd * (size_t)n_tok, err);
        if (st == LARES_OK) {
            st = mirror(g, seqs, n_seqs, caches, g->run_first, il + 1, pos, err);
        }
        g->x_on_dev = false;
    }
    if (st != LARES_OK) {
        /* this pass fails; later ones run on the CPU from the host caches,
         * which hold every row the device wrote before */
        lares_log(LARES_LOG_WARN,
                  "gpu: a layer on the device failed (%s); the CPU runs them "
                  "from now on",
                  err != NULL ? err->msg : "?");
        g->off = true;
        g->x_on_dev = false;
        return st;
    }
    g->n_layers_run++;
    *ran = true;
    return LARES_OK;
}
