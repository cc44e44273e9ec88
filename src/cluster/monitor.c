/*
 * Monitoring a ring and deciding when to re-plan (issue 9; docs/ring.md,
 * "Re-balancing"). Per device a moving estimate (exponentially weighted, the
 * newest token weighing `alpha`) of the time one layer takes per generated
 * token, against a reference: the plan's prediction, or, without one, the
 * average of the first hold_tokens tokens after the warm-up (the first tokens
 * after a plan change read freshly gained layers and are not judged).
 *
 * Hysteresis against flapping: a device must stay beyond the threshold, in the
 * same direction, for hold_tokens tokens in a row, and by min_delta_ms per
 * token at least (on small models the scheduler's noise is larger than any
 * layer). A device that alternates fast and slow keeps its moving estimate
 * near the middle, inside the band. After a re-plan (or a refused one) the
 * next may come only after the cooldown, which doubles when decisions follow
 * each other within twice of it and returns to its base after a quiet spell.
 * A device left out of a plan keeps its last estimate (cluster_monitor_ms),
 * so the planner can take it back when the others get slower than it was.
 */
#include "cluster/cluster.h"

#include <math.h>

cluster_monitor_opts cluster_monitor_opts_default(void) {
    return (cluster_monitor_opts){.threshold = 0.5,
                                  .warmup_tokens = 4,
                                  .hold_tokens = 8,
                                  .cooldown_tokens = 24,
                                  .alpha = 0.25,
                                  .min_delta_ms = 1.0,
                                  .min_gain = 0.1};
}

lares_status cluster_monitor_opts_check(const cluster_monitor_opts *o, lares_error *err) {
    if (!(o->threshold > 0 && o->threshold <= 10)) {
        return lares_fail(err, LARES_EINVAL, "rebalance threshold %g (above 0, at most 10)",
                          o->threshold);
    }
    if (o->warmup_tokens < 0 || o->warmup_tokens > 100000 || o->hold_tokens < 1 ||
        o->hold_tokens > 100000 || o->cooldown_tokens < 0 || o->cooldown_tokens > 1000000) {
        return lares_fail(err, LARES_EINVAL,
                          "rebalance tokens: warm-up %d, hold %d, cooldown %d (warm-up and "
                          "cooldown 0 or more, hold 1 or more)",
                          o->warmup_tokens, o->hold_tokens, o->cooldown_tokens);
    }
    if (!(o->alpha > 0 && o->alpha <= 1)) {
        return lares_fail(err, LARES_EINVAL, "rebalance alpha %g (above 0, at most 1)", o->alpha);
    }
    if (!(o->min_delta_ms >= 0 && o->min_delta_ms <= 1e6) ||
        !(o->min_gain >= 0 && o->min_gain < 10)) {
        return lares_fail(err, LARES_EINVAL,
                          "rebalance min_delta_ms %g (0 or more), min_gain %g (0 to 10)",
                          o->min_delta_ms, o->min_gain);
    }
    return LARES_OK;
}

static void reset_dev(cluster_monitor_dev *d) {
    d->ref_ms = d->predicted_ms;
    d->ewma_ms = -1;
    d->wait_ewma_ms = -1;
    d->warm_sum_ms = 0;
    d->samples = 0;
    d->over = 0;
    d->dir = 0;
}

void cluster_monitor_init(cluster_monitor *m, const cluster_monitor_opts *o, int32_t n_dev) {
    memset(m, 0, sizeof *m);
    m->o = o != NULL ? *o : cluster_monitor_opts_default();
    m->n_dev = LARES_MIN(LARES_MAX(n_dev, 0), CLUSTER_MAX_DEVICES);
    m->cooldown = m->o.cooldown_tokens;
    for (int32_t d = 0; d < CLUSTER_MAX_DEVICES; d++) {
        m->dev[d].predicted_ms = -1;
        m->dev[d].mem_free_mib = UINT32_MAX;
        reset_dev(&m->dev[d]);
    }
}

/* a decision (a re-plan or a refused one) at the current token: the cooldown
 * doubles when the previous one was recent, and returns to its base when not */
static void decided(cluster_monitor *m) {
    const int64_t since = m->tokens - m->plan_token;
    if (m->decisions > 0 && since < 2 * (int64_t)m->cooldown) {
        m->cooldown = (int32_t)LARES_MIN((int64_t)m->cooldown * 2, (int64_t)1 << 20);
        if (m->cooldown == 0) {
            m->cooldown = 1;
        }
    } else {
        m->cooldown = m->o.cooldown_tokens;
    }
    m->decisions++;
    m->plan_token = m->tokens;
}

void cluster_monitor_plan(cluster_monitor *m, const int32_t *layers, const double *predicted_ms,
                          bool replan) {
    if (replan) {
        decided(m);
    } else {
        m->plan_token = m->tokens;
    }
    for (int32_t d = 0; d < m->n_dev; d++) {
        cluster_monitor_dev *dv = &m->dev[d];
        dv->layers = layers[d] > 0 ? layers[d] : 0;
        dv->predicted_ms = predicted_ms != NULL && predicted_ms[d] > 0 ? predicted_ms[d] : -1;
        if (dv->layers == 0) {
            /* out of the plan: its last estimate stays, so a later re-plan
             * can weigh taking it back */
            dv->over = 0;
            dv->dir = 0;
            continue;
        }
        reset_dev(dv);
    }
}

void cluster_monitor_token(cluster_monitor *m, const double *ms_per_layer,
                           const double *wait_ms_per_layer, const uint32_t *mem_free_mib) {
    const cluster_monitor_opts *o = &m->o;
    m->tokens++;
    for (int32_t d = 0; d < m->n_dev; d++) {
        cluster_monitor_dev *dv = &m->dev[d];
        if (mem_free_mib != NULL && mem_free_mib[d] != UINT32_MAX) {
            dv->mem_free_mib = mem_free_mib[d];
        }
        const double x = ms_per_layer[d];
        if (dv->layers == 0 || !(x >= 0)) {
            continue;
        }
        const double wx =
            wait_ms_per_layer != NULL && wait_ms_per_layer[d] >= 0 ? wait_ms_per_layer[d] : 0;
        dv->samples++;
        if (dv->samples <= o->warmup_tokens) {
            continue; /* freshly gained layers, cold caches */
        }
        dv->ewma_ms = dv->ewma_ms < 0 ? x : o->alpha * x + (1 - o->alpha) * dv->ewma_ms;
        dv->wait_ewma_ms =
            dv->wait_ewma_ms < 0 ? wx : o->alpha * wx + (1 - o->alpha) * dv->wait_ewma_ms;
        if (dv->ref_ms < 0) {
            /* no prediction: the average of the first tokens is the reference */
            dv->warm_sum_ms += x;
            if (dv->samples - o->warmup_tokens >= o->hold_tokens) {
                dv->ref_ms = dv->warm_sum_ms / o->hold_tokens;
            }
            continue;
        }
        const double ratio = dv->ewma_ms / dv->ref_ms;
        const double delta = fabs(dv->ewma_ms - dv->ref_ms) * dv->layers;
        const bool beyond = delta >= o->min_delta_ms &&
                            (ratio > 1 + o->threshold || ratio < 1 / (1 + o->threshold));
        if (!beyond) {
            dv->over = 0;
            dv->dir = 0;
            continue;
        }
        const int dir = ratio > 1 ? 1 : -1;
        dv->over = dir == dv->dir ? dv->over + 1 : 1;
        dv->dir = dir;
    }
}

bool cluster_monitor_due(const cluster_monitor *m, int32_t *dev, char *why, size_t cap) {
    if (m->decisions > 0 && m->tokens - m->plan_token < m->cooldown) {
        return false;
    }
    int32_t best = -1;
    double best_dev = 0;
    for (int32_t d = 0; d < m->n_dev; d++) {
        const cluster_monitor_dev *dv = &m->dev[d];
        if (dv->layers == 0 || dv->over < m->o.hold_tokens || dv->ref_ms <= 0) {
            continue;
        }
        const double off = fabs(log(dv->ewma_ms / dv->ref_ms));
        if (best < 0 || off > best_dev) {
            best = d;
            best_dev = off;
        }
    }
    if (best < 0) {
        return false;
    }
    const cluster_monitor_dev *dv = &m->dev[best];
    if (dev != NULL) {
        *dev = best;
    }
    if (why != NULL && cap > 0) {
        const double r = dv->ewma_ms / dv->ref_ms;
        snprintf(why, cap,
                 "%.3f ms per layer per token (%.3f of it waiting for disk) against %.3f %s: "
                 "%.2fx %s for %d tokens",
                 dv->ewma_ms, dv->wait_ewma_ms > 0 ? dv->wait_ewma_ms : 0.0, dv->ref_ms,
                 dv->predicted_ms > 0 ? "predicted" : "measured after the plan", r >= 1 ? r : 1 / r,
                 r >= 1 ? "slower" : "faster", dv->over);
    }
    return true;
}

void cluster_monitor_accept(cluster_monitor *m) {
    decided(m);
    for (int32_t d = 0; d < m->n_dev; d++) {
        cluster_monitor_dev *dv = &m->dev[d];
        if (dv->ewma_ms > 0) {
            dv->ref_ms = dv->ewma_ms;
        }
        dv->over = 0;
        dv->dir = 0;
    }
}

double cluster_monitor_ms(const cluster_monitor *m, int32_t dev) {
    if (dev < 0 || dev >= m->n_dev) {
        return -1;
    }
    const cluster_monitor_dev *dv = &m->dev[dev];
    if (dv->ewma_ms > 0) {
        return dv->ewma_ms;
    }
    return dv->ref_ms > 0 ? dv->ref_ms : dv->predicted_ms;
}
