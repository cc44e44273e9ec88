/*
 * api/batch: several sequences decoding together give each the tokens it gets
 * alone (greedy, and sampled with a seed), whether they start together, join
 * between steps, read their prompts in small chunks, reuse a cached prefix or
 * draft by prompt lookup or with a draft model;
 * a cancelled sequence frees its slot without touching the others; bad calls
 * are refused with a message (issue 20).
 */
#include "api/batch_impl.h"
#include "check.h"
#include "core/core.h"
#include "greedy_cases.h"
#include "lares.h"

#define N_SEQ  4
#define N_GEN  24
#define MAX_TOK 64

static const char *const prompts[N_SEQ] = {
    "Once upon a time",
    "The little dog ran to the park and",
    "Tom",
    "One day, a girl named Lily found a big red ball in the garden. She",
};

typedef struct collect {
    int32_t ids[MAX_TOK];
    int n;
    float margin[MAX_TOK]; /* alone: the top logit over the runner-up's, per token */
} collect;

/* Where a quantized file's greedy tokens may leave those alone: a product
 * over another number of rows takes another path (the few-row product, the
 * GEMM, vec_dot) whose sums round differently, and the logits move by about
 * 1e-3, so a draw whose top two logits are this close may pick the other
 * (TinyStories-656K Q4_1, "Tom" with prompt lookup: 0.030 at token 16) */
#define NEAR_TIE 0.05f

static void on_logits_margin(float *logits, int32_t n_vocab, void *user) {
    collect *c = user;
    float top = -INFINITY, second = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (logits[i] > top) {
            second = top;
            top = logits[i];
        } else if (logits[i] > second) {
            second = logits[i];
        }
    }
    if (c->n < MAX_TOK) {
        c->margin[c->n] = top - second;
    }
}

/* the index of the first token whose draw was a near tie alone (c->n: none) */
static int first_near_tie(const collect *c) {
    int k = 0;
    while (k < c->n && c->margin[k] >= NEAR_TIE) {
        k++;
    }
    return k;
}

static bool on_token(const lares_token_info *t, void *user) {
    collect *c = user;
    if (t->token >= 0 && c->n < MAX_TOK) {
        c->ids[c->n++] = t->token;
    }
    return true;
}

static lares_generate_opts gen_opts(collect *c, bool sampled) {
    lares_generate_opts o = lares_generate_opts_default();
    o.n_predict = N_GEN;
    if (!sampled) {
        o.sampler.temperature = 0;
    } else {
        o.sampler.seed = 1234;
    }
    o.on_token = on_token;
    o.user = c;
    return o;
}

/* The tokens prompt p gets from lares_generate alone. */
static void alone(lares_model *m, const int32_t *ids, size_t n, bool sampled, collect *out) {
    lares_error err = {0};
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = 256;
    so.n_threads = 2;
    lares_session *s = NULL;
    CHECK_OK(lares_session_create(m, &so, &s, &err), &err);
    if (s == NULL) {
        return;
    }
    memset(out, 0, sizeof *out);
    lares_generate_opts o = gen_opts(out, sampled);
    o.on_logits = on_logits_margin;
    CHECK_OK(lares_generate(s, ids, n, &o, NULL, 0, NULL, NULL, &err), &err);
    lares_session_free(s);
}

typedef struct prompt_ids {
    int32_t *ids;
    size_t n;
} prompt_ids;

/* Every prompt's ids, and the greedy tokens each gets alone */
static void prompts_alone(lares_model *m, prompt_ids p[N_SEQ], collect want[N_SEQ]) {
    lares_error err = {0};
    for (int i = 0; i < N_SEQ; i++) {
        p[i].ids = NULL;
        CHECK_OK(lares_tokenize(m, prompts[i], strlen(prompts[i]), NULL, &p[i].ids, &p[i].n, &err),
                 &err);
        alone(m, p[i].ids, p[i].n, false, &want[i]);
    }
}

/* Runs the batch until every sequence is done. */
static int run_all(lares_batch *b) {
    lares_error err = {0};
    int steps = 0, active = 1;
    while (active > 0 && steps < 1000) {
        if (lares_batch_step(b, &active, &err) != LARES_OK) {
            CHECKF(false, "step: %s", err.msg);
            return steps;
        }
        steps++;
    }
    return steps;
}

static int agree(const collect *a, const collect *b) {
    int k = 0;
    while (k < a->n && k < b->n && a->ids[k] == b->ids[k]) {
        k++;
    }
    return k;
}

/* every test model: together, staggered, chunked, sampled. Sampled tokens
 * equal those of the sequence alone where the logits are: float weights,
 * whose products sum in the same order however many rows share them. With
 * quantized weights a product over several rows may convert its activations
 * to another format than one row does (docs/kernels.md), the logits move by
 * about 1e-3, and a draw that falls that close to a boundary of the
 * cumulative distribution picks the neighbour: there the sampled run must be
 * reproducible (arrangement 4 repeats arrangement 3). */
static void test_equal_alone(const char *file, int min_agree) {
    lares_error err = {0};
    lares_model *m = NULL;
    CHECK_OK(lares_model_open(fixture(file), NULL, &m, &err), &err);
    if (m == NULL) {
        return;
    }
    prompt_ids p[N_SEQ];
    collect want[N_SEQ], want_s[N_SEQ], first_sampled[N_SEQ];
    lares_model_info info;
    lares_model_get_info(m, &info);
    const bool float_weights =
        strcmp(info.file_type, "f32") == 0 || strcmp(info.file_type, "f16") == 0;
    for (int i = 0; i < N_SEQ; i++) {
        p[i].ids = NULL;
        CHECK_OK(lares_tokenize(m, prompts[i], strlen(prompts[i]), NULL, &p[i].ids, &p[i].n, &err),
                 &err);
        alone(m, p[i].ids, p[i].n, false, &want[i]);
        alone(m, p[i].ids, p[i].n, true, &want_s[i]);
    }
    /* three arrangements: all at once; 0 first and the rest after 3 steps;
     * prompts read 3 rows at a time (a batch of 5 rows for 4 sequences) */
    /* 6 and 7: greedy and sampled with prompt lookup (up to 4 drafts a step) */
    int drafted = 0;
    for (int arr = 0; arr < 8; arr++) {
        lares_session_opts so = lares_session_opts_default();
        so.n_ctx = 256;
        so.n_threads = 2;
        so.n_batch = arr == 2 ? 5 : 0;
        lares_batch *b = NULL;
        CHECK_OK(lares_batch_create(m, &so, N_SEQ, &b, &err), &err);
        if (b == NULL) {
            continue;
        }
        /* prompts read whole, as alone (the few rows a step reads while others
         * are active sum in other orders: test_interactive); arrangement 5
         * reads one prompt row a step, so that its first steps end no prompt
         * and draw nothing: equal to alone on float weights, whole answers
         * on all */
        lares_batch_set_shared_prompt_rows(b, arr < 5 ? 0 : 1);
        const bool sampled = (arr >= 3 && arr < 6) || arr == 7;
        collect got[N_SEQ];
        memset(got, 0, sizeof got);
        lares_generate_opts o[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            o[i] = gen_opts(&got[i], sampled);
            o[i].lookup = arr >= 6 ? 4 : 0;
        }
        int first = arr == 1 ? 1 : N_SEQ;
        for (int i = 0; i < first; i++) {
            CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
        }
        if (arr == 1) {
            int active;
            for (int k = 0; k < 3; k++) {
                CHECK_OK(lares_batch_step(b, &active, &err), &err);
            }
            CHECK(active == 1 && lares_batch_active(b, 0) && !lares_batch_active(b, 1));
            for (int i = 1; i < N_SEQ; i++) {
                CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
            }
        }
        run_all(b);
        for (int i = 0; i < N_SEQ; i++) {
            if (arr == 3) {
                first_sampled[i] = got[i];
            }
            const collect *w = !sampled ? &want[i]
                               : arr == 4 || !float_weights ? &first_sampled[i]
                                                            : &want_s[i];
            /* quantized weights, greedy: equal up to the first near tie */
            const int tie = !sampled && !float_weights ? first_near_tie(w) : w->n;
            const int need = LARES_MIN(LARES_MIN(min_agree, w->n), tie);
            const int a = agree(&got[i], w);
            if ((arr == 5 || arr == 7) && !float_weights) {
                CHECKF(got[i].n > 0, "%s arrangement 5 sequence %d: no tokens", file, i);
            } else {
                CHECKF(a >= need && (min_agree < N_GEN || a < tie || got[i].n == w->n),
                       "%s arrangement %d sequence %d: %d of %d tokens as alone", file, arr, i, a,
                       w->n);
            }
            lares_stats st;
            lares_batch_stats(b, i, &st);
            CHECK(st.n_generated == got[i].n && st.stop != LARES_STOP_NONE);
            CHECK(st.n_accepted <= st.n_drafted && (arr >= 6 || st.n_drafted == 0));
            drafted += arr >= 6 ? st.n_drafted : 0;
        }
        lares_batch_free(b);
    }
    CHECKF(drafted > 0, "%s: no drafts with lookup", file);
    for (int i = 0; i < N_SEQ; i++) {
        lares_free(p[i].ids);
    }
    lares_model_close(m);
}

/* While one sequence reads a long prompt, the others are not held up: a
 * generating one gets a token every step, and a short prompt started
 * meanwhile is read first and gets its first token at once, long before the
 * long prompt is read (shared_prompt_rows a step). On float weights the
 * result is still each sequence's tokens alone. */
typedef struct step_log {
    collect c;
    int first_step; /* the step of its first token, -1: none yet */
    const int *step;
} step_log;

static bool on_token_step(const lares_token_info *t, void *user) {
    step_log *l = user;
    if (l->first_step < 0) {
        l->first_step = *l->step;
    }
    return on_token(t, &l->c);
}

/* A burst of requests: a prompt that began alone (a chunk a layer a step)
 * and three started after its first slice all get their first token in the
 * next step, read whole together (they fit a chunk's rows), and their tokens
 * are still those alone; with a share of 1 row (whole prompts up to 8 rows)
 * the longest ones wait for shares. */
static void test_burst(lares_model *m, const lares_session_opts *so) {
    lares_error err = {0};
    prompt_ids p[N_SEQ];
    collect want[N_SEQ];
    prompts_alone(m, p, want);
    for (int share = LARES_BATCH_SHARED_PROMPT_ROWS; share >= 1; share -= 7) {
        lares_batch *b = NULL;
        CHECK_OK(lares_batch_create(m, so, N_SEQ, &b, &err), &err);
        if (b == NULL) {
            continue;
        }
        lares_batch_set_shared_prompt_rows(b, share);
        int step = 0, active = 0;
        step_log lg[N_SEQ];
        lares_generate_opts o[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            lg[i] = (step_log){.first_step = -1, .step = &step};
            o[i] = gen_opts(&lg[i].c, false);
            o[i].on_token = on_token_step;
            o[i].user = &lg[i];
        }
        /* the longest prompt first, alone: more rows than a share, a chunk */
        CHECK_OK(lares_batch_start(b, 3, p[3].ids, p[3].n, &o[3], &err), &err);
        CHECK_OK(lares_batch_step(b, &active, &err), &err);
        step++;
        CHECKF(active == 1 && lg[3].first_step < 0, "the first prompt is in flight: %d", active);
        size_t rows = p[3].n;
        for (int i = 0; i < N_SEQ - 1; i++) {
            CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
            rows += p[i].n;
        }
        CHECK_OK(lares_batch_step(b, &active, &err), &err);
        step++;
        int started = 0;
        for (int i = 0; i < N_SEQ; i++) {
            started += lg[i].first_step == 1;
        }
        if (share == LARES_BATCH_SHARED_PROMPT_ROWS) {
            CHECKF(started == N_SEQ && rows <= 64,
                   "%d of %d first tokens in the step after the burst (%zu prompt rows)", started,
                   N_SEQ, rows);
        } else {
            /* 8 rows whole: "Tom" (2) and "Once upon a time" (5) */
            CHECKF(started == 2 && lg[2].first_step == 1 && lg[0].first_step == 1,
                   "share 1: %d first tokens in the step after the burst, want the two short",
                   started);
        }
        while (active > 0 && step < 400) {
            CHECK_OK(lares_batch_step(b, &active, &err), &err);
            step++;
        }
        for (int i = 0; i < N_SEQ; i++) {
            CHECKF(agree(&lg[i].c, &want[i]) == want[i].n && lg[i].c.n == want[i].n,
                   "share %d sequence %d: %d of %d tokens as alone", share, i,
                   agree(&lg[i].c, &want[i]), want[i].n);
        }
        lares_batch_free(b);
    }
    for (int i = 0; i < N_SEQ; i++) {
        lares_free(p[i].ids);
    }
}

static void test_interactive(void) {
    lares_error err = {0};
    lares_model *m = NULL;
    CHECK_OK(lares_model_open(fixture("stories260K.gguf"), NULL, &m, &err), &err);
    if (m == NULL) {
        return;
    }
    /* a prompt of 120 tokens: the story prompt again and again */
    int32_t *ids = NULL, *shrt = NULL, *gen = NULL;
    size_t n = 0, n_short = 0, n_gen = 0;
    CHECK_OK(lares_tokenize(m, prompts[3], strlen(prompts[3]), NULL, &ids, &n, &err), &err);
    CHECK_OK(lares_tokenize(m, prompts[2], strlen(prompts[2]), NULL, &shrt, &n_short, &err), &err);
    CHECK_OK(lares_tokenize(m, prompts[0], strlen(prompts[0]), NULL, &gen, &n_gen, &err), &err);
    int32_t longp[120];
    for (size_t i = 0; i < 120; i++) {
        longp[i] = ids[1 + i % (n - 1)];
    }
    longp[0] = ids[0];
    collect want_short = {0}, want_gen = {0}, want_long = {0};
    alone(m, shrt, n_short, false, &want_short);
    alone(m, gen, n_gen, false, &want_gen);
    alone(m, longp, 120, false, &want_long);
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = 256;
    so.n_threads = 2;
    so.n_batch = 128;
    lares_batch *b = NULL;
    CHECK_OK(lares_batch_create(m, &so, 3, &b, &err), &err);
    if (b != NULL) {
        int step = 0, active = 0;
        step_log lg = {.first_step = -1, .step = &step}, ll = {.first_step = -1, .step = &step},
                 ls = {.first_step = -1, .step = &step};
        lares_generate_opts og = gen_opts(&lg.c, false), ol = gen_opts(&ll.c, false),
                            os = gen_opts(&ls.c, false);
        og.on_token = ol.on_token = os.on_token = on_token_step;
        og.user = &lg;
        ol.user = &ll;
        os.user = &ls;
        og.n_predict = 40;
        /* one sequence generating, then a long prompt, then a short one */
        CHECK_OK(lares_batch_start(b, 0, gen, n_gen, &og, &err), &err);
        CHECK_OK(lares_batch_step(b, &active, &err), &err);
        step++;
        CHECK_OK(lares_batch_start(b, 1, longp, 120, &ol, &err), &err);
        int gen_before = lg.c.n;
        CHECK_OK(lares_batch_step(b, &active, &err), &err);
        step++;
        CHECKF(lg.c.n == gen_before + 1, "a token for the generating sequence while the long "
                                         "prompt is read: %d -> %d", gen_before, lg.c.n);
        const int short_start = step;
        CHECK_OK(lares_batch_start(b, 2, shrt, n_short, &os, &err), &err);
        while (active > 0 && step < 400) {
            gen_before = lg.c.n;
            const bool generating = lares_batch_active(b, 0) && lg.c.n < 40;
            CHECK_OK(lares_batch_step(b, &active, &err), &err);
            step++;
            if (generating && lares_batch_active(b, 0)) {
                CHECKF(lg.c.n == gen_before + 1, "step %d: no token for the generating sequence",
                       step);
            }
        }
        CHECKF(ls.first_step == short_start,
               "the short prompt's first token after %d steps (started at step %d)",
               ls.first_step - short_start, short_start);
        CHECKF(ll.first_step > ls.first_step + 5,
               "the long prompt (first token at step %d) is read in shares of %d rows",
               ll.first_step, LARES_BATCH_SHARED_PROMPT_ROWS);
        CHECK(agree(&lg.c, &want_gen) == want_gen.n && lg.c.n == 40); /* alone: the first 24 */
        CHECK(agree(&ls.c, &want_short) == want_short.n && ls.c.n == want_short.n);
        CHECK(agree(&ll.c, &want_long) == want_long.n && ll.c.n == want_long.n);
        lares_batch_free(b);
    }
    /* a long prompt read alone goes through the layers a slice per step: a
     * short prompt started after its first slice gets its first token at the
     * next step, and the long one then finishes its chunk */
    b = NULL;
    CHECK_OK(lares_batch_create(m, &so, 2, &b, &err), &err);
    if (b != NULL) {
        int step = 0, active = 0;
        step_log ll = {.first_step = -1, .step = &step}, ls = {.first_step = -1, .step = &step};
        lares_generate_opts ol = gen_opts(&ll.c, false), os = gen_opts(&ls.c, false);
        ol.on_token = os.on_token = on_token_step;
        ol.user = &ll;
        os.user = &ls;
        CHECK_OK(lares_batch_start(b, 0, longp, 120, &ol, &err), &err);
        CHECK_OK(lares_batch_step(b, &active, &err), &err);
        step++;
        CHECKF(active == 1 && ll.first_step < 0, "the long prompt is still in flight: %d", active);
        CHECK_OK(lares_batch_start(b, 1, shrt, n_short, &os, &err), &err);
        while (active > 0 && step < 400) {
            CHECK_OK(lares_batch_step(b, &active, &err), &err);
            step++;
        }
        CHECKF(ls.first_step == 1 && ll.first_step > 1,
               "first tokens: the short prompt's at step %d, the long one's at step %d",
               ls.first_step, ll.first_step);
        CHECK(agree(&ls.c, &want_short) == want_short.n && ls.c.n == want_short.n);
        CHECK(agree(&ll.c, &want_long) == want_long.n && ll.c.n == want_long.n);
        lares_batch_free(b);
    }
    test_burst(m, &so);
    lares_free(ids);
    lares_free(shrt);
    lares_free(gen);
    lares_model_close(m);
}

/* a cached prefix, a cancelled sequence, and refusals */
static void test_slots(void) {
    lares_error err = {0};
    lares_model *m = NULL;
    CHECK_OK(lares_model_open(fixture("stories260K.gguf"), NULL, &m, &err), &err);
    if (m == NULL) {
        return;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(lares_tokenize(m, prompts[1], strlen(prompts[1]), NULL, &ids, &n, &err), &err);
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = 256;
    so.n_threads = 1;
    lares_batch *b = NULL;
    CHECK_OK(lares_batch_create(m, &so, 2, &b, &err), &err);
    if (b == NULL || ids == NULL) {
        lares_model_close(m);
        return;
    }
    CHECK(lares_batch_n_seq(b) == 2);
    collect c0 = {0}, c1 = {0};
    lares_generate_opts o0 = gen_opts(&c0, false), o1 = gen_opts(&c1, false);
    o1.n_predict = -1; /* until cancelled */
    CHECK_OK(lares_batch_start(b, 0, ids, n, &o0, &err), &err);
    CHECK_OK(lares_batch_start(b, 1, ids, n, &o1, &err), &err);
    CHECK(lares_batch_start(b, 1, ids, n, &o1, &err) == LARES_EBUSY);
    CHECKF(strstr(err.msg, "still active") != NULL, "%s", err.msg);
    int active = 0;
    for (int k = 0; k < 8; k++) {
        CHECK_OK(lares_batch_step(b, &active, &err), &err);
    }
    const int before = c1.n;
    lares_batch_cancel(b, 1);
    run_all(b);
    lares_stats st;
    lares_batch_stats(b, 1, &st);
    CHECKF(st.stop == LARES_STOP_CANCELED && !lares_batch_active(b, 1) && before >= 1 &&
               c1.n == before,
           "cancelled after %d tokens, %d delivered", before, c1.n);
    lares_batch_stats(b, 0, &st);
    CHECK(st.stop == LARES_STOP_LENGTH && c0.n == N_GEN && st.n_prompt == (int32_t)n);
    /* the freed slot runs again; the prompt plus its answer keeps the cached prefix */
    int32_t longer[128];
    memcpy(longer, ids, n * sizeof *ids);
    memcpy(longer + n, c0.ids, 8 * sizeof *ids);
    collect again = {0}, ref = {0};
    lares_generate_opts oa = gen_opts(&again, false);
    CHECK_OK(lares_batch_start(b, 0, longer, n + 8, &oa, &err), &err);
    run_all(b);
    lares_batch_stats(b, 0, &st);
    CHECKF(st.n_prompt == 1, "prompt tokens read after a cached prefix: %d", st.n_prompt);
    alone(m, longer, n + 8, false, &ref);
    CHECK(agree(&again, &ref) == ref.n && again.n == ref.n);
    /* refusals */
    CHECK(lares_batch_start(b, 2, ids, n, &o0, &err) == LARES_EINVAL);
    CHECK(lares_batch_start(b, 0, ids, 0, &o0, &err) == LARES_EINVAL);
    lares_generate_opts ol = o0;
    ol.draft_n = 4; /* no draft model set */
    CHECK(lares_batch_start(b, 0, ids, n, &ol, &err) == LARES_EINVAL &&
          strstr(err.msg, "no draft model") != NULL);
    ol = o0;
    ol.lookup = LARES_LOOKUP_MAX + 1;
    CHECK(lares_batch_start(b, 0, ids, n, &ol, &err) == LARES_EINVAL &&
          strstr(err.msg, "lookup") != NULL);
    lares_generate_opts olong = o0;
    olong.n_predict = 1000;
    CHECK(lares_batch_start(b, 0, ids, n, &olong, &err) == LARES_ERANGE);
    int32_t bad[2] = {1, 999999};
    CHECK(lares_batch_start(b, 0, bad, 2, &o0, &err) == LARES_EINVAL);
    CHECK_OK(lares_batch_step(b, &active, &err), &err);
    CHECK(active == 0);
    lares_batch_free(b);
    lares_batch *none = NULL;
    CHECK(lares_batch_create(m, &so, 0, &none, &err) == LARES_EINVAL && none == NULL);
    lares_free(ids);
    lares_model_close(m);
}

/* on_token that stops the sequence after N_GEN tokens */
static bool on_token_until(const lares_token_info *t, void *user) {
    on_token(t, user);
    return ((collect *)user)->n < N_GEN;
}

/* The least budget a session of the model needs, from the refusal of a
 * budget of one byte (which names it); 0 when none is named. */
static uint64_t least_budget(lares_model *m, const lares_session_opts *so) {
    lares_session_opts o = *so;
    o.mem_budget = 1;
    lares_session *s = NULL;
    lares_error err = {0};
    const lares_status st = lares_session_create(m, &o, &s, &err);
    lares_session_free(s);
    const char *at = strstr(err.msg, " bytes) this session needs");
    if (st != LARES_ERANGE || at == NULL) {
        CHECKF(false, "budget of 1 byte: %s", err.msg);
        return 0;
    }
    while (at > err.msg && at[-1] >= '0' && at[-1] <= '9') {
        at--;
    }
    return strtoull(at, NULL, 10);
}

/* Under a memory budget too small for the weights beside the sequences'
 * caches, the batch streams them from disk, and each sequence still gets its
 * tokens alone (greedy). Budgets that the caches, full, would leave too little
 * of are refused with a message; the least that the batch takes streams once
 * every sequence may fill its context, no less than with empty caches. */
static void test_streamed(const char *file) {
    lares_error err = {0};
    lares_model *m = NULL;
    CHECK_OK(lares_model_open(fixture(file), NULL, &m, &err), &err);
    if (m == NULL) {
        return;
    }
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = 256;
    so.n_threads = 2;
    so.stream_io = LARES_STREAM_IO_MMAP; /* the tests' tmpfs may refuse O_DIRECT */
    prompt_ids p[N_SEQ];
    collect want[N_SEQ];
    prompts_alone(m, p, want);
    const uint64_t least = least_budget(m, &so);
    lares_batch *b = NULL;
    so.mem_budget = least;
    const lares_status first = lares_batch_create(m, &so, N_SEQ, &b, &err);
    CHECKF(first == LARES_ERANGE && b == NULL && strstr(err.msg, "KV caches") != NULL,
           "%s: a batch of %d in one session's least budget: %d, %s", file, N_SEQ, (int)first,
           err.msg);
    /* steps finer than the weights of these tiny files, so that the first
     * budget that takes the batch and its four sequences leaves the weights
     * less than they need; a budget short of that is refused by creation or
     * by a start, in a message */
    collect got[N_SEQ];
    lares_stats idle, busy;
    for (int k = 1; k <= 4096 && b == NULL && least > 0; k++) {
        so.mem_budget = least + least / 2048 * (uint64_t)k;
        lares_status st = lares_batch_create(m, &so, N_SEQ, &b, &err);
        if (st == LARES_OK) {
            memset(got, 0, sizeof got);
            lares_batch_set_shared_prompt_rows(b, 0);
            lares_batch_stats(b, 0, &idle);
            for (int i = 0; i < N_SEQ && st == LARES_OK; i++) {
                /* no length: each may reach the whole context, which the
                 * plan counts; the callback stops it after N_GEN tokens */
                lares_generate_opts o = gen_opts(&got[i], false);
                o.n_predict = -1;
                o.on_token = on_token_until;
                st = lares_batch_start(b, i, p[i].ids, p[i].n, &o, &err);
            }
            if (st != LARES_OK) {
                lares_batch_free(b);
                b = NULL;
            }
        }
        CHECKF(st == LARES_OK || st == LARES_ERANGE, "%s: budget %" PRIu64 ": %s", file,
               so.mem_budget, err.msg);
    }
    CHECKF(b != NULL, "%s: no budget up to 3x the least took a batch of %d", file, N_SEQ);
    if (b != NULL) {
        lares_batch_stats(b, 0, &busy);
        CHECKF(busy.stream_bytes >= idle.stream_bytes,
               "%s: %" PRIu64 " bytes a pass streamed with four contexts to fill, %" PRIu64
               " with none", file, busy.stream_bytes, idle.stream_bytes);
        run_all(b);
        for (int i = 0; i < N_SEQ; i++) {
            lares_stats st;
            lares_batch_stats(b, i, &st);
            CHECKF(st.streaming && st.stream_bytes > 0 && st.mem_budget_bytes == so.mem_budget,
                   "%s: budget %" PRIu64 ": streaming %d, %" PRIu64 " bytes a pass", file,
                   so.mem_budget, st.streaming, st.stream_bytes);
            CHECKF(agree(&got[i], &want[i]) == want[i].n && got[i].n == want[i].n,
                   "%s streamed, sequence %d: %d of %d tokens as alone", file, i,
                   agree(&got[i], &want[i]), want[i].n);
        }
        lares_batch_free(b);
    }
    for (int i = 0; i < N_SEQ; i++) {
        lares_free(p[i].ids);
    }
    lares_model_close(m);
}

/* A draft model in the batch: sequences drafting with it, one by prompt
 * lookup and one plain, decode together; greedy, each gets exactly the
 * tokens it gets alone without drafts (the target's weights are F16, so a
 * row's logits do not depend on the rows beside it); sampled, a run is
 * reproducible with its seeds. Bad calls are refused with a message. */
static void test_draft_model(void) {
    lares_error err = {0};
    lares_model *m = NULL, *dm = NULL, *other = NULL;
    CHECK_OK(lares_model_open(fixture("TinyStories-656K.f16.gguf"), NULL, &m, &err), &err);
    CHECK_OK(lares_model_open(fixture("derived/TinyStories-656K.llamacpp-Q4_0.gguf"), NULL, &dm,
                              &err),
             &err);
    CHECK_OK(lares_model_open(fixture("stories260K.gguf"), NULL, &other, &err), &err);
    if (m == NULL || dm == NULL || other == NULL) {
        lares_model_close(m);
        lares_model_close(dm);
        lares_model_close(other);
        return;
    }
    prompt_ids p[N_SEQ];
    collect want[N_SEQ];
    prompts_alone(m, p, want);
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = 256;
    so.n_threads = 2;
    collect sampled_first[N_SEQ];
    for (int run = 0; run < 3; run++) { /* greedy; sampled; sampled again */
        lares_batch *b = NULL;
        CHECK_OK(lares_batch_create(m, &so, N_SEQ, &b, &err), &err);
        if (b == NULL) {
            break;
        }
        CHECK(lares_batch_set_draft(b, other, &err) == LARES_EINVAL &&
              strstr(err.msg, "different vocabularies") != NULL);
        CHECK_OK(lares_batch_set_draft(b, dm, &err), &err);
        collect got[N_SEQ];
        memset(got, 0, sizeof got);
        lares_generate_opts o[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            o[i] = gen_opts(&got[i], run > 0);
            /* 0 and 1 draft with the model, 2 by lookup, 3 not at all */
            o[i].draft_n = i < 2 ? 4 : 0;
            o[i].lookup = i == 2 ? 4 : 0;
            CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
        }
        CHECK(lares_batch_set_draft(b, NULL, &err) == LARES_EBUSY);
        run_all(b);
        int drafted = 0, accepted = 0;
        for (int i = 0; i < N_SEQ; i++) {
            lares_stats st;
            lares_batch_stats(b, i, &st);
            CHECK(st.n_generated == got[i].n && st.n_accepted <= st.n_drafted);
            CHECK(i < 3 || st.n_drafted == 0);
            if (i < 2) {
                drafted += st.n_drafted;
                accepted += st.n_accepted;
            }
            if (run == 0) {
                CHECKF(agree(&got[i], &want[i]) == want[i].n && got[i].n == want[i].n,
                       "draft model in a batch, sequence %d: %d of %d tokens as alone", i,
                       agree(&got[i], &want[i]), want[i].n);
            } else if (run == 1) {
                sampled_first[i] = got[i];
                CHECK(got[i].n > 0);
            } else {
                CHECKF(agree(&got[i], &sampled_first[i]) == sampled_first[i].n &&
                           got[i].n == sampled_first[i].n,
                       "sampled with a draft model, sequence %d: not reproducible", i);
            }
        }
        CHECKF(drafted > 0 && accepted > 0, "run %d: %d drafted, %d accepted", run, drafted,
               accepted);
        /* the slot runs again with its draft session's cache: still as alone */
        if (run == 0) {
            collect again = {0};
            lares_generate_opts oa = gen_opts(&again, false);
            oa.draft_n = 3;
            CHECK_OK(lares_batch_start(b, 0, p[0].ids, p[0].n, &oa, &err), &err);
            run_all(b);
            CHECK(agree(&again, &want[0]) == want[0].n && again.n == want[0].n);
            /* refusals */
            lares_generate_opts bad = oa;
            bad.lookup = 2;
            CHECK(lares_batch_start(b, 0, p[0].ids, p[0].n, &bad, &err) == LARES_EINVAL &&
                  strstr(err.msg, "not both") != NULL);
            bad = oa;
            bad.draft_n = LARES_LOOKUP_MAX + 1;
            CHECK(lares_batch_start(b, 0, p[0].ids, p[0].n, &bad, &err) == LARES_EINVAL &&
                  strstr(err.msg, "draft") != NULL);
            CHECK_OK(lares_batch_set_draft(b, NULL, &err), &err);
            CHECK(lares_batch_start(b, 0, p[0].ids, p[0].n, &oa, &err) == LARES_EINVAL &&
                  strstr(err.msg, "lares_batch_set_draft") != NULL);
        }
        lares_batch_free(b);
    }
    for (int i = 0; i < N_SEQ; i++) {
        lares_free(p[i].ids);
    }
    lares_model_close(other);
    lares_model_close(dm);
    lares_model_close(m);
}

/* draft_rates.c: tries drafts and no drafts twice each for a number of
 * generating sequences, then keeps the faster, trying the other again after
 * 32 steps that took 32 times one of the other's (at most about 1/33 of the
 * time on the slower); the figures are kept apart by that number */
static void test_pace(void) {
    api_draft_rates p;
    memset(&p, 0, sizeof p);
    bool on[4];
    for (int k = 0; k < 4; k++) {
        on[k] = api_draft_rates_choose(&p, 4);
        /* with drafts 30 tokens in 300 ms, without 4 in 36 ms */
        api_draft_rates_note(&p, 4, on[k], on[k] ? 30 : 4, on[k] ? 300.0 : 36.0);
    }
    CHECKF(on[0] && on[1] && !on[2] && !on[3], "the first four choices: %d %d %d %d", on[0], on[1],
           on[2], on[3]);
    /* a step with drafts takes 300 ms: tried again after 32 x 300 ms of steps
     * without (267 of them), not after 32 steps */
    int with = 0, explored_at = -1;
    double ms_with = 0, ms_all = 0;
    for (int k = 0; k < 600; k++) {
        const bool o = api_draft_rates_choose(&p, 4);
        with += o;
        if (o && explored_at < 0) {
            explored_at = k;
        }
        const double ms = o ? 300.0 : 36.0;
        ms_with += o ? ms : 0;
        ms_all += ms;
        api_draft_rates_note(&p, 4, o, o ? 30 : 4, ms);
    }
    CHECKF(with >= 1 && with <= 3 && explored_at >= 260 && ms_with * 25 <= ms_all,
           "without drafts faster: %d of 600 steps drafted (first at %d), %.0f of %.0f ms", with,
           explored_at, ms_with, ms_all);
    /* with one sequence drafts pay: its own figures; a step without takes
     * 27 ms, so the 32 steps come first: one in about 33 without */
    for (int k = 0; k < 4; k++) {
        const bool o = api_draft_rates_choose(&p, 1);
        api_draft_rates_note(&p, 1, o, o ? 8 : 1, o ? 60.0 : 27.0);
    }
    int without = 0, first_without = -1;
    for (int k = 0; k < 100; k++) {
        const bool o = api_draft_rates_choose(&p, 1);
        without += !o;
        if (!o && first_without < 0) {
            first_without = k;
        }
        api_draft_rates_note(&p, 1, o, o ? 8 : 1, o ? 60.0 : 27.0);
    }
    CHECKF(without >= 2 && without <= 4 && first_without >= 28,
           "with drafts faster: %d of 100 steps without (first at %d)", without, first_without);
    CHECK(!api_draft_rates_choose(&p, 4));
    /* a figure follows the recent steps: drafts turned faster are taken again
     * (after 32 x 200 ms of steps without, about 213 of them) */
    api_draft_rates q;
    memset(&q, 0, sizeof q);
    for (int k = 0; k < 600; k++) {
        const bool o = api_draft_rates_choose(&q, 2);
        const bool fast_drafts = k >= 100;
        api_draft_rates_note(&q, 2, o, o ? 10 : 2, o ? (fast_drafts ? 50.0 : 200.0) : 30.0);
    }
    CHECK(api_draft_rates_choose(&q, 2));
}

int main(void) {
    test_pace();
    for (size_t c = 0; c < LARES_ARRAY_LEN(greedy_cases); c++) {
        test_equal_alone(greedy_cases[c].file, greedy_cases[c].min_agree < 48 ? 16 : N_GEN);
    }
    test_slots();
    test_draft_model();
    test_interactive();
    test_streamed("stories260K.gguf");
    test_streamed("derived/TinyStories-656K.llamacpp-Q4_0.gguf");
    return check_finish("test_batch");
}
