/*
 * Estimated figures for a loaded model: each matrix product priced by the
 * roofline max(flops / rate, weight bytes / bandwidth) on each side (plus a
 * kernel launch on the device), activations priced in the format the CPU path
 * copies (quant traits' vec_dot_type), and the placement's JSON for `lares plan`.
 */
#include "gpu/gpu_impl.h"
#include "gpu/gpu_types.h"

#include <math.h>

gpu_est_rates gpu_est_rates_default(void) {
    /* An 8-core desktop CPU (~25 GB/s effective on quantized mat-vec, ~400 GFLOP/s
     * on mat-mat), a mid-range GPU (~400 GB/s, ~20 TFLOP/s on dequantized mat-mat),
     * PCIe 4.0 x16 (~25 GB/s effective, ~10 us per copy including the sync).
     * A guess in the right range; a device profiler replaces it. */
    return (gpu_est_rates){
        .cpu_flops = 400e9,
        .cpu_bw_Bps = 25e9,
        .gpu_flops = 20e12,
        .gpu_bw_Bps = 400e9,
        .gpu_launch_s = 8e-6,
        .gpu_queue_s = 3e-6,
        .device_layers = true,
        .ctx_plan = 256,
        .link = {.latency_s = 10e-6, .h2d_Bps = 25e9, .d2h_Bps = 25e9},
    };
}

/* a product's time on the device without its launch */
static double gpu_kernel_s(const gpu_est_rates *r, uint32_t type, double flops, uint64_t bytes) {
    const double Bps =
        type < GGUF_TYPE_COUNT && r->gpu_Bps_type[type] > 0 ? r->gpu_Bps_type[type] : r->gpu_bw_Bps;
    return fmax(flops / r->gpu_flops, (double)bytes / Bps);
}

/* A layer's non-product work (norms, RoPE, attention over ctx_plan positions,
 * SwiGLU, residuals) on each side, and the whole layer on the device: its
 * products and that work as queued kernels, no copies in between. */
static void add_layer(const model *mdl, const gpu_est_rates *r, int32_t n_tok, gpu_meas *m,
                      int32_t l) {
    const model_hparams *hp = &mdl->hp;
    const double e = hp->n_embd, qd = (double)hp->n_head * hp->head_dim,
                 kvd = (double)hp->n_head_kv * hp->head_dim, ff = hp->n_ff, nt = n_tok;
    const double ctx = r->ctx_plan > 0 ? r->ctx_plan : 1;
    /* floats read and written by the element-wise ops, the cache read once */
    const double bytes = nt * 4 * (6 * e + 3 * qd + 4 * kvd + 3 * ff) + ctx * 2 * kvd * 2;
    const double attn_flops = nt * ctx * qd * 4;
    const int n_ops = 8; /* 2 norms, rope, store, attention, swiglu, 2 residuals */
    gpu_layer_meas *lm = &m->layers[l];
    lm->rest_cpu_s = fmax(bytes / r->cpu_bw_Bps, attn_flops / r->cpu_flops) + n_ops * 4e-6;
    lm->x_bytes = (uint64_t)(nt * e * sizeof(float));
    lm->whole_ok = r->device_layers && gpu_layer_plain(mdl, l);
    double t = fmax(bytes / r->gpu_bw_Bps, attn_flops / r->gpu_flops) + n_ops * r->gpu_queue_s;
    int n_products = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const gpu_tensor_meas *tm = &m->t[i];
        if (tm->layer != l) {
            continue;
        }
        lm->whole_ok = lm->whole_ok && tm->gpu_ok;
        t += tm->gpu_s - r->gpu_launch_s + r->gpu_queue_s;
        n_products++;
    }
    /* activations quantized on the device: about one kernel per group */
    lm->whole_gpu_s = lm->whole_ok ? t + 4 * r->gpu_queue_s : 0;
    lm->whole_ok = lm->whole_ok && n_products > 0;
}

typedef struct builder {
    gpu_meas *m;
    const gpu_est_rates *r;
    int32_t n_tok;
    size_t nt, ng;
    const ops_matrix **ws; /* NULL, or the matrix of each tensor */
} builder;

/* A group of products sharing one input. Nothing the runtime runs between two
 * groups (SwiGLU, attention) runs on a device, so no group fuses with the next. */
static void add_group(builder *b, int32_t layer) {
    gpu_group_meas *g = &b->m->groups[b->ng++];
    g->layer = layer;
    g->fuse_next = false;
    g->mid_cpu_s = 0;
    g->mid_gpu_s = 0;
}

static void add_tensor(builder *b, int32_t layer, const char *name, const ops_matrix *w) {
    if (b->ws != NULL) {
        b->ws[b->nt] = w;
    }
    gpu_tensor_meas *t = &b->m->t[b->nt++];
    gpu_group_meas *g = &b->m->groups[b->ng - 1];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->layer = layer;
    t->group = (int32_t)(b->ng - 1);
    t->type = w->qt->type;
    t->bytes = (uint64_t)w->row_bytes * (uint64_t)w->n_out;
    const double flops = 2.0 * (double)w->n_in * (double)w->n_out * b->n_tok;
    const double cpu_Bps = t->type < GGUF_TYPE_COUNT && b->r->cpu_Bps_type[t->type] > 0
                               ? b->r->cpu_Bps_type[t->type]
                               : b->r->cpu_bw_Bps;
    t->cpu_s = fmax(flops / b->r->cpu_flops, (double)t->bytes / cpu_Bps);
    t->gpu_s = gpu_kernel_s(b->r, t->type, flops, t->bytes) + b->r->gpu_launch_s;
    t->out_bytes = (uint64_t)w->n_out * (uint64_t)b->n_tok * sizeof(float);
    t->gpu_ok = gpu_type_ok(t->type);
    /* members of a group may differ in activation format: the largest is copied */
    const uint64_t in = ops_act_bytes(w->qt->vec_dot_type, b->n_tok, w->n_in);
    g->in_bytes = in > g->in_bytes ? in : g->in_bytes;
}

lares_status gpu_estimate_with_matrices(const model *mdl, const gpu_est_rates *r, int32_t n_tok,
                                        gpu_meas **out, const ops_matrix ***ws_out,
                                        lares_error *err) {
    const model_hparams *hp = &mdl->hp;
    if (n_tok < 1 || r == NULL ||
        !(r->cpu_flops > 0 && r->cpu_bw_Bps > 0 && r->gpu_flops > 0 && r->gpu_bw_Bps > 0 &&
          r->gpu_launch_s >= 0 && r->gpu_queue_s >= 0)) {
        return lares_fail(err, LARES_EINVAL,
                          "gpu estimate: %d tokens per pass or a device rate not positive",
                          (int)n_tok);
    }
    /* the products the runtime may offload, group by group as the layer plan
     * runs them (its ids are in execution order); the op between two groups
     * (SwiGLU, attention) runs on the CPU whatever the placement, so no group
     * fuses with the next one */
    size_t n_t = 1, n_g = 1;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        for (int gi = 0; gi < MODEL_GROUP_COUNT; gi++) {
            const model_group *g = &mdl->plan->layers[l].g[gi];
            if (g->n > 0 && g->on_device) {
                n_g++;
                n_t += (size_t)g->n;
            }
        }
    }
    gpu_meas *m;
    lares_status st = gpu_meas_create(hp->n_layer, n_t, n_g, &m, err);
    if (st != LARES_OK) {
        return st;
    }
    m->n_tok = n_tok;
    m->link = r->link;
    builder b = {.m = m, .r = r, .n_tok = n_tok};
    if (ws_out != NULL) {
        b.ws = lares_calloc(m->n_tensors, sizeof(*b.ws));
        if (b.ws == NULL) {
            gpu_meas_free(m);
            return lares_fail(err, LARES_ENOMEM, "gpu estimate: out of memory");
        }
    }
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const model_layer_plan *lp = &mdl->plan->layers[l];
        for (int gi = 0; gi < MODEL_GROUP_COUNT; gi++) {
            const model_group *g = &lp->g[gi];
            if (g->n == 0 || !g->on_device) {
                continue;
            }
            add_group(&b, l);
            for (int i = 0; i < g->n; i++) {
                const model_role role = g->member[i];
                add_tensor(&b, l, lp->w[role].t->name, &mdl->layers[l].mat[role]);
            }
        }
    }
    add_group(&b, hp->n_layer);
    add_tensor(&b, hp->n_layer, mdl->output_tied ? "token_embd.weight" : "output.weight",
               &mdl->output);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        add_layer(mdl, r, n_tok, m, l);
    }
    st = gpu_meas_validate(m, err);
    if (st != LARES_OK) {
        lares_free(b.ws);
        gpu_meas_free(m);
        return st;
    }
    if (ws_out != NULL) {
        *ws_out = b.ws;
    }
    *out = m;
    return LARES_OK;
}

lares_status gpu_meas_estimate(const model *mdl, const gpu_est_rates *r, int32_t n_tok,
                               gpu_meas **out, lares_error *err) {
    return gpu_estimate_with_matrices(mdl, r, n_tok, out, NULL, err);
}

/* ---- the plan's JSON: a growing buffer, no library needed ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

LARES_PRINTF(2, 3)
static void put(sbuf *s, const char *fmt, ...) {
    if (s->oom) {
        return;
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(s->p + s->len, s->cap - s->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            s->oom = true;
            return;
        }
        if ((size_t)n < s->cap - s->len) {
            s->len += (size_t)n;
            return;
        }
        const size_t cap = s->cap * 2 + (size_t)n;
        char *q = lares_realloc(s->p, cap);
        if (q == NULL) {
            s->oom = true;
            return;
        }
        s->p = q;
        s->cap = cap;
    }
}

static lares_status put_method(sbuf *s, const gpu_meas *m, gpu_method method, uint64_t budget,
                               double t_cpu, lares_error *err) {
    gpu_place_opts o = gpu_place_opts_default();
    o.method = method;
    o.budget_bytes = budget;
    gpu_placement *p;
    lares_status st = gpu_place(m, &o, &p, err);
    if (st != LARES_OK) {
        return st;
    }
    put(s,
        "\"%s\":{\"predicted_ms\":%.4f,\"speedup_vs_cpu\":%.4f,\"weight_bytes\":%" PRIu64
        ",\"n_tensors\":%zu,\"layers_whole\":%d,\"tensors\":[",
        gpu_method_name(method), p->t_pass_s * 1e3, p->t_pass_s > 0 ? t_cpu / p->t_pass_s : 0,
        p->weight_bytes, p->n_placed, (int)p->n_layers_whole);
    for (size_t k = 0; k < p->n_placed; k++) {
        /* names are ours (estimate.c): no characters that need escaping */
        put(s, "%s\"%s\"", k ? "," : "", m->t[p->order[k]].name);
    }
    put(s, "]}");
    gpu_placement_free(p);
    return LARES_OK;
}

lares_status gpu_plan_json(const gpu_meas *m, uint64_t budget_bytes, gpu_method chosen,
                           char **json_out, lares_error *err) {
    if (chosen != GPU_OFFLOAD_LAYERS && chosen != GPU_OFFLOAD_AFFINITY) {
        return lares_fail(err, LARES_EINVAL, "gpu plan: method '%s' places nothing",
                          gpu_method_name(chosen));
    }
    bool *none = lares_calloc(m->n_tensors, sizeof(bool));
    if (none == NULL) {
        return lares_fail(err, LARES_ENOMEM, "gpu plan: out of memory");
    }
    double t_cpu;
    lares_status st = gpu_predict(m, none, &t_cpu, err);
    lares_free(none);
    if (st != LARES_OK) {
        return st;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        total += m->t[i].bytes;
    }
    sbuf s = {.p = lares_calloc(1, 256), .cap = 256};
    s.oom = s.p == NULL;
    put(&s,
        "{\"budget_bytes\":%" PRIu64 ",\"model_weight_bytes\":%" PRIu64
        ",\"n_tok\":%d,\"cpu_only_ms\":%.4f,\"chosen\":\"%s\",",
        budget_bytes, total, (int)m->n_tok, t_cpu * 1e3, gpu_method_name(chosen));
    st = put_method(&s, m, GPU_OFFLOAD_LAYERS, budget_bytes, t_cpu, err);
    if (st == LARES_OK) {
        put(&s, ",");
        st = put_method(&s, m, GPU_OFFLOAD_AFFINITY, budget_bytes, t_cpu, err);
    }
    put(&s, "}");
    if (st == LARES_OK && s.oom) {
        st = lares_fail(err, LARES_ENOMEM, "gpu plan: out of memory");
    }
    if (st != LARES_OK) {
        lares_free(s.p);
        return st;
    }
    *json_out = s.p;
    return LARES_OK;
}
