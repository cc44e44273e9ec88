/*
 * A worker without the model file (issue 19, docs/ring.md "Workers without
 * the model file"): it fetches the model's header and the tensors of its
 * windows from the head over the ring's connection (TENSOR_GET /
 * TENSOR_DATA) into its weight cache (src/wcache), and opens the cache's
 * sparse model file as it would open the model.
 */
#ifndef LARES_API_RING_FETCH_H
#define LARES_API_RING_FETCH_H

#include "api/ring.h"
#include "wcache/wcache.h"

typedef void (*api_fetch_progress_fn)(void *user, const char *text);

typedef struct api_fetch {
    cluster_ship_link *link; /* borrowed */
    const char *cache_dir;   /* borrowed */
    uint64_t cache_limit;    /* bytes; 0 none */
    api_fetch_progress_fn progress;
    void *user;
    int tamper; /* tests: flip a byte of the next `tamper` chunks received */
    unsigned delay_ms; /* tests: a pause after each chunk received (a slow link) */
    /* the model in the cache */
    wcache *cache; /* owned */
    uint8_t model_sha[WCACHE_SHA256_BYTES];
    uint32_t n_items;
    bool *verified;          /* owned, n_items: checked against the head's hash in this process */
    uint8_t (*head_sha)[WCACHE_SHA256_BYTES]; /* owned, n_items */
    bool *head_known;        /* owned */
    /* the last transfer's figures */
    uint64_t fetched_bytes, cached_bytes;
    double fetch_ms;
} api_fetch;

/* The header from the head (or the cache): opens the model's cache entry and
 * says where its sparse file is (path, capacity cap). file_bytes: the model
 * file's size (HELLO). */
lares_status api_fetch_model(api_fetch *f, uint64_t file_bytes, char *path, size_t cap,
                             lares_error *err);
/* need[i] (n_items of the model's header: item 0 the header, i tensor i - 1):
 * the items of the windows [w[j].l0, w[j].l1) (tensors "blk.L.*") and the
 * tensors outside layers that a worker reads (all but the embedding, the
 * output matrix and the output norm). */
lares_status api_fetch_need(const gguf_file *g, const exec_window *w, int32_t n_windows,
                            bool **need, uint32_t *n_items, lares_error *err);
/* Makes the needed items present and verified: asks the head for their
 * hashes, checks what the cache holds (read back once per process), fetches
 * what is missing or differs. *fetched: bytes that came over the network. */
lares_status api_fetch_items(api_fetch *f, const bool *need, uint64_t *fetched, lares_error *err);
void api_fetch_close(api_fetch *f);

/* The head's side: the items of its model file (item 0 the header, item i
 * tensor i - 1) for cluster_head_opts.ship; *off and *bytes: free with
 * lares_free. */
lares_status ring_ship_source(const gguf_file *g, cluster_ship_source *out, uint64_t **off,
                              uint64_t **bytes, lares_error *err);

#endif /* LARES_API_RING_FETCH_H */
