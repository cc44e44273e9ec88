/*
 * A session's device: estimate, place, upload the chosen matrices, and route
 * their products there through the pool's offload hook (ops.h). The hook finds
 * a matrix by the address of its host weights (sorted, binary search), so
 * model/ and exec/ need no change: the per-tensor decision "where does this
 * product run" is the presence of a device copy.
 */
#include "gpu/gpu_impl.h"

#include <stdlib.h>
#include <string.h>

struct gpu_session {
    const gpu_device_ops *ops;
    gpu_device *dev;      /* owned */
    ops_pool *pool;       /* borrowed; holds our hook while we live */
    gpu_meas *meas;       /* owned */
    gpu_placement *place; /* owned */
    gpu_dev_matrix *tensors;  /* owned, n_dev, sorted by host */
    size_t n_dev;
    gpu_session_info info;
    gpu_layers *layers;   /* owned: the layers that run whole on the device; NULL: none */
    lares_error first_err; /* the first device failure (its products then ran on the CPU) */
    uint64_t n_failed;
};

gpu_session_opts gpu_session_opts_default(void) {
    return (gpu_session_opts){.backend = GPU_BACKEND_CUDA,
                              .method = GPU_OFFLOAD_AFFINITY,
                              .mem_cap_bytes = 0,
                              .n_layers = -1,
                              .n_tok_plan = 1,
                              .emul_vram_bytes = 0,
                              .rates = NULL,
                              .measure_cpu = false,
                              .kv_reserve_bytes = 0,
                              .whole_layers = true};
}

static int by_host(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t)((const gpu_dev_matrix *)a)->host;
    const uintptr_t y = (uintptr_t)((const gpu_dev_matrix *)b)->host;
    return x < y ? -1 : x > y;
}

const gpu_dev_matrix *gpu_dev_matrix_find(const gpu_dev_matrix *mats, size_t n,
                                          const ops_matrix *w) {
    const gpu_dev_matrix key = {.host = w->data};
    const gpu_dev_matrix *t = bsearch(&key, mats, n, sizeof(gpu_dev_matrix), by_host);
    return t != NULL && t->n_in == w->n_in && t->n_out == w->n_out ? t : NULL;
}

/* the hook's products: a device copy of the same shape, activations in the
 * weight type's vec_dot_type (ops_act_type gives them that format) */
static const gpu_dev_matrix *held(const gpu_session *s, const ops_matrix *w) {
    return gpu_dev_matrix_find(s->tensors, s->n_dev, w);
}

static bool holds(void *user, const ops_matrix *w) {
    return held(user, w) != NULL;
}

static void offload(void *user, int n, const ops_matrix *const *ws, const ops_act *const *acts,
                    float *const *ys, bool *done) {
    gpu_session *s = user;
    for (int i = 0; i < n; i++) {
        const gpu_dev_matrix *t = held(s, ws[i]);
        if (t == NULL || acts[i]->type != ws[i]->qt->vec_dot_type) {
            continue;
        }
        lares_error e = {0};
        if (s->ops->matmul(s->dev, t->dev, t->type, t->n_in, t->n_out, acts[i], ys[i], &e) !=
            LARES_OK) {
            /* the CPU computes it instead; the failure is counted and kept for
             * gpu_session_get_info's caller, and logged once */
            if (s->n_failed++ == 0) {
                s->first_err = e;
                lares_log(LARES_LOG_WARN, "gpu: %s (falling back to the CPU)", e.msg);
            }
            continue;
        }
        done[i] = true;
        s->info.n_offloaded++;
    }
}

void gpu_session_free(gpu_session *s) {
    if (s == NULL) {
        return;
    }
    if (s->pool != NULL) {
        ops_pool_set_offload(s->pool, NULL, NULL, NULL);
    }
    gpu_layers_free(s->layers);
    for (size_t i = 0; s->dev != NULL && i < s->n_dev; i++) {
        s->ops->release(s->dev, s->tensors[i].dev);
    }
    if (s->dev != NULL) {
        s->ops->close(s->dev);
    }
    lares_free(s->tensors);
    gpu_placement_free(s->place);
    gpu_meas_free(s->meas);
    lares_free(s);
}

lares_status gpu_session_create(const model *mdl, ops_pool *pool, const gpu_session_opts *o,
                                gpu_session **out, lares_error *err) {
    const gpu_device_ops *ops = o->backend == GPU_BACKEND_EMUL
                                    ? &gpu_emul_ops
                                    : (o->backend == GPU_BACKEND_CUDA ? gpu_cuda_ops() : NULL);
    if (ops == NULL) {
        if (o->backend == GPU_BACKEND_CUDA) {
            return gpu_cuda_probe(NULL, 0, NULL, err);
        }
        return lares_fail(err, LARES_EINVAL, "gpu session: unknown backend %d", (int)o->backend);
    }
    if (o->method != GPU_OFFLOAD_LAYERS && o->method != GPU_OFFLOAD_AFFINITY) {
        return lares_fail(err, LARES_EINVAL, "gpu session: method '%s' places nothing",
                          gpu_method_name(o->method));
    }
    ops_offload_fn cur;
    void *cur_user;
    ops_pool_offload(pool, &cur, NULL, &cur_user);
    if (pool == NULL || cur != NULL) {
        return lares_fail(err, LARES_EBUSY, "gpu session: the thread pool %s",
                          pool == NULL ? "is missing" : "already offloads to a device");
    }
    const ops_matrix **ws = NULL;
    lares_status st;
    gpu_session *s = lares_calloc(1, sizeof(*s));
    if (s == NULL) {
        return lares_fail(err, LARES_ENOMEM, "gpu session: out of memory");
    }
    s->ops = ops;
    s->info.backend = ops->name;
    s->info.method = o->method;
    st = ops->open(o->emul_vram_bytes, &s->dev, s->info.device, sizeof(s->info.device),
                   &s->info.vram_free_bytes, err);
    if (st != LARES_OK) {
        goto fail;
    }
    gpu_est_rates rates = o->rates != NULL ? *o->rates : gpu_est_rates_default();
    if (o->rates == NULL && (o->backend == GPU_BACKEND_CUDA || o->measure_cpu)) {
        /* the CPU side measured on the pool that will run it, a CUDA device by
         * its profiler (docs/gpu.md) */
        st = gpu_measure_cpu(pool, &rates, err);
        if (st != LARES_OK) {
            goto fail;
        }
        if (o->backend == GPU_BACKEND_CUDA) {
            /* and the device: its products, launches and copies */
            st = gpu_cuda_measure(&rates, err);
            if (st != LARES_OK) {
                goto fail;
            }
            lares_log(LARES_LOG_INFO,
                      "gpu: measured copies %.1f us, %.1f GB/s in, %.1f GB/s out; launches "
                      "%.1f us waited, %.1f us queued; mat-vec Q4_0 %.0f, Q8_0 %.0f, Q4_K %.0f, "
                      "Q6_K %.0f, F16 %.0f GB/s; %.1f TFLOP/s (Q4_K, 32 rows)",
                      rates.link.latency_s * 1e6, rates.link.h2d_Bps / 1e9,
                      rates.link.d2h_Bps / 1e9, rates.gpu_launch_s * 1e6,
                      rates.gpu_queue_s * 1e6, rates.gpu_Bps_type[GGUF_TYPE_Q4_0] / 1e9,
                      rates.gpu_Bps_type[GGUF_TYPE_Q8_0] / 1e9,
                      rates.gpu_Bps_type[GGUF_TYPE_Q4_K] / 1e9,
                      rates.gpu_Bps_type[GGUF_TYPE_Q6_K] / 1e9,
                      rates.gpu_Bps_type[GGUF_TYPE_F16] / 1e9, rates.gpu_flops / 1e12);
        }
    }
    /* whole layers are priced only where they will run */
    rates.device_layers = rates.device_layers && o->whole_layers && ops->alloc != NULL;
    st = gpu_estimate_with_matrices(mdl, &rates, o->n_tok_plan, &s->meas, &ws, err);
    if (st != LARES_OK) {
        goto fail;
    }
    /* the KV caches' room comes off the free memory first; a device with less
     * than that left gets a budget of nothing (1 byte: gpu_budget takes 0 as
     * "unknown", the cap alone) */
    const uint64_t vram = s->info.vram_free_bytes;
    const uint64_t for_weights =
        vram == 0 ? 0 : vram > o->kv_reserve_bytes ? vram - o->kv_reserve_bytes : 1;
    gpu_place_opts po = {.method = o->method,
                         .budget_bytes = gpu_budget(for_weights, o->mem_cap_bytes),
                         .n_layers = o->n_layers};
    st = gpu_place(s->meas, &po, &s->place, err);
    if (st != LARES_OK) {
        goto fail;
    }
    s->tensors = lares_calloc(s->place->n_placed > 0 ? s->place->n_placed : 1, sizeof(gpu_dev_matrix));
    if (s->tensors == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "gpu session: out of memory");
        goto fail;
    }
    for (size_t k = 0; k < s->place->n_placed; k++) {
        const size_t i = s->place->order[k];
        const ops_matrix *w = ws[i];
        const size_t bytes = w->row_bytes * (size_t)w->n_out;
        gpu_dev_matrix *t = &s->tensors[s->n_dev];
        st = ops->upload(s->dev, w->data, bytes, &t->dev, err);
        if (st != LARES_OK) {
            lares_error_prefix(err, "uploading %s: ", s->meas->t[i].name);
            goto fail;
        }
        t->host = w->data;
        t->type = w->qt->type;
        t->n_in = w->n_in;
        t->n_out = w->n_out;
        s->n_dev++;
    }
    qsort(s->tensors, s->n_dev, sizeof(gpu_dev_matrix), by_host);
    for (size_t k = 1; k < s->n_dev; k++) {
        if (s->tensors[k].host == s->tensors[k - 1].host) {
            /* a tied output matrix shares its weights with an uploaded one */
            st = lares_fail(err, LARES_EINVAL, "gpu session: two matrices share weights at %p",
                            s->tensors[k].host);
            goto fail;
        }
    }
    if (o->whole_layers) {
        st = gpu_layers_create(mdl, ops, s->dev, s->tensors, s->n_dev, &s->layers, err);
        if (st != LARES_OK) {
            goto fail;
        }
    }
    gpu_session_info *in = &s->info;
    in->n_layers_device = gpu_layers_whole(s->layers);
    in->budget_bytes = po.budget_bytes;
    in->weight_bytes = s->place->weight_bytes;
    for (size_t i = 0; i < s->meas->n_tensors; i++) {
        in->model_weight_bytes += s->meas->t[i].bytes;
    }
    in->n_tensors = (int32_t)s->meas->n_tensors;
    in->n_tensors_gpu = (int32_t)s->place->n_placed;
    in->n_layers_whole = s->place->n_layers_whole;
    in->t_pass_ms = s->place->t_pass_s * 1e3;
    in->t_cpu_ms = s->place->t_cpu_s * 1e3;
    lares_free(ws);
    s->pool = pool;
    ops_pool_set_offload(pool, offload, holds, s);
    *out = s;
    return LARES_OK;
fail:
    lares_free(ws);
    gpu_session_free(s);
    return st;
}

void gpu_session_get_info(const gpu_session *s, gpu_session_info *out) {
    *out = s->info;
    out->n_layer_runs = gpu_layers_run_count(s->layers);
}

void gpu_session_attach(gpu_session *s, model_ctx *cx) {
    if (s != NULL && s->layers != NULL) {
        model_ctx_on_layer(cx, gpu_layers_forward, s->layers);
    }
}

const gpu_placement *gpu_session_placement(const gpu_session *s) {
    return s->place;
}

lares_status gpu_session_open_named(const model *mdl, ops_pool *pool, const char *method,
                                    uint64_t gpu_mem, int32_t n_gpu_layers,
                                    uint64_t kv_reserve_bytes, gpu_session **out,
                                    lares_error *err) {
    const int mth = gpu_method_from_name(method);
    if (mth != GPU_OFFLOAD_LAYERS && mth != GPU_OFFLOAD_AFFINITY) {
        return lares_fail(err, LARES_EINVAL, "offload method '%s' is not layers or affinity",
                          method);
    }
    if (n_gpu_layers < 0) {
        return lares_fail(err, LARES_EINVAL, "%d gpu layers", (int)n_gpu_layers);
    }
    gpu_session_opts o = gpu_session_opts_default();
    /* LARES_GPU_BACKEND=emulated: the whole path on the host-memory device
     * (emul.c, 16 GiB "free"), for tests and debugging on machines without a
     * GPU; its products are the scalar reference's, so slow */
    const char *be = getenv("LARES_GPU_BACKEND");
    if (be != NULL && strcmp(be, "emulated") == 0) {
        o.backend = GPU_BACKEND_EMUL;
        o.emul_vram_bytes = (uint64_t)16 << 30;
        o.measure_cpu = true;
    }
    o.method = (gpu_method)mth;
    o.mem_cap_bytes = gpu_mem;
    o.kv_reserve_bytes = kv_reserve_bytes;
    /* LARES_GPU_LAYERS=products: every layer product by product (the path
     * before whole layers, for comparisons) */
    const char *wl = getenv("LARES_GPU_LAYERS");
    o.whole_layers = wl == NULL || strcmp(wl, "products") != 0;
    o.n_layers = n_gpu_layers > 0 ? n_gpu_layers : -1;
    lares_status st = gpu_session_create(mdl, pool, &o, out, err);
    if (st == LARES_OK) {
        gpu_session_info in;
        gpu_session_get_info(*out, &in);
        lares_log(LARES_LOG_INFO,
                  "gpu: %s, %s: %d of %d matrices (%" PRIu64 " of %" PRIu64
                  " bytes), %d layers whole on the device, predicted %.2f ms per token against "
                  "%.2f on the CPU",
                  in.device, gpu_method_name(in.method), (int)in.n_tensors_gpu, (int)in.n_tensors,
                  in.weight_bytes, in.model_weight_bytes, (int)in.n_layers_device, in.t_pass_ms,
                  in.t_cpu_ms);
    } else {
        lares_error_prefix(err, "--offload %s: ", method);
    }
    return st;
}
