/*
 * /metrics in the Prometheus text exposition format (version 0.0.4): the
 * counters the worker and the HTTP threads keep, the queue, and the process's
 * memory figures as the mem module measures them.
 */
#include "core/core.h"
#include "mem/mem.h"
#include "server/server_impl.h"

#include <stdarg.h>
#include <stdlib.h>

static const int slot_status[SERVER_STATUS_SLOTS] = {200, 204, 400, 401, 403,
                                                     404, 405, 413, 500, 503};

static int status_slot(int status) {
    for (int i = 0; i < SERVER_STATUS_SLOTS; i++) {
        if (slot_status[i] == status) {
            return i;
        }
    }
    return status >= 500 ? 8 : 2; /* other errors count with 500 or 400 */
}

void server_count_response(server *sv, int status) {
    pthread_mutex_lock(&sv->mu);
    sv->mx.responses[status_slot(status)]++;
    pthread_mutex_unlock(&sv->mu);
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(sbuf *b, const char *fmt, ...) {
    for (int tries = 0; tries < 2 && !b->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p != NULL && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->len + (size_t)n) {
            cap *= 2;
        }
        char *q = realloc(b->p, cap);
        if (q == NULL) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void metric(sbuf *b, const char *name, const char *type, const char *help) {
    add(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *server_metrics_text(server *sv) {
    pthread_mutex_lock(&sv->mu);
    const server_metrics mx = sv->mx;
    const size_t waiting = sv->q_len;
    const int running = sv->running != NULL ? 1 : (int)sv->n_running;
    pthread_mutex_unlock(&sv->mu);
    mem_sample ms;
    mem_sample_now(&ms);
    sbuf b = {0};
    metric(&b, "lares_http_responses_total", "counter", "HTTP responses by status code");
    for (int i = 0; i < SERVER_STATUS_SLOTS; i++) {
        add(&b, "lares_http_responses_total{code=\"%d\"} %" PRIu64 "\n", slot_status[i],
            mx.responses[i]);
    }
    metric(&b, "lares_requests_total", "counter", "generation requests accepted, by endpoint");
    add(&b, "lares_requests_total{endpoint=\"chat\"} %" PRIu64 "\n", mx.requests_chat);
    add(&b, "lares_requests_total{endpoint=\"completions\"} %" PRIu64 "\n", mx.requests_completion);
    add(&b, "lares_requests_total{endpoint=\"embeddings\"} %" PRIu64 "\n", mx.requests_embedding);
    metric(&b, "lares_requests_rejected_total", "counter", "requests refused with 503, queue full");
    add(&b, "lares_requests_rejected_total %" PRIu64 "\n", mx.rejected_busy);
    metric(&b, "lares_requests_canceled_total", "counter",
           "generations stopped because the client disconnected");
    add(&b, "lares_requests_canceled_total %" PRIu64 "\n", mx.canceled);
    metric(&b, "lares_prompt_tokens_total", "counter", "prompt tokens of all requests");
    add(&b, "lares_prompt_tokens_total %" PRIu64 "\n", mx.prompt_tokens);
    metric(&b, "lares_prompt_tokens_cached_total", "counter",
           "prompt tokens reused from the KV cache instead of evaluated");
    add(&b, "lares_prompt_tokens_cached_total %" PRIu64 "\n", mx.cached_tokens);
    metric(&b, "lares_completion_tokens_total", "counter", "generated tokens");
    add(&b, "lares_completion_tokens_total %" PRIu64 "\n", mx.completion_tokens);
    metric(&b, "lares_drafted_tokens_total", "counter",
           "tokens a draft model or prompt lookup proposed (speculative decoding)");
    add(&b, "lares_drafted_tokens_total %" PRIu64 "\n", mx.drafted_tokens);
    metric(&b, "lares_accepted_tokens_total", "counter",
           "of the drafted tokens, those generated as proposed");
    add(&b, "lares_accepted_tokens_total %" PRIu64 "\n", mx.accepted_tokens);
    metric(&b, "lares_prompt_seconds_total", "counter", "time spent evaluating prompts");
    add(&b, "lares_prompt_seconds_total %.6f\n", mx.prompt_seconds);
    metric(&b, "lares_generation_seconds_total", "counter", "time spent generating");
    add(&b, "lares_generation_seconds_total %.6f\n", mx.gen_seconds);
    metric(&b, "lares_prompt_tokens_per_second", "gauge", "prompt speed of the last request");
    add(&b, "lares_prompt_tokens_per_second %.3f\n", mx.last_prompt_tok_s);
    metric(&b, "lares_generation_tokens_per_second", "gauge",
           "generation speed of the last request");
    add(&b, "lares_generation_tokens_per_second %.3f\n", mx.last_gen_tok_s);
    metric(&b, "lares_queue_length", "gauge", "requests waiting behind the running one");
    add(&b, "lares_queue_length %zu\n", waiting);
    metric(&b, "lares_queue_capacity", "gauge", "requests that may wait before 503");
    add(&b, "lares_queue_capacity %d\n", sv->o.queue_capacity);
    metric(&b, "lares_requests_running", "gauge", "requests generating now (at most 1, or --parallel)");
    add(&b, "lares_requests_running %d\n", running);
    metric(&b, "lares_kv_cache_tokens", "gauge", "tokens in the session's context");
    add(&b, "lares_kv_cache_tokens %d\n", mx.kv_tokens);
    metric(&b, "lares_context_tokens", "gauge", "context length of the session");
    add(&b, "lares_context_tokens %d\n", lares_session_n_ctx(sv->s));
    server_conn_figures cf;
    server_conns_figures(sv, &cf);
    metric(&b, "lares_connections_open", "gauge", "HTTP connections open now");
    add(&b, "lares_connections_open %zu\n", cf.open);
    metric(&b, "lares_connections_limit", "gauge",
           "connections served normally (a reserve beyond it answers /health and /metrics)");
    add(&b, "lares_connections_limit %d\n", sv->o.max_connections);
    metric(&b, "lares_connections_closed_total", "counter",
           "connections closed by the server: request head or body not in by its deadline, or "
           "a waiting connection evicted to make room for a new one");
    add(&b, "lares_connections_closed_total{reason=\"header_timeout\"} %" PRIu64 "\n",
        cf.timed_out_headers);
    add(&b, "lares_connections_closed_total{reason=\"body_timeout\"} %" PRIu64 "\n",
        cf.timed_out_body);
    add(&b, "lares_connections_closed_total{reason=\"evicted\"} %" PRIu64 "\n", cf.evicted);
    metric(&b, "lares_resident_memory_bytes", "gauge", "resident set of the process");
    add(&b, "lares_resident_memory_bytes %" PRIu64 "\n", ms.rss_bytes);
    metric(&b, "lares_peak_resident_memory_bytes", "gauge", "high-water mark of the resident set");
    add(&b, "lares_peak_resident_memory_bytes %" PRIu64 "\n", ms.peak_rss_bytes);
    metric(&b, "lares_heap_bytes", "gauge",
           "bytes lares's own allocations hold now (the KV cache, buffers, requests), beside "
           "the mapped weights and the libraries' own memory");
    add(&b, "lares_heap_bytes %zu\n", lares_mem_in_use());
    metric(&b, "lares_major_page_faults_total", "counter", "major page faults of the process");
    add(&b, "lares_major_page_faults_total %" PRIu64 "\n", ms.major_faults);
    metric(&b, "lares_memory_pressure", "gauge",
           "largest drop of MemAvailable / MemTotal during the last request");
    add(&b, "lares_memory_pressure %.6f\n", mx.last_mem_pressure);
    if (ms.mem_available_bytes >= 0) {
        metric(&b, "lares_mem_available_bytes", "gauge", "MemAvailable of the machine");
        add(&b, "lares_mem_available_bytes %" PRId64 "\n", ms.mem_available_bytes);
    }
    /* the head of a ring (issue 9): plan changes, readable while a request runs */
    uint64_t replans = 0, failovers = 0;
    if (lares_session_ring_events(sv->s, &replans, &failovers)) {
        metric(&b, "lares_ring_replans_total", "counter",
               "re-balancing plan changes of the ring (a device slowed down or sped up)");
        add(&b, "lares_ring_replans_total %" PRIu64 "\n", replans);
        metric(&b, "lares_ring_failovers_total", "counter",
               "ring devices lost while the generation went on over the others");
        add(&b, "lares_ring_failovers_total %" PRIu64 "\n", failovers);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
