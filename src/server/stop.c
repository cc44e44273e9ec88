/*
 * Stop strings over streamed text. Text is released to the client only when
 * no stop string can start in it: a stop string may arrive split over
 * several tokens, so a tail that is a prefix of one is held back until the
 * next token decides. When one occurs, the text before it is the answer and
 * the stop string itself is not sent (as OpenAI does).
 */
#include "server/server_impl.h"

#include <string.h>

bool server_stop_find(char *const *stop, const size_t *stop_len, size_t n_stop, const char *text,
                      size_t n, size_t *cut, size_t *safe) {
    bool found = false;
    size_t first = n;
    for (size_t k = 0; k < n_stop; k++) {
        const size_t m = stop_len[k];
        for (size_t i = 0; m > 0 && i + m <= n && i < first; i++) {
            if (text[i] == stop[k][0] && memcmp(text + i, stop[k], m) == 0) {
                first = i;
                found = true;
                break;
            }
        }
    }
    if (found) {
        *cut = first;
        return true;
    }
    /* the earliest position whose tail is a proper prefix of a stop string */
    size_t hold = n;
    for (size_t k = 0; k < n_stop; k++) {
        const size_t m = stop_len[k];
        size_t from = n > m ? n - m + 1 : 0; /* tails shorter than the stop string */
        for (size_t i = from; i < hold; i++) {
            if (memcmp(text + i, stop[k], n - i) == 0) {
                hold = i;
                break;
            }
        }
    }
    *safe = hold;
    return false;
}
