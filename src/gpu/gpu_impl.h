/*
 * gpu internals: the cost model's per-layer pricing (shared by cost.c and
 * placement.c) and the device table the session drives (emul.c, cuda/).
 */
#ifndef LARES_GPU_IMPL_H
#define LARES_GPU_IMPL_H

#include "gpu/gpu.h"

/* Index ranges of one layer's tensors and groups (layer n_layer: the head). */
typedef struct gpu_layer_span {
    size_t t_lo, t_hi;
    size_t g_lo, g_hi;
} gpu_layer_span;

/* spans[n_layer + 1] from a validated m; owned by the caller (lares_free). */
lares_status gpu_layer_spans(const gpu_meas *m, gpu_layer_span **out, lares_error *err);

/* The predicted time of one layer's tensors and groups with on_gpu. */
double gpu_layer_cost(const gpu_meas *m, const gpu_layer_span *sp, const bool *on_gpu);

/* The time of one copy of `bytes` at Bps (latency included); 0 for no bytes. */
double gpu_xfer_s(double latency_s, double Bps, uint64_t bytes);

/* gpu_meas_estimate, and the matrix of each tensor (*ws_out: owned by the
 * caller, lares_free; n_tensors entries borrowed from mdl). */
lares_status gpu_estimate_with_matrices(const model *mdl, const gpu_est_rates *r, int32_t n_tok,
                                        gpu_meas **out, const ops_matrix ***ws_out,
                                        lares_error *err);

/*
 * A device, as the session drives it. Every call returns a status with the
 * reason in err. Device buffers are opaque handles (void *).
 */
typedef struct gpu_device gpu_device;

typedef struct gpu_device_ops {
    const char *name; /* "cuda", "emulated" */
    /* Opens the device: its name and free memory. */
    lares_status (*open)(uint64_t emul_vram_bytes, gpu_device **out, char *name, size_t cap,
                         uint64_t *vram_free, lares_error *err);
    void (*close)(gpu_device *d);
    /* A device copy of host bytes. */
    lares_status (*upload)(gpu_device *d, const void *host, size_t bytes, void **dev,
                           lares_error *err);
    void (*release)(gpu_device *d, void *dev);
    /* y[r * n_out + o] = dot(row o of the device matrix, row r of act), the
     * activations on the host in the weight type's vec_dot_type (a.type),
     * copied over for the call; y on the host when the call returns. */
    lares_status (*matmul)(gpu_device *d, const void *w_dev, uint32_t w_type, int64_t n_in,
                           int64_t n_out, const ops_act *a, float *y, lares_error *err);
} gpu_device_ops;

extern const gpu_device_ops gpu_emul_ops;
/* NULL in a build without CUDA (nocuda.c). */
const gpu_device_ops *gpu_cuda_ops(void);

/* Kernel checks for tests/test_gpu_kernels.c, on the first CUDA device; each
 * is LARES_EUNSUPPORTED in a build without CUDA. */
/* out = the device's dequantization of n elements of `type` (a block multiple). */
lares_status gpu_cuda_check_dequant(uint32_t type, const void *src, size_t src_bytes, int64_t n,
                                    float *out, lares_error *err);
/* ops_rmsnorm on each of `rows` rows of n. */
lares_status gpu_cuda_check_rmsnorm(const float *x, const float *w, int64_t n, int64_t rows,
                                    float eps, float *out, lares_error *err);
/* ops_rope on each of n_heads heads of head_dim at the angles cs (n_rot values), in place. */
lares_status gpu_cuda_check_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                                 const float *cs, ops_rope_mode mode, lares_error *err);
/* ops_attention (a->scratch unused), KV rows for positions 0..max(pos). */
lares_status gpu_cuda_check_attention(const ops_attn_args *a, int64_t n_kv_rows, lares_error *err);

#endif /* LARES_GPU_IMPL_H */
