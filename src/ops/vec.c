/* Row operations of the transformer block: RMSNorm, SwiGLU, residual add. */
#include "ops/ops.h"

#include <math.h>

void ops_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *out) {
    /* the mean of squares in double: rows of 8192 floats lose bits in float */
    double ss = 0;
    for (int64_t i = 0; i < n; i++) {
        ss += (double)x[i] * x[i];
    }
    const float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    if (w != NULL) {
        for (int64_t i = 0; i < n; i++) {
            out[i] = x[i] * scale * w[i];
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            out[i] = x[i] * scale;
        }
    }
}

void ops_swiglu(float *g, const float *u, int64_t n) {
    /* the family's vector kernel where it has one (the same result for an
     * element wherever it stands in g), else libm's expf per element */
    const quant_silu_fn f = quant_traits_of(GGUF_TYPE_F32)->silu_mul;
    if (f != NULL) {
        f(g, u, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

void ops_add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        x[i] += y[i];
    }
}
