/*
 * The one table of the weight types the GPU backends run: a new type is a
 * row here (and its kernels in cuda/), nothing else. C and CUDA read it alike:
 * the cost model and the CPU measurements (estimate.c, measure.c) take the
 * type, the CUDA backend (cuda/matmul.cu) its dot kernel and its block.
 *
 * X(type, dot kernel, block struct, values per block)
 */
#ifndef LARES_GPU_TYPES_H
#define LARES_GPU_TYPES_H

#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

#define GPU_TYPE_TABLE(X)                                                                          \
    X(GGUF_TYPE_Q4_0, dot_q4_0, block_q4_0, QK4_0)                                                 \
    X(GGUF_TYPE_Q8_0, dot_q8_0, block_q8_0, QK8_0)                                                 \
    X(GGUF_TYPE_Q4_K, dot_q4_K, block_q4_K, QK_K)                                                  \
    X(GGUF_TYPE_Q6_K, dot_q6_K, block_q6_K, QK_K)                                                  \
    X(GGUF_TYPE_F16, dot_f16, uint16_t, 1)                                                         \
    X(GGUF_TYPE_F32, dot_f32, float, 1)

#define GPU_TYPE_CASE(type, dot, block, qk) case type:
/* true when the GPU backends have kernels for weights of this type */
static inline bool gpu_type_ok(uint32_t type) {
    switch (type) {
        GPU_TYPE_TABLE(GPU_TYPE_CASE)
        return true;
    default:
        return false;
    }
}
#undef GPU_TYPE_CASE

/* ops_attention on the device: q and out n_tok x n_head x head_dim; k and v
 * the sequence's cache rows (n_head_kv x head_dim each); token t sees rows
 * 0..pos[t] (pos on the device; n_kv_max the largest pos + 1). */
typedef struct gpu_attend_args {
    const float *q;
    float *out;
    const int32_t *pos;
    int64_t n_tok, n_head, n_head_kv, head_dim;
    float scale;
    const void *k, *v;
    bool kv_f16;
    int64_t n_kv_max;
} gpu_attend_args;

#endif /* LARES_GPU_TYPES_H */
