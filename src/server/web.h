/*
 * The web page at / (web/ in the source tree): its files, embedded in the
 * program at build time by cmake/embed_web.cmake, served by web.c.
 */
#ifndef LARES_SERVER_WEB_H
#define LARES_SERVER_WEB_H

#include <stddef.h>

typedef struct server_web_asset {
    const char *path;  /* "/index.html" */
    const char *ctype; /* Content-Type */
    const unsigned char *data;
    size_t len;
} server_web_asset;

extern const server_web_asset server_web_assets[];
extern const size_t server_web_n_assets;

/* The file for a URL path ("/" is /index.html); NULL when there is none. */
const server_web_asset *server_web_find(const char *url);

#endif /* LARES_SERVER_WEB_H */
