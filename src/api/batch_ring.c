/*
 * A batch over a ring (issue 20, docs/batching.md "Over a ring"): the
 * sequences are KV slots 1..n of the ring (slot 0 stays the session's own),
 * each with a cache on the head and on every member, and they go around in
 * groups, several at once (api/ring_pipe.c): while one group's hidden states
 * are on a worker, the next group's are on the one before it.
 *
 * A step lands one group (or those an embedding between steps brought home):
 * its logits are drawn, its sequences are free to go around again, and the
 * groups are filled up before the step returns, so the ring stays busy while
 * the caller handles the tokens. The active sequences are shared among the
 * groups (ceil(active / G) each; G is one per device of the plan in force
 * at first, then what the measured pass costs predict fastest, unless
 * lares_batch_set_ring_groups says otherwise), generating sequences and
 * prompt chunks alike; while another sequence is active a group takes a
 * prompt whole when the group's prompts fit 8 x shared_prompt_rows rows,
 * else at most shared_prompt_rows of it, as a step on one device does. A
 * prompt read alone goes in whole chunks of n_batch rows (no layer slices:
 * a slice is a pass that would stop at every worker).
 *
 * Plan changes (a prepared plan, a device back, a re-balance, a loss) happen
 * with no group in flight: a step brings the groups home first when one is
 * due (ring_wants_quiet).
 */
#include "api/batch_impl.h"

/* at most this many groups at once: one per device is what keeps every
 * device busy; more only queue */
#define MAX_GROUPS CLUSTER_MAX_DEVICES

lares_status batch_ring_init(lares_batch *b, lares_error *err) {
    lares_session *s = b->s;
    b->max_groups = LARES_MIN(b->n_seq, MAX_GROUPS);
    b->groups = lares_calloc((size_t)b->max_groups, sizeof *b->groups);
    model_kv **kv = lares_alloc_array((size_t)b->n_seq, sizeof *kv);
    const int32_t **hist = lares_alloc_array((size_t)b->n_seq, sizeof *hist);
    lares_status st = LARES_OK;
    if (b->groups == NULL || kv == NULL || hist == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (int32_t i = 0; st == LARES_OK && i < b->n_seq; i++) {
        kv[i] = b->seq[i].kv;
        hist[i] = b->seq[i].history;
    }
    if (st == LARES_OK) {
        st = ring_bind_slots(s, b->n_seq, kv, hist, err);
    }
    lares_free(kv);
    lares_free(hist);
    if (st == LARES_OK) {
        ring_bind_groups(s->ring, b->groups, b->max_groups);
    }
    return st;
}

void batch_ring_free(lares_batch *b) {
    if (b->groups == NULL) {
        return;
    }
    if (b->s != NULL && b->s->ring != NULL) {
        ring_groups_abandon(b->s->ring);
        ring_bind_groups(b->s->ring, NULL, 0);
    }
    for (int32_t i = 0; i < b->max_groups; i++) {
        ring_group_free(&b->groups[i]);
    }
    lares_free(b->groups);
    b->groups = NULL;
}

void lares_batch_set_ring_groups(lares_batch *b, int32_t groups) {
    b->ring_groups = groups > 0 ? groups : 0;
}

/* Groups in flight at most now, for `active` sequences: as set, else one per
 * device at first (each device then computes a group of its own), then as
 * the measured pass costs say (cluster_pipe_groups: where devices wait for
 * their weights from disk, every group reads them again, and fewer groups
 * of more rows may be faster). */
static int32_t groups_target(lares_batch *b, int32_t active) {
    api_ring *r = b->s->ring;
    const int32_t most = LARES_MAX(1, LARES_MIN(cluster_head_plan(r->head)->n_dev, b->max_groups));
    if (b->ring_groups > 0) {
        r->pipe_groups = LARES_MIN(b->ring_groups, b->max_groups);
        return r->pipe_groups;
    }
    const int32_t now = b->cur_groups > 0 ? b->cur_groups : most;
    b->cur_groups = ring_pipe_groups(r, active, LARES_MIN(most, LARES_MAX(active, 1)), now);
    r->pipe_groups = b->cur_groups;
    return b->cur_groups;
}

/* The sequence of a KV slot of the ring (slot 0 is the session's). */
static batch_seq *seq_of_slot(lares_batch *b, uint32_t slot) {
    return &b->seq[slot - 1];
}

/* Fills g with up to `share` sequences that are not in flight, from
 * b->ring_turn on: a generating one's token (and its drafts), a prompt's
 * next chunk (the whole rest while the group's whole_rows allow, else at
 * most prompt_rows). *formed: false when none is waiting. */
static lares_status form(lares_batch *b, ring_group *g, int32_t share, int32_t prompt_rows,
                         int32_t whole_rows, bool *formed, lares_error *err) {
    const int32_t n_batch = b->s->o.n_batch;
    int32_t whole_left = whole_rows;
    g->n_rows = g->n_runs = 0;
    g->gen = true;
    int32_t next = b->ring_turn;
    for (int32_t k = 0; k < b->n_seq && g->n_runs < share && g->n_rows < n_batch; k++) {
        const int32_t i = (b->ring_turn + k) % b->n_seq;
        batch_seq *q = &b->seq[i];
        int32_t rows = 0;
        if (q->state == SEQ_GEN) {
            g->tokens[g->n_rows] = q->last;
            g->pos[g->n_rows] = q->n_past;
            /* room for a row of each sequence still to come */
            const int64_t room = (int64_t)n_batch - g->n_rows - 1 - (share - g->n_runs - 1);
            int32_t d = 0;
            const lares_status st = batch_drafts(b, q, room, g->tokens + g->n_rows + 1,
                                                 g->pos + g->n_rows + 1, &d, err);
            if (st != LARES_OK) {
                return st;
            }
            rows = 1 + d;
            q->state = SEQ_FLIGHT_GEN;
        } else if (q->state == SEQ_PROMPT) {
            const size_t rest = q->n_prompt - q->at;
            /* a prompt that fits whole in the group's share of whole
             * prompts goes whole (as on one device: batch.c), else its
             * share of rows */
            const bool whole = rest <= (size_t)whole_left && rest <= (size_t)(n_batch - g->n_rows);
            rows = whole ? (int32_t)rest
                         : (int32_t)LARES_MIN(rest,
                                              (size_t)LARES_MIN(prompt_rows, n_batch - g->n_rows));
            whole_left -= whole ? rows : 0;
            if (rows < 1) {
                continue;
            }
            memcpy(g->tokens + g->n_rows, q->prompt + q->at, (size_t)rows * sizeof *g->tokens);
            for (int32_t r = 0; r < rows; r++) {
                g->pos[g->n_rows + r] = q->n_past + r;
            }
            q->state = SEQ_FLIGHT_PROMPT;
            g->gen = false;
        } else {
            continue;
        }
        g->run[g->n_runs++] = (cluster_run){.slot = (uint32_t)i + 1, .rows = (uint32_t)rows};
        g->n_rows += rows;
        next = (i + 1) % b->n_seq;
    }
    b->ring_turn = next;
    *formed = g->n_runs > 0;
    return LARES_OK;
}

/* Sends groups until G are in flight or no sequence waits. */
static lares_status launch(lares_batch *b, lares_error *err) {
    lares_session *s = b->s;
    int32_t waiting = 0, active = 0;
    for (int32_t i = 0; i < b->n_seq; i++) {
        waiting += b->seq[i].state == SEQ_GEN || b->seq[i].state == SEQ_PROMPT;
        active += b->seq[i].state != SEQ_FREE;
    }
    const int32_t target = groups_target(b, active);
    const int32_t groups = LARES_MIN(target, active);
    const int32_t share = groups > 0 ? (active + groups - 1) / groups : 0;
    int32_t busy = 0;
    for (int32_t i = 0; i < b->max_groups; i++) {
        busy += b->groups[i].state != RING_GROUP_IDLE;
    }
    /* a prompt shares the ring with others a few rows a group (a group's
     * pass is what every sequence in it waits for) */
    const int32_t prompt_rows =
        active > 1 && b->shared_prompt_rows > 0 ? b->shared_prompt_rows : s->o.n_batch;
    /* and prompts that fit whole in PROMPT_WHOLE_PER_SHARE shares, whole */
    const int32_t whole_rows = active > 1 && b->shared_prompt_rows > 0
                                   ? b->shared_prompt_rows * PROMPT_WHOLE_PER_SHARE
                                   : s->o.n_batch;
    for (int32_t i = 0; i < b->max_groups && busy < groups && waiting > 0; i++) {
        ring_group *g = &b->groups[i];
        if (g->state != RING_GROUP_IDLE) {
            continue;
        }
        lares_status st = LARES_OK;
        if (g->x == NULL) {
            st = ring_group_init(g, s->o.n_batch, (int32_t)s->lm->m->hp.n_embd, err);
        }
        bool formed = false;
        if (st == LARES_OK) {
            st = form(b, g, share, prompt_rows, whole_rows, &formed, err);
        }
        if (st != LARES_OK || !formed) {
            return st;
        }
        waiting -= g->n_runs;
        busy++;
        st = ring_group_launch(s, g, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

/* Draws from group g, home with its last hidden states: every row of a
 * generating sequence (its token's, then each draft's), the last row of a
 * prompt chunk that ends its prompt. */
static lares_status draw(lares_batch *b, ring_group *g, lares_error *err) {
    lares_session *s = b->s;
    const model *m = s->lm->m;
    const size_t e = (size_t)m->hp.n_embd, nv = (size_t)m->hp.n_vocab;
    int32_t n_out = 0, row = 0;
    for (int32_t r = 0; r < g->n_runs; r++) {
        const batch_seq *q = seq_of_slot(b, g->run[r].slot);
        const int32_t n = (int32_t)g->run[r].rows;
        n_out += q->state == SEQ_FLIGHT_GEN ? n : q->at + (size_t)n == q->n_prompt;
    }
    lares_status st = batch_reserve_out(b, n_out, err);
    if (st != LARES_OK) {
        return st;
    }
    int32_t k = 0;
    for (int32_t r = 0; r < g->n_runs; r++) {
        const batch_seq *q = seq_of_slot(b, g->run[r].slot);
        const int32_t n = (int32_t)g->run[r].rows;
        const int32_t from = q->state == SEQ_FLIGHT_GEN ? row : row + n - 1;
        const int32_t take = q->state == SEQ_FLIGHT_GEN         ? n
                             : q->at + (size_t)n == q->n_prompt ? 1
                                                                : 0;
        memcpy(b->last_x + (size_t)k * e, g->x + (size_t)from * e,
               (size_t)take * e * sizeof(float));
        k += take;
        row += n;
    }
    exec_counters c0, c1;
    exec_local_counters(s->exec, &c0);
    const uint64_t t0 = lares_now_ns();
    st = n_out > 0 ? exec_local_output(s->exec, b->last_x, n_out, b->logits, err) : LARES_OK;
    if (st != LARES_OK) {
        return st;
    }
    exec_local_counters(s->exec, &c1);
    ring_note_output(s->ring, (lares_now_ns() - t0) / 1000u, (c1.wait_ns - c0.wait_ns) / 1000u);
    k = 0;
    row = 0;
    const uint64_t now = lares_now_ns();
    for (int32_t r = 0; r < g->n_runs; r++) {
        batch_seq *q = seq_of_slot(b, g->run[r].slot);
        const int32_t n = (int32_t)g->run[r].rows;
        const int32_t *toks = g->tokens + row;
        row += n;
        const bool gen = q->state == SEQ_FLIGHT_GEN;
        const bool ends = !gen && q->at + (size_t)n == q->n_prompt;
        if (atomic_load(&q->cancel)) { /* cancelled on the way: its rows are not kept */
            k += gen ? n : ends;
            batch_seq_finish(q, LARES_STOP_CANCELED);
            continue;
        }
        if (gen) {
            batch_seq_verify(b, q, toks, b->logits + (size_t)k * nv);
            k += n;
        } else {
            memcpy(q->history + q->n_past, toks, (size_t)n * sizeof(int32_t));
            q->n_past += n;
            q->at += (size_t)n;
            q->st.n_prompt += n;
            q->state = SEQ_PROMPT;
            if (ends) {
                q->t_prompt = now;
                batch_seq_draw(b, q, b->logits + (size_t)k++ * nv);
            }
        }
        /* what a plan change keeps of it: the positions its draws confirmed */
        s->ring->slots[g->run[r].slot].keep = q->n_past;
    }
    b->last_gen = g->gen;
    g->state = RING_GROUP_IDLE;
    return LARES_OK;
}

/* The groups home and not drawn from yet (an embedding between steps
 * brought them in); *drew: any. */
static lares_status draw_landed(lares_batch *b, bool *drew, lares_error *err) {
    for (int32_t i = 0; i < b->max_groups; i++) {
        if (b->groups[i].state == RING_GROUP_LANDED) {
            *drew = true;
            lares_status st = draw(b, &b->groups[i], err);
            if (st != LARES_OK) {
                return st;
            }
        }
    }
    return LARES_OK;
}

/* A failure the batch gives up on: the groups are dropped, their sequences
 * back to before their pass (a later step may finish them: cancelled). */
static void abandon(lares_batch *b) {
    ring_groups_abandon(b->s->ring);
    for (int32_t i = 0; i < b->n_seq; i++) {
        batch_seq *q = &b->seq[i];
        if (q->state == SEQ_FLIGHT_GEN) {
            q->state = SEQ_GEN;
            q->n_draft = 0;
        } else if (q->state == SEQ_FLIGHT_PROMPT) {
            q->state = SEQ_PROMPT;
        }
    }
}

lares_status batch_ring_step(lares_batch *b, int32_t *n_active, lares_error *err) {
    lares_session *s = b->s;
    api_ring *r = s->ring;
    for (int32_t i = 0; i < b->n_seq; i++) {
        batch_seq *q = &b->seq[i];
        if ((q->state == SEQ_GEN || q->state == SEQ_PROMPT) && atomic_load(&q->cancel)) {
            batch_seq_finish(q, LARES_STOP_CANCELED); /* in flight: when its group lands */
        }
    }
    bool drew = false;
    lares_status st = draw_landed(b, &drew, err);
    if (st == LARES_OK && ring_groups_flying(r) > 0 && ring_wants_quiet(r)) {
        /* a plan change, a loss or a device back: the groups come home first */
        st = ring_groups_drain(s, err);
        if (st == LARES_OK) {
            st = draw_landed(b, &drew, err);
        }
    }
    if (st == LARES_OK && ring_groups_flying(r) == 0) {
        st = ring_between(s, 0, b->last_gen, err);
        if (st != LARES_OK && cluster_head_needs_plan(r->head)) {
            st = ring_failover(s, err);
        }
    }
    if (st == LARES_OK) {
        st = launch(b, err);
    }
    if (st == LARES_OK && !drew && ring_groups_flying(r) > 0) {
        int32_t landed = -1;
        st = ring_group_wait(s, &landed, err);
        if (st == LARES_OK) {
            st = draw_landed(b, &drew, err);
        }
    } else if (st == LARES_OK && !drew) {
        st = draw_landed(b, &drew, err); /* groups that landed at once (the head alone) */
    }
    if (st == LARES_OK) {
        st = launch(b, err); /* the ring stays busy while the caller takes the tokens */
    }
    if (st != LARES_OK && cluster_head_needs_plan(r->head)) {
        st = ring_groups_recover(s, err);
    }
    if (st != LARES_OK) {
        abandon(b);
    }
    *n_active = batch_count_active(b);
    return st;
}
