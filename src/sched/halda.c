/*
 * Halda (scheduling.md; prima.cpp, Li et al. 2025): the assignment of layer
 * windows to devices that minimises the predicted token latency.
 *
 *   for every k dividing L (with at least one layer per device and round):
 *     start each device's memory case from the memory-proportional split,
 *     repeat: make the cases feasible, solve the ILP (ilp.c), re-assign the
 *     cases from the solution -- until the cases stop changing (or repeat);
 *   keep the best k (judged by the latency model, layer by layer);
 *   calibration: while some GPU could take another layer and some device
 *     overflows its RAM, force the overflowing device with the slowest disk
 *     into the "fits" case and solve again (kept when it predicts faster);
 *   drop devices whose window is a single layer and solve again on the rest
 *     (kept when it predicts no slower).
 *
 * Additions: the ring order of each device set is the one with the cheapest
 * hops (all orders are tried up to 8 devices; the head stays first) unless
 * the caller keeps its order; single-device case flips after the fixed point;
 * the drop step also tries devices with bigger windows; and when no head is
 * given, the devices a first plan keeps are each tried as the head.
 */
#include "sched/sched_impl.h"

#include <math.h>

typedef struct halda {
    const sched_costs *c;
    size_t head;
    bool *active;     /* n: devices still offered */
    bool *forced_fit; /* n: pinned to the "fits" case by calibration */
    int32_t ilp_solved;
    lares_error last; /* why the last attempt failed (for the final message) */
} halda;

static bool better(const sched_plan *a, const sched_plan *b) {
    return b == NULL || a->t_token_s < b->t_token_s * (1 - 1e-12);
}

static void keep_best(sched_plan **best, sched_plan *cand) {
    if (better(cand, *best)) {
        sched_plan_free(*best);
        *best = cand;
    } else {
        sched_plan_free(cand);
    }
}

/* ---- the ring order ---- */

static bool next_perm(size_t *a, size_t n) {
    if (n < 2) {
        return false;
    }
    size_t i = n - 1;
    while (i > 0 && a[i - 1] >= a[i]) {
        i--;
    }
    if (i == 0) {
        return false;
    }
    size_t j = n - 1;
    while (a[j] <= a[i - 1]) {
        j--;
    }
    size_t t = a[i - 1];
    a[i - 1] = a[j];
    a[j] = t;
    for (size_t l = i, r = n - 1; l < r; l++, r--) {
        t = a[l];
        a[l] = a[r];
        a[r] = t;
    }
    return true;
}

/* ring[0] = head, the rest in the order with the cheapest laps; *hops_s its cost */
static lares_status order_ring(halda *h, size_t *ring, size_t M, double *hops_s, lares_error *err) {
    const sched_costs *c = h->c;
    *hops_s = 0;
    if (M == 1) {
        return LARES_OK;
    }
    double *hop = lares_calloc(M * M, sizeof *hop);
    size_t *perm = lares_calloc(M, sizeof *perm);
    size_t *best = lares_calloc(M, sizeof *best);
    lares_status st = LARES_OK;
    if (hop == NULL || perm == NULL || best == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < M; i++) {
        for (size_t j = 0; j < M; j++) {
            hop[i * M + j] = NAN;
            if (i != j && sched_hop_s(c, ring[i], ring[j], &hop[i * M + j], NULL) != LARES_OK) {
                hop[i * M + j] = NAN;
            }
        }
        perm[i] = i;
        best[i] = i;
    }
    double best_cost = INFINITY;
    const bool search = M <= 8 && !c->o->keep_order;
    do {
        double cost = 0;
        for (size_t i = 0; i < M; i++) {
            cost += hop[perm[i] * M + perm[(i + 1) % M]];
        }
        if (cost < best_cost) { /* NaN (an unknown hop) never wins */
            best_cost = cost;
            memcpy(best, perm, M * sizeof *perm);
        }
    } while (search && next_perm(perm + 1, M - 1));
    if (!isfinite(best_cost)) {
        /* no order has every hop known: report the first unknown hop of the given one */
        for (size_t i = 0; i < M; i++) {
            double t;
            if ((st = sched_hop_s(c, ring[i], ring[(i + 1) % M], &t, err)) != LARES_OK) {
                goto done;
            }
        }
    }
    for (size_t i = 0; i < M; i++) {
        perm[i] = ring[best[i]];
    }
    memcpy(ring, perm, M * sizeof *ring);
    *hops_s = best_cost;
done:
    lares_free(hop);
    lares_free(perm);
    lares_free(best);
    return st;
}

/* ---- memory cases ---- */

/* Makes the cases of the ring feasible at k (each device's window range
 * non-empty, the ranges able to sum to W); false when no flip helps. */
static bool repair_cases(const halda *h, const sched_ilp_dev *d, size_t M, int32_t k, bool *over) {
    const sched_costs *c = h->c;
    const int32_t W = c->L / k;
    for (size_t round = 0; round < 4 * M + 4; round++) {
        int64_t sum_lo = 0, sum_hi = 0;
        bool flipped = false;
        for (size_t i = 0; i < M && !flipped; i++) {
            sched_wrange r = sched_range_of(c, d[i].device, h->head, k, over[i]);
            if (r.lo > r.hi) {
                bool to = !over[i];
                if (to && h->forced_fit[d[i].device]) {
                    return false;
                }
                sched_wrange o = sched_range_of(c, d[i].device, h->head, k, to);
                if (o.lo > o.hi) {
                    return false;
                }
                over[i] = to;
                flipped = true;
            }
            sum_lo += r.lo;
            sum_hi += r.hi;
        }
        if (flipped) {
            continue;
        }
        if (sum_lo > W) { /* overflowing devices are forced to take too much */
            size_t pick = M;
            int32_t pick_lo = 0;
            for (size_t i = 0; i < M; i++) {
                sched_wrange r = sched_range_of(c, d[i].device, h->head, k, over[i]);
                sched_wrange f = sched_range_of(c, d[i].device, h->head, k, false);
                if (over[i] && f.lo <= f.hi && r.lo > pick_lo) {
                    pick = i;
                    pick_lo = r.lo;
                }
            }
            if (pick == M) {
                return false;
            }
            over[pick] = false;
        } else if (sum_hi < W) { /* the fitting devices cannot hold a round */
            size_t pick = M;
            for (size_t i = 0; i < M; i++) {
                sched_wrange o = sched_range_of(c, d[i].device, h->head, k, true);
                if (!over[i] && !h->forced_fit[d[i].device] && o.lo <= o.hi &&
                    (pick == M || c->disk_Bps[d[i].device] > c->disk_Bps[d[pick].device])) {
                    pick = i;
                }
            }
            if (pick == M) {
                return false;
            }
            over[pick] = true;
        } else {
            return true;
        }
    }
    return false;
}

/* The case a solution puts each device in (the ILP's own test, by layers). */
static void cases_of(const halda *h, const sched_ilp_dev *d, size_t M, int32_t k, bool *over) {
    for (size_t i = 0; i < M; i++) {
        sched_wrange r = sched_range_of(h->c, d[i].device, h->head, k, false);
        int32_t ram_layers = sched_unified(&h->c->devs[d[i].device]) ? d[i].w : d[i].w - d[i].n;
        over[i] = ram_layers > r.F;
    }
}

/* Cases of the memory-proportional split of one round of W layers. */
static void initial_cases(const halda *h, const sched_ilp_dev *d, size_t M, int32_t k, bool *over,
                          double *weight, int32_t *w) {
    const sched_costs *c = h->c;
    for (size_t i = 0; i < M; i++) {
        const sched_device *dv = &c->devs[d[i].device];
        weight[i] = (double)sched_ram_of(c, d[i].device, h->head) +
                    (dv->gpu == SCHED_GPU_CUDA ? (double)c->vram_limit[d[i].device] : 0.0);
    }
    sched_split_proportional(weight, M, c->L / k, w);
    for (size_t i = 0; i < M; i++) {
        sched_wrange r = sched_range_of(c, d[i].device, h->head, k, false);
        int32_t n = LARES_MIN(w[i], r.nmax);
        int32_t ram_layers = sched_unified(&c->devs[d[i].device]) ? w[i] : w[i] - n;
        over[i] = ram_layers > r.F && !h->forced_fit[d[i].device];
    }
}

static lares_status plan_of(const halda *h, const sched_ilp *ilp, sched_plan **out,
                            lares_error *err) {
    sched_plan *p;
    lares_status st = sched_plan_alloc(ilp->n, h->c->n, &p, err);
    if (st != LARES_OK) {
        return st;
    }
    p->placement = SCHED_HALDA;
    p->k = ilp->k;
    p->head = h->head;
    for (size_t i = 0; i < ilp->n; i++) {
        p->a[i].device = ilp->d[i].device;
        p->a[i].w = ilp->d[i].w;
        p->a[i].n_gpu = ilp->d[i].n;
    }
    if ((st = sched_plan_finish(p, h->c, err)) != LARES_OK) {
        sched_plan_free(p);
        return st;
    }
    *out = p;
    return LARES_OK;
}

/* Are these cases feasible at k as they are (no flips)? */
static bool cases_feasible(const halda *h, const sched_ilp_dev *d, size_t M, int32_t k,
                           const bool *over) {
    int64_t lo = 0, hi = 0;
    for (size_t i = 0; i < M; i++) {
        if (over[i] && h->forced_fit[d[i].device]) {
            return false;
        }
        sched_wrange r = sched_range_of(h->c, d[i].device, h->head, k, over[i]);
        if (r.lo > r.hi) {
            return false;
        }
        lo += r.lo;
        hi += r.hi;
    }
    return lo <= h->c->L / k && h->c->L / k <= hi;
}

/* The ILP of one case assignment, solved again with a lower GPU bound while a
 * solution's real layers overflow a GPU; *out NULL when it has no solution. */
static lares_status solve_cases(halda *h, sched_ilp *ilp, const bool *over, sched_plan **out,
                                lares_error *err) {
    const sched_costs *c = h->c;
    *out = NULL;
    for (size_t trims = 0; trims <= 4 * ilp->n; trims++) {
        for (size_t i = 0; i < ilp->n; i++) {
            ilp->d[i].overflow = over[i];
        }
        lares_status st = sched_ilp_solve(ilp, &h->last);
        h->ilp_solved++;
        if (st == LARES_ERANGE) {
            return LARES_OK;
        }
        if (st != LARES_OK) {
            if (err != NULL) {
                *err = h->last;
            }
            return st;
        }
        sched_plan *p;
        if ((st = plan_of(h, ilp, &p, err)) != LARES_OK) {
            return st;
        }
        bool trimmed = false;
        for (size_t i = 0; i < p->n; i++) {
            if (p->a[i].vram_bytes > c->vram_limit[p->a[i].device]) {
                c->gpu_trim[p->a[i].device]++;
                trimmed = true;
            }
        }
        if (!trimmed) {
            *out = p;
            return LARES_OK;
        }
        sched_plan_free(p);
    }
    return LARES_OK;
}

typedef struct kwork {
    sched_ilp_dev *d;
    bool *over, *next, *hist, *best_cases, *cand;
    double *weight;
    int32_t *w;
} kwork;

/* One k: the case assignment iterated to a fixed point from the memory-
 * proportional split, then single-device case flips while one helps (the
 * fixed point can sit at a boundary: a device whose share would fit if it took
 * one layer less stays "overflowing" because that case requires overflow). */
static lares_status solve_k(halda *h, kwork *kw, size_t M, int32_t k, double hops_s,
                            sched_plan **out, lares_error *err) {
    const sched_costs *c = h->c;
    const int iters = c->o->max_case_iters > 0 ? c->o->max_case_iters : 16;
    sched_ilp ilp = {.c = c, .k = k, .head = h->head, .n = M, .d = kw->d, .hops_s = hops_s};
    sched_plan *best = NULL;
    lares_status st = LARES_OK;
    memset(c->gpu_trim, 0, c->n * sizeof *c->gpu_trim);
    initial_cases(h, kw->d, M, k, kw->over, kw->weight, kw->w);
    for (int it = 0; it < iters; it++) {
        if (!repair_cases(h, kw->d, M, k, kw->over)) {
            lares_fail(&h->last, LARES_ERANGE, "no feasible memory cases at k=%d", k);
            break;
        }
        memcpy(kw->hist + (size_t)it * M, kw->over, M * sizeof *kw->over);
        sched_plan *p;
        if ((st = solve_cases(h, &ilp, kw->over, &p, err)) != LARES_OK) {
            goto fail;
        }
        if (p == NULL) {
            break;
        }
        if (better(p, best)) {
            memcpy(kw->best_cases, kw->over, M * sizeof *kw->over);
        }
        keep_best(&best, p);
        cases_of(h, kw->d, M, k, kw->next);
        bool seen = false;
        for (int q = 0; q <= it && !seen; q++) {
            seen = memcmp(kw->hist + (size_t)q * M, kw->next, M * sizeof *kw->next) == 0;
        }
        if (seen) { /* a fixed point, or a cycle of case assignments */
            break;
        }
        memcpy(kw->over, kw->next, M * sizeof *kw->over);
    }
    for (bool improved = best != NULL; improved;) {
        improved = false;
        for (size_t i = 0; i < M; i++) {
            memcpy(kw->cand, kw->best_cases, M * sizeof *kw->cand);
            kw->cand[i] = !kw->cand[i];
            if (!cases_feasible(h, kw->d, M, k, kw->cand)) {
                continue;
            }
            sched_plan *p;
            if ((st = solve_cases(h, &ilp, kw->cand, &p, err)) != LARES_OK) {
                goto fail;
            }
            if (p != NULL && better(p, best)) {
                memcpy(kw->best_cases, kw->cand, M * sizeof *kw->cand);
                improved = true;
            }
            if (p != NULL) {
                keep_best(&best, p);
            }
        }
    }
    *out = best;
    return LARES_OK;
fail:
    sched_plan_free(best);
    return st;
}

/* Every k over the active devices; *out NULL when none is feasible. */
static lares_status solve_set(halda *h, sched_plan **out, lares_error *err) {
    const sched_costs *c = h->c;
    const int32_t L = c->L;
    const int iters = c->o->max_case_iters > 0 ? c->o->max_case_iters : 16;
    size_t M = 0;
    for (size_t i = 0; i < c->n; i++) {
        M += h->active[i];
    }
    *out = NULL;
    size_t *ring = lares_calloc(M, sizeof *ring);
    kwork kw = {
        .d = lares_calloc(M, sizeof *kw.d),
        .over = lares_calloc(M, sizeof *kw.over),
        .next = lares_calloc(M, sizeof *kw.next),
        .hist = lares_calloc((size_t)iters * M, sizeof *kw.hist),
        .best_cases = lares_calloc(M, sizeof *kw.best_cases),
        .cand = lares_calloc(M, sizeof *kw.cand),
        .weight = lares_calloc(M, sizeof *kw.weight),
        .w = lares_calloc(M, sizeof *kw.w),
    };
    lares_status st = LARES_OK;
    sched_plan *best = NULL;
    if (!ring || !kw.d || !kw.over || !kw.next || !kw.hist || !kw.best_cases || !kw.cand ||
        !kw.weight || !kw.w) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto done;
    }
    size_t j = 0;
    ring[j++] = h->head;
    for (size_t i = 0; i < c->n; i++) {
        if (h->active[i] && i != h->head) {
            ring[j++] = i;
        }
    }
    double hops_s;
    if ((st = order_ring(h, ring, M, &hops_s, err)) != LARES_OK) {
        goto done;
    }
    for (size_t i = 0; i < M; i++) {
        kw.d[i].device = ring[i];
    }
    for (int32_t k = 1; k <= L; k++) {
        if (L % k != 0 || L / k < (int32_t)M || (c->o->rounds > 0 && k != c->o->rounds)) {
            continue;
        }
        sched_plan *p;
        if ((st = solve_k(h, &kw, M, k, hops_s, &p, err)) != LARES_OK) {
            goto done;
        }
        if (p != NULL) {
            keep_best(&best, p);
        }
    }
    *out = best;
    best = NULL;
done:
    sched_plan_free(best);
    lares_free(ring);
    lares_free(kw.d);
    lares_free(kw.over);
    lares_free(kw.next);
    lares_free(kw.hist);
    lares_free(kw.best_cases);
    lares_free(kw.cand);
    lares_free(kw.weight);
    lares_free(kw.w);
    return st;
}

/* solve_set, then the GPU calibration step */
static lares_status solve_calibrated(halda *h, sched_plan **out, lares_error *err) {
    const sched_costs *c = h->c;
    sched_plan *best;
    *out = NULL; /* also when a solve of the calibration loop fails */
    lares_status st = solve_set(h, &best, err);
    if (st != LARES_OK || best == NULL || !c->o->calibrate_gpu) {
        *out = best;
        return st;
    }
    for (;;) {
        bool gpu_room = false;
        size_t slow = c->n;
        for (size_t i = 0; i < best->n; i++) {
            const sched_assign *a = &best->a[i];
            const sched_device *dv = &c->devs[a->device];
            if (dv->gpu != SCHED_GPU_NONE && a->n_gpu < a->w &&
                (double)a->vram_bytes + best->k * c->avg_bp <= (double)c->vram_limit[a->device]) {
                gpu_room = true;
            }
            if (a->mem_case != SCHED_CASE_FITS && !h->forced_fit[a->device] &&
                (slow == c->n || c->disk_Bps[a->device] < c->disk_Bps[slow])) {
                slow = a->device;
            }
        }
        if (!gpu_room || slow == c->n) {
            break;
        }
        h->forced_fit[slow] = true;
        sched_plan *cand;
        if ((st = solve_set(h, &cand, err)) != LARES_OK) {
            sched_plan_free(best);
            return st;
        }
        if (cand != NULL && better(cand, best)) {
            sched_plan_free(best);
            best = cand;
        } else {
            sched_plan_free(cand);
            h->forced_fit[slow] = false;
            break;
        }
    }
    *out = best;
    return LARES_OK;
}

/* The best plan without one of the devices in `from` (those with a window of
 * at most max_w layers, the head excepted); *pick NULL when none is feasible. */
static lares_status best_drop(halda *h, const sched_plan *from, int32_t max_w, sched_plan **pick,
                              size_t *pick_dev, lares_error *err) {
    *pick = NULL;
    *pick_dev = h->c->n;
    for (size_t i = 0; i < from->n; i++) {
        size_t dev = from->a[i].device;
        if (from->a[i].w > max_w || dev == h->head) {
            continue;
        }
        h->active[dev] = false;
        sched_plan *cand;
        lares_status st = solve_calibrated(h, &cand, err);
        h->active[dev] = true;
        if (st != LARES_OK) {
            sched_plan_free(*pick);
            *pick = NULL;
            return st;
        }
        if (cand != NULL && better(cand, *pick)) {
            sched_plan_free(*pick);
            *pick = cand;
            *pick_dev = dev;
        } else {
            sched_plan_free(cand);
        }
    }
    return LARES_OK;
}

/* Halda with a fixed head over the devices marked active, then the drop step.
 * As scheduling.md has it: of the devices whose window is a single layer, the
 * one whose removal the model likes best goes and the rest is solved again,
 * while that predicts no slower -- one at a time, since dropping all of them
 * together can throw out one that was worth its hop. Then (an addition) any
 * other device goes the same way while that predicts faster: a device with a
 * big window can still cost more in hops than it saves, up to the point where
 * the head alone is best (small models on slow networks). That second search
 * is limited to rings of at most 8 devices. */
static lares_status halda_with_head(halda *h, sched_plan **out, lares_error *err) {
    const sched_costs *c = h->c;
    sched_plan *best = NULL;
    lares_status st = solve_calibrated(h, &best, err);
    if (st != LARES_OK || best == NULL) {
        *out = best;
        return st;
    }
    for (int phase = 0; phase < 2 && c->o->drop_small; phase++) {
        while (best->n > 1 && (phase == 0 || best->n <= 8)) {
            sched_plan *pick;
            size_t pick_dev;
            if ((st = best_drop(h, best, phase == 0 ? 1 : INT32_MAX, &pick, &pick_dev, err))) {
                sched_plan_free(best);
                return st;
            }
            bool take =
                pick != NULL && (phase == 0 ? pick->t_token_s <= best->t_token_s * (1 + 1e-12)
                                            : better(pick, best));
            if (!take) {
                sched_plan_free(pick);
                break;
            }
            h->active[pick_dev] = false;
            sched_plan_free(best);
            best = pick;
        }
    }
    *out = best;
    return LARES_OK;
}

/* Can device d hold one layer at all (one round, the better case)? */
static bool can_hold_a_layer(const sched_costs *c, size_t d, size_t head) {
    sched_wrange f = sched_range_of(c, d, head, 1, false);
    sched_wrange o = sched_range_of(c, d, head, 1, true);
    return (f.lo <= f.hi && f.hi >= 1) || (o.lo <= o.hi && o.hi >= 1);
}

static lares_status infeasible(const sched_costs *c, size_t head, lares_error *err) {
    double need = 0, have = 0;
    char b1[32], b2[32];
    for (int32_t l = 0; l < c->L; l++) {
        need += (double)c->bp[l];
    }
    for (size_t d = 0; d < c->n; d++) {
        sched_wrange f = sched_range_of(c, d, head, 1, false);
        sched_wrange o = sched_range_of(c, d, head, 1, true);
        int32_t most = LARES_MAX(f.lo <= f.hi ? f.hi : 0, o.lo <= o.hi ? o.hi : 0);
        have += most * c->avg_bp;
    }
    return lares_fail(err, LARES_ERANGE,
                      "these devices cannot hold this model even from disk: need %s (weights and "
                      "KV cache of %d layers at context %d), have %s",
                      lares_fmt_bytes(need, b1, sizeof b1), c->L, c->o->n_ctx,
                      lares_fmt_bytes(have, b2, sizeof b2));
}

/* Halda with head hd over every device that can hold a layer; *p NULL when
 * nothing is feasible. */
static lares_status run_head(halda *h, size_t hd, bool pinned, sched_plan **p, lares_error *err) {
    const sched_costs *c = h->c;
    *p = NULL;
    h->head = hd;
    size_t M = 0;
    for (size_t i = 0; i < c->n; i++) {
        h->active[i] = can_hold_a_layer(c, i, hd);
        h->forced_fit[i] = false;
        M += h->active[i];
    }
    if (!h->active[hd]) {
        if (pinned) {
            char b[32];
            return lares_fail(err, LARES_ERANGE,
                              "the head '%s' cannot hold a single layer besides the output "
                              "matrix (%s of RAM to give)",
                              c->devs[hd].name,
                              lares_fmt_bytes((double)sched_ram_of(c, hd, hd), b, sizeof b));
        }
        return LARES_OK;
    }
    /* more devices than layers: keep the head and the fastest others */
    while (M > (size_t)c->L) {
        size_t slow = c->n;
        for (size_t i = 0; i < c->n; i++) {
            if (h->active[i] && i != hd && (slow == c->n || c->avg_tc[i] > c->avg_tc[slow])) {
                slow = i;
            }
        }
        h->active[slow] = false;
        M--;
    }
    return halda_with_head(h, p, err);
}

lares_status sched_halda(const sched_costs *c, size_t head, sched_plan **out, lares_error *err) {
    halda h = {.c = c};
    h.active = lares_calloc(c->n, sizeof *h.active);
    h.forced_fit = lares_calloc(c->n, sizeof *h.forced_fit);
    bool *tried = lares_calloc(c->n, sizeof *tried);
    lares_status st = LARES_OK;
    sched_plan *best = NULL, *p = NULL;
    if (h.active == NULL || h.forced_fit == NULL || tried == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto done;
    }
    if (head != SIZE_MAX) {
        st = run_head(&h, head, true, &best, err);
    } else {
        /* No head given: Halda in full with the device of most memory as the
         * head; then each other device that plan keeps tries the head's part
         * over the same devices (the head reserves RAM for the output matrix
         * and runs it), without a new drop search. */
        size_t h0 = 0;
        for (size_t i = 1; i < c->n; i++) {
            if ((double)c->ram_limit[i] + (double)c->vram_limit[i] >
                (double)c->ram_limit[h0] + (double)c->vram_limit[h0]) {
                h0 = i;
            }
        }
        if ((st = run_head(&h, h0, false, &best, err)) != LARES_OK) {
            goto done;
        }
        for (size_t i = 0; best != NULL && i < best->n; i++) {
            tried[best->a[i].device] = true; /* the kept set */
        }
        for (size_t hd = 0; hd < c->n; hd++) {
            if (!tried[hd] || hd == h0) {
                continue;
            }
            h.head = hd;
            for (size_t i = 0; i < c->n; i++) {
                h.active[i] = tried[i] && can_hold_a_layer(c, i, hd);
                h.forced_fit[i] = false;
            }
            if (!h.active[hd]) {
                continue;
            }
            if ((st = solve_calibrated(&h, &p, err)) != LARES_OK) {
                goto done;
            }
            if (p != NULL) {
                keep_best(&best, p);
                p = NULL;
            }
        }
    }
    if (st != LARES_OK) {
        goto done;
    }
    if (best == NULL) {
        st = infeasible(c, head == SIZE_MAX ? 0 : head, err);
        goto done;
    }
    best->ilp_solved = h.ilp_solved;
    *out = best;
    best = NULL;
done:
    sched_plan_free(best);
    sched_plan_free(p);
    lares_free(h.active);
    lares_free(h.forced_fit);
    lares_free(tried);
    return st;
}
