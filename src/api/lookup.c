/*
 * Prompt lookup drafting (Saxena 2023, "prompt lookup decoding"): when the
 * answer repeats spans of its context (code edits, summaries, extraction),
 * the tokens that followed the most recent earlier occurrence of the
 * context's last few tokens are a good guess of what comes next. No draft
 * model: the guess costs a search over the token history.
 */
#include "api/api.h"

/* the longest suffix tried first; a single token matches too often by chance */
#define LOOKUP_NGRAM_MAX 3
#define LOOKUP_NGRAM_MIN 2

int32_t api_lookup_draft(const int32_t *toks, int32_t n, int32_t max_draft, int32_t *draft) {
    for (int32_t g = LOOKUP_NGRAM_MAX; g >= LOOKUP_NGRAM_MIN; g--) {
        if (n <= g) {
            continue;
        }
        const int32_t *suffix = toks + n - g;
        /* the most recent earlier occurrence with at least one token after it */
        for (int32_t j = n - g - 1; j >= 0; j--) {
            if (memcmp(toks + j, suffix, (size_t)g * sizeof *toks) != 0) {
                continue;
            }
            int32_t d = 0;
            while (d < max_draft && j + g + d < n) {
                draft[d] = toks[j + g + d];
                d++;
            }
            return d;
        }
    }
    return 0;
}
