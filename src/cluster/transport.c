/*
 * ZeroMQ plumbing: sockets with CURVE, addresses, connection events in words,
 * and an outbox that delays frames to emulate link latency (the kernel of the
 * test machines has no netem; ../shared/docs/testbed.md).
 */
#include "cluster/cluster_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>

lares_status net_socket(void *zctx, int type, void **out, lares_error *err) {
    void *s = zmq_socket(zctx, type);
    if (s == NULL) {
        return lares_fail(err, LARES_ENET, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    }
    const int zero = 0;
    const int64_t maxmsg = CLUSTER_MAX_FRAME;
    const int hwm = 10000;
    if (zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
        zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0 ||
        (type != ZMQ_PAIR && zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0)) {
        lares_status st =
            lares_fail(err, LARES_ENET, "zmq_setsockopt: %s", zmq_strerror(zmq_errno()));
        zmq_close(s);
        return st;
    }
    *out = s;
    return LARES_OK;
}

lares_status net_curve_server(void *s, const cluster_keypair *k, lares_error *err) {
    const int one = 1;
    if (zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, k->secret_z85, CLUSTER_KEY_Z85) != 0 ||
        zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, "lares", 5) != 0) {
        return lares_fail(err, LARES_ENET, "setting up CURVE (server): %s",
                          zmq_strerror(zmq_errno()));
    }
    return LARES_OK;
}

lares_status net_curve_client(void *s, const cluster_keypair *k,
                              const uint8_t server_key[CLUSTER_KEY_BYTES], lares_error *err) {
    if (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_key, CLUSTER_KEY_BYTES) != 0 ||
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, k->public_z85, CLUSTER_KEY_Z85) != 0 ||
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, k->secret_z85, CLUSTER_KEY_Z85) != 0) {
        return lares_fail(err, LARES_ENET, "setting up CURVE (client): %s",
                          zmq_strerror(zmq_errno()));
    }
    return LARES_OK;
}

lares_status net_endpoint(const char *addr, bool bind, char *out, size_t cap, bool *ipv6,
                          lares_error *err) {
    const char *a = strncmp(addr, "tcp://", 6) == 0 ? addr + 6 : addr;
    const char *colon = strrchr(a, ':');
    *ipv6 = a[0] == '[';
    if (colon == NULL || colon == a || colon[1] == '\0' || (*ipv6 && colon[-1] != ']')) {
        return lares_fail(err, LARES_EINVAL,
                          "'%s' is not an address: write host:port (e.g. 192.168.1.20:9100 or "
                          "[fe80::1]:9100)",
                          addr);
    }
    char *end;
    errno = 0;
    const long port = strtol(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || port < 0 || port > 65535 || (port == 0 && !bind)) {
        return lares_fail(err, LARES_EINVAL, "'%s': the port must be %s to 65535", addr,
                          bind ? "0 (any free port)" : "1");
    }
    const int host_len = (int)(colon - a);
    int n = port == 0 ? snprintf(out, cap, "tcp://%.*s:*", host_len, a)
                      : snprintf(out, cap, "tcp://%.*s:%ld", host_len, a, port);
    if (n < 0 || (size_t)n >= cap) {
        return lares_fail(err, LARES_EINVAL, "address '%.60s' is too long", addr);
    }
    return LARES_OK;
}

void net_endpoint_to_addr(const char *endpoint, char *out, size_t cap) {
    snprintf(out, cap, "%s", strncmp(endpoint, "tcp://", 6) == 0 ? endpoint + 6 : endpoint);
}

lares_status net_monitor(void *zctx, void *s, const char *name, void **mon, lares_error *err) {
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://lares-mon-%s-%p", name, s);
    if (zmq_socket_monitor(s, ep, ZMQ_EVENT_ALL) != 0) {
        return lares_fail(err, LARES_ENET, "zmq_socket_monitor: %s", zmq_strerror(zmq_errno()));
    }
    void *m = zmq_socket(zctx, ZMQ_PAIR);
    if (m == NULL || zmq_connect(m, ep) != 0) {
        if (m != NULL) {
            zmq_close(m);
        }
        return lares_fail(err, LARES_ENET, "monitor connect: %s", zmq_strerror(zmq_errno()));
    }
    const int zero = 0;
    zmq_setsockopt(m, ZMQ_LINGER, &zero, sizeof zero);
    *mon = m;
    return LARES_OK;
}

bool net_recv_part(void *s, zmq_msg_t *m, bool *more) {
    if (zmq_msg_recv(m, s, ZMQ_DONTWAIT) < 0) {
        return false;
    }
    if (more != NULL) {
        *more = zmq_msg_more(m) != 0;
    }
    return true;
}

/* Receives from another device go through the read gate (core/fault.c). A
 * ZeroMQ message comes whole or not at all and the transport hides errors of
 * the connection, so what a device can see of a failing network is a message
 * that never arrives: an injected fault (either kind) receives the whole
 * message and drops it. Pipes between threads of one process are not gated:
 * they do not fail short of the context ending. */
bool net_peer_recv_part(void *s, zmq_msg_t *m, bool *more) {
    lares_read_fault kind;
    if (!lares_read_fault_next(&kind)) {
        return net_recv_part(s, m, more);
    }
    bool again = net_recv_part(s, m, &again) && again;
    while (again) {
        zmq_msg_close(m);
        zmq_msg_init(m);
        again = net_pipe_msg_recv(m, s, 0) >= 0 && zmq_msg_more(m);
    }
    errno = EIO;
    return false;
}

bool net_read_event(void *mon, uint16_t *event, uint32_t *value, char *addr, size_t addr_cap) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    bool more = false;
    if (!net_recv_part(mon, &m, &more)) {
        zmq_msg_close(&m);
        return false;
    }
    const bool ok = zmq_msg_size(&m) == 6;
    if (ok) {
        const uint8_t *d = zmq_msg_data(&m);
        *event = rd_u16le(d);
        *value = rd_u32le(d + 2);
    }
    addr[0] = '\0';
    while (more) { /* the second part: the endpoint */
        zmq_msg_t a;
        zmq_msg_init(&a);
        if (zmq_msg_recv(&a, mon, 0) < 0) {
            zmq_msg_close(&a);
            break;
        }
        more = zmq_msg_more(&a) != 0;
        const size_t n = LARES_MIN(zmq_msg_size(&a), addr_cap - 1);
        memcpy(addr, zmq_msg_data(&a), n);
        addr[n] = '\0';
        zmq_msg_close(&a);
    }
    zmq_msg_close(&m);
    return ok;
}

static const char *protocol_error_text(uint32_t v) {
    switch (v) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
        return "CURVE decryption failed: the client does not hold the server's public key "
               "(a wrong public key in ring.json?)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        return "security mechanism mismatch: one side runs --insecure and the other does not";
    case ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE:
        return "CURVE key exchange failed";
    default:
        if (v >= ZMQ_PROTOCOL_ERROR_ZAP_UNSPECIFIED && v < ZMQ_PROTOCOL_ERROR_WS_UNSPECIFIED) {
            return "the authentication handler failed";
        }
        return "ZMTP protocol error (not a ZeroMQ peer, or a different ZMTP version?)";
    }
}

void net_event_text(uint16_t event, uint32_t value, char *buf, size_t cap) {
    switch (event) {
    case ZMQ_EVENT_CONNECTED:
        snprintf(buf, cap, "connected (TCP)");
        break;
    case ZMQ_EVENT_CONNECT_DELAYED:
        snprintf(buf, cap, "connecting");
        break;
    case ZMQ_EVENT_CONNECT_RETRIED:
        snprintf(buf, cap, "connection refused or unreachable, retrying");
        break;
    case ZMQ_EVENT_DISCONNECTED:
        snprintf(buf, cap, "connection lost");
        break;
    case ZMQ_EVENT_CLOSED:
        snprintf(buf, cap, "connection closed");
        break;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        snprintf(buf, cap, "handshake succeeded");
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        snprintf(buf, cap,
                 "handshake failed (the peer closed the connection: a wrong key on "
                 "either side, or --insecure on one side only)");
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        snprintf(buf, cap, "handshake failed: %s", protocol_error_text(value));
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        snprintf(buf, cap,
                 "handshake refused (status %u): the peer does not allow this key (add the "
                 "public key to its --allow list)",
                 value);
        break;
    default:
        snprintf(buf, cap, "connection event 0x%x (%u)", event, value);
        break;
    }
}

bool net_event_fatal(uint16_t event, uint32_t value) {
    (void)value;
    return event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;
}

int net_send(void *s, const uint8_t *rid, size_t rid_len, const void *buf, size_t len) {
    if (rid != NULL && zmq_send(s, rid, rid_len, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0) {
        return -1;
    }
    return zmq_send(s, buf, len, ZMQ_DONTWAIT) < 0 ? -1 : 0;
}

static int send_item(net_outbox_item *it) {
    if (it->rid_len > 0 &&
        zmq_send(it->sock, it->rid, it->rid_len, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0) {
        zmq_msg_close(&it->msg);
        return -1;
    }
    if (zmq_msg_send(&it->msg, it->sock, ZMQ_DONTWAIT) < 0) {
        const int e = errno;
        zmq_msg_close(&it->msg);
        errno = e;
        return -1;
    }
    return 0;
}

int net_outbox_send(net_outbox *o, uint32_t delay_ms, void *s, const uint8_t *rid, size_t rid_len,
                    const void *buf, size_t len) {
    if (delay_ms == 0 && o->count == 0) {
        return net_send(s, rid, rid_len, buf, len);
    }
    if (o->count == NET_OUTBOX_CAP || rid_len > NET_MAX_RID) {
        errno = EAGAIN;
        return -1;
    }
    net_outbox_item *it = &o->items[(o->head + o->count) % NET_OUTBOX_CAP];
    if (zmq_msg_init_size(&it->msg, len) != 0) {
        return -1;
    }
    memcpy(zmq_msg_data(&it->msg), buf, len);
    it->sock = s;
    it->rid_len = rid != NULL ? rid_len : 0;
    if (it->rid_len > 0) {
        memcpy(it->rid, rid, rid_len);
    }
    it->due_ns = lares_now_ns() + (uint64_t)delay_ms * 1000000u;
    o->count++;
    return 0;
}

int net_outbox_flush(net_outbox *o, uint64_t now_ns) {
    int rc = 0;
    while (o->count > 0 && o->items[o->head].due_ns <= now_ns) {
        if (send_item(&o->items[o->head]) != 0) {
            rc = -1;
        }
        o->head = (o->head + 1) % NET_OUTBOX_CAP;
        o->count--;
    }
    return rc;
}

long net_outbox_wait_ms(const net_outbox *o, uint64_t now_ns) {
    if (o->count == 0) {
        return -1;
    }
    const uint64_t due = o->items[o->head].due_ns;
    return due <= now_ns ? 0 : (long)((due - now_ns + 999999) / 1000000);
}

void net_outbox_clear(net_outbox *o) {
    while (o->count > 0) {
        zmq_msg_close(&o->items[o->head].msg);
        o->head = (o->head + 1) % NET_OUTBOX_CAP;
        o->count--;
    }
}

int net_pipe_send(void *s, const void *buf, size_t len, int flags) {
    int rc;
    while ((rc = zmq_send(s, buf, len, flags)) < 0 && zmq_errno() == EINTR) {
    }
    return rc;
}

int net_pipe_msg_send(zmq_msg_t *m, void *s, int flags) {
    int rc;
    while ((rc = zmq_msg_send(m, s, flags)) < 0 && zmq_errno() == EINTR) {
    }
    return rc;
}

int net_pipe_msg_recv(zmq_msg_t *m, void *s, int flags) {
    int rc;
    while ((rc = zmq_msg_recv(m, s, flags)) < 0 && zmq_errno() == EINTR) {
    }
    return rc;
}

int net_thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    const int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
