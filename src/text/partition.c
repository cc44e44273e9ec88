/*
 * Cutting special tokens out of raw text before tokenizing, as the reference
 * engine does (llama-vocab.cpp, tokenizer_st_partition): user-defined tokens
 * always, control and unknown tokens only when the caller parses specials.
 * Tokens are taken longest text first; each one splits every raw fragment
 * left to right at its non-overlapping occurrences. LSTRIP/RSTRIP tokens drop
 * the ASCII whitespace next to them.
 *
 * Going through every special token for every call would cost a pass over
 * the text per token (Llama-3 has 256), so one walk of a trie over the text
 * first finds which special tokens occur at all; only those cut.
 */
#include "text/text_impl.h"

static bool ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static bool wanted(const text_vocab *v, int32_t id, bool parse_special) {
    return parse_special || !(v->attr[id] & (TEXT_ATTR_CONTROL | TEXT_ATTR_UNKNOWN));
}

/* First occurrence of t (tn >= 1 bytes) in s[from, to), or SIZE_MAX. */
static size_t find(const char *s, size_t from, size_t to, const char *t, size_t tn) {
    while (from + tn <= to) {
        const char *p = memchr(s + from, t[0], to - tn + 1 - from);
        if (p == NULL) {
            return SIZE_MAX;
        }
        size_t at = (size_t)(p - s);
        if (memcmp(p, t, tn) == 0) {
            return at;
        }
        from = at + 1;
    }
    return SIZE_MAX;
}

static bool push(text_frag **a, size_t *n, size_t *cap, text_frag f) {
    if (!lares_grow((void **)a, cap, *n + 1, sizeof **a)) {
        return false;
    }
    (*a)[(*n)++] = f;
    return true;
}

/* Marks in seen[] the special tokens (by rank) that occur in the text. */
static size_t find_present(const text_vocab *v, const char *text, size_t len, bool parse_special,
                           uint8_t *seen) {
    size_t n_seen = 0;
    const text_trie_node *t = v->trie;
    for (size_t i = 0; i < len; i++) {
        int32_t node = v->trie_root[(uint8_t)text[i]];
        for (size_t j = i + 1; node >= 0; j++) {
            int32_t k = t[node].special;
            if (k >= 0 && !seen[k] && wanted(v, v->special[k], parse_special)) {
                seen[k] = 1;
                n_seen++;
            }
            if (j == len) {
                break;
            }
            uint8_t b = (uint8_t)text[j];
            int32_t c = t[node].child;
            while (c >= 0 && t[c].byte != b) {
                c = t[c].sibling;
            }
            node = c;
        }
    }
    return n_seen;
}

lares_status text_partition(const text_vocab *v, const char *text, size_t len, bool parse_special,
                            text_work *w, lares_error *err) {
    w->n_frags = 0;
    if (len == 0) {
        return LARES_OK;
    }
    if (!push(&w->frags, &w->n_frags, &w->cap_frags, (text_frag){-1, 0, len})) {
        goto oom;
    }
    if (v->n_special == 0) {
        return LARES_OK;
    }
    uint8_t *seen = lares_calloc(v->n_special, 1);
    if (seen == NULL) {
        goto oom;
    }
    if (find_present(v, text, len, parse_special, seen) == 0) {
        lares_free(seen);
        return LARES_OK;
    }
    for (size_t k = 0; k < v->n_special; k++) {
        if (!seen[k]) {
            continue;
        }
        int32_t id = v->special[k];
        const char *t = v->text[id].ptr;
        size_t tn = (size_t)v->text[id].len;
        uint16_t attr = v->attr[id];
        w->n_frags2 = 0;
        for (size_t i = 0; i < w->n_frags; i++) {
            text_frag f = w->frags[i];
            if (f.id >= 0) {
                if (!push(&w->frags2, &w->n_frags2, &w->cap_frags2, f)) {
                    goto oom_seen;
                }
                continue;
            }
            size_t off = f.off, end = f.off + f.len;
            for (;;) {
                size_t at = find(text, off, end, t, tn);
                if (at == SIZE_MAX) {
                    if (end > off && !push(&w->frags2, &w->n_frags2, &w->cap_frags2,
                                           (text_frag){-1, off, end - off})) {
                        goto oom_seen;
                    }
                    break;
                }
                size_t left = at - off;
                if (attr & TEXT_ATTR_LSTRIP) {
                    while (left > 0 && ascii_space(text[off + left - 1])) {
                        left--;
                    }
                }
                if (left > 0 &&
                    !push(&w->frags2, &w->n_frags2, &w->cap_frags2, (text_frag){-1, off, left})) {
                    goto oom_seen;
                }
                if (!push(&w->frags2, &w->n_frags2, &w->cap_frags2, (text_frag){id, at, tn})) {
                    goto oom_seen;
                }
                off = at + tn;
                if (attr & TEXT_ATTR_RSTRIP) {
                    while (off < end && ascii_space(text[off])) {
                        off++;
                    }
                }
            }
        }
        text_frag *tmp = w->frags;
        size_t tcap = w->cap_frags;
        w->frags = w->frags2;
        w->cap_frags = w->cap_frags2;
        w->n_frags = w->n_frags2;
        w->frags2 = tmp;
        w->cap_frags2 = tcap;
    }
    lares_free(seen);
    return LARES_OK;

oom_seen:
    lares_free(seen);
oom:
    return lares_fail(err, LARES_ENOMEM, "text: no memory to split %zu bytes at special tokens",
                      len);
}
