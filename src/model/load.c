/*
 * Binding a GGUF file to an architecture: hyper-parameters from metadata,
 * every tensor looked up by its GGUF name, its shape and type checked, and a
 * view kept into the mapping (weights are never copied).
 */
#include "model/model.h"

#include <math.h>

/* What distinguishes the supported architectures (tensor names are shared). */
typedef struct arch_desc {
    const char *name;
    model_arch arch;
    ops_rope_mode rope_mode;
    bool qkv_bias;   /* q/k/v biases present (qwen2) */
    bool qk_norm;    /* per-head q/k RMS norms (qwen3) */
    bool moe;        /* experts required (qwen2moe, qwen3moe); llama may have them */
    bool shared_exp; /* a shared expert with a sigmoid gate (qwen2moe) */
    model_moe_norm moe_norm;
} arch_desc;

static const arch_desc arch_descs[] = {
    {"llama", MODEL_ARCH_LLAMA, OPS_ROPE_NORM, false, false, false, false, MODEL_MOE_RENORM},
    {"qwen2", MODEL_ARCH_QWEN2, OPS_ROPE_NEOX, true, false, false, false, MODEL_MOE_RENORM},
    {"qwen3", MODEL_ARCH_QWEN3, OPS_ROPE_NEOX, false, true, false, false, MODEL_MOE_RENORM},
    {"qwen2moe", MODEL_ARCH_QWEN2MOE, OPS_ROPE_NEOX, true, false, true, true, MODEL_MOE_RAW},
    {"qwen3moe", MODEL_ARCH_QWEN3MOE, OPS_ROPE_NEOX, false, true, true, false, MODEL_MOE_RENORM},
};

const char *model_arch_list(void) {
    return "llama (incl. Mistral and Mixtral-style MoE), qwen2, qwen3, qwen2moe, qwen3moe";
}

void model_free(model *m) {
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->n_owned; i++) {
        lares_free(m->owned[i]);
    }
    for (int32_t i = 0; m->layers != NULL && i < m->hp.n_layer; i++) {
        lares_free(m->layers[i].exp_gate);
        lares_free(m->layers[i].exp_up);
        lares_free(m->layers[i].exp_down);
    }
    lares_free(m->owned);
    lares_free(m->layers);
    lares_free(m->rope_inv_freq);
    lares_free(m);
}

/* ---- metadata ---- */

static lares_status key_i32(const gguf_file *f, const char *arch, const char *suffix, int32_t *out,
                            bool required, lares_error *err) {
    char key[128];
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
        return lares_fail(err, LARES_EFORMAT, "%s: %s = %" PRIu64 " is out of range",
                          gguf_path(f), key, v);
    }
    *out = (int32_t)v;
    return LARES_OK;
}

static lares_status key_f32(const gguf_file *f, const char *arch, const char *suffix, float *out,
                            bool required, lares_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    lares_status st = gguf_get_f32(f, key, out, err);
    if (st == LARES_ENOTFOUND && !required) {
        return LARES_OK;
    }
    return st;
}

static lares_status read_hparams(const gguf_file *f, const arch_desc *ad, model_hparams *hp,
                                 lares_error *err) {
    const char *a = ad->name;
    const char *path = gguf_path(f);
    lares_status st;
    hp->arch = ad->arch;
    hp->arch_name = ad->name;
    if ((st = key_i32(f, a, "block_count", &hp->n_layer, true, err)) ||
        (st = key_i32(f, a, "embedding_length", &hp->n_embd, true, err)) ||
        (st = key_i32(f, a, "feed_forward_length", &hp->n_ff, true, err)) ||
        (st = key_i32(f, a, "attention.head_count", &hp->n_head, true, err)) ||
        (st = key_i32(f, a, "context_length", &hp->n_ctx_train, true, err))) {
        return st;
    }
    hp->n_head_kv = hp->n_head;
    if ((st = key_i32(f, a, "attention.head_count_kv", &hp->n_head_kv, false, err))) {
        return st;
    }
    if (hp->n_layer < 1 || hp->n_embd < 1 || hp->n_ff < 1 || hp->n_head < 1 ||
        hp->n_head_kv < 1 || hp->n_ctx_train < 1) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: hyper-parameters out of range (layers %d, embd %d, ff %d, heads "
                          "%d/%d, context %d)",
                          path, hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv,
                          hp->n_ctx_train);
    }
    if (hp->n_head % hp->n_head_kv != 0) {
        return lares_fail(err, LARES_EFORMAT, "%s: %d heads are not a multiple of %d KV heads",
                          path, hp->n_head, hp->n_head_kv);
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = key_i32(f, a, "attention.key_length", &hp->head_dim, false, err))) {
        return st;
    }
    int32_t vlen = hp->head_dim;
    if ((st = key_i32(f, a, "attention.value_length", &vlen, false, err))) {
        return st;
    }
    if (vlen != hp->head_dim) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "%s: value heads of %d differ from key heads of %d", path, vlen,
                          hp->head_dim);
    }
    hp->n_rot = hp->head_dim;
    if ((st = key_i32(f, a, "rope.dimension_count", &hp->n_rot, false, err))) {
        return st;
    }
    if (hp->head_dim < 2 || hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0) {
        return lares_fail(err, LARES_EFORMAT, "%s: head_dim %d / rope dims %d are inconsistent",
                          path, hp->head_dim, hp->n_rot);
    }
    if ((st = key_f32(f, a, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err))) {
        return st;
    }
    hp->rope_base = 10000.0f;
    if ((st = key_f32(f, a, "rope.freq_base", &hp->rope_base, false, err))) {
        return st;
    }
    hp->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    gguf_str stype = {0};
    if (gguf_get_str(f, key, &stype, NULL) == LARES_OK && stype.len > 0 &&
        !(stype.len == 4 && memcmp(stype.ptr, "none", 4) == 0)) {
        if (!(stype.len == 6 && memcmp(stype.ptr, "linear", 6) == 0)) {
            return lares_fail(err, LARES_EUNSUPPORTED, "%s: rope scaling '%.*s' is not supported",
                              path, (int)stype.len, stype.ptr);
        }
        float factor = 1.0f;
        if ((st = key_f32(f, a, "rope.scaling.factor", &factor, true, err))) {
            return st;
        }
        if (!(factor > 0.0f)) {
            return lares_fail(err, LARES_EFORMAT, "%s: rope scaling factor %g", path, factor);
        }
        hp->rope_freq_scale = 1.0f / factor;
    }
    hp->rope_mode = ad->rope_mode;
    /* experts */
    if ((st = key_i32(f, a, "expert_count", &hp->n_expert, ad->moe, err)) ||
        (st = key_i32(f, a, "expert_used_count", &hp->n_expert_used, hp->n_expert > 0, err))) {
        return st;
    }
    if (hp->n_expert > 0) {
        hp->n_ff_exp = hp->n_ff;
        if ((st = key_i32(f, a, "expert_feed_forward_length", &hp->n_ff_exp, false, err))) {
            return st;
        }
        if (ad->shared_exp &&
            (st = key_i32(f, a, "expert_shared_feed_forward_length", &hp->n_ff_shexp, true, err))) {
            return st;
        }
        /* gate and up of every chosen expert share one ops_matmul call */
        if (hp->n_expert > 4096 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert ||
            2 * hp->n_expert_used > OPS_MATMUL_MAX || hp->n_ff_exp < 1) {
            return lares_fail(err, LARES_EUNSUPPORTED,
                              "%s: %d experts with %d used per token (expert FFN %d) are outside "
                              "what lares runs (at most %d used)",
                              path, hp->n_expert, hp->n_expert_used, hp->n_ff_exp,
                              OPS_MATMUL_MAX / 2);
        }
        hp->moe_norm = ad->moe_norm;
    }
    if (!(hp->rms_eps > 0.0f) || !(hp->rope_base > 0.0f)) {
        return lares_fail(err, LARES_EFORMAT, "%s: rms epsilon %g / rope base %g out of range",
                          path, hp->rms_eps, hp->rope_base);
    }
    return LARES_OK;
}

/* ---- tensors ---- */

static void widen_range(model_layer *l, const gguf_file *f, const gguf_tensor *t) {
    if (l == NULL) {
        return;
    }
    uint64_t lo = gguf_data_offset(f) + t->offset, hi = lo + t->nbytes;
    if (l->file_hi == 0 || lo < l->file_lo) {
        l->file_lo = lo;
    }
    if (hi > l->file_hi) {
        l->file_hi = hi;
    }
}

static lares_status find_shaped(const model *m, const char *name, int64_t ne0, int64_t ne1,
                                bool required, const gguf_tensor **out, lares_error *err) {
    const gguf_tensor *t = gguf_find_tensor(m->file, name);
    *out = NULL;
    if (t == NULL) {
        return required ? lares_fail(err, LARES_ENOTFOUND, "%s: missing tensor '%s'",
                                     gguf_path(m->file), name)
                        : LARES_OK;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: tensor '%s' is %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64
                          ", expected %" PRId64 "x%" PRId64,
                          gguf_path(m->file), name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0,
                          ne1);
    }
    if (((uintptr_t)t->data & 3u) != 0) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "%s: tensor '%s' is not 4-byte aligned in the file (general.alignment "
                          "%" PRIu64 ")",
                          gguf_path(m->file), name, gguf_alignment(m->file));
    }
    *out = t;
    return LARES_OK;
}

/* A 3-D tensor of n_expert stacked matrices (ne0 x ne1 each): one view per expert. */
static lares_status bind_experts(model *m, model_layer *l, ops_matrix **out, uint64_t *file_off,
                                 uint64_t *stride, const char *name, int64_t ne0, int64_t ne1,
                                 lares_error *err) {
    const int32_t ne2 = m->hp.n_expert;
    const gguf_tensor *t = gguf_find_tensor(m->file, name);
    if (t == NULL) {
        return lares_fail(err, LARES_ENOTFOUND, "%s: missing tensor '%s'", gguf_path(m->file),
                          name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: tensor '%s' is %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64
                          ", expected %" PRId64 "x%" PRId64 "x%d",
                          gguf_path(m->file), name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0,
                          ne1, ne2);
    }
    if (((uintptr_t)t->data & 3u) != 0) {
        return lares_fail(err, LARES_EUNSUPPORTED, "%s: tensor '%s' is not 4-byte aligned",
                          gguf_path(m->file), name);
    }
    widen_range(l, m->file, t);
    *out = lares_calloc((size_t)ne2, sizeof **out);
    if (*out == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    *stride = t->nbytes / (uint64_t)ne2;
    *file_off = gguf_data_offset(m->file) + t->offset;
    for (int32_t e = 0; e < ne2; e++) {
        lares_status st = ops_matrix_init(&(*out)[e], (const uint8_t *)t->data + e * *stride,
                                          t->type, ne0, ne1, name, err);
        if (st != LARES_OK) {
            lares_error_prefix(err, "%s: ", gguf_path(m->file));
            return st;
        }
    }
    return LARES_OK;
}

static lares_status bind_matrix(model *m, model_layer *l, ops_matrix *out, const char *name,
                                int64_t n_in, int64_t n_out, bool required, lares_error *err) {
    const gguf_tensor *t;
    lares_status st = find_shaped(m, name, n_in, n_out, required, &t, err);
    if (st != LARES_OK || t == NULL) {
        memset(out, 0, sizeof *out);
        return st;
    }
    widen_range(l, m->file, t);
    st = ops_matrix_init(out, t->data, t->type, n_in, n_out, name, err);
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s: ", gguf_path(m->file));
    }
    return st;
}

static lares_status keep_owned(model *m, void *p, size_t bytes, lares_error *err) {
    void **n = lares_realloc(m->owned, (m->n_owned + 1) * sizeof *n);
    if (n == NULL) {
        lares_free(p);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    m->owned = n;
    m->owned[m->n_owned++] = p;
    m->owned_bytes += bytes;
    return LARES_OK;
}

/* A vector of n floats: a view when stored as F32, else a counted F32 copy. */
static lares_status bind_vector(model *m, model_layer *l, const float **out, const char *name,
                                int64_t n, bool required, lares_error *err) {
    const gguf_tensor *t;
    lares_status st = find_shaped(m, name, n, 1, required, &t, err);
    *out = NULL;
    if (st != LARES_OK || t == NULL) {
        return st;
    }
    widen_range(l, m->file, t);
    if (t->type == GGUF_TYPE_F32) {
        *out = t->data;
        return LARES_OK;
    }
    const quant_traits *qt = quant_traits_of(t->type);
    if (qt == NULL || n % qt->blck_elems != 0) {
        const gguf_type_info *ti = gguf_type_info_of(t->type);
        return lares_fail(err, LARES_EUNSUPPORTED, "%s: tensor '%s' has unsupported type %s",
                          gguf_path(m->file), name, ti ? ti->name : "?");
    }
    float *v = lares_alloc_array((size_t)n, sizeof *v);
    if (v == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    qt->to_float(t->data, v, n);
    *out = v;
    return keep_owned(m, v, (size_t)n * sizeof *v, err);
}

static lares_status bind_layer(model *m, const arch_desc *ad, int il, lares_error *err) {
    const model_hparams *hp = &m->hp;
    model_layer *l = &m->layers[il];
    const int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim,
                  kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    char n[GGUF_MAX_NAME_BYTES + 1];
    lares_status st;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    if ((st = bind_vector(m, l, &l->attn_norm, NAME("attn_norm.weight"), e, true, err)) ||
        (st = bind_matrix(m, l, &l->wq, NAME("attn_q.weight"), e, qd, true, err)) ||
        (st = bind_matrix(m, l, &l->wk, NAME("attn_k.weight"), e, kvd, true, err)) ||
        (st = bind_matrix(m, l, &l->wv, NAME("attn_v.weight"), e, kvd, true, err)) ||
        (st = bind_matrix(m, l, &l->wo, NAME("attn_output.weight"), qd, e, true, err)) ||
        (st = bind_vector(m, l, &l->ffn_norm, NAME("ffn_norm.weight"), e, true, err))) {
        return st;
    }
    if (hp->n_expert == 0) {
        if ((st = bind_matrix(m, l, &l->w_gate, NAME("ffn_gate.weight"), e, hp->n_ff, true, err)) ||
            (st = bind_matrix(m, l, &l->w_up, NAME("ffn_up.weight"), e, hp->n_ff, true, err)) ||
            (st = bind_matrix(m, l, &l->w_down, NAME("ffn_down.weight"), hp->n_ff, e, true, err))) {
            return st;
        }
    } else {
        const int64_t fe = hp->n_ff_exp;
        if ((st = bind_matrix(m, l, &l->gate_inp, NAME("ffn_gate_inp.weight"), e, hp->n_expert,
                              true, err)) ||
            (st = bind_experts(m, l, &l->exp_gate, &l->exp_file_off[0], &l->exp_stride[0],
                               NAME("ffn_gate_exps.weight"), e, fe, err)) ||
            (st = bind_experts(m, l, &l->exp_up, &l->exp_file_off[1], &l->exp_stride[1],
                               NAME("ffn_up_exps.weight"), e, fe, err)) ||
            (st = bind_experts(m, l, &l->exp_down, &l->exp_file_off[2], &l->exp_stride[2],
                               NAME("ffn_down_exps.weight"), fe, e, err))) {
            return st;
        }
        if (ad->shared_exp) {
            const int64_t fs = hp->n_ff_shexp;
            if ((st = bind_vector(m, l, &l->gate_inp_sh, NAME("ffn_gate_inp_shexp.weight"), e,
                                  true, err)) ||
                (st = bind_matrix(m, l, &l->sh_gate, NAME("ffn_gate_shexp.weight"), e, fs, true,
                                  err)) ||
                (st = bind_matrix(m, l, &l->sh_up, NAME("ffn_up_shexp.weight"), e, fs, true, err)) ||
                (st = bind_matrix(m, l, &l->sh_down, NAME("ffn_down_shexp.weight"), fs, e, true,
                                  err))) {
                return st;
            }
        }
    }
    /* biases: qwen2 has them; a llama file may carry them too (some fine-tunes) */
    if ((st = bind_vector(m, l, &l->bq, NAME("attn_q.bias"), qd, ad->qkv_bias, err)) ||
        (st = bind_vector(m, l, &l->bk, NAME("attn_k.bias"), kvd, ad->qkv_bias, err)) ||
        (st = bind_vector(m, l, &l->bv, NAME("attn_v.bias"), kvd, ad->qkv_bias, err))) {
        return st;
    }
    if ((st = bind_vector(m, l, &l->q_norm, NAME("attn_q_norm.weight"), hp->head_dim, ad->qk_norm,
                          err)) ||
        (st = bind_vector(m, l, &l->k_norm, NAME("attn_k_norm.weight"), hp->head_dim, ad->qk_norm,
                          err))) {
        return st;
    }
#undef NAME
    return LARES_OK;
}

static lares_status vocab_size(const model *m, int32_t *n_vocab, lares_error *err) {
    gguf_arr toks;
    lares_status st = gguf_get_arr(m->file, "tokenizer.ggml.tokens", &toks, err);
    if (st != LARES_OK) {
        return st;
    }
    if (toks.n == 0 || toks.n > INT32_MAX) {
        return lares_fail(err, LARES_EFORMAT, "%s: %" PRIu64 " tokens in the vocabulary",
                          gguf_path(m->file), toks.n);
    }
    *n_vocab = (int32_t)toks.n;
    return LARES_OK;
}

lares_status model_load(gguf_file *f, model **out, lares_error *err) {
    gguf_str arch;
    lares_status st = gguf_get_str(f, "general.architecture", &arch, err);
    if (st != LARES_OK) {
        return st;
    }
    const arch_desc *ad = NULL;
    for (size_t i = 0; i < LARES_ARRAY_LEN(arch_descs); i++) {
        if (strlen(arch_descs[i].name) == arch.len &&
            memcmp(arch_descs[i].name, arch.ptr, (size_t)arch.len) == 0) {
            ad = &arch_descs[i];
        }
    }
    if (ad == NULL) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "%s: unknown architecture '%.*s' (lares runs: %s)", gguf_path(f),
                          (int)LARES_MIN(arch.len, 64), arch.ptr, model_arch_list());
    }
    model *m = lares_calloc(1, sizeof *m);
    if (m == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    m->file = f;
    if ((st = read_hparams(f, ad, &m->hp, err)) != LARES_OK ||
        (st = vocab_size(m, &m->hp.n_vocab, err)) != LARES_OK) {
        goto fail;
    }
    model_hparams *hp = &m->hp;
    const gguf_tensor *te;
    if ((st = find_shaped(m, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &te, err))) {
        goto fail;
    }
    const quant_traits *et = quant_traits_of(te->type);
    if (et == NULL) {
        const gguf_type_info *ti = gguf_type_info_of(te->type);
        st = lares_fail(err, LARES_EUNSUPPORTED,
                        "%s: tensor 'token_embd.weight' has type %s, which lares cannot read yet",
                        gguf_path(f), ti ? ti->name : "?");
        goto fail;
    }
    m->tok_embd = te;
    if ((st = bind_vector(m, NULL, &m->output_norm, "output_norm.weight", hp->n_embd, true, err))) {
        goto fail;
    }
    if ((st = bind_matrix(m, NULL, &m->output, "output.weight", hp->n_embd, hp->n_vocab, false,
                          err))) {
        goto fail;
    }
    if (m->output.data == NULL) { /* tied: the embedding doubles as the output matrix */
        m->output_tied = true;
        if ((st = bind_matrix(m, NULL, &m->output, "token_embd.weight", hp->n_embd, hp->n_vocab,
                              true, err))) {
            goto fail;
        }
    }
    m->layers = lares_calloc((size_t)hp->n_layer, sizeof *m->layers);
    m->rope_inv_freq = lares_alloc_array((size_t)hp->n_rot / 2, sizeof *m->rope_inv_freq);
    if (m->layers == NULL || m->rope_inv_freq == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        if ((st = bind_layer(m, ad, il, err)) != LARES_OK) {
            goto fail;
        }
    }
    /* theta_i = base^(-2i / n_rot), scaled for linear RoPE scaling, and divided
     * by per-dimension factors when the file carries them (Llama-3.1's
     * rope_freqs tensor) */
    const float *factors = NULL;
    if ((st = bind_vector(m, NULL, &factors, "rope_freqs.weight", hp->n_rot / 2, false, err))) {
        goto fail;
    }
    for (int i = 0; i < hp->n_rot / 2; i++) {
        double inv = hp->rope_freq_scale * pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (factors != NULL) {
            if (!(factors[i] > 0.0f)) {
                st = lares_fail(err, LARES_EFORMAT, "%s: rope_freqs.weight[%d] = %g", gguf_path(f),
                                i, factors[i]);
                goto fail;
            }
            inv /= factors[i];
        }
        m->rope_inv_freq[i] = (float)inv;
    }
    *out = m;
    return LARES_OK;
fail:
    model_free(m);
    return st;
}
