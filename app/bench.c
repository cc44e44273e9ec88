/*
 * lares bench: prompt-processing and generation speed, like the reference
 * engine's bench tool: pp = N prompt tokens evaluated in batches from an empty
 * context; tg = N tokens generated one forward pass each. Each test is warmed
 * up once, then repeated; the table shows mean and standard deviation of
 * tokens/s, and --json gives every sample and the memory figures. With -d
 * DEPTH (as the reference's -d) the KV cache first holds DEPTH tokens, filled
 * once and not timed, and each test runs on top of them: attention's cost as
 * the context fills. With --parallel N a third test, tgNxS, generates N tokens
 * in each of S sequences decoding together (lares_batch): the aggregate
 * tokens/s of continuous batching.
 */
#include "app.h"
#include "opts.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bench_opts {
    const char *model;
    int32_t n_prompt, n_gen, repeat, depth, parallel;
    lares_session_opts session;
    bool json;
    bool verbose; /* -v: the library's info lines (the GPU placement) on stderr */
    lares_model_opts model_opts; /* --no-mmap */
    const char *isa;
    float temp;    /* tg's sampling temperature; 0: greedy */
    uint64_t seed; /* tg's sampling seed */
} bench_opts;

typedef struct samples {
    double v[64];
    int n;
} samples;

static double mean(const samples *s) {
    double m = 0;
    for (int i = 0; i < s->n; i++) {
        m += s->v[i];
    }
    return s->n ? m / s->n : 0;
}

static double stddev(const samples *s) {
    if (s->n < 2) {
        return 0;
    }
    double m = mean(s), v = 0;
    for (int i = 0; i < s->n; i++) {
        v += (s->v[i] - m) * (s->v[i] - m);
    }
    return sqrt(v / (s->n - 1));
}

static int parse_bench(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_prompt = 128;
    o->n_gen = 32;
    o->repeat = 3;
    o->seed = 1;
    o->session = lares_session_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            puts(
                "usage: lares bench -m MODEL [-p 128] [-n 32] [-d 0] [-t THREADS] [-r|--repeat 3]\n"
                "                   [-b BATCH] [-c CTX] [--kv-type auto|f16|f32] [--json]\n"
                "                   [--isa NAME] [--mem-budget SIZE] [--stream-io M] [--temp T]\n"
                "                   [--seed S] [--no-mmap]\n"
                "                   [--parallel S] [-v]\n"
                "  -p N   prompt tokens of the pp test (0 skips it)\n"
                "  -n N   generated tokens of the tg test (0 skips it)\n"
                "  -d, --depth N   tokens already in the KV cache (filled once, not timed)\n"
                "                  before each test\n"
                "  --parallel S    also tg with S sequences decoding together (aggregate t/s)\n"
                "  --mem-budget SIZE   memory for the whole run, as in lares run (default:\n"
                "                  the cgroup limit or 80% of available memory)\n"
                "  --no-mmap       read the model into memory instead of mapping it (as in\n"
                "                  lares run)\n"
                "  --stream-io auto|mmap|direct   how streamed weights are read (as in\n"
                "                  lares run)\n"
                "  --expert-cache lru|heat   MoE while streaming: what the expert cache\n"
                "                  evicts first (as in lares run)\n"
                "  --expert-guess auto|on|off   MoE while streaming: read the next layer's\n"
                "                  likely experts ahead (as in lares run)\n"
                "  --temp T, --seed S   tg samples at temperature T with seed S (default 0:\n"
                "                  greedy; a synthetic model's greedy text repeats a few\n"
                "                  tokens, so MoE routing is only realistic with T > 0)\n"
                "MoE models: the expert cache's hit rate (when streaming), the share of a\n"
                "token's experts the previous token chose too, and the share of each layer's\n"
                "most chosen experts, over the tg test's tokens");
            app_gpu_usage(stdout);
            return APP_OK;
        }
        if (strcmp(a, "--json") == 0) {
            o->json = true;
            continue;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            o->verbose = true;
            continue;
        }
        if (strcmp(a, "--no-mmap") == 0) {
            o->model_opts.no_mmap = true;
            continue;
        }
        const int gpu = app_gpu_opt(argc, argv, &i, &o->session);
        if (gpu < 0) {
            return APP_USAGE;
        }
        if (gpu > 0) {
            continue;
        }
        if ((v = app_need_value(argc, argv, &i)) == NULL) {
            return APP_USAGE;
        }
        if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            o->model = v;
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--n-prompt") == 0) {
            if (!app_parse_i32(a, v, 0, 1 << 20, &o->n_prompt)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-gen") == 0) {
            if (!app_parse_i32(a, v, 0, 1 << 20, &o->n_gen)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-d") == 0 || strcmp(a, "--depth") == 0) {
            if (!app_parse_i32(a, v, 0, 1 << 20, &o->depth)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--parallel") == 0) {
            if (!app_parse_i32(a, v, 1, 1024, &o->parallel)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-r") == 0 || strcmp(a, "--repeat") == 0) {
            if (!app_parse_i32(a, v, 1, 64, &o->repeat)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if (!app_parse_i32(a, v, 1, 512, &o->session.n_threads)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-b") == 0 || strcmp(a, "--batch-size") == 0) {
            if (!app_parse_i32(a, v, 1, 1 << 16, &o->session.n_batch)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx-size") == 0) {
            if (!app_parse_i32(a, v, 1, 1 << 24, &o->session.n_ctx)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--kv-type") == 0) {
            if (strcmp(v, "auto") == 0) {
                o->session.kv_type = LARES_KV_AUTO;
            } else if (strcmp(v, "f16") == 0) {
                o->session.kv_type = LARES_KV_F16;
            } else if (strcmp(v, "f32") == 0) {
                o->session.kv_type = LARES_KV_F32;
            } else {
                app_error("--kv-type: '%s' is not auto, f16 or f32", v);
                return APP_USAGE;
            }
        } else if (strcmp(a, "--isa") == 0) {
            o->isa = v;
        } else if (strcmp(a, "--mem-budget") == 0) {
            if (!app_parse_size(a, v, &o->session.mem_budget)) {
                return APP_USAGE;
            }
            if (o->session.mem_budget == 0) {
                app_error("%s: a budget of 0 bytes leaves nothing to run in", a);
                return APP_USAGE;
            }
        } else if (strcmp(a, "--stream-io") == 0) {
            if (!app_parse_stream_io(a, v, &o->session.stream_io)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--expert-cache") == 0) {
            if (!app_parse_expert_cache(a, v, &o->session.expert_cache)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--expert-guess") == 0) {
            if (!app_parse_auto_on_off(a, v, &o->session.expert_guess)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--temp") == 0) {
            if (!app_parse_f32(a, v, 0.0f, 10.0f, &o->temp)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--seed") == 0) {
            if (!app_parse_u64(a, v, &o->seed)) {
                return APP_USAGE;
            }
        } else {
            app_error("bench: unknown option '%s'", a);
            return APP_USAGE;
        }
    }
    if (o->model == NULL) {
        app_error("bench: no model given (-m MODEL)");
        return APP_USAGE;
    }
    if (o->n_prompt == 0 && o->n_gen == 0) {
        app_error("bench: nothing to measure (-p 0 and -n 0)");
        return APP_USAGE;
    }
    if (!app_gpu_check(&o->session)) {
        return APP_USAGE;
    }
    return -1;
}

/* deterministic prompt tokens spread over the vocabulary */
static void fill_prompt(int32_t *ids, int32_t n, int32_t n_vocab, int32_t bos) {
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int32_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)n_vocab);
    }
    if (n > 0 && bos >= 0) {
        ids[0] = bos;
    }
}

/* One measured pass over the `depth` tokens already in the cache: pp evaluates
 * the prompt only; tg generates n tokens after one. */
static lares_status run_once(lares_session *s, const bench_opts *o, int32_t depth,
                             const int32_t *prompt, int32_t n_prompt, int32_t n_gen,
                             lares_stats *st, lares_error *err) {
    lares_session_truncate(s, depth);
    lares_generate_opts go = lares_generate_opts_default();
    go.sampler.temperature = o->temp; /* default greedy: sampling costs next to nothing */
    go.sampler.seed = o->seed;
    go.n_predict = n_gen;
    return lares_generate(s, prompt, (size_t)n_prompt, &go, NULL, 0, NULL, st, err);
}

/* S sequences of one token of prompt each (sequence i the prompt's token
 * i % n_prompt, so that a mixture's sequences do not all choose the same
 * experts), generating n_gen + 1 tokens together: the aggregate tokens/s of
 * the steps after the first token of every sequence (the same count tg's
 * figure takes). */
static lares_status run_parallel(lares_batch *b, const int32_t *prompt, int32_t n_prompt,
                                 int32_t n_gen, double *tok_s, lares_error *err) {
    const int32_t n_seq = lares_batch_n_seq(b);
    lares_generate_opts go = lares_generate_opts_default();
    go.sampler.temperature = 0;
    go.n_predict = n_gen + 1;
    for (int32_t i = 0; i < n_seq; i++) {
        lares_status st = lares_batch_start(b, i, prompt + i % n_prompt, 1, &go, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    int32_t active = 0;
    lares_status st = lares_batch_step(b, &active, err); /* every first token */
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    while (st == LARES_OK && active > 0) {
        st = lares_batch_step(b, &active, err);
    }
    clock_gettime(CLOCK_MONOTONIC, &z);
    const double s = (double)(z.tv_sec - a.tv_sec) + (double)(z.tv_nsec - a.tv_nsec) / 1e9;
    *tok_s = s > 0 ? (double)n_seq * n_gen / s : 0;
    return st;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = parse_bench(argc, argv, &o);
    if (rc >= 0) {
        return rc;
    }
    app_setup_log(o.verbose ? 1 : 0);
    lares_error err = {0};
    if (o.isa != NULL && lares_force_isa(o.isa, &err) != LARES_OK) {
        return app_fail(&err);
    }
    const int32_t need = o.depth + (o.n_prompt > o.n_gen + 1 ? o.n_prompt : o.n_gen + 1) + 8;
    if (o.session.n_ctx == 0) {
        o.session.n_ctx = need;
    } else if (o.session.n_ctx < need) {
        app_error("bench: depth %d, the tests and the warm-up need a context of %d, -c is %d",
                  o.depth, need, o.session.n_ctx);
        return APP_USAGE;
    }
    lares_model *m = NULL;
    lares_session *s = NULL;
    lares_batch *batch = NULL;
    int32_t *prompt = NULL;
    if (lares_model_open(o.model, &o.model_opts, &m, &err) != LARES_OK ||
        lares_session_create(m, &o.session, &s, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    lares_model_info info;
    lares_model_get_info(m, &info);
    /* the depth's tokens first (BOS at 0), then the measured prompt */
    int32_t np = o.depth + (o.n_prompt > 8 ? o.n_prompt : 8);
    prompt = malloc((size_t)np * sizeof *prompt);
    if (prompt == NULL) {
        app_error("out of memory");
        rc = APP_FAIL;
        goto done;
    }
    fill_prompt(prompt, np, info.n_vocab, lares_token_bos(m));

    samples pp = {0}, tg = {0}, tgp = {0};
    lares_stats st, last_pp = {0}, last_tg = {0};
    if (o.parallel > 1 && o.n_gen > 0 &&
        lares_batch_create(m, &o.session, o.parallel, &batch, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    /* warm-up: touches every weight once so the first sample is not a cold read */
    if (run_once(s, &o, 0, prompt, 8, 1, &st, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    /* the depth: filled once, kept by every run (each truncates back to it) */
    if (o.depth > 0 && run_once(s, &o, 0, prompt, o.depth, 0, &st, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    const int32_t *measured = prompt + o.depth;
    for (int r = 0; r < o.repeat; r++) {
        if (o.n_prompt > 0) {
            if (run_once(s, &o, o.depth, measured, o.n_prompt, 0, &st, &err) != LARES_OK) {
                rc = app_fail(&err);
                goto done;
            }
            pp.v[pp.n++] = st.prompt_tok_s;
            last_pp = st;
        }
        if (o.n_gen > 0) {
            /* n_gen forward passes: one token of prompt, then n_gen + 1 sampled tokens */
            if (run_once(s, &o, o.depth, measured, 1, o.n_gen + 1, &st, &err) != LARES_OK) {
                rc = app_fail(&err);
                goto done;
            }
            tg.v[tg.n++] = st.gen_tok_s;
            last_tg = st;
        }
        if (batch != NULL) {
            if (run_parallel(batch, measured, np - o.depth, o.n_gen, &tgp.v[tgp.n], &err) !=
                LARES_OK) {
                rc = app_fail(&err);
                goto done;
            }
            tgp.n++;
        }
    }
    char b1[32];
    /* 0: the session's automatic choice (all cores, one fewer while streaming) */
    const int threads = o.session.n_threads;
    char tbuf[16];
    if (threads > 0) {
        snprintf(tbuf, sizeof tbuf, "%d", threads);
    } else {
        snprintf(tbuf, sizeof tbuf, "auto");
    }
    if (o.json) {
        json_t *root = json_object();
        json_object_set_new(root, "model", json_string(o.model));
        json_object_set_new(root, "arch", json_string(info.arch));
        json_object_set_new(root, "type", json_string(info.file_type));
        json_object_set_new(root, "file_bytes", json_integer((json_int_t)info.file_bytes));
        json_object_set_new(root, "n_layer", json_integer(info.n_layer));
        json_object_set_new(root, "isa", json_string(lares_isa()));
        json_object_set_new(root, "cpu_flags", json_string(lares_cpu_flags()));
        json_object_set_new(root, "threads", json_integer(threads));
        json_object_set_new(root, "depth", json_integer(o.depth));
        json_object_set_new(root, "repeat", json_integer(o.repeat));
        json_t *tests = json_array();
        const samples *ss[3] = {&pp, &tg, &tgp};
        const lares_stats *ls[3] = {&last_pp, &last_tg, &last_tg};
        const char *names[3] = {"pp", "tg", "tg"};
        const int32_t ns[3] = {o.n_prompt, o.n_gen, batch != NULL ? o.n_gen : 0};
        for (int k = 0; k < 3; k++) {
            if (ns[k] == 0) {
                continue;
            }
            json_t *t = json_object();
            char name[32];
            if (k == 2) {
                snprintf(name, sizeof name, "tg%dx%d", ns[k], o.parallel);
                json_object_set_new(t, "n_seq", json_integer(o.parallel));
            } else {
                snprintf(name, sizeof name, "%s%d", names[k], ns[k]);
            }
            json_object_set_new(t, "test", json_string(name));
            json_object_set_new(t, "n_tokens", json_integer(ns[k]));
            json_object_set_new(t, "n_depth", json_integer(o.depth));
            json_object_set_new(t, "tok_s_mean", json_real(mean(ss[k])));
            json_object_set_new(t, "tok_s_stddev", json_real(stddev(ss[k])));
            json_t *sa = json_array();
            for (int i = 0; i < ss[k]->n; i++) {
                json_array_append_new(sa, json_real(ss[k]->v[i]));
            }
            json_object_set_new(t, "samples", sa);
            json_object_set_new(t, "peak_rss_bytes",
                                json_integer((json_int_t)ls[k]->peak_rss_bytes));
            json_object_set_new(t, "major_faults", json_integer((json_int_t)ls[k]->major_faults));
            json_object_set_new(t, "disk_read_bytes",
                                ls[k]->disk_read_bytes == UINT64_MAX
                                    ? json_null()
                                    : json_integer((json_int_t)ls[k]->disk_read_bytes));
            json_object_set_new(t, "mem_pressure", json_real(ls[k]->mem_pressure));
            json_object_set_new(t, "stream_io", json_string(!ls[k]->streaming ? "none"
                                                            : ls[k]->stream_direct ? "direct"
                                                                                   : "mmap"));
            json_object_set_new(t, "stream_probe", ls[k]->probe_direct_Bps > 0
                                                       ? app_probe_json(ls[k])
                                                       : json_null());
            json_object_set_new(t, "experts", app_expert_io_json(ls[k]));
            if (k == 1 && ls[k]->route_overlap >= 0) { /* MoE: over the tg tokens */
                const uint64_t h = ls[k]->expert_hits, mi = ls[k]->expert_misses;
                json_object_set_new(t, "expert_hits", json_integer((json_int_t)h));
                json_object_set_new(t, "expert_misses", json_integer((json_int_t)mi));
                json_object_set_new(t, "expert_guesses",
                                    json_integer((json_int_t)ls[k]->expert_guesses));
                json_object_set_new(t, "expert_guess_hits",
                                    json_integer((json_int_t)ls[k]->expert_guess_hits));
                json_object_set_new(t, "expert_guesses_made",
                                    json_integer((json_int_t)ls[k]->expert_guesses_made));
                json_object_set_new(t, "expert_guesses_picked",
                                    json_integer((json_int_t)ls[k]->expert_guesses_picked));
                json_object_set_new(t, "expert_hit_rate",
                                    h + mi > 0 ? json_real((double)h / (double)(h + mi))
                                               : json_null());
                json_object_set_new(t, "route_overlap", json_real(ls[k]->route_overlap));
                json_object_set_new(t, "route_top_share", json_real(ls[k]->route_top_share));
            }
            json_array_append_new(tests, t);
        }
        json_object_set_new(root, "tests", tests);
        char *txt = json_dumps(root, JSON_COMPACT);
        if (txt != NULL) {
            puts(txt);
            free(txt);
        }
        json_decref(root);
    } else {
        /* the CPU's features above the table, the kernel family chosen in it */
        printf("cpu flags: %s\n\n", lares_cpu_flags());
        printf("| model | size | arch | type | isa | threads | test | t/s |\n"
               "| --- | ---: | --- | --- | --- | ---: | --- | ---: |\n");
        const char *base = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model;
        char at[32] = ""; /* the reference's notation: "pp512 @ d1024" */
        if (o.depth > 0) {
            snprintf(at, sizeof at, " @ d%d", o.depth);
        }
        if (o.n_prompt > 0) {
            printf("| %s | %s | %s | %s | %s | %s | pp%d%s | %.2f ± %.2f |\n", base,
                   app_fmt_bytes(info.file_bytes, b1, sizeof b1), info.arch, info.file_type,
                   lares_isa(), tbuf, o.n_prompt, at, mean(&pp), stddev(&pp));
        }
        if (o.n_gen > 0) {
            printf("| %s | %s | %s | %s | %s | %s | tg%d%s | %.2f ± %.2f |\n", base,
                   app_fmt_bytes(info.file_bytes, b1, sizeof b1), info.arch, info.file_type,
                   lares_isa(), tbuf, o.n_gen, at, mean(&tg), stddev(&tg));
        }
        if (batch != NULL) {
            printf("| %s | %s | %s | %s | %s | %s | tg%dx%d%s | %.2f ± %.2f |\n", base,
                   app_fmt_bytes(info.file_bytes, b1, sizeof b1), info.arch, info.file_type,
                   lares_isa(), tbuf, o.n_gen, o.parallel, at, mean(&tgp), stddev(&tgp));
        }
        const lares_stats *l = o.n_gen > 0 ? &last_tg : &last_pp;
        char b2[32], b3[32];
        fprintf(stderr,
                "lares: peak RSS %s | major faults %" PRIu64
                " | disk read %s | memory pressure %.2f %%\n",
                app_fmt_bytes(l->peak_rss_bytes, b2, sizeof b2), l->major_faults,
                l->disk_read_bytes == UINT64_MAX ? "unknown"
                                                 : app_fmt_bytes(l->disk_read_bytes, b3, sizeof b3),
                l->mem_pressure * 100);
        if (o.n_gen > 0 && last_tg.route_overlap >= 0) {
            const uint64_t h = last_tg.expert_hits, mi = last_tg.expert_misses;
            char hr[64] = "-- (weights resident)";
            if (h + mi > 0) {
                snprintf(hr, sizeof hr, "%.1f %% (%" PRIu64 " of %" PRIu64 ")",
                         100.0 * (double)h / (double)(h + mi), h, h + mi);
            }
            fprintf(stderr,
                    "lares: experts (tg): cache hit rate %s | shared with the previous token "
                    "%.1f %% | taken by each layer's %d most chosen %.1f %%\n",
                    hr, 100 * last_tg.route_overlap, info.n_expert_used,
                    100 * last_tg.route_top_share);
            if (last_tg.expert_guesses_made > 0) {
                fprintf(stderr,
                        "lares: experts (tg): next layer guessed %" PRIu64 " times, %.1f %% "
                        "picked | %" PRIu64 " read ahead, %" PRIu64 " of them picked\n",
                        last_tg.expert_guesses_made,
                        100.0 * (double)last_tg.expert_guesses_picked /
                            (double)last_tg.expert_guesses_made,
                        last_tg.expert_guesses, last_tg.expert_guess_hits);
            }
        }
    }
    rc = APP_OK;
done:
    free(prompt);
    lares_batch_free(batch);
    lares_session_free(s);
    lares_model_close(m);
    return rc;
}
