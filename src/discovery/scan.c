/*
 * A head's scan: a query over every route (sent twice, since UDP may drop
 * one), then the answers for wait_ms. Each device once (by key: the first
 * route that found it). Answers that are not valid announcements are counted
 * and dropped; none is trusted (pairing decides what is used).
 */
#include "discovery/discovery.h"

#include <errno.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

static void send_queries(int fd, const disc_dest *d, int n) {
    disc_beacon q = {.type = DISC_BEACON_QUERY};
    uint8_t buf[DISC_BEACON_MAX];
    const size_t len = disc_beacon_encode(&q, buf, sizeof buf);
    for (int i = 0; i < n; i++) {
        if (!disc_send_to(fd, &d[i], buf, len)) {
            lares_log(LARES_LOG_DEBUG, "discovery: a query to %s (%s) failed: %s", d[i].ifname,
                      d[i].route == DISC_ROUTE_MULTICAST ? "multicast" : "unicast",
                      strerror(errno));
        }
    }
}

/* the route whose destination the answer's source matches best */
static disc_route route_of(const disc_dest *d, int n, const struct sockaddr_in *from) {
    for (int i = 0; i < n; i++) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&d[i].addr;
        if (d[i].route == DISC_ROUTE_PEERS && a->sin_family == AF_INET &&
            a->sin_addr.s_addr == from->sin_addr.s_addr && a->sin_port == from->sin_port) {
            return DISC_ROUTE_PEERS;
        }
    }
    return n > 0 ? d[0].route : DISC_ROUTE_BROADCAST;
}

#define SCAN_SETTLE_MS 250u /* a LAN's round trip many times over, on a loaded device */

/* every key of want[0..n_want) among the answers so far */
static bool all_found(const uint8_t (*want)[DISC_KEY_BYTES], int n_want, const disc_device *out,
                      int n_out) {
    for (int w = 0; w < n_want; w++) {
        bool seen = false;
        for (int i = 0; i < n_out && !seen; i++) {
            seen = memcmp(out[i].beacon.key, want[w], DISC_KEY_BYTES) == 0;
        }
        if (!seen) {
            return false;
        }
    }
    return n_want > 0;
}

lares_status disc_scan(const disc_opts *o, uint32_t wait_ms, disc_device *out, int cap,
                       int *n_out, int *n_bad, lares_error *err) {
    return disc_scan_for(o, wait_ms, NULL, 0, out, cap, n_out, n_bad, err);
}

lares_status disc_scan_for(const disc_opts *o, uint32_t wait_ms,
                           const uint8_t (*want)[DISC_KEY_BYTES], int n_want, disc_device *out,
                           int cap, int *n_out, int *n_bad, lares_error *err) {
    *n_out = 0;
    if (n_bad != NULL) {
        *n_bad = 0;
    }
    disc_dest d[64];
    const int nd = disc_dests(o, d, (int)LARES_ARRAY_LEN(d), err);
    if (nd < 0) {
        return err != NULL ? err->code : LARES_ENET;
    }
    if (nd == 0) {
        return lares_fail(err, LARES_ENET,
                          "discovery: no route to ask on: no chosen interface is up (loopback "
                          "and container bridges are skipped) and no --peer given");
    }
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&any, sizeof any) != 0) {
        const int e = errno;
        if (fd >= 0) {
            close(fd);
        }
        return lares_fail(err, LARES_ENET, "discovery: cannot open a UDP socket: %s",
                          strerror(e));
    }
    const uint64_t t0 = lares_now_ns() / 1000000u;
    const uint64_t end = t0 + wait_ms;
    const uint64_t resend = t0 + wait_ms / 2;
    bool resent = false;
    send_queries(fd, d, nd);
    for (;;) {
        const uint64_t now = lares_now_ns() / 1000000u;
        /* the answers of one round trip all count (devices not asked for
         * are reported too), then the wanted ones end the wait */
        if (now >= end || (now >= t0 + SCAN_SETTLE_MS && all_found(want, n_want, out, *n_out))) {
            break;
        }
        if (!resent && now >= resend) {
            send_queries(fd, d, nd);
            resent = true;
        }
        uint64_t until = resent ? end : resend;
        if (n_want > 0 && now < t0 + SCAN_SETTLE_MS) {
            until = LARES_MIN(until, t0 + SCAN_SETTLE_MS); /* wake to look again then */
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(until - now)) <= 0) {
            continue;
        }
        uint8_t buf[DISC_BEACON_MAX + 1]; /* one more: a longer datagram is refused, not cut */
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        const ssize_t r = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
        if (r <= 0 || from.sin_family != AF_INET) {
            continue;
        }
        disc_beacon b;
        if (disc_beacon_decode(buf, (size_t)r, &b, NULL) != LARES_OK) {
            if (n_bad != NULL) {
                (*n_bad)++;
            }
            continue;
        }
        if (b.type != DISC_BEACON_ANNOUNCE) {
            continue; /* our own query, looped back */
        }
        bool seen = false;
        for (int i = 0; i < *n_out && !seen; i++) {
            seen = memcmp(out[i].beacon.key, b.key, DISC_KEY_BYTES) == 0;
        }
        if (seen || *n_out == cap) {
            continue;
        }
        disc_device *dev = &out[(*n_out)++];
        dev->beacon = b;
        inet_ntop(AF_INET, &from.sin_addr, dev->host, sizeof dev->host);
        dev->route = route_of(d, nd, &from);
    }
    close(fd);
    return LARES_OK;
}
