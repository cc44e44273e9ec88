/*
 * How long Halda takes to plan: 8 devices and 80 layers (Llama-3-70B Q4_K_M),
 * the size the issue asks to solve in under a second, over seeded random
 * device sets (CPU and memory figures of phones to desktops, some with CUDA
 * GPUs, some Macs with Metal), with the head given (a ring) and free (lares
 * plan without a head). Prints the median and worst wall time per plan.
 *
 *   ninja -C build bench_sched && build/bench/bench_sched [instances]
 */
#include "sched/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static double logu(double lo, double hi) {
    return lo * pow(hi / lo, urand());
}

static void device(sched_device *d, int i) {
    char name[16];
    snprintf(name, sizeof name, "dev%d", i);
    sched_device_init(d, name);
    d->cores = 8;
    d->cpu_flops.other = logu(1e11, 1e12);
    d->mem_bw_Bps = logu(2e10, 6e10);
    d->ram_avail_bytes = (uint64_t)logu(1.5e9, 12e9);
    d->disk_seq_Bps = logu(3e8, 3.5e9);
    d->disk_rand_Bps = d->disk_seq_Bps / 3;
    double r = urand();
    if (r < 0.3) {
        d->gpu = SCHED_GPU_CUDA;
        d->vram_avail_bytes = (uint64_t)logu(4e9, 12e9);
        d->gpu_flops.other = logu(5e12, 2e13);
        d->gpu_mem_bw_Bps = logu(2e11, 6e11);
    } else if (r < 0.45) {
        d->os = SCHED_OS_MACOS;
        d->gpu = SCHED_GPU_METAL;
        d->vram_avail_bytes = d->ram_avail_bytes;
        d->gpu_flops.other = 1.3e12;
        d->gpu_mem_bw_Bps = d->mem_bw_Bps;
    } else if (r < 0.7) {
        d->os = SCHED_OS_ANDROID;
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int instances = argc > 1 ? atoi(argv[1]) : 20;
    if (instances < 1 || instances > 1000) {
        fprintf(stderr, "usage: bench_sched [instances 1..1000]\n");
        return 2;
    }
    lares_error err = {0};
    sched_model *m = NULL;
    if (sched_model_from_shape("llama3-70b:q4_k_m", &m, &err) != LARES_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double *t = calloc((size_t)instances, sizeof *t);
    for (int pinned = 1; pinned >= 0; pinned--) {
        long ilps = 0;
        double worst_T = 0;
        int n_ok = 0, infeasible = 0;
        for (int i = 0; i < instances; i++) {
            sched_device devs[8];
            for (int j = 0; j < 8; j++) {
                device(&devs[j], j);
            }
            sched_opts o = sched_opts_default();
            o.n_ctx = 4096;
            o.head = pinned ? 0 : -1;
            o.net_default = (sched_hop){logu(1e-3, 1e-2), logu(10e6, 100e6)};
            sched_plan *p = NULL;
            lares_status st = sched_plan_make(m, devs, 8, &o, &p, &err);
            if (st == LARES_ERANGE) { /* a head too small for the output matrix: no plan */
                infeasible++;
                continue;
            }
            if (st != LARES_OK) {
                fprintf(stderr, "instance %d: %s\n", i, err.msg);
                return 1;
            }
            t[n_ok++] = p->solve_s;
            ilps += p->ilp_solved;
            worst_T = fmax(worst_T, p->t_token_s);
            sched_plan_free(p);
        }
        if (n_ok == 0) {
            fprintf(stderr, "no instance had a plan\n");
            return 1;
        }
        qsort(t, (size_t)n_ok, sizeof *t, cmp);
        printf("8 devices, 80 layers, head %s: %d plans (%d instances infeasible), median %.1f ms, "
               "worst %.1f ms, %.0f ILPs per plan\n",
               pinned ? "given" : "free", n_ok, infeasible, t[n_ok / 2] * 1e3, t[n_ok - 1] * 1e3,
               (double)ilps / n_ok);
    }
    free(t);
    sched_model_free(m);
    return 0;
}
