/*
 * Helpers shared by the K-quant and i-quant kernels (kquants*.c, iquants*.c):
 * field access into blocks that may sit at any byte address, and the decoding
 * of packed sub-block scales. Inside the quant module only.
 *
 * Blocks inside a GGUF mapping are aligned to nothing beyond one byte in
 * general, so kernels walk them as bytes: a field is `base + offsetof(...)`
 * and multi-byte fields are read with the little-endian helpers of core.h.
 */
#ifndef LARES_QUANT_KQUANT_IMPL_H
#define LARES_QUANT_KQUANT_IMPL_H

#include "quant/kernels.h"

#include <stddef.h>

/* the address of field f of the block of type T that starts at byte pointer b */
#define KQ_FIELD(b, T, f) ((b) + offsetof(T, f))

static inline float kq_f16(const uint8_t *p) {
    return f16_to_f32(rd_u16le(p));
}

/* Q8_K fields */
static inline float q8k_d(const uint8_t *b) {
    return rd_f32le(KQ_FIELD(b, block_q8_K, d));
}
static inline int q8k_bsum(const uint8_t *b, int g) {
    return (int16_t)rd_u16le(KQ_FIELD(b, block_q8_K, bsums) + 2 * g);
}

/*
 * Q4_K and Q5_K keep 8 scales and 8 mins of 6 bits in 12 bytes:
 *   bytes 0..3   low 6 bits: scale 0..3; top 2 bits: bits 4..5 of scale 4..7
 *   bytes 4..7   low 6 bits: min 0..3;   top 2 bits: bits 4..5 of min 4..7
 *   bytes 8..11  low nibble: bits 0..3 of scale 4..7; high nibble: of min 4..7
 */
static inline void kq_scale_min_k4(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0x0f) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/*
 * Q3_K keeps 16 scales of 6 bits, offset by 32, in 12 bytes:
 *   bytes 0..7   low nibble: bits 0..3 of scale j (j < 8); high nibble: of scale j + 8
 *   bytes 8..11  2-bit fields: byte 8 + j % 4, bits 2 * (j / 4), are bits 4..5 of scale j
 */
static inline void kq_scales_q3(const uint8_t *s, int out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
        int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (lo | (hi << 4)) - 32;
    }
}

/* IQ4_NL / IQ4_XS codebook: a 4-bit index selects one of these, times the scale */
static const int8_t kq_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                           1,    13,   25,  38,  53,  69,  89,  113};

/* IQ4_XS sub-block scale ib (0..7), offset removed: -32..31 */
static inline int kq_iq4xs_scale(const uint8_t *b, int ib) {
    const uint8_t *sl = KQ_FIELD(b, block_iq4_xs, scales_l);
    const unsigned sh = rd_u16le(KQ_FIELD(b, block_iq4_xs, scales_h));
    int lo = (sl[ib / 2] >> (4 * (ib % 2))) & 0x0f;
    int hi = (int)((sh >> (2 * ib)) & 3);
    return (lo | (hi << 4)) - 32;
}

/* the i-quant half of quant_install_{avx2,neon}_kquants (iquants_{avx2,neon}.c) */
void quant_install_avx2_iquants(quant_traits *t);
void quant_install_neon_iquants(quant_traits *t, bool dotprod);

#endif /* LARES_QUANT_KQUANT_IMPL_H */
