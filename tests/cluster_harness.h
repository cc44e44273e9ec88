/*
 * Test helpers for rings on loopback: workers run as threads of the test
 * (lares_worker_* on 127.0.0.1, port 0), keys live in a temporary folder, and
 * ring.json files are written there. Everything is removed by harness_end.
 */
#ifndef LARES_TEST_CLUSTER_HARNESS_H
#define LARES_TEST_CLUSTER_HARNESS_H

#include "check.h"
#include "core/core.h"
#include "lares.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#define H_MAX_EVENTS 64

typedef struct tworker {
    lares_worker *w;
    pthread_t th;
    bool running;
    char key[512]; /* its key pair */
    char pub[520]; /* its public key file */
    char addr[64];
    pthread_mutex_t mu;
    char events[H_MAX_EVENTS][512]; /* everything but rounds, oldest dropped */
    int n_events;
    int rounds;
} tworker;

static char h_dir[256];
static char h_head_key[512], h_head_pub[520];

static void h_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", h_dir, name);
}

static bool harness_begin(void) {
    snprintf(h_dir, sizeof h_dir, "/tmp/lares-ring-test.XXXXXX");
    if (mkdtemp(h_dir) == NULL) {
        fprintf(stderr, "cannot make a temporary folder\n");
        return false;
    }
    h_path(h_head_key, sizeof h_head_key, "head.key");
    snprintf(h_head_pub, sizeof h_head_pub, "%s.pub", h_head_key);
    lares_error err = {0};
    char pub[LARES_KEY_Z85_LEN + 1];
    CHECK_OK(lares_keygen(h_head_key, pub, &err), &err);
    return err.code == LARES_OK;
}

/* the folder and all in it, as the other tests remove theirs: the workers'
 * weight caches are folders of their own (cache_w1/<model>/...), which a
 * loop of unlink over the top folder left in /tmp */
static void harness_end(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", h_dir);
    CHECK(system(cmd) == 0);
}

static void h_on_event(const lares_worker_event *ev, void *user) {
    tworker *t = user;
    pthread_mutex_lock(&t->mu);
    if (ev->kind == LARES_WORKER_ROUND) {
        t->rounds++;
    } else {
        if (t->n_events == H_MAX_EVENTS) {
            memmove(t->events[0], t->events[1], sizeof t->events[0] * (H_MAX_EVENTS - 1));
            t->n_events--;
        }
        snprintf(t->events[t->n_events++], sizeof t->events[0], "%d %s", (int)ev->kind, ev->text);
    }
    pthread_mutex_unlock(&t->mu);
}

static inline bool worker_saw(tworker *t, lares_worker_event_kind kind, const char *needle) {
    bool found = false;
    char k[8];
    snprintf(k, sizeof k, "%d ", (int)kind);
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n_events && !found; i++) {
        found = strncmp(t->events[i], k, strlen(k)) == 0 && strstr(t->events[i], needle) != NULL;
    }
    pthread_mutex_unlock(&t->mu);
    return found;
}

static inline void worker_dump(tworker *t) {
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n_events; i++) {
        fprintf(stderr, "  worker %s event: %s\n", t->addr, t->events[i]);
    }
    pthread_mutex_unlock(&t->mu);
}

static void *h_worker_main(void *arg) {
    tworker *t = arg;
    lares_error err = {0};
    if (lares_worker_run(t->w, &err) != LARES_OK) {
        fprintf(stderr, "worker %s: %s\n", t->addr, err.msg);
    }
    return NULL;
}

/* The --cache of the next worker started (a worker without the model file,
 * issue 19); "" none. Taken by the next worker_start_at. */
static char h_next_cache[600];

/* Starts worker `idx` (its own key pair), allowing `allow` (a key or key
 * file; NULL: the head's), listening on `listen` ("127.0.0.1:0": a free
 * port). model: the --model of the worker, NULL: none. */
static bool worker_start_at(tworker *t, int idx, const char *allow, const char *model,
                            const char *listen) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    char name[32];
    snprintf(name, sizeof name, "w%d.key", idx);
    h_path(t->key, sizeof t->key, name);
    snprintf(t->pub, sizeof t->pub, "%s.pub", t->key);
    lares_error err = {0};
    if (access(t->key, F_OK) != 0) {
        char pub[LARES_KEY_Z85_LEN + 1];
        CHECK_OK(lares_keygen(t->key, pub, &err), &err);
    }
    const char *allow_list[1] = {allow ? allow : h_head_pub};
    lares_worker_opts o = lares_worker_opts_default();
    o.listen = listen;
    o.key_path = t->key;
    o.allow = allow_list;
    o.n_allow = 1;
    o.model_path = model;
    o.cache_dir = h_next_cache[0] ? h_next_cache : NULL;
    o.n_threads = 1;
    o.on_event = h_on_event;
    o.user = t;
    CHECK_OK(lares_worker_create(&o, &t->w, &err), &err);
    h_next_cache[0] = '\0';
    if (t->w == NULL) {
        return false;
    }
    snprintf(t->addr, sizeof t->addr, "%s", lares_worker_address(t->w));
    if (pthread_create(&t->th, NULL, h_worker_main, t) != 0) {
        lares_worker_free(t->w);
        t->w = NULL;
        return false;
    }
    t->running = true;
    return true;
}

static bool worker_start(tworker *t, int idx, const char *allow, const char *model) {
    return worker_start_at(t, idx, allow, model, "127.0.0.1:0");
}

static void worker_stop(tworker *t) {
    if (t->running) {
        lares_worker_stop(t->w);
        pthread_join(t->th, NULL);
        t->running = false;
    }
    lares_worker_free(t->w);
    t->w = NULL;
    pthread_mutex_destroy(&t->mu);
}

/* Writes ring.json `name` for the head and workers ws[0..n) with windows
 * w[0..n] (w[0] the head's; NULL: "auto"), each worker told `model`
 * (NULL: none). `extra` is spliced into the top-level object ("" none). */
static const char *write_ring(const char *name, tworker *ws, int n, const int *w, const char *model,
                              const char *extra) {
    static char path[600];
    h_path(path, sizeof path, name);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        return NULL;
    }
    fprintf(f, "{%s%s\"devices\": [\n  {\"name\": \"head\", \"key\": \"%s\"", extra,
            extra[0] ? ", " : "", h_head_key);
    if (w != NULL) {
        fprintf(f, ", \"w\": %d", w[0]);
    }
    fprintf(f, "}");
    for (int i = 0; i < n; i++) {
        fprintf(f,
                ",\n  {\"name\": \"w%d\", \"address\": \"%s\", \"public_key\": \"%s\", "
                "\"threads\": 1",
                i + 1, ws[i].addr, ws[i].pub);
        if (model != NULL) {
            fprintf(f, ", \"model\": \"%s\"", model);
        }
        if (w != NULL) {
            fprintf(f, ", \"w\": %d", w[i + 1]);
        }
        fprintf(f, "}");
    }
    fprintf(f, "\n]}\n");
    fclose(f);
    return path;
}

#endif
