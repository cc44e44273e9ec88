/*
 * The few-row product (quant.h: quant_rows_fmt) with AVX2 alone (no VNNI),
 * Q4_0: generation's mat-vec and several sequences decoding together.
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
 *
 * Layout of an activation row: rows_x86.h with signed codes (bias 0), the
 * block scales, then the block sums s_a.
 */
#include "quant/rows_x86.h"

/* ---- activations ---- */

static void rows_from_float(const float *restrict x, int64_t k, void *restrict row) {
    rows256_from_float(x, k, row, 0, true);
}

static void rows_to_q8_0(const void *restrict row, int64_t k, void *restrict blocks) {
    rows256_to_q8_0(row, k, blocks, 0);
}

static const quant_rows_fmt rows_fmt = {
    .from_float = rows_from_float, .to_q8_0 = rows_to_q8_0, .to_sums = rows256_to_sums};

/* ---- products ---- */

/* How far ahead of the eight blocks in use the weight row is asked for.
 * llama-1b Q4_0 tg32 --isa avx2, 2 threads, alternating builds (t/s): 512
 * bytes 43.6-49.8, 1 KiB 49.3-56.7, 2 KiB 51.4-57.4, 4 KiB 52.1-56.2 */
#ifndef ROWS_PREFETCH_BYTES
#define ROWS_PREFETCH_BYTES 2048
#endif

/* One Q4_0 weight row against NC activation rows */
FORCE_INLINE void row_dots(const int NC, int64_t k, const uint8_t *restrict w,
                           const uint8_t *restrict act, size_t ab, float *restrict y, size_t ldy) {
    const size_t bb = sizeof(block_q4_0);
    const int64_t n_super = k / SUPER, n_blocks = k / QUANT_PANEL_GROUP;
    const float *dact = (const float *)(const void *)(act + k);
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256 k8 = _mm256_set1_ps(8.0f);
    __m256 acc[8];
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < n_super; j++) {
        const uint8_t *p = w + (size_t)j * 8 * bb;
        _mm_prefetch((const char *)p + ROWS_PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)p + ROWS_PREFETCH_BYTES + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)p + ROWS_PREFETCH_BYTES + 128, _MM_HINT_T0);
        __m256i t[4], v[8];
        transpose8x4(p + offsetof(block_q4_0, qs), bb, t);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) { /* qs byte e: element e (low nibble), e + 16 (high) */
            v[i] = _mm256_and_si256(t[i], m4);
            v[i + 4] = _mm256_and_si256(_mm256_srli_epi16(t[i], 4), m4);
        }
        const __m256 dw = scales8(p, bb);
        const uint8_t *a0 = act + (size_t)j * SUPER;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = a0 + (size_t)c * ab;
            __m256i s16 = _mm256_maddubs_epi16(v[0], _mm256_loadu_si256((const __m256i *)(const void *)a));
#pragma GCC unroll 7
            for (int i = 1; i < 8; i++) {
                s16 = _mm256_add_epi16(
                    s16, _mm256_maddubs_epi16(
                             v[i], _mm256_loadu_si256((const __m256i *)(const void *)(a + 32 * i))));
            }
            const float *da = (const float *)(const void *)((const uint8_t *)(dact + 8 * j) +
                                                            (size_t)c * ab);
            const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones));
            const __m256 tt = _mm256_fnmadd_ps(k8, _mm256_loadu_ps(da + n_blocks),
                                               _mm256_mul_ps(isum, _mm256_loadu_ps(da)));
            acc[c] = _mm256_fmadd_ps(tt, dw, acc[c]);
        }
    }
    /* the rest, a block at a time (codes in element order) */
    for (int64_t g = n_super * 8; g < n_blocks; g++) {
        const block_q4_0 *b = (const block_q4_0 *)(const void *)(w + (size_t)g * bb);
        const __m256i u = q4_0_codes(b->qs);
        const __m256 dwf = _mm256_set1_ps(_cvtsh_ss(b->d));
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *a = act + (size_t)c * ab + (size_t)g * QUANT_PANEL_GROUP;
            const float *da = (const float *)(const void *)((const uint8_t *)(dact + g) +
                                                            (size_t)c * ab);
            const __m256i s = _mm256_madd_epi16(
                _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(const void *)a)),
                ones);
            /* the block's -8 s_a spread over the eight lanes */
            const __m256 tt = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(da[0])),
                                            _mm256_set1_ps(da[n_blocks]));
            acc[c] = _mm256_fmadd_ps(tt, dwf, acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) {
        y[(size_t)c * ldy] = hsum8(acc[c]);
    }
}

#define ROW_DOTS(t, NC, k, w, act, ab, y, ldy) ((void)(t), row_dots(NC, k, w, act, ab, y, ldy))
enum rows_type { R_Q4_0 };
#include "quant/rows_drive.h"

static void rows_q4_0_avx2(int64_t k, const void *restrict x, size_t bx, int64_t n_w,
                           const void *restrict act, size_t ab, int64_t n_c, float *restrict y,
                           size_t ldy) {
    rows_drive(R_Q4_0, k, x, bx, n_w, act, ab, n_c, y, ldy);
}

void quant_install_rows_avx2(quant_traits *t) {
    t[GGUF_TYPE_Q4_0].rows = rows_q4_0_avx2;
    t[GGUF_TYPE_Q4_0].rows_fmt = &rows_fmt;
}
