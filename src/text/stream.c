/*
 * The UTF-8 stream assembler: token pieces in, whole characters out.
 *
 * A byte-fallback tokenizer emits a 4-byte emoji as four tokens of one byte
 * each; printing them one by one would print four broken characters. The
 * assembler holds back a proper prefix of a character (at most 3 bytes) until
 * a later piece completes it, and replaces each ill-formed subpart with
 * U+FFFD (see utf8.c), so what it emits is always valid UTF-8 and does not
 * depend on how the bytes were split into pieces.
 */
#include "text/text_impl.h"

static const char replacement[3] = {'\xef', '\xbf', '\xbd'}; /* U+FFFD */

/* Copies n bytes when they fit; what does not fit is dropped (the caller
 * sized out below TEXT_STREAM_OUT_MAX). */
static void put(char *out, size_t cap, size_t *w, const void *src, size_t n) {
    if (*w + n <= cap) {
        memcpy(out + *w, src, n);
        *w += n;
    }
}

void text_stream_init(text_stream *s) {
    memset(s, 0, sizeof *s);
}

size_t text_stream_push(text_stream *s, const char *piece, size_t n, char *out, size_t cap) {
    const unsigned char *p = (const unsigned char *)piece;
    size_t i = 0, w = 0;
    size_t len;
    uint32_t cp;
    if (s->n_held < 0 || s->n_held > 3) {
        s->n_held = 0; /* not a state push ever leaves; start afresh */
    }
    if (n == 0) {
        return 0;
    }
    if (s->n_held > 0) {
        /* finish (or reject) the held character with the first bytes of piece */
        unsigned char tmp[8];
        size_t nh = (size_t)s->n_held;
        size_t take = LARES_MIN(n, 4 - nh);
        memcpy(tmp, s->held, nh);
        memcpy(tmp + nh, p, take);
        switch (text_utf8_scan(tmp, nh + take, &len, &cp)) {
        case TEXT_UTF8_VALID:
            put(out, cap, &w, tmp, len);
            break;
        case TEXT_UTF8_INVALID:
            /* the held bytes are a valid prefix, so the subpart covers them all */
            put(out, cap, &w, replacement, sizeof replacement);
            break;
        case TEXT_UTF8_INCOMPLETE:
            /* still not complete: all of piece joined the held bytes */
            memcpy(s->held, tmp, nh + take);
            s->n_held = (int)(nh + take);
            return 0;
        }
        i = len - nh;
        s->n_held = 0;
    }
    while (i < n) {
        switch (text_utf8_scan(p + i, n - i, &len, &cp)) {
        case TEXT_UTF8_VALID:
            put(out, cap, &w, p + i, len);
            break;
        case TEXT_UTF8_INVALID:
            put(out, cap, &w, replacement, sizeof replacement);
            break;
        case TEXT_UTF8_INCOMPLETE:
            memcpy(s->held, p + i, len); /* len <= 3 */
            s->n_held = (int)len;
            break;
        }
        i += len;
    }
    return w;
}

size_t text_stream_flush(text_stream *s, char *out, size_t cap) {
    size_t w = 0;
    if (s->n_held > 0 && s->n_held <= 3) {
        put(out, cap, &w, replacement, sizeof replacement);
    }
    s->n_held = 0;
    return w;
}
