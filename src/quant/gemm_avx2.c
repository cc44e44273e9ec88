/*
 * The packed-activation GEMM (gemm_x86.h) for 8 lanes of AVX2 without VNNI:
 * VPMADDUBSW products summed in int16 over as many 4-quant runs as the type's
 * largest code allows, then widened once with VPMADDWD (run_sums). Only the
 * types whose codes stay below 64 (4-, 5- and 6-bit, Q2_K, Q3_K); Q8_0 and the
 * IQ4 types keep the row tiles.
 */
#define GEMM_LANES   8
#define GEMM_I16     1
#define GEMM_NAME(x) x##_avx2
#include "quant/gemm_x86.h"

void quant_install_gemm_avx2(quant_traits *t) {
    install_gemm(t);
}
