/*
 * libFuzzer target: the ring's frame decoder (cluster_frame_decode), which
 * reads every byte a network peer sends. A decoded frame is then used the
 * way head and worker use it: hidden states and positions read, the plan's
 * windows derived. Seeds: one valid frame of each type (make_frame_seeds).
 */
#include "cluster/cluster.h"

#include <stdlib.h>

static cluster_frame frame;
static float x[1 << 16];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lares_error err;
    if (cluster_frame_decode(data, size, &frame, &err) != LARES_OK) {
        return 0;
    }
    if (frame.type == CLUSTER_ACT) {
        const cluster_act *a = &frame.u.act;
        int64_t sum = 0;
        for (uint32_t i = 0; i < a->n_tok; i++) {
            sum += cluster_act_pos(a, i);
        }
        for (uint32_t i = 0; i < a->n_trace; i++) {
            cluster_trace t;
            cluster_act_trace_at(a, i, &t);
            sum += t.device;
        }
        if ((size_t)a->n_tok * a->n_embd <= sizeof x / sizeof x[0]) {
            cluster_act_read(a, x);
        }
        (void)sum;
    } else if (frame.type == CLUSTER_PLAN) {
        const cluster_plan *p = &frame.u.plan.plan;
        const int32_t rounds = cluster_plan_rounds(p);
        for (int32_t d = 0; d < p->n_dev; d++) {
            int32_t l0, l1;
            cluster_plan_window(p, d, 0, &l0, &l1);
            cluster_plan_window(p, d, rounds - 1, &l0, &l1);
        }
        int32_t dev, round;
        cluster_plan_owner(p, p->n_layer - 1, &dev, &round);
        char desc[256];
        cluster_plan_describe(p, desc, sizeof desc);
    }
    return 0;
}
