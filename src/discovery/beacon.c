/*
 * The UDP beacon (docs/protocol.md "Discovery and pairing"): a query (8
 * bytes) or an announcement (a device's name, ports, public key and lares
 * version, and optionally its cache summary sealed for each paired head).
 * Written and read byte by byte; the decoder checks the magic, the version,
 * the type, every length against the bytes left and its limit, the
 * characters of every string, and that nothing trails. A beacon proves
 * nothing: anyone can send one with any key; pairing is what gives trust.
 */
#include "discovery/discovery.h"

#include <sodium.h>

#define BEACON_MAGIC "LRDB"
#define BEACON_HEADER 8 /* magic, u16 version, u16 type */
/* a sealed part: the box's overhead and at least the count byte */
#define SEALED_MIN (crypto_box_SEALBYTES + 1)

bool disc_name_valid(const char *name) {
    const size_t n = strlen(name);
    if (n == 0 || n > DISC_NAME_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const char c = name[i];
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

/* a version string: 1..31 printable ASCII bytes, no space */
static bool version_valid(const char *v) {
    const size_t n = strlen(v);
    if (n == 0 || n > DISC_VERSION_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (v[i] <= ' ' || v[i] > '~') {
            return false;
        }
    }
    return true;
}

void disc_fingerprint(const uint8_t key[DISC_KEY_BYTES], char out[DISC_FINGERPRINT_LEN + 1]) {
    uint8_t h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, key, DISC_KEY_BYTES);
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 8; i++) {
        if (i > 0 && i % 2 == 0) {
            out[o++] = '-';
        }
        out[o++] = hex[h[i] >> 4];
        out[o++] = hex[h[i] & 15];
    }
    out[o] = '\0';
}

size_t disc_beacon_encode(const disc_beacon *b, uint8_t *buf, size_t cap) {
    if (cap < DISC_BEACON_MAX ||
        (b->type != DISC_BEACON_QUERY && b->type != DISC_BEACON_ANNOUNCE)) {
        return 0;
    }
    memcpy(buf, BEACON_MAGIC, 4);
    wr_u16le(buf + 4, DISC_PROTO_VERSION);
    wr_u16le(buf + 6, (uint16_t)b->type);
    if (b->type == DISC_BEACON_QUERY) {
        return BEACON_HEADER;
    }
    if (!disc_name_valid(b->name) || !version_valid(b->version) || b->ring_port == 0 ||
        b->pair_port == 0) {
        return 0;
    }
    size_t o = BEACON_HEADER;
    wr_u16le(buf + o, b->ring_port);
    wr_u16le(buf + o + 2, b->pair_port);
    o += 4;
    memcpy(buf + o, b->key, DISC_KEY_BYTES);
    o += DISC_KEY_BYTES;
    const char *strs[] = {b->name, b->version};
    for (int i = 0; i < 2; i++) {
        const size_t n = strlen(strs[i]);
        buf[o++] = (uint8_t)n;
        memcpy(buf + o, strs[i], n);
        o += n;
    }
    if (b->n_sealed < 0 || b->n_sealed > DISC_SEALED_MAX) {
        return 0;
    }
    if (b->n_sealed > 0) {
        buf[o++] = (uint8_t)b->n_sealed;
    }
    for (int i = 0; i < b->n_sealed; i++) {
        const size_t n = b->sealed_len[i];
        if (n < SEALED_MIN || n > DISC_SEALED_BYTES_MAX) {
            return 0;
        }
        wr_u16le(buf + o, (uint16_t)n);
        memcpy(buf + o + 2, b->sealed[i], n);
        o += 2 + n;
    }
    return o;
}

/* a u8-length string of at most max bytes into out; false when it does not fit */
static bool take_str(const uint8_t *buf, size_t len, size_t *o, size_t max, char *out) {
    if (*o >= len) {
        return false;
    }
    const size_t n = buf[*o];
    if (n > max || n > len - *o - 1) {
        return false;
    }
    memcpy(out, buf + *o + 1, n);
    out[n] = '\0';
    if (strlen(out) != n) { /* a NUL inside */
        return false;
    }
    *o += 1 + n;
    return true;
}

lares_status disc_beacon_decode(const uint8_t *buf, size_t len, disc_beacon *out,
                                lares_error *err) {
    memset(out, 0, sizeof *out);
    if (len < BEACON_HEADER || memcmp(buf, BEACON_MAGIC, 4) != 0) {
        return lares_fail(err, LARES_EFORMAT, "not a lares beacon (%zu bytes)", len);
    }
    const uint16_t version = rd_u16le(buf + 4);
    if (version != DISC_PROTO_VERSION) {
        return lares_fail(err, LARES_EPROTO, "beacon of version %u (this lares speaks %d)",
                          version, DISC_PROTO_VERSION);
    }
    const uint16_t type = rd_u16le(buf + 6);
    if (type == DISC_BEACON_QUERY) {
        if (len != BEACON_HEADER) {
            return lares_fail(err, LARES_EFORMAT, "query beacon of %zu bytes (8 expected)", len);
        }
        out->type = DISC_BEACON_QUERY;
        return LARES_OK;
    }
    if (type != DISC_BEACON_ANNOUNCE) {
        return lares_fail(err, LARES_EFORMAT, "beacon of unknown type %u", type);
    }
    size_t o = BEACON_HEADER;
    if (len < o + 4 + DISC_KEY_BYTES) {
        return lares_fail(err, LARES_EFORMAT, "announcement truncated at %zu bytes", len);
    }
    out->type = DISC_BEACON_ANNOUNCE;
    out->ring_port = rd_u16le(buf + o);
    out->pair_port = rd_u16le(buf + o + 2);
    o += 4;
    if (out->ring_port == 0 || out->pair_port == 0) {
        return lares_fail(err, LARES_EFORMAT, "announcement with port 0");
    }
    memcpy(out->key, buf + o, DISC_KEY_BYTES);
    o += DISC_KEY_BYTES;
    if (!take_str(buf, len, &o, DISC_NAME_MAX, out->name) || !disc_name_valid(out->name)) {
        return lares_fail(err, LARES_EFORMAT,
                          "announcement: the name is truncated, too long or has characters "
                          "outside [A-Za-z0-9._-]");
    }
    if (!take_str(buf, len, &o, DISC_VERSION_MAX, out->version) ||
        !version_valid(out->version)) {
        return lares_fail(err, LARES_EFORMAT,
                          "announcement: the version is truncated, too long or not printable");
    }
    if (o < len) { /* the sealed summaries, when the worker has paired heads and a cache */
        const int n = buf[o++];
        if (n < 1 || n > DISC_SEALED_MAX) {
            return lares_fail(err, LARES_EFORMAT,
                              "announcement with %d sealed summaries (1 to %d)", n,
                              DISC_SEALED_MAX);
        }
        for (int i = 0; i < n; i++) {
            if (len - o < 2) {
                return lares_fail(err, LARES_EFORMAT, "announcement: sealed summary %d truncated",
                                  i);
            }
            const size_t k = rd_u16le(buf + o);
            if (k < SEALED_MIN || k > DISC_SEALED_BYTES_MAX || k > len - o - 2) {
                return lares_fail(err, LARES_EFORMAT,
                                  "announcement: sealed summary %d of %zu bytes (%d to %d, "
                                  "within the datagram)",
                                  i, k, SEALED_MIN, DISC_SEALED_BYTES_MAX);
            }
            out->sealed_len[i] = (uint16_t)k;
            memcpy(out->sealed[i], buf + o + 2, k);
            o += 2 + k;
        }
        out->n_sealed = n;
    }
    if (o != len) {
        return lares_fail(err, LARES_EFORMAT, "announcement with %zu trailing bytes", len - o);
    }
    return LARES_OK;
}
