/* lares synth: benchmark-size models with real shapes and synthetic weights. */
#include "app.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a progress bar on stderr: redrawn every percent on a terminal, a line every
 * quarter otherwise (logs stay readable) */
void app_progress(const char *what, uint64_t done, uint64_t total, void *user) {
    int *last = user;
    int pct = total ? (int)(done * 100 / total) : 100;
    static int tty = -1;
    if (tty < 0) {
        tty = isatty(fileno(stderr));
    }
    if (pct == *last || (!tty && pct / 25 == *last / 25 && *last >= 0)) {
        return;
    }
    *last = pct;
    char b1[32], b2[32];
    if (!tty) {
        fprintf(stderr, "%s: %3d%% %s / %s\n", what, pct, app_fmt_bytes(done, b1, sizeof b1),
                app_fmt_bytes(total, b2, sizeof b2));
        return;
    }
    int bar = pct / 4;
    fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s / %s", what, bar, "#########################",
            25 - bar, "", pct, app_fmt_bytes(done, b1, sizeof b1),
            app_fmt_bytes(total, b2, sizeof b2));
    if (done >= total) {
        fputc('\n', stderr);
    }
    fflush(stderr);
}

int cmd_synth(int argc, char **argv) {
    lares_synth_opts o = lares_synth_opts_default();
    o.preset = NULL;
    o.type = NULL;
    const char *out = NULL;
    int verbosity = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf(
                "usage: lares synth --preset NAME --type TYPE -o OUT.gguf --vocab-from VOCAB.gguf\n"
                "                   [--layers N] [--seed S] [-t THREADS] [-v]\n"
                "                   [--routing realistic|random] [--route-skew S]\n"
                "                   [--route-overlap F] [--copy]\n"
                "  presets: %s\n  types: %s\n"
                "  --copy                weights that repeat what followed the current token\n"
                "                        earlier (an induction circuit; dense presets): a text\n"
                "                        to measure speculative decoding on\n"
                "MoE presets (docs/memory.md, \"Synthetic routing\"):\n"
                "  --routing realistic   routers with a chosen popularity and overlap (default)\n"
                "  --routing random      plain random routers (choices depend on the token alone)\n"
                "  --route-skew S        expert popularity ~ rank^-S (default %.2g; 0: all alike)\n"
                "  --route-overlap F     share of a token's experts the next token keeps\n"
                "                        (default %.2f)\n",
                lares_synth_presets(), lares_quantize_types(), o.route_skew, o.route_overlap);
            return APP_OK;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbosity = 1;
            continue;
        }
        if (strcmp(a, "--copy") == 0) {
            o.copy = true;
            continue;
        }
        if ((v = app_need_value(argc, argv, &i)) == NULL) {
            return APP_USAGE;
        }
        if (strcmp(a, "--preset") == 0) {
            o.preset = v;
        } else if (strcmp(a, "--type") == 0) {
            o.type = v;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            out = v;
        } else if (strcmp(a, "--vocab-from") == 0) {
            o.vocab_path = v;
        } else if (strcmp(a, "--layers") == 0) {
            if (!app_parse_i32(a, v, 1, 4096, &o.n_layers)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--seed") == 0) {
            if (!app_parse_u64(a, v, &o.seed)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if (!app_parse_i32(a, v, 1, 512, &o.n_threads)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--routing") == 0) {
            if (strcmp(v, "realistic") == 0) {
                o.routing = LARES_SYNTH_ROUTING_REALISTIC;
            } else if (strcmp(v, "random") == 0) {
                o.routing = LARES_SYNTH_ROUTING_RANDOM;
            } else {
                app_error("--routing: '%s' is not realistic or random", v);
                return APP_USAGE;
            }
        } else if (strcmp(a, "--route-skew") == 0) {
            float f;
            if (!app_parse_f32(a, v, 0.0f, 4.0f, &f)) {
                return APP_USAGE;
            }
            o.route_skew = f;
        } else if (strcmp(a, "--route-overlap") == 0) {
            float f;
            if (!app_parse_f32(a, v, 0.01f, 0.99f, &f)) {
                return APP_USAGE;
            }
            o.route_overlap = f;
        } else {
            app_error("synth: unknown option '%s'", a);
            return APP_USAGE;
        }
    }
    if (o.preset == NULL || o.type == NULL || out == NULL) {
        app_error("synth: --preset, --type and -o are required (lares synth --help)");
        return APP_USAGE;
    }
    app_setup_log(verbosity);
    int last = -1;
    o.progress = app_progress;
    o.user = &last;
    lares_error err = {0};
    if (lares_synth(&o, out, &err) != LARES_OK) {
        if (last >= 0) {
            fputc('\n', stderr);
        }
        return app_fail(&err);
    }
    fprintf(stderr, "lares: wrote %s\n", out);
    return APP_OK;
}
