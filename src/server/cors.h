/*
 * server/cors: cross-origin requests from browsers (--cors), per the Fetch
 * standard's CORS protocol: the headers on every reply to an allowed origin,
 * and the answer to a preflight (OPTIONS with Access-Control-Request-Method).
 */
#ifndef LARES_SERVER_CORS_H
#define LARES_SERVER_CORS_H

#include "server/server_impl.h"

#include <microhttpd.h>

/* Checks the --cors value: "*" or a comma-separated list of origins
 * (scheme://host[:port]). */
lares_status server_cors_check(const char *origins, lares_error *err);
/* Adds Access-Control-Allow-Origin (and kin) to r when the request comes from
 * an allowed origin; nothing otherwise, or without --cors. */
void server_cors_headers(const server *sv, struct MHD_Connection *c, struct MHD_Response *r);
/* Answers a preflight: 204 with the allowed methods and headers, or 403 when
 * the origin is not allowed. Only with --cors. */
enum MHD_Result server_cors_preflight(server *sv, struct MHD_Connection *c, const char *url);

#endif /* LARES_SERVER_CORS_H */
