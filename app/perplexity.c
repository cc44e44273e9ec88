/*
 * lares perplexity: a model's perplexity over a text file, and its KL
 * divergence from a base model, as users of the reference engine's
 * llama-perplexity check quantizations (docs/perplexity.md). The library
 * scores (lares_score); this file parses, prints the running estimate on
 * stderr and the figures on stdout (or one JSON object with --json).
 */
#include "app.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct ppl_opts {
    const char *model, *text, *kld_file, *isa;
    bool kld_compare, json;
    int32_t n_ctx, n_chunks;
    lares_session_opts session;
} ppl_opts;

static void usage(FILE *to) {
    fputs("usage: lares perplexity -m MODEL -f TEXT [-c N] [-b N] [-t N] [--chunks N] [--json]\n"
          "       lares perplexity -m BASE -f TEXT --kl-divergence-base FILE [-c N] ...\n"
          "       lares perplexity -m MODEL [-f TEXT] --kl-divergence-base FILE --kl-divergence\n"
          "  -m, --model FILE        the model (GGUF)\n"
          "  -f, --file FILE         the text, tokenized with BOS as the model wants and cut\n"
          "                          into chunks; at least 2 chunks' worth of tokens\n"
          "  -c, --ctx-size N        tokens per chunk (default 512, or the model's context if\n"
          "                          smaller); the first half of each is context, the rest scored\n"
          "  -b, --batch-size N      tokens per forward pass (default 128)\n"
          "  -t, --threads N         threads (default: all cores)\n"
          "      --chunks N          score at most N chunks (default: all the text holds)\n"
          "      --kl-divergence-base FILE   save the model's log-probabilities of every scored\n"
          "                          token to FILE; with --kl-divergence, compare with them\n"
          "      --kl-divergence     compare with FILE: KL divergence, same top token, Δp,\n"
          "                          both perplexities (-f optional: FILE holds the tokens)\n"
          "      --kv-type T         KV cache precision: auto, f16, f32 (default auto)\n"
          "      --isa NAME          force the kernel family\n"
          "      --json              one JSON object on stdout\n",
          to);
}

static int parse(int argc, char **argv, ppl_opts *o) {
    memset(o, 0, sizeof *o);
    o->session = lares_session_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return APP_OK;
        }
        if (strcmp(a, "--json") == 0) {
            o->json = true;
            continue;
        }
        if (strcmp(a, "--kl-divergence") == 0) {
            o->kld_compare = true;
            continue;
        }
        static const char *const with_value[] = {
            "-m",    "--model",      "-f", "--file",    "-c",       "--ctx-size",
            "-b",    "--batch-size", "-t", "--threads", "--chunks", "--kl-divergence-base",
            "--isa", "--kv-type"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) {
            known = known || strcmp(a, with_value[k]) == 0;
        }
        if (!known) {
            app_error("perplexity: unknown option '%s' (lares perplexity --help)", a);
            return APP_USAGE;
        }
        if ((v = app_need_value(argc, argv, &i)) == NULL) {
            return APP_USAGE;
        }
        bool ok = true;
        if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            o->model = v;
        } else if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) {
            o->text = v;
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx-size") == 0) {
            ok = app_parse_i32(a, v, 4, 1 << 20, &o->n_ctx);
        } else if (strcmp(a, "-b") == 0 || strcmp(a, "--batch-size") == 0) {
            ok = app_parse_i32(a, v, 1, 1 << 16, &o->session.n_batch);
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            ok = app_parse_i32(a, v, 1, 512, &o->session.n_threads);
        } else if (strcmp(a, "--chunks") == 0) {
            ok = app_parse_i32(a, v, 1, 1 << 30, &o->n_chunks);
        } else if (strcmp(a, "--kl-divergence-base") == 0) {
            o->kld_file = v;
        } else if (strcmp(a, "--isa") == 0) {
            o->isa = v;
        } else if (strcmp(a, "--kv-type") == 0) {
            if (strcmp(v, "auto") == 0) {
                o->session.kv_type = LARES_KV_AUTO;
            } else if (strcmp(v, "f16") == 0) {
                o->session.kv_type = LARES_KV_F16;
            } else if (strcmp(v, "f32") == 0) {
                o->session.kv_type = LARES_KV_F32;
            } else {
                app_error("--kv-type: '%s' is not auto, f16 or f32", v);
                ok = false;
            }
        } else {
            app_error("perplexity: unknown option '%s' (lares perplexity --help)", a);
            ok = false;
        }
        if (!ok) {
            return APP_USAGE;
        }
    }
    if (o->model == NULL) {
        app_error("perplexity: no model given (-m MODEL)");
        return APP_USAGE;
    }
    if (o->kld_compare && o->kld_file == NULL) {
        app_error("perplexity: --kl-divergence needs the base file (--kl-divergence-base FILE)");
        return APP_USAGE;
    }
    if (o->text == NULL && !o->kld_compare) {
        app_error("perplexity: no text given (-f TEXT)");
        return APP_USAGE;
    }
    return -1;
}

/* user: a bool set once a running estimate is on the line */
static void on_chunk(const lares_score_chunk *c, void *user) {
    *(bool *)user = c->chunk < c->n_chunks;
    fprintf(stderr, "[%d]%.4f,", c->chunk, c->ppl);
    if (c->chunk == c->n_chunks) {
        fputc('\n', stderr);
    }
    fflush(stderr);
}

static void print_human(const lares_score_result *r) {
    printf("Final estimate: PPL = %.4f +/- %.5f\n", r->ppl, r->ppl_err);
    if (!r->kld) {
        return;
    }
    printf("\n====== Perplexity statistics ======\n"
           "Mean PPL(Q)                   : %10.6f ± %10.6f\n"
           "Mean PPL(base)                : %10.6f ± %10.6f\n"
           "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n",
           r->ppl, r->ppl_err, r->base_ppl, r->base_ppl_err, r->ppl_ratio, r->ppl_ratio_err);
    printf("\n====== KL divergence statistics ======\n"
           "Mean    KLD: %10.6f ± %10.6f\n"
           "Maximum KLD: %10.6f\n"
           "99.9%%   KLD: %10.6f\n"
           "99.0%%   KLD: %10.6f\n"
           "95.0%%   KLD: %10.6f\n"
           "90.0%%   KLD: %10.6f\n"
           "Median  KLD: %10.6f\n"
           "10.0%%   KLD: %10.6f\n"
           " 5.0%%   KLD: %10.6f\n"
           " 1.0%%   KLD: %10.6f\n"
           " 0.1%%   KLD: %10.6f\n"
           "Minimum KLD: %10.6f\n",
           r->kld_mean, r->kld_err, r->kld_max, r->kld_p99_9, r->kld_p99, r->kld_p95, r->kld_p90,
           r->kld_median, r->kld_p10, r->kld_p5, r->kld_p1, r->kld_p0_1, r->kld_min);
    printf("\n====== Token probability statistics ======\n"
           "Mean    Δp: %8.3f ± %.3f %%\n"
           "RMS     Δp: %8.3f %%\n"
           "Same top p: %8.3f ± %.3f %%\n",
           100 * r->dp_mean, 100 * r->dp_err, 100 * r->dp_rms, 100 * r->same_top,
           100 * r->same_top_err);
}

static void print_json(const ppl_opts *o, size_t n_tokens, const lares_score_result *r) {
    json_t *root = json_object();
    json_object_set_new(root, "model", json_string(o->model));
    json_object_set_new(root, "text", o->text ? json_string(o->text) : json_null());
    json_object_set_new(root, "isa", json_string(lares_isa()));
    json_object_set_new(root, "cpu_flags", json_string(lares_cpu_flags()));
    json_object_set_new(root, "n_tokens", json_integer((json_int_t)n_tokens));
    json_object_set_new(root, "n_ctx", json_integer(r->n_ctx));
    json_object_set_new(root, "n_chunks", json_integer(r->n_chunks));
    json_object_set_new(root, "n_scored", json_integer((json_int_t)r->n_scored));
    json_object_set_new(root, "nll", json_real(r->nll));
    json_object_set_new(root, "nll_err", json_real(r->nll_err));
    json_object_set_new(root, "ppl", json_real(r->ppl));
    json_object_set_new(root, "ppl_err", json_real(r->ppl_err));
    json_object_set_new(root, "ms", json_real(r->ms));
    if (o->kld_file != NULL && !o->kld_compare) {
        json_object_set_new(root, "kld_base_saved", json_string(o->kld_file));
    }
    if (r->kld) {
        json_t *k = json_object();
        json_object_set_new(k, "base", json_string(o->kld_file));
        json_object_set_new(k, "base_ppl", json_real(r->base_ppl));
        json_object_set_new(k, "base_ppl_err", json_real(r->base_ppl_err));
        json_object_set_new(k, "ppl_ratio", json_real(r->ppl_ratio));
        json_object_set_new(k, "ppl_ratio_err", json_real(r->ppl_ratio_err));
        json_object_set_new(k, "mean", json_real(r->kld_mean));
        json_object_set_new(k, "err", json_real(r->kld_err));
        json_object_set_new(k, "max", json_real(r->kld_max));
        json_object_set_new(k, "p99_9", json_real(r->kld_p99_9));
        json_object_set_new(k, "p99", json_real(r->kld_p99));
        json_object_set_new(k, "p95", json_real(r->kld_p95));
        json_object_set_new(k, "p90", json_real(r->kld_p90));
        json_object_set_new(k, "median", json_real(r->kld_median));
        json_object_set_new(k, "p10", json_real(r->kld_p10));
        json_object_set_new(k, "p5", json_real(r->kld_p5));
        json_object_set_new(k, "p1", json_real(r->kld_p1));
        json_object_set_new(k, "p0_1", json_real(r->kld_p0_1));
        json_object_set_new(k, "min", json_real(r->kld_min));
        json_object_set_new(k, "same_top_pct", json_real(100 * r->same_top));
        json_object_set_new(k, "same_top_err_pct", json_real(100 * r->same_top_err));
        json_object_set_new(k, "dp_mean_pct", json_real(100 * r->dp_mean));
        json_object_set_new(k, "dp_err_pct", json_real(100 * r->dp_err));
        json_object_set_new(k, "dp_rms_pct", json_real(100 * r->dp_rms));
        json_object_set_new(root, "kld", k);
    }
    char *txt = json_dumps(root, JSON_COMPACT);
    if (txt != NULL) {
        puts(txt);
        free(txt);
    }
    json_decref(root);
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) {
        return rc;
    }
    app_setup_log(0);
    lares_error err = {0};
    if (o.isa != NULL && lares_force_isa(o.isa, &err) != LARES_OK) {
        return app_fail(&err);
    }
    char *text = NULL;
    size_t text_len = 0;
    if (o.text != NULL && (text = app_read_all(o.text, &text_len)) == NULL) {
        return APP_FAIL;
    }
    lares_model *m = NULL;
    lares_session *s = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    rc = APP_FAIL;
    if (lares_model_open(o.model, NULL, &m, &err) != LARES_OK) {
        app_fail(&err);
        goto done;
    }
    lares_model_info info;
    lares_model_get_info(m, &info);
    if (text != NULL) {
        lares_tokenize_opts to = lares_tokenize_opts_default();
        if (lares_tokenize(m, text, text_len, &to, &tokens, &n_tokens, &err) != LARES_OK) {
            app_fail(&err);
            goto done;
        }
    }
    /* the session holds one chunk: -c, else 512 or the model's context if smaller;
     * comparing without -c, the base file's chunk */
    if (o.n_ctx > 0) {
        o.session.n_ctx = o.n_ctx;
    } else if (o.kld_compare) {
        int32_t nv, nc, nch;
        if (lares_score_base_info(o.kld_file, &nv, &nc, &nch, &err) != LARES_OK) {
            app_fail(&err);
            goto done;
        }
        o.session.n_ctx = nc;
    } else {
        o.session.n_ctx = info.n_ctx_train < 512 ? info.n_ctx_train : 512;
    }
    if (lares_session_create(m, &o.session, &s, &err) != LARES_OK) {
        app_fail(&err);
        goto done;
    }
    lares_score_opts so = lares_score_opts_default();
    so.n_ctx = o.n_ctx;
    so.n_chunks = o.n_chunks;
    so.kld_base_in = o.kld_compare ? o.kld_file : NULL;
    so.kld_base_out = o.kld_compare ? NULL : o.kld_file;
    bool mid_line = false;
    so.on_chunk = on_chunk;
    so.user = &mid_line;
    lares_score_result r;
    if (lares_score(s, tokens, n_tokens, &so, &r, &err) != LARES_OK) {
        if (mid_line) {
            fputc('\n', stderr);
        }
        app_fail(&err);
        goto done;
    }
    if (o.json) {
        print_json(&o, n_tokens, &r);
    } else {
        /* after the work, so that a refusal stays one line */
        fprintf(stderr,
                "perplexity: %s over %s: %d chunks of %d tokens, %" PRId64
                " scored, %.2f s, isa %s (cpu: %s)\n",
                o.model, o.text ? o.text : o.kld_file, r.n_chunks, r.n_ctx, r.n_scored, r.ms / 1000,
                lares_isa(), lares_cpu_flags());
        print_human(&r);
        if (o.kld_file != NULL && !o.kld_compare) {
            fprintf(stderr, "perplexity: base log-probabilities saved to %s\n", o.kld_file);
        }
    }
    rc = APP_OK;
done:
    lares_free(tokens);
    lares_session_free(s);
    lares_model_close(m);
    free(text);
    return rc;
}
