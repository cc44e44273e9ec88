/*
 * The packed-activation GEMM (gemm_x86.h) for 8 lanes of AVX2 without VNNI:
 * VPMADDUBSW products summed in int16 over as many 4-quant runs as the type's
 * largest code allows, then widened once with VPMADDWD (run_sums). The IQ4
 * types' codes reach 241 and are split in nibbles (apply32_u8): 38-40 G MAC/s
 * against their row tiles' 22-28 (bench_gemm -c 128, Zen 4). Q8_0 keeps the
 * row tiles, which are faster for it (59 against 42).
 */
#define GEMM_LANES   8
#define GEMM_I16     1
#define GEMM_NAME(x) x##_avx2
#include "quant/gemm_x86.h"

void quant_install_gemm_avx2(quant_traits *t) {
    install_gemm(t);
}
