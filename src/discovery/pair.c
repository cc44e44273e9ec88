/*
 * Pairing (docs/ring.md "Zero-setup ring", bytes in docs/protocol.md): a
 * short exchange over its own CURVE connection, the head pinning the key the
 * worker announced:
 *
 *   head                                   worker
 *    |-- REQUEST (SHA-256 of nonce_h, name) -->|  (refused when not waiting to be paired)
 *    |<- NONCE (nonce_w, name) ----------------|
 *    |-- REVEAL (nonce_h) -------------------->|  checks the commitment, shows the code
 *    |   the user types the code on the head; the head compares it with its own
 *    |-- CONFIRM (code) or ABORT (why) ------->|  stores the head's key on a match
 *    |<- RESULT (status, message) -------------|
 *
 * The worker's socket lets any client key in (its ZAP handler names the key,
 * so the stored key is the one that made the connection) and answers only
 * these messages; the ring's own socket still admits only paired heads.
 */
#include "discovery/discovery.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <zmq.h>

#define PAIR_MAGIC "LRPR"
#define PAIR_MAX_MSG 256
#define PAIR_PENDING_MS 120000u /* a pairing left half-way expires */

typedef enum pair_msg_type {
    PAIR_REQUEST = 1,
    PAIR_NONCE = 2,
    PAIR_REVEAL = 3,
    PAIR_CONFIRM = 4,
    PAIR_ABORT = 5,
    PAIR_RESULT = 6,
} pair_msg_type;

typedef struct pair_msg {
    pair_msg_type type;
    uint8_t bytes[32];           /* REQUEST: commitment; NONCE, REVEAL: nonce */
    uint32_t value;              /* CONFIRM: code; RESULT: status */
    char text[DISC_NAME_MAX + 200]; /* REQUEST, NONCE: name; ABORT, RESULT: message */
} pair_msg;

static size_t pair_encode(const pair_msg *m, uint8_t *buf) {
    memcpy(buf, PAIR_MAGIC, 4);
    wr_u16le(buf + 4, DISC_PROTO_VERSION);
    wr_u16le(buf + 6, (uint16_t)m->type);
    size_t o = 8;
    if (m->type == PAIR_REQUEST || m->type == PAIR_NONCE || m->type == PAIR_REVEAL) {
        memcpy(buf + o, m->bytes, 32);
        o += 32;
    }
    if (m->type == PAIR_CONFIRM || m->type == PAIR_RESULT) {
        wr_u32le(buf + o, m->value);
        o += 4;
    }
    if (m->type != PAIR_REVEAL && m->type != PAIR_CONFIRM) {
        const size_t n = LARES_MIN(strlen(m->text), (size_t)200);
        buf[o++] = (uint8_t)n;
        memcpy(buf + o, m->text, n);
        o += n;
    }
    return o;
}

static lares_status pair_decode(const uint8_t *buf, size_t len, pair_msg *m, lares_error *err) {
    memset(m, 0, sizeof *m);
    if (len < 8 || memcmp(buf, PAIR_MAGIC, 4) != 0) {
        return lares_fail(err, LARES_EFORMAT, "not a pairing message (%zu bytes)", len);
    }
    if (rd_u16le(buf + 4) != DISC_PROTO_VERSION) {
        return lares_fail(err, LARES_EPROTO, "pairing message of version %u (this lares speaks %d)",
                          rd_u16le(buf + 4), DISC_PROTO_VERSION);
    }
    const uint16_t t = rd_u16le(buf + 6);
    if (t < PAIR_REQUEST || t > PAIR_RESULT) {
        return lares_fail(err, LARES_EFORMAT, "pairing message of unknown type %u", t);
    }
    m->type = (pair_msg_type)t;
    size_t o = 8;
    if (t == PAIR_REQUEST || t == PAIR_NONCE || t == PAIR_REVEAL) {
        if (len - o < 32) {
            return lares_fail(err, LARES_EFORMAT, "pairing message truncated");
        }
        memcpy(m->bytes, buf + o, 32);
        o += 32;
    }
    if (t == PAIR_CONFIRM || t == PAIR_RESULT) {
        if (len - o < 4) {
            return lares_fail(err, LARES_EFORMAT, "pairing message truncated");
        }
        m->value = rd_u32le(buf + o);
        o += 4;
    }
    if (t != PAIR_REVEAL && t != PAIR_CONFIRM) {
        if (len - o < 1 || buf[o] > 200 || buf[o] > len - o - 1) {
            return lares_fail(err, LARES_EFORMAT, "pairing message: bad text length");
        }
        const size_t n = buf[o];
        memcpy(m->text, buf + o + 1, n);
        m->text[n] = '\0';
        o += 1 + n;
        for (size_t i = 0; i < n; i++) {
            if (m->text[i] < ' ' || m->text[i] > '~') {
                return lares_fail(err, LARES_EFORMAT, "pairing message: text not printable");
            }
        }
        if ((t == PAIR_REQUEST || t == PAIR_NONCE) && !disc_name_valid(m->text)) {
            return lares_fail(err, LARES_EFORMAT, "pairing message: '%s' is not a device name",
                              m->text);
        }
    }
    if (o != len) {
        return lares_fail(err, LARES_EFORMAT, "pairing message with %zu trailing bytes", len - o);
    }
    return LARES_OK;
}

lares_status disc_pair_msg_check(const uint8_t *buf, size_t len, lares_error *err) {
    pair_msg m;
    return pair_decode(buf, len, &m, err);
}

static void curve_opts(void *s, int linger_ms, int timeout_ms) {
    const int maxmsg = 4096;
    zmq_setsockopt(s, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (timeout_ms > 0) {
        zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
        zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    }
}

/* ---- the worker's service ---- */

typedef enum pending_stage {
    STAGE_NONE = 0,
    STAGE_AWAIT_REVEAL,
    STAGE_AWAIT_CONFIRM,
} pending_stage;

struct disc_pair_service {
    disc_pair_service_opts o;
    char name[DISC_NAME_MAX + 1];
    uint8_t self_key[DISC_KEY_BYTES];
    void *zctx, *router, *zap;
    uint16_t port;
    pthread_t thread;
    _Atomic bool stop;
    /* the pairing in progress (one at a time) */
    pending_stage stage;
    uint8_t rid[256];
    size_t rid_len;
    uint8_t head_key[DISC_KEY_BYTES];
    char head_name[DISC_NAME_MAX + 1];
    uint8_t commit[32], nonce_w[DISC_NONCE_BYTES];
    uint32_t code;
    uint64_t started_ms;
};

/* ZAP: every CURVE client is let in; its key becomes the connection's User-Id */
static void zap_answer(disc_pair_service *s) {
    zmq_msg_t part[8];
    int n = 0;
    bool more = true;
    while (more && n < 8) {
        zmq_msg_init(&part[n]);
        if (zmq_msg_recv(&part[n], s->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part[n]);
            break;
        }
        more = zmq_msg_more(&part[n]) != 0;
        n++;
    }
    while (more) {
        zmq_msg_t extra;
        zmq_msg_init(&extra);
        more = zmq_msg_recv(&extra, s->zap, 0) >= 0 && zmq_msg_more(&extra);
        zmq_msg_close(&extra);
    }
    if (n >= 6) {
        const bool curve = zmq_msg_size(&part[5]) == 5 &&
                           memcmp(zmq_msg_data(&part[5]), "CURVE", 5) == 0;
        const bool keyed = curve && n >= 7 && zmq_msg_size(&part[6]) == DISC_KEY_BYTES;
        char user[DISC_KEY_Z85 + 1] = "";
        if (keyed) {
            zmq_z85_encode(user, zmq_msg_data(&part[6]), DISC_KEY_BYTES);
        }
        zmq_send(s->zap, "1.0", 3, ZMQ_SNDMORE);
        zmq_send(s->zap, zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), ZMQ_SNDMORE);
        zmq_send(s->zap, keyed ? "200" : "400", 3, ZMQ_SNDMORE);
        zmq_send(s->zap, keyed ? "OK" : "CURVE only", keyed ? 2 : 10, ZMQ_SNDMORE);
        zmq_send(s->zap, user, strlen(user), ZMQ_SNDMORE);
        zmq_send(s->zap, "", 0, 0);
    }
    for (int i = 0; i < n; i++) {
        zmq_msg_close(&part[i]);
    }
}

static void reply(disc_pair_service *s, const uint8_t *rid, size_t rid_len, const pair_msg *m) {
    uint8_t buf[PAIR_MAX_MSG + 64];
    const size_t len = pair_encode(m, buf);
    if (zmq_send(s->router, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(s->router, buf, len, ZMQ_DONTWAIT) < 0) {
        lares_log(LARES_LOG_DEBUG, "pairing: a reply was dropped: %s", zmq_strerror(zmq_errno()));
    }
}

static void result(disc_pair_service *s, const uint8_t *rid, size_t rid_len, lares_status st,
                   const char *text) {
    pair_msg m = {.type = PAIR_RESULT, .value = (uint32_t)st};
    snprintf(m.text, sizeof m.text, "%.200s", text);
    reply(s, rid, rid_len, &m);
}

static void refused(disc_pair_service *s, const char *why) {
    disc_pair_event ev = {.kind = DISC_PAIR_REFUSED,
                          .head_name = s->head_name,
                          .head_key = s->head_key,
                          .text = why};
    s->o.on_event(&ev, s->o.user, NULL);
}

static void on_message(disc_pair_service *s, const uint8_t *rid, size_t rid_len, zmq_msg_t *m) {
    pair_msg in;
    lares_error err = {0};
    if (pair_decode(zmq_msg_data(m), zmq_msg_size(m), &in, &err) != LARES_OK) {
        result(s, rid, rid_len, err.code, err.msg);
        return;
    }
    const char *uid = zmq_msg_gets(m, "User-Id");
    uint8_t key[DISC_KEY_BYTES];
    if (uid == NULL || strlen(uid) != DISC_KEY_Z85 || zmq_z85_decode(key, uid) == NULL) {
        result(s, rid, rid_len, LARES_EAUTH, "no CURVE key on this connection");
        return;
    }
    const uint64_t now = lares_now_ns() / 1000000u;
    if (s->stage != STAGE_NONE && now - s->started_ms > PAIR_PENDING_MS) {
        s->stage = STAGE_NONE; /* left half-way */
    }
    const bool same = s->stage != STAGE_NONE && rid_len == s->rid_len &&
                      memcmp(rid, s->rid, rid_len) == 0 &&
                      memcmp(key, s->head_key, DISC_KEY_BYTES) == 0;
    if (in.type == PAIR_REQUEST) {
        if (s->stage != STAGE_NONE && !same) {
            result(s, rid, rid_len, LARES_EBUSY,
                   "busy: another head is pairing with this worker; try again in 2 minutes");
            return;
        }
        if (!s->o.open(s->o.user)) {
            result(s, rid, rid_len, LARES_EAUTH,
                   "this worker is not waiting to be paired (it has a paired head: start it "
                   "with --pair to pair another)");
            return;
        }
        s->stage = STAGE_AWAIT_REVEAL;
        memcpy(s->rid, rid, rid_len);
        s->rid_len = rid_len;
        memcpy(s->head_key, key, DISC_KEY_BYTES);
        snprintf(s->head_name, sizeof s->head_name, "%.63s", in.text);
        memcpy(s->commit, in.bytes, 32);
        disc_random(s->nonce_w, sizeof s->nonce_w);
        s->started_ms = now;
        pair_msg out = {.type = PAIR_NONCE};
        memcpy(out.bytes, s->nonce_w, 32);
        snprintf(out.text, sizeof out.text, "%s", s->name);
        reply(s, rid, rid_len, &out);
        return;
    }
    if (!same) {
        result(s, rid, rid_len, LARES_EPROTO, "no pairing in progress with this head");
        return;
    }
    if (in.type == PAIR_REVEAL && s->stage == STAGE_AWAIT_REVEAL) {
        uint8_t c[32];
        disc_commit(in.bytes, c);
        if (memcmp(c, s->commit, 32) != 0) {
            s->stage = STAGE_NONE;
            refused(s, "its nonce does not match its commitment (a forger?)");
            result(s, rid, rid_len, LARES_EAUTH, "the nonce does not match its commitment");
            return;
        }
        s->code = disc_sas(s->head_key, s->self_key, in.bytes, s->nonce_w);
        s->stage = STAGE_AWAIT_CONFIRM;
        disc_pair_event ev = {.kind = DISC_PAIR_CODE,
                              .head_name = s->head_name,
                              .head_key = s->head_key,
                              .code = s->code};
        s->o.on_event(&ev, s->o.user, NULL);
        return; /* the head waits for its user */
    }
    if (in.type == PAIR_CONFIRM && s->stage == STAGE_AWAIT_CONFIRM) {
        s->stage = STAGE_NONE;
        if (in.value != s->code) {
            refused(s, "the code it confirmed is not the one shown here");
            result(s, rid, rid_len, LARES_EAUTH, "the code does not match the one shown");
            return;
        }
        disc_pair_event ev = {.kind = DISC_PAIR_PAIRED,
                              .head_name = s->head_name,
                              .head_key = s->head_key,
                              .code = s->code};
        lares_error serr = {0};
        const lares_status st = s->o.on_event(&ev, s->o.user, &serr);
        result(s, rid, rid_len, st, st == LARES_OK ? "paired" : serr.msg);
        return;
    }
    if (in.type == PAIR_ABORT) {
        s->stage = STAGE_NONE;
        char why[256];
        snprintf(why, sizeof why, "the head gave up: %.200s", in.text);
        refused(s, why);
        result(s, rid, rid_len, LARES_ECANCELED, "aborted");
        return;
    }
    s->stage = STAGE_NONE;
    result(s, rid, rid_len, LARES_EPROTO, "unexpected pairing message");
}

static void *service_run(void *arg) {
    disc_pair_service *s = arg;
    while (!atomic_load(&s->stop)) {
        zmq_pollitem_t items[] = {{s->zap, 0, ZMQ_POLLIN, 0}, {s->router, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, 200) <= 0) {
            continue;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            zap_answer(s);
        }
        if (items[1].revents & ZMQ_POLLIN) {
            zmq_msg_t id, body;
            zmq_msg_init(&id);
            zmq_msg_init(&body);
            if (zmq_msg_recv(&id, s->router, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&id) &&
                zmq_msg_recv(&body, s->router, ZMQ_DONTWAIT) >= 0 && !zmq_msg_more(&body) &&
                zmq_msg_size(&id) <= sizeof s->rid) {
                on_message(s, zmq_msg_data(&id), zmq_msg_size(&id), &body);
            } else {
                while (zmq_msg_more(&body) || zmq_msg_more(&id)) { /* drain a bad message */
                    zmq_msg_close(&body);
                    zmq_msg_init(&body);
                    if (zmq_msg_recv(&body, s->router, ZMQ_DONTWAIT) < 0) {
                        break;
                    }
                    zmq_msg_close(&id);
                    zmq_msg_init(&id);
                }
            }
            zmq_msg_close(&id);
            zmq_msg_close(&body);
        }
    }
    return NULL;
}

static void service_free(disc_pair_service *s) {
    if (s->router != NULL) {
        zmq_close(s->router);
    }
    if (s->zap != NULL) {
        zmq_close(s->zap);
    }
    if (s->zctx != NULL) {
        zmq_ctx_term(s->zctx);
    }
    lares_free(s);
}

lares_status disc_pair_service_start(const disc_pair_service_opts *o, disc_pair_service **out,
                                     lares_error *err) {
    if (!zmq_has("curve")) {
        return lares_fail(err, LARES_EUNSUPPORTED, "this libzmq has no CURVE: cannot pair");
    }
    disc_pair_service *s = lares_calloc(1, sizeof *s);
    if (s == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    s->o = *o;
    snprintf(s->name, sizeof s->name, "%s", o->name);
    atomic_init(&s->stop, false);
    lares_status st = LARES_OK;
    if (zmq_z85_decode(s->self_key, o->public_z85) == NULL) {
        st = lares_fail(err, LARES_EINVAL, "pairing: not a public key");
    }
    const int curve_server = 1;
    char ep[300];
    snprintf(ep, sizeof ep, "tcp://%s", o->listen);
    if (st == LARES_OK &&
        ((s->zctx = zmq_ctx_new()) == NULL || (s->zap = zmq_socket(s->zctx, ZMQ_REP)) == NULL ||
         zmq_bind(s->zap, "inproc://zeromq.zap.01") != 0 ||
         (s->router = zmq_socket(s->zctx, ZMQ_ROUTER)) == NULL)) {
        st = lares_fail(err, LARES_ENET, "pairing: %s", zmq_strerror(zmq_errno()));
    }
    if (st == LARES_OK) {
        curve_opts(s->router, 0, 0);
        if (zmq_setsockopt(s->router, ZMQ_CURVE_SERVER, &curve_server, sizeof curve_server) != 0 ||
            zmq_setsockopt(s->router, ZMQ_CURVE_SECRETKEY, o->secret_z85, DISC_KEY_Z85) != 0 ||
            zmq_setsockopt(s->router, ZMQ_ZAP_DOMAIN, "lares-pair", 10) != 0 ||
            zmq_bind(s->router, ep) != 0) {
            st = lares_fail(err, LARES_ENET, "pairing: cannot listen on %s: %s", o->listen,
                            zmq_strerror(zmq_errno()));
        }
    }
    if (st == LARES_OK) {
        char bound[300];
        size_t bl = sizeof bound;
        if (zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, bound, &bl) == 0) {
            const char *colon = strrchr(bound, ':');
            s->port = colon != NULL ? (uint16_t)atoi(colon + 1) : 0;
        }
        if (pthread_create(&s->thread, NULL, service_run, s) != 0) {
            st = lares_fail(err, LARES_ENOMEM, "pairing: cannot start a thread");
        }
    }
    if (st != LARES_OK) {
        service_free(s);
        return st;
    }
    *out = s;
    return LARES_OK;
}

uint16_t disc_pair_service_port(const disc_pair_service *s) {
    return s->port;
}

void disc_pair_service_stop(disc_pair_service *s) {
    if (s == NULL) {
        return;
    }
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    service_free(s);
}

/* ---- the head's side ---- */

/* a status from the wire: unknown values read as EPROTO */
static lares_status wire_status(uint32_t v) {
    return v > 0 && v < LARES_STATUS_COUNT ? (lares_status)v : LARES_EPROTO;
}

static lares_status send_msg(void *sock, const pair_msg *m, lares_error *err) {
    uint8_t buf[PAIR_MAX_MSG + 64];
    const size_t len = pair_encode(m, buf);
    if (zmq_send(sock, buf, len, 0) < 0) {
        return lares_fail(err, LARES_ENET, "pairing: send failed: %s", zmq_strerror(zmq_errno()));
    }
    return LARES_OK;
}

static lares_status recv_msg(void *sock, const disc_pair_request *r, pair_msg *m,
                             lares_error *err) {
    uint8_t buf[PAIR_MAX_MSG + 64];
    const int n = zmq_recv(sock, buf, sizeof buf, 0);
    if (n < 0) {
        return lares_fail(err, LARES_ENET,
                          "pairing: no answer from %s:%u within %u ms (the worker is gone, or "
                          "holds another key than the one it announced, so the encrypted "
                          "handshake fails)",
                          r->host, r->pair_port, r->timeout_ms);
    }
    if ((size_t)n > sizeof buf) {
        return lares_fail(err, LARES_EFORMAT, "pairing: an answer of %d bytes", n);
    }
    return pair_decode(buf, (size_t)n, m, err);
}

lares_status disc_pair_run(const disc_pair_request *r, lares_error *err) {
    if (!zmq_has("curve")) {
        return lares_fail(err, LARES_EUNSUPPORTED, "this libzmq has no CURVE: cannot pair");
    }
    uint8_t head_key[DISC_KEY_BYTES];
    char server_z85[DISC_KEY_Z85 + 1];
    if (zmq_z85_decode(head_key, r->public_z85) == NULL ||
        zmq_z85_encode(server_z85, r->worker_key, DISC_KEY_BYTES) == NULL) {
        return lares_fail(err, LARES_EINVAL, "pairing: not a key");
    }
    void *zctx = zmq_ctx_new();
    void *sock = zctx != NULL ? zmq_socket(zctx, ZMQ_DEALER) : NULL;
    lares_status st = LARES_OK;
    char ep[300];
    snprintf(ep, sizeof ep, "tcp://%s:%u", r->host, r->pair_port);
    if (sock == NULL) {
        st = lares_fail(err, LARES_ENET, "pairing: %s", zmq_strerror(zmq_errno()));
    } else {
        curve_opts(sock, 500, (int)r->timeout_ms);
        if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_z85, DISC_KEY_Z85) != 0 ||
            zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, r->public_z85, DISC_KEY_Z85) != 0 ||
            zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, r->secret_z85, DISC_KEY_Z85) != 0 ||
            zmq_connect(sock, ep) != 0) {
            st = lares_fail(err, LARES_ENET, "pairing: cannot connect to %s: %s", ep,
                            zmq_strerror(zmq_errno()));
        }
    }
    uint8_t nonce_h[DISC_NONCE_BYTES];
    disc_random(nonce_h, sizeof nonce_h);
    pair_msg m = {.type = PAIR_REQUEST}, in;
    disc_commit(nonce_h, m.bytes);
    snprintf(m.text, sizeof m.text, "%s", r->head_name);
    if (st == LARES_OK) {
        st = send_msg(sock, &m, err);
    }
    if (st == LARES_OK && (st = recv_msg(sock, r, &in, err)) == LARES_OK) {
        if (in.type == PAIR_RESULT) {
            st = lares_fail(err, wire_status(in.value),
                            "the worker refused: %s", in.text);
        } else if (in.type != PAIR_NONCE) {
            st = lares_fail(err, LARES_EPROTO, "pairing: unexpected answer (type %d)", in.type);
        }
    }
    uint32_t code = 0;
    if (st == LARES_OK) {
        code = disc_sas(head_key, r->worker_key, nonce_h, in.bytes);
        memset(&m, 0, sizeof m);
        m.type = PAIR_REVEAL;
        memcpy(m.bytes, nonce_h, sizeof nonce_h);
        st = send_msg(sock, &m, err);
    }
    uint32_t typed = 0;
    if (st == LARES_OK && !r->ask_code(r->user, &typed)) {
        memset(&m, 0, sizeof m);
        m.type = PAIR_ABORT;
        snprintf(m.text, sizeof m.text, "no code was entered");
        send_msg(sock, &m, NULL);
        st = lares_fail(err, LARES_ECANCELED, "pairing canceled: no code entered; nothing stored");
    }
    if (st == LARES_OK && typed != code) {
        memset(&m, 0, sizeof m);
        m.type = PAIR_ABORT;
        snprintf(m.text, sizeof m.text, "the code typed on the head was wrong");
        send_msg(sock, &m, NULL);
        recv_msg(sock, r, &in, NULL); /* its acknowledgement, so the abort arrives */
        st = lares_fail(err, LARES_EAUTH,
                        "the code %06u does not match this pairing's: a typo, or another "
                        "device answered in the worker's name; nothing was stored",
                        typed);
    }
    if (st == LARES_OK) {
        memset(&m, 0, sizeof m);
        m.type = PAIR_CONFIRM;
        m.value = code;
        st = send_msg(sock, &m, err);
    }
    if (st == LARES_OK && (st = recv_msg(sock, r, &in, err)) == LARES_OK) {
        if (in.type != PAIR_RESULT) {
            st = lares_fail(err, LARES_EPROTO, "pairing: unexpected answer (type %d)", in.type);
        } else if (in.value != 0) {
            st = lares_fail(err, wire_status(in.value), "the worker could not store the pairing: %s",
                            in.text);
        }
    }
    if (sock != NULL) {
        zmq_close(sock);
    }
    if (zctx != NULL) {
        zmq_ctx_term(zctx);
    }
    return st;
}
