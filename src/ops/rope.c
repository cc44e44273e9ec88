/*
 * Rotary position embedding (Su et al. 2021, "RoFormer", eq. 34): each pair
 * of dimensions is rotated by pos * theta_i, theta_i = base^(-2i/n_rot).
 * GGUF llama files keep Meta's interleaved pair order (NORM); GPT-NeoX-style
 * models (qwen2, qwen3) pair dimension i with i + n_rot/2 (NEOX).
 */
#include "ops/ops.h"

#include <math.h>

void ops_rope_angles(float pos, const float *inv_freq, int64_t n_rot, float *cs) {
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const double theta = (double)pos * inv_freq[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void ops_rope(float *x, int64_t head_dim, int64_t n_rot, const float *cs, ops_rope_mode mode) {
    (void)head_dim; /* dims past n_rot pass through unrotated */
    if (mode == OPS_ROPE_NEOX) {
        const int64_t half = n_rot / 2;
        for (int64_t i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float a = x[i], b = x[i + half];
            x[i] = a * c - b * s;
            x[i + half] = a * s + b * c;
        }
        return;
    }
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}
