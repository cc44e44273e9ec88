/*
 * gpu placement (issue 10): the affinity ranking and the layers method on
 * synthetic measurements whose right answers are worked out by hand in the
 * comments, the cost model, the budget rules, bad input; then the estimate of
 * a real model checked against its GGUF tensor directory, and the plan JSON.
 */
#include "check.h"
#include "gguf/gguf.h"
#include "gpu/gpu.h"
#include "model/model.h"

#include <jansson.h>

typedef struct tdef {
    int32_t layer, group;
    uint64_t bytes;
    double cpu_s, gpu_s;
    uint64_t out_bytes;
    bool gpu_ok;
} tdef;

typedef struct gdef {
    int32_t layer;
    uint64_t in_bytes;
    bool fuse_next;
    double mid_cpu_s, mid_gpu_s;
} gdef;

/* measurements from tables; the link moves 1 byte per second with no latency,
 * so a copy of b bytes costs b seconds and the arithmetic below stays exact */
static gpu_meas *make(int32_t n_layer, const tdef *t, size_t nt, const gdef *g, size_t ng) {
    gpu_meas *m = NULL;
    lares_error err = {0};
    CHECK_OK(gpu_meas_create(n_layer, nt, ng, &m, &err), &err);
    if (m == NULL) {
        return NULL;
    }
    m->link = (gpu_link_meas){.latency_s = 0, .h2d_Bps = 1, .d2h_Bps = 1};
    for (size_t i = 0; i < nt; i++) {
        snprintf(m->t[i].name, sizeof m->t[i].name, "t%zu", i);
        m->t[i].layer = t[i].layer;
        m->t[i].group = t[i].group;
        m->t[i].bytes = t[i].bytes;
        m->t[i].cpu_s = t[i].cpu_s;
        m->t[i].gpu_s = t[i].gpu_s;
        m->t[i].out_bytes = t[i].out_bytes;
        m->t[i].gpu_ok = t[i].gpu_ok;
    }
    for (size_t i = 0; i < ng; i++) {
        m->groups[i] = (gpu_group_meas){.layer = g[i].layer,
                                        .in_bytes = g[i].in_bytes,
                                        .fuse_next = g[i].fuse_next,
                                        .mid_cpu_s = g[i].mid_cpu_s,
                                        .mid_gpu_s = g[i].mid_gpu_s};
    }
    return m;
}

static gpu_placement *run(const gpu_meas *m, gpu_method method, uint64_t budget, int32_t n_layers) {
    gpu_place_opts o = gpu_place_opts_default();
    o.method = method;
    o.budget_bytes = budget;
    o.n_layers = n_layers;
    gpu_placement *p = NULL;
    lares_error err = {0};
    CHECK_OK(gpu_place(m, &o, &p, &err), &err);
    return p;
}

/* the order placed equals want[0..n) */
static bool order_is(const gpu_placement *p, const size_t *want, size_t n) {
    if (p == NULL || p->n_placed != n) {
        if (p != NULL) {
            fprintf(stderr, "  placed %zu, want %zu:", p->n_placed, n);
            for (size_t k = 0; k < p->n_placed; k++) {
                fprintf(stderr, " %zu", p->order[k]);
            }
            fputc('\n', stderr);
        }
        return false;
    }
    for (size_t k = 0; k < n; k++) {
        if (p->order[k] != want[k]) {
            return false;
        }
    }
    return true;
}

/*
 * Scenario A: no copies (no activation bytes), one matrix per group, so
 * affinity = (cpu_s - gpu_s) / bytes:
 *   t0 L0: 100 B, 10 -> 2  saves 8   0.08/B
 *   t1 L0:  50 B,  6 -> 1  saves 5   0.10/B
 *   t2 L1: 200 B, 20 -> 4  saves 16  0.08/B (ties t0: t0 first, lower index)
 *   t3 L1:  10 B,  1 -> .5 saves .5  0.05/B
 *   t4 head: 30 B, 3 -> 3  saves 0   never placed by affinity
 * CPU only: 10 + 6 + 20 + 1 + 3 = 40 s.
 */
static const tdef A_t[] = {
    {0, 0, 100, 10, 2, 0, true}, {0, 1, 50, 6, 1, 0, true}, {1, 2, 200, 20, 4, 0, true},
    {1, 3, 10, 1, 0.5, 0, true}, {2, 4, 30, 3, 3, 0, true},
};
static const gdef A_g[] = {{0, 0, false, 0, 0},
                           {0, 0, false, 0, 0},
                           {1, 0, false, 0, 0},
                           {1, 0, false, 0, 0},
                           {2, 0, false, 0, 0}};

static void test_affinity_ranking(void) {
    gpu_meas *m = make(2, A_t, 5, A_g, 5);
    if (m == NULL) {
        return;
    }
    /* a cap of 0: nothing moves, the prediction is the CPU's */
    gpu_placement *p = run(m, GPU_OFFLOAD_AFFINITY, 0, -1);
    CHECK(order_is(p, NULL, 0));
    CHECK(p != NULL && p->t_pass_s == 40.0 && p->t_cpu_s == 40.0 && p->weight_bytes == 0);
    gpu_placement_free(p);
    /* a cap larger than the model: every matrix that saves time, by affinity,
     * the tie t0/t2 to the lower index; t4 saves nothing and stays:
     * 2 + 1 + 4 + 0.5 + 3 = 10.5 s */
    p = run(m, GPU_OFFLOAD_AFFINITY, 1000, -1);
    CHECK(order_is(p, (size_t[]){1, 0, 2, 3}, 4));
    CHECK(p != NULL && p->t_pass_s == 10.5 && p->weight_bytes == 360 && !p->on_gpu[4]);
    CHECK(p != NULL && p->n_layers_whole == 2);
    gpu_placement_free(p);
    /* 150 B: t1 (50) then t0 (100) fill it exactly; 2 + 1 + 20 + 1 + 3 = 27 s */
    p = run(m, GPU_OFFLOAD_AFFINITY, 150, -1);
    CHECK(order_is(p, (size_t[]){1, 0}, 2));
    CHECK(p != NULL && p->t_pass_s == 27.0 && p->n_layers_whole == 1);
    gpu_placement_free(p);
    /* 260 B: from empty t1, t0 (150 used), t2 (200) skipped, t3: 26.5 s; from the
     * layers placement (t2, t3: 210 B) t1 still fits (50): 10 + 1 + 4 + .5 + 3 = 18.5 s,
     * the better one */
    p = run(m, GPU_OFFLOAD_AFFINITY, 260, -1);
    CHECK(order_is(p, (size_t[]){2, 3, 1}, 3));
    CHECK(p != NULL && p->t_pass_s == 18.5);
    gpu_placement_free(p);
    gpu_meas_free(m);
}

static void test_layers_method(void) {
    gpu_meas *m = make(2, A_t, 5, A_g, 5);
    if (m == NULL) {
        return;
    }
    lares_error err = {0};
    /* everything fits: layer 1 (t2 t3), layer 0 (t0 t1), then the head */
    gpu_placement *p = run(m, GPU_OFFLOAD_LAYERS, 1000, -1);
    CHECK(order_is(p, (size_t[]){2, 3, 0, 1, 4}, 5));
    CHECK(p != NULL && p->n_layers_whole == 2 && p->t_pass_s == 10.5);
    gpu_placement_free(p);
    /* 250 B: layer 1 (210) fits, layer 0 (150 more) does not: 10 + 6 + 4 + .5 + 3 */
    p = run(m, GPU_OFFLOAD_LAYERS, 250, -1);
    CHECK(order_is(p, (size_t[]){2, 3}, 2));
    CHECK(p != NULL && p->t_pass_s == 23.5);
    gpu_placement_free(p);
    /* at 250 B greedy by affinity alone would take t1, t0 (150 B), then t3 (t2 no
     * longer fits): 2 + 1 + 20 + .5 + 3 = 26.5 s, worse than the layers' 23.5 s. So
     * affinity also fills the room left by the layers placement (210 B, 40 B left:
     * nothing fits) and keeps the better: 23.5 s */
    p = run(m, GPU_OFFLOAD_AFFINITY, 250, -1);
    CHECK(order_is(p, (size_t[]){2, 3}, 2));
    CHECK(p != NULL && p->t_pass_s == 23.5);
    gpu_placement_free(p);
    /* exactly one layer: the last */
    p = run(m, GPU_OFFLOAD_LAYERS, 250, 1);
    CHECK(order_is(p, (size_t[]){2, 3}, 2));
    gpu_placement_free(p);
    /* -ngl 99: every layer and the head */
    p = run(m, GPU_OFFLOAD_LAYERS, 1000, 99);
    CHECK(order_is(p, (size_t[]){4, 2, 3, 0, 1}, 5));
    gpu_placement_free(p);
    /* infeasible: two layers need 360 B */
    gpu_place_opts o = {.method = GPU_OFFLOAD_LAYERS, .budget_bytes = 250, .n_layers = 2};
    p = NULL;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_ERANGE && p == NULL);
    CHECKF(strstr(err.msg, "360") != NULL && strstr(err.msg, "250") != NULL, "%s", err.msg);
    /* a layer with a matrix the device cannot run */
    m->t[2].gpu_ok = false;
    o.n_layers = 1;
    o.budget_bytes = 1000;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EUNSUPPORTED && p == NULL);
    CHECKF(strstr(err.msg, "layer 1") != NULL, "%s", err.msg);
    /* auto layers stop at it; affinity skips just that matrix */
    p = run(m, GPU_OFFLOAD_LAYERS, 1000, -1);
    CHECK(order_is(p, NULL, 0));
    gpu_placement_free(p);
    p = run(m, GPU_OFFLOAD_AFFINITY, 1000, -1);
    CHECK(order_is(p, (size_t[]){1, 0, 3}, 3));
    gpu_placement_free(p);
    gpu_meas_free(m);
}

/*
 * Scenario B: a tiny matrix dominated by its copies stays on the CPU.
 *   t0: 10 B, 1.0 -> 0.1 s, input 5 B, output 5 B: on the device 0.1 + 5 + 5 > 1.0
 *   t1: 1000 B, 100 -> 10 s, input 5 B, output 5 B: saves 100 - 20 = 80 s
 */
static void test_transfer_dominated(void) {
    const tdef t[] = {{0, 0, 10, 1.0, 0.1, 5, true}, {0, 1, 1000, 100, 10, 5, true}};
    const gdef g[] = {{0, 5, false, 0, 0}, {0, 5, false, 0, 0}};
    gpu_meas *m = make(1, t, 2, g, 2);
    if (m == NULL) {
        return;
    }
    gpu_placement *p = run(m, GPU_OFFLOAD_AFFINITY, 1u << 20, -1);
    CHECK(order_is(p, (size_t[]){1}, 1));
    CHECK(p != NULL && p->t_pass_s == 1.0 + 10 + 5 + 5 && p->t_cpu_s == 101.0);
    gpu_placement_free(p);
    /* layers puts both there and pays t0's copies: 0.1 + 10 + 5 + 5 + 5 + 5 */
    p = run(m, GPU_OFFLOAD_LAYERS, 1u << 20, -1);
    CHECK(p != NULL && p->n_placed == 2 && p->t_pass_s == 30.1);
    gpu_placement_free(p);
    gpu_meas_free(m);
}

/*
 * Scenario C: re-ranking through fusion. gate and up (group 0, input 4 B) feed
 * SwiGLU (CPU 2 s, device 0.5 s) feeding down (group 1, input 10 B).
 *   gate alone: saves 9, copies 4 in + 10 out: -5.   up alone: the same.
 *   down alone: saves 9, copies 10 in + 4 out: -5.   gate+up: 18 - 4 - 20 = -6.
 *   all three (fused): CPU 10 + 10 + 2 + 10 = 32; device 1 + 1 + 0.5 + 1 + 4 in
 *   + 4 out = 11.5: saves 20.5 for 300 B. So 300 B places all three, 299 B none.
 */
static void test_fusion_rerank(void) {
    const tdef t[] = {
        {0, 0, 100, 10, 1, 10, true}, {0, 0, 100, 10, 1, 10, true}, {0, 1, 100, 10, 1, 4, true}};
    const gdef g[] = {{0, 4, true, 2, 0.5}, {0, 10, false, 0, 0}};
    gpu_meas *m = make(1, t, 3, g, 2);
    if (m == NULL) {
        return;
    }
    gpu_placement *p = run(m, GPU_OFFLOAD_AFFINITY, 300, -1);
    CHECK(p != NULL && p->n_placed == 3 && p->t_pass_s == 11.5 && p->t_cpu_s == 32.0);
    gpu_placement_free(p);
    p = run(m, GPU_OFFLOAD_AFFINITY, 299, -1);
    CHECK(order_is(p, NULL, 0));
    gpu_placement_free(p);
    /* the cost model directly: gate alone 32 - 9 + 14 = 37 */
    double ts = 0;
    lares_error err = {0};
    CHECK_OK(gpu_predict(m, (bool[]){true, false, false}, &ts, &err), &err);
    CHECK(ts == 37.0);
    gpu_meas_free(m);
}

/*
 * Scenario D: one group {a, b} sharing a 10 B input, no outputs to copy.
 *   a: 100 B, 30 -> 10: alone 20 - 10 = 10 (0.1/B); b: 100 B, 15 -> 10: alone
 *   5 - 10 < 0; both: 25 - 10 = 15 (0.075/B). a goes first; then b's input is
 *   already there and b saves 5: placed at 200 B, not at 150 B.
 */
static void test_shared_input_rerank(void) {
    const tdef t[] = {{0, 0, 100, 30, 10, 0, true}, {0, 0, 100, 15, 10, 0, true}};
    const gdef g[] = {{0, 10, false, 0, 0}};
    gpu_meas *m = make(1, t, 2, g, 1);
    if (m == NULL) {
        return;
    }
    gpu_placement *p = run(m, GPU_OFFLOAD_AFFINITY, 200, -1);
    CHECK(order_is(p, (size_t[]){0, 1}, 2));
    CHECK(p != NULL && p->t_pass_s == 30.0);
    gpu_placement_free(p);
    p = run(m, GPU_OFFLOAD_AFFINITY, 150, -1);
    CHECK(order_is(p, (size_t[]){0}, 1));
    CHECK(p != NULL && p->t_pass_s == 35.0);
    gpu_placement_free(p);
    gpu_meas_free(m);
}

static void test_bad_input(void) {
    lares_error err = {0};
    gpu_meas *m = NULL;
    CHECK(gpu_meas_create(2, 0, 1, &m, &err) == LARES_EINVAL && m == NULL);
    m = make(2, A_t, 5, A_g, 5);
    if (m == NULL) {
        return;
    }
    gpu_placement *p = NULL;
    gpu_place_opts o = gpu_place_opts_default();
    o.budget_bytes = 100;

    m->t[1].cpu_s = NAN;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL && p == NULL);
    CHECKF(strstr(err.msg, "'t1'") && strstr(err.msg, "cpu_s"), "%s", err.msg);
    m->t[1].cpu_s = 6;
    m->t[3].gpu_s = -1;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'t3'") && strstr(err.msg, "gpu_s"), "%s", err.msg);
    m->t[3].gpu_s = 0.5;
    m->t[0].bytes = 0;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'t0'") && strstr(err.msg, "bytes"), "%s", err.msg);
    m->t[0].bytes = 100;
    m->t[2].group = 9;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'t2'") && strstr(err.msg, "group 9"), "%s", err.msg);
    m->t[2].group = 0; /* a group of layer 0 for a layer-1 tensor */
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'t2'") && strstr(err.msg, "layer 1"), "%s", err.msg);
    m->t[2].group = 2;
    m->t[4].layer = 3;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'t4'") && strstr(err.msg, "layer 3"), "%s", err.msg);
    m->t[4].layer = 2;
    m->link.h2d_Bps = 0;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "h2d 0"), "%s", err.msg);
    m->link.h2d_Bps = 1;
    CHECK_OK(gpu_meas_validate(m, &err), &err);
    o.method = GPU_OFFLOAD_COUNT;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL && strstr(err.msg, "method"));
    o.method = GPU_OFFLOAD_LAYERS;
    o.n_layers = -2;
    CHECK(gpu_place(m, &o, &p, &err) == LARES_EINVAL && strstr(err.msg, "-2"));
    /* a matrix without a device kernel priced on the device */
    m->t[0].gpu_ok = false;
    double ts;
    CHECK(gpu_predict(m, (bool[]){true, false, false, false, false}, &ts, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'t0'"), "%s", err.msg);
    m->t[0].gpu_ok = true;
    /* sched's interface: bytes of the last n layers of a window */
    uint64_t b = 0;
    CHECK_OK(gpu_budget_for_layers(m, 0, 2, 1, &b, &err), &err);
    CHECK(b == 210);
    CHECK_OK(gpu_budget_for_layers(m, 0, 2, 2, &b, &err), &err);
    CHECK(b == 360);
    CHECK_OK(gpu_budget_for_layers(m, 0, 1, 1, &b, &err), &err);
    CHECK(b == 150);
    CHECK(gpu_budget_for_layers(m, 0, 2, 3, &b, &err) == LARES_EINVAL);
    CHECK(gpu_budget_for_layers(m, 1, 3, 1, &b, &err) == LARES_EINVAL);
    gpu_meas_free(m);
}

static void test_budget_and_names(void) {
    CHECK(gpu_budget(1000, 0) == 900);
    CHECK(gpu_budget(1000, 500) == 500);
    CHECK(gpu_budget(1000, 2000) == 900);
    CHECK(gpu_budget(0, 77) == 77);
    CHECK(gpu_budget(UINT64_MAX, 0) == UINT64_MAX / 10 * 9 + 4); /* no overflow: 5 * 9 / 10 = 4 */
    CHECK(gpu_method_from_name("affinity") == GPU_OFFLOAD_AFFINITY);
    CHECK(gpu_method_from_name("layers") == GPU_OFFLOAD_LAYERS);
    CHECK(gpu_method_from_name("ngl") == -1);
    CHECK(strcmp(gpu_method_name(GPU_OFFLOAD_AFFINITY), "affinity") == 0);
}

/* the estimate of a real model: one entry per matrix, bytes from the file's
 * own tensor directory, the device's kernel types, and the plan JSON */
static void test_estimate_real_model(void) {
    lares_error err = {0};
    gguf_file *f = NULL;
    model *mdl = NULL;
    CHECK_OK(gguf_open(fixture("derived/TinyStories-656K.llamacpp-Q4_K_M.gguf"), NULL, &f, &err),
             &err);
    if (f == NULL) {
        return;
    }
    CHECK_OK(model_load(f, &mdl, &err), &err);
    if (mdl == NULL) {
        gguf_close(f);
        return;
    }
    const gpu_est_rates r = gpu_est_rates_default();
    gpu_meas *m = NULL;
    CHECK_OK(gpu_meas_estimate(mdl, &r, 1, &m, &err), &err);
    if (m != NULL) {
        CHECK(m->n_tensors == 7 * (size_t)mdl->hp.n_layer + 1);
        uint64_t total = 0;
        for (size_t i = 0; i < m->n_tensors; i++) {
            const gguf_tensor *t = gguf_find_tensor(f, m->t[i].name);
            CHECKF(t != NULL, "%s not in the file", m->t[i].name);
            if (t != NULL) {
                CHECKF(t->nbytes == m->t[i].bytes && t->type == m->t[i].type, "%s", t->name);
                const bool dev = t->type == GGUF_TYPE_Q4_K || t->type == GGUF_TYPE_Q6_K ||
                                 t->type == GGUF_TYPE_Q4_0 || t->type == GGUF_TYPE_Q8_0 ||
                                 t->type == GGUF_TYPE_F16;
                CHECKF(m->t[i].gpu_ok == dev, "%s type %u", t->name, (unsigned)t->type);
            }
            total += m->t[i].bytes;
        }
        char *js = NULL;
        CHECK_OK(gpu_plan_json(m, total / 2, GPU_OFFLOAD_AFFINITY, &js, &err), &err);
        json_error_t je;
        json_t *root = js ? json_loads(js, 0, &je) : NULL;
        CHECKF(root != NULL, "plan json: %s", js ? je.text : "none");
        if (root != NULL) {
            CHECK(json_integer_value(json_object_get(root, "budget_bytes")) ==
                  (json_int_t)(total / 2));
            json_t *aff = json_object_get(root, "affinity"), *lay = json_object_get(root, "layers");
            CHECK(aff != NULL && lay != NULL);
            CHECK(json_integer_value(json_object_get(aff, "weight_bytes")) <=
                  (json_int_t)(total / 2));
            CHECK(json_real_value(json_object_get(aff, "predicted_ms")) <=
                  json_real_value(json_object_get(root, "cpu_only_ms")));
            CHECK(json_array_size(json_object_get(aff, "tensors")) ==
                  (size_t)json_integer_value(json_object_get(aff, "n_tensors")));
            CHECK(strcmp(json_string_value(json_object_get(root, "chosen")), "affinity") == 0);
            json_decref(root);
        }
        lares_free(js);
        CHECK(gpu_plan_json(m, 0, GPU_OFFLOAD_NONE, &js, &err) == LARES_EINVAL);
        gpu_meas_free(m);
    }
    CHECK(gpu_meas_estimate(mdl, &r, 0, &m, &err) == LARES_EINVAL);
    model_free(mdl);
    gguf_close(f);
}

/* per-type CPU rates price each matrix by its own type's rate: on a roofline
 * with unbounded FLOP/s, cpu_s = bytes / rate of its type, exactly */
static void test_estimate_per_type_rates(void) {
    lares_error err = {0};
    gguf_file *f = NULL;
    model *mdl = NULL;
    CHECK_OK(gguf_open(fixture("derived/TinyStories-656K.llamacpp-Q8_0.gguf"), NULL, &f, &err),
             &err);
    if (f == NULL) {
        return;
    }
    CHECK_OK(model_load(f, &mdl, &err), &err);
    gpu_est_rates r = gpu_est_rates_default();
    r.cpu_flops = 1e30;
    r.cpu_Bps_type[GGUF_TYPE_Q8_0] = 1e6;
    gpu_meas *m = NULL;
    if (mdl != NULL) {
        CHECK_OK(gpu_meas_estimate(mdl, &r, 1, &m, &err), &err);
    }
    for (size_t i = 0; m != NULL && i < m->n_tensors; i++) {
        const double want = (double)m->t[i].bytes / (m->t[i].type == GGUF_TYPE_Q8_0 ? 1e6 : 25e9);
        CHECKF(m->t[i].cpu_s == want, "%s: cpu_s %g, want %g", m->t[i].name, m->t[i].cpu_s, want);
    }
    gpu_meas_free(m);
    model_free(mdl);
    gguf_close(f);
}

int main(void) {
    test_affinity_ranking();
    test_layers_method();
    test_transfer_dominated();
    test_fusion_rerank();
    test_shared_input_rerank();
    test_bad_input();
    test_budget_and_names();
    test_estimate_real_model();
    test_estimate_per_type_rates();
    return check_finish("test_gpu_place");
}
