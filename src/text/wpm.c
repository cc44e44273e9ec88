/*
 * WordPiece (tokenizer.ggml.model = "bert"; Schuster & Nakajima 2012, as
 * BERT uses it: Devlin et al. 2019, google-research/bert tokenization.py),
 * following the reference engine (llama-vocab.cpp, llm_tokenizer_wpm_session):
 *
 *   normalize: accents stripped (first code point of NFD, marks dropped),
 *   control characters, NUL and U+FFFD dropped, lowercased; split at
 *   whitespace; punctuation, ASCII symbols and CJK ideographs become words of
 *   their own. Each word, prefixed with U+2581 (the GGUF converter's stand-in
 *   for BERT's "##" on the other pieces), is cut greedily into the longest
 *   tokens from the left; a word with a part no token covers becomes [UNK].
 */
#include "text/text_impl.h"

lares_status text_wpm_load(text_vocab *v, const gguf_file *f, lares_error *err) {
    /* BERT's ids, as the reference engine defaults them */
    v->bos = v->n > 101 ? 101 : -1; /* [CLS] */
    v->unk = v->n > 100 ? 100 : -1; /* [UNK] */
    v->sep = v->n > 102 ? 102 : -1; /* [SEP] */
    v->pad = 0;
    v->mask = v->n > 103 ? 103 : -1;
    v->add_bos = true;
    v->add_sep = true;
    v->lowercase = true;
    const char *kl = "tokenizer.ggml.normalizer.lowercase";
    const char *ks = "tokenizer.ggml.normalizer.strip_accents";
    lares_status st;
    if (gguf_has(f, kl) && (st = gguf_get_bool(f, kl, &v->lowercase, err)) != LARES_OK) {
        return st;
    }
    v->strip_accents = v->lowercase;
    if (gguf_has(f, ks) && (st = gguf_get_bool(f, ks, &v->strip_accents, err)) != LARES_OK) {
        return st;
    }
    return LARES_OK;
}

static bool is_white(uint32_t c) {
    /* Unicode White_Space (PropList.txt) */
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static int uclass(uint32_t c) {
    size_t lo = 0, hi = text_uclass_n; /* last range with first <= c */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (text_uclass_ranges[mid].first <= c) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return text_uclass_ranges[lo].cls;
}

static uint32_t to_lower(uint32_t c) {
    size_t lo = 0, hi = text_lower_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (text_lower_map[mid][0] < c) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < text_lower_n && text_lower_map[lo][0] == c ? text_lower_map[lo][1] : c;
}

static uint32_t nfd_first(uint32_t c) {
    size_t lo = 0, hi = text_nfd_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (text_nfd_ranges[mid].last < c) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < text_nfd_n && text_nfd_ranges[lo].first <= c ? text_nfd_ranges[lo].nfd : c;
}

/* CJK ideograph blocks as BERT lists them (tokenization.py, _is_chinese_char;
 * the reference engine keeps HF's 0x2B920 for the start of Extension E) */
static bool is_cjk(uint32_t c) {
    return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
           (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b73f) ||
           (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b920 && c <= 0x2ceaf) ||
           (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

/* Cuts the word w->word[0, n) (U+2581 + the normalized word) into tokens. */
static lares_status word(const text_vocab *v, size_t n, text_work *w, lares_error *err) {
    const char *s = w->word;
    size_t first = w->n_ids;
    lares_status st;
    for (size_t i = 0; i < n;) {
        size_t j = LARES_MIN(n, i + v->max_token_len);
        int32_t id = -1;
        for (; j > i; j--) {
            if ((id = text_strmap_find(&v->map, s + i, j - i)) >= 0) {
                break;
            }
        }
        if (id < 0) {
            w->n_ids = first; /* a part no token covers: the whole word is unknown */
            break;
        }
        if ((st = text_emit(w, id, err)) != LARES_OK) {
            return st;
        }
        i = j;
    }
    if (w->n_ids == first && v->unk >= 0) {
        return text_emit(w, v->unk, err);
    }
    return LARES_OK;
}

/* Appends one code point to the current word, starting it with U+2581. */
static bool word_put(text_work *w, size_t *n, uint32_t c) {
    if (!lares_grow((void **)&w->word, &w->cap_word, *n + 8, 1)) {
        return false;
    }
    if (*n == 0) {
        memcpy(w->word, "\xe2\x96\x81", 3);
        *n = 3;
    }
    *n += text_utf8_put(c, w->word + *n);
    return true;
}

static lares_status fragment(const text_vocab *v, const char *s, size_t len, text_work *w,
                             lares_error *err) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0; /* bytes of the word being built, 0: none */
    lares_status st;
    for (size_t i = 0; i < len;) {
        size_t k;
        uint32_t c;
        if (text_utf8_scan(p + i, len - i, &k, &c) != TEXT_UTF8_VALID) {
            c = 0xfffd;
        }
        i += k;
        if (v->strip_accents) {
            c = nfd_first(c);
        }
        int cls = uclass(c);
        if (is_white(c)) {
            if (n > 0 && (st = word(v, n, w, err)) != LARES_OK) {
                return st;
            }
            n = 0;
            continue;
        }
        if (c == 0 || c == 0xfffd || cls == TEXT_UCLASS_CONTROL ||
            (v->strip_accents && cls == TEXT_UCLASS_MARK)) {
            continue;
        }
        uint32_t lc = v->lowercase ? to_lower(c) : c;
        bool alone =
            cls == TEXT_UCLASS_PUNCT || (c < 0x7f && cls == TEXT_UCLASS_SYMBOL) || is_cjk(c);
        if (alone && n > 0) {
            if ((st = word(v, n, w, err)) != LARES_OK) {
                return st;
            }
            n = 0;
        }
        if (!word_put(w, &n, lc)) {
            return lares_fail(err, LARES_ENOMEM, "text: no memory for a word");
        }
        if (alone) {
            if ((st = word(v, n, w, err)) != LARES_OK) {
                return st;
            }
            n = 0;
        }
    }
    if (n > 0) {
        return word(v, n, w, err);
    }
    return LARES_OK;
}

lares_status text_wpm_tokenize(const text_vocab *v, const char *text, bool add_special,
                               text_work *w, lares_error *err) {
    lares_status st;
    if (add_special && v->bos >= 0 && (st = text_emit(w, v->bos, err)) != LARES_OK) {
        return st;
    }
    for (size_t i = 0; i < w->n_frags; i++) {
        const text_frag f = w->frags[i];
        if (f.id >= 0) {
            st = text_emit(w, f.id, err);
        } else {
            st = fragment(v, text + f.off, f.len, w, err);
        }
        if (st != LARES_OK) {
            return st;
        }
    }
    if (add_special && v->sep >= 0 && (st = text_emit(w, v->sep, err)) != LARES_OK) {
        return st;
    }
    return LARES_OK;
}
