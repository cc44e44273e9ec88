/*
 * The read gate: every read of a file and every receive from a socket of the
 * library goes through here, so that a test can make the n-th of them fail
 * (SQLite's way of reaching every error path). The countdown is shared with
 * nothing else and costs one atomic load per read when it is off.
 *
 * A failure is either EIO (the read returns -1, errno EIO) or a short read
 * (at most half of what was asked, at least one byte; for a whole-file fread
 * it looks like a file that ends early).
 */
#include "core/core.h"

#include <errno.h>
#include <stdatomic.h>
#include <unistd.h>

static atomic_long read_countdown; /* 0: off; n: the n-th next read fails */
static atomic_int read_kind;       /* lares_read_fault */
static atomic_long reads_seen;     /* reads through the gate, for sweeps */

void lares_read_fail_after(long n, lares_read_fault kind) {
    atomic_store(&read_kind, (int)kind);
    atomic_store(&read_countdown, n);
}

long lares_reads_seen(void) {
    return atomic_load(&reads_seen);
}

bool lares_read_fault_next(lares_read_fault *kind) {
    atomic_fetch_add(&reads_seen, 1);
    long c = atomic_load(&read_countdown);
    while (c > 0) {
        if (atomic_compare_exchange_weak(&read_countdown, &c, c - 1)) {
            if (c == 1) {
                *kind = (lares_read_fault)atomic_load(&read_kind);
                return true;
            }
            return false;
        }
    }
    return false;
}

/* how many of n bytes a short read hands back */
static size_t short_len(size_t n) {
    return n > 1 ? n / 2 : n;
}

/* Applies an injected fault to a read of *n bytes: false for EIO (errno set),
 * else *n is what the read may return (cut short when so injected). */
static bool gate(size_t *n) {
    lares_read_fault kind;
    if (!lares_read_fault_next(&kind)) {
        return true;
    }
    if (kind == LARES_READ_FAULT_EIO || *n == 0) {
        errno = EIO;
        return false;
    }
    *n = short_len(*n);
    return true;
}

ssize_t lares_read(int fd, void *buf, size_t n) {
    return gate(&n) ? read(fd, buf, n) : -1;
}

ssize_t lares_pread(int fd, void *buf, size_t n, off_t off) {
    return gate(&n) ? pread(fd, buf, n, off) : -1;
}

size_t lares_fread(void *buf, size_t n, FILE *f, bool *failed) {
    *failed = !gate(&n);
    if (*failed) {
        return 0;
    }
    const size_t got = fread(buf, 1, n, f);
    if (got < n && ferror(f)) {
        *failed = true;
    }
    return got;
}

long lares_read_small_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    bool failed;
    const size_t n = lares_fread(buf, cap - 1, f, &failed);
    fclose(f);
    buf[failed ? 0 : n] = '\0';
    return failed ? -1 : (long)n;
}
