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
        s->draft_rates = (api_draft_rates){0}; /* another source of drafts: measured anew */
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
    s->draft_rates = (api_draft_rates){0};
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

/* Draws sequence i's draft number k from its session's logits. */
static int32_t draw_draft(lares_session *d, text_sampler *smp, float *q, int32_t k) {
    if (q == NULL) {
        return text_sampler_sample(smp, d->logits, d->history, (size_t)d->n_past);
    }
    float *qk = q + (size_t)k * (size_t)d->lm->m->hp.n_vocab;
    text_sampler_probs(smp, d->logits, d->history, (size_t)d->n_past, qk);
    return text_sampler_draw(smp, qk);
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
    for (int32_t i = 0; st == LARES_OK && i < max; i++) {
        const int32_t tok = draw_draft(d, smp, q, i);
        draft[i] = tok;
        *n_draft = i + 1;
        if (i + 1 == max || text_token_is_eog(d->lm->vocab, tok)) {
            break; /* nothing follows the end of the text */
        }
        st = api_evaluate(d, &tok, 1, true, NULL, NULL, err);
    }
    return st;
}

/* One pass of the draft model over rows of several sessions: session ds[i]
 * (for i with rows[i] > 0) reads toks[i][0, rows[i]) at its n_past, and gets
 * the logits of its last row. Run on ds[0]'s executor and buffers. */
static lares_status pass_many(lares_session *const *ds, int32_t m, const int32_t *const *toks,
                              const int32_t *rows, model_seq *runs, int32_t *of_run,
                              lares_error *err) {
    lares_session *drv = ds[0];
    const model *md = drv->lm->m;
    const size_t e = (size_t)md->hp.n_embd, nv = (size_t)md->hp.n_vocab;
    int32_t n_rows = 0, n_runs = 0;
    for (int32_t i = 0; i < m; i++) {
        if (rows[i] <= 0) {
            continue;
        }
        for (int32_t r = 0; r < rows[i]; r++) {
            drv->pos[n_rows + r] = ds[i]->n_past + r;
        }
        lares_status st = model_embed(md, toks[i], rows[i], drv->x + (size_t)n_rows * e, err);
        if (st != LARES_OK) {
            return st;
        }
        runs[n_runs] = (model_seq){.kv = ds[i]->kv, .row0 = n_rows, .n_rows = rows[i]};
        of_run[n_runs++] = i;
        n_rows += rows[i];
    }
    if (n_runs == 0) {
        return LARES_OK;
    }
    exec_local_begin_pass(drv->exec, true);
    lares_status st = exec_local_forward_seqs(drv->exec, runs, n_runs, 0, md->hp.n_layer, drv->pos,
                                              n_rows, drv->x, err);
    /* each run's last row, packed at the front (in order: a row moves down
     * only), for one product with the output matrix */
    for (int32_t r = 0; st == LARES_OK && r < n_runs; r++) {
        const int32_t last = runs[r].row0 + runs[r].n_rows - 1;
        if (last != r) {
            memmove(drv->x + (size_t)r * e, drv->x + (size_t)last * e, e * sizeof(float));
        }
    }
    if (st == LARES_OK) {
        st = exec_local_output(drv->exec, drv->x, n_runs, drv->logits_many, err);
    }
    for (int32_t r = 0; st == LARES_OK && r < n_runs; r++) {
        lares_session *d = ds[of_run[r]];
        memcpy(d->history + d->n_past, toks[of_run[r]], (size_t)rows[of_run[r]] * sizeof(int32_t));
        d->n_past += rows[of_run[r]];
        memcpy(d->logits, drv->logits_many + (size_t)r * nv, nv * sizeof(float));
    }
    return st;
}

lares_status api_draft_propose_many(lares_session *const *ds, text_sampler *const *smp,
                                    const int32_t *const *ctx, const int32_t *n, const int32_t *max,
                                    int32_t *const *draft, float *const *q, int32_t *n_draft,
                                    int32_t m, lares_error *err) {
    lares_session *drv = ds[0];
    /* the runs, each session's rows and tokens to read, m of each, in one block */
    void *block = lares_alloc_array(
        (size_t)m, sizeof(model_seq) + sizeof(const int32_t *) + 2 * sizeof(int32_t));
    if (block == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory for %d drafting sequences", (int)m);
    }
    model_seq *runs = block;
    const int32_t **toks = (const int32_t **)(void *)(runs + m);
    int32_t *rows = (int32_t *)(void *)(toks + m), *of_run = rows + m;
    /* what each cache lacks of its context (the last token again when it
     * has it all: its logits are what the first draft follows) */
    int32_t catch_up = 0;
    for (int32_t i = 0; i < m; i++) {
        n_draft[i] = 0;
        const int32_t keep = LARES_MIN(shared_prefix(ds[i], ctx[i], n[i]), n[i] - 1);
        toks[i] = ctx[i] + keep;
        rows[i] = max[i] > 0 ? n[i] - keep : 0;
        catch_up += rows[i];
    }
    /* that must fit one pass of the driver's rows; else (a long catch-up,
     * rare after a prompt the draft followed) and for a draft model on a
     * ring or a GPU, one session after another */
    bool together = m > 1 && catch_up <= drv->o.n_batch;
    for (int32_t i = 0; together && i < m; i++) {
        together = ds[i]->ring == NULL && ds[i]->gpu == NULL && ds[i]->lm == drv->lm;
    }
    lares_status st = LARES_OK;
    if (!together) {
        for (int32_t i = 0; st == LARES_OK && i < m; i++) {
            st = api_draft_propose(ds[i], smp[i], ctx[i], n[i], max[i], draft[i], q[i],
                                   &n_draft[i], err);
        }
        lares_free(block);
        return st;
    }
    const size_t nv = (size_t)drv->lm->m->hp.n_vocab;
    if (drv->logits_many_cap < m) {
        float *l = lares_realloc(drv->logits_many, (size_t)m * nv * sizeof *l);
        if (l == NULL) {
            lares_free(block);
            return lares_fail(err, LARES_ENOMEM, "out of memory for the drafts' logits");
        }
        drv->logits_many = l;
        drv->logits_many_cap = m;
    }
    for (int32_t i = 0; i < m; i++) {
        ds[i]->n_past = (int32_t)(toks[i] - ctx[i]);
    }
    st = pass_many(ds, m, toks, rows, runs, of_run, err);
    for (int32_t k = 0; st == LARES_OK; k++) {
        bool more = false;
        for (int32_t i = 0; i < m; i++) {
            if (rows[i] <= 0) {
                continue;
            }
            const int32_t tok = draw_draft(ds[i], smp[i], q[i], k);
            draft[i][k] = tok;
            n_draft[i] = k + 1;
            /* nothing follows the end of the text; the last draft is not read */
            rows[i] = k + 1 < max[i] && !text_token_is_eog(ds[i]->lm->vocab, tok) ? 1 : 0;
            toks[i] = &draft[i][k];
            more = more || rows[i] > 0;
        }
        if (!more) {
            break;
        }
        st = pass_many(ds, m, toks, rows, runs, of_run, err);
    }
    lares_free(block);
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
