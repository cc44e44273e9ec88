/*
 * sched: deciding which device runs which layers.
 *
 * Owns: the device profile (what a device can do: FLOP/s per weight type,
 * memory bandwidth, free memory, disk throughput, GPU, network hop figures),
 * its measurement on this machine and its JSON form; the planning description
 * of a model (bytes and FLOPs per layer and per weight type, KV bytes, head
 * costs) from a GGUF file or a named public shape; the latency model of
 * ../shared/docs/scheduling.md; the Halda solver (one integer program per
 * number of rounds k, solved with GLPK) and the baseline placements (even,
 * memory-proportional, best single device); and the plan: per device its
 * window size w, GPU layers n, the layer ranges it owns in each round, the
 * predicted times, validated before anyone uses it. docs/scheduling-impl.md
 * explains the formulas and the choices.
 *
 * Knows nothing about sockets (the ring measures hops and hands the figures
 * in), kernels' internals (the profiler only times quant_traits_of()->vec_dot)
 * or how layers are executed.
 *
 * Lifetimes: sched_model and sched_plan are plain owned objects (create/free);
 * a plan keeps no pointer to the model or the devices it was made from: it
 * names devices by their index in the array given to sched_plan. Everything
 * here is re-entrant; GLPK is used only inside sched_plan, one problem object
 * per call (its per-thread environment is freed before returning).
 */
#ifndef LARES_SCHED_H
#define LARES_SCHED_H

#include "core/core.h"
#include "gguf/gguf.h"

/* ---- devices ---- */

typedef enum sched_os {
    SCHED_OS_LINUX = 0,
    SCHED_OS_ANDROID,
    SCHED_OS_MACOS,
    SCHED_OS_COUNT
} sched_os;

const char *sched_os_name(sched_os os); /* "linux", "android", "macos" */

typedef enum sched_gpu_backend {
    SCHED_GPU_NONE = 0,
    SCHED_GPU_CUDA,  /* discrete: VRAM separate from RAM */
    SCHED_GPU_METAL, /* unified: GPU layers live in RAM too */
    SCHED_GPU_COUNT
} sched_gpu_backend;

const char *sched_gpu_backend_name(sched_gpu_backend b); /* "none", "cuda", "metal" */

/* FLOP/s by GGUF tensor type; 0 = not known for that type (then `other`
 * applies; 0 there too: the device cannot run that type, an error at plan
 * time naming device and type). */
typedef struct sched_rates {
    double by_type[GGUF_TYPE_COUNT];
    double other;
} sched_rates;

/* One hop of the ring: latency + bytes / bandwidth. latency_s < 0: unknown. */
typedef struct sched_hop {
    double latency_s;
    double bandwidth_Bps; /* bytes per second; > 0 when latency_s >= 0 */
} sched_hop;

typedef struct sched_device {
    char name[64]; /* unique within a device list */
    sched_os os;
    bool head; /* this device must be the ring's head (never dropped) */

    /* CPU */
    int32_t cores;
    int32_t threads;           /* threads the rates were measured with (info) */
    double cpu_quota;          /* cores allowed by a cgroup CPU quota; 0: none (info) */
    char cpu_model[96];        /* info */
    char isa[24];              /* kernel family measured (info) */
    char cpu_flags[160];       /* the CPU's features when measured (quant_cpu_flags; info, part
                                  of the profile's fingerprint) */
    sched_rates cpu_flops;     /* compute-bound rates: weights in cache */
    sched_rates cpu_flops_mem; /* memory-bound rates: weights streamed from RAM (measured;
                                  0 = not measured: the roofline of cpu_flops and mem_bw) */
    double mem_bw_Bps;         /* RAM read bandwidth */

    /* memory */
    uint64_t ram_total_bytes;  /* info (0 unknown) */
    uint64_t ram_avail_bytes;  /* what the device can give without pushing other apps */
    uint64_t swap_avail_bytes; /* counted as memory on Android only (zram) */

    /* storage */
    double disk_seq_Bps;        /* sequential read (used on Linux and Android) */
    double disk_rand_Bps;       /* 4 KiB random read (used on macOS); 0: the sequential figure */
    double disk_stream_Bps;     /* reading as the executor streams (populate in unit-sized
                                   pieces, each released after use); used on Linux and Android
                                   when known (0: the sequential figure) */
    double disk_stream_cpu_Bps; /* bytes streamed per second of the reading thread's CPU time
                                   (page-cache work in the kernel); under a CPU quota it is
                                   spent from the quota; 0: unknown (not priced) */
    double disk_direct_Bps;     /* sequential reads that bypass the page cache as the
                                   executor's direct streaming does (O_DIRECT, 4 MiB requests,
                                   16 in flight): what streaming costs where it reads directly,
                                   else the bound on the two figures above
                                   (sched_disk_stream_Bps); 0: not measured (the file system
                                   refuses direct I/O, or an older profile) */
    double disk_cached_share;   /* share (0..1) of the bytes the sequential and streaming tests
                                   found in the page cache and could not evict: skipped, not
                                   timed (another process maps them); 1: nothing was cold */
    int64_t disk_free_bytes;    /* bytes of the model this device may keep on disk; -1: the whole
                                   model file is there (prima.cpp's assumption) */
    char disk_path[256];        /* where the disk figures were measured (info) */

    /* GPU */
    sched_gpu_backend gpu;
    char gpu_name[64];
    uint64_t vram_avail_bytes; /* Metal: the GPU working-set limit */
    sched_rates gpu_flops;
    double gpu_mem_bw_Bps;

    /* CPU quota (cgroup cpu.cfs_quota_us / cpu.cfs_period_us): the rates above are
     * full speed (per second a thread runs); the model throttles bursts that spend
     * the quota of a period and caps the long-run share (docs/scheduling-impl.md) */
    double cpu_quota_period_s; /* the period; 0: 0.1 s (the kernel's default) */

    /* network: the hop from this device to the next one in the ring */
    sched_hop net_out;

    /* how the CPU rates above were fitted to real layer windows (calibrate.c) */
    struct sched_calibration {
        char model[96];            /* the model whose windows ran ("": not calibrated: the
                                      rates are the micro-benchmarks') */
        uint64_t model_bytes;      /* its file's size */
        double scale;              /* the micro-benchmarks' rates were divided by this */
        double decode_layer_s;     /* full-speed seconds per layer of one generated token */
        double prompt_row_layer_s; /* full-speed seconds per layer per row of a prompt batch */
        int32_t prompt_rows;       /* rows of that batch */
        bool streamed;             /* the windows' weights streamed from disk */
    } cal;
} sched_device;

/* A device with everything unknown: os linux, no GPU, hop unknown, whole model on disk. */
void sched_device_init(sched_device *d, const char *name);

/* How far a cached read may beat a direct one before the planner stops
 * believing it: on a cold disk the kernel's read-ahead read at most 1.2x the
 * rate of 16 MiB direct reads at depth one (docs/performance.md, issue 16);
 * anything faster was a cache answering, which a streamed share will not find.
 * Since profile p5 the direct figure has several reads in flight, so the
 * bound (used only where the executor streams through the mapping) is looser. */
#define SCHED_DIRECT_HEADROOM 1.25
/* Whether the executor streams this device's share with direct reads: its
 * default (--stream-io auto) wherever the file system takes them, which the
 * profile's direct figure says, on Linux and Android without a GPU (a GPU
 * session streams through the mapping; macOS is priced by random reads).
 * (auto also probes the file and streams through the mapping where that read
 * more than 1.25x faster, exec/direct.c: faster than the direct figure the
 * planner then uses, so the plan errs safe.) */
bool sched_disk_streams_direct(const sched_device *d);
/* What streaming a share reads at on a Linux or Android device: the direct
 * figure, measured as the executor reads (sched_disk_streams_direct); else
 * the page cache's streaming figure (else the sequential one), at most
 * SCHED_DIRECT_HEADROOM times the direct figure where the profile has one. */
double sched_disk_stream_Bps(const sched_device *d);

/* The rate a device computes `type` at (by_type, else other); 0 when unknown. */
double sched_rate_of(const sched_rates *r, uint32_t type);

/* ---- the model, as the planner sees it ---- */

/* The parts of a layer the executor streams one by one (model_part: the
 * attention's input and output products, the FFN's input and output). */
#define SCHED_PARTS 4

typedef struct sched_layer {
    uint64_t bytes[GGUF_TYPE_COUNT]; /* weight bytes by tensor type */
    double flops[GGUF_TYPE_COUNT];   /* FLOPs per generated token by weight type */
    uint64_t weight_bytes;           /* sum of bytes[] */
    uint64_t part_bytes[SCHED_PARTS]; /* the same bytes by part (they sum to weight_bytes) */
} sched_layer;

typedef struct sched_model {
    char name[96];
    int32_t n_layer;
    int32_t n_embd;
    int32_t n_vocab;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_ctx_train;
    sched_layer *layers; /* owned, n_layer */
    sched_layer head;    /* token embedding (bytes only: one row is read per token),
                            output norm and output matrix (FLOPs) */
    uint64_t embd_row_bytes;
    uint64_t embd_bytes; /* the token embedding when it is not also the output matrix */
    uint64_t file_bytes; /* the GGUF file, or the sum of tensor bytes for a shape */
} sched_model;

/* The planning description of a GGUF file, from its layer plan
 * (model_plan_make: hyper-parameters and weights as the engine reads them):
 * each layer's weights by type (stacked experts count the n_expert_used a token
 * is routed to in their FLOPs); embedding, output norm and output are the
 * head's. Architectures the engine cannot run are errors. */
lares_status sched_model_from_gguf(const gguf_file *f, sched_model **out, lares_error *err);
lares_status sched_model_from_path(const char *path, sched_model **out, lares_error *err);

/* A public model shape in a quantization mix: "llama3-70b:q4_k_m". Shapes:
 * sched_shape_names(); mixes: model_mix_names(). */
lares_status sched_model_from_shape(const char *spec, sched_model **out, lares_error *err);
const char *sched_shape_names(void);

void sched_model_free(sched_model *m);

/* KV bytes of one layer for n_ctx positions with kv_elem_bytes per value. */
uint64_t sched_layer_kv_bytes(const sched_model *m, int32_t n_ctx, uint32_t kv_elem_bytes);
uint64_t sched_model_weight_bytes(const sched_model *m); /* layers + head */
/* The executor's units of a layer (exec/plan.c): its parts with bytes,
 * consecutive ones joined while together no larger than part_max (a layer
 * described without parts is one unit). Fills unit[0..n), n <= SCHED_PARTS,
 * and returns n. */
int32_t sched_layer_units(const sched_layer *l, uint64_t part_max, uint64_t *unit);

/* ---- planning ---- */

typedef enum sched_placement {
    SCHED_HALDA = 0,
    SCHED_EVEN,   /* L / M layers each (LinguaLinked's baseline) */
    SCHED_MEMORY, /* layers in proportion to RAM + VRAM (exo, llama.cpp RPC) */
    SCHED_SINGLE, /* every layer on the device the model predicts fastest */
    SCHED_PLACEMENT_COUNT
} sched_placement;

const char *sched_placement_name(sched_placement p);
int sched_placement_from_name(const char *name); /* -1 when unknown */

/* The memory case of a device under a plan (scheduling.md). */
typedef enum sched_case {
    SCHED_CASE_FITS = 0,       /* its share stays in memory */
    SCHED_CASE_OVERFLOW,       /* Linux/Android: part re-read from disk (sequential) each token */
    SCHED_CASE_OVERFLOW_MACOS, /* macOS without Metal: random reads */
    SCHED_CASE_OVERFLOW_MACOS_METAL, /* macOS with Metal: unified memory overflows */
    SCHED_CASE_COUNT
} sched_case;

const char *sched_case_name(sched_case c);

/* A hop between two given devices (indices into the device array), overriding
 * both devices' net_out. */
typedef struct sched_link {
    size_t from, to;
    sched_hop hop;
} sched_link;

typedef struct sched_opts {
    sched_placement placement;
    int32_t n_ctx;               /* KV cache length held per layer (memory) */
    int32_t n_past;              /* positions attended to by the predicted token (time);
                                    -1: n_ctx / 2 */
    uint32_t kv_elem_bytes;      /* 2 (F16) or 4 (F32) */
    uint32_t hidden_elem_bytes;  /* bytes per hidden-state value on the wire (4: F32) */
    uint64_t ram_reserve_bytes;  /* the executor's own needs on every device besides KV and
                                    page tables: program and buffers (default 48 MiB) */
    uint64_t vram_reserve_bytes; /* kept free on every discrete GPU (driver context) */
    int32_t head;                /* index of the head device (never dropped); -1: a device
                                    marked head, else Halda chooses (docs) and the baselines
                                    take the device with the cheapest head work */
    const sched_link *links;     /* borrowed; per-pair hops */
    size_t n_links;
    sched_hop net_default;       /* hops neither a link nor net_out describes; latency -1:
                                    none (then such a hop is an error) */
    bool drop_small;             /* Halda: drop devices with a window of <= 1 layer (default) */
    bool keep_order;             /* Halda: keep the devices' order (head first, the rest as given)
                                    instead of choosing the order with the cheapest hops; a ring
                                    whose links are already made sets it */
    bool calibrate_gpu;          /* Halda: the GPU calibration step (default) */
    int32_t max_case_iters;      /* case-assignment iterations per k (default 16) */
    const bool *exclude;         /* borrowed, one per device (NULL: none): devices that must not
                                    be used (failed or left the ring); the head cannot be one */
    int32_t stream_window_units; /* the executor's streaming window in units (exec_opts
                                    window_units; default 2) */
    uint64_t stream_slack_bytes; /* the executor's read-ahead slack (2 x the device's
                                    read-ahead; default 16 MiB) */
    int32_t rounds;              /* Halda: plan with exactly this many rounds k (a divisor
                                    of L; for comparisons); 0: the best k (default) */
} sched_opts;

sched_opts sched_opts_default(void);

/* One device of the ring, in ring order. */
typedef struct sched_assign {
    size_t device;  /* index into the device array given to the planner */
    int32_t w;      /* layers per window */
    int32_t n_gpu;  /* of which on the GPU: the last n_gpu layers of each window */
    int32_t offset; /* first layer of its window in round 0 */
    sched_case mem_case;
    /* predicted, per token (all k rounds): compute (quota throttling included),
     * waiting for disk (what the reads leave after overlapping the rest of the
     * ring and its own compute), hops; t_total_s is their sum: the time the token
     * spends on this device and its hops out */
    double t_cpu_s, t_gpu_s, t_disk_s, t_net_s, t_total_s;
    double t_layer_s;         /* predicted wall time per layer it runs (compute only): what
                                 sched_measured.layer_s is compared with */
    double t_read_s;          /* disk busy per token: disk_read_bytes / throughput */
    uint64_t ram_bytes;       /* weights + KV of its CPU layers (Metal: of all its layers) */
    uint64_t ram_limit_bytes; /* the RAM the model may use there */
    uint64_t vram_bytes;      /* weights + KV of its GPU layers */
    uint64_t disk_read_bytes; /* streamed from disk per token (the executor's stream_bytes) */
} sched_assign;

typedef struct sched_plan {
    sched_placement placement;
    int32_t n_layer;    /* L */
    int32_t k;          /* rounds per token */
    int32_t W;          /* layers per round = L / k = sum of w */
    size_t head;        /* device index of the head (ring position 0) */
    size_t n;           /* devices in the ring */
    sched_assign *a;    /* owned, n, ring order: a[0] is the head */
    size_t n_devices;   /* devices offered */
    bool *dropped;      /* owned, n_devices: offered but left out of the ring */
    double t_head_s;    /* kappa: the head's output matrix (embedding and sampling: < 1 ms) */
    double t_token_s;   /* predicted latency of one generated token */
    double solve_s;     /* wall time the planner took (info) */
    int32_t ilp_solved; /* integer programs solved (Halda; info) */
} sched_plan;

/* Plans `model` over devs[0..n) with o->placement. Errors: LARES_EINVAL for
 * bad devices or options (the message names device and field), LARES_ENOMEM,
 * LARES_ERANGE when no placement can hold the model ("these devices cannot
 * hold this model even from disk: need X, have Y"). The plan is validated
 * (sched_plan_validate) before it is returned. */
lares_status sched_plan_make(const sched_model *m, const sched_device *devs, size_t n,
                             const sched_opts *o, sched_plan **out, lares_error *err);

/* A plan from explicit windows (ring.json with windows given): ring[i] is a
 * device index, w[i] its window and n_gpu[i] its GPU layers (NULL: none);
 * k = L / sum(w) must be whole. Validated and evaluated like any plan. */
lares_status sched_plan_from_windows(const sched_model *m, const sched_device *devs, size_t n,
                                     const sched_opts *o, const size_t *ring, const int32_t *w,
                                     const int32_t *n_gpu, size_t n_ring, sched_plan **out,
                                     lares_error *err);

void sched_plan_free(sched_plan *p);

/* Layers [*l0, *l1) that device `device` (an index into the device array) runs
 * in round `round` (0 <= round < k). LARES_ENOTFOUND when the device is not in
 * the ring, LARES_ERANGE for a round out of range. */
lares_status sched_plan_layers_of(const sched_plan *p, size_t device, int32_t round, int32_t *l0,
                                  int32_t *l1, lares_error *err);
/* GPU layers of that window: [*g0, l1) where *g0 = l1 - n_gpu. */
lares_status sched_plan_gpu_from(const sched_plan *p, size_t device, int32_t round, int32_t *g0,
                                 lares_error *err);

/* The plan per device index: w[d] and n_gpu[d] (both 0 for a device left out),
 * arrays of p->n_devices. What a ring with fixed device indices
 * (cluster_plan) needs; the ring order is p->a[], the head p->head. */
void sched_plan_windows(const sched_plan *p, int32_t *w, int32_t *n_gpu);

/* Checks a plan against the model and devices: every layer exactly once, w >= 1,
 * 0 <= n_gpu <= w (0 without a GPU), k * W = L, GPU layers within VRAM, KV
 * caches within RAM, weights within RAM + disk. The message names the device
 * and the limit. */
lares_status sched_plan_validate(const sched_plan *p, const sched_model *m,
                                 const sched_device *devs, size_t n, const sched_opts *o,
                                 lares_error *err);

/* Re-computes the predicted times of p (the latency model, the same one every
 * placement is judged by). Fails only on devices lacking a figure the model
 * needs (a FLOP/s for a weight type, a hop). */
lares_status sched_plan_evaluate(sched_plan *p, const sched_model *m, const sched_device *devs,
                                 size_t n, const sched_opts *o, lares_error *err);

/* ---- API for the ring (issues 7, 9) ----
 *
 * What the head of an "auto" ring calls (src/api/ring.c, src/cluster). This
 * block stays stable; additions only.
 *
 *   start:   every worker profiles itself (sched_profile_run, cached) and
 *            sends sched_device_to_json in its WELCOME; the head parses them
 *            (sched_devices_parse), its own profile at index 0, measures each
 *            hop into sched_link entries (or sched_device.net_out) and calls
 *            sched_plan_make with o.head = 0, o.keep_order = true and o.n_ctx =
 *            the session's context. sched_plan_windows gives w and n per device
 *            index (w = 0: left out of the ring), p->k the rounds.
 *   running: per device the head keeps a sched_measured (moving means) from
 *            the trace of each ACT and the workers' reports; the plan's
 *            predictions to compare with are sched_assign.t_layer_s (per
 *            layer), .t_disk_s (disk wait per token), .t_total_s.
 *   re-plan: sched_replan(model, devs, n, o, current, measured, &next): the
 *            profiles corrected by what was measured under `current`, then
 *            sched_plan_make. Failover: o.exclude marks devices that left;
 *            their measured entries are ignored. devs is never changed.
 *   report:  sched_plan_format_measured prints predicted beside measured.
 *
 * Index convention: every per-device array (devs, meas, o.exclude, the
 * results of sched_plan_windows) is indexed by device index, not by ring
 * position. Nothing here blocks or does I/O; plans take milliseconds (8
 * devices x 80 layers: well under a second).
 */

/* What the head measured of one device, all means over recent tokens. */
typedef struct sched_measured {
    int32_t samples;           /* windows the means cover; 0: nothing measured (the profile
                                  stands for this device) */
    double layer_s;            /* wall seconds per layer it computed: each window's time minus
                                  the disk waits inside it, over the window's layers
                                  (<= 0: unknown) */
    double wait_s;             /* seconds per token it waited for weights from disk, over all
                                  its windows of a token (exec_counters.wait_ns; < 0: unknown) */
    double read_Bps;           /* throughput its prefetcher read at (exec_counters
                                  prefetch_bytes / prefetch_ns; <= 0: unknown) */
    uint64_t mem_budget_bytes; /* its memory budget now (mem_limit auto_bytes, as WELCOME
                                  carries it; 0: unknown) */
    sched_hop hop_out;         /* the hop from it to its successor in `current`, measured
                                  (latency_s < 0: unknown) */
} sched_measured;

/* Nothing measured: samples 0, every figure unknown. */
void sched_measured_init(sched_measured *m);

/* The devices as measured: out[d] = devs[d] (n of them) with meas[d] folded in
 * by fitting the latency model to what `current` showed:
 *   layer_s > 0:  compute rates (CPU and GPU) scaled so that the model's wall
 *                 time per layer of d under `current` is layer_s (so a quota's
 *                 throttling measured at one window size is not double counted);
 *   read_Bps > 0: the disk figure; else wait_s >= 0 on a device that streams
 *                 under `current`: the disk figure that makes the model's wait
 *                 equal wait_s (a device that waited 0 keeps at least its own);
 *   mem_budget_bytes > 0: memory.available;
 *   hop_out known: net_out (sched_replan also puts it before o->links).
 * `current` must have been made for these devices (n_devices == n). Errors:
 * LARES_EINVAL for a plan or figure that does not fit (the message names it). */
lares_status sched_devices_calibrate(const sched_model *m, const sched_device *devs, size_t n,
                                     const sched_opts *o, const sched_plan *current,
                                     const sched_measured *meas, sched_device *out,
                                     lares_error *err);

/* Re-plans from measured figures: sched_devices_calibrate, then
 * sched_plan_make(o) over the calibrated devices (o->exclude left out; a
 * device with a measured hop gets it for the pair (it, its successor in
 * `current`)). current may be NULL (then only mem_budget_bytes and hop_out
 * are used). Errors as sched_plan_make's; LARES_ERANGE when the devices left
 * cannot hold the model ("these devices cannot hold this model even from
 * disk: need X, have Y"). */
lares_status sched_replan(const sched_model *m, const sched_device *devs, size_t n,
                          const sched_opts *o, const sched_plan *current,
                          const sched_measured *meas, sched_plan **out, lares_error *err);

/* A table, one line per ring device: predicted beside measured per token --
 * compute, disk wait, network, total, and the ratio -- then the token latency
 * (token_s: measured seconds per token, < 0: not measured). meas may be NULL
 * or have entries with samples == 0 (printed "-"). Into buf, truncated at cap;
 * returns the length written. */
size_t sched_plan_format_measured(const sched_plan *p, const sched_device *devs,
                                  const sched_measured *meas, double token_s, char *buf,
                                  size_t cap);

/* ---- JSON (jansson; text in, text out) ---- */

/* Parses a device list: a JSON array of device objects, one device object, or
 * {"devices": [...], "links": [...], "network": {...}}. Strict: unknown
 * fields, wrong types, negative sizes and missing required fields are
 * LARES_EFORMAT naming the path ("devices[2].memory.available"). *links (may
 * be NULL) is set only when the text has links; net_default to the top-level
 * "network" or left untouched. Outputs are lares_alloc'd. */
lares_status sched_devices_parse(const char *text, size_t len, const char *what,
                                 sched_device **devs, size_t *n, sched_link **links,
                                 size_t *n_links, sched_hop *net_default, lares_error *err);
/* One device as a JSON object (lares_alloc'd NUL-terminated text). */
lares_status sched_device_to_json(const sched_device *d, char **out, lares_error *err);
/* Another placement of the same model and devices, for comparison. */
typedef struct sched_alternative {
    sched_placement placement;
    const sched_plan *plan;          /* borrowed; NULL when that placement failed */
    char error[LARES_ERROR_MSG_MAX]; /* why it failed */
} sched_alternative;

/* A plan and the alternatives (evaluated by the same model) as one JSON
 * object: lares_alloc'd NUL-terminated text. */
lares_status sched_plan_to_json(const sched_plan *p, const sched_alternative *alts, size_t n_alts,
                                const sched_model *m, const sched_device *devs, const sched_opts *o,
                                char **out, lares_error *err);

/* "2.4GiB", "512MB", "1e9", 1024 -> bytes; "0.72GB/s", "100Mbit/s" -> bytes per
 * second. false on anything else (negative, unknown unit, overflow). */
bool sched_parse_size(const char *s, uint64_t *out);
bool sched_parse_rate(const char *s, double *out);

/* ---- profiling this device ---- */

/* A GPU probe (a CUDA build passes its own; NULL: no GPU). Fills the gpu_*
 * fields of d; returns false when there is no usable GPU. */
typedef bool (*sched_gpu_probe_fn)(sched_device *d, void *user);

/* ---- calibration on the executor (calibrate.c) ----
 *
 * The micro-benchmarks time one kernel; a real window also runs norms,
 * attention, RoPE, the thread pool's hand-offs, and does it inside the
 * device's CPU quota, thread count and memory budget. The profile therefore
 * runs a few real windows of the model being planned, decode-shaped (one row)
 * and prompt-shaped (a batch), times them by the wall clock, and scales the
 * CPU rates so that the latency model gives the measured full-speed time for
 * those layers (docs/scheduling-impl.md, "Calibration"). */

/* What one run of windows measured. */
typedef struct sched_window_time {
    int32_t l0, l1;    /* the layers each window ran */
    int32_t n_rows;    /* rows per window: 1 (a generated token) or a prompt batch */
    int32_t n_past;    /* positions before the rows (attention's reach) */
    int32_t n_windows; /* windows timed, back to back, after one untimed */
    double wall_s;     /* their wall time, the executor's waits for disk taken off */
    bool streamed;     /* the weights streamed from disk under the memory budget */
} sched_window_time;

/* Runs the windows on this device with n_threads threads for about
 * budget_ms: decode-shaped into *decode, prompt-shaped into *prompt
 * (n_windows 0: not run). */
typedef lares_status (*sched_window_fn)(void *user, const char *model_path, int32_t n_threads,
                                        uint32_t budget_ms, sched_window_time *decode,
                                        sched_window_time *prompt, lares_error *err);

/* Full-speed seconds of work that took wall_s of wall time running without
 * pause under d's CPU quota (the inverse of the latency model's throttling:
 * a burst at full speed until the quota of a period is spent, then u of each
 * period); wall_s itself without a quota. */
double sched_full_speed_s(const sched_device *d, double wall_s);

/* Scales d's CPU rates (compute-bound, memory-bound, memory bandwidth) so
 * that the latency model's full-speed time of decode's layers on d is what
 * decode measured, and records both runs in d->cal (prompt may be NULL or
 * have n_windows 0). LARES_EINVAL for a run that does not fit the model
 * (layers out of range, no windows, a time <= 0). */
lares_status sched_device_fit_windows(const sched_model *m, sched_device *d,
                                      const sched_window_time *decode,
                                      const sched_window_time *prompt, lares_error *err);

typedef struct sched_profile_opts {
    const char *disk_path; /* measure the disk holding this file (the model); NULL: a
                              temporary file in cache_dir (or /tmp) */
    const char *cache_dir; /* where profile-<fingerprint>.json lives; NULL: no cache */
    const char *name;      /* device name; NULL: the host name */
    bool refresh;          /* measure even when a cached profile matches */
    uint32_t max_age_s;    /* a cached profile older than this is measured again (default
                              7 days: a device's load and firmware drift; 0: no limit) */
    int32_t n_threads;     /* 0: every core */
    uint32_t budget_ms;    /* total measuring time (0: 2000); each part gets a share */
    const char *sys_root;  /* prefix for /proc and /sys (tests); NULL: "/" */
    sched_gpu_probe_fn gpu_probe;
    void *gpu_user;
    /* runs real layer windows of the model at disk_path on this device (api/calibrate.c);
     * NULL, or no disk_path: the rates stay the micro-benchmarks' */
    sched_window_fn run_windows;
    void *windows_user;
} sched_profile_opts;

sched_profile_opts sched_profile_opts_default(void);

typedef struct sched_profile_info {
    uint64_t fingerprint;
    bool cached;      /* the slow figures came from the cache */
    bool disk_direct; /* the disk was read with O_DIRECT / F_NOCACHE */
    uint64_t disk_test_bytes;
    char disk_note[200]; /* what the disk test could not measure and why ("" when all) */
    double measure_s;            /* time spent measuring */
    uint64_t cgroup_limit_bytes; /* 0: none */
} sched_profile_info;

/* Measures this device (or loads the slow figures from the cache when the
 * fingerprint matches; free memory is always read fresh). */
lares_status sched_profile_run(const sched_profile_opts *o, sched_device *out,
                               sched_profile_info *info, lares_error *err);
/* The device JSON plus the profile's own fields (fingerprint, cached, ...). */
lares_status sched_profile_to_json(const sched_device *d, const sched_profile_info *info,
                                   char **out, lares_error *err);

/* The pieces, exposed for tests. `root` prefixes /proc and /sys paths ("" or
 * NULL: the real ones). */
sched_os sched_detect_os(const char *root);
/* MemAvailable, the memory cgroup's room (v1 or v2: limit - usage + inactive
 * file pages), swap; fills ram_total/avail/swap_avail of d. */
lares_status sched_probe_memory(const char *root, sched_device *d, uint64_t *cgroup_limit,
                                lares_error *err);
/* The CPU quota of this process's cgroup in cores (0: none) and its period
 * in seconds (*period_s; 0 with no quota). */
double sched_probe_cpu_quota(const char *root, double *period_s);
/* FNV-1a of what identifies the hardware and kernels (CPU model, cores, RAM,
 * ISA, OS, CPU quota and period, lares version, the profile's format). */
uint64_t sched_fingerprint(const sched_device *d);

#endif /* LARES_SCHED_H */
