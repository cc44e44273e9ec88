/*
 * A worker's responder: answers every query with its announcement (unicast,
 * to the asker's address and port) and announces itself every interval over
 * the routes, so that a device that only listens sees it too. One UDP socket
 * on the discovery port of every address, a member of the multicast group on
 * each chosen interface; one thread. A refresh function lets the worker
 * change what it says (its cache summary) between announcements: it is
 * called on this thread at most once a second, just before one goes out.
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

#define REFRESH_EVERY_MS 1000u

struct disc_announcer {
    disc_opts o;
    disc_beacon self;
    disc_refresh_fn refresh;
    void *user;
    uint64_t refreshed_ms; /* when refresh last ran */
    _Atomic bool stale;    /* refresh at the next chance (disc_announcer_refresh_soon) */
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

/* Lets the worker update its announcement; a refresh that makes it invalid
 * is dropped (the last valid one stays). */
static void refresh(disc_announcer *a, uint64_t now_ms) {
    if (a->refresh == NULL) {
        return;
    }
    const bool stale = atomic_exchange(&a->stale, false);
    if (!stale && now_ms - a->refreshed_ms < REFRESH_EVERY_MS) {
        return;
    }
    a->refreshed_ms = now_ms;
    disc_beacon b = a->self;
    a->refresh(a->user, &b);
    uint8_t msg[DISC_BEACON_MAX];
    const size_t n = disc_beacon_encode(&b, msg, sizeof msg);
    if (n == 0 || b.type != DISC_BEACON_ANNOUNCE) {
        lares_log(LARES_LOG_WARN, "discovery: a refreshed announcement is invalid; the last "
                                  "one stays");
        return;
    }
    a->self = b;
    memcpy(a->msg, msg, n);
    a->msg_len = n;
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

/* A datagram, its sender and the address it was sent to (IP_PKTINFO). */
static ssize_t recv_query(int fd, uint8_t *buf, size_t cap, struct sockaddr_in *from,
                          uint32_t *to_addr) {
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    union {
        struct cmsghdr align;
        uint8_t bytes[CMSG_SPACE(sizeof(struct in_pktinfo))];
    } ctl;
    struct msghdr mh = {.msg_name = from,
                        .msg_namelen = sizeof *from,
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.bytes,
                        .msg_controllen = sizeof ctl.bytes};
    const ssize_t r = recvmsg(fd, &mh, 0);
    if (r <= 0 || from->sin_family != AF_INET) {
        return -1;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
            struct in_pktinfo pi;
            memcpy(&pi, CMSG_DATA(c), sizeof pi);
            *to_addr = pi.ipi_addr.s_addr;
        }
    }
    return r;
}

/* an address of one of this host's interfaces (not a broadcast or group address) */
static bool is_own_address(uint32_t addr) {
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        return false;
    }
    bool own = false;
    for (struct ifaddrs *i = ifs; i != NULL && !own; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET) {
            continue;
        }
        const uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        const uint32_t m = i->ifa_netmask != NULL
                               ? ((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr
                               : 0xffffffffu;
        /* a loopback interface owns its whole network (127.0.0.2 on lo's 127/8) */
        own = a == addr || ((i->ifa_flags & IFF_LOOPBACK) != 0 && (a & m) == (addr & m));
    }
    freeifaddrs(ifs);
    return own;
}

/* The announcement to the asker, from the address its query went to when that
 * was one of this host's (so a worker listening on one address answers from
 * it); from the route's address after a broadcast or multicast query. */
static ssize_t answer(const disc_announcer *a, const struct sockaddr_in *to, uint32_t to_addr) {
    struct iovec iov = {.iov_base = (void *)a->msg, .iov_len = a->msg_len};
    union {
        struct cmsghdr align;
        uint8_t bytes[CMSG_SPACE(sizeof(struct in_pktinfo))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {.msg_name = (void *)to, .msg_namelen = sizeof *to, .msg_iov = &iov,
                        .msg_iovlen = 1};
    const bool unicast = to_addr != 0 && is_own_address(to_addr);
    if (unicast) {
        mh.msg_control = ctl.bytes;
        mh.msg_controllen = sizeof ctl.bytes;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
        struct in_pktinfo pi = {.ipi_spec_dst.s_addr = to_addr};
        memcpy(CMSG_DATA(c), &pi, sizeof pi);
    }
    const ssize_t r = sendmsg(a->fd, &mh, 0);
    return r;
}

static void *run(void *arg) {
    disc_announcer *a = arg;
    uint64_t next = 0;
    while (!atomic_load(&a->stop)) {
        const uint64_t now = lares_now_ns() / 1000000u;
        if (now >= next) {
            refresh(a, now);
            announce(a);
            next = now + a->interval_ms;
        }
        struct pollfd p = {.fd = a->fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) {
            continue;
        }
        uint8_t buf[DISC_BEACON_MAX + 1]; /* one more: a longer datagram is refused, not cut */
        struct sockaddr_in from;
        uint32_t to_addr = 0;
        const ssize_t r = recv_query(a->fd, buf, sizeof buf, &from, &to_addr);
        if (r <= 0) {
            continue;
        }
        disc_beacon b;
        if (disc_beacon_decode(buf, (size_t)r, &b, NULL) != LARES_OK ||
            b.type != DISC_BEACON_QUERY) {
            continue; /* others' announcements and noise */
        }
        refresh(a, lares_now_ns() / 1000000u);
        if (answer(a, &from, to_addr) < 0) {
            lares_log(LARES_LOG_DEBUG, "discovery: answering a query failed: %s",
                      strerror(errno));
        }
    }
    return NULL;
}

lares_status disc_announcer_start(const disc_opts *o, const disc_beacon *self,
                                  uint32_t interval_ms, disc_refresh_fn refresh_fn, void *user,
                                  disc_announcer **out, lares_error *err) {
    disc_announcer *a = lares_calloc(1, sizeof *a);
    if (a == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    a->o = *o;
    a->interval_ms = interval_ms > 0 ? interval_ms : 5000;
    a->self = *self;
    a->refresh = refresh_fn;
    a->user = user;
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
        setsockopt(a->fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one) != 0 ||
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

void disc_announcer_refresh_soon(disc_announcer *a) {
    if (a != NULL) {
        atomic_store(&a->stale, true);
    }
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
