/*
 * Matrix products over quantized weights.
 *
 * Activations are converted once per product into the format the weight
 * type's dot product expects (quant traits: vec_dot_type), then threads take
 * chunks of output rows from a shared counter, so a thread that runs slower
 * (another program on its core) simply takes fewer chunks. With one
 * activation row (generation) a chunk is about GEMV_CHUNK_BYTES of weight
 * rows. Up to OPS_ROWS_MAX rows (generation, several sequences decoding
 * together, short prompts and drafts) take the few-row product where the
 * dispatched kernels have one for the type (quant.h: quant_rows_fmt), in
 * groups of up to QUANT_ROWS_MAX rows, else one dot product per row. With
 * more activation rows (prompt processing) the dispatched kernels' packed GEMM
 * takes the chunk when it has one for the type (activations quantized once
 * into panels, quant.h); otherwise each chunk is walked in tiles of up to
 * QUANT_TILE_MAX weight rows x activation rows, so every weight block loaded
 * from memory is used against several tokens.
 */
#include "ops/ops.h"

#include <assert.h>
#include <stdatomic.h>

/* weight rows per work chunk: 16 rows of a 4096-wide Q4_0 matrix are 36 KiB,
 * which stays in L2 while all activation rows stream past it */
#define CHUNK_ROWS 16
/* weight bytes per work chunk of a mat-vec (one activation row, or the few
 * rows of several sequences decoding together): with 16-row chunks taken
 * from one shared counter the two threads' chunks interleaved every 18 KiB
 * and generation ran 15-20 % slower (issue 3); each thread now walks a
 * region of its own (mm_task), and this is only how finely the last chunks
 * are shared out */
#define GEMV_CHUNK_BYTES (128 * 1024)
/* the least product worth another thread: about 64 KiB of weights (3 us of
 * memory bandwidth); activations: OPS_MIN_ELEMS_PER_THREAD */
#define MIN_BYTES_PER_THREAD (64.0 * 1024)
/* activation rows walked against each group of weight rows: about half of a
 * 512 KiB L2 */
#define ACT_BLOCK_BYTES (256 * 1024)

lares_status ops_matrix_init(ops_matrix *m, const void *data, uint32_t type, int64_t n_in,
                             int64_t n_out, const char *what, lares_error *err) {
    const quant_traits *qt = quant_traits_of(type);
    const gguf_type_info *ti = gguf_type_info_of(type);
    if (qt == NULL || qt->vec_dot == NULL) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "tensor '%s' has type %s, which lares cannot multiply with yet", what,
                          ti ? ti->name : "?");
    }
    if (n_in <= 0 || n_out <= 0 || n_in % qt->blck_elems != 0) {
        return lares_fail(err, LARES_EFORMAT,
                          "tensor '%s': %" PRId64 " x %" PRId64
                          " does not fit %s blocks of %" PRId64,
                          what, n_out, n_in, qt->name, qt->blck_elems);
    }
    m->data = data;
    m->qt = qt;
    m->n_in = n_in;
    m->n_out = n_out;
    m->row_bytes = quant_row_bytes(type, n_in);
    return LARES_OK;
}

_Static_assert(OPS_ROWS_MAX >= QUANT_ROWS_MAX, "the few-row product takes its own rows whole");

/* whether the GEMM has w's type and shape (on the CPU) */
static bool gemm_fits(const ops_matrix *w) {
    return w->qt->gemm != NULL && w->n_in % QUANT_PANEL_GROUP == 0;
}

uint32_t ops_act_type(const ops_pool *pool, const ops_matrix *w, int64_t n_rows) {
    /* a product on a device takes the vec_dot_type rows (ops.h's offload) */
    const bool off = ops_pool_holds(pool, w);
    /* from one row, so that a row's result is the same alone and in a batch
     * (at one row the single-row dots were as fast on one host and faster on
     * another: docs/kernels.md, "Past eight rows") */
    if (!off && w->qt->rows != NULL && n_rows >= 1 && n_rows <= OPS_ROWS_MAX &&
        w->n_in % QUANT_ROWS_GROUP == 0) {
        return OPS_ACT_ROWS;
    }
    if (!off && n_rows >= OPS_GEMM_MIN_ROWS && gemm_fits(w)) {
        return OPS_ACT_PANELS;
    }
    return w->qt->vec_dot_type;
}

bool ops_gemm_takes(const ops_pool *pool, const ops_matrix *w) {
    return !ops_pool_holds(pool, w) && gemm_fits(w);
}

size_t ops_act_bytes(uint32_t type, int64_t n_rows, int64_t n_in) {
    if (type == OPS_ACT_PANELS) {
        const quant_panel_fmt *f = quant_panels();
        if (f == NULL) {
            return 0;
        }
        return (size_t)((n_rows + f->lanes - 1) / f->lanes) * quant_panel_bytes(f, n_in);
    }
    if (type == OPS_ACT_ROWS) {
        return (size_t)n_rows * quant_rows_bytes(n_in);
    }
    return (size_t)n_rows * quant_row_bytes(type, n_in);
}

typedef struct panel_task {
    const float *x;
    int64_t n_rows, n_in;
    const quant_panel_fmt *f;
    uint8_t *buf;
} panel_task;

static void act_panels(void *vctx, int ith, int nth) {
    const panel_task *t = vctx;
    const int64_t n_p = (t->n_rows + t->f->lanes - 1) / t->f->lanes;
    const size_t pb = quant_panel_bytes(t->f, t->n_in);
    int64_t lo, hi;
    ops_split(n_p, ith, nth, &lo, &hi);
    for (int64_t p = lo; p < hi; p++) {
        const int64_t r0 = p * t->f->lanes;
        const int n = (int)LARES_MIN((int64_t)t->f->lanes, t->n_rows - r0);
        t->f->from_float(t->x + r0 * t->n_in, (size_t)t->n_in, n, t->n_in, t->buf + (size_t)p * pb);
    }
}

/* Rows in groups (group g: rows start[g] .. start[g + 1] - 1, the last up to
 * n_rows), each group starting a panel of its own. */
typedef struct group_panel_task {
    const float *x;
    int64_t n_rows, n_in, n_panels;
    const int32_t *start;
    int32_t n_groups;
    const quant_panel_fmt *f;
    uint8_t *buf;
} group_panel_task;

static void act_group_panels(void *vctx, int ith, int nth) {
    const group_panel_task *t = vctx;
    const int L = t->f->lanes;
    const size_t pb = quant_panel_bytes(t->f, t->n_in);
    int64_t lo, hi;
    ops_split(t->n_panels, ith, nth, &lo, &hi);
    int64_t p0 = 0; /* the first panel of group g */
    for (int32_t g = 0; g < t->n_groups && p0 < hi; g++) {
        const int64_t r0 = t->start[g], r1 = g + 1 < t->n_groups ? t->start[g + 1] : t->n_rows;
        const int64_t np = (r1 - r0 + L - 1) / L;
        for (int64_t p = LARES_MAX(lo, p0); p < LARES_MIN(hi, p0 + np); p++) {
            const int64_t r = r0 + (p - p0) * L;
            const int n = (int)LARES_MIN((int64_t)L, r1 - r);
            t->f->from_float(t->x + r * t->n_in, (size_t)t->n_in, n, t->n_in,
                             t->buf + (size_t)p * pb);
        }
        p0 += np;
    }
}

void ops_act_group_panels(ops_pool *pool, const float *x, int64_t n_rows, int64_t n_in,
                          const int32_t *start, int32_t n_groups, void *buf, ops_act *out) {
    group_panel_task t = {.x = x,
                          .n_rows = n_rows,
                          .n_in = n_in,
                          .start = start,
                          .n_groups = n_groups,
                          .f = quant_panels(),
                          .buf = buf};
    for (int32_t g = 0; g < n_groups; g++) {
        const int64_t r0 = start[g], r1 = g + 1 < n_groups ? start[g + 1] : n_rows;
        t.n_panels += (r1 - r0 + t.f->lanes - 1) / t.f->lanes;
    }
    ops_pool_run_n(pool, act_group_panels, &t,
                   ops_pool_threads_for(pool, (double)n_rows * n_in, OPS_MIN_ELEMS_PER_THREAD));
    *out = (ops_act){.data = buf, .type = OPS_ACT_PANELS, .n_rows = n_rows, .n_in = n_in};
}

typedef struct act_task {
    const float *x;
    int64_t n_rows, n_in;
    const quant_traits *qt;
    uint8_t *buf;
    size_t row_bytes;
} act_task;

static void act_rows(void *vctx, int ith, int nth) {
    const act_task *t = vctx;
    int64_t lo, hi;
    ops_split(t->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        t->qt->from_float(t->x + r * t->n_in, t->buf + (size_t)r * t->row_bytes, t->n_in);
    }
}

typedef struct rows_task {
    const float *x;
    int64_t n_rows, n_in;
    const quant_rows_fmt *f;
    uint8_t *buf;
} rows_task;

static void act_rows_fmt(void *vctx, int ith, int nth) {
    const rows_task *t = vctx;
    const size_t rb = quant_rows_bytes(t->n_in);
    int64_t lo, hi;
    ops_split(t->n_rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        t->f->from_float(t->x + r * t->n_in, t->n_in, t->buf + (size_t)r * rb);
    }
}

void ops_act_prepare(ops_pool *pool, const float *x, int64_t n_rows, int64_t n_in, uint32_t type,
                     void *buf, ops_act *out) {
    out->type = type;
    out->n_rows = n_rows;
    out->n_in = n_in;
    out->row_bytes = quant_row_bytes(type, n_in);
    if (type == OPS_ACT_ROWS) {
        rows_task t = {.x = x, .n_rows = n_rows, .n_in = n_in, .f = quant_rows(), .buf = buf};
        out->row_bytes = quant_rows_bytes(n_in);
        if (pool != NULL && n_rows > 1) {
            const int nth =
                ops_pool_threads_for(pool, (double)n_rows * n_in, OPS_MIN_ELEMS_PER_THREAD);
            ops_pool_run_n(pool, act_rows_fmt, &t, nth);
        } else {
            act_rows_fmt(&t, 0, 1);
        }
        out->data = buf;
        return;
    }
    if (type == GGUF_TYPE_F32) {
        out->data = x;
        return;
    }
    if (type == OPS_ACT_PANELS) {
        panel_task t = {.x = x, .n_rows = n_rows, .n_in = n_in, .f = quant_panels(), .buf = buf};
        out->row_bytes = 0;
        ops_pool_run_n(pool, act_panels, &t,
                       ops_pool_threads_for(pool, (double)n_rows * n_in, OPS_MIN_ELEMS_PER_THREAD));
        out->data = buf;
        return;
    }
    act_task t = {.x = x,
                  .n_rows = n_rows,
                  .n_in = n_in,
                  .qt = quant_traits_of(type),
                  .buf = buf,
                  .row_bytes = out->row_bytes};
    if (pool != NULL && n_rows > 1) {
        ops_pool_run_n(pool, act_rows, &t,
                       ops_pool_threads_for(pool, (double)n_rows * n_in, OPS_MIN_ELEMS_PER_THREAD));
    } else {
        act_rows(&t, 0, 1);
    }
    out->data = buf;
}

/* The chunks of a product (numbered across its matrices in memory order) are
 * split into one contiguous region per thread. A thread takes the chunks of
 * its own region from the front, so it reads one long run of weights that
 * the hardware prefetchers follow; then it takes chunks from the back of the
 * region with the most left, so a thread slowed by another program on its
 * core still finishes with the others. A region is one atomic word: its next
 * chunk in the low 32 bits and its end in the high 32, so owner and thief
 * never take the same chunk. With one shared counter instead, the threads'
 * chunks interleaved every GEMV_CHUNK_BYTES and generation ran 15-20 % slower
 * (docs/performance.md, issue 14). */
#define MM_REGIONS_MAX 64

typedef struct mm_region {
    _Alignas(64) atomic_uint_fast64_t span;
} mm_region;

typedef struct mm_task {
    int n;
    const ops_matrix *const *ws;
    float *const *ys;
    const ops_act *const *acts;
    int64_t chunk_end[OPS_MATMUL_MAX];  /* cumulative chunk counts per matrix */
    int64_t chunk_rows[OPS_MATMUL_MAX]; /* rows per chunk of each matrix */
    int n_regions;
    mm_region region[MM_REGIONS_MAX];
} mm_task;

static uint64_t span_of(int64_t next, int64_t end) {
    return (uint64_t)next | (uint64_t)end << 32;
}

/* the next chunk of region r from its front (owner) or back (thief), -1 when empty */
static int64_t mm_take(mm_region *r, bool back) {
    uint64_t s = atomic_load_explicit(&r->span, memory_order_relaxed);
    for (;;) {
        const int64_t next = (int64_t)(s & 0xffffffffu), end = (int64_t)(s >> 32);
        if (next >= end) {
            return -1;
        }
        const uint64_t to = back ? span_of(next, end - 1) : span_of(next + 1, end);
        if (atomic_compare_exchange_weak_explicit(&r->span, &s, to, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            return back ? end - 1 : next;
        }
    }
}

/* the region with the most chunks left, -1 when every one is empty */
static int mm_fullest(mm_task *t) {
    int best = -1;
    int64_t most = 0;
    for (int r = 0; r < t->n_regions; r++) {
        const uint64_t s = atomic_load_explicit(&t->region[r].span, memory_order_relaxed);
        const int64_t left = (int64_t)(s >> 32) - (int64_t)(s & 0xffffffffu);
        if (left > most) {
            most = left;
            best = r;
        }
    }
    return best;
}

/* rows [r0, r1) of matrix w against every activation row */
static void mm_rows(const ops_matrix *w, const ops_act *a, float *y, int64_t r0, int64_t r1) {
    const uint8_t *wd = w->data;
    const uint8_t *ad = a->data;
    const int64_t n_out = w->n_out;
    const quant_traits *qt = w->qt;
    if (a->type == OPS_ACT_PANELS) {
        qt->gemm(w->n_in, wd + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0, ad, a->n_rows,
                 y + r0, (size_t)n_out);
        return;
    }
    if (a->type == OPS_ACT_ROWS) {
        /* past QUANT_ROWS_MAX rows, groups of as equal a size as fit the
         * product, each over the same weight rows: the first group reads them
         * from memory, the others from L2 (the chunk is GEMV_CHUNK_BYTES) */
        const int64_t n_g = (a->n_rows + QUANT_ROWS_MAX - 1) / QUANT_ROWS_MAX;
        for (int64_t g = 0, c0 = 0; g < n_g; g++) {
            const int64_t n_c = a->n_rows / n_g + (g < a->n_rows % n_g);
            qt->rows(w->n_in, wd + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0,
                     ad + (size_t)c0 * a->row_bytes, a->row_bytes, n_c, y + c0 * n_out + r0,
                     (size_t)n_out);
            c0 += n_c;
        }
        return;
    }
    if (a->n_rows == 1) {
        for (int64_t r = r0; r < r1; r++) {
            qt->vec_dot(w->n_in, y + r, wd + (size_t)r * w->row_bytes, ad);
        }
        return;
    }
    /* blocks of activation rows small enough to stay in L2 while four weight
     * rows at a time (in L1) meet every one of them */
    const int64_t tb = LARES_MAX((int64_t)QUANT_TILE_MAX,
                                 (int64_t)(ACT_BLOCK_BYTES / (a->row_bytes ? a->row_bytes : 1)) &
                                     ~(int64_t)(QUANT_TILE_MAX - 1));
    for (int64_t c0 = 0; c0 < a->n_rows; c0 += tb) {
        const int64_t c1 = LARES_MIN(c0 + tb, a->n_rows);
        for (int64_t r = r0; r < r1; r += QUANT_TILE_MAX) {
            const int nr = (int)LARES_MIN((int64_t)QUANT_TILE_MAX, r1 - r);
            const uint8_t *x = wd + (size_t)r * w->row_bytes;
            for (int64_t c = c0; c < c1; c += QUANT_TILE_MAX) {
                const int nc = (int)LARES_MIN((int64_t)QUANT_TILE_MAX, c1 - c);
                float *s = y + c * n_out + r;
                const uint8_t *yy = ad + (size_t)c * a->row_bytes;
                if (qt->vec_dot_tile != NULL) {
                    qt->vec_dot_tile(w->n_in, s, (size_t)n_out, x, w->row_bytes, yy, a->row_bytes,
                                     nr, nc);
                    continue;
                }
                for (int j = 0; j < nc; j++) {
                    for (int i = 0; i < nr; i++) {
                        qt->vec_dot(w->n_in, s + (size_t)j * n_out + i,
                                    x + (size_t)i * w->row_bytes, yy + (size_t)j * a->row_bytes);
                    }
                }
            }
        }
    }
}

static void mm_worker(void *vctx, int ith, int nth) {
    (void)nth;
    mm_task *t = vctx;
    bool own = ith < t->n_regions;
    for (;;) {
        int64_t chunk = own ? mm_take(&t->region[ith], false) : -1;
        if (chunk < 0) {
            own = false;
            const int victim = mm_fullest(t);
            if (victim < 0) {
                return;
            }
            chunk = mm_take(&t->region[victim], true);
            if (chunk < 0) {
                continue;
            }
        }
        int i = 0;
        while (chunk >= t->chunk_end[i]) {
            i++;
        }
        int64_t first = i == 0 ? 0 : t->chunk_end[i - 1];
        int64_t r0 = (chunk - first) * t->chunk_rows[i];
        int64_t r1 = LARES_MIN(r0 + t->chunk_rows[i], t->ws[i]->n_out);
        mm_rows(t->ws[i], t->acts[i], t->ys[i], r0, r1);
    }
}

void ops_matmul(ops_pool *pool, int n, const ops_matrix *const *ws, const ops_act *const *acts,
                float *const *ys) {
    assert(n >= 1 && n <= OPS_MATMUL_MAX);
    /* products whose matrix lives on a device run there (gpu module, issue 10) */
    ops_offload_fn off;
    void *off_user;
    ops_pool_offload(pool, &off, NULL, &off_user);
    const ops_matrix *rest_w[OPS_MATMUL_MAX];
    const ops_act *rest_a[OPS_MATMUL_MAX];
    float *rest_y[OPS_MATMUL_MAX];
    if (off != NULL) {
        bool done[OPS_MATMUL_MAX] = {false};
        off(off_user, n, ws, acts, ys, done);
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (!done[i]) {
                rest_w[k] = ws[i];
                rest_a[k] = acts[i];
                rest_y[k++] = ys[i];
            }
        }
        if (k == 0) {
            return;
        }
        n = k;
        ws = rest_w;
        acts = rest_a;
        ys = rest_y;
    }
    mm_task t = {.n = n, .ws = ws, .ys = ys, .acts = acts};
    int64_t acc = 0;
    for (int i = 0; i < n; i++) {
        int64_t rows = CHUNK_ROWS;
        if (acts[i]->n_rows == 1 || acts[i]->type == OPS_ACT_ROWS) {
            /* a multiple of 16 rows near GEMV_CHUNK_BYTES */
            rows = LARES_MAX((int64_t)CHUNK_ROWS,
                             (int64_t)(GEMV_CHUNK_BYTES / ws[i]->row_bytes) & ~(int64_t)15);
        }
        t.chunk_rows[i] = rows;
        acc += (ws[i]->n_out + rows - 1) / rows;
        t.chunk_end[i] = acc;
    }
    /* work in weight bytes touched per activation row block */
    double bytes = 0;
    for (int i = 0; i < n; i++) {
        bytes += (double)ws[i]->row_bytes * ws[i]->n_out *
                 (double)LARES_MAX((int64_t)1, acts[i]->n_rows / QUANT_TILE_MAX);
    }
    const int64_t total = t.chunk_end[n - 1];
    const int nth = LARES_MIN(ops_pool_threads_for(pool, bytes, MIN_BYTES_PER_THREAD),
                              (int)LARES_MIN(total, (int64_t)1 << 20));
    t.n_regions = pool == NULL ? 1 : LARES_MAX(1, LARES_MIN(nth, MM_REGIONS_MAX));
    for (int r = 0; r < t.n_regions; r++) {
        atomic_init(&t.region[r].span, span_of(total * r / t.n_regions,
                                               total * (r + 1) / t.n_regions));
    }
    if (pool == NULL || nth <= 1) {
        mm_worker(&t, 0, 1);
    } else {
        ops_pool_run_n(pool, mm_worker, &t, nth);
    }
}
