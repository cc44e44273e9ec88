/*
 * Embeddings: a text's vector from the model's final hidden states. Every
 * token's last-layer state is normalised as the output matrix would see it
 * (the final RMSNorm with its weight), the states are averaged over the
 * tokens (mean pooling) and the mean is scaled to unit length, so a dot
 * product of two embeddings is their cosine similarity.
 *
 * With causal attention a token's state depends on the tokens before it
 * only, so the context is cleared first: a cached prefix would leave its
 * tokens' states uncomputed.
 */
#include "api/api.h"

#include <math.h>

typedef struct pool_sum {
    const model *m;
    float *row;  /* owned: n_embd scratch for one normalised state */
    double *sum; /* owned: n_embd */
} pool_sum;

static void add_rows(void *user, const float *x, int32_t nb) {
    pool_sum *p = user;
    const int64_t e = p->m->hp.n_embd;
    for (int32_t t = 0; t < nb; t++) {
        ops_rmsnorm(x + (size_t)t * (size_t)e, p->m->output_norm, e, p->m->hp.rms_eps, p->row);
        for (int64_t i = 0; i < e; i++) {
            p->sum[i] += (double)p->row[i];
        }
    }
}

lares_status lares_embed(lares_session *s, const int32_t *tokens, size_t n, float *out,
                         size_t out_len, lares_error *err) {
    const model *m = s->lm->m;
    const size_t e = (size_t)m->hp.n_embd;
    atomic_store(&s->cancel, false);
    if (out_len != e) {
        return lares_fail(err, LARES_EINVAL, "embedding buffer of %zu floats; the model has %zu",
                          out_len, e);
    }
    if (n == 0) {
        return lares_fail(err, LARES_EINVAL, "nothing to embed (no tokens)");
    }
    if (n > (size_t)s->o.n_ctx) {
        return lares_fail(err, LARES_ERANGE, "%zu tokens to embed; the context holds %d (raise -c)",
                          n, s->o.n_ctx);
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab) {
            return lares_fail(err, LARES_EINVAL,
                              "token %d at index %zu is outside the vocabulary of %d", tokens[i], i,
                              m->hp.n_vocab);
        }
    }
    lares_session_truncate(s, 0);
    lares_status rc = api_plan_positions(s, (int32_t)n, err);
    if (rc != LARES_OK) {
        return rc;
    }
    pool_sum p = {.m = m};
    p.row = lares_alloc_array(e, sizeof *p.row);
    p.sum = lares_calloc(e, sizeof *p.sum);
    if (p.row == NULL || p.sum == NULL) {
        rc = lares_fail(err, LARES_ENOMEM, "out of memory for an embedding of %zu floats", e);
    }
    if (rc == LARES_OK) {
        rc = api_evaluate(s, tokens, n, false, add_rows, &p, err);
        if (rc == LARES_ECANCELED) {
            rc = lares_fail(err, LARES_ECANCELED, "the embedding was cancelled");
        }
    }
    if (rc == LARES_OK) {
        double norm = 0;
        for (size_t i = 0; i < e; i++) {
            p.sum[i] /= (double)n;
            norm += p.sum[i] * p.sum[i];
        }
        norm = sqrt(norm);
        for (size_t i = 0; i < e; i++) {
            out[i] = norm > 0 ? (float)(p.sum[i] / norm) : 0.0f;
        }
    }
    lares_free(p.row);
    lares_free(p.sum);
    return rc;
}
