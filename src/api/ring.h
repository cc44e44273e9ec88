/*
 * api/ring: a session as the head of a ring, and the worker's compute side.
 * The cluster module does the networking; this joins it with the model and
 * the executor:
 *
 *   ring_head.c    opening the ring, the forward pass around it, statistics
 *   ring_switch.c  changing plans while a conversation runs (issue 9):
 *                  re-balancing when a device drifts, failover when one is
 *                  lost, and rebuilding the KV cache of the moved layers by
 *                  re-running the conversation's tokens (docs/ring.md)
 *   ring_worker.c  lares_worker: the callbacks a worker computes with
 *
 * Threads: everything here runs on the session's thread, except
 * lares_session_ring_events (atomics).
 */
#ifndef LARES_API_RING_H
#define LARES_API_RING_H

#include "api/api.h"
#include "cluster/cluster.h"
#include "sched/sched.h"

#include <pthread.h>
#include <stdatomic.h>

/* A KV slot (issue 20): slot 0 is the session's own conversation, the
 * others a batch's sequences (lares_batch over a ring); each is a KV cache of
 * its own on the head and on every member. What the head knows of it: */
typedef struct ring_slot {
    model_kv *kv;           /* borrowed: the session's cache (slot 0) or the sequence's */
    const int32_t *history; /* borrowed: the token ids in it, n_ctx */
    int32_t keep;           /* positions every layer must hold now: what a plan change keeps */
    int32_t synced;         /* positions the members hold KV entries for */
    /* KV mirroring (ring.json "kv_mirror", issue 15): the head's cache holds
     * a copy of every layer's entries, [0, mirrored[l]) of layer l (its own
     * layers computed here, the others sent by their owners), so a re-plan
     * moves them from here instead of re-running the conversation */
    int32_t *mirrored;    /* owned, n_layer */
    uint8_t *batch_start; /* owned, n_ctx: 1 where a pass of this slot began */
} ring_slot;

/* A group of a batch's sequences in the ring (ring_pipe.c, issue 20): rows
 * of several slots that go around together, several groups at once. */
typedef enum ring_group_state {
    RING_GROUP_IDLE = 0, /* free, or formed and not sent yet */
    RING_GROUP_FLIGHT,   /* on its way through the layers (ACT `seq` out, or the head's turn) */
    RING_GROUP_LANDED    /* every layer done: x holds the last hidden states */
} ring_group_state;

typedef struct ring_group {
    ring_group_state state;
    uint64_t seq;  /* the ACT in flight */
    int32_t layer; /* the next layer to run */
    int32_t n_rows, n_runs;
    bool gen;         /* only generating rows: its pass feeds the monitor */
    int32_t *tokens;  /* owned, n_batch: the rows' ids (a failover re-embeds them) */
    int32_t *pos;     /* owned, n_batch */
    float *x;         /* owned, n_batch x n_embd */
    cluster_run *run; /* owned, n_batch: slot and rows of each run */
    model_seq *seqs;  /* owned, n_batch: the same with the head's caches */
} ring_group;

typedef struct api_ring {
    cluster_ring_config *rc; /* owned */
    cluster_head *head;      /* owned */
    int32_t n_cfg;           /* devices of ring.json, the head first */
    exec_window *windows;    /* owned, n_layer + 1: the head's windows of the first plan */
    int32_t n_windows;
    bool rebalance, failover;
    bool rebuild_batched; /* ring.json "rebuild": "batched" */
    bool mirror;          /* KV mirroring (ring_slot.mirrored) */
    ring_slot *slots;     /* owned, n_slots: slot 0 the session's */
    int32_t n_slots;
    /* a batch's groups (borrowed, ring_bind_groups): drained before the
     * session's own passes and before any plan change */
    ring_group *groups;
    int32_t n_groups;
    /* what a group's pass costs each device (ring_pipe.c, the groups to keep
     * in flight), per ring.json device: ms waiting for weights from disk a
     * pass and ms computing a row; moving estimates (< 0: none yet) made from
     * the figures gathered over a few passes */
    double pass_wait_ms[CLUSTER_MAX_DEVICES], row_ms[CLUSTER_MAX_DEVICES];
    int32_t pass_samples;
    /* the same waits by the number of groups in flight when they were
     * measured ([G - 1], < 0: not yet): a streaming device hides its reads
     * in its idle time with few groups and not with many, so each count is
     * priced with its own once it has run */
    double wait_at_ms[CLUSTER_MAX_FLIGHT][CLUSTER_MAX_DEVICES];
    int32_t pipe_groups; /* groups the batch keeps in flight now (batch_ring.c) */
    struct {
        uint64_t wait_us[CLUSTER_MAX_DEVICES], busy_us[CLUSTER_MAX_DEVICES];
        int64_t rows;
        int32_t passes;
        int32_t groups; /* the pipe_groups of these passes */
    } pass_acc;
    int32_t rounds;       /* k of the first plan; re-plans keep it */
    uint64_t layer_bytes; /* the largest layer's weights plus its KV cache */
    uint64_t head_budget_bytes; /* the session's memory budget; 0: none known */
    cluster_monitor mon;
    /* events (replans and failovers are read by other threads: /metrics) */
    _Atomic uint64_t replans, failovers;
    _Atomic uint64_t serving; /* bit d: ring.json device d is in the plan in force */
    uint64_t rebuilt_tokens, kv_moved_bytes;
    uint64_t rebuild_passes; /* ring passes those re-runs took */
    double switch_ms, last_switch_ms;
    char last_switch[2048];
    bool in_switch;         /* a re-run is going on: no monitoring, no nested switches */
    uint64_t last_probe_ns; /* when devices out of the plan were last asked back */
    /* automatic placement (issue 7, ring_plan.c): set when the first plan came
     * from the planner ("auto" windows, "placement" not "even") */
    bool planned;
    char placement[16];     /* what made the plan in force: "explicit", "even", "halda", ... */
    sched_model *sm;        /* owned: the model as the planner sees it */
    sched_device *devs;     /* owned, n_cfg: the profiles, ring.json order, the head first */
    bool profiled[CLUSTER_MAX_DEVICES]; /* devs[d] is d's own profile (else a stand-in) */
    sched_opts so;          /* the planner's options (exclude points at scratch per call) */
    sched_plan *splan;      /* owned: the planner's plan in force; NULL after a fallback */
    sched_plan *splan_next; /* owned: the plan a re-plan proposes, until it is in force */
    double predicted_ms[CLUSTER_MAX_DEVICES];       /* per layer per token; < 0 unknown */
    double predicted_token_ms[CLUSTER_MAX_DEVICES]; /* the device's share of a token */
    double predicted_latency_ms;                    /* a token; < 0 unknown */
    /* fetching in the background (issue 19, ring_prepare.c): a plan whose
     * workers without the model file fetch their new layers while the plan
     * in force keeps generating; put in force when they are ready */
    struct {
        bool on;
        cluster_plan plan;
        int32_t members[CLUSTER_MAX_DEVICES];
        bool asked[CLUSTER_MAX_DEVICES]; /* ring.json devices sent PREPARE */
        char kind[32];                   /* "re-balance", "rejoin", "failover" */
        char why[1536];
        uint64_t t0_ns;
        uint64_t tokens; /* generated since the PREPARE */
        uint64_t shipped, moved_ns; /* bytes shipped to the asked workers, when that last grew */
    } pending;
    uint64_t prepared_switches, waited_switches, prepare_failures;
    uint64_t fetch_tokens; /* generated while background fetches ran, all of them */
    /* the picture for other threads (ring_view.c): JSON under view_mu */
    pthread_mutex_t view_mu;
    char *view;
    /* and for other processes: the file it is copied to (NULL: none), when
     * it was last written, and the plan changes it had seen then */
    char *state_path;
    uint64_t state_written_ns;
    uint64_t state_changes;
    /* scratch, sized at open: the batch in flight survives a failover */
    float *x_saved;     /* owned, n_batch x n_embd */
    int32_t *pos_saved; /* owned, n_batch */
} api_ring;

/* ring_head.c */

/* Reads s->o.ring (ring.json), connects the workers, hands out the first plan
 * and points eo at the head's own windows. Sets s->ring. */
lares_status api_ring_open(lares_session *s, exec_opts *eo, lares_error *err);
void api_ring_free(api_ring *r);
/* Runs s->x (nb tokens at positions s->pos) through every layer: the head's
 * windows here, the others around the ring. Re-plans first when the monitor
 * says so, and survives the loss of a worker (failover). */
lares_status api_ring_forward(lares_session *s, int32_t nb, lares_error *err);
/* One pass of nb tokens (s->x, s->pos) through layers [0, end) (at least;
 * windows are not cut) under the plan in force; no re-plans. */
lares_status ring_pass(lares_session *s, int32_t nb, int32_t end, lares_error *err);
/* One pass of nb rows (s->x, s->pos) of KV slot `slot` through layers
 * [0, end): slot 0 as ring_pass, another with a run table (a re-run of a
 * batch's sequence). */
lares_status ring_pass_slot(lares_session *s, uint32_t slot, int32_t nb, int32_t end,
                            lares_error *err);
/* One pass of the rows of several KV slots through layers [0, end): run i
 * is runs[i].rows rows of slot runs[i].slot, the runs one after another in
 * s->x and s->pos (slot 0 only alone, as ring_pass). */
lares_status ring_pass_runs(lares_session *s, const cluster_run *runs, int32_t n_runs, int32_t end,
                            lares_error *err);
/* ring_head.c: positions [pos0, pos0 + n) of `layer` of `slot` are in the
 * head's cache (its own window's rows, or a member's KV_MIRROR copy): the
 * copy grows when they follow what it holds */
void ring_mirror_note(api_ring *r, uint32_t slot, int32_t layer, int32_t pos0, int32_t n);
/* A pass of `slot` starts at pos0: what lies beyond is rewritten (the
 * mirror copy stops there) */
void ring_slot_rewind(api_ring *r, uint32_t slot, int32_t pos0);
/* A pass of `slot` over positions [pos0, pos0 + n) is done everywhere */
void ring_slot_ran(api_ring *r, uint32_t slot, int32_t pos0, int32_t n);

/* Slots 1..n for a batch of n sequences (issue 20): their caches and
 * histories (borrowed), and every plan from now on has n + 1 KV slots (the
 * plan in force is sent again with them: LARES_EUNSUPPORTED names a worker
 * built before slots). */
lares_status ring_bind_slots(lares_session *s, int32_t n, model_kv *const *kv,
                             const int32_t *const *history, lares_error *err);
/* The batch's groups (borrowed; NULL, 0: none any more). */
void ring_bind_groups(api_ring *r, ring_group *groups, int32_t n);
/* The figures of the passes since the last call: with judge, the head's ms
 * per layer row and each member's into the monitor; with rows > 0 (a
 * batch's group of that many rows landed) into the pass costs. */
void ring_take_pass(api_ring *r, bool judge, int32_t rows);
/* The head's output (final norm and output matrix) of a group's rows took
 * us, of which wait_us waiting for its weights: a part of the head's pass. */
void ring_note_output(api_ring *r, uint64_t us, uint64_t wait_us);
/* The pass costs start over (a new plan). */
void ring_pass_costs_reset(api_ring *r);
/* The plan in force into r->serving (for other threads: /health). */
void ring_note_serving(api_ring *r);
/* Layers per device (ring.json index) under the plan in force. */
void ring_layers_by_device(const api_ring *r, int32_t *layers);
/* Device d's capacity in layers (ring.json "memory", else the budget a worker
 * reported, over r->layer_bytes; n_layer when unknown) and whether it may run
 * layers from disk beyond it. */
void ring_capacity(const api_ring *r, int32_t d, int32_t *cap_layers, bool *can_stream);

/* ring_plan.c */

/* "auto" windows by the planner over the devices that answered, cand[0..n)
 * (ring.json indexes, cand[0] = 0): their profiles (from WELCOME), the
 * head's own, the hops measured by a probe plan; the plan's windows into
 * *plan over members[] (ring.json indexes; devices left out have none).
 * Sets r->planned, r->sm, r->devs, r->splan and the predictions. */
lares_status ring_plan_auto(lares_session *s, api_ring *r, const int32_t *cand, int32_t n,
                            cluster_plan *plan, int32_t *members, lares_error *err);
/* The profiles of devices that answered after the start, for later plans. */
void ring_plan_profiles(api_ring *r);
/* A re-plan by the planner (sched_replan) over the candidates cand[0..n)
 * (ring.json indexes, cand[0] = 0; the others are excluded), with what the
 * monitor measured. The sched plan waits in r->splan_next. */
lares_status ring_plan_replan(api_ring *r, const int32_t *cand, int32_t n, cluster_plan *out,
                              int32_t *members, lares_error *err);
/* The proposed plan (r->splan_next; NULL: a plan not made by the planner) is
 * in force: its predictions replace the old ones. */
void ring_plan_adopt(api_ring *r);
void ring_plan_free(api_ring *r);

/* ring_switch.c */

/* A plan with ring.json names: "head 0 | b 3 | c 2 (k=1)" */
void ring_describe(const api_ring *r, const cluster_plan *p, const int32_t *members, char *buf,
                   size_t cap);

/* The plan over the devices cand[0..n) (cand[0] = 0) by cluster_plan_balance
 * with the monitor's figures and ring_capacity (base: windows per round they
 * keep, NULL none), its members as ring.json indexes. LARES_ERANGE (with the memory still needed) when they cannot run
 * the model. */
lares_status ring_balance(const api_ring *r, const int32_t *cand, int32_t n, const int32_t *base,
                          cluster_plan *out, int32_t *members, lares_error *err);

/* Puts plan p over ring.json devices members[] in force between two tokens
 * and rebuilds the KV entries of the layers that moved, positions
 * [0, slots[i].keep) of every slot. No group may be in flight.
 * kind and why name it in the log line; how (may be "") says how the new
 * layers' weights came (the switch adds "waited for a fetch" itself when a
 * worker fetched during it). */
lares_status ring_switch_plan(lares_session *s, const cluster_plan *p, const int32_t *members,
                              const char *kind, const char *why, const char *how, lares_error *err);

/* ring_prepare.c */

/* The workers of plan p (over members[]) that lack weights for it: those
 * without the model file (cluster_head_fetches) that it gives a layer they
 * do not hold under the plan in force; ask[d] set for each. Their count. */
int32_t ring_prepare_needs(const api_ring *r, const cluster_plan *p, const int32_t *members,
                           bool *ask);
/* Starts putting p in force in the background: PREPARE to the workers that
 * lack weights for it. false when none does (or PREPARE could not be sent:
 * logged): the caller switches now. */
bool ring_prepare_start(lares_session *s, const cluster_plan *p, const int32_t *members,
                        const char *kind, const char *why);
/* Between two batches: when every worker asked is ready, the pending plan is
 * put in force; a failed prepare (or a worker lost) drops it, logged, and
 * the plan in force stays. One more batch of nb tokens counted meanwhile. */
lares_status ring_prepare_poll(lares_session *s, int32_t nb, lares_error *err);
/* Whether ring_prepare_poll would switch now (every worker asked answered). */
bool ring_prepare_due(const api_ring *r);
/* Drops the pending plan (a failover comes first). */
void ring_prepare_drop(api_ring *r);
/* After a loss: a plan over the survivors that moves only the lost layers,
 * each lost window to a neighbour that holds its tensors already (the head,
 * or a worker with the model file, as its memory allows), so nothing is
 * fetched; false with the reason when there is none. */
bool ring_interim_plan(const api_ring *r, cluster_plan *out, int32_t *members, char *why,
                       size_t cap);

/* A member was lost: re-plans over the others, rebuilds the KV caches of
 * every slot's positions [0, keep) and warns. LARES_ERANGE when the others
 * cannot run the model; the error names what was lost. */
lares_status ring_failover(lares_session *s, lares_error *err);
/* The monitor says a device drifted: re-plans when a better plan exists
 * (by min_gain), else accepts the figures as the new normal. */
lares_status ring_rebalance(lares_session *s, lares_error *err);
/* Between two batches, never waiting: asks the lost devices to come back and
 * re-plans when one answered (a device down at the start joins here). */
lares_status ring_rejoin(lares_session *s, lares_error *err);
/* Between two batches (no group in flight): a prepared plan that is ready,
 * a device that answered, a re-balance the monitor asks for (gen: the last
 * pass was of generating rows only). */
lares_status ring_between(lares_session *s, int32_t nb, bool gen, lares_error *err);
/* Whether ring_between has something to do, or a member was lost: a batch
 * with groups in flight brings them home first. */
bool ring_wants_quiet(const api_ring *r);

/* ring_pipe.c: a batch's groups (issue 20) */

/* Makes group g's buffers for n_batch rows of n_embd. */
lares_status ring_group_init(ring_group *g, int32_t n_batch, int32_t n_embd, lares_error *err);
void ring_group_free(ring_group *g);
/* Starts group g (its tokens, pos, run and seqs filled, n_rows and n_runs
 * set): embeds its rows, runs the head's first window when it has layer 0,
 * and sends it on; it may land at once (a ring of the head alone). */
lares_status ring_group_launch(lares_session *s, ring_group *g, lares_error *err);
/* Waits until a group in flight lands (its hidden states out of the last
 * layer); *landed: its index in the bound groups. A member lost on the way:
 * failover, and every group in flight or landed is sent again. */
lares_status ring_group_wait(lares_session *s, int32_t *landed, lares_error *err);
/* Brings every group in flight home (they land; nothing is drawn). */
lares_status ring_groups_drain(lares_session *s, lares_error *err);
/* A member was lost (cluster_head_needs_plan): a new plan over the others,
 * then every group in flight or landed is sent again from layer 0. */
lares_status ring_groups_recover(lares_session *s, lares_error *err);
/* Every group in flight or landed is dropped (a failure the batch gives up on). */
void ring_groups_abandon(api_ring *r);
/* Groups in flight now. */
int32_t ring_groups_flying(const api_ring *r);
/* How many groups to keep in flight for n_rows rows a cycle, at most `most`,
 * now `current`: cluster_pipe_groups with the ring's pass costs; current
 * until it has some. */
int32_t ring_pipe_groups(const api_ring *r, int32_t n_rows, int32_t most, int32_t current);

/* ring_view.c */

/* Refreshes the JSON picture (lares_session_ring_json). */
void ring_view_update(lares_session *s);

#endif /* LARES_API_RING_H */
