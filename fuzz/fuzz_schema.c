/*
 * libFuzzer target: schema -> automaton (src/server/schema.c,
 * json_machine.c). The input is a JSON schema, a NUL byte, then bytes that
 * steer a walk through the automaton (each picks one of the bytes it allows
 * at that step). A schema must compile or give a 400/500; a compiled one
 * must lead every walk, completed the shortest way, to a text that parses as
 * JSON and validates against the schema, in exactly the bytes
 * server_jm_min_finish promised.
 */
#include "core/core.h"
#include "server/schema.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t schema_len = nul ? (size_t)(nul - data) : size;
    json_t *j = json_loadb((const char *)data, schema_len, JSON_DECODE_ANY, NULL);
    if (j == NULL) {
        return 0;
    }
    server_error e;
    server_schema *s = server_schema_compile(j, "schema", &e);
    json_decref(j);
    if (s == NULL) {
        if (e.status != 400 && e.status != 500) {
            __builtin_trap();
        }
        return 0;
    }
    jm_state st;
    server_jm_init(s, &st);
    static char out[1 << 16];
    size_t n = 0;
    const uint8_t *steer = nul ? nul + 1 : data + size, *end = data + size;
    for (; steer < end && !st.done && n < sizeof out / 2; steer++) {
        uint8_t allowed[256];
        const int na = server_jm_allowed(s, &st, allowed);
        if (na == 0) {
            break;
        }
        const uint8_t b = allowed[*steer % na];
        server_jm_feed(s, &st, b);
        out[n++] = (char)b;
    }
    const size_t need = server_jm_min_finish(s, &st);
    size_t took = 0;
    int b;
    while ((b = server_jm_closing_byte(s, &st)) >= 0 && n < sizeof out) {
        server_jm_feed(s, &st, (uint8_t)b);
        out[n++] = (char)b;
        took++;
    }
    if (n < sizeof out) {
        if (took != need || !server_jm_accepting(s, &st)) {
            __builtin_trap();
        }
        json_t *v = json_loadb(out, n, JSON_DECODE_ANY, NULL);
        if (v == NULL || !server_schema_check(s, v)) {
            __builtin_trap();
        }
        json_decref(v);
    }
    server_schema_free(s);
    return 0;
}
