/*
 * cluster without sockets (issue 9): the monitor's decision to re-plan and the
 * re-balancing plan, against figures worked out by hand.
 *
 * Monitor: a steady slowdown beyond the threshold makes a re-plan due after
 * exactly warm-up + reference + hold tokens and not one token earlier; a device
 * alternating fast and slow every token, or every few tokens, causes at most
 * a few re-plans in 400 tokens where a monitor without hysteresis makes dozens
 * (no re-plan storm); a drift smaller than min_delta_ms is noise; after a
 * decision the cooldown holds, and doubles when decisions come close together.
 *
 * Balance: a piped ring's token time is the sum of every window's time, so the
 * fastest devices fill first up to their capacity; hand-computed windows for
 * a slowed device, capacities, a device left out, streaming from disk when
 * nothing else fits, and the unrecoverable case.
 */
#include "check.h"
#include "cluster/cluster.h"

static bool has(const char *hay, const char *needle) {
    return strstr(hay, needle) != NULL;
}

/* three devices, one layer each per token; the reference is measured */
static void mon_setup(cluster_monitor *m, const cluster_monitor_opts *o) {
    cluster_monitor_init(m, o, 3);
    const int32_t layers[3] = {1, 2, 2};
    cluster_monitor_plan(m, layers, NULL, false);
}

static void feed(cluster_monitor *m, double d0, double d1, double d2) {
    const double ms[3] = {d0, d1, d2};
    cluster_monitor_token(m, ms, NULL, NULL);
}

static cluster_monitor_opts test_opts(void) {
    cluster_monitor_opts o = cluster_monitor_opts_default();
    o.threshold = 0.3;
    o.warmup_tokens = 2;
    o.hold_tokens = 4;
    o.cooldown_tokens = 10;
    o.alpha = 0.5;
    o.min_delta_ms = 1.0;
    return o;
}

static void check_steady_slowdown(void) {
    const cluster_monitor_opts o = test_opts();
    cluster_monitor m;
    mon_setup(&m, &o);
    /* warm-up (2) and reference (4 tokens at 10 ms per layer) */
    for (int i = 0; i < 6; i++) {
        feed(&m, 10, 10, 10);
        CHECKF(!cluster_monitor_due(&m, NULL, NULL, 0), "due during the reference, token %d", i);
    }
    CHECK(cluster_monitor_ms(&m, 1) == 10);
    /* device 1 becomes 3x slower: the estimate (alpha 0.5) is 20 ms, then 25,
     * 27.5, ... all beyond 13 ms; the hold of 4 tokens makes it due on the 4th */
    for (int i = 0; i < 3; i++) {
        feed(&m, 10, 30, 10);
        CHECKF(!cluster_monitor_due(&m, NULL, NULL, 0), "due after %d slow tokens", i + 1);
    }
    feed(&m, 10, 30, 10);
    int32_t dev = -1;
    char why[256] = "";
    CHECK(cluster_monitor_due(&m, &dev, why, sizeof why));
    CHECKF(dev == 1, "the drifted device is %d", dev);
    /* 10 + 20/2 + 10/4 + 5/8 + 2.5/16 ... : 28.75 after 4 tokens */
    CHECKF(has(why, "28.750 ms per layer") && has(why, "against 10.000") && has(why, "slower") &&
               has(why, "4 tokens"),
           "reason: %s", why);
    CHECK(cluster_monitor_ms(&m, 1) == 28.75);

    /* a faster device is a drift too (both directions) */
    mon_setup(&m, &o);
    for (int i = 0; i < 6; i++) {
        feed(&m, 10, 10, 10);
    }
    for (int i = 0; i < 4; i++) {
        feed(&m, 10, 10, 2);
    }
    CHECK(cluster_monitor_due(&m, &dev, why, sizeof why) && dev == 2 && has(why, "faster"));
}

/* Feeds n tokens of device 1 alternating slow_ms for `spell` tokens and 10 ms
 * for `spell` tokens, re-planning (as the head does) whenever one is due;
 * returns the re-plans. */
static int replans_under(const cluster_monitor_opts *o, int spell, double slow_ms, int n) {
    cluster_monitor m;
    mon_setup(&m, o);
    for (int i = 0; i < 6; i++) {
        feed(&m, 10, 10, 10);
    }
    int replans = 0;
    for (int i = 0; i < n; i++) {
        feed(&m, 10, (i / spell) % 2 ? 10 : slow_ms, 10);
        if (cluster_monitor_due(&m, NULL, NULL, 0)) {
            const int32_t layers[3] = {1, 2, 2};
            cluster_monitor_plan(&m, layers, NULL, true);
            replans++;
        }
    }
    return replans;
}

static void check_flapping(void) {
    const cluster_monitor_opts o = test_opts();
    /* alternating every token and every 3 tokens between 10 and 30 ms: the
     * device is slower on average, so one re-plan is fair; then the reference
     * is the average and the swings stay inside the band */
    const int spells[] = {1, 3};
    for (size_t k = 0; k < LARES_ARRAY_LEN(spells); k++) {
        const int r = replans_under(&o, spells[k], 30, 400);
        CHECKF(r <= 2, "alternating every %d tokens: %d re-plans in 400 tokens", spells[k], r);
    }
    /* spells of 8 tokens outlast the hold (4): each is a real change, but the
     * cooldown doubles with every close decision (10, 20, 40, 80, 160: 310
     * tokens), so 400 tokens see at most 6 decisions plus the first */
    const int r8 = replans_under(&o, 8, 30, 400);
    CHECKF(r8 <= 7, "alternating every 8 tokens: %d re-plans in 400 tokens", r8);
    /* the same feeds without hysteresis (no hold, no cooldown) re-plan over and
     * over: what the hold and the cooldown prevent */
    cluster_monitor_opts naive = o;
    naive.hold_tokens = 1;
    naive.cooldown_tokens = 0;
    naive.warmup_tokens = 0;
    naive.alpha = 1;
    const int r_naive = replans_under(&naive, 8, 30, 400);
    CHECKF(r_naive >= 20, "without hysteresis: only %d re-plans", r_naive);

    /* 0.2 ms of drift per layer on 2 layers is noise below min_delta_ms (1 ms) */
    cluster_monitor m;
    mon_setup(&m, &o);
    for (int i = 0; i < 6; i++) {
        feed(&m, 1, 0.1, 1);
    }
    int due = 0;
    for (int i = 0; i < 50; i++) {
        feed(&m, 1, 0.3, 1);
        due += cluster_monitor_due(&m, NULL, NULL, 0);
    }
    CHECKF(due == 0, "a 0.2 ms drift per layer on 2 layers: due %d times", due);
}

static void check_cooldown(void) {
    const cluster_monitor_opts o = test_opts();
    cluster_monitor m;
    mon_setup(&m, &o);
    for (int i = 0; i < 6; i++) {
        feed(&m, 10, 10, 10);
    }
    for (int i = 0; i < 4; i++) {
        feed(&m, 10, 30, 10);
    }
    CHECK(cluster_monitor_due(&m, NULL, NULL, 0));
    /* the re-plan was weighed and refused: the figures become the reference */
    cluster_monitor_accept(&m);
    CHECK(m.cooldown == 10);
    CHECK(!cluster_monitor_due(&m, NULL, NULL, 0));
    /* the device swings back to 10 ms at once: beyond the threshold again
     * (faster than the new reference), yet nothing is due within the cooldown */
    int first = -1;
    for (int i = 0; i < 40 && first < 0; i++) {
        feed(&m, 10, 10, 10);
        if (cluster_monitor_due(&m, NULL, NULL, 0)) {
            first = i + 1;
        }
    }
    CHECKF(first == 10, "due again after %d tokens (the cooldown is 10)", first);
    /* a second decision within twice the cooldown doubles it */
    cluster_monitor_accept(&m);
    CHECKF(m.cooldown == 20, "cooldown %d after two close decisions", m.cooldown);
    /* a new plan restarts the judgement: warm-up and reference again */
    const int32_t layers[3] = {3, 1, 1};
    cluster_monitor_plan(&m, layers, NULL, true);
    CHECK(m.dev[0].layers == 3 && m.dev[1].ref_ms < 0 && m.dev[1].ewma_ms < 0);
    /* a device left out keeps its last estimate for the planner */
    for (int i = 0; i < 8; i++) {
        feed(&m, 10, 12, 10);
    }
    const double last = cluster_monitor_ms(&m, 1);
    const int32_t without1[3] = {3, 0, 2};
    cluster_monitor_plan(&m, without1, NULL, true);
    CHECKF(last > 10 && cluster_monitor_ms(&m, 1) == last && m.dev[1].layers == 0,
           "left out: %g ms, was %g", cluster_monitor_ms(&m, 1), last);
    CHECK(cluster_monitor_ms(&m, 2) < 0); /* a member starts over */
}

static void check_opts(void) {
    lares_error err = {0};
    cluster_monitor_opts o = cluster_monitor_opts_default();
    CHECK_OK(cluster_monitor_opts_check(&o, &err), &err);
    o.alpha = 0;
    CHECK(cluster_monitor_opts_check(&o, &err) == LARES_EINVAL && has(err.msg, "alpha"));
    o = cluster_monitor_opts_default();
    o.hold_tokens = 0;
    CHECK(cluster_monitor_opts_check(&o, &err) == LARES_EINVAL && has(err.msg, "hold 0"));
    o = cluster_monitor_opts_default();
    o.threshold = -1;
    CHECK(cluster_monitor_opts_check(&o, &err) == LARES_EINVAL && has(err.msg, "threshold"));
}

static void check_balance(void) {
    lares_error err = {0};
    cluster_plan p;
    int32_t members[CLUSTER_MAX_DEVICES];
    const bool stream[4] = {true, true, true, true};

    /* 4 devices, 22 layers, k = 1; device 2 three times slower; each may hold 8
     * layers: shares in proportion to speed, 22 x (1, 1, 1/3, 1) / (10/3) =
     * 6.6, 6.6, 2.2, 6.6: 6, 6, 2, 6 and the two layers left to the largest
     * remainders, the fastest in ring order first: 7, 7, 2, 6 */
    const double ms[4] = {1, 1, 3, 1};
    const int32_t cap8[4] = {8, 8, 8, 8};
    CHECK_OK(cluster_plan_balance(22, 1, 4, ms, cap8, stream, NULL, &p, members, &err), &err);
    CHECKF(p.n_dev == 4 && members[3] == 3 && p.w[0] == 7 && p.w[1] == 7 && p.w[2] == 2 &&
               p.w[3] == 6,
           "slowed device: %d devices, w %d %d %d %d", p.n_dev, p.w[0], p.w[1], p.w[2], p.w[3]);

    /* k = 2 rounds: W = 11 per round (shares 3.3, 3.3, 1.1, 3.3), capacities
     * halve per window (8 / 2 = 4): 3, 3, 1, 3 and one more to device 0 */
    CHECK_OK(cluster_plan_balance(22, 2, 4, ms, cap8, stream, NULL, &p, members, &err), &err);
    CHECKF(p.n_dev == 4 && p.w[0] == 4 && p.w[1] == 3 && p.w[2] == 1 && p.w[3] == 3,
           "two rounds: w %d %d %d %d", p.w[0], p.w[1], p.w[2], p.w[3]);

    /* a device 100 times slower than the others rounds to no layer and leaves
     * (22 x 0.01 / 3.01 = 0.07) */
    const double ms_slow[4] = {1, 100, 1, 1};
    CHECK_OK(cluster_plan_balance(22, 1, 4, ms_slow, cap8, stream, NULL, &p, members, &err), &err);
    CHECKF(p.n_dev == 3 && members[1] == 2 && members[2] == 3 && p.w[0] + p.w[1] + p.w[2] == 22,
           "very slow device: %d devices, w %d %d %d", p.n_dev, p.w[0], p.w[1], p.w[2]);

    /* no memory limits and equal speeds: every device keeps a share, nothing
     * piles on one (issue 15) */
    const double ms_eq[4] = {1, 1, 1, 1};
    const int32_t cap_all[4] = {22, 22, 22, 22};
    CHECK_OK(cluster_plan_balance(22, 1, 4, ms_eq, cap_all, stream, NULL, &p, members, &err), &err);
    CHECKF(p.n_dev == 4 && p.w[0] == 6 && p.w[1] == 6 && p.w[2] == 5 && p.w[3] == 5,
           "equal devices: w %d %d %d %d", p.w[0], p.w[1], p.w[2], p.w[3]);

    /* unknown figures count as the mean of the known: device 3 unknown (mean
     * 5/3 ms); shares 7.5, 7.5, 2.5, 4.5: devices 0 and 1 are filled to 6,
     * the 10 left shared by devices 2 and 3 (3.6, 6.4: device 3 filled), 4 to
     * device 2 */
    const double ms_unknown[4] = {1, 1, 3, -1};
    const int32_t cap6[4] = {6, 6, 6, 6};
    CHECK_OK(cluster_plan_balance(22, 1, 4, ms_unknown, cap6, stream, NULL, &p, members, &err), &err);
    CHECKF(p.n_dev == 4 && p.w[0] == 6 && p.w[1] == 6 && p.w[2] == 4 && p.w[3] == 6,
           "unknown speed: w %d %d %d %d", p.w[0], p.w[1], p.w[2], p.w[3]);

    /* a slow head keeps a share in proportion (22 / 19 = 1.16), the workers
     * 10.4 each and the one layer left to the faster in ring order */
    const double ms_head_slow[3] = {9, 1, 1};
    const int32_t cap_big[3] = {22, 12, 12};
    CHECK_OK(cluster_plan_balance(22, 1, 3, ms_head_slow, cap_big, stream, NULL, &p, members, &err),
             &err);
    CHECKF(p.n_dev == 3 && p.w[0] == 1 && p.w[1] == 11 && p.w[2] == 10, "slow head: w %d %d %d",
           p.w[0], p.w[1], p.w[2]);
    /* the head (candidate 0) stays a member with no layers when it is far slower */
    const double ms_head_slower[3] = {100, 1, 1};
    CHECK_OK(cluster_plan_balance(22, 1, 3, ms_head_slower, cap_big, stream, NULL, &p, members, &err),
             &err);
    CHECKF(p.n_dev == 3 && p.w[0] == 0 && p.w[1] == 11 && p.w[2] == 11,
           "far slower head: w %d %d %d", p.w[0], p.w[1], p.w[2]);

    /* nothing fits in memory: the rest streams from disk on the fastest that can */
    const int32_t cap_small[3] = {4, 4, 4};
    const bool stream_some[3] = {false, true, true};
    const double ms3[3] = {1, 2, 3};
    CHECK_OK(cluster_plan_balance(22, 1, 3, ms3, cap_small, stream_some, NULL, &p, members, &err), &err);
    CHECKF(p.n_dev == 3 && p.w[0] == 4 && p.w[1] == 14 && p.w[2] == 4, "from disk: w %d %d %d",
           p.w[0], p.w[1], p.w[2]);

    /* a failover keeps the survivors' windows (base) and shares only the lost
     * layers: head 1 | a 2 | b 1 | c 1 loses b; a may hold 2 (full), the head
     * is 5x slower than c: b's layer goes to c */
    const int32_t base3[3] = {1, 2, 1};
    const int32_t cap_a2[3] = {22, 2, 22};
    const double ms_fo[3] = {5, 1, 1};
    CHECK_OK(cluster_plan_balance(5, 1, 3, ms_fo, cap_a2, stream, base3, &p, members, &err),
             &err);
    CHECKF(p.n_dev == 3 && p.w[0] == 1 && p.w[1] == 2 && p.w[2] == 2, "failover base: w %d %d %d",
           p.w[0], p.w[1], p.w[2]);
    /* a new candidate (base 0), 4x faster, takes a share of the 2 layers the
     * base leaves (2 x 4/7 = 1.14: one), the other to the head (0.29, the
     * largest remainder in ring order) */
    const int32_t base4[4] = {1, 1, 0, 1};
    const double ms_new[4] = {1, 1, 0.25, 1};
    CHECK_OK(cluster_plan_balance(5, 1, 4, ms_new, cap_all, stream, base4, &p, members, &err),
             &err);
    CHECKF(p.n_dev == 4 && p.w[0] == 2 && p.w[1] == 1 && p.w[2] == 1 && p.w[3] == 1,
           "base with a newcomer: %d devices, w %d %d %d %d", p.n_dev, p.w[0], p.w[1], p.w[2],
           p.w[3]);
    /* a base wider than a round is an error */
    const int32_t base_bad[1] = {6};
    const double ms_one[1] = {1};
    CHECK(cluster_plan_balance(5, 1, 1, ms_one, cap_all, stream, base_bad, &p, members, &err) ==
          LARES_EINVAL);

    /* a lone head that may not hold a layer: unrecoverable, with the figures */
    const int32_t cap_none[1] = {0};
    const bool no_stream[1] = {false};
    const double ms1[1] = {1};
    CHECK(cluster_plan_balance(22, 1, 1, ms1, cap_none, no_stream, NULL, &p, members, &err) ==
              LARES_ERANGE &&
          has(err.msg, "cannot run the model") && has(err.msg, "22 of its 22 layers"));
    /* bad arguments */
    CHECK(cluster_plan_balance(22, 0, 1, ms1, cap_none, no_stream, NULL, &p, members, &err) ==
          LARES_EINVAL);
    CHECK(cluster_plan_balance(22, 1, 0, ms1, cap_none, no_stream, NULL, &p, members, &err) ==
          LARES_EINVAL);
}

int main(void) {
    check_steady_slowdown();
    check_flapping();
    check_cooldown();
    check_opts();
    check_balance();
    return check_finish("cluster_monitor");
}
