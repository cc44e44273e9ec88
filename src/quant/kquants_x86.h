/*
 * AVX2/FMA/F16C kernels of the K-quants (Q2_K..Q6_K against Q8_K
 * activations), the Q8_K activation quantizer and K-quant dequantization.
 * Each kernel names its reference in kquants.c. Written once, compiled three
 * times: kquants_avx2.c (VPMADDWD + VPADDD), kquants_avxvnni.c and
 * kquants_avx512.c (VPDPWSSD, VEX and EVEX), each defining KQ_MAC(sum, p, s)
 * = sum + madd(p, s) before including this file.
 *
 * One scheme serves every K type. A weight super-block is read as eight
 * chunks of 32 unsigned levels q (0..63) plus, per 16 elements, an integer
 * scale s and an integer bias multiplier m, so that
 *   dot = d * dy * sum_16groups s * sum(q * y)  +  dm * dy * sum_16groups m * bsum
 * where bsum is the Q8_K sum of the 16 activations (the min of Q2_K/Q4_K/Q5_K,
 * or the offset of the signed levels of Q3_K and Q6_K). A chunk costs one
 * vpmaddubsw (u8 x s8 -> pairs in s16; |pair| <= 2 * 63 * 127) and one
 * vpmaddwd against the two scales of its 16-groups (-> s32). The tile kernel
 * decodes each weight chunk once and applies it to up to four activation
 * rows, so prompt processing pays the unpacking once per four columns.
 */
#include "quant/kquant_impl.h"

#include <immintrin.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

static inline float hsum256(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline float f16x(const uint8_t *p) {
    return _cvtsh_ss(rd_u16le(p));
}

static inline __m256i loadu256(const void *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m128i loadu128(const void *p) {
    return _mm_loadu_si128((const __m128i *)p);
}

/* ---- the decoded view of one weight super-block ---- */

typedef struct krow {
    __m256i sc; /* 16 x s16: scale of 16-group g in lane g */
    __m256i mb; /* 16 x s16: multiplier of bsum[g] */
    float d;    /* scale of sc */
    float dm;   /* scale of mb (signed) */
} krow;

/* vpshufb masks: lanes 0..7 <- s16 word 2j of the lane, lanes 8..15 <- word 2j + 1 */
static const uint8_t spread_masks[4][32] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
     2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5,
     6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8,  9,  8,  9,  8,  9,  8,  9,  8,  9,  8,  9,  8,  9,  8,  9,
     10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13,
     14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15},
};

/* lanes 0..7 = scale of 16-group 2k, lanes 8..15 = of group 2k + 1: the
 * scales of the 16 pairs vpmaddubsw leaves for chunk k (elements 32k..32k+31).
 * half[0] holds scales 0..7 in both lanes, half[1] scales 8..15. */
static ALWAYS_INLINE __m256i chunk_scales(const __m256i *half, int k) {
    return _mm256_shuffle_epi8(half[k / 4],
                               _mm256_loadu_si256((const __m256i *)spread_masks[k % 4]));
}

/* 8 bytes to 16 x s16, each byte twice (one scale per 32 -> per 16) */
static inline __m256i dup8_epu8_epi16(uint64_t v) {
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)v), dup));
}

/* the 8 6-bit scales and mins of Q4_K/Q5_K, as bytes (see kq_scale_min_k4) */
static inline void scale_min_k4(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    const uint32_t w0 = rd_u32le(s), w1 = rd_u32le(s + 4), w2 = rd_u32le(s + 8);
    const uint32_t sc_lo = w0 & 0x3f3f3f3fu;
    const uint32_t mn_lo = w1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    const uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    *sc = (uint64_t)sc_lo | ((uint64_t)sc_hi << 32);
    *mn = (uint64_t)mn_lo | ((uint64_t)mn_hi << 32);
}

/* Accumulates chunk k of a weight row against the activation rows yq[c]. */
static ALWAYS_INLINE void mac_chunk(__m256i q, const __m256i *sc, int k, const int8_t *const *yq,
                                    __m256i *sumi, int nc) {
    const __m256i sv = chunk_scales(sc, k);
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        const __m256i p = _mm256_maddubs_epi16(q, loadu256(yq[c] + 32 * k));
        sumi[c] = KQ_MAC(sumi[c], p, sv);
    }
}

/* ---- per type: decode scales, then feed the eight chunks ---- */

static ALWAYS_INLINE krow prep_q2_K(const uint8_t *b) {
    const __m128i s = loadu128(KQ_FIELD(b, block_q2_K, scales));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    krow w;
    w.sc = _mm256_cvtepu8_epi16(_mm_and_si128(s, m4));
    w.mb = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
    w.d = f16x(KQ_FIELD(b, block_q2_K, d));
    w.dm = -f16x(KQ_FIELD(b, block_q2_K, dmin));
    return w;
}

static ALWAYS_INLINE void chunks_q2_K(const uint8_t *b, const __m256i *sc, const int8_t *const *yq,
                                      __m256i *sumi, int nc) {
    const __m256i m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 4
    for (int h = 0; h < 2; h++) {
        const __m256i raw = loadu256(KQ_FIELD(b, block_q2_K, qs) + 32 * h);
        mac_chunk(_mm256_and_si256(raw, m3), sc, 4 * h + 0, yq, sumi, nc);
        mac_chunk(_mm256_and_si256(_mm256_srli_epi16(raw, 2), m3), sc, 4 * h + 1, yq, sumi, nc);
        mac_chunk(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m3), sc, 4 * h + 2, yq, sumi, nc);
        mac_chunk(_mm256_and_si256(_mm256_srli_epi16(raw, 6), m3), sc, 4 * h + 3, yq, sumi, nc);
    }
}

static ALWAYS_INLINE krow prep_q3_K(const uint8_t *b) {
    /* see kq_scales_q3: four scales per 32-bit word of output */
    const uint8_t *s = KQ_FIELD(b, block_q3_K, scales);
    const uint32_t w0 = rd_u32le(s), w1 = rd_u32le(s + 4), w2 = rd_u32le(s + 8);
    const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    const __m128i v = _mm_setr_epi32((int)((w0 & lo4) | ((w2 & hi2) << 4)),
                                     (int)((w1 & lo4) | (((w2 >> 2) & hi2) << 4)),
                                     (int)(((w0 >> 4) & lo4) | (((w2 >> 4) & hi2) << 4)),
                                     (int)(((w1 >> 4) & lo4) | (((w2 >> 6) & hi2) << 4)));
    krow w;
    w.sc = _mm256_cvtepi8_epi16(_mm_sub_epi8(v, _mm_set1_epi8(32)));
    w.mb = w.sc;
    w.d = f16x(KQ_FIELD(b, block_q3_K, d));
    w.dm = -4.0f * w.d; /* levels are stored + 4 */
    return w;
}

static ALWAYS_INLINE void chunks_q3_K(const uint8_t *b, const __m256i *sc, const int8_t *const *yq,
                                      __m256i *sumi, int nc) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256i hm = loadu256(KQ_FIELD(b, block_q3_K, hmask));
#pragma GCC unroll 4
    for (int h = 0; h < 2; h++) {
        const __m256i raw = loadu256(KQ_FIELD(b, block_q3_K, qs) + 32 * h);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            /* bit k of hmask byte l is bit 2 of element 32k + l */
            const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(hm, one), 2);
            const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m3);
            mac_chunk(_mm256_or_si256(lo, hb), sc, 4 * h + j, yq, sumi, nc);
            hm = _mm256_srli_epi16(hm, 1);
        }
    }
}

static ALWAYS_INLINE krow prep_q45_K(const uint8_t *b) {
    /* Q4_K and Q5_K share the head: d, dmin, scales */
    uint64_t sc, mn;
    scale_min_k4(KQ_FIELD(b, block_q4_K, scales), &sc, &mn);
    krow w;
    w.sc = dup8_epu8_epi16(sc);
    w.mb = dup8_epu8_epi16(mn);
    w.d = f16x(KQ_FIELD(b, block_q4_K, d));
    w.dm = -f16x(KQ_FIELD(b, block_q4_K, dmin));
    return w;
}

static ALWAYS_INLINE void chunks_q4_K(const uint8_t *b, const __m256i *sc, const int8_t *const *yq,
                                      __m256i *sumi, int nc) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m256i raw = loadu256(KQ_FIELD(b, block_q4_K, qs) + 32 * g);
        mac_chunk(_mm256_and_si256(raw, m4), sc, 2 * g, yq, sumi, nc);
        mac_chunk(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), sc, 2 * g + 1, yq, sumi, nc);
    }
}

static ALWAYS_INLINE void chunks_q5_K(const uint8_t *b, const __m256i *sc, const int8_t *const *yq,
                                      __m256i *sumi, int nc) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i qh = loadu256(KQ_FIELD(b, block_q5_K, qh));
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m256i raw = loadu256(KQ_FIELD(b, block_q5_K, qs) + 32 * g);
        /* bit k of qh byte l is bit 4 of element 32k + l */
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
        qh = _mm256_srli_epi16(qh, 2);
        mac_chunk(_mm256_or_si256(_mm256_and_si256(raw, m4), h0), sc, 2 * g, yq, sumi, nc);
        mac_chunk(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), h1), sc,
                  2 * g + 1, yq, sumi, nc);
    }
}

static ALWAYS_INLINE krow prep_q6_K(const uint8_t *b) {
    krow w;
    w.sc = _mm256_cvtepi8_epi16(loadu128(KQ_FIELD(b, block_q6_K, scales)));
    w.mb = w.sc;
    w.d = f16x(KQ_FIELD(b, block_q6_K, d));
    w.dm = -32.0f * w.d; /* levels are stored + 32 */
    return w;
}

static ALWAYS_INLINE void chunks_q6_K(const uint8_t *b, const __m256i *sc, const int8_t *const *yq,
                                      __m256i *sumi, int nc) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 4
    for (int h = 0; h < 2; h++) {
        const __m256i ql0 = loadu256(KQ_FIELD(b, block_q6_K, ql) + 64 * h);
        const __m256i ql1 = loadu256(KQ_FIELD(b, block_q6_K, ql) + 64 * h + 32);
        const __m256i qh = loadu256(KQ_FIELD(b, block_q6_K, qh) + 32 * h);
        /* qh bits 2p..2p+1 are bits 4..5 of part p: moved to 0x30 */
        const __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                           _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                           _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                           _mm256_and_si256(qh, m30));
        const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        mac_chunk(q0, sc, 4 * h + 0, yq, sumi, nc);
        mac_chunk(q1, sc, 4 * h + 1, yq, sumi, nc);
        mac_chunk(q2, sc, 4 * h + 2, yq, sumi, nc);
        mac_chunk(q3, sc, 4 * h + 3, yq, sumi, nc);
    }
}

/* ---- the generic tile: nr weight rows x NC activation rows ---- */

/* How far ahead of the super-block being computed the tile asks for each of
 * its weight rows (prefetches never fault, so reading past the row's end is
 * harmless). Up to four rows stream at once, each a super-block per step.
 * llama-1b Q4_K_M, 2 threads, avx2 on Zen 3, seven alternations (t/s,
 * --parallel 4 / one stream): 1 KiB 31.1-35.7 / 23.0-28.0, 2 KiB 35.1-39.3 /
 * 23.4-28.6, 4 KiB 31.6-45.7 / 21.7-26.0 (three). */
#ifndef KQ_PREFETCH_BYTES
#define KQ_PREFETCH_BYTES 2048
#endif

typedef krow (*prep_fn)(const uint8_t *b);
typedef void (*chunks_fn)(const uint8_t *b, const __m256i *sc, const int8_t *const *yq,
                          __m256i *sumi, int nc);

static ALWAYS_INLINE void tile_k(int64_t n, float *restrict s, size_t ldc, const uint8_t *x,
                                 size_t bx, const uint8_t *y, size_t by, int nr, const int NC,
                                 size_t bbytes, prep_fn prep, chunks_fn chunks) {
    __m256 acc[QUANT_TILE_MAX][QUANT_TILE_MAX];
    for (int r = 0; r < nr; r++) {
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            acc[r][c] = _mm256_setzero_ps();
        }
    }
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const int8_t *yq[QUANT_TILE_MAX];
        __m256i bsum[QUANT_TILE_MAX];
        float dy[QUANT_TILE_MAX];
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const uint8_t *yb = y + c * by + ib * sizeof(block_q8_K);
            yq[c] = (const int8_t *)KQ_FIELD(yb, block_q8_K, qs);
            bsum[c] = loadu256(KQ_FIELD(yb, block_q8_K, bsums));
            dy[c] = q8k_d(yb);
        }
        for (int r = 0; r < nr; r++) {
            const uint8_t *xb = x + r * bx + ib * bbytes;
            /* the rows stream from memory (a token's mat-vec, or a few
             * sequences decoding together): ask for each ahead */
            quant_prefetch(xb + KQ_PREFETCH_BYTES, bbytes);
            const krow w = prep(xb);
            __m256i sumi[QUANT_TILE_MAX];
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) {
                sumi[c] = _mm256_setzero_si256();
            }
            const __m256i halves[2] = {_mm256_permute4x64_epi64(w.sc, 0x44),
                                       _mm256_permute4x64_epi64(w.sc, 0xee)};
            chunks(xb, halves, yq, sumi, NC);
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) {
                const __m256i bias = _mm256_madd_epi16(bsum[c], w.mb);
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(w.d * dy[c]),
                                            _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(w.dm * dy[c]), _mm256_cvtepi32_ps(bias),
                                            acc[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; r++) {
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            s[(size_t)c * ldc + (size_t)r] = hsum256(acc[r][c]);
        }
    }
}

/* vec_dot and vec_dot_tile of one K type, the tile specialised per column count */
#define KQ_KERNELS(T, PREP)                                                                        \
    /* reference: dot_##T##_q8_K_ref */                                                            \
    static void dot_##T##_q8_K_avx2(int64_t n, float *restrict s, const void *restrict vx,         \
                                    const void *restrict vy) {                                     \
        tile_k(n, s, 1, vx, 0, vy, 0, 1, 1, sizeof(block_##T), PREP, chunks_##T);                  \
    }                                                                                              \
    /* reference: dot_##T##_q8_K_ref, per pair */                                                  \
    static void tile_##T##_q8_K_avx2(int64_t n, float *restrict s, size_t ldc,                     \
                                     const void *restrict vx, size_t bx, const void *restrict vy,  \
                                     size_t by, int nr, int nc) {                                  \
        switch (nc) {                                                                              \
        case 1:                                                                                    \
            tile_k(n, s, ldc, vx, bx, vy, by, nr, 1, sizeof(block_##T), PREP, chunks_##T);         \
            break;                                                                                 \
        case 2:                                                                                    \
            tile_k(n, s, ldc, vx, bx, vy, by, nr, 2, sizeof(block_##T), PREP, chunks_##T);         \
            break;                                                                                 \
        case 3:                                                                                    \
            tile_k(n, s, ldc, vx, bx, vy, by, nr, 3, sizeof(block_##T), PREP, chunks_##T);         \
            break;                                                                                 \
        default:                                                                                   \
            tile_k(n, s, ldc, vx, bx, vy, by, nr, 4, sizeof(block_##T), PREP, chunks_##T);         \
            break;                                                                                 \
        }                                                                                          \
    }

KQ_KERNELS(q2_K, prep_q2_K)
KQ_KERNELS(q3_K, prep_q3_K)
KQ_KERNELS(q4_K, prep_q45_K)
KQ_KERNELS(q5_K, prep_q45_K)
KQ_KERNELS(q6_K, prep_q6_K)

/* ---- Q8_K activations ---- */

/* reference: quant_q8_K_ref, bit for bit (vroundps rounds to nearest even,
 * as the reference's nearest_int does) */
static void quant_q8_K_avx2(const float *restrict x, void *restrict dst, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t *b = (uint8_t *)dst + i * sizeof(block_q8_K);
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) {
            vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (!(amax > 0)) {
            memset(b, 0, sizeof(block_q8_K));
            continue;
        }
        /* the first element of that magnitude gives the sign, as in the reference */
        float max = 0;
        for (int j = 0; j < QK_K; j += 8) {
            const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        int8_t *qs = (int8_t *)KQ_FIELD(b, block_q8_K, qs);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vs);
                q[k] = _mm256_cvtps_epi32(
                    _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            }
            /* s32 -> s16 -> s8 with saturation (the reference's MIN(127, v)),
             * then undo the lane interleave of the packs */
            const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);
            const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
            __m256i bytes = _mm256_packs_epi16(w01, w23);
            bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(qs + j), bytes);
        }
        /* sums of 16: widen to s16, add neighbouring pairs thrice */
        uint8_t *bsums = KQ_FIELD(b, block_q8_K, bsums);
        for (int j = 0; j < QK_K; j += 64) {
            const __m256i ones = _mm256_set1_epi16(1);
            __m256i s[4];
            for (int k = 0; k < 4; k++) {
                s[k] = _mm256_madd_epi16(_mm256_cvtepi8_epi16(loadu128(qs + j + 16 * k)), ones);
            }
            /* s[k] holds 8 s32 partial sums of 16-group j/16 + k */
            const __m256i h01 = _mm256_hadd_epi32(s[0], s[1]);
            const __m256i h23 = _mm256_hadd_epi32(s[2], s[3]);
            const __m256i h = _mm256_hadd_epi32(h01, h23);
            /* lanes: [g0 g1 g2 g3 | g0 g1 g2 g3] halves: add them */
            const __m128i t =
                _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            const __m128i t16 = _mm_packs_epi32(t, t);
            _mm_storel_epi64((__m128i *)(bsums + 2 * (j / 16)), t16);
        }
        wr_f32le(KQ_FIELD(b, block_q8_K, d), 1 / iscale);
    }
}

/* ---- dequantization, bit for bit as the references (multiply, then subtract) ---- */

/* reference: dequant_q4_K_ref */
static void dequant_q4_K_avx2(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q4_K);
        const float d = f16x(KQ_FIELD(b, block_q4_K, d));
        const float min = f16x(KQ_FIELD(b, block_q4_K, dmin));
        uint8_t sc[8], mn[8];
        kq_scale_min_k4(KQ_FIELD(b, block_q4_K, scales), sc, mn);
        const uint8_t *q = KQ_FIELD(b, block_q4_K, qs);
        for (int sb = 0; sb < 8; sb++, y += 32) {
            const __m256 dl = _mm256_set1_ps(d * sc[sb]);
            const __m256 ml = _mm256_set1_ps(min * mn[sb]);
            const __m128i raw = loadu128(q + 32 * (sb / 2));
            const __m128i raw2 = loadu128(q + 32 * (sb / 2) + 16);
            const __m128i m4 = _mm_set1_epi8(0x0f);
            const int shift = 4 * (sb % 2);
            const __m128i l0 = _mm_and_si128(_mm_srli_epi16(raw, shift), m4);
            const __m128i l1 = _mm_and_si128(_mm_srli_epi16(raw2, shift), m4);
            const __m128i parts[2] = {l0, l1};
            for (int p = 0; p < 2; p++) {
                const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[p]));
                const __m256 f1 =
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(parts[p], 8)));
                _mm256_storeu_ps(y + 16 * p, _mm256_sub_ps(_mm256_mul_ps(dl, f0), ml));
                _mm256_storeu_ps(y + 16 * p + 8, _mm256_sub_ps(_mm256_mul_ps(dl, f1), ml));
            }
        }
    }
}

/* reference: dequant_q5_K_ref */
static void dequant_q5_K_avx2(const void *restrict src, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q5_K);
        const float d = f16x(KQ_FIELD(b, block_q5_K, d));
        const float min = f16x(KQ_FIELD(b, block_q5_K, dmin));
        uint8_t sc[8], mn[8];
        kq_scale_min_k4(KQ_FIELD(b, block_q5_K, scales), sc, mn);
        const uint8_t *q = KQ_FIELD(b, block_q5_K, qs);
        const __m256i qh = loadu256(KQ_FIELD(b, block_q5_K, qh));
        for (int sb = 0; sb < 8; sb++, y += 32) {
            const __m256 dl = _mm256_set1_ps(d * sc[sb]);
            const __m256 ml = _mm256_set1_ps(min * mn[sb]);
            const __m256i raw = loadu256(q + 32 * (sb / 2));
            const __m256i lo =
                _mm256_and_si256(_mm256_srli_epi16(raw, 4 * (sb % 2)), _mm256_set1_epi8(0x0f));
            const __m256i hb = _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srli_epi16(qh, sb), _mm256_set1_epi8(1)), 4);
            const __m256i lv = _mm256_or_si256(lo, hb);
            for (int p = 0; p < 4; p++) {
                const __m128i part =
                    p < 2 ? _mm256_castsi256_si128(lv) : _mm256_extracti128_si256(lv, 1);
                const __m256 f = _mm256_cvtepi32_ps(
                    _mm256_cvtepu8_epi32(p % 2 ? _mm_srli_si128(part, 8) : part));
                _mm256_storeu_ps(y + 8 * p, _mm256_sub_ps(_mm256_mul_ps(dl, f), ml));
            }
        }
    }
}

/* reference: dequant_q6_K_ref ((d * scale) * q) */
static void dequant_q6_K_avx2(const void *restrict src, float *restrict y, int64_t n) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *b = (const uint8_t *)src + i * sizeof(block_q6_K);
        const float d = f16x(KQ_FIELD(b, block_q6_K, d));
        const int8_t *sc = (const int8_t *)KQ_FIELD(b, block_q6_K, scales);
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = loadu256(KQ_FIELD(b, block_q6_K, ql) + 64 * h);
            const __m256i ql1 = loadu256(KQ_FIELD(b, block_q6_K, ql) + 64 * h + 32);
            const __m256i qh = loadu256(KQ_FIELD(b, block_q6_K, qh) + 32 * h);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_and_si256(qh, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            for (int p = 0; p < 4; p++, y += 32) {
                const __m256i sv = _mm256_sub_epi8(q[p], _mm256_set1_epi8(32));
                for (int half = 0; half < 2; half++) {
                    const int g = 8 * h + 2 * p + half;
                    const __m256 dl = _mm256_set1_ps(d * (float)sc[g]);
                    const __m128i part =
                        half ? _mm256_extracti128_si256(sv, 1) : _mm256_castsi256_si128(sv);
                    const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
                    const __m256 f1 =
                        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(part, 8)));
                    _mm256_storeu_ps(y + 16 * half, _mm256_mul_ps(dl, f0));
                    _mm256_storeu_ps(y + 16 * half + 8, _mm256_mul_ps(dl, f1));
                }
            }
        }
    }
}

static void install_kquants(quant_traits *t) {
    t[GGUF_TYPE_Q2_K].vec_dot = dot_q2_K_q8_K_avx2;
    t[GGUF_TYPE_Q2_K].vec_dot_tile = tile_q2_K_q8_K_avx2;
    t[GGUF_TYPE_Q3_K].vec_dot = dot_q3_K_q8_K_avx2;
    t[GGUF_TYPE_Q3_K].vec_dot_tile = tile_q3_K_q8_K_avx2;
    t[GGUF_TYPE_Q4_K].vec_dot = dot_q4_K_q8_K_avx2;
    t[GGUF_TYPE_Q4_K].vec_dot_tile = tile_q4_K_q8_K_avx2;
    t[GGUF_TYPE_Q4_K].to_float = dequant_q4_K_avx2;
    t[GGUF_TYPE_Q5_K].vec_dot = dot_q5_K_q8_K_avx2;
    t[GGUF_TYPE_Q5_K].vec_dot_tile = tile_q5_K_q8_K_avx2;
    t[GGUF_TYPE_Q5_K].to_float = dequant_q5_K_avx2;
    t[GGUF_TYPE_Q6_K].vec_dot = dot_q6_K_q8_K_avx2;
    t[GGUF_TYPE_Q6_K].vec_dot_tile = tile_q6_K_q8_K_avx2;
    t[GGUF_TYPE_Q6_K].to_float = dequant_q6_K_avx2;
    t[GGUF_TYPE_Q8_K].from_float = quant_q8_K_avx2;
}
