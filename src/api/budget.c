/*
 * A session's memory budget, turned into the executor's weight budget.
 *
 * The budget covers everything the session keeps in memory: the library's
 * heap (vocabulary, working buffers: lares_mem_in_use counts them all), the
 * part of the KV cache the positions in use touch (the OS commits its pages
 * as positions fill), the sampler's arrays, page tables for the mapping, and
 * a reserve for the program itself (code, libraries, stacks, allocator
 * slack). What is left is for weights. At creation the whole context is
 * counted, so a budget that could not hold the largest layer beside a full
 * KV cache is refused with the minimum that would work; each generate call
 * then plans for the positions it can reach, and the executor pins more
 * while the context is short.
 */
#include "api/api.h"
#include "mem/mem.h"

/* the sampler's per-token arrays: candidates and counts */
#define SAMPLER_BYTES_PER_TOKEN 16
#define KV_PAGE_BYTES 4096
/* rounding of the minimum a refusal names */
#define MIN_MARGIN_BYTES ((uint64_t)64 << 10)

static double mib(uint64_t b) {
    return (double)b / 1048576.0;
}

/* Bytes of the KV cache that `positions` positions touch in `layers` of its
 * layers: each layer's K and V rows are contiguous, so every one of those 2 x
 * layers regions rounds up to pages at both ends. */
uint64_t api_kv_touched(const model_kv *kv, int32_t positions, int32_t layers) {
    const uint64_t all = kv->bytes / (uint64_t)(kv->l1 - kv->l0) * (uint64_t)layers;
    if (positions >= kv->n_ctx) {
        return all;
    }
    const uint64_t regions = 2 * (uint64_t)layers;
    const uint64_t used = all / (uint64_t)kv->n_ctx * (uint64_t)positions + regions * 2 * KV_PAGE_BYTES;
    return LARES_MIN(used, all);
}

static uint64_t kv_touched(const model_kv *kv, int32_t positions) {
    return api_kv_touched(kv, positions, kv->l1 - kv->l0);
}

/* The session's memory besides weights with `positions` positions in use,
 * and n_kv more caches (a batch's) with theirs. */
static uint64_t overhead_caches(const lares_session *s, int32_t positions, model_kv *const *kv,
                                const int32_t *kv_positions, int32_t n_kv, uint64_t *other) {
    const lares_model *lm = s->lm;
    uint64_t heap = lares_mem_in_use() - (uint64_t)s->kv->bytes; /* the caches are counted below */
    uint64_t caches = kv_touched(s->kv, positions);
    for (int32_t i = 0; i < n_kv; i++) {
        heap -= (uint64_t)kv[i]->bytes;
        caches += kv_touched(kv[i], kv_positions[i]);
    }
    *other = (uint64_t)lm->m->hp.n_vocab * SAMPLER_BYTES_PER_TOKEN +
             api_fixed_bytes(gguf_file_bytes(lm->file));
    return heap + caches + *other;
}

static uint64_t overhead(const lares_session *s, int32_t positions, uint64_t *other) {
    return overhead_caches(s, positions, NULL, NULL, 0, other);
}

lares_status api_exec_opts(const lares_session *s, exec_opts *out, uint64_t *budget_out,
                           lares_error *err) {
    const lares_model *lm = s->lm;
    const model *m = lm->m;
    memset(out, 0, sizeof *out);
    out->head = true;
    out->window_units = s->o.mem_window;
    out->lock = s->o.mem_lock;
    out->expert_cache = s->o.expert_cache;
    out->expert_guess = s->o.expert_guess;
    out->stream_io = s->o.stream_io == LARES_STREAM_IO_MMAP     ? EXEC_IO_MMAP
                     : s->o.stream_io == LARES_STREAM_IO_DIRECT ? EXEC_IO_DIRECT
                                                                : EXEC_IO_AUTO;
    /* the GPU finds a matrix by the address of its weights in the mapping
     * (gpu/session.c): views re-pointed into read buffers would send those
     * products back to the CPU, so a session with offload streams through it */
    if (s->o.offload != NULL && strcmp(s->o.offload, "none") != 0) {
        out->stream_io = EXEC_IO_MMAP;
    }

    uint64_t budget = s->o.mem_budget;
    char source[96];
    if (budget != 0) {
        snprintf(source, sizeof source, "a memory budget of %.1f MiB", mib(budget));
    } else {
        mem_limit lim;
        mem_limit_read(NULL, &lim);
        budget = lim.auto_bytes;
        if (lim.auto_bytes == lim.cgroup_bytes && lim.cgroup_version != 0) {
            snprintf(source, sizeof source, "the cgroup v%d memory limit of %.1f MiB",
                     lim.cgroup_version, mib(budget));
        } else if (lm->copy != NULL && budget != UINT64_MAX) {
            /* the copy already left MemAvailable, where the mapping's pages
             * would have been counted in it */
            budget += lm->copy_bytes;
            snprintf(source, sizeof source,
                     "%.0f %% of MemAvailable and the weights read in, %.1f MiB",
                     MEM_AVAILABLE_SHARE * 100, mib(budget));
        } else {
            snprintf(source, sizeof source, "%.0f %% of MemAvailable, %.1f MiB",
                     MEM_AVAILABLE_SHARE * 100, mib(budget));
        }
    }
    *budget_out = budget;
    if (budget == UINT64_MAX) {
        return LARES_OK; /* nothing known: no limit */
    }
    uint64_t weights, least, other;
    lares_status st = exec_weight_needs(m, s->kv, out, &weights, &least, err);
    if (st != LARES_OK) {
        return st;
    }
    const uint64_t full = overhead(s, s->o.n_ctx, &other);
    if (budget < full + least) {
        /* the heap differs by a few bytes from run to run (options, threads):
         * the minimum named keeps a margin so that it works when given */
        const uint64_t minimum = lares_align_up_u64(full + least + MIN_MARGIN_BYTES,
                                                    MIN_MARGIN_BYTES);
        return lares_fail(err, LARES_ERANGE,
                          "%s: %s is below the %.1f MiB (%" PRIu64 " bytes) this session needs at "
                          "least: KV cache %.1f MiB, buffers and vocabulary %.1f MiB, program "
                          "%.1f MiB, the largest layer%s %.1f MiB",
                          lm->path, source, mib(minimum), minimum, mib(s->kv->bytes),
                          mib(full - s->kv->bytes - other), mib(other),
                          m->hp.n_expert > 0 ? " with its experts" : "", mib(least));
    }
    out->weight_budget_bytes = budget - full;
    (void)weights;
    return LARES_OK;
}

lares_status api_plan_positions(lares_session *s, int32_t positions, lares_error *err) {
    return api_plan_caches(s, positions, NULL, NULL, 0, err);
}

lares_status api_plan_caches(lares_session *s, int32_t positions, model_kv *const *kv,
                             const int32_t *kv_positions, int32_t n_kv, lares_error *err) {
    if (s->mem_budget_bytes == UINT64_MAX) {
        return LARES_OK;
    }
    uint64_t other;
    const uint64_t need = overhead_caches(s, positions, kv, kv_positions, n_kv, &other);
    if (need >= s->mem_budget_bytes) {
        /* not after creation's check alone: a batch's caches came since */
        return lares_fail(err, LARES_ERANGE,
                          "%.1f MiB of buffers and KV caches leave nothing of the memory budget "
                          "of %.1f MiB for weights",
                          mib(need), mib(s->mem_budget_bytes));
    }
    return exec_local_set_budget(s->exec, s->mem_budget_bytes - need, err);
}

bool api_streams_surely(const lares_session *s) {
    if (s->mem_budget_bytes == UINT64_MAX) {
        return false;
    }
    exec_plan_info p;
    exec_local_plan(s->exec, &p);
    uint64_t other;
    const uint64_t need = overhead(s, 0, &other);
    return need >= s->mem_budget_bytes || p.weight_bytes > s->mem_budget_bytes - need;
}
