/*
 * server/ring_page: the ring's state for people (ring_page.c): GET /v1/ring
 * (JSON) and GET /ring (the page that draws it).
 */
#ifndef LARES_SERVER_RING_PAGE_H
#define LARES_SERVER_RING_PAGE_H

#include "server/server_impl.h"

#include <microhttpd.h>

enum MHD_Result server_ring_json(server *sv, struct MHD_Connection *c);
enum MHD_Result server_ring_page(server *sv, struct MHD_Connection *c);

/* A reply of n bytes of content type ctype (http.c; copies s). */
enum MHD_Result server_send_text(server *sv, struct MHD_Connection *c, int status,
                                 const char *ctype, const char *s, size_t n);

#endif /* LARES_SERVER_RING_PAGE_H */
