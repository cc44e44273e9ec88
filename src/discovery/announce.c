/*
 * A worker's responder: answers every query with its announcement (unicast,
 * to the asker's address and port) and announces itself every interval over
 * the routes, so that a device that only listens sees it too. One UDP socket
 * on the discovery port of every address, a member of the multicast group on
 * each chosen interface; one thread.
 */
#include "discovery/discovery.h"

#include <errno.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct disc_announcer {
    disc_opts o;
    uint8_t msg[DISC_BEACON_MAX];
    size_t msg_len;
    uint32_t interval_ms;
    int fd;
    pthread_t thread;
    _Atomic bool stop;
};

static void join_groups(const disc_announcer *a) {
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        return;
    }
    struct in_addr g;
    inet_pton(AF_INET, DISC_MULTICAST_GROUP, &g);
    for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
            !disc_interface_chosen(i->ifa_name, i->ifa_flags, a->o.loopback)) {
            continue;
        }
        struct ip_mreq m = {.imr_multiaddr = g,
                            .imr_interface = ((struct sockaddr_in *)i->ifa_addr)->sin_addr};
        if (setsockopt(a->fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
            lares_log(LARES_LOG_DEBUG, "discovery: cannot join %s on %s: %s",
                      DISC_MULTICAST_GROUP, i->ifa_name, strerror(errno));
        }
    }
    freeifaddrs(ifs);
}

static void announce(disc_announcer *a) {
    disc_dest d[64];
    lares_error err = {0};
    const int n = disc_dests(&a->o, d, (int)LARES_ARRAY_LEN(d), &err);
    for (int i = 0; i < n; i++) {
        if (!disc_send_to(a->fd, &d[i], a->msg, a->msg_len)) {
            lares_log(LARES_LOG_DEBUG, "discovery: announcing on %s failed: %s", d[i].ifname,
                      strerror(errno));
        }
    }
}

static void *run(void *arg) {
    disc_announcer *a = arg;
    uint64_t next = 0;
    while (!atomic_load(&a->stop)) {
        const uint64_t now = lares_now_ns() / 1000000u;
        if (now >= next) {
            announce(a);
            next = now + a->interval_ms;
        }
        struct pollfd p = {.fd = a->fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) {
            continue;
        }
        uint8_t buf[512];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        const ssize_t r = recvfrom(a->fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
        if (r <= 0) {
            continue;
        }
        disc_beacon b;
        if (disc_beacon_decode(buf, (size_t)r, &b, NULL) != LARES_OK ||
            b.type != DISC_BEACON_QUERY) {
            continue; /* others' announcements and noise */
        }
        if (sendto(a->fd, a->msg, a->msg_len, 0, (struct sockaddr *)&from, fl) < 0) {
            lares_log(LARES_LOG_DEBUG, "discovery: answering a query failed: %s",
                      strerror(errno));
        }
    }
    return NULL;
}

lares_status disc_announcer_start(const disc_opts *o, const disc_beacon *self,
                                  uint32_t interval_ms, disc_announcer **out, lares_error *err) {
    disc_announcer *a = lares_calloc(1, sizeof *a);
    if (a == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    a->o = *o;
    a->interval_ms = interval_ms > 0 ? interval_ms : 5000;
    a->msg_len = disc_beacon_encode(self, a->msg, sizeof a->msg);
    atomic_init(&a->stop, false);
    if (a->msg_len == 0 || self->type != DISC_BEACON_ANNOUNCE) {
        lares_free(a);
        return lares_fail(err, LARES_EINVAL,
                          "discovery: this device's announcement is invalid (name '%s': 1 to "
                          "%d characters of [A-Za-z0-9._-])",
                          self->name, DISC_NAME_MAX);
    }
    a->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    const uint16_t port = o->port != 0 ? o->port : DISC_DEFAULT_PORT;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port),
                              .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (a->fd < 0 || setsockopt(a->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        setsockopt(a->fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof one) != 0 ||
        bind(a->fd, (struct sockaddr *)&sin, sizeof sin) != 0) {
        const int e = errno;
        if (a->fd >= 0) {
            close(a->fd);
        }
        lares_free(a);
        return lares_fail(err, LARES_ENET, "discovery: cannot bind UDP port %u: %s", port,
                          strerror(e));
    }
    join_groups(a);
    if (pthread_create(&a->thread, NULL, run, a) != 0) {
        close(a->fd);
        lares_free(a);
        return lares_fail(err, LARES_ENOMEM, "discovery: cannot start a thread");
    }
    *out = a;
    return LARES_OK;
}

void disc_announcer_stop(disc_announcer *a) {
    if (a == NULL) {
        return;
    }
    atomic_store(&a->stop, true);
    pthread_join(a->thread, NULL);
    close(a->fd);
    lares_free(a);
}
