/*
 * The block types of the few-row products (rows_avx512.c, rows_avxvnni.c,
 * rows_avx2.c, rows_neon.c: each installs those it walks), the bytes of
 * weights a walk advances per 32 elements, and where the legacy blocks keep
 * their fields. Portable; rows_types.h adds what the x86 families share.
 */
#ifndef LARES_QUANT_ROWS_KINDS_H
#define LARES_QUANT_ROWS_KINDS_H

#include "quant/blocks.h"

#include <stdbool.h>
#include <stddef.h>

enum rows_type {
    R_Q4_0,
    R_Q8_0,
    R_IQ4_NL,
    R_IQ4_XS,
    R_Q4_K,
    R_Q5_K,
    R_Q6_K,
    R_Q5_0,
    R_Q4_1,
    R_Q5_1
};

/* bytes per 32 elements of the types walked eight blocks at a time (IQ4_XS:
 * its 136-byte super-block of 256) */
static inline size_t rows_block_bytes(enum rows_type t) {
    return t == R_Q4_0     ? sizeof(block_q4_0)
           : t == R_Q5_0   ? sizeof(block_q5_0)
           : t == R_Q4_1   ? sizeof(block_q4_1)
           : t == R_Q5_1   ? sizeof(block_q5_1)
           : t == R_IQ4_NL ? sizeof(block_iq4_nl)
           : t == R_IQ4_XS ? sizeof(block_iq4_xs) / 8
                           : sizeof(block_q8_0);
}

/* bytes of weights per 256 elements of type t (a K-quant's or IQ4_XS's
 * super-block, eight blocks of the others) */
static inline size_t rows_chunk_bytes(enum rows_type t) {
    return t == R_Q4_K   ? sizeof(block_q4_K)
           : t == R_Q5_K ? sizeof(block_q5_K)
           : t == R_Q6_K ? sizeof(block_q6_K)
                         : 8 * rows_block_bytes(t);
}

/* the legacy types walked with unsigned codes (Q4_0, Q5_0, Q4_1, Q5_1), those
 * of them with a fifth bit per element, and those with a minimum per block */
static inline bool rows_five_bits(enum rows_type t) {
    return t == R_Q5_0 || t == R_Q5_1;
}

static inline bool rows_has_min(enum rows_type t) {
    return t == R_Q4_1 || t == R_Q5_1;
}

static inline bool rows_unsigned(enum rows_type t) {
    return t == R_Q4_0 || t == R_Q4_1 || rows_five_bits(t);
}

/* where a block of the legacy types of unsigned codes keeps its nibbles and
 * (Q5_0, Q5_1) its fifth bits; Q4_1 and Q5_1 keep their minimum m after d */
static inline size_t rows_qs_at(enum rows_type t) {
    return t == R_Q4_0   ? offsetof(block_q4_0, qs)
           : t == R_Q5_0 ? offsetof(block_q5_0, qs)
           : t == R_Q4_1 ? offsetof(block_q4_1, qs)
                         : offsetof(block_q5_1, qs);
}

static inline size_t rows_qh_at(enum rows_type t) {
    return t == R_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
}

_Static_assert(offsetof(block_q4_1, m) == offsetof(block_q5_1, m), "one place for the minimum");

#endif /* LARES_QUANT_ROWS_KINDS_H */
