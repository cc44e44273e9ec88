/*
 * libFuzzer target: a devices file (what `lares plan --devices` reads and what
 * workers of an automatic ring will send their head). Whatever parses is
 * written out and read back, then planned -- Halda and the three baselines --
 * for a small model: any figures a file can state must give a plan or an
 * error, never a crash, a hang or a GLPK abort.
 */
#include "sched/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sched_model *toy(void) {
    static sched_layer layers[6];
    static sched_model m;
    if (m.n_layer == 0) {
        snprintf(m.name, sizeof m.name, "fuzz");
        m.n_layer = 6;
        m.n_embd = 256;
        m.n_head = 4;
        m.n_head_kv = 2;
        m.head_dim = 64;
        m.layers = layers;
        for (int l = 0; l < 6; l++) {
            layers[l].bytes[GGUF_TYPE_Q4_K] = 50000000 + 1000000 * (uint64_t)l;
            layers[l].weight_bytes = layers[l].bytes[GGUF_TYPE_Q4_K];
            layers[l].flops[GGUF_TYPE_Q4_K] = 1.8e8;
        }
        m.head.bytes[GGUF_TYPE_Q6_K] = 20000000;
        m.head.weight_bytes = 20000000;
        m.head.flops[GGUF_TYPE_Q6_K] = 3e7;
    }
    return &m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sched_device *d = NULL;
    sched_link *links = NULL;
    size_t n = 0, nl = 0;
    sched_opts o = sched_opts_default();
    lares_error err;
    if (sched_devices_parse((const char *)data, size, "fuzz.json", &d, &n, &links, &nl,
                            &o.net_default, &err) != LARES_OK) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char *text = NULL;
        if (sched_device_to_json(&d[i], &text, &err) == LARES_OK) {
            sched_device *back = NULL;
            size_t nb = 0;
            if (sched_devices_parse(text, strlen(text), "again", &back, &nb, NULL, NULL, NULL,
                                    &err) != LARES_OK) {
                __builtin_trap(); /* what we write we must read */
            }
            lares_free(back);
            lares_free(text);
        }
    }
    if (n <= 6) {
        o.links = links;
        o.n_links = nl;
        o.n_ctx = 512;
        for (int p = 0; p < SCHED_PLACEMENT_COUNT; p++) {
            sched_plan *plan = NULL;
            o.placement = (sched_placement)p;
            if (sched_plan_make(toy(), d, n, &o, &plan, &err) == LARES_OK) {
                int32_t l0, l1;
                (void)sched_plan_layers_of(plan, plan->head, 0, &l0, &l1, &err);
                sched_plan_free(plan);
            }
        }
    }
    lares_free(d);
    lares_free(links);
    return 0;
}
