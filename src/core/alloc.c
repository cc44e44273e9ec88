/*
 * The allocation gate. Each block carries a 16-byte header holding its size so
 * lares_free can keep the in-use count exact; the high-water mark is what the
 * memory report calls the library's own heap.
 */
#include "core/core.h"

#include <stdatomic.h>
#include <stdlib.h>

#define HEADER_BYTES 16 /* keeps the user pointer 16-byte aligned */
/* No single allocation may exceed this: a request this large is a bug or a
 * hostile size that slipped through, never a real buffer on these devices. */
#define ALLOC_MAX ((size_t)1 << 46)

static atomic_size_t in_use;
static atomic_size_t high_water;
static atomic_long fail_countdown; /* 0: off; n: the n-th next allocation fails */
static atomic_long allocs_seen;    /* allocation requests, for sweeps */

void lares_alloc_fail_after(long n) {
    atomic_store(&fail_countdown, n);
}

long lares_allocs_seen(void) {
    return atomic_load(&allocs_seen);
}

static bool injected_failure(void) {
    atomic_fetch_add_explicit(&allocs_seen, 1, memory_order_relaxed);
    long c = atomic_load(&fail_countdown);
    while (c > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &c, c - 1)) {
            return c == 1;
        }
    }
    return false;
}

static void count_add(size_t n) {
    size_t now = atomic_fetch_add(&in_use, n) + n;
    size_t hw = atomic_load(&high_water);
    while (now > hw && !atomic_compare_exchange_weak(&high_water, &hw, now)) {
    }
}

void *lares_alloc(size_t n) {
    if (n == 0 || n > ALLOC_MAX || injected_failure()) {
        return NULL;
    }
    unsigned char *p = malloc(n + HEADER_BYTES);
    if (p == NULL) {
        return NULL;
    }
    memcpy(p, &n, sizeof n);
    count_add(n);
    return p + HEADER_BYTES;
}

void lares_free(void *ptr) {
    if (ptr == NULL) {
        return;
    }
    unsigned char *p = (unsigned char *)ptr - HEADER_BYTES;
    size_t n;
    memcpy(&n, p, sizeof n);
    atomic_fetch_sub(&in_use, n);
    free(p);
}

void *lares_alloc_array(size_t n, size_t size) {
    size_t total;
    if (!lares_mul_size(n, size, &total)) {
        return NULL;
    }
    return lares_alloc(total);
}

void *lares_calloc(size_t n, size_t size) {
    size_t total;
    if (!lares_mul_size(n, size, &total)) {
        return NULL;
    }
    void *p = lares_alloc(total);
    if (p != NULL) {
        memset(p, 0, total);
    }
    return p;
}

void *lares_realloc(void *ptr, size_t n) {
    if (ptr == NULL) {
        return lares_alloc(n);
    }
    if (n == 0 || n > ALLOC_MAX || injected_failure()) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)ptr - HEADER_BYTES;
    size_t old;
    memcpy(&old, p, sizeof old);
    unsigned char *q = realloc(p, n + HEADER_BYTES);
    if (q == NULL) {
        return NULL;
    }
    memcpy(q, &n, sizeof n);
    atomic_fetch_sub(&in_use, old);
    count_add(n);
    return q + HEADER_BYTES;
}

bool lares_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) {
        return true;
    }
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) {
            return false;
        }
        c *= 2;
    }
    size_t bytes;
    if (!lares_mul_size(c, elem, &bytes)) {
        return false;
    }
    void *q = lares_realloc(*p, bytes);
    if (q == NULL) {
        return false;
    }
    *p = q;
    *cap = c;
    return true;
}

char *lares_strndup(const char *s, size_t n) {
    char *d = lares_alloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *lares_strdup(const char *s) {
    return lares_strndup(s, strlen(s));
}

/* Aligned blocks keep their size and the malloc'd pointer just below the
 * aligned address. */
void *lares_alloc_aligned(size_t n, size_t align) {
    if (n == 0 || n > ALLOC_MAX || align < 16 || !lares_is_pow2(align) || injected_failure()) {
        return NULL;
    }
    size_t total = n + align + HEADER_BYTES;
    unsigned char *raw = malloc(total);
    if (raw == NULL) {
        return NULL;
    }
    uintptr_t a = ((uintptr_t)raw + HEADER_BYTES + align - 1) & ~(uintptr_t)(align - 1);
    unsigned char *user = (unsigned char *)a;
    memcpy(user - HEADER_BYTES, &n, sizeof n);
    memcpy(user - HEADER_BYTES + sizeof n, &raw, sizeof raw);
    count_add(n);
    return user;
}

void lares_free_aligned(void *ptr) {
    if (ptr == NULL) {
        return;
    }
    unsigned char *user = ptr;
    size_t n;
    unsigned char *raw;
    memcpy(&n, user - HEADER_BYTES, sizeof n);
    memcpy(&raw, user - HEADER_BYTES + sizeof n, sizeof raw);
    atomic_fetch_sub(&in_use, n);
    free(raw);
}

size_t lares_mem_in_use(void) {
    return atomic_load(&in_use);
}

size_t lares_mem_high_water(void) {
    return atomic_load(&high_water);
}
