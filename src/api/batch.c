/*
 * Continuous batching (lares.h, "several sequences at once"; docs/batching.md):
 * sequences of one model that decode together, one forward pass per step over
 * the next token of every generating sequence and chunks of the prompts being
 * read. Each sequence has its own KV cache, history, sampler and callbacks;
 * the session underneath gives the threads, the working memory and the
 * executor, and its own cache stays unused.
 *
 * A step's rows are grouped by sequence (model_forward_seqs): the generating
 * sequences first, a row each, then prompt chunks, shortest prompt first,
 * while the batch has room (a few rows only while other sequences are
 * active: lares_batch_set_shared_prompt_rows). A prompt read alone goes in
 * whole chunks, each through the layers a slice (half a layer) per step
 * (b->chunk), so that a sequence started meanwhile joins after a slice.
 */
#include "api/batch_impl.h"

static void seq_release(batch_seq *q) {
    text_sampler_free(q->smp);
    q->smp = NULL;
    text_sampler_free(q->draft_smp);
    q->draft_smp = NULL;
    lares_free(q->draft_q);
    q->draft_q = NULL;
    lares_free(q->draft_p);
    q->draft_p = NULL;
    lares_free(q->raw);
    q->raw = NULL;
    lares_free(q->prompt);
    q->prompt = NULL;
    q->state = SEQ_FREE;
}

void lares_batch_free(lares_batch *b) {
    if (b == NULL) {
        return;
    }
    batch_ring_free(b); /* before the caches its groups point at */
    for (int32_t i = 0; b->seq != NULL && i < b->n_seq; i++) {
        seq_release(&b->seq[i]);
        lares_session_free(b->seq[i].draft);
        model_kv_free(b->seq[i].kv);
        lares_free(b->seq[i].history);
    }
    lares_free(b->seq);
    lares_free(b->kvs);
    lares_free(b->touched);
    lares_free(b->runs);
    lares_free(b->tokens);
    lares_free(b->order);
    lares_free(b->chunk.tokens);
    lares_free(b->chunk.pos);
    lares_free(b->chunk.x);
    lares_free(b->last_x);
    lares_free(b->logits);
    lares_session_free(b->s);
    lares_free(b);
}

lares_status lares_batch_create(lares_model *lm, const lares_session_opts *opts, int32_t n_seq,
                                lares_batch **out, lares_error *err) {
    if (n_seq < 1 || n_seq > 1024) {
        return lares_fail(err, LARES_EINVAL, "batch: %d sequences (1 to 1024)", (int)n_seq);
    }
    lares_session_opts o = opts ? *opts : lares_session_opts_default();
    if (o.ring != NULL && n_seq + 1 > CLUSTER_MAX_SLOTS) {
        return lares_fail(err, LARES_EINVAL, "batch: %d sequences over a ring (at most %d)",
                          (int)n_seq, CLUSTER_MAX_SLOTS - 1);
    }
    if ((o.n_batch > 0 && o.n_batch < n_seq) || (o.n_batch == 0 && n_seq > 128)) {
        o.n_batch = n_seq; /* a row for each sequence's token (0: the session's default, 128) */
    }
    lares_batch *b = lares_calloc(1, sizeof *b);
    if (b == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st = lares_session_create(lm, &o, &b->s, err);
    if (st != LARES_OK) {
        lares_free(b);
        return st;
    }
    lares_session *s = b->s;
    const model *m = lm->m;
    if (s->o.n_batch < n_seq) {
        lares_batch_free(b);
        return lares_fail(err, LARES_EINVAL,
                          "batch: %d sequences need a batch of at least as many rows (the context "
                          "of %d limits it to %d)",
                          (int)n_seq, (int)s->o.n_ctx, (int)s->o.n_batch);
    }
    b->n_seq = n_seq;
    b->seq = lares_calloc((size_t)n_seq, sizeof *b->seq);
    b->runs = lares_calloc((size_t)n_seq, sizeof *b->runs);
    b->kvs = lares_calloc((size_t)n_seq, sizeof *b->kvs);
    b->touched = lares_calloc((size_t)n_seq, sizeof *b->touched);
    b->tokens = lares_alloc_array((size_t)s->o.n_batch, sizeof *b->tokens);
    b->out_cap = n_seq;
    b->order = lares_alloc_array((size_t)n_seq, sizeof *b->order);
    b->drafts_on = true;
    b->shared_prompt_rows = LARES_BATCH_SHARED_PROMPT_ROWS;
    b->chunk.seq = -1;
    b->chunk.tokens = lares_alloc_array(LONE_CHUNK_ROWS, sizeof *b->chunk.tokens);
    b->chunk.pos = lares_alloc_array(LONE_CHUNK_ROWS, sizeof *b->chunk.pos);
    b->chunk.x = lares_alloc_array((size_t)LONE_CHUNK_ROWS * (size_t)m->hp.n_embd,
                                   sizeof *b->chunk.x);
    b->last_x = lares_alloc_array((size_t)n_seq * (size_t)m->hp.n_embd, sizeof *b->last_x);
    b->logits = lares_alloc_array((size_t)n_seq * (size_t)m->hp.n_vocab, sizeof *b->logits);
    if (b->seq == NULL || b->runs == NULL || b->kvs == NULL || b->touched == NULL ||
        b->tokens == NULL || b->order == NULL || b->chunk.tokens == NULL || b->chunk.pos == NULL ||
        b->chunk.x == NULL || b->last_x == NULL || b->logits == NULL) {
        lares_batch_free(b);
        return lares_fail(err, LARES_ENOMEM, "out of memory for a batch of %d sequences",
                          (int)n_seq);
    }
    for (int32_t i = 0; i < n_seq; i++) {
        batch_seq *q = &b->seq[i];
        atomic_init(&q->cancel, false);
        st = model_kv_create(m, 0, m->hp.n_layer, s->o.n_ctx, s->kv->type, &q->kv, err);
        if (st == LARES_OK &&
            (q->history = lares_alloc_array((size_t)s->o.n_ctx, sizeof *q->history)) == NULL) {
            st = lares_fail(err, LARES_ENOMEM, "out of memory");
        }
        if (st != LARES_OK) {
            lares_error_prefix(err, "batch: sequence %d: ", (int)i);
            lares_batch_free(b);
            return st;
        }
        b->kvs[i] = q->kv;
        b->touched[i] = s->o.n_ctx;
    }
    /* the sequences' caches come out of the memory budget: the weights get
     * what is left, streaming from disk where that is less than they need
     * (a step then reads each streamed layer once for every sequence). A
     * budget that cannot run with every cache full is refused here, as a
     * session's is; the plan then counts what the sequences may touch */
    st = api_plan_caches(s, 0, b->kvs, b->touched, n_seq, err);
    if (st == LARES_OK) {
        memset(b->touched, 0, (size_t)n_seq * sizeof *b->touched);
        st = api_plan_caches(s, 0, b->kvs, b->touched, n_seq, err);
    }
    if (st != LARES_OK) {
        lares_error_prefix(err, "batch: %d sequences' KV caches of %d positions: ", (int)n_seq,
                           (int)s->o.n_ctx);
        lares_batch_free(b);
        return st;
    }
    /* over a ring: every member keeps a cache per sequence, and the
     * sequences go around in groups (batch_ring.c) */
    if (s->ring != NULL && (st = batch_ring_init(b, err)) != LARES_OK) {
        lares_error_prefix(err, "batch over %s: ", o.ring);
        lares_batch_free(b);
        return st;
    }
    *out = b;
    return LARES_OK;
}

int32_t lares_batch_n_seq(const lares_batch *b) {
    return b->n_seq;
}

lares_session *lares_batch_session(lares_batch *b) {
    return b->s;
}

size_t lares_batch_cached(const lares_batch *b, int32_t seq, const int32_t *prompt,
                          size_t n_prompt) {
    if (seq < 0 || seq >= b->n_seq || b->seq[seq].state != SEQ_FREE) {
        return 0;
    }
    const batch_seq *q = &b->seq[seq];
    size_t keep = 0; /* one token at least is read, for the first logits */
    while (keep < (size_t)q->n_past && keep + 1 < n_prompt && q->history[keep] == prompt[keep]) {
        keep++;
    }
    return keep;
}

lares_status lares_batch_set_draft(lares_batch *b, lares_model *draft, lares_error *err) {
    if (batch_count_active(b) > 0) {
        return lares_fail(err, LARES_EBUSY,
                          "batch: the draft model changes only while no sequence is active");
    }
    if (draft != NULL) {
        const lares_status st = api_draft_check(draft, b->s->lm, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    if (draft != b->draft) { /* the slots' draft sessions were the old model's */
        for (int32_t i = 0; i < b->n_seq; i++) {
            lares_session_free(b->seq[i].draft);
            b->seq[i].draft = NULL;
        }
    }
    b->draft = draft;
    return LARES_OK;
}

/* The most drafts a step of a run with options o may add (prompt lookup's or
 * the draft model's; 0: none) */
static int32_t drafts_cap(const lares_generate_opts *o) {
    return o->lookup > 0 ? o->lookup : o->draft_n;
}

/* Sequence q's draft session, sampler and buffers for a run with options o
 * reaching `reach` positions. */
static lares_status seq_draft_setup(lares_batch *b, batch_seq *q, const lares_generate_opts *o,
                                    int64_t reach, lares_error *err) {
    const size_t nv = (size_t)b->s->lm->m->hp.n_vocab;
    lares_status st = LARES_OK;
    if (q->draft == NULL) {
        lares_session_opts so = lares_session_opts_default();
        so.n_ctx = b->s->o.n_ctx; /* it follows its sequence's context, drafts included */
        so.n_batch = b->s->o.n_batch;
        st = api_session_create(b->draft, &so, b->s->pool, &q->draft, err);
    }
    if (st == LARES_OK) {
        st = api_plan_positions(q->draft, (int32_t)LARES_MIN(reach, (int64_t)b->s->o.n_ctx), err);
    }
    if (st != LARES_OK) {
        lares_error_prefix(err, "draft model: ");
        return st;
    }
    if ((st = api_draft_sampler(&o->sampler, (int32_t)nv, &q->draft_smp, err)) != LARES_OK) {
        return st;
    }
    if (o->sampler.temperature > 0.0f &&
        ((q->draft_q = lares_alloc_array((size_t)o->draft_n * nv, sizeof *q->draft_q)) == NULL ||
         (q->draft_p = lares_alloc_array(nv, sizeof *q->draft_p)) == NULL)) {
        return lares_fail(err, LARES_ENOMEM, "out of memory for the draft's distributions");
    }
    return LARES_OK;
}

lares_status lares_batch_start(lares_batch *b, int32_t seq, const int32_t *prompt,
                               size_t n_prompt, const lares_generate_opts *opts,
                               lares_error *err) {
    const lares_generate_opts o = opts ? *opts : lares_generate_opts_default();
    const model *m = b->s->lm->m;
    const int32_t n_ctx = b->s->o.n_ctx;
    if (seq < 0 || seq >= b->n_seq) {
        return lares_fail(err, LARES_EINVAL, "batch: sequence %d outside 0..%d", (int)seq,
                          (int)b->n_seq - 1);
    }
    batch_seq *q = &b->seq[seq];
    if (q->state != SEQ_FREE) {
        return lares_fail(err, LARES_EBUSY, "batch: sequence %d is still active", (int)seq);
    }
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
    if (o.draft_n > 0 && o.lookup > 0) {
        return lares_fail(err, LARES_EINVAL,
                          "drafts come from prompt lookup or from a draft model, not both");
    }
    if (o.draft_n > 0 && b->draft == NULL) {
        return lares_fail(err, LARES_EINVAL,
                          "draft: %d drafted tokens asked but the batch has no draft model "
                          "(lares_batch_set_draft)",
                          o.draft_n);
    }
    for (size_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || prompt[i] >= m->hp.n_vocab) {
            return lares_fail(err, LARES_EINVAL,
                              "prompt token %d at index %zu is outside the vocabulary of %d",
                              prompt[i], i, m->hp.n_vocab);
        }
    }
    /* the part of the prompt its cache holds from its last run stays */
    const size_t keep = lares_batch_cached(b, seq, prompt, n_prompt);
    const int64_t need = (int64_t)n_prompt + (o.n_predict > 0 ? o.n_predict : 0);
    if (need > n_ctx) {
        return lares_fail(err, LARES_ERANGE,
                          "%zu prompt tokens + %d to generate need %" PRId64
                          " positions, a sequence's context holds %d; raise -c or lower -n",
                          n_prompt, o.n_predict > 0 ? o.n_predict : 0, need, n_ctx);
    }
    q->prompt = lares_alloc_array(n_prompt, sizeof *q->prompt);
    if (q->prompt == NULL || (o.n_logprobs > 0 && (q->raw = lares_alloc_array(
                                                       (size_t)m->hp.n_vocab, sizeof *q->raw)) ==
                                                      NULL)) {
        seq_release(q);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st = text_sampler_create(&o.sampler, m->hp.n_vocab, &q->smp, err);
    /* the weights get what the caches leave at the positions the active
     * sequences may reach (pages a cache touched stay with it) */
    const int64_t reach = o.n_predict >= 0 ? need : n_ctx;
    if (st == LARES_OK && o.draft_n > 0) {
        st = seq_draft_setup(b, q, &o, reach, err);
    }
    if (st != LARES_OK) {
        seq_release(q);
        return st;
    }
    const int32_t was = b->touched[seq];
    b->touched[seq] = LARES_MAX(was, (int32_t)LARES_MIN(reach, (int64_t)n_ctx));
    if ((st = api_plan_caches(b->s, 0, b->kvs, b->touched, b->n_seq, err)) != LARES_OK) {
        lares_error_prefix(err, "batch: sequence %d may fill %d positions, beside the others: ",
                           (int)seq, (int)b->touched[seq]);
        b->touched[seq] = was;
        seq_release(q);
        return st;
    }
    memcpy(q->prompt, prompt, n_prompt * sizeof *prompt);
    q->n_prompt = n_prompt;
    q->at = keep;
    q->n_past = (int32_t)keep;
    q->o = o;
    q->n_gen = 0;
    q->n_draft = 0;
    q->draft_max = drafts_cap(&o);
    q->pace = (api_draft_pace){0};
    q->proposed = false;
    text_stream_init(&q->ts);
    atomic_store(&q->cancel, false);
    memset(&q->st, 0, sizeof q->st);
    q->st.stop = LARES_STOP_NONE;
    q->st.load_ms = b->s->lm->open_ms + b->s->create_ms;
    q->t_start = lares_now_ns();
    q->t_prompt = q->t_first = 0;
    q->state = SEQ_PROMPT;
    if (b->s->ring != NULL) {
        b->s->ring->slots[seq + 1].keep = q->n_past; /* what a plan change keeps of it */
    }
    return LARES_OK;
}

/* The sequence's run ends: the text of a character that never completed,
 * the figures, and the slot is free again (its cache kept for a prefix). */
void batch_seq_finish(batch_seq *q, lares_stop_reason why) {
    api_flush(&q->o, &q->ts);
    const uint64_t t_end = lares_now_ns();
    lares_stats *f = &q->st;
    f->stop = why;
    f->n_generated = (int32_t)q->n_gen;
    if (q->t_prompt == 0) {
        q->t_prompt = t_end; /* cancelled while reading its prompt */
    }
    f->prompt_ms = lares_ns_to_ms(q->t_prompt - q->t_start);
    f->prompt_tok_s = f->prompt_ms > 0 ? f->n_prompt / (f->prompt_ms / 1e3) : 0;
    f->ttft_ms = q->t_first ? lares_ns_to_ms(q->t_first - q->t_start) : 0;
    f->gen_ms = q->t_first ? lares_ns_to_ms(t_end - q->t_first) : 0;
    f->gen_tok_s =
        q->n_gen > 1 && f->gen_ms > 0 ? (double)(q->n_gen - 1) / (f->gen_ms / 1e3) : 0;
    seq_release(q);
}

/* Draws the sequence's next token from its logits, by the rule of
 * speculative sampling when draft x was drawn from the draft model's
 * distribution dq (NULL: a plain draw); false when its run ended. */
static bool seq_draw(lares_batch *b, batch_seq *q, float *logits, const float *dq, int32_t x) {
    const lares_model *lm = b->s->lm;
    const int32_t n_vocab = lm->m->hp.n_vocab;
    if (q->o.n_predict >= 0 && q->n_gen >= (size_t)q->o.n_predict) {
        batch_seq_finish(q, LARES_STOP_LENGTH);
        return false;
    }
    if (q->n_past >= b->s->o.n_ctx) {
        batch_seq_finish(q, LARES_STOP_LENGTH); /* the context is full */
        return false;
    }
    token_probs tp;
    const int32_t tok =
        dq != NULL ? api_draw_verified(&q->o, q->smp, logits, n_vocab, q->history,
                                       (size_t)q->n_past, q->raw, &tp, q->draft_p, dq, x)
                   : api_draw(&q->o, q->smp, logits, n_vocab, q->history, (size_t)q->n_past,
                              q->raw, &tp);
    if (q->n_gen == 0) {
        q->t_first = lares_now_ns();
    }
    q->n_gen++;
    const lares_stop_reason why = api_emit(&q->o, lm->vocab, &q->ts, tok, q->raw ? &tp : NULL);
    if (why != LARES_STOP_NONE) {
        batch_seq_finish(q, why);
        return false;
    }
    if (q->o.n_predict >= 0 && q->n_gen >= (size_t)q->o.n_predict) {
        batch_seq_finish(q, LARES_STOP_LENGTH); /* the last token needs no forward pass */
        return false;
    }
    q->last = tok;
    q->state = SEQ_GEN;
    return true;
}

bool batch_seq_draw(lares_batch *b, batch_seq *q, float *logits) {
    return seq_draw(b, q, logits, NULL, -1);
}

/* Adds rows [at, at + n) of `toks` for sequence q to the step. */
static void add_rows(lares_batch *b, int32_t *n_rows, int32_t *n_runs, batch_seq *q,
                     const int32_t *toks, int32_t n) {
    lares_session *s = b->s;
    model_seq *r = &b->runs[(*n_runs)++];
    r->kv = q->kv;
    r->row0 = *n_rows;
    r->n_rows = n;
    for (int32_t i = 0; i < n; i++) {
        b->tokens[*n_rows + i] = toks[i];
        s->pos[*n_rows + i] = q->n_past + i;
    }
    *n_rows += n;
}

int32_t batch_count_active(const lares_batch *b) {
    int32_t n = 0;
    for (int32_t i = 0; i < b->n_seq; i++) {
        n += b->seq[i].state != SEQ_FREE;
    }
    return n;
}

/* Sets up sequence i's next take rows as the chunk in flight. */
static lares_status chunk_begin(lares_batch *b, int32_t i, int32_t take, lares_error *err) {
    batch_seq *q = &b->seq[i];
    memcpy(b->chunk.tokens, q->prompt + q->at, (size_t)take * sizeof *b->chunk.tokens);
    for (int32_t r = 0; r < take; r++) {
        b->chunk.pos[r] = q->n_past + r;
    }
    b->chunk.seq = i;
    b->chunk.n_rows = take;
    b->chunk.half = 0;
    q->state = SEQ_CHUNK;
    return model_embed(b->s->lm->m, b->chunk.tokens, take, b->chunk.x, err);
}

/* the chunk in flight through its half layers up to h1 (exclusive; 2 x
 * n_layer: to the end) */
static lares_status chunk_pass(lares_batch *b, int32_t h1, lares_error *err) {
    lares_session *s = b->s;
    const model *m = s->lm->m;
    const int32_t n_halves = 2 * m->hp.n_layer;
    batch_seq *q = &b->seq[b->chunk.seq];
    const int32_t n = b->chunk.n_rows;
    const model_seq run = {.kv = q->kv, .row0 = 0, .n_rows = n};
    exec_local_begin_pass(s->exec, h1 == n_halves);
    lares_status st = exec_local_forward_halves(s->exec, &run, 1, b->chunk.half, h1,
                                                b->chunk.pos, n, b->chunk.x, err);
    if (st != LARES_OK) {
        return st;
    }
    b->chunk.half = h1;
    if (h1 < n_halves) {
        return LARES_OK;
    }
    b->chunk.seq = -1;
    memcpy(q->history + q->n_past, b->chunk.tokens, (size_t)n * sizeof(int32_t));
    q->n_past += n;
    q->at += (size_t)n;
    q->st.n_prompt += n;
    q->state = SEQ_PROMPT;
    if (q->at < q->n_prompt) {
        return LARES_OK;
    }
    q->t_prompt = lares_now_ns();
    const size_t e = (size_t)m->hp.n_embd;
    memcpy(b->last_x, b->chunk.x + (size_t)(n - 1) * e, e * sizeof(float));
    st = exec_local_output(s->exec, b->last_x, 1, b->logits, err);
    if (st == LARES_OK) {
        batch_seq_draw(b, q, b->logits);
    }
    return st;
}

/* Runs the chunk in flight through its next half layer (the attention
 * block, or the FFN block: model_forward_halves): what a request arriving
 * meanwhile waits for, and what a step of the generating sequences carries
 * besides their tokens. A chunk's layer computes while a pass of a few rows
 * waits on memory, so equal multiply counts are not equal times: llama-1b
 * Q4_0 on 2 AVX2 cores reads 64 prompt rows at 90.8 tok/s through 22 layers
 * (32 ms a layer) and generates a token in 32 ms, so the two-layer slices an
 * earlier rule (8 rows x 22 layers / 64) gave cost two tokens' passes. A step
 * is cheap, so slices of one layer cost nothing but the steps, and half
 * layers (since 2026-12-02) nothing more: a 1536-token prompt read alone
 * through `serve` took 8.5-10.0 s either way on a Zen 5, while a newcomer
 * waits half as long at most (a whole layer of 64 rows at depth 1000 took
 * 11-13 ms there). After the last, the sequence has read the chunk (and
 * draws its first token when that ended its prompt). */
static lares_status chunk_slice(lares_batch *b, lares_error *err) {
    return chunk_pass(b, b->chunk.half + 1, err);
}

/* Whether q drafts in this step: as the batch's measure says, or always
 * where that measure is not q's to follow (api_drafts_paced) */
static bool seq_drafts_now(const lares_batch *b, const batch_seq *q) {
    return b->drafts_on || !api_drafts_paced(&q->o);
}

/* Up to the sequence's paced number of drafts after its token (run, at the
 * end of the rows), as the batch's rows leave room after the generating
 * sequences still to come, and its context and length: by prompt lookup, or
 * from its draft session (the draft model reads what its cache lacks of the
 * context, then drafts one token after another; a draft model whose drafts
 * keep failing pauses, api_draft_pace). */
lares_status batch_drafts(lares_batch *b, batch_seq *q, int64_t room, int32_t *tokens,
                          int32_t *pos, int32_t *n, lares_error *err) {
    lares_session *s = b->s;
    q->n_draft = 0;
    *n = 0;
    /* drafts batch_propose made for this step only (never a later one's:
     * a sampled draft's distributions go with them) */
    const bool proposed = q->proposed;
    q->proposed = false;
    room = LARES_MIN(room, (int64_t)q->draft_max);
    if (!seq_drafts_now(b, q)) {
        room = 0;
    }
    room = LARES_MIN(room, (int64_t)s->o.n_ctx - q->n_past - 1);
    if (q->o.n_predict >= 0) {
        room = LARES_MIN(room, (int64_t)q->o.n_predict - (int64_t)q->n_gen - 1);
    }
    if (room <= 0) {
        return LARES_OK;
    }
    q->history[q->n_past] = q->last; /* the context the drafts continue */
    int32_t d = 0;
    if (proposed) { /* batch_propose drafted it with the others */
        d = (int32_t)LARES_MIN((int64_t)q->n_proposed, room);
        memcpy(tokens, q->proposal, (size_t)d * sizeof *tokens);
    } else if (q->o.draft_n > 0) {
        if (!api_draft_pace_go(&q->pace)) {
            return LARES_OK;
        }
        const uint64_t t0 = lares_now_ns();
        const lares_status st = api_draft_propose(q->draft, q->draft_smp, q->history,
                                                  q->n_past + 1, (int32_t)room, tokens,
                                                  q->draft_q, &d, err);
        q->st.draft_ms += lares_ns_to_ms(lares_now_ns() - t0);
        if (st != LARES_OK) {
            lares_error_prefix(err, "draft model: ");
            return st;
        }
    } else {
        d = api_lookup_draft(q->history, q->n_past + 1, (int32_t)room, tokens);
    }
    for (int32_t i = 0; i < d; i++) {
        pos[i] = q->n_past + 1 + i;
    }
    q->n_draft = d;
    q->st.n_drafted += d;
    *n = d;
    return LARES_OK;
}

/* The drafts this step's generating sequences take from the draft model,
 * proposed together (api_draft_propose_many: one draft pass per position for
 * all of them, where one sequence after another took its own): each gets
 * what batch_drafts would give it, its room reckoned as the rows are laid
 * out below with every earlier sequence taking all its room (so never more
 * than batch_drafts allows it), the pacing asked once. With one such
 * sequence batch_drafts proposes as before. n_gen: the generating sequences. */
static lares_status batch_propose(lares_batch *b, int32_t n_gen, lares_error *err) {
    lares_session *s = b->s;
    int32_t m = 0;
    for (int32_t i = 0; i < b->n_seq; i++) {
        m += b->seq[i].state == SEQ_GEN && b->seq[i].o.draft_n > 0;
    }
    if (m < 2) {
        return LARES_OK;
    }
    /* the call's arrays, m of each, in one block */
    void *block = lares_alloc_array((size_t)m, 6 * sizeof(void *) + 3 * sizeof(int32_t));
    if (block == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory for %d drafting sequences", (int)m);
    }
    lares_session **ds = block;
    text_sampler **smp = (text_sampler **)(ds + m);
    const int32_t **ctx = (const int32_t **)(smp + m);
    int32_t **out = (int32_t **)(ctx + m);
    float **qs = (float **)(out + m);
    batch_seq **of = (batch_seq **)(qs + m);
    int32_t *n = (int32_t *)(of + m), *max = n + m, *got = max + m;
    int32_t n_rows = 0, later = n_gen;
    m = 0;
    for (int32_t i = 0; i < b->n_seq; i++) {
        batch_seq *q = &b->seq[i];
        if (q->state != SEQ_GEN) {
            continue;
        }
        n_rows++;
        later--;
        int64_t room = (int64_t)s->o.n_batch - n_rows - later;
        room = LARES_MIN(room, (int64_t)q->draft_max);
        room = LARES_MIN(room, (int64_t)s->o.n_ctx - q->n_past - 1);
        if (q->o.n_predict >= 0) {
            room = LARES_MIN(room, (int64_t)q->o.n_predict - (int64_t)q->n_gen - 1);
        }
        room = seq_drafts_now(b, q) ? LARES_MAX(room, 0) : 0;
        if (q->o.draft_n > 0) {
            q->proposed = true;
            q->n_proposed = 0;
            if (room == 0 || !api_draft_pace_go(&q->pace)) {
                continue;
            }
            q->history[q->n_past] = q->last; /* the context the drafts continue */
            ds[m] = q->draft;
            smp[m] = q->draft_smp;
            ctx[m] = q->history;
            n[m] = q->n_past + 1;
            max[m] = (int32_t)room;
            out[m] = q->proposal;
            qs[m] = q->draft_q;
            of[m++] = q;
        }
        n_rows += (int32_t)room; /* the most it (or its lookup) may take */
    }
    lares_status st = LARES_OK;
    if (m > 0) {
        const uint64_t t0 = lares_now_ns();
        st = api_draft_propose_many(ds, smp, ctx, n, max, out, qs, got, m, err);
        const double ms = lares_ns_to_ms(lares_now_ns() - t0);
        for (int32_t k = 0; k < m; k++) {
            of[k]->n_proposed = got[k];
            of[k]->st.draft_ms += ms / m;
        }
        if (st != LARES_OK) {
            lares_error_prefix(err, "draft model: ");
        }
    }
    lares_free(block);
    return st;
}

static lares_status add_drafts(lares_batch *b, batch_seq *q, model_seq *run, int32_t *n_rows,
                               int32_t later, lares_error *err) {
    const int64_t room = (int64_t)b->s->o.n_batch - *n_rows - later;
    int32_t d = 0;
    const lares_status st =
        batch_drafts(b, q, room, b->tokens + *n_rows, b->s->pos + *n_rows, &d, err);
    run->n_rows += d;
    *n_rows += d;
    return st;
}

/* A generating sequence's rows: its token, then its drafts, with the logits
 * of each. Draws from each row in turn and keeps the next while the draw is
 * that row's draft; the cache forgets the rows after the first draft not
 * drawn. A draft known for certain (prompt lookup, or a greedy draft model)
 * is kept when the plain draw equals it, so greedy or sampled the tokens are
 * those of decoding without drafts; a draft the draft model drew from its
 * distribution is kept by the rule of speculative sampling (api_draw_verified),
 * which keeps plain sampling's distribution. */
void batch_seq_verify(lares_batch *b, batch_seq *q, const int32_t *toks, float *logits) {
    const size_t nv = (size_t)b->s->lm->m->hp.n_vocab;
    const int32_t d = q->n_draft;
    int32_t taken = 0;
    for (int32_t j = 0; j <= d; j++) {
        q->history[q->n_past++] = toks[j];
        /* draft_q: drafts a sampling draft model drew */
        const float *dq = q->draft_q != NULL && j < d ? q->draft_q + (size_t)j * nv : NULL;
        if (!seq_draw(b, q, logits + (size_t)j * nv, dq, j < d ? toks[j + 1] : -1) || j == d ||
            q->last != toks[j + 1]) {
            break;
        }
        taken++;
        q->st.n_accepted++;
    }
    if (d > 0) {
        /* doubled after a step whose drafts were all drawn, else one more than were */
        q->draft_max = taken == d ? LARES_MIN(2 * q->draft_max, drafts_cap(&q->o)) : taken + 1;
        if (q->o.draft_n > 0) {
            api_draft_pace_note(&q->pace, taken);
        }
    }
    q->n_draft = 0;
}

/* Room for n output rows (drafts need more than a row a sequence). */
lares_status batch_reserve_out(lares_batch *b, int32_t n, lares_error *err) {
    if (n <= b->out_cap) {
        return LARES_OK;
    }
    const model *m = b->s->lm->m;
    float *x = lares_realloc(b->last_x, (size_t)n * (size_t)m->hp.n_embd * sizeof *x);
    if (x != NULL) {
        b->last_x = x;
    }
    float *l = lares_realloc(b->logits, (size_t)n * (size_t)m->hp.n_vocab * sizeof *l);
    if (l != NULL) {
        b->logits = l;
    }
    if (x == NULL || l == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory for the logits of %d rows", (int)n);
    }
    b->out_cap = n;
    return LARES_OK;
}

lares_status lares_batch_step(lares_batch *b, int32_t *n_active, lares_error *err) {
    if (b->s->ring != NULL) {
        return batch_ring_step(b, n_active, err);
    }
    lares_session *s = b->s;
    const model *m = s->lm->m;
    const size_t e = (size_t)m->hp.n_embd;
    for (int32_t i = 0; i < b->n_seq; i++) {
        batch_seq *q = &b->seq[i];
        if (q->state != SEQ_FREE && atomic_load(&q->cancel)) {
            if (i == b->chunk.seq) {
                b->chunk.seq = -1; /* its rows beyond n_past are simply not kept */
            }
            batch_seq_finish(q, LARES_STOP_CANCELED);
        }
    }
    /* drafts for the greedy sequences if they pay (draft_rates.c) */
    int32_t n_gen = 0;
    bool greedy_drafts = false;
    size_t tokens_before = 0;
    for (int32_t i = 0; i < b->n_seq; i++) {
        const batch_seq *q = &b->seq[i];
        n_gen += q->state == SEQ_GEN;
        greedy_drafts = greedy_drafts ||
                        (q->state == SEQ_GEN && drafts_cap(&q->o) > 0 && api_drafts_paced(&q->o));
        tokens_before += q->n_gen;
    }
    b->drafts_on = !greedy_drafts || api_draft_rates_choose(&b->pace, n_gen);
    const uint64_t t_step = lares_now_ns();
    int32_t greedy_drafted = 0; /* a step with drafts allowed but none found is a plain one */
    lares_status pst = batch_propose(b, n_gen, err);
    if (pst != LARES_OK) {
        return pst;
    }
    /* the rows: a token of every generating sequence (with its drafts when it
     * looks them up), then prompt chunks in turn */
    int32_t n_rows = 0, n_runs = 0, n_out = 0, n_gen_left = 0;
    batch_seq *runs_of[1024];
    for (int32_t i = 0; i < b->n_seq; i++) {
        n_gen_left += b->seq[i].state == SEQ_GEN;
    }
    for (int32_t i = 0; i < b->n_seq; i++) {
        batch_seq *q = &b->seq[i];
        if (q->state == SEQ_GEN) {
            runs_of[n_runs] = q;
            add_rows(b, &n_rows, &n_runs, q, &q->last, 1);
            const lares_status dst =
                add_drafts(b, q, &b->runs[n_runs - 1], &n_rows, --n_gen_left, err);
            if (dst != LARES_OK) {
                return dst;
            }
            n_out += 1 + q->n_draft;
            greedy_drafted += api_drafts_paced(&q->o) ? q->n_draft : 0;
        }
    }
    /* the prompts, shortest rest first (a short request's first token does not
     * wait for a long prompt), equal ones in turn from where the last step
     * stopped; while another sequence is active a step reads at most
     * shared_prompt_rows of them, so that it stays about as short as a step of
     * generation (docs/batching.md) */
    int32_t n_prompts = 0;
    for (int32_t k = 0; k < b->n_seq; k++) {
        const int32_t i = (b->turn + k) % b->n_seq;
        if (b->seq[i].state != SEQ_PROMPT) {
            continue;
        }
        const size_t rest = b->seq[i].n_prompt - b->seq[i].at;
        int32_t j = n_prompts++;
        for (; j > 0 && b->seq[b->order[j - 1]].n_prompt - b->seq[b->order[j - 1]].at > rest; j--) {
            b->order[j] = b->order[j - 1];
        }
        b->order[j] = i;
    }
    int32_t limit = s->o.n_batch;
    const bool shared = batch_count_active(b) > 1;
    bool finish_chunk = false; /* the chunk in flight runs through all its layers this step */
    if (b->shared_prompt_rows > 0 && shared) {
        /* Prompts that fit whole in PROMPT_WHOLE_PER_SHARE shares of rows
         * (64 by default) are read whole in this step and start together,
         * shortest first; the chunk in flight takes its turn among them by the
         * rows of its layers left (when it fits, it runs through them all
         * after the step's pass). In shares of a few rows such prompts started
         * one after another, each such step past the few-row product's 8 rows
         * anyway (llama-1b Q4_0, 2 cores, four 12-token requests at once:
         * first tokens 0.12 to 0.71 s apart; eight: to 2.5 s), and a short
         * prompt that began alone went a layer a step once others were
         * active, its first token n_layer steps later. A prompt that does not
         * fit keeps its shares and slices, so that a short one is not held up
         * by a long one, and the generating sequences' steps stay short. */
        const int32_t budget = (int32_t)LARES_MIN(
            (int64_t)limit - n_rows, (int64_t)b->shared_prompt_rows * PROMPT_WHOLE_PER_SHARE);
        const int32_t n_halves = 2 * m->hp.n_layer;
        const int32_t chunk_left =
            b->chunk.seq < 0
                ? INT32_MAX
                : (int32_t)(((int64_t)b->chunk.n_rows * (n_halves - b->chunk.half) + n_halves - 1) /
                            n_halves);
        int32_t whole = 0, used = 0;
        for (int32_t k = 0; k <= n_prompts; k++) {
            const batch_seq *q = k < n_prompts ? &b->seq[b->order[k]] : NULL;
            const size_t rest = q != NULL ? q->n_prompt - q->at : SIZE_MAX;
            if (!finish_chunk && chunk_left <= budget - used && (size_t)chunk_left <= rest) {
                finish_chunk = true; /* its turn comes before this prompt's */
                used += chunk_left;
            }
            if (q == NULL || rest > (size_t)(budget - used)) {
                break;
            }
            whole += (int32_t)rest;
            used += (int32_t)rest;
        }
        limit = whole > 0 || finish_chunk
                    ? n_rows + whole
                    : (int32_t)LARES_MIN((int64_t)limit, (int64_t)n_rows + b->shared_prompt_rows);
    }
    /* a prompt read alone, more rows than a shared step: in slices of half layers,
     * unless the weights stream (the plan changes as sequences start): a
     * pass that starts mid-cycle would read again what was read ahead */
    exec_plan_info plan;
    exec_local_plan(s->exec, &plan);
    if (!shared && n_prompts == 1 && b->shared_prompt_rows > 0 && b->chunk.seq < 0 &&
        m->hp.n_layer > 1 && !plan.streaming) {
        const batch_seq *q = &b->seq[b->order[0]];
        const int32_t take =
            (int32_t)LARES_MIN(q->n_prompt - q->at, (size_t)LARES_MIN(limit, LONE_CHUNK_ROWS));
        if (take > b->shared_prompt_rows) {
            lares_status st = chunk_begin(b, b->order[0], take, err);
            if (st == LARES_OK) {
                st = chunk_slice(b, err);
            }
            *n_active = batch_count_active(b);
            return st;
        }
    }
    int32_t first_prompt = -1;
    for (int32_t k = 0; k < n_prompts && n_rows < limit; k++) {
        const int32_t i = b->order[k];
        batch_seq *q = &b->seq[i];
        first_prompt = first_prompt < 0 ? i : first_prompt;
        const int32_t take = (int32_t)LARES_MIN(q->n_prompt - q->at, (size_t)(limit - n_rows));
        runs_of[n_runs] = q;
        n_out += q->at + (size_t)take == q->n_prompt;
        add_rows(b, &n_rows, &n_runs, q, q->prompt + q->at, take);
    }
    if (first_prompt >= 0) {
        b->turn = (first_prompt + 1) % b->n_seq; /* the next one reads first next time */
    }
    if (n_rows == 0) {
        lares_status st = finish_chunk        ? chunk_pass(b, 2 * m->hp.n_layer, err)
                          : b->chunk.seq >= 0 ? chunk_slice(b, err)
                                              : LARES_OK;
        *n_active = batch_count_active(b);
        return st;
    }
    lares_status st = batch_reserve_out(b, n_out, err);
    if (st != LARES_OK) {
        return st;
    }
    exec_local_begin_pass(s->exec, n_out > 0);
    st = model_embed(m, b->tokens, n_rows, s->x, err);
    if (st == LARES_OK) {
        st = exec_local_forward_seqs(s->exec, b->runs, n_runs, 0, m->hp.n_layer, s->pos, n_rows,
                                     s->x, err);
    }
    if (st != LARES_OK) {
        return st;
    }
    /* the logits: every row of a generating sequence (its token's, then each
     * draft's), the last row of a prompt that ends */
    int32_t k = 0;
    for (int32_t r = 0; r < n_runs; r++) {
        const batch_seq *q = runs_of[r];
        const model_seq *run = &b->runs[r];
        const int32_t from = q->state == SEQ_GEN ? run->row0 : run->row0 + run->n_rows - 1;
        const int32_t n = q->state == SEQ_GEN ? run->n_rows
                          : q->at + (size_t)run->n_rows == q->n_prompt ? 1
                                                                         : 0;
        memcpy(b->last_x + (size_t)k * e, s->x + (size_t)from * e, (size_t)n * e * sizeof(float));
        k += n;
    }
    /* a step of prompt chunks that end no prompt has no logits to draw from */
    st = n_out > 0 ? exec_local_output(s->exec, b->last_x, n_out, b->logits, err) : LARES_OK;
    if (st != LARES_OK) {
        return st;
    }
    /* the cache holds the rows; each sequence keeps those its draws confirm */
    k = 0;
    bool first_token = false;
    const uint64_t now = lares_now_ns();
    const size_t nv = (size_t)m->hp.n_vocab;
    for (int32_t r = 0; r < n_runs; r++) {
        batch_seq *q = runs_of[r];
        const model_seq *run = &b->runs[r];
        const int32_t *toks = b->tokens + run->row0;
        if (q->state == SEQ_GEN) {
            batch_seq_verify(b, q, toks, b->logits + (size_t)k * nv);
            k += run->n_rows;
            continue;
        }
        memcpy(q->history + q->n_past, toks, (size_t)run->n_rows * sizeof(int32_t));
        q->n_past += run->n_rows;
        q->at += (size_t)run->n_rows;
        q->st.n_prompt += run->n_rows;
        if (q->at == q->n_prompt) {
            q->t_prompt = now;
            first_token = true;
            batch_seq_draw(b, q, b->logits + (size_t)k++ * nv);
        }
    }
    if (greedy_drafts && n_prompts == 0 && b->chunk.seq < 0) { /* a step of generation only */
        size_t tokens_after = 0;
        for (int32_t i = 0; i < b->n_seq; i++) {
            tokens_after += b->seq[i].n_gen;
        }
        api_draft_rates_note(&b->pace, n_gen, greedy_drafted > 0,
                             (int32_t)(tokens_after - tokens_before),
                             lares_ns_to_ms(lares_now_ns() - t_step));
    }
    /* the chunk in flight goes on a slice after the others' tokens, but not
     * in a step that gave a sequence its first token: that token is out once
     * the step returns, not a slice later */
    st = finish_chunk                        ? chunk_pass(b, 2 * m->hp.n_layer, err)
         : b->chunk.seq >= 0 && !first_token ? chunk_slice(b, err)
                                             : LARES_OK;
    *n_active = batch_count_active(b);
    return st;
}

void lares_batch_set_shared_prompt_rows(lares_batch *b, int32_t rows) {
    b->shared_prompt_rows = rows > 0 ? rows : 0;
}

void lares_batch_cancel(lares_batch *b, int32_t seq) {
    if (seq >= 0 && seq < b->n_seq) {
        atomic_store(&b->seq[seq].cancel, true);
    }
}

bool lares_batch_active(const lares_batch *b, int32_t seq) {
    return seq >= 0 && seq < b->n_seq && b->seq[seq].state != SEQ_FREE;
}

void lares_batch_stats(const lares_batch *b, int32_t seq, lares_stats *out) {
    memset(out, 0, sizeof *out);
    if (seq >= 0 && seq < b->n_seq) {
        *out = b->seq[seq].st;
    }
    /* the residency is the batch's, shared by its sequences (the read and
     * wait counters are too, and stay 0 here) */
    exec_plan_info plan;
    exec_local_plan(b->s->exec, &plan);
    out->mem_budget_bytes = b->s->mem_budget_bytes;
    out->streaming = plan.streaming;
    out->stream_bytes = plan.stream_bytes;
    out->pinned_bytes = plan.pinned_bytes;
    out->window_bytes = plan.window_bytes;
    out->locked_bytes = plan.locked_bytes;
    out->stream_direct = plan.direct;
    out->probe_direct_Bps = plan.probe_direct_Bps;
    out->probe_mmap_Bps = plan.probe_mmap_Bps;
    out->expert_direct = plan.experts_direct;
    out->expert_probe_direct_Bps = plan.expert_probe_direct_Bps;
    out->expert_probe_mmap_Bps = plan.expert_probe_mmap_Bps;
}
