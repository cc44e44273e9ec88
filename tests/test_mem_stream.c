/*
 * exec + mem: streaming weights changes residency, never results.
 *
 * For every model in ../shared/models that lares runs, greedy decoding of the
 * reference prompt through the executor without a budget must reproduce the
 * reference engine's tokens (expected/greedy_once_upon_a_time.json), and the
 * same decoding under budgets from the least that works to just below the
 * model, with every window size, must give the same tokens (the first 16)
 * and bit-identical logits. The prompt is fed in batches of two, so passes without the output
 * (and their prefetch hints) are exercised too.
 *
 * The runs cycle through the ways streamed units are read: through the page
 * cache (mmap) and directly into owned buffers (direct, with io_uring or the
 * reader threads), which must report their reads and keep their buffers
 * within the window. A direct read that fails falls back to the page cache
 * for that unit, with the same tokens.
 *
 * Then, on a private copy of a model whose pages were dropped from the page
 * cache, the kernel's own counters show the streaming: mincore never sees
 * more of the streamed layers resident than the window (through the page
 * cache) or nothing at all (direct reads), and /proc/self/io shows the
 * prefetched bytes really came from the disk.
 */
#include "check.h"
#include "exec_rig.h"
#include "greedy_cases.h"
#include "exec/exec.h"
#include "lares.h"
#include "gguf/gguf.h"
#include "mem/mem.h"
#include "model/model.h"
#include "ops/ops.h"

#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>

#define N_CTX   96
#define N_BATCH 2
#define N_GEN   48 /* the reference run, against the reference engine's tokens */
#define N_CMP   16 /* the budgeted runs, against the reference run: tokens and logits */

static int32_t argmax(const float *v, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++) {
        if (v[i] > v[b]) {
            b = i;
        }
    }
    return b;
}

typedef struct run_result {
    int32_t ids[N_GEN];
    float *logits; /* the last step's, n_vocab */
    exec_plan_info plan;
    exec_counters c;
} run_result;

/* One pass over tokens[0..n) at positions p0..: every layer, then the output
 * of the last row when want_output. */
static bool pass(rig *r, exec_local *e, const int32_t *tokens, int32_t n, int32_t p0,
                 bool want_output) {
    lares_error err = {0};
    int32_t pos[N_BATCH];
    for (int32_t i = 0; i < n; i++) {
        pos[i] = p0 + i;
    }
    exec_local_begin_pass(e, want_output);
    if (model_embed(r->m, tokens, n, r->x, &err) != LARES_OK ||
        exec_local_forward(e, 0, r->m->hp.n_layer, pos, n, r->x, &err) != LARES_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        return false;
    }
    if (want_output && exec_local_output(e, r->x + (size_t)(n - 1) * (size_t)r->m->hp.n_embd, 1,
                                         r->logits, &err) != LARES_OK) {
        fprintf(stderr, "output: %s\n", err.msg);
        return false;
    }
    return true;
}

/* Greedy decoding of n_gen tokens after the prompt (fed N_BATCH at a time). */
static bool decode_n(rig *r, const exec_opts *o, const int32_t *prompt, int32_t np, int32_t n_gen,
                     run_result *out) {
    lares_error err = {0};
    exec_local *e = NULL;
    lares_status st = exec_local_create(r->m, r->kv, r->cx, o, &e, &err);
    CHECK_OK(st, &err);
    if (st != LARES_OK) {
        return false;
    }
    bool ok = true;
    for (int32_t done = 0; ok && done < np; done += N_BATCH) {
        const int32_t n = np - done < N_BATCH ? np - done : N_BATCH;
        ok = pass(r, e, prompt + done, n, done, done + n == np);
    }
    for (int32_t g = 0; ok && g < n_gen; g++) {
        out->ids[g] = argmax(r->logits, r->m->hp.n_vocab);
        if (g + 1 < n_gen) {
            ok = pass(r, e, &out->ids[g], 1, np + g, true);
        }
    }
    memcpy(out->logits, r->logits, (size_t)r->m->hp.n_vocab * sizeof(float));
    exec_local_plan(e, &out->plan);
    exec_local_counters(e, &out->c);
    exec_local_free(e);
    return ok;
}

static bool decode(rig *r, const exec_opts *o, const int32_t *prompt, int32_t np,
                   run_result *out) {
    return decode_n(r, o, prompt, np, N_GEN, out);
}

/* The part of a layer tensor named after "blk.N." (model_part), from its
 * name alone; -1: stacked experts, read per choice */
static int part_of_name(const char *rest) {
    if (strstr(rest, "_exps.") != NULL) {
        return -1;
    }
    if (strncmp(rest, "attn_output.", 12) == 0) {
        return 1;
    }
    if (strstr(rest, "_shexp.") != NULL || strncmp(rest, "ffn_down.", 9) == 0) {
        return 3;
    }
    return strncmp(rest, "ffn_", 4) == 0 ? 2 : 0;
}

/* A file's tensor directory by layer and part: bytes[4 l + p] (experts left
 * out) and experts[l], the bytes of layer l's stacked experts */
typedef struct directory_parts {
    uint64_t *bytes, *experts;
    uint64_t part_max; /* the largest part of any layer */
} directory_parts;

static directory_parts parts_from_directory(const gguf_file *f, int32_t n_layer) {
    directory_parts d = {.bytes = calloc((size_t)n_layer * 4, sizeof *d.bytes),
                         .experts = calloc((size_t)n_layer, sizeof *d.experts)};
    for (int32_t l = 0; l < n_layer; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blk.%d.", (int)l);
        for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            if (strncmp(t->name, prefix, strlen(prefix)) != 0) {
                continue;
            }
            const int p = part_of_name(t->name + strlen(prefix));
            if (p < 0) {
                d.experts[l] += t->nbytes;
            } else {
                d.bytes[l * 4 + p] += t->nbytes;
                d.part_max = d.bytes[l * 4 + p] > d.part_max ? d.bytes[l * 4 + p] : d.part_max;
            }
        }
    }
    return d;
}

static void directory_parts_free(directory_parts *d) {
    free(d->bytes);
    free(d->experts);
}

/* What the least budget holds, summed from the tensor directory: the largest
 * unit (a part of a layer, experts left out, or the output matrix with its
 * norm) and the most bytes one layer's experts take */
static uint64_t least_from_directory(const gguf_file *f, int32_t n_layer, bool tied) {
    directory_parts d = parts_from_directory(f, n_layer);
    uint64_t out = 0, experts = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const bool mine = strcmp(t->name, tied ? "token_embd.weight" : "output.weight") == 0 ||
                          strcmp(t->name, "output_norm.weight") == 0;
        out += mine ? t->nbytes : 0;
    }
    for (int32_t l = 0; l < n_layer; l++) {
        experts = d.experts[l] > experts ? d.experts[l] : experts;
    }
    const uint64_t best = out > d.part_max ? out : d.part_max;
    directory_parts_free(&d);
    return best + experts;
}

/* The units of the cycle: the output matrix, and per layer its parts that
 * hold weights besides experts, consecutive ones joined while together no
 * larger than the largest part */
static int32_t units_from_directory(const gguf_file *f, int32_t n_layer, bool head) {
    directory_parts d = parts_from_directory(f, n_layer);
    int32_t n = head ? 1 : 0;
    for (int32_t l = 0; l < n_layer; l++) {
        uint64_t unit = 0;
        bool open = false;
        for (int p = 0; p < 4; p++) {
            const uint64_t b = d.bytes[l * 4 + p];
            if (b == 0) {
                continue;
            }
            if (!open || unit + b > d.part_max) {
                n++;
                open = true;
                unit = 0;
            }
            unit += b;
        }
    }
    directory_parts_free(&d);
    return n;
}

/* direct reads work on the file system holding path (the build's fixtures) */
static bool direct_works(const char *path) {
    mem_direct *d = NULL;
    lares_error err = {0};
    if (mem_direct_open(path, MEM_DIRECT_AUTO, &d, &err) != LARES_OK) {
        fprintf(stderr, "test_mem_stream: %s: direct reads are not checked\n", err.msg);
        return false;
    }
    mem_direct_close(d);
    return true;
}

/* runs of check_model where `auto` probed the file (direct.c: direct_pays)
 * and kept direct reads or took the page cache, and files where direct reads
 * work */
static int probe_direct_runs, probe_mmap_runs, direct_files, expert_direct_runs;
static int expert_probe_runs[2]; /* auto's probes of experts: [0] the page cache won, [1] direct */

static void check_model(json_t *root, const char *file, int min_agree) {
    json_t *res = find_result(root, file);
    CHECKF(res != NULL, "%s missing from the expected outputs", file);
    if (res == NULL) {
        return;
    }
    int32_t prompt[64], want[64];
    const int np = ids_from(json_object_get(res, "prompt_token_ids_with_bos"), prompt, 64);
    const int nw = ids_from(json_object_get(res, "reference_greedy_token_ids"), want, 64);
    rig r;
    if (!rig_open(&r, fixture(file), N_BATCH, N_CTX)) {
        return;
    }
    const int32_t n_vocab = r.m->hp.n_vocab;
    run_result ref = {.logits = calloc((size_t)n_vocab, sizeof(float))};
    run_result got = {.logits = calloc((size_t)n_vocab, sizeof(float))};
    exec_opts o = {.head = true};
    CHECK(decode(&r, &o, prompt, np, &ref));
    /* the budgeted runs are held to the same run cut at N_CMP tokens */
    run_result ref_cut = {.logits = calloc((size_t)n_vocab, sizeof(float))};
    CHECK(decode_n(&r, &o, prompt, np, N_CMP, &ref_cut));
    CHECK(memcmp(ref_cut.ids, ref.ids, N_CMP * sizeof(int32_t)) == 0);
    CHECKF(!ref.plan.streaming, "%s: streams without a budget", file);
    int agree = 0;
    while (agree < nw && agree < N_GEN && ref.ids[agree] == want[agree]) {
        agree++;
    }
    CHECKF(agree >= min_agree, "%s: %d tokens agree with the reference engine, want %d", file,
           agree, min_agree);

    uint64_t total = 0, least = 0;
    lares_error err = {0};
    CHECK_OK(exec_weight_needs(r.m, r.kv, &o, &total, &least, &err), &err);
    /* a layer's experts (MoE) come on top of the largest unit */
    const uint64_t by_dir = least_from_directory(r.f, r.m->hp.n_layer, r.m->output_tied);
    CHECKF(least == by_dir, "%s: least budget %llu, from the tensors %llu bytes", file,
           (unsigned long long)least, (unsigned long long)by_dir);
    const uint64_t budgets[] = {least, (least + total) / 2, total - 1};
    const int32_t n_units = units_from_directory(r.f, r.m->hp.n_layer, true);
    /* window sizes of 0 (bytes only) to a layer's count of units and one more */
    const int32_t n_win = r.m->hp.n_layer + 1;
    const bool direct = direct_works(fixture(file));
    direct_files += direct;
    int runs = 0, pinned_runs = 0, direct_runs = 0;
    for (size_t b = 0; b < LARES_ARRAY_LEN(budgets); b++) {
        for (int32_t w = 0; w <= n_win; w++) {
            /* exact reads (no read-ahead slack, so small budgets pin units too)
             * and the default; locking where units are pinned */
            exec_opts so = {.head = true, .weight_budget_bytes = budgets[b], .window_units = w,
                            .read_method = (b + (size_t)w) % 3 ? MEM_READ_FADVISE_POPULATE
                                                               : MEM_READ_DEFAULT,
                            .lock = w == 1,
                            .stream_io = (exec_stream_io)(((size_t)w / 3 + b) % EXEC_IO_COUNT),
                            .direct_engine = w % 2 ? MEM_DIRECT_THREADS : MEM_DIRECT_AUTO,
                            .expert_guess = (w + (int32_t)b) % 2 ? 1 : -1,
                            /* auto's probe: the page cache must be a billion times
                             * faster, or any speed is faster */
                            .direct_margin = (w / 3) % 2 ? 1e9 : 1e-9,
                            /* (the experts' probe wants 64 KiB batches of slices
                             * that round out to blocks by at most 2 %) */
                            .expert_probe_any = (w + (int32_t)b) % 4 < 2};
            memset(&got.ids, 0xff, sizeof got.ids);
            if (!decode_n(&r, &so, prompt, np, N_CMP, &got)) {
                continue;
            }
            runs++;
            CHECKF(got.plan.streaming, "%s budget %llu: not streaming", file,
                   (unsigned long long)budgets[b]);
            CHECKF(got.plan.n_units == n_units, "%s: %d units, %d parts of layers in the file",
                   file, got.plan.n_units, n_units);
            CHECKF(memcmp(got.ids, ref.ids, N_CMP * sizeof(int32_t)) == 0,
                   "%s budget %llu window %d: tokens differ from the unbudgeted run", file,
                   (unsigned long long)budgets[b], w);
            CHECKF(memcmp(got.logits, ref_cut.logits, (size_t)n_vocab * sizeof(float)) == 0,
                   "%s budget %llu window %d: logits differ", file,
                   (unsigned long long)budgets[b], w);
            CHECKF(got.plan.pinned_bytes + got.plan.window_bytes + got.plan.expert_cache_bytes +
                           got.plan.readahead_slack_bytes <=
                       budgets[b],
                   "%s: plan exceeds budget %llu", file, (unsigned long long)budgets[b]);
            CHECKF(got.c.prefetch_bytes >= got.plan.pinned_bytes,
                   "%s: prefetched %llu bytes, pinned %llu", file,
                   (unsigned long long)got.c.prefetch_bytes,
                   (unsigned long long)got.plan.pinned_bytes);
            if (got.plan.stream_bytes > 0) { /* every pass read the streamed layers */
                CHECKF(got.c.release_bytes > 0, "%s: nothing released", file);
            }
            /* auto probes where direct reads work and a unit gives 4 slices of
             * 64 KiB, then follows the margin */
            const bool probed = got.plan.probe_direct_Bps > 0;
            CHECKF(!probed || (so.stream_io == EXEC_IO_AUTO && direct &&
                               got.plan.probe_mmap_Bps > 0),
                   "%s budget %llu window %d: a probe with stream_io %d", file,
                   (unsigned long long)budgets[b], w, (int)so.stream_io);
            probe_direct_runs += probed && so.direct_margin > 1;
            probe_mmap_runs += probed && so.direct_margin < 1;
            const bool want_direct =
                direct && (so.stream_io == EXEC_IO_DIRECT ||
                           (so.stream_io == EXEC_IO_AUTO && (!probed || so.direct_margin > 1)));
            CHECKF(got.plan.direct == want_direct, "%s budget %llu window %d: %s, direct %d",
                   file, (unsigned long long)budgets[b], w,
                   so.stream_io == EXEC_IO_MMAP ? "mmap" : "direct", got.plan.direct);
            if (want_direct && got.plan.stream_bytes > 0) {
                direct_runs++;
                CHECKF(got.c.direct_bytes >= got.plan.stream_bytes && got.c.direct_fallbacks == 0,
                       "%s: %llu bytes read directly, %llu per pass", file,
                       (unsigned long long)got.c.direct_bytes,
                       (unsigned long long)got.plan.stream_bytes);
                /* each range of a unit rounds out by less than a block at each end
                 * (and expert slots, counted in their cache, by as much for each
                 * of a layer's slices the cache may hold beyond its bytes) */
                const uint64_t slots =
                    got.plan.experts_direct
                        ? got.plan.expert_cache_bytes +
                              6 * MEM_DIRECT_ALIGN * (uint64_t)r.m->hp.n_expert
                        : 0;
                CHECKF(got.c.buffer_peak_bytes > 0 &&
                           got.c.buffer_peak_bytes <= got.plan.window_bytes +
                                                          got.plan.readahead_slack_bytes + slots +
                                                          2 * MEM_DIRECT_ALIGN * 8 * (uint64_t)n_units,
                       "%s: buffers of %llu bytes for a window of %llu", file,
                       (unsigned long long)got.c.buffer_peak_bytes,
                       (unsigned long long)got.plan.window_bytes);
                /* (the buffers' bookkeeping adds and takes the same sizes) */
                CHECKF(got.c.buffer_bytes <= got.c.buffer_peak_bytes,
                       "%s: buffers hold %llu bytes, at most %llu", file,
                       (unsigned long long)got.c.buffer_bytes,
                       (unsigned long long)got.c.buffer_peak_bytes);
                CHECK(got.plan.direct_engine == (so.direct_engine == MEM_DIRECT_THREADS
                                                     ? MEM_DIRECT_THREADS
                                                     : got.plan.direct_engine) &&
                      got.plan.direct_engine != MEM_DIRECT_AUTO);
            } else { /* (expert slices read directly count too) */
                CHECK((got.c.direct_bytes == 0 && got.c.buffer_peak_bytes == 0) ||
                      got.plan.experts_direct);
            }
            CHECKF(got.c.n_mispredicted == 0, "%s budget %llu window %d: %llu mispredictions",
                   file, (unsigned long long)budgets[b], w,
                   (unsigned long long)got.c.n_mispredicted);
            if (r.m->hp.n_expert > 0) {
                CHECKF(got.c.expert_misses > 0 && got.plan.expert_cache_bytes > 0,
                       "%s: experts never read", file);
                /* expert slices: direct where asked, or where auto's probe finds
                 * them as fast (no probe: the page cache) */
                const bool xprobed = got.plan.expert_probe_direct_Bps > 0;
                CHECKF(!xprobed || (so.stream_io == EXEC_IO_AUTO && direct &&
                                    got.plan.expert_probe_mmap_Bps > 0),
                       "%s: a probe of experts with stream_io %d", file, (int)so.stream_io);
                CHECKF(xprobed || !so.expert_probe_any || so.stream_io != EXEC_IO_AUTO || !direct,
                       "%s: auto did not probe the experts", file);
                const bool want_x =
                    direct && (so.stream_io == EXEC_IO_DIRECT ||
                               (so.stream_io == EXEC_IO_AUTO && xprobed && so.direct_margin > 1));
                expert_probe_runs[so.direct_margin > 1] += xprobed;
                CHECKF(got.plan.experts_direct == want_x,
                       "%s budget %llu window %d: stream_io %d, experts direct %d", file,
                       (unsigned long long)budgets[b], w, (int)so.stream_io,
                       got.plan.experts_direct);
                CHECKF(!want_x || (got.c.direct_bytes > 0 && got.c.direct_fallbacks == 0),
                       "%s: experts read directly: %llu bytes", file,
                       (unsigned long long)got.c.direct_bytes);
                /* their slots with pages stay within the cache (and a layer's
                 * slices' rounding): the report counts them as buffers */
                CHECKF(!want_x || got.plan.stream_bytes > 0 ||
                           (got.c.buffer_peak_bytes > 0 &&
                            got.c.buffer_peak_bytes <=
                                got.plan.expert_cache_bytes +
                                    6 * MEM_DIRECT_ALIGN * (uint64_t)r.m->hp.n_expert),
                       "%s: expert slots of %llu bytes for a cache of %llu", file,
                       (unsigned long long)got.c.buffer_peak_bytes,
                       (unsigned long long)got.plan.expert_cache_bytes);
                expert_direct_runs += want_x;
            }
            if (so.lock) { /* the tiny pinned sizes fit any RLIMIT_MEMLOCK */
                CHECKF(got.plan.locked_bytes == got.plan.pinned_bytes,
                       "%s: %llu bytes locked of %llu pinned", file,
                       (unsigned long long)got.plan.locked_bytes,
                       (unsigned long long)got.plan.pinned_bytes);
            }
            /* dense: some units pinned, others streamed; MoE: the layers pinned
             * and experts found again in a cache larger than a layer's */
            pinned_runs += r.m->hp.n_expert > 0
                               ? got.plan.n_pinned == n_units && got.c.expert_hits > 0
                               : got.plan.n_pinned > 0 && got.plan.stream_bytes > 0;
        }
    }
    CHECK(runs == (int)LARES_ARRAY_LEN(budgets) * (n_win + 1));
    CHECKF(pinned_runs > 0, "%s: no budget kept part resident and streamed the rest", file);
    CHECKF(direct_runs > 0 || !direct, "%s: nothing streamed directly", file);
    free(ref.logits);
    free(ref_cut.logits);
    free(got.logits);
    rig_close(&r);
}

/* The huge-page advice of the mapping holding addr, from /proc/self/smaps:
 * 'h' (VmFlags hg, MADV_HUGEPAGE), 'n' (nh), '-' (neither); 0 where the OS
 * cannot tell (not Linux, no transparent huge pages in the kernel) */
static char huge_advice(const void *addr) {
#if defined(__linux__)
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK) != 0) {
        return 0;
    }
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL) {
        return 0;
    }
    char line[512];
    bool inside = false;
    char got = 0;
    while (got == 0 && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            got = strstr(line, " hg") != NULL ? 'h' : strstr(line, " nh") != NULL ? 'n' : '-';
        }
    }
    fclose(f);
    return got;
#else
    (void)addr;
    return 0;
#endif
}

/* A plan that keeps every weight resident advises the mapping onto huge
 * pages, one that streams advises it off them (mem_advise_huge) */
static void check_huge_advice(const rig *r, bool streaming) {
    mem_file mf;
    mem_file_of(r->f, &mf);
    const void *at[] = {mf.base, mf.base + mf.bytes / 2, mf.base + mf.bytes - 1};
    for (size_t i = 0; i < LARES_ARRAY_LEN(at); i++) {
        const char a = huge_advice(at[i]);
        CHECKF(a == 0 || a == (streaming ? 'n' : 'h'),
               "%s plan: the mapping's huge-page advice at %zu of 3 is '%c'",
               streaming ? "a streaming" : "a resident", i, a);
    }
}

/* The budget changes between passes (the KV cache fills, a ring re-plans):
 * tokens stay the same through every change, a budget below the least is
 * refused without changing anything, and more budget pins a superset. */
static void check_rebudget(const char *file, exec_stream_io io) {
    rig r;
    if (!rig_open(&r, fixture(file), N_BATCH, N_CTX)) {
        return;
    }
    const int32_t n_vocab = r.m->hp.n_vocab;
    const int32_t prompt[] = {1, 100, 200, 300, 400};
    run_result ref = {.logits = calloc((size_t)n_vocab, sizeof(float))};
    exec_opts o = {.head = true};
    CHECK(decode(&r, &o, prompt, 5, &ref));
    uint64_t total = 0, least = 0;
    lares_error err = {0};
    CHECK_OK(exec_weight_needs(r.m, r.kv, &o, &total, &least, &err), &err);
    const uint64_t steps[] = {least, total - 1, 0, (least + total) / 2, least, total / 3 * 2,
                              total + 1, least};
    exec_opts so = {.head = true, .weight_budget_bytes = steps[0],
                    .read_method = MEM_READ_FADVISE_POPULATE, .stream_io = io,
                    .direct_margin = 1e9, /* auto: direct whatever its probe measures */
                    .direct_engine = MEM_DIRECT_THREADS};
    exec_local *e = NULL;
    CHECK_OK(exec_local_create(r.m, r.kv, r.cx, &so, &e, &err), &err);
    if (e == NULL) {
        free(ref.logits);
        rig_close(&r);
        return;
    }
    int32_t ids[N_GEN];
    bool ok = true;
    for (int32_t done = 0; ok && done < 5; done += N_BATCH) {
        const int32_t n = 5 - done < N_BATCH ? 5 - done : N_BATCH;
        ok = pass(&r, e, prompt + done, n, done, done + n == 5);
    }
    uint64_t last_budget = steps[0];
    exec_plan_info prev;
    exec_local_plan(e, &prev);
    for (int32_t g = 0; ok && g < N_GEN; g++) {
        ids[g] = argmax(r.logits, n_vocab);
        if (g % 6 == 5) {
            const uint64_t b = steps[(g / 6 + 1) % LARES_ARRAY_LEN(steps)];
            CHECK_OK(exec_local_set_budget(e, b, &err), &err);
            exec_plan_info now;
            exec_local_plan(e, &now);
            CHECKF(now.streaming == (b != 0 && b < total), "budget %llu: streaming %d",
                   (unsigned long long)b, now.streaming);
            check_huge_advice(&r, now.streaming);
            if (prev.streaming && now.streaming && b > last_budget) {
                CHECKF(now.n_pinned >= prev.n_pinned, "more budget pinned fewer units");
            }
            prev = now;
            last_budget = b;
            /* refused: below the least; the plan stays */
            CHECK(exec_local_set_budget(e, least - 1, &err) == LARES_ERANGE);
            exec_local_plan(e, &now);
            CHECK(now.n_pinned == prev.n_pinned && now.streaming == prev.streaming);
        }
        if (g + 1 < N_GEN) {
            ok = pass(&r, e, &ids[g], 1, 5 + g, true);
        }
    }
    CHECK(ok);
    CHECKF(memcmp(ids, ref.ids, sizeof ids) == 0, "%s: tokens changed with the budget", file);
    CHECKF(memcmp(r.logits, ref.logits, (size_t)n_vocab * sizeof(float)) == 0,
           "%s: logits changed with the budget", file);
    exec_counters c;
    exec_local_counters(e, &c);
    CHECK(c.n_mispredicted == 0);
    CHECK(io == EXEC_IO_MMAP || !direct_works(fixture(file)) ||
          (c.direct_bytes > 0 && c.direct_fallbacks == 0));
    exec_local_free(e);
    free(ref.logits);
    rig_close(&r);
}

/* A direct read that fails leaves that unit to the page cache, direct reads
 * refused at the start leave every unit to it: same tokens. */
static const int32_t fallback_prompt[] = {1, 100, 200, 300, 400};

/* A fallback check's start: the file's rig where direct reads work, the
 * reference run through the page cache, and the least budget. */
static bool fallback_start(const char *file, rig *r, run_result *ref, run_result *got,
                           uint64_t *least) {
    if (!direct_works(fixture(file)) || !rig_open(r, fixture(file), N_BATCH, N_CTX)) {
        return false;
    }
    ref->logits = calloc((size_t)r->m->hp.n_vocab, sizeof(float));
    got->logits = calloc((size_t)r->m->hp.n_vocab, sizeof(float));
    exec_opts o = {.head = true, .stream_io = EXEC_IO_MMAP};
    CHECK(decode(r, &o, fallback_prompt, 5, ref));
    uint64_t total = 0;
    lares_error err = {0};
    CHECK_OK(exec_weight_needs(r->m, r->kv, &o, &total, least, &err), &err);
    return true;
}

static void check_direct_fallback(void) {
    rig r;
    run_result ref, got;
    uint64_t least = 0;
    if (!fallback_start("stories260K.gguf", &r, &ref, &got, &least)) {
        return;
    }
    const int32_t n_vocab = r.m->hp.n_vocab;
    const int32_t *prompt = fallback_prompt;
    lares_error err = {0};
    /* the reader threads read through the fault gate: the open's probe is
     * the first read, the fourth is a unit's */
    exec_opts so = {.head = true, .weight_budget_bytes = least, .stream_io = EXEC_IO_DIRECT,
                    .direct_engine = MEM_DIRECT_THREADS};
    lares_read_fail_after(4, LARES_READ_FAULT_EIO);
    CHECK(decode(&r, &so, prompt, 5, &got));
    lares_read_fail_after(0, LARES_READ_FAULT_EIO);
    CHECK(got.plan.direct && got.plan.direct_engine == MEM_DIRECT_THREADS);
    CHECKF(got.c.direct_fallbacks == 1 && got.c.direct_bytes > 0,
           "%llu fallbacks, %llu bytes read directly", (unsigned long long)got.c.direct_fallbacks,
           (unsigned long long)got.c.direct_bytes);
    CHECK(memcmp(got.ids, ref.ids, sizeof got.ids) == 0);
    CHECK(memcmp(got.logits, ref.logits, (size_t)n_vocab * sizeof(float)) == 0);
    /* the open's probe read fails (as on a file system that accepts O_DIRECT
     * and refuses the reads): everything streams through the page cache */
    lares_read_fail_after(1, LARES_READ_FAULT_EIO);
    CHECK(decode(&r, &so, prompt, 5, &got));
    lares_read_fail_after(0, LARES_READ_FAULT_EIO);
    CHECK(got.plan.streaming && !got.plan.direct && got.c.direct_bytes == 0 &&
          got.c.prefetch_bytes > 0);
    CHECK(memcmp(got.ids, ref.ids, sizeof got.ids) == 0);
    CHECK(memcmp(got.logits, ref.logits, (size_t)n_vocab * sizeof(float)) == 0);
    /* an unknown way of reading is refused */
    exec_local *e = NULL;
    exec_opts bad = {.head = true, .stream_io = EXEC_IO_COUNT};
    CHECK(exec_local_create(r.m, r.kv, r.cx, &bad, &e, &err) == LARES_EINVAL && e == NULL);
    bad = (exec_opts){.head = true, .direct_engine = MEM_DIRECT_COUNT};
    CHECK(exec_local_create(r.m, r.kv, r.cx, &bad, &e, &err) == LARES_EINVAL && e == NULL);
    free(ref.logits);
    free(got.logits);
    rig_close(&r);
}

/* The reads made to fail, one run each: every one of the first 32 (the
 * open's probe, the prompt's pass), then every 17th and the last. Each run is
 * a whole decode: all 660 reads of the MoE file's run took 206 of CI's
 * seconds (2026-12-02). A prime stride meets every place in a token's reads
 * (about 14) as it walks. */
static long next_failing_read(long n, long reads) {
    if (n < 32) {
        return n + 1;
    }
    if (n + 17 < reads) {
        return n + 17;
    }
    return n < reads ? reads : reads + 1;
}

/* MoE: a direct read of experts that fails leaves every slice to the page
 * cache from then on, whichever read it is: the same logits each time. */
static void check_experts_fallback(void) {
    rig r;
    run_result ref, got;
    uint64_t least = 0;
    if (!fallback_start("derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf", &r, &ref, &got,
                        &least)) {
        return;
    }
    const int32_t n_vocab = r.m->hp.n_vocab;
    const int32_t *prompt = fallback_prompt;
    exec_opts so = {.head = true, .weight_budget_bytes = least, .stream_io = EXEC_IO_DIRECT,
                    .direct_engine = MEM_DIRECT_THREADS};
    const long before = lares_reads_seen();
    CHECK(decode(&r, &so, prompt, 5, &got));
    const long reads = lares_reads_seen() - before;
    CHECK(got.plan.experts_direct && got.c.direct_fallbacks == 0 && got.c.direct_bytes > 0);
    int fell_back = 0;
    for (long n = 1; n <= reads; n = next_failing_read(n, reads)) {
        lares_read_fail_after(n, LARES_READ_FAULT_EIO);
        const bool ok = decode(&r, &so, prompt, 5, &got);
        lares_read_fail_after(0, LARES_READ_FAULT_EIO);
        CHECKF(ok && memcmp(got.logits, ref.logits, (size_t)n_vocab * sizeof(float)) == 0,
               "read %ld of %ld failing: logits differ", n, reads);
        fell_back += got.plan.experts_direct && got.c.direct_fallbacks > 0;
    }
    CHECKF(fell_back > 0, "no failed read of experts in %ld reads went to the page cache", reads);
    free(ref.logits);
    free(got.logits);
    rig_close(&r);
}

/* Two windows covering the layers run like one; a bad window is refused. */
static void check_windows(void) {
    rig r;
    if (!rig_open(&r, fixture("stories260K.gguf"), N_BATCH, N_CTX)) {
        return;
    }
    const int32_t prompt[] = {1, 100, 200, 300, 400};
    run_result a = {.logits = calloc((size_t)r.m->hp.n_vocab, sizeof(float))};
    run_result b = {.logits = calloc((size_t)r.m->hp.n_vocab, sizeof(float))};
    exec_opts o = {.head = true};
    CHECK(decode(&r, &o, prompt, 5, &a));
    uint64_t total = 0, least = 0;
    lares_error err = {0};
    CHECK_OK(exec_weight_needs(r.m, r.kv, &o, &total, &least, &err), &err);
    const exec_window two[] = {{0, 2}, {2, 5}};
    exec_opts so = {.head = true, .weight_budget_bytes = least, .windows = two, .n_windows = 2};
    CHECK(decode(&r, &so, prompt, 5, &b));
    CHECK(memcmp(a.ids, b.ids, sizeof a.ids) == 0);
    CHECK(b.plan.streaming && b.plan.n_units == units_from_directory(r.f, 5, true));

    exec_local *e = NULL;
    const exec_window overlap[] = {{0, 3}, {2, 5}};
    so.windows = overlap;
    CHECK(exec_local_create(r.m, r.kv, r.cx, &so, &e, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "layer 2 is in two windows") != NULL, "message: %s", err.msg);
    const exec_window outside[] = {{3, 9}};
    so.windows = outside;
    so.n_windows = 1;
    CHECK(exec_local_create(r.m, r.kv, r.cx, &so, &e, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "[3, 9)") != NULL, "message: %s", err.msg);
    /* a budget one byte short of the least is refused, naming that least */
    exec_opts tight = {.head = true, .weight_budget_bytes = least - 1};
    CHECK(exec_local_create(r.m, r.kv, r.cx, &tight, &e, &err) == LARES_ERANGE);
    char want[64];
    snprintf(want, sizeof want, "below the %llu bytes", (unsigned long long)least);
    CHECKF(strstr(err.msg, want) != NULL && strstr(err.msg, "stories260K.gguf") != NULL,
           "message: %s", err.msg);
    exec_opts neg = {.head = true, .window_units = -1};
    CHECK(exec_local_create(r.m, r.kv, r.cx, &neg, &e, &err) == LARES_EINVAL);
    CHECK(e == NULL);
    free(a.logits);
    free(b.logits);
    rig_close(&r);
}

/* Two groups of sequences through a device of a ring with two windows, one
 * group behind the other (a convoy): window 1 for A, window 1 for B, window 2
 * for A, ... After the first convoy the executor walks each window twice, so
 * nothing is asked out of the order it reads in (the walk of the windows in
 * round order mispredicted at every window B ran), and the hidden states are
 * those of the executor without a budget to the bit. Then A alone again:
 * one walk a window once the executor has seen it. */
#define IO_NAME(io) ((io) == EXEC_IO_DIRECT ? "direct" : "mmap")

static void check_convoy(exec_stream_io io) {
    rig r;
    if (!rig_open(&r, fixture("stories260K.gguf"), N_BATCH, N_CTX)) {
        return;
    }
    const int32_t n_layer = r.m->hp.n_layer, n_embd = r.m->hp.n_embd;
    lares_error err = {0};
    model_kv *kv[4] = {NULL}; /* the reference's A and B, the streaming executor's A and B */
    for (int i = 0; i < 4; i++) {
        CHECK_OK(model_kv_create(r.m, 0, n_layer, N_CTX, GGUF_TYPE_F32, &kv[i], &err), &err);
    }
    const exec_window two[] = {{0, 2}, {2, n_layer}};
    exec_opts ro = {.windows = two, .n_windows = 2};
    uint64_t total = 0, least = 0;
    CHECK_OK(exec_weight_needs(r.m, kv[2], &ro, &total, &least, &err), &err);
    exec_opts so = ro;
    so.weight_budget_bytes = least;
    so.stream_io = io;
    exec_local *ref = NULL, *e = NULL;
    CHECK_OK(exec_local_create(r.m, kv[0], r.cx, &ro, &ref, &err), &err);
    CHECK_OK(exec_local_create(r.m, kv[2], r.cx, &so, &e, &err), &err);
    exec_plan_info plan = {0};
    if (e != NULL) {
        exec_local_plan(e, &plan);
    }
    CHECKF(plan.streaming && plan.n_pinned < plan.n_units, "%s: %d of %d units pinned",
           IO_NAME(io), plan.n_pinned, plan.n_units);
    float *x = calloc((size_t)4 * (size_t)n_embd, sizeof(float)); /* ref A, ref B, A, B */
    exec_counters c0 = {0}, c1 = {0}, ct = {0};
    bool same = true;
    enum { STEPS = 8, ALONE = 4 };
    for (int32_t t = 0; ref != NULL && e != NULL && x != NULL && t < STEPS + ALONE; t++) {
        const int32_t tok[2] = {100 + 7 * t, 200 + 11 * t}, pos = t;
        const int groups = t < STEPS ? 2 : 1;
        for (int g = 0; g < groups; g++) {
            CHECK_OK(model_embed(r.m, &tok[g], 1, x + (size_t)g * n_embd, &err), &err);
            memcpy(x + (size_t)(2 + g) * n_embd, x + (size_t)g * n_embd, sizeof(float) * n_embd);
        }
        for (int w = 0; w < 2; w++) {
            for (int g = 0; g < groups; g++) {
                const model_seq rs = {.kv = kv[g], .n_rows = 1}, ss = {.kv = kv[2 + g], .n_rows = 1};
                CHECK_OK(exec_local_forward_seqs(ref, &rs, 1, two[w].l0, two[w].l1, &pos, 1,
                                                 x + (size_t)g * n_embd, &err), &err);
                CHECK_OK(exec_local_forward_seqs(e, &ss, 1, two[w].l0, two[w].l1, &pos, 1,
                                                 x + (size_t)(2 + g) * n_embd, &err), &err);
            }
        }
        for (int g = 0; g < groups; g++) {
            same = same && memcmp(x + (size_t)g * n_embd, x + (size_t)(2 + g) * n_embd,
                                  sizeof(float) * n_embd) == 0;
        }
        if (t == 0) {
            exec_local_counters(e, &c0); /* the first convoy teaches its length */
        } else if (t == STEPS - 1) {
            exec_local_counters(e, &c1);
        } else if (t == STEPS) {
            exec_local_counters(e, &ct); /* A alone: the first step turns the walks back */
        }
    }
    CHECKF(same, "%s: the convoy's hidden states differ from the executor's without a budget",
           IO_NAME(io));
    exec_counters c2 = {0};
    if (e != NULL) {
        exec_local_counters(e, &c2);
    }
    CHECKF(c1.n_mispredicted == c0.n_mispredicted,
           "%s: %llu mispredictions in %d steps of two groups", IO_NAME(io),
           (unsigned long long)(c1.n_mispredicted - c0.n_mispredicted), STEPS - 1);
    CHECKF(ct.n_mispredicted <= c1.n_mispredicted + 1 && c2.n_mispredicted == ct.n_mispredicted,
           "%s: %llu mispredictions when B left, %llu in the %d steps of A alone after", IO_NAME(io),
           (unsigned long long)(ct.n_mispredicted - c1.n_mispredicted),
           (unsigned long long)(c2.n_mispredicted - ct.n_mispredicted), ALONE - 1);
    /* each walk read the units it used (the window holds two units: none
     * lasts from A's use to B's), a group's step twice A's alone */
    const uint64_t convoy = (c1.prefetch_bytes - c0.prefetch_bytes) / (STEPS - 1);
    const uint64_t alone = (c2.prefetch_bytes - ct.prefetch_bytes) / (ALONE - 1);
    CHECKF(alone > 0 && convoy >= alone && convoy <= 2 * alone + alone / 8,
           "%s: a step of two groups read %llu bytes, of one %llu", IO_NAME(io),
           (unsigned long long)convoy, (unsigned long long)alone);
    free(x);
    exec_local_free(e);
    exec_local_free(ref);
    for (int i = 0; i < 4; i++) {
        model_kv_free(kv[i]);
    }
    rig_close(&r);
}

/* bytes of the units' spans resident now */
static uint64_t resident_layers(const mem_file *mf, const model_plan *p, int32_t n_layer,
                                size_t *n_ranges) {
    uint64_t sum = 0;
    *n_ranges = 0;
    for (int32_t l = 0; l < n_layer; l++) {
        mem_span s = {0};
        lares_error err;
        if (mem_span_of_layer(p, l, true, &s, &err) == LARES_OK) {
            sum += mem_resident_bytes(mf, &s);
            *n_ranges += s.n;
        }
        mem_span_free(&s);
    }
    return sum;
}

static bool copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    bool ok = a != NULL && b != NULL;
    char buf[65536];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) {
        ok = fwrite(buf, 1, n, b) == n;
    }
    if (a) {
        fclose(a);
    }
    if (b) {
        ok = fflush(b) == 0 && fsync(fileno(b)) == 0 && ok;
        fclose(b);
    }
    return ok;
}

/* The kernel's view: residency bounded by the window (nothing in the page
 * cache when read directly), bytes really read. */
static void check_residency(exec_stream_io io) {
    const char *copy = "test_mem_stream.copy.gguf";
    if (!copy_file(fixture("stories260K.gguf"), copy)) {
        CHECKF(false, "cannot copy the model to %s", copy);
        return;
    }
    int fd = open(copy, O_RDONLY);
    CHECK(fd >= 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    close(fd);
    rig r;
    if (!rig_open(&r, copy, N_BATCH, N_CTX)) {
        unlink(copy);
        return;
    }
    /* parsing the header faulted with read-around: drop what it brought in */
    fd = open(copy, O_RDONLY);
    CHECK(fd >= 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    close(fd);
    mem_file mf;
    mem_file_of(r.f, &mf);
    size_t n_ranges = 0;
    const int32_t L = r.m->hp.n_layer;
    /* the copy's pages were dropped: nothing of the layers is resident */
    CHECKF(resident_layers(&mf, r.m->plan, L, &n_ranges) <= 2 * n_ranges * mf.page,
           "layers resident before any run");
    uint64_t total = 0, least = 0;
    lares_error err = {0};
    exec_opts o = {.head = true};
    CHECK_OK(exec_weight_needs(r.m, r.kv, &o, &total, &least, &err), &err);
    /* WILLNEED reads exactly the ranges asked: the bound below is the
     * executor's discipline, not the kernel's read-ahead (which the plan
     * leaves slack for, and which on this 1 MB file would read all of it) */
    exec_opts so = {.head = true, .weight_budget_bytes = least, .window_units = 1,
                    .read_method = MEM_READ_FADVISE_POPULATE, .stream_io = io};
    exec_local *e = NULL;
    CHECK_OK(exec_local_create(r.m, r.kv, r.cx, &so, &e, &err), &err);
    if (e == NULL) {
        rig_close(&r);
        unlink(copy);
        return;
    }
    exec_plan_info plan;
    exec_local_plan(e, &plan);
    CHECK(plan.streaming && plan.n_pinned == 0 && plan.stream_bytes > 0);
    mem_sample before, after;
    mem_sample_now(&before);
    exec_counters c0, c1;
    exec_local_counters(e, &c0);
    /* the slack: pages shared with a neighbour at each end of each range */
    const bool direct = io == EXEC_IO_DIRECT && direct_works(copy);
    CHECK(plan.direct == direct);
    const uint64_t bound = (direct ? 0 : plan.window_bytes) + 2 * n_ranges * mf.page;
    uint64_t most = 0;
    int32_t pos[1];
    const int32_t tok = 1;
    for (int32_t step = 0; step < 8; step++) {
        pos[0] = step;
        exec_local_begin_pass(e, true);
        CHECK_OK(model_embed(r.m, &tok, 1, r.x, &err), &err);
        for (int32_t l = 0; l < L; l++) {
            CHECK_OK(exec_local_forward(e, l, l + 1, pos, 1, r.x, &err), &err);
            const uint64_t res = resident_layers(&mf, r.m->plan, L, &n_ranges);
            most = res > most ? res : most;
        }
        CHECK_OK(exec_local_output(e, r.x, 1, r.logits, &err), &err);
    }
    exec_local_counters(e, &c1);
    mem_sample_now(&after);
    CHECKF(most <= bound, "%llu bytes of layers resident at once, window %llu",
           (unsigned long long)most, (unsigned long long)bound);
    const uint64_t fetched = c1.prefetch_bytes - c0.prefetch_bytes;
    CHECKF(fetched >= 7 * plan.stream_bytes, "prefetched %llu bytes in 8 passes of %llu",
           (unsigned long long)fetched, (unsigned long long)plan.stream_bytes);
    /* prefetches round out to pages and releases round in, so a page shared
     * by two units is counted by both and stays: 80 % of what was asked must
     * still have come from the disk (it would be ~0 if releases did nothing) */
    if (before.read_bytes >= 0 && after.read_bytes >= 0) {
        const uint64_t read = (uint64_t)(after.read_bytes - before.read_bytes);
        CHECKF(read * 10 >= fetched * 8, "the disk gave %llu bytes for %llu prefetched",
               (unsigned long long)read, (unsigned long long)fetched);
    }
    exec_local_free(e);
    rig_close(&r);
    unlink(copy);
}

/* The public option: an unknown way of reading is refused by the session. */
static void check_session_option(void) {
    lares_model *lm = NULL;
    lares_error err = {0};
    CHECK_OK(lares_model_open(fixture("stories260K.gguf"), NULL, &lm, &err), &err);
    if (lm == NULL) {
        return;
    }
    lares_session_opts so = lares_session_opts_default();
    so.stream_io = (lares_stream_io)7;
    lares_session *s = NULL;
    CHECK(lares_session_create(lm, &so, &s, &err) == LARES_EINVAL && s == NULL);
    CHECKF(strstr(err.msg, "stream I/O 7") != NULL, "message: %s", err.msg);
    so.stream_io = LARES_STREAM_IO_DIRECT;
    CHECK_OK(lares_session_create(lm, &so, &s, &err), &err);
    lares_session_free(s);
    lares_model_close(lm);
}

int main(void) {
    json_error_t je;
    json_t *root = json_load_file(fixture("expected/greedy_once_upon_a_time.json"), 0, &je);
    CHECKF(root != NULL, "expected outputs: %s", je.text);
    for (size_t c = 0; root != NULL && c < LARES_ARRAY_LEN(greedy_cases); c++) {
        check_model(root, greedy_cases[c].file, greedy_cases[c].min_agree);
    }
    json_decref(root);
    /* units of 256 KiB and more in the larger files: auto's probe ran, and
     * chose by the margin (both ways, check_model) */
    CHECKF(direct_files == 0 || (probe_direct_runs > 0 && probe_mmap_runs > 0),
           "auto's probe chose direct reads %d times and the page cache %d times (%d files with "
           "direct reads)",
           probe_direct_runs, probe_mmap_runs, direct_files);
    check_rebudget("stories260K.gguf", EXEC_IO_MMAP);
    check_rebudget("stories260K.gguf", EXEC_IO_DIRECT);
    check_rebudget("derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf", EXEC_IO_AUTO);
    check_windows();
    check_convoy(EXEC_IO_MMAP);
    check_convoy(EXEC_IO_DIRECT);
    CHECKF(direct_files == 0 || expert_direct_runs > 0, "expert slices never read directly");
    CHECKF(direct_files == 0 || (expert_probe_runs[0] > 0 && expert_probe_runs[1] > 0),
           "auto's probe of experts chose the page cache %d times and direct reads %d times",
           expert_probe_runs[0], expert_probe_runs[1]);
    check_direct_fallback();
    check_experts_fallback();
    check_residency(EXEC_IO_MMAP);
    check_residency(EXEC_IO_DIRECT);
    check_session_option();
    return check_finish("mem_stream");
}
