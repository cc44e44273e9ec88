/*
 * SentencePiece-style BPE by scores (tokenizer.ggml.model = "llama"), as the
 * reference engine implements it (llama-vocab.cpp, llm_tokenizer_spm_session;
 * originally llama.cpp commit 074bea2e):
 *
 *   spaces become U+2581, a space is prefixed to each raw fragment that
 *   starts the text or follows a special token, the fragment is split into
 *   UTF-8 characters, and the adjacent pair whose concatenation
 *   is a token with the highest score is merged until no pair is a token
 *   (ties: the leftmost pair). A final symbol that is not a token is written
 *   as byte tokens <0xAB>.
 *
 * Invalid UTF-8 splits into single bytes, which end up as byte tokens, so
 * any byte string round-trips. (The reference engine takes the length of a
 * symbol from its lead byte alone, so an invalid lead can swallow the next
 * character; on valid UTF-8 both split the same.)
 *
 * Symbols form a linked list over the escaped text; candidate pairs wait in
 * a binary heap and are dropped when popped if either side changed since.
 */
#include "text/text_impl.h"

static lares_status try_pair(const text_vocab *v, const char *s, text_work *w, int32_t l, int32_t r,
                             lares_error *err) {
    if (l < 0 || r < 0) {
        return LARES_OK;
    }
    const text_symbol *a = &w->sym[l], *b = &w->sym[r];
    uint32_t size = a->len + b->len;
    int32_t id = text_strmap_find(&v->map, s + a->off, size);
    if (id < 0) {
        return LARES_OK;
    }
    text_bigram g = {.prio = v->score[id], .left = l, .right = r, .result = id, .size = size};
    return text_heap_push(w, &g, err);
}

static lares_status emit_symbol(const text_vocab *v, const char *s, const text_symbol *y,
                                text_work *w, lares_error *err) {
    if (y->id >= 0) {
        return text_emit(w, y->id, err);
    }
    /* not a token: its bytes (llama-vocab.cpp, resegment) */
    for (uint32_t i = 0; i < y->len; i++) {
        uint8_t b = (uint8_t)s[y->off + i];
        int32_t id = v->byte_token[b];
        if (id < 0) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: the vocabulary has no token for byte 0x%02x (no <0x%02X>, "
                              "no one-byte token, no unknown token)",
                              gguf_path(v->file), b, b);
        }
        lares_status st = text_emit(w, id, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

/* Merges the escaped text s[0, n), n >= 1, as one sequence. */
static lares_status merge(const text_vocab *v, const char *s, size_t n, text_work *w,
                          lares_error *err) {
    if (!lares_grow((void **)&w->sym, &w->cap_sym, n, sizeof *w->sym)) {
        return lares_fail(err, LARES_ENOMEM, "text: no memory for %zu symbols", n);
    }
    int32_t count = 0;
    for (size_t off = 0; off < n;) {
        /* a character, or one byte of an ill-formed sequence */
        size_t len;
        uint32_t cp;
        if (text_utf8_scan((const unsigned char *)s + off, n - off, &len, &cp) != TEXT_UTF8_VALID) {
            len = 1;
        }
        text_symbol *y = &w->sym[count];
        y->prev = count - 1;
        y->next = off + len == n ? -1 : count + 1;
        y->off = (uint32_t)off;
        y->len = (uint32_t)len;
        y->id = text_strmap_find(&v->map, s + off, len);
        count++;
        off += len;
    }

    lares_status st;
    text_heap_clear(w);
    for (int32_t i = 1; i < count; i++) {
        if ((st = try_pair(v, s, w, i - 1, i, err)) != LARES_OK) {
            return st;
        }
    }
    text_bigram g;
    while (text_heap_pop(w, &g)) {
        text_symbol *a = &w->sym[g.left], *b = &w->sym[g.right];
        if (a->len == 0 || b->len == 0 || a->len + b->len != g.size) {
            continue; /* one side was merged into something else since */
        }
        a->len += b->len;
        a->id = g.result;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) {
            w->sym[b->next].prev = g.left;
        }
        if ((st = try_pair(v, s, w, a->prev, g.left, err)) != LARES_OK ||
            (st = try_pair(v, s, w, g.left, a->next, err)) != LARES_OK) {
            return st;
        }
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        if ((st = emit_symbol(v, s, &w->sym[i], w, err)) != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

#define SPACE "\xe2\x96\x81" /* U+2581 */

/* Tokenizes the escaped fragment s[0, n). When no token holds U+2581 after
 * another character (spm_words_independent), no pair that straddles the
 * start of a word (U+2581 after something else) is ever a token, so merging
 * each word alone gives what merging the whole fragment gives, with a heap
 * the size of a word instead of the text. */
static lares_status fragment(const text_vocab *v, const char *s, size_t n, text_work *w,
                             lares_error *err) {
    if (!v->spm_words_independent) {
        return merge(v, s, n, w, err);
    }
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n; i++) {
        if (memcmp(s + i, SPACE, 3) == 0 && (i < 3 || memcmp(s + i - 3, SPACE, 3) != 0)) {
            lares_status st = merge(v, s + start, i - start, w, err);
            if (st != LARES_OK) {
                return st;
            }
            start = i;
            i += 2;
        }
    }
    return merge(v, s + start, n - start, w, err);
}

/* Writes the fragment with spaces escaped (and an optional leading space)
 * into w->buf; returns its length, 0 when out of memory. */
static size_t escape(const char *text, size_t len, bool prefix, text_work *w) {
    size_t spaces = prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) {
        spaces += text[i] == ' ';
    }
    size_t n = len + (prefix ? 1 : 0) + 2 * spaces;
    if (!lares_grow((void **)&w->buf, &w->cap_buf, n, 1)) {
        return 0;
    }
    char *o = w->buf;
    if (prefix) {
        memcpy(o, SPACE, 3);
        o += 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(o, SPACE, 3);
            o += 3;
        } else {
            *o++ = text[i];
        }
    }
    return n;
}

lares_status text_spm_tokenize(const text_vocab *v, const char *text, bool add_special,
                               text_work *w, lares_error *err) {
    lares_status st;
    if (add_special && v->add_bos && (st = text_emit(w, v->bos, err)) != LARES_OK) {
        return st;
    }
    bool prev_special = true; /* the text's start counts as following a special token */
    for (size_t i = 0; i < w->n_frags; i++) {
        const text_frag f = w->frags[i];
        if (f.id >= 0) {
            if ((st = text_emit(w, f.id, err)) != LARES_OK) {
                return st;
            }
            prev_special = true;
            continue;
        }
        size_t n = escape(text + f.off, f.len, v->add_space_prefix && prev_special, w);
        if (n == 0) {
            return lares_fail(err, LARES_ENOMEM, "text: no memory for %zu bytes of text", f.len);
        }
        if ((st = fragment(v, w->buf, n, w, err)) != LARES_OK) {
            return st;
        }
        prev_special = false;
    }
    if (add_special && v->add_eos && (st = text_emit(w, v->eos, err)) != LARES_OK) {
        return st;
    }
    return LARES_OK;
}
