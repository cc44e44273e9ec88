/*
 * api: the public handles of include/lares.h and the generation loop.
 *
 * Owns: lares_model (the opened file, its bound model and vocabulary) and
 * lares_session (thread pool, KV cache, working memory, token history).
 * Everything below (kernels, windows, memory) is reached through the other
 * modules; this is the only place that joins them into a run.
 */
#ifndef LARES_API_H
#define LARES_API_H

#include "exec/exec.h"
#include "gguf/gguf.h"

#include <stdatomic.h>

#include "model/model.h"
#include "ops/ops.h"
#include "text/text.h"

struct lares_model {
    char *path;        /* owned */
    gguf_file *file;   /* owned */
    void *copy;        /* owned (mem_buffer_map): the file read into memory (no_mmap) */
    uint64_t copy_bytes;
    model *m;          /* owned; NULL when opened vocab-only */
    text_vocab *vocab; /* owned */
    double open_ms;
    char name[128];    /* general.name, cut to fit */
};

/* draft_rates.c: whether greedy drafts pay, measured: tokens per millisecond
 * of the passes (a batch's steps) of generation with drafts (rate[1]) and
 * without (rate[0]), by the number of generating sequences (the last entry
 * for that many or more; one session: 1). */
#define API_DRAFT_RATES_MAX 17
typedef struct api_draft_rates {
    double rate[2][API_DRAFT_RATES_MAX];
    double step_ms[2][API_DRAFT_RATES_MAX]; /* what a pass takes, recent passes weighing more */
    int32_t count[2][API_DRAFT_RATES_MAX];
    bool last_on;
    int32_t streak;  /* passes in a row with last_on's choice */
    double spent_ms; /* the time of those passes */
} api_draft_rates;
/* Whether the next pass's greedy sequences draft, with n_gen generating. */
bool api_draft_rates_choose(api_draft_rates *p, int32_t n_gen);
/* A pass of generation only, with n_gen generating and drafts `on`, gave
 * `tokens` tokens in ms (its drafting and drawing included). */
void api_draft_rates_note(api_draft_rates *p, int32_t n_gen, bool on, int32_t tokens, double ms);
/* Whether a sequence's drafts follow that measure: a greedy one's, unless it
 * asked for drafts on every pass; a sampled one's never (its draws depend on
 * its drafts, and its output must not depend on timing). */
static inline bool api_drafts_paced(const lares_generate_opts *o) {
    return o->sampler.temperature <= 0.0f && !o->spec_always;
}

struct lares_session {
    lares_model *lm;   /* borrowed */
    lares_session_opts o;
    ops_pool *pool;    /* owned */
    model_kv *kv;      /* owned: all layers, one window on one device */
    model_ctx *cx;     /* owned */
    exec_local *exec;  /* owned: runs this device's layer windows */
    float *x;          /* owned: n_batch x n_embd hidden states */
    float *logits;     /* owned: n_vocab */
    int32_t *history;  /* owned: n_ctx token ids in the cache, in order */
    int32_t *pos;      /* owned: n_batch positions */
    int32_t n_past;    /* tokens in the cache */
    atomic_bool cancel; /* set by lares_session_cancel from any thread */
    double create_ms;
    uint64_t mem_budget_bytes; /* the memory budget in force; UINT64_MAX: none known */
    struct api_ring *ring; /* owned: the head's side of a ring (api/ring.h); NULL on one device */
    struct gpu_session *gpu; /* owned: weights offloaded to a GPU (gpu/gpu.h); NULL: none */
    struct lares_session *draft; /* owned: the draft model's session (draft.c); NULL: none */
    float *logits_many;          /* owned: logits_many_cap x n_vocab, drafts of several sessions */
    int32_t logits_many_cap;
    bool pool_borrowed; /* pool belongs to the session this one drafts for */
    /* whether greedy drafts pay on this session (draft_rates.c): kept from
     * one generate call to the next, so that a server's short requests do
     * not each try passes without drafts again */
    api_draft_rates draft_rates;
};

/* session.c: lares_session_create; with pool (not NULL) the session borrows
 * that thread pool instead of starting its own (a draft session runs between
 * its target's passes, on the same threads). */
lares_status api_session_create(lares_model *lm, const lares_session_opts *opts, ops_pool *pool,
                                lares_session **out, lares_error *err);

/* generate.c: runs tokens [0, n) at positions n_past.. through all layers in
 * batches; after each batch rows (when not NULL) sees its final hidden states
 * (nb x n_embd, before the output norm); when want_logits the logits of the
 * last token are left in s->logits. LARES_ECANCELED when cancelled. */
typedef void (*api_rows_fn)(void *user, const float *x, int32_t nb);
lares_status api_evaluate(lares_session *s, const int32_t *tokens, size_t n, bool want_logits,
                          api_rows_fn rows, void *user, lares_error *err);

/* generate.c: what a drawn token carries to the caller */
#define MAX_LOGPROBS 20
/* the longest token piece streamed (real vocabularies stay far below) */
#define PIECE_MAX 2048

typedef struct token_probs {
    float logprob;
    int32_t n_top;
    int32_t top_ids[MAX_LOGPROBS];
    float top_logprobs[MAX_LOGPROBS];
} token_probs;

/* Draws the next token from logits after o->on_logits may change them; with
 * raw (n_vocab floats) tp gets the log-probabilities of the changed logits. */
int32_t api_draw(const lares_generate_opts *o, text_sampler *smp, float *logits,
                 int32_t n_vocab, const int32_t *history, size_t n_hist, float *raw,
                 token_probs *tp);
/* api_draw for a token x the draft model drew from q: the target's
 * distribution p (probs, n_vocab floats of room) after o->on_logits and the
 * sampler's transforms, then the acceptance rule of speculative sampling, so
 * that the token is distributed as plain sampling's. */
int32_t api_draw_verified(const lares_generate_opts *o, text_sampler *smp, float *logits,
                          int32_t n_vocab, const int32_t *history, size_t n_hist, float *raw,
                          token_probs *tp, float *probs, const float *q, int32_t x);
/* Hands a drawn token to o->on_token through the UTF-8 assembler:
 * LARES_STOP_EOS for an end-of-generation token (not delivered),
 * LARES_STOP_CALLER when the callback stops, else LARES_STOP_NONE. */
lares_stop_reason api_emit(const lares_generate_opts *o, const text_vocab *vocab,
                           text_stream *ts, int32_t tok, const token_probs *tp);
/* At the end of a run: the bytes of a character that never completed, to
 * o->on_token with token -1. */
void api_flush(const lares_generate_opts *o, text_stream *ts);

/* lookup.c: prompt lookup. Drafts up to max_draft tokens: those that followed
 * the most recent earlier occurrence of the last 3 (else 2) of toks[0, n).
 * Returns how many (0: no earlier occurrence). */
int32_t api_lookup_draft(const int32_t *toks, int32_t n, int32_t max_draft, int32_t *draft);

/* draft.c: a draft model's proposals (docs/speculative.md). Brings the
 * draft session d to the context ctx[0, n) (it keeps the start its cache
 * shares with it and evaluates the rest), then drafts up to max tokens one
 * after another, each evaluated before the next is drafted: with a greedy
 * sampler its argmax, else a draw from smp's distribution, whose n_vocab
 * probabilities go to q + i * n_vocab for draft i (q may be NULL when
 * greedy). *n_draft: how many. The last draft is not evaluated (the next call
 * evaluates what the target kept). */
lares_status api_draft_propose(lares_session *d, text_sampler *smp, const int32_t *ctx, int32_t n,
                               int32_t max, int32_t *draft, float *q, int32_t *n_draft,
                               lares_error *err);
/* draft.c: api_draft_propose for the m draft sessions ds[i] of one draft
 * model at once (a batch's sequences): one pass of the draft model per draft
 * position for all of them, on ds[0]'s executor and buffers with each
 * session's own cache, where one session after another took a pass each.
 * Sequence i drafts up to max[i] tokens after ctx[i][0, n[i]) into draft[i]
 * (q[i]: the draft's distributions, or NULL when greedy) with its sampler
 * smp[i]; n_draft[i]: how many. A sequence's drafts are drawn as alone,
 * from logits that a quantized draft model may round otherwise over several
 * rows than over one (verification keeps the output as it was). */
lares_status api_draft_propose_many(lares_session *const *ds, text_sampler *const *smp,
                                    const int32_t *const *ctx, const int32_t *n, const int32_t *max,
                                    int32_t *const *draft, float *const *q, int32_t *n_draft,
                                    int32_t m, lares_error *err);
/* draft.c: when to draft. A draft model whose drafts keep failing costs a
 * draft pass and a verified row per token for nothing: after
 * API_DRAFT_MISSES passes in a row with none kept, drafting pauses for a
 * number of tokens that doubles each time (API_DRAFT_PAUSE_MIN to
 * API_DRAFT_PAUSE_MAX); a kept draft ends the pauses. Whether a token is
 * drafted depends on past passes only, so the output's distribution is
 * unchanged. */
#define API_DRAFT_MISSES 4
#define API_DRAFT_PAUSE_MIN 8
#define API_DRAFT_PAUSE_MAX 64
typedef struct api_draft_pace {
    int32_t misses; /* passes in a row with no draft kept */
    int32_t pause;  /* tokens the last pause lasted; 0: none yet */
    int32_t skip;   /* tokens of the current pause still to go */
} api_draft_pace;
/* Whether to draft after the token just drawn (a paused token counts down). */
bool api_draft_pace_go(api_draft_pace *p);
/* After a pass that verified drafts: how many were kept. */
void api_draft_pace_note(api_draft_pace *p, int32_t kept);

/* draft.c: the draft model's sampler: the same settings as the target's
 * (o), drawing from a random stream of its own (the seed changed). */
lares_status api_draft_sampler(const lares_sampler_opts *o, int32_t n_vocab, text_sampler **out,
                               lares_error *err);
/* draft.c: LARES_EINVAL with a message unless `draft` can draft for
 * `target` (opened with weights, the same vocabulary and special ids). */
lares_status api_draft_check(const lares_model *draft, const lares_model *target,
                             lares_error *err);
/* draft.c: evaluates what the draft's cache lacks of ctx[0, n) (the prompt,
 * while the target reads it) without logits. */
lares_status api_draft_sync(lares_session *d, const int32_t *ctx, int32_t n, lares_error *err);

/* budget.c: the executor's options from the session's memory budget (after
 * the KV cache and buffers exist); LARES_ERANGE when the budget cannot work. */
lares_status api_exec_opts(const lares_session *s, exec_opts *out, uint64_t *budget_out,
                           lares_error *err);
/* Re-plans the weights for a KV cache holding `positions` positions (a
 * generate call's reach): fewer positions leave more of the budget to pin. */
lares_status api_plan_positions(lares_session *s, int32_t positions, lares_error *err);
/* The same beside n_kv more caches (a batch's sequences), each counted for
 * the positions it may touch; the caches' bytes are in the heap count. */
lares_status api_plan_caches(lares_session *s, int32_t positions, model_kv *const *kv,
                             const int32_t *kv_positions, int32_t n_kv, lares_error *err);
/* True when the weights stream even with an empty KV cache. */
bool api_streams_surely(const lares_session *s);
/* Bytes of kv that `positions` positions touch in `layers` of its layers
 * (the pages of the others stay untouched): what a memory budget counts for
 * a cache (budget.c; a ring worker's, ring_worker.c). */
uint64_t api_kv_touched(const model_kv *kv, int32_t positions, int32_t layers);
/* What every memory budget keeps for the program (its text, libraries,
 * thread stacks and allocator slack: API_RESERVE_BYTES) and for the page
 * tables of a mapping of file_bytes (an 8-byte entry per 4 KiB page, rounded
 * up generously): a session's (budget.c), a ring worker's (ring_worker.c),
 * a calibration's (calibrate.c). */
#define API_RESERVE_BYTES ((uint64_t)16 << 20)
static inline uint64_t api_fixed_bytes(uint64_t file_bytes) {
    return file_bytes / 256 + API_RESERVE_BYTES;
}

/* calibrate.c: runs real layer windows of the model at model_path on this
 * device for the profile (a sched_window_fn; user unused). */
struct sched_window_time;
lares_status api_run_windows(void *user, const char *model_path, int32_t n_threads,
                             uint32_t budget_ms, struct sched_window_time *decode,
                             struct sched_window_time *prompt, lares_error *err);

#endif /* LARES_API_H */
