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
          "      --json             print the plan as JSON\n"
          "      --offload METHOD   also place the model's matrices on a CUDA GPU: layers or\n"
          "                         affinity (docs/gpu.md; estimated, no GPU needed with\n"
          "                         --gpu-mem); --devices is then optional\n"
          "      --gpu-mem SIZE     the GPU's memory for weights (default: 90% of this\n"
          "                         machine's free device memory)\n"
          "      --gpu-tokens N     tokens per pass to optimise for (default 1: generation)\n"
          "\n"
          "usage: lares plan --check -m MODEL --ring RING.json [options]\n"
          "  runs each placement on the ring's devices (an automatic ring.json: no windows)\n"
          "  for a few tokens and prints its prediction beside its measurement, per device\n"
          "  and per token\n"
          "      --placements LIST  which, in order (default \"halda memory single even\")\n"
          "  -n, --tokens N         tokens per placement (default 16)\n"
          "  -t, --threads N        the head's threads (default: every core)\n"
          "  -c, --ctx-size N       context (default: the model's)\n"
          "      --insecure         a ring without encryption (trusted test networks)\n"
          "      --json             print the runs as JSON\n",
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

/* the GPU part (issue 10): both methods at the same budget */
static void print_gpu(json_t *g) {
    char b1[32], b2[32];
    printf("gpu offload: %s of device memory for weights (the model's matrices: %s), "
           "%d token(s) per pass, estimated\n",
           app_fmt_bytes((uint64_t)num(g, "budget_bytes"), b1, sizeof b1),
           app_fmt_bytes((uint64_t)num(g, "model_weight_bytes"), b2, sizeof b2),
           (int)num(g, "n_tok"));
    printf("  %-10s %10.3f ms\n", "cpu only", num(g, "cpu_only_ms"));
    const char *names[] = {"layers", "affinity"};
    for (int k = 0; k < 2; k++) {
        json_t *m = json_object_get(g, names[k]);
        printf("  %-10s %10.3f ms  x%.2f  %d matrices, %d whole layers, %s%s\n", names[k],
               num(m, "predicted_ms"), num(m, "speedup_vs_cpu"), (int)num(m, "n_tensors"),
               (int)num(m, "layers_whole"),
               app_fmt_bytes((uint64_t)num(m, "weight_bytes"), b1, sizeof b1),
               strcmp(str(g, "chosen"), names[k]) == 0 ? "  (chosen)" : "");
    }
    json_t *t = json_object_get(json_object_get(g, str(g, "chosen")), "tensors");
    printf("  placed first:");
    for (size_t i = 0; i < json_array_size(t) && i < 6; i++) {
        printf(" %s", json_string_value(json_array_get(t, i)));
    }
    printf("%s\n", json_array_size(t) > 6 ? " ..." : "");
}

int cmd_plan(int argc, char **argv) {
    lares_plan_opts o = lares_plan_opts_default();
    const char *devices = NULL, *v, *offload = NULL;
    bool json = false, check = false;
    uint64_t gpu_mem = 0;
    int32_t gpu_tokens = 1;
    app_plan_check_opts co = {.placements = "halda memory single even", .n_tokens = 16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            plan_usage(stdout);
            return APP_OK;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--check") == 0) {
            check = true;
        } else if (strcmp(a, "--insecure") == 0) {
            co.insecure = true;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            co.verbose = true;
        } else if (strcmp(a, "--ring") == 0) {
            if ((co.ring = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--placements") == 0) {
            if ((co.placements = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--tokens") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 2, 4096, &co.n_tokens)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 1, 4096, &co.n_threads)) {
                return APP_USAGE;
            }
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
        } else if (strcmp(a, "--offload") == 0) {
            if ((offload = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--gpu-mem") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL || !app_parse_size(a, v, &gpu_mem)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--gpu-tokens") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 1, 1 << 16, &gpu_tokens)) {
                return APP_USAGE;
            }
        } else {
            app_error("plan: unknown option '%s' (lares plan --help)", a);
            return APP_USAGE;
        }
    }
    if (check || co.ring != NULL) {
        if (!check || co.ring == NULL || o.model_path == NULL || devices != NULL ||
            o.shape != NULL || offload != NULL) {
            app_error("plan: --check runs a model file on a ring: lares plan --check -m MODEL "
                      "--ring RING.json (no --devices, --shape or --offload)");
            return APP_USAGE;
        }
        app_setup_log(co.verbose ? 1 : 0);
        co.model = o.model_path;
        co.n_ctx = o.n_ctx;
        co.json = json;
        return app_plan_check(&co);
    }
    if (offload == NULL && (gpu_mem != 0 || gpu_tokens != 1)) {
        app_error("plan: --gpu-mem and --gpu-tokens go with --offload layers|affinity");
        return APP_USAGE;
    }
    if (offload != NULL && o.model_path == NULL) {
        app_error("plan: --offload needs a model file (-m PATH)");
        return APP_USAGE;
    }
    char *gpu_out = NULL;
    if (offload != NULL) {
        lares_error gerr = {0};
        app_setup_log(0);
        if (lares_gpu_plan(o.model_path, offload, gpu_mem, gpu_tokens, &gpu_out, &gerr) !=
            LARES_OK) {
            return app_fail(&gerr);
        }
        if (devices == NULL) { /* the GPU part alone */
            json_t *g = json_loads(gpu_out, 0, NULL);
            if (json) {
                printf("%s\n", gpu_out);
            } else if (g != NULL) {
                print_gpu(g);
            }
            json_decref(g);
            lares_free(gpu_out);
            return g != NULL ? APP_OK : APP_FAIL;
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
    } else if (json && gpu_out == NULL) {
        printf("%s\n", out);
    } else {
        json_t *p = json_loads(out, 0, NULL);
        json_t *g = gpu_out != NULL ? json_loads(gpu_out, 0, NULL) : NULL;
        if (p == NULL || (gpu_out != NULL && g == NULL)) {
            app_error("plan: the library wrote JSON that does not parse");
            rc = APP_FAIL;
        } else if (json) { /* the plan with the GPU part as "gpu" */
            json_object_set(p, "gpu", g);
            char *s = json_dumps(p, JSON_COMPACT);
            printf("%s\n", s != NULL ? s : "{}");
            free(s);
        } else {
            print_human(p);
            if (g != NULL) {
                printf("\n");
                print_gpu(g);
            }
        }
        json_decref(p);
        json_decref(g);
    }
    free(text);
    lares_free(out);
    lares_free(gpu_out);
    return rc;
}
