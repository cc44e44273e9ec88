/*
 * lares_worker: a device of a ring (docs/ring.md). The cluster module runs
 * the network and the protocol; the callbacks here open the model the head
 * names, build the executor for this device's windows (so the memory budget
 * and streaming work on every device) and run them.
 *
 * The prefetch of the next window: the executor's cycle is this device's
 * windows round by round, and its prefetch thread reads units in that order,
 * releasing each after use. So the next window is read as soon as the one
 * just computed is released, at the latest while the hidden state travels on
 * (../shared/docs/scheduling.md). With no_stream the executor gets no budget:
 * plain mmap, the comparison "prefetch off".
 *
 * Re-plans (issue 9): the KV cache spans every layer of the model (the pages
 * of layers never held are never touched, so never resident), so a new plan
 * keeps the entries of the layers still held; the executor is made anew with
 * the new windows, the weights of layers lost are released (mem_release) and
 * those gained are read ahead. Automatic rings: the worker profiles itself
 * (sched, cached) when the head asks, and sends the profile in WELCOME.
 */
#include "api/ring.h"
#include "api/ring_fetch.h"
#include "mem/mem.h"
#include "sched/sched.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* free memory is read at most this often (a few files under /proc and /sys) */
#define MEM_FREE_EVERY_NS 250000000u

struct lares_worker {
    cluster_worker *cw; /* owned */
    cluster_keypair key;
    bool insecure;
    char *model_path; /* owned copy; NULL: the head names the file */
    int32_t n_threads;
    uint64_t mem_budget;
    bool no_stream;
    exec_stream_io stream_io;
    char *profile_cache_dir; /* owned copy; NULL: no cache */
    lares_worker_event_fn on_event;
    void *user;
    atomic_uint slow_milli; /* slowdown factor x 1000 (tests); <= 1000: none */
    /* compute state: touched only by the compute thread */
    lares_model *lm; /* owned: the open model, kept across heads */
    ops_pool *pool;  /* owned */
    int32_t pool_threads;
    model_kv *kv; /* owned: slot 0's; spans this device's windows (pages of other
                     layers stay untouched, so never resident) */
    /* owned: the KV caches of slots 1.. (a batch's sequences, issue 20), NULL
     * until a slot is first used; CLUSTER_MAX_SLOTS entries, [0] unused */
    model_kv **slot_kv;
    int32_t n_slots;      /* the plan's: every slot's cache counts in the budget */
    /* owned, CLUSTER_MAX_SLOTS entries: the positions each slot's cache is
     * counted for in the weight budget (at least REACH_MIN, doubled when a
     * pass goes past; the pages of later positions stay untouched) */
    int32_t *slot_reach;
    int32_t held;         /* layers this device's windows hold */
    uint64_t budget;      /* the memory budget in force; 0: none (no limit known, or no streaming) */
    uint64_t heap_base;   /* the budget's overhead besides KV caches (at setup) */
    model_seq *seqs;      /* owned: n_batch, the runs of one forward */
    model_ctx *cx;        /* owned */
    exec_local *exec;     /* owned */
    exec_window *windows; /* owned */
    int32_t n_windows;
    int32_t n_batch;      /* of cx */
    uint64_t mem_free_ns; /* when mem_free_mib was read */
    uint32_t mem_free_mib;
    /* a worker without the model file (issue 19, ring_fetch.c) */
    char *cache_dir;     /* owned copy; NULL: no shipping */
    uint64_t cache_size;
    api_fetch fetch;     /* its link is the compute thread's channel to the head */
    bool shipped;        /* the open model is the weight cache's sparse file */
    atomic_int tamper;   /* tests: chunks to damage */
    atomic_uint fetch_delay_ms; /* tests: a pause after each chunk received */
    /* The prepare thread (cb_prepare) fetches into the same cache while the
     * compute thread runs: this lock is held by whoever fetches, opens the
     * model or changes the windows (cb_open, cb_setup, cb_release,
     * cb_prepare); cb_forward takes none, since the prepare thread only reads
     * what it uses. */
    pthread_mutex_t fetch_mu;
    bool mu_init;
    /* items came in by a prepare since the model was opened: the next setup
     * opens it again (the loader copies a few vectors at open) */
    atomic_bool prepared_new;
};

lares_worker_opts lares_worker_opts_default(void) {
    lares_worker_opts o = {.listen = "0.0.0.0:9100"};
    return o;
}

static void on_cluster_event(const cluster_event *ev, void *user) {
    lares_worker *w = user;
    if (w->on_event == NULL) {
        return;
    }
    const lares_worker_event out = {.kind = (lares_worker_event_kind)ev->kind,
                                    .text = ev->text,
                                    .round = ev->round,
                                    .l0 = ev->l0,
                                    .l1 = ev->l1,
                                    .n_tok = ev->n_tok,
                                    .compute_ms = ev->compute_ms,
                                    .wait_ms = ev->wait_ms};
    w->on_event(&out, w->user);
}

/* The caches of slots 1.. (from `from` on: a plan counting fewer drops the rest). */
static void free_slot_caches(lares_worker *w, int32_t from) {
    for (int32_t i = LARES_MAX(from, 1); w->slot_kv != NULL && i < CLUSTER_MAX_SLOTS; i++) {
        model_kv_free(w->slot_kv[i]);
        w->slot_kv[i] = NULL;
    }
}

static void release_windows(lares_worker *w) {
    exec_local_free(w->exec);
    model_ctx_free(w->cx);
    model_kv_free(w->kv);
    free_slot_caches(w, 1);
    lares_free(w->windows);
    lares_free(w->seqs);
    w->exec = NULL;
    w->cx = NULL;
    w->kv = NULL;
    w->windows = NULL;
    w->seqs = NULL;
    w->n_windows = 0;
    w->n_batch = 0;
    w->n_slots = 0;
}

static void cb_release(void *user) {
    lares_worker *w = user;
    pthread_mutex_lock(&w->fetch_mu);
    release_windows(w);
    pthread_mutex_unlock(&w->fetch_mu);
}

static void cb_attach_ship(void *user, cluster_ship_link *link) {
    lares_worker *w = user;
    w->fetch.link = link;
}

static void on_fetch_progress(void *user, const char *text) {
    lares_worker *w = user;
    if (w->on_event != NULL) {
        const lares_worker_event ev = {.kind = LARES_WORKER_FETCH, .text = text};
        w->on_event(&ev, w->user);
    }
}

/* (Re)opens the model file at path, keeping what is open when it is the same
 * file and `again` is false. */
static lares_status open_model(lares_worker *w, const char *path, bool again, lares_error *err) {
    if (w->lm != NULL && strcmp(w->lm->path, path) == 0 && !again) {
        return LARES_OK;
    }
    lares_model *lm = NULL;
    lares_status st = lares_model_open(path, NULL, &lm, err);
    if (st != LARES_OK) {
        return st;
    }
    /* the executor and the context point into the old model; the KV cache does not */
    exec_local_free(w->exec);
    w->exec = NULL;
    model_ctx_free(w->cx);
    w->cx = NULL;
    if (w->lm == NULL || strcmp(w->lm->path, path) != 0) {
        release_windows(w);
    }
    lares_model_close(w->lm);
    w->lm = lm;
    return LARES_OK;
}

/* A worker without the model file: the header from the head into the weight
 * cache, whose sparse file is then opened as the model. */
static lares_status open_shipped(lares_worker *w, const cluster_hello *h, lares_error *err) {
    char path[1200];
    w->fetch.cache_dir = w->cache_dir;
    w->fetch.cache_limit = w->cache_size;
    w->fetch.progress = on_fetch_progress;
    w->fetch.user = w;
    lares_status st = api_fetch_model(&w->fetch, h->model.file_bytes, path, sizeof path, err);
    if (st == LARES_OK) {
        st = open_model(w, path, false, err);
    }
    w->shipped = st == LARES_OK;
    return st;
}

/* The windows of device `self` under plan p (out: at least its rounds). */
static int32_t plan_windows(const cluster_plan *p, int32_t self, exec_window *out) {
    int32_t n = 0;
    for (int32_t r = 0; r < cluster_plan_rounds(p); r++) {
        int32_t l0, l1;
        if (cluster_plan_window(p, self, r, &l0, &l1)) {
            out[n++] = (exec_window){l0, l1};
        }
    }
    return n;
}

/* Makes the items of windows win[0..n) present and verified (fetched when
 * missing); the windows the compute thread runs now (w->windows) are kept
 * out of the cache's eviction, since their tensors are in use. */
static lares_status fetch_items_of(lares_worker *w, const exec_window *win, int32_t n,
                                   uint64_t *fetched, lares_error *err) {
    exec_window *all = lares_calloc((size_t)(n + w->n_windows) + 1, sizeof *all);
    if (all == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    memcpy(all, win, (size_t)n * sizeof *all);
    if (w->n_windows > 0) {
        memcpy(all + n, w->windows, (size_t)w->n_windows * sizeof *all);
    }
    bool *need = NULL;
    uint32_t n_items = 0;
    lares_status st = api_fetch_need(w->lm->file, all, n + w->n_windows, &need, &n_items, err);
    lares_free(all);
    if (st == LARES_OK && n_items != w->fetch.n_items) {
        st = lares_fail(err, LARES_EINVAL, "the weight cache's model is not the open one");
    }
    w->fetch.tamper = atomic_exchange(&w->tamper, 0);
    w->fetch.delay_ms = atomic_load(&w->fetch_delay_ms);
    *fetched = 0;
    if (st == LARES_OK) {
        st = api_fetch_items(&w->fetch, need, fetched, err);
    }
    atomic_fetch_add(&w->tamper, w->fetch.tamper);
    w->fetch.tamper = 0;
    lares_free(need);
    return st;
}

/* Before a plan's windows are built: their tensors present and verified
 * (fetched when missing; a PREPARE answered before found them in); the
 * model opened again when any came since it was opened, since the loader
 * copies a few vectors (norms not stored as F32) at open. Under fetch_mu. */
static lares_status fetch_windows(lares_worker *w, const cluster_plan_msg *p, lares_error *err) {
    const int32_t rounds = cluster_plan_rounds(&p->plan);
    exec_window *win = lares_calloc((size_t)rounds, sizeof *win);
    if (win == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    const int32_t n = plan_windows(&p->plan, (int32_t)p->self, win);
    uint64_t fetched = 0;
    lares_status st = fetch_items_of(w, win, n, &fetched, err);
    lares_free(win);
    if (st == LARES_OK && (fetched > 0 || atomic_exchange(&w->prepared_new, false))) {
        char path[1200];
        snprintf(path, sizeof path, "%s", w->lm->path);
        st = open_model(w, path, true, err);
    }
    return st;
}

/* PREPARE (the prepare thread, issue 19): the coming plan's tensors into the
 * cache over the prepare thread's link while the compute thread serves the
 * plan in force; nothing it uses changes (its windows are pinned, the model
 * stays open). A worker with the model file has nothing to fetch. */
static lares_status cb_prepare(void *user, const cluster_plan_msg *p, cluster_ship_link *link,
                               uint64_t *fetched, lares_error *err) {
    lares_worker *w = user;
    *fetched = 0;
    pthread_mutex_lock(&w->fetch_mu);
    lares_status st = LARES_OK;
    if (w->shipped && w->lm != NULL) {
        const int32_t rounds = cluster_plan_rounds(&p->plan);
        exec_window *win = lares_calloc((size_t)rounds, sizeof *win);
        if (win == NULL) {
            st = lares_fail(err, LARES_ENOMEM, "out of memory");
        } else {
            const int32_t n = plan_windows(&p->plan, (int32_t)p->self, win);
            cluster_ship_link *own = w->fetch.link;
            w->fetch.link = link;
            st = fetch_items_of(w, win, n, fetched, err);
            w->fetch.link = own;
            lares_free(win);
        }
        if (*fetched > 0) {
            atomic_store(&w->prepared_new, true);
        }
    }
    pthread_mutex_unlock(&w->fetch_mu);
    return st;
}

static lares_status open_locked(lares_worker *w, const cluster_hello *h, cluster_welcome *out,
                                lares_error *err);

static lares_status cb_open(void *user, const cluster_hello *h, cluster_welcome *out,
                            lares_error *err) {
    lares_worker *w = user;
    pthread_mutex_lock(&w->fetch_mu);
    lares_status st = open_locked(w, h, out, err);
    pthread_mutex_unlock(&w->fetch_mu);
    return st;
}

static lares_status open_locked(lares_worker *w, const cluster_hello *h, cluster_welcome *out,
                                lares_error *err) {
    const char *path = w->model_path != NULL ? w->model_path : h->model_path;
    if (path[0] == '\0' && w->cache_dir != NULL) {
        lares_status st = open_shipped(w, h, err);
        if (st != LARES_OK) {
            return st;
        }
        path = w->lm->path;
    } else if (path[0] == '\0') {
        return lares_fail(err, LARES_EINVAL,
                          "no model: ring.json names no \"model\" for device "
                          "%u and the worker was started without --model (or a --cache)",
                          h->device);
    } else {
        w->shipped = false;
    }
    if (w->lm == NULL || strcmp(w->lm->path, path) != 0) {
        release_windows(w);
        lares_model_close(w->lm);
        w->lm = NULL;
        lares_status st = lares_model_open(path, NULL, &w->lm, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    const model *m = w->lm->m;
    out->model.file_bytes = gguf_file_bytes(w->lm->file);
    out->model.header_hash = gguf_header_hash(w->lm->file);
    out->n_layer = (uint32_t)m->hp.n_layer;
    out->n_embd = (uint32_t)m->hp.n_embd;
    out->n_cpu = (uint32_t)lares_cpu_count();
    mem_limit lim;
    mem_limit_read(NULL, &lim);
    out->mem_available_bytes = lim.auto_bytes == UINT64_MAX ? 0 : lim.auto_bytes;
    if (gethostname(out->name, sizeof out->name) != 0) {
        snprintf(out->name, sizeof out->name, "worker");
    }
    out->name[sizeof out->name - 1] = '\0';
    if (h->flags & CLUSTER_HELLO_PROFILE) {
        /* what the planner needs; cached per hardware fingerprint, so only the
         * first head pays the measuring time (free memory is always fresh) */
        sched_profile_opts po = sched_profile_opts_default();
        po.disk_path = path;
        po.cache_dir = w->profile_cache_dir;
        po.n_threads = w->n_threads;
        po.budget_ms = h->profile_ms > 0 ? h->profile_ms : CLUSTER_DEFAULT_PROFILE_MS;
        po.run_windows = api_run_windows; /* the rates fitted to this model's windows */
        sched_device d;
        sched_profile_info info;
        char *json = NULL;
        lares_error perr = {0};
        if (sched_profile_run(&po, &d, &info, &perr) == LARES_OK &&
            sched_device_to_json(&d, &json, &perr) == LARES_OK &&
            strlen(json) <= CLUSTER_MAX_PROFILE) {
            snprintf(out->profile, sizeof out->profile, "%s", json);
        } else {
            lares_log(LARES_LOG_WARN, "cluster: no profile for the head: %s",
                      perr.msg[0] ? perr.msg : "it is too long");
        }
        lares_free(json);
    }
    return LARES_OK;
}

/* The fewest positions a slot's cache is counted for: a short request's
 * whole context, so that most never re-plan */
#define REACH_MIN 128

/* the weight budget that the slots' reaches leave */
static uint64_t reach_budget(const lares_worker *w) {
    uint64_t kv = 0;
    for (int32_t i = 0; i < w->n_slots; i++) {
        kv += api_kv_touched(w->kv, w->slot_reach[i], w->held);
    }
    const uint64_t need = w->heap_base + kv;
    return w->budget > need ? w->budget - need : 0;
}

/* The executor's weight budget: as a head session's (api/budget.c), with the
 * KV entries of the layers this device holds, not of the span. A budget that
 * cannot hold the largest layer beside every slot's full cache is refused;
 * the weights get what the positions in use leave (slot_reach), and more
 * is taken from them as the caches fill (cb_forward: note_reach). */
static lares_status worker_budget(lares_worker *w, exec_opts *eo, lares_error *err) {
    const model *m = w->lm->m;
    w->budget = 0;
    if (w->no_stream) {
        return LARES_OK;
    }
    uint64_t budget = w->mem_budget;
    if (budget == 0) {
        mem_limit lim;
        mem_limit_read(NULL, &lim);
        budget = lim.auto_bytes;
    }
    if (budget == UINT64_MAX) {
        return LARES_OK; /* no limit known */
    }
    uint64_t weights, least;
    lares_status st = exec_weight_needs(m, w->kv, eo, &weights, &least, err);
    if (st != LARES_OK) {
        return st;
    }
    /* every slot's cache counts its share of the layers held (the pages of
     * the others stay untouched), made yet or not (issue 20) */
    uint64_t kv_made = w->kv->bytes;
    for (int32_t i = 1; w->slot_kv != NULL && i < CLUSTER_MAX_SLOTS; i++) {
        kv_made += w->slot_kv[i] != NULL ? w->slot_kv[i]->bytes : 0;
    }
    const uint64_t kv_full = api_kv_touched(w->kv, w->kv->n_ctx, w->held) * (uint64_t)w->n_slots;
    const uint64_t base = lares_mem_in_use() - LARES_MIN(lares_mem_in_use(), kv_made) +
                          api_fixed_bytes(gguf_file_bytes(w->lm->file));
    if (budget < base + kv_full + least) {
        return lares_fail(err, LARES_ERANGE,
                          "a memory budget of %.1f MiB is below the %.1f MiB this worker needs at "
                          "least (%d KV cache%s and buffers %.1f MiB, the largest layer %.1f MiB)",
                          (double)budget / 1048576.0, (double)(base + kv_full + least) / 1048576.0,
                          (int)w->n_slots, w->n_slots == 1 ? "" : "s",
                          (double)(base - API_RESERVE_BYTES + kv_full) / 1048576.0,
                          (double)least / 1048576.0);
    }
    w->budget = budget;
    w->heap_base = base;
    eo->weight_budget_bytes = reach_budget(w);
    return LARES_OK;
}

/* The positions of a pass's runs (pos: n_tok, run i's rows after run i -
 * 1's): a slot whose cache now reaches past what the budget counted gets its
 * reach doubled until it holds them, and the executor a smaller weight
 * budget (it releases what no longer fits). A budget that fails leaves the
 * old plan: the memory limit, not lares, then has the last word. */
static void note_reach(lares_worker *w, const cluster_run *runs, int32_t n_runs, const int32_t *pos,
                       int32_t n_tok) {
    if (w->budget == 0) {
        return;
    }
    bool grew = false;
    int32_t row = 0;
    for (int32_t i = 0; i < n_runs; i++) {
        const int32_t n = n_runs == 1 ? n_tok : (int32_t)runs[i].rows;
        int32_t top = 0;
        for (int32_t r = row; r < row + n && r < n_tok; r++) {
            top = LARES_MAX(top, pos[r] + 1);
        }
        row += n;
        const uint32_t slot = runs[i].slot;
        if (slot >= (uint32_t)w->n_slots) {
            continue;
        }
        int32_t reach = w->slot_reach[slot];
        while (reach < top && reach < w->kv->n_ctx) {
            reach = LARES_MIN(2 * reach, w->kv->n_ctx);
        }
        if (reach != w->slot_reach[slot]) {
            w->slot_reach[slot] = reach;
            grew = true;
        }
    }
    if (grew) {
        lares_error err = {0};
        if (exec_local_set_budget(w->exec, reach_budget(w), &err) != LARES_OK) {
            lares_log(LARES_LOG_WARN, "cluster: the weight budget stays: %s", err.msg);
        }
    }
}

/* Releases the weights of layers held before and not now, and reads ahead
 * those held now and not before (when the executor does not stream: a
 * streaming executor reads its cycle itself). */
static void move_weights(lares_worker *w, const exec_window *old, int32_t n_old) {
    const model *m = w->lm->m;
    mem_file mf;
    mem_file_of(w->lm->file, &mf);
    exec_plan_info pi;
    exec_local_plan(w->exec, &pi);
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        bool before = false, now = false;
        for (int32_t i = 0; i < n_old; i++) {
            before = before || (l >= old[i].l0 && l < old[i].l1);
        }
        for (int32_t i = 0; i < w->n_windows; i++) {
            now = now || (l >= w->windows[i].l0 && l < w->windows[i].l1);
        }
        if (before == now || (now && pi.streaming)) {
            continue;
        }
        mem_span sp = {0};
        if (mem_span_of_layer(m->plan, l, true, &sp, NULL) == LARES_OK) {
            if (now) {
                mem_prefetch_async(&mf, &sp);
            } else {
                mem_release(&mf, &sp);
            }
        }
        mem_span_free(&sp);
    }
}

static lares_status setup_locked(lares_worker *w, const cluster_plan_msg *p, bool keep_kv,
                                 cluster_ready *out, bool *kept, uint32_t *kv_row_bytes,
                                 lares_error *err);

static lares_status cb_setup(void *user, const cluster_plan_msg *p, bool keep_kv,
                             cluster_ready *out, bool *kept, uint32_t *kv_row_bytes,
                             lares_error *err) {
    lares_worker *w = user;
    pthread_mutex_lock(&w->fetch_mu);
    lares_status st = setup_locked(w, p, keep_kv, out, kept, kv_row_bytes, err);
    pthread_mutex_unlock(&w->fetch_mu);
    return st;
}

static lares_status setup_locked(lares_worker *w, const cluster_plan_msg *p, bool keep_kv,
                                 cluster_ready *out, bool *kept, uint32_t *kv_row_bytes,
                                 lares_error *err) {
    *kept = false;
    /* a context dropped by a reopened model is made again below; the KV cache stays */
    const bool had_cx = w->cx != NULL;
    if (w->shipped && !(p->flags & CLUSTER_PLAN_PROBE)) {
        lares_status fst = fetch_windows(w, p, err);
        if (fst != LARES_OK) {
            release_windows(w);
            return fst;
        }
    }
    const model *m = w->lm->m;
    if (p->plan.n_layer != m->hp.n_layer || (int64_t)p->n_embd != m->hp.n_embd) {
        release_windows(w);
        return lares_fail(err, LARES_EINVAL,
                          "the plan is for %d layers of width %u, the model "
                          "has %d of %d",
                          p->plan.n_layer, p->n_embd, m->hp.n_layer, m->hp.n_embd);
    }
    const uint32_t kv_type = p->kv_f16 ? GGUF_TYPE_F16 : GGUF_TYPE_F32;
    const bool reuse = keep_kv && w->kv != NULL && w->kv->n_ctx == (int32_t)p->n_ctx &&
                       w->kv->type == kv_type && had_cx && w->n_batch == (int32_t)p->n_batch;
    exec_window *old = w->windows;
    const int32_t n_old = reuse ? w->n_windows : 0;
    w->windows = NULL;
    w->n_windows = 0;
    exec_local_free(w->exec);
    w->exec = NULL;
    if (!reuse) {
        release_windows(w);
    }
    free_slot_caches(w, (int32_t)p->n_slots); /* slots the plan no longer counts */
    w->n_slots = (int32_t)p->n_slots;
    if (w->slot_reach == NULL &&
        (w->slot_reach = lares_calloc(CLUSTER_MAX_SLOTS, sizeof *w->slot_reach)) == NULL) {
        release_windows(w);
        lares_free(old);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (int32_t i = 0; i < w->n_slots; i++) {
        /* kept caches keep what they touched; new ones start short */
        const bool stays = reuse && (i == 0 || w->slot_kv[i] != NULL);
        w->slot_reach[i] = LARES_MIN((int32_t)p->n_ctx,
                                     LARES_MAX(REACH_MIN, stays ? w->slot_reach[i] : 0));
    }
    int32_t threads = p->n_threads > 0 ? (int32_t)p->n_threads : w->n_threads;
    if (threads <= 0) {
        threads = lares_cpu_count();
    }
    lares_status st = LARES_OK;
    if (w->pool == NULL || w->pool_threads != threads) {
        ops_pool_free(w->pool);
        w->pool = NULL;
        st = ops_pool_create(threads, &w->pool, err);
        w->pool_threads = st == LARES_OK ? threads : 0;
        if (st == LARES_OK && w->cx != NULL) {
            w->cx->pool = w->pool;
        }
    }
    const int32_t self = (int32_t)p->self;
    const int32_t rounds = cluster_plan_rounds(&p->plan);
    int32_t held = 0;
    if (st == LARES_OK && (w->windows = lares_calloc((size_t)rounds, sizeof *w->windows)) == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (int32_t r = 0; r < rounds && st == LARES_OK; r++) {
        int32_t l0, l1;
        if (cluster_plan_window(&p->plan, self, r, &l0, &l1)) {
            w->windows[w->n_windows++] = (exec_window){l0, l1};
            held += l1 - l0;
        }
    }
    if (st == LARES_OK && w->n_windows == 0) {
        st = lares_fail(err, LARES_EINVAL, "the plan gives device %d no layers", self);
    }
    /* the KV cache spans the whole model: a later plan may give this device any layer */
    if (st == LARES_OK && w->kv == NULL) {
        st = model_kv_create(m, 0, m->hp.n_layer, (int32_t)p->n_ctx, kv_type, &w->kv, err);
    }
    if (st == LARES_OK && w->cx == NULL) {
        st = model_ctx_create(m, w->pool, (int32_t)p->n_batch, (int32_t)p->n_ctx, &w->cx, err);
        w->n_batch = st == LARES_OK ? (int32_t)p->n_batch : 0;
    }
    if (st == LARES_OK && w->slot_kv == NULL &&
        (w->slot_kv = lares_calloc(CLUSTER_MAX_SLOTS, sizeof *w->slot_kv)) == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    if (st == LARES_OK && w->seqs == NULL &&
        (w->seqs = lares_calloc((size_t)p->n_batch, sizeof *w->seqs)) == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    exec_opts eo = {.windows = w->windows, .n_windows = w->n_windows, .head = false,
                    .stream_io = w->stream_io};
    w->held = held;
    if (st == LARES_OK) {
        st = worker_budget(w, &eo, err);
    }
    if (st == LARES_OK) {
        st = exec_local_create(m, w->kv, w->cx, &eo, &w->exec, err);
    }
    if (st == LARES_OK && reuse) {
        move_weights(w, old, n_old);
    }
    lares_free(old);
    if (st != LARES_OK) {
        release_windows(w);
        return st;
    }
    const uint64_t span = (uint64_t)(w->kv->l1 - w->kv->l0);
    out->kv_bytes = w->kv->bytes / span * (uint64_t)held * (uint64_t)w->n_slots;
    out->n_windows = (uint32_t)w->n_windows;
    *kept = reuse;
    *kv_row_bytes = (uint32_t)model_kv_row_bytes(w->kv);
    return LARES_OK;
}

/* the memory this device could still give, read at most every MEM_FREE_EVERY_NS */
static uint32_t mem_free_mib(lares_worker *w, uint64_t now) {
    if (w->mem_free_ns == 0 || now - w->mem_free_ns > MEM_FREE_EVERY_NS) {
        sched_device d;
        sched_device_init(&d, "self");
        uint64_t limit = 0;
        w->mem_free_mib = sched_probe_memory(NULL, &d, &limit, NULL) == LARES_OK
                              ? (uint32_t)LARES_MIN(d.ram_avail_bytes >> 20, (uint64_t)UINT32_MAX - 1)
                              : UINT32_MAX;
        w->mem_free_ns = now;
    }
    return w->mem_free_mib;
}

/* Slot's KV cache (slot 0: the one the executor was made with), made on the
 * slot's first use at the plan's context; the budget counted it at setup. */
static lares_status slot_cache(lares_worker *w, uint32_t slot, model_kv **out, lares_error *err) {
    if (w->kv == NULL || slot >= (uint32_t)w->n_slots) {
        return lares_fail(err, LARES_EINVAL, "kv slot %u outside the plan's %d", slot,
                          (int)w->n_slots);
    }
    if (slot == 0) {
        *out = w->kv;
        return LARES_OK;
    }
    if (w->slot_kv[slot] == NULL) {
        const model *m = w->lm->m;
        lares_status st = model_kv_create(m, w->kv->l0, w->kv->l1, w->kv->n_ctx, w->kv->type,
                                          &w->slot_kv[slot], err);
        if (st != LARES_OK) {
            return st;
        }
    }
    *out = w->slot_kv[slot];
    return LARES_OK;
}

static lares_status cb_forward(void *user, int32_t l0, int32_t l1, const cluster_run *runs,
                               int32_t n_runs, const int32_t *pos, int32_t n_tok, float *x,
                               cluster_figures *fig, lares_error *err) {
    lares_worker *w = user;
    struct rusage r0, r1;
    exec_counters c0, c1;
    lares_status st = LARES_OK;
    /* one run of slot 0 is the pass of one sequence, as before slots */
    const bool plain = n_runs == 1 && runs[0].slot == 0;
    int32_t row = 0;
    for (int32_t i = 0; i < n_runs && !plain && st == LARES_OK; i++) {
        st = slot_cache(w, runs[i].slot, &w->seqs[i].kv, err);
        w->seqs[i].row0 = row;
        w->seqs[i].n_rows = (int32_t)runs[i].rows;
        row += (int32_t)runs[i].rows;
    }
    if (st != LARES_OK) {
        return st;
    }
    getrusage(RUSAGE_SELF, &r0);
    exec_local_counters(w->exec, &c0);
    const uint64_t t0 = lares_now_ns();
    note_reach(w, runs, n_runs, pos, n_tok);
    st = plain ? exec_local_forward(w->exec, l0, l1, pos, n_tok, x, err)
               : exec_local_forward_seqs(w->exec, w->seqs, n_runs, l0, l1, pos, n_tok, x, err);
    const uint64_t t1 = lares_now_ns();
    exec_local_counters(w->exec, &c1);
    getrusage(RUSAGE_SELF, &r1);
    const long faults = r1.ru_majflt - r0.ru_majflt;
    fig->major_faults = faults > 0 ? (uint32_t)LARES_MIN(faults, (long)UINT32_MAX) : 0;
    fig->wait_us = (uint32_t)LARES_MIN((c1.wait_ns - c0.wait_ns) / 1000u, (uint64_t)UINT32_MAX);
    fig->mem_free_mib = mem_free_mib(w, t1);
    /* tests and benchmarks: a device whose CPU was cut to 1/factor */
    const unsigned slow = atomic_load_explicit(&w->slow_milli, memory_order_relaxed);
    if (st == LARES_OK && slow > 1000) {
        const uint64_t extra = (t1 - t0) * (slow - 1000) / 1000;
        struct timespec ts = {.tv_sec = (time_t)(extra / 1000000000u),
                              .tv_nsec = (long)(extra % 1000000000u)};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    return st;
}

static lares_status cb_kv_rows(void *user, uint32_t slot, int32_t layer, int32_t pos0, int32_t n,
                               bool write, uint8_t *k, uint8_t *v, lares_error *err) {
    lares_worker *w = user;
    model_kv *kv = NULL;
    lares_status st = slot_cache(w, slot, &kv, err);
    if (st != LARES_OK) {
        return st;
    }
    if (layer < kv->l0 || layer >= kv->l1 || pos0 < 0 || n < 0 || pos0 + n > kv->n_ctx) {
        return lares_fail(err, LARES_EINVAL, "kv rows %d..%d of slot %u layer %d outside the cache",
                          pos0, pos0 + n, slot, layer);
    }
    model_kv_rows(kv, layer, pos0, n, write, k, v);
    return LARES_OK;
}

void lares_worker_free(lares_worker *w) {
    if (w == NULL) {
        return;
    }
    cluster_worker_free(w->cw);
    release_windows(w);
    lares_free(w->slot_kv);
    lares_free(w->slot_reach);
    ops_pool_free(w->pool);
    lares_model_close(w->lm);
    api_fetch_close(&w->fetch);
    if (w->mu_init) {
        pthread_mutex_destroy(&w->fetch_mu);
    }
    lares_free(w->model_path);
    lares_free(w->profile_cache_dir);
    lares_free(w->cache_dir);
    lares_free(w);
}

lares_status lares_worker_create(const lares_worker_opts *o, lares_worker **out, lares_error *err) {
    if (o == NULL || o->listen == NULL) {
        return lares_fail(err, LARES_EINVAL, "worker: no address to listen on");
    }
    lares_worker *w = lares_calloc(1, sizeof *w);
    cluster_allow *allow = lares_calloc(1, sizeof *allow);
    lares_status st = LARES_OK;
    if (w == NULL || allow == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    if (st == LARES_OK) {
        w->insecure = o->insecure;
        w->n_threads = o->n_threads;
        w->mem_budget = o->mem_budget;
        w->no_stream = o->no_stream;
        w->stream_io = o->stream_io == LARES_STREAM_IO_MMAP     ? EXEC_IO_MMAP
                       : o->stream_io == LARES_STREAM_IO_DIRECT ? EXEC_IO_DIRECT
                                                                : EXEC_IO_AUTO;
        w->on_event = o->on_event;
        w->user = o->user;
        atomic_init(&w->slow_milli, 1000);
        atomic_init(&w->tamper, 0);
        atomic_init(&w->fetch_delay_ms, 0);
        atomic_init(&w->prepared_new, false);
        w->mu_init = pthread_mutex_init(&w->fetch_mu, NULL) == 0;
        if (!w->mu_init) {
            st = lares_fail(err, LARES_ENOMEM, "worker: cannot make a lock");
        }
        w->cache_size = o->cache_size;
        if ((o->model_path != NULL && (w->model_path = lares_strdup(o->model_path)) == NULL) ||
            (o->profile_cache_dir != NULL && o->profile_cache_dir[0] != '\0' &&
             (w->profile_cache_dir = lares_strdup(o->profile_cache_dir)) == NULL) ||
            (o->cache_dir != NULL && o->cache_dir[0] != '\0' &&
             (w->cache_dir = lares_strdup(o->cache_dir)) == NULL)) {
            st = lares_fail(err, LARES_ENOMEM, "out of memory");
        }
    }
    if (st == LARES_OK && o->insecure) {
        lares_log(LARES_LOG_WARN, "cluster: --insecure: this worker accepts any head without "
                                  "keys or encryption; use it only on a trusted test network");
    } else if (st == LARES_OK) {
        if (o->key_path == NULL) {
            st = lares_fail(err, LARES_EAUTH,
                            "worker: no key pair (--key FILE, made by lares "
                            "keygen), or --insecure");
        } else {
            st = cluster_key_read(o->key_path, &w->key, err);
        }
        for (size_t i = 0; i < o->n_allow && st == LARES_OK; i++) {
            st = cluster_allow_add(allow, o->allow[i], err);
        }
        if (st == LARES_OK && allow->n == 0 && !o->pairable) {
            st = lares_fail(err, LARES_EAUTH,
                            "worker: no head is allowed (--allow HEAD.pub), or "
                            "--insecure");
        }
    }
    if (st == LARES_OK) {
        const cluster_worker_opts co = {.listen = o->listen,
                                        .key = o->insecure ? NULL : &w->key,
                                        .allow = allow,
                                        .pairable = o->pairable,
                                        .insecure = o->insecure,
                                        .compute = {.user = w,
                                                    .open = cb_open,
                                                    .setup = cb_setup,
                                                    .forward = cb_forward,
                                                    .release = cb_release,
                                                    .kv_rows = cb_kv_rows,
                                                    .attach_ship = cb_attach_ship,
                                                    .prepare = cb_prepare},
                                        .on_event = on_cluster_event,
                                        .user = w};
        st = cluster_worker_create(&co, &w->cw, err);
    }
    lares_free(allow);
    if (st != LARES_OK) {
        lares_worker_free(w);
        return st;
    }
    *out = w;
    return LARES_OK;
}

const char *lares_worker_address(const lares_worker *w) {
    return cluster_worker_endpoint(w->cw);
}

lares_status lares_worker_allow(lares_worker *w, const char *head_key_z85, lares_error *err) {
    uint8_t key[CLUSTER_KEY_BYTES];
    if (w->insecure) {
        return lares_fail(err, LARES_EINVAL, "an insecure worker has no allow-list");
    }
    lares_status st = cluster_key_parse(head_key_z85, key, err);
    return st == LARES_OK ? cluster_worker_allow(w->cw, key, err) : st;
}

const char *lares_worker_public_key(const lares_worker *w) {
    return w->insecure ? "" : w->key.public_z85;
}

lares_status lares_worker_run(lares_worker *w, lares_error *err) {
    return cluster_worker_run(w->cw, err);
}

void lares_worker_stop(lares_worker *w) {
    cluster_worker_stop(w->cw);
}

void lares_worker_set_slowdown(lares_worker *w, double factor) {
    const double f = factor > 1 ? LARES_MIN(factor, 1000.0) : 1.0;
    atomic_store_explicit(&w->slow_milli, (unsigned)(f * 1000.0 + 0.5), memory_order_relaxed);
}

void lares_worker_set_tamper(lares_worker *w, int n) {
    atomic_store(&w->tamper, n > 0 ? n : 0);
}

void lares_worker_set_fetch_delay(lares_worker *w, unsigned ms) {
    atomic_store(&w->fetch_delay_ms, LARES_MIN(ms, 10000u));
}

lares_status lares_cache_list(const char *dir, lares_cache_model **out, size_t *n,
                              lares_error *err) {
    *out = NULL;
    *n = 0;
    wcache_model_info *v = NULL;
    size_t count = 0;
    lares_status st = wcache_list(dir, &v, &count, err);
    if (st != LARES_OK || count == 0) {
        return st;
    }
    lares_cache_model *r = lares_calloc(count, sizeof *r);
    if (r == NULL) {
        lares_free(v);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < count; i++) {
        snprintf(r[i].hash, sizeof r[i].hash, "%s", v[i].sha_hex);
        snprintf(r[i].name, sizeof r[i].name, "%s", v[i].name);
        r[i].file_bytes = v[i].file_bytes;
        r[i].bytes = v[i].bytes;
        r[i].last_use = v[i].last_use;
        r[i].tensors = v[i].items > 0 ? v[i].items - 1 : 0; /* item 0 is the header */
        r[i].tensors_held = v[i].items_done > 0 ? v[i].items_done - (v[i].items > 0) : 0;
    }
    lares_free(v);
    *out = r;
    *n = count;
    return LARES_OK;
}

void lares_cache_list_free(lares_cache_model *list) {
    lares_free(list);
}

lares_status lares_keygen(const char *path, char public_key[LARES_KEY_Z85_LEN + 1],
                          lares_error *err) {
    cluster_keypair k;
    lares_status st = cluster_key_generate(&k, err);
    if (st == LARES_OK) {
        st = cluster_key_write(path, &k, err);
    }
    if (st == LARES_OK && public_key != NULL) {
        memcpy(public_key, k.public_z85, LARES_KEY_Z85_LEN + 1);
    }
    memset(&k, 0, sizeof k);
    return st;
}
