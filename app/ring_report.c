/* What the head of a ring reports after a run: per device, its layers and
 * measured compute, and the ring's waiting time beside it (docs/ring.md). */
#include "app.h"

#include <inttypes.h>
#include <jansson.h>

#define REPORT_MAX_DEVICES 64

struct json_t *app_ring_json(const lares_session *s) {
    lares_ring_stats rs;
    lares_ring_device dev[REPORT_MAX_DEVICES];
    if (lares_session_ring_stats(s, &rs, dev, REPORT_MAX_DEVICES, NULL) != LARES_OK) {
        return NULL;
    }
    json_t *root = json_object();
    json_object_set_new(root, "devices", json_integer(rs.n_devices));
    json_object_set_new(root, "rounds", json_integer(rs.rounds));
    json_object_set_new(root, "width", json_integer(rs.width));
    json_object_set_new(root, "hops", json_integer((json_int_t)rs.hops));
    json_object_set_new(root, "wait_ms", json_real(rs.wait_ms));
    json_object_set_new(root, "remote_compute_ms", json_real(rs.remote_ms));
    json_object_set_new(root, "replans", json_integer((json_int_t)rs.replans));
    json_object_set_new(root, "failovers", json_integer((json_int_t)rs.failovers));
    json_object_set_new(root, "switch_ms", json_real(rs.switch_ms));
    json_object_set_new(root, "last_switch_ms", json_real(rs.last_switch_ms));
    json_object_set_new(root, "rebuilt_tokens", json_integer((json_int_t)rs.rebuilt_tokens));
    json_object_set_new(root, "rebuild_passes", json_integer((json_int_t)rs.rebuild_passes));
    json_object_set_new(root, "kv_moved_bytes", json_integer((json_int_t)rs.kv_moved_bytes));
    json_object_set_new(root, "prepared_switches", json_integer((json_int_t)rs.prepared_switches));
    json_object_set_new(root, "waited_switches", json_integer((json_int_t)rs.waited_switches));
    json_object_set_new(root, "prepare_failures", json_integer((json_int_t)rs.prepare_failures));
    json_object_set_new(root, "fetch_tokens", json_integer((json_int_t)rs.fetch_tokens));
    json_object_set_new(root, "last_switch", json_string(rs.last_switch ? rs.last_switch : ""));
    json_object_set_new(root, "placement", json_string(rs.placement ? rs.placement : ""));
    if (rs.predicted_token_ms >= 0) {
        json_object_set_new(root, "predicted_token_ms", json_real(rs.predicted_token_ms));
    }
    json_t *arr = json_array();
    for (int32_t d = 0; d < rs.n_config && d < REPORT_MAX_DEVICES; d++) {
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(dev[d].name));
        json_object_set_new(o, "address", json_string(dev[d].address));
        json_object_set_new(o, "in_ring", json_boolean(dev[d].in_ring));
        json_object_set_new(o, "alive", json_boolean(dev[d].alive));
        json_object_set_new(o, "state", json_string(dev[d].state ? dev[d].state : "?"));
        json_object_set_new(o, "w", json_integer(dev[d].w));
        json_object_set_new(o, "n", json_integer(dev[d].n));
        json_object_set_new(o, "layers", json_integer(dev[d].n_layers));
        json_object_set_new(o, "windows_run", json_integer((json_int_t)dev[d].windows_run));
        json_object_set_new(o, "compute_ms", json_real(dev[d].compute_ms));
        json_object_set_new(o, "disk_wait_ms", json_real(dev[d].disk_wait_ms));
        json_object_set_new(o, "major_faults", json_integer((json_int_t)dev[d].major_faults));
        /* model bytes the head sent this worker (a worker without the file, issue 19) */
        json_object_set_new(o, "shipped_bytes", json_integer((json_int_t)dev[d].shipped_bytes));
        /* per layer per generated token: the planner's figure and the moving
         * estimate measured under the plan in force (null: none) */
        json_object_set_new(o, "predicted_ms",
                            dev[d].predicted_ms >= 0 ? json_real(dev[d].predicted_ms)
                                                     : json_null());
        json_object_set_new(o, "measured_ms",
                            dev[d].measured_ms >= 0 ? json_real(dev[d].measured_ms) : json_null());
        json_object_set_new(o, "predicted_token_ms",
                            dev[d].predicted_token_ms >= 0 ? json_real(dev[d].predicted_token_ms)
                                                           : json_null());
        json_object_set_new(o, "measured_token_ms",
                            dev[d].measured_ms >= 0
                                ? json_real(dev[d].measured_ms * dev[d].n_layers)
                                : json_null());
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "device", arr);
    return root;
}

void app_ring_print(const lares_session *s) {
    lares_ring_stats rs;
    lares_ring_device dev[REPORT_MAX_DEVICES];
    if (lares_session_ring_stats(s, &rs, dev, REPORT_MAX_DEVICES, NULL) != LARES_OK) {
        return;
    }
    fprintf(stderr, "lares: ring of %d devices, %d layers per round, k = %d, placement %s\n",
            rs.n_devices, rs.width, rs.rounds, rs.placement ? rs.placement : "?");
    for (int32_t d = 0; d < rs.n_config && d < REPORT_MAX_DEVICES; d++) {
        char state_text[32]; /* "(left out)", "(lost)", ... as the head last saw it */
        snprintf(state_text, sizeof state_text, "(%s)", dev[d].state ? dev[d].state : "?");
        fprintf(stderr,
                "lares:   %-12s %-22s w %-3d layers %-3d windows %-6" PRIu64
                " compute %9.1f ms  major faults %" PRIu64 "\n",
                dev[d].name,
                d == 0 ? "(head)" : dev[d].in_ring ? dev[d].address : state_text,
                dev[d].w, dev[d].n_layers, dev[d].windows_run, dev[d].compute_ms,
                dev[d].major_faults);
        if (dev[d].shipped_bytes > 0) {
            fprintf(stderr, "lares:   %-12s shipped %.1f MiB of the model to it\n", "",
                    (double)dev[d].shipped_bytes / 1048576.0);
        }
        if (dev[d].in_ring && (dev[d].predicted_ms >= 0 || dev[d].measured_ms >= 0)) {
            char pred[64] = "-", meas[64] = "-";
            if (dev[d].predicted_ms >= 0) {
                snprintf(pred, sizeof pred, "%.3f ms/token (%.4f per layer)",
                         dev[d].predicted_token_ms, dev[d].predicted_ms);
            }
            if (dev[d].measured_ms >= 0) {
                snprintf(meas, sizeof meas, "%.3f ms/token (%.4f per layer)",
                         dev[d].measured_ms * dev[d].n_layers, dev[d].measured_ms);
            }
            fprintf(stderr, "lares:   %-12s predicted %s, measured %s\n", "", pred, meas);
        }
    }
    if (rs.predicted_token_ms >= 0) {
        fprintf(stderr, "lares:   %s predicted %.3f ms per token for the whole ring\n",
                rs.placement, rs.predicted_token_ms);
    }
    const double net = rs.wait_ms - rs.remote_ms;
    fprintf(stderr,
            "lares:   waited %.1f ms for the ring: %.1f ms worker compute, %.1f ms "
            "network and queues (%.3f ms per hop over %" PRIu64 " hops)\n",
            rs.wait_ms, rs.remote_ms, net, rs.hops ? net / (double)rs.hops : 0.0, rs.hops);
    if (rs.replans > 0 || rs.failovers > 0) {
        fprintf(stderr,
                "lares:   %" PRIu64 " re-balancing re-plan(s), %" PRIu64 " failover(s), %.1f ms "
                "switching (%" PRIu64 " positions re-run in %" PRIu64 " passes); last: %s\n",
                rs.replans, rs.failovers, rs.switch_ms, rs.rebuilt_tokens, rs.rebuild_passes,
                rs.last_switch);
    }
    if (rs.prepared_switches > 0 || rs.waited_switches > 0 || rs.prepare_failures > 0) {
        fprintf(stderr,
                "lares:   new layers' weights: %" PRIu64 " switch(es) prepared in the background "
                "(%" PRIu64 " token(s) generated while fetching), %" PRIu64
                " waited for a fetch, %" PRIu64 " background fetch(es) failed\n",
                rs.prepared_switches, rs.fetch_tokens, rs.waited_switches, rs.prepare_failures);
    }
}
