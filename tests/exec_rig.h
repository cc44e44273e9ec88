/*
 * A model opened for the executor's tests (test_mem_stream,
 * test_expert_guess): the file, the model, a one-thread pool, an F32 KV
 * cache of n_ctx positions, a context of n_batch rows, and buffers for
 * n_batch embeddings and one row of logits.
 */
#ifndef LARES_TESTS_EXEC_RIG_H
#define LARES_TESTS_EXEC_RIG_H

#include "check.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "ops/ops.h"

typedef struct rig {
    gguf_file *f;
    model *m;
    ops_pool *pool;
    model_kv *kv;
    model_ctx *cx;
    float *x, *logits;
} rig;

static void rig_close(rig *r) {
    free(r->x);
    free(r->logits);
    model_ctx_free(r->cx);
    model_kv_free(r->kv);
    ops_pool_free(r->pool);
    model_free(r->m);
    gguf_close(r->f);
    memset(r, 0, sizeof *r);
}

static bool rig_open(rig *r, const char *path, int32_t n_batch, int32_t n_ctx) {
    lares_error err = {0};
    memset(r, 0, sizeof *r);
    CHECK_OK(gguf_open(path, NULL, &r->f, &err), &err);
    if (r->f != NULL) {
        CHECK_OK(model_load(r->f, &r->m, &err), &err);
    }
    if (r->m == NULL) {
        rig_close(r);
        return false;
    }
    CHECK_OK(ops_pool_create(1, &r->pool, &err), &err);
    CHECK_OK(model_kv_create(r->m, 0, r->m->hp.n_layer, n_ctx, GGUF_TYPE_F32, &r->kv, &err), &err);
    CHECK_OK(model_ctx_create(r->m, r->pool, n_batch, n_ctx, &r->cx, &err), &err);
    r->x = calloc((size_t)n_batch * (size_t)r->m->hp.n_embd, sizeof(float));
    r->logits = calloc((size_t)r->m->hp.n_vocab, sizeof(float));
    if (r->kv == NULL || r->cx == NULL || r->x == NULL || r->logits == NULL) {
        rig_close(r);
        return false;
    }
    return true;
}

#endif /* LARES_TESTS_EXEC_RIG_H */
