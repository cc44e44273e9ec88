/*
 * The ring's state for people (issue 15, docs/ring.md "Watching a ring"): a
 * JSON picture of lares_session_ring_stats and the plan in force, made on the
 * session's thread (after the first plan and after every batch: a few KB of
 * JSON, tens of microseconds against milliseconds a token), read from any
 * thread: lares serve's /v1/ring and its /ring page. With a state path it is
 * also written to a file for other processes (lares ring status), at most
 * once a second unless the plan changed, replaced whole (a new file renamed
 * over the old, so a reader never sees half of one).
 */
#include "api/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define STATE_EVERY_NS 1000000000u

/* a figure, or null when unknown (< 0) */
static json_t *num_or_null(double v) {
    return v >= 0 ? json_real(v) : json_null();
}

/* the windows [l0, l1) of plan device i, round by round */
static json_t *windows_of(const cluster_plan *p, int32_t i) {
    json_t *a = json_array();
    for (int32_t k = 0; i >= 0 && k < cluster_plan_rounds(p); k++) {
        int32_t l0, l1;
        if (cluster_plan_window(p, i, k, &l0, &l1)) {
            json_t *w = json_array();
            json_array_append_new(w, json_integer(l0));
            json_array_append_new(w, json_integer(l1));
            json_array_append_new(a, w);
        }
    }
    return a;
}

static json_t *view_json(lares_session *s) {
    api_ring *r = s->ring;
    lares_ring_stats st;
    lares_ring_device dev[CLUSTER_MAX_DEVICES];
    lares_error err = {0};
    if (lares_session_ring_stats(s, &st, dev, CLUSTER_MAX_DEVICES, &err) != LARES_OK) {
        return NULL;
    }
    const cluster_plan *p = cluster_head_plan(r->head);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    json_t *o = json_object();
    json_object_set_new(o, "updated_unix_ms",
                        json_integer((json_int_t)now.tv_sec * 1000 + now.tv_nsec / 1000000));
    json_object_set_new(o, "n_layer", json_integer(p->n_layer));
    json_object_set_new(o, "devices_in_plan", json_integer(st.n_devices));
    json_object_set_new(o, "n_config", json_integer(st.n_config));
    json_object_set_new(o, "rounds", json_integer(st.rounds));
    json_object_set_new(o, "width", json_integer(st.width));
    json_object_set_new(o, "placement", json_string(st.placement));
    json_object_set_new(o, "predicted_token_ms", num_or_null(st.predicted_token_ms));
    json_object_set_new(o, "rebalance", json_boolean(r->rebalance));
    json_object_set_new(o, "failover", json_boolean(r->failover));
    json_object_set_new(o, "kv_mirror", json_boolean(r->mirror));
    json_object_set_new(o, "replans", json_integer((json_int_t)st.replans));
    json_object_set_new(o, "failovers", json_integer((json_int_t)st.failovers));
    json_object_set_new(o, "switch_ms", json_real(st.switch_ms));
    json_object_set_new(o, "last_switch_ms", json_real(st.last_switch_ms));
    json_object_set_new(o, "last_switch", json_string(st.last_switch));
    json_object_set_new(o, "rebuilt_tokens", json_integer((json_int_t)st.rebuilt_tokens));
    json_object_set_new(o, "rebuild_passes", json_integer((json_int_t)st.rebuild_passes));
    json_object_set_new(o, "kv_moved_bytes", json_integer((json_int_t)st.kv_moved_bytes));
    json_object_set_new(o, "prepared_switches", json_integer((json_int_t)st.prepared_switches));
    json_object_set_new(o, "waited_switches", json_integer((json_int_t)st.waited_switches));
    json_object_set_new(o, "prepare_failures", json_integer((json_int_t)st.prepare_failures));
    json_object_set_new(o, "fetch_tokens", json_integer((json_int_t)st.fetch_tokens));
    json_object_set_new(o, "preparing", json_boolean(r->pending.on));
    json_object_set_new(o, "hops", json_integer((json_int_t)st.hops));
    json_object_set_new(o, "wait_ms", json_real(st.wait_ms));
    json_object_set_new(o, "hop_ms", num_or_null(cluster_head_hop_ms(r->head)));
    json_object_set_new(o, "positions", json_integer(r->slots[0].synced));
    /* a batch over the ring (issue 20): its KV slots, and the most batches
     * that were in the ring at once (> 1: its groups were pipelined) */
    json_object_set_new(o, "kv_slots", json_integer(st.kv_slots));
    json_object_set_new(o, "max_in_flight", json_integer(st.max_in_flight));
    json_object_set_new(o, "head_pid", json_integer((json_int_t)getpid()));
    json_t *devs = json_array();
    for (int32_t d = 0; d < st.n_config; d++) {
        const lares_ring_device *v = &dev[d];
        int32_t i = -1;
        for (int32_t k = 0; k < p->n_dev; k++) {
            i = cluster_head_member(r->head, k) == d ? k : i;
        }
        const cluster_device_stats *ds = cluster_head_device(r->head, d);
        json_t *j = json_object();
        json_object_set_new(j, "name", json_string(v->name));
        json_object_set_new(j, "address", json_string(v->address));
        json_object_set_new(j, "state", json_string(v->state));
        json_object_set_new(j, "in_ring", json_boolean(v->in_ring));
        json_object_set_new(j, "alive", json_boolean(v->alive));
        json_object_set_new(j, "w", json_integer(v->w));
        json_object_set_new(j, "layers", json_integer(v->n_layers));
        json_object_set_new(j, "windows", windows_of(p, i));
        json_object_set_new(j, "windows_run", json_integer((json_int_t)v->windows_run));
        json_object_set_new(j, "compute_ms", json_real(v->compute_ms));
        json_object_set_new(j, "disk_wait_ms", json_real(v->disk_wait_ms));
        json_object_set_new(j, "major_faults", json_integer((json_int_t)v->major_faults));
        json_object_set_new(j, "shipped_bytes", json_integer((json_int_t)v->shipped_bytes));
        json_object_set_new(j, "mem_free_mib",
                            v->mem_free_mib == UINT32_MAX ? json_null()
                                                          : json_integer(v->mem_free_mib));
        json_object_set_new(j, "measured_ms", num_or_null(v->measured_ms));
        json_object_set_new(j, "predicted_ms", num_or_null(v->predicted_ms));
        json_object_set_new(j, "measured_token_ms",
                            num_or_null(v->measured_ms >= 0 && v->n_layers > 0
                                            ? v->measured_ms * v->n_layers
                                            : -1));
        json_object_set_new(j, "predicted_token_ms", num_or_null(v->predicted_token_ms));
        json_object_set_new(j, "hop_rtt_ms",
                            num_or_null(ds->hop_rtt_us > 0 ? ds->hop_rtt_us / 1e3 : -1));
        json_object_set_new(j, "why", json_string(d > 0 ? cluster_head_why(r->head, d) : ""));
        json_array_append_new(devs, j);
    }
    json_object_set_new(o, "devices", devs);
    return o;
}

/* The picture into the state file; a failure is logged once and the ring
 * goes on (the file is a window onto it, not part of it). */
static void write_state(api_ring *r, const char *text) {
    const uint64_t now = lares_now_ns();
    const uint64_t changes = atomic_load(&r->replans) + atomic_load(&r->failovers);
    if (r->state_path == NULL ||
        (r->state_written_ns != 0 && now - r->state_written_ns < STATE_EVERY_NS &&
         changes == r->state_changes)) {
        return;
    }
    r->state_written_ns = now;
    r->state_changes = changes;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%.4000s.%ld.new", r->state_path, (long)getpid());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const size_t n = strlen(text);
    bool ok = fd >= 0 && write(fd, text, n) == (ssize_t)n;
    ok = fd >= 0 && close(fd) == 0 && ok;
    ok = ok && rename(tmp, r->state_path) == 0;
    if (!ok) {
        unlink(tmp);
        lares_log(LARES_LOG_WARN, "ring: cannot write its state to %s: %s (lares ring status "
                                  "will not see this head)",
                  r->state_path, strerror(errno));
        lares_free(r->state_path);
        r->state_path = NULL;
    }
}

void ring_view_update(lares_session *s) {
    api_ring *r = s->ring;
    json_t *o = view_json(s);
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text == NULL) {
        return; /* out of memory: the last picture stays */
    }
    write_state(r, text);
    pthread_mutex_lock(&r->view_mu);
    char *old = r->view;
    r->view = text;
    pthread_mutex_unlock(&r->view_mu);
    free(old); /* jansson's allocation */
}

char *lares_session_ring_json(const lares_session *s) {
    if (s == NULL || s->ring == NULL) {
        return NULL;
    }
    api_ring *r = s->ring;
    char *out = NULL;
    pthread_mutex_lock(&r->view_mu);
    if (r->view != NULL) {
        const size_t n = strlen(r->view) + 1;
        if ((out = lares_alloc(n)) != NULL) {
            memcpy(out, r->view, n);
        }
    }
    pthread_mutex_unlock(&r->view_mu);
    return out;
}
