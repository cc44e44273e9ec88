/*
 * JSON schema -> nodes for constrained generation (schema.h). The subset
 * taken is what structured-output clients send (OpenAI's strict mode and
 * Ollama's `format`): type (a name or a list), properties, required,
 * additionalProperties (ignored: only the listed properties are written),
 * items, minItems, maxItems, minLength, maxLength, enum, const, anyOf and
 * oneOf (alternatives that start with different bytes, as a string and
 * null), and the annotations (title, description, default, examples,
 * $schema, $comment, strict). Anything else (pattern, format, minimum, $ref,
 * allOf, ...) is refused with a 400 naming it, rather than ignored: the
 * output would not honour it.
 */
#include "server/schema.h"

#include "core/core.h"

#include <stdarg.h>

typedef struct compiler {
    server_schema *s;
    server_error *e;
    const char *param;
    bool failed;
} compiler;

static bool fail(compiler *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(compiler *c, const char *fmt, ...) {
    char msg[LARES_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->failed = true;
    return server_fail(c->e, 400, "invalid_request_error", NULL, c->param, "%s: %s", c->param, msg);
}

static bool oom(compiler *c) {
    c->failed = true;
    return server_fail(c->e, 500, "server_error", NULL, c->param, "out of memory");
}

static bool reserve(compiler *c, void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) {
        return true;
    }
    int32_t n = *cap ? *cap * 2 : 16;
    while (n < need) {
        n *= 2;
    }
    void *q = lares_realloc(*p, (size_t)n * elem);
    if (q == NULL) {
        return oom(c);
    }
    *p = q;
    *cap = n;
    return true;
}

static void set_start(schema_node *n, uint8_t b) {
    n->starts[b >> 3] |= (uint8_t)(1u << (b & 7));
}

static void set_starts(schema_node *n, const char *bytes) {
    for (const char *p = bytes; *p; p++) {
        set_start(n, (uint8_t)*p);
    }
}

/* a new node of `kind`; -1 on failure */
static int32_t add_node(compiler *c, schema_kind kind) {
    server_schema *s = c->s;
    if (s->n_nodes >= SCHEMA_MAX_NODES) {
        fail(c, "the schema has more than %d parts", SCHEMA_MAX_NODES);
        return -1;
    }
    if (!reserve(c, (void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof *s->nodes)) {
        return -1;
    }
    schema_node *n = &s->nodes[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->items = -1;
    n->max_n = -1;
    n->lit_open = n->lit_mid = -1;
    switch (kind) {
    case SCHEMA_ANY:
        set_starts(n, "{[\"-0123456789tfn");
        n->min_bytes = 1;
        break;
    case SCHEMA_OBJECT:
        set_start(n, '{');
        n->min_bytes = 2;
        break;
    case SCHEMA_ARRAY:
        set_start(n, '[');
        n->min_bytes = 2;
        break;
    case SCHEMA_STRING:
        set_start(n, '"');
        n->min_bytes = 2;
        break;
    case SCHEMA_NUMBER:
    case SCHEMA_INTEGER:
        set_starts(n, "-0123456789");
        n->min_bytes = 1;
        break;
    default:
        break;
    }
    return s->n_nodes++;
}

/* a literal of raw text (markup between a call's values); its index, -1 on
 * failure */
static int32_t text_literal(compiler *c, const char *text) {
    server_schema *s = c->s;
    if (!reserve(c, (void **)&s->lits, &s->cap_lits, s->n_lits + 1, sizeof *s->lits)) {
        return -1;
    }
    size_t *q = lares_realloc(s->lit_len, (size_t)s->cap_lits * sizeof *s->lit_len);
    if (q != NULL) {
        s->lit_len = q;
    }
    char *copy = lares_strdup(text);
    if (q == NULL || copy == NULL) {
        lares_free(copy);
        oom(c);
        return -1;
    }
    s->lits[s->n_lits] = copy;
    s->lit_len[s->n_lits] = strlen(copy);
    return s->n_lits++;
}

/* a literal: the compact JSON text of v */
static bool add_literal(compiler *c, const json_t *v) {
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text == NULL) {
        return oom(c);
    }
    const size_t len = strlen(text);
    const bool ok =
        len > 0 && len <= SCHEMA_MAX_LITERAL
            ? text_literal(c, text) >= 0
            : fail(c, "an enum or const value longer than %d bytes", SCHEMA_MAX_LITERAL);
    free(text);
    return ok;
}

/* a node of literals from json values */
static int32_t literals(compiler *c, const json_t *const *vals, size_t n) {
    if (n == 0) {
        fail(c, "enum is empty: no value could be written");
        return -1;
    }
    if (n > SCHEMA_MAX_PROPS) {
        fail(c, "enum has %zu values, at most %d are supported", n, SCHEMA_MAX_PROPS);
        return -1;
    }
    int32_t at = add_node(c, SCHEMA_LITERALS);
    if (at < 0) {
        return -1;
    }
    int32_t first = c->s->n_lits;
    for (size_t i = 0; i < n; i++) {
        if (!add_literal(c, vals[i])) {
            return -1;
        }
    }
    schema_node *node = &c->s->nodes[at];
    node->first = first;
    node->count = (int32_t)n;
    node->min_bytes = SIZE_MAX;
    for (int32_t i = first; i < first + (int32_t)n; i++) {
        set_start(node, (uint8_t)c->s->lits[i][0]);
        node->min_bytes = LARES_MIN(node->min_bytes, c->s->lit_len[i]);
    }
    return at;
}

/* a node of literals from JSON texts (NULL-terminated list) */
static int32_t literal_words(compiler *c, const char *const *words) {
    json_t *v[3] = {NULL, NULL, NULL};
    size_t n = 0;
    int32_t at = -1;
    for (; words[n] != NULL && n < 3; n++) {
        if ((v[n] = json_loads(words[n], JSON_DECODE_ANY, NULL)) == NULL) {
            oom(c);
            goto done;
        }
    }
    at = literals(c, (const json_t *const *)v, n);
done:
    for (size_t i = 0; i < 3; i++) {
        json_decref(v[i]);
    }
    return at;
}

static const char *const BOOLEANS[] = {"true", "false", NULL};
static const char *const NULLS[] = {"null", NULL};
static const char *const WORDS[] = {"true", "false", "null", NULL};

/* a union of the nodes alts[0, n): alternatives must start differently */
static int32_t make_union(compiler *c, const int32_t *alts, size_t n) {
    if (n == 1) {
        return alts[0];
    }
    server_schema *s = c->s;
    int32_t at = add_node(c, SCHEMA_UNION);
    if (at < 0) {
        return -1;
    }
    int32_t first = s->n_alts;
    uint8_t seen[32] = {0};
    size_t min_bytes = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        const schema_node *a = &s->nodes[alts[i]];
        /* an alternative that is itself a union is spliced in */
        const int32_t *sub = a->kind == SCHEMA_UNION ? s->alts + a->first : &alts[i];
        int32_t n_sub = a->kind == SCHEMA_UNION ? a->count : 1;
        for (int32_t k = 0; k < n_sub; k++) {
            const int32_t id = sub[k];
            for (int b = 0; b < 32; b++) {
                if (seen[b] & s->nodes[id].starts[b]) {
                    fail(c, "anyOf, oneOf and type lists need alternatives that start "
                            "differently (as a string, a number, an object and null); two of "
                            "these can start with the same character");
                    return -1;
                }
                seen[b] |= s->nodes[id].starts[b];
            }
            if (!reserve(c, (void **)&s->alts, &s->cap_alts, s->n_alts + 1, sizeof *s->alts)) {
                return -1;
            }
            sub = a->kind == SCHEMA_UNION ? s->alts + a->first : &alts[i]; /* moved? */
            s->alts[s->n_alts++] = id;
            min_bytes = LARES_MIN(min_bytes, s->nodes[id].min_bytes);
        }
    }
    schema_node *u = &s->nodes[at];
    u->first = first;
    u->count = s->n_alts - first;
    memcpy(u->starts, seen, sizeof seen);
    u->min_bytes = min_bytes;
    return at;
}

static int32_t compile(compiler *c, const json_t *j, int depth);

static bool get_count(compiler *c, const json_t *j, const char *key, int64_t *out) {
    const json_t *v = json_object_get(j, key);
    if (v == NULL) {
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000) {
        return fail(c, "%s must be an integer from 0 to 100000", key);
    }
    *out = json_integer_value(v);
    return true;
}

static bool keyword_known(const char *k) {
    static const char *const known[] = {
        "type",      "properties", "required",    "additionalProperties",
        "items",     "minItems",   "maxItems",    "minLength",
        "maxLength", "enum",       "const",       "anyOf",
        "oneOf",     "title",      "description", "default",
        "examples",  "$schema",    "$comment",    "strict",
        "$id",
    };
    for (size_t i = 0; i < LARES_ARRAY_LEN(known); i++) {
        if (strcmp(k, known[i]) == 0) {
            return true;
        }
    }
    return false;
}

static int32_t compile_object(compiler *c, const json_t *j, int depth) {
    const json_t *props = json_object_get(j, "properties");
    const json_t *req = json_object_get(j, "required");
    if (props != NULL && !json_is_object(props)) {
        fail(c, "properties must be an object");
        return -1;
    }
    if (req != NULL && !json_is_array(req)) {
        fail(c, "required must be a list of property names");
        return -1;
    }
    size_t n = props ? json_object_size(props) : 0;
    if (n > SCHEMA_MAX_PROPS) {
        fail(c, "an object with %zu properties; at most %d are supported", n, SCHEMA_MAX_PROPS);
        return -1;
    }
    for (size_t i = 0; req != NULL && i < json_array_size(req); i++) {
        const json_t *name = json_array_get(req, i);
        if (!json_is_string(name)) {
            fail(c, "required[%zu] is not a string", i);
            return -1;
        }
        if (json_object_get(props, json_string_value(name)) == NULL) {
            fail(c, "required names \"%s\", which is not among the properties",
                 json_string_value(name));
            return -1;
        }
    }
    int32_t at = add_node(c, SCHEMA_OBJECT);
    if (at < 0) {
        return -1;
    }
    if (n == 0) { /* any keys, unless additionalProperties is false: then {} only */
        c->s->nodes[at].free_form = !json_is_false(json_object_get(j, "additionalProperties"));
        return at;
    }
    /* the properties' nodes first, then the run of props (kept together) */
    int32_t nodes[SCHEMA_MAX_PROPS];
    const char *names[SCHEMA_MAX_PROPS];
    size_t k = 0;
    const char *key;
    const json_t *sub;
    json_object_foreach((json_t *)props, key, sub) {
        names[k] = key;
        if ((nodes[k] = compile(c, sub, depth + 1)) < 0) {
            return -1;
        }
        k++;
    }
    server_schema *s = c->s;
    if (!reserve(c, (void **)&s->props, &s->cap_props, s->n_props + (int32_t)n, sizeof *s->props)) {
        return -1;
    }
    schema_node *node = &s->nodes[at];
    node->first = s->n_props;
    node->count = (int32_t)n;
    size_t min = 2, n_req = 0;
    for (size_t i = 0; i < n; i++) {
        schema_prop *p = &s->props[s->n_props];
        json_t *name = json_string(names[i]);
        char *text = name ? json_dumps(name, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(name);
        p->key = text ? lares_strdup(text) : NULL;
        free(text);
        if (p->key == NULL) {
            oom(c);
            return -1;
        }
        s->n_props++;
        p->key_len = strlen(p->key);
        p->node = nodes[i];
        p->required = false;
        for (size_t r = 0; req != NULL && r < json_array_size(req); r++) {
            if (strcmp(json_string_value(json_array_get(req, r)), names[i]) == 0) {
                p->required = true;
            }
        }
        if (p->required) {
            min += p->key_len + 1 + s->nodes[p->node].min_bytes + (n_req > 0);
            n_req++;
        }
    }
    s->nodes[at].min_bytes = min;
    size_t rest = 0;
    for (int32_t i = (int32_t)n - 1; i >= 0; i--) {
        schema_prop *p = &s->props[s->nodes[at].first + i];
        if (p->required) {
            rest += 1 + p->key_len + 1 + s->nodes[p->node].min_bytes;
        }
        p->rest = rest;
    }
    return at;
}

static int32_t compile_array(compiler *c, const json_t *j, int depth) {
    int64_t lo = 0, hi = -1;
    if (!get_count(c, j, "minItems", &lo) || !get_count(c, j, "maxItems", &hi)) {
        return -1;
    }
    if (hi >= 0 && hi < lo) {
        fail(c, "maxItems is below minItems");
        return -1;
    }
    const json_t *items = json_object_get(j, "items");
    if (items != NULL && json_is_array(items)) {
        fail(c, "items as a list (tuples) is not supported; give one schema for every item");
        return -1;
    }
    int32_t item = items ? compile(c, items, depth + 1) : SCHEMA_NODE_ANY;
    if (item < 0) {
        return -1;
    }
    int32_t at = add_node(c, SCHEMA_ARRAY);
    if (at < 0) {
        return -1;
    }
    schema_node *n = &c->s->nodes[at];
    n->items = item;
    n->min_n = lo;
    n->max_n = hi;
    n->min_bytes = lo == 0 ? 2 : 2 + (size_t)lo * (c->s->nodes[item].min_bytes + 1) - 1;
    return at;
}

static int32_t compile_type(compiler *c, const json_t *j, const char *type, int depth) {
    if (strcmp(type, "object") == 0) {
        return compile_object(c, j, depth);
    }
    if (strcmp(type, "array") == 0) {
        return compile_array(c, j, depth);
    }
    if (strcmp(type, "string") == 0) {
        int64_t lo = 0, hi = -1;
        if (!get_count(c, j, "minLength", &lo) || !get_count(c, j, "maxLength", &hi)) {
            return -1;
        }
        if (hi >= 0 && hi < lo) {
            fail(c, "maxLength is below minLength");
            return -1;
        }
        int32_t at = add_node(c, SCHEMA_STRING);
        if (at >= 0) {
            c->s->nodes[at].min_n = lo;
            c->s->nodes[at].max_n = hi;
            c->s->nodes[at].min_bytes = 2 + (size_t)lo;
        }
        return at;
    }
    if (strcmp(type, "number") == 0) {
        return add_node(c, SCHEMA_NUMBER);
    }
    if (strcmp(type, "integer") == 0) {
        return add_node(c, SCHEMA_INTEGER);
    }
    if (strcmp(type, "boolean") == 0) {
        return literal_words(c, BOOLEANS);
    }
    if (strcmp(type, "null") == 0) {
        return literal_words(c, NULLS);
    }
    fail(c, "unknown type \"%s\" (object, array, string, number, integer, boolean or null)", type);
    return -1;
}

static int32_t compile(compiler *c, const json_t *j, int depth) {
    if (depth > SCHEMA_MAX_DEPTH - 2) {
        fail(c, "the schema nests deeper than %d levels", SCHEMA_MAX_DEPTH - 2);
        return -1;
    }
    if (json_is_true(j)) {
        return SCHEMA_NODE_ANY;
    }
    if (!json_is_object(j)) {
        fail(c, "a schema must be an object (or true), not %s",
             json_is_false(j) ? "false (nothing could be written)" : "this JSON value");
        return -1;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)j, key, v) {
        if (!keyword_known(key)) {
            fail(c,
                 "\"%s\" is not supported in a schema for structured output (supported: "
                 "type, properties, required, additionalProperties, items, minItems, "
                 "maxItems, minLength, maxLength, enum, const, anyOf, oneOf)",
                 key);
            return -1;
        }
    }
    const json_t *cst = json_object_get(j, "const");
    if (cst != NULL) {
        return literals(c, &cst, 1);
    }
    const json_t *en = json_object_get(j, "enum");
    if (en != NULL) {
        if (!json_is_array(en)) {
            fail(c, "enum must be a list");
            return -1;
        }
        const json_t *vals[SCHEMA_MAX_PROPS];
        size_t n = json_array_size(en);
        for (size_t i = 0; i < n && i < SCHEMA_MAX_PROPS; i++) {
            vals[i] = json_array_get(en, i);
        }
        return literals(c, vals, n);
    }
    const json_t *any = json_object_get(j, "anyOf");
    if (any == NULL) {
        any = json_object_get(j, "oneOf");
    }
    if (any != NULL) {
        if (!json_is_array(any) || json_array_size(any) == 0 ||
            json_array_size(any) > SCHEMA_MAX_PROPS) {
            fail(c, "anyOf and oneOf must be a list of 1 to %d schemas", SCHEMA_MAX_PROPS);
            return -1;
        }
        if (json_object_get(j, "type") != NULL) {
            fail(c, "anyOf or oneOf together with type: put the type in each alternative");
            return -1;
        }
        int32_t alts[SCHEMA_MAX_PROPS];
        for (size_t i = 0; i < json_array_size(any); i++) {
            if ((alts[i] = compile(c, json_array_get(any, i), depth)) < 0) {
                return -1;
            }
        }
        return make_union(c, alts, json_array_size(any));
    }
    const json_t *type = json_object_get(j, "type");
    if (type == NULL) { /* guessed from the keywords, else any value */
        if (json_object_get(j, "properties") != NULL) {
            return compile_object(c, j, depth);
        }
        if (json_object_get(j, "items") != NULL) {
            return compile_array(c, j, depth);
        }
        return SCHEMA_NODE_ANY;
    }
    if (json_is_string(type)) {
        return compile_type(c, j, json_string_value(type), depth);
    }
    if (!json_is_array(type) || json_array_size(type) == 0 || json_array_size(type) > 7) {
        fail(c, "type must be a name or a list of names");
        return -1;
    }
    int32_t alts[8];
    for (size_t i = 0; i < json_array_size(type); i++) {
        const json_t *t = json_array_get(type, i);
        if (!json_is_string(t)) {
            fail(c, "type[%zu] is not a string", i);
            return -1;
        }
        if ((alts[i] = compile_type(c, j, json_string_value(t), depth)) < 0) {
            return -1;
        }
    }
    return make_union(c, alts, json_array_size(type));
}

static server_schema *start(compiler *c, server_error *e, const char *param) {
    c->e = e;
    c->param = param;
    c->failed = false;
    c->s = lares_calloc(1, sizeof *c->s);
    if (c->s == NULL) {
        oom(c);
        return NULL;
    }
    if (add_node(c, SCHEMA_ANY) != SCHEMA_NODE_ANY ||
        add_node(c, SCHEMA_STRING) != SCHEMA_NODE_STRING ||
        literal_words(c, WORDS) != SCHEMA_NODE_WORDS) {
        server_schema_free(c->s);
        return NULL;
    }
    return c->s;
}

server_schema *server_schema_compile(const json_t *schema, const char *param, server_error *e) {
    compiler c;
    if (start(&c, e, param) == NULL) {
        return NULL;
    }
    c.s->root = compile(&c, schema, 0);
    if (c.s->root < 0 || c.failed) {
        server_schema_free(c.s);
        return NULL;
    }
    return c.s;
}

server_schema *server_schema_any_object(server_error *e) {
    compiler c;
    if (start(&c, e, "response_format") == NULL) {
        return NULL;
    }
    c.s->root = add_node(&c, SCHEMA_OBJECT);
    if (c.s->root < 0) {
        server_schema_free(c.s);
        return NULL;
    }
    c.s->nodes[c.s->root].free_form = true;
    return c.s;
}

server_schema *server_schema_calls(const char *const *names, const json_t *const *params, size_t n,
                                   const char *args_key, bool as_list, server_error *e) {
    compiler c;
    if (start(&c, e, "tools") == NULL) {
        return NULL;
    }
    server_schema *s = c.s;
    if (n == 0 || n > SCHEMA_MAX_PROPS || strlen(args_key) + 1 > sizeof s->args_key) {
        fail(&c, "1 to %d tools can be called", SCHEMA_MAX_PROPS);
        server_schema_free(s);
        return NULL;
    }
    snprintf(s->args_key, sizeof s->args_key, "%s", args_key);
    int32_t args[SCHEMA_MAX_PROPS];
    const json_t *vals[SCHEMA_MAX_PROPS];
    json_t *strs[SCHEMA_MAX_PROPS] = {0};
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        c.param = "tools";
        args[i] = params[i] != NULL ? compile(&c, params[i], 1) : -1;
        if (params[i] == NULL) { /* any object */
            args[i] = add_node(&c, SCHEMA_OBJECT);
            if (args[i] >= 0) {
                s->nodes[args[i]].free_form = true;
            }
        }
        vals[i] = strs[i] = json_string(names[i]);
        ok = args[i] >= 0 && strs[i] != NULL;
    }
    int32_t names_node = ok ? literals(&c, vals, n) : -1;
    for (size_t i = 0; i < n; i++) {
        json_decref(strs[i]);
    }
    char mid[32];
    snprintf(mid, sizeof mid, ",\"%s\":", args_key);
    const int32_t lo = names_node >= 0 ? text_literal(&c, "{\"name\":") : -1;
    const int32_t lm = lo >= 0 ? text_literal(&c, mid) : -1;
    const int32_t at = lm >= 0 ? add_node(&c, SCHEMA_CALL) : -1;
    if (at < 0 || c.failed) {
        server_schema_free(s);
        return NULL;
    }
    schema_node *node = &s->nodes[at];
    node->items = names_node;
    node->lit_open = lo;
    node->lit_mid = lm;
    node->first = s->n_alts;
    node->count = (int32_t)n;
    set_start(node, '{');
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (!reserve(&c, (void **)&s->alts, &s->cap_alts, s->n_alts + 1, sizeof *s->alts)) {
            server_schema_free(s);
            return NULL;
        }
        s->alts[s->n_alts++] = args[i];
        best = LARES_MIN(best, s->lit_len[s->nodes[names_node].first + (int32_t)i] +
                                   s->nodes[args[i]].min_bytes);
    }
    node->min_bytes = s->lit_len[lo] + best + s->lit_len[lm] + 1;
    s->root = at;
    if (as_list) {
        const int32_t list = add_node(&c, SCHEMA_ARRAY);
        if (list < 0) {
            server_schema_free(s);
            return NULL;
        }
        s->nodes[list].items = at;
        s->nodes[list].min_n = 1;
        s->nodes[list].min_bytes = 2 + s->nodes[at].min_bytes;
        s->root = list;
    }
    return s;
}

void server_schema_free(server_schema *s) {
    if (s == NULL) {
        return;
    }
    for (int32_t i = 0; i < s->n_props; i++) {
        lares_free(s->props[i].key);
    }
    for (int32_t i = 0; i < s->n_lits; i++) {
        lares_free(s->lits[i]);
    }
    lares_free(s->nodes);
    lares_free(s->props);
    lares_free(s->lits);
    lares_free(s->lit_len);
    lares_free(s->alts);
    lares_free(s);
}
