/*
 * Request bodies of /v1/chat/completions and /v1/completions: JSON in,
 * a validated server_request out. Field names, types and ranges follow the
 * OpenAI API reference (Chat Completions, Completions); lares's additions
 * (top_k, min_p, repeat_penalty) are named as in other local servers. Every
 * problem is a 400 naming the field. Unknown fields are ignored, as clients
 * send many; known fields lares cannot honour (tools, logit_bias, echo,
 * suffix, best_of > 1) are refused, not dropped. response_format is
 * format.c's.
 */
#include "core/core.h"
#include "server/schema.h"
#include "server/tools.h"

#include <math.h>
#include <stdarg.h>

static const char *const INVALID = "invalid_request_error";

bool server_fail(server_error *e, int status, const char *type, const char *code, const char *param,
                 const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return false;
}

json_t *server_error_json(const server_error *e) {
    json_t *o = json_object();
    json_object_set_new(o, "message", json_string(e->msg));
    json_object_set_new(o, "type", json_string(e->type ? e->type : "server_error"));
    json_object_set_new(o, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(o, "code", e->code ? json_string(e->code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", o);
    return root;
}

void server_request_free(server_request *r) {
    if (r == NULL) {
        return;
    }
    lares_free(r->model);
    for (size_t i = 0; i < r->n_msgs; i++) {
        lares_free((char *)r->msgs[i].content);
    }
    lares_free(r->msgs);
    for (size_t i = 0; r->calls != NULL && i < r->n_msgs; i++) {
        json_decref(r->calls[i]);
    }
    lares_free(r->calls);
    json_decref(r->tools);
    lares_free(r->prompt);
    lares_free(r->prompt_ids);
    for (size_t i = 0; i < r->n_stop; i++) {
        lares_free(r->stop[i]);
    }
    for (size_t i = 0; i < r->n_inputs; i++) {
        lares_free(r->inputs[i].text);
        lares_free(r->inputs[i].ids);
    }
    lares_free(r->inputs);
    server_schema_free(r->format);
    memset(r, 0, sizeof *r);
}

static bool bad(server_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool bad(server_error *e, const char *param, const char *fmt, ...) {
    char msg[LARES_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return server_fail(e, 400, INVALID, NULL, param, "%s", msg);
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* A JSON string as an owned C string; strings holding NUL are refused,
 * since everything downstream is C text. */
static bool dup_string(const json_t *v, const char *param, char **out, size_t *len,
                       server_error *e) {
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (memchr(s, '\0', n) != NULL) {
        return bad(e, param, "%s contains a NUL character", param);
    }
    if ((*out = lares_strndup(s, n)) == NULL) {
        return server_fail(e, 500, "server_error", NULL, param, "out of memory for %s", param);
    }
    if (len != NULL) {
        *len = n;
    }
    return true;
}

/* number fields: absent or null leaves *out as it is */
static bool get_number(const json_t *root, const char *key, double lo, double hi, float *out,
                       server_error *e) {
    const json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        return true;
    }
    if (!json_is_number(v)) {
        return bad(e, key, "%s must be a number, not %s", key, type_name(v));
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        return bad(e, key, "%s is %g; it must be from %g to %g", key, d, lo, hi);
    }
    *out = (float)d;
    return true;
}

static bool get_int(const json_t *root, const char *key, json_int_t lo, json_int_t hi,
                    json_int_t *out, bool *given, server_error *e) {
    const json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        return true;
    }
    if (!json_is_integer(v)) {
        return bad(e, key, "%s must be an integer, not %s", key, type_name(v));
    }
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi) {
        return bad(e, key,
                   "%s is %" JSON_INTEGER_FORMAT "; it must be from %" JSON_INTEGER_FORMAT
                   " to %" JSON_INTEGER_FORMAT,
                   key, i, lo, hi);
    }
    *out = i;
    if (given != NULL) {
        *given = true;
    }
    return true;
}

static bool get_bool(const json_t *root, const char *key, bool *out, server_error *e) {
    const json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        return true;
    }
    if (!json_is_boolean(v)) {
        return bad(e, key, "%s must be a boolean, not %s", key, type_name(v));
    }
    *out = json_is_true(v);
    return true;
}

/* "stop": a string or a list of up to four */
static bool parse_stop(const json_t *root, server_request *r, server_error *e) {
    const json_t *v = json_object_get(root, "stop");
    if (v == NULL || json_is_null(v)) {
        return true;
    }
    const json_t *one[1] = {v};
    const json_t *const *items = one;
    size_t n = 1;
    json_t *arr_items[SERVER_MAX_STOP];
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > SERVER_MAX_STOP) {
            return bad(e, "stop", "stop has %zu strings; at most %d are allowed", n,
                       SERVER_MAX_STOP);
        }
        for (size_t i = 0; i < n; i++) {
            arr_items[i] = json_array_get(v, i);
        }
        items = (const json_t *const *)arr_items;
    } else if (!json_is_string(v)) {
        return bad(e, "stop", "stop must be a string or a list of strings, not %s", type_name(v));
    }
    for (size_t i = 0; i < n; i++) {
        if (!json_is_string(items[i])) {
            return bad(e, "stop", "stop[%zu] must be a string, not %s", i, type_name(items[i]));
        }
        size_t len = json_string_length(items[i]);
        if (len == 0 || len > SERVER_MAX_STOP_BYTES) {
            return bad(e, "stop", "stop[%zu] has %zu bytes; a stop string has 1 to %d", i, len,
                       SERVER_MAX_STOP_BYTES);
        }
        if (!dup_string(items[i], "stop", &r->stop[r->n_stop], &r->stop_len[r->n_stop], e)) {
            return false;
        }
        r->n_stop++;
    }
    return true;
}

/* message content: a string, or a list of {"type": "text", "text": ...} parts */
static bool parse_content(const json_t *c, size_t i, const char *role, char **out,
                          server_error *e) {
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (json_is_string(c)) {
        return dup_string(c, param, out, NULL, e);
    }
    if (json_is_null(c) || c == NULL) {
        if (strcmp(role, "assistant") == 0) {
            *out = lares_strdup(""); /* an assistant turn that only called tools */
            return *out != NULL ||
                   server_fail(e, 500, "server_error", NULL, param, "out of memory");
        }
        return bad(e, param, "%s is missing", param);
    }
    if (!json_is_array(c)) {
        return bad(e, param, "%s must be a string or a list of parts, not %s", param, type_name(c));
    }
    size_t total = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *part = json_array_get(c, k);
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type)) {
            return bad(e, param, "%s[%zu] must be an object with a \"type\"", param, k);
        }
        if (strcmp(json_string_value(type), "text") != 0) {
            return bad(e, param, "%s[%zu] has type '%.32s'; only text parts are supported", param,
                       k, json_string_value(type));
        }
        if (!json_is_string(text)) {
            return bad(e, param, "%s[%zu].text must be a string", param, k);
        }
        total += json_string_length(text);
    }
    char *s = lares_alloc_array(total + 1, 1);
    if (s == NULL) {
        return server_fail(e, 500, "server_error", NULL, param, "out of memory");
    }
    size_t at = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *text = json_object_get(json_array_get(c, k), "text");
        size_t n = json_string_length(text);
        memcpy(s + at, json_string_value(text), n);
        at += n;
    }
    s[at] = '\0';
    if (memchr(s, '\0', at) != NULL) {
        lares_free(s);
        return bad(e, param, "%s contains a NUL character", param);
    }
    *out = s;
    return true;
}

static bool parse_messages(const json_t *root, server_request *r, server_error *e) {
    const json_t *v = json_object_get(root, "messages");
    if (v == NULL || json_is_null(v)) {
        return bad(e, "messages", "messages is required");
    }
    if (!json_is_array(v)) {
        return bad(e, "messages", "messages must be a list, not %s", type_name(v));
    }
    size_t n = json_array_size(v);
    if (n == 0) {
        return bad(e, "messages", "messages is empty; at least one message is needed");
    }
    if (n > SERVER_MAX_MESSAGES) {
        return bad(e, "messages", "messages has %zu entries; at most %d are allowed", n,
                   SERVER_MAX_MESSAGES);
    }
    if ((r->msgs = lares_calloc(n, sizeof *r->msgs)) == NULL) {
        return server_fail(e, 500, "server_error", NULL, "messages", "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(v, i);
        char param[48];
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_object(m)) {
            return bad(e, "messages", "messages[%zu] must be an object, not %s", i, type_name(m));
        }
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) {
            return bad(e, param, "%s must be a string", param);
        }
        const char *rs = json_string_value(role);
        const char *canon = NULL;
        if (strcmp(rs, "system") == 0 || strcmp(rs, "developer") == 0) {
            canon = "system";
        } else if (strcmp(rs, "user") == 0) {
            canon = "user";
        } else if (strcmp(rs, "assistant") == 0) {
            canon = "assistant";
        } else if (strcmp(rs, "tool") == 0) {
            canon = "tool";
        } else {
            return bad(e, param,
                       "%s is '%.32s'; lares takes system, developer, user, assistant and tool",
                       param, rs);
        }
        json_t *calls = NULL;
        if (!server_parse_message_calls(json_object_get(m, "tool_calls"), i, &calls, e)) {
            return false;
        }
        if (calls != NULL && strcmp(canon, "assistant") != 0) {
            json_decref(calls);
            return bad(e, "messages", "messages[%zu] has tool_calls but is not the assistant's", i);
        }
        if (calls != NULL && r->calls == NULL &&
            (r->calls = lares_calloc(n, sizeof *r->calls)) == NULL) {
            json_decref(calls);
            return server_fail(e, 500, "server_error", NULL, "messages", "out of memory");
        }
        if (calls != NULL) {
            r->calls[i] = calls;
        }
        char *content = NULL;
        if (!parse_content(json_object_get(m, "content"), i, canon, &content, e)) {
            return false;
        }
        r->msgs[i] = (lares_chat_msg){.role = canon, .content = content};
        r->n_msgs = i + 1;
    }
    return true;
}

/* completions: "prompt" is a string, a list of one string, or token ids */
static bool parse_prompt(const json_t *root, server_request *r, server_error *e) {
    const json_t *v = json_object_get(root, "prompt");
    if (v == NULL || json_is_null(v)) {
        return bad(e, "prompt", "prompt is required");
    }
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0))) {
        v = json_array_get(v, 0);
    }
    if (json_is_string(v)) {
        return dup_string(v, "prompt", &r->prompt, &r->prompt_len, e);
    }
    if (!json_is_array(v)) {
        return bad(e, "prompt", "prompt must be a string or a list of token ids, not %s",
                   type_name(v));
    }
    size_t n = json_array_size(v);
    if (n == 0) {
        return bad(e, "prompt", "prompt is an empty list");
    }
    if (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))) {
        return bad(e, "prompt", "prompt holds %zu prompts; lares takes one per request", n);
    }
    if ((r->prompt_ids = lares_alloc_array(n, sizeof *r->prompt_ids)) == NULL) {
        return server_fail(e, 500, "server_error", NULL, "prompt", "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(v, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            return bad(e, "prompt", "prompt[%zu] is not a token id", i);
        }
        r->prompt_ids[i] = (int32_t)json_integer_value(t);
    }
    r->n_prompt_ids = n;
    return true;
}

/* fields lares knows and cannot honour are refused */
static bool refuse_unsupported(const json_t *root, server_kind kind, server_error *e) {
    const json_t *tools = json_object_get(root, "tools");
    if (kind != SERVER_CHAT && tools != NULL && !json_is_null(tools) &&
        json_array_size(tools) > 0) {
        return bad(e, "tools", "tools are for chat completions");
    }
    const json_t *bias = json_object_get(root, "logit_bias");
    if (bias != NULL && !json_is_null(bias) && json_object_size(bias) > 0) {
        return bad(e, "logit_bias", "logit_bias is not supported");
    }
    if (kind == SERVER_COMPLETION) {
        bool echo = false;
        if (!get_bool(root, "echo", &echo, e)) {
            return false;
        }
        if (echo) {
            return bad(e, "echo", "echo is not supported");
        }
        const json_t *suffix = json_object_get(root, "suffix");
        if (suffix != NULL && !json_is_null(suffix)) {
            return bad(e, "suffix", "suffix is not supported");
        }
        json_int_t best_of = 1;
        if (!get_int(root, "best_of", 1, 1, &best_of, NULL, e)) {
            return false;
        }
    }
    return true;
}

static bool parse_fields(const json_t *root, server_kind kind, server_request *r, server_error *e) {
    const json_t *model = json_object_get(root, "model");
    if (model == NULL || json_is_null(model)) {
        return bad(e, "model", "model is required (GET /v1/models lists it)");
    }
    if (!json_is_string(model)) {
        return bad(e, "model", "model must be a string, not %s", type_name(model));
    }
    if (!dup_string(model, "model", &r->model, NULL, e) || !refuse_unsupported(root, kind, e) ||
        !server_parse_response_format(json_object_get(root, "response_format"), r, e) ||
        (kind == SERVER_CHAT && !server_parse_tools(json_object_get(root, "tools"),
                                                    json_object_get(root, "tool_choice"), r, e))) {
        return false;
    }
    if (kind == SERVER_CHAT ? !parse_messages(root, r, e) : !parse_prompt(root, r, e)) {
        return false;
    }
    if (r->format != NULL &&
        (r->tool_choice == SERVER_TOOL_REQUIRED || r->tool_choice == SERVER_TOOL_NAMED)) {
        return bad(e, "response_format",
                   "response_format cannot be combined with a tool_choice that forces a call");
    }
    /* OpenAI's defaults: temperature 1, top_p 1, no other truncation */
    lares_sampler_opts *s = &r->sampler;
    *s = lares_sampler_opts_default();
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->top_k = 0;
    s->min_p = 0.0f;
    json_int_t top_k = 0, seed = 0, max_tokens = kind == SERVER_CHAT ? -1 : 16;
    json_int_t top_lp = 0, lp_n = -1, n = 1;
    bool lp = false;
    if (!get_number(root, "temperature", 0, 2, &s->temperature, e) ||
        !get_number(root, "top_p", 0, 1, &s->top_p, e) ||
        !get_number(root, "min_p", 0, 1, &s->min_p, e) ||
        !get_number(root, "presence_penalty", -2, 2, &s->presence_penalty, e) ||
        !get_number(root, "frequency_penalty", -2, 2, &s->frequency_penalty, e) ||
        !get_number(root, "repeat_penalty", 0.01, 100, &s->repeat_penalty, e) ||
        !get_int(root, "top_k", 0, INT32_MAX, &top_k, NULL, e) ||
        !get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &r->seed_given, e) ||
        !get_int(root, "max_tokens", 0, INT32_MAX, &max_tokens, NULL, e) ||
        !get_int(root, "max_completion_tokens", 0, INT32_MAX, &max_tokens, NULL, e) ||
        !get_int(root, "n", 1, SERVER_MAX_CHOICES, &n, NULL, e) ||
        !get_bool(root, "stream", &r->stream, e) || !parse_stop(root, r, e)) {
        return false;
    }
    s->top_k = (int32_t)top_k;
    s->seed = (uint64_t)seed;
    r->max_tokens = (int32_t)max_tokens;
    r->n_choices = (int32_t)n;
    const json_t *so = json_object_get(root, "stream_options");
    if (so != NULL && !json_is_null(so)) {
        if (!json_is_object(so)) {
            return bad(e, "stream_options", "stream_options must be an object, not %s",
                       type_name(so));
        }
        if (!get_bool(so, "include_usage", &r->include_usage, e)) {
            return false;
        }
    }
    if (kind == SERVER_CHAT) {
        if (!get_bool(root, "logprobs", &lp, e) ||
            !get_int(root, "top_logprobs", 0, SERVER_MAX_LOGPROBS, &top_lp, NULL, e)) {
            return false;
        }
        if (top_lp > 0 && !lp) {
            return bad(e, "top_logprobs", "top_logprobs needs logprobs: true");
        }
        r->logprobs = lp;
        r->top_logprobs = (int32_t)top_lp;
    } else {
        /* completions: logprobs is the number of alternatives (0..5 at OpenAI) */
        if (!get_int(root, "logprobs", 0, SERVER_MAX_LOGPROBS, &lp_n, NULL, e)) {
            return false;
        }
        r->logprobs = lp_n >= 0;
        r->top_logprobs = lp_n > 0 ? (int32_t)lp_n : 0;
    }
    return true;
}

/* token ids: a non-empty list of integers */
static bool parse_ids(const json_t *v, const char *param, int32_t **out, size_t *n_out,
                      server_error *e) {
    const size_t n = json_array_size(v);
    if (n == 0) {
        return bad(e, "input", "%s is an empty list", param);
    }
    if ((*out = lares_alloc_array(n, sizeof **out)) == NULL) {
        return server_fail(e, 500, "server_error", NULL, "input", "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(v, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            return bad(e, "input", "%s[%zu] is not a token id", param, i);
        }
        (*out)[i] = (int32_t)json_integer_value(t);
    }
    *n_out = n;
    return true;
}

/* embeddings: "input" is a string, a list of strings, a list of token ids,
 * or a list of lists of token ids (OpenAI's Embeddings API) */
static bool parse_inputs(const json_t *root, server_request *r, server_error *e) {
    const json_t *v = json_object_get(root, "input");
    if (v == NULL || json_is_null(v)) {
        return bad(e, "input", "input is required");
    }
    const bool one = json_is_string(v) || (json_is_array(v) && json_array_size(v) > 0 &&
                                           json_is_integer(json_array_get(v, 0)));
    if (!one && !json_is_array(v)) {
        return bad(e, "input", "input must be a string or a list, not %s", type_name(v));
    }
    const size_t n = one ? 1 : json_array_size(v);
    if (n == 0) {
        return bad(e, "input", "input is an empty list");
    }
    if (n > SERVER_MAX_INPUTS) {
        return bad(e, "input", "input has %zu entries; at most %d are allowed", n,
                   SERVER_MAX_INPUTS);
    }
    if ((r->inputs = lares_calloc(n, sizeof *r->inputs)) == NULL) {
        return server_fail(e, 500, "server_error", NULL, "input", "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *x = one ? v : json_array_get(v, i);
        server_input *in = &r->inputs[i];
        char param[32];
        snprintf(param, sizeof param, one ? "input" : "input[%zu]", i);
        r->n_inputs = i + 1;
        if (json_is_string(x)) {
            if (json_string_length(x) == 0) {
                return bad(e, "input", "%s is an empty string", param);
            }
            if (!dup_string(x, "input", &in->text, &in->len, e)) {
                return false;
            }
        } else if (json_is_array(x)) {
            if (!parse_ids(x, param, &in->ids, &in->n_ids, e)) {
                return false;
            }
        } else {
            return bad(e, "input", "%s must be a string or a list of token ids, not %s", param,
                       type_name(x));
        }
    }
    return true;
}

static bool parse_embedding(const json_t *root, server_request *r, server_error *e) {
    const json_t *model = json_object_get(root, "model");
    if (model == NULL || json_is_null(model)) {
        return bad(e, "model", "model is required (GET /v1/models lists it)");
    }
    if (!json_is_string(model)) {
        return bad(e, "model", "model must be a string, not %s", type_name(model));
    }
    if (!dup_string(model, "model", &r->model, NULL, e) || !parse_inputs(root, r, e)) {
        return false;
    }
    const json_t *fmt = json_object_get(root, "encoding_format");
    if (fmt != NULL && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (f == NULL || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0)) {
            return bad(e, "encoding_format", "encoding_format must be \"float\" or \"base64\"");
        }
        r->base64 = strcmp(f, "base64") == 0;
    }
    json_int_t dims = 0;
    if (!get_int(root, "dimensions", 1, INT32_MAX, &dims, NULL, e)) {
        return false;
    }
    r->dimensions = (int32_t)dims;
    return true;
}

bool server_request_parse(server_kind kind, const char *body, size_t len, server_request *out,
                          server_error *e) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        return bad(e, NULL, "the body is not valid JSON: %s at line %d column %d", je.text, je.line,
                   je.column);
    }
    bool ok = !json_is_object(root)
                  ? bad(e, NULL, "the body must be a JSON object, not %s", type_name(root))
              : kind == SERVER_EMBEDDING ? parse_embedding(root, out, e)
                                         : parse_fields(root, kind, out, e);
    json_decref(root);
    if (!ok) {
        server_request_free(out);
        out->kind = kind;
    }
    return ok;
}
