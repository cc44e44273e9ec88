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

#include "gpu/gpu_types.h"

#include <cuda_runtime.h>
#include <stdint.h>

/* The weight types the device multiplies (GGUF ids): Q4_0, Q8_0, Q4_K, Q6_K, F16, F32. */
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

/* ops_rope in place on n_heads heads of head_dim of each of n_tok rows (row t
 * at cs + t * n_rot: n_rot values, cos/sin pairs); mode 0 rotates adjacent
 * pairs, 2 halves (NEOX). */
cudaError_t cu_rope(float *x, int64_t n_tok, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const float *cs, int mode, cudaStream_t stream);

/* rows of n floats into Q8_0 or Q8_K blocks, quant/'s reference codes */
cudaError_t cu_quant(const float *x, int64_t rows, int64_t n, uint32_t type, void *out,
                     cudaStream_t stream);

/* row t of src (row_elems floats) into row pos[t] of dst (F16 rounded to nearest even, or F32) */
cudaError_t cu_kv_store(const float *src, int64_t n_tok, int64_t row_elems, const int32_t *pos,
                        void *dst, bool f16, cudaStream_t stream);

/* x += y; g = g / (1 + exp(-g)) * u */
cudaError_t cu_add(float *x, const float *y, int64_t n, cudaStream_t stream);
cudaError_t cu_swiglu(float *g, const float *u, int64_t n, cudaStream_t stream);

/* ops_attention (gpu_types.h's gpu_attend_args) */
cudaError_t cu_attention(const gpu_attend_args *a, cudaStream_t stream);

#endif /* LARES_GPU_CUDA_IMPL_H */
