/*
 * The layer plan: what each layer of a model file holds and what it does, made
 * once from the file by model_plan_make. Everything that needs to know a layer
 * reads it: the loader binds the weights it names (load.c), layer_forward runs
 * its operations in order (forward.c), the working memory is sized from its
 * groups, the memory manager streams its byte ranges (exec), the scheduler
 * counts its bytes and FLOPs (sched/model_desc.c) and the GPU cost model prices
 * its groups (gpu/estimate.c).
 *
 * A plan holds no pointer into the weights' bytes, only the file's tensor
 * directory, so it is made without binding anything (a planner on a file it
 * will not run) and shared by every model loaded from the file.
 */
#ifndef LARES_MODEL_PLAN_H
#define LARES_MODEL_PLAN_H

#include "core/core.h"
#include "gguf/gguf.h"
#include "ops/ops.h"

typedef enum model_arch {
    MODEL_ARCH_LLAMA = 0, /* also Mistral, and Mixtral-style MoE (ffn_*_exps) */
    MODEL_ARCH_QWEN2,
    MODEL_ARCH_QWEN3,
    MODEL_ARCH_QWEN2MOE,
    MODEL_ARCH_QWEN3MOE,
    MODEL_ARCH_COUNT
} model_arch;

/* How a MoE router turns its logits into expert weights (all: softmax over
 * every expert's logit, then the top k). */
typedef enum model_moe_norm {
    MODEL_MOE_RENORM = 0, /* the k weights rescaled to sum to 1 (Mixtral, Qwen3-MoE) */
    MODEL_MOE_RAW = 1,    /* the k softmax probabilities as they are (Qwen2-MoE) */
} model_moe_norm;

typedef struct model_hparams {
    model_arch arch;
    const char *arch_name;
    int32_t n_layer;
    int32_t n_embd;
    int32_t n_ff;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;   /* attention.key_length, else n_embd / n_head */
    int32_t n_rot;      /* rope.dimension_count, else head_dim */
    int32_t n_vocab;
    int32_t n_ctx_train;
    float rms_eps;
    float rope_base;
    float rope_freq_scale; /* 1 / rope.scaling.factor for linear scaling, else 1 */
    ops_rope_mode rope_mode;
    /* mixture of experts: n_expert == 0 for dense models */
    int32_t n_expert;
    int32_t n_expert_used;
    int32_t n_ff_exp;     /* expert FFN width */
    int32_t n_ff_shexp;   /* shared expert FFN width, 0 without one */
    model_moe_norm moe_norm;
} model_hparams;

/* What a weight does in a layer; one row each in plan.c's table. */
typedef enum model_role {
    MODEL_ROLE_ATTN_NORM = 0,
    MODEL_ROLE_Q,
    MODEL_ROLE_K,
    MODEL_ROLE_V,
    MODEL_ROLE_O,
    MODEL_ROLE_FFN_NORM,
    MODEL_ROLE_GATE,        /* dense FFN */
    MODEL_ROLE_UP,
    MODEL_ROLE_DOWN,
    MODEL_ROLE_ROUTER,      /* MoE: the router and the stacked experts */
    MODEL_ROLE_EXP_GATE,
    MODEL_ROLE_EXP_UP,
    MODEL_ROLE_EXP_DOWN,
    MODEL_ROLE_SH_GATE_INP, /* qwen2moe's shared expert and its sigmoid gate */
    MODEL_ROLE_SH_GATE,
    MODEL_ROLE_SH_UP,
    MODEL_ROLE_SH_DOWN,
    MODEL_ROLE_Q_BIAS,
    MODEL_ROLE_K_BIAS,
    MODEL_ROLE_V_BIAS,
    MODEL_ROLE_Q_NORM,      /* qwen3's per-head RMS norms */
    MODEL_ROLE_K_NORM,
    MODEL_ROLE_COUNT
} model_role;

/* The parts of a layer, in the order its operations first read them: the
 * attention's input products (with their norm, biases and per-head norms),
 * its output product, the FFN's input (its norm, gate and up, or the router
 * and the experts), and the FFN's output (down, or the shared expert). The
 * executor streams a layer part by part (exec/plan.c), so that it holds two
 * units of parts in flight, not two layers. */
typedef enum model_part {
    MODEL_PART_ATTN_IN = 0,
    MODEL_PART_ATTN_OUT,
    MODEL_PART_FFN_IN,
    MODEL_PART_FFN_OUT,
    MODEL_PART_COUNT
} model_part;

typedef enum model_form {
    MODEL_FORM_VECTOR = 0, /* n_in values, read as F32 */
    MODEL_FORM_MATRIX,     /* n_in -> n_out */
    MODEL_FORM_EXPERTS,    /* n_stack matrices n_in -> n_out stacked in one 3-D tensor */
} model_form;

/* One weight of a layer as the file holds it. */
typedef struct model_weight {
    const gguf_tensor *t; /* NULL: the layer has no such weight */
    model_form form;
    int64_t n_in, n_out;  /* per expert; n_out is 1 for a vector */
    int32_t n_stack;      /* experts stacked (MODEL_FORM_EXPERTS), else 1 */
    uint64_t lo;          /* file offset of its first byte */
    uint64_t bytes;       /* bytes of one expert (the whole tensor when n_stack is 1) */
} model_weight;

/* The input a group of products reads. */
typedef enum model_input {
    MODEL_IN_NORMED = 0, /* the normed hidden states */
    MODEL_IN_ATTN,       /* attention's output */
    MODEL_IN_FFN_MID,    /* silu(gate) * up */
    MODEL_IN_EXPERT,     /* the normed states gathered per (token, chosen expert) */
    MODEL_IN_EXPERT_MID, /* silu(gate) * up of the chosen experts */
} model_input;

typedef enum model_group_id {
    MODEL_GROUP_QKV = 0,
    MODEL_GROUP_O,
    MODEL_GROUP_GATE_UP,
    MODEL_GROUP_DOWN,
    MODEL_GROUP_ROUTER,
    MODEL_GROUP_EXP_GATE_UP,
    MODEL_GROUP_EXP_DOWN,
    MODEL_GROUP_SH_GATE_UP,
    MODEL_GROUP_SH_DOWN,
    MODEL_GROUP_COUNT
} model_group_id;

#define MODEL_GROUP_MAX 3 /* products in one group */

/* Products that share one input: its activations are converted once and
 * the products may run in one parallel pass. */
typedef struct model_group {
    int32_t n;          /* 0: not in this layer */
    model_role member[MODEL_GROUP_MAX];
    model_input input;
    int64_t n_in;
    int32_t rows;       /* input rows per token: 1, or the experts used per token */
    bool on_device;     /* the runtime may run these products on a GPU (gpu/estimate.c) */
} model_group;

typedef enum model_op_kind {
    MODEL_OP_NORM = 0,      /* normed = RMSNorm(x) * weight `arg` */
    MODEL_OP_PRODUCTS,      /* group `arg`, each product into its role's buffer */
    MODEL_OP_ROPE_STORE,    /* biases, per-head norms, RoPE; K and V into the cache */
    MODEL_OP_ATTEND,        /* attention of every query row over the cache */
    MODEL_OP_SWIGLU,        /* gate = silu(gate) * up, the input of group `arg` */
    MODEL_OP_EXPERTS,       /* route, gather, the chosen experts' products, weighted sum */
    MODEL_OP_SHARED_EXPERT, /* qwen2moe's expert for every token, behind a sigmoid gate */
    MODEL_OP_RESIDUAL,      /* x += the block's output */
} model_op_kind;

typedef struct model_op {
    model_op_kind kind;
    int32_t arg; /* a model_role (NORM) or a model_group_id (PRODUCTS, SWIGLU), else 0 */
} model_op;

#define MODEL_OPS_MAX 16

typedef struct model_layer_plan {
    model_weight w[MODEL_ROLE_COUNT];  /* by role */
    model_group g[MODEL_GROUP_COUNT];  /* by id */
    model_op ops[MODEL_OPS_MAX];       /* in the order layer_forward runs them */
    int8_t op_part[MODEL_OPS_MAX];     /* the part each op reads; -1: no weight */
    int32_t n_ops;
    int32_t ffn_op; /* the FFN's first op (its norm): ops before it are the layer's
                     * first half, whose state after is x alone (model_forward_halves) */
    uint64_t bytes;         /* every weight of the layer */
} model_layer_plan;

typedef struct model_plan {
    model_hparams hp;
    model_layer_plan *layers; /* n_layer */
    /* before the first layer and after the last */
    model_weight embd;        /* token_embd: n_embd x n_vocab rows */
    model_weight output_norm;
    model_weight output;      /* the embedding when tied */
    bool output_tied;
    model_weight rope_freqs;  /* Llama-3.1's per-dimension factors, absent mostly */
} model_plan;

/* Reads the hyper-parameters and plans every layer of an opened file.
 * Unknown architectures, missing tensors and wrong shapes are errors naming
 * the culprit. Tensor types are not checked here (the loader does). */
lares_status model_plan_make(const gguf_file *f, model_plan **out, lares_error *err);
void model_plan_free(model_plan *p);

const char *model_arch_list(void); /* "llama, qwen2, ..." for messages */
const char *model_role_name(model_role r); /* the GGUF name after "blk.N.", e.g. "attn_q.weight" */
model_part model_role_part(model_role r);

/* Walks the byte ranges of a layer's weights in the file: with_experts false
 * leaves out the stacked expert tensors (read per choice). */
typedef lares_status (*model_range_fn)(void *user, uint64_t lo, uint64_t hi, lares_error *err);
lares_status model_plan_ranges(const model_plan *p, int32_t layer, bool with_experts,
                               model_range_fn fn, void *user, lares_error *err);
/* The same for the weights of one part of the layer. */
lares_status model_plan_part_ranges(const model_plan *p, int32_t layer, model_part part,
                                    bool with_experts, model_range_fn fn, void *user,
                                    lares_error *err);
/* The bytes of those weights; 0 for a layer the plan does not have. */
uint64_t model_plan_part_bytes(const model_plan *p, int32_t layer, model_part part,
                               bool with_experts);

#endif /* LARES_MODEL_PLAN_H */
