/*
 * One model's entry of the weight cache (wcache.h): the sparse model file and
 * its manifest.
 *
 * Manifest (text, one record a line, written to "manifest.new" and renamed):
 *   lares-wcache 1
 *   file_bytes N
 *   name TEXT                        (optional; the rest of the line)
 *   i ITEM OFFSET BYTES HAVE USED SHA   (SHA: 64 hex digits once verified, else "-")
 */
#define _GNU_SOURCE /* fallocate's FALLOC_FL_PUNCH_HOLE */
#include "wcache/wcache_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST_MAGIC "lares-wcache 1"
#define VERIFY_PIECE   (4u << 20)

void wcache_entry_dir(const char *dir, const uint8_t sha[WCACHE_SHA256_BYTES], char *out,
                      size_t cap) {
    char hex[WCACHE_HEX_BYTES + 1];
    wcache_hex(sha, hex);
    snprintf(out, cap, "%s/%s", dir, hex);
}

static lares_status make_dir(const char *path, lares_error *err) {
    char tmp[WCACHE_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
                return lares_fail(err, LARES_EIO, "weight cache: cannot make %s: %s", tmp,
                                  strerror(errno));
            }
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
        return lares_fail(err, LARES_EIO, "weight cache: cannot make %s: %s", tmp,
                          strerror(errno));
    }
    return LARES_OK;
}

static lares_status grow_items(wcache *c, uint32_t n, lares_error *err) {
    if (n > WCACHE_MAX_ITEMS) {
        return lares_fail(err, LARES_EFORMAT, "weight cache: %u items (at most %u)", n,
                          WCACHE_MAX_ITEMS);
    }
    if (n > c->cap) {
        wcache_item *p = lares_realloc(c->items, (size_t)n * sizeof *p);
        if (p == NULL) {
            return lares_fail(err, LARES_ENOMEM, "out of memory");
        }
        memset(p + c->cap, 0, (size_t)(n - c->cap) * sizeof *p);
        c->items = p;
        c->cap = n;
    }
    return LARES_OK;
}

static bool parse_u64(const char **s, uint64_t *out) {
    while (**s == ' ') {
        (*s)++;
    }
    if (**s < '0' || **s > '9') {
        return false;
    }
    uint64_t v = 0;
    while (**s >= '0' && **s <= '9') {
        const uint64_t d = (uint64_t)(**s - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
        (*s)++;
    }
    *out = v;
    return true;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') {
        return ch - '0';
    }
    if (ch >= 'a' && ch <= 'f') {
        return ch - 'a' + 10;
    }
    return -1;
}

/* one "i ..." line into its item */
static bool parse_item(wcache *c, const char *s, lares_error *err, const char *where) {
    uint64_t idx, off, bytes, have, used;
    if (!parse_u64(&s, &idx) || !parse_u64(&s, &off) || !parse_u64(&s, &bytes) ||
        !parse_u64(&s, &have) || !parse_u64(&s, &used) || *s != ' ') {
        lares_fail(err, LARES_EFORMAT, "%s: an item line needs 5 numbers and a hash", where);
        return false;
    }
    s++;
    if (idx >= WCACHE_MAX_ITEMS || have > bytes || off > c->file_bytes ||
        bytes > c->file_bytes - off || used > (uint64_t)INT64_MAX) {
        lares_fail(err, LARES_EFORMAT,
                   "%s: item %" PRIu64 " (%" PRIu64 " bytes at %" PRIu64 ", %" PRIu64
                   " held) does not fit a file of %" PRIu64 " bytes",
                   where, idx, bytes, off, have, c->file_bytes);
        return false;
    }
    if (grow_items(c, (uint32_t)idx + 1, err) != LARES_OK) {
        return false;
    }
    wcache_item *it = &c->items[idx];
    if (it->known) {
        lares_fail(err, LARES_EFORMAT, "%s: item %" PRIu64 " listed twice", where, idx);
        return false;
    }
    *it = (wcache_item){.known = true, .off = off, .bytes = bytes, .have = have,
                        .used = (int64_t)used};
    if (strcmp(s, "-") != 0) {
        if (strlen(s) != WCACHE_HEX_BYTES || have != bytes) {
            lares_fail(err, LARES_EFORMAT, "%s: a hash of an item not held whole, or not 64 hex "
                       "digits", where);
            return false;
        }
        for (int i = 0; i < WCACHE_SHA256_BYTES; i++) {
            const int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                lares_fail(err, LARES_EFORMAT, "%s: the hash is not 64 lower-case hex digits",
                           where);
                return false;
            }
            it->sha[i] = (uint8_t)(hi << 4 | lo);
        }
        it->done = true;
    }
    if (c->n_items < (uint32_t)idx + 1) {
        c->n_items = (uint32_t)idx + 1;
    }
    return true;
}

lares_status wcache_manifest_read(wcache *c, const char *path, lares_error *err) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        if (errno == ENOENT) {
            return LARES_OK; /* a new entry */
        }
        return lares_fail(err, LARES_EIO, "weight cache: cannot read %s: %s", path,
                          strerror(errno));
    }
    char line[512];
    int no = 0;
    lares_status st = LARES_OK;
    bool magic = false, size = false;
    while (st == LARES_OK && fgets(line, sizeof line, f) != NULL) {
        no++;
        char where[WCACHE_PATH_MAX + 32];
        snprintf(where, sizeof where, "weight cache: %s line %d", path, no);
        const size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n') {
            st = lares_fail(err, LARES_EFORMAT, "%s: cut short or longer than %zu bytes", where,
                            sizeof line - 2);
            break;
        }
        line[n - 1] = '\0';
        if (no == 1) {
            magic = strcmp(line, MANIFEST_MAGIC) == 0;
            if (!magic) {
                st = lares_fail(err, LARES_EFORMAT, "%s: not a lares weight cache manifest",
                                where);
            }
        } else if (strncmp(line, "file_bytes ", 11) == 0) {
            const char *s = line + 10;
            uint64_t v;
            if (!parse_u64(&s, &v) || *s != '\0' || v != c->file_bytes) {
                st = lares_fail(err, LARES_EFORMAT,
                                "%s: file_bytes is not the model's %" PRIu64 " bytes", where,
                                c->file_bytes);
            }
            size = true;
        } else if (strncmp(line, "name ", 5) == 0) {
            snprintf(c->name, sizeof c->name, "%.63s", line + 5);
        } else if (strncmp(line, "i ", 2) == 0 && size) {
            if (!parse_item(c, line + 1, err, where)) {
                st = err != NULL ? err->code : LARES_EFORMAT;
            }
        } else {
            st = lares_fail(err, LARES_EFORMAT, "%s: unknown record", where);
        }
    }
    if (st == LARES_OK && ferror(f)) {
        st = lares_fail(err, LARES_EIO, "weight cache: reading %s failed", path);
    }
    if (st == LARES_OK && (!magic || !size)) {
        st = lares_fail(err, LARES_EFORMAT, "weight cache: %s is incomplete (no %s)", path,
                        magic ? "file_bytes" : "header line");
    }
    fclose(f);
    return st;
}

lares_status wcache_open(const char *dir, const uint8_t model_sha[WCACHE_SHA256_BYTES],
                         uint64_t file_bytes, uint64_t limit, wcache **out, lares_error *err) {
    *out = NULL;
    if (strlen(dir) + WCACHE_HEX_BYTES + 32 >= WCACHE_PATH_MAX) {
        return lares_fail(err, LARES_EINVAL, "weight cache: the directory name is too long");
    }
    if (file_bytes == 0 || file_bytes > (uint64_t)INT64_MAX) {
        return lares_fail(err, LARES_EINVAL, "weight cache: a model of %" PRIu64 " bytes",
                          file_bytes);
    }
    wcache *c = lares_calloc(1, sizeof *c);
    if (c == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    c->fd = -1;
    c->file_bytes = file_bytes;
    c->limit = limit;
    memcpy(c->sha, model_sha, WCACHE_SHA256_BYTES);
    snprintf(c->root, sizeof c->root, "%s", dir);
    wcache_entry_dir(dir, model_sha, c->dir, sizeof c->dir);
    snprintf(c->file, sizeof c->file, "%s/model.gguf", c->dir);
    char manifest[WCACHE_PATH_MAX + 16];
    snprintf(manifest, sizeof manifest, "%s/manifest", c->dir);
    lares_status st = make_dir(c->dir, err);
    if (st == LARES_OK) {
        st = wcache_manifest_read(c, manifest, err);
    }
    if (st == LARES_OK && (c->fd = open(c->file, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        st = lares_fail(err, LARES_EIO, "weight cache: cannot open %s: %s", c->file,
                        strerror(errno));
    }
    struct stat sb;
    if (st == LARES_OK && fstat(c->fd, &sb) != 0) {
        st = lares_fail(err, LARES_EIO, "weight cache: %s: %s", c->file, strerror(errno));
    }
    if (st == LARES_OK && (uint64_t)sb.st_size != file_bytes) {
        if (c->n_items > 0 && sb.st_size != 0) {
            /* not the file the manifest describes */
            st = lares_fail(err, LARES_EFORMAT,
                            "weight cache: %s is %lld bytes, the model %" PRIu64
                            " (damaged or changed)",
                            c->file, (long long)sb.st_size, file_bytes);
        } else if (ftruncate(c->fd, (off_t)file_bytes) != 0) { /* sparse: no disk until written */
            st = lares_fail(err, LARES_EIO, "weight cache: cannot size %s to %" PRIu64 " bytes: %s",
                            c->file, file_bytes, strerror(errno));
        }
        for (uint32_t i = 0; st == LARES_OK && i < c->n_items; i++) {
            c->items[i].have = 0; /* an empty file holds nothing */
            c->items[i].done = false;
        }
    }
    if (st != LARES_OK) {
        wcache_close_nosync(c);
        return st;
    }
    *out = c;
    return LARES_OK;
}

void wcache_close_nosync(wcache *c) {
    if (c == NULL) {
        return;
    }
    if (c->fd >= 0) {
        close(c->fd);
    }
    lares_free(c->items);
    lares_free(c);
}

void wcache_close(wcache *c) {
    if (c != NULL) {
        wcache_sync(c, NULL);
    }
    wcache_close_nosync(c);
}

const char *wcache_file(const wcache *c) {
    return c->file;
}

void wcache_set_name(wcache *c, const char *name) {
    size_t j = 0;
    for (size_t i = 0; name[i] != '\0' && j + 1 < sizeof c->name; i++) {
        const unsigned char ch = (unsigned char)name[i];
        c->name[j++] = ch < 32 || ch == 127 ? ' ' : (char)ch;
    }
    c->name[j] = '\0';
}

lares_status wcache_set_items(wcache *c, uint32_t n, const uint64_t *off, const uint64_t *bytes,
                              lares_error *err) {
    for (uint32_t i = 0; i < n; i++) {
        if (off[i] > c->file_bytes || bytes[i] > c->file_bytes - off[i]) {
            return lares_fail(err, LARES_EFORMAT,
                              "weight cache: item %u (%" PRIu64 " bytes at %" PRIu64
                              ") past the model's %" PRIu64 " bytes",
                              i, bytes[i], off[i], c->file_bytes);
        }
    }
    lares_status st = grow_items(c, n, err);
    if (st != LARES_OK) {
        return st;
    }
    for (uint32_t i = 0; i < n; i++) {
        wcache_item *it = &c->items[i];
        if (it->known && (it->off != off[i] || it->bytes != bytes[i])) {
            wcache_forget(c, i);
        }
        it->known = true;
        it->off = off[i];
        it->bytes = bytes[i];
    }
    for (uint32_t i = n; i < c->n_items; i++) {
        wcache_forget(c, i);
        c->items[i].known = false;
    }
    c->n_items = n;
    c->dirty = true;
    return LARES_OK;
}

uint32_t wcache_n_items(const wcache *c) {
    return c->n_items;
}

uint64_t wcache_item_bytes(const wcache *c, uint32_t item) {
    return item < c->n_items ? c->items[item].bytes : 0;
}

uint64_t wcache_have(const wcache *c, uint32_t item) {
    return item < c->n_items ? c->items[item].have : 0;
}

bool wcache_done(const wcache *c, uint32_t item, uint8_t sha[WCACHE_SHA256_BYTES]) {
    if (item >= c->n_items || !c->items[item].done) {
        return false;
    }
    if (sha != NULL) {
        memcpy(sha, c->items[item].sha, WCACHE_SHA256_BYTES);
    }
    return true;
}

uint64_t wcache_bytes(const wcache *c) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < c->n_items; i++) {
        n += c->items[i].have;
    }
    return n;
}

lares_status wcache_write(wcache *c, uint32_t item, uint64_t off, const void *p, size_t n,
                          lares_error *err) {
    if (item >= c->n_items || !c->items[item].known) {
        return lares_fail(err, LARES_EINVAL, "weight cache: no item %u", item);
    }
    wcache_item *it = &c->items[item];
    if (off != it->have || n > it->bytes - it->have) {
        return lares_fail(err, LARES_EINVAL,
                          "weight cache: item %u: %zu bytes at %" PRIu64 ", it holds %" PRIu64
                          " of %" PRIu64,
                          item, n, off, it->have, it->bytes);
    }
    if (c->limit > 0 && wcache_bytes(c) + c->others_bytes + n > c->limit) {
        return lares_fail(err, LARES_ERANGE,
                          "weight cache: the size limit of %" PRIu64 " bytes is reached", c->limit);
    }
    const uint8_t *b = p;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = pwrite(c->fd, b + done, n - done, (off_t)(it->off + off + done));
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            const int e = w < 0 ? errno : ENOSPC;
            return lares_fail(err, LARES_EIO,
                              "weight cache: cannot write %s: %s%s", c->file, strerror(e),
                              e == ENOSPC || e == EDQUOT
                                  ? " (the cache's disk is full: give --cache a directory on "
                                    "a disk with room, or a smaller --cache-size)"
                                  : "");
        }
        done += (size_t)w;
    }
    it->have += n;
    it->done = false;
    c->dirty = true;
    return LARES_OK;
}

lares_status wcache_verify(wcache *c, uint32_t item, const uint8_t expect[WCACHE_SHA256_BYTES],
                           lares_error *err) {
    if (item >= c->n_items || c->items[item].have != c->items[item].bytes) {
        return lares_fail(err, LARES_EINVAL, "weight cache: item %u is not held whole", item);
    }
    wcache_item *it = &c->items[item];
    uint8_t *buf = lares_alloc(VERIFY_PIECE);
    wcache_sha256 *s = wcache_sha256_begin();
    if (buf == NULL || s == NULL) {
        lares_free(buf);
        if (s != NULL) {
            uint8_t junk[WCACHE_SHA256_BYTES];
            wcache_sha256_end(s, junk);
        }
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st = LARES_OK;
    for (uint64_t o = 0; o < it->bytes && st == LARES_OK;) {
        const size_t want = (size_t)LARES_MIN((uint64_t)VERIFY_PIECE, it->bytes - o);
        const ssize_t r = pread(c->fd, buf, want, (off_t)(it->off + o));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            st = lares_fail(err, LARES_EIO, "weight cache: cannot read %s: %s", c->file,
                            r < 0 ? strerror(errno) : "the file is shorter than its items");
            break;
        }
        wcache_sha256_add(s, buf, (size_t)r);
        o += (uint64_t)r;
    }
    uint8_t got[WCACHE_SHA256_BYTES];
    wcache_sha256_end(s, got);
    lares_free(buf);
    if (st != LARES_OK) {
        return st;
    }
    return wcache_accept(c, item, got, expect, err);
}

lares_status wcache_accept(wcache *c, uint32_t item, const uint8_t got[WCACHE_SHA256_BYTES],
                           const uint8_t expect[WCACHE_SHA256_BYTES], lares_error *err) {
    if (item >= c->n_items || c->items[item].have != c->items[item].bytes) {
        return lares_fail(err, LARES_EINVAL, "weight cache: item %u is not held whole", item);
    }
    wcache_item *it = &c->items[item];
    if (memcmp(got, expect, WCACHE_SHA256_BYTES) != 0) {
        char g[WCACHE_HEX_BYTES + 1], e[WCACHE_HEX_BYTES + 1];
        wcache_hex(got, g);
        wcache_hex(expect, e);
        wcache_forget(c, item);
        return lares_fail(err, LARES_EFORMAT,
                          "weight cache: item %u of %s has SHA-256 %.16s..., the head's is "
                          "%.16s... (damaged or tampered with): dropped",
                          item, c->file, g, e);
    }
    memcpy(it->sha, expect, WCACHE_SHA256_BYTES);
    it->done = true;
    it->used = (int64_t)time(NULL);
    c->dirty = true;
    return LARES_OK;
}

void wcache_forget(wcache *c, uint32_t item) {
    if (item >= c->n_items) {
        return;
    }
    wcache_item *it = &c->items[item];
#ifdef FALLOC_FL_PUNCH_HOLE
    if (it->have > 0 && c->fd >= 0) {
        (void)fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)it->off,
                        (off_t)it->have);
    }
#endif
    it->have = 0;
    it->done = false;
    c->dirty = true;
}

void wcache_touch(wcache *c, uint32_t item) {
    if (item < c->n_items) {
        c->items[item].used = (int64_t)time(NULL);
        c->dirty = true;
    }
}

lares_status wcache_sync(wcache *c, lares_error *err) {
    if (!c->dirty) {
        return LARES_OK;
    }
    char tmp[WCACHE_PATH_MAX + 16], path[WCACHE_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s/manifest.new", c->dir);
    snprintf(path, sizeof path, "%s/manifest", c->dir);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        return lares_fail(err, LARES_EIO, "weight cache: cannot write %s: %s", tmp,
                          strerror(errno));
    }
    fprintf(f, "%s\nfile_bytes %" PRIu64 "\n", MANIFEST_MAGIC, c->file_bytes);
    if (c->name[0] != '\0') {
        fprintf(f, "name %s\n", c->name);
    }
    for (uint32_t i = 0; i < c->n_items; i++) {
        const wcache_item *it = &c->items[i];
        char hex[WCACHE_HEX_BYTES + 1] = "-";
        if (it->done) {
            wcache_hex(it->sha, hex);
        }
        fprintf(f, "i %u %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 " %s\n", i, it->off,
                it->bytes, it->have, it->used, hex);
    }
    const bool bad = ferror(f) != 0;
    const int e = errno;
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        return lares_fail(err, LARES_EIO, "weight cache: cannot write %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        return lares_fail(err, LARES_EIO, "weight cache: cannot rename %s: %s", tmp,
                          strerror(errno));
    }
    c->dirty = false;
    return LARES_OK;
}
