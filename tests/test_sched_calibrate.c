/*
 * sched: calibration on the executor (calibrate.c) and its place in the
 * profile. The runs are made up here from the latency model's own terms, so
 * every expectation is computed, not remembered: the quota inversion against
 * the model's throttling, the fitted device reproducing the window it was
 * fitted to, a quota'd device coming out slower by its quota, bad runs
 * refused, the calibration and the CPU flags through JSON and the profile
 * cache, and the fingerprint changing with the flags and the model.
 */
#include "check.h"
#include "quant/quant.h"
#include "sched/sched_impl.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define NEAR(a, b, rel) (fabs((a) - (b)) <= (rel) * fabs(b))

static sched_device device(const char *name, double quota) {
    sched_device d;
    sched_device_init(&d, name);
    d.cores = 2;
    d.threads = 1;
    d.cpu_quota = quota;
    d.cpu_quota_period_s = quota > 0 ? 0.1 : 0;
    d.cpu_flops.other = 50e9;
    d.cpu_flops_mem.other = 20e9;
    d.mem_bw_Bps = 10e9;
    d.ram_avail_bytes = (uint64_t)64 << 30;
    d.ram_total_bytes = (uint64_t)64 << 30;
    d.disk_seq_Bps = 1e9;
    return d;
}

/* the latency model's full-speed time of layers [l0, l1) on d */
static double model_time(const sched_model *m, const sched_device *d, int32_t l0, int32_t l1,
                         int32_t n_past) {
    sched_opts o = sched_opts_default();
    o.n_ctx = n_past + 1;
    o.n_past = n_past;
    sched_costs *c = NULL;
    lares_error err = {0};
    CHECK_OK(sched_costs_create(m, d, 1, &o, &c, &err), &err);
    double t = 0;
    for (int32_t l = l0; c != NULL && l < l1; l++) {
        t += c->t_cpu[l];
    }
    sched_costs_free(c);
    return t;
}

static void test_full_speed(void) {
    /* the inverse of the model's throttling, burst by burst */
    sched_device d = device("q", 0.5);
    sched_costs c = {0};
    double u = 0.5, P = 0.1;
    c.quota_u = &u;
    c.quota_P = &P;
    const double bursts[] = {0.01, 0.05, 0.3, 2.0, 7.5};
    for (size_t i = 0; i < sizeof bursts / sizeof bursts[0]; i++) {
        const double wall = sched_quota_wall(&c, 0, bursts[i]);
        CHECKF(NEAR(sched_full_speed_s(&d, wall), bursts[i], 1e-12), "b %g: wall %g -> %g",
               bursts[i], wall, sched_full_speed_s(&d, wall));
    }
    /* two threads share a quota of 0.8 cores: each runs 0.4 of the time */
    d.threads = 2;
    d.cpu_quota = 0.8;
    u = 0.4;
    const double wall = sched_quota_wall(&c, 0, 1.0);
    CHECK(NEAR(sched_full_speed_s(&d, wall), 1.0, 1e-12));
    /* no quota, or a quota above the threads: wall time is full speed */
    sched_device free_d = device("f", 0);
    CHECK(sched_full_speed_s(&free_d, 0.7) == 0.7);
    free_d.cpu_quota = 4;
    CHECK(sched_full_speed_s(&free_d, 0.7) == 0.7);
}

static void test_fit(void) {
    lares_error err = {0};
    sched_model *m = NULL;
    CHECK_OK(sched_model_from_shape("llama2-7b:q4_k_m", &m, &err), &err);
    if (m == NULL) {
        return;
    }
    /* the device is really 2.5x slower than its micro-benchmarks say */
    sched_device d = device("slow", 0);
    const double truth = 2.5 * model_time(m, &d, 10, 12, 16);
    sched_window_time dec = {.l0 = 10, .l1 = 12, .n_rows = 1, .n_past = 16, .n_windows = 40};
    dec.wall_s = truth * dec.n_windows;
    sched_window_time pro = {.l0 = 10, .l1 = 12, .n_rows = 16, .n_past = 0, .n_windows = 10};
    pro.wall_s = 0.4 * truth * 16 * pro.n_windows; /* a batch row costs 0.4 of a token */
    sched_device fitted = d;
    CHECK_OK(sched_device_fit_windows(m, &fitted, &dec, &pro, &err), &err);
    CHECKF(NEAR(fitted.cal.scale, 2.5, 1e-9), "scale %g", fitted.cal.scale);
    CHECKF(NEAR(model_time(m, &fitted, 10, 12, 16), truth, 1e-9), "%g vs %g",
           model_time(m, &fitted, 10, 12, 16), truth);
    /* every layer is slower by the same factor, not only the two measured */
    CHECK(NEAR(model_time(m, &fitted, 0, m->n_layer, 16),
               2.5 * model_time(m, &d, 0, m->n_layer, 16), 1e-9));
    CHECK(NEAR(fitted.cal.decode_layer_s, truth / 2, 1e-9));
    CHECK(NEAR(fitted.cal.prompt_row_layer_s, 0.4 * truth / 2, 1e-9));
    CHECK(fitted.cal.prompt_rows == 16 && strcmp(fitted.cal.model, m->name) == 0 &&
          fitted.cal.model_bytes == m->file_bytes);

    /* the same CPU under a 0.5-core quota: its windows took twice the wall
     * time (the long-run share); its full speed is the same, and a plan on
     * it is about twice as slow */
    sched_device q = device("quota", 0.5);
    sched_window_time qdec = dec;
    sched_costs c = {0};
    double u = 0.5, P = 0.1;
    c.quota_u = &u;
    c.quota_P = &P;
    qdec.wall_s = sched_quota_wall(&c, 0, dec.wall_s);
    CHECK(qdec.wall_s > 1.9 * dec.wall_s);
    CHECK_OK(sched_device_fit_windows(m, &q, &qdec, NULL, &err), &err);
    CHECKF(NEAR(q.cal.scale, 2.5, 1e-9), "scale %g", q.cal.scale);
    CHECK(q.cal.prompt_rows == 0);
    sched_opts o = sched_opts_default();
    o.placement = SCHED_SINGLE;
    sched_plan *pf = NULL, *pq = NULL;
    CHECK_OK(sched_plan_make(m, &fitted, 1, &o, &pf, &err), &err);
    CHECK_OK(sched_plan_make(m, &q, 1, &o, &pq, &err), &err);
    if (pf != NULL && pq != NULL) {
        const double r = pq->t_token_s / pf->t_token_s;
        CHECKF(r > 1.8 && r < 2.05, "quota'd / free token time %g (%g / %g s)", r,
               pq->t_token_s, pf->t_token_s);
    }
    sched_plan_free(pf);
    sched_plan_free(pq);

    /* runs that do not fit the model are refused, naming it */
    sched_window_time bad = dec;
    bad.l1 = m->n_layer + 1;
    sched_device keep = d;
    CHECK(sched_device_fit_windows(m, &keep, &bad, NULL, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "decode-shaped") != NULL, "%s", err.msg);
    bad = dec;
    bad.n_windows = 0;
    CHECK(sched_device_fit_windows(m, &keep, &bad, NULL, &err) == LARES_EINVAL);
    bad = dec;
    bad.wall_s = 0;
    CHECK(sched_device_fit_windows(m, &keep, &bad, NULL, &err) == LARES_EINVAL);
    bad = pro;
    bad.n_rows = 0;
    CHECK(sched_device_fit_windows(m, &keep, &dec, &bad, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "prompt-shaped") != NULL, "%s", err.msg);
    /* and leave the device as it was */
    CHECK(keep.cpu_flops.other == d.cpu_flops.other && keep.cal.scale == 0);
    sched_model_free(m);
}

static void test_json(void) {
    lares_error err = {0};
    sched_device d = device("cal", 0.3);
    snprintf(d.cpu_flags, sizeof d.cpu_flags, "avx2 fma f16c");
    snprintf(d.cal.model, sizeof d.cal.model, "tiny");
    d.cal.model_bytes = 123456;
    d.cal.scale = 1.75;
    d.cal.decode_layer_s = 0.004;
    d.cal.prompt_row_layer_s = 0.001;
    d.cal.prompt_rows = 16;
    d.cal.streamed = true;
    char *text = NULL;
    CHECK_OK(sched_device_to_json(&d, &text, &err), &err);
    sched_device *back = NULL;
    size_t n = 0;
    if (text != NULL) {
        CHECK_OK(sched_devices_parse(text, strlen(text), "t", &back, &n, NULL, NULL, NULL, &err),
                 &err);
    }
    if (back != NULL && n == 1) {
        CHECK(strcmp(back->cpu_flags, d.cpu_flags) == 0);
        CHECK(strcmp(back->cal.model, "tiny") == 0 && back->cal.model_bytes == 123456);
        CHECK(NEAR(back->cal.scale, 1.75, 1e-9) && NEAR(back->cal.decode_layer_s, 0.004, 1e-9));
        CHECK(NEAR(back->cal.prompt_row_layer_s, 0.001, 1e-9) && back->cal.prompt_rows == 16);
        CHECK(back->cal.streamed);
    } else {
        CHECK(0);
    }
    lares_free(back);
    lares_free(text);
    /* bad calibrations are refused with their path */
    const char *bads[] = {
        ("[{\"name\":\"a\",\"os\":\"linux\",\"cpu\":{\"cores\":1,\"flops\":{\"*\":1e9},"
        "\"mem_bw\":1e9},\"memory\":{\"available\":1e9},\"disk\":{\"seq_read\":1e8},"
        "\"calibration\":{\"model\":\"m\",\"scale\":0}}]"),
        ("[{\"name\":\"a\",\"os\":\"linux\",\"cpu\":{\"cores\":1,\"flops\":{\"*\":1e9},"
        "\"mem_bw\":1e9},\"memory\":{\"available\":1e9},\"disk\":{\"seq_read\":1e8},"
        "\"calibration\":{\"model\":\"m\",\"scale\":1,\"bogus\":1}}]"),
        ("[{\"name\":\"a\",\"os\":\"linux\",\"cpu\":{\"cores\":1,\"flops\":{\"*\":1e9},"
        "\"mem_bw\":1e9},\"memory\":{\"available\":1e9},\"disk\":{\"seq_read\":1e8},"
        "\"calibration\":{\"scale\":1}}]"),
        ("[{\"name\":\"a\",\"os\":\"linux\",\"cpu\":{\"cores\":1,\"flops\":{\"*\":1e9},"
        "\"mem_bw\":1e9,\"flags\":7},\"memory\":{\"available\":1e9},\"disk\":{\"seq_read\":1e8}}]"),
    };
    const char *want[] = {"calibration.scale", "bogus", "calibration.model", "flags"};
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        back = NULL;
        CHECK(sched_devices_parse(bads[i], strlen(bads[i]), "t", &back, &n, NULL, NULL, NULL,
                                  &err) == LARES_EFORMAT);
        CHECKF(strstr(err.msg, want[i]) != NULL, "case %zu: %s", i, err.msg);
        lares_free(back);
    }
}

static void test_fingerprint(void) {
    sched_device d = device("fp", 0);
    snprintf(d.cpu_flags, sizeof d.cpu_flags, "avx2 fma f16c avx512f");
    const uint64_t f0 = sched_fingerprint(&d);
    sched_device e = d;
    snprintf(e.cpu_flags, sizeof e.cpu_flags, "avx2 fma f16c");
    CHECK(sched_fingerprint(&e) != f0);
    e = d;
    snprintf(e.isa, sizeof e.isa, "avx2");
    CHECK(sched_fingerprint(&e) != f0);
    e = d;
    snprintf(e.cal.model, sizeof e.cal.model, "llama");
    CHECK(sched_fingerprint(&e) != f0);
    sched_device g = e;
    g.cal.model_bytes = 99;
    CHECK(sched_fingerprint(&g) != sched_fingerprint(&e));
    /* measured figures are not part of it */
    e = d;
    e.cal.scale = 3;
    e.cpu_flops.other = 1;
    CHECK(sched_fingerprint(&e) == f0);
}

/* a runner of made-up windows: the micro-benchmarks' time x slow */
typedef struct fake_runner {
    double slow;
    int calls;
    lares_status fail;
} fake_runner;

static lares_status fake_windows(void *user, const char *path, int32_t n_threads,
                                 uint32_t budget_ms, sched_window_time *dec,
                                 sched_window_time *pro, lares_error *err) {
    fake_runner *r = user;
    r->calls++;
    CHECK(path != NULL && n_threads >= 1 && budget_ms > 0);
    if (r->fail != LARES_OK) {
        return lares_fail(err, r->fail, "no windows today");
    }
    *dec = (sched_window_time){.l0 = 0, .l1 = 1, .n_rows = 1, .n_past = 16, .n_windows = 10,
                               .wall_s = 0.5};
    *pro = (sched_window_time){.l0 = 0, .l1 = 1, .n_rows = 16, .n_past = 0, .n_windows = 10,
                               .wall_s = 0.5 * 4 * r->slow};
    return LARES_OK;
}

static void test_profile(void) {
    lares_error err = {0};
    char dir[400];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/lares-sched-cal-%d", tmp, (int)getpid());
    fake_runner r = {.slow = 1};
    sched_profile_opts o = sched_profile_opts_default();
    o.budget_ms = 200;
    o.cache_dir = dir;
    o.name = "me";
    o.disk_path = fixture("stories260K.gguf");
    o.run_windows = fake_windows;
    o.windows_user = &r;
    sched_device d;
    sched_profile_info info;
    CHECK_OK(sched_profile_run(&o, &d, &info, &err), &err);
    CHECK(r.calls == 1 && !info.cached);
    CHECKF(d.cal.scale > 0 && d.cal.model[0] != '\0' && d.cal.model_bytes > 0,
           "scale %g model '%s'", d.cal.scale, d.cal.model);
    CHECK(NEAR(d.cal.decode_layer_s, 0.05, 1e-9) && d.cal.prompt_rows == 16);
    CHECK(strcmp(d.cpu_flags, quant_cpu_flags()) == 0 && d.cpu_flags[0] != '\0');
    /* the cache answers with the calibration; no windows run */
    sched_device d2;
    CHECK_OK(sched_profile_run(&o, &d2, &info, &err), &err);
    CHECK(r.calls == 1 && info.cached && NEAR(d2.cal.scale, d.cal.scale, 1e-9));
    CHECK(NEAR(d2.cpu_flops.by_type[GGUF_TYPE_Q8_0], d.cpu_flops.by_type[GGUF_TYPE_Q8_0], 1e-9));
    /* without a model (or a runner) there is no calibration, and another key */
    const uint64_t calibrated_fp = info.fingerprint;
    o.run_windows = NULL;
    CHECK_OK(sched_profile_run(&o, &d2, &info, &err), &err);
    CHECK(!info.cached && d2.cal.scale == 0 && info.fingerprint != calibrated_fp);
    /* a runner that fails fails the profile, saying why */
    o.run_windows = fake_windows;
    o.refresh = true;
    r.fail = LARES_EIO;
    CHECK(sched_profile_run(&o, &d2, &info, &err) == LARES_EIO);
    CHECKF(strstr(err.msg, "calibrate") != NULL && strstr(err.msg, "no windows today") != NULL,
           "%s", err.msg);
    /* except for a memory budget that cannot run a layer: the profile stands
     * uncalibrated (the planner will not give that device layers) */
    r.fail = LARES_ERANGE;
    CHECK_OK(sched_profile_run(&o, &d2, &info, &err), &err);
    CHECK(d2.cal.scale == 0 && d2.cpu_flops.by_type[GGUF_TYPE_Q8_0] > 0);
    /* a model that is not there */
    r.fail = LARES_OK;
    o.disk_path = "/nonexistent/model.gguf";
    CHECK(sched_profile_run(&o, &d2, &info, &err) != LARES_OK);
    CHECKF(strstr(err.msg, "/nonexistent/model.gguf") != NULL, "%s", err.msg);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot remove %s\n", dir);
    }
}

int main(void) {
    test_full_speed();
    test_fit();
    test_json();
    test_fingerprint();
    test_profile();
    return check_finish("sched_calibrate");
}
