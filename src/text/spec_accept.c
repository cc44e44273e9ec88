/*
 * Speculative sampling's acceptance rule (Leviathan et al. 2023, "Fast
 * inference from transformers via speculative decoding"; Chen et al. 2023,
 * "Accelerating large language model decoding with speculative sampling").
 *
 * A draft token x drawn from the draft's distribution q is kept with
 * probability min(1, p(x) / q(x)); when it is not, the token comes from the
 * residual max(0, p - q), normalised. Kept or drawn, the token is distributed
 * exactly as p: P(y) = q(y) min(1, p(y)/q(y)) + (1 - sum_z min(q(z), p(z)))
 * max(0, p(y) - q(y)) / sum_z max(0, p(z) - q(z)) = min(q(y), p(y)) +
 * max(0, p(y) - q(y)) = p(y), since both sums equal 1 - sum_z min(p(z), q(z)).
 */
#include "text/text.h"

int32_t text_draw(const float *probs, int32_t n, double u) {
    double total = 0;
    for (int32_t i = 0; i < n; i++) {
        total += probs[i];
    }
    double r = u * total;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (probs[i] <= 0) {
            continue;
        }
        last = i;
        r -= probs[i];
        if (r < 0) {
            return i;
        }
    }
    return last;
}

int32_t text_spec_accept(const float *p, const float *q, int32_t n, int32_t x, double u, double v,
                         bool *accepted) {
    /* u < p(x) / q(x), without dividing by a q(x) of 0 */
    if (u * (double)q[x] < (double)p[x]) {
        *accepted = true;
        return x;
    }
    *accepted = false;
    double total = 0;
    for (int32_t i = 0; i < n; i++) {
        const double d = (double)p[i] - (double)q[i];
        total += d > 0 ? d : 0;
    }
    if (!(total > 0)) {
        /* p <= q everywhere yet x refused: p and q differ only by rounding */
        return text_draw(p, n, v);
    }
    double r = v * total;
    int32_t last = x;
    for (int32_t i = 0; i < n; i++) {
        const double d = (double)p[i] - (double)q[i];
        if (d <= 0) {
            continue;
        }
        last = i;
        r -= d;
        if (r < 0) {
            return i;
        }
    }
    return last;
}
