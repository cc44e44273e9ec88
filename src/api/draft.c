/*
 * Speculative decoding with a draft model (Leviathan et al. 2023, Chen et al.
 * 2023): a small model with the target's vocabulary proposes the next few
 * tokens one after another, and the target verifies them all in one pass
 * (generate.c). The draft has its own session (KV cache, working memory) on
 * the target's threads; after each verification its cache keeps the part of
 * the context that was accepted and forgets the rest.
 */
#include "api/api.h"

/* The first difference between the vocabularies of a and b, in words; ""
 * when there is none. Sizes, every token's text and the ids generation
 * treats specially (BOS, EOS, end of generation) must agree: a draft token is
 * verified by its id. */
static void vocab_difference(const lares_model *a, const lares_model *b, char *why, size_t cap) {
    const text_vocab *va = a->vocab, *vb = b->vocab;
    why[0] = '\0';
    const int32_t na = text_vocab_n(va), nb = text_vocab_n(vb);
    if (na != nb || a->m->hp.n_vocab != b->m->hp.n_vocab) {
        snprintf(why, cap, "%d tokens and %d logits against %d and %d", na, a->m->hp.n_vocab, nb,
                 b->m->hp.n_vocab);
        return;
    }
    if (text_vocab_kind_of(va) != text_vocab_kind_of(vb)) {
        snprintf(why, cap, "tokenizers of different kinds");
        return;
    }
    if (text_vocab_bos(va) != text_vocab_bos(vb) || text_vocab_eos(va) != text_vocab_eos(vb)) {
        snprintf(why, cap, "BOS/EOS %d/%d against %d/%d", text_vocab_bos(va), text_vocab_eos(va),
                 text_vocab_bos(vb), text_vocab_eos(vb));
        return;
    }
    for (int32_t i = 0; i < na; i++) {
        const gguf_str ta = text_token_text(va, i), tb = text_token_text(vb, i);
        if (ta.len != tb.len || (ta.len > 0 && memcmp(ta.ptr, tb.ptr, ta.len) != 0)) {
            snprintf(why, cap, "token %d differs", i);
            return;
        }
        if (text_token_is_eog(va, i) != text_token_is_eog(vb, i)) {
            snprintf(why, cap, "token %d ends generation in one only", i);
            return;
        }
    }
}

lares_status api_draft_check(const lares_model *draft, const lares_model *target,
                             lares_error *err) {
    if (draft->m == NULL) {
        return lares_fail(err, LARES_EINVAL, "draft model %s was opened for its vocabulary only",
                          draft->path);
    }
    char why[128];
    vocab_difference(draft, target, why, sizeof why); /* the draft's first */
    if (why[0] != '\0') {
        return lares_fail(err, LARES_EINVAL,
                          "draft model %s and model %s have different vocabularies (%s)",
                          draft->path, target->path, why);
    }
    return LARES_OK;
}

lares_status lares_session_set_draft(lares_session *s, lares_model *draft, lares_error *err) {
    if (draft == NULL) {
        lares_session_free(s->draft);
        s->draft = NULL;
        return LARES_OK;
    }
    const lares_status cst = api_draft_check(draft, s->lm, err);
    if (cst != LARES_OK) {
        return cst;
    }
    lares_session_opts o = lares_session_opts_default();
    o.n_ctx = s->o.n_ctx; /* it follows the target's context, drafts included */
    o.n_batch = s->o.n_batch;
    lares_session *d = NULL;
    const lares_status st = api_session_create(draft, &o, s->pool, &d, err);
    if (st != LARES_OK) {
        return st;
    }
    lares_session_free(s->draft);
    s->draft = d;
    return LARES_OK;
}

lares_status api_draft_sampler(const lares_sampler_opts *o, int32_t n_vocab, text_sampler **out,
                               lares_error *err) {
    lares_sampler_opts dso = *o;
    dso.seed ^= 0x9e3779b97f4a7c15u;
    return text_sampler_create(&dso, n_vocab, out, err);
}

/* tokens at the start of ctx[0, n) the draft's cache holds already */
static int32_t shared_prefix(const lares_session *d, const int32_t *ctx, int32_t n) {
    int32_t k = 0;
    while (k < d->n_past && k < n && d->history[k] == ctx[k]) {
        k++;
    }
    return k;
}

lares_status api_draft_sync(lares_session *d, const int32_t *ctx, int32_t n, lares_error *err) {
    const int32_t k = shared_prefix(d, ctx, n);
    d->n_past = k;
    return k < n ? api_evaluate(d, ctx + k, (size_t)(n - k), false, NULL, NULL, err) : LARES_OK;
}

lares_status api_draft_propose(lares_session *d, text_sampler *smp, const int32_t *ctx, int32_t n,
                               int32_t max, int32_t *draft, float *q, int32_t *n_draft,
                               lares_error *err) {
    *n_draft = 0;
    /* the last context token is evaluated again when the cache has it all:
     * its logits are what the first draft follows */
    const int32_t keep = LARES_MIN(shared_prefix(d, ctx, n), n - 1);
    d->n_past = keep;
    lares_status st = api_evaluate(d, ctx + keep, (size_t)(n - keep), true, NULL, NULL, err);
    const int32_t n_vocab = d->lm->m->hp.n_vocab;
    for (int32_t i = 0; st == LARES_OK && i < max; i++) {
        int32_t tok;
        if (q == NULL) {
            tok = text_sampler_sample(smp, d->logits, d->history, (size_t)d->n_past);
        } else {
            float *qi = q + (size_t)i * (size_t)n_vocab;
            text_sampler_probs(smp, d->logits, d->history, (size_t)d->n_past, qi);
            tok = text_sampler_draw(smp, qi);
        }
        draft[i] = tok;
        *n_draft = i + 1;
        if (i + 1 == max || text_token_is_eog(d->lm->vocab, tok)) {
            break; /* nothing follows the end of the text */
        }
        st = api_evaluate(d, &tok, 1, true, NULL, NULL, err);
    }
    return st;
}

bool api_draft_pace_go(api_draft_pace *p) {
    if (p->skip > 0) {
        p->skip--;
        return false;
    }
    return true;
}

void api_draft_pace_note(api_draft_pace *p, int32_t kept) {
    if (kept > 0) {
        *p = (api_draft_pace){0};
        return;
    }
    if (++p->misses < API_DRAFT_MISSES) {
        return;
    }
    p->misses = 0;
    p->pause = p->pause == 0 ? API_DRAFT_PAUSE_MIN : LARES_MIN(2 * p->pause, API_DRAFT_PAUSE_MAX);
    p->skip = p->pause;
}
