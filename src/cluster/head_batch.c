/*
 * What the head's session does with a ring between its own windows: batches of
 * hidden states out and back (cluster_head_send / _recv), truncating the
 * members' KV caches, KV transfers between owners, pings, and the figures of
 * each pass.
 */
#include "cluster/head_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

void cluster_head_set_slots(cluster_head *h, uint32_t n_slots) {
    h->n_slots = LARES_MAX(1u, LARES_MIN(n_slots, (uint32_t)CLUSTER_MAX_SLOTS));
}

int32_t cluster_head_in_flight(const cluster_head *h) {
    return h->n_flight;
}

int32_t cluster_head_max_in_flight(const cluster_head *h) {
    return h->max_flight;
}

void cluster_head_abandon(cluster_head *h) {
    h->n_flight = 0;
}

/* the entry of batch seq, NULL when it is not in flight (abandoned, or done) */
static head_flight *flight_of(cluster_head *h, uint64_t seq) {
    for (int32_t i = 0; i < h->n_flight; i++) {
        if (h->flight[i].seq == seq) {
            return &h->flight[i];
        }
    }
    return NULL;
}

static void flight_done(cluster_head *h, head_flight *f) {
    *f = h->flight[--h->n_flight];
}

lares_status cluster_head_send_runs(cluster_head *h, int32_t layer, int32_t end,
                                    const cluster_run *runs, int32_t n_runs, const int32_t *pos,
                                    int32_t n_tok, float *x, uint64_t *seq, lares_error *err) {
    lares_status st = head_usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    if (h->plan.n_dev < 2 || n_tok < 1 || n_tok > h->n_batch || layer < 0 || layer >= h->n_layer ||
        end <= layer || end > h->n_layer || (runs != NULL && (n_runs < 1 || n_runs > n_tok))) {
        return lares_fail(err, LARES_EINVAL,
                          "ring send: %d tokens in %d runs at layer %d up to %d (batch %d, %d "
                          "devices)",
                          n_tok, runs != NULL ? n_runs : 0, layer, end, h->n_batch, h->plan.n_dev);
    }
    for (int32_t i = 0; runs != NULL && i < n_runs; i++) {
        if (runs[i].slot >= h->n_slots) {
            return lares_fail(err, LARES_EINVAL, "ring send: slot %u, the plan counts %u",
                              runs[i].slot, h->n_slots);
        }
    }
    if (h->n_flight >= CLUSTER_MAX_FLIGHT) {
        return lares_fail(err, LARES_EBUSY, "ring send: %d batches in flight already", h->n_flight);
    }
    const cluster_act a = {.seq = ++h->next_seq,
                           .layer = (uint32_t)layer,
                           .end = (uint32_t)end,
                           .n_tok = (uint32_t)n_tok,
                           .n_embd = (uint32_t)h->n_embd,
                           .dtype = h->act_dtype,
                           .n_trace = 0,
                           .n_runs = runs != NULL ? (uint32_t)n_runs : 0};
    const size_t n =
        cluster_encode_act_runs(h->buf, h->buf_cap, h->session, &a, runs, pos, NULL, x);
    /* the clock before the send: the first worker may run before this thread does again */
    const uint64_t t_send = lares_now_ns();
    st = head_pipe_send(h, h->member[1], n, err);
    if (st == LARES_OK) {
        h->flight[h->n_flight++] = (head_flight){.seq = a.seq,
                                                 .n_tok = n_tok,
                                                 .pos0 = pos[0],
                                                 .end = end,
                                                 .n_runs = a.n_runs,
                                                 .sent_ns = t_send,
                                                 .dst = x};
        h->max_flight = LARES_MAX(h->max_flight, h->n_flight);
        *seq = a.seq;
    }
    return st;
}

lares_status cluster_head_send(cluster_head *h, int32_t layer, int32_t end, const int32_t *pos,
                               int32_t n_tok, const float *x, uint64_t *seq, lares_error *err) {
    /* one batch at a time: one sent before and not waited for was abandoned
     * (a canceled generation) */
    cluster_head_abandon(h);
    /* the hidden states come back into the caller's buffer (cluster_head_recv), not x */
    lares_status st =
        cluster_head_send_runs(h, layer, end, NULL, 0, pos, n_tok, (float *)x, seq, err);
    if (st == LARES_OK) {
        h->flight[h->n_flight - 1].dst = NULL;
    }
    return st;
}

/* the plan device whose window (in any round) ends at `layer`, -1 when none */
static int32_t sender_of(const cluster_plan *p, int32_t layer) {
    for (int32_t r = 0; r < cluster_plan_rounds(p); r++) {
        for (int32_t d = 0; d < p->n_dev; d++) {
            int32_t l0, l1;
            if (cluster_plan_window(p, d, r, &l0, &l1) && l1 == layer) {
                return d;
            }
        }
    }
    return -1;
}

/* the windows' figures of a returned batch into the devices' stats and the
 * pass; answers the microseconds its windows computed */
static uint64_t count_trace(cluster_head *h, const cluster_act *a) {
    uint64_t spent = 0;
    for (uint32_t i = 0; i < a->n_trace; i++) {
        cluster_trace t;
        cluster_act_trace_at(a, i, &t);
        spent += t.compute_us;
        if (t.device >= (uint32_t)h->plan.n_dev) {
            continue;
        }
        const int32_t d = h->member[t.device];
        int32_t l0 = 0, l1 = 0;
        cluster_plan_window(&h->plan, t.device, t.round, &l0, &l1);
        const int64_t layers = (int64_t)(l1 - l0) * (int64_t)a->n_tok;
        cluster_device_stats *s = &h->stats[d];
        s->windows++;
        s->compute_us += t.compute_us;
        s->wait_us += t.wait_us;
        s->major_faults += t.major_faults;
        s->layers_run += (uint64_t)layers;
        s->mem_free_mib = t.mem_free_mib;
        cluster_pass *ps = &h->pass[d];
        ps->compute_us += t.compute_us;
        ps->wait_us += t.wait_us;
        ps->layers += layers; /* rows per pass (issue 20): one token's pass counts its layers */
        ps->mem_free_mib = t.mem_free_mib;
    }
    return spent;
}

/* Waits for an ACT of a batch in flight (want: that one; 0: any) and takes
 * it: its hidden states into x (NULL: the entry's), *seq and *layer. */
static lares_status recv_flight(cluster_head *h, uint64_t want, float *x, uint64_t *seq,
                                int32_t *layer, const _Atomic bool *cancel, lares_error *err) {
    lares_status st = head_usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    if (h->n_flight == 0) {
        return lares_fail(err, LARES_EINVAL, "ring: no batch in flight to wait for");
    }
    for (;;) {
        int32_t dev = 0;
        st = head_pipe_recv(h, -1, &dev, cancel, err);
        if (st != LARES_OK) {
            return st;
        }
        const cluster_frame *f = h->frame;
        if (f->type != CLUSTER_ACT) {
            lares_log(LARES_LOG_DEBUG, "cluster: dropped a %s frame from %s during a batch",
                      cluster_frame_type_name(f->type), head_dev_name(h, dev));
            continue;
        }
        const cluster_act *a = &f->u.act;
        char bad[200] = "";
        if (f->session == h->session && a->seq > h->next_seq) {
            snprintf(bad, sizeof bad, "batch %" PRIu64 " arrived, the last sent was %" PRIu64,
                     a->seq, h->next_seq);
            return head_device_failed(h, dev, LARES_EPROTO, bad, err);
        }
        head_flight *fl = f->session == h->session ? flight_of(h, a->seq) : NULL;
        if (fl == NULL || (want != 0 && a->seq != want)) {
            continue; /* a batch abandoned earlier (a canceled generation, an old plan) */
        }
        const int32_t want_from = sender_of(&h->plan, (int32_t)a->layer);
        int32_t od, orr;
        if ((int32_t)a->n_tok != fl->n_tok || (int32_t)a->n_embd != h->n_embd ||
            cluster_act_pos(a, 0) != fl->pos0 || a->n_runs != fl->n_runs) {
            snprintf(bad, sizeof bad,
                     "%u tokens of width %u in %u runs from position %d came back, %d of %d "
                     "in %u from %d were sent",
                     a->n_tok, a->n_embd, a->n_runs, cluster_act_pos(a, 0), fl->n_tok, h->n_embd,
                     fl->n_runs, fl->pos0);
        } else if (want_from < 0 || h->member[want_from] != dev ||
                   ((int32_t)a->layer != h->n_layer && (int32_t)a->layer < fl->end &&
                    !(cluster_plan_owner(&h->plan, (int32_t)a->layer, &od, &orr) &&
                      (od == 0 || (od == 1 && h->plan.w[0] == 0))))) {
            /* back to the head: after the last layer, past the end asked for,
             * before a window of the head's, or (a head without layers) to
             * pass on to device 1 */
            snprintf(bad, sizeof bad,
                     "hidden states for layer %u came from a device that did not "
                     "run the layer before it",
                     a->layer);
        }
        if (bad[0] != '\0') {
            return head_device_failed(h, dev, LARES_EPROTO, bad, err);
        }
        const uint64_t spent = count_trace(h, a);
        cluster_act_read(a, x != NULL ? x : fl->dst);
        *layer = (int32_t)a->layer;
        *seq = a->seq;
        h->hops += a->n_trace + 1;
        /* from the send, not from this call: the workers may start before the
         * caller gets here (on a loaded machine the head is often preempted) */
        const uint64_t out_us = (lares_now_ns() - fl->sent_ns) / 1000u;
        h->wait_us += out_us;
        if (h->n_flight == 1) { /* with others in flight a window also waits its turn */
            const double net = (double)(out_us - LARES_MIN(out_us, spent)) / (a->n_trace + 1);
            h->hop_us = h->hop_us < 0 ? net : 0.8 * h->hop_us + 0.2 * net;
        }
        flight_done(h, fl);
        return LARES_OK;
    }
}

lares_status cluster_head_recv(cluster_head *h, uint64_t seq, int32_t n_tok, float *x,
                               int32_t *layer, const _Atomic bool *cancel, lares_error *err) {
    /* the batches sent before this one were abandoned (a canceled generation) */
    for (int32_t i = 0; i < h->n_flight;) {
        if (h->flight[i].seq < seq) {
            flight_done(h, &h->flight[i]);
        } else {
            i++;
        }
    }
    const head_flight *fl = flight_of(h, seq);
    if (fl != NULL && fl->n_tok != n_tok) {
        return lares_fail(err, LARES_EINVAL, "ring: batch %" PRIu64 " has %d rows, not %d", seq,
                          fl->n_tok, n_tok);
    }
    uint64_t got = 0;
    return recv_flight(h, seq, x, &got, layer, cancel, err);
}

lares_status cluster_head_recv_any(cluster_head *h, uint64_t *seq, int32_t *layer,
                                   const _Atomic bool *cancel, lares_error *err) {
    return recv_flight(h, 0, NULL, seq, layer, cancel, err);
}

lares_status cluster_head_truncate(cluster_head *h, uint32_t slot, int32_t pos, lares_error *err) {
    lares_status st = head_usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    if (slot >= h->n_slots) {
        return lares_fail(err, LARES_EINVAL, "truncate: slot %u, the plan counts %u", slot,
                          h->n_slots);
    }
    bool need[CLUSTER_MAX_DEVICES] = {false};
    const cluster_kv kv = {
        .op = pos == 0 ? CLUSTER_KV_CLEAR : CLUSTER_KV_TRUNCATE, .pos = pos, .slot = slot};
    for (int32_t i = 1; i < h->plan.n_dev; i++) {
        const int32_t d = h->member[i];
        st = head_pipe_send(
            h, d, cluster_encode_kv(h->buf, h->buf_cap, h->session, CLUSTER_KV, &kv), err);
        if (st != LARES_OK) {
            return st;
        }
        need[d] = true;
    }
    return head_collect(h, CLUSTER_KV_DONE, need, (int64_t)h->connect_ms, err);
}

static lares_status kv_args(cluster_head *h, int32_t dev, uint32_t slot, int32_t layer,
                            int32_t pos0, int32_t pos1, lares_error *err) {
    lares_status st = head_usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    if (dev < 1 || dev >= h->n_cfg || h->pos_of[dev] < 1 || layer < 0 || layer >= h->n_layer ||
        pos0 < 0 || pos1 <= pos0 || pos1 > h->n_ctx || h->kv_row_bytes == 0 || slot >= h->n_slots) {
        return lares_fail(err, LARES_EINVAL,
                          "kv transfer: device %d, slot %u, layer %d, positions %d to %d (context "
                          "%d)",
                          dev, slot, layer, pos0, pos1, h->n_ctx);
    }
    return LARES_OK;
}

lares_status cluster_head_kv_get(cluster_head *h, int32_t dev, uint32_t slot, int32_t layer,
                                 int32_t pos0, int32_t pos1, uint8_t *k, uint8_t *v,
                                 lares_error *err) {
    lares_status st = kv_args(h, dev, slot, layer, pos0, pos1, err);
    if (st != LARES_OK) {
        return st;
    }
    const cluster_kv_get g = {.layer = (uint32_t)layer, .pos0 = pos0, .pos1 = pos1, .slot = slot};
    st = head_pipe_send(h, dev, cluster_encode_kv_get(h->buf, h->buf_cap, h->session, &g), err);
    int32_t next = pos0;
    const size_t row = h->kv_row_bytes;
    while (st == LARES_OK && next < pos1) {
        int32_t from = 0;
        st = head_pipe_recv(h, (int64_t)h->connect_ms * 4, &from, NULL, err);
        if (st != LARES_OK) {
            if (st == LARES_ENET && !h->broken && !h->needs_plan) {
                st = head_device_failed(h, dev, LARES_ENET, "no answer to a kv request", err);
            }
            break;
        }
        const cluster_frame *f = h->frame;
        if (from != dev || f->type != CLUSTER_KV_DATA || f->session != h->session) {
            continue; /* late frames of an earlier batch */
        }
        const cluster_kv_data *d = &f->u.kv_data;
        if ((int32_t)d->layer != layer || d->slot != slot || d->pos0 != next ||
            d->row_bytes != row || d->kv_f16 != (h->kv_f16 ? 1 : 0) ||
            (int64_t)d->pos0 + d->n_pos > pos1) {
            char bad[200];
            snprintf(bad, sizeof bad,
                     "sent kv rows of layer %u from position %d (%u rows of %u bytes), "
                     "layer %d from %d (rows of %zu bytes) expected",
                     d->layer, d->pos0, d->n_pos, d->row_bytes, layer, next, row);
            st = head_device_failed(h, dev, LARES_EPROTO, bad, err);
            break;
        }
        const size_t off = (size_t)(d->pos0 - pos0) * row;
        memcpy(k + off, d->k, (size_t)d->n_pos * row);
        memcpy(v + off, d->v, (size_t)d->n_pos * row);
        next += (int32_t)d->n_pos;
    }
    return st;
}

lares_status cluster_head_kv_put(cluster_head *h, int32_t dev, uint32_t slot, int32_t layer,
                                 int32_t pos0, int32_t pos1, const uint8_t *k, const uint8_t *v,
                                 lares_error *err) {
    lares_status st = kv_args(h, dev, slot, layer, pos0, pos1, err);
    if (st != LARES_OK) {
        return st;
    }
    const size_t row = h->kv_row_bytes;
    const uint32_t fit = cluster_kv_data_fit(h->buf_cap, (uint32_t)row);
    for (int32_t p = pos0; p < pos1 && st == LARES_OK;) {
        const uint32_t n = (uint32_t)LARES_MIN((int64_t)fit, (int64_t)(pos1 - p));
        const size_t off = (size_t)(p - pos0) * row;
        const cluster_kv_data d = {.layer = (uint32_t)layer,
                                   .pos0 = p,
                                   .n_pos = n,
                                   .row_bytes = (uint32_t)row,
                                   .kv_f16 = h->kv_f16 ? 1 : 0,
                                   .last = p + (int32_t)n == pos1 ? 1 : 0,
                                   .slot = slot,
                                   .k = k + off,
                                   .v = v + off};
        st =
            head_pipe_send(h, dev, cluster_encode_kv_data(h->buf, h->buf_cap, h->session, &d), err);
        p += (int32_t)n;
    }
    bool need[CLUSTER_MAX_DEVICES] = {false};
    need[dev] = true;
    if (st == LARES_OK) {
        st = head_collect(h, CLUSTER_KV_DONE, need, (int64_t)h->connect_ms * 4, err);
    }
    return st;
}

lares_status cluster_head_ping(cluster_head *h, int32_t dev, uint32_t filler_bytes, int tries,
                               uint32_t *rtt_us, lares_error *err) {
    lares_status st = head_usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    if (dev < 1 || dev >= h->n_cfg || !cluster_head_usable(h, dev) ||
        filler_bytes + (size_t)64 > h->buf_cap) {
        return lares_fail(err, LARES_EINVAL, "ping: device %d, %u bytes", dev, filler_bytes);
    }
    uint64_t best = UINT64_MAX;
    for (int t = 0; t < LARES_MAX(tries, 1) && st == LARES_OK; t++) {
        const uint64_t nonce = ++h->next_nonce;
        const uint64_t t0 = lares_now_ns();
        st = head_pipe_send(
            h, dev,
            cluster_encode_ping(h->buf, h->buf_cap, h->session, CLUSTER_PING, nonce, filler_bytes),
            err);
        for (;;) {
            int32_t from = 0;
            if (st != LARES_OK ||
                (st = head_pipe_recv(h, (int64_t)h->timeout_ms, &from, NULL, err)) != LARES_OK) {
                break;
            }
            if (from == dev && h->frame->type == CLUSTER_PONG && h->frame->u.ping.nonce == nonce) {
                best = LARES_MIN(best, lares_now_ns() - t0);
                break;
            }
        }
    }
    if (st == LARES_OK) {
        *rtt_us = (uint32_t)LARES_MIN(best / 1000u, (uint64_t)UINT32_MAX);
    }
    return st;
}

void cluster_head_add_local(cluster_head *h, int32_t layers, int32_t n_tok, uint64_t compute_us,
                            uint64_t wait_us) {
    h->stats[0].windows++;
    h->stats[0].compute_us += compute_us;
    h->stats[0].wait_us += wait_us;
    const int64_t rows = (int64_t)LARES_MAX(layers, 0) * (int64_t)LARES_MAX(n_tok, 0);
    h->stats[0].layers_run += (uint64_t)rows;
    h->pass[0].compute_us += compute_us;
    h->pass[0].wait_us += wait_us;
    h->pass[0].layers += rows; /* rows per pass, as the members' (count_trace) */
}

void cluster_head_take_pass(cluster_head *h, cluster_pass *out) {
    for (int32_t d = 0; d < h->n_cfg; d++) {
        out[d] = h->pass[d];
        h->pass[d] = (cluster_pass){.mem_free_mib = h->pass[d].mem_free_mib};
    }
}
