/* lares worker: join rings as a worker, serving one head after another (docs/ring.md). */
#include "app.h"
#include "discover.h"

#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void worker_usage(FILE *to) {
    fputs("usage: lares worker [options]   (zero setup: its key and paired heads in the config\n"
          "                                 directory, announced on the LAN; lares pair)\n"
          "       lares worker --listen HOST:PORT --key KEYFILE --allow HEAD_KEY... [options]\n"
          "  Without --key: the key is the config directory's device.key (made on first use),\n"
          "  the heads allowed are the paired ones (and --allow), it listens on 0.0.0.0:9100,\n"
          "  takes pairing requests on 9101 while it has no paired head (or with --pair) and\n"
          "  answers discovery on UDP 9102.\n"
          "      --pair              take one pairing request although a head is paired\n"
          "      --pair-listen HOST:PORT  where pairing requests come (default: --listen's host,\n"
          "                          port 9101; 0 when --listen's port is 0)\n"
          "      --no-discovery      neither announce nor answer queries (pairing stays)\n"
          "      --listen HOST:PORT  where heads connect (port 0: any free port, printed)\n"
          "      --key FILE          this worker's key pair (lares keygen -o FILE)\n"
          "      --allow KEY|FILE    a head allowed to use this worker: its public key (40\n"
          "                          characters) or a file of keys (HEAD.key.pub); repeatable\n"
          "  -m, --model PATH        the model file here (default: the path ring.json names)\n"
          "  -t, --threads N         threads (default: ring.json's, else all cores)\n"
          "      --isa NAME          force the kernel family (avx2, avxvnni, avx512, neon, ...)\n"
          "      --mem-budget SIZE   memory for this worker (default: the cgroup limit or 80%\n"
          "                          of available memory); layers that do not fit stream\n"
          "      --no-stream         plain mmap: no read-ahead of the next window, no release\n"
          "                          (the comparison \"prefetch off\")\n"
          "      --stream-io M       how streamed layers are read: auto, mmap or direct\n"
          "                          (as lares run)\n"
          "      --profile-cache DIR keep this device's profile there (automatic rings: the\n"
          "                          head asks for it; default: $XDG_CACHE_HOME/lares, else\n"
          "                          ~/.cache/lares, as lares profile; measured again after\n"
          "                          7 days, or with another CPU, OS or lares version)\n"
          "      --no-profile-cache  measure for every head\n"
          "      --cache DIR         without a model file (no -m, none named by ring.json):\n"
          "                          the head ships this worker's tensors into this weight\n"
          "                          cache (default: $XDG_CACHE_HOME/lares/models, else\n"
          "                          ~/.cache/lares/models); a later start only checks hashes\n"
          "      --cache-size SIZE   the most the weight cache holds (\"20GB\"; default: no\n"
          "                          limit): least recently used models and tensors go first\n"
          "      --no-cache          never take weights from the head\n"
          "      --cache-list        list the models in the weight cache and exit\n"
          "      --insecure          no encryption and no keys: only on a trusted test network\n"
          "  -q, --quiet             only refusals and errors (no per-round lines)\n"
          "  -v, --verbose\n",
          to);
    app_disc_usage(to);
}


static lares_worker *running; /* for the signal handler */

static void on_signal(int sig) {
    (void)sig;
    if (running != NULL) {
        lares_worker_stop(running);
    }
}

typedef struct out_state {
    int verbosity;
    pthread_mutex_t mu;
    disc_announcer *an; /* zero setup's announcer while it runs (under mu) */
} out_state;

static void on_event(const lares_worker_event *ev, void *user) {
    out_state *os = user;
    static const char *const tag[] = {
        [LARES_WORKER_LISTENING] = "listening", [LARES_WORKER_REFUSED] = "refused",
        [LARES_WORKER_HEAD] = "head",           [LARES_WORKER_PLAN] = "plan",
        [LARES_WORKER_ROUND] = "round",         [LARES_WORKER_HEAD_LOST] = "head lost",
        [LARES_WORKER_STOPPED] = "stopped",     [LARES_WORKER_ERROR] = "error",
        [LARES_WORKER_FETCH] = "fetch"};
    if (ev->kind == LARES_WORKER_ROUND && os->verbosity < 0) {
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    pthread_mutex_lock(&os->mu);
    if (ev->kind == LARES_WORKER_FETCH) {
        /* weights came into the cache: the sealed summary of the next answer
         * says so, not the one refreshed before they arrived */
        disc_announcer_refresh_soon(os->an);
    }
    fprintf(stderr, "%02d:%02d:%02d.%03ld worker %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, tag[ev->kind], ev->text);
    fflush(stderr);
    pthread_mutex_unlock(&os->mu);
}

/* lares worker --cache-list: the weight cache's models, most recently used first */
static int cache_list(const char *dir) {
    lares_cache_model *v = NULL;
    size_t n = 0;
    lares_error err = {0};
    if (lares_cache_list(dir, &v, &n, &err) != LARES_OK) {
        return app_fail(&err);
    }
    printf("weight cache %s: %zu model(s)\n", dir, n);
    if (n > 0) {
        printf("%-16s  %-24s %12s %12s %9s  %s\n", "model hash", "name", "held MiB", "model MiB",
               "tensors", "last use (UTC)");
    }
    for (size_t i = 0; i < n; i++) {
        char when[32] = "-";
        const time_t t = (time_t)v[i].last_use;
        struct tm tm;
        if (v[i].last_use > 0 && gmtime_r(&t, &tm) != NULL) {
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        }
        char tensors[32];
        snprintf(tensors, sizeof tensors, "%u/%u", v[i].tensors_held, v[i].tensors);
        printf("%.16s  %-24.24s %12.1f %12.1f %9s  %s\n", v[i].hash,
               v[i].name[0] ? v[i].name : "-", (double)v[i].bytes / 1048576.0,
               (double)v[i].file_bytes / 1048576.0, tensors, when);
    }
    lares_cache_list_free(v);
    return APP_OK;
}

/* ---- zero setup (issue 19): pairing and discovery around the ring worker ---- */

typedef struct zero_setup {
    app_disc d;
    bool pair_asked;       /* --pair */
    bool no_discovery;
    const char *pair_listen;
    char paired_path[1100];
    char name[DISC_NAME_MAX + 1];
    cluster_keypair key;
    char key_path[1100];
    pthread_mutex_t mu;
    bool window_open;      /* takes a pairing request now */
    lares_worker *w;
    out_state *os;
    disc_pair_service *ps;
    disc_announcer *an;
    const char *cache_dir; /* the weight cache; NULL: none */
} zero_setup;

static void say(out_state *os, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(out_state *os, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&os->mu);
    fputs("lares: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&os->mu);
    va_end(ap);
}

static bool zs_open(void *user) {
    zero_setup *z = user;
    pthread_mutex_lock(&z->mu);
    const bool open = z->window_open;
    pthread_mutex_unlock(&z->mu);
    return open;
}

static lares_status zs_event(const disc_pair_event *ev, void *user, lares_error *err) {
    zero_setup *z = user;
    char fp[DISC_FINGERPRINT_LEN + 1], z85[DISC_KEY_Z85 + 1];
    disc_fingerprint(ev->head_key, fp);
    cluster_key_z85(ev->head_key, z85);
    if (ev->kind == DISC_PAIR_CODE) {
        say(z->os, "pairing requested by head %s (key %s): pairing code %06u (type it on the "
                   "head)", ev->head_name, fp, ev->code);
        return LARES_OK;
    }
    if (ev->kind == DISC_PAIR_REFUSED) {
        say(z->os, "pairing with head %s (key %s) refused, nothing stored: %s", ev->head_name,
            fp, ev->text);
        return LARES_OK;
    }
    static disc_paired p; /* the service's one thread */
    lares_status st = disc_paired_load(z->paired_path, &p, err);
    if (st == LARES_OK) {
        st = disc_paired_add(&p, DISC_ROLE_HEAD, ev->head_name, ev->head_key, err);
    }
    if (st == LARES_OK) {
        st = disc_paired_save(z->paired_path, &p, err);
    }
    if (st == LARES_OK) {
        st = lares_worker_allow(z->w, z85, err);
    }
    if (st == LARES_OK) {
        pthread_mutex_lock(&z->mu);
        z->window_open = false; /* one pairing per window */
        pthread_mutex_unlock(&z->mu);
        say(z->os, "paired with head %s (key %s); stored in %s", ev->head_name, fp,
            z->paired_path);
    } else {
        say(z->os, "pairing with head %s failed: %s", ev->head_name, err->msg);
    }
    return st;
}

/* the port of "host:port" */
static unsigned port_of(const char *addr) {
    const char *c = strrchr(addr, ':');
    return c != NULL ? (unsigned)atoi(c + 1) : 0;
}

/* The key, the paired heads (into allow), the default address. */
static bool zs_prepare(zero_setup *z, lares_worker_opts *o, const char **allow) {
    if (!app_device_key(&z->d, &z->key, z->key_path, sizeof z->key_path) ||
        !app_paired_path(&z->d, z->paired_path, sizeof z->paired_path)) {
        return false;
    }
    static disc_paired p;
    lares_error err = {0};
    if (disc_paired_load(z->paired_path, &p, &err) != LARES_OK) {
        app_fail(&err);
        return false;
    }
    static char keys[DISC_MAX_DEVICES][DISC_KEY_Z85 + 1];
    int heads = 0;
    for (int i = 0; i < p.n; i++) {
        if (p.e[i].role == DISC_ROLE_HEAD) {
            cluster_key_z85(p.e[i].key, keys[heads]);
            allow[o->n_allow++] = keys[heads++];
        }
    }
    o->key_path = z->key_path;
    o->pairable = true;
    if (o->listen == NULL) {
        static char listen[32];
        snprintf(listen, sizeof listen, "0.0.0.0:%d", DISC_DEFAULT_RING_PORT);
        o->listen = listen;
    }
    z->window_open = heads == 0 || z->pair_asked;
    app_device_name(&z->d, z->name);
    return true;
}

/* Before an announcement goes out (the announcer's thread): the weight
 * cache's models, sealed for the paired heads (the last paired, when more
 * than an announcement carries), so `lares devices` on those heads shows
 * them and nobody else can read them. */
static void zs_refresh(void *user, disc_beacon *b) {
    zero_setup *z = user;
    b->n_sealed = 0;
    static disc_paired p; /* the announcer's one thread */
    lares_cache_model *v = NULL;
    size_t n = 0;
    lares_error err = {0};
    if (z->cache_dir == NULL || disc_paired_load(z->paired_path, &p, &err) != LARES_OK ||
        lares_cache_list(z->cache_dir, &v, &n, &err) != LARES_OK) {
        return; /* the announcement goes without it; the scan says "not reported" */
    }
    disc_cached m[DISC_CACHED_MAX];
    const int k = (int)LARES_MIN(n, (size_t)DISC_CACHED_MAX); /* most recently used first */
    for (int i = 0; i < k; i++) {
        snprintf(m[i].name, sizeof m[i].name, "%.*s", DISC_CACHED_NAME_MAX, v[i].name);
        m[i].bytes = v[i].bytes;
        m[i].file_bytes = v[i].file_bytes;
        m[i].tensors_held = v[i].tensors_held;
        m[i].tensors = v[i].tensors;
    }
    lares_cache_list_free(v);
    for (int i = p.n - 1; i >= 0 && b->n_sealed < DISC_SEALED_MAX; i--) {
        if (p.e[i].role != DISC_ROLE_HEAD) {
            continue;
        }
        const size_t len = disc_cached_seal(m, k, p.e[i].key, b->sealed[b->n_sealed],
                                            sizeof b->sealed[b->n_sealed]);
        if (len > 0) {
            b->sealed_len[b->n_sealed++] = (uint16_t)len;
        }
    }
}

/* Pairing service and announcements, once the ring's port is bound. */
static bool zs_start(zero_setup *z, lares_worker *w, const char *listen) {
    z->w = w;
    char pair_listen[300];
    if (z->pair_listen != NULL) {
        snprintf(pair_listen, sizeof pair_listen, "%s", z->pair_listen);
    } else {
        const char *c = strrchr(listen, ':');
        const int hl = c != NULL ? (int)(c - listen) : (int)strlen(listen);
        snprintf(pair_listen, sizeof pair_listen, "%.*s:%d", hl, listen,
                 port_of(listen) == 0 ? 0 : DISC_DEFAULT_PAIR_PORT);
    }
    const disc_pair_service_opts po = {.listen = pair_listen,
                                       .public_z85 = z->key.public_z85,
                                       .secret_z85 = z->key.secret_z85,
                                       .name = z->name,
                                       .open = zs_open,
                                       .on_event = zs_event,
                                       .user = z};
    lares_error err = {0};
    if (disc_pair_service_start(&po, &z->ps, &err) != LARES_OK) {
        app_fail(&err);
        return false;
    }
    disc_beacon self = {.type = DISC_BEACON_ANNOUNCE,
                        .ring_port = (uint16_t)port_of(lares_worker_address(w)),
                        .pair_port = disc_pair_service_port(z->ps)};
    memcpy(self.key, z->key.public_key, DISC_KEY_BYTES);
    snprintf(self.name, sizeof self.name, "%s", z->name);
    snprintf(self.version, sizeof self.version, "%.31s", lares_version());
    if (!z->no_discovery &&
        disc_announcer_start(&z->d.net, &self, 5000, zs_refresh, z, &z->an, &err) != LARES_OK) {
        app_fail(&err);
        return false;
    }
    pthread_mutex_lock(&z->os->mu);
    z->os->an = z->an;
    pthread_mutex_unlock(&z->os->mu);
    char fp[DISC_FINGERPRINT_LEN + 1];
    disc_fingerprint(z->key.public_key, fp);
    say(z->os, "worker %s, key %s (%s): ring on port %u, pairing on port %u, discovery on UDP "
               "%u%s",
        z->name, fp, z->key.public_z85, self.ring_port, self.pair_port,
        z->d.net.port != 0 ? z->d.net.port : DISC_DEFAULT_PORT,
        z->no_discovery ? " (off)" : "");
    if (z->window_open) {
        say(z->os, "waiting to be paired: on the head, lares pair %s", z->name);
    }
    return true;
}

static void zs_stop(zero_setup *z) {
    pthread_mutex_lock(&z->os->mu);
    z->os->an = NULL;
    pthread_mutex_unlock(&z->os->mu);
    disc_announcer_stop(z->an);
    disc_pair_service_stop(z->ps);
}

int cmd_worker(int argc, char **argv) {
    lares_worker_opts o = lares_worker_opts_default();
    o.listen = NULL;
    const char **allow = calloc((size_t)argc + DISC_MAX_DEVICES, sizeof *allow); /* + paired heads */
    out_state os = {.verbosity = 0};
    bool no_profile_cache = false, no_cache = false, list = false;
    int tamper = 0;
    int32_t fetch_delay_ms = 0;
    static zero_setup zs;
    int dr = 0;
    app_disc_init(&zs.d);
    pthread_mutex_init(&zs.mu, NULL);
    zs.os = &os;
    bool zero = false;
    const char *isa = NULL;
    pthread_mutex_init(&os.mu, NULL);
    int rc = APP_USAGE;
    if (allow == NULL) {
        app_error("out of memory");
        return APP_FAIL;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            worker_usage(stdout);
            rc = APP_OK;
            goto done;
        } else if (strcmp(a, "--listen") == 0) {
            if ((o.listen = app_need_value(argc, argv, &i)) == NULL) {
                goto done;
            }
        } else if (strcmp(a, "--key") == 0) {
            if ((o.key_path = app_need_value(argc, argv, &i)) == NULL) {
                goto done;
            }
        } else if (strcmp(a, "--allow") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL) {
                goto done;
            }
            allow[o.n_allow++] = v;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if ((o.model_path = app_need_value(argc, argv, &i)) == NULL) {
                goto done;
            }
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 1, 512, &o.n_threads)) {
                goto done;
            }
        } else if (strcmp(a, "--mem-budget") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_size(a, v, &o.mem_budget)) {
                goto done;
            }
        } else if (strcmp(a, "--no-stream") == 0) {
            o.no_stream = true;
        } else if (strcmp(a, "--stream-io") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_stream_io(a, v, &o.stream_io)) {
                goto done;
            }
        } else if (strcmp(a, "--isa") == 0) {
            if ((isa = app_need_value(argc, argv, &i)) == NULL) {
                goto done;
            }
        } else if (strcmp(a, "--profile-cache") == 0) {
            if ((o.profile_cache_dir = app_need_value(argc, argv, &i)) == NULL) {
                goto done;
            }
            no_profile_cache = false;
        } else if (strcmp(a, "--no-profile-cache") == 0) {
            no_profile_cache = true;
            o.profile_cache_dir = NULL;
        } else if (strcmp(a, "--cache") == 0) {
            if ((o.cache_dir = app_need_value(argc, argv, &i)) == NULL) {
                goto done;
            }
        } else if (strcmp(a, "--cache-size") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_size(a, v, &o.cache_size)) {
                goto done;
            }
        } else if (strcmp(a, "--no-cache") == 0) {
            no_cache = true;
        } else if (strcmp(a, "--cache-list") == 0) {
            list = true;
        } else if (strcmp(a, "--test-fetch-delay-ms") == 0) {
            /* tests only: a pause after each chunk of weights received (a slow link) */
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 0, 10000, &fetch_delay_ms)) {
                goto done;
            }
        } else if (strcmp(a, "--test-tamper-chunks") == 0) {
            /* tests only: damage the first N chunks of weights received */
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 0, 1000000, &tamper)) {
                goto done;
            }
        } else if (strcmp(a, "--insecure") == 0) {
            o.insecure = true;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            os.verbosity = -1;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            os.verbosity++;
        } else if (strcmp(a, "--pair") == 0) {
            zs.pair_asked = true;
        } else if (strcmp(a, "--no-discovery") == 0) {
            zs.no_discovery = true;
        } else if (strcmp(a, "--pair-listen") == 0) {
            if ((zs.pair_listen = app_need_value(argc, argv, &i)) == NULL) {
                goto done;
            }
        } else if ((dr = app_disc_opt(argc, argv, &i, &zs.d)) != 0) {
            if (dr < 0) {
                goto done;
            }
        } else {
            app_error("worker: unknown option '%s' (lares worker --help lists them)", a);
            goto done;
        }
    }
    if (o.profile_cache_dir == NULL && !no_profile_cache) {
        o.profile_cache_dir = app_profile_cache_default();
    }
    static char cache_default[1100];
    if (o.cache_dir == NULL && app_profile_cache_default() != NULL) {
        snprintf(cache_default, sizeof cache_default, "%s/models", app_profile_cache_default());
        o.cache_dir = cache_default;
    }
    if (no_cache) {
        o.cache_dir = NULL;
    }
    if (list) {
        if (o.cache_dir == NULL) {
            app_error("worker: no weight cache (give --cache DIR)");
            goto done;
        }
        rc = cache_list(o.cache_dir);
        goto done;
    }
    zero = o.key_path == NULL && !o.insecure; /* zero setup (issue 19) */
    zs.cache_dir = o.cache_dir;
    if (zero && !zs_prepare(&zs, &o, allow)) {
        rc = APP_FAIL;
        goto done;
    }
    if (o.listen == NULL) {
        app_error("worker: no --listen HOST:PORT");
        goto done;
    }
    if (!o.insecure && !zero && (o.key_path == NULL || o.n_allow == 0)) {
        app_error("worker: give --key KEYFILE and at least one --allow HEAD_KEY (or --insecure "
                  "on a trusted test network)");
        goto done;
    }
    app_setup_log(os.verbosity);
    lares_error ierr = {0};
    if (isa != NULL && lares_force_isa(isa, &ierr) != LARES_OK) {
        rc = app_fail(&ierr);
        goto done;
    }
    o.allow = allow;
    o.on_event = on_event;
    o.user = &os;
    lares_error err = {0};
    lares_worker *w = NULL;
    if (lares_worker_create(&o, &w, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    if (fetch_delay_ms > 0) {
        lares_worker_set_fetch_delay(w, (unsigned)fetch_delay_ms);
    }
    if (tamper > 0) {
        lares_worker_set_tamper(w, tamper);
    }
    if (o.insecure) {
        fprintf(stderr,
                "lares: WARNING: --insecure: no encryption, no keys; any host that reaches "
                "%s can use this worker and read its traffic\n",
                lares_worker_address(w));
    } else {
        fprintf(stderr, "lares: worker public key %s\n", lares_worker_public_key(w));
    }
    if (zero && !zs_start(&zs, w, o.listen)) {
        zs_stop(&zs);
        lares_worker_free(w);
        rc = APP_FAIL;
        goto done;
    }
    running = w;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    rc = lares_worker_run(w, &err) == LARES_OK ? APP_OK : app_fail(&err);
    running = NULL;
    if (zero) {
        zs_stop(&zs);
    }
    lares_worker_free(w);
done:
    free(allow);
    pthread_mutex_destroy(&os.mu);
    pthread_mutex_destroy(&zs.mu);
    return rc;
}
