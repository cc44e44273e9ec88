/*
 * exec internals shared by local.c (the executor), plan.c (units and the
 * choice of what stays resident) and stream.c (the prefetch thread).
 */
#ifndef LARES_EXEC_IMPL_H
#define LARES_EXEC_IMPL_H

#include "exec/exec.h"

#include <pthread.h>
#include <stdatomic.h>

/* The life of a streamed unit within one pass:
 * IDLE -> FETCHING (prefetch thread reads) -> READY -> DONE (computed) ->
 * RELEASING (prefetch thread drops it) -> IDLE. A DONE unit asked for again
 * before it was released goes straight back to READY. Pinned units go
 * IDLE -> FETCHING -> READY once and stay. */
typedef enum unit_state {
    UNIT_IDLE = 0,
    UNIT_FETCHING,
    UNIT_READY,
    UNIT_DONE,
    UNIT_RELEASING
} unit_state;

typedef struct exec_unit {
    mem_span span;      /* owned: the unit's bytes in the file */
    int32_t layer;      /* -1: the output matrix (and final norm) */
    model_part part_lo, part_hi; /* the parts of the layer it holds (model/plan.h) */
    bool pinned;        /* stays resident across tokens */
    unit_state state;   /* guarded by exec_stream.mu */
    atomic_bool loaded; /* pinned and read: the caller may use it without the lock */
    mem_layout lay;     /* owned: where the span lands in a buffer of direct reads */
    uint8_t *buf;       /* while read directly: the owned buffer (lay.bytes) holding it */
    size_t buf_bytes;   /* its size */
    uint64_t cost;      /* while in the stream's fifo: what it counts against the window */
} exec_unit;

enum { EXEC_GUESS_MAX = 2 }; /* experts of the next layer read ahead at most (guess.c) */

/* Direct reads of expert slices (experts_direct.c): each resident slice sits
 * in a slot of its size class in an arena (the layouts of a model's slices
 * come in a few sizes: the layers' type mixes differ), and the view's expert
 * matrices (`exps`, which the executor's view of the model points its MoE
 * layers at) point there. The reads are started when the router has chosen
 * and finished when the pass needs them (mem_direct_submit/finish), so that
 * the experts already in memory compute meanwhile. */
enum { EXEC_SLOT_CLASSES = 8 };

typedef struct exec_slot_class {
    uint64_t bytes;         /* every slot's size */
    uint64_t at;            /* where its n slots begin in the arena */
    int32_t n;              /* slices of this size: one slot each at most */
    int32_t *warm, n_warm;  /* owned, n: free slots whose pages are in memory */
    int32_t *cold, n_cold;  /* owned, n: free slots without pages */
} exec_slot_class;

typedef struct exec_expert_io {
    mem_direct *d;          /* owned; NULL: the slices come through the page cache */
    mem_layout *lay;        /* owned, n_layer x n_expert: each slice's layout in a slot */
    uint8_t *class_of;      /* owned, n_layer x n_expert: the slice's size class */
    exec_slot_class cls[EXEC_SLOT_CLASSES];
    int32_t n_cls;
    uint8_t *arena;         /* owned: every class's slots, reserved (pages come as they fill) */
    uint64_t arena_bytes;
    ops_matrix *exps;       /* owned, n_layer x 3 x n_expert: the view's expert matrices */
    int32_t *slot_of;       /* owned, n_layer x n_expert: the slot holding the slice, -1 */
    uint64_t *batch_of;     /* owned, n_layer x n_expert: the read's ticket, 0: landed */
    uint64_t touched_bytes; /* slots with pages: the held ones and the warm free ones */
    uint64_t touched_peak;  /* the most touched_bytes was */
    uint64_t limit_bytes;   /* what touched_bytes may reach: the cache's capacity */
    mem_layout queue;       /* the extents of the slices queued since the last start */
    size_t *pending;        /* owned, n_layer x n_expert: those slices */
    int32_t n_pending;
    bool tried;             /* open was tried (once per executor) */
    bool failed;            /* a read failed: its message in err */
    lares_error err;
    double probe_direct_Bps, probe_mmap_Bps; /* `auto`'s probe (0: none) */
} exec_expert_io;

/* The expert slices of the MoE layers this device runs, and which of them
 * are resident: an LRU cache of `capacity` bytes, filled on the caller's
 * thread when a router picks experts (model_ctx_on_route). */
typedef struct exec_experts {
    int32_t n_expert;
    mem_span *slices;     /* owned: n_layer x n_expert, the 3 ranges of an expert */
    uint64_t *last_use;   /* owned: n_layer x n_expert, tick of last use; 0: never */
    float *heat;          /* owned: n_layer x n_expert, uses decayed to last_use */
    double half_life;     /* ticks in which a use's weight in heat halves */
    bool *resident;       /* owned: n_layer x n_expert */
    int32_t *missing;     /* owned: n_expert, being read for the layer of the last route */
    int32_t n_missing, n_late, late_layer; /* of missing: read on demand, and in all */
    const int32_t *route; /* the last route call's experts (the pass's), for its guess */
    int32_t n_route;
    uint64_t tick;
    uint64_t bytes;       /* every slice of the cycle's MoE layers */
    uint64_t layer_max;   /* the most one layer's experts take */
    uint64_t capacity;    /* the cache's budget; at least layer_max */
    uint64_t cached;      /* bytes resident now */
    uint64_t wait_ns, hits, misses, read_bytes, release_bytes;
    uint64_t direct_bytes, direct_fallbacks; /* of read_bytes, read directly; failures */
    exec_expert_io io;
    /* guessing the next MoE layer's experts (guess.c); guess false: off */
    bool guess;
    int32_t *next_moe, *prev_moe; /* owned: n_layer, the neighbour MoE layers run here */
    float *co;            /* owned: n_layer x n_expert x n_expert, next layer's choices */
    float *seen;          /* owned: n_layer x n_expert, times each choice was counted */
    bool *guessed;        /* owned: n_layer x n_expert, read on a guess, not used yet */
    float *p;             /* owned: n_expert, scratch of one guess */
    uint64_t ticks_per_pass; /* MoE layers run here: the ticks of one token */
    int32_t pend[EXEC_GUESS_MAX], n_pend, pend_layer; /* the last guesses, for their layer */
    double scored, scored_picked; /* guesses scored and of them picked, decayed */
    uint64_t n_scored, n_scored_picked; /* the same, not decayed */
    uint64_t guesses, guess_hits;
} exec_experts;

/* What the routers chose (routes.c): the previous single-token choice of
 * each layer and how often each expert was chosen by single-token passes. */
typedef struct exec_routes {
    int32_t n_tok;     /* tokens of the pass running now */
    bool *prev;        /* owned: n_layer x n_expert, the layer's last choice */
    bool *prev_ok;     /* owned: n_layer, that choice was of a single token */
    uint64_t *counts;  /* owned: n_layer x n_expert */
    uint64_t shared;   /* experts a token shared with the previous one, summed */
    uint64_t pairs;    /* (token, layer) pairs compared */
    bool to_cache;     /* streaming: choices go on to the expert cache */
} exec_routes;

/* An owned buffer of direct reads, free for the next unit. */
typedef struct exec_buffer {
    uint8_t *p;
    size_t bytes;
} exec_buffer;

/* Direct reads of streamed units (direct.c). The forward pass runs on
 * `view`, a copy of the model whose layer views (and output matrix) point
 * into a unit's owned buffer while the unit is read directly and back into
 * the mapping otherwise. Buffers are kept for the next unit rather than
 * unmapped: their pages stay faulted in, and the buffers never hold more than
 * the window (a unit at a time beyond it when no spare fits) however units
 * of different sizes come and go. */
typedef struct exec_direct {
    mem_direct *d;        /* owned; NULL: streamed units come through the page cache */
    model view;           /* e->m with `layers` below */
    model_layer *layers;  /* owned copy of e->m's, n_layer */
    exec_buffer *spare;   /* owned: buffers no unit uses */
    size_t n_spare;
    uint64_t live_bytes;  /* buffers holding units */
    uint64_t spare_bytes;
    uint64_t peak_bytes;  /* of live + spare */
    uint64_t slot_span;   /* the largest streamed unit's span bytes: what each counts */
    uint64_t slot_lay;    /* and its largest layout: the size of every buffer */
    bool tried;           /* open was tried (once per executor) */
    double probe_direct_Bps, probe_mmap_Bps; /* what `auto` measured (0: no probe) */
} exec_direct;

typedef struct exec_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool sync_ready;       /* mu and cv exist (from creation to free) */
    bool started;          /* the prefetch thread runs */
    bool stop;             /* guarded by mu */
    int32_t cursor;        /* the unit the prefetcher considers next */
    int32_t *fifo;         /* owned: streamed units not yet released, in fetch order */
    int32_t n_fifo;
    uint64_t inflight_bytes; /* span bytes of the units in fifo */
    bool want_output;      /* the caller's pass `caller_pass` ends with the output */
    uint64_t caller_pass;  /* passes the caller began (exec_local_begin_pass) */
    uint64_t fetch_pass;   /* the pass the cursor is in: +1 each time it wraps */
    bool out_asked;        /* the caller waits for the output unit */
    bool lock_refused;     /* a lock was refused once: do not retry every unit */
    /* Convoys (stream.c): the window [cv_l0, cv_l1) was run cv_n times in a
     * row, each time for another group of sequences (told apart by its
     * first sequence's cache, cv_first). The cursor walks each window of
     * the cycle `reps` times in a row (the last convoy's length; 1: once),
     * `rep` the walk it is in. */
    int32_t cv_l0, cv_l1, cv_n;
    const void *cv_first;
    int32_t reps, rep;
    int32_t *window_of;    /* owned, n_units: the window of the unit's layer, -1: output */
    int32_t *first_of;     /* owned, n_units: the first unit of that window */
    exec_counters c;       /* guarded by mu */
    void *scratch;         /* owned: MEM_READ_PREAD's buffer */
    size_t scratch_bytes;
} exec_stream;

struct exec_local {
    const model *m;      /* borrowed */
    model_kv *kv;        /* borrowed */
    model_ctx *cx;       /* borrowed */
    exec_opts o;         /* o.windows points at `windows` below */
    exec_window *windows; /* owned copy */
    int32_t n_windows;
    mem_file mf;
    exec_unit *units;    /* owned: the cycle, in the order a token uses them */
    int32_t n_units;
    int32_t *unit_of_layer; /* owned, n_layer: its first unit, -1 when not run here */
    int32_t *unit_of_part;  /* owned, n_layer x MODEL_PART_COUNT: -1 when not run here or empty */
    int32_t part_layer;     /* the layer a streaming pass runs now, -1 between layers */
    int32_t part_unit;      /* of part_layer: the unit acquired last, -1: none */
    int32_t out_unit;    /* index of the output unit, -1 when not the head */
    mem_span embd;       /* the embedding's bytes (head, untied output) */
    mem_span locked;     /* what mem_lock holds */
    bool *pin_scratch;   /* owned, n_units: a candidate plan's pinned units */
    exec_experts x;      /* MoE layers: expert slices and their cache */
    exec_routes r;       /* MoE layers: what the routers chose */
    exec_plan_info plan;
    exec_stream st;
    exec_direct dx;
};

/* plan.c: the units of the cycle and what stays resident */
lares_status exec_units_build(exec_local *e, lares_error *err);
void exec_units_free(exec_local *e);
/* The plan for a weight budget: fills p and pinned[n_units]; changes nothing. */
lares_status exec_plan_compute(const exec_local *e, uint64_t budget, bool *pinned,
                               exec_plan_info *p, lares_error *err);

/* experts.c: the expert slices of MoE layers and their cache */
lares_status exec_experts_build(exec_local *e, lares_error *err);
void exec_experts_free(exec_local *e);
/* the router observer installed while streaming (model_route_fn): starts the
 * reads of the missing experts and returns how many are still being read
 * (their ready flags cleared); exec_experts_wait (model_wait_fn) waits for them */
int32_t exec_experts_on_route(void *user, int32_t layer, const int32_t *experts, int32_t n,
                              bool *ready);
void exec_experts_wait(void *user, int32_t layer);
/* A new cache size (0: not streaming): releases least recently used slices
 * until the cache fits; `untracked` says slices may be resident without the
 * cache knowing (the weights fitted until now), so all are released. */
void exec_experts_set_capacity(exec_local *e, uint64_t capacity, bool untracked);

/* experts_direct.c: direct reads of expert slices into owned slots. open
 * starts them where stream_io allows and (auto) a probe finds them no slower
 * than the page cache; false: the page cache serves. Everything below runs on
 * the caller's thread. */
bool exec_experts_direct_open(exec_local *e);
void exec_experts_direct_close(exec_local *e);
/* what slice s takes in the cache while read directly: its slot's size */
uint64_t exec_experts_direct_cost(const exec_local *e, size_t s);
/* the cache's capacity: free slots give their pages back until the slots
 * with pages fit it (the caller has made the cache fit first) */
void exec_experts_direct_limit(exec_local *e, uint64_t capacity);
/* queues the read of slice s into a free slot and points its views there;
 * start hands what is queued to the reader (one batch: its reads in flight
 * together) */
void exec_experts_direct_read(exec_local *e, size_t s);
void exec_experts_direct_start(exec_local *e);
/* frees slice s's slot (waiting for a read of it in flight) and points its
 * views back into the mapping */
void exec_experts_direct_drop(exec_local *e, size_t s);
/* waits until the reads of `layer`'s experts (n) have landed; false: a read
 * failed (this one or an earlier one): the caller drops every slice, stops
 * the direct reads and has the page cache serve from then on */
bool exec_experts_direct_wait(exec_local *e, int32_t layer, const int32_t *experts, int32_t n);
/* after a failed read, every slice dropped: no more direct reads (warned) */
void exec_experts_direct_stop(exec_local *e);

/* guess.c: the next MoE layer's likely experts, learned from the choices of
 * consecutive layers in single-token passes */
lares_status exec_guess_build(exec_local *e, lares_error *err);
void exec_guess_free(exec_experts *x);
/* counts this layer's choice against the previous MoE layer's (same token) */
void exec_guess_learn(exec_local *e, int32_t layer, const int32_t *experts, int32_t n);
/* up to EXEC_GUESS_MAX experts of the next MoE layer worth reading now, into out; the
 * guess is scored when that layer's router has run (exec_guess_learn) */
int32_t exec_guess_next(exec_local *e, int32_t layer, const int32_t *experts, int32_t n,
                        int32_t *out);
/* guesses are picked often enough to be read (or expert_guess > 0) */
bool exec_guess_pays(const exec_local *e);

/* routes.c: the router observer, installed for MoE models when there is a
 * context; it measures choices and feeds the expert cache (r.to_cache) */
lares_status exec_routes_build(exec_local *e, lares_error *err);
void exec_routes_free(exec_local *e);
int32_t exec_routes_observe(void *user, int32_t layer, const int32_t *experts, int32_t n,
                            bool *ready);

/* direct.c: direct reads of streamed units into owned buffers. open tries
 * to start them for the executor's file (false: the page cache serves, with
 * a warning when they were asked for explicitly). */
void exec_direct_init(exec_local *e);
bool exec_direct_open(exec_local *e);
void exec_direct_free(exec_local *e);
/* The model the forward pass runs on: the view once one exists (it points
 * into the mapping wherever nothing was read directly). */
const model *exec_direct_model(const exec_local *e);
/* auto's verdict on a probe's rates, logged: direct reads stay unless the
 * page cache read more than `margin` (exec_opts.direct_margin when set)
 * times faster */
bool exec_probe_verdict(const exec_local *e, const char *what, double direct_Bps,
                        double mmap_Bps, double margin);
/* Makes the view (a copy of the model with the executor's own layer array);
 * false: out of memory. */
bool exec_direct_view(exec_local *e);
/* Sizes the buffers for the plan's streamed units (run_plan, thread stopped):
 * every buffer holds the largest of them, so that any spare serves any unit. */
void exec_direct_slots(exec_local *e);
/* What a streamed unit counts against the window: its bytes, or a whole
 * buffer's while reading directly. */
uint64_t exec_direct_cost(const exec_local *e, const exec_unit *un);
/* Prefetch thread: reads unit `un` into an owned buffer and points its views
 * there, keeping the buffers within `window` bytes where it can. On failure
 * nothing changed (the caller reads through the page cache). */
lares_status exec_direct_fetch(exec_local *e, exec_unit *un, uint64_t window, mem_io *io,
                               lares_error *err);
/* Points the unit's views back into the mapping and keeps its buffer as a
 * spare; returns the bytes it held. */
uint64_t exec_direct_release(exec_local *e, exec_unit *un);
/* Every unit held in a buffer is released and the spare buffers unmapped (the
 * prefetch thread is stopped); those units' states go back to IDLE. */
void exec_direct_drop(exec_local *e);

/* stream.c: the prefetch thread and the caller's side of it. init/destroy
 * bracket the executor's life; start/stop bracket a streaming plan (the
 * thread is stopped while a plan changes), keeping the counters. */
lares_status exec_stream_init(exec_local *e, lares_error *err);
void exec_stream_destroy(exec_local *e);
lares_status exec_stream_start(exec_local *e, lares_error *err);
void exec_stream_stop(exec_local *e);
/* The caller is about to run layers [l0, l1) for the group of sequences
 * whose first one's cache is `group`: the convoy is noted (stream.c). */
void exec_stream_begin_window(exec_local *e, const void *group, int32_t l0, int32_t l1);
/* blocks until unit u is in memory */
void exec_stream_acquire(exec_local *e, int32_t u);
/* the caller finished with unit u */
void exec_stream_done(exec_local *e, int32_t u);

#endif /* LARES_EXEC_IMPL_H */
