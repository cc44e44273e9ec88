/* The local executor: layer windows on this device (see exec.h). */
#include "exec/exec_impl.h"

static void copy_windows(exec_local *e, const exec_opts *o) {
    if (o->windows != NULL && o->n_windows > 0) {
        memcpy(e->windows, o->windows, (size_t)o->n_windows * sizeof *e->windows);
        e->n_windows = o->n_windows;
    } else {
        e->windows[0].l0 = e->kv->l0;
        e->windows[0].l1 = e->kv->l1;
        e->n_windows = 1;
    }
    e->o.windows = e->windows;
    e->o.n_windows = e->n_windows;
}

static lares_status check_opts(const exec_opts *o, lares_error *err) {
    if (o->window_units < 0) {
        return lares_fail(err, LARES_EINVAL, "exec: window of %d units", o->window_units);
    }
    if (o->n_windows < 0 || (o->n_windows > 0 && o->windows == NULL)) {
        return lares_fail(err, LARES_EINVAL, "exec: %d windows given without a list",
                          o->n_windows);
    }
    if ((unsigned)o->stream_io >= EXEC_IO_COUNT) {
        return lares_fail(err, LARES_EINVAL, "exec: unknown stream I/O %d", (int)o->stream_io);
    }
    if ((unsigned)o->direct_engine >= MEM_DIRECT_COUNT) {
        return lares_fail(err, LARES_EINVAL, "exec: unknown direct read engine %d",
                          (int)o->direct_engine);
    }
    if ((unsigned)o->read_method >= MEM_READ_COUNT) {
        return lares_fail(err, LARES_EINVAL, "exec: unknown read method %d", (int)o->read_method);
    }
    return LARES_OK;
}

/* Creates the executor's cycle without starting anything. */
static lares_status build(const model *m, model_kv *kv, model_ctx *cx, const exec_opts *o,
                          exec_local **out, lares_error *err) {
    static const exec_opts none = {0};
    if (o == NULL) {
        o = &none;
    }
    lares_status st = check_opts(o, err);
    if (st != LARES_OK) {
        return st;
    }
    exec_local *e = lares_calloc(1, sizeof *e);
    if (e == NULL) {
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory");
    }
    e->m = m;
    e->kv = kv;
    e->cx = cx;
    e->o = *o;
    e->windows = lares_calloc((size_t)LARES_MAX(o->n_windows, 1), sizeof *e->windows);
    if (e->windows == NULL) {
        exec_local_free(e);
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory");
    }
    copy_windows(e, o);
    mem_file_of(m->file, &e->mf);
    exec_direct_init(e);
    if ((st = exec_units_build(e, err)) != LARES_OK || (st = exec_experts_build(e, err)) ||
        (st = exec_routes_build(e, err)) || (st = exec_stream_init(e, err))) {
        exec_local_free(e);
        return st;
    }
    e->pin_scratch = lares_calloc((size_t)LARES_MAX(e->n_units, 1), sizeof *e->pin_scratch);
    if (e->pin_scratch == NULL) {
        exec_local_free(e);
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory");
    }
    *out = e;
    return LARES_OK;
}

lares_status exec_weight_needs(const model *m, const model_kv *kv, const exec_opts *o,
                               uint64_t *total, uint64_t *minimum, lares_error *err) {
    exec_local *e;
    exec_opts probe = o ? *o : (exec_opts){0};
    probe.weight_budget_bytes = 0; /* plan nothing: only the sizes are wanted */
    lares_status st = build(m, (model_kv *)kv, NULL, &probe, &e, err);
    if (st != LARES_OK) {
        return st;
    }
    exec_plan_info p;
    if ((st = exec_plan_compute(e, 0, e->pin_scratch, &p, err)) == LARES_OK) {
        *total = p.weight_bytes;
        *minimum = p.min_budget_bytes;
    }
    exec_local_free(e);
    return st;
}

/* Everything fits, but the caller wants it locked: read it all, then lock. */
static void lock_everything(exec_local *e) {
    lares_error err = {0};
    mem_span all = {0};
    lares_status st = mem_span_add_span(&all, &e->embd, &err);
    for (int32_t i = 0; i < e->n_units && st == LARES_OK; i++) {
        st = mem_span_add_span(&all, &e->units[i].span, &err);
    }
    const size_t n_slices = e->x.slices ? (size_t)e->m->hp.n_layer * (size_t)e->x.n_expert : 0;
    for (size_t i = 0; i < n_slices && st == LARES_OK; i++) {
        st = mem_span_add_span(&all, &e->x.slices[i], &err);
    }
    if (st == LARES_OK) {
        st = mem_prefetch(&e->mf, &all, e->o.read_method, NULL, 0, NULL, &err);
    }
    if (st == LARES_OK) {
        st = mem_lock(&e->mf, &all, &err);
    }
    if (st != LARES_OK) {
        lares_log(LARES_LOG_WARN, "exec: %s; weights stay unlocked", err.msg);
        mem_span_free(&all);
        return;
    }
    mem_span_free(&e->locked);
    e->locked = all;
    e->plan.locked_bytes = all.bytes;
}

static void unlock_everything(exec_local *e) {
    if (e->locked.n > 0) {
        mem_unlock(&e->mf, &e->locked);
    }
    mem_span_clear(&e->locked);
    e->plan.locked_bytes = 0;
}

/* Puts a computed plan to work; the prefetch thread is stopped. What the old
 * plan left resident is kept where the new one pins it and released where it
 * streams it: never more resident than the new plan allows. */
static lares_status run_plan(exec_local *e, uint64_t budget, const bool *pinned,
                             const exec_plan_info *p, bool first, lares_error *err) {
    if (p->streaming && gguf_in_memory(e->m->file)) { /* giving pages back would zero them */
        return lares_fail(err, LARES_EINVAL,
                          "%s: read into memory (no mmap), so its %.1f MiB of weights cannot "
                          "stream within the %.1f MiB the memory budget leaves them: map the file "
                          "instead, or allow more memory",
                          gguf_path(e->m->file), (double)p->weight_bytes / (1 << 20),
                          (double)budget / (1 << 20));
    }
    const bool was_streaming = !first && e->plan.streaming;
    for (int32_t i = 0; i < e->n_units; i++) {
        exec_unit *u = &e->units[i];
        const bool resident = was_streaming && (u->state == UNIT_READY || u->state == UNIT_DONE);
        /* before streaming, the OS held whatever it liked: assume the worst */
        const bool maybe_resident = resident || !was_streaming;
        if (p->streaming && !pinned[i] && maybe_resident) {
            mem_release(&e->mf, &u->span);
        }
        const bool loaded = p->streaming && pinned[i] && resident;
        u->pinned = pinned[i];
        u->state = loaded ? UNIT_READY : UNIT_IDLE;
        atomic_store(&u->loaded, loaded);
    }
    const uint64_t locked = e->plan.locked_bytes;
    e->plan = *p;
    e->plan.locked_bytes = locked;
    e->plan.direct = p->streaming && exec_direct_open(e);
    e->plan.probe_direct_Bps = e->dx.probe_direct_Bps;
    e->plan.probe_mmap_Bps = e->dx.probe_mmap_Bps;
    exec_direct_slots(e);
    e->plan.direct_engine = e->plan.direct ? mem_direct_engine_of(e->dx.d) : MEM_DIRECT_AUTO;
    e->plan.experts_direct = p->streaming && e->x.bytes > 0 && exec_experts_direct_open(e);
    e->plan.expert_probe_direct_Bps = e->x.io.probe_direct_Bps;
    e->plan.expert_probe_mmap_Bps = e->x.io.probe_mmap_Bps;
    e->o.weight_budget_bytes = budget;
    exec_experts_set_capacity(e, p->streaming ? p->expert_cache_bytes : 0, !was_streaming);
    /* Resident weights read from now on come on 2 MiB pages; streamed ones
     * keep their reads and releases page-sized (the advice is the mapping's,
     * so a streaming plan takes back what a resident one gave). A copy sits
     * on huge pages already. */
    if (!gguf_in_memory(e->m->file)) {
        mem_advise_huge(&e->mf, !p->streaming);
    }
    if (!p->streaming) {
        if (e->o.lock) {
            lock_everything(e);
        }
        return LARES_OK;
    }
    /* embedding rows are read one per token: no read-around of megabytes */
    mem_advise_random(&e->mf, &e->embd);
    if (e->o.lock) { /* pinned units already resident are locked now, the rest when read */
        for (int32_t i = 0; i < e->n_units; i++) {
            if (atomic_load(&e->units[i].loaded)) {
                lares_error lerr = {0};
                if (mem_lock(&e->mf, &e->units[i].span, &lerr) == LARES_OK &&
                    mem_span_add_span(&e->locked, &e->units[i].span, &lerr) == LARES_OK) {
                    e->plan.locked_bytes += e->units[i].span.bytes;
                }
            }
        }
    }
    lares_status st = exec_stream_start(e, err);
    if (st != LARES_OK) {
        return st;
    }
    e->r.to_cache = e->x.bytes > 0 && e->r.counts != NULL;
    lares_log(LARES_LOG_INFO,
              "exec: streaming %s: %d of %d units pinned (%" PRIu64 " MiB), %" PRIu64
              " MiB read per pass%s through a window of %" PRIu64 " MiB",
              gguf_path(e->m->file), p->n_pinned, p->n_units, p->pinned_bytes >> 20,
              p->stream_bytes >> 20, e->plan.direct ? " directly" : "", p->window_bytes >> 20);
    return LARES_OK;
}

lares_status exec_local_create(const model *m, model_kv *kv, model_ctx *cx, const exec_opts *o,
                               exec_local **out, lares_error *err) {
    exec_local *e;
    lares_status st = build(m, kv, cx, o, &e, err);
    if (st != LARES_OK) {
        return st;
    }
    exec_plan_info p;
    if ((st = exec_plan_compute(e, e->o.weight_budget_bytes, e->pin_scratch, &p, err)) !=
            LARES_OK ||
        (st = run_plan(e, e->o.weight_budget_bytes, e->pin_scratch, &p, true, err)) != LARES_OK) {
        exec_local_free(e);
        return st;
    }
    *out = e;
    return LARES_OK;
}

lares_status exec_local_set_budget(exec_local *e, uint64_t weight_budget, lares_error *err) {
    if (weight_budget == e->o.weight_budget_bytes) {
        return LARES_OK;
    }
    exec_plan_info p;
    lares_status st = exec_plan_compute(e, weight_budget, e->pin_scratch, &p, err);
    if (st != LARES_OK) {
        return st; /* the old plan stays */
    }
    bool same = p.streaming == e->plan.streaming;
    for (int32_t i = 0; same && i < e->n_units; i++) {
        same = e->pin_scratch[i] == e->units[i].pinned;
    }
    if (same && !p.streaming) {
        e->o.weight_budget_bytes = weight_budget;
        return LARES_OK;
    }
    if (same) { /* the same units stay: only the window and the expert cache change */
        pthread_mutex_lock(&e->st.mu);
        e->plan.window_bytes = p.window_bytes;
        e->plan.expert_cache_bytes = p.expert_cache_bytes;
        e->plan.readahead_slack_bytes = p.readahead_slack_bytes;
        e->o.weight_budget_bytes = weight_budget;
        pthread_cond_broadcast(&e->st.cv);
        pthread_mutex_unlock(&e->st.mu);
        exec_experts_set_capacity(e, p.expert_cache_bytes, false);
        return LARES_OK;
    }
    exec_stream_stop(e);
    exec_direct_drop(e); /* units held in buffers are read again as the new plan says */
    e->r.to_cache = false;
    unlock_everything(e);
    return run_plan(e, weight_budget, e->pin_scratch, &p, false, err);
}

void exec_local_free(exec_local *e) {
    if (e == NULL) {
        return;
    }
    exec_stream_destroy(e);
    exec_direct_free(e);
    exec_routes_free(e);
    exec_experts_free(e);
    if (e->locked.n > 0) {
        mem_unlock(&e->mf, &e->locked);
    }
    mem_span_free(&e->locked);
    exec_units_free(e);
    lares_free(e->pin_scratch);
    lares_free(e->windows);
    lares_free(e);
}

void exec_local_begin_pass(exec_local *e, bool want_output) {
    if (!e->plan.streaming) {
        return;
    }
    pthread_mutex_lock(&e->st.mu);
    e->st.caller_pass++;
    e->st.want_output = want_output;
    pthread_cond_broadcast(&e->st.cv);
    pthread_mutex_unlock(&e->st.mu);
}

lares_status exec_local_forward(exec_local *e, int32_t l0, int32_t l1, const int32_t *pos,
                                int32_t n_tok, float *x, lares_error *err) {
    const model_seq one = {.kv = e->kv, .row0 = 0, .n_rows = n_tok};
    return exec_local_forward_seqs(e, &one, 1, l0, l1, pos, n_tok, x, err);
}

/* model_part_fn of a streaming pass: the layer's previous part is done
 * before the next is asked for, so that a window of one unit never has to
 * hold two */
static void on_part(void *user, int32_t layer, model_part part) {
    exec_local *e = user;
    if (layer != e->part_layer) {
        return;
    }
    const int32_t u = e->unit_of_part[(size_t)layer * MODEL_PART_COUNT + (size_t)part];
    if (u < 0 || u == e->part_unit) {
        return; /* a part without weights of its own here, or in the unit held */
    }
    if (e->part_unit >= 0) {
        exec_stream_done(e, e->part_unit);
    }
    exec_stream_acquire(e, u);
    e->part_unit = u;
}

lares_status exec_local_forward_halves(exec_local *e, const model_seq *seqs, int32_t n_seqs,
                                       int32_t h0, int32_t h1, const int32_t *pos, int32_t n_tok,
                                       float *x, lares_error *err) {
    e->r.n_tok = n_tok;
    if (!e->plan.streaming) {
        const lares_status st =
            model_forward_halves(e->m, seqs, n_seqs, e->cx, h0, h1, pos, n_tok, x, err);
        return st != LARES_OK ? st : gguf_check(e->m->file, err);
    }
    const int32_t l0 = h0 / 2, l1 = (h1 + 1) / 2; /* the layers touched */
    if (h0 < 0 || l0 < e->kv->l0 || l1 > e->kv->l1 || h0 >= h1) {
        return lares_fail(err, LARES_EINVAL, "forward: window [%d, %d) outside the cache's [%d, %d)",
                          l0, l1, e->kv->l0, e->kv->l1);
    }
    exec_stream_begin_window(e, seqs[0].kv, l0, l1);
    /* a layer's parts are acquired as its operations reach them (on_part) */
    model_ctx_on_part(e->cx, on_part, e);
    lares_status st = LARES_OK;
    for (int32_t l = l0; l < l1 && st == LARES_OK; l++) {
        e->part_layer = l;
        e->part_unit = -1;
        st = model_forward_halves(exec_direct_model(e), seqs, n_seqs, e->cx,
                                  LARES_MAX(h0, 2 * l), LARES_MIN(h1, 2 * l + 2), pos, n_tok, x,
                                  err);
        if (e->part_unit >= 0) {
            exec_stream_done(e, e->part_unit);
        }
    }
    e->part_layer = -1;
    e->part_unit = -1;
    model_ctx_on_part(e->cx, NULL, NULL);
    return st != LARES_OK ? st : gguf_check(e->m->file, err); /* a page failed to read: zeros */
}

lares_status exec_local_forward_seqs(exec_local *e, const model_seq *seqs, int32_t n_seqs,
                                     int32_t l0, int32_t l1, const int32_t *pos, int32_t n_tok,
                                     float *x, lares_error *err) {
    if (l0 >= l1) {
        return lares_fail(err, LARES_EINVAL, "forward: window [%d, %d) is empty", l0, l1);
    }
    return exec_local_forward_halves(e, seqs, n_seqs, 2 * l0, 2 * l1, pos, n_tok, x, err);
}

lares_status exec_local_output(exec_local *e, float *x, int32_t n_rows, float *logits,
                               lares_error *err) {
    const bool managed = e->plan.streaming && e->out_unit >= 0;
    if (managed) {
        exec_stream_acquire(e, e->out_unit);
    }
    model_output(managed ? exec_direct_model(e) : e->m, e->cx, x, n_rows, logits);
    if (managed) {
        exec_stream_done(e, e->out_unit);
    }
    return gguf_check(e->m->file, err);
}

void exec_local_plan(exec_local *e, exec_plan_info *out) {
    pthread_mutex_lock(&e->st.mu); /* locked_bytes grows on the prefetch thread */
    *out = e->plan;
    pthread_mutex_unlock(&e->st.mu);
}

void exec_local_counters(exec_local *e, exec_counters *out) {
    pthread_mutex_lock(&e->st.mu);
    *out = e->st.c;
    pthread_mutex_unlock(&e->st.mu);
    /* the expert cache lives on the caller's thread, like this call */
    out->wait_ns += e->x.wait_ns;
    out->prefetch_bytes += e->x.read_bytes;
    out->release_bytes += e->x.release_bytes;
    out->expert_hits = e->x.hits;
    out->expert_misses = e->x.misses;
    out->expert_bytes = e->x.read_bytes;
    out->expert_guesses = e->x.guesses;
    out->expert_guess_hits = e->x.guess_hits;
    out->expert_guess_scored = e->x.n_scored;
    out->expert_guess_picked = e->x.n_scored_picked;
    out->direct_bytes += e->x.direct_bytes;
    out->direct_fallbacks += e->x.direct_fallbacks;
    out->buffer_bytes += e->x.io.touched_bytes; /* expert slots with pages */
    out->buffer_peak_bytes += e->x.io.touched_peak;
    out->route_pairs = e->r.pairs;
    out->route_shared = e->r.shared;
}
