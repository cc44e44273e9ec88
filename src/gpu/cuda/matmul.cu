/*
 * Matrix products over quantized weights on the device: one warp per output
 * row, lanes striding over the row's work items (a block, or a sub-block of a
 * K-quant super-block, so rows of 16 super-blocks still keep most lanes busy),
 * up to ROWS_PER_PASS activation rows per pass so each weight item is read once
 * for several tokens (mat-mat), then a warp reduction. Each item sums the
 * same integers as quant/'s reference dot product of the pair; the float
 * accumulation order differs (docs/gpu.md).
 */
#include "gpu/cuda/blocks.cuh"
#include "gpu/cuda/cuda_impl.h"
#include "gguf/gguf.h"
#include "gpu/gpu_types.h"

namespace {

constexpr int WARPS = 4;
constexpr int ROWS_PER_PASS = 4;

/* Q4_0 x Q8_0: one item per 32-element block */
struct dot_q4_0 {
    static constexpr int ITEMS = 1;
    static constexpr int ELEMS = QK4_0;
    __device__ static float item(const void *w, const void *a, int64_t blk, int, int64_t) {
        const block_q4_0 *x = (const block_q4_0 *)w + blk;
        const block_q8_0 *y = (const block_q8_0 *)a + blk;
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            sumi += ((x->qs[j] & 0x0f) - 8) * y->qs[j];
            sumi += ((x->qs[j] >> 4) - 8) * y->qs[j + QK4_0 / 2];
        }
        return (float)sumi * cu_f16(x->d) * cu_f16(y->d);
    }
};

/* Q8_0 x Q8_0 */
struct dot_q8_0 {
    static constexpr int ITEMS = 1;
    static constexpr int ELEMS = QK8_0;
    __device__ static float item(const void *w, const void *a, int64_t blk, int, int64_t) {
        const block_q8_0 *x = (const block_q8_0 *)w + blk;
        const block_q8_0 *y = (const block_q8_0 *)a + blk;
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) {
            sumi += x->qs[j] * y->qs[j];
        }
        return (float)sumi * cu_f16(x->d) * cu_f16(y->d);
    }
};

/* Q4_K x Q8_K: one item per 32-element sub-block (8 per super-block):
 * dy * (d * sc * sum(q * y) - dmin * mn * sum(y)) */
struct dot_q4_K {
    static constexpr int ITEMS = 8;
    static constexpr int ELEMS = QK_K;
    __device__ static float item(const void *w, const void *a, int64_t blk, int sb, int64_t) {
        const block_q4_K *x = (const block_q4_K *)w + blk;
        const block_q8_K *y = (const block_q8_K *)a + blk;
        const uint8_t *q = x->qs + 32 * (sb / 2);
        const int8_t *q8 = y->qs + 32 * sb;
        const int shift = 4 * (sb % 2);
        int dot = 0, ys = 0;
        for (int l = 0; l < 32; l++) {
            dot += ((q[l] >> shift) & 0xf) * q8[l];
            ys += q8[l];
        }
        int sc, mn;
        cu_scale_min_k4(x->scales, sb, &sc, &mn);
        return y->d * (cu_f16(x->d) * (float)(sc * dot) - cu_f16(x->dmin) * (float)(mn * ys));
    }
};

/* Q6_K x Q8_K: one item per 16-element group: dy * d * sc * sum(level * y) */
struct dot_q6_K {
    static constexpr int ITEMS = 16;
    static constexpr int ELEMS = QK_K;
    __device__ static float item(const void *w, const void *a, int64_t blk, int g, int64_t) {
        const block_q6_K *x = (const block_q6_K *)w + blk;
        const block_q8_K *y = (const block_q8_K *)a + blk;
        int dot = 0;
        for (int l = 0; l < 16; l++) {
            dot += cu_q6k_level(x, 16 * g + l) * y->qs[16 * g + l];
        }
        return y->d * cu_f16(x->d) * (float)(x->scales[g] * dot);
    }
};

/* F16 x F32: one item per 32 elements (fewer at the end of a row) */
struct dot_f16 {
    static constexpr int ITEMS = 1;
    static constexpr int ELEMS = 32;
    __device__ static float item(const void *w, const void *a, int64_t blk, int, int64_t n_in) {
        const uint16_t *x = (const uint16_t *)w + 32 * blk;
        const float *y = (const float *)a + 32 * blk;
        const int n = n_in - 32 * blk < 32 ? (int)(n_in - 32 * blk) : 32; /* the row's tail */
        float s = 0;
        for (int j = 0; j < n; j++) {
            s += cu_f16(x[j]) * y[j];
        }
        return s;
    }
};

/* F32 x F32: one item per 32 elements (fewer at the end of a row) */
struct dot_f32 {
    static constexpr int ITEMS = 1;
    static constexpr int ELEMS = 32;
    __device__ static float item(const void *w, const void *a, int64_t blk, int, int64_t n_in) {
        const float *x = (const float *)w + 32 * blk;
        const float *y = (const float *)a + 32 * blk;
        const int n = n_in - 32 * blk < 32 ? (int)(n_in - 32 * blk) : 32;
        float s = 0;
        for (int j = 0; j < n; j++) {
            s += x[j] * y[j];
        }
        return s;
    }
};

template <typename D>
__global__ void matmul_kernel(const uint8_t *w, size_t w_row_bytes, int64_t n_in, int64_t n_out,
                              const uint8_t *act, size_t act_row_bytes, int64_t n_rows,
                              float *y) {
    const int lane = threadIdx.x % 32;
    const int64_t o = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    if (o >= n_out) {
        return;
    }
    const uint8_t *wrow = w + (size_t)o * w_row_bytes;
    const int64_t n_items = (n_in + D::ELEMS - 1) / D::ELEMS * D::ITEMS;
    for (int64_t r0 = 0; r0 < n_rows; r0 += ROWS_PER_PASS) {
        const int nr = (int)(n_rows - r0 < ROWS_PER_PASS ? n_rows - r0 : ROWS_PER_PASS);
        float acc[ROWS_PER_PASS] = {0, 0, 0, 0};
        for (int64_t it = lane; it < n_items; it += 32) {
            const int64_t blk = it / D::ITEMS;
            const int sub = (int)(it % D::ITEMS);
            for (int j = 0; j < nr; j++) {
                acc[j] += D::item(wrow, act + (size_t)(r0 + j) * act_row_bytes, blk, sub, n_in);
            }
        }
        for (int j = 0; j < nr; j++) {
            float v = acc[j];
            for (int off = 16; off > 0; off /= 2) {
                v += __shfl_down_sync(0xffffffffu, v, off);
            }
            if (lane == 0) {
                y[(r0 + j) * n_out + o] = v;
            }
        }
    }
}

template <typename D>
cudaError_t launch(const void *w, size_t w_row_bytes, int64_t n_in, int64_t n_out,
                   const void *act, size_t act_row_bytes, int64_t n_rows, float *y,
                   cudaStream_t stream) {
    const unsigned grid = (unsigned)((n_out + WARPS - 1) / WARPS);
    matmul_kernel<D><<<grid, 32 * WARPS, 0, stream>>>((const uint8_t *)w, w_row_bytes, n_in,
                                                      n_out, (const uint8_t *)act, act_row_bytes,
                                                      n_rows, y);
    return cudaGetLastError();
}

/* ---- dequantization: one thread per element, the reference's operations in
 * its order, each rounded (no contraction into fused multiply-adds) ---- */

__global__ void dequant_kernel(const uint8_t *src, uint32_t type, int64_t n, float *out) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) {
        return;
    }
    switch (type) {
    case GGUF_TYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)src + e / QK4_0;
        const int j = (int)(e % QK4_0);
        const int q = j < 16 ? (b->qs[j] & 0x0f) : (b->qs[j - 16] >> 4);
        out[e] = __fmul_rn((float)(q - 8), cu_f16(b->d));
        break;
    }
    case GGUF_TYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)src + e / QK8_0;
        out[e] = __fmul_rn((float)b->qs[e % QK8_0], cu_f16(b->d));
        break;
    }
    case GGUF_TYPE_Q4_K: {
        const block_q4_K *b = (const block_q4_K *)src + e / QK_K;
        const int i = (int)(e % QK_K), chunk = i / 64, l = i % 64;
        const int sb = 2 * chunk + (l >= 32);
        int sc, mn;
        cu_scale_min_k4(b->scales, sb, &sc, &mn);
        const uint8_t qb = b->qs[32 * chunk + l % 32];
        const int q = l < 32 ? (qb & 0xf) : (qb >> 4);
        const float d1 = __fmul_rn(cu_f16(b->d), (float)sc);
        const float m1 = __fmul_rn(cu_f16(b->dmin), (float)mn);
        out[e] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
        break;
    }
    case GGUF_TYPE_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)src + e / QK_K;
        const int i = (int)(e % QK_K);
        const float ds = __fmul_rn(cu_f16(b->d), (float)b->scales[i / 16]);
        out[e] = __fmul_rn(ds, (float)cu_q6k_level(b, i));
        break;
    }
    case GGUF_TYPE_F16:
        out[e] = cu_f16(((const uint16_t *)src)[e]);
        break;
    case GGUF_TYPE_F32:
        out[e] = ((const float *)src)[e];
        break;
    default:
        break;
    }
}

} // namespace

bool cu_type_ok(uint32_t t) {
    return gpu_type_ok(t);
}

cudaError_t cu_matmul(const void *w, uint32_t w_type, int64_t n_in, int64_t n_out,
                      const void *act, size_t act_row_bytes, int64_t n_rows, float *y,
                      cudaStream_t stream) {
    /* one case per row of the GPU's type table (gpu_types.h) */
#define LAUNCH(type, dot, block, qk)                                                               \
    case type:                                                                                     \
        return launch<dot>(w, (size_t)(n_in / (qk)) * sizeof(block), n_in, n_out, act,            \
                           act_row_bytes, n_rows, y, stream);
    switch (w_type) {
        GPU_TYPE_TABLE(LAUNCH)
    default:
        return cudaErrorInvalidValue;
    }
#undef LAUNCH
}

cudaError_t cu_dequant(const void *src, uint32_t type, int64_t n, float *out, cudaStream_t stream) {
    if (!cu_type_ok(type)) {
        return cudaErrorInvalidValue;
    }
    const unsigned grid = (unsigned)((n + 255) / 256);
    dequant_kernel<<<grid, 256, 0, stream>>>((const uint8_t *)src, type, n, out);
    return cudaGetLastError();
}
