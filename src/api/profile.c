/*
 * lares_profile (include/lares.h): this device's profile, its CPU rates
 * calibrated on real windows of the model when one is given (calibrate.c
 * runs them; sched fits the latency model to them).
 */
#include "api/api.h"
#include "gpu/gpu.h"
#include "sched/sched.h"

#include <math.h>

/* The GPU part of the profile: a CUDA device measured by the gpu module's
 * profiler (docs/gpu.md) -- its free memory, its best mat-vec bandwidth, and
 * per weight type the FLOP/s of its mat-vec (2 per weight at its measured
 * bytes per second; types without a device kernel at the slowest of them).
 * false without a usable device (or in a build without CUDA). */
static bool probe_gpu(sched_device *d, void *user) {
    (void)user;
    uint64_t vfree = 0;
    lares_error e = {0};
    gpu_est_rates r = gpu_est_rates_default();
    if (gpu_cuda_probe(d->gpu_name, sizeof d->gpu_name, &vfree, &e) != LARES_OK ||
        gpu_cuda_measure(&r, &e) != LARES_OK) {
        return false;
    }
    d->gpu = SCHED_GPU_CUDA;
    d->vram_avail_bytes = vfree;
    d->gpu_mem_bw_Bps = r.gpu_bw_Bps;
    memset(&d->gpu_flops, 0, sizeof d->gpu_flops);
    double slowest = 0;
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
        if (r.gpu_Bps_type[t] > 0) {
            const double per_byte = 2.0 * 256 / (double)quant_row_bytes(t, 256);
            d->gpu_flops.by_type[t] = per_byte * r.gpu_Bps_type[t];
            slowest = slowest == 0 ? d->gpu_flops.by_type[t] : fmin(slowest, d->gpu_flops.by_type[t]);
        }
    }
    d->gpu_flops.other = slowest;
    return slowest > 0;
}

lares_profile_opts lares_profile_opts_default(void) {
    lares_profile_opts o;
    memset(&o, 0, sizeof o);
    o.budget_ms = 2000;
    return o;
}

lares_status lares_profile(const lares_profile_opts *o, char **json_out, lares_error *err) {
    lares_profile_opts def = lares_profile_opts_default();
    if (o == NULL) {
        o = &def;
    }
    sched_profile_opts po = sched_profile_opts_default();
    po.disk_path = o->model_path;
    po.cache_dir = o->cache_dir;
    po.name = o->name;
    po.refresh = o->refresh;
    po.n_threads = o->n_threads;
    po.budget_ms = o->budget_ms;
    if (o->model_path != NULL && !o->no_calibrate) {
        po.run_windows = api_run_windows;
    }
    po.gpu_probe = probe_gpu;
    sched_device d;
    sched_profile_info info;
    lares_status st = sched_profile_run(&po, &d, &info, err);
    if (st != LARES_OK) {
        return st;
    }
    return sched_profile_to_json(&d, &info, json_out, err);
}
