/*
 * The short authentication code of a pairing (docs/ring.md "Zero-setup
 * ring"): SHA-256 (libsodium) over a label, both public keys in byte order
 * (the same on both sides whoever computes it) and both nonces in role order
 * (the head's, then the worker's). The head commits to its nonce before it
 * sees the worker's, so neither side can steer the code towards a value it
 * wants; a forger in the middle gets the code right by chance once in 10^6.
 */
#include "discovery/discovery.h"

#include <sodium.h>

#define SAS_LABEL "lares pairing code v1"

uint32_t disc_sas(const uint8_t head_key[DISC_KEY_BYTES], const uint8_t worker_key[DISC_KEY_BYTES],
                  const uint8_t head_nonce[DISC_NONCE_BYTES],
                  const uint8_t worker_nonce[DISC_NONCE_BYTES]) {
    const bool head_first = memcmp(head_key, worker_key, DISC_KEY_BYTES) <= 0;
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, (const uint8_t *)SAS_LABEL, sizeof SAS_LABEL - 1);
    crypto_hash_sha256_update(&st, head_first ? head_key : worker_key, DISC_KEY_BYTES);
    crypto_hash_sha256_update(&st, head_first ? worker_key : head_key, DISC_KEY_BYTES);
    crypto_hash_sha256_update(&st, head_nonce, DISC_NONCE_BYTES);
    crypto_hash_sha256_update(&st, worker_nonce, DISC_NONCE_BYTES);
    uint8_t h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&st, h);
    const uint32_t v = ((uint32_t)h[0] << 24) | ((uint32_t)h[1] << 16) | ((uint32_t)h[2] << 8) | h[3];
    return v % 1000000u;
}

void disc_commit(const uint8_t nonce[DISC_NONCE_BYTES], uint8_t out[32]) {
    crypto_hash_sha256(out, nonce, DISC_NONCE_BYTES);
}

void disc_random(uint8_t *buf, size_t n) {
    if (sodium_init() < 0) { /* cannot happen once libsodium loaded; randombytes stays usable */
        lares_log(LARES_LOG_WARN, "discovery: sodium_init failed");
    }
    randombytes_buf(buf, n);
}
