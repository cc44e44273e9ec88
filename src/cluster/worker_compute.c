/*
 * The worker's compute thread: it takes the frames the network thread passes
 * on (HELLO, PLAN, ACT, KV, KV_GET, KV_DATA), runs them through the
 * cluster_compute callbacks, and hands the answers back. For hidden states it
 * checks the frame against the plan (the window must start at the frame's
 * layer, the positions must follow what the KV cache holds for every layer of
 * the window), runs the window and sends the result on (to the successor, or
 * to the head after the last layer, the end the head asked for, or from the
 * last device). Prefetching the next window is the executor's
 * (api/ring_worker.c).
 *
 * The KV entries are tracked per layer (filled[l]), so that a re-plan
 * (CLUSTER_PLAN_KEEP_KV) keeps what the layers still held have, and layers
 * gained start empty until the head rebuilds or transfers them (issue 9);
 * and per KV slot (issue 20: a batch's sequences, PLAN flag 8), each slot's
 * table made when the slot first comes. A run of a slot's rows at positions
 * [p, p + n) leaves the slot's entries of the window's layers at [0, p + n):
 * what lay beyond belonged to rows the head dropped (a sequence that
 * started again, drafts not drawn), so a batch needs no KV truncation.
 */
#include "cluster/cluster_impl.h"

#include <pthread.h>

struct worker_compute {
    void *pipe;
    cluster_ship_link ship; /* its quit: a WC_QUIT arrived while a transfer waited */
    pthread_t thread;
    cluster_compute cc;
    cluster_event_fn on_event;
    void *user;
    cluster_frame *frame;  /* owned: decoding scratch */
    cluster_plan_msg plan; /* the current plan */
    uint64_t session;      /* 0: no plan in force */
    bool probe;            /* the plan is a probe: no windows */
    int32_t rounds;
    int32_t n_layer;
    /* owned, CLUSTER_MAX_SLOTS (NULL: no plan): per slot NULL (never used)
     * or n_layer: positions [0, filled[s][l]) of layer l hold its entries */
    int32_t **filled;
    uint32_t kv_row_bytes; /* one position's K row of one layer */
    float *x;              /* owned: n_batch x n_embd */
    int32_t *pos;          /* owned: n_batch */
    cluster_run *runs;     /* owned: n_batch, the runs of the ACT at hand */
    uint8_t *out;          /* owned: one encoded frame */
    size_t out_cap;
    uint8_t *kv_k, *kv_v; /* owned: rows of one KV_DATA answer */
    uint32_t kv_fit;      /* positions per KV_DATA frame */
    uint8_t small[1024];  /* replies that are not hidden states */
};

static void emit(worker_compute *wc, const cluster_event *ev) {
    if (wc->on_event != NULL) {
        wc->on_event(ev, wc->user);
    }
}

static void reply(worker_compute *wc, uint8_t dest, const void *frame, size_t len) {
    uint8_t cmd[WC_CMD_BYTES] = {dest};
    if (len == 0) {
        return; /* an encoder refused: nothing sane to send */
    }
    net_pipe_send(wc->pipe, cmd, sizeof cmd, ZMQ_SNDMORE);
    net_pipe_send(wc->pipe, frame, len, 0);
}

static void reply_error(worker_compute *wc, uint64_t session, lares_status code, const char *msg) {
    reply(wc, WC_TO_HEAD, wc->small,
          cluster_encode_error(wc->small, sizeof wc->small, session, (uint32_t)code, msg));
}

static void free_buffers(worker_compute *wc) {
    lares_free(wc->x);
    lares_free(wc->pos);
    lares_free(wc->runs);
    lares_free(wc->out);
    lares_free(wc->kv_k);
    lares_free(wc->kv_v);
    wc->x = NULL;
    wc->pos = NULL;
    wc->runs = NULL;
    wc->out = NULL;
    wc->kv_k = wc->kv_v = NULL;
    wc->kv_fit = 0;
}

static void free_filled(worker_compute *wc) {
    for (int32_t i = 0; wc->filled != NULL && i < CLUSTER_MAX_SLOTS; i++) {
        lares_free(wc->filled[i]);
    }
    lares_free(wc->filled);
    wc->filled = NULL;
}

static void release(worker_compute *wc) {
    if (wc->session != 0 && wc->cc.release != NULL) {
        wc->cc.release(wc->cc.user);
    }
    wc->session = 0;
    wc->probe = false;
    free_filled(wc);
    wc->n_layer = 0;
    free_buffers(wc);
}

/* Positions slot's layer holds (0 for a slot never used). */
static int32_t filled_of(const worker_compute *wc, uint32_t slot, int32_t layer) {
    return wc->filled[slot] != NULL ? wc->filled[slot][layer] : 0;
}

/* The slot's table, made on its first use; NULL when out of memory. */
static int32_t *slot_filled(worker_compute *wc, uint32_t slot) {
    if (wc->filled[slot] == NULL) {
        wc->filled[slot] = lares_calloc((size_t)wc->n_layer, sizeof *wc->filled[slot]);
    }
    return wc->filled[slot];
}

/* A slot other than 0 needs a plan with slots (PLAN flag 8) that counts it. */
static bool slot_ok(const worker_compute *wc, uint32_t slot, char *bad, size_t cap) {
    if (slot != 0 && !(wc->plan.flags & CLUSTER_PLAN_SLOTS)) {
        snprintf(bad, cap, "kv slot %u under a plan without slots", slot);
        return false;
    }
    if (slot >= wc->plan.n_slots) {
        snprintf(bad, cap, "kv slot %u, the plan counts %u", slot, wc->plan.n_slots);
        return false;
    }
    return true;
}

static void on_hello(worker_compute *wc, const cluster_hello *h) {
    cluster_welcome *w = lares_calloc(1, sizeof *w);
    lares_error err = {0};
    lares_status st = w != NULL ? wc->cc.open(wc->cc.user, h, w, &err)
                                : lares_fail(&err, LARES_ENOMEM, "out of memory");
    if (st == LARES_OK && (w->model.file_bytes != h->model.file_bytes ||
                           w->model.header_hash != h->model.header_hash)) {
        st = lares_fail(&err, LARES_EINVAL,
                        "wrong model file: this worker's is %" PRIu64 " bytes with header hash "
                        "%016" PRIx64 ", the head's %" PRIu64 " bytes with %016" PRIx64,
                        w->model.file_bytes, w->model.header_hash, h->model.file_bytes,
                        h->model.header_hash);
    }
    if (st != LARES_OK) {
        const cluster_event ev = {.kind = CLUSTER_EV_REFUSED, .text = err.msg};
        emit(wc, &ev);
        reply_error(wc, 0, st, err.msg);
    } else {
        /* a profile makes the answer larger than `small` */
        uint8_t *b = lares_alloc(CLUSTER_MAX_PROFILE + 1024);
        if (b != NULL) {
            reply(wc, WC_TO_HEAD, b, cluster_encode_welcome(b, CLUSTER_MAX_PROFILE + 1024, w));
            lares_free(b);
        } else {
            reply_error(wc, 0, LARES_ENOMEM, "out of memory for the welcome");
        }
    }
    lares_free(w);
}

/* the round in which device `self` runs `layer`, -1 when it does not hold it */
static int32_t round_of(const cluster_plan *p, int32_t self, int32_t layer) {
    for (int32_t r = 0; r < cluster_plan_rounds(p); r++) {
        int32_t l0, l1;
        if (cluster_plan_window(p, self, r, &l0, &l1) && layer >= l0 && layer < l1) {
            return r;
        }
    }
    return -1;
}

static lares_status alloc_buffers(worker_compute *wc, const cluster_plan_msg *p, lares_error *err) {
    free_buffers(wc);
    const size_t act =
        cluster_act_bytes_runs(p->n_batch, p->n_embd, p->act_dtype, CLUSTER_MAX_TRACE,
                               (p->flags & CLUSTER_PLAN_SLOTS) ? p->n_batch : 0);
    const size_t kv1 = cluster_kv_data_bytes(1, wc->kv_row_bytes);
    wc->out_cap = LARES_MAX(act, kv1);
    wc->kv_fit = wc->kv_row_bytes > 0 ? cluster_kv_data_fit(wc->out_cap, wc->kv_row_bytes) : 0;
    wc->x = lares_alloc_array((size_t)p->n_batch * p->n_embd, sizeof *wc->x);
    wc->pos = lares_alloc_array(p->n_batch, sizeof *wc->pos);
    wc->runs = lares_alloc_array(p->n_batch, sizeof *wc->runs);
    wc->out = wc->out_cap ? lares_alloc(wc->out_cap) : NULL;
    if (wc->kv_fit > 0) {
        wc->kv_k = lares_alloc_array(wc->kv_fit, wc->kv_row_bytes);
        wc->kv_v = lares_alloc_array(wc->kv_fit, wc->kv_row_bytes);
    }
    if (wc->x == NULL || wc->pos == NULL || wc->runs == NULL || wc->out == NULL ||
        (wc->kv_fit > 0 && (wc->kv_k == NULL || wc->kv_v == NULL))) {
        return lares_fail(err, LARES_ENOMEM, "out of memory for a batch of %u x %u", p->n_batch,
                          p->n_embd);
    }
    return LARES_OK;
}

static void on_plan(worker_compute *wc, uint64_t session, const cluster_plan_msg *p) {
    lares_error err = {0};
    cluster_ready ready = {0};
    const bool probe = (p->flags & CLUSTER_PLAN_PROBE) != 0;
    const bool keep = (p->flags & CLUSTER_PLAN_KEEP_KV) != 0 && wc->session != 0 &&
                      wc->filled != NULL && wc->n_layer == p->plan.n_layer &&
                      wc->plan.n_ctx == p->n_ctx && wc->plan.kv_f16 == p->kv_f16;
    if (!keep) {
        release(wc);
    }
    lares_status st = LARES_OK;
    bool kept = false;
    if (!probe) {
        st = wc->cc.setup(wc->cc.user, p, keep, &ready, &kept, &wc->kv_row_bytes, &err);
    } else if (wc->cc.release != NULL && wc->session != 0) {
        wc->cc.release(wc->cc.user);
    }
    if (st == LARES_OK && wc->filled == NULL) {
        wc->filled = lares_calloc(CLUSTER_MAX_SLOTS, sizeof *wc->filled);
        wc->n_layer = p->plan.n_layer;
        kept = false;
        if (wc->filled == NULL || slot_filled(wc, 0) == NULL) {
            st = lares_fail(&err, LARES_ENOMEM, "out of memory");
        }
    }
    if (st == LARES_OK) {
        st = alloc_buffers(wc, p, &err);
    }
    if (st != LARES_OK) {
        release(wc);
        const cluster_event ev = {.kind = CLUSTER_EV_ERROR, .text = err.msg};
        emit(wc, &ev);
        reply_error(wc, session, st, err.msg);
        return;
    }
    /* entries survive only for layers held before and after, in a cache that
     * was kept, of slots the new plan counts (the others' caches are gone) */
    for (uint32_t sl = 0; sl < CLUSTER_MAX_SLOTS; sl++) {
        for (int32_t l = 0; wc->filled[sl] != NULL && l < wc->n_layer; l++) {
            if (probe || !kept || sl >= p->n_slots || round_of(&p->plan, (int32_t)p->self, l) < 0) {
                wc->filled[sl][l] = 0;
            }
        }
    }
    wc->plan = *p;
    wc->session = session;
    wc->probe = probe;
    wc->rounds = cluster_plan_rounds(&p->plan);
    reply(wc, WC_TO_HEAD, wc->small,
          cluster_encode_ready(wc->small, sizeof wc->small, session, &ready));
}

/* KV_MIRROR: the entries of layers [l0, l1) at positions [pos0, pos0 + n)
 * that a window just wrote, to the head (after the hidden states went on, so
 * the copy costs the ring no latency; a frame lost with the device only
 * makes the head re-run those positions) */
static void send_mirror(worker_compute *wc, uint64_t session, uint32_t slot, int32_t l0, int32_t l1,
                        int32_t pos0, int32_t n) {
    if (!(wc->plan.flags & CLUSTER_PLAN_MIRROR_KV) || wc->cc.kv_rows == NULL || wc->kv_fit == 0) {
        return;
    }
    for (int32_t l = l0; l < l1; l++) {
        for (int32_t p = pos0; p < pos0 + n;) {
            const int32_t c = (int32_t)LARES_MIN((int64_t)wc->kv_fit, (int64_t)(pos0 + n - p));
            lares_error err = {0};
            if (wc->cc.kv_rows(wc->cc.user, slot, l, p, c, false, wc->kv_k, wc->kv_v, &err) !=
                LARES_OK) {
                return; /* the head re-runs what it lacks */
            }
            const cluster_kv_data d = {.layer = (uint32_t)l,
                                       .pos0 = p,
                                       .n_pos = (uint32_t)c,
                                       .row_bytes = wc->kv_row_bytes,
                                       .kv_f16 = wc->plan.kv_f16,
                                       .slot = slot,
                                       .k = wc->kv_k,
                                       .v = wc->kv_v};
            reply(wc, WC_TO_HEAD, wc->out,
                  cluster_encode_kv_mirror(wc->out, wc->out_cap, session, &d));
            p += c;
        }
    }
}

static void on_act(worker_compute *wc, uint64_t session, const cluster_act *a, uint64_t rx_ns) {
    const cluster_plan *p = &wc->plan.plan;
    const int32_t self = (int32_t)wc->plan.self;
    int32_t dev = -1, r = -1, l0 = 0, l1 = 0;
    char bad[CLUSTER_MAX_MSG + 1] = "";
    if (wc->session == 0 || session != wc->session) {
        return; /* a frame of a session that is over */
    }
    if (wc->probe) {
        snprintf(bad, sizeof bad, "hidden states under a probe plan, which has no windows");
    } else if (a->n_embd != wc->plan.n_embd || a->n_tok > wc->plan.n_batch) {
        snprintf(bad, sizeof bad, "%u tokens of width %u (the plan: batch %u, width %u)", a->n_tok,
                 a->n_embd, wc->plan.n_batch, wc->plan.n_embd);
    } else if (!cluster_plan_owner(p, (int32_t)a->layer, &dev, &r) || dev != self) {
        snprintf(bad, sizeof bad,
                 "hidden states for layer %u, where no window of this device "
                 "starts",
                 a->layer);
    } else if (a->n_trace >= CLUSTER_MAX_TRACE) {
        snprintf(bad, sizeof bad, "%u trace entries: no room for this device's", a->n_trace);
    } else if (a->n_runs > 0 && !(wc->plan.flags & CLUSTER_PLAN_SLOTS)) {
        snprintf(bad, sizeof bad, "a run table under a plan without slots");
    }
    /* the rows of each slot (one run of slot 0 without a table) must follow
     * what its cache holds in every layer of the window */
    const uint32_t n_runs = a->n_runs > 0 ? a->n_runs : 1;
    uint32_t row = 0;
    for (uint32_t i = 0; i < n_runs && bad[0] == '\0'; i++) {
        if (a->n_runs > 0) {
            cluster_act_run_at(a, i, &wc->runs[i]);
        } else {
            wc->runs[0] = (cluster_run){.slot = 0, .rows = a->n_tok};
        }
        const cluster_run *run = &wc->runs[i];
        if (!slot_ok(wc, run->slot, bad, sizeof bad)) {
            break;
        }
        if (i == 0) {
            cluster_plan_window(p, self, r, &l0, &l1);
        }
        const int32_t first = cluster_act_pos(a, row);
        const int64_t last = (int64_t)first + run->rows - 1;
        for (int32_t l = l0; l < l1 && bad[0] == '\0'; l++) {
            if (first > filled_of(wc, run->slot, l) || last >= (int64_t)wc->plan.n_ctx) {
                snprintf(bad, sizeof bad,
                         "slot %u positions %d..%" PRId64 " (layer %d holds %d of a context of %u)",
                         run->slot, first, last, l, filled_of(wc, run->slot, l), wc->plan.n_ctx);
            }
        }
        if (bad[0] == '\0' && slot_filled(wc, run->slot) == NULL) {
            snprintf(bad, sizeof bad, "out of memory for slot %u", run->slot);
        }
        row += run->rows;
    }
    if (bad[0] != '\0') {
        const cluster_event ev = {.kind = CLUSTER_EV_REFUSED, .text = bad};
        emit(wc, &ev);
        reply_error(wc, session, LARES_EPROTO, bad);
        return;
    }
    for (uint32_t i = 0; i < a->n_tok; i++) {
        wc->pos[i] = cluster_act_pos(a, i);
    }
    cluster_act_read(a, wc->x);
    cluster_trace trace[CLUSTER_MAX_TRACE];
    for (uint32_t i = 0; i < a->n_trace; i++) {
        cluster_act_trace_at(a, i, &trace[i]);
    }
    const uint64_t t0 = lares_now_ns();
    cluster_figures fig = {.mem_free_mib = UINT32_MAX};
    lares_error err = {0};
    lares_status st = wc->cc.forward(wc->cc.user, l0, l1, wc->runs, (int32_t)n_runs, wc->pos,
                                     (int32_t)a->n_tok, wc->x, &fig, &err);
    const uint64_t t1 = lares_now_ns();
    if (st != LARES_OK) {
        const cluster_event ev = {.kind = CLUSTER_EV_ERROR, .text = err.msg};
        emit(wc, &ev);
        reply_error(wc, session, st, err.msg);
        return;
    }
    /* a run table sets how far each slot reaches (see the top); the frame
     * without one only ever adds */
    row = 0;
    for (uint32_t i = 0; i < n_runs; i++) {
        const int32_t end = wc->pos[row + wc->runs[i].rows - 1] + 1;
        int32_t *f = wc->filled[wc->runs[i].slot];
        for (int32_t l = l0; l < l1; l++) {
            f[l] = a->n_runs > 0 ? end : LARES_MAX(f[l], end);
        }
        row += wc->runs[i].rows;
    }
    trace[a->n_trace] =
        (cluster_trace){.device = (uint16_t)self,
                        .round = (uint16_t)r,
                        .compute_us = (uint32_t)LARES_MIN((t1 - t0) / 1000u, UINT32_MAX),
                        .wait_us = fig.wait_us,
                        .major_faults = fig.major_faults,
                        .mem_free_mib = fig.mem_free_mib};
    const cluster_act out = {.seq = a->seq,
                             .layer = (uint32_t)l1,
                             .end = a->end,
                             .n_tok = a->n_tok,
                             .n_embd = a->n_embd,
                             .dtype = wc->plan.act_dtype,
                             .n_trace = a->n_trace + 1,
                             .n_runs = a->n_runs};
    /* after the model's last layer, past the end the head asked for, or from
     * the last device: back to the head */
    const uint8_t dest = l1 == p->n_layer || (uint32_t)l1 >= a->end || self == p->n_dev - 1
                             ? WC_TO_HEAD
                             : WC_TO_NEXT;
    reply(wc, dest, wc->out,
          cluster_encode_act_runs(wc->out, wc->out_cap, session, &out, wc->runs, wc->pos, trace,
                                  wc->x));
    row = 0;
    for (uint32_t i = 0; i < n_runs; i++) {
        send_mirror(wc, session, wc->runs[i].slot, l0, l1, wc->pos[row], (int32_t)wc->runs[i].rows);
        row += wc->runs[i].rows;
    }
    char text[160];
    const double compute_ms = (double)(t1 - t0) / 1e6;
    const double wait_ms = t0 > rx_ns && rx_ns != 0 ? (double)(t0 - rx_ns) / 1e6 : 0;
    snprintf(text, sizeof text,
             "round %d layers [%d, %d) %u token%s at %d: compute %.2f ms (disk %.2f ms), "
             "queued %.2f ms",
             r, l0, l1, a->n_tok, a->n_tok == 1 ? "" : "s", wc->pos[0], compute_ms,
             (double)fig.wait_us / 1e3, wait_ms);
    const cluster_event ev = {.kind = CLUSTER_EV_ROUND,
                              .text = text,
                              .round = r,
                              .l0 = l0,
                              .l1 = l1,
                              .n_tok = (int32_t)a->n_tok,
                              .compute_ms = compute_ms,
                              .wait_ms = wait_ms};
    emit(wc, &ev);
}

static void on_kv(worker_compute *wc, uint64_t session, const cluster_kv *kv) {
    char bad[CLUSTER_MAX_MSG + 1] = "";
    if (wc->session == 0 || session != wc->session) {
        reply_error(wc, session, LARES_EPROTO, "a kv operation outside the current plan");
        return;
    }
    if (!slot_ok(wc, kv->slot, bad, sizeof bad)) {
        reply_error(wc, session, LARES_EPROTO, bad);
        return;
    }
    const int32_t pos = kv->op == CLUSTER_KV_CLEAR ? 0 : kv->pos;
    for (int32_t l = 0; wc->filled[kv->slot] != NULL && l < wc->n_layer; l++) {
        wc->filled[kv->slot][l] = LARES_MIN(wc->filled[kv->slot][l], pos);
    }
    if (wc->cc.truncate != NULL) {
        wc->cc.truncate(wc->cc.user, kv->slot, pos);
    }
    reply(wc, WC_TO_HEAD, wc->small,
          cluster_encode_kv(wc->small, sizeof wc->small, session, CLUSTER_KV_DONE, kv));
}

/* a KV request or put must name a layer this device holds under the plan */
static bool kv_layer_ok(worker_compute *wc, uint64_t session, uint32_t slot, uint32_t layer,
                        char *bad, size_t cap) {
    if (wc->session == 0 || session != wc->session || wc->probe || wc->cc.kv_rows == NULL ||
        wc->kv_fit == 0) {
        snprintf(bad, cap, "a kv transfer outside the current plan");
        return false;
    }
    if (!slot_ok(wc, slot, bad, cap)) {
        return false;
    }
    if (layer >= (uint32_t)wc->n_layer ||
        round_of(&wc->plan.plan, (int32_t)wc->plan.self, (int32_t)layer) < 0) {
        snprintf(bad, cap, "kv rows of layer %u, which this device does not hold", layer);
        return false;
    }
    return true;
}

static void on_kv_get(worker_compute *wc, uint64_t session, const cluster_kv_get *g) {
    char bad[CLUSTER_MAX_MSG + 1] = "";
    if (kv_layer_ok(wc, session, g->slot, g->layer, bad, sizeof bad) &&
        g->pos1 > filled_of(wc, g->slot, (int32_t)g->layer)) {
        snprintf(bad, sizeof bad, "kv rows %d..%d of slot %u layer %u asked, it holds %d", g->pos0,
                 g->pos1, g->slot, g->layer, filled_of(wc, g->slot, (int32_t)g->layer));
    }
    for (int32_t p = g->pos0; p < g->pos1 && bad[0] == '\0';) {
        const int32_t n = (int32_t)LARES_MIN((int64_t)wc->kv_fit, (int64_t)(g->pos1 - p));
        lares_error err = {0};
        if (wc->cc.kv_rows(wc->cc.user, g->slot, (int32_t)g->layer, p, n, false, wc->kv_k, wc->kv_v,
                           &err) != LARES_OK) {
            snprintf(bad, sizeof bad, "%s", err.msg);
            break;
        }
        const cluster_kv_data d = {.layer = g->layer,
                                   .pos0 = p,
                                   .n_pos = (uint32_t)n,
                                   .row_bytes = wc->kv_row_bytes,
                                   .kv_f16 = wc->plan.kv_f16,
                                   .last = p + n == g->pos1 ? 1 : 0,
                                   .slot = g->slot,
                                   .k = wc->kv_k,
                                   .v = wc->kv_v};
        reply(wc, WC_TO_HEAD, wc->out, cluster_encode_kv_data(wc->out, wc->out_cap, session, &d));
        p += n;
    }
    if (bad[0] != '\0') {
        const cluster_event ev = {.kind = CLUSTER_EV_REFUSED, .text = bad};
        emit(wc, &ev);
        reply_error(wc, session, LARES_EPROTO, bad);
    }
}

static void on_kv_data(worker_compute *wc, uint64_t session, const cluster_kv_data *d) {
    char bad[CLUSTER_MAX_MSG + 1] = "";
    if (kv_layer_ok(wc, session, d->slot, d->layer, bad, sizeof bad)) {
        if (d->row_bytes != wc->kv_row_bytes || d->kv_f16 != wc->plan.kv_f16) {
            snprintf(bad, sizeof bad, "kv rows of %u bytes (%s), this cache has %u (%s)",
                     d->row_bytes, d->kv_f16 ? "f16" : "f32", wc->kv_row_bytes,
                     wc->plan.kv_f16 ? "f16" : "f32");
        } else if (d->pos0 > filled_of(wc, d->slot, (int32_t)d->layer) ||
                   (int64_t)d->pos0 + d->n_pos > (int64_t)wc->plan.n_ctx) {
            snprintf(bad, sizeof bad,
                     "kv rows %d..%u of slot %u layer %u (it holds %d, context %u)", d->pos0,
                     d->pos0 + d->n_pos, d->slot, d->layer,
                     filled_of(wc, d->slot, (int32_t)d->layer), wc->plan.n_ctx);
        } else if (slot_filled(wc, d->slot) == NULL) {
            snprintf(bad, sizeof bad, "out of memory for slot %u", d->slot);
        }
    }
    lares_error err = {0};
    if (bad[0] == '\0' &&
        wc->cc.kv_rows(wc->cc.user, d->slot, (int32_t)d->layer, d->pos0, (int32_t)d->n_pos, true,
                       (uint8_t *)d->k, (uint8_t *)d->v, &err) != LARES_OK) {
        snprintf(bad, sizeof bad, "%s", err.msg);
    }
    if (bad[0] != '\0') {
        const cluster_event ev = {.kind = CLUSTER_EV_REFUSED, .text = bad};
        emit(wc, &ev);
        reply_error(wc, session, LARES_EPROTO, bad);
        return;
    }
    int32_t *f = wc->filled[d->slot];
    f[d->layer] = LARES_MAX(f[d->layer], d->pos0 + (int32_t)d->n_pos);
    if (d->last) {
        const cluster_kv done = {.op = CLUSTER_KV_PUT, .pos = f[d->layer], .slot = d->slot};
        reply(wc, WC_TO_HEAD, wc->small,
              cluster_encode_kv(wc->small, sizeof wc->small, session, CLUSTER_KV_DONE, &done));
    }
}

lares_status cluster_ship_send(cluster_ship_link *l, const cluster_tensor_get *g, lares_error *err) {
    uint8_t f[64];
    const size_t n = cluster_encode_tensor_get(f, sizeof f, g);
    if (n == 0) {
        return lares_fail(err, LARES_EINVAL, "a tensor request does not encode");
    }
    uint8_t cmd[WC_CMD_BYTES] = {WC_TO_HEAD};
    net_pipe_send(l->pipe, cmd, sizeof cmd, ZMQ_SNDMORE);
    net_pipe_send(l->pipe, f, n, 0);
    return LARES_OK;
}

void ship_link_close(cluster_ship_link *l) {
    if (l->have_last) {
        zmq_msg_close(&l->last);
        l->have_last = false;
    }
}

lares_status cluster_ship_recv(cluster_ship_link *l, uint32_t timeout_ms, cluster_tensor_data *out,
                               lares_error *err) {
    ship_link_close(l);
    const uint64_t t0 = lares_now_ns();
    for (;;) {
        if (l->quit) {
            return lares_fail(err, LARES_ECANCELED, "the worker is stopping");
        }
        const uint64_t spent = (lares_now_ns() - t0) / 1000000u;
        if (spent >= timeout_ms) {
            return lares_fail(err, LARES_ENET, "no weights from the head within %u ms",
                              timeout_ms);
        }
        zmq_pollitem_t it = {.socket = l->pipe, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, (long)LARES_MIN((uint64_t)timeout_ms - spent, 100u)) < 0 &&
            zmq_errno() != EINTR) {
            return lares_fail(err, LARES_ENET, "worker pipe: %s", zmq_strerror(zmq_errno()));
        }
        if (!(it.revents & ZMQ_POLLIN)) {
            continue;
        }
        zmq_msg_t cmd, frame;
        zmq_msg_init(&cmd);
        zmq_msg_init(&frame);
        if (net_pipe_msg_recv(&cmd, l->pipe, 0) < 0 ||
            (zmq_msg_more(&cmd) && net_pipe_msg_recv(&frame, l->pipe, 0) < 0)) {
            zmq_msg_close(&cmd);
            zmq_msg_close(&frame);
            return lares_fail(err, LARES_ENET, "worker pipe: %s", zmq_strerror(zmq_errno()));
        }
        const uint8_t op =
            zmq_msg_size(&cmd) == WC_CMD_BYTES ? ((const uint8_t *)zmq_msg_data(&cmd))[0] : WC_QUIT;
        zmq_msg_close(&cmd);
        if (op == WC_QUIT || op == WC_RELEASE || op == WC_CANCEL) {
            zmq_msg_close(&frame);
            l->quit = l->quit || op == WC_QUIT;
            return lares_fail(err, LARES_ECANCELED, "the head %s during the transfer",
                              op == WC_QUIT      ? "went away (the worker stops)"
                              : op == WC_RELEASE ? "ended the session"
                                                 : "called the prepare off (a plan came)");
        }
        lares_error derr = {0};
        if (op == WC_FRAME &&
            cluster_frame_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), l->frame, &derr) ==
                LARES_OK &&
            l->frame->type == CLUSTER_TENSOR_DATA) {
            *out = l->frame->u.tensor_data;
            l->last = frame; /* out->data points into it */
            l->have_last = true;
            return LARES_OK;
        }
        if (derr.msg[0] != '\0') {
            zmq_msg_close(&frame);
            return lares_fail(err, LARES_EFORMAT, "the head's answer: %s", derr.msg);
        }
        lares_log(LARES_LOG_DEBUG, "cluster: dropped a %s frame during a transfer",
                  cluster_frame_type_name(l->frame->type));
        zmq_msg_close(&frame);
    }
}

static void *compute_main(void *arg) {
    worker_compute *wc = arg;
    if (wc->cc.attach_ship != NULL) {
        wc->cc.attach_ship(wc->cc.user, &wc->ship);
    }
    for (;;) {
        zmq_msg_t cmd, frame;
        zmq_msg_init(&cmd);
        zmq_msg_init(&frame);
        if (net_pipe_msg_recv(&cmd, wc->pipe, 0) < 0) {
            zmq_msg_close(&cmd);
            zmq_msg_close(&frame);
            break;
        }
        const bool more = zmq_msg_more(&cmd) != 0;
        if (more && net_pipe_msg_recv(&frame, wc->pipe, 0) < 0) {
            zmq_msg_close(&cmd);
            zmq_msg_close(&frame);
            break;
        }
        const uint8_t *c = zmq_msg_data(&cmd);
        const uint8_t op = zmq_msg_size(&cmd) == WC_CMD_BYTES ? c[0] : WC_QUIT;
        const uint64_t rx_ns = op == WC_FRAME ? rd_u64le(c + 1) : 0;
        bool quit = false;
        if (op == WC_QUIT) {
            quit = true;
        } else if (op == WC_RELEASE) {
            release(wc);
        } else if (op == WC_FRAME) {
            lares_error err = {0};
            /* the network thread checked the header; this checks everything */
            lares_status st =
                cluster_frame_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), wc->frame, &err);
            const cluster_frame *f = wc->frame;
            if (st != LARES_OK) {
                reply_error(wc, 0, st, err.msg);
            } else if (f->type == CLUSTER_HELLO) {
                on_hello(wc, &f->u.hello);
            } else if (f->type == CLUSTER_PLAN) {
                on_plan(wc, f->session, &f->u.plan);
            } else if (f->type == CLUSTER_ACT) {
                on_act(wc, f->session, &f->u.act, rx_ns);
            } else if (f->type == CLUSTER_KV) {
                on_kv(wc, f->session, &f->u.kv);
            } else if (f->type == CLUSTER_KV_GET) {
                on_kv_get(wc, f->session, &f->u.kv_get);
            } else if (f->type == CLUSTER_KV_DATA) {
                on_kv_data(wc, f->session, &f->u.kv_data);
            }
        }
        zmq_msg_close(&cmd);
        zmq_msg_close(&frame);
        if (quit || wc->ship.quit) {
            break;
        }
    }
    release(wc);
    ship_link_close(&wc->ship);
    zmq_close(wc->pipe);
    wc->pipe = NULL;
    return NULL;
}

lares_status worker_compute_start(void *zctx, const char *pipe_ep, const cluster_compute *cc,
                                  cluster_event_fn on_event, void *user, worker_compute **out,
                                  lares_error *err) {
    worker_compute *wc = lares_calloc(1, sizeof *wc);
    if (wc == NULL || (wc->frame = lares_calloc(1, sizeof *wc->frame)) == NULL ||
        (wc->ship.frame = lares_calloc(1, sizeof *wc->ship.frame)) == NULL) {
        if (wc != NULL) {
            lares_free(wc->frame);
        }
        lares_free(wc);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    wc->cc = *cc;
    wc->on_event = on_event;
    wc->user = user;
    lares_status st = net_socket(zctx, ZMQ_PAIR, &wc->pipe, err);
    if (st == LARES_OK && zmq_connect(wc->pipe, pipe_ep) != 0) {
        st = lares_fail(err, LARES_ENET, "worker pipe: %s", zmq_strerror(zmq_errno()));
    }
    wc->ship.pipe = wc->pipe;
    if (st == LARES_OK && net_thread_start(&wc->thread, compute_main, wc) != 0) {
        st = lares_fail(err, LARES_ENOMEM, "cannot start the compute thread");
    }
    if (st != LARES_OK) {
        if (wc->pipe != NULL) {
            zmq_close(wc->pipe);
        }
        lares_free(wc->frame);
        lares_free(wc->ship.frame);
        lares_free(wc);
        return st;
    }
    *out = wc;
    return LARES_OK;
}

void worker_compute_join(worker_compute *wc) {
    if (wc == NULL) {
        return;
    }
    pthread_join(wc->thread, NULL);
    lares_free(wc->frame);
    lares_free(wc->ship.frame);
    lares_free(wc);
}
