/*
 * The JSON shapes of the replies, as the OpenAI API reference gives them:
 * chat.completion and chat.completion.chunk (delta, logprobs.content),
 * text_completion (logprobs with tokens / token_logprobs / top_logprobs /
 * text_offset), usage with prompt_tokens_details.cached_tokens.
 */
#include "server/respond.h"

#include "core/core.h"

/* A JSON string of bytes that may not be valid UTF-8 (a token can be half a
 * character): each byte of an ill-formed sequence becomes U+FFFD. */
json_t *server_lossy_string(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    if (v != NULL) {
        return v;
    }
    char *buf = lares_alloc_array(n, 3); /* every byte may grow to 3 */
    if (buf == NULL) {
        return json_string("");
    }
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = p[i] < 0x80             ? 1
                     : (p[i] & 0xe0) == 0xc0 ? 2
                     : (p[i] & 0xf0) == 0xe0 ? 3
                     : (p[i] & 0xf8) == 0xf0 ? 4
                                             : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) {
            ok = (p[i + k] & 0xc0) == 0x80;
        }
        if (ok && len > 1) { /* no overlong forms, surrogates or code points past U+10FFFF */
            const unsigned char a = p[i], b = p[i + 1];
            ok = !(len == 2 && a < 0xc2) && !(a == 0xe0 && b < 0xa0) && !(a == 0xed && b >= 0xa0) &&
                 !(a == 0xf0 && b < 0x90) && !(a == 0xf4 && b >= 0x90) && a <= 0xf4;
        }
        if (ok) {
            memcpy(buf + o, p + i, len);
            o += len;
            i += len;
        } else {
            memcpy(buf + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    v = json_stringn(buf, o);
    lares_free(buf);
    return v != NULL ? v : json_string("");
}

json_t *server_usage_json(size_t prompt, size_t cached, size_t completion) {
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer((json_int_t)prompt));
    json_object_set_new(u, "completion_tokens", json_integer((json_int_t)completion));
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)(prompt + completion)));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer((json_int_t)cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

static json_t *bytes_json(const char *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    }
    return a;
}

/* the token's text, control tokens written out */
static size_t piece(const lares_model *m, int32_t id, char *buf, size_t cap) {
    int32_t n = lares_token_piece(m, id, true, buf, cap);
    return n < 0 ? 0 : (size_t)LARES_MIN((size_t)n, cap);
}

/* {"token", "logprob", "bytes"} */
static json_t *chat_lp_entry(const lares_model *m, int32_t id, float lp) {
    char buf[256];
    size_t n = piece(m, id, buf, sizeof buf);
    json_t *o = json_object();
    json_object_set_new(o, "token", server_lossy_string(buf, n));
    json_object_set_new(o, "logprob", json_real(lp));
    json_object_set_new(o, "bytes", bytes_json(buf, n));
    return o;
}

json_t *server_chat_logprob(const lares_model *m, const server_tok *t, int32_t n_top) {
    json_t *o = chat_lp_entry(m, t->id, t->logprob);
    json_t *top = json_array();
    for (int32_t k = 0; k < n_top && k < t->n_top; k++) {
        json_array_append_new(top, chat_lp_entry(m, t->top_ids[k], t->top_lp[k]));
    }
    json_object_set_new(o, "top_logprobs", top);
    return o;
}

json_t *server_completion_logprobs_new(void) {
    json_t *o = json_object();
    json_object_set_new(o, "tokens", json_array());
    json_object_set_new(o, "token_logprobs", json_array());
    json_object_set_new(o, "top_logprobs", json_array());
    json_object_set_new(o, "text_offset", json_array());
    return o;
}

void server_completion_logprobs_add(json_t *lp, const lares_model *m, const server_tok *t,
                                    int32_t n_top, size_t text_offset) {
    char buf[256];
    size_t n = piece(m, t->id, buf, sizeof buf);
    json_array_append_new(json_object_get(lp, "tokens"), server_lossy_string(buf, n));
    json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(t->logprob));
    json_t *top = json_object();
    for (int32_t k = 0; k < n_top && k < t->n_top; k++) {
        size_t tn = piece(m, t->top_ids[k], buf, sizeof buf);
        json_t *key = server_lossy_string(buf, tn);
        json_object_set_new(top, json_string_value(key), json_real(t->top_lp[k]));
        json_decref(key);
    }
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"),
                          json_integer((json_int_t)text_offset));
}

json_t *server_reply_base(const server_job *j, const char *model_id, bool chunk) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    const char *object = j->req.kind == SERVER_CHAT
                             ? (chunk ? "chat.completion.chunk" : "chat.completion")
                             : "text_completion";
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(j->created));
    json_object_set_new(o, "model", json_string(model_id));
    json_object_set_new(o, "system_fingerprint", json_string("lares-" LARES_SERVER_VERSION));
    json_object_set_new(o, "choices", json_array());
    return o;
}

void server_job_write_json(server_job *j, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s != NULL) {
        server_job_write(j, s, strlen(s));
        free(s);
    }
}

void server_write_event(server_job *j, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s == NULL) {
        pthread_mutex_lock(&j->mu);
        j->oom = true;
        pthread_mutex_unlock(&j->mu);
        return;
    }
    size_t n = strlen(s);
    /* one write per event, so the reader never sees half of one */
    char *ev = lares_alloc_array(n + 8, 1);
    if (ev == NULL) {
        free(s);
        pthread_mutex_lock(&j->mu);
        j->oom = true;
        pthread_mutex_unlock(&j->mu);
        return;
    }
    memcpy(ev, "data: ", 6);
    memcpy(ev + 6, s, n);
    memcpy(ev + 6 + n, "\n\n", 2);
    server_job_write(j, ev, n + 8);
    lares_free(ev);
    free(s);
}
