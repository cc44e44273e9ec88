/*
 * Changing the plan of a ring while a conversation runs (issue 9,
 * docs/ring.md "Re-balancing and failover").
 *
 * Both re-balancing and failover end in switch_plan: the head hands the new
 * plan to the members (cluster_head_set_plan with CLUSTER_PLAN_KEEP_KV, so
 * every device keeps the KV entries of the layers it still holds, releases
 * the weights of the layers it lost and reads ahead those it gained), and the
 * KV entries of the layers that changed owner are rebuilt on the new owner:
 *
 * - copied from the head's own cache when it holds them: the head's layers,
 *   and every layer with KV mirroring (issue 15: the members send the head a
 *   copy of each row they write, api_ring.mirrored), KV_DATA to the new owner;
 * - transferred (KV_GET from the old owner before the plan changes, KV_DATA
 *   to the new one after) when the old owner is alive: a layer's entries are
 *   2 x n_head_kv x head_dim values per position, a few KiB, where a re-run
 *   must pass every position through every layer up to it; by the cost model
 *   of docs/ring.md the transfer is the cheaper by orders of magnitude on any
 *   link a home has, and it is exact (the same bytes);
 * - re-computed after a loss (failover) for the positions the copy lacks
 *   (all of them without mirroring): the conversation's tokens run again
 *   through the ring up to the last lost layer, in the
 *   batches of the original run ("rebuild": "exact", the same bits, so the
 *   same greedy text) or n_batch at a time ("batched": fewer passes); a
 *   batch's sequences together, each pass the next batch of each of them.
 *
 * The switch happens between two tokens, when every device has finished its
 * round, so there is no global stop beyond the one token it delays.
 */
#include "api/ring.h"

#include <math.h>

/* The length of the pass that starts at position p0 of a slot whose
 * positions up to keep are re-run: the batch it was run in ("exact", the
 * kernels of a batch of n tokens need not round like n single tokens, so
 * only the same shapes give the same bits, and the same greedy text), or
 * n_batch positions ("batched": fewer passes; the last bits may differ). */
static int32_t rerun_rows(const lares_session *s, const ring_slot *sl, int32_t p0, int32_t keep) {
    if (s->ring->rebuild_batched) {
        return LARES_MIN(s->o.n_batch, keep - p0);
    }
    int32_t nb = 1;
    while (p0 + nb < keep && nb < s->o.n_batch && !sl->batch_start[p0 + nb]) {
        nb++;
    }
    return nb;
}

/* the slot's rows [p0, p0 + nb) embedded at row `row` of s->x, their positions in s->pos */
static lares_status rerun_embed(lares_session *s, const ring_slot *sl, int32_t p0, int32_t nb,
                                int32_t row, lares_error *err) {
    const model *m = s->lm->m;
    for (int32_t i = 0; i < nb; i++) {
        s->pos[row + i] = p0 + i;
    }
    return model_embed(m, sl->history + p0, nb, s->x + (size_t)row * (size_t)m->hp.n_embd, err);
}

/* Re-runs positions [from[i], keep) of every slot i with from[i] < keep
 * through layers [0, end) (every layer there holds [0, from[i])), each in
 * the passes rerun_rows gives it. A batch's sequences go together, as the
 * batch decoded them: each pass takes the next pass of every such slot still
 * behind, slot by slot, while the pass holds at most `cap` rows, so S
 * sequences take about as many passes as the longest of them instead of the
 * sum of theirs. cap is OPS_ROWS_MAX in "exact" (up to that many rows a
 * row's products do not depend on the rows beside it where the family has
 * the few-row product for the type, docs/batching.md "Identical output", so
 * each sequence gets the bits a re-run alone would give it) and n_batch in
 * "batched"; a pass longer than cap goes alone, and so does the session's own
 * conversation (slot 0: its passes carry no run table). */
static lares_status rebuild(lares_session *s, const int32_t *from, int32_t end, lares_error *err) {
    api_ring *r = s->ring;
    const int32_t n = r->n_slots;
    const int32_t cap = r->rebuild_batched ? s->o.n_batch : LARES_MIN(s->o.n_batch, OPS_ROWS_MAX);
    int32_t *at = lares_alloc_array((size_t)n, sizeof *at);
    cluster_run *runs = lares_alloc_array((size_t)n, sizeof *runs);
    if (at == NULL || runs == NULL) {
        lares_free(at);
        lares_free(runs);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (int32_t i = 0; i < n; i++) {
        at[i] = from[i];
    }
    lares_status st = LARES_OK;
    for (;;) {
        int32_t rows = 0, n_runs = 0;
        for (int32_t i = 0; i < n && st == LARES_OK; i++) {
            const int32_t keep = r->slots[i].keep;
            if (at[i] >= keep) {
                continue;
            }
            const int32_t nb = rerun_rows(s, &r->slots[i], at[i], keep);
            if (rows > 0 && (i == 0 || rows + nb > cap)) {
                continue; /* the next pass takes it */
            }
            st = rerun_embed(s, &r->slots[i], at[i], nb, rows, err);
            runs[n_runs++] = (cluster_run){.slot = (uint32_t)i, .rows = (uint32_t)nb};
            rows += nb;
            at[i] += nb;
            if (i == 0) {
                break; /* slot 0 alone */
            }
        }
        if (st != LARES_OK || n_runs == 0) {
            break;
        }
        st = ring_pass_runs(s, runs, n_runs, end, err);
        if (st != LARES_OK) {
            break;
        }
        r->rebuild_passes++;
    }
    if (st == LARES_OK) {
        cluster_pass pass[CLUSTER_MAX_DEVICES]; /* re-runs are not judged */
        cluster_head_take_pass(r->head, pass);
        for (int32_t i = 0; i < n; i++) {
            r->rebuilt_tokens += (uint64_t)(r->slots[i].keep - from[i]);
        }
    }
    lares_free(at);
    lares_free(runs);
    return st;
}

/* the owner (ring.json index) of each layer under plan p over members[] */
static void owners(const cluster_plan *p, const int32_t *members, int32_t *owner) {
    for (int32_t l = 0; l < p->n_layer; l++) {
        owner[l] = -1;
    }
    for (int32_t i = 0; i < p->n_dev; i++) {
        for (int32_t k = 0; k < cluster_plan_rounds(p); k++) {
            int32_t l0, l1;
            if (cluster_plan_window(p, i, k, &l0, &l1)) {
                for (int32_t l = l0; l < l1; l++) {
                    owner[l] = members[i];
                }
            }
        }
    }
}

/* K and V rows of `layer` in the head's own cache of a slot: every layer has
 * its place there (the pages of layers the head never held are untouched
 * until a copy lands in them) */
static void head_rows(const ring_slot *sl, int32_t layer, uint8_t **k, uint8_t **v) {
    const ops_kv_view kv = model_kv_view(sl->kv, layer);
    *k = kv.k;
    *v = kv.v;
}

/* predicted ms per token of a plan over ring.json devices members[] with the
 * monitor's estimates (unknown ones: the mean of the known) */
static double plan_cost_ms(const api_ring *r, const cluster_plan *p, const int32_t *members) {
    double sum = 0, known = 0;
    int32_t n_known = 0;
    for (int32_t d = 0; d < r->n_cfg; d++) {
        const double t = cluster_monitor_ms(&r->mon, d);
        if (t > 0) {
            known += t;
            n_known++;
        }
    }
    for (int32_t i = 0; i < p->n_dev; i++) {
        double t = cluster_monitor_ms(&r->mon, members[i]);
        if (!(t > 0)) {
            t = n_known > 0 ? known / n_known : 1;
        }
        sum += t * cluster_plan_layers_of(p, i);
    }
    return sum;
}

/* describes a plan with device names: "head 0 | b 3 | c 2 (k=1)" */
void ring_describe(const api_ring *r, const cluster_plan *p, const int32_t *members, char *buf,
                   size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < p->n_dev && n < cap; i++) {
        const cluster_ring_device *rd = cluster_head_ring_device(r->head, members[i]);
        const int w = snprintf(buf + n, cap - n, "%s%s %d", i ? " | " : "", rd->name, p->w[i]);
        n += w > 0 ? (size_t)w : 0;
    }
    if (n < cap) {
        snprintf(buf + n, cap - n, " (k=%d)", cluster_plan_rounds(p));
    }
}

/* model bytes shipped to all workers so far */
static uint64_t shipped_all(const api_ring *r) {
    uint64_t sum = 0;
    for (int32_t d = 1; d < r->n_cfg; d++) {
        sum += cluster_head_shipped(r->head, d);
    }
    return sum;
}

/* What a switch does for one slot: its first position and last layer re-run. */
typedef struct slot_plan {
    int32_t end, from;
} slot_plan;

/* The rows of a moved layer come from the head's own cache when it holds
 * them (the head's layers, and with KV mirroring every layer: mirrored),
 * else from their old owner (KV_GET, into the head's cache) when it is
 * alive; a lost owner's layers the copy lacks are re-run from the first
 * position some moved layer lacks, up to the last such layer. After a loss
 * the head talks to nobody until the new plan is in force, so then every
 * moved layer without a full copy is re-run. */
static slot_plan plan_slot(const api_ring *r, const ring_slot *sl, const int32_t *before,
                           const int32_t *after, int32_t n_layer, bool after_loss) {
    cluster_head *h = r->head;
    const int32_t keep = sl->keep;
    slot_plan sp = {.end = 0, .from = keep};
    for (int32_t l = 0; l < n_layer; l++) {
        const int32_t have = LARES_MIN(sl->mirrored[l], keep);
        if (before[l] != after[l] && have < keep &&
            (after_loss || before[l] < 0 || cluster_head_state(h, before[l]) == CLUSTER_DEV_LOST)) {
            sp.end = l + 1;
        }
    }
    for (int32_t l = 0; l < sp.end; l++) {
        if (before[l] != after[l]) {
            sp.from = LARES_MIN(sp.from, LARES_MIN(sl->mirrored[l], keep));
        }
    }
    while (sp.end > 0 && sp.from > 0 && sp.from < keep && !r->rebuild_batched &&
           !sl->batch_start[sp.from]) {
        sp.from--; /* the batch that position was run in starts the re-run */
    }
    return sp;
}

/* Every slot's re-run: those that end at the same layer in the same passes
 * (rebuild); each is then in sync up to keep (a slot with nothing to re-run,
 * end 0, as it is). */
static lares_status rebuild_all(lares_session *s, const slot_plan *sp, lares_error *err) {
    api_ring *r = s->ring;
    const int32_t n = r->n_slots;
    int32_t *from = lares_alloc_array((size_t)n, sizeof *from);
    if (from == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st = LARES_OK;
    for (int32_t i = 0; i < n && st == LARES_OK; i++) {
        if (sp[i].end == 0) {
            r->slots[i].synced = r->slots[i].keep;
            continue;
        }
        bool first = true;
        for (int32_t j = 0; j < i && first; j++) {
            first = sp[j].end != sp[i].end; /* that end's passes are done */
        }
        if (!first) {
            continue;
        }
        for (int32_t j = 0; j < n; j++) {
            from[j] = sp[j].end == sp[i].end ? sp[j].from : r->slots[j].keep;
        }
        st = rebuild(s, from, sp[i].end, err);
        for (int32_t j = 0; j < n && st == LARES_OK; j++) {
            if (sp[j].end == sp[i].end) {
                r->slots[j].synced = r->slots[j].keep;
            }
        }
    }
    lares_free(from);
    return st;
}

lares_status ring_switch_plan(lares_session *s, const cluster_plan *p, const int32_t *members,
                              const char *kind, const char *why, const char *how,
                              lares_error *err) {
    api_ring *r = s->ring;
    cluster_head *h = r->head;
    const int32_t n_layer = p->n_layer;
    const uint64_t t0 = lares_now_ns();
    const uint64_t shipped0 = shipped_all(r);
    ring_prepare_drop(r); /* a plan set now makes any prepared one stale */
    const size_t row = model_kv_row_bytes(s->kv);
    char old_desc[256], new_desc[256];
    int32_t cur[CLUSTER_MAX_DEVICES];
    const cluster_plan *q = cluster_head_plan(h);
    for (int32_t i = 0; i < q->n_dev; i++) {
        cur[i] = cluster_head_member(h, i);
    }
    ring_describe(r, q, cur, old_desc, sizeof old_desc);
    ring_describe(r, p, members, new_desc, sizeof new_desc);
    int32_t *before = lares_alloc_array((size_t)n_layer * 2, sizeof *before);
    slot_plan *sp = lares_alloc_array((size_t)r->n_slots, sizeof *sp);
    if (before == NULL || sp == NULL) {
        lares_free(before);
        lares_free(sp);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    int32_t *after = before + n_layer;
    owners(q, cur, before);
    owners(p, members, after);
    const bool after_loss = cluster_head_needs_plan(h);
    lares_status st = LARES_OK;
    int32_t end_max = 0, keep_max = 0, rerun = 0;
    for (int32_t i = 0; i < r->n_slots; i++) {
        ring_slot *sl = &r->slots[i];
        sp[i] = plan_slot(r, sl, before, after, n_layer, after_loss);
        end_max = LARES_MAX(end_max, sp[i].end);
        keep_max = LARES_MAX(keep_max, sl->keep);
        rerun += sp[i].end > 0 ? sl->keep - sp[i].from : 0;
        for (int32_t l = sp[i].end; l < n_layer && st == LARES_OK && sl->keep > 0; l++) {
            if (before[l] != after[l] && before[l] > 0 && sl->mirrored[l] < sl->keep) {
                uint8_t *k, *v;
                head_rows(sl, l, &k, &v);
                st = cluster_head_kv_get(h, before[l], (uint32_t)i, l, 0, sl->keep, k, v, err);
                sl->mirrored[l] = st == LARES_OK ? sl->keep : sl->mirrored[l];
                sl->kv->epoch++; /* written behind the forward pass's back */
            }
        }
    }
    if (st == LARES_OK) {
        st = cluster_head_set_plan(h, p, members, CLUSTER_PLAN_KEEP_KV, err);
    }
    if (st == LARES_OK) {
        ring_plan_adopt(r); /* the planner's predictions, or none after a fallback */
        ring_note_serving(r);
        ring_pass_costs_reset(r); /* other windows, other costs */
    }
    uint64_t moved_bytes = 0;
    int32_t n_move = 0, n_copy = 0;
    for (int32_t l = 0; l < n_layer; l++) {
        /* complete: every slot that holds anything has all of it in the copy */
        bool any = false, full = true;
        for (int32_t i = 0; i < r->n_slots; i++) {
            any = any || r->slots[i].keep > 0;
            full = full && r->slots[i].mirrored[l] >= r->slots[i].keep;
        }
        n_move += before[l] != after[l];
        n_copy += before[l] != after[l] && any && full;
    }
    for (int32_t i = 0; i < r->n_slots && st == LARES_OK; i++) {
        const ring_slot *sl = &r->slots[i];
        for (int32_t l = 0; l < n_layer && st == LARES_OK; l++) {
            const int32_t n = LARES_MIN(sl->mirrored[l], sl->keep);
            if (before[l] == after[l]) {
                continue;
            }
            if (after[l] != 0 && n > 0) {
                uint8_t *k, *v;
                head_rows(sl, l, &k, &v);
                st = cluster_head_kv_put(h, after[l], (uint32_t)i, l, 0, n, k, v, err);
                moved_bytes += 2 * (uint64_t)n * row;
            }
        }
    }
    lares_free(before);
    if (st == LARES_OK) {
        int32_t layers[CLUSTER_MAX_DEVICES];
        ring_layers_by_device(r, layers);
        cluster_monitor_plan(&r->mon, layers, NULL, true);
        r->in_switch = true;
        st = rebuild_all(s, sp, err);
        r->in_switch = false;
    }
    lares_free(sp);
    r->kv_moved_bytes += moved_bytes;
    const double ms = (double)(lares_now_ns() - t0) / 1e6;
    r->switch_ms += ms;
    r->last_switch_ms = ms;
    /* weights fetched during the switch: the ring waited for them */
    const uint64_t waited = shipped_all(r) - shipped0;
    char weights[512];
    if (waited > 0) {
        r->waited_switches++;
        snprintf(weights, sizeof weights,
                 "; the switch waited for a fetch of %.2f MiB of weights (no token meanwhile)%s%s",
                 (double)waited / 1048576.0, how[0] ? ": " : "", how);
    } else {
        snprintf(weights, sizeof weights, "%s%s", how[0] ? "; " : "", how);
    }
    char slots[96] = "";
    if (r->n_slots > 1) {
        snprintf(slots, sizeof slots, " over %d KV slots", (int)r->n_slots);
    }
    snprintf(r->last_switch, sizeof r->last_switch,
             "%s: %s; plan %s -> %s%s; KV of %d moved layer(s) transferred (%" PRIu64
             " bytes, %d complete in the head's copy)%s, %d positions re-run through layers "
             "0..%d, a context of %d; %.1f ms",
             kind, why, old_desc, new_desc, weights, n_move, moved_bytes, n_copy, slots, rerun,
             end_max, keep_max, ms);
    if (st == LARES_OK) {
        lares_log(LARES_LOG_INFO, "cluster: %s", r->last_switch);
    }
    return st;
}

/* ms per layer per token of each device for the planner (< 0 unknown) */
static void estimates(const api_ring *r, double *ms) {
    for (int32_t d = 0; d < r->n_cfg; d++) {
        ms[d] = cluster_monitor_ms(&r->mon, d);
    }
}

lares_status ring_balance(const api_ring *r, const int32_t *cand, int32_t n, const int32_t *base,
                          cluster_plan *out, int32_t *members, lares_error *err) {
    double ms_all[CLUSTER_MAX_DEVICES], ms[CLUSTER_MAX_DEVICES];
    int32_t cap[CLUSTER_MAX_DEVICES], idx[CLUSTER_MAX_DEVICES];
    bool stream[CLUSTER_MAX_DEVICES];
    estimates(r, ms_all);
    for (int32_t i = 0; i < n; i++) {
        ms[i] = ms_all[cand[i]];
        ring_capacity(r, cand[i], &cap[i], &stream[i]);
    }
    const int32_t n_layer = cluster_head_plan(r->head)->n_layer;
    lares_status st =
        cluster_plan_balance(n_layer, r->rounds, n, ms, cap, stream, base, out, idx, err);
    if (st == LARES_OK) {
        for (int32_t i = 0; i < out->n_dev; i++) {
            members[i] = cand[idx[i]];
        }
    } else if (st == LARES_ERANGE && r->layer_bytes > 0) {
        /* what the candidates lack, in the unit the user sets ("memory") */
        int64_t held = 0;
        for (int32_t i = 0; i < n; i++) {
            held += stream[i] && cap[i] > 0 ? n_layer : LARES_MAX(cap[i], 0);
        }
        const int64_t short_layers = LARES_MAX((int64_t)n_layer - held, (int64_t)1);
        char need[32], each[32];
        lares_fmt_bytes((double)short_layers * (double)r->layer_bytes, need, sizeof need);
        lares_fmt_bytes((double)r->layer_bytes, each, sizeof each);
        lares_fail(err, st,
                   "the %d device%s left cannot run the model, even from disk: %s more memory "
                   "needed (%" PRId64 " layer(s) of %s)",
                   n, n == 1 ? "" : "s", need, short_layers, each);
    }
    return st;
}

/* The next plan over cand[0..n): by the planner (sched_replan) when the plan
 * in force came from it, else, or when it fails, by cluster_plan_balance.
 * *by says which, for the log line. */
static lares_status replan(api_ring *r, const int32_t *cand, int32_t n, const int32_t *base,
                           cluster_plan *out, int32_t *members, char *by, size_t cap,
                           lares_error *err) {
    if (r->planned) {
        lares_error perr = {0};
        if (ring_plan_replan(r, cand, n, out, members, &perr) == LARES_OK) {
            snprintf(by, cap, "planner (%s)", r->placement);
            return LARES_OK;
        }
        snprintf(by, cap, "cluster_plan_balance (the planner failed: %s)", perr.msg);
    } else {
        snprintf(by, cap, "cluster_plan_balance");
    }
    return ring_balance(r, cand, n, base, out, members, err);
}

lares_status ring_failover(lares_session *s, lares_error *err) {
    api_ring *r = s->ring;
    cluster_head *h = r->head;
    /* the KV copies the lost device sent before it went */
    cluster_head_drain(h);
    ring_prepare_drop(r); /* the loss comes first; its plan is made anew */
    char lost[512] = "";
    size_t n = 0;
    int32_t cand[CLUSTER_MAX_DEVICES], n_cand = 0;
    cand[n_cand++] = 0;
    for (int32_t d = 1; d < r->n_cfg; d++) {
        const cluster_ring_device *rd = cluster_head_ring_device(h, d);
        bool member = false;
        for (int32_t i = 1; i < cluster_head_plan(h)->n_dev; i++) {
            member = member || cluster_head_member(h, i) == d;
        }
        if (member && cluster_head_state(h, d) == CLUSTER_DEV_LOST && n < sizeof lost) {
            const int w = snprintf(lost + n, sizeof lost - n, "%s%s (%s)", n ? ", " : "", rd->name,
                                   rd->address);
            n += w > 0 ? (size_t)w : 0;
        } else if (cluster_head_usable(h, d)) {
            cand[n_cand++] = d; /* members and the devices left out, alive */
        }
    }
    /* the error the head holds names the device and what happened to it */
    lares_error cause = {0};
    cluster_head_truncate(h, 0, 0, &cause); /* returns the held failure, sends nothing */
    cluster_plan p;
    int32_t members[CLUSTER_MAX_DEVICES];
    lares_error perr = {0};
    char by[LARES_ERROR_MSG_MAX + 64];
    /* the survivors keep their windows; only the lost layers move (fewer to
     * rebuild), shared with the devices left out */
    int32_t base[CLUSTER_MAX_DEVICES] = {0};
    const cluster_plan *cur = cluster_head_plan(h);
    for (int32_t j = 0; j < n_cand; j++) {
        for (int32_t i = 0; i < cur->n_dev; i++) {
            base[j] = cluster_head_member(h, i) == cand[j] ? cur->w[i] : base[j];
        }
    }
    lares_status st = replan(r, cand, n_cand, base, &p, members, by, sizeof by, &perr);
    if (st != LARES_OK) {
        return lares_fail(err, st, "ring: lost %s: %s; and %s", lost, cause.msg, perr.msg);
    }
    lares_log(LARES_LOG_WARN,
              "cluster: lost %s (%s): going on with %d device%s; the generation continues", lost,
              cause.msg, p.n_dev, p.n_dev == 1 ? "" : "s");
    atomic_fetch_add(&r->failovers, 1);
    char why[1536];
    snprintf(why, sizeof why, "lost %s; new plan by %s", lost, by);
    bool ask[CLUSTER_MAX_DEVICES];
    if (ring_prepare_needs(r, &p, members, ask) == 0) {
        return ring_switch_plan(s, &p, members, "failover", why, "", err);
    }
    /* The plan in force is broken and the new one makes workers fetch: an
     * interim plan that fetches nothing now, the new one in the background */
    cluster_plan ip;
    int32_t im[CLUSTER_MAX_DEVICES];
    char iwhy[512], how[768];
    if (!ring_interim_plan(r, &ip, im, iwhy, sizeof iwhy)) {
        lares_log(LARES_LOG_INFO, "cluster: failover: no interim plan (%s); the switch waits for "
                  "the weights", iwhy);
        snprintf(how, sizeof how, "no interim plan without a fetch: %s", iwhy);
        return ring_switch_plan(s, &p, members, "failover", why, how, err);
    }
    char next[256];
    ring_describe(r, &p, members, next, sizeof next);
    snprintf(how, sizeof how,
             "an interim plan (the lost windows to neighbours that hold their tensors); %s is "
             "fetched in the background",
             next);
    st = ring_switch_plan(s, &ip, im, "failover", why, how, err);
    if (st != LARES_OK || ring_prepare_needs(r, &p, members, ask) == 0) {
        return st;
    }
    if (!ring_prepare_start(s, &p, members, "failover", why)) {
        st = ring_switch_plan(s, &p, members, "failover", why,
                              "after the interim plan (the prepare could not be asked)", err);
    }
    return st;
}

lares_status ring_rebalance(lares_session *s, lares_error *err) {
    api_ring *r = s->ring;
    cluster_head *h = r->head;
    int32_t drifted = -1;
    char why[384];
    if (r->pending.on || !cluster_monitor_due(&r->mon, &drifted, why, sizeof why)) {
        return LARES_OK; /* a plan being prepared is the re-plan under way */
    }
    /* candidates: the members and the devices that are alive outside the plan */
    int32_t cand[CLUSTER_MAX_DEVICES], n_cand = 0;
    cand[n_cand++] = 0;
    for (int32_t d = 1; d < r->n_cfg; d++) {
        if (cluster_head_usable(h, d)) {
            cand[n_cand++] = d;
        }
    }
    const cluster_plan *cur = cluster_head_plan(h);
    int32_t cur_members[CLUSTER_MAX_DEVICES];
    for (int32_t i = 0; i < cur->n_dev; i++) {
        cur_members[i] = cluster_head_member(h, i);
    }
    cluster_plan p;
    int32_t members[CLUSTER_MAX_DEVICES];
    lares_error perr = {0};
    const double now_ms = plan_cost_ms(r, cur, cur_members);
    double next_ms = now_ms;
    bool same = false;
    char by[LARES_ERROR_MSG_MAX + 64] = "";
    if (replan(r, cand, n_cand, NULL, &p, members, by, sizeof by, &perr) == LARES_OK) {
        next_ms = plan_cost_ms(r, &p, members);
        same = p.n_dev == cur->n_dev;
        for (int32_t i = 0; same && i < p.n_dev; i++) {
            same = members[i] == cur_members[i] && p.w[i] == cur->w[i];
        }
    }
    char what[1536];
    const cluster_ring_device *rd = cluster_head_ring_device(h, drifted);
    snprintf(what, sizeof what, "%s %s; predicted %.2f ms per token -> %.2f; new plan by %s",
             rd != NULL ? rd->name : "?", why, now_ms, next_ms, by);
    if (same || !(next_ms < now_ms * (1 - r->mon.o.min_gain))) {
        lares_log(LARES_LOG_INFO,
                  "cluster: re-balancing weighed and refused (gain below %.0f %%): %s",
                  r->mon.o.min_gain * 100, what);
        cluster_monitor_accept(&r->mon);
        return LARES_OK;
    }
    if (ring_prepare_start(s, &p, members, "re-balance", what)) {
        return LARES_OK; /* put in force when the weights are in (ring_prepare_poll) */
    }
    atomic_fetch_add(&r->replans, 1);
    return ring_switch_plan(s, &p, members, "re-balance", what, "", err);
}

lares_status ring_rejoin(lares_session *s, lares_error *err) {
    api_ring *r = s->ring;
    cluster_head *h = r->head;
    if (r->n_cfg < 2 || (!r->failover && !r->rebalance) || r->pending.on) {
        return LARES_OK; /* a device that answers meanwhile joins at a later re-plan */
    }
    /* never waits: the lost are asked again and the answers that came in
     * since are taken; a device that answered joins at this re-plan */
    if (cluster_head_probe(h, 0) == 0) {
        return LARES_OK;
    }
    ring_plan_profiles(r); /* the profiles of devices that joined after the start */
    const cluster_plan *cur = cluster_head_plan(h);
    int32_t cand[CLUSTER_MAX_DEVICES], n_cand = 0, cur_members[CLUSTER_MAX_DEVICES];
    char back[512] = "";
    size_t n = 0;
    for (int32_t i = 0; i < cur->n_dev; i++) {
        cur_members[i] = cluster_head_member(h, i);
    }
    cand[n_cand++] = 0;
    for (int32_t d = 1; d < r->n_cfg; d++) {
        if (!cluster_head_usable(h, d)) {
            continue;
        }
        cand[n_cand++] = d;
        bool member = false;
        for (int32_t i = 0; i < cur->n_dev; i++) {
            member = member || cur_members[i] == d;
        }
        if (!member && n < sizeof back) {
            const cluster_ring_device *rd = cluster_head_ring_device(h, d);
            const int w = snprintf(back + n, sizeof back - n, "%s%s (%s)", n ? ", " : "", rd->name,
                                   rd->address);
            n += w > 0 ? (size_t)w : 0;
        }
    }
    if (n == 0) {
        return LARES_OK;
    }
    cluster_plan p;
    int32_t members[CLUSTER_MAX_DEVICES];
    lares_error perr = {0};
    char by[LARES_ERROR_MSG_MAX + 64];
    if (!r->planned && n_cand == r->n_cfg) {
        /* every device of ring.json is back: the user's windows (or the even
         * split), as at a start with everyone there */
        if (cluster_ring_plan(r->rc, cur->n_layer, &p, &perr) != LARES_OK) {
            return LARES_OK;
        }
        for (int32_t i = 0; i < n_cand; i++) {
            members[i] = i;
        }
        snprintf(by, sizeof by, "ring.json (%s windows)", r->placement);
    } else if (replan(r, cand, n_cand, NULL, &p, members, by, sizeof by, &perr) != LARES_OK) {
        return LARES_OK; /* the plan in force still works */
    }
    bool same = p.n_dev == cur->n_dev;
    for (int32_t i = 0; same && i < p.n_dev; i++) {
        same = members[i] == cur_members[i] && p.w[i] == cur->w[i];
    }
    if (same) {
        lares_log(LARES_LOG_INFO, "cluster: %s answered; the plan in force stays", back);
        return LARES_OK;
    }
    char why[1536];
    snprintf(why, sizeof why, "%s answered; new plan by %s", back, by);
    if (ring_prepare_start(s, &p, members, "rejoin", why)) {
        return LARES_OK; /* put in force when the weights are in (ring_prepare_poll) */
    }
    atomic_fetch_add(&r->replans, 1);
    return ring_switch_plan(s, &p, members, "rejoin", why, "", err);
}
