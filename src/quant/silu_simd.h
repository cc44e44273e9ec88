/*
 * SwiGLU's gate at one vector width: g = silu(g) * u = g / (1 + e^-g) * u,
 * included by attend_avx2.c, attend_avx512.c and attend_neon.c after
 * attend_simd.h, whose v_exp it takes (relative error about 2e-7; the
 * reference, ops_swiglu's loop, calls libm's expf per element). A vector of
 * ATT_LANES elements costs about what one expf call does. A last partial
 * vector goes through a padded copy, so every element is computed by the same
 * instructions wherever a thread's share of the rows begins: a row's result
 * does not depend on the rows beside it.
 *
 * Wanted from the includer, beside attend_simd.h's: V_SUB V_DIV V_MIN.
 */

/* silu(g) * u; e^-g with -g at most 88 (e^88 is finite in float; v_exp takes
 * arguments below -87 as -87) */
static inline vf silu_vec(vf g, vf u) {
    const vf e = v_exp(V_MIN(V_SUB(V_ZERO(), g), V_SET1(88.0f)));
    return V_MUL(V_DIV(g, V_ADD(V_SET1(1.0f), e)), u);
}

static void silu_mul_simd(float *restrict g, const float *restrict u, int64_t n) {
    int64_t i = 0;
    for (; i + ATT_LANES <= n; i += ATT_LANES) {
        V_STORE(g + i, silu_vec(V_LOAD(g + i), V_LOAD(u + i)));
    }
    if (i < n) {
        float tg[ATT_LANES] = {0}, tu[ATT_LANES] = {0};
        memcpy(tg, g + i, (size_t)(n - i) * sizeof *tg);
        memcpy(tu, u + i, (size_t)(n - i) * sizeof *tu);
        V_STORE(tg, silu_vec(V_LOAD(tg), V_LOAD(tu)));
        memcpy(g + i, tg, (size_t)(n - i) * sizeof *tg);
    }
}
