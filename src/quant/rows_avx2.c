/*
 * The few-row product (quant.h: quant_rows_fmt) with AVX2 alone (no VNNI),
 * Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL, IQ4_XS, Q4_K, Q5_K and Q6_K: generation's
 * mat-vec and several sequences decoding together.
 *
 * The walk of rows_avxvnni.c (rows_x86.h: an int32 lane holds one whole block
 * of 32, eight blocks of a weight row at a time, transposed once for all
 * activation rows), with VPMADDUBSW in place of VPDPBUSD. Q4_0's nibbles u
 * (0..15) are the unsigned operand and the activation codes (-127..127) the
 * signed one, so a VPMADDUBSW pair is at most 2 * 15 * 127 = 3810 and all
 * eight registers of a block's 32 elements add up in int16 (30480) before
 * one VPMADDWD widens them: nine instructions per activation row and eight
 * blocks, against the single-row dot's ten per block (legacy_avx2.c), which
 * also converted and scaled each block on its own. The value is d (u - 8),
 * so each block takes 8 d_w s_a off, s_a = d_a * sum(a) from the row's
 * format: per eight blocks, t = d_a * isum - 8 s_a and acc += d_w * t.
 * Q5_0 and Q5_1 add the fifth bits to the nibbles (codes 0..31, rows_x86.h:
 * eight_fifth_bits), so only four pairs of at most 2 * 31 * 127 add up in
 * int16 and a block's sum is two halves; Q5_0's value is d (u - 16). Q4_1
 * and Q5_1 (d u + m) add m s_a per block instead.
 *
 * A K-quant super-block is one such chunk, its sub-blocks of 32 the blocks:
 * the codes are decoded in element order, one register per sub-block, then
 * transposed into the layout (8 x 8 words) once for all activation rows.
 * Q4_K's codes (0..15) add up in int16 as Q4_0's do, Q5_K's (0..31) in two
 * halves; both take their minimums, dmin m s_a per sub-block, from the block
 * sums. Q6_K's codes stay unsigned (0..63, two pairs to an int16), its scales
 * per 16 elements enter in the VPMADDWD, and its offset of 32 is taken off
 * with the sums of the blocks' first 16 activations, which the format also
 * keeps.
 *
 * The IQ4 types' codebook values v (-127..113, never 0) are signed: each
 * product takes |v| as VPMADDUBSW's unsigned operand and the activation with
 * v's sign (VPSIGNB), a pair at most 2 * 127 * 127, which one VPMADDWD per
 * register widens (two registers would overflow int16). Measured against
 * splitting v + 128 in nibbles and summing each half in int16 (bench_gemm
 * --type iq4_xs, avx2 family, one thread from memory): see docs/kernels.md.
 *
 * Layout of an activation row: rows_x86.h with signed codes (bias 0), the
 * block scales, then the block sums s_a and the half sums.
 */
#include "quant/rows_kquant_x86.h"
#include "quant/rows_types.h"

/* ---- activations ---- */

static void rows_from_float(const float *restrict x, int64_t k, void *restrict row) {
    rows256_from_float(x, k, row, 0, true, false);
}

static void rows_to_q8_0(const void *restrict row, int64_t k, void *restrict blocks) {
    rows256_to_q8_0(row, k, blocks, 0, false);
}

static const quant_rows_fmt rows_fmt = {
    .from_float = rows_from_float, .to_q8_0 = rows_to_q8_0, .to_sums = rows256_to_sums};

/* ---- products ---- */

/* One Q4_0, IQ4_NL or IQ4_XS weight row against NC activation rows: Q4_0's
 * unsigned nibbles summed in int16, the IQ4 values by the sign trick (the
 * file's comment) */
FORCE_INLINE void row_dots(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                           const uint8_t *restrict act, size_t ab, float *restrict y, size_t ldy) {
    const size_t bb = rows_block_bytes(t);
    const int64_t n_super = k / SUPER, n_blocks = k / QUANT_PANEL_GROUP;
    const float *dact = (const float *)(const void *)(act + k);
    const __m256i ones = _mm256_set1_epi16(1);
    const bool five_bits = rows_five_bits(t), min_type = rows_has_min(t);
    const bool unsigned_codes = rows_unsigned(t);
    const __m256 offset = _mm256_set1_ps(t == R_Q5_0 ? 16.0f : 8.0f);
    __m256 acc[8];
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        const uint8_t *p = w + (size_t)j * 8 * bb;
        prefetch_ahead(p, 8 * bb);
        __m256i v[8], mag[8];
        __m256 dw, mw = _mm256_setzero_ps();
        if (unsigned_codes) {
            eight_unsigned(t, p, v, &dw, &mw);
        } else if (t == R_IQ4_NL) {
            eight_iq4(p + offsetof(block_iq4_nl, qs), bb, v, 0);
            dw = scales8(p, bb);
        } else {
            const block_iq4_xs *b = (const block_iq4_xs *)(const void *)p;
            eight_iq4(b->qs, 16, v, 0);
            dw = iq4_xs_scales8(b);
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            mag[i] = unsigned_codes ? v[i] : _mm256_abs_epi8(v[i]);
        }
        const uint8_t *a0 = act + (size_t)j * SUPER;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = a0 + (size_t)c * ab;
            const float *da = (const float *)(const void *)((const uint8_t *)(dact + 8 * j) +
                                                            (size_t)c * ab);
            __m256i isum = _mm256_setzero_si256(), s16 = _mm256_setzero_si256(),
                    s16b = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(a + 32 * i));
                if (unsigned_codes) { /* eight pairs of at most 2 * 15 * 127 fit int16, four
                                         of 2 * 31 * 127 (Q5_0, Q5_1: two halves) */
                    if (five_bits && i >= 4) {
                        s16b = _mm256_add_epi16(s16b, _mm256_maddubs_epi16(mag[i], x));
                    } else {
                        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(mag[i], x));
                    }
                } else {
                    isum = _mm256_add_epi32(
                        isum, _mm256_madd_epi16(
                                  _mm256_maddubs_epi16(mag[i], _mm256_sign_epi8(x, v[i])), ones));
                }
            }
            if (unsigned_codes) {
                isum = _mm256_madd_epi16(s16, ones);
                if (five_bits) {
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s16b, ones));
                }
            }
            __m256 tt = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_loadu_ps(da));
            if (t == R_Q4_0 || t == R_Q5_0) { /* value d (u - 8) or d (u - 16): 8 or 16 s_a off */
                tt = _mm256_fnmadd_ps(offset, _mm256_loadu_ps(da + n_blocks), tt);
            }
            acc[c] = _mm256_fmadd_ps(tt, dw, acc[c]);
            if (min_type) { /* value d u + m: m s_a on */
                acc[c] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(da + n_blocks), acc[c]);
            }
        }
    }
    /* the rest (all but IQ4_XS, whose rows are whole 256s), a block at a time
     * (codes in element order) */
    for (int64_t g = n_super * 8; g < n_blocks; g++) {
        const uint8_t *p = w + (size_t)g * bb;
        const __m256i v =
            unsigned_codes
                ? block_unsigned(t, p)
                : _mm256_shuffle_epi8(iq4_codebook(0), q4_0_codes(p + offsetof(block_iq4_nl, qs)));
        const __m256i mag = unsigned_codes ? v : _mm256_abs_epi8(v);
        lares_f16 d16;
        memcpy(&d16, p, sizeof d16); /* every block starts with its scale */
        const __m256 dwf = _mm256_set1_ps(_cvtsh_ss(d16));
        /* the block's -8 s_a (Q4_0), -16 s_a (Q5_0) or m s_a (Q4_1, Q5_1)
         * spread over the eight lanes */
        const float per_lane = min_type ? block_min_eighth(p) : t == R_Q5_0 ? -2.0f : -1.0f;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)g * QUANT_PANEL_GROUP;
            const float *da = (const float *)(const void *)((const uint8_t *)(dact + g) +
                                                            (size_t)c * ab);
            const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)a);
            const __m256i s = _mm256_madd_epi16(
                _mm256_maddubs_epi16(mag, unsigned_codes ? x : _mm256_sign_epi8(x, v)), ones);
            __m256 tt = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(da[0]));
            if (t == R_Q4_0 || t == R_Q5_0) {
                tt = _mm256_fmadd_ps(_mm256_set1_ps(per_lane), _mm256_set1_ps(da[n_blocks]), tt);
            }
            acc[c] = _mm256_fmadd_ps(tt, dwf, acc[c]);
            if (min_type) {
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(per_lane), _mm256_set1_ps(da[n_blocks]),
                                         acc[c]);
            }
        }
    }
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = hsum8(acc[c]);
    }
}

/* ---- K-quant weights: a super-block is one 256-element chunk of the layout ---- */


/* One K-quant weight row against NC activation rows (k a multiple of 256).
 * Q4_K/Q5_K, per block: d sc d_a isum - dmin m s_a (s_a the block's sum);
 * Q6_K, per block: d d_a (sc_lo isum_lo + sc_hi isum_hi) - 32 d (sc_lo h_a +
 * sc_hi (s_a - h_a)), h_a the sum of its first 16, the scales in VPMADDWD. */
FORCE_INLINE void row_dots_k(enum rows_type t, const int NC, int64_t k, const uint8_t *restrict w,
                             const uint8_t *restrict act, size_t ab, float *restrict y,
                             size_t ldy) {
    const int bits = t == R_Q4_K ? 4 : (t == R_Q5_K ? 5 : 6);
    const size_t bb = kq_bytes(bits);
    const int64_t n_super = k / SUPER, n_blocks = k / QUANT_PANEL_GROUP;
    const float *dact = (const float *)(const void *)(act + k);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[8];
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        const uint8_t *p = w + (size_t)j * bb;
        /* asked for 2 KiB ahead with any row count: llama-1b Q4_K_M tg16, 2
         * threads, Zen 3, alternating builds (t/s): without it for one row
         * 17.3-22.2 against 24.8-28.2, 1 KiB 22.2-24.1, 3 KiB 24.5-26.5, 4
         * KiB 24.2-26.4 */
        prefetch_ahead(p, bb);
        __m256i q[8], v[8];
        __m256 dw, mw, mdiff = _mm256_setzero_ps();
        __m256i sc_lo = _mm256_setzero_si256(), sc_hi = _mm256_setzero_si256();
        codes_k(bits, p, q, &dw, &mw);
        if (t == R_Q6_K) {
            const block_q6_K *b = (const block_q6_K *)(const void *)p;
            /* the scale of elements 0..15 (sc_lo) and 16..31 (sc_hi) of each
             * lane's block, as both words of the lane */
            const __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
            const __m128i first = _mm_setr_epi8(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
            sc_lo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, first));
            sc_hi = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_add_epi8(first, _mm_set1_epi8(1))));
            const float d = _cvtsh_ss(b->d);
            dw = _mm256_set1_ps(d);
            const __m256 mlo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sc_lo, ones)),
                                             _mm256_set1_ps(16.0f * d));
            mw = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sc_hi, ones)),
                               _mm256_set1_ps(16.0f * d));
            mdiff = _mm256_sub_ps(mlo, mw);
        }
        transpose8x8(q, v);
        const uint8_t *a0 = act + (size_t)j * SUPER;
        const float *f0 = dact + 8 * j;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = a0 + (size_t)c * ab;
            const float *f = (const float *)(const void *)((const uint8_t *)f0 + (size_t)c * ab);
            __m256i m[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                m[i] = _mm256_maddubs_epi16(
                    v[i], _mm256_loadu_si256((const __m256i *)(const void *)(a + 32 * i)));
            }
            __m256i isum;
            if (t == R_Q4_K) { /* codes 0..15: eight pairs of at most 3810 fit int16 */
                const __m256i s16 = _mm256_add_epi16(
                    _mm256_add_epi16(_mm256_add_epi16(m[0], m[1]), _mm256_add_epi16(m[2], m[3])),
                    _mm256_add_epi16(_mm256_add_epi16(m[4], m[5]), _mm256_add_epi16(m[6], m[7])));
                isum = _mm256_madd_epi16(s16, ones);
            } else if (t == R_Q5_K) { /* 0..31: four pairs of at most 7874 */
                const __m256i s0 =
                    _mm256_add_epi16(_mm256_add_epi16(m[0], m[1]), _mm256_add_epi16(m[2], m[3]));
                const __m256i s1 =
                    _mm256_add_epi16(_mm256_add_epi16(m[4], m[5]), _mm256_add_epi16(m[6], m[7]));
                isum = _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones));
            } else { /* 0..63: two pairs of at most 16002, then the scales */
                isum = _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(m[0], m[1]), sc_lo),
                                     _mm256_madd_epi16(_mm256_add_epi16(m[2], m[3]), sc_lo)),
                    _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(m[4], m[5]), sc_hi),
                                     _mm256_madd_epi16(_mm256_add_epi16(m[6], m[7]), sc_hi)));
            }
            const __m256 tt = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_loadu_ps(f));
            acc[c] = _mm256_fmadd_ps(tt, dw, acc[c]);
            acc[c] = _mm256_fnmadd_ps(mw, _mm256_loadu_ps(f + n_blocks), acc[c]);
            if (t == R_Q6_K) {
                acc[c] = _mm256_fnmadd_ps(mdiff, _mm256_loadu_ps(f + 2 * n_blocks), acc[c]);
            }
        }
    }
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = hsum8(acc[c]);
    }
}

FORCE_INLINE void row_dots_any(enum rows_type t, const int NC, int64_t k,
                               const uint8_t *restrict w, const uint8_t *restrict act, size_t ab,
                               float *restrict y, size_t ldy) {
    if (t == R_Q4_0 || t == R_Q5_0 || t == R_Q4_1 || t == R_Q5_1 || t == R_IQ4_NL ||
        t == R_IQ4_XS) {
        row_dots(t, NC, k, w, act, ab, y, ldy);
    } else {
        row_dots_k(t, NC, k, w, act, ab, y, ldy);
    }
}

#define ROW_DOTS row_dots_any
#include "quant/rows_drive.h"

ROWS_DEFINE(rows_q4_0_avx2, R_Q4_0)
ROWS_DEFINE(rows_q5_0_avx2, R_Q5_0)
ROWS_DEFINE(rows_q4_1_avx2, R_Q4_1)
ROWS_DEFINE(rows_q5_1_avx2, R_Q5_1)
ROWS_DEFINE(rows_iq4_nl_avx2, R_IQ4_NL)
ROWS_DEFINE(rows_iq4_xs_avx2, R_IQ4_XS)
ROWS_DEFINE(rows_q4_K_avx2, R_Q4_K)
ROWS_DEFINE(rows_q5_K_avx2, R_Q5_K)
ROWS_DEFINE(rows_q6_K_avx2, R_Q6_K)

void quant_install_rows_avx2(quant_traits *t) {
    t[GGUF_TYPE_Q4_0].rows = rows_q4_0_avx2;
    t[GGUF_TYPE_Q5_0].rows = rows_q5_0_avx2;
    t[GGUF_TYPE_Q4_1].rows = rows_q4_1_avx2;
    t[GGUF_TYPE_Q5_1].rows = rows_q5_1_avx2;
    t[GGUF_TYPE_IQ4_NL].rows = rows_iq4_nl_avx2;
    t[GGUF_TYPE_IQ4_XS].rows = rows_iq4_xs_avx2;
    t[GGUF_TYPE_Q4_K].rows = rows_q4_K_avx2;
    t[GGUF_TYPE_Q5_K].rows = rows_q5_K_avx2;
    t[GGUF_TYPE_Q6_K].rows = rows_q6_K_avx2;
    const uint32_t types[] = {GGUF_TYPE_Q4_0,   GGUF_TYPE_Q5_0, GGUF_TYPE_Q4_1,
                              GGUF_TYPE_Q5_1,   GGUF_TYPE_IQ4_NL, GGUF_TYPE_IQ4_XS,
                              GGUF_TYPE_Q4_K, GGUF_TYPE_Q5_K,  GGUF_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        t[types[i]].rows_fmt = &rows_fmt;
    }
}
