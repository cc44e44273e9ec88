/*
 * The HTTP side: libmicrohttpd with one thread per connection, so a handler
 * may wait for its job. Routes, the API key, the body size limit, JSON and
 * server-sent-event replies, noticing a client that left, and the server's
 * start and graceful stop.
 *
 * A client that leaves is noticed by peeking at its socket while waiting
 * (recv with MSG_PEEK returns 0 at the peer's close), since the daemon does
 * not read a connection whose handler is busy.
 */
#include "core/core.h"
#include "server/anthropic.h"
#include "server/conns.h"
#include "server/cors.h"
#include "server/ollama.h"
#include "server/respond.h"
#include "server/ring_page.h"
#include "server/schema.h"
#include "server/web.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SLICE_MS 100 /* how often a waiting handler looks at its client */

typedef struct req_ctx {
    char *body; /* malloc'd */
    size_t len, cap;
    bool too_big;
} req_ctx;

typedef struct stream_ctx {
    server *sv;
    server_job *j;
} stream_ctx;

static void active_add(server *sv, int d);

/* ---- replies ---- */

static enum MHD_Result send_bytes(server *sv, struct MHD_Connection *c, int status,
                                  const char *ctype, const char *s, size_t n, int retry_after) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)s, MHD_RESPMEM_MUST_COPY);
    if (r == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (status == 401) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }
    server_cors_headers(sv, c, r);
    server_conns_phase(sv, c, SERVER_CONN_BUSY);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    server_count_response(sv, status);
    return ok;
}

enum MHD_Result server_send_text(server *sv, struct MHD_Connection *c, int status,
                                 const char *ctype, const char *s, size_t n) {
    return send_bytes(sv, c, status, ctype, s, n, 0);
}

static enum MHD_Result send_json(server *sv, struct MHD_Connection *c, int status, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s == NULL) {
        return MHD_NO;
    }
    enum MHD_Result ok = send_bytes(sv, c, status, "application/json", s, strlen(s), 0);
    free(s);
    return ok;
}

/* an error in the shape of the API the request came through */
static enum MHD_Result send_error(server *sv, struct MHD_Connection *c, const server_error *e,
                                  server_dialect dl) {
    json_t *o = dl == SERVER_OLLAMA      ? server_ollama_error_json(e)
                : dl == SERVER_ANTHROPIC ? server_anthropic_error_json(e)
                                         : server_error_json(e);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s == NULL) {
        return MHD_NO;
    }
    enum MHD_Result ok = send_bytes(sv, c, e->status, "application/json", s, strlen(s),
                                    e->status == 503 ? sv->o.retry_after_s : 0);
    free(s);
    return ok;
}

/* ---- waiting for a job while watching the client ---- */

static bool client_gone(int fd) {
    if (fd < 0) {
        return false;
    }
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void deadline_in(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += (long)ms * 1000000L;
    ts->tv_sec += ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

/* Waits until the job is done (or, for_start, has started); false when the
 * client left first. Called with j->mu not held. */
static bool wait_job(server_job *j, bool for_start) {
    pthread_mutex_lock(&j->mu);
    while (!j->done && !(for_start && j->started)) {
        struct timespec ts;
        deadline_in(&ts, WAIT_SLICE_MS);
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!j->done && !(for_start && j->started) && client_gone(j->fd)) {
            pthread_mutex_unlock(&j->mu);
            return false;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    server_job *j = sc->j;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out_pos < j->out_len) {
            size_t n = LARES_MIN(max, j->out_len - j->out_pos);
            memcpy(buf, j->out + j->out_pos, n);
            j->out_pos += n;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->done) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        struct timespec ts;
        deadline_in(&ts, WAIT_SLICE_MS);
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (j->out_pos == j->out_len && !j->done && client_gone(j->fd)) {
            pthread_mutex_unlock(&j->mu);
            server_cancel_job(sc->sv, j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    pthread_mutex_lock(&sc->j->mu);
    bool done = sc->j->done;
    pthread_mutex_unlock(&sc->j->mu);
    if (!done) {
        server_cancel_job(sc->sv, sc->j); /* the connection ended before the answer */
    }
    server_job_release(sc->j);
    active_add(sc->sv, -1);
    lares_free(sc);
}

/* ---- the generation endpoints ---- */

static void active_add(server *sv, int d) {
    pthread_mutex_lock(&sv->mu);
    sv->active += d;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
}

static int connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci != NULL ? ci->connect_fd : -1;
}

typedef enum route {
    R_NONE,
    R_WEB, /* the page's files (web.c) */
    R_HEALTH,
    R_METRICS,
    R_MODELS,
    R_MODEL,
    R_CHAT,
    R_COMPLETIONS,
    R_EMBEDDINGS,
    R_ANTHROPIC_MESSAGES,
    R_OLLAMA_TAGS,
    R_OLLAMA_SHOW,
    R_OLLAMA_VERSION,
    R_OLLAMA_GENERATE,
    R_OLLAMA_CHAT,
    R_RING,      /* /v1/ring: the ring's state (ring_page.c) */
    R_RING_PAGE, /* /ring: its page */
} route;

static server_dialect dialect_of(route r) {
    return r >= R_OLLAMA_TAGS          ? SERVER_OLLAMA
           : r == R_ANTHROPIC_MESSAGES ? SERVER_ANTHROPIC
                                       : SERVER_OPENAI;
}

static enum MHD_Result generate_job(server *sv, struct MHD_Connection *c, route rt,
                                    const req_ctx *rc, bool *streaming);

/* counts the reply as active until it is sent (a stream: until the daemon frees it) */
static enum MHD_Result generate(server *sv, struct MHD_Connection *c, route rt, const req_ctx *rc) {
    bool streaming = false;
    active_add(sv, 1);
    enum MHD_Result ok = generate_job(sv, c, rt, rc, &streaming);
    if (!streaming) {
        active_add(sv, -1);
    }
    return ok;
}

static enum MHD_Result generate_job(server *sv, struct MHD_Connection *c, route rt,
                                    const req_ctx *rc, bool *streaming) {
    const server_dialect dl = dialect_of(rt);
    server_job *j = server_job_create();
    server_error e;
    if (j == NULL) {
        server_fail(&e, 500, "server_error", NULL, NULL, "out of memory for a request");
        return send_error(sv, c, &e, dl);
    }
    const char *body = rc->body ? rc->body : "";
    bool parsed = false;
    if (dl == SERVER_OLLAMA) {
        parsed = server_ollama_parse(rt == R_OLLAMA_GENERATE, body, rc->len, &j->req, &e);
    } else if (dl == SERVER_ANTHROPIC) {
        parsed = server_anthropic_parse(body, rc->len, &j->req, &e);
    } else {
        const server_kind kind = rt == R_CHAT          ? SERVER_CHAT
                                 : rt == R_COMPLETIONS ? SERVER_COMPLETION
                                                       : SERVER_EMBEDDING;
        parsed = server_request_parse(kind, body, rc->len, &j->req, &e);
    }
    if (!parsed || !server_prepare(sv, j, &e)) {
        server_job_release(j);
        return send_error(sv, c, &e, dl);
    }
    j->fd = connection_fd(c);
    if (!server_enqueue(sv, j, &e)) {
        server_job_release(j);
        return send_error(sv, c, &e, dl);
    }
    if (!wait_job(j, j->req.stream)) {
        server_cancel_job(sv, j); /* left while waiting: nothing to answer */
        server_job_release(j);
        return MHD_NO;
    }
    pthread_mutex_lock(&j->mu);
    const bool done = j->done;
    const int status = j->status;
    pthread_mutex_unlock(&j->mu);
    if (!j->req.stream || (done && status != 200)) {
        enum MHD_Result ok =
            status == 499 ? MHD_NO
                          : send_bytes(sv, c, status, "application/json", j->out ? j->out : "",
                                       j->out_len, status == 503 ? sv->o.retry_after_s : 0);
        server_job_release(j);
        return ok;
    }
    stream_ctx *sc = lares_calloc(1, sizeof *sc);
    struct MHD_Response *r = NULL;
    if (sc != NULL) {
        sc->sv = sv;
        sc->j = j;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, sc,
                                              stream_free);
    }
    if (r == NULL) {
        lares_free(sc);
        server_cancel_job(sv, j);
        server_job_release(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            dl == SERVER_OLLAMA ? "application/x-ndjson" : "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    server_cors_headers(sv, c, r);
    *streaming = true; /* from here on stream_free ends the reply */
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r); /* stream_free runs when the daemon lets go of it */
    server_count_response(sv, 200);
    return ok;
}

/* ---- other endpoints ---- */

static json_t *model_json(const server *sv) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(sv->model_id));
    json_object_set_new(o, "object", json_string("model"));
    json_object_set_new(o, "created", json_integer(sv->started_at));
    json_object_set_new(o, "owned_by", json_string("lares"));
    return o;
}

static enum MHD_Result models(server *sv, struct MHD_Connection *c, const char *id) {
    const server_dialect dl = SERVER_OPENAI;
    if (id != NULL) {
        if (strcmp(id, sv->model_id) != 0 && strcmp(id, "lares") != 0) {
            server_error e;
            server_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                        "the model '%.64s' does not exist; this server has '%s'", id, sv->model_id);
            return send_error(sv, c, &e, dl);
        }
        return send_json(sv, c, 200, model_json(sv));
    }
    json_t *list = json_object();
    json_object_set_new(list, "object", json_string("list"));
    json_t *data = json_array();
    json_array_append_new(data, model_json(sv));
    json_object_set_new(list, "data", data);
    return send_json(sv, c, 200, list);
}

static enum MHD_Result metrics(server *sv, struct MHD_Connection *c) {
    char *t = server_metrics_text(sv);
    if (t == NULL) {
        return MHD_NO;
    }
    enum MHD_Result ok = send_bytes(sv, c, 200, "text/plain; version=0.0.4", t, strlen(t), 0);
    free(t);
    return ok;
}

/* POST /api/show: the model's card, for the one model this server has */
static enum MHD_Result ollama_show(server *sv, struct MHD_Connection *c, const req_ctx *rc) {
    const server_dialect dl = SERVER_OLLAMA;
    server_error e;
    json_error_t je;
    json_t *root = json_loadb(rc->body ? rc->body : "", rc->len, 0, &je);
    const json_t *m = json_object_get(root, "model");
    m = m != NULL ? m : json_object_get(root, "name");
    char name[300];
    snprintf(name, sizeof name, "%s", json_is_string(m) ? json_string_value(m) : "");
    json_decref(root);
    const size_t idn = strlen(sv->model_id);
    if (strcmp(name, sv->model_id) != 0 && strcmp(name, "lares") != 0 &&
        !(strncmp(name, sv->model_id, idn) == 0 && strcmp(name + idn, ":latest") == 0)) {
        server_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                    "model '%.64s' not found; this server has '%s'", name, sv->model_id);
        return send_error(sv, c, &e, dl);
    }
    return send_json(sv, c, 200, server_ollama_show(sv));
}

/* ---- routing ---- */

static route route_of(const char *url, bool *is_post) {
    static const struct {
        const char *path;
        route r;
        bool post;
    } table[] = {
        {"/health", R_HEALTH, false},
        {"/metrics", R_METRICS, false},
        {"/v1/models", R_MODELS, false},
        {"/v1/chat/completions", R_CHAT, true},
        {"/v1/completions", R_COMPLETIONS, true},
        {"/v1/embeddings", R_EMBEDDINGS, true},
        {"/v1/messages", R_ANTHROPIC_MESSAGES, true},
        {"/api/tags", R_OLLAMA_TAGS, false},
        {"/api/show", R_OLLAMA_SHOW, true},
        {"/api/version", R_OLLAMA_VERSION, false},
        {"/api/generate", R_OLLAMA_GENERATE, true},
        {"/api/chat", R_OLLAMA_CHAT, true},
        {"/v1/ring", R_RING, false},
        {"/ring", R_RING_PAGE, false},
    };
    for (size_t i = 0; i < LARES_ARRAY_LEN(table); i++) {
        if (strcmp(url, table[i].path) == 0) {
            *is_post = table[i].post;
            return table[i].r;
        }
    }
    if (strncmp(url, "/v1/models/", 11) == 0 && url[11] != '\0') {
        *is_post = false;
        return R_MODEL;
    }
    if (server_web_find(url) != NULL) {
        *is_post = false;
        return R_WEB;
    }
    return R_NONE;
}

/* "Authorization: Bearer KEY": the scheme is case-insensitive and followed
 * by one or more spaces (RFC 7235 section 2.1, RFC 6750 section 2.1); or,
 * without Authorization, "x-api-key: KEY". The comparison takes time
 * independent of where the keys differ. */
static bool key_ok(const server *sv, struct MHD_Connection *c) {
    if (sv->api_key == NULL) {
        return true;
    }
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h == NULL) {
        /* Anthropic's clients send the key as it is in x-api-key */
        h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
        if (h == NULL) {
            return false;
        }
    } else {
        if (strncasecmp(h, "Bearer", 6) != 0 || h[6] != ' ') {
            return false;
        }
        h += 6;
        while (*h == ' ') {
            h++;
        }
    }
    const size_t n = strlen(sv->api_key);
    if (strlen(h) != n) {
        return false;
    }
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++) {
        diff |= (unsigned char)(h[i] ^ sv->api_key[i]);
    }
    return diff == 0;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    server_error e;
    bool want_post = false;
    const route r = route_of(url, &want_post);
    const server_dialect dl = dialect_of(r);
    req_ctx *rc = *con_cls;
    if (rc == NULL) { /* headers are in; the body (if any) follows */
        if ((rc = calloc(1, sizeof *rc)) == NULL) {
            return MHD_NO;
        }
        *con_cls = rc;
        server_conns_phase(sv, c, SERVER_CONN_BODY); /* the head is in; the body's deadline runs */
        const bool is_post = strcmp(method, "POST") == 0;
        if (r == R_NONE) {
            server_fail(&e, 404, "invalid_request_error", "unknown_url", NULL,
                        "unknown endpoint %.8s %.200s", method, url);
            return send_error(sv, c, &e, dl);
        }
        if (sv->cors != NULL && strcmp(method, "OPTIONS") == 0) {
            return server_cors_preflight(sv, c, url);
        }
        if (is_post != want_post || (!is_post && strcmp(method, "GET") != 0)) {
            server_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                        "%.200s takes %s, not %.8s", url, want_post ? "POST" : "GET", method);
            return send_error(sv, c, &e, dl);
        }
        if (r != R_HEALTH && r != R_METRICS && server_conns_over_limit(sv)) {
            server_fail(&e, 503, "server_error", "too_many_connections", NULL,
                        "more than %d connections are open; retry later", sv->o.max_connections);
            return send_error(sv, c, &e, dl);
        }
        /* the pages hold no data */
        if (r != R_HEALTH && r != R_RING_PAGE && r != R_WEB && !key_ok(sv, c)) {
            server_fail(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                        "incorrect or missing API key: send 'Authorization: Bearer KEY' (or "
                        "'x-api-key: KEY')");
            return send_error(sv, c, &e, dl);
        }
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL && strtoull(cl, NULL, 10) > sv->o.max_body_bytes) {
            server_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                        "the body has %.20s bytes; the limit is %zu", cl, sv->o.max_body_bytes);
            return send_error(sv, c, &e, dl);
        }
        return MHD_YES;
    }
    if (*upload_size > 0) { /* a piece of the body */
        size_t n = *upload_size;
        *upload_size = 0;
        if (rc->too_big || rc->len + n > sv->o.max_body_bytes) {
            rc->too_big = true; /* read and dropped: the reply comes at the end */
            return MHD_YES;
        }
        if (rc->len + n > rc->cap) {
            size_t cap = rc->cap ? rc->cap : 4096;
            while (cap < rc->len + n) {
                cap *= 2;
            }
            char *p = realloc(rc->body, cap);
            if (p == NULL) {
                return MHD_NO;
            }
            rc->body = p;
            rc->cap = cap;
        }
        memcpy(rc->body + rc->len, upload, n);
        rc->len += n;
        return MHD_YES;
    }
    if (rc->too_big) {
        server_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                    "the body is larger than the limit of %zu bytes", sv->o.max_body_bytes);
        return send_error(sv, c, &e, dl);
    }
    server_conns_phase(sv, c, SERVER_CONN_BUSY);
    switch (r) {
    case R_HEALTH: {
        pthread_mutex_lock(&sv->mu);
        const bool stopping = sv->stopping;
        pthread_mutex_unlock(&sv->mu);
        json_t *o = json_object();
        json_object_set_new(o, "status", json_string(stopping ? "stopping" : "ok"));
        uint64_t mask = 0;
        int32_t n_config = 0;
        if (lares_session_ring_serving(sv->s, &mask, &n_config)) {
            /* the head of a ring: which of ring.json's devices serve now */
            json_t *ring = json_object(), *serving = json_array(), *out = json_array();
            for (int32_t d = 0; d < n_config && d < 64; d++) {
                const char *name = lares_session_ring_device_name(sv->s, d);
                json_array_append_new((mask >> d) & 1u ? serving : out,
                                      json_string(name != NULL ? name : "?"));
            }
            json_object_set_new(ring, "devices", json_integer(n_config));
            json_object_set_new(ring, "serving", serving);
            json_object_set_new(ring, "not_serving", out);
            json_object_set_new(o, "ring", ring);
        }
        return send_json(sv, c, stopping ? 503 : 200, o);
    }
    case R_METRICS:
        return metrics(sv, c);
    case R_MODELS:
        return models(sv, c, NULL);
    case R_MODEL:
        return models(sv, c, url + 11);
    case R_CHAT:
    case R_COMPLETIONS:
    case R_EMBEDDINGS:
    case R_ANTHROPIC_MESSAGES:
    case R_OLLAMA_GENERATE:
    case R_OLLAMA_CHAT:
        return generate(sv, c, r, rc);
    case R_OLLAMA_TAGS:
        return send_json(sv, c, 200, server_ollama_tags(sv));
    case R_OLLAMA_SHOW:
        return ollama_show(sv, c, rc);
    case R_OLLAMA_VERSION: {
        json_t *o = json_object();
        json_object_set_new(o, "version", json_string(LARES_SERVER_VERSION)); /* lares's */
        return send_json(sv, c, 200, o);
    }
    case R_RING:
        return server_ring_json(sv, c);
    case R_RING_PAGE:
        return server_ring_page(sv, c);
    case R_WEB: {
        const server_web_asset *a = server_web_find(url);
        return send_bytes(sv, c, 200, a->ctype, (const char *)a->data, a->len, 0);
    }
    case R_NONE:
        break;
    }
    return MHD_NO;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)toe;
    server_conns_phase(cls, c, SERVER_CONN_HEADERS); /* kept alive: the next head's deadline */
    req_ctx *rc = *con_cls;
    if (rc != NULL) {
        free(rc->body);
        free(rc);
        *con_cls = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n') {
        line[--n] = '\0';
    }
    lares_log(LARES_LOG_INFO, "server: libmicrohttpd: %s", line);
}

/* ---- start and stop ---- */

server_opts server_opts_default(void) {
    server_opts o = {.host = "127.0.0.1",
                     .port = 8080,
                     .max_body_bytes = 1u << 20,
                     .queue_capacity = 8,
                     .max_connections = 64,
                     .max_per_ip = 0,
                     .header_timeout_s = 10,
                     .body_timeout_s = 30,
                     .idle_timeout_s = 30,
                     .retry_after_s = 1};
    return o;
}

uint16_t server_port(const server *sv) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(sv->d, MHD_DAEMON_INFO_BIND_PORT);
    return di != NULL ? di->port : 0;
}

const char *server_template(const server *sv) {
    return sv->tmpl;
}

static void base_name(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".gguf") == 0) {
        n -= 5;
    }
    snprintf(out, cap, "%.*s", (int)LARES_MIN(n, cap - 1), b);
}

lares_status server_start(lares_model *m, lares_session *s, const char *model_path,
                          const server_opts *opts, server **out, lares_error *err) {
    server_opts o = opts ? *opts : server_opts_default();
    if (o.host == NULL) {
        o.host = "127.0.0.1";
    }
    if (o.queue_capacity < 1 || o.queue_capacity > 4096) {
        return lares_fail(err, LARES_EINVAL, "queue capacity %d: 1 to 4096", o.queue_capacity);
    }
    if (o.max_connections < 2 || o.max_connections > 4096) {
        return lares_fail(err, LARES_EINVAL, "connection limit %d: 2 to 4096", o.max_connections);
    }
    if (o.max_per_ip == 0) {
        o.max_per_ip = LARES_MAX(1, o.max_connections / 2);
    }
    if (o.lookup < 0 || o.lookup > LARES_LOOKUP_MAX || (o.lookup != 0 && o.draft_n != 0)) {
        return lares_fail(err, LARES_EINVAL,
                          "prompt lookup of %d drafts: 0 to %d, and not with a draft model",
                          o.lookup, LARES_LOOKUP_MAX);
    }
    if (o.max_per_ip < 1 || o.max_per_ip > o.max_connections) {
        return lares_fail(err, LARES_EINVAL, "connections per address %d: 1 to %d (the limit)",
                          o.max_per_ip, o.max_connections);
    }
    const struct {
        const char *what;
        int32_t s;
    } timeouts[] = {
        {"header", o.header_timeout_s}, {"body", o.body_timeout_s}, {"idle", o.idle_timeout_s}};
    for (size_t i = 0; i < LARES_ARRAY_LEN(timeouts); i++) {
        if (timeouts[i].s < 1 || timeouts[i].s > 3600) {
            return lares_fail(err, LARES_EINVAL, "%s timeout %d s: 1 to 3600", timeouts[i].what,
                              timeouts[i].s);
        }
    }
    if (o.max_body_bytes < 1024) {
        return lares_fail(err, LARES_EINVAL, "body limit %zu bytes: at least 1024",
                          o.max_body_bytes);
    }
    if (o.api_key != NULL && o.api_key[0] == '\0') {
        return lares_fail(err, LARES_EINVAL, "the API key is empty");
    }
    if (o.cors != NULL) {
        lares_status cst = server_cors_check(o.cors, err);
        if (cst != LARES_OK) {
            return cst;
        }
    }
    server *sv = lares_calloc(1, sizeof *sv);
    if (sv == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    sv->m = m;
    sv->s = s;
    sv->o = o;
    sv->started_at = (int64_t)time(NULL);
    lares_model_info info;
    lares_model_get_info(m, &info);
    sv->n_vocab = info.n_vocab;
    atomic_init(&sv->next_id, 1);
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    lares_status st = LARES_OK;
    if (o.model_id != NULL) {
        snprintf(sv->model_id, sizeof sv->model_id, "%s", o.model_id);
    } else {
        base_name(model_path, sv->model_id, sizeof sv->model_id);
    }
    st = lares_chat_template(m, o.template_name, &sv->tmpl, err);
    if (st == LARES_ENOTFOUND && o.template_name == NULL) {
        lares_log(LARES_LOG_WARN,
                  "server: %s has no chat template; chat requests use the plain "
                  "format ('user: ...' lines, the answer after 'assistant:')",
                  model_path);
        sv->tmpl = "plain";
        st = LARES_OK;
    }
    sv->queue = lares_calloc((size_t)o.queue_capacity, sizeof *sv->queue);
    if (st == LARES_OK && (sv->queue == NULL ||
                           (o.api_key != NULL && (sv->api_key = lares_strdup(o.api_key)) == NULL) ||
                           (o.cors != NULL && (sv->cors = lares_strdup(o.cors)) == NULL))) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)o.port);
    if (st == LARES_OK && getaddrinfo(o.host, port, &hints, &ai) != 0) {
        st = lares_fail(err, LARES_EINVAL, "'%s' is not a numeric IPv4 or IPv6 address", o.host);
    }
    if (st == LARES_OK) {
        st = server_conns_start(sv, err);
    }
    if (st == LARES_OK) {
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                         MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
        if (ai->ai_family == AF_INET6) {
            flags |= MHD_USE_IPv6;
        }
        /* the logger first: libmicrohttpd logs options given before it with its own */
        sv->d = MHD_start_daemon(
            flags, o.port, NULL, NULL, handle, sv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, sv,
            MHD_OPTION_NOTIFY_COMPLETED, completed, sv, MHD_OPTION_NOTIFY_CONNECTION,
            server_conns_notify, sv, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)(o.max_connections + SERVER_CONN_RESERVE), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned)o.max_per_ip, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o.idle_timeout_s,
            MHD_OPTION_END);
        if (sv->d == NULL) {
            st = lares_fail(err, LARES_EIO,
                            "cannot listen on %s port %u (in use, or not an "
                            "address of this machine?)",
                            o.host, (unsigned)o.port);
        }
    }
    if (ai != NULL) {
        freeaddrinfo(ai);
    }
    if (st == LARES_OK) {
        void *(*main_fn)(void *) = o.batch ? server_worker_batch_main : server_worker_main;
        if (pthread_create(&sv->worker, NULL, main_fn, sv) != 0) {
            st = lares_fail(err, LARES_EIO, "cannot start the worker thread");
        } else {
            sv->worker_started = true;
        }
    }
    if (st != LARES_OK) {
        server_stop(sv);
        return st;
    }
    *out = sv;
    return LARES_OK;
}

void server_stop(server *sv) {
    if (sv == NULL) {
        return;
    }
    if (sv->d != NULL) {
        MHD_socket ls = MHD_quiesce_daemon(sv->d); /* no new connections */
        if (ls != MHD_INVALID_SOCKET) {
            close(ls);
        }
    }
    pthread_mutex_lock(&sv->mu);
    sv->stopping = true;
    while (sv->q_len > 0) { /* the waiting ones get 503 */
        server_job *j = sv->queue[sv->q_head];
        sv->q_head = (sv->q_head + 1) % (size_t)sv->o.queue_capacity;
        sv->q_len--;
        server_error e;
        server_fail(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        server_job_write_json(j, server_error_json(&e));
        server_job_finish(j, 503);
        server_job_release(j);
    }
    if (sv->running != NULL) {
        atomic_store(&sv->running->cancel, true);
        lares_session_cancel(sv->s);
    }
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    if (sv->worker_started) {
        pthread_join(sv->worker, NULL);
    }
    /* let the replies in progress reach their clients (bounded: 10 s) */
    pthread_mutex_lock(&sv->mu);
    for (int i = 0; i < 100 && sv->active > 0; i++) {
        struct timespec ts;
        deadline_in(&ts, WAIT_SLICE_MS);
        pthread_cond_timedwait(&sv->cv, &sv->mu, &ts);
    }
    pthread_mutex_unlock(&sv->mu);
    if (sv->d != NULL) {
        MHD_stop_daemon(sv->d); /* waits for the connections' threads */
    }
    server_conns_stop(sv);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    lares_free(sv->queue);
    lares_free(sv->api_key);
    lares_free(sv->cors);
    if (sv->vb != NULL) {
        server_vocab_bytes_free(sv->vb);
        lares_free(sv->vb);
    }
    lares_free(sv);
}
