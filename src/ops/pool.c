/*
 * The thread pool: n-1 persistent workers plus the caller as thread 0.
 *
 * A task is published by bumping a generation counter; workers spin on it
 * for a short while (the gaps between the ops of one token are microseconds,
 * far shorter than a sleep/wake), then sleep on a condition variable. The
 * caller runs its share and spins until every worker has finished.
 */
#include "ops/ops.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* spins before a worker sleeps: about a millisecond on current cores */
#define SPIN_LIMIT 20000
/* spins of the caller waiting for workers before it starts yielding its core */
#define WAIT_SPINS 2000

struct ops_pool {
    int n;
    pthread_t *threads; /* owned: n - 1 workers */
    int n_started;
    atomic_uint_fast64_t gen;
    atomic_int pending;
    atomic_int n_sleeping;
    atomic_bool stop;
    ops_task_fn fn;     /* published by gen (release/acquire) */
    void *ctx;
    int active;         /* threads taking part in the current task (published by gen) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ops_offload_fn offload; /* the gpu module's hook (ops.h), NULL when none */
    ops_offload_holds_fn offload_holds;
    void *offload_user;
};

typedef struct worker_arg {
    ops_pool *pool;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    lares_free(arg);
    ops_pool *p = wa.pool;
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (atomic_load(&p->stop)) {
                return NULL;
            }
            if (++spins < SPIN_LIMIT) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1); /* seq_cst: pairs with the runner's load */
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) {
                pthread_cond_wait(&p->cv, &p->mu);
            }
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (wa.ith < p->active) {
            p->fn(p->ctx, wa.ith, p->active);
            atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
        }
    }
}

lares_status ops_pool_create(int n_threads, ops_pool **out, lares_error *err) {
    if (n_threads < 1 || n_threads > 512) {
        return lares_fail(err, LARES_EINVAL, "ops: thread count %d out of range 1..512",
                          n_threads);
    }
    ops_pool *p = lares_calloc(1, sizeof *p);
    if (p == NULL) {
        return lares_fail(err, LARES_ENOMEM, "ops: out of memory for the thread pool");
    }
    p->n = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->stop, false);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->threads = lares_calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (p->threads == NULL) {
            ops_pool_free(p);
            return lares_fail(err, LARES_ENOMEM, "ops: out of memory for the thread pool");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = lares_alloc(sizeof *wa);
        if (wa == NULL) {
            ops_pool_free(p);
            return lares_fail(err, LARES_ENOMEM, "ops: out of memory for the thread pool");
        }
        wa->pool = p;
        wa->ith = i;
        int rc = pthread_create(&p->threads[i - 1], NULL, worker_main, wa);
        if (rc != 0) {
            lares_free(wa);
            ops_pool_free(p);
            return lares_fail(err, LARES_ENOMEM, "ops: cannot start thread %d: %s", i,
                              strerror(rc));
        }
        p->n_started++;
    }
    *out = p;
    return LARES_OK;
}

void ops_pool_free(ops_pool *p) {
    if (p == NULL) {
        return;
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) {
        pthread_join(p->threads[i], NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    lares_free(p->threads);
    lares_free(p);
}

int ops_pool_size(const ops_pool *p) {
    return p->n;
}

void ops_pool_run(ops_pool *p, ops_task_fn fn, void *ctx) {
    ops_pool_run_n(p, fn, ctx, p->n);
}

int ops_pool_threads_for(const ops_pool *p, double work, double min_per_thread) {
    if (p == NULL) {
        return 1;
    }
    double n = work / min_per_thread;
    return n >= p->n ? p->n : n < 1 ? 1 : (int)n;
}

void ops_pool_run_n(ops_pool *p, ops_task_fn fn, void *ctx, int n) {
    if (p == NULL || n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    if (n > p->n) {
        n = p->n;
    }
    if (n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->active = n;
    atomic_store_explicit(&p->pending, n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes fn/ctx, orders the load below */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, n);
    /* a worker that is not running (the machine has more runnable threads
     * than cores) would make a pure spin wait last a whole time slice: spin
     * briefly, then give the core away until the workers are done */
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        if (++spins < WAIT_SPINS) {
            cpu_relax();
        } else {
            sched_yield();
        }
    }
}

void ops_pool_set_offload(ops_pool *p, ops_offload_fn fn, ops_offload_holds_fn holds, void *user) {
    p->offload = fn;
    p->offload_holds = fn != NULL ? holds : NULL;
    p->offload_user = fn != NULL ? user : NULL;
}

void ops_pool_offload(const ops_pool *p, ops_offload_fn *fn, ops_offload_holds_fn *holds,
                      void **user) {
    *fn = p != NULL ? p->offload : NULL;
    if (holds != NULL) {
        *holds = p != NULL ? p->offload_holds : NULL;
    }
    *user = p != NULL ? p->offload_user : NULL;
}

bool ops_pool_holds(const ops_pool *p, const ops_matrix *w) {
    if (p == NULL || p->offload == NULL) {
        return false;
    }
    return p->offload_holds == NULL || p->offload_holds(p->offload_user, w);
}
