/*
 * sched: plan validation. A good plan passes; each way a plan can be wrong --
 * a layer owned twice or by nobody, a device twice in the ring, GPU layers
 * beyond the window or on a device without a GPU, more GPU layers than VRAM,
 * a KV cache beyond RAM, weights beyond RAM + disk, rounds that do not cover
 * the model -- is refused with a message naming the device or layer.
 */
#include "check.h"
#include "lares.h"
#include "sched/sched.h"

#define MB 1000000ull

static sched_model *model8(void) {
    sched_model *m = calloc(1, sizeof *m);
    snprintf(m->name, sizeof m->name, "m8");
    m->n_layer = 8;
    m->n_embd = 512;
    m->n_head = 8;
    m->n_head_kv = 8;
    m->head_dim = 64;
    m->layers = lares_calloc(8, sizeof *m->layers);
    for (int l = 0; l < 8; l++) {
        m->layers[l].bytes[GGUF_TYPE_Q8_0] = 100 * MB;
        m->layers[l].weight_bytes = 100 * MB;
        m->layers[l].flops[GGUF_TYPE_Q8_0] = 2e8;
    }
    m->head.bytes[GGUF_TYPE_Q8_0] = 10 * MB;
    m->head.weight_bytes = 10 * MB;
    m->head.flops[GGUF_TYPE_Q8_0] = 2e7;
    return m;
}

static void devices(sched_device *d) {
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "n%d", i);
        sched_device_init(&d[i], name);
        d[i].cores = 4;
        d[i].cpu_flops.other = 1e11;
        d[i].mem_bw_Bps = 2e10;
        d[i].ram_avail_bytes = 1000 * MB;
        d[i].disk_seq_Bps = 1e9;
    }
    d[1].gpu = SCHED_GPU_CUDA;
    d[1].vram_avail_bytes = 300 * MB;
    d[1].gpu_flops.other = 1e13;
    d[1].gpu_mem_bw_Bps = 3e11;
}

static void expect_invalid(sched_plan *p, const sched_model *m, const sched_device *d,
                           const sched_opts *o, lares_status code, const char *a, const char *b,
                           int line) {
    lares_error err = {0};
    lares_status st = sched_plan_validate(p, m, d, 3, o, &err);
    if (st != code || strstr(err.msg, a) == NULL || (b && strstr(err.msg, b) == NULL)) {
        check_failures++;
        fprintf(stderr, "%s:%d: expected code %d with '%s'%s%s, got %d: %s\n", __FILE__, line, code,
                a, b ? " and " : "", b ? b : "", st, err.msg);
    }
    check_count++;
}
#define INVALID(p, code, a, b) expect_invalid(p, m, d, &o, code, a, b, __LINE__)

/* lares_plan's "halda:k=N": Halda held to N rounds, N a divisor of the layers */
static void test_rounds_placement(void) {
    static const char devs[] =
        "{\"network\": {\"latency_ms\": 2, \"bandwidth\": \"1GB/s\"}, \"devices\": ["
        "{\"name\": \"a\", \"os\": \"linux\", \"head\": true, \"cpu\": {\"cores\": 4, "
        "\"flops\": {\"*\": 5e10}, \"mem_bw\": \"20GB/s\"}, \"memory\": {\"available\": "
        "\"3GiB\"}, \"disk\": {\"seq_read\": \"1GB/s\"}},"
        "{\"name\": \"b\", \"os\": \"linux\", \"cpu\": {\"cores\": 4, \"flops\": {\"*\": "
        "5e10}, \"mem_bw\": \"20GB/s\"}, \"memory\": {\"available\": \"3GiB\"}, "
        "\"disk\": {\"seq_read\": \"1GB/s\"}}]}";
    lares_plan_opts o = lares_plan_opts_default();
    o.shape = "llama2-7b:q4_k_m";
    o.n_ctx = 256;
    const struct {
        const char *placement;
        const char *expect; /* in the JSON, or in the error when status is not OK */
        bool ok;
    } cases[] = {
        {"halda:k=2", "\"k\": 2,", true},
        {"halda:k=4", "\"k\": 4,", true},
        {"halda:k=3", "3 rounds do not divide the 32 layers", false},
        {"halda:k=0", "unknown placement 'halda:k=0'", false},
        {"halda:k=", "unknown placement", false},
        {"halda:k=2x", "unknown placement", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lares_error err = {0};
        char *json = NULL;
        o.placement = cases[i].placement;
        lares_status st = lares_plan(&o, devs, strlen(devs), "devices", &json, &err);
        if (cases[i].ok) {
            CHECKF(st == LARES_OK && json != NULL && strstr(json, cases[i].expect) != NULL,
                   "%s: %d %s", cases[i].placement, st, st == LARES_OK ? json : err.msg);
        } else {
            CHECKF(st == LARES_EINVAL && strstr(err.msg, cases[i].expect) != NULL, "%s: %d %s",
                   cases[i].placement, st, err.msg);
        }
        lares_free(json);
    }
}

int main(void) {
    lares_error err = {0};
    sched_model *m = model8();
    sched_device d[3];
    devices(d);
    sched_opts o = sched_opts_default();
    o.n_ctx = 512;
    o.ram_reserve_bytes = 0;
    o.vram_reserve_bytes = 0;
    o.net_default = (sched_hop){1e-3, 1e8};
    size_t ring[3] = {0, 1, 2};
    int32_t w[3] = {1, 2, 1}, g[3] = {0, 1, 0};
    sched_plan *p = NULL;
    /* k = 2 rounds of 4: n0 [0,1) [4,5); n1 [1,3) [5,7) with GPU 2 and 6; n2 [3,4) [7,8) */
    CHECK_OK(sched_plan_from_windows(m, d, 3, &o, ring, w, g, 3, &p, &err), &err);
    if (p == NULL) {
        return check_finish("sched_plan");
    }
    CHECK(p->k == 2 && p->W == 4 && p->a[1].offset == 1);
    CHECK_OK(sched_plan_validate(p, m, d, 3, &o, &err), &err);
    int32_t l0, l1, g0;
    CHECK_OK(sched_plan_layers_of(p, 1, 1, &l0, &l1, &err), &err);
    CHECK(l0 == 5 && l1 == 7);
    CHECK_OK(sched_plan_gpu_from(p, 1, 1, &g0, &err), &err);
    CHECK(g0 == 6);

    /* per device index, and the table a ring head prints after a run */
    int32_t wd[3], gd[3];
    sched_plan_windows(p, wd, gd);
    CHECK(wd[0] == 1 && wd[1] == 2 && wd[2] == 1 && gd[1] == 1 && gd[0] == 0);
    char table[2048];
    sched_measured meas[3];
    for (int i = 0; i < 3; i++) {
        sched_measured_init(&meas[i]);
    }
    /* n0: 2 layers per token at 6.25 ms, no wait; n2 not measured */
    meas[0].samples = 4;
    meas[0].layer_s = 6.25e-3;
    meas[0].wait_s = 0;
    meas[1].samples = 2;
    meas[1].layer_s = 15e-3;
    meas[1].wait_s = 1.5e-3;
    size_t len = sched_plan_format_measured(p, d, meas, 0.0525, table, sizeof table);
    CHECK(len == strlen(table) && strstr(table, "pred/meas") && strstr(table, "n0 ") &&
          strstr(table, " 12.5 ") && strstr(table, " 60.0 ") && strstr(table, " 1.5 ") &&
          strstr(table, "52.5 ms measured"));
    CHECK(sched_plan_format_measured(p, d, meas, -1, table, 10) == 9 && strlen(table) == 9);
    /* a disk rate the ring measured replaces the profile's, the streaming one
     * included (it is the one streaming is priced at) */
    {
        sched_device cal[3];
        const double seq = d[1].disk_seq_Bps, stream = d[1].disk_stream_Bps;
        d[1].disk_stream_Bps = 4e9;
        meas[1].read_Bps = 3e8;
        CHECK_OK(sched_devices_calibrate(m, d, 3, &o, NULL, meas, cal, &err), &err);
        CHECK(cal[1].disk_seq_Bps == 3e8 && cal[1].disk_stream_Bps == 3e8 &&
              sched_disk_stream_Bps(&cal[1]) == 3e8);
        CHECK(cal[0].disk_stream_Bps == d[0].disk_stream_Bps); /* not measured: kept */
        d[1].disk_stream_Bps = stream;
        d[1].disk_seq_Bps = seq;
        meas[1].read_Bps = 0;
    }

    /* a layer owned twice, and then by nobody */
    p->a[2].offset = 2;
    INVALID(p, LARES_EINVAL, "layer 2 is owned twice", "'n2'");
    p->a[2].offset = 3;
    p->a[2].w = 0;
    INVALID(p, LARES_EINVAL, "'n2' has a window of 0", NULL);
    p->a[2].w = 1;
    p->a[1].w = 1;
    INVALID(p, LARES_EINVAL, "layer 2 is owned by no device", NULL);
    p->a[1].w = 2;
    /* a device twice */
    p->a[2].device = 1;
    INVALID(p, LARES_EINVAL, "'n1' is in the ring twice", NULL);
    p->a[2].device = 2;
    /* GPU layers */
    p->a[1].n_gpu = 3;
    INVALID(p, LARES_EINVAL, "'n1' has a window of 2 with 3 GPU layers", NULL);
    p->a[1].n_gpu = 1;
    p->a[0].n_gpu = 1;
    INVALID(p, LARES_EINVAL, "'n0'", "no GPU");
    p->a[0].n_gpu = 0;
    /* rounds that do not cover the model */
    p->k = 3;
    INVALID(p, LARES_EINVAL, "3 rounds of 4 layers for a 8-layer model", NULL);
    p->k = 2;
    /* the head first */
    p->head = 2;
    INVALID(p, LARES_EINVAL, "head is not the first device", NULL);
    p->head = 0;
    CHECK_OK(sched_plan_validate(p, m, d, 3, &o, &err), &err);

    /* VRAM: 2 GPU layers of 100 MB + 512 positions x 8 x 64 x 2 x 2 bytes do not fit 150 MB */
    d[1].vram_avail_bytes = 150 * MB;
    INVALID(p, LARES_ERANGE, "'n1' has", "GPU memory");
    d[1].vram_avail_bytes = 300 * MB;
    /* KV: 2 layers x 1 MiB of KV in 1.5 MB of RAM */
    d[2].ram_avail_bytes = 1500000;
    INVALID(p, LARES_ERANGE, "'n2' needs", "KV cache");
    d[2].ram_avail_bytes = 1000 * MB;
    /* storage: 200 MB of weights with 100 MB of RAM and 50 MB of disk */
    d[2].ram_avail_bytes = 100 * MB;
    d[2].disk_free_bytes = 50 * MB;
    INVALID(p, LARES_ERANGE, "'n2' holds", "RAM and disk");
    d[2].disk_free_bytes = -1; /* the whole file is there: it streams the rest */
    CHECK_OK(sched_plan_validate(p, m, d, 3, &o, &err), &err);
    /* checked against another device list */
    CHECK(sched_plan_validate(p, m, d, 2, &o, &err) == LARES_EINVAL);
    sched_plan_free(p);

    /* explicit windows that cannot be a plan */
    int32_t w3[3] = {1, 1, 1};
    CHECK(sched_plan_from_windows(m, d, 3, &o, ring, w3, NULL, 3, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "3 layers does not divide the 8 layers") != NULL, "%s", err.msg);
    size_t far[1] = {7};
    int32_t w8[1] = {8};
    CHECK(sched_plan_from_windows(m, d, 3, &o, far, w8, NULL, 1, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "device index 7 of 3") != NULL, "%s", err.msg);
    int32_t wneg[3] = {4, -1, 5};
    CHECK(sched_plan_from_windows(m, d, 3, &o, ring, wneg, NULL, 3, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'n1' gets -1 layers") != NULL, "%s", err.msg);
    size_t twice[2] = {0, 0};
    int32_t w44[2] = {4, 4};
    CHECK(sched_plan_from_windows(m, d, 3, &o, twice, w44, NULL, 2, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "twice") != NULL, "%s", err.msg);

    lares_free(m->layers);
    free(m);
    test_rounds_placement();
    return check_finish("sched_plan");
}
