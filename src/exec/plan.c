/*
 * The units of the cycle and the residency plan.
 *
 * A unit is what the executor fetches and releases as a whole: one part of a
 * layer or a few consecutive ones (model_part: the attention's input
 * products, its output product, the FFN's input and its output, each with the
 * norms and biases they read), or on the head the output matrix with the
 * final norm. Units of parts keep the window (below) at two units, not two
 * layers: on llama-7b Q4_K_M about 100 MB instead of 260, which the budget
 * pins instead.
 * When all units fit the weight budget nothing is planned. Otherwise the
 * budget B is split into
 *
 *   slack   S = two read-ahead windows (or what B has beyond the least that
 *             works): the kernel reads ahead past the unit being read;
 *   window  W = min(B - S, window_units (default 2) x largest unit): the
 *             streamed bytes that may be in memory at once; two units let the
 *             next one read while this one computes;
 *   pinned  P = B - S - W: units that stay resident, chosen spread evenly over
 *             the cycle (so the disk keeps reading ahead while pinned layers
 *             compute); the output matrix first when it is the largest unit
 *             and fits beside a window of the layers' units (the window is
 *             then window_units x the largest of those);
 *
 * and every pass reads the streamed bytes once: the least any plan can read
 * with B bytes is (total - B), this one reads (total - B + W - slack).
 *
 * MoE models: the experts (most of the bytes, a few of them used per token)
 * get an LRU cache of what the layers leave, at least one layer's experts;
 * the layers themselves are pinned when they fit beside that minimum (they
 * are used by every token, an expert by few), else planned as above in
 * what the minimum cache leaves.
 */
#include "exec/exec_impl.h"

static lares_status add_tensor(exec_local *e, mem_span *s, const char *name, lares_error *err) {
    const gguf_tensor *t = gguf_find_tensor(e->m->file, name);
    if (t == NULL) {
        return LARES_OK; /* optional parts; model_load checked the required ones */
    }
    const mem_range r = mem_tensor_range(e->m->file, t);
    return mem_span_add(s, r.lo, r.hi, err);
}

static lares_status check_windows(exec_local *e, lares_error *err) {
    for (int32_t w = 0; w < e->n_windows; w++) {
        const exec_window *win = &e->windows[w];
        if (win->l0 < e->kv->l0 || win->l1 > e->kv->l1 || win->l0 >= win->l1) {
            return lares_fail(err, LARES_EINVAL,
                              "exec: window %d [%d, %d) outside the KV cache's layers [%d, %d)", w,
                              win->l0, win->l1, e->kv->l0, e->kv->l1);
        }
        for (int32_t l = win->l0; l < win->l1; l++) {
            if (e->unit_of_layer[l] >= 0) {
                return lares_fail(err, LARES_EINVAL, "exec: layer %d is in two windows", l);
            }
            e->unit_of_layer[l] = 0; /* a mark; numbered below */
        }
    }
    return LARES_OK;
}

lares_status exec_units_build(exec_local *e, lares_error *err) {
    const model *m = e->m;
    const int32_t n_layer = m->hp.n_layer;
    e->out_unit = -1;
    e->part_layer = -1;
    e->part_unit = -1;
    e->unit_of_layer = lares_alloc_array((size_t)n_layer, sizeof *e->unit_of_layer);
    e->unit_of_part =
        lares_alloc_array((size_t)n_layer * MODEL_PART_COUNT, sizeof *e->unit_of_part);
    if (e->unit_of_layer == NULL || e->unit_of_part == NULL) {
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory");
    }
    for (int32_t l = 0; l < n_layer; l++) {
        e->unit_of_layer[l] = -1;
        for (int p = 0; p < MODEL_PART_COUNT; p++) {
            e->unit_of_part[(size_t)l * MODEL_PART_COUNT + (size_t)p] = -1;
        }
    }
    lares_status st = check_windows(e, err);
    if (st != LARES_OK) {
        return st;
    }
    int32_t n = e->o.head ? 1 : 0;
    for (int32_t w = 0; w < e->n_windows; w++) {
        n += (e->windows[w].l1 - e->windows[w].l0) * MODEL_PART_COUNT; /* at most */
    }
    if (n == 0) {
        return LARES_OK;
    }
    e->units = lares_calloc((size_t)n, sizeof *e->units);
    if (e->units == NULL) {
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory for %d units", n);
    }
    /* consecutive parts of a layer share a unit while together they are no
     * larger than the largest part (llama-7b: the attention's input and
     * output products, 33 + 9 MB, beside gate and up, 50): fewer, fuller
     * reads for the same window */
    uint64_t part_max = 0;
    for (int32_t w = 0; w < e->n_windows; w++) {
        for (int32_t l = e->windows[w].l0; l < e->windows[w].l1; l++) {
            for (int p = 0; p < MODEL_PART_COUNT; p++) {
                part_max =
                    LARES_MAX(part_max, model_plan_part_bytes(m->plan, l, (model_part)p, false));
            }
        }
    }
    for (int32_t w = 0; w < e->n_windows; w++) {
        for (int32_t l = e->windows[w].l0; l < e->windows[w].l1; l++) {
            e->unit_of_layer[l] = e->n_units;
            exec_unit *u = NULL;
            for (int p = 0; p < MODEL_PART_COUNT; p++) {
                const uint64_t b = model_plan_part_bytes(m->plan, l, (model_part)p, false);
                if (b == 0) {
                    continue; /* no weight: no unit */
                }
                if (u == NULL || u->span.bytes + b > part_max) {
                    u = &e->units[e->n_units++];
                    u->layer = l;
                    u->part_lo = (model_part)p;
                    atomic_init(&u->loaded, false);
                }
                u->part_hi = (model_part)p;
                /* an MoE layer's experts are read per choice (experts.c), not with the layer */
                if ((st = mem_span_of_part(m->plan, l, (model_part)p, false, &u->span, err)) !=
                    LARES_OK) {
                    return st;
                }
                e->unit_of_part[(size_t)l * MODEL_PART_COUNT + (size_t)p] =
                    (int32_t)(u - e->units);
            }
        }
    }
    if (e->o.head) {
        exec_unit *u = &e->units[e->n_units];
        u->layer = -1;
        atomic_init(&u->loaded, false);
        e->out_unit = e->n_units++;
        if ((st = add_tensor(e, &u->span, m->output_tied ? "token_embd.weight" : "output.weight",
                             err)) != LARES_OK ||
            (st = add_tensor(e, &u->span, "output_norm.weight", err)) != LARES_OK) {
            return st;
        }
        if (!m->output_tied && (st = add_tensor(e, &e->embd, "token_embd.weight", err))) {
            return st;
        }
    }
    return LARES_OK;
}

void exec_units_free(exec_local *e) {
    for (int32_t i = 0; i < e->n_units; i++) {
        mem_span_free(&e->units[i].span);
    }
    lares_free(e->units);
    e->units = NULL;
    e->n_units = 0;
    lares_free(e->unit_of_layer);
    e->unit_of_layer = NULL;
    lares_free(e->unit_of_part);
    e->unit_of_part = NULL;
    mem_span_free(&e->embd);
}

static const char *unit_name(const exec_unit *u, char *buf, size_t cap) {
    static const char *const parts[MODEL_PART_COUNT] = {
        [MODEL_PART_ATTN_IN] = "attention input", [MODEL_PART_ATTN_OUT] = "attention output",
        [MODEL_PART_FFN_IN] = "FFN input", [MODEL_PART_FFN_OUT] = "FFN output"};
    if (u->layer < 0) {
        snprintf(buf, cap, "the output matrix");
    } else if (u->part_lo == u->part_hi) {
        snprintf(buf, cap, "the %s of layer %d", parts[u->part_lo], u->layer);
    } else {
        snprintf(buf, cap, "the %s to %s of layer %d", parts[u->part_lo], parts[u->part_hi],
                 u->layer);
    }
    return buf;
}

/* Units are pinned in van der Corput order: any prefix is spread evenly over
 * the cycle (the disk keeps reading while pinned units compute), and a larger
 * budget pins a superset of what a smaller one pinned (a re-plan never drops
 * a resident unit to read another). */
static void choose_pinned(const exec_local *e, uint64_t pin_budget, bool *pinned) {
    uint64_t left = pin_budget;
    for (int32_t k = 0; k < e->n_units; k++) {
        const int32_t i = lares_spread_order(e->n_units, k);
        if (pinned[i]) {
            continue; /* chosen before */
        }
        pinned[i] = e->units[i].span.bytes <= left;
        left -= pinned[i] ? e->units[i].span.bytes : 0;
    }
}

lares_status exec_plan_compute(const exec_local *e, uint64_t budget, bool *pinned,
                               exec_plan_info *p, lares_error *err) {
    memset(p, 0, sizeof *p);
    p->n_units = e->n_units;
    uint64_t units_bytes = 0;
    int32_t largest = -1;
    for (int32_t i = 0; i < e->n_units; i++) {
        const uint64_t b = e->units[i].span.bytes;
        units_bytes += b;
        pinned[i] = false;
        if (largest < 0 || b > e->units[largest].span.bytes) {
            largest = i;
        }
    }
    const uint64_t largest_bytes = largest >= 0 ? e->units[largest].span.bytes : 0;
    const exec_experts *x = &e->x;
    p->expert_bytes = x->bytes;
    p->weight_bytes = units_bytes + x->bytes + e->embd.bytes;
    p->min_budget_bytes = largest_bytes + x->layer_max;
    if (budget == 0 || p->weight_bytes <= budget || e->n_units == 0) {
        return LARES_OK; /* everything fits: the OS page cache does best alone */
    }
    if (budget < p->min_budget_bytes) {
        char name[96];
        return lares_fail(err, LARES_ERANGE,
                          "%s: a weight budget of %" PRIu64 " bytes is below the %" PRIu64
                          " bytes of %s%s, the least that can run",
                          gguf_path(e->m->file), budget, p->min_budget_bytes,
                          unit_name(&e->units[largest], name, sizeof name),
                          x->layer_max ? " with a layer's experts" : "");
    }
    p->streaming = true;
    /* the kernel's read-ahead may run up to two read-ahead windows past the
     * unit being read (into the next one): keep room for that when there is;
     * WILLNEED reads exactly what it is asked */
    const bool exact = e->o.read_method == MEM_READ_FADVISE_POPULATE;
    const uint64_t slack =
        exact ? 0 : LARES_MIN(2 * (uint64_t)e->mf.ra_chunk, budget - p->min_budget_bytes);
    const uint64_t usable = budget - slack;
    uint64_t dense_budget = usable;
    if (x->bytes > 0) {
        /* pin every layer if that leaves the experts a layer's worth, else plan
         * the layers in what the least expert cache leaves */
        dense_budget = units_bytes + x->layer_max <= usable ? units_bytes : usable - x->layer_max;
    }
    /* two units unless told: the next one reads while this one computes */
    const uint64_t per_window = e->o.window_units > 0 ? (uint64_t)e->o.window_units : 2;
    uint64_t window = largest_bytes;
    if (!lares_mul_u64(window, per_window, &window) || window > dense_budget) {
        window = dense_budget;
    }
    /* The output matrix outweighs any part of a layer (llama-7b: 107 MB of
     * Q6_K against parts of at most 50): pinned first where the budget holds
     * it beside a window of the layers' parts, it leaves the window a
     * layer's two parts, not two output matrices. */
    uint64_t pin_first = 0;
    if (e->out_unit >= 0 && e->units[e->out_unit].span.bytes == largest_bytes) {
        uint64_t part_max = 0;
        for (int32_t i = 0; i < e->n_units; i++) {
            part_max = i != e->out_unit ? LARES_MAX(part_max, e->units[i].span.bytes) : part_max;
        }
        uint64_t small = part_max;
        if (part_max < largest_bytes && lares_mul_u64(small, per_window, &small) &&
            small + largest_bytes <= dense_budget && small < window) {
            window = small;
            pin_first = largest_bytes;
            pinned[e->out_unit] = true;
        }
    }
    if (dense_budget >= units_bytes) {
        window = 0; /* every layer stays */
    }
    choose_pinned(e, dense_budget - window - pin_first, pinned);
    int32_t n_streamed = 0;
    for (int32_t i = 0; i < e->n_units; i++) {
        if (pinned[i]) {
            p->n_pinned++;
            p->pinned_bytes += e->units[i].span.bytes;
        } else {
            n_streamed++;
            p->stream_bytes += e->units[i].span.bytes;
        }
    }
    p->window_bytes = n_streamed > 0 ? dense_budget - p->pinned_bytes : 0;
    p->window_units = e->o.window_units > 0 ? LARES_MIN(e->o.window_units, n_streamed) : 0;
    p->expert_cache_bytes = x->bytes > 0 ? usable - p->pinned_bytes - p->window_bytes : 0;
    p->readahead_slack_bytes = slack;
    return LARES_OK;
}
