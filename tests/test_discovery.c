/* discovery (issue 19): beacons (round trip, every truncation, forged fields),
 * the pairing code, the paired-keys store, routes and interfaces, and on
 * loopback a scan of a responder and the pairing exchange with the right and
 * a wrong code. */
#include "check.h"
#include "discovery/discovery.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

static disc_beacon sample(void) {
    disc_beacon b = {.type = DISC_BEACON_ANNOUNCE, .ring_port = 9100, .pair_port = 9101};
    for (int i = 0; i < DISC_KEY_BYTES; i++) {
        b.key[i] = (uint8_t)(i * 7 + 1);
    }
    snprintf(b.name, sizeof b.name, "phone-1.lan");
    snprintf(b.version, sizeof b.version, "0.1.0");
    return b;
}

static void test_beacon(void) {
    disc_beacon b = sample(), d;
    uint8_t buf[DISC_BEACON_MAX];
    lares_error err = {0};
    const size_t n = disc_beacon_encode(&b, buf, sizeof buf);
    CHECK(n == 8 + 4 + 32 + 1 + strlen(b.name) + 1 + strlen(b.version));
    CHECK_OK(disc_beacon_decode(buf, n, &d, &err), &err);
    CHECK(d.type == DISC_BEACON_ANNOUNCE && d.ring_port == 9100 && d.pair_port == 9101);
    CHECK(memcmp(d.key, b.key, DISC_KEY_BYTES) == 0);
    CHECK(strcmp(d.name, b.name) == 0 && strcmp(d.version, b.version) == 0);
    /* every truncation is refused, never read past */
    for (size_t len = 0; len < n; len++) {
        uint8_t *cut = malloc(len > 0 ? len : 1);
        memcpy(cut, buf, len);
        CHECKF(disc_beacon_decode(cut, len, &d, &err) != LARES_OK, "length %zu", len);
        free(cut);
    }
    /* a byte more: a count of 0 sealed summaries (the section is absent, not empty) */
    uint8_t more[DISC_BEACON_MAX + 1];
    memcpy(more, buf, n);
    more[n] = 0;
    CHECK(disc_beacon_decode(more, n + 1, &d, &err) == LARES_EFORMAT);
    CHECK(strstr(err.msg, "0 sealed summaries") != NULL);
    /* forged fields */
    uint8_t f[DISC_BEACON_MAX];
    memcpy(f, buf, n);
    f[0] = 'X';
    CHECK(disc_beacon_decode(f, n, &d, &err) == LARES_EFORMAT);
    memcpy(f, buf, n);
    f[4] = 9; /* version */
    CHECK(disc_beacon_decode(f, n, &d, &err) == LARES_EPROTO);
    CHECK(strstr(err.msg, "version 9") != NULL);
    memcpy(f, buf, n);
    f[6] = 77; /* type */
    CHECK(disc_beacon_decode(f, n, &d, &err) == LARES_EFORMAT);
    memcpy(f, buf, n);
    f[8] = f[9] = 0; /* ring port 0 */
    CHECK(disc_beacon_decode(f, n, &d, &err) == LARES_EFORMAT);
    memcpy(f, buf, n);
    f[8 + 4 + 32 + 1] = ' '; /* a space in the name */
    CHECK(disc_beacon_decode(f, n, &d, &err) == LARES_EFORMAT);
    memcpy(f, buf, n);
    f[8 + 4 + 32 + 2] = '\0'; /* a NUL inside the name */
    CHECK(disc_beacon_decode(f, n, &d, &err) == LARES_EFORMAT);
    memcpy(f, buf, n);
    f[8 + 4 + 32] = 200; /* a name longer than the limit and the datagram */
    CHECK(disc_beacon_decode(f, n, &d, &err) == LARES_EFORMAT);
    memcpy(f, buf, n);
    f[8 + 4 + 32] = 0; /* an empty name */
    CHECK(disc_beacon_decode(f, n, &d, &err) == LARES_EFORMAT);
    /* the query: 8 bytes exactly */
    disc_beacon q = {.type = DISC_BEACON_QUERY};
    const size_t qn = disc_beacon_encode(&q, buf, sizeof buf);
    CHECK(qn == 8);
    CHECK_OK(disc_beacon_decode(buf, qn, &d, &err), &err);
    CHECK(d.type == DISC_BEACON_QUERY);
    buf[8] = 1;
    CHECK(disc_beacon_decode(buf, 9, &d, &err) == LARES_EFORMAT);
    /* the encoder refuses what the decoder would */
    b.name[2] = '/';
    CHECK(disc_beacon_encode(&b, buf, sizeof buf) == 0);
    b = sample();
    b.pair_port = 0;
    CHECK(disc_beacon_encode(&b, buf, sizeof buf) == 0);
    b = sample();
    CHECK(disc_beacon_encode(&b, buf, 20) == 0);
    CHECK(disc_name_valid("a") && disc_name_valid("my-laptop.local_2"));
    CHECK(!disc_name_valid("") && !disc_name_valid("a b") && !disc_name_valid("é"));
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = '\0';
    CHECK(!disc_name_valid(longname));
    longname[63] = '\0';
    CHECK(disc_name_valid(longname));
}

/* a head's key pair for the sealed summaries */
static void head_keys(uint8_t pk[32], uint8_t sk[32]) {
    CHECK(sodium_init() >= 0);
    crypto_box_keypair(pk, sk);
}

static disc_cached cached_sample(int i) {
    disc_cached c = {.bytes = 1000u + (uint64_t)i,
                     .file_bytes = 5000000000ull,
                     .tensors_held = 3,
                     .tensors = 291};
    snprintf(c.name, sizeof c.name, "model-%d", i);
    return c;
}

/* the cache summary: plaintext limits, sealing for one head, the beacon's section */
static void test_cached(void) {
    lares_error err = {0};
    disc_cached m[DISC_CACHED_MAX + 2], d[DISC_CACHED_MAX];
    for (int i = 0; i < DISC_CACHED_MAX + 2; i++) {
        m[i] = cached_sample(i);
    }
    uint8_t buf[DISC_SEALED_BYTES_MAX];
    int n = -1;
    /* round trip; more models than a summary lists: the first ones */
    size_t len = disc_cached_encode(m, DISC_CACHED_MAX + 2, buf, sizeof buf);
    CHECK(len > 0 && buf[0] == DISC_CACHED_MAX);
    CHECK_OK(disc_cached_decode(buf, len, d, DISC_CACHED_MAX, &n, &err), &err);
    CHECK(n == DISC_CACHED_MAX);
    for (int i = 0; i < n; i++) {
        CHECK(strcmp(d[i].name, m[i].name) == 0 && d[i].bytes == m[i].bytes &&
              d[i].file_bytes == m[i].file_bytes && d[i].tensors_held == 3 &&
              d[i].tensors == 291);
    }
    /* every truncation refused; a trailing byte; a count over the caller's room */
    for (size_t k = 0; k < len; k++) {
        CHECKF(disc_cached_decode(buf, k, d, DISC_CACHED_MAX, &n, &err) != LARES_OK, "%zu", k);
    }
    uint8_t more[DISC_SEALED_BYTES_MAX + 1];
    memcpy(more, buf, len);
    more[len] = 0;
    CHECK(disc_cached_decode(more, len + 1, d, DISC_CACHED_MAX, &n, &err) == LARES_EFORMAT);
    CHECK(strstr(err.msg, "trailing") != NULL);
    CHECK(disc_cached_decode(buf, len, d, 2, &n, &err) == LARES_EFORMAT && n == 0);
    /* forged: more held than the whole; a control byte in a name; a name over the limit */
    len = disc_cached_encode(m, 1, buf, sizeof buf);
    const size_t name_len = buf[1];
    uint8_t f[DISC_SEALED_BYTES_MAX];
    memcpy(f, buf, len);
    wr_u64le(f + 2 + name_len, 6000000000ull);
    CHECK(disc_cached_decode(f, len, d, DISC_CACHED_MAX, &n, &err) == LARES_EFORMAT);
    CHECK(strstr(err.msg, "more than the whole") != NULL);
    memcpy(f, buf, len);
    wr_u32le(f + 2 + name_len + 16, 300); /* tensors held > tensors */
    CHECK(disc_cached_decode(f, len, d, DISC_CACHED_MAX, &n, &err) == LARES_EFORMAT);
    memcpy(f, buf, len);
    f[2] = '\n';
    CHECK(disc_cached_decode(f, len, d, DISC_CACHED_MAX, &n, &err) == LARES_EFORMAT);
    memcpy(f, buf, len);
    f[1] = DISC_CACHED_NAME_MAX + 1;
    CHECK(disc_cached_decode(f, len, d, DISC_CACHED_MAX, &n, &err) == LARES_EFORMAT);
    /* the encoder cuts long names, replaces what is not printable, clamps held to the whole */
    disc_cached odd = cached_sample(0);
    memset(odd.name, 'n', sizeof odd.name - 1);
    odd.name[sizeof odd.name - 1] = '\0';
    odd.name[3] = '\t';
    odd.bytes = odd.file_bytes + 1;
    len = disc_cached_encode(&odd, 1, buf, sizeof buf);
    CHECK_OK(disc_cached_decode(buf, len, d, DISC_CACHED_MAX, &n, &err), &err);
    CHECK(n == 1 && strlen(d[0].name) == DISC_CACHED_NAME_MAX && d[0].name[3] == '?' &&
          d[0].bytes == d[0].file_bytes);
    CHECK(disc_cached_encode(m, 2, buf, 10) == 0); /* no room */
    /* an empty cache is a summary of 0 models */
    len = disc_cached_encode(m, 0, buf, sizeof buf);
    CHECK(len == 1);
    CHECK_OK(disc_cached_decode(buf, len, d, DISC_CACHED_MAX, &n, &err), &err);
    CHECK(n == 0);

    /* sealed for head A: A opens it, B (another head, unpaired) cannot */
    uint8_t apk[32], ask[32], bpk[32], bsk[32];
    head_keys(apk, ask);
    head_keys(bpk, bsk);
    disc_beacon b = sample(), got;
    b.sealed_len[0] = (uint16_t)disc_cached_seal(m, 2, apk, b.sealed[0], sizeof b.sealed[0]);
    CHECK(b.sealed_len[0] > 48);
    b.n_sealed = 1;
    CHECK_OK(disc_cached_open(&b, apk, ask, d, DISC_CACHED_MAX, &n, &err), &err);
    CHECK(n == 2 && strcmp(d[1].name, "model-1") == 0);
    CHECK(disc_cached_open(&b, bpk, bsk, d, DISC_CACHED_MAX, &n, &err) == LARES_ENOTFOUND);
    /* two heads' summaries in one announcement, through the wire */
    b.sealed_len[1] = (uint16_t)disc_cached_seal(m, 1, bpk, b.sealed[1], sizeof b.sealed[1]);
    b.n_sealed = 2;
    uint8_t wire[DISC_BEACON_MAX + 1];
    const size_t wn = disc_beacon_encode(&b, wire, sizeof wire);
    CHECK(wn == 8 + 4 + 32 + 1 + strlen(b.name) + 1 + strlen(b.version) + 1 + 2 +
                    b.sealed_len[0] + 2 + b.sealed_len[1]);
    CHECK_OK(disc_beacon_decode(wire, wn, &got, &err), &err);
    CHECK(got.n_sealed == 2 && got.sealed_len[1] == b.sealed_len[1]);
    CHECK_OK(disc_cached_open(&got, bpk, bsk, d, DISC_CACHED_MAX, &n, &err), &err);
    CHECK(n == 1 && strcmp(d[0].name, "model-0") == 0);
    CHECK_OK(disc_cached_open(&got, apk, ask, d, DISC_CACHED_MAX, &n, &err), &err);
    CHECK(n == 2);
    /* every truncation refused, but the one at the section's start: that is
     * an announcement without it (so it says nothing of a cache) */
    const size_t fixed = wn - (1 + 2 + b.sealed_len[0] + 2 + b.sealed_len[1]);
    for (size_t k = 0; k < wn; k++) {
        if (k == fixed) {
            CHECK_OK(disc_beacon_decode(wire, k, &got, &err), &err);
            CHECK(got.n_sealed == 0);
            continue;
        }
        CHECKF(disc_beacon_decode(wire, k, &got, &err) != LARES_OK, "length %zu", k);
    }
    uint8_t big[DISC_BEACON_MAX + 2];
    memcpy(big, wire, wn);
    big[wn] = 0;
    CHECK(disc_beacon_decode(big, wn + 1, &got, &err) == LARES_EFORMAT);
    CHECK(strstr(err.msg, "trailing") != NULL);
    /* a damaged box does not open (and is not taken for another head's) */
    const size_t at = wn - b.sealed_len[1] - 2 - 5; /* inside the first box */
    memcpy(big, wire, wn);
    big[at] ^= 1;
    CHECK_OK(disc_beacon_decode(big, wn, &got, &err), &err);
    CHECK(disc_cached_open(&got, apk, ask, d, DISC_CACHED_MAX, &n, &err) == LARES_ENOTFOUND);
    /* the section's own limits: 3 summaries, a box shorter than the overhead */
    memcpy(big, wire, wn);
    big[fixed] = 3;
    CHECK(disc_beacon_decode(big, wn, &got, &err) == LARES_EFORMAT);
    memcpy(big, wire, wn);
    wr_u16le(big + fixed + 1, 40);
    CHECK(disc_beacon_decode(big, wn, &got, &err) == LARES_EFORMAT);
    /* the encoder refuses what the decoder would */
    b.n_sealed = 3;
    CHECK(disc_beacon_encode(&b, wire, sizeof wire) == 0);
    b.n_sealed = 1;
    b.sealed_len[0] = 10;
    CHECK(disc_beacon_encode(&b, wire, sizeof wire) == 0);
    b.sealed_len[0] = DISC_SEALED_BYTES_MAX + 1;
    CHECK(disc_beacon_encode(&b, wire, sizeof wire) == 0);
    /* the largest announcement fits the limit */
    b = sample();
    memset(b.name, 'n', DISC_NAME_MAX);
    b.name[DISC_NAME_MAX] = '\0';
    memset(b.version, 'v', DISC_VERSION_MAX);
    b.version[DISC_VERSION_MAX] = '\0';
    b.n_sealed = DISC_SEALED_MAX;
    for (int i = 0; i < DISC_SEALED_MAX; i++) {
        b.sealed_len[i] = DISC_SEALED_BYTES_MAX;
        memset(b.sealed[i], 0xa5, DISC_SEALED_BYTES_MAX);
    }
    CHECK(disc_beacon_encode(&b, wire, DISC_BEACON_MAX) == DISC_BEACON_MAX);
    /* the most a summary holds seals within its limit */
    for (int i = 0; i < DISC_CACHED_MAX; i++) {
        memset(m[i].name, 'x', DISC_CACHED_NAME_MAX);
        m[i].name[DISC_CACHED_NAME_MAX] = '\0';
    }
    CHECK(disc_cached_seal(m, DISC_CACHED_MAX, apk, b.sealed[0], sizeof b.sealed[0]) ==
          DISC_SEALED_BYTES_MAX);
}

/* pairing messages: valid ones pass, every truncation and a trailing byte fail */
static void test_pair_msgs(void) {
    lares_error err = {0};
    uint8_t req[8 + 32 + 1 + 4];
    memcpy(req, "LRPR\x01\x00\x01\x00", 8);
    memset(req + 8, 7, 32);
    req[40] = 4;
    memcpy(req + 41, "head", 4);
    CHECK_OK(disc_pair_msg_check(req, sizeof req, &err), &err);
    for (size_t len = 0; len < sizeof req; len++) {
        CHECKF(disc_pair_msg_check(req, len, &err) != LARES_OK, "length %zu", len);
    }
    uint8_t more[sizeof req + 1];
    memcpy(more, req, sizeof req);
    more[sizeof req] = 'x';
    CHECK(disc_pair_msg_check(more, sizeof more, &err) == LARES_EFORMAT);
    req[41] = ' '; /* a name with a space */
    CHECK(disc_pair_msg_check(req, sizeof req, &err) == LARES_EFORMAT);
    req[41] = 'h';
    req[6] = 9; /* type */
    CHECK(disc_pair_msg_check(req, sizeof req, &err) == LARES_EFORMAT);
    req[6] = 1;
    req[4] = 2; /* version */
    CHECK(disc_pair_msg_check(req, sizeof req, &err) == LARES_EPROTO);
    uint8_t confirm[12] = {'L', 'R', 'P', 'R', 1, 0, 4, 0, 0x40, 0xe2, 0x01, 0};
    CHECK_OK(disc_pair_msg_check(confirm, sizeof confirm, &err), &err);
    CHECK(disc_pair_msg_check(confirm, 11, &err) == LARES_EFORMAT);
}

static void test_sas(void) {
    uint8_t kh[32], kw[32], kx[32], nh[32], nw[32], nx[32];
    disc_random(kh, 32);
    disc_random(kw, 32);
    disc_random(nh, 32);
    disc_random(nw, 32);
    memcpy(kx, kw, 32);
    kx[31] ^= 1;
    memcpy(nx, nw, 32);
    nx[0] ^= 0x80;
    const uint32_t c = disc_sas(kh, kw, nh, nw);
    CHECK(c < 1000000u);
    CHECK(disc_sas(kh, kw, nh, nw) == c); /* both sides compute the same */
    /* a different key or nonce gives a different code (a 1e-6 collision each) */
    CHECK(disc_sas(kh, kx, nh, nw) != c);
    CHECK(disc_sas(kx, kw, nh, nw) != c);
    CHECK(disc_sas(kh, kw, nh, nx) != c);
    CHECK(disc_sas(kh, kw, nw, nh) != c); /* the nonces keep their roles */
    /* the commitment: the same nonce, the same hash; another nonce, another */
    uint8_t c1[32], c2[32];
    disc_commit(nh, c1);
    disc_commit(nh, c2);
    CHECK(memcmp(c1, c2, 32) == 0);
    disc_commit(nw, c2);
    CHECK(memcmp(c1, c2, 32) != 0);
    /* pinned: SHA-256 of the label, keys 0x00.. and 0x01.., nonces 0x02.., 0x03.. */
    uint8_t a[32], b[32], na[32], nb[32];
    memset(a, 0, 32);
    memset(b, 1, 32);
    memset(na, 2, 32);
    memset(nb, 3, 32);
    CHECK(disc_sas(a, b, na, nb) == disc_sas(a, b, na, nb));
    /* the key order is canonical: swapping roles of the keys alone gives the same hash input */
    CHECK(disc_sas(a, b, na, nb) == disc_sas(b, a, na, nb));
    char fp[DISC_FINGERPRINT_LEN + 1];
    disc_fingerprint(a, fp);
    CHECK(strlen(fp) == DISC_FINGERPRINT_LEN && fp[4] == '-' && fp[9] == '-' && fp[14] == '-');
    char fp2[DISC_FINGERPRINT_LEN + 1];
    disc_fingerprint(b, fp2);
    CHECK(strcmp(fp, fp2) != 0);
}

static char tmpdir[] = "/tmp/lares_test_discovery_XXXXXX";

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_paired(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/paired", tmpdir);
    lares_error err = {0};
    disc_paired p;
    CHECK_OK(disc_paired_load(path, &p, &err), &err); /* none yet: empty */
    CHECK(p.n == 0);
    uint8_t k1[32], k2[32];
    disc_random(k1, 32);
    disc_random(k2, 32);
    CHECK_OK(disc_paired_add(&p, DISC_ROLE_WORKER, "phone", k1, &err), &err);
    CHECK_OK(disc_paired_add(&p, DISC_ROLE_HEAD, "laptop", k2, &err), &err);
    CHECK_OK(disc_paired_add(&p, DISC_ROLE_WORKER, "phone", k1, &err), &err); /* again */
    CHECK(p.n == 2);
    CHECK(disc_paired_add(&p, DISC_ROLE_WORKER, "bad name", k2, &err) == LARES_EINVAL);
    CHECK_OK(disc_paired_save(path, &p, &err), &err);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    disc_paired q;
    CHECK_OK(disc_paired_load(path, &q, &err), &err);
    CHECK(q.n == 2);
    CHECK(disc_paired_find(&q, DISC_ROLE_WORKER, k1) != NULL);
    CHECK(disc_paired_find(&q, DISC_ROLE_HEAD, k1) == NULL);
    CHECK(disc_paired_find(&q, DISC_ROLE_HEAD, k2) != NULL);
    CHECK(strcmp(disc_paired_find(&q, DISC_ROLE_WORKER, k1)->name, "phone") == 0);
    /* removal by name and by a fingerprint prefix */
    CHECK(disc_paired_remove(&q, "nobody") == 0);
    CHECK(disc_paired_remove(&q, "phone") == 1 && q.n == 1);
    char fp[DISC_FINGERPRINT_LEN + 1];
    disc_fingerprint(k2, fp);
    fp[6] = '\0';
    CHECK(disc_paired_remove(&q, "abc") == 0); /* too short to be a fingerprint */
    CHECK(disc_paired_remove(&q, fp) == 1 && q.n == 0);
    CHECK_OK(disc_paired_save(path, &q, &err), &err);
    CHECK_OK(disc_paired_load(path, &p, &err), &err);
    CHECK(p.n == 0);
    /* corrupt files: a clear error naming file and line */
    write_file(path, "# c\nworker phone notakey\n");
    CHECK(disc_paired_load(path, &p, &err) == LARES_EFORMAT);
    CHECK(strstr(err.msg, ":2:") != NULL && strstr(err.msg, "not a paired device") != NULL);
    write_file(path, "friend phone rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n");
    CHECK(disc_paired_load(path, &p, &err) == LARES_EFORMAT);
    write_file(path, "worker ph/one rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n");
    CHECK(disc_paired_load(path, &p, &err) == LARES_EFORMAT);
    CHECK(strstr(err.msg, ":1:") != NULL);
    write_file(path, "worker phone rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7 extra\n");
    CHECK(disc_paired_load(path, &p, &err) == LARES_EFORMAT);
    write_file(path, "worker phone rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n");
    CHECK_OK(disc_paired_load(path, &p, &err), &err);
    CHECK(p.n == 1);
    unlink(path);
}

static void test_routes(void) {
    unsigned r = 0;
    lares_error err = {0};
    CHECK_OK(disc_routes_parse("broadcast", &r, &err), &err);
    CHECK(r == DISC_ROUTE_BROADCAST);
    CHECK_OK(disc_routes_parse("peers,multicast", &r, &err), &err);
    CHECK(r == (DISC_ROUTE_PEERS | DISC_ROUTE_MULTICAST));
    CHECK_OK(disc_routes_parse("all", &r, &err), &err);
    CHECK(r == 7);
    CHECK(disc_routes_parse("pigeon", &r, &err) == LARES_EINVAL);
    CHECK(strstr(err.msg, "pigeon") != NULL);
    CHECK(disc_routes_parse("", &r, &err) == LARES_EINVAL);
    const unsigned up = IFF_UP | IFF_BROADCAST | IFF_MULTICAST;
    CHECK(disc_interface_chosen("eth0", up, false));
    CHECK(disc_interface_chosen("wlan0", up, false));
    CHECK(!disc_interface_chosen("eth0", IFF_BROADCAST, false)); /* down */
    CHECK(!disc_interface_chosen("docker0", up, false));
    CHECK(!disc_interface_chosen("veth12ab", up, false));
    CHECK(!disc_interface_chosen("br-0f3e", up, false));
    CHECK(!disc_interface_chosen("lo", IFF_UP | IFF_LOOPBACK, false));
    CHECK(disc_interface_chosen("lo", IFF_UP | IFF_LOOPBACK, true));
    /* peers: resolved, bad ones refused */
    disc_opts o = {.routes = DISC_ROUTE_PEERS, .n_peers = 2};
    snprintf(o.peers[0], sizeof o.peers[0], "127.0.0.1:4000");
    snprintf(o.peers[1], sizeof o.peers[1], "127.0.0.2:4001");
    disc_dest d[8];
    CHECK(disc_dests(&o, d, 8, &err) == 2);
    snprintf(o.peers[1], sizeof o.peers[1], "127.0.0.2");
    CHECK(disc_dests(&o, d, 8, &err) < 0 && strstr(err.msg, "HOST:PORT") != NULL);
    snprintf(o.peers[1], sizeof o.peers[1], "127.0.0.2:99999");
    CHECK(disc_dests(&o, d, 8, &err) < 0);
    /* loopback only when asked */
    disc_opts lo = {.routes = DISC_ROUTE_BROADCAST, .loopback = true};
    const int with = disc_dests(&lo, d, 8, &err);
    lo.loopback = false;
    const int without = disc_dests(&lo, d, 8, &err);
    CHECK(with == without + 1);
}

/* a free UDP port (bound, then closed) */
static uint16_t free_udp_port(void) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&sin, sizeof sin);
    socklen_t l = sizeof sin;
    getsockname(fd, (struct sockaddr *)&sin, &l);
    close(fd);
    return ntohs(sin.sin_port);
}

/* a worker's refresh: one model in its cache, sealed for the head key in user */
static int refreshes;
static void refresh_sealed(void *user, disc_beacon *b) {
    const disc_cached m = cached_sample(7);
    b->sealed_len[0] = (uint16_t)disc_cached_seal(&m, 1, user, b->sealed[0], sizeof b->sealed[0]);
    b->n_sealed = 1;
    refreshes++;
}

/* the announcement refreshed before it goes out, and a scan that ends once
 * the device it waits for answered */
static void test_scan_refresh(void) {
    disc_beacon self = sample();
    disc_opts o = {.routes = DISC_ROUTE_PEERS, .port = free_udp_port(), .n_peers = 1};
    snprintf(o.peers[0], sizeof o.peers[0], "127.0.0.1:%u", o.port);
    disc_opts quiet = o;
    quiet.n_peers = 0;
    uint8_t pk[32], sk[32];
    head_keys(pk, sk);
    lares_error err = {0};
    disc_announcer *a = NULL;
    CHECK_OK(disc_announcer_start(&quiet, &self, 60000, refresh_sealed, pk, &a, &err), &err);
    disc_device devs[4];
    int n = 0, bad = 0;
    const uint64_t t0 = lares_now_ns();
    CHECK_OK(disc_scan_for(&o, 20000, (const uint8_t(*)[DISC_KEY_BYTES])self.key, 1, devs, 4, &n,
                           &bad, &err),
             &err);
    const double s = (double)(lares_now_ns() - t0) / 1e9;
    CHECKF(s < 15, "the scan waited %.1f s for a device that answered", s);
    CHECK(n == 1 && bad == 0 && refreshes >= 1);
    if (n == 1) {
        disc_cached d[DISC_CACHED_MAX];
        int k = 0;
        CHECK(devs[0].beacon.n_sealed == 1);
        CHECK_OK(disc_cached_open(&devs[0].beacon, pk, sk, d, DISC_CACHED_MAX, &k, &err), &err);
        CHECK(k == 1 && strcmp(d[0].name, "model-7") == 0);
    }
    disc_announcer_stop(a);
}

static void test_scan(void) {
    disc_beacon self = sample();
    disc_opts o = {.routes = DISC_ROUTE_PEERS, .port = free_udp_port(), .n_peers = 1};
    snprintf(o.peers[0], sizeof o.peers[0], "127.0.0.1:%u", o.port);
    lares_error err = {0};
    disc_announcer *a = NULL;
    disc_opts quiet = o;
    quiet.n_peers = 0; /* its own announcements go nowhere */
    CHECK_OK(disc_announcer_start(&quiet, &self, 60000, NULL, NULL, &a, &err), &err);
    disc_device devs[4];
    int n = 0, bad = 0;
    CHECK_OK(disc_scan(&o, 1500, devs, 4, &n, &bad, &err), &err);
    CHECK(n == 1 && bad == 0);
    if (n == 1) {
        CHECK(strcmp(devs[0].beacon.name, self.name) == 0);
        CHECK(strcmp(devs[0].host, "127.0.0.1") == 0);
        CHECK(devs[0].route == DISC_ROUTE_PEERS);
        CHECK(memcmp(devs[0].beacon.key, self.key, 32) == 0);
    }
    disc_announcer_stop(a);
    /* nobody there: none found, no error */
    CHECK_OK(disc_scan(&o, 300, devs, 4, &n, &bad, &err), &err);
    CHECK(n == 0);
    /* a forged answer: counted as bad and dropped */
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(o.port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0);
    pid_t pid = fork();
    if (pid == 0) { /* answers every query with garbage, twice */
        for (int i = 0; i < 2; i++) {
            uint8_t q[64];
            struct sockaddr_in from;
            socklen_t fl = sizeof from;
            if (recvfrom(fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl) > 0) {
                sendto(fd, "LRDB\x01\x00\x02\x00garbage", 15, 0, (struct sockaddr *)&from, fl);
            }
        }
        _exit(0);
    }
    CHECK_OK(disc_scan(&o, 1500, devs, 4, &n, &bad, &err), &err);
    CHECK(n == 0 && bad >= 1);
    close(fd);
    waitpid(pid, NULL, 0);
}

/* ---- pairing on loopback ---- */

typedef struct worker_side {
    int codes, paired, refusals;
    uint32_t code;
    uint8_t head_key[32];
    bool open;
    pthread_mutex_t mu;
} worker_side;

static bool ws_open(void *user) {
    return ((worker_side *)user)->open;
}

static lares_status ws_event(const disc_pair_event *ev, void *user, lares_error *err) {
    (void)err;
    worker_side *w = user;
    pthread_mutex_lock(&w->mu);
    if (ev->kind == DISC_PAIR_CODE) {
        w->codes++;
        w->code = ev->code;
    } else if (ev->kind == DISC_PAIR_PAIRED) {
        w->paired++;
        memcpy(w->head_key, ev->head_key, 32);
    } else {
        w->refusals++;
    }
    pthread_mutex_unlock(&w->mu);
    return LARES_OK;
}

typedef struct head_side {
    worker_side *w;
    int delta; /* added to the worker's code: 0 right, else wrong */
} head_side;

static bool hs_code(void *user, uint32_t *code) {
    head_side *h = user;
    for (int i = 0; i < 500; i++) { /* the worker shows its code as the REVEAL arrives */
        pthread_mutex_lock(&h->w->mu);
        const int codes = h->w->codes;
        const uint32_t c = h->w->code;
        pthread_mutex_unlock(&h->w->mu);
        if (codes > 0) {
            *code = (c + (uint32_t)h->delta) % 1000000u;
            return true;
        }
        usleep(10000);
    }
    return false;
}

static void test_pairing(void) {
    char wpub[41], wsec[41], hpub[41], hsec[41], xpub[41], xsec[41];
    CHECK(zmq_curve_keypair(wpub, wsec) == 0 && zmq_curve_keypair(hpub, hsec) == 0 &&
          zmq_curve_keypair(xpub, xsec) == 0);
    uint8_t wkey[32], hkey[32], xkey[32];
    zmq_z85_decode(wkey, wpub);
    zmq_z85_decode(hkey, hpub);
    zmq_z85_decode(xkey, xpub);
    worker_side ws = {.open = true};
    pthread_mutex_init(&ws.mu, NULL);
    disc_pair_service_opts so = {.listen = "127.0.0.1:0", .public_z85 = wpub, .secret_z85 = wsec,
                                 .name = "w1", .open = ws_open, .on_event = ws_event,
                                 .user = &ws};
    disc_pair_service *s = NULL;
    lares_error err = {0};
    CHECK_OK(disc_pair_service_start(&so, &s, &err), &err);
    if (s == NULL) {
        return;
    }
    head_side hs = {.w = &ws, .delta = 1};
    disc_pair_request r = {.host = "127.0.0.1", .pair_port = disc_pair_service_port(s),
                           .worker_key = wkey, .public_z85 = hpub, .secret_z85 = hsec,
                           .head_name = "head", .timeout_ms = 10000, .ask_code = hs_code,
                           .user = &hs};
    /* a wrong code: refused on the head, nothing stored on the worker */
    CHECK(disc_pair_run(&r, &err) == LARES_EAUTH);
    CHECK(strstr(err.msg, "does not match") != NULL);
    CHECK(ws.codes == 1 && ws.paired == 0 && ws.refusals == 1);
    /* the right code: paired, the worker got the head's key */
    ws.codes = 0;
    hs.delta = 0;
    CHECK_OK(disc_pair_run(&r, &err), &err);
    CHECK(ws.paired == 1 && memcmp(ws.head_key, hkey, 32) == 0);
    /* a head pinning another key than the worker's: the handshake fails */
    ws.codes = 0;
    r.worker_key = xkey;
    r.timeout_ms = 1500;
    CHECK(disc_pair_run(&r, &err) == LARES_ENET);
    CHECK(ws.codes == 0 && ws.paired == 1);
    /* a worker not waiting to be paired refuses */
    ws.open = false;
    r.worker_key = wkey;
    r.timeout_ms = 10000;
    CHECK(disc_pair_run(&r, &err) == LARES_EAUTH);
    CHECK(strstr(err.msg, "not waiting to be paired") != NULL);
    CHECK(ws.paired == 1);
    disc_pair_service_stop(s);
    pthread_mutex_destroy(&ws.mu);
}

int main(void) {
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_beacon();
    test_cached();
    test_sas();
    test_pair_msgs();
    test_paired();
    test_routes();
    test_scan();
    test_scan_refresh();
    test_pairing();
    rmdir(tmpdir);
    return check_finish("test_discovery");
}
