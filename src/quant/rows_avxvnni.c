/*
 * The few-row product (quant.h: quant_rows_fmt) at 256 bits with AVX-VNNI's
 * VPDPBUSD (Intel 12th generation on, AMD Zen 4/5), Q4_0, Q5_0, Q4_1, Q5_1,
 * Q8_0, IQ4_NL, IQ4_XS, Q4_K, Q5_K and Q6_K.
 *
 * As in rows_avx512.c (whose comment explains the +128 and the -128 * sum(w)
 * base), a weight row is walked 256 elements (eight blocks of 32) at a time,
 * but here an int32 lane holds one whole block: eight registers of 32 codes,
 * register v holding elements 4v .. 4v + 3 of blocks 0..7 in lanes 0..7, so
 * each row costs eight VPDPBUSD, one conversion, one multiplication by the
 * row's block scales and one FMA by the weights' per 256 elements, and the
 * scales are plain vectors of eight blocks. The weights are transposed into
 * that order once for all rows (4 x 4 transposes of 32-bit words). A row's
 * last k % 256 elements go a block at a time, its eight lanes all of that
 * block. AVX2 alone walks Q4_0 the same way with int16 sums (rows_avx2.c).
 * The IQ4 types decode as Q4_0 with the codebook (VPSHUFB) in place of the
 * -8, so their values are signed like Q8_0's and take its base; an IQ4_XS
 * super-block is eight such blocks of indices with a scale each. Q5_0 and
 * Q5_1 are Q4_0 with 16 added where a block's fifth bit is set
 * (rows_x86.h: eight_fifth_bits), their codes 0..31 summed for the base in
 * two halves; Q5_0's value is d (u - 16); Q4_1's and Q5_1's d u + m, the
 * minimums' m s_a from the activations' block sums.

A K-quant super-block is one such chunk (rows_kquant_x86.h decodes it as
rows_avx2.c does). Its codes (0..63 at most) are VPDPBUSD's signed operand
as they are, so every row's int32 lane sums its block exactly in one chain,
and -128 * sum(w) per lane comes from the codes added in bytes, at most four
at a time (Q6_K: two, 2 x 63 < 128) against -128. The minimums (Q4_K, Q5_K)
and Q6_K's offset of 32 come from the activations' block and half sums as in
rows_avx2.c; Q6_K keeps one sum per half block, each multiplied by its own
scale.
 *
 * Layout of an activation row: rows_x86.h, the codes plus 128, one float per
 * block of 32 (its scale).
 */
/* How far ahead the K-quant walk asks for its weights. llama-1b Q4_K_M tg16
 * --isa avxvnni, 2 threads, Intel Xeon (family 6 model 207), four rounds
 * alternating builds, medians (t/s): 1 KiB 21.5, 2 KiB 25.1, 4 KiB 27.6,
 * 6 KiB 28.8, 8 KiB 27.3, the row tiles 27.7; without it 16.5. On another
 * host of that model (2026-11-30, memory about a fifth faster), -r 2, two
 * rounds, 4 KiB / 3 KiB: Q4_K_M 33.56, 32.26 / 33.41, 33.52; Q4_0 31.00,
 * 30.29 / 33.70, 33.13; 4 rows Q4_0 95.07, 95.27 / 100.82, 97.67 (docs/kernels.md,
 * the AVX-512 walk's distance). */
#define ROWS_PREFETCH_BYTES 3072
#include "quant/rows_kquant_x86.h"
#include "quant/rows_types.h"

/* ---- activations: the codes plus 128, the block sums (rows_x86.h) ---- */

static void rows_from_float(const float *restrict x, int64_t k, void *restrict row) {
    rows256_from_float(x, k, row, 0x80, true, false);
}

static void rows_to_q8_0(const void *restrict row, int64_t k, void *restrict blocks) {
    rows256_to_q8_0(row, k, blocks, 0x80, false);
}

static const quant_rows_fmt rows_fmt = {
    .from_float = rows_from_float, .to_q8_0 = rows_to_q8_0, .to_sums = rows256_to_sums};

/* ---- products ---- */

/* acc + the sums of four products of unsigned a and signed w per int32 lane */
FORCE_INLINE __m256i dot4(__m256i acc, __m256i a, __m256i w) {
    return _mm256_dpbusd_avx_epi32(acc, a, w);
}


/* Eight blocks as the eight vectors of the layout, their scales and (Q4_1,
 * Q5_1) their minimums */
FORCE_INLINE void eight_blocks(enum rows_type t, const uint8_t *p, __m256i v[8], __m256 *dw,
                               __m256 *mw) {
    const size_t bb = rows_block_bytes(t);
    if (t == R_IQ4_NL) {
        eight_iq4(p + offsetof(block_iq4_nl, qs), bb, v, 0);
        *dw = scales8(p, bb);
        return;
    }
    if (t == R_IQ4_XS) {
        const block_iq4_xs *b = (const block_iq4_xs *)(const void *)p;
        eight_iq4(b->qs, 16, v, 0);
        *dw = iq4_xs_scales8(b);
        return;
    }
    if (t == R_Q8_0) {
        transpose8x4(p + offsetof(block_q8_0, qs), bb, v);
        transpose8x4(p + offsetof(block_q8_0, qs) + 16, bb, v + 4);
        *dw = scales8(p, bb);
        return;
    }
    eight_unsigned(t, p, v, dw, mw); /* Q4_0 and Q4_1 0..15, Q5_0 and Q5_1 0..31 */
}

FORCE_INLINE void row_dots(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                           const uint8_t *restrict act, size_t ab, float *restrict y, size_t ldy) {
    const size_t bb = rows_block_bytes(t);
    const int64_t n_super = k / SUPER, n_blocks = k / QUANT_PANEL_GROUP;
    const float *dact = (const float *)(const void *)(act + k);
    const __m256i k128 = _mm256_set1_epi8((char)0x80);
    const bool five_bits = rows_five_bits(t), min_type = rows_has_min(t);
    const bool unsigned_codes = rows_unsigned(t);
    const __m256 offset = _mm256_set1_ps(t == R_Q5_0 ? 16.0f : 8.0f);
    __m256 acc[8];
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        __m256i v[8];
        __m256 dw, mw = _mm256_setzero_ps();
        prefetch_ahead(w + (size_t)j * 8 * bb, 8 * bb);
        eight_blocks(t, w + (size_t)j * 8 * bb, v, &dw, &mw);
        /* -128 * sum(w) per lane. A chain of dependent VPDPBUSD has each wait
         * for the last (4+ cycles): with one or two rows, the base's eight and
         * a row's eight in one chain bounded the product (Q4_0 tg32 at 0.7x
         * the AVX2 family's), so the chains are short: Q4_0's codes summed
         * first (eight of 0..15 fit a byte) and one VPDPBUSD, Q5_0's and
         * Q5_1's (0..31) in two halves; Q8_0's two chains of four; each row's
         * sums two chains where registers allow */
        __m256i base;
        if (unsigned_codes) {
            const __m256i s01 = _mm256_add_epi8(_mm256_add_epi8(v[0], v[1]),
                                                _mm256_add_epi8(v[2], v[3]));
            const __m256i s23 = _mm256_add_epi8(_mm256_add_epi8(v[4], v[5]),
                                                _mm256_add_epi8(v[6], v[7]));
            base = five_bits ? dot4(dot4(_mm256_setzero_si256(), k128, s01), k128, s23)
                             : dot4(_mm256_setzero_si256(), k128, _mm256_add_epi8(s01, s23));
        } else {
            __m256i b0 = _mm256_setzero_si256(), b1 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                b0 = dot4(b0, k128, v[i]);
                b1 = dot4(b1, k128, v[i + 4]);
            }
            base = _mm256_add_epi32(b0, b1);
        }
        base = _mm256_sub_epi32(_mm256_setzero_si256(), base);
        /* register by register, every row in turn: 16 ymm registers hold the
         * rows' sums and the weights in use, not all eight weight registers
         * and every row's float sums at once */
        const int CHAINS = NC <= 4 ? 2 : 1;
        __m256i sum[8], sum1[4];
        const uint8_t *a0 = act + (size_t)j * SUPER;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            sum[c] = dot4(base, _mm256_loadu_si256((const __m256i *)(const void *)(a0 + (size_t)c * ab)),
                          v[0]);
            if (CHAINS == 2) {
                sum1[c % 4] = _mm256_setzero_si256();
            }
        }
#pragma GCC unroll 7
        for (int i = 1; i < 8; i++) {
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                const __m256i a = _mm256_loadu_si256(
                    (const __m256i *)(const void *)(a0 + (size_t)c * ab + 32 * (size_t)i));
                if (CHAINS == 2 && i % 2 == 1) {
                    sum1[c % 4] = dot4(sum1[c % 4], a, v[i]);
                } else {
                    sum[c] = dot4(sum[c], a, v[i]);
                }
            }
        }
        if (CHAINS == 2) {
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) {
                sum[c] = _mm256_add_epi32(sum[c], sum1[c % 4]);
            }
        }
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const float *da =
                (const float *)(const void *)((const uint8_t *)(dact + 8 * j) + (size_t)c * ab);
            __m256 tt = _mm256_mul_ps(_mm256_cvtepi32_ps(sum[c]), _mm256_loadu_ps(da));
            if (t == R_Q4_0 || t == R_Q5_0) { /* value d (u - 8) or d (u - 16): 8 or 16 d s_a off */
                tt = _mm256_fnmadd_ps(offset, _mm256_loadu_ps(da + n_blocks), tt);
            }
            acc[c] = _mm256_fmadd_ps(tt, dw, acc[c]);
            if (min_type) { /* value d u + m: m s_a on */
                acc[c] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(da + n_blocks), acc[c]);
            }
        }
    }
    /* the rest, a block at a time, its codes signed in element order */
    for (int64_t g = n_super * 8; g < n_blocks; g++) {
        const uint8_t *p = w + (size_t)g * bb;
        __m256i wc;
        if (t == R_IQ4_NL) {
            wc = _mm256_shuffle_epi8(iq4_codebook(0), q4_0_codes(p + offsetof(block_iq4_nl, qs)));
        } else if (t == R_Q8_0) { /* (IQ4_XS rows are whole 256s) */
            wc = _mm256_loadu_si256((const __m256i *)(const void *)(p + offsetof(block_q8_0, qs)));
        } else {
            wc = block_unsigned(t, p);
            if (!min_type) { /* Q4_0 u - 8, Q5_0 u - 16; Q4_1 and Q5_1 keep u */
                wc = _mm256_sub_epi8(wc, _mm256_set1_epi8(t == R_Q5_0 ? 16 : 8));
            }
        }
        lares_f16 d16;
        memcpy(&d16, p, sizeof d16); /* every block starts with its scale */
        const float dwf = _cvtsh_ss(d16);
        const float mf = min_type ? block_min_eighth(p) : 0.0f; /* Q4_1, Q5_1 */
        const __m256i base = _mm256_sub_epi32(_mm256_setzero_si256(),
                                              dot4(_mm256_setzero_si256(), k128, wc));
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)g * QUANT_PANEL_GROUP;
            const float *da = (const float *)(const void *)((const uint8_t *)(dact + g) +
                                                            (size_t)c * ab);
            const __m256i s0 =
                dot4(base, _mm256_loadu_si256((const __m256i *)(const void *)a), wc);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(dwf * da[0]), acc[c]);
            if (min_type) {
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(mf), _mm256_set1_ps(da[n_blocks]), acc[c]);
            }
        }
    }
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = hsum8(acc[c]);
    }
}

/* minus the bytes of v: VPDPBUSD's signed operand for a base of -128 * sum */
FORCE_INLINE __m256i neg8(__m256i v) {
    return _mm256_sub_epi8(_mm256_setzero_si256(), v);
}

/* One K-quant weight row against NC activation rows (k a multiple of 256).
 * Q4_K/Q5_K, per block: d sc d_a isum - dmin m s_a; Q6_K, per block: d d_a
 * (sc_lo isum_lo + sc_hi isum_hi) - 32 d (sc_lo h_a + sc_hi (s_a - h_a)),
 * s_a the block's sum, h_a the sum of its first 16 (the row's format). */
FORCE_INLINE void row_dots_k(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                             const uint8_t *restrict act, size_t ab, float *restrict y,
                             size_t ldy) {
    const int bits = t == R_Q4_K ? 4 : (t == R_Q5_K ? 5 : 6);
    const size_t bb = kq_bytes(bits);
    const int64_t n_super = k / SUPER, n_blocks = k / QUANT_PANEL_GROUP;
    const float *dact = (const float *)(const void *)(act + k);
    const __m256i k128 = _mm256_set1_epi8((char)0x80);
    __m256 acc[8];
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        const uint8_t *p = w + (size_t)j * bb;
        prefetch_ahead(p, bb);
        __m256i q[8], v[8], base, base_hi = _mm256_setzero_si256();
        __m256 dw, mw, dhi = _mm256_setzero_ps(), mdiff = _mm256_setzero_ps();
        codes_k(bits, p, q, &dw, &mw);
        if (t == R_Q6_K) {
            const block_q6_K *b = (const block_q6_K *)(const void *)p;
            /* d times the scale of elements 0..15 (dw) and 16..31 (dhi) of
             * each lane's block */
            const __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
            const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
            dw = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_shuffle_epi8(sc, even))), d);
            dhi = _mm256_mul_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                    _mm_shuffle_epi8(sc, _mm_add_epi8(even, _mm_set1_epi8(1))))),
                d);
            const __m256 k32 = _mm256_set1_ps(32.0f);
            mw = _mm256_mul_ps(dhi, k32);
            mdiff = _mm256_mul_ps(_mm256_sub_ps(dw, dhi), k32);
        }
        transpose8x8(q, v);
        /* vectors 0..3 hold elements 0..15 of each lane's block, 4..7 16..31 */
        if (t == R_Q4_K) { /* 8 x 15 */
            const __m256i s = _mm256_add_epi8(_mm256_add_epi8(_mm256_add_epi8(v[0], v[1]),
                                                              _mm256_add_epi8(v[2], v[3])),
                                              _mm256_add_epi8(_mm256_add_epi8(v[4], v[5]),
                                                              _mm256_add_epi8(v[6], v[7])));
            base = dot4(_mm256_setzero_si256(), k128, neg8(s));
        } else if (t == R_Q5_K) { /* 4 x 31 */
            const __m256i s0 = _mm256_add_epi8(_mm256_add_epi8(v[0], v[1]), _mm256_add_epi8(v[2], v[3]));
            const __m256i s1 = _mm256_add_epi8(_mm256_add_epi8(v[4], v[5]), _mm256_add_epi8(v[6], v[7]));
            base = dot4(dot4(_mm256_setzero_si256(), k128, neg8(s0)), k128, neg8(s1));
        } else { /* 2 x 63, one base per half */
            base = dot4(dot4(_mm256_setzero_si256(), k128, neg8(_mm256_add_epi8(v[0], v[1]))), k128,
                        neg8(_mm256_add_epi8(v[2], v[3])));
            base_hi = dot4(dot4(_mm256_setzero_si256(), k128, neg8(_mm256_add_epi8(v[4], v[5]))),
                           k128, neg8(_mm256_add_epi8(v[6], v[7])));
        }
        const uint8_t *a0 = act + (size_t)j * SUPER;
        const float *f0 = dact + 8 * j;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = a0 + (size_t)c * ab;
            const float *f = (const float *)(const void *)((const uint8_t *)f0 + (size_t)c * ab);
            /* two chains: the halves of each block */
            __m256i s0 = t == R_Q6_K ? base : _mm256_setzero_si256();
            __m256i s1 = t == R_Q6_K ? base_hi : base;
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                s0 = dot4(s0, _mm256_loadu_si256((const __m256i *)(const void *)(a + 32 * i)), v[i]);
                s1 = dot4(s1, _mm256_loadu_si256((const __m256i *)(const void *)(a + 32 * (i + 4))),
                          v[i + 4]);
            }
            const __m256 da = _mm256_loadu_ps(f);
            if (t == R_Q6_K) {
                const __m256 u = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), dw,
                                                 _mm256_mul_ps(_mm256_cvtepi32_ps(s1), dhi));
                acc[c] = _mm256_fmadd_ps(u, da, acc[c]);
                acc[c] = _mm256_fnmadd_ps(mdiff, _mm256_loadu_ps(f + 2 * n_blocks), acc[c]);
            } else {
                const __m256 tt = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), da);
                acc[c] = _mm256_fmadd_ps(tt, dw, acc[c]);
            }
            acc[c] = _mm256_fnmadd_ps(mw, _mm256_loadu_ps(f + n_blocks), acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = hsum8(acc[c]);
    }
}

FORCE_INLINE void row_dots_any(enum rows_type t, const int NC, int64_t k,
                               const uint8_t *restrict w, const uint8_t *restrict act, size_t ab,
                               float *restrict y, size_t ldy) {
    if (t == R_Q4_0 || t == R_Q5_0 || t == R_Q4_1 || t == R_Q5_1 || t == R_Q8_0 ||
        t == R_IQ4_NL || t == R_IQ4_XS) {
        row_dots(t, NC, k, w, act, ab, y, ldy);
    } else {
        row_dots_k(t, NC, k, w, act, ab, y, ldy);
    }
}

#define ROW_DOTS row_dots_any
#include "quant/rows_drive.h"

ROWS_DEFINE(rows_q4_0_avxvnni, R_Q4_0)
ROWS_DEFINE(rows_q5_0_avxvnni, R_Q5_0)
ROWS_DEFINE(rows_q4_1_avxvnni, R_Q4_1)
ROWS_DEFINE(rows_q5_1_avxvnni, R_Q5_1)
ROWS_DEFINE(rows_q8_0_avxvnni, R_Q8_0)
ROWS_DEFINE(rows_iq4_nl_avxvnni, R_IQ4_NL)
ROWS_DEFINE(rows_iq4_xs_avxvnni, R_IQ4_XS)
ROWS_DEFINE(rows_q4_K_avxvnni, R_Q4_K)
ROWS_DEFINE(rows_q5_K_avxvnni, R_Q5_K)
ROWS_DEFINE(rows_q6_K_avxvnni, R_Q6_K)

void quant_install_rows_avxvnni(quant_traits *t) {
    t[GGUF_TYPE_Q4_0].rows = rows_q4_0_avxvnni;
    t[GGUF_TYPE_Q5_0].rows = rows_q5_0_avxvnni;
    t[GGUF_TYPE_Q4_1].rows = rows_q4_1_avxvnni;
    t[GGUF_TYPE_Q5_1].rows = rows_q5_1_avxvnni;
    t[GGUF_TYPE_Q8_0].rows = rows_q8_0_avxvnni;
    t[GGUF_TYPE_IQ4_NL].rows = rows_iq4_nl_avxvnni;
    t[GGUF_TYPE_IQ4_XS].rows = rows_iq4_xs_avxvnni;
    t[GGUF_TYPE_Q4_K].rows = rows_q4_K_avxvnni;
    t[GGUF_TYPE_Q5_K].rows = rows_q5_K_avxvnni;
    t[GGUF_TYPE_Q6_K].rows = rows_q6_K_avxvnni;
    const uint32_t types[] = {GGUF_TYPE_Q4_0,   GGUF_TYPE_Q5_0, GGUF_TYPE_Q4_1,
                              GGUF_TYPE_Q5_1,   GGUF_TYPE_Q8_0, GGUF_TYPE_IQ4_NL,
                              GGUF_TYPE_IQ4_XS, GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K,
                              GGUF_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        t[types[i]].rows_fmt = &rows_fmt;
    }
}
