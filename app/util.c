/* Shared helpers of the sub-commands: errors, argument values, input files. */
#include "app.h"

#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void app_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("lares: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int app_fail(const lares_error *err) {
    app_error("%s", err->msg[0] ? err->msg : lares_status_name(err->code));
    return APP_FAIL;
}

const char *app_need_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        app_error("option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

bool app_parse_i32(const char *opt, const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        app_error("%s: '%s' is not a whole number from %d to %d", opt, s, lo, hi);
        return false;
    }
    *out = (int32_t)v;
    return true;
}

bool app_parse_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-') {
        app_error("%s: '%s' is not a non-negative whole number", opt, s);
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

bool app_parse_f32(const char *opt, const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        app_error("%s: '%s' is not a number from %g to %g", opt, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool app_parse_expert_cache(const char *opt, const char *s, lares_expert_cache *out) {
    if (strcmp(s, "heat") == 0) {
        *out = LARES_EXPERT_CACHE_HEAT;
    } else if (strcmp(s, "lru") == 0) {
        *out = LARES_EXPERT_CACHE_LRU;
    } else {
        app_error("%s: '%s' is not heat or lru", opt, s);
        return false;
    }
    return true;
}

bool app_parse_stream_io(const char *opt, const char *s, lares_stream_io *out) {
    if (strcmp(s, "auto") == 0) {
        *out = LARES_STREAM_IO_AUTO;
    } else if (strcmp(s, "mmap") == 0) {
        *out = LARES_STREAM_IO_MMAP;
    } else if (strcmp(s, "direct") == 0) {
        *out = LARES_STREAM_IO_DIRECT;
    } else {
        app_error("%s: '%s' is not auto, mmap or direct", opt, s);
        return false;
    }
    return true;
}

bool app_parse_size(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || !(v >= 0) || !isfinite(v)) {
        app_error("%s: '%s' is not a size (examples: 512M, 2G, 1.5GiB)", opt, s);
        return false;
    }
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},          {"b", 1},         {"k", 1024.0},        {"kb", 1024.0},
                 {"kib", 1024.0},  {"m", 1048576.0}, {"mb", 1048576.0},    {"mib", 1048576.0},
                 {"g", 1073741824.0}, {"gb", 1073741824.0}, {"gib", 1073741824.0},
                 {"t", 1099511627776.0}, {"tb", 1099511627776.0}, {"tib", 1099511627776.0}};
    char low[8];
    size_t n = strlen(end);
    if (n >= sizeof low) {
        app_error("%s: unknown unit '%s' (use K, M, G or T)", opt, end);
        return false;
    }
    for (size_t i = 0; i <= n; i++) {
        low[i] = (char)(end[i] >= 'A' && end[i] <= 'Z' ? end[i] + 32 : end[i]);
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(low, units[i].suffix) == 0) {
            double bytes = v * units[i].mult;
            if (units[i].mult == 1 && bytes < 4096) {
                app_error("%s: '%s' is only %.0f bytes: give a unit (e.g. %sM or %sG)", opt, s,
                          bytes, s, s);
                return false;
            }
            if (bytes > 1.8e19) {
                app_error("%s: '%s' is too large", opt, s);
                return false;
            }
            *out = (uint64_t)bytes;
            return true;
        }
    }
    app_error("%s: unknown unit '%s' (use K, M, G or T)", opt, end);
    return false;
}

char *app_read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL) {
        app_error("%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            break;
        }
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool failed = ferror(f) != 0;
    if (f != stdin) {
        fclose(f);
    }
    if (buf == NULL || failed) {
        free(buf);
        app_error("%s: cannot read", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void log_sink(lares_log_level level, const char *line, void *user) {
    (void)user;
    static const char *const tag[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "lares %s: %s\n", tag[level], line);
}

void app_setup_log(int verbosity) {
    lares_log_level lvl = verbosity < 0   ? LARES_LOG_ERROR
                          : verbosity == 0 ? LARES_LOG_WARN
                          : verbosity == 1 ? LARES_LOG_INFO
                                           : LARES_LOG_DEBUG;
    lares_set_log(log_sink, NULL, lvl);
}

const char *app_fmt_bytes(uint64_t n, char *buf, size_t cap) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.1f %s", v, unit[u]);
    return buf;
}

json_t *app_probe_json(const lares_stats *st) {
    return json_pack("{s:f, s:f}", "direct_Bps", st->probe_direct_Bps, "mmap_Bps",
                     st->probe_mmap_Bps);
}

json_t *app_expert_io_json(const lares_stats *st) {
    if (!st->streaming || st->route_overlap < 0) {
        return json_null(); /* not MoE, or nothing streams */
    }
    return json_pack("{s:s, s:o}", "io", st->expert_direct ? "direct" : "mmap", "probe",
                     st->expert_probe_direct_Bps > 0
                         ? json_pack("{s:f, s:f}", "direct_Bps", st->expert_probe_direct_Bps,
                                     "mmap_Bps", st->expert_probe_mmap_Bps)
                         : json_null());
}

const char *app_profile_cache_default(void) {
    static char dir[1024]; /* the program's one answer, made once (single-threaded startup) */
    if (dir[0] == '\0') {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg != NULL && xdg[0] == '/') {
            snprintf(dir, sizeof dir, "%s/lares", xdg);
        } else if (home != NULL && home[0] == '/') {
            snprintf(dir, sizeof dir, "%s/.cache/lares", home);
        }
    }
    return dir[0] != '\0' ? dir : NULL;
}

bool app_ring_state_path(const char *ring_json, char *out, size_t cap) {
    char real[PATH_MAX];
    if (realpath(ring_json, real) == NULL) {
        return false; /* the ring cannot open either: it says why */
    }
    char dir[1024];
    const char *run = getenv("XDG_RUNTIME_DIR");
    if (run != NULL && run[0] == '/') {
        snprintf(dir, sizeof dir, "%.1000s/lares", run);
    } else {
        snprintf(dir, sizeof dir, "/tmp/lares-%ld", (long)getuid());
    }
    struct stat st;
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || lstat(dir, &st) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 0022) != 0) {
        fprintf(stderr,
                "lares: warning: ring: no place for the ring's live state (%s is not a private "
                "directory of this user): lares ring status will not see this head\n",
                dir);
        return false;
    }
    uint8_t h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const uint8_t *)real, strlen(real));
    snprintf(out, cap, "%s/ring-%02x%02x%02x%02x%02x%02x%02x%02x.json", dir, h[0], h[1], h[2],
             h[3], h[4], h[5], h[6], h[7]);
    return true;
}
