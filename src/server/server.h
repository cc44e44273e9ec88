/*
 * server: the OpenAI-compatible HTTP API (`lares serve`), built on
 * libmicrohttpd and jansson as its own library (lares_server), so the core
 * library stays free of HTTP.
 *
 * Owns: the HTTP daemon (one thread per connection), a bounded queue of
 * generation jobs, the one worker thread that runs them on the session, and
 * the counters /metrics reports.
 *
 * Knows nothing about kernels or model internals: it talks to a lares_model
 * (tokenizing, chat templates, token pieces; read-only, shared by the HTTP
 * threads) and to one lares_session through include/lares.h only (generate,
 * prefix reuse, cancel). Whatever provides a lares_session (one device, or
 * the head of a ring) can serve.
 *
 * Lifetimes: the model and the session are borrowed and must outlive the
 * server; only the worker thread uses the session while the server runs.
 */
#ifndef LARES_SERVER_H
#define LARES_SERVER_H

#include "lares.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct server server;

typedef struct server_opts {
    const char *host;          /* address to bind; default "127.0.0.1" */
    uint16_t port;             /* 0: any free port (server_port tells which) */
    const char *api_key;       /* NULL: no key; else "Authorization: Bearer KEY" */
    const char *model_id;      /* the id /v1/models lists; NULL: the file's base name */
    const char *template_name; /* chat format; NULL: the model's (plain when it has none) */
    size_t max_body_bytes;     /* larger request bodies get 413; default 1 MiB */
    int32_t queue_capacity;    /* requests waiting behind the running one; default 8 */
    int32_t max_connections;   /* default 64 (plus a reserve of 4 for /health, /metrics) */
    int32_t max_per_ip;        /* connections from one address; 0: max_connections / 2 */
    int32_t header_timeout_s;  /* a request head must be in within this; default 10 */
    int32_t body_timeout_s;    /* and its body within this after the head; default 30 */
    int32_t idle_timeout_s;    /* no byte moved for this long closes it; default 30 */
    int32_t retry_after_s;     /* Retry-After of a 503; default 1 */
    const char *cors;          /* origins browsers may call from ("a,b" or "*"); NULL: none */
    /* NULL: one request at a time on the session; else up to its n_seq
     * requests decode together (continuous batching) and the session given
     * to server_start is lares_batch_session(batch) (embeddings use it) */
    lares_batch *batch;
    /* Speculative decoding with the session's draft model
     * (lares_session_set_draft): drafts per pass of every request
     * (lares_generate_opts.draft_n); 0: none. Not with batch. */
    int32_t draft_n;
    /* Prompt lookup drafts per pass of every request
     * (lares_generate_opts.lookup); 0: none. With or without batch. */
    int32_t lookup;
    /* greedy requests draft on every pass (lares_generate_opts.spec_always) */
    bool spec_always;
} server_opts;

server_opts server_opts_default(void);

/* Starts listening and the worker. model_path names the model in
 * /v1/models when opts->model_id is NULL. */
lares_status server_start(lares_model *m, lares_session *s, const char *model_path,
                          const server_opts *opts, server **out, lares_error *err);
/* The port it listens on. */
uint16_t server_port(const server *sv);
/* The chat format in use ("chatml", "plain", ...). */
const char *server_template(const server *sv);
/* Graceful stop: no new requests, the running generation is cancelled,
 * waiting ones get 503, connections finish; then frees. NULL is a no-op. */
void server_stop(server *sv);

#endif /* LARES_SERVER_H */
