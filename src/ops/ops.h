/*
 * ops: the numeric building blocks on host memory.
 *
 * Owns: the thread pool (one per session; workers created once, the caller is
 * thread 0), matrix products over quantized weights (mat-vec and tiled
 * mat-mat), RMSNorm, RoPE, SiLU, and attention over a KV cache (its softmax is
 * the cache type's kernel: quant_traits.kv_attend)
 * laid out by the caller.
 *
 * Knows nothing about files, networks or what a layer means. Weights are
 * views (ops_matrix) into memory someone else owns (normally the read-only
 * mapping of the model file).
 *
 * Threads: ops_pool_run blocks until every thread finished the task; a task
 * function gets (ith, nth) and must write only its own range (ops_split).
 * Not re-entrant: one pool_run at a time per pool.
 */
#ifndef LARES_OPS_H
#define LARES_OPS_H

#include "core/core.h"
#include "quant/quant.h"

/* ---- thread pool ---- */

typedef struct ops_pool ops_pool;
typedef void (*ops_task_fn)(void *ctx, int ith, int nth);

lares_status ops_pool_create(int n_threads, ops_pool **out, lares_error *err);
void ops_pool_free(ops_pool *p);
int ops_pool_size(const ops_pool *p);
/* Runs fn(ctx, ith, nth) on every thread of the pool, the caller as thread 0. */
void ops_pool_run(ops_pool *p, ops_task_fn fn, void *ctx);
/* The same on the first n threads only (n <= 1: inline on the caller, no
 * synchronisation at all). Small tasks cost less on fewer threads: a fork/join
 * costs microseconds, and a worker that is not running costs a time slice. */
void ops_pool_run_n(ops_pool *p, ops_task_fn fn, void *ctx, int n);
/* How many threads a task of `work` units deserves when each thread should
 * get at least min_per_thread of them (1 .. pool size; 1 for a NULL pool). */
int ops_pool_threads_for(const ops_pool *p, double work, double min_per_thread);
/* The least element-wise work (norms, SwiGLU, quantizing activations) worth
 * another thread. Between a pass's operations the workers spin (pool.c), and
 * a fork/join then costs about 0.15 us (Intel Xeon family 6 model 207,
 * 2026-11-29: 200000 empty tasks on 2 threads), under a microsecond of such
 * work; at 16k elements (until 2026-11-29) the rows of 4 sequences (4 x 2048,
 * 4 x 5632) were normalised, quantized and gated on one thread while the other
 * waited (docs/performance.md, "Session 22"). */
#define OPS_MIN_ELEMS_PER_THREAD 2048.0

/* [lo, hi) of n items for thread ith of nth: contiguous, sizes differ by at most one. */
static inline void ops_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = n / nth, extra = n % nth;
    *lo = ith * per + (ith < extra ? ith : extra);
    *hi = *lo + per + (ith < extra ? 1 : 0);
}

/* ---- matrices and activations ---- */

/* A weight matrix: n_out rows of n_in elements of one type (GGUF ne[0] = n_in). */
typedef struct ops_matrix {
    const void *data;        /* borrowed (usually the file mapping) */
    const quant_traits *qt;
    int64_t n_in;
    int64_t n_out;
    size_t row_bytes;
} ops_matrix;

/* Fills m for data of `type` shaped n_out x n_in; LARES_EUNSUPPORTED when lares
 * cannot multiply with this type, LARES_EFORMAT when n_in is not a block
 * multiple. `what` names the tensor in messages. */
lares_status ops_matrix_init(ops_matrix *m, const void *data, uint32_t type, int64_t n_in,
                             int64_t n_out, const char *what, lares_error *err);

/* Activations converted to the format a weight type's dot product expects,
 * or into the panels of the packed GEMM (type OPS_ACT_PANELS). */
typedef struct ops_act {
    const void *data;
    uint32_t type;
    int64_t n_rows;
    int64_t n_in;
    size_t row_bytes; /* 0 for panels: rows are interleaved, not consecutive */
} ops_act;

/* The activation format of the packed GEMM (quant.h: quant_panel_fmt); never a
 * GGUF type id. */
#define OPS_ACT_PANELS 0x10000u
/* The activation format of the few-row product (quant.h: quant_rows_fmt) */
#define OPS_ACT_ROWS 0x10001u
/* The fewest activation rows that take the packed GEMM: below a panel's worth
 * most of its lanes would multiply zeros. */
#define OPS_GEMM_MIN_ROWS 8
/* The most activation rows that take the few-row product (where the type has
 * one): past QUANT_ROWS_MAX in groups over each chunk of weight rows, the
 * later groups reading the weights from cache. Measured (docs/kernels.md
 * "Past eight rows"): llama-1b Q4_0 and Q4_K_M prompts of 9 to 40 tokens
 * read 1.1-2.3x faster than by the GEMM with AVX-512 VNNI and AVX2 (AVX-VNNI:
 * 1.1-1.7x up to 24, the same at 32-40), the GEMM ahead from 48. */
#define OPS_ROWS_MAX 40
/* The activation format for multiplying w by n_rows rows on this pool:
 * OPS_ACT_PANELS where the dispatched kernels have a GEMM for w's type and
 * n_rows is large enough, OPS_ACT_ROWS where they have a few-row product
 * for it and n_rows is small, else w's vec_dot_type. With an offload hook set
 * (a GPU session) always the row format, which the device's kernels read.
 * Matrices sharing an input share one conversion when their formats are equal. */
uint32_t ops_act_type(const ops_pool *pool, const ops_matrix *w, int64_t n_rows);
/* Whether the packed GEMM can multiply w on this pool, whatever the rows (the
 * experts of a mixture choose by their rows per expert, not by the total). */
bool ops_gemm_takes(const ops_pool *pool, const ops_matrix *w);

/* Bytes of scratch needed to hold n_rows x n_in activations of `type`. */
size_t ops_act_bytes(uint32_t type, int64_t n_rows, int64_t n_in);
/* Converts x (n_rows x n_in floats, in groups of consecutive rows: group g
 * from row start[g]) into panels, each group starting a panel of its own, so
 * that a group's panels can be handed to a product alone (the experts of a
 * mixture: each multiplies its own rows). Room: ops_act_bytes(OPS_ACT_PANELS,
 * n_rows + n_groups * lanes, n_in). */
void ops_act_group_panels(ops_pool *pool, const float *x, int64_t n_rows, int64_t n_in,
                          const int32_t *start, int32_t n_groups, void *buf, ops_act *out);
/* Converts x (n_rows x n_in floats) into buf as `type` (in parallel when the
 * pool is given; 64-byte aligned buf for panels); for F32 the result points at
 * x itself. */
void ops_act_prepare(ops_pool *pool, const float *x, int64_t n_rows, int64_t n_in, uint32_t type,
                     void *buf, ops_act *out);

/* The most matrices one ops_matmul call takes (8 experts x gate/up and more). */
#define OPS_MATMUL_MAX 64

/* For every matrix i < n (n <= OPS_MATMUL_MAX):
 *   ys[i][r * ws[i]->n_out + o] = dot(row o of ws[i], row r of acts[i])
 * in one parallel pass, so small products (Q, K, V; gate and up; the experts of
 * a MoE layer) share one fork/join. acts[i] may be the same activation. */
void ops_matmul(ops_pool *pool, int n, const ops_matrix *const *ws, const ops_act *const *acts,
                float *const *ys);

/* ---- offload (the gpu module's hook, issue 10) ----
 * A hook may run some products of an ops_matmul call elsewhere (a GPU holding
 * a copy of the matrix): it writes ys[i] and sets done[i] for each product it
 * ran, and ops_matmul runs the rest on the pool. It is called on the thread
 * that called ops_matmul, before the pool's work. NULL fn removes the hook.
 * `holds` says which matrices the hook runs (NULL: all): those get their
 * activations in the weight type's vec_dot_type (ops_act_type), the others
 * keep the CPU's own formats. */
typedef void (*ops_offload_fn)(void *user, int n, const ops_matrix *const *ws,
                               const ops_act *const *acts, float *const *ys, bool *done);
typedef bool (*ops_offload_holds_fn)(void *user, const ops_matrix *w);
void ops_pool_set_offload(ops_pool *p, ops_offload_fn fn, ops_offload_holds_fn holds, void *user);
/* The hook in force (fn NULL when none); holds may be NULL when not wanted. */
void ops_pool_offload(const ops_pool *p, ops_offload_fn *fn, ops_offload_holds_fn *holds,
                      void **user);
/* Whether the pool's hook runs products of w. */
bool ops_pool_holds(const ops_pool *p, const ops_matrix *w);

/* ---- element-wise and row ops (single thread; callers split rows) ---- */

/* out = x / rms(x) * w (Zhang & Sennrich 2019); w may be NULL (no scale). */
void ops_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *out);
/* x = silu(g) * u, SwiGLU (Shazeer 2020); in place into g */
void ops_swiglu(float *g, const float *u, int64_t n);
/* x += y */
void ops_add(float *x, const float *y, int64_t n);

/* RoPE (Su et al. 2021) on one head of head_dim values at the angles in cs
 * (cos, sin pairs for the first n_rot dims). NORM rotates adjacent pairs
 * (x[2i], x[2i+1]) as GGUF llama files expect; NEOX rotates halves
 * (x[i], x[i + n_rot/2]). */
typedef enum ops_rope_mode { OPS_ROPE_NORM = 0, OPS_ROPE_NEOX = 2 } ops_rope_mode;
void ops_rope(float *x, int64_t head_dim, int64_t n_rot, const float *cs, ops_rope_mode mode);
/* cs[2i], cs[2i+1] = cos, sin of pos * inv_freq[i] for i < n_rot/2 */
void ops_rope_angles(float pos, const float *inv_freq, int64_t n_rot, float *cs);

/* ---- attention ---- */

/* Keys and values of one layer: row p (a position) holds n_head_kv heads of
 * head_dim values each, as F32 or F16. */
typedef struct ops_kv_view {
    void *k;
    void *v;
    uint32_t type;      /* GGUF_TYPE_F32 or GGUF_TYPE_F16 */
    size_t row_elems;   /* n_head_kv * head_dim */
} ops_kv_view;

/* Bytes of one cached value: the one place that knows the KV element sizes. */
static inline size_t ops_kv_elem_bytes(uint32_t type) {
    return type == GGUF_TYPE_F32 ? 4 : 2;
}
/* Bytes of one position's K (or V) row. */
static inline size_t ops_kv_row_bytes(const ops_kv_view *kv) {
    return kv->row_elems * ops_kv_elem_bytes(kv->type);
}

typedef struct ops_attn_args {
    const float *q;     /* n_tok x (n_head * head_dim) */
    float *out;         /* n_tok x (n_head * head_dim) */
    const int32_t *pos; /* n_tok positions; token t sees cache rows 0..pos[t] */
    int64_t n_tok;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;
    float scale;        /* usually 1/sqrt(head_dim) */
    ops_kv_view kv;
    float *scratch;     /* nth x scratch_stride floats */
    size_t scratch_stride; /* ops_attention_scratch: at least (n_head / n_head_kv) * n_ctx
                              + head_dim (the scores of a KV head's query heads, then a
                              converted K or V row); passes of many rows attend by rows
                              in lanes where it holds QUANT_ATTEND_ROWS_SCRATCH */
} ops_attn_args;

/* The scratch floats a thread of ops_attention needs, for every pass */
size_t ops_attention_scratch(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_ctx);

/* Grouped-query attention (Ainslie et al. 2023) with a causal window. */
void ops_attention(ops_pool *pool, const ops_attn_args *a);
/* n attentions as one job (the sequences of a batch, each over its own
 * cache): the same results as n calls of ops_attention, one fork and join.
 * Every a[i] has the same KV type and head size; a[0]'s scratch serves all. */
void ops_attention_seqs(ops_pool *pool, const ops_attn_args *a, int32_t n);

#endif /* LARES_OPS_H */
