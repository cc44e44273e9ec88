/*
 * libFuzzer target: request bodies of the HTTP API (server/request.c), as
 * chat and as completions, and the stop-string search over the same bytes.
 * Any input must give a parsed request or a 400-class error, never a crash,
 * a leak or a read past the body.
 */
#include "core/core.h"
#include "server/server_impl.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const server_kind kinds[] = {SERVER_CHAT, SERVER_COMPLETION, SERVER_EMBEDDING};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        server_request r;
        server_error e;
        if (server_request_parse(kinds[k], (const char *)data, size, &r, &e)) {
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
