/*
 * gpu: which weight matrices go to a GPU, and the optional CUDA backend.
 *
 * Owns:
 *   - the placement (placement.c, cost.c; always built, pure computation):
 *     from per-tensor figures (bytes, CPU and GPU time, activation bytes in and
 *     out, the op chain of its layer) and a device-memory budget, either whole
 *     layers (`layers`, the reference engine's -ngl) or tensors ranked by GPU
 *     affinity = time saved per byte of device memory, re-ranked after every
 *     placement for the copies it creates or removes (`affinity`, after the
 *     OATO study). One cost model (gpu_predict, docs/gpu.md) prices both;
 *   - estimated figures for a loaded model (estimate.c) from device rates, for
 *     `lares plan` and sessions; the CPU's rates measured per weight type
 *     (measure.c), a CUDA device's by its profiler (cuda/device.cu), else a guess;
 *   - whole layers on the device (layers.c): a layer all of whose matrices are
 *     there runs there, norms to residuals, over a device KV cache;
 *   - a session's device state (session.c): the uploaded matrices and the
 *     offload hook it installs into the thread pool (ops_pool_set_offload), so
 *     ops_matmul runs every product whose matrix has a device copy there;
 *   - the devices behind a small table (gpu_impl.h): CUDA (the .cu files of cuda/, built
 *     with -DLARES_CUDA=ON) and a host-memory emulation (emul.c) that runs the
 *     same orchestration with the scalar reference kernels, so the CPU-only
 *     build tests everything except the CUDA kernels themselves.
 *
 * Knows nothing about files beyond a loaded model, sockets, sampling, or which
 * device of a ring runs which window (sched decides the layer share; see
 * gpu_budget_for_layers for the one call sched needs).
 *
 * Activations go to the device in the format the CPU path uses for the same
 * weight type (quant traits' vec_dot_type: Q8_0 for Q4_0/Q8_0, Q8_K for
 * Q4_K/Q6_K, F32 for F16), quantized on the host by the CPU's own quantizer,
 * so a product on the device sums exactly the integers the CPU sums; only the
 * order of the float accumulation differs.
 *
 * Lifetimes: gpu_meas and gpu_placement are plain owned objects. A
 * gpu_session borrows the model and the pool it was created for (both outlive
 * it) and installs its hook into the pool; gpu_session_free removes it.
 * Threads: a session is used by the thread that calls ops_matmul (the hook
 * runs on the calling thread only).
 */
#ifndef LARES_GPU_H
#define LARES_GPU_H

#include "core/core.h"
#include "model/model.h"
#include "ops/ops.h"

/* ---- measurements ---- */

/* One weight matrix, as the placement sees it. Figures are per pass (one
 * forward pass of n_tok tokens; n_tok = 1 for generation). */
typedef struct gpu_tensor_meas {
    char name[64];
    int32_t layer;      /* 0 .. n_layer - 1; the head's output matrix: n_layer */
    int32_t group;      /* index into gpu_meas.groups: the matrices that multiply the same
                           activations (Q, K, V; gate and up), copied to the device once */
    uint32_t type;      /* GGUF type id of the weights (info) */
    uint64_t bytes;     /* device memory its weights take (> 0) */
    double cpu_s;       /* its product on the CPU */
    double gpu_s;       /* its product on the device, launch included */
    uint64_t out_bytes; /* its output: what a product on the device copies back */
    bool gpu_ok;        /* the device has a kernel for its type */
} gpu_tensor_meas;

/* The matrices of one layer that share their input, in op-chain order. */
typedef struct gpu_group_meas {
    int32_t layer;
    uint64_t in_bytes; /* its input activations: copied to the device once when any member
                          runs there and the input is not already there */
    bool fuse_next;    /* the op between this group and the next one of the same layer
                          (SwiGLU between gate/up and down) can run on the device: when
                          both groups are wholly on the device, neither this group's
                          outputs nor the next group's input cross the bus */
    double mid_cpu_s;  /* that op on the CPU */
    double mid_gpu_s;  /* that op on the device */
} gpu_group_meas;

/* Copies between host and device: latency + bytes / bandwidth each. */
typedef struct gpu_link_meas {
    double latency_s;
    double h2d_Bps;
    double d2h_Bps;
} gpu_link_meas;

/* A layer as a whole: when every one of its matrices is on the device and
 * the device runs the layer whole (norms, RoPE, attention over a device KV
 * cache, SwiGLU: gpu/layers.c), the layer costs whole_gpu_s plus the copy of
 * the hidden state (x_bytes) in and out, and none of the per-product copies.
 * Otherwise its non-product work (rest_cpu_s) runs on the CPU. All zero (the
 * default): no whole-layer pricing, the non-product work not counted. */
typedef struct gpu_layer_meas {
    bool whole_ok;
    double whole_gpu_s;
    double rest_cpu_s;
    uint64_t x_bytes;
} gpu_layer_meas;

typedef struct gpu_meas {
    int32_t n_layer;
    int32_t n_tok; /* tokens per pass the figures describe (info) */
    size_t n_tensors;
    gpu_tensor_meas *t; /* owned, n_tensors, ordered by layer then group */
    size_t n_groups;
    gpu_group_meas *groups; /* owned, n_groups, ordered by layer, chain order inside one */
    gpu_layer_meas *layers; /* owned, n_layer + 1 (the head last, never whole) */
    gpu_link_meas link;
} gpu_meas;

/* Room for n_tensors tensors and n_groups groups, all zero. */
lares_status gpu_meas_create(int32_t n_layer, size_t n_tensors, size_t n_groups, gpu_meas **out,
                             lares_error *err);
void gpu_meas_free(gpu_meas *m);
/* LARES_EINVAL naming the tensor or group and the field when a figure is
 * missing, negative, not finite or out of range, or the order is broken. */
lares_status gpu_meas_validate(const gpu_meas *m, lares_error *err);

/* The predicted time of one pass with these tensors on the device (the cost
 * model of docs/gpu.md). on_gpu[i] for a tensor without gpu_ok is LARES_EINVAL. */
lares_status gpu_predict(const gpu_meas *m, const bool *on_gpu, double *t_s, lares_error *err);

/* ---- placement ---- */

typedef enum gpu_method {
    GPU_OFFLOAD_NONE = 0,
    GPU_OFFLOAD_LAYERS,   /* whole layers from the last one down (the reference engine's -ngl) */
    GPU_OFFLOAD_AFFINITY, /* tensors by time saved per byte, re-ranked after every placement */
    GPU_OFFLOAD_COUNT
} gpu_method;

const char *gpu_method_name(gpu_method m);  /* "none", "layers", "affinity" */
int gpu_method_from_name(const char *name); /* -1 when unknown */

typedef struct gpu_place_opts {
    gpu_method method;
    uint64_t budget_bytes; /* device memory for weights */
    int32_t n_layers;      /* layers method: exactly this many layers, the last ones (more
                              than n_layer: the head too, like -ngl); -1: as many as the
                              budget holds (the head too when every layer fits) */
} gpu_place_opts;

gpu_place_opts gpu_place_opts_default(void); /* affinity, budget 0, n_layers -1 */

typedef struct gpu_placement {
    gpu_method method;
    size_t n_tensors;
    bool *on_gpu;  /* owned, n_tensors */
    size_t *order; /* owned, n_tensors: indices in the order placed (n_placed used) */
    size_t n_placed;
    uint64_t budget_bytes;
    uint64_t weight_bytes;  /* of the tensors placed */
    int32_t n_layers_whole; /* layers all of whose matrices are on the device */
    double t_pass_s;        /* predicted time of a pass */
    double t_cpu_s;         /* predicted with nothing on the device */
} gpu_placement;

/* Places tensors on the device by o->method within o->budget_bytes.
 * Affinity: repeatedly takes the move with the most time saved per byte that
 * still fits (a tensor, the rest of a group, or the rest of a group with the
 * group it fuses with), each priced by gpu_predict's model against what is
 * already placed, until no move that fits saves time; ties go to the lowest
 * tensor index. The same greedy also runs from the layers placement (as many
 * whole layers as fit) and the faster of the two by the model is kept (the
 * first on a tie), so affinity never predicts slower than layers. Layers: whole layers from the
 * last one down while they fit (n_layers = -1), or exactly n_layers (LARES_ERANGE naming need and
 * budget when they do not fit; a layer with a matrix the device cannot run is LARES_EUNSUPPORTED).
 * Errors: gpu_meas_validate's; LARES_EINVAL for a bad method or n_layers. */
lares_status gpu_place(const gpu_meas *m, const gpu_place_opts *o, gpu_placement **out,
                       lares_error *err);
void gpu_placement_free(gpu_placement *p);

/* The device budget: 90 % of free device memory, capped at cap_bytes when
 * cap_bytes > 0 (--gpu-mem). vram_free_bytes = 0 means unknown (planning for
 * another machine): the cap alone. */
uint64_t gpu_budget(uint64_t vram_free_bytes, uint64_t cap_bytes);

/* For sched (Halda decides how many of a window's layers a device's GPU takes):
 * the bytes the last n_gpu_layers layers of [l0, l1) take on the device, the
 * budget that affinity placement then fills with the tensors that gain most.
 * LARES_EINVAL for a window outside the model or n_gpu_layers < 0. */
lares_status gpu_budget_for_layers(const gpu_meas *m, int32_t l0, int32_t l1, int32_t n_gpu_layers,
                                   uint64_t *bytes_out, lares_error *err);

/* ---- estimated measurements (no device needed) ---- */

/* Device figures to estimate from. A product's time is the roofline
 * max(flops / rate, weight bytes / bandwidth), plus one launch on the GPU. */
typedef struct gpu_est_rates {
    double cpu_flops;  /* FLOP/s of the CPU's quantized products */
    double cpu_bw_Bps; /* RAM read bandwidth */
    /* weight bytes per second of a mat-vec by weight type (the kernels differ:
     * a Q4_K byte costs more CPU time than a Q6_K byte); 0: cpu_bw_Bps */
    double cpu_Bps_type[GGUF_TYPE_COUNT];
    double gpu_flops;
    double gpu_bw_Bps;   /* device memory read bandwidth */
    double gpu_launch_s; /* per kernel launch, waited for (a product by itself) */
    double gpu_queue_s;  /* per kernel queued behind others (a layer run whole) */
    /* per weight type, device bytes per second of a mat-vec (a profiled device); 0: gpu_bw_Bps */
    double gpu_Bps_type[GGUF_TYPE_COUNT];
    bool device_layers;  /* the runtime runs layers whose matrices are all on the device whole */
    int32_t ctx_plan;    /* positions of KV cache a pass's attention reads (pricing) */
    gpu_link_meas link;
} gpu_est_rates;

/* A desktop-class guess (PCIe 4 x16, a mid-range GPU, an 8-core CPU) for plans
 * and tests; docs/gpu.md says where each figure comes from. */
gpu_est_rates gpu_est_rates_default(void);

/* Times this machine's CPU products on pool (measure.c): a mat-vec of a 4096 x
 * 4096 matrix per device weight type sets r->cpu_Bps_type, a 32-row mat-mat of
 * Q4_K sets r->cpu_flops. About a quarter of a second; the GPU fields stay. */
lares_status gpu_measure_cpu(ops_pool *pool, gpu_est_rates *r, lares_error *err);

/* The matrices of a loaded model (dense layers: Q, K, V, O, gate, up, down;
 * the output matrix) with times estimated from r for passes of n_tok tokens.
 * MoE layers' experts are left out (the device has no expert kernels yet);
 * their router and attention matrices take part. */
lares_status gpu_meas_estimate(const model *mdl, const gpu_est_rates *r, int32_t n_tok,
                               gpu_meas **out, lares_error *err);

/* What `lares plan` shows about a GPU: both methods at the same budget for
 * passes of n_tok tokens. *json_out: one JSON object, released with lares_free:
 *   {"budget_bytes", "model_weight_bytes", "cpu_only_ms", "chosen",
 *    "layers": {...}, "affinity": {...}}
 * each method with "predicted_ms", "weight_bytes", "n_tensors", "layers_whole",
 * "speedup_vs_cpu" and "tensors" (names in the order placed). */
lares_status gpu_plan_json(const gpu_meas *m, uint64_t budget_bytes, gpu_method chosen,
                           char **json_out, lares_error *err);

/* ---- devices and sessions ---- */

/* The first CUDA device measured into r's device fields: copy latency and
 * rates each way (pageable memory, as the session copies), a launch waited
 * for and one queued, each type's 4096 x 4096 mat-vec (gpu_Bps_type,
 * gpu_bw_Bps their best) and a 32-row Q4_K product (gpu_flops). About 0.1 s.
 * LARES_EUNSUPPORTED without CUDA. */
lares_status gpu_cuda_measure(gpu_est_rates *r, lares_error *err);

/* Whether this build and machine have a CUDA device: LARES_OK, or
 * LARES_EUNSUPPORTED (built without CUDA) / LARES_ENOTFOUND (no device, no
 * driver) with the reason in err. name may be NULL. */
lares_status gpu_cuda_probe(char *name, size_t cap, uint64_t *vram_free, lares_error *err);

typedef enum gpu_backend {
    GPU_BACKEND_CUDA = 0,
    GPU_BACKEND_EMUL = 1, /* host memory and the scalar reference kernels (tests) */
} gpu_backend;

typedef struct gpu_session_opts {
    gpu_backend backend;
    gpu_method method;
    uint64_t mem_cap_bytes;     /* --gpu-mem; 0: 90 % of free device memory */
    int32_t n_layers;           /* layers method: as gpu_place_opts.n_layers */
    int32_t n_tok_plan;         /* tokens per pass the placement optimises (1: generation) */
    uint64_t emul_vram_bytes;   /* the emulated device's memory (0: 1 GiB) */
    uint64_t kv_reserve_bytes;  /* device memory kept for KV caches of whole layers, out of
                                   the free memory the budget is taken from */
    bool whole_layers;          /* run layers all on the device whole (default true) */
    const gpu_est_rates *rates; /* borrowed; NULL: gpu_est_rates_default(), with the CPU's
                                   rates measured on the pool for CUDA or measure_cpu */
    bool measure_cpu;
} gpu_session_opts;

gpu_session_opts gpu_session_opts_default(void);

typedef struct gpu_session gpu_session;

/* Opens the device, estimates, places, uploads the chosen matrices and
 * installs the offload hook into pool. Errors: LARES_EUNSUPPORTED (no CUDA in
 * this build), LARES_ENOTFOUND (no device), LARES_ENOMEM (device memory),
 * LARES_ERANGE (-ngl layers that do not fit), LARES_EIO (a device call failed),
 * LARES_EBUSY (the pool already has an offload hook). */
lares_status gpu_session_create(const model *mdl, ops_pool *pool, const gpu_session_opts *o,
                                gpu_session **out, lares_error *err);
void gpu_session_free(gpu_session *s);

typedef struct gpu_session_info {
    const char *backend; /* "cuda", "emulated" */
    char device[96];
    gpu_method method;
    uint64_t vram_free_bytes; /* when the session was created */
    uint64_t budget_bytes;
    uint64_t weight_bytes;       /* uploaded */
    uint64_t model_weight_bytes; /* every matrix the placement considered */
    int32_t n_tensors;
    int32_t n_tensors_gpu;
    int32_t n_layers_whole;
    int32_t n_layers_device; /* of those, the layers that run whole on the device (norms,
                                RoPE, attention over a device KV cache, SwiGLU) */
    double t_pass_ms;     /* predicted per pass of n_tok_plan tokens */
    double t_cpu_ms;      /* predicted with nothing on the device */
    uint64_t n_offloaded; /* products run on the device so far */
    uint64_t n_layer_runs; /* layers run whole on the device so far */
} gpu_session_info;

/* For the public API's session (api/session.c): a CUDA session by method name
 * ("layers" or "affinity", else LARES_EINVAL naming it), gpu_mem as
 * mem_cap_bytes, gpu_layers > 0 as the layers method's exact count. */
lares_status gpu_session_open_named(const model *mdl, ops_pool *pool, const char *method,
                                    uint64_t gpu_mem, int32_t gpu_layers,
                                    uint64_t kv_reserve_bytes, gpu_session **out,
                                    lares_error *err);

/* Runs the session's whole layers (n_layers_device) on the device in cx's
 * passes (model_ctx_on_layer); nothing when it has none. The session must
 * outlive cx's passes. */
void gpu_session_attach(gpu_session *s, model_ctx *cx);

void gpu_session_get_info(const gpu_session *s, gpu_session_info *out);
const gpu_placement *gpu_session_placement(const gpu_session *s); /* borrowed */

#endif /* LARES_GPU_H */
