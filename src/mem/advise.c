/*
 * Advice on a mapped file: prefetch, release, residency, locking.
 *
 * Linux (and Android) limit one WILLNEED request to the device's read-ahead
 * size (force_page_cache_ra() clamps it to max(io_pages, ra_pages)), so a
 * prefetch of a 100 MB layer is cut into chunks of that size; each chunk is a
 * large sequential read the block layer can merge. MADV_POPULATE_READ (Linux
 * 5.14) then waits for the reads and maps the pages, so the compute threads
 * take no faults at all. macOS has no posix_fadvise: F_RDADVISE plays
 * WILLNEED there, and pages are touched instead of populated.
 *
 * Ranges are rounded out to pages to prefetch and in to release, so releasing
 * one layer never drops a page the next layer shares.
 */
#include "mem/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/sysmacros.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* linux/mman.h since 5.14; older kernels answer EINVAL */
#endif
#endif

/* the kernel's own default read-ahead when sysfs cannot tell */
#define DEFAULT_RA_BYTES (128u * 1024)
#define MAX_RA_BYTES     (64u * 1024 * 1024)
#define PREAD_BLOCK      (4u * 1024 * 1024)

static const char *const method_names[MEM_READ_COUNT] = {
    [MEM_READ_DEFAULT] = "default",
    [MEM_READ_FADVISE_POPULATE] = "fadvise+populate",
    [MEM_READ_MADVISE_TOUCH] = "madvise+touch",
    [MEM_READ_PREAD] = "pread",
    [MEM_READ_FAULT] = "fault",
    [MEM_READ_POPULATE] = "populate",
    [MEM_READ_SEQ_POPULATE] = "seq+populate",
};

const char *mem_read_method_name(mem_read_method m) {
    return (unsigned)m < MEM_READ_COUNT ? method_names[m] : "?";
}

#if defined(__linux__)
static uint64_t sysfs_kb(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    unsigned long long kb = 0;
    if (fscanf(f, "%llu", &kb) != 1) {
        kb = 0;
    }
    fclose(f);
    return (uint64_t)kb;
}
#endif

/* max(read_ahead_kb, max_sectors_kb) of the device holding fd: the largest
 * single WILLNEED the kernel honours. A partition's queue is its disk's. */
static size_t readahead_limit(int fd) {
    uint64_t best = 0;
#if defined(__linux__)
    struct stat sb;
    if (fd >= 0 && fstat(fd, &sb) == 0) {
        const unsigned maj = major(sb.st_dev), min = minor(sb.st_dev);
        static const char *const dirs[] = {"/sys/dev/block/%u:%u/queue/%s",
                                           "/sys/dev/block/%u:%u/../queue/%s"};
        static const char *const files[] = {"read_ahead_kb", "max_sectors_kb"};
        for (size_t d = 0; d < 2 && best == 0; d++) {
            for (size_t i = 0; i < 2; i++) {
                char p[128];
                snprintf(p, sizeof p, dirs[d], maj, min, files[i]);
                best = LARES_MAX(best, sysfs_kb(p) * 1024);
            }
        }
    }
#else
    (void)fd;
#endif
    if (best < DEFAULT_RA_BYTES) {
        best = DEFAULT_RA_BYTES;
    }
    return (size_t)LARES_MIN(best, (uint64_t)MAX_RA_BYTES);
}

void mem_file_init(mem_file *mf, const void *base, uint64_t bytes, int fd, const char *path) {
    memset(mf, 0, sizeof *mf);
    mf->base = base;
    mf->bytes = bytes;
    mf->fd = fd;
    mf->path = path ? path : "(memory)";
    long pg = sysconf(_SC_PAGESIZE);
    mf->page = pg > 0 ? (size_t)pg : 4096;
    mf->ra_chunk = readahead_limit(fd);
    mf->ra_chunk -= mf->ra_chunk % mf->page;
}

void mem_file_of(const gguf_file *f, mem_file *out) {
    mem_file_init(out, gguf_base(f), gguf_file_bytes(f), gguf_fd(f), gguf_path(f));
}

/* [lo, hi) rounded out to pages and clipped to the mapping; false when empty */
static bool round_out(const mem_file *mf, mem_range r, uint64_t *lo, uint64_t *hi) {
    *lo = r.lo - r.lo % mf->page;
    *hi = LARES_MIN(lares_align_up_u64(r.hi, mf->page), mf->bytes);
    return *lo < *hi;
}

/* rounded in: only pages wholly inside the range */
static bool round_in(const mem_file *mf, mem_range r, uint64_t *lo, uint64_t *hi) {
    *lo = lares_align_up_u64(r.lo, mf->page);
    *hi = r.hi - r.hi % mf->page;
    if (r.hi >= mf->bytes) { /* the file's last page may be partial: it is ours */
        *hi = LARES_MIN(lares_align_up_u64(mf->bytes, mf->page), lares_align_up_u64(r.hi, mf->page));
    }
    return *lo < *hi;
}

static void touch_pages(const mem_file *mf, uint64_t lo, uint64_t hi) {
    volatile uint8_t sink = 0;
    for (uint64_t p = lo; p < hi; p += mf->page) {
        sink ^= mf->base[p];
    }
    (void)sink;
}

static void willneed(const mem_file *mf, uint64_t lo, uint64_t hi) {
    if (mf->fd < 0) {
        return;
    }
    for (uint64_t off = lo; off < hi; off += mf->ra_chunk) {
        const uint64_t len = LARES_MIN((uint64_t)mf->ra_chunk, hi - off);
#if defined(__APPLE__)
        struct radvisory ra = {.ra_offset = (off_t)off, .ra_count = (int)len};
        (void)fcntl(mf->fd, F_RDADVISE, &ra);
#else
        (void)posix_fadvise(mf->fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
#endif
    }
}

/* maps the pages of [lo, hi), waiting for reads in flight */
static void populate(const mem_file *mf, uint64_t lo, uint64_t hi) {
#if defined(__linux__)
    void *addr = (void *)(uintptr_t)(mf->base + lo);
    for (;;) {
        if (madvise(addr, (size_t)(hi - lo), MADV_POPULATE_READ) == 0) {
            return;
        }
        if (errno != EINTR && errno != EAGAIN) {
            break; /* EINVAL before 5.14: touch instead */
        }
    }
#endif
    touch_pages(mf, lo, hi);
}

static void read_blocks(const mem_file *mf, uint64_t lo, uint64_t hi, void *scratch,
                        size_t scratch_bytes) {
    if (mf->fd < 0 || scratch == NULL || scratch_bytes < mf->page) {
        touch_pages(mf, lo, hi);
        return;
    }
    const size_t block = LARES_MIN(scratch_bytes, (size_t)PREAD_BLOCK);
    for (uint64_t off = lo; off < hi;) {
        const size_t len = (size_t)LARES_MIN((uint64_t)block, hi - off);
        ssize_t got = lares_pread(mf->fd, scratch, len, (off_t)off);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            break; /* what is left comes in through faults below */
        }
        off += (uint64_t)got;
    }
    populate(mf, lo, hi);
}

static lares_status check_span(const mem_file *mf, const mem_span *s, lares_error *err) {
    if (s->n > 0 && s->r[s->n - 1].hi > mf->bytes) {
        return lares_fail(err, LARES_EINVAL, "%s: range [%" PRIu64 ", %" PRIu64 ") outside the %"
                          PRIu64 " mapped bytes", mf->path, s->r[s->n - 1].lo, s->r[s->n - 1].hi,
                          mf->bytes);
    }
    return LARES_OK;
}

lares_status mem_prefetch(const mem_file *mf, const mem_span *s, mem_read_method how,
                          void *scratch, size_t scratch_bytes, mem_io *io, lares_error *err) {
    lares_status st = check_span(mf, s, err);
    if (st != LARES_OK) {
        return st;
    }
    if (how == MEM_READ_DEFAULT) {
        how = MEM_READ_POPULATE;
    }
    const uint64_t t0 = lares_now_ns();
    uint64_t bytes = 0, lo, hi;
    if (how == MEM_READ_FADVISE_POPULATE) {
        /* every read of the span is in flight before the first wait */
        for (size_t i = 0; i < s->n; i++) {
            if (round_out(mf, s->r[i], &lo, &hi)) {
                willneed(mf, lo, hi);
            }
        }
    }
    for (size_t i = 0; i < s->n; i++) {
        if (!round_out(mf, s->r[i], &lo, &hi)) {
            continue;
        }
        bytes += hi - lo;
        switch (how) {
        case MEM_READ_MADVISE_TOUCH:
            (void)madvise((void *)(uintptr_t)(mf->base + lo), (size_t)(hi - lo), MADV_WILLNEED);
            touch_pages(mf, lo, hi);
            break;
        case MEM_READ_PREAD:
            read_blocks(mf, lo, hi, scratch, scratch_bytes);
            break;
        case MEM_READ_FAULT:
            touch_pages(mf, lo, hi);
            break;
        case MEM_READ_POPULATE:
            populate(mf, lo, hi);
            break;
        case MEM_READ_SEQ_POPULATE:
            (void)madvise((void *)(uintptr_t)(mf->base + lo), (size_t)(hi - lo), MADV_SEQUENTIAL);
            populate(mf, lo, hi);
            (void)madvise((void *)(uintptr_t)(mf->base + lo), (size_t)(hi - lo), MADV_NORMAL);
            break;
        default:
            populate(mf, lo, hi);
            break;
        }
    }
    if (io != NULL) {
        io->bytes = bytes;
        io->ns = lares_now_ns() - t0;
    }
    return LARES_OK;
}

void mem_prefetch_async(const mem_file *mf, const mem_span *s) {
    uint64_t lo, hi;
    for (size_t i = 0; i < s->n; i++) {
        if (round_out(mf, s->r[i], &lo, &hi)) {
            willneed(mf, lo, hi);
        }
    }
}

uint64_t mem_release(const mem_file *mf, const mem_span *s) {
    uint64_t bytes = 0, lo, hi;
    for (size_t i = 0; i < s->n; i++) {
        if (!round_in(mf, s->r[i], &lo, &hi)) {
            continue;
        }
        (void)madvise((void *)(uintptr_t)(mf->base + lo), (size_t)(hi - lo), MADV_DONTNEED);
#if !defined(__APPLE__)
        if (mf->fd >= 0) {
            (void)posix_fadvise(mf->fd, (off_t)lo, (off_t)(hi - lo), POSIX_FADV_DONTNEED);
        }
#endif
        bytes += hi - lo;
    }
    return bytes;
}

uint64_t mem_resident_bytes(const mem_file *mf, const mem_span *s) {
#if defined(__APPLE__)
    char vec[4096];
#else
    unsigned char vec[4096];
#endif
    uint64_t pages = 0, lo, hi;
    for (size_t i = 0; i < s->n; i++) {
        if (!round_out(mf, s->r[i], &lo, &hi)) {
            continue;
        }
        for (uint64_t off = lo; off < hi;) {
            const uint64_t n = LARES_MIN((hi - off + mf->page - 1) / mf->page,
                                         (uint64_t)sizeof vec);
            if (mincore((void *)(uintptr_t)(mf->base + off), (size_t)(n * mf->page), vec) != 0) {
                return 0;
            }
            for (uint64_t k = 0; k < n; k++) {
                pages += vec[k] & 1;
            }
            off += n * mf->page;
        }
    }
    return pages * mf->page;
}

void mem_advise_sequential(const mem_file *mf, const mem_span *s) {
    uint64_t lo, hi;
    for (size_t i = 0; i < s->n; i++) {
        if (round_out(mf, s->r[i], &lo, &hi)) {
            (void)madvise((void *)(uintptr_t)(mf->base + lo), (size_t)(hi - lo), MADV_SEQUENTIAL);
        }
    }
}

void mem_advise_random(const mem_file *mf, const mem_span *s) {
    uint64_t lo, hi;
    for (size_t i = 0; i < s->n; i++) {
        if (round_out(mf, s->r[i], &lo, &hi)) {
            (void)madvise((void *)(uintptr_t)(mf->base + lo), (size_t)(hi - lo), MADV_RANDOM);
        }
    }
}

/* Measured on a Zen 5 under a paravirtualised kernel (Linux 6.18, ext4,
 * 2026-12-02; docs/memory.md "Resident weights on huge pages"): a pass over a
 * mapped 607 MB llama-1b Q4_0 after 300 ms asleep took 33-35 ms on average
 * when the file had been read through a plain mapping (566 of its 606 MiB
 * mapped by 2 MiB entries) and 60-105 ms when its pages came from writing it
 * (486 MiB), against 22-23 ms when it had been read through a mapping with
 * this advice (all 606 MiB), the same as a copy in anonymous huge pages. */
void mem_advise_huge(const mem_file *mf, bool on) {
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    const uintptr_t lo = (uintptr_t)mf->base - (uintptr_t)mf->base % mf->page;
    const uintptr_t hi = (uintptr_t)mf->base + (uintptr_t)mf->bytes;
    if (mf->base != NULL && hi > lo) {
        (void)madvise((void *)lo, (size_t)(hi - lo), on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    }
#else
    (void)mf;
    (void)on;
#endif
}

static void unlock_first(const mem_file *mf, const mem_span *s, size_t n) {
    uint64_t lo, hi;
    for (size_t i = 0; i < n; i++) {
        if (round_out(mf, s->r[i], &lo, &hi)) {
            (void)munlock(mf->base + lo, (size_t)(hi - lo));
        }
    }
}

lares_status mem_lock(const mem_file *mf, const mem_span *s, lares_error *err) {
    lares_status st = check_span(mf, s, err);
    if (st != LARES_OK) {
        return st;
    }
    uint64_t lo, hi;
    for (size_t i = 0; i < s->n; i++) {
        if (!round_out(mf, s->r[i], &lo, &hi)) {
            continue;
        }
        if (mlock(mf->base + lo, (size_t)(hi - lo)) != 0) {
            const int e = errno;
            unlock_first(mf, s, i);
            struct rlimit rl;
            char lim[48] = "unknown";
            if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
                if (rl.rlim_cur == RLIM_INFINITY) {
                    snprintf(lim, sizeof lim, "unlimited");
                } else {
                    snprintf(lim, sizeof lim, "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
                }
            }
            return lares_fail(err, LARES_ENOMEM,
                              "%s: cannot lock %" PRIu64 " KiB of weights in memory: %s "
                              "(RLIMIT_MEMLOCK is %s; raise it with 'ulimit -l' or run without "
                              "locking)",
                              mf->path, s->bytes / 1024, strerror(e), lim);
        }
    }
    return LARES_OK;
}

void mem_unlock(const mem_file *mf, const mem_span *s) {
    unlock_first(mf, s, s->n);
}
