/*
 * lares ring status (issue 15): which devices of ring.json would serve a head
 * now. A survey is the start of a ring without its plan: HELLO to every
 * worker, the answers until the hello deadline, then STOP to those that
 * welcomed it. Refusals are answers here, not errors (cluster_head_opts
 * survey); a worker busy with another head refuses and keeps serving it.
 * Each device that answered is pinged over the head's connection (the link's
 * round trip), and ring.json's windows give its layers.
 */
#include "api/ring.h"
#include "api/ring_fetch.h"

lares_status lares_ring_survey(lares_model *m, const char *ring, bool insecure,
                               lares_ring_probe *out, int32_t cap, int32_t *n, lares_error *err) {
    if (m == NULL || m->m == NULL || ring == NULL || out == NULL || n == NULL || cap < 1) {
        return lares_fail(err, LARES_EINVAL,
                          "ring survey: a model, ring.json and room for "
                          "the devices are needed");
    }
    cluster_ring_config *rc = lares_calloc(1, sizeof *rc);
    if (rc == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    cluster_keypair key;
    lares_status st = cluster_ring_load(ring, rc, err);
    if (st == LARES_OK && !insecure && rc->head_key_path[0] == '\0') {
        st = lares_fail(err, LARES_EAUTH, "%s: the head (device 0) needs \"key\" (or --insecure)",
                        ring);
    } else if (st == LARES_OK && !insecure) {
        st = cluster_key_read(rc->head_key_path, &key, err);
    }
    cluster_head *h = NULL;
    if (st == LARES_OK) {
        /* a worker without the model file takes the header from the surveying head */
        uint64_t *ship_off = NULL, *ship_bytes = NULL;
        cluster_ship_source ship = {0};
        const bool ships = ring_ship_source(m->file, &ship, &ship_off, &ship_bytes, NULL) == LARES_OK;
        const cluster_head_opts ho = {
            .ship = ships ? &ship : NULL,
            .ring = rc,
            .model = {gguf_file_bytes(m->file), gguf_header_hash(m->file)},
            .n_layer = m->m->hp.n_layer,
            .n_ctx = 1,
            .n_batch = 1,
            .n_embd = (int32_t)m->m->hp.n_embd,
            .key = insecure ? NULL : &key,
            .insecure = insecure,
            .head_name = "lares ring status",
            .survey = true};
        st = cluster_head_open(&ho, &h, err);
        lares_free(ship_off);
        lares_free(ship_bytes);
    }
    cluster_plan plan = {0};
    const bool windows = st == LARES_OK && !rc->auto_windows &&
                         cluster_ring_plan(rc, m->m->hp.n_layer, &plan, NULL) == LARES_OK;
    if (st == LARES_OK) {
        *n = LARES_MIN(rc->n_dev, cap);
        for (int32_t d = 0; d < *n; d++) {
            lares_ring_probe *p = &out[d];
            memset(p, 0, sizeof *p);
            snprintf(p->name, sizeof p->name, "%s", rc->dev[d].name);
            snprintf(p->address, sizeof p->address, "%s", d == 0 ? "" : rc->dev[d].address);
            p->ready = d == 0 || cluster_head_usable(h, d);
            snprintf(p->why, sizeof p->why, "%s", p->ready ? "" : cluster_head_why(h, d));
            const cluster_device_stats *ds = cluster_head_device(h, d);
            p->rtt_ms = -1;
            uint32_t rtt_us = 0;
            if (d > 0 && p->ready) {
                p->n_cpu = ds->welcome.n_cpu;
                p->mem_available_bytes = ds->welcome.mem_available_bytes;
                if (cluster_head_ping(h, d, 0, 3, &rtt_us, NULL) == LARES_OK) {
                    p->rtt_ms = rtt_us / 1e3;
                }
            }
            p->w = windows ? plan.w[d] : -1;
            p->layers = windows ? cluster_plan_layers_of(&plan, d) : -1;
            p->rounds = windows ? cluster_plan_rounds(&plan) : -1;
        }
    }
    cluster_head_close(h); /* STOP to those that welcomed it */
    lares_free(rc);
    return st;
}
