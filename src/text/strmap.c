/*
 * Hash maps of the vocabulary: token text -> id, and merge pair -> rank.
 * Open addressing with linear probing, at most half full, sized once when the
 * vocabulary loads and read-only afterwards (shared between threads).
 */
#include "text/text_impl.h"

/* A multiply-xorshift hash over 8-byte words (tokens are short: this is the
 * hot lookup of both tokenizers). The constants are the 64-bit golden ratio
 * and the MurmurHash3 finalizer's. */
uint32_t text_hash(const char *s, size_t n) {
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    uint64_t h = (uint64_t)n * k;
    while (n >= 8) {
        uint64_t x;
        memcpy(&x, s, 8);
        h = (h ^ x) * k;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    if (n > 0) {
        uint64_t x = 0;
        memcpy(&x, s, n);
        h = (h ^ x) * k;
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (uint32_t)h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) {
        c <<= 1;
    }
    return c;
}

lares_status text_strmap_build(text_strmap *m, const gguf_str *keys, int32_t n, int32_t *dup_a,
                               int32_t *dup_b) {
    memset(m, 0, sizeof *m);
    size_t cap = pow2_at_least((size_t)n * 2 + 1);
    m->hash = lares_alloc_array(cap, sizeof *m->hash);
    m->id = lares_alloc_array(cap, sizeof *m->id);
    if (m->hash == NULL || m->id == NULL) {
        text_strmap_free(m);
        return LARES_ENOMEM;
    }
    memset(m->id, 0xff, cap * sizeof *m->id);
    m->mask = cap - 1;
    m->key = keys;
    for (int32_t i = 0; i < n; i++) {
        const gguf_str k = keys[i];
        if (k.len == 0) {
            continue;
        }
        uint32_t h = text_hash(k.ptr, (size_t)k.len);
        size_t j = h & m->mask;
        while (m->id[j] >= 0) {
            const gguf_str o = keys[m->id[j]];
            if (m->hash[j] == h && o.len == k.len && memcmp(o.ptr, k.ptr, (size_t)k.len) == 0) {
                *dup_a = m->id[j];
                *dup_b = i;
                text_strmap_free(m);
                return LARES_EFORMAT;
            }
            j = (j + 1) & m->mask;
        }
        m->hash[j] = h;
        m->id[j] = i;
    }
    return LARES_OK;
}

void text_strmap_free(text_strmap *m) {
    lares_free(m->hash);
    lares_free(m->id);
    m->hash = NULL;
    m->id = NULL;
}

int32_t text_strmap_find(const text_strmap *m, const char *s, size_t n) {
    if (m->id == NULL || n == 0) {
        return -1;
    }
    uint32_t h = text_hash(s, n);
    size_t j = h & m->mask;
    for (;;) {
        int32_t id = m->id[j];
        if (id < 0) {
            return -1;
        }
        if (m->hash[j] == h) {
            const gguf_str k = m->key[id];
            if (k.len == n && memcmp(k.ptr, s, n) == 0) {
                return id;
            }
        }
        j = (j + 1) & m->mask;
    }
}

/* ---- merge pairs ---- */

static size_t pair_hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key;
}

lares_status text_pairmap_init(text_pairmap *m, size_t n_max) {
    memset(m, 0, sizeof *m);
    size_t cap = pow2_at_least(n_max * 2 + 1);
    m->slot = lares_alloc_array(cap, sizeof *m->slot);
    if (m->slot == NULL) {
        return LARES_ENOMEM;
    }
    for (size_t i = 0; i < cap; i++) {
        m->slot[i].key = UINT64_MAX;
    }
    m->mask = cap - 1;
    return LARES_OK;
}

void text_pairmap_free(text_pairmap *m) {
    lares_free(m->slot);
    m->slot = NULL;
    m->n = 0;
}

bool text_pairmap_put(text_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t result) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t j = pair_hash(key) & m->mask;
    while (m->slot[j].key != UINT64_MAX) {
        if (m->slot[j].key == key) {
            return false;
        }
        j = (j + 1) & m->mask;
    }
    m->slot[j].key = key;
    m->slot[j].rank = rank;
    m->slot[j].result = result;
    m->n++;
    return true;
}

const text_pair_slot *text_pairmap_find(const text_pairmap *m, int32_t left, int32_t right) {
    if (m->slot == NULL) {
        return NULL;
    }
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t j = pair_hash(key) & m->mask;
    for (;;) {
        const text_pair_slot *s = &m->slot[j];
        if (s->key == key) {
            return s;
        }
        if (s->key == UINT64_MAX) {
            return NULL;
        }
        j = (j + 1) & m->mask;
    }
}
