/*
 * The model as the planner sees it: bytes and FLOPs per token of every layer
 * by weight type, and the head's share, from the GGUF tensor directory.
 *
 * A matrix of n_in x n_out costs 2 * n_in * n_out FLOPs per token (one multiply
 * and one add per weight, Kaplan et al. 2020, "Scaling laws", section 2.1); a
 * 3-D expert tensor of a mixture-of-experts layer costs that for the
 * n_expert_used experts a token is routed to. Vectors (norms, biases) cost
 * bytes but no FLOPs worth modelling.
 */
#include "sched/sched_impl.h"

#include <stdlib.h>

void sched_model_free(sched_model *m) {
    if (m == NULL) {
        return;
    }
    lares_free(m->layers);
    lares_free(m);
}

static lares_status arch_i32(const gguf_file *f, const char *arch, const char *suffix,
                             bool required, int32_t *out, lares_error *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint64_t v;
    lares_status st = gguf_get_u64(f, key, &v, err);
    if (st == LARES_ENOTFOUND && !required) {
        return LARES_OK;
    }
    if (st != LARES_OK) {
        return st;
    }
    if (v > INT32_MAX) {
        return lares_fail(err, LARES_EFORMAT, "%s: %s = %" PRIu64 " is out of range", gguf_path(f),
                          key, v);
    }
    *out = (int32_t)v;
    return LARES_OK;
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

static void add_tensor(sched_layer *l, uint32_t type, uint64_t bytes, double flops) {
    l->bytes[type] += bytes;
    l->weight_bytes += bytes;
    l->flops[type] += flops;
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
        add_tensor(&m->layers[il], type, nbytes, flops);
    } else if (strcmp(name, "token_embd.weight") == 0) {
        /* one row is read per token; the whole matrix is the output when tied */
        uint64_t rb;
        m->embd_row_bytes = gguf_row_bytes(type, ne[0], &rb) ? rb : 0;
        if (tied) {
            add_tensor(&m->head, type, nbytes, flops);
        } else {
            m->embd_bytes += nbytes;
        }
    } else {
        add_tensor(&m->head, type, nbytes, flops);
    }
    return LARES_OK;
}

lares_status sched_model_from_gguf(const gguf_file *f, sched_model **out, lares_error *err) {
    const char *path = gguf_path(f);
    gguf_str arch;
    lares_status st = gguf_get_str(f, "general.architecture", &arch, err);
    if (st != LARES_OK) {
        return st;
    }
    char a[64];
    if (arch.len == 0 || arch.len >= sizeof a) {
        return lares_fail(err, LARES_EFORMAT, "%s: general.architecture of %" PRIu64 " bytes", path,
                          arch.len);
    }
    memcpy(a, arch.ptr, (size_t)arch.len);
    a[arch.len] = '\0';
    sched_model *m = lares_calloc(1, sizeof *m);
    if (m == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    int32_t n_expert = 0, n_used = 0;
    if ((st = arch_i32(f, a, "block_count", true, &m->n_layer, err)) ||
        (st = arch_i32(f, a, "embedding_length", true, &m->n_embd, err)) ||
        (st = arch_i32(f, a, "attention.head_count", true, &m->n_head, err))) {
        goto fail;
    }
    m->n_head_kv = m->n_head;
    m->n_ctx_train = 0;
    if ((st = arch_i32(f, a, "attention.head_count_kv", false, &m->n_head_kv, err)) ||
        (st = arch_i32(f, a, "context_length", false, &m->n_ctx_train, err)) ||
        (st = arch_i32(f, a, "expert_count", false, &n_expert, err)) ||
        (st = arch_i32(f, a, "expert_used_count", false, &n_used, err))) {
        goto fail;
    }
    if (m->n_layer < 1 || m->n_layer > 65536 || m->n_embd < 1 || m->n_head < 1 ||
        m->n_head_kv < 1) {
        st = lares_fail(err, LARES_EFORMAT, "%s: %d layers, %d embedding, %d/%d heads", path,
                        m->n_layer, m->n_embd, m->n_head, m->n_head_kv);
        goto fail;
    }
    m->head_dim = m->n_embd / m->n_head;
    if ((st = arch_i32(f, a, "attention.key_length", false, &m->head_dim, err))) {
        goto fail;
    }
    if (m->head_dim < 1 || m->n_head_kv > m->n_head) {
        st = lares_fail(err, LARES_EFORMAT, "%s: head_dim %d with %d/%d heads", path, m->head_dim,
                        m->n_head, m->n_head_kv);
        goto fail;
    }
    gguf_str gname;
    if (gguf_get_str(f, "general.name", &gname, NULL) == LARES_OK && gname.len > 0) {
        snprintf(m->name, sizeof m->name, "%.*s", (int)LARES_MIN(gname.len, 90), gname.ptr);
    } else {
        snprintf(m->name, sizeof m->name, "%s", a);
    }
    m->layers = lares_calloc((size_t)m->n_layer, sizeof *m->layers);
    if (m->layers == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto fail;
    }
    const gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
    if (embd == NULL) {
        st = lares_fail(err, LARES_ENOTFOUND, "%s: missing tensor 'token_embd.weight'", path);
        goto fail;
    }
    m->n_vocab = embd->ne[1] > INT32_MAX ? INT32_MAX : (int32_t)embd->ne[1];
    bool tied = gguf_find_tensor(f, "output.weight") == NULL;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if ((st = sched_model_account(m, t->name, t->type, t->n_dims, t->ne, t->nbytes, n_expert,
                                      n_used, tied, err)) != LARES_OK) {
            lares_error_prefix(err, "%s: ", path);
            goto fail;
        }
    }
    for (int32_t il = 0; il < m->n_layer; il++) {
        if (m->layers[il].weight_bytes == 0) {
            st = lares_fail(err, LARES_EFORMAT, "%s: layer %d has no tensors", path, il);
            goto fail;
        }
    }
    m->file_bytes = gguf_file_bytes(f);
    *out = m;
    return LARES_OK;
fail:
    sched_model_free(m);
    return st;
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
