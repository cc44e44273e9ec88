/*
 * The Ollama API (docs/api.md of ollama/ollama): /api/tags, /api/show,
 * /api/generate and /api/chat, for editors and tools that speak it.
 *
 * Requests are translated into the OpenAI-shaped request the rest of the
 * server validates (request.c), so both dialects share every check and the
 * whole generation path; only the reply differs: newline-delimited JSON
 * objects (application/x-ndjson) with "done": false while generating and a
 * last one with "done": true, the reason and the counts and durations in
 * nanoseconds. Streaming is the default, as in Ollama. Sampling defaults are
 * Ollama's documented ones (temperature 0.8, top_k 40, top_p 0.9,
 * repeat_penalty 1.1) unless "options" says otherwise.
 */
#include "server/ollama.h"

#include "core/core.h"
#include "server/schema.h"

#include <time.h>

/* options Ollama and the OpenAI request name alike */
static const char *const SAME_NAME[] = {
    "temperature",       "top_p", "top_k", "min_p", "seed", "repeat_penalty", "presence_penalty",
    "frequency_penalty", "stop"};

static bool refuse_nonempty(const json_t *root, const char *key, const char *why, server_error *e) {
    const json_t *v = json_object_get(root, key);
    const bool empty = v == NULL || json_is_null(v) || json_is_false(v) ||
                       (json_is_array(v) && json_array_size(v) == 0) ||
                       (json_is_string(v) && json_string_length(v) == 0);
    return empty || server_fail(e, 400, "invalid_request_error", NULL, key, "%s is not supported%s",
                                key, why);
}

/* The OpenAI-shaped body for an Ollama one; NULL with e on a refusal. */
static json_t *translate(server_kind *kind, const json_t *in, bool generate,
                         bool *num_predict_given, server_error *e) {
    if ((generate && !refuse_nonempty(in, "tools", " by /api/generate (use /api/chat)", e)) ||
        !refuse_nonempty(in, "images", "", e) ||
        !refuse_nonempty(in, "context", "; send the conversation to /api/chat", e) ||
        !refuse_nonempty(in, "suffix", "", e)) {
        return NULL;
    }
    json_t *out = json_object();
    json_t *model = json_object_get(in, "model");
    if (model == NULL) {
        model = json_object_get(in, "name"); /* older clients */
    }
    if (model != NULL) {
        json_object_set(out, "model", model);
    }
    const json_t *stream = json_object_get(in, "stream");
    json_object_set_new(out, "stream",
                        stream != NULL ? json_incref((json_t *)stream) : json_true());
    /* Ollama's documented defaults */
    json_object_set_new(out, "temperature", json_real(0.8));
    json_object_set_new(out, "top_k", json_integer(40));
    json_object_set_new(out, "top_p", json_real(0.9));
    json_object_set_new(out, "repeat_penalty", json_real(1.1));
    const json_t *opts = json_object_get(in, "options");
    if (opts != NULL && !json_is_null(opts) && !json_is_object(opts)) {
        json_decref(out);
        server_fail(e, 400, "invalid_request_error", NULL, "options", "options must be an object");
        return NULL;
    }
    for (size_t i = 0; opts != NULL && i < LARES_ARRAY_LEN(SAME_NAME); i++) {
        json_t *v = json_object_get(opts, SAME_NAME[i]);
        if (v != NULL) {
            json_object_set(out, SAME_NAME[i], v);
        }
    }
    const json_t *np = opts != NULL ? json_object_get(opts, "num_predict") : NULL;
    *num_predict_given = false;
    if (np != NULL && !json_is_null(np)) {
        if (!json_is_integer(np) || json_integer_value(np) < -2) {
            json_decref(out);
            server_fail(e, 400, "invalid_request_error", NULL, "options.num_predict",
                        "options.num_predict must be an integer: -1 (no limit), -2 (fill the "
                        "context) or a count");
            return NULL;
        }
        if (json_integer_value(np) >= 0) {
            json_object_set(out, "max_tokens", (json_t *)np);
            *num_predict_given = true;
        }
    }
    if (!generate) {
        *kind = SERVER_CHAT;
        json_t *msgs = json_object_get(in, "messages");
        for (size_t i = 0; i < json_array_size(msgs); i++) {
            if (!refuse_nonempty(json_array_get(msgs, i), "images", "", e)) {
                json_decref(out);
                return NULL;
            }
        }
        if (msgs != NULL) {
            json_object_set(out, "messages", msgs);
        }
        json_t *tools = json_object_get(in, "tools");
        if (tools != NULL) {
            json_object_set(out, "tools", tools); /* the same shape as OpenAI's */
        }
        return out;
    }
    json_t *prompt = json_object_get(in, "prompt");
    if (json_is_true(json_object_get(in, "raw"))) {
        *kind = SERVER_COMPLETION; /* the prompt as it is, no template */
        if (prompt != NULL) {
            json_object_set(out, "prompt", prompt);
        }
        return out;
    }
    /* the prompt as a user turn in the model's template, after the system prompt */
    *kind = SERVER_CHAT;
    json_t *msgs = json_array();
    const json_t *sys = json_object_get(in, "system");
    if (json_is_string(sys) && json_string_length(sys) > 0) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("system"));
        json_object_set(m, "content", (json_t *)sys);
        json_array_append_new(msgs, m);
    }
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("user"));
    json_object_set(m, "content", prompt != NULL ? prompt : json_null());
    json_array_append_new(msgs, m);
    json_object_set_new(out, "messages", msgs);
    return out;
}

bool server_ollama_parse(bool generate, const char *body, size_t len, server_request *out,
                         server_error *e) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL || !json_is_object(root)) {
        json_decref(root);
        return server_fail(e, 400, "invalid_request_error", NULL, NULL,
                           "the body is not a JSON object%s%s", root == NULL ? ": " : "",
                           root == NULL ? je.text : "");
    }
    server_kind kind = SERVER_CHAT;
    bool np_given = false;
    json_t *req = translate(&kind, root, generate, &np_given, e);
    /* format ("json" or a schema) is compiled apart, so errors name it */
    server_request fmt = {0};
    if (req != NULL && !server_parse_ollama_format(json_object_get(root, "format"), &fmt, e)) {
        json_decref(req);
        req = NULL;
    }
    json_decref(root);
    if (req == NULL) {
        return false;
    }
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (s == NULL) {
        server_schema_free(fmt.format);
        return server_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    const bool ok = server_request_parse(kind, s, strlen(s), out, e);
    free(s);
    if (!ok) {
        server_schema_free(fmt.format);
    } else {
        out->format = fmt.format;
        out->dialect = SERVER_OLLAMA;
        out->ollama_generate = generate;
        if (!np_given) {
            out->max_tokens = -1; /* Ollama: until the end of the turn or a full context */
        }
    }
    return ok;
}

json_t *server_ollama_error_json(const server_error *e) {
    json_t *o = json_object();
    json_object_set_new(o, "error", json_string(e->msg));
    return o;
}

/* RFC 3339 in UTC with nanoseconds, as Ollama writes created_at */
static json_t *now_rfc3339(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char b[64], out[80];
    strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, sizeof out, "%s.%09ldZ", b, (long)ts.tv_nsec);
    return json_string(out);
}

/* "model" echoes the name the client asked for, as Ollama does */
static json_t *base(const server_job *j) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(j->req.model));
    json_object_set_new(o, "created_at", now_rfc3339());
    return o;
}

static void set_text(json_t *o, const server_job *j, json_t *text) {
    if (!j->req.ollama_generate) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", text);
        json_object_set_new(o, "message", m);
    } else {
        json_object_set_new(o, "response", text);
    }
}

static void write_line(server_job *j, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s == NULL) {
        return;
    }
    size_t n = strlen(s);
    s[n] = '\n'; /* one write per line, so the reader never sees half of one */
    server_job_write(j, s, n + 1);
    free(s);
}

void server_ollama_chunk(server_job *j, json_t *text) {
    json_t *o = base(j);
    set_text(o, j, text);
    json_object_set_new(o, "done", json_false());
    write_line(j, o);
}

/* Ollama's tool_calls: [{"function": {"name", "arguments": object}}] */
static json_t *ollama_calls(const json_t *calls) {
    json_t *list = json_array();
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *fn = json_deep_copy(json_array_get(calls, k));
        json_t *o = json_object();
        json_object_set_new(o, "function", fn);
        json_array_append_new(list, o);
    }
    return list;
}

void server_ollama_final(server_job *j, json_t *text, const char *reason, const json_t *calls,
                         const server_ollama_counts *c) {
    if (calls != NULL && j->req.stream) { /* the calls in a chunk of their own */
        json_t *o = base(j);
        set_text(o, j, json_string(""));
        json_object_set_new(json_object_get(o, "message"), "tool_calls", ollama_calls(calls));
        json_object_set_new(o, "done", json_false());
        write_line(j, o);
    }
    json_t *o = base(j);
    set_text(o, j, text);
    if (calls != NULL && !j->req.stream) {
        json_object_set_new(json_object_get(o, "message"), "tool_calls", ollama_calls(calls));
    }
    json_object_set_new(o, "done", json_true());
    json_object_set_new(o, "done_reason", json_string(reason));
    json_object_set_new(o, "total_duration", json_integer((json_int_t)(c->total_s * 1e9)));
    json_object_set_new(o, "load_duration", json_integer(0));
    json_object_set_new(o, "prompt_eval_count", json_integer((json_int_t)c->prompt_tokens));
    json_object_set_new(o, "prompt_eval_duration", json_integer((json_int_t)(c->prompt_s * 1e9)));
    json_object_set_new(o, "eval_count", json_integer((json_int_t)c->generated));
    json_object_set_new(o, "eval_duration", json_integer((json_int_t)(c->gen_s * 1e9)));
    write_line(j, o);
}

static json_t *details(const lares_model_info *in) {
    json_t *d = json_object();
    json_object_set_new(d, "parent_model", json_string(""));
    json_object_set_new(d, "format", json_string("gguf"));
    json_object_set_new(d, "family", json_string(in->arch));
    json_t *fams = json_array();
    json_array_append_new(fams, json_string(in->arch));
    json_object_set_new(d, "families", fams);
    json_object_set_new(d, "parameter_size", json_string("")); /* not counted by lares */
    json_object_set_new(d, "quantization_level", json_string(in->file_type ? in->file_type : ""));
    return d;
}

json_t *server_ollama_tags(const server *sv) {
    lares_model_info in;
    lares_model_get_info(sv->m, &in);
    json_t *m = json_object();
    char name[300];
    snprintf(name, sizeof name, "%s:latest", sv->model_id);
    json_object_set_new(m, "name", json_string(name));
    json_object_set_new(m, "model", json_string(name));
    struct tm tm;
    const time_t t = (time_t)sv->started_at;
    gmtime_r(&t, &tm);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(m, "modified_at", json_string(when));
    json_object_set_new(m, "size", json_integer((json_int_t)in.file_bytes));
    json_object_set_new(m, "digest", json_string(""));
    json_object_set_new(m, "details", details(&in));
    json_t *list = json_array();
    json_array_append_new(list, m);
    json_t *o = json_object();
    json_object_set_new(o, "models", list);
    return o;
}

json_t *server_ollama_show(const server *sv) {
    lares_model_info in;
    lares_model_get_info(sv->m, &in);
    json_t *o = json_object();
    json_object_set_new(o, "modelfile", json_string(""));
    json_object_set_new(o, "parameters", json_string(""));
    json_object_set_new(o, "template", json_string(sv->tmpl));
    json_object_set_new(o, "details", details(&in));
    json_t *mi = json_object();
    char k[96];
    json_object_set_new(mi, "general.architecture", json_string(in.arch));
    snprintf(k, sizeof k, "%s.block_count", in.arch);
    json_object_set_new(mi, k, json_integer(in.n_layer));
    snprintf(k, sizeof k, "%s.embedding_length", in.arch);
    json_object_set_new(mi, k, json_integer(in.n_embd));
    snprintf(k, sizeof k, "%s.context_length", in.arch);
    json_object_set_new(mi, k, json_integer(lares_session_n_ctx(sv->s)));
    json_object_set_new(o, "model_info", mi);
    json_t *caps = json_array();
    json_array_append_new(caps, json_string("completion"));
    json_object_set_new(o, "capabilities", caps);
    return o;
}
