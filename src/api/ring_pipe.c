/*
 * Pipelining a batch through the ring (issue 20, docs/batching.md "Over a
 * ring"). A batch's active sequences go around in groups: each group is the
 * rows of a few sequences (one KV slot each, a run in the ACT's table) and
 * several groups are in the ring at once, so that device 2 computes one
 * while device 1 computes the next. Each group goes its own way through the
 * layers: the head's windows here (on the sequences' own caches), the
 * others' around the ring, until it lands (its last hidden states at the
 * head); answers are matched to groups by their ACT counter. What a group
 * lands with is the batch's to draw (batch_ring.c).
 *
 * A member lost on the way: the other groups are lost with the ring, the
 * head puts a new plan in force (ring_failover: every slot keeps the
 * positions its sequence had drawn, from the head's mirror copy or re-run)
 * and every group not drawn yet is sent again from layer 0, from its tokens.
 * Its rows are computed anew on the same inputs, so the batch goes on with
 * the output it would have had.
 */
#include "api/ring.h"

lares_status ring_group_init(ring_group *g, int32_t n_batch, int32_t n_embd, lares_error *err) {
    memset(g, 0, sizeof *g);
    g->tokens = lares_alloc_array((size_t)n_batch, sizeof *g->tokens);
    g->pos = lares_alloc_array((size_t)n_batch, sizeof *g->pos);
    g->x = lares_alloc_array((size_t)n_batch * (size_t)n_embd, sizeof *g->x);
    g->run = lares_alloc_array((size_t)n_batch, sizeof *g->run);
    g->seqs = lares_alloc_array((size_t)n_batch, sizeof *g->seqs);
    if (g->tokens == NULL || g->pos == NULL || g->x == NULL || g->run == NULL || g->seqs == NULL) {
        ring_group_free(g);
        return lares_fail(err, LARES_ENOMEM, "out of memory for a group of %d rows", (int)n_batch);
    }
    return LARES_OK;
}

void ring_group_free(ring_group *g) {
    lares_free(g->tokens);
    lares_free(g->pos);
    lares_free(g->x);
    lares_free(g->run);
    lares_free(g->seqs);
    memset(g, 0, sizeof *g);
}

int32_t ring_groups_flying(const api_ring *r) {
    int32_t n = 0;
    for (int32_t i = 0; i < r->n_groups; i++) {
        n += r->groups[i].state == RING_GROUP_FLIGHT;
    }
    return n;
}

/* Group g is home after the last layer: its figures go to the monitor (a
 * pass of generating rows only; a prompt's are not judged). */
static void land(lares_session *s, ring_group *g) {
    api_ring *r = s->ring;
    g->state = RING_GROUP_LANDED;
    int32_t row = 0;
    for (int32_t i = 0; i < g->n_runs; i++) {
        ring_slot_ran(r, g->run[i].slot, g->pos[row], (int32_t)g->run[i].rows);
        row += (int32_t)g->run[i].rows;
    }
    ring_take_pass(r, g->gen, g->n_rows); /* a prompt's pass is not judged */
    if (g->gen && r->pending.on) {
        r->pending.tokens += (uint64_t)g->n_rows; /* generated while a fetch runs */
    }
    ring_view_update(s);
}

/* Takes group g on from g->layer: the head's windows while the next layer
 * starts one of them, then out to the ring, or home after the last layer. */
static lares_status advance(lares_session *s, ring_group *g, lares_error *err) {
    api_ring *r = s->ring;
    const cluster_plan *p = cluster_head_plan(r->head);
    const int32_t n_layer = p->n_layer;
    while (g->layer < n_layer) {
        int32_t dev, round, l0, l1;
        if (!cluster_plan_owner(p, g->layer, &dev, &round) || dev != 0) {
            g->state = RING_GROUP_FLIGHT;
            return cluster_head_send_runs(r->head, g->layer, n_layer, g->run, g->n_runs, g->pos,
                                          g->n_rows, g->x, &g->seq, err);
        }
        cluster_plan_window(p, 0, round, &l0, &l1);
        exec_counters c0, c1;
        exec_local_counters(s->exec, &c0);
        const uint64_t t0 = lares_now_ns();
        lares_status st = exec_local_forward_seqs(s->exec, g->seqs, g->n_runs, l0, l1, g->pos,
                                                  g->n_rows, g->x, err);
        const uint64_t t1 = lares_now_ns();
        exec_local_counters(s->exec, &c1);
        cluster_head_add_local(r->head, l1 - l0, g->n_rows, (t1 - t0) / 1000u,
                               (c1.wait_ns - c0.wait_ns) / 1000u);
        if (st != LARES_OK) {
            return st;
        }
        int32_t row = 0;
        for (int32_t i = 0; i < g->n_runs; i++) {
            for (int32_t l = l0; l < l1; l++) {
                ring_mirror_note(r, g->run[i].slot, l, g->pos[row], (int32_t)g->run[i].rows);
            }
            row += (int32_t)g->run[i].rows;
        }
        g->layer = l1;
    }
    land(s, g);
    return LARES_OK;
}

lares_status ring_group_launch(lares_session *s, ring_group *g, lares_error *err) {
    api_ring *r = s->ring;
    int32_t row = 0;
    for (int32_t i = 0; i < g->n_runs; i++) {
        g->seqs[i] = (model_seq){
            .kv = r->slots[g->run[i].slot].kv, .row0 = row, .n_rows = (int32_t)g->run[i].rows};
        ring_slot_rewind(r, g->run[i].slot, g->pos[row]);
        row += (int32_t)g->run[i].rows;
    }
    g->layer = 0;
    g->state = RING_GROUP_FLIGHT;
    exec_local_begin_pass(s->exec, true);
    lares_status st = model_embed(s->lm->m, g->tokens, g->n_rows, g->x, err);
    return st == LARES_OK ? advance(s, g, err) : st;
}

/* A member was lost: a new plan, then every group not drawn yet anew (a
 * loss during that: again, as often as there are devices). */
lares_status ring_groups_recover(lares_session *s, lares_error *err) {
    api_ring *r = s->ring;
    lares_status st = LARES_OK;
    for (int32_t attempt = 0; attempt <= r->n_cfg; attempt++) {
        cluster_head_abandon(r->head);
        st = ring_failover(s, err);
        for (int32_t i = 0; i < r->n_groups && st == LARES_OK; i++) {
            ring_group *g = &r->groups[i];
            if (g->state != RING_GROUP_IDLE) {
                st = ring_group_launch(s, g, err);
            }
        }
        if (st == LARES_OK || !cluster_head_needs_plan(r->head)) {
            return st;
        }
    }
    return st;
}

/* One ACT back, its group taken on (landing, or out again). */
static lares_status wait_one(lares_session *s, lares_error *err) {
    api_ring *r = s->ring;
    uint64_t seq = 0;
    int32_t layer = 0;
    lares_status st = cluster_head_recv_any(r->head, &seq, &layer, NULL, err);
    ring_group *g = NULL;
    for (int32_t i = 0; st == LARES_OK && i < r->n_groups && g == NULL; i++) {
        if (r->groups[i].state == RING_GROUP_FLIGHT && r->groups[i].seq == seq) {
            g = &r->groups[i];
        }
    }
    if (st == LARES_OK && g == NULL) {
        return lares_fail(err, LARES_EPROTO, "ring: batch %" PRIu64 " came back to no group", seq);
    }
    if (st == LARES_OK) {
        g->layer = layer;
        st = advance(s, g, err);
    }
    if (st != LARES_OK && cluster_head_needs_plan(r->head)) {
        st = ring_groups_recover(s, err);
    }
    return st;
}

lares_status ring_group_wait(lares_session *s, int32_t *landed, lares_error *err) {
    api_ring *r = s->ring;
    for (;;) {
        for (int32_t i = 0; i < r->n_groups; i++) {
            if (r->groups[i].state == RING_GROUP_LANDED) {
                *landed = i;
                return LARES_OK;
            }
        }
        if (ring_groups_flying(r) == 0) {
            return lares_fail(err, LARES_EINVAL, "ring: no group in flight to wait for");
        }
        lares_status st = wait_one(s, err);
        if (st != LARES_OK) {
            return st;
        }
    }
}

lares_status ring_groups_drain(lares_session *s, lares_error *err) {
    while (ring_groups_flying(s->ring) > 0) {
        lares_status st = wait_one(s, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

void ring_groups_abandon(api_ring *r) {
    cluster_head_abandon(r->head);
    for (int32_t i = 0; i < r->n_groups; i++) {
        r->groups[i].state = RING_GROUP_IDLE;
    }
}

int32_t ring_pipe_groups(const api_ring *r, int32_t n_rows, int32_t most, int32_t current) {
    const cluster_plan *p = cluster_head_plan(r->head);
    if (r->pass_samples < 1 || n_rows < 1) {
        return LARES_MAX(1, LARES_MIN(current, most)); /* nothing measured yet */
    }
    /* each count with the waits measured while it ran, else the latest */
    most = LARES_MAX(1, LARES_MIN(most, CLUSTER_MAX_FLIGHT));
    double *wait = lares_alloc_array((size_t)most * (size_t)p->n_dev, sizeof *wait);
    double row[CLUSTER_MAX_DEVICES];
    if (wait == NULL) {
        return LARES_MAX(1, LARES_MIN(current, most));
    }
    for (int32_t i = 0; i < p->n_dev; i++) {
        const int32_t d = cluster_head_member(r->head, i);
        for (int32_t g = 0; g < most; g++) {
            const double at = r->wait_at_ms[g][d];
            wait[g * p->n_dev + i] = LARES_MAX(at >= 0 ? at : r->pass_wait_ms[d], 0.0);
        }
        row[i] = LARES_MAX(r->row_ms[d], 0.0);
    }
    const int32_t g = cluster_pipe_groups(wait, (size_t)p->n_dev, row, p->n_dev, n_rows, most,
                                          current);
    lares_free(wait);
    return g;
}
