/*
 * What test_gemm and test_rows share: a seeded xorshift64* (each test file
 * defines QUANT_ACTS_SEED, its own stream, before including this), gaussian
 * values, the activations both products are tested on, and the kernel
 * families this build may carry.
 */
#ifndef LARES_TESTS_QUANT_ACTS_H
#define LARES_TESTS_QUANT_ACTS_H

#include "quant/quant.h"

#include <math.h>
#include <stdint.h>

static uint64_t rng_state = QUANT_ACTS_SEED;

static uint64_t rng_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static float rng_gauss(void) {
    float u = (float)((rng_u64() >> 40) + 1) / (float)(1u << 24);
    float v = (float)(rng_u64() >> 40) / (float)(1u << 24);
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

/* an activation value: gaussian, some rows with outliers, some blocks zero */
static float act_value(int64_t r, int64_t i) {
    if (r % 5 == 3 && (i / 32) % 3 == 1) {
        return 0.0f; /* a whole group of zeros: d = 0 */
    }
    float v = rng_gauss();
    if (r % 7 == 2 && i % 61 == 0) {
        v *= 40.0f; /* an outlier channel */
    }
    return v;
}

static const struct {
    const char *name;
    quant_isa isa;
} families[] = {{"avx2", QUANT_ISA_AVX2},
                {"avxvnni", QUANT_ISA_AVXVNNI},
                {"avx512", QUANT_ISA_AVX512},
                {"neon", QUANT_ISA_NEON},
                {"neon-nodot", QUANT_ISA_NEON_NODOT},
                {"neon-i8mm", QUANT_ISA_NEON_I8MM}};

#endif /* LARES_TESTS_QUANT_ACTS_H */
