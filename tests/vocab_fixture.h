/* A vocabulary loaded from a fixture GGUF (tokenizer tests): the file stays
 * open while the vocabulary is in use. */
#ifndef LARES_TESTS_VOCAB_FIXTURE_H
#define LARES_TESTS_VOCAB_FIXTURE_H

#include "check.h"
#include "gguf/gguf.h"
#include "text/text.h"

typedef struct vocab_fx {
    gguf_file *f;
    text_vocab *v;
} vocab_fx;

/* false (with a failed check naming the error) when either step fails */
static inline bool vocab_open(const char *rel, vocab_fx *x) {
    lares_error err = {0};
    x->f = NULL;
    x->v = NULL;
    CHECK_OK(gguf_open(fixture(rel), NULL, &x->f, &err), &err);
    if (x->f == NULL) {
        return false;
    }
    CHECK_OK(text_vocab_load(x->f, &x->v, &err), &err);
    if (x->v == NULL) {
        gguf_close(x->f);
        x->f = NULL;
        return false;
    }
    return true;
}

static inline void vocab_close(vocab_fx *x) {
    text_vocab_free(x->v);
    gguf_close(x->f);
}

#endif
