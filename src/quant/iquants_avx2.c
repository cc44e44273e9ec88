/*
 * AVX2/FMA/F16C kernels of the non-linear 4-bit i-quants: IQ4_NL against Q8_0
 * and IQ4_XS against Q8_K, and their dequantization. Each names its reference
 * in iquants.c.
 *
 * The 4-bit indices select codebook values with one vpshufb (the 16 values
 * fit a register lane). The values are signed, so the u8 x s8 multiply of
 * vpmaddubsw takes |value| and moves the sign onto the activation
 * (vpsignb): |v| <= 127 keeps every pair sum within s16.
 */
#include "quant/kquant_impl.h"

#include <immintrin.h>

static inline float hsum256(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline __m256i codebook256(void) {
    const __m128i t = _mm_loadu_si128((const __m128i *)kq_iq4nl_values);
    return _mm256_set_m128i(t, t);
}

/* 16 bytes of indices -> the 32 codebook values of elements 0..31 of the
 * sub-block (low nibbles are elements 0..15, high nibbles 16..31) */
static inline __m256i iq4_values(__m256i book, const uint8_t *qs) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i idx =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
    return _mm256_shuffle_epi8(book, idx);
}

/* 16 pair sums (s16) of v * y for signed v and y */
static inline __m256i mul_signed(__m256i v, __m256i y) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
}

/* reference: dot_iq4_nl_q8_0_ref */
/* How far ahead of the block being computed a dot asks for the weight row
 * (prefetches never fault, so reaching past the row is harmless): mat-vec
 * streams each row from memory once. llama-1b IQ4_XS tg16, 2 threads, Intel
 * Xeon (family 6 model 207), three rounds alternating builds (t/s): without
 * 19.6-20.7, 2 KiB ahead 31.0-32.0, 4 KiB 30.8-34.2. 2 KiB is taken: on Zen 3
 * the K-quants' walks measured 4 KiB worse (rows_kquant_x86.h). */
#ifndef IQ_PREFETCH_BYTES
#define IQ_PREFETCH_BYTES 2048
#endif

static void dot_iq4_nl_q8_0_avx2(int64_t n, float *restrict s, const void *restrict vx,
                                 const void *restrict vy) {
    const __m256i book = codebook256();
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const int64_t nb = n / QK4_NL;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        /* 36 bytes a step: every line of the row is asked for */
        quant_prefetch((const uint8_t *)vx + i * sizeof(block_iq4_nl) + IQ_PREFETCH_BYTES, 1);
        for (int k = 0; k < 2; k++) {
            const uint8_t *bx = (const uint8_t *)vx + (i + k) * sizeof(block_iq4_nl);
            const uint8_t *by = (const uint8_t *)vy + (i + k) * sizeof(block_q8_0);
            const __m256i v = iq4_values(book, KQ_FIELD(bx, block_iq4_nl, qs));
            const __m256i y = _mm256_loadu_si256((const __m256i *)KQ_FIELD(by, block_q8_0, qs));
            const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(mul_signed(v, y), ones));
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(rd_u16le(KQ_FIELD(bx, block_iq4_nl, d))) *
                                            _cvtsh_ss(rd_u16le(KQ_FIELD(by, block_q8_0, d))));
            if (k == 0) {
                acc0 = _mm256_fmadd_ps(d, p, acc0);
            } else {
                acc1 = _mm256_fmadd_ps(d, p, acc1);
            }
        }
    }
    for (; i < nb; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_iq4_nl);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_0);
        const __m256i v = iq4_values(book, KQ_FIELD(bx, block_iq4_nl, qs));
        const __m256i y = _mm256_loadu_si256((const __m256i *)KQ_FIELD(by, block_q8_0, qs));
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(mul_signed(v, y), ones));
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(rd_u16le(KQ_FIELD(bx, block_iq4_nl, d))) *
                                        _cvtsh_ss(rd_u16le(KQ_FIELD(by, block_q8_0, d))));
        acc0 = _mm256_fmadd_ps(d, p, acc0);
    }
    *s = hsum256(_mm256_add_ps(acc0, acc1));
}

/* the eight sub-block scales of an IQ4_XS block, offset removed, as s16 in
 * both 128-bit lanes (see kq_iq4xs_scale) */
static inline __m256i iq4xs_scales(const uint8_t *b) {
    const __m128i sl = _mm_cvtsi32_si128((int)rd_u32le(KQ_FIELD(b, block_iq4_xs, scales_l)));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    /* low 4 bits: nibble ib % 2 of byte ib / 2, in ib order */
    const __m128i lo =
        _mm_unpacklo_epi8(_mm_and_si128(sl, m4), _mm_and_si128(_mm_srli_epi16(sl, 4), m4));
    /* high 2 bits: bits 2 ib..2 ib + 1 of scales_h */
    const __m256i h =
        _mm256_srlv_epi32(_mm256_set1_epi32(rd_u16le(KQ_FIELD(b, block_iq4_xs, scales_h))),
                          _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    const __m256i h3 = _mm256_and_si256(h, _mm256_set1_epi32(3));
    const __m128i h16 =
        _mm_packus_epi32(_mm256_castsi256_si128(h3), _mm256_extracti128_si256(h3, 1));
    const __m128i s16 = _mm_sub_epi16(_mm_or_si128(_mm_cvtepu8_epi16(lo), _mm_slli_epi16(h16, 4)),
                                      _mm_set1_epi16(32));
    return _mm256_broadcastsi128_si256(s16);
}

/* vpshufb masks broadcasting s16 word ib of each lane to the whole lane */
static const uint8_t word_masks[8][32] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
     0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1},
    {2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
     2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5,
     4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5},
    {6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7,
     6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9,
     8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9},
    {10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11,
     10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13,
     12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13},
    {14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15,
     14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15},
};

/* reference: dot_iq4_xs_q8_K_ref */
static void dot_iq4_xs_q8_K_avx2(int64_t n, float *restrict s, const void *restrict vx,
                                 const void *restrict vy) {
    const __m256i book = codebook256();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bx = (const uint8_t *)vx + i * sizeof(block_iq4_xs);
        const uint8_t *by = (const uint8_t *)vy + i * sizeof(block_q8_K);
        quant_prefetch(bx + IQ_PREFETCH_BYTES, sizeof(block_iq4_xs));
        const uint8_t *qs = KQ_FIELD(bx, block_iq4_xs, qs);
        const int8_t *q8 = (const int8_t *)KQ_FIELD(by, block_q8_K, qs);
        const __m256i sc = iq4xs_scales(bx);
        __m256i sumi0 = _mm256_setzero_si256(), sumi1 = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int ib = 0; ib < QK_K / 32; ib += 2) {
            /* two sub-blocks: bytes 0..15 index the first, 16..31 the second */
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 16 * ib));
            const __m256i lo = _mm256_and_si256(raw, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            const __m256i v0 = _mm256_shuffle_epi8(book, _mm256_permute2x128_si256(lo, hi, 0x20));
            const __m256i v1 = _mm256_shuffle_epi8(book, _mm256_permute2x128_si256(lo, hi, 0x31));
            const __m256i y0 = _mm256_loadu_si256((const __m256i *)(q8 + 32 * ib));
            const __m256i y1 = _mm256_loadu_si256((const __m256i *)(q8 + 32 * ib + 32));
            const __m256i s0 =
                _mm256_shuffle_epi8(sc, _mm256_loadu_si256((const __m256i *)word_masks[ib]));
            const __m256i s1 =
                _mm256_shuffle_epi8(sc, _mm256_loadu_si256((const __m256i *)word_masks[ib + 1]));
            sumi0 = _mm256_add_epi32(sumi0, _mm256_madd_epi16(mul_signed(v0, y0), s0));
            sumi1 = _mm256_add_epi32(sumi1, _mm256_madd_epi16(mul_signed(v1, y1), s1));
        }
        const float d = _cvtsh_ss(rd_u16le(KQ_FIELD(bx, block_iq4_xs, d))) * q8k_d(by);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(sumi0, sumi1)),
                              acc);
    }
    *s = hsum256(acc);
}

/* 32 values of one sub-block times dl, in order */
static inline void store_scaled(float *y, __m256i v, float dl) {
    const __m256 d = _mm256_set1_ps(dl);
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    _mm256_storeu_ps(y, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(
        y + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(
        y + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

/* reference: dequant_iq4_nl_ref */
static void dequant_iq4_nl_avx2(const void *restrict src, float *restrict y, int64_t n) {
    const __m256i book = codebook256();
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_iq4_nl);
        store_scaled(y, iq4_values(book, KQ_FIELD(b, block_iq4_nl, qs)),
                     _cvtsh_ss(rd_u16le(KQ_FIELD(b, block_iq4_nl, d))));
    }
}

/* reference: dequant_iq4_xs_ref */
static void dequant_iq4_xs_avx2(const void *restrict src, float *restrict y, int64_t n) {
    const __m256i book = codebook256();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_iq4_xs);
        const float d = _cvtsh_ss(rd_u16le(KQ_FIELD(b, block_iq4_xs, d)));
        for (int ib = 0; ib < QK_K / 32; ib++, y += 32) {
            store_scaled(y, iq4_values(book, KQ_FIELD(b, block_iq4_xs, qs) + 16 * ib),
                         d * (float)kq_iq4xs_scale(b, ib));
        }
    }
}

void quant_install_avx2_iquants(quant_traits *t) {
    t[GGUF_TYPE_IQ4_NL].vec_dot = dot_iq4_nl_q8_0_avx2;
    t[GGUF_TYPE_IQ4_NL].to_float = dequant_iq4_nl_avx2;
    t[GGUF_TYPE_IQ4_XS].vec_dot = dot_iq4_xs_q8_K_avx2;
    t[GGUF_TYPE_IQ4_XS].to_float = dequant_iq4_xs_avx2;
}
