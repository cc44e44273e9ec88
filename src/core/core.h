/*
 * core: what every module shares: errors with messages, the allocation gate,
 * checked size arithmetic, little-endian byte readers, logging, clocks.
 *
 * Owns: the log sink (the one process-wide setting, set once at start-up) and
 * the allocation counters (atomics). Knows nothing about models or files.
 */
#ifndef LARES_CORE_H
#define LARES_CORE_H

#include "lares.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#if defined(__GNUC__)
#define LARES_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define LARES_PRINTF(fmt, args)
#endif

/* ---- errors ---- */

/* Formats err->msg (when err != NULL), sets err->code, and returns code. */
lares_status lares_fail(lares_error *err, lares_status code, const char *fmt, ...)
    LARES_PRINTF(3, 4);
/* Prepends context to an existing message: "loading x.gguf: " + msg. */
void lares_error_prefix(lares_error *err, const char *fmt, ...) LARES_PRINTF(2, 3);
void lares_error_clear(lares_error *err);

/* ---- allocation gate ----
 * Every heap allocation of the library goes through here: zero and oversize
 * requests are refused, bytes in use and the high-water mark are counted, and
 * tests can make the n-th allocation fail to drive cleanup paths. */
void *lares_calloc(size_t n, size_t size);      /* zeroed; NULL on overflow */
void *lares_alloc_array(size_t n, size_t size); /* NULL on overflow */
void *lares_realloc(void *p, size_t n);
char *lares_strdup(const char *s);
/* Grows *p (an array of *cap elements of elem bytes) to hold at least `need`,
 * doubling; false (and *p untouched) on overflow or no memory. */
bool lares_grow(void **p, size_t *cap, size_t need, size_t elem);
char *lares_strndup(const char *s, size_t n);
void *lares_alloc_aligned(size_t n, size_t align); /* free with lares_free_aligned */
void lares_free_aligned(void *p);
size_t lares_mem_in_use(void);
size_t lares_mem_high_water(void);
/* Test hook: the n-th following allocation (1-based) fails; 0 disables. */
void lares_alloc_fail_after(long n);
/* Allocation requests since the process started (sweeps size themselves by it). */
long lares_allocs_seen(void);

/* ---- read gate (fault.c) ----
 * Every read of a file (read, pread, fread) and every socket receive of the
 * library goes through here, so that tests can make the n-th read fail with
 * EIO or come back short (a real read may do either). */
typedef enum lares_read_fault {
    LARES_READ_FAULT_EIO,   /* -1 with errno EIO (fread: 0 and *failed) */
    LARES_READ_FAULT_SHORT, /* at most half of the bytes asked for */
} lares_read_fault;
/* Test hook: the n-th following read (1-based) fails as `kind`; 0 disables. */
void lares_read_fail_after(long n, lares_read_fault kind);
/* Reads through the gate since the process started (sweeps size themselves by it). */
long lares_reads_seen(void);
/* For gates of other modules (socket receives): true when this read must fail. */
bool lares_read_fault_next(lares_read_fault *kind);
ssize_t lares_read(int fd, void *buf, size_t n);
ssize_t lares_pread(int fd, void *buf, size_t n, off_t off);
/* fread of n bytes: the count read; *failed on a read error (not at end of file) */
size_t lares_fread(void *buf, size_t n, FILE *f, bool *failed);
/* A small text file (/proc, /sys) read whole into buf (cap bytes, NUL-terminated):
 * the bytes read, or -1 when it cannot be opened or read. */
long lares_read_small_file(const char *path, char *buf, size_t cap);

/* ---- checked arithmetic: false on overflow, *out untouched then ---- */

static inline bool lares_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) {
        return false;
    }
    *out = r;
    return true;
}
static inline bool lares_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        return false;
    }
    *out = r;
    return true;
}
static inline bool lares_add_size(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) {
        return false;
    }
    *out = r;
    return true;
}
static inline bool lares_mul_size(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        return false;
    }
    *out = r;
    return true;
}
static inline bool lares_mul_i64(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        return false;
    }
    *out = r;
    return true;
}
static inline uint64_t lares_align_up_u64(uint64_t x, uint64_t align) {
    /* align is a power of two; callers bound x so this cannot wrap */
    return (x + align - 1) & ~(align - 1);
}
static inline bool lares_is_pow2(uint64_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

/* ---- little-endian readers and writers (never cast file bytes to wider types) ---- */

static inline uint16_t rd_u16le(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t rd_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
static inline uint64_t rd_u64le(const uint8_t *p) {
    return (uint64_t)rd_u32le(p) | ((uint64_t)rd_u32le(p + 4) << 32);
}
static inline float rd_f32le(const uint8_t *p) {
    uint32_t u = rd_u32le(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline double rd_f64le(const uint8_t *p) {
    uint64_t u = rd_u64le(p);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}
static inline void wr_u16le(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void wr_u32le(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}
static inline void wr_u64le(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}
static inline void wr_f32le(uint8_t *p, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    wr_u32le(p, u);
}

/* ---- logging ---- */

void lares_log(lares_log_level level, const char *fmt, ...) LARES_PRINTF(2, 3);
bool lares_log_enabled(lares_log_level level);

/* ---- clocks ---- */

uint64_t lares_now_ns(void); /* monotonic */
static inline double lares_ns_to_ms(uint64_t ns) {
    return (double)ns / 1e6;
}

/* ---- misc ---- */

/* n bytes for people: "512 B", "12.50 KiB", "3.80 GiB" into buf (units.c). */
const char *lares_fmt_bytes(double n, char *buf, size_t cap);

/* Number of online CPU cores (at least 1). */
int lares_cpu_count(void);

/* The k-th of n indices in van der Corput (bit-reversed) order: 0, n/2, n/4,
 * 3n/4, ...; every prefix spreads evenly (order.c). */
int32_t lares_spread_order(int32_t n, int32_t k);

#define LARES_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define LARES_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define LARES_MAX(a, b)    ((a) > (b) ? (a) : (b))

#endif /* LARES_CORE_H */
