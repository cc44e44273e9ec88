/*
 * Byte-level BPE (tokenizer.ggml.model = "gpt2"; Sennrich et al. 2016, with
 * GPT-2's byte-to-unicode trick, Radford et al. 2019): the text is cut into
 * words by the pre-tokenizer (pretok.c), each byte of a word becomes the
 * token of its GPT-2 character, and the adjacent pair with the lowest merge
 * rank (its index in tokenizer.ggml.merges) is merged until no pair has a
 * rank; ties go to the leftmost pair (llama-vocab.cpp, llm_tokenizer_bpe_session).
 *
 * Merges are resolved to token ids once at load time, so the hot loop hashes
 * two 32-bit ids instead of strings; candidate pairs wait in a binary heap.
 *
 * Invalid UTF-8 in the input is replaced by U+FFFD before splitting (one per
 * maximal ill-formed subpart), as the reference engine replaces it.
 */
#include "text/text_impl.h"

#define KEY_MERGES "tokenizer.ggml.merges"

/* Ranks are compared as floats in the shared heap: exact below 2^24. */
#define MAX_MERGES (1u << 24)

lares_status text_bpe_load(text_vocab *v, const gguf_file *f, lares_error *err) {
    const char *path = gguf_path(f);
    gguf_str pre = {NULL, 0};
    if (gguf_has(f, "tokenizer.ggml.pre")) {
        lares_status st = gguf_get_str(f, "tokenizer.ggml.pre", &pre, err);
        if (st != LARES_OK) {
            return st;
        }
    } else {
        lares_log(LARES_LOG_WARN,
                  "text: %s has no tokenizer.ggml.pre; using the 'default' pre-tokenizer, "
                  "which may split text unlike the model's own tokenizer",
                  path);
    }
    lares_status st = text_pretok_create(pre.ptr, (size_t)pre.len, &v->pre, err);
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s: ", path);
        return st;
    }
    v->ignore_merges = text_pretok_ignore_merges(v->pre);
    v->add_bos = text_pretok_add_bos_default(v->pre);

    gguf_arr m;
    if ((st = gguf_get_arr(f, KEY_MERGES, &m, err)) != LARES_OK) {
        return st;
    }
    if (m.type != GGUF_VT_STRING) {
        return lares_fail(err, LARES_EFORMAT, "%s: %s holds %s, not strings", path, KEY_MERGES,
                          gguf_vtype_name(m.type));
    }
    if (m.n > MAX_MERGES) {
        return lares_fail(err, LARES_EUNSUPPORTED, "%s: %s has %" PRIu64 " entries (at most %u)",
                          path, KEY_MERGES, m.n, MAX_MERGES);
    }
    if ((st = text_pairmap_init(&v->merges, (size_t)m.n)) != LARES_OK) {
        return lares_fail(err, st, "%s: no memory for %" PRIu64 " merges", path, m.n);
    }
    char *joined = lares_alloc(TEXT_MAX_TOKEN_BYTES);
    if (joined == NULL) {
        return lares_fail(err, LARES_ENOMEM, "%s: no memory to read the merges", path);
    }
    size_t unusable = 0, first_bad = 0;
    for (uint64_t i = 0; i < m.n; i++) {
        gguf_str s = gguf_arr_str(&m, i);
        /* "left right": the first space after the first byte separates them */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', (size_t)s.len - 1) : NULL;
        int32_t l = -1, r = -1, res = -1;
        if (sp != NULL && s.len - 1 <= TEXT_MAX_TOKEN_BYTES) {
            size_t nl = (size_t)(sp - s.ptr), nr = (size_t)s.len - nl - 1;
            l = text_strmap_find(&v->map, s.ptr, nl);
            r = text_strmap_find(&v->map, sp + 1, nr);
            memcpy(joined, s.ptr, nl);
            memcpy(joined + nl, sp + 1, nr);
            res = text_strmap_find(&v->map, joined, nl + nr);
        }
        if (l < 0 || r < 0 || res < 0) {
            /* a merge that cannot apply or make a token can never fire */
            if (unusable++ == 0) {
                first_bad = (size_t)i;
            }
            continue;
        }
        text_pairmap_put(&v->merges, l, r, (int32_t)i, res);
    }
    lares_free(joined);
    if (unusable > 0) {
        lares_log(LARES_LOG_WARN,
                  "text: %s: %zu of %" PRIu64 " merges (the first: %s[%zu]) join strings that "
                  "are not tokens; they are ignored",
                  path, unusable, m.n, KEY_MERGES, first_bad);
    }
    return LARES_OK;
}

static lares_status try_pair(const text_vocab *v, text_work *w, int32_t l, int32_t r,
                             lares_error *err) {
    if (l < 0 || r < 0) {
        return LARES_OK;
    }
    const text_symbol *a = &w->sym[l], *b = &w->sym[r];
    if (a->id < 0 || b->id < 0) {
        return LARES_OK;
    }
    const text_pair_slot *m = text_pairmap_find(&v->merges, a->id, b->id);
    if (m == NULL) {
        return LARES_OK;
    }
    text_bigram g = {.prio = -(float)m->rank,
                     .left = l,
                     .right = r,
                     .result = m->result,
                     .size = a->len + b->len};
    return text_heap_push(w, &g, err);
}

static lares_status emit_byte(const text_vocab *v, uint8_t b, text_work *w, lares_error *err) {
    int32_t id = v->byte_token[b];
    if (id < 0) {
        id = v->unk;
    }
    if (id < 0) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: the vocabulary has no token for byte 0x%02x and no unknown token",
                          gguf_path(v->file), b);
    }
    return text_emit(w, id, err);
}

/* Merges one pre-tokenized word s[0, n), n >= 1. */
static lares_status word(const text_vocab *v, const char *s, size_t n, text_work *w,
                         lares_error *err) {
    const unsigned char *u = (const unsigned char *)s;
    if (n == 1) {
        return emit_byte(v, u[0], w, err);
    }
    if (v->ignore_merges) {
        /* a whole word that is a token is taken as it is (Llama 3) */
        if (!lares_grow((void **)&w->word, &w->cap_word, 2 * n, 1)) {
            return lares_fail(err, LARES_ENOMEM, "text: no memory for a %zu-byte word", n);
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            k += text_utf8_put(text_gpt2_byte_cp(u[i]), w->word + k);
        }
        int32_t id = text_strmap_find(&v->map, w->word, k);
        if (id >= 0) {
            return text_emit(w, id, err);
        }
    }
    if (!lares_grow((void **)&w->sym, &w->cap_sym, n, sizeof *w->sym)) {
        return lares_fail(err, LARES_ENOMEM, "text: no memory for %zu symbols", n);
    }
    for (size_t i = 0; i < n; i++) {
        w->sym[i] = (text_symbol){.prev = (int32_t)i - 1,
                                  .next = i + 1 == n ? -1 : (int32_t)i + 1,
                                  .id = v->byte_token[u[i]],
                                  .off = (uint32_t)i,
                                  .len = 1};
    }
    lares_status st;
    text_heap_clear(w);
    for (size_t i = 1; i < n; i++) {
        if ((st = try_pair(v, w, (int32_t)i - 1, (int32_t)i, err)) != LARES_OK) {
            return st;
        }
    }
    text_bigram g;
    while (text_heap_pop(w, &g)) {
        text_symbol *a = &w->sym[g.left], *b = &w->sym[g.right];
        if (a->len == 0 || b->len == 0 || a->len + b->len != g.size) {
            continue; /* stale: a side was merged into something else since */
        }
        a->len += b->len;
        a->id = g.result;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) {
            w->sym[b->next].prev = g.left;
        }
        if ((st = try_pair(v, w, a->prev, g.left, err)) != LARES_OK ||
            (st = try_pair(v, w, g.left, a->next, err)) != LARES_OK) {
            return st;
        }
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const text_symbol *y = &w->sym[i];
        if (y->id >= 0) {
            st = text_emit(w, y->id, err);
        } else {
            st = emit_byte(v, u[y->off], w, err); /* unmerged: one byte */
        }
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

lares_status text_bpe_tokenize(const text_vocab *v, const char *text, bool add_special,
                               text_work *w, lares_error *err) {
    lares_status st;
    if (add_special && v->add_bos && (st = text_emit(w, v->bos, err)) != LARES_OK) {
        return st;
    }
    for (size_t i = 0; i < w->n_frags; i++) {
        const text_frag f = w->frags[i];
        if (f.id >= 0) {
            if ((st = text_emit(w, f.id, err)) != LARES_OK) {
                return st;
            }
            continue;
        }
        size_t n = text_utf8_sanitized_len(text + f.off, f.len);
        if (!lares_grow((void **)&w->buf, &w->cap_buf, n, 1)) {
            return lares_fail(err, LARES_ENOMEM, "text: no memory for %zu bytes of text", n);
        }
        text_utf8_sanitize(text + f.off, f.len, w->buf);
        if ((st = text_pretok_split(v->pre, w->buf, n, w, err)) != LARES_OK) {
            return st;
        }
        for (size_t k = 0; k < w->n_spans; k++) {
            const text_span sp = w->spans[k];
            if ((st = word(v, w->buf + sp.off, sp.len, w, err)) != LARES_OK) {
                return st;
            }
        }
    }
    if (add_special && v->add_eos && (st = text_emit(w, v->eos, err)) != LARES_OK) {
        return st;
    }
    return LARES_OK;
}
