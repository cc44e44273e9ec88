/*
 * text_tokenize: special tokens are cut out of the raw text first
 * (partition.c), then each raw fragment goes to the vocabulary's algorithm
 * (spm.c, bpe.c, wpm.c). Also the scratch buffers of one call and the bigram
 * heap both BPE variants merge from.
 */
#include "text/text_impl.h"

bool text_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) {
        return true;
    }
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) {
            return false;
        }
        c *= 2;
    }
    size_t bytes;
    if (!lares_mul_size(c, elem, &bytes)) {
        return false;
    }
    void *q = lares_realloc(*p, bytes);
    if (q == NULL) {
        return false;
    }
    *p = q;
    *cap = c;
    return true;
}

void text_work_free(text_work *w) {
    lares_free(w->ids);
    lares_free(w->buf);
    lares_free(w->word);
    lares_free(w->sym);
    lares_free(w->heap);
    lares_free(w->spans);
    lares_free(w->spans2);
    lares_free(w->frags);
    lares_free(w->frags2);
    text_regex_work_free(w->rx);
    memset(w, 0, sizeof *w);
}

lares_status text_emit(text_work *w, int32_t id, lares_error *err) {
    if (w->n_ids == w->cap_ids &&
        !text_grow((void **)&w->ids, &w->cap_ids, w->n_ids + 1, sizeof *w->ids)) {
        return lares_fail(err, LARES_ENOMEM, "text: no memory for %zu tokens", w->n_ids + 1);
    }
    w->ids[w->n_ids++] = id;
    return LARES_OK;
}

/* ---- the bigram heap: highest prio first, ties to the leftmost pair ---- */

static bool before(const text_bigram *a, const text_bigram *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

void text_heap_clear(text_work *w) {
    w->n_heap = 0;
}

lares_status text_heap_push(text_work *w, const text_bigram *b, lares_error *err) {
    if (w->n_heap == w->cap_heap &&
        !text_grow((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof *w->heap)) {
        return lares_fail(err, LARES_ENOMEM, "text: no memory for %zu merge candidates",
                          w->n_heap + 1);
    }
    text_bigram *h = w->heap;
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(b, &h[parent])) {
            break;
        }
        h[i] = h[parent];
        i = parent;
    }
    h[i] = *b;
    return LARES_OK;
}

bool text_heap_pop(text_work *w, text_bigram *out) {
    if (w->n_heap == 0) {
        return false;
    }
    text_bigram *h = w->heap;
    *out = h[0];
    text_bigram last = h[--w->n_heap];
    size_t n = w->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && before(&h[c + 1], &h[c])) {
            c++;
        }
        if (!before(&h[c], &last)) {
            break;
        }
        h[i] = h[c];
        i = c;
    }
    if (n > 0) {
        h[i] = last;
    }
    return true;
}

lares_status text_tokenize(const text_vocab *v, const char *text, size_t len, bool add_special,
                           bool parse_special, int32_t **out, size_t *n_out, lares_error *err) {
    if (v == NULL || out == NULL || n_out == NULL || (text == NULL && len > 0)) {
        return lares_fail(err, LARES_EINVAL, "text_tokenize: missing argument");
    }
    if (len > UINT32_MAX / 4) {
        /* symbol offsets are 32-bit; SPM escaping can triple the text */
        return lares_fail(err, LARES_ERANGE,
                          "text: %zu bytes of text is too long to tokenize"
                          " at once (at most %u)",
                          len, UINT32_MAX / 4);
    }
    *out = NULL;
    *n_out = 0;
    text_work w;
    memset(&w, 0, sizeof w);
    lares_status st = text_partition(v, text, len, parse_special, &w, err);
    if (st == LARES_OK) {
        switch (v->kind) {
        case TEXT_VOCAB_SPM:
            st = text_spm_tokenize(v, text, add_special, &w, err);
            break;
        case TEXT_VOCAB_BPE:
            st = text_bpe_tokenize(v, text, add_special, &w, err);
            break;
        case TEXT_VOCAB_WPM:
            st = text_wpm_tokenize(v, text, add_special, &w, err);
            break;
        }
    }
    if (st != LARES_OK) {
        text_work_free(&w);
        return st;
    }
    if (w.n_ids > 0) {
        *out = w.ids;
        *n_out = w.n_ids;
        w.ids = NULL;
    }
    text_work_free(&w);
    return LARES_OK;
}
