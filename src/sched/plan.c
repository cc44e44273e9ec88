/*
 * Plans: their life cycle (allocated, finished with offsets and the devices
 * left out, validated against the costs, freed), made by a placement or from
 * explicit windows (ring.json), always validated before they are handed out;
 * and the question the ring asks of a plan: which layers does this device run
 * in this round.
 */
#include "sched/sched_impl.h"

#include <glpk.h>
#include <math.h>

lares_status sched_pick_head(const sched_costs *c, size_t *head, lares_error *err) {
    const sched_opts *o = c->o;
    if (o->head >= 0) {
        if ((size_t)o->head >= c->n) {
            return lares_fail(err, LARES_EINVAL, "head device %d of %zu", o->head, c->n);
        }
        *head = (size_t)o->head;
        return LARES_OK;
    }
    size_t marked = SIZE_MAX;
    for (size_t i = 0; i < c->n; i++) {
        if (c->devs[i].head) {
            if (marked != SIZE_MAX) {
                return lares_fail(err, LARES_EINVAL, "devices '%s' and '%s' are both marked head",
                                  c->devs[marked].name, c->devs[i].name);
            }
            marked = i;
        }
    }
    *head = marked; /* SIZE_MAX: free (Halda tries each; baselines take the cheapest) */
    return LARES_OK;
}

static size_t cheapest_head(const sched_costs *c) {
    size_t best = 0;
    for (size_t i = 1; i < c->n; i++) {
        if (c->t_head[i] < c->t_head[best]) {
            best = i;
        }
    }
    return best;
}

lares_status sched_plan_make(const sched_model *m, const sched_device *devs, size_t n,
                             const sched_opts *o, sched_plan **out, lares_error *err) {
    uint64_t t0 = lares_now_ns();
    if ((unsigned)o->placement >= SCHED_PLACEMENT_COUNT) {
        return lares_fail(err, LARES_EINVAL, "placement %d is unknown", (int)o->placement);
    }
    sched_costs *c;
    lares_status st = sched_costs_create(m, devs, n, o, &c, err);
    if (st != LARES_OK) {
        return st;
    }
    size_t head;
    sched_plan *p = NULL;
    if ((st = sched_pick_head(c, &head, err)) != LARES_OK) {
        goto done;
    }
    if (o->placement == SCHED_HALDA) {
        st = sched_halda(c, head, &p, err);
        glp_free_env(); /* GLPK's per-thread environment: nothing of it outlives a plan */
    } else {
        st = sched_baseline(c, o->placement, head == SIZE_MAX ? cheapest_head(c) : head, &p, err);
    }
    if (st != LARES_OK) {
        goto done;
    }
    if ((st = sched_validate_costs(p, c, err)) != LARES_OK) {
        lares_error_prefix(err, "%s: ", sched_placement_name(o->placement));
        goto done;
    }
    p->solve_s = (double)(lares_now_ns() - t0) / 1e9;
    *out = p;
    p = NULL;
done:
    sched_plan_free(p);
    sched_costs_free(c);
    return st;
}

lares_status sched_plan_from_windows(const sched_model *m, const sched_device *devs, size_t n,
                                     const sched_opts *o, const size_t *ring, const int32_t *w,
                                     const int32_t *n_gpu, size_t n_ring, sched_plan **out,
                                     lares_error *err) {
    if (n_ring == 0) {
        return lares_fail(err, LARES_EINVAL, "windows: no device in the ring");
    }
    int64_t W = 0;
    for (size_t i = 0; i < n_ring; i++) {
        if (ring[i] >= n) {
            return lares_fail(err, LARES_EINVAL, "windows: device index %zu of %zu", ring[i], n);
        }
        if (w[i] < 1 || (n_gpu && (n_gpu[i] < 0 || n_gpu[i] > w[i]))) {
            return lares_fail(err, LARES_EINVAL, "windows: device '%s' gets %d layers, %d on GPU",
                              devs[ring[i]].name, w[i], n_gpu ? n_gpu[i] : 0);
        }
        W += w[i];
    }
    if (W > m->n_layer || m->n_layer % W != 0) {
        return lares_fail(err, LARES_EINVAL,
                          "windows: one round of %" PRId64 " layers does not divide the %d layers "
                          "of '%s'",
                          W, m->n_layer, m->name);
    }
    sched_costs *c;
    lares_status st = sched_costs_create(m, devs, n, o, &c, err);
    if (st != LARES_OK) {
        return st;
    }
    sched_plan *p = NULL;
    if ((st = sched_plan_alloc(n_ring, n, &p, err)) != LARES_OK) {
        goto done;
    }
    p->placement = o->placement;
    p->k = m->n_layer / (int32_t)W;
    p->head = ring[0];
    for (size_t i = 0; i < n_ring; i++) {
        p->a[i].device = ring[i];
        p->a[i].w = w[i];
        p->a[i].n_gpu = n_gpu ? n_gpu[i] : 0;
    }
    if ((st = sched_plan_finish(p, c, err)) != LARES_OK ||
        (st = sched_validate_costs(p, c, err)) != LARES_OK) {
        goto done;
    }
    *out = p;
    p = NULL;
done:
    sched_plan_free(p);
    sched_costs_free(c);
    return st;
}

static const sched_assign *find(const sched_plan *p, size_t device) {
    for (size_t i = 0; i < p->n; i++) {
        if (p->a[i].device == device) {
            return &p->a[i];
        }
    }
    return NULL;
}

lares_status sched_plan_layers_of(const sched_plan *p, size_t device, int32_t round, int32_t *l0,
                                  int32_t *l1, lares_error *err) {
    const sched_assign *a = find(p, device);
    if (a == NULL) {
        return lares_fail(err, LARES_ENOTFOUND, "device %zu is not in the ring", device);
    }
    if (round < 0 || round >= p->k) {
        return lares_fail(err, LARES_ERANGE, "round %d of %d", round, p->k);
    }
    *l0 = round * p->W + a->offset;
    *l1 = *l0 + a->w;
    return LARES_OK;
}

lares_status sched_plan_gpu_from(const sched_plan *p, size_t device, int32_t round, int32_t *g0,
                                 lares_error *err) {
    int32_t l0, l1;
    lares_status st = sched_plan_layers_of(p, device, round, &l0, &l1, err);
    if (st != LARES_OK) {
        return st;
    }
    *g0 = l1 - find(p, device)->n_gpu;
    return LARES_OK;
}

lares_status sched_plan_validate(const sched_plan *p, const sched_model *m,
                                 const sched_device *devs, size_t n, const sched_opts *o,
                                 lares_error *err) {
    sched_costs *c;
    lares_status st = sched_costs_create(m, devs, n, o, &c, err);
    if (st != LARES_OK) {
        return st;
    }
    if (p->n_devices != n) {
        st = lares_fail(err, LARES_EINVAL, "plan: made for %zu devices, checked against %zu",
                        p->n_devices, n);
    } else {
        st = sched_validate_costs(p, c, err);
    }
    sched_costs_free(c);
    return st;
}

lares_status sched_plan_evaluate(sched_plan *p, const sched_model *m, const sched_device *devs,
                                 size_t n, const sched_opts *o, lares_error *err) {
    sched_costs *c;
    lares_status st = sched_costs_create(m, devs, n, o, &c, err);
    if (st != LARES_OK) {
        return st;
    }
    st = sched_evaluate_costs(p, c, err);
    sched_costs_free(c);
    return st;
}

void sched_plan_windows(const sched_plan *p, int32_t *w, int32_t *n_gpu) {
    for (size_t d = 0; d < p->n_devices; d++) {
        w[d] = 0;
        n_gpu[d] = 0;
    }
    for (size_t i = 0; i < p->n; i++) {
        w[p->a[i].device] = p->a[i].w;
        n_gpu[p->a[i].device] = p->a[i].n_gpu;
    }
}

/* ---- the life cycle ---- */

lares_status sched_plan_alloc(size_t n_ring, size_t n_devices, sched_plan **out, lares_error *err) {
    sched_plan *p = lares_calloc(1, sizeof *p);
    if (p == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    p->a = lares_calloc(n_ring ? n_ring : 1, sizeof *p->a);
    p->dropped = lares_calloc(n_devices ? n_devices : 1, sizeof *p->dropped);
    if (p->a == NULL || p->dropped == NULL) {
        sched_plan_free(p);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    p->n = n_ring;
    p->n_devices = n_devices;
    for (size_t i = 0; i < n_devices; i++) {
        p->dropped[i] = true;
    }
    *out = p;
    return LARES_OK;
}

void sched_plan_free(sched_plan *p) {
    if (p == NULL) {
        return;
    }
    lares_free(p->a);
    lares_free(p->dropped);
    lares_free(p);
}

lares_status sched_plan_finish(sched_plan *p, const sched_costs *c, lares_error *err) {
    int32_t off = 0;
    for (size_t i = 0; i < p->n; i++) {
        p->a[i].offset = off;
        off += p->a[i].w;
    }
    p->W = off;
    p->n_layer = c->L;
    p->n_devices = c->n;
    for (size_t d = 0; d < c->n; d++) {
        p->dropped[d] = true;
    }
    for (size_t i = 0; i < p->n; i++) {
        if (p->a[i].device < c->n) {
            p->dropped[p->a[i].device] = false;
        }
    }
    return sched_evaluate_costs(p, c, err);
}

lares_status sched_validate_costs(const sched_plan *p, const sched_costs *c, lares_error *err) {
    const int32_t L = c->L;
    char b1[32], b2[32];
    if (p->n == 0) {
        return lares_fail(err, LARES_EINVAL, "plan: no device in the ring");
    }
    if (p->k < 1 || p->W < 1 || (int64_t)p->k * p->W != L || p->n_layer != L) {
        return lares_fail(err, LARES_EINVAL, "plan: %d rounds of %d layers for a %d-layer model",
                          p->k, p->W, L);
    }
    if (p->head >= c->n || p->a[0].device != p->head) {
        return lares_fail(err, LARES_EINVAL, "plan: the head is not the first device of the ring");
    }
    uint8_t *seen = lares_calloc((size_t)L, 1);
    bool *in_ring = lares_calloc(c->n, sizeof *in_ring);
    lares_status st = LARES_OK;
    if (seen == NULL || in_ring == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p->n; i++) {
        const sched_assign *a = &p->a[i];
        if (a->device >= c->n) {
            st = lares_fail(err, LARES_EINVAL, "plan: device index %zu of %zu", a->device, c->n);
            goto done;
        }
        const sched_device *d = &c->devs[a->device];
        if (in_ring[a->device]) {
            st = lares_fail(err, LARES_EINVAL, "plan: device '%s' is in the ring twice", d->name);
            goto done;
        }
        in_ring[a->device] = true;
        if (a->w < 1 || a->n_gpu < 0 || a->n_gpu > a->w ||
            (d->gpu == SCHED_GPU_NONE && a->n_gpu > 0)) {
            st = lares_fail(err, LARES_EINVAL,
                            "plan: device '%s' has a window of %d with %d GPU layers%s", d->name,
                            a->w, a->n_gpu, d->gpu == SCHED_GPU_NONE ? " and no GPU" : "");
            goto done;
        }
        uint64_t vram = 0, kv_ram = 0, weights = 0;
        for (int32_t r = 0; r < p->k; r++) {
            int64_t l0 = (int64_t)r * p->W + a->offset;
            for (int64_t l = l0; l < l0 + a->w; l++) {
                if (l < 0 || l >= L) {
                    st =
                        lares_fail(err, LARES_EINVAL,
                                   "plan: device '%s' owns layer %" PRId64 " of %d", d->name, l, L);
                    goto done;
                }
                if (seen[l]++) {
                    st = lares_fail(err, LARES_EINVAL,
                                    "plan: layer %" PRId64 " is owned twice (device '%s')", l,
                                    d->name);
                    goto done;
                }
                weights += c->m->layers[l].weight_bytes;
                if (l >= l0 + a->w - a->n_gpu) {
                    vram += c->bp[l];
                } else {
                    kv_ram += c->kv_bytes;
                }
            }
        }
        if (sched_unified(d)) { /* the GPU layers' KV lives in the same RAM */
            kv_ram = (uint64_t)p->k * (uint64_t)a->w * c->kv_bytes;
        }
        uint64_t ram_lim = sched_ram_of(c, a->device, p->head);
        if (vram > c->vram_limit[a->device]) {
            st = lares_fail(err, LARES_ERANGE,
                            "plan: device '%s' has %s of GPU layers but %s of GPU memory", d->name,
                            lares_fmt_bytes((double)vram, b1, sizeof b1),
                            lares_fmt_bytes((double)c->vram_limit[a->device], b2, sizeof b2));
            goto done;
        }
        if (kv_ram > ram_lim) {
            st = lares_fail(err, LARES_ERANGE,
                            "plan: device '%s' needs %s of KV cache in RAM but can give %s",
                            d->name, lares_fmt_bytes((double)kv_ram, b1, sizeof b1),
                            lares_fmt_bytes((double)ram_lim, b2, sizeof b2));
            goto done;
        }
        if (d->disk_free_bytes >= 0 && weights > ram_lim + (uint64_t)d->disk_free_bytes) {
            st = lares_fail(
                err, LARES_ERANGE,
                "plan: device '%s' holds %s of weights but has %s of RAM and disk", d->name,
                lares_fmt_bytes((double)weights, b1, sizeof b1),
                lares_fmt_bytes((double)(ram_lim + (uint64_t)d->disk_free_bytes), b2, sizeof b2));
            goto done;
        }
    }
    for (int32_t l = 0; l < L; l++) {
        if (!seen[l]) {
            st = lares_fail(err, LARES_EINVAL, "plan: layer %d is owned by no device", l);
            goto done;
        }
    }
done:
    lares_free(seen);
    lares_free(in_ring);
    return st;
}
