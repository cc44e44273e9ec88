/*
 * Real layer windows for the profile's calibration (sched/calibrate.c): this
 * device runs a few layers of the model being planned through the executor,
 * inside its own limits, and times them by the wall clock.
 *
 *   - the device's own limits: the threads the profile is made for, whatever
 *     CPU quota the process runs under (it is not bypassed: the time is wall
 *     time), and the memory budget a worker would have (mem_limit, as
 *     ring_worker.c), so a window that does not fit streams from disk as it
 *     would in the ring (the waits for disk are taken off: the compute is
 *     what is fitted; the disk has its own figures);
 *   - prompt-shaped: a batch of rows at positions from 0; then
 *     decode-shaped: one row at the position after them (the packed-activation GEMM path where
 *     the kernels have one, docs/kernels.md), each window run once untimed
 *     (its weights read in) and then back to back for half the time given,
 *     after a pause of one quota period so that the first burst starts with
 *     the period's quota unspent, as the inversion in sched_full_speed_s
 *     assumes;
 *   - the layers: a window from the middle of the model (the first and last
 *     layers are not special in a decoder, but the middle ones are typical),
 *     of at least 96 MiB of weights where half of the budget holds them: a
 *     window that fits a last-level cache would run from it when repeated,
 *     faster than any token runs it (one 29 MB layer of a 1B model nearly
 *     fits a 32 MiB L3).
 *
 * The hidden state is restored before each window (random values, the same
 * each time), so nothing grows over hundreds of windows.
 */
#include "api/api.h"
#include "sched/sched.h"

#include <time.h>

/* rows of the prompt-shaped window */
#define PROMPT_ROWS 16
/* the window's weights at least (when the budget allows): beyond the 32 MiB
 * of L3 a core sees on current desktop and server parts */
#define WINDOW_BYTES ((uint64_t)96 << 20)
/* the pause before timing: the kernel's default CFS period */
#define QUOTA_PERIOD_NS 100000000L

typedef struct window_rig {
    gguf_file *f;
    model *m;
    model_kv *kv;
    model_ctx *cx;
    ops_pool *pool;
    exec_local *e;
    float *x0, *x;
    int32_t pos[PROMPT_ROWS];
    exec_window win;
    bool streams;
} window_rig;

static void rig_free(window_rig *r) {
    exec_local_free(r->e);
    model_ctx_free(r->cx);
    model_kv_free(r->kv);
    ops_pool_free(r->pool);
    model_free(r->m);
    gguf_close(r->f);
    lares_free(r->x0);
    lares_free(r->x);
}

static lares_status rig_open(window_rig *r, const char *path, int32_t n_threads,
                             lares_error *err) {
    lares_status st = gguf_open(path, NULL, &r->f, err);
    if (st == LARES_OK) {
        st = model_load(r->f, &r->m, err);
    }
    if (st != LARES_OK) {
        return st;
    }
    const int32_t L = r->m->hp.n_layer, n_embd = r->m->hp.n_embd;
    mem_limit lim;
    mem_limit_read(NULL, &lim);
    const uint64_t file = gguf_file_bytes(r->f);
    const uint64_t layer = file / (uint64_t)(L > 0 ? L : 1);
    /* enough layers that the window outgrows a last-level cache (a window
     * repeated back to back would otherwise run from it, which no token
     * does), within half of the budget */
    int32_t w = 1;
    while (w < L && (uint64_t)w * layer < WINDOW_BYTES &&
           (lim.auto_bytes == UINT64_MAX || (uint64_t)(w + 1) * layer <= lim.auto_bytes / 2)) {
        w++;
    }
    r->win.l0 = (L - w) / 2;
    r->win.l1 = r->win.l0 + w;
    const int32_t n_ctx = 2 * PROMPT_ROWS;
    if ((st = ops_pool_create(n_threads, &r->pool, err)) ||
        (st = model_kv_create(r->m, 0, L, n_ctx, GGUF_TYPE_F16, &r->kv, err)) ||
        (st = model_ctx_create(r->m, r->pool, PROMPT_ROWS, n_ctx, &r->cx, err))) {
        return st;
    }
    r->x0 = lares_alloc_array((size_t)PROMPT_ROWS * (size_t)n_embd, sizeof *r->x0);
    r->x = lares_alloc_array((size_t)PROMPT_ROWS * (size_t)n_embd, sizeof *r->x);
    if (r->x0 == NULL || r->x == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < (size_t)PROMPT_ROWS * (size_t)n_embd; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        r->x0[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    exec_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.windows = &r->win;
    eo.n_windows = 1;
    if (lim.auto_bytes != UINT64_MAX) {
        uint64_t weights, least;
        if ((st = exec_weight_needs(r->m, r->kv, &eo, &weights, &least, err)) != LARES_OK) {
            return st;
        }
        const uint64_t overhead = lares_mem_in_use() + api_fixed_bytes(file);
        const uint64_t room = lim.auto_bytes > overhead ? lim.auto_bytes - overhead : 0;
        if (room < least) {
            return lares_fail(err, LARES_ERANGE,
                              "a memory budget of %.1f MiB cannot hold one layer of %s (%.1f MiB "
                              "with %.1f MiB of buffers)",
                              (double)lim.auto_bytes / 1048576.0, path,
                              (double)least / 1048576.0, (double)overhead / 1048576.0);
        }
        eo.weight_budget_bytes = room;
    }
    if ((st = exec_local_create(r->m, r->kv, r->cx, &eo, &r->e, err)) != LARES_OK) {
        return st;
    }
    exec_plan_info pi;
    exec_local_plan(r->e, &pi);
    r->streams = pi.streaming;
    return LARES_OK;
}

/* One window of n_rows rows at positions pos0... */
static lares_status run_one(window_rig *r, int32_t n_rows, lares_error *err) {
    memcpy(r->x, r->x0, (size_t)n_rows * (size_t)r->m->hp.n_embd * sizeof *r->x);
    exec_local_begin_pass(r->e, false);
    return exec_local_forward(r->e, r->win.l0, r->win.l1, r->pos, n_rows, r->x, err);
}

static lares_status time_windows(window_rig *r, int32_t n_rows, int32_t n_past, uint32_t ms,
                                 sched_window_time *out, lares_error *err) {
    for (int32_t i = 0; i < n_rows; i++) {
        r->pos[i] = n_past + i;
    }
    lares_status st = run_one(r, n_rows, err); /* reads the window in */
    if (st != LARES_OK) {
        return st;
    }
    struct timespec pause = {0, QUOTA_PERIOD_NS};
    nanosleep(&pause, NULL);
    exec_counters c0, c1;
    exec_local_counters(r->e, &c0);
    const uint64_t t0 = lares_now_ns(), until = t0 + (uint64_t)ms * 1000000u;
    int32_t n = 0;
    uint64_t t1;
    do {
        if ((st = run_one(r, n_rows, err)) != LARES_OK) {
            return st;
        }
        n++;
        t1 = lares_now_ns();
    } while (t1 < until || n < 3);
    exec_local_counters(r->e, &c1);
    const uint64_t wait = c1.wait_ns - c0.wait_ns;
    out->l0 = r->win.l0;
    out->l1 = r->win.l1;
    out->n_rows = n_rows;
    out->n_past = n_past;
    out->n_windows = n;
    out->wall_s = (double)(t1 - t0 - LARES_MIN(wait, t1 - t0)) / 1e9;
    out->streamed = r->streams;
    if (!(out->wall_s > 0)) {
        out->wall_s = 1e-9; /* a clock that did not move: the smallest time */
    }
    return LARES_OK;
}

lares_status api_run_windows(void *user, const char *model_path, int32_t n_threads,
                             uint32_t budget_ms, sched_window_time *decode,
                             sched_window_time *prompt, lares_error *err) {
    (void)user;
    window_rig r;
    memset(&r, 0, sizeof r);
    lares_status st = rig_open(&r, model_path, n_threads > 0 ? n_threads : lares_cpu_count(), err);
    /* the prompt first: it fills the KV entries the decode-shaped rows attend to */
    if (st == LARES_OK) {
        st = time_windows(&r, PROMPT_ROWS, 0, budget_ms / 2, prompt, err);
    }
    if (st == LARES_OK) {
        st = time_windows(&r, 1, PROMPT_ROWS, budget_ms / 2, decode, err);
    }
    if (st == LARES_OK) {
        lares_log(LARES_LOG_INFO,
                  "calibrate: layers [%d, %d) of %s: %d windows of 1 row in %.1f ms, %d of %d "
                  "rows in %.1f ms%s",
                  r.win.l0, r.win.l1, model_path, decode->n_windows, decode->wall_s * 1e3,
                  prompt->n_windows, PROMPT_ROWS, prompt->wall_s * 1e3,
                  r.streams ? " (streaming)" : "");
    }
    rig_free(&r);
    return st;
}
