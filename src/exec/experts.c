/*
 * Expert slices of MoE layers and the cache that holds them while streaming.
 *
 * In a stacked expert tensor (ffn_{gate,up,down}_exps) expert e's weights are
 * one contiguous slice, so an expert is three ranges of the file. A token
 * uses n_expert_used of n_expert experts per layer; which ones is known only
 * when the layer's router has run. Then the missing slices of exactly the
 * chosen experts are requested together (their reads proceed in parallel),
 * and the caller waits for them. When the cache would overflow, slices of
 * other choices are released first: by default the least recently used, or
 * the coldest per byte (LARES_EXPERT_CACHE_HEAT: each use counts 1, halving
 * every HEAT_HALF_LIFE tokens, so an expert chosen often lately stays over
 * one chosen once). With routers whose consecutive tokens share most experts
 * recency predicts the next choice better than frequency: LRU hits more
 * (docs/performance.md), so it is the default. The cache holds at least one whole layer's
 * experts, so a prompt batch that uses them all still fits. While a layer
 * computes, the next layer's likely experts may be read ahead (guess.c).
 * Where direct reads serve (experts_direct.c) each resident slice holds a
 * slot of their arena, and the cache counts its slot's bytes.
 */
#include "exec/exec_impl.h"

#include <math.h>

enum { HEAT_HALF_LIFE = 4 }; /* tokens: 16 hit less (docs/performance.md) */

static const model_role exps_roles[3] = {MODEL_ROLE_EXP_GATE, MODEL_ROLE_EXP_UP,
                                         MODEL_ROLE_EXP_DOWN};

static size_t slot(const exec_local *e, int32_t layer, int32_t expert) {
    return (size_t)layer * (size_t)e->x.n_expert + (size_t)expert;
}

/* what slice s takes in the cache: its bytes, or a slot of direct reads */
static uint64_t cost(const exec_local *e, size_t s) {
    const exec_experts *x = &e->x;
    return x->io.d != NULL ? exec_experts_direct_cost(e, s) : x->slices[s].bytes;
}

/* Starts reading slice s (not resident): into a slot, or WILLNEED */
static void start_read(exec_local *e, size_t s) {
    exec_experts *x = &e->x;
    if (x->io.d != NULL) {
        exec_experts_direct_read(e, s);
        x->direct_bytes += x->slices[s].bytes;
    } else {
        mem_prefetch_async(&e->mf, &x->slices[s]);
    }
    x->resident[s] = true;
    x->cached += cost(e, s);
}

/* Drops resident slice s */
static void drop(exec_local *e, size_t s) {
    exec_experts *x = &e->x;
    x->cached -= cost(e, s);
    if (x->io.d != NULL && x->io.slot_of[s] >= 0) {
        exec_experts_direct_drop(e, s);
        x->release_bytes += x->slices[s].bytes;
    } else {
        x->release_bytes += mem_release(&e->mf, &x->slices[s]);
    }
    x->resident[s] = false;
    if (x->guessed != NULL) {
        x->guessed[s] = false;
    }
}

lares_status exec_experts_build(exec_local *e, lares_error *err) {
    exec_experts *x = &e->x;
    const model *m = e->m;
    if (m->hp.n_expert <= 0) {
        return LARES_OK;
    }
    x->n_expert = m->hp.n_expert;
    const size_t n = (size_t)m->hp.n_layer * (size_t)x->n_expert;
    x->slices = lares_calloc(n, sizeof *x->slices);
    x->last_use = lares_calloc(n, sizeof *x->last_use);
    x->resident = lares_calloc(n, sizeof *x->resident);
    x->heat = lares_calloc(n, sizeof *x->heat);
    x->missing = lares_alloc_array((size_t)x->n_expert, sizeof *x->missing);
    if (x->slices == NULL || x->last_use == NULL || x->resident == NULL || x->missing == NULL ||
        x->heat == NULL) {
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory for %zu expert slices", n);
    }
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        if (e->unit_of_layer[l] < 0) {
            continue;
        }
        uint64_t layer_bytes = 0;
        for (int k = 0; k < 3; k++) {
            const model_weight *w = &m->plan->layers[l].w[exps_roles[k]];
            if (w->t == NULL) {
                continue; /* a dense layer in a MoE model */
            }
            for (int32_t ex = 0; ex < x->n_expert; ex++) {
                mem_range r;
                lares_status st = mem_expert_range(w, ex, &r, err);
                if (st == LARES_OK) {
                    st = mem_span_add(&x->slices[slot(e, l, ex)], r.lo, r.hi, err);
                }
                if (st != LARES_OK) {
                    return st;
                }
                layer_bytes += r.hi - r.lo;
            }
        }
        x->bytes += layer_bytes;
        x->layer_max = LARES_MAX(x->layer_max, layer_bytes);
        /* a tick per MoE layer a token runs */
        x->half_life += layer_bytes > 0 ? HEAT_HALF_LIFE : 0;
    }
    x->half_life = x->half_life > 0 ? x->half_life : HEAT_HALF_LIFE;
    return exec_guess_build(e, err);
}

void exec_experts_free(exec_local *e) {
    exec_experts *x = &e->x;
    exec_experts_direct_close(e);
    if (x->slices != NULL) {
        const size_t n = (size_t)e->m->hp.n_layer * (size_t)x->n_expert;
        for (size_t i = 0; i < n; i++) {
            mem_span_free(&x->slices[i]);
        }
    }
    lares_free(x->slices);
    lares_free(x->last_use);
    lares_free(x->resident);
    lares_free(x->heat);
    lares_free(x->missing);
    exec_guess_free(x);
    memset(x, 0, sizeof *x);
}

/* a slice's heat now: its uses, each halved every half_life ticks since */
static double heat_now(const exec_experts *x, size_t i) {
    return (double)x->heat[i] * exp2(-(double)(x->tick - x->last_use[i]) / x->half_life);
}

/* what a slice is worth keeping: an unused guess nothing; else heat per
 * byte, or recency */
static bool colder(const exec_local *e, size_t a, size_t b) {
    const exec_experts *x = &e->x;
    const bool ga = x->guessed != NULL && x->guessed[a], gb = x->guessed != NULL && x->guessed[b];
    if (ga != gb) {
        return ga;
    }
    if (e->o.expert_cache == LARES_EXPERT_CACHE_LRU) {
        return x->last_use[a] < x->last_use[b];
    }
    return heat_now(x, a) * (double)x->slices[b].bytes <
           heat_now(x, b) * (double)x->slices[a].bytes;
}

/* Releases the coldest slices used before tick `since` until `need` more
 * bytes fit; false when they do not. */
static bool make_room_since(exec_local *e, uint64_t need, uint64_t since) {
    exec_experts *x = &e->x;
    const size_t n = (size_t)e->m->hp.n_layer * (size_t)x->n_expert;
    while (x->cached + need > x->capacity) {
        size_t victim = n;
        for (size_t i = 0; i < n; i++) {
            /* an unused guess may go once its layer has passed */
            const bool stale = x->guessed != NULL && x->guessed[i] && x->last_use[i] != x->tick;
            if (x->resident[i] && (x->last_use[i] < since || stale) &&
                (victim == n || colder(e, i, victim))) {
                victim = i;
            }
        }
        if (victim == n) {
            return false;
        }
        drop(e, victim);
    }
    return true;
}

/* Releases the coldest slices not chosen now until `need` more bytes fit
 * (it stops with only this call's experts left: capacity holds a layer). */
static void make_room(exec_local *e, uint64_t need) {
    (void)make_room_since(e, need, e->x.tick);
}

/* While this layer computes, starts reading the next MoE layer's likely
 * experts, making room only from slices no token used in the last pass. */
static void guess_ahead(exec_local *e, int32_t layer, const int32_t *experts, int32_t n) {
    exec_experts *x = &e->x;
    int32_t next[EXEC_GUESS_MAX];
    const int32_t n_next = exec_guess_next(e, layer, experts, n, next);
    if (n_next == 0 || !exec_guess_pays(e)) {
        return; /* scored all the same: reads start once guesses are picked */
    }
    const int32_t nl = x->next_moe[layer];
    const uint64_t since = x->tick > x->ticks_per_pass ? x->tick - x->ticks_per_pass : 0;
    for (int32_t i = 0; i < n_next; i++) {
        const size_t s = slot(e, nl, next[i]);
        if (!make_room_since(e, cost(e, s), since)) {
            break;
        }
        start_read(e, s);
        x->guessed[s] = true;
        x->last_use[s] = x->tick; /* not evicted for the next guess of this layer */
        x->read_bytes += x->slices[s].bytes;
        x->guesses++;
    }
    if (x->io.d != NULL) {
        exec_experts_direct_start(e);
    }
}

void exec_experts_set_capacity(exec_local *e, uint64_t capacity, bool untracked) {
    exec_experts *x = &e->x;
    if (x->slices == NULL) {
        return;
    }
    const size_t n = (size_t)e->m->hp.n_layer * (size_t)x->n_expert;
    for (size_t i = 0; i < n && (untracked || capacity == 0); i++) {
        if (x->io.d != NULL && x->io.slot_of[i] >= 0) {
            exec_experts_direct_drop(e, i);
        } else if (untracked && capacity > 0) {
            x->release_bytes += mem_release(&e->mf, &x->slices[i]);
        }
        x->resident[i] = false; /* the OS keeps or drops them as it likes */
        if (x->guessed != NULL) {
            x->guessed[i] = false;
        }
    }
    if (untracked || capacity == 0) {
        x->cached = 0;
    }
    x->capacity = capacity;
    x->tick++; /* nothing is "chosen now": everything may go */
    make_room(e, 0);
    exec_experts_direct_limit(e, capacity); /* free slots give their pages back */
}

int32_t exec_experts_on_route(void *user, int32_t layer, const int32_t *experts, int32_t n,
                              bool *ready) {
    exec_local *e = user;
    exec_experts *x = &e->x;
    if (x->slices == NULL || layer < 0 || layer >= e->m->hp.n_layer ||
        e->unit_of_layer[layer] < 0) {
        return 0;
    }
    x->tick++;
    if (x->guess && e->r.prev != NULL) {
        exec_guess_learn(e, layer, experts, n);
    }
    int32_t n_missing = 0, n_guessed = 0;
    uint64_t need = 0;
    for (int32_t i = 0; i < n; i++) {
        if (experts[i] < 0 || experts[i] >= x->n_expert) {
            continue;
        }
        const size_t s = slot(e, layer, experts[i]);
        x->heat[s] = (float)(heat_now(x, s) + 1.0);
        x->last_use[s] = x->tick;
        if (x->resident[s]) {
            x->hits++;
            if (x->guessed != NULL && x->guessed[s]) {
                /* read on a guess: what has not arrived is waited for */
                x->guessed[s] = false;
                x->guess_hits++;
                x->missing[x->n_expert - 1 - n_guessed++] = experts[i];
                ready[i] = false;
            }
        } else {
            x->missing[n_missing++] = experts[i];
            need += cost(e, s);
            ready[i] = false;
        }
    }
    if (n_missing > 0) {
        x->misses += (uint64_t)n_missing;
        make_room(e, need);
    }
    /* every read in flight before the pass computes the ready experts */
    for (int32_t i = 0; i < n_missing; i++) {
        const size_t s = slot(e, layer, x->missing[i]);
        start_read(e, s);
        if (x->io.d != NULL) { /* (through the page cache, counted when populated) */
            x->read_bytes += x->slices[s].bytes;
        }
    }
    if (n_missing > 0 && x->io.d != NULL) {
        exec_experts_direct_start(e);
    }
    for (int32_t i = 0; i < n_guessed; i++) { /* the guessed ones follow the misses */
        x->missing[n_missing + i] = x->missing[x->n_expert - 1 - i];
    }
    x->n_missing = n_missing;
    x->n_late = n_missing + n_guessed;
    x->late_layer = layer;
    x->route = experts;
    x->n_route = n;
    if (x->n_late == 0 && x->guess && e->r.prev != NULL) {
        guess_ahead(e, layer, experts, n);
    }
    return x->n_late;
}

void exec_experts_wait(void *user, int32_t layer) {
    exec_local *e = user;
    exec_experts *x = &e->x;
    if (x->n_late == 0 || x->late_layer != layer) {
        return;
    }
    const uint64_t t0 = lares_now_ns();
    bool direct = x->io.d != NULL;
    if (direct && !exec_experts_direct_wait(e, layer, x->missing, x->n_late)) {
        /* a read failed: what the slots hold cannot be trusted; every slice
         * leaves the cache, and these come through the page cache */
        const size_t n = (size_t)e->m->hp.n_layer * (size_t)x->n_expert;
        for (size_t s = 0; s < n; s++) {
            if (x->resident[s]) {
                drop(e, s);
            }
        }
        exec_experts_direct_stop(e);
        x->direct_fallbacks++;
        direct = false;
        for (int32_t i = 0; i < x->n_late; i++) {
            const size_t s = slot(e, layer, x->missing[i]);
            x->resident[s] = true;
            x->cached += cost(e, s);
        }
    }
    for (int32_t i = 0; i < x->n_late && !direct; i++) {
        const size_t s = slot(e, layer, x->missing[i]);
        mem_io io = {0};
        lares_error err = {0};
        /* exactly the slice: read-ahead around a fault would read other experts */
        if (mem_prefetch(&e->mf, &x->slices[s], MEM_READ_FADVISE_POPULATE, NULL, 0, &io, &err) !=
            LARES_OK) {
            lares_log(LARES_LOG_WARN, "exec: expert prefetch failed: %s", err.msg);
        }
        if (i < x->n_missing) { /* a guess's bytes were counted when it was read */
            x->read_bytes += io.bytes;
        }
    }
    x->wait_ns += lares_now_ns() - t0;
    x->n_late = 0;
    if (x->guess && e->r.prev != NULL) {
        guess_ahead(e, layer, x->route, x->n_route);
    }
}
