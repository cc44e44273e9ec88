/*
 * The generation loop: evaluate the prompt in batches through every layer
 * window, then sample, stream and evaluate one token at a time. Every figure
 * in lares_stats is measured here around the real work.
 */
#include "api/api.h"
#include "api/ring.h"
#include "mem/mem.h"

#include <math.h>

lares_sampler_opts lares_sampler_opts_default(void) {
    lares_sampler_opts o = {.temperature = 0.8f,
                            .top_k = 40,
                            .top_p = 0.95f,
                            .min_p = 0.05f,
                            .repeat_penalty = 1.0f,
                            .repeat_last_n = 64,
                            .presence_penalty = 0.0f,
                            .frequency_penalty = 0.0f,
                            .seed = 0x5eed};
    return o;
}

lares_generate_opts lares_generate_opts_default(void) {
    lares_generate_opts o = {.n_predict = -1, .sampler = lares_sampler_opts_default()};
    return o;
}

/* api_evaluate, and with all_logits (n x n_vocab) the logits of every token */
static lares_status evaluate(lares_session *s, const int32_t *tokens, size_t n, bool want_logits,
                             float *all_logits, api_rows_fn rows, void *user, lares_error *err) {
    const model *m = s->lm->m;
    size_t done = 0;
    while (done < n) {
        if (atomic_load_explicit(&s->cancel, memory_order_relaxed)) {
            return LARES_ECANCELED;
        }
        int32_t nb = (int32_t)LARES_MIN(n - done, (size_t)s->o.n_batch);
        for (int32_t i = 0; i < nb; i++) {
            s->pos[i] = s->n_past + i;
        }
        const bool output_after = all_logits != NULL || (want_logits && done + (size_t)nb == n);
        exec_local_begin_pass(s->exec, output_after);
        lares_status st = model_embed(m, tokens + done, nb, s->x, err);
        if (st == LARES_OK) {
            st = s->ring != NULL
                     ? api_ring_forward(s, nb, err)
                     : exec_local_forward(s->exec, 0, m->hp.n_layer, s->pos, nb, s->x, err);
        }
        if (st != LARES_OK) {
            return st;
        }
        if (rows != NULL) {
            rows(user, s->x, nb);
        }
        memcpy(s->history + s->n_past, tokens + done, (size_t)nb * sizeof *tokens);
        s->n_past += nb;
        if (all_logits != NULL) {
            const lares_status out = exec_local_output(
                s->exec, s->x, nb, all_logits + done * (size_t)m->hp.n_vocab, err);
            if (out != LARES_OK) {
                return out;
            }
        }
        done += (size_t)nb;
        if (done == n && want_logits && all_logits == NULL) {
            float *last = s->x + (size_t)(nb - 1) * (size_t)m->hp.n_embd;
            const lares_status out = exec_local_output(s->exec, last, 1, s->logits, err);
            if (out != LARES_OK) {
                return out;
            }
        }
    }
    return LARES_OK;
}

lares_status api_evaluate(lares_session *s, const int32_t *tokens, size_t n, bool want_logits,
                          api_rows_fn rows, void *user, lares_error *err) {
    return evaluate(s, tokens, n, want_logits, NULL, rows, user, err);
}

/* The residency figures of lares_stats: the executor's plan, and its
 * counters over the prompt and over generation after the first token. */
static void fill_residency(lares_session *s, lares_stats *fig, const exec_counters *c_start,
                           const exec_counters *c_prompt, const exec_counters *c_first,
                           const exec_counters *c_end) {
    exec_plan_info plan;
    exec_local_plan(s->exec, &plan);
    fig->mem_budget_bytes = s->mem_budget_bytes;
    fig->streaming = plan.streaming;
    fig->stream_bytes = plan.stream_bytes;
    fig->pinned_bytes = plan.pinned_bytes;
    fig->window_bytes = plan.window_bytes;
    fig->locked_bytes = plan.locked_bytes;
    fig->prefetch_bytes = c_end->prefetch_bytes - c_start->prefetch_bytes;
    fig->prefetch_ms = lares_ns_to_ms(c_end->prefetch_ns - c_start->prefetch_ns);
    fig->stream_direct = plan.direct;
    fig->probe_direct_Bps = plan.probe_direct_Bps;
    fig->probe_mmap_Bps = plan.probe_mmap_Bps;
    fig->expert_direct = plan.experts_direct;
    fig->expert_probe_direct_Bps = plan.expert_probe_direct_Bps;
    fig->expert_probe_mmap_Bps = plan.expert_probe_mmap_Bps;
    fig->direct_bytes = c_end->direct_bytes - c_start->direct_bytes;
    fig->buffer_bytes = c_end->buffer_peak_bytes;
    fig->prompt_wait_ms = lares_ns_to_ms(c_prompt->wait_ns - c_start->wait_ns);
    fig->gen_wait_ms = c_first ? lares_ns_to_ms(c_end->wait_ns - c_first->wait_ns) : 0;
    fig->expert_hits = c_end->expert_hits - c_prompt->expert_hits;
    fig->expert_misses = c_end->expert_misses - c_prompt->expert_misses;
    fig->expert_guesses = c_end->expert_guesses - c_prompt->expert_guesses;
    fig->expert_guess_hits = c_end->expert_guess_hits - c_prompt->expert_guess_hits;
    fig->expert_guesses_made = c_end->expert_guess_scored - c_prompt->expert_guess_scored;
    fig->expert_guesses_picked = c_end->expert_guess_picked - c_prompt->expert_guess_picked;
    const uint64_t pairs = c_end->route_pairs - c_prompt->route_pairs;
    const int32_t k = s->lm->m->hp.n_expert_used;
    fig->route_overlap =
        pairs > 0 && k > 0
            ? (double)(c_end->route_shared - c_prompt->route_shared) / ((double)pairs * k)
            : -1;
}

/* Of the choices counted between two snapshots of exec_local_route_counts,
 * the share taken by each layer's k most chosen experts; -1 when none. */
static double route_top_share(const model_hparams *hp, const uint64_t *before, uint64_t *after) {
    uint64_t top = 0, all = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        uint64_t *c = after + (size_t)l * (size_t)hp->n_expert;
        const uint64_t *b = before + (size_t)l * (size_t)hp->n_expert;
        for (int32_t x = 0; x < hp->n_expert; x++) {
            c[x] -= b[x];
            all += c[x];
        }
        for (int32_t j = 0; j < hp->n_expert_used; j++) {
            int32_t best = 0;
            for (int32_t x = 1; x < hp->n_expert; x++) {
                best = c[x] > c[best] ? x : best;
            }
            top += c[best];
            c[best] = 0;
        }
    }
    return all > 0 ? (double)top / (double)all : -1;
}

/* log-softmax of the logits: the chosen token's value and the n most likely */
static void logprobs(const float *logits, int32_t n_vocab, int32_t chosen, int32_t n,
                     token_probs *tp) {
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        mx = logits[i] > mx ? logits[i] : mx;
    }
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        sum += exp((double)(logits[i] - mx));
    }
    const double lse = (double)mx + log(sum);
    tp->logprob = (float)((double)logits[chosen] - lse);
    tp->n_top = 0;
    for (int32_t i = 0; i < n_vocab; i++) { /* insertion into a short sorted list */
        int32_t k = tp->n_top;
        if (k == n && logits[i] <= logits[tp->top_ids[k - 1]]) {
            continue;
        }
        if (k < n) {
            tp->n_top++;
        } else {
            k--;
        }
        while (k > 0 && logits[tp->top_ids[k - 1]] < logits[i]) {
            tp->top_ids[k] = tp->top_ids[k - 1];
            k--;
        }
        tp->top_ids[k] = i;
    }
    for (int32_t k = 0; k < tp->n_top; k++) {
        tp->top_logprobs[k] = (float)((double)logits[tp->top_ids[k]] - lse);
    }
}

/* Delivers a piece through the UTF-8 assembler; false when the caller stops. */
static bool deliver(const lares_generate_opts *o, text_stream *ts, int32_t tok, const char *piece,
                    size_t n, const token_probs *tp) {
    char buf[TEXT_STREAM_OUT_MAX(PIECE_MAX)];
    size_t len = text_stream_push(ts, piece, n, buf, sizeof buf);
    if (o->on_token == NULL) {
        return true;
    }
    lares_token_info info = {.token = tok, .piece = buf, .piece_len = len};
    if (tp != NULL) {
        info.logprob = tp->logprob;
        info.n_top = tp->n_top;
        info.top_ids = tp->top_ids;
        info.top_logprobs = tp->top_logprobs;
    }
    return o->on_token(&info, o->user);
}

int32_t api_draw(const lares_generate_opts *o, text_sampler *smp, float *logits,
                 int32_t n_vocab, const int32_t *history, size_t n_hist, float *raw,
                 token_probs *tp) {
    if (o->on_logits != NULL) {
        o->on_logits(logits, n_vocab, o->user);
    }
    if (raw != NULL) {
        memcpy(raw, logits, (size_t)n_vocab * sizeof *raw);
    }
    const int32_t tok = text_sampler_sample(smp, logits, history, n_hist);
    if (raw != NULL) {
        logprobs(raw, n_vocab, tok, o->n_logprobs, tp);
    }
    return tok;
}

int32_t api_draw_verified(const lares_generate_opts *o, text_sampler *smp, float *logits,
                             int32_t n_vocab, const int32_t *history, size_t n_hist, float *raw,
                             token_probs *tp, float *probs, const float *q, int32_t x) {
    if (o->on_logits != NULL) {
        o->on_logits(logits, n_vocab, o->user);
    }
    if (raw != NULL) {
        memcpy(raw, logits, (size_t)n_vocab * sizeof *raw);
    }
    text_sampler_probs(smp, logits, history, n_hist, probs);
    const double u = text_sampler_unit(smp);
    const double v = text_sampler_unit(smp);
    bool accepted;
    const int32_t tok = text_spec_accept(probs, q, n_vocab, x, u, v, &accepted);
    if (raw != NULL) {
        logprobs(raw, n_vocab, tok, o->n_logprobs, tp);
    }
    return tok;
}

lares_stop_reason api_emit(const lares_generate_opts *o, const text_vocab *vocab,
                           text_stream *ts, int32_t tok, const token_probs *tp) {
    if (text_token_is_eog(vocab, tok)) {
        return LARES_STOP_EOS;
    }
    char piece[PIECE_MAX];
    int32_t plen = text_token_piece(vocab, tok, false, piece, sizeof piece);
    if (plen < 0 || (size_t)plen > sizeof piece) {
        plen = 0; /* a piece longer than PIECE_MAX is not text anyone streams */
    }
    return deliver(o, ts, tok, piece, (size_t)plen, tp) ? LARES_STOP_NONE : LARES_STOP_CALLER;
}

void api_flush(const lares_generate_opts *o, text_stream *ts) {
    char tail[TEXT_STREAM_OUT_MAX(4)];
    const size_t tl = text_stream_flush(ts, tail, sizeof tail);
    if (tl > 0 && o->on_token != NULL) {
        lares_token_info info = {.token = -1, .piece = tail, .piece_len = tl};
        o->on_token(&info, o->user);
    }
}

lares_status lares_generate(lares_session *s, const int32_t *prompt, size_t n_prompt,
                            const lares_generate_opts *opts, int32_t *out, size_t out_cap,
                            size_t *n_out, lares_stats *stats, lares_error *err) {
    const lares_generate_opts o = opts ? *opts : lares_generate_opts_default();
    const model *m = s->lm->m;
    const int32_t n_ctx = s->o.n_ctx;
    lares_stats st_local;
    lares_stats *fig = stats ? stats : &st_local;
    memset(fig, 0, sizeof *fig);
    if (n_out != NULL) {
        *n_out = 0;
    }
    atomic_store(&s->cancel, false);
    if (n_prompt == 0) {
        return lares_fail(err, LARES_EINVAL, "the prompt is empty (it needs at least one token)");
    }
    if (o.n_logprobs < 0 || o.n_logprobs > MAX_LOGPROBS) {
        return lares_fail(err, LARES_EINVAL, "logprobs: %d alternatives asked, 0 to %d allowed",
                          o.n_logprobs, MAX_LOGPROBS);
    }
    if (o.lookup < 0 || o.lookup > LARES_LOOKUP_MAX) {
        return lares_fail(err, LARES_EINVAL, "lookup: %d drafted tokens asked, 0 to %d allowed",
                          o.lookup, LARES_LOOKUP_MAX);
    }
    if (o.draft_n < 0 || o.draft_n > LARES_LOOKUP_MAX) {
        return lares_fail(err, LARES_EINVAL,
                          "draft: %d drafted tokens asked, 0 (off) to %d allowed", o.draft_n,
                          LARES_LOOKUP_MAX);
    }
    if (o.draft_n > 0 && s->draft == NULL) {
        return lares_fail(err, LARES_EINVAL,
                          "draft: %d drafted tokens asked but the session has no draft model "
                          "(lares_session_set_draft)",
                          o.draft_n);
    }
    if (o.draft_n > 0 && o.lookup > 0) {
        return lares_fail(err, LARES_EINVAL,
                          "drafts come from prompt lookup or from a draft model, not both");
    }
    /* drafts per pass at most: one source or none */
    const int32_t n_spec_max = o.lookup > 0 ? o.lookup : o.draft_n;
    if (n_spec_max > 0 && n_spec_max + 1 > s->o.n_batch) {
        return lares_fail(err, LARES_EINVAL,
                          "%s: verifying %d drafted tokens needs a batch of %d, the session's "
                          "is %d (raise -b)",
                          o.lookup > 0 ? "lookup" : "draft", n_spec_max, n_spec_max + 1,
                          s->o.n_batch);
    }
    const int64_t need =
        (int64_t)s->n_past + (int64_t)n_prompt + (o.n_predict > 0 ? o.n_predict : 0);
    if (need > n_ctx) {
        return lares_fail(err, LARES_ERANGE,
                          "%zu prompt tokens + %d to generate need %" PRId64
                          " positions, the context holds %d (%d in use); raise -c or lower -n",
                          n_prompt, o.n_predict > 0 ? o.n_predict : 0, need, n_ctx, s->n_past);
    }
    for (size_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || prompt[i] >= m->hp.n_vocab) {
            return lares_fail(err, LARES_EINVAL,
                              "prompt token %d at index %zu is outside the "
                              "vocabulary of %d",
                              prompt[i], i, m->hp.n_vocab);
        }
    }
    /* the KV cache this call can fill: the rest of the budget holds weights */
    const int64_t reach = o.n_predict >= 0 ? need : n_ctx;
    lares_status rc = api_plan_positions(s, (int32_t)LARES_MIN(reach, (int64_t)n_ctx), err);
    if (rc == LARES_OK && o.draft_n > 0) {
        rc = api_plan_positions(s->draft, (int32_t)LARES_MIN(reach, (int64_t)n_ctx), err);
    }
    if (rc != LARES_OK) {
        return rc;
    }
    text_sampler *smp = NULL;
    rc = text_sampler_create(&o.sampler, m->hp.n_vocab, &smp, err);
    if (rc != LARES_OK) {
        return rc;
    }
    text_sampler *draft_smp = NULL;
    if (o.draft_n > 0) {
        rc = api_draft_sampler(&o.sampler, m->hp.n_vocab, &draft_smp, err);
        if (rc != LARES_OK) {
            text_sampler_free(smp);
            return rc;
        }
    }
    const bool draft_sampling = o.draft_n > 0 && o.sampler.temperature > 0.0f;

    mem_sample before, after;
    mem_sample_now(&before);
    exec_counters c_start, c_prompt, c_first = {0}, c_end;
    exec_local_counters(s->exec, &c_start);
    mem_pressure pressure;
    mem_pressure_begin(&pressure);
    const uint64_t t_start = lares_now_ns();
    fig->stop = LARES_STOP_NONE;

    rc = api_evaluate(s, prompt, n_prompt, true, NULL, NULL, err);
    if (rc == LARES_OK && o.draft_n > 0) {
        rc = api_draft_sync(s->draft, s->history, s->n_past, err); /* the draft reads it too */
    }
    const uint64_t t_prompt = lares_now_ns();
    exec_local_counters(s->exec, &c_prompt);
    /* MoE: expert choices counted from here (generation) to the end */
    const model_hparams *hp = &m->hp;
    const size_t n_routes = hp->n_expert > 0 ? (size_t)hp->n_layer * (size_t)hp->n_expert : 0;
    uint64_t *routes0 = n_routes ? lares_alloc_array(n_routes, sizeof *routes0) : NULL;
    uint64_t *routes1 = n_routes ? lares_alloc_array(n_routes, sizeof *routes1) : NULL;
    if (routes0 != NULL) {
        exec_local_route_counts(s->exec, routes0);
    }
    if (rc == LARES_ECANCELED) {
        rc = LARES_OK;
        fig->stop = LARES_STOP_CANCELED;
        atomic_store(&s->cancel, true); /* keep the loop below from starting */
    }
    fig->n_prompt = (int32_t)n_prompt;
    fig->prompt_ms = lares_ns_to_ms(t_prompt - t_start);
    mem_pressure_update(&pressure);

    text_stream ts;
    text_stream_init(&ts);
    uint64_t t_first = 0;
    size_t n_gen = 0;
    token_probs tp;
    /* logprobs need the logits before the sampler edits them */
    float *raw = NULL;
    if (o.n_logprobs > 0 && (raw = lares_alloc_array((size_t)m->hp.n_vocab, sizeof *raw)) == NULL) {
        rc = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    /* speculative decoding: the token just drawn and its drafts, and their
     * logits; sampling from a draft model: the draft's distribution of each
     * draft (q) and the target's of the row verifying it (p) */
    const size_t nv = (size_t)m->hp.n_vocab;
    int32_t *spec = NULL;
    float *spec_logits = NULL, *spec_q = NULL, *spec_p = NULL;
    if (rc == LARES_OK && n_spec_max > 0 &&
        ((spec = lares_alloc_array((size_t)n_spec_max + 1, sizeof *spec)) == NULL ||
         (spec_logits = lares_alloc_array((size_t)(n_spec_max + 1) * nv, sizeof *spec_logits)) ==
             NULL ||
         (draft_sampling &&
          ((spec_q = lares_alloc_array((size_t)n_spec_max * nv, sizeof *spec_q)) == NULL ||
           (spec_p = lares_alloc_array(nv, sizeof *spec_p)) == NULL)))) {
        rc = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    float *next_logits = s->logits;  /* what the next token is drawn from */
    int32_t n_spec = 0, spec_at = 0; /* verified drafts left: spec[spec_at..n_spec) */
    /* drafts per pass: doubled after a pass whose drafts were all taken, else
     * one more than were taken, so that a context the model does not copy
     * costs passes of two tokens, not of lookup + 1 */
    int32_t draft_max = n_spec_max;
    api_draft_pace pace = {0}; /* a draft model that keeps failing pauses */
    /* a greedy sequence drafts where drafts measure faster (draft_rates.c):
     * each pass's tokens over its time, from one choice to the next. After a
     * pass whose drafts were all taken it drafts without asking: d + 1 rows
     * gave d + 1 tokens, and no pass of d + 1 rows costs more than d + 1
     * passes of one (where passes are dear, a ring's, trying plain ones to
     * compare would cost the most) */
    const bool greedy_spec = n_spec_max > 0 && api_drafts_paced(&o);
    bool spec_on = true, rate_on = false, all_taken = false;
    uint64_t rate_t0 = 0;
    size_t rate_gen0 = 0;
    while (rc == LARES_OK) {
        if (atomic_load_explicit(&s->cancel, memory_order_relaxed)) {
            fig->stop = LARES_STOP_CANCELED;
            break;
        }
        if (o.n_predict >= 0 && n_gen >= (size_t)o.n_predict) {
            fig->stop = LARES_STOP_LENGTH;
            break;
        }
        /* the context the next token follows: without drafts not reached yet */
        const int32_t ctx_n = s->n_past - (spec_at < n_spec ? n_spec - spec_at : 0);
        if (ctx_n >= n_ctx) {
            fig->stop = LARES_STOP_LENGTH; /* the context is full */
            break;
        }
        /* a constraint sees each row in the order its token is drawn, drafts
         * or not: it never sees a token that is not delivered */
        const int32_t tok =
            draft_sampling && spec_at < n_spec
                ? api_draw_verified(&o, smp, next_logits, m->hp.n_vocab, s->history, (size_t)ctx_n,
                                raw, &tp, spec_p, spec_q + (size_t)(spec_at - 1) * nv,
                                spec[spec_at])
                : api_draw(&o, smp, next_logits, m->hp.n_vocab, s->history, (size_t)ctx_n, raw,
                           &tp);
        /* a verified draft: accepted when the model drew it; the first token
         * it did not draw ends the drafts, and the cache forgets the rest */
        bool evaluated = false;
        if (spec_at < n_spec) {
            if (tok == spec[spec_at]) {
                fig->n_accepted++;
                evaluated = true; /* its row is in the cache and its logits below */
                if (spec_at + 1 == n_spec) {
                    draft_max = LARES_MIN(2 * draft_max, n_spec_max);
                    api_draft_pace_note(&pace, spec_at);
                    all_taken = true;
                }
            } else {
                all_taken = false;
                draft_max = spec_at; /* spec_at - 1 taken */
                api_draft_pace_note(&pace, spec_at - 1);
                s->n_past -= n_spec - spec_at;
                n_spec = 0;
            }
        }
        if (n_gen == 0) {
            t_first = lares_now_ns();
            exec_local_counters(s->exec, &c_first);
        }
        if (out != NULL && n_gen < out_cap) {
            out[n_gen] = tok;
        }
        n_gen++;
        const lares_stop_reason why = api_emit(&o, s->lm->vocab, &ts, tok, raw ? &tp : NULL);
        if (why != LARES_STOP_NONE) {
            fig->stop = why;
            break;
        }
        if (o.n_predict >= 0 && n_gen >= (size_t)o.n_predict) {
            fig->stop = LARES_STOP_LENGTH; /* the last token needs no forward pass */
            break;
        }
        if (evaluated) {
            /* draft spec[k] was drawn from row k - 1; what follows it, from row k */
            next_logits = spec_logits + (size_t)spec_at * (size_t)m->hp.n_vocab;
            spec_at++;
            if (spec_at == n_spec) {
                n_spec = 0; /* every draft accepted */
            }
            continue;
        }
        /* draft from the context and the token just drawn, within what may
         * still be generated and the context's room */
        if (greedy_spec) {
            const uint64_t now = lares_now_ns();
            if (rate_t0 != 0) {
                api_draft_rates_note(&s->draft_rates, 1, rate_on, (int32_t)(n_gen - rate_gen0),
                                     lares_ns_to_ms(now - rate_t0));
            }
            rate_t0 = now;
            rate_gen0 = n_gen;
            spec_on = all_taken || api_draft_rates_choose(&s->draft_rates, 1);
        }
        int32_t d = 0;
        if (n_spec_max > 0 && spec_on) {
            s->history[s->n_past] = tok; /* the drafts see it; evaluate writes it again */
            int32_t room = n_ctx - s->n_past - 1;
            if (o.n_predict >= 0) {
                room = (int32_t)LARES_MIN((int64_t)room, (int64_t)o.n_predict - (int64_t)n_gen);
            }
            const int32_t max = LARES_MIN(draft_max, room);
            if (o.lookup > 0) {
                d = api_lookup_draft(s->history, s->n_past + 1, max, spec + 1);
            } else if (max > 0 && api_draft_pace_go(&pace)) {
                const uint64_t t_draft = lares_now_ns();
                rc = api_draft_propose(s->draft, draft_smp, s->history, s->n_past + 1, max,
                                       spec + 1, spec_q, &d, err);
                fig->draft_ms += lares_ns_to_ms(lares_now_ns() - t_draft);
                if (rc != LARES_OK) {
                    break;
                }
            }
        }
        rate_on = d > 0; /* drafts allowed and none found: a plain pass */
        all_taken = all_taken && d > 0;
        if (d > 0) {
            spec[0] = tok;
            rc = evaluate(s, spec, (size_t)d + 1, true, spec_logits, NULL, NULL, err);
            fig->n_drafted += d;
            /* spec[1..d] are verified against rows 0..d-1; row d follows them all */
            n_spec = d + 1;
            spec_at = 1;
            next_logits = spec_logits;
        } else {
            rc = api_evaluate(s, &tok, 1, true, NULL, NULL, err);
            next_logits = s->logits;
        }
        if (rc == LARES_ECANCELED) {
            rc = LARES_OK;
            fig->stop = LARES_STOP_CANCELED;
            break;
        }
        if ((n_gen & 15) == 0) {
            mem_pressure_update(&pressure);
        }
    }
    /* drafts verified but not reached: not in the context */
    if (spec_at < n_spec) {
        s->n_past -= n_spec - spec_at;
    }
    lares_free(spec);
    lares_free(spec_logits);
    lares_free(spec_q);
    lares_free(spec_p);
    text_sampler_free(draft_smp);
    api_flush(&o, &ts);
    lares_free(raw);
    const uint64_t t_end = lares_now_ns();
    exec_local_counters(s->exec, &c_end);
    mem_pressure_update(&pressure);
    mem_sample_now(&after);
    text_sampler_free(smp);

    fig->n_generated = (int32_t)n_gen;
    fig->load_ms = s->lm->open_ms + s->create_ms;
    fig->ttft_ms = t_first ? lares_ns_to_ms(t_first - t_start) : 0;
    /* generation speed counts the tokens after the first: each needed one forward pass */
    fig->gen_ms = t_first ? lares_ns_to_ms(t_end - t_first) : 0;
    fig->prompt_tok_s = fig->prompt_ms > 0 ? fig->n_prompt / (fig->prompt_ms / 1e3) : 0;
    fig->gen_tok_s = n_gen > 1 && fig->gen_ms > 0 ? (double)(n_gen - 1) / (fig->gen_ms / 1e3) : 0;
    fig->peak_rss_bytes = after.peak_rss_bytes;
    fig->major_faults = after.major_faults - before.major_faults;
    fig->disk_read_bytes = after.read_bytes >= 0 && before.read_bytes >= 0
                               ? (uint64_t)(after.read_bytes - before.read_bytes)
                               : UINT64_MAX;
    fig->mem_pressure = mem_pressure_value(&pressure);
    fill_residency(s, fig, &c_start, &c_prompt, t_first ? &c_first : NULL, &c_end);
    fig->route_top_share = -1;
    if (routes0 != NULL && routes1 != NULL) {
        exec_local_route_counts(s->exec, routes1);
        fig->route_top_share = route_top_share(hp, routes0, routes1);
    }
    lares_free(routes0);
    lares_free(routes1);
    if (n_out != NULL) {
        *n_out = n_gen < out_cap ? n_gen : out_cap;
    }
    return rc;
}

/* ---- tokens ---- */

lares_tokenize_opts lares_tokenize_opts_default(void) {
    lares_tokenize_opts o = {.add_bos = true, .parse_special = false};
    return o;
}

lares_status lares_tokenize(const lares_model *lm, const char *text, size_t len,
                            const lares_tokenize_opts *opts, int32_t **out, size_t *n_out,
                            lares_error *err) {
    lares_tokenize_opts o = opts ? *opts : lares_tokenize_opts_default();
    return text_tokenize(lm->vocab, text, len, o.add_bos, o.parse_special, out, n_out, err);
}

int32_t lares_token_piece(const lares_model *lm, int32_t token, bool special, char *buf,
                          size_t cap) {
    return text_token_piece(lm->vocab, token, special, buf, cap);
}

int32_t lares_token_bos(const lares_model *lm) {
    return text_vocab_bos(lm->vocab);
}

int32_t lares_token_eos(const lares_model *lm) {
    return text_vocab_eos(lm->vocab);
}

bool lares_token_is_eog(const lares_model *lm, int32_t token) {
    return text_token_is_eog(lm->vocab, token);
}
