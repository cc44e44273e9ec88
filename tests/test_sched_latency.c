/*
 * sched: the latency model against figures computed by hand, and the model
 * description against the facts of real files and published shapes.
 *
 * Hand-computed cases use round numbers so every expected value below can be
 * checked on paper: a layer of 1e9 FLOPs over 2e8 bytes of Q8_0 weights, hops
 * of 1000 F32 values (4000 bytes).
 */
#include "check.h"
#include "sched/sched.h"

#include <math.h>

#define NEAR(a, b) (fabs((a) - (b)) <= 1e-9 * (1 + fabs(b)))

/* L uniform layers: 1e9 FLOPs of Q8_0 over 2e8 bytes; head 2e8 FLOPs over 1e7 bytes */
static sched_model *toy_model(int32_t L) {
    sched_model *m = calloc(1, sizeof *m);
    snprintf(m->name, sizeof m->name, "toy");
    m->n_layer = L;
    m->n_embd = 1000;
    m->n_vocab = 100;
    m->n_head = 1;
    m->n_head_kv = 1;
    m->head_dim = 1;
    m->layers = lares_calloc((size_t)L, sizeof *m->layers);
    for (int32_t l = 0; l < L; l++) {
        m->layers[l].bytes[GGUF_TYPE_Q8_0] = 200000000;
        m->layers[l].weight_bytes = 200000000;
        m->layers[l].flops[GGUF_TYPE_Q8_0] = 1e9;
    }
    m->head.bytes[GGUF_TYPE_Q8_0] = 10000000;
    m->head.weight_bytes = 10000000;
    m->head.flops[GGUF_TYPE_Q8_0] = 2e8;
    return m;
}

static void toy_free(sched_model *m) {
    lares_free(m->layers);
    free(m);
}

static sched_opts toy_opts(void) {
    sched_opts o = sched_opts_default();
    o.n_ctx = 1;  /* KV of one layer: 2 x 1 head x 1 dim x 1 position x 2 bytes = 4 */
    o.n_past = 0; /* no attention time */
    o.ram_reserve_bytes = 0;
    o.vram_reserve_bytes = 0;
    return o;
}

/* A: 1e11 FLOP/s, 1e10 B/s -> max(0.01, 0.02) = 0.02 s per layer (memory-bound) */
static void dev_a(sched_device *d) {
    sched_device_init(d, "A");
    d->cores = 4;
    d->cpu_flops.by_type[GGUF_TYPE_Q8_0] = 1e11;
    d->mem_bw_Bps = 1e10;
    d->ram_avail_bytes = 1000000000;
    d->disk_seq_Bps = 1e9;
    d->net_out.latency_s = 0.001;
    d->net_out.bandwidth_Bps = 1e6; /* hop A->B: 0.001 + 4000 / 1e6 = 0.005 s */
}

/* B: a measured memory-bound rate of 2.5e10 -> 1e9 / 2.5e10 = 0.04 s per layer */
static void dev_b(sched_device *d) {
    sched_device_init(d, "B");
    d->cores = 2;
    d->cpu_flops.by_type[GGUF_TYPE_Q8_0] = 1e12; /* ignored: the measured rate wins */
    d->cpu_flops_mem.by_type[GGUF_TYPE_Q8_0] = 2.5e10;
    d->mem_bw_Bps = 1e9;
    d->ram_avail_bytes = 250000000; /* holds one of its two layers' 200000004 bytes */
    d->disk_seq_Bps = 1e9;
    d->disk_rand_Bps = 1e8;
}

static void test_two_devices(void) {
    lares_error err = {0};
    sched_model *m = toy_model(4);
    sched_device devs[2];
    dev_a(&devs[0]);
    dev_b(&devs[1]);
    sched_opts o = toy_opts();
    /* hop B->A through a link: 0.002 + 4000 / 4e6 = 0.003 s */
    sched_link link = {.from = 1, .to = 0, .hop = {0.002, 4e6}};
    o.links = &link;
    o.n_links = 1;
    size_t ring[2] = {0, 1};
    int32_t w[2] = {1, 1};
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w, NULL, 2, &p, &err), &err);
    if (p == NULL) {
        toy_free(m);
        return;
    }
    CHECK(p->k == 2 && p->W == 2 && p->head == 0 && p->n == 2);
    /* A: layers 0 and 2; B: layers 1 and 3 */
    int32_t l0, l1;
    CHECK_OK(sched_plan_layers_of(p, 0, 1, &l0, &l1, &err), &err);
    CHECK(l0 == 2 && l1 == 3);
    CHECK_OK(sched_plan_layers_of(p, 1, 0, &l0, &l1, &err), &err);
    CHECK(l0 == 1 && l1 == 2);
    const sched_assign *a = &p->a[0], *b = &p->a[1];
    /* A: two windows of 0.02 s, and the head's output matrix, max(2e8 / 1e11,
     * 1e7 / 1e10) = 0.002 s, one more burst */
    CHECKF(NEAR(a->t_cpu_s, 0.042) && NEAR(a->t_layer_s, 0.02), "A cpu %g per layer %g", a->t_cpu_s,
           a->t_layer_s);
    CHECKF(NEAR(a->t_net_s, 0.010), "A net %g", a->t_net_s); /* 2 rounds x 0.005 */
    CHECK(a->t_disk_s == 0 && a->mem_case == SCHED_CASE_FITS && a->disk_read_bytes == 0);
    /* A is the head: 1e9 - 1e7 of RAM for layers, 2 x 200000004 needed */
    CHECK(a->ram_limit_bytes == 990000000 && a->ram_bytes == 400000008);
    CHECKF(NEAR(b->t_cpu_s, 0.08), "B cpu %g", b->t_cpu_s);
    /* B streams (the executor's plan): its budget 250000000 less 8 bytes of KV
     * keeps the slack of 16 MiB free; the window is the 233222776 bytes left,
     * less than two layers, so nothing is pinned and both layers, 4e8 bytes,
     * are read every token at 1e9 B/s: 0.4 s. The window holds one layer, so
     * the reader waits while B computes each: the disk needs 0.4 + 0.08 s a
     * token, more than the chain of 0.042 + 0.010 + 0.08 + 0.006 s, and B's
     * wait is the difference */
    CHECK(b->mem_case == SCHED_CASE_OVERFLOW && b->disk_read_bytes == 400000000);
    CHECKF(NEAR(b->t_read_s, 0.4), "B reads %g", b->t_read_s);
    CHECKF(NEAR(b->t_disk_s, 0.48 - 0.138), "B waits %g", b->t_disk_s);
    CHECKF(NEAR(b->t_net_s, 0.006), "B net %g", b->t_net_s);
    CHECKF(NEAR(p->t_head_s, 0.002), "head %g", p->t_head_s);
    CHECKF(NEAR(p->t_token_s, 0.48), "T %g", p->t_token_s);
    sched_plan_free(p);

    /* the same on macOS: random reads at 1e8 B/s, 4 s */
    devs[1].os = SCHED_OS_MACOS;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECK(p->a[1].mem_case == SCHED_CASE_OVERFLOW_MACOS);
        CHECKF(NEAR(p->a[1].t_disk_s, 4.08 - 0.138), "macOS disk %g", p->a[1].t_disk_s);
        CHECKF(NEAR(p->t_token_s, 4.08), "macOS T %g", p->t_token_s);
        sched_plan_free(p);
    }
    /* Android counts its swap (zram) as memory: 150000008 more bytes fit */
    devs[1].os = SCHED_OS_ANDROID;
    devs[1].swap_avail_bytes = 150000008;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECK(p->a[1].mem_case == SCHED_CASE_FITS && p->a[1].t_disk_s == 0);
        sched_plan_free(p);
    }
    /* without any figure for the hop B -> A the plan cannot be priced */
    devs[1].os = SCHED_OS_LINUX;
    o.n_links = 0;
    CHECK(sched_plan_from_windows(m, devs, 2, &o, ring, w, NULL, 2, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "hop B -> A") != NULL, "%s", err.msg);
    /* ... and a default network prices it: 0.005 + 4000 / 2e6 = 0.007 per hop */
    o.net_default = (sched_hop){0.005, 2e6};
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECKF(NEAR(p->a[1].t_net_s, 0.014), "default hop %g", p->a[1].t_net_s);
        sched_plan_free(p);
    }
    toy_free(m);
}

static void test_gpus(void) {
    lares_error err = {0};
    sched_model *m = toy_model(4);
    sched_opts o = toy_opts();
    sched_device d;
    dev_a(&d);
    /* CUDA: 1e13 FLOP/s, 1e11 B/s -> max(1e-4, 2e-3) = 0.002 s per layer */
    d.gpu = SCHED_GPU_CUDA;
    d.gpu_flops.other = 1e13;
    d.gpu_mem_bw_Bps = 1e11;
    d.vram_avail_bytes = 450000000; /* two layers of 200000004 */
    size_t ring = 0;
    int32_t w = 2, n = 1; /* k = 2: windows {0,1} and {2,3}, GPU: layers 1 and 3 */
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_from_windows(m, &d, 1, &o, &ring, &w, &n, 1, &p, &err), &err);
    if (p != NULL) {
        int32_t g0;
        CHECK_OK(sched_plan_gpu_from(p, 0, 1, &g0, &err), &err);
        CHECK(g0 == 3);
        CHECKF(NEAR(p->a[0].t_gpu_s, 0.004) && NEAR(p->a[0].t_cpu_s, 0.042), "gpu %g cpu %g",
               p->a[0].t_gpu_s, p->a[0].t_cpu_s);
        CHECKF(NEAR(p->a[0].t_layer_s, 0.011), "per layer %g", p->a[0].t_layer_s);
        CHECK(p->a[0].vram_bytes == 400000008 && p->a[0].t_net_s == 0);
        CHECKF(NEAR(p->t_token_s, 0.044 + 0.002), "T %g", p->t_token_s);
        sched_plan_free(p);
    }
    /* three GPU layers do not fit 450 MB of VRAM: the plan is refused */
    w = 4;
    n = 3;
    CHECK(sched_plan_from_windows(m, &d, 1, &o, &ring, &w, &n, 1, &p, &err) == LARES_ERANGE);
    CHECKF(strstr(err.msg, "'A'") && strstr(err.msg, "GPU memory"), "%s", err.msg);

    /* Metal: unified memory, so GPU layers count against RAM too */
    d.gpu = SCHED_GPU_METAL;
    d.os = SCHED_OS_MACOS;
    d.disk_rand_Bps = 1e8;
    d.ram_avail_bytes = 610000000; /* head: minus 1e7 -> 600000000 for 4 x 200000004 */
    d.vram_avail_bytes = 900000000;
    w = 4;
    n = 2;
    CHECK_OK(sched_plan_from_windows(m, &d, 1, &o, &ring, &w, &n, 1, &p, &err), &err);
    if (p != NULL) {
        /* every layer lives in RAM: 800000000 bytes of layers and 1e7 of the
         * output against a budget of 610000000 - 16 (KV). The executor keeps
         * 16 MiB of slack and a window of two layers (4e8), which leaves
         * 193222768 bytes to pin: no layer, but the output matrix (van der
         * Corput order 0, 4, 2, 1, 3 over the five units). So all four layers
         * stream, 8e8 bytes at 1e8 B/s: 8 s, and alone on its ring the disk is
         * the whole token: 8 s, of which 0.046 s is compute */
        CHECK(p->a[0].mem_case == SCHED_CASE_OVERFLOW_MACOS_METAL);
        CHECK(p->a[0].ram_bytes == 800000016 && p->a[0].disk_read_bytes == 800000000);
        CHECKF(NEAR(p->t_token_s, 8.0), "metal T %g", p->t_token_s);
        CHECKF(NEAR(p->a[0].t_disk_s, 8.0 - 0.046), "metal disk %g", p->a[0].t_disk_s);
        sched_plan_free(p);
    }
    toy_free(m);
}

static void test_attention(void) {
    lares_error err = {0};
    sched_model *m = toy_model(1);
    m->n_head = 32;
    m->n_head_kv = 8;
    m->head_dim = 128;
    sched_opts o = toy_opts();
    o.n_ctx = 4096;
    o.n_past = 1000;
    sched_device d;
    dev_a(&d);
    d.cpu_flops.by_type[GGUF_TYPE_F16] = 1e10;
    size_t ring = 0;
    int32_t w = 1;
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_from_windows(m, &d, 1, &o, &ring, &w, NULL, 1, &p, &err), &err);
    if (p != NULL) {
        /* attention: 4 x 32 heads x 128 x 1000 = 16384000 FLOPs at 1e10 = 1.6384e-3 s;
         * K and V read: 2 x 8 x 128 x 1000 x 2 bytes = 4096000 at 1e10 = 4.096e-4 s */
        CHECKF(NEAR(p->a[0].t_cpu_s, 0.02 + 1.6384e-3 + 0.002), "attention %g", p->a[0].t_cpu_s);
        /* memory: 4096 positions of KV held = 2 x 8 x 128 x 4096 x 2 = 16777216 bytes */
        CHECK(p->a[0].ram_bytes == 200000000ull + 16777216ull);
        sched_plan_free(p);
    }
    /* a device without an F16 figure cannot price the attention */
    d.cpu_flops.by_type[GGUF_TYPE_F16] = 0;
    CHECK(sched_plan_from_windows(m, &d, 1, &o, &ring, &w, NULL, 1, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "f16") && strstr(err.msg, "'A'"), "%s", err.msg);
    toy_free(m);
}

/* S: a slow head, 1e9 FLOPs at 5e9 FLOP/s = 0.2 s per layer, output 0.04 s */
static void dev_s(sched_device *d) {
    dev_a(d);
    snprintf(d->name, sizeof d->name, "S");
    d->cpu_flops.by_type[GGUF_TYPE_Q8_0] = 5e9;
    d->mem_bw_Bps = 1e12;
}

/* C: 0.02 s per layer; 616777232 bytes: four layers' KV (16 bytes), 16 MiB of
 * slack, a window of two layers and one layer pinned */
static void dev_c(sched_device *d) {
    dev_a(d);
    snprintf(d->name, sizeof d->name, "C");
    d->ram_avail_bytes = 616777232;
    d->disk_seq_Bps = 2e9;
}

/* The prefetch of the next window overlaps the rest of the ring: the same four
 * layers on C cost less waiting in two rounds than in one. */
static void test_overlap(void) {
    lares_error err = {0};
    sched_model *m = toy_model(6);
    sched_device devs[2];
    dev_s(&devs[0]);
    dev_c(&devs[1]);
    sched_opts o = toy_opts();
    size_t ring[2] = {0, 1};
    int32_t w1[2] = {2, 4}, w2[2] = {1, 2};
    sched_plan *p = NULL;
    /* k = 1: C holds layers 2-5 = units 0-3; the executor pins unit 0 (van der
     * Corput 0, 2, 1, 3 with 200000000 bytes to pin) and streams 6e8 bytes:
     * 0.3 s at 2e9 B/s. While the token is on S the reader fills the window,
     * 4e8 bytes (0.2 s of reading); while C computes it reads on, except during
     * its first streamed layer (0.02 s): 0.08 - 0.02 = 0.06 s. It waits
     * 0.3 - 0.2 - 0.06 = 0.04 s */
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w1, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        const sched_assign *c = &p->a[1];
        CHECK(p->k == 1 && c->mem_case == SCHED_CASE_OVERFLOW && c->disk_read_bytes == 600000000);
        CHECKF(NEAR(c->t_read_s, 0.3) && NEAR(c->t_disk_s, 0.04), "k=1: C reads %g waits %g",
               c->t_read_s, c->t_disk_s);
        /* S: 0.4 + 0.04 (output), hops 0.005 each way */
        CHECKF(NEAR(p->t_token_s, 0.44 + 0.005 + 0.08 + 0.04 + 0.005), "k=1: T %g", p->t_token_s);
        sched_plan_free(p);
    }
    /* k = 2: the same units (layers 1-2 and 4-5); two gaps fill the window
     * twice, up to 8e8 bytes, more than the 6e8 streamed: no wait, one more
     * lap of hops */
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w2, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        const sched_assign *c = &p->a[1];
        CHECK(p->k == 2 && c->disk_read_bytes == 600000000);
        CHECKF(c->t_disk_s == 0, "k=2: C waits %g", c->t_disk_s);
        CHECKF(NEAR(p->t_token_s, 0.44 + 0.01 + 0.08 + 0.01), "k=2: T %g", p->t_token_s);
        sched_plan_free(p);
    }
    /* Halda does at least as well (it moves a layer off the slow head) */
    o.head = 0;
    o.keep_order = true;
    CHECK_OK(sched_plan_make(m, devs, 2, &o, &p, &err), &err);
    if (p != NULL) {
        printf("overlap: halda k=%d S %d C %d: %.4f s\n", p->k, p->a[0].w, p->a[1].w, p->t_token_s);
        CHECKF(p->t_token_s <= 0.54 + 1e-9, "halda: k=%d T %g", p->k, p->t_token_s);
        sched_plan_free(p);
    }
    toy_free(m);
}

/* Where direct reads work (a direct figure in the profile), the executor
 * streams with them and streaming is priced at that figure. Where it streams
 * through the mapping (a GPU session), at the streaming figure, else the
 * sequential one, but never above SCHED_DIRECT_HEADROOM times the direct
 * reads: a faster figure was a cache answering. */
static void test_direct_bound(void) {
    sched_device d;
    dev_c(&d); /* sequential 2e9 */
    CHECK(sched_disk_stream_Bps(&d) == 2e9 && !sched_disk_streams_direct(&d));
    d.disk_stream_Bps = 8e9;
    CHECK(sched_disk_stream_Bps(&d) == 8e9); /* no direct figure: no bound */
    d.disk_direct_Bps = 1.6e9;
    CHECK(sched_disk_streams_direct(&d) && sched_disk_stream_Bps(&d) == 1.6e9);
    d.disk_direct_Bps = 9e9; /* direct reads faster than the page cache */
    CHECK(sched_disk_stream_Bps(&d) == 9e9);
    d.gpu = SCHED_GPU_CUDA; /* streams through the mapping: the bound */
    d.disk_direct_Bps = 1.6e9;
    CHECKF(!sched_disk_streams_direct(&d) &&
               NEAR(sched_disk_stream_Bps(&d), SCHED_DIRECT_HEADROOM * 1.6e9),
           "%g", sched_disk_stream_Bps(&d));
    d.disk_direct_Bps = 7e9; /* within the headroom: the streaming figure */
    CHECK(sched_disk_stream_Bps(&d) == 8e9);
    d.disk_stream_Bps = 0; /* the sequential figure is bounded too */
    d.disk_direct_Bps = 1e9;
    CHECK(NEAR(sched_disk_stream_Bps(&d), SCHED_DIRECT_HEADROOM * 1e9));
    d.gpu = SCHED_GPU_NONE;
    d.os = SCHED_OS_MACOS; /* macOS: priced by random reads, not direct streaming */
    CHECK(!sched_disk_streams_direct(&d));
    /* the plan prices with it: test_overlap's C streams 6e8 bytes, directly
     * at 1.6e9 (the CPU of reading: test_read_cpu) */
    lares_error err = {0};
    sched_model *m = toy_model(6);
    sched_device devs[2];
    dev_s(&devs[0]);
    dev_c(&devs[1]);
    devs[1].disk_stream_Bps = 8e9;
    devs[1].disk_stream_cpu_Bps = 4e9;
    devs[1].disk_direct_Bps = 1.6e9;
    sched_opts o = toy_opts();
    size_t ring[2] = {0, 1};
    int32_t w1[2] = {2, 4};
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w1, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECKF(p->a[1].disk_read_bytes == 600000000 && NEAR(p->a[1].t_read_s, 6e8 / 1.6e9),
               "C reads %g s", p->a[1].t_read_s);
        sched_plan_free(p);
    }
    /* through the mapping (no direct figure): the cache's figure */
    devs[1].disk_direct_Bps = 0;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w1, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECKF(NEAR(p->a[1].t_read_s, 6e8 / 8e9), "C reads %g s", p->a[1].t_read_s);
        sched_plan_free(p);
    }
    toy_free(m);
}

/* A CPU quota is not a slower CPU: bursts run at full speed until the period's
 * quota is spent. */
static void test_quota(void) {
    lares_error err = {0};
    sched_model *m = toy_model(6);
    sched_device devs[2];
    dev_s(&devs[0]);
    dev_a(&devs[1]);
    snprintf(devs[1].name, sizeof devs[1].name, "Q");
    devs[1].threads = 1;
    devs[1].cpu_quota = 0.5; /* 50 ms of each 100 ms period */
    devs[1].cpu_quota_period_s = 0.1;
    devs[0].net_out = (sched_hop){0.001, 1e9}; /* 0.001004 s a hop */
    devs[1].net_out = (sched_hop){0.001, 1e9};
    sched_opts o = toy_opts();
    size_t ring[2] = {0, 1};
    int32_t w1[2] = {2, 4}, w2[2] = {1, 2};
    sched_plan *p = NULL;
    /* k = 1: one burst of 4 x 0.02 = 0.08 s: 0.05 at full speed, then the
     * rest in slices of 0.05 per period: 0.08 / 0.5 - 0.1 x (1 - 0.5) = 0.11 s */
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w1, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECKF(NEAR(p->a[1].t_cpu_s, 0.11) && NEAR(p->a[1].t_layer_s, 0.0275), "k=1: Q cpu %g",
               p->a[1].t_cpu_s);
        sched_plan_free(p);
    }
    /* k = 2: two bursts of 0.04 s, each within the quota: full speed */
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w2, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECKF(NEAR(p->a[1].t_cpu_s, 0.08), "k=2: Q cpu %g", p->a[1].t_cpu_s);
        sched_plan_free(p);
    }
    /* a fast ring cannot use more than the quota's share over time: S as fast
     * as Q, Q's 0.08 s of work per token needs 0.16 s of wall time however
     * short the bursts, and the token waits for it there */
    devs[0] = devs[1];
    devs[0].cpu_quota = 0;
    snprintf(devs[0].name, sizeof devs[0].name, "F");
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w2, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        /* chain: F 0.04 + 0.002, Q 0.08, 4 hops of 0.001004 = 0.126016 < 0.16 */
        CHECKF(NEAR(p->t_token_s, 0.16), "share: T %g", p->t_token_s);
        CHECKF(NEAR(p->a[1].t_cpu_s, 0.08 + 0.16 - 0.126016), "share: Q cpu %g", p->a[1].t_cpu_s);
        sched_plan_free(p);
    }
    toy_free(m);
}

/* The prefetch thread's kernel work comes out of a CPU quota too: C of the
 * overlap test streams 6e8 bytes a token; at 3e9 bytes per CPU-second that
 * is 0.2 s of CPU beside its 0.08 s of compute, and a quota of half a core
 * needs (0.08 + 0.2) / 0.5 = 0.56 s of wall time for it, more than the
 * chain's 0.54 s. Also: Halda held to a number of rounds. */
static void test_read_cpu(void) {
    lares_error err = {0};
    sched_model *m = toy_model(6);
    sched_device devs[2];
    dev_s(&devs[0]);
    dev_c(&devs[1]);
    devs[1].threads = 1;
    devs[1].cpu_quota = 0.5;
    devs[1].cpu_quota_period_s = 0.1;
    sched_opts o = toy_opts();
    size_t ring[2] = {0, 1};
    int32_t w2[2] = {1, 2};
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w2, NULL, 2, &p, &err), &err);
    if (p != NULL) { /* bursts of 0.04 s within the quota; reading not priced */
        CHECKF(NEAR(p->t_token_s, 0.54), "no read CPU: T %g", p->t_token_s);
        sched_plan_free(p);
    }
    devs[1].disk_stream_cpu_Bps = 3e9;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w2, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECKF(NEAR(p->t_token_s, 0.56), "read CPU: T %g", p->t_token_s);
        CHECKF(NEAR(p->a[1].t_cpu_s, 0.08 + 0.02), "read CPU: C cpu %g", p->a[1].t_cpu_s);
        sched_plan_free(p);
    }
    /* read directly (a direct figure, as fast as the sequential one): the
     * page cache's CPU is not spent, the quota holds the compute alone */
    devs[1].disk_direct_Bps = devs[1].disk_seq_Bps;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w2, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECKF(NEAR(p->t_token_s, 0.54), "direct reads under a quota: T %g", p->t_token_s);
        sched_plan_free(p);
    }
    devs[1].disk_direct_Bps = 0;
    /* without a quota the reader runs on another core: not priced */
    devs[1].cpu_quota = 0;
    CHECK_OK(sched_plan_from_windows(m, devs, 2, &o, ring, w2, NULL, 2, &p, &err), &err);
    if (p != NULL) {
        CHECKF(NEAR(p->t_token_s, 0.54), "no quota: T %g", p->t_token_s);
        sched_plan_free(p);
    }
    /* rounds: k held; one that does not divide the 6 layers is refused */
    o.head = 0;
    for (int32_t k = 1; k <= 3; k++) {
        o.rounds = k;
        CHECK_OK(sched_plan_make(m, devs, 2, &o, &p, &err), &err);
        if (p != NULL) {
            CHECKF(p->k == k, "rounds %d: k=%d", k, p->k);
            sched_plan_free(p);
        }
    }
    o.rounds = 4;
    p = NULL;
    CHECK(sched_plan_make(m, devs, 2, &o, &p, &err) == LARES_EINVAL && p == NULL);
    CHECKF(strstr(err.msg, "4 rounds") != NULL, "%s", err.msg);
    devs[1].disk_stream_cpu_Bps = -1;
    o.rounds = 0;
    p = NULL;
    CHECK(sched_plan_make(m, devs, 2, &o, &p, &err) == LARES_EINVAL && p == NULL);
    toy_free(m);
}

/* stories260K.gguf (models README): llama, 5 layers, n_embd 64, n_ff 172, 8 heads,
 * 4 KV heads of 8, vocabulary 512, untied output, all F32 */
static void test_from_gguf(void) {
    lares_error err = {0};
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(fixture("stories260K.gguf"), NULL, &f, &err), &err);
    if (f == NULL) {
        return;
    }
    sched_model *m = NULL;
    CHECK_OK(sched_model_from_gguf(f, &m, &err), &err);
    if (m != NULL) {
        CHECK(m->n_layer == 5 && m->n_embd == 64 && m->n_head == 8 && m->n_head_kv == 4 &&
              m->head_dim == 8 && m->n_vocab == 512);
        /* q 64x64, k and v 64x32, o 64x64, gate/up/down 64x172: 45312 weights */
        for (int l = 0; l < 5; l++) {
            CHECKF(m->layers[l].flops[GGUF_TYPE_F32] == 2.0 * 45312, "layer %d flops %g", l,
                   m->layers[l].flops[GGUF_TYPE_F32]);
            CHECKF(m->layers[l].weight_bytes == (45312 + 64 + 64) * 4, "layer %d bytes %" PRIu64, l,
                   m->layers[l].weight_bytes);
        }
        /* the executor's parts: attention in (norm, q, k, v), out (o), FFN in
         * (norm, gate, up), out (down), and its units: parts joined up to the
         * largest (gate and up, 2 x 64 x 172 + 64 floats) */
        const uint64_t parts[SCHED_PARTS] = {(64 + 64 * 64 + 2 * 64 * 32) * 4, 64 * 64 * 4,
                                             (64 + 2 * 64 * 172) * 4, 64 * 172 * 4};
        for (int q = 0; q < SCHED_PARTS; q++) {
            CHECKF(m->layers[2].part_bytes[q] == parts[q], "part %d: %" PRIu64 " bytes", q,
                   m->layers[2].part_bytes[q]);
        }
        uint64_t unit[SCHED_PARTS];
        CHECK(sched_layer_units(&m->layers[2], parts[2], unit) == 3 &&
              unit[0] == parts[0] + parts[1] && unit[1] == parts[2] && unit[2] == parts[3]);
        CHECK(sched_layer_units(&m->layers[2], parts[0], unit) == 4);
        sched_layer bare = {.weight_bytes = 1000}; /* described without parts: one unit */
        CHECK(sched_layer_units(&bare, parts[2], unit) == 1 && unit[0] == 1000);
        CHECK(m->head.flops[GGUF_TYPE_F32] == 2.0 * 64 * 512);
        CHECK(m->head.weight_bytes == (64 * 512 + 64) * 4);
        CHECK(m->embd_bytes == 64 * 512 * 4 && m->embd_row_bytes == 64 * 4);
        /* every tensor byte of the file is somewhere */
        uint64_t sum = 0;
        for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
            sum += gguf_tensor_at(f, i)->nbytes;
        }
        CHECK(sched_model_weight_bytes(m) == sum);
        CHECK(sched_layer_kv_bytes(m, 256, 2) == 2ull * 4 * 8 * 256 * 2);
    }
    sched_model_free(m);
    gguf_close(f);
    /* a tied file puts the embedding on the output side */
    CHECK_OK(sched_model_from_path(fixture("TinyStories-656K.f16.gguf"), &m, &err), &err);
    if (m != NULL) {
        CHECK(m->embd_bytes == 0 && m->head.weight_bytes >= 128 * 2048 * 2);
        CHECK(m->head.flops[GGUF_TYPE_F16] == 2.0 * 128 * 2048);
        sched_model_free(m);
    }
    /* a file that is not GGUF */
    CHECK(sched_model_from_path(fixture("llama2c/tok512.bin"), &m, &err) != LARES_OK);
}

/* Published Q4_K_M file sizes (Hugging Face, bartowski/Meta-Llama-3-8B-Instruct-GGUF:
 * 4.92 GB; bartowski/Meta-Llama-3-70B-Instruct-GGUF: 42.52 GB) against the shape's sum. */
static void test_shapes(void) {
    lares_error err = {0};
    sched_model *m = NULL;
    CHECK_OK(sched_model_from_shape("llama3-8b:q4_k_m", &m, &err), &err);
    if (m != NULL) {
        double gb = (double)sched_model_weight_bytes(m) / 1e9;
        CHECKF(fabs(gb - 4.92) < 0.05, "llama3-8b q4_k_m %.3f GB", gb);
        CHECK(m->n_layer == 32 && m->n_head_kv == 8 && m->head_dim == 128);
        /* the "more bits" layers (first and last eighth, every third between) are heavier */
        CHECK(m->layers[0].weight_bytes > m->layers[4].weight_bytes);
        CHECK(m->layers[0].bytes[GGUF_TYPE_Q6_K] > 0 && m->layers[4].bytes[GGUF_TYPE_Q6_K] == 0);
        /* the shape's tensor names find their parts: o and down have their own */
        const sched_layer *l4 = &m->layers[4];
        CHECK(l4->part_bytes[0] + l4->part_bytes[1] + l4->part_bytes[2] + l4->part_bytes[3] ==
                  l4->weight_bytes &&
              l4->part_bytes[1] > 0 && l4->part_bytes[3] > 0 &&
              l4->part_bytes[2] > l4->part_bytes[3]);
        sched_model_free(m);
    }
    CHECK_OK(sched_model_from_shape("llama3-70b:q4_k_m", &m, &err), &err);
    if (m != NULL) {
        double gb = (double)sched_model_weight_bytes(m) / 1e9;
        CHECKF(fabs(gb - 42.52) < 0.4, "llama3-70b q4_k_m %.3f GB", gb);
        /* FLOPs per token: 2 per weight, about 2 x 70e9 */
        double f = 0;
        for (int l = 0; l < m->n_layer; l++) {
            for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
                f += m->layers[l].flops[t];
            }
        }
        CHECKF(f > 2 * 67e9 && f < 2 * 70e9, "70b layer flops %g", f);
        sched_model_free(m);
    }
    CHECK(sched_model_from_shape("llama3-9b:q4_k_m", &m, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "llama3-9b") && strstr(err.msg, "llama3-70b"), "%s", err.msg);
    CHECK(sched_model_from_shape("llama3-8b:q9_z", &m, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "q9_z") != NULL, "%s", err.msg);
    CHECK(sched_model_from_shape("llama3-8b", &m, &err) == LARES_EINVAL);
}

static void test_units(void) {
    uint64_t b;
    double r;
    CHECK(sched_parse_size("2.4GiB", &b) && b == (uint64_t)(2.4 * 1073741824.0));
    CHECK(sched_parse_size("512MB", &b) && b == 512000000);
    CHECK(sched_parse_size("4096", &b) && b == 4096);
    CHECK(sched_parse_size("1 g", &b) && b == 1073741824);
    CHECK(!sched_parse_size("-1GB", &b));
    CHECK(!sched_parse_size("3 parsecs", &b));
    CHECK(!sched_parse_size("", &b));
    CHECK(!sched_parse_size("1e30", &b));
    CHECK(sched_parse_rate("0.72GB/s", &r) && NEAR(r, 0.72e9));
    CHECK(sched_parse_rate("100Mbit/s", &r) && NEAR(r, 12.5e6));
    CHECK(sched_parse_rate("1 Gbps", &r) && NEAR(r, 125e6));
    CHECK(sched_parse_rate("2GiB/s", &r) && NEAR(r, 2147483648.0));
    CHECK(sched_parse_rate("3e9", &r) && NEAR(r, 3e9));
    CHECK(!sched_parse_rate("3GB", &r));   /* a size is not a rate */
    CHECK(!sched_parse_rate("3Mb/s", &r)); /* bits must be spelled out */
    CHECK(!sched_parse_rate("fast", &r));
}

int main(void) {
    test_two_devices();
    test_gpus();
    test_attention();
    test_overlap();
    test_direct_bound();
    test_quota();
    test_read_cpu();
    test_from_gguf();
    test_shapes();
    test_units();
    return check_finish("sched_latency");
}
