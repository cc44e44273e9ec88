/*
 * Samplers: from logits to the next token.
 *
 * The chain, in the order the reference engine applies it by default:
 * repetition / presence / frequency penalties over the recent history, then
 * top-k, top-p (nucleus, Holtzman et al. 2019) and min-p (Nguyen et al. 2024)
 * on the untempered distribution, then temperature, then a draw from a seeded
 * xoshiro256** generator (Blackman & Vigna 2018), so the same seed gives the
 * same text. Temperature <= 0 is greedy: the argmax, lowest id on ties.
 */
#include "text/text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct text_sampler {
    lares_sampler_opts o;
    int32_t n_vocab;
    uint64_t rng[4];
    cand *cands;    /* owned, n_vocab */
    cand *spare;    /* owned, n_vocab: the radix sort's other half */
    int32_t *count; /* owned, n_vocab: occurrences in the penalty window */
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(text_sampler *s) {
    uint64_t *r = s->rng;
    const uint64_t out = rotl(r[1] * 5, 7) * 9;
    const uint64_t t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return out;
}

/* uniform in [0, 1) with 53 random bits */
static double next_unit(text_sampler *s) {
    return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

void text_sampler_reset(text_sampler *s) {
    uint64_t x = s->o.seed;
    for (int i = 0; i < 4; i++) {
        s->rng[i] = splitmix64(&x);
    }
}

lares_status text_sampler_create(const lares_sampler_opts *opts, int32_t n_vocab,
                                 text_sampler **out, lares_error *err) {
    if (n_vocab < 1) {
        return lares_fail(err, LARES_EINVAL, "sampler: vocabulary of %d", n_vocab);
    }
    if (!(opts->temperature == opts->temperature) || !(opts->top_p == opts->top_p) ||
        !(opts->min_p == opts->min_p) || opts->repeat_penalty <= 0.0f ||
        opts->repeat_last_n < 0) {
        return lares_fail(err, LARES_EINVAL,
                          "sampler: temperature, top-p and min-p must be numbers, the repeat "
                          "penalty > 0 and its window >= 0");
    }
    text_sampler *s = lares_calloc(1, sizeof *s);
    if (s == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    s->o = *opts;
    s->n_vocab = n_vocab;
    s->cands = lares_alloc_array((size_t)n_vocab, sizeof *s->cands);
    s->spare = lares_alloc_array((size_t)n_vocab, sizeof *s->spare);
    s->count = lares_calloc((size_t)n_vocab, sizeof *s->count);
    if (s->cands == NULL || s->spare == NULL || s->count == NULL) {
        text_sampler_free(s);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    text_sampler_reset(s);
    *out = s;
    return LARES_OK;
}

void text_sampler_free(text_sampler *s) {
    if (s == NULL) {
        return;
    }
    lares_free(s->cands);
    lares_free(s->spare);
    lares_free(s->count);
    lares_free(s);
}

static void apply_penalties(text_sampler *s, float *logits, const int32_t *hist, size_t n_hist) {
    const lares_sampler_opts *o = &s->o;
    if (o->repeat_penalty == 1.0f && o->presence_penalty == 0.0f &&
        o->frequency_penalty == 0.0f) {
        return;
    }
    size_t window = (size_t)o->repeat_last_n;
    size_t from = n_hist > window ? n_hist - window : 0;
    for (size_t i = from; i < n_hist; i++) {
        if (hist[i] >= 0 && hist[i] < s->n_vocab) {
            s->count[hist[i]]++;
        }
    }
    for (size_t i = from; i < n_hist; i++) {
        int32_t t = hist[i];
        if (t < 0 || t >= s->n_vocab || s->count[t] == 0) {
            continue; /* out of range, or already handled */
        }
        /* CTRL (Keskar et al. 2019): shrink positive logits, push negative ones down */
        if (logits[t] > 0) {
            logits[t] /= o->repeat_penalty;
        } else {
            logits[t] *= o->repeat_penalty;
        }
        logits[t] -= (float)s->count[t] * o->frequency_penalty + o->presence_penalty;
        s->count[t] = 0;
    }
}

static int32_t argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (logits[i] > logits[best]) {
            best = i;
        }
    }
    return best;
}

static int cmp_cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) {
        return x->logit < y->logit ? 1 : -1;
    }
    return x->id < y->id ? -1 : x->id > y->id;
}

/* A key whose ascending order is the candidates' descending logit order
 * (cmp_cand_desc without the ids: -0 and +0 alike). */
static uint32_t desc_key(float logit) {
    uint32_t u;
    const float f = logit == 0.0f ? 0.0f : logit;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : u | 0x80000000u; /* ascending in the float's order */
    return ~u;
}

/* Sorts candidates given in ascending id order as qsort with cmp_cand_desc
 * would (most likely first, lowest id first on ties): a stable radix sort in
 * three passes of 11, 11 and 10 bits, linear in the vocabulary (with qsort, 8
 * sampled streams through lares serve ran 1.5-1.6x slower: performance.md). */
static void sort_desc_radix(cand *c, cand *spare, int32_t n) {
    enum { BITS = 11, BUCKETS = 1 << BITS };
    uint32_t count[BUCKETS];
    cand *from = c, *to = spare;
    for (int shift = 0; shift < 32; shift += BITS) {
        memset(count, 0, sizeof count);
        for (int32_t i = 0; i < n; i++) {
            count[(desc_key(from[i].logit) >> shift) & (BUCKETS - 1)]++;
        }
        uint32_t at = 0;
        for (int b = 0; b < BUCKETS; b++) {
            const uint32_t k = count[b];
            count[b] = at;
            at += k;
        }
        for (int32_t i = 0; i < n; i++) {
            to[count[(desc_key(from[i].logit) >> shift) & (BUCKETS - 1)]++] = from[i];
        }
        cand *t = from;
        from = to;
        to = t;
    }
    if (from != c) { /* three passes: the result is in the spare */
        memcpy(c, from, (size_t)n * sizeof *c);
    }
}

/* moves the k largest candidates to the front (quickselect), unsorted */
static void select_top(cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        cand pivot = c[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cmp_cand_desc(&c[i], &pivot) < 0) {
                i++;
            }
            while (cmp_cand_desc(&c[j], &pivot) > 0) {
                j--;
            }
            if (i <= j) {
                cand t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) {
            hi = j;
        } else if (k - 1 >= i) {
            lo = i;
        } else {
            return;
        }
    }
}

/* Penalties, then the candidates a draw chooses among (top-k, top-p, min-p
 * on the untempered distribution), most likely first, in s->cands[0, n);
 * returns n, or 0 for greedy (the argmax is the token). */
static int32_t keep_candidates(text_sampler *s, float *logits, const int32_t *hist,
                               size_t n_hist) {
    const lares_sampler_opts *o = &s->o;
    apply_penalties(s, logits, hist, n_hist);
    if (o->temperature <= 0.0f) {
        return 0;
    }
    cand *c = s->cands;
    int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) {
        c[i].logit = logits[i];
        c[i].id = i;
    }
    if (o->top_k > 0 && o->top_k < n) {
        select_top(c, n, o->top_k);
        n = o->top_k;
        qsort(c, (size_t)n, sizeof *c, cmp_cand_desc);
    } else if (n > 256) { /* still in id order: the same order, sooner */
        sort_desc_radix(c, s->spare, n);
    } else {
        qsort(c, (size_t)n, sizeof *c, cmp_cand_desc);
    }
    /* tokens a constraint forbade (-inf) are never drawn, not even as the
     * last resort below */
    while (n > 1 && isinf(c[n - 1].logit) && c[n - 1].logit < 0) {
        n--;
    }
    const float mx = c[0].logit;
    if (o->top_p < 1.0f) {
        /* probabilities of the untempered distribution */
        double sum = 0;
        for (int32_t i = 0; i < n; i++) {
            sum += exp((double)(c[i].logit - mx));
        }
        double cum = 0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)(c[i].logit - mx)) / sum;
            if (cum >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (o->min_p > 0.0f) {
        /* p_i >= min_p * p_max  <=>  logit_i >= max + log(min_p) */
        const float floor_logit = mx + logf(o->min_p);
        int32_t keep = 1;
        while (keep < n && c[keep].logit >= floor_logit) {
            keep++;
        }
        n = keep;
    }
    return n;
}

/* the weight of kept candidate i after temperature (relative to the first) */
static double tempered(const text_sampler *s, int32_t i) {
    const cand *c = s->cands;
    return exp((double)(c[i].logit - c[0].logit) / s->o.temperature);
}

static double tempered_total(const text_sampler *s, int32_t n) {
    double total = 0;
    for (int32_t i = 0; i < n; i++) {
        total += tempered(s, i);
    }
    return total;
}

int32_t text_sampler_sample(text_sampler *s, float *logits, const int32_t *hist, size_t n_hist) {
    const int32_t n = keep_candidates(s, logits, hist, n_hist);
    if (n == 0) {
        return argmax(logits, s->n_vocab);
    }
    /* temperature, then a draw */
    double r = next_unit(s) * tempered_total(s, n);
    for (int32_t i = 0; i < n; i++) {
        r -= tempered(s, i);
        if (r < 0) {
            return s->cands[i].id;
        }
    }
    return s->cands[n - 1].id;
}

void text_sampler_probs(text_sampler *s, float *logits, const int32_t *hist, size_t n_hist,
                        float *probs) {
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    const int32_t n = keep_candidates(s, logits, hist, n_hist);
    if (n == 0) {
        probs[argmax(logits, s->n_vocab)] = 1.0f;
        return;
    }
    const double total = tempered_total(s, n);
    for (int32_t i = 0; i < n; i++) {
        probs[s->cands[i].id] = (float)(tempered(s, i) / total);
    }
}

double text_sampler_unit(text_sampler *s) {
    return next_unit(s);
}

int32_t text_sampler_draw(text_sampler *s, const float *probs) {
    return text_draw(probs, s->n_vocab, next_unit(s));
}
