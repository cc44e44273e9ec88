/* lares plan: which device runs which layers, and how fast that should be. */
#include "app.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void plan_usage(FILE *to) {
    fputs("usage: lares plan (-m MODEL | --shape NAME:MIX) --devices DEVICES.json [options]\n"
          "  -m, --model PATH       a GGUF model\n"
          "      --shape NAME:MIX   a public model shape instead, e.g. llama3-70b:q4_k_m\n"
          "                         (llama3-8b llama3-70b qwen2.5-14b qwen2.5-32b llama2-7b\n"
          "                          llama2-13b tinyllama-1.1b)\n"
          "      --devices PATH     the devices: profiles (lares profile --json) or written\n"
          "                         by hand; '-' reads stdin (docs/scheduling-impl.md)\n"
          "      --placement P      halda (default), even, memory or single; halda:k=N\n"
          "                         holds Halda to N rounds (to compare k's)\n"
          "  -c, --ctx-size N       context held in the KV caches (default: the model's, at\n"
          "                         most 4096)\n"
          "      --latency MS       a hop's latency for devices without network figures\n"
          "      --bandwidth RATE   and its bandwidth, e.g. 300Mbit/s\n"
          "      --json             print the plan as JSON\n",
          to);
}

static double num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static const char *str(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : "";
}

static void print_human(json_t *p) {
    json_t *m = json_object_get(p, "model");
    char b[32];
    printf("%s: %d layers, %s, context %d\n", str(m, "name"), (int)num(m, "n_layer"),
           app_fmt_bytes((uint64_t)num(m, "weight_bytes"), b, sizeof b), (int)num(m, "n_ctx"));
    printf("placement %s: %d round%s of %d layers, head %s\n\n", str(p, "placement"),
           (int)num(p, "k"), num(p, "k") == 1 ? "" : "s", (int)num(p, "W"), str(p, "head"));
    printf("  %-16s %6s %4s %4s  %-20s %8s %8s %9s %9s %8s %9s\n", "device", "layers", "w", "gpu",
           "memory case", "cpu ms", "gpu ms", "reads ms", "waits ms", "net ms", "total ms");
    json_t *devs = json_object_get(p, "devices");
    size_t i;
    json_t *d;
    json_array_foreach(devs, i, d) {
        printf("  %-16s %6d %4d %4d  %-20s %8.1f %8.1f %9.1f %9.1f %8.1f %9.1f\n", str(d, "name"),
               (int)num(d, "layers"), (int)num(d, "w"), (int)num(d, "n_gpu"), str(d, "case"),
               num(d, "t_cpu_ms"), num(d, "t_gpu_ms"), num(d, "t_read_ms"), num(d, "t_disk_ms"),
               num(d, "t_net_ms"), num(d, "t_total_ms"));
    }
    printf("  layers per round:");
    json_array_foreach(devs, i, d) {
        json_t *win = json_object_get(d, "windows");
        size_t r;
        json_t *pair;
        printf("%s %s", i ? ";" : "", str(d, "name"));
        json_array_foreach(win, r, pair) {
            if (r == 4 && json_array_size(win) > 5) {
                printf(" ... (%zu rounds)", json_array_size(win));
                break;
            }
            printf(" [%d, %d)", (int)json_integer_value(json_array_get(pair, 0)),
                   (int)json_integer_value(json_array_get(pair, 1)));
        }
    }
    printf("\n");
    json_t *dropped = json_object_get(p, "dropped");
    if (json_array_size(dropped) > 0) {
        printf("  not used:");
        json_array_foreach(dropped, i, d) {
            printf(" %s", json_string_value(d));
        }
        printf("\n");
    }
    double t = num(p, "t_token_ms");
    printf("  head work (output matrix): %.1f ms at full speed (in the head's cpu ms)\n",
           num(p, "t_head_ms"));
    printf("  cpu ms: compute, CPU quota throttling included; reads ms: the disk busy streaming\n"
           "  what does not fit; waits ms: what of it the ring waits for (the rest overlaps\n"
           "  compute and the token's time on the other devices)\n\n");
    printf("predicted token latency: %.1f ms (%.2f tokens/s)\n", t, t > 0 ? 1e3 / t : 0.0);
    printf("baselines, priced by the same model:\n");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(p, "baselines"), k, v) {
        if (json_object_get(v, "error") != NULL) {
            printf("  %-7s cannot run: %s\n", k, str(v, "error"));
        } else {
            double tb = num(v, "t_token_ms");
            printf("  %-7s %9.1f ms (%.2fx the %s plan)\n", k, tb, t > 0 ? tb / t : 0.0,
                   str(p, "placement"));
        }
    }
    printf("solved in %.1f ms\n", num(p, "solve_ms"));
}

int cmd_plan(int argc, char **argv) {
    lares_plan_opts o = lares_plan_opts_default();
    const char *devices = NULL, *v;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            plan_usage(stdout);
            return APP_OK;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if ((o.model_path = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--shape") == 0) {
            if ((o.shape = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--devices") == 0) {
            if ((devices = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--placement") == 0) {
            if ((o.placement = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx-size") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 1, 1 << 24, &o.n_ctx)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--latency") == 0) {
            float ms;
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_f32(a, v, 0.0f, 100000.0f, &ms)) {
                return APP_USAGE;
            }
            o.net_latency_ms = ms;
        } else if (strcmp(a, "--bandwidth") == 0) {
            if ((o.net_bandwidth = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else {
            app_error("plan: unknown option '%s' (lares plan --help)", a);
            return APP_USAGE;
        }
    }
    if ((o.model_path == NULL) == (o.shape == NULL)) {
        app_error("plan: give a model (-m PATH) or a shape (--shape NAME:MIX), one of them");
        return APP_USAGE;
    }
    if (devices == NULL) {
        app_error("plan: no devices given (--devices DEVICES.json)");
        return APP_USAGE;
    }
    if ((o.net_latency_ms >= 0) != (o.net_bandwidth != NULL)) {
        app_error("plan: --latency and --bandwidth go together");
        return APP_USAGE;
    }
    app_setup_log(0);
    size_t len = 0;
    char *text = app_read_all(devices, &len);
    if (text == NULL) {
        return APP_FAIL;
    }
    lares_error err = {0};
    char *out = NULL;
    int rc = APP_OK;
    if (lares_plan(&o, text, len, devices, &out, &err) != LARES_OK) {
        rc = app_fail(&err);
    } else if (json) {
        printf("%s\n", out);
    } else {
        json_t *p = json_loads(out, 0, NULL);
        if (p == NULL) {
            app_error("plan: the library wrote JSON that does not parse");
            rc = APP_FAIL;
        } else {
            print_human(p);
            json_decref(p);
        }
    }
    free(text);
    lares_free(out);
    return rc;
}
