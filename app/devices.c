/* lares devices, pair, unpair: devices on the local network, and pairing with them
 * once (issue 19, docs/ring.md "Zero-setup ring"). */
#include "discover.h"

#include <jansson.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void devices_usage(FILE *to) {
    fputs("usage: lares devices [--json] [discovery options]\n"
          "  lists the lares workers that answer on the local network: name, address, key\n"
          "  fingerprint, state (paired, unpaired, this device; paired devices that did not\n"
          "  answer too) and version; under a paired device, the models its weight cache\n"
          "  holds (sealed for this head: nobody else can read them). A device seen is not\n"
          "  trusted: lares pair NAME.\n",
          to);
    app_disc_usage(to);
}

static void pair_usage(FILE *to) {
    fputs("usage: lares pair NAME|FINGERPRINT [--code NNNNNN] [discovery options]\n"
          "  asks the worker to pair: it shows a 6-digit code on its terminal; type it here\n"
          "  (stdin: the terminal, or one line from a script; --code NNNNNN gives it ahead).\n"
          "  Only a matching code stores the keys, on both sides.\n"
          "usage: lares unpair NAME|FINGERPRINT [--config-dir DIR]\n"
          "  forgets a paired device: --ring auto no longer uses it.\n",
          to);
    app_disc_usage(to);
}

typedef struct scan_result {
    disc_device dev[DISC_MAX_DEVICES];
    int n, bad;
    disc_paired paired;
    cluster_keypair self;
} scan_result;

/* the key, the paired store and a scan */
static bool scan(const app_disc *d, scan_result *r) {
    char key_path[1100], paired_path[1100];
    lares_error err = {0};
    if (!app_device_key(d, &r->self, key_path, sizeof key_path) ||
        !app_paired_path(d, paired_path, sizeof paired_path)) {
        return false;
    }
    if (disc_paired_load(paired_path, &r->paired, &err) != LARES_OK ||
        disc_scan(&d->net, (uint32_t)d->wait_ms, r->dev, DISC_MAX_DEVICES, &r->n, &r->bad,
                  &err) != LARES_OK) {
        app_fail(&err);
        return false;
    }
    return true;
}

static const char *state_of(const scan_result *r, const uint8_t *key) {
    if (memcmp(key, r->self.public_key, DISC_KEY_BYTES) == 0) {
        return "this device";
    }
    return disc_paired_find(&r->paired, DISC_ROLE_WORKER, key) != NULL ? "paired" : "unpaired";
}

/* The options every discovery command shares, and --help: 1 taken, 0 not
 * one of them, -1 bad (printed), 2 the usage was printed. */
static int common_opt(int argc, char **argv, int *i, app_disc *d, void (*usage)(FILE *)) {
    const int r = app_disc_opt(argc, argv, i, d);
    if (r != 0) {
        return r;
    }
    if (strcmp(argv[*i], "-h") == 0 || strcmp(argv[*i], "--help") == 0) {
        usage(stdout);
        return 2;
    }
    return 0;
}

/* The cache summary device b sealed for this head: models (n >= 0), or -1
 * none for us (unpaired, an older worker, a worker without a cache), or -2
 * one that does not decode (said in why). */
static int cached_of(const scan_result *r, const disc_beacon *b, disc_cached *m, char *why,
                     size_t cap) {
    uint8_t sk[DISC_KEY_BYTES];
    lares_error err = {0};
    int n = 0;
    if (cluster_key_parse(r->self.secret_z85, sk, &err) != LARES_OK) {
        snprintf(why, cap, "%s", err.msg);
        return -2;
    }
    const lares_status st =
        disc_cached_open(b, r->self.public_key, sk, m, DISC_CACHED_MAX, &n, &err);
    sodium_memzero(sk, sizeof sk);
    if (st == LARES_ENOTFOUND) {
        return -1;
    }
    if (st != LARES_OK) {
        snprintf(why, cap, "%s", err.msg);
        return -2;
    }
    return n;
}

/* "llama-7b 1.2 GiB of 3.8 GiB (120/291 tensors)" */
static void cached_text(const disc_cached *c, char *buf, size_t cap) {
    char held[32], whole[32];
    lares_fmt_bytes((double)c->bytes, held, sizeof held);
    lares_fmt_bytes((double)c->file_bytes, whole, sizeof whole);
    snprintf(buf, cap, "%.47s %s of %s (%u/%u tensors)", c->name[0] ? c->name : "(unnamed)", held,
             whole, c->tensors_held, c->tensors);
}

int cmd_devices(int argc, char **argv) {
    app_disc d;
    app_disc_init(&d);
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const int r = common_opt(argc, argv, &i, &d, devices_usage);
        if (r != 0) {
            if (r == 1) {
                continue;
            }
            return r == 2 ? APP_OK : APP_USAGE;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else {
            app_error("devices: unknown option '%s' (lares devices --help)", argv[i]);
            return APP_USAGE;
        }
    }
    static scan_result r;
    if (!scan(&d, &r)) {
        return APP_FAIL;
    }
    json_t *arr = json_array();
    if (!json) {
        printf("%-20s %-22s %-19s %-20s %s\n", "name", "address", "fingerprint", "state",
               "version");
    }
    for (int i = 0; i < r.n; i++) {
        const disc_beacon *b = &r.dev[i].beacon;
        char addr[96], fp[DISC_FINGERPRINT_LEN + 1], z85[DISC_KEY_Z85 + 1];
        snprintf(addr, sizeof addr, "%s:%u", r.dev[i].host, b->ring_port);
        disc_fingerprint(b->key, fp);
        cluster_key_z85(b->key, z85);
        const char *state = state_of(&r, b->key);
        disc_cached m[DISC_CACHED_MAX];
        char why[LARES_ERROR_MSG_MAX] = "";
        const int nc = strcmp(state, "paired") == 0 ? cached_of(&r, b, m, why, sizeof why) : -1;
        if (json) {
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(b->name));
            json_object_set_new(o, "address", json_string(addr));
            json_object_set_new(o, "pair_port", json_integer(b->pair_port));
            json_object_set_new(o, "fingerprint", json_string(fp));
            json_object_set_new(o, "public_key", json_string(z85));
            json_object_set_new(o, "state", json_string(state));
            json_object_set_new(o, "version", json_string(b->version));
            json_object_set_new(o, "route", json_string(r.dev[i].route == DISC_ROUTE_PEERS
                                                             ? "peer"
                                                             : "lan"));
            if (nc >= 0) {
                json_t *c = json_array();
                for (int k = 0; k < nc; k++) {
                    json_t *e = json_object();
                    json_object_set_new(e, "name", json_string(m[k].name));
                    json_object_set_new(e, "bytes", json_integer((json_int_t)m[k].bytes));
                    json_object_set_new(e, "file_bytes",
                                        json_integer((json_int_t)m[k].file_bytes));
                    json_object_set_new(e, "tensors_held", json_integer(m[k].tensors_held));
                    json_object_set_new(e, "tensors", json_integer(m[k].tensors));
                    json_array_append_new(c, e);
                }
                json_object_set_new(o, "cached_models", c);
            } else if (nc == -2) {
                json_object_set_new(o, "cached_models_error", json_string(why));
            }
            json_array_append_new(arr, o);
        } else {
            printf("%-20s %-22s %-19s %-20s %s\n", b->name, addr, fp, state, b->version);
            if (nc == 0) {
                printf("    cache: empty\n");
            }
            for (int k = 0; k < nc; k++) {
                char t[160];
                cached_text(&m[k], t, sizeof t);
                printf("    cache: %s\n", t);
            }
            if (nc == -2) {
                printf("    cache: unreadable summary (%s)\n", why);
            } else if (nc == -1 && strcmp(state, "paired") == 0) {
                printf("    cache: not reported (a worker without a weight cache, an older lares, "
                       "or one with more than %d paired heads)\n",
                       DISC_SEALED_MAX);
            }
        }
    }
    /* paired devices that did not answer */
    for (int p = 0; p < r.paired.n; p++) {
        const disc_paired_entry *e = &r.paired.e[p];
        bool seen = e->role != DISC_ROLE_WORKER;
        for (int i = 0; i < r.n && !seen; i++) {
            seen = memcmp(r.dev[i].beacon.key, e->key, DISC_KEY_BYTES) == 0;
        }
        if (seen) {
            continue;
        }
        char fp[DISC_FINGERPRINT_LEN + 1];
        disc_fingerprint(e->key, fp);
        if (json) {
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(e->name));
            json_object_set_new(o, "fingerprint", json_string(fp));
            json_object_set_new(o, "state", json_string("paired, no answer"));
            json_array_append_new(arr, o);
        } else {
            printf("%-20s %-22s %-19s %-20s %s\n", e->name, "-", fp, "paired, no answer", "-");
        }
    }
    if (json) {
        json_t *root = json_object();
        json_object_set_new(root, "devices", arr);
        json_object_set_new(root, "malformed_answers", json_integer(r.bad));
        char *text = json_dumps(root, JSON_INDENT(2));
        printf("%s\n", text != NULL ? text : "{}");
        free(text);
        json_decref(root);
    } else {
        json_decref(arr);
        if (r.bad > 0) {
            fprintf(stderr, "lares: %d malformed answer(s) dropped\n", r.bad);
        }
    }
    return APP_OK;
}

typedef struct code_source {
    int32_t given; /* --code; -1 none */
    const char *worker;
} code_source;

static bool parse_code(const char *s, uint32_t *out) {
    char digits[8];
    size_t n = 0;
    for (const char *p = s; *p != '\0' && *p != '\n'; p++) {
        if (*p == ' ' || *p == '-') {
            continue; /* "123 456", "123-456" */
        }
        if (*p < '0' || *p > '9' || n == 6) {
            return false;
        }
        digits[n++] = *p;
    }
    digits[n] = '\0';
    if (n != 6) {
        return false;
    }
    *out = (uint32_t)strtoul(digits, NULL, 10);
    return true;
}

static bool ask_code(void *user, uint32_t *code) {
    const code_source *c = user;
    if (c->given >= 0) {
        *code = (uint32_t)c->given;
        return true;
    }
    /* from the terminal, or from a script's stdin (one line) */
    for (int tries = 0; tries < 3; tries++) {
        fprintf(stderr, "lares: type the 6-digit code that '%s' shows: ", c->worker);
        fflush(stderr);
        char line[64];
        if (fgets(line, sizeof line, stdin) == NULL) {
            fprintf(stderr, "\n");
            return false;
        }
        if (parse_code(line, code)) {
            return true;
        }
        fprintf(stderr, "lares: that is not 6 digits\n");
    }
    return false;
}

int cmd_pair(int argc, char **argv) {
    app_disc d;
    app_disc_init(&d);
    const char *what = NULL;
    code_source cs = {.given = -1};
    for (int i = 1; i < argc; i++) {
        const int r = common_opt(argc, argv, &i, &d, pair_usage);
        if (r != 0) {
            if (r == 1) {
                continue;
            }
            return r == 2 ? APP_OK : APP_USAGE;
        } else if (strcmp(argv[i], "--code") == 0) {
            const char *v = app_need_value(argc, argv, &i);
            uint32_t c = 0;
            if (v == NULL) {
                return APP_USAGE;
            }
            if (!parse_code(v, &c)) {
                app_error("pair: --code '%s' is not 6 digits", v);
                return APP_USAGE;
            }
            cs.given = (int32_t)c;
        } else if (argv[i][0] == '-' || what != NULL) {
            app_error("pair: unexpected '%s' (lares pair --help)", argv[i]);
            return APP_USAGE;
        } else {
            what = argv[i];
        }
    }
    if (what == NULL) {
        app_error("pair: which device? (lares pair NAME|FINGERPRINT; lares devices lists them)");
        return APP_USAGE;
    }
    static scan_result r;
    if (!scan(&d, &r)) {
        return APP_FAIL;
    }
    int hit = -1, hits = 0;
    for (int i = 0; i < r.n; i++) {
        if (disc_matches(r.dev[i].beacon.name, r.dev[i].beacon.key, what)) {
            hit = i;
            hits++;
        }
    }
    if (hits == 0) {
        app_error("pair: no device '%s' answered (%d seen; lares devices lists them; another "
                  "subnet: --peer HOST:PORT)",
                  what, r.n);
        return APP_FAIL;
    }
    if (hits > 1) {
        app_error("pair: %d devices answer to '%s': give the fingerprint (lares devices)", hits,
                  what);
        return APP_FAIL;
    }
    const disc_device *dev = &r.dev[hit];
    if (memcmp(dev->beacon.key, r.self.public_key, DISC_KEY_BYTES) == 0) {
        app_error("pair: '%s' is this device", what);
        return APP_FAIL;
    }
    char self_name[DISC_NAME_MAX + 1], fp[DISC_FINGERPRINT_LEN + 1];
    app_device_name(&d, self_name);
    disc_fingerprint(dev->beacon.key, fp);
    cs.worker = dev->beacon.name;
    fprintf(stderr, "lares: pairing with %s (%s:%u, key %s): it shows a code now\n",
            dev->beacon.name, dev->host, dev->beacon.pair_port, fp);
    const disc_pair_request req = {.host = dev->host,
                                   .pair_port = dev->beacon.pair_port,
                                   .worker_key = dev->beacon.key,
                                   .public_z85 = r.self.public_z85,
                                   .secret_z85 = r.self.secret_z85,
                                   .head_name = self_name,
                                   .timeout_ms = 10000,
                                   .ask_code = ask_code,
                                   .user = &cs};
    lares_error err = {0};
    if (disc_pair_run(&req, &err) != LARES_OK) {
        lares_error_prefix(&err, "pair %s: ", dev->beacon.name);
        return app_fail(&err);
    }
    char paired_path[1100];
    if (!app_paired_path(&d, paired_path, sizeof paired_path)) {
        return APP_FAIL;
    }
    /* read again: the store may have changed while the user typed */
    if (disc_paired_load(paired_path, &r.paired, &err) != LARES_OK ||
        disc_paired_add(&r.paired, DISC_ROLE_WORKER, dev->beacon.name, dev->beacon.key, &err) !=
            LARES_OK ||
        disc_paired_save(paired_path, &r.paired, &err) != LARES_OK) {
        return app_fail(&err);
    }
    fprintf(stderr, "lares: paired with %s (key %s): --ring auto uses it when it answers\n",
            dev->beacon.name, fp);
    return APP_OK;
}

int cmd_unpair(int argc, char **argv) {
    app_disc d;
    app_disc_init(&d);
    const char *what = NULL;
    for (int i = 1; i < argc; i++) {
        const int r = common_opt(argc, argv, &i, &d, pair_usage);
        if (r != 0) {
            if (r == 1) {
                continue;
            }
            return r == 2 ? APP_OK : APP_USAGE;
        } else if (argv[i][0] == '-' || what != NULL) {
            app_error("unpair: unexpected '%s' (lares unpair --help)", argv[i]);
            return APP_USAGE;
        } else {
            what = argv[i];
        }
    }
    if (what == NULL) {
        app_error("unpair: which device? (lares unpair NAME|FINGERPRINT)");
        return APP_USAGE;
    }
    char path[1100];
    static disc_paired p;
    lares_error err = {0};
    if (!app_paired_path(&d, path, sizeof path)) {
        return APP_FAIL;
    }
    if (disc_paired_load(path, &p, &err) != LARES_OK) {
        return app_fail(&err);
    }
    const int n = disc_paired_remove(&p, what);
    if (n == 0) {
        app_error("unpair: no paired device '%s' in %s", what, path);
        return APP_FAIL;
    }
    if (disc_paired_save(path, &p, &err) != LARES_OK) {
        return app_fail(&err);
    }
    fprintf(stderr, "lares: unpaired %s (%d entr%s removed from %s)\n", what, n,
            n == 1 ? "y" : "ies", path);
    return APP_OK;
}
