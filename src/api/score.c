/*
 * lares_score: perplexity of a model over a text, and its KL divergence from
 * a base model's saved log-probabilities, with the reference engine's
 * conventions (llama-perplexity): non-overlapping chunks of n_ctx tokens, each
 * from an empty KV cache and starting with BOS, the first half context only,
 * every later token scored by the log-softmax of the logits before it.
 */
#include "api/score.h"

#include "api/api.h"
#include "api/ring.h"

#include <math.h>
#include <stdlib.h>

/* the default chunk, as the reference engine's */
#define DEFAULT_CHUNK 512

lares_score_opts lares_score_opts_default(void) {
    lares_score_opts o = {.n_ctx = 0, .n_chunks = 0};
    return o;
}

/* Evaluates one chunk from an empty context; leaves the logits of positions
 * [first, n_ctx - 1) (each predicting the next token) in logits. */
static lares_status eval_chunk(lares_session *s, const int32_t *tok, int32_t n_ctx, int32_t first,
                               float *logits, lares_error *err) {
    const model *m = s->lm->m;
    const size_t n_vocab = (size_t)m->hp.n_vocab, n_embd = (size_t)m->hp.n_embd;
    lares_session_truncate(s, 0);
    int32_t done = 0;
    while (done < n_ctx) {
        if (atomic_load_explicit(&s->cancel, memory_order_relaxed)) {
            return lares_fail(err, LARES_ECANCELED, "scoring canceled");
        }
        const int32_t nb = LARES_MIN(n_ctx - done, s->o.n_batch);
        for (int32_t i = 0; i < nb; i++) {
            s->pos[i] = s->n_past + i;
        }
        /* rows of this batch whose logits are scored */
        const int32_t r0 = LARES_MAX(done, first), r1 = LARES_MIN(done + nb, n_ctx - 1);
        exec_local_begin_pass(s->exec, r1 > r0);
        lares_status st = model_embed(m, tok + done, nb, s->x, err);
        if (st == LARES_OK) {
            st = s->ring != NULL
                     ? api_ring_forward(s, nb, err)
                     : exec_local_forward(s->exec, 0, m->hp.n_layer, s->pos, nb, s->x, err);
        }
        if (st != LARES_OK) {
            return st;
        }
        memcpy(s->history + s->n_past, tok + done, (size_t)nb * sizeof *tok);
        s->n_past += nb;
        if (r1 > r0 && (st = exec_local_output(s->exec, s->x + (size_t)(r0 - done) * n_embd,
                                               r1 - r0, logits + (size_t)(r0 - first) * n_vocab,
                                               err)) != LARES_OK) {
            return st;
        }
        done += nb;
    }
    return LARES_OK;
}

typedef struct scorer {
    lares_session *s;
    int32_t n_vocab, n_ctx, first, n_rows, n_chunks;
    const int32_t *tokens; /* borrowed: n_ctx * n_chunks */
    int32_t *chunk;        /* owned: n_ctx, the chunk with BOS first */
    float *logits;         /* owned: n_rows x n_vocab, log-probabilities after scoring */
    float *base;           /* owned: n_rows x n_vocab of the base file, comparing */
    float *klds;           /* owned: every scored token's KL divergence, comparing */
    kld_base *in, *out;    /* owned */
    score_acc nll, base_nll, diff, kld, top, dp;
} scorer;

static void scorer_free(scorer *c) {
    lares_free(c->chunk);
    lares_free(c->logits);
    lares_free(c->base);
    lares_free(c->klds);
    kld_base_free(c->in);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Scores one evaluated chunk: log-softmax of each row, NLL of the next token,
 * the base file's row beside it when comparing. */
static lares_status score_chunk(scorer *c, int32_t k, lares_error *err) {
    lares_status st;
    if (c->in != NULL && (st = kld_base_read_chunk(c->in, c->base, err)) != LARES_OK) {
        return st;
    }
    for (int32_t r = 0; r < c->n_rows; r++) {
        float *lp = c->logits + (size_t)r * (size_t)c->n_vocab;
        const int32_t next = c->chunk[c->first + r + 1];
        score_log_softmax(lp, c->n_vocab, lp);
        const double nll = -(double)lp[next];
        score_acc_add(&c->nll, nll);
        if (c->in != NULL) {
            score_kld_row kr;
            score_kld(c->base + (size_t)r * (size_t)c->n_vocab, lp, c->n_vocab, next, &kr);
            score_acc_add(&c->base_nll, kr.base_nll);
            score_acc_add(&c->diff, nll - kr.base_nll);
            score_acc_add(&c->kld, kr.kld);
            score_acc_add(&c->top, kr.same_top ? 1 : 0);
            score_acc_add(&c->dp, kr.dp);
            c->klds[(size_t)k * (size_t)c->n_rows + (size_t)r] = (float)kr.kld;
        }
    }
    if (c->out != NULL) {
        return kld_base_write_chunk(c->out, c->logits, err);
    }
    return LARES_OK;
}

static void fill_result(scorer *c, double ms, lares_score_result *o) {
    memset(o, 0, sizeof *o);
    o->n_ctx = c->n_ctx;
    o->n_chunks = c->n_chunks;
    o->n_scored = (int64_t)c->nll.n;
    o->nll = score_acc_mean(&c->nll);
    o->nll_err = score_acc_err(&c->nll);
    o->ppl = exp(o->nll);
    o->ppl_err = o->nll_err * o->ppl;
    o->ms = ms;
    if (c->in == NULL) {
        return;
    }
    o->kld = true;
    const double bn = score_acc_mean(&c->base_nll);
    o->base_ppl = exp(bn);
    o->base_ppl_err = score_acc_err(&c->base_nll) * o->base_ppl;
    o->ppl_ratio = exp(score_acc_mean(&c->diff));
    o->ppl_ratio_err = score_acc_err(&c->diff) * o->ppl_ratio;
    o->kld_mean = score_acc_mean(&c->kld);
    o->kld_err = score_acc_err(&c->kld);
    const double p = score_acc_mean(&c->top);
    o->same_top = p;
    o->same_top_err = c->top.n > 1 ? sqrt(p * (1 - p) / (double)(c->top.n - 1)) : 0;
    o->dp_mean = score_acc_mean(&c->dp);
    o->dp_err = score_acc_err(&c->dp);
    o->dp_rms = c->dp.n > 0 ? sqrt(c->dp.sum2 / (double)c->dp.n) : 0;
    const size_t n = (size_t)c->kld.n;
    qsort(c->klds, n, sizeof *c->klds, cmp_float);
    o->kld_max = score_quantile(c->klds, n, 1);
    o->kld_p99_9 = score_quantile(c->klds, n, 0.999);
    o->kld_p99 = score_quantile(c->klds, n, 0.99);
    o->kld_p95 = score_quantile(c->klds, n, 0.95);
    o->kld_p90 = score_quantile(c->klds, n, 0.90);
    o->kld_median = score_quantile(c->klds, n, 0.5);
    o->kld_p10 = score_quantile(c->klds, n, 0.10);
    o->kld_p5 = score_quantile(c->klds, n, 0.05);
    o->kld_p1 = score_quantile(c->klds, n, 0.01);
    o->kld_p0_1 = score_quantile(c->klds, n, 0.001);
    o->kld_min = score_quantile(c->klds, n, 0);
}

/* The chunking: context, chunk count and tokens, from the options, the text
 * and the base file. */
static lares_status plan_chunks(scorer *c, const int32_t *tokens, size_t n,
                                const lares_score_opts *o, lares_error *err) {
    const int32_t n_ctx_s = c->s->o.n_ctx;
    if (o->n_ctx < 0) {
        return lares_fail(err, LARES_EINVAL, "chunk context %d: must be positive", o->n_ctx);
    }
    if (c->in != NULL) {
        if (c->in->n_vocab != (uint32_t)c->n_vocab) {
            return lares_fail(err, LARES_EINVAL,
                              "%s holds log-probabilities over %u tokens, the "
                              "model's vocabulary has %d: the base was made with another "
                              "vocabulary",
                              c->in->name, c->in->n_vocab, c->n_vocab);
        }
        if (o->n_ctx != 0 && (uint32_t)o->n_ctx != c->in->n_ctx) {
            return lares_fail(err, LARES_EINVAL,
                              "chunk context %d differs from the %u of %s "
                              "(leave -c out)",
                              o->n_ctx, c->in->n_ctx, c->in->name);
        }
        c->n_ctx = (int32_t)c->in->n_ctx;
        c->n_chunks = (int32_t)c->in->n_chunks;
        c->tokens = c->in->tokens;
        if (tokens != NULL) {
            const size_t need = (size_t)c->n_ctx * (size_t)c->n_chunks;
            if (n < need) {
                return lares_fail(err, LARES_EINVAL,
                                  "the text has %zu tokens, %s was made from "
                                  "%zu: another text",
                                  n, c->in->name, need);
            }
            for (size_t i = 0; i < need; i++) {
                if (tokens[i] != c->in->tokens[i]) {
                    return lares_fail(err, LARES_EINVAL,
                                      "token %zu of the text is %d, %d in %s: "
                                      "the base was made from another text or tokenizer",
                                      i, tokens[i], c->in->tokens[i], c->in->name);
                }
            }
        }
    } else {
        c->n_ctx = o->n_ctx != 0 ? o->n_ctx : LARES_MIN(DEFAULT_CHUNK, n_ctx_s);
        if (tokens == NULL) {
            return lares_fail(err, LARES_EINVAL, "no tokens to score");
        }
        if (c->n_ctx < 4) {
            return lares_fail(err, LARES_EINVAL,
                              "chunk context %d: at least 4 tokens are needed "
                              "(half context, half scored)",
                              c->n_ctx);
        }
        if ((uint64_t)n < 2 * (uint64_t)c->n_ctx) {
            return lares_fail(err, LARES_ERANGE,
                              "the text has %zu tokens; %" PRId64 " are needed "
                              "for 2 chunks of %d (use a longer text or a smaller -c)",
                              n, 2 * (int64_t)c->n_ctx, c->n_ctx);
        }
        c->n_chunks = (int32_t)LARES_MIN(n / (size_t)c->n_ctx, (size_t)INT32_MAX);
        c->tokens = tokens;
    }
    if (c->n_ctx > n_ctx_s) {
        return lares_fail(err, LARES_ERANGE,
                          "chunks of %d tokens do not fit the session's "
                          "context of %d (make it at least %d)",
                          c->n_ctx, n_ctx_s, c->n_ctx);
    }
    if (o->n_chunks > 0 && o->n_chunks < c->n_chunks) {
        c->n_chunks = o->n_chunks;
    }
    for (size_t i = 0; i < (size_t)c->n_ctx * (size_t)c->n_chunks; i++) {
        if (c->tokens[i] < 0 || c->tokens[i] >= c->n_vocab) {
            return lares_fail(err, LARES_EINVAL,
                              "token %d at index %zu is outside the "
                              "vocabulary of %d",
                              c->tokens[i], i, c->n_vocab);
        }
    }
    c->first = c->n_ctx / 2;
    c->n_rows = c->n_ctx - 1 - c->first;
    return LARES_OK;
}

static lares_status scorer_alloc(scorer *c, lares_error *err) {
    const size_t row = (size_t)c->n_vocab, rows = (size_t)c->n_rows;
    size_t cells;
    if (!lares_mul_size(row, rows, &cells)) {
        return lares_fail(err, LARES_ENOMEM, "%zu x %zu logits: too large", rows, row);
    }
    c->chunk = lares_alloc_array((size_t)c->n_ctx, sizeof *c->chunk);
    c->logits = lares_alloc_array(cells, sizeof *c->logits);
    if (c->in != NULL) {
        c->base = lares_alloc_array(cells, sizeof *c->base);
        c->klds = lares_alloc_array(rows * (size_t)c->n_chunks, sizeof *c->klds);
    }
    if (c->chunk == NULL || c->logits == NULL ||
        (c->in != NULL && (c->base == NULL || c->klds == NULL))) {
        return lares_fail(err, LARES_ENOMEM, "out of memory for %zu rows of %zu logits", rows, row);
    }
    return LARES_OK;
}

lares_status lares_score(lares_session *s, const int32_t *tokens, size_t n,
                         const lares_score_opts *opts, lares_score_result *out, lares_error *err) {
    const lares_score_opts o = opts ? *opts : lares_score_opts_default();
    scorer c = {.s = s, .n_vocab = s->lm->m->hp.n_vocab};
    lares_status st = LARES_OK;
    atomic_store(&s->cancel, false);
    if (o.kld_base_in != NULL && o.kld_base_out != NULL) {
        return lares_fail(err, LARES_EINVAL,
                          "saving a KL-divergence base and comparing with one "
                          "are separate runs");
    }
    if (o.kld_base_in != NULL && (st = kld_base_open(o.kld_base_in, &c.in, err)) != LARES_OK) {
        return st;
    }
    if (c.in != NULL && (st = kld_base_verify(c.in, err)) != LARES_OK) {
        goto done;
    }
    if ((st = plan_chunks(&c, tokens, n, &o, err)) != LARES_OK ||
        (st = scorer_alloc(&c, err)) != LARES_OK ||
        (st = api_plan_positions(s, c.n_ctx, err)) != LARES_OK) {
        goto done;
    }
    if (o.kld_base_out != NULL &&
        (st = kld_base_create(o.kld_base_out, (uint32_t)c.n_vocab, (uint32_t)c.n_ctx,
                              (uint32_t)c.n_chunks, c.tokens, &c.out, err)) != LARES_OK) {
        goto done;
    }
    const int32_t bos = text_vocab_bos(s->lm->vocab);
    const bool add_bos = text_vocab_add_bos(s->lm->vocab) && bos >= 0;
    const uint64_t t0 = lares_now_ns();
    for (int32_t k = 0; k < c.n_chunks; k++) {
        const uint64_t tc = lares_now_ns();
        memcpy(c.chunk, c.tokens + (size_t)k * (size_t)c.n_ctx, (size_t)c.n_ctx * sizeof *c.chunk);
        if (add_bos) {
            c.chunk[0] = bos;
        }
        if ((st = eval_chunk(s, c.chunk, c.n_ctx, c.first, c.logits, err)) != LARES_OK ||
            (st = score_chunk(&c, k, err)) != LARES_OK) {
            lares_error_prefix(err, "chunk %d of %d: ", k + 1, c.n_chunks);
            goto done;
        }
        if (o.on_chunk != NULL) {
            const double nll = score_acc_mean(&c.nll);
            lares_score_chunk ch = {.chunk = k + 1,
                                    .n_chunks = c.n_chunks,
                                    .ppl = exp(nll),
                                    .ppl_err = score_acc_err(&c.nll) * exp(nll),
                                    .kld_mean = score_acc_mean(&c.kld),
                                    .ms = lares_ns_to_ms(lares_now_ns() - tc)};
            o.on_chunk(&ch, o.user);
        }
    }
    if (c.out != NULL) {
        kld_base *w = c.out;
        c.out = NULL;
        st = kld_base_finish(w, o.kld_base_out, err);
        kld_base_free(w);
        if (st != LARES_OK) {
            goto done;
        }
    }
    if (out != NULL) {
        fill_result(&c, lares_ns_to_ms(lares_now_ns() - t0), out);
    }
done:
    if (c.out != NULL) { /* failed half-way: remove the partial file */
        kld_base_finish(c.out, o.kld_base_out, NULL);
        kld_base_free(c.out);
    }
    lares_session_truncate(s, 0);
    scorer_free(&c);
    return st;
}

lares_status lares_score_base_info(const char *path, int32_t *n_vocab, int32_t *n_ctx,
                                   int32_t *n_chunks, lares_error *err) {
    kld_base *b = NULL;
    lares_status st = kld_base_open(path, &b, err);
    if (st != LARES_OK) {
        return st;
    }
    /* each bounded by the reader (2^20) */
    *n_vocab = (int32_t)b->n_vocab;
    *n_ctx = (int32_t)b->n_ctx;
    *n_chunks = (int32_t)LARES_MIN(b->n_chunks, (uint32_t)INT32_MAX);
    kld_base_free(b);
    return LARES_OK;
}
