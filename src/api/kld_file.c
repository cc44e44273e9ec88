/*
 * The KL-divergence base file: a base model's log-probabilities at every
 * scored position of a text, so a quantized model can be compared with it
 * later without the base model (layout in api/score.h, docs/perplexity.md).
 *
 * The reader distrusts the file: magic, version, every count bounded and
 * consistent with the others, the file size exactly what the header says
 * (a truncated file is refused before anything is read), token ids inside the
 * vocabulary, a checksum over the header and tokens and one per chunk, and
 * every log-probability finite and at most 0.
 */
#include "api/score.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FNV_OFFSET 0xcbf29ce484222325u
#define FNV_PRIME  0x100000001b3u

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * FNV_PRIME;
    }
    return h;
}

void kld_base_free(kld_base *b) {
    if (b == NULL) {
        return;
    }
    if (b->own_file && b->f != NULL) {
        fclose(b->f);
    }
    lares_free(b->tokens);
    lares_free(b->buf);
    lares_free(b);
}

static void set_name(kld_base *b, const char *name) {
    snprintf(b->name, sizeof b->name, "%s", name);
}

/* the scored positions of a chunk: the reference engine's second half */
static uint32_t scored_of(uint32_t n_ctx) {
    return n_ctx - 1 - n_ctx / 2;
}

/* ---- writing ---- */

static bool put(kld_base *b, const uint8_t *p, size_t n, uint64_t *hash) {
    if (hash != NULL) {
        *hash = fnv1a(*hash, p, n);
    }
    return fwrite(p, 1, n, b->f) == n;
}

static lares_status part_path(const char *path, char *out, size_t cap, lares_error *err) {
    if ((size_t)snprintf(out, cap, "%s.part", path) >= cap) {
        return lares_fail(err, LARES_EINVAL, "%s: path too long", path);
    }
    return LARES_OK;
}

lares_status kld_base_create(const char *path, uint32_t n_vocab, uint32_t n_ctx, uint32_t n_chunks,
                             const int32_t *tokens, kld_base **out, lares_error *err) {
    if (n_vocab < 2 || n_vocab > KLD_MAX_VOCAB || n_ctx < 4 || n_ctx > KLD_MAX_CTX ||
        n_chunks == 0) {
        return lares_fail(err, LARES_EINVAL,
                          "%s: vocabulary %u, context %u, %u chunks: out of range", path, n_vocab,
                          n_ctx, n_chunks);
    }
    char tmp[4096];
    lares_status st = part_path(path, tmp, sizeof tmp, err);
    if (st != LARES_OK) {
        return st;
    }
    kld_base *b = lares_calloc(1, sizeof *b);
    if (b == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    set_name(b, path);
    b->writing = true;
    b->n_vocab = n_vocab;
    b->n_ctx = n_ctx;
    b->n_chunks = n_chunks;
    b->n_scored = scored_of(n_ctx);
    b->buf = lares_alloc_array(n_vocab, 4);
    if (b->buf == NULL) {
        kld_base_free(b);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    b->f = fopen(tmp, "wb");
    if (b->f == NULL) {
        st = lares_fail(err, LARES_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        kld_base_free(b);
        return st;
    }
    b->own_file = true;
    uint8_t h[KLD_HEADER_BYTES] = {0};
    memcpy(h, KLD_MAGIC, 8);
    wr_u32le(h + 8, KLD_VERSION);
    wr_u32le(h + 12, n_vocab);
    wr_u32le(h + 16, n_ctx);
    wr_u32le(h + 20, n_chunks);
    wr_u32le(h + 24, b->n_scored);
    wr_u32le(h + 28, 0);
    wr_u64le(h + 32, (uint64_t)n_ctx * n_chunks);
    uint64_t hash = FNV_OFFSET;
    bool ok = put(b, h, sizeof h, &hash);
    const uint64_t n_tok = (uint64_t)n_ctx * n_chunks;
    for (uint64_t i = 0; ok && i < n_tok; i++) {
        uint8_t t[4];
        wr_u32le(t, (uint32_t)tokens[i]);
        ok = put(b, t, 4, &hash);
    }
    uint8_t c[8];
    wr_u64le(c, hash);
    if (!ok || !put(b, c, 8, NULL)) {
        st = lares_fail(err, LARES_EIO, "%s: write failed: %s", tmp, strerror(errno));
        kld_base_free(b);
        unlink(tmp);
        return st;
    }
    *out = b;
    return LARES_OK;
}

lares_status kld_base_write_chunk(kld_base *b, const float *rows, lares_error *err) {
    if (!b->writing || b->chunks_done >= b->n_chunks) {
        return lares_fail(err, LARES_EINVAL, "%s: more chunks than the %u announced", b->name,
                          b->n_chunks);
    }
    uint64_t hash = FNV_OFFSET;
    for (uint32_t r = 0; r < b->n_scored; r++) {
        const float *row = rows + (size_t)r * b->n_vocab;
        for (uint32_t i = 0; i < b->n_vocab; i++) {
            wr_f32le(b->buf + (size_t)i * 4, row[i]);
        }
        if (!put(b, b->buf, (size_t)b->n_vocab * 4, &hash)) {
            return lares_fail(err, LARES_EIO, "%s: write failed: %s", b->name, strerror(errno));
        }
    }
    uint8_t c[8];
    wr_u64le(c, hash);
    if (!put(b, c, 8, NULL)) {
        return lares_fail(err, LARES_EIO, "%s: write failed: %s", b->name, strerror(errno));
    }
    b->chunks_done++;
    return LARES_OK;
}

lares_status kld_base_finish(kld_base *b, const char *path, lares_error *err) {
    char tmp[4096];
    lares_status st = part_path(path, tmp, sizeof tmp, err);
    if (st != LARES_OK) {
        return st;
    }
    const bool complete = b->chunks_done == b->n_chunks;
    const bool flushed = fflush(b->f) == 0 && fsync(fileno(b->f)) == 0;
    const bool closed = fclose(b->f) == 0;
    b->f = NULL;
    if (!complete) {
        unlink(tmp);
        return lares_fail(err, LARES_EINVAL, "%s: %u of %u chunks written", path, b->chunks_done,
                          b->n_chunks);
    }
    if (!flushed || !closed || rename(tmp, path) != 0) {
        st = lares_fail(err, LARES_EIO, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        return st;
    }
    return LARES_OK;
}

/* ---- reading ---- */

static bool get(kld_base *b, uint8_t *p, size_t n, uint64_t *hash) {
    bool failed;
    if (lares_fread(p, n, b->f, &failed) != n) {
        return false;
    }
    if (hash != NULL) {
        *hash = fnv1a(*hash, p, n);
    }
    return true;
}

lares_status kld_base_read(FILE *f, uint64_t size, const char *name, kld_base **out,
                           lares_error *err) {
    if (size < KLD_HEADER_BYTES) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: %" PRIu64 " bytes, too short for a "
                          "KL-divergence base file (header of %u)",
                          name, size, KLD_HEADER_BYTES);
    }
    kld_base *b = lares_calloc(1, sizeof *b);
    if (b == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    set_name(b, name);
    b->f = f;
    lares_status st = LARES_OK;
    uint8_t h[KLD_HEADER_BYTES];
    uint64_t hash = FNV_OFFSET;
    if (!get(b, h, sizeof h, &hash)) {
        st = lares_fail(err, LARES_EIO, "%s: cannot read the header", name);
        goto fail;
    }
    if (memcmp(h, KLD_MAGIC, 8) != 0) {
        st =
            lares_fail(err, LARES_EFORMAT, "%s: not a lares KL-divergence base file (magic)", name);
        goto fail;
    }
    const uint32_t version = rd_u32le(h + 8);
    if (version != KLD_VERSION) {
        st = lares_fail(err, LARES_EUNSUPPORTED, "%s: version %u, this lares reads version %u",
                        name, version, KLD_VERSION);
        goto fail;
    }
    b->n_vocab = rd_u32le(h + 12);
    b->n_ctx = rd_u32le(h + 16);
    b->n_chunks = rd_u32le(h + 20);
    b->n_scored = rd_u32le(h + 24);
    const uint64_t n_tok = rd_u64le(h + 32);
    if (b->n_vocab < 2 || b->n_vocab > KLD_MAX_VOCAB || b->n_ctx < 4 || b->n_ctx > KLD_MAX_CTX ||
        b->n_chunks == 0 || rd_u32le(h + 28) != 0) {
        st = lares_fail(err, LARES_EFORMAT,
                        "%s: vocabulary %u, context %u, %u chunks: out of "
                        "range (corrupted header)",
                        name, b->n_vocab, b->n_ctx, b->n_chunks);
        goto fail;
    }
    if (b->n_scored != scored_of(b->n_ctx) || n_tok != (uint64_t)b->n_ctx * b->n_chunks) {
        st = lares_fail(err, LARES_EFORMAT,
                        "%s: %u scored positions and %" PRIu64 " tokens do "
                        "not match a context of %u and %u chunks (corrupted header)",
                        name, b->n_scored, n_tok, b->n_ctx, b->n_chunks);
        goto fail;
    }
    /* the exact size: header, tokens, checksum, chunks of rows and checksum */
    uint64_t row_bytes, chunk_bytes, all_chunks, want;
    bool fits = lares_mul_u64(b->n_vocab, 4, &row_bytes) &&
                lares_mul_u64(row_bytes, b->n_scored, &chunk_bytes) &&
                lares_add_u64(chunk_bytes, 8, &chunk_bytes) &&
                lares_mul_u64(chunk_bytes, b->n_chunks, &all_chunks) &&
                lares_add_u64(KLD_HEADER_BYTES + 8, n_tok * 4, &want) &&
                lares_add_u64(want, all_chunks, &want);
    if (!fits || want != size) {
        st = lares_fail(err, LARES_EFORMAT,
                        "%s: %" PRIu64 " bytes, the header announces %" PRIu64
                        " (%u chunks of %u x %u log-probabilities): truncated or corrupted",
                        name, size, fits ? want : UINT64_MAX, b->n_chunks, b->n_scored, b->n_vocab);
        goto fail;
    }
    b->tokens = lares_alloc_array((size_t)n_tok, sizeof *b->tokens);
    b->buf = lares_alloc_array(b->n_vocab, 4);
    if (b->tokens == NULL || b->buf == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < n_tok; i++) {
        uint8_t t[4];
        if (!get(b, t, 4, &hash)) {
            st = lares_fail(err, LARES_EIO, "%s: cannot read token %" PRIu64, name, i);
            goto fail;
        }
        const uint32_t id = rd_u32le(t);
        if (id >= b->n_vocab) {
            st = lares_fail(err, LARES_EFORMAT,
                            "%s: token %" PRIu64 " is %u, outside the "
                            "vocabulary of %u (corrupted)",
                            name, i, id, b->n_vocab);
            goto fail;
        }
        b->tokens[i] = (int32_t)id;
    }
    uint8_t c[8];
    if (!get(b, c, 8, NULL) || rd_u64le(c) != hash) {
        st = lares_fail(err, LARES_EFORMAT, "%s: header checksum mismatch (corrupted)", name);
        goto fail;
    }
    *out = b;
    return LARES_OK;
fail:
    b->f = NULL; /* borrowed */
    kld_base_free(b);
    return st;
}

lares_status kld_base_open(const char *path, kld_base **out, lares_error *err) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return lares_fail(err, errno == ENOENT ? LARES_ENOTFOUND : LARES_EIO, "%s: cannot open: %s",
                          path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return lares_fail(err, LARES_EIO, "%s: not a regular file", path);
    }
    kld_base *b = NULL;
    lares_status st = kld_base_read(f, (uint64_t)sb.st_size, path, &b, err);
    if (st != LARES_OK) {
        fclose(f);
        return st;
    }
    b->own_file = true;
    *out = b;
    return LARES_OK;
}

/* Reads chunk `chunk` at the stream's position: its rows (into rows, unless
 * NULL), values and checksum checked. */
static lares_status read_rows(kld_base *b, uint32_t chunk, float *rows, lares_error *err) {
    uint64_t hash = FNV_OFFSET;
    for (uint32_t r = 0; r < b->n_scored; r++) {
        if (!get(b, b->buf, (size_t)b->n_vocab * 4, &hash)) {
            return lares_fail(err, LARES_EIO, "%s: cannot read chunk %u", b->name, chunk + 1);
        }
        float *row = rows != NULL ? rows + (size_t)r * b->n_vocab : NULL;
        for (uint32_t i = 0; i < b->n_vocab; i++) {
            const float v = rd_f32le(b->buf + (size_t)i * 4);
            if (!(v <= 0.0f) || !isfinite(v)) {
                return lares_fail(err, LARES_EFORMAT,
                                  "%s: chunk %u, row %u, token %u: %g is not "
                                  "a log-probability (corrupted)",
                                  b->name, chunk + 1, r, i, (double)v);
            }
            if (row != NULL) {
                row[i] = v;
            }
        }
    }
    uint8_t c[8];
    if (!get(b, c, 8, NULL) || rd_u64le(c) != hash) {
        return lares_fail(err, LARES_EFORMAT, "%s: chunk %u checksum mismatch (corrupted)", b->name,
                          chunk + 1);
    }
    return LARES_OK;
}

lares_status kld_base_read_chunk(kld_base *b, float *rows, lares_error *err) {
    if (b->writing || b->chunks_done >= b->n_chunks) {
        return lares_fail(err, LARES_EINVAL, "%s: all %u chunks already read", b->name,
                          b->n_chunks);
    }
    lares_status st = read_rows(b, b->chunks_done, rows, err);
    if (st == LARES_OK) {
        b->chunks_done++;
    }
    return st;
}

lares_status kld_base_verify(kld_base *b, lares_error *err) {
    const long start = ftell(b->f);
    if (b->writing || start < 0) {
        return lares_fail(err, LARES_EIO, "%s: cannot tell the read position", b->name);
    }
    for (uint32_t k = b->chunks_done; k < b->n_chunks; k++) {
        lares_status st = read_rows(b, k, NULL, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    if (fseek(b->f, start, SEEK_SET) != 0) {
        return lares_fail(err, LARES_EIO, "%s: cannot seek back after the check", b->name);
    }
    return LARES_OK;
}
