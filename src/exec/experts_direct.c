/*
 * Direct reads of MoE expert slices into slots the executor owns.
 *
 * Through the page cache a missing expert is asked for with WILLNEED and
 * populated when the pass needs it: the kernel fills its pages, and later
 * reclaims them, on the cores the compute needs, and what the cache holds is
 * file pages the cgroup counts until the kernel reclaims them. Read directly
 * (O_DIRECT, the extents of every missing slice of a layer in flight
 * together), a slice lands in a slot of an owned arena and the view's
 * matrices of that expert point there until the cache drops it (the view is
 * the executor's copy of the model, direct.c; its MoE layers point at
 * `exps`, our own copy of their expert matrices).
 *
 * Slots: the slices' layouts come in a few sizes (a type mix gives some
 * layers' experts other types than others'), and each size has its slots, a
 * slot for every slice of that size, in one arena reserved at the start (no
 * memory is set aside: pages come as slots are filled). The cache counts a
 * slice as its slot's bytes, and a slot given back stays warm (its pages in
 * memory, for the next slice of its size) until the slots with pages would
 * outgrow the cache's capacity: then warm slots of other sizes give their
 * pages back first. A byte keeps its file offset modulo 4096 in its slot
 * (slots lie multiples of 4096 apart), so every matrix is as aligned as in
 * the mapping and the outputs do not change.
 *
 * The reads: the router's hook (the caller's thread) takes a free slot for
 * each missing slice, points its views there and submits the extents of all
 * of them as one read (mem_direct_submit: io_uring requests in flight while
 * the caller goes on; the threads engine reads them before it returns); the
 * pass computes the experts already in memory meanwhile, then finishes the
 * read of each late expert (mem_direct_finish). No thread of ours is woken: on
 * two busy cores a reader thread waited milliseconds to be scheduled. A slot
 * is given back only after the read into it has landed. A failed read turns
 * direct reads off for the executor: every slice leaves the cache, with a
 * warning, and the page cache serves.
 *
 * Under `auto` a probe decides, as for streamed units (direct.c): four
 * batches of a token's worth of one layer's experts, read cold in the order
 * direct, page cache, page cache, direct, the page cache's exactly as the
 * cache reads misses (WILLNEED on all, then populate each).
 */
#include "exec/exec_impl.h"

#define PROBE_MIN_BYTES (64ull << 10)
/* No thumb on the scale, unlike the units' 1.25 (direct.c): measured on
 * qwen3moe-7b in 1.2 and 2.55 GB, direct reads of experts ran no faster than
 * the page cache (docs/performance.md), their slots' first fills costing a
 * zeroing the page cache does not pay. */
#define PROBE_MARGIN    1.0

static const model_role roles[3] = {MODEL_ROLE_EXP_GATE, MODEL_ROLE_EXP_UP, MODEL_ROLE_EXP_DOWN};

/* where slot k of slice s's class lies in the arena */
static uint64_t slot_at(const exec_expert_io *io, size_t s, int32_t k) {
    const exec_slot_class *c = &io->cls[io->class_of[s]];
    return c->at + (uint64_t)k * c->bytes;
}

static size_t n_slices(const exec_local *e) {
    return (size_t)e->m->hp.n_layer * (size_t)e->x.n_expert;
}

/* Points slice s's matrices in the view into slot k, or back into the
 * mapping (k < 0). */
static void point(exec_local *e, size_t s, int32_t k) {
    exec_expert_io *io = &e->x.io;
    const int32_t ne = e->x.n_expert;
    const int32_t l = (int32_t)(s / (size_t)ne), ex = (int32_t)(s % (size_t)ne);
    const model_layer_plan *lp = &e->m->plan->layers[l];
    for (int r = 0; r < 3; r++) {
        const model_weight *w = &lp->w[roles[r]];
        if (w->t == NULL) {
            continue;
        }
        const void *from = e->m->layers[l].exps[roles[r]][ex].data;
        ops_matrix *to = &io->exps[((size_t)l * 3 + (size_t)r) * (size_t)ne + (size_t)ex];
        mem_range rg;
        lares_error err = {0};
        const uint8_t *at = NULL;
        if (k >= 0 && mem_expert_range(w, ex, &rg, &err) == LARES_OK &&
            (const uint8_t *)from == e->mf.base + rg.lo) {
            at = mem_layout_addr(&io->lay[s], io->arena + slot_at(io, s, k), rg.lo,
                                 rg.hi - rg.lo);
        }
        to->data = at != NULL ? at : from;
    }
}

/* The probe's batches of `per` slices of layer l (n_batch of them, a
 * multiple of 4), each timed cold: direct, page cache, page cache, direct,
 * and so on. A direct batch lands in fresh memory, as a slot's first read
 * does: the kernel zeroes every page before the read fills it, which the
 * page cache does not (its pages are filled by the read itself). */
static bool probe(exec_local *e, int32_t l, int32_t per, int32_t n_batch) {
    exec_experts *x = &e->x;
    exec_expert_io *io = &x->io;
    const size_t base = (size_t)l * (size_t)x->n_expert;
    uint64_t bytes[2] = {0, 0}, ns[2] = {0, 0};
    bool ok = true;
    for (int32_t i = 0; i < n_batch && ok; i++) {
        const bool direct = (i % 4 == 0) || (i % 4 == 3);
        mem_span all = {0};
        mem_layout lay = {0};
        lares_error err = {0};
        uint64_t got = 0;
        for (int32_t j = 0; j < per && ok; j++) {
            const size_t s = base + (size_t)(i * per + j);
            ok = mem_span_add_span(&all, &x->slices[s], &err) == LARES_OK &&
                 mem_layout_append(&lay, &io->lay[s], lay.bytes, &err) == LARES_OK;
            got += x->slices[s].bytes;
        }
        mem_release(&e->mf, &all);
        /* cold but for pages shared with neighbours (a release keeps those;
         * tests' tiny slices share most of theirs) */
        ok = ok && (direct || e->o.expert_probe_any ||
                    mem_resident_bytes(&e->mf, &all) <= all.bytes / 16);
        uint8_t *buf = ok && direct ? mem_buffer_reserve((size_t)lay.bytes) : NULL;
        ok = ok && (buf != NULL || !direct);
        const uint64_t t0 = lares_now_ns();
        if (ok && direct) {
            ok = mem_direct_read(io->d, &lay, buf, NULL, &err) == LARES_OK;
        } else if (ok) { /* as the cache: every read asked for, then each populated */
            for (int32_t j = 0; j < per; j++) {
                mem_prefetch_async(&e->mf, &x->slices[base + (size_t)(i * per + j)]);
            }
            for (int32_t j = 0; j < per && ok; j++) {
                ok = mem_prefetch(&e->mf, &x->slices[base + (size_t)(i * per + j)],
                                  MEM_READ_FADVISE_POPULATE, NULL, 0, NULL, &err) == LARES_OK;
            }
        }
        ns[direct] += lares_now_ns() - t0;
        bytes[direct] += got;
        mem_buffer_unmap(buf, (size_t)lay.bytes);
        mem_release(&e->mf, &all);
        mem_span_free(&all);
        mem_layout_free(&lay);
    }
    if (!ok || ns[0] == 0 || ns[1] == 0) {
        return false;
    }
    io->probe_direct_Bps = (double)bytes[1] * 1e9 / (double)ns[1];
    io->probe_mmap_Bps = (double)bytes[0] * 1e9 / (double)ns[0];
    return true;
}

/* auto: whether direct reads of experts pay. Not where a slice's slot is
 * more than 2 % larger than the slice (its three ranges round out to blocks:
 * the cache would hold that many fewer experts), nor where a probe's batches
 * would be under 64 KiB (too small to measure; the page cache serves, which
 * on qwen3moe-7b here was as fast); else where the probe finds them at least
 * as fast as the page cache. */
static bool direct_pays(exec_local *e) {
    exec_experts *x = &e->x;
    uint64_t slice_bytes = 0, slot_bytes = 0, n = 0;
    for (size_t s = 0; s < n_slices(e); s++) {
        if (x->slices[s].n > 0) {
            slice_bytes += x->slices[s].bytes;
            slot_bytes += exec_experts_direct_cost(e, s);
            n++;
        }
    }
    const bool any = e->o.expert_probe_any; /* tests: probe, and follow the margin */
    if (!any && slot_bytes * 50 > slice_bytes * 51) {
        lares_log(LARES_LOG_INFO, "exec: %s: expert slices of %.0f KiB on average round out to "
                  "%.1f %% more in slots: through the page cache", e->mf.path,
                  (double)slice_bytes / 1024.0 / (double)LARES_MAX(n, 1),
                  100.0 * ((double)slot_bytes / (double)slice_bytes - 1.0));
        return false;
    }
    const int32_t per = LARES_MIN(e->m->hp.n_expert_used, x->n_expert / 4);
    const int32_t n_batch = per > 0 && x->n_expert / per >= 8 ? 8 : 4;
    int32_t l = 0;
    while (l < e->m->hp.n_layer && x->slices[(size_t)l * (size_t)x->n_expert].n == 0) {
        l++;
    }
    if (per <= 0 || l == e->m->hp.n_layer ||
        (!any &&
         (uint64_t)per * x->slices[(size_t)l * (size_t)x->n_expert].bytes < PROBE_MIN_BYTES)) {
        return false;
    }
    if (!probe(e, l, per, n_batch)) {
        lares_log(LARES_LOG_INFO, "exec: %s: the probe of expert reads failed", e->mf.path);
        return false;
    }
    return exec_probe_verdict(e, "expert slices", x->io.probe_direct_Bps, x->io.probe_mmap_Bps,
                              PROBE_MARGIN);
}

/* Everything open() made, undone (the probe's rates and `tried` stay): the
 * view's MoE layers point at the model's experts again (when the view is
 * still there). */
static void teardown(exec_local *e) {
    exec_expert_io *io = &e->x.io;

    for (int32_t l = 0; e->dx.layers != NULL && l < e->m->hp.n_layer; l++) {
        for (int r = 0; r < 3; r++) {
            e->dx.layers[l].exps[roles[r]] = e->m->layers[l].exps[roles[r]];
        }
    }
    if (io->lay != NULL) {
        for (size_t s = 0; s < n_slices(e); s++) {
            mem_layout_free(&io->lay[s]);
        }
    }
    mem_layout_free(&io->queue);
    mem_direct_close(io->d); /* (it waits for the reads in flight into the arena) */
    mem_buffer_unmap(io->arena, (size_t)io->arena_bytes);
    for (int32_t c = 0; c < io->n_cls; c++) {
        lares_free(io->cls[c].warm);
        lares_free(io->cls[c].cold);
    }
    lares_free(io->lay);
    lares_free(io->class_of);
    lares_free(io->exps);
    lares_free(io->slot_of);
    lares_free(io->batch_of);
    lares_free(io->pending);
    const double pd = io->probe_direct_Bps, pm = io->probe_mmap_Bps;
    const bool tried = io->tried;
    memset(io, 0, sizeof *io);
    io->probe_direct_Bps = pd;
    io->probe_mmap_Bps = pm;
    io->tried = tried;
}

/* The class of a layout of `bytes`, a new one where there is room; -1: none. */
static int32_t class_for(exec_expert_io *io, uint64_t bytes) {
    for (int32_t c = 0; c < io->n_cls; c++) {
        if (io->cls[c].bytes == bytes) {
            return c;
        }
    }
    if (io->n_cls == EXEC_SLOT_CLASSES) {
        return -1;
    }
    io->cls[io->n_cls].bytes = bytes;
    return io->n_cls++;
}

/* The layouts, their classes and slots, the view's expert matrices. */
static lares_status build(exec_local *e, lares_error *err) {
    exec_experts *x = &e->x;
    exec_expert_io *io = &x->io;
    const size_t n = n_slices(e), ne = (size_t)x->n_expert;
    io->lay = lares_calloc(n, sizeof *io->lay);
    io->class_of = lares_calloc(n, sizeof *io->class_of);
    io->exps = lares_calloc(n * 3, sizeof *io->exps);
    io->slot_of = lares_alloc_array(n, sizeof *io->slot_of);
    io->batch_of = lares_calloc(n, sizeof *io->batch_of);
    io->pending = lares_alloc_array(n, sizeof *io->pending);
    if (io->lay == NULL || io->class_of == NULL || io->exps == NULL || io->slot_of == NULL ||
        io->batch_of == NULL || io->pending == NULL || !exec_direct_view(e)) {
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory for %zu expert slots", n);
    }
    for (size_t s = 0; s < n; s++) {
        io->slot_of[s] = -1;
        if (x->slices[s].n == 0) {
            continue;
        }
        const lares_status st = mem_layout_of(&x->slices[s], MEM_DIRECT_ALIGN, &io->lay[s], err);
        if (st != LARES_OK) {
            return st;
        }
        const int32_t c = class_for(io, io->lay[s].bytes);
        if (c < 0) {
            return lares_fail(err, LARES_EUNSUPPORTED, "exec: expert slices of more than %d sizes",
                              EXEC_SLOT_CLASSES);
        }
        io->class_of[s] = (uint8_t)c;
        io->cls[c].n++;
    }
    for (int32_t c = 0; c < io->n_cls; c++) {
        exec_slot_class *k = &io->cls[c];
        k->at = io->arena_bytes;
        io->arena_bytes += (uint64_t)k->n * k->bytes;
        k->warm = lares_alloc_array((size_t)k->n, sizeof *k->warm);
        k->cold = lares_alloc_array((size_t)k->n, sizeof *k->cold);
        if (k->warm == NULL || k->cold == NULL) {
            return lares_fail(err, LARES_ENOMEM, "exec: out of memory for %d expert slots", k->n);
        }
        for (int32_t i = k->n - 1; i >= 0; i--) { /* slot 0 on top */
            k->cold[k->n_cold++] = i;
        }
    }
    io->arena = mem_buffer_reserve((size_t)io->arena_bytes);
    if (io->arena == NULL) {
        return lares_fail(err, LARES_ENOMEM, "exec: no room for %" PRIu64 " bytes of expert slots",
                          io->arena_bytes);
    }
    for (int32_t l = 0; l < e->m->hp.n_layer; l++) {
        for (int r = 0; r < 3; r++) {
            const ops_matrix *from = e->m->layers[l].exps[roles[r]];
            if (from == NULL || x->slices[(size_t)l * ne].n == 0) {
                continue;
            }
            ops_matrix *to = &io->exps[((size_t)l * 3 + (size_t)r) * ne];
            memcpy(to, from, ne * sizeof *to);
            e->dx.layers[l].exps[roles[r]] = to;
        }
    }
    return LARES_OK;
}

bool exec_experts_direct_open(exec_local *e) {
    exec_experts *x = &e->x;
    exec_expert_io *io = &x->io;
    if (io->d != NULL) {
        return true;
    }
    if (x->slices == NULL || x->bytes == 0 || e->o.stream_io == EXEC_IO_MMAP || io->tried) {
        return false;
    }
    io->tried = true;
    const bool asked = e->o.stream_io == EXEC_IO_DIRECT;
    lares_error err = {0};
    if (e->mf.fd < 0) {
        lares_fail(&err, LARES_EUNSUPPORTED, "%s: not a file", e->mf.path);
    } else if (mem_direct_open(e->mf.path, e->o.direct_engine, &io->d, &err) == LARES_OK &&
               build(e, &err) == LARES_OK) {
        if (!asked && !direct_pays(e)) {
            teardown(e);
            return false;
        }
        lares_log(LARES_LOG_INFO, "exec: expert slices of %s are read directly (%s)",
                  e->mf.path, mem_direct_engine_name(mem_direct_engine_of(io->d)));
        return true;
    }
    teardown(e);
    lares_log(asked ? LARES_LOG_WARN : LARES_LOG_INFO,
              "exec: %s; expert slices go through the page cache", err.msg);
    return false;
}

void exec_experts_direct_close(exec_local *e) {
    teardown(e);
}

/* Waits until the read of slice s has landed; false: a read failed. */
static bool landed(exec_expert_io *io, size_t s) {
    if (io->batch_of[s] == 0) {
        return !io->failed;
    }
    lares_error err = {0};
    if (mem_direct_finish(io->d, io->batch_of[s], &err) != LARES_OK && !io->failed) {
        io->failed = true;
        io->err = err;
    }
    io->batch_of[s] = 0;
    return !io->failed;
}

void exec_experts_direct_drop(exec_local *e, size_t s) {
    exec_expert_io *io = &e->x.io;
    const int32_t k = io->slot_of[s];
    if (k < 0) {
        return;
    }
    (void)landed(io, s); /* the kernel may still be writing into the slot */
    point(e, s, -1);
    io->slot_of[s] = -1;
    exec_slot_class *c = &io->cls[io->class_of[s]];
    c->warm[c->n_warm++] = k;
}

uint64_t exec_experts_direct_cost(const exec_local *e, size_t s) {
    const exec_expert_io *io = &e->x.io;
    return io->cls[io->class_of[s]].bytes;
}

/* Gives the pages of a warm free slot back, of a class other than `keep`
 * where one has any; false: none is warm. */
static bool cool_one(exec_expert_io *io, int32_t keep) {
    int32_t pick = -1;
    for (int32_t c = 0; c < io->n_cls; c++) {
        if (io->cls[c].n_warm > 0 && (pick < 0 || pick == keep)) {
            pick = c;
        }
    }
    if (pick < 0) {
        return false;
    }
    exec_slot_class *c = &io->cls[pick];
    const int32_t k = c->warm[--c->n_warm];
    mem_buffer_trim(io->arena + c->at + (uint64_t)k * c->bytes, (size_t)c->bytes);
    c->cold[c->n_cold++] = k;
    io->touched_bytes -= c->bytes;
    return true;
}

void exec_experts_direct_limit(exec_local *e, uint64_t capacity) {
    exec_expert_io *io = &e->x.io;
    if (io->d == NULL) {
        return;
    }
    io->limit_bytes = capacity;
    while (io->touched_bytes > capacity && cool_one(io, -1)) {
    }
}

void exec_experts_direct_read(exec_local *e, size_t s) {
    exec_expert_io *io = &e->x.io;
    const int32_t ci = io->class_of[s];
    exec_slot_class *c = &io->cls[ci];
    if (io->slot_of[s] >= 0 || c->n_warm + c->n_cold == 0) {
        return; /* cannot happen (a slot per slice); the mapping would serve it */
    }
    const bool warm = c->n_warm > 0;
    const int32_t k = warm ? c->warm[c->n_warm - 1] : c->cold[c->n_cold - 1];
    lares_error err = {0};
    if (mem_layout_append(&io->queue, &io->lay[s], slot_at(io, s, k), &err) != LARES_OK) {
        return; /* out of memory: the mapping serves it */
    }
    io->pending[io->n_pending++] = s;
    if (warm) {
        c->n_warm--;
    } else { /* a slot that takes pages: others give theirs back to stay within the cache */
        c->n_cold--;
        io->touched_bytes += c->bytes;
        while (io->touched_bytes > io->limit_bytes && cool_one(io, ci)) {
        }
        io->touched_peak = LARES_MAX(io->touched_peak, io->touched_bytes);
    }
    io->slot_of[s] = k;
    point(e, s, k);
}

void exec_experts_direct_start(exec_local *e) {
    exec_experts *x = &e->x;
    exec_expert_io *io = &x->io;
    if (io->queue.n == 0) {
        return;
    }
    uint64_t ticket = 0;
    lares_error err = {0};
    if (mem_direct_submit(io->d, &io->queue, io->arena, &ticket, &err) != LARES_OK &&
        !io->failed) {
        io->failed = true;
        io->err = err;
    }
    for (int32_t i = 0; i < io->n_pending; i++) {
        io->batch_of[io->pending[i]] = ticket;
    }
    io->n_pending = 0;
    io->queue.n = 0;
    io->queue.bytes = 0;
}

bool exec_experts_direct_wait(exec_local *e, int32_t layer, const int32_t *experts, int32_t n) {
    exec_experts *x = &e->x;
    bool ok = !x->io.failed;
    for (int32_t i = 0; i < n && ok; i++) {
        ok = landed(&x->io, (size_t)layer * (size_t)x->n_expert + (size_t)experts[i]);
    }
    return ok;
}

void exec_experts_direct_stop(exec_local *e) {
    exec_expert_io *io = &e->x.io;
    lares_log(LARES_LOG_WARN, "exec: %s; expert slices go through the page cache", io->err.msg);
    /* the view keeps its expert matrices (the pass running now holds them),
     * all pointing into the mapping again (the caller dropped every slice) */
    mem_direct_close(io->d);
    io->d = NULL;
    mem_buffer_unmap(io->arena, (size_t)io->arena_bytes);
    io->arena = NULL;
    io->touched_bytes = 0;
}
