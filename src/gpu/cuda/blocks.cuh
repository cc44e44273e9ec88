/*
 * Device-side decoding of quant/'s block formats (layouts in quant/blocks.h,
 * shared with the CPU: the same structs, the same sizes) and of fp16.
 */
#ifndef LARES_GPU_CUDA_BLOCKS_CUH
#define LARES_GPU_CUDA_BLOCKS_CUH

#include "quant/blocks.h"

/* binary16 -> binary32, exact for every input (subnormals normalised, NaN
 * payloads kept), as quant/half.h's f16_to_f32 */
__device__ __forceinline__ float cu_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        uint32_t e = 113;
        while ((man & 0x400u) == 0) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
    }
    return __uint_as_float(bits);
}

/* the 6-bit scale and min of sub-block j (0..7) of a Q4_K block (quant/kquant_impl.h) */
__device__ __forceinline__ void cu_scale_min_k4(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* signed level (-32..31) of element e of a Q6_K block (quant/blocks.h) */
__device__ __forceinline__ int cu_q6k_level(const block_q6_K *b, int e) {
    const int h = e / 128, r = e % 128, l = e % 32, part = r / 32;
    const int lo = (b->ql[64 * h + 32 * (part % 2) + l] >> (4 * (part / 2))) & 0xf;
    const int hi = (b->qh[32 * h + l] >> (2 * part)) & 3;
    return (lo | (hi << 4)) - 32;
}

#endif /* LARES_GPU_CUDA_BLOCKS_CUH */
