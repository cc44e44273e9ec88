/*
 * The K-quant kernels of kquants_x86.h with AVX-VNNI: VPDPWSSD multiplies
 * each 16-group's products by its scale and adds them in one instruction.
 */
#include <immintrin.h>

#define KQ_MAC(sum, p, s) _mm256_dpwssd_avx_epi32(sum, p, s)
#include "quant/kquants_x86.h"

void quant_install_avxvnni_kquants(quant_traits *t) {
    install_kquants(t);
}
