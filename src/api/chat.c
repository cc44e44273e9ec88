/*
 * The public chat calls: the model's template family (from
 * tokenizer.chat_template or by name), a conversation as text or as tokens,
 * and the reuse of a session's context by a prompt that starts the same way.
 */
#include "text/chat.h"

#include "api/api.h"

static const char *const TEMPLATE_KEY = "tokenizer.chat_template";

static lares_status resolve(const lares_model *lm, const char *name, text_chat_family *f,
                            lares_error *err) {
    if (name != NULL) {
        return text_chat_family_from_name(name, f, err);
    }
    gguf_str t;
    if (!gguf_has(lm->file, TEMPLATE_KEY)) {
        return lares_fail(err, LARES_ENOTFOUND,
                          "%s has no chat template (%s); choose a format by name (%s)", lm->path,
                          TEMPLATE_KEY, text_chat_family_list());
    }
    lares_status st = gguf_get_str(lm->file, TEMPLATE_KEY, &t, err);
    if (st == LARES_OK) {
        st = text_chat_family_detect(t.ptr, (size_t)t.len, f, err);
    }
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s: ", lm->path);
    }
    return st;
}

lares_status lares_chat_template(const lares_model *lm, const char *template_name,
                                 const char **family, lares_error *err) {
    text_chat_family f;
    lares_status st = resolve(lm, template_name, &f, err);
    if (st == LARES_OK) {
        *family = text_chat_family_name(f);
    }
    return st;
}

/* BOS: the text carries the template's BOS only when the tokenizer will not
 * add one itself, so that tokenizing with the vocabulary's add_bos gives
 * exactly one (docs/chat.md). */
static lares_status render(const lares_model *lm, const char *template_name,
                           const lares_chat_msg *msgs, size_t n_msgs, bool gen, text_chat_text *out,
                           lares_error *err) {
    text_chat_family f;
    lares_status st = resolve(lm, template_name, &f, err);
    if (st != LARES_OK) {
        return st;
    }
    const text_vocab *v = lm->vocab;
    text_chat_specials sp = {.write_bos = !text_vocab_add_bos(v)};
    if (text_vocab_bos(v) >= 0) {
        sp.bos = text_token_text(v, text_vocab_bos(v));
    }
    if (text_vocab_eos(v) >= 0) {
        sp.eos = text_token_text(v, text_vocab_eos(v));
    }
    return text_chat_render(f, &sp, msgs, n_msgs, gen, out, err);
}

lares_status lares_chat_format(const lares_model *lm, const char *template_name,
                               const lares_chat_msg *msgs, size_t n_msgs,
                               bool add_generation_prompt, char **out, lares_error *err) {
    text_chat_text t;
    lares_status st = render(lm, template_name, msgs, n_msgs, add_generation_prompt, &t, err);
    if (st != LARES_OK) {
        return st;
    }
    *out = t.text; /* handed over; the content spans are not needed */
    t.text = NULL;
    text_chat_text_free(&t);
    return LARES_OK;
}

lares_status lares_chat_tokenize(const lares_model *lm, const char *template_name,
                                 const lares_chat_msg *msgs, size_t n_msgs,
                                 bool add_generation_prompt, int32_t **out, size_t *n_out,
                                 lares_error *err) {
    text_chat_text t;
    lares_status st = render(lm, template_name, msgs, n_msgs, add_generation_prompt, &t, err);
    if (st != LARES_OK) {
        return st;
    }
    st = text_chat_tokenize(lm->vocab, &t, out, n_out, err);
    text_chat_text_free(&t);
    return st;
}

size_t lares_session_reuse_prefix(lares_session *s, const int32_t *tokens, size_t n) {
    size_t keep = 0;
    const size_t past = (size_t)s->n_past;
    while (keep < past && keep + 1 < n && s->history[keep] == tokens[keep]) {
        keep++;
    }
    lares_session_truncate(s, (int32_t)keep);
    return keep;
}
