/*
 * The head's ring path (docs/ring.md): the session embeds, runs its own
 * windows through its executor, sends the hidden states around the ring
 * between them, and takes the output once the last layer is done. Every
 * single-token pass feeds the monitor (issue 9); when it says a device drifted,
 * or a member is lost, ring_switch.c puts a new plan in force between tokens.
 */
#include "api/ring.h"
#include "api/ring_fetch.h"
#include "mem/mem.h"

#include <stdlib.h>
#include <unistd.h>

void api_ring_free(api_ring *r) {
    if (r == NULL) {
        return;
    }
    cluster_head_close(r->head);
    ring_plan_free(r);
    lares_free(r->rc);
    lares_free(r->windows);
    lares_free(r->x_saved);
    lares_free(r->pos_saved);
    for (int32_t i = 0; r->slots != NULL && i < r->n_slots; i++) {
        lares_free(r->slots[i].mirrored);
        lares_free(r->slots[i].batch_start);
    }
    lares_free(r->slots);
    pthread_mutex_destroy(&r->view_mu);
    free(r->view); /* jansson's allocation */
    if (r->state_path != NULL) {
        unlink(r->state_path); /* no head runs this ring any more */
        lares_free(r->state_path);
    }
    lares_free(r);
}

/* positions [pos0, pos0 + n) of `layer` are in the head's cache: the copy
 * grows when they follow what it holds */
void ring_mirror_note(api_ring *r, uint32_t slot, int32_t layer, int32_t pos0, int32_t n) {
    int32_t *m = slot < (uint32_t)r->n_slots ? r->slots[slot].mirrored : NULL;
    if (m != NULL && pos0 <= m[layer]) {
        m[layer] = LARES_MAX(m[layer], pos0 + n);
    }
}

void ring_slot_rewind(api_ring *r, uint32_t slot, int32_t pos0) {
    ring_slot *sl = &r->slots[slot];
    for (int32_t l = 0; l < cluster_head_plan(r->head)->n_layer; l++) {
        sl->mirrored[l] = LARES_MIN(sl->mirrored[l], pos0); /* this pass overwrites the rest */
    }
}

void ring_slot_ran(api_ring *r, uint32_t slot, int32_t pos0, int32_t n) {
    ring_slot *sl = &r->slots[slot];
    /* a slot of a batch reaches exactly as far as its last pass (the members
     * forget the rest: cluster/worker_compute.c); slot 0 only grows here */
    sl->synced = slot == 0 ? LARES_MAX(sl->synced, pos0 + n) : pos0 + n;
    /* the pass's shape, for an exact re-run after a plan change */
    sl->batch_start[pos0] = 1;
    for (int32_t i = 1; i < n; i++) {
        sl->batch_start[pos0 + i] = 0;
    }
}

/* a member's KV_MIRROR rows (cluster_head_opts.kv_mirror): into the head's
 * cache of that slot, which the head does not use for layers it does not hold */
static void mirror_rows(void *user, uint32_t slot, int32_t layer, int32_t pos0, int32_t n,
                        const uint8_t *k, const uint8_t *v) {
    lares_session *s = user;
    api_ring *r = s->ring;
    if (r == NULL || slot >= (uint32_t)r->n_slots || r->slots[slot].kv == NULL ||
        pos0 > r->slots[slot].mirrored[layer]) {
        return; /* a gap (a frame lost): the copy stops there; a re-plan re-runs the rest */
    }
    model_kv_rows(r->slots[slot].kv, layer, pos0, n, true, (uint8_t *)k, (uint8_t *)v);
    ring_mirror_note(r, slot, layer, pos0, n);
}

/* slot i's own tables (mirror copy, pass starts), empty */
static lares_status slot_tables(ring_slot *sl, int32_t n_layer, int32_t n_ctx) {
    sl->mirrored = lares_calloc((size_t)n_layer, sizeof *sl->mirrored);
    sl->batch_start = lares_calloc((size_t)n_ctx, 1);
    return sl->mirrored != NULL && sl->batch_start != NULL ? LARES_OK : LARES_ENOMEM;
}

lares_status ring_bind_slots(lares_session *s, int32_t n, model_kv *const *kv,
                             const int32_t *const *history, lares_error *err) {
    api_ring *r = s->ring;
    const int32_t n_layer = s->lm->m->hp.n_layer;
    if (n < 1 || n + 1 > CLUSTER_MAX_SLOTS || r->n_slots != 1) {
        return lares_fail(err, LARES_EINVAL, "ring: %d sequences (1 to %d, once)", (int)n,
                          CLUSTER_MAX_SLOTS - 1);
    }
    ring_slot *all = lares_realloc(r->slots, (size_t)(n + 1) * sizeof *all);
    if (all == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    r->slots = all;
    memset(all + 1, 0, (size_t)n * sizeof *all);
    r->n_slots = n + 1;
    for (int32_t i = 0; i < n; i++) {
        all[i + 1].kv = kv[i];
        all[i + 1].history = history[i];
        if (slot_tables(&all[i + 1], n_layer, s->o.n_ctx) != LARES_OK) {
            return lares_fail(err, LARES_ENOMEM, "out of memory");
        }
    }
    /* every member keeps a cache per slot from now on: the plan in force
     * again, with its slots (the entries held stay: the same windows) */
    const cluster_plan *p = cluster_head_plan(r->head);
    int32_t members[CLUSTER_MAX_DEVICES];
    for (int32_t i = 0; i < p->n_dev; i++) {
        members[i] = cluster_head_member(r->head, i);
    }
    const cluster_plan now = *p;
    cluster_head_set_slots(r->head, (uint32_t)r->n_slots);
    lares_error e = {0};
    lares_status st = now.n_dev > 1
                          ? cluster_head_set_plan(r->head, &now, members, CLUSTER_PLAN_KEEP_KV, &e)
                          : LARES_OK;
    if (st != LARES_OK && strstr(e.msg, "unknown flags") != NULL) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "a worker built before batches over a ring (PLAN flag 8) cannot serve "
                          "several sequences at once: %s",
                          e.msg);
    }
    if (st != LARES_OK && err != NULL) {
        *err = e;
    }
    return st;
}

void ring_bind_groups(api_ring *r, ring_group *groups, int32_t n) {
    r->groups = groups;
    r->n_groups = groups != NULL ? n : 0;
}

/* the head's windows, round by round, for its executor */
static void head_windows(api_ring *r, const cluster_plan *p) {
    const int32_t rounds = cluster_plan_rounds(p);
    r->n_windows = 0;
    for (int32_t k = 0; k < rounds; k++) {
        int32_t l0, l1;
        if (cluster_plan_window(p, 0, k, &l0, &l1)) {
            r->windows[r->n_windows++] = (exec_window){l0, l1};
        }
    }
    if (r->n_windows == 0) {
        /* A head holding no layers: exec has no "no layers" (n_windows 0 means
         * "the KV cache's layers"), so it gets layer 0, which it never runs; a
         * streaming executor reads it ahead and releases it unused. */
        r->windows[r->n_windows++] = (exec_window){0, 1};
    }
}

void ring_layers_by_device(const api_ring *r, int32_t *layers) {
    const cluster_plan *p = cluster_head_plan(r->head);
    for (int32_t d = 0; d < r->n_cfg; d++) {
        layers[d] = 0;
    }
    for (int32_t i = 0; i < p->n_dev; i++) {
        layers[cluster_head_member(r->head, i)] = cluster_plan_layers_of(p, i);
    }
}

/* The largest layer's weights plus its KV cache: the unit of capacity. */
static lares_status device_caps(lares_session *s, api_ring *r, lares_error *err) {
    const model *m = s->lm->m;
    const int32_t n_layer = m->hp.n_layer;
    uint64_t biggest = 0;
    for (int32_t l = 0; l < n_layer; l++) {
        mem_span sp = {0};
        lares_status st = mem_span_of_layer(m->plan, l, true, &sp, err);
        if (st != LARES_OK) {
            mem_span_free(&sp);
            return st;
        }
        biggest = LARES_MAX(biggest, sp.bytes);
        mem_span_free(&sp);
    }
    r->layer_bytes = biggest + s->kv->bytes / (uint64_t)n_layer;
    r->head_budget_bytes = s->mem_budget_bytes == UINT64_MAX ? 0 : s->mem_budget_bytes;
    return LARES_OK;
}

void ring_capacity(const api_ring *r, int32_t d, int32_t *cap_layers, bool *can_stream) {
    const int32_t n_layer = cluster_head_plan(r->head)->n_layer;
    uint64_t mem = r->rc->dev[d].memory_bytes;
    *can_stream = true;
    if (mem != 0) {
        /* ring.json "memory": the most it gives, below one layer not even from disk */
        *can_stream = r->layer_bytes == 0 || mem >= r->layer_bytes;
    } else if (d > 0) {
        /* the budget the worker reported (its cgroup limit or 80 % of its
         * available memory; 0: unknown): beyond it, its layers stream */
        mem = cluster_head_device(r->head, d)->welcome.mem_available_bytes;
    } else {
        mem = r->head_budget_bytes; /* the head's own, the same way */
    }
    *cap_layers = n_layer;
    if (mem != 0 && r->layer_bytes != 0) {
        *cap_layers = (int32_t)LARES_MIN(mem / r->layer_bytes, (uint64_t)n_layer);
    }
}

/* The first plan, over the devices that answered the start's HELLO: the
 * planner's ("auto" windows), ring.json's windows when every device is
 * there, else cluster_plan_balance over those present. Missing devices are
 * named in a warning, or in the error when the others cannot run the model. */
static lares_status start_plan(lares_session *s, api_ring *r, bool planned, cluster_plan *plan,
                               int32_t *members, lares_error *err) {
    int32_t cand[CLUSTER_MAX_DEVICES], n_cand = 0;
    char missing[512] = "", why[1024] = "";
    size_t len = 0, why_len = 0;
    cand[n_cand++] = 0;
    for (int32_t d = 1; d < r->n_cfg; d++) {
        if (cluster_head_usable(r->head, d)) {
            cand[n_cand++] = d;
        } else if (len < sizeof missing) {
            const cluster_ring_device *rd = cluster_head_ring_device(r->head, d);
            const int w = snprintf(missing + len, sizeof missing - len, "%s%s (%s)",
                                   len ? ", " : "", rd->name, rd->address);
            /* the reason is in the warning (the error must stay one short line) */
            if (why_len < sizeof why) {
                const int k = snprintf(why + why_len, sizeof why - why_len, "%s%s (%s): %s",
                                       why_len ? "; " : "", rd->name, rd->address,
                                       cluster_head_why(r->head, d));
                why_len += k > 0 ? (size_t)k : 0;
            }
            len += w > 0 ? (size_t)w : 0;
        }
    }
    lares_status st = LARES_OK;
    if (planned) {
        st = ring_plan_auto(s, r, cand, n_cand, plan, members, err);
    } else if (n_cand < r->n_cfg) {
        /* those present keep ring.json's windows; the missing ones' layers are shared */
        int32_t base[CLUSTER_MAX_DEVICES];
        for (int32_t i = 0; i < n_cand; i++) {
            base[i] = plan->w[cand[i]];
        }
        st = ring_balance(r, cand, n_cand, base, plan, members, err);
    }
    if (n_cand < r->n_cfg) {
        lares_log(LARES_LOG_WARN,
                  "cluster: starting with %d of %d devices; missing: %s; they join the ring "
                  "when they answer",
                  n_cand, r->n_cfg, why);
    }
    if (st != LARES_OK && n_cand < r->n_cfg) {
        lares_error_prefix(err, "%s: started with %d of %d devices (missing %s): ", r->rc->path,
                           n_cand, r->n_cfg, missing);
    } else if (st != LARES_OK) {
        lares_error_prefix(err, "%s: ", r->rc->path);
    }
    return st;
}

static bool choice(int opt, int ring_json) {
    return opt > 0 || (opt == 0 && ring_json != 0);
}

lares_status api_ring_open(lares_session *s, exec_opts *eo, lares_error *err) {
    const model *m = s->lm->m;
    const bool insecure = s->o.ring_insecure;
    api_ring *r = lares_calloc(1, sizeof *r);
    if (r == NULL || (r->rc = lares_calloc(1, sizeof *r->rc)) == NULL) {
        lares_free(r);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&r->view_mu, NULL);
    if (s->o.ring_state_path != NULL && s->o.ring_state_path[0] != '\0') {
        r->state_path = lares_strdup(s->o.ring_state_path); /* NULL: none, not an error */
    }
    r->windows = lares_calloc((size_t)m->hp.n_layer + 1, sizeof *r->windows);
    r->x_saved = lares_alloc_array((size_t)s->o.n_batch * (size_t)m->hp.n_embd, sizeof(float));
    r->pos_saved = lares_alloc_array((size_t)s->o.n_batch, sizeof(int32_t));
    r->slots = lares_calloc(1, sizeof *r->slots);
    r->n_slots = r->slots != NULL ? 1 : 0;
    lares_status st = LARES_OK;
    if (r->windows == NULL || r->x_saved == NULL || r->pos_saved == NULL || r->slots == NULL ||
        slot_tables(&r->slots[0], m->hp.n_layer, s->o.n_ctx) != LARES_OK) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    } else {
        r->slots[0].kv = s->kv; /* slot 0: the session's own conversation */
        r->slots[0].history = s->history;
    }
    ring_pass_costs_reset(r);
    cluster_plan plan;
    cluster_keypair key;
    if (st == LARES_OK) {
        st = cluster_ring_load(s->o.ring, r->rc, err);
    }
    const char *pl = s->o.ring_placement;
    if (st == LARES_OK && pl != NULL) {
        if (strcmp(pl, "even") != 0 && sched_placement_from_name(pl) < 0) {
            st = lares_fail(err, LARES_EINVAL, "placement \"%s\": halda, memory, single or even",
                            pl);
        } else {
            snprintf(r->rc->placement, sizeof r->rc->placement, "%s", pl);
        }
    }
    /* "auto" windows come from the planner unless "placement" is "even" (the
     * plain split, no profiles needed; the planner's even split when the
     * session asks for its predictions) */
    const bool planned = st == LARES_OK && r->rc->auto_windows &&
                         (strcmp(r->rc->placement, "even") != 0 || s->o.ring_plan_even);
    if (st == LARES_OK && !r->rc->auto_windows && r->rc->placement[0] != '\0' &&
        strcmp(r->rc->placement, "even") != 0) {
        st = lares_fail(err, LARES_EINVAL,
                        "%s: \"placement\": \"%s\" chooses the windows, but every device "
                        "gives \"w\"; drop the \"w\"s (or \"windows\": \"auto\") to let "
                        "the planner choose them",
                        s->o.ring, r->rc->placement);
    }
    if (st == LARES_OK) {
        /* planned: the even split stands in until the planner has the profiles */
        st = cluster_ring_plan(r->rc, m->hp.n_layer, &plan, err);
    }
    int32_t members[CLUSTER_MAX_DEVICES];
    for (int32_t d = 0; d < CLUSTER_MAX_DEVICES; d++) {
        members[d] = d;
        r->predicted_ms[d] = r->predicted_token_ms[d] = -1;
    }
    r->predicted_latency_ms = -1;
    snprintf(r->placement, sizeof r->placement, "%s", r->rc->auto_windows ? "even" : "explicit");
    if (st == LARES_OK && insecure) {
        lares_log(LARES_LOG_WARN,
                  "cluster: --insecure: this ring runs without encryption or keys; "
                  "anyone on the network can read its hidden states or pose as a worker");
    } else if (st == LARES_OK && r->rc->head_key_path[0] == '\0') {
        st = lares_fail(err, LARES_EAUTH,
                        "%s: the head (device 0) needs \"key\": its key pair "
                        "file (lares keygen -o head.key), or run with --insecure",
                        s->o.ring);
    } else if (st == LARES_OK) {
        st = cluster_key_read(r->rc->head_key_path, &key, err);
    }
    if (st == LARES_OK) {
        r->n_cfg = r->rc->n_dev;
        r->rebalance = choice(s->o.ring_rebalance, r->rc->rebalance);
        r->failover = choice(s->o.ring_failover, r->rc->failover);
        r->rebuild_batched = strcmp(r->rc->rebuild, "batched") == 0;
        r->mirror = r->failover && r->rc->kv_mirror != 0;
        st = device_caps(s, r, err);
    }
    if (st == LARES_OK) {
        st = cluster_monitor_opts_check(&r->rc->monitor, err);
    }
    if (st == LARES_OK) {
        char host[CLUSTER_MAX_NAME + 1] = "head";
        if (gethostname(host, sizeof host) != 0) {
            snprintf(host, sizeof host, "head");
        }
        host[sizeof host - 1] = '\0';
        /* workers without the model file get its items from here (issue 19) */
        uint64_t *ship_off = NULL, *ship_bytes = NULL;
        cluster_ship_source ship = {0};
        st = ring_ship_source(s->lm->file, &ship, &ship_off, &ship_bytes, err);
        const cluster_head_opts ho = {
            .ship = st == LARES_OK ? &ship : NULL,
            .ring = r->rc,
            .model = {gguf_file_bytes(s->lm->file), gguf_header_hash(s->lm->file)},
            .n_layer = m->hp.n_layer,
            .n_ctx = s->o.n_ctx,
            .n_batch = s->o.n_batch,
            .n_embd = (int32_t)m->hp.n_embd,
            .kv_f16 = s->o.kv_type == LARES_KV_F16,
            .key = insecure ? NULL : &key,
            .insecure = insecure,
            .head_name = host,
            .failover = r->failover,
            .profile_ms = planned ? (uint32_t)r->rc->profile_ms : 0,
            .kv_mirror = r->mirror ? mirror_rows : NULL,
            .kv_mirror_user = s,
            .kv_row_bytes = (uint32_t)model_kv_row_bytes(s->kv)};
        if (st == LARES_OK) {
            st = cluster_head_open(&ho, &r->head, err);
        }
        lares_free(ship_off);
        lares_free(ship_bytes);
    }
    if (st == LARES_OK) {
        r->rounds = cluster_plan_rounds(&plan);
        cluster_monitor_init(&r->mon, &r->rc->monitor, r->n_cfg);
        st = start_plan(s, r, planned, &plan, members, err);
    }
    if (st == LARES_OK) {
        r->rounds = cluster_plan_rounds(&plan);
        head_windows(r, &plan);
        st = cluster_head_set_plan(r->head, &plan, members, 0, err);
    }
    if (st != LARES_OK) {
        api_ring_free(r);
        return st;
    }
    int32_t layers[CLUSTER_MAX_DEVICES];
    ring_layers_by_device(r, layers);
    cluster_monitor_plan(&r->mon, layers, NULL, false);
    ring_note_serving(r);
    char desc[256];
    ring_describe(r, &plan, members, desc, sizeof desc);
    lares_log(LARES_LOG_INFO,
              "cluster: ring of %d devices ready: %s, placement %s (re-balancing %s, failover %s)",
              plan.n_dev, desc, r->placement, r->rebalance ? "on" : "off",
              r->failover ? "on" : "off");
    eo->windows = r->windows;
    eo->n_windows = r->n_windows;
    s->ring = r;
    ring_view_update(s);
    return LARES_OK;
}

void ring_pass_costs_reset(api_ring *r) {
    for (int32_t d = 0; d < CLUSTER_MAX_DEVICES; d++) {
        r->pass_wait_ms[d] = r->row_ms[d] = -1;
        for (int32_t g = 0; g < CLUSTER_MAX_FLIGHT; g++) {
            r->wait_at_ms[g][d] = -1;
        }
    }
    r->pass_samples = 0;
    memset(&r->pass_acc, 0, sizeof r->pass_acc);
}

void ring_note_output(api_ring *r, uint64_t us, uint64_t wait_us) {
    r->pass_acc.wait_us[0] += wait_us;
    r->pass_acc.busy_us[0] += us - LARES_MIN(us, wait_us);
}

/* A batch's group landed: its pass's figures join the others; every few
 * passes they are folded into the costs (a pass's figures arrive with other
 * groups' windows in between, so only sums over several mean anything). */
static void pass_costs(api_ring *r, const cluster_pass *pass, int32_t rows) {
    const int32_t groups = LARES_MAX(1, LARES_MIN(r->pipe_groups, CLUSTER_MAX_FLIGHT));
    if (groups != r->pass_acc.groups) { /* a sample is of one group count */
        memset(&r->pass_acc, 0, sizeof r->pass_acc);
        r->pass_acc.groups = groups;
    }
    for (int32_t d = 0; d < r->n_cfg; d++) {
        r->pass_acc.wait_us[d] += pass[d].wait_us;
        r->pass_acc.busy_us[d] += pass[d].compute_us - LARES_MIN(pass[d].compute_us,
                                                                 pass[d].wait_us);
    }
    r->pass_acc.rows += rows;
    if (++r->pass_acc.passes < 4) {
        return;
    }
    const double alpha = r->pass_samples > 0 ? 0.5 : 1.0;
    for (int32_t d = 0; d < r->n_cfg; d++) {
        const double w = (double)r->pass_acc.wait_us[d] / 1e3 / r->pass_acc.passes;
        const double c = (double)r->pass_acc.busy_us[d] / 1e3 / (double)r->pass_acc.rows;
        r->pass_wait_ms[d] = alpha * w + (1 - alpha) * LARES_MAX(r->pass_wait_ms[d], 0.0);
        r->row_ms[d] = alpha * c + (1 - alpha) * LARES_MAX(r->row_ms[d], 0.0);
        double *at = &r->wait_at_ms[groups - 1][d];
        *at = *at < 0 ? w : 0.5 * w + 0.5 * *at;
    }
    r->pass_samples++;
    memset(&r->pass_acc, 0, sizeof r->pass_acc);
    r->pass_acc.groups = groups;
}

void ring_take_pass(api_ring *r, bool judge, int32_t rows) {
    cluster_pass pass[CLUSTER_MAX_DEVICES];
    cluster_head_take_pass(r->head, pass);
    if (rows > 0) {
        pass_costs(r, pass, rows);
    }
    if (!judge) {
        return;
    }
    double ms[CLUSTER_MAX_DEVICES], wait[CLUSTER_MAX_DEVICES];
    uint32_t mem[CLUSTER_MAX_DEVICES];
    for (int32_t d = 0; d < r->n_cfg; d++) {
        const bool ran = pass[d].layers > 0;
        ms[d] = ran ? (double)pass[d].compute_us / 1e3 / (double)pass[d].layers : -1;
        wait[d] = ran ? (double)pass[d].wait_us / 1e3 / (double)pass[d].layers : -1;
        mem[d] = pass[d].mem_free_mib;
    }
    cluster_monitor_token(&r->mon, ms, wait, mem);
}

bool ring_wants_quiet(const api_ring *r) {
    char why[8];
    int32_t drifted;
    return cluster_head_needs_plan(r->head) || ring_prepare_due(r) ||
           (r->rebalance && !r->pending.on &&
            cluster_monitor_due(&r->mon, &drifted, why, sizeof why)) ||
           ((r->failover || r->rebalance) && !r->pending.on && cluster_head_probe_due(r->head));
}

lares_status ring_between(lares_session *s, int32_t nb, bool gen, lares_error *err) {
    api_ring *r = s->ring;
    lares_status st = LARES_OK;
    if (!r->in_switch) {
        /* a plan prepared in the background goes in force */
        st = ring_prepare_poll(s, nb, err);
    }
    if (st == LARES_OK && !r->in_switch) {
        st = ring_rejoin(s, err); /* devices that answered since may join */
    }
    char why[512];
    int32_t drifted = -1;
    if (st == LARES_OK && r->rebalance && gen &&
        cluster_monitor_due(&r->mon, &drifted, why, sizeof why)) {
        st = ring_rebalance(s, err);
    }
    return st;
}

lares_status api_ring_forward(lares_session *s, int32_t nb, lares_error *err) {
    api_ring *r = s->ring;
    const size_t n_x = (size_t)nb * (size_t)s->lm->m->hp.n_embd;
    const int32_t keep = s->pos[0]; /* positions every layer must hold before this batch */
    lares_status st = LARES_OK;
    if (ring_groups_flying(r) > 0) {
        /* a batch's groups come home first: their frames would be taken for
         * stale ones of this pass (an embedding between a batch's steps) */
        memcpy(r->x_saved, s->x, n_x * sizeof *s->x);
        memcpy(r->pos_saved, s->pos, (size_t)nb * sizeof *s->pos);
        st = ring_groups_drain(s, err);
        memcpy(s->x, r->x_saved, n_x * sizeof *s->x);
        memcpy(s->pos, r->pos_saved, (size_t)nb * sizeof *s->pos);
        if (st != LARES_OK) {
            return st;
        }
    }
    memcpy(r->x_saved, s->x, n_x * sizeof *s->x);
    memcpy(r->pos_saved, s->pos, (size_t)nb * sizeof *s->pos);
    ring_slot *own = &r->slots[0];
    own->keep = keep;
    ring_slot_rewind(r, 0, keep); /* this batch overwrites what lies beyond keep */
    if (keep < own->synced && cluster_head_plan(r->head)->n_dev > 1) {
        /* a shorter context than the workers hold (a new prompt, a truncate) */
        st = cluster_head_truncate(r->head, 0, keep, err);
        if (st == LARES_OK) {
            own->synced = keep;
        } else if (!cluster_head_needs_plan(r->head)) {
            return st;
        }
    }
    if (st == LARES_OK) {
        st = ring_between(s, nb, nb == 1, err);
        if (st != LARES_OK && !cluster_head_needs_plan(r->head)) {
            return st;
        }
    }
    for (int32_t attempt = 0;; attempt++) {
        if (st == LARES_OK) {
            memcpy(s->x, r->x_saved, n_x * sizeof *s->x);
            memcpy(s->pos, r->pos_saved, (size_t)nb * sizeof *s->pos);
            st = ring_pass(s, nb, s->lm->m->hp.n_layer, err);
            if (st == LARES_OK) {
                break;
            }
        }
        /* a member was lost (during the pass or a switch before it) */
        if (!cluster_head_needs_plan(r->head) || attempt >= r->n_cfg) {
            return st;
        }
        st = ring_failover(s, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    ring_take_pass(r, nb == 1, 0); /* prompt batches are not judged */
    ring_slot_ran(r, 0, r->pos_saved[0], nb);
    ring_view_update(s);
    return LARES_OK;
}

lares_status lares_session_ring_stats(const lares_session *s, lares_ring_stats *out,
                                      lares_ring_device *devices, int32_t cap, lares_error *err) {
    if (s->ring == NULL) {
        return lares_fail(err, LARES_EINVAL, "this session runs on one device, not a ring");
    }
    const api_ring *r = s->ring;
    const cluster_head *h = r->head;
    const cluster_plan *p = cluster_head_plan(h);
    memset(out, 0, sizeof *out);
    out->n_devices = p->n_dev;
    out->n_config = r->n_cfg;
    out->rounds = cluster_plan_rounds(p);
    out->width = cluster_plan_width(p);
    out->hops = cluster_head_hops(h);
    out->wait_ms = (double)cluster_head_wait_us(h) / 1e3;
    out->replans = atomic_load(&r->replans);
    out->failovers = atomic_load(&r->failovers);
    out->switch_ms = r->switch_ms;
    out->last_switch_ms = r->last_switch_ms;
    out->rebuilt_tokens = r->rebuilt_tokens;
    out->rebuild_passes = r->rebuild_passes;
    out->kv_moved_bytes = r->kv_moved_bytes;
    out->last_switch = r->last_switch;
    out->placement = r->placement;
    out->predicted_token_ms = r->predicted_latency_ms;
    out->prepared_switches = r->prepared_switches;
    out->waited_switches = r->waited_switches;
    out->prepare_failures = r->prepare_failures;
    out->fetch_tokens = r->fetch_tokens + (r->pending.on ? r->pending.tokens : 0);
    out->kv_slots = r->n_slots;
    out->max_in_flight = cluster_head_max_in_flight(h);
    for (int32_t d = 0; d < r->n_cfg; d++) {
        const cluster_device_stats *ds = cluster_head_device(h, d);
        if (d > 0) {
            out->remote_ms += (double)ds->compute_us / 1e3;
        }
        if (devices == NULL || d >= cap) {
            continue;
        }
        int32_t i = -1;
        for (int32_t k = 0; k < p->n_dev; k++) {
            i = cluster_head_member(h, k) == d ? k : i;
        }
        const cluster_ring_device *rd = cluster_head_ring_device(h, d);
        devices[d] =
            (lares_ring_device){.name = rd->name,
                                .address = rd->address,
                                .in_ring = i >= 0,
                                .alive = d == 0 || cluster_head_usable(h, d),
                                .state = cluster_dev_state_name(cluster_head_state(h, d)),
                                .w = i >= 0 ? p->w[i] : 0,
                                .n = i >= 0 ? p->n[i] : 0,
                                .n_layers = i >= 0 ? cluster_plan_layers_of(p, i) : 0,
                                .windows_run = ds->windows,
                                .compute_ms = (double)ds->compute_us / 1e3,
                                .disk_wait_ms = (double)ds->wait_us / 1e3,
                                .major_faults = ds->major_faults,
                                .mem_free_mib = ds->mem_free_mib,
                                .measured_ms = i >= 0 ? cluster_monitor_ms(&r->mon, d) : -1,
                                .predicted_ms = i >= 0 ? r->predicted_ms[d] : -1,
                                .predicted_token_ms = i >= 0 ? r->predicted_token_ms[d] : -1,
                                .shipped_bytes = cluster_head_shipped(h, d)};
    }
    return LARES_OK;
}

void ring_note_serving(api_ring *r) {
    const cluster_plan *p = cluster_head_plan(r->head);
    uint64_t mask = 0;
    for (int32_t i = 0; i < p->n_dev; i++) {
        mask |= (uint64_t)1 << cluster_head_member(r->head, i);
    }
    atomic_store(&r->serving, mask);
}

bool lares_session_ring_serving(const lares_session *s, uint64_t *mask, int32_t *n_config) {
    if (s == NULL || s->ring == NULL) {
        return false;
    }
    if (mask != NULL) {
        *mask = atomic_load(&s->ring->serving);
    }
    if (n_config != NULL) {
        *n_config = s->ring->n_cfg;
    }
    return true;
}

const char *lares_session_ring_device_name(const lares_session *s, int32_t d) {
    if (s == NULL || s->ring == NULL || d < 0 || d >= s->ring->n_cfg) {
        return NULL;
    }
    return s->ring->rc->dev[d].name; /* ring.json is read once, at open */
}

bool lares_session_ring_events(const lares_session *s, uint64_t *replans, uint64_t *failovers) {
    if (s == NULL || s->ring == NULL) {
        return false;
    }
    if (replans != NULL) {
        *replans = atomic_load(&s->ring->replans);
    }
    if (failovers != NULL) {
        *failovers = atomic_load(&s->ring->failovers);
    }
    return true;
}
