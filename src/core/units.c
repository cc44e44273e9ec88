/* Quantities for people to read in messages. */
#include "core/core.h"

#include <stdio.h>

const char *lares_fmt_bytes(double n, char *buf, size_t cap) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (n >= 1024 && u < 4) {
        n /= 1024;
        u++;
    }
    snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.2f %s", n, unit[u]);
    return buf;
}
