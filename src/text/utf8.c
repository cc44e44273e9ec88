/*
 * UTF-8 scanning by the rules of Unicode 15, section 3.9 (table 3-7, well-
 * formed byte sequences): no overlong forms, no surrogates, nothing above
 * U+10FFFF. An ill-formed sequence is replaced by U+FFFD one "maximal subpart"
 * at a time (section 3.9, "U+FFFD Substitution of Maximal Subparts"), the
 * practice of the W3C encoding standard, so a result never depends on where
 * a byte stream was cut.
 */
#include "text/text_impl.h"

size_t text_utf8_lead_len(unsigned char c) {
    /* by the high nibble: 0xxx 1, 10xx 1, 110x 2, 1110 3, 1111 4 */
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

text_utf8_scan_kind text_utf8_scan(const unsigned char *s, size_t n, size_t *len, uint32_t *cp) {
    unsigned c0 = s[0];
    if (c0 < 0x80) {
        *len = 1;
        *cp = c0;
        return TEXT_UTF8_VALID;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xbf; /* range of the second byte */
    uint32_t v;
    if (c0 < 0xc2) {
        *len = 1; /* a continuation byte or an overlong lead */
        return TEXT_UTF8_INVALID;
    } else if (c0 < 0xe0) {
        need = 1;
        v = c0 & 0x1f;
    } else if (c0 < 0xf0) {
        need = 2;
        v = c0 & 0x0f;
        if (c0 == 0xe0) {
            lo = 0xa0; /* overlong below U+0800 */
        } else if (c0 == 0xed) {
            hi = 0x9f; /* surrogates */
        }
    } else if (c0 < 0xf5) {
        need = 3;
        v = c0 & 0x07;
        if (c0 == 0xf0) {
            lo = 0x90; /* overlong below U+10000 */
        } else if (c0 == 0xf4) {
            hi = 0x8f; /* above U+10FFFF */
        }
    } else {
        *len = 1;
        return TEXT_UTF8_INVALID;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n) {
            *len = n;
            return TEXT_UTF8_INCOMPLETE;
        }
        unsigned b = s[i];
        if (b < lo || b > hi) {
            *len = i;
            return TEXT_UTF8_INVALID;
        }
        lo = 0x80;
        hi = 0xbf;
        v = (v << 6) | (b & 0x3f);
    }
    *len = need + 1;
    *cp = v;
    return TEXT_UTF8_VALID;
}

size_t text_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t text_utf8_sanitized_len(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, total = 0;
    while (i < n) {
        size_t len;
        uint32_t cp;
        if (text_utf8_scan(p + i, n - i, &len, &cp) == TEXT_UTF8_VALID) {
            total += len;
        } else {
            total += 3; /* U+FFFD */
        }
        i += len;
    }
    return total;
}

size_t text_utf8_sanitize(const char *s, size_t n, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t len;
        uint32_t cp;
        if (text_utf8_scan(p + i, n - i, &len, &cp) == TEXT_UTF8_VALID) {
            memcpy(out + o, s + i, len);
            o += len;
        } else {
            o += text_utf8_put(0xfffd, out + o);
        }
        i += len;
    }
    return o;
}

static bool gpt2_printable(uint32_t c) {
    return (c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
}

uint32_t text_gpt2_byte_cp(uint8_t b) {
    if (gpt2_printable(b)) {
        return b;
    }
    if (b <= 0x20) {
        return 256u + b; /* 0x00..0x20: the first 33 of the shifted bytes */
    }
    if (b >= 0x7f && b <= 0xa0) {
        return 256u + 33u + (b - 0x7fu);
    }
    return 256u + 33u + 34u; /* 0xad, the last one */
}

int text_gpt2_cp_byte(uint32_t cp) {
    if (cp < 256) {
        return gpt2_printable(cp) ? (int)cp : -1;
    }
    if (cp < 256 + 33) {
        return (int)(cp - 256);
    }
    if (cp < 256 + 33 + 34) {
        return (int)(cp - 256 - 33 + 0x7f);
    }
    if (cp == 256 + 33 + 34) {
        return 0xad;
    }
    return -1;
}
