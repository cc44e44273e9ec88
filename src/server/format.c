/*
 * The request fields that ask for structured output: OpenAI's
 * `response_format` ({"type": "text" | "json_object" | "json_schema"}) and
 * Ollama's `format` ("json" or a schema). Either gives the request a
 * compiled schema (schema.h) that the worker constrains the generation to.
 */
#include "core/core.h"
#include "server/schema.h"

static bool invalid(server_error *e, const char *param, const char *msg) {
    return server_fail(e, 400, "invalid_request_error", NULL, param, "%s", msg);
}

bool server_parse_response_format(const json_t *rf, server_request *r, server_error *e) {
    if (rf == NULL || json_is_null(rf)) {
        return true;
    }
    const json_t *t = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(t)) {
        return invalid(e, "response_format",
                       "response_format must be an object with a type: text, json_object or "
                       "json_schema");
    }
    const char *type = json_string_value(t);
    if (strcmp(type, "text") == 0) {
        return true;
    }
    if (strcmp(type, "json_object") == 0) {
        r->format = server_schema_any_object(e);
        return r->format != NULL;
    }
    if (strcmp(type, "json_schema") != 0) {
        return invalid(e, "response_format.type",
                       "response_format.type must be text, json_object or json_schema");
    }
    const json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) {
        return invalid(e, "response_format.json_schema",
                       "response_format.json_schema must be an object with a name and a schema");
    }
    const json_t *schema = json_object_get(js, "schema");
    if (schema == NULL || json_is_null(schema)) { /* no schema: any object */
        r->format = server_schema_any_object(e);
    } else {
        r->format = server_schema_compile(schema, "response_format.json_schema.schema", e);
    }
    return r->format != NULL;
}

bool server_parse_ollama_format(const json_t *f, server_request *r, server_error *e) {
    if (f == NULL || json_is_null(f) || (json_is_string(f) && json_string_length(f) == 0)) {
        return true;
    }
    if (json_is_string(f)) {
        if (strcmp(json_string_value(f), "json") != 0) {
            return invalid(e, "format", "format must be \"json\" or a JSON schema");
        }
        r->format = server_schema_any_object(e);
    } else {
        r->format = server_schema_compile(f, "format", e);
    }
    return r->format != NULL;
}
