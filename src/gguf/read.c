/*
 * The GGUF reader (GGUF specification, ggml/docs/gguf.md of the ggml project).
 *
 * The whole file is mapped read-only; parsing walks a byte cursor over the
 * mapping, and every length, count, offset and size is bounded by the bytes
 * that remain before anything is sized from it. Values stay in the mapping;
 * keys and tensor names are copied into one owned arena so callers get
 * NUL-terminated strings.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct kv_entry {
    size_t key_off;       /* into the arena during parsing */
    const char *key;      /* arena pointer, set after parsing */
    uint32_t type;
    const uint8_t *value; /* scalar value bytes in the mapping */
    gguf_str str;         /* GGUF_VT_STRING */
    gguf_arr arr;         /* GGUF_VT_ARRAY; arr.strs owned */
} kv_entry;

/* Open-addressing set of names -> index, sized to a power of two >= 2n. */
typedef struct name_index {
    uint32_t *slots; /* owned; index + 1, 0 = empty */
    uint64_t mask;
} name_index;

struct gguf_file {
    char *path;           /* owned */
    int fd;               /* owned; -1 for a memory file */
    int guard;            /* the mapping's guard slot (guard.c); -1 for none */
    const uint8_t *base;  /* the mapping (owned when fd >= 0), or the caller's copy */
    bool in_memory;       /* base is the caller's buffer the file was read into */
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t header_bytes;
    uint64_t data_offset;
    uint64_t data_bytes;
    uint64_t n_kv;
    kv_entry *kv;         /* owned */
    uint64_t n_tensors;
    gguf_tensor *tensors; /* owned */
    size_t *name_offs;    /* owned; arena offsets of tensor names while parsing */
    char *arena;          /* owned; keys and tensor names */
    size_t arena_used;
    size_t arena_cap;
    name_index kv_index;
    name_index tensor_index;
};

/* ---- the byte cursor ---- */

typedef struct cursor {
    const gguf_file *f;
    uint64_t pos;
    lares_error *err;
} cursor;

static uint64_t left(const cursor *c) {
    return c->f->size - c->pos;
}

static lares_status need(cursor *c, uint64_t n, const char *what) {
    if (n > left(c)) {
        return lares_fail(c->err, LARES_EFORMAT,
                          "%s: truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64
                          " but the file has %" PRIu64 " left",
                          c->f->path, what, n, c->pos, left(c));
    }
    return LARES_OK;
}

static lares_status rd_u32(cursor *c, uint32_t *v, const char *what) {
    lares_status st = need(c, 4, what);
    if (st == LARES_OK) {
        *v = rd_u32le(c->f->base + c->pos);
        c->pos += 4;
    }
    return st;
}

static lares_status rd_u64(cursor *c, uint64_t *v, const char *what) {
    lares_status st = need(c, 8, what);
    if (st == LARES_OK) {
        *v = rd_u64le(c->f->base + c->pos);
        c->pos += 8;
    }
    return st;
}

/* A GGUF string: u64 length then bytes. `max` bounds the length. */
static lares_status rd_str(cursor *c, gguf_str *s, uint64_t max, const char *what) {
    uint64_t at = c->pos;
    uint64_t len;
    lares_status st = rd_u64(c, &len, what);
    if (st != LARES_OK) {
        return st;
    }
    if (len > max) {
        return lares_fail(c->err, LARES_EFORMAT,
                          "%s: %s at offset %" PRIu64 " is %" PRIu64 " bytes long (limit %" PRIu64
                          ")",
                          c->f->path, what, at, len, max);
    }
    if ((st = need(c, len, what)) != LARES_OK) {
        return st;
    }
    s->ptr = (const char *)c->f->base + c->pos;
    s->len = len;
    c->pos += len;
    return LARES_OK;
}

/* ---- the arena of keys and names ---- */

static lares_status arena_put(gguf_file *f, const gguf_str *s, size_t *off, lares_error *err) {
    size_t need_bytes;
    if (!lares_add_size(f->arena_used, (size_t)s->len + 1, &need_bytes)) {
        return lares_fail(err, LARES_ENOMEM, "%s: names too large", f->path);
    }
    if (need_bytes > f->arena_cap) {
        size_t cap = f->arena_cap ? f->arena_cap : 4096;
        while (cap < need_bytes) {
            if (!lares_mul_size(cap, 2, &cap)) {
                return lares_fail(err, LARES_ENOMEM, "%s: names too large", f->path);
            }
        }
        char *a = lares_realloc(f->arena, cap);
        if (a == NULL) {
            return lares_fail(err, LARES_ENOMEM, "%s: out of memory for %zu bytes of names",
                              f->path, cap);
        }
        f->arena = a;
        f->arena_cap = cap;
    }
    memcpy(f->arena + f->arena_used, s->ptr, (size_t)s->len);
    f->arena[f->arena_used + s->len] = '\0';
    *off = f->arena_used;
    f->arena_used = need_bytes;
    return LARES_OK;
}

/* ---- name index ---- */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603u;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    }
    return h;
}

static lares_status index_build(name_index *ix, uint64_t n, const char *(*name_of)(const gguf_file *, uint64_t),
                                const gguf_file *f, const char *what, lares_error *err) {
    uint64_t cap = 16;
    while (cap < 2 * n) {
        cap *= 2;
    }
    ix->slots = lares_calloc((size_t)cap, sizeof *ix->slots);
    if (ix->slots == NULL) {
        return lares_fail(err, LARES_ENOMEM, "%s: out of memory indexing %" PRIu64 " %ss",
                          f->path, n, what);
    }
    ix->mask = cap - 1;
    for (uint64_t i = 0; i < n; i++) {
        const char *name = name_of(f, i);
        uint64_t h = fnv1a(name) & ix->mask;
        while (ix->slots[h] != 0) {
            if (strcmp(name_of(f, ix->slots[h] - 1), name) == 0) {
                return lares_fail(err, LARES_EFORMAT, "%s: duplicate %s '%s'", f->path, what,
                                  name);
            }
            h = (h + 1) & ix->mask;
        }
        ix->slots[h] = (uint32_t)(i + 1);
    }
    return LARES_OK;
}

static int64_t index_find(const name_index *ix, const char *name,
                          const char *(*name_of)(const gguf_file *, uint64_t), const gguf_file *f) {
    if (ix->slots == NULL) {
        return -1;
    }
    uint64_t h = fnv1a(name) & ix->mask;
    while (ix->slots[h] != 0) {
        uint64_t i = ix->slots[h] - 1;
        if (strcmp(name_of(f, i), name) == 0) {
            return (int64_t)i;
        }
        h = (h + 1) & ix->mask;
    }
    return -1;
}

static const char *kv_name(const gguf_file *f, uint64_t i) {
    return f->kv[i].key;
}

static const char *tensor_name(const gguf_file *f, uint64_t i) {
    return f->tensors[i].name;
}

/* ---- metadata values ---- */

static lares_status parse_array(cursor *c, const char *key, gguf_arr *a) {
    const gguf_file *f = c->f;
    uint32_t et;
    lares_status st = rd_u32(c, &et, "array element type");
    if (st != LARES_OK) {
        return st;
    }
    if (et == GGUF_VT_ARRAY) {
        return lares_fail(c->err, LARES_EUNSUPPORTED,
                          "%s: key '%s' holds an array of arrays, which lares does not read",
                          f->path, key);
    }
    if (et >= GGUF_VT_COUNT) {
        return lares_fail(c->err, LARES_EFORMAT,
                          "%s: key '%s': unknown array element type %" PRIu32 " at offset %" PRIu64,
                          f->path, key, et, c->pos - 4);
    }
    uint64_t n;
    if ((st = rd_u64(c, &n, "array length")) != LARES_OK) {
        return st;
    }
    a->type = et;
    a->n = n;
    if (et == GGUF_VT_STRING) {
        /* every string takes at least its 8-byte length */
        if (n > left(c) / 8) {
            return lares_fail(c->err, LARES_EFORMAT,
                              "%s: key '%s': %" PRIu64 " strings cannot fit in the %" PRIu64
                              " bytes left",
                              f->path, key, n, left(c));
        }
        gguf_str *strs = NULL;
        if (n > 0) {
            strs = lares_alloc_array((size_t)n, sizeof *strs);
            if (strs == NULL) {
                return lares_fail(c->err, LARES_ENOMEM, "%s: key '%s': out of memory for %" PRIu64
                                  " strings", f->path, key, n);
            }
        }
        a->strs = strs; /* owned by the entry from here on, freed with the file */
        for (uint64_t i = 0; i < n; i++) {
            if ((st = rd_str(c, &strs[i], UINT64_MAX, "array string")) != LARES_OK) {
                lares_error_prefix(c->err, "key '%s' element %" PRIu64 ": ", key, i);
                return st;
            }
        }
        return LARES_OK;
    }
    uint64_t bytes;
    if (!lares_mul_u64(n, gguf_vtype_bytes(et), &bytes) || bytes > left(c)) {
        return lares_fail(c->err, LARES_EFORMAT,
                          "%s: key '%s': array of %" PRIu64 " %s overruns the file at offset %" PRIu64,
                          f->path, key, n, gguf_vtype_name(et), c->pos);
    }
    a->data = f->base + c->pos;
    c->pos += bytes;
    return LARES_OK;
}

static lares_status parse_kv(cursor *c, gguf_file *f, kv_entry *e) {
    uint64_t at = c->pos;
    gguf_str key;
    lares_status st = rd_str(c, &key, GGUF_MAX_KEY_BYTES, "metadata key");
    if (st != LARES_OK) {
        return st;
    }
    if (key.len == 0 || memchr(key.ptr, '\0', (size_t)key.len) != NULL) {
        return lares_fail(c->err, LARES_EFORMAT,
                          "%s: metadata key at offset %" PRIu64 " is empty or holds a NUL byte",
                          f->path, at);
    }
    if ((st = arena_put(f, &key, &e->key_off, c->err)) != LARES_OK) {
        return st;
    }
    const char *k = f->arena + e->key_off; /* valid until the next arena_put */
    if ((st = rd_u32(c, &e->type, "value type")) != LARES_OK) {
        return st;
    }
    if (e->type >= GGUF_VT_COUNT) {
        return lares_fail(c->err, LARES_EFORMAT,
                          "%s: key '%s' has unknown value type %" PRIu32 " at offset %" PRIu64,
                          f->path, k, e->type, c->pos - 4);
    }
    if (e->type == GGUF_VT_STRING) {
        return rd_str(c, &e->str, UINT64_MAX, "string value");
    }
    if (e->type == GGUF_VT_ARRAY) {
        char keycopy[128];
        snprintf(keycopy, sizeof keycopy, "%s", k);
        return parse_array(c, keycopy, &e->arr);
    }
    uint32_t nb = gguf_vtype_bytes(e->type);
    if ((st = need(c, nb, "scalar value")) != LARES_OK) {
        return st;
    }
    e->value = f->base + c->pos;
    c->pos += nb;
    return LARES_OK;
}

/* ---- tensors ---- */

static lares_status parse_tensor_info(cursor *c, gguf_file *f, uint64_t idx) {
    gguf_tensor *t = &f->tensors[idx];
    uint64_t at = c->pos;
    gguf_str name;
    lares_status st = rd_str(c, &name, GGUF_MAX_NAME_BYTES, "tensor name");
    if (st != LARES_OK) {
        return st;
    }
    if (name.len == 0 || memchr(name.ptr, '\0', (size_t)name.len) != NULL) {
        return lares_fail(c->err, LARES_EFORMAT,
                          "%s: tensor %" PRIu64 " at offset %" PRIu64
                          " has an empty name or one holding a NUL byte",
                          f->path, idx, at);
    }
    if ((st = arena_put(f, &name, &f->name_offs[idx], c->err)) != LARES_OK) {
        return st;
    }
    char nm[GGUF_MAX_NAME_BYTES + 1];
    memcpy(nm, name.ptr, (size_t)name.len);
    nm[name.len] = '\0';

    if ((st = rd_u32(c, &t->n_dims, "tensor dimension count")) != LARES_OK) {
        return st;
    }
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
        return lares_fail(c->err, LARES_EFORMAT, "%s: tensor '%s' has %" PRIu32
                          " dimensions (1 to %d allowed)", f->path, nm, t->n_dims, GGUF_MAX_DIMS);
    }
    int64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if (d < t->n_dims && (st = rd_u64(c, &v, "tensor dimension")) != LARES_OK) {
            return st;
        }
        if (v > (uint64_t)INT64_MAX || !lares_mul_i64(nel, (int64_t)v, &nel)) {
            return lares_fail(c->err, LARES_EFORMAT,
                              "%s: tensor '%s': dimension %" PRIu32 " (%" PRIu64
                              ") makes the element count overflow",
                              f->path, nm, d, v);
        }
        t->ne[d] = (int64_t)v;
    }
    uint32_t type;
    if ((st = rd_u32(c, &type, "tensor type")) != LARES_OK) {
        return st;
    }
    const gguf_type_info *ti = gguf_type_info_of(type);
    if (ti == NULL) {
        return lares_fail(c->err, LARES_EFORMAT, "%s: tensor '%s' has unknown tensor type %" PRIu32,
                          f->path, nm, type);
    }
    t->type = type;
    if (t->ne[0] % ti->blck_elems != 0) {
        return lares_fail(c->err, LARES_EFORMAT,
                          "%s: tensor '%s': row of %" PRId64 " elements is not a multiple of the %s "
                          "block (%" PRIu32 ")",
                          f->path, nm, t->ne[0], ti->name, ti->blck_elems);
    }
    uint64_t nbytes;
    if (!lares_mul_u64((uint64_t)nel / ti->blck_elems, ti->blck_bytes, &nbytes)) {
        return lares_fail(c->err, LARES_EFORMAT, "%s: tensor '%s': size overflows", f->path, nm);
    }
    t->nbytes = nbytes;
    return rd_u64(c, &t->offset, "tensor offset");
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a;
    const gguf_tensor *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static lares_status place_tensors(gguf_file *f, lares_error *err) {
    if (f->n_tensors == 0) {
        return LARES_OK;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t end;
        if (t->offset % f->alignment != 0) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: tensor '%s' offset %" PRIu64 " is not a multiple of the "
                              "alignment %" PRIu64,
                              f->path, t->name, t->offset, f->alignment);
        }
        if (!lares_add_u64(t->offset, t->nbytes, &end) || end > f->data_bytes) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: tensor '%s' at offset %" PRIu64 " with %" PRIu64
                              " bytes overruns the %" PRIu64 " data bytes (truncated file?)",
                              f->path, t->name, t->offset, t->nbytes, f->data_bytes);
        }
        t->data = f->base + f->data_offset + t->offset;
    }
    /* overlapping tensors mean a corrupt directory */
    const gguf_tensor **order = lares_alloc_array((size_t)f->n_tensors, sizeof *order);
    if (order == NULL) {
        return lares_fail(err, LARES_ENOMEM, "%s: out of memory", f->path);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        order[i] = &f->tensors[i];
    }
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_by_offset);
    lares_status st = LARES_OK;
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset) {
            st = lares_fail(err, LARES_EFORMAT, "%s: tensors '%s' and '%s' overlap", f->path,
                            order[i - 1]->name, order[i]->name);
            break;
        }
    }
    lares_free(order);
    return st;
}

/* ---- the file ---- */

static lares_status parse(gguf_file *f, lares_error *err) {
    cursor c = {.f = f, .pos = 0, .err = err};
    if (f->size < 24) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: truncated: the file is %" PRIu64 " bytes, a GGUF header needs 24",
                          f->path, f->size);
    }
    uint32_t magic = rd_u32le(f->base);
    if (magic != GGUF_MAGIC) {
        return lares_fail(err, LARES_EFORMAT, "%s: not a GGUF file (magic 0x%08" PRIx32 ")",
                          f->path, magic);
    }
    c.pos = 4;
    (void)rd_u32(&c, &f->version, "version");
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xffff) == 0 && f->version != 0) {
            return lares_fail(err, LARES_EUNSUPPORTED,
                              "%s: big-endian GGUF files are not supported", f->path);
        }
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "%s: GGUF version %" PRIu32 " is not supported (2 and 3 are)", f->path,
                          f->version);
    }
    (void)rd_u64(&c, &f->n_tensors, "tensor count");
    (void)rd_u64(&c, &f->n_kv, "metadata count");
    /* a key-value pair takes at least 13 bytes, a tensor entry at least 29 */
    if (f->n_kv > left(&c) / 13) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: %" PRIu64 " metadata entries cannot fit in a %" PRIu64 "-byte file",
                          f->path, f->n_kv, f->size);
    }
    if (f->n_tensors > left(&c) / 29 || f->n_tensors > UINT32_MAX - 1) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: %" PRIu64 " tensors cannot fit in a %" PRIu64 "-byte file", f->path,
                          f->n_tensors, f->size);
    }
    if (f->n_kv > 0 && (f->kv = lares_calloc((size_t)f->n_kv, sizeof *f->kv)) == NULL) {
        return lares_fail(err, LARES_ENOMEM, "%s: out of memory", f->path);
    }
    lares_status st;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if ((st = parse_kv(&c, f, &f->kv[i])) != LARES_OK) {
            return st;
        }
    }
    if (f->n_tensors > 0) {
        f->tensors = lares_calloc((size_t)f->n_tensors, sizeof *f->tensors);
        f->name_offs = lares_calloc((size_t)f->n_tensors, sizeof *f->name_offs);
        if (f->tensors == NULL || f->name_offs == NULL) {
            return lares_fail(err, LARES_ENOMEM, "%s: out of memory for %" PRIu64 " tensors",
                              f->path, f->n_tensors);
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if ((st = parse_tensor_info(&c, f, i)) != LARES_OK) {
            return st;
        }
    }
    /* the arena no longer moves: hand out pointers */
    for (uint64_t i = 0; i < f->n_kv; i++) {
        f->kv[i].key = f->arena + f->kv[i].key_off;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        f->tensors[i].name = f->arena + f->name_offs[i];
    }
    if ((st = index_build(&f->kv_index, f->n_kv, kv_name, f, "metadata key", err)) != LARES_OK) {
        return st;
    }
    if ((st = index_build(&f->tensor_index, f->n_tensors, tensor_name, f, "tensor name", err)) !=
        LARES_OK) {
        return st;
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = gguf_find_kv(f, "general.alignment");
    if (ai >= 0) {
        uint64_t a;
        if (gguf_kv_u64(f, (uint64_t)ai, &a, err) != LARES_OK || !lares_is_pow2(a) ||
            a > (1u << 20)) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: general.alignment must be a power of two up to 1 MiB", f->path);
        }
        f->alignment = a;
    }
    f->header_bytes = c.pos;
    f->data_offset = lares_align_up_u64(c.pos, f->alignment);
    f->data_bytes = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    return place_tensors(f, err);
}

static gguf_file *file_new(const char *name) {
    gguf_file *f = lares_calloc(1, sizeof *f);
    if (f == NULL) {
        return NULL;
    }
    f->fd = -1;
    f->guard = -1;
    f->path = lares_strdup(name);
    if (f->path == NULL) {
        lares_free(f);
        return NULL;
    }
    return f;
}

lares_status gguf_open_memory(const void *buf, size_t len, const char *name, gguf_file **out,
                              lares_error *err) {
    gguf_file *f = file_new(name ? name : "<memory>");
    if (f == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    f->base = buf;
    f->size = len;
    lares_status st = parse(f, err);
    if (st != LARES_OK) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return LARES_OK;
}

/* The whole file read into the caller's buffer instead of mapped. Its pages
 * in the OS cache stay the OS's to drop (a next run may map them again). */
static lares_status read_into(gguf_file *f, void *into, uint64_t into_bytes, lares_error *err) {
    if (f->size > into_bytes) {
        return lares_fail(err, LARES_EINVAL, "%s: %" PRIu64 " bytes do not fit a buffer of %" PRIu64,
                          f->path, f->size, into_bytes);
    }
    uint8_t *to = into;
    for (uint64_t at = 0; at < f->size;) {
        const size_t want = (size_t)LARES_MIN(f->size - at, (uint64_t)1 << 30);
        const ssize_t got = pread(f->fd, to + at, want, (off_t)at);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            return lares_fail(err, LARES_EIO, "%s: reading at %" PRIu64 ": %s", f->path, at,
                              got < 0 ? strerror(errno) : "the file ended early");
        }
        at += (uint64_t)got;
    }
    f->base = to;
    f->in_memory = true;
    return LARES_OK;
}

/* The file mapped, under the guard that turns a failed page into zeros */
static lares_status map_file(gguf_file *f, const gguf_open_opts *opts, lares_error *err) {
    int flags = MAP_SHARED;
#ifdef MAP_POPULATE
    if (opts != NULL && opts->populate) {
        flags |= MAP_POPULATE;
    }
#else
    (void)opts;
#endif
    void *map = mmap(NULL, (size_t)f->size, PROT_READ, flags, f->fd, 0);
    if (map == MAP_FAILED) {
        return lares_fail(err, LARES_EIO, "%s: cannot map %" PRIu64 " bytes: %s", f->path,
                          f->size, strerror(errno));
    }
    f->base = map;
    f->guard = gguf_guard_add(map, f->size);
    return LARES_OK;
}

lares_status gguf_open(const char *path, const gguf_open_opts *opts, gguf_file **out,
                       lares_error *err) {
    gguf_file *f = file_new(path);
    if (f == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        st = lares_fail(err, errno == ENOENT ? LARES_ENOTFOUND : LARES_EIO, "%s: %s", path,
                        strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) {
        st = lares_fail(err, LARES_EIO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = lares_fail(err, LARES_EINVAL, "%s: not a regular file", path);
        goto fail;
    }
    if (sb.st_size < 24) {
        st = lares_fail(err, LARES_EFORMAT,
                        "%s: truncated: the file is %lld bytes, a GGUF header needs 24", path,
                        (long long)sb.st_size);
        goto fail;
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size > SIZE_MAX) {
        st = lares_fail(err, LARES_EUNSUPPORTED, "%s: too large to map on this system", path);
        goto fail;
    }
    st = opts != NULL && opts->into != NULL ? read_into(f, opts->into, opts->into_bytes, err)
                                            : map_file(f, opts, err);
    if (st != LARES_OK || (st = parse(f, err)) != LARES_OK) {
        goto fail;
    }
    if ((st = gguf_check(f, err)) != LARES_OK) { /* shrank while it was read */
        goto fail;
    }
    *out = f;
    return LARES_OK;
fail:
    gguf_close(f);
    return st;
}

void gguf_close(gguf_file *f) {
    if (f == NULL) {
        return;
    }
    if (f->fd >= 0) {
        gguf_guard_remove(f->guard);
        if (f->base != NULL && !f->in_memory) {
            munmap((void *)f->base, (size_t)f->size);
        }
        close(f->fd);
    }
    for (uint64_t i = 0; f->kv != NULL && i < f->n_kv; i++) {
        lares_free((void *)f->kv[i].arr.strs);
    }
    lares_free(f->kv);
    lares_free(f->tensors);
    lares_free(f->name_offs);
    lares_free(f->arena);
    lares_free(f->kv_index.slots);
    lares_free(f->tensor_index.slots);
    lares_free(f->path);
    lares_free(f);
}

/* ---- accessors ---- */

const char *gguf_path(const gguf_file *f) {
    return f->path;
}
uint32_t gguf_version(const gguf_file *f) {
    return f->version;
}
uint64_t gguf_file_bytes(const gguf_file *f) {
    return f->size;
}
uint64_t gguf_alignment(const gguf_file *f) {
    return f->alignment;
}
uint64_t gguf_data_offset(const gguf_file *f) {
    return f->data_offset;
}
uint64_t gguf_header_bytes(const gguf_file *f) {
    return f->header_bytes;
}
const uint8_t *gguf_base(const gguf_file *f) {
    return f->base;
}
bool gguf_in_memory(const gguf_file *f) {
    return f->in_memory;
}
bool gguf_damaged(const gguf_file *f) {
    return f != NULL && gguf_guard_faults(f->guard) > 0;
}
lares_status gguf_check(const gguf_file *f, lares_error *err) {
    if (!gguf_damaged(f)) {
        return LARES_OK;
    }
    return lares_fail(err, LARES_EIO,
                      "%s: the file could not be read while in use (it shrank or the disk "
                      "failed); what was computed from it is thrown away",
                      f->path);
}
int gguf_fd(const gguf_file *f) {
    return f->fd;
}
uint64_t gguf_n_kv(const gguf_file *f) {
    return f->n_kv;
}
const char *gguf_kv_key(const gguf_file *f, uint64_t i) {
    return i < f->n_kv ? f->kv[i].key : NULL;
}
uint32_t gguf_kv_type(const gguf_file *f, uint64_t i) {
    return i < f->n_kv ? f->kv[i].type : GGUF_VT_COUNT;
}
int64_t gguf_find_kv(const gguf_file *f, const char *key) {
    return index_find(&f->kv_index, key, kv_name, f);
}
bool gguf_has(const gguf_file *f, const char *key) {
    return gguf_find_kv(f, key) >= 0;
}
uint64_t gguf_n_tensors(const gguf_file *f) {
    return f->n_tensors;
}
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = index_find(&f->tensor_index, name, tensor_name, f);
    return i < 0 ? NULL : &f->tensors[i];
}
int64_t gguf_tensor_nelements(const gguf_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

uint64_t gguf_header_hash(const gguf_file *f) {
    uint64_t h = 1469598103934665603u;
    for (uint64_t i = 0; i < f->header_bytes; i++) {
        h = (h ^ f->base[i]) * 1099511628211u;
    }
    return h;
}

/* Reads a scalar integer of any integer type as a signed 128-bit-safe pair. */
static bool scalar_int(const kv_entry *e, int64_t *s, uint64_t *u, bool *is_unsigned) {
    const uint8_t *p = e->value;
    *is_unsigned = true;
    switch (e->type) {
    case GGUF_VT_U8:
    case GGUF_VT_BOOL:
        *u = p[0];
        return true;
    case GGUF_VT_U16:
        *u = rd_u16le(p);
        return true;
    case GGUF_VT_U32:
        *u = rd_u32le(p);
        return true;
    case GGUF_VT_U64:
        *u = rd_u64le(p);
        return true;
    case GGUF_VT_I8:
        *s = (int8_t)p[0];
        break;
    case GGUF_VT_I16:
        *s = (int16_t)rd_u16le(p);
        break;
    case GGUF_VT_I32:
        *s = (int32_t)rd_u32le(p);
        break;
    case GGUF_VT_I64:
        *s = (int64_t)rd_u64le(p);
        break;
    default:
        return false;
    }
    *is_unsigned = false;
    return true;
}

static lares_status type_error(const gguf_file *f, uint64_t i, const char *want, lares_error *err) {
    return lares_fail(err, LARES_EFORMAT, "%s: key '%s' is %s, expected %s", f->path, f->kv[i].key,
                      gguf_vtype_name(f->kv[i].type), want);
}

lares_status gguf_kv_u64(const gguf_file *f, uint64_t i, uint64_t *out, lares_error *err) {
    int64_t s = 0;
    uint64_t u = 0;
    bool is_u;
    if (!scalar_int(&f->kv[i], &s, &u, &is_u) || f->kv[i].type == GGUF_VT_BOOL) {
        return type_error(f, i, "an unsigned integer", err);
    }
    if (!is_u) {
        if (s < 0) {
            return lares_fail(err, LARES_EFORMAT, "%s: key '%s' is negative (%" PRId64 ")",
                              f->path, f->kv[i].key, s);
        }
        u = (uint64_t)s;
    }
    *out = u;
    return LARES_OK;
}

lares_status gguf_kv_i64(const gguf_file *f, uint64_t i, int64_t *out, lares_error *err) {
    int64_t s = 0;
    uint64_t u = 0;
    bool is_u;
    if (!scalar_int(&f->kv[i], &s, &u, &is_u) || f->kv[i].type == GGUF_VT_BOOL) {
        return type_error(f, i, "an integer", err);
    }
    if (is_u) {
        if (u > (uint64_t)INT64_MAX) {
            return lares_fail(err, LARES_EFORMAT, "%s: key '%s' does not fit 64 signed bits",
                              f->path, f->kv[i].key);
        }
        s = (int64_t)u;
    }
    *out = s;
    return LARES_OK;
}

lares_status gguf_kv_f64(const gguf_file *f, uint64_t i, double *out, lares_error *err) {
    const kv_entry *e = &f->kv[i];
    if (e->type == GGUF_VT_F32) {
        *out = rd_f32le(e->value);
        return LARES_OK;
    }
    if (e->type == GGUF_VT_F64) {
        *out = rd_f64le(e->value);
        return LARES_OK;
    }
    int64_t s = 0;
    uint64_t u = 0;
    bool is_u;
    if (!scalar_int(e, &s, &u, &is_u) || e->type == GGUF_VT_BOOL) {
        return type_error(f, i, "a number", err);
    }
    *out = is_u ? (double)u : (double)s;
    return LARES_OK;
}

lares_status gguf_kv_str(const gguf_file *f, uint64_t i, gguf_str *out, lares_error *err) {
    if (f->kv[i].type != GGUF_VT_STRING) {
        return type_error(f, i, "a string", err);
    }
    *out = f->kv[i].str;
    return LARES_OK;
}

lares_status gguf_kv_arr(const gguf_file *f, uint64_t i, gguf_arr *out, lares_error *err) {
    if (f->kv[i].type != GGUF_VT_ARRAY) {
        return type_error(f, i, "an array", err);
    }
    *out = f->kv[i].arr;
    return LARES_OK;
}

bool gguf_kv_bool(const gguf_file *f, uint64_t i) {
    return f->kv[i].type == GGUF_VT_BOOL && f->kv[i].value[0] != 0;
}

static lares_status lookup(const gguf_file *f, const char *key, uint64_t *i, lares_error *err) {
    int64_t k = gguf_find_kv(f, key);
    if (k < 0) {
        return lares_fail(err, LARES_ENOTFOUND, "%s: key '%s' is missing", f->path, key);
    }
    *i = (uint64_t)k;
    return LARES_OK;
}

lares_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, lares_error *err) {
    uint64_t i = 0;
    lares_status st = lookup(f, key, &i, err);
    return st != LARES_OK ? st : gguf_kv_u64(f, i, out, err);
}

lares_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, lares_error *err) {
    uint64_t v;
    lares_status st = gguf_get_u64(f, key, &v, err);
    if (st != LARES_OK) {
        return st;
    }
    if (v > UINT32_MAX) {
        return lares_fail(err, LARES_EFORMAT, "%s: key '%s' = %" PRIu64 " does not fit 32 bits",
                          f->path, key, v);
    }
    *out = (uint32_t)v;
    return LARES_OK;
}

lares_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, lares_error *err) {
    uint64_t i = 0;
    lares_status st = lookup(f, key, &i, err);
    return st != LARES_OK ? st : gguf_kv_i64(f, i, out, err);
}

lares_status gguf_get_f32(const gguf_file *f, const char *key, float *out, lares_error *err) {
    uint64_t i = 0;
    double d;
    lares_status st = lookup(f, key, &i, err);
    if (st == LARES_OK && (st = gguf_kv_f64(f, i, &d, err)) == LARES_OK) {
        *out = (float)d;
    }
    return st;
}

lares_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, lares_error *err) {
    uint64_t i = 0;
    lares_status st = lookup(f, key, &i, err);
    if (st != LARES_OK) {
        return st;
    }
    if (f->kv[i].type != GGUF_VT_BOOL) {
        return type_error(f, i, "a bool", err);
    }
    *out = f->kv[i].value[0] != 0;
    return LARES_OK;
}

lares_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, lares_error *err) {
    uint64_t i = 0;
    lares_status st = lookup(f, key, &i, err);
    return st != LARES_OK ? st : gguf_kv_str(f, i, out, err);
}

lares_status gguf_get_arr(const gguf_file *f, const char *key, gguf_arr *out, lares_error *err) {
    uint64_t i = 0;
    lares_status st = lookup(f, key, &i, err);
    return st != LARES_OK ? st : gguf_kv_arr(f, i, out, err);
}

/* A float element read as an integer: truncated, and 0 when it has no int64
 * value (NaN, infinities, beyond +-2^63), where a plain cast is undefined
 * behaviour (found by fuzz_gguf). */
static int64_t float_to_i64(double v) {
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) {
        return 0;
    }
    return (int64_t)v;
}

int64_t gguf_arr_i64(const gguf_arr *a, uint64_t i) {
    const uint8_t *p = a->data + i * gguf_vtype_bytes(a->type);
    switch (a->type) {
    case GGUF_VT_U8:
    case GGUF_VT_BOOL:
        return p[0];
    case GGUF_VT_I8:
        return (int8_t)p[0];
    case GGUF_VT_U16:
        return rd_u16le(p);
    case GGUF_VT_I16:
        return (int16_t)rd_u16le(p);
    case GGUF_VT_U32:
        return rd_u32le(p);
    case GGUF_VT_I32:
        return (int32_t)rd_u32le(p);
    case GGUF_VT_U64:
    case GGUF_VT_I64:
        return (int64_t)rd_u64le(p);
    case GGUF_VT_F32:
        return float_to_i64(rd_f32le(p));
    case GGUF_VT_F64:
        return float_to_i64(rd_f64le(p));
    default:
        return 0;
    }
}

double gguf_arr_f64(const gguf_arr *a, uint64_t i) {
    if (a->type == GGUF_VT_F32) {
        return rd_f32le(a->data + i * 4);
    }
    if (a->type == GGUF_VT_F64) {
        return rd_f64le(a->data + i * 8);
    }
    if (a->type == GGUF_VT_U64) {
        return (double)rd_u64le(a->data + i * 8);
    }
    return (double)gguf_arr_i64(a, i);
}

gguf_str gguf_arr_str(const gguf_arr *a, uint64_t i) {
    return a->strs[i];
}
