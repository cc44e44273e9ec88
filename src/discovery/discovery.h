/*
 * discovery: devices that find each other on the local network and pair once
 * (issue 19, docs/ring.md "Zero-setup ring"; the bytes in docs/protocol.md
 * "Discovery and pairing").
 *
 * - beacon.c: the UDP beacon (a query, or a device's announcement), encoded
 *   and decoded byte by byte, length-checked; a beacon proves nothing.
 * - routes.c: where queries and announcements go: each chosen interface's
 *   broadcast address, a multicast group, explicit peers (seeds).
 * - announce.c: a worker's responder (answers queries, announces itself).
 * - scan.c: a head's query and the answers it collects.
 * - sas.c: the short authentication code of a pairing (SHA-256, libsodium).
 * - pair.c: the pairing exchange over a CURVE connection (both sides).
 * - paired.c: the paired-keys store in the user's config directory.
 * - cached.c: what a worker holds in its weight cache, sealed in its
 *   announcement for each paired head (only they can read it).
 *
 * Owns: its own sockets and one ZeroMQ context per pairing service; never
 * prints (events go to a callback). Knows nothing about models.
 */
#ifndef LARES_DISCOVERY_H
#define LARES_DISCOVERY_H

#include "core/core.h"

#include <sys/socket.h>

#define DISC_KEY_BYTES 32
#define DISC_KEY_Z85 40
#define DISC_NAME_MAX 63     /* bytes of a device name: [A-Za-z0-9._-] */
#define DISC_VERSION_MAX 31  /* bytes of the lares version string */
#define DISC_PROTO_VERSION 1 /* of the beacon and the pairing messages */
#define DISC_CACHED_MAX 6       /* models a cache summary lists (the most recently used) */
#define DISC_CACHED_NAME_MAX 47 /* bytes of a model's name there (longer ones cut) */
#define DISC_SEALED_MAX 2       /* sealed summaries an announcement carries (paired heads) */
/* a sealed summary: libsodium's sealed-box overhead (48) + count + the models */
#define DISC_SEALED_BYTES_MAX (48 + 1 + DISC_CACHED_MAX * (1 + DISC_CACHED_NAME_MAX + 24))
/* the largest valid beacon: the fixed part (140) + the sealed summaries */
#define DISC_BEACON_MAX (140 + 1 + DISC_SEALED_MAX * (2 + DISC_SEALED_BYTES_MAX))
#define DISC_DEFAULT_PORT 9102 /* UDP: queries and announcements */
#define DISC_DEFAULT_RING_PORT 9100
#define DISC_DEFAULT_PAIR_PORT 9101
#define DISC_MULTICAST_GROUP "239.255.76.82"
#define DISC_MAX_PEERS 16
#define DISC_MAX_DEVICES 64
#define DISC_FINGERPRINT_LEN 19 /* "abcd-ef01-2345-6789" */

typedef enum disc_beacon_type {
    DISC_BEACON_QUERY = 1,    /* who is there? (a head) */
    DISC_BEACON_ANNOUNCE = 2, /* here I am (a worker: answer or periodic) */
} disc_beacon_type;

typedef struct disc_beacon {
    disc_beacon_type type;
    uint16_t ring_port; /* announce: where heads connect (the ring) */
    uint16_t pair_port; /* announce: where pairing requests go */
    uint8_t key[DISC_KEY_BYTES];          /* announce: the worker's CURVE public key */
    char name[DISC_NAME_MAX + 1];         /* announce */
    char version[DISC_VERSION_MAX + 1];   /* announce: lares version */
    /* announce, optional: the worker's cache summary sealed for each paired
     * head (cached.c); opaque here, 0 of them is the announcement without
     * the section (byte for byte the version-1 layout before it existed) */
    int n_sealed;
    uint16_t sealed_len[DISC_SEALED_MAX];
    uint8_t sealed[DISC_SEALED_MAX][DISC_SEALED_BYTES_MAX];
} disc_beacon;

/* Writes b into buf (cap >= DISC_BEACON_MAX): its length, 0 when a field is invalid. */
size_t disc_beacon_encode(const disc_beacon *b, uint8_t *buf, size_t cap);
/* Reads a beacon; every length, enum and character checked, trailing bytes refused. */
lares_status disc_beacon_decode(const uint8_t *buf, size_t len, disc_beacon *out,
                                lares_error *err);
/* A name a beacon may carry: 1..63 bytes of [A-Za-z0-9._-]. */
bool disc_name_valid(const char *name);
/* "abcd-ef01-2345-6789": the first 8 bytes of SHA-256 of the key, in hex. */
void disc_fingerprint(const uint8_t key[DISC_KEY_BYTES], char out[DISC_FINGERPRINT_LEN + 1]);

/* ---- a worker's cache summary (cached.c) ---- */

typedef struct disc_cached {
    char name[DISC_CACHED_NAME_MAX + 1]; /* printable ASCII; "" unknown */
    uint64_t bytes, file_bytes;          /* held in the cache, of the whole file */
    uint32_t tensors_held, tensors;
} disc_cached;

/* The plaintext: u8 count, then per model str name, u64 bytes, u64 file
 * bytes, u32 tensors held, u32 tensors. Names are cut to
 * DISC_CACHED_NAME_MAX and bytes outside printable ASCII become '?'; at most
 * DISC_CACHED_MAX models (the first ones). Returns the length (0: cap too small). */
size_t disc_cached_encode(const disc_cached *m, int n, uint8_t *buf, size_t cap);
/* Reads a plaintext summary: every length and limit checked, held <= whole,
 * no trailing bytes. */
lares_status disc_cached_decode(const uint8_t *buf, size_t len, disc_cached *out, int cap,
                                int *n, lares_error *err);
/* The summary sealed for one head's public key (a sealed box: anyone can
 * write one, only that head can open it); its length, 0 on failure. */
size_t disc_cached_seal(const disc_cached *m, int n, const uint8_t head_key[DISC_KEY_BYTES],
                        uint8_t *out, size_t cap);
/* The summary an announcement sealed for this head (its key pair): LARES_OK
 * with the models, LARES_ENOTFOUND when none of its sealed parts opens with
 * this key (an unpaired head, or a worker without a cache), another status
 * when one opens but does not decode. */
lares_status disc_cached_open(const disc_beacon *b, const uint8_t public_key[DISC_KEY_BYTES],
                              const uint8_t secret_key[DISC_KEY_BYTES], disc_cached *out,
                              int cap, int *n, lares_error *err);

/* ---- routes ---- */

typedef enum disc_route {
    DISC_ROUTE_BROADCAST = 1, /* each chosen interface's broadcast address */
    DISC_ROUTE_MULTICAST = 2, /* DISC_MULTICAST_GROUP on each chosen interface */
    DISC_ROUTE_PEERS = 4,     /* the explicit peers (seeds), unicast */
} disc_route;

typedef struct disc_opts {
    unsigned routes;   /* a set of disc_route; 0: all three */
    uint16_t port;     /* UDP; 0: DISC_DEFAULT_PORT */
    bool loopback;     /* use loopback interfaces too (tests on one machine) */
    int n_peers;
    char peers[DISC_MAX_PEERS][256]; /* "host:port" of discovery ports */
} disc_opts;

/* "broadcast,multicast,peers" (any subset, or "all") into a set of routes. */
lares_status disc_routes_parse(const char *s, unsigned *out, lares_error *err);
/* An interface chosen by default: up, IPv4, not loopback (unless asked), not
 * a virtual bridge of containers (docker*, veth*, br-*, virbr*, cni*, flannel*). */
bool disc_interface_chosen(const char *name, unsigned flags, bool loopback);

/* The destinations of one send over the routes: up to cap addresses. */
typedef struct disc_dest {
    struct sockaddr_storage addr;
    unsigned addr_len;
    disc_route route;
    char ifname[32];
    uint32_t if_addr; /* multicast: the interface's IPv4 address (network order) */
} disc_dest;
int disc_dests(const disc_opts *o, disc_dest *out, int cap, lares_error *err);
/* Sends buf to one destination from fd (broadcast and multicast set up). */
bool disc_send_to(int fd, const disc_dest *d, const uint8_t *buf, size_t len);

/* ---- a worker's responder ---- */

typedef struct disc_announcer disc_announcer;
/* Called on the announcer's thread before an announcement goes out (at most
 * once a second, unless disc_announcer_refresh_soon asked for it): may change
 * what *b says (its sealed summaries). */
typedef void (*disc_refresh_fn)(void *user, disc_beacon *b);
/* Binds the UDP port (any address), joins the multicast group on the chosen
 * interfaces, and from a thread answers every query with `self` (unicast to
 * the asker) and announces it every interval_ms over the routes. With a
 * refresh function, `self` is refreshed by it before it is sent. */
lares_status disc_announcer_start(const disc_opts *o, const disc_beacon *self,
                                  uint32_t interval_ms, disc_refresh_fn refresh, void *user,
                                  disc_announcer **out, lares_error *err);
void disc_announcer_stop(disc_announcer *a);
/* What the refresh function reports has changed (a model came into the weight
 * cache): the next announcement or answer refreshes first, even within the
 * second of the last refresh. Any thread; NULL does nothing. */
void disc_announcer_refresh_soon(disc_announcer *a);

/* ---- a head's scan ---- */

typedef struct disc_device {
    disc_beacon beacon;
    char host[64];   /* the answer's source address */
    disc_route route; /* the first route that found it */
} disc_device;

/* Queries over the routes (twice, wait_ms apart/2) and collects the answers
 * for wait_ms; devices once each (key and address). Malformed answers are
 * counted in *n_bad (may be NULL) and dropped. */
lares_status disc_scan(const disc_opts *o, uint32_t wait_ms, disc_device *out, int cap,
                       int *n_out, int *n_bad, lares_error *err);
/* The same, ending as soon as every key of want[0..n_want) has answered (a
 * ring of paired devices needs no more; n_want 0: the whole wait). */
lares_status disc_scan_for(const disc_opts *o, uint32_t wait_ms,
                           const uint8_t (*want)[DISC_KEY_BYTES], int n_want, disc_device *out,
                           int cap, int *n_out, int *n_bad, lares_error *err);

/* ---- the short authentication code (sas.c) ---- */

#define DISC_NONCE_BYTES 32
/* The 6-digit code of a pairing: SHA-256 over a label, both public keys in
 * byte order and the head's and the worker's nonces; the first 4 bytes
 * big-endian modulo 10^6. */
uint32_t disc_sas(const uint8_t head_key[DISC_KEY_BYTES], const uint8_t worker_key[DISC_KEY_BYTES],
                  const uint8_t head_nonce[DISC_NONCE_BYTES],
                  const uint8_t worker_nonce[DISC_NONCE_BYTES]);
/* SHA-256 of a nonce: the head's commitment before it sees the worker's nonce. */
void disc_commit(const uint8_t nonce[DISC_NONCE_BYTES], uint8_t out[32]);
void disc_random(uint8_t *buf, size_t n);

/* ---- the paired-keys store (paired.c) ---- */

typedef enum disc_role {
    DISC_ROLE_WORKER = 1, /* a worker this device (a head) uses */
    DISC_ROLE_HEAD = 2,   /* a head this device (a worker) serves */
} disc_role;

typedef struct disc_paired_entry {
    disc_role role;
    char name[DISC_NAME_MAX + 1];
    uint8_t key[DISC_KEY_BYTES];
} disc_paired_entry;

typedef struct disc_paired {
    int n;
    disc_paired_entry e[DISC_MAX_DEVICES];
} disc_paired;

/* Reads the store (a missing file is an empty store); a malformed line is an
 * error naming the file and line. */
lares_status disc_paired_load(const char *path, disc_paired *out, lares_error *err);
/* Writes it (mode 0600, a new file renamed over the old one). */
lares_status disc_paired_save(const char *path, const disc_paired *p, lares_error *err);
/* Adds or replaces (same role and key, or same role and name). */
lares_status disc_paired_add(disc_paired *p, disc_role role, const char *name,
                             const uint8_t key[DISC_KEY_BYTES], lares_error *err);
/* A device called `what` by name, or by its fingerprint or a prefix of at
 * least 4 of its characters. */
bool disc_matches(const char *name, const uint8_t key[DISC_KEY_BYTES], const char *what);
/* Removes every entry whose name, or fingerprint (or a prefix of at least 4
 * of its characters), is `what`; how many were removed. */
int disc_paired_remove(disc_paired *p, const char *what);
/* The entry of this role and key, or NULL. */
const disc_paired_entry *disc_paired_find(const disc_paired *p, disc_role role,
                                          const uint8_t key[DISC_KEY_BYTES]);

/* ---- pairing (pair.c) ---- */

/* The worker's side: a ROUTER socket with CURVE (this key) on its own
 * context; its ZAP handler lets any client key in, and the only messages it
 * answers are the pairing exchange's. */
typedef enum disc_pair_event_kind {
    DISC_PAIR_CODE,    /* a head asked: show the code */
    DISC_PAIR_PAIRED,  /* the head confirmed the code: its key is stored */
    DISC_PAIR_REFUSED, /* a request refused or aborted (why in text) */
} disc_pair_event_kind;

typedef struct disc_pair_event {
    disc_pair_event_kind kind;
    const char *head_name;
    const uint8_t *head_key;
    uint32_t code;
    const char *text;
} disc_pair_event;

/* Called on the service's thread; for DISC_PAIR_PAIRED the callback stores
 * the key and returns LARES_OK (else the head is told it failed). */
typedef lares_status (*disc_pair_fn)(const disc_pair_event *ev, void *user, lares_error *err);

typedef struct disc_pair_service_opts {
    const char *listen; /* "host:port" */
    const char *public_z85, *secret_z85;
    const char *name;   /* this worker's */
    /* true: requests are accepted; false: refused ("not waiting to be paired") */
    bool (*open)(void *user);
    disc_pair_fn on_event;
    void *user;
} disc_pair_service_opts;

typedef struct disc_pair_service disc_pair_service;
lares_status disc_pair_service_start(const disc_pair_service_opts *o, disc_pair_service **out,
                                     lares_error *err);
uint16_t disc_pair_service_port(const disc_pair_service *s);
void disc_pair_service_stop(disc_pair_service *s);

/* The head's side. Connects to host:pair_port pinning worker_key; sends the
 * commitment, receives the worker's nonce, reveals its own; then asks
 * ask_code for what the user typed (the worker shows its code meanwhile).
 * Matching: the worker is told, stores the head's key, and LARES_OK. Not
 * matching: the worker is told to forget it, LARES_EAUTH ("the code ... does
 * not match"), and nothing is stored anywhere. */
typedef struct disc_pair_request {
    const char *host;
    uint16_t pair_port;
    const uint8_t *worker_key;
    const char *public_z85, *secret_z85; /* the head's pair */
    const char *head_name;
    uint32_t timeout_ms;
    /* the code the user typed; false: the user gave up */
    bool (*ask_code)(void *user, uint32_t *code);
    void *user;
} disc_pair_request;
lares_status disc_pair_run(const disc_pair_request *r, lares_error *err);
/* Decodes one pairing message and drops it (the fuzz target's entry). */
lares_status disc_pair_msg_check(const uint8_t *buf, size_t len, lares_error *err);

#endif /* LARES_DISCOVERY_H */
