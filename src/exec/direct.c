/*
 * Direct reads of streamed units into buffers the executor owns.
 *
 * Through the page cache a streamed layer costs the kernel's CPU twice
 * (filling pages, then reclaiming them) on the cores the compute needs, and
 * its read-ahead reads past what was asked. Read directly (mem_direct_read:
 * O_DIRECT, 4 MiB requests, several in flight), a unit lands in an owned
 * buffer and the forward pass's views of its weights are pointed there until
 * it is released: the forward pass runs on `view`, a copy of the model whose
 * layer array is the executor's own (the model itself stays read-only and
 * shared). Pinned units, the embedding and MoE expert slices keep coming
 * through the mapping (expert slices have their own direct reads,
 * experts_direct.c, with their views in the same copy of the layers).
 *
 * A weight's bytes keep their file offset modulo 4096 in the buffer (see
 * mem_layout_of), so every tensor is exactly as aligned as in the mapping and
 * the kernels see no difference: outputs are bit-identical.
 *
 * A unit is one or a few parts of a layer (plan.c): its views are those of
 * the roles of those parts. Units differ in size (llama-7b Q4_K_M: 37 to 50
 * MB), so every buffer is made the size of the largest streamed unit of the
 * layers and each of those units in flight counts a whole buffer against the
 * window: any spare then serves any unit, where buffers cut to each unit's
 * size were unmapped and mapped again about 20 times a token (each new one
 * faulted in and zeroed by the kernel, on the cores the compute needs). The
 * output matrix, when it streams, has a buffer of its own size, which no
 * layer's unit takes (it would hold more than the window counts).
 *
 * Threads: the prefetch thread alone fetches and releases while it runs;
 * init, open, drop and free run on the caller's thread while it is stopped.
 * The caller reads a layer's views only between acquire and done, which the
 * stream's lock orders after the fetch that set them.
 */
#include "exec/exec_impl.h"

void exec_direct_init(exec_local *e) {
    e->dx.view = *e->m;
    e->dx.view.layers = NULL;
}

const model *exec_direct_model(const exec_local *e) {
    return e->dx.layers != NULL ? &e->dx.view : e->m;
}

bool exec_direct_view(exec_local *e) {
    exec_direct *dx = &e->dx;
    if (dx->layers != NULL) {
        return true;
    }
    const size_t n_layer = (size_t)e->m->hp.n_layer;
    dx->layers = lares_alloc_array(LARES_MAX(n_layer, 1), sizeof *dx->layers);
    if (dx->layers == NULL) {
        return false;
    }
    memcpy(dx->layers, e->m->layers, n_layer * sizeof *dx->layers);
    dx->view.layers = dx->layers;
    return true;
}

/* Under `auto` direct reads are kept unless the page cache reads this file
 * clearly faster: both are timed on four slices from the largest streamed
 * unit on, cold (released first), in the order direct, page cache, page
 * cache, direct, so that a disk that speeds up or slows down during the probe
 * favours neither. Each slice is the unit's size up to 64 MiB: the reads of
 * one unit are what streaming does (with 8 MiB slices, two requests in
 * flight, llama-7b's file read 0.56 GB/s directly against 0.72 through the
 * page cache, where its 50 MB units read 1.7-1.9 against 1.3-1.4). That is
 * four units read once per executor (llama-7b Q4_K_M: 200 MB, about 0.1 s
 * here); no probe under 64 KiB a slice, nor where pages stay resident after
 * the release (another process maps them). Direct reads also spare the
 * kernel's page-cache work on the cores the compute needs, so the page cache
 * must be faster by `margin` (default 1.25). Keeps the measured rates in
 * e->dx; false: read through the page cache. */
#define PROBE_SLICE_MAX (64ull << 20)
#define PROBE_SLICE_MIN (64ull << 10)
#define PROBE_MARGIN    1.25 /* the planner's SCHED_DIRECT_HEADROOM (sched.h) */

/* One slice [lo, lo + bytes) (both block-aligned) read cold: directly into
 * buf (bytes long), or through the page cache where buf is NULL */
static bool probe_one(exec_local *e, uint64_t lo, uint64_t bytes, void *buf, mem_io *sum) {
    mem_span sp = {0};
    mem_layout lay = {0};
    lares_error err = {0};
    bool ok = mem_span_add(&sp, lo, lo + bytes, &err) == LARES_OK;
    mem_release(&e->mf, &sp);
    /* (a direct read does not care what the page cache holds) */
    ok = ok && (buf != NULL || mem_resident_bytes(&e->mf, &sp) == 0);
    mem_io io = {0};
    if (ok && buf != NULL) {
        ok = mem_layout_of(&sp, MEM_DIRECT_ALIGN, &lay, &err) == LARES_OK && lay.bytes <= bytes &&
             mem_direct_read(e->dx.d, &lay, buf, &io, &err) == LARES_OK;
        mem_layout_free(&lay);
    } else if (ok) {
        const mem_read_method how =
            e->o.read_method == MEM_READ_PREAD ? MEM_READ_DEFAULT : e->o.read_method;
        ok = mem_prefetch(&e->mf, &sp, how, NULL, 0, &io, &err) == LARES_OK;
        mem_release(&e->mf, &sp);
    }
    mem_span_free(&sp);
    sum->bytes += io.bytes;
    sum->ns += io.ns;
    return ok && io.ns > 0;
}

static bool direct_pays(exec_local *e) {
    const exec_unit *big = NULL;
    for (int32_t i = 0; i < e->n_units; i++) {
        const exec_unit *un = &e->units[i];
        if (!un->pinned && un->layer >= 0 && un->span.n > 0 &&
            (big == NULL || un->span.bytes > big->span.bytes)) {
            big = un;
        }
    }
    if (big == NULL) {
        return true;
    }
    /* slices of a unit's size up to 64 MiB, from the unit's start on; the
     * page cache's two are not neighbours, since the fault path's read-ahead
     * of the first runs on into the next slice (which is left out) */
    const uint64_t lo = big->span.r[0].lo / MEM_DIRECT_ALIGN * MEM_DIRECT_ALIGN;
    const uint64_t room = e->mf.bytes > lo ? (e->mf.bytes - lo) / 5 : 0;
    const uint64_t slice = LARES_MIN(LARES_MIN(PROBE_SLICE_MAX, big->span.bytes), room) /
                           MEM_DIRECT_ALIGN * MEM_DIRECT_ALIGN;
    if (slice < PROBE_SLICE_MIN) {
        return true;
    }
    mem_io direct = {0}, cached = {0};
    const int at[4] = {0, 1, 3, 4};
    const bool is_direct[4] = {true, false, false, true};
    void *buf = mem_buffer_map((size_t)slice); /* both direct slices land here */
    bool ok = buf != NULL;
    for (int i = 0; i < 4 && ok; i++) {
        ok = probe_one(e, lo + (uint64_t)at[i] * slice, slice, is_direct[i] ? buf : NULL,
                       is_direct[i] ? &direct : &cached);
    }
    if (buf != NULL) {
        mem_buffer_unmap(buf, (size_t)slice);
    }
    mem_span all = {0}; /* whatever read-ahead left */
    lares_error err = {0};
    if (mem_span_add(&all, lo, lo + 5 * slice, &err) == LARES_OK) {
        mem_release(&e->mf, &all);
    }
    mem_span_free(&all);
    if (!ok) {
        return true;
    }
    exec_direct *dx = &e->dx;
    dx->probe_direct_Bps = (double)direct.bytes * 1e9 / (double)direct.ns;
    dx->probe_mmap_Bps = (double)cached.bytes * 1e9 / (double)cached.ns;
    return exec_probe_verdict(e, "streamed units", dx->probe_direct_Bps, dx->probe_mmap_Bps,
                              PROBE_MARGIN);
}

bool exec_probe_verdict(const exec_local *e, const char *what, double direct_Bps,
                        double mmap_Bps, double margin) {
    margin = e->o.direct_margin > 0 ? e->o.direct_margin : margin;
    const bool pays = mmap_Bps <= margin * direct_Bps;
    lares_log(LARES_LOG_INFO, "exec: %s: %s read %.2f GB/s directly and %.2f GB/s through the "
              "page cache: %s", e->mf.path, what, direct_Bps / 1e9, mmap_Bps / 1e9,
              pays ? "reading directly" : "through the page cache");
    return pays;
}

bool exec_direct_open(exec_local *e) {
    exec_direct *dx = &e->dx;
    if (dx->d != NULL) {
        return true;
    }
    if (e->o.stream_io == EXEC_IO_MMAP || dx->tried) {
        return false;
    }
    dx->tried = true;
    const bool asked = e->o.stream_io == EXEC_IO_DIRECT;
    lares_error err = {0};
    if (e->mf.fd < 0) {
        lares_fail(&err, LARES_EUNSUPPORTED, "%s: not a file", e->mf.path);
    } else if (mem_direct_open(e->mf.path, e->o.direct_engine, &dx->d, &err) == LARES_OK) {
        if (!exec_direct_view(e)) {
            lares_fail(&err, LARES_ENOMEM, "exec: out of memory for the layer views");
        }
        for (int32_t i = 0; i < e->n_units && dx->layers != NULL; i++) {
            if (mem_layout_of(&e->units[i].span, MEM_DIRECT_ALIGN, &e->units[i].lay, &err) !=
                LARES_OK) {
                break;
            }
        }
        if (err.msg[0] == '\0' && (asked || direct_pays(e))) {
            lares_log(LARES_LOG_INFO, "exec: streamed layers of %s are read directly (%s)",
                      e->mf.path, mem_direct_engine_name(mem_direct_engine_of(dx->d)));
            return true;
        }
        mem_direct_close(dx->d); /* (the view stays: no unit points into a buffer) */
        dx->d = NULL;
        if (err.msg[0] == '\0') { /* the probe found the page cache faster */
            lares_log(LARES_LOG_INFO,
                      "exec: streamed layers of %s go through the page cache (faster here)",
                      e->mf.path);
            return false;
        }
    }
    lares_log(asked ? LARES_LOG_WARN : LARES_LOG_INFO,
              "exec: %s; streamed layers go through the page cache", err.msg);
    return false;
}

/* Points the unit's views into buf, or back into the mapping (buf NULL). */
static void point_views(exec_local *e, const exec_unit *un, const uint8_t *buf) {
    const model *m = e->m;
    const uint8_t *base = e->mf.base;
    if (un->layer >= 0) {
        const model_layer_plan *lp = &m->plan->layers[un->layer];
        const model_layer *from = &m->layers[un->layer];
        model_layer *to = &e->dx.layers[un->layer];
        for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
            const model_weight *w = &lp->w[r];
            if (w->t == NULL || w->form == MODEL_FORM_EXPERTS ||
                model_role_part((model_role)r) < un->part_lo ||
                model_role_part((model_role)r) > un->part_hi) {
                continue; /* absent, read per choice through the mapping, or another unit's */
            }
            const uint8_t *at = buf ? mem_layout_addr(&un->lay, buf, w->lo, w->bytes) : NULL;
            if ((const uint8_t *)from->mat[r].data == base + w->lo) {
                to->mat[r].data = at ? at : from->mat[r].data;
            }
            if ((const uint8_t *)from->vec[r] == base + w->lo) { /* not a widened copy */
                to->vec[r] = at ? (const float *)(const void *)at : from->vec[r];
            }
        }
        return;
    }
    const model_plan *p = m->plan;
    model *v = &e->dx.view;
    const uint8_t *at = buf ? mem_layout_addr(&un->lay, buf, p->output.lo, p->output.bytes) : NULL;
    if ((const uint8_t *)m->output.data == base + p->output.lo) {
        v->output.data = at ? at : m->output.data;
    }
    at = buf ? mem_layout_addr(&un->lay, buf, p->output_norm.lo, p->output_norm.bytes) : NULL;
    if ((const uint8_t *)m->output_norm == base + p->output_norm.lo) {
        v->output_norm = at ? (const float *)(const void *)at : m->output_norm;
    }
}

static void unmap_spare(exec_direct *dx, size_t i) {
    mem_buffer_unmap(dx->spare[i].p, dx->spare[i].bytes);
    dx->spare_bytes -= dx->spare[i].bytes;
    dx->spare[i] = dx->spare[--dx->n_spare];
}

/* A buffer of at least `need` bytes: the best fitting spare, else a new one
 * after unmapping spares until the buffers fit the window again. */
static bool take_buffer(exec_local *e, size_t need, uint64_t limit, exec_buffer *out) {
    exec_direct *dx = &e->dx;
    size_t best = SIZE_MAX;
    /* a spare serves a unit it holds and is no larger than the unit's own
     * size of buffer: a layer's unit does not take the output matrix's */
    const size_t most = LARES_MAX(need, (size_t)dx->slot_lay);
    for (size_t i = 0; i < dx->n_spare; i++) {
        const size_t b = dx->spare[i].bytes;
        if (b >= need && b <= most && (best == SIZE_MAX || b < dx->spare[best].bytes)) {
            best = i;
        }
    }
    if (best != SIZE_MAX) {
        *out = dx->spare[best];
        dx->spare_bytes -= out->bytes;
        dx->spare[best] = dx->spare[--dx->n_spare];
        dx->live_bytes += out->bytes;
        return true;
    }
    /* (limit: the window; the read-ahead slack stays for the pinned units'
     * reads through the page cache) */
    while (dx->n_spare > 0 && dx->live_bytes + dx->spare_bytes + most > limit) {
        size_t largest = 0;
        for (size_t i = 1; i < dx->n_spare; i++) {
            largest = dx->spare[i].bytes > dx->spare[largest].bytes ? i : largest;
        }
        unmap_spare(dx, largest);
    }
    out->p = mem_buffer_map(most);
    if (out->p == NULL) {
        return false;
    }
    out->bytes = most;
    dx->live_bytes += most;
    dx->peak_bytes = LARES_MAX(dx->peak_bytes, dx->live_bytes + dx->spare_bytes);
    return true;
}

static void give_buffer(exec_direct *dx, uint8_t *p, size_t bytes) {
    dx->live_bytes -= bytes;
    exec_buffer *s = lares_realloc(dx->spare, (dx->n_spare + 1) * sizeof *s);
    if (s == NULL) {
        mem_buffer_unmap(p, bytes); /* cannot keep it: give it back */
        return;
    }
    dx->spare = s;
    dx->spare[dx->n_spare++] = (exec_buffer){.p = p, .bytes = bytes};
    dx->spare_bytes += bytes;
}

void exec_direct_slots(exec_local *e) {
    exec_direct *dx = &e->dx;
    dx->slot_span = 0;
    dx->slot_lay = 0;
    for (int32_t i = 0; dx->d != NULL && i < e->n_units; i++) {
        const exec_unit *un = &e->units[i];
        if (!un->pinned && i != e->out_unit) {
            dx->slot_span = LARES_MAX(dx->slot_span, un->span.bytes);
            dx->slot_lay = LARES_MAX(dx->slot_lay, un->lay.bytes);
        }
    }
}

uint64_t exec_direct_cost(const exec_local *e, const exec_unit *un) {
    if (e->dx.d == NULL || un->pinned || un->lay.bytes == 0 || un->layer < 0) {
        return un->span.bytes; /* (the output matrix, once a pass, has a buffer of its size) */
    }
    return LARES_MAX(un->span.bytes, e->dx.slot_span);
}

lares_status exec_direct_fetch(exec_local *e, exec_unit *un, uint64_t window, mem_io *io,
                               lares_error *err) {
    exec_direct *dx = &e->dx;
    exec_buffer b;
    if (!take_buffer(e, (size_t)un->lay.bytes, window, &b)) {
        return lares_fail(err, LARES_ENOMEM, "exec: no memory for a %" PRIu64 "-byte read buffer",
                          un->lay.bytes);
    }
    lares_status st = mem_direct_read(dx->d, &un->lay, b.p, io, err);
    if (st != LARES_OK) {
        give_buffer(dx, b.p, b.bytes);
        return st;
    }
    un->buf = b.p;
    un->buf_bytes = b.bytes;
    point_views(e, un, un->buf);
    return LARES_OK;
}

uint64_t exec_direct_release(exec_local *e, exec_unit *un) {
    point_views(e, un, NULL);
    const uint64_t bytes = un->buf_bytes;
    give_buffer(&e->dx, un->buf, un->buf_bytes);
    un->buf = NULL;
    un->buf_bytes = 0;
    return bytes;
}

void exec_direct_drop(exec_local *e) {
    exec_direct *dx = &e->dx;
    for (int32_t i = 0; i < e->n_units; i++) {
        exec_unit *un = &e->units[i];
        if (un->buf != NULL) {
            exec_direct_release(e, un);
            un->state = UNIT_IDLE;
        }
    }
    while (dx->n_spare > 0) {
        unmap_spare(dx, dx->n_spare - 1);
    }
}

void exec_direct_free(exec_local *e) {
    exec_direct *dx = &e->dx;
    exec_direct_drop(e);
    lares_free(dx->spare);
    dx->spare = NULL;
    for (int32_t i = 0; i < e->n_units; i++) {
        mem_layout_free(&e->units[i].lay);
    }
    mem_direct_close(dx->d);
    dx->d = NULL;
    lares_free(dx->layers);
    dx->layers = NULL;
    dx->view.layers = NULL;
}
