/* Sessions: everything one conversation needs, sized once at creation. */
#include "api/api.h"
#include "api/ring.h"
#include "gpu/gpu.h"

lares_session_opts lares_session_opts_default(void) {
    lares_session_opts o = {.n_ctx = 0, .n_threads = 0, .n_batch = 0, .kv_type = LARES_KV_AUTO};
    return o;
}

void lares_session_free(lares_session *s) {
    if (s == NULL) {
        return;
    }
    lares_session_free(s->draft);
    api_ring_free(s->ring);
    exec_local_free(s->exec);
    model_ctx_free(s->cx);
    model_kv_free(s->kv);
    gpu_session_free(s->gpu); /* takes its hook off the pool first */
    if (!s->pool_borrowed) {
        ops_pool_free(s->pool);
    }
    lares_free(s->x);
    lares_free(s->logits);
    lares_free(s->logits_many);
    lares_free(s->history);
    lares_free(s->pos);
    lares_free(s);
}

/* prompt tokens per forward pass when the caller does not say */
#define DEFAULT_BATCH 128
/* the largest F32 KV cache the automatic choice allows */
#define KV_AUTO_F32_BYTES (64.0 * 1024 * 1024)

lares_status api_session_create(lares_model *lm, const lares_session_opts *opts, ops_pool *pool,
                                lares_session **out, lares_error *err) {
    if (lm->m == NULL) {
        return lares_fail(err, LARES_EINVAL, "%s was opened for its vocabulary only", lm->path);
    }
    const model_hparams *hp = &lm->m->hp;
    lares_session_opts o = opts ? *opts : lares_session_opts_default();
    if (o.n_ctx < 0 || o.n_threads < 0 || o.n_batch < 0) {
        return lares_fail(err, LARES_EINVAL, "context, threads and batch must not be negative");
    }
    if (o.n_ctx == 0) {
        o.n_ctx = hp->n_ctx_train;
    }
    if (o.n_threads == 0) {
        o.n_threads = lares_cpu_count();
    }
    if (o.n_batch == 0) {
        o.n_batch = DEFAULT_BATCH;
    }
    if (o.n_batch > o.n_ctx) {
        o.n_batch = o.n_ctx;
    }
    if (o.kv_type == LARES_KV_AUTO) {
        const double f32_bytes = 8.0 * hp->n_layer * (double)hp->n_head_kv * hp->head_dim * o.n_ctx;
        o.kv_type = f32_bytes <= KV_AUTO_F32_BYTES ? LARES_KV_F32 : LARES_KV_F16;
    }
    if (o.mem_window < 0) {
        return lares_fail(err, LARES_EINVAL, "memory window of %d units", o.mem_window);
    }
    if ((unsigned)o.stream_io > LARES_STREAM_IO_DIRECT) {
        return lares_fail(err, LARES_EINVAL, "unknown stream I/O %d", (int)o.stream_io);
    }
    if (o.kv_type != LARES_KV_F16 && o.kv_type != LARES_KV_F32) {
        return lares_fail(err, LARES_EINVAL, "unknown KV cache type %d", (int)o.kv_type);
    }
    uint64_t t0 = lares_now_ns();
    lares_session *s = lares_calloc(1, sizeof *s);
    if (s == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    s->lm = lm;
    s->o = o;
    atomic_init(&s->cancel, false);
    lares_status st = LARES_OK;
    if (pool != NULL) {
        s->pool = pool;
        s->pool_borrowed = true;
        o.n_threads = s->o.n_threads = ops_pool_size(pool);
    } else {
        st = ops_pool_create(o.n_threads, &s->pool, err);
    }
    if (st == LARES_OK) {
        st = model_kv_create(lm->m, 0, hp->n_layer, o.n_ctx,
                             o.kv_type == LARES_KV_F32 ? GGUF_TYPE_F32 : GGUF_TYPE_F16, &s->kv,
                             err);
    }
    if (st == LARES_OK) {
        st = model_ctx_create(lm->m, s->pool, o.n_batch, o.n_ctx, &s->cx, err);
    }
    if (st == LARES_OK) {
        s->x = lares_alloc_array((size_t)o.n_batch * (size_t)hp->n_embd, sizeof *s->x);
        s->logits = lares_alloc_array((size_t)hp->n_vocab, sizeof *s->logits);
        s->history = lares_alloc_array((size_t)o.n_ctx, sizeof *s->history);
        s->pos = lares_alloc_array((size_t)o.n_batch, sizeof *s->pos);
        if (s->x == NULL || s->logits == NULL || s->history == NULL || s->pos == NULL) {
            st = lares_fail(err, LARES_ENOMEM, "out of memory for the session buffers");
        }
    }
    /* the executor last: its weight budget is what the buffers above leave */
    exec_opts eo;
    if (st == LARES_OK) {
        st = api_exec_opts(s, &eo, &s->mem_budget_bytes, err);
    }
    if (st == LARES_OK && o.ring != NULL) {
        st = api_ring_open(s, &eo, err); /* the workers, and the head's own windows in eo */
    }
    if (st == LARES_OK) {
        st = exec_local_create(lm->m, s->kv, s->cx, &eo, &s->exec, err);
    }
    /* weights that stream through the page cache keep a prefetch thread busy
     * in the kernel: when the thread count is ours to choose, leave it a core
     * (measured in docs/memory.md: 6-8 % faster on 2 cores than sharing
     * them). Direct reads cost it next to no CPU (the disk's DMA fills the
     * buffers while it waits), so every core computes: on 2 cores, llama-7b in
     * 3.0 and 2.0 GB, prompts 1.6x faster and generation the same within the
     * noise (docs/memory.md). Where only MoE experts stream (every layer's
     * unit pinned) the prefetch thread has nothing to read: the experts are
     * asked for from the compute's own thread, so every core computes too
     * (qwen3moe-7b in 1.2 GB through the page cache: 9.3 -> 15 tok/s). */
    const bool auto_threads = (opts == NULL || opts->n_threads == 0) && !s->pool_borrowed;
    exec_plan_info pi = {0};
    if (st == LARES_OK) {
        exec_local_plan(s->exec, &pi);
    }
    if (st == LARES_OK && auto_threads && o.n_threads > 1 && !pi.direct && pi.stream_bytes > 0 &&
        api_streams_surely(s)) {
        ops_pool *fewer = NULL;
        if (ops_pool_create(o.n_threads - 1, &fewer, NULL) == LARES_OK) {
            ops_pool_free(s->pool);
            s->pool = fewer;
            s->cx->pool = fewer;
            s->o.n_threads = o.n_threads - 1;
        }
    }
    /* GPU offload last, on the pool that will run the products (issue 10) */
    if (st == LARES_OK && o.offload != NULL && strcmp(o.offload, "none") != 0) {
        st = gpu_session_open_named(lm->m, s->pool, o.offload, o.gpu_mem, o.gpu_layers,
                                    s->kv->bytes, &s->gpu, err);
        if (st == LARES_OK) {
            gpu_session_attach(s->gpu, s->cx);
        }
    }
    if (st != LARES_OK) {
        lares_session_free(s);
        return st;
    }
    s->create_ms = lares_ns_to_ms(lares_now_ns() - t0);
    *out = s;
    return LARES_OK;
}

lares_status lares_session_create(lares_model *lm, const lares_session_opts *opts,
                                  lares_session **out, lares_error *err) {
    return api_session_create(lm, opts, NULL, out, err);
}

int32_t lares_session_n_ctx(const lares_session *s) {
    return s->o.n_ctx;
}

int32_t lares_session_n_threads(const lares_session *s) {
    return s->o.n_threads;
}

bool lares_session_gpu_info(const lares_session *s, lares_gpu_info *out) {
    if (s->gpu == NULL) {
        return false;
    }
    gpu_session_info in;
    gpu_session_get_info(s->gpu, &in);
    *out = (lares_gpu_info){.backend = in.backend,
                            .method = gpu_method_name(in.method),
                            .budget_bytes = in.budget_bytes,
                            .weight_bytes = in.weight_bytes,
                            .model_weight_bytes = in.model_weight_bytes,
                            .n_matrices = in.n_tensors,
                            .n_matrices_gpu = in.n_tensors_gpu,
                            .n_layers_device = in.n_layers_device,
                            .predicted_ms = in.t_pass_ms,
                            .cpu_predicted_ms = in.t_cpu_ms,
                            .n_products = in.n_offloaded,
                            .n_layer_runs = in.n_layer_runs};
    snprintf(out->device, sizeof out->device, "%s", in.device);
    return true;
}

void lares_session_truncate(lares_session *s, int32_t pos) {
    if (pos < 0) {
        pos = 0;
    }
    if (pos < s->n_past) {
        s->n_past = pos;
    }
}

const int32_t *lares_session_tokens(const lares_session *s, int32_t *n_past) {
    if (n_past != NULL) {
        *n_past = s->n_past;
    }
    return s->history;
}

void lares_session_cancel(lares_session *s) {
    atomic_store(&s->cancel, true);
}
