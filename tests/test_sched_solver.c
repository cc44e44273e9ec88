/*
 * sched: the Halda solver against exhaustive search, its corner cases and its
 * errors.
 *
 * The oracle is brute force over every plan the latency model can price: every
 * subset of devices holding the head, every k dividing L, every split of a
 * round into windows and every count of GPU layers, each evaluated and
 * validated by sched_plan_from_windows. Instances are seeded random devices
 * (fast and slow CPUs, RAM that does or does not hold a share, fast and slow
 * disks, a CUDA GPU, a Metal Mac), so the memory cases and the GPU calibration
 * are exercised; the network is uniform so the ring order does not matter.
 */
#include "check.h"
#include "sched/sched.h"

#include <math.h>

#define MB 1000000ull

static uint64_t rng = 0x853c49e6748fea9bull;

static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static double logu(double lo, double hi) {
    return lo * pow(hi / lo, urand());
}

/* L uniform layers of 100 MB of Q4_0 weights, 2 FLOPs per byte-ish */
static sched_model *uniform_model(int32_t L) {
    sched_model *m = calloc(1, sizeof *m);
    snprintf(m->name, sizeof m->name, "uniform-%d", L);
    m->n_layer = L;
    m->n_embd = 2048;
    m->n_vocab = 32000;
    m->n_head = 16;
    m->n_head_kv = 4;
    m->head_dim = 128;
    m->layers = lares_calloc((size_t)L, sizeof *m->layers);
    for (int32_t l = 0; l < L; l++) {
        m->layers[l].bytes[GGUF_TYPE_Q4_0] = 100 * MB;
        m->layers[l].weight_bytes = 100 * MB;
        m->layers[l].flops[GGUF_TYPE_Q4_0] = 3.5e8;
    }
    m->head.bytes[GGUF_TYPE_Q4_0] = 50 * MB;
    m->head.weight_bytes = 50 * MB;
    m->head.flops[GGUF_TYPE_Q4_0] = 1.8e8;
    return m;
}

static void model_free_test(sched_model *m) {
    lares_free(m->layers);
    free(m);
}

static void random_device(sched_device *d, int i) {
    char name[16];
    snprintf(name, sizeof name, "d%d", i);
    sched_device_init(d, name);
    d->cores = 4;
    d->cpu_flops.other = logu(2e10, 5e11);
    d->mem_bw_Bps = logu(5e9, 6e10);
    d->ram_avail_bytes = (uint64_t)logu(150e6, 1.4e9);
    d->disk_seq_Bps = logu(2e8, 3e9);
    d->disk_rand_Bps = d->disk_seq_Bps / 4;
    double r = urand();
    if (r < 0.25) {
        d->gpu = SCHED_GPU_CUDA;
        d->vram_avail_bytes = (uint64_t)logu(100e6, 900e6);
        d->gpu_flops.other = 5e12;
        d->gpu_mem_bw_Bps = logu(1e11, 5e11);
    } else if (r < 0.4) {
        d->os = SCHED_OS_MACOS;
        if (urand() < 0.5) {
            d->gpu = SCHED_GPU_METAL;
            d->vram_avail_bytes = d->ram_avail_bytes;
            d->gpu_flops.other = 2e12;
            d->gpu_mem_bw_Bps = d->mem_bw_Bps;
        }
    } else if (r < 0.55) {
        d->os = SCHED_OS_ANDROID;
        d->swap_avail_bytes = (uint64_t)logu(1e6, 300e6);
    }
}

typedef struct search {
    const sched_model *m;
    const sched_device *devs;
    size_t n;
    const sched_opts *o;
    double best;
    size_t best_ring[8];
    int32_t best_w[8], best_g[8];
    size_t best_M;
    size_t ring[8];
    int32_t w[8], g[8];
    long tried;
} search;

static void try_plan(search *s, size_t M) {
    sched_plan *p = NULL;
    lares_error err = {0};
    s->tried++;
    if (sched_plan_from_windows(s->m, s->devs, s->n, s->o, s->ring, s->w, s->g, M, &p, &err) ==
        LARES_OK) {
        if (p->t_token_s < s->best) {
            s->best = p->t_token_s;
            s->best_M = M;
            memcpy(s->best_ring, s->ring, sizeof s->ring);
            memcpy(s->best_w, s->w, sizeof s->w);
            memcpy(s->best_g, s->g, sizeof s->g);
        }
        sched_plan_free(p);
    }
}

/* GPU layer counts of devices i.. */
static void gpus(search *s, size_t M, size_t i) {
    if (i == M) {
        try_plan(s, M);
        return;
    }
    int32_t most = s->devs[s->ring[i]].gpu == SCHED_GPU_NONE ? 0 : s->w[i];
    for (int32_t n = 0; n <= most; n++) {
        s->g[i] = n;
        gpus(s, M, i + 1);
    }
}

/* windows of devices i.. summing to `left` */
static void windows(search *s, size_t M, size_t i, int32_t left) {
    if (i == M - 1) {
        s->w[i] = left;
        gpus(s, M, 0);
        return;
    }
    for (int32_t w = 1; w <= left - (int32_t)(M - 1 - i); w++) {
        s->w[i] = w;
        windows(s, M, i + 1, left - w);
    }
}

static double brute_force(const sched_model *m, const sched_device *devs, size_t n,
                          const sched_opts *o) {
    search s = {.m = m, .devs = devs, .n = n, .o = o, .best = INFINITY};
    for (unsigned mask = 1; mask < (1u << n); mask += 2) { /* subsets holding device 0 */
        size_t M = 0;
        for (size_t i = 0; i < n; i++) {
            if (mask & (1u << i)) {
                s.ring[M++] = i;
            }
        }
        for (int32_t k = 1; k <= m->n_layer; k++) {
            if (m->n_layer % k == 0 && m->n_layer / k >= (int32_t)M) {
                windows(&s, M, 0, m->n_layer / k);
            }
        }
    }
    if (getenv("SCHED_DEBUG") && isfinite(s.best)) {
        printf("  brute: %.4f:", s.best);
        for (size_t i = 0; i < s.best_M; i++) {
            printf(" d%zu w=%d g=%d", s.best_ring[i], s.best_w[i], s.best_g[i]);
        }
        printf("\n");
    }
    return s.best;
}

static void test_against_brute_force(void) {
    const int instances = 40;
    int exact = 0, overflowing = 0, multi_round = 0, with_gpu = 0, dropped = 0;
    double worst = 1.0;
    for (int t = 0; t < instances; t++) {
        size_t n = 2 + (size_t)(urand() * 3); /* 2 to 4 devices */
        int32_t L = t % 2 ? 12 : 8;
        sched_device devs[4];
        for (size_t i = 0; i < n; i++) {
            random_device(&devs[i], (int)i);
        }
        sched_model *m = uniform_model(L);
        sched_opts o = sched_opts_default();
        o.n_ctx = 256;
        o.head = 0;
        o.ram_reserve_bytes = 16 * MB;
        o.vram_reserve_bytes = 16 * MB;
        o.net_default = (sched_hop){logu(2e-4, 5e-3), 50e6};
        lares_error err = {0};
        sched_plan *p = NULL;
        double truth = brute_force(m, devs, n, &o);
        lares_status st = sched_plan_make(m, devs, n, &o, &p, &err);
        if (!isfinite(truth)) {
            CHECKF(st == LARES_ERANGE, "instance %d: no plan exists, halda said %d (%s)", t, st,
                   err.msg);
        } else {
            CHECKF(st == LARES_OK, "instance %d: %s", t, err.msg);
        }
        if (p != NULL) {
            double ratio = p->t_token_s / truth;
            if (getenv("SCHED_DEBUG") && ratio > 1 + 1e-9) {
                printf("instance %d L=%d: halda %.4f k=%d:", t, L, p->t_token_s, p->k);
                for (size_t i = 0; i < p->n; i++) {
                    printf(" d%zu w=%d g=%d %s", p->a[i].device, p->a[i].w, p->a[i].n_gpu,
                           sched_case_name(p->a[i].mem_case));
                }
                printf("\n");
                for (size_t i = 0; i < n; i++) {
                    printf("   d%zu os=%s gpu=%s vram=%.0fMB ram=%.0fMB swap=%.0fMB flops=%.2g "
                           "bw=%.2g disk=%.2g\n",
                           i, sched_os_name(devs[i].os), sched_gpu_backend_name(devs[i].gpu),
                           devs[i].vram_avail_bytes / 1e6, devs[i].ram_avail_bytes / 1e6,
                           devs[i].swap_avail_bytes / 1e6, devs[i].cpu_flops.other,
                           devs[i].mem_bw_Bps, devs[i].disk_seq_Bps);
                }
            }
            CHECKF(ratio >= 1 - 1e-9, "instance %d: halda %.6f below the optimum %.6f", t,
                   p->t_token_s, truth);
            exact += ratio <= 1 + 1e-9;
            worst = fmax(worst, ratio);
            for (size_t i = 0; i < p->n; i++) {
                overflowing += p->a[i].mem_case != SCHED_CASE_FITS;
                with_gpu += p->a[i].n_gpu > 0;
            }
            if (p->k > 1) {
                /* more rounds only add laps of hops unless a device streams
                 * from disk: then each lap is a gap its prefetcher reads in
                 * (docs/scheduling-impl.md) */
                bool streams = false;
                for (size_t i = 0; i < p->n; i++) {
                    streams = streams || p->a[i].disk_read_bytes > 0;
                }
                CHECKF(streams, "instance %d: k=%d with no device streaming", t, p->k);
                multi_round++;
            }
            dropped += p->n < n;
            sched_plan_free(p);
        }
        model_free_test(m);
    }
    printf("halda vs brute force: %d of %d optimal, worst %.4fx; plans with overflow %d, "
           "k>1 %d, GPU layers %d, dropped devices %d\n",
           exact, instances, worst, overflowing, multi_round, with_gpu, dropped);
    /* the instances must exercise what they are meant to, k > 1 included */
    CHECK(overflowing > 0 && with_gpu > 0 && dropped > 0 && multi_round > 0);
    CHECKF(exact >= instances * 9 / 10, "halda optimal in %d of %d", exact, instances);
    CHECKF(worst < 1.05, "halda up to %.3fx the optimum", worst);
}

/* the linear program's objective is the latency model's figure for its plan */
static void test_objective_matches_model(void) {
    sched_model *m = uniform_model(12);
    sched_device devs[3];
    for (int i = 0; i < 3; i++) {
        random_device(&devs[i], i);
        devs[i].gpu = SCHED_GPU_NONE;
        devs[i].os = SCHED_OS_LINUX;
    }
    devs[1].ram_avail_bytes = 200 * MB; /* overflows with more than one layer */
    sched_opts o = sched_opts_default();
    o.n_ctx = 256;
    o.net_default = (sched_hop){1e-3, 1e8};
    lares_error err = {0};
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_make(m, devs, 3, &o, &p, &err), &err);
    if (p != NULL) {
        double t = p->t_token_s;
        CHECK_OK(sched_plan_evaluate(p, m, devs, 3, &o, &err), &err);
        CHECK(fabs(p->t_token_s - t) < 1e-12);
        CHECK_OK(sched_plan_validate(p, m, devs, 3, &o, &err), &err);
        sched_plan_free(p);
    }
    model_free_test(m);
}

static void test_infeasible(void) {
    sched_model *m = uniform_model(8); /* 800 MB of weights */
    sched_device devs[2];
    random_device(&devs[0], 0);
    random_device(&devs[1], 1);
    for (int i = 0; i < 2; i++) {
        devs[i].gpu = SCHED_GPU_NONE;
        devs[i].os = SCHED_OS_LINUX;
        devs[i].swap_avail_bytes = 0;
        devs[i].ram_avail_bytes = 300 * MB;
        devs[i].disk_free_bytes = 50 * MB; /* 350 MB each of RAM and disk */
    }
    sched_opts o = sched_opts_default();
    o.n_ctx = 256;
    o.ram_reserve_bytes = 0;
    o.net_default = (sched_hop){1e-3, 1e8};
    lares_error err = {0};
    sched_plan *p = NULL;
    CHECK(sched_plan_make(m, devs, 2, &o, &p, &err) == LARES_ERANGE && p == NULL);
    CHECKF(strstr(err.msg, "these devices cannot hold this model even from disk: need ") ==
                   err.msg &&
               strstr(err.msg, ", have "),
           "%s", err.msg);
    /* with a whole model file on one of them, it plans */
    devs[1].disk_free_bytes = -1;
    CHECK_OK(sched_plan_make(m, devs, 2, &o, &p, &err), &err);
    sched_plan_free(p);
    /* a KV cache nobody can hold: 8 layers x 4 KV heads x 128 x 2 x 2 bytes x 1M positions */
    o.n_ctx = 1 << 20;
    CHECK(sched_plan_make(m, devs, 2, &o, &p, &err) == LARES_ERANGE);
    CHECKF(strstr(err.msg, "cannot hold") != NULL, "%s", err.msg);
    /* the baselines fail with their own message */
    o.placement = SCHED_EVEN;
    CHECK(sched_plan_make(m, devs, 2, &o, &p, &err) == LARES_ERANGE);
    CHECKF(strstr(err.msg, "even split") && strstr(err.msg, "KV cache"), "%s", err.msg);
    model_free_test(m);
}

static void test_corner_cases(void) {
    lares_error err = {0};
    sched_model *m = uniform_model(12);
    sched_device devs[8];
    for (int i = 0; i < 8; i++) {
        random_device(&devs[i], i);
        devs[i].ram_avail_bytes = 2000 * MB;
        devs[i].gpu = SCHED_GPU_NONE;
        devs[i].os = SCHED_OS_LINUX;
        devs[i].cpu_flops.other = 1e11;
        devs[i].mem_bw_Bps = 2e10;
    }
    devs[3].cpu_flops.other = 1e12;
    devs[3].mem_bw_Bps = 1e11; /* five times faster than the rest */
    sched_opts o = sched_opts_default();
    o.n_ctx = 256;
    o.net_default = (sched_hop){5e-3, 1e7};
    sched_plan *p = NULL;
    /* a single device gets everything */
    CHECK_OK(sched_plan_make(m, devs, 1, &o, &p, &err), &err);
    if (p != NULL) {
        CHECK(p->n == 1 && p->a[0].w * p->k == 12 && p->a[0].t_net_s == 0);
        sched_plan_free(p);
    }
    /* slow hops and one fast device: the others are dropped, the head pinned stays */
    o.head = 5;
    CHECK_OK(sched_plan_make(m, devs, 8, &o, &p, &err), &err);
    if (p != NULL) {
        CHECK(p->head == 5 && p->a[0].device == 5 && !p->dropped[5]);
        CHECK(p->n == 2 && !p->dropped[3]);
        for (size_t i = 0; i < p->n; i++) {
            int32_t l0, l1;
            CHECK_OK(sched_plan_layers_of(p, p->a[i].device, p->k - 1, &l0, &l1, &err), &err);
            CHECK(l1 - l0 == p->a[i].w);
        }
        CHECK(sched_plan_layers_of(p, 0, 0, &(int32_t){0}, &(int32_t){0}, &err) == LARES_ENOTFOUND);
        CHECK(sched_plan_layers_of(p, 3, p->k, &(int32_t){0}, &(int32_t){0}, &err) == LARES_ERANGE);
        sched_plan_free(p);
    }
    /* two devices marked head */
    o.head = -1;
    devs[1].head = devs[2].head = true;
    CHECK(sched_plan_make(m, devs, 8, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'d1'") && strstr(err.msg, "'d2'"), "%s", err.msg);
    devs[1].head = devs[2].head = false;
    /* more devices than layers */
    sched_model *tiny = uniform_model(3);
    CHECK_OK(sched_plan_make(tiny, devs, 8, &o, &p, &err), &err);
    if (p != NULL) {
        CHECK(p->n <= 3);
        sched_plan_free(p);
    }
    o.placement = SCHED_EVEN;
    CHECK(sched_plan_make(tiny, devs, 8, &o, &p, &err) == LARES_ERANGE);
    CHECKF(strstr(err.msg, "8 devices for 3 layers") != NULL, "%s", err.msg);
    model_free_test(tiny);
    /* the baselines: even, memory-proportional, single best device */
    o.placement = SCHED_EVEN;
    CHECK_OK(sched_plan_make(m, devs, 3, &o, &p, &err), &err);
    if (p != NULL) {
        CHECK(p->n == 3 && p->k == 1 && p->a[0].w == 4 && p->a[1].w == 4 && p->a[2].w == 4);
        sched_plan_free(p);
    }
    o.placement = SCHED_MEMORY;
    devs[0].ram_avail_bytes = 3000 * MB;
    devs[1].ram_avail_bytes = 1000 * MB;
    devs[2].ram_avail_bytes = 2000 * MB; /* shares of 12 by 3:1:2 less the reserve */
    CHECK_OK(sched_plan_make(m, devs, 3, &o, &p, &err), &err);
    if (p != NULL) {
        CHECKF(p->a[0].w == 6 && p->a[1].w == 2 && p->a[2].w == 4, "memory split %d %d %d",
               p->a[0].w, p->a[1].w, p->a[2].w);
        sched_plan_free(p);
    }
    o.placement = SCHED_SINGLE;
    CHECK_OK(sched_plan_make(m, devs, 8, &o, &p, &err), &err);
    if (p != NULL) {
        CHECK(p->n == 1 && p->a[0].device == 3);
        sched_plan_free(p);
    }
    /* bad input */
    o.placement = SCHED_HALDA;
    devs[4].mem_bw_Bps = -1;
    CHECK(sched_plan_make(m, devs, 8, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "'d4'") && strstr(err.msg, "bandwidth"), "%s", err.msg);
    devs[4].mem_bw_Bps = 1e10;
    snprintf(devs[4].name, sizeof devs[4].name, "d0");
    CHECK(sched_plan_make(m, devs, 8, &o, &p, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "two devices are named 'd0'") != NULL, "%s", err.msg);
    CHECK(sched_plan_make(m, devs, 0, &o, &p, &err) == LARES_EINVAL);
    model_free_test(m);
}

/* the ring order: with pairwise links, the cheapest cycle (head first) unless kept */
static void test_ring_order(void) {
    lares_error err = {0};
    sched_model *m = uniform_model(12);
    sched_device devs[3];
    for (int i = 0; i < 3; i++) {
        random_device(&devs[i], i);
        devs[i].gpu = SCHED_GPU_NONE;
        devs[i].os = SCHED_OS_LINUX;
        devs[i].ram_avail_bytes = 2000 * MB;
        devs[i].cpu_flops.other = 1e11;
        devs[i].mem_bw_Bps = 2e9; /* slow enough that every device is worth its hops */
    }
    /* d0 -> d1 -> d2 -> d0 costs 3 slow hops; d0 -> d2 -> d1 -> d0 three fast ones */
    sched_link links[6] = {
        {0, 1, {0.050, 1e9}}, {1, 2, {0.050, 1e9}}, {2, 0, {0.050, 1e9}},
        {0, 2, {0.001, 1e9}}, {2, 1, {0.001, 1e9}}, {1, 0, {0.001, 1e9}},
    };
    sched_opts o = sched_opts_default();
    o.n_ctx = 256;
    o.head = 0;
    o.links = links;
    o.n_links = 6;
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_make(m, devs, 3, &o, &p, &err), &err);
    if (p != NULL) {
        CHECKF(p->n == 3 && p->a[1].device == 2 && p->a[2].device == 1, "order %zu %zu",
               p->a[1].device, p->a[2].device);
        CHECK(fabs(p->a[0].t_net_s - 0.001 - 1024 * 2048.0 * 4 / 1e9 / 1024) < 1e-9);
        sched_plan_free(p);
    }
    /* kept: the slow laps make dropping worth it, and what stays keeps its order */
    o.keep_order = true;
    CHECK_OK(sched_plan_make(m, devs, 3, &o, &p, &err), &err);
    if (p != NULL) {
        CHECK(p->a[0].device == 0);
        for (size_t i = 1; i < p->n; i++) {
            CHECK(p->a[i].device > p->a[i - 1].device);
        }
        sched_plan_free(p);
    }
    model_free_test(m);
}

/* the size the issue asks to solve in well under a second (timed in bench/, not here) */
static void test_eight_devices_eighty_layers(void) {
    lares_error err = {0};
    sched_model *m = NULL;
    CHECK_OK(sched_model_from_shape("llama3-70b:q4_k_m", &m, &err), &err);
    if (m == NULL) {
        return;
    }
    sched_device devs[8];
    for (int i = 0; i < 8; i++) {
        random_device(&devs[i], i);
        devs[i].ram_avail_bytes = (uint64_t)logu(2e9, 12e9);
        if (devs[i].gpu == SCHED_GPU_CUDA) {
            devs[i].vram_avail_bytes = (uint64_t)logu(4e9, 12e9);
        }
        if (devs[i].gpu == SCHED_GPU_METAL) {
            devs[i].vram_avail_bytes = devs[i].ram_avail_bytes;
        }
        devs[i].cpu_flops.other = logu(2e11, 1e12);
        devs[i].mem_bw_Bps = logu(2e10, 6e10);
    }
    sched_opts o = sched_opts_default();
    o.n_ctx = 4096;
    o.net_default = (sched_hop){3e-3, 40e6};
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_make(m, devs, 8, &o, &p, &err), &err);
    if (p != NULL) {
        CHECK_OK(sched_plan_validate(p, m, devs, 8, &o, &err), &err);
        printf("8 devices, 80 layers: %.0f ms/token, k=%d, %zu devices kept, %d ILPs\n",
               p->t_token_s * 1e3, p->k, p->n, p->ilp_solved);
        sched_plan_free(p);
    }
    sched_model_free(m);
}

int main(void) {
    test_against_brute_force();
    test_objective_matches_model();
    test_infeasible();
    test_corner_cases();
    test_ring_order();
    test_eight_devices_eighty_layers();
    return check_finish("sched_solver");
}
