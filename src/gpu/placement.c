/*
 * Placement of weight matrices on a device: whole layers (`layers`, -ngl) or
 * by GPU affinity (`affinity`, the OATO study): affinity of a move = the time
 * it saves per byte of device memory it takes, where the saving is priced by
 * the cost model (cost.c) against what is already placed, so the copies a
 * placement creates (a matrix alone between CPU neighbours) or removes (the
 * last member of a group, a fusable pair of groups completed) re-rank every
 * remaining candidate after each step.
 */
#include "gpu/gpu_impl.h"

static const char *const method_names[GPU_OFFLOAD_COUNT] = {
    [GPU_OFFLOAD_NONE] = "none",
    [GPU_OFFLOAD_LAYERS] = "layers",
    [GPU_OFFLOAD_AFFINITY] = "affinity",
};

const char *gpu_method_name(gpu_method m) {
    return (unsigned)m < GPU_OFFLOAD_COUNT ? method_names[m] : "?";
}

int gpu_method_from_name(const char *name) {
    for (int i = 0; name != NULL && i < GPU_OFFLOAD_COUNT; i++) {
        if (strcmp(name, method_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

gpu_place_opts gpu_place_opts_default(void) {
    return (gpu_place_opts){.method = GPU_OFFLOAD_AFFINITY, .budget_bytes = 0, .n_layers = -1};
}

uint64_t gpu_budget(uint64_t vram_free_bytes, uint64_t cap_bytes) {
    if (vram_free_bytes == 0) {
        return cap_bytes;
    }
    /* 90 %: the rest is left for the driver, work buffers and other programs */
    const uint64_t b = vram_free_bytes / 10 * 9 + vram_free_bytes % 10 * 9 / 10;
    return cap_bytes > 0 && cap_bytes < b ? cap_bytes : b;
}

void gpu_placement_free(gpu_placement *p) {
    if (p == NULL) {
        return;
    }
    lares_free(p->on_gpu);
    lares_free(p->order);
    lares_free(p);
}

static void place(gpu_placement *p, const gpu_meas *m, size_t i) {
    p->on_gpu[i] = true;
    p->order[p->n_placed++] = i;
    p->weight_bytes += m->t[i].bytes;
}

/* bytes of the layer's tensors; false when one of them has no device kernel */
static bool layer_bytes(const gpu_meas *m, const gpu_layer_span *sp, uint64_t *bytes) {
    uint64_t b = 0;
    bool ok = true;
    for (size_t i = sp->t_lo; i < sp->t_hi; i++) {
        ok &= m->t[i].gpu_ok;
        b += m->t[i].bytes; /* bounded by the file: no overflow from validated input */
    }
    *bytes = b;
    return ok;
}

static lares_status place_layers(const gpu_meas *m, const gpu_place_opts *o,
                                 const gpu_layer_span *sp, gpu_placement *p, lares_error *err) {
    const int32_t nl = m->n_layer;
    if (o->n_layers >= 0) {
        /* exactly n_layers: the last ones; past n_layer every layer and the head (-ngl 99) */
        const bool head = o->n_layers > nl;
        const int32_t first = head ? 0 : nl - o->n_layers;
        uint64_t need = 0;
        for (int32_t l = first; l <= (head ? nl : nl - 1); l++) {
            uint64_t b;
            if (!layer_bytes(m, &sp[l], &b)) {
                return lares_fail(err, LARES_EUNSUPPORTED,
                                  "gpu placement: layer %d has a matrix the device cannot "
                                  "multiply (layers method)",
                                  (int)l);
            }
            need += b;
        }
        if (need > o->budget_bytes) {
            return lares_fail(err, LARES_ERANGE,
                              "gpu placement: %d layers need %" PRIu64
                              " bytes of device memory, the budget is %" PRIu64,
                              (int)o->n_layers, need, o->budget_bytes);
        }
        for (int32_t l = (head ? nl : nl - 1); l >= first; l--) {
            for (size_t i = sp[l].t_lo; i < sp[l].t_hi; i++) {
                place(p, m, i);
            }
        }
        return LARES_OK;
    }
    /* as many as fit, from the last layer down; then the head when every layer fit */
    int32_t l = nl - 1;
    for (; l >= 0; l--) {
        uint64_t b;
        if (!layer_bytes(m, &sp[l], &b) || p->weight_bytes + b > o->budget_bytes) {
            break;
        }
        for (size_t i = sp[l].t_lo; i < sp[l].t_hi; i++) {
            place(p, m, i);
        }
    }
    uint64_t hb;
    if (l < 0 && sp[nl].t_hi > sp[nl].t_lo && layer_bytes(m, &sp[nl], &hb) &&
        p->weight_bytes + hb <= o->budget_bytes) {
        for (size_t i = sp[nl].t_lo; i < sp[nl].t_hi; i++) {
            place(p, m, i);
        }
    }
    return LARES_OK;
}

/* A candidate move's price: the time it saves and the bytes it takes. */
typedef struct move {
    double saved_s;
    uint64_t bytes;
} move;

/* whether tensor i is part of the move: tensor `only`, or else groups g_lo..g_hi */
static bool selected(const gpu_meas *m, size_t i, int32_t g_lo, int32_t g_hi, size_t only) {
    return only != SIZE_MAX ? i == only : (m->t[i].group >= g_lo && m->t[i].group <= g_hi);
}

/* Prices placing the selected, not yet placed tensors of layer span sp, in
 * trial (a scratch copy of the placement that the caller refreshes): false
 * when nothing is left to place or a selected tensor has no device kernel. */
static bool price(const gpu_meas *m, const gpu_layer_span *sp, bool *trial, double base,
                  int32_t g_lo, int32_t g_hi, size_t only, move *mv) {
    uint64_t bytes = 0;
    size_t n = 0;
    for (size_t i = sp->t_lo; i < sp->t_hi; i++) {
        if (!selected(m, i, g_lo, g_hi, only) || trial[i]) {
            continue;
        }
        if (!m->t[i].gpu_ok) {
            return false;
        }
        bytes += m->t[i].bytes;
        trial[i] = true;
        n++;
    }
    if (n == 0) {
        return false;
    }
    mv->saved_s = base - gpu_layer_cost(m, sp, trial);
    mv->bytes = bytes;
    return true;
}

/* the layer span a tensor or group belongs to */
static const gpu_layer_span *span_of(const gpu_layer_span *sp, int32_t layer) {
    return &sp[layer];
}

static lares_status place_affinity(const gpu_meas *m, const gpu_place_opts *o,
                                   const gpu_layer_span *sp, gpu_placement *p, lares_error *err) {
    (void)err;
    /* a scratch copy of the placement to price moves in */
    bool *trial = lares_calloc(m->n_tensors, sizeof(bool));
    double *base = lares_calloc((size_t)m->n_layer + 1, sizeof(double));
    if (trial == NULL || base == NULL) {
        lares_free(trial);
        lares_free(base);
        return lares_fail(err, LARES_ENOMEM, "gpu placement: scratch for %zu tensors",
                          m->n_tensors);
    }
    for (int32_t l = 0; l <= m->n_layer; l++) {
        base[l] = gpu_layer_cost(m, &sp[l], p->on_gpu);
    }
    for (;;) {
        /* candidates in a fixed order: single tensors by index, then the rest of
         * each group, then each fusable pair of groups; strict > keeps the first
         * of equal affinities, so ties go to the lowest tensor index */
        bool have = false;
        double best_aff = 0;
        int32_t best_lo = -1, best_hi = -1;
        size_t best_only = SIZE_MAX;
        const size_t n_cand = m->n_tensors + 2 * m->n_groups + (size_t)m->n_layer;
        for (size_t c = 0; c < n_cand; c++) {
            size_t only = SIZE_MAX;
            int32_t g_lo = -1, g_hi = -1, layer;
            if (c < m->n_tensors) {
                only = c;
                layer = m->t[c].layer;
            } else if (c >= m->n_tensors + 2 * m->n_groups) {
                /* the rest of a layer the device runs whole */
                layer = (int32_t)(c - m->n_tensors - 2 * m->n_groups);
                const gpu_layer_span *s = &sp[layer];
                if (m->layers == NULL || !m->layers[layer].whole_ok || s->g_hi <= s->g_lo) {
                    continue;
                }
                g_lo = (int32_t)s->g_lo;
                g_hi = (int32_t)s->g_hi - 1;
            } else if (c < m->n_tensors + m->n_groups) {
                g_lo = g_hi = (int32_t)(c - m->n_tensors);
                layer = m->groups[g_lo].layer;
            } else {
                g_lo = (int32_t)(c - m->n_tensors - m->n_groups);
                g_hi = g_lo + 1;
                layer = m->groups[g_lo].layer;
                if (!m->groups[g_lo].fuse_next || (size_t)g_hi >= m->n_groups ||
                    m->groups[g_hi].layer != layer) {
                    continue;
                }
            }
            const gpu_layer_span *s = span_of(sp, layer);
            memcpy(trial + s->t_lo, p->on_gpu + s->t_lo, (s->t_hi - s->t_lo) * sizeof(bool));
            move mv;
            if (!price(m, s, trial, base[layer], g_lo, g_hi, only, &mv)) {
                continue;
            }
            if (mv.saved_s <= 0 || mv.bytes > o->budget_bytes - p->weight_bytes) {
                continue;
            }
            const double aff = mv.saved_s / (double)mv.bytes;
            if (!have || aff > best_aff) {
                have = true;
                best_aff = aff;
                best_lo = g_lo;
                best_hi = g_hi;
                best_only = only;
            }
        }
        if (!have) {
            break;
        }
        int32_t layer = best_only != SIZE_MAX ? m->t[best_only].layer : m->groups[best_lo].layer;
        const gpu_layer_span *s = span_of(sp, layer);
        for (size_t i = s->t_lo; i < s->t_hi; i++) {
            if (selected(m, i, best_lo, best_hi, best_only) && !p->on_gpu[i]) {
                place(p, m, i);
            }
        }
        base[layer] = gpu_layer_cost(m, s, p->on_gpu);
    }
    lares_free(trial);
    lares_free(base);
    return LARES_OK;
}

static gpu_placement *placement_new(const gpu_meas *m, const gpu_place_opts *o) {
    gpu_placement *p = lares_calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    p->method = o->method;
    p->n_tensors = m->n_tensors;
    p->budget_bytes = o->budget_bytes;
    p->on_gpu = lares_calloc(m->n_tensors, sizeof(bool));
    p->order = lares_calloc(m->n_tensors, sizeof(size_t));
    if (p->on_gpu == NULL || p->order == NULL) {
        gpu_placement_free(p);
        return NULL;
    }
    return p;
}

static double pass_s(const gpu_meas *m, const gpu_layer_span *sp, const bool *on_gpu) {
    double t = 0;
    for (int32_t l = 0; l <= m->n_layer; l++) {
        t += gpu_layer_cost(m, &sp[l], on_gpu);
    }
    return t;
}

lares_status gpu_place(const gpu_meas *m, const gpu_place_opts *o, gpu_placement **out,
                       lares_error *err) {
    lares_status st = gpu_meas_validate(m, err);
    if (st != LARES_OK) {
        return st;
    }
    if (o == NULL || (unsigned)o->method >= GPU_OFFLOAD_COUNT) {
        return lares_fail(err, LARES_EINVAL, "gpu placement: unknown method %d",
                          o == NULL ? -1 : (int)o->method);
    }
    if (o->n_layers < -1) {
        return lares_fail(err, LARES_EINVAL, "gpu placement: %d layers (need -1 or more)",
                          (int)o->n_layers);
    }
    gpu_layer_span *sp = NULL;
    gpu_placement *p = placement_new(m, o), *alt = NULL;
    bool *none = lares_calloc(m->n_tensors, sizeof(bool));
    if (p == NULL || none == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "gpu placement of %zu tensors: out of memory",
                        m->n_tensors);
        goto fail;
    }
    st = gpu_layer_spans(m, &sp, err);
    if (st != LARES_OK) {
        goto fail;
    }
    if (o->method == GPU_OFFLOAD_LAYERS) {
        st = place_layers(m, o, sp, p, err);
    } else if (o->method == GPU_OFFLOAD_AFFINITY) {
        /* Greedy by ratio is a knapsack heuristic: a few high-ratio small moves can
         * leave room that no big one fits. So affinity also starts from the layers
         * placement (as many whole layers as fit), fills what room is left by
         * affinity, and keeps whichever the cost model prices faster (the first on a
         * tie): never worse than `layers` by the model's own figures. */
        st = place_affinity(m, o, sp, p, err);
        if (st == LARES_OK) {
            const gpu_place_opts lo = {
                .method = GPU_OFFLOAD_LAYERS, .budget_bytes = o->budget_bytes, .n_layers = -1};
            alt = placement_new(m, o);
            st = alt == NULL ? lares_fail(err, LARES_ENOMEM, "gpu placement: out of memory")
                             : place_layers(m, &lo, sp, alt, err);
        }
        if (st == LARES_OK) {
            st = place_affinity(m, o, sp, alt, err);
        }
        if (st == LARES_OK && pass_s(m, sp, alt->on_gpu) < pass_s(m, sp, p->on_gpu)) {
            gpu_placement *t = p;
            p = alt;
            alt = t;
        }
    }
    if (st != LARES_OK) {
        goto fail;
    }
    for (int32_t l = 0; l < m->n_layer; l++) {
        bool all = sp[l].t_hi > sp[l].t_lo;
        for (size_t i = sp[l].t_lo; i < sp[l].t_hi; i++) {
            all &= p->on_gpu[i];
        }
        p->n_layers_whole += all;
    }
    p->t_pass_s = pass_s(m, sp, p->on_gpu);
    p->t_cpu_s = pass_s(m, sp, none);
    lares_free(none);
    lares_free(sp);
    gpu_placement_free(alt);
    *out = p;
    return LARES_OK;
fail:
    lares_free(none);
    lares_free(sp);
    gpu_placement_free(alt);
    gpu_placement_free(p);
    return st;
}

lares_status gpu_budget_for_layers(const gpu_meas *m, int32_t l0, int32_t l1, int32_t n_gpu_layers,
                                   uint64_t *bytes_out, lares_error *err) {
    lares_status st = gpu_meas_validate(m, err);
    if (st != LARES_OK) {
        return st;
    }
    if (l0 < 0 || l1 > m->n_layer || l0 > l1 || n_gpu_layers < 0 || n_gpu_layers > l1 - l0) {
        return lares_fail(err, LARES_EINVAL,
                          "gpu budget: %d gpu layers of window [%d, %d) of a %d-layer model",
                          (int)n_gpu_layers, (int)l0, (int)l1, (int)m->n_layer);
    }
    uint64_t b = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (m->t[i].layer >= l1 - n_gpu_layers && m->t[i].layer < l1) {
            b += m->t[i].bytes;
        }
    }
    *bytes_out = b;
    return LARES_OK;
}
