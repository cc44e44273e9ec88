/*
 * ring.json: the devices of a ring in ring order, and how the layers are cut
 * (docs/ring.md has the format with an example). Unknown keys are errors, so
 * a typo never silently becomes a default.
 */
#include "cluster/cluster.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#define RING_JSON_MAX_BYTES (1u << 20)

typedef struct parser {
    const char *name;
    const char *base_dir;
    lares_error *err;
} parser;

static bool only_keys(parser *ps, json_t *obj, const char *where, const char *const *keys,
                      size_t n_keys) {
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        bool known = false;
        for (size_t i = 0; i < n_keys && !known; i++) {
            known = strcmp(k, keys[i]) == 0;
        }
        if (!known) {
            lares_fail(ps->err, LARES_EFORMAT, "%s: unknown key '%s' in %s", ps->name, k, where);
            return false;
        }
    }
    return true;
}

/* an integer member in [lo, hi]; absent leaves *out */
static bool get_int(parser *ps, json_t *obj, const char *key, const char *where, int64_t lo,
                    int64_t hi, int32_t *out) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        lares_fail(ps->err, LARES_EFORMAT,
                   "%s: %s: \"%s\" must be a whole number from %" PRId64 " to %" PRId64, ps->name,
                   where, key, lo, hi);
        return false;
    }
    *out = (int32_t)json_integer_value(v);
    return true;
}

/* a number member in [lo, hi]; absent leaves *out */
static bool get_num(parser *ps, json_t *obj, const char *key, const char *where, double lo,
                    double hi, double *out) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return true;
    }
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi)) {
        lares_fail(ps->err, LARES_EFORMAT, "%s: %s: \"%s\" must be a number from %g to %g",
                   ps->name, where, key, lo, hi);
        return false;
    }
    *out = json_number_value(v);
    return true;
}

/* true or false; absent leaves *out */
static bool get_bool(parser *ps, json_t *obj, const char *key, const char *where, int *out) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return true;
    }
    if (!json_is_boolean(v)) {
        lares_fail(ps->err, LARES_EFORMAT, "%s: %s: \"%s\" must be true or false", ps->name,
                   where, key);
        return false;
    }
    *out = json_is_true(v) ? 1 : 0;
    return true;
}

/* "1.5GiB", "512MB", "4096": a number, then a unit of bytes (powers of 1024
 * with an i, of 1000 without); false on anything else */
static bool parse_size(const char *s, uint64_t *out) {
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},         {"B", 1},        {"KiB", 1024.0},        {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3},
                 {"MB", 1e6},      {"GB", 1e9},     {"TB", 1e12}};
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    if (end == s || errno != 0 || !(v >= 0) || (s[0] < '0' || s[0] > '9')) {
        return false;
    }
    while (*end == ' ') {
        end++;
    }
    for (size_t i = 0; i < LARES_ARRAY_LEN(units); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            const double b = v * units[i].mult;
            if (!(b < 1.8e19)) {
                return false;
            }
            *out = (uint64_t)llround(b);
            return true;
        }
    }
    return false;
}

/* a size: bytes, or a string with a unit ("512MiB", "2GB"); absent leaves *out */
static bool get_size(parser *ps, json_t *obj, const char *key, const char *where,
                     uint64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return true;
    }
    if (json_is_integer(v) && json_integer_value(v) > 0) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (json_is_string(v) && parse_size(json_string_value(v), out) && *out > 0) {
        return true;
    }
    lares_fail(ps->err, LARES_EFORMAT,
               "%s: %s: \"%s\" must be a size: bytes, or a number with KiB, MiB, GiB (or "
               "KB, MB, GB)",
               ps->name, where, key);
    return false;
}

/* a string member into out; absent leaves out */
static bool get_str(parser *ps, json_t *obj, const char *key, const char *where, char *out,
                    size_t cap) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return true;
    }
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= cap ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        lares_fail(ps->err, LARES_EFORMAT,
                   "%s: %s: \"%s\" must be a non-empty string of at most "
                   "%zu bytes",
                   ps->name, where, key, cap - 1);
        return false;
    }
    snprintf(out, cap, "%s", json_string_value(v));
    return true;
}

/* a path on this machine, taken relative to ring.json's folder */
static bool get_path(parser *ps, json_t *obj, const char *key, const char *where, char *out,
                     size_t cap) {
    char raw[CLUSTER_MAX_PATH + 1] = "";
    if (!get_str(ps, obj, key, where, raw, sizeof raw)) {
        return false;
    }
    if (raw[0] == '\0') {
        return true;
    }
    int n = raw[0] == '/' || ps->base_dir == NULL || ps->base_dir[0] == '\0'
                ? snprintf(out, cap, "%s", raw)
                : snprintf(out, cap, "%s/%s", ps->base_dir, raw);
    if (n < 0 || (size_t)n >= cap) {
        lares_fail(ps->err, LARES_EFORMAT, "%s: %s: \"%s\" is too long", ps->name, where, key);
        return false;
    }
    return true;
}

static bool parse_device(parser *ps, json_t *d, int32_t idx, cluster_ring_device *out,
                         char *head_key_path) {
    static const char *const keys[] = {"name",    "head", "address", "public_key",    "key",
                                       "model",   "threads", "w",    "n", "link_delay_ms",
                                       "memory"};
    char where[48];
    snprintf(where, sizeof where, "device %d", idx);
    if (!json_is_object(d)) {
        lares_fail(ps->err, LARES_EFORMAT, "%s: %s is not an object", ps->name, where);
        return false;
    }
    if (!only_keys(ps, d, where, keys, LARES_ARRAY_LEN(keys))) {
        return false;
    }
    memset(out, 0, sizeof *out);
    out->w = out->n = -1;
    snprintf(out->name, sizeof out->name, idx == 0 ? "head" : "worker%d", idx);
    json_t *head = json_object_get(d, "head");
    if (head != NULL && !json_is_boolean(head)) {
        lares_fail(ps->err, LARES_EFORMAT, "%s: %s: \"head\" must be true or false", ps->name,
                   where);
        return false;
    }
    const bool is_head = head != NULL ? json_is_true(head) : idx == 0;
    if (is_head != (idx == 0)) {
        lares_fail(ps->err, LARES_EFORMAT,
                   "%s: %s: the head must be the first device of the ring (and only the first)",
                   ps->name, where);
        return false;
    }
    if (!get_str(ps, d, "name", where, out->name, sizeof out->name) ||
        !get_str(ps, d, "address", where, out->address, sizeof out->address) ||
        !get_str(ps, d, "model", where, out->model_path, sizeof out->model_path) ||
        !get_int(ps, d, "threads", where, 1, 4096, &out->n_threads) ||
        !get_int(ps, d, "w", where, 0, INT32_MAX, &out->w) ||
        !get_int(ps, d, "n", where, 0, INT32_MAX, &out->n) ||
        !get_int(ps, d, "link_delay_ms", where, 0, CLUSTER_MAX_LINK_DELAY_MS,
                 &out->link_delay_ms) ||
        !get_size(ps, d, "memory", where, &out->memory_bytes)) {
        return false;
    }
    if (is_head) {
        if (out->address[0] != '\0' || json_object_get(d, "public_key") != NULL) {
            lares_fail(ps->err, LARES_EFORMAT,
                       "%s: the head (device 0) takes no \"address\" or \"public_key\": it "
                       "connects to the workers; give its key pair as \"key\"",
                       ps->name);
            return false;
        }
        return get_path(ps, d, "key", where, head_key_path, CLUSTER_MAX_PATH + 1);
    }
    if (json_object_get(d, "key") != NULL) {
        lares_fail(ps->err, LARES_EFORMAT,
                   "%s: %s: a worker's \"key\" stays on the worker; give its \"public_key\" (the "
                   "key itself or its .pub file)",
                   ps->name, where);
        return false;
    }
    if (out->address[0] == '\0') {
        lares_fail(ps->err, LARES_EFORMAT, "%s: %s (%s) has no \"address\" (host:port)", ps->name,
                   where, out->name);
        return false;
    }
    char pk[CLUSTER_MAX_PATH + 1] = "";
    if (!get_str(ps, d, "public_key", where, pk, sizeof pk)) {
        return false;
    }
    if (pk[0] != '\0') {
        /* the key itself, or a file holding it (relative to ring.json) */
        char path[CLUSTER_MAX_PATH + 1];
        if (!get_path(ps, d, "public_key", where, path, sizeof path)) {
            return false;
        }
        cluster_allow one = {0};
        lares_error kerr;
        lares_status st = strlen(pk) == CLUSTER_KEY_Z85 ? cluster_allow_add(&one, pk, &kerr)
                                                        : cluster_allow_add(&one, path, &kerr);
        if (st != LARES_OK || one.n != 1) {
            lares_fail(ps->err, LARES_EFORMAT, "%s: %s (%s): public_key: %s", ps->name, where,
                       out->name, st != LARES_OK ? kerr.msg : "the file holds several keys");
            return false;
        }
        memcpy(out->key, one.keys[0], CLUSTER_KEY_BYTES);
        out->has_key = true;
    }
    return true;
}

/* "rebalance_opts": the thresholds of re-balancing (cluster_monitor_opts) */
static bool parse_monitor(parser *ps, json_t *o, cluster_monitor_opts *m) {
    static const char *const keys[] = {"threshold",    "warmup_tokens", "hold_tokens",
                                       "cooldown_tokens", "alpha",      "min_delta_ms",
                                       "min_gain"};
    if (o == NULL) {
        return true;
    }
    if (!json_is_object(o)) {
        lares_fail(ps->err, LARES_EFORMAT, "%s: \"rebalance_opts\" is not an object", ps->name);
        return false;
    }
    const char *w = "rebalance_opts";
    if (!only_keys(ps, o, w, keys, LARES_ARRAY_LEN(keys)) ||
        !get_num(ps, o, "threshold", w, 0.01, 10, &m->threshold) ||
        !get_int(ps, o, "warmup_tokens", w, 0, 100000, &m->warmup_tokens) ||
        !get_int(ps, o, "hold_tokens", w, 1, 100000, &m->hold_tokens) ||
        !get_int(ps, o, "cooldown_tokens", w, 0, 1000000, &m->cooldown_tokens) ||
        !get_num(ps, o, "alpha", w, 0.001, 1, &m->alpha) ||
        !get_num(ps, o, "min_delta_ms", w, 0, 1e6, &m->min_delta_ms) ||
        !get_num(ps, o, "min_gain", w, 0, 9.99, &m->min_gain)) {
        return false;
    }
    return true;
}

lares_status cluster_ring_parse(const char *json, size_t len, const char *name,
                                const char *base_dir, cluster_ring_config *out, lares_error *err) {
    static const char *const keys[] = {"devices",           "rounds",       "windows",
                                       "activations",       "heartbeat_ms", "timeout_ms",
                                       "connect_timeout_ms", "placement",   "profile_ms",
                                       "rebalance",         "failover",     "rebalance_opts",
                                       "rebuild",           "kv_mirror"};
    parser ps = {.name = name, .base_dir = base_dir, .err = err};
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", name);
    out->heartbeat_ms = CLUSTER_DEFAULT_HEARTBEAT_MS;
    out->timeout_ms = CLUSTER_DEFAULT_TIMEOUT_MS;
    out->connect_timeout_ms = CLUSTER_DEFAULT_CONNECT_MS;
    out->act_dtype = CLUSTER_DTYPE_F32;
    out->profile_ms = CLUSTER_DEFAULT_PROFILE_MS;
    out->rebalance = -1;
    out->failover = -1;
    out->kv_mirror = -1;
    out->monitor = cluster_monitor_opts_default();
    if (len > RING_JSON_MAX_BYTES) {
        return lares_fail(err, LARES_EFORMAT, "%s: %zu bytes is too large for a ring description",
                          name, len);
    }
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        return lares_fail(err, LARES_EFORMAT, "%s:%d:%d: %s", name, jerr.line, jerr.column,
                          jerr.text);
    }
    lares_status st = LARES_EFORMAT;
    if (!json_is_object(root)) {
        lares_fail(err, LARES_EFORMAT, "%s: the top level is not an object", name);
        goto done;
    }
    if (!only_keys(&ps, root, "the ring", keys, LARES_ARRAY_LEN(keys)) ||
        !get_int(&ps, root, "heartbeat_ms", "the ring", 10, 60000, &out->heartbeat_ms) ||
        !get_int(&ps, root, "timeout_ms", "the ring", 20, 600000, &out->timeout_ms) ||
        !get_int(&ps, root, "connect_timeout_ms", "the ring", 10, 600000,
                 &out->connect_timeout_ms)) {
        goto done;
    }
    if (out->timeout_ms <= out->heartbeat_ms) {
        lares_fail(err, LARES_EFORMAT, "%s: timeout_ms (%d) must exceed heartbeat_ms (%d)", name,
                   out->timeout_ms, out->heartbeat_ms);
        goto done;
    }
    if (!get_int(&ps, root, "profile_ms", "the ring", 0, CLUSTER_MAX_PROFILE_MS,
                 &out->profile_ms) ||
        !get_bool(&ps, root, "rebalance", "the ring", &out->rebalance) ||
        !get_bool(&ps, root, "failover", "the ring", &out->failover) ||
        !get_bool(&ps, root, "kv_mirror", "the ring", &out->kv_mirror) ||
        !get_str(&ps, root, "rebuild", "the ring", out->rebuild, sizeof out->rebuild) ||
        !get_str(&ps, root, "placement", "the ring", out->placement, sizeof out->placement) ||
        !parse_monitor(&ps, json_object_get(root, "rebalance_opts"), &out->monitor)) {
        goto done;
    }
    if (out->rebuild[0] != '\0' && strcmp(out->rebuild, "exact") != 0 &&
        strcmp(out->rebuild, "batched") != 0) {
        lares_fail(err, LARES_EFORMAT, "%s: \"rebuild\" is \"exact\" or \"batched\"", name);
        goto done;
    }
    if (out->placement[0] != '\0' && strcmp(out->placement, "halda") != 0 &&
        strcmp(out->placement, "even") != 0 && strcmp(out->placement, "memory") != 0 &&
        strcmp(out->placement, "single") != 0) {
        lares_fail(err, LARES_EFORMAT,
                   "%s: \"placement\" is \"halda\", \"even\", \"memory\" or \"single\"", name);
        goto done;
    }
    json_t *rounds = json_object_get(root, "rounds");
    if (rounds != NULL &&
        !(json_is_string(rounds) && strcmp(json_string_value(rounds), "auto") == 0)) {
        if (!get_int(&ps, root, "rounds", "the ring", 1, 1 << 20, &out->rounds)) {
            lares_error_prefix(err, "(or \"auto\") ");
            goto done;
        }
    }
    json_t *win = json_object_get(root, "windows");
    if (win != NULL) {
        if (!json_is_string(win) || (strcmp(json_string_value(win), "auto") != 0 &&
                                     strcmp(json_string_value(win), "explicit") != 0)) {
            lares_fail(err, LARES_EFORMAT, "%s: \"windows\" is \"auto\" or \"explicit\"", name);
            goto done;
        }
        out->auto_windows = strcmp(json_string_value(win), "auto") == 0;
    }
    json_t *act = json_object_get(root, "activations");
    if (act != NULL) {
        const char *a = json_is_string(act) ? json_string_value(act) : "";
        if (strcmp(a, "f32") == 0) {
            out->act_dtype = CLUSTER_DTYPE_F32;
        } else if (strcmp(a, "f16") == 0) {
            out->act_dtype = CLUSTER_DTYPE_F16;
        } else {
            lares_fail(err, LARES_EFORMAT, "%s: \"activations\" is \"f32\" or \"f16\"", name);
            goto done;
        }
    }
    json_t *devs = json_object_get(root, "devices");
    if (!json_is_array(devs) || json_array_size(devs) < 1 ||
        json_array_size(devs) > CLUSTER_MAX_DEVICES) {
        lares_fail(err, LARES_EFORMAT,
                   "%s: \"devices\" must list 1 to %d devices in ring order, the head first", name,
                   CLUSTER_MAX_DEVICES);
        goto done;
    }
    out->n_dev = (int32_t)json_array_size(devs);
    int32_t n_explicit = 0;
    for (int32_t i = 0; i < out->n_dev; i++) {
        if (!parse_device(&ps, json_array_get(devs, (size_t)i), i, &out->dev[i],
                          out->head_key_path)) {
            goto done;
        }
        n_explicit += out->dev[i].w >= 0;
        for (int32_t j = 1; j < i; j++) {
            if (strcmp(out->dev[i].address, out->dev[j].address) == 0) {
                lares_fail(err, LARES_EFORMAT, "%s: devices %d and %d share the address %s", name,
                           j, i, out->dev[i].address);
                goto done;
            }
        }
    }
    if (win == NULL) {
        out->auto_windows = n_explicit == 0;
    }
    if (!out->auto_windows && n_explicit != out->n_dev) {
        lares_fail(err, LARES_EFORMAT,
                   "%s: %d of %d devices give a window \"w\": give it for every device, or "
                   "none (\"windows\": \"auto\")",
                   name, n_explicit, out->n_dev);
        goto done;
    }
    st = LARES_OK;
done:
    json_decref(root);
    return st;
}

lares_status cluster_ring_load(const char *path, cluster_ring_config *out, lares_error *err) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return lares_fail(err, LARES_ENOTFOUND, "%s: %s", path, strerror(errno));
    }
    char *buf = lares_alloc(RING_JSON_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    bool bad;
    size_t len = lares_fread(buf, RING_JSON_MAX_BYTES + 1, f, &bad);
    fclose(f);
    lares_status st;
    if (bad) {
        st = lares_fail(err, LARES_EIO, "%s: read failed", path);
    } else {
        char dir[CLUSTER_MAX_PATH + 1];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash != NULL) {
            *slash = '\0';
        } else {
            dir[0] = '\0';
        }
        st = cluster_ring_parse(buf, len, path, dir, out, err);
    }
    lares_free(buf);
    return st;
}

lares_status cluster_ring_plan(const cluster_ring_config *c, int32_t n_layer, cluster_plan *out,
                               lares_error *err) {
    lares_status st;
    if (c->auto_windows) {
        /* issue 7: the planner fills "auto" windows; until then an even split */
        st = cluster_plan_even(c->n_dev, n_layer, c->rounds, out, err);
    } else {
        memset(out, 0, sizeof *out);
        out->n_layer = n_layer;
        out->n_dev = c->n_dev;
        for (int32_t d = 0; d < c->n_dev; d++) {
            out->w[d] = c->dev[d].w;
            out->n[d] = c->dev[d].n < 0 ? 0 : c->dev[d].n;
        }
        st = cluster_plan_check(out, err);
        if (st == LARES_OK && c->rounds > 0 && cluster_plan_rounds(out) != c->rounds) {
            st = lares_fail(err, LARES_EINVAL,
                            "the windows add up to %d layers per round, which takes %d rounds "
                            "through %d layers, not the %d \"rounds\" asked for",
                            cluster_plan_width(out), cluster_plan_rounds(out), n_layer, c->rounds);
        }
    }
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s: ", c->path);
    }
    return st;
}
