/*
 * The statistics of perplexity and KL divergence, pure functions: the
 * conventions are the reference engine's (llama-perplexity), so figures can be
 * set side by side; the code is ours.
 */
#include "api/score.h"

#include <math.h>

void score_acc_add(score_acc *a, double x) {
    a->sum += x;
    a->sum2 += x * x;
    a->n++;
}

double score_acc_mean(const score_acc *a) {
    return a->n > 0 ? a->sum / (double)a->n : 0;
}

double score_acc_err(const score_acc *a) {
    if (a->n < 2) {
        return 0;
    }
    const double m = a->sum / (double)a->n;
    const double var = a->sum2 / (double)a->n - m * m;
    return var > 0 ? sqrt(var / (double)(a->n - 1)) : 0;
}

int32_t score_log_softmax(const float *logits, int32_t n_vocab, float *lp) {
    int32_t top = 0;
    for (int32_t i = 1; i < n_vocab; i++) {
        if (logits[i] > logits[top]) {
            top = i;
        }
    }
    const double mx = logits[top];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        sum += exp((double)logits[i] - mx);
    }
    const double lse = mx + log(sum);
    for (int32_t i = 0; i < n_vocab; i++) {
        lp[i] = (float)((double)logits[i] - lse);
    }
    return top;
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t top = 0;
    for (int32_t i = 1; i < n; i++) {
        if (v[i] > v[top]) {
            top = i;
        }
    }
    return top;
}

void score_kld(const float *lp_base, const float *lp, int32_t n_vocab, int32_t token,
               score_kld_row *out) {
    double kld = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const double b = lp_base[i];
        kld += exp(b) * (b - (double)lp[i]);
    }
    out->kld = kld;
    out->same_top = argmax(lp_base, n_vocab) == argmax(lp, n_vocab);
    out->dp = exp((double)lp[token]) - exp((double)lp_base[token]);
    out->base_nll = -(double)lp_base[token];
}

double score_quantile(const float *sorted, size_t n, double q) {
    if (n == 0) {
        return 0;
    }
    if (q <= 0) {
        return sorted[0];
    }
    if (q >= 1) {
        return sorted[n - 1];
    }
    const double at = q * (double)(n - 1);
    const size_t lo = (size_t)at;
    const double frac = at - (double)lo;
    if (lo + 1 >= n) {
        return sorted[n - 1];
    }
    return (1 - frac) * sorted[lo] + frac * sorted[lo + 1];
}
