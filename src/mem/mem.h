/*
 * mem: the residency of weights and the memory figures users see.
 *
 * Owns:
 *   - process-level counters read from the OS: peak resident set, major page
 *     faults, bytes read from storage, and the machine's MemTotal /
 *     MemAvailable (memory pressure = the drop of MemAvailable during a run,
 *     relative to MemTotal);
 *   - spans: which byte ranges of a GGUF file a layer (tensors "blk.N.*"), a
 *     tensor or one expert's slice of a stacked expert tensor occupies;
 *   - advice on a mapped file: prefetch (large sequential reads that leave the
 *     pages mapped), release (unmap and drop from the page cache), residency
 *     (mincore) and locking (mlock);
 *   - the memory limit the process lives under: cgroup v1/v2 limits and a
 *     share of MemAvailable.
 *
 * Knows nothing about what a layer computes, nor about windows or threads:
 * the executor (exec/) decides what to prefetch and when.
 *
 * Lifetimes: a mem_file borrows the mapping of a gguf_file (mem never maps or
 * unmaps). A mem_span owns its range array.
 *
 * Threads: every function here may be called from any thread; a mem_span is
 * not shared while it is being built.
 */
#ifndef LARES_MEM_H
#define LARES_MEM_H

#include "core/core.h"
#include "gguf/gguf.h"
#include "model/plan.h"

/* ---- process and machine figures (stats.c) ---- */

typedef struct mem_sample {
    uint64_t peak_rss_bytes;  /* high-water mark of the resident set */
    uint64_t rss_bytes;       /* current resident set (0 when unknown) */
    uint64_t major_faults;    /* since the process started */
    int64_t read_bytes;       /* from storage since the process started; -1 unknown */
    int64_t mem_total_bytes;  /* -1 unknown */
    int64_t mem_available_bytes; /* -1 unknown */
} mem_sample;

/* Reads the counters now. Never fails: what the OS will not tell is -1/0. */
void mem_sample_now(mem_sample *out);

/* Tracks the lowest MemAvailable seen between begin and the last update. */
typedef struct mem_pressure {
    int64_t total;
    int64_t start_available;
    int64_t min_available;
} mem_pressure;

void mem_pressure_begin(mem_pressure *p);
void mem_pressure_update(mem_pressure *p);
/* (start - min) / total, 0 when unknown or when MemAvailable only rose */
double mem_pressure_value(const mem_pressure *p);

/* ---- spans: byte ranges of the file (span.c) ---- */

/* [lo, hi) in file offsets (not offsets into the data section). */
typedef struct mem_range {
    uint64_t lo, hi;
} mem_range;

/* A set of file ranges, kept sorted and merged by mem_span_add. */
typedef struct mem_span {
    mem_range *r; /* owned */
    size_t n, cap;
    uint64_t bytes; /* sum of hi - lo */
} mem_span;

/* Adds [lo, hi), merging it with ranges it touches or overlaps. An empty range
 * is ignored. LARES_EINVAL for lo > hi, LARES_ENOMEM when the array cannot
 * grow (the span is unchanged then). */
lares_status mem_span_add(mem_span *s, uint64_t lo, uint64_t hi, lares_error *err);
/* Adds every range of `from`. */
lares_status mem_span_add_span(mem_span *s, const mem_span *from, lares_error *err);
void mem_span_clear(mem_span *s);   /* keeps the array */
void mem_span_free(mem_span *s);    /* releases the array; the span is empty after */
bool mem_span_overlaps(const mem_span *a, const mem_span *b);

/* The file range of a tensor's data. */
mem_range mem_tensor_range(const gguf_file *f, const gguf_tensor *t);
/* Adds the ranges of a layer's weights as its plan lists them; with_experts
 * false leaves out the stacked expert tensors (read per choice, with
 * mem_expert_range). LARES_EINVAL for a layer the plan does not have. */
lares_status mem_span_of_layer(const model_plan *p, int32_t layer, bool with_experts, mem_span *s,
                               lares_error *err);
/* The same for one part of the layer (model_part). */
lares_status mem_span_of_part(const model_plan *p, int32_t layer, model_part part,
                              bool with_experts, mem_span *s, lares_error *err);
/* The slice of expert e of a stacked expert weight (GGUF order: the expert
 * index varies slowest, so each expert's weights are one contiguous range).
 * LARES_EINVAL for a weight that is not stacked experts or an expert out of range. */
lares_status mem_expert_range(const model_weight *w, int64_t e, mem_range *out, lares_error *err);

/* ---- advice on the mapped file (advise.c) ---- */

/* How a prefetch brings pages in. The default is what bench/mem_read measured
 * fastest here (see docs/memory.md): the fault path's own read-ahead, which
 * reads in large folios, about 4x the throughput of WILLNEED (small folios)
 * on this machine. WILLNEED reads exactly the range asked, so it serves
 * small scattered ranges (expert slices), where read-ahead would over-read. */
typedef enum mem_read_method {
    MEM_READ_DEFAULT = 0,      /* MEM_READ_POPULATE */
    MEM_READ_FADVISE_POPULATE, /* posix_fadvise(WILLNEED) in read-ahead sized chunks, then
                                  MADV_POPULATE_READ (touching pages where it is missing) */
    MEM_READ_MADVISE_TOUCH,    /* one madvise(WILLNEED) over the range, then touch each page */
    MEM_READ_PREAD,            /* pread into a scratch buffer in 4 MiB blocks, then map */
    MEM_READ_FAULT,            /* just touch each page: what a plain mmap reader does */
    MEM_READ_POPULATE,         /* MADV_POPULATE_READ alone: the fault path's read-ahead */
    MEM_READ_SEQ_POPULATE,     /* MADV_SEQUENTIAL on the range, then MADV_POPULATE_READ */
    MEM_READ_COUNT
} mem_read_method;

const char *mem_read_method_name(mem_read_method m);

/* A borrowed view of a mapped file plus the OS facts advice needs. */
typedef struct mem_file {
    const uint8_t *base; /* borrowed: file offset 0 of the mapping */
    uint64_t bytes;      /* mapped length */
    int fd;              /* borrowed; -1 for a buffer that is not a file */
    const char *path;    /* borrowed, for messages */
    size_t page;         /* page size */
    size_t ra_chunk;     /* the most one WILLNEED call reads (the device's read-ahead limit) */
} mem_file;

/* Describes the mapping of an opened GGUF file. */
void mem_file_of(const gguf_file *f, mem_file *out);
/* The same for any mapping (tests, benchmarks): base maps fd from offset 0. */
void mem_file_init(mem_file *mf, const void *base, uint64_t bytes, int fd, const char *path);

/* What one prefetch did. */
typedef struct mem_io {
    uint64_t bytes;   /* bytes asked for (page-rounded) */
    uint64_t ns;      /* wall time of the call */
} mem_io;

/* Brings every page of the span into memory and maps it, rounding each range
 * out to whole pages; returns when the pages are resident (synchronous: call
 * it from a prefetch thread). `scratch` (scratch_bytes, may be NULL) serves
 * MEM_READ_PREAD. Fails only on a range outside the file. */
lares_status mem_prefetch(const mem_file *mf, const mem_span *s, mem_read_method how,
                          void *scratch, size_t scratch_bytes, mem_io *io, lares_error *err);
/* Only starts the reads (WILLNEED), returns at once. */
void mem_prefetch_async(const mem_file *mf, const mem_span *s);
/* Unmaps the span's pages from this process and drops them from the page
 * cache, rounding each range in to whole pages (a page shared with a
 * neighbouring range stays). Returns the bytes released. */
uint64_t mem_release(const mem_file *mf, const mem_span *s);
/* Pages of the span (rounded out) in memory now, in bytes (mincore); 0 when
 * the OS cannot tell. */
uint64_t mem_resident_bytes(const mem_file *mf, const mem_span *s);
/* Tells the OS that the span is read front to back: a fault reads ahead
 * from the faulting page on (in large folios), never behind it. */
void mem_advise_sequential(const mem_file *mf, const mem_span *s);
/* Tells the OS that faults in the span are random (no read-around): for the
 * embedding, whose rows are touched one per token. */
void mem_advise_random(const mem_file *mf, const mem_span *s);
/* Tells the OS whether the whole mapping should sit on huge pages (Linux:
 * MADV_HUGEPAGE / MADV_NOHUGEPAGE; nothing elsewhere): on for weights that
 * stay resident, so that what is read from then on comes into the page cache
 * in 2 MiB folios mapped by one entry each; off for weights that stream,
 * whose releases must not leave a 2 MiB folio behind at each end of a range.
 * Advice only: pages already cached keep their size. */
void mem_advise_huge(const mem_file *mf, bool on);
/* Locks the span's pages in memory. LARES_ENOMEM with a message naming the
 * file, the bytes and RLIMIT_MEMLOCK when the OS refuses; nothing stays locked
 * then. */
lares_status mem_lock(const mem_file *mf, const mem_span *s, lares_error *err);
void mem_unlock(const mem_file *mf, const mem_span *s);

/* ---- direct reads into buffers the engine owns (direct.c) ----
 *
 * A streamed unit can bypass the page cache: its ranges are read with
 * O_DIRECT (F_NOCACHE on macOS) in large requests, several in flight, into a
 * buffer the caller owns. Direct I/O wants file offsets, lengths and buffer
 * addresses aligned to the device's block, so each range is rounded out to
 * `align` and the rounded extents lie back to back in the buffer, each at a
 * multiple of `align`: a byte keeps its file offset modulo `align` (4096), so
 * a tensor is exactly as aligned in the buffer as in the mapping. */

/* File bytes [lo, hi) (multiples of align) land at buffer offset `at`. */
typedef struct mem_extent {
    uint64_t lo, hi, at;
} mem_extent;

/* Where a span's bytes land in a buffer of direct reads. */
typedef struct mem_layout {
    mem_extent *x; /* owned, sorted by lo, disjoint */
    size_t n, cap;
    uint64_t bytes; /* the buffer bytes needed */
    size_t align;
} mem_layout;

/* The layout of span s for reads aligned to `align` (a power of two):
 * ranges whose rounded extents touch or overlap share one extent.
 * LARES_EINVAL for an align that is not a power of two, LARES_ENOMEM. */
lares_status mem_layout_of(const mem_span *s, size_t align, mem_layout *out, lares_error *err);
void mem_layout_free(mem_layout *l);
/* Adds src's extents to dst, each landing `at` bytes further into the
 * buffer, keeping dst sorted by lo (src's extents must not overlap dst's):
 * several spans read at once into places of one buffer. dst->align must be
 * src's (an empty dst takes it). LARES_ENOMEM leaves dst as it was. */
lares_status mem_layout_append(mem_layout *dst, const mem_layout *src, uint64_t at,
                               lares_error *err);
/* The address in buf of file bytes [off, off + n); NULL when they are not
 * wholly inside one extent. */
const uint8_t *mem_layout_addr(const mem_layout *l, const uint8_t *buf, uint64_t off, uint64_t n);

/* How several direct reads are kept in flight. */
typedef enum mem_direct_engine {
    MEM_DIRECT_AUTO = 0, /* io_uring where built in and the kernel allows it, else threads */
    MEM_DIRECT_URING,    /* one io_uring, MEM_DIRECT_DEPTH requests in flight */
    MEM_DIRECT_THREADS,  /* MEM_DIRECT_THREADS_MAX threads of blocking preads */
    MEM_DIRECT_COUNT
} mem_direct_engine;

#define MEM_DIRECT_REQUEST (4u << 20) /* bytes of one read request */
/* requests in flight: this machine's virtual disk read 4 MiB direct requests
 * (into small pages) at about 0.7 GB/s one at a time, 1.2 at 4, 1.7-1.9 at 16 */
#define MEM_DIRECT_DEPTH       16
#define MEM_DIRECT_THREADS_MAX 8 /* the fallback's threads (each one request) */
#define MEM_DIRECT_ALIGN   4096u      /* offsets, lengths and addresses */

const char *mem_direct_engine_name(mem_direct_engine e);

/* A file opened for direct reads; used by one thread at a time. */
typedef struct mem_direct mem_direct;

/* Opens path for direct reads and checks with one read that they work.
 * LARES_EUNSUPPORTED, naming the reason, where the file system refuses them
 * (tmpfs, some network file systems) or the engine asked for is not built
 * in or refused by the kernel; the caller then reads through the page cache. */
lares_status mem_direct_open(const char *path, mem_direct_engine engine, mem_direct **out,
                             lares_error *err);
void mem_direct_close(mem_direct *d);
mem_direct_engine mem_direct_engine_of(const mem_direct *d);
/* Reads every extent of l into buf (l->bytes, aligned to l->align, which must
 * be a multiple of MEM_DIRECT_ALIGN); bytes past the end of the file read as
 * zeros. LARES_EIO naming the file when a read fails. */
lares_status mem_direct_read(mem_direct *d, const mem_layout *l, void *buf, mem_io *io,
                             lares_error *err);

/* The same without waiting: the reads proceed while the caller works, and
 * `ticket` names them for mem_direct_finish (with the thread engine the read
 * is done on return, ticket 0). Tickets finish in any order; at most 64 stay
 * unfinished (a 65th waits for the oldest). buf must stay mapped until the
 * ticket is finished (closing the handle waits for every read). */
lares_status mem_direct_submit(mem_direct *d, const mem_layout *l, void *buf, uint64_t *ticket,
                               lares_error *err);
/* Waits until the ticket's reads have landed; LARES_EIO naming the file when
 * one failed (its others may not have been made). */
lares_status mem_direct_finish(mem_direct *d, uint64_t ticket, lares_error *err);

/* Page-aligned anonymous memory for direct reads (not the heap: the caller
 * counts it in its weight budget). NULL when the OS refuses. */
void *mem_buffer_map(size_t bytes);
/* Room that takes memory as it is written (none is set aside for it; small
 * pages); unmapped with mem_buffer_unmap */
void *mem_buffer_reserve(size_t bytes);
/* Gives the whole pages of [p, p + bytes) back; they read as zeros again. */
void mem_buffer_trim(void *p, size_t bytes);
void mem_buffer_unmap(void *p, size_t bytes);

/* ---- the memory limit (limit.c) ---- */

/* Where the limit comes from; tests point these at a fake tree. */
typedef struct mem_limit_src {
    const char *proc_cgroup;    /* "/proc/self/cgroup" */
    const char *proc_mountinfo; /* "/proc/self/mountinfo" */
    const char *proc_meminfo;   /* "/proc/meminfo" */
    const char *root;           /* prepended to mount points; "" */
} mem_limit_src;

typedef struct mem_limit {
    uint64_t cgroup_bytes;    /* the tightest cgroup limit above us; UINT64_MAX when none */
    int cgroup_version;       /* 1, 2, or 0 when no limit was found */
    uint64_t available_bytes; /* MemAvailable; UINT64_MAX when unknown */
    uint64_t total_bytes;     /* MemTotal; UINT64_MAX when unknown */
    uint64_t auto_bytes;      /* min(cgroup, share x MemAvailable): what a process may use */
} mem_limit;

/* The share of MemAvailable a run may fill by itself. */
#define MEM_AVAILABLE_SHARE 0.8

/* Reads the limits (src NULL: this process's). Never fails: what cannot be
 * read is reported as "no limit". */
void mem_limit_read(const mem_limit_src *src, mem_limit *out);

#endif /* LARES_MEM_H */
