/*
 * The ring's side of planning (issues 7 and 9): device figures corrected by
 * what a running ring measured, re-planning from them, and the table of
 * predicted beside measured times.
 *
 * Calibration fits the latency model to the measurement instead of taking
 * the measured figure as a rate: a device's wall time per layer already
 * contains its CPU quota's throttling for the window size it ran, and its
 * disk wait already contains the overlap with the rest of the ring. Scaling
 * the profile until the model reproduces what was measured under the current
 * plan keeps both effects where the model puts them, so a plan with other
 * windows is priced consistently. Both fits are one-dimensional and monotone
 * (more compute scale, more time per layer; more throughput, less wait), so a
 * bisection on the logarithm finds them.
 */
#include "sched/sched_impl.h"

#include <math.h>

void sched_measured_init(sched_measured *m) {
    memset(m, 0, sizeof *m);
    m->wait_s = -1;
    m->hop_out.latency_s = -1;
}

static bool hop_valid(const sched_hop *h) {
    return h->latency_s >= 0 && isfinite(h->latency_s) && h->bandwidth_Bps > 0 &&
           isfinite(h->bandwidth_Bps);
}

static const sched_assign *slot_of(const sched_plan *p, size_t device, size_t *pos) {
    for (size_t i = 0; i < p->n; i++) {
        if (p->a[i].device == device) {
            if (pos) {
                *pos = i;
            }
            return &p->a[i];
        }
    }
    return NULL;
}

static void scale_rates(sched_rates *r, double f) {
    for (uint32_t q = 0; q < GGUF_TYPE_COUNT; q++) {
        r->by_type[q] /= f;
    }
    r->other /= f;
}

/* device d of `base` with its compute slowed by f (times x f) */
static void apply_scale(sched_device *d, const sched_device *base, double f) {
    d->cpu_flops = base->cpu_flops;
    d->cpu_flops_mem = base->cpu_flops_mem;
    d->gpu_flops = base->gpu_flops;
    d->mem_bw_Bps = base->mem_bw_Bps / f;
    d->gpu_mem_bw_Bps = base->gpu_mem_bw_Bps / f;
    scale_rates(&d->cpu_flops, f);
    scale_rates(&d->cpu_flops_mem, f);
    scale_rates(&d->gpu_flops, f);
}

/* The plan `cur` priced over devs: per-device figures in *out (a copy). */
static lares_status price(const sched_model *m, const sched_device *devs, size_t n,
                          const sched_opts *o, const sched_plan *cur, sched_plan *out,
                          lares_error *err) {
    sched_assign *a = out->a;
    bool *dropped = out->dropped;
    *out = *cur;
    out->a = a;
    out->dropped = dropped;
    memcpy(out->a, cur->a, cur->n * sizeof *cur->a);
    memcpy(out->dropped, cur->dropped, cur->n_devices * sizeof *cur->dropped);
    return sched_plan_evaluate(out, m, devs, n, o, err);
}

/* Bisection on log(x) in [lo, hi] for the x where g(x) crosses target;
 * g increasing in x when rising, else decreasing. */
typedef lares_status (*fit_fn)(void *ctx, double x, double *g, lares_error *err);

static lares_status fit(fit_fn g, void *ctx, double lo, double hi, double target, bool rising,
                        double *out, lares_error *err) {
    double a = log(lo), b = log(hi);
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (a + b), v;
        lares_status st = g(ctx, exp(mid), &v, err);
        if (st != LARES_OK) {
            return st;
        }
        if ((v < target) == rising) {
            a = mid;
        } else {
            b = mid;
        }
    }
    *out = exp(0.5 * (a + b));
    return LARES_OK;
}

typedef struct fit_ctx {
    const sched_model *m;
    sched_device *devs; /* the working copy */
    const sched_device *base;
    size_t n;
    const sched_opts *o;
    const sched_plan *cur;
    sched_plan *scratch;
    size_t d, pos;
} fit_ctx;

static lares_status layer_time_at(void *ctx, double f, double *g, lares_error *err) {
    fit_ctx *x = ctx;
    apply_scale(&x->devs[x->d], &x->base[x->d], f);
    lares_status st = price(x->m, x->devs, x->n, x->o, x->cur, x->scratch, err);
    *g = st == LARES_OK ? x->scratch->a[x->pos].t_layer_s : 0;
    return st;
}

/* A disk rate the ring measured (or fitted to the waits it measured): it
 * replaces every rate the profile had, the streaming and direct ones
 * included, which the latency model prefers (sched_disk_stream_Bps) and
 * which would else hide it. */
static void set_disk(sched_device *d, double Bps) {
    d->disk_seq_Bps = Bps;
    d->disk_rand_Bps = Bps;
    if (d->disk_stream_Bps > 0) {
        d->disk_stream_Bps = Bps;
    }
    if (d->disk_direct_Bps > 0) {
        d->disk_direct_Bps = Bps;
    }
}

static lares_status wait_at(void *ctx, double s, double *g, lares_error *err) {
    fit_ctx *x = ctx;
    set_disk(&x->devs[x->d], s);
    lares_status st = price(x->m, x->devs, x->n, x->o, x->cur, x->scratch, err);
    *g = st == LARES_OK ? x->scratch->a[x->pos].t_disk_s : 0;
    return st;
}

lares_status sched_devices_calibrate(const sched_model *m, const sched_device *devs, size_t n,
                                     const sched_opts *o, const sched_plan *current,
                                     const sched_measured *meas, sched_device *out,
                                     lares_error *err) {
    memcpy(out, devs, n * sizeof *devs);
    if (meas == NULL) {
        return LARES_OK;
    }
    if (current != NULL && current->n_devices != n) {
        return lares_fail(err, LARES_EINVAL,
                          "calibrate: the plan was made for %zu devices, not %zu",
                          current->n_devices, n);
    }
    for (size_t d = 0; d < n; d++) {
        const sched_measured *me = &meas[d];
        if (me->samples <= 0) {
            continue;
        }
        if (!(me->layer_s < 1e6) || !(me->wait_s < 1e6) || !(me->read_Bps < 1e15) ||
            (me->hop_out.latency_s >= 0 && !hop_valid(&me->hop_out))) {
            return lares_fail(err, LARES_EINVAL,
                              "calibrate: device '%s': measured figures out of range (layer %g s, "
                              "wait %g s, read %g B/s, hop %g s at %g B/s)",
                              devs[d].name, me->layer_s, me->wait_s, me->read_Bps,
                              me->hop_out.latency_s, me->hop_out.bandwidth_Bps);
        }
        if (me->mem_budget_bytes > 0) {
            out[d].ram_avail_bytes = me->mem_budget_bytes;
        }
        if (hop_valid(&me->hop_out)) {
            out[d].net_out = me->hop_out;
        }
        if (me->read_Bps > 0) {
            set_disk(&out[d], me->read_Bps);
        }
    }
    if (current == NULL) {
        return LARES_OK;
    }
    sched_plan *scratch;
    lares_status st = sched_plan_alloc(current->n, n, &scratch, err);
    if (st != LARES_OK) {
        return st;
    }
    fit_ctx x = {
        .m = m, .devs = out, .base = devs, .n = n, .o = o, .cur = current, .scratch = scratch};
    /* compute first (the disk fit prices the overlap with the others' compute),
     * twice over, since each device's wait depends on the others' times */
    for (int pass = 0; pass < 2 && st == LARES_OK; pass++) {
        for (size_t d = 0; d < n && st == LARES_OK; d++) {
            const sched_measured *me = &meas[d];
            if (me->samples <= 0 || slot_of(current, d, &x.pos) == NULL) {
                continue;
            }
            x.d = d;
            if (me->layer_s > 0) {
                double f;
                if ((st = fit(layer_time_at, &x, 1e-4, 1e4, me->layer_s, true, &f, err))) {
                    break;
                }
                apply_scale(&out[d], &devs[d], f);
            }
            if (me->read_Bps <= 0 && me->wait_s >= 0) {
                if ((st = price(m, out, n, o, current, scratch, err)) != LARES_OK) {
                    break;
                }
                if (scratch->a[x.pos].disk_read_bytes == 0) {
                    continue; /* nothing streams there: no disk figure to learn */
                }
                const double own = sched_disk_stream_Bps(&devs[d]); /* what was priced */
                double s;
                if ((st = fit(wait_at, &x, own * 1e-3, own * 1e3, me->wait_s, false, &s, err))) {
                    break;
                }
                if (me->wait_s == 0 && s < own) {
                    s = own; /* no wait only says the disk was fast enough */
                }
                set_disk(&out[d], s);
            }
        }
    }
    sched_plan_free(scratch);
    if (st != LARES_OK) {
        lares_error_prefix(err, "calibrate: ");
    }
    return st;
}

lares_status sched_replan(const sched_model *m, const sched_device *devs, size_t n,
                          const sched_opts *o, const sched_plan *current,
                          const sched_measured *meas, sched_plan **out, lares_error *err) {
    sched_device *cal = lares_calloc(n ? n : 1, sizeof *cal);
    sched_link *links = lares_calloc(o->n_links + n + 1, sizeof *links);
    if (cal == NULL || links == NULL) {
        lares_free(cal);
        lares_free(links);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st = sched_devices_calibrate(m, devs, n, o, current, meas, cal, err);
    if (st != LARES_OK) {
        goto done;
    }
    /* measured hops first: sched_hop_s takes the last matching link */
    size_t nl = 0;
    for (size_t i = 0; i < o->n_links; i++) {
        links[nl++] = o->links[i];
    }
    for (size_t d = 0; current != NULL && meas != NULL && d < n; d++) {
        size_t pos;
        if (meas[d].samples > 0 && hop_valid(&meas[d].hop_out) &&
            slot_of(current, d, &pos) != NULL && current->n > 1) {
            links[nl++] =
                (sched_link){d, current->a[(pos + 1) % current->n].device, meas[d].hop_out};
        }
    }
    sched_opts so = *o;
    so.links = links;
    so.n_links = nl;
    st = sched_plan_make(m, cal, n, &so, out, err);
done:
    lares_free(cal);
    lares_free(links);
    return st;
}

size_t sched_plan_format_measured(const sched_plan *p, const sched_device *devs,
                                  const sched_measured *meas, double token_s, char *buf,
                                  size_t cap) {
    size_t n = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int r_ = snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__);                            \
        n += r_ > 0 ? (size_t)r_ : 0;                                                              \
    } while (0)
    if (cap > 0) {
        buf[0] = '\0';
    }
    PUT("%-16s %6s  %21s  %21s  %8s  %21s  %6s\n", "device", "layers", "compute ms pred/meas",
        "disk wait ms pred/meas", "net ms", "total ms pred/meas", "ratio");
    for (size_t i = 0; i < p->n; i++) {
        const sched_assign *a = &p->a[i];
        const sched_measured *me = meas ? &meas[a->device] : NULL;
        const double pc = (a->t_cpu_s + a->t_gpu_s) * 1e3, pw = a->t_disk_s * 1e3;
        const double pn = a->t_net_s * 1e3, pt = a->t_total_s * 1e3;
        char mc[16] = "-", mw[16] = "-", mt[16] = "-", ratio[16] = "-";
        if (me != NULL && me->samples > 0) {
            double c = me->layer_s > 0 ? me->layer_s * a->w * p->k * 1e3 : -1;
            double w = me->wait_s >= 0 ? me->wait_s * 1e3 : -1;
            if (c >= 0) {
                snprintf(mc, sizeof mc, "%.1f", c);
            }
            if (w >= 0) {
                snprintf(mw, sizeof mw, "%.1f", w);
            }
            if (c >= 0 && w >= 0) {
                snprintf(mt, sizeof mt, "%.1f", c + w + pn);
                if (pt > 0) {
                    snprintf(ratio, sizeof ratio, "%.2f", (c + w + pn) / pt);
                }
            }
        }
        PUT("%-16s %6d  %10.1f %10s  %10.1f %10s  %8.1f  %10.1f %10s  %6s\n", devs[a->device].name,
            a->w * p->k, pc, mc, pw, mw, pn, pt, mt, ratio);
    }
    if (token_s >= 0) {
        PUT("%-16s %6s  token %.1f ms predicted (head %.1f), %.1f ms measured (ratio %.2f)\n",
            "token", "", p->t_token_s * 1e3, p->t_head_s * 1e3, token_s * 1e3,
            p->t_token_s > 0 ? token_s / p->t_token_s : 0.0);
    } else {
        PUT("%-16s %6s  token %.1f ms predicted (head %.1f)\n", "token", "", p->t_token_s * 1e3,
            p->t_head_s * 1e3);
    }
#undef PUT
    return n < cap ? n : (cap > 0 ? cap - 1 : 0);
}
