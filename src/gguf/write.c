/*
 * The GGUF writer (version 3). Metadata and the tensor directory are built in
 * memory; tensor data is either given up front or streamed in directory
 * order, so a multi-gigabyte file never needs to be held in memory. The file is
 * written as PATH.tmp and renamed into place only when complete.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct wkv {
    char *key;       /* owned */
    uint32_t type;
    uint8_t scalar[8];
    char *str;       /* owned: string value */
    uint64_t str_len;
    uint32_t arr_type;
    uint64_t arr_n;
    uint8_t *arr_data; /* owned: little-endian numeric elements */
    gguf_str *arr_strs;/* owned: views into arr_blob */
    char *arr_blob;    /* owned */
} wkv;

typedef struct wtensor {
    char *name; /* owned */
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;
    const void *data; /* borrowed */
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;
    FILE *fp;         /* open between begin and finish */
    char *path;       /* owned */
    char *tmp_path;   /* owned */
    uint64_t next_data; /* index of the next tensor to stream */
    uint64_t written;   /* bytes written into the data section */
};

lares_status gguf_writer_create(gguf_writer **out, lares_error *err) {
    gguf_writer *w = lares_calloc(1, sizeof *w);
    if (w == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return LARES_OK;
}

static void kv_clear(wkv *e) {
    lares_free(e->key);
    lares_free(e->str);
    lares_free(e->arr_data);
    lares_free(e->arr_strs);
    lares_free(e->arr_blob);
    memset(e, 0, sizeof *e);
}

void gguf_writer_free(gguf_writer *w) {
    if (w == NULL) {
        return;
    }
    if (w->fp != NULL) {
        fclose(w->fp);
        unlink(w->tmp_path);
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        kv_clear(&w->kv[i]);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        lares_free(w->t[i].name);
    }
    lares_free(w->kv);
    lares_free(w->t);
    lares_free(w->path);
    lares_free(w->tmp_path);
    lares_free(w);
}

/* Returns the entry for key, replacing an existing one (cleared) or appending. */
static wkv *kv_slot(gguf_writer *w, const char *key, lares_error *err) {
    size_t klen = strlen(key);
    if (klen == 0 || klen > GGUF_MAX_KEY_BYTES) {
        lares_fail(err, LARES_EINVAL, "gguf writer: bad key length %zu", klen);
        return NULL;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            char *k = w->kv[i].key;
            w->kv[i].key = NULL;
            kv_clear(&w->kv[i]);
            w->kv[i].key = k;
            return &w->kv[i];
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *n = lares_realloc(w->kv, cap * sizeof *n);
        if (n == NULL) {
            lares_fail(err, LARES_ENOMEM, "out of memory");
            return NULL;
        }
        w->kv = n;
        w->cap_kv = cap;
    }
    wkv *e = &w->kv[w->n_kv];
    memset(e, 0, sizeof *e);
    e->key = lares_strdup(key);
    if (e->key == NULL) {
        lares_fail(err, LARES_ENOMEM, "out of memory");
        return NULL;
    }
    w->n_kv++;
    return e;
}

static lares_status set_scalar(gguf_writer *w, const char *key, uint32_t vt, uint64_t bits,
                               lares_error *err) {
    wkv *e = kv_slot(w, key, err);
    if (e == NULL) {
        return err ? err->code : LARES_ENOMEM;
    }
    e->type = vt;
    wr_u64le(e->scalar, bits);
    return LARES_OK;
}

lares_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v, lares_error *err) {
    return set_scalar(w, key, GGUF_VT_U32, v, err);
}
lares_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v, lares_error *err) {
    return set_scalar(w, key, GGUF_VT_I32, (uint32_t)v, err);
}
lares_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v, lares_error *err) {
    return set_scalar(w, key, GGUF_VT_U64, v, err);
}
lares_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v, lares_error *err) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return set_scalar(w, key, GGUF_VT_F32, u, err);
}
lares_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v, lares_error *err) {
    return set_scalar(w, key, GGUF_VT_BOOL, v ? 1 : 0, err);
}

static lares_status set_str_n(gguf_writer *w, const char *key, const char *v, uint64_t len,
                              lares_error *err) {
    wkv *e = kv_slot(w, key, err);
    if (e == NULL) {
        return err ? err->code : LARES_ENOMEM;
    }
    e->type = GGUF_VT_STRING;
    e->str = lares_strndup(v, (size_t)len);
    e->str_len = len;
    return e->str ? LARES_OK : lares_fail(err, LARES_ENOMEM, "out of memory");
}

lares_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v, lares_error *err) {
    return set_str_n(w, key, v, strlen(v), err);
}

/* Stores n numeric elements already in little-endian file order. */
static lares_status set_arr_le(gguf_writer *w, const char *key, uint32_t vt, const uint8_t *le,
                               uint64_t n, lares_error *err) {
    uint32_t eb = gguf_vtype_bytes(vt);
    if (eb == 0) {
        return lares_fail(err, LARES_EINVAL, "gguf writer: key '%s': bad array type %" PRIu32, key,
                          vt);
    }
    size_t bytes;
    if (n > SIZE_MAX || !lares_mul_size((size_t)n, eb, &bytes)) {
        return lares_fail(err, LARES_ENOMEM, "gguf writer: key '%s': array too large", key);
    }
    wkv *e = kv_slot(w, key, err);
    if (e == NULL) {
        return err ? err->code : LARES_ENOMEM;
    }
    e->type = GGUF_VT_ARRAY;
    e->arr_type = vt;
    e->arr_n = n;
    if (bytes > 0) {
        e->arr_data = lares_alloc(bytes);
        if (e->arr_data == NULL) {
            return lares_fail(err, LARES_ENOMEM, "out of memory");
        }
        memcpy(e->arr_data, le, bytes);
    }
    return LARES_OK;
}

lares_status gguf_writer_set_arr(gguf_writer *w, const char *key, uint32_t vt, const void *data,
                                 uint64_t n, lares_error *err) {
    /* host order equals file order on every target lares builds for (little-endian) */
    return set_arr_le(w, key, vt, data, n, err);
}

lares_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const gguf_str *strs,
                                     uint64_t n, lares_error *err) {
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!lares_add_size(total, (size_t)strs[i].len, &total)) {
            return lares_fail(err, LARES_ENOMEM, "gguf writer: key '%s': strings too large", key);
        }
    }
    wkv *e = kv_slot(w, key, err);
    if (e == NULL) {
        return err ? err->code : LARES_ENOMEM;
    }
    e->type = GGUF_VT_ARRAY;
    e->arr_type = GGUF_VT_STRING;
    e->arr_n = n;
    if (n == 0) {
        return LARES_OK;
    }
    e->arr_strs = lares_alloc_array((size_t)n, sizeof *e->arr_strs);
    e->arr_blob = lares_alloc(total + 1);
    if (e->arr_strs == NULL || e->arr_blob == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(e->arr_blob + off, strs[i].ptr, (size_t)strs[i].len);
        e->arr_strs[i].ptr = e->arr_blob + off;
        e->arr_strs[i].len = strs[i].len;
        off += (size_t)strs[i].len;
    }
    return LARES_OK;
}

lares_status gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, uint64_t i,
                                 lares_error *err) {
    const char *key = gguf_kv_key(src, i);
    uint32_t vt = gguf_kv_type(src, i);
    if (key == NULL) {
        return lares_fail(err, LARES_EINVAL, "gguf writer: no metadata entry %" PRIu64, i);
    }
    if (vt == GGUF_VT_STRING) {
        gguf_str s;
        (void)gguf_kv_str(src, i, &s, NULL);
        return set_str_n(w, key, s.ptr, s.len, err);
    }
    if (vt == GGUF_VT_ARRAY) {
        gguf_arr a;
        (void)gguf_kv_arr(src, i, &a, NULL);
        if (a.type == GGUF_VT_STRING) {
            return gguf_writer_set_arr_str(w, key, a.strs, a.n, err);
        }
        return set_arr_le(w, key, a.type, a.data, a.n, err);
    }
    /* scalars: re-read the raw little-endian bytes through the typed view */
    uint64_t bits = 0;
    if (vt == GGUF_VT_F32 || vt == GGUF_VT_F64) {
        double d;
        (void)gguf_kv_f64(src, i, &d, NULL);
        if (vt == GGUF_VT_F32) {
            float fv = (float)d;
            uint32_t u;
            memcpy(&u, &fv, sizeof u);
            bits = u;
        } else {
            memcpy(&bits, &d, sizeof bits);
        }
    } else if (vt == GGUF_VT_BOOL) {
        bits = gguf_kv_bool(src, i);
    } else {
        int64_t s;
        uint64_t u;
        if (gguf_kv_i64(src, i, &s, NULL) == LARES_OK) {
            bits = (uint64_t)s;
        } else if (gguf_kv_u64(src, i, &u, NULL) == LARES_OK) {
            bits = u;
        }
    }
    return set_scalar(w, key, vt, bits, err);
}

lares_status gguf_writer_set_alignment(gguf_writer *w, uint32_t align, lares_error *err) {
    if (!lares_is_pow2(align)) {
        return lares_fail(err, LARES_EINVAL, "gguf writer: alignment %" PRIu32
                          " is not a power of two", align);
    }
    w->alignment = align;
    return gguf_writer_set_u32(w, "general.alignment", align, err);
}

lares_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    lares_error *err) {
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen > GGUF_MAX_NAME_BYTES) {
        return lares_fail(err, LARES_EINVAL, "gguf writer: bad tensor name length %zu", nlen);
    }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        return lares_fail(err, LARES_EINVAL, "gguf writer: tensor '%s' has %" PRIu32 " dims",
                          name, n_dims);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->t[i].name, name) == 0) {
            return lares_fail(err, LARES_EINVAL, "gguf writer: duplicate tensor '%s'", name);
        }
    }
    wtensor t = {.type = type, .n_dims = n_dims, .data = data};
    uint64_t rows = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0 || (d > 0 && !lares_mul_u64(rows, (uint64_t)t.ne[d], &rows))) {
            return lares_fail(err, LARES_EINVAL, "gguf writer: tensor '%s' has a bad shape", name);
        }
    }
    uint64_t row_bytes;
    if (!gguf_row_bytes(type, t.ne[0], &row_bytes) ||
        !lares_mul_u64(row_bytes, rows, &t.nbytes)) {
        return lares_fail(err, LARES_EINVAL,
                          "gguf writer: tensor '%s': type %" PRIu32 " cannot hold rows of %" PRId64,
                          name, type, t.ne[0]);
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *n = lares_realloc(w->t, cap * sizeof *n);
        if (n == NULL) {
            return lares_fail(err, LARES_ENOMEM, "out of memory");
        }
        w->t = n;
        w->cap_t = cap;
    }
    t.name = lares_strdup(name);
    if (t.name == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    w->t[w->n_t++] = t;
    return LARES_OK;
}

uint64_t gguf_writer_n_tensors(const gguf_writer *w) {
    return w->n_t;
}

uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, uint64_t i) {
    return i < w->n_t ? w->t[i].nbytes : 0;
}

/* ---- output ---- */

static bool put(gguf_writer *w, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, w->fp) == n;
}
static bool put_u32(gguf_writer *w, uint32_t v) {
    uint8_t b[4];
    wr_u32le(b, v);
    return put(w, b, 4);
}
static bool put_u64(gguf_writer *w, uint64_t v) {
    uint8_t b[8];
    wr_u64le(b, v);
    return put(w, b, 8);
}
static bool put_str(gguf_writer *w, const char *s, uint64_t n) {
    return put_u64(w, n) && put(w, s, (size_t)n);
}
static bool put_zeros(gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[64];
    while (n > 0) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (!put(w, zeros, k)) {
            return false;
        }
        n -= k;
    }
    return true;
}

static lares_status io_fail(gguf_writer *w, lares_error *err) {
    return lares_fail(err, LARES_EIO, "%s: write failed: %s", w->tmp_path ? w->tmp_path : "?",
                      strerror(errno));
}

lares_status gguf_writer_begin(gguf_writer *w, const char *path, lares_error *err) {
    if (w->fp != NULL) {
        return lares_fail(err, LARES_EINVAL, "gguf writer: already writing %s", w->path);
    }
    size_t plen = strlen(path);
    w->path = lares_strdup(path);
    w->tmp_path = lares_alloc(plen + 5);
    if (w->path == NULL || w->tmp_path == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    memcpy(w->tmp_path, path, plen);
    memcpy(w->tmp_path + plen, ".tmp", 5);
    w->fp = fopen(w->tmp_path, "wb");
    if (w->fp == NULL) {
        return lares_fail(err, LARES_EIO, "%s: cannot create: %s", w->tmp_path, strerror(errno));
    }
    /* offsets: each tensor aligned within the data section */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        off = lares_align_up_u64(off, w->alignment);
        w->t[i].offset = off;
        off += w->t[i].nbytes;
    }
    bool ok = put_u32(w, GGUF_MAGIC) && put_u32(w, 3) && put_u64(w, w->n_t) && put_u64(w, w->n_kv);
    uint64_t pos = 24;
    for (size_t i = 0; ok && i < w->n_kv; i++) {
        const wkv *e = &w->kv[i];
        uint64_t klen = strlen(e->key);
        ok = put_str(w, e->key, klen) && put_u32(w, e->type);
        pos += 8 + klen + 4;
        if (!ok) {
            break;
        }
        if (e->type == GGUF_VT_STRING) {
            ok = put_str(w, e->str, e->str_len);
            pos += 8 + e->str_len;
        } else if (e->type == GGUF_VT_ARRAY) {
            ok = put_u32(w, e->arr_type) && put_u64(w, e->arr_n);
            pos += 12;
            if (e->arr_type == GGUF_VT_STRING) {
                for (uint64_t j = 0; ok && j < e->arr_n; j++) {
                    ok = put_str(w, e->arr_strs[j].ptr, e->arr_strs[j].len);
                    pos += 8 + e->arr_strs[j].len;
                }
            } else {
                uint64_t bytes = e->arr_n * gguf_vtype_bytes(e->arr_type);
                ok = put(w, e->arr_data, (size_t)bytes);
                pos += bytes;
            }
        } else {
            uint32_t nb = gguf_vtype_bytes(e->type);
            ok = put(w, e->scalar, nb);
            pos += nb;
        }
    }
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t nlen = strlen(t->name);
        ok = put_str(w, t->name, nlen) && put_u32(w, t->n_dims);
        for (uint32_t d = 0; ok && d < t->n_dims; d++) {
            ok = put_u64(w, (uint64_t)t->ne[d]);
        }
        ok = ok && put_u32(w, t->type) && put_u64(w, t->offset);
        pos += 8 + nlen + 4 + 8 * t->n_dims + 12;
    }
    ok = ok && put_zeros(w, lares_align_up_u64(pos, w->alignment) - pos);
    if (!ok) {
        return io_fail(w, err);
    }
    w->next_data = 0;
    w->written = 0;
    return LARES_OK;
}

lares_status gguf_writer_write_data(gguf_writer *w, const void *data, uint64_t nbytes,
                                    lares_error *err) {
    if (w->fp == NULL || w->next_data >= w->n_t) {
        return lares_fail(err, LARES_EINVAL, "gguf writer: no tensor left to write");
    }
    const wtensor *t = &w->t[w->next_data];
    if (nbytes != t->nbytes) {
        return lares_fail(err, LARES_EINVAL,
                          "gguf writer: tensor '%s' needs %" PRIu64 " bytes, got %" PRIu64, t->name,
                          t->nbytes, nbytes);
    }
    if (!put_zeros(w, t->offset - w->written) || !put(w, data, (size_t)nbytes)) {
        return io_fail(w, err);
    }
    w->written = t->offset + nbytes;
    w->next_data++;
    return LARES_OK;
}

lares_status gguf_writer_finish(gguf_writer *w, lares_error *err) {
    if (w->fp == NULL) {
        return lares_fail(err, LARES_EINVAL, "gguf writer: nothing being written");
    }
    if (w->next_data != w->n_t) {
        return lares_fail(err, LARES_EINVAL,
                          "gguf writer: %s: %" PRIu64 " of %zu tensors written", w->path,
                          w->next_data, w->n_t);
    }
    /* pad the last tensor so readers that expect aligned sizes are content */
    bool ok = put_zeros(w, lares_align_up_u64(w->written, w->alignment) - w->written);
    ok = ok && fflush(w->fp) == 0 && fsync(fileno(w->fp)) == 0;
    int rc = fclose(w->fp);
    w->fp = NULL;
    if (!ok || rc != 0) {
        lares_status st = io_fail(w, err);
        unlink(w->tmp_path);
        return st;
    }
    if (rename(w->tmp_path, w->path) != 0) {
        lares_status st = lares_fail(err, LARES_EIO, "%s: cannot rename into place: %s", w->path,
                                     strerror(errno));
        unlink(w->tmp_path);
        return st;
    }
    return LARES_OK;
}

lares_status gguf_writer_write_file(gguf_writer *w, const char *path, lares_error *err) {
    for (size_t i = 0; i < w->n_t; i++) {
        if (w->t[i].data == NULL && w->t[i].nbytes > 0) {
            return lares_fail(err, LARES_EINVAL, "gguf writer: tensor '%s' has no data",
                              w->t[i].name);
        }
    }
    lares_status st = gguf_writer_begin(w, path, err);
    for (size_t i = 0; st == LARES_OK && i < w->n_t; i++) {
        st = gguf_writer_write_data(w, w->t[i].data, w->t[i].nbytes, err);
    }
    return st == LARES_OK ? gguf_writer_finish(w, err) : st;
}
