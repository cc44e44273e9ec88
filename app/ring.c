/* lares ring status: which devices of ring.json would serve a head now
 * (issue 15, docs/ring.md), and the figures of a head running that ring on
 * this machine (plan in force, measured and predicted times, disk waits,
 * failovers): the picture that head keeps in its state file
 * (app_ring_state_path), the one serve's /v1/ring shows. */
#include "app.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <string.h>

#define STATUS_MAX_DEVICES 64

static void ring_usage(FILE *to) {
    fputs("usage: lares ring status --ring RING.json -m MODEL [--insecure]\n"
          "  asks every worker of RING.json, as a head would, whether it would serve MODEL now,\n"
          "  lets it go, and prints a table: device, address, state (ready: reachable, the same\n"
          "  model file, idle; down: why not), its window, layers and rounds under RING.json's\n"
          "  windows, cores and memory budget it reported, the round trip of a ping to it.\n"
          "  A worker busy with another head refuses and keeps serving it. When a head on this\n"
          "  machine runs RING.json now (lares run, chat or serve --ring), its figures follow:\n"
          "  each device's state, layers and rounds in the plan in force, measured vs predicted\n"
          "  ms per token, free memory, disk wait, hop round trip; failovers, re-plans and the\n"
          "  last plan change (the same as serve's GET /v1/ring and its page /ring).\n",
          to);
}

/* a string of the picture, or "-" */
static const char *str_of(const json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v != NULL ? v : "-";
}

/* a figure of the picture, or "-" when it is null */
static void fig(const json_t *o, const char *key, const char *fmt, char *buf, size_t cap) {
    const json_t *v = json_object_get(o, key);
    if (json_is_number(v)) {
        snprintf(buf, cap, fmt, json_number_value(v));
    } else {
        snprintf(buf, cap, "-");
    }
}

/* The head running this ring on this machine, from its state file: true
 * when one runs (its figures printed). */
static bool print_running(const char *ring) {
    char path[1200];
    if (!app_ring_state_path(ring, path, sizeof path)) {
        return false;
    }
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    const json_int_t pid = json_integer_value(json_object_get(o, "head_pid"));
    if (o == NULL || pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM)) {
        printf("no head on this machine runs this ring now (its figures appear here while lares "
               "run, chat or serve --ring runs it)\n");
        json_decref(o);
        return false;
    }
    char pred[32], hop[32];
    fig(o, "predicted_token_ms", "%.1f", pred, sizeof pred);
    fig(o, "hop_ms", "%.2f", hop, sizeof hop);
    printf("\nrunning: head pid %" JSON_INTEGER_FORMAT ", placement %s, %" JSON_INTEGER_FORMAT
           " of %" JSON_INTEGER_FORMAT " devices in the plan, k=%" JSON_INTEGER_FORMAT
           ", %" JSON_INTEGER_FORMAT " positions; predicted %s ms per token; hop %s ms\n",
           pid, str_of(o, "placement"),
           json_integer_value(json_object_get(o, "devices_in_plan")),
           json_integer_value(json_object_get(o, "n_config")),
           json_integer_value(json_object_get(o, "rounds")),
           json_integer_value(json_object_get(o, "positions")), pred, hop);
    printf("failovers %" JSON_INTEGER_FORMAT ", re-plans %" JSON_INTEGER_FORMAT
           ", positions re-run %" JSON_INTEGER_FORMAT "; last plan change: %s\n",
           json_integer_value(json_object_get(o, "failovers")),
           json_integer_value(json_object_get(o, "replans")),
           json_integer_value(json_object_get(o, "rebuilt_tokens")),
           json_string_length(json_object_get(o, "last_switch")) > 0
               ? json_string_value(json_object_get(o, "last_switch"))
               : "none");
    printf("%-12s %-10s %6s %7s %12s %12s %9s %10s %8s  %s\n", "device", "state", "layers",
           "windows", "measured ms", "predicted ms", "free MiB", "disk ms", "rtt ms", "why");
    const json_t *devs = json_object_get(o, "devices");
    for (size_t i = 0; i < json_array_size(devs); i++) {
        const json_t *d = json_array_get(devs, i);
        char meas[32], predt[32], freem[32], disk[32], rtt[32];
        fig(d, "measured_token_ms", "%.1f", meas, sizeof meas);
        fig(d, "predicted_token_ms", "%.1f", predt, sizeof predt);
        fig(d, "mem_free_mib", "%.0f", freem, sizeof freem);
        fig(d, "disk_wait_ms", "%.1f", disk, sizeof disk);
        fig(d, "hop_rtt_ms", "%.2f", rtt, sizeof rtt);
        printf("%-12s %-10s %6" JSON_INTEGER_FORMAT " %7zu %12s %12s %9s %10s %8s  %s\n",
               str_of(d, "name"), str_of(d, "state"),
               json_integer_value(json_object_get(d, "layers")),
               json_array_size(json_object_get(d, "windows")), meas, predt, freem, disk, rtt,
               str_of(d, "why"));
    }
    printf("(measured and predicted: each device's share of a token; disk: its wait for the "
           "disk over the run)\n");
    json_decref(o);
    return true;
}

int cmd_ring(int argc, char **argv) {
    const char *ring = NULL, *model_path = NULL;
    bool insecure = false;
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        ring_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? APP_USAGE : APP_OK;
    }
    if (strcmp(argv[1], "status") != 0) {
        app_error("ring: unknown sub-command '%s' (lares ring --help)", argv[1]);
        return APP_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            ring_usage(stdout);
            return APP_OK;
        } else if (strcmp(a, "--ring") == 0) {
            if ((ring = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if ((model_path = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--insecure") == 0) {
            insecure = true;
        } else {
            app_error("ring status: unknown option '%s' (lares ring --help)", a);
            return APP_USAGE;
        }
    }
    if (ring == NULL || model_path == NULL) {
        app_error("ring status: give --ring RING.json and -m MODEL");
        return APP_USAGE;
    }
    app_setup_log(0);
    lares_error err = {0};
    lares_model *m = NULL;
    if (lares_model_open(model_path, NULL, &m, &err) != LARES_OK) {
        return app_fail(&err);
    }
    static lares_ring_probe dev[STATUS_MAX_DEVICES]; /* 64 x 600 bytes: not on the stack */
    int32_t n = 0;
    const lares_status st = lares_ring_survey(m, ring, insecure, dev, STATUS_MAX_DEVICES, &n, &err);
    lares_model_close(m);
    if (st != LARES_OK) {
        return app_fail(&err);
    }
    int32_t ready = 0;
    printf("%-12s %-22s %-6s %3s %6s %6s %5s %12s %8s  %s\n", "device", "address", "state", "w",
           "layers", "rounds", "cores", "memory", "rtt ms", "why not");
    for (int32_t d = 0; d < n; d++) {
        char mem[32] = "-", cores[16] = "-", w[16] = "auto", layers[16] = "-", rounds[16] = "-",
             rtt[16] = "-";
        if (dev[d].mem_available_bytes > 0) {
            app_fmt_bytes(dev[d].mem_available_bytes, mem, sizeof mem);
        }
        if (dev[d].n_cpu > 0) {
            snprintf(cores, sizeof cores, "%u", dev[d].n_cpu);
        }
        if (dev[d].w >= 0) {
            snprintf(w, sizeof w, "%d", dev[d].w);
            snprintf(layers, sizeof layers, "%d", dev[d].layers);
            snprintf(rounds, sizeof rounds, "%d", dev[d].rounds);
        }
        if (dev[d].rtt_ms >= 0) {
            snprintf(rtt, sizeof rtt, "%.3f", dev[d].rtt_ms);
        }
        ready += dev[d].ready;
        printf("%-12s %-22s %-6s %3s %6s %6s %5s %12s %8s  %s\n", dev[d].name,
               d == 0 ? "(head)" : dev[d].address, dev[d].ready ? "ready" : "down", w, layers,
               rounds, d == 0 ? "-" : cores, d == 0 ? "-" : mem, rtt, dev[d].why);
    }
    printf("%d of %d devices ready (layers under ring.json's windows with every device "
           "present)\n",
           ready, n);
    print_running(ring);
    return APP_OK;
}
