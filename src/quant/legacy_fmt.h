/*
 * The legacy block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) as one compile-time
 * enumeration for the SIMD files: a kernel written once over `enum fmt` and
 * instantiated per format folds every switch below away. The ISA-specific
 * parts (decoding codes into vector registers) stay in each SIMD file.
 */
#ifndef LARES_QUANT_LEGACY_FMT_H
#define LARES_QUANT_LEGACY_FMT_H

#include "quant/blocks.h"

#include <stddef.h>

#ifndef ALWAYS_INLINE
#define ALWAYS_INLINE inline __attribute__((always_inline))
#endif

enum fmt { F_Q4_0, F_Q4_1, F_Q5_0, F_Q5_1, F_Q8_0 };

static ALWAYS_INLINE size_t fmt_bytes(enum fmt f) {
    switch (f) {
    case F_Q4_0:
        return sizeof(block_q4_0);
    case F_Q4_1:
        return sizeof(block_q4_1);
    case F_Q5_0:
        return sizeof(block_q5_0);
    case F_Q5_1:
        return sizeof(block_q5_1);
    default:
        return sizeof(block_q8_0);
    }
}

/* the *_1 formats: unsigned codes, a min m, activations in Q8_1 */
static ALWAYS_INLINE bool fmt_has_min(enum fmt f) {
    return f == F_Q4_1 || f == F_Q5_1;
}

/* bytes of one activation block: Q8_1 for the *_1 formats, else Q8_0 */
static ALWAYS_INLINE size_t act_bytes(enum fmt f) {
    return fmt_has_min(f) ? sizeof(block_q8_1) : sizeof(block_q8_0);
}

/* offset of the codes in an activation block */
static ALWAYS_INLINE size_t act_qs_offset(enum fmt f) {
    return fmt_has_min(f) ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);
}

#endif /* LARES_QUANT_LEGACY_FMT_H */
