/*
 * Constrained sampling for structured output: before each token is drawn,
 * every token whose bytes the JSON automaton (json_machine.c) would refuse
 * gets a logit of -inf, so the text stays a prefix of a valid value and the
 * end of generation is allowed only once the value is whole. A token may
 * carry many characters ("\":" or "},{"): all its bytes are fed to a copy of
 * the automaton's state.
 *
 * The budget: with k tokens left, a token is allowed only if the value can
 * still be completed in k - 1 more, counting one byte a token (every
 * vocabulary lares reads has single-byte tokens for the ASCII punctuation
 * and digits that close a value). So a generation cut by max_tokens still
 * ends with a whole value, unless the vocabulary lacks those tokens; then
 * the budget is given up rather than masking every token.
 */
#include "core/core.h"
#include "server/schema.h"

#include <math.h>

lares_status server_vocab_bytes_read(const lares_model *m, int32_t n_vocab, server_vocab_bytes *out,
                                     lares_error *err) {
    memset(out, 0, sizeof *out);
    const int32_t n = n_vocab;
    if (n <= 0) {
        return lares_fail(err, LARES_EINVAL, "the model has no vocabulary");
    }
    size_t cap = (size_t)n * 8, len = 0;
    out->n_vocab = n;
    out->offset = lares_alloc_array((size_t)n + 1, sizeof *out->offset);
    out->eog = lares_calloc((size_t)n, sizeof *out->eog);
    out->bytes = lares_alloc(cap);
    if (out->offset == NULL || out->eog == NULL || out->bytes == NULL) {
        server_vocab_bytes_free(out);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (int32_t t = 0; t < n; t++) {
        out->offset[t] = len;
        out->eog[t] = lares_token_is_eog(m, t);
        char buf[256];
        int32_t k = lares_token_piece(m, t, false, buf, sizeof buf);
        if (k < 0 || (size_t)k > sizeof buf) {
            k = 0; /* not text a value is written with */
        }
        if (len + (size_t)k > cap) {
            char *q = lares_realloc(out->bytes, cap * 2);
            if (q == NULL) {
                server_vocab_bytes_free(out);
                return lares_fail(err, LARES_ENOMEM, "out of memory");
            }
            out->bytes = q;
            cap *= 2;
        }
        memcpy(out->bytes + len, buf, (size_t)k);
        len += (size_t)k;
    }
    out->offset[n] = len;
    return LARES_OK;
}

void server_vocab_bytes_free(server_vocab_bytes *v) {
    lares_free(v->bytes);
    lares_free(v->offset);
    lares_free(v->eog);
    memset(v, 0, sizeof *v);
}

bool server_constraint_init(server_constraint *c, const server_schema *s,
                            const server_vocab_bytes *vb, int64_t budget) {
    memset(c, 0, sizeof *c);
    c->schema = s;
    c->vb = vb;
    c->budget = budget;
    server_jm_init(s, &c->st);
    c->verdicts = lares_alloc((size_t)vb->n_vocab);
    return c->verdicts != NULL;
}

void server_constraint_free(server_constraint *c) {
    lares_free(c->verdicts);
    c->verdicts = NULL;
}

typedef enum verdict {
    TOKEN_REFUSED = 0, /* the automaton refuses it */
    TOKEN_LONG,        /* allowed, but the value could not be completed within the budget */
    TOKEN_OK,
} verdict;

static verdict judge(const server_constraint *c, int32_t t, const bool *first_ok, jm_state *tmp) {
    const server_vocab_bytes *vb = c->vb;
    const size_t from = vb->offset[t], to = vb->offset[t + 1];
    if (to == from || !first_ok[(uint8_t)vb->bytes[from]]) {
        return TOKEN_REFUSED;
    }
    server_jm_copy(tmp, &c->st);
    for (size_t i = from; i < to; i++) {
        if (!server_jm_feed(c->schema, tmp, (uint8_t)vb->bytes[i])) {
            return TOKEN_REFUSED;
        }
    }
    if (c->budget >= 0 &&
        server_jm_min_finish(c->schema, tmp) > (size_t)LARES_MAX(c->budget - 1, 0)) {
        return TOKEN_LONG;
    }
    return TOKEN_OK;
}

void server_constraint_mask(server_constraint *c, float *logits, int32_t n_vocab) {
    if (c->broken || c->verdicts == NULL || n_vocab != c->vb->n_vocab) {
        return;
    }
    bool first_ok[256];
    jm_state tmp;
    for (int b = 0; b < 256; b++) {
        server_jm_copy(&tmp, &c->st);
        first_ok[b] = server_jm_feed(c->schema, &tmp, (uint8_t)b);
    }
    const bool whole = server_jm_accepting(c->schema, &c->st);
    /* first pass: count what each rule leaves */
    size_t n_ok = 0, n_long = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        if (c->vb->eog[t]) {
            continue;
        }
        const verdict v = judge(c, t, first_ok, &tmp);
        c->verdicts[t] = (uint8_t)v;
        n_ok += v == TOKEN_OK;
        n_long += v == TOKEN_LONG;
    }
    /* a whole value that cannot go on within the budget ends here */
    const bool keep_long = n_ok == 0 && !whole;
    for (int32_t t = 0; t < n_vocab; t++) {
        if (c->vb->eog[t]) {
            /* the end of generation: once the value is whole, or if nothing
             * else is left (a vocabulary without the bytes needed) */
            if (!whole && (n_ok + n_long) > 0) {
                logits[t] = -INFINITY;
            }
            continue;
        }
        const verdict v = (verdict)c->verdicts[t];
        if (v == TOKEN_REFUSED || (v == TOKEN_LONG && !keep_long)) {
            logits[t] = -INFINITY;
        }
    }
}

void server_constraint_advance(server_constraint *c, int32_t token) {
    if (c->budget > 0) {
        c->budget--;
    }
    if (c->broken || token < 0 || token >= c->vb->n_vocab || c->vb->eog[token]) {
        return;
    }
    for (size_t i = c->vb->offset[token]; i < c->vb->offset[token + 1]; i++) {
        if (!server_jm_feed(c->schema, &c->st, (uint8_t)c->vb->bytes[i])) {
            c->broken = true;
            return;
        }
    }
}
