/*
 * The block types of the x86 few-row products (rows_avx512.c,
 * rows_avxvnni.c, rows_avx2.c: each installs those it walks) and the bytes
 * of weights a walk advances per 32 elements.
 */
#ifndef LARES_QUANT_ROWS_TYPES_H
#define LARES_QUANT_ROWS_TYPES_H

#include "quant/blocks.h"

#include <stddef.h>

enum rows_type { R_Q4_0, R_Q8_0, R_IQ4_NL, R_IQ4_XS, R_Q4_K, R_Q5_K, R_Q6_K };

/* bytes per 32 elements of the types walked eight blocks at a time (IQ4_XS:
 * its 136-byte super-block of 256) */
static inline size_t rows_block_bytes(enum rows_type t) {
    return t == R_Q4_0 ? sizeof(block_q4_0)
           : t == R_IQ4_NL ? sizeof(block_iq4_nl)
           : t == R_IQ4_XS ? sizeof(block_iq4_xs) / 8
                           : sizeof(block_q8_0);
}

#endif /* LARES_QUANT_ROWS_TYPES_H */
