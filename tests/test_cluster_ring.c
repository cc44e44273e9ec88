/*
 * cluster: rings on loopback against single-device output. For every model in
 * ../shared/models that lares runs, greedy generation through rings of 1 to 4
 * workers (k = 1, 2, 3 rounds, uneven windows, with and without layers on the
 * head) must give exactly the token ids of the same model on one device; so
 * must a conversation of several generate calls with a truncation, a prompt
 * split into several batches, and "auto" windows. With failover off, a worker
 * that dies mid-generation must stop the head's request with an error naming
 * it (failover itself: test_cluster_failover.c). Re-balancing is off here:
 * these rings check the plans they were given.
 */
#include "cluster_harness.h"

#define N_WORKERS 4
#define N_PREDICT 40
#define N_CTX     256

static tworker workers[N_WORKERS];

/* the llama-architecture models lares runs today; MoE files join when the model module runs them */
static const char *const models[] = {
    "stories260K.gguf",
    "TinyStories-656K.f16.gguf",
    "TinyStories-656K-Q8_0.raincandy.gguf",
    "derived/TinyStories-656K.f32.llama.gguf",
    "derived/TinyStories-656K.f32.qwen2-arch.gguf",
    "derived/TinyStories-656K.llamacpp-Q4_0.gguf",
    "derived/TinyStories-656K.llamacpp-Q4_1.gguf",
    "derived/TinyStories-656K.llamacpp-Q5_0.gguf",
    "derived/TinyStories-656K.llamacpp-Q5_1.gguf",
    "derived/TinyStories-656K.llamacpp-Q8_0.gguf",
    "derived/TinyStories-656K.llamacpp-Q4_K_M.gguf",
};
static const char *const maybe_models[] = {
    "derived/stories260K-moe4top2-identical-experts.gguf",
    "derived/stories260K-moe4top2-perturbed-experts.gguf",
    "derived/TinyStories-656K-qwen2moe-4x2-shared.gguf",
    "derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf",
};

/* windows: head first, then one per worker; -1 ends the list */
typedef struct ring_case {
    int w[N_WORKERS + 2];
    const char *what;
} ring_case;

static const ring_case cases_5[] = {
    {{1, 3, 1, -1}, "2 workers, k=1, uneven, head 1 layer"},
    {{2, 1, 1, 1, -1}, "3 workers, k=1, head 2 layers"},
    {{0, 1, 1, 1, -1}, "3 workers, k=2 (W=3, last round cut), head none"},
    {{1, 1, 1, 1, 1, -1}, "4 workers, k=1"},
    {{0, 1, 1, 1, 1, -1}, "4 workers, k=2 (W=4), head none"},
    {{1, 1, -1}, "1 worker, k=3 (W=2), head 1 layer"},
    {{0, 1, 1, -1}, "2 workers, k=3 (W=2), head none"},
};
static const ring_case cases_2[] = {
    {{1, 1, -1}, "1 worker, k=1, head 1 layer"},
    {{0, 1, 1, -1}, "2 workers, k=1, head none"},
    {{0, 1, -1}, "1 worker, k=2 (W=1), head none"},
};

static int n_workers_of(const ring_case *c) {
    int n = 0;
    while (c->w[n + 1] >= 0) {
        n++;
    }
    return n;
}

/* greedy generation from "Once upon a time" (optionally + more text later) */
static lares_status generate(lares_session *s, const lares_model *m, const char *text,
                             int32_t n_predict, int32_t *out, size_t *n_out, lares_error *err) {
    int32_t *ids = NULL;
    size_t n_ids = 0;
    lares_tokenize_opts to = lares_tokenize_opts_default();
    int32_t n_past = 0;
    lares_session_tokens(s, &n_past);
    to.add_bos = n_past == 0;
    lares_status st = lares_tokenize(m, text, strlen(text), &to, &ids, &n_ids, err);
    if (st != LARES_OK) {
        return st;
    }
    lares_generate_opts go = lares_generate_opts_default();
    go.n_predict = n_predict;
    go.sampler.temperature = 0;
    st = lares_generate(s, ids, n_ids, &go, out, (size_t)n_predict, n_out, NULL, err);
    lares_free(ids);
    return st;
}

static lares_session *open_session_with(lares_model *m, const char *ring, int32_t n_batch,
                                        int failover, lares_error *err) {
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = N_CTX;
    so.n_threads = 1;
    so.n_batch = n_batch;
    so.ring = ring;
    so.ring_rebalance = -1;
    so.ring_failover = failover;
    lares_session *s = NULL;
    if (lares_session_create(m, &so, &s, err) != LARES_OK) {
        return NULL;
    }
    return s;
}

static lares_session *open_session(lares_model *m, const char *ring, int32_t n_batch,
                                   lares_error *err) {
    return open_session_with(m, ring, n_batch, 0, err);
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb, const char *what) {
    if (na != nb || memcmp(a, b, na * sizeof *a) != 0) {
        size_t i = 0;
        while (i < na && i < nb && a[i] == b[i]) {
            i++;
        }
        fprintf(stderr,
                "%s: ring output differs from one device at token %zu of %zu/%zu (%d vs "
                "%d)\n",
                what, i, na, nb, i < na ? a[i] : -1, i < nb ? b[i] : -1);
        return false;
    }
    return true;
}

/* one model through every ring shape its layer count allows */
static void check_model(const char *rel, bool required) {
    lares_error err = {0};
    lares_model *m = NULL;
    const char *path = fixture(rel);
    if (lares_model_open(path, NULL, &m, &err) != LARES_OK) {
        if (!required) {
            printf("  %s: not run by lares yet (%s); ring check skipped\n", rel, err.msg);
            return;
        }
        CHECKF(false, "%s: %s", rel, err.msg);
        return;
    }
    lares_model_info info;
    lares_model_get_info(m, &info);
    int32_t want[N_PREDICT], got[N_PREDICT];
    size_t n_want = 0, n_got = 0;
    lares_session *s = open_session(m, NULL, 0, &err);
    CHECK_OK(s ? LARES_OK : err.code, &err);
    if (s != NULL) {
        CHECK_OK(generate(s, m, "Once upon a time", N_PREDICT, want, &n_want, &err), &err);
        lares_session_free(s);
    }
    CHECKF(n_want == N_PREDICT, "%s: %zu tokens on one device", rel, n_want);
    const ring_case *cases = info.n_layer == 5 ? cases_5 : cases_2;
    const size_t n_cases = info.n_layer == 5 ? LARES_ARRAY_LEN(cases_5) : LARES_ARRAY_LEN(cases_2);
    if (info.n_layer != 5 && info.n_layer != 2) {
        CHECKF(false, "%s: %d layers: no ring shapes listed for that", rel, info.n_layer);
        lares_model_close(m);
        return;
    }
    for (size_t c = 0; c < n_cases; c++) {
        const int nw = n_workers_of(&cases[c]);
        const char *ring = write_ring("ring.json", workers, nw, cases[c].w, path, "");
        char what[256];
        snprintf(what, sizeof what, "%s, %s", rel, cases[c].what);
        s = open_session(m, ring, 0, &err);
        CHECKF(s != NULL, "%s: %s", what, err.msg);
        if (s == NULL) {
            continue;
        }
        n_got = 0;
        CHECK_OK(generate(s, m, "Once upon a time", N_PREDICT, got, &n_got, &err), &err);
        CHECK(same_ids(got, n_got, want, n_want, what));
        lares_ring_stats rs;
        lares_ring_device dev[N_WORKERS + 1];
        CHECK_OK(lares_session_ring_stats(s, &rs, dev, N_WORKERS + 1, &err), &err);
        CHECKF(rs.n_devices == nw + 1 && rs.width > 0 && rs.hops > 0,
               "%s: %d devices, %" PRIu64 " hops", what, rs.n_devices, rs.hops);
        for (int d = 1; d <= nw; d++) {
            CHECKF(dev[d].windows_run > 0, "%s: device %d ran no window", what, d);
        }
        lares_session_free(s);
    }
    lares_model_close(m);
}

/* several generate calls on one ring session, a truncation, and a prompt in
 * batches of 2: the same ids as one device doing the same */
static void check_conversation(void) {
    lares_error err = {0};
    lares_model *m = NULL;
    const char *path = fixture("stories260K.gguf");
    CHECK_OK(lares_model_open(path, NULL, &m, &err), &err);
    if (m == NULL) {
        return;
    }
    static const int w[] = {0, 1, 1, 1, -1};
    const char *ring = write_ring("conv.json", workers, 3, w, path, "");
    lares_session *local = open_session(m, NULL, 2, &err);
    lares_session *remote = open_session(m, ring, 2, &err);
    CHECKF(local != NULL && remote != NULL, "sessions: %s", err.msg);
    static const char *const turns[] = {"Once upon a time, in a big forest, there lived a bear",
                                        " The bear was sad.", NULL, "One day"};
    for (size_t t = 0; t < LARES_ARRAY_LEN(turns) && local && remote; t++) {
        if (turns[t] == NULL) { /* start over: the workers must forget the old positions */
            lares_session_truncate(local, 0);
            lares_session_truncate(remote, 0);
            continue;
        }
        int32_t a[16], b[16];
        size_t na = 0, nb = 0;
        CHECK_OK(generate(local, m, turns[t], 16, a, &na, &err), &err);
        CHECK_OK(generate(remote, m, turns[t], 16, b, &nb, &err), &err);
        char what[64];
        snprintf(what, sizeof what, "conversation turn %zu", t);
        CHECK(same_ids(b, nb, a, na, what));
    }
    lares_session_free(local);
    lares_session_free(remote);

    /* "auto" windows with "placement": "even": the plain even split (the
     * planner's placements: tests/e2e/ring_auto.sh) */
    ring = write_ring("auto.json", workers, 3, NULL, path,
                      "\"windows\": \"auto\", \"placement\": \"even\"");
    lares_session *s = open_session(m, ring, 0, &err);
    CHECKF(s != NULL, "auto windows: %s", err.msg);
    if (s != NULL) {
        lares_ring_stats rs;
        lares_ring_device dev[4];
        CHECK_OK(lares_session_ring_stats(s, &rs, dev, 4, &err), &err);
        CHECKF(rs.rounds == 1 && dev[0].w == 2 && dev[1].w == 1 && dev[3].w == 1,
               "auto split of 5 layers over 4 devices: k=%d, w = %d %d %d %d", rs.rounds, dev[0].w,
               dev[1].w, dev[2].w, dev[3].w);
        lares_session_free(s);
    }
    lares_model_close(m);
}

typedef struct kill_ctx {
    int after;
    int seen;
    tworker *victim;
} kill_ctx;

static bool kill_on_token(const lares_token_info *t, void *user) {
    kill_ctx *k = user;
    (void)t;
    if (++k->seen == k->after) {
        worker_stop(k->victim); /* closes its sockets: as if the process died */
    }
    return true;
}

/* failover off: a worker that dies mid-generation makes the head name it and
 * stop with an error */
static void check_killed_worker(void) {
    lares_error err = {0};
    lares_model *m = NULL;
    const char *path = fixture("stories260K.gguf");
    CHECK_OK(lares_model_open(path, NULL, &m, &err), &err);
    tworker extra[2];
    if (m == NULL || !worker_start(&extra[0], 11, NULL, NULL) ||
        !worker_start(&extra[1], 12, NULL, NULL)) {
        CHECK(false);
        lares_model_close(m);
        return;
    }
    static const int w[] = {1, 2, 2, -1};
    const char *ring =
        write_ring("kill.json", extra, 2, w, path, "\"heartbeat_ms\": 50, \"timeout_ms\": 1000");
    lares_session *s = open_session_with(m, ring, 0, -1, &err);
    CHECKF(s != NULL, "kill: %s", err.msg);
    if (s != NULL) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        CHECK_OK(lares_tokenize(m, "Once upon a time", 16, NULL, &ids, &n_ids, &err), &err);
        kill_ctx k = {.after = 5, .victim = &extra[1]};
        lares_generate_opts go = lares_generate_opts_default();
        go.n_predict = 200;
        go.sampler.temperature = 0;
        go.on_token = kill_on_token;
        go.user = &k;
        lares_error gerr = {0};
        const uint64_t t0 = lares_now_ns();
        lares_status st = lares_generate(s, ids, n_ids, &go, NULL, 0, NULL, NULL, &gerr);
        const double secs = (double)(lares_now_ns() - t0) / 1e9;
        CHECKF(st == LARES_ENET, "generation with a dead worker returned %d (%s)", st, gerr.msg);
        CHECKF(strstr(gerr.msg, "w2") != NULL && strstr(gerr.msg, extra[1].addr) != NULL,
               "the error names the dead worker w2 at %s: %s", extra[1].addr, gerr.msg);
        /* not a timing check: only that nothing waits for ever (timeout 1 s) */
        CHECKF(secs < 30, "the head took %.1f s to give up", secs);
        /* the session stays failed, with the same message, rather than hanging */
        int32_t one = ids[0];
        lares_error again = {0};
        CHECK(lares_generate(s, &one, 1, &go, NULL, 0, NULL, NULL, &again) == LARES_ENET);
        lares_free(ids);
        lares_session_free(s);
    }
    worker_stop(&extra[0]);
    if (extra[1].w != NULL) {
        worker_stop(&extra[1]);
    }
    lares_model_close(m);
}

int main(void) {
    if (!harness_begin()) {
        return 1;
    }
    bool ok = true;
    for (int i = 0; i < N_WORKERS && ok; i++) {
        ok = worker_start(&workers[i], i + 1, NULL, NULL);
    }
    if (ok) {
        for (size_t i = 0; i < LARES_ARRAY_LEN(models); i++) {
            check_model(models[i], true);
        }
        for (size_t i = 0; i < LARES_ARRAY_LEN(maybe_models); i++) {
            check_model(maybe_models[i], false);
        }
        check_conversation();
        check_killed_worker();
    }
    for (int i = 0; i < N_WORKERS; i++) {
        if (workers[i].w != NULL) {
            if (check_failures) {
                worker_dump(&workers[i]);
            }
            worker_stop(&workers[i]);
        }
    }
    harness_end();
    return check_finish("cluster_ring");
}
