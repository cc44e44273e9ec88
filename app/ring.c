/* lares ring status: which devices of ring.json would serve a head now
 * (issue 15, docs/ring.md). The figures of a running ring (layers, measured
 * and predicted times) are its head's: lares run --json, serve's /v1/ring. */
#include "app.h"

#include <inttypes.h>
#include <string.h>

#define STATUS_MAX_DEVICES 64

static void ring_usage(FILE *to) {
    fputs("usage: lares ring status --ring RING.json -m MODEL [--insecure]\n"
          "  asks every worker of RING.json, as a head would, whether it would serve MODEL now,\n"
          "  lets it go, and prints a table: device, address, state (ready: reachable, the same\n"
          "  model file, idle; down: why not), its window, layers and rounds under RING.json's\n"
          "  windows, cores and memory budget it reported, the round trip of a ping to it.\n"
          "  A running ring's figures: GET /v1/ring (or the page /ring) of lares serve --ring.\n"
          "  A worker busy with another head refuses and keeps serving it.\n",
          to);
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
    printf("%d of %d devices ready\n", ready, n);
    /* a running ring's figures are its head's */
    printf("(layers under ring.json's windows with every device present; the figures of a running\n"
           " ring -- states, plan in force, measured vs predicted ms per token, disk wait, "
           "failovers,\n"
           " re-plans -- are its head's: GET /v1/ring or the page /ring of lares serve --ring,\n"
           " lares run --json)\n");
    return APP_OK;
}
