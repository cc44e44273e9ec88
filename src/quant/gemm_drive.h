/*
 * The drive of the packed-activation GEMM, shared by gemm_x86.h, gemm_neon.c
 * and gemm_neon_i8mm.c: tiles of ROW_BLOCK weight rows x GEMM_NP panels, K
 * walked in blocks of KB_GROUPS groups so the panels' slice in use stays in L1
 * while the rows pass over it, each (row, panel) sum kept in a tile on the
 * stack. The includer defines LANES, GROUP_BYTES, KB_GROUPS, ROW_BLOCK and
 * GEMM_NP, and GEMM_ROW_PAIRS where its kernels take two weight rows at once
 * (SMMLA multiplies a 2 x 8 block of weights), then writes its K-block
 * kernels against KB_ARGS.
 */
#ifndef LARES_QUANT_GEMM_DRIVE_H
#define LARES_QUANT_GEMM_DRIVE_H

#include <stdint.h>
#include <string.h>

/* K-block kernels: weight row `w` (its first byte), groups g0 .. g0 + ng - 1
 * (ng <= KB_GROUPS, g0 a multiple of KB_GROUPS), activation panels from `act`
 * (panel 0 at group g0), running sums in tile[p * LANES ...]; with
 * GEMM_ROW_PAIRS also the next row `w1` and its sums `tile1` (the last row of
 * an odd count is paired with itself, its second sums dropped). */
#if defined(GEMM_ROW_PAIRS)
#define KB_ARGS                                                                                    \
    const uint8_t *restrict w, const uint8_t *restrict w1, int64_t g0, int ng,                     \
        const uint8_t *restrict act, size_t pstride, float *restrict tile, float *restrict tile1
#define GEMM_ROW_STEP 2
#else
#define KB_ARGS                                                                                    \
    const uint8_t *restrict w, int64_t g0, int ng, const uint8_t *restrict act, size_t pstride,    \
        float *restrict tile
#define GEMM_ROW_STEP 1
#endif
typedef void (*kb_fn)(KB_ARGS);

static void gemm_drive(int64_t k, const uint8_t *restrict x, size_t bx, int64_t n_w,
                       const uint8_t *restrict panels, int64_t n_c, float *restrict y, size_t ldy,
                       const kb_fn *kb) {
    const int64_t ng = k / QUANT_PANEL_GROUP;
    const size_t pstride = (size_t)ng * GROUP_BYTES;
    const int64_t n_p = (n_c + LANES - 1) / LANES;
    const size_t kb_bytes = (size_t)(KB_GROUPS * (int64_t)bx / ng) + 1; /* one K block of a row */
    _Alignas(64) float tile[ROW_BLOCK + GEMM_ROW_STEP - 1][GEMM_NP * LANES];
    for (int64_t r0 = 0; r0 < n_w; r0 += ROW_BLOCK) {
        const int nr = (int)(n_w - r0 < ROW_BLOCK ? n_w - r0 : ROW_BLOCK);
        for (int64_t p0 = 0; p0 < n_p; p0 += GEMM_NP) {
            const int np = (int)(n_p - p0 < GEMM_NP ? n_p - p0 : GEMM_NP);
            memset(tile, 0, sizeof tile);
            for (int64_t g0 = 0; g0 < ng; g0 += KB_GROUPS) {
                const int kg = (int)(ng - g0 < KB_GROUPS ? ng - g0 : KB_GROUPS);
                const uint8_t *a = panels + (size_t)p0 * pstride + (size_t)g0 * GROUP_BYTES;
                /* the rows' bytes two K blocks ahead: 16 rows read a K block each
                 * in turn are 16 short streams the hardware prefetchers do not
                 * follow (a third of the kernel's time waited on them) */
                const size_t ahead = (size_t)((g0 + 2 * KB_GROUPS) * (int64_t)bx / ng);
                for (int r = 0; r < nr; r += GEMM_ROW_STEP) {
                    const uint8_t *wr = x + (size_t)(r0 + r) * bx;
#if defined(GEMM_ROW_PAIRS)
                    const uint8_t *wr1 = r + 1 < nr ? wr + bx : wr;
                    quant_prefetch(wr + ahead, kb_bytes);
                    quant_prefetch(wr1 + ahead, kb_bytes);
                    kb[np](wr, wr1, g0, kg, a, pstride, tile[r], tile[r + 1]);
#else
                    quant_prefetch(wr + ahead, kb_bytes);
                    kb[np](wr, g0, kg, a, pstride, tile[r]);
#endif
                }
            }
            /* out by activation row: each y row gets its nr sums as one run
             * (by weight row, the stores would stride n_out floats apart and
             * fight over the same L1 sets: 19 % of a prompt's time) */
            const int nc = (int)(n_c - p0 * LANES < np * LANES ? n_c - p0 * LANES : np * LANES);
            for (int i = 0; i < nc; i++) {
                float *yr = y + (size_t)(p0 * LANES + i) * ldy + (size_t)r0;
                for (int r = 0; r < nr; r++) {
                    yr[r] = tile[r][i];
                }
            }
        }
    }
}

#endif /* LARES_QUANT_GEMM_DRIVE_H */
