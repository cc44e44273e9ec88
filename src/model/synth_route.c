/*
 * Realistic routing for synthetic MoE models (issue 18).
 *
 * Random router rows read the current token's hidden state, so the experts a
 * token picks have nothing to do with the previous token's, and popularity is
 * whatever the noise gives. Real routers are different: consecutive tokens
 * share most of their experts, and some experts are chosen far more often
 * than others. Both decide what an expert cache can keep, so a benchmark of
 * streaming needs them. Router logits come from hidden states, so the model
 * itself must carry a slowly changing signal. This file builds one from the
 * weights alone:
 *
 *   - one residual dimension (`bias_dim`) is a constant: every embedding row
 *     holds C there and no layer writes to it (those rows of attn_output and
 *     ffn_down are zero);
 *   - query head 0 and KV head 0 of every layer read only that constant, on a
 *     band of slow rotary pairs, so their scores depend on the distance
 *     between positions alone: score(d) = A * mean cos(theta_i d), a window
 *     of about sigma = 1 / (theta sqrt(A)) recent tokens; the head's output is
 *     a moving average of the recent tokens' values, which read only
 *     TOKEN_DIMS residual dimensions that the embedding alone writes (the
 *     other dimensions carry context averages of earlier layers, slow and
 *     shared, that would make every token's value alike);
 *   - attn_output writes that average (through `mix`, orthonormal rows scaled
 *     to unit variance) into `dims` residual dimensions owned by the layer,
 *     which nothing else writes;
 *   - the layer's router reads those dimensions (random rows) plus the
 *     constant (a per-expert bias).
 *
 * Top-k is unchanged by the RMS norm's scale, so what the router picks
 * depends only on the moving average against the biases. A simulation of
 * exactly that (iid unit values per token, the real kernel) sets sigma by
 * bisection for the requested overlap and the biases by iteration for the
 * requested popularity (Zipf: the r-th most popular expert is chosen in
 * proportion to r^-skew, capped at every token). The real model differs
 * from the simulation where tokens repeat (a repeated token repeats its
 * value) and at the first positions (a window not yet full); `lares bench`
 * measures what the model actually does.
 */
#include "model/synth_route.h"

#include <math.h>

enum {
    SIM_T = 256,     /* positions per simulated sequence */
    SIM_SEQ = 4,     /* sequences */
    SIM_T0 = 32,     /* first position measured (the window is full by then) */
    SIM_ITER = 40,   /* bias iterations */
    SIM_BISECT = 18, /* kernel width bisection steps */
    ROUTE_DIMS = 16, /* most residual dimensions per layer */
    TOKEN_DIMS = 32  /* residual dimensions only the embedding writes */
};

/* The token dimensions' spread and the constant: large, so that they, not
 * the layers' growing outputs, set every RMS norm's scale, which makes a
 * value's spread the same at every layer and every position. */
static const float token_std = 8.0f;
static const float route_c = 8.0f;
static const float route_gain = 4.0f; /* keeps q and k far above the norms' epsilon */

/* ---- random numbers: Gaussian pairs from the synth generator ---- */

static double uniform01(uint64_t key) {
    return ((double)(synth_mix64(key) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double gauss(uint64_t key) {
    const double u1 = uniform01(key), u2 = uniform01(key ^ 0x5851f42d4c957f2du);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- the kernel ---- */

static double theta(const synth_routing *r, int32_t i) {
    return pow((double)r->s.rope_base, -2.0 * (double)i / (double)r->s.head_dim);
}

/* Chooses the band and amplitudes for a window of width sigma: the slowest
 * band that can still be that narrow (revivals of the cosines come late). */
static void set_kernel(synth_routing *r, double sigma) {
    const int32_t half = r->s.head_dim / 2;
    const double a_max = sqrt((double)r->s.head_dim);
    int32_t best = 1;
    double m2_best = 0;
    for (int32_t i0 = 1; i0 + SYNTH_ROUTE_BAND <= half; i0++) {
        double m2 = 0;
        for (int32_t j = 0; j < SYNTH_ROUTE_BAND; j++) {
            m2 += theta(r, i0 + j) * theta(r, i0 + j) / SYNTH_ROUTE_BAND;
        }
        if (i0 == 1 || 1.0 / (sigma * sigma * m2) <= a_max) {
            best = i0;
            m2_best = m2;
        }
    }
    double a = 1.0 / (sigma * sigma * m2_best) / a_max; /* A / A_max */
    a = a > 1.0 ? 1.0 : a;
    r->band0 = best;
    r->sigma = (float)sigma;
    r->q_band = (float)(a / sqrt((double)SYNTH_ROUTE_BAND));
    r->q_dead = (float)sqrt(1.0 - a * a);
    r->k_band = (float)(1.0 / sqrt((double)SYNTH_ROUTE_BAND));
}

/* score(d) = q . rot(d) k / sqrt(head_dim) with q, k normalized to RMS 1 */
static double score(const synth_routing *r, int32_t d) {
    double s = 0;
    for (int32_t j = 0; j < SYNTH_ROUTE_BAND; j++) {
        s += cos(theta(r, r->band0 + j) * (double)d);
    }
    return (double)r->s.head_dim * (double)r->q_band * (double)r->k_band * s /
           sqrt((double)r->s.head_dim);
}

/* ---- the simulation ---- */

typedef struct sim {
    int32_t dims, n_expert, k;
    float *u;     /* SIM_SEQ x SIM_T x dims: each token's value, mixed */
    float *x;     /* SIM_SEQ x SIM_T x dims: the moving averages */
    int32_t *sel; /* SIM_SEQ x SIM_T x k */
    double *freq; /* n_expert */
} sim;

static void sim_summaries(const synth_routing *r, sim *m) {
    double w[SIM_T], sc[SIM_T];
    for (int32_t d = 0; d < SIM_T; d++) {
        sc[d] = score(r, d);
    }
    const int32_t D = m->dims;
    for (int32_t q = 0; q < SIM_SEQ; q++) {
        for (int32_t t = 0; t < SIM_T; t++) {
            double mx = sc[0], sum = 0;
            for (int32_t d = 1; d <= t; d++) {
                mx = sc[d] > mx ? sc[d] : mx;
            }
            for (int32_t d = 0; d <= t; d++) {
                w[d] = exp(sc[d] - mx);
                sum += w[d];
            }
            float *x = m->x + ((size_t)q * SIM_T + (size_t)t) * (size_t)D;
            for (int32_t j = 0; j < D; j++) {
                double acc = 0;
                for (int32_t d = 0; d <= t; d++) {
                    acc +=
                        w[d] * m->u[((size_t)q * SIM_T + (size_t)(t - d)) * (size_t)D + (size_t)j];
                }
                x[j] = (float)(acc / sum);
            }
        }
    }
}

/* the k largest of n logits, ties to the lower index */
static void top_k(const double *z, int32_t n, int32_t k, int32_t *out) {
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n; e++) {
            bool taken = false;
            for (int32_t i = 0; i < j; i++) {
                taken = taken || out[i] == e;
            }
            if (!taken && (best < 0 || z[e] > z[best])) {
                best = e;
            }
        }
        out[j] = best;
    }
}

/* Routes every simulated token with (router, bias): fills sel and freq
 * (share of tokens choosing each expert), returns the mean overlap. */
static double sim_route(sim *m, const float *router, const float *bias) {
    double z[512];
    const int32_t D = m->dims, E = m->n_expert, k = m->k;
    for (int32_t e = 0; e < E; e++) {
        m->freq[e] = 0;
    }
    double shared = 0;
    int64_t pairs = 0, n = 0;
    for (int32_t q = 0; q < SIM_SEQ; q++) {
        for (int32_t t = SIM_T0 - 1; t < SIM_T; t++) {
            const float *x = m->x + ((size_t)q * SIM_T + (size_t)t) * (size_t)D;
            for (int32_t e = 0; e < E; e++) {
                double acc = bias[e];
                for (int32_t j = 0; j < D; j++) {
                    acc += (double)router[(size_t)e * (size_t)D + (size_t)j] * x[j];
                }
                z[e] = acc;
            }
            int32_t *sel = m->sel + ((size_t)q * SIM_T + (size_t)t) * (size_t)k;
            top_k(z, E, k, sel);
            if (t < SIM_T0) {
                continue; /* only the previous token of the first measured one */
            }
            n++;
            for (int32_t i = 0; i < k; i++) {
                m->freq[sel[i]] += 1;
                for (int32_t j = 0; j < k; j++) {
                    shared += sel[i] == sel[j - k] ? 1 : 0; /* the previous token's row */
                }
            }
            pairs++;
        }
    }
    for (int32_t e = 0; e < E; e++) {
        m->freq[e] /= (double)n;
    }
    return shared / ((double)pairs * (double)k);
}

/* Target shares: k * rank^-skew normalized, capped at 1 (water-filling). */
static void zipf_targets(int32_t n, int32_t k, double skew, const int32_t *rank_of, double *p) {
    double lo = 0, hi = 1e9;
    for (int it = 0; it < 200; it++) {
        const double c = 0.5 * (lo + hi);
        double sum = 0;
        for (int32_t e = 0; e < n; e++) {
            const double v = c * pow((double)(rank_of[e] + 1), -skew);
            sum += v < 1 ? v : 1;
        }
        if (sum > k) {
            hi = c;
        } else {
            lo = c;
        }
    }
    for (int32_t e = 0; e < n; e++) {
        const double v = lo * pow((double)(rank_of[e] + 1), -skew);
        p[e] = v < 1 ? v : 1;
    }
}

/* Biases that give the target shares, by iteration on the simulation;
 * returns the overlap measured with them. */
static double fit_bias(sim *m, const float *router, const double *target, float *bias) {
    const int32_t E = m->n_expert;
    const double floor_share = 0.25 / (double)(SIM_SEQ * (SIM_T - SIM_T0));
    for (int32_t e = 0; e < E; e++) {
        bias[e] = (float)(0.3 * log(target[e]));
    }
    for (int it = 0; it < SIM_ITER; it++) {
        sim_route(m, router, bias);
        double mean = 0;
        for (int32_t e = 0; e < E; e++) {
            const double f = m->freq[e] > floor_share ? m->freq[e] : floor_share;
            double b = bias[e] + 0.5 * (log(target[e]) - log(f)) * 0.3;
            b = b > 8 ? 8 : b < -8 ? -8 : b;
            bias[e] = (float)b;
            mean += b / E;
        }
        for (int32_t e = 0; e < E; e++) {
            bias[e] -= (float)mean;
        }
    }
    return sim_route(m, router, bias);
}

/* share of choices going to the k most chosen experts */
static double top_share(const sim *m) {
    double f[512];
    const int32_t E = m->n_expert;
    for (int32_t e = 0; e < E; e++) {
        f[e] = m->freq[e];
    }
    double s = 0;
    for (int32_t j = 0; j < m->k; j++) {
        int32_t best = 0;
        for (int32_t e = 1; e < E; e++) {
            best = f[e] > f[best] ? e : best;
        }
        s += f[best];
        f[best] = -1;
    }
    return s / (double)m->k;
}

/* ---- the plan ---- */

static void gram_schmidt(float *rows, int32_t n_rows, int32_t n) {
    for (int32_t i = 0; i < n_rows; i++) {
        float *a = rows + (size_t)i * (size_t)n;
        for (int32_t j = 0; j < i; j++) {
            const float *b = rows + (size_t)j * (size_t)n;
            double dot = 0;
            for (int32_t c = 0; c < n; c++) {
                dot += (double)a[c] * b[c];
            }
            for (int32_t c = 0; c < n; c++) {
                a[c] -= (float)(dot * b[c]);
            }
        }
        double norm = 0;
        for (int32_t c = 0; c < n; c++) {
            norm += (double)a[c] * a[c];
        }
        norm = sqrt(norm);
        for (int32_t c = 0; c < n; c++) {
            a[c] = (float)(a[c] / norm);
        }
    }
}

lares_status synth_routing_plan(synth_routing *r, const synth_route_shape *s, double skew,
                                double overlap, uint64_t seed, lares_error *err) {
    memset(r, 0, sizeof *r);
    r->s = *s;
    if (!(skew >= 0 && skew <= 4)) {
        return lares_fail(err, LARES_EINVAL, "synth: route skew %g is not in [0, 4]", skew);
    }
    if (!(overlap > 0 && overlap < 1)) {
        return lares_fail(err, LARES_EINVAL, "synth: route overlap %g is not in (0, 1)", overlap);
    }
    const int32_t dims = LARES_MIN(ROUTE_DIMS, (s->n_embd - 1 - TOKEN_DIMS) / s->n_layer);
    if (dims < 2 || s->head_dim < 2 * (SYNTH_ROUTE_BAND + 2) || s->n_expert > 512 ||
        s->n_expert_used >= s->n_expert) {
        return lares_fail(err, LARES_EINVAL,
                          "synth: realistic routing needs 2 residual dimensions per layer and "
                          "head_dim >= %d (%d layers of width %d, head_dim %d); use --routing "
                          "random",
                          2 * (SYNTH_ROUTE_BAND + 2), s->n_layer, s->n_embd, s->head_dim);
    }
    r->dims = dims;
    r->bias_dim = s->n_embd - 1;
    r->token0 = s->n_layer * dims;
    const size_t L = (size_t)s->n_layer, E = (size_t)s->n_expert, D = (size_t)dims,
                 hd = (size_t)s->head_dim;
    r->router = lares_alloc_array(L * E * D, sizeof(float));
    r->bias = lares_alloc_array(L * E, sizeof(float));
    r->mix = lares_alloc_array(L * D * hd, sizeof(float));
    sim m = {.dims = dims, .n_expert = s->n_expert, .k = s->n_expert_used};
    m.u = lares_alloc_array((size_t)SIM_SEQ * SIM_T * D, sizeof(float));
    m.x = lares_alloc_array((size_t)SIM_SEQ * SIM_T * D, sizeof(float));
    m.sel = lares_alloc_array((size_t)SIM_SEQ * SIM_T * (size_t)m.k, sizeof(int32_t));
    m.freq = lares_alloc_array(E, sizeof(double));
    double *target = lares_alloc_array(E, sizeof(double));
    int32_t *rank_of = lares_alloc_array(E, sizeof(int32_t));
    lares_status st = LARES_OK;
    if (r->router == NULL || r->bias == NULL || r->mix == NULL || m.u == NULL || m.x == NULL ||
        m.sel == NULL || m.freq == NULL || target == NULL || rank_of == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "synth: out of memory for the routing plan");
        goto done;
    }
    const uint64_t key = synth_mix64(seed ^ 0x726f7574696e67u); /* "routing" */
    for (size_t i = 0; i < L * E * D; i++) {
        r->router[i] = (float)(gauss(key + 3 * i) / sqrt((double)D));
    }
    for (size_t i = 0; i < L * D * hd; i++) {
        r->mix[i] = (float)gauss(key + 3 * i + 1);
    }
    for (size_t l = 0; l < L; l++) { /* values have unit spread (see ATTN_V below) */
        gram_schmidt(r->mix + l * D * hd, dims, (int32_t)hd);
    }
    for (size_t i = 0; i < (size_t)SIM_SEQ * SIM_T * D; i++) {
        m.u[i] = (float)gauss(key + 3 * i + 2 + 0x10000000u);
    }
    /* the kernel width: overlap grows with it (bisection on its log) */
    double lo = log(0.3), hi = log(2000.0);
    for (int it = 0; it < SIM_BISECT; it++) {
        const double mid = 0.5 * (lo + hi);
        set_kernel(r, exp(mid));
        sim_summaries(r, &m);
        for (int32_t e = 0; e < s->n_expert; e++) {
            rank_of[e] = e;
        }
        zipf_targets(s->n_expert, s->n_expert_used, skew, rank_of, target);
        if (fit_bias(&m, r->router, target, r->bias) < overlap) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    set_kernel(r, exp(0.5 * (lo + hi)));
    sim_summaries(r, &m);
    for (size_t l = 0; l < L; l++) {
        /* which expert is the r-th most popular: a permutation per layer */
        for (size_t e = 0; e < E; e++) {
            rank_of[e] = (int32_t)e;
        }
        for (size_t e = E - 1; e > 0; e--) {
            const size_t j = synth_mix64(key ^ (l * 7919 + e)) % (e + 1);
            const int32_t t = rank_of[e];
            rank_of[e] = rank_of[j];
            rank_of[j] = t;
        }
        zipf_targets(s->n_expert, s->n_expert_used, skew, rank_of, target);
        const double ov = fit_bias(&m, r->router + l * E * D, target, r->bias + l * E);
        if (l == 0) {
            r->sim_overlap = ov;
            r->sim_top_share = top_share(&m);
        }
    }
done:
    lares_free(m.u);
    lares_free(m.x);
    lares_free(m.sel);
    lares_free(m.freq);
    lares_free(target);
    lares_free(rank_of);
    if (st != LARES_OK) {
        synth_routing_free(r);
    }
    return st;
}

void synth_routing_free(synth_routing *r) {
    lares_free(r->router);
    lares_free(r->bias);
    lares_free(r->mix);
    r->router = r->bias = r->mix = NULL;
}

static void zero(float *v, int64_t n) {
    memset(v, 0, (size_t)n * sizeof *v);
}

/* the residual dimensions the routing owns: every layer's summary, the
 * token dimensions, the constant */
static bool owned_dim(const synth_routing *r, int64_t d) {
    return d < (int64_t)r->token0 + TOKEN_DIMS || d == r->bias_dim;
}

void synth_routing_shape_row(const synth_routing *r, synth_role role, int32_t layer, int64_t row,
                             float *v, int64_t n) {
    const int64_t hd = r->s.head_dim, half = hd / 2, D = r->dims, E = r->s.n_expert;
    const float unit = route_gain / route_c; /* q, k weights: gain x amplitude / C */
    switch (role) {
    case SYNTH_ROLE_EMBD:
        for (int64_t d = 0; d < (int64_t)r->token0 && d < n; d++) {
            v[d] = 0;
        }
        for (int64_t d = r->token0; d < (int64_t)r->token0 + TOKEN_DIMS && d < n; d++) {
            v[d] *= token_std / 0.02f;
        }
        v[r->bias_dim] = route_c;
        break;
    case SYNTH_ROLE_ATTN_Q:
        if (row < hd) { /* query head 0: the constant, on the band and pair 0 */
            zero(v, n);
            if (row >= r->band0 && row < r->band0 + SYNTH_ROUTE_BAND) {
                v[r->bias_dim] = unit * r->q_band;
            } else if (row == 0) {
                v[r->bias_dim] = unit * r->q_dead;
            }
        }
        break;
    case SYNTH_ROLE_ATTN_K:
        if (row < hd) { /* KV head 0: the constant, on the band */
            zero(v, n);
            if (row >= r->band0 && row < r->band0 + SYNTH_ROUTE_BAND) {
                v[r->bias_dim] = unit * r->k_band;
            }
        }
        (void)half;
        break;
    case SYNTH_ROLE_ATTN_V:
        if (row < hd) { /* KV head 0's values: the token dimensions alone, unit spread
                         * (the norm makes them about sqrt(n / TOKEN_DIMS) each) */
            const float scale = (float)(1.0 / (0.02 * sqrt((double)n)));
            for (int64_t d = 0; d < n; d++) {
                v[d] = d >= r->token0 && d < r->token0 + TOKEN_DIMS ? v[d] * scale : 0.0f;
            }
        }
        break;
    case SYNTH_ROLE_ATTN_OUT:
        if (owned_dim(r, row)) {
            zero(v, n);
            const int64_t j = row - (int64_t)layer * D;
            if (row != r->bias_dim && j >= 0 && j < D) { /* this layer's summary: head 0 */
                memcpy(v, r->mix + ((size_t)layer * (size_t)D + (size_t)j) * (size_t)hd,
                       (size_t)hd * sizeof *v);
            }
        }
        break;
    case SYNTH_ROLE_FFN_DOWN:
        if (owned_dim(r, row % r->s.n_embd)) {
            zero(v, n);
        }
        break;
    case SYNTH_ROLE_ROUTER:
        if (row < E) {
            zero(v, n);
            const float *w = r->router + ((size_t)layer * (size_t)E + (size_t)row) * (size_t)D;
            for (int64_t j = 0; j < D; j++) {
                v[(int64_t)layer * D + j] = w[j];
            }
            v[r->bias_dim] = r->bias[(size_t)layer * (size_t)E + (size_t)row] / route_c;
        }
        break;
    case SYNTH_ROLE_PLAIN:
    case SYNTH_ROLE_NORM:
    case SYNTH_ROLE_OUTPUT:
        break;
    }
}
