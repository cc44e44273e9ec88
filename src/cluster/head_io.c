/*
 * The head's network thread (head_impl.h): forwards frames between the
 * workers' sockets and the session's pipe, sends heartbeats, answers the last
 * worker's PINGs, and turns silence (no frame for timeout_ms), a lost
 * connection or a refused handshake into an ERROR frame from that device, so
 * the session thread, which may be busy computing, never has to watch the
 * clock and never waits forever.
 */
#include "cluster/head_impl.h"

#include <errno.h>
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
    if (io->state[dev] == IO_FAILED) {
        return;
    }
    io->state[dev] = IO_FAILED;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const size_t n = cluster_encode_error(io->buf, sizeof io->buf, 0, (uint32_t)code, msg);
    io_to_pipe(io, (uint32_t)dev, io->buf, n);
}

/* a note to the session on a device's silence: a HEARTBEAT (workers' own
 * heartbeats never reach the session) whose counter is the silent ms, 0 when
 * the device is heard again */
static void io_note_silence(head_io *io, int32_t dev, uint64_t silent_ms) {
    uint8_t f[64];
    const size_t n = cluster_encode_heartbeat(f, sizeof f, 0, silent_ms);
    io_to_pipe(io, (uint32_t)dev, f, n);
    io->silence_told[dev] = silent_ms > 0;
}

static void io_hello_drop(head_io *io, int32_t dev) {
    if (io->hello_kept[dev]) {
        zmq_msg_close(&io->hello[dev]);
        io->hello_kept[dev] = false;
    }
}

/* keeps a copy of a HELLO to send again; false when it cannot */
static bool io_hello_keep(head_io *io, int32_t dev, const uint8_t *f, size_t len) {
    io_hello_drop(io, dev);
    if (zmq_msg_init_size(&io->hello[dev], len) != 0) {
        return false;
    }
    memcpy(zmq_msg_data(&io->hello[dev]), f, len);
    io->hello_kept[dev] = true;
    return true;
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
        const uint16_t type = len >= CLUSTER_HEADER_BYTES ? rd_u16le(f + 6) : 0;
        if (type == CLUSTER_HELLO) {
            io->state[dev] = IO_HELLO;
            io->silence_told[dev] = false;
            io->hello_deadline_ns[dev] = now + (uint64_t)io->hello_ms * 1000000u;
            io_hello_drop(io, (int32_t)dev);
            if (io->refusal[dev][0] != '\0') {
                io_fault(io, (int32_t)dev, LARES_EAUTH, "%s", io->refusal[dev]);
            }
        }
        if (io->state[dev] != IO_FAILED &&
            net_outbox_send(&io->out, io->delay_ms, io->dealer[dev], NULL, 0, f, len) != 0) {
            const int e = zmq_errno();
            if (!(type == CLUSTER_HELLO && e == EAGAIN && io_hello_keep(io, (int32_t)dev, f, len))) {
                io_fault(io, (int32_t)dev, LARES_ENET, "cannot send a %s frame: %s",
                         cluster_frame_type_name(type), zmq_strerror(e));
            }
        } else if (type == CLUSTER_HELLO && io->conn_up[dev]) {
            io->state[dev] = IO_ASKED;
        }
        if (type == CLUSTER_STOP && io->state[dev] != IO_FAILED) {
            io->state[dev] = IO_IDLE; /* no heartbeats to a device that left */
        }
        zmq_msg_close(&frame);
    }
}

static void io_from_worker(head_io *io, int32_t dev, uint64_t now) {
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (!net_peer_recv_part(io->dealer[dev], &m, NULL)) {
            zmq_msg_close(&m);
            return;
        }
        io->last_rx_ns[dev] = now;
        if (io->silence_told[dev]) {
            io_note_silence(io, dev, 0); /* heard again */
        }
        const uint8_t *f = zmq_msg_data(&m);
        const size_t len = zmq_msg_size(&m);
        /* the session decodes and judges every frame; only heartbeats stop here */
        const uint16_t type = len >= CLUSTER_HEADER_BYTES ? rd_u16le(f + 6) : 0;
        if (type == CLUSTER_HEARTBEAT && len >= CLUSTER_HEADER_BYTES &&
            rd_u32le(f) == CLUSTER_MAGIC) {
            zmq_msg_close(&m);
            continue;
        }
        if (type == CLUSTER_PING && len >= CLUSTER_HEADER_BYTES + 8 &&
            rd_u32le(f) == CLUSTER_MAGIC && io->state[dev] == IO_ATTACHED) {
            /* the last worker measures its hop to the head: echo at once */
            const size_t n = cluster_encode_ping(io->buf, sizeof io->buf, rd_u64le(f + 8),
                                                 CLUSTER_PONG, rd_u64le(f + CLUSTER_HEADER_BYTES),
                                                 0);
            net_outbox_send(&io->out, io->delay_ms, io->dealer[dev], NULL, 0, io->buf, n);
            zmq_msg_close(&m);
            continue;
        }
        if (type == CLUSTER_TENSOR_GET && rd_u32le(f) == CLUSTER_MAGIC &&
            io->state[dev] != IO_FAILED && io->state[dev] != IO_IDLE) {
            /* a worker without the model file fetches it (head_ship.c); while
             * it fetches the header before its WELCOME, that is no silence */
            if (io->state[dev] == IO_HELLO || io->state[dev] == IO_ASKED) {
                io->hello_deadline_ns[dev] = now + (uint64_t)io->hello_ms * 1000000u;
            }
            head_ship_serve(io, dev, f, len, now);
            zmq_msg_close(&m);
            /* one chunk per turn of the loop: the first chunk of an item hashes
             * all of it (a second for a large one), and the other devices'
             * heartbeats and frames must not wait for a whole window's worth */
            return;
        }
        if (type == CLUSTER_WELCOME &&
            (io->state[dev] == IO_HELLO || io->state[dev] == IO_ASKED)) {
            io->state[dev] = IO_ATTACHED;
        }
        if (io->state[dev] != IO_FAILED) {
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
            io->refusal[dev][0] = '\0';
            io->conn_up[dev] = true;
            if (io->state[dev] == IO_HELLO && !io->hello_kept[dev]) {
                io->state[dev] = IO_ASKED; /* the HELLO queued before it goes out now */
            }
        } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
                   (ev == ZMQ_EVENT_DISCONNECTED && !io->conn_up[dev])) {
            /* closed before any handshake succeeded (a plain-text client
             * against CURVE sees only this): a refusal when it repeats */
            io->handshake_fails[dev]++;
        }
        const bool was_up = io->conn_up[dev];
        if (ev == ZMQ_EVENT_DISCONNECTED || ev == ZMQ_EVENT_CLOSED ||
            ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || net_event_fatal(ev, value)) {
            io->conn_up[dev] = false;
        }
        /* a worker that closes every handshake holds another key than ring.json
         * says (or runs --insecure): three in a row is no network hiccup */
        const bool refused = net_event_fatal(ev, value) || io->handshake_fails[dev] >= 3;
        if (refused && io->state[dev] == IO_IDLE) {
            /* before the HELLO (the connection is made when the ring opens):
             * ZeroMQ does not retry a refused handshake, so keep it for then */
            snprintf(io->refusal[dev], sizeof io->refusal[dev], "%s", io->last_event[dev]);
        }
        if ((io->state[dev] == IO_HELLO || io->state[dev] == IO_ASKED) && refused) {
            /* a refusal, not silence: the start does not go on without it */
            io_fault(io, dev, LARES_EAUTH, "%s", io->last_event[dev]);
        } else if (io->state[dev] == IO_ASKED && was_up && ev == ZMQ_EVENT_DISCONNECTED) {
            /* the HELLO went out over a working connection: the worker died
             * (or was cut off) while it opened its model or measured itself */
            io_fault(io, dev, LARES_ENET,
                     "connection lost before its answer to hello (the worker died or the "
                     "network dropped it)");
        } else if (io->state[dev] == IO_ATTACHED && ev == ZMQ_EVENT_DISCONNECTED) {
            io_fault(io, dev, LARES_ENET,
                     "connection lost (the worker died or the network "
                     "dropped it)");
        }
    }
}

static void io_timers(head_io *io, uint64_t now) {
    /* its own bytes: a fault in this loop encodes its ERROR into io->buf, and
     * the devices after it must still get a heartbeat, not that frame's head */
    uint8_t hb[64];
    const size_t n = cluster_encode_heartbeat(hb, sizeof hb, 0, ++io->hb_counter);
    for (int32_t d = 1; d < io->n_dev; d++) {
        if (io->state[d] == IO_ATTACHED) {
            const uint64_t silent_ms = (now - io->last_rx_ns[d]) / 1000000u;
            if (silent_ms > io->timeout_ms / 2 && silent_ms <= io->timeout_ms &&
                !io->silence_told[d]) {
                io_note_silence(io, d, silent_ms); /* suspect, not given up yet */
            }
            if (silent_ms > io->timeout_ms) {
                io_fault(io, d, LARES_ENET,
                         "no heartbeat for %" PRIu64 " ms (timeout %u ms): the worker hangs, "
                         "died or is unreachable",
                         silent_ms, io->timeout_ms);
            } else if (net_outbox_send(&io->out, io->delay_ms, io->dealer[d], NULL, 0, hb, n) !=
                       0) {
                io_fault(io, d, LARES_ENET, "cannot send a heartbeat: %s",
                         zmq_strerror(zmq_errno()));
            }
        } else if ((io->state[d] == IO_HELLO || io->state[d] == IO_ASKED) &&
                   now <= io->hello_deadline_ns[d]) {
            /* a worker measuring itself before its WELCOME must not take the
             * head for silent; a send that fails here (not connected yet) is
             * left to the hello deadline, as is a HELLO still kept */
            if (io->hello_kept[d]) {
                if (net_outbox_send(&io->out, io->delay_ms, io->dealer[d], NULL, 0,
                                    zmq_msg_data(&io->hello[d]), zmq_msg_size(&io->hello[d])) == 0) {
                    io_hello_drop(io, d);
                    io->state[d] = io->conn_up[d] ? IO_ASKED : IO_HELLO;
                }
            } else {
                (void)net_outbox_send(&io->out, io->delay_ms, io->dealer[d], NULL, 0, hb, n);
            }
        } else if (io->state[d] == IO_HELLO || io->state[d] == IO_ASKED) {
            io_fault(io, d, LARES_ENET,
                     "no answer to hello within %u ms (last connection event: "
                     "%s)",
                     io->hello_ms, io->last_event[d][0] ? io->last_event[d] : "none");
        }
    }
}

void *head_io_main(void *arg) {
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
        io_hello_drop(io, d);
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
