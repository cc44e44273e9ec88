/* wcache internals shared by cache.c (one entry) and evict.c (the whole cache). */
#ifndef LARES_WCACHE_IMPL_H
#define LARES_WCACHE_IMPL_H

#include "wcache/wcache.h"

#define WCACHE_PATH_MAX 1024

typedef struct wcache_item {
    bool known;    /* offset and size set */
    bool done;     /* held whole and verified: sha is the head's */
    uint64_t off;  /* in the file */
    uint64_t bytes;
    uint64_t have; /* held from its start */
    int64_t used;  /* last use, seconds since the epoch */
    uint8_t sha[WCACHE_SHA256_BYTES];
} wcache_item;

struct wcache {
    char root[WCACHE_PATH_MAX];     /* the cache directory */
    char dir[WCACHE_PATH_MAX];      /* this model's */
    char file[WCACHE_PATH_MAX + 16]; /* its sparse model file */
    char name[64];
    uint8_t sha[WCACHE_SHA256_BYTES];
    int fd;
    uint64_t file_bytes;
    uint64_t limit;        /* of the whole cache; 0 none */
    uint64_t others_bytes; /* the other models' bytes, as of the last wcache_reserve */
    wcache_item *items;    /* owned */
    uint32_t n_items, cap;
    bool dirty; /* the manifest on disk is older */
};

void wcache_entry_dir(const char *dir, const uint8_t sha[WCACHE_SHA256_BYTES], char *out,
                      size_t cap);
/* Reads a manifest into c (items, name); ENOENT is an empty entry. */
lares_status wcache_manifest_read(wcache *c, const char *path, lares_error *err);
void wcache_close_nosync(wcache *c);

#endif /* LARES_WCACHE_IMPL_H */
