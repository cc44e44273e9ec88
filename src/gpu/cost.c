/*
 * The measurements' container and the cost model every placement is priced by
 * (docs/gpu.md, "cost model"):
 *
 *   T = sum over matrices of (on device ? gpu_s : cpu_s)
 *     + per group with a member on the device and an input not already there:
 *       one host-to-device copy of its input
 *     + per matrix on the device whose output is not consumed there:
 *       one device-to-host copy of its output
 *     + per group with a fusable op after it: mid_gpu_s when it and the next
 *       group are wholly on the device (then the op runs there and neither
 *       side crosses the bus), mid_cpu_s otherwise.
 *
 * So a matrix placed alone between CPU neighbours pays copies both ways, and
 * completing a run of device groups removes copies: the re-ranking in
 * placement.c sees both through this one function.
 */
#include "gpu/gpu_impl.h"

#include <math.h>

lares_status gpu_meas_create(int32_t n_layer, size_t n_tensors, size_t n_groups, gpu_meas **out,
                             lares_error *err) {
    if (n_layer < 0 || n_tensors == 0 || n_groups == 0) {
        return lares_fail(err, LARES_EINVAL,
                          "gpu measurements: %d layers, %zu tensors, %zu groups (need layers "
                          ">= 0 and at least one tensor and group)",
                          (int)n_layer, n_tensors, n_groups);
    }
    gpu_meas *m = lares_calloc(1, sizeof(*m));
    if (m == NULL) {
        goto fail;
    }
    m->n_layer = n_layer;
    m->n_tok = 1;
    m->n_tensors = n_tensors;
    m->n_groups = n_groups;
    m->t = lares_calloc(n_tensors, sizeof(*m->t));
    m->groups = lares_calloc(n_groups, sizeof(*m->groups));
    m->layers = lares_calloc((size_t)n_layer + 1, sizeof(*m->layers));
    if (m->t == NULL || m->groups == NULL || m->layers == NULL) {
        goto fail;
    }
    *out = m;
    return LARES_OK;
fail:
    gpu_meas_free(m);
    return lares_fail(err, LARES_ENOMEM, "gpu measurements of %zu tensors: out of memory",
                      n_tensors);
}

void gpu_meas_free(gpu_meas *m) {
    if (m == NULL) {
        return;
    }
    lares_free(m->t);
    lares_free(m->groups);
    lares_free(m->layers);
    lares_free(m);
}

static bool time_ok(double s) {
    return isfinite(s) && s >= 0;
}

lares_status gpu_meas_validate(const gpu_meas *m, lares_error *err) {
    if (m == NULL || m->t == NULL || m->groups == NULL || m->n_tensors == 0 || m->n_groups == 0 ||
        m->n_layer < 0) {
        return lares_fail(err, LARES_EINVAL, "gpu measurements: empty or missing");
    }
    const gpu_link_meas *k = &m->link;
    if (!time_ok(k->latency_s) || !(isfinite(k->h2d_Bps) && k->h2d_Bps > 0) ||
        !(isfinite(k->d2h_Bps) && k->d2h_Bps > 0)) {
        return lares_fail(err, LARES_EINVAL,
                          "gpu measurements: link latency %g s, h2d %g B/s, d2h %g B/s (need a "
                          "latency >= 0 and bandwidths > 0)",
                          k->latency_s, k->h2d_Bps, k->d2h_Bps);
    }
    for (int32_t l = 0; m->layers != NULL && l <= m->n_layer; l++) {
        const gpu_layer_meas *lm = &m->layers[l];
        if (!time_ok(lm->whole_gpu_s) || !time_ok(lm->rest_cpu_s) ||
            (lm->whole_ok && l == m->n_layer)) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: layer %d: whole %g s, rest on the CPU %g s%s",
                              (int)l, lm->whole_gpu_s, lm->rest_cpu_s,
                              l == m->n_layer && lm->whole_ok ? " (the head is never whole)" : "");
        }
    }
    for (size_t g = 0; g < m->n_groups; g++) {
        const gpu_group_meas *gm = &m->groups[g];
        if (gm->layer < 0 || gm->layer > m->n_layer) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: group %zu: layer %d outside 0..%d", g,
                              (int)gm->layer, (int)m->n_layer);
        }
        if (g > 0 && gm->layer < m->groups[g - 1].layer) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: group %zu: layer %d after layer %d (groups must "
                              "be ordered by layer)",
                              g, (int)gm->layer, (int)m->groups[g - 1].layer);
        }
        if (!time_ok(gm->mid_cpu_s) || !time_ok(gm->mid_gpu_s)) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: group %zu: mid_cpu_s %g or mid_gpu_s %g is "
                              "negative or not finite",
                              g, gm->mid_cpu_s, gm->mid_gpu_s);
        }
    }
    size_t prev_group = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const gpu_tensor_meas *t = &m->t[i];
        const char *nm = t->name[0] != '\0' ? t->name : "(unnamed)";
        if (memchr(t->name, '\0', sizeof(t->name)) == NULL) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: tensor %zu: name not terminated", i);
        }
        if (t->layer < 0 || t->layer > m->n_layer) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: tensor '%s': layer %d outside 0..%d", nm,
                              (int)t->layer, (int)m->n_layer);
        }
        if (t->group < 0 || (size_t)t->group >= m->n_groups) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: tensor '%s': group %d outside 0..%zu", nm,
                              (int)t->group, m->n_groups - 1);
        }
        if (m->groups[t->group].layer != t->layer) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: tensor '%s' of layer %d in group %d of layer %d",
                              nm, (int)t->layer, (int)t->group, (int)m->groups[t->group].layer);
        }
        if (i > 0 && (size_t)t->group < prev_group) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: tensor '%s': group %d after group %zu (tensors "
                              "must be ordered by group)",
                              nm, (int)t->group, prev_group);
        }
        prev_group = (size_t)t->group;
        if (t->bytes == 0) {
            return lares_fail(err, LARES_EINVAL, "gpu measurements: tensor '%s': bytes is 0", nm);
        }
        if (!time_ok(t->cpu_s) || !time_ok(t->gpu_s)) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu measurements: tensor '%s': cpu_s %g or gpu_s %g is negative "
                              "or not finite",
                              nm, t->cpu_s, t->gpu_s);
        }
    }
    /* every group has a member: tensors are ordered by group, so walk both */
    size_t i = 0;
    for (size_t g = 0; g < m->n_groups; g++) {
        if (i >= m->n_tensors || (size_t)m->t[i].group != g) {
            return lares_fail(err, LARES_EINVAL, "gpu measurements: group %zu has no tensor", g);
        }
        while (i < m->n_tensors && (size_t)m->t[i].group == g) {
            i++;
        }
    }
    return LARES_OK;
}

lares_status gpu_layer_spans(const gpu_meas *m, gpu_layer_span **out, lares_error *err) {
    const size_t n = (size_t)m->n_layer + 1;
    gpu_layer_span *sp = lares_calloc(n, sizeof(*sp));
    if (sp == NULL) {
        return lares_fail(err, LARES_ENOMEM, "gpu placement: spans of %zu layers", n);
    }
    /* empty spans start where the previous layer ended */
    size_t ti = 0, gi = 0;
    for (size_t l = 0; l < n; l++) {
        sp[l].layer = (int32_t)l;
        sp[l].t_lo = ti;
        while (ti < m->n_tensors && (size_t)m->t[ti].layer == l) {
            ti++;
        }
        sp[l].t_hi = ti;
        sp[l].g_lo = gi;
        while (gi < m->n_groups && (size_t)m->groups[gi].layer == l) {
            gi++;
        }
        sp[l].g_hi = gi;
    }
    *out = sp;
    return LARES_OK;
}

double gpu_xfer_s(double latency_s, double Bps, uint64_t bytes) {
    return bytes == 0 ? 0.0 : latency_s + (double)bytes / Bps;
}

/* for each group of the span: whether any / all of its members are on the device */
static void group_state(const gpu_meas *m, const gpu_layer_span *sp, const bool *on_gpu, size_t g,
                        bool *any, bool *all) {
    *any = false;
    *all = true;
    for (size_t i = sp->t_lo; i < sp->t_hi; i++) {
        if ((size_t)m->t[i].group == g) {
            *any |= on_gpu[i];
            *all &= on_gpu[i];
        }
    }
}

double gpu_layer_cost(const gpu_meas *m, const gpu_layer_span *sp, const bool *on_gpu) {
    const gpu_layer_meas *lm = m->layers != NULL ? &m->layers[sp->layer] : NULL;
    if (lm != NULL && lm->whole_ok && sp->t_hi > sp->t_lo) {
        bool all = true;
        for (size_t i = sp->t_lo; i < sp->t_hi && all; i++) {
            all = on_gpu[i];
        }
        if (all) {
            /* the hidden state in and out: paid once per run of whole layers at
             * run time, counted per layer here (an upper bound) */
            return lm->whole_gpu_s + gpu_xfer_s(m->link.latency_s, m->link.h2d_Bps, lm->x_bytes) +
                   gpu_xfer_s(m->link.latency_s, m->link.d2h_Bps, lm->x_bytes);
        }
    }
    double t = lm != NULL ? lm->rest_cpu_s : 0;
    bool prev_fused = false; /* the op before this group ran on the device */
    for (size_t g = sp->g_lo; g < sp->g_hi; g++) {
        const gpu_group_meas *gm = &m->groups[g];
        bool any, all;
        group_state(m, sp, on_gpu, g, &any, &all);
        bool fused = false;
        if (gm->fuse_next && g + 1 < sp->g_hi && all) {
            bool nany, nall;
            group_state(m, sp, on_gpu, g + 1, &nany, &nall);
            fused = nall;
        }
        if (any && !prev_fused) {
            t += gpu_xfer_s(m->link.latency_s, m->link.h2d_Bps, gm->in_bytes);
        }
        if (gm->fuse_next) {
            t += fused ? gm->mid_gpu_s : gm->mid_cpu_s;
        }
        for (size_t i = sp->t_lo; i < sp->t_hi; i++) {
            const gpu_tensor_meas *tm = &m->t[i];
            if ((size_t)tm->group != g) {
                continue;
            }
            if (!on_gpu[i]) {
                t += tm->cpu_s;
                continue;
            }
            t += tm->gpu_s;
            if (!fused) {
                t += gpu_xfer_s(m->link.latency_s, m->link.d2h_Bps, tm->out_bytes);
            }
        }
        prev_fused = fused;
    }
    return t;
}

lares_status gpu_predict(const gpu_meas *m, const bool *on_gpu, double *t_s, lares_error *err) {
    lares_status st = gpu_meas_validate(m, err);
    if (st != LARES_OK) {
        return st;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (on_gpu[i] && !m->t[i].gpu_ok) {
            return lares_fail(err, LARES_EINVAL,
                              "gpu placement: tensor '%s' placed on a device with no kernel "
                              "for its type",
                              m->t[i].name);
        }
    }
    gpu_layer_span *sp;
    st = gpu_layer_spans(m, &sp, err);
    if (st != LARES_OK) {
        return st;
    }
    double t = 0;
    for (int32_t l = 0; l <= m->n_layer; l++) {
        t += gpu_layer_cost(m, &sp[l], on_gpu);
    }
    lares_free(sp);
    *t_s = t;
    return LARES_OK;
}
