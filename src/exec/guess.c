/*
 * Guessing the next MoE layer's experts while the disk is idle (issue 18).
 *
 * Which experts a layer uses is known only once its router has run, after
 * its attention; a miss then makes the token wait for the read. A layer's
 * choice says something about the next layer's: both routers read the same
 * residual stream, and published MoE models show a strong affinity between
 * the experts of consecutive layers. So the cache learns, over single-token
 * passes, how often expert j was chosen at the next MoE layer when expert i
 * was chosen at this one (counts that halve once an expert has been seen
 * GUESS_MEMORY times, so they follow a drifting router), and when a layer's
 * own reads are done it starts reading the next layer's likeliest experts
 * that are not resident: p(j) = mean over this layer's choices i of
 * count(i, j) / seen(i), at most EXEC_GUESS_MAX experts with p >= GUESS_MIN_P.
 *
 * Whether guessing pays depends on the router: every guess is scored when
 * the next layer's router has run (picked or not, a moving share over about
 * the last GUESS_WINDOW guesses), and reads start only while that share is at
 * least GUESS_PAYS; below it the guesses are made and scored but read
 * nothing, so a router without such affinity costs nothing but the counting
 * (expert_guess > 0 reads every guess, for measuring; < 0 turns it all off).
 *
 * A guess only starts a read (WILLNEED) and counts the slice in the cache;
 * the next layer uses it if its router picks it (waiting for the rest of the
 * read then), and an unused guess is the first thing evicted. Room is made
 * only from slices no token used in the last pass over the layers, so a
 * wrong guess never pushes out the working set. Output is unchanged: the
 * guess decides what is read early, never what is computed.
 */
#include "exec/exec_impl.h"

enum {
    GUESS_WINDOW = 64,   /* guesses the measured share of picked ones spans */
    GUESS_MIN_SEEN = 4,  /* an expert's row counts once it was seen this often */
    GUESS_MEMORY = 64    /* a row halves when seen this often: follows drift */
};
static const float GUESS_MIN_P = 0.25f;
/* a wrong guess costs a read the next layer's misses may queue behind and
 * room in the cache: reads start while at least half the guesses are picked */
static const double GUESS_PAYS = 0.5;
enum { GUESS_MIN_SCORED = 16 }; /* guesses scored before reads may start */

lares_status exec_guess_build(exec_local *e, lares_error *err) {
    exec_experts *x = &e->x;
    const int32_t nl = e->m->hp.n_layer, ne = x->n_expert;
    if (x->slices == NULL || e->o.expert_guess < 0) {
        return LARES_OK;
    }
    x->next_moe = lares_alloc_array((size_t)nl, sizeof *x->next_moe);
    x->prev_moe = lares_alloc_array((size_t)nl, sizeof *x->prev_moe);
    x->co = lares_calloc((size_t)nl * (size_t)ne * (size_t)ne, sizeof *x->co);
    x->seen = lares_calloc((size_t)nl * (size_t)ne, sizeof *x->seen);
    x->guessed = lares_calloc((size_t)nl * (size_t)ne, sizeof *x->guessed);
    x->p = lares_alloc_array((size_t)ne, sizeof *x->p);
    if (x->next_moe == NULL || x->prev_moe == NULL || x->co == NULL || x->seen == NULL ||
        x->guessed == NULL || x->p == NULL) {
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory for expert guesses");
    }
    int32_t last = -1;
    for (int32_t l = 0; l < nl; l++) {
        x->next_moe[l] = -1;
        x->prev_moe[l] = -1;
        if (e->unit_of_layer[l] < 0 || x->slices[(size_t)l * (size_t)ne].n == 0) {
            continue; /* not run here, or a dense layer */
        }
        if (last >= 0) {
            x->next_moe[last] = l;
            x->prev_moe[l] = last;
        }
        last = l;
        x->ticks_per_pass++;
    }
    x->guess = true;
    x->pend_layer = -1;
    return LARES_OK;
}

void exec_guess_free(exec_experts *x) {
    lares_free(x->next_moe);
    lares_free(x->prev_moe);
    lares_free(x->co);
    lares_free(x->seen);
    lares_free(x->guessed);
    lares_free(x->p);
}

void exec_guess_learn(exec_local *e, int32_t layer, const int32_t *experts, int32_t n) {
    exec_experts *x = &e->x;
    const int32_t ne = x->n_expert;
    if (x->pend_layer == layer && e->r.n_tok == 1) { /* score the guesses for this layer */
        const double keep = 1.0 - 1.0 / GUESS_WINDOW;
        for (int32_t g = 0; g < x->n_pend; g++) {
            bool picked = false;
            for (int32_t k = 0; k < n; k++) {
                picked = picked || experts[k] == x->pend[g];
            }
            x->scored = x->scored * keep + 1.0;
            x->scored_picked = x->scored_picked * keep + (picked ? 1.0 : 0.0);
            x->n_scored++;
            x->n_scored_picked += picked ? 1 : 0;
        }
    }
    x->pend_layer = -1;
    const int32_t pl = x->prev_moe[layer];
    /* the previous MoE layer's choice of this same token: only within a
     * single-token pass, where the routes come layer by layer in order */
    if (pl < 0 || e->r.n_tok != 1 || !e->r.prev_ok[pl]) {
        return;
    }
    const bool *before = e->r.prev + (size_t)pl * (size_t)ne;
    for (int32_t i = 0; i < ne; i++) {
        if (!before[i]) {
            continue;
        }
        float *row = x->co + ((size_t)pl * (size_t)ne + (size_t)i) * (size_t)ne;
        float *seen = &x->seen[(size_t)pl * (size_t)ne + (size_t)i];
        if (*seen >= GUESS_MEMORY) {
            for (int32_t j = 0; j < ne; j++) {
                row[j] *= 0.5f;
            }
            *seen *= 0.5f;
        }
        *seen += 1;
        for (int32_t k = 0; k < n; k++) {
            if (experts[k] >= 0 && experts[k] < ne) {
                row[experts[k]] += 1;
            }
        }
    }
}

int32_t exec_guess_next(exec_local *e, int32_t layer, const int32_t *experts, int32_t n,
                        int32_t *out) {
    exec_experts *x = &e->x;
    const int32_t ne = x->n_expert;
    const int32_t nl = x->next_moe[layer];
    if (nl < 0 || e->r.n_tok != 1) {
        return 0;
    }
    float *p = x->p;
    memset(p, 0, (size_t)ne * sizeof *p);
    int32_t rows = 0;
    for (int32_t k = 0; k < n; k++) {
        if (experts[k] < 0 || experts[k] >= ne) {
            continue;
        }
        const size_t i = (size_t)layer * (size_t)ne + (size_t)experts[k];
        if (x->seen[i] < GUESS_MIN_SEEN) {
            continue;
        }
        const float *row = x->co + i * (size_t)ne;
        const float inv = 1.0f / x->seen[i];
        for (int32_t j = 0; j < ne; j++) {
            p[j] += row[j] * inv;
        }
        rows++;
    }
    int32_t n_out = 0;
    if (rows == 0) {
        return 0;
    }
    /* the likeliest experts not resident, best first */
    while (n_out < EXEC_GUESS_MAX) {
        int32_t best = -1;
        for (int32_t j = 0; j < ne; j++) {
            if (!x->resident[(size_t)nl * (size_t)ne + (size_t)j] &&
                p[j] >= GUESS_MIN_P * (float)rows && (best < 0 || p[j] > p[best])) {
                best = j;
            }
        }
        if (best < 0) {
            break;
        }
        out[n_out++] = best;
        p[best] = -1;
    }
    x->pend_layer = nl;
    x->n_pend = n_out;
    memcpy(x->pend, out, (size_t)n_out * sizeof *out);
    return n_out;
}

bool exec_guess_pays(const exec_local *e) {
    const exec_experts *x = &e->x;
    if (e->o.expert_guess > 0) {
        return true;
    }
    return x->n_scored >= GUESS_MIN_SCORED && x->scored_picked >= GUESS_PAYS * x->scored;
}
