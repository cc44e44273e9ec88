/*
 * The model as the planner sees it: bytes and FLOPs per token of every layer
 * by weight type, and the head's share: from a file's layer plan (model/plan.h,
 * the weights the engine reads), or tensor by tensor for a named public shape
 * (shapes.c, sched_model_account).
 *
 * A matrix of n_in x n_out costs 2 * n_in * n_out FLOPs per token (one multiply
 * and one add per weight, Kaplan et al. 2020, "Scaling laws", section 2.1); a
 * 3-D expert tensor of a mixture-of-experts layer costs that for the
 * n_expert_used experts a token is routed to. Vectors (norms, biases) cost
 * bytes but no FLOPs worth modelling.
 */
#include "model/model.h"
#include "sched/sched_impl.h"

#include <stdlib.h>

void sched_model_free(sched_model *m) {
    if (m == NULL) {
        return;
    }
    lares_free(m->layers);
    lares_free(m);
}

/* "blk.N." -> N, or -1 when the name is not a layer tensor. */
static int64_t layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) {
        return -1;
    }
    const char *p = name + 4;
    int64_t v = 0;
    if (*p < '0' || *p > '9') {
        return -1;
    }
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        if (v > INT32_MAX) {
            return -1;
        }
        p++;
    }
    return *p == '.' ? v : -1;
}

_Static_assert(SCHED_PARTS == MODEL_PART_COUNT, "the planner's parts are the model's");

static void add_tensor(sched_layer *l, uint32_t type, uint64_t bytes, double flops,
                       model_part part) {
    l->bytes[type] += bytes;
    l->weight_bytes += bytes;
    l->flops[type] += flops;
    l->part_bytes[part] += bytes;
}

/* The part of a layer tensor by its name after "blk.N." (the role whose GGUF
 * name it carries); names of no role count with the attention's input. */
static model_part part_of_name(const char *rest) {
    for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
        if (strcmp(rest, model_role_name((model_role)r)) == 0) {
            return model_role_part((model_role)r);
        }
    }
    return MODEL_PART_ATTN_IN;
}

int32_t sched_layer_units(const sched_layer *l, uint64_t part_max, uint64_t *unit) {
    uint64_t sum = 0;
    for (int q = 0; q < SCHED_PARTS; q++) {
        sum += l->part_bytes[q];
    }
    if (sum != l->weight_bytes) { /* a layer described without parts: one unit */
        unit[0] = l->weight_bytes;
        return l->weight_bytes > 0 ? 1 : 0;
    }
    int32_t n = 0;
    for (int q = 0; q < SCHED_PARTS; q++) {
        const uint64_t b = l->part_bytes[q];
        if (b == 0) {
            continue;
        }
        if (n == 0 || unit[n - 1] + b > part_max) {
            unit[n++] = 0;
        }
        unit[n - 1] += b;
    }
    return n;
}

/* FLOPs per token of one tensor: 2 per weight of a matrix; experts scaled. */
static double tensor_flops(uint32_t n_dims, const int64_t *ne, int32_t n_expert, int32_t n_used) {
    if (n_dims < 2 || ne[1] <= 1) {
        return 0.0;
    }
    double f = 2.0 * (double)ne[0] * (double)ne[1];
    if (n_dims >= 3 && ne[2] > 1) {
        if (n_expert > 0 && ne[2] == n_expert && n_used > 0) {
            f *= (double)n_used;
        } else {
            f *= (double)ne[2];
        }
    }
    return f;
}

lares_status sched_model_account(sched_model *m, const char *name, uint32_t type, uint32_t n_dims,
                                 const int64_t *ne, uint64_t nbytes, int32_t n_expert,
                                 int32_t n_used, bool tied, lares_error *err) {
    if (type >= GGUF_TYPE_COUNT) {
        return lares_fail(err, LARES_EFORMAT, "tensor '%s' has type %u", name, type);
    }
    int64_t il = layer_of(name);
    if (il >= m->n_layer) {
        return lares_fail(err, LARES_EFORMAT,
                          "tensor '%s' names layer %" PRId64 " of a %d-layer model", name, il,
                          m->n_layer);
    }
    double flops = tensor_flops(n_dims, ne, n_expert, n_used);
    if (il >= 0) {
        const char *rest = strchr(name + 4, '.') + 1; /* layer_of saw "blk.N." */
        add_tensor(&m->layers[il], type, nbytes, flops, part_of_name(rest));
    } else if (strcmp(name, "token_embd.weight") == 0) {
        /* one row is read per token; the whole matrix is the output when tied */
        uint64_t rb;
        m->embd_row_bytes = gguf_row_bytes(type, ne[0], &rb) ? rb : 0;
        if (tied) {
            add_tensor(&m->head, type, nbytes, flops, MODEL_PART_ATTN_IN);
        } else {
            m->embd_bytes += nbytes;
        }
    } else {
        add_tensor(&m->head, type, nbytes, flops, MODEL_PART_ATTN_IN);
    }
    return LARES_OK;
}

/* One weight of the layer plan: its bytes, and for a matrix 2 FLOPs per weight
 * per token (stacked experts: the n_expert_used a token is routed to). */
static void add_weight(sched_layer *l, const model_weight *w, int32_t n_used, model_part part) {
    if (w->t == NULL) {
        return;
    }
    double flops = 0.0;
    if (w->form != MODEL_FORM_VECTOR) {
        flops = 2.0 * (double)w->n_in * (double)w->n_out *
                (w->form == MODEL_FORM_EXPERTS ? (double)n_used : 1.0);
    }
    add_tensor(l, w->t->type, w->bytes * (uint64_t)w->n_stack, flops, part);
}

lares_status sched_model_from_gguf(const gguf_file *f, sched_model **out, lares_error *err) {
    model_plan *p;
    lares_status st = model_plan_make(f, &p, err);
    if (st != LARES_OK) {
        return st;
    }
    const model_hparams *hp = &p->hp;
    sched_model *m = lares_calloc(1, sizeof *m);
    if (m != NULL) {
        m->layers = lares_calloc((size_t)hp->n_layer, sizeof *m->layers);
    }
    if (m == NULL || m->layers == NULL) {
        sched_model_free(m);
        model_plan_free(p);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    m->n_layer = hp->n_layer;
    m->n_embd = hp->n_embd;
    m->n_vocab = hp->n_vocab;
    m->n_head = hp->n_head;
    m->n_head_kv = hp->n_head_kv;
    m->head_dim = hp->head_dim;
    m->n_ctx_train = hp->n_ctx_train;
    gguf_str gname;
    if (gguf_get_str(f, "general.name", &gname, NULL) == LARES_OK && gname.len > 0) {
        snprintf(m->name, sizeof m->name, "%.*s", (int)LARES_MIN(gname.len, 90), gname.ptr);
    } else {
        snprintf(m->name, sizeof m->name, "%s", hp->arch_name);
    }
    for (int32_t il = 0; il < hp->n_layer; il++) {
        for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
            add_weight(&m->layers[il], &p->layers[il].w[r], hp->n_expert_used,
                       model_role_part((model_role)r));
        }
    }
    /* the head: one embedding row read per token; the whole matrix is the output when tied */
    uint64_t rb;
    m->embd_row_bytes = gguf_row_bytes(p->embd.t->type, hp->n_embd, &rb) ? rb : 0;
    if (!p->output_tied) {
        m->embd_bytes = p->embd.bytes;
    }
    add_weight(&m->head, &p->output, 0, MODEL_PART_ATTN_IN);
    add_weight(&m->head, &p->output_norm, 0, MODEL_PART_ATTN_IN);
    add_weight(&m->head, &p->rope_freqs, 0, MODEL_PART_ATTN_IN);
    m->file_bytes = gguf_file_bytes(f);
    model_plan_free(p);
    *out = m;
    return LARES_OK;
}

lares_status sched_model_from_path(const char *path, sched_model **out, lares_error *err) {
    gguf_file *f;
    lares_status st = gguf_open(path, NULL, &f, err);
    if (st != LARES_OK) {
        return st;
    }
    st = sched_model_from_gguf(f, out, err);
    gguf_close(f);
    return st;
}

uint64_t sched_layer_kv_bytes(const sched_model *m, int32_t n_ctx, uint32_t kv_elem_bytes) {
    /* K and V: n_head_kv heads of head_dim values per position */
    return 2ull * (uint64_t)m->n_head_kv * (uint64_t)m->head_dim * (uint64_t)n_ctx * kv_elem_bytes;
}

uint64_t sched_model_weight_bytes(const sched_model *m) {
    uint64_t s = m->head.weight_bytes + m->embd_bytes;
    for (int32_t il = 0; il < m->n_layer; il++) {
        s += m->layers[il].weight_bytes;
    }
    return s;
}
