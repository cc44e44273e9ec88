/*
 * The head's side of a ring: one DEALER per worker (CURVE client, pinned to
 * the worker's public key), a network thread that owns them, and the calls
 * the head's session makes between its own windows (docs/ring.md).
 *
 * The network thread forwards frames between the sockets and an in-process
 * pipe, sends heartbeats, and turns silence (no frame for timeout_ms), a lost
 * connection or a refused handshake into an ERROR frame from that device, so
 * the session thread, which may be busy computing, never has to watch the
 * clock and never waits forever.
 */
#include "cluster/cluster_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define PIPE_TO_IO 0xffffffffu /* pipe message for the network thread itself: quit */

enum { DEV_IDLE = 0, DEV_HELLO, DEV_ATTACHED, DEV_FAILED };

/* state of the network thread (only it touches this once it runs) */
typedef struct head_io {
    void *pipe;
    int32_t n_dev;
    void *dealer[CLUSTER_MAX_DEVICES];
    void *mon[CLUSTER_MAX_DEVICES];
    int state[CLUSTER_MAX_DEVICES];
    uint64_t last_rx_ns[CLUSTER_MAX_DEVICES];
    uint64_t hello_deadline_ns[CLUSTER_MAX_DEVICES];
    char last_event[CLUSTER_MAX_DEVICES][200];
    int handshake_fails[CLUSTER_MAX_DEVICES]; /* handshakes the worker closed on us */
    uint32_t hb_ms, timeout_ms, connect_ms, delay_ms;
    uint64_t hb_counter;
    net_outbox out;
    uint8_t buf[512];
} head_io;

struct cluster_head {
    void *zctx;
    void *pipe; /* the session's end */
    pthread_t thread;
    bool thread_started;
    head_io io;
    int32_t n_dev;
    cluster_ring_device dev[CLUSTER_MAX_DEVICES]; /* copied from the ring description */
    cluster_device_stats stats[CLUSTER_MAX_DEVICES];
    cluster_plan plan;
    cluster_model_id model;
    int32_t n_ctx, n_batch, n_embd;
    bool kv_f16;
    uint8_t act_dtype;
    uint32_t hb_ms, timeout_ms, connect_ms;
    uint64_t session;
    uint64_t next_seq;
    int32_t sent_pos0;
    uint64_t sent_ns; /* when the batch in flight left (its time in the ring counts from here) */
    uint8_t head_key[CLUSTER_KEY_BYTES];
    uint8_t *buf; /* owned: one encoded frame */
    size_t buf_cap;
    cluster_frame *frame; /* owned: decoding scratch */
    bool broken;          /* a device failed: every call returns `failure` */
    lares_error failure;
    uint64_t wait_us, hops;
};

/* ---- the network thread ---- */

static void io_to_pipe(head_io *io, uint32_t dev, const void *frame, size_t len) {
    uint8_t d[4];
    wr_u32le(d, dev);
    net_pipe_send(io->pipe, d, 4, ZMQ_SNDMORE);
    net_pipe_send(io->pipe, frame, len, 0);
}

/* reports a device as failed to the session: an ERROR frame from it */
static void io_fault(head_io *io, int32_t dev, lares_status code, const char *fmt, ...)
    LARES_PRINTF(4, 5);
static void io_fault(head_io *io, int32_t dev, lares_status code, const char *fmt, ...) {
    if (io->state[dev] == DEV_FAILED) {
        return;
    }
    io->state[dev] = DEV_FAILED;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const size_t n = cluster_encode_error(io->buf, sizeof io->buf, 0, (uint32_t)code, msg);
    io_to_pipe(io, (uint32_t)dev, io->buf, n);
}

/* frames from the session: [u32 device][frame]; false when told to quit */
static bool io_from_pipe(head_io *io, uint64_t now) {
    for (;;) {
        zmq_msg_t dst, frame;
        zmq_msg_init(&dst);
        bool more = false;
        if (!net_recv_part(io->pipe, &dst, &more)) {
            zmq_msg_close(&dst);
            return true;
        }
        zmq_msg_init(&frame);
        const bool ok =
            more && zmq_msg_size(&dst) == 4 && net_pipe_msg_recv(&frame, io->pipe, 0) >= 0;
        const uint32_t dev = ok ? rd_u32le(zmq_msg_data(&dst)) : PIPE_TO_IO;
        zmq_msg_close(&dst);
        if (dev == PIPE_TO_IO || dev == 0 || dev >= (uint32_t)io->n_dev) {
            zmq_msg_close(&frame);
            return false;
        }
        const uint8_t *f = zmq_msg_data(&frame);
        const size_t len = zmq_msg_size(&frame);
        if (len >= CLUSTER_HEADER_BYTES && rd_u16le(f + 6) == CLUSTER_HELLO) {
            io->state[dev] = DEV_HELLO;
            io->hello_deadline_ns[dev] = now + (uint64_t)io->connect_ms * 1000000u;
        }
        if (io->state[dev] != DEV_FAILED &&
            net_outbox_send(&io->out, io->delay_ms, io->dealer[dev], NULL, 0, f, len) != 0) {
            io_fault(io, (int32_t)dev, LARES_ENET, "cannot send a %s frame: %s",
                     cluster_frame_type_name(len >= 8 ? rd_u16le(f + 6) : 0),
                     zmq_strerror(zmq_errno()));
        }
        zmq_msg_close(&frame);
    }
}

static void io_from_worker(head_io *io, int32_t dev, uint64_t now) {
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (!net_recv_part(io->dealer[dev], &m, NULL)) {
            zmq_msg_close(&m);
            return;
        }
        io->last_rx_ns[dev] = now;
        const uint8_t *f = zmq_msg_data(&m);
        const size_t len = zmq_msg_size(&m);
        /* the session decodes and judges every frame; only heartbeats stop here */
        const uint16_t type = len >= CLUSTER_HEADER_BYTES ? rd_u16le(f + 6) : 0;
        if (type == CLUSTER_HEARTBEAT && len >= CLUSTER_HEADER_BYTES &&
            rd_u32le(f) == CLUSTER_MAGIC) {
            zmq_msg_close(&m);
            continue;
        }
        if (type == CLUSTER_WELCOME && io->state[dev] == DEV_HELLO) {
            io->state[dev] = DEV_ATTACHED;
        }
        if (io->state[dev] != DEV_FAILED) {
            uint8_t d[4];
            wr_u32le(d, (uint32_t)dev);
            net_pipe_send(io->pipe, d, 4, ZMQ_SNDMORE);
            net_pipe_msg_send(&m, io->pipe, 0);
        }
        zmq_msg_close(&m);
    }
}

static void io_events(head_io *io, int32_t dev) {
    uint16_t ev;
    uint32_t value;
    char addr[128];
    while (net_read_event(io->mon[dev], &ev, &value, addr, sizeof addr)) {
        if (ev == ZMQ_EVENT_CONNECT_DELAYED || ev == ZMQ_EVENT_MONITOR_STOPPED) {
            continue;
        }
        net_event_text(ev, value, io->last_event[dev], sizeof io->last_event[dev]);
        lares_log(LARES_LOG_DEBUG, "cluster: device %d (%s): %s", dev, addr, io->last_event[dev]);
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            io->handshake_fails[dev] = 0;
        } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            io->handshake_fails[dev]++;
        }
        /* a worker that closes every handshake holds another key than ring.json
         * says (or runs --insecure): three in a row is no network hiccup */
        if (io->state[dev] == DEV_HELLO &&
            (net_event_fatal(ev, value) || io->handshake_fails[dev] >= 3)) {
            io_fault(io, dev, ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? LARES_EAUTH : LARES_ENET,
                     "%s", io->last_event[dev]);
        } else if (io->state[dev] == DEV_ATTACHED && ev == ZMQ_EVENT_DISCONNECTED) {
            io_fault(io, dev, LARES_ENET,
                     "connection lost (the worker died or the network "
                     "dropped it)");
        }
    }
}

static void io_timers(head_io *io, uint64_t now) {
    const size_t n = cluster_encode_heartbeat(io->buf, sizeof io->buf, 0, ++io->hb_counter);
    for (int32_t d = 1; d < io->n_dev; d++) {
        if (io->state[d] == DEV_ATTACHED) {
            const uint64_t silent_ms = (now - io->last_rx_ns[d]) / 1000000u;
            if (silent_ms > io->timeout_ms) {
                io_fault(io, d, LARES_ENET,
                         "no heartbeat for %" PRIu64 " ms (timeout %u ms): the worker hangs, "
                         "died or is unreachable",
                         silent_ms, io->timeout_ms);
            } else if (net_outbox_send(&io->out, io->delay_ms, io->dealer[d], NULL, 0, io->buf,
                                       n) != 0) {
                io_fault(io, d, LARES_ENET, "cannot send a heartbeat: %s",
                         zmq_strerror(zmq_errno()));
            }
        } else if (io->state[d] == DEV_HELLO && now > io->hello_deadline_ns[d]) {
            io_fault(io, d, LARES_ENET,
                     "no answer to hello within %u ms (last connection event: "
                     "%s)",
                     io->connect_ms, io->last_event[d][0] ? io->last_event[d] : "none");
        }
    }
}

static void *io_main(void *arg) {
    head_io *io = arg;
    zmq_pollitem_t items[1 + 2 * CLUSTER_MAX_DEVICES];
    uint64_t next_hb = lares_now_ns() + (uint64_t)io->hb_ms * 1000000u;
    for (;;) {
        int n = 0;
        items[n++] = (zmq_pollitem_t){.socket = io->pipe, .events = ZMQ_POLLIN};
        for (int32_t d = 1; d < io->n_dev; d++) {
            items[n++] = (zmq_pollitem_t){.socket = io->dealer[d], .events = ZMQ_POLLIN};
            items[n++] = (zmq_pollitem_t){.socket = io->mon[d], .events = ZMQ_POLLIN};
        }
        uint64_t now = lares_now_ns();
        long wait = next_hb > now ? (long)((next_hb - now) / 1000000u) + 1 : 0;
        const long ow = net_outbox_wait_ms(&io->out, now);
        if (ow >= 0 && ow < wait) {
            wait = ow;
        }
        if (zmq_poll(items, n, wait) < 0 && zmq_errno() != EINTR) {
            break; /* the context is going away */
        }
        now = lares_now_ns();
        if ((items[0].revents & ZMQ_POLLIN) && !io_from_pipe(io, now)) {
            break;
        }
        for (int32_t d = 1; d < io->n_dev; d++) {
            if (items[2 * d - 1].revents & ZMQ_POLLIN) {
                io_from_worker(io, d, now);
            }
            if (items[2 * d].revents & ZMQ_POLLIN) {
                io_events(io, d);
            }
        }
        if (now >= next_hb) {
            io_timers(io, now);
            next_hb = now + (uint64_t)io->hb_ms * 1000000u;
        }
        net_outbox_flush(&io->out, now);
    }
    /* let what is queued (STOP frames) go out */
    net_outbox_flush(&io->out, UINT64_MAX);
    const int linger = 200;
    for (int32_t d = 1; d < io->n_dev; d++) {
        zmq_setsockopt(io->dealer[d], ZMQ_LINGER, &linger, sizeof linger);
        zmq_socket_monitor(io->dealer[d], NULL, 0);
        zmq_close(io->dealer[d]);
        zmq_close(io->mon[d]);
        io->dealer[d] = io->mon[d] = NULL;
    }
    zmq_close(io->pipe);
    io->pipe = NULL;
    return NULL;
}

/* ---- the session's side ---- */

static const char *dev_name(const cluster_head *h, uint32_t d) {
    return d < (uint32_t)h->n_dev ? h->dev[d].name : "?";
}

static const char *dev_addr(const cluster_head *h, uint32_t d) {
    return d < (uint32_t)h->n_dev ? h->dev[d].address : "?";
}

static lares_status broken(cluster_head *h, lares_error *err) {
    if (err != NULL) {
        *err = h->failure;
    }
    return h->failure.code;
}

/* a device failed: the head stays failed until a new plan (issue 9) */
static lares_status device_failed(cluster_head *h, uint32_t dev, uint32_t code, const char *msg,
                                  lares_error *err) {
    const lares_status st =
        code > 0 && code < LARES_STATUS_COUNT ? (lares_status)code : LARES_EPROTO;
    lares_fail(&h->failure, st, "%s (%s): %s", dev_name(h, dev), dev_addr(h, dev), msg);
    h->broken = true;
    return broken(h, err);
}

static lares_status pipe_send(cluster_head *h, uint32_t dev, size_t len, lares_error *err) {
    uint8_t d[4];
    wr_u32le(d, dev);
    if (len == 0) {
        return lares_fail(err, LARES_EINVAL, "a frame for %s does not fit %zu bytes",
                          dev_name(h, dev), h->buf_cap);
    }
    if (net_pipe_send(h->pipe, d, 4, ZMQ_SNDMORE) < 0 ||
        net_pipe_send(h->pipe, h->buf, len, 0) < 0) {
        return lares_fail(err, LARES_ENET, "head: in-process pipe: %s", zmq_strerror(zmq_errno()));
    }
    return LARES_OK;
}

/* Waits for one frame from any device (timeout_ms < 0: as long as the
 * network thread keeps the devices alive) and decodes it into h->frame.
 * ERROR frames become a failure naming the device. */
static lares_status pipe_recv(cluster_head *h, int64_t timeout_ms, uint32_t *dev,
                              const _Atomic bool *cancel, lares_error *err) {
    const uint64_t t0 = lares_now_ns();
    for (;;) {
        zmq_pollitem_t it = {.socket = h->pipe, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 100) < 0 && zmq_errno() != EINTR) {
            return lares_fail(err, LARES_ENET, "head: poll: %s", zmq_strerror(zmq_errno()));
        }
        if (it.revents & ZMQ_POLLIN) {
            break;
        }
        if (cancel != NULL && atomic_load_explicit(cancel, memory_order_relaxed)) {
            return LARES_ECANCELED;
        }
        if (timeout_ms >= 0 && lares_now_ns() - t0 > (uint64_t)timeout_ms * 1000000u) {
            return lares_fail(err, LARES_ENET, "no answer from the ring within %" PRId64 " ms",
                              timeout_ms);
        }
    }
    zmq_msg_t d, f;
    zmq_msg_init(&d);
    zmq_msg_init(&f);
    lares_status st = LARES_OK;
    if (net_pipe_msg_recv(&d, h->pipe, 0) < 0 || zmq_msg_size(&d) != 4 || !zmq_msg_more(&d) ||
        net_pipe_msg_recv(&f, h->pipe, 0) < 0) {
        st = lares_fail(err, LARES_ENET, "head: in-process pipe: %s", zmq_strerror(zmq_errno()));
    } else {
        *dev = rd_u32le(zmq_msg_data(&d));
        /* decoded ACT arrays point into the bytes: keep them in buf */
        const size_t n = zmq_msg_size(&f);
        lares_error derr;
        if (n > h->buf_cap) {
            st = device_failed(h, *dev, LARES_EFORMAT,
                               "sent a frame larger than any this ring "
                               "uses",
                               err);
        } else {
            memcpy(h->buf, zmq_msg_data(&f), n);
            st = cluster_frame_decode(h->buf, n, h->frame, &derr);
            if (st != LARES_OK) {
                st = device_failed(h, *dev, st, derr.msg, err);
            } else if (h->frame->type == CLUSTER_ERROR) {
                st = device_failed(h, *dev, h->frame->u.error.code, h->frame->u.error.msg, err);
            }
        }
    }
    zmq_msg_close(&d);
    zmq_msg_close(&f);
    return st;
}

static uint64_t new_session_id(void) {
    static _Atomic uint64_t counter;
    uint64_t z = lares_now_ns() ^ ((uint64_t)getpid() << 40) ^
                 (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15u);
    /* splitmix64 finaliser: spreads the bits */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return z ? z : 1;
}

/* Waits for `want` frames of `type` (one from each device in need[]). */
static lares_status collect(cluster_head *h, uint16_t type, bool *need, int64_t timeout_ms,
                            lares_error *err) {
    for (;;) {
        bool any = false;
        for (int32_t d = 1; d < h->n_dev; d++) {
            any = any || need[d];
        }
        if (!any) {
            return LARES_OK;
        }
        uint32_t dev;
        lares_error perr = {0};
        lares_status st = pipe_recv(h, timeout_ms, &dev, NULL, &perr);
        if (st != LARES_OK) {
            if (st == LARES_ENET &&
                !h->broken) { /* no answer in time: blame the first one silent */
                for (int32_t d = 1; d < h->n_dev; d++) {
                    if (need[d]) {
                        return device_failed(h, (uint32_t)d, LARES_ENET, perr.msg, err);
                    }
                }
            }
            if (err != NULL) {
                *err = perr;
            }
            return st;
        }
        if (h->frame->type == type && dev < (uint32_t)h->n_dev && need[dev] &&
            (type == CLUSTER_WELCOME || h->frame->session == h->session)) {
            need[dev] = false;
            if (type == CLUSTER_WELCOME) {
                h->stats[dev].welcome = h->frame->u.welcome;
            }
        } else if (h->frame->type != CLUSTER_ACT) {
            lares_log(LARES_LOG_DEBUG, "cluster: dropped a %s frame from %s while waiting for %s",
                      cluster_frame_type_name(h->frame->type), dev_name(h, dev),
                      cluster_frame_type_name(type));
        }
    }
}

static lares_status hello_all(cluster_head *h, const char *head_name, lares_error *err) {
    bool need[CLUSTER_MAX_DEVICES] = {false};
    for (int32_t d = 1; d < h->n_dev; d++) {
        cluster_hello hello = {.model = h->model,
                               .device = (uint32_t)d,
                               .n_devices = (uint32_t)h->n_dev,
                               .heartbeat_ms = h->hb_ms,
                               .timeout_ms = h->timeout_ms};
        snprintf(hello.model_path, sizeof hello.model_path, "%s", h->dev[d].model_path);
        snprintf(hello.head_name, sizeof hello.head_name, "%s", head_name ? head_name : "head");
        lares_status st =
            pipe_send(h, (uint32_t)d, cluster_encode_hello(h->buf, h->buf_cap, &hello), err);
        if (st != LARES_OK) {
            return st;
        }
        need[d] = true;
    }
    lares_status st = collect(h, CLUSTER_WELCOME, need, (int64_t)h->connect_ms + 2000, err);
    if (st != LARES_OK) {
        return st;
    }
    for (int32_t d = 1; d < h->n_dev; d++) {
        const cluster_welcome *w = &h->stats[d].welcome;
        if (w->model.file_bytes != h->model.file_bytes ||
            w->model.header_hash != h->model.header_hash) {
            char msg[1024];
            snprintf(msg, sizeof msg,
                     "its model file differs from the head's (%" PRIu64 " bytes, header hash "
                     "%016" PRIx64 " there; %" PRIu64 " bytes, %016" PRIx64 " here)",
                     w->model.file_bytes, w->model.header_hash, h->model.file_bytes,
                     h->model.header_hash);
            return device_failed(h, (uint32_t)d, LARES_EINVAL, msg, err);
        }
        if ((int64_t)w->n_embd != h->n_embd || (int32_t)w->n_layer != h->plan.n_layer) {
            char msg[1024];
            snprintf(msg, sizeof msg, "its model has %u layers of width %u, the head's %d of %d",
                     w->n_layer, w->n_embd, h->plan.n_layer, h->n_embd);
            return device_failed(h, (uint32_t)d, LARES_EPROTO, msg, err);
        }
    }
    return LARES_OK;
}

lares_status cluster_head_set_plan(cluster_head *h, const cluster_plan *p, lares_error *err) {
    if (h->broken) {
        return broken(h, err);
    }
    lares_status st = cluster_plan_check(p, err);
    if (st != LARES_OK) {
        return st;
    }
    if (p->n_dev != h->n_dev || p->n_layer != h->plan.n_layer) {
        return lares_fail(err, LARES_EINVAL,
                          "plan for %d devices and %d layers, the ring has %d "
                          "devices and the model %d layers",
                          p->n_dev, p->n_layer, h->n_dev, h->plan.n_layer);
    }
    h->plan = *p;
    h->session = new_session_id();
    cluster_plan_msg *msg = lares_calloc(1, sizeof *msg);
    if (msg == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    msg->n_ctx = (uint32_t)h->n_ctx;
    msg->n_batch = (uint32_t)h->n_batch;
    msg->n_embd = (uint32_t)h->n_embd;
    msg->act_dtype = h->act_dtype;
    msg->kv_f16 = h->kv_f16 ? 1 : 0;
    msg->plan = *p;
    memcpy(msg->keys[0], h->head_key, CLUSTER_KEY_BYTES);
    for (int32_t d = 0; d < h->n_dev; d++) {
        memcpy(msg->keys[d], d == 0 ? h->head_key : h->dev[d].key, CLUSTER_KEY_BYTES);
        snprintf(msg->addr[d], sizeof msg->addr[d], "%s", h->dev[d].address);
        msg->link_delay_ms[d] = (uint32_t)h->dev[d].link_delay_ms;
    }
    /* from the last worker back: each worker's successor already knows the
     * plan (and so admits it) when the worker links to it */
    for (int32_t d = h->n_dev - 1; d >= 1 && st == LARES_OK; d--) {
        msg->self = (uint32_t)d;
        msg->n_threads = (uint32_t)h->dev[d].n_threads;
        st = pipe_send(h, (uint32_t)d, cluster_encode_plan(h->buf, h->buf_cap, h->session, msg),
                       err);
        bool need[CLUSTER_MAX_DEVICES] = {false};
        need[d] = true;
        if (st == LARES_OK) {
            st = collect(h, CLUSTER_READY, need, (int64_t)h->connect_ms * 2, err);
        }
    }
    lares_free(msg);
    return st;
}

void cluster_head_close(cluster_head *h) {
    if (h == NULL) {
        return;
    }
    if (h->thread_started) {
        for (int32_t d = 1; d < h->n_dev; d++) {
            pipe_send(h, (uint32_t)d, cluster_encode_stop(h->buf, h->buf_cap, h->session, 0), NULL);
        }
        uint8_t q[4];
        wr_u32le(q, PIPE_TO_IO);
        net_pipe_send(h->pipe, q, 4, ZMQ_SNDMORE);
        net_pipe_send(h->pipe, q, 4, 0);
        pthread_join(h->thread, NULL);
    } else {
        for (int32_t d = 1; d < h->n_dev; d++) {
            if (h->io.dealer[d] != NULL) {
                zmq_socket_monitor(h->io.dealer[d], NULL, 0);
                zmq_close(h->io.dealer[d]);
            }
            if (h->io.mon[d] != NULL) {
                zmq_close(h->io.mon[d]);
            }
        }
        if (h->io.pipe != NULL) {
            zmq_close(h->io.pipe);
        }
    }
    net_outbox_clear(&h->io.out);
    if (h->pipe != NULL) {
        zmq_close(h->pipe);
    }
    if (h->zctx != NULL) {
        zmq_ctx_term(h->zctx);
    }
    lares_free(h->buf);
    lares_free(h->frame);
    lares_free(h);
}

static lares_status connect_worker(cluster_head *h, int32_t d, const cluster_keypair *key,
                                   bool insecure, lares_error *err) {
    char ep[CLUSTER_MAX_ADDR + 16];
    bool ipv6 = false;
    lares_status st = net_endpoint(h->dev[d].address, false, ep, sizeof ep, &ipv6, err);
    if (st == LARES_OK) {
        st = net_socket(h->zctx, ZMQ_DEALER, &h->io.dealer[d], err);
    }
    if (st == LARES_OK && ipv6) {
        const int one = 1;
        zmq_setsockopt(h->io.dealer[d], ZMQ_IPV6, &one, sizeof one);
    }
    if (st == LARES_OK && !insecure) {
        st = net_curve_client(h->io.dealer[d], key, h->dev[d].key, err);
    }
    if (st == LARES_OK) {
        /* retry a refused connection quickly: workers are often started a moment later */
        const int ivl = 100, ivl_max = 1000;
        zmq_setsockopt(h->io.dealer[d], ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
        zmq_setsockopt(h->io.dealer[d], ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
        char name[16];
        snprintf(name, sizeof name, "dev%d", d);
        st = net_monitor(h->zctx, h->io.dealer[d], name, &h->io.mon[d], err);
    }
    if (st == LARES_OK && zmq_connect(h->io.dealer[d], ep) != 0) {
        st = lares_fail(err, LARES_ENET, "connect: %s", zmq_strerror(zmq_errno()));
    }
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s (%s): ", h->dev[d].name, h->dev[d].address);
    }
    return st;
}

lares_status cluster_head_open(const cluster_head_opts *o, cluster_head **out, lares_error *err) {
    const cluster_ring_config *rc = o->ring;
    lares_status st = cluster_plan_check(&o->plan, err);
    if (st != LARES_OK) {
        return st;
    }
    if (o->plan.n_dev != rc->n_dev) {
        return lares_fail(err, LARES_EINVAL, "plan for %d devices, ring of %d", o->plan.n_dev,
                          rc->n_dev);
    }
    if (!o->insecure && o->key == NULL) {
        return lares_fail(err, LARES_EAUTH,
                          "%s: the head needs its key pair (\"key\" of device 0, "
                          "made by lares keygen), or --insecure",
                          rc->path);
    }
    for (int32_t d = 1; d < rc->n_dev && !o->insecure; d++) {
        if (!rc->dev[d].has_key) {
            return lares_fail(err, LARES_EAUTH,
                              "%s: device %d (%s) has no \"public_key\" (needed "
                              "unless --insecure)",
                              rc->path, d, rc->dev[d].name);
        }
    }
    const size_t act_max = cluster_act_bytes((uint32_t)o->n_batch, (uint32_t)o->n_embd,
                                             rc->act_dtype, CLUSTER_MAX_TRACE);
    if (o->n_batch < 1 || o->n_embd < 1 || o->n_ctx < o->n_batch || act_max == 0) {
        return lares_fail(err, LARES_EINVAL,
                          "ring: a batch of %d x %d values does not fit a frame "
                          "of %u bytes (lower the batch size)",
                          o->n_batch, o->n_embd, CLUSTER_MAX_FRAME);
    }
    cluster_head *h = lares_calloc(1, sizeof *h);
    if (h == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    h->n_dev = rc->n_dev;
    memcpy(h->dev, rc->dev, sizeof h->dev);
    h->plan = o->plan;
    h->model = o->model;
    h->n_ctx = o->n_ctx;
    h->n_batch = o->n_batch;
    h->n_embd = o->n_embd;
    h->kv_f16 = o->kv_f16;
    h->act_dtype = rc->act_dtype;
    h->hb_ms = (uint32_t)rc->heartbeat_ms;
    h->timeout_ms = (uint32_t)rc->timeout_ms;
    h->connect_ms = (uint32_t)rc->connect_timeout_ms;
    if (o->key != NULL && !o->insecure) {
        memcpy(h->head_key, o->key->public_key, CLUSTER_KEY_BYTES);
    }
    h->buf_cap = LARES_MAX(act_max, (size_t)64 * 1024);
    h->buf = lares_alloc(h->buf_cap);
    h->frame = lares_calloc(1, sizeof *h->frame);
    if (h->buf == NULL || h->frame == NULL) {
        cluster_head_close(h);
        return lares_fail(err, LARES_ENOMEM, "out of memory for the ring buffers");
    }
    if (h->n_dev == 1) { /* a ring of the head alone: nothing to connect */
        *out = h;
        return LARES_OK;
    }
    h->zctx = zmq_ctx_new();
    if (h->zctx == NULL) {
        cluster_head_close(h);
        return lares_fail(err, LARES_ENET, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    }
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://lares-head-%p", (void *)h);
    st = net_socket(h->zctx, ZMQ_PAIR, &h->pipe, err);
    if (st == LARES_OK) {
        st = net_socket(h->zctx, ZMQ_PAIR, &h->io.pipe, err);
    }
    if (st == LARES_OK && (zmq_bind(h->pipe, ep) != 0 || zmq_connect(h->io.pipe, ep) != 0)) {
        st = lares_fail(err, LARES_ENET, "head pipe: %s", zmq_strerror(zmq_errno()));
    }
    for (int32_t d = 1; d < h->n_dev && st == LARES_OK; d++) {
        st = connect_worker(h, d, o->key, o->insecure, err);
    }
    if (st == LARES_OK) {
        h->io.n_dev = h->n_dev;
        h->io.hb_ms = h->hb_ms;
        h->io.timeout_ms = h->timeout_ms;
        h->io.connect_ms = h->connect_ms;
        h->io.delay_ms = (uint32_t)rc->dev[0].link_delay_ms;
        if (net_thread_start(&h->thread, io_main, &h->io) != 0) {
            st = lares_fail(err, LARES_ENOMEM, "cannot start the head's network thread");
        } else {
            h->thread_started = true;
        }
    }
    if (st == LARES_OK) {
        st = hello_all(h, o->head_name, err);
    }
    if (st == LARES_OK) {
        st = cluster_head_set_plan(h, &o->plan, err);
    }
    if (st != LARES_OK) {
        cluster_head_close(h);
        return st;
    }
    *out = h;
    return LARES_OK;
}

const cluster_plan *cluster_head_plan(const cluster_head *h) {
    return &h->plan;
}

int32_t cluster_head_n_devices(const cluster_head *h) {
    return h->n_dev;
}

const cluster_device_stats *cluster_head_device(const cluster_head *h, int32_t dev) {
    return dev >= 0 && dev < h->n_dev ? &h->stats[dev] : NULL;
}

const cluster_ring_device *cluster_head_ring_device(const cluster_head *h, int32_t dev) {
    return dev >= 0 && dev < h->n_dev ? &h->dev[dev] : NULL;
}

uint64_t cluster_head_wait_us(const cluster_head *h) {
    return h->wait_us;
}

uint64_t cluster_head_hops(const cluster_head *h) {
    return h->hops;
}

lares_status cluster_head_send(cluster_head *h, int32_t layer, const int32_t *pos, int32_t n_tok,
                               const float *x, uint64_t *seq, lares_error *err) {
    if (h->broken) {
        return broken(h, err);
    }
    if (h->n_dev < 2 || n_tok < 1 || n_tok > h->n_batch || layer < 0 || layer >= h->plan.n_layer) {
        return lares_fail(err, LARES_EINVAL,
                          "ring send: %d tokens at layer %d (batch %d, %d "
                          "devices)",
                          n_tok, layer, h->n_batch, h->n_dev);
    }
    const cluster_act a = {.seq = ++h->next_seq,
                           .layer = (uint32_t)layer,
                           .n_tok = (uint32_t)n_tok,
                           .n_embd = (uint32_t)h->n_embd,
                           .dtype = h->act_dtype,
                           .n_trace = 0};
    const size_t n = cluster_encode_act(h->buf, h->buf_cap, h->session, &a, pos, NULL, x);
    /* the clock before the send: the first worker may run before this thread does again */
    const uint64_t t_send = lares_now_ns();
    lares_status st = pipe_send(h, 1, n, err);
    if (st == LARES_OK) {
        h->sent_pos0 = pos[0];
        h->sent_ns = t_send;
        *seq = a.seq;
    }
    return st;
}

/* the device whose window (in any round) ends at `layer`, -1 when none */
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

lares_status cluster_head_recv(cluster_head *h, uint64_t seq, int32_t n_tok, float *x,
                               int32_t *layer, const _Atomic bool *cancel, lares_error *err) {
    if (h->broken) {
        return broken(h, err);
    }
    lares_status st;
    for (;;) {
        uint32_t dev;
        st = pipe_recv(h, -1, &dev, cancel, err);
        if (st != LARES_OK) {
            break;
        }
        const cluster_frame *f = h->frame;
        if (f->type != CLUSTER_ACT) {
            lares_log(LARES_LOG_DEBUG, "cluster: dropped a %s frame from %s during a batch",
                      cluster_frame_type_name(f->type), dev_name(h, dev));
            continue;
        }
        const cluster_act *a = &f->u.act;
        if (f->session != h->session || a->seq < seq) {
            continue; /* a batch abandoned earlier (a canceled generation) */
        }
        char bad[200] = "";
        const int32_t want_from = sender_of(&h->plan, (int32_t)a->layer);
        int32_t od, orr;
        if (a->seq != seq) {
            snprintf(bad, sizeof bad, "batch %" PRIu64 " arrived, %" PRIu64 " expected", a->seq,
                     seq);
        } else if ((int32_t)a->n_tok != n_tok || (int32_t)a->n_embd != h->n_embd ||
                   cluster_act_pos(a, 0) != h->sent_pos0) {
            snprintf(bad, sizeof bad,
                     "%u tokens of width %u from position %d came back, %d of %d "
                     "from %d were sent",
                     a->n_tok, a->n_embd, cluster_act_pos(a, 0), n_tok, h->n_embd, h->sent_pos0);
        } else if (want_from != (int32_t)dev ||
                   ((int32_t)a->layer != h->plan.n_layer &&
                    !(cluster_plan_owner(&h->plan, (int32_t)a->layer, &od, &orr) &&
                      (od == 0 || (od == 1 && h->plan.w[0] == 0))))) {
            /* back to the head: after the last layer, before a window of the
             * head's, or (a head without layers) to pass on to device 1 */
            snprintf(bad, sizeof bad,
                     "hidden states for layer %u came from a device that did not "
                     "run the layer before it",
                     a->layer);
        }
        if (bad[0] != '\0') {
            st = device_failed(h, dev, LARES_EPROTO, bad, err);
            break;
        }
        for (uint32_t i = 0; i < a->n_trace; i++) {
            cluster_trace t;
            cluster_act_trace_at(a, i, &t);
            if (t.device < h->n_dev) {
                h->stats[t.device].windows++;
                h->stats[t.device].compute_us += t.compute_us;
                h->stats[t.device].major_faults += t.major_faults;
            }
        }
        cluster_act_read(a, x);
        *layer = (int32_t)a->layer;
        h->hops += a->n_trace + 1;
        break;
    }
    /* from the send, not from this call: the workers may start before the
     * caller gets here (on a loaded machine the head is often preempted) */
    h->wait_us += (lares_now_ns() - h->sent_ns) / 1000u;
    return st;
}

lares_status cluster_head_truncate(cluster_head *h, int32_t pos, lares_error *err) {
    if (h->broken) {
        return broken(h, err);
    }
    bool need[CLUSTER_MAX_DEVICES] = {false};
    const cluster_kv kv = {.op = pos == 0 ? CLUSTER_KV_CLEAR : CLUSTER_KV_TRUNCATE, .pos = pos};
    for (int32_t d = 1; d < h->n_dev; d++) {
        lares_status st =
            pipe_send(h, (uint32_t)d,
                      cluster_encode_kv(h->buf, h->buf_cap, h->session, CLUSTER_KV, &kv), err);
        if (st != LARES_OK) {
            return st;
        }
        need[d] = true;
    }
    return collect(h, CLUSTER_KV_DONE, need, (int64_t)h->connect_ms, err);
}

void cluster_head_add_local(cluster_head *h, uint64_t compute_us) {
    h->stats[0].windows++;
    h->stats[0].compute_us += compute_us;
}
