/*
 * Where beacons go (docs/ring.md "Zero-setup ring"): each chosen interface's
 * broadcast address (works where an access point drops multicast), the
 * multicast group on each chosen interface, and explicit peers (a device on
 * another subnet, or a network that carries neither). Interfaces: up, IPv4,
 * not loopback unless asked, not the virtual bridges of containers and VMs.
 */
#include "discovery/discovery.h"

#include <errno.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>

lares_status disc_routes_parse(const char *s, unsigned *out, lares_error *err) {
    unsigned r = 0;
    const char *p = s;
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        const size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n == 3 && strncmp(p, "all", 3) == 0) {
            r |= DISC_ROUTE_BROADCAST | DISC_ROUTE_MULTICAST | DISC_ROUTE_PEERS;
        } else if (n == 9 && strncmp(p, "broadcast", 9) == 0) {
            r |= DISC_ROUTE_BROADCAST;
        } else if (n == 9 && strncmp(p, "multicast", 9) == 0) {
            r |= DISC_ROUTE_MULTICAST;
        } else if (n == 5 && strncmp(p, "peers", 5) == 0) {
            r |= DISC_ROUTE_PEERS;
        } else {
            return lares_fail(err, LARES_EINVAL,
                              "'%.*s' is not a discovery route (broadcast, multicast, peers "
                              "or all)",
                              (int)LARES_MIN(n, 64), p);
        }
        p += n;
        if (*p == ',') {
            p++;
        }
    }
    if (r == 0) {
        return lares_fail(err, LARES_EINVAL, "no discovery route given");
    }
    *out = r;
    return LARES_OK;
}

bool disc_interface_chosen(const char *name, unsigned flags, bool loopback) {
    static const char *const virtual_prefixes[] = {"docker", "veth", "br-", "virbr", "cni",
                                                   "flannel", "vboxnet", "vmnet"};
    if ((flags & IFF_UP) == 0) {
        return false;
    }
    if ((flags & IFF_LOOPBACK) != 0) {
        return loopback;
    }
    for (size_t i = 0; i < LARES_ARRAY_LEN(virtual_prefixes); i++) {
        if (strncmp(name, virtual_prefixes[i], strlen(virtual_prefixes[i])) == 0) {
            return false;
        }
    }
    return true;
}

static uint16_t the_port(const disc_opts *o) {
    return o->port != 0 ? o->port : DISC_DEFAULT_PORT;
}

static void set_v4(disc_dest *d, uint32_t addr_be, uint16_t port) {
    memset(&d->addr, 0, sizeof d->addr);
    struct sockaddr_in *sin = (struct sockaddr_in *)&d->addr;
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = addr_be;
    sin->sin_port = htons(port);
    d->addr_len = sizeof *sin;
}

/* "host:port" of a peer into d (IPv4 or IPv6, resolved) */
static lares_status peer_dest(const char *peer, disc_dest *d, lares_error *err) {
    char host[256];
    snprintf(host, sizeof host, "%s", peer);
    char *colon = strrchr(host, ':');
    if (colon == NULL || colon == host || colon[1] == '\0') {
        return lares_fail(err, LARES_EINVAL, "--peer '%s': not HOST:PORT", peer);
    }
    *colon = '\0';
    const char *port = colon + 1;
    char *h = host;
    if (h[0] == '[' && colon[-1] == ']') { /* [v6]:port */
        h++;
        colon[-1] = '\0';
    }
    char *end = NULL;
    const long pn = strtol(port, &end, 10);
    if (*end != '\0' || pn < 1 || pn > 65535) {
        return lares_fail(err, LARES_EINVAL, "--peer '%s': the port must be 1 to 65535", peer);
    }
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM, .ai_family = AF_INET};
    struct addrinfo *res = NULL;
    const int rc = getaddrinfo(h, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        return lares_fail(err, LARES_ENET, "--peer '%s': %s", peer, gai_strerror(rc));
    }
    memset(d, 0, sizeof *d);
    memcpy(&d->addr, res->ai_addr, res->ai_addrlen);
    d->addr_len = (unsigned)res->ai_addrlen;
    d->route = DISC_ROUTE_PEERS;
    snprintf(d->ifname, sizeof d->ifname, "peer");
    freeaddrinfo(res);
    return LARES_OK;
}

int disc_dests(const disc_opts *o, disc_dest *out, int cap, lares_error *err) {
    const unsigned routes = o->routes != 0 ? o->routes
                                           : (DISC_ROUTE_BROADCAST | DISC_ROUTE_MULTICAST |
                                              DISC_ROUTE_PEERS);
    int n = 0;
    if ((routes & (DISC_ROUTE_BROADCAST | DISC_ROUTE_MULTICAST)) != 0) {
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) != 0) {
            lares_fail(err, LARES_ENET, "getifaddrs: %s", strerror(errno));
            return -1;
        }
        for (struct ifaddrs *i = ifs; i != NULL && n < cap; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
                !disc_interface_chosen(i->ifa_name, i->ifa_flags, o->loopback)) {
                continue;
            }
            const uint32_t local = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            if ((routes & DISC_ROUTE_BROADCAST) != 0 && n < cap) {
                if ((i->ifa_flags & IFF_BROADCAST) != 0) {
                    /* the interface's broadcast address; when none was set (ip addr add
                     * without brd: getifaddrs then gives the address itself), the
                     * subnet's: the address with the host bits set */
                    uint32_t bcast = i->ifa_broadaddr != NULL
                                         ? ((struct sockaddr_in *)i->ifa_broadaddr)->sin_addr.s_addr
                                         : 0;
                    if ((bcast == 0 || bcast == local) && i->ifa_netmask != NULL) {
                        bcast = local | ~((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
                    }
                    if (bcast == 0 || bcast == local) {
                        continue; /* a /32: nobody else to reach */
                    }
                    set_v4(&out[n], bcast, the_port(o));
                } else if ((i->ifa_flags & IFF_LOOPBACK) != 0) {
                    set_v4(&out[n], local, the_port(o)); /* loopback has no broadcast */
                } else {
                    continue;
                }
                out[n].route = DISC_ROUTE_BROADCAST;
                out[n].if_addr = local;
                snprintf(out[n].ifname, sizeof out[n].ifname, "%s", i->ifa_name);
                n++;
            }
            if ((routes & DISC_ROUTE_MULTICAST) != 0 && n < cap &&
                ((i->ifa_flags & IFF_MULTICAST) != 0 || (i->ifa_flags & IFF_LOOPBACK) != 0)) {
                struct in_addr g;
                inet_pton(AF_INET, DISC_MULTICAST_GROUP, &g);
                set_v4(&out[n], g.s_addr, the_port(o));
                out[n].route = DISC_ROUTE_MULTICAST;
                out[n].if_addr = local;
                snprintf(out[n].ifname, sizeof out[n].ifname, "%s", i->ifa_name);
                n++;
            }
        }
        freeifaddrs(ifs);
    }
    if ((routes & DISC_ROUTE_PEERS) != 0) {
        for (int p = 0; p < o->n_peers && n < cap; p++) {
            if (peer_dest(o->peers[p], &out[n], err) != LARES_OK) {
                return -1;
            }
            n++;
        }
    }
    return n;
}

bool disc_send_to(int fd, const disc_dest *d, const uint8_t *buf, size_t len) {
    if (d->route == DISC_ROUTE_MULTICAST) {
        struct in_addr ifa = {.s_addr = d->if_addr};
        if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifa, sizeof ifa) != 0) {
            return false;
        }
    }
    return sendto(fd, buf, len, 0, (const struct sockaddr *)&d->addr, d->addr_len) ==
           (ssize_t)len;
}
