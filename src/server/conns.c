/*
 * The connection guard: slow and hostile clients must not lock others out.
 *
 * libmicrohttpd's own timeout (--idle-timeout) counts from the last byte
 * moved, so a client that sends one header byte every few seconds is never
 * cut by it, and its per-address limit does nothing against many addresses.
 * The guard adds what is missing:
 *
 * - Deadlines counted from the start of a phase, not from the last byte: a
 *   connection has --header-timeout seconds from its accept (or from the end
 *   of its previous reply, when kept alive) to send a complete request head,
 *   and --body-timeout seconds from then to send the body. A reaper thread
 *   looks every REAP_MS and shuts the socket down (shutdown(2), so the
 *   daemon's own thread sees the end and closes it the normal way).
 * - Room for new clients: when --max-connections are open, a new connection
 *   evicts the connection that has waited longest for its request head (an
 *   idle kept-alive connection or a stalled client) once that has waited at
 *   least EVICT_MIN_AGE_MS, so a burst of new connections cannot evict each
 *   other before they have had time to send anything. The reaper evicts the
 *   same way while more than --max-connections are open, so the reserve
 *   below is free again a second after a burst.
 * - A reserve: the daemon admits SERVER_CONN_RESERVE connections beyond
 *   --max-connections; while more than --max-connections are open, requests
 *   other than /health and /metrics get 503 (http.c), so monitoring still
 *   gets answers when every normal slot holds a request in progress.
 *
 * The slot of a connection is freed by the daemon's CLOSED notification,
 * which libmicrohttpd sends before it closes the descriptor; the reaper calls
 * shutdown under the same lock, so it can never reach a reused descriptor.
 */
#include "server/conns.h"

#include "core/core.h"

#include <sys/socket.h>
#include <time.h>

#define REAP_MS          200  /* how often the reaper looks at the deadlines */
#define EVICT_MIN_AGE_MS 1000 /* a connection younger than this is never evicted */

static int64_t now_ms(void) {
    return (int64_t)(lares_now_ns() / 1000000u);
}

/* Cuts a connection (lock held): the daemon's thread then sees the end. */
static void cut(server_conns *g, server_conn *k) {
    shutdown(k->fd, SHUT_RDWR);
    k->closing = true;
    g->open--;
}

/* Cuts the connection that has waited longest for a request head, if one has
 * waited EVICT_MIN_AGE_MS (lock held). */
static bool evict_oldest(server_conns *g, int64_t now) {
    server_conn *oldest = NULL;
    for (size_t i = 0; i < g->n_slots; i++) {
        server_conn *k = &g->slots[i];
        if (k->c != NULL && !k->closing && k->phase == SERVER_CONN_HEADERS &&
            now - k->since_ms >= EVICT_MIN_AGE_MS &&
            (oldest == NULL || k->since_ms < oldest->since_ms)) {
            oldest = k;
        }
    }
    if (oldest == NULL) {
        return false;
    }
    cut(g, oldest);
    g->evicted++;
    return true;
}

static void *reaper_main(void *arg) {
    server *sv = arg;
    server_conns *g = &sv->conns;
    const int64_t header_ms = (int64_t)sv->o.header_timeout_s * 1000;
    const int64_t body_ms = (int64_t)sv->o.body_timeout_s * 1000;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REAP_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        const int64_t now = now_ms();
        for (size_t i = 0; i < g->n_slots; i++) {
            server_conn *k = &g->slots[i];
            if (k->c == NULL || k->closing) {
                continue;
            }
            if (k->phase == SERVER_CONN_HEADERS && now - k->since_ms > header_ms) {
                cut(g, k);
                g->timed_out_headers++;
            } else if (k->phase == SERVER_CONN_BODY && now - k->since_ms > body_ms) {
                cut(g, k);
                g->timed_out_body++;
            }
        }
        /* give the reserve back: a burst of connections that took it and then
         * stalled would otherwise keep the daemon at its limit, where it
         * refuses new connections before the guard hears of them */
        while (g->open > (size_t)sv->o.max_connections && evict_oldest(g, now)) {
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

lares_status server_conns_start(server *sv, lares_error *err) {
    server_conns *g = &sv->conns;
    g->n_slots = (size_t)sv->o.max_connections + SERVER_CONN_RESERVE;
    if ((g->slots = lares_calloc(g->n_slots, sizeof *g->slots)) == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory for %zu connection slots", g->n_slots);
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->initialised = true;
    if (pthread_create(&g->reaper, NULL, reaper_main, sv) != 0) {
        return lares_fail(err, LARES_EIO, "cannot start the connection reaper thread");
    }
    g->reaper_started = true;
    return LARES_OK;
}

void server_conns_stop(server *sv) {
    server_conns *g = &sv->conns;
    if (!g->initialised) {
        return;
    }
    if (g->reaper_started) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->reaper, NULL);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    lares_free(g->slots);
    g->slots = NULL;
    g->initialised = false;
}

void server_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                         enum MHD_ConnectionNotificationCode toe) {
    server *sv = cls;
    server_conns *g = &sv->conns;
    pthread_mutex_lock(&g->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const int64_t now = now_ms();
        if (g->open >= (size_t)sv->o.max_connections) {
            evict_oldest(g, now); /* room for this one among the normal slots */
        }
        server_conn *k = NULL;
        for (size_t i = 0; i < g->n_slots && k == NULL; i++) {
            if (g->slots[i].c == NULL) {
                k = &g->slots[i];
            }
        }
        /* the daemon admits at most n_slots, so a slot is free; without one
         * (or without a descriptor) the connection is simply not guarded */
        if (k != NULL && ci != NULL) {
            *k = (server_conn){
                .c = c, .fd = ci->connect_fd, .phase = SERVER_CONN_HEADERS, .since_ms = now};
            g->open++;
            *socket_context = k;
        }
    } else if (*socket_context != NULL) {
        server_conn *k = *socket_context;
        if (!k->closing) {
            g->open--;
        }
        *k = (server_conn){0};
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&g->mu);
}

void server_conns_phase(server *sv, struct MHD_Connection *c, server_conn_phase phase) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    server_conn *k = ci != NULL ? ci->socket_context : NULL;
    if (k == NULL) {
        return;
    }
    server_conns *g = &sv->conns;
    pthread_mutex_lock(&g->mu);
    if (k->phase != phase) {
        k->phase = phase;
        k->since_ms = now_ms();
    }
    pthread_mutex_unlock(&g->mu);
}

bool server_conns_over_limit(server *sv) {
    server_conns *g = &sv->conns;
    pthread_mutex_lock(&g->mu);
    const bool over = g->open > (size_t)sv->o.max_connections;
    pthread_mutex_unlock(&g->mu);
    return over;
}

void server_conns_figures(server *sv, server_conn_figures *out) {
    server_conns *g = &sv->conns;
    pthread_mutex_lock(&g->mu);
    out->open = g->open;
    out->timed_out_headers = g->timed_out_headers;
    out->timed_out_body = g->timed_out_body;
    out->evicted = g->evicted;
    pthread_mutex_unlock(&g->mu);
}
