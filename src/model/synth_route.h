/*
 * Realistic routing for synthetic MoE models (synth_route.c), used by
 * synth.c: a plan made before any tensor is written, then applied to each
 * row of the tensors it concerns before the row is quantized.
 */
#ifndef LARES_MODEL_SYNTH_ROUTE_H
#define LARES_MODEL_SYNTH_ROUTE_H

#include "core/core.h"

/* What a synthetic tensor is, for the rows the routing plan changes. */
typedef enum synth_role {
    SYNTH_ROLE_PLAIN = 0, /* random values, untouched */
    SYNTH_ROLE_NORM,      /* ones */
    SYNTH_ROLE_EMBD,      /* token_embd */
    SYNTH_ROLE_ATTN_Q,
    SYNTH_ROLE_ATTN_K,
    SYNTH_ROLE_ATTN_V,
    SYNTH_ROLE_ATTN_OUT,
    SYNTH_ROLE_FFN_DOWN, /* dense or stacked experts: writes the residual stream */
    SYNTH_ROLE_ROUTER,   /* ffn_gate_inp */
    SYNTH_ROLE_OUTPUT    /* output.weight: one row per token */
} synth_role;

typedef struct synth_route_shape {
    int32_t n_layer, n_embd, head_dim, n_expert, n_expert_used;
    float rope_base;
} synth_route_shape;

#define SYNTH_ROUTE_BAND 4 /* rotary pairs that carry the recency kernel */

typedef struct synth_routing {
    synth_route_shape s;
    int32_t dims;         /* residual dimensions per layer holding its summary */
    int32_t bias_dim;     /* the residual dimension that is constant */
    int32_t token0;       /* first of the dimensions only the embedding writes */
    int32_t band0;        /* first rotary pair of the band */
    float q_band, q_dead; /* query amplitudes: band pairs, pair 0 (unmatched by keys) */
    float k_band;         /* key amplitude of the band pairs */
    float sigma;          /* kernel width in tokens */
    float *router;        /* owned: n_layer x n_expert x dims */
    float *bias;          /* owned: n_layer x n_expert */
    float *mix;           /* owned: n_layer x dims x head_dim (attn_output rows) */
    double sim_overlap;   /* what the plan's simulation measured (layer 0) */
    double sim_top_share;
} synth_routing;

/* Plans routers with popularity ~ rank^-skew and consecutive-token overlap
 * `overlap` (simulated). LARES_EINVAL when the shape leaves no room. */
lares_status synth_routing_plan(synth_routing *r, const synth_route_shape *s, double skew,
                                double overlap, uint64_t seed, lares_error *err);
/* Changes one row (n values, already filled) of a tensor of `role` in
 * `layer` (-1: not a layer's), `row` counting over every dimension above 0. */
void synth_routing_shape_row(const synth_routing *r, synth_role role, int32_t layer, int64_t row,
                             float *v, int64_t n);
void synth_routing_free(synth_routing *r);

/* the generator synth.c fills rows with: a 64-bit mixing function */
uint64_t synth_mix64(uint64_t z);

#endif /* LARES_MODEL_SYNTH_ROUTE_H */
