/* Speculative sampling (text/spec_accept.c, text/sampler.c): the acceptance
 * rule keeps the target's distribution whatever the draft's (chi-square over
 * many seeded draws, shapes where the draft puts mass where the target has
 * none among them), rules that are wrong fail the same test, and the
 * distribution text_sampler_probs reports is the one text_sampler_sample
 * draws from; on real models (a target and a draft that differ), the second
 * token generated with a draft is distributed as the target's p, not as the
 * draft's q, and is accepted at the rate sum min(p, q). */
#include "api/api.h"
#include "check.h"
#include "lares.h"
#include "text/text.h"

#define N     6
#define DRAWS 200000
/* Pearson's statistic over at most 5 degrees of freedom: a correct rule
 * exceeds 50 with probability below 1.5e-9; the wrong rules below score in
 * the thousands on the shapes they get wrong */
#define CHI2_MAX 50.0

static uint64_t rng_state = 0x5eed;

static double unit(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

typedef enum rule { RULE_STANDARD, RULE_ALWAYS_ACCEPT, RULE_RESIDUAL_FROM_P } rule;

/* one token by the rule under test: the draft from q, then its verdict */
static int32_t one_token(rule r, const float *p, const float *q, int *n_accepted) {
    const int32_t x = text_draw(q, N, unit());
    const double u = unit(), v = unit();
    bool acc = false;
    int32_t y = x;
    switch (r) {
    case RULE_STANDARD:
        y = text_spec_accept(p, q, N, x, u, v, &acc);
        break;
    case RULE_ALWAYS_ACCEPT:
        acc = true;
        break;
    case RULE_RESIDUAL_FROM_P: /* the right test, the rejected token drawn from p */
        acc = u * q[x] < p[x];
        y = acc ? x : text_draw(p, N, v);
        break;
    }
    *n_accepted += acc;
    return y;
}

/* Pearson's chi-square of counts against p; a token p excludes that occurs
 * makes it infinite */
static double chi2(const int *count, const float *p, int draws) {
    double c2 = 0;
    for (int i = 0; i < N; i++) {
        const double e = (double)p[i] * draws;
        if (e == 0) {
            c2 += count[i] > 0 ? INFINITY : 0;
        } else {
            c2 += (count[i] - e) * (count[i] - e) / e;
        }
    }
    return c2;
}

static double run_rule(rule r, const float *p, const float *q, double *accept_rate) {
    int count[N] = {0};
    int acc = 0;
    for (int k = 0; k < DRAWS; k++) {
        count[one_token(r, p, q, &acc)]++;
    }
    *accept_rate = (double)acc / DRAWS;
    return chi2(count, p, DRAWS);
}

typedef struct shape {
    const char *name;
    float p[N], q[N];
    bool rules_differ; /* the wrong rules must fail on it */
} shape;

static void test_acceptance_rule(void) {
    static const shape shapes[] = {
        {"same",
         {0.4f, 0.3f, 0.1f, 0.1f, 0.05f, 0.05f},
         {0.4f, 0.3f, 0.1f, 0.1f, 0.05f, 0.05f},
         false},
        {"peaked target, flat draft",
         {0.7f, 0.1f, 0.1f, 0.05f, 0.05f, 0},
         {1 / 6.f, 1 / 6.f, 1 / 6.f, 1 / 6.f, 1 / 6.f, 1 / 6.f},
         true},
        {"draft mass where the target has none",
         {0.5f, 0.3f, 0.2f, 0, 0, 0},
         {0.1f, 0.1f, 0.1f, 0.3f, 0.2f, 0.2f},
         true},
        {"disjoint", {0, 0, 0, 0.5f, 0.5f, 0}, {0.6f, 0.4f, 0, 0, 0, 0}, true},
        {"one-hot draft (prompt lookup)",
         {0.2f, 0.2f, 0.1f, 0.3f, 0.1f, 0.1f},
         {0, 0, 1, 0, 0, 0},
         true},
        {"one-hot target (greedy)", {0, 0, 0, 1, 0, 0}, {0.1f, 0.2f, 0.3f, 0.2f, 0.1f, 0.1f}, true},
        {"flat target, peaked draft",
         {0.2f, 0.2f, 0.2f, 0.2f, 0.1f, 0.1f},
         {0.05f, 0.8f, 0.05f, 0.05f, 0.05f, 0},
         true},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const shape *s = &shapes[k];
        double rate, rate_wrong;
        const double c = run_rule(RULE_STANDARD, s->p, s->q, &rate);
        CHECKF(c < CHI2_MAX, "%s: chi-square %.1f against p", s->name, c);
        /* the acceptance rate is sum min(p, q) */
        double expect = 0;
        for (int i = 0; i < N; i++) {
            expect += s->p[i] < s->q[i] ? s->p[i] : s->q[i];
        }
        CHECKF(fabs(rate - expect) < 0.01, "%s: accepted %.4f, sum min(p, q) = %.4f", s->name, rate,
               expect);
        const double c_always = run_rule(RULE_ALWAYS_ACCEPT, s->p, s->q, &rate_wrong);
        const double c_from_p = run_rule(RULE_RESIDUAL_FROM_P, s->p, s->q, &rate_wrong);
        if (s->rules_differ) {
            CHECKF(c_always > CHI2_MAX, "%s: always accepting passed (chi-square %.1f)", s->name,
                   c_always);
        }
        if (s->rules_differ && k != 3 && k != 5) {
            /* (disjoint and one-hot p: the residual is p itself there) */
            CHECKF(c_from_p > CHI2_MAX, "%s: the residual drawn from p passed (chi-square %.1f)",
                   s->name, c_from_p);
        }
        printf("  %-38s chi2 %7.2f (always accept %9.1f, residual from p %9.1f), accepted %.3f\n",
               s->name, c, c_always, c_from_p, rate);
    }
}

/* edge cases of the pure function */
static void test_accept_edges(void) {
    const float p[N] = {0, 0.5f, 0.5f, 0, 0, 0};
    const float q[N] = {0, 0.5f, 0.5f, 0, 0, 0};
    bool acc = false;
    /* p == q: always kept, even at u just below 1 */
    CHECK(text_spec_accept(p, q, N, 1, 0.999999, 0.5, &acc) == 1 && acc);
    /* a draft the target excludes is never kept */
    const float p2[N] = {1, 0, 0, 0, 0, 0};
    CHECK(text_spec_accept(p2, q, N, 2, 0.0, 0.7, &acc) == 0 && !acc);
    /* text_draw: weights that do not sum to 1, zero weights skipped */
    const float w[N] = {0, 2, 0, 2, 0, 0};
    CHECK(text_draw(w, N, 0.0) == 1);
    CHECK(text_draw(w, N, 0.49) == 1);
    CHECK(text_draw(w, N, 0.51) == 3);
    CHECK(text_draw(w, N, 0.9999999) == 3);
}

/* text_sampler_probs is the distribution text_sampler_sample draws from */
static void test_sampler_probs(void) {
#define V 8
    const float logits0[V] = {2.0f, 1.5f, 1.4f, 0.3f, -1.0f, 1.45f, -INFINITY, 0.9f};
    const int32_t hist[] = {1, 1, 5};
    lares_sampler_opts o = lares_sampler_opts_default();
    o.temperature = 0.8f;
    o.top_k = 6;
    o.top_p = 0.97f;
    o.min_p = 0.05f;
    o.repeat_penalty = 1.3f;
    o.frequency_penalty = 0.1f;
    o.seed = 99;
    text_sampler *smp = NULL;
    lares_error err = {0};
    CHECK_OK(text_sampler_create(&o, V, &smp, &err), &err);
    if (smp == NULL) {
        return;
    }
    float lg[V], probs[V];
    memcpy(lg, logits0, sizeof lg);
    text_sampler_probs(smp, lg, hist, 3, probs);
    double sum = 0;
    int support = 0;
    for (int i = 0; i < V; i++) {
        sum += probs[i];
        support += probs[i] > 0;
    }
    CHECKF(fabs(sum - 1) < 1e-5, "probabilities sum to %f", sum);
    CHECKF(support >= 3 && support < V, "%d tokens kept", support);
    CHECK(probs[6] == 0); /* forbidden */
    int count[V] = {0}, count_draw[V] = {0};
    const int draws = 100000;
    for (int k = 0; k < draws; k++) {
        memcpy(lg, logits0, sizeof lg);
        count[text_sampler_sample(smp, lg, hist, 3)]++;
        count_draw[text_sampler_draw(smp, probs)]++;
    }
    double c2 = 0, c2d = 0;
    for (int i = 0; i < V; i++) {
        const double e = (double)probs[i] * draws;
        if (e == 0) {
            CHECKF(count[i] == 0 && count_draw[i] == 0, "token %d drawn outside the kept set", i);
            continue;
        }
        c2 += (count[i] - e) * (count[i] - e) / e;
        c2d += (count_draw[i] - e) * (count_draw[i] - e) / e;
    }
    /* at most 6 degrees of freedom: P(chi2 > 55) < 1e-9 */
    CHECKF(c2 < 55, "text_sampler_sample against text_sampler_probs: chi-square %.1f", c2);
    CHECKF(c2d < 55, "text_sampler_draw against text_sampler_probs: chi-square %.1f", c2d);
    text_sampler_free(smp);

    /* greedy: one-hot at the argmax after the penalties, as sample returns */
    o.temperature = 0;
    CHECK_OK(text_sampler_create(&o, V, &smp, &err), &err);
    if (smp == NULL) {
        return;
    }
    memcpy(lg, logits0, sizeof lg);
    text_sampler_probs(smp, lg, hist, 3, probs);
    memcpy(lg, logits0, sizeof lg);
    const int32_t g = text_sampler_sample(smp, lg, hist, 3);
    CHECK(probs[g] == 1.0f);
    CHECK(g == 0);
    text_sampler_free(smp);
#undef V
}

/* A vocabulary large enough for the sampler's radix sort (no top-k): the
 * kept set is a prefix of "most likely first, lowest id first on ties", so
 * a top-p that ends inside a group of equal logits keeps its lowest ids,
 * whatever their sign of zero, and every forbidden (-inf) token stays out. */
static void test_sampler_order(void) {
    enum { VOCAB = 5000, TIED = 100, KEEP = 37 };
    float *lg = malloc(VOCAB * sizeof *lg), *probs = malloc(VOCAB * sizeof *probs);
    int32_t tied[TIED];
    uint64_t seed = 12345;
    for (int32_t i = 0; i < VOCAB; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        lg[i] = -30.0f - (float)(seed >> 40) / (float)(1 << 24) * 10.0f; /* far below */
        if (i % 7 == 3) {
            lg[i] = -INFINITY;
        }
    }
    for (int32_t t = 0; t < TIED; t++) { /* spread over the ids, signs of zero mixed */
        tied[t] = (int32_t)((t * 2654435761u) % VOCAB);
        for (int32_t u = 0; u < t; u++) {
            if (tied[u] == tied[t]) {
                tied[t] = (tied[t] + 1) % VOCAB;
                u = -1;
            }
        }
        lg[tied[t]] = t % 2 ? -0.0f : 0.0f;
    }
    lares_sampler_opts o = lares_sampler_opts_default();
    o.temperature = 1.0f;
    o.top_k = 0;
    o.min_p = 0.0f;
    o.repeat_penalty = 1.0f;
    /* the tied tokens hold nearly all the mass, each 1 / TIED of it */
    o.top_p = ((float)KEEP - 0.5f) / TIED;
    text_sampler *smp = NULL;
    lares_error err = {0};
    CHECK_OK(text_sampler_create(&o, VOCAB, &smp, &err), &err);
    if (smp != NULL) {
        text_sampler_probs(smp, lg, NULL, 0, probs);
        int32_t sorted[TIED];
        memcpy(sorted, tied, sizeof sorted);
        for (int32_t a = 1; a < TIED; a++) { /* insertion sort of the ids */
            for (int32_t b = a; b > 0 && sorted[b - 1] > sorted[b]; b--) {
                const int32_t t = sorted[b];
                sorted[b] = sorted[b - 1];
                sorted[b - 1] = t;
            }
        }
        int32_t kept = 0, wrong = 0;
        for (int32_t i = 0; i < VOCAB; i++) {
            kept += probs[i] > 0;
        }
        for (int32_t t = 0; t < TIED; t++) {
            wrong += (probs[sorted[t]] > 0) != (t < KEEP);
        }
        CHECKF(kept == KEEP && wrong == 0, "top-p kept %d tokens, %d of the tied ones wrongly",
               kept, wrong);
        text_sampler_free(smp);
    }
    free(lg);
    free(probs);
}

/* ---- a real target and draft ---- */

/* on_logits: the first token is forced (so the second, the one a draft
 * proposes, always follows the same context); the second's logits are kept */
typedef struct probe {
    int calls;
    int32_t forced;
    float *second;    /* n_vocab */
    bool second_same; /* every run saw the same logits */
} probe;

static void probe_logits(float *logits, int32_t n, void *user) {
    probe *pr = user;
    if (pr->calls++ % 2 == 0) {
        for (int32_t i = 0; i < n; i++) {
            logits[i] = i == pr->forced ? logits[i] : -INFINITY;
        }
    } else if (pr->calls == 2) {
        memcpy(pr->second, logits, (size_t)n * sizeof *logits);
    } else {
        pr->second_same =
            pr->second_same && memcmp(pr->second, logits, (size_t)n * sizeof *logits) == 0;
    }
}

/* the sampler's distribution of the second token of `file` after prompt and forced */
static void second_token_probs(lares_model *m, const lares_sampler_opts *so, const int32_t *prompt,
                               size_t n_prompt, int32_t forced, int32_t n_vocab, float *probs) {
    lares_error err = {0};
    lares_session *s = NULL;
    lares_session_opts sopt = lares_session_opts_default();
    sopt.n_threads = 1;
    CHECK_OK(lares_session_create(m, &sopt, &s, &err), &err);
    float *lg = malloc((size_t)n_vocab * sizeof *lg);
    probe pr = {.forced = forced, .second = lg, .second_same = true};
    lares_generate_opts go = lares_generate_opts_default();
    go.n_predict = 2;
    go.sampler = *so;
    go.on_logits = probe_logits;
    go.user = &pr;
    CHECK_OK(lares_generate(s, prompt, n_prompt, &go, NULL, 0, NULL, NULL, &err), &err);
    text_sampler *smp = NULL;
    CHECK_OK(text_sampler_create(so, n_vocab, &smp, &err), &err);
    int32_t hist[64];
    memcpy(hist, prompt, n_prompt * sizeof *prompt);
    hist[n_prompt] = forced;
    text_sampler_probs(smp, lg, hist, n_prompt + 1, probs);
    text_sampler_free(smp);
    free(lg);
    lares_session_free(s);
}

/* Pearson's chi-square of counts against probs over cells of expectation
 * >= 5 (the rest pooled); *df its degrees of freedom */
static double chi2_pooled(const int *count, const float *probs, int32_t n, int runs, int *df) {
    double c2 = 0, pool_e = 0;
    int pool_c = 0, cells = 0;
    for (int32_t i = 0; i < n; i++) {
        const double e = (double)probs[i] * runs;
        if (e >= 5) {
            c2 += (count[i] - e) * (count[i] - e) / e;
            cells++;
        } else {
            pool_e += e;
            pool_c += count[i];
        }
    }
    if (pool_e > 0) {
        c2 += (pool_c - pool_e) * (pool_c - pool_e) / pool_e;
        cells++;
    } else if (pool_c > 0) {
        c2 = INFINITY; /* drawn where p is 0 */
    }
    *df = cells - 1;
    return c2;
}

static void test_draft_distribution(void) {
    lares_error err = {0};
    lares_model *tm = NULL, *dm = NULL;
    CHECK_OK(lares_model_open(fixture("stories260K.gguf"), NULL, &tm, &err), &err);
    CHECK_OK(lares_model_open(fixture("derived/stories260K-moe4top2-perturbed-experts.gguf"), NULL,
                              &dm, &err),
             &err);
    if (tm == NULL || dm == NULL) {
        lares_model_close(tm);
        lares_model_close(dm);
        return;
    }
    lares_model_info info;
    lares_model_get_info(tm, &info);
    const int32_t nv = info.n_vocab;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    const char *text = "Once upon a time, there was a";
    CHECK_OK(lares_tokenize(tm, text, strlen(text), NULL, &prompt, &n_prompt, &err), &err);
    lares_sampler_opts so = lares_sampler_opts_default();
    so.temperature = 1.2f; /* a wide distribution: many cells to test */
    so.top_k = 60;
    so.top_p = 0.98f;
    so.min_p = 0.0f;
    /* the first token: the target's greedy choice */
    lares_session *s = NULL;
    lares_session_opts sopt = lares_session_opts_default();
    sopt.n_threads = 1; /* 6000 short runs: no fork/join worth having */
    CHECK_OK(lares_session_create(tm, &sopt, &s, &err), &err);
    CHECK_OK(lares_session_set_draft(s, dm, &err), &err);
    lares_generate_opts go = lares_generate_opts_default();
    go.n_predict = 1;
    go.sampler.temperature = 0;
    int32_t out[2];
    size_t n_out = 0;
    CHECK_OK(lares_generate(s, prompt, n_prompt, &go, out, 2, &n_out, NULL, &err), &err);
    const int32_t forced = out[0];
    float *p = calloc((size_t)nv, sizeof *p), *q = calloc((size_t)nv, sizeof *q);
    second_token_probs(tm, &so, prompt, n_prompt, forced, nv, p);
    second_token_probs(dm, &so, prompt, n_prompt, forced, nv, q);
    double overlap = 0;
    for (int32_t i = 0; i < nv; i++) {
        overlap += p[i] < q[i] ? p[i] : q[i];
    }
    /* many runs with a draft: the second token is the verified draft's */
    enum { RUNS = 6000 };
    int *count = calloc((size_t)nv, sizeof *count);
    float *lg = malloc((size_t)nv * sizeof *lg);
    probe pr = {.forced = forced, .second = lg, .second_same = true};
    go.n_predict = 2;
    go.sampler = so;
    go.draft_n = 4;
    go.on_logits = probe_logits;
    go.user = &pr;
    long drafted = 0, accepted = 0;
    for (int r = 0; r < RUNS; r++) {
        /* the prompt stays in both caches but its last token (the draft
         * session follows the target's context by common prefix) */
        lares_session_truncate(s, r == 0 ? 0 : (int32_t)n_prompt - 1);
        go.sampler.seed = 1000 + (uint64_t)r;
        lares_stats st;
        n_out = 0;
        const size_t from = r == 0 ? 0 : n_prompt - 1;
        const lares_status gst =
            lares_generate(s, prompt + from, n_prompt - from, &go, out, 2, &n_out, &st, &err);
        if (gst != LARES_OK) {
            CHECK_OK(gst, &err);
            break;
        }
        if (n_out == 2) {
            count[out[1]]++;
        }
        drafted += st.n_drafted;
        accepted += st.n_accepted;
    }
    CHECKF(drafted == RUNS, "%ld drafts in %d runs (one each)", drafted, RUNS);
    CHECK(pr.second_same);
    int df_p = 0, df_q = 0;
    const double c_p = chi2_pooled(count, p, nv, RUNS, &df_p);
    const double c_q = chi2_pooled(count, q, nv, RUNS, &df_q);
    /* a bound a correct rule exceeds with probability ~1e-9 at these degrees
     * of freedom (mean df, sd sqrt(2 df)) */
    const double bound_p = df_p + 8 * sqrt(2.0 * df_p) + 10;
    const double bound_q = df_q + 8 * sqrt(2.0 * df_q) + 10;
    CHECKF(df_p >= 5 && c_p < bound_p,
           "second token against the target's p: chi-square %.1f, "
           "%d degrees of freedom (bound %.1f)",
           c_p, df_p, bound_p);
    CHECKF(c_q > bound_q,
           "second token against the draft's q: chi-square %.1f, %d degrees of "
           "freedom: the test cannot tell p from q",
           c_q, df_q);
    const double rate = (double)accepted / (double)drafted;
    const double sd = sqrt(overlap * (1 - overlap) / RUNS);
    CHECKF(fabs(rate - overlap) < 6 * sd + 1e-3, "accepted %.4f, sum min(p, q) = %.4f", rate,
           overlap);
    printf("  stories260K drafted by its perturbed MoE: chi2 %.1f against p (df %d), %.1f against "
           "q (df %d); accepted %.3f, sum min(p, q) %.3f\n",
           c_p, df_p, c_q, df_q, rate, overlap);
    free(count);
    free(lg);
    free(p);
    free(q);
    lares_free(prompt);
    lares_session_free(s);
    lares_model_close(dm);
    lares_model_close(tm);
}

/* library refusals, and greedy ids with a draft equal plain ones over two
 * turns of one session (the draft follows the context by common prefix) */
static void test_draft_session(void) {
    lares_error err = {0};
    lares_model *t = NULL, *d = NULL, *other = NULL, *vocab_only = NULL;
    CHECK_OK(lares_model_open(fixture("TinyStories-656K.f16.gguf"), NULL, &t, &err), &err);
    CHECK_OK(
        lares_model_open(fixture("derived/TinyStories-656K.llamacpp-Q4_0.gguf"), NULL, &d, &err),
        &err);
    CHECK_OK(lares_model_open(fixture("stories260K.gguf"), NULL, &other, &err), &err);
    lares_model_opts vo = lares_model_opts_default();
    vo.vocab_only = true;
    CHECK_OK(lares_model_open(fixture("TinyStories-656K.f16.gguf"), &vo, &vocab_only, &err), &err);
    if (t == NULL || d == NULL || other == NULL || vocab_only == NULL) {
        goto out;
    }
    lares_session_opts so = lares_session_opts_default();
    so.n_threads = 1;
    so.n_ctx = 256;
    so.n_batch = 8;
    lares_session *s = NULL, *plain = NULL;
    CHECK_OK(lares_session_create(t, &so, &s, &err), &err);
    CHECK_OK(lares_session_create(t, &so, &plain, &err), &err);
    if (s == NULL || plain == NULL) {
        lares_session_free(s);
        lares_session_free(plain);
        goto out;
    }
    /* another vocabulary: both files named */
    CHECK(lares_session_set_draft(s, other, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "stories260K.gguf") && strstr(err.msg, "TinyStories-656K.f16.gguf") &&
               strstr(err.msg, "different vocabularies"),
           "%s", err.msg);
    CHECK(lares_session_set_draft(s, vocab_only, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "vocabulary only") != NULL, "%s", err.msg);
    const int32_t prompt[] = {1, 415, 307, 261, 449};
    lares_generate_opts go = lares_generate_opts_default();
    go.n_predict = 8;
    go.sampler.temperature = 0;
    go.draft_n = 3;
    /* no draft set yet */
    CHECK(lares_generate(s, prompt, 5, &go, NULL, 0, NULL, NULL, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "no draft model") != NULL, "%s", err.msg);
    CHECK_OK(lares_session_set_draft(s, d, &err), &err);
    go.lookup = 2; /* not both */
    CHECK(lares_generate(s, prompt, 5, &go, NULL, 0, NULL, NULL, &err) == LARES_EINVAL);
    go.lookup = 0;
    go.draft_n = 8; /* 9 rows, the batch holds 8 */
    CHECK(lares_generate(s, prompt, 5, &go, NULL, 0, NULL, NULL, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "batch") != NULL, "%s", err.msg);
    go.draft_n = 33;
    CHECK(lares_generate(s, prompt, 5, &go, NULL, 0, NULL, NULL, &err) == LARES_EINVAL);
    go.draft_n = -1;
    CHECK(lares_generate(s, prompt, 5, &go, NULL, 0, NULL, NULL, &err) == LARES_EINVAL);
    CHECK(lares_session_n_ctx(s) == 256);
    /* two turns: the second appends to the context of the first */
    int32_t a[40], b[40];
    size_t na = 0, nb = 0;
    lares_stats st;
    int32_t drafted = 0;
    for (int turn = 0; turn < 2; turn++) {
        const int32_t more[] = {13, 1576};
        const int32_t *p = turn == 0 ? prompt : more;
        const size_t np = turn == 0 ? 5 : 2;
        go.n_predict = 20;
        go.draft_n = 7;
        CHECK_OK(lares_generate(s, p, np, &go, a, 40, &na, &st, &err), &err);
        drafted += st.n_drafted;
        go.draft_n = 0;
        CHECK_OK(lares_generate(plain, p, np, &go, b, 40, &nb, NULL, &err), &err);
        CHECKF(na == nb && na > 0 && memcmp(a, b, na * sizeof *a) == 0,
               "turn %d: %zu ids with a draft, %zu plain", turn, na, nb);
        int32_t n1 = 0, n2 = 0;
        const int32_t *h1 = lares_session_tokens(s, &n1), *h2 = lares_session_tokens(plain, &n2);
        CHECKF(n1 == n2 && memcmp(h1, h2, (size_t)n1 * sizeof *h1) == 0,
               "turn %d: contexts of %d and %d tokens", turn, n1, n2);
    }
    CHECK(drafted > 0);
    /* removing the draft: draft_n is refused again */
    CHECK_OK(lares_session_set_draft(s, NULL, &err), &err);
    go.draft_n = 2;
    CHECK(lares_generate(s, prompt, 5, &go, NULL, 0, NULL, NULL, &err) == LARES_EINVAL);
    lares_session_free(s);
    lares_session_free(plain);
out:
    lares_model_close(t);
    lares_model_close(d);
    lares_model_close(other);
    lares_model_close(vocab_only);
}

/* api_draft_pace: a draft that keeps failing pauses, longer each time; a
 * kept draft ends the pauses */
static int paused_tokens(api_draft_pace *p) {
    int n = 0;
    while (!api_draft_pace_go(p)) {
        n++;
    }
    return n;
}

static void test_draft_pace(void) {
    api_draft_pace p = {0};
    CHECK(api_draft_pace_go(&p));
    for (int i = 0; i < API_DRAFT_MISSES - 1; i++) {
        api_draft_pace_note(&p, 0);
        CHECK(api_draft_pace_go(&p)); /* not yet */
    }
    api_draft_pace_note(&p, 0);
    CHECK(paused_tokens(&p) == API_DRAFT_PAUSE_MIN);
    for (int i = 0; i < API_DRAFT_MISSES; i++) {
        api_draft_pace_note(&p, 0);
    }
    CHECK(paused_tokens(&p) == 2 * API_DRAFT_PAUSE_MIN);
    for (int k = 0; k < 10; k++) {
        for (int i = 0; i < API_DRAFT_MISSES; i++) {
            api_draft_pace_note(&p, 0);
        }
        const int n = paused_tokens(&p);
        CHECK(n <= API_DRAFT_PAUSE_MAX && n >= 2 * API_DRAFT_PAUSE_MIN);
    }
    CHECK(p.pause == API_DRAFT_PAUSE_MAX);
    /* a kept draft: back to drafting at once, the next pause the shortest */
    for (int i = 0; i < API_DRAFT_MISSES - 1; i++) {
        api_draft_pace_note(&p, 0);
    }
    api_draft_pace_note(&p, 2);
    CHECK(api_draft_pace_go(&p));
    for (int i = 0; i < API_DRAFT_MISSES; i++) {
        api_draft_pace_note(&p, 0);
    }
    CHECK(paused_tokens(&p) == API_DRAFT_PAUSE_MIN);
}

int main(void) {
    test_acceptance_rule();
    test_draft_pace();
    test_accept_edges();
    test_sampler_probs();
    test_sampler_order();
    test_draft_distribution();
    test_draft_session();
    return check_finish("test_spec");
}
