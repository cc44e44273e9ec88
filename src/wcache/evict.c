/*
 * The whole weight cache (wcache.h): listing its models, removing one, and
 * making room under the size limit, least recently used first: other models
 * whole, then the items of the open model that the caller does not need now.
 */
#include "wcache/wcache_impl.h"

#include <dirent.h>
#include <stdlib.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_entry_name(const char *s) {
    if (strlen(s) != WCACHE_HEX_BYTES) {
        return false;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
            return false;
        }
    }
    return true;
}

static bool hex_to_sha(const char *s, uint8_t sha[WCACHE_SHA256_BYTES]) {
    for (int i = 0; i < WCACHE_SHA256_BYTES; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) {
            return false;
        }
        sha[i] = (uint8_t)v;
    }
    return true;
}

/* the figures of one entry from its manifest (items = 0 when it cannot be read) */
static void entry_info(const char *root, const char *hex, wcache_model_info *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->sha_hex, sizeof out->sha_hex, "%s", hex);
    char dir[WCACHE_PATH_MAX], path[WCACHE_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/%s", root, hex);
    snprintf(path, sizeof path, "%s/manifest", dir);
    /* file_bytes is not known before reading: read it from the manifest's second line */
    FILE *f = fopen(path, "r");
    unsigned long long fb = 0;
    char line[128];
    if (f != NULL && fgets(line, sizeof line, f) != NULL && fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "file_bytes %llu", &fb) != 1) {
            fb = 0;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    wcache c = {.fd = -1, .file_bytes = fb};
    lares_error err = {0};
    if (fb == 0 || wcache_manifest_read(&c, path, &err) != LARES_OK) {
        snprintf(out->name, sizeof out->name, "(damaged)");
        struct stat sb;
        char file[WCACHE_PATH_MAX + 16];
        snprintf(file, sizeof file, "%s/model.gguf", dir);
        if (stat(file, &sb) == 0) {
            out->bytes = (uint64_t)sb.st_blocks * 512u;
            out->last_use = (int64_t)sb.st_mtime;
        }
        lares_free(c.items);
        return;
    }
    snprintf(out->name, sizeof out->name, "%s", c.name);
    out->file_bytes = fb;
    out->items = c.n_items;
    for (uint32_t i = 0; i < c.n_items; i++) {
        out->bytes += c.items[i].have;
        out->items_done += c.items[i].done ? 1 : 0;
        out->last_use = LARES_MAX(out->last_use, c.items[i].used);
    }
    lares_free(c.items);
}

static int by_use_desc(const void *a, const void *b) {
    const wcache_model_info *x = a, *y = b;
    return x->last_use < y->last_use ? 1 : x->last_use > y->last_use ? -1 : 0;
}

lares_status wcache_list(const char *dir, wcache_model_info **out, size_t *n, lares_error *err) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT) {
            return LARES_OK;
        }
        return lares_fail(err, LARES_EIO, "weight cache: cannot read %s: %s", dir,
                          strerror(errno));
    }
    wcache_model_info *v = NULL;
    size_t cap = 0, count = 0;
    lares_status st = LARES_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_entry_name(e->d_name)) {
            continue;
        }
        if (!lares_grow((void **)&v, &cap, count + 1, sizeof *v)) {
            st = lares_fail(err, LARES_ENOMEM, "out of memory");
            break;
        }
        entry_info(dir, e->d_name, &v[count++]);
    }
    closedir(d);
    if (st != LARES_OK) {
        lares_free(v);
        return st;
    }
    if (count > 1) {
        qsort(v, count, sizeof *v, by_use_desc);
    }
    *out = v;
    *n = count;
    return LARES_OK;
}

lares_status wcache_remove_model(const char *dir, const uint8_t model_sha[WCACHE_SHA256_BYTES],
                                 lares_error *err) {
    char entry[WCACHE_PATH_MAX];
    wcache_entry_dir(dir, model_sha, entry, sizeof entry);
    static const char *const files[] = {"model.gguf", "manifest", "manifest.new"};
    for (size_t i = 0; i < LARES_ARRAY_LEN(files); i++) {
        char path[WCACHE_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/%s", entry, files[i]);
        if (unlink(path) != 0 && errno != ENOENT) {
            return lares_fail(err, LARES_EIO, "weight cache: cannot remove %s: %s", path,
                              strerror(errno));
        }
    }
    if (rmdir(entry) != 0 && errno != ENOENT) {
        return lares_fail(err, LARES_EIO, "weight cache: cannot remove %s: %s", entry,
                          strerror(errno));
    }
    return LARES_OK;
}

lares_status wcache_reserve(wcache *c, uint64_t bytes, const bool *pinned, lares_error *err) {
    if (c->limit == 0) {
        return LARES_OK;
    }
    wcache_model_info *v = NULL;
    size_t n = 0;
    lares_status st = wcache_list(c->root, &v, &n, err);
    if (st != LARES_OK) {
        return st;
    }
    char self[WCACHE_HEX_BYTES + 1];
    wcache_hex(c->sha, self);
    uint64_t others = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v[i].sha_hex, self) != 0) {
            others += v[i].bytes;
        }
    }
    /* other models, least recently used (the end of the list) first */
    for (size_t i = n; i-- > 0 && wcache_bytes(c) + others + bytes > c->limit;) {
        uint8_t sha[WCACHE_SHA256_BYTES];
        if (strcmp(v[i].sha_hex, self) == 0 || !hex_to_sha(v[i].sha_hex, sha)) {
            continue;
        }
        if (wcache_remove_model(c->root, sha, err) != LARES_OK) {
            lares_free(v);
            return err != NULL ? err->code : LARES_EIO;
        }
        lares_log(LARES_LOG_INFO, "weight cache: evicted model %.16s... (%s, %" PRIu64 " bytes)",
                  v[i].sha_hex, v[i].name[0] ? v[i].name : "no name", v[i].bytes);
        others -= v[i].bytes;
    }
    lares_free(v);
    /* then this model's items not needed now, least recently used first */
    while (wcache_bytes(c) + others + bytes > c->limit) {
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 1; i < c->n_items; i++) { /* item 0, the header, always stays */
            if (c->items[i].have == 0 || (pinned != NULL && pinned[i])) {
                continue;
            }
            if (best == UINT32_MAX || c->items[i].used < c->items[best].used) {
                best = i;
            }
        }
        if (best == UINT32_MAX) {
            break;
        }
        wcache_forget(c, best);
    }
    c->others_bytes = others;
    if (wcache_bytes(c) + others + bytes > c->limit) {
        return lares_fail(err, LARES_ERANGE,
                          "weight cache: %" PRIu64 " more bytes do not fit its size limit of %" PRIu64
                          " bytes (%" PRIu64 " held that this worker needs now): give a larger "
                          "--cache-size",
                          bytes, c->limit, wcache_bytes(c) + others);
    }
    return wcache_sync(c, err);
}
