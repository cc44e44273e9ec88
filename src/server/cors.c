/*
 * CORS for browser clients (--cors ORIGIN[,ORIGIN...] or --cors '*'). A page
 * from another origin may call the API only when the reply names its origin
 * in Access-Control-Allow-Origin; a request with an Authorization or a JSON
 * Content-Type header is first "preflighted" with OPTIONS, which must list
 * the method and those headers (Fetch standard, section 3.2, "CORS protocol").
 * Authorization is never covered by a wildcard there, so the preflight echoes
 * the headers the browser asks for. Preflights need no API key: browsers
 * never send credentials with them.
 */
#include "server/cors.h"

#include "core/core.h"

#include <strings.h>

#define PREFLIGHT_MAX_AGE_S "600"

lares_status server_cors_check(const char *origins, lares_error *err) {
    if (strcmp(origins, "*") == 0) {
        return LARES_OK;
    }
    const char *p = origins;
    for (;;) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        const bool scheme =
            (n > 7 && strncmp(p, "http://", 7) == 0) || (n > 8 && strncmp(p, "https://", 8) == 0);
        bool clean = true;
        for (size_t i = 0; i < n; i++) {
            clean = clean && p[i] > ' ' && p[i] < 127 && p[i] != '*';
        }
        if (!scheme || !clean || p[n - 1] == '/') {
            return lares_fail(err, LARES_EINVAL,
                              "--cors: '%.*s' is not an origin (scheme://host[:port], no path; "
                              "or '*' alone for any)",
                              (int)LARES_MIN(n, 200), p);
        }
        if (end == NULL) {
            return LARES_OK;
        }
        p = end + 1;
    }
}

/* The request's Origin when --cors allows it, else NULL. */
static const char *allowed_origin(const server *sv, struct MHD_Connection *c) {
    if (sv->cors == NULL) {
        return NULL;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin == NULL || origin[0] == '\0') {
        return NULL;
    }
    if (strcmp(sv->cors, "*") == 0) {
        return origin;
    }
    const size_t n = strlen(origin);
    for (const char *p = sv->cors;;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncasecmp(p, origin, n) == 0) {
            return origin;
        }
        if (end == NULL) {
            return NULL;
        }
        p = end + 1;
    }
}

void server_cors_headers(const server *sv, struct MHD_Connection *c, struct MHD_Response *r) {
    const char *origin = allowed_origin(sv, c);
    if (origin == NULL) {
        return;
    }
    const bool any = strcmp(sv->cors, "*") == 0;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", any ? "*" : origin);
    if (!any) {
        MHD_add_response_header(r, "Vary", "Origin");
    }
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate");
}

enum MHD_Result server_cors_preflight(server *sv, struct MHD_Connection *c, const char *url) {
    const char *origin = allowed_origin(sv, c);
    if (origin == NULL) {
        const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
        server_error e;
        server_fail(&e, 403, "invalid_request_error", "cors_origin_not_allowed", NULL,
                    "origin '%.200s' may not call this server (see --cors); %.200s",
                    o ? o : "(none)", url);
        json_t *j = server_error_json(&e);
        char *s = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (s == NULL) {
            return MHD_NO;
        }
        struct MHD_Response *r =
            MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_COPY);
        free(s);
        if (r == NULL) {
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        enum MHD_Result ok = MHD_queue_response(c, 403, r);
        MHD_destroy_response(r);
        server_count_response(sv, 403);
        return ok;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        return MHD_NO;
    }
    server_cors_headers(sv, c, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const char *want =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            want != NULL && want[0] != '\0' ? want : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", PREFLIGHT_MAX_AGE_S);
    enum MHD_Result ok = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    server_count_response(sv, 204);
    return ok;
}
