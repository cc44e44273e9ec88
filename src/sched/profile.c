/*
 * `lares profile`: this device's figures for the planner, measured in a
 * bounded time and cached per device.
 *
 * The cache file is <cache_dir>/profile-<fingerprint>.json, the device JSON of
 * the last measurement. The fingerprint covers what the slow figures depend
 * on (CPU model, cores, threads, RAM, kernels, OS, CPU quota, lares version),
 * so an emulated device with another CPU quota gets its own file. Free memory
 * and the GPU are read fresh every time; the disk figures are reused only when
 * they were measured on the same path. Files are replaced atomically (write to
 * a temporary name, then rename), so concurrent profiles never see half a file.
 */
#include "quant/quant.h"
#include "sched/sched_impl.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

sched_profile_opts sched_profile_opts_default(void) {
    sched_profile_opts o;
    memset(&o, 0, sizeof o);
    o.budget_ms = 2000;
    o.max_age_s = 7u * 24 * 3600;
    return o;
}

static void cache_path(const sched_profile_opts *o, uint64_t fp, char *out, size_t cap) {
    snprintf(out, cap, "%s/profile-%016" PRIx64 ".json", o->cache_dir, fp);
}

/* The slow figures from the cache, when it holds this fingerprint and is
 * younger than max_age_s (0: any age). */
static bool load_cached(const char *path, uint32_t max_age_s, sched_device *cached) {
    struct stat sb;
    const time_t now = time(NULL);
    if (max_age_s > 0 && stat(path, &sb) == 0 && now > sb.st_mtime &&
        (uint64_t)(now - sb.st_mtime) > max_age_s) {
        lares_log(LARES_LOG_INFO, "sched: %s is %.1f days old (limit %.1f): measuring again", path,
                  (double)(now - sb.st_mtime) / 86400.0, max_age_s / 86400.0);
        return false;
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return false;
    }
    char *buf = lares_alloc(1 << 20);
    bool failed = false;
    size_t n = buf ? lares_fread(buf, (1 << 20) - 1, f, &failed) : 0;
    fclose(f);
    if (buf == NULL) {
        return false;
    }
    if (failed) {
        lares_log(LARES_LOG_WARN, "sched: ignoring the profile cache %s: read failed", path);
        lares_free(buf);
        return false;
    }
    sched_device *devs = NULL;
    size_t nd = 0;
    lares_error err = {0};
    bool ok = sched_devices_parse(buf, n, path, &devs, &nd, NULL, NULL, NULL, &err) == LARES_OK &&
              nd == 1;
    if (ok) {
        *cached = devs[0];
    } else {
        lares_log(LARES_LOG_WARN, "sched: ignoring the profile cache: %s", err.msg);
    }
    lares_free(devs);
    lares_free(buf);
    return ok;
}

static lares_status mkdirs(const char *dir, lares_error *err) {
    char p[1024];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            (void)mkdir(p, 0755);
            *s = '/';
        }
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        return lares_fail(err, LARES_EIO, "%s: %s", dir, strerror(errno));
    }
    return LARES_OK;
}

static lares_status save_cache(const char *path, const sched_device *d, lares_error *err) {
    char *text;
    lares_status st = sched_device_to_json(d, &text, err);
    if (st != LARES_OK) {
        return st;
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f != NULL && fputs(text, f) >= 0;
    ok = f != NULL && fclose(f) == 0 && ok;
    lares_free(text);
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return lares_fail(err, LARES_EIO, "%s: cannot write the profile cache: %s", path,
                          strerror(e));
    }
    return LARES_OK;
}

lares_status sched_profile_run(const sched_profile_opts *o, sched_device *out,
                               sched_profile_info *info, lares_error *err) {
    const uint64_t t0 = lares_now_ns();
    const char *root = o->sys_root ? o->sys_root : "";
    const uint32_t budget = o->budget_ms ? o->budget_ms : 2000;
    memset(info, 0, sizeof *info);
    sched_device d;
    char host[64] = "";
    if (o->name == NULL && gethostname(host, sizeof host - 1) != 0) {
        snprintf(host, sizeof host, "this-device");
    }
    sched_device_init(&d, o->name ? o->name : host);
    d.os = sched_detect_os(root);
    d.cores = lares_cpu_count();
    d.threads = o->n_threads > 0 ? o->n_threads : d.cores;
    d.cpu_quota = sched_probe_cpu_quota(root, &d.cpu_quota_period_s);
    sched_probe_cpu_model(root, d.cpu_model, sizeof d.cpu_model);
    snprintf(d.isa, sizeof d.isa, "%s", quant_isa_name());
    snprintf(d.cpu_flags, sizeof d.cpu_flags, "%s", quant_cpu_flags());
    lares_status st = sched_probe_memory(root, &d, &info->cgroup_limit_bytes, err);
    if (st != LARES_OK) {
        return st;
    }
    /* a profile calibrated on a model is that model's: its name and size
     * join the fingerprint (sched_model reads only the header and index) */
    sched_model *cm = NULL;
    const bool calibrate = o->run_windows != NULL && o->disk_path != NULL;
    if (calibrate && (st = sched_model_from_path(o->disk_path, &cm, err)) != LARES_OK) {
        lares_error_prefix(err, "calibrate: ");
        return st;
    }
    if (cm != NULL) {
        snprintf(d.cal.model, sizeof d.cal.model, "%s", cm->name[0] ? cm->name : "model");
        d.cal.model_bytes = cm->file_bytes;
    }
    info->fingerprint = sched_fingerprint(&d);
    char cpath[1100] = "";
    sched_device cached;
    bool have_cache = false;
    if (o->cache_dir != NULL && o->cache_dir[0] != '\0') {
        cache_path(o, info->fingerprint, cpath, sizeof cpath);
        have_cache = !o->refresh && load_cached(cpath, o->max_age_s, &cached);
    }
    const char *disk_file = o->disk_path;
    char disk_dir[1024];
    snprintf(disk_dir, sizeof disk_dir, "%s",
             o->cache_dir && o->cache_dir[0] ? o->cache_dir : "/tmp");
    if (o->cache_dir != NULL && o->cache_dir[0] != '\0' &&
        (st = mkdirs(o->cache_dir, err)) != LARES_OK) {
        sched_model_free(cm);
        return st;
    }
    const char *disk_where = disk_file ? disk_file : disk_dir;
    if (have_cache) {
        d.cpu_flops = cached.cpu_flops;
        d.cpu_flops_mem = cached.cpu_flops_mem;
        d.mem_bw_Bps = cached.mem_bw_Bps;
        d.cal = cached.cal;
        info->cached = true;
    } else {
        /* the streamed buffer: far beyond any last-level cache, within a quarter
         * of free memory, smaller for short budgets */
        size_t big = budget >= 1500 ? 256u << 20 : budget >= 600 ? 128u << 20 : 48u << 20;
        while (big > (16u << 20) && big > d.ram_avail_bytes / 4) {
            big /= 2;
        }
        /* with a model: half of the CPU's share for the micro-benchmarks
         * (their ratios between types), half for the real windows */
        const uint32_t cpu_ms = budget * 3 / 4;
        if ((st = sched_profile_cpu(&d, d.threads, cm ? cpu_ms / 2 : cpu_ms, big, err)) !=
            LARES_OK) {
            sched_model_free(cm);
            return st;
        }
    }
    if (have_cache && strcmp(cached.disk_path, disk_where) == 0) {
        d.disk_seq_Bps = cached.disk_seq_Bps;
        d.disk_rand_Bps = cached.disk_rand_Bps;
        d.disk_stream_Bps = cached.disk_stream_Bps;
        d.disk_stream_cpu_Bps = cached.disk_stream_cpu_Bps;
        d.disk_direct_Bps = cached.disk_direct_Bps;
        d.disk_cached_share = cached.disk_cached_share;
        d.disk_free_bytes = cached.disk_free_bytes;
        snprintf(d.disk_path, sizeof d.disk_path, "%s", cached.disk_path);
    } else {
        if ((st = sched_profile_disk(disk_file, disk_dir, LARES_MAX(budget / 4, 50u), &d, info,
                                     err))) {
            sched_model_free(cm);
            return st;
        }
        info->cached = false;
    }
    /* the real windows after the disk: they read part of the model into the
     * page cache, where the disk test on the model file would find it */
    if (cm != NULL && !have_cache) {
        sched_window_time dec, pro;
        memset(&dec, 0, sizeof dec);
        memset(&pro, 0, sizeof pro);
        st = o->run_windows(o->windows_user, o->disk_path, d.threads,
                            LARES_MAX(budget * 3 / 8, 100u), &dec, &pro, err);
        if (st == LARES_ERANGE) {
            /* a budget that cannot run one layer: the planner will not give
             * this device any; its profile stays the micro-benchmarks' */
            lares_log(LARES_LOG_WARN, "sched: not calibrated on %s: %s", o->disk_path, err->msg);
            memset(&d.cal, 0, sizeof d.cal);
            snprintf(d.cal.model, sizeof d.cal.model, "%s", cm->name[0] ? cm->name : "model");
            d.cal.model_bytes = cm->file_bytes;
            st = LARES_OK;
        } else if (st != LARES_OK) {
            lares_error_prefix(err, "calibrate: ");
        } else {
            st = sched_device_fit_windows(cm, &d, &dec, &pro, err);
        }
    }
    sched_model_free(cm);
    if (st != LARES_OK) {
        return st;
    }
    if (o->gpu_probe != NULL && !o->gpu_probe(&d, o->gpu_user)) {
        d.gpu = SCHED_GPU_NONE;
    }
    if (cpath[0] && !info->cached) {
        if ((st = save_cache(cpath, &d, err)) != LARES_OK) {
            return st;
        }
    }
    info->measure_s = (double)(lares_now_ns() - t0) / 1e9;
    *out = d;
    return LARES_OK;
}

lares_status sched_profile_to_json(const sched_device *d, const sched_profile_info *info,
                                   char **out, lares_error *err) {
    json_t *o = sched_device_json(d);
    if (o == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    char fp[24];
    snprintf(fp, sizeof fp, "%016" PRIx64, info->fingerprint);
    json_object_set_new(o, "fingerprint", json_string(fp));
    json_object_set_new(o, "lares_version", json_string(lares_version()));
    json_object_set_new(o, "measure_s", json_real(info->measure_s));
    json_object_set_new(o, "cached", json_boolean(info->cached));
    json_t *disk = json_object_get(o, "disk");
    if (disk != NULL && !info->cached) {
        json_object_set_new(disk, "direct", json_boolean(info->disk_direct));
        json_object_set_new(disk, "test_bytes", json_integer((json_int_t)info->disk_test_bytes));
        if (info->disk_note[0]) {
            json_object_set_new(disk, "note", json_string(info->disk_note));
        }
    }
    json_t *mem = json_object_get(o, "memory");
    if (mem != NULL && info->cgroup_limit_bytes > 0) {
        json_object_set_new(mem, "cgroup_limit",
                            json_integer((json_int_t)info->cgroup_limit_bytes));
    }
    return sched_json_text(o, out, err);
}
