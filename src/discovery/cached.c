/*
 * A worker's cache summary in its announcement (issue 19: "lares devices
 * shows cached models per device"): the models its weight cache holds, how
 * much of each, so a head sees before a run which device would start from
 * its cache and which would be shipped weights.
 *
 * What a device keeps is its owner's business, and a beacon goes to the whole
 * network, so the summary is sealed (libsodium's sealed box: an ephemeral
 * X25519 key, XSalsa20-Poly1305) for each paired head's public key, the same
 * Curve25519 key its CURVE connections use; an unpaired head, or anyone
 * else on the LAN, sees opaque bytes of a length. A sealed box does not say
 * who wrote it: a forged summary needs the head's public key, which heads
 * never announce, and it could only misreport a cache; the ring checks every
 * tensor's hash regardless.
 */
#include "discovery/discovery.h"

#include <sodium.h>

#define CACHED_ENTRY_FIXED 24 /* u64 bytes, u64 file bytes, u32 held, u32 tensors */

size_t disc_cached_encode(const disc_cached *m, int n, uint8_t *buf, size_t cap) {
    n = LARES_MAX(0, LARES_MIN(n, DISC_CACHED_MAX));
    size_t o = 0;
    if (cap < 1) {
        return 0;
    }
    buf[o++] = (uint8_t)n;
    for (int i = 0; i < n; i++) {
        const size_t len = strnlen(m[i].name, DISC_CACHED_NAME_MAX);
        if (cap - o < 1 + len + CACHED_ENTRY_FIXED) {
            return 0;
        }
        buf[o++] = (uint8_t)len;
        for (size_t k = 0; k < len; k++) {
            const char c = m[i].name[k];
            buf[o++] = (uint8_t)(c >= ' ' && c <= '~' ? c : '?');
        }
        /* what a damaged list could claim is clamped, so the decoder's checks hold */
        const uint64_t whole = m[i].file_bytes;
        wr_u64le(buf + o, LARES_MIN(m[i].bytes, whole));
        wr_u64le(buf + o + 8, whole);
        wr_u32le(buf + o + 16, LARES_MIN(m[i].tensors_held, m[i].tensors));
        wr_u32le(buf + o + 20, m[i].tensors);
        o += CACHED_ENTRY_FIXED;
    }
    return o;
}

lares_status disc_cached_decode(const uint8_t *buf, size_t len, disc_cached *out, int cap,
                                int *n, lares_error *err) {
    *n = 0;
    if (len < 1) {
        return lares_fail(err, LARES_EFORMAT, "cache summary: empty");
    }
    const int count = buf[0];
    if (count > DISC_CACHED_MAX || count > cap) {
        return lares_fail(err, LARES_EFORMAT, "cache summary of %d models (at most %d)", count,
                          LARES_MIN(cap, DISC_CACHED_MAX));
    }
    size_t o = 1;
    for (int i = 0; i < count; i++) {
        disc_cached *c = &out[i];
        memset(c, 0, sizeof *c);
        const size_t k = o < len ? buf[o] : 0;
        if (o >= len || k > DISC_CACHED_NAME_MAX || len - o - 1 < k + CACHED_ENTRY_FIXED) {
            return lares_fail(err, LARES_EFORMAT, "cache summary: model %d truncated or its "
                                                  "name too long", i);
        }
        for (size_t j = 0; j < k; j++) {
            const uint8_t ch = buf[o + 1 + j];
            if (ch < ' ' || ch > '~') {
                return lares_fail(err, LARES_EFORMAT,
                                  "cache summary: model %d's name is not printable ASCII", i);
            }
            c->name[j] = (char)ch;
        }
        o += 1 + k;
        c->bytes = rd_u64le(buf + o);
        c->file_bytes = rd_u64le(buf + o + 8);
        c->tensors_held = rd_u32le(buf + o + 16);
        c->tensors = rd_u32le(buf + o + 20);
        o += CACHED_ENTRY_FIXED;
        if (c->bytes > c->file_bytes || c->tensors_held > c->tensors) {
            return lares_fail(err, LARES_EFORMAT,
                              "cache summary: model %d holds more than the whole", i);
        }
    }
    if (o != len) {
        return lares_fail(err, LARES_EFORMAT, "cache summary with %zu trailing bytes", len - o);
    }
    *n = count;
    return LARES_OK;
}

size_t disc_cached_seal(const disc_cached *m, int n, const uint8_t head_key[DISC_KEY_BYTES],
                        uint8_t *out, size_t cap) {
    uint8_t plain[DISC_SEALED_BYTES_MAX - crypto_box_SEALBYTES];
    const size_t len = disc_cached_encode(m, n, plain, sizeof plain);
    if (sodium_init() < 0 || len == 0 || cap < len + crypto_box_SEALBYTES ||
        crypto_box_seal(out, plain, len, head_key) != 0) {
        return 0;
    }
    return len + crypto_box_SEALBYTES;
}

lares_status disc_cached_open(const disc_beacon *b, const uint8_t public_key[DISC_KEY_BYTES],
                              const uint8_t secret_key[DISC_KEY_BYTES], disc_cached *out,
                              int cap, int *n, lares_error *err) {
    *n = 0;
    uint8_t plain[DISC_SEALED_BYTES_MAX];
    for (int i = 0; i < b->n_sealed; i++) {
        const size_t k = b->sealed_len[i];
        if (k <= crypto_box_SEALBYTES || k > DISC_SEALED_BYTES_MAX ||
            crypto_box_seal_open(plain, b->sealed[i], k, public_key, secret_key) != 0) {
            continue; /* sealed for another head */
        }
        return disc_cached_decode(plain, k - crypto_box_SEALBYTES, out, cap, n, err);
    }
    return lares_fail(err, LARES_ENOTFOUND, "no cache summary for this head");
}
