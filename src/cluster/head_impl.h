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
} head_io;

/* The network thread's body (pthread start routine, arg: the head_io). */
void *head_io_main(void *arg);

#endif /* LARES_CLUSTER_HEAD_IMPL_H */
