/*
 * The rest of a layer on the device: RMSNorm (Zhang & Sennrich 2019), RoPE
 * (Su et al. 2021; NORM rotates adjacent pairs, NEOX halves) and grouped-query
 * attention over a KV cache (Ainslie et al. 2023), each the same arithmetic as
 * its ops/ counterpart (products and sums rounded one by one where ops/ does
 * them that way, so only sums over many terms differ in order).
 */
#include "gpu/cuda/blocks.cuh"
#include "gpu/cuda/cuda_impl.h"

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

/* one thread per rotated pair of one head */
__global__ void rope_kernel(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                            const float *cs, int mode) {
    const int64_t half = n_rot / 2;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_heads * half) {
        return;
    }
    const int64_t h = t / half, i = t % half;
    float *xh = x + h * head_dim;
    const float c = cs[2 * i], s = cs[2 * i + 1];
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
__global__ void attention_kernel(cu_attn_args a) {
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

} // namespace

cudaError_t cu_rmsnorm(const float *x, const float *w, int64_t n, int64_t rows, float eps,
                       float *out, cudaStream_t stream) {
    rmsnorm_kernel<<<(unsigned)rows, NORM_THREADS, 0, stream>>>(x, w, n, eps, out);
    return cudaGetLastError();
}

cudaError_t cu_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float *cs,
                    int mode, cudaStream_t stream) {
    const int64_t n = n_heads * (n_rot / 2);
    rope_kernel<<<(unsigned)((n + 127) / 128), 128, 0, stream>>>(x, n_heads, head_dim, n_rot, cs,
                                                                 mode);
    return cudaGetLastError();
}

cudaError_t cu_attention(const cu_attn_args *a, cudaStream_t stream) {
    const size_t shmem = (size_t)((a->n_kv_max + 1) & ~(int64_t)1) * sizeof(float) +
                         ATTN_THREADS * sizeof(double);
    if (a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0 || shmem > 48 * 1024) {
        return cudaErrorInvalidValue; /* longer contexts: a tiled kernel (docs/gpu.md) */
    }
    attention_kernel<<<(unsigned)(a->n_tok * a->n_head), ATTN_THREADS, shmem, stream>>>(*a);
    return cudaGetLastError();
}
