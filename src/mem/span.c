/*
 * Spans: the byte ranges of the model file that a layer, a tensor or one
 * expert occupies. Ranges are file offsets, sorted and merged, so a prefetch
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

lares_status mem_span_of_layer(const gguf_file *f, int32_t layer, const char *skip, mem_span *s,
                               lares_error *err) {
    char prefix[32];
    const int plen = snprintf(prefix, sizeof prefix, "blk.%d.", (int)layer);
    size_t found = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (strncmp(t->name, prefix, (size_t)plen) != 0) {
            continue;
        }
        if (skip != NULL && strstr(t->name + plen, skip) != NULL) {
            continue;
        }
        const mem_range r = mem_tensor_range(f, t);
        lares_status st = mem_span_add(s, r.lo, r.hi, err);
        if (st != LARES_OK) {
            return st;
        }
        found++;
    }
    if (found == 0) {
        return lares_fail(err, LARES_ENOTFOUND, "%s: no tensor of layer %d (blk.%d.*)",
                          gguf_path(f), (int)layer, (int)layer);
    }
    return LARES_OK;
}

lares_status mem_expert_range(const gguf_file *f, const gguf_tensor *t, int64_t e, mem_range *out,
                              lares_error *err) {
    if (t->n_dims != 3 || t->ne[2] < 1) {
        return lares_fail(err, LARES_EINVAL, "%s: tensor '%s' has %u dimensions, an expert "
                          "tensor has 3", gguf_path(f), t->name, t->n_dims);
    }
    if (e < 0 || e >= t->ne[2]) {
        return lares_fail(err, LARES_EINVAL, "%s: expert %" PRId64 " of tensor '%s' outside 0..%"
                          PRId64, gguf_path(f), e, t->name, t->ne[2] - 1);
    }
    const uint64_t n_expert = (uint64_t)t->ne[2];
    if (t->nbytes % n_expert != 0) {
        return lares_fail(err, LARES_EFORMAT, "%s: tensor '%s' of %" PRIu64 " bytes does not "
                          "split into %" PRIu64 " experts", gguf_path(f), t->name, t->nbytes,
                          n_expert);
    }
    const uint64_t per = t->nbytes / n_expert;
    const mem_range whole = mem_tensor_range(f, t);
    out->lo = whole.lo + (uint64_t)e * per; /* e < n_expert: within nbytes */
    out->hi = out->lo + per;
    return LARES_OK;
}
