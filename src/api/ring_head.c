/*
 * The head's ring path (docs/ring.md): the session embeds, runs its own
 * windows through its executor, sends the hidden states around the ring
 * between them, and takes the output once the last layer is done. The plan
 * lives in the cluster head, so a new one (issues 7, 9) only has to reach
 * cluster_head_set_plan and the executor's windows.
 */
#include "api/ring.h"

#include <unistd.h>

struct api_ring {
    cluster_ring_config *rc; /* owned */
    cluster_head *head;      /* owned */
    exec_window *windows;    /* owned: the head's windows in cycle order */
    int32_t n_windows;
    int32_t synced; /* positions the workers hold KV entries for */
};

void api_ring_free(api_ring *r) {
    if (r == NULL) {
        return;
    }
    cluster_head_close(r->head);
    lares_free(r->rc);
    lares_free(r->windows);
    lares_free(r);
}

/* the head's windows, round by round, for its executor */
static lares_status head_windows(api_ring *r, const cluster_plan *p, lares_error *err) {
    const int32_t rounds = cluster_plan_rounds(p);
    r->windows = lares_calloc((size_t)rounds + 1, sizeof *r->windows);
    if (r->windows == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (int32_t k = 0; k < rounds; k++) {
        int32_t l0, l1;
        if (cluster_plan_window(p, 0, k, &l0, &l1)) {
            r->windows[r->n_windows++] = (exec_window){l0, l1};
        }
    }
    if (r->n_windows == 0) {
        /* A head holding no layers: exec has no "no layers" (n_windows 0 means
         * "the KV cache's layers"), so it gets layer 0, which it never runs; a
         * streaming executor reads it ahead and releases it unused. */
        r->windows[r->n_windows++] = (exec_window){0, 1};
    }
    return LARES_OK;
}

lares_status api_ring_open(lares_session *s, exec_opts *eo, lares_error *err) {
    const model *m = s->lm->m;
    const bool insecure = s->o.ring_insecure;
    api_ring *r = lares_calloc(1, sizeof *r);
    if (r == NULL || (r->rc = lares_calloc(1, sizeof *r->rc)) == NULL) {
        lares_free(r);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    cluster_plan plan;
    cluster_keypair key;
    lares_status st = cluster_ring_load(s->o.ring, r->rc, err);
    if (st == LARES_OK) {
        st = cluster_ring_plan(r->rc, m->hp.n_layer, &plan, err);
    }
    if (st == LARES_OK && insecure) {
        lares_log(LARES_LOG_WARN,
                  "cluster: --insecure: this ring runs without encryption or keys; "
                  "anyone on the network can read its hidden states or pose as a worker");
    } else if (st == LARES_OK && r->rc->head_key_path[0] == '\0') {
        st = lares_fail(err, LARES_EAUTH,
                        "%s: the head (device 0) needs \"key\": its key pair "
                        "file (lares keygen -o head.key), or run with --insecure",
                        s->o.ring);
    } else if (st == LARES_OK) {
        st = cluster_key_read(r->rc->head_key_path, &key, err);
    }
    if (st == LARES_OK) {
        st = head_windows(r, &plan, err);
    }
    if (st == LARES_OK) {
        char host[CLUSTER_MAX_NAME + 1] = "head";
        if (gethostname(host, sizeof host) != 0) {
            snprintf(host, sizeof host, "head");
        }
        host[sizeof host - 1] = '\0';
        const cluster_head_opts ho = {
            .ring = r->rc,
            .plan = plan,
            .model = {gguf_file_bytes(s->lm->file), gguf_header_hash(s->lm->file)},
            .n_ctx = s->o.n_ctx,
            .n_batch = s->o.n_batch,
            .n_embd = m->hp.n_embd,
            .kv_f16 = s->o.kv_type == LARES_KV_F16,
            .key = insecure ? NULL : &key,
            .insecure = insecure,
            .head_name = host};
        st = cluster_head_open(&ho, &r->head, err);
    }
    if (st != LARES_OK) {
        api_ring_free(r);
        return st;
    }
    char desc[256];
    cluster_plan_describe(&plan, desc, sizeof desc);
    lares_log(LARES_LOG_INFO, "cluster: ring of %d devices ready: %s", plan.n_dev, desc);
    eo->windows = r->windows;
    eo->n_windows = r->n_windows;
    s->ring = r;
    return LARES_OK;
}

lares_status api_ring_forward(lares_session *s, int32_t nb, lares_error *err) {
    api_ring *r = s->ring;
    const cluster_plan *p = cluster_head_plan(r->head);
    const int32_t n_layer = p->n_layer;
    lares_status st = LARES_OK;
    if (s->pos[0] < r->synced && p->n_dev > 1) {
        /* a shorter context than the workers hold (a new prompt, a truncate) */
        st = cluster_head_truncate(r->head, s->pos[0], err);
        if (st != LARES_OK) {
            return st;
        }
        r->synced = s->pos[0];
    }
    int32_t layer = 0;
    while (layer < n_layer) {
        int32_t dev, round, l0, l1;
        if (cluster_plan_owner(p, layer, &dev, &round) && dev == 0) {
            cluster_plan_window(p, 0, round, &l0, &l1);
            const uint64_t t0 = lares_now_ns();
            st = exec_local_forward(s->exec, l0, l1, s->pos, nb, s->x, err);
            cluster_head_add_local(r->head, (lares_now_ns() - t0) / 1000u);
            if (st != LARES_OK) {
                return st;
            }
            layer = l1;
            if (layer == n_layer) {
                break;
            }
        }
        uint64_t seq;
        st = cluster_head_send(r->head, layer, s->pos, nb, s->x, &seq, err);
        if (st == LARES_OK) {
            st = cluster_head_recv(r->head, seq, nb, s->x, &layer, &s->cancel, err);
        }
        if (st != LARES_OK) {
            return st;
        }
    }
    if (s->pos[nb - 1] + 1 > r->synced) {
        r->synced = s->pos[nb - 1] + 1;
    }
    return LARES_OK;
}

lares_status lares_session_ring_stats(const lares_session *s, lares_ring_stats *out,
                                      lares_ring_device *devices, int32_t cap, lares_error *err) {
    if (s->ring == NULL) {
        return lares_fail(err, LARES_EINVAL, "this session runs on one device, not a ring");
    }
    const cluster_head *h = s->ring->head;
    const cluster_plan *p = cluster_head_plan(h);
    memset(out, 0, sizeof *out);
    out->n_devices = p->n_dev;
    out->rounds = cluster_plan_rounds(p);
    out->width = cluster_plan_width(p);
    out->hops = cluster_head_hops(h);
    out->wait_ms = (double)cluster_head_wait_us(h) / 1e3;
    for (int32_t d = 0; d < p->n_dev; d++) {
        const cluster_device_stats *ds = cluster_head_device(h, d);
        if (d > 0) {
            out->remote_ms += (double)ds->compute_us / 1e3;
        }
        if (devices != NULL && d < cap) {
            const cluster_ring_device *rd = cluster_head_ring_device(h, d);
            devices[d] = (lares_ring_device){.name = rd->name,
                                             .address = rd->address,
                                             .w = p->w[d],
                                             .n = p->n[d],
                                             .n_layers = cluster_plan_layers_of(p, d),
                                             .windows_run = ds->windows,
                                             .compute_ms = (double)ds->compute_us / 1e3,
                                             .major_faults = ds->major_faults};
        }
    }
    return LARES_OK;
}
