/*
 * Whether drafts pay (issue 20), in a batch and in one session. A drafted
 * token is a row more in the target's pass and, from a draft model, a draft
 * pass more; it pays when what it saves in passes is worth more. With one
 * sequence on a CPU a pass of a few rows of a dense model costs about what
 * one row does (the weights are read once), so drafts pay; with several
 * sequences the rows may already fill the cores: llama-1b Q4_0 on 2 cores, 4
 * sequences, passes of 4 rows took 36 ms and of 32 rows 213 ms, so even
 * drafts all accepted made 4 streams slower (102 against 111 tokens/s), and
 * no straight line of time against rows fits both the few-row product and
 * the GEMM. A mixture of experts' pass of D + 1 rows reads the union of
 * their experts, up to D + 1 times one row's; a tiny model computes rather
 * than reads, and its rows cost what they compute.
 *
 * So it is measured instead of modelled: for each number of generating
 * sequences (one session: 1) the tokens per millisecond of the passes with
 * drafts and of those without (generation only, drafting included in their
 * time), each tried twice, then the faster taken, and the other tried again
 * after DRAFT_EXPLORE passes that together took DRAFT_EXPLORE times what a pass
 * of the other takes, so that both figures stay current and trying the other
 * takes at most about 1/33 of the time: a pass with drafts took 7.5 times one
 * without on a Zen 5 (4 sequences, llama-1b Q4_0, 7 drafts each), so with the
 * other tried after any 32 passes the 31 passes with drafts of 144 (the first
 * tries, the crossings of the two figures, one in 32 after) held 69 % of the
 * generation time where drafts were 6 % slower a token (docs/performance.md,
 * "Session 38"). Only
 * greedy sequences follow it: their tokens are plain decoding's whether they
 * draft or not, where a sampled sequence's tokens depend on its drafts (the
 * same distribution, other draws), and its output must not depend on timing.
 */
#include "api/api.h"

#define DRAFT_EXPLORE 32
#define RATE_KEEP     0.7 /* weight of the older passes in a figure */

bool api_draft_rates_choose(api_draft_rates *p, int32_t n_gen) {
    const int32_t g = n_gen < API_DRAFT_RATES_MAX ? n_gen : API_DRAFT_RATES_MAX - 1;
    bool on;
    if (p->count[1][g] < 2) {
        on = true;
    } else if (p->count[0][g] < 2) {
        on = false;
    } else {
        on = p->rate[1][g] >= p->rate[0][g];
        if (on == p->last_on && ++p->streak >= DRAFT_EXPLORE &&
            p->spent_ms >= DRAFT_EXPLORE * p->step_ms[!on][g]) {
            on = !on; /* the other, now and then */
        }
    }
    if (on != p->last_on) {
        p->streak = 0;
        p->spent_ms = 0;
    }
    p->last_on = on;
    return on;
}

void api_draft_rates_note(api_draft_rates *p, int32_t n_gen, bool on, int32_t tokens, double ms) {
    if (ms <= 0 || tokens <= 0) {
        return;
    }
    const int32_t g = n_gen < API_DRAFT_RATES_MAX ? n_gen : API_DRAFT_RATES_MAX - 1;
    const double r = tokens / ms;
    double *rate = &p->rate[on][g], *step = &p->step_ms[on][g];
    *rate = p->count[on][g] == 0 ? r : RATE_KEEP * *rate + (1 - RATE_KEEP) * r;
    *step = p->count[on][g] == 0 ? ms : RATE_KEEP * *step + (1 - RATE_KEEP) * ms;
    p->count[on][g]++;
    p->spent_ms += ms;
}
