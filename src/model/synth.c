/*
 * Synthetic models: real shapes, deterministic pseudo-random weights, any
 * mix of block types, and a real tokenizer copied from a vocabulary file.
 * Benchmarks need multi-gigabyte models with the shapes of TinyLlama,
 * Llama-2 and Qwen3-MoE; speed does not depend on the weight values, and the
 * files follow GGUF naming and metadata conventions so other engines load them.
 *
 * Each row's values come from a generator seeded by (seed, tensor, row), so
 * the file is the same whatever the thread count. Values are bell-shaped with
 * standard deviation 0.02 (the usual initialisation scale), norms are 1.
 */
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth_copy.h"
#include "model/synth_route.h"
#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>

typedef struct synth_preset {
    const char *name;
    const char *arch;
    int32_t n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim; /* head_dim 0: n_embd/n_head */
    int32_t n_ctx;
    float rope_base, rms_eps;
    int32_t n_expert, n_expert_used, n_ff_exp; /* MoE (qwen3moe) */
    const char *what;
} synth_preset;

static const synth_preset presets[] = {
    {"llama-1b", "llama", 2048, 5632, 22, 32, 4, 0, 2048, 10000.0f, 1e-5f, 0, 0, 0,
     "TinyLlama-1.1B shape"},
    {"llama-7b", "llama", 4096, 11008, 32, 32, 32, 0, 4096, 10000.0f, 1e-5f, 0, 0, 0,
     "Llama-2-7B shape"},
    {"llama-13b", "llama", 5120, 13824, 40, 40, 40, 0, 4096, 10000.0f, 1e-5f, 0, 0, 0,
     "Llama-2-13B shape"},
    {"qwen3moe-7b", "qwen3moe", 2048, 6144, 24, 32, 4, 128, 4096, 1000000.0f, 1e-6f, 64, 8, 768,
     "Qwen3-MoE shape: 64 experts, 8 used"},
    {"llama-tiny", "llama", 256, 768, 4, 8, 4, 0, 1024, 10000.0f, 1e-5f, 0, 0, 0,
     "a small llama for tests"},
    {"qwen3moe-tiny", "qwen3moe", 256, 768, 4, 8, 4, 64, 1024, 1000000.0f, 1e-6f, 8, 2, 128,
     "a small Qwen3-MoE for tests: 8 experts, 2 used"},
};

const char *lares_synth_presets(void) {
    return "llama-1b, llama-7b, llama-13b, qwen3moe-7b, llama-tiny, qwen3moe-tiny";
}

lares_synth_opts lares_synth_opts_default(void) {
    lares_synth_opts o = {.preset = "llama-tiny",
                          .type = "q8_0",
                          .seed = 1234,
                          .routing = LARES_SYNTH_ROUTING_REALISTIC,
                          .route_skew = 0.6,
                          .route_overlap = 0.87};
    return o;
}

/* ---- the generator ---- */

uint64_t synth_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603u;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    }
    return h;
}

/* n values with standard deviation `std`, close to a normal distribution
 * (the sum of four uniforms, Irwin-Hall), from a counter-based generator.
 * Trained weights are bell-shaped, and non-linear formats (IQ4) are built for
 * that: uniform weights would misjudge them. */
static void fill_row(float *dst, int64_t n, uint64_t key, float std) {
    /* four 16-bit uniforms centred on 0 have standard deviation 65536 / sqrt(3) */
    const float scale = std / 37837.2272f;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = synth_mix64(key + (uint64_t)i * 0x9e3779b97f4a7c15u);
        const int32_t s4 = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) +
                           (int32_t)((r >> 32) & 0xffff) + (int32_t)(r >> 48) - 2 * 65536;
        dst[i] = (float)s4 * scale;
    }
}

typedef struct synth_tensor {
    char name[GGUF_MAX_NAME_BYTES + 1];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    synth_role role;
    int32_t layer; /* -1: not a layer's */
} synth_tensor;

typedef struct fill_task {
    const synth_tensor *t;
    uint8_t *out;
    size_t row_bytes;
    int64_t rows;
    uint64_t key;
    float *scratch; /* nth x ne[0] */
    const quant_traits *qt;
    const synth_routing *routing; /* NULL: plain random rows */
    const synth_copy *copy;       /* NULL: no induction circuit */
} fill_task;

static void fill_rows(void *vctx, int ith, int nth) {
    const fill_task *f = vctx;
    const int64_t n = f->t->ne[0];
    float *row = f->scratch + (size_t)ith * (size_t)n;
    int64_t lo, hi;
    ops_split(f->rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        if (f->t->role == SYNTH_ROLE_NORM) {
            for (int64_t i = 0; i < n; i++) {
                row[i] = 1.0f;
            }
        } else {
            fill_row(row, n, synth_mix64(f->key + (uint64_t)r), 0.02f);
        }
        if (f->routing != NULL) {
            synth_routing_shape_row(f->routing, f->t->role, f->t->layer, r, row, n);
        }
        if (f->copy != NULL) {
            synth_copy_shape_row(f->copy, f->t->role, f->t->layer, r, row, n);
        }
        f->qt->from_float_ref(row, f->out + (size_t)r * f->row_bytes, n);
    }
}

/* ---- the tensor list of a preset ---- */

typedef struct tensor_list {
    synth_tensor *t;
    size_t n, cap;
} tensor_list;

static lares_status add(tensor_list *l, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1,
                        int64_t ne2, synth_role role, lares_error *err) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        synth_tensor *n = lares_realloc(l->t, cap * sizeof *n);
        if (n == NULL) {
            return lares_fail(err, LARES_ENOMEM, "out of memory");
        }
        l->t = n;
        l->cap = cap;
    }
    synth_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->role = role;
    t->layer = -1;
    if (strncmp(name, "blk.", 4) == 0) {
        t->layer = (int32_t)strtol(name + 4, NULL, 10);
    }
    return LARES_OK;
}

static lares_status list_tensors(const synth_preset *p, int32_t n_layer, int32_t n_vocab,
                                 tensor_list *l, lares_error *err) {
    const int64_t e = p->n_embd, hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head,
                  qd = hd * p->n_head, kvd = hd * p->n_head_kv;
    lares_status st;
    if ((st = add(l, "token_embd.weight", 2, e, n_vocab, 1, SYNTH_ROLE_EMBD, err)) ||
        (st = add(l, "output_norm.weight", 1, e, 1, 1, SYNTH_ROLE_NORM, err)) ||
        (st = add(l, "output.weight", 2, e, n_vocab, 1, SYNTH_ROLE_OUTPUT, err))) {
        return st;
    }
    char n[GGUF_MAX_NAME_BYTES + 1];
    for (int32_t i = 0; i < n_layer; i++) {
#define N(s) (snprintf(n, sizeof n, "blk.%d." s, i), n)
        if ((st = add(l, N("attn_norm.weight"), 1, e, 1, 1, SYNTH_ROLE_NORM, err)) ||
            (st = add(l, N("attn_q.weight"), 2, e, qd, 1, SYNTH_ROLE_ATTN_Q, err)) ||
            (st = add(l, N("attn_k.weight"), 2, e, kvd, 1, SYNTH_ROLE_ATTN_K, err)) ||
            (st = add(l, N("attn_v.weight"), 2, e, kvd, 1, SYNTH_ROLE_ATTN_V, err)) ||
            (st = add(l, N("attn_output.weight"), 2, qd, e, 1, SYNTH_ROLE_ATTN_OUT, err)) ||
            (st = add(l, N("ffn_norm.weight"), 1, e, 1, 1, SYNTH_ROLE_NORM, err))) {
            return st;
        }
        if (p->n_expert > 0) {
            if ((st = add(l, N("attn_q_norm.weight"), 1, hd, 1, 1, SYNTH_ROLE_NORM, err)) ||
                (st = add(l, N("attn_k_norm.weight"), 1, hd, 1, 1, SYNTH_ROLE_NORM, err)) ||
                (st = add(l, N("ffn_gate_inp.weight"), 2, e, p->n_expert, 1, SYNTH_ROLE_ROUTER,
                          err)) ||
                (st = add(l, N("ffn_gate_exps.weight"), 3, e, p->n_ff_exp, p->n_expert,
                          SYNTH_ROLE_PLAIN, err)) ||
                (st = add(l, N("ffn_up_exps.weight"), 3, e, p->n_ff_exp, p->n_expert,
                          SYNTH_ROLE_PLAIN, err)) ||
                (st = add(l, N("ffn_down_exps.weight"), 3, p->n_ff_exp, e, p->n_expert,
                          SYNTH_ROLE_FFN_DOWN, err))) {
                return st;
            }
        } else if ((st = add(l, N("ffn_gate.weight"), 2, e, p->n_ff, 1, SYNTH_ROLE_PLAIN, err)) ||
                   (st = add(l, N("ffn_up.weight"), 2, e, p->n_ff, 1, SYNTH_ROLE_PLAIN, err)) ||
                   (st =
                        add(l, N("ffn_down.weight"), 2, p->n_ff, e, 1, SYNTH_ROLE_FFN_DOWN, err))) {
            return st;
        }
#undef N
    }
    return LARES_OK;
}

static lares_status set_metadata(gguf_writer *w, const synth_preset *p, int32_t n_layer, int mix,
                                 bool copy, const gguf_file *vocab, lares_error *err) {
    char k[128];
    const char *a = p->arch;
    lares_status st;
#define KEY(s) (snprintf(k, sizeof k, "%s." s, a), k)
    char name[96];
    snprintf(name, sizeof name, "lares synth %s %s%s", p->name, model_mix_name(mix),
             copy ? " copy" : "");
    if ((st = gguf_writer_set_str(w, "general.architecture", a, err)) ||
        (st = gguf_writer_set_str(w, "general.name", name, err)) ||
        (st = gguf_writer_set_u32(w, "general.file_type", model_mix_file_type(mix), err)) ||
        (st = gguf_writer_set_u32(w, "general.quantization_version", 2, err)) ||
        (st = gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)p->n_ctx, err)) ||
        (st = gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd, err)) ||
        (st = gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff, err)) ||
        (st = gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)n_layer, err)) ||
        (st = gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head, err)) ||
        (st =
             gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv, err)) ||
        (st = gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_base, err)) ||
        (st = gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), p->rms_eps, err))) {
        return st;
    }
    const int32_t hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    if ((st = gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)hd, err))) {
        return st;
    }
    if (p->head_dim != 0 &&
        ((st = gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)hd, err)) ||
         (st = gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)hd, err)))) {
        return st;
    }
    if (p->n_expert > 0 &&
        ((st = gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)p->n_expert, err)) ||
         (st = gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)p->n_expert_used, err)) ||
         (st = gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)p->n_ff_exp,
                                   err)))) {
        return st;
    }
#undef KEY
    for (uint64_t i = 0; i < gguf_n_kv(vocab); i++) {
        if (strncmp(gguf_kv_key(vocab, i), "tokenizer.", 10) == 0 &&
            (st = gguf_writer_copy_kv(w, vocab, i, err)) != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

lares_status lares_synth(const lares_synth_opts *o, const char *out_path, lares_error *err) {
    const synth_preset *p = NULL;
    for (size_t i = 0; i < LARES_ARRAY_LEN(presets); i++) {
        if (o->preset != NULL && strcmp(presets[i].name, o->preset) == 0) {
            p = &presets[i];
        }
    }
    if (p == NULL) {
        return lares_fail(err, LARES_EINVAL, "synth: unknown preset '%s' (presets: %s)",
                          o->preset ? o->preset : "", lares_synth_presets());
    }
    const int mix = o->type ? model_mix_find(o->type) : -1;
    if (mix < 0) {
        return lares_fail(err, LARES_EINVAL, "synth: unknown type '%s' (types: %s)",
                          o->type ? o->type : "", model_mix_names());
    }
    if (o->vocab_path == NULL) {
        return lares_fail(err, LARES_EINVAL,
                          "synth: a vocabulary is needed (--vocab-from VOCAB.gguf, e.g. "
                          "../shared/models/vocab/ggml-vocab-llama-spm.gguf)");
    }
    const int32_t n_layer = o->n_layers > 0 ? o->n_layers : p->n_layer;
    if (n_layer > 4096) {
        return lares_fail(err, LARES_EINVAL, "synth: %d layers is too many", n_layer);
    }
    gguf_file *vocab = NULL;
    gguf_writer *w = NULL;
    ops_pool *pool = NULL;
    tensor_list tl = {0};
    uint8_t *buf = NULL;
    float *scratch = NULL;
    synth_routing routing = {0};
    synth_copy copy = {0};
    const bool realistic = p->n_expert > 0 && o->routing == LARES_SYNTH_ROUTING_REALISTIC;
    if (o->routing != LARES_SYNTH_ROUTING_REALISTIC && o->routing != LARES_SYNTH_ROUTING_RANDOM) {
        return lares_fail(err, LARES_EINVAL, "synth: routing %d is not realistic or random",
                          (int)o->routing);
    }
    if (o->copy && p->n_expert > 0) {
        return lares_fail(err, LARES_EINVAL,
                          "synth: --copy makes dense models; %s is a mixture of experts",
                          p->name);
    }
    if (realistic) {
        const synth_route_shape rs = {.n_layer = n_layer,
                                      .n_embd = p->n_embd,
                                      .head_dim = p->head_dim ? p->head_dim : p->n_embd / p->n_head,
                                      .n_expert = p->n_expert,
                                      .n_expert_used = p->n_expert_used,
                                      .rope_base = p->rope_base};
        lares_status rst =
            synth_routing_plan(&routing, &rs, o->route_skew, o->route_overlap, o->seed, err);
        if (rst != LARES_OK) {
            return rst;
        }
        lares_log(LARES_LOG_INFO,
                  "synth: routing: window %.1f tokens (rotary pairs %d-%d), simulated overlap "
                  "%.3f, top-%d share %.3f",
                  (double)routing.sigma, routing.band0, routing.band0 + SYNTH_ROUTE_BAND - 1,
                  routing.sim_overlap, p->n_expert_used, routing.sim_top_share);
    }
    lares_status st = gguf_open(o->vocab_path, NULL, &vocab, err);
    if (st != LARES_OK) {
        goto done;
    }
    gguf_arr toks;
    if ((st = gguf_get_arr(vocab, "tokenizer.ggml.tokens", &toks, err)) != LARES_OK) {
        lares_error_prefix(err, "synth: vocabulary: ");
        goto done;
    }
    if (toks.n == 0 || toks.n > (1u << 22)) {
        st = lares_fail(err, LARES_EFORMAT, "synth: %s has %" PRIu64 " tokens", o->vocab_path,
                        toks.n);
        goto done;
    }
    const int32_t n_vocab = (int32_t)toks.n;
    if (o->copy) {
        const synth_copy_shape cs = {.n_layer = n_layer,
                                     .n_embd = p->n_embd,
                                     .head_dim = p->head_dim ? p->head_dim : p->n_embd / p->n_head,
                                     .n_head = p->n_head,
                                     .n_vocab = n_vocab,
                                     .rope_base = p->rope_base};
        if ((st = synth_copy_plan(&copy, &cs, o->seed, err)) != LARES_OK) {
            goto done;
        }
    }
    if ((st = list_tensors(p, n_layer, n_vocab, &tl, err)) || (st = gguf_writer_create(&w, err)) ||
        (st = set_metadata(w, p, n_layer, mix, o->copy, vocab, err)) ||
        (st = ops_pool_create(o->n_threads > 0 ? o->n_threads : lares_cpu_count(), &pool, err))) {
        goto done;
    }
    uint64_t total = 0, widest_row = 0, largest = 0;
    for (size_t i = 0; i < tl.n; i++) {
        synth_tensor *t = &tl.t[i];
        t->type = model_mix_type(mix, t->name, t->n_dims, t->ne[0], false, n_layer);
        if (quant_traits_ref(t->type) == NULL ||
            quant_traits_ref(t->type)->from_float_ref == NULL) {
            st = lares_fail(err, LARES_EUNSUPPORTED, "synth: lares cannot write type %s yet",
                            gguf_type_info_of(t->type)->name);
            goto done;
        }
        if ((st = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL, err))) {
            goto done;
        }
        uint64_t b = gguf_writer_tensor_bytes(w, i);
        total += b;
        largest = b > largest ? b : largest;
        widest_row = (uint64_t)t->ne[0] > widest_row ? (uint64_t)t->ne[0] : widest_row;
    }
    buf = lares_alloc((size_t)largest);
    scratch = lares_alloc_array((size_t)ops_pool_size(pool) * (size_t)widest_row, sizeof(float));
    if (buf == NULL || scratch == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "synth: out of memory for a %" PRIu64 "-byte tensor",
                        largest);
        goto done;
    }
    if ((st = gguf_writer_begin(w, out_path, err)) != LARES_OK) {
        goto done;
    }
    uint64_t written = 0;
    for (size_t i = 0; i < tl.n; i++) {
        const synth_tensor *t = &tl.t[i];
        fill_task f = {.t = t,
                       .out = buf,
                       .row_bytes = quant_row_bytes(t->type, t->ne[0]),
                       .rows = t->ne[1] * t->ne[2] * t->ne[3],
                       .key = synth_mix64(o->seed ^ name_hash(t->name)),
                       .scratch = scratch,
                       .qt = quant_traits_ref(t->type),
                       .routing = realistic ? &routing : NULL,
                       .copy = o->copy ? &copy : NULL};
        ops_pool_run(pool, fill_rows, &f);
        const uint64_t nb = gguf_writer_tensor_bytes(w, i);
        if ((st = gguf_writer_write_data(w, buf, nb, err)) != LARES_OK) {
            goto done;
        }
        written += nb;
        if (o->progress != NULL) {
            o->progress("synth", written, total, o->user);
        }
    }
    st = gguf_writer_finish(w, err);
done:
    synth_routing_free(&routing);
    lares_free(buf);
    lares_free(scratch);
    lares_free(tl.t);
    ops_pool_free(pool);
    gguf_writer_free(w);
    gguf_close(vocab);
    return st;
}
