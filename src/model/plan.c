/*
 * The layer plan (plan.h): the hyper-parameters read once from the file's
 * metadata, and each layer's weights, groups of products and operations, from
 * one table of the weights a layer may have (roles[] below). Adding a weight
 * to an architecture is one row there plus what the forward pass does with it.
 */
#include "model/model.h"

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
    if (hp->n_layer < 1 || hp->n_layer > 65536 || hp->n_embd < 1 || hp->n_ff < 1 ||
        hp->n_head < 1 || hp->n_head_kv < 1 || hp->n_ctx_train < 1) {
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

static lares_status vocab_size(const gguf_file *f, int32_t *n_vocab, lares_error *err) {
    gguf_arr toks;
    lares_status st = gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, err);
    if (st != LARES_OK) {
        return st;
    }
    if (toks.n == 0 || toks.n > INT32_MAX) {
        return lares_fail(err, LARES_EFORMAT, "%s: %" PRIu64 " tokens in the vocabulary",
                          gguf_path(f), toks.n);
    }
    *n_vocab = (int32_t)toks.n;
    return LARES_OK;
}

/* ---- the layer table ---- */

/* The sizes a weight's shape is made of. */
typedef enum dim {
    DIM_ONE = 0,
    DIM_EMBD,
    DIM_Q,      /* n_head * head_dim */
    DIM_KV,     /* n_head_kv * head_dim */
    DIM_FF,
    DIM_HEAD,
    DIM_EXPERTS,
    DIM_FF_EXP,
    DIM_FF_SH,
} dim;

/* When a layer has a weight: always, by the kind of FFN, or by the
 * architecture (looked up in every file, required where the architecture has it). */
typedef enum need {
    NEED_ALWAYS = 0,
    NEED_DENSE,    /* a dense FFN */
    NEED_MOE,      /* experts */
    NEED_SHARED,   /* experts plus a shared expert (qwen2moe) */
    NEED_QKV_BIAS, /* required by qwen2; a llama fine-tune may carry them */
    NEED_QK_NORM,  /* required by qwen3 */
} need;

typedef struct role_row {
    const char *name; /* after "blk.N." */
    model_form form;
    dim in, out;
    need need;
} role_row;

/* In the order the loader looks them up, so a file missing several names the first. */
static const role_row roles[MODEL_ROLE_COUNT] = {
    [MODEL_ROLE_ATTN_NORM] = {"attn_norm.weight", MODEL_FORM_VECTOR, DIM_EMBD, DIM_ONE,
                              NEED_ALWAYS},
    [MODEL_ROLE_Q] = {"attn_q.weight", MODEL_FORM_MATRIX, DIM_EMBD, DIM_Q, NEED_ALWAYS},
    [MODEL_ROLE_K] = {"attn_k.weight", MODEL_FORM_MATRIX, DIM_EMBD, DIM_KV, NEED_ALWAYS},
    [MODEL_ROLE_V] = {"attn_v.weight", MODEL_FORM_MATRIX, DIM_EMBD, DIM_KV, NEED_ALWAYS},
    [MODEL_ROLE_O] = {"attn_output.weight", MODEL_FORM_MATRIX, DIM_Q, DIM_EMBD, NEED_ALWAYS},
    [MODEL_ROLE_FFN_NORM] = {"ffn_norm.weight", MODEL_FORM_VECTOR, DIM_EMBD, DIM_ONE, NEED_ALWAYS},
    [MODEL_ROLE_GATE] = {"ffn_gate.weight", MODEL_FORM_MATRIX, DIM_EMBD, DIM_FF, NEED_DENSE},
    [MODEL_ROLE_UP] = {"ffn_up.weight", MODEL_FORM_MATRIX, DIM_EMBD, DIM_FF, NEED_DENSE},
    [MODEL_ROLE_DOWN] = {"ffn_down.weight", MODEL_FORM_MATRIX, DIM_FF, DIM_EMBD, NEED_DENSE},
    [MODEL_ROLE_ROUTER] = {"ffn_gate_inp.weight", MODEL_FORM_MATRIX, DIM_EMBD, DIM_EXPERTS,
                           NEED_MOE},
    [MODEL_ROLE_EXP_GATE] = {"ffn_gate_exps.weight", MODEL_FORM_EXPERTS, DIM_EMBD, DIM_FF_EXP,
                             NEED_MOE},
    [MODEL_ROLE_EXP_UP] = {"ffn_up_exps.weight", MODEL_FORM_EXPERTS, DIM_EMBD, DIM_FF_EXP,
                           NEED_MOE},
    [MODEL_ROLE_EXP_DOWN] = {"ffn_down_exps.weight", MODEL_FORM_EXPERTS, DIM_FF_EXP, DIM_EMBD,
                             NEED_MOE},
    [MODEL_ROLE_SH_GATE_INP] = {"ffn_gate_inp_shexp.weight", MODEL_FORM_VECTOR, DIM_EMBD, DIM_ONE,
                                NEED_SHARED},
    [MODEL_ROLE_SH_GATE] = {"ffn_gate_shexp.weight", MODEL_FORM_MATRIX, DIM_EMBD, DIM_FF_SH,
                            NEED_SHARED},
    [MODEL_ROLE_SH_UP] = {"ffn_up_shexp.weight", MODEL_FORM_MATRIX, DIM_EMBD, DIM_FF_SH,
                          NEED_SHARED},
    [MODEL_ROLE_SH_DOWN] = {"ffn_down_shexp.weight", MODEL_FORM_MATRIX, DIM_FF_SH, DIM_EMBD,
                            NEED_SHARED},
    [MODEL_ROLE_Q_BIAS] = {"attn_q.bias", MODEL_FORM_VECTOR, DIM_Q, DIM_ONE, NEED_QKV_BIAS},
    [MODEL_ROLE_K_BIAS] = {"attn_k.bias", MODEL_FORM_VECTOR, DIM_KV, DIM_ONE, NEED_QKV_BIAS},
    [MODEL_ROLE_V_BIAS] = {"attn_v.bias", MODEL_FORM_VECTOR, DIM_KV, DIM_ONE, NEED_QKV_BIAS},
    [MODEL_ROLE_Q_NORM] = {"attn_q_norm.weight", MODEL_FORM_VECTOR, DIM_HEAD, DIM_ONE,
                           NEED_QK_NORM},
    [MODEL_ROLE_K_NORM] = {"attn_k_norm.weight", MODEL_FORM_VECTOR, DIM_HEAD, DIM_ONE,
                           NEED_QK_NORM},
};

const char *model_role_name(model_role r) {
    return r >= 0 && r < MODEL_ROLE_COUNT ? roles[r].name : "?";
}

model_part model_role_part(model_role r) {
    switch (r) {
    case MODEL_ROLE_O:
        return MODEL_PART_ATTN_OUT;
    case MODEL_ROLE_FFN_NORM:
    case MODEL_ROLE_GATE:
    case MODEL_ROLE_UP:
    case MODEL_ROLE_ROUTER:
    case MODEL_ROLE_EXP_GATE:
    case MODEL_ROLE_EXP_UP:
    case MODEL_ROLE_EXP_DOWN:
        return MODEL_PART_FFN_IN;
    case MODEL_ROLE_DOWN:
    case MODEL_ROLE_SH_GATE_INP:
    case MODEL_ROLE_SH_GATE:
    case MODEL_ROLE_SH_UP:
    case MODEL_ROLE_SH_DOWN:
        return MODEL_PART_FFN_OUT;
    default: /* the attention's norm, input products, biases and per-head norms */
        return MODEL_PART_ATTN_IN;
    }
}

static int64_t dim_of(const model_hparams *hp, dim d) {
    switch (d) {
    case DIM_ONE:
        return 1;
    case DIM_EMBD:
        return hp->n_embd;
    case DIM_Q:
        return (int64_t)hp->n_head * hp->head_dim;
    case DIM_KV:
        return (int64_t)hp->n_head_kv * hp->head_dim;
    case DIM_FF:
        return hp->n_ff;
    case DIM_HEAD:
        return hp->head_dim;
    case DIM_EXPERTS:
        return hp->n_expert;
    case DIM_FF_EXP:
        return hp->n_ff_exp;
    case DIM_FF_SH:
        return hp->n_ff_shexp;
    }
    return 0;
}

/* Whether a layer looks the weight up, and whether a file without it is an error. */
static void need_of(const arch_desc *ad, const model_hparams *hp, need n, bool *look,
                    bool *required) {
    const bool moe = hp->n_expert > 0;
    switch (n) {
    case NEED_ALWAYS:
        *look = *required = true;
        return;
    case NEED_DENSE:
        *look = *required = !moe;
        return;
    case NEED_MOE:
        *look = *required = moe;
        return;
    case NEED_SHARED:
        *look = *required = moe && ad->shared_exp;
        return;
    case NEED_QKV_BIAS:
        *look = true;
        *required = ad->qkv_bias;
        return;
    case NEED_QK_NORM:
        *look = true;
        *required = ad->qk_norm;
        return;
    }
    *look = *required = false;
}

/* Finds `name` with n_in x n_out (x n_stack for stacked experts) elements. */
static lares_status find_weight(const gguf_file *f, const char *name, model_form form, int64_t n_in,
                                int64_t n_out, int32_t n_stack, bool required, model_weight *w,
                                lares_error *err) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (t == NULL) {
        return required ? lares_fail(err, LARES_ENOTFOUND, "%s: missing tensor '%s'",
                                     gguf_path(f), name)
                        : LARES_OK;
    }
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_stack || t->ne[3] != 1) {
        char want[64];
        int k = snprintf(want, sizeof want, "%" PRId64 "x%" PRId64, n_in, n_out);
        if (form == MODEL_FORM_EXPERTS) {
            snprintf(want + k, sizeof want - (size_t)k, "x%d", (int)n_stack);
        }
        return lares_fail(err, LARES_EFORMAT,
                          "%s: tensor '%s' is %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64
                          ", expected %s",
                          gguf_path(f), name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], want);
    }
    if (((uintptr_t)t->data & 3u) != 0) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "%s: tensor '%s' is not 4-byte aligned in the file (general.alignment "
                          "%" PRIu64 ")",
                          gguf_path(f), name, gguf_alignment(f));
    }
    if (t->nbytes % (uint64_t)n_stack != 0) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: tensor '%s' of %" PRIu64 " bytes does not split into %d experts",
                          gguf_path(f), name, t->nbytes, (int)n_stack);
    }
    w->t = t;
    w->form = form;
    w->n_in = n_in;
    w->n_out = n_out;
    w->n_stack = n_stack;
    w->lo = gguf_data_offset(f) + t->offset; /* the reader checked it against the file */
    w->bytes = t->nbytes / (uint64_t)n_stack;
    return LARES_OK;
}

static void add_group(model_layer_plan *lp, model_group_id id, model_input in, int64_t n_in,
                      int32_t rows, bool on_device, int n, const model_role *members) {
    model_group *g = &lp->g[id];
    g->input = in;
    g->n_in = n_in;
    g->rows = rows;
    g->on_device = on_device;
    for (int i = 0; i < n; i++) {
        if (lp->w[members[i]].t != NULL) {
            g->member[g->n++] = members[i];
        }
    }
}

static void add_op(model_layer_plan *lp, model_op_kind kind, int32_t arg) {
    /* at most 12 ops a layer: MODEL_OPS_MAX has room */
    lp->ops[lp->n_ops].kind = kind;
    lp->ops[lp->n_ops++].arg = arg;
}

/* The groups and the order of operations: the transformer block of Vaswani et
 * al. (2017) as LLaMA arranges it (pre-norm, SwiGLU), with a mixture of experts
 * in place of the FFN where the layer has one. */
static void plan_ops(const model_hparams *hp, model_layer_plan *lp) {
    const int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
    const model_role qkv[] = {MODEL_ROLE_Q, MODEL_ROLE_K, MODEL_ROLE_V};
    const model_role o[] = {MODEL_ROLE_O};
    add_group(lp, MODEL_GROUP_QKV, MODEL_IN_NORMED, e, 1, true, 3, qkv);
    add_group(lp, MODEL_GROUP_O, MODEL_IN_ATTN, qd, 1, true, 1, o);
    add_op(lp, MODEL_OP_NORM, MODEL_ROLE_ATTN_NORM);
    add_op(lp, MODEL_OP_PRODUCTS, MODEL_GROUP_QKV);
    add_op(lp, MODEL_OP_ROPE_STORE, 0);
    add_op(lp, MODEL_OP_ATTEND, 0);
    add_op(lp, MODEL_OP_PRODUCTS, MODEL_GROUP_O);
    add_op(lp, MODEL_OP_RESIDUAL, 0);
    lp->ffn_op = lp->n_ops;
    add_op(lp, MODEL_OP_NORM, MODEL_ROLE_FFN_NORM);
    if (lp->w[MODEL_ROLE_ROUTER].t == NULL) {
        const model_role gu[] = {MODEL_ROLE_GATE, MODEL_ROLE_UP}, d[] = {MODEL_ROLE_DOWN};
        add_group(lp, MODEL_GROUP_GATE_UP, MODEL_IN_NORMED, e, 1, true, 2, gu);
        add_group(lp, MODEL_GROUP_DOWN, MODEL_IN_FFN_MID, hp->n_ff, 1, true, 1, d);
        add_op(lp, MODEL_OP_PRODUCTS, MODEL_GROUP_GATE_UP);
        add_op(lp, MODEL_OP_SWIGLU, MODEL_GROUP_DOWN);
        add_op(lp, MODEL_OP_PRODUCTS, MODEL_GROUP_DOWN);
    } else {
        /* the experts' products run on the CPU: the offload hook sees one
         * expert's view of a stacked tensor, which no device holds */
        const model_role r[] = {MODEL_ROLE_ROUTER};
        const model_role egu[] = {MODEL_ROLE_EXP_GATE, MODEL_ROLE_EXP_UP};
        const model_role ed[] = {MODEL_ROLE_EXP_DOWN};
        add_group(lp, MODEL_GROUP_ROUTER, MODEL_IN_NORMED, e, 1, true, 1, r);
        add_group(lp, MODEL_GROUP_EXP_GATE_UP, MODEL_IN_EXPERT, e, hp->n_expert_used, false, 2,
                  egu);
        add_group(lp, MODEL_GROUP_EXP_DOWN, MODEL_IN_EXPERT_MID, hp->n_ff_exp, hp->n_expert_used,
                  false, 1, ed);
        add_op(lp, MODEL_OP_PRODUCTS, MODEL_GROUP_ROUTER);
        add_op(lp, MODEL_OP_EXPERTS, 0);
        if (lp->w[MODEL_ROLE_SH_GATE_INP].t != NULL) {
            const model_role sgu[] = {MODEL_ROLE_SH_GATE, MODEL_ROLE_SH_UP};
            const model_role sd[] = {MODEL_ROLE_SH_DOWN};
            add_group(lp, MODEL_GROUP_SH_GATE_UP, MODEL_IN_NORMED, e, 1, true, 2, sgu);
            add_group(lp, MODEL_GROUP_SH_DOWN, MODEL_IN_FFN_MID, hp->n_ff_shexp, 1, true, 1, sd);
            add_op(lp, MODEL_OP_SHARED_EXPERT, 0);
        }
    }
    add_op(lp, MODEL_OP_RESIDUAL, 0);
    for (int32_t i = 0; i < lp->n_ops; i++) {
        const model_op *op = &lp->ops[i];
        int part = -1;
        if (op->kind == MODEL_OP_NORM) {
            part = (int)model_role_part((model_role)op->arg);
        } else if (op->kind == MODEL_OP_PRODUCTS && lp->g[op->arg].n > 0) {
            part = (int)model_role_part(lp->g[op->arg].member[0]);
        } else if (op->kind == MODEL_OP_ROPE_STORE) {
            part = MODEL_PART_ATTN_IN; /* biases, per-head norms */
        } else if (op->kind == MODEL_OP_EXPERTS) {
            part = MODEL_PART_FFN_IN;
        } else if (op->kind == MODEL_OP_SHARED_EXPERT) {
            part = MODEL_PART_FFN_OUT;
        }
        lp->op_part[i] = (int8_t)part;
    }
}

static lares_status plan_layer(const gguf_file *f, const arch_desc *ad, const model_hparams *hp,
                               int32_t il, model_layer_plan *lp, lares_error *err) {
    char name[GGUF_MAX_NAME_BYTES + 1];
    for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
        const role_row *row = &roles[r];
        bool look, required;
        need_of(ad, hp, row->need, &look, &required);
        if (!look) {
            continue;
        }
        snprintf(name, sizeof name, "blk.%d.%s", (int)il, row->name);
        const int32_t n_stack = row->form == MODEL_FORM_EXPERTS ? hp->n_expert : 1;
        lares_status st = find_weight(f, name, row->form, dim_of(hp, row->in),
                                      dim_of(hp, row->out), n_stack, required, &lp->w[r], err);
        if (st != LARES_OK) {
            return st;
        }
        const model_weight *w = &lp->w[r];
        lp->bytes += w->bytes * (uint64_t)w->n_stack;
    }
    plan_ops(hp, lp);
    return LARES_OK;
}

void model_plan_free(model_plan *p) {
    if (p == NULL) {
        return;
    }
    lares_free(p->layers);
    lares_free(p);
}

lares_status model_plan_make(const gguf_file *f, model_plan **out, lares_error *err) {
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
    model_plan *p = lares_calloc(1, sizeof *p);
    if (p == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    model_hparams *hp = &p->hp;
    if ((st = read_hparams(f, ad, hp, err)) != LARES_OK ||
        (st = vocab_size(f, &hp->n_vocab, err)) != LARES_OK) {
        goto fail;
    }
    if ((st = find_weight(f, "token_embd.weight", MODEL_FORM_MATRIX, hp->n_embd, hp->n_vocab, 1,
                          true, &p->embd, err)) ||
        (st = find_weight(f, "output_norm.weight", MODEL_FORM_VECTOR, hp->n_embd, 1, 1, true,
                          &p->output_norm, err)) ||
        (st = find_weight(f, "output.weight", MODEL_FORM_MATRIX, hp->n_embd, hp->n_vocab, 1, false,
                          &p->output, err))) {
        goto fail;
    }
    if (p->output.t == NULL) { /* tied: the embedding doubles as the output matrix */
        p->output_tied = true;
        p->output = p->embd;
    }
    p->layers = lares_calloc((size_t)hp->n_layer, sizeof *p->layers);
    if (p->layers == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto fail;
    }
    for (int32_t il = 0; il < hp->n_layer; il++) {
        if ((st = plan_layer(f, ad, hp, il, &p->layers[il], err)) != LARES_OK) {
            goto fail;
        }
    }
    if ((st = find_weight(f, "rope_freqs.weight", MODEL_FORM_VECTOR, hp->n_rot / 2, 1, 1, false,
                          &p->rope_freqs, err))) {
        goto fail;
    }
    *out = p;
    return LARES_OK;
fail:
    model_plan_free(p);
    return st;
}

/* part < 0: every part */
static lares_status ranges_of(const model_plan *p, int32_t layer, int part, bool with_experts,
                              model_range_fn fn, void *user, lares_error *err) {
    if (layer < 0 || layer >= p->hp.n_layer) {
        return lares_fail(err, LARES_EINVAL, "model: layer %d outside 0..%d", (int)layer,
                          (int)p->hp.n_layer - 1);
    }
    if (part >= MODEL_PART_COUNT) {
        return lares_fail(err, LARES_EINVAL, "model: part %d outside 0..%d", part,
                          MODEL_PART_COUNT - 1);
    }
    const model_layer_plan *lp = &p->layers[layer];
    for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
        const model_weight *w = &lp->w[r];
        if (w->t == NULL || (w->form == MODEL_FORM_EXPERTS && !with_experts) ||
            (part >= 0 && (int)model_role_part((model_role)r) != part)) {
            continue;
        }
        lares_status st = fn(user, w->lo, w->lo + w->bytes * (uint64_t)w->n_stack, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

lares_status model_plan_ranges(const model_plan *p, int32_t layer, bool with_experts,
                               model_range_fn fn, void *user, lares_error *err) {
    return ranges_of(p, layer, -1, with_experts, fn, user, err);
}

lares_status model_plan_part_ranges(const model_plan *p, int32_t layer, model_part part,
                                    bool with_experts, model_range_fn fn, void *user,
                                    lares_error *err) {
    return ranges_of(p, layer, (int)part, with_experts, fn, user, err);
}

static lares_status add_bytes(void *user, uint64_t lo, uint64_t hi, lares_error *err) {
    (void)err;
    *(uint64_t *)user += hi - lo;
    return LARES_OK;
}

uint64_t model_plan_part_bytes(const model_plan *p, int32_t layer, model_part part,
                               bool with_experts) {
    uint64_t b = 0;
    return ranges_of(p, layer, (int)part, with_experts, add_bytes, &b, NULL) == LARES_OK ? b : 0;
}
