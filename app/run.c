/* lares run: generate text from a prompt on this device. */
#include "app.h"
#include "opts.h"
#include "discover.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct run_opts {
    const char *model;
    const char *prompt;
    const char *prompt_file;
    int32_t n_predict;
    int32_t lookup;
    const char *draft; /* a draft model's file */
    int32_t draft_n;   /* 0: not given */
    bool spec_always;  /* --spec-always */
    lares_session_opts session;
    lares_sampler_opts sampler;
    bool seed_given;
    bool json;
    bool add_bos;
    bool parse_special;
    bool echo_prompt;
    const char *isa;
    int verbosity;
} run_opts;

static void run_usage(FILE *to) {
    fputs("usage: lares run -m MODEL (-p PROMPT | -f FILE) [options]\n"
          "  -m, --model PATH        GGUF model file\n"
          "  -p, --prompt TEXT       prompt text\n"
          "  -f, --file PATH         read the prompt from a file ('-' for stdin)\n"
          "  -n, --n-predict N       tokens to generate (default 128; -1: until end of text)\n"
          "      --lookup N          speculative decoding: draft up to N tokens from the context\n"
          "                          (prompt lookup), verify them in one pass (default 0 = off)\n"
          "      --draft MODEL       speculative decoding with a draft model (a GGUF file with\n"
          "                          the same vocabulary): it proposes tokens, the model\n"
          "                          verifies them in one pass; not with --lookup\n"
          "      --draft-n N         tokens the draft proposes per pass, at most (default 7:\n"
          "                          8 rows per verification, the few-row product's reach)\n"
          "      --spec-always       with --lookup or --draft at --temp 0: draft on every pass\n"
          "                          (default: only while passes with drafts measure faster\n"
          "                          than without; the tokens are the same either way)\n"
          "      --no-bos            do not add the BOS token\n"
          "      --special           parse control tokens written in the prompt\n"
          "      --no-echo           do not print the prompt before the generated text\n"
          "      --json              print one JSON object at the end instead of streaming\n"
          "      --isa NAME          force kernels: scalar, avx2, avxvnni, avx512, neon,\n"
          "                          neon-nodot, neon-i8mm (default: the best this CPU has)\n"
          "  -v, --verbose / -q, --quiet\n",
          to);
    app_sampling_usage(to);
    app_session_usage(to);
}

static bool is_opt(const char *a, const char *s1, const char *s2) {
    return strcmp(a, s1) == 0 || (s2 != NULL && strcmp(a, s2) == 0);
}

/* returns -1 when the options are fine, else the exit code */
static int parse_run(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->session = lares_session_opts_default();
    o->session.ring_profile_cache = app_profile_cache_default(); /* an automatic ring's head */
    o->sampler = lares_sampler_opts_default();
    o->add_bos = true;
    o->echo_prompt = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
#define IS(s1, s2) is_opt(a, s1, s2)
#define VALUE()                                                                                    \
    if ((v = app_need_value(argc, argv, &i)) == NULL)                                              \
    return APP_USAGE
        if (IS("-h", "--help")) {
            run_usage(stdout);
            return APP_OK;
        } else if (IS("-m", "--model")) {
            VALUE();
            o->model = v;
        } else if (IS("-p", "--prompt")) {
            VALUE();
            o->prompt = v;
        } else if (IS("-f", "--file")) {
            VALUE();
            o->prompt_file = v;
        } else if (IS("-n", "--n-predict")) {
            VALUE();
            if (!app_parse_i32(a, v, -1, INT32_MAX, &o->n_predict)) {
                return APP_USAGE;
            }
        } else if (IS("--lookup", NULL)) {
            VALUE();
            if (!app_parse_i32(a, v, 0, LARES_LOOKUP_MAX, &o->lookup)) {
                return APP_USAGE;
            }
        } else if (IS("--draft", NULL)) {
            VALUE();
            o->draft = v;
        } else if (IS("--spec-always", NULL)) {
            o->spec_always = true;
        } else if (IS("--draft-n", NULL)) {
            VALUE();
            if (!app_parse_i32(a, v, 1, LARES_LOOKUP_MAX, &o->draft_n)) {
                return APP_USAGE;
            }
        } else if (IS("--isa", NULL)) {
            VALUE();
            o->isa = v;
        } else if (IS("--no-bos", NULL)) {
            o->add_bos = false;
        } else if (IS("--special", NULL)) {
            o->parse_special = true;
        } else if (IS("--no-echo", NULL)) {
            o->echo_prompt = false;
        } else if (IS("--json", NULL)) {
            o->json = true;
        } else if (IS("-v", "--verbose")) {
            o->verbosity++;
        } else if (IS("-q", "--quiet")) {
            o->verbosity = -1;
        } else {
            /* the options run shares with chat and serve (opts.c) */
            int r = app_sampling_opt(argc, argv, &i, &o->sampler, &o->seed_given);
            if (r == 0) {
                r = app_session_opt(argc, argv, &i, &o->session);
            }
            if (r < 0) {
                return APP_USAGE;
            }
            if (r == 0) {
                app_error("run: unknown option '%s' (lares run --help lists them)", a);
                return APP_USAGE;
            }
        }
#undef IS
#undef VALUE
    }
    if (!app_gpu_check(&o->session)) {
        return APP_USAGE;
    }
    if (o->model == NULL) {
        app_error("run: no model given (-m MODEL)");
        return APP_USAGE;
    }
    if (!app_ring_auto(&o->session)) { /* --ring auto: the paired devices that answer */
        return APP_FAIL;
    }
    if ((o->prompt == NULL) == (o->prompt_file == NULL)) {
        app_error("run: give the prompt with exactly one of -p TEXT or -f FILE");
        return APP_USAGE;
    }
    if (o->draft_n > 0 && o->draft == NULL) {
        app_error("run: --draft-n needs a draft model (--draft MODEL)");
        return APP_USAGE;
    }
    if (o->draft != NULL && o->lookup > 0) {
        app_error("run: --draft and --lookup both propose drafts; give one of them");
        return APP_USAGE;
    }
    if (o->spec_always && o->draft == NULL && o->lookup == 0) {
        app_error("run: --spec-always needs drafts: --lookup N or --draft MODEL");
        return APP_USAGE;
    }
    if (o->draft != NULL && o->draft_n == 0) {
        /* the token and 7 drafts: 8 rows, the few-row product's one group
         * (QUANT_ROWS_MAX); a 9th row starts a second group (docs/speculative.md) */
        o->draft_n = 7;
    }
    if (!o->seed_given) {
        o->sampler.seed = app_clock_seed();
    }
    return -1;
}

/* generated text, kept for --json */
typedef struct run_state {
    bool stream;
    char *text;
    size_t len, cap;
    double *token_ms;     /* time from each token to the next, for --json */
    size_t n_token_ms, cap_token_ms;
    double last_ms;       /* when the previous token arrived; 0 before the first */
} run_state;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* the gap since the previous token: a stall shows here, not in an average */
static void note_token_time(run_state *rs) {
    const double t = now_ms();
    if (rs->last_ms > 0) {
        if (rs->n_token_ms == rs->cap_token_ms) {
            size_t cap = rs->cap_token_ms ? rs->cap_token_ms * 2 : 64;
            double *p = realloc(rs->token_ms, cap * sizeof *p);
            if (p == NULL) {
                return;
            }
            rs->token_ms = p;
            rs->cap_token_ms = cap;
        }
        rs->token_ms[rs->n_token_ms++] = t - rs->last_ms;
    }
    rs->last_ms = t;
}

static bool on_token(const lares_token_info *info, void *user) {
    const char *piece = info->piece;
    const size_t n = info->piece_len;
    run_state *rs = user;
    if (info->token >= 0) {
        note_token_time(rs);
    }
    if (rs->stream) {
        fwrite(piece, 1, n, stdout);
        fflush(stdout);
    }
    if (rs->len + n + 1 > rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 4096;
        while (cap < rs->len + n + 1) {
            cap *= 2;
        }
        char *t = realloc(rs->text, cap);
        if (t == NULL) {
            return false;
        }
        rs->text = t;
        rs->cap = cap;
    }
    memcpy(rs->text + rs->len, piece, n);
    rs->len += n;
    rs->text[rs->len] = '\0';
    return true;
}

static const char *stop_name(lares_stop_reason r) {
    switch (r) {
    case LARES_STOP_EOS:
        return "eos";
    case LARES_STOP_LENGTH:
        return "length";
    case LARES_STOP_CALLER:
        return "stopped";
    case LARES_STOP_CANCELED:
        return "canceled";
    default:
        return "none";
    }
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(a, json_integer(ids[i]));
    }
    return a;
}

static void print_figures(const lares_stats *st, bool draft_model) {
    char b1[32], b2[32];
    fprintf(stderr,
            "\nlares: prompt %d tokens in %.1f ms (%.1f tok/s) | generation %d tokens in %.1f ms "
            "(%.1f tok/s) | first token %.1f ms\n",
            st->n_prompt, st->prompt_ms, st->prompt_tok_s, st->n_generated, st->gen_ms,
            st->gen_tok_s, st->ttft_ms);
    fprintf(stderr, "lares: peak RSS %s | major faults %" PRIu64 " | disk read %s | memory "
                    "pressure %.2f %% | load %.1f ms\n",
            app_fmt_bytes(st->peak_rss_bytes, b1, sizeof b1), st->major_faults,
            st->disk_read_bytes == UINT64_MAX ? "unknown"
                                              : app_fmt_bytes(st->disk_read_bytes, b2, sizeof b2),
            st->mem_pressure * 100.0, st->load_ms);
    if (draft_model) {
        fprintf(stderr,
                "lares: the draft model drafted %d tokens, %d accepted (%.0f %%), %.2f tokens "
                "per pass of the model | drafting %.1f ms of the generation's %.1f ms\n",
                st->n_drafted, st->n_accepted,
                st->n_drafted > 0 ? 100.0 * st->n_accepted / st->n_drafted : 0.0,
                st->n_generated > st->n_accepted
                    ? (double)st->n_generated / (st->n_generated - st->n_accepted)
                    : 0.0,
                st->draft_ms, st->gen_ms);
    } else if (st->n_drafted > 0) {
        fprintf(stderr, "lares: lookup drafted %d tokens, %d accepted (%.0f %%)\n", st->n_drafted,
                st->n_accepted, 100.0 * st->n_accepted / st->n_drafted);
    }
    if (st->streaming) {
        char b3[32], b4[32], b5[32], b6[32];
        const int32_t passes = st->n_generated > 1 ? st->n_generated - 1 : 1;
        fprintf(stderr,
                "lares: weights stream from disk within a budget of %s: %s resident, %s read "
                "per token through a %s window | prefetched %s | per token %.1f ms computing + "
                "%.1f ms waiting for disk\n",
                app_fmt_bytes(st->mem_budget_bytes, b1, sizeof b1),
                app_fmt_bytes(st->pinned_bytes, b2, sizeof b2),
                app_fmt_bytes(st->stream_bytes, b3, sizeof b3),
                app_fmt_bytes(st->window_bytes, b4, sizeof b4),
                app_fmt_bytes(st->prefetch_bytes, b5, sizeof b5),
                (st->gen_ms - st->gen_wait_ms) / passes, st->gen_wait_ms / passes);
        if (st->stream_direct) {
            fprintf(stderr, "lares: streamed weights read directly (O_DIRECT): %s into buffers "
                    "of at most %s\n", app_fmt_bytes(st->direct_bytes, b5, sizeof b5),
                    app_fmt_bytes(st->buffer_bytes, b6, sizeof b6));
        }
        if (st->probe_direct_Bps > 0) {
            fprintf(stderr,
                    "lares: this file read at %.2f GB/s directly and %.2f GB/s through the page "
                    "cache (a probe): streamed %s\n",
                    st->probe_direct_Bps / 1e9, st->probe_mmap_Bps / 1e9,
                    st->stream_direct ? "directly" : "through the page cache");
        }
        if (st->route_overlap >= 0) { /* MoE: how the expert cache reads */
            fprintf(stderr, "lares: expert slices read %s",
                    st->expert_direct ? "directly (O_DIRECT) into owned slots"
                                      : "through the page cache");
            if (st->expert_probe_direct_Bps > 0) {
                fprintf(stderr, " (a probe: %.2f GB/s directly, %.2f GB/s through the page cache)",
                        st->expert_probe_direct_Bps / 1e9, st->expert_probe_mmap_Bps / 1e9);
            }
            fputc('\n', stderr);
        }
        if (st->locked_bytes > 0) {
            fprintf(stderr, "lares: %s of weights locked in memory\n",
                    app_fmt_bytes(st->locked_bytes, b6, sizeof b6));
        }
    }
}

static void print_json(const run_opts *o, const lares_model *m, const lares_session *s,
                       const int32_t *prompt_ids, size_t n_prompt, const int32_t *gen,
                       size_t n_gen, const run_state *rs, const lares_stats *st) {
    lares_model_info info;
    lares_model_get_info(m, &info);
    json_t *root = json_object();
    json_object_set_new(root, "model", json_string(o->model));
    json_object_set_new(root, "arch", json_string(info.arch));
    if (o->draft != NULL) {
        json_object_set_new(root, "draft_model", json_string(o->draft));
        json_object_set_new(root, "draft_n", json_integer(o->draft_n));
    }
    if (o->draft != NULL || o->lookup > 0) {
        json_object_set_new(root, "spec_always", json_boolean(o->spec_always));
    }
    json_object_set_new(root, "prompt", json_string(o->prompt ? o->prompt : ""));
    json_object_set_new(root, "prompt_ids", ids_json(prompt_ids, n_prompt));
    json_object_set_new(root, "generated_ids", ids_json(gen, n_gen));
    json_object_set_new(root, "text", json_stringn(rs->text ? rs->text : "", rs->len));
    json_object_set_new(root, "stop", json_string(stop_name(st->stop)));
    json_object_set_new(root, "seed", json_integer((json_int_t)o->sampler.seed));
    json_object_set_new(root, "threads", json_integer(o->session.n_threads ? o->session.n_threads : 0));
    json_object_set_new(root, "compute_threads", json_integer(lares_session_n_threads(s)));
    json_object_set_new(root, "n_ctx", json_integer(lares_session_n_ctx(s)));
    json_object_set_new(root, "isa", json_string(lares_isa()));
    json_object_set_new(root, "cpu_flags", json_string(lares_cpu_flags()));
    json_t *t = json_object();
    json_object_set_new(t, "load_ms", json_real(st->load_ms));
    json_object_set_new(t, "prompt_tokens", json_integer(st->n_prompt));
    json_object_set_new(t, "prompt_ms", json_real(st->prompt_ms));
    json_object_set_new(t, "prompt_tok_s", json_real(st->prompt_tok_s));
    json_object_set_new(t, "generated_tokens", json_integer(st->n_generated));
    json_object_set_new(t, "gen_ms", json_real(st->gen_ms));
    json_object_set_new(t, "gen_tok_s", json_real(st->gen_tok_s));
    json_object_set_new(t, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(t, "prompt_wait_ms", json_real(st->prompt_wait_ms));
    json_object_set_new(t, "gen_wait_ms", json_real(st->gen_wait_ms));
    json_object_set_new(t, "gen_compute_ms", json_real(st->gen_ms - st->gen_wait_ms));
    json_object_set_new(t, "drafted_tokens", json_integer(st->n_drafted));
    json_object_set_new(t, "accepted_tokens", json_integer(st->n_accepted));
    json_object_set_new(t, "draft_ms", json_real(st->draft_ms));
    json_t *gaps = json_array();
    for (size_t i = 0; i < rs->n_token_ms; i++) {
        json_array_append_new(gaps, json_real(rs->token_ms[i]));
    }
    json_object_set_new(t, "token_ms", gaps);
    json_object_set_new(root, "timings", t);
    json_t *mem = json_object();
    json_object_set_new(mem, "peak_rss_bytes", json_integer((json_int_t)st->peak_rss_bytes));
    json_object_set_new(mem, "major_faults", json_integer((json_int_t)st->major_faults));
    json_object_set_new(mem, "disk_read_bytes", st->disk_read_bytes == UINT64_MAX
                                                    ? json_null()
                                                    : json_integer((json_int_t)st->disk_read_bytes));
    json_object_set_new(mem, "mem_pressure", json_real(st->mem_pressure));
    json_object_set_new(mem, "budget_bytes", st->mem_budget_bytes == UINT64_MAX
                                                 ? json_null()
                                                 : json_integer((json_int_t)st->mem_budget_bytes));
    json_object_set_new(mem, "no_mmap", json_boolean(info.in_memory));
    json_object_set_new(mem, "streaming", json_boolean(st->streaming));
    json_object_set_new(mem, "stream_bytes", json_integer((json_int_t)st->stream_bytes));
    json_object_set_new(mem, "pinned_bytes", json_integer((json_int_t)st->pinned_bytes));
    json_object_set_new(mem, "window_bytes", json_integer((json_int_t)st->window_bytes));
    json_object_set_new(mem, "locked_bytes", json_integer((json_int_t)st->locked_bytes));
    json_object_set_new(mem, "prefetch_bytes", json_integer((json_int_t)st->prefetch_bytes));
    json_object_set_new(mem, "prefetch_ms", json_real(st->prefetch_ms));
    json_object_set_new(mem, "stream_io",
                        json_string(!st->streaming ? "none" : st->stream_direct ? "direct" : "mmap"));
    json_object_set_new(mem, "direct_bytes", json_integer((json_int_t)st->direct_bytes));
    json_object_set_new(mem, "probe", st->probe_direct_Bps > 0 ? app_probe_json(st) : json_null());
    json_object_set_new(mem, "buffer_bytes", json_integer((json_int_t)st->buffer_bytes));
    json_object_set_new(mem, "experts", app_expert_io_json(st));
    if (st->route_overlap >= 0) { /* MoE, over the generated tokens */
        json_object_set_new(mem, "expert_hits", json_integer((json_int_t)st->expert_hits));
        json_object_set_new(mem, "expert_misses", json_integer((json_int_t)st->expert_misses));
        json_object_set_new(mem, "expert_guesses", json_integer((json_int_t)st->expert_guesses));
        json_object_set_new(mem, "expert_guess_hits",
                            json_integer((json_int_t)st->expert_guess_hits));
        json_object_set_new(mem, "expert_guesses_made",
                            json_integer((json_int_t)st->expert_guesses_made));
        json_object_set_new(mem, "expert_guesses_picked",
                            json_integer((json_int_t)st->expert_guesses_picked));
    }
    json_object_set_new(root, "memory", mem);
    lares_gpu_info gi;
    if (lares_session_gpu_info(s, &gi)) {
        json_t *g = json_object();
        json_object_set_new(g, "backend", json_string(gi.backend));
        json_object_set_new(g, "device", json_string(gi.device));
        json_object_set_new(g, "method", json_string(gi.method));
        json_object_set_new(g, "budget_bytes", json_integer((json_int_t)gi.budget_bytes));
        json_object_set_new(g, "weight_bytes", json_integer((json_int_t)gi.weight_bytes));
        json_object_set_new(g, "model_weight_bytes",
                            json_integer((json_int_t)gi.model_weight_bytes));
        json_object_set_new(g, "matrices", json_integer(gi.n_matrices));
        json_object_set_new(g, "matrices_gpu", json_integer(gi.n_matrices_gpu));
        json_object_set_new(g, "layers_device", json_integer(gi.n_layers_device));
        json_object_set_new(g, "predicted_ms", json_real(gi.predicted_ms));
        json_object_set_new(g, "cpu_predicted_ms", json_real(gi.cpu_predicted_ms));
        json_object_set_new(g, "products", json_integer((json_int_t)gi.n_products));
        json_object_set_new(g, "layer_runs", json_integer((json_int_t)gi.n_layer_runs));
        json_object_set_new(root, "gpu", g);
    }
    json_t *ring = app_ring_json(s);
    if (ring != NULL) {
        json_object_set_new(root, "ring", ring);
    }
    char *txt = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (txt != NULL) {
        puts(txt);
        free(txt);
    }
    json_decref(root);
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse_run(argc, argv, &o);
    if (rc >= 0) {
        return rc;
    }
    app_setup_log(o.verbosity);
    lares_error err = {0};
    if (o.isa != NULL && lares_force_isa(o.isa, &err) != LARES_OK) {
        return app_fail(&err);
    }
    size_t plen = 0;
    char *file_prompt = NULL;
    const char *prompt = o.prompt;
    if (o.prompt_file != NULL) {
        file_prompt = app_read_all(o.prompt_file, &plen);
        if (file_prompt == NULL) {
            return APP_FAIL;
        }
        prompt = file_prompt;
    } else {
        plen = strlen(prompt);
    }

    lares_model *m = NULL, *dm = NULL;
    lares_session *s = NULL;
    int32_t *ids = NULL, *gen = NULL;
    size_t n_ids = 0, n_gen = 0;
    run_state rs = {.stream = !o.json};
    rc = APP_FAIL;
    if (lares_model_open(o.model, app_model_opts(), &m, &err) != LARES_OK ||
        lares_session_create(m, &o.session, &s, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    if (o.draft != NULL && lares_model_open(o.draft, app_model_opts(), &dm, &err) != LARES_OK) {
        app_error("run: draft model: %s", err.msg);
        goto done;
    }
    if (dm != NULL && lares_session_set_draft(s, dm, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    lares_tokenize_opts to = {.add_bos = o.add_bos, .parse_special = o.parse_special};
    if (lares_tokenize(m, prompt, plen, &to, &ids, &n_ids, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    if (n_ids == 0) {
        app_error("run: the prompt gives no tokens (empty prompt with --no-bos?)");
        goto done;
    }
    if (o.verbosity > 0) {
        fprintf(stderr, "lares: %zu prompt tokens, seed %" PRIu64 ", kernels %s\n", n_ids,
                o.sampler.seed, lares_isa());
    }
    size_t cap = o.n_predict >= 0 ? (size_t)o.n_predict : (size_t)lares_session_n_ctx(s);
    gen = malloc((cap ? cap : 1) * sizeof *gen);
    if (gen == NULL) {
        app_error("out of memory");
        goto done;
    }
    lares_generate_opts go = {.n_predict = o.n_predict, .sampler = o.sampler,
                              .on_token = on_token, .user = &rs, .lookup = o.lookup,
                              .draft_n = o.draft_n, .spec_always = o.spec_always};
    if (!o.json && o.echo_prompt) {
        fwrite(prompt, 1, plen, stdout);
        fflush(stdout);
    }
    lares_stats st;
    if (lares_generate(s, ids, n_ids, &go, gen, cap, &n_gen, &st, &err) != LARES_OK) {
        if (!o.json) {
            fputc('\n', stdout);
        }
        rc = app_fail(&err);
        goto done;
    }
    if (o.json) {
        print_json(&o, m, s, ids, n_ids, gen, n_gen, &rs, &st);
    } else {
        fputc('\n', stdout);
        fflush(stdout);
        if (o.verbosity >= 0) {
            print_figures(&st, o.draft != NULL);
            app_ring_print(s);
        }
    }
    rc = APP_OK;
done:
    free(gen);
    free(rs.text);
    free(rs.token_ms);
    lares_free(ids);
    lares_session_free(s); /* with its draft session */
    lares_model_close(dm);
    lares_model_close(m);
    free(file_prompt);
    return rc;
}
