/*
 * The drive of the few-row product, shared by rows_avx512.c, rows_avxvnni.c
 * and rows_avx2.c: each weight row against the n_c (1..QUANT_ROWS_MAX)
 * activation rows, with the row count a constant in the call so that every
 * count gets its own unrolled body. The includer defines ROW_DOTS(t, NC, k,
 * w, act, ab, y, ldy): one weight row w of type t against NC rows, the
 * results NC floats ldy apart from y; or instead ROWS_GROUP and
 * ROW_DOTS_GROUP(t, NC, k, w, bx, n, act, ab, y, ldy): n <= ROWS_GROUP weight
 * rows (w, w + bx, ..., results at y, y + 1, ...), which then takes the
 * weight rows that many at a time, the last ones left over as one call.
 */
#ifndef LARES_QUANT_ROWS_DRIVE_H
#define LARES_QUANT_ROWS_DRIVE_H

#include <stdint.h>

/* CALL(NC) with NC the constant n_c (1..8; more as 8) */
#define ROWS_BY_COUNT(n_c, CALL)                                                                   \
    switch (n_c) {                                                                                 \
    case 1:                                                                                        \
        CALL(1);                                                                                   \
        break;                                                                                     \
    case 2:                                                                                        \
        CALL(2);                                                                                   \
        break;                                                                                     \
    case 3:                                                                                        \
        CALL(3);                                                                                   \
        break;                                                                                     \
    case 4:                                                                                        \
        CALL(4);                                                                                   \
        break;                                                                                     \
    case 5:                                                                                        \
        CALL(5);                                                                                   \
        break;                                                                                     \
    case 6:                                                                                        \
        CALL(6);                                                                                   \
        break;                                                                                     \
    case 7:                                                                                        \
        CALL(7);                                                                                   \
        break;                                                                                     \
    default:                                                                                       \
        CALL(8);                                                                                   \
        break;                                                                                     \
    }

/* The sanitizer build (LARES_ROWS_FEW_COUNTS, set by CMake with
 * LARES_SANITIZE) compiles two counts only, 8 and 1, and takes n_c rows
 * eight at a time, the rest one at a time: a row's result does not depend on
 * the rows beside it (each activation row's sums are its own, in the same
 * order at every count), so the results are the same bit for bit. Clang at
 * -O1 with AddressSanitizer spent 14 minutes on rows_avx512.c's 80 bodies
 * (10 types x 8 counts), most of CI's second build; the counts 2..7 are run
 * by the optimised build's tests. */
#ifdef LARES_ROWS_FEW_COUNTS
#undef ROWS_BY_COUNT
#define ROWS_BY_COUNT(n_c, CALL)                                                                   \
    if ((n_c) >= 8) {                                                                              \
        CALL(8);                                                                                   \
    } else {                                                                                       \
        CALL(1);                                                                                   \
    }
#endif

static inline __attribute__((always_inline)) void
rows_drive_counts(enum rows_type t, int64_t k, const uint8_t *restrict w, size_t bx, int64_t n_w,
                  const void *restrict act, size_t ab, int64_t n_c, float *restrict y,
                  size_t ldy) {
    int64_t r = 0;
#ifdef ROW_DOTS_GROUP
#define ROWS_GROUP_CALL(NC) ROW_DOTS_GROUP(t, NC, k, wr, bx, n, act, ab, y + r, ldy)
    for (; r < n_w && n_c > 0; r += ROWS_GROUP) {
        const uint8_t *wr = w + (size_t)r * bx;
        const int n = n_w - r < ROWS_GROUP ? (int)(n_w - r) : ROWS_GROUP;
        ROWS_BY_COUNT(n_c, ROWS_GROUP_CALL)
    }
#undef ROWS_GROUP_CALL
#else
#define ROWS_ONE_CALL(NC) ROW_DOTS(t, NC, k, wr, act, ab, y + r, ldy)
    for (; r < n_w && n_c > 0; r++) {
        const uint8_t *wr = w + (size_t)r * bx;
        ROWS_BY_COUNT(n_c, ROWS_ONE_CALL)
    }
#undef ROWS_ONE_CALL
#endif
}

static inline __attribute__((always_inline)) void
rows_drive(enum rows_type t, int64_t k, const void *restrict x, size_t bx, int64_t n_w,
           const void *restrict act, size_t ab, int64_t n_c, float *restrict y, size_t ldy) {
#ifdef LARES_ROWS_FEW_COUNTS
    const uint8_t *a = act;
    for (int64_t c = 0; c < n_c;) {
        const int64_t piece = n_c - c >= 8 ? 8 : 1;
        rows_drive_counts(t, k, x, bx, n_w, a + (size_t)c * ab, ab, piece, y + (size_t)c * ldy,
                          ldy);
        c += piece;
    }
#else
    rows_drive_counts(t, k, x, bx, n_w, act, ab, n_c, y, ldy);
#endif
}

/* a quant_rows_fn named `name` driving the includer's type `type` */
#define ROWS_DEFINE(name, type)                                                                    \
    static void name(int64_t k, const void *restrict x, size_t bx, int64_t n_w,                    \
                     const void *restrict act, size_t ab, int64_t n_c, float *restrict y,          \
                     size_t ldy) {                                                                 \
        rows_drive(type, k, x, bx, n_w, act, ab, n_c, y, ldy);                                     \
    }

#endif /* LARES_QUANT_ROWS_DRIVE_H */
