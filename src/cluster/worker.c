/*
 * The worker's network thread: a ROUTER socket (CURVE server) that heads and
 * the predecessor connect to, a ZAP handler that admits only the allowed
 * heads and, for the current plan, the predecessor's key; a DEALER to the
 * successor; heartbeats both ways; PING answers and, under a probe plan, the
 * measurement of the hop to the successor; and the pipe to the compute
 * thread (worker_compute.c) and to the prepare thread (worker_prepare.c:
 * the weights of a coming plan fetched in the background, the TENSOR_DATA
 * answers routed to it while it runs). A head that falls silent for its timeout is
 * given up and the worker waits for the next one (docs/ring.md). Trouble with
 * a neighbour is reported to the head as PEER_LOST, naming the neighbour.
 */
#include "cluster/cluster_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

enum { W_IDLE = 0, W_OPENING, W_SERVING };
enum { SETUP_NONE = 0, SETUP_COMPUTING, SETUP_LINKING, SETUP_MEASURING, SETUP_READY };

/* pings of a probe plan: empty ones for the latency, ones with filler for the bandwidth */
#define MEAS_SMALL 3
#define MEAS_BIG   3

struct cluster_worker {
    cluster_worker_opts o;
    cluster_keypair key;
    cluster_allow allow;
    pthread_mutex_t allow_mu; /* heads paired while running are added (cluster_worker_allow) */
    void *zctx;
    void *router, *router_mon, *zap;
    void *next, *next_mon; /* the link to the successor, while a plan needs one */
    void *pipe;            /* the network end of the pipe to the compute thread */
    char pipe_ep[64];
    void *prep_pipe; /* the network end of the pipe to the prepare thread */
    char prep_ep[64];
    worker_prepare *wp;
    /* a PREPARE is being served (its session number): the head's
     * TENSOR_DATA answers go to the prepare thread until its PREPARED */
    bool preparing;
    uint64_t prep_session;
    char endpoint[CLUSTER_MAX_ADDR + 1];
    atomic_bool stop;
    worker_compute *wc;
    /* the head being served */
    int state;
    uint8_t head_rid[NET_MAX_RID];
    size_t head_rid_len;
    uint8_t head_key[CLUSTER_KEY_BYTES];
    char head_desc[160];
    uint32_t hb_ms, timeout_ms;
    uint64_t last_head_rx, next_hb, hb_counter;
    /* the plan in force and the predecessor's connection */
    uint64_t session;
    cluster_plan_msg *plan; /* owned */
    int setup;
    uint8_t ready_frame[64];
    size_t ready_len;
    uint64_t link_deadline;
    char next_event[200];
    uint8_t prev_rid[NET_MAX_RID];
    size_t prev_rid_len;
    bool have_prev;
    uint64_t last_prev_rx;
    /* CLUSTER_PLAN_PROBE: the hop to the successor (the head for the last device) */
    int meas_i; /* pings answered */
    uint64_t meas_nonce, meas_t0, meas_deadline;
    uint32_t rtt_us, rtt_big_us;
    uint8_t *ping_buf; /* owned: one PING with filler */
    size_t ping_cap;
    char last_refusal[200]; /* the last handshake failure reported, and when */
    uint64_t last_refusal_ns;
    /* refusals reported in the current minute, and those counted but not shown */
    uint64_t refusal_window_ns;
    uint32_t refusals_shown, refusals_hidden;
    net_outbox out;
    cluster_frame *frame; /* owned: decoding scratch */
    uint8_t buf[1024];
};

static bool allowed(cluster_worker *w, const uint8_t key[CLUSTER_KEY_BYTES]) {
    pthread_mutex_lock(&w->allow_mu);
    const bool ok = cluster_allow_has(&w->allow, key);
    pthread_mutex_unlock(&w->allow_mu);
    return ok;
}

lares_status cluster_worker_allow(cluster_worker *w, const uint8_t key[CLUSTER_KEY_BYTES],
                                  lares_error *err) {
    lares_status st = LARES_OK;
    pthread_mutex_lock(&w->allow_mu);
    if (!cluster_allow_has(&w->allow, key)) {
        if (w->allow.n == CLUSTER_MAX_ALLOW) {
            st = lares_fail(err, LARES_ERANGE, "at most %d allowed heads", CLUSTER_MAX_ALLOW);
        } else {
            memcpy(w->allow.keys[w->allow.n++], key, CLUSTER_KEY_BYTES);
        }
    }
    pthread_mutex_unlock(&w->allow_mu);
    return st;
}

static void emit(cluster_worker *w, cluster_event_kind kind, const char *fmt, ...)
    LARES_PRINTF(3, 4);
/* Refusals are reported with a rate limit: the first REFUSAL_BURST of each
 * minute one by one, then one line at the minute's end with how many more
 * there were. A flood of strangers must not fill a disk with lines (35,625
 * lines, 9.7 MB in 30 s without it: issue 15). */
#define REFUSAL_BURST     5
#define REFUSAL_WINDOW_NS (60ull * 1000000000u)

static void refusals_flush(cluster_worker *w, uint64_t now) {
    if (now - w->refusal_window_ns < REFUSAL_WINDOW_NS) {
        return;
    }
    if (w->refusals_hidden > 0 && w->o.on_event != NULL) {
        char text[160];
        snprintf(text, sizeof text,
                 "refused %u more connection(s) or frame(s) in the last minute (after the "
                 "first %d, counted, not shown)",
                 w->refusals_hidden, REFUSAL_BURST);
        const cluster_event ev = {.kind = CLUSTER_EV_REFUSED, .text = text};
        w->o.on_event(&ev, w->o.user);
    }
    w->refusal_window_ns = now;
    w->refusals_shown = w->refusals_hidden = 0;
}

static void emit(cluster_worker *w, cluster_event_kind kind, const char *fmt, ...) {
    if (w->o.on_event == NULL) {
        return;
    }
    if (kind == CLUSTER_EV_REFUSED) {
        refusals_flush(w, lares_now_ns());
        if (w->refusals_shown >= REFUSAL_BURST) {
            w->refusals_hidden++;
            return;
        }
        w->refusals_shown++;
    }
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (kind == CLUSTER_EV_REFUSED && w->refusals_shown == REFUSAL_BURST) {
        const size_t n = strlen(text);
        snprintf(text + n, sizeof text - n, " (more refusals this minute are counted, not shown)");
    }
    const cluster_event ev = {.kind = kind, .text = text};
    w->o.on_event(&ev, w->o.user);
}

static void to_thread(void *pipe, uint8_t op, zmq_msg_t *frame, uint64_t rx_ns) {
    uint8_t cmd[WC_CMD_BYTES] = {op};
    wr_u64le(cmd + 1, rx_ns);
    if (frame != NULL) {
        net_pipe_send(pipe, cmd, sizeof cmd, ZMQ_SNDMORE);
        net_pipe_msg_send(frame, pipe, 0);
    } else {
        net_pipe_send(pipe, cmd, sizeof cmd, 0);
    }
}

static void to_compute(cluster_worker *w, uint8_t op, zmq_msg_t *frame, uint64_t rx_ns) {
    to_thread(w->pipe, op, frame, rx_ns);
}

/* calls a prepare in progress off: a plan came first, or the head went (the
 * compute thread then waits for the prepare thread's hold on the weight
 * cache, which it lets go at its next look at the pipe) */
static void prepare_off(cluster_worker *w) {
    if (w->preparing) {
        to_thread(w->prep_pipe, WC_CANCEL, NULL, 0);
        w->preparing = false;
    }
}

static void send_to(cluster_worker *w, const uint8_t *rid, size_t rid_len, const void *frame,
                    size_t len) {
    if (len > 0) {
        net_outbox_send(&w->out, 0, w->router, rid, rid_len, frame, len);
    }
}

static void send_error(cluster_worker *w, const uint8_t *rid, size_t rid_len, uint64_t session,
                       lares_status code, const char *msg) {
    send_to(w, rid, rid_len, w->buf,
            cluster_encode_error(w->buf, sizeof w->buf, session, (uint32_t)code, msg));
}

static void send_head(cluster_worker *w, const void *frame, size_t len) {
    send_to(w, w->head_rid, w->head_rid_len, frame, len);
}

/* tells the head that plan device `peer` cannot be reached from here */
static void peer_lost(cluster_worker *w, uint32_t peer, const char *msg) {
    send_head(w, w->buf,
              cluster_encode_peer_lost(w->buf, sizeof w->buf, w->session, peer, msg));
}

static void close_next(cluster_worker *w) {
    net_outbox_clear(&w->out); /* frames may be queued for it */
    if (w->next != NULL) {
        zmq_socket_monitor(w->next, NULL, 0);
        zmq_close(w->next);
        zmq_close(w->next_mon);
        w->next = w->next_mon = NULL;
    }
}

/* ends the session with the current head; the worker waits for the next */
static void drop_head(cluster_worker *w) {
    prepare_off(w);
    if (w->state != W_IDLE) {
        to_compute(w, WC_RELEASE, NULL, 0);
    }
    close_next(w);
    w->state = W_IDLE;
    w->head_rid_len = 0;
    w->session = 0;
    w->setup = SETUP_NONE;
    w->have_prev = false;
    w->prev_rid_len = 0;
    lares_free(w->ping_buf);
    w->ping_buf = NULL;
    w->ping_cap = 0;
}

static bool same_rid(const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
    return an > 0 && an == bn && memcmp(a, b, an) == 0;
}

static void key_text(const uint8_t key[CLUSTER_KEY_BYTES], char *out, size_t cap) {
    char z[CLUSTER_KEY_Z85 + 1];
    cluster_key_z85(key, z);
    snprintf(out, cap, "%s", z);
}

/* the ZAP handler: who may complete the CURVE handshake (RFC 27) */
static void on_zap(cluster_worker *w) {
    zmq_msg_t part[8];
    int n = 0;
    bool more = true;
    while (more && n < 8) {
        zmq_msg_init(&part[n]);
        if (zmq_msg_recv(&part[n], w->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part[n]);
            break;
        }
        more = zmq_msg_more(&part[n]) != 0;
        n++;
    }
    while (more) { /* more parts than any request has: drain them */
        zmq_msg_t extra;
        zmq_msg_init(&extra);
        more = net_pipe_msg_recv(&extra, w->zap, 0) >= 0 && zmq_msg_more(&extra);
        zmq_msg_close(&extra);
    }
    if (n < 6) {
        for (int i = 0; i < n; i++) {
            zmq_msg_close(&part[i]);
        }
        return;
    }
    char address[64] = "";
    snprintf(address, sizeof address, "%.*s", (int)LARES_MIN(zmq_msg_size(&part[3]), 63),
             (const char *)zmq_msg_data(&part[3]));
    const bool curve =
        zmq_msg_size(&part[5]) == 5 && memcmp(zmq_msg_data(&part[5]), "CURVE", 5) == 0;
    const bool has_key = curve && n >= 7 && zmq_msg_size(&part[6]) == CLUSTER_KEY_BYTES;
    const uint8_t *key = has_key ? zmq_msg_data(&part[6]) : NULL;
    bool ok = false;
    if (key != NULL) {
        ok = allowed(w, key);
        if (!ok && w->session != 0 && w->plan->self >= 2) {
            ok = memcmp(key, w->plan->keys[w->plan->self - 1], CLUSTER_KEY_BYTES) == 0;
        }
    }
    char user[CLUSTER_KEY_Z85 + 1] = "";
    if (key != NULL) {
        cluster_key_z85(key, user);
    }
    if (!ok) {
        emit(w, CLUSTER_EV_REFUSED,
             "refused a connection from %s: key %s is not in the allow-list (nor the "
             "predecessor's in the current plan)",
             address, key ? user : "(none)");
    }
    /* reply: version, request id, status code, status text, user id, metadata */
    net_pipe_send(w->zap, "1.0", 3, ZMQ_SNDMORE);
    net_pipe_send(w->zap, zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), ZMQ_SNDMORE);
    net_pipe_send(w->zap, ok ? "200" : "400", 3, ZMQ_SNDMORE);
    net_pipe_send(w->zap, ok ? "OK" : "key not allowed", ok ? 2 : 15, ZMQ_SNDMORE);
    net_pipe_send(w->zap, user, ok ? strlen(user) : 0, ZMQ_SNDMORE);
    net_pipe_send(w->zap, "", 0, 0);
    for (int i = 0; i < n; i++) {
        zmq_msg_close(&part[i]);
    }
}

/* the peer's key as ZAP named it, into key; false when none (insecure) */
static bool user_key(zmq_msg_t *m, uint8_t key[CLUSTER_KEY_BYTES]) {
    const char *uid = zmq_msg_gets(m, "User-Id");
    return uid != NULL && strlen(uid) == CLUSTER_KEY_Z85 &&
           cluster_key_parse(uid, key, NULL) == LARES_OK;
}

static const char *peer_addr(zmq_msg_t *m) {
    const char *a = zmq_msg_gets(m, "Peer-Address");
    return a != NULL ? a : "?";
}

static void on_hello(cluster_worker *w, const uint8_t *rid, size_t rid_len, zmq_msg_t *m,
                     uint64_t now) {
    const char *from = peer_addr(m);
    lares_error err;
    if (cluster_frame_decode(zmq_msg_data(m), zmq_msg_size(m), w->frame, &err) != LARES_OK) {
        emit(w, CLUSTER_EV_REFUSED, "refused a hello from %s: %s", from, err.msg);
        send_error(w, rid, rid_len, 0, err.code, err.msg);
        return;
    }
    const cluster_hello *h = &w->frame->u.hello;
    uint8_t key[CLUSTER_KEY_BYTES] = {0};
    const bool keyed = user_key(m, key);
    if (!w->o.insecure && (!keyed || !allowed(w, key))) {
        emit(w, CLUSTER_EV_REFUSED,
             "refused a hello from %s: its key is not a head's in the "
             "allow-list",
             from);
        send_error(w, rid, rid_len, 0, LARES_EAUTH,
                   "this key may link as a predecessor but is not "
                   "an allowed head");
        return;
    }
    if (w->state != W_IDLE) {
        const bool same_conn = same_rid(rid, rid_len, w->head_rid, w->head_rid_len);
        /* the same key is the same head restarted, unless it only surveys */
        const bool same_key = keyed && memcmp(key, w->head_key, CLUSTER_KEY_BYTES) == 0 &&
                              !(h->flags & CLUSTER_HELLO_SURVEY);
        const uint64_t silent_ms = (now - w->last_head_rx) / 1000000u;
        if (!same_conn && !same_key && silent_ms <= w->timeout_ms) {
            char msg[1024];
            snprintf(msg, sizeof msg, "busy: serving head %s", w->head_desc);
            emit(w, CLUSTER_EV_REFUSED, "refused a head from %s: %s", from, msg);
            send_error(w, rid, rid_len, 0, LARES_EBUSY, msg);
            return;
        }
        emit(w, CLUSTER_EV_HEAD_LOST, "head %s replaced by a new one from %s", w->head_desc, from);
        drop_head(w);
    }
    memcpy(w->head_rid, rid, rid_len);
    w->head_rid_len = rid_len;
    memcpy(w->head_key, key, CLUSTER_KEY_BYTES);
    char kt[CLUSTER_KEY_Z85 + 1] = "none";
    if (keyed) {
        key_text(key, kt, sizeof kt);
    }
    snprintf(w->head_desc, sizeof w->head_desc, "'%s' at %s (key %.12s...)", h->head_name, from,
             kt);
    w->hb_ms = h->heartbeat_ms;
    w->timeout_ms = h->timeout_ms;
    w->last_head_rx = now;
    w->next_hb = now;
    w->state = W_OPENING;
    emit(w, CLUSTER_EV_HEAD, "head %s connected: device %u of %u, model %s", w->head_desc,
         h->device, h->n_devices, h->model_path[0] ? h->model_path : "(this worker's)");
    to_compute(w, WC_FRAME, m, now);
}

static void on_plan(cluster_worker *w, zmq_msg_t *m, uint64_t now) {
    lares_error err;
    if (cluster_frame_decode(zmq_msg_data(m), zmq_msg_size(m), w->frame, &err) != LARES_OK) {
        emit(w, CLUSTER_EV_REFUSED, "refused a plan from head %s: %s", w->head_desc, err.msg);
        send_error(w, w->head_rid, w->head_rid_len, 0, err.code, err.msg);
        return;
    }
    prepare_off(w);
    close_next(w);
    lares_free(w->ping_buf);
    w->ping_buf = NULL;
    w->ping_cap = 0;
    *w->plan = w->frame->u.plan;
    w->session = w->frame->session;
    w->have_prev = false;
    w->prev_rid_len = 0;
    w->setup = SETUP_COMPUTING;
    to_compute(w, WC_FRAME, m, now);
}

static void on_link(cluster_worker *w, const uint8_t *rid, size_t rid_len, zmq_msg_t *m,
                    uint64_t now) {
    lares_error err;
    const char *from = peer_addr(m);
    lares_status st = cluster_frame_decode(zmq_msg_data(m), zmq_msg_size(m), w->frame, &err);
    char msg[CLUSTER_MAX_MSG + 1] = "";
    uint8_t key[CLUSTER_KEY_BYTES];
    if (st != LARES_OK) {
        snprintf(msg, sizeof msg, "%s", err.msg);
    } else if (w->session == 0 || w->frame->session != w->session) {
        snprintf(msg, sizeof msg, "a link for a plan this worker does not have");
    } else if (w->plan->self < 2 || w->frame->u.link_from != w->plan->self - 1) {
        snprintf(msg, sizeof msg, "device %u links to device %u, which is not its successor",
                 w->frame->u.link_from, w->plan->self);
    } else if (!w->o.insecure && (!user_key(m, key) || memcmp(key, w->plan->keys[w->plan->self - 1],
                                                              CLUSTER_KEY_BYTES) != 0)) {
        snprintf(msg, sizeof msg, "the linking peer's key is not device %u's", w->plan->self - 1);
    }
    if (msg[0] != '\0') {
        emit(w, CLUSTER_EV_REFUSED, "refused a link from %s: %s", from, msg);
        send_error(w, rid, rid_len, w->session, LARES_EPROTO, msg);
        return;
    }
    memcpy(w->prev_rid, rid, rid_len);
    w->prev_rid_len = rid_len;
    w->have_prev = true;
    w->last_prev_rx = now;
    send_to(w, rid, rid_len, w->buf,
            cluster_encode_link(w->buf, sizeof w->buf, w->session, CLUSTER_LINK_OK, w->plan->self));
}

static void on_pong(cluster_worker *w, zmq_msg_t *m, uint64_t now);

static void on_router(cluster_worker *w, uint64_t now) {
    for (;;) {
        zmq_msg_t rid, m;
        zmq_msg_init(&rid);
        zmq_msg_init(&m);
        bool more = false;
        if (!net_peer_recv_part(w->router, &rid, &more)) {
            zmq_msg_close(&rid);
            zmq_msg_close(&m);
            return;
        }
        bool ok = more && net_pipe_msg_recv(&m, w->router, 0) >= 0;
        more = ok && zmq_msg_more(&m);
        while (more) { /* a lares frame is one part: drain and refuse the rest */
            zmq_msg_t extra;
            zmq_msg_init(&extra);
            more = net_pipe_msg_recv(&extra, w->router, 0) >= 0 && zmq_msg_more(&extra);
            zmq_msg_close(&extra);
            ok = false;
        }
        const uint8_t *r = zmq_msg_data(&rid);
        const size_t rl = LARES_MIN(zmq_msg_size(&rid), (size_t)NET_MAX_RID);
        const bool from_head = w->state != W_IDLE && same_rid(r, rl, w->head_rid, w->head_rid_len);
        const bool from_prev = w->have_prev && same_rid(r, rl, w->prev_rid, w->prev_rid_len);
        if (from_head) {
            w->last_head_rx = now;
        }
        if (from_prev) {
            w->last_prev_rx = now;
        }
        uint16_t version = 0, type = 0;
        uint64_t session = 0;
        lares_error err;
        lares_status st = ok ? cluster_frame_header(zmq_msg_data(&m), zmq_msg_size(&m), &version,
                                                    &type, &session, &err)
                             : lares_fail(&err, LARES_EFORMAT,
                                          "malformed frame: several message "
                                          "parts, a lares frame is one");
        if (st != LARES_OK) {
            emit(w, CLUSTER_EV_REFUSED, "refused a frame from %s: %s", peer_addr(&m), err.msg);
            char msg[1024];
            if (st == LARES_EPROTO) {
                snprintf(msg, sizeof msg,
                         "this worker speaks ring protocol version %d, the peer "
                         "version %u",
                         CLUSTER_PROTO_VERSION, version);
            } else {
                snprintf(msg, sizeof msg, "%s", err.msg);
            }
            send_error(w, r, rl, session, st, msg);
        } else if (type == CLUSTER_HELLO) {
            on_hello(w, r, rl, &m, now);
        } else if (type == CLUSTER_HEARTBEAT && (from_head || from_prev)) {
            /* liveness noted above */
        } else if (type == CLUSTER_LINK) {
            on_link(w, r, rl, &m, now);
        } else if (type == CLUSTER_PING && (from_head || from_prev) &&
                   zmq_msg_size(&m) >= CLUSTER_HEADER_BYTES + 8) {
            const uint8_t *f = zmq_msg_data(&m);
            const uint32_t delay =
                w->session != 0 ? w->plan->link_delay_ms[w->plan->self] : 0;
            net_outbox_send(&w->out, delay, w->router, r, rl, w->buf,
                            cluster_encode_ping(w->buf, sizeof w->buf, session, CLUSTER_PONG,
                                                rd_u64le(f + CLUSTER_HEADER_BYTES), 0));
        } else if (type == CLUSTER_PONG && from_head) {
            on_pong(w, &m, now);
        } else if (from_head && type == CLUSTER_TENSOR_DATA && w->preparing) {
            to_thread(w->prep_pipe, WC_FRAME, &m, now);
        } else if (from_head && (type == CLUSTER_KV_GET || type == CLUSTER_KV_DATA ||
                                 type == CLUSTER_TENSOR_DATA)) {
            to_compute(w, WC_FRAME, &m, now);
        } else if (from_head && type == CLUSTER_PREPARE && w->state == W_SERVING) {
            prepare_off(w); /* a newer coming plan replaces the one being prepared */
            w->preparing = true;
            w->prep_session = session;
            to_thread(w->prep_pipe, WC_FRAME, &m, now);
        } else if (from_head && type == CLUSTER_PLAN) {
            on_plan(w, &m, now);
        } else if (type == CLUSTER_ACT && session == w->session && w->setup == SETUP_READY &&
                   (w->plan->self == 1 ? from_head : from_prev)) {
            to_compute(w, WC_FRAME, &m, now);
        } else if (type == CLUSTER_ACT && session != w->session) {
            /* hidden states of a session that is over: drop */
        } else if (from_head && type == CLUSTER_KV) {
            to_compute(w, WC_FRAME, &m, now);
        } else if (from_head && type == CLUSTER_STOP) {
            const bool left_out = zmq_msg_size(&m) >= CLUSTER_HEADER_BYTES + 4 &&
                                  rd_u32le((const uint8_t *)zmq_msg_data(&m) +
                                           CLUSTER_HEADER_BYTES) == CLUSTER_STOP_LEFT_OUT;
            emit(w, CLUSTER_EV_STOPPED, "head %s %s; waiting for a head", w->head_desc,
                 left_out ? "left this device out of its new plan" : "ended the session");
            drop_head(w);
        } else if (from_head && type == CLUSTER_ERROR) {
            if (cluster_frame_decode(zmq_msg_data(&m), zmq_msg_size(&m), w->frame, &err) ==
                LARES_OK) {
                emit(w, CLUSTER_EV_ERROR, "head %s reports: %s", w->head_desc,
                     w->frame->u.error.msg);
            }
        } else {
            char msg[1024];
            snprintf(msg, sizeof msg, "a %s frame is not expected from this peer now",
                     cluster_frame_type_name(type));
            emit(w, CLUSTER_EV_REFUSED, "refused a frame from %s: %s", peer_addr(&m), msg);
            send_error(w, r, rl, session, LARES_EPROTO, msg);
        }
        zmq_msg_close(&rid);
        zmq_msg_close(&m);
    }
}

static void start_link(cluster_worker *w, uint64_t now) {
    const uint32_t next = w->plan->self + 1;
    lares_error err;
    char ep[CLUSTER_MAX_ADDR + 16];
    bool ipv6 = false;
    lares_status st = net_endpoint(w->plan->addr[next], false, ep, sizeof ep, &ipv6, &err);
    if (st == LARES_OK) {
        st = net_socket(w->zctx, ZMQ_DEALER, &w->next, &err);
    }
    if (st == LARES_OK && ipv6) {
        const int one = 1;
        zmq_setsockopt(w->next, ZMQ_IPV6, &one, sizeof one);
    }
    if (st == LARES_OK && !w->o.insecure) {
        st = net_curve_client(w->next, &w->key, w->plan->keys[next], &err);
    }
    if (st == LARES_OK) {
        const int ivl = 100;
        zmq_setsockopt(w->next, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
        st = net_monitor(w->zctx, w->next, "next", &w->next_mon, &err);
    }
    if (st == LARES_OK && zmq_connect(w->next, ep) != 0) {
        st = lares_fail(&err, LARES_ENET, "connect: %s", zmq_strerror(zmq_errno()));
    }
    if (st == LARES_OK) {
        st = net_send(w->next, NULL, 0, w->buf,
                      cluster_encode_link(w->buf, sizeof w->buf, w->session, CLUSTER_LINK,
                                          w->plan->self)) == 0
                 ? LARES_OK
                 : lares_fail(&err, LARES_ENET, "send: %s", zmq_strerror(zmq_errno()));
    }
    if (st != LARES_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "cannot link to the next device %u at %s: %s", next,
                 w->plan->addr[next], err.msg);
        emit(w, CLUSTER_EV_ERROR, "%s", msg);
        peer_lost(w, next, msg);
        close_next(w);
        w->setup = SETUP_NONE;
        return;
    }
    w->next_event[0] = '\0';
    w->link_deadline = now + (uint64_t)w->timeout_ms * 2000000u;
    w->setup = SETUP_LINKING;
}

static void plan_applied(cluster_worker *w) {
    w->setup = SETUP_READY;
    send_head(w, w->ready_frame, w->ready_len);
    char layers[256] = "";
    size_t len = 0;
    int32_t l0, l1;
    for (int32_t r = 0; r < cluster_plan_rounds(&w->plan->plan) && len < sizeof layers; r++) {
        if (cluster_plan_window(&w->plan->plan, (int32_t)w->plan->self, r, &l0, &l1)) {
            int n =
                snprintf(layers + len, sizeof layers - len, "%s[%d, %d)", len ? " " : "", l0, l1);
            len += n > 0 ? (size_t)n : 0;
        }
    }
    emit(w, CLUSTER_EV_PLAN,
         "device %u of %d: layers %s of %d (%d rounds), %d layers held, "
         "successor %s",
         w->plan->self, w->plan->plan.n_dev, layers, w->plan->plan.n_layer,
         cluster_plan_rounds(&w->plan->plan),
         cluster_plan_layers_of(&w->plan->plan, (int32_t)w->plan->self),
         w->plan->self + 1 < (uint32_t)w->plan->plan.n_dev ? w->plan->addr[w->plan->self + 1]
                                                           : "the head");
}

/* ---- the hop measurement of a probe plan ---- */

static void meas_send(cluster_worker *w, uint64_t now) {
    const bool last = w->plan->self + 1 >= (uint32_t)w->plan->plan.n_dev;
    const uint32_t filler = w->meas_i < MEAS_SMALL ? 0 : w->plan->ping_bytes;
    w->meas_nonce++;
    const size_t n = cluster_encode_ping(w->ping_buf, w->ping_cap, w->session, CLUSTER_PING,
                                         w->meas_nonce, filler);
    w->meas_t0 = now;
    if (n == 0 || net_outbox_send(&w->out, w->plan->link_delay_ms[w->plan->self],
                                  last ? w->router : w->next, last ? w->head_rid : NULL,
                                  last ? w->head_rid_len : 0, w->ping_buf, n) != 0) {
        w->meas_deadline = now; /* give up: READY goes out without figures */
    }
}

static void meas_done(cluster_worker *w) {
    lares_error err;
    if (cluster_frame_decode(w->ready_frame, w->ready_len, w->frame, &err) == LARES_OK &&
        w->frame->type == CLUSTER_READY) {
        cluster_ready r = w->frame->u.ready;
        r.rtt_us = w->rtt_us;
        r.rtt_big_us = w->rtt_big_us;
        w->ready_len = cluster_encode_ready(w->ready_frame, sizeof w->ready_frame, w->session, &r);
    }
    lares_free(w->ping_buf);
    w->ping_buf = NULL;
    w->ping_cap = 0;
    plan_applied(w);
}

static void meas_start(cluster_worker *w, uint64_t now) {
    w->meas_i = 0;
    w->rtt_us = w->rtt_big_us = 0;
    w->ping_cap = (size_t)w->plan->ping_bytes + 64;
    w->ping_buf = lares_alloc(w->ping_cap);
    w->setup = SETUP_MEASURING;
    w->meas_deadline = now + (uint64_t)w->timeout_ms * 2000000u;
    if (w->ping_buf == NULL) {
        meas_done(w);
        return;
    }
    meas_send(w, now);
}

static void on_pong(cluster_worker *w, zmq_msg_t *m, uint64_t now) {
    const uint8_t *f = zmq_msg_data(m);
    if (w->setup != SETUP_MEASURING || zmq_msg_size(m) < CLUSTER_HEADER_BYTES + 8 ||
        rd_u64le(f + 8) != w->session || rd_u64le(f + CLUSTER_HEADER_BYTES) != w->meas_nonce) {
        return;
    }
    const uint32_t rtt = (uint32_t)LARES_MIN((now - w->meas_t0) / 1000u, (uint64_t)UINT32_MAX);
    uint32_t *slot = w->meas_i < MEAS_SMALL ? &w->rtt_us : &w->rtt_big_us;
    *slot = *slot == 0 ? LARES_MAX(rtt, 1u) : LARES_MIN(*slot, LARES_MAX(rtt, 1u));
    w->meas_i++;
    const int want = MEAS_SMALL + (w->plan->ping_bytes > 0 ? MEAS_BIG : 0);
    if (w->meas_i >= want) {
        meas_done(w);
    } else {
        meas_send(w, now);
    }
}

static void on_compute(cluster_worker *w, uint64_t now) {
    for (;;) {
        zmq_msg_t cmd, m;
        zmq_msg_init(&cmd);
        zmq_msg_init(&m);
        bool more = false;
        if (!net_recv_part(w->pipe, &cmd, &more)) {
            zmq_msg_close(&cmd);
            zmq_msg_close(&m);
            return;
        }
        if (!more || net_pipe_msg_recv(&m, w->pipe, 0) < 0) {
            zmq_msg_close(&cmd);
            zmq_msg_close(&m);
            continue;
        }
        const uint8_t dest = ((const uint8_t *)zmq_msg_data(&cmd))[0];
        const uint8_t *f = zmq_msg_data(&m);
        const size_t len = zmq_msg_size(&m);
        const uint16_t type = rd_u16le(f + 6);
        const uint64_t session = rd_u64le(f + 8);
        if (w->state == W_IDLE || (session != 0 && session != w->session)) {
            /* an answer for a head or plan that is gone */
        } else if (type == CLUSTER_WELCOME && w->state == W_OPENING) {
            w->state = W_SERVING;
            send_head(w, f, len);
        } else if (type == CLUSTER_ERROR && w->state == W_OPENING) {
            send_head(w, f, len);
            emit(w, CLUSTER_EV_STOPPED, "head %s refused; waiting for a head", w->head_desc);
            net_outbox_flush(&w->out, UINT64_MAX);
            drop_head(w);
        } else if (type == CLUSTER_READY && session == w->session && w->setup == SETUP_COMPUTING) {
            memcpy(w->ready_frame, f, LARES_MIN(len, sizeof w->ready_frame));
            w->ready_len = LARES_MIN(len, sizeof w->ready_frame);
            if (w->plan->self + 1 < (uint32_t)w->plan->plan.n_dev) {
                start_link(w, now);
            } else if (w->plan->flags & CLUSTER_PLAN_PROBE) {
                meas_start(w, now);
            } else {
                plan_applied(w);
            }
        } else if (type == CLUSTER_ACT) {
            const uint32_t self = w->plan->self;
            void *sock = dest == WC_TO_NEXT ? w->next : w->router;
            const bool to_head = dest != WC_TO_NEXT;
            if (sock == NULL || net_outbox_send(&w->out, w->plan->link_delay_ms[self], sock,
                                                to_head ? w->head_rid : NULL,
                                                to_head ? w->head_rid_len : 0, f, len) != 0) {
                char msg[1024];
                snprintf(msg, sizeof msg, "cannot send hidden states to %s: %s",
                         to_head ? "the head" : w->plan->addr[self + 1], zmq_strerror(zmq_errno()));
                emit(w, CLUSTER_EV_ERROR, "%s", msg);
                if (to_head) {
                    send_error(w, w->head_rid, w->head_rid_len, w->session, LARES_ENET, msg);
                } else {
                    peer_lost(w, self + 1, msg);
                }
            }
        } else {
            send_head(w, f, len); /* KV_DONE, KV_DATA, ERROR */
        }
        zmq_msg_close(&cmd);
        zmq_msg_close(&m);
    }
}

/* the prepare thread's requests (TENSOR_GET) and its answer (PREPARED) go
 * to the head; an answer of a prepare called off is dropped */
static void on_prep(cluster_worker *w) {
    for (;;) {
        zmq_msg_t cmd, m;
        zmq_msg_init(&cmd);
        zmq_msg_init(&m);
        bool more = false;
        if (!net_recv_part(w->prep_pipe, &cmd, &more)) {
            zmq_msg_close(&cmd);
            zmq_msg_close(&m);
            return;
        }
        if (more && net_pipe_msg_recv(&m, w->prep_pipe, 0) >= 0 &&
            zmq_msg_size(&m) >= CLUSTER_HEADER_BYTES && w->state == W_SERVING) {
            const uint8_t *f = zmq_msg_data(&m);
            const uint16_t type = rd_u16le(f + 6);
            const uint64_t session = rd_u64le(f + 8);
            if (type == CLUSTER_PREPARED && (!w->preparing || session != w->prep_session)) {
                /* called off */
            } else {
                w->preparing = w->preparing && type != CLUSTER_PREPARED;
                send_head(w, f, zmq_msg_size(&m));
            }
        }
        zmq_msg_close(&cmd);
        zmq_msg_close(&m);
    }
}

static void on_next(cluster_worker *w, uint64_t now) {
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (w->next == NULL || !net_peer_recv_part(w->next, &m, NULL)) {
            zmq_msg_close(&m);
            return;
        }
        lares_error err;
        lares_status st = cluster_frame_decode(zmq_msg_data(&m), zmq_msg_size(&m), w->frame, &err);
        const uint32_t next = w->plan->self + 1;
        if (st == LARES_OK && w->frame->type == CLUSTER_LINK_OK &&
            w->frame->session == w->session && w->setup == SETUP_LINKING) {
            if (w->plan->flags & CLUSTER_PLAN_PROBE) {
                meas_start(w, now);
            } else {
                plan_applied(w);
            }
        } else if (st == LARES_OK && w->frame->type == CLUSTER_PONG) {
            on_pong(w, &m, now);
        } else if (st != LARES_OK || w->frame->type == CLUSTER_ERROR) {
            char msg[1024];
            snprintf(msg, sizeof msg, "the next device %u at %s answered: %s", next,
                     w->plan->addr[next], st != LARES_OK ? err.msg : w->frame->u.error.msg);
            emit(w, CLUSTER_EV_ERROR, "%s", msg);
            peer_lost(w, next, msg);
        }
        zmq_msg_close(&m);
    }
}

static void on_next_events(cluster_worker *w) {
    uint16_t ev;
    uint32_t value;
    char addr[128];
    while (w->next_mon != NULL && net_read_event(w->next_mon, &ev, &value, addr, sizeof addr)) {
        if (ev == ZMQ_EVENT_CONNECT_DELAYED || ev == ZMQ_EVENT_MONITOR_STOPPED) {
            continue;
        }
        net_event_text(ev, value, w->next_event, sizeof w->next_event);
        if (w->setup == SETUP_LINKING && net_event_fatal(ev, value)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "cannot link to the next device %u at %s: %s",
                     w->plan->self + 1, w->plan->addr[w->plan->self + 1], w->next_event);
            emit(w, CLUSTER_EV_ERROR, "%s", msg);
            peer_lost(w, w->plan->self + 1, msg);
            w->setup = SETUP_NONE;
        }
    }
}

static void on_router_events(cluster_worker *w, uint64_t now) {
    uint16_t ev;
    uint32_t value;
    char addr[128];
    while (net_read_event(w->router_mon, &ev, &value, addr, sizeof addr)) {
        if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
            ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            char text[200];
            net_event_text(ev, value, text, sizeof text);
            /* a client retries every ~100 ms: report each kind of failure once a second */
            if (strcmp(text, w->last_refusal) != 0 || now - w->last_refusal_ns > 1000000000u) {
                snprintf(w->last_refusal, sizeof w->last_refusal, "%s", text);
                w->last_refusal_ns = now;
                emit(w, CLUSTER_EV_REFUSED, "refused a connection: %s", text);
            }
        }
    }
}

static void timers(cluster_worker *w, uint64_t now) {
    if (w->state == W_IDLE || now < w->next_hb) {
        return;
    }
    w->next_hb = now + (uint64_t)w->hb_ms * 1000000u;
    const uint64_t silent_ms = (now - w->last_head_rx) / 1000000u;
    if (silent_ms > w->timeout_ms) {
        emit(w, CLUSTER_EV_HEAD_LOST,
             "head %s silent for %" PRIu64 " ms (timeout %u ms); waiting "
             "for a head",
             w->head_desc, silent_ms, w->timeout_ms);
        drop_head(w);
        return;
    }
    const size_t n = cluster_encode_heartbeat(w->buf, sizeof w->buf, w->session, ++w->hb_counter);
    if (net_outbox_send(&w->out, 0, w->router, w->head_rid, w->head_rid_len, w->buf, n) != 0 &&
        zmq_errno() == EHOSTUNREACH) {
        emit(w, CLUSTER_EV_HEAD_LOST, "head %s disconnected; waiting for a head", w->head_desc);
        drop_head(w);
        return;
    }
    if (w->next != NULL && w->setup == SETUP_READY) {
        net_outbox_send(&w->out, 0, w->next, NULL, 0, w->buf, n);
    }
    if (w->setup == SETUP_LINKING && now > w->link_deadline) {
        char msg[1024];
        snprintf(msg, sizeof msg,
                 "cannot reach the next device %u at %s within %u ms (last "
                 "connection event: %s)",
                 w->plan->self + 1, w->plan->addr[w->plan->self + 1], 2 * w->timeout_ms,
                 w->next_event[0] ? w->next_event : "none");
        emit(w, CLUSTER_EV_ERROR, "%s", msg);
        peer_lost(w, w->plan->self + 1, msg);
        w->setup = SETUP_NONE;
    }
    if (w->setup == SETUP_MEASURING && now > w->meas_deadline) {
        meas_done(w); /* READY with what was measured */
    }
    if (w->have_prev && w->setup == SETUP_READY &&
        (now - w->last_prev_rx) / 1000000u > w->timeout_ms) {
        char msg[1024];
        snprintf(msg, sizeof msg, "the previous device %u (%s) has been silent for %" PRIu64 " ms",
                 w->plan->self - 1, w->plan->addr[w->plan->self - 1],
                 (now - w->last_prev_rx) / 1000000u);
        emit(w, CLUSTER_EV_ERROR, "%s", msg);
        peer_lost(w, w->plan->self - 1, msg);
        w->have_prev = false;
    }
}

lares_status cluster_worker_run(cluster_worker *w, lares_error *err) {
    lares_status st = worker_compute_start(w->zctx, w->pipe_ep, &w->o.compute, w->o.on_event,
                                           w->o.user, &w->wc, err);
    if (st != LARES_OK) {
        return st;
    }
    st = worker_prepare_start(w->zctx, w->prep_ep, &w->o.compute, &w->wp, err);
    if (st != LARES_OK) {
        to_compute(w, WC_QUIT, NULL, 0);
        worker_compute_join(w->wc);
        w->wc = NULL;
        return st;
    }
    emit(w, CLUSTER_EV_LISTENING, "listening on %s%s; waiting for a head", w->endpoint,
         w->o.insecure ? " WITHOUT encryption or keys (--insecure)" : " (CURVE)");
    while (!atomic_load(&w->stop)) {
        zmq_pollitem_t items[7];
        int n = 0;
        items[n++] = (zmq_pollitem_t){.socket = w->router, .events = ZMQ_POLLIN};
        items[n++] = (zmq_pollitem_t){.socket = w->pipe, .events = ZMQ_POLLIN};
        items[n++] = (zmq_pollitem_t){.socket = w->router_mon, .events = ZMQ_POLLIN};
        items[n++] = (zmq_pollitem_t){.socket = w->prep_pipe, .events = ZMQ_POLLIN};
        if (w->zap != NULL) {
            items[n++] = (zmq_pollitem_t){.socket = w->zap, .events = ZMQ_POLLIN};
        }
        const int i_next = n;
        if (w->next != NULL) {
            items[n++] = (zmq_pollitem_t){.socket = w->next, .events = ZMQ_POLLIN};
            items[n++] = (zmq_pollitem_t){.socket = w->next_mon, .events = ZMQ_POLLIN};
        }
        uint64_t now = lares_now_ns();
        long wait = 100;
        if (w->state != W_IDLE) {
            const long hb = w->next_hb > now ? (long)((w->next_hb - now) / 1000000u) + 1 : 0;
            wait = LARES_MIN(wait, hb);
        }
        const long ow = net_outbox_wait_ms(&w->out, now);
        if (ow >= 0 && ow < wait) {
            wait = ow;
        }
        if (zmq_poll(items, n, wait) < 0 && zmq_errno() != EINTR) {
            st = lares_fail(err, LARES_ENET, "worker: poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        now = lares_now_ns();
        refusals_flush(w, now);
        if (items[0].revents & ZMQ_POLLIN) {
            on_router(w, now);
        }
        if (items[1].revents & ZMQ_POLLIN) {
            on_compute(w, now);
        }
        if (items[2].revents & ZMQ_POLLIN) {
            on_router_events(w, now);
        }
        if (items[3].revents & ZMQ_POLLIN) {
            on_prep(w);
        }
        if (w->zap != NULL && (items[4].revents & ZMQ_POLLIN)) {
            on_zap(w);
        }
        if (w->next != NULL && i_next < n) {
            if (items[i_next].revents & ZMQ_POLLIN) {
                on_next(w, now);
            }
            if (w->next != NULL && (items[i_next + 1].revents & ZMQ_POLLIN)) {
                on_next_events(w);
            }
        }
        timers(w, now);
        net_outbox_flush(&w->out, now);
    }
    drop_head(w);
    to_thread(w->prep_pipe, WC_QUIT, NULL, 0);
    to_compute(w, WC_QUIT, NULL, 0);
    worker_prepare_join(w->wp);
    worker_compute_join(w->wc);
    w->wp = NULL;
    w->wc = NULL;
    return st;
}

void cluster_worker_stop(cluster_worker *w) {
    atomic_store(&w->stop, true);
}

const char *cluster_worker_endpoint(const cluster_worker *w) {
    return w->endpoint;
}

void cluster_worker_free(cluster_worker *w) {
    if (w == NULL) {
        return;
    }
    close_next(w);
    if (w->router != NULL) {
        zmq_socket_monitor(w->router, NULL, 0);
        zmq_close(w->router);
    }
    void *socks[] = {w->router_mon, w->zap, w->pipe, w->prep_pipe};
    for (size_t i = 0; i < LARES_ARRAY_LEN(socks); i++) {
        if (socks[i] != NULL) {
            zmq_close(socks[i]);
        }
    }
    if (w->zctx != NULL) {
        zmq_ctx_term(w->zctx);
    }
    lares_free(w->plan);
    lares_free(w->frame);
    lares_free(w->ping_buf);
    pthread_mutex_destroy(&w->allow_mu);
    lares_free(w);
}

lares_status cluster_worker_create(const cluster_worker_opts *o, cluster_worker **out,
                                   lares_error *err) {
    if (!o->insecure &&
        (o->key == NULL || ((o->allow == NULL || o->allow->n == 0) && !o->pairable))) {
        return lares_fail(err, LARES_EAUTH,
                          "a worker needs its key pair and at least one allowed "
                          "head key (or --insecure)");
    }
    if (o->compute.open == NULL || o->compute.setup == NULL || o->compute.forward == NULL) {
        return lares_fail(err, LARES_EINVAL, "worker: the compute callbacks are missing");
    }
    cluster_worker *w = lares_calloc(1, sizeof *w);
    if (w == NULL || (w->plan = lares_calloc(1, sizeof *w->plan)) == NULL ||
        (w->frame = lares_calloc(1, sizeof *w->frame)) == NULL) {
        if (w != NULL) {
            lares_free(w->plan);
        }
        lares_free(w);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    w->o = *o;
    pthread_mutex_init(&w->allow_mu, NULL);
    w->o.key = NULL;
    w->o.allow = NULL;
    if (o->key != NULL) {
        w->key = *o->key;
    }
    if (o->allow != NULL) {
        w->allow = *o->allow;
    }
    atomic_init(&w->stop, false);
    w->hb_ms = CLUSTER_DEFAULT_HEARTBEAT_MS;
    w->timeout_ms = CLUSTER_DEFAULT_TIMEOUT_MS;
    lares_status st = LARES_OK;
    char ep[CLUSTER_MAX_ADDR + 16];
    bool ipv6 = false;
    st = net_endpoint(o->listen, true, ep, sizeof ep, &ipv6, err);
    if (st == LARES_OK && (w->zctx = zmq_ctx_new()) == NULL) {
        st = lares_fail(err, LARES_ENET, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    }
    if (st == LARES_OK && !o->insecure) {
        /* the ZAP handler must be bound before the CURVE socket accepts anyone;
         * without one libzmq would let every key in */
        st = net_socket(w->zctx, ZMQ_REP, &w->zap, err);
        if (st == LARES_OK && zmq_bind(w->zap, "inproc://zeromq.zap.01") != 0) {
            st = lares_fail(err, LARES_ENET, "binding the ZAP handler: %s",
                            zmq_strerror(zmq_errno()));
        }
    }
    if (st == LARES_OK) {
        st = net_socket(w->zctx, ZMQ_ROUTER, &w->router, err);
    }
    if (st == LARES_OK) {
        const int one = 1;
        zmq_setsockopt(w->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
        if (ipv6) {
            zmq_setsockopt(w->router, ZMQ_IPV6, &one, sizeof one);
        }
        if (!o->insecure) {
            st = net_curve_server(w->router, &w->key, err);
        }
    }
    if (st == LARES_OK) {
        st = net_monitor(w->zctx, w->router, "router", &w->router_mon, err);
    }
    if (st == LARES_OK && zmq_bind(w->router, ep) != 0) {
        st = lares_fail(err, LARES_ENET, "cannot listen on %s: %s", o->listen,
                        zmq_strerror(zmq_errno()));
    }
    if (st == LARES_OK) {
        char last[CLUSTER_MAX_ADDR + 16];
        size_t len = sizeof last;
        if (zmq_getsockopt(w->router, ZMQ_LAST_ENDPOINT, last, &len) == 0) {
            net_endpoint_to_addr(last, w->endpoint, sizeof w->endpoint);
        } else {
            snprintf(w->endpoint, sizeof w->endpoint, "%s", o->listen);
        }
        snprintf(w->pipe_ep, sizeof w->pipe_ep, "inproc://lares-worker-%p", (void *)w);
        st = net_socket(w->zctx, ZMQ_PAIR, &w->pipe, err);
        if (st == LARES_OK && zmq_bind(w->pipe, w->pipe_ep) != 0) {
            st = lares_fail(err, LARES_ENET, "worker pipe: %s", zmq_strerror(zmq_errno()));
        }
        snprintf(w->prep_ep, sizeof w->prep_ep, "inproc://lares-prepare-%p", (void *)w);
        if (st == LARES_OK) {
            st = net_socket(w->zctx, ZMQ_PAIR, &w->prep_pipe, err);
        }
        if (st == LARES_OK && zmq_bind(w->prep_pipe, w->prep_ep) != 0) {
            st = lares_fail(err, LARES_ENET, "worker prepare pipe: %s", zmq_strerror(zmq_errno()));
        }
    }
    if (st != LARES_OK) {
        cluster_worker_free(w);
        return st;
    }
    *out = w;
    return LARES_OK;
}
