/* Errors carry a code and a fixed-size message, so reporting never allocates. */
#include "core/core.h"

#include <stdio.h>

static const char *const status_names[LARES_STATUS_COUNT] = {
    [LARES_OK] = "ok",
    [LARES_EINVAL] = "invalid argument",
    [LARES_EIO] = "i/o error",
    [LARES_EFORMAT] = "format error",
    [LARES_ENOMEM] = "out of memory",
    [LARES_EUNSUPPORTED] = "not supported",
    [LARES_ENOTFOUND] = "not found",
    [LARES_ERANGE] = "out of range",
    [LARES_ECANCELED] = "canceled",
    [LARES_ENET] = "network error",
    [LARES_EAUTH] = "authentication refused",
    [LARES_EPROTO] = "protocol error",
    [LARES_EBUSY] = "busy",
};

const char *lares_status_name(lares_status s) {
    if ((unsigned)s >= LARES_STATUS_COUNT || status_names[s] == NULL) {
        return "unknown status";
    }
    return status_names[s];
}

lares_status lares_fail(lares_error *err, lares_status code, const char *fmt, ...) {
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void lares_error_prefix(lares_error *err, const char *fmt, ...) {
    if (err == NULL) {
        return;
    }
    char prefix[LARES_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* prefix + message, cut to the fixed buffer */
    char joined[2 * LARES_ERROR_MSG_MAX];
    size_t np = strlen(prefix), nm = strlen(err->msg);
    memcpy(joined, prefix, np);
    memcpy(joined + np, err->msg, nm + 1);
    joined[LARES_ERROR_MSG_MAX - 1] = '\0';
    memcpy(err->msg, joined, LARES_ERROR_MSG_MAX);
}

void lares_error_clear(lares_error *err) {
    if (err != NULL) {
        err->code = LARES_OK;
        err->msg[0] = '\0';
    }
}
