/*
 * Anthropic's Messages API (POST /v1/messages), for agents and editors that
 * speak it. As with Ollama's (ollama.c), a request is translated into the
 * OpenAI-shaped chat request it amounts to, so it shares every check, the
 * queue and the worker; only the reply differs:
 *
 * - not streamed: {"id", "type": "message", "role": "assistant", "model",
 *   "content": [{"type": "text", "text"}], "stop_reason", "stop_sequence",
 *   "usage": {"input_tokens", "output_tokens"}};
 * - streamed: server-sent events with an "event:" line each: message_start,
 *   content_block_start, content_block_delta (text_delta) per piece of text,
 *   content_block_stop, message_delta (stop reason, output tokens),
 *   message_stop; a failure is an "error" event;
 * - errors: {"type": "error", "error": {"type", "message"}}.
 *
 * stop_reason: end_turn (the model ended its turn, or the generation was
 * cancelled), max_tokens, stop_sequence (with the sequence), tool_use.
 *
 * Tools: tools ({name, description, input_schema}) and tool_choice (auto,
 * any, tool, none) become OpenAI's; an assistant's tool_use blocks become
 * tool_calls, a user's tool_result blocks tool messages; calls found in the
 * answer (tools.c) come back as tool_use blocks (streamed: a block each, its
 * input as one input_json_delta).
 */
#include "server/anthropic.h"

#include "core/core.h"

/* "system": a string or a list of text blocks, as the first message */
static bool add_system(json_t *msgs, const json_t *sys, server_error *e) {
    if (sys == NULL || json_is_null(sys)) {
        return true;
    }
    if (!json_is_string(sys) && !json_is_array(sys)) {
        return server_fail(e, 400, "invalid_request_error", NULL, "system",
                           "system must be a string or a list of text blocks");
    }
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("system"));
    json_object_set(m, "content", (json_t *)sys);
    json_array_insert_new(msgs, 0, m);
    return true;
}

static bool invalid(server_error *e, const char *param, const char *msg) {
    return server_fail(e, 400, "invalid_request_error", NULL, param, "%s", msg);
}

/* a tool_result's content (a string or text blocks) as one string */
static json_t *result_text(const json_t *c) {
    if (json_is_string(c)) {
        return json_incref((json_t *)c);
    }
    json_t *all = json_string("");
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *t = json_object_get(json_array_get(c, k), "text");
        if (json_is_string(t)) {
            char *joined = NULL;
            const size_t a = json_string_length(all), b = json_string_length(t);
            if ((joined = lares_alloc(a + b + 1)) != NULL) {
                memcpy(joined, json_string_value(all), a);
                memcpy(joined + a, json_string_value(t), b);
                json_decref(all);
                all = json_stringn(joined, a + b);
                lares_free(joined);
            }
        }
    }
    return all;
}

/* One Anthropic message into OpenAI's: text blocks join; an assistant's
 * tool_use blocks become tool_calls; a user's tool_result blocks become tool
 * messages, before the user's text. */
static bool add_message(json_t *out, const json_t *m, size_t i, server_error *e) {
    const json_t *content = json_object_get(m, "content");
    const json_t *role = json_object_get(m, "role");
    if (!json_is_array(content)) {
        json_array_append(out, (json_t *)m);
        return true;
    }
    const bool assistant =
        json_is_string(role) && strcmp(json_string_value(role), "assistant") == 0;
    json_t *text = json_array(), *calls = json_array();
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *b = json_array_get(content, k);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (type != NULL && strcmp(type, "text") == 0) {
            json_array_append(text, (json_t *)b);
        } else if (type != NULL && strcmp(type, "tool_use") == 0 && assistant) {
            json_t *fn = json_object();
            json_object_set(fn, "name", json_object_get(b, "name"));
            json_object_set(fn, "arguments", json_object_get(b, "input"));
            json_t *c = json_object();
            json_object_set(c, "id", json_object_get(b, "id"));
            json_object_set_new(c, "type", json_string("function"));
            json_object_set_new(c, "function", fn);
            json_array_append_new(calls, c);
        } else if (type != NULL && strcmp(type, "tool_result") == 0 && !assistant) {
            json_t *t = json_object();
            json_object_set_new(t, "role", json_string("tool"));
            json_object_set(t, "tool_call_id", json_object_get(b, "tool_use_id"));
            json_object_set_new(t, "content", result_text(json_object_get(b, "content")));
            json_array_append_new(out, t);
        } else {
            json_decref(text);
            json_decref(calls);
            char msg[256];
            snprintf(msg, sizeof msg,
                     "messages[%zu].content[%zu] has type '%.32s'; lares takes text, "
                     "tool_use (assistant) and tool_result (user)",
                     i, k, type ? type : "?");
            return invalid(e, "messages", msg);
        }
    }
    if (json_array_size(text) > 0 || json_array_size(calls) > 0) {
        json_t *o = json_object();
        json_object_set(o, "role", (json_t *)role);
        json_object_set_new(o, "content", json_array_size(text) > 0 ? text : json_null());
        if (json_array_size(text) == 0) {
            json_decref(text);
        }
        if (json_array_size(calls) > 0) {
            json_object_set(o, "tool_calls", calls);
        }
        json_array_append_new(out, o);
    } else {
        json_decref(text);
    }
    json_decref(calls);
    return true;
}

/* tools [{"name","description","input_schema"}] and tool_choice into OpenAI's */
static bool add_tools(json_t *req, const json_t *in, server_error *e) {
    const json_t *tools = json_object_get(in, "tools");
    if (tools != NULL && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            return invalid(e, "tools", "tools must be a list");
        }
        json_t *list = json_array();
        for (size_t i = 0; i < json_array_size(tools); i++) {
            const json_t *t = json_array_get(tools, i);
            const json_t *type = json_object_get(t, "type");
            if (type != NULL &&
                !(json_is_string(type) && strcmp(json_string_value(type), "custom") == 0)) {
                json_decref(list);
                return invalid(e, "tools",
                               "only custom tools (name, input_schema) are supported; "
                               "server tools are not");
            }
            json_t *fn = json_object();
            json_object_set(fn, "name", json_object_get(t, "name"));
            if (json_object_get(t, "description") != NULL) {
                json_object_set(fn, "description", json_object_get(t, "description"));
            }
            if (json_object_get(t, "input_schema") != NULL) {
                json_object_set(fn, "parameters", json_object_get(t, "input_schema"));
            }
            json_t *o = json_object();
            json_object_set_new(o, "type", json_string("function"));
            json_object_set_new(o, "function", fn);
            json_array_append_new(list, o);
        }
        json_object_set_new(req, "tools", list);
    }
    const json_t *choice = json_object_get(in, "tool_choice");
    if (choice == NULL || json_is_null(choice)) {
        return true;
    }
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (type != NULL && strcmp(type, "tool") == 0) {
        json_t *c = json_object(), *fn = json_object();
        json_object_set(fn, "name", json_object_get(choice, "name"));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", fn);
        json_object_set_new(req, "tool_choice", c);
        return true;
    }
    const char *mapped = type == NULL                ? NULL
                         : strcmp(type, "auto") == 0 ? "auto"
                         : strcmp(type, "any") == 0  ? "required"
                         : strcmp(type, "none") == 0 ? "none"
                                                     : NULL;
    if (mapped == NULL) {
        return invalid(e, "tool_choice", "tool_choice.type must be auto, any, tool or none");
    }
    json_object_set_new(req, "tool_choice", json_string(mapped));
    return true;
}

bool server_anthropic_parse(const char *body, size_t len, server_request *out, server_error *e) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *in = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (in == NULL || !json_is_object(in)) {
        json_decref(in);
        return server_fail(e, 400, "invalid_request_error", NULL, NULL,
                           "the body is not a JSON object%s%s", in == NULL ? ": " : "",
                           in == NULL ? je.text : "");
    }
    json_t *req = NULL;
    const json_t *thinking = json_object_get(in, "thinking");
    const json_t *tt = json_object_get(thinking, "type");
    if (json_is_string(tt) && strcmp(json_string_value(tt), "disabled") != 0) {
        server_fail(e, 400, "invalid_request_error", NULL, "thinking", "thinking is not supported");
        goto done;
    }
    if (!json_is_integer(json_object_get(in, "max_tokens"))) {
        server_fail(e, 400, "invalid_request_error", NULL, "max_tokens",
                    "max_tokens is required and must be an integer");
        goto done;
    }
    req = json_object();
    static const char *const same[] = {"model", "max_tokens", "temperature",
                                       "top_p", "top_k",      "stream"};
    for (size_t i = 0; i < LARES_ARRAY_LEN(same); i++) {
        json_t *v = json_object_get(in, same[i]);
        if (v != NULL) {
            json_object_set(req, same[i], v);
        }
    }
    json_t *stop = json_object_get(in, "stop_sequences");
    if (stop != NULL) {
        json_object_set(req, "stop", stop);
    }
    json_t *msgs = json_object_get(in, "messages");
    if (!json_is_array(msgs)) {
        server_fail(e, 400, "invalid_request_error", NULL, "messages",
                    "messages is required and must be a list");
        json_decref(req);
        req = NULL;
        goto done;
    }
    json_t *copy = json_array();
    bool ok_msgs = add_tools(req, in, e);
    for (size_t i = 0; ok_msgs && i < json_array_size(msgs); i++) {
        ok_msgs = add_message(copy, json_array_get(msgs, i), i, e);
    }
    if (!ok_msgs || !add_system(copy, json_object_get(in, "system"), e)) {
        json_decref(copy);
        json_decref(req);
        req = NULL;
        goto done;
    }
    json_object_set_new(req, "messages", copy);
done:
    json_decref(in);
    if (req == NULL) {
        return false;
    }
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (s == NULL) {
        return server_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    const bool ok = server_request_parse(SERVER_CHAT, s, strlen(s), out, e);
    free(s);
    if (ok) {
        out->dialect = SERVER_ANTHROPIC;
    }
    return ok;
}

json_t *server_anthropic_error_json(const server_error *e) {
    const char *type = e->status == 401   ? "authentication_error"
                       : e->status == 403 ? "permission_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status == 413 ? "request_too_large"
                       : e->status == 503 ? "overloaded_error"
                       : e->status >= 500 ? "api_error"
                                          : "invalid_request_error";
    json_t *err = json_object();
    json_object_set_new(err, "type", json_string(type));
    json_object_set_new(err, "message", json_string(e->msg));
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "error", err);
    return o;
}

/* "event: NAME\ndata: JSON\n\n" in one write; takes the reference to o */
static void event(server_job *j, const char *name, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s == NULL) {
        return;
    }
    const size_t n = strlen(name) + strlen(s) + sizeof "event: \ndata: \n\n";
    char *ev = lares_alloc_array(n, 1);
    if (ev != NULL) {
        snprintf(ev, n, "event: %s\ndata: %s\n\n", name, s);
        server_job_write(j, ev, strlen(ev));
        lares_free(ev);
    }
    free(s);
}

static json_t *typed(const char *type) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(type));
    return o;
}

static json_t *usage(size_t in, size_t out) {
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer((json_int_t)in));
    json_object_set_new(u, "output_tokens", json_integer((json_int_t)out));
    return u;
}

/* the message object, without content and stop reason when streamed */
static json_t *message(const server_job *j, json_t *content, const char *reason,
                       const char *stop_seq, size_t out_tokens) {
    json_t *m = typed("message");
    char id[64];
    snprintf(id, sizeof id, "msg_%s", j->id);
    json_object_set_new(m, "id", json_string(id));
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "model", json_string(j->req.model));
    json_object_set_new(m, "content", content);
    json_object_set_new(m, "stop_reason", reason ? json_string(reason) : json_null());
    json_object_set_new(m, "stop_sequence", stop_seq ? json_string(stop_seq) : json_null());
    json_object_set_new(m, "usage", usage(j->n_ids, out_tokens));
    return m;
}

void server_anthropic_start(server_job *j) {
    json_t *o = typed("message_start");
    json_object_set_new(o, "message", message(j, json_array(), NULL, NULL, 0));
    event(j, "message_start", o);
    o = typed("content_block_start");
    json_object_set_new(o, "index", json_integer(0));
    json_t *block = typed("text");
    json_object_set_new(block, "text", json_string(""));
    json_object_set_new(o, "content_block", block);
    event(j, "content_block_start", o);
}

void server_anthropic_delta(server_job *j, json_t *text) {
    json_t *o = typed("content_block_delta");
    json_object_set_new(o, "index", json_integer(0));
    json_t *d = typed("text_delta");
    json_object_set_new(d, "text", text);
    json_object_set_new(o, "delta", d);
    event(j, "content_block_delta", o);
}

/* a tool_use block; input: {} when streamed (the arguments follow as deltas) */
static json_t *tool_use(const server_job *j, const json_t *call, size_t k, bool streamed) {
    json_t *b = typed("tool_use");
    char id[96];
    snprintf(id, sizeof id, "toolu_%s_%zu", j->id, k);
    json_object_set_new(b, "id", json_string(id));
    json_object_set(b, "name", json_object_get(call, "name"));
    json_object_set_new(
        b, "input", streamed ? json_object() : json_deep_copy(json_object_get(call, "arguments")));
    return b;
}

void server_anthropic_end(server_job *j, json_t *text, const char *reason, const char *stop_seq,
                          const json_t *calls, size_t out_tokens) {
    if (!j->req.stream) {
        json_t *content = json_array();
        if (calls == NULL || json_string_length(text) > 0) {
            json_t *block = typed("text");
            json_object_set(block, "text", text);
            json_array_append_new(content, block);
        }
        json_decref(text);
        for (size_t k = 0; k < json_array_size(calls); k++) {
            json_array_append_new(content, tool_use(j, json_array_get(calls, k), k, false));
        }
        json_t *m = message(j, content, reason, stop_seq, out_tokens);
        char *s = json_dumps(m, JSON_COMPACT);
        json_decref(m);
        if (s != NULL) {
            server_job_write(j, s, strlen(s));
            free(s);
        }
        return;
    }
    if (calls != NULL && json_string_length(text) > 0) {
        server_anthropic_delta(j, text); /* the text before the calls */
    } else {
        json_decref(text);
    }
    json_t *o = typed("content_block_stop");
    json_object_set_new(o, "index", json_integer(0));
    event(j, "content_block_stop", o);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *call = json_array_get(calls, k);
        o = typed("content_block_start");
        json_object_set_new(o, "index", json_integer((json_int_t)k + 1));
        json_object_set_new(o, "content_block", tool_use(j, call, k, true));
        event(j, "content_block_start", o);
        o = typed("content_block_delta");
        json_object_set_new(o, "index", json_integer((json_int_t)k + 1));
        json_t *d = typed("input_json_delta");
        char *args = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT);
        json_object_set_new(d, "partial_json", json_string(args ? args : "{}"));
        free(args);
        json_object_set_new(o, "delta", d);
        event(j, "content_block_delta", o);
        o = typed("content_block_stop");
        json_object_set_new(o, "index", json_integer((json_int_t)k + 1));
        event(j, "content_block_stop", o);
    }
    o = typed("message_delta");
    json_t *d = json_object();
    json_object_set_new(d, "stop_reason", json_string(reason));
    json_object_set_new(d, "stop_sequence", stop_seq ? json_string(stop_seq) : json_null());
    json_object_set_new(o, "delta", d);
    json_t *u = json_object();
    json_object_set_new(u, "output_tokens", json_integer((json_int_t)out_tokens));
    json_object_set_new(o, "usage", u);
    event(j, "message_delta", o);
    event(j, "message_stop", typed("message_stop"));
}

void server_anthropic_error_event(server_job *j, const server_error *e) {
    event(j, "error", server_anthropic_error_json(e));
}
