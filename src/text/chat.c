/*
 * Chat templates by family. Each family writes the format its model card and
 * its Jinja template document (sources in docs/chat.md); the marker strings
 * that identify a family in a template's text are the special tokens only
 * that family's format uses.
 */
#include "text/chat.h"

#include "text/text_impl.h"

static const struct {
    const char *name;
    text_chat_family f;
} names[] = {
    {"chatml", TEXT_CHAT_CHATML},
    {"qwen", TEXT_CHAT_CHATML},
    {"qwen2", TEXT_CHAT_CHATML},
    {"qwen3", TEXT_CHAT_CHATML},
    {"llama3", TEXT_CHAT_LLAMA3},
    {"llama-3", TEXT_CHAT_LLAMA3},
    {"llama2", TEXT_CHAT_LLAMA2},
    {"llama-2", TEXT_CHAT_LLAMA2},
    {"mistral", TEXT_CHAT_MISTRAL},
    {"mistral-v1", TEXT_CHAT_MISTRAL},
    {"mistral-v7", TEXT_CHAT_MISTRAL_V7},
    {"gemma", TEXT_CHAT_GEMMA},
    {"gemma2", TEXT_CHAT_GEMMA},
    {"gemma3", TEXT_CHAT_GEMMA},
    {"phi3", TEXT_CHAT_PHI3},
    {"phi-3", TEXT_CHAT_PHI3},
    {"zephyr", TEXT_CHAT_ZEPHYR},
    {"plain", TEXT_CHAT_PLAIN},
};

static const char *const family_names[TEXT_CHAT_COUNT] = {
    [TEXT_CHAT_CHATML] = "chatml",
    [TEXT_CHAT_LLAMA3] = "llama3",
    [TEXT_CHAT_LLAMA2] = "llama2",
    [TEXT_CHAT_MISTRAL] = "mistral",
    [TEXT_CHAT_MISTRAL_V7] = "mistral-v7",
    [TEXT_CHAT_GEMMA] = "gemma",
    [TEXT_CHAT_PHI3] = "phi3",
    [TEXT_CHAT_ZEPHYR] = "zephyr",
    [TEXT_CHAT_PLAIN] = "plain",
};

const char *text_chat_family_name(text_chat_family f) {
    return (unsigned)f < TEXT_CHAT_COUNT ? family_names[f] : "?";
}

const char *text_chat_family_list(void) {
    return "chatml, llama3, llama2, mistral, mistral-v7, gemma, phi3, zephyr, plain";
}

lares_status text_chat_family_from_name(const char *name, text_chat_family *out, lares_error *err) {
    for (size_t i = 0; i < LARES_ARRAY_LEN(names); i++) {
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].f;
            return LARES_OK;
        }
    }
    return lares_fail(err, LARES_EUNSUPPORTED, "unknown chat template '%.64s' (known: %s)", name,
                      text_chat_family_list());
}

static bool has(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++) {
        if (s[i] == needle[0] && memcmp(s + i, needle, k) == 0) {
            return true;
        }
    }
    return false;
}

/* The first 60 characters of a template for an error message, on one line. */
static void excerpt(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && i < 60 && o + 3 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = c < 0x20 ? ' ' : (char)c;
        }
    }
    out[o] = '\0';
}

lares_status text_chat_family_detect(const char *t, size_t n, text_chat_family *out,
                                     lares_error *err) {
    /* The order matters only where markers are shared: [INST] belongs to
     * three families and <|user|> to two. */
    if (has(t, n, "<|im_start|>")) {
        *out = TEXT_CHAT_CHATML;
    } else if (has(t, n, "<|start_header_id|>")) {
        *out = TEXT_CHAT_LLAMA3;
    } else if (has(t, n, "<start_of_turn>")) {
        *out = TEXT_CHAT_GEMMA;
    } else if (has(t, n, "[SYSTEM_PROMPT]")) {
        *out = TEXT_CHAT_MISTRAL_V7;
    } else if (has(t, n, "[INST]") && has(t, n, "<<SYS>>")) {
        *out = TEXT_CHAT_LLAMA2;
    } else if (has(t, n, "[INST]")) {
        *out = TEXT_CHAT_MISTRAL;
    } else if (has(t, n, "<|user|>") && has(t, n, "<|end|>")) {
        *out = TEXT_CHAT_PHI3;
    } else if (has(t, n, "<|user|>")) {
        *out = TEXT_CHAT_ZEPHYR;
    } else {
        char ex[200];
        excerpt(t, n, ex, sizeof ex);
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "chat template not recognised: '%s%s' (choose one of %s by name)", ex,
                          n > 60 ? "..." : "", text_chat_family_list());
    }
    return LARES_OK;
}

/* ---- rendering ---- */

void text_chat_text_free(text_chat_text *t) {
    if (t == NULL) {
        return;
    }
    lares_free(t->text);
    lares_free(t->content_off);
    lares_free(t->content_len);
    memset(t, 0, sizeof *t);
}

/* The writer keeps the first failure and ignores later appends. */
typedef struct writer {
    text_chat_text *t;
    bool oom;
} writer;

static void put(writer *w, const char *s, size_t n) {
    text_chat_text *t = w->t;
    size_t need;
    if (w->oom || !lares_add_size(t->len, n + 1, &need) ||
        !lares_grow((void **)&t->text, &t->cap_text, need, 1)) {
        w->oom = true;
        return;
    }
    memcpy(t->text + t->len, s, n);
    t->len += n;
    t->text[t->len] = '\0';
}

static void markup(writer *w, const char *s) {
    put(w, s, strlen(s));
}

static void markup_str(writer *w, gguf_str s) {
    put(w, s.ptr, (size_t)s.len);
}

typedef enum trim_kind { TRIM_NONE, TRIM_BOTH, TRIM_RIGHT } trim_kind;

/* Python's str.strip() and Jinja's trim take Unicode whitespace; the ASCII
 * set is what chat text holds in practice. */
static bool space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void content(writer *w, const char *s, trim_kind trim) {
    size_t a = 0, b = strlen(s);
    if (trim == TRIM_BOTH) {
        while (a < b && space(s[a])) {
            a++;
        }
    }
    if (trim != TRIM_NONE) {
        while (b > a && space(s[b - 1])) {
            b--;
        }
    }
    text_chat_text *t = w->t;
    if (w->oom || b == a) {
        return;
    }
    size_t k = t->n_content;
    size_t cap_off = t->cap_content, cap_len = t->cap_content;
    if (!lares_grow((void **)&t->content_off, &cap_off, k + 1, sizeof *t->content_off) ||
        !lares_grow((void **)&t->content_len, &cap_len, k + 1, sizeof *t->content_len)) {
        w->oom = true;
        return;
    }
    t->cap_content = LARES_MIN(cap_off, cap_len);
    t->content_off[k] = t->len;
    t->content_len[k] = b - a;
    t->n_content = k + 1;
    put(w, s + a, b - a);
}

typedef enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } role;

static lares_status roles_of(const lares_chat_msg *msgs, size_t n, role *out, lares_error *err) {
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (r == NULL) {
            return lares_fail(err, LARES_EINVAL, "chat message %zu has no role", i);
        }
        if (strcmp(r, "system") == 0) {
            out[i] = ROLE_SYSTEM;
        } else if (strcmp(r, "user") == 0) {
            out[i] = ROLE_USER;
        } else if (strcmp(r, "assistant") == 0) {
            out[i] = ROLE_ASSISTANT;
        } else {
            return lares_fail(err, LARES_EINVAL,
                              "chat message %zu has role '%.40s' (system, user or assistant)", i,
                              r);
        }
        if (msgs[i].content == NULL) {
            return lares_fail(err, LARES_EINVAL, "chat message %zu (%s) has no content", i, r);
        }
    }
    return LARES_OK;
}

/* Families that fold the system prompt into the first user turn take it only
 * as the first message. */
static lares_status system_first_only(text_chat_family f, const role *roles, size_t n,
                                      lares_error *err) {
    for (size_t i = 1; i < n; i++) {
        if (roles[i] == ROLE_SYSTEM) {
            return lares_fail(err, LARES_EINVAL,
                              "chat message %zu is a system message; the %s template takes one "
                              "only as the first message",
                              i, text_chat_family_name(f));
        }
    }
    return LARES_OK;
}

static void bos(writer *w, const text_chat_specials *sp) {
    if (sp->write_bos) {
        markup_str(w, sp->bos);
    }
}

/* <|im_start|>role\ncontent<|im_end|>\n (Qwen2.5, Qwen3 chat templates) */
static void render_chatml(writer *w, const lares_chat_msg *m, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        markup(w, "<|im_start|>");
        markup(w, m[i].role);
        markup(w, "\n");
        content(w, m[i].content, TRIM_NONE);
        markup(w, "<|im_end|>\n");
    }
    if (gen) {
        markup(w, "<|im_start|>assistant\n");
    }
}

/* <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\ncontent|trim<|eot_id|>
 * (Meta Llama 3 model card, "Prompt format") */
static void render_llama3(writer *w, const text_chat_specials *sp, const lares_chat_msg *m,
                          size_t n, bool gen) {
    bos(w, sp);
    for (size_t i = 0; i < n; i++) {
        markup(w, "<|start_header_id|>");
        markup(w, m[i].role);
        markup(w, "<|end_header_id|>\n\n");
        content(w, m[i].content, TRIM_BOTH);
        markup(w, "<|eot_id|>");
    }
    if (gen) {
        markup(w, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    }
}

/* Llama-2-chat: <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s>
 * with a BOS before every [INST] (the Llama 2 paper's dialog format, as the
 * Hugging Face chat template writes it: contents strip()ped). */
static void render_llama2(writer *w, const text_chat_specials *sp, const lares_chat_msg *m,
                          const role *r, size_t n) {
    const char *sys = n > 0 && r[0] == ROLE_SYSTEM ? m[0].content : NULL;
    bool first_bos = true;
    for (size_t i = sys ? 1 : 0; i < n; i++) {
        if (r[i] == ROLE_USER) {
            if (first_bos) {
                bos(w, sp);
                first_bos = false;
            } else {
                markup_str(w, sp->bos);
            }
            markup(w, "[INST] ");
            if (sys != NULL) {
                markup(w, "<<SYS>>\n");
                content(w, sys, TRIM_NONE);
                markup(w, "\n<</SYS>>\n\n");
                content(w, m[i].content, TRIM_RIGHT);
                sys = NULL;
            } else {
                content(w, m[i].content, TRIM_BOTH);
            }
            markup(w, " [/INST]");
        } else {
            markup(w, " ");
            content(w, m[i].content, TRIM_BOTH);
            markup(w, " ");
            markup_str(w, sp->eos);
        }
    }
    if (sys != NULL) { /* a system prompt and no user turn yet */
        bos(w, sp);
        markup(w, "[INST] <<SYS>>\n");
        content(w, sys, TRIM_NONE);
        markup(w, "\n<</SYS>>\n\n [/INST]");
    }
}

/* Mistral-7B-Instruct v0.1: <s>[INST] user [/INST]answer</s>[INST] ...; the
 * format has no system role, so a system prompt opens the first user turn,
 * followed by a blank line (as Mistral's later templates do). */
static void render_mistral(writer *w, const text_chat_specials *sp, const lares_chat_msg *m,
                           const role *r, size_t n) {
    const char *sys = n > 0 && r[0] == ROLE_SYSTEM ? m[0].content : NULL;
    bos(w, sp);
    for (size_t i = sys ? 1 : 0; i < n; i++) {
        if (r[i] == ROLE_USER) {
            markup(w, "[INST] ");
            if (sys != NULL) {
                content(w, sys, TRIM_NONE);
                markup(w, "\n\n");
                sys = NULL;
            }
            content(w, m[i].content, TRIM_NONE);
            markup(w, " [/INST]");
        } else {
            content(w, m[i].content, TRIM_NONE);
            markup_str(w, sp->eos);
        }
    }
    if (sys != NULL) {
        markup(w, "[INST] ");
        content(w, sys, TRIM_NONE);
        markup(w, " [/INST]");
    }
}

/* Mistral Small 3 (tokenizer v7):
 * <s>[SYSTEM_PROMPT]system[/SYSTEM_PROMPT][INST]user[/INST]answer</s> */
static void render_mistral_v7(writer *w, const text_chat_specials *sp, const lares_chat_msg *m,
                              const role *r, size_t n) {
    bos(w, sp);
    for (size_t i = 0; i < n; i++) {
        if (r[i] == ROLE_SYSTEM) {
            markup(w, "[SYSTEM_PROMPT]");
            content(w, m[i].content, TRIM_NONE);
            markup(w, "[/SYSTEM_PROMPT]");
        } else if (r[i] == ROLE_USER) {
            markup(w, "[INST]");
            content(w, m[i].content, TRIM_NONE);
            markup(w, "[/INST]");
        } else {
            content(w, m[i].content, TRIM_NONE);
            markup_str(w, sp->eos);
        }
    }
}

/* Gemma 2/3: <bos><start_of_turn>user\ncontent|trim<end_of_turn>\n, the
 * assistant is "model"; Gemma 3 puts a system prompt plus a blank line at the
 * start of the first user turn. */
static void render_gemma(writer *w, const text_chat_specials *sp, const lares_chat_msg *m,
                         const role *r, size_t n, bool gen) {
    const char *sys = n > 0 && r[0] == ROLE_SYSTEM ? m[0].content : NULL;
    bos(w, sp);
    for (size_t i = sys ? 1 : 0; i < n; i++) {
        markup(w, r[i] == ROLE_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (sys != NULL && r[i] == ROLE_USER) {
            content(w, sys, TRIM_NONE);
            markup(w, "\n\n");
            sys = NULL;
        }
        content(w, m[i].content, TRIM_BOTH);
        markup(w, "<end_of_turn>\n");
    }
    if (sys != NULL) {
        markup(w, "<start_of_turn>user\n");
        content(w, sys, TRIM_NONE);
        markup(w, "\n\n<end_of_turn>\n");
    }
    if (gen) {
        markup(w, "<start_of_turn>model\n");
    }
}

/* Phi-3: <s><|system|>\n...<|end|>\n<|user|>\n...<|end|>\n<|assistant|>\n...<|end|>\n
 * (Phi-3 model card, "Chat Format") */
static void render_phi3(writer *w, const text_chat_specials *sp, const lares_chat_msg *m,
                        const role *r, size_t n, bool gen) {
    static const char *const open[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};
    bos(w, sp);
    for (size_t i = 0; i < n; i++) {
        markup(w, open[r[i]]);
        content(w, m[i].content, TRIM_NONE);
        markup(w, "<|end|>\n");
    }
    if (gen) {
        markup(w, "<|assistant|>\n");
    }
}

/* Zephyr: <|user|>\ncontent</s>\n<|assistant|>\n (HuggingFaceH4/zephyr-7b-beta) */
static void render_zephyr(writer *w, const text_chat_specials *sp, const lares_chat_msg *m,
                          const role *r, size_t n, bool gen) {
    static const char *const open[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};
    for (size_t i = 0; i < n; i++) {
        markup(w, open[r[i]]);
        content(w, m[i].content, TRIM_NONE);
        markup_str(w, sp->eos);
        markup(w, "\n");
    }
    if (gen) {
        markup(w, "<|assistant|>\n");
    }
}

/* lares's own fallback for models without a template: "role: content\n",
 * the generation prompt "assistant:". A content that starts with whitespace
 * gets no separating space: an answer generated after "assistant:" starts
 * with its own, and must render back to the text the model saw. */
static void render_plain(writer *w, const lares_chat_msg *m, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        markup(w, m[i].role);
        markup(w, space(m[i].content[0]) ? ":" : ": ");
        content(w, m[i].content, TRIM_NONE);
        markup(w, "\n");
    }
    if (gen) {
        markup(w, "assistant:");
    }
}

lares_status text_chat_render(text_chat_family f, const text_chat_specials *sp,
                              const lares_chat_msg *msgs, size_t n, bool gen, text_chat_text *out,
                              lares_error *err) {
    memset(out, 0, sizeof *out);
    if ((unsigned)f >= TEXT_CHAT_COUNT) {
        return lares_fail(err, LARES_EINVAL, "unknown chat template family %d", (int)f);
    }
    if (n == 0 || msgs == NULL) {
        return lares_fail(err, LARES_EINVAL, "the conversation has no messages");
    }
    role *roles = lares_alloc_array(n, sizeof *roles);
    if (roles == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory for %zu chat messages", n);
    }
    lares_status st = roles_of(msgs, n, roles, err);
    if (st == LARES_OK && (f == TEXT_CHAT_LLAMA2 || f == TEXT_CHAT_MISTRAL ||
                           f == TEXT_CHAT_MISTRAL_V7 || f == TEXT_CHAT_GEMMA)) {
        st = system_first_only(f, roles, n, err);
    }
    if (st != LARES_OK) {
        lares_free(roles);
        return st;
    }
    writer w = {.t = out};
    put(&w, "", 0); /* an empty conversation text is still a string */
    switch (f) {
    case TEXT_CHAT_CHATML:
        render_chatml(&w, msgs, n, gen);
        break;
    case TEXT_CHAT_LLAMA3:
        render_llama3(&w, sp, msgs, n, gen);
        break;
    case TEXT_CHAT_LLAMA2:
        render_llama2(&w, sp, msgs, roles, n); /* an open [INST] is the generation prompt */
        break;
    case TEXT_CHAT_MISTRAL:
        render_mistral(&w, sp, msgs, roles, n);
        break;
    case TEXT_CHAT_MISTRAL_V7:
        render_mistral_v7(&w, sp, msgs, roles, n);
        break;
    case TEXT_CHAT_GEMMA:
        render_gemma(&w, sp, msgs, roles, n, gen);
        break;
    case TEXT_CHAT_PHI3:
        render_phi3(&w, sp, msgs, roles, n, gen);
        break;
    case TEXT_CHAT_ZEPHYR:
        render_zephyr(&w, sp, msgs, roles, n, gen);
        break;
    case TEXT_CHAT_PLAIN:
    case TEXT_CHAT_COUNT:
        render_plain(&w, msgs, n, gen);
        break;
    }
    lares_free(roles);
    if (w.oom) {
        text_chat_text_free(out);
        return lares_fail(err, LARES_ENOMEM, "out of memory rendering %zu chat messages", n);
    }
    return LARES_OK;
}

/* ---- tokenizing: specials in the markup only ---- */

typedef struct frag_list {
    text_frag *a; /* owned */
    size_t n, cap;
    bool rstrip; /* the last special eats the whitespace after it */
} frag_list;

static bool push_frag(const text_vocab *v, const char *text, frag_list *l, text_frag f) {
    if (f.id >= 0) {
        /* a special that eats whitespace before it, across a content boundary */
        if ((v->attr[f.id] & TEXT_ATTR_LSTRIP) && l->n > 0 && l->a[l->n - 1].id < 0) {
            text_frag *p = &l->a[l->n - 1];
            while (p->len > 0 && space(text[p->off + p->len - 1])) {
                p->len--;
            }
            if (p->len == 0) {
                l->n--;
            }
        }
        l->rstrip = (v->attr[f.id] & TEXT_ATTR_RSTRIP) != 0;
    } else {
        if (l->rstrip) {
            while (f.len > 0 && space(text[f.off])) {
                f.off++;
                f.len--;
            }
        }
        if (f.len == 0) {
            return true;
        }
        l->rstrip = false;
        text_frag *p = l->n > 0 ? &l->a[l->n - 1] : NULL;
        if (p != NULL && p->id < 0 && p->off + p->len == f.off) {
            p->len += f.len; /* markup and content text run together */
            return true;
        }
    }
    if (!lares_grow((void **)&l->a, &l->cap, l->n + 1, sizeof *l->a)) {
        return false;
    }
    l->a[l->n++] = f;
    return true;
}

/* Appends text[off, off + len) cut at special tokens: markup at every one,
 * contents only at user-defined tokens, as text_tokenize does without
 * parse_special. */
static lares_status push_part(const text_vocab *v, const char *text, size_t off, size_t len,
                              bool is_markup, frag_list *l, text_work *w, lares_error *err) {
    if (len == 0) {
        return LARES_OK;
    }
    lares_status st = text_partition(v, text + off, len, is_markup, w, err);
    for (size_t i = 0; st == LARES_OK && i < w->n_frags; i++) {
        text_frag f = w->frags[i];
        f.off += off;
        if (!push_frag(v, text, l, f)) {
            st = lares_fail(err, LARES_ENOMEM, "text: no memory to split a chat prompt");
        }
    }
    return st;
}

lares_status text_chat_tokenize(const text_vocab *v, const text_chat_text *t, int32_t **out,
                                size_t *n_out, lares_error *err) {
    *out = NULL;
    *n_out = 0;
    if (t->len > UINT32_MAX / 4) {
        return lares_fail(err, LARES_ERANGE, "text: a chat prompt of %zu bytes is too long",
                          t->len);
    }
    text_work w;
    memset(&w, 0, sizeof w);
    frag_list l = {0};
    lares_status st = LARES_OK;
    size_t at = 0;
    for (size_t k = 0; st == LARES_OK && k <= t->n_content; k++) {
        size_t c_off = k < t->n_content ? t->content_off[k] : t->len;
        size_t c_len = k < t->n_content ? t->content_len[k] : 0;
        st = push_part(v, t->text, at, c_off - at, true, &l, &w, err);
        if (st == LARES_OK) {
            st = push_part(v, t->text, c_off, c_len, false, &l, &w, err);
        }
        at = c_off + c_len;
    }
    if (st == LARES_OK) {
        /* the tokenizers read w.frags; BOS as the vocabulary asks, never EOS */
        lares_free(w.frags);
        w.frags = l.a;
        w.n_frags = l.n;
        w.cap_frags = l.cap;
        l.a = NULL;
        if (v->add_bos && v->bos >= 0) {
            st = text_emit(&w, v->bos, err);
        }
    }
    if (st == LARES_OK) {
        switch (v->kind) {
        case TEXT_VOCAB_SPM:
            st = text_spm_tokenize(v, t->text, false, &w, err);
            break;
        case TEXT_VOCAB_BPE:
            st = text_bpe_tokenize(v, t->text, false, &w, err);
            break;
        case TEXT_VOCAB_WPM:
            st = text_wpm_tokenize(v, t->text, false, &w, err);
            break;
        }
    }
    lares_free(l.a);
    if (st == LARES_OK && w.n_ids > 0) {
        *out = w.ids;
        *n_out = w.n_ids;
        w.ids = NULL;
    }
    text_work_free(&w);
    return st;
}
