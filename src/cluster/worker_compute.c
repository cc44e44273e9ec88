/*
 * The worker's compute thread: it takes the frames the network thread passes
 * on (HELLO, PLAN, ACT, KV), runs them through the cluster_compute callbacks,
 * and hands the answers back. For hidden states it checks the frame against
 * the plan (the window must start at the frame's layer, the positions must
 * follow what the KV cache holds), runs the window, sends the result on
 * (to the successor, or to the head after the last layer or the last device).
 * Prefetching the next window is the executor's (api/ring_worker.c).
 */
#include "cluster/cluster_impl.h"

#include <pthread.h>

struct worker_compute {
    void *pipe;
    pthread_t thread;
    cluster_compute cc;
    cluster_event_fn on_event;
    void *user;
    cluster_frame *frame;  /* owned: decoding scratch */
    cluster_plan_msg plan; /* the current plan */
    uint64_t session;      /* 0: no plan in force */
    int32_t rounds;
    int32_t *filled; /* owned, per round: positions [0, filled) hold KV entries */
    float *x;        /* owned: n_batch x n_embd */
    int32_t *pos;    /* owned: n_batch */
    uint8_t *out;    /* owned: one encoded frame */
    size_t out_cap;
    uint8_t small[1024]; /* replies that are not hidden states */
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

static void release(worker_compute *wc) {
    if (wc->session != 0 && wc->cc.release != NULL) {
        wc->cc.release(wc->cc.user);
    }
    wc->session = 0;
    lares_free(wc->filled);
    lares_free(wc->x);
    lares_free(wc->pos);
    lares_free(wc->out);
    wc->filled = NULL;
    wc->x = NULL;
    wc->pos = NULL;
    wc->out = NULL;
}

static void on_hello(worker_compute *wc, const cluster_hello *h) {
    cluster_welcome w;
    memset(&w, 0, sizeof w);
    lares_error err = {0};
    lares_status st = wc->cc.open(wc->cc.user, h, &w, &err);
    if (st == LARES_OK && (w.model.file_bytes != h->model.file_bytes ||
                           w.model.header_hash != h->model.header_hash)) {
        st = lares_fail(&err, LARES_EINVAL,
                        "wrong model file: this worker's is %" PRIu64 " bytes with header hash "
                        "%016" PRIx64 ", the head's %" PRIu64 " bytes with %016" PRIx64,
                        w.model.file_bytes, w.model.header_hash, h->model.file_bytes,
                        h->model.header_hash);
    }
    if (st != LARES_OK) {
        const cluster_event ev = {.kind = CLUSTER_EV_REFUSED, .text = err.msg};
        emit(wc, &ev);
        reply_error(wc, 0, st, err.msg);
        return;
    }
    reply(wc, WC_TO_HEAD, wc->small, cluster_encode_welcome(wc->small, sizeof wc->small, &w));
}

static void on_plan(worker_compute *wc, uint64_t session, const cluster_plan_msg *p) {
    release(wc);
    lares_error err = {0};
    cluster_ready ready = {0};
    const int32_t rounds = cluster_plan_rounds(&p->plan);
    wc->out_cap = cluster_act_bytes(p->n_batch, p->n_embd, p->act_dtype, CLUSTER_MAX_TRACE);
    wc->filled = lares_calloc((size_t)rounds, sizeof *wc->filled);
    wc->x = lares_alloc_array((size_t)p->n_batch * p->n_embd, sizeof *wc->x);
    wc->pos = lares_alloc_array(p->n_batch, sizeof *wc->pos);
    wc->out = wc->out_cap ? lares_alloc(wc->out_cap) : NULL;
    lares_status st = LARES_OK;
    if (wc->filled == NULL || wc->x == NULL || wc->pos == NULL || wc->out == NULL) {
        st = lares_fail(&err, LARES_ENOMEM, "out of memory for a batch of %u x %u", p->n_batch,
                        p->n_embd);
    }
    if (st == LARES_OK) {
        st = wc->cc.setup(wc->cc.user, p, &ready, &err);
    }
    if (st != LARES_OK) {
        release(wc);
        const cluster_event ev = {.kind = CLUSTER_EV_ERROR, .text = err.msg};
        emit(wc, &ev);
        reply_error(wc, session, st, err.msg);
        return;
    }
    wc->plan = *p;
    wc->session = session;
    wc->rounds = rounds;
    reply(wc, WC_TO_HEAD, wc->small,
          cluster_encode_ready(wc->small, sizeof wc->small, session, &ready));
}

static void on_act(worker_compute *wc, uint64_t session, const cluster_act *a, uint64_t rx_ns) {
    const cluster_plan *p = &wc->plan.plan;
    const int32_t self = (int32_t)wc->plan.self;
    int32_t dev = -1, r = -1;
    char bad[200] = "";
    if (wc->session == 0 || session != wc->session) {
        return; /* a frame of a session that is over */
    }
    if (a->n_embd != wc->plan.n_embd || a->n_tok > wc->plan.n_batch) {
        snprintf(bad, sizeof bad, "%u tokens of width %u (the plan: batch %u, width %u)", a->n_tok,
                 a->n_embd, wc->plan.n_batch, wc->plan.n_embd);
    } else if (!cluster_plan_owner(p, (int32_t)a->layer, &dev, &r) || dev != self) {
        snprintf(bad, sizeof bad,
                 "hidden states for layer %u, where no window of this device "
                 "starts",
                 a->layer);
    } else if (a->n_trace >= CLUSTER_MAX_TRACE) {
        snprintf(bad, sizeof bad, "%u trace entries: no room for this device's", a->n_trace);
    } else {
        const int32_t first = cluster_act_pos(a, 0);
        const int64_t last = (int64_t)first + a->n_tok - 1;
        if (first > wc->filled[r] || last >= (int64_t)wc->plan.n_ctx) {
            snprintf(bad, sizeof bad,
                     "positions %d..%" PRId64 " (the cache holds %d of a context "
                     "of %u)",
                     first, last, wc->filled[r], wc->plan.n_ctx);
        }
    }
    if (bad[0] != '\0') {
        const cluster_event ev = {.kind = CLUSTER_EV_REFUSED, .text = bad};
        emit(wc, &ev);
        reply_error(wc, session, LARES_EPROTO, bad);
        return;
    }
    int32_t l0, l1;
    cluster_plan_window(p, self, r, &l0, &l1);
    for (uint32_t i = 0; i < a->n_tok; i++) {
        wc->pos[i] = cluster_act_pos(a, i);
    }
    cluster_act_read(a, wc->x);
    cluster_trace trace[CLUSTER_MAX_TRACE];
    for (uint32_t i = 0; i < a->n_trace; i++) {
        cluster_act_trace_at(a, i, &trace[i]);
    }
    const uint64_t t0 = lares_now_ns();
    uint32_t faults = 0;
    lares_error err = {0};
    lares_status st =
        wc->cc.forward(wc->cc.user, l0, l1, wc->pos, (int32_t)a->n_tok, wc->x, &faults, &err);
    const uint64_t t1 = lares_now_ns();
    if (st != LARES_OK) {
        const cluster_event ev = {.kind = CLUSTER_EV_ERROR, .text = err.msg};
        emit(wc, &ev);
        reply_error(wc, session, st, err.msg);
        return;
    }
    const int32_t end = wc->pos[a->n_tok - 1] + 1;
    if (end > wc->filled[r]) {
        wc->filled[r] = end;
    }
    trace[a->n_trace] =
        (cluster_trace){.device = (uint16_t)self,
                        .round = (uint16_t)r,
                        .compute_us = (uint32_t)LARES_MIN((t1 - t0) / 1000u, UINT32_MAX),
                        .major_faults = faults};
    const cluster_act out = {.seq = a->seq,
                             .layer = (uint32_t)l1,
                             .n_tok = a->n_tok,
                             .n_embd = a->n_embd,
                             .dtype = wc->plan.act_dtype,
                             .n_trace = a->n_trace + 1};
    /* after the model's last layer, or from the last device, back to the head */
    const uint8_t dest = l1 == p->n_layer || self == p->n_dev - 1 ? WC_TO_HEAD : WC_TO_NEXT;
    reply(wc, dest, wc->out,
          cluster_encode_act(wc->out, wc->out_cap, session, &out, wc->pos, trace, wc->x));
    char text[160];
    const double compute_ms = (double)(t1 - t0) / 1e6;
    const double wait_ms = t0 > rx_ns && rx_ns != 0 ? (double)(t0 - rx_ns) / 1e6 : 0;
    snprintf(text, sizeof text,
             "round %d layers [%d, %d) %u token%s at %d: compute %.2f ms, "
             "queued %.2f ms",
             r, l0, l1, a->n_tok, a->n_tok == 1 ? "" : "s", wc->pos[0], compute_ms, wait_ms);
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
    if (wc->session == 0 || session != wc->session) {
        reply_error(wc, session, LARES_EPROTO, "a kv operation outside the current plan");
        return;
    }
    const int32_t pos = kv->op == CLUSTER_KV_CLEAR ? 0 : kv->pos;
    for (int32_t r = 0; r < wc->rounds; r++) {
        if (pos < wc->filled[r]) {
            wc->filled[r] = pos;
        }
    }
    if (wc->cc.truncate != NULL) {
        wc->cc.truncate(wc->cc.user, pos);
    }
    reply(wc, WC_TO_HEAD, wc->small,
          cluster_encode_kv(wc->small, sizeof wc->small, session, CLUSTER_KV_DONE, kv));
}

static void *compute_main(void *arg) {
    worker_compute *wc = arg;
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
            if (st != LARES_OK) {
                reply_error(wc, 0, st, err.msg);
            } else if (wc->frame->type == CLUSTER_HELLO) {
                on_hello(wc, &wc->frame->u.hello);
            } else if (wc->frame->type == CLUSTER_PLAN) {
                on_plan(wc, wc->frame->session, &wc->frame->u.plan);
            } else if (wc->frame->type == CLUSTER_ACT) {
                on_act(wc, wc->frame->session, &wc->frame->u.act, rx_ns);
            } else if (wc->frame->type == CLUSTER_KV) {
                on_kv(wc, wc->frame->session, &wc->frame->u.kv);
            }
        }
        zmq_msg_close(&cmd);
        zmq_msg_close(&frame);
        if (quit) {
            break;
        }
    }
    release(wc);
    zmq_close(wc->pipe);
    wc->pipe = NULL;
    return NULL;
}

lares_status worker_compute_start(void *zctx, const char *pipe_ep, const cluster_compute *cc,
                                  cluster_event_fn on_event, void *user, worker_compute **out,
                                  lares_error *err) {
    worker_compute *wc = lares_calloc(1, sizeof *wc);
    if (wc == NULL || (wc->frame = lares_calloc(1, sizeof *wc->frame)) == NULL) {
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
    if (st == LARES_OK && net_thread_start(&wc->thread, compute_main, wc) != 0) {
        st = lares_fail(err, LARES_ENOMEM, "cannot start the compute thread");
    }
    if (st != LARES_OK) {
        if (wc->pipe != NULL) {
            zmq_close(wc->pipe);
        }
        lares_free(wc->frame);
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
    lares_free(wc);
}
