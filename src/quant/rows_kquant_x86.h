/*
 * K-quant super-blocks in the 256-bit layout of the few-row product
 * (rows_x86.h), shared by rows_avx2.c (VPMADDUBSW) and rows_avxvnni.c
 * (VPDPBUSD): a super-block of 256 is one chunk of the layout, its
 * sub-blocks of 32 the blocks. The codes are decoded in element order, one
 * register per sub-block, then transposed into the layout (8 x 8 words) once
 * for all activation rows; the scales come out as one float per lane.
 * For files compiled with AVX2.
 */
#ifndef LARES_QUANT_ROWS_KQUANT_X86_H
#define LARES_QUANT_ROWS_KQUANT_X86_H

#include "quant/rows_x86.h"

/* How far ahead of the weights in use a row walk asks for them (the
 * includer may set its own). The AVX2 family's 2 KiB: llama-1b Q4_0 tg32
 * --isa avx2, 2 threads, alternating builds (t/s): 512 bytes 43.6-49.8, 1
 * KiB 49.3-56.7, 2 KiB 51.4-57.4, 4 KiB 52.1-56.2; Q4_K_M one stream on Zen 3
 * 24.8-28.2 at 2 KiB, 22.2-24.1 at 1 KiB, 24.2-26.4 at 4 KiB. (On an Intel
 * Xeon, family 6 model 207, 4 KiB ran Q4_K_M --isa avx2 at 31.3-32.2 against
 * 29.1-30.7: the best distance is the CPU's; the VNNI families, whose CPUs
 * are mostly Intel's, take 4 KiB.) */
#ifndef ROWS_PREFETCH_BYTES
#define ROWS_PREFETCH_BYTES 2048
#endif

/* the n bytes of weights at p, ROWS_PREFETCH_BYTES ahead */
FORCE_INLINE void prefetch_ahead(const uint8_t *p, size_t n) {
    quant_prefetch(p + ROWS_PREFETCH_BYTES, n);
}

/* The eight sub-blocks' 32 codes, each in element order in q[b], as the
 * layout's vectors: word v of q[b] to lane b of v[v] (an 8 x 8 transpose of
 * 32-bit words). */
FORCE_INLINE void transpose8x8(const __m256i q[8], __m256i v[8]) {
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* t[2i]: words 0, 1, 4, 5 of q[2i], q[2i + 1]; t[2i + 1]: 2, 3, 6, 7 */
        t[2 * i] = _mm256_unpacklo_epi32(q[2 * i], q[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(q[2 * i], q[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) { /* u[4h + w]: word w (low half) and w + 4 of q[4h .. 4h + 3] */
        u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
#pragma GCC unroll 4
    for (int w = 0; w < 4; w++) {
        v[w] = _mm256_permute2x128_si256(u[w], u[4 + w], 0x20);
        v[w + 4] = _mm256_permute2x128_si256(u[w], u[4 + w], 0x31);
    }
}

/* Q4_K/Q5_K: qs byte 32 (s / 2) + i holds element i of sub-block s, in the
 * low nibble for even s, the high one for odd s; Q5_K adds 16 where bit s of
 * qh byte i is set. The codes (0..15 or 0..31) of sub-block s in q[s]. */
FORCE_INLINE void codes_q45_K(const uint8_t *qs, const uint8_t *qh, __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10);
    const __m256i h = qh != NULL ? _mm256_loadu_si256((const __m256i *)(const void *)qh)
                                 : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const __m256i r = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * p));
        q[2 * p] = _mm256_and_si256(r, m4);
        q[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(r, 4), m4);
    }
    if (qh == NULL) {
        return;
    }
    /* bit s of each byte to bit 4 */
    q[0] = _mm256_or_si256(q[0], _mm256_and_si256(_mm256_slli_epi16(h, 4), m16));
    q[1] = _mm256_or_si256(q[1], _mm256_and_si256(_mm256_slli_epi16(h, 3), m16));
    q[2] = _mm256_or_si256(q[2], _mm256_and_si256(_mm256_slli_epi16(h, 2), m16));
    q[3] = _mm256_or_si256(q[3], _mm256_and_si256(_mm256_slli_epi16(h, 1), m16));
    q[4] = _mm256_or_si256(q[4], _mm256_and_si256(h, m16));
    q[5] = _mm256_or_si256(q[5], _mm256_and_si256(_mm256_srli_epi16(h, 1), m16));
    q[6] = _mm256_or_si256(q[6], _mm256_and_si256(_mm256_srli_epi16(h, 2), m16));
    q[7] = _mm256_or_si256(q[7], _mm256_and_si256(_mm256_srli_epi16(h, 3), m16));
}

/* Q4_K/Q5_K: d * scale and dmin * minimum of sub-blocks 0..7 (rows_x86.h:
 * scales_mins_k4); b is the block's start (d, dmin, then the scales and at
 * least 4 more bytes). */
FORCE_INLINE void scales_k4(const uint8_t *b, __m256 *dw, __m256 *mw) {
    const __m128i sm = scales_mins_k4(b + 4);
    int32_t dd;
    memcpy(&dd, b, 4);
    const __m128 d2 = _mm_cvtph_ps(_mm_cvtsi32_si128(dd)); /* d, dmin */
    *dw = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)), _mm256_broadcastss_ps(d2));
    *mw = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))),
                        _mm256_broadcastss_ps(_mm_movehdup_ps(d2)));
}

/* Q6_K: element e of half h = e / 128 (sub-blocks 4h .. 4h + 3), part j =
 * (e % 128) / 32, l = e % 32: low 4 bits in ql byte 64h + 32 (j % 2) + l
 * (nibble j / 2), high 2 in qh byte 32h + l (bits 2j, 2j + 1). The codes
 * stay 0..63 (the 32 is taken off with the activations' sums); sub-block s
 * in q[s]. */
FORCE_INLINE void codes_q6_K(const block_q6_K *b, __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(b->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(b->qh + 32 * h));
        q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
        q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
        q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                       _mm256_and_si256(hb, m30));
        q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
    }
}

/* Bytes of a super-block of 4, 5 or 6 bits (Q4_K, Q5_K, Q6_K) */
FORCE_INLINE size_t kq_bytes(int bits) {
    return bits == 4 ? sizeof(block_q4_K) : (bits == 5 ? sizeof(block_q5_K) : sizeof(block_q6_K));
}

/* The codes of the super-block at p (bits 4: Q4_K, 5: Q5_K, 6: Q6_K) in
 * element order, sub-block s in q[s]; for Q4_K and Q5_K also d * scale and
 * dmin * minimum of each sub-block (Q6_K's scales are each walk's own). */
FORCE_INLINE void codes_k(int bits, const uint8_t *p, __m256i q[8], __m256 *dw, __m256 *mw) {
    if (bits == 6) {
        codes_q6_K((const block_q6_K *)(const void *)p, q);
        return;
    }
    if (bits == 4) {
        codes_q45_K(((const block_q4_K *)(const void *)p)->qs, NULL, q);
    } else {
        const block_q5_K *b = (const block_q5_K *)(const void *)p;
        codes_q45_K(b->qs, b->qh, q);
    }
    scales_k4(p, dw, mw);
}

#endif /* LARES_QUANT_ROWS_KQUANT_X86_H */
