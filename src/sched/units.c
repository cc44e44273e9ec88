/*
 * Sizes and rates as people write them in a devices file: "2.4GiB", "512MB",
 * "0.72GB/s", "100Mbit/s". Decimal prefixes (kB, MB, GB, TB) are powers of
 * 1000, binary ones (KiB, MiB, GiB, TiB, and bare K, M, G, T) powers of 1024;
 * bits must be spelled "bit" or "bps" so that "Mb" is never guessed at.
 */
#include "sched/sched.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

typedef struct unit {
    const char *name;
    double mult;
} unit;

static const unit size_units[] = {
    {"", 1},
    {"b", 1},
    {"k", 1024.0},
    {"kib", 1024.0},
    {"kb", 1e3},
    {"m", 1048576.0},
    {"mib", 1048576.0},
    {"mb", 1e6},
    {"g", 1073741824.0},
    {"gib", 1073741824.0},
    {"gb", 1e9},
    {"t", 1099511627776.0},
    {"tib", 1099511627776.0},
    {"tb", 1e12},
};

/* number, then an optional unit (spaces allowed between), lower-cased into u */
static bool split(const char *s, double *v, char *u, size_t cap) {
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (errno != 0 || end == s || !isfinite(*v) || *v < 0) {
        return false;
    }
    while (*end == ' ') {
        end++;
    }
    size_t n = strlen(end);
    if (n >= cap) {
        return false;
    }
    for (size_t i = 0; i <= n; i++) {
        u[i] = (char)tolower((unsigned char)end[i]);
    }
    return true;
}

static bool lookup(const char *u, double *mult) {
    for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++) {
        if (strcmp(u, size_units[i].name) == 0) {
            *mult = size_units[i].mult;
            return true;
        }
    }
    return false;
}

bool sched_parse_size(const char *s, uint64_t *out) {
    double v, mult;
    char u[16];
    if (!split(s, &v, u, sizeof u) || !lookup(u, &mult)) {
        return false;
    }
    double bytes = v * mult;
    if (bytes >= 1.8e19) {
        return false;
    }
    *out = (uint64_t)bytes;
    return true;
}

bool sched_parse_rate(const char *s, double *out) {
    double v, mult = 1;
    char u[16];
    if (!split(s, &v, u, sizeof u)) {
        return false;
    }
    size_t raw = strlen(s);
    if (raw >= 3 && strcmp(s + raw - 3, "b/s") == 0) { /* "Mb/s": bits or bytes? refuse */
        return false;
    }
    size_t n = strlen(u);
    bool bits = false;
    if (n >= 3 && strcmp(u + n - 3, "bps") == 0) { /* "Mbps" */
        bits = true;
        u[n - 3] = '\0';
    } else if (n >= 5 && strcmp(u + n - 5, "bit/s") == 0) { /* "Mbit/s" */
        bits = true;
        u[n - 5] = '\0';
    } else if (n >= 2 && strcmp(u + n - 2, "/s") == 0) { /* "GB/s", "B/s" */
        u[n - 2] = '\0';
    } else if (n != 0) {
        return false;
    }
    if (bits) {
        /* decimal prefixes only for bit rates: 100 Mbit/s = 1e8 bits per second */
        static const unit bit_units[] = {{"", 1}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}};
        bool found = false;
        for (size_t i = 0; i < sizeof bit_units / sizeof bit_units[0]; i++) {
            if (strcmp(u, bit_units[i].name) == 0) {
                mult = bit_units[i].mult / 8.0;
                found = true;
            }
        }
        if (!found) {
            return false;
        }
    } else if (!lookup(u, &mult)) {
        return false;
    }
    double r = v * mult;
    if (!isfinite(r)) {
        return false;
    }
    *out = r;
    return true;
}
