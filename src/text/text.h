/*
 * text: from text to token ids and back, and from logits to the next token.
 *
 * Owns: the vocabulary (token strings stay in the GGUF mapping; scores, types
 * and lookup tables are owned), the tokenizers (tokenizer.ggml.model =
 * "llama": SentencePiece-style BPE by scores with byte fallback; "gpt2":
 * byte-level BPE by merge rank after a regex pre-tokenizer chosen by
 * tokenizer.ggml.pre; "bert": WordPiece), the detokenizer and its UTF-8 stream
 * assembler, and the samplers. Token ids match the reference engine
 * (llama.cpp) on its tokenizer test vectors.
 *
 * Knows nothing about weights or how logits were computed.
 *
 * Lifetimes: a text_vocab borrows its gguf_file, which must outlive it.
 * Thread safety: a vocabulary is read-only after loading and may be shared;
 * samplers and streams belong to one session.
 */
#ifndef LARES_TEXT_H
#define LARES_TEXT_H

#include "core/core.h"
#include "gguf/gguf.h"

/* tokenizer.ggml.token_type values (file format) */
typedef enum text_token_type {
    TEXT_TOKEN_UNDEFINED = 0,
    TEXT_TOKEN_NORMAL = 1,
    TEXT_TOKEN_UNKNOWN = 2,
    TEXT_TOKEN_CONTROL = 3,
    TEXT_TOKEN_USER_DEFINED = 4,
    TEXT_TOKEN_UNUSED = 5,
    TEXT_TOKEN_BYTE = 6,
} text_token_type;

typedef enum text_vocab_kind {
    TEXT_VOCAB_SPM = 1, /* "llama": SentencePiece-style BPE by scores, byte fallback */
    TEXT_VOCAB_BPE = 2, /* "gpt2": byte-level BPE by merge rank, regex pre-tokenizer */
    TEXT_VOCAB_WPM = 3, /* "bert": WordPiece, longest match first */
} text_vocab_kind;

typedef struct text_vocab text_vocab;

/* Loads the vocabulary described by tokenizer.ggml.* keys. Unknown tokenizer
 * models and unknown tokenizer.ggml.pre values get LARES_EUNSUPPORTED naming
 * them; a "gpt2" vocabulary without tokenizer.ggml.pre uses the "default"
 * pre-tokenizer and logs a warning (as the reference engine does). Arrays of
 * unequal length, token types outside 0..6, repeated token texts and special
 * ids outside the vocabulary get LARES_EFORMAT naming the key (an id of -1 or
 * 0xffffffff means "none"). Absent keys take the reference engine's defaults:
 * "llama": BOS 1, EOS 2, unknown 0, add_bos true, add_space_prefix true;
 * "bert": [CLS] 101 as BOS, [UNK] 100, [SEP] 102; "gpt2": none. */
lares_status text_vocab_load(const gguf_file *f, text_vocab **out, lares_error *err);
void text_vocab_free(text_vocab *v);

text_vocab_kind text_vocab_kind_of(const text_vocab *v);
int32_t text_vocab_n(const text_vocab *v);
int32_t text_vocab_bos(const text_vocab *v); /* -1 when the vocabulary has none */
int32_t text_vocab_eos(const text_vocab *v);
bool text_vocab_add_bos(const text_vocab *v);
bool text_vocab_add_eos(const text_vocab *v);
/* End of generation: EOS, EOT and other tokens that end a turn. */
bool text_token_is_eog(const text_vocab *v, int32_t id);
/* As stored in tokenizer.ggml.token_type (NORMAL when the key is absent;
 * UNDEFINED for an id out of range). */
text_token_type text_token_type_of(const text_vocab *v, int32_t id);
/* The token's string as stored in the vocabulary (e.g. "\xe2\x96\x81the"). */
gguf_str text_token_text(const text_vocab *v, int32_t id);

/* Tokenizes len bytes of text. add_special: add BOS/EOS as the vocabulary
 * asks ("bert": [CLS] ... [SEP]); empty text then gives [BOS] alone, as
 * SentencePiece does. parse_special: control tokens written in the text
 * ("<s>") become their ids; user-defined tokens are always matched, as
 * SentencePiece does. Invalid UTF-8 is never an error: "llama" vocabularies
 * keep every byte (byte-fallback tokens, so pieces give the bytes back);
 * "gpt2" and "bert" replace each ill-formed subpart with U+FFFD first (as the
 * reference engine does). *out is allocated with lares_alloc (caller frees);
 * an empty result gives *out == NULL and *n_out == 0. Errors: LARES_EINVAL
 * (NULL arguments), LARES_ERANGE (more than 1 GiB at once), LARES_ENOMEM,
 * LARES_EFORMAT (a vocabulary without a token for some byte). */
lares_status text_tokenize(const text_vocab *v, const char *text, size_t len, bool add_special,
                           bool parse_special, int32_t **out, size_t *n_out, lares_error *err);

/* The bytes a token stands for: "\xe2\x96\x81" becomes a space, byte tokens
 * <0xAB> become that byte, byte-level BPE characters become their bytes;
 * control and unknown tokens give nothing unless `special` (then their text);
 * user-defined tokens give their text.
 * Returns the length (may exceed cap: then only cap bytes were written), or
 * -1 for an id out of range. */
int32_t text_token_piece(const text_vocab *v, int32_t id, bool special, char *buf, size_t cap);

/* Assembles token pieces into whole UTF-8 characters: bytes of a character
 * that is not finished are held back until a later piece completes it. Each
 * ill-formed subpart (Unicode 15, 3.9: "maximal subpart") is replaced by
 * U+FFFD, so output is always valid UTF-8 and does not depend on how the
 * bytes were cut into pieces. */
typedef struct text_stream {
    unsigned char held[4];
    int n_held;
} text_stream;

/* Output room that is always enough for a piece of n bytes: every byte (and
 * up to 3 held ones) may become a 3-byte U+FFFD. */
#define TEXT_STREAM_OUT_MAX(n) (3 * (size_t)(n) + 9)

void text_stream_init(text_stream *s);
/* Appends the complete characters of (held bytes + piece) to out and returns
 * how many bytes were written. cap should be TEXT_STREAM_OUT_MAX(n); output
 * that does not fit in cap is dropped (never written past cap). Pieces of
 * valid text need no more than n + 3 bytes. */
size_t text_stream_push(text_stream *s, const char *piece, size_t n, char *out, size_t cap);
/* Emits what is still held (as one U+FFFD, since it never completed); needs
 * cap >= 3. */
size_t text_stream_flush(text_stream *s, char *out, size_t cap);

/* ---- samplers ---- */

typedef struct text_sampler text_sampler;

lares_status text_sampler_create(const lares_sampler_opts *opts, int32_t n_vocab,
                                 text_sampler **out, lares_error *err);
void text_sampler_free(text_sampler *s);
void text_sampler_reset(text_sampler *s); /* forgets history, re-seeds */
/* Picks the next token from logits (n_vocab floats; modified in place) given
 * the tokens seen so far (for penalties). */
int32_t text_sampler_sample(text_sampler *s, float *logits, const int32_t *history, size_t n_hist);
/* The distribution text_sampler_sample draws from, as n_vocab probabilities
 * in probs (0 outside the tokens kept): penalties, top-k, top-p, min-p and
 * temperature applied to logits (modified in place); greedy: one-hot at the
 * argmax. Consumes no randomness. */
void text_sampler_probs(text_sampler *s, float *logits, const int32_t *history, size_t n_hist,
                        float *probs);
/* The sampler's next uniform number in [0, 1) (its seeded generator). */
double text_sampler_unit(text_sampler *s);
/* A draw from probs (n_vocab, as text_sampler_probs gives) with the
 * sampler's generator. */
int32_t text_sampler_draw(text_sampler *s, const float *probs);

/* ---- speculative sampling (spec_accept.c) ---- */

/* The token u (uniform in [0, 1)) picks from probs[0, n) (weights that need
 * not sum to 1; the last token with weight on a rounding shortfall). */
int32_t text_draw(const float *probs, int32_t n, double u);
/* The acceptance rule of speculative sampling (Leviathan et al. 2023, Chen et
 * al. 2023): draft x was drawn from q (the draft model's distribution); the
 * target's is p (both n tokens, after the same sampler transforms). x is kept
 * when u < p(x) / q(x); else the token is drawn with v from the residual
 * normalize(max(0, p - q)). u and v are uniform in [0, 1). The token returned
 * is distributed as p whatever q is; *accepted says whether it is x. */
int32_t text_spec_accept(const float *p, const float *q, int32_t n, int32_t x, double u, double v,
                         bool *accepted);

#endif /* LARES_TEXT_H */
