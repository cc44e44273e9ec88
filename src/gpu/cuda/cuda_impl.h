/*
 * gpu/cuda internals: the kernel launchers the host side (device.cu) calls.
 * Device pointers throughout; every launcher queues on `stream` and returns
 * the launch status (cudaGetLastError), not the kernel's completion.
 *
 * Numerics (docs/gpu.md): dequantization repeats the CPU reference's float
 * operations one by one with round-to-nearest intrinsics (no fused
 * multiply-add), so it matches quant/'s scalar reference bit for bit; products
 * sum the same integers per block as the reference dot products, then
 * accumulate in float in a different order; RMSNorm sums squares in double as
 * ops_rmsnorm does.
 */
#ifndef LARES_GPU_CUDA_IMPL_H
#define LARES_GPU_CUDA_IMPL_H

#include <cuda_runtime.h>
#include <stdint.h>

/* The weight types the device multiplies (GGUF ids): Q4_0, Q8_0, Q4_K, Q6_K, F16. */
bool cu_type_ok(uint32_t w_type);

/* y[r * n_out + o] = dot(row o of w, row r of act) for r < n_rows; act rows of
 * act_row_bytes in the weight type's vec_dot_type (Q8_0, Q8_K or F32). */
cudaError_t cu_matmul(const void *w, uint32_t w_type, int64_t n_in, int64_t n_out,
                      const void *act, size_t act_row_bytes, int64_t n_rows, float *y,
                      cudaStream_t stream);

/* out[0..n) = dequantized src (n a multiple of the type's block). */
cudaError_t cu_dequant(const void *src, uint32_t type, int64_t n, float *out, cudaStream_t stream);

/* ops_rmsnorm on rows of n (w may be NULL). */
cudaError_t cu_rmsnorm(const float *x, const float *w, int64_t n, int64_t rows, float eps,
                       float *out, cudaStream_t stream);

/* ops_rope in place on n_heads heads of head_dim (cs: n_rot values, cos/sin pairs);
 * mode 0 rotates adjacent pairs, 2 halves (NEOX). */
cudaError_t cu_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float *cs,
                    int mode, cudaStream_t stream);

/* ops_attention: q and out n_tok x n_head x head_dim; k and v rows of
 * n_head_kv x head_dim, F32 (kv_f16 false) or F16; token t sees rows 0..pos[t]. */
typedef struct cu_attn_args {
    const float *q;
    float *out;
    const int32_t *pos;
    int64_t n_tok, n_head, n_head_kv, head_dim;
    float scale;
    const void *k, *v;
    bool kv_f16;
    int64_t n_kv_max; /* the longest pos + 1 (sizes shared memory) */
} cu_attn_args;
cudaError_t cu_attention(const cu_attn_args *a, cudaStream_t stream);

#endif /* LARES_GPU_CUDA_IMPL_H */
