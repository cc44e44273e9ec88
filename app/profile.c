/* lares profile: what this device can do, as the planner needs it. */
#include "app.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void profile_usage(FILE *to) {
    fputs("usage: lares profile [options]\n"
          "  -m, --model PATH     time the disk that holds this model (default: a temporary\n"
          "                       file in the cache directory), and fit the CPU rates to a\n"
          "                       few real layer windows of it run here (the profile is then\n"
          "                       this model's)\n"
          "      --no-calibrate   with -m: keep the kernels' micro-benchmark rates\n"
          "      --isa NAME       force the kernel family (avx2, avxvnni, avx512, neon, ...)\n"
          "      --json           print the profile as JSON (a device entry of a devices file)\n"
          "      --refresh        measure again even when this device's profile is cached\n"
          "      --name NAME      the device's name (default: the host name)\n"
          "  -t, --threads N      threads to measure with (default: all cores)\n"
          "      --time MS        measuring time in milliseconds (default 2000)\n"
          "      --cache-dir DIR  where profiles are cached (default $XDG_CACHE_HOME/lares,\n"
          "                       else ~/.cache/lares)\n"
          "      --no-cache       neither read nor write the cache\n",
          to);
}

static double num(json_t *o, const char *a, const char *b) {
    json_t *v = json_object_get(o, a);
    if (b != NULL) {
        v = json_object_get(v, b);
    }
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static const char *str(json_t *o, const char *a, const char *b) {
    json_t *v = json_object_get(o, a);
    if (b != NULL) {
        v = json_object_get(v, b);
    }
    return json_is_string(v) ? json_string_value(v) : "";
}

static void print_human(json_t *p) {
    char b1[32], b2[32], b3[32];
    printf("device       %s (%s, %d cores, %s, kernels %s)\n", str(p, "name", NULL),
           str(p, "os", NULL), (int)num(p, "cpu", "cores"), str(p, "cpu", "model"),
           str(p, "cpu", "isa"));
    json_t *mem = json_object_get(p, "memory");
    printf("memory       %s available of %s, swap %s",
           app_fmt_bytes((uint64_t)num(mem, "available", NULL), b1, sizeof b1),
           app_fmt_bytes((uint64_t)num(mem, "total", NULL), b2, sizeof b2),
           app_fmt_bytes((uint64_t)num(mem, "swap_available", NULL), b3, sizeof b3));
    if (num(mem, "cgroup_limit", NULL) > 0) {
        printf(" (cgroup limit %s)",
               app_fmt_bytes((uint64_t)num(mem, "cgroup_limit", NULL), b1, sizeof b1));
    }
    printf("\nbandwidth    %.1f GB/s memory read", num(p, "cpu", "mem_bw") / 1e9);
    if (num(p, "cpu", "quota_cores") > 0) {
        printf(" (CPU quota %.2f cores)", num(p, "cpu", "quota_cores"));
    }
    json_t *disk = json_object_get(p, "disk");
    printf("\ndisk         %.2f GB/s sequential, %.1f MB/s random 4 KiB%s (%s)\n",
           num(disk, "seq_read", NULL) / 1e9, num(disk, "rand_read", NULL) / 1e6,
           json_is_false(json_object_get(disk, "direct")) ? ", buffered" : "",
           str(disk, "path", NULL));
    if (num(disk, "stream_read", NULL) > 0 || num(disk, "direct_read", NULL) > 0) {
        printf("             %.2f GB/s streamed, %.2f GB/s direct reads (the bound on the "
               "streamed figure)\n",
               num(disk, "stream_read", NULL) / 1e9, num(disk, "direct_read", NULL) / 1e9);
    }
    if (str(disk, "note", NULL)[0] != '\0') {
        printf("             %s\n", str(disk, "note", NULL));
    }
    printf("GFLOP/s      weight type: in cache / streamed from memory\n");
    json_t *fl = json_object_get(json_object_get(p, "cpu"), "flops");
    json_t *fm = json_object_get(json_object_get(p, "cpu"), "flops_mem");
    const char *k;
    json_t *v;
    json_object_foreach(fl, k, v) {
        double m = num(fm, k, NULL);
        if (m > 0) {
            printf("  %-8s %7.1f / %.1f\n", k, json_number_value(v) / 1e9, m / 1e9);
        } else {
            printf("  %-8s %7.1f\n", k, json_number_value(v) / 1e9);
        }
    }
    json_t *cal = json_object_get(p, "calibration");
    if (cal != NULL) {
        printf("calibrated   on %s: %.3f ms per layer of a token, %.3f ms per row of a %d-row "
               "prompt (full speed; micro-benchmark rates / %.2f)%s\n",
               str(cal, "model", NULL), num(cal, "decode_layer_ms", NULL),
               num(cal, "prompt_row_layer_ms", NULL), (int)num(cal, "prompt_rows", NULL),
               num(cal, "scale", NULL),
               json_is_true(json_object_get(cal, "streamed")) ? ", streaming" : "");
    }
    json_t *gpu = json_object_get(p, "gpu");
    if (gpu != NULL) {
        printf("gpu          %s %s, %s available\n", str(gpu, "backend", NULL),
               str(gpu, "name", NULL),
               app_fmt_bytes((uint64_t)num(gpu, "vram_available", NULL), b1, sizeof b1));
    } else {
        printf("gpu          none\n");
    }
    printf("fingerprint  %s (%s, %.1f s)\n", str(p, "fingerprint", NULL),
           json_is_true(json_object_get(p, "cached")) ? "cached" : "measured",
           num(p, "measure_s", NULL));
}

int cmd_profile(int argc, char **argv) {
    lares_profile_opts o = lares_profile_opts_default();
    bool json = false, no_cache = false;
    const char *cache_dir = NULL, *isa = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        uint64_t u;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            profile_usage(stdout);
            return APP_OK;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--refresh") == 0) {
            o.refresh = true;
        } else if (strcmp(a, "--no-cache") == 0) {
            no_cache = true;
        } else if (strcmp(a, "--no-calibrate") == 0) {
            o.no_calibrate = true;
        } else if (strcmp(a, "--isa") == 0) {
            if ((isa = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if ((o.model_path = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--name") == 0) {
            if ((o.name = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--cache-dir") == 0) {
            if ((cache_dir = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 1, 4096, &o.n_threads)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--time") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL || !app_parse_u64(a, v, &u) ||
                u < 50 || u > 600000) {
                if (v != NULL) {
                    app_error("--time: '%s' is not a whole number of milliseconds from 50 to "
                              "600000",
                              v);
                }
                return APP_USAGE;
            }
            o.budget_ms = (uint32_t)u;
        } else {
            app_error("profile: unknown option '%s' (lares profile --help)", a);
            return APP_USAGE;
        }
    }
    app_setup_log(0);
    if (!no_cache) {
        o.cache_dir = cache_dir != NULL ? cache_dir : app_profile_cache_default();
    }
    lares_error err = {0};
    if (isa != NULL && lares_force_isa(isa, &err) != LARES_OK) {
        return app_fail(&err);
    }
    char *text = NULL;
    if (lares_profile(&o, &text, &err) != LARES_OK) {
        return app_fail(&err);
    }
    int rc = APP_OK;
    if (json) {
        printf("%s\n", text);
    } else {
        json_t *p = json_loads(text, 0, NULL);
        if (p == NULL) {
            app_error("profile: the library wrote JSON that does not parse");
            rc = APP_FAIL;
        } else {
            print_human(p);
            json_decref(p);
        }
    }
    lares_free(text);
    return rc;
}
