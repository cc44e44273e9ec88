/*
 * The reference trait table: one row per type lares computes with, every
 * kernel the scalar reference. dispatch.c copies it and swaps in SIMD kernels.
 */
#include "quant/kernels.h"

#define ROW(T, tid, blk, bytes, quantized, vdot, vtype)                                            \
    [tid] = {.name = #T,                                                                           \
             .type = tid,                                                                          \
             .blck_elems = blk,                                                                    \
             .blck_bytes = bytes,                                                                  \
             .is_quantized = quantized,                                                            \
             .to_float = dequant_##T##_ref,                                                        \
             .from_float_ref = quant_##T##_ref,                                                    \
             .from_float = quant_##T##_ref,                                                        \
             .vec_dot = vdot,                                                                      \
             .vec_dot_type = vtype}

const quant_traits quant_ref_table[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_F32] = {.name = "f32",
                       .type = GGUF_TYPE_F32,
                       .blck_elems = 1,
                       .blck_bytes = 4,
                       .to_float = dequant_f32_ref,
                       .from_float_ref = quant_f32_ref,
                       .from_float = quant_f32_ref,
                       .vec_dot = dot_f32_f32_ref,
                       .vec_dot_type = GGUF_TYPE_F32,
                       .kv_attend = attend_f32_ref},
    [GGUF_TYPE_F16] = {.name = "f16",
                       .type = GGUF_TYPE_F16,
                       .blck_elems = 1,
                       .blck_bytes = 2,
                       .to_float = dequant_f16_ref,
                       .from_float_ref = quant_f16_ref,
                       .from_float = quant_f16_ref,
                       .vec_dot = dot_f16_f32_ref,
                       .vec_dot_type = GGUF_TYPE_F32,
                       .kv_attend = attend_f16_ref},
    ROW(bf16, GGUF_TYPE_BF16, 1, 2, false, dot_bf16_f32_ref, GGUF_TYPE_F32),
    ROW(q4_0, GGUF_TYPE_Q4_0, QK4_0, sizeof(block_q4_0), true, dot_q4_0_q8_0_ref, GGUF_TYPE_Q8_0),
    ROW(q4_1, GGUF_TYPE_Q4_1, QK4_1, sizeof(block_q4_1), true, dot_q4_1_q8_1_ref, GGUF_TYPE_Q8_1),
    ROW(q5_0, GGUF_TYPE_Q5_0, QK5_0, sizeof(block_q5_0), true, dot_q5_0_q8_0_ref, GGUF_TYPE_Q8_0),
    ROW(q5_1, GGUF_TYPE_Q5_1, QK5_1, sizeof(block_q5_1), true, dot_q5_1_q8_1_ref, GGUF_TYPE_Q8_1),
    ROW(q8_0, GGUF_TYPE_Q8_0, QK8_0, sizeof(block_q8_0), true, dot_q8_0_q8_0_ref, GGUF_TYPE_Q8_0),
    ROW(q8_1, GGUF_TYPE_Q8_1, QK8_1, sizeof(block_q8_1), true, NULL, GGUF_TYPE_Q8_1),
    /* K-quants and i-quants (kquants.c, iquants.c) */
    ROW(q2_K, GGUF_TYPE_Q2_K, QK_K, sizeof(block_q2_K), true, dot_q2_K_q8_K_ref, GGUF_TYPE_Q8_K),
    ROW(q3_K, GGUF_TYPE_Q3_K, QK_K, sizeof(block_q3_K), true, dot_q3_K_q8_K_ref, GGUF_TYPE_Q8_K),
    ROW(q4_K, GGUF_TYPE_Q4_K, QK_K, sizeof(block_q4_K), true, dot_q4_K_q8_K_ref, GGUF_TYPE_Q8_K),
    ROW(q5_K, GGUF_TYPE_Q5_K, QK_K, sizeof(block_q5_K), true, dot_q5_K_q8_K_ref, GGUF_TYPE_Q8_K),
    ROW(q6_K, GGUF_TYPE_Q6_K, QK_K, sizeof(block_q6_K), true, dot_q6_K_q8_K_ref, GGUF_TYPE_Q8_K),
    ROW(q8_K, GGUF_TYPE_Q8_K, QK_K, sizeof(block_q8_K), true, NULL, GGUF_TYPE_Q8_K),
    ROW(iq4_nl, GGUF_TYPE_IQ4_NL, QK4_NL, sizeof(block_iq4_nl), true, dot_iq4_nl_q8_0_ref,
        GGUF_TYPE_Q8_0),
    ROW(iq4_xs, GGUF_TYPE_IQ4_XS, QK_K, sizeof(block_iq4_xs), true, dot_iq4_xs_q8_K_ref,
        GGUF_TYPE_Q8_K),
};

const quant_traits *quant_traits_ref(uint32_t type) {
    if (type >= GGUF_TYPE_COUNT || quant_ref_table[type].name == NULL) {
        return NULL;
    }
    return &quant_ref_table[type];
}

size_t quant_row_bytes(uint32_t type, int64_t n) {
    const quant_traits *t = quant_traits_ref(type);
    return t ? (size_t)(n / t->blck_elems) * t->blck_bytes : 0;
}
