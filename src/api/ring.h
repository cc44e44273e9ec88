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

typedef struct api_ring {
    cluster_ring_config *rc; /* owned */
    cluster_head *head;      /* owned */
    int32_t n_cfg;           /* devices of ring.json, the head first */
    exec_window *windows;    /* owned, n_layer + 1: the head's windows of the first plan */
    int32_t n_windows;
    int32_t synced; /* positions the members hold KV entries for */
    bool rebalance, failover;
    bool rebuild_batched; /* ring.json "rebuild": "batched" */
    /* KV mirroring (ring.json "kv_mirror", issue 15): the head's own KV cache
     * holds a copy of every layer's entries, [0, mirrored[l]) of layer l
     * (its own layers computed here, the others sent by their owners), so a
     * re-plan moves them from here instead of re-running the conversation */
    bool mirror;
    int32_t *mirrored; /* owned, n_layer */
    uint8_t *batch_start; /* owned, n_ctx: 1 where a batch of the conversation began */
    int32_t rounds;       /* k of the first plan; re-plans keep it */
    uint64_t layer_bytes; /* the largest layer's weights plus its KV cache */
    uint64_t head_budget_bytes; /* the session's memory budget; 0: none known */
    cluster_monitor mon;
    /* measured: the network's share of a hop, moving estimate (ms) */
    double hop_ms;
    /* events (replans and failovers are read by other threads: /metrics) */
    _Atomic uint64_t replans, failovers;
    _Atomic uint64_t serving; /* bit d: ring.json device d is in the plan in force */
    uint64_t rebuilt_tokens, kv_moved_bytes;
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
/* ring_head.c: positions [pos0, pos0 + n) of `layer` are in the head's cache
 * (its own window's rows, or a member's KV_MIRROR copy): the copy grows when
 * they follow what it holds */
void ring_mirror_note(api_ring *r, int32_t layer, int32_t pos0, int32_t n);
/* The head's ms per layer and each member's from the last pass into the monitor. */
void ring_monitor_token(api_ring *r);
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
 * and rebuilds the KV entries of the layers that moved, positions [0, keep).
 * kind and why name it in the log line; how (may be "") says how the new
 * layers' weights came (the switch adds "waited for a fetch" itself when a
 * worker fetched during it). */
lares_status ring_switch_plan(lares_session *s, const cluster_plan *p, const int32_t *members,
                              int32_t keep, const char *kind, const char *why, const char *how,
                              lares_error *err);

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
lares_status ring_prepare_poll(lares_session *s, int32_t keep, int32_t nb, lares_error *err);
/* Drops the pending plan (a failover comes first). */
void ring_prepare_drop(api_ring *r);
/* After a loss: a plan over the survivors that moves only the lost layers,
 * each lost window to a neighbour that holds its tensors already (the head,
 * or a worker with the model file, as its memory allows), so nothing is
 * fetched; false with the reason when there is none. */
bool ring_interim_plan(const api_ring *r, cluster_plan *out, int32_t *members, char *why,
                       size_t cap);

/* A member was lost: re-plans over the others, rebuilds the KV cache of
 * positions [0, keep) and warns. LARES_ERANGE when the others cannot run the
 * model; the error names what was lost. */
lares_status ring_failover(lares_session *s, int32_t keep, lares_error *err);
/* The monitor says a device drifted: re-plans when a better plan exists
 * (by min_gain), else accepts the figures as the new normal. */
lares_status ring_rebalance(lares_session *s, int32_t keep, lares_error *err);
/* Between two batches, never waiting: asks the lost devices to come back and
 * re-plans when one answered (a device down at the start joins here). */
lares_status ring_rejoin(lares_session *s, int32_t keep, lares_error *err);

/* ring_view.c */

/* Refreshes the JSON picture (lares_session_ring_json). */
void ring_view_update(lares_session *s);

#endif /* LARES_API_RING_H */
