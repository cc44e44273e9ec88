/*
 * An induction circuit in a synthetic model (synth_copy.h; docs/speculative.md,
 * "A model that copies"). Two heads do the work, every other layer passes the
 * residual stream on unchanged (its attention output and FFN down rows are
 * zero; the other weights stay random, so speed is that of any model):
 *
 *   layer 0, head 0: attends to the previous position. Its query and key read
 *   only the constant residual dimension and sit on the fastest rotary pairs,
 *   the key turned one step ahead, so the score sum_p cos(theta_p (i - j - 1))
 *   peaks at j = i - 1 (the next best, j = i and i - 2, lose about 13 in the
 *   softmax's exponent); its value is the token's match code, written to d_prev.
 *   layer 1, head 0: the query is the current token's match code, the key the
 *   previous token's (d_prev), both on the slowest rotary pairs (turning less
 *   than 0.3 rad over 300 tokens), so it attends to the positions that
 *   followed an earlier occurrence of the current token; its value is that
 *   position's identity code, written to d_copy.
 *   output: each token's row reads its identity code from d_copy.
 *
 * The scales assume what the embedding writes: 1 in the constant dimension
 * and unit match and identity codes, so the RMS norm's gain at each layer is
 * known (sqrt(n_embd / 3) into layer 0, / 4 into layer 1, / 5 at the output).
 */
#include "model/synth_copy.h"

#include <math.h>
#include <string.h>

#define PREV_PAIRS 8      /* rotary pairs of the previous-token head */
#define PREV_AMP   10.0   /* its query and key per pair */
#define MATCH_LOGIT 30.0  /* an exact match's score in layer 1 (after 1/sqrt(head_dim)) */
#define OUT_LOGIT   30.0  /* the copied token's logit */

/* a value of a unit-variance bell-shaped sequence keyed by `key` */
static double bell(uint64_t key, int64_t i) {
    const uint64_t r = synth_mix64(key + (uint64_t)i * 0x9e3779b97f4a7c15u);
    const int32_t s4 = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) +
                       (int32_t)((r >> 32) & 0xffff) + (int32_t)(r >> 48) - 2 * 65536;
    return (double)s4 / 37837.2272;
}

/* the unit code of n dimensions of token t, `which` telling the codes apart */
static void token_code(const synth_copy *c, uint64_t which, int64_t t, int32_t n, double *out) {
    const uint64_t key = synth_mix64(c->seed ^ which ^ ((uint64_t)t * 0xd1b54a32d192ed03u));
    double ss = 0.0;
    for (int32_t i = 0; i < n; i++) {
        out[i] = bell(key, i);
        ss += out[i] * out[i];
    }
    const double inv = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
    for (int32_t i = 0; i < n; i++) {
        out[i] *= inv;
    }
}

#define CODE_MATCH 0x6d61746368ull
#define CODE_IDENT 0x6964656e74ull

lares_status synth_copy_plan(synth_copy *c, const synth_copy_shape *s, uint64_t seed,
                             lares_error *err) {
    memset(c, 0, sizeof *c);
    c->s = *s;
    c->seed = seed;
    const int32_t hd = s->head_dim;
    if (s->n_layer < 2 || hd < 64 || hd > 512 || hd % 8 != 0) {
        return lares_fail(err, LARES_EINVAL,
                          "synth: a model that copies needs 2 layers or more and heads of 64 "
                          "dimensions or more (this shape: %d layers, heads of %d)",
                          s->n_layer, hd);
    }
    c->n_hi = PREV_PAIRS;
    c->n_lo = hd / 8;
    c->code = 2 * c->n_lo;
    c->d_const = 0;
    c->d_match = 1;
    c->d_ident = c->d_match + c->code;
    c->d_prev = c->d_ident + hd;
    c->d_copy = c->d_prev + c->code;
    if (c->d_copy + hd > s->n_embd) {
        return lares_fail(err, LARES_EINVAL,
                          "synth: a model that copies needs a residual of %d dimensions or more "
                          "(this shape: %d)",
                          c->d_copy + hd, s->n_embd);
    }
    return LARES_OK;
}

/* the RMS norm's gain where the residual holds `units` unit-norm parts */
static double gain(const synth_copy *c, double units) {
    return sqrt((double)c->s.n_embd / units);
}

static double theta(const synth_copy *c, int32_t pair) {
    return pow((double)c->s.rope_base, -2.0 * pair / (double)c->s.head_dim);
}

static void zero(float *v, int64_t n) {
    memset(v, 0, (size_t)n * sizeof *v);
}

void synth_copy_shape_row(const synth_copy *c, synth_role role, int32_t layer, int64_t row,
                          float *v, int64_t n) {
    const int32_t hd = c->s.head_dim;
    const int32_t lo0 = hd - c->code; /* first dimension of the slow pairs */
    const double match_amp = sqrt(MATCH_LOGIT * sqrt((double)hd));
    double code[512];
    switch (role) {
    case SYNTH_ROLE_EMBD:
        zero(v, n);
        v[c->d_const] = 1.0f;
        token_code(c, CODE_MATCH, row, c->code, code);
        for (int32_t i = 0; i < c->code; i++) {
            v[c->d_match + i] = (float)code[i];
        }
        token_code(c, CODE_IDENT, row, hd, code);
        for (int32_t i = 0; i < hd; i++) {
            v[c->d_ident + i] = (float)code[i];
        }
        break;
    case SYNTH_ROLE_OUTPUT:
        zero(v, n);
        token_code(c, CODE_IDENT, row, hd, code);
        for (int32_t i = 0; i < hd; i++) {
            v[c->d_copy + i] = (float)(OUT_LOGIT * code[i] / gain(c, 5.0));
        }
        break;
    case SYNTH_ROLE_ATTN_Q:
    case SYNTH_ROLE_ATTN_K:
        if ((layer != 0 && layer != 1) || row >= hd) {
            break; /* other heads and layers: random, unread */
        }
        zero(v, n);
        if (layer == 0 && row / 2 < c->n_hi) {
            const double t = theta(c, (int32_t)(row / 2));
            const double a = role == SYNTH_ROLE_ATTN_Q ? (row % 2 == 0 ? PREV_AMP : 0.0)
                                                       : PREV_AMP * (row % 2 == 0 ? cos(t) : sin(t));
            v[c->d_const] = (float)(a / gain(c, 3.0));
        } else if (layer == 1 && row >= lo0) {
            const int32_t from = role == SYNTH_ROLE_ATTN_Q ? c->d_match : c->d_prev;
            v[from + (row - lo0)] = (float)(match_amp / gain(c, 4.0));
        }
        break;
    case SYNTH_ROLE_ATTN_V:
        if ((layer != 0 && layer != 1) || row >= hd) {
            break;
        }
        zero(v, n);
        if (layer == 0 && row < c->code) {
            v[c->d_match + row] = (float)(1.0 / gain(c, 3.0));
        } else if (layer == 1) {
            v[c->d_ident + row] = (float)(1.0 / gain(c, 4.0));
        }
        break;
    case SYNTH_ROLE_ATTN_OUT:
        /* row: a residual dimension; columns: the heads' outputs, head 0 first */
        zero(v, n);
        if (layer == 0 && row >= c->d_prev && row < c->d_prev + c->code) {
            v[row - c->d_prev] = 1.0f;
        } else if (layer == 1 && row >= c->d_copy && row < c->d_copy + hd) {
            v[row - c->d_copy] = 1.0f;
        }
        break;
    case SYNTH_ROLE_FFN_DOWN:
        zero(v, n);
        break;
    case SYNTH_ROLE_PLAIN:
    case SYNTH_ROLE_NORM:
    case SYNTH_ROLE_ROUTER:
        break;
    }
}
