/*
 * The rest of a layer on the device: RMSNorm (Zhang & Sennrich 2019), RoPE
 * (Su et al. 2021; NORM rotates adjacent pairs, NEOX halves) and grouped-query
 * attention over a KV cache (Ainslie et al. 2023), each the same arithmetic as
 * its ops/ counterpart (products and sums rounded one by one where ops/ does
 * them that way, so only sums over many terms differ in order).
 */
#include "gpu/cuda/blocks.cuh"
#include "gpu/cuda/cuda_impl.h"
#include "gguf/gguf.h"

#include <cuda_fp16.h>

namespace {

constexpr int NORM_THREADS = 256;

/* one block per row: the mean of squares in double, as ops_rmsnorm */
__global__ void rmsnorm_kernel(const float *x, const float *w, int64_t n, float eps, float *out) {
    __shared__ double part[NORM_THREADS];
    const float *xr = x + blockIdx.x * n;
    float *orow = out + blockIdx.x * n;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) {
        ss += (double)xr[i] * xr[i];
    }
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int s = NORM_THREADS / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) {
            part[threadIdx.x] += part[threadIdx.x + s];
        }
        __syncthreads();
    }
    const float scale = (float)(1.0 / sqrt(part[0] / (double)n + (double)eps));
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) {
        const float v = __fmul_rn(xr[i], scale);
        orow[i] = w != nullptr ? __fmul_rn(v, w[i]) : v;
    }
}

/* one thread per rotated pair of one head of one row */
__global__ void rope_kernel(float *x, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                            int64_t n_rot, const float *cs, int mode) {
    const int64_t half = n_rot / 2;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_tok * n_heads * half) {
        return;
    }
    const int64_t row = t / (n_heads * half), h = t / half % n_heads, i = t % half;
    float *xh = x + (row * n_heads + h) * head_dim;
    const float *c_s = cs + row * n_rot;
    const float c = c_s[2 * i], s = c_s[2 * i + 1];
    const int64_t i0 = mode == 2 ? i : 2 * i, i1 = mode == 2 ? i + half : 2 * i + 1;
    const float a = xh[i0], b = xh[i1];
    xh[i0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    xh[i1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

__device__ __forceinline__ float kv_at(const void *base, bool f16, size_t idx) {
    return f16 ? cu_f16(((const uint16_t *)base)[idx]) : ((const float *)base)[idx];
}

constexpr int ATTN_THREADS = 128;

/* one block per (token, head): scores into shared memory, softmax as the
 * reference attention's (quant/attend.c: max-subtracted, the sum in double),
 * then the weighted values */
__global__ void attention_kernel(gpu_attend_args a) {
    extern __shared__ float scores[]; /* n_kv_max floats, then ATTN_THREADS doubles */
    double *red = (double *)(scores + ((a.n_kv_max + 1) & ~(int64_t)1));
    const int64_t tok = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
    const int64_t g = h / (a.n_head / a.n_head_kv), hd = a.head_dim;
    const size_t row = (size_t)(a.n_head_kv * hd);
    const float *q = a.q + (tok * a.n_head + h) * hd;
    const int64_t n_kv = (int64_t)a.pos[tok] + 1;
    for (int64_t j = threadIdx.x; j < n_kv; j += ATTN_THREADS) {
        float s = 0;
        for (int64_t d = 0; d < hd; d++) {
            s += kv_at(a.k, a.kv_f16, j * row + g * hd + d) * q[d];
        }
        scores[j] = s * a.scale;
    }
    __syncthreads();
    /* max */
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < n_kv; j += ATTN_THREADS) {
        mx = fmaxf(mx, scores[j]);
    }
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int s = ATTN_THREADS / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) {
            red[threadIdx.x] = fmax(red[threadIdx.x], red[threadIdx.x + s]);
        }
        __syncthreads();
    }
    mx = (float)red[0];
    __syncthreads();
    double sum = 0;
    for (int64_t j = threadIdx.x; j < n_kv; j += ATTN_THREADS) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = ATTN_THREADS / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) {
            red[threadIdx.x] += red[threadIdx.x + s];
        }
        __syncthreads();
    }
    const float inv = (float)(1.0 / red[0]);
    float *out = a.out + (tok * a.n_head + h) * hd;
    for (int64_t d = threadIdx.x; d < hd; d += ATTN_THREADS) {
        float acc = 0;
        for (int64_t j = 0; j < n_kv; j++) {
            acc += __fmul_rn(scores[j], inv) * kv_at(a.v, a.kv_f16, j * row + g * hd + d);
        }
        out[d] = acc;
    }
}

/* binary32 -> binary16, round to nearest even (quant/half.h's f32_to_f16) */
__device__ __forceinline__ uint16_t cu_to_f16(float f) {
    return __half_as_ushort(__float2half_rn(f));
}

/* Q8_0: one warp per block of 32, lane j its element j (quant_q8_0_ref) */
__global__ void quant_q8_0_kernel(const float *x, int64_t n_blocks, block_q8_0 *out) {
    const int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (b >= n_blocks) {
        return;
    }
    const float v = x[b * QK8_0 + lane];
    float amax = fabsf(v);
    for (int off = 16; off > 0; off /= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    }
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0 ? __fdiv_rn(1.0f, d) : 0.0f;
    out[b].qs[lane] = (int8_t)roundf(__fmul_rn(v, id));
    if (lane == 0) {
        out[b].d = cu_to_f16(d);
    }
}

/* Q8_K: one warp per block of 256, lane l its elements 8l..8l+7
 * (quant_q8_K_ref: the value of largest magnitude, the first on a tie, sets
 * the scale -127 / max; levels rounded to nearest even, at most 127) */
__global__ void quant_q8_K_kernel(const float *x, int64_t n_blocks, block_q8_K *out) {
    const int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (b >= n_blocks) {
        return;
    }
    const float *xb = x + b * QK_K + 8 * lane;
    float v[8];
    float amax = 0;
    int at = -1; /* index of this lane's first largest magnitude */
    for (int j = 0; j < 8; j++) {
        v[j] = xb[j];
        if (amax < fabsf(v[j])) {
            amax = fabsf(v[j]);
            at = 8 * lane + j;
        }
    }
    float best = amax;
    int best_at = at < 0 ? QK_K : at;
    for (int off = 16; off > 0; off /= 2) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, off);
        const int oa = __shfl_xor_sync(0xffffffffu, best_at, off);
        if (ob > best || (ob == best && oa < best_at)) {
            best = ob;
            best_at = oa;
        }
    }
    block_q8_K *o = out + b;
    if (best == 0) {
        for (int j = 0; j < 8; j++) {
            o->qs[8 * lane + j] = 0;
        }
        if (lane < QK_K / 16) {
            o->bsums[lane] = 0;
        }
        if (lane == 0) {
            o->d = 0;
        }
        return;
    }
    const float max = x[b * QK_K + best_at];
    const float iscale = __fdiv_rn(-127.0f, max);
    int sum = 0;
    for (int j = 0; j < 8; j++) {
        const int q = (int)rintf(__fmul_rn(iscale, v[j]));
        const int8_t c = (int8_t)(q < 127 ? q : 127);
        o->qs[8 * lane + j] = c;
        sum += c;
    }
    /* groups of 16: lanes 2g and 2g + 1 */
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (lane % 2 == 0) {
        o->bsums[lane / 2] = (int16_t)sum;
    }
    if (lane == 0) {
        o->d = __fdiv_rn(1.0f, iscale);
    }
}

__global__ void kv_store_kernel(const float *src, int64_t n_tok, int64_t row_elems,
                                const int32_t *pos, void *dst, bool f16) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * row_elems) {
        return;
    }
    const int64_t t = i / row_elems, e = i % row_elems;
    const size_t at = (size_t)pos[t] * (size_t)row_elems + (size_t)e;
    if (f16) {
        ((uint16_t *)dst)[at] = cu_to_f16(src[i]);
    } else {
        ((float *)dst)[at] = src[i];
    }
}

__global__ void add_kernel(float *x, const float *y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = __fadd_rn(x[i], y[i]);
    }
}

__global__ void swiglu_kernel(float *g, const float *u, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = g[i];
        g[i] = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), u[i]);
    }
}

unsigned blocks_for(int64_t n, int threads) {
    return (unsigned)((n + threads - 1) / threads);
}

} // namespace

cudaError_t cu_quant(const float *x, int64_t rows, int64_t n, uint32_t type, void *out,
                     cudaStream_t stream) {
    /* rows are whole blocks, so the rows' blocks are one run */
    if (type == GGUF_TYPE_Q8_0 && n % QK8_0 == 0) {
        const int64_t nb = rows * (n / QK8_0);
        quant_q8_0_kernel<<<blocks_for(nb * 32, 256), 256, 0, stream>>>(x, nb, (block_q8_0 *)out);
    } else if (type == GGUF_TYPE_Q8_K && n % QK_K == 0) {
        const int64_t nb = rows * (n / QK_K);
        quant_q8_K_kernel<<<blocks_for(nb * 32, 256), 256, 0, stream>>>(x, nb, (block_q8_K *)out);
    } else {
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t cu_kv_store(const float *src, int64_t n_tok, int64_t row_elems, const int32_t *pos,
                        void *dst, bool f16, cudaStream_t stream) {
    const int64_t n = n_tok * row_elems;
    kv_store_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(src, n_tok, row_elems, pos, dst, f16);
    return cudaGetLastError();
}

cudaError_t cu_add(float *x, const float *y, int64_t n, cudaStream_t stream) {
    add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}

cudaError_t cu_swiglu(float *g, const float *u, int64_t n, cudaStream_t stream) {
    swiglu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(g, u, n);
    return cudaGetLastError();
}

cudaError_t cu_rmsnorm(const float *x, const float *w, int64_t n, int64_t rows, float eps,
                       float *out, cudaStream_t stream) {
    rmsnorm_kernel<<<(unsigned)rows, NORM_THREADS, 0, stream>>>(x, w, n, eps, out);
    return cudaGetLastError();
}

cudaError_t cu_rope(float *x, int64_t n_tok, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const float *cs, int mode, cudaStream_t stream) {
    const int64_t n = n_tok * n_heads * (n_rot / 2);
    rope_kernel<<<(unsigned)((n + 127) / 128), 128, 0, stream>>>(x, n_tok, n_heads, head_dim,
                                                                 n_rot, cs, mode);
    return cudaGetLastError();
}

cudaError_t cu_attention(const gpu_attend_args *a, cudaStream_t stream) {
    const size_t shmem = (size_t)((a->n_kv_max + 1) & ~(int64_t)1) * sizeof(float) +
                         ATTN_THREADS * sizeof(double);
    if (a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0 || shmem > 48 * 1024) {
        return cudaErrorInvalidValue; /* longer contexts: a tiled kernel (docs/gpu.md) */
    }
    attention_kernel<<<(unsigned)(a->n_tok * a->n_head), ATTN_THREADS, shmem, stream>>>(*a);
    return cudaGetLastError();
}
