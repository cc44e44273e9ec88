/*
 * The paper check: the six home devices of the prima.cpp paper (Li et al.
 * 2025, "prima.cpp: Speeding up 70B-scale LLM inference on low-resource
 * everyday home clusters", device table) planned for Llama-3 8B and 70B and
 * Qwen2.5 14B and 32B (Meta published no Llama-3 of 14B or 32B; see
 * src/sched/shapes.c) in Q4_K_M, with what the paper reports and what Halda
 * must do:
 *   - 8B: everything on the desktop's GPU, every other device dropped;
 *   - GPUs fill first: no layer runs on a CPU while a GPU could take it;
 *   - then fast disks: only devices with fast disks re-read layers from disk,
 *     the slow-disk devices get no more than their memory holds (or nothing);
 *   - 70B: fits no device's memory, and the predicted token latency is under
 *     twice the 674 ms/token the paper measured (on its devices D1-D4).
 *
 * Memory and disk figures are the paper's (the issue lists them). Compute and
 * bandwidth figures are public specifications of the chips, used as follows:
 * memory bandwidth = 70 % of the theoretical peak (streaming reads reach
 * 60-80 % of it), dot-product FLOP/s = half the FP32 FMA peak (quantized dot
 * products spend about half their instructions unpacking blocks).
 *   Apple M1 (Apple, "Apple unleashes M1", 2020): LPDDR4X-4266 on 128 bits =
 *     68.25 GB/s; 8-core GPU 2.6 TFLOPS; CPU 4 Firestorm cores x 4 FMA pipes x
 *     4 lanes x 2 x 3.2 GHz = 410 GFLOPS (+ efficiency cores, ignored).
 *   Intel Core i9-11900H laptop (Intel ARK): 8 cores, DDR4-3200 x 2 = 51.2 GB/s;
 *     AVX2: 2 FMA x 8 lanes x 2 x 8 cores x 4.0 GHz = 1.02 TFLOPS.
 *   NVIDIA RTX 3070 Laptop GPU (NVIDIA specifications): 8 GB GDDR6, 448 GB/s,
 *     about 16 TFLOPS FP32 at its boost clock.
 *   Intel Core i9-12900K desktop, 16 cores (Intel ARK): DDR4-3200 x 2 = 51.2 GB/s;
 *     8 P-cores x 32 FLOPs x 4.9 GHz + 8 E-cores x 16 x 3.7 GHz = 1.73 TFLOPS.
 *   NVIDIA RTX 2080 Ti (NVIDIA specifications): 11 GB GDDR6, 616 GB/s, 13.45 TFLOPS.
 *   HiSilicon Kirin 9000 (Huawei): 1 x A77 3.13 GHz + 3 x A77 2.54 GHz + 4 x A55;
 *     LPDDR5-5500 x 64 bits = 44 GB/s; A77: 2 x 128-bit FMA = 16 FLOPs/cycle:
 *     16 x (3.13 + 3 x 2.54) GHz = 172 GFLOPS (A55s ignored).
 *   MediaTek Dimensity 8100 (MediaTek): 4 x A78 2.85 GHz + 4 x A55; LPDDR5-6400 x
 *     64 bits = 51.2 GB/s; 16 x 4 x 2.85 = 182 GFLOPS.
 *   Intel Core i5-1030NG7, MacBook Air 2020 (Intel ARK): 4 cores, LPDDR4X-3733 x
 *     128 bits = 59.7 GB/s; 32 x 4 x 3.5 GHz = 448 GFLOPS; no Metal on Intel Macs
 *     in prima.cpp.
 * The network is home Wi-Fi: 3 ms and 300 Mbit/s per hop (the paper gives no
 * per-hop figure; prima.cpp's own model leaves the network out).
 */
#include "check.h"
#include "sched/sched.h"

#include <math.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

enum { M1 = 0, LAPTOP, DESKTOP, MATE40, HONOR, MACAIR, N_DEV };

static void cpu(sched_device *d, double peak_flops, double peak_bw) {
    d->cpu_flops.other = 0.5 * peak_flops;
    d->mem_bw_Bps = 0.7 * peak_bw;
}

static void gpu(sched_device *d, sched_gpu_backend b, double vram_gib, double peak_flops,
                double peak_bw) {
    d->gpu = b;
    d->vram_avail_bytes = (uint64_t)(vram_gib * GIB);
    d->gpu_flops.other = 0.5 * peak_flops;
    d->gpu_mem_bw_Bps = 0.7 * peak_bw;
}

static void devices(sched_device *d) {
    const char *names[N_DEV] = {"mac-m1", "laptop", "desktop", "mate40pro", "honor-pad", "mac-air"};
    const double avail_gib[N_DEV] = {2.4, 4.1, 9.7, 1.9, 5.1, 6.8};
    const double disk_gbs[N_DEV] = {0.72, 2.98, 3.17, 1.37, 2.00, 0.39};
    for (int i = 0; i < N_DEV; i++) {
        sched_device_init(&d[i], names[i]);
        d[i].cores = 8;
        d[i].ram_avail_bytes = (uint64_t)(avail_gib[i] * GIB);
        d[i].disk_seq_Bps = disk_gbs[i] * 1e9;
        d[i].disk_rand_Bps = disk_gbs[i] * 1e9;
    }
    d[M1].os = SCHED_OS_MACOS;
    cpu(&d[M1], 410e9, 68.25e9);
    /* Metal shares the 2.4 GiB the device can give */
    gpu(&d[M1], SCHED_GPU_METAL, 2.4, 2.6e12, 68.25e9);
    cpu(&d[LAPTOP], 1.02e12, 51.2e9);
    gpu(&d[LAPTOP], SCHED_GPU_CUDA, 8.0, 16e12, 448e9);
    d[DESKTOP].cores = 16;
    cpu(&d[DESKTOP], 1.73e12, 51.2e9);
    gpu(&d[DESKTOP], SCHED_GPU_CUDA, 11.0, 13.45e12, 616e9);
    d[MATE40].os = SCHED_OS_ANDROID;
    cpu(&d[MATE40], 172e9, 44e9);
    d[HONOR].os = SCHED_OS_ANDROID;
    cpu(&d[HONOR], 182e9, 51.2e9);
    d[MACAIR].os = SCHED_OS_MACOS;
    d[MACAIR].cores = 4;
    cpu(&d[MACAIR], 448e9, 59.7e9);
}

static sched_opts paper_opts(void) {
    sched_opts o = sched_opts_default();
    o.n_ctx = 1024;
    o.net_default = (sched_hop){0.003, 300e6 / 8};
    return o;
}

static void show(const char *what, const sched_plan *p, const sched_device *d) {
    printf("%s: %.1f ms/token, k=%d, solved in %.1f ms (%d ILPs)\n", what, p->t_token_s * 1e3, p->k,
           p->solve_s * 1e3, p->ilp_solved);
    for (size_t i = 0; i < p->n; i++) {
        const sched_assign *a = &p->a[i];
        printf("  %-10s w=%-3d gpu=%-3d %-21s cpu %.1f gpu %.1f disk wait %.1f (reads %.2f GB in "
               "%.1f) net %.1f ms\n",
               d[a->device].name, a->w, a->n_gpu, sched_case_name(a->mem_case), a->t_cpu_s * 1e3,
               a->t_gpu_s * 1e3, a->t_disk_s * 1e3, (double)a->disk_read_bytes / 1e9,
               a->t_read_s * 1e3, a->t_net_s * 1e3);
    }
}

static const sched_assign *assign_of(const sched_plan *p, int dev) {
    for (size_t i = 0; i < p->n; i++) {
        if (p->a[i].device == (size_t)dev) {
            return &p->a[i];
        }
    }
    return NULL;
}

/* GPUs fill first: when any layer runs on a CPU, no GPU of the ring can take one
 * more layer per window -- k more layers, one in each round -- (and no GPU
 * outside the ring stands idle) */
static void check_gpus_first(const sched_plan *p, const sched_device *d, const sched_model *m,
                             const sched_opts *o, const char *what) {
    int32_t cpu_layers = 0;
    for (size_t i = 0; i < p->n; i++) {
        cpu_layers += (p->a[i].w - p->a[i].n_gpu) * p->k;
    }
    if (cpu_layers == 0) {
        return;
    }
    double bp = 0;
    for (int l = 0; l < m->n_layer; l++) {
        bp += (double)(m->layers[l].weight_bytes +
                       sched_layer_kv_bytes(m, o->n_ctx, o->kv_elem_bytes));
    }
    bp /= m->n_layer;
    for (int g = 0; g < N_DEV; g++) {
        if (d[g].gpu != SCHED_GPU_CUDA) {
            continue;
        }
        const sched_assign *a = assign_of(p, g);
        double room = (double)d[g].vram_avail_bytes - (double)o->vram_reserve_bytes -
                      (a ? (double)a->vram_bytes : 0.0);
        CHECKF(a != NULL && room < p->k * bp,
               "%s: %s's GPU has room for %.1f more layers (k=%d) while %d "
               "layers run on CPUs",
               what, d[g].name, room / bp, p->k, cpu_layers);
    }
}

/* then fast disks: a device re-reads from disk only if its disk is one of the
 * fast ones (>= 2 GB/s); the slow-disk devices hold at most what fits */
static void check_fast_disks(const sched_plan *p, const sched_device *d, const char *what) {
    for (size_t i = 0; i < p->n; i++) {
        const sched_assign *a = &p->a[i];
        if (a->disk_read_bytes > 0) {
            CHECKF(d[a->device].disk_seq_Bps >= 2e9,
                   "%s: %s (disk %.2f GB/s) re-reads %.2f GB "
                   "per token",
                   what, d[a->device].name, d[a->device].disk_seq_Bps / 1e9,
                   (double)a->disk_read_bytes / 1e9);
        }
    }
    const int slow[3] = {M1, MATE40, MACAIR};
    for (int s = 0; s < 3; s++) {
        const sched_assign *a = assign_of(p, slow[s]);
        CHECKF(a == NULL || a->disk_read_bytes == 0, "%s: slow-disk %s reads %.2f GB from disk",
               what, d[slow[s]].name, a ? (double)a->disk_read_bytes / 1e9 : 0.0);
    }
}

static sched_plan *plan(const char *shape, const sched_device *d, size_t n, sched_model **mout) {
    lares_error err = {0};
    sched_model *m = NULL;
    CHECK_OK(sched_model_from_shape(shape, &m, &err), &err);
    if (m == NULL) {
        return NULL;
    }
    sched_opts o = paper_opts();
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_make(m, d, n, &o, &p, &err), &err);
    if (p != NULL) {
        show(shape, p, d);
        CHECK_OK(sched_plan_validate(p, m, d, n, &o, &err), &err);
    }
    *mout = m;
    return p;
}

int main(void) {
    sched_device d[N_DEV];
    devices(d);
    sched_opts o = paper_opts();
    sched_model *m;

    /* 8B: the desktop's GPU alone */
    sched_plan *p = plan("llama3-8b:q4_k_m", d, N_DEV, &m);
    if (p != NULL) {
        CHECKF(p->n == 1 && p->a[0].device == DESKTOP, "8B ring of %zu devices", p->n);
        CHECK(p->a[0].n_gpu * p->k == 32);
        for (int i = 0; i < N_DEV; i++) {
            CHECK(p->dropped[i] == (i != DESKTOP));
        }
        sched_plan_free(p);
    }
    sched_model_free(m);

    const char *const shapes[] = {"qwen2.5-14b:q4_k_m", "qwen2.5-32b:q4_k_m", "llama3-70b:q4_k_m"};
    for (int s = 0; s < 3; s++) {
        p = plan(shapes[s], d, N_DEV, &m);
        if (p == NULL) {
            sched_model_free(m);
            continue;
        }
        check_gpus_first(p, d, m, &o, shapes[s]);
        check_fast_disks(p, d, shapes[s]);
        if (s == 2) {
            /* 70B fits no device: 42.5 GB against at most 9.7 + 11 GiB */
            uint64_t bytes = sched_model_weight_bytes(m);
            for (int i = 0; i < N_DEV; i++) {
                CHECK((double)bytes > (double)d[i].ram_avail_bytes + (double)d[i].vram_avail_bytes);
            }
            CHECKF(p->t_token_s < 2 * 0.674, "70B predicted %.0f ms/token", p->t_token_s * 1e3);
            /* and Halda beats the baselines the paper compares with */
            sched_opts ob = o;
            for (int pl = SCHED_EVEN; pl <= SCHED_SINGLE; pl++) {
                lares_error err = {0};
                sched_plan *b = NULL;
                ob.placement = (sched_placement)pl;
                if (sched_plan_make(m, d, N_DEV, &ob, &b, &err) == LARES_OK) {
                    printf("  baseline %-6s %.0f ms/token\n", sched_placement_name(ob.placement),
                           b->t_token_s * 1e3);
                    CHECKF(p->t_token_s <= b->t_token_s, "halda %.0f vs %s %.0f ms",
                           p->t_token_s * 1e3, sched_placement_name(ob.placement),
                           b->t_token_s * 1e3);
                    sched_plan_free(b);
                } else {
                    printf("  baseline %-6s infeasible: %s\n", sched_placement_name(ob.placement),
                           err.msg);
                }
            }
        }
        sched_plan_free(p);
        sched_model_free(m);
    }

    /* The paper's 674 ms ran on D1-D4 (37 GiB of RAM + VRAM for 42.5 GB): there
     * the devices stream part of their shares from disk every token. The model
     * overlaps those reads with compute and with the rest of the ring (k = 2:
     * two gaps a token), which brings it from 2.0 s (reads added to compute, as
     * scheduling.md prices them) to about 1.4 s, still 2x the paper's figure
     * (not explained here: the device figures are public specifications, not
     * measurements). Printed, and held to the rules that do not depend on it. */
    p = plan("llama3-70b:q4_k_m", d, 4, &m);
    if (p != NULL) {
        check_gpus_first(p, d, m, &o, "70B on D1-D4");
        CHECK(p->t_token_s < 4 * 0.674);
        sched_plan_free(p);
    }
    sched_model_free(m);
    return check_finish("sched_paper");
}
