/*
 * The drive of the few-row product, shared by rows_avx512.c, rows_avxvnni.c
 * and rows_avx2.c: each weight row against the n_c (1..QUANT_ROWS_MAX)
 * activation rows, with the row count a constant in the call so that every
 * count gets its own unrolled body. The includer defines ROW_DOTS(t, NC, k,
 * w, act, ab, y, ldy): one weight row w of type t against NC rows, the
 * results NC floats ldy apart from y. It may also define ROW_DOTS_PAIR(t, NC,
 * k, w, bx, act, ab, y, ldy), two weight rows (w and w + bx, results at y and
 * y + 1), and ROWS_PAIR_MIN (1 to 8), the fewest rows that take it.
 */
#ifndef LARES_QUANT_ROWS_DRIVE_H
#define LARES_QUANT_ROWS_DRIVE_H

#include <stdint.h>

static inline __attribute__((always_inline)) void
rows_drive(enum rows_type t, int64_t k, const void *restrict x, size_t bx, int64_t n_w,
           const void *restrict act, size_t ab, int64_t n_c, float *restrict y, size_t ldy) {
    const uint8_t *w = x;
    int64_t r = 0;
#ifdef ROW_DOTS_PAIR
    _Static_assert(ROWS_PAIR_MIN >= 1 && ROWS_PAIR_MIN <= 8, "the pair's cases are 1 to 8 rows");
    for (; r + 2 <= n_w && n_c >= ROWS_PAIR_MIN; r += 2) {
        const uint8_t *wr = w + (size_t)r * bx;
        switch (n_c) {
#if ROWS_PAIR_MIN <= 4
        case 1:
            ROW_DOTS_PAIR(t, 1, k, wr, bx, act, ab, y + r, ldy);
            break;
        case 2:
            ROW_DOTS_PAIR(t, 2, k, wr, bx, act, ab, y + r, ldy);
            break;
        case 3:
            ROW_DOTS_PAIR(t, 3, k, wr, bx, act, ab, y + r, ldy);
            break;
        case 4:
            ROW_DOTS_PAIR(t, 4, k, wr, bx, act, ab, y + r, ldy);
            break;
#endif
        case 5:
            ROW_DOTS_PAIR(t, 5, k, wr, bx, act, ab, y + r, ldy);
            break;
        case 6:
            ROW_DOTS_PAIR(t, 6, k, wr, bx, act, ab, y + r, ldy);
            break;
        case 7:
            ROW_DOTS_PAIR(t, 7, k, wr, bx, act, ab, y + r, ldy);
            break;
        default:
            ROW_DOTS_PAIR(t, 8, k, wr, bx, act, ab, y + r, ldy);
            break;
        }
    }
#endif
    for (; r < n_w && n_c > 0; r++) {
        const uint8_t *wr = w + (size_t)r * bx;
        switch (n_c) {
        case 1:
            ROW_DOTS(t, 1, k, wr, act, ab, y + r, ldy);
            break;
        case 2:
            ROW_DOTS(t, 2, k, wr, act, ab, y + r, ldy);
            break;
        case 3:
            ROW_DOTS(t, 3, k, wr, act, ab, y + r, ldy);
            break;
        case 4:
            ROW_DOTS(t, 4, k, wr, act, ab, y + r, ldy);
            break;
        case 5:
            ROW_DOTS(t, 5, k, wr, act, ab, y + r, ldy);
            break;
        case 6:
            ROW_DOTS(t, 6, k, wr, act, ab, y + r, ldy);
            break;
        case 7:
            ROW_DOTS(t, 7, k, wr, act, ab, y + r, ldy);
            break;
        default:
            ROW_DOTS(t, 8, k, wr, act, ab, y + r, ldy);
            break;
        }
    }
}

/* a quant_rows_fn named `name` driving the includer's type `type` */
#define ROWS_DEFINE(name, type)                                                                    \
    static void name(int64_t k, const void *restrict x, size_t bx, int64_t n_w,                    \
                     const void *restrict act, size_t ab, int64_t n_c, float *restrict y,          \
                     size_t ldy) {                                                                 \
        rows_drive(type, k, x, bx, n_w, act, ab, n_c, y, ldy);                                     \
    }

#endif /* LARES_QUANT_ROWS_DRIVE_H */
