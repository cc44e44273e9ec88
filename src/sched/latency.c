/*
 * The latency model of ../shared/docs/scheduling.md: what one generated token
 * costs on a ring, device by device. Every placement (Halda and the baselines)
 * is judged here, layer by layer, with each layer's own bytes and FLOPs; the
 * integer programs of halda.c use the same terms averaged over the layers.
 *
 * Per layer on a processor: for each weight type q, the time of its FLOPs at
 * the rate the device computes q when the weights stream from memory -- the
 * measured memory-bound rate when the profile has one, else the roofline
 * max(FLOPs / compute rate, bytes / memory bandwidth) (Williams, Waterman &
 * Patterson 2009, "Roofline") -- plus attention over n_past cached positions,
 * also by the roofline. A device whose share overflows its RAM re-reads the
 * excess from disk every token: (share - RAM) / disk throughput, sequential
 * reads on Linux and Android, random reads on macOS (scheduling.md). A hop is
 * latency + hidden-state bytes / bandwidth; a token makes k laps of the ring.
 */
#include "sched/sched_impl.h"

#include <math.h>
#include <stdlib.h>

sched_opts sched_opts_default(void) {
    sched_opts o;
    memset(&o, 0, sizeof o);
    o.placement = SCHED_HALDA;
    o.n_ctx = 4096;
    o.n_past = -1;
    o.kv_elem_bytes = 2;
    o.hidden_elem_bytes = 4;
    o.ram_reserve_bytes = 48ull << 20;
    o.vram_reserve_bytes = 256ull << 20;
    o.head = -1;
    o.net_default.latency_s = -1;
    o.drop_small = true;
    o.calibrate_gpu = true;
    o.max_case_iters = 16;
    o.stream_window_units = 2;
    o.stream_slack_bytes = 16ull << 20;
    return o;
}

void sched_device_init(sched_device *d, const char *name) {
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name ? name : "");
    d->os = SCHED_OS_LINUX;
    d->disk_free_bytes = -1;
    d->net_out.latency_s = -1;
}

double sched_rate_of(const sched_rates *r, uint32_t type) {
    if (type < GGUF_TYPE_COUNT && r->by_type[type] > 0) {
        return r->by_type[type];
    }
    return r->other > 0 ? r->other : 0.0;
}

double sched_disk_stream_Bps(const sched_device *d) {
    if (sched_disk_streams_direct(d)) {
        return d->disk_direct_Bps;
    }
    const double r = d->disk_stream_Bps > 0 ? d->disk_stream_Bps : d->disk_seq_Bps;
    if (d->disk_direct_Bps > 0 && r > SCHED_DIRECT_HEADROOM * d->disk_direct_Bps) {
        return SCHED_DIRECT_HEADROOM * d->disk_direct_Bps;
    }
    return r;
}

bool sched_disk_streams_direct(const sched_device *d) {
    return d->os != SCHED_OS_MACOS && d->gpu == SCHED_GPU_NONE && d->disk_direct_Bps > 0;
}

bool sched_unified(const sched_device *d) {
    return d->gpu == SCHED_GPU_METAL;
}

sched_case sched_overflow_case(const sched_device *d) {
    if (d->os == SCHED_OS_MACOS) {
        return d->gpu == SCHED_GPU_METAL ? SCHED_CASE_OVERFLOW_MACOS_METAL
                                         : SCHED_CASE_OVERFLOW_MACOS;
    }
    return SCHED_CASE_OVERFLOW;
}

const char *sched_os_name(sched_os os) {
    static const char *const names[SCHED_OS_COUNT] = {"linux", "android", "macos"};
    return (unsigned)os < SCHED_OS_COUNT ? names[os] : "?";
}

const char *sched_gpu_backend_name(sched_gpu_backend b) {
    static const char *const names[SCHED_GPU_COUNT] = {"none", "cuda", "metal"};
    return (unsigned)b < SCHED_GPU_COUNT ? names[b] : "?";
}

const char *sched_case_name(sched_case c) {
    static const char *const names[SCHED_CASE_COUNT] = {"fits", "overflow", "overflow-macos",
                                                        "overflow-macos-metal"};
    return (unsigned)c < SCHED_CASE_COUNT ? names[c] : "?";
}

const char *sched_placement_name(sched_placement p) {
    static const char *const names[SCHED_PLACEMENT_COUNT] = {"halda", "even", "memory", "single"};
    return (unsigned)p < SCHED_PLACEMENT_COUNT ? names[p] : "?";
}

int sched_placement_from_name(const char *name) {
    for (int p = 0; p < SCHED_PLACEMENT_COUNT; p++) {
        if (strcmp(name, sched_placement_name((sched_placement)p)) == 0) {
            return p;
        }
    }
    return -1;
}

/* ---- per-layer times ---- */

typedef struct proc_rates {
    const sched_rates *compute;  /* compute-bound */
    const sched_rates *streamed; /* measured memory-bound, or NULL */
    double bw;
    const char *what; /* "cpu" / "gpu" */
} proc_rates;

/* Seconds for `flops` FLOPs over `bytes` of weights of `type`; -1 when the
 * device has no figure for the type. */
static double type_time(const proc_rates *p, uint32_t type, double flops, double bytes) {
    if (flops <= 0 && bytes <= 0) {
        return 0.0;
    }
    double rs = p->streamed ? sched_rate_of(p->streamed, type) : 0.0;
    if (rs > 0) {
        return flops / rs;
    }
    double rc = sched_rate_of(p->compute, type);
    if (rc <= 0 || p->bw <= 0) {
        return flops > 0 ? -1.0 : bytes / (p->bw > 0 ? p->bw : 1.0);
    }
    return fmax(flops / rc, bytes / p->bw);
}

static lares_status layer_time(const sched_costs *c, const sched_device *d, const proc_rates *p,
                               const sched_layer *l, bool with_attention, double *out,
                               lares_error *err) {
    double t = 0.0;
    for (uint32_t q = 0; q < GGUF_TYPE_COUNT; q++) {
        if (l->bytes[q] == 0 && l->flops[q] == 0) {
            continue;
        }
        double tq = type_time(p, q, l->flops[q], (double)l->bytes[q]);
        if (tq < 0) {
            const gguf_type_info *ti = gguf_type_info_of(q);
            return lares_fail(err, LARES_EINVAL,
                              "device '%s' has no %s FLOP/s figure for %s (the model uses it)",
                              d->name, p->what, ti ? ti->name : "?");
        }
        t += tq;
    }
    if (with_attention && c->n_past > 0) {
        const sched_model *m = c->m;
        /* q.k over n_past positions, then the weighted sum of values: 2 FLOPs per
         * multiply-add, head_dim per head per position, twice */
        double flops = 4.0 * m->n_head * (double)m->head_dim * c->n_past;
        double bytes = (double)sched_layer_kv_bytes(m, c->n_past, c->o->kv_elem_bytes);
        uint32_t kvt = c->o->kv_elem_bytes == 2 ? GGUF_TYPE_F16 : GGUF_TYPE_F32;
        proc_rates roof = *p;
        roof.streamed = NULL;
        double ta = type_time(&roof, kvt, flops, bytes);
        if (ta < 0) {
            return lares_fail(err, LARES_EINVAL,
                              "device '%s' has no %s FLOP/s figure for %s (attention uses it)",
                              d->name, p->what, kvt == GGUF_TYPE_F16 ? "f16" : "f32");
        }
        t += ta;
    }
    *out = t;
    return LARES_OK;
}

static int cmp_desc_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int32_t sched_most_layers(const uint64_t *sums, int32_t L, uint64_t limit) {
    int32_t lo = 0, hi = L; /* sums[lo] <= limit; binary search the last such j */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (sums[mid] <= limit) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

void sched_costs_free(sched_costs *c) {
    if (c == NULL) {
        return;
    }
    lares_free(c->t_cpu);
    lares_free(c->t_gpu);
    lares_free(c->bp);
    lares_free(c->bp_heavy);
    lares_free(c->b_heavy);
    lares_free(c->avg_tc);
    lares_free(c->avg_tg);
    lares_free(c->ram_limit);
    lares_free(c->vram_limit);
    lares_free(c->disk_Bps);
    lares_free(c->t_head);
    lares_free(c->gpu_trim);
    lares_free(c->quota_u);
    lares_free(c->quota_P);
    lares_free(c->read_cpu);
    lares_free(c);
}

static lares_status check_device(const sched_device *d, lares_error *err) {
    if (d->name[0] == '\0') {
        return lares_fail(err, LARES_EINVAL, "a device has no name");
    }
    if (d->cores < 1 || (unsigned)d->os >= SCHED_OS_COUNT || (unsigned)d->gpu >= SCHED_GPU_COUNT) {
        return lares_fail(err, LARES_EINVAL, "device '%s': cores %d, os %d, gpu %d out of range",
                          d->name, d->cores, (int)d->os, (int)d->gpu);
    }
    if (!(d->mem_bw_Bps > 0) || !isfinite(d->mem_bw_Bps)) {
        return lares_fail(err, LARES_EINVAL, "device '%s': memory bandwidth %g is not positive",
                          d->name, d->mem_bw_Bps);
    }
    if (!(d->disk_seq_Bps > 0) || !isfinite(d->disk_seq_Bps) || !(d->disk_rand_Bps >= 0) ||
        !(d->disk_stream_Bps >= 0) || !(d->disk_stream_cpu_Bps >= 0) ||
        !(d->disk_direct_Bps >= 0) || !isfinite(d->disk_direct_Bps) ||
        !(d->disk_cached_share >= 0 && d->disk_cached_share <= 1)) {
        return lares_fail(err, LARES_EINVAL, "device '%s': disk throughput %g / %g", d->name,
                          d->disk_seq_Bps, d->disk_rand_Bps);
    }
    if (d->gpu != SCHED_GPU_NONE && !(d->gpu_mem_bw_Bps > 0)) {
        return lares_fail(err, LARES_EINVAL, "device '%s': GPU memory bandwidth %g", d->name,
                          d->gpu_mem_bw_Bps);
    }
    return LARES_OK;
}

lares_status sched_costs_create(const sched_model *m, const sched_device *devs, size_t n,
                                const sched_opts *o, sched_costs **out, lares_error *err) {
    if (n == 0) {
        return lares_fail(err, LARES_EINVAL, "no devices to plan for");
    }
    if (m->n_layer < 1) {
        return lares_fail(err, LARES_EINVAL, "model '%s' has no layers", m->name);
    }
    if (o->n_ctx < 1 || (o->kv_elem_bytes != 2 && o->kv_elem_bytes != 4) ||
        o->hidden_elem_bytes < 1 || o->hidden_elem_bytes > 8) {
        return lares_fail(err, LARES_EINVAL, "options: context %d, KV %u bytes, hidden %u bytes",
                          o->n_ctx, o->kv_elem_bytes, o->hidden_elem_bytes);
    }
    if (o->rounds < 0 || (o->rounds > 0 && m->n_layer % o->rounds != 0)) {
        return lares_fail(err, LARES_EINVAL,
                          "options: %d rounds do not divide the %d layers of model '%s'", o->rounds,
                          m->n_layer, m->name);
    }
    for (size_t i = 0; i < n; i++) {
        lares_status st = check_device(&devs[i], err);
        if (st != LARES_OK) {
            return st;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(devs[i].name, devs[j].name) == 0) {
                return lares_fail(err, LARES_EINVAL, "two devices are named '%s'", devs[i].name);
            }
        }
    }
    sched_costs *c = lares_calloc(1, sizeof *c);
    if (c == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st = LARES_OK;
    const size_t L = (size_t)m->n_layer;
    c->m = m;
    c->devs = devs;
    c->n = n;
    c->o = o;
    c->L = m->n_layer;
    c->n_past = o->n_past >= 0 ? LARES_MIN(o->n_past, o->n_ctx) : o->n_ctx / 2;
    c->kv_bytes = sched_layer_kv_bytes(m, o->n_ctx, o->kv_elem_bytes);
    c->kv_past_bytes =
        sched_layer_kv_bytes(m, LARES_MIN(c->n_past + 1, o->n_ctx), o->kv_elem_bytes);
    c->t_cpu = lares_calloc(n * L, sizeof *c->t_cpu);
    c->t_gpu = lares_calloc(n * L, sizeof *c->t_gpu);
    c->bp = lares_calloc(L, sizeof *c->bp);
    c->bp_heavy = lares_calloc(L + 1, sizeof *c->bp_heavy);
    c->b_heavy = lares_calloc(L + 1, sizeof *c->b_heavy);
    c->avg_tc = lares_calloc(n, sizeof *c->avg_tc);
    c->avg_tg = lares_calloc(n, sizeof *c->avg_tg);
    c->ram_limit = lares_calloc(n, sizeof *c->ram_limit);
    c->vram_limit = lares_calloc(n, sizeof *c->vram_limit);
    c->disk_Bps = lares_calloc(n, sizeof *c->disk_Bps);
    c->t_head = lares_calloc(n, sizeof *c->t_head);
    c->gpu_trim = lares_calloc(n, sizeof *c->gpu_trim);
    c->quota_u = lares_calloc(n, sizeof *c->quota_u);
    c->quota_P = lares_calloc(n, sizeof *c->quota_P);
    c->read_cpu = lares_calloc(n, sizeof *c->read_cpu);
    if (!c->t_cpu || !c->t_gpu || !c->bp || !c->bp_heavy || !c->b_heavy || !c->avg_tc ||
        !c->avg_tg || !c->ram_limit || !c->vram_limit || !c->disk_Bps || !c->t_head ||
        !c->gpu_trim || !c->quota_u || !c->quota_P || !c->read_cpu) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto fail;
    }
    double sum_b = 0, sum_bp = 0;
    for (size_t l = 0; l < L; l++) {
        c->bp[l] = m->layers[l].weight_bytes + c->kv_bytes;
        sum_b += (double)m->layers[l].weight_bytes;
        sum_bp += (double)c->bp[l];
    }
    c->avg_b = sum_b / (double)L;
    c->avg_bp = sum_bp / (double)L;
    /* hard limits (VRAM, storage) must hold whichever layers a window gets:
     * bound them by the heaviest layers */
    for (size_t l = 0; l < L; l++) {
        c->bp_heavy[l + 1] = c->bp[l];
        c->b_heavy[l + 1] = m->layers[l].weight_bytes;
    }
    qsort(c->bp_heavy + 1, L, sizeof *c->bp_heavy, cmp_desc_u64);
    qsort(c->b_heavy + 1, L, sizeof *c->b_heavy, cmp_desc_u64);
    for (size_t l = 1; l <= L; l++) {
        c->bp_heavy[l] += c->bp_heavy[l - 1];
        c->b_heavy[l] += c->b_heavy[l - 1];
    }
    c->head_bytes = m->head.weight_bytes;
    for (size_t d = 0; d < n; d++) {
        const sched_device *dv = &devs[d];
        bool has_mem = false;
        for (uint32_t q = 0; q < GGUF_TYPE_COUNT && !has_mem; q++) {
            has_mem = dv->cpu_flops_mem.by_type[q] > 0;
        }
        proc_rates cpu = {&dv->cpu_flops,
                          has_mem || dv->cpu_flops_mem.other > 0 ? &dv->cpu_flops_mem : NULL,
                          dv->mem_bw_Bps, "cpu"};
        proc_rates gpu = {&dv->gpu_flops, NULL, dv->gpu_mem_bw_Bps, "gpu"};
        double stc = 0, stg = 0;
        for (size_t l = 0; l < L; l++) {
            if ((st = layer_time(c, dv, &cpu, &m->layers[l], true, &c->t_cpu[d * L + l], err))) {
                goto fail;
            }
            stc += c->t_cpu[d * L + l];
            if (dv->gpu != SCHED_GPU_NONE) {
                if ((st =
                         layer_time(c, dv, &gpu, &m->layers[l], true, &c->t_gpu[d * L + l], err))) {
                    goto fail;
                }
                stg += c->t_gpu[d * L + l];
            }
        }
        c->avg_tc[d] = stc / (double)L;
        c->avg_tg[d] = stg / (double)L;
        /* the output matrix and norm on the head's CPU; sampling (a pass over
         * n_vocab logits) and the embedding row are below a millisecond */
        if ((st = layer_time(c, dv, &cpu, &m->head, false, &c->t_head[d], err))) {
            lares_error_prefix(err, "head work: ");
            goto fail;
        }
        uint64_t ram = dv->ram_avail_bytes;
        if (dv->os == SCHED_OS_ANDROID) {
            ram += dv->swap_avail_bytes; /* zram: compressed RAM the OS swaps apps to */
        }
        /* the executor's overheads (api/budget.c): the reserve (program,
         * buffers) and the page tables of the mapping, 1/256 of the file */
        const uint64_t fixed = o->ram_reserve_bytes + m->file_bytes / 256;
        c->ram_limit[d] = ram > fixed ? ram - fixed : 0;
        if (dv->gpu == SCHED_GPU_CUDA) {
            c->vram_limit[d] = dv->vram_avail_bytes > o->vram_reserve_bytes
                                   ? dv->vram_avail_bytes - o->vram_reserve_bytes
                                   : 0;
        } else if (dv->gpu == SCHED_GPU_METAL) {
            c->vram_limit[d] = dv->vram_avail_bytes;
        }
        /* what streaming reads at: direct reads where the file system takes
         * them, else the page cache's streaming figure (or the sequential
         * one) bounded by direct reads (sched_disk_stream_Bps);
         * macOS: random reads (scheduling.md; its executor path is not measured) */
        if (dv->os == SCHED_OS_MACOS && dv->disk_rand_Bps > 0) {
            c->disk_Bps[d] = dv->disk_rand_Bps;
        } else {
            c->disk_Bps[d] = sched_disk_stream_Bps(dv);
        }
        /* the prefetch thread's CPU per byte, where the executor streams
         * (not on macOS, whose path is not measured) */
        c->read_cpu[d] = dv->os != SCHED_OS_MACOS && !sched_disk_streams_direct(dv) &&
                                 dv->disk_stream_cpu_Bps > 0
                             ? 1.0 / dv->disk_stream_cpu_Bps
                             : 0.0;
        const int32_t th = dv->threads > 0 ? dv->threads : dv->cores;
        c->quota_u[d] = dv->cpu_quota > 0 ? dv->cpu_quota / th : INFINITY;
        c->quota_P[d] = dv->cpu_quota_period_s > 0 ? dv->cpu_quota_period_s : 0.1;
    }
    c->max_layer_bytes = c->b_heavy[1];
    for (int32_t l = 0; l < m->n_layer; l++) {
        /* joined up to nothing, the units are the parts (or the layer, described without) */
        uint64_t unit[SCHED_PARTS];
        const int32_t nu = sched_layer_units(&m->layers[l], 0, unit);
        for (int32_t j = 0; j < nu; j++) {
            c->part_max = LARES_MAX(c->part_max, unit[j]);
        }
    }
    *out = c;
    return LARES_OK;
fail:
    sched_costs_free(c);
    return st;
}

uint64_t sched_ram_of(const sched_costs *c, size_t d, size_t head) {
    uint64_t r = c->ram_limit[d];
    if (d == head) { /* the output matrix, and the embedding the executor counts */
        const uint64_t h = c->head_bytes + c->m->embd_bytes;
        r = r > h ? r - h : 0;
    }
    return r;
}

static bool hop_known(const sched_hop *h) {
    return h->latency_s >= 0 && h->bandwidth_Bps > 0 && isfinite(h->latency_s);
}

lares_status sched_hop_s(const sched_costs *c, size_t a, size_t b, double *out, lares_error *err) {
    const sched_hop *h = NULL;
    for (size_t i = 0; i < c->o->n_links; i++) {
        const sched_link *lk = &c->o->links[i];
        if (lk->from == a && lk->to == b) {
            h = &lk->hop;
        }
    }
    if (h == NULL && hop_known(&c->devs[a].net_out)) {
        h = &c->devs[a].net_out;
    }
    if (h == NULL && hop_known(&c->o->net_default)) {
        h = &c->o->net_default;
    }
    if (h == NULL || !hop_known(h)) {
        return lares_fail(err, LARES_EINVAL,
                          "no network figures for the hop %s -> %s: give a link, the device's "
                          "\"net\" or a default network",
                          c->devs[a].name, c->devs[b].name);
    }
    double bytes = (double)c->m->n_embd * c->o->hidden_elem_bytes;
    *out = h->latency_s + bytes / h->bandwidth_Bps;
    return LARES_OK;
}
