/*
 * Synthetic models that copy their context (synth_copy.c), used by synth.c:
 * weights that implement an induction circuit, so that a model with a real
 * shape and no training still continues a text by repeating what followed
 * the current token before. Speculative decoding (prompt lookup, a draft
 * model) needs such a model to be measured at all: on random weights no
 * draft is ever right.
 */
#ifndef LARES_MODEL_SYNTH_COPY_H
#define LARES_MODEL_SYNTH_COPY_H

#include "model/synth_route.h"

typedef struct synth_copy_shape {
    int32_t n_layer, n_embd, head_dim, n_head, n_vocab;
    float rope_base;
} synth_copy_shape;

typedef struct synth_copy {
    synth_copy_shape s;
    int32_t n_hi;   /* high-frequency rotary pairs of the previous-token head */
    int32_t n_lo;   /* low-frequency rotary pairs that carry the match code */
    int32_t code;   /* match code dimensions: 2 x n_lo */
    /* residual dimensions: the constant, the token's match code and its
     * identity code (both written by the embedding), the previous token's
     * match code (layer 0 writes it), the copied identity code (layer 1) */
    int32_t d_const, d_match, d_ident, d_prev, d_copy;
    uint64_t seed;
} synth_copy;

/* The circuit for a shape. LARES_EINVAL when the shape leaves no room: fewer
 * than 2 layers, heads narrower than 64, a residual too narrow. */
lares_status synth_copy_plan(synth_copy *c, const synth_copy_shape *s, uint64_t seed,
                             lares_error *err);
/* Overwrites one row (n values) of a tensor of `role` in `layer` (-1: not a
 * layer's); `row` counts over every dimension above 0. */
void synth_copy_shape_row(const synth_copy *c, synth_role role, int32_t layer, int64_t row,
                          float *v, int64_t n);

#endif /* LARES_MODEL_SYNTH_COPY_H */
