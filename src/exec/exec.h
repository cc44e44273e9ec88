/*
 * exec: runs layer windows on this device.
 *
 * Owns: the local executor that joins the forward pass (model) with weight
 * residency (mem). It sees the weights this device needs per token as a cycle
 * of units: each layer of its windows in order, then (on the head) the output
 * matrix. When they fit the weight budget it simply calls model_forward: no
 * thread, no advice, nothing measurable. When they do not, it plans:
 *
 *   - pinned units stay resident across tokens (prefetched once, optionally
 *     locked), spread evenly over the cycle;
 *   - streamed units are read ahead by a prefetch thread, in cycle order, as
 *     long as the streamed bytes in memory stay within the window (the budget
 *     left after the pinned units), and released (unmapped and dropped from
 *     the page cache) as soon as they have been computed, because they would
 *     not survive until the next token anyway.
 *
 * So window i+1 is read (large sequential reads) while window i computes,
 * and never more than fits is prefetched (no prefetch-release thrash).
 * Streamed units are read directly (O_DIRECT) into buffers the executor owns
 * where the file system allows it (exec_opts.stream_io, direct.c): the
 * forward pass then runs on a view of the model pointed into them.
 *
 * MoE layers: a layer unit holds everything but the experts. When a router
 * has chosen (model_ctx_on_route), exactly the chosen experts' slices are
 * read, all at once, into an LRU cache of expert slices that keeps recently
 * used experts while the budget allows.
 *
 * Output is bit-identical to the unbudgeted path: only residency changes.
 *
 * Knows nothing about sockets or sampling. Usable outside a lares_session: a
 * ring worker creates one per model with its own KV cache and windows.
 *
 * Lifetimes: borrows the model, KV cache and working memory, which outlive it.
 * Threads: one caller thread at a time per executor (plus its own prefetch
 * thread inside).
 */
#ifndef LARES_EXEC_H
#define LARES_EXEC_H

#include "mem/mem.h"
#include "model/model.h"

/* Layers [l0, l1). */
typedef struct exec_window {
    int32_t l0, l1;
} exec_window;

/* How streamed units are read (docs/memory.md, "Direct reads"). */
typedef enum exec_stream_io {
    EXEC_IO_AUTO = 0, /* direct reads where the file system allows them and a probe of the
                         file does not find the page cache faster (direct.c), else mmap */
    EXEC_IO_MMAP,     /* through the page cache into the mapping (read_method) */
    EXEC_IO_DIRECT,   /* direct reads into buffers the executor owns; EXEC_IO_MMAP with a
                         warning where the file system refuses them */
    EXEC_IO_COUNT
} exec_stream_io;

typedef struct exec_opts {
    /* memory the weights may use (KV cache and buffers already taken off);
     * 0: no limit, everything stays mapped and nothing special happens */
    uint64_t weight_budget_bytes;
    /* most streamed units in memory at once, and the window is that many
     * times the largest unit; 0: two units' worth, as many as fit in it */
    int32_t window_units;
    bool head;             /* the output matrix runs here (exec_local_output) */
    bool lock;             /* mlock what stays resident (a refusal is a warning) */
    /* the windows one token runs on this device, in order; NULL: the KV cache's */
    const exec_window *windows;
    int32_t n_windows;
    mem_read_method read_method; /* how prefetches read; 0: the measured best */
    lares_expert_cache expert_cache; /* MoE: what the expert cache evicts first */
    int32_t expert_guess; /* MoE: read the next layer's likely experts ahead;
                             > 0 on, < 0 off, 0 the default (guess.c) */
    exec_stream_io stream_io;        /* how streamed units are read */
    mem_direct_engine direct_engine; /* direct reads: how requests stay in flight (tests) */
    /* EXEC_IO_AUTO: how much faster the page cache must read this file (a
     * short probe, direct.c) before streaming goes through it; 0: 1.25 */
    double direct_margin;
    /* tests: auto's probe of expert reads runs however small the slices */
    bool expert_probe_any;
} exec_opts;

/* What the executor decided. */
typedef struct exec_plan_info {
    bool streaming;
    int32_t n_units;
    int32_t n_pinned;
    int32_t window_units;      /* 0: limited by bytes only */
    uint64_t weight_bytes;     /* bytes of every unit (+ the embedding on the head) */
    uint64_t pinned_bytes;     /* resident across tokens */
    uint64_t stream_bytes;     /* read from disk per pass over the cycle */
    uint64_t window_bytes;     /* most streamed bytes in memory at once */
    uint64_t expert_bytes;     /* MoE: every expert slice of the cycle's layers */
    uint64_t expert_cache_bytes; /* MoE: bytes of experts kept resident at most */
    uint64_t readahead_slack_bytes; /* kept free for the kernel's read-ahead */
    uint64_t min_budget_bytes; /* the smallest weight budget that works */
    uint64_t locked_bytes;
    bool direct;               /* streamed units are read directly into owned buffers */
    mem_direct_engine direct_engine; /* and how (MEM_DIRECT_AUTO when not direct) */
    /* EXEC_IO_AUTO's probe of the file, bytes a second (0: not probed) */
    double probe_direct_Bps, probe_mmap_Bps;
    bool experts_direct;       /* MoE expert slices are read directly into owned slots */
    double expert_probe_direct_Bps, expert_probe_mmap_Bps; /* and auto's probe of them */
} exec_plan_info;

/* Cumulative figures since creation (read them before and after a span of
 * work and subtract). */
typedef struct exec_counters {
    uint64_t wait_ns;        /* the caller's thread waited for weights to arrive */
    uint64_t n_waits;        /* units the caller had to wait for */
    uint64_t prefetch_bytes; /* bytes the prefetch thread read (page-rounded) */
    uint64_t prefetch_ns;    /* time it spent reading */
    uint64_t release_bytes;  /* bytes released after use */
    uint64_t n_mispredicted; /* times the caller asked for a unit out of the planned order */
    uint64_t n_kept;         /* units the cursor found still in memory after their last use
                                and kept instead of reading them again (stream.c) */
    uint64_t expert_hits;    /* MoE: chosen experts found resident */
    uint64_t expert_misses;  /* MoE: chosen experts read from disk */
    uint64_t expert_bytes;   /* MoE: bytes of expert slices read */
    uint64_t expert_guesses; /* MoE: slices read ahead on a guess */
    uint64_t expert_guess_hits; /* MoE: of them, chosen by the next layer's router */
    uint64_t expert_guess_scored; /* MoE: guesses made, read or not (guess.c) */
    uint64_t expert_guess_picked; /* MoE: of them, chosen by the next layer's router */
    uint64_t route_pairs;    /* MoE: (token, layer) choices compared with the previous token's */
    uint64_t route_shared;   /* MoE: of their experts, chosen by the previous token too */
    uint64_t direct_bytes;   /* of prefetch_bytes, read directly into owned buffers */
    uint64_t direct_fallbacks; /* direct reads that failed and went through the page cache */
    /* levels, not sums: the owned buffers of direct reads now and at most (the
     * window's bytes live in them instead of the page cache), expert slots
     * with pages included (their most added to the units' most) */
    uint64_t buffer_bytes;
    uint64_t buffer_peak_bytes;
} exec_counters;

typedef struct exec_local exec_local;

/* The weight bytes the options would put in the cycle, and the least weight
 * budget that can work (the largest layer with all its experts). For
 * messages before creation. */
lares_status exec_weight_needs(const model *m, const model_kv *kv, const exec_opts *o,
                               uint64_t *total, uint64_t *minimum, lares_error *err);

/* A budget below the largest unit is LARES_ERANGE naming the minimum. */
lares_status exec_local_create(const model *m, model_kv *kv, model_ctx *cx, const exec_opts *o,
                               exec_local **out, lares_error *err);
void exec_local_free(exec_local *e);

/* Changes the weight budget between passes (the KV cache fills, a ring
 * re-plans). The pinned units of a larger budget include those of a smaller
 * one, so growing never re-reads; shrinking releases what no longer fits.
 * A budget below the least that works is LARES_ERANGE and changes nothing. */
lares_status exec_local_set_budget(exec_local *e, uint64_t weight_budget, lares_error *err);

/* Begins a pass (one token batch through the cycle) and says whether it ends
 * with exec_local_output, so the prefetcher reads the output matrix only when
 * it will be used. A wrong hint, or no call at all, costs a read that is not
 * overlapped or is wasted, never a wrong result. */
void exec_local_begin_pass(exec_local *e, bool want_output);

/* Runs layers [l0, l1) on x (n_tok rows of n_embd) at positions pos. */
lares_status exec_local_forward(exec_local *e, int32_t l0, int32_t l1, const int32_t *pos,
                                int32_t n_tok, float *x, lares_error *err);
/* The same for several sequences, each with its own KV cache (model_forward_seqs). */
lares_status exec_local_forward_seqs(exec_local *e, const model_seq *seqs, int32_t n_seqs,
                                     int32_t l0, int32_t l1, const int32_t *pos, int32_t n_tok,
                                     float *x, lares_error *err);
/* The same by half layers (model_forward_halves): halves [h0, h1), 2l being
 * layer l's attention block and 2l + 1 its FFN block. */
lares_status exec_local_forward_halves(exec_local *e, const model_seq *seqs, int32_t n_seqs,
                                       int32_t h0, int32_t h1, const int32_t *pos, int32_t n_tok,
                                       float *x, lares_error *err);

/* The head's output: final norm and output matrix (model_output), with the
 * output matrix's residency managed like a layer's. */
/* LARES_EIO when the model file failed to read meanwhile (gguf_check). */
lares_status exec_local_output(exec_local *e, float *x, int32_t n_rows, float *logits,
                               lares_error *err);

void exec_local_plan(exec_local *e, exec_plan_info *out);
void exec_local_counters(exec_local *e, exec_counters *out);
/* MoE: times each (layer, expert) was chosen by single-token passes since
 * creation, n_layer x n_expert into out. */
void exec_local_route_counts(exec_local *e, uint64_t *out);

#endif /* LARES_EXEC_H */
