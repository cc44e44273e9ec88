/*
 * The packed-activation GEMM (gemm_x86.h) for 8 lanes of AVX-VNNI, the
 * VEX-encoded VPDPBUSD (Intel 12th generation on, AMD Zen 4 on).
 */
#define GEMM_LANES   8
#define GEMM_NAME(x) x##_avxvnni
#include "quant/gemm_x86.h"

void quant_install_gemm_avxvnni(quant_traits *t) {
    install_gemm(t);
}
