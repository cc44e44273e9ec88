/*
 * lares_profile (include/lares.h): this device's profile, its CPU rates
 * calibrated on real windows of the model when one is given (calibrate.c
 * runs them; sched fits the latency model to them).
 */
#include "api/api.h"
#include "sched/sched.h"

lares_profile_opts lares_profile_opts_default(void) {
    lares_profile_opts o;
    memset(&o, 0, sizeof o);
    o.budget_ms = 2000;
    return o;
}

lares_status lares_profile(const lares_profile_opts *o, char **json_out, lares_error *err) {
    lares_profile_opts def = lares_profile_opts_default();
    if (o == NULL) {
        o = &def;
    }
    sched_profile_opts po = sched_profile_opts_default();
    po.disk_path = o->model_path;
    po.cache_dir = o->cache_dir;
    po.name = o->name;
    po.refresh = o->refresh;
    po.n_threads = o->n_threads;
    po.budget_ms = o->budget_ms;
    if (o->model_path != NULL && !o->no_calibrate) {
        po.run_windows = api_run_windows;
    }
    sched_device d;
    sched_profile_info info;
    lares_status st = sched_profile_run(&po, &d, &info, err);
    if (st != LARES_OK) {
        return st;
    }
    return sched_profile_to_json(&d, &info, json_out, err);
}
