/*
 * Structured output: a JSON schema compiled into nodes (schema.c), a byte
 * automaton that accepts exactly the compact JSON texts the nodes allow
 * (json_machine.c), a check of a parsed value against the nodes
 * (schema_check.c), and the token mask that keeps a generation inside the
 * automaton (constrain.c).
 *
 * The texts accepted are compact (no whitespace), objects list their
 * properties in the schema's order (optional ones may be left out), numbers
 * have at most SCHEMA_MAX_DIGITS digits in each part. Every text the
 * automaton completes parses as JSON and validates against the schema.
 */
#ifndef LARES_SERVER_SCHEMA_H
#define LARES_SERVER_SCHEMA_H

#include "server/server_impl.h"

#include <string.h>

#define SCHEMA_MAX_DEPTH   32 /* nested values (frames of the automaton) */
#define SCHEMA_MAX_NODES   1024
#define SCHEMA_MAX_PROPS   64 /* properties of one object; enum values of one node */
#define SCHEMA_MAX_DIGITS  15 /* digits of an integer part or a fraction */
#define SCHEMA_MAX_EXP     2  /* digits of an exponent (1e999 would overflow a double) */
#define SCHEMA_MAX_LITERAL 1024

typedef enum schema_kind {
    SCHEMA_ANY = 0, /* any JSON value */
    SCHEMA_OBJECT,  /* properties in order; no properties: any keys, any values */
    SCHEMA_ARRAY,   /* items of one node, min/max count */
    SCHEMA_STRING,  /* min/max length in characters */
    SCHEMA_NUMBER,
    SCHEMA_INTEGER,
    SCHEMA_LITERALS, /* enum, const, boolean, null: one of some compact JSON texts */
    SCHEMA_UNION,    /* anyOf / type lists: alternatives told apart by their first byte */
    SCHEMA_CALL,     /* a function call {"name":N,"arguments":A}: A's node depends on N */
} schema_kind;

/* nodes every compiled schema starts with */
#define SCHEMA_NODE_ANY    0 /* any value */
#define SCHEMA_NODE_STRING 1 /* any string: keys of free-form objects */
#define SCHEMA_NODE_WORDS  2 /* true, false, null */

typedef struct schema_prop {
    char *key; /* owned: the key as compact JSON, with its quotes */
    size_t key_len;
    int32_t node;
    bool required;
    size_t rest; /* bytes the required properties from this one on need at least,
                    each with its comma */
} schema_prop;

typedef struct schema_node {
    schema_kind kind;
    bool free_form;            /* object without properties: any keys, values of node 0 */
    int32_t first, count;      /* props (object), literals, alternatives (union) */
    int32_t items;             /* array: the items' node; call: the names (a literals node) */
    int32_t lit_open, lit_mid; /* call: the literals {"name": and ,"arguments": */
    int64_t min_n, max_n;      /* array: items; string: characters; max -1: none */
    size_t min_bytes;          /* the shortest text of the node */
    uint8_t starts[32];        /* bitmap of the bytes a text of the node can start with */
} schema_node;

typedef struct server_schema {
    schema_node *nodes; /* owned; SCHEMA_NODE_* first */
    int32_t n_nodes, cap_nodes;
    schema_prop *props; /* owned */
    int32_t n_props, cap_props;
    char **lits; /* owned: compact JSON texts */
    size_t *lit_len;
    int32_t n_lits, cap_lits;
    int32_t *alts; /* owned: union alternatives */
    int32_t n_alts, cap_alts;
    int32_t root;
    char args_key[16]; /* a call's key for the arguments: "arguments" or "parameters" */
} server_schema;

/* Compiles a JSON schema. `param` names the request field in errors (400
 * with what is unsupported or malformed). */
server_schema *server_schema_compile(const json_t *schema, const char *param, server_error *e);
/* The schema of "any JSON object" (response_format json_object). */
server_schema *server_schema_any_object(server_error *e);
/* The schema of a function call {"name":N,"<args_key>":A}: N one of names,
 * A valid against that function's parameters (params[i], a JSON schema, or
 * NULL for any object). as_list: a list of one or more calls. */
server_schema *server_schema_calls(const char *const *names, const json_t *const *params, size_t n,
                                   const char *args_key, bool as_list, server_error *e);
void server_schema_free(server_schema *s);

/* response_format (OpenAI) and format (Ollama) into r->format (format.c);
 * absent, null or text: none. False with a 400 in e. */
bool server_parse_response_format(const json_t *rf, server_request *r, server_error *e);
bool server_parse_ollama_format(const json_t *f, server_request *r, server_error *e);

/* Whether v validates against the compiled schema (same rules as the
 * automaton's, except property order). */
bool server_schema_check(const server_schema *s, const json_t *v);

/* ---- the automaton ---- */

typedef enum jm_frame_kind {
    JM_START = 0, /* a value of `node` not begun */
    JM_OBJECT,
    JM_ARRAY,
    JM_STRING,
    JM_NUMBER,
    JM_LITERAL,
    JM_CALL,
} jm_frame_kind;

typedef struct jm_frame {
    int32_t node;
    uint8_t kind;   /* jm_frame_kind */
    uint8_t st;     /* the kind's own state */
    uint8_t lo, hi; /* string: the range of the next UTF-8 continuation byte */
    uint32_t count; /* items, characters, digits, bytes into a key or literal */
    uint32_t next;  /* object: the first property still allowed; string: continuation bytes due */
    uint64_t alive; /* literals or keys still matching; object: the chosen property's node */
} jm_frame;

typedef struct jm_state {
    int32_t depth; /* frames in use; 0 and done: a whole value was read */
    bool done;
    jm_frame f[SCHEMA_MAX_DEPTH];
} jm_state;

void server_jm_init(const server_schema *s, jm_state *st);
/* Feeds one byte; false (state unspecified) when the text cannot go on so. */
bool server_jm_feed(const server_schema *s, jm_state *st, uint8_t b);
/* The text so far is a whole value (it may still go on, as a number can). */
bool server_jm_accepting(const server_schema *s, const jm_state *st);
/* Bytes needed at least to complete the value from here. */
size_t server_jm_min_finish(const server_schema *s, const jm_state *st);
/* A byte after which the value needs one byte less (the shortest way to
 * complete it); -1 when it needs none, or when there is none, which would be
 * a fault of server_jm_min_finish (the tests look for it). */
int server_jm_closing_byte(const server_schema *s, const jm_state *st);
/* The bytes that may come next, in order, into out; returns how many. */
int server_jm_allowed(const server_schema *s, const jm_state *st, uint8_t out[256]);
static inline void server_jm_copy(jm_state *dst, const jm_state *src) {
    dst->depth = src->depth;
    dst->done = src->done;
    memcpy(dst->f, src->f, (size_t)src->depth * sizeof src->f[0]);
}

/* ---- the token mask ---- */

/* The bytes of every token of the vocabulary, read once per model. */
typedef struct server_vocab_bytes {
    int32_t n_vocab;
    char *bytes;    /* owned */
    size_t *offset; /* owned, n_vocab + 1 */
    bool *eog;      /* owned: end-of-generation tokens */
} server_vocab_bytes;

lares_status server_vocab_bytes_read(const lares_model *m, int32_t n_vocab, server_vocab_bytes *out,
                                     lares_error *err);
void server_vocab_bytes_free(server_vocab_bytes *v);

typedef struct server_constraint {
    const server_schema *schema;  /* borrowed */
    const server_vocab_bytes *vb; /* borrowed */
    jm_state st;
    int64_t budget;    /* tokens left to generate; < 0: unknown */
    bool broken;       /* a token outside the automaton was chosen (should not happen) */
    uint8_t *verdicts; /* owned: scratch, one a token */
} server_constraint;

/* False when out of memory. */
bool server_constraint_init(server_constraint *c, const server_schema *s,
                            const server_vocab_bytes *vb, int64_t budget);
void server_constraint_free(server_constraint *c);
/* Sets the logits of the tokens that cannot continue the text to -inf:
 * tokens whose bytes the automaton refuses, tokens after which the value
 * could no longer be completed within the budget, and the end of generation
 * unless the value is whole. Never masks every token. */
void server_constraint_mask(server_constraint *c, float *logits, int32_t n_vocab);
/* The token chosen: moves the automaton on. */
void server_constraint_advance(server_constraint *c, int32_t token);

#endif /* LARES_SERVER_SCHEMA_H */
