/*
 * The product of a weight matrix with a few activation rows (quant.h:
 * quant_rows_fmt) on AVX-512 VNNI: decoding several sequences at once, or
 * one, where the packed GEMM's 16-lane panels would mostly multiply zeros.
 *
 * A weight row is walked 256 elements (eight blocks of 32) at a time. Its
 * codes are decoded once into four registers of 64 signed bytes, each holding
 * 8 consecutive elements of every block (lanes 4L .. 4L + 1: block L, lanes
 * 4L + 2 .. 4L + 3: block L + 4, in each 128-bit quarter L), and those meet
 * each activation row's codes, stored in the same order, in four VPDPBUSD:
 * every int32 lane then sums 16 products of one block, and one conversion,
 * one multiplication by the row's scales and one FMA by the weights' scales
 * per 256 elements make them floats. The activation codes are stored plus
 * 128 so that they are VPDPBUSD's unsigned operand; the 128 * sum(w) this
 * adds is taken off by starting each row's sums from -128 * sum(w), computed
 * once per 256 weights for all rows. A row's last k % 256 elements go 64 at a
 * time (two blocks, eight lanes each). Every row runs the same instructions
 * whatever the number of rows, so a sequence's logits do not depend on what
 * it is batched with.
 *
 * The K-quants (Q4_K, Q5_K, Q6_K) read the same rows: a super-block of 256
 * is decoded into the same four vectors (sub-block = block of 32). Q4_K and
 * Q5_K take their minimums, -dmin * m_s * sum(y over sub-block s), from the
 * row's block sums with one more FMA per 256 elements (an accumulator of its
 * own, 8 lanes); Q6_K's scales are per 16 elements, and lanes sum elements
 * of both halves of a block (vectors 0-1: elements 0..15, 2-3: 16..31), so
 * it keeps two sums per lane, each with its own scales.
 *
 * Layout of an activation row (quant_rows_bytes(k)): the codes, for each
 * 256 elements the four 64-byte vectors above (byte 16L + 8h + e of vector v:
 * element 8v + e of block L + 4h), then the last k % 256 in element order;
 * then for each 256 elements 24 floats: the scale d of each int32 lane's
 * block (16), then s_b = d_b * (sum of block b's codes) for b = 0..7; then
 * one float (d) per block of the last k % 256, then each of those blocks'
 * d * (sum of its codes) (Q4_1's and Q5_1's minimums need them).
 *
 * Q4_1 and Q5_1 take row_dots_k's walk with eight blocks for a super-block:
 * unsigned codes as the K-quants', and their minimums, m * d_a * sum(a), from
 * those block sums.
 */
#include "quant/kernels.h"
#include "quant/kquant_impl.h"
#include "quant/q8_avx2.h"
#include "quant/rows_types.h"

#include <immintrin.h>
#include <string.h>

#define FORCE_INLINE static inline __attribute__((always_inline))
#define SUPER        256 /* elements decoded at once */
#define SUPER_FLOATS 24  /* per 256 elements: 16 lane scales, 8 block sums */
#define SUMS         16  /* where the block sums start among them */

/* ---- activations ---- */

/* the block of a 256-element chunk whose scale lane j of a sum holds */
static int lane_block(int j) {
    return (j / 4) + 4 * ((j % 4) / 2);
}

static void rows_from_float(const float *restrict x, int64_t k, void *restrict row) {
    uint8_t *codes = row;
    const int64_t n_super = k / SUPER;
    float *dsup = (float *)(void *)(codes + k);
    float *dtail = dsup + SUPER_FLOATS * n_super;
    for (int64_t g = 0; g < k / QUANT_PANEL_GROUP; g++) {
        __m256i q[4];
        /* the codes of vec_dot's Q8_0 activations, and their fp16-rounded scale */
        const float d = _cvtsh_ss(_cvtss_sh(q8_codes_avx2(x + g * QUANT_PANEL_GROUP, q), 0));
        uint8_t c[32];
        _mm256_storeu_si256((__m256i *)(void *)c,
                            _mm256_xor_si256(q8_pack_avx2(q), _mm256_set1_epi8((char)0x80)));
        int sum = 0;
        for (int e = 0; e < 32; e++) {
            sum += (int8_t)(c[e] ^ 0x80);
        }
        const float s = d * (float)sum; /* the block's sum, for the minimums */
        const int64_t sc = g / 8;
        if (sc < n_super) {
            const int b = (int)(g % 8), L = b % 4, h = b / 4;
            uint8_t *v = codes + sc * SUPER;
            for (int vi = 0; vi < 4; vi++) {
                memcpy(v + 64 * vi + 16 * L + 8 * h, c + 8 * vi, 8);
            }
            for (int j = 0; j < 16; j++) {
                if (lane_block(j) == b) {
                    dsup[SUPER_FLOATS * sc + j] = d;
                }
            }
            dsup[SUPER_FLOATS * sc + SUMS + b] = s;
        } else {
            memcpy(codes + g * QUANT_PANEL_GROUP, c, 32);
            dtail[g - 8 * n_super] = d;
            dtail[(k % SUPER) / 32 + g - 8 * n_super] = s;
        }
    }
}

static void rows_to_q8_0(const void *restrict row, int64_t k, void *restrict blocks) {
    const uint8_t *codes = row;
    const int64_t n_super = k / SUPER;
    const float *dsup = (const float *)(const void *)(codes + k);
    const float *dtail = dsup + SUPER_FLOATS * n_super;
    block_q8_0 *out = blocks;
    for (int64_t g = 0; g < k / QUANT_PANEL_GROUP; g++) {
        const int64_t sc = g / 8;
        float d;
        uint8_t c[32];
        if (sc < n_super) {
            const int b = (int)(g % 8), L = b % 4, h = b / 4;
            for (int vi = 0; vi < 4; vi++) {
                memcpy(c + 8 * vi, codes + sc * SUPER + 64 * vi + 16 * L + 8 * h, 8);
            }
            d = dsup[SUPER_FLOATS * sc + 4 * L + 2 * h];
        } else {
            memcpy(c, codes + g * QUANT_PANEL_GROUP, 32);
            d = dtail[g - 8 * n_super];
        }
        out[g].d = (lares_f16)_cvtss_sh(d, 0);
        for (int e = 0; e < 32; e++) {
            out[g].qs[e] = (int8_t)(c[e] ^ 0x80);
        }
    }
}

static void rows_to_sums(const void *restrict row, int64_t k, float *restrict sums) {
    const float *dsup = (const float *)(const void *)((const uint8_t *)row + k);
    for (int64_t sc = 0; sc < k / SUPER; sc++) {
        memcpy(sums + 8 * sc, dsup + SUPER_FLOATS * sc + SUMS, 8 * sizeof(float));
    }
}

static const quant_rows_fmt rows_fmt = {
    .from_float = rows_from_float, .to_q8_0 = rows_to_q8_0, .to_sums = rows_to_sums};

/* ---- weights ---- */

/* [d0 x 8, d1 x 8] from two fp16 scales */
FORCE_INLINE __m512 scale_pair(lares_f16 d0, lares_f16 d1) {
    return _mm512_mask_broadcastss_ps(_mm512_set1_ps(_cvtsh_ss(d0)), 0xff00,
                                      _mm_set_ss(_cvtsh_ss(d1)));
}

/* The lane scales of eight Q4_0 blocks (18 bytes each, 144 in all): every
 * scale is a 16-bit word at an even offset within the first 128 bytes, so
 * one two-register word permute picks all eight, already spread as the lanes
 * want them (d0 d0 d4 d4 d1 d1 ...), in place of eight word inserts */
FORCE_INLINE __m512 scale_eight_q4_0(const uint8_t *p) {
    const __m512i lo = _mm512_loadu_si512((const void *)p);
    const __m512i hi = _mm512_loadu_si512((const void *)(p + 64));
    const __m512i idx =
        _mm512_setr_epi32(0x00000000, 0x00240024, 0x00090009, 0x002d002d, 0x00120012, 0x00360036,
                          0x001b001b, 0x003f003f, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i w = _mm512_permutex2var_epi16(lo, idx, hi);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(w));
}

/* the lane scales of eight blocks (lane_block), from their fp16 scales */
FORCE_INLINE __m512 scale_eight(const uint8_t *p, size_t bb) {
    lares_f16 d[8];
    for (int b = 0; b < 8; b++) {
        memcpy(&d[b], p + (size_t)b * bb, 2);
    }
    const __m256 f =
        _mm256_cvtph_ps(_mm_setr_epi16((short)d[0], (short)d[4], (short)d[1], (short)d[5],
                                       (short)d[2], (short)d[6], (short)d[3], (short)d[7]));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                 _mm512_castps256_ps512(f));
}

/* 16 bytes of each of four blocks, bb bytes apart, one per 128-bit quarter */
FORCE_INLINE __m512i load_quarters(const uint8_t *p, size_t bb) {
    const __m256i a = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p)),
        _mm_loadu_si128((const __m128i *)(const void *)(p + bb)), 1);
    const __m256i c = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * bb))),
        _mm_loadu_si128((const __m128i *)(const void *)(p + 3 * bb)), 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
}

/* The nibbles (0..15) of eight blocks whose 16 bytes of qs (byte j: element
 * j low, j + 16 high) lie bb bytes apart from qs, as the four vectors of the
 * layout */
FORCE_INLINE void nibbles_eight(const uint8_t *qs, size_t bb, __m512i n[4]) {
    const __m512i t = load_quarters(qs, bb);
    const __m512i u = load_quarters(qs + 4 * bb, bb);
    const __m512i lo = _mm512_unpacklo_epi64(t, u), hi = _mm512_unpackhi_epi64(t, u);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    n[0] = _mm512_and_si512(lo, m4);
    n[1] = _mm512_and_si512(hi, m4);
    n[2] = _mm512_and_si512(_mm512_srli_epi16(lo, 4), m4);
    n[3] = _mm512_and_si512(_mm512_srli_epi16(hi, 4), m4);
}

/* Eight Q4_0 blocks as the four vectors of the layout: qs byte j holds
 * element j (low nibble) and j + 16 (high) */
FORCE_INLINE void eight_q4_0(const uint8_t *p, __m512i v[4], __m512 *dw, __m512i *base) {
    const __m512i k8 = _mm512_set1_epi8(8);
    __m512i n[4];
    nibbles_eight(p + offsetof(block_q4_0, qs), sizeof(block_q4_0), n);
    /* -128 * sum(q - 8) over a lane's 16 codes = 128 * 8 * 16 - 128 * sum(q):
     * the unsigned codes' sum (at most 60) fits a byte, so one VPDPBUSD
     * instead of four */
    *base = _mm512_dpbusd_epi32(
        _mm512_set1_epi32(128 * 8 * 16),
        _mm512_add_epi8(_mm512_add_epi8(n[0], n[1]), _mm512_add_epi8(n[2], n[3])),
        _mm512_set1_epi8((char)-128));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        v[i] = _mm512_sub_epi8(n[i], k8);
    }
    *dw = scale_eight_q4_0(p);
}

/* The fifth bits of eight Q5_0 or Q5_1 blocks (bb bytes apart, qh at byte
 * qh_at < 8 of a block) as masks of the four vectors: byte 16L + 8h + e of
 * vector v is element 8v + e of block L + 4h, whose fifth bit is bit e of
 * byte v of that block's qh. Quarter L of the first eight bytes of blocks L
 * and L + 4 gives both words to one VPSHUFB. */
FORCE_INLINE void q5_high_bits(const uint8_t *p, size_t bb, int qh_at, __mmask64 m[4]) {
    const __m512i h = _mm512_unpacklo_epi64(load_quarters(p, bb), load_quarters(p + 4 * bb, bb));
    const __m512i bit = _mm512_set1_epi64(0x8040201008040201ll);
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        const long long lo = 0x0101010101010101ll * (qh_at + v);
        const long long hi = 0x0101010101010101ll * (8 + qh_at + v);
        const __m512i idx = _mm512_set4_epi64(hi, lo, hi, lo);
        m[v] = _mm512_test_epi8_mask(_mm512_shuffle_epi8(h, idx), bit);
    }
}

/* Eight Q5_0 blocks: Q4_0's nibbles plus 16 where the fifth bit is set, minus
 * 16 (-16..15), and the rows' starting sums -128 * sum(q - 16) from the
 * unsigned codes' sum (at most 124 over the four vectors: a byte) */
FORCE_INLINE void eight_q5_0(const uint8_t *p, __m512i v[4], __m512 *dw, __m512i *base) {
    const size_t bb = sizeof(block_q5_0);
    const __m512i k16 = _mm512_set1_epi8(16);
    __mmask64 m[4];
    q5_high_bits(p, bb, offsetof(block_q5_0, qh), m);
    __m512i q[4];
    nibbles_eight(p + offsetof(block_q5_0, qs), bb, q);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        q[i] = _mm512_mask_add_epi8(q[i], m[i], q[i], k16);
        v[i] = _mm512_sub_epi8(q[i], k16);
    }
    *base = _mm512_dpbusd_epi32(
        _mm512_set1_epi32(128 * 16 * 16),
        _mm512_add_epi8(_mm512_add_epi8(q[0], q[1]), _mm512_add_epi8(q[2], q[3])),
        _mm512_set1_epi8((char)-128));
    *dw = scale_eight(p, bb);
}

/* -128 * (sum of the four products' weights) per lane: what the +128 of the
 * activation codes adds to every row's sums */
FORCE_INLINE __m512i minus_128_sum(__m512i acc, __m512i w) {
    return _mm512_dpbusd_epi32(acc, _mm512_set1_epi8((char)0x80), w);
}

/* Eight Q8_0 blocks: elements 0-15 and 16-31 of each block in quarters, and
 * (as eight_q4_0) the rows' starting sums -128 * sum(w) */
FORCE_INLINE void eight_q8_0(const uint8_t *p, __m512i v[4], __m512 *dw, __m512i *base) {
    const size_t bb = sizeof(block_q8_0);
    const uint8_t *q = p + offsetof(block_q8_0, qs);
    const __m512i t = load_quarters(q, bb), t2 = load_quarters(q + 16, bb);
    const __m512i u = load_quarters(q + 4 * bb, bb), u2 = load_quarters(q + 4 * bb + 16, bb);
    v[0] = _mm512_unpacklo_epi64(t, u);
    v[1] = _mm512_unpackhi_epi64(t, u);
    v[2] = _mm512_unpacklo_epi64(t2, u2);
    v[3] = _mm512_unpackhi_epi64(t2, u2);
    *dw = scale_eight(p, bb);
    __m512i b = minus_128_sum(_mm512_setzero_si512(), v[0]);
    b = minus_128_sum(b, v[1]);
    b = minus_128_sum(b, v[2]);
    *base = _mm512_sub_epi32(_mm512_setzero_si512(), minus_128_sum(b, v[3]));
}

/* The IQ4 codebook (kq_iq4nl_values) in every 128-bit lane, for VPSHUFB */
FORCE_INLINE __m512i iq4_codebook(void) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)kq_iq4nl_values));
}

/* Eight blocks of IQ4 indices, bb bytes apart (qs byte j: element j in the
 * low nibble, j + 16 in the high, as Q4_0), as the codebook's values in the
 * four vectors of the layout, and the rows' starting sums -128 * sum(w) */
FORCE_INLINE void eight_iq4(const uint8_t *qs, size_t bb, __m512i v[4], __m512i *base) {
    const __m512i book = iq4_codebook();
    nibbles_eight(qs, bb, v);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        v[i] = _mm512_shuffle_epi8(book, v[i]);
    }
    __m512i b = minus_128_sum(_mm512_setzero_si512(), v[0]);
    b = minus_128_sum(b, v[1]);
    b = minus_128_sum(b, v[2]);
    *base = _mm512_sub_epi32(_mm512_setzero_si512(), minus_128_sum(b, v[3]));
}

/* Eight IQ4_NL blocks: Q4_0's layout (an fp16 scale, then 16 bytes of
 * indices), so Q4_0's scales too */
FORCE_INLINE void eight_iq4_nl(const uint8_t *p, __m512i v[4], __m512 *dw, __m512i *base) {
    eight_iq4(p + offsetof(block_iq4_nl, qs), sizeof(block_iq4_nl), v, base);
    *dw = scale_eight_q4_0(p);
}

/* An IQ4_XS super-block: sub-block b's indices are bytes 16b.. of qs, its
 * scale from iq4_xs_scales8 (rows_types.h); each lane takes its block's */
FORCE_INLINE void super_iq4_xs(const uint8_t *p, __m512i v[4], __m512 *dw, __m512i *base) {
    const block_iq4_xs *b = (const block_iq4_xs *)(const void *)p;
    eight_iq4(b->qs, 16, v, base);
    *dw = _mm512_permutexvar_ps(/* lane j: block lane_block(j) */
                                _mm512_setr_epi32(0, 0, 4, 4, 1, 1, 5, 5, 2, 2, 6, 6, 3, 3, 7, 7),
                                _mm512_castps256_ps512(iq4_xs_scales8(b)));
}

/* the 64 nibbles (0..15) of two blocks' 16 bytes of qs, in element order
 * (byte j: element j low, j + 16 high) */
FORCE_INLINE __m512i pair_nibbles(const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i a =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs0));
    const __m256i c =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs1));
    const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
    return _mm512_and_si512(_mm512_srlv_epi64(t, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                            _mm512_set1_epi8(0x0f));
}

/* the 64 codes of blocks b and b + 1 of an IQ4_NL row, in element order */
FORCE_INLINE __m512i pair_iq4_nl(const block_iq4_nl *b) {
    return _mm512_shuffle_epi8(iq4_codebook(), pair_nibbles(b[0].qs, b[1].qs));
}

/* the 64 codes of blocks b and b + 1 of a Q4_0 row, signed, in element order */
FORCE_INLINE __m512i pair_q4_0(const block_q4_0 *b) {
    return _mm512_sub_epi8(pair_nibbles(b[0].qs, b[1].qs), _mm512_set1_epi8(8));
}

/* the 64 codes of blocks b and b + 1 of a Q5_0 row, signed, in element order */
FORCE_INLINE __m512i pair_q5_0(const block_q5_0 *b) {
    uint32_t h0, h1;
    memcpy(&h0, b[0].qh, 4);
    memcpy(&h1, b[1].qh, 4);
    const __m512i k16 = _mm512_set1_epi8(16);
    const __m512i n = pair_nibbles(b[0].qs, b[1].qs);
    const __m512i q = _mm512_mask_add_epi8(n, (__mmask64)h0 | (__mmask64)h1 << 32, n, k16);
    return _mm512_sub_epi8(q, k16);
}

/* the 64 codes of blocks b and b + 1 of a Q4_1 or Q5_1 row, in element order */
FORCE_INLINE __m512i pair_min(enum rows_type t, const uint8_t *p) {
    if (t == R_Q4_1) {
        const block_q4_1 *b = (const block_q4_1 *)(const void *)p;
        return pair_nibbles(b[0].qs, b[1].qs);
    }
    const block_q5_1 *b = (const block_q5_1 *)(const void *)p;
    uint32_t h0, h1;
    memcpy(&h0, b[0].qh, 4);
    memcpy(&h1, b[1].qh, 4);
    const __m512i n = pair_nibbles(b[0].qs, b[1].qs);
    return _mm512_mask_add_epi8(n, (__mmask64)h0 | (__mmask64)h1 << 32, n, _mm512_set1_epi8(16));
}

FORCE_INLINE __m512i pair_q8_0(const block_q8_0 *b) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)b[0].qs)),
        _mm256_loadu_si256((const __m256i *)(const void *)b[1].qs), 1);
}

/* Software prefetch of the weight row, 4 KiB ahead, with any number of
 * activation rows. With many rows each weight byte takes long enough that
 * the hardware prefetchers fall behind (bench_gemm -k 2048 -n 131072, 300
 * MB of weights, one thread, AMD EPYC Zen 4 of 2026-11-25: 8 rows Q4_0
 * 79-82 -> 116-125 G MAC/s and Q4_K 82 -> 119-130 with 2 KiB ahead; 6 rows
 * Q4_0 87 -> 125, Q8_0 68 -> 91). With one or two rows that Zen 4 measured it
 * slower at 1-2 KiB ahead (Q4_K one row 45 -> 36 with 1 KiB, two rows 80 ->
 * 74 with 2 KiB), so until 2026-11-29 only four rows or more asked; on an
 * Intel Xeon (family 6 model 207) one stream then read memory a block at a
 * time: llama-1b tg16, 2 threads, alternating builds (t/s), Q4_0 21.3-22.8
 * without, 32.6-33.1 with 2 KiB, 35.1-35.7 with 4 KiB ahead; Q4_K_M
 * 20.2 / 30.6-31.8 / 30.7-33.6; with 4 and 8 rows the same within noise.
 * (A short distance is what hurt on both CPUs: 1 KiB ahead also lost on the
 * Xeon, rows_avxvnni.c.) On another host of that Xeon model (2026-11-30,
 * memory about a fifth faster) one to four rows ran 12 % faster 2-3 KiB ahead
 * than 4 KiB (Q4_K_M one row 31.99-33.53 -> 37.27-37.68 t/s with 3 KiB, Q4_0
 * 31.54-32.71 -> 36.29-37.68; 2 KiB the same as 3), while 8 rows, which take
 * the pair walk, kept 4 KiB (Q4_K_M 160.6-161.6 against 144.6-155.9 at 2-3
 * KiB): so the single walk (1 to 4 rows) asks 3 KiB ahead, between the two
 * hosts' best, and the pair walk 4 KiB. */
#define ROWS_PREFETCH_BYTES      3072
#define ROWS_PAIR_PREFETCH_BYTES 4096

/* the n bytes of weights at p, `ahead` bytes ahead */
FORCE_INLINE void prefetch_ahead(const uint8_t *p, size_t n, size_t ahead) {
    quant_prefetch(p + ahead, n);
}

/* A row's sums of a 256-element chunk: its starting sums, then the four
 * activation vectors at a against the weights' four */
FORCE_INLINE __m512i chunk_sums(__m512i base, const uint8_t *a, const __m512i v[4]) {
    __m512i s = _mm512_dpbusd_epi32(base, _mm512_loadu_si512((const void *)a), v[0]);
    s = _mm512_dpbusd_epi32(s, _mm512_loadu_si512((const void *)(a + 64)), v[1]);
    s = _mm512_dpbusd_epi32(s, _mm512_loadu_si512((const void *)(a + 128)), v[2]);
    return _mm512_dpbusd_epi32(s, _mm512_loadu_si512((const void *)(a + 192)), v[3]);
}

/* chunk_sums for two weight rows (v and u), each activation vector loaded once */
FORCE_INLINE void chunk_sums2(const uint8_t *a, __m512i base0, const __m512i v[4], __m512i base1,
                              const __m512i u[4], __m512i *s0, __m512i *s1) {
    __m512i x = base0, y = base1;
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i ai = _mm512_loadu_si512((const void *)(a + 64 * i));
        x = _mm512_dpbusd_epi32(x, ai, v[i]);
        y = _mm512_dpbusd_epi32(y, ai, u[i]);
    }
    *s0 = x;
    *s1 = y;
}

/* Eight blocks of type t at p decoded (eight_q4_0, eight_q5_0, eight_q8_0,
 * eight_iq4_nl, super_iq4_xs), the row asked for ahead of them */
FORCE_INLINE void eight_blocks(enum rows_type t, const uint8_t *p, __m512i v[4], __m512 *dw,
                               __m512i *base, size_t ahead) {
    prefetch_ahead(p, 8 * rows_block_bytes(t), ahead);
    if (t == R_Q4_0) {
        eight_q4_0(p, v, dw, base);
    } else if (t == R_Q5_0) {
        eight_q5_0(p, v, dw, base);
    } else if (t == R_IQ4_NL) {
        eight_iq4_nl(p, v, dw, base);
    } else if (t == R_IQ4_XS) {
        super_iq4_xs(p, v, dw, base);
    } else {
        eight_q8_0(p, v, dw, base);
    }
}

/* ---- the last k % 256 elements, two blocks (64 elements) at a time ---- */

/* the rows' starting sums -128 * sum(w) of two blocks' codes (element order) */
FORCE_INLINE __m512i pair_base(__m512i wc) {
    return _mm512_sub_epi32(_mm512_setzero_si512(), minus_128_sum(_mm512_setzero_si512(), wc));
}

/* acc plus a row's products of two blocks: lanes 0-7 the first block, 8-15
 * the second; a the row's 64 codes, ds its two scales, dw the weights' */
FORCE_INLINE __m512 pair_row(__m512 acc, __m512i base, const uint8_t *a, __m512i wc,
                             const float *ds, __m512 dw) {
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i s0 = _mm512_dpbusd_epi32(base, _mm512_loadu_si512((const void *)a), wc);
    const __m512 da = _mm512_permutexvar_ps(
        spread,
        _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(const void *)ds))));
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s0), da), dw, acc);
}

/* A weight row's last k % 256 elements against NC activation rows, added to
 * acc, 64 at a time: lanes 0-7 the first block, 8-15 the second. Q4_1 and
 * Q5_1 also add minus their minimums' products, m d_a sum(a) of each block,
 * to lanes 0 and 1 of accm (NULL for the other types). */
FORCE_INLINE void tail_dots(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                            const uint8_t *restrict act, size_t ab, __m512 acc[8], __m256 accm[8]) {
    const size_t bb = rows_block_bytes(t);
    const int64_t n_super = k / SUPER;
    const float *dtail = (const float *)(const void *)(act + k) + SUPER_FLOATS * n_super;
    const int64_t n_tail = (k % SUPER) / 32;
    const bool min_type = rows_has_min(t);
    for (int64_t j = 0; j < n_tail / 2; j++) {
        const uint8_t *p = w + (size_t)(n_super * 8 + 2 * j) * bb;
        __m512i wc;
        __m512 dw;
        __m256 mw = _mm256_setzero_ps();
        if (t == R_Q4_0) {
            const block_q4_0 *b = (const block_q4_0 *)(const void *)p;
            wc = pair_q4_0(b);
            dw = scale_pair(b[0].d, b[1].d);
        } else if (t == R_Q5_0) {
            const block_q5_0 *b = (const block_q5_0 *)(const void *)p;
            wc = pair_q5_0(b);
            dw = scale_pair(b[0].d, b[1].d);
        } else if (min_type) { /* d, then m, at the start of both layouts */
            lares_f16 d0, d1, m0, m1;
            memcpy(&d0, p, 2);
            memcpy(&d1, p + bb, 2);
            memcpy(&m0, p + 2, 2);
            memcpy(&m1, p + bb + 2, 2);
            wc = pair_min(t, p);
            dw = scale_pair(d0, d1);
            mw = _mm256_setr_ps(-_cvtsh_ss(m0), -_cvtsh_ss(m1), 0, 0, 0, 0, 0, 0);
        } else if (t == R_IQ4_NL) {
            const block_iq4_nl *b = (const block_iq4_nl *)(const void *)p;
            wc = pair_iq4_nl(b);
            dw = scale_pair(b[0].d, b[1].d);
        } else { /* Q8_0 (IQ4_XS rows are whole 256s) */
            const block_q8_0 *b = (const block_q8_0 *)(const void *)p;
            wc = pair_q8_0(b);
            dw = scale_pair(b[0].d, b[1].d);
        }
        const __m512i base = pair_base(wc);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)(n_super * SUPER + 64 * j);
            const float *ds =
                (const float *)(const void *)((const uint8_t *)(dtail + 2 * j) + (size_t)c * ab);
            acc[c] = pair_row(acc[c], base, a, wc, ds, dw);
            if (min_type) { /* the two blocks' sums follow the tail's scales */
                const __m256 sm = _mm256_castps128_ps256(
                    _mm_castpd_ps(_mm_load_sd((const double *)(const void *)(ds + n_tail))));
                accm[c] = _mm256_fmadd_ps(_mm256_and_ps(sm, _mm256_castsi256_ps(_mm256_setr_epi32(
                                                                -1, -1, 0, 0, 0, 0, 0, 0))),
                                          mw, accm[c]);
            }
        }
    }
}

/* One weight row against NC activation rows. */
FORCE_INLINE void row_dots(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                           const uint8_t *restrict act, size_t ab, float *restrict y, size_t ldy) {
    const size_t bb = rows_block_bytes(t);
    const int64_t n_super = k / SUPER;
    const float *dsup = (const float *)(const void *)(act + k);
    __m512 acc[8];
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm512_setzero_ps();
    }
    /* software-pipelined: the weights of chunk j + 1 are decoded before the
     * rows' products of chunk j in program order, so that the decode's long
     * chain of loads, inserts and shuffles runs while the products wait */
    __m512i vn[4], basen;
    __m512 dwn;
    if (n_super > 0) {
        eight_blocks(t, w, vn, &dwn, &basen, ROWS_PREFETCH_BYTES);
    }
    for (int64_t j = 0; j < n_super; j++) {
        __m512i v[4] = {vn[0], vn[1], vn[2], vn[3]};
        const __m512 dw = dwn;
        const __m512i base = basen;
        if (j + 1 < n_super) {
            eight_blocks(t, w + (size_t)(j + 1) * 8 * bb, vn, &dwn, &basen, ROWS_PREFETCH_BYTES);
        }
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)j * SUPER;
            const float *ds =
                (const float *)(const void *)((const uint8_t *)(dsup + SUPER_FLOATS * j) +
                                              (size_t)c * ab);
            const __m512i s0 = chunk_sums(base, a, v);
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s0), _mm512_loadu_ps(ds)), dw,
                                     acc[c]);
        }
    }
    tail_dots(t, NC, k, w, act, ab, acc, NULL);
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = _mm512_reduce_add_ps(acc[c]);
    }
}

/* Two weight rows (w and w + bx) against NC activation rows: each activation
 * vector is loaded once for both, which halves what the rows read from the
 * cache. With several rows that is what limits the product: on an Intel Xeon
 * (family 6 model 207), one thread, 2048 weight rows, Q4_0, 8 rows (best of
 * 300 alternations, G MAC/s) 104 -> 112 with k = 2048 and 79 -> 110 with k =
 * 5632, whose 8 rows (62 KB) overflow the 48 KB L1; with 4 rows or fewer,
 * where the rows' vectors stay in L1, one row at a time with its decode
 * software-pipelined is as fast or faster (docs/kernels.md). Each weight row
 * runs the same operations on the same values as in row_dots, so a row's
 * result does not depend on which path took it. */
FORCE_INLINE void row_dots_pair(enum rows_type t, const int NC, int64_t k,
                                const uint8_t *restrict w, size_t bx, const uint8_t *restrict act,
                                size_t ab, float *restrict y, size_t ldy) {
    const size_t bb = rows_block_bytes(t);
    const int64_t n_super = k / SUPER;
    const float *dsup = (const float *)(const void *)(act + k);
    const uint8_t *w1 = w + bx;
    __m512 acc0[8], acc1[8];
    for (int c = 0; c < NC; c++) {
        acc0[c] = _mm512_setzero_ps();
        acc1[c] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        __m512i v[4], u[4], base0, base1;
        __m512 dw0, dw1;
        eight_blocks(t, w + (size_t)j * 8 * bb, v, &dw0, &base0, ROWS_PAIR_PREFETCH_BYTES);
        eight_blocks(t, w1 + (size_t)j * 8 * bb, u, &dw1, &base1, ROWS_PAIR_PREFETCH_BYTES);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)j * SUPER;
            const float *ds =
                (const float *)(const void *)((const uint8_t *)(dsup + SUPER_FLOATS * j) +
                                              (size_t)c * ab);
            __m512i s0, s1;
            chunk_sums2(a, base0, v, base1, u, &s0, &s1);
            const __m512 d = _mm512_loadu_ps(ds);
            acc0[c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s0), d), dw0, acc0[c]);
            acc1[c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s1), d), dw1, acc1[c]);
        }
    }
    tail_dots(t, NC, k, w, act, ab, acc0, NULL);
    tail_dots(t, NC, k, w1, act, ab, acc1, NULL);
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = _mm512_reduce_add_ps(acc0[c]);
        y[(size_t)c * ldy + 1] = _mm512_reduce_add_ps(acc1[c]);
    }
}

/* ---- Q4_1 and Q5_1: unsigned codes, a scale and a minimum per block ---- */

/* Unsigned codes (Q4_1, Q5_1, Q4_K, Q5_K: 0..31): the rows' starting sums
 * -128 * sum(w) of the four vectors (their sums over the four fit a byte) */
FORCE_INLINE __m512i k_base(const __m512i v[4]) {
    const __m512i wsum = _mm512_add_epi8(_mm512_add_epi8(v[0], v[1]), _mm512_add_epi8(v[2], v[3]));
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), wsum, _mm512_set1_epi8((char)-128));
}

/* the minimums m of eight Q4_1 / Q5_1 blocks (at byte 2), in block order */
FORCE_INLINE __m256 mins_eight(const uint8_t *p, size_t bb) {
    short m[8];
    for (int b = 0; b < 8; b++) {
        memcpy(&m[b], p + (size_t)b * bb + 2, 2);
    }
    return _mm256_cvtph_ps(_mm_setr_epi16(m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]));
}

/* Eight Q4_1 or Q5_1 blocks: the codes (0..15, or 0..31 with the fifth bits)
 * in the four vectors, the lane scales d and minus the minimums m in block
 * order (row_dots_k takes the K-quants' minimums off; these add) */
FORCE_INLINE void eight_min(enum rows_type t, const uint8_t *p, __m512i v[4], __m512 *dw,
                            __m256 *mw) {
    const size_t bb = rows_block_bytes(t);
    const size_t qs = t == R_Q4_1 ? offsetof(block_q4_1, qs) : offsetof(block_q5_1, qs);
    nibbles_eight(p + qs, bb, v);
    if (t == R_Q5_1) {
        __mmask64 m[4];
        q5_high_bits(p, bb, offsetof(block_q5_1, qh), m);
        const __m512i k16 = _mm512_set1_epi8(16);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            v[i] = _mm512_mask_add_epi8(v[i], m[i], v[i], k16);
        }
    }
    *dw = scale_eight(p, bb);
    *mw = _mm256_sub_ps(_mm256_setzero_ps(), mins_eight(p, bb));
}

/* ---- K-quant weights: one super-block is one 256-element chunk ---- */

/* Q4_K / Q5_K: the 6-bit scales and minimums of the eight sub-blocks, as
 * bytes 0..7 (scales) and 8..15 (minimums). Of the 12 bytes, as 32-bit words
 * u0 u1 u2: scale j and minimum j are the low 6 bits of byte j of u0 and u1
 * for j < 4; for j >= 4, the low (scale) and high (minimum) nibble of byte
 * j - 4 of u2 hold their low 4 bits, and the top 2 bits of byte j - 4 of u0
 * (scale) and u1 (minimum) their high 2. s is followed by 4 more bytes. */
FORCE_INLINE __m128i scales_mins_k4(const uint8_t *s) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)s);
    /* u0, u2, u1, u2 >> 4 */
    const __m128i low =
        _mm_srlv_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
    /* the top 2 bits of u0, u1's bytes as bits 4, 5 of words 1, 3 */
    const __m128i top =
        _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                      _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    const __m128i keep = _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f);
    return _mm_ternarylogic_epi32(low, keep, top, 0xea); /* (low & keep) | top */
}

/* byte b of the lane order (lane_block): lanes 4L, 4L + 1 block L, 4L + 2,
 * 4L + 3 block L + 4 */
#define LANE_BYTES 0, 0, 4, 4, 1, 1, 5, 5, 2, 2, 6, 6, 3, 3, 7, 7

/* d * scale of each lane's sub-block, and dmin * minimum of sub-blocks 0..7 */
FORCE_INLINE void scale_k4(const uint8_t *s, lares_f16 d, lares_f16 dmin, __m512 *dw, __m256 *mw) {
    const __m128i sm = scales_mins_k4(s);
    const __m128i lanes = _mm_shuffle_epi8(sm, _mm_setr_epi8(LANE_BYTES));
    *dw = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lanes)),
                        _mm512_set1_ps(_cvtsh_ss(d)));
    *mw = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))),
                        _mm256_set1_ps(_cvtsh_ss(dmin)));
}

/* The 4-bit codes (0..15) of a Q4_K/Q5_K super-block as the four vectors of
 * the layout: qs byte 32 * (s / 2) + i holds element i of sub-block s, in the
 * low nibble for even s and the high nibble for odd s. Quarter L of vector v
 * takes bytes 8v.. of pair L / 2 (sub-block L) and of pair 2 + L / 2
 * (sub-block L + 4), the nibble L % 2. */
FORCE_INLINE void nibbles_k(const uint8_t *qs, __m512i v[4]) {
    const __m512i a = _mm512_loadu_si512((const void *)qs);        /* pairs 0, 1 */
    const __m512i b = _mm512_loadu_si512((const void *)(qs + 64)); /* pairs 2, 3 */
    const __m512i shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i idx = _mm512_setr_epi64(i, 8 + i, i, 8 + i, 4 + i, 12 + i, 4 + i, 12 + i);
        v[i] = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutex2var_epi64(a, idx, b), shift), m4);
    }
}

FORCE_INLINE void super_q4_K(const uint8_t *p, __m512i v[4], __m512 *dw, __m256 *mw) {
    const block_q4_K *b = (const block_q4_K *)(const void *)p;
    nibbles_k(b->qs, v);
    scale_k4(b->scales, b->d, b->dmin, dw, mw);
}

/* Q5_K: the codes of Q4_K plus 16 where bit s of qh byte i is set (element i
 * of sub-block s) */
FORCE_INLINE void super_q5_K(const uint8_t *p, __m512i v[4], __m512 *dw, __m256 *mw) {
    const block_q5_K *b = (const block_q5_K *)(const void *)p;
    nibbles_k(b->qs, v);
    /* the bit of quarter L's two sub-blocks, L and L + 4, in every byte */
    const __m512i bit =
        _mm512_setr_epi64(0x0101010101010101, 0x1010101010101010, 0x0202020202020202,
                          0x2020202020202020, 0x0404040404040404, 0x4040404040404040,
                          0x0808080808080808, (long long)0x8080808080808080ull);
    const __m512i k16 = _mm512_set1_epi8(16);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        long long h;
        memcpy(&h, b->qh + 8 * i, 8);
        const __mmask64 set = _mm512_test_epi8_mask(_mm512_set1_epi64(h), bit);
        v[i] = _mm512_mask_add_epi8(v[i], set, v[i], k16);
    }
    scale_k4(b->scales, b->d, b->dmin, dw, mw);
}

/* Q6_K: element e of half h = e / 128 (sub-blocks 4h .. 4h + 3), part
 * j = (e % 128) / 32, l = e % 32: low 4 bits in ql byte 64h + 32 (j % 2) + l
 * (nibble j / 2), high 2 in qh byte 32h + l (bits 2j, 2j + 1); codes minus 32.
 * Sub-blocks L and L + 4 (quarter L) are part L of the two halves. Scales
 * per 16 elements: lanes sum products of both halves of a block, vectors 0-1
 * the first 16 elements and 2-3 the second, so each half gets its own scales
 * (dw[0]: of elements 0..15 of each lane's block, dw[1]: 16..31). */
FORCE_INLINE void super_q6_K(const uint8_t *p, __m512i v[4], __m512 dw[2], __m512i base[2]) {
    const block_q6_K *b = (const block_q6_K *)(const void *)p;
    const __m512i l0 = _mm512_loadu_si512((const void *)b->ql);        /* half 0 */
    const __m512i l1 = _mm512_loadu_si512((const void *)(b->ql + 64)); /* half 1 */
    const __m512i hb = _mm512_loadu_si512((const void *)b->qh);
    /* low nibble for parts 0, 1, high for 2, 3; bits 2j, 2j + 1 rotated to 4, 5 */
    const __m512i nib = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i rot = _mm512_setr_epi64(4, 4, 2, 2, 0, 0, 62, 62);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    __m512i u[4]; /* the codes, 0..63 */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i il = _mm512_setr_epi64(i, 8 + i, 4 + i, 12 + i, i, 8 + i, 4 + i, 12 + i);
        const __m512i ih = _mm512_setr_epi64(i, 4 + i, i, 4 + i, i, 4 + i, i, 4 + i);
        const __m512i lo = _mm512_srlv_epi64(_mm512_permutex2var_epi64(l0, il, l1), nib);
        const __m512i hi =
            _mm512_and_si512(_mm512_rolv_epi64(_mm512_permutexvar_epi64(ih, hb), rot), m30);
        u[i] = _mm512_ternarylogic_epi32(lo, m4, hi, 0xea); /* (lo & 0x0f) | hi */
        v[i] = _mm512_sub_epi8(u[i], _mm512_set1_epi8(32));
    }
    /* -128 * sum(code - 32) per lane and half: 8 codes of each, summed in a byte */
    const __m512i k = _mm512_set1_epi32(128 * 32 * 8), m128 = _mm512_set1_epi8((char)-128);
    base[0] = _mm512_dpbusd_epi32(k, _mm512_add_epi8(u[0], u[1]), m128);
    base[1] = _mm512_dpbusd_epi32(k, _mm512_add_epi8(u[2], u[3]), m128);
    const __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
    const __m128i first = _mm_setr_epi8(0, 0, 8, 8, 2, 2, 10, 10, 4, 4, 12, 12, 6, 6, 14, 14);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
    dw[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc, first))), d);
    dw[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                              _mm_shuffle_epi8(sc, _mm_add_epi8(first, _mm_set1_epi8(1))))),
                          d);
}

/* One K-quant, Q4_1 or Q5_1 weight row against NC activation rows (k a
 * multiple of 256 for the K-quants). Q4_K/Q5_K: sum_s d sc_s sum(w y) - dmin
 * m_s sum(y), the second from the activations' block sums, in an accumulator
 * of its own; Q4_1/Q5_1 the same with eight blocks for a super-block and + m
 * sum(y) (tail_dots for the last k % 256); Q6_K: two sums per lane (the
 * block's halves), each with its scales. */
FORCE_INLINE void row_dots_k(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                             const uint8_t *restrict act, size_t ab, float *restrict y,
                             size_t ldy) {
    const bool min_type = rows_has_min(t);
    const size_t bb = min_type      ? 8 * rows_block_bytes(t)
                      : t == R_Q4_K ? sizeof(block_q4_K)
                      : t == R_Q5_K ? sizeof(block_q5_K)
                                    : sizeof(block_q6_K);
    const int64_t n_super = k / SUPER;
    const float *dsup = (const float *)(const void *)(act + k);
    __m512 acc[8];
    __m256 accm[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm512_setzero_ps();
        accm[c] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        __m512i v[4];
        __m512 dw[2];
        __m512i base6[2];
        __m256 mw = _mm256_setzero_ps();
        const uint8_t *p = w + (size_t)j * bb;
        const uint8_t *fj = (const uint8_t *)(dsup + SUPER_FLOATS * j); /* row 0's floats */
        prefetch_ahead(p, bb, ROWS_PREFETCH_BYTES);
        if (t == R_Q4_K) {
            super_q4_K(p, v, &dw[0], &mw);
        } else if (t == R_Q5_K) {
            super_q5_K(p, v, &dw[0], &mw);
        } else if (min_type) {
            eight_min(t, p, v, &dw[0], &mw);
        } else {
            super_q6_K(p, v, dw, base6);
        }
        if (t != R_Q6_K) {
            const __m512i base = k_base(v);
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                const uint8_t *a = act + (size_t)c * ab + (size_t)j * SUPER;
                const float *ds = (const float *)(const void *)(fj + (size_t)c * ab);
                const __m512i s0 = chunk_sums(base, a, v);
                acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s0), _mm512_loadu_ps(ds)),
                                         dw[0], acc[c]);
                accm[c] = _mm256_fmadd_ps(_mm256_loadu_ps(ds + SUMS), mw, accm[c]);
            }
        } else {
            const __m512i base0 = base6[0], base1 = base6[1];
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                const uint8_t *a = act + (size_t)c * ab + (size_t)j * SUPER;
                const float *ds = (const float *)(const void *)(fj + (size_t)c * ab);
                __m512i s0 = _mm512_dpbusd_epi32(base0, _mm512_loadu_si512((const void *)a), v[0]);
                __m512i s1 =
                    _mm512_dpbusd_epi32(base1, _mm512_loadu_si512((const void *)(a + 128)), v[2]);
                s0 = _mm512_dpbusd_epi32(s0, _mm512_loadu_si512((const void *)(a + 64)), v[1]);
                s1 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512((const void *)(a + 192)), v[3]);
                const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), dw[1],
                                                 _mm512_mul_ps(_mm512_cvtepi32_ps(s0), dw[0]));
                acc[c] = _mm512_fmadd_ps(f, _mm512_loadu_ps(ds), acc[c]);
            }
        }
    }
    tail_dots(t, NC, k, w, act, ab, acc, accm); /* (K-quant rows are whole 256s) */
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        /* the minimums' sums off lanes 0..7 */
        y[(size_t)c * ldy] =
            _mm512_reduce_add_ps(_mm512_sub_ps(acc[c], _mm512_zextps256_ps512(accm[c])));
    }
}

/* Two Q4_K or Q5_K weight rows (w and w + bx) against NC activation rows, each
 * activation vector loaded once for both (row_dots_pair); each row runs
 * row_dots_k's operations (Q6_K: row_dots_q6_pair). One thread, 2048 weight
 * rows, 8 rows, best of 300 alternations (G MAC/s): Q4_K 92.8 -> 99.4-99.8
 * with k = 2048 and 78.0 -> 101.7-101.9 with k = 5632; 6 rows 1.02-1.06x. */
FORCE_INLINE void row_dots_k_pair(enum rows_type t, const int NC, int64_t k,
                                  const uint8_t *restrict w, size_t bx, const uint8_t *restrict act,
                                  size_t ab, float *restrict y, size_t ldy) {
    const size_t bb = t == R_Q4_K ? sizeof(block_q4_K) : sizeof(block_q5_K);
    const int64_t n_super = k / SUPER;
    const float *dsup = (const float *)(const void *)(act + k);
    const uint8_t *w1 = w + bx;
    __m512 acc0[8], acc1[8];
    __m256 accm0[8], accm1[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        acc0[c] = _mm512_setzero_ps();
        acc1[c] = _mm512_setzero_ps();
        accm0[c] = _mm256_setzero_ps();
        accm1[c] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        __m512i v[4], u[4];
        __m512 dw0, dw1;
        __m256 mw0, mw1;
        const uint8_t *p = w + (size_t)j * bb;
        const uint8_t *q = w1 + (size_t)j * bb;
        const uint8_t *fj = (const uint8_t *)(dsup + SUPER_FLOATS * j);
        prefetch_ahead(p, bb, ROWS_PAIR_PREFETCH_BYTES);
        prefetch_ahead(q, bb, ROWS_PAIR_PREFETCH_BYTES);
        if (t == R_Q4_K) {
            super_q4_K(p, v, &dw0, &mw0);
            super_q4_K(q, u, &dw1, &mw1);
        } else {
            super_q5_K(p, v, &dw0, &mw0);
            super_q5_K(q, u, &dw1, &mw1);
        }
        const __m512i base0 = k_base(v), base1 = k_base(u);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)j * SUPER;
            const float *ds = (const float *)(const void *)(fj + (size_t)c * ab);
            __m512i s0, s1;
            chunk_sums2(a, base0, v, base1, u, &s0, &s1);
            const __m512 d = _mm512_loadu_ps(ds);
            acc0[c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s0), d), dw0, acc0[c]);
            acc1[c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s1), d), dw1, acc1[c]);
            const __m256 sm = _mm256_loadu_ps(ds + SUMS);
            accm0[c] = _mm256_fmadd_ps(sm, mw0, accm0[c]);
            accm1[c] = _mm256_fmadd_ps(sm, mw1, accm1[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] =
            _mm512_reduce_add_ps(_mm512_sub_ps(acc0[c], _mm512_zextps256_ps512(accm0[c])));
        y[(size_t)c * ldy + 1] =
            _mm512_reduce_add_ps(_mm512_sub_ps(acc1[c], _mm512_zextps256_ps512(accm1[c])));
    }
}

/* Two Q6_K weight rows (w and w + bx) against NC activation rows, each
 * activation vector loaded once for both; each row runs row_dots_k's Q6_K
 * operations in the same order, so its result is the same as alone. The two
 * rows' scales and starting sums do not all fit the registers beside the
 * accumulators, which costs with few rows: one thread from memory, best of
 * 300 alternations (G MAC/s, single -> pair), k = 2048: 6 rows 76.5 -> 77.8,
 * 8 rows 82.4 -> 84.5; k = 5632: 5 rows 67.8 -> 58.9, 6 rows 69.3 -> 64.5, 7
 * rows 61.0 -> 64.1, 8 rows 64.6 -> 70.0; k = 11008 (a 7B's FFN down), 6
 * rows 70.5 -> 76.4, 7 rows 70.0 -> 78.8, 8 rows 71.3 -> 81.9. So 7 and 8
 * rows take it. */
FORCE_INLINE void row_dots_q6_pair(const int NC, int64_t k, const uint8_t *restrict w, size_t bx,
                                   const uint8_t *restrict act, size_t ab, float *restrict y,
                                   size_t ldy) {
    const size_t bb = sizeof(block_q6_K);
    const int64_t n_super = k / SUPER;
    const float *dsup = (const float *)(const void *)(act + k);
    const uint8_t *w1 = w + bx;
    __m512 acc0[8], acc1[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        acc0[c] = _mm512_setzero_ps();
        acc1[c] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        __m512i v[4], u[4], bv[2], bu[2];
        __m512 dv[2], du[2];
        const uint8_t *p = w + (size_t)j * bb;
        const uint8_t *q = w1 + (size_t)j * bb;
        const uint8_t *fj = (const uint8_t *)(dsup + SUPER_FLOATS * j);
        prefetch_ahead(p, bb, ROWS_PAIR_PREFETCH_BYTES);
        prefetch_ahead(q, bb, ROWS_PAIR_PREFETCH_BYTES);
        super_q6_K(p, v, dv, bv);
        super_q6_K(q, u, du, bu);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)j * SUPER;
            const float *ds = (const float *)(const void *)(fj + (size_t)c * ab);
            const __m512i a0 = _mm512_loadu_si512((const void *)a);
            const __m512i a2 = _mm512_loadu_si512((const void *)(a + 128));
            __m512i s0 = _mm512_dpbusd_epi32(bv[0], a0, v[0]);
            __m512i s1 = _mm512_dpbusd_epi32(bv[1], a2, v[2]);
            __m512i r0 = _mm512_dpbusd_epi32(bu[0], a0, u[0]);
            __m512i r1 = _mm512_dpbusd_epi32(bu[1], a2, u[2]);
            const __m512i a1 = _mm512_loadu_si512((const void *)(a + 64));
            const __m512i a3 = _mm512_loadu_si512((const void *)(a + 192));
            s0 = _mm512_dpbusd_epi32(s0, a1, v[1]);
            s1 = _mm512_dpbusd_epi32(s1, a3, v[3]);
            r0 = _mm512_dpbusd_epi32(r0, a1, u[1]);
            r1 = _mm512_dpbusd_epi32(r1, a3, u[3]);
            const __m512 d = _mm512_loadu_ps(ds);
            const __m512 f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), dv[1],
                                              _mm512_mul_ps(_mm512_cvtepi32_ps(s0), dv[0]));
            const __m512 f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(r1), du[1],
                                              _mm512_mul_ps(_mm512_cvtepi32_ps(r0), du[0]));
            acc0[c] = _mm512_fmadd_ps(f0, d, acc0[c]);
            acc1[c] = _mm512_fmadd_ps(f1, d, acc1[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = _mm512_reduce_add_ps(acc0[c]);
        y[(size_t)c * ldy + 1] = _mm512_reduce_add_ps(acc1[c]);
    }
}

FORCE_INLINE void row_dots_any(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                               const uint8_t *restrict act, size_t ab, float *restrict y,
                               size_t ldy) {
    if (t == R_Q4_0 || t == R_Q5_0 || t == R_Q8_0 || t == R_IQ4_NL || t == R_IQ4_XS) {
        row_dots(t, NC, k, w, act, ab, y, ldy);
    } else {
        row_dots_k(t, NC, k, w, act, ab, y, ldy);
    }
}

/* Two weight rows: paired where the type has a paired walk, else one by one */
FORCE_INLINE void row_dots_pair_any(enum rows_type t, const int NC, int64_t k,
                                    const uint8_t *restrict w, size_t bx,
                                    const uint8_t *restrict act, size_t ab, float *restrict y,
                                    size_t ldy) {
    if (t == R_Q4_0 || t == R_Q5_0 || t == R_Q8_0 || t == R_IQ4_NL || t == R_IQ4_XS) {
        row_dots_pair(t, NC, k, w, bx, act, ab, y, ldy);
    } else if (t == R_Q4_K || t == R_Q5_K) {
        row_dots_k_pair(t, NC, k, w, bx, act, ab, y, ldy);
    } else if (t == R_Q6_K && NC >= 7) {
        row_dots_q6_pair(NC, k, w, bx, act, ab, y, ldy);
    } else {
        row_dots_any(t, NC, k, w, act, ab, y, ldy);
        row_dots_any(t, NC, k, w + bx, act, ab, y + 1, ldy);
    }
}

#define ROW_DOTS      row_dots_any
#define ROW_DOTS_PAIR row_dots_pair_any
#define ROWS_PAIR_MIN 5
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
