/*
 * model: architectures and the forward pass of a layer window.
 *
 * Owns: the layer plan (plan.h: hyper-parameters, and each layer's weights,
 * groups and operations, made once from the file), the binding of every
 * weight the plan found (views into the file mapping, types checked), any
 * small converted copies (norm vectors stored as F16/BF16 are widened to F32
 * and counted in model_owned_bytes), the KV cache of a window, and the
 * forward pass of a window [l0, l1) over a batch of tokens. The head-only
 * parts are separate: embedding before the first window, final norm and
 * output after the last.
 *
 * Knows nothing about where the previous window ran (another device, a disk
 * stream): a window takes hidden states in and gives hidden states out.
 *
 * Lifetimes: a model borrows its gguf_file, which outlives it. A model is
 * read-only after loading and may be shared between sessions; a model_kv and
 * a model_ctx belong to one session.
 */
#ifndef LARES_MODEL_H
#define LARES_MODEL_H

#include "core/core.h"
#include "gguf/gguf.h"
#include "ops/ops.h"
#include "model/plan.h"

/* One decoder layer's weights, bound by role (plan.h): vectors as F32 (views,
 * or widened copies counted in owned_bytes), matrices as views into the
 * mapping, stacked experts as one view per expert. A role the layer lacks is
 * NULL / a matrix without data. */
typedef struct model_layer {
    const float *vec[MODEL_ROLE_COUNT];
    ops_matrix mat[MODEL_ROLE_COUNT];
    ops_matrix *exps[MODEL_ROLE_COUNT]; /* owned arrays of n_expert views */
} model_layer;

typedef struct model {
    gguf_file *file;        /* borrowed */
    model_plan *plan;       /* owned: what each layer holds and does */
    model_hparams hp;       /* the plan's, copied for brevity */
    const gguf_tensor *tok_embd; /* (n_embd) x n_vocab rows, any supported type */
    const float *output_norm;    /* (n_embd) */
    ops_matrix output;           /* (n_embd -> n_vocab); the embedding when tied */
    bool output_tied;
    model_layer *layers;         /* owned, n_layer */
    float *rope_inv_freq;        /* owned, n_rot / 2 */
    void **owned;                /* owned converted vectors */
    size_t n_owned;
    size_t owned_bytes;
} model;

/* Binds an opened GGUF file. Unknown architectures, missing tensors, wrong
 * shapes and unsupported tensor types are errors naming the culprit. */
lares_status model_load(gguf_file *f, model **out, lares_error *err);
void model_free(model *m);

/* ---- the KV cache of one window ---- */

typedef struct model_kv {
    int32_t l0, l1;      /* layers held */
    int32_t n_ctx;
    uint32_t type;       /* GGUF_TYPE_F16 or GGUF_TYPE_F32 */
    size_t row_elems;    /* n_head_kv * head_dim */
    void *mem;           /* owned: all K then all V */
    size_t bytes;
    /* bumped by every write that is not the forward pass's own (model_kv_rows,
     * a ring's copies): a device holding a copy of some layers (gpu/) re-reads
     * them when it changes */
    uint64_t epoch;
} model_kv;

lares_status model_kv_create(const model *m, int32_t l0, int32_t l1, int32_t n_ctx, uint32_t type,
                             model_kv **out, lares_error *err);
void model_kv_free(model_kv *kv);
ops_kv_view model_kv_view(const model_kv *kv, int32_t layer);
/* Bytes of one position's K (or V) row of one layer. */
size_t model_kv_row_bytes(const model_kv *kv);
/* Copies the K and V rows of positions [pos0, pos0 + n) of `layer` out of
 * (put false) or into the cache; k and v hold n rows each. The caller checks
 * that the layer and positions are held. */
void model_kv_rows(model_kv *kv, int32_t layer, int32_t pos0, int32_t n, bool put, uint8_t *k,
                   uint8_t *v);

/* ---- observing the router ----
 * Called on the thread running the forward pass after a MoE layer's router
 * chose its experts for the tokens of this pass and before any expert weight
 * is read: `experts` lists the distinct experts in use (ascending), so the
 * memory manager can prefetch exactly their slices. It may start reads and
 * return how many of the experts are still being read, clearing their
 * `ready` flags (all true on entry); the pass then computes the ready
 * experts' first products while those reads proceed, and calls the wait
 * function of the observer before it touches the others. */
typedef int32_t (*model_route_fn)(void *user, int32_t layer, const int32_t *experts,
                                  int32_t n_experts, bool *ready);
/* Returns when every expert the last route call left not ready is in memory. */
typedef void (*model_wait_fn)(void *user, int32_t layer);

/* ---- observing the parts of a layer ----
 * Called on the thread running the forward pass before the first operation
 * that reads a part of layer `layer` (model_part, in increasing order; parts
 * no operation reads are not announced), so that a streaming executor can
 * have the part in memory and let the previous one go. The pass is correct
 * whatever the observer does: weights it has not read come through the
 * mapping. */
typedef void (*model_part_fn)(void *user, int32_t layer, model_part part);

struct model_seq;
/* ---- running whole layers elsewhere ----
 * Called before each layer of a pass (the window [.., l_end)): a hook that
 * holds layer `il` whole (a GPU, gpu/) runs it, updating x in place and the
 * sequences' caches, and sets *ran; otherwise the CPU runs it. rope_cs: the
 * pass's RoPE angles, n_tok x n_rot. A failure fails the pass. */
typedef lares_status (*model_layer_fn)(void *user, const struct model_seq *seqs, int32_t n_seqs,
                                       int32_t il, int32_t l_end, const int32_t *pos,
                                       int32_t n_tok, const float *rope_cs, float *x, bool *ran,
                                       lares_error *err);

/* ---- per-session working memory ---- */

typedef struct model_ctx {
    ops_pool *pool;      /* borrowed */
    int32_t n_batch;     /* most tokens per forward call */
    int32_t n_ctx;
    float *xn;           /* n_batch x n_embd */
    float *q, *k, *v;    /* n_batch x (n_head | n_head_kv) * head_dim */
    float *att;          /* n_batch x n_head * head_dim */
    float *tmp;          /* n_batch x n_embd */
    float *gate, *up;    /* n_batch x n_ff */
    float *rope_cs;      /* n_batch x n_rot */
    float *attn_scratch; /* n_threads x n_ctx */
    ops_attn_args *attn_args; /* n_batch: one a sequence of a pass */
    void *act;           /* quantized activations, act_bytes */
    size_t act_bytes;
    /* MoE scratch (NULL for dense models) */
    float *router;       /* n_batch x n_expert logits */
    int32_t *sel;        /* n_batch x n_expert_used chosen experts */
    float *sel_w;        /* n_batch x n_expert_used their weights */
    int32_t *order;      /* n_batch x n_expert_used: (token, slot) -> grouped row */
    float *xg;           /* n_batch x n_expert_used x n_embd gathered inputs */
    float *hg, *hu;      /* n_batch x n_expert_used x n_ff_exp */
    float *og;           /* n_batch x n_expert_used x n_embd expert outputs */
    void *act2;          /* second activation buffer, act_bytes */
    uint32_t *route_counts; /* n_layer x n_expert: times each expert was chosen */
    int32_t *exp_cnt, *exp_used, *exp_start; /* n_expert (+1): grouping by expert */
    bool *exp_ready;         /* n_expert: of exp_used, in memory now */
    model_route_fn on_route; /* may be NULL */
    model_wait_fn on_wait;   /* set with on_route */
    void *route_user;
    model_part_fn on_part;   /* may be NULL */
    void *part_user;
    model_layer_fn on_layer; /* may be NULL */
    void *layer_user;
    void *mem;           /* owned: everything above */
    size_t bytes;
} model_ctx;

/* Sets the router observer of a context and its wait (NULL to remove). */
void model_ctx_on_route(model_ctx *cx, model_route_fn fn, model_wait_fn wait, void *user);
/* Sets the observer of layer parts (NULL to remove). */
void model_ctx_on_part(model_ctx *cx, model_part_fn fn, void *user);
void model_ctx_on_layer(model_ctx *cx, model_layer_fn fn, void *user);

lares_status model_ctx_create(const model *m, ops_pool *pool, int32_t n_batch, int32_t n_ctx,
                              model_ctx **out, lares_error *err);
void model_ctx_free(model_ctx *cx);

/* ---- the forward pass ---- */

/* x (n_tok x n_embd) = the embedding rows of tokens. */
lares_status model_embed(const model *m, const int32_t *tokens, int32_t n_tok, float *x,
                         lares_error *err);

/* Runs layers [l0, l1) on x (n_tok x n_embd, in place) for tokens at
 * positions pos[0..n_tok), writing their keys and values into kv (which must
 * hold those layers and have room for every position). n_tok <= n_batch. */
lares_status model_forward(const model *m, model_kv *kv, model_ctx *cx, int32_t l0, int32_t l1,
                           const int32_t *pos, int32_t n_tok, float *x, lares_error *err);

/* Several sequences in one pass (continuous batching): each its own KV cache
 * and its rows [row0, row0 + n_rows) of x, in order and tiling [0, n_tok).
 * The products run once over every row; RoPE, the cache stores and attention
 * run per sequence. model_forward is this with one sequence. */
typedef struct model_seq {
    model_kv *kv;
    int32_t row0, n_rows;
} model_seq;

lares_status model_forward_seqs(const model *m, const model_seq *seqs, int32_t n_seqs,
                                model_ctx *cx, int32_t l0, int32_t l1, const int32_t *pos,
                                int32_t n_tok, float *x, lares_error *err);

/* model_forward_seqs by half layers: half 2l is layer l's attention block
 * (through its residual), 2l + 1 its FFN block; runs halves [h0, h1). Between
 * the two a row's state is x alone, so a pass may stop after half a layer and
 * go on later with other passes in between (a prompt chunk read a slice per
 * step, api/batch.c). A half layer runs on the CPU even where a hook
 * (model_ctx_on_layer) would run the whole layer. */
lares_status model_forward_halves(const model *m, const model_seq *seqs, int32_t n_seqs,
                                  model_ctx *cx, int32_t h0, int32_t h1, const int32_t *pos,
                                  int32_t n_tok, float *x, lares_error *err);

/* logits (n_rows x n_vocab) from the last hidden states x (n_rows x n_embd):
 * final norm, then the output matrix. x is overwritten. n_rows <= n_batch. */
void model_output(const model *m, model_ctx *cx, float *x, int32_t n_rows, float *logits);

/* ---- quantization mixes (mix.c) ---- */

/* Index of a named mix ("q4_k_m", "q8_0", ...) or -1. */
int model_mix_find(const char *name);
const char *model_mix_names(void); /* for messages */
const char *model_mix_name(int mix);
uint32_t model_mix_file_type(int mix); /* general.file_type value */
int model_mix_by_file_type(uint32_t file_type); /* the mix a general.file_type names; -1 none */
/* The type a tensor gets under a mix: name and dims from the file, row = ne[0],
 * tied = the embedding doubles as the output matrix. */
uint32_t model_mix_type(int mix, const char *name, uint32_t n_dims, int64_t row, bool tied,
                        int32_t n_layer);

#endif /* LARES_MODEL_H */
