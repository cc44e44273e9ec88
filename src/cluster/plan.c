/*
 * The plan of a ring: layers per window per device, and the windows each
 * device runs in each round (docs/ring.md, ../shared/docs/scheduling.md).
 * Head and workers derive every window from the same few numbers with the
 * functions here, so they cannot disagree about who runs what.
 */
#include "cluster/cluster.h"

lares_status cluster_plan_check(const cluster_plan *p, lares_error *err) {
    if (p->n_dev < 1 || p->n_dev > CLUSTER_MAX_DEVICES) {
        return lares_fail(err, LARES_EINVAL, "plan: %d devices (1 to %d)", p->n_dev,
                          CLUSTER_MAX_DEVICES);
    }
    if (p->n_layer < 1 || p->n_layer > CLUSTER_MAX_LAYERS) {
        return lares_fail(err, LARES_EINVAL, "plan: a model of %d layers (1 to %d)", p->n_layer,
                          CLUSTER_MAX_LAYERS);
    }
    int64_t width = 0;
    for (int32_t d = 0; d < p->n_dev; d++) {
        if (p->w[d] < (d == 0 ? 0 : 1) || p->w[d] > p->n_layer) {
            return lares_fail(err, LARES_EINVAL,
                              "plan: device %d has a window of %d layers (%s 1 to %d)", d, p->w[d],
                              d == 0 ? "the head: 0," : "a worker:", p->n_layer);
        }
        if (p->n[d] < 0 || p->n[d] > p->w[d]) {
            return lares_fail(err, LARES_EINVAL,
                              "plan: device %d puts %d of its %d window layers on a gpu", d,
                              p->n[d], p->w[d]);
        }
        width += p->w[d];
    }
    if (width < 1 || width > p->n_layer) {
        return lares_fail(err, LARES_EINVAL,
                          "plan: the windows add up to %" PRId64 " layers per round; the model "
                          "has %d (1 to %d allowed)",
                          width, p->n_layer, p->n_layer);
    }
    return LARES_OK;
}

int32_t cluster_plan_width(const cluster_plan *p) {
    int32_t width = 0;
    for (int32_t d = 0; d < p->n_dev; d++) {
        width += p->w[d];
    }
    return width;
}

int32_t cluster_plan_rounds(const cluster_plan *p) {
    const int32_t width = cluster_plan_width(p);
    return width > 0 ? (p->n_layer + width - 1) / width : 0;
}

static int32_t offset_of(const cluster_plan *p, int32_t dev) {
    int32_t off = 0;
    for (int32_t d = 0; d < dev; d++) {
        off += p->w[d];
    }
    return off;
}

bool cluster_plan_window(const cluster_plan *p, int32_t dev, int32_t r, int32_t *l0, int32_t *l1) {
    const int32_t width = cluster_plan_width(p);
    int64_t a = (int64_t)r * width + offset_of(p, dev);
    int64_t b = a + p->w[dev];
    if (a > p->n_layer) {
        a = p->n_layer;
    }
    if (b > p->n_layer) {
        b = p->n_layer; /* the last round is cut at the model's end */
    }
    *l0 = (int32_t)a;
    *l1 = (int32_t)b;
    return b > a;
}

int32_t cluster_plan_layers_of(const cluster_plan *p, int32_t dev) {
    int32_t n = 0, l0, l1;
    for (int32_t r = 0; r < cluster_plan_rounds(p); r++) {
        if (cluster_plan_window(p, dev, r, &l0, &l1)) {
            n += l1 - l0;
        }
    }
    return n;
}

bool cluster_plan_owner(const cluster_plan *p, int32_t layer, int32_t *dev, int32_t *round) {
    const int32_t width = cluster_plan_width(p);
    if (layer < 0 || layer >= p->n_layer || width < 1) {
        return false;
    }
    const int32_t r = layer / width;
    for (int32_t d = 0; d < p->n_dev; d++) {
        int32_t l0, l1;
        if (cluster_plan_window(p, d, r, &l0, &l1) && l0 == layer) {
            *dev = d;
            *round = r;
            return true;
        }
    }
    return false;
}

lares_status cluster_plan_even(int32_t n_dev, int32_t n_layer, int32_t rounds, cluster_plan *out,
                               lares_error *err) {
    if (rounds == 0) {
        rounds = 1;
    }
    if (n_dev < 1 || n_dev > CLUSTER_MAX_DEVICES || n_layer < 1 || rounds < 1 || rounds > n_layer) {
        return lares_fail(err, LARES_EINVAL,
                          "even split: %d devices, %d layers, %d rounds (1 to %d rounds)", n_dev,
                          n_layer, rounds, n_layer);
    }
    const int32_t width = (n_layer + rounds - 1) / rounds;
    if (width < n_dev) {
        return lares_fail(err, LARES_EINVAL,
                          "even split: %d rounds of a %d-layer model leave %d layers per round "
                          "for %d devices; use fewer rounds or devices",
                          rounds, n_layer, width, n_dev);
    }
    memset(out, 0, sizeof *out);
    out->n_layer = n_layer;
    out->n_dev = n_dev;
    for (int32_t d = 0; d < n_dev; d++) {
        out->w[d] = width / n_dev + (d < width % n_dev ? 1 : 0);
    }
    if (cluster_plan_rounds(out) != rounds) {
        return lares_fail(err, LARES_EINVAL,
                          "even split: %d layers cannot be cut into %d rounds of equal width "
                          "(%d per round gives %d rounds)",
                          n_layer, rounds, width, cluster_plan_rounds(out));
    }
    return cluster_plan_check(out, err);
}

void cluster_plan_describe(const cluster_plan *p, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int32_t d = 0; d < p->n_dev && len < cap; d++) {
        int n = d == 0 ? snprintf(buf, cap, "head %d", p->w[0])
                       : snprintf(buf + len, cap - len, " | dev%d %d", d, p->w[d]);
        if (n < 0) {
            return;
        }
        len += (size_t)n;
    }
    if (len < cap) {
        snprintf(buf + len, cap - len, " (%d layers per round, k = %d)", cluster_plan_width(p),
                 cluster_plan_rounds(p));
    }
}

lares_status cluster_plan_balance(int32_t n_layer, int32_t rounds, int32_t n,
                                  const double *ms_per_layer, const int32_t *cap_layers,
                                  const bool *can_stream, const int32_t *base, cluster_plan *out,
                                  int32_t *members, lares_error *err) {
    if (n < 1 || n > CLUSTER_MAX_DEVICES || n_layer < 1 || n_layer > CLUSTER_MAX_LAYERS ||
        rounds < 1 || rounds > n_layer) {
        return lares_fail(err, LARES_EINVAL, "balance: %d devices, %d layers, %d rounds", n,
                          n_layer, rounds);
    }
    const int32_t width = (n_layer + rounds - 1) / rounds;
    /* unknown speeds count as the mean of the known ones */
    double known = 0, t[CLUSTER_MAX_DEVICES];
    int32_t n_known = 0;
    for (int32_t i = 0; i < n; i++) {
        if (ms_per_layer[i] >= 0) {
            known += ms_per_layer[i];
            n_known++;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        t[i] = ms_per_layer[i] >= 0 ? ms_per_layer[i] : n_known > 0 ? known / n_known : 1.0;
        t[i] = t[i] > 0 ? t[i] : 1e-9;
    }
    /* candidates fastest first; ties keep ring order (a stable insertion sort) */
    int32_t order[CLUSTER_MAX_DEVICES];
    for (int32_t i = 0; i < n; i++) {
        int32_t j = i;
        while (j > 0 && t[order[j - 1]] > t[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    /* Each round's W layers (beyond the base windows, which stay) shared in
     * proportion to speed (1 / ms per layer), each device up to its capacity
     * per round (water-filling: a device whose share exceeds its room is
     * filled and the rest shared again). The sum of the windows' times would
     * be least with everything on the fastest, but a measured figure holds
     * only near the load it was measured at, and one device holding every
     * layer is one device's memory and one loss from a stall (issue 15):
     * every live device gets a share, and one far slower than the others
     * rounds to none. */
    int32_t w[CLUSTER_MAX_DEVICES] = {0};
    int32_t room[CLUSTER_MAX_DEVICES];
    bool open[CLUSTER_MAX_DEVICES];
    int32_t left = width;
    for (int32_t i = 0; i < n; i++) {
        const int32_t cap = LARES_MAX(cap_layers[i], 0) / rounds;
        /* a base is a preference, the capacity a limit */
        w[i] = base != NULL ? LARES_MIN(LARES_MAX(base[i], 0), cap) : 0;
        if (base != NULL && base[i] > width) {
            return lares_fail(err, LARES_EINVAL, "balance: a base window of %d layers, %d a round",
                              w[i], width);
        }
        left -= w[i];
        room[i] = LARES_MAX(cap - w[i], 0);
        open[i] = room[i] > 0;
    }
    if (left < 0) {
        return lares_fail(err, LARES_EINVAL, "balance: base windows of %d layers, %d a round",
                          width - left, width);
    }
    for (bool capped = true; capped && left > 0;) {
        capped = false;
        double sum = 0;
        for (int32_t i = 0; i < n; i++) {
            sum += open[i] ? 1.0 / t[i] : 0;
        }
        for (int32_t i = 0; i < n && sum > 0; i++) {
            if (open[i] && left * (1.0 / t[i]) / sum >= room[i]) {
                w[i] += room[i];
                left -= room[i];
                room[i] = 0;
                open[i] = false;
                capped = true;
            }
        }
        if (capped) {
            continue;
        }
        if (sum <= 0) {
            break;
        }
        /* no share reaches its room: whole layers by the largest remainder,
         * ties to the faster (then to ring order) */
        double rest[CLUSTER_MAX_DEVICES];
        int32_t given = 0;
        for (int32_t i = 0; i < n; i++) {
            const double share = open[i] ? left * (1.0 / t[i]) / sum : 0;
            w[i] += open[i] ? (int32_t)share : 0;
            given += open[i] ? (int32_t)share : 0;
            rest[i] = open[i] ? share - (int32_t)share : -1;
        }
        for (int32_t extra = left - given; extra > 0; extra--) {
            int32_t best = -1;
            for (int32_t k = 0; k < n; k++) {
                const int32_t i = order[k];
                if (rest[i] >= 0 && (best < 0 || rest[i] > rest[best])) {
                    best = i;
                }
            }
            if (best < 0) {
                break;
            }
            w[best]++;
            given++;
            rest[best] = -1;
        }
        left -= given;
    }
    /* what does not fit in memory runs from disk on the fastest that can stream */
    for (int32_t k = 0; k < n && left > 0; k++) {
        const int32_t i = order[k];
        if (can_stream[i] && cap_layers[i] > 0) {
            w[i] += left;
            left = 0;
        }
    }
    if (left > 0) {
        return lares_fail(err, LARES_ERANGE,
                          "the %d remaining device%s cannot run the model: %d of its %d layers "
                          "per round fit nowhere, even from disk",
                          n, n == 1 ? "" : "s", left, width);
    }
    memset(out, 0, sizeof *out);
    out->n_layer = n_layer;
    for (int32_t i = 0; i < n; i++) {
        if (i == 0 || w[i] > 0) {
            members[out->n_dev] = i;
            out->w[out->n_dev++] = w[i];
        }
    }
    return cluster_plan_check(out, err);
}

int32_t cluster_pipe_groups(const double *wait_ms, size_t wait_stride, const double *row_ms,
                            int32_t n_dev, int32_t n_rows, int32_t most, int32_t current) {
    most = LARES_MAX(1, LARES_MIN(most, CLUSTER_MAX_FLIGHT));
    current = LARES_MAX(1, LARES_MIN(current, most));
    double cost[CLUSTER_MAX_FLIGHT + 1];
    int32_t best = 1;
    for (int32_t g = 1; g <= most; g++) {
        const double rows_g = (double)((n_rows + g - 1) / g);
        const double *wait = wait_ms + (size_t)(g - 1) * wait_stride;
        double busy = 0, trip = 0;
        for (int32_t d = 0; d < n_dev; d++) {
            busy = LARES_MAX(busy, g * wait[d] + row_ms[d] * n_rows);
            trip += wait[d] + row_ms[d] * rows_g;
        }
        cost[g] = LARES_MAX(busy, trip);
        best = cost[g] < cost[best] ? g : best; /* ties: fewer groups, fewer reads */
    }
    return cost[best] < 0.9 * cost[current] ? best : current;
}
