/* The shared part of zero-setup rings (issue 19): see discover.h. */
#include "discover.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void app_disc_init(app_disc *d) {
    memset(d, 0, sizeof *d);
    d->wait_ms = 1500;
    const char *port = getenv("LARES_DISCOVERY_PORT");
    if (port != NULL && atoi(port) > 0 && atoi(port) < 65536) {
        d->net.port = (uint16_t)atoi(port);
    }
    const char *lo = getenv("LARES_DISCOVERY_LOOPBACK");
    d->net.loopback = lo != NULL && strcmp(lo, "1") == 0;
    const char *dir = getenv("LARES_CONFIG_DIR");
    if (dir != NULL && dir[0] != '\0') {
        d->config_dir = dir;
    }
}

void app_disc_usage(FILE *to) {
    fputs("      --peer HOST:PORT    also ask this device's discovery port directly (another\n"
          "                          subnet, or a network without broadcast); repeatable\n"
          "      --discovery ROUTES  broadcast,multicast,peers (any of them; default all)\n"
          "      --discovery-port N  UDP port of discovery (default 9102; env\n"
          "                          LARES_DISCOVERY_PORT)\n"
          "      --discovery-loopback  use loopback interfaces too (tests on one machine;\n"
          "                          env LARES_DISCOVERY_LOOPBACK=1)\n"
          "      --config-dir DIR    keys and paired devices (default: $LARES_CONFIG_DIR,\n"
          "                          else $XDG_CONFIG_HOME/lares, else ~/.config/lares)\n"
          "      --wait MS           how long to listen for answers (default 1500)\n",
          to);
}

int app_disc_opt(int argc, char **argv, int *i, app_disc *d) {
    const char *a = argv[*i];
    const char *v = NULL;
    if (strcmp(a, "--peer") == 0) {
        if ((v = app_need_value(argc, argv, i)) == NULL) {
            return -1;
        }
        if (d->net.n_peers == DISC_MAX_PEERS || strlen(v) >= sizeof d->net.peers[0]) {
            app_error("--peer: at most %d peers of at most 255 characters", DISC_MAX_PEERS);
            return -1;
        }
        snprintf(d->net.peers[d->net.n_peers++], sizeof d->net.peers[0], "%s", v);
        return 1;
    }
    if (strcmp(a, "--discovery") == 0) {
        lares_error err = {0};
        if ((v = app_need_value(argc, argv, i)) == NULL) {
            return -1;
        }
        if (disc_routes_parse(v, &d->net.routes, &err) != LARES_OK) {
            app_error("--discovery: %s", err.msg);
            return -1;
        }
        return 1;
    }
    if (strcmp(a, "--discovery-port") == 0) {
        int32_t p = 0;
        if ((v = app_need_value(argc, argv, i)) == NULL || !app_parse_i32(a, v, 1, 65535, &p)) {
            return -1;
        }
        d->net.port = (uint16_t)p;
        return 1;
    }
    if (strcmp(a, "--discovery-loopback") == 0) {
        d->net.loopback = true;
        return 1;
    }
    if (strcmp(a, "--config-dir") == 0) {
        return (d->config_dir = app_need_value(argc, argv, i)) != NULL ? 1 : -1;
    }
    if (strcmp(a, "--name") == 0) {
        if ((v = app_need_value(argc, argv, i)) == NULL) {
            return -1;
        }
        if (!disc_name_valid(v)) {
            app_error("--name '%s': 1 to %d characters of A-Z a-z 0-9 . _ -", v, DISC_NAME_MAX);
            return -1;
        }
        d->name = v;
        return 1;
    }
    if (strcmp(a, "--wait") == 0) {
        return (v = app_need_value(argc, argv, i)) != NULL &&
                       app_parse_i32(a, v, 50, 600000, &d->wait_ms)
                   ? 1
                   : -1;
    }
    return 0;
}

/* mkdir -p with mode 0700 for what it makes */
static bool make_dirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
                return false;
            }
            *p = '/';
        }
    }
    return mkdir(buf, 0700) == 0 || errno == EEXIST;
}

bool app_config_dir(const app_disc *d, char *out, size_t cap) {
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    size_t n;
    if (d->config_dir != NULL) {
        n = (size_t)snprintf(out, cap, "%s", d->config_dir);
    } else if (xdg != NULL && xdg[0] == '/') {
        n = (size_t)snprintf(out, cap, "%s/lares", xdg);
    } else if (home != NULL && home[0] == '/') {
        n = (size_t)snprintf(out, cap, "%s/.config/lares", home);
    } else {
        app_error("no config directory: set HOME, XDG_CONFIG_HOME or LARES_CONFIG_DIR, or give "
                  "--config-dir DIR");
        return false;
    }
    if (n >= cap || n > 900) {
        app_error("config directory path too long");
        return false;
    }
    if (!make_dirs(out)) {
        app_error("cannot make the config directory %s: %s", out, strerror(errno));
        return false;
    }
    return true;
}

bool app_device_key(const app_disc *d, cluster_keypair *kp, char *path, size_t cap) {
    char dir[1024];
    if (!app_config_dir(d, dir, sizeof dir)) {
        return false;
    }
    snprintf(path, cap, "%s/device.key", dir);
    lares_error err = {0};
    if (access(path, F_OK) != 0) {
        char pub[LARES_KEY_Z85_LEN + 1];
        if (lares_keygen(path, pub, &err) != LARES_OK) {
            app_fail(&err);
            return false;
        }
        fprintf(stderr, "lares: made this device's key pair %s (public key %s)\n", path, pub);
    }
    if (cluster_key_read(path, kp, &err) != LARES_OK) {
        app_fail(&err);
        return false;
    }
    return true;
}

void app_device_name(const app_disc *d, char out[DISC_NAME_MAX + 1]) {
    if (d->name != NULL) {
        snprintf(out, DISC_NAME_MAX + 1, "%s", d->name);
        return;
    }
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
        snprintf(host, sizeof host, "lares");
    }
    host[sizeof host - 1] = '\0';
    size_t o = 0;
    for (size_t i = 0; host[i] != '\0' && o < DISC_NAME_MAX; i++) {
        const char c = host[i];
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        out[o++] = ok ? c : '-';
    }
    out[o] = '\0';
}

bool app_paired_path(const app_disc *d, char *out, size_t cap) {
    char dir[1024];
    if (!app_config_dir(d, dir, sizeof dir)) {
        return false;
    }
    snprintf(out, cap, "%s/paired", dir);
    return true;
}

app_disc *app_session_disc(void) {
    static app_disc d; /* the options of this run, chat or serve (single-threaded startup) */
    static bool made;
    if (!made) {
        app_disc_init(&d);
        made = true;
    }
    return &d;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const disc_device *)a)->beacon.name, ((const disc_device *)b)->beacon.name);
}

/* The ring's live picture for lares ring status (app_ring_state_path). */
static void ring_state(lares_session_opts *o) {
    static char path[1200];
    if (o->ring != NULL && o->ring_state_path == NULL &&
        app_ring_state_path(o->ring, path, sizeof path)) {
        o->ring_state_path = path;
    }
}

bool app_ring_auto(lares_session_opts *o) {
    if (o->ring == NULL || strcmp(o->ring, "auto") != 0) {
        ring_state(o);
        return true;
    }
    if (o->ring_insecure) {
        app_error("--ring auto: pairing is what makes a device trusted; it has no --insecure");
        return false;
    }
    app_disc *d = app_session_disc();
    cluster_keypair kp;
    char key_path[1100], paired_path[1100], dir[1024];
    disc_paired paired;
    lares_error err = {0};
    if (!app_device_key(d, &kp, key_path, sizeof key_path) ||
        !app_paired_path(d, paired_path, sizeof paired_path) ||
        !app_config_dir(d, dir, sizeof dir)) {
        return false;
    }
    if (disc_paired_load(paired_path, &paired, &err) != LARES_OK) {
        app_fail(&err);
        return false;
    }
    static disc_device found[DISC_MAX_DEVICES];
    /* the scan ends once every paired worker has answered: a ring needs no
     * more, and a warm start is then a round trip, not the whole wait */
    static uint8_t want[DISC_MAX_DEVICES][DISC_KEY_BYTES];
    int n_want = 0;
    for (int i = 0; i < paired.n; i++) {
        if (paired.e[i].role == DISC_ROLE_WORKER) {
            memcpy(want[n_want++], paired.e[i].key, DISC_KEY_BYTES);
        }
    }
    int n = 0, bad = 0;
    if (disc_scan_for(&d->net, (uint32_t)d->wait_ms, (const uint8_t(*)[DISC_KEY_BYTES])want,
                      n_want, found, DISC_MAX_DEVICES, &n, &bad, &err) != LARES_OK) {
        app_fail(&err);
        return false;
    }
    qsort(found, (size_t)n, sizeof found[0], by_name);
    json_t *devs = json_array();
    char self_name[DISC_NAME_MAX + 1];
    app_device_name(d, self_name);
    json_t *head = json_object();
    json_object_set_new(head, "name", json_string(self_name));
    json_object_set_new(head, "key", json_string(key_path));
    json_array_append_new(devs, head);
    int used = 0, unpaired = 0;
    for (int i = 0; i < n; i++) {
        const disc_beacon *b = &found[i].beacon;
        if (memcmp(b->key, kp.public_key, DISC_KEY_BYTES) == 0) {
            continue; /* this device */
        }
        const disc_paired_entry *e = disc_paired_find(&paired, DISC_ROLE_WORKER, b->key);
        if (e == NULL) {
            unpaired++; /* seen, never used */
            continue;
        }
        char addr[96], z85[DISC_KEY_Z85 + 1];
        snprintf(addr, sizeof addr, "%s:%u", found[i].host, b->ring_port);
        cluster_key_z85(b->key, z85);
        json_t *w = json_object();
        char name[DISC_NAME_MAX + 16];
        snprintf(name, sizeof name, "%s", e->name); /* the name it was paired under */
        for (size_t j = 1; j < json_array_size(devs); j++) { /* ring.json names are unique */
            if (strcmp(json_string_value(json_object_get(json_array_get(devs, j), "name")),
                       name) == 0) {
                snprintf(name, sizeof name, "%.52s-%d", e->name, i);
            }
        }
        json_object_set_new(w, "name", json_string(name));
        json_object_set_new(w, "address", json_string(addr));
        json_object_set_new(w, "public_key", json_string(z85));
        json_array_append_new(devs, w);
        used++;
    }
    fprintf(stderr,
            "lares: --ring auto: %d paired device(s) answered%s", used,
            unpaired > 0 ? "" : "\n");
    if (unpaired > 0) {
        fprintf(stderr, ", %d unpaired seen and not used (lares pair NAME)\n", unpaired);
    }
    if (used == 0) {
        json_decref(devs);
        fprintf(stderr, "lares: warning: --ring auto: no paired device answered: this device "
                        "runs alone\n");
        o->ring = NULL;
        return true;
    }
    json_t *root = json_object();
    json_object_set_new(root, "devices", devs);
    json_object_set_new(root, "windows", json_string("auto"));
    static char ring_path[1100];
    char tmp[1120];
    snprintf(ring_path, sizeof ring_path, "%s/ring-auto.json", dir);
    snprintf(tmp, sizeof tmp, "%s.new", ring_path);
    const int rc = json_dump_file(root, tmp, JSON_INDENT(2));
    json_decref(root);
    if (rc != 0 || rename(tmp, ring_path) != 0) {
        app_error("--ring auto: cannot write %s: %s", ring_path, strerror(errno));
        unlink(tmp);
        return false;
    }
    o->ring = ring_path;
    ring_state(o);
    return true;
}
