/*
 * text internals shared by the files of the module: the vocabulary layout,
 * the token-text hash map, the merge-rank map, the bigram heap, the scratch
 * buffers of one tokenize call, and the per-algorithm entry points.
 *
 * Nothing here is visible outside src/text/.
 */
#ifndef LARES_TEXT_IMPL_H
#define LARES_TEXT_IMPL_H

#include "text/text.h"

/* Token attributes: the file's token type as bits, plus what the reference
 * engine (llama.cpp, llama-vocab.cpp) derives from token texts: EOG and
 * FIM/EOT tokens become CONTROL, phi-3 specials strip whitespace. */
enum {
    TEXT_ATTR_NORMAL = 1 << 0,
    TEXT_ATTR_UNKNOWN = 1 << 1,
    TEXT_ATTR_CONTROL = 1 << 2,
    TEXT_ATTR_USER_DEFINED = 1 << 3,
    TEXT_ATTR_UNUSED = 1 << 4,
    TEXT_ATTR_BYTE = 1 << 5,
    TEXT_ATTR_LSTRIP = 1 << 6, /* a special token eats the whitespace before it */
    TEXT_ATTR_RSTRIP = 1 << 7, /* ... and after it */
    TEXT_ATTR_EOG = 1 << 8,    /* ends generation */
};

/* Longest token text the vocabulary accepts (real vocabularies: < 1 KiB). */
#define TEXT_MAX_TOKEN_BYTES 65536

/* ---- the token-text map: string -> id, open addressing ---- */

typedef struct text_strmap {
    uint32_t *hash;      /* owned, cap: the full hash of the slot's token */
    int32_t *id;         /* owned, cap: -1 for an empty slot */
    size_t mask;         /* cap - 1 (cap is a power of two) */
    const gguf_str *key; /* borrowed: the vocabulary's token texts */
} text_strmap;

uint32_t text_hash(const char *s, size_t n);
/* Builds the map over n keys; duplicates are reported through *dup_a and *dup_b
 * (the two ids) and LARES_EFORMAT. Empty keys are left out. */
lares_status text_strmap_build(text_strmap *m, const gguf_str *keys, int32_t n, int32_t *dup_a,
                               int32_t *dup_b);
void text_strmap_free(text_strmap *m);
int32_t text_strmap_find(const text_strmap *m, const char *s, size_t n); /* -1: absent */

/* ---- the merge map: (left id, right id) -> (rank, merged id) ---- */

typedef struct text_pair_slot {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
    int32_t rank;
    int32_t result;
} text_pair_slot;

typedef struct text_pairmap {
    text_pair_slot *slot; /* owned */
    size_t mask;
    size_t n;
} text_pairmap;

lares_status text_pairmap_init(text_pairmap *m, size_t n_max);
void text_pairmap_free(text_pairmap *m);
/* false when the pair is already present (the first, lowest rank, wins). */
bool text_pairmap_put(text_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t result);
const text_pair_slot *text_pairmap_find(const text_pairmap *m, int32_t left, int32_t right);

/* ---- special tokens: the ones matched in raw text before tokenizing ---- */

typedef struct text_trie_node {
    int32_t child;   /* first child, -1: none */
    int32_t sibling; /* next sibling, -1: none */
    int32_t special; /* index into text_vocab.special ending here, -1: none */
    uint8_t byte;
} text_trie_node;

/* A piece of the input: raw text, or a special token found in it. */
typedef struct text_frag {
    int32_t id; /* -1: raw text [off, off + len) */
    size_t off;
    size_t len;
} text_frag;

/* ---- UTF-8 ---- */

/* Length of a character from its lead byte alone (for text known to be
 * valid UTF-8; continuation and invalid bytes count 1). */
size_t text_utf8_lead_len(unsigned char c);

typedef enum text_utf8_scan_kind {
    TEXT_UTF8_VALID,      /* a well-formed character of len bytes */
    TEXT_UTF8_INVALID,    /* a maximal ill-formed subpart of len bytes (Unicode 15, 3.9) */
    TEXT_UTF8_INCOMPLETE, /* all n bytes are a proper prefix of a character */
} text_utf8_scan_kind;

/* Looks at the character starting at s (n >= 1 bytes available). */
text_utf8_scan_kind text_utf8_scan(const unsigned char *s, size_t n, size_t *len, uint32_t *cp);
/* Writes cp as UTF-8 (1..4 bytes) and returns the length. */
size_t text_utf8_put(uint32_t cp, char *out);
/* Bytes needed to write text with each maximal ill-formed subpart replaced by
 * U+FFFD, and the writing itself (out has that many bytes). */
size_t text_utf8_sanitized_len(const char *s, size_t n);
size_t text_utf8_sanitize(const char *s, size_t n, char *out);

/* GPT-2's byte-to-unicode table (openai/gpt-2 encoder.py, bytes_to_unicode):
 * printable Latin-1 bytes stand for themselves, the other 68 bytes for
 * U+0100.. in byte order. */
uint32_t text_gpt2_byte_cp(uint8_t b);
/* The byte a code point stands for, or -1. */
int text_gpt2_cp_byte(uint32_t cp);

/* ---- Unicode facts for WordPiece (unicode_tables.c, generated) ---- */

enum {
    TEXT_UCLASS_OTHER = 0,
    TEXT_UCLASS_PUNCT = 1,   /* P* */
    TEXT_UCLASS_SYMBOL = 2,  /* S* */
    TEXT_UCLASS_MARK = 3,    /* M* */
    TEXT_UCLASS_CONTROL = 4, /* Cc Cf Co Cs */
};

typedef struct text_uclass_range {
    uint32_t first;
    uint8_t cls;
} text_uclass_range;

typedef struct text_nfd_range {
    uint32_t first, last, nfd;
} text_nfd_range;

extern const char text_unicode_version[];
extern const text_uclass_range text_uclass_ranges[];
extern const size_t text_uclass_n;
extern const uint32_t text_lower_map[][2];
extern const size_t text_lower_n;
extern const text_nfd_range text_nfd_ranges[];
extern const size_t text_nfd_n;

/* ---- the pre-tokenizer (byte-level BPE): regex splits by PCRE2 ---- */

typedef struct text_pretok text_pretok;

typedef struct text_span {
    size_t off;
    size_t len;
} text_span;

/* Compiles the pre-tokenizer named by tokenizer.ggml.pre; NULL or "" gives
 * "default". Unknown names get LARES_EUNSUPPORTED. */
lares_status text_pretok_create(const char *name, size_t name_len, text_pretok **out,
                                lares_error *err);
void text_pretok_free(text_pretok *p);
const char *text_pretok_name(const text_pretok *p);
bool text_pretok_ignore_merges(const text_pretok *p);
/* The reference engine's add_bos default for the family (llama-bpe: true). */
bool text_pretok_add_bos_default(const text_pretok *p);

/* ---- the vocabulary ---- */

struct text_vocab {
    const gguf_file *file; /* borrowed */
    text_vocab_kind kind;
    int32_t n;
    const gguf_str *text; /* borrowed from the file: n views */
    float *score;         /* owned, n */
    uint8_t *type;        /* owned, n: tokenizer.ggml.token_type as stored */
    uint16_t *attr;       /* owned, n: TEXT_ATTR_* bits */
    text_strmap map;      /* owned */

    int32_t bos, eos, unk, sep, pad, eot, eom, mask; /* -1: none */
    bool add_bos, add_eos, add_sep, add_space_prefix;

    /* special tokens (control, user-defined, unknown), longest text first */
    int32_t *special; /* owned, n_special ids */
    size_t n_special;
    text_trie_node *trie; /* owned: node 0 is the root */
    size_t n_trie;
    int32_t trie_root[256]; /* the root's child for each first byte, -1: none */

    /* SPM: the token for each byte (<0xAB>, else the one-byte text, else
     * unknown, else -1). BPE: the token of the byte's GPT-2 character. */
    int32_t byte_token[256];

    /* SPM: no token has U+2581 after another character, so no merge can
     * cross the start of a word and words can be merged one at a time */
    bool spm_words_independent;

    /* byte-level BPE */
    text_pairmap merges; /* owned */
    text_pretok *pre;    /* owned */
    bool ignore_merges;  /* a pre-tokenized word that is a token is taken whole */

    /* WordPiece */
    bool lowercase, strip_accents;
    size_t max_token_len;
};

/* ---- one tokenize call ---- */

typedef struct text_bigram {
    float prio;     /* higher first: SPM score, BPE -rank */
    int32_t left;   /* symbol index */
    int32_t right;  /* symbol index */
    int32_t result; /* the token the pair forms */
    uint32_t size;  /* bytes of the pair when pushed (stale check) */
} text_bigram;

typedef struct text_symbol {
    int32_t prev, next; /* -1: none */
    int32_t id;         /* token of the symbol's text, -1 when not a token */
    uint32_t off, len;  /* bytes in the text being merged; len 0: merged away */
} text_symbol;

typedef struct text_work {
    int32_t *ids; /* the output */
    size_t n_ids, cap_ids;
    char *buf; /* escaped (SPM) or sanitized (BPE) text */
    size_t cap_buf;
    char *word; /* BPE: one byte-encoded word */
    size_t cap_word;
    text_symbol *sym;
    size_t cap_sym;
    text_bigram *heap;
    size_t n_heap, cap_heap;
    text_span *spans, *spans2;
    size_t n_spans, cap_spans, n_spans2, cap_spans2;
    text_frag *frags, *frags2;
    size_t n_frags, cap_frags, n_frags2, cap_frags2;
    struct text_regex_work *rx; /* PCRE2 match data, created on first use */
} text_work;

void text_work_free(text_work *w);
lares_status text_emit(text_work *w, int32_t id, lares_error *err);

void text_heap_clear(text_work *w);
lares_status text_heap_push(text_work *w, const text_bigram *b, lares_error *err);
bool text_heap_pop(text_work *w, text_bigram *out);

/* Splits [0, len) of text into raw fragments and special tokens. */
lares_status text_partition(const text_vocab *v, const char *text, size_t len, bool parse_special,
                            text_work *w, lares_error *err);

lares_status text_spm_tokenize(const text_vocab *v, const char *text, bool add_special,
                               text_work *w, lares_error *err);
lares_status text_bpe_tokenize(const text_vocab *v, const char *text, bool add_special,
                               text_work *w, lares_error *err);
lares_status text_wpm_tokenize(const text_vocab *v, const char *text, bool add_special,
                               text_work *w, lares_error *err);

/* Splits s[0, len) (valid UTF-8) into words: w->spans. */
lares_status text_pretok_split(const text_pretok *p, const char *s, size_t len, text_work *w,
                               lares_error *err);
void text_regex_work_free(struct text_regex_work *rx);

/* Loading helpers of the byte-level BPE and WordPiece vocabularies. */
lares_status text_bpe_load(text_vocab *v, const gguf_file *f, lares_error *err);
lares_status text_wpm_load(text_vocab *v, const gguf_file *f, lares_error *err);

#endif /* LARES_TEXT_IMPL_H */
