/*
 * The K-quant kernels of kquants_x86.h for AVX2: each 16-group's products
 * meet their scale in VPMADDWD and are added with VPADDD.
 */
#include <immintrin.h>

#define KQ_MAC(sum, p, s) _mm256_add_epi32(sum, _mm256_madd_epi16(p, s))
#include "quant/kquants_x86.h"

void quant_install_avx2_kquants(quant_traits *t) {
    install_kquants(t);
    quant_install_avx2_iquants(t);
}
