/*
 * The placements Halda is compared with, judged by the same latency model:
 *   even   -- L / M layers per device, one round (LinguaLinked's baseline);
 *   memory -- layers in proportion to the memory each device can give (RAM,
 *             plus VRAM of a discrete GPU), one round (exo, llama.cpp RPC);
 *   single -- every layer on one device, the one the model predicts fastest
 *             (llama.cpp on the best machine).
 * Each device puts as many of its layers on its GPU as its VRAM holds, as those
 * engines do when told to offload.
 */
#include "sched/sched_impl.h"

#include <math.h>

void sched_split_proportional(const double *weight, size_t n, int32_t total, int32_t *out) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += weight[i] > 0 ? weight[i] : 0;
    }
    int32_t given = 0;
    for (size_t i = 0; i < n; i++) {
        double share =
            sum > 0 ? total * (weight[i] > 0 ? weight[i] : 0) / sum : (double)total / (double)n;
        out[i] = LARES_MAX(1, (int32_t)floor(share));
        given += out[i];
    }
    /* largest remainders first; then take back from the largest shares when the
     * minimum of one layer each gave out too many */
    while (given < total) {
        size_t best = 0;
        double best_rem = -1e300;
        for (size_t i = 0; i < n; i++) {
            double share =
                sum > 0 ? total * (weight[i] > 0 ? weight[i] : 0) / sum : (double)total / (double)n;
            double rem = share - out[i];
            if (rem > best_rem) {
                best_rem = rem;
                best = i;
            }
        }
        out[best]++;
        given++;
    }
    while (given > total) {
        size_t big = 0;
        for (size_t i = 1; i < n; i++) {
            if (out[i] > out[big]) {
                big = i;
            }
        }
        if (out[big] <= 1) {
            break;
        }
        out[big]--;
        given--;
    }
}

/* The ring order of the baselines: the given order with the head moved first. */
static void given_order(const sched_costs *c, size_t head, size_t *ring) {
    size_t j = 0;
    ring[j++] = head;
    for (size_t i = 0; i < c->n; i++) {
        if (i != head) {
            ring[j++] = i;
        }
    }
}

static lares_status make_plan(const sched_costs *c, sched_placement pl, size_t head,
                              const size_t *ring, const int32_t *w, size_t n, sched_plan **out,
                              lares_error *err) {
    sched_plan *p;
    lares_status st = sched_plan_alloc(n, c->n, &p, err);
    if (st != LARES_OK) {
        return st;
    }
    p->placement = pl;
    p->k = 1;
    p->head = head;
    for (size_t i = 0; i < n; i++) {
        sched_wrange r = sched_range_of(c, ring[i], head, 1, false);
        p->a[i].device = ring[i];
        p->a[i].w = w[i];
        p->a[i].n_gpu = LARES_MIN(w[i], r.nmax);
    }
    if ((st = sched_plan_finish(p, c, err)) != LARES_OK) {
        sched_plan_free(p);
        return st;
    }
    /* the mean layer said they fit; the real ones may not: one fewer until they do */
    for (bool again = true; again;) {
        again = false;
        for (size_t i = 0; i < n; i++) {
            if (p->a[i].vram_bytes > c->vram_limit[p->a[i].device] && p->a[i].n_gpu > 0) {
                p->a[i].n_gpu--;
                again = true;
            }
        }
        if (again && (st = sched_evaluate_costs(p, c, err)) != LARES_OK) {
            sched_plan_free(p);
            return st;
        }
    }
    if ((st = sched_validate_costs(p, c, err)) != LARES_OK) {
        sched_plan_free(p);
        return st;
    }
    *out = p;
    return LARES_OK;
}

lares_status sched_baseline(const sched_costs *c, sched_placement pl, size_t head, sched_plan **out,
                            lares_error *err) {
    const size_t n = c->n;
    lares_status st = LARES_OK;
    if (pl == SCHED_SINGLE) {
        sched_plan *best = NULL;
        lares_error last = {0};
        for (size_t d = 0; d < n; d++) {
            sched_plan *p;
            int32_t w = c->L;
            if (make_plan(c, pl, d, &d, &w, 1, &p, &last) != LARES_OK) {
                continue;
            }
            if (best == NULL || p->t_token_s < best->t_token_s) {
                sched_plan_free(best);
                best = p;
            } else {
                sched_plan_free(p);
            }
        }
        if (best == NULL) {
            return lares_fail(err, last.code ? last.code : LARES_ERANGE,
                              "no single device can run the model: %s", last.msg);
        }
        *out = best;
        return LARES_OK;
    }
    if ((size_t)c->L < n) {
        return lares_fail(err, LARES_ERANGE, "%s split: %zu devices for %d layers",
                          sched_placement_name(pl), n, c->L);
    }
    size_t *ring = lares_calloc(n, sizeof *ring);
    int32_t *w = lares_calloc(n, sizeof *w);
    double *weight = lares_calloc(n, sizeof *weight);
    if (ring == NULL || w == NULL || weight == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto done;
    }
    given_order(c, head, ring);
    for (size_t i = 0; i < n; i++) {
        const sched_device *d = &c->devs[ring[i]];
        if (pl == SCHED_EVEN) {
            weight[i] = 1.0;
        } else {
            weight[i] = (double)c->ram_limit[ring[i]] +
                        (d->gpu == SCHED_GPU_CUDA ? (double)c->vram_limit[ring[i]] : 0.0);
        }
    }
    sched_split_proportional(weight, n, c->L, w);
    st = make_plan(c, pl, head, ring, w, n, out, err);
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s split: ", sched_placement_name(pl));
    }
done:
    lares_free(ring);
    lares_free(w);
    lares_free(weight);
    return st;
}
