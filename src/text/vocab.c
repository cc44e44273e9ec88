/*
 * Loading a vocabulary from tokenizer.ggml.* metadata (GGUF spec, section
 * "Tokenizer") and the facts the reference engine (llama.cpp, llama-vocab.cpp,
 * llama_vocab::impl::load) adds on top: per-model defaults, end-of-generation
 * and fill-in-the-middle tokens recognised by their text, phi-3's stripping
 * of whitespace around special tokens. Every array and id from the file is
 * checked; a bad one gets LARES_EFORMAT naming the key.
 */
#include "text/text_impl.h"

#include <ctype.h>
#include <math.h>

#define KEY_MODEL  "tokenizer.ggml.model"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES  "tokenizer.ggml.token_type"

static bool str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* Reads an optional token id. -1 (stored signed, or as 0xffffffff) means
 * "none", as the llama2.c converter writes it; anything else must name a
 * token. Leaves *id alone when the key is absent. */
static lares_status read_id(const text_vocab *v, const char *key, int32_t *id, lares_error *err) {
    if (!gguf_has(v->file, key)) {
        return LARES_OK;
    }
    int64_t x;
    lares_status st = gguf_get_i64(v->file, key, &x, err);
    if (st != LARES_OK) {
        return st;
    }
    if (x == -1 || x == 0xffffffffll) {
        *id = -1;
        return LARES_OK;
    }
    if (x < 0 || x >= v->n) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: %s = %" PRId64 " is not a token id (the vocabulary has %" PRId32
                          " tokens)",
                          gguf_path(v->file), key, x, v->n);
    }
    *id = (int32_t)x;
    return LARES_OK;
}

static lares_status read_bool(const text_vocab *v, const char *key, bool *b, lares_error *err) {
    if (!gguf_has(v->file, key)) {
        return LARES_OK;
    }
    return gguf_get_bool(v->file, key, b, err);
}

/* ---- texts the reference engine recognises (llama-vocab.cpp, load) ---- */

static const char *const eot_texts[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "<|end_of_text|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        "<end_of_utterance>",
                                        NULL};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_texts[] = {"<|fim_prefix|>",
                                            "<fim-prefix>",
                                            "<fim_prefix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "begin\xef\xbd\x9c>",
                                            "<PRE>",
                                            "\xe2\x96\x81<PRE>",
                                            "<|code_prefix|>",
                                            "<|prefix|>",
                                            NULL};
static const char *const fim_suf_texts[] = {"<|fim_suffix|>",
                                            "<fim-suffix>",
                                            "<fim_suffix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                            "<SUF>",
                                            "\xe2\x96\x81<SUF>",
                                            "<|code_suffix|>",
                                            "<|suffix|>",
                                            NULL};
static const char *const fim_mid_texts[] = {"<|fim_middle|>",
                                            "<fim-middle>",
                                            "<fim_middle>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "end\xef\xbd\x9c>",
                                            "<MID>",
                                            "\xe2\x96\x81<MID>",
                                            "<|code_middle|>",
                                            "<|middle|>",
                                            NULL};
static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                            "<PAD>",       "[PAD]",     NULL};
static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                            "<REPO>",       "<reponame>",    NULL};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const eog_texts[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<|return|>",
                                        "<|call|>",
                                        "<|flush|>",
                                        "<|calls|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "</s>",
                                        "<|eom_id|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "[EOS]",
                                        "<|end_of_text|>",
                                        "<end_of_utterance>",
                                        "<eos>",
                                        "<turn|>",
                                        "<|tool_response>",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        NULL};
/* gpt-oss: always rendered, never control */
static const char *const harmony_texts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                            "<|constrain|>", NULL};

static bool in_list(gguf_str s, const char *const *list) {
    for (size_t i = 0; list[i] != NULL; i++) {
        if (str_eq(s, list[i])) {
            return true;
        }
    }
    return false;
}

static int32_t find_text(const text_vocab *v, const char *s) {
    return text_strmap_find(&v->map, s, strlen(s));
}

/* The first token (by id) whose text is in the list becomes *id and is made
 * a control token, when the metadata named none. */
static void detect(text_vocab *v, int32_t *id, const char *const *list) {
    if (*id >= 0) {
        return;
    }
    for (int32_t i = 0; i < v->n; i++) {
        if (in_list(v->text[i], list)) {
            *id = i;
            v->attr[i] |= TEXT_ATTR_CONTROL;
            return;
        }
    }
}

static void mark_eog(text_vocab *v, int32_t id) {
    if (id >= 0) {
        v->attr[id] |= TEXT_ATTR_EOG;
    }
}

static bool has_eog_text(const text_vocab *v, const char *s) {
    int32_t id = find_text(v, s);
    return id >= 0 && (v->attr[id] & TEXT_ATTR_EOG);
}

static lares_status special_ids(text_vocab *v, lares_error *err) {
    static const char *const keys[] = {
        "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",     "tokenizer.ggml.eom_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.mask_token_id",
    };
    int32_t *const ids[] = {&v->bos, &v->eos, &v->eot, &v->eom,
                            &v->unk, &v->sep, &v->pad, &v->mask};
    for (size_t i = 0; i < LARES_ARRAY_LEN(keys); i++) {
        lares_status st = read_id(v, keys[i], ids[i], err);
        if (st != LARES_OK) {
            return st;
        }
    }

    /* fill-in-the-middle tokens: only their EOG and control roles matter here */
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    static const char *const fim_keys[] = {
        "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
        "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
        "tokenizer.ggml.prefix_token_id",  "tokenizer.ggml.suffix_token_id",
        "tokenizer.ggml.middle_token_id",
    };
    int32_t *const fim_ids[] = {&fim_pre, &fim_suf, &fim_mid, &fim_pad, &fim_rep,
                                &fim_sep, &fim_pre, &fim_suf, &fim_mid};
    for (size_t i = 0; i < LARES_ARRAY_LEN(fim_keys); i++) {
        lares_status st = read_id(v, fim_keys[i], fim_ids[i], err);
        if (st != LARES_OK) {
            return st;
        }
    }
    detect(v, &v->eot, eot_texts);
    detect(v, &v->eom, eom_texts);
    detect(v, &fim_pre, fim_pre_texts);
    detect(v, &fim_suf, fim_suf_texts);
    detect(v, &fim_mid, fim_mid_texts);
    detect(v, &fim_pad, fim_pad_texts);
    detect(v, &fim_rep, fim_rep_texts);
    detect(v, &fim_sep, fim_sep_texts);

    /* end of generation (llama.cpp issue 9606: decided by text) */
    mark_eog(v, fim_pad);
    mark_eog(v, fim_rep);
    mark_eog(v, fim_sep);
    for (int32_t i = 0; i < v->n; i++) {
        if (in_list(v->text[i], eog_texts)) {
            v->attr[i] |= TEXT_ATTR_EOG | TEXT_ATTR_CONTROL;
        }
        if (in_list(v->text[i], harmony_texts)) {
            v->attr[i] = TEXT_ATTR_USER_DEFINED;
        }
    }
    mark_eog(v, v->eos);
    mark_eog(v, v->eot);
    mark_eog(v, v->eom);

    /* o200k_harmony and solar-open end a turn with <|return|>/<|call|> or
     * <|calls|>/<|flush|>; their <|end|> only ends a message */
    int32_t end = find_text(v, "<|end|>");
    if (end >= 0 && (v->attr[end] & TEXT_ATTR_EOG) &&
        ((has_eog_text(v, "<|return|>") && has_eog_text(v, "<|call|>")) ||
         (has_eog_text(v, "<|calls|>") && has_eog_text(v, "<|flush|>")))) {
        v->attr[end] = TEXT_ATTR_USER_DEFINED;
    }
    /* gemma4: </s> is an ordinary token there */
    int32_t s_end = find_text(v, "</s>");
    if (s_end >= 0 && has_eog_text(v, "<|tool_response>") && (v->attr[s_end] & TEXT_ATTR_EOG)) {
        v->attr[s_end] = TEXT_ATTR_NORMAL;
    }
    return LARES_OK;
}

static bool contains_ci(gguf_str s, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= s.len; i++) {
        size_t j = 0;
        while (j < n && tolower((unsigned char)s.ptr[i + j]) == needle[j]) {
            j++;
        }
        if (j == n) {
            return true;
        }
    }
    return false;
}

static void set_attr(text_vocab *v, const char *text, uint16_t bit, bool on) {
    int32_t id = find_text(v, text);
    if (id >= 0) {
        v->attr[id] = on ? (uint16_t)(v->attr[id] | bit) : (uint16_t)(v->attr[id] & ~bit);
    }
}

static bool is_special(const text_vocab *v, int32_t id) {
    return (v->attr[id] & (TEXT_ATTR_CONTROL | TEXT_ATTR_USER_DEFINED | TEXT_ATTR_UNKNOWN)) != 0;
}

/* Per-model stripping around special tokens (llama-vocab.cpp: "Handle per
 * token attributes"; the GGUF files do not carry it). */
static void strip_attrs(text_vocab *v) {
    gguf_str name = {"", 0}, pre = {"", 0}, arch = {"", 0};
    gguf_get_str(v->file, "general.name", &name, NULL);
    gguf_get_str(v->file, "tokenizer.ggml.pre", &pre, NULL);
    gguf_get_str(v->file, "general.architecture", &arch, NULL);
    if (contains_ci(pre, "jina-v2-de") || contains_ci(pre, "jina-v2-es") ||
        contains_ci(pre, "jina-v2-code") || contains_ci(arch, "nomic-bert-moe") ||
        contains_ci(arch, "jina-bert-v3")) {
        set_attr(v, "<mask>", TEXT_ATTR_LSTRIP, true);
    } else if (contains_ci(name, "phi-3") || contains_ci(name, "phi3")) {
        for (int32_t i = 0; i < v->n; i++) {
            if (is_special(v, i)) {
                v->attr[i] |= TEXT_ATTR_RSTRIP;
            }
        }
        set_attr(v, "</s>", TEXT_ATTR_RSTRIP, true);
        set_attr(v, "<unk>", TEXT_ATTR_RSTRIP, false);
        set_attr(v, "<s>", TEXT_ATTR_RSTRIP, false);
        set_attr(v, "<|endoftext|>", TEXT_ATTR_RSTRIP, false);
    } else if (contains_ci(name, "modern-bert")) {
        set_attr(v, "[MASK]", TEXT_ATTR_LSTRIP, true);
    }
}

/* ---- special-token matching structures ---- */

static int cmp_special(const void *a, const void *b, const text_vocab *v) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (v->text[x].len != v->text[y].len) {
        return v->text[x].len > v->text[y].len ? -1 : 1;
    }
    return x < y ? -1 : 1;
}

/* insertion-free merge sort: qsort has no context argument in C11 */
static void sort_special(int32_t *a, int32_t *tmp, size_t n, const text_vocab *v) {
    if (n < 2) {
        return;
    }
    size_t h = n / 2;
    sort_special(a, tmp, h, v);
    sort_special(a + h, tmp, n - h, v);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        tmp[k++] = cmp_special(&a[j], &a[i], v) < 0 ? a[j++] : a[i++];
    }
    while (i < h) {
        tmp[k++] = a[i++];
    }
    while (j < n) {
        tmp[k++] = a[j++];
    }
    memcpy(a, tmp, n * sizeof *a);
}

static lares_status build_special(text_vocab *v, lares_error *err) {
    size_t n = 0, bytes = 0;
    for (int32_t i = 0; i < v->n; i++) {
        if (is_special(v, i) && v->text[i].len > 0) {
            n++;
            bytes += (size_t)v->text[i].len;
        }
    }
    v->trie = lares_alloc_array(bytes + 1, sizeof *v->trie);
    if (v->trie == NULL) {
        return lares_fail(err, LARES_ENOMEM, "%s: no memory for the special-token trie",
                          gguf_path(v->file));
    }
    v->trie[0] = (text_trie_node){.child = -1, .sibling = -1, .special = -1, .byte = 0};
    v->n_trie = 1;
    memset(v->trie_root, 0xff, sizeof v->trie_root);
    if (n == 0) {
        return LARES_OK;
    }
    v->special = lares_alloc_array(n, sizeof *v->special);
    int32_t *tmp = lares_alloc_array(n, sizeof *tmp);
    if (v->special == NULL || tmp == NULL) {
        lares_free(tmp);
        return lares_fail(err, LARES_ENOMEM, "%s: no memory for %zu special tokens",
                          gguf_path(v->file), n);
    }
    for (int32_t i = 0; i < v->n; i++) {
        if (is_special(v, i) && v->text[i].len > 0) {
            v->special[v->n_special++] = i;
        }
    }
    sort_special(v->special, tmp, n, v);
    lares_free(tmp);

    for (size_t k = 0; k < n; k++) {
        gguf_str t = v->text[v->special[k]];
        int32_t node = 0;
        for (uint64_t j = 0; j < t.len; j++) {
            uint8_t b = (uint8_t)t.ptr[j];
            int32_t c = v->trie[node].child;
            while (c >= 0 && v->trie[c].byte != b) {
                c = v->trie[c].sibling;
            }
            if (c < 0) {
                c = (int32_t)v->n_trie++;
                v->trie[c] = (text_trie_node){
                    .child = -1, .sibling = v->trie[node].child, .special = -1, .byte = b};
                v->trie[node].child = c;
            }
            node = c;
        }
        v->trie[node].special = (int32_t)k;
    }
    for (int32_t c = v->trie[0].child; c >= 0; c = v->trie[c].sibling) {
        v->trie_root[v->trie[c].byte] = c;
    }
    return LARES_OK;
}

static void byte_tokens(text_vocab *v) {
    for (int b = 0; b < 256; b++) {
        int32_t id = -1;
        char s[8];
        if (v->kind == TEXT_VOCAB_BPE) {
            size_t n = text_utf8_put(text_gpt2_byte_cp((uint8_t)b), s);
            id = text_strmap_find(&v->map, s, n);
        } else {
            snprintf(s, sizeof s, "<0x%02X>", b);
            id = find_text(v, s);
            if (id < 0) {
                s[0] = (char)b;
                id = text_strmap_find(&v->map, s, 1);
            }
            if (id < 0) {
                id = v->unk;
            }
        }
        v->byte_token[b] = id;
    }
}

/* Whether some token holds U+2581 right after a character other than U+2581
 * (then SPM merges can cross word starts; spm.c). */
static bool space_inside_tokens(const text_vocab *v) {
    for (int32_t id = 0; id < v->n; id++) {
        const char *t = v->text[id].ptr;
        size_t n = (size_t)v->text[id].len;
        for (size_t i = 1; i + 3 <= n; i++) {
            if (memcmp(t + i, "\xe2\x96\x81", 3) == 0 &&
                (i < 3 || memcmp(t + i - 3, "\xe2\x96\x81", 3) != 0)) {
                return true;
            }
        }
    }
    return false;
}

/* ---- arrays ---- */

static lares_status load_arrays(text_vocab *v, lares_error *err) {
    const char *path = gguf_path(v->file);
    gguf_arr toks;
    lares_status st = gguf_get_arr(v->file, KEY_TOKENS, &toks, err);
    if (st != LARES_OK) {
        return st;
    }
    if (toks.type != GGUF_VT_STRING) {
        return lares_fail(err, LARES_EFORMAT, "%s: %s holds %s, not strings", path, KEY_TOKENS,
                          gguf_vtype_name(toks.type));
    }
    if (toks.n == 0 || toks.n > INT32_MAX) {
        return lares_fail(err, LARES_EFORMAT, "%s: %s has %" PRIu64 " tokens (1 to %d allowed)",
                          path, KEY_TOKENS, toks.n, INT32_MAX);
    }
    v->n = (int32_t)toks.n;
    v->text = toks.strs;
    for (int32_t i = 0; i < v->n; i++) {
        if (v->text[i].len > TEXT_MAX_TOKEN_BYTES) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: %s[%" PRId32 "] is %" PRIu64 " bytes (at most %d allowed)", path,
                              KEY_TOKENS, i, v->text[i].len, TEXT_MAX_TOKEN_BYTES);
        }
        if (v->text[i].len > v->max_token_len) {
            v->max_token_len = (size_t)v->text[i].len;
        }
    }

    v->score = lares_calloc((size_t)v->n, sizeof *v->score);
    v->type = lares_alloc_array((size_t)v->n, sizeof *v->type);
    v->attr = lares_alloc_array((size_t)v->n, sizeof *v->attr);
    if (v->score == NULL || v->type == NULL || v->attr == NULL) {
        return lares_fail(err, LARES_ENOMEM, "%s: no memory for %" PRId32 " tokens", path, v->n);
    }

    if (gguf_has(v->file, KEY_SCORES)) {
        gguf_arr sc;
        if ((st = gguf_get_arr(v->file, KEY_SCORES, &sc, err)) != LARES_OK) {
            return st;
        }
        if (sc.type == GGUF_VT_STRING || gguf_vtype_bytes(sc.type) == 0) {
            return lares_fail(err, LARES_EFORMAT, "%s: %s holds %s, not numbers", path, KEY_SCORES,
                              gguf_vtype_name(sc.type));
        }
        if (sc.n != toks.n) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: %s has %" PRIu64 " entries but %s has %" PRIu64, path,
                              KEY_SCORES, sc.n, KEY_TOKENS, toks.n);
        }
        for (int32_t i = 0; i < v->n; i++) {
            double x = gguf_arr_f64(&sc, (uint64_t)i);
            if (isnan(x)) {
                return lares_fail(err, LARES_EFORMAT, "%s: %s[%" PRId32 "] is not a number", path,
                                  KEY_SCORES, i);
            }
            v->score[i] = (float)x;
        }
    }

    memset(v->type, TEXT_TOKEN_NORMAL, (size_t)v->n);
    if (gguf_has(v->file, KEY_TYPES)) {
        gguf_arr ty;
        if ((st = gguf_get_arr(v->file, KEY_TYPES, &ty, err)) != LARES_OK) {
            return st;
        }
        if (ty.type == GGUF_VT_STRING || ty.type == GGUF_VT_F32 || ty.type == GGUF_VT_F64 ||
            gguf_vtype_bytes(ty.type) == 0) {
            return lares_fail(err, LARES_EFORMAT, "%s: %s holds %s, not integers", path, KEY_TYPES,
                              gguf_vtype_name(ty.type));
        }
        if (ty.n != toks.n) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: %s has %" PRIu64 " entries but %s has %" PRIu64, path, KEY_TYPES,
                              ty.n, KEY_TOKENS, toks.n);
        }
        for (int32_t i = 0; i < v->n; i++) {
            int64_t t = gguf_arr_i64(&ty, (uint64_t)i);
            if (t < TEXT_TOKEN_UNDEFINED || t > TEXT_TOKEN_BYTE) {
                return lares_fail(err, LARES_EFORMAT,
                                  "%s: %s[%" PRId32 "] = %" PRId64 " is not a token type (0..6)",
                                  path, KEY_TYPES, i, t);
            }
            v->type[i] = (uint8_t)t;
        }
    }
    static const uint16_t attr_of_type[7] = {
        [TEXT_TOKEN_UNDEFINED] = 0,
        [TEXT_TOKEN_NORMAL] = TEXT_ATTR_NORMAL,
        [TEXT_TOKEN_UNKNOWN] = TEXT_ATTR_UNKNOWN,
        [TEXT_TOKEN_CONTROL] = TEXT_ATTR_CONTROL,
        [TEXT_TOKEN_USER_DEFINED] = TEXT_ATTR_USER_DEFINED,
        [TEXT_TOKEN_UNUSED] = TEXT_ATTR_UNUSED,
        [TEXT_TOKEN_BYTE] = TEXT_ATTR_BYTE,
    };
    for (int32_t i = 0; i < v->n; i++) {
        v->attr[i] = attr_of_type[v->type[i]];
    }

    int32_t a = -1, b = -1;
    st = text_strmap_build(&v->map, v->text, v->n, &a, &b);
    if (st == LARES_EFORMAT) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: %s[%" PRId32 "] repeats token %" PRId32 " ('%.*s')", path,
                          KEY_TOKENS, b, a, (int)LARES_MIN(v->text[a].len, 64), v->text[a].ptr);
    }
    if (st != LARES_OK) {
        return lares_fail(err, st, "%s: no memory for the token map", path);
    }
    return LARES_OK;
}

lares_status text_vocab_load(const gguf_file *f, text_vocab **out, lares_error *err) {
    const char *path = gguf_path(f);
    text_vocab *v = lares_calloc(1, sizeof *v);
    if (v == NULL) {
        return lares_fail(err, LARES_ENOMEM, "%s: no memory for the vocabulary", path);
    }
    v->file = f;
    v->bos = v->eos = v->unk = v->sep = v->pad = v->eot = v->eom = v->mask = -1;
    lares_status st;

    gguf_str model;
    st = gguf_get_str(f, KEY_MODEL, &model, err);
    if (st != LARES_OK) {
        goto fail;
    }
    if (str_eq(model, "llama")) {
        v->kind = TEXT_VOCAB_SPM;
    } else if (str_eq(model, "gpt2")) {
        v->kind = TEXT_VOCAB_BPE;
    } else if (str_eq(model, "bert")) {
        v->kind = TEXT_VOCAB_WPM;
    } else {
        st = lares_fail(err, LARES_EUNSUPPORTED,
                        "%s: %s '%.*s' is not supported (llama, gpt2 and bert are)", path,
                        KEY_MODEL, (int)LARES_MIN(model.len, 64), model.ptr);
        goto fail;
    }
    if ((st = load_arrays(v, err)) != LARES_OK) {
        goto fail;
    }

    /* the reference engine's defaults per tokenizer model */
    if (v->kind == TEXT_VOCAB_SPM) {
        v->bos = v->n > 1 ? 1 : -1;
        v->eos = v->n > 2 ? 2 : -1;
        v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
    } else if (v->kind == TEXT_VOCAB_WPM) {
        if ((st = text_wpm_load(v, f, err)) != LARES_OK) {
            goto fail;
        }
    } else {
        if ((st = text_bpe_load(v, f, err)) != LARES_OK) {
            goto fail;
        }
    }
    if ((st = special_ids(v, err)) != LARES_OK) {
        goto fail;
    }
    if ((st = read_bool(v, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) != LARES_OK ||
        (st = read_bool(v, "tokenizer.ggml.add_eos_token", &v->add_eos, err)) != LARES_OK ||
        (st = read_bool(v, "tokenizer.ggml.add_sep_token", &v->add_sep, err)) != LARES_OK ||
        (st = read_bool(v, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)) !=
            LARES_OK) {
        goto fail;
    }
    if (v->add_bos && v->bos < 0) {
        st = lares_fail(err, LARES_EFORMAT,
                        "%s: the vocabulary asks for a BOS token (tokenizer.ggml.add_bos_token) "
                        "but has none (tokenizer.ggml.bos_token_id)",
                        path);
        goto fail;
    }
    if (v->add_eos && v->eos < 0) {
        st = lares_fail(err, LARES_EFORMAT,
                        "%s: the vocabulary asks for an EOS token (tokenizer.ggml.add_eos_token) "
                        "but has none (tokenizer.ggml.eos_token_id)",
                        path);
        goto fail;
    }
    if (v->kind == TEXT_VOCAB_WPM && v->sep < 0) {
        st = lares_fail(err, LARES_EFORMAT,
                        "%s: a bert vocabulary needs tokenizer.ggml.seperator_token_id", path);
        goto fail;
    }
    strip_attrs(v);
    if ((st = build_special(v, err)) != LARES_OK) {
        goto fail;
    }
    byte_tokens(v);
    if (v->kind == TEXT_VOCAB_SPM) {
        v->spm_words_independent = !space_inside_tokens(v);
    }
    *out = v;
    return LARES_OK;

fail:
    text_vocab_free(v);
    return st;
}

void text_vocab_free(text_vocab *v) {
    if (v == NULL) {
        return;
    }
    lares_free(v->score);
    lares_free(v->type);
    lares_free(v->attr);
    text_strmap_free(&v->map);
    lares_free(v->special);
    lares_free(v->trie);
    text_pairmap_free(&v->merges);
    text_pretok_free(v->pre);
    lares_free(v);
}

text_vocab_kind text_vocab_kind_of(const text_vocab *v) {
    return v->kind;
}

int32_t text_vocab_n(const text_vocab *v) {
    return v->n;
}

int32_t text_vocab_bos(const text_vocab *v) {
    return v->bos;
}

int32_t text_vocab_eos(const text_vocab *v) {
    return v->eos;
}

bool text_vocab_add_bos(const text_vocab *v) {
    return v->add_bos;
}

bool text_vocab_add_eos(const text_vocab *v) {
    return v->add_eos;
}

bool text_token_is_eog(const text_vocab *v, int32_t id) {
    return id >= 0 && id < v->n && (v->attr[id] & TEXT_ATTR_EOG) != 0;
}

text_token_type text_token_type_of(const text_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n) {
        return TEXT_TOKEN_UNDEFINED;
    }
    return (text_token_type)v->type[id];
}

gguf_str text_token_text(const text_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n) {
        return (gguf_str){"", 0};
    }
    return v->text[id];
}
