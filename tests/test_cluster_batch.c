/*
 * cluster + api/batch (issue 20): several sequences at once through rings on
 * loopback (in-process workers). Each sequence must get exactly the greedy
 * ids it gets alone on one device:
 *
 * - started together, through rings of 2 and 3 devices (k = 1 and k = 2,
 *   with and without layers on the head), with the groups pipelined (more
 *   than one batch in the ring at once, lares_ring_stats.max_in_flight) and
 *   with one group (every sequence in one pass, one batch at a time);
 * - started at different steps, and with prompt lookup (drafts in the rows);
 * - a sequence cancelled mid-way ends at once and frees its slot; a new
 *   prompt in that slot gets its own ids, the others are untouched;
 * - a worker killed mid-batch: with failover the batch goes on (KV from the
 *   head's mirror copy, or the sequences re-run together without it) and every
 *   sequence still gets its ids; one failover counted, the worker out;
 * - a worker slowed mid-batch: re-balancing moves its layers away between
 *   two steps (every slot's KV moved, nothing re-run), the same ids.
 */
#include "cluster/cluster.h"
#include "cluster_harness.h"

#define N_SEQ   4
#define N_GEN   24
#define N_CTX   256
#define MAX_TOK 64

static tworker workers[3];

static const char *const prompts[N_SEQ] = {
    "Once upon a time",
    "The little dog ran to the park and",
    "Tom",
    "One day, a girl named Lily found a big red ball in the garden. She",
};

typedef struct collect {
    int32_t ids[MAX_TOK];
    int n;
    int after; /* > 0: disturb `victim` when this many tokens came */
    tworker *victim;
    double slow; /* > 0: slow it down by this; 0: stop it */
} collect;

static bool on_token(const lares_token_info *t, void *user) {
    collect *c = user;
    if (t->token >= 0 && c->n < MAX_TOK) {
        c->ids[c->n++] = t->token;
    }
    if (c->victim != NULL && c->n == c->after) {
        if (c->slow > 0) {
            lares_worker_set_slowdown(c->victim->w, c->slow);
        } else {
            worker_stop(c->victim); /* closes its sockets: as if the process died */
        }
    }
    return true;
}

static lares_generate_opts gen_opts(collect *c, int n_predict) {
    lares_generate_opts o = lares_generate_opts_default();
    o.n_predict = n_predict;
    o.sampler.temperature = 0;
    o.on_token = on_token;
    o.user = c;
    return o;
}

typedef struct prompt_ids {
    int32_t *ids;
    size_t n;
} prompt_ids;

static prompt_ids p[N_SEQ];
static collect want[N_SEQ]; /* each prompt alone on one device */

static void alone(lares_model *m, const prompt_ids *pi, int n_predict, collect *out) {
    lares_error err = {0};
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = N_CTX;
    so.n_threads = 1;
    lares_session *s = NULL;
    CHECK_OK(lares_session_create(m, &so, &s, &err), &err);
    if (s == NULL) {
        return;
    }
    memset(out, 0, sizeof *out);
    lares_generate_opts o = gen_opts(out, n_predict);
    CHECK_OK(lares_generate(s, pi->ids, pi->n, &o, NULL, 0, NULL, NULL, &err), &err);
    lares_session_free(s);
}

static lares_batch *open_batch_with(lares_model *m, const char *ring, int failover, int rebalance,
                                    lares_error *err) {
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = N_CTX;
    so.n_threads = 1;
    so.ring = ring;
    so.ring_rebalance = rebalance;
    so.ring_failover = failover;
    lares_batch *b = NULL;
    return lares_batch_create(m, &so, N_SEQ, &b, err) == LARES_OK ? b : NULL;
}

static lares_batch *open_batch(lares_model *m, const char *ring, int failover, lares_error *err) {
    return open_batch_with(m, ring, failover, -1, err);
}

static int run_all(lares_batch *b) {
    lares_error err = {0};
    int steps = 0, active = 1;
    while (active > 0 && steps < 2000) {
        if (lares_batch_step(b, &active, &err) != LARES_OK) {
            CHECKF(false, "step: %s", err.msg);
            return steps;
        }
        steps++;
    }
    return steps;
}

static bool same(const collect *got, const collect *w, const char *what, int i) {
    int k = 0;
    while (k < got->n && k < w->n && got->ids[k] == w->ids[k]) {
        k++;
    }
    CHECKF(k == w->n && got->n == w->n,
           "%s: sequence %d: %d of %d/%d tokens as alone on one device", what, i, k, got->n, w->n);
    return k == w->n && got->n == w->n;
}

static void ring_stats(lares_batch *b, lares_ring_stats *st) {
    lares_error err = {0};
    memset(st, 0, sizeof *st);
    CHECK_OK(lares_session_ring_stats(lares_batch_session(b), st, NULL, 0, &err), &err);
}

/* arrangements through one ring: together (pipelined, then one group),
 * started at different steps, with prompt lookup, with a draft model on the
 * head (each sequence its own draft cache) */
static void check_ring(lares_model *m, const int *w, int n_workers, const char *what) {
    lares_error err = {0};
    const char *ring = write_ring("batch.json", workers, n_workers, w, fixture("stories260K.gguf"),
                                  "\"heartbeat_ms\": 100, \"timeout_ms\": 3000");
    lares_model *dm = NULL;
    CHECK_OK(lares_model_open(fixture("derived/stories260K-moe4top2-identical-experts.gguf"), NULL,
                              &dm, &err),
             &err);
    for (int arr = 0; arr < 5 && dm != NULL; arr++) {
        lares_batch *b = open_batch(m, ring, 0, &err);
        CHECKF(b != NULL, "%s: batch: %s", what, err.msg);
        if (b == NULL) {
            break;
        }
        if (arr == 4) {
            CHECK_OK(lares_batch_set_draft(b, dm, &err), &err);
        }
        /* prompts read whole, as alone (docs/batching.md "Identical output") */
        lares_batch_set_shared_prompt_rows(b, 0);
        lares_batch_set_ring_groups(b, arr == 1 ? 1 : 0);
        collect got[N_SEQ];
        memset(got, 0, sizeof got);
        lares_generate_opts o[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            o[i] = gen_opts(&got[i], N_GEN);
            o[i].lookup = arr == 3 ? 4 : 0;
            o[i].draft_n = arr == 4 ? 3 : 0;
        }
        const int first = arr == 2 ? 1 : N_SEQ;
        for (int i = 0; i < first; i++) {
            CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
        }
        if (arr == 2) { /* the others join after 3 steps, one a step */
            int active = 0;
            for (int k = 0; k < 3; k++) {
                CHECK_OK(lares_batch_step(b, &active, &err), &err);
            }
            for (int i = 1; i < N_SEQ; i++) {
                CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
                CHECK_OK(lares_batch_step(b, &active, &err), &err);
            }
        }
        run_all(b);
        char name[160];
        snprintf(name, sizeof name, "%s, arrangement %d", what, arr);
        int drafted = 0;
        for (int i = 0; i < N_SEQ; i++) {
            same(&got[i], &want[i], name, i);
            lares_stats sst;
            lares_batch_stats(b, i, &sst);
            drafted += sst.n_drafted;
        }
        CHECKF(arr < 3 || drafted > 0, "%s: no drafts", name);
        lares_ring_stats st;
        ring_stats(b, &st);
        CHECKF(st.kv_slots == N_SEQ + 1, "%s: %d kv slots", name, st.kv_slots);
        if (arr == 1) {
            CHECKF(st.max_in_flight == 1, "%s: one group, %d batches in flight at once", name,
                   st.max_in_flight);
        } else if (arr == 0) {
            CHECKF(st.max_in_flight >= 2, "%s: pipelined, but at most %d batch in flight", name,
                   st.max_in_flight);
        }
        lares_batch_free(b);
    }
    lares_model_close(dm);
}

/* A sequence cancelled mid-way ends, its slot is free at once and serves a
 * new prompt with that prompt's own ids; the others are untouched. */
static void check_cancel(lares_model *m) {
    lares_error err = {0};
    static const int w[] = {1, 2, 2};
    const char *ring = write_ring("cancel.json", workers, 2, w, fixture("stories260K.gguf"), "");
    lares_batch *b = open_batch(m, ring, 0, &err);
    CHECKF(b != NULL, "cancel: batch: %s", err.msg);
    if (b == NULL) {
        return;
    }
    lares_batch_set_shared_prompt_rows(b, 0);
    collect got[N_SEQ], again;
    memset(got, 0, sizeof got);
    memset(&again, 0, sizeof again);
    lares_generate_opts o[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        o[i] = gen_opts(&got[i], N_GEN);
        CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
    }
    int active = 0;
    for (int k = 0; k < 6; k++) {
        CHECK_OK(lares_batch_step(b, &active, &err), &err);
    }
    lares_batch_cancel(b, 1);
    for (int k = 0; k < 8 && lares_batch_active(b, 1); k++) {
        CHECK_OK(lares_batch_step(b, &active, &err), &err);
    }
    lares_stats st;
    lares_batch_stats(b, 1, &st);
    CHECKF(!lares_batch_active(b, 1) && st.stop == LARES_STOP_CANCELED,
           "cancel: sequence 1 still active or ended by %d", st.stop);
    CHECKF(got[1].n < N_GEN, "cancel: sequence 1 generated all %d tokens", got[1].n);
    /* its slot takes another prompt (prompt 2's) at once */
    lares_generate_opts oa = gen_opts(&again, N_GEN);
    CHECK_OK(lares_batch_start(b, 1, p[2].ids, p[2].n, &oa, &err), &err);
    run_all(b);
    same(&again, &want[2], "cancel: the new prompt in the freed slot", 1);
    for (int i = 0; i < N_SEQ; i++) {
        if (i != 1) {
            same(&got[i], &want[i], "cancel: the others", i);
        }
    }
    lares_batch_free(b);
}

/* A worker killed mid-batch: the batch goes on with every sequence's ids
 * (kv_mirror on: the lost layers' entries of every slot from the head's
 * copy; off: the sequences re-run through them together). */
static void check_killed(lares_model *m, bool mirror) {
    lares_error err = {0};
    tworker extra[2];
    if (!worker_start(&extra[0], 21, NULL, NULL) || !worker_start(&extra[1], 22, NULL, NULL)) {
        CHECK(false);
        return;
    }
    static const int w[] = {1, 2, 2};
    char extra_json[128];
    snprintf(extra_json, sizeof extra_json,
             "\"heartbeat_ms\": 50, \"timeout_ms\": 1000, \"kv_mirror\": %s",
             mirror ? "true" : "false");
    const char *ring =
        write_ring("kill.json", extra, 2, w, fixture("stories260K.gguf"), extra_json);
    lares_batch *b = open_batch(m, ring, 1, &err);
    CHECKF(b != NULL, "kill: batch: %s", err.msg);
    if (b != NULL) {
        lares_batch_set_shared_prompt_rows(b, 0);
        collect got[N_SEQ];
        memset(got, 0, sizeof got);
        lares_generate_opts o[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            o[i] = gen_opts(&got[i], N_GEN);
            CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
        }
        got[0].after = 8; /* w2 dies when sequence 0 has 8 tokens: the others are on the way */
        got[0].victim = &extra[1];
        run_all(b);
        const char *what = mirror ? "killed worker (kv mirror)" : "killed worker (re-run)";
        for (int i = 0; i < N_SEQ; i++) {
            same(&got[i], &want[i], what, i);
        }
        lares_ring_stats st;
        lares_ring_device dev[3];
        memset(&st, 0, sizeof st);
        CHECK_OK(lares_session_ring_stats(lares_batch_session(b), &st, dev, 3, &err), &err);
        CHECKF(st.failovers == 1 && !dev[2].in_ring, "%s: %" PRIu64 " failovers, w2 in ring %d",
               what, st.failovers, (int)dev[2].in_ring);
        /* mirrored: at most each sequence's last pass, whose copy may have
         * gone down with the worker; else every sequence's conversation */
        CHECKF(mirror ? st.rebuilt_tokens <= N_SEQ : st.rebuilt_tokens >= 20,
               "%s: %" PRIu64 " positions re-run", what, st.rebuilt_tokens);
        /* re-run together: about as many passes as the longest sequence
         * needs (one by one they took 32 passes for 76 positions here) */
        CHECKF(mirror || st.rebuild_passes * (N_SEQ - 1) <= st.rebuilt_tokens,
               "%s: %" PRIu64 " passes for %" PRIu64 " positions re-run", what, st.rebuild_passes,
               st.rebuilt_tokens);
        lares_batch_free(b);
    }
    worker_stop(&extra[0]);
    if (extra[1].w != NULL) {
        worker_stop(&extra[1]);
    }
}

/* A worker 100 times slower mid-batch: with re-balancing on, the head brings
 * the groups home, moves its layers away (every slot's KV transferred from
 * the live old owner or the head's copy, nothing re-run), and every sequence
 * still gets its ids. */
static void check_rebalance(lares_model *m) {
    lares_error err = {0};
    tworker ws[3];
    for (int i = 0; i < 3; i++) {
        if (!worker_start(&ws[i], 31 + i, NULL, NULL)) {
            CHECK(false);
            return;
        }
    }
    static const int w[] = {1, 2, 1, 1};
    const char *ring = write_ring(
        "slow.json", ws, 3, w, fixture("stories260K.gguf"),
        "\"heartbeat_ms\": 50, \"timeout_ms\": 3000, \"rebalance_opts\": {\"warmup_tokens\": 2, "
        "\"hold_tokens\": 4, \"cooldown_tokens\": 16, \"threshold\": 1.0, \"min_delta_ms\": 1.0}");
    lares_batch *b = open_batch_with(m, ring, 1, 1, &err);
    CHECKF(b != NULL, "rebalance: batch: %s", err.msg);
    if (b != NULL) {
        lares_batch_set_shared_prompt_rows(b, 0);
        collect got[N_SEQ];
        memset(got, 0, sizeof got);
        lares_generate_opts o[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            o[i] = gen_opts(&got[i], N_GEN);
            CHECK_OK(lares_batch_start(b, i, p[i].ids, p[i].n, &o[i], &err), &err);
        }
        got[0].after = 4;
        got[0].victim = &ws[0];
        got[0].slow = 100;
        run_all(b);
        for (int i = 0; i < N_SEQ; i++) {
            same(&got[i], &want[i], "rebalance", i);
        }
        lares_ring_stats st;
        lares_ring_device dev[4];
        memset(&st, 0, sizeof st);
        CHECK_OK(lares_session_ring_stats(lares_batch_session(b), &st, dev, 4, &err), &err);
        CHECKF(st.replans >= 1 && st.failovers == 0 && dev[1].n_layers < 2,
               "rebalance: %" PRIu64 " re-plans, %" PRIu64 " failovers, w1 holds %d layers",
               st.replans, st.failovers, dev[1].n_layers);
        CHECKF(strstr(st.last_switch, "re-balance") != NULL && st.rebuilt_tokens == 0 &&
                   strstr(st.last_switch, "over 5 KV slots") != NULL,
               "rebalance: %" PRIu64 " positions re-run; last switch: %s", st.rebuilt_tokens,
               st.last_switch);
        lares_batch_free(b);
    }
    for (int i = 0; i < 3; i++) {
        worker_stop(&ws[i]);
    }
}

/* The groups kept in flight, worked by hand from the cost model
 * (cluster_pipe_groups): busy(G) = max over devices of G x wait + rows x row,
 * trip(G) = sum of wait + row x ceil(rows / G), the cycle the larger. */
static void check_choose(void) {
    /* compute only (weights in memory), 10 ms a row on each of 4 devices, 4
     * rows: G=1 160 ms (one trip of 4 rows), 2: 80, 4: 40 (each device busy
     * 40 ms, a trip 40) */
    const double none[4] = {0, 0, 0, 0}, ten[4] = {10, 10, 10, 10};
    CHECK(cluster_pipe_groups(none, 0, ten, 4, 4, 4, 1) == 4);
    CHECK(cluster_pipe_groups(none, 0, ten, 4, 4, 2, 1) == 2); /* at most 2 */
    /* the emulated 7B ring: the head waits 2250 ms a pass for its streamed
     * weights, the workers 1230, a row costs 300 and 330 ms: G=1 11100 ms
     * (5940 waits + 4 x 1290), 2: 8520 (the trip: 5940 + 2 x 1290; the head
     * busy 5700), 3: 8520 (ceil(4 / 3) = 2 rows), 4: 10200 (the head reads 4
     * times: 9000 + 1200) -> 2 (3 ties, fewer reads) */
    const double wait[4] = {2250, 1230, 1230, 1230}, row[4] = {300, 330, 330, 330};
    CHECKF(cluster_pipe_groups(wait, 0, row, 4, 4, 4, 4) == 2, "7B: %d groups",
           cluster_pipe_groups(wait, 0, row, 4, 4, 4, 4));
    CHECK(cluster_pipe_groups(wait, 0, row, 4, 4, 4, 1) == 2);
    /* 10 % or it stays: from 3 (8520) nothing is faster enough */
    CHECK(cluster_pipe_groups(wait, 0, row, 4, 4, 4, 3) == 3);
    /* one sequence: one group whatever the devices */
    CHECK(cluster_pipe_groups(none, 0, ten, 4, 1, 1, 4) == 1);
    /* each count priced with its own waits (the emulated 7B ring at k = 4,
     * session 32): one group hides the reads in the devices' idle time, 100
     * ms a pass; two or four wait 1800. Priced with one group's waits, four
     * look best (G=1: a trip of 4 x (100 + 4 x 300) = 5200; 4: busy 4 x 100
     * + 1200 = 1600, a trip 4 x 400 = 1600) and the count flaps between
     * them; with their own, G=1 5200, 2: a trip of 4 x (1800 + 600) = 9600,
     * 4: busy 4 x 1800 + 1200 = 8400 -> 1 */
    double by_g[4][4];
    for (int g = 0; g < 4; g++) {
        for (int d = 0; d < 4; d++) {
            by_g[g][d] = g == 0 ? 100 : 1800;
        }
    }
    const double three[4] = {300, 300, 300, 300};
    CHECK(cluster_pipe_groups(&by_g[0][0], 0, three, 4, 4, 4, 1) == 4);
    CHECKF(cluster_pipe_groups(&by_g[0][0], 4, three, 4, 4, 4, 4) == 1, "by count: %d groups",
           cluster_pipe_groups(&by_g[0][0], 4, three, 4, 4, 4, 4));
    CHECK(cluster_pipe_groups(&by_g[0][0], 4, three, 4, 4, 4, 1) == 1);
}

int main(void) {
    if (!harness_begin()) {
        return 1;
    }
    lares_error err = {0};
    lares_model *m = NULL;
    CHECK_OK(lares_model_open(fixture("stories260K.gguf"), NULL, &m, &err), &err);
    bool ok = m != NULL;
    for (int i = 0; i < 3 && ok; i++) {
        ok = worker_start(&workers[i], i + 1, NULL, NULL);
    }
    for (int i = 0; i < N_SEQ && ok; i++) {
        CHECK_OK(lares_tokenize(m, prompts[i], strlen(prompts[i]), NULL, &p[i].ids, &p[i].n, &err),
                 &err);
        alone(m, &p[i], N_GEN, &want[i]);
    }
    check_choose();
    if (ok) {
        static const int w_2[] = {1, 2, 2};    /* 2 workers, k = 1 */
        static const int w_3[] = {0, 1, 1, 1}; /* 3 workers, k = 2 (W = 3), head none */
        static const int w_k[] = {1, 1, 1};    /* 2 workers, k = 2 (W = 3) */
        check_ring(m, w_2, 2, "2 workers, k=1, head 1 layer");
        check_ring(m, w_3, 3, "3 workers, k=2, head none");
        check_ring(m, w_k, 2, "2 workers, k=2, head 1 layer");
        check_cancel(m);
        check_killed(m, true);
        check_killed(m, false);
        check_rebalance(m);
    }
    for (int i = 0; i < 3; i++) {
        if (workers[i].w != NULL) {
            if (check_failures) {
                worker_dump(&workers[i]);
            }
            worker_stop(&workers[i]);
        }
    }
    for (int i = 0; i < N_SEQ; i++) {
        lares_free(p[i].ids);
    }
    lares_model_close(m);
    harness_end();
    return check_finish("cluster_batch");
}
