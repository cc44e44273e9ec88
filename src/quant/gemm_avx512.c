/*
 * The packed-activation GEMM (gemm_x86.h) for 16 lanes of AVX-512 VNNI
 * (AMD Zen 4/5, Intel Ice Lake server and later).
 */
#define GEMM_LANES   16
#define GEMM_NAME(x) x##_avx512
#include "quant/gemm_x86.h"

void quant_install_gemm_avx512(quant_traits *t) {
    install_gemm(t);
}
