/*
 * IEEE 754 binary16 and bfloat16 conversions, scalar and exact.
 *
 * fp16 -> fp32 is exact for every input (subnormals, infinities, NaN payloads
 * kept). fp32 -> fp16 rounds to nearest, ties to even, as the F16C instruction
 * VCVTPS2PH does with rounding mode 0, so scalar and SIMD paths agree bit for
 * bit. bf16 is the upper half of an fp32; fp32 -> bf16 rounds to nearest even
 * and keeps NaN a NaN.
 */
#ifndef LARES_QUANT_HALF_H
#define LARES_QUANT_HALF_H

#include <stdint.h>
#include <string.h>

typedef uint16_t lares_f16;
typedef uint16_t lares_bf16;

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f16_to_f32(lares_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) { /* inf or NaN */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) { /* normal */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) { /* zero */
        bits = sign;
    } else { /* subnormal: normalise */
        uint32_t e = 113;
        while ((man & 0x400u) == 0) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
    }
    return f32_from_bits(bits);
}

static inline lares_f16 f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* inf or NaN: keep NaN quiet and non-zero */
        return (lares_f16)(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0));
    }
    if (ax >= 0x477ff000u) { /* rounds to >= 65520: overflow to inf */
        return (lares_f16)(sign | 0x7c00u);
    }
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) { /* below half of the smallest subnormal */
            return (lares_f16)sign;
        }
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) {
            q++;
        }
        return (lares_f16)(sign | q);
    }
    /* normal: rebias and round 13 dropped bits to nearest even */
    uint32_t r = ax - 0x38000000u; /* exponent 127 -> 15 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) {
        q++;
    }
    return (lares_f16)(sign | q);
}

static inline float bf16_to_f32(lares_bf16 h) {
    return f32_from_bits((uint32_t)h << 16);
}

static inline lares_bf16 f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) { /* NaN: force quiet */
        return (lares_bf16)((x >> 16) | 0x40u);
    }
    return (lares_bf16)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

#endif /* LARES_QUANT_HALF_H */
