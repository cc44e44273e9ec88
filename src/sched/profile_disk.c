/*
 * How fast this device reads from the disk that holds the model: sequential
 * throughput (what re-reading an overflowing share costs on Linux and
 * Android) and random throughput (4 KiB reads at queue depth 1, what page
 * faults cost on macOS), each in a bounded time slice.
 *
 * The page cache must not answer. Sequential reads are buffered 4 MiB reads
 * after posix_fadvise(DONTNEED) has dropped the file's cached pages: cold, but
 * with the kernel's readahead, as lares itself reads a model (the testbed
 * figure "sequential buffered read, cold page cache" is measured the same
 * way). Random reads bypass the cache with O_DIRECT (Linux) or F_NOCACHE
 * (macOS); where the file system refuses direct I/O (tmpfs, some overlays)
 * they are buffered without readahead after DONTNEED, and the result says they
 * were not direct.
 *
 * Streaming throughput is what the executor gets when it streams a model
 * that does not fit (exec/stream.c): the file mapped, read in unit-sized
 * pieces with mem_prefetch (the default method: MADV_POPULATE_READ, the fault
 * path's large read-ahead) and each piece released after use (mem_release).
 * Measured inside the device's cgroups it includes what they impose on that
 * path: a blkio throttle, the page cache charged to a memory limit, the kernel
 * time of reading spent from a CPU quota. This is the figure the latency model
 * prices streaming with on Linux and Android.
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

#define SEQ_BLOCK  (4u << 20)
#define RAND_BLOCK 4096u

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

/* Streams [0, size) of fd's file as the executor does, for up to slice_s:
 * bytes per second, 0 when nothing could be read; *cpu_Bps: bytes per second
 * of the reading thread's CPU time (the kernel allocating, charging and
 * mapping the pages: under a CPU quota this comes out of the same quota as
 * the compute). Both count the release of each piece, which the executor's
 * prefetch thread also does. The pieces start at a different offset than the
 * sequential test so that they are cold. */
static double stream_rate(int fd, const char *path, uint64_t size, uint64_t start, double slice_s,
                          uint64_t *bytes, double *cpu_Bps) {
    *bytes = 0;
    *cpu_Bps = 0;
    /* small files (a test's temporary one): pieces of half the file */
    const uint64_t piece = LARES_MIN((uint64_t)STREAM_PIECE, size / 2 / 4096 * 4096);
    if (piece < (1u << 20)) {
        return 0;
    }
    void *base = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        return 0;
    }
    mem_file mf;
    mem_file_init(&mf, base, size, fd, path);
    mem_span span = {0};
    const uint64_t pieces = size / piece;
    uint64_t at = (start / piece) % pieces, got = 0;
    double busy = 0, cpu = 0;
    const double t_end = sched_now_s() + slice_s;
    /* whole pieces only, at least two: the rate of a tenth of a piece would be
     * the kernel's first read-ahead, not the stream */
    for (int n = 0; n < 2 || sched_now_s() < t_end; n++) {
        mem_span_clear(&span);
        if (mem_span_add(&span, at * piece, (at + 1) * piece, NULL) != LARES_OK) {
            break;
        }
        mem_io io = {0};
        const double c0 = thread_cpu_s();
        if (mem_prefetch(&mf, &span, MEM_READ_DEFAULT, NULL, 0, &io, NULL) != LARES_OK) {
            break;
        }
        const double r0 = sched_now_s();
        (void)mem_release(&mf, &span);
        busy += (double)io.ns / 1e9 + (sched_now_s() - r0);
        cpu += thread_cpu_s() - c0;
        got += io.bytes;
        at = (at + 1) % pieces;
        if (n > 1000) {
            break;
        }
    }
    mem_span_free(&span);
    munmap(base, (size_t)size);
    *bytes = got;
    *cpu_Bps = cpu > 0 ? (double)got / cpu : 0;
    return busy > 0 ? (double)got / busy : 0;
}

lares_status sched_profile_disk(const char *file, const char *dir, uint32_t budget_ms,
                                sched_device *d, bool *direct_out, uint64_t *test_bytes,
                                lares_error *err) {
    uint8_t *buf = lares_alloc_aligned(SEQ_BLOCK, 4096);
    if (buf == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    char tmp[1100] = "";
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
    }
    struct stat sb;
    bool direct = false;
    int fdb = open(path, O_RDONLY);
    fd = open_uncached(path, &direct);
    if (tmp[0]) {
        unlink(tmp); /* the open descriptors keep it readable */
    }
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
    /* sequential: cold buffered 4 MiB blocks from the start, wrapping at the end */
    drop_cache(fdb, false);
    double t0 = sched_now_s(), t_end = t0 + 0.3 * budget;
    uint64_t got = 0, off = 0;
    while (sched_now_s() < t_end && got < (4ull << 30)) {
        ssize_t r = lares_pread(fdb, buf, SEQ_BLOCK, (off_t)off);
        if (r < 0) {
            int e = errno;
            close(fdb);
            st = lares_fail(err, LARES_EIO, "%s: read at %" PRIu64 ": %s", path, off, strerror(e));
            goto done;
        }
        got += (uint64_t)r;
        off += (uint64_t)r;
        if (r == 0 || off >= size) {
            off = 0;
            drop_cache(fdb, false);
        }
    }
    double dt = sched_now_s() - t0;
    d->disk_seq_Bps = dt > 0 && got > 0 ? (double)got / dt : 0;
    *test_bytes = got;
    /* streaming as the executor does, from the middle of the file (cold) */
    drop_cache(fdb, false);
    uint64_t streamed = 0;
    d->disk_stream_Bps =
        stream_rate(fdb, path, size, size / 2, 0.5 * budget, &streamed, &d->disk_stream_cpu_Bps);
    *test_bytes += streamed;
    drop_cache(fdb, false); /* leave the cache as we found it (cold) */
    close(fdb);
    /* random: 4 KiB at aligned offsets, one at a time */
    drop_cache(fd, direct);
#if defined(POSIX_FADV_RANDOM)
    if (!direct) { /* no readahead: it would turn one 4 KiB read into many */
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    }
#endif
    uint64_t s = 0x9e3779b97f4a7c15ull ^ size, blocks = size / RAND_BLOCK;
    t0 = sched_now_s();
    t_end = t0 + 0.2 * budget;
    got = 0;
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
    dt = sched_now_s() - t0;
    d->disk_rand_Bps = dt > 0 && got > 0 ? (double)got / dt : 0;
    *direct_out = direct;
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
    if (fd >= 0) {
        close(fd);
    }
    lares_free_aligned(buf);
    return st;
}
