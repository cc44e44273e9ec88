/*
 * The web page's files by URL (web.h). The page needs no API key to load
 * (it holds nothing secret); its calls to the API send the key the user
 * types in.
 */
#include "server/web.h"

#include <string.h>

const server_web_asset *server_web_find(const char *url) {
    if (strcmp(url, "/") == 0) {
        url = "/index.html";
    }
    for (size_t i = 0; i < server_web_n_assets; i++) {
        if (strcmp(url, server_web_assets[i].path) == 0) {
            return &server_web_assets[i];
        }
    }
    return NULL;
}
