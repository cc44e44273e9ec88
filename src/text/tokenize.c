/*
 * text_tokenize: special tokens are cut out of the raw text first
 * (partition.c), then each raw fragment goes to the vocabulary's algorithm
 * (spm.c, bpe.c, wpm.c), which share the scratch of work.c.
 */
#include "text/text_impl.h"

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
