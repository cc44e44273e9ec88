/* The library's only voice: one sink, set once at start-up by the program. */
#include "core/core.h"

#include <stdio.h>

static lares_log_fn sink_fn;
static void *sink_user;
static lares_log_level sink_min = LARES_LOG_WARN;

void lares_set_log(lares_log_fn fn, void *user, lares_log_level min_level) {
    sink_fn = fn;
    sink_user = user;
    sink_min = min_level;
}

bool lares_log_enabled(lares_log_level level) {
    return level <= sink_min;
}

void lares_log(lares_log_level level, const char *fmt, ...) {
    if (level > sink_min) {
        return;
    }
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (sink_fn != NULL) {
        sink_fn(level, line, sink_user);
    } else {
        static const char *const tag[] = {"error", "warning", "info", "debug"};
        fprintf(stderr, "lares %s: %s\n", tag[level], line);
    }
}
