/*
 * The worker's prepare thread (issue 19, docs/ring.md "Fetching in the
 * background"): the head announces the plan it means to put in force next
 * (PREPARE, a PLAN's body) and this thread makes the weights of the coming
 * windows present through cluster_compute.prepare, over a ship link of its
 * own, while the compute thread goes on serving the plan in force. It
 * answers PREPARED (ready, or why not); the head switches only then, so the
 * PLAN that follows finds everything in the cache.
 *
 * The network thread owns the routing: it passes a PREPARE here, sends the
 * TENSOR_DATA answers here while a prepare runs, and calls a prepare off
 * (WC_CANCEL) when a plan comes first or the head goes.
 */
#include "cluster/cluster_impl.h"

#include <pthread.h>

struct worker_prepare {
    void *pipe;
    cluster_ship_link ship;
    pthread_t thread;
    cluster_compute cc;
    cluster_frame *frame; /* owned: decoding scratch */
    uint8_t small[512];
};

static void answer(worker_prepare *wp, uint64_t session, const cluster_prepared *p) {
    const size_t n = cluster_encode_prepared(wp->small, sizeof wp->small, session, p);
    if (n > 0) {
        uint8_t cmd[WC_CMD_BYTES] = {WC_TO_HEAD};
        net_pipe_send(wp->pipe, cmd, sizeof cmd, ZMQ_SNDMORE);
        net_pipe_send(wp->pipe, wp->small, n, 0);
    }
}

static void on_prepare(worker_prepare *wp, uint64_t session, const cluster_plan_msg *p) {
    cluster_prepared out = {0};
    lares_error err = {0};
    lares_status st = LARES_OK;
    if (wp->cc.prepare != NULL) { /* else the worker reads its own file: nothing to fetch */
        st = wp->cc.prepare(wp->cc.user, p, &wp->ship, &out.fetched_bytes, &err);
    }
    ship_link_close(&wp->ship);
    if (st == LARES_ECANCELED) {
        return; /* called off: nobody waits for the answer */
    }
    out.status = (uint32_t)st;
    snprintf(out.msg, sizeof out.msg, "%s", st == LARES_OK ? "" : err.msg);
    answer(wp, session, &out);
}

static void *prepare_main(void *arg) {
    worker_prepare *wp = arg;
    while (!wp->ship.quit) {
        zmq_msg_t cmd, frame;
        zmq_msg_init(&cmd);
        zmq_msg_init(&frame);
        if (net_pipe_msg_recv(&cmd, wp->pipe, 0) < 0 ||
            (zmq_msg_more(&cmd) && net_pipe_msg_recv(&frame, wp->pipe, 0) < 0)) {
            zmq_msg_close(&cmd);
            zmq_msg_close(&frame);
            break;
        }
        const uint8_t op =
            zmq_msg_size(&cmd) == WC_CMD_BYTES ? ((const uint8_t *)zmq_msg_data(&cmd))[0] : WC_QUIT;
        lares_error err = {0};
        if (op == WC_QUIT) {
            wp->ship.quit = true;
        } else if (op == WC_FRAME &&
                   cluster_frame_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), wp->frame,
                                        &err) == LARES_OK &&
                   wp->frame->type == CLUSTER_PREPARE) {
            on_prepare(wp, wp->frame->session, &wp->frame->u.prepare);
        }
        /* else: a cancel with nothing running, or a late answer of a
         * transfer called off: dropped */
        zmq_msg_close(&cmd);
        zmq_msg_close(&frame);
    }
    ship_link_close(&wp->ship);
    zmq_close(wp->pipe);
    wp->pipe = NULL;
    return NULL;
}

lares_status worker_prepare_start(void *zctx, const char *pipe_ep, const cluster_compute *cc,
                                  worker_prepare **out, lares_error *err) {
    worker_prepare *wp = lares_calloc(1, sizeof *wp);
    if (wp == NULL || (wp->frame = lares_calloc(1, sizeof *wp->frame)) == NULL ||
        (wp->ship.frame = lares_calloc(1, sizeof *wp->ship.frame)) == NULL) {
        if (wp != NULL) {
            lares_free(wp->frame);
        }
        lares_free(wp);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    wp->cc = *cc;
    lares_status st = net_socket(zctx, ZMQ_PAIR, &wp->pipe, err);
    if (st == LARES_OK && zmq_connect(wp->pipe, pipe_ep) != 0) {
        st = lares_fail(err, LARES_ENET, "worker prepare pipe: %s", zmq_strerror(zmq_errno()));
    }
    wp->ship.pipe = wp->pipe;
    if (st == LARES_OK && net_thread_start(&wp->thread, prepare_main, wp) != 0) {
        st = lares_fail(err, LARES_ENOMEM, "cannot start the prepare thread");
    }
    if (st != LARES_OK) {
        if (wp->pipe != NULL) {
            zmq_close(wp->pipe);
        }
        lares_free(wp->frame);
        lares_free(wp->ship.frame);
        lares_free(wp);
        return st;
    }
    *out = wp;
    return LARES_OK;
}

void worker_prepare_join(worker_prepare *wp) {
    if (wp == NULL) {
        return;
    }
    pthread_join(wp->thread, NULL);
    lares_free(wp->frame);
    lares_free(wp->ship.frame);
    lares_free(wp);
}
