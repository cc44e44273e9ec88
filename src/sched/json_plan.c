/*
 * A plan as JSON: what `lares plan --json` prints and what a ring head can log
 * beside its measured per-device times. Times are in milliseconds, sizes in
 * bytes; windows are [l0, l1) pairs, one per round.
 */
#include "sched/sched_impl.h"

#include <jansson.h>

static json_t *assign_json(const sched_plan *p, const sched_assign *a, size_t pos,
                           const sched_device *devs, bool detail) {
    json_t *o = json_object();
    if (o == NULL) {
        return NULL;
    }
    json_object_set_new(o, "name", json_string(devs[a->device].name));
    json_object_set_new(o, "ring_pos", json_integer((json_int_t)pos));
    json_object_set_new(o, "w", json_integer(a->w));
    json_object_set_new(o, "n_gpu", json_integer(a->n_gpu));
    json_object_set_new(o, "layers", json_integer((json_int_t)a->w * p->k));
    json_object_set_new(o, "case", json_string(sched_case_name(a->mem_case)));
    json_object_set_new(o, "t_total_ms", json_real(a->t_total_s * 1e3));
    if (!detail) {
        return o;
    }
    json_t *win = json_array();
    for (int32_t r = 0; win != NULL && r < p->k; r++) {
        json_t *pair = json_array();
        int32_t l0 = r * p->W + a->offset;
        json_array_append_new(pair, json_integer(l0));
        json_array_append_new(pair, json_integer(l0 + a->w));
        json_array_append_new(win, pair);
    }
    json_object_set_new(o, "windows", win);
    json_object_set_new(o, "t_cpu_ms", json_real(a->t_cpu_s * 1e3));
    json_object_set_new(o, "t_gpu_ms", json_real(a->t_gpu_s * 1e3));
    json_object_set_new(o, "t_disk_ms", json_real(a->t_disk_s * 1e3));
    json_object_set_new(o, "t_read_ms", json_real(a->t_read_s * 1e3));
    json_object_set_new(o, "t_layer_ms", json_real(a->t_layer_s * 1e3));
    json_object_set_new(o, "t_net_ms", json_real(a->t_net_s * 1e3));
    json_object_set_new(o, "ram_bytes", json_integer((json_int_t)a->ram_bytes));
    json_object_set_new(o, "ram_limit_bytes", json_integer((json_int_t)a->ram_limit_bytes));
    json_object_set_new(o, "vram_bytes", json_integer((json_int_t)a->vram_bytes));
    json_object_set_new(o, "disk_read_bytes", json_integer((json_int_t)a->disk_read_bytes));
    return o;
}

static json_t *plan_json(const sched_plan *p, const sched_device *devs, bool detail) {
    json_t *o = json_object();
    json_t *arr = json_array();
    if (o == NULL || arr == NULL) {
        json_decref(o);
        json_decref(arr);
        return NULL;
    }
    json_object_set_new(o, "placement", json_string(sched_placement_name(p->placement)));
    json_object_set_new(o, "t_token_ms", json_real(p->t_token_s * 1e3));
    json_object_set_new(o, "t_head_ms", json_real(p->t_head_s * 1e3));
    json_object_set_new(o, "k", json_integer(p->k));
    json_object_set_new(o, "W", json_integer(p->W));
    json_object_set_new(o, "head", json_string(devs[p->head].name));
    for (size_t i = 0; i < p->n; i++) {
        json_array_append_new(arr, assign_json(p, &p->a[i], i, devs, detail));
    }
    json_object_set_new(o, "devices", arr);
    if (detail) {
        json_t *dropped = json_array();
        for (size_t d = 0; dropped != NULL && d < p->n_devices; d++) {
            if (p->dropped[d]) {
                json_array_append_new(dropped, json_string(devs[d].name));
            }
        }
        json_object_set_new(o, "dropped", dropped);
        json_object_set_new(o, "solve_ms", json_real(p->solve_s * 1e3));
        json_object_set_new(o, "ilp_solved", json_integer(p->ilp_solved));
    }
    return o;
}

lares_status sched_plan_to_json(const sched_plan *p, const sched_alternative *alts, size_t n_alts,
                                const sched_model *m, const sched_device *devs, const sched_opts *o,
                                char **out, lares_error *err) {
    json_t *root = plan_json(p, devs, true);
    json_t *model = json_object();
    json_t *base = json_object();
    if (root == NULL || model == NULL || base == NULL) {
        json_decref(root);
        json_decref(model);
        json_decref(base);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    json_object_set_new(model, "name", json_string(m->name));
    json_object_set_new(model, "n_layer", json_integer(m->n_layer));
    json_object_set_new(model, "weight_bytes",
                        json_integer((json_int_t)sched_model_weight_bytes(m)));
    json_object_set_new(
        model, "kv_bytes_per_layer",
        json_integer((json_int_t)sched_layer_kv_bytes(m, o->n_ctx, o->kv_elem_bytes)));
    json_object_set_new(model, "n_ctx", json_integer(o->n_ctx));
    json_object_set_new(root, "model", model);
    for (size_t i = 0; i < n_alts; i++) {
        json_t *b;
        if (alts[i].plan != NULL) {
            b = plan_json(alts[i].plan, devs, false);
        } else {
            b = json_object();
            if (b != NULL) {
                json_object_set_new(b, "error", json_string(alts[i].error));
            }
        }
        json_object_set_new(base, sched_placement_name(alts[i].placement), b);
    }
    json_object_set_new(root, "baselines", base);
    return sched_json_text(root, out, err);
}
