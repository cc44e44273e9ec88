/*
 * Automatic placement of a ring (issue 7, docs/ring.md "Automatic
 * placement"): the head gathers what every device can do (the workers'
 * profiles, sent in WELCOME; its own, measured here), measures each hop with
 * a probe plan, and asks the planner (sched_plan_make: Halda, or a baseline)
 * for the windows and the rounds k. Re-plans of such a ring (issue 9) go
 * through sched_replan with what the monitor measured; the caller falls back
 * to cluster_plan_balance when that fails.
 */
#include "api/ring.h"

/* latency and bandwidth of a hop from the least round trips of an empty PING
 * and of one with `filler` bytes (the PONG is empty both times) */
static sched_hop hop_of(uint32_t rtt_us, uint32_t rtt_big_us, uint32_t filler) {
    sched_hop h = {.latency_s = rtt_us / 2e6, .bandwidth_Bps = 1e10};
    if (rtt_big_us > rtt_us) {
        h.bandwidth_Bps = filler / ((double)(rtt_big_us - rtt_us) / 1e6);
    }
    return h;
}

/* the predictions of r->splan per ring.json device (none without a plan) */
static void predictions(api_ring *r) {
    for (int32_t d = 0; d < CLUSTER_MAX_DEVICES; d++) {
        r->predicted_ms[d] = -1;
        r->predicted_token_ms[d] = -1;
    }
    r->predicted_latency_ms = -1;
    if (r->splan == NULL) {
        return;
    }
    for (size_t i = 0; i < r->splan->n; i++) {
        const sched_assign *a = &r->splan->a[i];
        if (a->device < (size_t)CLUSTER_MAX_DEVICES) {
            r->predicted_ms[a->device] = a->t_layer_s * 1e3;
            r->predicted_token_ms[a->device] = a->t_total_s * 1e3;
        }
    }
    r->predicted_latency_ms = r->splan->t_token_s * 1e3;
}

/* a sched plan as a cluster plan over ring.json devices members[] */
static lares_status to_cluster(const sched_plan *p, cluster_plan *out, int32_t *members,
                               lares_error *err) {
    memset(out, 0, sizeof *out);
    bool has_head = false;
    for (size_t i = 0; i < p->n; i++) {
        has_head = has_head || p->a[i].device == 0;
    }
    /* a plan without the head (the "single" baseline on another device): the
     * head joins with no layers, since it embeds and samples */
    const size_t lead = has_head ? 0 : 1;
    if (p->n + lead > CLUSTER_MAX_DEVICES || (has_head && p->a[0].device != 0)) {
        return lares_fail(err, LARES_EINVAL,
                          "the planner's ring (%zu devices) does not start at the head", p->n);
    }
    out->n_layer = p->n_layer;
    out->n_dev = (int32_t)(p->n + lead);
    members[0] = 0;
    for (size_t i = 0; i < p->n; i++) {
        members[i + lead] = (int32_t)p->a[i].device;
        out->w[i + lead] = p->a[i].w;
        out->n[i + lead] = p->a[i].n_gpu;
    }
    return cluster_plan_check(out, err);
}

/* the head's own profile, under its ring.json name */
static lares_status head_profile(lares_session *s, api_ring *r, sched_device *d, lares_error *err) {
    sched_profile_opts po = sched_profile_opts_default();
    po.disk_path = s->lm->path;
    po.name = r->rc->dev[0].name[0] != '\0' ? r->rc->dev[0].name : "head";
    po.n_threads = s->o.n_threads;
    po.budget_ms =
        (uint32_t)(r->rc->profile_ms > 0 ? r->rc->profile_ms : CLUSTER_DEFAULT_PROFILE_MS);
    po.cache_dir = s->o.ring_profile_cache;
    po.run_windows = api_run_windows; /* the rates fitted to this model's windows */
    sched_profile_info info;
    const uint64_t t0 = lares_now_ns();
    lares_status st = sched_profile_run(&po, d, &info, err);
    if (st != LARES_OK) {
        lares_error_prefix(err, "the head's profile: ");
    } else {
        lares_log(LARES_LOG_INFO, "cluster: the head's profile: %s in %.0f ms",
                  info.cached ? "cached" : "measured", (double)(lares_now_ns() - t0) / 1e6);
    }
    return st;
}

/* worker d's profile from its WELCOME */
static lares_status worker_profile(api_ring *r, int32_t d, sched_device *out, lares_error *err) {
    const cluster_device_stats *ds = cluster_head_device(r->head, d);
    const cluster_ring_device *rd = cluster_head_ring_device(r->head, d);
    if (ds->welcome.profile[0] == '\0') {
        return lares_fail(err, LARES_EPROTO,
                          "%s (%s) sent no profile (it could not measure itself; its log says "
                          "why); give the ring explicit windows instead",
                          rd->name, rd->address);
    }
    char what[CLUSTER_MAX_NAME + 32];
    snprintf(what, sizeof what, "the profile of %s", rd->name);
    sched_device *devs = NULL;
    size_t n = 0;
    lares_status st = sched_devices_parse(ds->welcome.profile, strlen(ds->welcome.profile), what,
                                          &devs, &n, NULL, NULL, NULL, err);
    if (st == LARES_OK && n != 1) {
        st = lares_fail(err, LARES_EPROTO, "%s (%s): its profile holds %zu devices, not one",
                        rd->name, rd->address, n);
    }
    if (st == LARES_OK) {
        *out = devs[0];
    }
    lares_free(devs);
    return st;
}

/* defined below: the planner over a subset of the devices */
static lares_status replan_subset(api_ring *r, const sched_opts *o, const sched_measured *meas,
                                  const int32_t *cand, int32_t n, lares_error *err);

/* Device d's entry for the planner from its profile: its ring.json name,
 * "memory" capping its RAM, and (until measured) the hop of `hop`. */
static void fill_device(api_ring *r, int32_t d, sched_device *dv, sched_hop hop) {
    snprintf(dv->name, sizeof dv->name, "%s", r->rc->dev[d].name);
    dv->head = d == 0;
    const uint64_t cap = r->rc->dev[d].memory_bytes;
    if (cap > 0 && cap < dv->ram_avail_bytes) {
        dv->ram_avail_bytes = cap; /* ring.json "memory": the most it gives */
    }
    dv->net_out = hop;
}

lares_status ring_plan_auto(lares_session *s, api_ring *r, const int32_t *cand, int32_t n_cand,
                            cluster_plan *plan, int32_t *members, lares_error *err) {
    cluster_head *h = r->head;
    const int32_t n = r->n_cfg;
    const char *what = r->rc->placement[0] != '\0' ? r->rc->placement : "halda";
    const int pl = sched_placement_from_name(what);
    if (pl < 0) {
        return lares_fail(err, LARES_EINVAL, "%s: unknown \"placement\" \"%s\"", r->rc->path, what);
    }
    snprintf(r->placement, sizeof r->placement, "%s", what);
    /* the probe plan: every candidate linked to its successor in ring.json
     * order, each measuring that hop */
    cluster_plan probe;
    lares_status st = cluster_plan_even(n_cand, plan->n_layer, 0, &probe, err);
    if (st == LARES_OK && n_cand > 1) {
        st = cluster_head_set_plan(h, &probe, cand, CLUSTER_PLAN_PROBE, err);
    }
    r->devs = lares_calloc((size_t)n, sizeof *r->devs);
    if (st == LARES_OK && r->devs == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    if (st == LARES_OK) {
        st = head_profile(s, r, &r->devs[0], err);
    }
    for (int32_t i = 1; i < n_cand && st == LARES_OK; i++) {
        st = worker_profile(r, cand[i], &r->devs[cand[i]], err);
    }
    sched_hop first = {.latency_s = 0, .bandwidth_Bps = 1e10};
    for (int32_t i = 0; i < n_cand && st == LARES_OK; i++) {
        const int32_t d = cand[i];
        uint32_t rtt = 0, rtt_big = 0;
        if (n_cand == 1) {
            fill_device(r, d, &r->devs[d], first);
            r->profiled[d] = true;
            continue;
        }
        if (d == 0) {
            st = cluster_head_ping(h, cand[1], 0, 3, &rtt, err);
            if (st == LARES_OK) {
                st = cluster_head_ping(h, cand[1], CLUSTER_PROBE_PING_BYTES, 3, &rtt_big, err);
            }
        } else {
            rtt = cluster_head_device(h, d)->hop_rtt_us;
            rtt_big = cluster_head_device(h, d)->hop_rtt_big_us;
        }
        if (st == LARES_OK && rtt == 0) {
            st = lares_fail(err, LARES_EPROTO, "%s (%s) did not measure its hop to the next device",
                            r->rc->dev[d].name, r->rc->dev[d].address);
        }
        const sched_hop hop = hop_of(rtt, rtt_big, CLUSTER_PROBE_PING_BYTES);
        first = i == 0 ? hop : first;
        fill_device(r, d, &r->devs[d], hop);
        r->profiled[d] = true;
    }
    /* devices that did not answer: the head's profile stands in (excluded
     * from every plan until they answer and bring their own) */
    for (int32_t d = 1; d < n && st == LARES_OK; d++) {
        if (!r->profiled[d]) {
            r->devs[d] = r->devs[0];
            fill_device(r, d, &r->devs[d], first);
        }
    }
    if (st == LARES_OK) {
        st = sched_model_from_gguf(s->lm->file, &r->sm, err);
    }
    if (st == LARES_OK) {
        r->so = sched_opts_default();
        r->so.placement = (sched_placement)pl;
        r->so.n_ctx = s->o.n_ctx;
        r->so.head = 0;
        r->so.keep_order = true;
        r->so.kv_elem_bytes = (uint32_t)ops_kv_elem_bytes(s->kv->type);
        r->so.hidden_elem_bytes = r->rc->act_dtype == CLUSTER_DTYPE_F16 ? 2 : 4;
        r->so.rounds = r->rc->rounds;
        if (n_cand == n) {
            st = sched_plan_make(r->sm, r->devs, (size_t)n, &r->so, &r->splan, err);
        } else {
            sched_measured meas[CLUSTER_MAX_DEVICES];
            for (int32_t d = 0; d < n; d++) {
                sched_measured_init(&meas[d]);
            }
            st = replan_subset(r, &r->so, meas, cand, n_cand, err);
            r->splan = r->splan_next;
            r->splan_next = NULL;
        }
        if (st != LARES_OK) {
            lares_error_prefix(err, "automatic placement (%s) over %d devices: ", what, n_cand);
        }
    }
    if (st == LARES_OK) {
        st = to_cluster(r->splan, plan, members, err);
    }
    if (st != LARES_OK) {
        return st;
    }
    r->planned = true;
    predictions(r);
    lares_log(LARES_LOG_INFO,
              "cluster: %s placed %d layers on %zu of %d devices, k = %d, predicted %.2f ms "
              "per token (planned in %.1f ms)",
              what, plan->n_layer, r->splan->n, n, r->splan->k, r->predicted_latency_ms,
              r->splan->solve_s * 1e3);
    return LARES_OK;
}

void ring_plan_profiles(api_ring *r) {
    if (!r->planned) {
        return;
    }
    for (int32_t d = 1; d < r->n_cfg; d++) {
        if (r->profiled[d] || !cluster_head_usable(r->head, d)) {
            continue;
        }
        sched_device dv;
        lares_error err = {0};
        if (worker_profile(r, d, &dv, &err) != LARES_OK) {
            lares_log(LARES_LOG_WARN, "cluster: %s", err.msg);
            continue;
        }
        /* its hop is not measured yet: the head's stands in */
        fill_device(r, d, &dv, r->devs[0].net_out);
        r->devs[d] = dv;
        r->profiled[d] = true;
    }
}

/* sched_replan's steps with the excluded devices taken out of the array:
 * the profiles calibrated by what was measured under the plan in force, a
 * plan over the candidates cand[0..n) alone, and that plan's windows as a
 * plan over every device (so the next re-plan can calibrate against it) */
static lares_status replan_subset(api_ring *r, const sched_opts *o, const sched_measured *meas,
                                  const int32_t *cand, int32_t n, lares_error *err) {
    const size_t n_all = (size_t)r->n_cfg;
    sched_device *cal = lares_calloc(n_all + (size_t)n, sizeof *cal);
    if (cal == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    sched_device *sub = cal + n_all;
    sched_opts so = *o;
    so.exclude = NULL;
    lares_status st = LARES_OK;
    if (r->splan != NULL) {
        st = sched_devices_calibrate(r->sm, r->devs, n_all, &so, r->splan, meas, cal, err);
    } else {
        memcpy(cal, r->devs, n_all * sizeof *cal);
    }
    for (int32_t i = 0; i < n && st == LARES_OK; i++) {
        sub[i] = cal[cand[i]];
    }
    sched_plan *p = NULL;
    if (st == LARES_OK) {
        st = sched_plan_make(r->sm, sub, (size_t)n, &so, &p, err);
    }
    size_t ring[CLUSTER_MAX_DEVICES];
    int32_t w[CLUSTER_MAX_DEVICES], g[CLUSTER_MAX_DEVICES];
    if (st == LARES_OK) {
        for (size_t i = 0; i < p->n; i++) {
            ring[i] = (size_t)cand[p->a[i].device];
            w[i] = p->a[i].w;
            g[i] = p->a[i].n_gpu;
        }
        so.placement = p->placement;
        st = sched_plan_from_windows(r->sm, cal, n_all, &so, ring, w, g, p->n, &r->splan_next, err);
    }
    sched_plan_free(p);
    lares_free(cal);
    return st;
}

/* Learning while generating: the profiles become the devices as the monitor
 * measured them under the plan in force (sched_devices_calibrate: compute
 * rates, disk, memory budget, hop), so every later plan -- this re-plan, a
 * failover after the monitor was reset, a device re-joining -- starts from
 * measured rates, not from the profile alone. Devices without samples keep
 * what they had. The fit is absolute (the model under the plan in force
 * reproduces what was measured), so learning twice from the same figures
 * changes nothing, and sched_replan's own calibration over the learned
 * devices is the identity. */
static void learn(api_ring *r, const sched_measured *meas) {
    if (r->splan == NULL || r->splan->n_devices != (size_t)r->n_cfg) {
        return;
    }
    const size_t n = (size_t)r->n_cfg;
    sched_device *cal = lares_calloc(n, sizeof *cal);
    if (cal == NULL) {
        return;
    }
    sched_opts o = r->so;
    o.exclude = NULL;
    lares_error err = {0};
    if (sched_devices_calibrate(r->sm, r->devs, n, &o, r->splan, meas, cal, &err) != LARES_OK) {
        lares_log(LARES_LOG_WARN, "cluster: the measured figures do not fit the model: %s",
                  err.msg);
        lares_free(cal);
        return;
    }
    for (size_t d = 0; d < n; d++) {
        if (meas[d].samples > 0 && meas[d].layer_s > 0 && cal[d].mem_bw_Bps > 0) {
            lares_log(LARES_LOG_INFO,
                      "cluster: measured rates: %s computes at %.2fx its profile's time "
                      "(%.3f ms per layer over %d windows)",
                      r->devs[d].name, r->devs[d].mem_bw_Bps / cal[d].mem_bw_Bps,
                      meas[d].layer_s * 1e3, meas[d].samples);
        }
    }
    lares_free(r->devs);
    r->devs = cal;
}

lares_status ring_plan_replan(api_ring *r, const int32_t *cand, int32_t n, cluster_plan *out,
                              int32_t *members, lares_error *err) {
    bool exclude[CLUSTER_MAX_DEVICES];
    sched_measured meas[CLUSTER_MAX_DEVICES];
    for (int32_t d = 0; d < r->n_cfg; d++) {
        exclude[d] = true;
        sched_measured_init(&meas[d]);
        const cluster_monitor_dev *md = &r->mon.dev[d];
        if (md->samples > 0 && md->ewma_ms > 0) {
            const double wait = md->wait_ewma_ms > 0 ? md->wait_ewma_ms : 0;
            meas[d].samples = md->samples;
            meas[d].layer_s = LARES_MAX(md->ewma_ms - wait, md->ewma_ms * 1e-3) / 1e3;
            meas[d].wait_s = wait * md->layers / 1e3;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        exclude[cand[i]] = false;
    }
    sched_opts o = r->so;
    o.exclude = exclude;
    learn(r, meas);
    /* the monitor's figures were taken under the plan in force; without the
     * planner's (a fallback made it) only memory and hops would count */
    sched_plan_free(r->splan_next);
    r->splan_next = NULL;
    lares_status st =
        sched_replan(r->sm, r->devs, (size_t)r->n_cfg, &o, r->splan, meas, &r->splan_next, err);
    bool uses_excluded = false;
    for (size_t i = 0; st == LARES_OK && i < r->splan_next->n; i++) {
        uses_excluded = uses_excluded || exclude[r->splan_next->a[i].device];
    }
    if (uses_excluded) {
        /* a planner that ignores exclude[] (src/sched before it honours it):
         * the same steps over the candidates alone */
        sched_plan_free(r->splan_next);
        r->splan_next = NULL;
        st = replan_subset(r, &o, meas, cand, n, err);
    }
    if (st == LARES_OK) {
        st = to_cluster(r->splan_next, out, members, err);
    }
    if (st != LARES_OK) {
        sched_plan_free(r->splan_next);
        r->splan_next = NULL;
    }
    return st;
}

void ring_plan_adopt(api_ring *r) {
    if (!r->planned) {
        return;
    }
    sched_plan_free(r->splan);
    r->splan = r->splan_next;
    r->splan_next = NULL;
    predictions(r);
}

void ring_plan_free(api_ring *r) {
    sched_plan_free(r->splan);
    sched_plan_free(r->splan_next);
    sched_model_free(r->sm);
    lares_free(r->devs);
}
