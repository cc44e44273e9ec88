/*
 * server internals shared by the files of the module: requests as parsed from
 * JSON, OpenAI-style errors, stop strings, jobs, the queue, the counters.
 * Nothing here is visible outside src/server/ (tests and the fuzz target
 * include it for the parser).
 */
#ifndef LARES_SERVER_IMPL_H
#define LARES_SERVER_IMPL_H

#include "server/server.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

/* ---- errors: what an OpenAI client expects in {"error": {...}} ---- */

typedef struct server_error {
    int status;       /* HTTP status: 400, 401, 404, 405, 413, 500, 503 */
    const char *type; /* "invalid_request_error", "authentication_error", ... (static) */
    const char *code; /* "context_length_exceeded", ... or NULL (static) */
    char param[64];   /* the request field at fault, "" when none */
    char msg[LARES_ERROR_MSG_MAX];
} server_error;

/* Fills e and returns false (so parsers can `return server_fail(...)`). */
bool server_fail(server_error *e, int status, const char *type, const char *code, const char *param,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {"message", "type", "param", "code"}} */
json_t *server_error_json(const server_error *e);

/* ---- requests ---- */

typedef enum server_kind {
    SERVER_CHAT = 0,
    SERVER_COMPLETION = 1,
    SERVER_EMBEDDING = 2,
} server_kind;

#define SERVER_MAX_STOP       4   /* stop strings per request (as OpenAI) */
#define SERVER_MAX_STOP_BYTES 256 /* bytes of one stop string */
#define SERVER_MAX_MESSAGES   4096
#define SERVER_MAX_LOGPROBS   20
#define SERVER_MAX_CHOICES    16  /* n: generated one after the other */
#define SERVER_MAX_INPUTS     256 /* texts in one embeddings request */

/* which API a request came through: how its reply is written */
typedef enum server_dialect {
    SERVER_OPENAI = 0,    /* server-sent events, OpenAI's objects */
    SERVER_OLLAMA = 1,    /* newline-delimited JSON, Ollama's objects (ollama.c) */
    SERVER_ANTHROPIC = 2, /* named server-sent events, Anthropic's objects (anthropic.c) */
} server_dialect;

/* one text of an embeddings request: given as text (tokenized by
 * server_prepare) or as token ids */
typedef struct server_input {
    char *text; /* owned; NULL when given as ids */
    size_t len;
    int32_t *ids; /* owned */
    size_t n_ids;
} server_input;

/* tool_choice: whether the answer may, must, or must not call a tool */
typedef enum server_tool_choice {
    SERVER_TOOL_AUTO = 0, /* the model decides; calls are parsed from the answer */
    SERVER_TOOL_NONE,     /* no calls: the tools are not shown */
    SERVER_TOOL_REQUIRED, /* one call of any tool, generated under a constraint */
    SERVER_TOOL_NAMED,    /* one call of tool_named */
} server_tool_choice;

typedef struct server_request {
    server_kind kind;
    server_dialect dialect;
    bool ollama_generate; /* /api/generate: the text goes in "response", not "message" */
    char *model;          /* owned */
    lares_chat_msg *msgs; /* owned; chat: roles are constant strings, contents owned */
    size_t n_msgs;
    char *prompt; /* owned; completions: text prompt */
    size_t prompt_len;
    int32_t *prompt_ids; /* owned; completions: a prompt given as token ids */
    size_t n_prompt_ids;
    int32_t max_tokens; /* -1: until the end of the turn or a full context */
    int32_t n_choices;  /* n: answers to generate, 1..SERVER_MAX_CHOICES */
    lares_sampler_opts sampler;
    bool seed_given;
    char *stop[SERVER_MAX_STOP]; /* owned */
    size_t stop_len[SERVER_MAX_STOP];
    size_t n_stop;
    bool stream;
    bool include_usage;
    struct server_schema *format; /* owned: structured output (schema.h); NULL: free text */
    json_t *tools;                /* owned: [{"name","description","parameters"}] or NULL */
    server_tool_choice tool_choice;
    int32_t tool_named;           /* SERVER_TOOL_NAMED: index in tools */
    json_t **calls;               /* owned, n_msgs: an assistant's calls [{"name","arguments"}] */
    bool logprobs;        /* log-probabilities of the chosen tokens */
    int32_t top_logprobs; /* alternatives per token, 0..20 */
    /* embeddings */
    server_input *inputs; /* owned */
    size_t n_inputs;
    bool base64;        /* encoding_format "base64": little-endian float32 bytes */
    int32_t dimensions; /* 0: not given; else must equal the model's width */
} server_request;

/* Parses and validates a request body. On failure e says what (400, naming
 * the field) and *out is left empty. Never reads past len; body need not be
 * NUL-terminated. */
bool server_request_parse(server_kind kind, const char *body, size_t len, server_request *out,
                          server_error *e);
void server_request_free(server_request *r); /* leaves *r empty; accepts an empty one */

/* ---- stop strings ---- */

/* Looks for the stop strings in text[0, n). Returns true when one occurs,
 * with *cut where the earliest occurrence starts. Otherwise *safe is how
 * many leading bytes cannot be the start of any stop string (the rest is a
 * prefix of one and must be held back). */
bool server_stop_find(char *const *stop, const size_t *stop_len, size_t n_stop, const char *text,
                      size_t n, size_t *cut, size_t *safe);

/* ---- counters (/metrics) ---- */

#define SERVER_STATUS_SLOTS 10 /* statuses counted apart in /metrics (metrics.c) */

typedef struct server_metrics {
    uint64_t responses[SERVER_STATUS_SLOTS]; /* by status: see metrics.c, status_slot */
    uint64_t requests_chat, requests_completion, requests_embedding;
    uint64_t canceled;      /* generations stopped because the client left */
    uint64_t rejected_busy; /* 503: the queue was full */
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
    uint64_t drafted_tokens, accepted_tokens; /* speculative decoding (--draft) */
    double prompt_seconds, gen_seconds;
    double last_prompt_tok_s, last_gen_tok_s, last_mem_pressure;
    int32_t kv_tokens; /* tokens in the session's context after the last job */
} server_metrics;

/* ---- jobs: one request from the HTTP thread to the worker ---- */

typedef struct server_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;           /* HTTP side + worker side; freed at 0 */
    server_request req; /* owned */
    int32_t *ids;       /* owned: the prompt */
    size_t n_ids;
    char id[48];     /* "chatcmpl-..." */
    int64_t created; /* unix seconds */
    int fd;          /* the client's socket, to notice when it leaves */
    int tool_style;  /* server_tool_style (tools.h) of the chat family */
    bool tool_calls; /* calls are read from the answer (tools given, tool_choice not none) */
    bool tool_forced; /* the answer is a call: its prefix is in the prompt, a schema holds it */
    /* output for the client, written by the worker, read by the HTTP thread */
    char *out; /* owned */
    size_t out_len, out_pos, out_cap;
    bool started, done, oom;
    int status;         /* HTTP status of a non-streamed reply */
    atomic_bool cancel; /* the client left, or the server stops */
} server_job;

/* ---- connections (conns.c): deadlines, eviction, the reserve ---- */

#define SERVER_CONN_RESERVE 4 /* admitted beyond --max-connections, for /health and /metrics */

typedef enum server_conn_phase {
    SERVER_CONN_HEADERS = 0, /* waiting for a request head (new, or kept alive) */
    SERVER_CONN_BODY,        /* head in, reading the body */
    SERVER_CONN_BUSY,        /* the request is being answered */
} server_conn_phase;

typedef struct server_conn {
    struct MHD_Connection *c; /* borrowed from the daemon; NULL: the slot is free */
    int fd;                   /* the daemon's descriptor (shut down, never closed, here) */
    server_conn_phase phase;
    int64_t since_ms; /* monotonic: when the phase began */
    bool closing;     /* shut down here; the daemon has yet to close it */
} server_conn;

typedef struct server_conns {
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* wakes the reaper to stop */
    server_conn *slots; /* owned: max_connections + SERVER_CONN_RESERVE */
    size_t n_slots;
    size_t open; /* connections in slots and not closing */
    uint64_t timed_out_headers, timed_out_body, evicted;
    pthread_t reaper;
    bool initialised, reaper_started, stop;
} server_conns;

typedef struct server_conn_figures {
    size_t open;
    uint64_t timed_out_headers, timed_out_body, evicted;
} server_conn_figures;

struct server {
    lares_model *m;   /* borrowed */
    lares_session *s; /* borrowed: only the worker uses it */
    server_opts o;
    char model_id[256];
    const char *tmpl; /* the chat family's name (constant) */
    int32_t n_vocab;
    char *api_key; /* owned copy */
    char *cors;    /* owned copy of --cors; NULL: no cross-origin calls */
    struct MHD_Daemon *d;
    int64_t started_at;
    atomic_uint_fast64_t next_id;

    pthread_mutex_t mu; /* guards the queue, running, stopping and metrics */
    pthread_cond_t cv;  /* the worker waits for jobs */
    server_job **queue; /* owned ring of queue_capacity */
    size_t q_head, q_len;
    server_job *running;
    int32_t n_running;  /* the batch worker's busy slots (server_opts.batch) */
    int active; /* replies in progress (the stop waits for them to drain) */
    bool stopping;
    pthread_t worker;
    bool worker_started;
    server_metrics mx;
    server_conns conns;
    struct server_vocab_bytes *vb; /* owned: the tokens' bytes, read by the worker when a
                                      request first asks for structured output */
};

server_job *server_job_create(void);
void server_job_release(server_job *j);
/* Appends bytes for the client and wakes the HTTP thread (job lock held
 * inside). */
void server_job_write(server_job *j, const char *s, size_t n);
/* Marks the job finished; status for non-streamed replies. */
void server_job_finish(server_job *j, int status);
/* Writes o as one compact JSON text (takes the reference; nothing when it
 * cannot be printed: the client then sees the status alone). */
void server_job_write_json(server_job *j, json_t *o);

/* Queue: false (and e = 503) when full or stopping. Takes a reference. */
bool server_enqueue(server *sv, server_job *j, server_error *e);
/* The client went away: stops the job where it is. */
void server_cancel_job(server *sv, server_job *j);
void *server_worker_main(void *arg);
/* The same with several requests decoding together (server_opts.batch). */
void *server_worker_batch_main(void *arg);
/* The worker's side of /v1/embeddings (embed.c): answers and finishes j. */
void server_run_embedding(server *sv, server_job *j);

/* The Prometheus text of /metrics (malloc'd). */
char *server_metrics_text(server *sv);
void server_count_response(server *sv, int status);

/* Prepares a job from a parsed request: model name, tokens, context length.
 * False with e (400/404) when the request cannot run. */
bool server_prepare(server *sv, server_job *j, server_error *e);

/* The guard (conns.c): started before the daemon, stopped after it. */
lares_status server_conns_start(server *sv, lares_error *err);
void server_conns_stop(server *sv);
/* The connection's request moved to a phase (the deadline counts from now). */
void server_conns_phase(server *sv, struct MHD_Connection *c, server_conn_phase phase);
/* More than --max-connections are open: only /health and /metrics are served. */
bool server_conns_over_limit(server *sv);
void server_conns_figures(server *sv, server_conn_figures *out);

/* JSON pieces of the replies (respond.c) */
json_t *server_usage_json(size_t prompt, size_t cached, size_t completion);

#endif /* LARES_SERVER_IMPL_H */
