/*
 * SHA-256 of shipped items (issue 19) through OpenSSL's libcrypto, which uses
 * the CPU's SHA instructions where there are some (about 2 GB/s against a few
 * hundred MB/s for portable code): both the head and the worker hash every
 * byte they ship.
 */
#include "wcache/wcache.h"

#include <openssl/evp.h>

struct wcache_sha256 {
    EVP_MD_CTX *ctx;
};

wcache_sha256 *wcache_sha256_begin(void) {
    wcache_sha256 *s = lares_calloc(1, sizeof *s);
    if (s == NULL) {
        return NULL;
    }
    s->ctx = EVP_MD_CTX_new();
    if (s->ctx == NULL || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(s->ctx);
        lares_free(s);
        return NULL;
    }
    return s;
}

void wcache_sha256_add(wcache_sha256 *s, const void *p, size_t n) {
    if (n > 0) {
        EVP_DigestUpdate(s->ctx, p, n);
    }
}

void wcache_sha256_end(wcache_sha256 *s, uint8_t out[WCACHE_SHA256_BYTES]) {
    unsigned int len = 0;
    EVP_DigestFinal_ex(s->ctx, out, &len);
    EVP_MD_CTX_free(s->ctx);
    lares_free(s);
}

bool wcache_sha256_of(const void *p, size_t n, uint8_t out[WCACHE_SHA256_BYTES]) {
    wcache_sha256 *s = wcache_sha256_begin();
    if (s == NULL) {
        return false;
    }
    wcache_sha256_add(s, p, n);
    wcache_sha256_end(s, out);
    return true;
}

void wcache_hex(const uint8_t sha[WCACHE_SHA256_BYTES], char out[WCACHE_HEX_BYTES + 1]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < WCACHE_SHA256_BYTES; i++) {
        out[2 * i] = digits[sha[i] >> 4];
        out[2 * i + 1] = digits[sha[i] & 15];
    }
    out[WCACHE_HEX_BYTES] = '\0';
}
