/*
 * The head's side of a ring: one DEALER per worker of ring.json (CURVE
 * client, pinned to the worker's public key), a network thread that owns
 * them, and the calls the head's session makes between its own windows
 * (docs/ring.md).
 *
 * The network thread is head_io.c; this file is the caller's side.
 *
 * The plan in force uses a subset of ring.json's devices (its members, in
 * ring order, the head first). Each device has one state (cluster_dev_state),
 * changed only by set_state: a worker that does not answer at the start is
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

/* ---- the session's side ---- */

struct cluster_head {
    void *zctx;
    void *pipe; /* the session's end */
    pthread_t thread;
    bool thread_started;
    head_io io;
    int32_t n_cfg;                                /* devices of ring.json, the head first */
    cluster_ring_device dev[CLUSTER_MAX_DEVICES]; /* copied from the ring description */
    cluster_device_stats stats[CLUSTER_MAX_DEVICES];
    cluster_pass pass[CLUSTER_MAX_DEVICES];
    cluster_dev_state state[CLUSTER_MAX_DEVICES];
    char why[CLUSTER_MAX_DEVICES][CLUSTER_MAX_MSG + 1]; /* the last failure or refusal */
    bool has_profile[CLUSTER_MAX_DEVICES];              /* a WELCOME brought its profile */
    int32_t joined; /* devices that became usable since the last cluster_head_probe */
    uint64_t asked_ns[CLUSTER_MAX_DEVICES]; /* when a lost device was last asked back */
    int32_t member[CLUSTER_MAX_DEVICES]; /* plan index -> ring.json index */
    int32_t pos_of[CLUSTER_MAX_DEVICES]; /* ring.json index -> plan index, -1 none */
    bool opening; /* cluster_head_open: frames of joining devices are answered */
    cluster_plan plan;
    cluster_model_id model;
    int32_t n_layer, n_ctx, n_batch, n_embd;
    bool kv_f16;
    uint32_t kv_row_bytes;
    uint8_t act_dtype;
    uint32_t hb_ms, timeout_ms, connect_ms;
    bool failover;
    bool survey; /* cluster_head_opts.survey */
    uint32_t profile_ms;
    char head_name[CLUSTER_MAX_NAME + 1];
    uint64_t session;
    uint64_t next_seq, next_nonce;
    int32_t sent_pos0, sent_end;
    uint64_t sent_ns; /* when the batch in flight left (its time in the ring counts from here) */
    uint8_t head_key[CLUSTER_KEY_BYTES];
    uint8_t *buf; /* owned: one encoded frame */
    size_t buf_cap;
    cluster_frame *frame; /* owned: decoding scratch */
    bool broken;          /* without failover, a device failed: every call returns `failure` */
    lares_error failure;
    bool needs_plan; /* with failover, a member failed: calls return `failure` until set_plan */
    uint64_t wait_us, hops;
    void (*kv_mirror)(void *user, int32_t layer, int32_t pos0, int32_t n_pos, const uint8_t *k,
                      const uint8_t *v);
    void *kv_mirror_user;
};

/* filler of the bandwidth probes: a few hidden states' worth, small enough for
 * a slow link (256 KiB take 21 ms at 100 Mbit/s) */
#define PROBE_PING_BYTES CLUSTER_PROBE_PING_BYTES
#define PROBE_TRIES      3

static const char *dev_name(const cluster_head *h, int32_t d) {
    return d >= 0 && d < h->n_cfg ? h->dev[d].name : "?";
}

static const char *dev_addr(const cluster_head *h, int32_t d) {
    return d >= 0 && d < h->n_cfg ? (d == 0 ? "this device" : h->dev[d].address) : "?";
}

static lares_status usable(cluster_head *h, lares_error *err) {
    if (h->broken || h->needs_plan) {
        if (err != NULL) {
            *err = h->failure;
        }
        return h->failure.code;
    }
    return LARES_OK;
}

static const char *const state_names[] = {"joining", "serving", "left out",
                                          "suspect", "lost",    "rejoining"};

const char *cluster_dev_state_name(cluster_dev_state s) {
    return (unsigned)s < sizeof state_names / sizeof *state_names ? state_names[s] : "?";
}

/* The one place a device's state changes; each change is logged once. */
static void set_state(cluster_head *h, int32_t d, cluster_dev_state to, const char *why) {
    if (d < 1 || d >= h->n_cfg || h->state[d] == to) {
        return;
    }
    const cluster_dev_state from = h->state[d];
    h->state[d] = to;
    if (why != NULL && why[0] != '\0') {
        snprintf(h->why[d], sizeof h->why[d], "%s", why);
    }
    if (to == CLUSTER_DEV_LEFT_OUT && (from == CLUSTER_DEV_JOINING || from == CLUSTER_DEV_REJOINING)) {
        h->joined++;
    }
    /* a device that stays away is asked again every hello deadline: that
     * round trip is not news (debug), its coming back is */
    const bool retry = (from == CLUSTER_DEV_LOST && to == CLUSTER_DEV_REJOINING) ||
                       (from == CLUSTER_DEV_REJOINING && to == CLUSTER_DEV_LOST);
    lares_log(retry ? LARES_LOG_DEBUG : LARES_LOG_INFO, "cluster: %s (%s): %s -> %s%s%s",
              dev_name(h, d), dev_addr(h, d),
              cluster_dev_state_name(from), cluster_dev_state_name(to),
              why != NULL && why[0] != '\0' ? ": " : "", why != NULL ? why : "");
}

/* frames from this device must be answered: a member, or a joining device
 * while opening */
static bool critical(const cluster_head *h, int32_t d) {
    return d >= 1 && d < h->n_cfg &&
           ((h->opening && h->state[d] == CLUSTER_DEV_JOINING) || h->pos_of[d] >= 1);
}

/* A device that must work failed: without failover the head stays failed;
 * with it, the device is lost and the session has to re-plan. */
static lares_status device_failed(cluster_head *h, int32_t dev, uint32_t code, const char *msg,
                                  lares_error *err) {
    const lares_status st =
        code > 0 && code < LARES_STATUS_COUNT ? (lares_status)code : LARES_EPROTO;
    lares_error e;
    lares_fail(&e, st, "%s (%s): %s", dev_name(h, dev), dev_addr(h, dev), msg);
    if (err != NULL) {
        *err = e;
    }
    if (h->opening && (st == LARES_ENET || h->survey) && dev >= 1 && dev < h->n_cfg) {
        /* silent or gone at the start: the ring starts without it (a device
         * that says no, a key, a model file, busy, is an error) */
        set_state(h, dev, CLUSTER_DEV_LOST, msg);
        return st;
    }
    h->failure = e;
    if (h->failover && !h->opening && dev >= 1 && dev < h->n_cfg) {
        set_state(h, dev, CLUSTER_DEV_LOST, msg); /* in the plan in force until the re-plan */
        h->needs_plan = true;
    } else {
        h->broken = true;
    }
    return st;
}

/* a device that is not a member is gone: noted, nobody waits for it */
static void mark_out(cluster_head *h, int32_t d, const char *why) {
    set_state(h, d, CLUSTER_DEV_LOST, why);
}

static lares_status pipe_send(cluster_head *h, int32_t dev, size_t len, lares_error *err) {
    uint8_t d[4];
    wr_u32le(d, (uint32_t)dev);
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

/* the model a worker answered with must be the head's */
static bool welcome_fits(cluster_head *h, int32_t d, const cluster_welcome *w, char *why,
                         size_t cap) {
    if (w->model.file_bytes != h->model.file_bytes ||
        w->model.header_hash != h->model.header_hash) {
        snprintf(why, cap,
                 "its model file differs from the head's (%" PRIu64 " bytes, header hash "
                 "%016" PRIx64 " there; %" PRIu64 " bytes, %016" PRIx64 " here)",
                 w->model.file_bytes, w->model.header_hash, h->model.file_bytes,
                 h->model.header_hash);
        return false;
    }
    if ((int64_t)w->n_embd != h->n_embd || (int32_t)w->n_layer != h->n_layer) {
        snprintf(why, cap, "its model has %u layers of width %u, the head's %d of %d", w->n_layer,
                 w->n_embd, h->n_layer, h->n_embd);
        return false;
    }
    (void)d;
    return true;
}

/* A WELCOME from a device asked (back): usable when its model is the head's.
 * A re-hello of a device left out carries no profile; the first one's stays. */
static void welcomed(cluster_head *h, int32_t d, const cluster_welcome *w) {
    char why[512];
    if (!welcome_fits(h, d, w, why, sizeof why)) {
        lares_log(LARES_LOG_WARN, "cluster: %s (%s) answered but %s", dev_name(h, d),
                  dev_addr(h, d), why);
        set_state(h, d, CLUSTER_DEV_LOST, why);
        return;
    }
    if (w->profile[0] != '\0' || !h->has_profile[d]) {
        h->stats[d].welcome = *w;
        h->has_profile[d] = w->profile[0] != '\0';
    }
    set_state(h, d, CLUSTER_DEV_LEFT_OUT, NULL);
}

/* Waits up to wait_ms (< 0: as long as it takes) for a message on the pipe;
 * LARES_ECANCELED when cancel becomes true, LARES_ETIMEDOUT-like ENET when
 * the time is up (*timed_out set). */
static lares_status pipe_wait(cluster_head *h, int64_t wait_ms, uint64_t t0,
                              const _Atomic bool *cancel, bool *timed_out, lares_error *err) {
    *timed_out = false;
    for (;;) {
        zmq_pollitem_t it = {.socket = h->pipe, .events = ZMQ_POLLIN};
        long slice = 100;
        if (wait_ms >= 0) {
            const uint64_t spent_ms = (lares_now_ns() - t0) / 1000000u;
            if (spent_ms >= (uint64_t)wait_ms) {
                slice = 0;
            } else {
                slice = (long)LARES_MIN((uint64_t)slice, (uint64_t)wait_ms - spent_ms);
            }
        }
        if (zmq_poll(&it, 1, slice) < 0 && zmq_errno() != EINTR) {
            return lares_fail(err, LARES_ENET, "head: poll: %s", zmq_strerror(zmq_errno()));
        }
        if (it.revents & ZMQ_POLLIN) {
            return LARES_OK;
        }
        if (cancel != NULL && atomic_load_explicit(cancel, memory_order_relaxed)) {
            return LARES_ECANCELED;
        }
        if (wait_ms >= 0 && lares_now_ns() - t0 >= (uint64_t)wait_ms * 1000000u) {
            *timed_out = true;
            return LARES_OK;
        }
    }
}

/* Takes one message off the pipe into h->frame. *mine: it is for the caller
 * (frames of devices that are out are handled here: a probed device's
 * WELCOME, errors of devices nobody waits for). Errors of devices that must
 * work become a failure naming the device. */
/* A member's copy of KV entries it wrote: kept (by the caller's kv_mirror)
 * when the device holds the layer in the plan in force and the rows are of
 * this cache. Any session of the conversation: a re-plan changes the session,
 * not the entries (a truncation reaches the members after their earlier
 * frames, KV_DONE being their answer). A member lost since stays in the plan
 * in force until the re-plan: what it sent before is still good. */
static void take_mirror(cluster_head *h, int32_t dev, const cluster_kv_data *d) {
    const int32_t i = h->pos_of[dev];
    bool holds = false;
    for (int32_t k = 0; i >= 1 && k < cluster_plan_rounds(&h->plan); k++) {
        int32_t l0, l1;
        holds = holds || (cluster_plan_window(&h->plan, i, k, &l0, &l1) &&
                          (int64_t)d->layer >= l0 && (int64_t)d->layer < l1);
    }
    if (h->kv_mirror == NULL || !holds || d->row_bytes != h->kv_row_bytes ||
        d->kv_f16 != (h->kv_f16 ? 1 : 0) || (int64_t)d->pos0 + d->n_pos > h->n_ctx) {
        lares_log(LARES_LOG_DEBUG, "cluster: dropped kv mirror rows of layer %u from %s",
                  d->layer, dev_name(h, dev));
        return;
    }
    h->kv_mirror(h->kv_mirror_user, (int32_t)d->layer, d->pos0, (int32_t)d->n_pos, d->k, d->v);
}

static lares_status take_frame(cluster_head *h, int32_t *dev, bool *mine, lares_error *err) {
    *mine = false;
    zmq_msg_t d, f;
    zmq_msg_init(&d);
    zmq_msg_init(&f);
    lares_status st = LARES_OK;
    if (net_pipe_msg_recv(&d, h->pipe, 0) < 0 || zmq_msg_size(&d) != 4 || !zmq_msg_more(&d) ||
        net_pipe_msg_recv(&f, h->pipe, 0) < 0) {
        st = lares_fail(err, LARES_ENET, "head: in-process pipe: %s", zmq_strerror(zmq_errno()));
        goto done;
    }
    const uint32_t ud = rd_u32le(zmq_msg_data(&d));
    if (ud == 0 || ud >= (uint32_t)h->n_cfg) {
        goto done; /* cannot happen: the network thread names its devices */
    }
    *dev = (int32_t)ud;
    const bool must = critical(h, *dev);
    /* decoded arrays point into the bytes: keep them in buf */
    const size_t n = zmq_msg_size(&f);
    lares_error derr = {0};
    if (n > h->buf_cap) {
        if (must) {
            st = device_failed(h, *dev, LARES_EFORMAT, "sent a frame larger than any this ring uses",
                               err);
        }
        goto done;
    }
    memcpy(h->buf, zmq_msg_data(&f), n);
    lares_status dst = cluster_frame_decode(h->buf, n, h->frame, &derr);
    const cluster_frame *fr = h->frame;
    if (dst != LARES_OK || fr->type == CLUSTER_ERROR) {
        const uint32_t code = dst != LARES_OK ? (uint32_t)dst : fr->u.error.code;
        const char *msg = dst != LARES_OK ? derr.msg : fr->u.error.msg;
        if (must) {
            st = device_failed(h, *dev, code, msg, err);
        } else {
            mark_out(h, *dev, msg);
        }
        goto done;
    }
    if (fr->type == CLUSTER_KV_MIRROR) {
        take_mirror(h, *dev, &fr->u.kv_data);
        goto done;
    }
    if (fr->type == CLUSTER_HEARTBEAT) {
        /* the network thread's note on a device's silence (head_impl.h) */
        const cluster_dev_state now = h->state[*dev];
        if (fr->u.heartbeat > 0 && (now == CLUSTER_DEV_SERVING || now == CLUSTER_DEV_LEFT_OUT)) {
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %" PRIu64 " ms (timeout %u ms)",
                     fr->u.heartbeat, h->timeout_ms);
            set_state(h, *dev, CLUSTER_DEV_SUSPECT, why);
        } else if (fr->u.heartbeat == 0 && now == CLUSTER_DEV_SUSPECT) {
            set_state(h, *dev, h->pos_of[*dev] >= 1 ? CLUSTER_DEV_SERVING : CLUSTER_DEV_LEFT_OUT,
                      "heard again");
        }
        goto done;
    }
    if (fr->type == CLUSTER_PEER_LOST) {
        if (must && fr->session == h->session) {
            /* the neighbour it names is the one that failed (the head's own
             * heartbeats would tell the same a moment later) */
            const uint32_t p = fr->u.peer_lost.device;
            char msg[CLUSTER_MAX_MSG + 160];
            snprintf(msg, sizeof msg, "%s (reported by %s)", fr->u.peer_lost.msg,
                     dev_name(h, *dev));
            const int32_t blamed = p >= 1 && p < (uint32_t)h->plan.n_dev ? h->member[p] : *dev;
            st = device_failed(h, blamed, LARES_ENET, msg, err);
        }
        goto done;
    }
    if (!must && fr->type != CLUSTER_PONG) { /* a ping's answer is for whoever asked */
        if (fr->type == CLUSTER_WELCOME && (h->state[*dev] == CLUSTER_DEV_REJOINING ||
                                            h->state[*dev] == CLUSTER_DEV_JOINING ||
                                            h->state[*dev] == CLUSTER_DEV_LEFT_OUT)) {
            welcomed(h, *dev, &fr->u.welcome);
        }
        goto done;
    }
    *mine = true;
done:
    zmq_msg_close(&d);
    zmq_msg_close(&f);
    return st;
}

void cluster_head_drain(cluster_head *h) {
    for (;;) {
        bool timed_out = true, mine;
        int32_t dev;
        lares_error e = {0};
        if (pipe_wait(h, 0, lares_now_ns(), NULL, &timed_out, &e) != LARES_OK || timed_out) {
            return;
        }
        take_frame(h, &dev, &mine, &e); /* a failure is in the device's state */
    }
}

/* Waits for one frame for the caller (timeout_ms < 0: as long as the network
 * thread keeps the devices alive) and decodes it into h->frame. */
static lares_status pipe_recv(cluster_head *h, int64_t timeout_ms, int32_t *dev,
                              const _Atomic bool *cancel, lares_error *err) {
    const uint64_t t0 = lares_now_ns();
    for (;;) {
        bool timed_out;
        lares_status st = pipe_wait(h, timeout_ms, t0, cancel, &timed_out, err);
        if (st != LARES_OK) {
            return st;
        }
        if (timed_out) {
            return lares_fail(err, LARES_ENET, "no answer from the ring within %" PRId64 " ms",
                              timeout_ms);
        }
        bool mine;
        st = take_frame(h, dev, &mine, err);
        if (st != LARES_OK || mine) {
            return st;
        }
    }
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

/* Waits for one frame of `type` from each device in need[] (ring.json
 * indices) of the current session (WELCOME: of any). */
static lares_status collect(cluster_head *h, uint16_t type, bool *need, int64_t timeout_ms,
                            lares_error *err) {
    for (;;) {
        bool any = false;
        for (int32_t d = 1; d < h->n_cfg; d++) {
            any = any || need[d];
        }
        if (!any) {
            return LARES_OK;
        }
        int32_t dev = 0;
        lares_error perr = {0};
        lares_status st = pipe_recv(h, timeout_ms, &dev, NULL, &perr);
        if (st != LARES_OK) {
            if (st == LARES_ENET && !h->broken && !h->needs_plan) {
                /* no answer in time: blame the first one silent */
                for (int32_t d = 1; d < h->n_cfg; d++) {
                    if (need[d]) {
                        return device_failed(h, d, LARES_ENET, perr.msg, err);
                    }
                }
            }
            if (err != NULL) {
                *err = perr;
            }
            return st;
        }
        const cluster_frame *f = h->frame;
        if (f->type == type && need[dev] &&
            (type == CLUSTER_WELCOME || f->session == h->session)) {
            need[dev] = false;
            if (type == CLUSTER_WELCOME) {
                h->stats[dev].welcome = f->u.welcome;
            } else if (type == CLUSTER_READY) {
                h->stats[dev].hop_rtt_us = f->u.ready.rtt_us;
                h->stats[dev].hop_rtt_big_us = f->u.ready.rtt_big_us;
            }
        } else if (f->type != CLUSTER_ACT) {
            lares_log(LARES_LOG_DEBUG, "cluster: dropped a %s frame from %s while waiting for %s",
                      cluster_frame_type_name(f->type), dev_name(h, dev),
                      cluster_frame_type_name(type));
        }
    }
}

static size_t encode_hello(cluster_head *h, int32_t d) {
    cluster_hello hello = {.model = h->model,
                           .device = (uint32_t)d,
                           .n_devices = (uint32_t)h->n_cfg,
                           .heartbeat_ms = h->hb_ms,
                           .timeout_ms = h->timeout_ms,
                           /* a profile once: a device left out and asked again keeps it */
                           .flags = h->profile_ms > 0 && !h->has_profile[d]
                                        ? CLUSTER_HELLO_PROFILE
                                        : 0,
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
        lares_status st = pipe_send(h, d, encode_hello(h, d), err);
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
        lares_status st = pipe_wait(h, wait_ms, t0, NULL, &timed_out, err);
        if (st != LARES_OK) {
            return st;
        }
        if (timed_out) {
            for (int32_t d = 1; d < h->n_cfg; d++) {
                if (h->state[d] == CLUSTER_DEV_JOINING) {
                    set_state(h, d, CLUSTER_DEV_LOST, "no answer to hello");
                }
            }
            return LARES_OK;
        }
        int32_t dev = 0;
        bool mine = false;
        lares_error ferr = {0};
        st = take_frame(h, &dev, &mine, &ferr);
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
        if (!welcome_fits(h, dev, &f->u.welcome, why, sizeof why)) {
            const bool model = f->u.welcome.model.header_hash != h->model.header_hash ||
                               f->u.welcome.model.file_bytes != h->model.file_bytes;
            st = device_failed(h, dev, model ? LARES_EINVAL : LARES_EPROTO, why, err);
            if (h->broken) {
                return st;
            }
            continue; /* a survey goes on */
        }
        h->stats[dev].welcome = f->u.welcome;
        h->has_profile[dev] = f->u.welcome.profile[0] != '\0';
        set_state(h, dev, CLUSTER_DEV_LEFT_OUT, NULL);
    }
}

static lares_status check_members(const cluster_head *h, const cluster_plan *p,
                                  const int32_t *members, lares_error *err) {
    bool seen[CLUSTER_MAX_DEVICES] = {false};
    if (members[0] != 0) {
        return lares_fail(err, LARES_EINVAL, "plan: device 0 must be the head, not %d",
                          members[0]);
    }
    for (int32_t i = 0; i < p->n_dev; i++) {
        const int32_t d = members[i];
        if (d < 0 || d >= h->n_cfg || seen[d]) {
            return lares_fail(err, LARES_EINVAL, "plan: member %d is device %d (%d in the ring)",
                              i, d, h->n_cfg);
        }
        seen[d] = true;
        if (i > 0 && !cluster_head_usable(h, d)) {
            return lares_fail(err, LARES_EINVAL, "plan: %s (%s) is not in the ring now",
                              dev_name(h, d), dev_addr(h, d));
        }
    }
    return LARES_OK;
}

lares_status cluster_head_set_plan(cluster_head *h, const cluster_plan *p, const int32_t *members,
                                   uint32_t flags, lares_error *err) {
    if (h->broken) {
        return usable(h, err);
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
            return lares_fail(err, LARES_EINVAL, "plan for %d devices, the ring has %d",
                              p->n_dev, h->n_cfg);
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
    h->session = new_session_id();
    for (int32_t d = 1; d < h->n_cfg; d++) {
        if (h->pos_of[d] < 0 && was[d] >= 1 &&
            (h->state[d] == CLUSTER_DEV_SERVING || h->state[d] == CLUSTER_DEV_SUSPECT)) {
            /* it releases its windows (STOP) and is asked again at once, so
             * it stays welcomed and watched (heartbeats), ready for a later
             * plan: a PLAN sent to it follows the HELLO on the same connection */
            pipe_send(h, d,
                      cluster_encode_stop(h->buf, h->buf_cap, h->session, CLUSTER_STOP_LEFT_OUT),
                      NULL);
            if (pipe_send(h, d, encode_hello(h, d), NULL) == LARES_OK) {
                set_state(h, d, CLUSTER_DEV_LEFT_OUT, NULL);
            } else {
                set_state(h, d, CLUSTER_DEV_LOST, "left out of the new plan");
            }
        } else if (h->pos_of[d] >= 1 && h->state[d] != CLUSTER_DEV_SUSPECT) {
            set_state(h, d, CLUSTER_DEV_SERVING, NULL);
        }
    }
    cluster_plan_msg *msg = lares_calloc(1, sizeof *msg);
    if (msg == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    msg->n_ctx = (uint32_t)h->n_ctx;
    msg->n_batch = (uint32_t)h->n_batch;
    msg->n_embd = (uint32_t)h->n_embd;
    msg->act_dtype = h->act_dtype;
    msg->kv_f16 = h->kv_f16 ? 1 : 0;
    msg->flags = (uint16_t)flags;
    msg->ping_bytes = (flags & CLUSTER_PLAN_PROBE) ? PROBE_PING_BYTES : 0;
    msg->plan = *p;
    for (int32_t i = 0; i < p->n_dev; i++) {
        const int32_t d = members[i];
        memcpy(msg->keys[i], d == 0 ? h->head_key : h->dev[d].key, CLUSTER_KEY_BYTES);
        snprintf(msg->addr[i], sizeof msg->addr[i], "%s", h->dev[d].address);
        msg->link_delay_ms[i] = (uint32_t)h->dev[d].link_delay_ms;
    }
    /* from the last worker back: each worker's successor already knows the
     * plan (and so admits it) when the worker links to it */
    const int64_t wait_ms = (int64_t)h->connect_ms * 2 +
                            ((flags & CLUSTER_PLAN_PROBE) ? 4 * (int64_t)h->timeout_ms : 0);
    for (int32_t i = p->n_dev - 1; i >= 1 && st == LARES_OK; i--) {
        const int32_t d = members[i];
        msg->self = (uint32_t)i;
        msg->n_threads = (uint32_t)h->dev[d].n_threads;
        st = pipe_send(h, d, cluster_encode_plan(h->buf, h->buf_cap, h->session, msg), err);
        bool need[CLUSTER_MAX_DEVICES] = {false};
        need[d] = true;
        if (st == LARES_OK) {
            st = collect(h, CLUSTER_READY, need, wait_ms, err);
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
                pipe_send(h, d,
                          cluster_encode_stop(h->buf, h->buf_cap, h->session, CLUSTER_STOP_END),
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
    const size_t act_max = cluster_act_bytes((uint32_t)o->n_batch, (uint32_t)o->n_embd,
                                             rc->act_dtype, CLUSTER_MAX_TRACE);
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
        h->io.hello_ms = h->profile_ms > 0 ? h->connect_ms + 2000 + 2 * h->profile_ms
                                           : h->connect_ms;
        h->io.delay_ms = (uint32_t)rc->dev[0].link_delay_ms;
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

lares_status cluster_head_send(cluster_head *h, int32_t layer, int32_t end, const int32_t *pos,
                               int32_t n_tok, const float *x, uint64_t *seq, lares_error *err) {
    lares_status st = usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    if (h->plan.n_dev < 2 || n_tok < 1 || n_tok > h->n_batch || layer < 0 ||
        layer >= h->n_layer || end <= layer || end > h->n_layer) {
        return lares_fail(err, LARES_EINVAL,
                          "ring send: %d tokens at layer %d up to %d (batch %d, %d devices)", n_tok,
                          layer, end, h->n_batch, h->plan.n_dev);
    }
    const cluster_act a = {.seq = ++h->next_seq,
                           .layer = (uint32_t)layer,
                           .end = (uint32_t)end,
                           .n_tok = (uint32_t)n_tok,
                           .n_embd = (uint32_t)h->n_embd,
                           .dtype = h->act_dtype,
                           .n_trace = 0};
    const size_t n = cluster_encode_act(h->buf, h->buf_cap, h->session, &a, pos, NULL, x);
    /* the clock before the send: the first worker may run before this thread does again */
    const uint64_t t_send = lares_now_ns();
    st = pipe_send(h, h->member[1], n, err);
    if (st == LARES_OK) {
        h->sent_pos0 = pos[0];
        h->sent_end = end;
        h->sent_ns = t_send;
        *seq = a.seq;
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

static void count_trace(cluster_head *h, const cluster_act *a) {
    for (uint32_t i = 0; i < a->n_trace; i++) {
        cluster_trace t;
        cluster_act_trace_at(a, i, &t);
        if (t.device >= (uint32_t)h->plan.n_dev) {
            continue;
        }
        const int32_t d = h->member[t.device];
        int32_t l0 = 0, l1 = 0;
        cluster_plan_window(&h->plan, t.device, t.round, &l0, &l1);
        const int32_t layers = (l1 - l0) * (int32_t)a->n_tok;
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
        ps->layers += l1 - l0;
        ps->mem_free_mib = t.mem_free_mib;
    }
}

lares_status cluster_head_recv(cluster_head *h, uint64_t seq, int32_t n_tok, float *x,
                               int32_t *layer, const _Atomic bool *cancel, lares_error *err) {
    lares_status st = usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    for (;;) {
        int32_t dev = 0;
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
            continue; /* a batch abandoned earlier (a canceled generation, an old plan) */
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
        } else if (want_from < 0 || h->member[want_from] != dev ||
                   ((int32_t)a->layer != h->n_layer && (int32_t)a->layer < h->sent_end &&
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
            st = device_failed(h, dev, LARES_EPROTO, bad, err);
            break;
        }
        count_trace(h, a);
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
    lares_status st = usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    bool need[CLUSTER_MAX_DEVICES] = {false};
    const cluster_kv kv = {.op = pos == 0 ? CLUSTER_KV_CLEAR : CLUSTER_KV_TRUNCATE, .pos = pos};
    for (int32_t i = 1; i < h->plan.n_dev; i++) {
        const int32_t d = h->member[i];
        st = pipe_send(h, d, cluster_encode_kv(h->buf, h->buf_cap, h->session, CLUSTER_KV, &kv),
                       err);
        if (st != LARES_OK) {
            return st;
        }
        need[d] = true;
    }
    return collect(h, CLUSTER_KV_DONE, need, (int64_t)h->connect_ms, err);
}

static lares_status kv_args(cluster_head *h, int32_t dev, int32_t layer, int32_t pos0,
                            int32_t pos1, lares_error *err) {
    lares_status st = usable(h, err);
    if (st != LARES_OK) {
        return st;
    }
    if (dev < 1 || dev >= h->n_cfg || h->pos_of[dev] < 1 || layer < 0 || layer >= h->n_layer ||
        pos0 < 0 || pos1 <= pos0 || pos1 > h->n_ctx || h->kv_row_bytes == 0) {
        return lares_fail(err, LARES_EINVAL,
                          "kv transfer: device %d, layer %d, positions %d to %d (context %d)", dev,
                          layer, pos0, pos1, h->n_ctx);
    }
    return LARES_OK;
}

lares_status cluster_head_kv_get(cluster_head *h, int32_t dev, int32_t layer, int32_t pos0,
                                 int32_t pos1, uint8_t *k, uint8_t *v, lares_error *err) {
    lares_status st = kv_args(h, dev, layer, pos0, pos1, err);
    if (st != LARES_OK) {
        return st;
    }
    const cluster_kv_get g = {.layer = (uint32_t)layer, .pos0 = pos0, .pos1 = pos1};
    st = pipe_send(h, dev, cluster_encode_kv_get(h->buf, h->buf_cap, h->session, &g), err);
    int32_t next = pos0;
    const size_t row = h->kv_row_bytes;
    while (st == LARES_OK && next < pos1) {
        int32_t from = 0;
        st = pipe_recv(h, (int64_t)h->connect_ms * 4, &from, NULL, err);
        if (st != LARES_OK) {
            if (st == LARES_ENET && !h->broken && !h->needs_plan) {
                st = device_failed(h, dev, LARES_ENET, "no answer to a kv request", err);
            }
            break;
        }
        const cluster_frame *f = h->frame;
        if (from != dev || f->type != CLUSTER_KV_DATA || f->session != h->session) {
            continue; /* late frames of an earlier batch */
        }
        const cluster_kv_data *d = &f->u.kv_data;
        if ((int32_t)d->layer != layer || d->pos0 != next || d->row_bytes != row ||
            d->kv_f16 != (h->kv_f16 ? 1 : 0) || (int64_t)d->pos0 + d->n_pos > pos1) {
            char bad[200];
            snprintf(bad, sizeof bad,
                     "sent kv rows of layer %u from position %d (%u rows of %u bytes), "
                     "layer %d from %d (rows of %zu bytes) expected",
                     d->layer, d->pos0, d->n_pos, d->row_bytes, layer, next, row);
            st = device_failed(h, dev, LARES_EPROTO, bad, err);
            break;
        }
        const size_t off = (size_t)(d->pos0 - pos0) * row;
        memcpy(k + off, d->k, (size_t)d->n_pos * row);
        memcpy(v + off, d->v, (size_t)d->n_pos * row);
        next += (int32_t)d->n_pos;
    }
    return st;
}

lares_status cluster_head_kv_put(cluster_head *h, int32_t dev, int32_t layer, int32_t pos0,
                                 int32_t pos1, const uint8_t *k, const uint8_t *v,
                                 lares_error *err) {
    lares_status st = kv_args(h, dev, layer, pos0, pos1, err);
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
                                   .k = k + off,
                                   .v = v + off};
        st = pipe_send(h, dev, cluster_encode_kv_data(h->buf, h->buf_cap, h->session, &d), err);
        p += (int32_t)n;
    }
    bool need[CLUSTER_MAX_DEVICES] = {false};
    need[dev] = true;
    if (st == LARES_OK) {
        st = collect(h, CLUSTER_KV_DONE, need, (int64_t)h->connect_ms * 4, err);
    }
    return st;
}

lares_status cluster_head_ping(cluster_head *h, int32_t dev, uint32_t filler_bytes, int tries,
                               uint32_t *rtt_us, lares_error *err) {
    lares_status st = usable(h, err);
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
        st = pipe_send(h, dev,
                       cluster_encode_ping(h->buf, h->buf_cap, h->session, CLUSTER_PING, nonce,
                                           filler_bytes),
                       err);
        for (;;) {
            int32_t from = 0;
            if (st != LARES_OK ||
                (st = pipe_recv(h, (int64_t)h->timeout_ms, &from, NULL, err)) != LARES_OK) {
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
            pipe_send(h, d, encode_hello(h, d), NULL) == LARES_OK) {
            h->asked_ns[d] = now; /* a refusing device is not asked every batch */
            set_state(h, d, CLUSTER_DEV_REJOINING, NULL);
        }
        any = any || h->state[d] == CLUSTER_DEV_REJOINING;
    }
    /* what arrived meanwhile (WELCOMEs, errors of devices out of the plan) */
    const uint64_t t0 = lares_now_ns();
    for (;;) {
        bool timed_out = false;
        if (pipe_wait(h, any ? wait_ms : 0, t0, NULL, &timed_out, NULL) != LARES_OK || timed_out) {
            break;
        }
        int32_t dev = 0;
        bool mine = false;
        if (take_frame(h, &dev, &mine, NULL) != LARES_OK) {
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

void cluster_head_add_local(cluster_head *h, int32_t layers, int32_t n_tok, uint64_t compute_us,
                            uint64_t wait_us) {
    h->stats[0].windows++;
    h->stats[0].compute_us += compute_us;
    h->stats[0].wait_us += wait_us;
    h->stats[0].layers_run += (uint64_t)LARES_MAX(layers, 0) * (uint64_t)LARES_MAX(n_tok, 0);
    h->pass[0].compute_us += compute_us;
    h->pass[0].wait_us += wait_us;
    h->pass[0].layers += layers;
}

void cluster_head_take_pass(cluster_head *h, cluster_pass *out) {
    for (int32_t d = 0; d < h->n_cfg; d++) {
        out[d] = h->pass[d];
        h->pass[d] = (cluster_pass){.mem_free_mib = h->pass[d].mem_free_mib};
    }
}
