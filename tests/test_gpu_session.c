/*
 * gpu sessions (issue 10) on the emulated device: placement, upload and the
 * ops_matmul offload hook drive real models, and the greedy continuation still
 * matches the reference engine's token ids (expected/greedy_once_upon_a_time.json)
 * as far as the CPU path does, with products actually routed to the device.
 * The CUDA device runs the same orchestration (cuda/device.cu); its kernels are
 * checked by test_gpu_kernels where a device is present.
 */
#include "check.h"
#include "gpu_layer_checks.h"
#include "gpu/gpu_impl.h"
#include "greedy_cases.h"
#include "gguf/gguf.h"
#include "gpu/gpu.h"
#include "model/model.h"
#include "ops/ops.h"

#include <jansson.h>

typedef struct runner {
    gguf_file *f;
    model *m;
    ops_pool *pool;
    model_kv *kv;
    model_ctx *cx;
    float *x, *logits;
} runner;

static bool runner_open(runner *r, const char *rel) {
    lares_error err = {0};
    memset(r, 0, sizeof *r);
    CHECK_OK(gguf_open(fixture(rel), NULL, &r->f, &err), &err);
    if (r->f == NULL) {
        return false;
    }
    CHECK_OK(model_load(r->f, &r->m, &err), &err);
    if (r->m == NULL) {
        return false;
    }
    CHECK_OK(ops_pool_create(2, &r->pool, &err), &err);
    CHECK_OK(model_kv_create(r->m, 0, r->m->hp.n_layer, 128, GGUF_TYPE_F32, &r->kv, &err), &err);
    CHECK_OK(model_ctx_create(r->m, r->pool, 8, 128, &r->cx, &err), &err);
    r->x = calloc((size_t)8 * (size_t)r->m->hp.n_embd, sizeof(float));
    r->logits = calloc((size_t)r->m->hp.n_vocab, sizeof(float));
    return r->kv != NULL && r->cx != NULL;
}

static void runner_close(runner *r) {
    free(r->x);
    free(r->logits);
    model_ctx_free(r->cx);
    model_kv_free(r->kv);
    ops_pool_free(r->pool);
    model_free(r->m);
    gguf_close(r->f);
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++) {
        if (v[i] > v[b]) {
            b = i;
        }
    }
    return b;
}

/* feeds tokens at p0.. in batches of up to 8 (prompt: mat-mat; then mat-vec) */
static bool feed(runner *r, const int32_t *tokens, int n, int p0) {
    lares_error err = {0};
    int32_t pos[8];
    for (int done = 0; done < n;) {
        const int k = n - done < 8 ? n - done : 8;
        for (int i = 0; i < k; i++) {
            pos[i] = p0 + done + i;
        }
        if (model_embed(r->m, tokens + done, k, r->x, &err) != LARES_OK ||
            model_forward(r->m, r->kv, r->cx, 0, r->m->hp.n_layer, pos, k, r->x, &err) !=
                LARES_OK) {
            fprintf(stderr, "forward: %s\n", err.msg);
            return false;
        }
        done += k;
        if (done == n) {
            model_output(r->m, r->cx, r->x + (size_t)(k - 1) * (size_t)r->m->hp.n_embd, 1,
                         r->logits);
        }
    }
    return true;
}

/* how many of want[] the greedy continuation matches in a row (-1: failure) */
static int greedy_agree(runner *r, const int32_t *prompt, int np, const int32_t *want, int nw) {
    if (!feed(r, prompt, np, 0)) {
        return -1;
    }
    for (int i = 0; i < nw; i++) {
        int32_t t = argmax(r->logits, r->m->hp.n_vocab);
        if (t != want[i]) {
            return i;
        }
        if (i + 1 < nw && !feed(r, &t, 1, np + i)) {
            return -1;
        }
    }
    return nw;
}

/* every matrix of the last layer and the head, through the hook and on the
 * CPU: the same products within float-order tolerance, and those the session
 * placed counted as offloaded */
static void compare_products(runner *r, gpu_session *s) {
    const model_layer *l = &r->m->layers[r->m->hp.n_layer - 1];
    const ops_matrix *ws[] = {&l->mat[MODEL_ROLE_Q],    &l->mat[MODEL_ROLE_K],
                              &l->mat[MODEL_ROLE_V],    &l->mat[MODEL_ROLE_O],
                              &l->mat[MODEL_ROLE_GATE], &l->mat[MODEL_ROLE_UP],
                              &l->mat[MODEL_ROLE_DOWN], &r->m->output};
    gpu_session_info before, after;
    gpu_session_get_info(s, &before);
    for (size_t i = 0; i < LARES_ARRAY_LEN(ws); i++) {
        const ops_matrix *w = ws[i];
        float *x = malloc((size_t)w->n_in * 2 * sizeof(float));
        float *y1 = malloc((size_t)w->n_out * 2 * sizeof(float));
        float *y2 = malloc((size_t)w->n_out * 2 * sizeof(float));
        void *buf = malloc(ops_act_bytes(w->qt->vec_dot_type, 2, w->n_in));
        for (int64_t k = 0; k < 2 * w->n_in; k++) {
            x[k] = sinf((float)k * 0.37f) * 2;
        }
        ops_act a;
        ops_act_prepare(NULL, x, 2, w->n_in, w->qt->vec_dot_type, buf, &a);
        const ops_act *as[] = {&a};
        ops_matmul(r->pool, 1, &ws[i], as, &y1);
        ops_offload_fn fn;
        ops_offload_holds_fn holds;
        void *user;
        ops_pool_offload(r->pool, &fn, &holds, &user);
        ops_pool_set_offload(r->pool, NULL, NULL, NULL);
        ops_matmul(r->pool, 1, &ws[i], as, &y2);
        ops_pool_set_offload(r->pool, fn, holds, user);
        int bad = 0;
        for (int64_t k = 0; k < 2 * w->n_out; k++) {
            bad += !(fabsf(y1[k] - y2[k]) <= 1e-4f * (1 + fabsf(y2[k])));
        }
        CHECKF(bad == 0, "matrix %zu: %d of %lld products differ", i, bad,
               (long long)(2 * w->n_out));
        free(x), free(y1), free(y2), free(buf);
    }
    gpu_session_get_info(s, &after);
    CHECK(after.n_offloaded > before.n_offloaded);
}

/* one file per device weight type the fixtures have: their rows of 128 are too
 * short for K-quants (the Q4_K_M file holds Q5_0 matrices, which the device
 * leaves to the CPU), so Q4_K and Q6_K products are covered by test_gpu_kernels */
static const char *const files[] = {
    "TinyStories-656K.f16.gguf",
    "derived/TinyStories-656K.llamacpp-Q8_0.gguf",
    "derived/TinyStories-656K.llamacpp-Q4_0.gguf",
};

static void test_greedy_on_emulated_device(void) {
    json_error_t je;
    json_t *root = json_load_file(fixture("expected/greedy_once_upon_a_time.json"), 0, &je);
    CHECKF(root != NULL, "expected file: %s", je.text);
    if (root == NULL) {
        return;
    }
    for (size_t c = 0; c < LARES_ARRAY_LEN(files); c++) {
        json_t *res = find_result(root, files[c]);
        CHECKF(res != NULL, "%s not in the expected file", files[c]);
        if (res == NULL) {
            continue;
        }
        int32_t prompt[64], want[64];
        const int np = ids_from(json_object_get(res, "prompt_token_ids_with_bos"), prompt, 64);
        const int nw = ids_from(json_object_get(res, "reference_greedy_token_ids"), want, 64);
        runner r;
        /* the CPU's agreement is the bar */
        if (!runner_open(&r, files[c])) {
            runner_close(&r);
            continue;
        }
        const int cpu_agree = greedy_agree(&r, prompt, np, want, nw);
        runner_close(&r);
        CHECKF(cpu_agree >= 5, "%s: cpu agrees on %d", files[c], cpu_agree);
        for (int method = GPU_OFFLOAD_LAYERS; method <= GPU_OFFLOAD_AFFINITY; method++) {
            if (!runner_open(&r, files[c])) {
                runner_close(&r);
                continue;
            }
            lares_error err = {0};
            gpu_session_opts o = gpu_session_opts_default();
            o.backend = GPU_BACKEND_EMUL;
            o.method = (gpu_method)method;
            gpu_meas *m = NULL;
            const gpu_est_rates rates = gpu_est_rates_default();
            CHECK_OK(gpu_meas_estimate(r.m, &rates, 1, &m, &err), &err);
            uint64_t total = 0;
            for (size_t i = 0; m != NULL && i < m->n_tensors; i++) {
                total += m->t[i].bytes;
            }
            gpu_meas_free(m);
            o.mem_cap_bytes = total * 3 / 4; /* 75 % of the model's matrices */
            /* these models are tiny: with desktop rates nothing is worth a copy, so a
             * device that makes every product worth moving exercises the routing */
            const gpu_est_rates fast = {.cpu_flops = 1e6,
                                        .cpu_bw_Bps = 1e6,
                                        .gpu_flops = 1e12,
                                        .gpu_bw_Bps = 1e12,
                                        .gpu_launch_s = 0,
                                        .link = {0, 1e12, 1e12}};
            o.rates = &fast;
            gpu_session *s = NULL;
            CHECK_OK(gpu_session_create(r.m, r.pool, &o, &s, &err), &err);
            if (s == NULL) {
                runner_close(&r);
                continue;
            }
            gpu_session_info info;
            gpu_session_get_info(s, &info);
            CHECKF(info.n_tensors_gpu > 0 && info.weight_bytes <= o.mem_cap_bytes &&
                       info.model_weight_bytes == total,
                   "%s %s: %d tensors, %" PRIu64 " of %" PRIu64 " bytes", files[c],
                   gpu_method_name(o.method), (int)info.n_tensors_gpu, info.weight_bytes,
                   o.mem_cap_bytes);
            /* a second session on the same pool is refused */
            gpu_session *s2 = NULL;
            CHECK(gpu_session_create(r.m, r.pool, &o, &s2, &err) == LARES_EBUSY && s2 == NULL);
            compare_products(&r, s);
            const int agree = greedy_agree(&r, prompt, np, want, nw);
            gpu_session_get_info(s, &info);
            CHECKF(agree >= cpu_agree, "%s %s: %d tokens agree, the CPU path %d", files[c],
                   gpu_method_name(o.method), agree, cpu_agree);
            CHECKF(info.n_offloaded > 0, "%s: no product ran on the device", files[c]);
            gpu_session_free(s);
            ops_offload_fn fn;
            void *user;
            ops_pool_offload(r.pool, &fn, NULL, &user);
            CHECK(fn == NULL && user == NULL);
            runner_close(&r);
        }
    }
    json_decref(root);
}

/* Whole layers on the emulated device: every layer placed runs there (norms,
 * RoPE, attention over the device's cache, SwiGLU), the logits of a prompt
 * match the CPU's, and the host cache the device mirrored carries a CPU-only
 * continuation that still agrees with the reference engine as far as the CPU
 * path does. */
static void test_whole_layers(void) {
    json_error_t je;
    json_t *root = json_load_file(fixture("expected/greedy_once_upon_a_time.json"), 0, &je);
    CHECKF(root != NULL, "expected file: %s", je.text);
    if (root == NULL) {
        return;
    }
    for (size_t c = 0; c < LARES_ARRAY_LEN(files); c++) {
        json_t *res = find_result(root, files[c]);
        if (res == NULL) {
            continue;
        }
        int32_t prompt[64], want[64];
        const int np = ids_from(json_object_get(res, "prompt_token_ids_with_bos"), prompt, 64);
        const int nw = ids_from(json_object_get(res, "reference_greedy_token_ids"), want, 64);
        runner cpu, r;
        if (!runner_open(&cpu, files[c]) || !runner_open(&r, files[c])) {
            runner_close(&cpu);
            runner_close(&r);
            continue;
        }
        const int cpu_agree = greedy_agree(&cpu, prompt, np, want, nw);
        runner_close(&cpu);
        CHECK(runner_open(&cpu, files[c]) && feed(&cpu, prompt, np, 0));
        lares_error err = {0};
        gpu_session_opts o = gpu_session_opts_default();
        o.backend = GPU_BACKEND_EMUL;
        o.method = GPU_OFFLOAD_LAYERS;
        gpu_session *s = NULL;
        CHECK_OK(gpu_session_create(r.m, r.pool, &o, &s, &err), &err);
        if (s == NULL) {
            runner_close(&cpu);
            runner_close(&r);
            continue;
        }
        gpu_session_attach(s, r.cx);
        gpu_session_info info;
        gpu_session_get_info(s, &info);
        CHECKF(info.n_layers_device == r.m->hp.n_layer, "%s: %d of %d layers whole", files[c],
               (int)info.n_layers_device, (int)r.m->hp.n_layer);
        CHECK(feed(&r, prompt, np, 0));
        double worst = 0, top = 0;
        for (int32_t i = 0; i < r.m->hp.n_vocab; i++) {
            worst = fmax(worst, fabs((double)r.logits[i] - cpu.logits[i]));
            top = fmax(top, fabs((double)cpu.logits[i]));
        }
        CHECKF(worst <= 1e-4 * (1 + top), "%s: logits off by %g (largest %g)", files[c], worst,
               top);
        gpu_session_get_info(s, &info);
        CHECKF(info.n_layer_runs >= (uint64_t)r.m->hp.n_layer, "%s: %llu layer runs", files[c],
               (unsigned long long)info.n_layer_runs);
        /* a host cache written behind the pass's back is read in again: layer
         * 0's rows of the prompt spoiled through the host change the last
         * token's logits, and restored give them back */
        {
            const size_t row = model_kv_row_bytes(r.kv), n = (size_t)(np - 1);
            uint8_t *k = malloc(row * n), *v = malloc(row * n), *junk = malloc(row * n);
            float *l0 = malloc(sizeof(float) * (size_t)r.m->hp.n_vocab);
            memcpy(l0, r.logits, sizeof(float) * (size_t)r.m->hp.n_vocab);
            model_kv_rows(r.kv, 0, 0, np - 1, false, k, v);
            for (size_t i = 0; i < row * n / sizeof(float); i++) {
                ((float *)junk)[i] = (float)(i % 13) - 6; /* an F32 cache (runner_open) */
            }
            model_kv_rows(r.kv, 0, 0, np - 1, true, junk, junk);
            CHECK(feed(&r, &prompt[np - 1], 1, np - 1));
            CHECKF(memcmp(l0, r.logits, sizeof(float) * (size_t)r.m->hp.n_vocab) != 0,
                   "%s: spoiled host rows did not reach the device", files[c]);
            model_kv_rows(r.kv, 0, 0, np - 1, true, k, v);
            CHECK(feed(&r, &prompt[np - 1], 1, np - 1));
            CHECKF(memcmp(l0, r.logits, sizeof(float) * (size_t)r.m->hp.n_vocab) == 0,
                   "%s: restored host rows did not give the logits back", files[c]);
            free(k), free(v), free(junk), free(l0);
        }
        /* half the continuation on the device, the rest on the CPU from the
         * host cache the device kept complete */
        int agree = 0;
        for (int i = 0; i < nw; i++) {
            const int32_t t = argmax(r.logits, r.m->hp.n_vocab);
            if (t != want[i]) {
                break;
            }
            agree++;
            if (i == nw / 2) {
                model_ctx_on_layer(r.cx, NULL, NULL);
            }
            if (i + 1 < nw && !feed(&r, &t, 1, np + i)) {
                break;
            }
        }
        CHECKF(agree >= cpu_agree, "%s: %d tokens agree, the CPU path %d", files[c], agree,
               cpu_agree);
        model_ctx_on_layer(r.cx, NULL, NULL);
        gpu_session_free(s);
        runner_close(&cpu);
        runner_close(&r);
    }
    json_decref(root);
}

static void test_layer_ops_emulated(void) {
    gpu_device *d = NULL;
    char name[96];
    uint64_t vfree;
    lares_error err = {0};
    CHECK_OK(gpu_emul_ops.open(0, &d, name, sizeof name, &vfree, &err), &err);
    if (d != NULL) {
        gpu_layer_checks(&gpu_emul_ops, d);
        gpu_emul_ops.close(d);
    }
}

static void test_session_errors(void) {
    runner r;
    if (!runner_open(&r, "derived/TinyStories-656K.llamacpp-Q8_0.gguf")) {
        runner_close(&r);
        return;
    }
    lares_error err = {0};
    gpu_session *s = NULL;
    gpu_session_opts o = gpu_session_opts_default();
    o.backend = GPU_BACKEND_EMUL;
    /* -ngl layers that cannot fit the emulated device's 1 KiB */
    o.method = GPU_OFFLOAD_LAYERS;
    o.n_layers = 2;
    o.emul_vram_bytes = 1024;
    CHECK(gpu_session_create(r.m, r.pool, &o, &s, &err) == LARES_ERANGE && s == NULL);
    CHECKF(strstr(err.msg, "2 layers need") != NULL, "%s", err.msg);
    /* KV caches that take more than the device's memory leave nothing for
     * weights: a session that places nothing, not one over the device */
    o.n_layers = -1;
    o.emul_vram_bytes = (uint64_t)1 << 20;
    o.kv_reserve_bytes = (uint64_t)2 << 20;
    o.mem_cap_bytes = (uint64_t)512 << 10; /* a cap does not make room that is not there */
    CHECK_OK(gpu_session_create(r.m, r.pool, &o, &s, &err), &err);
    if (s != NULL) {
        gpu_session_info in;
        gpu_session_get_info(s, &in);
        CHECKF(in.n_tensors_gpu == 0 && in.budget_bytes <= 1, "%d matrices, budget %" PRIu64,
               (int)in.n_tensors_gpu, in.budget_bytes);
        gpu_session_free(s);
        s = NULL;
    }
    o.kv_reserve_bytes = 0;
    o.mem_cap_bytes = 0;
    o.method = GPU_OFFLOAD_NONE;
    CHECK(gpu_session_create(r.m, r.pool, &o, &s, &err) == LARES_EINVAL && s == NULL);
    /* CUDA: in this build either absent (a clear reason) or present */
    o = gpu_session_opts_default();
    const lares_status st = gpu_session_create(r.m, r.pool, &o, &s, &err);
#ifndef LARES_HAVE_CUDA
    CHECK(st == LARES_EUNSUPPORTED && strstr(err.msg, "-DLARES_CUDA=ON") != NULL);
#else
    CHECK(st == LARES_OK || st == LARES_ENOTFOUND);
#endif
    gpu_session_free(s);
    /* allocation failures unwind cleanly (ASan checks the leaks) */
    o.backend = GPU_BACKEND_EMUL;
    o.method = GPU_OFFLOAD_AFFINITY;
    for (long k = 1; k < 12; k++) {
        s = NULL;
        lares_alloc_fail_after(k);
        const lares_status fs = gpu_session_create(r.m, r.pool, &o, &s, &err);
        lares_alloc_fail_after(0);
        CHECK(fs == LARES_OK || fs == LARES_ENOMEM);
        CHECK((fs == LARES_OK) == (s != NULL));
        gpu_session_free(s);
        ops_offload_fn fn;
        void *user;
        ops_pool_offload(r.pool, &fn, NULL, &user);
        CHECK(fn == NULL);
    }
    runner_close(&r);
}

/* the CPU measurement fills the device types' rates with positive, finite
 * figures and leaves the rest alone (no threshold: speed is not tested here) */
static void test_measure_cpu(void) {
    lares_error err = {0};
    ops_pool *pool = NULL;
    CHECK_OK(ops_pool_create(1, &pool, &err), &err);
    gpu_est_rates r = {0};
    CHECK_OK(gpu_measure_cpu(pool, &r, &err), &err);
    const uint32_t dev[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K,
                            GGUF_TYPE_F16};
    for (size_t k = 0; k < LARES_ARRAY_LEN(dev); k++) {
        CHECKF(isfinite(r.cpu_Bps_type[dev[k]]) && r.cpu_Bps_type[dev[k]] > 0, "type %u: %g",
               (unsigned)dev[k], r.cpu_Bps_type[dev[k]]);
    }
    CHECK(isfinite(r.cpu_flops) && r.cpu_flops > 0);
    CHECK(r.cpu_Bps_type[GGUF_TYPE_Q5_0] == 0 && r.gpu_bw_Bps == 0);
    ops_pool_free(pool);
}

int main(void) {
    test_greedy_on_emulated_device();
    test_whole_layers();
    test_layer_ops_emulated();
    test_session_errors();
    test_measure_cpu();
    return check_finish("test_gpu_session");
}
