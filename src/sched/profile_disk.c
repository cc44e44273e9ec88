/*
 * How fast this device reads from the disk that holds the model: sequential
 * throughput (what re-reading an overflowing share costs on Linux and
 * Android) and random throughput (4 KiB reads at queue depth 1, what page
 * faults cost on macOS), each in a bounded time slice.
 *
 * The page cache must not answer, whatever other processes hold in it. Three
 * guards (docs/scheduling-impl.md, "The disk profile and the caches"):
 *  - Direct reads first: O_DIRECT reads (F_NOCACHE on macOS) from the start
 *    of the file, one pass at most, made as the executor's direct streaming
 *    makes them (mem_direct_read: 4 MiB requests, several in flight). They
 *    never come from this system's page cache, so they are what streaming
 *    costs where the executor reads directly (its default wherever the file
 *    system takes them) and otherwise bound the other figures: the planner
 *    prices page-cache streaming at no more than SCHED_DIRECT_HEADROOM times
 *    this rate (sched_disk_stream_Bps). Where the file system refuses direct I/O
 *    (procfs, tmpfs before Linux 6.6, some overlays) there is no bound, and
 *    the profile says so in disk.note.
 *  - Before the sequential and the streaming tests, the file's pages are
 *    dropped (posix_fadvise DONTNEED) and mincore tells which blocks stayed:
 *    DONTNEED leaves the pages another process maps (a model another device
 *    or a server has open). Those blocks are skipped, neither counted nor
 *    timed; their share is the profile's cached_share. Where every block
 *    stayed, the sequential test times them anyway (there is no other figure
 *    to give; the direct bound then holds the planner) and the streaming
 *    figure is left unknown.
 *  - The tests time only their reads, not the eviction between them.
 * What none of this sees is a cache below the system: a virtual disk whose
 * host caches the image answers direct reads too, and the bound is then
 * looser than a cold disk would give (docs/performance.md, issue 16).
 *
 * Sequential reads are buffered 4 MiB reads: cold, but with the kernel's
 * readahead, as lares itself reads a model (the testbed figure "sequential
 * buffered read, cold page cache" is measured the same way). Random reads
 * bypass the cache with O_DIRECT (Linux) or F_NOCACHE (macOS); where the file
 * system refuses direct I/O they are buffered without readahead after
 * DONTNEED, and the result says they were not direct.
 *
 * Streaming throughput is what the executor gets when it streams a model
 * that does not fit (exec/stream.c): the file mapped, read in unit-sized
 * pieces with mem_prefetch (the default method: MADV_POPULATE_READ, the fault
 * path's large read-ahead) and each piece released after use (mem_release).
 * Measured inside the device's cgroups it includes what they impose on that
 * path: a blkio throttle, the page cache charged to a memory limit, the kernel
 * time of reading spent from a CPU quota. This is the figure the latency model
 * prices streaming with on Linux and Android where direct reads are refused
 * (or the bound they give where they are not: --stream-io mmap).
 *
 * Without a model file, a temporary file of up to 64 MiB is written in the
 * given directory (and unlinked at once, so nothing is left behind).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* O_DIRECT is a GNU extension of <fcntl.h> */
#endif
#include "mem/mem.h"
#include "sched/sched_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define SEQ_BLOCK    (4u << 20)
#define DIRECT_UNIT  (32u << 20) /* about a streamed layer of a 1-3B model */
#define RAND_BLOCK   4096u
/* a block with more than 1/HELD_SHARE of its pages still in the page cache
 * after DONTNEED is held by another process: not timed */
#define HELD_SHARE 64

/* Opens path for reads that bypass the page cache; *direct says whether they do. */
static int open_uncached(const char *path, bool *direct) {
#if defined(O_DIRECT)
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd >= 0) {
        *direct = true;
        return fd;
    }
#endif
    int fd2 = open(path, O_RDONLY);
    *direct = false;
#if defined(F_NOCACHE)
    if (fd2 >= 0 && fcntl(fd2, F_NOCACHE, 1) == 0) {
        *direct = true;
    }
#endif
    return fd2;
}

static void drop_cache(int fd, bool direct) {
#if defined(POSIX_FADV_DONTNEED)
    if (!direct) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
#else
    (void)fd;
    (void)direct;
#endif
}

/* Writes a temporary file of `bytes` pseudo-random bytes in dir; returns its
 * path in out (the caller unlinks it). */
static lares_status make_test_file(const char *dir, uint64_t bytes, uint8_t *buf, char *out,
                                   size_t cap, lares_error *err) {
    snprintf(out, cap, "%s/.lares-disk-test-XXXXXX", dir);
    int fd = mkstemp(out);
    if (fd < 0) {
        return lares_fail(err, LARES_EIO, "%s: cannot create a test file: %s", dir,
                          strerror(errno));
    }
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < SEQ_BLOCK / 8; i++) {
        uint64_t v = sched_xorshift(&s);
        memcpy(buf + i * 8, &v, 8);
    }
    for (uint64_t done = 0; done < bytes;) {
        size_t n = (size_t)LARES_MIN((uint64_t)SEQ_BLOCK, bytes - done);
        buf[0] = (uint8_t)(done >> 20); /* no two blocks alike: no deduplication */
        ssize_t w = write(fd, buf, n);
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(out);
            return lares_fail(err, LARES_EIO, "%s: writing the disk test file: %s", out,
                              w < 0 ? strerror(e) : "short write");
        }
        done += (uint64_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(out);
        return lares_fail(err, LARES_EIO, "%s: fsync: %s", out, strerror(e));
    }
    close(fd);
    return LARES_OK;
}

/* Reads `len` bytes at `off`; on EINVAL from direct I/O falls back to buffered. */
static ssize_t read_at(int *fd, const char *path, bool *direct, void *buf, size_t len,
                       uint64_t off) {
    ssize_t r = lares_pread(*fd, buf, len, (off_t)off);
    if (r < 0 && errno == EINVAL && *direct) {
        /* the device wants another alignment than ours: measure buffered instead */
        int f2 = open(path, O_RDONLY);
        if (f2 < 0) {
            return -1;
        }
        close(*fd);
        *fd = f2;
        *direct = false;
        drop_cache(*fd, false);
        r = lares_pread(*fd, buf, len, (off_t)off);
    }
    return r;
}

/* A piece of the stream: a layer of a 1-3B model, a third of a 7B one */
#define STREAM_PIECE (32u << 20)

/* CPU time of the calling thread, seconds */
static double thread_cpu_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        return 0;
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Drops the file from the page cache once; marks and counts the blocks of
 * `unit` bytes that stayed resident all the same. */
static size_t evict_once(const mem_file *mf, uint64_t unit, bool *held, size_t n_blocks,
                         mem_span *span) {
#if defined(POSIX_FADV_DONTNEED)
    (void)posix_fadvise(mf->fd, 0, 0, POSIX_FADV_DONTNEED);
#endif
    size_t n_held = 0;
    for (size_t b = 0; b < n_blocks; b++) {
        const uint64_t lo = b * unit, hi = LARES_MIN(lo + unit, mf->bytes);
        mem_span_clear(span);
        held[b] = mem_span_add(span, lo, hi, NULL) == LARES_OK &&
                  mem_resident_bytes(mf, span) * HELD_SHARE > hi - lo;
        n_held += held[b];
    }
    return n_held;
}

/* The file's pages dropped from the page cache where the kernel lets it, and
 * held[b] set for each `unit`-byte block b of which more than 1/HELD_SHARE is
 * still there afterwards (pages another process maps, which DONTNEED leaves).
 * Returns how many blocks are held. A page whose read is still in flight (the
 * kernel's read-ahead past the last block a test read) is locked, and
 * DONTNEED leaves it too: when blocks stayed, another try after that I/O had
 * time to end tells them from the pages another process maps, and a third
 * where the second still saw fewer (the I/O was ending). Every block of a
 * small file can be in flight at once (a test's 24 MiB file in two pieces,
 * on a loaded machine: a sanitizer run here saw both held, none timed). */
static size_t evict_file(const mem_file *mf, uint64_t unit, bool *held, size_t n_blocks,
                         mem_span *span) {
    size_t n_held = evict_once(mf, unit, held, n_blocks, span);
    for (long ms = 10; n_held > 0 && ms <= 40; ms *= 4) {
        const struct timespec wait = {0, ms * 1000 * 1000};
        (void)nanosleep(&wait, NULL);
        const size_t again = evict_once(mf, unit, held, n_blocks, span);
        if (again == n_held) {
            return again; /* the same blocks stay: another process maps them */
        }
        n_held = again;
    }
    return n_held;
}

/* The reads of one test: bytes timed and the seconds spent on them; bytes
 * the page cache held, skipped (held_bytes) or timed all the same because
 * nothing else was there (warm_bytes, part of bytes). */
typedef struct read_tally {
    uint64_t bytes, held_bytes, warm_bytes;
    double busy_s;
} read_tally;

static double tally_rate(const read_tally *t) {
    return t->busy_s > 0 && t->bytes > 0 ? (double)t->bytes / t->busy_s : 0;
}

double sched_disk_direct_rate(const char *path, uint64_t size, double slice_s, uint64_t *bytes,
                              char *note, size_t cap) {
    *bytes = 0;
    lares_error e = {0};
    mem_direct *dr = NULL;
    if (mem_direct_open(path, MEM_DIRECT_AUTO, &dr, &e) != LARES_OK) {
        snprintf(note, cap, "direct reads refused by the file system (%s): the stream figure "
                 "has no bound", e.msg);
        return 0;
    }
    uint8_t *buf = mem_buffer_map(DIRECT_UNIT);
    if (buf == NULL) {
        mem_direct_close(dr);
        snprintf(note, cap, "no memory for the direct reads: the stream figure has no bound");
        return 0;
    }
    /* units as the executor reads a streamed layer: one extent, cut by
     * mem_direct_read into MEM_DIRECT_REQUEST reads, MEM_DIRECT_DEPTH in flight */
    read_tally t = {0};
    const double t_end = sched_now_s() + slice_s;
    for (uint64_t off = 0; off < size && (t.bytes == 0 || sched_now_s() < t_end);) {
        uint64_t n = LARES_MIN((uint64_t)DIRECT_UNIT, size - off);
        mem_extent x = {off, off + ((n + MEM_DIRECT_ALIGN - 1) & ~(uint64_t)(MEM_DIRECT_ALIGN - 1)), 0};
        mem_layout l = {&x, 1, 1, x.hi - x.lo, MEM_DIRECT_ALIGN};
        mem_io io = {0};
        if (mem_direct_read(dr, &l, buf, &io, &e) != LARES_OK) {
            /* EINVAL: the device wants another alignment than ours */
            snprintf(note, cap, "direct reads failed (%s): the stream figure has no bound", e.msg);
            t.bytes = 0;
            break;
        }
        t.busy_s += (double)io.ns / 1e9;
        t.bytes += n;
        off += n;
    }
    mem_buffer_unmap(buf, DIRECT_UNIT);
    mem_direct_close(dr);
    *bytes = t.bytes;
    return tally_rate(&t);
}

/* Cold buffered reads of SEQ_BLOCK from the start, wrapping at the end (and
 * evicting again), for up to slice_s; blocks the page cache holds are skipped. */
static lares_status seq_rate(const mem_file *mf, uint8_t *buf, bool *held, size_t n_blocks,
                             mem_span *span, double slice_s, read_tally *t, lares_error *err) {
    /* every block held: time them all the same (the direct bound holds the planner) */
    bool time_held = evict_file(mf, SEQ_BLOCK, held, n_blocks, span) == n_blocks;
    const double t_end = sched_now_s() + slice_s;
    for (size_t b = 0; sched_now_s() < t_end && t->bytes < (4ull << 30);) {
        const uint64_t off = (uint64_t)b * SEQ_BLOCK;
        const size_t len = (size_t)LARES_MIN((uint64_t)SEQ_BLOCK, mf->bytes - off);
        if (held[b] && !time_held) {
            t->held_bytes += len;
        } else {
            const double t0 = sched_now_s();
            ssize_t r = lares_pread(mf->fd, buf, len, (off_t)off);
            if (r < 0) {
                return lares_fail(err, LARES_EIO, "%s: read at %" PRIu64 ": %s", mf->path, off,
                                  strerror(errno));
            }
            t->busy_s += sched_now_s() - t0;
            t->bytes += (uint64_t)r;
            if (held[b]) {
                t->warm_bytes += (uint64_t)r; /* timed, but not cold */
            }
        }
        if (++b == n_blocks) {
            b = 0;
            time_held = evict_file(mf, SEQ_BLOCK, held, n_blocks, span) == n_blocks;
        }
    }
    return LARES_OK;
}

/* Streams pieces of the file as the executor does, from the piece at `start`
 * on, skipping the pieces the page cache holds, for up to slice_s: *cpu_Bps:
 * bytes per second of the reading thread's CPU time (the kernel allocating,
 * charging and mapping the pages: under a CPU quota this comes out of the
 * same quota as the compute). Both count the release of each piece, which the
 * executor's prefetch thread also does. */
static void stream_rate(const mem_file *mf, uint64_t start, double slice_s, mem_span *span,
                        read_tally *t, double *cpu_Bps) {
    *cpu_Bps = 0;
    /* small files (a test's temporary one): pieces of half the file */
    const uint64_t piece = LARES_MIN((uint64_t)STREAM_PIECE, mf->bytes / 2 / 4096 * 4096);
    if (piece < (1u << 20)) {
        return;
    }
    const size_t pieces = (size_t)(mf->bytes / piece);
    bool *held = lares_calloc(pieces, sizeof *held);
    if (held == NULL) {
        return;
    }
    size_t n_held = evict_file(mf, piece, held, pieces, span);
    size_t at = (size_t)(start / piece) % pieces, timed = 0;
    double cpu = 0;
    const double t_end = sched_now_s() + slice_s;
    /* whole pieces only, at least two: the rate of a tenth of a piece would be
     * the kernel's first read-ahead, not the stream */
    for (size_t looked = 0; n_held < pieces && (timed < 2 || sched_now_s() < t_end) &&
                            looked < 1000;
         looked++) {
        if (held[at]) {
            t->held_bytes += piece;
        } else {
            mem_span_clear(span);
            if (mem_span_add(span, at * piece, (at + 1) * piece, NULL) != LARES_OK) {
                break;
            }
            mem_io io = {0};
            const double c0 = thread_cpu_s();
            if (mem_prefetch(mf, span, MEM_READ_DEFAULT, NULL, 0, &io, NULL) != LARES_OK) {
                break;
            }
            const double r0 = sched_now_s();
            (void)mem_release(mf, span);
            t->busy_s += (double)io.ns / 1e9 + (sched_now_s() - r0);
            cpu += thread_cpu_s() - c0;
            t->bytes += io.bytes;
            timed++;
        }
        if (++at == pieces) {
            at = 0;
            n_held = evict_file(mf, piece, held, pieces, span); /* ours are gone: only others' */
        }
    }
    if (n_held == pieces) {
        t->held_bytes += (uint64_t)pieces * piece; /* nothing cold to time */
    }
    lares_free(held);
    *cpu_Bps = cpu > 0 ? (double)t->bytes / cpu : 0;
}

/* The sequential, direct and streaming tests on the buffered descriptor fdb. */
static lares_status buffered_tests(int fdb, const char *path, uint64_t size, uint8_t *buf,
                                   double budget, sched_device *d, sched_profile_info *info,
                                   lares_error *err) {
    /* direct first: the other tests would leave what they read in the
     * caches below the system (a virtual disk's host) */
    uint64_t direct_bytes = 0;
    d->disk_direct_Bps =
        sched_disk_direct_rate(path, size, 0.15 * budget, &direct_bytes, info->disk_note,
                               sizeof info->disk_note);
    void *base = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fdb, 0);
    if (base == MAP_FAILED) {
        return lares_fail(err, LARES_EIO, "%s: mmap: %s", path, strerror(errno));
    }
    mem_file mf;
    mem_file_init(&mf, base, size, fdb, path);
    mem_span span = {0};
    const size_t n_blocks = (size_t)((size + SEQ_BLOCK - 1) / SEQ_BLOCK);
    bool *held = lares_calloc(n_blocks, sizeof *held);
    lares_status st = LARES_OK;
    read_tally seq = {0}, str = {0};
    if (held == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    } else {
        st = seq_rate(&mf, buf, held, n_blocks, &span, 0.25 * budget, &seq, err);
    }
    if (st == LARES_OK) {
        d->disk_seq_Bps = tally_rate(&seq);
        /* streaming as the executor does, from the middle of the file */
        stream_rate(&mf, size / 2, 0.45 * budget, &span, &str, &d->disk_stream_cpu_Bps);
        d->disk_stream_Bps = tally_rate(&str);
        const uint64_t looked = seq.bytes + seq.held_bytes + str.bytes + str.held_bytes;
        const uint64_t warm = seq.held_bytes + seq.warm_bytes + str.held_bytes;
        d->disk_cached_share = looked > 0 ? (double)warm / (double)looked : 0;
        d->disk_cached_share = LARES_MIN(d->disk_cached_share, 1.0);
        info->disk_test_bytes = direct_bytes + seq.bytes + str.bytes;
#if defined(POSIX_FADV_DONTNEED)
        (void)posix_fadvise(fdb, 0, 0, POSIX_FADV_DONTNEED); /* leave the cache cold */
#endif
    }
    if (st == LARES_OK && d->disk_cached_share > 0 && info->disk_note[0] == '\0') {
        snprintf(info->disk_note, sizeof info->disk_note,
                 "%.0f %% of the bytes looked at stayed in the page cache (another process "
                 "maps them): %s", 100 * d->disk_cached_share,
                 seq.warm_bytes > 0 ? "nothing was cold, the sequential figure is the cache's"
                                    : "skipped, not timed");
    }
    lares_free(held);
    mem_span_free(&span);
    munmap(base, (size_t)size);
    return st;
}

lares_status sched_profile_disk(const char *file, const char *dir, uint32_t budget_ms,
                                sched_device *d, sched_profile_info *info, lares_error *err) {
    uint8_t *buf = lares_alloc_aligned(SEQ_BLOCK, 4096);
    if (buf == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    info->disk_note[0] = '\0';
    info->disk_test_bytes = 0;
    char tmp[1100] = "";
    bool tmp_left = false; /* the temporary file is still linked */
    const char *path = file;
    lares_status st = LARES_OK;
    int fd = -1;
    if (path == NULL) {
        /* about 0.1 s of writing at 640 MB/s, less for short budgets */
        uint64_t bytes = budget_ms >= 1000 ? 64ull << 20 : 16ull << 20;
        if ((st = make_test_file(dir, bytes, buf, tmp, sizeof tmp, err)) != LARES_OK) {
            goto done;
        }
        path = tmp;
        tmp_left = true;
    }
    struct stat sb;
    bool direct = false;
    int fdb = open(path, O_RDONLY);
    fd = open_uncached(path, &direct);
    if (fd < 0 || fdb < 0 || fstat(fd, &sb) != 0) {
        st = lares_fail(err, LARES_EIO, "%s: %s", path, strerror(errno));
        if (fdb >= 0) {
            close(fdb);
        }
        goto done;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < RAND_BLOCK) {
        close(fdb);
        st = lares_fail(err, LARES_EINVAL, "%s: %" PRIu64 " bytes is too small to time a disk",
                        path, size);
        goto done;
    }
    const double budget = budget_ms / 1e3;
    st = buffered_tests(fdb, path, size, buf, budget, d, info, err);
    close(fdb);
    if (tmp[0]) {
        unlink(tmp); /* fd keeps it readable; nothing is left behind */
        tmp_left = false;
    }
    if (st != LARES_OK) {
        goto done;
    }
    /* random: 4 KiB at aligned offsets, one at a time */
    drop_cache(fd, direct);
#if defined(POSIX_FADV_RANDOM)
    if (!direct) { /* no readahead: it would turn one 4 KiB read into many */
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    }
#endif
    uint64_t s = 0x9e3779b97f4a7c15ull ^ size, blocks = size / RAND_BLOCK, got = 0;
    const double t0 = sched_now_s(), t_end = t0 + 0.15 * budget;
    while (sched_now_s() < t_end) {
        uint64_t at = (sched_xorshift(&s) % blocks) * RAND_BLOCK;
        ssize_t r = read_at(&fd, path, &direct, buf, RAND_BLOCK, at);
        if (r <= 0) {
            st = lares_fail(err, LARES_EIO, "%s: read at %" PRIu64 ": %s", path, at,
                            r < 0 ? strerror(errno) : "end of file");
            goto done;
        }
        got += (uint64_t)r;
    }
    const double dt = sched_now_s() - t0;
    d->disk_rand_Bps = dt > 0 && got > 0 ? (double)got / dt : 0;
    info->disk_direct = direct;
    /* room for a model share on that file system (the whole model, when it is there) */
    struct statvfs vs;
    if (file != NULL) {
        d->disk_free_bytes = -1;
    } else if (statvfs(dir, &vs) == 0) {
        uint64_t fr = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
        d->disk_free_bytes = fr > INT64_MAX ? INT64_MAX : (int64_t)fr;
    }
    snprintf(d->disk_path, sizeof d->disk_path, "%s", file ? file : dir);
    if (!(d->disk_seq_Bps > 0)) {
        st = lares_fail(err, LARES_EIO, "%s: no bytes read in %u ms", path, budget_ms);
    }
done:
    if (tmp_left) {
        unlink(tmp);
    }
    if (fd >= 0) {
        close(fd);
    }
    lares_free_aligned(buf);
    return st;
}
