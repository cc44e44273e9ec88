/*
 * The bytes a token stands for, following the reference engine's
 * token_to_piece (llama-vocab.cpp): control and unknown tokens are empty
 * unless asked for, user-defined ones are their text, normal tokens undo the
 * tokenizer's escaping (SPM and WordPiece: U+2581 is a space; byte-level BPE:
 * each character is the byte GPT-2's table maps to it), byte tokens <0xAB>
 * are that byte. Undefined and unused tokens are empty.
 */
#include "text/text_impl.h"

typedef struct out_buf {
    char *buf;
    size_t cap;
    size_t n; /* bytes of the whole piece, written or not */
} out_buf;

static void put(out_buf *o, const void *src, size_t n) {
    if (o->n < o->cap) {
        memcpy(o->buf + o->n, src, LARES_MIN(n, o->cap - o->n));
    }
    o->n += n;
}

static int hex(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

/* "<0xAB>" -> 0xAB; -1 for any other text */
static int byte_of(gguf_str t) {
    if (t.len != 6 || memcmp(t.ptr, "<0x", 3) != 0 || t.ptr[5] != '>') {
        return -1;
    }
    int hi = hex(t.ptr[3]), lo = hex(t.ptr[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static void unescape_spaces(out_buf *o, gguf_str t) {
    size_t i = 0, n = (size_t)t.len;
    while (i < n) {
        if (i + 3 <= n && memcmp(t.ptr + i, "\xe2\x96\x81", 3) == 0) {
            put(o, " ", 1);
            i += 3;
        } else {
            put(o, t.ptr + i, 1);
            i++;
        }
    }
}

/* Byte-level BPE: every character names a byte. A character outside GPT-2's
 * table (an added token typed normal) is passed through as it is. */
static void decode_bytes(out_buf *o, gguf_str t) {
    const unsigned char *p = (const unsigned char *)t.ptr;
    size_t i = 0, n = (size_t)t.len;
    while (i < n) {
        size_t len;
        uint32_t cp;
        int b = -1;
        if (text_utf8_scan(p + i, n - i, &len, &cp) == TEXT_UTF8_VALID) {
            b = text_gpt2_cp_byte(cp);
        }
        if (b >= 0) {
            unsigned char c = (unsigned char)b;
            put(o, &c, 1);
        } else {
            put(o, p + i, len);
        }
        i += len;
    }
}

int32_t text_token_piece(const text_vocab *v, int32_t id, bool special, char *buf, size_t cap) {
    if (v == NULL || id < 0 || id >= v->n) {
        return -1;
    }
    out_buf o = {.buf = buf, .cap = buf != NULL ? cap : 0, .n = 0};
    uint16_t attr = v->attr[id];
    gguf_str t = v->text[id];
    if (attr & (TEXT_ATTR_CONTROL | TEXT_ATTR_UNKNOWN)) {
        if (special) {
            put(&o, t.ptr, (size_t)t.len);
        }
    } else if (attr & TEXT_ATTR_USER_DEFINED) {
        put(&o, t.ptr, (size_t)t.len);
    } else if (attr & TEXT_ATTR_NORMAL) {
        if (v->kind == TEXT_VOCAB_BPE) {
            decode_bytes(&o, t);
        } else {
            unescape_spaces(&o, t);
        }
    } else if (attr & TEXT_ATTR_BYTE) {
        int b = byte_of(t);
        if (b >= 0) {
            unsigned char c = (unsigned char)b;
            put(&o, &c, 1);
        } else {
            put(&o, t.ptr, (size_t)t.len); /* a byte token without the <0xAB> form */
        }
    }
    /* TEXT_MAX_TOKEN_BYTES bounds every piece far below INT32_MAX */
    return (int32_t)o.n;
}
