/*
 * The prefetch thread and the caller's side of it.
 *
 * The prefetch thread walks the cycle of units from its cursor. A pinned unit
 * is read once. A streamed unit is read when it is idle and fits the window
 * (bytes and count of streamed units not yet released); it then joins the
 * fifo of units in flight. Before each read the thread releases the units the
 * caller has finished (DONE), so releasing never costs the compute threads.
 *
 * The caller asks for units in cycle order. When it asks for one out of that
 * order (a pass without the output, a ring re-plan), the units it skipped are
 * marked DONE and released, and the cursor jumps to the unit asked for: a
 * misprediction costs a read, never a wrong result or a deadlock, since a
 * unit asked for is always either in flight or next for the prefetcher, and
 * an empty window admits any unit (the plan makes the window at least the
 * largest unit).
 *
 * Convoys. Several groups of sequences in flight through a ring (issue 20)
 * reach a device one behind the other: with k > 1 rounds it runs window 1
 * for group A, then window 1 for B, ..., then window 2 for A, and so on. A
 * cursor walking the windows in round order would read window 2 while B
 * still needs window 1, and B's request would turn it back (a
 * misprediction: the read-ahead dropped, every read of the pass waited
 * for). So the executor notes the order its caller runs windows in
 * (exec_stream_begin_window: the same window again for another group
 * continues a convoy, anything else starts one), and the cursor walks each
 * window as many times in a row as the last convoy had groups. A unit the
 * cursor reaches while it is still in memory from its last use (finished,
 * not yet released: the group ahead's, or the last pass's) is kept rather
 * than released and read again.
 */
#include "exec/exec_impl.h"

#define PREAD_SCRATCH_BYTES (4u * 1024 * 1024)

/* moves the cursor on: from a window's last unit back to its first while
 * the convoy's groups still need it, else to the next unit; wrapping around
 * starts the next pass */
static void advance(exec_local *e) {
    exec_stream *s = &e->st;
    const int32_t u = s->cursor;
    const bool window_ends = u + 1 == e->n_units || s->window_of[u + 1] != s->window_of[u];
    if (window_ends && s->window_of[u] >= 0 && s->rep + 1 < s->reps) {
        s->rep++;
        s->cursor = s->first_of[u];
        return;
    }
    if (window_ends) {
        s->rep = 0;
    }
    if (++s->cursor == e->n_units) {
        s->cursor = 0;
        s->fetch_pass++;
    }
}

static void fifo_remove(exec_stream *s, int32_t u) {
    for (int32_t i = 0; i < s->n_fifo; i++) {
        if (s->fifo[i] == u) {
            memmove(s->fifo + i, s->fifo + i + 1, (size_t)(s->n_fifo - i - 1) * sizeof *s->fifo);
            s->n_fifo--;
            return;
        }
    }
}

static int32_t fifo_index(const exec_stream *s, int32_t u) {
    for (int32_t i = 0; i < s->n_fifo; i++) {
        if (s->fifo[i] == u) {
            return i;
        }
    }
    return -1;
}

/* Moves the cursor past units that need nothing: pinned units already read,
 * and the output matrix in a pass that does not want it. */
static void skip_settled(exec_local *e) {
    exec_stream *s = &e->st;
    for (int32_t step = 0; step < e->n_units; step++) {
        const int32_t u = s->cursor;
        const exec_unit *un = &e->units[u];
        const bool settled = un->pinned && un->state != UNIT_IDLE;
        /* (a pinned output not yet read is read by the first pass that wants it) */
        const bool unwanted = u == e->out_unit && un->state == UNIT_IDLE && !s->out_asked &&
                              (s->fetch_pass < s->caller_pass ||
                               (s->fetch_pass == s->caller_pass && !s->want_output));
        if (!settled && !unwanted) {
            return;
        }
        advance(e);
    }
}

/* The next unit to read; -1 when the thread must wait (window full, the unit
 * still in use, or a pass the caller has not begun yet that may or may not
 * want the output). */
static int32_t pick(exec_local *e) {
    exec_stream *s = &e->st;
    skip_settled(e);
    const int32_t u = s->cursor;
    const exec_unit *un = &e->units[u];
    if (un->state != UNIT_IDLE) {
        return -1; /* in use from the last pass, or every unit is settled */
    }
    if (un->pinned) {
        return u;
    }
    if (u == e->out_unit && !s->out_asked && s->fetch_pass > s->caller_pass) {
        return -1;
    }
    const bool count_full = e->plan.window_units > 0 && s->n_fifo >= e->plan.window_units;
    /* (an empty window admits any unit: the plan makes it at least the largest) */
    if (count_full ||
        (s->n_fifo > 0 && s->inflight_bytes + exec_direct_cost(e, un) > e->plan.window_bytes)) {
        return -1;
    }
    return u;
}

/* Locks a pinned unit just read; returns the bytes locked. Runs on the
 * prefetch thread, the only one touching e->locked while it runs. */
static uint64_t lock_pinned(exec_local *e, exec_unit *un) {
    exec_stream *s = &e->st;
    if (!e->o.lock || s->lock_refused) {
        return 0;
    }
    lares_error err = {0};
    if (mem_lock(&e->mf, &un->span, &err) != LARES_OK) {
        s->lock_refused = true;
        lares_log(LARES_LOG_WARN, "exec: %s; resident weights stay unlocked", err.msg);
        return 0;
    }
    if (mem_span_add_span(&e->locked, &un->span, &err) != LARES_OK) {
        mem_unlock(&e->mf, &un->span); /* cannot track it: do not hold it */
        return 0;
    }
    return un->span.bytes;
}

static void *prefetch_main(void *arg) {
    exec_local *e = arg;
    exec_stream *s = &e->st;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        /* the unit the cycle wants next, finished but still in memory: kept */
        skip_settled(e);
        exec_unit *next = &e->units[s->cursor];
        if (next->state == UNIT_DONE && !next->pinned && s->cursor != e->out_unit) {
            next->state = UNIT_READY;
            /* in the fifo as if read now: what the caller skips before it
             * is what came before this use */
            fifo_remove(s, s->cursor);
            s->fifo[s->n_fifo++] = s->cursor;
            s->c.n_kept++;
            advance(e);
            continue;
        }
        /* release what the caller finished, oldest first */
        int32_t done = -1;
        for (int32_t i = 0; i < s->n_fifo && done < 0; i++) {
            if (e->units[s->fifo[i]].state == UNIT_DONE) {
                done = s->fifo[i];
            }
        }
        if (done >= 0) {
            exec_unit *un = &e->units[done];
            un->state = UNIT_RELEASING;
            pthread_mutex_unlock(&s->mu);
            uint64_t freed;
            if (un->buf != NULL) {
                freed = exec_direct_release(e, un);
                /* pages of it may sit in the page cache all the same (the
                 * read-ahead of a pinned neighbour ran into it): drop them */
                (void)mem_release(&e->mf, &un->span);
            } else {
                freed = mem_release(&e->mf, &un->span);
            }
            pthread_mutex_lock(&s->mu);
            s->c.buffer_bytes = e->dx.live_bytes + e->dx.spare_bytes;
            un->state = UNIT_IDLE;
            fifo_remove(s, done);
            s->inflight_bytes -= un->cost;
            s->c.release_bytes += freed;
            pthread_cond_broadcast(&s->cv);
            continue;
        }
        const int32_t u = pick(e);
        if (u < 0) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        exec_unit *un = &e->units[u];
        un->state = UNIT_FETCHING;
        if (!un->pinned) {
            s->fifo[s->n_fifo++] = u;
            un->cost = exec_direct_cost(e, un);
            s->inflight_bytes += un->cost;
        }
        if (u == e->out_unit) {
            s->out_asked = false;
        }
        advance(e);
        const uint64_t window = e->plan.window_bytes; /* (a re-budget changes it under mu) */
        pthread_mutex_unlock(&s->mu);
        mem_io io = {0};
        lares_error err = {0};
        bool direct = false, fell_back = false;
        if (!un->pinned && e->dx.d != NULL && un->lay.bytes > 0) {
            direct = exec_direct_fetch(e, un, window, &io, &err) == LARES_OK;
            if (!direct) { /* the views still point into the mapping: read it there */
                fell_back = true;
                if (s->c.direct_fallbacks == 0) { /* once: a bad disk would say it every pass */
                    lares_log(LARES_LOG_WARN, "exec: %s; this unit (and any other whose direct "
                              "read fails) comes through the page cache", err.msg);
                }
            }
        }
        if (!direct && mem_prefetch(&e->mf, &un->span, e->o.read_method, s->scratch,
                                    s->scratch_bytes, &io, &err) != LARES_OK) {
            /* spans come from the checked tensor directory: this is a bug, and
             * the caller still computes correctly through page faults */
            lares_log(LARES_LOG_WARN, "exec: prefetch failed: %s", err.msg);
        }
        const uint64_t locked = un->pinned ? lock_pinned(e, un) : 0;
        pthread_mutex_lock(&s->mu);
        e->plan.locked_bytes += locked;
        s->c.prefetch_bytes += io.bytes;
        s->c.prefetch_ns += io.ns;
        s->c.direct_bytes += direct ? io.bytes : 0;
        s->c.direct_fallbacks += fell_back ? 1 : 0;
        s->c.buffer_bytes = e->dx.live_bytes + e->dx.spare_bytes;
        s->c.buffer_peak_bytes = e->dx.peak_bytes;
        un->state = UNIT_READY;
        if (un->pinned) {
            atomic_store_explicit(&un->loaded, true, memory_order_release);
        }
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

lares_status exec_stream_init(exec_local *e, lares_error *err) {
    exec_stream *s = &e->st;
    const size_t n = (size_t)LARES_MAX(e->n_units, 1);
    s->fifo = lares_alloc_array(n, sizeof *s->fifo);
    s->window_of = lares_alloc_array(n, sizeof *s->window_of);
    s->first_of = lares_alloc_array(n, sizeof *s->first_of);
    if (s->fifo == NULL || s->window_of == NULL || s->first_of == NULL) {
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory");
    }
    for (int32_t u = 0; u < e->n_units; u++) {
        s->window_of[u] = -1; /* the output */
        for (int32_t w = 0; w < e->n_windows; w++) {
            if (e->units[u].layer >= e->windows[w].l0 && e->units[u].layer < e->windows[w].l1) {
                s->window_of[u] = w;
            }
        }
        s->first_of[u] = u > 0 && s->window_of[u - 1] == s->window_of[u] ? s->first_of[u - 1] : u;
    }
    s->reps = 1;
    if (e->o.read_method == MEM_READ_PREAD) {
        s->scratch_bytes = PREAD_SCRATCH_BYTES;
        s->scratch = lares_alloc(s->scratch_bytes);
        if (s->scratch == NULL) {
            return lares_fail(err, LARES_ENOMEM, "exec: out of memory for the read buffer");
        }
    }
    int rc = pthread_mutex_init(&s->mu, NULL);
    if (rc == 0 && (rc = pthread_cond_init(&s->cv, NULL)) != 0) {
        pthread_mutex_destroy(&s->mu);
    }
    if (rc != 0) {
        return lares_fail(err, LARES_ENOMEM, "exec: cannot create the prefetch lock: %s",
                          strerror(rc));
    }
    s->sync_ready = true;
    return LARES_OK;
}

void exec_stream_destroy(exec_local *e) {
    exec_stream *s = &e->st;
    exec_stream_stop(e);
    if (s->sync_ready) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        s->sync_ready = false;
    }
    lares_free(s->fifo);
    s->fifo = NULL;
    lares_free(s->window_of);
    s->window_of = NULL;
    lares_free(s->first_of);
    s->first_of = NULL;
    lares_free(s->scratch);
    s->scratch = NULL;
}

lares_status exec_stream_start(exec_local *e, lares_error *err) {
    exec_stream *s = &e->st;
    s->stop = false;
    s->cursor = 0;
    s->n_fifo = 0;
    s->inflight_bytes = 0;
    s->want_output = true;
    s->out_asked = false;
    s->fetch_pass = s->caller_pass + 1; /* the next pass the caller begins */
    s->rep = 0;
    const int rc = pthread_create(&s->thread, NULL, prefetch_main, e);
    if (rc != 0) {
        return lares_fail(err, LARES_ENOMEM, "exec: cannot start the prefetch thread: %s",
                          strerror(rc));
    }
    s->started = true;
    return LARES_OK;
}

void exec_stream_stop(exec_local *e) {
    exec_stream *s = &e->st;
    if (!s->started) {
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->started = false;
}

/* Units in flight before u (or all, when u is not in flight) were skipped by
 * the caller: mark the ready ones done so the prefetcher releases them. */
static void skip_before(exec_local *e, int32_t u) {
    exec_stream *s = &e->st;
    int32_t end = fifo_index(s, u);
    if (end < 0) {
        end = s->n_fifo;
    }
    for (int32_t i = 0; i < end; i++) {
        exec_unit *v = &e->units[s->fifo[i]];
        if (v->state == UNIT_READY) {
            v->state = UNIT_DONE;
        }
    }
}

enum { CONVOY_MAX = 64 }; /* groups of a convoy counted at most */

void exec_stream_begin_window(exec_local *e, const void *group, int32_t l0, int32_t l1) {
    exec_stream *s = &e->st;
    pthread_mutex_lock(&s->mu);
    if (s->cv_n > 0 && l0 == s->cv_l0 && l1 == s->cv_l1 && group != s->cv_first &&
        s->cv_n < CONVOY_MAX) {
        s->cv_n++; /* the next group of the convoy */
    } else {
        if (s->cv_n > 0) {
            /* one window a cycle is walked once a pass whatever the groups */
            s->reps = e->n_windows > 1 ? s->cv_n : 1;
        }
        s->cv_l0 = l0;
        s->cv_l1 = l1;
        s->cv_first = group;
        s->cv_n = 1;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void exec_stream_acquire(exec_local *e, int32_t u) {
    exec_unit *un = &e->units[u];
    if (un->pinned && atomic_load_explicit(&un->loaded, memory_order_acquire)) {
        return;
    }
    exec_stream *s = &e->st;
    uint64_t t0 = 0;
    bool counted = false;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (un->state == UNIT_DONE) {
            /* still resident from the last pass: use it again, and the
             * prefetcher, which could not pass it, counts it as read */
            un->state = UNIT_READY;
            skip_settled(e);
            if (s->cursor == u) {
                advance(e);
            }
        }
        if (un->state == UNIT_READY) {
            break;
        }
        if (!un->pinned && (un->state == UNIT_IDLE || un->state == UNIT_FETCHING)) {
            skip_before(e, u); /* what was read ahead of u is of no use before it */
        }
        if (un->state == UNIT_IDLE && u == e->out_unit) {
            s->out_asked = true; /* whatever the hint said */
        }
        skip_settled(e);
        if (un->state == UNIT_IDLE && s->cursor != u) {
            s->cursor = u; /* not the unit the prefetcher expected: read it next */
            s->fetch_pass = s->caller_pass;
            /* the caller's group in its convoy (none before the first window) */
            s->rep = LARES_MAX(0, LARES_MIN(s->cv_n, s->reps) - 1);
            if (!counted) {
                s->c.n_mispredicted++;
                counted = true;
            }
        }
        pthread_cond_broadcast(&s->cv);
        if (t0 == 0) {
            t0 = lares_now_ns();
            s->c.n_waits++;
        }
        pthread_cond_wait(&s->cv, &s->mu);
    }
    if (!un->pinned) {
        skip_before(e, u);
    }
    if (t0 != 0) {
        s->c.wait_ns += lares_now_ns() - t0;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void exec_stream_done(exec_local *e, int32_t u) {
    exec_unit *un = &e->units[u];
    if (un->pinned) {
        return;
    }
    exec_stream *s = &e->st;
    pthread_mutex_lock(&s->mu);
    un->state = UNIT_DONE;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}
