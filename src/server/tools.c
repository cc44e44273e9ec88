/*
 * Tool calling (tools.h): requests in, prompts written per chat family,
 * calls found in answers. The formats are each family's documented ones
 * (Qwen 2.5 / Hermes function calling, Meta's Llama 3.1 JSON tool calling,
 * Mistral's v3 tokenizer markup); docs/server.md says where lares differs
 * (the markup of calls and results is written as text, so a token such as
 * <tool_call> that a vocabulary has as one added token is read as its
 * pieces).
 */
#include "server/tools.h"

#include "core/core.h"
#include "server/schema.h"

#include <ctype.h>

/* a 400 naming the field */
#define bad(e, param, ...)                                                                         \
    server_fail((e), 400, "invalid_request_error", NULL, (param), __VA_ARGS__)

static bool oom(server_error *e) {
    return server_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

server_tool_style server_tool_style_of(const char *family) {
    if (family != NULL && strcmp(family, "llama3") == 0) {
        return SERVER_TOOLS_LLAMA3;
    }
    if (family != NULL && strncmp(family, "mistral", 7) == 0) {
        return SERVER_TOOLS_MISTRAL;
    }
    return SERVER_TOOLS_HERMES;
}

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.') {
            return false;
        }
    }
    return true;
}

static int32_t tool_index(const json_t *tools, const char *name) {
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *n = json_object_get(json_array_get(tools, i), "name");
        if (strcmp(json_string_value(n), name) == 0) {
            return (int32_t)i;
        }
    }
    return -1;
}

/* one {"type":"function","function":{...}} into {"name","description","parameters"} */
static json_t *parse_tool(const json_t *t, size_t i, server_error *e) {
    char param[32];
    snprintf(param, sizeof param, "tools[%zu]", i);
    const json_t *type = json_object_get(t, "type");
    const json_t *fn = json_object_get(t, "function");
    if (!json_is_object(t) || !json_is_string(type) ||
        strcmp(json_string_value(type), "function") != 0 || !json_is_object(fn)) {
        bad(e, param, "%s must be {\"type\": \"function\", \"function\": {...}}", param);
        return NULL;
    }
    const json_t *name = json_object_get(fn, "name");
    if (!json_is_string(name) || !name_ok(json_string_value(name))) {
        bad(e, param, "%s.function.name must be 1 to 64 letters, digits, _, - or .", param);
        return NULL;
    }
    const json_t *desc = json_object_get(fn, "description");
    if (desc != NULL && !json_is_null(desc) && !json_is_string(desc)) {
        bad(e, param, "%s.function.description must be a string", param);
        return NULL;
    }
    const json_t *params = json_object_get(fn, "parameters");
    if (params != NULL && !json_is_null(params)) {
        /* compiled now so that a schema lares cannot honour is refused now */
        char where[64];
        snprintf(where, sizeof where, "%s.function.parameters", param);
        server_schema *s = server_schema_compile(params, where, e);
        if (s == NULL) {
            return NULL;
        }
        server_schema_free(s);
    }
    json_t *o = json_object();
    json_object_set(o, "name", (json_t *)name);
    if (json_is_string(desc)) {
        json_object_set(o, "description", (json_t *)desc);
    }
    if (params != NULL && !json_is_null(params)) {
        json_object_set(o, "parameters", (json_t *)params);
    }
    return o;
}

bool server_parse_tools(const json_t *tools, const json_t *choice, server_request *r,
                        server_error *e) {
    r->tool_choice = SERVER_TOOL_AUTO;
    const size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
    if (tools != NULL && !json_is_null(tools) && !json_is_array(tools)) {
        return bad(e, "tools", "tools must be a list");
    }
    if (n > SERVER_MAX_TOOLS) {
        return bad(e, "tools", "tools has %zu entries; at most %d are supported", n,
                   SERVER_MAX_TOOLS);
    }
    if (n > 0) {
        r->tools = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *t = parse_tool(json_array_get(tools, i), i, e);
            if (t == NULL) {
                return false;
            }
            if (tool_index(r->tools, json_string_value(json_object_get(t, "name"))) >= 0) {
                json_decref(t);
                return bad(e, "tools", "tools[%zu] repeats the name of an earlier tool", i);
            }
            json_array_append_new(r->tools, t);
        }
    }
    if (choice == NULL || json_is_null(choice)) {
        r->tool_choice = n > 0 ? SERVER_TOOL_AUTO : SERVER_TOOL_NONE;
        return true;
    }
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (strcmp(c, "none") == 0) {
            r->tool_choice = SERVER_TOOL_NONE;
        } else if (strcmp(c, "auto") == 0) {
            r->tool_choice = n > 0 ? SERVER_TOOL_AUTO : SERVER_TOOL_NONE;
        } else if (strcmp(c, "required") == 0) {
            r->tool_choice = SERVER_TOOL_REQUIRED;
        } else {
            return bad(e, "tool_choice",
                       "tool_choice must be none, auto, required or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}");
        }
    } else {
        const json_t *fn = json_object_get(choice, "function");
        const json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name)) {
            return bad(e, "tool_choice",
                       "tool_choice must be none, auto, required or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}");
        }
        r->tool_choice = SERVER_TOOL_NAMED;
        r->tool_named = n > 0 ? tool_index(r->tools, json_string_value(name)) : -1;
        if (r->tool_named < 0) {
            return bad(e, "tool_choice", "tool_choice names '%.64s', which is not among the tools",
                       json_string_value(name));
        }
    }
    if (r->tool_choice == SERVER_TOOL_REQUIRED && n == 0) {
        return bad(e, "tool_choice", "tool_choice is required but no tools are given");
    }
    return true;
}

bool server_parse_message_calls(const json_t *calls, size_t i, json_t **out, server_error *e) {
    *out = NULL;
    if (calls == NULL || json_is_null(calls) || json_array_size(calls) == 0) {
        return true;
    }
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(calls) || json_array_size(calls) > SERVER_MAX_TOOLS) {
        return bad(e, param, "%s must be a list of at most %d calls", param, SERVER_MAX_TOOLS);
    }
    json_t *list = json_array();
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *c = json_array_get(calls, k);
        const json_t *fn = json_object_get(c, "function");
        const json_t *name = json_object_get(fn, "name");
        const json_t *args = json_object_get(fn, "arguments");
        json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL)
                                              : json_incref((json_t *)args);
        if (!json_is_string(name) || !json_is_object(parsed)) {
            json_decref(parsed);
            json_decref(list);
            return bad(e, param,
                       "%s[%zu] must have function.name and function.arguments (a JSON object "
                       "or its text)",
                       param, k);
        }
        json_t *o = json_object();
        json_object_set(o, "name", (json_t *)name);
        json_object_set_new(o, "arguments", parsed);
        json_array_append_new(list, o);
    }
    *out = list;
    return true;
}

/* ---- writing the conversation ---- */

typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->oom) {
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        while (c < b->len + n + 1) {
            c *= 2;
        }
        char *q = lares_realloc(b->p, c);
        if (q == NULL) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(buf *b, const char *s) {
    put(b, s, strlen(s));
}

static void put_json(buf *b, const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s == NULL) {
        b->oom = true;
        return;
    }
    puts_(b, s);
    free(s);
}

/* {"type":"function","function":{...}}, as the templates list tools */
static json_t *openai_tool(const json_t *t) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("function"));
    json_object_set(o, "function", (json_t *)t);
    return o;
}

static void write_tools(buf *b, server_tool_style style, const json_t *tools) {
    if (style == SERVER_TOOLS_MISTRAL) {
        json_t *list = json_array();
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_array_append_new(list, openai_tool(json_array_get(tools, i)));
        }
        puts_(b, "[AVAILABLE_TOOLS]");
        put_json(b, list);
        puts_(b, "[/AVAILABLE_TOOLS]");
        json_decref(list);
        return;
    }
    if (style == SERVER_TOOLS_LLAMA3) {
        puts_(b, "You have access to the following functions. To call a function, respond with "
                 "only a JSON object in the format {\"name\": function name, \"parameters\": "
                 "dictionary of argument name and its value}. Do not use variables.\n\n");
    } else {
        puts_(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within <tools></tools> XML tags:\n"
                 "<tools>");
    }
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *o = openai_tool(json_array_get(tools, i));
        puts_(b, "\n");
        put_json(b, o);
        json_decref(o);
    }
    if (style == SERVER_TOOLS_HERMES) {
        puts_(b, "\n</tools>\n\nFor each function call, return a json object with function name "
                 "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                 "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    }
}

static void write_calls(buf *b, server_tool_style style, const json_t *calls) {
    if (style == SERVER_TOOLS_MISTRAL) {
        puts_(b, "[TOOL_CALLS]");
        put_json(b, calls);
        return;
    }
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *c = json_array_get(calls, k);
        json_t *o = json_object();
        json_object_set(o, "name", json_object_get(c, "name"));
        json_object_set(o, style == SERVER_TOOLS_LLAMA3 ? "parameters" : "arguments",
                        json_object_get(c, "arguments"));
        if (k > 0) {
            puts_(b, "\n");
        }
        puts_(b, style == SERVER_TOOLS_HERMES ? "<tool_call>\n" : "");
        put_json(b, o);
        puts_(b, style == SERVER_TOOLS_HERMES ? "\n</tool_call>" : "");
        json_decref(o);
    }
}

static void write_result(buf *b, server_tool_style style, const char *content) {
    if (style == SERVER_TOOLS_MISTRAL) {
        json_t *o = json_object();
        json_object_set_new(o, "content", json_string(content));
        puts_(b, "[TOOL_RESULTS]");
        put_json(b, o);
        puts_(b, "[/TOOL_RESULTS]");
        json_decref(o);
    } else if (style == SERVER_TOOLS_HERMES) {
        puts_(b, "<tool_response>\n");
        puts_(b, content);
        puts_(b, "\n</tool_response>");
    } else {
        puts_(b, content);
    }
}

/* keeps a written text in out->texts; NULL when out of memory */
static const char *keep(server_tools_render *out, buf *b) {
    if (b->oom || b->p == NULL) {
        lares_free(b->p);
        return NULL;
    }
    out->texts[out->n_texts++] = b->p;
    return b->p;
}

bool server_tools_render_messages(server_tool_style style, const server_request *r,
                                  server_tools_render *out, server_error *e) {
    memset(out, 0, sizeof *out);
    const size_t n = r->n_msgs;
    out->msgs = lares_calloc(n + 1, sizeof *out->msgs);
    out->texts = lares_calloc(n + 1, sizeof *out->texts);
    if (out->msgs == NULL || out->texts == NULL) {
        server_tools_render_free(out);
        return oom(e);
    }
    const bool show = r->tools != NULL && r->tool_choice != SERVER_TOOL_NONE;
    size_t last_user = n;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(r->msgs[i].role, "user") == 0) {
            last_user = i;
        }
    }
    size_t i = 0;
    if (show && style != SERVER_TOOLS_MISTRAL) { /* the tools go in the system prompt */
        buf b = {0};
        if (n > 0 && strcmp(r->msgs[0].role, "system") == 0) {
            puts_(&b, r->msgs[0].content);
            puts_(&b, "\n\n");
            i = 1;
        }
        write_tools(&b, style, r->tools);
        const char *t = keep(out, &b);
        if (t == NULL) {
            server_tools_render_free(out);
            return oom(e);
        }
        out->msgs[out->n_msgs++] = (lares_chat_msg){.role = "system", .content = t};
    }
    for (; i < n; i++) {
        const lares_chat_msg *m = &r->msgs[i];
        const json_t *calls = r->calls != NULL ? r->calls[i] : NULL;
        const bool tool = strcmp(m->role, "tool") == 0;
        const bool tools_here = show && style == SERVER_TOOLS_MISTRAL && i == last_user;
        if (!tool && calls == NULL && !tools_here) {
            out->msgs[out->n_msgs++] = *m;
            continue;
        }
        buf b = {0};
        if (tool) { /* consecutive results: one user turn */
            for (; i < n && strcmp(r->msgs[i].role, "tool") == 0; i++) {
                if (b.len > 0) {
                    puts_(&b, "\n");
                }
                write_result(&b, style, r->msgs[i].content);
            }
            i--;
        } else {
            if (tools_here) {
                write_tools(&b, style, r->tools);
            }
            puts_(&b, m->content);
            if (calls != NULL) {
                if (m->content[0] != '\0') {
                    puts_(&b, "\n");
                }
                write_calls(&b, style, calls);
            }
        }
        const char *t = keep(out, &b);
        if (t == NULL) {
            server_tools_render_free(out);
            return oom(e);
        }
        out->msgs[out->n_msgs++] = (lares_chat_msg){.role = tool ? "user" : m->role, .content = t};
    }
    return true;
}

void server_tools_render_free(server_tools_render *t) {
    for (size_t i = 0; i < t->n_texts; i++) {
        lares_free(t->texts[i]);
    }
    lares_free(t->texts);
    lares_free(t->msgs);
    memset(t, 0, sizeof *t);
}

const char *server_tools_forced_prefix(server_tool_style style) {
    return style == SERVER_TOOLS_HERMES    ? "<tool_call>\n"
           : style == SERVER_TOOLS_MISTRAL ? "[TOOL_CALLS]"
                                           : "";
}

server_schema *server_tools_call_schema(server_tool_style style, const server_request *r,
                                        server_error *e) {
    const char *names[SERVER_MAX_TOOLS];
    const json_t *params[SERVER_MAX_TOOLS];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(r->tools); i++) {
        if (r->tool_choice == SERVER_TOOL_NAMED && (int32_t)i != r->tool_named) {
            continue;
        }
        const json_t *t = json_array_get(r->tools, i);
        names[n] = json_string_value(json_object_get(t, "name"));
        params[n] = json_object_get(t, "parameters");
        n++;
    }
    return server_schema_calls(names, params, n,
                               style == SERVER_TOOLS_LLAMA3 ? "parameters" : "arguments",
                               style == SERVER_TOOLS_MISTRAL, e);
}

/* ---- reading the answer ---- */

static const char *skip_space(const char *p, const char *end) {
    while (p < end && isspace((unsigned char)*p)) {
        p++;
    }
    return p;
}

static const char *find(const char *p, const char *end, const char *needle) {
    const size_t n = strlen(needle);
    for (; p + n <= end; p++) {
        if (memcmp(p, needle, n) == 0) {
            return p;
        }
    }
    return NULL;
}

/* a call object {"name", "arguments" | "parameters"} naming one of tools */
static json_t *read_call(const json_t *v, const json_t *tools) {
    const json_t *name = json_object_get(v, "name");
    const json_t *args = json_object_get(v, "arguments");
    if (args == NULL) {
        args = json_object_get(v, "parameters");
    }
    json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL)
                                          : json_incref((json_t *)args);
    if (!json_is_object(v) || !json_is_string(name) || !json_is_object(parsed) ||
        tool_index(tools, json_string_value(name)) < 0) {
        json_decref(parsed);
        return NULL;
    }
    json_t *o = json_object();
    json_object_set(o, "name", (json_t *)name);
    json_object_set_new(o, "arguments", parsed);
    return o;
}

/* JSON text [p, end) with only space after it */
static json_t *load(const char *p, const char *end) {
    return json_loadb(p, (size_t)(end - p), JSON_DECODE_ANY, NULL);
}

static char *trimmed_copy(const char *p, const char *end) {
    p = skip_space(p, end);
    while (end > p && isspace((unsigned char)end[-1])) {
        end--;
    }
    return end > p ? lares_strndup(p, (size_t)(end - p)) : NULL;
}

json_t *server_tools_parse_output(server_tool_style style, const json_t *tools, const char *text,
                                  size_t len, char **content) {
    *content = NULL;
    const char *p = text, *end = text + len;
    json_t *calls = json_array();
    const char *content_end = end;
    bool ok = json_array_size(tools) > 0;
    if (ok && style == SERVER_TOOLS_HERMES) {
        const char *at = find(p, end, "<tool_call>");
        ok = at != NULL;
        content_end = at != NULL ? at : end;
        while (ok && at != NULL) {
            const char *body = at + strlen("<tool_call>");
            const char *close = find(body, end, "</tool_call>");
            const char *stop = close != NULL ? close : end;
            json_t *v = load(body, stop);
            json_t *c = read_call(v, tools);
            json_decref(v);
            ok = c != NULL;
            if (ok) {
                json_array_append_new(calls, c);
            }
            const char *next = close != NULL ? close + strlen("</tool_call>") : end;
            next = skip_space(next, end);
            at = next < end ? find(next, end, "<tool_call>") : NULL;
            ok = ok && (next == end || at == next); /* only calls after the first */
        }
    } else if (ok) {
        const char *q = skip_space(p, end);
        const char *tag = style == SERVER_TOOLS_MISTRAL ? "[TOOL_CALLS]" : "<|python_tag|>";
        if ((size_t)(end - q) >= strlen(tag) && memcmp(q, tag, strlen(tag)) == 0) {
            q += strlen(tag);
        }
        json_t *v = load(q, end);
        content_end = p;
        if (style == SERVER_TOOLS_MISTRAL && json_is_array(v) && json_array_size(v) > 0) {
            for (size_t k = 0; k < json_array_size(v) && ok; k++) {
                json_t *c = read_call(json_array_get(v, k), tools);
                ok = c != NULL && json_array_size(calls) < SERVER_MAX_TOOLS;
                if (c != NULL) {
                    json_array_append_new(calls, c);
                }
            }
        } else {
            json_t *c = style == SERVER_TOOLS_LLAMA3 ? read_call(v, tools) : NULL;
            ok = c != NULL;
            if (ok) {
                json_array_append_new(calls, c);
            }
        }
        json_decref(v);
    }
    if (!ok || json_array_size(calls) == 0) {
        json_decref(calls);
        return NULL;
    }
    *content = trimmed_copy(p, content_end);
    return calls;
}

json_t *server_tools_openai_calls(const json_t *calls, const char *id_base, int32_t choice,
                                  bool chunk) {
    json_t *list = json_array();
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *c = json_array_get(calls, k);
        char id[96];
        snprintf(id, sizeof id, "call_%s_%d_%zu", id_base, (int)choice, k);
        json_t *fn = json_object();
        json_object_set(fn, "name", json_object_get(c, "name"));
        char *args = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT);
        json_object_set_new(fn, "arguments", json_string(args ? args : "{}"));
        free(args);
        json_t *o = json_object();
        if (chunk) {
            json_object_set_new(o, "index", json_integer((json_int_t)k));
        }
        json_object_set_new(o, "id", json_string(id));
        json_object_set_new(o, "type", json_string("function"));
        json_object_set_new(o, "function", fn);
        json_array_append_new(list, o);
    }
    return list;
}
