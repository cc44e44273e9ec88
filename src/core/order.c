/*
 * The van der Corput order of n indices: index k of the sequence is the k-th
 * bit-reversed number below n. It visits 0, n/2, n/4, 3n/4, ... so every
 * prefix is spread evenly over 0..n-1, and a longer prefix holds a shorter
 * one. The executor pins layers in this order (exec/plan.c) and the planner
 * models it (sched/eval.c).
 */
#include "core/core.h"

int32_t lares_spread_order(int32_t n, int32_t k) {
    int bits = 0;
    while ((1 << bits) < n) {
        bits++;
    }
    for (int32_t i = 0, found = 0; i < (1 << bits); i++) {
        int32_t r = 0;
        for (int b = 0; b < bits; b++) {
            r |= ((i >> b) & 1) << (bits - 1 - b);
        }
        if (r < n && found++ == k) {
            return r;
        }
    }
    return k; /* k >= n: not an index of the sequence */
}
