/*
 * text/chat: chat templates. A conversation (role + content messages) becomes
 * the prompt text a chat model was trained on, and that text becomes tokens
 * with the template's markup parsed for special tokens but the messages'
 * contents never (a user who types "<|im_start|>" gets those characters, not
 * the control token).
 *
 * Templates are not interpreted: GGUF files carry a Jinja program in
 * tokenizer.chat_template, and lares recognises its family from marker
 * strings in the program text, then writes that family's documented format.
 * See docs/chat.md for each family's format, where it comes from, and where
 * lares differs from the Jinja program (tool calls, reasoning blocks).
 *
 * Knows nothing about models or sessions. Thread safety: pure functions.
 */
#ifndef LARES_TEXT_CHAT_H
#define LARES_TEXT_CHAT_H

#include "text/text.h"

typedef enum text_chat_family {
    TEXT_CHAT_CHATML = 0, /* <|im_start|>role\n...<|im_end|>\n (Qwen, many fine-tunes) */
    TEXT_CHAT_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    TEXT_CHAT_LLAMA2,     /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> */
    TEXT_CHAT_MISTRAL,    /* <s>[INST] ... [/INST]...</s>: no system block */
    TEXT_CHAT_MISTRAL_V7, /* <s>[SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]...</s> */
    TEXT_CHAT_GEMMA,      /* <bos><start_of_turn>user\n...<end_of_turn>\n */
    TEXT_CHAT_PHI3,       /* <s><|user|>\n...<|end|>\n<|assistant|>\n */
    TEXT_CHAT_ZEPHYR,     /* <|user|>\n...</s>\n<|assistant|>\n */
    TEXT_CHAT_PLAIN,      /* role: content\n, for models that have no template */
    TEXT_CHAT_COUNT
} text_chat_family;

/* The family's name as --template takes it ("chatml", "llama3", ...). */
const char *text_chat_family_name(text_chat_family f);
/* The names, comma-separated, for messages ("chatml, llama3, ..."). */
const char *text_chat_family_list(void);
/* By name (also a few aliases: "qwen" = chatml, "llama-2", "gemma2", ...).
 * An unknown name is LARES_EUNSUPPORTED naming it and listing the known. */
lares_status text_chat_family_from_name(const char *name, text_chat_family *out, lares_error *err);
/* From the text of a Jinja template. One that matches no family is
 * LARES_EUNSUPPORTED naming its first 60 characters. */
lares_status text_chat_family_detect(const char *tmpl, size_t len, text_chat_family *out,
                                     lares_error *err);

/* The special token texts a template writes. bos is written only when
 * write_bos: a tokenizer that adds BOS itself must not get a second one from
 * the text (docs/chat.md, "BOS"). Views are borrowed for the call. */
typedef struct text_chat_specials {
    gguf_str bos; /* empty: the vocabulary has none */
    gguf_str eos;
    bool write_bos;
} text_chat_specials;

/* A rendered conversation: the text, and where the messages' contents lie in
 * it (everything else is template markup). */
typedef struct text_chat_text {
    char *text; /* owned (lares_alloc), NUL-terminated */
    size_t len;
    size_t *content_off; /* owned: n_content (offset, length) pairs, in order */
    size_t *content_len;
    size_t n_content;
    size_t cap_content;
    size_t cap_text;
} text_chat_text;

/* Renders msgs (roles "system", "user", "assistant") with family f. Bad
 * roles, NULL contents or a system message where the family takes none are
 * LARES_EINVAL naming the message index. On failure *out is empty. */
lares_status text_chat_render(text_chat_family f, const text_chat_specials *sp,
                              const lares_chat_msg *msgs, size_t n_msgs, bool add_generation_prompt,
                              text_chat_text *out, lares_error *err);
void text_chat_text_free(text_chat_text *t); /* leaves *t empty; accepts an empty one */

/* Tokenizes a rendered conversation: markup with special tokens parsed,
 * contents as plain text, BOS added when the vocabulary asks for it (never
 * EOS). Where no content holds special-token text the result equals
 * text_tokenize(text, add_special = BOS only, parse_special = true). *out
 * is allocated with lares_alloc (caller frees). */
lares_status text_chat_tokenize(const text_vocab *v, const text_chat_text *t, int32_t **out,
                                size_t *n_out, lares_error *err);

#endif /* LARES_TEXT_CHAT_H */
