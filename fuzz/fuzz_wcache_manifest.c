/*
 * libFuzzer target: a worker's weight cache manifest (src/wcache/cache.c,
 * issue 19). The input is written as the manifest of a model entry, which is
 * then opened (parsed, checked against a 10000-byte model), its items set,
 * listed and closed: no input may crash, and one that opens must describe
 * items inside the file.
 */
#include "core/core.h"
#include "wcache/wcache.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char root[128];
    static uint8_t sha[WCACHE_SHA256_BYTES];
    static char manifest[512];
    if (root[0] == '\0') {
        /* a directory of its own: a name made of the pid met a stale one of
         * an earlier run killed with the same pid, whose manifest it could
         * not open */
        snprintf(root, sizeof root, "/tmp/fuzz_wcache.XXXXXX");
        if (mkdtemp(root) == NULL) {
            __builtin_trap();
        }
        wcache_sha256_of("fuzz", 4, sha);
        char hex[WCACHE_HEX_BYTES + 1];
        wcache_hex(sha, hex);
        snprintf(manifest, sizeof manifest, "%s/%s/manifest", root, hex);
        wcache *c = NULL;
        if (wcache_open(root, sha, 10000, 0, &c, NULL) != LARES_OK) {
            __builtin_trap();
        }
        wcache_close(c);
    }
    FILE *f = fopen(manifest, "wb");
    if (f == NULL) {
        __builtin_trap();
    }
    fwrite(data, 1, size, f);
    fclose(f);
    wcache *c = NULL;
    lares_error err;
    if (wcache_open(root, sha, 10000, 1 << 20, &c, &err) == LARES_OK) {
        for (uint32_t i = 0; i < wcache_n_items(c); i++) {
            if (wcache_have(c, i) > wcache_item_bytes(c, i) || wcache_item_bytes(c, i) > 10000) {
                __builtin_trap();
            }
        }
        const uint64_t off[2] = {0, 1024}, bytes[2] = {100, 3000};
        (void)wcache_set_items(c, 2, off, bytes, &err);
        (void)wcache_reserve(c, 100, NULL, &err);
        wcache_close(c);
    }
    wcache_model_info *v = NULL;
    size_t n = 0;
    if (wcache_list(root, &v, &n, &err) == LARES_OK) {
        lares_free(v);
    }
    /* the next input starts from an empty model file again */
    char file[600];
    snprintf(file, sizeof file, "%.*s/model.gguf", (int)(strrchr(manifest, '/') - manifest), manifest);
    if (truncate(file, 0) != 0) {
        return 0;
    }
    return 0;
}
