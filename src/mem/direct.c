/*
 * Direct reads: a span's bytes read past the page cache into a buffer the
 * caller owns (see mem.h). This machine reads a file sequentially at about
 * twice the speed with O_DIRECT and 4 MiB requests than through the page
 * cache, and spends no CPU copying and reclaiming pages (docs/memory.md).
 *
 * Several requests stay in flight: with io_uring (liburing, when the build
 * found it and the kernel lets this process create a ring) from the calling
 * thread alone, else with a few threads each doing blocking preads. A read
 * that comes back short is resumed from where it stopped; one at the end of
 * the file leaves zeros.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* O_DIRECT is a GNU extension of <fcntl.h> */
#endif
#include "mem/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(LARES_HAVE_LIBURING)
#include <liburing.h>
#endif

#ifndef MAP_ANONYMOUS
#define MAP_ANONYMOUS MAP_ANON
#endif

struct mem_direct {
    int fd;
    char *path; /* owned, for messages */
    uint64_t file_bytes;
    mem_direct_engine engine;
#if defined(LARES_HAVE_LIBURING)
    struct io_uring ring;
#endif
};

static const char *const engine_names[MEM_DIRECT_COUNT] = {
    [MEM_DIRECT_AUTO] = "auto",
    [MEM_DIRECT_URING] = "io_uring",
    [MEM_DIRECT_THREADS] = "threads",
};

const char *mem_direct_engine_name(mem_direct_engine e) {
    return (unsigned)e < MEM_DIRECT_COUNT ? engine_names[e] : "?";
}

/* ---- the layout ---- */

lares_status mem_layout_of(const mem_span *s, size_t align, mem_layout *out, lares_error *err) {
    if (align == 0 || (align & (align - 1)) != 0) {
        return lares_fail(err, LARES_EINVAL, "mem: direct reads aligned to %zu bytes", align);
    }
    out->n = 0;
    out->bytes = 0;
    out->align = align;
    for (size_t i = 0; i < s->n; i++) {
        const uint64_t lo = s->r[i].lo - s->r[i].lo % align;
        const uint64_t hi = lares_align_up_u64(s->r[i].hi, align);
        if (out->n > 0 && lo <= out->x[out->n - 1].hi) { /* ranges are sorted */
            mem_extent *last = &out->x[out->n - 1];
            out->bytes += LARES_MAX(hi, last->hi) - last->hi;
            last->hi = LARES_MAX(hi, last->hi);
            continue;
        }
        if (out->n == out->cap) {
            const size_t cap = out->cap ? out->cap * 2 : 4;
            mem_extent *x = lares_realloc(out->x, cap * sizeof *x);
            if (x == NULL) {
                return lares_fail(err, LARES_ENOMEM, "mem: out of memory for %zu extents", cap);
            }
            out->x = x;
            out->cap = cap;
        }
        out->x[out->n++] = (mem_extent){.lo = lo, .hi = hi, .at = out->bytes};
        out->bytes += hi - lo;
    }
    return LARES_OK;
}

void mem_layout_free(mem_layout *l) {
    if (l == NULL) {
        return;
    }
    lares_free(l->x);
    memset(l, 0, sizeof *l);
}

const uint8_t *mem_layout_addr(const mem_layout *l, const uint8_t *buf, uint64_t off, uint64_t n) {
    size_t a = 0, b = l->n; /* the last extent starting at or before off */
    while (b - a > 1) {
        const size_t mid = a + (b - a) / 2;
        if (l->x[mid].lo <= off) {
            a = mid;
        } else {
            b = mid;
        }
    }
    if (l->n == 0 || l->x[a].lo > off || off + n > l->x[a].hi || off + n < off) {
        return NULL;
    }
    return buf + l->x[a].at + (off - l->x[a].lo);
}

/* ---- buffers ---- */

/* Buffers of direct reads sit on huge pages where the kernel offers them:
 * a device takes a bounded number of segments per request (254 on this
 * machine's virtual disk), so a 4 MiB read into 4 KiB pages is split into
 * several requests, into 2 MiB pages it is one: bench_mem_read measured
 * 1.0-1.5 GB/s with small pages and 2.5-3.0 GB/s with huge ones here
 * (docs/memory.md). */
#define HUGE_BYTES ((size_t)2 << 20)

void *mem_buffer_map(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= HUGE_BYTES) { /* map more, keep a 2 MiB aligned stretch */
        const size_t len = lares_align_up_u64(bytes, HUGE_BYTES) + HUGE_BYTES;
        uint8_t *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) {
            return NULL;
        }
        uint8_t *p = (uint8_t *)lares_align_up_u64((uintptr_t)raw, HUGE_BYTES);
        const size_t keep = lares_align_up_u64(bytes, 4096);
        if (p > raw) {
            (void)munmap(raw, (size_t)(p - raw));
        }
        if (raw + len > p + keep) {
            (void)munmap(p + keep, (size_t)(raw + len - (p + keep)));
        }
        (void)madvise(p, keep, MADV_HUGEPAGE);
        return p;
    }
#endif
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void mem_buffer_unmap(void *p, size_t bytes) {
    if (p != NULL) {
        (void)munmap(p, bytes);
    }
}

/* ---- requests: the extents cut into pieces of at most MEM_DIRECT_REQUEST ---- */

typedef struct request {
    uint64_t off;
    size_t len;
    uint8_t *dst;
} request;

typedef struct cutter {
    const mem_layout *l;
    uint8_t *buf;
    size_t i;     /* extent */
    uint64_t pos; /* file offset of the next piece in extent i */
} cutter;

static bool cut_next(cutter *c, request *r) {
    while (c->i < c->l->n && c->pos >= c->l->x[c->i].hi) {
        c->i++;
        c->pos = c->i < c->l->n ? c->l->x[c->i].lo : 0;
    }
    if (c->i >= c->l->n) {
        return false;
    }
    const mem_extent *x = &c->l->x[c->i];
    r->off = c->pos;
    r->len = (size_t)LARES_MIN((uint64_t)MEM_DIRECT_REQUEST, x->hi - c->pos);
    r->dst = c->buf + x->at + (c->pos - x->lo);
    c->pos += r->len;
    return true;
}

/* A read of `got` bytes of r came back: true when r is finished. Past the
 * end of the file the rest is zeros; a short read elsewhere resumes at a
 * block boundary (direct reads must start on one). */
static bool advance_request(const mem_direct *d, request *r, size_t got, size_t align) {
    if (got == 0 || r->off + got >= d->file_bytes) {
        if (got < r->len) {
            memset(r->dst + got, 0, r->len - got);
        }
        return true;
    }
    if (got >= r->len) {
        return true;
    }
    got -= got % align; /* 0: the same read again */
    r->off += got;
    r->len -= got;
    r->dst += got;
    return false;
}

/* ---- the thread engine ---- */

typedef struct thread_job {
    mem_direct *d;
    pthread_mutex_t mu;
    cutter c;
    size_t align;
    int err; /* the first errno seen; guarded by mu */
} thread_job;

static void *reader_main(void *arg) {
    thread_job *j = arg;
    for (;;) {
        request r;
        pthread_mutex_lock(&j->mu);
        const bool more = j->err == 0 && cut_next(&j->c, &r);
        pthread_mutex_unlock(&j->mu);
        if (!more) {
            return NULL;
        }
        bool done = false;
        while (!done) {
            const ssize_t got = lares_pread(j->d->fd, r.dst, r.len, (off_t)r.off);
            if (got < 0 && errno == EINTR) {
                continue;
            }
            if (got < 0) {
                const int e = errno != 0 ? errno : EIO;
                pthread_mutex_lock(&j->mu);
                j->err = j->err != 0 ? j->err : e;
                pthread_mutex_unlock(&j->mu);
                return NULL;
            }
            done = advance_request(j->d, &r, (size_t)got, j->align);
        }
    }
}

static int read_threads(mem_direct *d, const mem_layout *l, uint8_t *buf) {
    thread_job j = {.d = d, .c = {.l = l, .buf = buf, .pos = l->n > 0 ? l->x[0].lo : 0},
                    .align = l->align};
    if (pthread_mutex_init(&j.mu, NULL) != 0) {
        return ENOMEM;
    }
    pthread_t th[MEM_DIRECT_THREADS_MAX - 1];
    int n_th = 0;
    const uint64_t pieces = (l->bytes + MEM_DIRECT_REQUEST - 1) / MEM_DIRECT_REQUEST;
    while (n_th < MEM_DIRECT_THREADS_MAX - 1 && (uint64_t)n_th + 1 < pieces &&
           pthread_create(&th[n_th], NULL, reader_main, &j) == 0) {
        n_th++;
    }
    reader_main(&j); /* this thread reads too; fewer threads only read slower */
    for (int i = 0; i < n_th; i++) {
        pthread_join(th[i], NULL);
    }
    pthread_mutex_destroy(&j.mu);
    return j.err;
}

/* ---- the io_uring engine ---- */

#if defined(LARES_HAVE_LIBURING)
static int read_uring(mem_direct *d, const mem_layout *l, uint8_t *buf) {
    cutter c = {.l = l, .buf = buf, .pos = l->n > 0 ? l->x[0].lo : 0};
    request slot[MEM_DIRECT_DEPTH];
    bool busy[MEM_DIRECT_DEPTH] = {false};
    int in_flight = 0, err = 0;
    bool more = true;
    for (;;) {
        /* fill the free slots (none once an error was seen) */
        for (int k = 0; k < MEM_DIRECT_DEPTH && more && err == 0; k++) {
            if (busy[k]) {
                continue;
            }
            if (!(more = cut_next(&c, &slot[k]))) {
                break;
            }
            struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
            if (sqe == NULL) {
                err = EBUSY; /* cannot happen: the ring has a slot per request */
                break;
            }
            io_uring_prep_read(sqe, d->fd, slot[k].dst, (unsigned)slot[k].len, slot[k].off);
            io_uring_sqe_set_data64(sqe, (uint64_t)k);
            busy[k] = true;
            in_flight++;
        }
        if (in_flight == 0) {
            return err;
        }
        int rc = io_uring_submit_and_wait(&d->ring, 1);
        if (rc < 0 && rc != -EINTR) {
            /* the ring is unusable with requests in it: later reads take the threads */
            io_uring_queue_exit(&d->ring);
            d->engine = MEM_DIRECT_THREADS;
            return -rc;
        }
        struct io_uring_cqe *cqe;
        while (io_uring_peek_cqe(&d->ring, &cqe) == 0) {
            const int k = (int)io_uring_cqe_get_data64(cqe);
            const int res = cqe->res;
            io_uring_cqe_seen(&d->ring, cqe);
            bool done = true;
            if (res == -EINTR || res == -EAGAIN) {
                done = false;
            } else if (res < 0) {
                err = err != 0 ? err : -res;
            } else {
                done = advance_request(d, &slot[k], (size_t)res, l->align);
            }
            if (done || err != 0) {
                busy[k] = false;
                in_flight--;
                continue;
            }
            struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
            if (sqe == NULL) {
                err = EBUSY;
                busy[k] = false;
                in_flight--;
                continue;
            }
            io_uring_prep_read(sqe, d->fd, slot[k].dst, (unsigned)slot[k].len, slot[k].off);
            io_uring_sqe_set_data64(sqe, (uint64_t)k);
        }
    }
}
#endif

/* ---- opening and reading ---- */

static int open_direct(const char *path, const char **why) {
#if defined(O_DIRECT)
    int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
        *why = "O_DIRECT";
    }
    return fd;
#elif defined(F_NOCACHE)
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && fcntl(fd, F_NOCACHE, 1) != 0) {
        close(fd);
        *why = "F_NOCACHE";
        return -1;
    }
    return fd;
#else
    (void)path;
    *why = "direct I/O";
    errno = ENOTSUP;
    return -1;
#endif
}

void mem_direct_close(mem_direct *d) {
    if (d == NULL) {
        return;
    }
#if defined(LARES_HAVE_LIBURING)
    if (d->engine == MEM_DIRECT_URING) {
        io_uring_queue_exit(&d->ring);
    }
#endif
    if (d->fd >= 0) {
        close(d->fd);
    }
    lares_free(d->path);
    lares_free(d);
}

mem_direct_engine mem_direct_engine_of(const mem_direct *d) {
    return d->engine;
}

static lares_status start_engine(mem_direct *d, mem_direct_engine want, lares_error *err) {
#if defined(LARES_HAVE_LIBURING)
    if (want != MEM_DIRECT_THREADS) {
        const int rc = io_uring_queue_init(MEM_DIRECT_DEPTH, &d->ring, 0);
        if (rc == 0) {
            d->engine = MEM_DIRECT_URING;
            return LARES_OK;
        }
        if (want == MEM_DIRECT_URING) {
            return lares_fail(err, LARES_EUNSUPPORTED, "%s: the kernel refuses an io_uring: %s",
                              d->path, strerror(-rc));
        }
    }
#else
    if (want == MEM_DIRECT_URING) {
        return lares_fail(err, LARES_EUNSUPPORTED, "%s: this build has no io_uring (liburing)",
                          d->path);
    }
#endif
    d->engine = MEM_DIRECT_THREADS;
    return LARES_OK;
}

/* 0 or an errno */
static int read_extents(mem_direct *d, const mem_layout *l, void *buf) {
#if defined(LARES_HAVE_LIBURING)
    if (d->engine == MEM_DIRECT_URING) {
        return read_uring(d, l, buf);
    }
#endif
    return read_threads(d, l, buf);
}

lares_status mem_direct_read(mem_direct *d, const mem_layout *l, void *buf, mem_io *io,
                             lares_error *err) {
    if (l->align % MEM_DIRECT_ALIGN != 0 || (uintptr_t)buf % MEM_DIRECT_ALIGN != 0) {
        return lares_fail(err, LARES_EINVAL, "%s: direct reads need %u-byte alignment", d->path,
                          MEM_DIRECT_ALIGN);
    }
    const uint64_t t0 = lares_now_ns();
    const int e = read_extents(d, l, buf);
    if (io != NULL) {
        io->bytes = l->bytes;
        io->ns = lares_now_ns() - t0;
    }
    if (e != 0) {
        return lares_fail(err, LARES_EIO, "%s: direct read failed: %s", d->path, strerror(e));
    }
    return LARES_OK;
}

lares_status mem_direct_open(const char *path, mem_direct_engine engine, mem_direct **out,
                             lares_error *err) {
    *out = NULL;
    if ((unsigned)engine >= MEM_DIRECT_COUNT) {
        return lares_fail(err, LARES_EINVAL, "mem: unknown direct read engine %d", (int)engine);
    }
    mem_direct *d = lares_calloc(1, sizeof *d);
    char *name = d != NULL ? lares_alloc(strlen(path) + 1) : NULL;
    if (name == NULL) {
        lares_free(d);
        return lares_fail(err, LARES_ENOMEM, "mem: out of memory");
    }
    memcpy(name, path, strlen(path) + 1);
    d->path = name;
    d->engine = MEM_DIRECT_THREADS; /* until the ring exists: close frees no ring */
    const char *why = "";
    d->fd = open_direct(path, &why);
    struct stat sb;
    if (d->fd < 0 || fstat(d->fd, &sb) != 0) {
        const int e = errno;
        mem_direct_close(d);
        return lares_fail(err, LARES_EUNSUPPORTED, "%s: no direct reads (%s: %s)", path, why,
                          strerror(e));
    }
    d->file_bytes = (uint64_t)sb.st_size;
    lares_status st = start_engine(d, engine, err);
    if (st != LARES_OK) {
        mem_direct_close(d);
        return st;
    }
    /* some file systems accept the flag and refuse the reads: try one */
    void *probe = mem_buffer_map(MEM_DIRECT_ALIGN);
    if (probe == NULL) {
        mem_direct_close(d);
        return lares_fail(err, LARES_ENOMEM, "mem: out of memory");
    }
    mem_extent x = {.lo = 0, .hi = MEM_DIRECT_ALIGN, .at = 0};
    const mem_layout one = {.x = &x, .n = 1, .cap = 1, .bytes = MEM_DIRECT_ALIGN,
                            .align = MEM_DIRECT_ALIGN};
    const int e = read_extents(d, &one, probe);
    mem_buffer_unmap(probe, MEM_DIRECT_ALIGN);
    if (e != 0) {
        mem_direct_close(d);
        return lares_fail(err, LARES_EUNSUPPORTED, "%s: no direct reads (a first read failed: %s)",
                          path, strerror(e));
    }
    *out = d;
    return LARES_OK;
}
