/*
 * Devices as JSON: what `lares profile --json` writes and `lares plan
 * --devices` reads (docs/scheduling-impl.md has the schema). Reading is
 * strict: a misspelt field would otherwise silently become "unknown" and the
 * plan would be made for a device that does not exist, so unknown fields,
 * wrong types, negative sizes and missing required fields are errors that
 * name the path ("devices[2].memory.available").
 */
#include "sched/sched.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

typedef struct jpath {
    const char *what; /* the file, for messages */
    char at[160];     /* "devices[2].memory" */
} jpath;

static lares_status bad(const jpath *p, const char *key, lares_error *err, const char *why) {
    return lares_fail(err, LARES_EFORMAT, "%s: %s%s%s: %s", p->what, p->at,
                      p->at[0] && key ? "." : "", key ? key : "", why);
}

static void sub(jpath *child, const jpath *parent, const char *key) {
    child->what = parent->what;
    size_t n = strlen(parent->at), k = strlen(key);
    memcpy(child->at, parent->at, n + 1);
    if (n > 0 && n + 1 < sizeof child->at) {
        child->at[n++] = '.';
    }
    if (n + k >= sizeof child->at) {
        k = sizeof child->at - 1 - n; /* a path this deep is cut in messages */
    }
    memcpy(child->at + n, key, k);
    child->at[n + k] = '\0';
}

static lares_status only_keys(const jpath *p, json_t *obj, const char *const *keys,
                              lares_error *err) {
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        bool ok = false;
        for (size_t i = 0; keys[i] != NULL && !ok; i++) {
            ok = strcmp(keys[i], k) == 0;
        }
        if (!ok) {
            char why[200];
            snprintf(why, sizeof why, "unknown field (known: ");
            for (size_t i = 0; keys[i] != NULL; i++) {
                size_t n = strlen(why);
                snprintf(why + n, sizeof why - n, "%s%s", i ? ", " : "", keys[i]);
            }
            size_t n = strlen(why);
            snprintf(why + n, sizeof why - n, ")");
            return bad(p, k, err, why);
        }
    }
    return LARES_OK;
}

static lares_status need_object(const jpath *p, json_t *parent, const char *key, bool required,
                                json_t **out, lares_error *err) {
    json_t *v = json_object_get(parent, key);
    *out = NULL;
    if (v == NULL || (json_is_null(v) && !required)) {
        return required ? bad(p, key, err, "missing (required)") : LARES_OK;
    }
    if (!json_is_object(v)) {
        return bad(p, key, err, "must be an object");
    }
    *out = v;
    return LARES_OK;
}

static lares_status get_string(const jpath *p, json_t *obj, const char *key, bool required,
                               char *out, size_t cap, lares_error *err) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return required ? bad(p, key, err, "missing (required)") : LARES_OK;
    }
    if (!json_is_string(v)) {
        return bad(p, key, err, "must be a string");
    }
    if (json_string_length(v) >= cap) {
        return bad(p, key, err, "is too long");
    }
    snprintf(out, cap, "%s", json_string_value(v));
    return LARES_OK;
}

static lares_status get_bool(const jpath *p, json_t *obj, const char *key, bool *out,
                             lares_error *err) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return LARES_OK;
    }
    if (!json_is_boolean(v)) {
        return bad(p, key, err, "must be true or false");
    }
    *out = json_is_true(v);
    return LARES_OK;
}

/* a non-negative number; *present tells whether it was there */
static lares_status get_number(const jpath *p, json_t *obj, const char *key, bool required,
                               double *out, bool *present, lares_error *err) {
    json_t *v = json_object_get(obj, key);
    if (present) {
        *present = v != NULL;
    }
    if (v == NULL) {
        return required ? bad(p, key, err, "missing (required)") : LARES_OK;
    }
    if (!json_is_number(v)) {
        return bad(p, key, err, "must be a number");
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < 0) {
        char why[64];
        snprintf(why, sizeof why, "%g is negative or not finite", d);
        return bad(p, key, err, why);
    }
    *out = d;
    return LARES_OK;
}

static lares_status get_int(const jpath *p, json_t *obj, const char *key, bool required, int32_t lo,
                            int32_t *out, lares_error *err) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return required ? bad(p, key, err, "missing (required)") : LARES_OK;
    }
    if (!json_is_integer(v)) {
        return bad(p, key, err, "must be a whole number");
    }
    json_int_t i = json_integer_value(v);
    if (i < lo || i > 1 << 20) {
        char why[64];
        snprintf(why, sizeof why, "%lld is out of range (%d..%d)", (long long)i, lo, 1 << 20);
        return bad(p, key, err, why);
    }
    *out = (int32_t)i;
    return LARES_OK;
}

/* bytes: a number or a string with a unit ("2.4GiB") */
static lares_status get_size(const jpath *p, json_t *obj, const char *key, bool required,
                             uint64_t *out, bool *present, lares_error *err) {
    json_t *v = json_object_get(obj, key);
    if (present) {
        *present = v != NULL;
    }
    if (v == NULL) {
        return required ? bad(p, key, err, "missing (required)") : LARES_OK;
    }
    if (json_is_string(v)) {
        if (!sched_parse_size(json_string_value(v), out)) {
            return bad(p, key, err, "is not a size (examples: 2.4GiB, 512MB, 1073741824)");
        }
        return LARES_OK;
    }
    double d;
    lares_status st = get_number(p, obj, key, true, &d, NULL, err);
    if (st != LARES_OK) {
        return bad(p, key, err, "must be a non-negative size (bytes, or a string like \"2GiB\")");
    }
    if (d >= 1.8e19) {
        return bad(p, key, err, "is too large");
    }
    *out = (uint64_t)d;
    return LARES_OK;
}

/* bytes per second: a number or "0.72GB/s", "100Mbit/s" */
static lares_status get_rate(const jpath *p, json_t *obj, const char *key, bool required,
                             double *out, lares_error *err) {
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        return required ? bad(p, key, err, "missing (required)") : LARES_OK;
    }
    double r;
    if (json_is_string(v)) {
        if (!sched_parse_rate(json_string_value(v), &r)) {
            return bad(p, key, err, "is not a rate (examples: 3.2GB/s, 100Mbit/s, 2e9)");
        }
    } else if (get_number(p, obj, key, true, &r, NULL, err) != LARES_OK) {
        return bad(p, key, err, "must be a non-negative rate (bytes/s, or \"3GB/s\")");
    }
    if (!(r > 0)) {
        return bad(p, key, err, "must be positive");
    }
    *out = r;
    return LARES_OK;
}

static lares_status get_rates(const jpath *p, json_t *obj, const char *key, bool required,
                              sched_rates *out, lares_error *err) {
    json_t *v;
    lares_status st = need_object(p, obj, key, required, &v, err);
    if (st != LARES_OK || v == NULL) {
        return st;
    }
    jpath q;
    sub(&q, p, key);
    const char *k;
    json_t *x;
    size_t count = 0;
    json_object_foreach(v, k, x) {
        double r;
        if (!json_is_number(x) || !((r = json_number_value(x)) > 0) || !isfinite(r)) {
            return bad(&q, k, err, "must be a positive FLOP/s number");
        }
        if (strcmp(k, "*") == 0) {
            out->other = r;
        } else {
            int t = gguf_type_from_name(k);
            if (t < 0) {
                return bad(&q, k, err, "is not a tensor type (q4_k, f16, ..., or \"*\")");
            }
            out->by_type[t] = r;
        }
        count++;
    }
    if (count == 0 && required) {
        return bad(p, key, err, "has no figures");
    }
    return LARES_OK;
}

static lares_status get_hop(const jpath *p, json_t *obj, sched_hop *out, lares_error *err) {
    static const char *const keys[] = {"latency_ms", "bandwidth", NULL};
    double ms;
    lares_status st;
    if ((st = only_keys(p, obj, keys, err)) ||
        (st = get_number(p, obj, "latency_ms", true, &ms, NULL, err)) ||
        (st = get_rate(p, obj, "bandwidth", true, &out->bandwidth_Bps, err))) {
        return st;
    }
    out->latency_s = ms / 1e3;
    return LARES_OK;
}

/* "calibration": how the CPU rates were fitted to real windows (calibrate.c) */
static lares_status parse_calibration(const jpath *p, json_t *o, struct sched_calibration *c,
                                      lares_error *err) {
    static const char *const keys[] = {"model", "model_bytes",        "scale",    "decode_layer_ms",
                                       "prompt_row_layer_ms", "prompt_rows", "streamed", NULL};
    jpath q;
    sub(&q, p, "calibration");
    double ms = 0, row_ms = 0;
    lares_status st;
    if ((st = only_keys(&q, o, keys, err)) ||
        (st = get_string(&q, o, "model", true, c->model, sizeof c->model, err)) ||
        (st = get_size(&q, o, "model_bytes", false, &c->model_bytes, NULL, err)) ||
        (st = get_number(&q, o, "scale", true, &c->scale, NULL, err)) ||
        (st = get_number(&q, o, "decode_layer_ms", false, &ms, NULL, err)) ||
        (st = get_number(&q, o, "prompt_row_layer_ms", false, &row_ms, NULL, err)) ||
        (st = get_int(&q, o, "prompt_rows", false, 0, &c->prompt_rows, err)) ||
        (st = get_bool(&q, o, "streamed", &c->streamed, err))) {
        return st;
    }
    if (!(c->scale > 0)) {
        return bad(&q, "scale", err, "must be above 0");
    }
    c->decode_layer_s = ms / 1e3;
    c->prompt_row_layer_s = row_ms / 1e3;
    return LARES_OK;
}

static lares_status parse_device(const jpath *p, json_t *o, sched_device *d, lares_error *err) {
    static const char *const top[] = {"name",      "os",     "head", "cpu",         "memory",
                                      "disk",      "gpu",    "net",  "fingerprint", "lares_version",
                                      "measure_s", "cached", "calibration", NULL};
    static const char *const cpu_keys[] = {"cores",  "threads", "quota_cores", "quota_period_ms",
                                           "model",  "isa",     "flops",       "flops_mem",
                                           "mem_bw", "flags",   NULL};
    static const char *const mem_keys[] = {"total", "available", "swap_available", "cgroup_limit",
                                           NULL};
    static const char *const disk_keys[] = {"seq_read",     "rand_read",  "stream_read",
                                            "stream_cpu",   "direct_read", "cached_share",
                                            "free",         "path",        "direct",
                                            "test_bytes",   "note",        NULL};
    static const char *const gpu_keys[] = {"backend", "name",   "vram_available",
                                           "flops",   "mem_bw", NULL};
    lares_status st;
    if (!json_is_object(o)) {
        return bad(p, NULL, err, "must be an object");
    }
    sched_device_init(d, "");
    char os[16] = "", s[32];
    jpath q;
    json_t *cpu, *mem, *disk, *gpu, *net;
    if ((st = only_keys(p, o, top, err)) ||
        (st = get_string(p, o, "name", true, d->name, sizeof d->name, err)) ||
        (st = get_string(p, o, "os", true, os, sizeof os, err))) {
        return st;
    }
    if (d->name[0] == '\0') {
        return bad(p, "name", err, "is empty");
    }
    int osi = -1;
    for (int i = 0; i < SCHED_OS_COUNT; i++) {
        if (strcmp(os, sched_os_name((sched_os)i)) == 0) {
            osi = i;
        }
    }
    if (osi < 0) {
        return bad(p, "os", err, "must be linux, android or macos");
    }
    d->os = (sched_os)osi;
    if ((st = get_bool(p, o, "head", &d->head, err)) ||
        (st = need_object(p, o, "cpu", true, &cpu, err)) ||
        (st = need_object(p, o, "memory", true, &mem, err)) ||
        (st = need_object(p, o, "disk", true, &disk, err)) ||
        (st = need_object(p, o, "gpu", false, &gpu, err)) ||
        (st = need_object(p, o, "net", false, &net, err))) {
        return st;
    }
    sub(&q, p, "cpu");
    double quota = 0, period_ms = 0;
    if ((st = only_keys(&q, cpu, cpu_keys, err)) ||
        (st = get_int(&q, cpu, "cores", true, 1, &d->cores, err)) ||
        (st = get_int(&q, cpu, "threads", false, 1, &d->threads, err)) ||
        (st = get_number(&q, cpu, "quota_cores", false, &quota, NULL, err)) ||
        (st = get_number(&q, cpu, "quota_period_ms", false, &period_ms, NULL, err)) ||
        (st = get_string(&q, cpu, "model", false, d->cpu_model, sizeof d->cpu_model, err)) ||
        (st = get_string(&q, cpu, "isa", false, d->isa, sizeof d->isa, err)) ||
        (st = get_string(&q, cpu, "flags", false, d->cpu_flags, sizeof d->cpu_flags, err)) ||
        (st = get_rates(&q, cpu, "flops", true, &d->cpu_flops, err)) ||
        (st = get_rates(&q, cpu, "flops_mem", false, &d->cpu_flops_mem, err)) ||
        (st = get_rate(&q, cpu, "mem_bw", true, &d->mem_bw_Bps, err))) {
        return st;
    }
    d->cpu_quota = quota;
    d->cpu_quota_period_s = period_ms / 1e3;
    sub(&q, p, "memory");
    uint64_t cg = 0;
    if ((st = only_keys(&q, mem, mem_keys, err)) ||
        (st = get_size(&q, mem, "total", false, &d->ram_total_bytes, NULL, err)) ||
        (st = get_size(&q, mem, "available", true, &d->ram_avail_bytes, NULL, err)) ||
        (st = get_size(&q, mem, "swap_available", false, &d->swap_avail_bytes, NULL, err)) ||
        (st = get_size(&q, mem, "cgroup_limit", false, &cg, NULL, err))) {
        return st;
    }
    sub(&q, p, "disk");
    uint64_t free_bytes = 0, test_bytes = 0;
    bool has_free = false, direct = false;
    char note[256];
    if ((st = only_keys(&q, disk, disk_keys, err)) ||
        (st = get_rate(&q, disk, "seq_read", true, &d->disk_seq_Bps, err)) ||
        (st = get_rate(&q, disk, "rand_read", d->os == SCHED_OS_MACOS, &d->disk_rand_Bps, err)) ||
        (st = get_rate(&q, disk, "stream_read", false, &d->disk_stream_Bps, err)) ||
        (st = get_rate(&q, disk, "stream_cpu", false, &d->disk_stream_cpu_Bps, err)) ||
        (st = get_rate(&q, disk, "direct_read", false, &d->disk_direct_Bps, err)) ||
        (st = get_number(&q, disk, "cached_share", false, &d->disk_cached_share, NULL, err)) ||
        (st = get_string(&q, disk, "note", false, note, sizeof note, err)) ||
        (st = get_size(&q, disk, "free", false, &free_bytes, &has_free, err)) ||
        (st = get_string(&q, disk, "path", false, d->disk_path, sizeof d->disk_path, err)) ||
        (st = get_bool(&q, disk, "direct", &direct, err)) ||
        (st = get_size(&q, disk, "test_bytes", false, &test_bytes, NULL, err))) {
        return st;
    }
    if (d->disk_cached_share > 1) {
        return bad(&q, "cached_share", err, "must be a share from 0 to 1");
    }
    if (has_free) {
        if (free_bytes > INT64_MAX) {
            return bad(&q, "free", err, "is too large");
        }
        d->disk_free_bytes = (int64_t)free_bytes;
    }
    if (gpu != NULL) {
        sub(&q, p, "gpu");
        if ((st = only_keys(&q, gpu, gpu_keys, err)) ||
            (st = get_string(&q, gpu, "backend", true, s, sizeof s, err)) ||
            (st = get_string(&q, gpu, "name", false, d->gpu_name, sizeof d->gpu_name, err)) ||
            (st = get_size(&q, gpu, "vram_available", true, &d->vram_avail_bytes, NULL, err)) ||
            (st = get_rates(&q, gpu, "flops", true, &d->gpu_flops, err)) ||
            (st = get_rate(&q, gpu, "mem_bw", true, &d->gpu_mem_bw_Bps, err))) {
            return st;
        }
        if (strcmp(s, "cuda") == 0) {
            d->gpu = SCHED_GPU_CUDA;
        } else if (strcmp(s, "metal") == 0) {
            d->gpu = SCHED_GPU_METAL;
        } else {
            return bad(&q, "backend", err, "must be cuda or metal");
        }
    }
    if (net != NULL) {
        sub(&q, p, "net");
        if ((st = get_hop(&q, net, &d->net_out, err)) != LARES_OK) {
            return st;
        }
    }
    json_t *cal = NULL;
    if ((st = need_object(p, o, "calibration", false, &cal, err)) != LARES_OK ||
        (cal != NULL && (st = parse_calibration(p, cal, &d->cal, err)) != LARES_OK)) {
        return st;
    }
    /* info fields of a profile: checked for type, otherwise not used here */
    char info[64];
    double x;
    bool b;
    if ((st = get_string(p, o, "fingerprint", false, info, sizeof info, err)) ||
        (st = get_string(p, o, "lares_version", false, info, sizeof info, err)) ||
        (st = get_number(p, o, "measure_s", false, &x, NULL, err)) ||
        (st = get_bool(p, o, "cached", &b, err))) {
        return st;
    }
    return LARES_OK;
}

static lares_status find_device(const jpath *p, json_t *v, const char *key,
                                const sched_device *devs, size_t n, size_t *out, lares_error *err) {
    json_t *s = json_object_get(v, key);
    if (s == NULL) {
        return bad(p, key, err, "missing (required)");
    }
    if (!json_is_string(s)) {
        return bad(p, key, err, "must be a device name");
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(devs[i].name, json_string_value(s)) == 0) {
            *out = i;
            return LARES_OK;
        }
    }
    char why[120];
    snprintf(why, sizeof why, "'%.60s' is not a device of the list", json_string_value(s));
    return bad(p, key, err, why);
}

static lares_status parse_links(const jpath *p, json_t *arr, const sched_device *devs, size_t n,
                                sched_link **out, size_t *n_out, lares_error *err) {
    static const char *const keys[] = {"from", "to", "latency_ms", "bandwidth", "both_ways", NULL};
    if (!json_is_array(arr)) {
        return bad(p, "links", err, "must be an array");
    }
    size_t n_arr = json_array_size(arr);
    sched_link *links = lares_calloc(2 * n_arr + 1, sizeof *links);
    if (links == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    size_t m = 0;
    lares_status st = LARES_OK;
    for (size_t i = 0; i < n_arr; i++) {
        json_t *v = json_array_get(arr, i);
        jpath q = {.what = p->what};
        snprintf(q.at, sizeof q.at, "links[%zu]", i);
        if (!json_is_object(v)) {
            st = bad(&q, NULL, err, "must be an object");
            goto fail;
        }
        sched_link lk;
        bool both = true;
        json_t *hop = json_deep_copy(v);
        if (hop == NULL) {
            st = lares_fail(err, LARES_ENOMEM, "out of memory");
            goto fail;
        }
        json_object_del(hop, "from");
        json_object_del(hop, "to");
        json_object_del(hop, "both_ways");
        if ((st = only_keys(&q, v, keys, err)) ||
            (st = find_device(&q, v, "from", devs, n, &lk.from, err)) ||
            (st = find_device(&q, v, "to", devs, n, &lk.to, err)) ||
            (st = get_bool(&q, v, "both_ways", &both, err)) ||
            (st = get_hop(&q, hop, &lk.hop, err))) {
            json_decref(hop);
            goto fail;
        }
        json_decref(hop);
        if (lk.from == lk.to) {
            st = bad(&q, "to", err, "is the same device as from");
            goto fail;
        }
        links[m++] = lk;
        if (both) {
            links[m] = lk;
            links[m].from = lk.to;
            links[m].to = lk.from;
            m++;
        }
    }
    *out = links;
    *n_out = m;
    return LARES_OK;
fail:
    lares_free(links);
    return st;
}

lares_status sched_devices_parse(const char *text, size_t len, const char *what,
                                 sched_device **devs_out, size_t *n_out, sched_link **links,
                                 size_t *n_links, sched_hop *net_default, lares_error *err) {
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (root == NULL) {
        return lares_fail(err, LARES_EFORMAT, "%s: line %d column %d: %s", what, je.line, je.column,
                          je.text);
    }
    lares_status st = LARES_OK;
    sched_device *devs = NULL;
    json_t *arr = NULL, *jlinks = NULL, *jnet = NULL;
    bool single = false;
    jpath top = {.what = what, .at = ""};
    if (json_is_array(root)) {
        arr = root;
    } else if (json_is_object(root) && json_object_get(root, "devices") != NULL) {
        static const char *const keys[] = {"devices", "links", "network", NULL};
        if ((st = only_keys(&top, root, keys, err)) != LARES_OK) {
            goto done;
        }
        arr = json_object_get(root, "devices");
        jlinks = json_object_get(root, "links");
        jnet = json_object_get(root, "network");
        if (!json_is_array(arr)) {
            st = bad(&top, "devices", err, "must be an array");
            goto done;
        }
    } else if (json_is_object(root)) {
        single = true;
    } else {
        st = lares_fail(err, LARES_EFORMAT,
                        "%s: expected a device object, an array of them or {\"devices\": [...]}",
                        what);
        goto done;
    }
    size_t n = single ? 1 : json_array_size(arr);
    if (n == 0) {
        st = lares_fail(err, LARES_EFORMAT, "%s: no devices", what);
        goto done;
    }
    devs = lares_calloc(n, sizeof *devs);
    if (devs == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        jpath q = {.what = what};
        if (single) {
            snprintf(q.at, sizeof q.at, "device");
        } else {
            snprintf(q.at, sizeof q.at, "devices[%zu]", i);
        }
        if ((st = parse_device(&q, single ? root : json_array_get(arr, i), &devs[i], err))) {
            goto done;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(devs[i].name, devs[j].name) == 0) {
                st = bad(&q, "name", err, "repeats the name of an earlier device");
                goto done;
            }
        }
    }
    if (jnet != NULL) {
        if (!json_is_object(jnet)) {
            st = bad(&top, "network", err, "must be an object");
            goto done;
        }
        jpath q;
        sub(&q, &top, "network");
        sched_hop h;
        if ((st = get_hop(&q, jnet, &h, err)) != LARES_OK) {
            goto done;
        }
        if (net_default != NULL) {
            *net_default = h;
        }
    }
    if (links != NULL) {
        *links = NULL;
        *n_links = 0;
    }
    if (jlinks != NULL) {
        sched_link *l = NULL;
        size_t nl = 0;
        if ((st = parse_links(&top, jlinks, devs, n, &l, &nl, err)) != LARES_OK) {
            goto done;
        }
        if (links != NULL) {
            *links = l;
            *n_links = nl;
        } else {
            lares_free(l);
        }
    }
    *devs_out = devs;
    *n_out = n;
    devs = NULL;
done:
    lares_free(devs);
    json_decref(root);
    return st;
}

/* ---- writing ---- */

static json_t *rates_json(const sched_rates *r) {
    json_t *o = json_object();
    for (uint32_t t = 0; o != NULL && t < GGUF_TYPE_COUNT; t++) {
        const gguf_type_info *ti = gguf_type_info_of(t);
        if (r->by_type[t] > 0 && ti != NULL) {
            json_object_set_new(o, ti->name, json_real(r->by_type[t]));
        }
    }
    if (o != NULL && r->other > 0) {
        json_object_set_new(o, "*", json_real(r->other));
    }
    return o;
}

static bool rates_empty(const sched_rates *r) {
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
        if (r->by_type[t] > 0) {
            return false;
        }
    }
    return !(r->other > 0);
}

json_t *sched_device_json(const sched_device *d) {
    json_t *o = json_object();
    json_t *cpu = json_object(), *mem = json_object(), *disk = json_object();
    if (o == NULL || cpu == NULL || mem == NULL || disk == NULL) {
        json_decref(o);
        json_decref(cpu);
        json_decref(mem);
        json_decref(disk);
        return NULL;
    }
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "os", json_string(sched_os_name(d->os)));
    if (d->head) {
        json_object_set_new(o, "head", json_true());
    }
    json_object_set_new(cpu, "cores", json_integer(d->cores));
    if (d->threads > 0) {
        json_object_set_new(cpu, "threads", json_integer(d->threads));
    }
    if (d->cpu_quota > 0) {
        json_object_set_new(cpu, "quota_cores", json_real(d->cpu_quota));
        if (d->cpu_quota_period_s > 0) {
            json_object_set_new(cpu, "quota_period_ms", json_real(d->cpu_quota_period_s * 1e3));
        }
    }
    if (d->cpu_model[0]) {
        json_object_set_new(cpu, "model", json_string(d->cpu_model));
    }
    if (d->isa[0]) {
        json_object_set_new(cpu, "isa", json_string(d->isa));
    }
    if (d->cpu_flags[0]) {
        json_object_set_new(cpu, "flags", json_string(d->cpu_flags));
    }
    if (d->cal.model[0] && d->cal.scale > 0) {
        json_t *c = json_object();
        if (c != NULL) {
            json_object_set_new(c, "model", json_string(d->cal.model));
            json_object_set_new(c, "model_bytes", json_integer((json_int_t)d->cal.model_bytes));
            json_object_set_new(c, "scale", json_real(d->cal.scale));
            json_object_set_new(c, "decode_layer_ms", json_real(d->cal.decode_layer_s * 1e3));
            if (d->cal.prompt_rows > 0) {
                json_object_set_new(c, "prompt_row_layer_ms",
                                    json_real(d->cal.prompt_row_layer_s * 1e3));
                json_object_set_new(c, "prompt_rows", json_integer(d->cal.prompt_rows));
            }
            json_object_set_new(c, "streamed", json_boolean(d->cal.streamed));
            json_object_set_new(o, "calibration", c);
        }
    }
    json_object_set_new(cpu, "flops", rates_json(&d->cpu_flops));
    if (!rates_empty(&d->cpu_flops_mem)) {
        json_object_set_new(cpu, "flops_mem", rates_json(&d->cpu_flops_mem));
    }
    json_object_set_new(cpu, "mem_bw", json_real(d->mem_bw_Bps));
    json_object_set_new(o, "cpu", cpu);
    if (d->ram_total_bytes > 0) {
        json_object_set_new(mem, "total", json_integer((json_int_t)d->ram_total_bytes));
    }
    json_object_set_new(mem, "available", json_integer((json_int_t)d->ram_avail_bytes));
    json_object_set_new(mem, "swap_available", json_integer((json_int_t)d->swap_avail_bytes));
    json_object_set_new(o, "memory", mem);
    json_object_set_new(disk, "seq_read", json_real(d->disk_seq_Bps));
    if (d->disk_rand_Bps > 0) {
        json_object_set_new(disk, "rand_read", json_real(d->disk_rand_Bps));
    }
    if (d->disk_stream_Bps > 0) {
        json_object_set_new(disk, "stream_read", json_real(d->disk_stream_Bps));
    }
    if (d->disk_stream_cpu_Bps > 0) {
        json_object_set_new(disk, "stream_cpu", json_real(d->disk_stream_cpu_Bps));
    }
    if (d->disk_direct_Bps > 0) {
        json_object_set_new(disk, "direct_read", json_real(d->disk_direct_Bps));
    }
    if (d->disk_cached_share > 0) {
        json_object_set_new(disk, "cached_share", json_real(d->disk_cached_share));
    }
    if (d->disk_free_bytes >= 0) {
        json_object_set_new(disk, "free", json_integer((json_int_t)d->disk_free_bytes));
    }
    if (d->disk_path[0]) {
        json_object_set_new(disk, "path", json_string(d->disk_path));
    }
    json_object_set_new(o, "disk", disk);
    if (d->gpu != SCHED_GPU_NONE) {
        json_t *g = json_object();
        if (g != NULL) {
            json_object_set_new(g, "backend", json_string(sched_gpu_backend_name(d->gpu)));
            if (d->gpu_name[0]) {
                json_object_set_new(g, "name", json_string(d->gpu_name));
            }
            json_object_set_new(g, "vram_available", json_integer((json_int_t)d->vram_avail_bytes));
            json_object_set_new(g, "flops", rates_json(&d->gpu_flops));
            json_object_set_new(g, "mem_bw", json_real(d->gpu_mem_bw_Bps));
            json_object_set_new(o, "gpu", g);
        }
    }
    if (d->net_out.latency_s >= 0 && d->net_out.bandwidth_Bps > 0) {
        json_t *n = json_object();
        if (n != NULL) {
            json_object_set_new(n, "latency_ms", json_real(d->net_out.latency_s * 1e3));
            json_object_set_new(n, "bandwidth", json_real(d->net_out.bandwidth_Bps));
            json_object_set_new(o, "net", n);
        }
    }
    return o;
}

lares_status sched_json_text(json_t *o, char **out, lares_error *err) {
    if (o == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    json_decref(o);
    if (s == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    *out = lares_strdup(s);
    free(s);
    if (*out == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    return LARES_OK;
}

lares_status sched_device_to_json(const sched_device *d, char **out, lares_error *err) {
    return sched_json_text(sched_device_json(d), out, err);
}
