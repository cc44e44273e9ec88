/*
 * exec: runs layer windows on this device.
 *
 * Owns: the local executor that joins the forward pass (model) with weight
 * residency (mem): when the weights of the windows this device runs fit its
 * memory budget it simply calls model_forward; when they do not, it streams
 * them window by window (prefetch ahead, release behind). The head's session
 * and a ring worker use the same executor for the windows they own.
 *
 * Knows nothing about sockets or sampling.
 *
 * Lifetimes: borrows the model, KV cache and working memory, which outlive it.
 */
#ifndef LARES_EXEC_H
#define LARES_EXEC_H

#include "model/model.h"

typedef struct exec_opts {
    uint64_t mem_budget_bytes; /* 0: decide from the machine (memory-budget work) */
} exec_opts;

typedef struct exec_local exec_local;

lares_status exec_local_create(const model *m, model_kv *kv, model_ctx *cx, const exec_opts *o,
                               exec_local **out, lares_error *err);
void exec_local_free(exec_local *e);

/* Runs layers [l0, l1) on x (n_tok rows of n_embd) at positions pos. */
lares_status exec_local_forward(exec_local *e, int32_t l0, int32_t l1, const int32_t *pos,
                                int32_t n_tok, float *x, lares_error *err);

#endif /* LARES_EXEC_H */
