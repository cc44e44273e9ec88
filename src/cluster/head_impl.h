/*
 * The head's two halves (docs/ring.md "Threads"): head_io.c is the network
 * thread (it owns the sockets, sends heartbeats, times out silent workers and
 * turns every failure into an ERROR frame from that device), head.c the
 * caller's side (the session thread). They talk only through an in-process
 * pipe: [u32 device][frame] both ways; device PIPE_TO_IO tells the network
 * thread to quit.
 */
#ifndef LARES_CLUSTER_HEAD_IMPL_H
#define LARES_CLUSTER_HEAD_IMPL_H

#include "cluster/cluster_impl.h"

#include <stdatomic.h>

#define PIPE_TO_IO 0xffffffffu /* pipe message for the network thread itself: quit */

/* a worker's connection as the network thread sees it */
typedef enum head_io_state {
    IO_IDLE = 0, /* nothing to watch (never asked, or sent STOP) */
    IO_HELLO,    /* a HELLO waits for the connection (kept, sent again each tick) */
    IO_ASKED,    /* the HELLO went out over a connection that is up; no WELCOME yet */
    IO_ATTACHED, /* welcomed: heartbeats both ways, silence is a failure */
    IO_FAILED    /* reported to the session; a new HELLO starts over */
} head_io_state;

/* state of the network thread (only it touches this once it runs) */
typedef struct head_io {
    void *pipe;
    int32_t n_dev;
    void *dealer[CLUSTER_MAX_DEVICES];
    void *mon[CLUSTER_MAX_DEVICES];
    head_io_state state[CLUSTER_MAX_DEVICES];
    uint64_t last_rx_ns[CLUSTER_MAX_DEVICES];
    uint64_t hello_deadline_ns[CLUSTER_MAX_DEVICES];
    char last_event[CLUSTER_MAX_DEVICES][200];
    int handshake_fails[CLUSTER_MAX_DEVICES]; /* handshakes the worker closed on us */
    /* a refusal (wrong key, mechanism mismatch) seen before the HELLO was
     * queued, which ZeroMQ does not retry: the HELLO then fails at once with
     * it; "" when none */
    char refusal[CLUSTER_MAX_DEVICES][200];
    /* the connection (not the device): a handshake succeeded and it has not
     * dropped since; a HELLO queued before that may never have left */
    bool conn_up[CLUSTER_MAX_DEVICES];
    /* told the session this attached device is silent past half the timeout
     * (a HEARTBEAT on the pipe, counter = silent ms); the next frame from it
     * is told too (counter 0) */
    bool silence_told[CLUSTER_MAX_DEVICES];
    /* a HELLO the socket would not take yet (no connection: a handshake under
     * way, or torn down by a refusal): sent again with each heartbeat tick
     * until it goes out, the hello deadline passes or the refusal is reported */
    zmq_msg_t hello[CLUSTER_MAX_DEVICES];
    bool hello_kept[CLUSTER_MAX_DEVICES];
    uint32_t hb_ms, timeout_ms, connect_ms, delay_ms;
    uint32_t hello_ms; /* answer time for HELLO: connect_ms, plus the profile's when asked */
    uint64_t hb_counter;
    net_outbox out;
    uint8_t buf[512];
    /* shipping the model to workers without it (head_ship.c; issue 19) */
    const uint8_t *ship_base;             /* NULL: nothing to ship */
    uint32_t ship_n;                      /* items */
    uint64_t *ship_off, *ship_bytes;      /* owned, ship_n each */
    uint8_t (*ship_sha)[CLUSTER_SHA256_BYTES]; /* owned: each item's, once hashed */
    bool *ship_hashed;                    /* owned */
    uint8_t *ship_buf;                    /* owned: one TENSOR_DATA frame */
    cluster_frame *ship_frame;            /* owned: decoding scratch */
    _Atomic uint64_t shipped[CLUSTER_MAX_DEVICES]; /* bytes per device */
    uint64_t ship_t0[CLUSTER_MAX_DEVICES];   /* first chunk of the current transfer */
    uint64_t ship_base_bytes[CLUSTER_MAX_DEVICES]; /* shipped when it began */
    uint64_t ship_last_ns[CLUSTER_MAX_DEVICES];  /* last chunk */
    uint64_t ship_log_ns[CLUSTER_MAX_DEVICES];   /* last progress line */
    uint64_t ship_note_ns[CLUSTER_MAX_DEVICES];  /* last note to the session */
} head_io;

/* head_ship.c: copies the source's tables into io (LARES_ENOMEM), frees them */
lares_status head_ship_init(head_io *io, const cluster_ship_source *src, lares_error *err);
void head_ship_free(head_io *io);
/* Answers one TENSOR_GET of device dev (the network thread). */
void head_ship_serve(head_io *io, int32_t dev, const uint8_t *f, size_t len, uint64_t now);

/* The network thread's body (pthread start routine, arg: the head_io). */
void *head_io_main(void *arg);

/* ---- the caller's side (head.c: opening, plans, closing; head_pipe.c: the
 * pipe's frames and the devices' states; head_batch.c: batches, KV, pings) ---- */

/* A batch of hidden states in the ring, until it comes back. */
typedef struct head_flight {
    uint64_t seq;        /* its counter (ACT seq) */
    int32_t n_tok, pos0; /* rows and first position, checked on return */
    int32_t end;         /* it comes back once a window ends at or past this layer */
    uint32_t n_runs;     /* its run table (0: none) */
    uint64_t sent_ns;    /* when it left (its time in the ring counts from here) */
    float *dst;          /* borrowed: where its hidden states go (NULL: the caller's) */
} head_flight;

struct cluster_head {
    void *zctx;
    void *pipe; /* the session's end */
    pthread_t thread;
    bool thread_started;
    head_io io;
    int32_t n_cfg;                                /* devices of ring.json, the head first */
    cluster_ring_device dev[CLUSTER_MAX_DEVICES]; /* copied from the ring description */
    cluster_device_stats stats[CLUSTER_MAX_DEVICES];
    cluster_pass pass[CLUSTER_MAX_DEVICES];
    cluster_dev_state state[CLUSTER_MAX_DEVICES];
    char why[CLUSTER_MAX_DEVICES][CLUSTER_MAX_MSG + 1]; /* the last failure or refusal */
    bool has_profile[CLUSTER_MAX_DEVICES];              /* a WELCOME brought its profile */
    int32_t joined; /* devices that became usable since the last cluster_head_probe */
    uint64_t asked_ns[CLUSTER_MAX_DEVICES]; /* when a lost device was last asked back */
    int32_t member[CLUSTER_MAX_DEVICES];    /* plan index -> ring.json index */
    int32_t pos_of[CLUSTER_MAX_DEVICES];    /* ring.json index -> plan index, -1 none */
    bool opening; /* cluster_head_open: frames of joining devices are answered */
    cluster_plan plan;
    cluster_model_id model;
    int32_t n_layer, n_ctx, n_batch, n_embd;
    bool kv_f16;
    uint32_t kv_row_bytes;
    uint8_t act_dtype;
    uint32_t hb_ms, timeout_ms, connect_ms;
    bool failover;
    bool survey; /* cluster_head_opts.survey */
    uint32_t profile_ms;
    char head_name[CLUSTER_MAX_NAME + 1];
    uint64_t session;
    uint64_t next_seq, next_nonce;
    /* the batches in flight, matched by their counter when they come back
     * (several at once: a batch's groups, issue 20) */
    head_flight flight[CLUSTER_MAX_FLIGHT];
    int32_t n_flight, max_flight;
    uint32_t n_slots; /* KV slots of every plan (PLAN flag 8 when > 1) */
    uint8_t head_key[CLUSTER_KEY_BYTES];
    uint8_t *buf; /* owned: one encoded frame */
    size_t buf_cap;
    cluster_frame *frame; /* owned: decoding scratch */
    bool broken;          /* without failover, a device failed: every call returns `failure` */
    lares_error failure;
    bool needs_plan; /* with failover, a member failed: calls return `failure` until set_plan */
    uint64_t wait_us, hops;
    /* the network's share of a hop (us), a moving estimate over batches that
     * were alone in the ring: their time out minus the windows' times, per
     * hop; < 0 until one came back */
    double hop_us;
    void (*kv_mirror)(void *user, uint32_t slot, int32_t layer, int32_t pos0, int32_t n_pos,
                      const uint8_t *k, const uint8_t *v);
    void *kv_mirror_user;
    bool ship_note; /* a device is being shipped weights: waits for it restart */
    /* the model's bytes: devices that asked for them (workers without the
     * file, issue 19), and the prepare of a coming plan (head_prepare.c) */
    bool fetches[CLUSTER_MAX_DEVICES];
    uint64_t prep_id; /* the PREPARE's session number; 0: none asked */
    cluster_prep_state prep[CLUSTER_MAX_DEVICES];
    uint64_t prep_fetched[CLUSTER_MAX_DEVICES];
    char prep_why[CLUSTER_MAX_DEVICES][CLUSTER_MAX_MSG + 1];
};

/* filler of the bandwidth probes: a few hidden states' worth, small enough for
 * a slow link (256 KiB take 21 ms at 100 Mbit/s) */
#define PROBE_PING_BYTES CLUSTER_PROBE_PING_BYTES
#define PROBE_TRIES      3

const char *head_dev_name(const cluster_head *h, int32_t d);
const char *head_dev_addr(const cluster_head *h, int32_t d);
lares_status head_usable(cluster_head *h, lares_error *err);
/* The one place a device's state changes; each change is logged once. */
void head_set_state(cluster_head *h, int32_t d, cluster_dev_state to, const char *why);
/* A device that must work failed: without failover the head stays failed;
 * with it, the device is lost and the session has to re-plan. */
lares_status head_device_failed(cluster_head *h, int32_t dev, uint32_t code, const char *msg,
                                lares_error *err);
lares_status head_pipe_send(cluster_head *h, int32_t dev, size_t len, lares_error *err);
/* A fresh, unlikely-to-repeat session number (never 0). */
uint64_t head_new_session_id(void);
/* The PLAN body of plan p over members for the head's ring (self and
 * n_threads are the caller's to set per device). */
void head_plan_msg(const cluster_head *h, const cluster_plan *p, const int32_t *members,
                   uint32_t flags, cluster_plan_msg *msg);
/* head_prepare.c: a PREPARED of device dev (head_take_frame) */
void head_prepared(cluster_head *h, int32_t dev, uint64_t session, const cluster_prepared *p);
/* the model a worker answered with must be the head's */
bool head_welcome_fits(cluster_head *h, int32_t d, const cluster_welcome *w, char *why, size_t cap);
/* Waits up to wait_ms (< 0: as long as it takes) for a message on the pipe;
 * LARES_ECANCELED when cancel becomes true, LARES_ETIMEDOUT-like ENET when
 * the time is up (*timed_out set). */
lares_status head_pipe_wait(cluster_head *h, int64_t wait_ms, uint64_t t0,
                            const _Atomic bool *cancel, bool *timed_out, lares_error *err);
/* Takes one message off the pipe into h->frame; *mine: it is for the caller
 * (the others are handled here: welcomes, notes on silence, KV copies,
 * errors of devices nobody waits for). */
lares_status head_take_frame(cluster_head *h, int32_t *dev, bool *mine, lares_error *err);
/* Waits for one frame for the caller (timeout_ms < 0: as long as the network
 * thread keeps the devices alive) and decodes it into h->frame. */
lares_status head_pipe_recv(cluster_head *h, int64_t timeout_ms, int32_t *dev,
                            const _Atomic bool *cancel, lares_error *err);
/* Waits for one frame of `type` from each device in need[] (ring.json
 * indices) of the current session (WELCOME: of any). */
lares_status head_collect(cluster_head *h, uint16_t type, bool *need, int64_t timeout_ms,
                          lares_error *err);

#endif /* LARES_CLUSTER_HEAD_IMPL_H */
