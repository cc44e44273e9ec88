/*
 * The price of one plan, device by device and layer by layer: the latency
 * model every placement is judged by (docs/scheduling-impl.md, "The latency
 * model", has the derivation). Per device m of the ring, per token:
 *
 *   compute   each window is a burst of full-speed work b_r (its CPU layers,
 *             timed by the profile's rates). Under a CPU quota of u = quota /
 *             threads of full speed per period P, a burst that starts with the
 *             period's quota unspent runs at full speed until it has used uP,
 *             then in slices of uP per period:
 *                 wall(b) = b                      when b <= uP,
 *                           b / u - P (1 - u)      otherwise;
 *             C_m = sum_r wall(b_r) + GPU time. The head's output matrix is
 *             one more burst.
 *   memory    as the executor plans it (exec/plan.c): the device's memory
 *             budget, less the KV cache the token's n_past + 1 positions touch
 *             (the executor re-plans as the cache fills; the plan's limits are
 *             checked at n_ctx), is the weight budget B; when the
 *             weights of its cycle (its windows in round order; the output
 *             matrix on the head) exceed B, it streams: slack S and a window
 *             of window_units x the largest unit stay free, the rest pins
 *             whole units in van der Corput order, and every token reads the
 *             units not pinned, R_m bytes, at the device's streaming
 *             throughput s_m.
 *   disk wait the prefetcher reads while the device computes (except during
 *             the first streamed layer of each window, when the window is
 *             already full of read-ahead; with a window of one unit, during
 *             every streamed layer) and while the token is elsewhere, but then
 *             at most the window's bytes V_m per gap, k gaps a token:
 *                 z_m = max(0, R_m/s_m - O_m - min(R_m, k V_m)/s_m)
 *             with O_m the compute it can overlap (B_m: the rest).
 *   network   k hops out of the device.
 *
 *   T = max( sum_m (C_m + z_m + k h_m) + kappa,                 (the chain)
 *            max_m R_m/s_m + (C_m - Cf_m) [+ B_m with a one-unit window],
 *                                           over streaming m    (its disk is busy
 *                                                                all the token, not
 *                                                                while throttled or
 *                                                                blocked)
 *            max_m (Cf_m + Rc_m) / u_m,     over quota'd m )    (its long-run share)
 *
 * where Cf_m is m's full-speed compute and Rc_m = R_m / the profile's
 * stream_cpu: the CPU its prefetch thread spends in the kernel reading R_m
 * (page-cache allocation, charging, mapping), which a quota takes from the
 * same share as the compute. When a bound wins, the difference is
 * charged to that device (its disk wait, or its compute): it is where the
 * ring would wait.
 */
#include "sched/sched_impl.h"

#include <math.h>

double sched_quota_wall(const sched_costs *c, size_t d, double b) {
    const double u = c->quota_u[d], P = c->quota_P[d];
    if (!(u < 1) || b <= u * P) {
        return b;
    }
    return b / u - P * (1 - u);
}

void sched_stream_plan(const sched_costs *c, const uint64_t *unit, int32_t n_units,
                       int32_t out_unit, uint64_t fixed_bytes, uint64_t budget,
                       sched_stream *out, bool *streamed) {
    memset(out, 0, sizeof *out);
    for (int32_t i = 0; streamed != NULL && i < n_units; i++) {
        streamed[i] = false;
    }
    uint64_t total = 0, largest = 0;
    for (int32_t i = 0; i < n_units; i++) {
        total += unit[i];
        largest = LARES_MAX(largest, unit[i]);
    }
    out->largest = largest;
    if (total + fixed_bytes <= budget || n_units == 0) {
        return; /* fits: the executor does nothing */
    }
    out->streams = true;
    for (int32_t i = 0; streamed != NULL && i < n_units; i++) {
        streamed[i] = true;
    }
    if (budget < largest) {
        out->too_small = true; /* the executor refuses this; validation says so */
        out->stream_bytes = total;
        out->window_bytes = budget;
        return;
    }
    const uint64_t slack = LARES_MIN(c->o->stream_slack_bytes, budget - largest);
    const uint64_t usable = budget - slack;
    const uint64_t per = c->o->stream_window_units > 0 ? (uint64_t)c->o->stream_window_units : 2;
    uint64_t window = largest * per;
    if (window > usable) {
        window = usable;
    }
    /* the output matrix first where it is the largest unit and fits beside a
     * window of the layers' units */
    uint64_t part_max = 0;
    for (int32_t i = 0; i < n_units; i++) {
        part_max = i != out_unit ? LARES_MAX(part_max, unit[i]) : part_max;
    }
    bool out_first = false;
    if (out_unit >= 0 && unit[out_unit] == largest && part_max < largest &&
        part_max * per + largest <= usable && part_max * per < window) {
        window = part_max * per;
        out_first = true;
        out->largest = part_max; /* the largest unit that streams */
    }
    uint64_t left = usable - window, pinned = 0;
    if (out_first) {
        left -= unit[out_unit];
        pinned += unit[out_unit];
        if (streamed != NULL) {
            streamed[out_unit] = false;
        }
    }
    for (int32_t k = 0; k < n_units; k++) {
        const int32_t i = lares_spread_order(n_units, k);
        if (out_first && i == out_unit) {
            continue;
        }
        if (unit[i] <= left) {
            left -= unit[i];
            pinned += unit[i];
            if (streamed != NULL) {
                streamed[i] = false;
            }
        }
    }
    out->pinned_bytes = pinned;
    out->stream_bytes = total - pinned;
    out->window_bytes = usable - pinned;
}

/* The units of device slot a, in cycle order: the RAM layers of each window,
 * round by round (all layers with unified memory), each in its parts
 * (sched_layer_units), then on the head the output matrix. Fills unit[] and,
 * per unit, its layer (-1: the output), its round and its share of the
 * layer's bytes; returns the count. */
static int32_t cycle_of(const sched_costs *c, const sched_plan *p, const sched_assign *a,
                        bool is_head, uint64_t *unit, int32_t *layer, int32_t *round,
                        double *share) {
    const bool uni = sched_unified(&c->devs[a->device]);
    int32_t n = 0;
    for (int32_t r = 0; r < p->k; r++) {
        const int32_t l0 = r * p->W + a->offset;
        const int32_t l1 = l0 + a->w - (uni ? 0 : a->n_gpu);
        for (int32_t l = l0; l < l1; l++) {
            const sched_layer *sl = &c->m->layers[l];
            const int32_t k = sched_layer_units(sl, c->part_max, unit + n);
            for (int32_t j = 0; j < k; j++, n++) {
                layer[n] = l;
                round[n] = r;
                share[n] = sl->weight_bytes > 0 ? (double)unit[n] / (double)sl->weight_bytes : 1;
            }
        }
    }
    if (is_head) {
        unit[n] = c->head_bytes;
        layer[n] = -1;
        round[n] = p->k;
        share[n] = 1;
        n++;
    }
    return n;
}

lares_status sched_evaluate_costs(sched_plan *p, const sched_costs *c, lares_error *err) {
    const size_t L = (size_t)c->L;
    if (p->n == 0 || p->head >= c->n || p->a[0].device != p->head) {
        return lares_fail(err, LARES_EINVAL, "plan: the head is not the first device of the ring");
    }
    const size_t n_max = SCHED_PARTS * L + 1; /* units of a cycle at most */
    uint64_t *unit = lares_calloc(n_max, sizeof *unit);
    int32_t *layer = lares_calloc(n_max, sizeof *layer);
    int32_t *round = lares_calloc(n_max, sizeof *round);
    double *share = lares_calloc(n_max, sizeof *share);
    bool *streamed = lares_calloc(n_max, sizeof *streamed);
    double *cfull = lares_calloc(p->n, sizeof *cfull);
    double *busy = lares_calloc(p->n, sizeof *busy);
    double *rcpu = lares_calloc(p->n, sizeof *rcpu);
    lares_status st = LARES_OK;
    if (unit == NULL || layer == NULL || round == NULL || share == NULL || streamed == NULL ||
        cfull == NULL || busy == NULL || rcpu == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto done;
    }
    double chain = 0, kappa_wall = 0;
    for (size_t i = 0; i < p->n; i++) {
        sched_assign *a = &p->a[i];
        if (a->device >= c->n) {
            st = lares_fail(err, LARES_EINVAL, "plan: device index %zu of %zu", a->device, c->n);
            goto done;
        }
        const size_t dv = a->device;
        const sched_device *d = &c->devs[dv];
        const bool is_head = dv == p->head, uni = sched_unified(d);
        if (a->w < 0 || a->n_gpu < 0 || a->n_gpu > a->w || (int64_t)p->k * p->W != c->L ||
            a->offset < 0 || (int64_t)(p->k - 1) * p->W + a->offset + a->w > (int64_t)L) {
            st = lares_fail(err, LARES_EINVAL,
                            "plan: device '%s' owns layers beyond the %zu of the model (window "
                            "%d at %d, %d rounds of %d)",
                            d->name, L, a->w, a->offset, p->k, p->W);
            goto done;
        }
        /* compute: bursts of full-speed work, throttled by the quota */
        double c_wall = 0, c_full = 0, g = 0;
        uint64_t ram = 0, vram = 0, kv_ram = 0;
        for (int32_t r = 0; r < p->k; r++) {
            const int32_t l0 = r * p->W + a->offset, g0 = l0 + a->w - a->n_gpu;
            double b = 0;
            for (int32_t l = l0; l < l0 + a->w; l++) {
                if (l >= g0) {
                    g += c->t_gpu[dv * L + (size_t)l];
                    vram += c->bp[l];
                    if (uni) {
                        kv_ram += c->kv_past_bytes;
                    }
                } else {
                    b += c->t_cpu[dv * L + (size_t)l];
                    ram += c->bp[l];
                    kv_ram += c->kv_past_bytes;
                }
            }
            c_full += b;
            c_wall += sched_quota_wall(c, dv, b);
        }
        if (is_head) { /* kappa: the output matrix, one more burst */
            kappa_wall = sched_quota_wall(c, dv, c->t_head[dv]);
            c_full += c->t_head[dv];
            c_wall += kappa_wall;
        }
        /* memory: the executor's plan of this device's cycle */
        const uint64_t limit = c->ram_limit[dv];
        const int32_t n_units = cycle_of(c, p, a, is_head, unit, layer, round, share);
        const uint64_t budget = limit > kv_ram ? limit - kv_ram : 0;
        sched_stream sp;
        sched_stream_plan(c, unit, n_units, is_head ? n_units - 1 : -1,
                          is_head ? c->m->embd_bytes : 0, budget, &sp, streamed);
        const uint64_t need = uni ? ram + vram : ram;
        a->ram_bytes = need;
        a->ram_limit_bytes = is_head ? sched_ram_of(c, dv, p->head) : limit;
        a->vram_bytes = vram;
        a->mem_case = sp.streams ? sched_overflow_case(d) : SCHED_CASE_FITS;
        a->disk_read_bytes = sp.stream_bytes;
        const double s = c->disk_Bps[dv];
        a->t_read_s = (double)sp.stream_bytes / s;
        /* the compute the reader cannot overlap: with a window of two units or
         * more, the first streamed unit of each window (the gap filled the
         * window: the reader waits for that unit's release); with a window of
         * one unit, every streamed unit (the one computing fills it). A unit's
         * compute is its share of its layer's bytes. */
        double z = 0, blocked_busy = 0;
        if (sp.streams) {
            const bool one_unit = sp.window_bytes < 2 * sp.largest;
            double blocked = 0;
            int32_t last_round = -1;
            for (int32_t u = 0; u < n_units; u++) {
                if (layer[u] < 0 || !streamed[u] || (!one_unit && round[u] == last_round)) {
                    continue;
                }
                blocked += c->t_cpu[dv * L + (size_t)layer[u]] * share[u];
                last_round = round[u];
            }
            const double own = LARES_MAX(0.0, c_full - blocked) + g;
            const double gaps =
                (double)LARES_MIN(sp.stream_bytes, (uint64_t)p->k * sp.window_bytes);
            z = LARES_MAX(0.0, a->t_read_s - own - gaps / s);
            blocked_busy = one_unit ? blocked : 0;
        }
        a->t_cpu_s = c_wall;
        a->t_gpu_s = g;
        a->t_disk_s = z;
        a->t_net_s = 0;
        if (p->n > 1) {
            double hop;
            if ((st = sched_hop_s(c, dv, p->a[(i + 1) % p->n].device, &hop, err)) != LARES_OK) {
                goto done;
            }
            a->t_net_s = p->k * hop;
        }
        cfull[i] = c_full;
        rcpu[i] = (double)sp.stream_bytes * c->read_cpu[dv];
        busy[i] = a->t_read_s + (c_wall - c_full) + blocked_busy;
        chain += c_wall + g + z + a->t_net_s;
    }
    /* the bounds: a device's disk busy all the token, or its quota's share */
    double T = chain;
    size_t bind = SIZE_MAX;
    bool bind_disk = false;
    for (size_t i = 0; i < p->n; i++) {
        const sched_assign *a = &p->a[i];
        const double u = c->quota_u[a->device];
        if (a->disk_read_bytes > 0) {
            if (busy[i] > T) {
                T = busy[i];
                bind = i;
                bind_disk = true;
            }
        }
        if (u < 1 && (cfull[i] + rcpu[i]) / u > T) {
            T = (cfull[i] + rcpu[i]) / u;
            bind = i;
            bind_disk = false;
        }
    }
    if (bind != SIZE_MAX) {
        if (bind_disk) {
            p->a[bind].t_disk_s += T - chain;
        } else {
            p->a[bind].t_cpu_s += T - chain;
        }
    }
    for (size_t i = 0; i < p->n; i++) {
        sched_assign *a = &p->a[i];
        const double layers = (double)a->w * p->k;
        /* per layer as a ring measures it: window time less disk waits, so
         * without the head's output matrix */
        const double kappa = a->device == p->head ? kappa_wall : 0;
        a->t_total_s = a->t_cpu_s + a->t_gpu_s + a->t_disk_s + a->t_net_s;
        a->t_layer_s = layers > 0 ? (a->t_cpu_s - kappa + a->t_gpu_s) / layers : 0;
    }
    /* kappa is inside the head's compute (its own burst); reported apart too */
    p->t_head_s = c->t_head[p->head];
    p->t_token_s = T;
done:
    lares_free(unit);
    lares_free(layer);
    lares_free(round);
    lares_free(share);
    lares_free(streamed);
    lares_free(cfull);
    lares_free(busy);
    lares_free(rcpu);
    return st;
}
