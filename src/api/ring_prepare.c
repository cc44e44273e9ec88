/*
 * Fetching in the background (issue 19, docs/ring.md "Fetching in the
 * background"): a re-plan, a re-balance or a failover that gives a worker
 * without the model file layers it lacks is put in force in two steps. The
 * head sends those workers the coming plan (PREPARE); each fetches the
 * weights of its new windows on a thread of its own while its compute thread
 * serves the plan in force, and answers PREPARED. The ring keeps generating
 * meanwhile; between two tokens after the last answer the head switches with
 * ring_switch_plan, and the workers' PLAN handling then finds everything in
 * their caches (only hash checks).
 *
 * A failover cannot keep the old plan (a device is gone): it switches at
 * once to an interim plan that fetches nothing (the lost windows go to a
 * neighbour that holds their tensors: the head, which has the whole file and
 * may stream it, or a worker with the file) and prepares the planner's plan
 * in the background. A prepare that fails (the worker's cache is full, a
 * tensor fails its hash three times, the worker is lost) leaves the plan in
 * force, logged; the monitor takes the figures as they are (as a re-plan
 * weighed and refused), so the same plan is not asked for again at once.
 */
#include "api/ring.h"

/* a worker asked that fetches nothing and does not answer for this long is
 * given up (its answer may have been lost with a connection that came back) */
#define PREPARE_STALL_NS (60ull * 1000000000u)

/* the layers device `i` of plan p holds, as a bit per layer */
static void held(const cluster_plan *p, int32_t i, uint8_t *bits) {
    memset(bits, 0, (size_t)(p->n_layer + 7) / 8);
    for (int32_t k = 0; i >= 0 && k < cluster_plan_rounds(p); k++) {
        int32_t l0, l1;
        if (cluster_plan_window(p, i, k, &l0, &l1)) {
            for (int32_t l = l0; l < l1; l++) {
                bits[l / 8] |= (uint8_t)(1u << (l % 8));
            }
        }
    }
}

/* the plan index of ring.json device d in the plan in force, -1 none */
static int32_t index_in_force(const api_ring *r, int32_t d) {
    const cluster_plan *q = cluster_head_plan(r->head);
    for (int32_t i = 0; i < q->n_dev; i++) {
        if (cluster_head_member(r->head, i) == d) {
            return i;
        }
    }
    return -1;
}

int32_t ring_prepare_needs(const api_ring *r, const cluster_plan *p, const int32_t *members,
                           bool *ask) {
    const cluster_plan *q = cluster_head_plan(r->head);
    const size_t nb = (size_t)(p->n_layer + 7) / 8;
    uint8_t *now = lares_alloc(2 * nb);
    int32_t n = 0;
    for (int32_t d = 0; d < CLUSTER_MAX_DEVICES; d++) {
        ask[d] = false;
    }
    if (now == NULL) {
        return 0; /* no memory to tell: the switch fetches as it goes */
    }
    uint8_t *next = now + nb;
    for (int32_t i = 1; i < p->n_dev; i++) {
        const int32_t d = members[i];
        if (!cluster_head_fetches(r->head, d)) {
            continue; /* it reads its own file */
        }
        held(q, index_in_force(r, d), now);
        held(p, i, next);
        for (size_t b = 0; b < nb && !ask[d]; b++) {
            ask[d] = (next[b] & ~now[b]) != 0;
        }
        n += ask[d];
    }
    lares_free(now);
    return n;
}

bool ring_prepare_start(lares_session *s, const cluster_plan *p, const int32_t *members,
                        const char *kind, const char *why) {
    api_ring *r = s->ring;
    bool ask[CLUSTER_MAX_DEVICES];
    if (ring_prepare_needs(r, p, members, ask) == 0) {
        return false;
    }
    lares_error err = {0};
    if (cluster_head_prepare(r->head, p, members, ask, &err) != LARES_OK) {
        lares_log(LARES_LOG_WARN, "cluster: %s: cannot ask the workers to fetch in the "
                  "background (%s); the switch waits for the weights", kind, err.msg);
        cluster_head_prepare_off(r->head);
        return false;
    }
    r->pending.on = true;
    r->pending.plan = *p;
    memcpy(r->pending.members, members, sizeof r->pending.members);
    memcpy(r->pending.asked, ask, sizeof r->pending.asked);
    snprintf(r->pending.kind, sizeof r->pending.kind, "%s", kind);
    snprintf(r->pending.why, sizeof r->pending.why, "%s", why);
    r->pending.t0_ns = r->pending.moved_ns = lares_now_ns();
    r->pending.tokens = 0;
    r->pending.shipped = 0;
    char names[512] = "", desc[256];
    size_t n = 0;
    for (int32_t d = 1; d < r->n_cfg && n < sizeof names; d++) {
        if (ask[d]) {
            const int w = snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "",
                                   cluster_head_ring_device(r->head, d)->name);
            n += w > 0 ? (size_t)w : 0;
        }
    }
    ring_describe(r, p, members, desc, sizeof desc);
    lares_log(LARES_LOG_INFO,
              "cluster: %s: plan %s waits for %s to fetch new layers in the background; the "
              "ring keeps generating with the plan in force",
              kind, desc, names);
    return true;
}

void ring_prepare_drop(api_ring *r) {
    if (r->pending.on) {
        r->fetch_tokens += r->pending.tokens;
    }
    r->pending.on = false;
    cluster_head_prepare_off(r->head);
}

/* a prepare failed: the plan in force stays; not asked again at once */
static void give_up(lares_session *s, int32_t dev, const char *what) {
    api_ring *r = s->ring;
    const cluster_ring_device *rd = cluster_head_ring_device(r->head, dev);
    lares_log(LARES_LOG_WARN,
              "cluster: %s not put in force: %s (%s) could not fetch its new layers in the "
              "background (%s) after %" PRIu64 " token(s); the plan in force stays",
              r->pending.kind, rd->name, rd->address, what, r->pending.tokens);
    r->prepare_failures++;
    ring_prepare_drop(r);
    /* as a re-plan weighed and refused: the figures now are the reference,
     * so the same decision waits for the monitor's hold again */
    cluster_monitor_accept(&r->mon);
}

bool ring_prepare_due(const api_ring *r) {
    if (!r->pending.on) {
        return false;
    }
    bool ready = true;
    for (int32_t d = 1; d < r->n_cfg; d++) {
        if (!r->pending.asked[d]) {
            continue;
        }
        const cluster_prep_state ps = cluster_head_prep_state(r->head, d, NULL, NULL);
        if (ps == CLUSTER_PREP_FAILED || (!cluster_head_usable(r->head, d) &&
                                          cluster_head_state(r->head, d) != CLUSTER_DEV_SUSPECT)) {
            return true; /* given up: the plan in force stays */
        }
        ready = ready && ps == CLUSTER_PREP_READY;
    }
    return ready || lares_now_ns() - r->pending.moved_ns > PREPARE_STALL_NS;
}

lares_status ring_prepare_poll(lares_session *s, int32_t nb, lares_error *err) {
    api_ring *r = s->ring;
    if (!r->pending.on) {
        return LARES_OK;
    }
    cluster_head_drain(r->head); /* the answers that came */
    uint64_t fetched = 0;
    bool ready = true;
    for (int32_t d = 1; d < r->n_cfg; d++) {
        uint64_t f = 0;
        const char *why = NULL;
        const cluster_prep_state ps = r->pending.asked[d]
                                          ? cluster_head_prep_state(r->head, d, &f, &why)
                                          : CLUSTER_PREP_READY;
        bool member = false;
        for (int32_t i = 0; i < r->pending.plan.n_dev; i++) {
            member = member || r->pending.members[i] == d;
        }
        const cluster_dev_state ds = cluster_head_state(r->head, d);
        if (member && !cluster_head_usable(r->head, d) && ds != CLUSTER_DEV_SUSPECT) {
            give_up(s, d, cluster_head_why(r->head, d)[0] ? cluster_head_why(r->head, d)
                                                          : "it is not usable any more");
            return LARES_OK;
        }
        if (ps == CLUSTER_PREP_FAILED) {
            give_up(s, d, why != NULL && why[0] ? why : "no reason given");
            return LARES_OK;
        }
        ready = ready && ps == CLUSTER_PREP_READY;
        fetched += f;
    }
    if (!ready) {
        uint64_t shipped = 0;
        int32_t waiting = 0;
        for (int32_t d = 1; d < r->n_cfg; d++) {
            if (r->pending.asked[d]) {
                shipped += cluster_head_shipped(r->head, d);
                waiting = cluster_head_prep_state(r->head, d, NULL, NULL) == CLUSTER_PREP_ASKED
                              ? d
                              : waiting;
            }
        }
        const uint64_t now = lares_now_ns();
        if (shipped != r->pending.shipped) {
            r->pending.shipped = shipped;
            r->pending.moved_ns = now;
        } else if (now - r->pending.moved_ns > PREPARE_STALL_NS && waiting > 0) {
            give_up(s, waiting, "no answer and nothing fetched for 60 s");
            return LARES_OK;
        }
        r->pending.tokens += nb == 1 ? 1u : 0u; /* this one runs under the plan in force */
        return LARES_OK;
    }
    const double secs = (double)(lares_now_ns() - r->pending.t0_ns) / 1e9;
    char how[512], kind[32], why[1536];
    snprintf(how, sizeof how,
             "weights prepared in the background: %.2f MiB fetched while %" PRIu64
             " token(s) were generated (%.2f s)",
             (double)fetched / 1048576.0, r->pending.tokens, secs);
    snprintf(kind, sizeof kind, "%s", r->pending.kind);
    snprintf(why, sizeof why, "%s", r->pending.why);
    cluster_plan p = r->pending.plan;
    int32_t members[CLUSTER_MAX_DEVICES];
    memcpy(members, r->pending.members, sizeof members);
    r->prepared_switches++;
    if (strcmp(kind, "failover") != 0) {
        atomic_fetch_add(&r->replans, 1); /* a failover was counted at the loss */
    }
    return ring_switch_plan(s, &p, members, kind, why, how, err); /* drops pending */
}

bool ring_interim_plan(const api_ring *r, cluster_plan *out, int32_t *members, char *why,
                       size_t cap) {
    const cluster_head *h = r->head;
    const cluster_plan *q = cluster_head_plan(h);
    int32_t dev[CLUSTER_MAX_DEVICES], w[CLUSTER_MAX_DEVICES], gpu[CLUSTER_MAX_DEVICES];
    bool lost[CLUSTER_MAX_DEVICES];
    int32_t n = q->n_dev;
    for (int32_t i = 0; i < n; i++) {
        dev[i] = cluster_head_member(h, i);
        w[i] = q->w[i];
        gpu[i] = q->n[i];
        lost[i] = i > 0 && cluster_head_state(h, dev[i]) == CLUSTER_DEV_LOST;
    }
    /* A window merged into its predecessor (which then ends where it ended)
     * or its successor (which then starts where it started) leaves every
     * other window where it is: nobody else gains a layer. */
    for (int32_t i = 1; i < n; i++) {
        if (!lost[i]) {
            continue;
        }
        int32_t to = -1;
        for (int32_t pass = 0; pass < 2 && to < 0; pass++) {
            int32_t j = i;
            do {
                j += pass == 0 ? -1 : 1;
            } while (j >= 0 && j < n && lost[j]);
            if (j < 0 || j >= n) {
                continue;
            }
            if (dev[j] != 0 && cluster_head_fetches(h, dev[j])) {
                continue; /* it would fetch the lost layers */
            }
            int32_t cap_layers;
            bool stream;
            ring_capacity(r, dev[j], &cap_layers, &stream);
            const int32_t layers = (w[j] + w[i]) * cluster_plan_rounds(q);
            if (layers <= cap_layers || stream) {
                to = j;
            }
        }
        if (to < 0) {
            const cluster_ring_device *rd = cluster_head_ring_device(h, dev[i]);
            snprintf(why, cap,
                     "the neighbours of %s's windows have no copy of its layers (workers without "
                     "the model file) or no room for them",
                     rd->name);
            return false;
        }
        w[to] += w[i];
        w[i] = 0;
    }
    *out = (cluster_plan){.n_layer = q->n_layer};
    for (int32_t i = 0; i < n; i++) {
        if (!lost[i]) {
            members[out->n_dev] = dev[i];
            out->w[out->n_dev] = w[i];
            out->n[out->n_dev] = LARES_MIN(gpu[i], w[i]);
            out->n_dev++;
        }
    }
    lares_error err = {0};
    if (cluster_plan_check(out, &err) != LARES_OK) {
        snprintf(why, cap, "%s", err.msg);
        return false;
    }
    return true;
}
