/*
 * The head's end of the pipe to its network thread (head_impl.h): frames out
 * to a device, frames in and what they mean for the devices' states (one
 * state per device, changed only by head_set_state and logged once), the
 * KV copies members send (KV_MIRROR), and the waits for answers.
 */
#include "cluster/head_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

const char *head_dev_name(const cluster_head *h, int32_t d) {
    return d >= 0 && d < h->n_cfg ? h->dev[d].name : "?";
}

const char *head_dev_addr(const cluster_head *h, int32_t d) {
    return d >= 0 && d < h->n_cfg ? (d == 0 ? "this device" : h->dev[d].address) : "?";
}

lares_status head_usable(cluster_head *h, lares_error *err) {
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
void head_set_state(cluster_head *h, int32_t d, cluster_dev_state to, const char *why) {
    if (d < 1 || d >= h->n_cfg || h->state[d] == to) {
        return;
    }
    const cluster_dev_state from = h->state[d];
    h->state[d] = to;
    if (why != NULL && why[0] != '\0') {
        snprintf(h->why[d], sizeof h->why[d], "%s", why);
    }
    if (to == CLUSTER_DEV_LEFT_OUT &&
        (from == CLUSTER_DEV_JOINING || from == CLUSTER_DEV_REJOINING)) {
        h->joined++;
    }
    /* a device that stays away is asked again every hello deadline: that
     * round trip is not news (debug), its coming back is */
    const bool retry = (from == CLUSTER_DEV_LOST && to == CLUSTER_DEV_REJOINING) ||
                       (from == CLUSTER_DEV_REJOINING && to == CLUSTER_DEV_LOST);
    lares_log(retry ? LARES_LOG_DEBUG : LARES_LOG_INFO, "cluster: %s (%s): %s -> %s%s%s",
              head_dev_name(h, d), head_dev_addr(h, d), cluster_dev_state_name(from),
              cluster_dev_state_name(to), why != NULL && why[0] != '\0' ? ": " : "",
              why != NULL ? why : "");
}

/* frames from this device must be answered: a member, or a joining device
 * while opening */
static bool critical(const cluster_head *h, int32_t d) {
    return d >= 1 && d < h->n_cfg &&
           ((h->opening && h->state[d] == CLUSTER_DEV_JOINING) || h->pos_of[d] >= 1);
}

/* A device that must work failed: without failover the head stays failed;
 * with it, the device is lost and the session has to re-plan. */
lares_status head_device_failed(cluster_head *h, int32_t dev, uint32_t code, const char *msg,
                                lares_error *err) {
    const lares_status st =
        code > 0 && code < LARES_STATUS_COUNT ? (lares_status)code : LARES_EPROTO;
    lares_error e;
    lares_fail(&e, st, "%s (%s): %s", head_dev_name(h, dev), head_dev_addr(h, dev), msg);
    if (err != NULL) {
        *err = e;
    }
    if (h->opening && (st == LARES_ENET || h->survey) && dev >= 1 && dev < h->n_cfg) {
        /* silent or gone at the start: the ring starts without it (a device
         * that says no, a key, a model file, busy, is an error) */
        head_set_state(h, dev, CLUSTER_DEV_LOST, msg);
        return st;
    }
    h->failure = e;
    if (h->failover && !h->opening && dev >= 1 && dev < h->n_cfg) {
        head_set_state(h, dev, CLUSTER_DEV_LOST, msg); /* in the plan in force until the re-plan */
        h->needs_plan = true;
    } else {
        h->broken = true;
    }
    return st;
}

/* a device that is not a member is gone: noted, nobody waits for it */
static void mark_out(cluster_head *h, int32_t d, const char *why) {
    head_set_state(h, d, CLUSTER_DEV_LOST, why);
}

lares_status head_pipe_send(cluster_head *h, int32_t dev, size_t len, lares_error *err) {
    uint8_t d[4];
    wr_u32le(d, (uint32_t)dev);
    if (len == 0) {
        return lares_fail(err, LARES_EINVAL, "a frame for %s does not fit %zu bytes",
                          head_dev_name(h, dev), h->buf_cap);
    }
    if (net_pipe_send(h->pipe, d, 4, ZMQ_SNDMORE) < 0 ||
        net_pipe_send(h->pipe, h->buf, len, 0) < 0) {
        return lares_fail(err, LARES_ENET, "head: in-process pipe: %s", zmq_strerror(zmq_errno()));
    }
    return LARES_OK;
}

/* the model a worker answered with must be the head's */
bool head_welcome_fits(cluster_head *h, int32_t d, const cluster_welcome *w, char *why,
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
    if (!head_welcome_fits(h, d, w, why, sizeof why)) {
        lares_log(LARES_LOG_WARN, "cluster: %s (%s) answered but %s", head_dev_name(h, d),
                  head_dev_addr(h, d), why);
        head_set_state(h, d, CLUSTER_DEV_LOST, why);
        return;
    }
    if (w->profile[0] != '\0' || !h->has_profile[d]) {
        h->stats[d].welcome = *w;
        h->has_profile[d] = w->profile[0] != '\0';
    }
    head_set_state(h, d, CLUSTER_DEV_LEFT_OUT, NULL);
}

/* Waits up to wait_ms (< 0: as long as it takes) for a message on the pipe;
 * LARES_ECANCELED when cancel becomes true, LARES_ETIMEDOUT-like ENET when
 * the time is up (*timed_out set). */
lares_status head_pipe_wait(cluster_head *h, int64_t wait_ms, uint64_t t0,
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
        d->kv_f16 != (h->kv_f16 ? 1 : 0) || (int64_t)d->pos0 + d->n_pos > h->n_ctx ||
        d->slot >= h->n_slots) {
        lares_log(LARES_LOG_DEBUG, "cluster: dropped kv mirror rows of slot %u layer %u from %s",
                  d->slot, d->layer, head_dev_name(h, dev));
        return;
    }
    h->kv_mirror(h->kv_mirror_user, d->slot, (int32_t)d->layer, d->pos0, (int32_t)d->n_pos, d->k,
                 d->v);
}

lares_status head_take_frame(cluster_head *h, int32_t *dev, bool *mine, lares_error *err) {
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
            st = head_device_failed(h, *dev, LARES_EFORMAT,
                                    "sent a frame larger than any this ring uses", err);
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
            st = head_device_failed(h, *dev, code, msg, err);
        } else {
            mark_out(h, *dev, msg);
        }
        goto done;
    }
    if (fr->type == CLUSTER_KV_MIRROR) {
        take_mirror(h, *dev, &fr->u.kv_data);
        goto done;
    }
    if (fr->type == CLUSTER_TENSOR_GET) {
        /* the network thread's note: it ships weights to this device */
        h->ship_note = true;
        h->fetches[*dev] = true;
        goto done;
    }
    if (fr->type == CLUSTER_PREPARED) {
        head_prepared(h, *dev, fr->session, &fr->u.prepared);
        goto done;
    }
    if (fr->type == CLUSTER_HEARTBEAT) {
        /* the network thread's note on a device's silence (head_impl.h) */
        const cluster_dev_state now = h->state[*dev];
        if (fr->u.heartbeat > 0 && (now == CLUSTER_DEV_SERVING || now == CLUSTER_DEV_LEFT_OUT)) {
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %" PRIu64 " ms (timeout %u ms)",
                     fr->u.heartbeat, h->timeout_ms);
            head_set_state(h, *dev, CLUSTER_DEV_SUSPECT, why);
        } else if (fr->u.heartbeat == 0 && now == CLUSTER_DEV_SUSPECT) {
            head_set_state(h, *dev,
                           h->pos_of[*dev] >= 1 ? CLUSTER_DEV_SERVING : CLUSTER_DEV_LEFT_OUT,
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
                     head_dev_name(h, *dev));
            const int32_t blamed = p >= 1 && p < (uint32_t)h->plan.n_dev ? h->member[p] : *dev;
            st = head_device_failed(h, blamed, LARES_ENET, msg, err);
        }
        goto done;
    }
    if (!must && fr->type != CLUSTER_PONG) { /* a ping's answer is for whoever asked */
        if (fr->type == CLUSTER_WELCOME &&
            (h->state[*dev] == CLUSTER_DEV_REJOINING || h->state[*dev] == CLUSTER_DEV_JOINING ||
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
        if (head_pipe_wait(h, 0, lares_now_ns(), NULL, &timed_out, &e) != LARES_OK || timed_out) {
            return;
        }
        head_take_frame(h, &dev, &mine, &e); /* a failure is in the device's state */
    }
}

/* Waits for one frame for the caller (timeout_ms < 0: as long as the network
 * thread keeps the devices alive) and decodes it into h->frame. */
lares_status head_pipe_recv(cluster_head *h, int64_t timeout_ms, int32_t *dev,
                            const _Atomic bool *cancel, lares_error *err) {
    uint64_t t0 = lares_now_ns();
    for (;;) {
        bool timed_out;
        lares_status st = head_pipe_wait(h, timeout_ms, t0, cancel, &timed_out, err);
        if (st != LARES_OK) {
            return st;
        }
        if (timed_out) {
            return lares_fail(err, LARES_ENET, "no answer from the ring within %" PRId64 " ms",
                              timeout_ms);
        }
        bool mine;
        st = head_take_frame(h, dev, &mine, err);
        if (st != LARES_OK || mine) {
            return st;
        }
        if (h->ship_note) { /* a device is fetching weights: the wait counts from now */
            h->ship_note = false;
            t0 = lares_now_ns();
        }
    }
}

/* Waits for one frame of `type` from each device in need[] (ring.json
 * indices) of the current session (WELCOME: of any). */
lares_status head_collect(cluster_head *h, uint16_t type, bool *need, int64_t timeout_ms,
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
        lares_status st = head_pipe_recv(h, timeout_ms, &dev, NULL, &perr);
        if (st != LARES_OK) {
            if (st == LARES_ENET && !h->broken && !h->needs_plan) {
                /* no answer in time: blame the first one silent */
                for (int32_t d = 1; d < h->n_cfg; d++) {
                    if (need[d]) {
                        return head_device_failed(h, d, LARES_ENET, perr.msg, err);
                    }
                }
            }
            if (err != NULL) {
                *err = perr;
            }
            return st;
        }
        const cluster_frame *f = h->frame;
        if (f->type == type && need[dev] && (type == CLUSTER_WELCOME || f->session == h->session)) {
            need[dev] = false;
            if (type == CLUSTER_WELCOME) {
                h->stats[dev].welcome = f->u.welcome;
            } else if (type == CLUSTER_READY) {
                h->stats[dev].hop_rtt_us = f->u.ready.rtt_us;
                h->stats[dev].hop_rtt_big_us = f->u.ready.rtt_big_us;
            }
        } else if (f->type != CLUSTER_ACT) {
            lares_log(LARES_LOG_DEBUG, "cluster: dropped a %s frame from %s while waiting for %s",
                      cluster_frame_type_name(f->type), head_dev_name(h, dev),
                      cluster_frame_type_name(type));
        }
    }
}
