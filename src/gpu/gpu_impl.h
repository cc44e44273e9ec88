/*
 * gpu internals: the cost model's per-layer pricing (shared by cost.c and
 * placement.c) and the device table the session drives (emul.c, cuda/).
 */
#ifndef LARES_GPU_IMPL_H
#define LARES_GPU_IMPL_H

#include "gpu/gpu.h"
#include "gpu/gpu_types.h"

/* Index ranges of one layer's tensors and groups (layer n_layer: the head). */
typedef struct gpu_layer_span {
    int32_t layer;
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

    /* ---- whole layers on the device (docs/gpu.md, "Whole layers") ----
     * Device pointers throughout, byte offsets allowed (a handle plus an
     * offset is a device pointer). Every op is queued in order on the
     * device's one stream; `get` waits for everything queued before it. */
    /* zeroed device memory (counted against the device's memory like uploads) */
    lares_status (*alloc)(gpu_device *d, size_t bytes, void **dev, lares_error *err);
    lares_status (*put)(gpu_device *d, void *dev, const void *host, size_t bytes, lares_error *err);
    lares_status (*get)(gpu_device *d, void *host, const void *dev, size_t bytes, lares_error *err);
    /* ops_rmsnorm of each of `rows` rows of n */
    lares_status (*norm)(gpu_device *d, const float *x, const float *w, int64_t n, int64_t rows,
                         float eps, float *out, lares_error *err);
    /* rows of n floats into the activation format `type` (GGUF Q8_0 or Q8_K),
     * the codes of quant/'s reference quantizer */
    lares_status (*quant)(gpu_device *d, const float *x, int64_t rows, int64_t n, uint32_t type,
                          void *out, lares_error *err);
    /* y[r * n_out + o] = dot(row o of w, row r of act), activations already on the device */
    lares_status (*mm)(gpu_device *d, const void *w, uint32_t w_type, int64_t n_in, int64_t n_out,
                       const void *act, size_t act_row_bytes, int64_t rows, float *y,
                       lares_error *err);
    /* ops_rope on every head of n_tok rows of n_heads * head_dim (row t at the
     * angles cs + t * n_rot) */
    lares_status (*rope)(gpu_device *d, float *x, int64_t n_tok, int64_t n_heads,
                         int64_t head_dim, int64_t n_rot, const float *cs, ops_rope_mode mode,
                         lares_error *err);
    /* row t of src (row_elems floats) into row pos[t] of dst, F16 or F32 */
    lares_status (*kv_store)(gpu_device *d, const float *src, int64_t n_tok, int64_t row_elems,
                             const int32_t *pos, void *dst, bool f16, lares_error *err);
    lares_status (*attend)(gpu_device *d, const gpu_attend_args *a, lares_error *err);
    /* x += y; g = silu(g) * u (ops_add, ops_swiglu) */
    lares_status (*add)(gpu_device *d, float *x, const float *y, int64_t n, lares_error *err);
    lares_status (*swiglu)(gpu_device *d, float *g, const float *u, int64_t n, lares_error *err);
} gpu_device_ops;

extern const gpu_device_ops gpu_emul_ops;

/* A matrix the session uploaded: its host weights (the key), its device copy. */
typedef struct gpu_dev_matrix {
    const void *host; /* borrowed: the matrix's weights in the file mapping */
    void *dev;        /* owned by the device */
    uint32_t type;
    int64_t n_in, n_out;
} gpu_dev_matrix;

/* The uploaded copy of w among mats (n, sorted by host): the same weights and
 * shape; NULL when w has none. (session.c) */
const gpu_dev_matrix *gpu_dev_matrix_find(const gpu_dev_matrix *mats, size_t n,
                                          const ops_matrix *w);

/* ---- whole layers (layers.c) ---- */
/* Whether the device can run layer il whole once its matrices are there: only
 * norms, the dense products of device types, RoPE, attention, SwiGLU and
 * residuals (no biases, per-head norms or experts). */
bool gpu_layer_plain(const model *mdl, int32_t il);
typedef struct gpu_layers gpu_layers;
/* The layers whose every matrix is in mats (sorted by host; borrowed, as
 * are ops and dev, for the life of *out) and whose ops the device has; their
 * norm weights uploaded. *out NULL when there is none. */
lares_status gpu_layers_create(const model *mdl, const gpu_device_ops *ops, gpu_device *dev,
                               const gpu_dev_matrix *mats, size_t n_mats, gpu_layers **out,
                               lares_error *err);
void gpu_layers_free(gpu_layers *g);
int32_t gpu_layers_whole(const gpu_layers *g);
bool gpu_layers_holds(const gpu_layers *g, int32_t il);
uint64_t gpu_layers_run_count(const gpu_layers *g);
/* model_layer_fn (model.h) with user = the gpu_layers */
lares_status gpu_layers_forward(void *user, const model_seq *seqs, int32_t n_seqs, int32_t il,
                                int32_t l_end, const int32_t *pos, int32_t n_tok,
                                const float *rope_cs, float *x, bool *ran, lares_error *err);
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
