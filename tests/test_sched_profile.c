/*
 * sched: the profiler. The operating-system probes read a fake /proc and /sys
 * built here (cgroup v1, cgroup v2 with a tighter parent, no cgroup, an
 * Android system partition), with every expected figure computed from the
 * files' numbers. Then one short real measurement of this machine: its
 * figures must be present and consistent (no timing thresholds), the cache
 * must answer the second call and --refresh must measure again.
 */
#include "check.h"
#include "sched/sched.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[400];

#define SAME(a, b) (fabs((a) - (b)) <= 1e-9 * fabs(b)) /* through 10 digits of JSON */

static void put(const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s%s", root, rel);
    /* mkdir -p of the parent */
    for (char *s = path + strlen(root) + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(path, 0755);
            *s = '/';
        }
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static void fresh_root(const char *name) {
    char cmd[1000];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(root, sizeof root, "%s/lares-sched-%s-%d", tmp, name, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", root, root);
    if (system(cmd) != 0) {
        exit(1);
    }
}

static void drop_root(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot remove %s\n", root);
    }
}

static const char *meminfo = "MemTotal:       16384000 kB\n"
                             "MemFree:         1000000 kB\n"
                             "MemAvailable:    8000000 kB\n"
                             "Cached:          6000000 kB\n"
                             "SwapTotal:       4000000 kB\n"
                             "SwapFree:        3000000 kB\n";

static void test_no_cgroup(void) {
    lares_error err = {0};
    fresh_root("plain");
    put("/proc/meminfo", meminfo);
    put("/proc/self/cgroup", "0::/\n");
    sched_device d;
    sched_device_init(&d, "t");
    uint64_t limit = 1;
    CHECK_OK(sched_probe_memory(root, &d, &limit, &err), &err);
    /* the executor's budget: 80 % of MemAvailable */
    CHECKF(d.ram_total_bytes == 16384000ull * 1024 &&
               d.ram_avail_bytes == (uint64_t)(8000000.0 * 1024 * 0.8),
           "available %" PRIu64, d.ram_avail_bytes);
    CHECK(d.swap_avail_bytes == 3000000ull * 1024 && limit == 0);
    CHECK(sched_detect_os(root) == SCHED_OS_LINUX);
    double period = -1;
    CHECK(sched_probe_cpu_quota(root, &period) == 0.0 && period == 0);
    /* an old kernel without MemAvailable: free + cached */
    put("/proc/meminfo", "MemTotal: 1000 kB\nMemFree: 100 kB\nCached: 200 kB\n");
    CHECK_OK(sched_probe_memory(root, &d, &limit, &err), &err);
    CHECK(d.ram_avail_bytes == (uint64_t)(300 * 1024 * 0.8));
    /* no meminfo at all */
    put("/proc/meminfo", "nothing useful\n");
    CHECK(sched_probe_memory(root, &d, &limit, &err) == LARES_EFORMAT);
    CHECKF(strstr(err.msg, "MemAvailable") != NULL, "%s", err.msg);
    drop_root();
}

/* the testbed's way: cgroup v1, the process in /sys/fs/cgroup/memory/dev1 */
static void test_cgroup_v1(void) {
    lares_error err = {0};
    fresh_root("v1");
    put("/proc/meminfo", meminfo);
    put("/proc/self/cgroup", "12:cpu,cpuacct:/dev1\n11:memory:/dev1\n1:name=systemd:/\n");
    put("/proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:9 - cgroup cgroup rw,memory\n"
        "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:10 - cgroup cgroup "
        "rw,cpu,cpuacct\n");
    put("/sys/fs/cgroup/memory/dev1/memory.limit_in_bytes", "3000000000\n");
    put("/sys/fs/cgroup/memory/dev1/memory.usage_in_bytes", "1200000000\n");
    put("/sys/fs/cgroup/memory/dev1/memory.stat",
        "cache 900000000\nrss 300000000\nhierarchical_memory_limit 3000000000\n"
        "total_inactive_file 500000000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/dev1/cpu.cfs_quota_us", "30000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/dev1/cpu.cfs_period_us", "100000\n");
    sched_device d;
    sched_device_init(&d, "t");
    uint64_t limit = 0;
    CHECK_OK(sched_probe_memory(root, &d, &limit, &err), &err);
    /* the executor's budget: the limit (below 80 % of MemAvailable) */
    CHECKF(d.ram_avail_bytes == 3000000000ull, "v1 available %" PRIu64, d.ram_avail_bytes);
    CHECK(limit == 3000000000ull);
    double period = 0;
    CHECKF(sched_probe_cpu_quota(root, &period) == 0.3 && period == 0.1, "quota %g per %g s",
           sched_probe_cpu_quota(root, &period), period);
    /* a looser own limit under a tighter parent's */
    put("/sys/fs/cgroup/memory/dev1/memory.limit_in_bytes", "9223372036854771712\n");
    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "2000000000\n");
    CHECK_OK(sched_probe_memory(root, &d, &limit, &err), &err);
    CHECKF(d.ram_avail_bytes == 2000000000ull && limit == 2000000000ull,
           "available %" PRIu64 " limit %" PRIu64, d.ram_avail_bytes, limit);
    /* unlimited everywhere: 80 % of MemAvailable stands */
    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    CHECK_OK(sched_probe_memory(root, &d, &limit, &err), &err);
    CHECK(d.ram_avail_bytes == (uint64_t)(8000000.0 * 1024 * 0.8) && limit == 0);
    /* no CPU quota */
    put("/sys/fs/cgroup/cpu,cpuacct/dev1/cpu.cfs_quota_us", "-1\n");
    CHECK(sched_probe_cpu_quota(root, &period) == 0.0 && period == 0);
    drop_root();
}

/* cgroup v2, the limit on the parent; swap limited too */
static void test_cgroup_v2(void) {
    lares_error err = {0};
    fresh_root("v2");
    put("/proc/meminfo", meminfo);
    put("/proc/self/cgroup", "0::/user.slice/app.scope\n");
    put("/proc/self/mountinfo",
        "29 24 0:25 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
    put("/sys/fs/cgroup/user.slice/app.scope/memory.max", "max\n");
    put("/sys/fs/cgroup/user.slice/app.scope/memory.current", "100000000\n");
    put("/sys/fs/cgroup/user.slice/app.scope/memory.stat", "anon 50000000\ninactive_file 1000\n");
    put("/sys/fs/cgroup/user.slice/memory.max", "1500000000\n");
    put("/sys/fs/cgroup/user.slice/memory.current", "1000000000\n");
    put("/sys/fs/cgroup/user.slice/memory.stat", "anon 900000000\ninactive_file 100000000\n");
    put("/sys/fs/cgroup/user.slice/memory.swap.max", "200000000\n");
    put("/sys/fs/cgroup/user.slice/memory.swap.current", "50000000\n");
    put("/sys/fs/cgroup/user.slice/app.scope/cpu.max", "150000 100000\n");
    sched_device d;
    sched_device_init(&d, "t");
    uint64_t limit = 0;
    CHECK_OK(sched_probe_memory(root, &d, &limit, &err), &err);
    /* the parent's limit */
    CHECKF(d.ram_avail_bytes == 1500000000ull, "v2 available %" PRIu64, d.ram_avail_bytes);
    CHECK(limit == 1500000000ull && d.swap_avail_bytes == 150000000ull);
    double period = 0;
    CHECK(sched_probe_cpu_quota(root, &period) == 1.5 && period == 0.1);
    /* memory.high below memory.max: the executor keeps under it */
    put("/sys/fs/cgroup/user.slice/app.scope/memory.high", "1200000000\n");
    CHECK_OK(sched_probe_memory(root, &d, &limit, &err), &err);
    CHECK(d.ram_avail_bytes == 1200000000ull && limit == 1200000000ull);
    drop_root();
}

static void test_android(void) {
    fresh_root("android");
    CHECK(sched_detect_os(root) == SCHED_OS_LINUX);
    put("/system/build.prop", "ro.build.version.sdk=33\n");
    CHECK(sched_detect_os(root) == SCHED_OS_ANDROID);
    drop_root();
    fresh_root("android-no-props");
    put("/system/bin/app_process64", "");
    CHECK(sched_detect_os(root) == SCHED_OS_ANDROID);
    drop_root();
}

/* one short measurement of this machine, through the cache */
static void test_real_profile(void) {
    lares_error err = {0};
    fresh_root("cache");
    sched_profile_opts o = sched_profile_opts_default();
    o.budget_ms = 300;
    o.cache_dir = root;
    o.name = "me";
    o.disk_path = fixture("stories260K.gguf");
    sched_device d;
    sched_profile_info info;
    CHECK_OK(sched_profile_run(&o, &d, &info, &err), &err);
    printf("profile of this machine in %.2f s (budget 300 ms)\n", info.measure_s);
    CHECK(strcmp(d.name, "me") == 0 && d.cores >= 1 && d.threads >= 1);
    CHECK(!info.cached && info.fingerprint == sched_fingerprint(&d));
    CHECK(d.ram_avail_bytes > 0 && d.ram_avail_bytes <= d.ram_total_bytes);
    CHECK(d.mem_bw_Bps > 0 && d.disk_seq_Bps > 0 && d.disk_rand_Bps > 0);
    CHECK(d.disk_free_bytes == -1 && strcmp(d.disk_path, o.disk_path) == 0);
    /* every type lares multiplies with has a rate, and the streamed ones a second */
    const int types[] = {GGUF_TYPE_F32,  GGUF_TYPE_F16,  GGUF_TYPE_Q8_0,
                         GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        CHECKF(d.cpu_flops.by_type[types[i]] > 0 && d.cpu_flops_mem.by_type[types[i]] > 0,
               "type %d: %g / %g", types[i], d.cpu_flops.by_type[types[i]],
               d.cpu_flops_mem.by_type[types[i]]);
    }
    /* the second call comes from the cache; memory is read again */
    sched_device d2;
    CHECK_OK(sched_profile_run(&o, &d2, &info, &err), &err);
    CHECK(info.cached && SAME(d2.mem_bw_Bps, d.mem_bw_Bps) &&
          SAME(d2.disk_seq_Bps, d.disk_seq_Bps));
    CHECK(SAME(d2.cpu_flops.by_type[GGUF_TYPE_Q4_K], d.cpu_flops.by_type[GGUF_TYPE_Q4_K]));
    /* another disk location measures the disk again, the CPU stays cached */
    o.disk_path = NULL;
    CHECK_OK(sched_profile_run(&o, &d2, &info, &err), &err);
    CHECK(!info.cached &&
          SAME(d2.cpu_flops.by_type[GGUF_TYPE_Q8_0], d.cpu_flops.by_type[GGUF_TYPE_Q8_0]));
    CHECK(d2.disk_free_bytes > 0 && strcmp(d2.disk_path, root) == 0);
    /* the temporary file is big enough to stream (pieces of half of it) */
    CHECKF(d2.disk_stream_Bps > 0, "stream %g", d2.disk_stream_Bps);
    /* and the reading thread's CPU per byte comes with it: reading a page costs
     * some CPU, and not more than the whole time spent reading */
    CHECKF(d2.disk_stream_cpu_Bps >= d2.disk_stream_Bps * 0.5 && isfinite(d2.disk_stream_cpu_Bps),
           "stream %g B/s, %g B per CPU-second", d2.disk_stream_Bps, d2.disk_stream_cpu_Bps);
    /* refresh measures everything */
    o.refresh = true;
    CHECK_OK(sched_profile_run(&o, &d2, &info, &err), &err);
    CHECK(!info.cached);
    /* the JSON of a profile reads back as a device */
    char *text = NULL;
    CHECK_OK(sched_profile_to_json(&d2, &info, &text, &err), &err);
    sched_device *back = NULL;
    size_t n = 0;
    if (text != NULL) {
        CHECK_OK(
            sched_devices_parse(text, strlen(text), "profile", &back, &n, NULL, NULL, NULL, &err),
            &err);
        CHECK(n == 1 && back != NULL && back->ram_avail_bytes == d2.ram_avail_bytes);
    }
    lares_free(back);
    lares_free(text);
    /* a broken cache file is ignored, not trusted */
    char path[1100];
    snprintf(path, sizeof path, "/profile-%016" PRIx64 ".json", info.fingerprint);
    put(path, "{\"name\": \"me\", \"os\": \"linux\"}");
    o.refresh = false;
    CHECK_OK(sched_profile_run(&o, &d2, &info, &err), &err);
    CHECK(!info.cached && d2.mem_bw_Bps > 0);
    /* a disk test on a file that is not there */
    o.disk_path = "/nonexistent/model.gguf";
    o.refresh = true;
    CHECK(sched_profile_run(&o, &d2, &info, &err) == LARES_EIO);
    CHECKF(strstr(err.msg, "/nonexistent/model.gguf") != NULL, "%s", err.msg);
    drop_root();
}

int main(void) {
    test_no_cgroup();
    test_cgroup_v1();
    test_cgroup_v2();
    test_android();
    test_real_profile();
    return check_finish("sched_profile");
}
