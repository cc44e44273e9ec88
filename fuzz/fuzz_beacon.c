/*
 * libFuzzer target: what discovery reads from the network (issue 19). The
 * first byte picks the decoder: 'P' a pairing message (disc_pair_msg_check),
 * 'C' a cache summary as it is once unsealed (disc_cached_decode), anything
 * else a UDP beacon (disc_beacon_decode). A beacon or summary that decodes
 * must encode back to the same bytes (one encoding each), and a beacon's name
 * must be one a device may carry. Seeds: fuzz/corpus_discovery.
 */
#include "discovery/discovery.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) {
        return 0;
    }
    lares_error err;
    if (data[0] == 'P') {
        (void)disc_pair_msg_check(data + 1, size - 1, &err);
        return 0;
    }
    if (data[0] == 'C') {
        disc_cached m[DISC_CACHED_MAX];
        int n = 0;
        if (disc_cached_decode(data + 1, size - 1, m, DISC_CACHED_MAX, &n, &err) != LARES_OK) {
            return 0;
        }
        uint8_t back[DISC_SEALED_BYTES_MAX];
        const size_t k = disc_cached_encode(m, n, back, sizeof back);
        if (k != size - 1 || memcmp(back, data + 1, k) != 0) {
            abort(); /* the decoder accepted what the encoder would not write */
        }
        return 0;
    }
    disc_beacon b;
    if (disc_beacon_decode(data + 1, size - 1, &b, &err) != LARES_OK) {
        return 0;
    }
    uint8_t again[DISC_BEACON_MAX];
    const size_t n = disc_beacon_encode(&b, again, sizeof again);
    if (n != size - 1 || memcmp(again, data + 1, n) != 0 ||
        (b.type == DISC_BEACON_ANNOUNCE && !disc_name_valid(b.name))) {
        abort(); /* the decoder accepted what the encoder would not write */
    }
    return 0;
}
