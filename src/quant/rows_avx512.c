/*
 * The product of a weight matrix with a few activation rows (quant.h:
 * quant_rows_fmt) on AVX-512 VNNI: decoding several sequences at once, or
 * one, where the packed GEMM's 16-lane panels would mostly multiply zeros.
 *
 * A weight row is walked 512 elements (sixteen blocks of 32) at a time, and
 * each int32 lane of a register sums one whole block: lanes 0-7 the eight
 * blocks of the first 256, lanes 8-15 those of the second. The chunk's codes
 * are decoded once into eight registers, group g holding elements 4g .. 4g + 3
 * of every lane's block, and each activation row, stored in the same order (64
 * bytes a group, element 4g + e of block b at byte 4b + e), meets them in
 * eight VPDPBUSD, its group a plain 64-byte load. One conversion, one
 * multiplication by the row's block scales and one FMA by the weights' then
 * make floats of 512 products of each row: half the float work per product of
 * a layout whose lanes hold half a block, so that eight rows' sums and
 * accumulators and the weights fit the 32 registers (docs/kernels.md, "One
 * lane per block"). Until 2026-12-01 the two halves held the same 256 of two
 * weight rows, each activation group broadcast to both halves; on a Zen 4 a
 * broadcast load takes a vector pipe, and walking one row at a time also read
 * a lone sequence's weights faster (docs/kernels.md, "One weight row at a
 * time"). Where the activation rows are more than the L1 holds (eight rows of
 * a 5632-wide matrix), weight rows are taken eight at a time and k in slices
 * that stay in L1 (row_group). The activation codes are stored plus 128 so
 * that they are VPDPBUSD's unsigned operand; the 128 * sum(w) this adds is
 * taken off by starting each lane's sum from -128 * sum(w), computed once per
 * chunk for all rows. A last 256 without a partner is walked as a chunk with itself as its
 * second half, whose products are left out (masked FMAs), and so are the last
 * k % 256 elements, one block at a time in lanes 0-7 in element order. Every
 * row runs the same instructions on the same lanes whatever the number of
 * activation rows and weight rows: a sequence's logits do not depend on what
 * it is batched with.
 *
 * The K-quants (Q4_K, Q5_K, Q6_K) read the same rows: a super-block of 256 is
 * decoded into the same eight registers (sub-block = block of 32). Q4_K and
 * Q5_K take their minimums, -dmin * m_s * sum(y over sub-block s), from the
 * row's block sums with one more FMA per chunk; Q6_K's scales are per 16
 * elements, groups 0-3 and 4-7 of a lane, so it keeps two sums per lane, each
 * with its own scales. Q4_1 and Q5_1 keep their codes unsigned as the
 * K-quants do and add their minimums, m * d_a * sum(a), from the block sums
 * with the same FMA.
 *
 * The activation rows are the 256-bit families' made wide (rows_x86.h): for
 * each 512 elements the eight 64-byte groups above, the codes plus 128, a
 * last 256 as eight 32-byte groups, then the last k % 256 in element order;
 * then one float per block (its scale d), then one per block, d * (sum of its
 * codes), which the minimums are taken with.
 */
#include "quant/rows_types.h"
#include "quant/rows_x86.h"

#include <immintrin.h>
#include <string.h>

/* ---- activations: the codes plus 128, the block sums (rows_x86.h) ---- */

static void rows_from_float(const float *restrict x, int64_t k, void *restrict row) {
    rows256_from_float(x, k, row, 0x80, true, true);
}

static void rows_to_q8_0(const void *restrict row, int64_t k, void *restrict blocks) {
    rows256_to_q8_0(row, k, blocks, 0x80, true);
}

static const quant_rows_fmt rows_fmt = {
    .from_float = rows_from_float, .to_q8_0 = rows_to_q8_0, .to_sums = rows256_to_sums};

/* ---- weights: a chunk of two 256s in the lanes ---- */

/* The weights of a chunk as the kernel reads them: two 256s, at p0 and p1
 * below (the next 256 of the row, or the same one for a 256 alone): lane l of
 * each register is block l % 8 of the 256 at p0 (l < 8) or p1. */
typedef struct pair_chunk {
    __m512i v[8];  /* group g: the codes of elements 4g .. 4g + 3 */
    __m512i base;  /* -128 * the sum of the lane's codes (Q6_K: of groups 0-3) */
    __m512i base2; /* Q6_K: of groups 4-7 */
    __m512 dw;     /* the block's scale (Q6_K: of its elements 0..15) */
    __m512 dw2;    /* Q6_K: of elements 16..31 */
    __m512 mw;     /* types with minimums: what multiplies the block's sum */
} pair_chunk;

/* four 16-byte pieces as the quarters of a register */
FORCE_INLINE __m512i quarters(const uint8_t *a, const uint8_t *b, const uint8_t *c,
                              const uint8_t *d) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)a));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)b), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)c), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)d), 3);
}

/* The 16 bytes at p0 + b * bb and p1 + b * bb (b = 0..7) transposed by 32-bit
 * words: r[i] lane l is word i of the piece of block l % 8 of p0 or p1. The
 * pieces go into quarters so that one 4 x 4 transpose within each quarter
 * puts them in lane order. */
FORCE_INLINE void words16(const uint8_t *p0, const uint8_t *p1, size_t bb, __m512i r[4]) {
    __m512i z[4];
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        z[m] = quarters(p0 + (size_t)m * bb, p0 + (size_t)(4 + m) * bb, p1 + (size_t)m * bb,
                        p1 + (size_t)(4 + m) * bb);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    r[0] = _mm512_unpacklo_epi64(t0, t2);
    r[1] = _mm512_unpackhi_epi64(t0, t2);
    r[2] = _mm512_unpacklo_epi64(t1, t3);
    r[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* Blocks whose 16 bytes of qs hold element j in the low nibble of byte j and
 * j + 16 in the high: the nibbles (0..15) of the eight groups */
FORCE_INLINE void nibbles16(const uint8_t *qs0, const uint8_t *qs1, size_t bb, __m512i v[8]) {
    __m512i r[4];
    words16(qs0, qs1, bb, r);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        v[i] = _mm512_and_si512(r[i], m4);
        v[4 + i] = _mm512_and_si512(_mm512_srli_epi16(r[i], 4), m4);
    }
}

/* the sum of eight registers of bytes (each lane's codes, when they fit a byte) */
FORCE_INLINE __m512i byte_sum8(const __m512i v[8]) {
    const __m512i a = _mm512_add_epi8(_mm512_add_epi8(v[0], v[1]), _mm512_add_epi8(v[2], v[3]));
    const __m512i b = _mm512_add_epi8(_mm512_add_epi8(v[4], v[5]), _mm512_add_epi8(v[6], v[7]));
    return _mm512_add_epi8(a, b);
}

/* -128 * the sum of each lane's unsigned codes (their sum over the eight
 * groups fits a byte: at most 8 * 31) */
FORCE_INLINE __m512i base_unsigned(const __m512i v[8]) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), byte_sum8(v), _mm512_set1_epi8((char)-128));
}

/* -128 * the sum of each lane's codes u - off, from the unsigned u (their sum
 * over a lane's 32 at most 8 * 31) */
FORCE_INLINE __m512i base_offset(const __m512i u[8], int off) {
    return _mm512_dpbusd_epi32(_mm512_set1_epi32(128 * off * 32), byte_sum8(u),
                               _mm512_set1_epi8((char)-128));
}

/* -128 * the sum of each lane's signed codes, any values */
FORCE_INLINE __m512i base_signed(const __m512i v[8]) {
    __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        s = _mm512_dpbusd_epi32(s, _mm512_set1_epi8((char)0x80), v[g]);
    }
    return _mm512_sub_epi32(_mm512_setzero_si512(), s);
}

/* the fp16 words at p + b * bb (b = 0..7), in order */
FORCE_INLINE __m128i words8(const uint8_t *p, size_t bb) {
    if (bb == 18) { /* Q4_0, IQ4_NL: all within the first 128 bytes, one permute */
        const __m512i lo = _mm512_loadu_si512((const void *)p);
        const __m512i hi = _mm512_loadu_si512((const void *)(p + 64));
        const __m512i idx = _mm512_setr_epi32(0x00090000, 0x001b0012, 0x002d0024, 0x003f0036, 0, 0,
                                              0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        return _mm512_castsi512_si128(_mm512_permutex2var_epi16(lo, idx, hi));
    }
    if (bb == 34) { /* Q8_0: blocks 0-3 within the first 128 bytes, 4-7 the next */
        const __m512i idx_lo =
            _mm512_setr_epi32(0x00110000, 0x00330022, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i idx_hi =
            _mm512_setr_epi32(0, 0, 0x00150004, 0x00370026, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i lo = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)p), idx_lo,
                                                     _mm512_loadu_si512((const void *)(p + 64)));
        const __m512i hi =
            _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)(p + 128)), idx_hi,
                                      _mm512_loadu_si512((const void *)(p + 192)));
        return _mm512_castsi512_si128(_mm512_mask_blend_epi16(0x00f0, lo, hi));
    }
    short d[8];
    for (int b = 0; b < 8; b++) {
        memcpy(&d[b], p + (size_t)b * bb, 2);
    }
    return _mm_setr_epi16(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
}

/* the lane floats of two 256s' eight fp16 words each */
FORCE_INLINE __m512 halves16(__m128i w0, __m128i w1) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(w0), w1, 1));
}

/* [a x 8, b x 8] */
FORCE_INLINE __m512 two_scalars(float a, float b) {
    return _mm512_mask_broadcastss_ps(_mm512_set1_ps(a), 0xff00, _mm_set_ss(b));
}

/* The IQ4 codebook (kq_iq4nl_values) in every 128-bit lane, for VPSHUFB */
FORCE_INLINE __m512i iq4_codebook512(void) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)kq_iq4nl_values));
}

/* Q4_0: nibbles minus 8 */
FORCE_INLINE void chunk_q4_0(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    const size_t bb = sizeof(block_q4_0);
    __m512i n[8];
    nibbles16(p0 + offsetof(block_q4_0, qs), p1 + offsetof(block_q4_0, qs), bb, n);
    c->base = base_offset(n, 8);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        c->v[g] = _mm512_sub_epi8(n[g], _mm512_set1_epi8(8));
    }
    c->dw = halves16(words8(p0, bb), words8(p1, bb));
}

/* IQ4_NL (Q4_0's layout) and IQ4_XS (sub-block b's indices at qs + 16b): the
 * codebook's values of the nibbles */
FORCE_INLINE void iq4_codes(const uint8_t *qs0, const uint8_t *qs1, size_t bb, pair_chunk *c) {
    const __m512i book = iq4_codebook512();
    nibbles16(qs0, qs1, bb, c->v);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        c->v[g] = _mm512_shuffle_epi8(book, c->v[g]);
    }
    c->base = base_signed(c->v);
}

FORCE_INLINE void chunk_iq4_nl(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    const size_t bb = sizeof(block_iq4_nl);
    iq4_codes(p0 + offsetof(block_iq4_nl, qs), p1 + offsetof(block_iq4_nl, qs), bb, c);
    c->dw = halves16(words8(p0, bb), words8(p1, bb));
}

FORCE_INLINE void chunk_iq4_xs(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    const block_iq4_xs *b0 = (const block_iq4_xs *)(const void *)p0;
    const block_iq4_xs *b1 = (const block_iq4_xs *)(const void *)p1;
    iq4_codes(b0->qs, b1->qs, 16, c);
    c->dw = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(iq4_xs_scales8(b0))),
                           _mm256_castps_pd(iq4_xs_scales8(b1)), 1));
}

/* Q8_0: elements 0..15 of each block, then 16..31 */
FORCE_INLINE void chunk_q8_0(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    const size_t bb = sizeof(block_q8_0);
    const size_t qs = offsetof(block_q8_0, qs);
    words16(p0 + qs, p1 + qs, bb, c->v);
    words16(p0 + qs + 16, p1 + qs + 16, bb, c->v + 4);
    c->base = base_signed(c->v);
    c->dw = halves16(words8(p0, bb), words8(p1, bb));
}

/* The fifth bits of blocks whose 32-bit qh (bit e: element e) sits at byte
 * qh_at of each, bb bytes apart, added to the nibbles as 16 */
FORCE_INLINE void add_fifth_bits(const uint8_t *p0, const uint8_t *p1, size_t bb, size_t qh_at,
                                 __m512i v[8]) {
    __m512i r[4];
    words16(p0 + qh_at, p1 + qh_at, bb, r); /* r[0]: each lane's qh (the rest unused) */
    const __m512i k16 = _mm512_set1_epi8(16);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        /* byte e of group g: bit 4g + e, which is bit 4 (g % 2) + e of byte g / 2 */
        const __m512i at =
            _mm512_add_epi8(_mm512_set1_epi8((char)(g / 2)),
                            _mm512_broadcast_i32x4(
                                _mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12)));
        const int sh = 4 * (g % 2);
        const __m512i bit = _mm512_set1_epi32((1 << sh) | (2 << sh) << 8 | (4 << sh) << 16 |
                                              (int)((unsigned)(8 << sh) << 24));
        const __mmask64 set = _mm512_test_epi8_mask(_mm512_shuffle_epi8(r[0], at), bit);
        v[g] = _mm512_mask_add_epi8(v[g], set, v[g], k16);
    }
}

/* Q5_0: the nibbles plus the fifth bits, minus 16 */
FORCE_INLINE void chunk_q5_0(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    const size_t bb = sizeof(block_q5_0);
    __m512i u[8];
    nibbles16(p0 + offsetof(block_q5_0, qs), p1 + offsetof(block_q5_0, qs), bb, u);
    add_fifth_bits(p0, p1, bb, offsetof(block_q5_0, qh), u);
    c->base = base_offset(u, 16);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        c->v[g] = _mm512_sub_epi8(u[g], _mm512_set1_epi8(16));
    }
    c->dw = halves16(words8(p0, bb), words8(p1, bb));
}

/* Q4_1, Q5_1: unsigned codes, the scale d and the minimum m (after d) */
FORCE_INLINE void chunk_min(enum rows_type t, const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    const size_t bb = rows_block_bytes(t);
    const size_t qs = rows_qs_at(t);
    nibbles16(p0 + qs, p1 + qs, bb, c->v);
    if (t == R_Q5_1) {
        add_fifth_bits(p0, p1, bb, offsetof(block_q5_1, qh), c->v);
    }
    c->base = base_unsigned(c->v);
    c->dw = halves16(words8(p0, bb), words8(p1, bb));
    c->mw = halves16(words8(p0 + 2, bb), words8(p1 + 2, bb));
}

/* A register's 16 unsigned bytes as floats */
FORCE_INLINE __m512 bytes_to_floats(__m128i b) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
}

/* Q4_K / Q5_K scales: d * scale of each sub-block, -dmin * its minimum */
FORCE_INLINE void scales_k4(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    const block_q4_K *b0 = (const block_q4_K *)(const void *)p0;
    const block_q4_K *b1 = (const block_q4_K *)(const void *)p1;
    const __m128i s0 = scales_mins_k4(b0->scales), s1 = scales_mins_k4(b1->scales);
    c->dw = _mm512_mul_ps(bytes_to_floats(_mm_unpacklo_epi64(s0, s1)),
                          two_scalars(_cvtsh_ss(b0->d), _cvtsh_ss(b1->d)));
    c->mw = _mm512_mul_ps(bytes_to_floats(_mm_unpackhi_epi64(s0, s1)),
                          two_scalars(-_cvtsh_ss(b0->dmin), -_cvtsh_ss(b1->dmin)));
}

/* Words g % 4 of 32-byte chunks: q[0] holds words 0..3 of each of the four
 * chunks of 128 bytes at p (chunk c at word 4c), q[1] words 4..7 */
FORCE_INLINE void chunk_words(const uint8_t *p, __m512i q[2]) {
    const __m512i a = _mm512_loadu_si512((const void *)p);
    const __m512i b = _mm512_loadu_si512((const void *)(p + 64));
    q[0] = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    q[1] = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}

/* The 4-bit codes of two Q4_K / Q5_K super-blocks: qs byte 32 * (s / 2) + i
 * holds element i of sub-block s, in the low nibble for even s and the high
 * for odd s; so lane s of group g is word g of 32-byte chunk s / 2 */
FORCE_INLINE void nibbles_k(const uint8_t *qs0, const uint8_t *qs1, __m512i v[8]) {
    __m512i a[2], b[2];
    chunk_words(qs0, a);
    chunk_words(qs1, b);
    const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const int w = g % 4;
        const __m512i idx =
            _mm512_setr_epi32(w, w, 4 + w, 4 + w, 8 + w, 8 + w, 12 + w, 12 + w, 16 + w, 16 + w,
                              20 + w, 20 + w, 24 + w, 24 + w, 28 + w, 28 + w);
        const __m512i x = _mm512_permutex2var_epi32(a[g / 4], idx, b[g / 4]);
        v[g] = _mm512_and_si512(_mm512_srlv_epi32(x, shift), m4);
    }
}

FORCE_INLINE void chunk_q4_K(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    nibbles_k(p0 + offsetof(block_q4_K, qs), p1 + offsetof(block_q4_K, qs), c->v);
    c->base = base_unsigned(c->v);
    scales_k4(p0, p1, c);
}

/* Q5_K: the codes of Q4_K plus 16 where bit s of qh byte i is set (element i
 * of sub-block s) */
FORCE_INLINE void chunk_q5_K(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    nibbles_k(p0 + offsetof(block_q5_K, qs), p1 + offsetof(block_q5_K, qs), c->v);
    const __m512i qh = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_loadu_si256((const __m256i *)(const void *)(p0 + offsetof(block_q5_K, qh)))),
        _mm256_loadu_si256((const __m256i *)(const void *)(p1 + offsetof(block_q5_K, qh))), 1);
    /* lane s: bit s of every byte */
    const __m512i bit =
        _mm512_setr_epi32(0x01010101, 0x02020202, 0x04040404, 0x08080808, 0x10101010, 0x20202020,
                          0x40404040, (int)0x80808080, 0x01010101, 0x02020202, 0x04040404,
                          0x08080808, 0x10101010, 0x20202020, 0x40404040, (int)0x80808080);
    const __m512i k16 = _mm512_set1_epi8(16);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        /* lanes 0-7 word g of the qh at p0, 8-15 of the qh at p1 */
        const __m512i idx = _mm512_setr_epi32(g, g, g, g, g, g, g, g, 8 + g, 8 + g, 8 + g, 8 + g,
                                              8 + g, 8 + g, 8 + g, 8 + g);
        const __mmask64 set = _mm512_test_epi8_mask(_mm512_permutexvar_epi32(idx, qh), bit);
        c->v[g] = _mm512_mask_add_epi8(c->v[g], set, c->v[g], k16);
    }
    c->base = base_unsigned(c->v);
    scales_k4(p0, p1, c);
}

/* Q6_K: element e of half h = e / 128 (sub-blocks 4h .. 4h + 3), part
 * j = (e % 128) / 32, l = e % 32: low 4 bits in ql byte 64h + 32 (j % 2) + l
 * (nibble j / 2), high 2 in qh byte 32h + l (bits 2j, 2j + 1); codes minus 32.
 * Sub-block s = 4h + j: lane s of group g takes word g % 4 of ql's 32-byte
 * chunk 2h + j % 2 and word 8h + g of qh. Scales per 16 elements: dw the
 * scale of a lane's elements 0..15 (groups 0-3), dw2 of 16..31. */
FORCE_INLINE void chunk_q6_K(const uint8_t *p0, const uint8_t *p1, pair_chunk *c) {
    const block_q6_K *b0 = (const block_q6_K *)(const void *)p0;
    const block_q6_K *b1 = (const block_q6_K *)(const void *)p1;
    __m512i l0[2], l1[2];
    chunk_words(b0->ql, l0);
    chunk_words(b1->ql, l1);
    const __m512i h0 = _mm512_loadu_si512((const void *)b0->qh);
    const __m512i h1 = _mm512_loadu_si512((const void *)b1->qh);
    /* lane s: nibble (s % 4) / 2; bits 2 (s % 4), + 1 rotated to 4, 5 */
    const __m512i nib = _mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4);
    const __m512i rot = _mm512_setr_epi32(4, 2, 0, 30, 4, 2, 0, 30, 4, 2, 0, 30, 4, 2, 0, 30);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    __m512i u[8]; /* the codes, 0..63 */
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const int w = g % 4;
        /* ql chunk 2 (s / 4) + s % 2 of s = lane % 8, at word 4 * chunk + w */
        const __m512i il =
            _mm512_setr_epi32(w, 4 + w, w, 4 + w, 8 + w, 12 + w, 8 + w, 12 + w, 16 + w, 20 + w,
                              16 + w, 20 + w, 24 + w, 28 + w, 24 + w, 28 + w);
        const __m512i ih = _mm512_setr_epi32(g, g, g, g, 8 + g, 8 + g, 8 + g, 8 + g, 16 + g, 16 + g,
                                             16 + g, 16 + g, 24 + g, 24 + g, 24 + g, 24 + g);
        const __m512i lo =
            _mm512_srlv_epi32(_mm512_permutex2var_epi32(l0[g / 4], il, l1[g / 4]), nib);
        const __m512i hi =
            _mm512_and_si512(_mm512_rolv_epi32(_mm512_permutex2var_epi32(h0, ih, h1), rot), m30);
        u[g] = _mm512_ternarylogic_epi32(lo, m4, hi, 0xea); /* (lo & 0x0f) | hi */
        c->v[g] = _mm512_sub_epi8(u[g], _mm512_set1_epi8(32));
    }
    /* -128 * sum(code - 32) per lane and half: 16 codes of each, summed in a byte */
    const __m512i k = _mm512_set1_epi32(128 * 32 * 16), m128 = _mm512_set1_epi8((char)-128);
    c->base = _mm512_dpbusd_epi32(
        k, _mm512_add_epi8(_mm512_add_epi8(u[0], u[1]), _mm512_add_epi8(u[2], u[3])), m128);
    c->base2 = _mm512_dpbusd_epi32(
        k, _mm512_add_epi8(_mm512_add_epi8(u[4], u[5]), _mm512_add_epi8(u[6], u[7])), m128);
    /* scale 2s of lane s for elements 0..15, 2s + 1 for 16..31 */
    const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i odd =
        _mm_add_epi8(even, _mm_setr_epi8(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m128i sc0 = _mm_loadu_si128((const __m128i *)(const void *)b0->scales);
    const __m128i sc1 = _mm_loadu_si128((const __m128i *)(const void *)b1->scales);
    const __m512 d = two_scalars(_cvtsh_ss(b0->d), _cvtsh_ss(b1->d));
    const __m128i e = _mm_unpacklo_epi64(_mm_shuffle_epi8(sc0, even), _mm_shuffle_epi8(sc1, even));
    const __m128i o = _mm_unpacklo_epi64(_mm_shuffle_epi8(sc0, odd), _mm_shuffle_epi8(sc1, odd));
    c->dw = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(e)), d);
    c->dw2 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(o)), d);
}

/* Software prefetch of the weight rows, some KiB ahead. With many rows each
 * weight byte takes long enough that the hardware prefetchers fall behind
 * (bench_gemm -k 2048 -n 131072, 300 MB of weights, one thread, AMD EPYC Zen
 * 4 of 2026-11-25: 8 rows Q4_0 79-82 -> 116-125 G MAC/s with 2 KiB ahead);
 * with one row an Intel Xeon (family 6 model 207) read memory a block at a
 * time without it (llama-1b tg16, 2 threads, Q4_0 21.3-22.8 t/s without,
 * 32.6-33.1 with 2 KiB, 35.1-35.7 with 4 KiB ahead), and 1 KiB ahead lost on
 * both CPUs. When two weight rows were walked together, each asked this far
 * ahead: on that Xeon (2026-11-30, llama-1b Q4_0, 2 threads, two rounds
 * alternating) 3 KiB gave one sequence 32.3 t/s and eight 155-156 against
 * 34.2-34.3 and 160-162 at 4 KiB; 6 and 8 KiB the same as 4 within the
 * host's noise. The one row walked since asks for both its 256s this far
 * ahead (docs/kernels.md, "One weight row at a time"). */
#define ROWS_PREFETCH_BYTES 4096

/* Whether the walk of NC activation rows decodes the next chunk before the
 * products of this one (software pipelining): up to 4 rows, 2 for Q4_K and
 * Q5_K, none for Q6_K; with more rows the registers do not hold two chunks'
 * weights beside the rows' sums. Measured
 * on an Intel Xeon (family 6 model 207), bench_gemm -k 2048 -n 4096 --reps 7,
 * G MAC/s with a limit of 2 / 4, 4 rows: Q8_0 81, 81 / 91, 91; IQ4_NL 87, 87
 * / 105, 105; IQ4_XS 91-92 / 99-101; Q4_0 105, 106 / 107, 111; Q4_K 95-99 /
 * 95-96 and Q5_K 82 / 76-78; Q6_K (its chunk of 13 registers) one row 26-28
 * with it and 30 without. llama-1b Q4_0, 2 threads, one sequence, limit 0 /
 * 2 / 4: 32.8, 32.5 / 34.0, 33.1 / 33.7, 33.5 t/s. */
FORCE_INLINE bool pipelined(enum rows_type t, const int NC) {
    /* written so that GCC folds it before its loop warnings look at the
     * branch not taken (as a limit per type it warned of undefined behaviour
     * there) */
    return t != R_Q6_K && (NC <= 2 || (NC <= 4 && t != R_Q4_K && t != R_Q5_K));
}

/* The chunk of type t at p0 and p1 decoded, the bytes pf further on asked
 * for (what the walk reads that much later: ROWS_PREFETCH_BYTES on in a row
 * walked whole, the next group's row in slices) */
FORCE_INLINE void decode_chunk(enum rows_type t, const uint8_t *p0, const uint8_t *p1, size_t cb,
                               ptrdiff_t pf, pair_chunk *c) {
    quant_prefetch(p0 + pf, cb);
    quant_prefetch(p1 + pf, cb);
    switch (t) {
    case R_Q4_0:
        chunk_q4_0(p0, p1, c);
        break;
    case R_Q5_0:
        chunk_q5_0(p0, p1, c);
        break;
    case R_IQ4_NL:
        chunk_iq4_nl(p0, p1, c);
        break;
    case R_IQ4_XS:
        chunk_iq4_xs(p0, p1, c);
        break;
    case R_Q8_0:
        chunk_q8_0(p0, p1, c);
        break;
    case R_Q4_1:
    case R_Q5_1:
        chunk_min(t, p0, p1, c);
        break;
    case R_Q4_K:
        chunk_q4_K(p0, p1, c);
        break;
    case R_Q5_K:
        chunk_q5_K(p0, p1, c);
        break;
    case R_Q6_K:
        chunk_q6_K(p0, p1, c);
        break;
    }
}

/* ---- the last k % 256 elements, one block of each row at a time ---- */

/* the 64 nibbles (0..15) of two blocks' 16 bytes of qs, each in element order
 * (byte j: element j low, j + 16 high), the first in the lower half */
FORCE_INLINE __m512i pair_nibbles(const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i a =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs0));
    const __m256i c =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs1));
    const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
    return _mm512_and_si512(_mm512_srlv_epi64(t, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                            _mm512_set1_epi8(0x0f));
}

/* the fifth bits (qh, 32 bits each) of two blocks added to their nibbles as 16 */
FORCE_INLINE __m512i pair_fifth(__m512i n, const uint8_t *qh0, const uint8_t *qh1) {
    uint32_t h0, h1;
    memcpy(&h0, qh0, 4);
    memcpy(&h1, qh1, 4);
    return _mm512_mask_add_epi8(n, (__mmask64)h0 | (__mmask64)h1 << 32, n, _mm512_set1_epi8(16));
}

/* The blocks at p0 and p1 in element order (lanes 0-7 the first's, 8-15 the
 * second's; the walk passes one block twice and keeps lanes 0-7): the codes,
 * -128 * each lane's sum, the scales, and (types with minimums) m in lanes 0
 * and 8 */
FORCE_INLINE void tail_block(enum rows_type t, const uint8_t *p0, const uint8_t *p1, __m512i *wc,
                             __m512i *base, __m512 *dw, __m512 *mw) {
    lares_f16 d0, d1;
    memcpy(&d0, p0, 2);
    memcpy(&d1, p1, 2);
    *dw = two_scalars(_cvtsh_ss(d0), _cvtsh_ss(d1));
    *mw = _mm512_setzero_ps();
    if (t == R_Q8_0) {
        const size_t qs = offsetof(block_q8_0, qs);
        *wc = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(p0 + qs))),
            _mm256_loadu_si256((const __m256i *)(const void *)(p1 + qs)), 1);
    } else if (t == R_IQ4_NL) {
        const size_t qs = offsetof(block_iq4_nl, qs);
        *wc = _mm512_shuffle_epi8(iq4_codebook512(), pair_nibbles(p0 + qs, p1 + qs));
    } else {
        const size_t qs = rows_qs_at(t);
        __m512i n = pair_nibbles(p0 + qs, p1 + qs);
        if (rows_five_bits(t)) {
            const size_t qh = rows_qh_at(t);
            n = pair_fifth(n, p0 + qh, p1 + qh);
        }
        if (t == R_Q4_0) {
            n = _mm512_sub_epi8(n, _mm512_set1_epi8(8));
        } else if (t == R_Q5_0) {
            n = _mm512_sub_epi8(n, _mm512_set1_epi8(16));
        } else { /* Q4_1, Q5_1: the minimum after d */
            lares_f16 m0, m1;
            memcpy(&m0, p0 + 2, 2);
            memcpy(&m1, p1 + 2, 2);
            *mw = _mm512_mask_mov_ps(_mm512_setzero_ps(), 0x0101,
                                     two_scalars(_cvtsh_ss(m0), _cvtsh_ss(m1)));
        }
        *wc = n;
    }
    *base = _mm512_sub_epi32(
        _mm512_setzero_si512(),
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), *wc));
}

/* ---- the walk ---- */

/* Activation vector g of 256s j and j + 1 (wide: a plain load of the wide
 * row's 64 bytes) or of 256 j alone, in both halves (a broadcast load, which
 * on a Zen 4 also takes a vector pipe: the 8-row walk ran 98 G MAC/s with
 * broadcasts of 32 bytes against 123 with plain loads, docs/kernels.md) */
FORCE_INLINE __m512i act_vector(const uint8_t *row, int64_t j, int g, bool wide) {
    if (wide) {
        return _mm512_loadu_si512((const void *)(row + (size_t)j * SUPER + 64 * g));
    }
    return _mm512_broadcast_i64x4(
        _mm256_loadu_si256((const __m256i *)(const void *)(row + (size_t)j * SUPER + 32 * g)));
}

/* the floats of blocks 8j .. 8j + 15 at f (wide), or of 8j .. 8j + 7 in both
 * halves */
FORCE_INLINE __m512 act_floats(const float *f, int64_t j, bool wide) {
    if (wide) {
        return _mm512_loadu_ps(f + 8 * j);
    }
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(f + 8 * j))));
}

/* acc + a * b in every lane (wide), or in the lower half only (a 256 alone:
 * its upper half repeats the lower) */
FORCE_INLINE __m512 acc_fma(__m512 a, __m512 b, __m512 acc, bool wide) {
    return wide ? _mm512_fmadd_ps(a, b, acc) : _mm512_mask3_fmadd_ps(a, b, acc, 0x00ff);
}

/* activation row c's block scales; its block sums follow all k / 32 scales */
FORCE_INLINE const float *row_scales(const uint8_t *act, size_t ab, int c, int64_t k) {
    return (const float *)(const void *)(act + (size_t)c * ab + (size_t)k);
}

/* acc[c] plus activation row c's products with the chunk P: 256s j and j + 1
 * of the weight row (wide) or 256 j in both halves */
FORCE_INLINE void chunk_products(enum rows_type t, const int NC, const pair_chunk *P, int64_t k,
                                 int64_t j, bool wide, const uint8_t *restrict act, size_t ab,
                                 __m512 acc[8]) {
    const bool min_type = rows_has_min(t) || t == R_Q4_K || t == R_Q5_K;
    const int64_t n_blocks = k / QUANT_PANEL_GROUP;
    if (t == R_Q6_K) {
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab;
            __m512i s0 = P->base, s1 = P->base2;
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                s0 = _mm512_dpbusd_epi32(s0, act_vector(a, j, g, wide), P->v[g]);
                s1 = _mm512_dpbusd_epi32(s1, act_vector(a, j, 4 + g, wide), P->v[4 + g]);
            }
            const __m512 fl = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), P->dw2,
                                              _mm512_mul_ps(_mm512_cvtepi32_ps(s0), P->dw));
            acc[c] = acc_fma(fl, act_floats(row_scales(act, ab, c, k), j, wide), acc[c], wide);
        }
        return;
    }
    /* group by group across the rows, so that the rows' chains of VPDPBUSD
     * run side by side; with one or two rows each row's groups in two chains
     * joined at the end, so that the chains do not wait on VPDPBUSD's latency
     * (integer sums: the same whatever the order) */
    __m512i s[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        s[c] = P->base;
    }
    if (NC <= 2) {
        __m512i s2[2];
#pragma GCC unroll 2
        for (int c = 0; c < NC; c++) {
            s2[c] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
#pragma GCC unroll 2
            for (int c = 0; c < NC; c++) {
                const uint8_t *a = act + (size_t)c * ab;
                s[c] = _mm512_dpbusd_epi32(s[c], act_vector(a, j, g, wide), P->v[g]);
                s2[c] = _mm512_dpbusd_epi32(s2[c], act_vector(a, j, 4 + g, wide), P->v[4 + g]);
            }
        }
#pragma GCC unroll 2
        for (int c = 0; c < NC; c++) {
            s[c] = _mm512_add_epi32(s[c], s2[c]);
        }
    } else {
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                s[c] = _mm512_dpbusd_epi32(s[c], act_vector(act + (size_t)c * ab, j, g, wide),
                                           P->v[g]);
            }
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        const float *f = row_scales(act, ab, c, k);
        acc[c] = acc_fma(_mm512_mul_ps(_mm512_cvtepi32_ps(s[c]), act_floats(f, j, wide)), P->dw,
                         acc[c], wide);
        if (min_type) {
            acc[c] = acc_fma(act_floats(f + n_blocks, j, wide), P->mw, acc[c], wide);
        }
    }
}

/* acc[c] plus weight row w's chunks j0 .. j1 - 1 (each two 256s: lanes 0-7
 * the first's blocks, 8-15 the second's) against NC activation rows */
FORCE_INLINE void row_chunks(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                             const uint8_t *restrict act, size_t ab, int64_t j0, int64_t j1,
                             ptrdiff_t pf, __m512 acc[8]) {
    const size_t cb = rows_chunk_bytes(t);
    if (j0 >= j1) {
        return;
    }
    if (pipelined(t, NC)) {
        /* software-pipelined: chunk j + 1 decoded before chunk j's products in
         * program order, so that the decode's chain of loads and shuffles
         * runs while the products wait (with few rows the registers allow) */
        pair_chunk P, Pn;
        decode_chunk(t, w + (size_t)(2 * j0) * cb, w + (size_t)(2 * j0 + 1) * cb, cb, pf, &Pn);
        for (int64_t j = j0; j < j1; j++) {
            P = Pn;
            if (j + 1 < j1) {
                const uint8_t *p = w + (size_t)(2 * j + 2) * cb;
                decode_chunk(t, p, p + cb, cb, pf, &Pn);
            }
            chunk_products(t, NC, &P, k, 2 * j, true, act, ab, acc);
        }
    } else {
        for (int64_t j = j0; j < j1; j++) {
            pair_chunk P;
            const uint8_t *p = w + (size_t)(2 * j) * cb;
            decode_chunk(t, p, p + cb, cb, pf, &P);
            chunk_products(t, NC, &P, k, 2 * j, true, act, ab, acc);
        }
    }
}

/* acc[c] plus weight row w's part after its pairs of 256s: a last 256
 * without a partner is its own partner with the upper half's products left
 * out, and so are the last k % 256 a block at a time; then y[c * ldy] the
 * sum of acc[c]'s lanes */
FORCE_INLINE void row_finish(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                             const uint8_t *restrict act, size_t ab, __m512 acc[8],
                             float *restrict y, size_t ldy) {
    const size_t cb = rows_chunk_bytes(t);
    const int64_t n_super = k / SUPER;
    if (n_super % 2 != 0) {
        pair_chunk P;
        const uint8_t *p = w + (size_t)(n_super - 1) * cb;
        decode_chunk(t, p, p, cb, ROWS_PREFETCH_BYTES, &P);
        chunk_products(t, NC, &P, k, n_super - 1, false, act, ab, acc);
    }
    /* the last k % 256 (K-quant and IQ4_XS rows are whole 256s) */
    const int64_t n_tail = (k % SUPER) / 32;
    const size_t bb = rows_block_bytes(t);
    for (int64_t tb = 0; tb < n_tail; tb++) {
        const size_t at = (size_t)(n_super * 8 + tb) * bb;
        __m512i wc, base;
        __m512 dw, mw;
        tail_block(t, w + at, w + at, &wc, &base, &dw, &mw);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)(n_super * SUPER + 32 * tb);
            const float *f = row_scales(act, ab, c, k) + 8 * n_super;
            const __m512i s = _mm512_dpbusd_epi32(
                base, _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)a)),
                wc);
            acc[c] = acc_fma(_mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(f[tb])), dw,
                             acc[c], false);
            if (rows_has_min(t)) {
                acc[c] = acc_fma(_mm512_set1_ps(f[k / QUANT_PANEL_GROUP + tb]), mw, acc[c], false);
            }
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = _mm512_reduce_add_ps(acc[c]);
    }
}

/* Weight rows w, w + bx, ... (n of them, up to ROWS_GROUP) against NC
 * activation rows: y[c * ldy + r] for row r. Where the NC activation rows
 * are more than the L1 data cache holds, each row alone would read them all
 * from L2 (a row walk does NC rows' VPDPBUSD per 64 weight bytes): then the
 * rows go over k together in slices whose activations take half the L1, all
 * of them over one slice before the next, each row's sums kept between
 * slices, so that every sum adds the same products in the same order as a
 * row walked alone. On a Zen 5 (48 KiB L1, bench_gemm Q4_0 -k 5632 -n 2048, 8
 * rows of 7 KiB) one row at a time ran 106-109 G MAC/s, the slices 162-167,
 * and 6 rows (42 KiB) 168 in one slice against 155 in slices
 * (docs/kernels.md, "One weight row at a time"). One walk serves every count
 * of weight rows so that each type and row count compiles to one copy. */
#define ROWS_GROUP 8

FORCE_INLINE void row_group(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                            size_t bx, int n, const uint8_t *restrict act, size_t ab,
                            float *restrict y, size_t ldy) {
    const size_t l1 = quant_cpu_features()->l1d_bytes;
    const int64_t n_wide = k / SUPER / 2;
    /* chunks per slice: the slice's activations (each chunk's 512 bytes and
     * up to 32 floats of scales and sums per row) within half the L1 */
    const size_t chunk_act = (size_t)NC * (2 * SUPER + 32 * sizeof(float));
    int64_t per_slice = (size_t)NC * ab <= l1 ? n_wide : (int64_t)(l1 / 2 / chunk_act);
    if (per_slice < 1) {
        per_slice = 1;
    }
    /* In slices the walk jumps between the group's rows, so a fixed distance
     * ahead lands in another row's slice, read later or not at all; asking
     * for the same bytes of the row ROWS_GROUP on asks for what the next
     * group reads in the same order, one group (8 rows, 25 KiB of Q4_0 at
     * k = 5632) ahead. Zen 5, bench_gemm Q4_0 -k 5632 -n 32768 -c 8 (from
     * memory), three rounds alternating: 102-121 -> 126-139 G MAC/s; in
     * llama-1b at 8 sequences the FFN down products' time 1142-1169 ->
     * 960-980 ms (docs/kernels.md, "Slices from memory"). */
    const ptrdiff_t pf = per_slice < n_wide ? (ptrdiff_t)(ROWS_GROUP * bx) : ROWS_PREFETCH_BYTES;
    __m512 sums[ROWS_GROUP][8];
    for (int r = 0; r < n; r++) {
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            sums[r][c] = _mm512_setzero_ps();
        }
    }
    for (int64_t j0 = 0; j0 < n_wide; j0 += per_slice) {
        const int64_t j1 = j0 + per_slice < n_wide ? j0 + per_slice : n_wide;
        for (int r = 0; r < n; r++) {
            __m512 acc[8];
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                acc[c] = sums[r][c];
            }
            row_chunks(t, NC, k, w + (size_t)r * bx, act, ab, j0, j1, pf, acc);
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                sums[r][c] = acc[c];
            }
        }
    }
    for (int r = 0; r < n; r++) {
        row_finish(t, NC, k, w + (size_t)r * bx, act, ab, sums[r], y + r, ldy);
    }
}

#define ROW_DOTS_GROUP row_group
#include "quant/rows_drive.h"

ROWS_DEFINE(rows_q4_0_avx512, R_Q4_0)
ROWS_DEFINE(rows_q5_0_avx512, R_Q5_0)
ROWS_DEFINE(rows_q4_1_avx512, R_Q4_1)
ROWS_DEFINE(rows_q5_1_avx512, R_Q5_1)
ROWS_DEFINE(rows_q8_0_avx512, R_Q8_0)
ROWS_DEFINE(rows_iq4_nl_avx512, R_IQ4_NL)
ROWS_DEFINE(rows_iq4_xs_avx512, R_IQ4_XS)
ROWS_DEFINE(rows_q4_K_avx512, R_Q4_K)
ROWS_DEFINE(rows_q5_K_avx512, R_Q5_K)
ROWS_DEFINE(rows_q6_K_avx512, R_Q6_K)

void quant_install_rows_avx512(quant_traits *t) {
    t[GGUF_TYPE_Q4_0].rows = rows_q4_0_avx512;
    t[GGUF_TYPE_Q5_0].rows = rows_q5_0_avx512;
    t[GGUF_TYPE_Q4_1].rows = rows_q4_1_avx512;
    t[GGUF_TYPE_Q5_1].rows = rows_q5_1_avx512;
    t[GGUF_TYPE_Q8_0].rows = rows_q8_0_avx512;
    t[GGUF_TYPE_IQ4_NL].rows = rows_iq4_nl_avx512;
    t[GGUF_TYPE_IQ4_XS].rows = rows_iq4_xs_avx512;
    t[GGUF_TYPE_Q4_K].rows = rows_q4_K_avx512;
    t[GGUF_TYPE_Q5_K].rows = rows_q5_K_avx512;
    t[GGUF_TYPE_Q6_K].rows = rows_q6_K_avx512;
    const uint32_t types[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q5_0,   GGUF_TYPE_Q4_1,   GGUF_TYPE_Q5_1,
                              GGUF_TYPE_Q8_0, GGUF_TYPE_IQ4_NL, GGUF_TYPE_IQ4_XS, GGUF_TYPE_Q4_K,
                              GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        t[types[i]].rows_fmt = &rows_fmt;
    }
}
