/*
 * sched internals shared by the files of this folder: the per-device, per-layer
 * costs one planning call works from (computed once from the model, the
 * devices and the options), and the integer program of one k.
 */
#ifndef LARES_SCHED_IMPL_H
#define LARES_SCHED_IMPL_H

#include "sched/sched.h"

/* What one planning call knows, all derived from (model, devices, options). */
typedef struct sched_costs {
    const sched_model *m;     /* borrowed */
    const sched_device *devs; /* borrowed, n */
    size_t n;
    const sched_opts *o; /* borrowed */
    int32_t L;
    int32_t n_past;
    uint64_t kv_bytes;        /* KV of one layer at n_ctx (memory limits) */
    uint64_t kv_past_bytes;   /* KV of one layer at the n_past + 1 positions the predicted
                                 token touches: what the executor's budget takes off then */
    double *t_cpu;            /* owned, n x L: seconds to run layer l on device d's CPU */
    double *t_gpu;            /* owned, n x L: on its GPU (0 without one) */
    uint64_t *bp;             /* owned, L: b' = weights + KV of layer l */
    uint64_t *bp_heavy;       /* owned, L + 1: sums of the j heaviest b' (safe memory bounds) */
    uint64_t *b_heavy;        /* owned, L + 1: sums of the j heaviest weight sizes */
    double avg_b, avg_bp;     /* mean weight bytes and b' of a layer */
    double *avg_tc, *avg_tg;  /* owned, n */
    uint64_t *ram_limit;      /* owned, n: RAM the model may use when the device is not head */
    uint64_t *vram_limit;     /* owned, n */
    double *disk_Bps;         /* owned, n: the disk figure of its OS */
    double *t_head;           /* owned, n: kappa when the device is the head */
    int32_t *gpu_trim;        /* owned, n: GPU layers taken off the mean-layer VRAM bound after
                                 a solution's real layers overflowed it (halda.c) */
    double *quota_u;          /* owned, n: share of full speed a CPU quota allows its threads
                                 (quota / threads; >= 1: no quota) */
    double *quota_P;          /* owned, n: the quota's period in seconds */
    double *read_cpu;         /* owned, n: CPU seconds per byte streamed (the prefetch thread's
                                 kernel work; spent from a CPU quota), 0: not known */
    uint64_t head_bytes;      /* the head's output matrix and norm (a unit of its cycle) */
    uint64_t max_layer_bytes; /* the largest layer's weights */
    uint64_t part_max;        /* the largest part of a layer: units join parts up to it */
} sched_costs;

/* What the executor does with a cycle of units (exec/plan.c, replayed). */
typedef struct sched_stream {
    bool streams;          /* the cycle does not fit the weight budget */
    bool too_small;        /* the budget is below the largest unit: the executor refuses */
    uint64_t largest;      /* the largest unit */
    uint64_t pinned_bytes; /* units kept resident */
    uint64_t stream_bytes; /* read from disk every token */
    uint64_t window_bytes; /* streamed bytes that may be in memory at once */
} sched_stream;

/* The executor's plan for units unit[0..n) (cycle order; out_unit: the
 * output matrix's index, -1 when none) under a weight budget; fixed_bytes
 * more must fit beside them for "fits" (the head's embedding). streamed (n,
 * may be NULL) receives which units stream. */
void sched_stream_plan(const sched_costs *c, const uint64_t *unit, int32_t n_units,
                       int32_t out_unit, uint64_t fixed_bytes, uint64_t budget,
                       sched_stream *out, bool *streamed);
/* Wall seconds of a burst of b seconds of full-speed compute on device d under
 * its CPU quota (b itself without one). */
double sched_quota_wall(const sched_costs *c, size_t d, double b);

lares_status sched_costs_create(const sched_model *m, const sched_device *devs, size_t n,
                                const sched_opts *o, sched_costs **out, lares_error *err);
void sched_costs_free(sched_costs *c);

/* Adds one tensor to the layer its name says (blk.N.*) or to the head. */
lares_status sched_model_account(sched_model *m, const char *name, uint32_t type, uint32_t n_dims,
                                 const int64_t *ne, uint64_t nbytes, int32_t n_expert,
                                 int32_t n_used, bool tied, lares_error *err);

/* The most j with sums[j] <= limit (sums: L + 1 non-decreasing prefix sums). */
int32_t sched_most_layers(const uint64_t *sums, int32_t L, uint64_t limit);

/* RAM device d may give the model when `head` is the head. */
uint64_t sched_ram_of(const sched_costs *c, size_t d, size_t head);
bool sched_unified(const sched_device *d);
/* Seconds of the hop from device a to device b (per token, one hidden state). */
lares_status sched_hop_s(const sched_costs *c, size_t a, size_t b, double *out, lares_error *err);
sched_case sched_overflow_case(const sched_device *d);

/* The plan shell: n ring slots, n_devices offered. */
lares_status sched_plan_alloc(size_t n_ring, size_t n_devices, sched_plan **out, lares_error *err);
/* Fills offsets from w (ring order) and evaluates. */
lares_status sched_plan_finish(sched_plan *p, const sched_costs *c, lares_error *err);
lares_status sched_evaluate_costs(sched_plan *p, const sched_costs *c, lares_error *err);
lares_status sched_validate_costs(const sched_plan *p, const sched_costs *c, lares_error *err);

/* ---- one integer program: fixed k, fixed device set and cases ---- */

typedef struct sched_ilp_dev {
    size_t device; /* index into the devices */
    bool overflow; /* the case: true = overflows its RAM */
    int32_t w, n;  /* solution */
} sched_ilp_dev;

typedef struct sched_ilp {
    const sched_costs *c;
    int32_t k;
    size_t head;
    size_t n;
    sched_ilp_dev *d; /* borrowed, n, ring order */
    double hops_s;    /* sum of the ring's hop times of one round */
    double objective; /* the predicted latency of the solution (linear model) */
} sched_ilp;

/* Per-device bounds of w under the device's case (exact: see docs). */
typedef struct sched_wrange {
    int32_t lo, hi;
    int32_t nmax;  /* GPU layers at most */
    int32_t F;     /* floor(RAM / (k b')): CPU layers that fit */
    int32_t kvcap; /* floor(RAM / (k kv)): CPU layers whose KV fits */
} sched_wrange;

sched_wrange sched_range_of(const sched_costs *c, size_t device, size_t head, int32_t k,
                            bool overflow);

/* Solves one ILP with GLPK. LARES_ERANGE when it has no feasible point. */
lares_status sched_ilp_solve(sched_ilp *p, lares_error *err);

/* Halda and the baselines (halda.c, baseline.c). */
lares_status sched_halda(const sched_costs *c, size_t head, sched_plan **out, lares_error *err);
lares_status sched_baseline(const sched_costs *c, sched_placement pl, size_t head, sched_plan **out,
                            lares_error *err);
/* The head the options ask for (or the cheapest). */
lares_status sched_pick_head(const sched_costs *c, size_t *head, lares_error *err);

/* out[i] >= 1 layers in proportion to weight[i], summing to total (>= n):
 * floors, then the largest remainders. */
void sched_split_proportional(const double *weight, size_t n, int32_t total, int32_t *out);

/* ---- the profiler's parts ---- */
/* FLOP/s per type (compute- and memory-bound) and read bandwidth, on n_threads. */
lares_status sched_profile_cpu(sched_device *d, int32_t n_threads, uint32_t budget_ms,
                               size_t big_bytes, lares_error *err);
/* Disk throughput on `file`, or on a temporary file in `dir` when file is NULL:
 * the disk figures of d, and disk_direct, disk_test_bytes and disk_note of info. */
lares_status sched_profile_disk(const char *file, const char *dir, uint32_t budget_ms,
                                sched_device *d, sched_profile_info *info, lares_error *err);
/* Direct sequential reads (O_DIRECT, F_NOCACHE on macOS) from the start of
 * `path` (of `size` bytes) as the executor streams (mem_direct_read of 32 MiB units: 4 MiB
 * requests, several in flight) for up to slice_s, one pass at most (a second
 * pass would find the disk's own caches warm): bytes per second, *bytes read.
 * 0 with a note in note[cap] where the file system refuses direct I/O. */
double sched_disk_direct_rate(const char *path, uint64_t size, double slice_s, uint64_t *bytes,
                              char *note, size_t cap);
void sched_probe_cpu_model(const char *root, char *out, size_t cap);
lares_status sched_probe_memory_macos(sched_device *d, lares_error *err);

/* ---- JSON (jansson objects; json_device.c) ---- */
struct json_t;
struct json_t *sched_device_json(const sched_device *d); /* NULL when out of memory */
/* Dumps and releases o into lares_alloc'd text. */
lares_status sched_json_text(struct json_t *o, char **out, lares_error *err);


/* ---- shared by the profilers (profile_cpu.c, profile_disk.c) ---- */

static inline double sched_now_s(void) {
    return (double)lares_now_ns() / 1e9;
}

/* Marsaglia's xorshift64 (13, 7, 17): test data and random offsets, not statistics */
static inline uint64_t sched_xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

#endif /* LARES_SCHED_IMPL_H */
