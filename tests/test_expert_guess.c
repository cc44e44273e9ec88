/*
 * exec: guessing the next MoE layer's experts (src/exec/guess.c).
 *
 * The routes are fed to a streaming executor of the shipped MoE model by
 * hand, so what each layer picks is known: where a layer's choice decides the
 * next layer's, the guesses read what the next router picks (most guesses
 * used, fewer reads while the token waits than without guessing); where the
 * layers choose independently, wrong guesses go first and do not cost the
 * cache its working set. The cache never holds more than its capacity, and
 * each route call flags exactly the experts still being read. Real forward
 * passes that compute those last give the logits of the weights in memory,
 * bit for bit, with and without guessing (test_mem_stream runs every budget
 * both ways too).
 */
#include "check.h"
#include "exec/exec_impl.h"
#include "exec_rig.h"

#define MOE_FILE "derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf"
#define N_CTX 64
#define N_TOKENS 400
#define N_BATCH 16

static bool open_moe(rig *r) {
    if (!rig_open(r, fixture(MOE_FILE), N_BATCH, N_CTX)) {
        return false;
    }
    CHECK(r->m->hp.n_expert == 4 && r->m->hp.n_expert_used == 2 && r->m->hp.n_layer >= 2);
    return true;
}

/* A streaming executor whose expert cache holds `slices` experts. */
static exec_local *open_exec(rig *r, int guess, int32_t slices) {
    uint64_t total = 0, least = 0;
    lares_error err = {0};
    exec_opts o = {.head = true, .expert_guess = guess};
    CHECK_OK(exec_weight_needs(r->m, r->kv, &o, &total, &least, &err), &err);
    o.weight_budget_bytes = least + (total - least) / 4;
    exec_local *e = NULL;
    CHECK_OK(exec_local_create(r->m, r->kv, r->cx, &o, &e, &err), &err);
    if (e == NULL) {
        return NULL;
    }
    exec_plan_info plan;
    exec_local_plan(e, &plan);
    CHECKF(plan.streaming && e->r.to_cache, "the executor does not stream (budget %llu)",
           (unsigned long long)o.weight_budget_bytes);
    CHECK(e->x.guess == (guess >= 0));
    uint64_t slice = 0;
    for (int32_t i = 0; i < r->m->hp.n_layer * e->x.n_expert; i++) {
        slice = LARES_MAX(slice, e->x.slices[i].bytes);
    }
    exec_experts_set_capacity(e, (uint64_t)slices * slice, false);
    return e;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

typedef struct fed {
    uint64_t misses, hits, guesses, guess_hits;
    bool within;   /* the cache stayed within its capacity after every layer */
    bool ready_ok; /* every route call flagged exactly the experts not in memory */
} fed;

/* Feeds N_TOKENS single-token passes: layer 0 picks a pair that moves by one
 * expert a token; each later layer picks the previous layer's pair moved by
 * two (linked) or a pair of its own at random (independent). */
static fed feed(rig *r, int guess, bool linked) {
    fed out = {.within = true, .ready_ok = true};
    exec_local *e = open_exec(r, guess, 6);
    if (e == NULL) {
        return out;
    }
    uint64_t seed = 7;
    const int32_t ne = 4;
    for (int32_t t = 0; t < N_TOKENS; t++) {
        e->r.n_tok = 1;
        int32_t pick[2] = {t % ne, (t + 1) % ne};
        for (int32_t l = 0; l < r->m->hp.n_layer; l++) {
            if (l > 0 && linked) {
                pick[0] = (pick[0] + 2) % ne;
                pick[1] = (pick[1] + 2) % ne;
            } else if (l > 0) {
                pick[0] = (int32_t)(lcg(&seed) % ne);
                pick[1] = (pick[0] + 1 + (int32_t)(lcg(&seed) % (ne - 1))) % ne;
            }
            const int32_t sorted[2] = {LARES_MIN(pick[0], pick[1]), LARES_MAX(pick[0], pick[1])};
            /* not ready: what is not resident, or was read on a guess */
            bool want[2], ready[2] = {true, true};
            int32_t n_late = 0;
            for (int k = 0; k < 2; k++) {
                const size_t s = (size_t)l * (size_t)ne + (size_t)sorted[k];
                want[k] = e->x.resident[s] && !(e->x.guessed != NULL && e->x.guessed[s]);
                n_late += want[k] ? 0 : 1;
            }
            const int32_t late = exec_routes_observe(e, l, sorted, 2, ready);
            out.ready_ok = out.ready_ok && late == n_late && ready[0] == want[0] &&
                           ready[1] == want[1];
            if (late > 0) {
                exec_experts_wait(e, l);
            }
            out.within = out.within && e->x.cached <= e->x.capacity;
        }
    }
    exec_counters c;
    exec_local_counters(e, &c);
    out.misses = c.expert_misses;
    out.hits = c.expert_hits;
    out.guesses = c.expert_guesses;
    out.guess_hits = c.expert_guess_hits;
    exec_local_free(e);
    return out;
}

static void check_fed(rig *r) {
    const fed off = feed(r, -1, true), on = feed(r, 1, true);
    CHECK(off.within && on.within && off.ready_ok && on.ready_ok);
    CHECK(off.guesses == 0 && off.guess_hits == 0);
    CHECK(off.hits + off.misses == on.hits + on.misses);
    CHECKF(on.guesses > N_TOKENS / 2 && on.guess_hits * 10 >= on.guesses * 9,
           "linked layers: %llu guesses, %llu used", (unsigned long long)on.guesses,
           (unsigned long long)on.guess_hits);
    /* the first layer has no layer before it to guess from: about half the
     * reads on demand stay */
    CHECKF(on.misses * 10 < off.misses * 6, "linked layers: %llu misses guessing, %llu not",
           (unsigned long long)on.misses, (unsigned long long)off.misses);

    const fed roff = feed(r, -1, false), ron = feed(r, 1, false);
    fprintf(stderr,
            "test_expert_guess: linked layers: %llu reads on demand without guessing, %llu with "
            "(%llu guesses, %llu used); independent: %llu and %llu (%llu guesses, %llu used)\n",
            (unsigned long long)off.misses, (unsigned long long)on.misses,
            (unsigned long long)on.guesses, (unsigned long long)on.guess_hits,
            (unsigned long long)roff.misses, (unsigned long long)ron.misses,
            (unsigned long long)ron.guesses, (unsigned long long)ron.guess_hits);
    CHECK(roff.within && ron.within && roff.ready_ok && ron.ready_ok);
    /* a wrong guess goes before anything a token used: the reads on demand
     * stay about what they are without guessing */
    CHECKF(ron.misses <= roff.misses + roff.misses / 20,
           "independent layers: %llu misses guessing, %llu not (%llu guesses, %llu used)",
           (unsigned long long)ron.misses, (unsigned long long)roff.misses,
           (unsigned long long)ron.guesses, (unsigned long long)ron.guess_hits);
}

/* Real passes, a prompt in one batch and then a token at a time: streamed
 * (experts still being read computed last, guessing or not), the logits are
 * those of the weights all in memory, bit for bit. */
static void check_logits(rig *r) {
    const int32_t n_vocab = r->m->hp.n_vocab, n_embd = r->m->hp.n_embd;
    float *logits[3], *x = r->x;
    const int32_t prompt[N_BATCH - 4] = {1, 100, 200, 300, 400, 500, 600, 700, 800, 900, 50, 60};
    const int32_t np = (int32_t)LARES_ARRAY_LEN(prompt);
    int32_t pos[N_BATCH];
    for (int32_t i = 0; i < N_BATCH; i++) {
        pos[i] = i;
    }
    exec_counters c[3];
    for (int g = 0; g < 3; g++) { /* in memory; streamed without guessing; with */
        logits[g] = calloc((size_t)n_vocab, sizeof(float));
        exec_opts o = {.head = true};
        exec_local *e = NULL;
        lares_error err = {0};
        if (g == 0) {
            CHECK_OK(exec_local_create(r->m, r->kv, r->cx, &o, &e, &err), &err);
        } else {
            e = open_exec(r, g == 1 ? -1 : 1, 5);
        }
        if (e == NULL) {
            continue;
        }
        exec_local_begin_pass(e, true);
        CHECK_OK(model_embed(r->m, prompt, np, x, &err), &err);
        CHECK_OK(exec_local_forward(e, 0, r->m->hp.n_layer, pos, np, x, &err), &err);
        CHECK_OK(exec_local_output(e, x + (size_t)(np - 1) * (size_t)n_embd, 1, logits[g], &err),
                 &err);
        for (int32_t p = np; p < N_CTX; p++) {
            int32_t tok = 0;
            for (int32_t i = 1; i < n_vocab; i++) {
                tok = logits[g][i] > logits[g][tok] ? i : tok;
            }
            exec_local_begin_pass(e, true);
            CHECK_OK(model_embed(r->m, &tok, 1, x, &err), &err);
            CHECK_OK(exec_local_forward(e, 0, r->m->hp.n_layer, &p, 1, x, &err), &err);
            CHECK_OK(exec_local_output(e, x, 1, logits[g], &err), &err);
        }
        exec_local_counters(e, &c[g]);
        exec_local_free(e);
    }
    for (int g = 1; g < 3; g++) {
        CHECKF(memcmp(logits[0], logits[g], (size_t)n_vocab * sizeof(float)) == 0,
               "streamed logits (guessing %s) differ from those in memory", g == 1 ? "off" : "on");
        CHECKF(c[g].expert_misses > 0, "nothing was read while passes computed");
    }
    CHECK(c[0].expert_misses == 0 && c[1].expert_guesses == 0);
    for (int g = 0; g < 3; g++) {
        free(logits[g]);
    }
}

int main(void) {
    rig r;
    if (open_moe(&r)) {
        check_fed(&r);
        check_logits(&r);
        rig_close(&r);
    }
    return check_finish("expert_guess");
}
