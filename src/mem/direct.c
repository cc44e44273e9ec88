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

#define MEM_DIRECT_TICKETS 64 /* reads of mem_direct_submit not yet finished, at most */

typedef struct request {
    uint64_t off;
    size_t len;
    uint8_t *dst;
} request;

typedef struct piece {
    request r;
    uint64_t ticket;
} piece;

struct mem_direct {
    int fd;
    char *path; /* owned, for messages */
    uint64_t file_bytes;
    mem_direct_engine engine;
#if defined(LARES_HAVE_LIBURING)
    struct io_uring ring;
    /* reads in flight (the io_uring engine) */
    piece *queue;                 /* owned: pieces waiting for room in the ring */
    size_t q_head, q_n, q_cap;
    piece slot[MEM_DIRECT_DEPTH]; /* in the ring */
    bool busy[MEM_DIRECT_DEPTH];
    int in_flight;
    uint64_t next_ticket, oldest; /* tickets [oldest, next_ticket) may be unfinished */
    uint32_t left[MEM_DIRECT_TICKETS]; /* pieces not done, per ticket */
    int err[MEM_DIRECT_TICKETS];       /* its first errno */
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

lares_status mem_layout_append(mem_layout *dst, const mem_layout *src, uint64_t at,
                               lares_error *err) {
    if (dst->n == 0) {
        dst->align = src->align;
    }
    if (dst->align != src->align) {
        return lares_fail(err, LARES_EINVAL, "mem: layouts aligned to %zu and %zu bytes",
                          dst->align, src->align);
    }
    if (dst->n + src->n > dst->cap) {
        const size_t cap = LARES_MAX(dst->n + src->n, dst->cap * 2);
        mem_extent *x = lares_realloc(dst->x, cap * sizeof *x);
        if (x == NULL) {
            return lares_fail(err, LARES_ENOMEM, "mem: out of memory for %zu extents", cap);
        }
        dst->x = x;
        dst->cap = cap;
    }
    for (size_t i = 0; i < src->n; i++) { /* insertion: a few dozen extents */
        mem_extent x = src->x[i];
        x.at += at;
        size_t j = dst->n++;
        for (; j > 0 && dst->x[j - 1].lo > x.lo; j--) {
            dst->x[j] = dst->x[j - 1];
        }
        dst->x[j] = x;
        dst->bytes += x.hi - x.lo;
    }
    return LARES_OK;
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

#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

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

/* (small pages: in this machine's VM a fresh huge page was zeroed at 0.3
 * GB/s the first time, small ones at 2.1, and a slot is filled once or a
 * few times, where a unit's buffer is filled every token) */
void *mem_buffer_reserve(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void mem_buffer_trim(void *p, size_t bytes) {
    const uintptr_t lo = lares_align_up_u64((uintptr_t)p, 4096);
    const uintptr_t hi = ((uintptr_t)p + bytes) / 4096 * 4096;
    if (hi > lo) {
        (void)madvise((void *)lo, (size_t)(hi - lo), MADV_DONTNEED);
    }
}

void mem_buffer_unmap(void *p, size_t bytes) {
    if (p != NULL) {
        (void)munmap(p, bytes);
    }
}

/* ---- requests: the extents cut into pieces of at most MEM_DIRECT_REQUEST ---- */

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

/* ---- the io_uring engine: reads in flight while the caller works ----
 *
 * A read (mem_direct_submit) is a ticket: its extents cut into pieces that
 * wait in `queue` until the ring has room for them (MEM_DIRECT_DEPTH in
 * flight). Completions are reaped by whichever call comes next (submit,
 * finish), which also submits the waiting pieces; a short read goes
 * back into the ring for its rest. Tickets finish in any order: `left`
 * counts each one's pieces not yet done, `err` keeps its first error (its
 * pieces still waiting are then dropped). */

#if defined(LARES_HAVE_LIBURING)
/* a ticket's place in left and err */
static size_t ticket_slot(uint64_t t) {
    return (size_t)(t % MEM_DIRECT_TICKETS);
}

/* Submits waiting pieces while the ring has room; 0 or an errno. */
static int fill(mem_direct *d) {
    int put = 0;
    for (int k = 0; k < MEM_DIRECT_DEPTH && d->q_head < d->q_n; k++) {
        if (d->busy[k]) {
            continue;
        }
        const piece p = d->queue[d->q_head++];
        const size_t t = ticket_slot(p.ticket);
        if (d->err[t] != 0) { /* its ticket failed: not read */
            d->left[t]--;
            k--;
            continue;
        }
        struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
        if (sqe == NULL) { /* cannot happen: the ring has an entry per slot */
            d->q_head--;
            break;
        }
        d->slot[k] = p;
        d->busy[k] = true;
        d->in_flight++;
        io_uring_prep_read(sqe, d->fd, p.r.dst, (unsigned)p.r.len, p.r.off);
        io_uring_sqe_set_data64(sqe, (uint64_t)k);
        put++;
    }
    if (d->q_head == d->q_n) {
        d->q_head = d->q_n = 0;
    }
    const int rc = put > 0 ? io_uring_submit(&d->ring) : 0;
    return rc < 0 && rc != -EINTR && rc != -EAGAIN ? -rc : 0;
}

/* The ring failed with requests in it: every ticket not finished fails with
 * e, and later reads take the threads. */
static void ring_failed(mem_direct *d, int e) {
    io_uring_queue_exit(&d->ring);
    d->engine = MEM_DIRECT_THREADS;
    for (uint64_t t = d->oldest; t < d->next_ticket; t++) {
        const size_t k = ticket_slot(t);
        if (d->left[k] > 0) {
            d->left[k] = 0;
            d->err[k] = d->err[k] != 0 ? d->err[k] : e;
        }
    }
    d->q_head = d->q_n = 0;
    d->in_flight = 0;
    memset(d->busy, 0, sizeof d->busy);
    d->oldest = d->next_ticket;
}

/* Reaps what has completed (waiting for one completion first when `wait`
 * and reads are in flight), then refills the ring. */
static void reap(mem_direct *d, bool wait) {
    int e = fill(d);
    if (e == 0 && wait && d->in_flight > 0) {
        struct io_uring_cqe *cqe;
        const int rc = io_uring_wait_cqe(&d->ring, &cqe);
        e = rc < 0 && rc != -EINTR ? -rc : 0;
    }
    if (e != 0) {
        ring_failed(d, e);
        return;
    }
    struct io_uring_cqe *cqe;
    bool resubmit = false;
    while (io_uring_peek_cqe(&d->ring, &cqe) == 0) {
        const int k = (int)io_uring_cqe_get_data64(cqe);
        const int res = cqe->res;
        io_uring_cqe_seen(&d->ring, cqe);
        piece *p = &d->slot[k];
        const size_t t = ticket_slot(p->ticket);
        bool done = true;
        if (res == -EINTR || res == -EAGAIN) {
            done = false;
        } else if (res < 0) {
            d->err[t] = d->err[t] != 0 ? d->err[t] : -res;
        } else {
            done = advance_request(d, &p->r, (size_t)res, MEM_DIRECT_ALIGN);
        }
        struct io_uring_sqe *sqe = done ? NULL : io_uring_get_sqe(&d->ring);
        if (sqe == NULL) {
            if (!done) {
                d->err[t] = d->err[t] != 0 ? d->err[t] : EBUSY;
            }
            d->busy[k] = false;
            d->in_flight--;
            d->left[t]--;
            continue;
        }
        io_uring_prep_read(sqe, d->fd, p->r.dst, (unsigned)p->r.len, p->r.off);
        io_uring_sqe_set_data64(sqe, (uint64_t)k);
        resubmit = true;
    }
    if (resubmit) { /* the rests of short reads */
        const int rc = io_uring_submit(&d->ring);
        e = rc < 0 && rc != -EINTR && rc != -EAGAIN ? -rc : 0;
    }
    if (e == 0) {
        e = fill(d);
    }
    if (e != 0) {
        ring_failed(d, e);
        return;
    }
    while (d->oldest < d->next_ticket && d->left[ticket_slot(d->oldest)] == 0) {
        d->oldest++;
    }
}

/* Queues the pieces of l into buf as a new ticket; 0 or an errno. */
static int submit_uring(mem_direct *d, const mem_layout *l, uint8_t *buf, uint64_t *ticket) {
    while (d->engine == MEM_DIRECT_URING && d->next_ticket - d->oldest >= MEM_DIRECT_TICKETS) {
        reap(d, true); /* the oldest ticket's slot is needed again */
    }
    if (d->engine != MEM_DIRECT_URING) {
        return -1; /* the ring failed meanwhile: the caller takes the threads */
    }
    const uint64_t t = d->next_ticket++;
    const size_t k = ticket_slot(t);
    d->left[k] = 0;
    d->err[k] = 0;
    cutter c = {.l = l, .buf = buf, .pos = l->n > 0 ? l->x[0].lo : 0};
    request r;
    while (cut_next(&c, &r)) {
        if (d->q_n == d->q_cap) {
            const size_t cap = d->q_cap ? d->q_cap * 2 : 64;
            piece *q = lares_realloc(d->queue, cap * sizeof *q);
            if (q == NULL) {
                d->err[k] = ENOMEM;
                break;
            }
            d->queue = q;
            d->q_cap = cap;
        }
        d->queue[d->q_n++] = (piece){.r = r, .ticket = t};
        d->left[k]++;
    }
    *ticket = t;
    reap(d, false);
    return 0;
}

/* Waits for ticket t; its errno, or 0. */
static int finish_uring(mem_direct *d, uint64_t t) {
    while (d->engine == MEM_DIRECT_URING && t >= d->oldest && d->left[ticket_slot(t)] > 0) {
        reap(d, true);
    }
    return d->err[ticket_slot(t)];
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
        while (d->oldest < d->next_ticket && d->engine == MEM_DIRECT_URING) {
            reap(d, true); /* the kernel may still write into the caller's buffers */
        }
        if (d->engine == MEM_DIRECT_URING) {
            io_uring_queue_exit(&d->ring);
        }
    }
    lares_free(d->queue);
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
            d->next_ticket = d->oldest = 1; /* ticket 0: finished */
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
    uint64_t t;
    if (d->engine == MEM_DIRECT_URING && submit_uring(d, l, buf, &t) == 0) {
        return finish_uring(d, t);
    }
#endif
    return read_threads(d, l, buf);
}

lares_status mem_direct_submit(mem_direct *d, const mem_layout *l, void *buf, uint64_t *ticket,
                               lares_error *err) {
    *ticket = 0; /* finished */
    if (l->align % MEM_DIRECT_ALIGN != 0 || (uintptr_t)buf % MEM_DIRECT_ALIGN != 0) {
        return lares_fail(err, LARES_EINVAL, "%s: direct reads need %u-byte alignment", d->path,
                          MEM_DIRECT_ALIGN);
    }
#if defined(LARES_HAVE_LIBURING)
    if (d->engine == MEM_DIRECT_URING && submit_uring(d, l, buf, ticket) == 0) {
        return LARES_OK;
    }
#endif
    const int e = read_threads(d, l, buf);
    if (e != 0) {
        return lares_fail(err, LARES_EIO, "%s: direct read failed: %s", d->path, strerror(e));
    }
    return LARES_OK;
}

lares_status mem_direct_finish(mem_direct *d, uint64_t ticket, lares_error *err) {
    int e = 0;
#if defined(LARES_HAVE_LIBURING)
    if (ticket > 0 && ticket + MEM_DIRECT_TICKETS > d->next_ticket) {
        e = finish_uring(d, ticket);
    }
#else
    (void)ticket;
#endif
    if (e != 0) {
        return lares_fail(err, LARES_EIO, "%s: direct read failed: %s", d->path, strerror(e));
    }
    return LARES_OK;
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
