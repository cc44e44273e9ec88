/*
 * How fast this CPU runs lares' own kernels: FLOP/s of the dot product of each
 * weight type (quant_traits_of(type)->vec_dot, the kernel every mat-vec of a
 * generated token runs), on the ops thread pool with the device's threads.
 *
 *   compute-bound: every thread walks the same block of about 128 KiB of
 *     weights many times; it stays in each core's L2, so the rate is the
 *     arithmetic of the kernel;
 *   memory-bound: the threads split a buffer far larger than any cache (up to
 *     256 MiB) and walk it once per pass, as a token walks a model's weights;
 *     this rate is what the latency model uses when it has it;
 *   memory bandwidth: the same buffer read as plain 64-bit words.
 *
 * Rates are per second of each thread's CPU time: full speed. A cgroup CPU
 * quota (the testbed's slow devices) does not lower them; it is recorded
 * beside them and the latency model throttles bursts by it (a device that
 * computes 40 ms per token under a quota of 30 ms per 100 ms period runs
 * 30 ms at full speed, waits, then runs the rest).
 *
 * Weights are real blocks: random rows quantized with the type's reference
 * quantizer, tiled over the buffer. Each figure is the best of several timed
 * passes inside a bounded time slice.
 */
#include "ops/ops.h"
#include "sched/sched_impl.h"

#include <time.h>

#define N_IN        4096 /* a multiple of every block size (256 for K-quants) */
#define SEED_ROWS   16
#define CACHE_BYTES (128 * 1024)
#define SINK_SLOTS  64

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        return lares_now_ns(); /* no per-thread clock: wall time */
    }
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct dot_task {
    const quant_traits *qt;
    const uint8_t *w;
    size_t row_bytes;
    int64_t n_rows;
    bool shared; /* every thread walks all rows (in cache) rather than its share */
    const void *act;
    uint64_t until_ns;           /* each thread works until this (wall) time */
    int64_t done[SINK_SLOTS];    /* rows each thread multiplied */
    uint64_t cpu_ns[SINK_SLOTS]; /* CPU time each thread spent on them */
    float sink[SINK_SLOTS];
} dot_task;

/* rows between two reads of the clock */
#define CLOCK_EVERY 64

/* Each thread walks its rows over and over until the deadline (checked every
 * CLOCK_EVERY rows), so the pool's wake-up cost is paid once per measurement,
 * not once per pass. Rates are per second of the thread's own CPU time: other
 * programs on the machine (a shared build box, an app in the foreground) only
 * delay a thread, they do not change what the device computes per second it
 * runs; a cgroup CPU quota is recorded apart (the latency model applies it). */
static void dot_rows(void *ctx, int ith, int nth) {
    dot_task *t = ctx;
    int64_t lo = 0, hi = t->n_rows;
    if (!t->shared) {
        ops_split(t->n_rows, ith, nth, &lo, &hi);
    }
    float acc = 0;
    int64_t done = 0;
    uint64_t now = lares_now_ns(), cpu0 = thread_cpu_ns();
    /* not every row: a row takes 0.1-1 us and a clock read tens of ns (more
     * under some hypervisors' clock sources), which would be timed as part of
     * the kernel (3-5 % here), while the engine calls vec_dot back to back */
    while (now < t->until_ns && hi > lo) {
        for (int64_t r = lo; r < hi && now < t->until_ns; r++) {
            float s;
            t->qt->vec_dot(N_IN, &s, t->w + (size_t)r * t->row_bytes, t->act);
            acc += s;
            done++;
            if (done % CLOCK_EVERY == 0) {
                now = lares_now_ns();
            }
        }
        now = lares_now_ns();
    }
    t->done[ith % SINK_SLOTS] = done;
    t->cpu_ns[ith % SINK_SLOTS] = thread_cpu_ns() - cpu0;
    t->sink[ith % SINK_SLOTS] += acc;
}

typedef struct read_task {
    const uint64_t *p;
    size_t n_words;
    uint64_t cpu_ns[SINK_SLOTS];
    uint64_t bytes[SINK_SLOTS];
    uint64_t sink[SINK_SLOTS];
} read_task;

static void read_words(void *ctx, int ith, int nth) {
    read_task *t = ctx;
    int64_t lo, hi;
    ops_split((int64_t)t->n_words / 4, ith, nth, &lo, &hi);
    uint64_t a = 0, b = 0, c = 0, d = 0, cpu0 = thread_cpu_ns();
    for (int64_t i = lo * 4; i < hi * 4; i += 4) {
        a += t->p[i];
        b ^= t->p[i + 1];
        c += t->p[i + 2];
        d ^= t->p[i + 3];
    }
    t->cpu_ns[ith % SINK_SLOTS] = thread_cpu_ns() - cpu0;
    t->bytes[ith % SINK_SLOTS] = (uint64_t)(hi - lo) * 32;
    t->sink[ith % SINK_SLOTS] += a + b + c + d;
}

/* FLOP/s of a task: each thread's rows over its own CPU time, summed over the
 * threads; the best of three runs sharing slice_s. */
static double time_task(ops_pool *pool, dot_task *t, double slice_s) {
    const int nth = ops_pool_size(pool);
    double best = 0;
    for (int run = 0; run < 3; run++) {
        t->until_ns = lares_now_ns() + (uint64_t)(slice_s / 3 * 1e9);
        ops_pool_run(pool, dot_rows, t);
        double rate = 0;
        for (int i = 0; i < nth && i < SINK_SLOTS; i++) {
            if (t->cpu_ns[i] > 0) {
                rate += 2.0 * N_IN * (double)t->done[i] / ((double)t->cpu_ns[i] / 1e9);
            }
        }
        best = rate > best ? rate : best;
    }
    return best;
}

typedef struct typed_buf {
    const quant_traits *qt;
    uint8_t *seed; /* SEED_ROWS quantized rows */
    void *act;     /* one activation row in vec_dot_type */
    size_t row_bytes;
} typed_buf;

/* Quantizes SEED_ROWS random rows and one activation row for `type`. */
static lares_status typed_init(uint32_t type, const float *x, typed_buf *b, lares_error *err) {
    memset(b, 0, sizeof *b);
    const quant_traits *qt = quant_traits_of(type);
    const quant_traits *at = qt ? quant_traits_of(qt->vec_dot_type) : NULL;
    if (qt == NULL || qt->vec_dot == NULL || qt->from_float_ref == NULL || at == NULL ||
        (at->from_float == NULL && qt->vec_dot_type != GGUF_TYPE_F32)) {
        return LARES_EUNSUPPORTED;
    }
    b->qt = qt;
    b->row_bytes = quant_row_bytes(type, N_IN);
    size_t act_bytes = quant_row_bytes(qt->vec_dot_type, N_IN);
    b->seed = lares_alloc_aligned(SEED_ROWS * b->row_bytes, 64);
    b->act = lares_alloc_aligned(act_bytes, 64);
    if (b->seed == NULL || b->act == NULL) {
        lares_free_aligned(b->seed);
        lares_free_aligned(b->act);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (int r = 0; r < SEED_ROWS; r++) {
        qt->from_float_ref(x + (size_t)r * N_IN, b->seed + (size_t)r * b->row_bytes, N_IN);
    }
    if (qt->vec_dot_type == GGUF_TYPE_F32) {
        memcpy(b->act, x + (size_t)SEED_ROWS * N_IN, act_bytes);
    } else {
        at->from_float(x + (size_t)SEED_ROWS * N_IN, b->act, N_IN);
    }
    return LARES_OK;
}

static void typed_free(typed_buf *b) {
    lares_free_aligned(b->seed);
    lares_free_aligned(b->act);
}

static void tile(uint8_t *dst, size_t rows, const typed_buf *b) {
    for (size_t r = 0; r < rows; r++) {
        memcpy(dst + r * b->row_bytes, b->seed + (r % SEED_ROWS) * b->row_bytes, b->row_bytes);
    }
}

/* memory-bound rates for the types real files are made of (others: roofline) */
static bool streamed_type(uint32_t t) {
    return t == GGUF_TYPE_F32 || t == GGUF_TYPE_F16 || t == GGUF_TYPE_Q8_0 || t == GGUF_TYPE_Q4_0 ||
           t == GGUF_TYPE_Q4_K || t == GGUF_TYPE_Q5_K || t == GGUF_TYPE_Q6_K;
}

lares_status sched_profile_cpu(sched_device *d, int32_t n_threads, uint32_t budget_ms,
                               size_t big_bytes, lares_error *err) {
    ops_pool *pool = NULL;
    lares_status st = ops_pool_create(n_threads, &pool, err);
    if (st != LARES_OK) {
        return st;
    }
    const double budget = budget_ms / 1e3;
    float *x = lares_alloc_array((size_t)(SEED_ROWS + 1) * N_IN, sizeof *x);
    uint8_t *big = lares_alloc_aligned(big_bytes, 64);
    if (x == NULL || big == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "profile: cannot allocate %zu bytes", big_bytes);
        goto done;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < (size_t)(SEED_ROWS + 1) * N_IN; i++) {
        x[i] = (float)((double)(sched_xorshift(&seed) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    int n_dot = 0, n_streamed = 0;
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
        const quant_traits *qt = quant_traits_of(t);
        if (qt != NULL && qt->vec_dot != NULL && qt->from_float_ref != NULL) {
            n_dot++;
            n_streamed += streamed_type(t);
        }
    }
    const double slice_cc = n_dot ? 0.40 * budget / n_dot : 0;
    const double slice_mem = n_streamed ? 0.45 * budget / n_streamed : 0;
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
        typed_buf b;
        lares_status ts = typed_init(t, x, &b, err);
        if (ts == LARES_EUNSUPPORTED) {
            continue;
        }
        if (ts != LARES_OK) {
            st = ts;
            goto done;
        }
        /* compute-bound: one block in cache, every thread all of it */
        size_t rows = LARES_MAX((size_t)2, CACHE_BYTES / b.row_bytes);
        tile(big, rows, &b);
        dot_task task = {.qt = b.qt,
                         .w = big,
                         .row_bytes = b.row_bytes,
                         .n_rows = (int64_t)rows,
                         .shared = true,
                         .act = b.act};
        d->cpu_flops.by_type[t] = time_task(pool, &task, slice_cc);
        if (streamed_type(t)) {
            /* memory-bound: the threads split the whole buffer */
            rows = big_bytes / b.row_bytes;
            tile(big, rows, &b);
            task.n_rows = (int64_t)rows;
            task.shared = false;
            d->cpu_flops_mem.by_type[t] = time_task(pool, &task, slice_mem);
        }
        typed_free(&b);
    }
    /* read bandwidth over the (now fully written) buffer */
    read_task rt = {.p = (const uint64_t *)big, .n_words = big_bytes / 8};
    const int nth = ops_pool_size(pool);
    double deadline = sched_now_s() + 0.15 * budget, best = 0;
    for (int pass = 0; pass < 32 && (pass < 2 || sched_now_s() < deadline); pass++) {
        ops_pool_run(pool, read_words, &rt);
        double bw = 0;
        for (int i = 0; i < nth && i < SINK_SLOTS; i++) {
            if (rt.cpu_ns[i] > 0) {
                bw += (double)rt.bytes[i] / ((double)rt.cpu_ns[i] / 1e9);
            }
        }
        best = bw > best ? bw : best;
    }
    /* full speed: a CPU quota is not a slower CPU (a burst runs at this speed
     * until the period's quota is spent); the latency model applies the quota
     * the profile records (cpu_quota, cpu_quota_period_s) */
    d->mem_bw_Bps = best;
    d->threads = nth;
done:
    lares_free(x);
    lares_free_aligned(big);
    ops_pool_free(pool);
    return st;
}
