/*
 * Calibration on the executor: the CPU rates fitted to real layer windows.
 *
 * The windows ran back to back for many quota periods, so their wall time is
 * the long-run share of a quota'd device, not a burst: the latency model's
 * throttling (eval.c: wall(b) = b / u - P (1 - u) once a burst spends the
 * quota of a period u P) is inverted to get the full-speed work b that the
 * rates price. The fit is one factor for every CPU rate of the device: the
 * model's time of a layer is a sum of terms each inversely proportional to a
 * rate (weights by type, attention, the memory roofline), so dividing every
 * rate by f multiplies the time of any window by f, and the window measured
 * fixes f.
 */
#include "sched/sched_impl.h"

#include <math.h>

double sched_full_speed_s(const sched_device *d, double wall_s) {
    const int32_t th = d->threads > 0 ? d->threads : d->cores;
    const double u = d->cpu_quota > 0 && th > 0 ? d->cpu_quota / th : INFINITY;
    const double P = d->cpu_quota_period_s > 0 ? d->cpu_quota_period_s : 0.1;
    if (!(u < 1) || !(wall_s > u * P)) {
        return wall_s; /* no quota, or within the first period's burst */
    }
    return u * (wall_s + P * (1 - u));
}

static void divide_rates(sched_rates *r, double f) {
    for (uint32_t q = 0; q < GGUF_TYPE_COUNT; q++) {
        r->by_type[q] /= f;
    }
    r->other /= f;
}

static lares_status check_run(const sched_model *m, const sched_window_time *t, const char *what,
                              lares_error *err) {
    if (t->l0 < 0 || t->l1 <= t->l0 || t->l1 > m->n_layer || t->n_rows < 1 || t->n_past < 0 ||
        t->n_windows < 1 || !(t->wall_s > 0) || !isfinite(t->wall_s)) {
        return lares_fail(err, LARES_EINVAL,
                          "calibrate: the %s run does not fit %s (layers [%d, %d) of %d, %d rows, "
                          "%d windows in %g s)",
                          what, m->name, t->l0, t->l1, m->n_layer, t->n_rows, t->n_windows,
                          t->wall_s);
    }
    return LARES_OK;
}

lares_status sched_device_fit_windows(const sched_model *m, sched_device *d,
                                      const sched_window_time *decode,
                                      const sched_window_time *prompt, lares_error *err) {
    lares_status st = check_run(m, decode, "decode-shaped", err);
    if (st == LARES_OK && prompt != NULL && prompt->n_windows > 0) {
        st = check_run(m, prompt, "prompt-shaped", err);
    }
    if (st != LARES_OK) {
        return st;
    }
    /* the model's full-speed time of decode's layers on d, at its position */
    sched_opts o = sched_opts_default();
    o.n_ctx = decode->n_past + 1;
    o.n_past = decode->n_past;
    /* the disk and memory figures do not enter a layer's compute time, but the
     * costs want them set (the profile measures the disk after the CPU) */
    sched_device dc = *d;
    if (!(dc.disk_seq_Bps > 0)) {
        dc.disk_seq_Bps = 1e9;
    }
    if (dc.ram_avail_bytes == 0) {
        dc.ram_avail_bytes = UINT64_MAX / 4;
    }
    sched_costs *c;
    if ((st = sched_costs_create(m, &dc, 1, &o, &c, err)) != LARES_OK) {
        lares_error_prefix(err, "calibrate: ");
        return st;
    }
    double predicted = 0;
    for (int32_t l = decode->l0; l < decode->l1; l++) {
        predicted += c->t_cpu[l];
    }
    sched_costs_free(c);
    const double measured = sched_full_speed_s(d, decode->wall_s) / decode->n_windows;
    if (!(predicted > 0)) {
        return lares_fail(err, LARES_EINVAL, "calibrate: device '%s' prices layers [%d, %d) at 0 s",
                          d->name, decode->l0, decode->l1);
    }
    const double f = measured / predicted;
    divide_rates(&d->cpu_flops, f);
    divide_rates(&d->cpu_flops_mem, f);
    d->mem_bw_Bps /= f;
    struct sched_calibration *cal = &d->cal;
    memset(cal, 0, sizeof *cal);
    snprintf(cal->model, sizeof cal->model, "%s", m->name[0] ? m->name : "model");
    cal->model_bytes = m->file_bytes;
    cal->scale = f;
    cal->decode_layer_s = measured / (decode->l1 - decode->l0);
    cal->streamed = decode->streamed;
    if (prompt != NULL && prompt->n_windows > 0) {
        cal->prompt_rows = prompt->n_rows;
        cal->prompt_row_layer_s = sched_full_speed_s(d, prompt->wall_s) / prompt->n_windows /
                                  (prompt->l1 - prompt->l0) / prompt->n_rows;
        cal->streamed = cal->streamed || prompt->streamed;
    }
    return LARES_OK;
}
