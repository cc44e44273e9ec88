/*
 * Named public model shapes, for planning without the file (the paper check,
 * `lares plan --shape`). Hyper-parameters are those of each model's published
 * config.json (Hugging Face model cards: meta-llama/Meta-Llama-3-8B,
 * meta-llama/Meta-Llama-3-70B, meta-llama/Llama-2-7b-hf, Llama-2-13b-hf,
 * TinyLlama/TinyLlama-1.1B-Chat-v1.0, Qwen/Qwen2.5-14B, Qwen/Qwen2.5-32B).
 * Meta published no Llama-3 of 14B or 32B parameters: the 14B and 32B points of
 * the paper check use Qwen2.5-14B and Qwen2.5-32B, dense GQA decoders of the same
 * layout (plus q/k/v biases).
 *
 * The tensor list is the GGUF one (blk.N.attn_q.weight, ...); the block type of
 * each tensor comes from the quantization mix (model/mix.c), so a shape in
 * "q4_k_m" has the Q6_K promotions real Q4_K_M files have.
 */
#include "model/model.h"
#include "sched/sched_impl.h"

typedef struct shape {
    const char *name;
    int32_t n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx;
    bool qkv_bias;
} shape;

static const shape shapes[] = {
    {"llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, false},
    {"llama3-70b", 80, 8192, 28672, 64, 8, 128256, 8192, false},
    {"qwen2.5-14b", 48, 5120, 13824, 40, 8, 152064, 32768, true},
    {"qwen2.5-32b", 64, 5120, 27648, 40, 8, 152064, 32768, true},
    {"llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, false},
    {"llama2-13b", 40, 5120, 13824, 40, 40, 32000, 4096, false},
    {"tinyllama-1.1b", 22, 2048, 5632, 32, 4, 32000, 2048, false},
};

const char *sched_shape_names(void) {
    return "llama3-8b llama3-70b qwen2.5-14b qwen2.5-32b llama2-7b llama2-13b tinyllama-1.1b";
}

typedef struct tensor_spec {
    const char *fmt;         /* name with %d for the layer */
    int which_in, which_out; /* 0: n_embd, 1: q dim, 2: kv dim, 3: n_ff, -1: a vector */
} tensor_spec;

static int64_t dim_of(const shape *s, int which) {
    const int64_t hd = s->n_embd / s->n_head;
    switch (which) {
    case 0:
        return s->n_embd;
    case 1:
        return hd * s->n_head;
    case 2:
        return hd * s->n_head_kv;
    default:
        return s->n_ff;
    }
}

static lares_status add(sched_model *m, int mix, const char *name, int64_t ne0, int64_t ne1,
                        lares_error *err) {
    const int64_t ne[GGUF_MAX_DIMS] = {ne0, ne1, 1, 1};
    uint32_t n_dims = ne1 > 1 ? 2 : 1;
    uint32_t type = model_mix_type(mix, name, n_dims, ne0, false, m->n_layer);
    uint64_t row, bytes;
    if (!gguf_row_bytes(type, ne0, &row) || !lares_mul_u64(row, (uint64_t)ne1, &bytes)) {
        return lares_fail(err, LARES_EINVAL,
                          "tensor '%s' of %" PRId64 " x %" PRId64 " does not fit its type", name,
                          ne0, ne1);
    }
    return sched_model_account(m, name, type, n_dims, ne, bytes, 0, 0, false, err);
}

lares_status sched_model_from_shape(const char *spec, sched_model **out, lares_error *err) {
    char nm[64];
    const char *colon = strchr(spec, ':');
    size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
    if (colon == NULL || nlen == 0 || nlen >= sizeof nm) {
        return lares_fail(err, LARES_EINVAL,
                          "shape '%s': expected NAME:MIX, e.g. llama3-70b:q4_k_m (shapes: %s)",
                          spec, sched_shape_names());
    }
    memcpy(nm, spec, nlen);
    nm[nlen] = '\0';
    const shape *s = NULL;
    for (size_t i = 0; i < LARES_ARRAY_LEN(shapes); i++) {
        if (strcmp(shapes[i].name, nm) == 0) {
            s = &shapes[i];
        }
    }
    if (s == NULL) {
        return lares_fail(err, LARES_EINVAL, "unknown shape '%s' (shapes: %s)", nm,
                          sched_shape_names());
    }
    int mix = model_mix_find(colon + 1);
    if (mix < 0) {
        return lares_fail(err, LARES_EINVAL, "unknown mix '%s' (mixes: %s)", colon + 1,
                          model_mix_names());
    }
    sched_model *m = lares_calloc(1, sizeof *m);
    if (m == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st;
    snprintf(m->name, sizeof m->name, "%s:%s", s->name, model_mix_name(mix));
    m->n_layer = s->n_layer;
    m->n_embd = s->n_embd;
    m->n_vocab = s->n_vocab;
    m->n_head = s->n_head;
    m->n_head_kv = s->n_head_kv;
    m->head_dim = s->n_embd / s->n_head;
    m->n_ctx_train = s->n_ctx;
    m->layers = lares_calloc((size_t)s->n_layer, sizeof *m->layers);
    if (m->layers == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto fail;
    }
    static const tensor_spec layer_tensors[] = {
        {"blk.%d.attn_norm.weight", 0, -1},  {"blk.%d.attn_q.weight", 0, 1},
        {"blk.%d.attn_k.weight", 0, 2},      {"blk.%d.attn_v.weight", 0, 2},
        {"blk.%d.attn_output.weight", 1, 0}, {"blk.%d.ffn_norm.weight", 0, -1},
        {"blk.%d.ffn_gate.weight", 0, 3},    {"blk.%d.ffn_up.weight", 0, 3},
        {"blk.%d.ffn_down.weight", 3, 0},
    };
    static const tensor_spec bias_tensors[] = {{"blk.%d.attn_q.bias", 1, -1},
                                               {"blk.%d.attn_k.bias", 2, -1},
                                               {"blk.%d.attn_v.bias", 2, -1}};
    char name[GGUF_MAX_NAME_BYTES + 1];
    if ((st = add(m, mix, "token_embd.weight", s->n_embd, s->n_vocab, err)) ||
        (st = add(m, mix, "output_norm.weight", s->n_embd, 1, err)) ||
        (st = add(m, mix, "output.weight", s->n_embd, s->n_vocab, err))) {
        goto fail;
    }
    for (int32_t il = 0; il < s->n_layer; il++) {
        for (size_t i = 0; i < LARES_ARRAY_LEN(layer_tensors) + LARES_ARRAY_LEN(bias_tensors);
             i++) {
            const tensor_spec *t = i < LARES_ARRAY_LEN(layer_tensors)
                                       ? &layer_tensors[i]
                                       : &bias_tensors[i - LARES_ARRAY_LEN(layer_tensors)];
            if (i >= LARES_ARRAY_LEN(layer_tensors) && !s->qkv_bias) {
                break;
            }
            snprintf(name, sizeof name, t->fmt, (int)il);
            int64_t ne0 = dim_of(s, t->which_in);
            int64_t ne1 = t->which_out < 0 ? 1 : dim_of(s, t->which_out);
            if ((st = add(m, mix, name, ne0, ne1, err)) != LARES_OK) {
                goto fail;
            }
        }
    }
    m->file_bytes = sched_model_weight_bytes(m);
    *out = m;
    return LARES_OK;
fail:
    sched_model_free(m);
    return st;
}
