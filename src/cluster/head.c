/*
 * The head's side of a ring: one DEALER per worker of ring.json (CURVE
 * client, pinned to the worker's public key), a network thread that owns
 * them, and the calls the head's session makes between its own windows
 * (docs/ring.md).
 *
 * The network thread is head_io.c; the caller's side is this file (opening,
 * plans, closing, asking lost devices back), head_pipe.c (the frames the
 * network thread passes on, and the devices' states) and head_batch.c (the
 * batches, KV transfers and pings of a session).
 *
 * The plan in force uses a subset of ring.json's devices (its members, in
 * ring order, the head first). Each device has one state (cluster_dev_state),
 * changed only by head_set_state (head_pipe.c): a worker that does not answer at the start is
 * lost and the ring starts without it; with failover a member that fails
 * becomes suspect instead of breaking the head, and the session re-plans over
 * the others (issue 9); devices the plan leaves out stay welcomed and
 * watched, so a later plan can take them at once; lost devices are asked
 * back by cluster_head_probe (issue 15).
 */
#include "cluster/head_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

uint64_t head_new_session_id(void) {
    static _Atomic uint64_t counter;
    uint64_t z = lares_now_ns() ^ ((uint64_t)getpid() << 40) ^
                 (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15u);
    /* splitmix64 finaliser: spreads the bits */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return z ? z : 1;
}

static size_t encode_hello(cluster_head *h, int32_t d) {
    cluster_hello hello = {.model = h->model,
                           .device = (uint32_t)d,
                           .n_devices = (uint32_t)h->n_cfg,
                           .heartbeat_ms = h->hb_ms,
                           .timeout_ms = h->timeout_ms,
                           /* a profile once: a device left out and asked again keeps it */
                           .flags =
                               (h->profile_ms > 0 && !h->has_profile[d] ? CLUSTER_HELLO_PROFILE
                                                                        : 0) |
                               (h->survey ? CLUSTER_HELLO_SURVEY : 0),
                           .profile_ms = h->profile_ms};
    snprintf(hello.model_path, sizeof hello.model_path, "%s", h->dev[d].model_path);
    snprintf(hello.head_name, sizeof hello.head_name, "%s", h->head_name);
    return cluster_encode_hello(h->buf, h->buf_cap, &hello);
}

/* The start: HELLO to every worker, then their WELCOMEs until each has
 * answered or failed, within the hello deadline. Silent, vanished or busy
 * workers are lost (the ring starts without them); a refusal or another
 * model file is an error. */
static lares_status hello_all(cluster_head *h, lares_error *err) {
    for (int32_t d = 1; d < h->n_cfg; d++) {
        lares_status st = head_pipe_send(h, d, encode_hello(h, d), err);
        if (st != LARES_OK) {
            return st;
        }
    }
    /* the network thread gives each HELLO up after io.hello_ms; this wait
     * only guards against a thread that could not say so */
    const int64_t wait_ms = (int64_t)h->io.hello_ms + 2000;
    const uint64_t t0 = lares_now_ns();
    for (;;) {
        bool waiting = false;
        for (int32_t d = 1; d < h->n_cfg; d++) {
            waiting = waiting || h->state[d] == CLUSTER_DEV_JOINING;
        }
        if (!waiting) {
            return LARES_OK;
        }
        bool timed_out = false;
        lares_status st = head_pipe_wait(h, wait_ms, t0, NULL, &timed_out, err);
        if (st != LARES_OK) {
            return st;
        }
        if (timed_out) {
            for (int32_t d = 1; d < h->n_cfg; d++) {
                if (h->state[d] == CLUSTER_DEV_JOINING) {
                    head_set_state(h, d, CLUSTER_DEV_LOST, "no answer to hello");
                }
            }
            return LARES_OK;
        }
        int32_t dev = 0;
        bool mine = false;
        lares_error ferr = {0};
        st = head_take_frame(h, &dev, &mine, &ferr);
        if (st != LARES_OK) {
            if (h->broken) {
                if (err != NULL) {
                    *err = ferr;
                }
                return st;
            }
            continue; /* that device is lost; the others may still answer */
        }
        const cluster_frame *f = h->frame;
        if (!mine || f->type != CLUSTER_WELCOME || h->state[dev] != CLUSTER_DEV_JOINING) {
            continue;
        }
        char why[512];
        if (!head_welcome_fits(h, dev, &f->u.welcome, why, sizeof why)) {
            const bool model = f->u.welcome.model.header_hash != h->model.header_hash ||
                               f->u.welcome.model.file_bytes != h->model.file_bytes;
            st = head_device_failed(h, dev, model ? LARES_EINVAL : LARES_EPROTO, why, err);
            if (h->broken) {
                return st;
            }
            continue; /* a survey goes on */
        }
        h->stats[dev].welcome = f->u.welcome;
        h->has_profile[dev] = f->u.welcome.profile[0] != '\0';
        head_set_state(h, dev, CLUSTER_DEV_LEFT_OUT, NULL);
    }
}

static lares_status check_members(const cluster_head *h, const cluster_plan *p,
                                  const int32_t *members, lares_error *err) {
    bool seen[CLUSTER_MAX_DEVICES] = {false};
    if (members[0] != 0) {
        return lares_fail(err, LARES_EINVAL, "plan: device 0 must be the head, not %d", members[0]);
    }
    for (int32_t i = 0; i < p->n_dev; i++) {
        const int32_t d = members[i];
        if (d < 0 || d >= h->n_cfg || seen[d]) {
            return lares_fail(err, LARES_EINVAL, "plan: member %d is device %d (%d in the ring)", i,
                              d, h->n_cfg);
        }
        seen[d] = true;
        if (i > 0 && !cluster_head_usable(h, d)) {
            return lares_fail(err, LARES_EINVAL, "plan: %s (%s) is not in the ring now",
                              head_dev_name(h, d), head_dev_addr(h, d));
        }
    }
    return LARES_OK;
}

void head_plan_msg(const cluster_head *h, const cluster_plan *p, const int32_t *members,
                   uint32_t flags, cluster_plan_msg *msg) {
    msg->n_ctx = (uint32_t)h->n_ctx;
    msg->n_batch = (uint32_t)h->n_batch;
    msg->n_embd = (uint32_t)h->n_embd;
    msg->act_dtype = h->act_dtype;
    msg->kv_f16 = h->kv_f16 ? 1 : 0;
    if (h->n_slots > 1 && !(flags & CLUSTER_PLAN_PROBE)) {
        flags |= CLUSTER_PLAN_SLOTS; /* a batch of several sequences (issue 20) */
    }
    msg->flags = (uint16_t)flags;
    msg->n_slots = (flags & CLUSTER_PLAN_SLOTS) ? h->n_slots : 1;
    msg->ping_bytes = (flags & CLUSTER_PLAN_PROBE) ? PROBE_PING_BYTES : 0;
    msg->plan = *p;
    for (int32_t i = 0; i < p->n_dev; i++) {
        const int32_t d = members[i];
        memcpy(msg->keys[i], d == 0 ? h->head_key : h->dev[d].key, CLUSTER_KEY_BYTES);
        snprintf(msg->addr[i], sizeof msg->addr[i], "%s", h->dev[d].address);
        msg->link_delay_ms[i] = (uint32_t)h->dev[d].link_delay_ms;
    }
}

lares_status cluster_head_set_plan(cluster_head *h, const cluster_plan *p, const int32_t *members,
                                   uint32_t flags, lares_error *err) {
    if (h->broken) {
        return head_usable(h, err);
    }
    lares_status st = cluster_plan_check(p, err);
    if (st != LARES_OK) {
        return st;
    }
    int32_t ident[CLUSTER_MAX_DEVICES];
    if (members == NULL) {
        for (int32_t i = 0; i < CLUSTER_MAX_DEVICES; i++) {
            ident[i] = i;
        }
        members = ident;
        if (p->n_dev != h->n_cfg) {
            return lares_fail(err, LARES_EINVAL, "plan for %d devices, the ring has %d", p->n_dev,
                              h->n_cfg);
        }
    }
    if (p->n_layer != h->n_layer) {
        return lares_fail(err, LARES_EINVAL, "plan for %d layers, the model has %d", p->n_layer,
                          h->n_layer);
    }
    if ((flags & ~CLUSTER_PLAN_FLAGS) != 0) {
        return lares_fail(err, LARES_EINVAL, "plan: unknown flags 0x%x", flags);
    }
    if (h->kv_mirror != NULL && !(flags & CLUSTER_PLAN_PROBE)) {
        flags |= CLUSTER_PLAN_MIRROR_KV;
    }
    if ((st = check_members(h, p, members, err)) != LARES_OK) {
        return st;
    }
    /* devices left out go first: they free their memory before others take more */
    int32_t was[CLUSTER_MAX_DEVICES];
    for (int32_t d = 0; d < h->n_cfg; d++) {
        was[d] = h->pos_of[d];
        h->pos_of[d] = -1;
    }
    for (int32_t i = 0; i < p->n_dev; i++) {
        h->member[i] = members[i];
        h->pos_of[members[i]] = i;
    }
    h->plan = *p;
    h->needs_plan = false;
    h->session = head_new_session_id();
    cluster_head_abandon(h); /* what is in flight belongs to the old session */
    for (int32_t d = 1; d < h->n_cfg; d++) {
        if (h->pos_of[d] < 0 && was[d] >= 1 &&
            (h->state[d] == CLUSTER_DEV_SERVING || h->state[d] == CLUSTER_DEV_SUSPECT)) {
            /* it releases its windows (STOP) and is asked again at once, so
             * it stays welcomed and watched (heartbeats), ready for a later
             * plan: a PLAN sent to it follows the HELLO on the same connection */
            head_pipe_send(
                h, d, cluster_encode_stop(h->buf, h->buf_cap, h->session, CLUSTER_STOP_LEFT_OUT),
                NULL);
            if (head_pipe_send(h, d, encode_hello(h, d), NULL) == LARES_OK) {
                head_set_state(h, d, CLUSTER_DEV_LEFT_OUT, NULL);
            } else {
                head_set_state(h, d, CLUSTER_DEV_LOST, "left out of the new plan");
            }
        } else if (h->pos_of[d] >= 1 && h->state[d] != CLUSTER_DEV_SUSPECT) {
            head_set_state(h, d, CLUSTER_DEV_SERVING, NULL);
        }
    }
    cluster_plan_msg *msg = lares_calloc(1, sizeof *msg);
    if (msg == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    head_plan_msg(h, p, members, flags, msg);
    /* from the last worker back: each worker's successor already knows the
     * plan (and so admits it) when the worker links to it */
    const int64_t wait_ms = (int64_t)h->connect_ms * 2 +
                            ((flags & CLUSTER_PLAN_PROBE) ? 4 * (int64_t)h->timeout_ms : 0);
    for (int32_t i = p->n_dev - 1; i >= 1 && st == LARES_OK; i--) {
        const int32_t d = members[i];
        msg->self = (uint32_t)i;
        msg->n_threads = (uint32_t)h->dev[d].n_threads;
        st = head_pipe_send(h, d, cluster_encode_plan(h->buf, h->buf_cap, h->session, msg), err);
        bool need[CLUSTER_MAX_DEVICES] = {false};
        need[d] = true;
        if (st == LARES_OK) {
            st = head_collect(h, CLUSTER_READY, need, wait_ms, err);
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
        for (int32_t d = 1; d < h->n_cfg; d++) {
            if (h->state[d] != CLUSTER_DEV_LOST) {
                head_pipe_send(
                    h, d, cluster_encode_stop(h->buf, h->buf_cap, h->session, CLUSTER_STOP_END),
                    NULL);
            }
        }
        uint8_t q[4];
        wr_u32le(q, PIPE_TO_IO);
        net_pipe_send(h->pipe, q, 4, ZMQ_SNDMORE);
        net_pipe_send(h->pipe, q, 4, 0);
        pthread_join(h->thread, NULL);
    } else {
        for (int32_t d = 1; d < h->n_cfg; d++) {
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
    head_ship_free(&h->io);
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
    if (rc->n_dev < 1 || rc->n_dev > CLUSTER_MAX_DEVICES || o->n_layer < 1) {
        return lares_fail(err, LARES_EINVAL, "ring of %d devices, model of %d layers", rc->n_dev,
                          o->n_layer);
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
    /* room for a run table as long as the batch (a batch of several sequences) */
    const size_t act_max =
        cluster_act_bytes_runs((uint32_t)o->n_batch, (uint32_t)o->n_embd, rc->act_dtype,
                               CLUSTER_MAX_TRACE, (uint32_t)o->n_batch);
    const size_t kv_min = cluster_kv_data_bytes(1, o->kv_row_bytes);
    if (o->n_batch < 1 || o->n_embd < 1 || o->n_ctx < o->n_batch || act_max == 0 ||
        (o->kv_row_bytes > 0 && kv_min == 0)) {
        return lares_fail(err, LARES_EINVAL,
                          "ring: a batch of %d x %d values does not fit a frame "
                          "of %u bytes (lower the batch size)",
                          o->n_batch, o->n_embd, CLUSTER_MAX_FRAME);
    }
    cluster_head *h = lares_calloc(1, sizeof *h);
    if (h == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    h->n_cfg = rc->n_dev;
    h->hop_us = -1;
    memcpy(h->dev, rc->dev, sizeof h->dev);
    h->model = o->model;
    h->n_layer = o->n_layer;
    h->n_ctx = o->n_ctx;
    h->n_batch = o->n_batch;
    h->n_embd = o->n_embd;
    h->kv_f16 = o->kv_f16;
    h->kv_row_bytes = o->kv_row_bytes;
    h->act_dtype = rc->act_dtype;
    h->hb_ms = (uint32_t)rc->heartbeat_ms;
    h->timeout_ms = (uint32_t)rc->timeout_ms;
    h->connect_ms = (uint32_t)rc->connect_timeout_ms;
    h->failover = o->failover;
    h->survey = o->survey;
    h->kv_mirror = o->kv_mirror;
    h->kv_mirror_user = o->kv_mirror_user;
    h->profile_ms = LARES_MIN(o->profile_ms, (uint32_t)CLUSTER_MAX_PROFILE_MS);
    snprintf(h->head_name, sizeof h->head_name, "%s", o->head_name ? o->head_name : "head");
    for (int32_t d = 0; d < CLUSTER_MAX_DEVICES; d++) {
        h->pos_of[d] = -1;
        h->stats[d].mem_free_mib = UINT32_MAX;
        h->pass[d].mem_free_mib = UINT32_MAX;
    }
    h->member[0] = 0;
    h->pos_of[0] = 0;
    h->state[0] = CLUSTER_DEV_SERVING;
    h->plan = (cluster_plan){.n_layer = o->n_layer, .n_dev = 1, .w = {o->n_layer}};
    h->n_slots = 1;
    if (o->key != NULL && !o->insecure) {
        memcpy(h->head_key, o->key->public_key, CLUSTER_KEY_BYTES);
    }
    h->buf_cap = LARES_MAX(LARES_MAX(act_max, kv_min), (size_t)PROBE_PING_BYTES + 4096);
    h->buf = lares_alloc(h->buf_cap);
    h->frame = lares_calloc(1, sizeof *h->frame);
    if (h->buf == NULL || h->frame == NULL) {
        cluster_head_close(h);
        return lares_fail(err, LARES_ENOMEM, "out of memory for the ring buffers");
    }
    if (h->n_cfg == 1) { /* a ring of the head alone: nothing to connect */
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
    lares_status st = net_socket(h->zctx, ZMQ_PAIR, &h->pipe, err);
    if (st == LARES_OK) {
        st = net_socket(h->zctx, ZMQ_PAIR, &h->io.pipe, err);
    }
    if (st == LARES_OK && (zmq_bind(h->pipe, ep) != 0 || zmq_connect(h->io.pipe, ep) != 0)) {
        st = lares_fail(err, LARES_ENET, "head pipe: %s", zmq_strerror(zmq_errno()));
    }
    for (int32_t d = 1; d < h->n_cfg && st == LARES_OK; d++) {
        st = connect_worker(h, d, o->key, o->insecure, err);
    }
    if (st == LARES_OK) {
        h->io.n_dev = h->n_cfg;
        h->io.hb_ms = h->hb_ms;
        h->io.timeout_ms = h->timeout_ms;
        h->io.connect_ms = h->connect_ms;
        h->io.hello_ms =
            h->profile_ms > 0 ? h->connect_ms + 2000 + 2 * h->profile_ms : h->connect_ms;
        h->io.delay_ms = (uint32_t)rc->dev[0].link_delay_ms;
        st = head_ship_init(&h->io, o->ship, err);
    }
    if (st == LARES_OK) {
        if (net_thread_start(&h->thread, head_io_main, &h->io) != 0) {
            st = lares_fail(err, LARES_ENOMEM, "cannot start the head's network thread");
        } else {
            h->thread_started = true;
        }
    }
    if (st == LARES_OK) {
        h->opening = true;
        st = hello_all(h, err);
        h->opening = false;
        h->joined = 0;
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

int32_t cluster_head_member(const cluster_head *h, int32_t i) {
    return i >= 0 && i < h->plan.n_dev ? h->member[i] : -1;
}

int32_t cluster_head_n_config(const cluster_head *h) {
    return h->n_cfg;
}

cluster_dev_state cluster_head_state(const cluster_head *h, int32_t dev) {
    return dev >= 0 && dev < h->n_cfg ? h->state[dev] : CLUSTER_DEV_LOST;
}

bool cluster_head_usable(const cluster_head *h, int32_t dev) {
    const cluster_dev_state st = cluster_head_state(h, dev);
    return st == CLUSTER_DEV_SERVING || st == CLUSTER_DEV_LEFT_OUT;
}

const char *cluster_head_why(const cluster_head *h, int32_t dev) {
    return dev >= 0 && dev < h->n_cfg ? h->why[dev] : "";
}

bool cluster_head_needs_plan(const cluster_head *h) {
    return h->needs_plan;
}

const cluster_device_stats *cluster_head_device(const cluster_head *h, int32_t dev) {
    return dev >= 0 && dev < h->n_cfg ? &h->stats[dev] : NULL;
}

const cluster_ring_device *cluster_head_ring_device(const cluster_head *h, int32_t dev) {
    return dev >= 0 && dev < h->n_cfg ? &h->dev[dev] : NULL;
}

uint64_t cluster_head_wait_us(const cluster_head *h) {
    return h->wait_us;
}

uint64_t cluster_head_hops(const cluster_head *h) {
    return h->hops;
}

double cluster_head_hop_ms(const cluster_head *h) {
    return h->hop_us < 0 ? -1 : h->hop_us / 1e3;
}

int32_t cluster_head_probe(cluster_head *h, uint32_t wait_ms) {
    if (h->broken || h->n_cfg < 2) {
        return 0;
    }
    bool any = false;
    for (int32_t d = 1; d < h->n_cfg; d++) {
        /* a device asked before and still silent is given up by the network
         * thread after the hello deadline (an ERROR: lost), then asked again */
        const uint64_t now = lares_now_ns();
        if (h->state[d] == CLUSTER_DEV_LOST &&
            now - h->asked_ns[d] >= (uint64_t)h->io.hello_ms * 1000000u &&
            head_pipe_send(h, d, encode_hello(h, d), NULL) == LARES_OK) {
            h->asked_ns[d] = now; /* a refusing device is not asked every batch */
            head_set_state(h, d, CLUSTER_DEV_REJOINING, NULL);
        }
        any = any || h->state[d] == CLUSTER_DEV_REJOINING;
    }
    /* what arrived meanwhile (WELCOMEs, errors of devices out of the plan) */
    const uint64_t t0 = lares_now_ns();
    for (;;) {
        bool timed_out = false;
        if (head_pipe_wait(h, any ? wait_ms : 0, t0, NULL, &timed_out, NULL) != LARES_OK ||
            timed_out) {
            break;
        }
        int32_t dev = 0;
        bool mine = false;
        if (head_take_frame(h, &dev, &mine, NULL) != LARES_OK) {
            break;
        }
        any = false;
        for (int32_t d = 1; d < h->n_cfg; d++) {
            any = any || h->state[d] == CLUSTER_DEV_REJOINING;
        }
    }
    const int32_t n = h->joined;
    h->joined = 0;
    return n;
}

bool cluster_head_probe_due(const cluster_head *h) {
    if (h->broken || h->n_cfg < 2) {
        return false;
    }
    const uint64_t now = lares_now_ns();
    for (int32_t d = 1; d < h->n_cfg; d++) {
        if (h->state[d] == CLUSTER_DEV_LOST &&
            now - h->asked_ns[d] >= (uint64_t)h->io.hello_ms * 1000000u) {
            return true;
        }
    }
    return h->joined > 0;
}

uint64_t cluster_head_shipped(const cluster_head *h, int32_t dev) {
    if (dev < 1 || dev >= h->n_cfg) {
        return 0;
    }
    return atomic_load(&((cluster_head *)h)->io.shipped[dev]);
}
