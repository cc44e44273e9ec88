/*
 * libFuzzer target: what discovery reads from the network (issue 19). The
 * first byte picks the decoder: 'P' a pairing message (disc_pair_msg_check),
 * anything else a UDP beacon (disc_beacon_decode). A beacon that decodes must
 * encode back to the same bytes (one encoding per beacon), and its name must
 * be one a device may carry. Seeds: fuzz/corpus_discovery.
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
