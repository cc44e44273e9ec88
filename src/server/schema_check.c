/*
 * A parsed value against the compiled schema (schema.h): what the tests and
 * the fuzz target hold the automaton's texts to. Property order is not
 * checked (any order validates, as in JSON schema); properties the schema
 * does not list are refused, as the automaton never writes them.
 */
#include "core/core.h"
#include "server/schema.h"

static size_t utf8_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        k += ((uint8_t)s[i] & 0xC0) != 0x80;
    }
    return k;
}

static bool check(const server_schema *s, int32_t id, const json_t *v, int depth) {
    const schema_node *n = &s->nodes[id];
    if (depth > SCHEMA_MAX_DEPTH) {
        return false;
    }
    switch (n->kind) {
    case SCHEMA_ANY:
        return true;
    case SCHEMA_OBJECT: {
        if (!json_is_object(v)) {
            return false;
        }
        if (n->free_form) {
            return true;
        }
        size_t seen = 0;
        for (int32_t i = 0; i < n->count; i++) {
            const schema_prop *p = &s->props[n->first + i];
            json_t *key = json_loads(p->key, JSON_DECODE_ANY, NULL);
            const json_t *sub = key ? json_object_get(v, json_string_value(key)) : NULL;
            json_decref(key);
            if (sub == NULL) {
                if (p->required) {
                    return false;
                }
                continue;
            }
            seen++;
            if (!check(s, p->node, sub, depth + 1)) {
                return false;
            }
        }
        return seen == json_object_size(v);
    }
    case SCHEMA_ARRAY: {
        if (!json_is_array(v)) {
            return false;
        }
        size_t k = json_array_size(v);
        if ((int64_t)k < n->min_n || (n->max_n >= 0 && (int64_t)k > n->max_n)) {
            return false;
        }
        for (size_t i = 0; i < k; i++) {
            if (!check(s, n->items, json_array_get(v, i), depth + 1)) {
                return false;
            }
        }
        return true;
    }
    case SCHEMA_STRING: {
        if (!json_is_string(v)) {
            return false;
        }
        size_t k = utf8_chars(json_string_value(v), json_string_length(v));
        return (int64_t)k >= n->min_n && (n->max_n < 0 || (int64_t)k <= n->max_n);
    }
    case SCHEMA_NUMBER:
        return json_is_number(v);
    case SCHEMA_INTEGER:
        return json_is_integer(v);
    case SCHEMA_LITERALS:
        for (int32_t i = 0; i < n->count; i++) {
            json_t *lit = json_loads(s->lits[n->first + i], JSON_DECODE_ANY, NULL);
            bool eq = lit != NULL && json_equal(lit, (json_t *)v);
            json_decref(lit);
            if (eq) {
                return true;
            }
        }
        return false;
    case SCHEMA_CALL: {
        const json_t *name = json_object_get(v, "name");
        const json_t *args = json_object_get(v, s->args_key);
        if (!json_is_object(v) || json_object_size(v) != 2 || !json_is_string(name) ||
            args == NULL) {
            return false;
        }
        const schema_node *names = &s->nodes[n->items];
        for (int32_t i = 0; i < n->count; i++) {
            json_t *lit = json_loads(s->lits[names->first + i], JSON_DECODE_ANY, NULL);
            bool eq = lit != NULL && json_equal(lit, (json_t *)name);
            json_decref(lit);
            if (eq) {
                return check(s, s->alts[n->first + i], args, depth + 1);
            }
        }
        return false;
    }
    case SCHEMA_UNION:
        for (int32_t i = 0; i < n->count; i++) {
            if (check(s, s->alts[n->first + i], v, depth)) {
                return true;
            }
        }
        return false;
    }
    return false;
}

bool server_schema_check(const server_schema *s, const json_t *v) {
    return v != NULL && check(s, s->root, v, 0);
}
