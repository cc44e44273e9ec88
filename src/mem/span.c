/*
 * Spans: the byte ranges of the model file that a layer, a tensor or one
 * expert occupies, as the layer plan (model/plan.h) lists them. Ranges are
 * file offsets, sorted and merged, so a prefetch
 * of a layer becomes a few long sequential reads however its tensors are
 * ordered in the file.
 */
#include "mem/mem.h"

#include <stdio.h>

lares_status mem_span_add(mem_span *s, uint64_t lo, uint64_t hi, lares_error *err) {
    if (lo > hi) {
        return lares_fail(err, LARES_EINVAL, "mem: range [%" PRIu64 ", %" PRIu64 ") is reversed",
                          lo, hi);
    }
    if (lo == hi) {
        return LARES_OK;
    }
    /* first range that ends at or after lo: everything before it stays */
    size_t i = 0;
    while (i < s->n && s->r[i].hi < lo) {
        i++;
    }
    /* ranges from i that start at or before hi merge with [lo, hi) */
    size_t j = i;
    while (j < s->n && s->r[j].lo <= hi) {
        lo = LARES_MIN(lo, s->r[j].lo);
        hi = LARES_MAX(hi, s->r[j].hi);
        j++;
    }
    if (j == i) { /* nothing merged: insert at i */
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 8;
            mem_range *r = lares_realloc(s->r, cap * sizeof *r);
            if (r == NULL) {
                return lares_fail(err, LARES_ENOMEM, "mem: out of memory for %zu ranges", cap);
            }
            s->r = r;
            s->cap = cap;
        }
        memmove(s->r + i + 1, s->r + i, (s->n - i) * sizeof *s->r);
        s->n++;
    } else { /* ranges i..j-1 collapse into slot i */
        memmove(s->r + i + 1, s->r + j, (s->n - j) * sizeof *s->r);
        s->n -= j - i - 1;
    }
    s->r[i].lo = lo;
    s->r[i].hi = hi;
    s->bytes = 0;
    for (size_t k = 0; k < s->n; k++) {
        s->bytes += s->r[k].hi - s->r[k].lo;
    }
    return LARES_OK;
}

lares_status mem_span_add_span(mem_span *s, const mem_span *from, lares_error *err) {
    for (size_t i = 0; i < from->n; i++) {
        lares_status st = mem_span_add(s, from->r[i].lo, from->r[i].hi, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

void mem_span_clear(mem_span *s) {
    s->n = 0;
    s->bytes = 0;
}

void mem_span_free(mem_span *s) {
    if (s == NULL) {
        return;
    }
    lares_free(s->r);
    memset(s, 0, sizeof *s);
}

bool mem_span_overlaps(const mem_span *a, const mem_span *b) {
    size_t i = 0, j = 0;
    while (i < a->n && j < b->n) {
        if (a->r[i].hi <= b->r[j].lo) {
            i++;
        } else if (b->r[j].hi <= a->r[i].lo) {
            j++;
        } else {
            return true;
        }
    }
    return false;
}

mem_range mem_tensor_range(const gguf_file *f, const gguf_tensor *t) {
    /* the reader checked offset + nbytes against the file when it opened it */
    mem_range r = {.lo = gguf_data_offset(f) + t->offset};
    r.hi = r.lo + t->nbytes;
    return r;
}

static lares_status add_range(void *user, uint64_t lo, uint64_t hi, lares_error *err) {
    return mem_span_add(user, lo, hi, err);
}

lares_status mem_span_of_layer(const model_plan *p, int32_t layer, bool with_experts, mem_span *s,
                               lares_error *err) {
    return model_plan_ranges(p, layer, with_experts, add_range, s, err);
}

lares_status mem_span_of_part(const model_plan *p, int32_t layer, model_part part,
                              bool with_experts, mem_span *s, lares_error *err) {
    return model_plan_part_ranges(p, layer, part, with_experts, add_range, s, err);
}

lares_status mem_expert_range(const model_weight *w, int64_t e, mem_range *out, lares_error *err) {
    if (w->t == NULL || w->form != MODEL_FORM_EXPERTS) {
        return lares_fail(err, LARES_EINVAL, "mem: tensor '%s' is not a stack of experts",
                          w->t ? w->t->name : "(absent)");
    }
    if (e < 0 || e >= w->n_stack) {
        return lares_fail(err, LARES_EINVAL, "mem: expert %" PRId64 " of tensor '%s' outside 0..%d",
                          e, w->t->name, (int)w->n_stack - 1);
    }
    out->lo = w->lo + (uint64_t)e * w->bytes; /* e < n_stack: within the tensor */
    out->hi = out->lo + w->bytes;
    return LARES_OK;
}
