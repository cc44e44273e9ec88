/*
 * api/batch: the internals of lares_batch shared by batch.c (the batch, and
 * its step on one device) and batch_ring.c (its step over a ring, issue 20).
 */
#ifndef LARES_API_BATCH_IMPL_H
#define LARES_API_BATCH_IMPL_H

#include "api/api.h"
#include "api/ring.h"

/* The rows of a chunk read alone: a slice (a layer of them, llama-1b Q4_0 on
 * 2 cores: about 11 ms) is what a request arriving meanwhile waits for, and
 * the GEMM reads 64 rows at 0.92x the speed of 128 (docs/batching.md) */
#define LONE_CHUNK_ROWS 64

/* While other sequences are active, prompts that fit whole in this many
 * shares (shared_prompt_rows) are read whole in a step: 8 x 8 rows by
 * default, a chunk's (batch.c, lares_batch_step) */
#define PROMPT_WHOLE_PER_SHARE 8

typedef enum seq_state {
    SEQ_FREE = 0, /* never started, finished, or released */
    SEQ_PROMPT,   /* reading its prompt */
    SEQ_GEN,      /* generating: `last` is evaluated next step */
    SEQ_CHUNK,    /* a chunk of its prompt is partway through the layers (b->chunk) */
    /* over a ring (batch_ring.c): its rows are in a group going around */
    SEQ_FLIGHT_GEN,    /* its token (and drafts): drawn from when the group lands */
    SEQ_FLIGHT_PROMPT, /* a chunk of its prompt */
} seq_state;

typedef struct batch_seq {
    seq_state state;
    model_kv *kv;     /* owned */
    int32_t *history; /* owned: n_ctx ids in the cache, in order */
    int32_t n_past;
    int32_t *prompt; /* owned copy; [at, n_prompt) still to read */
    size_t n_prompt, at;
    lares_generate_opts o;
    text_sampler *smp; /* owned while active */
    text_stream ts;
    float *raw; /* owned: logits before the sampler, for log-probabilities */
    int32_t last;
    int32_t draft_max; /* drafts the next step may add (paced) */
    int32_t n_draft;   /* drafts after `last` in this step's rows */
    /* a draft model's drafts (o.draft_n > 0) */
    lares_session *draft;    /* owned, kept with the slot (its cache a prefix) */
    text_sampler *draft_smp; /* owned while active */
    float *draft_q;          /* owned while sampling: the draft's distribution of each draft */
    float *draft_p;          /* owned while sampling: the target's, n_vocab */
    api_draft_pace pace;
    /* this step's drafts, proposed with the other sequences' (batch_propose) */
    bool proposed;
    int32_t n_proposed;
    int32_t proposal[LARES_LOOKUP_MAX];
    size_t n_gen;
    atomic_bool cancel;
    lares_stats st;
    uint64_t t_start, t_prompt, t_first;
} batch_seq;

struct lares_batch {
    lares_session *s;     /* owned */
    lares_model *draft;   /* lares_batch_set_draft, not owned */
    int32_t n_seq;
    batch_seq *seq;
    model_kv **kvs;   /* n_seq: the sequences' caches, for the memory budget */
    int32_t *touched; /* n_seq: their touched positions, for the memory budget */
    model_seq *runs;  /* n_seq: this step's rows per sequence */
    int32_t *tokens;  /* n_batch */
    int32_t out_cap;  /* output rows the two below hold: n_seq, more with drafts */
    float *last_x;    /* out_cap x n_embd: the hidden states whose logits are drawn from */
    float *logits;    /* out_cap x n_vocab */
    int32_t turn;     /* among prompts of equal length, the one that reads first next step */
    int32_t shared_prompt_rows; /* prompt rows per step while another sequence is active */
    int32_t *order;             /* n_seq: this step's prompts, shortest first */
    /* A prompt read alone goes through the layers a slice per step, so that a
     * request arriving meanwhile waits for a slice, not for the whole chunk */
    struct {
        int32_t seq; /* -1: none */
        int32_t n_rows;
        int32_t half;    /* the next half layer to run (model_forward_halves) */
        int32_t *tokens; /* LONE_CHUNK_ROWS */
        int32_t *pos;    /* LONE_CHUNK_ROWS */
        float *x;        /* LONE_CHUNK_ROWS x n_embd: the rows' hidden states */
    } chunk;
    /* over a ring (batch_ring.c): the groups going around, pipelined */
    ring_group *groups; /* owned, max_groups (buffers made on first use) */
    int32_t max_groups;
    int32_t ring_groups; /* groups in flight at most (0: chosen by the pass costs) */
    int32_t cur_groups;  /* the groups in flight chosen last (0: none yet) */
    int32_t ring_turn;   /* the sequence the next group starts from */
    bool last_gen;       /* the last group landed had generating rows only */
    /* whether drafts pay (draft_rates.c) */
    api_draft_rates pace;
    bool drafts_on; /* this step: greedy sequences draft */
};

/* batch.c */

/* The sequence's run ends: the figures, and the slot is free again. */
void batch_seq_finish(batch_seq *q, lares_stop_reason why);
/* A generating sequence's rows landed (its token, then its drafts, toks
 * and the logits of each): draws and keeps what the draws confirm. */
void batch_seq_verify(lares_batch *b, batch_seq *q, const int32_t *toks, float *logits);
/* Draws the sequence's next token from its logits; false when its run ended. */
bool batch_seq_draw(lares_batch *b, batch_seq *q, float *logits);
/* Up to `room` drafts after q's token (prompt lookup, or the batch's draft
 * model) into tokens and pos; their count in *n and q->n_draft. */
lares_status batch_drafts(lares_batch *b, batch_seq *q, int64_t room, int32_t *tokens,
                          int32_t *pos, int32_t *n, lares_error *err);
/* Room for n output rows. */
lares_status batch_reserve_out(lares_batch *b, int32_t n, lares_error *err);
int32_t batch_count_active(const lares_batch *b);

/* batch_ring.c */

/* The groups of a batch over a ring; LARES_EUNSUPPORTED for a ring whose
 * workers cannot keep several sequences. */
lares_status batch_ring_init(lares_batch *b, lares_error *err);
void batch_ring_free(lares_batch *b);
lares_status batch_ring_step(lares_batch *b, int32_t *n_active, lares_error *err);

#endif /* LARES_API_BATCH_IMPL_H */
