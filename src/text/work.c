/*
 * The scratch every tokenizer algorithm shares (spm.c, bpe.c, wpm.c): the
 * buffers of one call, the emitted ids, and the bigram heap both BPE variants
 * merge from.
 */
#include "text/text_impl.h"

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
        !lares_grow((void **)&w->ids, &w->cap_ids, w->n_ids + 1, sizeof *w->ids)) {
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
        !lares_grow((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof *w->heap)) {
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
