/*
 * libFuzzer target: request bodies of the HTTP API (server/request.c), as
 * chat, completions and embeddings, as Ollama's /api/generate and /api/chat
 * (server/ollama.c) and Anthropic's /v1/messages (server/anthropic.c), and
 * the stop-string search over the same bytes. Any input must give a parsed
 * request or a 400-class error, never a crash, a leak or a read past the
 * body.
 */
#include "core/core.h"
#include "server/anthropic.h"
#include "server/ollama.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* parsers in turn: the three OpenAI kinds, Ollama's two, Anthropic's */
static bool parse(size_t k, const uint8_t *data, size_t size, server_request *r, server_error *e) {
    const char *body = (const char *)data;
    switch (k) {
    case 0:
        return server_request_parse(SERVER_CHAT, body, size, r, e);
    case 1:
        return server_request_parse(SERVER_COMPLETION, body, size, r, e);
    case 2:
        return server_request_parse(SERVER_EMBEDDING, body, size, r, e);
    case 3:
        return server_ollama_parse(true, body, size, r, e);
    case 4:
        return server_ollama_parse(false, body, size, r, e);
    default:
        return server_anthropic_parse(body, size, r, e);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (size_t k = 0; k < 6; k++) {
        server_request r;
        server_error e;
        if (parse(k, data, size, &r, &e)) {
            if (r.n_stop > 0) {
                size_t cut = 0, safe = 0;
                if (server_stop_find(r.stop, r.stop_len, r.n_stop, (const char *)data, size, &cut,
                                     &safe)) {
                    if (cut >= size) {
                        __builtin_trap();
                    }
                } else if (safe > size) {
                    __builtin_trap();
                }
            }
            server_request_free(&r);
        } else if (e.status != 400 && e.status != 500) {
            __builtin_trap();
        }
    }
    return 0;
}
