/*
 * wcache: the weight cache of a worker without the model file (issue 19,
 * docs/ring.md "Workers without the model file").
 *
 * One directory per model under the cache directory, named by the SHA-256 of
 * the model file's header (metadata and tensor table: two files with the same
 * header describe the same tensors at the same offsets), holding
 *   model.gguf  a sparse file of the model's full size: the header, and the
 *               bytes of the items shipped so far at their own offsets (the
 *               rest are holes, read as zeros, taking no disk); the ordinary
 *               GGUF reader and model loader open it as they open the model
 *   manifest    text: per item (item 0 the header, item i tensor i - 1) its
 *               offset and size, the bytes received so far (from its start:
 *               a transfer cut off resumes there), when it was last used
 *               and, once verified, its SHA-256
 * Items are verified against the head's SHA-256 before they are marked
 * done; a size limit evicts least recently used models, then items (a hole
 * punched where the file system can).
 *
 * Plain files and no threads: one wcache handle is used by one thread.
 */
#ifndef LARES_WCACHE_H
#define LARES_WCACHE_H

#include "core/core.h"

#define WCACHE_SHA256_BYTES 32
#define WCACHE_HEX_BYTES    (2 * WCACHE_SHA256_BYTES)
/* items of one model: far above any model's tensor count (+1 for the header) */
#define WCACHE_MAX_ITEMS 1000000u

/* ---- SHA-256 (OpenSSL's libcrypto) ---- */

typedef struct wcache_sha256 wcache_sha256;
wcache_sha256 *wcache_sha256_begin(void); /* NULL when out of memory */
void wcache_sha256_add(wcache_sha256 *s, const void *p, size_t n);
/* Writes the digest and frees s. */
void wcache_sha256_end(wcache_sha256 *s, uint8_t out[WCACHE_SHA256_BYTES]);
bool wcache_sha256_of(const void *p, size_t n, uint8_t out[WCACHE_SHA256_BYTES]);
void wcache_hex(const uint8_t sha[WCACHE_SHA256_BYTES], char out[WCACHE_HEX_BYTES + 1]);

/* ---- one model's entry ---- */

typedef struct wcache wcache;

/* Opens (making it when new) the entry of the model whose header hashes to
 * model_sha, file_bytes long, under dir (made when missing). limit: the most
 * bytes the whole cache may hold (0: no limit). A manifest that cannot be
 * read is LARES_EFORMAT naming the file and line (wcache_remove_model starts
 * the entry over). */
lares_status wcache_open(const char *dir, const uint8_t model_sha[WCACHE_SHA256_BYTES],
                         uint64_t file_bytes, uint64_t limit, wcache **out, lares_error *err);
/* Writes the manifest and closes. */
void wcache_close(wcache *c);
lares_status wcache_remove_model(const char *dir, const uint8_t model_sha[WCACHE_SHA256_BYTES],
                                 lares_error *err);
/* The sparse model file. */
const char *wcache_file(const wcache *c);
/* The model's name for listings (general.name). */
void wcache_set_name(wcache *c, const char *name);
/* The items: offset and size in the file of each (item 0: the header, known
 * before the rest). What was held of an item of another offset or size is
 * dropped. */
lares_status wcache_set_items(wcache *c, uint32_t n, const uint64_t *off, const uint64_t *bytes,
                              lares_error *err);
uint32_t wcache_n_items(const wcache *c);
uint64_t wcache_item_bytes(const wcache *c, uint32_t item);
/* Bytes of the item held so far, from its start. */
uint64_t wcache_have(const wcache *c, uint32_t item);
/* Verified whole: true, with its SHA-256 in sha (may be NULL). */
bool wcache_done(const wcache *c, uint32_t item, uint8_t sha[WCACHE_SHA256_BYTES]);
/* Writes bytes [off, off + n) of the item; off must be what it holds (the
 * transfer goes in order). A full disk is LARES_EIO with what to do. */
lares_status wcache_write(wcache *c, uint32_t item, uint64_t off, const void *p, size_t n,
                          lares_error *err);
/* Reads the whole item back and compares its SHA-256 with expect: equal, the
 * item is done; else it is dropped and LARES_EFORMAT says so. */
lares_status wcache_verify(wcache *c, uint32_t item, const uint8_t expect[WCACHE_SHA256_BYTES],
                           lares_error *err);
/* The same for an item held whole whose SHA-256 the caller computed over the
 * very bytes it wrote, in order (a transfer hashing as it receives, so it
 * need not read the item back): got equal to expect, the item is done; else
 * dropped, LARES_EFORMAT. */
lares_status wcache_accept(wcache *c, uint32_t item, const uint8_t got[WCACHE_SHA256_BYTES],
                           const uint8_t expect[WCACHE_SHA256_BYTES], lares_error *err);
/* Drops what is held of an item (a hole punched where possible). */
void wcache_forget(wcache *c, uint32_t item);
/* Marks the item used now (for eviction). */
void wcache_touch(wcache *c, uint32_t item);
/* Makes room for `bytes` more under the limit: other models least recently
 * used first, then this model's items not pinned (pinned[i], may be NULL),
 * least recently used first. LARES_ERANGE when that is not enough. */
lares_status wcache_reserve(wcache *c, uint64_t bytes, const bool *pinned, lares_error *err);
/* Bytes this model's entry holds. */
uint64_t wcache_bytes(const wcache *c);
/* Writes the manifest (a new file renamed over the old). */
lares_status wcache_sync(wcache *c, lares_error *err);

/* ---- the whole cache ---- */

typedef struct wcache_model_info {
    char sha_hex[WCACHE_HEX_BYTES + 1]; /* the model's header hash */
    char name[64];                      /* "" unknown */
    uint64_t file_bytes;                /* the model file's size */
    uint64_t bytes;                     /* held in the cache */
    int64_t last_use;                   /* seconds since the epoch */
    uint32_t items, items_done;
} wcache_model_info;

/* Every model of the cache under dir, most recently used first (*n = 0 when
 * dir does not exist). *out: free with lares_free. Entries whose manifest
 * cannot be read are listed with items = 0 and their name "(damaged)". */
lares_status wcache_list(const char *dir, wcache_model_info **out, size_t *n, lares_error *err);

#endif /* LARES_WCACHE_H */
