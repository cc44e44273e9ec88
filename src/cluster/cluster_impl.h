/*
 * cluster internals shared by head.c and worker.c: ZeroMQ sockets with CURVE,
 * connection events in words, and the outbox that holds frames back to
 * emulate link latency (test and benchmark only).
 */
#ifndef LARES_CLUSTER_IMPL_H
#define LARES_CLUSTER_IMPL_H

#include "cluster/cluster.h"

#include <pthread.h>
#include <zmq.h>

/* ZeroMQ message parts of one routed frame: a ROUTER's routing id is at most 255 bytes */
#define NET_MAX_RID 256

/* A socket with lares' common options: no linger, the frame limit, deep
 * queues (a hop never waits on a high-water mark), IPv6 when asked. */
lares_status net_socket(void *zctx, int type, void **out, lares_error *err);
/* CURVE server side with this key pair; ZAP (the allow-list) decides who gets in. */
lares_status net_curve_server(void *s, const cluster_keypair *k, lares_error *err);
/* CURVE client side: our pair, and the one public key the server must hold. */
lares_status net_curve_client(void *s, const cluster_keypair *k,
                              const uint8_t server_key[CLUSTER_KEY_BYTES], lares_error *err);
/* "host:port" (or "tcp://host:port"; "[v6]:port") into a ZeroMQ endpoint;
 * port 0 becomes "*" (any free port) when binding. */
lares_status net_endpoint(const char *addr, bool bind, char *out, size_t cap, bool *ipv6,
                          lares_error *err);
/* "tcp://127.0.0.1:40123" -> "127.0.0.1:40123" */
void net_endpoint_to_addr(const char *endpoint, char *out, size_t cap);

/* Starts monitoring s; *mon is a PAIR socket delivering its events. */
lares_status net_monitor(void *zctx, void *s, const char *name, void **mon, lares_error *err);
/* Reads one pending event without blocking; false when none. */
bool net_read_event(void *mon, uint16_t *event, uint32_t *value, char *addr, size_t addr_cap);
/* The event in words ("handshake failed: the peer's key was refused ..."). */
void net_event_text(uint16_t event, uint32_t value, char *buf, size_t cap);
/* True for events that mean the handshake with this peer can never succeed. */
bool net_event_fatal(uint16_t event, uint32_t value);

/* Sends one frame (prefixed by a routing id when rid != NULL), never blocking. */
int net_send(void *s, const uint8_t *rid, size_t rid_len, const void *buf, size_t len);

/* Frames held back until their time (emulated link latency); FIFO. */
typedef struct net_outbox_item {
    uint64_t due_ns;
    void *sock;
    uint8_t rid[NET_MAX_RID];
    size_t rid_len;
    zmq_msg_t msg;
} net_outbox_item;

/* frames held back at once: a link delay of at most CLUSTER_MAX_LINK_DELAY_MS
 * with heartbeats every 10 ms or more, plus the hidden states in flight */
#define NET_OUTBOX_CAP 256

typedef struct net_outbox {
    net_outbox_item items[NET_OUTBOX_CAP];
    size_t head, count;
} net_outbox;

/* Queues a copy of buf to go out delay_ms from now (0: sends at once). */
int net_outbox_send(net_outbox *o, uint32_t delay_ms, void *s, const uint8_t *rid, size_t rid_len,
                    const void *buf, size_t len);
/* Sends what is due; returns -1 when a send failed (errno kept). */
int net_outbox_flush(net_outbox *o, uint64_t now_ns);
/* Milliseconds until the next item is due (-1 when empty). */
long net_outbox_wait_ms(const net_outbox *o, uint64_t now_ns);
void net_outbox_clear(net_outbox *o);

/* Starts a thread of the library with every signal blocked, so signals
 * reach the application's threads, never interrupt ours. 0 on success. */
int net_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* In-process pipe traffic between a handle's threads: blocking, but retried
 * when a signal interrupts it (a signal must not lose a frame or end a thread). */
int net_pipe_send(void *s, const void *buf, size_t len, int flags);
int net_pipe_msg_send(zmq_msg_t *m, void *s, int flags);
int net_pipe_msg_recv(zmq_msg_t *m, void *s, int flags);

/* A receive of one message part into a zmq_msg; false on EAGAIN. */
bool net_recv_part(void *s, zmq_msg_t *m, bool *more);
/* The same for a socket to another device: through the read gate, where an
 * injected fault drops the whole message (core/fault.c, transport.c). */
bool net_peer_recv_part(void *s, zmq_msg_t *m, bool *more);

/* ---- the worker's two threads (worker.c: network, worker_compute.c: compute) ----
 * They talk over an in-process PAIR pipe in two-part messages: a command
 * part (cmd byte, then the receive time in ns for C_FRAME) and a frame. */

enum {
    WC_FRAME = 1,    /* network -> compute: a HELLO, PLAN, ACT or KV frame to act on */
    WC_RELEASE = 2,  /* network -> compute: the session is over */
    WC_QUIT = 3,     /* network -> compute: leave */
    WC_CANCEL = 4,   /* network -> prepare: the prepare in progress is off */
    WC_TO_HEAD = 16, /* compute -> network: send this frame to the head */
    WC_TO_NEXT = 17, /* compute -> network: send this frame to the successor */
};
#define WC_CMD_BYTES 9

typedef struct worker_compute worker_compute;

/* A thread's channel to the head for the model's bytes (cluster_ship_send /
 * cluster_ship_recv): the compute thread's (HELLO and PLAN of a worker
 * without the file) and the prepare thread's (worker_prepare.c), each over
 * its own pipe to the network thread, which sends the answers to whichever
 * thread asked (docs/ring.md "Fetching in the background"). */
struct cluster_ship_link {
    void *pipe;           /* the thread's end of its pipe */
    bool quit;            /* a WC_QUIT arrived while a transfer waited */
    cluster_frame *frame; /* owned: decoding scratch (not the thread's: its frame is in use) */
    zmq_msg_t last;       /* the frame the last answer points into */
    bool have_last;
};
/* Drops the frame the last answer pointed into. */
void ship_link_close(cluster_ship_link *l);

typedef struct worker_prepare worker_prepare;

/* Starts the prepare thread (worker_prepare.c): it runs cc->prepare for each
 * PREPARE the network thread passes on, over its own ship link, and answers
 * PREPARED; connected to the pipe bound at pipe_ep. */
lares_status worker_prepare_start(void *zctx, const char *pipe_ep, const cluster_compute *cc,
                                  worker_prepare **out, lares_error *err);
/* Joins the thread (after WC_QUIT was sent) and frees it. */
void worker_prepare_join(worker_prepare *wp);

/* Starts the compute thread, connected to the pipe bound at pipe_ep. */
lares_status worker_compute_start(void *zctx, const char *pipe_ep, const cluster_compute *cc,
                                  cluster_event_fn on_event, void *user, worker_compute **out,
                                  lares_error *err);
/* Joins the thread (after WC_QUIT was sent) and frees it. */
void worker_compute_join(worker_compute *wc);

#endif /* LARES_CLUSTER_IMPL_H */
