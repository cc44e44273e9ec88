/*
 * Kernel declarations shared inside the quant module: the scalar references
 * (the definition of correct) and the ISA-specific variants that dispatch.c
 * may put in their place. Not part of the module's interface.
 */
#ifndef LARES_QUANT_KERNELS_H
#define LARES_QUANT_KERNELS_H

#include "quant/blocks.h"
#include "quant/quant.h"

/* Asks for the n bytes at p (a weight row streaming from memory, some way
 * ahead of where it is read), a cache line at a time. Prefetches never
 * fault, so asking past the row's end is harmless. */
static inline __attribute__((always_inline)) void quant_prefetch(const void *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) {
        __builtin_prefetch((const char *)p + o, 0, 3);
    }
}

#define QUANT_DECLARE_REF(t)                                                                       \
    void dequant_##t##_ref(const void *restrict src, float *restrict dst, int64_t n);             \
    void quant_##t##_ref(const float *restrict src, void *restrict dst, int64_t n)

QUANT_DECLARE_REF(f32);
QUANT_DECLARE_REF(f16);
QUANT_DECLARE_REF(bf16);
QUANT_DECLARE_REF(q4_0);
QUANT_DECLARE_REF(q4_1);
QUANT_DECLARE_REF(q5_0);
QUANT_DECLARE_REF(q5_1);
QUANT_DECLARE_REF(q8_0);
QUANT_DECLARE_REF(q8_1);
/* K-quants and i-quants (kquants.c, iquants.c) */
QUANT_DECLARE_REF(q2_K);
QUANT_DECLARE_REF(q3_K);
QUANT_DECLARE_REF(q4_K);
QUANT_DECLARE_REF(q5_K);
QUANT_DECLARE_REF(q6_K);
QUANT_DECLARE_REF(q8_K);
QUANT_DECLARE_REF(iq4_nl);
QUANT_DECLARE_REF(iq4_xs);

/* dot products, reference: weight type x activation type */
void dot_f32_f32_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_f16_f32_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_bf16_f32_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q4_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q4_1_q8_1_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q5_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q5_1_q8_1_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q8_0_q8_0_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q2_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q3_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q4_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q5_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_q6_K_q8_K_ref(int64_t n, float *restrict s, const void *restrict x, const void *restrict y);
void dot_iq4_nl_q8_0_ref(int64_t n, float *restrict s, const void *restrict x,
                         const void *restrict y);
void dot_iq4_xs_q8_K_ref(int64_t n, float *restrict s, const void *restrict x,
                         const void *restrict y);

/* attention over a KV cache, reference (attend.c) */
void attend_f32_ref(const float *restrict q, int64_t nq, int64_t hd, const void *k, const void *v,
                    size_t row_bytes, int64_t n, float scale, float *restrict s,
                    float *restrict tmp, float *restrict out);
void attend_f16_ref(const float *restrict q, int64_t nq, int64_t hd, const void *k, const void *v,
                    size_t row_bytes, int64_t n, float scale, float *restrict s,
                    float *restrict tmp, float *restrict out);
/* the AVX2, AVX-512 and NEON families' (attend_avx2.c, attend_avx512.c, attend_neon.c) */
void quant_install_avx2_attend(quant_traits *t);
void quant_install_avx512_attend(quant_traits *t);
void quant_install_neon_attend(quant_traits *t);

/* the reference table (traits.c) */
extern const quant_traits quant_ref_table[GGUF_TYPE_COUNT];

/* ISA installers: each replaces the kernels it has in `t` (a copy of the
 * reference table). Defined only in builds that carry that ISA. */
void quant_install_avx2(quant_traits *t);
void quant_install_neon(quant_traits *t, bool dotprod);
/* per-file parts of the installers above (legacy_avx2.c, legacy_neon.c) */
void quant_install_avx2_legacy(quant_traits *t);
void quant_install_neon_legacy(quant_traits *t, bool dotprod);
/* The K-quant and i-quant kernels (kquants_avx2.c + iquants_avx2.c,
 * kquants_neon.c + iquants_neon.c), installed after the ones above. */
void quant_install_avx2_kquants(quant_traits *t);
/* the K-quant kernels again with VPDPWSSD (kquants_x86.h) */
void quant_install_avxvnni_kquants(quant_traits *t);
void quant_install_avx512_kquants(quant_traits *t);
/* The packed-activation GEMM (gemm_x86.h): 8 lanes of AVX-VNNI, 16 lanes of
 * AVX-512 VNNI. */
void quant_install_gemm_avxvnni(quant_traits *t);
void quant_install_gemm_avx2(quant_traits *t); /* gemm_avx2.c: no VNNI */
/* ... and 4 lanes of NEON by-lane SDOT (gemm_neon.c), where the CPU has dotprod */
void quant_install_gemm_neon_dotprod(quant_traits *t);
void quant_install_gemm_neon_i8mm(quant_traits *t); /* gemm_neon_i8mm.c */
void quant_install_gemm_avx512(quant_traits *t);
/* The few-row product (quant.h: quant_rows_fmt) with AVX-512 VNNI (rows_avx512.c) */
void quant_install_rows_avx512(quant_traits *t);
/* ... and at 256 bits with AVX-VNNI (rows_avxvnni.c) */
void quant_install_rows_avxvnni(quant_traits *t);
/* ... and with AVX2 alone (rows_avx2.c) */
void quant_install_rows_avx2(quant_traits *t);
/* ... and on AArch64 (rows_neon.c), with SDOT where dotprod is true */
void quant_install_rows_neon(quant_traits *t, bool dotprod);
void quant_install_neon_kquants(quant_traits *t, bool dotprod);

#endif /* LARES_QUANT_KERNELS_H */
