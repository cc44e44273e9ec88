/* Writes one valid ring frame of each type into a folder: the seeds of fuzz_frame. */
#include "cluster/cluster.h"

#include <stdio.h>
#include <string.h>

static int put(const char *dir, const char *name, const uint8_t *b, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || n == 0 || fwrite(b, 1, n, f) != n) {
        fprintf(stderr, "make_frame_seeds: cannot write %s\n", path);
        if (f) {
            fclose(f);
        }
        return 1;
    }
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_frame_seeds DIR\n");
        return 2;
    }
    static uint8_t b[1 << 16];
    int bad = 0;
    cluster_hello h = {.model = {1185376, 0x1234},
                       .device = 1,
                       .n_devices = 3,
                       .heartbeat_ms = 250,
                       .timeout_ms = 3000};
    snprintf(h.model_path, sizeof h.model_path, "/models/stories260K.gguf");
    snprintf(h.head_name, sizeof h.head_name, "head");
    bad |= put(argv[1], "hello", b, cluster_encode_hello(b, sizeof b, &h));
    cluster_welcome w = {.model = h.model, .n_layer = 5, .n_embd = 64, .n_cpu = 2};
    snprintf(w.name, sizeof w.name, "worker");
    bad |= put(argv[1], "welcome", b, cluster_encode_welcome(b, sizeof b, &w));
    static cluster_plan_msg p;
    p.self = 2;
    p.n_ctx = 256;
    p.n_batch = 16;
    p.n_embd = 64;
    p.plan = (cluster_plan){.n_layer = 5, .n_dev = 3, .w = {1, 1, 1}, .n = {0, 1, 0}};
    snprintf(p.addr[1], sizeof p.addr[1], "127.0.0.1:9101");
    snprintf(p.addr[2], sizeof p.addr[2], "127.0.0.1:9102");
    bad |= put(argv[1], "plan", b, cluster_encode_plan(b, sizeof b, 9, &p));
    p.flags = CLUSTER_PLAN_KEEP_KV;
    bad |= put(argv[1], "prepare", b, cluster_encode_prepare(b, sizeof b, 10, &p));
    p.flags = 0;
    cluster_prepared pd = {.status = LARES_ERANGE, .fetched_bytes = 4096};
    snprintf(pd.msg, sizeof pd.msg, "weight cache: full");
    bad |= put(argv[1], "prepared", b, cluster_encode_prepared(b, sizeof b, 10, &pd));
    const cluster_ready r = {.kv_bytes = 4096, .n_windows = 2};
    bad |= put(argv[1], "ready", b, cluster_encode_ready(b, sizeof b, 9, &r));
    const int32_t pos[3] = {7, 8, 9};
    float x[3 * 16];
    for (int i = 0; i < 48; i++) {
        x[i] = (float)i / 7.0f;
    }
    const cluster_trace t[2] = {
        {.device = 1, .compute_us = 1500, .wait_us = 200, .mem_free_mib = 512},
        {.device = 2, .compute_us = 900, .major_faults = 3, .mem_free_mib = UINT32_MAX}};
    cluster_act a = {.seq = 4, .layer = 3, .end = 5, .n_tok = 3, .n_embd = 16, .n_trace = 2};
    bad |= put(argv[1], "act-f32", b, cluster_encode_act(b, sizeof b, 9, &a, pos, t, x));
    a.dtype = CLUSTER_DTYPE_F16;
    bad |= put(argv[1], "act-f16", b, cluster_encode_act(b, sizeof b, 9, &a, pos, t, x));
    /* two sequences' rows (issue 20): slot 2 at 7, 8; slot 1 at 0 */
    const cluster_run runs[2] = {{.slot = 2, .rows = 2}, {.slot = 1, .rows = 1}};
    const int32_t pos_runs[3] = {7, 8, 0};
    a.n_runs = 2;
    bad |= put(argv[1], "act-runs", b,
               cluster_encode_act_runs(b, sizeof b, 9, &a, runs, pos_runs, t, x));
    a.n_runs = 0;
    const cluster_kv kv = {.op = CLUSTER_KV_TRUNCATE, .pos = 3};
    bad |= put(argv[1], "kv", b, cluster_encode_kv(b, sizeof b, 9, CLUSTER_KV, &kv));
    uint8_t rows[2 * 8];
    memset(rows, 0x3c, sizeof rows);
    const cluster_kv_data kd = {
        .layer = 1, .pos0 = 2, .n_pos = 2, .row_bytes = 4, .k = rows, .v = rows + 8};
    bad |= put(argv[1], "kv-mirror", b, cluster_encode_kv_mirror(b, sizeof b, 9, &kd));
    bad |= put(argv[1], "heartbeat", b, cluster_encode_heartbeat(b, sizeof b, 9, 1));
    const cluster_tensor_get tg = {.item = 3, .offset = 64, .length = 32};
    bad |= put(argv[1], "tensor-get", b, cluster_encode_tensor_get(b, sizeof b, &tg));
    const uint8_t chunk[32] = {1, 2, 3};
    const cluster_tensor_data td = {.item = 3, .item_bytes = 96, .offset = 64, .length = 32,
                                    .data = chunk};
    bad |= put(argv[1], "tensor-data", b, cluster_encode_tensor_data(b, sizeof b, &td));
    bad |= put(argv[1], "stop", b, cluster_encode_stop(b, sizeof b, 9, 0));
    bad |= put(argv[1], "error", b, cluster_encode_error(b, sizeof b, 9, LARES_EBUSY, "busy"));
    bad |= put(argv[1], "link", b, cluster_encode_link(b, sizeof b, 9, CLUSTER_LINK, 1));
    return bad;
}
