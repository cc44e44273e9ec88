/*
 * The head's side of fetching in the background (issue 19, docs/ring.md
 * "Fetching in the background"): PREPARE tells a worker without the model
 * file the plan the head means to put in force next; the worker fetches the
 * weights of its coming windows on a thread of its own while the ring goes on
 * generating under the plan in force, and answers PREPARED. The session
 * (api/ring_prepare.c) switches with cluster_head_set_plan once every worker
 * asked is ready; the PLAN then finds everything in the caches.
 *
 * The answers are taken in by every wait on the pipe (head_take_frame), so
 * no call here waits. Each prepare has a number of its own (the PREPARE's
 * session field): an answer to an older one is dropped.
 */
#include "cluster/head_impl.h"

bool cluster_head_fetches(const cluster_head *h, int32_t dev) {
    return dev >= 1 && dev < h->n_cfg && h->fetches[dev];
}

lares_status cluster_head_prepare(cluster_head *h, const cluster_plan *p, const int32_t *members,
                                  const bool *ask, lares_error *err) {
    lares_status st = head_usable(h, err);
    if (st == LARES_OK) {
        st = cluster_plan_check(p, err);
    }
    if (st != LARES_OK) {
        return st;
    }
    cluster_plan_msg *msg = lares_calloc(1, sizeof *msg);
    if (msg == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    uint32_t flags = CLUSTER_PLAN_KEEP_KV;
    if (h->kv_mirror != NULL) {
        flags |= CLUSTER_PLAN_MIRROR_KV;
    }
    head_plan_msg(h, p, members, flags, msg);
    h->prep_id = head_new_session_id();
    for (int32_t d = 0; d < h->n_cfg; d++) {
        h->prep[d] = CLUSTER_PREP_NONE;
        h->prep_fetched[d] = 0;
        h->prep_why[d][0] = '\0';
    }
    for (int32_t i = 1; i < p->n_dev && st == LARES_OK; i++) {
        const int32_t d = members[i];
        if (d < 1 || d >= h->n_cfg || !ask[d]) {
            continue;
        }
        msg->self = (uint32_t)i;
        msg->n_threads = (uint32_t)h->dev[d].n_threads;
        st = head_pipe_send(h, d, cluster_encode_prepare(h->buf, h->buf_cap, h->prep_id, msg),
                            err);
        h->prep[d] = st == LARES_OK ? CLUSTER_PREP_ASKED : CLUSTER_PREP_FAILED;
    }
    lares_free(msg);
    return st;
}

void head_prepared(cluster_head *h, int32_t dev, uint64_t session, const cluster_prepared *p) {
    if (h->prep_id == 0 || session != h->prep_id || h->prep[dev] != CLUSTER_PREP_ASKED) {
        lares_log(LARES_LOG_DEBUG, "cluster: dropped a late prepared answer from %s",
                  head_dev_name(h, dev));
        return;
    }
    h->prep[dev] = p->status == LARES_OK ? CLUSTER_PREP_READY : CLUSTER_PREP_FAILED;
    h->prep_fetched[dev] = p->fetched_bytes;
    snprintf(h->prep_why[dev], sizeof h->prep_why[dev], "%s", p->msg);
}

cluster_prep_state cluster_head_prep_state(const cluster_head *h, int32_t dev, uint64_t *fetched,
                                           const char **why) {
    if (dev < 0 || dev >= h->n_cfg) {
        return CLUSTER_PREP_NONE;
    }
    if (fetched != NULL) {
        *fetched = h->prep_fetched[dev];
    }
    if (why != NULL) {
        *why = h->prep_why[dev];
    }
    return h->prep[dev];
}

void cluster_head_prepare_off(cluster_head *h) {
    h->prep_id = 0;
    for (int32_t d = 0; d < h->n_cfg; d++) {
        h->prep[d] = CLUSTER_PREP_NONE;
    }
}
