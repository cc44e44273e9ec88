/*
 * The worker: the one thread that uses the session. It takes jobs from the
 * queue in order, reuses the part of the KV cache that the new prompt shares
 * with what the cache holds (lares_session_reuse_prefix: usually the whole
 * conversation so far), generates, and writes the reply for the HTTP thread:
 * server-sent events while generating, or one JSON object at the end.
 *
 * Text goes out token by token, except a tail that may be the start of a
 * stop string (stop.c); log-probabilities go out with the text of their
 * token.
 */
#include "core/core.h"
#include "mem/mem.h"
#include "server/anthropic.h"
#include "server/ollama.h"
#include "server/respond.h"
#include "server/schema.h"
#include "server/tools.h"

#include <time.h>

typedef struct gen {
    server *sv;
    server_job *j;
    const server_request *r;
    int32_t index; /* the choice being generated (n > 1: one after the other) */
    /* held back: text and its tokens */
    char *text;
    size_t len, cap;
    server_tok *toks;
    size_t n_toks, cap_toks;
    /* sent so far */
    char *all; /* non-streamed: the whole answer */
    size_t all_len, all_cap;
    size_t sent_bytes;      /* completions' text_offset */
    json_t *lp;             /* non-streamed: chat content list or completion logprobs */
    server_constraint *con; /* structured output; NULL: free text */
    server_constraint con_store; /* what con points to */
    bool hold;              /* tools: the answer is kept whole, to look for calls at the end */
    bool stop_string;       /* a stop string ended the answer */
    size_t stop_index;      /* which one */
    bool oom;
} gen;

/* The choice object of a streamed chunk or the final reply. */
static json_t *choice(const gen *g, json_t *text, json_t *logprobs, const char *finish,
                      bool chunk) {
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(g->index));
    if (g->r->kind == SERVER_CHAT) {
        json_t *msg = json_object();
        if (!chunk) {
            json_object_set_new(msg, "role", json_string("assistant"));
        }
        if (text != NULL) {
            json_object_set_new(msg, "content", text);
        }
        json_object_set_new(c, chunk ? "delta" : "message", msg);
        if (logprobs != NULL) {
            json_t *lp = json_object();
            json_object_set_new(lp, "content", logprobs);
            logprobs = lp;
        }
    } else {
        json_object_set_new(c, "text", text != NULL ? text : json_string(""));
    }
    json_object_set_new(c, "logprobs", logprobs != NULL ? logprobs : json_null());
    json_object_set_new(c, "finish_reason", finish != NULL ? json_string(finish) : json_null());
    return c;
}

/* Sends the first n_tok held tokens and the first n_bytes of held text. */
static void release(gen *g, size_t n_tok, size_t n_bytes) {
    const server_request *r = g->r;
    const lares_model *m = g->sv->m;
    const bool stream = r->stream && !g->hold;
    if (n_bytes == 0 && n_tok == 0) {
        return;
    }
    json_t *lps = NULL;
    if (r->logprobs && !(g->hold && r->stream)) {
        lps = r->kind == SERVER_CHAT ? json_array() : server_completion_logprobs_new();
        size_t start = 0;
        for (size_t k = 0; k < n_tok; k++) {
            const server_tok *t = &g->toks[k];
            if (t->id >= 0) {
                if (r->kind == SERVER_CHAT) {
                    json_array_append_new(lps, server_chat_logprob(m, t, r->top_logprobs));
                } else {
                    server_completion_logprobs_add(lps, m, t, r->top_logprobs,
                                                   g->sent_bytes + start);
                }
            }
            start = t->end;
        }
    }
    if (stream && r->dialect == SERVER_OLLAMA) {
        if (n_bytes > 0) {
            server_ollama_chunk(g->j, server_lossy_string(g->text, n_bytes));
        }
    } else if (stream && r->dialect == SERVER_ANTHROPIC) {
        if (n_bytes > 0) {
            server_anthropic_delta(g->j, server_lossy_string(g->text, n_bytes));
        }
    } else if (stream) {
        json_t *o = server_reply_base(g->j, g->sv->model_id, true);
        json_array_append_new(json_object_get(o, "choices"),
                              choice(g, server_lossy_string(g->text, n_bytes), lps, NULL, true));
        if (r->include_usage) {
            json_object_set_new(o, "usage", json_null());
        }
        server_write_event(g->j, o);
    } else {
        if (!lares_grow((void **)&g->all, &g->all_cap, g->all_len + n_bytes + 1, 1)) {
            g->oom = true;
        } else {
            memcpy(g->all + g->all_len, g->text, n_bytes);
            g->all_len += n_bytes;
        }
        if (lps != NULL && r->kind == SERVER_CHAT) {
            json_array_extend(g->lp, lps);
            json_decref(lps);
        } else if (lps != NULL) {
            static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs",
                                               "text_offset"};
            for (size_t k = 0; k < LARES_ARRAY_LEN(keys); k++) {
                json_array_extend(json_object_get(g->lp, keys[k]), json_object_get(lps, keys[k]));
            }
            json_decref(lps);
        }
    }
    g->sent_bytes += n_bytes;
    /* keep what is still held */
    memmove(g->text, g->text + n_bytes, g->len - n_bytes);
    g->len -= n_bytes;
    memmove(g->toks, g->toks + n_tok, (g->n_toks - n_tok) * sizeof *g->toks);
    g->n_toks -= n_tok;
    for (size_t k = 0; k < g->n_toks; k++) {
        g->toks[k].end -= n_bytes;
    }
}

static void on_logits(float *logits, int32_t n_vocab, void *user) {
    gen *g = user;
    server_constraint_mask(g->con, logits, n_vocab);
}

static bool on_token(const lares_token_info *t, void *user) {
    gen *g = user;
    if (g->con != NULL && t->token >= 0) {
        server_constraint_advance(g->con, t->token);
    }
    if (!lares_grow((void **)&g->text, &g->cap, g->len + t->piece_len + 1, 1) ||
        !lares_grow((void **)&g->toks, &g->cap_toks, g->n_toks + 1, sizeof *g->toks)) {
        g->oom = true;
        return false;
    }
    memcpy(g->text + g->len, t->piece, t->piece_len);
    g->len += t->piece_len;
    server_tok *k = &g->toks[g->n_toks++];
    k->id = t->token;
    k->logprob = t->logprob;
    k->n_top = LARES_MIN(t->n_top, SERVER_MAX_LOGPROBS);
    for (int32_t i = 0; i < k->n_top; i++) {
        k->top_ids[i] = t->top_ids[i];
        k->top_lp[i] = t->top_logprobs[i];
    }
    k->end = g->len;
    const server_request *r = g->r;
    size_t cut = 0, safe = g->len;
    if (r->n_stop > 0 &&
        server_stop_find(r->stop, r->stop_len, r->n_stop, g->text, g->len, &cut, &safe)) {
        size_t n = 0; /* the tokens that start before the stop string */
        size_t start = 0;
        while (n < g->n_toks && start < cut) {
            start = g->toks[n++].end;
        }
        for (size_t s = 0; s < r->n_stop; s++) { /* the one that starts at cut */
            if (g->len - cut >= r->stop_len[s] &&
                memcmp(g->text + cut, r->stop[s], r->stop_len[s]) == 0) {
                g->stop_index = s;
                break;
            }
        }
        g->len = cut;
        release(g, n, cut);
        g->stop_string = true;
        return false;
    }
    size_t n = 0;
    while (n < g->n_toks && g->toks[n].end <= safe) {
        n++;
    }
    release(g, n, n > 0 ? g->toks[n - 1].end : 0);
    return !atomic_load(&g->j->cancel) && !g->oom;
}

static void write_error(server_job *j, const char *msg, int status) {
    server_error e;
    server_fail(&e, status, "server_error", NULL, NULL, "%s", msg);
    if (j->req.dialect == SERVER_ANTHROPIC && j->req.stream) {
        server_anthropic_error_event(j, &e);
        return;
    }
    if (j->req.dialect == SERVER_ANTHROPIC) {
        server_job_write_json(j, server_anthropic_error_json(&e));
        return;
    }
    if (j->req.dialect == SERVER_OLLAMA) { /* a line of its own, streamed or not */
        server_job_write_json(j, server_ollama_error_json(&e));
        server_job_write(j, "\n", 1);
        return;
    }
    json_t *o = server_error_json(&e);
    if (j->req.stream) {
        server_write_event(j, o);
        server_job_write(j, "data: [DONE]\n\n", 14);
    } else {
        server_job_write_json(j, o);
    }
}

/* What the choices of one request add up to. */
typedef struct run_totals {
    size_t cached;    /* prompt tokens reused from the cache for the first choice */
    size_t generated; /* tokens sampled, all choices */
    size_t drafted, accepted; /* speculative decoding, all choices */
    double prompt_s, gen_s;
    lares_stats last; /* the last choice's figures */
} run_totals;

/* The calls in a held answer (tools.c), with the forced prefix the prompt
 * ended with; none: the answer is text after all, and a stream gets it now. */
static json_t *take_calls(server_job *j, gen *g, char **content) {
    const server_request *r = &j->req;
    const server_tool_style style = (server_tool_style)j->tool_style;
    const char *prefix = j->tool_forced ? server_tools_forced_prefix(style) : "";
    const size_t np = strlen(prefix);
    json_t *calls = NULL;
    char *text = lares_alloc(np + g->all_len + 1);
    if (text != NULL) {
        memcpy(text, prefix, np);
        if (g->all_len > 0) {
            memcpy(text + np, g->all, g->all_len);
        }
        calls = server_tools_parse_output(style, r->tools, text, np + g->all_len, content);
        lares_free(text);
    }
    g->hold = false;
    if (calls == NULL && r->stream && g->all_len > 0) { /* release it as streamed text */
        lares_free(g->text);
        g->text = g->all;
        g->len = g->all_len;
        g->cap = g->all_cap;
        g->all = NULL;
        g->all_len = g->all_cap = 0;
        release(g, 0, g->len);
    }
    return calls;
}

/* The tokens' bytes for structured output, read on first use. */
static bool vocab_bytes(server *sv) {
    if (sv->vb != NULL) {
        return true;
    }
    server_vocab_bytes *vb = lares_calloc(1, sizeof *vb);
    lares_error err = {0};
    if (vb == NULL || server_vocab_bytes_read(sv->m, sv->n_vocab, vb, &err) != LARES_OK) {
        lares_free(vb);
        return false;
    }
    sv->vb = vb;
    return true;
}

/* Prepares choice g->index: the options to generate it with (go), and the
 * first events of a stream. False when it failed (the error is written). */
static bool choice_begin(server *sv, server_job *j, gen *g, lares_generate_opts *out) {
    const server_request *r = &j->req;
    if (!r->stream && r->logprobs) {
        g->lp = r->kind == SERVER_CHAT ? json_array() : server_completion_logprobs_new();
    }
    lares_generate_opts go = lares_generate_opts_default();
    go.n_predict = r->max_tokens;
    go.sampler = r->sampler;
    /* choice i of a seeded request samples with seed + i: the first choice is
     * the answer the same request with n = 1 gets */
    go.sampler.seed += (uint64_t)g->index;
    if (!r->seed_given) {
        go.sampler.seed =
            (uint64_t)time(NULL) * 6364136223846793005u + atomic_fetch_add(&sv->next_id, 1);
    }
    go.n_logprobs = r->logprobs ? LARES_MAX(1, r->top_logprobs) : 0;
    go.draft_n = sv->o.draft_n;
    go.lookup = sv->o.lookup;
    go.spec_always = sv->o.spec_always;
    go.on_token = on_token;
    go.user = g;
    g->hold = j->tool_calls;
    if (r->format != NULL) {
        /* the tokens left bound the value: it closes before max_tokens */
        const int64_t budget =
            r->max_tokens >= 0 ? r->max_tokens : lares_session_n_ctx(sv->s) - (int64_t)j->n_ids;
        if (!vocab_bytes(sv) ||
            !server_constraint_init(&g->con_store, r->format, sv->vb, budget)) {
            if (sv->vb != NULL) {
                server_constraint_free(&g->con_store);
            }
            write_error(j, "out of memory preparing structured output", 500);
            server_job_finish(j, 500);
            return false;
        }
        g->con = &g->con_store;
        go.on_logits = on_logits;
    }
    if (r->stream && r->dialect == SERVER_ANTHROPIC) {
        server_anthropic_start(j);
    }
    if (r->stream && r->kind == SERVER_CHAT && r->dialect == SERVER_OPENAI) {
        json_t *o = server_reply_base(j, sv->model_id, true);
        json_t *c = choice(g, json_string(""), NULL, NULL, true);
        json_object_set_new(json_object_get(c, "delta"), "role", json_string("assistant"));
        json_array_append_new(json_object_get(o, "choices"), c);
        if (r->include_usage) {
            json_object_set_new(o, "usage", json_null());
        }
        server_write_event(j, o);
    }
    *out = go;
    return true;
}

/* Ends choice g->index after generation returned rc with figures st: the
 * held text, the finish events or the reply's choice. `kept` prompt tokens
 * came from the cache. False when it failed (the error is written) or the
 * client left. */
static bool choice_end(server *sv, server_job *j, gen *g, json_t *reply, run_totals *tot,
                       size_t kept, lares_status rc, const lares_stats *stp, const char *msg) {
    const server_request *r = &j->req;
    const lares_stats st = *stp;
    if (g->index == 0) {
        tot->cached = kept;
    }
    if (g->con != NULL) {
        server_constraint_free(g->con);
        g->con = NULL;
    }
    if (!g->stop_string) {
        release(g, g->n_toks, g->len); /* the held tail: no stop string came */
    }
    tot->generated += (size_t)st.n_generated;
    tot->drafted += (size_t)st.n_drafted;
    tot->accepted += (size_t)st.n_accepted;
    tot->prompt_s += st.prompt_ms / 1e3;
    tot->gen_s += st.gen_ms / 1e3;
    tot->last = st;
    const char *finish = st.stop == LARES_STOP_LENGTH ? "length" : "stop";
    if (rc != LARES_OK || g->oom) {
        write_error(j, rc != LARES_OK ? msg : "out of memory while generating", 500);
        server_job_finish(j, 500);
        return false;
    }
    char *content = NULL;
    json_t *calls = g->hold ? take_calls(j, g, &content) : NULL;
    if (calls != NULL) {
        finish = "tool_calls";
    }
    if (calls != NULL && r->stream &&
        r->dialect == SERVER_OPENAI) { /* one delta, then the finish */
        json_t *o = server_reply_base(j, sv->model_id, true);
        json_t *c = choice(g, content ? json_string(content) : NULL, NULL, NULL, true);
        json_object_set_new(json_object_get(c, "delta"), "tool_calls",
                            server_tools_openai_calls(calls, j->id, g->index, true));
        json_array_append_new(json_object_get(o, "choices"), c);
        if (r->include_usage) {
            json_object_set_new(o, "usage", json_null());
        }
        server_write_event(j, o);
    }
    if (r->dialect == SERVER_ANTHROPIC) {
        const char *reason = calls != NULL                  ? "tool_use"
                             : g->stop_string               ? "stop_sequence"
                             : st.stop == LARES_STOP_LENGTH ? "max_tokens"
                                                            : "end_turn";
        json_t *text = calls != NULL ? json_string(content ? content : "")
                                     : server_lossy_string(g->all ? g->all : "", g->all_len);
        server_anthropic_end(j, text, reason, g->stop_string ? r->stop[g->stop_index] : NULL, calls,
                             (size_t)st.n_generated);
    } else if (r->dialect == SERVER_OLLAMA) {
        const server_ollama_counts c = {.prompt_tokens = j->n_ids - kept,
                                        .generated = (size_t)st.n_generated,
                                        .total_s = (st.prompt_ms + st.gen_ms) / 1e3,
                                        .prompt_s = st.prompt_ms / 1e3,
                                        .gen_s = st.gen_ms / 1e3};
        json_t *text = r->stream || calls != NULL
                           ? json_string(!r->stream && content ? content : "")
                           : server_lossy_string(g->all ? g->all : "", g->all_len);
        server_ollama_final(j, text, calls != NULL ? "stop" : finish, calls, &c);
    } else if (r->stream) {
        json_t *o = server_reply_base(j, sv->model_id, true);
        json_array_append_new(
            json_object_get(o, "choices"),
            choice(g, r->kind == SERVER_CHAT ? NULL : json_string(""), NULL, finish, true));
        if (r->include_usage) {
            json_object_set_new(o, "usage", json_null());
        }
        server_write_event(j, o);
    } else if (calls != NULL) {
        json_t *c = choice(g, content ? json_string(content) : json_null(), g->lp, finish, false);
        g->lp = NULL;
        json_object_set_new(json_object_get(c, "message"), "tool_calls",
                            server_tools_openai_calls(calls, j->id, g->index, false));
        json_array_append_new(json_object_get(reply, "choices"), c);
    } else {
        json_t *lp = g->lp;
        g->lp = NULL;
        json_array_append_new(
            json_object_get(reply, "choices"),
            choice(g, server_lossy_string(g->all ? g->all : "", g->all_len), lp, finish, false));
    }
    json_decref(calls);
    lares_free(content);
    return !atomic_load(&j->cancel);
}

static void gen_free(gen *g) {
    json_decref(g->lp);
    lares_free(g->text);
    lares_free(g->toks);
    lares_free(g->all);
    g->lp = NULL;
    g->text = g->all = NULL;
    g->toks = NULL;
    g->len = g->cap = g->n_toks = g->cap_toks = g->all_len = g->all_cap = 0;
}

/* Whether a choice finished the job with an error. */
static bool job_failed(server_job *j) {
    pthread_mutex_lock(&j->mu);
    const bool failed = j->done;
    pthread_mutex_unlock(&j->mu);
    return failed;
}

/* The reply object of a non-streamed OpenAI request (choices are appended
 * to it), else NULL. */
static json_t *job_reply(const server *sv, server_job *j) {
    const server_request *r = &j->req;
    return r->stream || r->dialect != SERVER_OPENAI ? NULL
                                                    : server_reply_base(j, sv->model_id, false);
}

/* After the last choice: the usage and the end of the reply (unless a
 * choice failed it), and the metrics. kv_tokens: the cache's fill for them. */
static void job_end(server *sv, server_job *j, json_t *reply, const run_totals *totp,
                    int32_t kv_tokens) {
    const server_request *r = &j->req;
    const run_totals tot = *totp;
    const bool failed = job_failed(j);
    if (failed) {
        json_decref(reply);
    } else if (r->dialect != SERVER_OPENAI) {
        server_job_finish(j, 200); /* the dialect's end went with the choice */
    } else {
        json_t *usage = server_usage_json(j->n_ids, tot.cached, tot.generated);
        if (r->stream) {
            if (r->include_usage) {
                json_t *o = server_reply_base(j, sv->model_id, true);
                json_object_set_new(o, "usage", usage);
                server_write_event(j, o);
            } else {
                json_decref(usage);
            }
            server_job_write(j, "data: [DONE]\n\n", 14);
            server_job_finish(j, 200);
        } else {
            json_object_set_new(reply, "usage", usage);
            char *s = json_dumps(reply, JSON_COMPACT);
            json_decref(reply);
            if (s != NULL) {
                server_job_write(j, s, strlen(s));
                free(s);
                server_job_finish(j, 200);
            } else {
                write_error(j, "out of memory writing the reply", 500);
                server_job_finish(j, 500);
            }
        }
    }
    const lares_stats st = tot.last;
    mem_sample ms;
    mem_sample_now(&ms);
    pthread_mutex_lock(&sv->mu);
    server_metrics *mx = &sv->mx;
    mx->prompt_tokens += j->n_ids;
    mx->cached_tokens += tot.cached;
    mx->completion_tokens += (uint64_t)tot.generated;
    mx->drafted_tokens += (uint64_t)tot.drafted;
    mx->accepted_tokens += (uint64_t)tot.accepted;
    mx->prompt_seconds += tot.prompt_s;
    mx->gen_seconds += tot.gen_s;
    if (st.n_prompt > 0) {
        mx->last_prompt_tok_s = st.prompt_tok_s;
    }
    if (st.n_generated > 1) {
        mx->last_gen_tok_s = st.gen_tok_s;
    }
    mx->last_mem_pressure = st.mem_pressure;
    mx->kv_tokens = kv_tokens;
    if (atomic_load(&j->cancel) && !sv->stopping) {
        mx->canceled++;
    }
    pthread_mutex_unlock(&sv->mu);
}


static void run(server *sv, server_job *j) {
    const server_request *r = &j->req;
    run_totals tot = {0};
    json_t *reply = job_reply(sv, j);
    bool ok = true;
    for (int32_t i = 0; i < r->n_choices && ok; i++) {
        gen g = {.sv = sv, .j = j, .r = r, .index = i};
        lares_generate_opts go;
        ok = choice_begin(sv, j, &g, &go);
        if (ok) {
            const size_t kept = lares_session_reuse_prefix(sv->s, j->ids, j->n_ids);
            lares_stats st;
            lares_error err = {0};
            lares_status rc = lares_generate(sv->s, j->ids + kept, j->n_ids - kept, &go, NULL, 0,
                                             NULL, &st, &err);
            ok = choice_end(sv, j, &g, reply, &tot, kept, rc, &st, err.msg);
        }
        gen_free(&g);
        ok = ok && !job_failed(j);
    }
    int32_t n_past = 0;
    lares_session_tokens(sv->s, &n_past);
    job_end(sv, j, reply, &tot, n_past);
}

/* A job leaves the queue: its HTTP thread learns it started. False when the
 * client left while it waited (then it is answered 499 here). */
static bool job_start(server *sv, server_job *j) {
    pthread_mutex_lock(&j->mu);
    j->started = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (!atomic_load(&j->cancel)) {
        return true;
    }
    server_job_finish(j, 499);
    pthread_mutex_lock(&sv->mu);
    sv->mx.canceled += !sv->stopping;
    pthread_mutex_unlock(&sv->mu);
    return false;
}

void *server_worker_main(void *arg) {
    server *sv = arg;
    for (;;) {
        pthread_mutex_lock(&sv->mu);
        while (!sv->stopping && sv->q_len == 0) {
            pthread_cond_wait(&sv->cv, &sv->mu);
        }
        if (sv->q_len == 0) { /* stopping; server_stop answered the waiting ones */
            pthread_mutex_unlock(&sv->mu);
            return NULL;
        }
        server_job *j = sv->queue[sv->q_head];
        sv->q_head = (sv->q_head + 1) % (size_t)sv->o.queue_capacity;
        sv->q_len--;
        sv->running = j;
        pthread_mutex_unlock(&sv->mu);

        if (job_start(sv, j)) { /* else the client left while it waited */
            if (j->req.kind == SERVER_EMBEDDING) {
                server_run_embedding(sv, j);
            } else {
                run(sv, j);
            }
        }
        pthread_mutex_lock(&sv->mu);
        sv->running = NULL;
        pthread_mutex_unlock(&sv->mu);
        server_job_release(j);
    }
}

/* ---- several requests at once (server_opts.batch, docs/batching.md) ----
 *
 * A slot per sequence of the batch: a job takes a free slot (the one whose
 * cache holds most of its prompt), each step of the batch runs every slot's
 * sequence, and a slot whose sequence ended finishes its choice, starts the
 * job's next one, or ends the job and is free again. Embedding requests run
 * on the batch's own session between steps. */

typedef struct slot {
    server_job *j; /* NULL: free */
    gen g;         /* the choice in progress: its address is the callbacks' user */
    json_t *reply;
    run_totals tot;
    int32_t choice;
} slot;

/* Starts the slot's current choice; false when that ended the job's choices
 * (an error was written). */
static bool slot_begin(server *sv, lares_batch *b, slot *sl, int32_t i) {
    server_job *j = sl->j;
    memset(&sl->g, 0, sizeof sl->g);
    sl->g.sv = sv;
    sl->g.j = j;
    sl->g.r = &j->req;
    sl->g.index = sl->choice;
    lares_generate_opts go;
    if (!choice_begin(sv, j, &sl->g, &go)) {
        gen_free(&sl->g);
        return false;
    }
    lares_error err = {0};
    const lares_status rc = lares_batch_start(b, i, j->ids, j->n_ids, &go, &err);
    if (rc != LARES_OK) {
        const lares_stats none = {0};
        choice_end(sv, j, &sl->g, sl->reply, &sl->tot, 0, rc, &none, err.msg);
        gen_free(&sl->g);
        return false;
    }
    return true;
}

static void slot_free_job(server *sv, slot *sl) {
    job_end(sv, sl->j, sl->reply, &sl->tot, (int32_t)(sl->j->n_ids + sl->tot.generated));
    server_job_release(sl->j);
    sl->j = NULL;
    sl->reply = NULL;
}

/* The slot's sequence ended (rc: LARES_OK, or the step's failure): its
 * choice ends, the next starts, or the job ends. */
static void slot_end(server *sv, lares_batch *b, slot *sl, int32_t i, lares_status rc,
                     const char *msg) {
    server_job *j = sl->j;
    lares_stats st;
    lares_batch_stats(b, i, &st);
    const size_t kept = j->n_ids - LARES_MIN((size_t)st.n_prompt, j->n_ids);
    bool ok = choice_end(sv, j, &sl->g, sl->reply, &sl->tot, kept, rc, &st, msg);
    gen_free(&sl->g);
    ok = ok && !job_failed(j);
    while (ok && ++sl->choice < j->req.n_choices) {
        if (slot_begin(sv, b, sl, i)) {
            return; /* the next choice runs */
        }
        ok = false;
    }
    slot_free_job(sv, sl);
}

/* A job taken from the queue: into the free slot that caches most of its
 * prompt, or answered at once (cancelled while it waited, embeddings). */
static void slot_take(server *sv, lares_batch *b, slot *slots, int32_t n, server_job *j) {
    if (!job_start(sv, j)) { /* the client left while it waited */
        server_job_release(j);
        return;
    }
    if (j->req.kind == SERVER_EMBEDDING) {
        server_run_embedding(sv, j);
        server_job_release(j);
        return;
    }
    int32_t best = -1;
    size_t best_kept = 0;
    for (int32_t i = 0; i < n; i++) {
        if (slots[i].j != NULL) {
            continue;
        }
        const size_t kept = lares_batch_cached(b, i, j->ids, j->n_ids);
        if (best < 0 || kept > best_kept) {
            best = i;
            best_kept = kept;
        }
    }
    slot *sl = &slots[best]; /* the caller took no more jobs than free slots */
    sl->j = j;
    sl->reply = job_reply(sv, j);
    memset(&sl->tot, 0, sizeof sl->tot);
    sl->choice = 0;
    if (!slot_begin(sv, b, sl, best)) {
        slot_free_job(sv, sl);
    }
}

void *server_worker_batch_main(void *arg) {
    server *sv = arg;
    lares_batch *b = sv->o.batch;
    const int32_t n = lares_batch_n_seq(b);
    slot *slots = lares_calloc((size_t)n, sizeof *slots);
    server_job **taken = lares_calloc((size_t)n, sizeof *taken);
    if (slots == NULL || taken == NULL) {
        lares_free(slots);
        lares_free(taken);
        return server_worker_main(arg); /* one at a time, on the batch's session */
    }
    for (;;) {
        int32_t busy = 0, n_taken = 0;
        for (int32_t i = 0; i < n; i++) {
            busy += slots[i].j != NULL;
        }
        pthread_mutex_lock(&sv->mu);
        while (!sv->stopping && sv->q_len == 0 && busy == 0) {
            pthread_cond_wait(&sv->cv, &sv->mu);
        }
        if (sv->stopping) { /* server_stop answered the waiting ones */
            for (int32_t i = 0; i < n; i++) {
                if (slots[i].j != NULL) {
                    atomic_store(&slots[i].j->cancel, true);
                }
            }
            if (busy == 0 && sv->q_len == 0) {
                pthread_mutex_unlock(&sv->mu);
                break;
            }
        }
        while (sv->q_len > 0 && busy + n_taken < n) {
            taken[n_taken++] = sv->queue[sv->q_head];
            sv->q_head = (sv->q_head + 1) % (size_t)sv->o.queue_capacity;
            sv->q_len--;
        }
        pthread_mutex_unlock(&sv->mu);
        for (int32_t k = 0; k < n_taken; k++) {
            slot_take(sv, b, slots, n, taken[k]);
        }
        busy = 0;
        for (int32_t i = 0; i < n; i++) {
            if (slots[i].j != NULL) {
                busy++;
                if (atomic_load(&slots[i].j->cancel)) {
                    lares_batch_cancel(b, i); /* also while it reads its prompt */
                }
            }
        }
        pthread_mutex_lock(&sv->mu);
        sv->n_running = busy;
        pthread_mutex_unlock(&sv->mu);
        if (busy == 0) {
            continue;
        }
        int32_t active = 0;
        lares_error err = {0};
        const lares_status rc = lares_batch_step(b, &active, &err);
        if (rc != LARES_OK) { /* every sequence of the failed step ends with its error */
            for (int32_t i = 0; i < n; i++) {
                lares_batch_cancel(b, i);
            }
            lares_error none = {0};
            (void)lares_batch_step(b, &active, &none); /* ends them before any pass */
        }
        for (int32_t i = 0; i < n; i++) {
            if (slots[i].j != NULL && !lares_batch_active(b, i)) {
                slot_end(sv, b, &slots[i], i, rc, rc != LARES_OK ? err.msg : "");
            }
        }
    }
    pthread_mutex_lock(&sv->mu);
    sv->n_running = 0;
    pthread_mutex_unlock(&sv->mu);
    lares_free(slots);
    lares_free(taken);
    return NULL;
}
