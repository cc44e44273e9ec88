/*
 * The K-quant kernels of kquants_x86.h with AVX-512 VNNI (the EVEX VPDPWSSD on
 * 256-bit registers, AVX512VL): each 16-group's products are multiplied by
 * their scale and added in one instruction.
 */
#include <immintrin.h>

#define KQ_MAC(sum, p, s) _mm256_dpwssd_epi32(sum, p, s)
#include "quant/kquants_x86.h"

void quant_install_avx512_kquants(quant_traits *t) {
    install_kquants(t);
}
