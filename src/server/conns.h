/*
 * server/conns: the libmicrohttpd side of the connection guard (conns.c),
 * for the daemon's start in http.c. Everything else of the guard is in
 * server_impl.h.
 */
#ifndef LARES_SERVER_CONNS_H
#define LARES_SERVER_CONNS_H

#include "server/server_impl.h"

#include <microhttpd.h>

/* MHD_OPTION_NOTIFY_CONNECTION with the server as closure: a connection
 * starts (gets a slot, maybe evicting another) or is closed (frees it). */
void server_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                         enum MHD_ConnectionNotificationCode toe);

#endif /* LARES_SERVER_CONNS_H */
