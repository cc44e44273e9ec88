/*
 * cluster: the piped ring (docs/ring.md, the wire format in docs/protocol.md).
 *
 * Owns: the wire protocol (versioned, length-checked frames; every integer
 * little-endian through a byte cursor), CURVE key pairs and allow-lists, the
 * ring description (ring.json) and the plan (layers per window, rounds), the
 * head's side of a ring (connections to the workers, heartbeats, failure
 * detection) and the worker's side (listening, ZAP allow-list, the link to its
 * successor, heartbeats), all over ZeroMQ with CURVE.
 *
 * Knows nothing about kernels or models: a worker computes through the
 * callbacks of cluster_compute (filled by api/ring_worker.c), and the head's
 * session (api/ring_head.c) runs its own windows between cluster_head_send
 * and cluster_head_recv.
 *
 * Threads: a cluster_head or cluster_worker runs its own network thread (it
 * owns the sockets, answers heartbeats and detects dead peers while the
 * caller computes); the caller talks to it through an in-process pipe. Each
 * handle is used by one caller thread, except cluster_worker_stop.
 */
#ifndef LARES_CLUSTER_H
#define LARES_CLUSTER_H

#include "core/core.h"

/* ---- limits and constants (file format: see docs/protocol.md) ---- */

/* 2: HELLO flags and the profile in WELCOME, PLAN flags, READY hop figures,
 * ACT end layer and per-round figures, PING/PONG, KV_GET/KV_DATA (issues 7, 9) */
#define CLUSTER_PROTO_VERSION 2
#define CLUSTER_MAGIC         0x474e524cu /* "LRNG" little-endian */
#define CLUSTER_HEADER_BYTES  20
/* the largest frame either side accepts (also ZMQ_MAXMSGSIZE on every socket):
 * a batch of hidden states is n_batch x n_embd x 4 bytes */
#define CLUSTER_MAX_FRAME   (64u << 20)
#define CLUSTER_MAX_DEVICES 64
#define CLUSTER_MAX_LAYERS  65536 /* far above any model; bounds per-round arrays */
#define CLUSTER_MAX_ADDR    255   /* "host:port" */
#define CLUSTER_MAX_PATH    1023  /* a model path on a device */
#define CLUSTER_MAX_NAME    63    /* device and head names */
#define CLUSTER_MAX_MSG     255   /* error messages */
#define CLUSTER_MAX_TRACE   CLUSTER_MAX_DEVICES
#define CLUSTER_KEY_BYTES   32
#define CLUSTER_KEY_Z85     40
#define CLUSTER_MAX_ALLOW   256
/* emulated link latency (tests and benchmarks): Wi-Fi hops are 2-10 ms */
#define CLUSTER_MAX_LINK_DELAY_MS 1000
#define CLUSTER_MAX_PROFILE       8191      /* a device profile as JSON (about 1.3 KB today) */
#define CLUSTER_MAX_PING          (4u << 20) /* filler of a bandwidth probe */
#define CLUSTER_MAX_PROFILE_MS    60000     /* measuring time a head may ask of a worker */
/* the most bytes of one TENSOR_DATA answer (a request for more is malformed) */
#define CLUSTER_MAX_CHUNK (4u << 20)
#define CLUSTER_SHA256_BYTES 32

typedef enum cluster_frame_type {
    CLUSTER_HELLO = 1,     /* head -> worker: version, model identity, device index */
    CLUSTER_WELCOME = 2,   /* worker -> head: its model identity and resources */
    CLUSTER_PLAN = 3,      /* head -> worker: windows of every device, rounds, sizes */
    CLUSTER_READY = 4,     /* worker -> head: windows allocated, successor reached */
    CLUSTER_ACT = 5,       /* hidden states of a batch between devices */
    CLUSTER_KV = 6,        /* head -> worker: clear / truncate the KV caches */
    CLUSTER_KV_DONE = 7,   /* worker -> head: the KV operation is done */
    CLUSTER_HEARTBEAT = 8, /* both ways, every heartbeat interval */
    CLUSTER_STOP = 9,      /* head -> worker: the session is over */
    CLUSTER_ERROR = 10,    /* either way: a refusal or failure with its reason */
    CLUSTER_LINK = 11,     /* worker -> its successor: "I am your predecessor" */
    CLUSTER_LINK_OK = 12,  /* successor -> worker */
    CLUSTER_PING = 13,     /* any peer -> a peer it may talk to: echo this nonce */
    CLUSTER_PONG = 14,     /* the echo */
    CLUSTER_KV_GET = 15,   /* head -> worker: send me these KV entries of a layer */
    CLUSTER_KV_DATA = 16,  /* KV entries of a layer: worker -> head (answer), head -> worker (put) */
    CLUSTER_PEER_LOST = 17, /* worker -> head: a ring neighbour cannot be reached */
    /* worker -> head: KV entries it just wrote (KV_DATA's body), kept by the
     * head so that a loss costs no re-run (issue 15) */
    CLUSTER_KV_MIRROR = 18,
    /* worker -> head: send me bytes of an item of the model file (its header
     * or one tensor), or only its size and SHA-256 (issue 19) */
    CLUSTER_TENSOR_GET = 19,
    CLUSTER_TENSOR_DATA = 20, /* head -> worker: the answer: item size, SHA-256, bytes */
    /* head -> worker: the plan coming next (PLAN's body): fetch the weights
     * of its windows in the background, keep serving the plan in force */
    CLUSTER_PREPARE = 21,
    CLUSTER_PREPARED = 22, /* worker -> head: those weights are in (or why not) */
    CLUSTER_FRAME_TYPE_END
} cluster_frame_type;

const char *cluster_frame_type_name(uint32_t type); /* "hello", ..., "?" */

/* element type of hidden states on the wire */
typedef enum cluster_dtype { CLUSTER_DTYPE_F32 = 0, CLUSTER_DTYPE_F16 = 1 } cluster_dtype;

typedef enum cluster_kv_op {
    CLUSTER_KV_CLEAR = 1,
    CLUSTER_KV_TRUNCATE = 2,
    CLUSTER_KV_PUT = 3 /* KV_DONE only: the KV_DATA frames put so far are written */
} cluster_kv_op;
/* On the wire only (issue 20): a KV / KV_DONE operation with this bit, and a
 * KV_GET layer with the next, are followed by a u32 KV slot; without them
 * the slot is 0 and the frame is the one before slots, byte for byte */
#define CLUSTER_KV_OP_SLOT    0x100u
#define CLUSTER_KV_LAYER_SLOT 0x80000000u

/* HELLO flags */
#define CLUSTER_HELLO_PROFILE 1u /* measure yourself (cached) and send the profile in WELCOME */
/* a survey (lares ring status), not a head that will run: a worker serving a
 * head refuses it even when it has that head's key (a restarted head with
 * the same key replaces the old one; a survey must never take its workers) */
#define CLUSTER_HELLO_SURVEY 2u
/* PLAN flags */
#define CLUSTER_PLAN_KEEP_KV 1u /* a re-plan: keep the KV entries of the layers still held */
#define CLUSTER_PLAN_PROBE   2u /* link and measure the hop to the successor; no windows */
/* the filler of the probe plan's bandwidth PING (the empty one gives the latency) */
#define CLUSTER_PROBE_PING_BYTES (256u << 10)
/* send the head a copy of every KV entry written (KV_MIRROR), after each window */
#define CLUSTER_PLAN_MIRROR_KV 4u
/* several sequences at once (issue 20): ACT frames may carry a run table (the
 * rows of each KV slot) and KV frames name a slot; without it every row is
 * slot 0's, as before the flag (a worker built before it refuses the PLAN) */
#define CLUSTER_PLAN_SLOTS 8u
#define CLUSTER_PLAN_FLAGS 15u
/* KV slots: a batch's sequences and the head's own (slot 0); each slot is a
 * KV cache of its own on every member, made when the slot first comes */
#define CLUSTER_MAX_SLOTS 4096
/* ACT flags (the byte after the element type) */
#define CLUSTER_ACT_RUNS 1u /* a run table follows the trace count */
/* STOP reasons */
#define CLUSTER_STOP_END     0u /* the session ended */
#define CLUSTER_STOP_LEFT_OUT 1u /* a new plan leaves this device out; it may be asked again */

/* A model file is the same on two devices when its size and the hash of its
 * header (metadata + tensor directory, gguf_header_hash) agree. */
typedef struct cluster_model_id {
    uint64_t file_bytes;
    uint64_t header_hash;
} cluster_model_id;

/* ---- the plan: which layers each device runs ----
 *
 * Device 0 is the head. Each round, device m runs a window of w[m]
 * consecutive layers starting at r * W + (w[0] + ... + w[m-1]), W = sum w.
 * Rounds k = ceil(n_layer / W); when W does not divide n_layer the last
 * round is cut at n_layer and the devices past the cut idle in it. The head
 * may hold no layers (w[0] = 0); every worker holds at least one. */
typedef struct cluster_plan {
    int32_t n_layer;
    int32_t n_dev;
    int32_t w[CLUSTER_MAX_DEVICES]; /* layers per window */
    int32_t n[CLUSTER_MAX_DEVICES]; /* of those, on the device's GPU (the last n of each window) */
} cluster_plan;

/* Checks counts, w[0] >= 0, w[m] >= 1 for workers, 0 <= n <= w, W <= n_layer. */
lares_status cluster_plan_check(const cluster_plan *p, lares_error *err);
int32_t cluster_plan_width(const cluster_plan *p);  /* W */
int32_t cluster_plan_rounds(const cluster_plan *p); /* k */
/* Window of device `dev` in round `r`; false (and l0 = l1) when it is empty. */
bool cluster_plan_window(const cluster_plan *p, int32_t dev, int32_t r, int32_t *l0, int32_t *l1);
/* Layers device `dev` holds over all rounds. */
int32_t cluster_plan_layers_of(const cluster_plan *p, int32_t dev);
/* The device and round whose window starts at `layer`; false when none does. */
bool cluster_plan_owner(const cluster_plan *p, int32_t layer, int32_t *dev, int32_t *round);
/* The even split used for "auto" windows until the planner (issue 7) fills
 * them: `rounds` rounds (0 = 1), W = ceil(n_layer / rounds) spread as evenly
 * as possible, the remainder to the first devices. */
lares_status cluster_plan_even(int32_t n_dev, int32_t n_layer, int32_t rounds, cluster_plan *out,
                               lares_error *err);
/* A plan for re-balancing and failover (issue 9): candidates 0..n-1 in ring
 * order (0 is the head), each with its measured ms per layer per token (< 0
 * unknown: the mean of the known ones) and its capacity in layers (0: cannot
 * run a layer at all; can_stream[i]: may run more than its capacity from
 * disk, when nothing else fits). Each round's W = ceil(n_layer / rounds)
 * layers are shared in proportion to speed, each candidate up to capacity /
 * rounds, the rest to the fastest that can stream. base (NULL: none): windows
 * the candidates keep (a failover moves only what was lost; the survivors'
 * windows of the plan in force), the layers beyond them shared as above.
 * Candidates left with no layer are not members (the head always is).
 * *members: candidate indexes of plan devices.
 * LARES_ERANGE when the candidates cannot run the model. */
lares_status cluster_plan_balance(int32_t n_layer, int32_t rounds, int32_t n,
                                  const double *ms_per_layer, const int32_t *cap_layers,
                                  const bool *can_stream, const int32_t *base, cluster_plan *out,
                                  int32_t *members, lares_error *err);
/* How many groups of a batch's sequences to keep in the ring at once (issue
 * 20) for n_rows rows a cycle (a row of each active sequence), at most
 * `most`, now `current`, from the n_dev devices' costs of a pass: wait_ms,
 * the time a pass waits for weights from disk (a device that streams reads
 * its window again for every group), and row_ms, a row's compute. The cycle
 * of G groups is the longer of each device's busy time, G x wait + n_rows x
 * row, and one group's trip around the ring, the sum of wait + row x
 * ceil(n_rows / G); the G of the shortest (ties: fewer groups). current
 * stays unless that G is predicted 10 % faster. G is priced with the waits
 * at wait_ms + (G - 1) x wait_stride (stride 0: the same waits for every G;
 * a device hides its reads in idle time with few groups, not with many). */
int32_t cluster_pipe_groups(const double *wait_ms, size_t wait_stride, const double *row_ms,
                            int32_t n_dev, int32_t n_rows, int32_t most, int32_t current);
/* "head 1 | w1 2 | w2 2 (k=2)" for messages */
void cluster_plan_describe(const cluster_plan *p, char *buf, size_t cap);

/* ---- frames ---- */

typedef struct cluster_hello {
    cluster_model_id model;
    uint32_t device; /* the receiver's index in the ring (1..n-1) */
    uint32_t n_devices;
    uint32_t heartbeat_ms;                 /* how often each side sends a heartbeat */
    uint32_t timeout_ms;                   /* silence after which a side gives the other up */
    uint32_t flags;                        /* CLUSTER_HELLO_* */
    uint32_t profile_ms;                   /* measuring time for CLUSTER_HELLO_PROFILE */
    char model_path[CLUSTER_MAX_PATH + 1]; /* where ring.json says the file is ("" none) */
    char head_name[CLUSTER_MAX_NAME + 1];
} cluster_hello;

typedef struct cluster_welcome {
    cluster_model_id model;
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_cpu;
    uint64_t mem_available_bytes; /* 0: unknown */
    char name[CLUSTER_MAX_NAME + 1];
    char profile[CLUSTER_MAX_PROFILE + 1]; /* sched device JSON when asked for, else "" */
} cluster_welcome;

typedef struct cluster_plan_msg {
    uint32_t self; /* the receiver's index */
    uint32_t n_ctx;
    uint32_t n_batch; /* most tokens per ACT frame */
    uint32_t n_embd;
    uint32_t n_threads; /* 0: the worker decides */
    uint8_t act_dtype;  /* cluster_dtype */
    uint8_t kv_f16;     /* 1: F16 KV cache, 0: F32 */
    uint16_t flags;     /* CLUSTER_PLAN_* */
    uint32_t ping_bytes; /* CLUSTER_PLAN_PROBE: filler of the bandwidth probe */
    /* CLUSTER_PLAN_SLOTS: the KV slots the head may use (1..CLUSTER_MAX_SLOTS),
     * each a KV cache the worker's memory budget counts; 1 without the flag */
    uint32_t n_slots;
    cluster_plan plan;
    uint8_t keys[CLUSTER_MAX_DEVICES][CLUSTER_KEY_BYTES]; /* public keys; zero when insecure */
    char addr[CLUSTER_MAX_DEVICES][CLUSTER_MAX_ADDR + 1]; /* "" for the head */
    uint32_t link_delay_ms[CLUSTER_MAX_DEVICES]; /* emulated latency of each device's send */
} cluster_plan_msg;

typedef struct cluster_ready {
    uint64_t kv_bytes; /* the worker's KV caches */
    uint32_t n_windows;
    /* CLUSTER_PLAN_PROBE: the hop to the successor, least round trip of an
     * empty PING and of one with ping_bytes of filler; 0: not measured */
    uint32_t rtt_us, rtt_big_us;
} cluster_ready;

/* One device's figures for one window, appended as the frame travels. */
typedef struct cluster_trace {
    uint16_t device; /* index in the plan */
    uint16_t round;
    uint32_t compute_us;   /* the window's wall time, waits for disk included */
    uint32_t wait_us;      /* of which waiting for weights to arrive from disk */
    uint32_t major_faults;
    uint32_t mem_free_mib; /* memory the device could still give (MiB); UINT32_MAX unknown */
} cluster_trace;
#define CLUSTER_TRACE_BYTES 20

/* The rows of one KV slot in a batch of hidden states (issue 20): `rows`
 * consecutive rows, at consecutive positions, of sequence `slot`. */
typedef struct cluster_run {
    uint32_t slot; /* < CLUSTER_MAX_SLOTS */
    uint32_t rows; /* >= 1 */
} cluster_run;
#define CLUSTER_RUN_BYTES 8

/* Hidden states of a batch. The arrays stay in the frame's bytes: read them
 * with cluster_act_pos, cluster_act_run_at, cluster_act_trace_at and
 * cluster_act_read. */
typedef struct cluster_act {
    uint64_t seq;   /* the head's batch counter */
    uint32_t layer; /* the next layer to run; n_layer when all are done */
    uint32_t end;   /* back to the head once a window ends at or past this layer */
    uint32_t n_tok;
    uint32_t n_embd;
    uint8_t dtype; /* cluster_dtype */
    uint32_t n_trace;
    /* runs of rows per KV slot (1..n_tok, rows adding up to n_tok; positions
     * consecutive within each); 0: no table, every row slot 0's and the
     * positions consecutive throughout (the frame before issue 20) */
    uint32_t n_runs;
    const uint8_t *runs;  /* n_runs entries */
    const uint8_t *pos;   /* n_tok int32 */
    const uint8_t *trace; /* n_trace entries */
    const uint8_t *data;  /* n_tok x n_embd of dtype */
} cluster_act;

typedef struct cluster_kv {
    uint32_t op; /* cluster_kv_op */
    int32_t pos;
    uint32_t slot; /* the KV slot (PLAN flag 8); 0 is written as the frame before slots */
} cluster_kv;

/* KV entries of one layer for positions [pos0, pos0 + n_pos): all K rows,
 * then all V rows, row_bytes each, of the KV type. Arrays point into the frame. */
typedef struct cluster_kv_data {
    uint32_t layer;
    int32_t pos0;
    uint32_t n_pos;
    uint32_t row_bytes;
    uint8_t kv_f16;
    uint8_t last;  /* the last chunk of this layer's transfer */
    uint32_t slot; /* the KV slot (< CLUSTER_MAX_SLOTS; the field once reserved) */
    const uint8_t *k, *v;
} cluster_kv_data;

typedef struct cluster_kv_get {
    uint32_t layer;
    int32_t pos0, pos1; /* [pos0, pos1) */
    uint32_t slot;      /* as cluster_kv's */
} cluster_kv_get;

typedef struct cluster_ping {
    uint64_t nonce;
    uint32_t filler_bytes; /* PING only */
} cluster_ping;

/* PEER_LOST: the plan index of the neighbour, and what happened */
typedef struct cluster_peer_lost {
    uint32_t device;
    char msg[CLUSTER_MAX_MSG + 1];
} cluster_peer_lost;

/* TENSOR_GET: item 0 is the model file's header (metadata and tensor table,
 * file bytes [0, gguf_header_bytes)), item i >= 1 tensor i - 1 of its table;
 * bytes [offset, offset + length) of it, length 0: only its size and hash */
typedef struct cluster_tensor_get {
    uint32_t item;
    uint64_t offset;
    uint32_t length; /* <= CLUSTER_MAX_CHUNK */
} cluster_tensor_get;

/* TENSOR_DATA: status 0 (LARES_OK) with the item's size, its SHA-256 and the
 * bytes asked for; another lares_status (no such item, nothing to ship)
 * with no bytes */
typedef struct cluster_tensor_data {
    uint32_t item;
    uint32_t status;
    uint64_t item_bytes;
    uint64_t offset;
    uint32_t length;
    uint8_t sha256[CLUSTER_SHA256_BYTES];
    const uint8_t *data; /* length bytes, into the frame */
} cluster_tensor_data;

/* PREPARED: the answer to the PREPARE of the same session number: status 0
 * (LARES_OK) when every tensor of the coming windows is in the worker's
 * cache and verified, else why not */
typedef struct cluster_prepared {
    uint32_t status;        /* lares_status */
    uint64_t fetched_bytes; /* came over the network for it */
    char msg[CLUSTER_MAX_MSG + 1];
} cluster_prepared;

typedef struct cluster_errmsg {
    uint32_t code; /* lares_status */
    char msg[CLUSTER_MAX_MSG + 1];
} cluster_errmsg;

typedef struct cluster_frame {
    uint16_t version;
    uint16_t type;
    uint64_t session;
    union {
        cluster_hello hello;
        cluster_welcome welcome;
        cluster_plan_msg plan;
        cluster_ready ready;
        cluster_act act;
        cluster_kv kv;
        uint64_t heartbeat; /* the sender's counter */
        uint32_t stop_reason;
        cluster_errmsg error;
        uint32_t link_from; /* LINK: the sender's device index */
        cluster_ping ping;  /* PING, PONG */
        cluster_kv_get kv_get;
        cluster_kv_data kv_data;
        cluster_peer_lost peer_lost;
        cluster_tensor_get tensor_get;
        cluster_tensor_data tensor_data;
        cluster_plan_msg prepare; /* PREPARE: a PLAN's body */
        cluster_prepared prepared;
    } u;
} cluster_frame;

/* Reads only the fixed header: magic, version, type and that the payload
 * length matches len. A different version is LARES_EPROTO (with *version set
 * so the caller can answer in kind); version is read before anything else. */
lares_status cluster_frame_header(const uint8_t *buf, size_t len, uint16_t *version, uint16_t *type,
                                  uint64_t *session, lares_error *err);
/* Decodes and validates a whole frame. Every count and length is checked
 * against the bytes present and the limits above before it is used; enum
 * values are range-checked; strings must not contain NUL. ACT arrays point
 * into buf, which must outlive *out's use. An ERROR frame of any version
 * decodes (its layout is fixed forever). */
lares_status cluster_frame_decode(const uint8_t *buf, size_t len, cluster_frame *out,
                                  lares_error *err);

/* Encoders write into buf (capacity cap) and return the frame's length, or 0
 * when it does not fit. */
size_t cluster_encode_hello(uint8_t *buf, size_t cap, const cluster_hello *h);
size_t cluster_encode_welcome(uint8_t *buf, size_t cap, const cluster_welcome *w);
size_t cluster_encode_plan(uint8_t *buf, size_t cap, uint64_t session, const cluster_plan_msg *p);
size_t cluster_encode_ready(uint8_t *buf, size_t cap, uint64_t session, const cluster_ready *r);
size_t cluster_encode_kv(uint8_t *buf, size_t cap, uint64_t session, uint16_t type,
                         const cluster_kv *kv);
size_t cluster_encode_heartbeat(uint8_t *buf, size_t cap, uint64_t session, uint64_t counter);
size_t cluster_encode_stop(uint8_t *buf, size_t cap, uint64_t session, uint32_t reason);
size_t cluster_encode_error(uint8_t *buf, size_t cap, uint64_t session, uint32_t code,
                            const char *msg);
size_t cluster_encode_link(uint8_t *buf, size_t cap, uint64_t session, uint16_t type,
                           uint32_t from);
/* PING with filler_bytes of zeros, or PONG (filler ignored). */
size_t cluster_encode_ping(uint8_t *buf, size_t cap, uint64_t session, uint16_t type,
                           uint64_t nonce, uint32_t filler_bytes);
size_t cluster_encode_peer_lost(uint8_t *buf, size_t cap, uint64_t session, uint32_t device,
                                const char *msg);
size_t cluster_encode_kv_get(uint8_t *buf, size_t cap, uint64_t session, const cluster_kv_get *g);
/* Bytes of a KV_DATA frame; 0 on overflow or past the frame limit. */
size_t cluster_kv_data_bytes(uint32_t n_pos, uint32_t row_bytes);
/* Positions of row_bytes-wide K and V rows that fit a frame of cap bytes (0: none). */
uint32_t cluster_kv_data_fit(size_t cap, uint32_t row_bytes);
/* d->k and d->v point at n_pos rows each. */
size_t cluster_encode_kv_data(uint8_t *buf, size_t cap, uint64_t session, const cluster_kv_data *d);
/* The same body as a KV_MIRROR frame. */
size_t cluster_encode_kv_mirror(uint8_t *buf, size_t cap, uint64_t session,
                                const cluster_kv_data *d);
/* A version-`version` header with an empty payload of `type` (tests of
 * version refusal write frames of other versions with this). */
size_t cluster_encode_raw_header(uint8_t *buf, size_t cap, uint16_t version, uint16_t type,
                                 uint64_t session, uint32_t payload_bytes);

size_t cluster_encode_tensor_get(uint8_t *buf, size_t cap, const cluster_tensor_get *g);
/* d->data points at d->length bytes (none when d->status != 0) */
size_t cluster_encode_tensor_data(uint8_t *buf, size_t cap, const cluster_tensor_data *d);
/* PREPARE: the body of a PLAN (the coming plan; session: the prepare's number) */
size_t cluster_encode_prepare(uint8_t *buf, size_t cap, uint64_t session,
                              const cluster_plan_msg *p);
size_t cluster_encode_prepared(uint8_t *buf, size_t cap, uint64_t session,
                               const cluster_prepared *p);
/* Bytes of a TENSOR_DATA frame carrying `length` bytes. */
size_t cluster_tensor_data_bytes(uint32_t length);

/* Bytes of an ACT frame for n_tok x n_embd values and n_trace entries; 0 on overflow. */
size_t cluster_act_bytes(uint32_t n_tok, uint32_t n_embd, uint8_t dtype, uint32_t n_trace);
/* The same with a run table of n_runs entries (0: none). */
size_t cluster_act_bytes_runs(uint32_t n_tok, uint32_t n_embd, uint8_t dtype, uint32_t n_trace,
                              uint32_t n_runs);
/* Encodes hidden states x (n_tok x n_embd floats) with their positions and
 * trace; F16 rounds to nearest even. hdr->n_runs must be 0 (no run table). */
size_t cluster_encode_act(uint8_t *buf, size_t cap, uint64_t session, const cluster_act *hdr,
                          const int32_t *pos, const cluster_trace *trace, const float *x);
/* The same with the run table runs[hdr->n_runs] (none when 0); 0 when the
 * runs do not add up to the rows or name a slot out of range. */
size_t cluster_encode_act_runs(uint8_t *buf, size_t cap, uint64_t session, const cluster_act *hdr,
                               const cluster_run *runs, const int32_t *pos,
                               const cluster_trace *trace, const float *x);
int32_t cluster_act_pos(const cluster_act *a, uint32_t i);
/* Run i of the table (i < n_runs). */
void cluster_act_run_at(const cluster_act *a, uint32_t i, cluster_run *out);
void cluster_act_trace_at(const cluster_act *a, uint32_t i, cluster_trace *out);
/* Converts the frame's hidden states into x (n_tok x n_embd floats). */
void cluster_act_read(const cluster_act *a, float *x);

/* ---- keys ---- */

typedef struct cluster_keypair {
    char public_z85[CLUSTER_KEY_Z85 + 1];
    char secret_z85[CLUSTER_KEY_Z85 + 1];
    uint8_t public_key[CLUSTER_KEY_BYTES];
} cluster_keypair;

typedef struct cluster_allow {
    size_t n;
    uint8_t keys[CLUSTER_MAX_ALLOW][CLUSTER_KEY_BYTES];
} cluster_allow;

lares_status cluster_key_generate(cluster_keypair *out, lares_error *err);
/* Writes the pair to path (created with mode 0600, never over an existing
 * file) and the public key to path.pub (0644). Format: docs/protocol.md. */
lares_status cluster_key_write(const char *path, const cluster_keypair *k, lares_error *err);
/* Reads a key pair file; refuses a file readable by others, a malformed key
 * and a secret key whose public half is not the one written beside it. */
lares_status cluster_key_read(const char *path, cluster_keypair *out, lares_error *err);
/* A Z85 public key (40 characters) into 32 bytes. */
lares_status cluster_key_parse(const char *z85, uint8_t out[CLUSTER_KEY_BYTES], lares_error *err);
void cluster_key_z85(const uint8_t key[CLUSTER_KEY_BYTES], char out[CLUSTER_KEY_Z85 + 1]);
/* Adds a key given as 40 Z85 characters or as a file of public keys (one a
 * line, "public-key = ..." lines, '#' comments; a key pair file is refused,
 * since it holds a secret). */
lares_status cluster_allow_add(cluster_allow *a, const char *key_or_file, lares_error *err);
bool cluster_allow_has(const cluster_allow *a, const uint8_t key[CLUSTER_KEY_BYTES]);

/* ---- re-balancing thresholds (the monitor is at the end) ---- */

typedef struct cluster_monitor_opts {
    double threshold;        /* relative drift that counts: 0.3 = 30 % slower or faster */
    int32_t warmup_tokens;   /* tokens after a plan change that are not judged */
    int32_t hold_tokens;     /* tokens in a row beyond the threshold before a re-plan */
    int32_t cooldown_tokens; /* tokens after a re-plan before the next may come */
    double alpha;            /* weight of the newest token in the moving estimate */
    double min_delta_ms;     /* a drift smaller than this per token is noise */
    double min_gain;         /* a new plan must be predicted this much faster (0.1 = 10 %) */
} cluster_monitor_opts;

cluster_monitor_opts cluster_monitor_opts_default(void);
/* Checks the ranges (threshold > 0, tokens >= 0, 0 < alpha <= 1, ...). */
lares_status cluster_monitor_opts_check(const cluster_monitor_opts *o, lares_error *err);

/* ---- ring.json ---- */

typedef struct cluster_ring_device {
    char name[CLUSTER_MAX_NAME + 1];
    char address[CLUSTER_MAX_ADDR + 1]; /* "" for the head */
    uint8_t key[CLUSTER_KEY_BYTES];     /* the worker's public key */
    bool has_key;
    char model_path[CLUSTER_MAX_PATH + 1]; /* "" when not given */
    int32_t n_threads;                     /* 0: the device decides */
    int32_t w, n;                          /* -1 when "auto" */
    int32_t link_delay_ms;                 /* test/emulation only */
    uint64_t memory_bytes; /* "memory": the most this device gives the model; 0: what it has */
} cluster_ring_device;

typedef struct cluster_ring_config {
    char path[CLUSTER_MAX_PATH + 1];
    int32_t n_dev; /* device 0 is the head */
    cluster_ring_device dev[CLUSTER_MAX_DEVICES];
    bool auto_windows; /* "windows": "auto" */
    int32_t rounds;    /* 0: auto */
    uint8_t act_dtype; /* cluster_dtype */
    int32_t heartbeat_ms, timeout_ms, connect_timeout_ms;
    char head_key_path[CLUSTER_MAX_PATH + 1]; /* "" when not given */
    char placement[16];           /* "placement": halda, even, memory, single; "" not given */
    int32_t profile_ms;           /* "profile_ms": workers' measuring time for "auto" */
    int rebalance;                /* "rebalance": 1 on, 0 off, -1 not given */
    int failover;                 /* "failover": 1 on, 0 off, -1 not given */
    /* "rebuild": how a plan change re-runs the conversation for the moved
     * layers' KV cache: "exact" (the default: the batches of the original
     * run, bit-identical) or "batched" (n_batch positions a pass: faster) */
    char rebuild[16];
    /* "kv_mirror": the workers send the head a copy of the KV entries they
     * write, so a loss moves them instead of re-running the conversation
     * (1 on, the default with failover; 0 off; -1 not given) */
    int kv_mirror;
    cluster_monitor_opts monitor; /* "rebalance_opts": thresholds (defaults when absent) */
} cluster_ring_config;

#define CLUSTER_DEFAULT_HEARTBEAT_MS 250
#define CLUSTER_DEFAULT_TIMEOUT_MS   3000
#define CLUSTER_DEFAULT_CONNECT_MS   5000
#define CLUSTER_DEFAULT_PROFILE_MS   500

/* Parses ring.json text; relative key and model paths are taken relative to
 * base_dir. `name` is used in messages. */
lares_status cluster_ring_parse(const char *json, size_t len, const char *name,
                                const char *base_dir, cluster_ring_config *out, lares_error *err);
lares_status cluster_ring_load(const char *path, cluster_ring_config *out, lares_error *err);
/* The plan for a model of n_layer layers: the explicit windows, or "auto". */
lares_status cluster_ring_plan(const cluster_ring_config *c, int32_t n_layer, cluster_plan *out,
                               lares_error *err);

/* ---- the head ---- */

typedef struct cluster_head cluster_head;

/* What the head ships to workers without the model file (issue 19): the
 * model file's bytes and its items (item 0 the header, item i tensor i - 1),
 * answered to TENSOR_GET by the network thread. */
typedef struct cluster_ship_source {
    const uint8_t *base; /* the model file, mapped; must outlive the head */
    uint64_t file_bytes;
    uint32_t n_items;
    const uint64_t *off, *bytes; /* per item (copied at open) */
} cluster_ship_source;

typedef struct cluster_head_opts {
    const cluster_ring_config *ring; /* borrowed during open */
    /* NULL: TENSOR_GET is refused (a worker without the model file cannot serve) */
    const cluster_ship_source *ship;
    cluster_model_id model;
    int32_t n_layer, n_ctx, n_batch, n_embd;
    bool kv_f16;
    uint32_t kv_row_bytes;      /* one position's K (or V) row of one layer, for KV transfers */
    const cluster_keypair *key; /* the head's pair; NULL only when insecure */
    bool insecure;
    const char *head_name;
    /* a device that fails is reported (suspect) and the head waits
     * for a plan without it; without failover the head stays failed */
    bool failover;
    uint32_t profile_ms; /* > 0: workers measure themselves (cached) and send their profile */
    /* a survey (lares ring status): every device that does not welcome the
     * head is lost with its reason, refusals included; no plan follows */
    bool survey;
    /* non-NULL: every plan asks the members to mirror their KV entries on
     * the head (CLUSTER_PLAN_MIRROR_KV), and each KV_MIRROR frame of a member
     * for a layer it holds in the plan in force is handed to this call, on
     * the caller's thread, while the head waits for frames */
    void (*kv_mirror)(void *user, uint32_t slot, int32_t layer, int32_t pos0, int32_t n_pos,
                      const uint8_t *k, const uint8_t *v);
    void *kv_mirror_user;
} cluster_head_opts;

/* Per ring.json device, what the head learnt and measured. */
typedef struct cluster_device_stats {
    cluster_welcome welcome; /* what the worker said (zero for the head) */
    uint64_t windows;        /* windows run */
    uint64_t compute_us;     /* as the device measured them (waits for disk included) */
    uint64_t wait_us;        /* of which waiting for weights from disk */
    uint64_t major_faults;
    uint64_t layers_run;     /* layer x batch passes, for per-layer figures */
    uint32_t mem_free_mib;   /* the last figure it reported; UINT32_MAX unknown */
    uint32_t hop_rtt_us, hop_rtt_big_us; /* its hop to its successor in the probe plan */
} cluster_device_stats;

/* What each device did since the last cluster_head_take_pass. */
typedef struct cluster_pass {
    uint64_t compute_us, wait_us;
    /* layer rows run: a window of w layers over r rows counts w x r (a pass
     * of several sequences is r rows; one token's pass, 1) */
    int64_t layers;
    uint32_t mem_free_mib;
} cluster_pass;

/* Connects to every worker and checks version and model identity (HELLO /
 * WELCOME); no plan yet. A worker that does not answer within the hello
 * deadline (or whose connection drops, or that serves another head) is lost,
 * not an error: the caller plans over the usable devices and the lost ones
 * are asked again by cluster_head_probe. A refusal (a key, the model file,
 * the protocol version) is an error naming the device and its address. */
lares_status cluster_head_open(const cluster_head_opts *o, cluster_head **out, lares_error *err);
/* Sends STOP to the workers and closes everything. */
void cluster_head_close(cluster_head *h);
/* Hands out a plan over `members` (members[i] is the ring.json index of plan
 * device i; members[0] = 0, the head; NULL: every device in ring.json order)
 * and waits until every member is ready (its successor reached), from the
 * last one back. Devices that were members and are not any more get STOP
 * (left out). flags: CLUSTER_PLAN_KEEP_KV (a re-plan during a conversation),
 * CLUSTER_PLAN_PROBE (links and hop figures only, see cluster_head_device). */
lares_status cluster_head_set_plan(cluster_head *h, const cluster_plan *p, const int32_t *members,
                                   uint32_t flags, lares_error *err);
const cluster_plan *cluster_head_plan(const cluster_head *h);
/* ring.json index of plan device i */
int32_t cluster_head_member(const cluster_head *h, int32_t i);
int32_t cluster_head_n_config(const cluster_head *h);
/* What the head knows of a ring.json device: one state, changed in one place
 * (head_pipe.c head_set_state) and every change logged once (docs/ring.md "Device
 * states"). The head itself is always serving. */
typedef enum cluster_dev_state {
    CLUSTER_DEV_JOINING = 0, /* asked (HELLO) at the start, not welcomed yet */
    CLUSTER_DEV_SERVING,     /* a member of the plan in force */
    CLUSTER_DEV_LEFT_OUT,    /* welcomed and watched (heartbeats), no window in the plan */
    CLUSTER_DEV_SUSPECT,     /* serving or left out, silent for more than half the
                                timeout: not given up yet (back when heard again) */
    CLUSTER_DEV_LOST,        /* failed, or never answered; with failover a member that
                                failed stays in the plan in force until the re-plan */
    CLUSTER_DEV_REJOINING    /* lost or left out, asked (back) with a HELLO, no answer yet */
} cluster_dev_state;

/* "joining", "serving", "left out", "suspect", "lost", "rejoining" */
const char *cluster_dev_state_name(cluster_dev_state s);
cluster_dev_state cluster_head_state(const cluster_head *h, int32_t dev);
/* A plan may use it: serving, or left out (welcomed and answering). */
bool cluster_head_usable(const cluster_head *h, int32_t dev);
/* Why the device last failed or was refused ("" when it never did). */
const char *cluster_head_why(const cluster_head *h, int32_t dev);
/* With failover: a member failed since the last plan (it is suspect); calls
 * other than set_plan return its error until a plan without it is set. */
bool cluster_head_needs_plan(const cluster_head *h);
/* Sends the batch x (n_tok x n_embd) at positions pos to plan device 1,
 * `layer` being the next layer to run; it comes back to the head after the
 * model's last layer, or once a window ends at or past `end`. Returns the
 * sequence number of the batch. */
lares_status cluster_head_send(cluster_head *h, int32_t layer, int32_t end, const int32_t *pos,
                               int32_t n_tok, const float *x, uint64_t *seq, lares_error *err);
/* Waits for the batch `seq` to come back (or for a device to fail: the error
 * names it) and writes its hidden states into x; *layer is the next layer to
 * run. Batches sent before it are abandoned (a canceled generation): their
 * frames are dropped. cancel (may be NULL) is polled while waiting:
 * LARES_ECANCELED when it becomes true. */
lares_status cluster_head_recv(cluster_head *h, uint64_t seq, int32_t n_tok, float *x,
                               int32_t *layer, const _Atomic bool *cancel, lares_error *err);

/* ---- several sequences at once (issue 20, docs/batching.md) ----
 * Rows carry their KV slot (a run table in ACT), and several batches may be
 * in the ring at once (a batch's groups: device 2 computes one while device
 * 1 computes the next), each matched by its counter when it comes back. */
#define CLUSTER_MAX_FLIGHT 64
/* From the next plan on, every member keeps n_slots KV slots (1 to
 * CLUSTER_MAX_SLOTS; 1: the plain ring, no PLAN flag 8); the memory budget
 * of each counts them. Put in force by the next cluster_head_set_plan. */
void cluster_head_set_slots(cluster_head *h, uint32_t n_slots);
/* As cluster_head_send, with the rows' runs[0..n_runs) (slot and rows each;
 * NULL: every row slot 0's, no table); x is also where the hidden states
 * come back (cluster_head_recv_any), valid until they do or until
 * cluster_head_abandon. At most CLUSTER_MAX_FLIGHT in flight. */
lares_status cluster_head_send_runs(cluster_head *h, int32_t layer, int32_t end,
                                    const cluster_run *runs, int32_t n_runs, const int32_t *pos,
                                    int32_t n_tok, float *x, uint64_t *seq, lares_error *err);
/* Waits for any batch sent with cluster_head_send_runs to come back, writes
 * its hidden states into its x; *seq says which, *layer the next layer. */
lares_status cluster_head_recv_any(cluster_head *h, uint64_t *seq, int32_t *layer,
                                   const _Atomic bool *cancel, lares_error *err);
/* Batches in the ring now, and the most there were at once. */
int32_t cluster_head_in_flight(const cluster_head *h);
int32_t cluster_head_max_in_flight(const cluster_head *h);
/* Forgets the batches in flight (a failure, a new plan): their frames are
 * dropped when they come. */
void cluster_head_abandon(cluster_head *h);
/* Handles what the network thread passed on so far, without waiting
 * (mirrored KV rows, notes on silent devices, welcomes, failures); frames
 * the caller would wait for are dropped. */
void cluster_head_drain(cluster_head *h);
/* Makes every member forget positions >= pos of KV slot `slot` (0 clears). */
lares_status cluster_head_truncate(cluster_head *h, uint32_t slot, int32_t pos, lares_error *err);
/* KV entries of slot `slot`, `layer`, positions [pos0, pos1) from member
 * `dev` (ring.json index) into k and v ((pos1 - pos0) x kv_row_bytes each),
 * and into it. A put makes the rows the device's entries for those
 * positions; the device must hold the layer in the plan in force and the
 * entries below pos0. */
lares_status cluster_head_kv_get(cluster_head *h, int32_t dev, uint32_t slot, int32_t layer,
                                 int32_t pos0, int32_t pos1, uint8_t *k, uint8_t *v,
                                 lares_error *err);
lares_status cluster_head_kv_put(cluster_head *h, int32_t dev, uint32_t slot, int32_t layer,
                                 int32_t pos0, int32_t pos1, const uint8_t *k, const uint8_t *v,
                                 lares_error *err);
/* ---- fetching in the background (issue 19, head_prepare.c) ----
 * A plan that gives a worker without the model file layers it lacks is put
 * in force in two steps: PREPARE (the coming plan) to those workers, which
 * fetch its weights while the ring goes on generating with the plan in
 * force and answer PREPARED; then, when every one is ready, set_plan. */
typedef enum cluster_prep_state {
    CLUSTER_PREP_NONE = 0, /* not asked (or asked for an earlier prepare) */
    CLUSTER_PREP_ASKED,    /* PREPARE sent, no answer yet */
    CLUSTER_PREP_READY,    /* the coming windows' weights are in its cache */
    CLUSTER_PREP_FAILED    /* it could not (cluster_head_prep_state's why) */
} cluster_prep_state;

/* The device asked the head for the model's bytes or hashes (TENSOR_GET):
 * a worker without the model file, whose new layers must be fetched. */
bool cluster_head_fetches(const cluster_head *h, int32_t dev);
/* Sends PREPARE of plan p over members (ring.json indexes, as set_plan) to
 * each ring.json device d with ask[d] (a member of p, usable); earlier
 * answers are forgotten. Waits for nothing. */
lares_status cluster_head_prepare(cluster_head *h, const cluster_plan *p, const int32_t *members,
                                  const bool *ask, lares_error *err);
/* Where the prepare stands for device dev (answers that came are taken in
 * by every wait, and by cluster_head_drain); *fetched: bytes it fetched,
 * *why: its reason when it failed (may be NULL). */
cluster_prep_state cluster_head_prep_state(const cluster_head *h, int32_t dev, uint64_t *fetched,
                                           const char **why);
/* Forgets the prepare (a plan came first): later answers are dropped. */
void cluster_head_prepare_off(cluster_head *h);

/* Least round trip of `tries` PINGs with filler_bytes of filler to device dev
 * over the head's own connection. */
lares_status cluster_head_ping(cluster_head *h, int32_t dev, uint32_t filler_bytes, int tries,
                               uint32_t *rtt_us, lares_error *err);
/* Asks the lost devices to come back (HELLO; each at most once per hello
 * deadline) and handles what arrived meanwhile, waiting up to wait_ms (0:
 * not at all) for answers; those that answer are left out (a later set_plan
 * may take them). Returns how many devices became usable since the last
 * call (at the start or later). */
int32_t cluster_head_probe(cluster_head *h, uint32_t wait_ms);
/* Whether cluster_head_probe would ask a lost device again, or a device
 * answered since the last call (a batch then brings its groups home). */
bool cluster_head_probe_due(const cluster_head *h);
const cluster_device_stats *cluster_head_device(const cluster_head *h, int32_t dev);
/* Bytes of the model file shipped to ring.json device dev so far (TENSOR_DATA
 * payloads; safe from the caller's thread while the network thread ships). */
uint64_t cluster_head_shipped(const cluster_head *h, int32_t dev);
const cluster_ring_device *cluster_head_ring_device(const cluster_head *h, int32_t dev);
/* Counts a window of `layers` layers the head ran itself on n_tok tokens. */
void cluster_head_add_local(cluster_head *h, int32_t layers, int32_t n_tok, uint64_t compute_us,
                            uint64_t wait_us);
/* Per ring.json device, the figures since the last call (out: n_config entries). */
void cluster_head_take_pass(cluster_head *h, cluster_pass *out);
/* Microseconds the batches spent in the ring (from each send to its return),
 * and the hops they made. */
uint64_t cluster_head_wait_us(const cluster_head *h);
uint64_t cluster_head_hops(const cluster_head *h);
/* The network's share of one hop in ms (the transfer, not the windows: a
 * batch alone in the ring, its time out less the windows' compute, over its
 * hops), a moving estimate; -1 before any such batch came back. */
double cluster_head_hop_ms(const cluster_head *h);

/* ---- the worker ---- */

/* What one window cost on a worker, besides its wall time. */
typedef struct cluster_figures {
    uint32_t major_faults;
    uint32_t wait_us;      /* waiting for weights to arrive from disk */
    uint32_t mem_free_mib; /* UINT32_MAX unknown */
} cluster_figures;

/* What a worker computes with; the callbacks run on the worker's compute
 * thread, one at a time. Each returns LARES_OK or fills err. The prefetch of
 * the next window belongs to the executor behind forward: its cycle is the
 * device's windows in round order (api/ring_worker.c). */
/* A worker's channel to its head for the model's bytes (issue 19): the
 * compute callbacks send TENSOR_GET and wait for the TENSOR_DATA answers
 * while they run (open and setup of a worker without the model file), and
 * the prepare callback does the same on its own thread and link. */
typedef struct cluster_ship_link cluster_ship_link;
lares_status cluster_ship_send(cluster_ship_link *l, const cluster_tensor_get *g, lares_error *err);
/* Waits up to timeout_ms for the next TENSOR_DATA; out->data stays valid
 * until the next call. LARES_ECANCELED when the head went away (the session
 * ended, or the worker is stopping) or the prepare was called off,
 * LARES_ENET when nothing came in time. */
lares_status cluster_ship_recv(cluster_ship_link *l, uint32_t timeout_ms, cluster_tensor_data *out,
                               lares_error *err);

typedef struct cluster_compute {
    void *user;
    /* optional: called once on the compute thread before anything else with
     * the channel for the model's bytes (valid until the thread ends) */
    void (*attach_ship)(void *user, cluster_ship_link *link);
    /* Opens (or keeps) the model `hello` names and says what it is (and, when
     * asked, its profile). */
    lares_status (*open)(void *user, const cluster_hello *hello, cluster_welcome *out,
                         lares_error *err);
    /* Allocates the windows of the plan for device p->self. keep_kv: keep the
     * KV entries of the layers held before (*kept says whether they were);
     * *kv_row_bytes: one position's K row of one layer. */
    lares_status (*setup)(void *user, const cluster_plan_msg *p, bool keep_kv, cluster_ready *out,
                          bool *kept, uint32_t *kv_row_bytes, lares_error *err);
    /* Runs layers [l0, l1) on x (n_tok x n_embd) at positions pos: the rows
     * of runs[0..n_runs) in order, each with the KV cache of its slot (made
     * on a slot's first use; slots < the plan's n_slots). */
    lares_status (*forward)(void *user, int32_t l0, int32_t l1, const cluster_run *runs,
                            int32_t n_runs, const int32_t *pos, int32_t n_tok, float *x,
                            cluster_figures *fig, lares_error *err);
    /* optional: forgets positions >= pos of slot's cache in every window */
    void (*truncate)(void *user, uint32_t slot, int32_t pos);
    /* The session ended: release its windows (the model may stay open). */
    void (*release)(void *user);
    /* Copies the K and V rows of `layer` at positions [pos0, pos0 + n) out of
     * (write false) or into (write true) the KV cache of `slot`. */
    lares_status (*kv_rows)(void *user, uint32_t slot, int32_t layer, int32_t pos0, int32_t n,
                            bool write, uint8_t *k, uint8_t *v, lares_error *err);
    /* optional (NULL: nothing to fetch, every PREPARE is answered ready):
     * makes the weights of the coming plan p's windows present, fetching
     * them over `link`, on a thread of their own while the compute thread
     * serves the plan in force (PREPARE, issue 19); must not change what the
     * compute thread uses. *fetched: bytes that came over the network.
     * LARES_ECANCELED when the link says the prepare was called off. */
    lares_status (*prepare)(void *user, const cluster_plan_msg *p, cluster_ship_link *link,
                            uint64_t *fetched, lares_error *err);
} cluster_compute;

typedef enum cluster_event_kind {
    CLUSTER_EV_LISTENING,
    CLUSTER_EV_REFUSED,
    CLUSTER_EV_HEAD,
    CLUSTER_EV_PLAN,
    CLUSTER_EV_ROUND,
    CLUSTER_EV_HEAD_LOST,
    CLUSTER_EV_STOPPED,
    CLUSTER_EV_ERROR
} cluster_event_kind;

typedef struct cluster_event {
    cluster_event_kind kind;
    const char *text;
    int32_t round, l0, l1, n_tok;
    double compute_ms, wait_ms;
} cluster_event;

typedef void (*cluster_event_fn)(const cluster_event *ev, void *user);

typedef struct cluster_worker_opts {
    const char *listen;         /* "host:port"; port 0 picks a free one */
    const cluster_keypair *key; /* NULL only when insecure */
    const cluster_allow *allow; /* heads allowed to connect (copied) */
    bool pairable; /* may start with no allowed head; heads come by cluster_worker_allow */
    bool insecure;
    cluster_compute compute;
    cluster_event_fn on_event; /* called from the worker's threads; may be NULL */
    void *user;
} cluster_worker_opts;

typedef struct cluster_worker cluster_worker;

/* Binds the listening socket (so the port is known before run). */
lares_status cluster_worker_create(const cluster_worker_opts *o, cluster_worker **out,
                                   lares_error *err);
/* "host:port" actually bound. */
const char *cluster_worker_endpoint(const cluster_worker *w);
/* Serves heads one after the other until cluster_worker_stop. */
lares_status cluster_worker_run(cluster_worker *w, lares_error *err);
/* Asks run to return (from any thread or a signal handler). */
void cluster_worker_stop(cluster_worker *w);
/* Allows one more head key from now on (a pairing done while running); any thread. */
lares_status cluster_worker_allow(cluster_worker *w, const uint8_t key[CLUSTER_KEY_BYTES],
                                  lares_error *err);
void cluster_worker_free(cluster_worker *w);

/* ---- monitoring and the decision to re-plan (issue 9) ----
 *
 * Per device, a moving estimate of the time one layer takes per generated
 * token, compared with a reference: the plan's prediction, or the average of
 * the first tokens after the plan when there is none. A device whose estimate
 * stays beyond the threshold (slower or faster) for hold_tokens tokens in a
 * row, by at least min_delta_ms per token, makes a re-plan due; after a
 * re-plan none is due for cooldown_tokens, and the cooldown doubles when
 * re-plans follow each other within twice of it (no flapping). Plain data and
 * arithmetic: no clock, no sockets. */

typedef struct cluster_monitor_dev {
    int32_t layers;       /* layers per token in the plan in force; 0: not in it */
    double predicted_ms;  /* per layer per token; < 0 unknown */
    double ref_ms;        /* drift is measured against this; < 0 not set yet */
    double ewma_ms;       /* moving estimate per layer per token; < 0 no sample yet */
    double wait_ewma_ms;  /* of which waiting for disk */
    double warm_sum_ms;   /* warm-up samples, for a reference without prediction */
    uint32_t mem_free_mib;
    int32_t samples;      /* tokens measured since the plan */
    int32_t over;         /* tokens in a row beyond the threshold */
    int dir;              /* +1 slower, -1 faster than the reference */
} cluster_monitor_dev;

typedef struct cluster_monitor {
    cluster_monitor_opts o;
    int32_t n_dev;
    cluster_monitor_dev dev[CLUSTER_MAX_DEVICES];
    int64_t tokens;      /* tokens fed since creation */
    int64_t plan_token;  /* token of the last plan change */
    int64_t decisions;   /* re-plans made or refused after the first plan */
    int32_t cooldown;    /* in force; doubles when re-plans come close together */
} cluster_monitor;

void cluster_monitor_init(cluster_monitor *m, const cluster_monitor_opts *o, int32_t n_dev);
/* A plan is in force: layers[d] per token (0: not in it), predicted_ms[d]
 * per layer (< 0 unknown; NULL: none known). replan: it replaced another. */
void cluster_monitor_plan(cluster_monitor *m, const int32_t *layers, const double *predicted_ms,
                          bool replan);
/* One generated token: per device the ms per layer (< 0: it ran nothing),
 * of which waiting for disk, and the free memory it reported. */
void cluster_monitor_token(cluster_monitor *m, const double *ms_per_layer,
                           const double *wait_ms_per_layer, const uint32_t *mem_free_mib);
/* A re-plan is due: the device that drifted most and why, in words. */
bool cluster_monitor_due(const cluster_monitor *m, int32_t *dev, char *why, size_t cap);
/* The figures now are the new normal (a re-plan was weighed and refused):
 * the references become the current estimates, the hold starts over. */
void cluster_monitor_accept(cluster_monitor *m);
/* The estimate to plan with: ms per layer per token (< 0 unknown). */
double cluster_monitor_ms(const cluster_monitor *m, int32_t dev);

#endif /* LARES_CLUSTER_H */
