/* lares plan --check: runs the planner's placement and the baselines on a
 * real ring for a few tokens each and prints what each was predicted beside
 * what it measured, per device and per token (docs/scheduling-impl.md,
 * "Checking a plan"). */
#include "app.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK_MAX_DEVICES 64
#define CHECK_MAX_TOKENS  4096

typedef struct gap_clock {
    double t[CHECK_MAX_TOKENS];
    int32_t n;
} gap_clock;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool on_token(const lares_token_info *t, void *user) {
    (void)t;
    gap_clock *c = user;
    if (c->n < CHECK_MAX_TOKENS) {
        c->t[c->n++] = now_ms();
    }
    return true;
}

/* Steady state: the mean gap between generated tokens over the second half
 * of the gaps (the first tokens still read in what the prompt left out);
 * -1 with fewer than two tokens. */
static double steady_ms(const gap_clock *c) {
    if (c->n < 2) {
        return -1;
    }
    const int32_t gaps = c->n - 1, from = gaps / 2;
    return (c->t[c->n - 1] - c->t[from]) / (double)(gaps - from);
}

/* One placement run: its JSON entry, or NULL with *err set. */
static json_t *run_placement(lares_model *m, const app_plan_check_opts *o, const char *placement,
                             const int32_t *ids, size_t n_ids, lares_error *err) {
    lares_session_opts so = lares_session_opts_default();
    so.ring = o->ring;
    so.ring_insecure = o->insecure;
    so.ring_placement = placement;
    so.ring_plan_even = true; /* even with its prediction, as the others */
    so.ring_rebalance = -1; /* the plan as made: a re-balance would change what is checked */
    so.n_threads = o->n_threads;
    so.n_ctx = o->n_ctx;
    lares_session *s = NULL;
    if (lares_session_create(m, &so, &s, err) != LARES_OK) {
        return NULL;
    }
    gap_clock *clk = calloc(1, sizeof *clk);
    int32_t *gen = malloc((size_t)o->n_tokens * sizeof *gen);
    json_t *out = NULL;
    if (clk == NULL || gen == NULL) {
        lares_session_free(s);
        free(clk);
        free(gen);
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    lares_generate_opts go = lares_generate_opts_default();
    go.n_predict = o->n_tokens;
    go.sampler.temperature = 0;
    go.on_token = on_token;
    go.user = clk;
    size_t n_gen = 0;
    lares_stats st;
    lares_ring_stats rs;
    lares_ring_device dev[CHECK_MAX_DEVICES];
    if (lares_generate(s, ids, n_ids, &go, gen, (size_t)o->n_tokens, &n_gen, &st, err) ==
            LARES_OK &&
        lares_session_ring_stats(s, &rs, dev, CHECK_MAX_DEVICES, err) == LARES_OK) {
        out = json_object();
        const double meas = steady_ms(clk);
        json_object_set_new(out, "placement", json_string(placement));
        json_object_set_new(out, "made_by", json_string(rs.placement ? rs.placement : ""));
        json_object_set_new(out, "k", json_integer(rs.rounds));
        json_object_set_new(out, "tokens", json_integer((json_int_t)n_gen));
        json_object_set_new(out, "predicted_token_ms",
                            rs.predicted_token_ms >= 0 ? json_real(rs.predicted_token_ms)
                                                       : json_null());
        json_object_set_new(out, "measured_token_ms", meas >= 0 ? json_real(meas) : json_null());
        json_object_set_new(out, "ratio", meas >= 0 && rs.predicted_token_ms > 0
                                              ? json_real(meas / rs.predicted_token_ms)
                                              : json_null());
        json_t *arr = json_array();
        for (int32_t d = 0; d < rs.n_config && d < CHECK_MAX_DEVICES; d++) {
            if (!dev[d].in_ring || dev[d].w == 0) {
                continue;
            }
            json_t *e = json_object();
            json_object_set_new(e, "name", json_string(dev[d].name));
            json_object_set_new(e, "w", json_integer(dev[d].w));
            json_object_set_new(e, "layers", json_integer(dev[d].n_layers));
            json_object_set_new(e, "predicted_layer_ms", dev[d].predicted_ms >= 0
                                                             ? json_real(dev[d].predicted_ms)
                                                             : json_null());
            json_object_set_new(e, "measured_layer_ms", dev[d].measured_ms >= 0
                                                            ? json_real(dev[d].measured_ms)
                                                            : json_null());
            json_object_set_new(e, "predicted_token_ms",
                                dev[d].predicted_token_ms >= 0
                                    ? json_real(dev[d].predicted_token_ms)
                                    : json_null());
            json_object_set_new(e, "measured_compute_ms",
                                dev[d].measured_ms >= 0
                                    ? json_real(dev[d].measured_ms * dev[d].n_layers)
                                    : json_null());
            json_array_append_new(arr, e);
        }
        json_object_set_new(out, "devices", arr);
    }
    lares_session_free(s);
    free(clk);
    free(gen);
    return out;
}

static double jnum(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : -1;
}

static void fmt_ms(double v, char *buf, size_t cap) {
    if (v >= 0) {
        snprintf(buf, cap, "%.2f", v);
    } else {
        snprintf(buf, cap, "-");
    }
}

static void print_human(json_t *runs) {
    size_t i;
    json_t *r;
    printf("%-10s %4s %16s %16s %7s\n", "placement", "k", "predicted ms/tok", "measured ms/tok",
           "ratio");
    json_array_foreach(runs, i, r) {
        const char *pl = json_string_value(json_object_get(r, "placement"));
        if (json_object_get(r, "error") != NULL) {
            printf("%-10s %s\n", pl, json_string_value(json_object_get(r, "error")));
            continue;
        }
        char p[32], m[32], q[32];
        fmt_ms(jnum(r, "predicted_token_ms"), p, sizeof p);
        fmt_ms(jnum(r, "measured_token_ms"), m, sizeof m);
        fmt_ms(jnum(r, "ratio"), q, sizeof q);
        printf("%-10s %4d %16s %16s %7s\n", pl, (int)jnum(r, "k"), p, m, q);
        size_t j;
        json_t *d;
        json_array_foreach(json_object_get(r, "devices"), j, d) {
            char pl_ms[32], ml_ms[32], pt[32], mc[32];
            fmt_ms(jnum(d, "predicted_layer_ms"), pl_ms, sizeof pl_ms);
            fmt_ms(jnum(d, "measured_layer_ms"), ml_ms, sizeof ml_ms);
            fmt_ms(jnum(d, "predicted_token_ms"), pt, sizeof pt);
            fmt_ms(jnum(d, "measured_compute_ms"), mc, sizeof mc);
            printf("  %-14s layers %-4d ms/layer %s predicted, %s measured; share of a token %s "
                   "ms predicted, compute %s ms measured\n",
                   json_string_value(json_object_get(d, "name")), (int)jnum(d, "layers"), pl_ms,
                   ml_ms, pt, mc);
        }
    }
}

int app_plan_check(const app_plan_check_opts *o) {
    lares_error err = {0};
    lares_model *m = NULL;
    if (lares_model_open(o->model, NULL, &m, &err) != LARES_OK) {
        return app_fail(&err);
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    lares_tokenize_opts to = {.add_bos = true};
    const char *prompt = "Once upon a time";
    if (lares_tokenize(m, prompt, strlen(prompt), &to, &ids, &n_ids, &err) != LARES_OK) {
        lares_model_close(m);
        return app_fail(&err);
    }
    json_t *runs = json_array();
    int n_ran = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", o->placements);
    char *save = NULL;
    for (char *p = strtok_r(list, " ,", &save); p != NULL; p = strtok_r(NULL, " ,", &save)) {
        lares_error perr = {0};
        if (o->verbose) {
            fprintf(stderr, "lares: plan --check: running %s for %d tokens\n", p, o->n_tokens);
        }
        json_t *r = run_placement(m, o, p, ids, n_ids, &perr);
        if (r == NULL) {
            /* a placement that cannot run (the devices cannot hold it that way):
             * reported in its row; the others still run */
            r = json_object();
            json_object_set_new(r, "placement", json_string(p));
            json_object_set_new(r, "error", json_string(perr.msg));
        } else {
            n_ran++;
        }
        json_array_append_new(runs, r);
    }
    if (o->json) {
        json_t *root = json_object();
        json_object_set_new(root, "model", json_string(o->model));
        json_object_set_new(root, "ring", json_string(o->ring));
        json_object_set_new(root, "cpu_flags", json_string(lares_cpu_flags()));
        json_object_set_new(root, "isa", json_string(lares_isa()));
        json_object_set_new(root, "placements", runs);
        char *text = json_dumps(root, JSON_INDENT(2));
        if (text != NULL) {
            printf("%s\n", text);
            free(text);
        }
        json_decref(root);
    } else {
        print_human(runs);
        json_decref(runs);
    }
    lares_free(ids);
    lares_model_close(m);
    if (n_ran == 0) {
        app_error("plan --check: no placement could run on %s", o->ring);
        return APP_FAIL;
    }
    return APP_OK;
}
