/*
 * The public face of sched (include/lares.h): plan a model over devices;
 * JSON text in and out, so the program (app/plan.c) needs nothing of this
 * module's structs. Profiling is api/profile.c's (it runs the executor).
 */
#include "sched/sched_impl.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

lares_plan_opts lares_plan_opts_default(void) {
    lares_plan_opts o;
    memset(&o, 0, sizeof o);
    o.placement = "halda";
    o.net_latency_ms = -1;
    return o;
}

lares_status lares_plan(const lares_plan_opts *o, const char *devices_json, size_t len,
                        const char *what, char **json_out, lares_error *err) {
    if ((o->model_path == NULL) == (o->shape == NULL)) {
        return lares_fail(err, LARES_EINVAL, "plan: give a model file or a shape (not both)");
    }
    /* "halda:k=N": Halda held to N rounds (to compare k's on a testbed) */
    const char *name = o->placement ? o->placement : "halda";
    int32_t rounds = 0;
    int pl = sched_placement_from_name(name);
    if (pl < 0 && strncmp(name, "halda:k=", 8) == 0) {
        char *end = NULL;
        errno = 0;
        long k = strtol(name + 8, &end, 10);
        if (errno == 0 && end != name + 8 && *end == '\0' && k >= 1 && k <= INT32_MAX) {
            pl = SCHED_HALDA;
            rounds = (int32_t)k;
        }
    }
    if (pl < 0) {
        return lares_fail(err, LARES_EINVAL,
                          "plan: unknown placement '%s' (halda, even, memory, single, or "
                          "halda:k=N for N rounds)",
                          name);
    }
    sched_opts so = sched_opts_default();
    so.placement = (sched_placement)pl;
    so.rounds = rounds;
    if (o->net_latency_ms >= 0 || o->net_bandwidth != NULL) {
        double bw;
        if (!(o->net_latency_ms >= 0) || o->net_bandwidth == NULL ||
            !sched_parse_rate(o->net_bandwidth, &bw) || !(bw > 0)) {
            return lares_fail(err, LARES_EINVAL,
                              "plan: a default hop needs a latency >= 0 ms and a bandwidth like "
                              "300Mbit/s (got %g ms, '%s')",
                              o->net_latency_ms, o->net_bandwidth ? o->net_bandwidth : "");
        }
        so.net_default = (sched_hop){o->net_latency_ms / 1e3, bw};
    }
    sched_model *m = NULL;
    sched_device *devs = NULL;
    sched_link *links = NULL;
    size_t n = 0, nl = 0;
    sched_plan *p = NULL;
    sched_alternative alts[SCHED_PLACEMENT_COUNT];
    size_t n_alts = 0;
    memset(alts, 0, sizeof alts);
    lares_status st = o->model_path ? sched_model_from_path(o->model_path, &m, err)
                                    : sched_model_from_shape(o->shape, &m, err);
    if (st != LARES_OK) {
        goto done;
    }
    /* the devices file's own default network wins over none, the option over both */
    sched_hop file_net = so.net_default;
    if ((st = sched_devices_parse(devices_json, len, what, &devs, &n, &links, &nl, &file_net,
                                  err)) != LARES_OK) {
        goto done;
    }
    if (!(o->net_latency_ms >= 0)) {
        so.net_default = file_net;
    }
    so.links = links;
    so.n_links = nl;
    if (o->n_ctx > 0) {
        so.n_ctx = o->n_ctx;
    } else {
        so.n_ctx = m->n_ctx_train > 0 ? LARES_MIN(m->n_ctx_train, 4096) : 4096;
    }
    if ((st = sched_plan_make(m, devs, n, &so, &p, err)) != LARES_OK) {
        goto done;
    }
    /* the other placements, priced by the same model, with the same head */
    for (int q = 0; q < SCHED_PLACEMENT_COUNT; q++) {
        if (q == pl) {
            continue;
        }
        sched_opts bo = so;
        bo.placement = (sched_placement)q;
        if (so.head < 0) {
            bo.head = (int32_t)p->head;
        }
        sched_alternative *a = &alts[n_alts++];
        a->placement = bo.placement;
        lares_error berr = {0};
        sched_plan *bp = NULL;
        if (sched_plan_make(m, devs, n, &bo, &bp, &berr) == LARES_OK) {
            a->plan = bp;
        } else {
            snprintf(a->error, sizeof a->error, "%s", berr.msg);
        }
    }
    st = sched_plan_to_json(p, alts, n_alts, m, devs, &so, json_out, err);
done:
    for (size_t i = 0; i < n_alts; i++) {
        sched_plan_free((sched_plan *)alts[i].plan);
    }
    sched_plan_free(p);
    sched_model_free(m);
    lares_free(devs);
    lares_free(links);
    return st;
}
