/*
 * sched: the profiler. The operating-system probes read a fake /proc and /sys
 * built here (cgroup v1, cgroup v2 with a tighter parent, no cgroup, an
 * Android system partition), with every expected figure computed from the
 * files' numbers. Then one short real measurement of this machine: its
 * figures must be present and consistent (no timing thresholds), the cache
 * must answer the second call and --refresh must measure again.
 */
#include "check.h"
#include "sched/sched_impl.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/vfs.h>
#endif

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

/* Writes `bytes` of pseudo-random data to path and syncs it (clean pages:
 * DONTNEED can drop them). */
static void write_file(const char *path, size_t bytes) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    uint8_t *buf = lares_alloc(1 << 20);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t done = 0; fd >= 0 && buf != NULL && done < bytes; done += 1 << 20) {
        for (size_t i = 0; i < (1 << 20); i += 8) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            memcpy(buf + i, &x, 8);
        }
        if (write(fd, buf, 1 << 20) != 1 << 20) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(1);
        }
    }
    if (fd < 0 || buf == NULL || fsync(fd) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    close(fd);
    lares_free(buf);
}

/* Maps path and touches every page: its pages stay in the page cache, mapped,
 * until unmapped (DONTNEED leaves mapped pages alone). */
static void *hold_file(const char *path, size_t bytes) {
    int fd = open(path, O_RDONLY);
    void *p = fd >= 0 ? mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0) {
        close(fd);
    }
    if (p == MAP_FAILED) {
        fprintf(stderr, "cannot map %s\n", path);
        exit(1);
    }
    volatile uint8_t sum = 0;
    for (size_t i = 0; i < bytes; i += 4096) {
        sum += ((const uint8_t *)p)[i];
    }
    (void)sum;
    return p;
}

/* Whether DONTNEED empties the page cache of path once nothing maps it (not
 * on tmpfs, nor on some overlays) */
static bool cache_drops(const char *path, size_t bytes) {
    void *p = hold_file(path, bytes);
    munmap(p, bytes);
    int fd = open(path, O_RDONLY);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    fd = open(path, O_RDONLY);
    p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    unsigned char vec[64];
    size_t resident = 0, pages = LARES_MIN(bytes / 4096, sizeof vec);
    if (p != MAP_FAILED && mincore(p, pages * 4096, (void *)vec) == 0) {
        for (size_t i = 0; i < pages; i++) {
            resident += vec[i] & 1;
        }
    } else {
        resident = pages;
    }
    if (p != MAP_FAILED) {
        munmap(p, bytes);
    }
    return resident == 0;
}

/* The disk test of a file whose every page another mapping holds: nothing is
 * cold, so nothing is timed as streaming, the profile says how much it could
 * not measure, and the planner's figure stays within the direct-read bound. */
static void check_held(const char *path, size_t bytes, const char *what) {
    lares_error err = {0};
    void *p = hold_file(path, bytes);
    sched_device d;
    sched_device_init(&d, "held");
    sched_profile_info info;
    memset(&info, 0, sizeof info);
    CHECK_OK(sched_profile_disk(path, root, 300, &d, &info, &err), &err);
    printf("%s, held: seq %.3g stream %.3g direct %.3g B/s, cached share %.2f, note: %s\n", what,
           d.disk_seq_Bps, d.disk_stream_Bps, d.disk_direct_Bps, d.disk_cached_share,
           info.disk_note);
    CHECK(d.disk_seq_Bps > 0 && d.disk_stream_Bps == 0);
    CHECKF(d.disk_cached_share > 0.99, "%s: cached share %g", what, d.disk_cached_share);
    if (d.disk_direct_Bps > 0) {
        CHECKF(sched_disk_stream_Bps(&d) <= SCHED_DIRECT_HEADROOM * d.disk_direct_Bps * 1.000001,
               "%s: priced at %g with direct reads at %g", what, sched_disk_stream_Bps(&d),
               d.disk_direct_Bps);
        CHECKF(strstr(info.disk_note, "page cache") != NULL, "%s: %s", what, info.disk_note);
    } else {
        CHECKF(strstr(info.disk_note, "direct reads") != NULL, "%s: %s", what, info.disk_note);
    }
    munmap(p, bytes);
}

static void test_disk_cache(void) {
    lares_error err = {0};
    fresh_root("disk");
    char path[600];
    snprintf(path, sizeof path, "%s/model.bin", root);
    const size_t bytes = 24u << 20;
    write_file(path, bytes);
    check_held(path, bytes, "test directory");
    /* nothing maps it now: where DONTNEED empties the cache, every byte is cold */
    if (cache_drops(path, bytes)) {
        sched_device d;
        sched_device_init(&d, "cold");
        sched_profile_info info;
        memset(&info, 0, sizeof info);
        CHECK_OK(sched_profile_disk(path, root, 300, &d, &info, &err), &err);
        printf("cold: seq %.3g stream %.3g direct %.3g B/s, cached share %.2f\n", d.disk_seq_Bps,
               d.disk_stream_Bps, d.disk_direct_Bps, d.disk_cached_share);
        /* a few pages may stay (CI once saw 2.4 %: pages locked under a read
         * still in flight on a loaded machine, which the profile retries
         * once), but the file is cold and the figures are disk figures */
        CHECKF(d.disk_cached_share < 0.05 && d.disk_stream_Bps > 0 && d.disk_seq_Bps > 0,
               "cached share %g, stream %g", d.disk_cached_share, d.disk_stream_Bps);
        CHECK(info.disk_test_bytes > 0);
    } else {
        printf("the page cache of %s does not drop: cold test skipped\n", root);
    }
    /* direct reads of a regular file come back with bytes, or with a note */
    uint64_t got = 0;
    char note[200] = "";
    const double r = sched_disk_direct_rate(path, bytes, 0.05, &got, note, sizeof note);
    CHECKF((r > 0 && got > 0 && note[0] == '\0') || (r == 0 && strstr(note, "direct reads")),
           "direct %g B/s, %" PRIu64 " bytes, note %s", r, got, note);
    unlink(path);
#if defined(__linux__)
    /* a file system that refuses O_DIRECT: no bound, and a note that says so */
    got = 1;
    CHECK(sched_disk_direct_rate("/proc/self/status", 4096, 0.05, &got, note, sizeof note) == 0);
    CHECKF(got == 0 && strstr(note, "refused") != NULL, "%s", note);
    /* tmpfs: its pages never leave memory (and older kernels refuse O_DIRECT there) */
    struct statfs fs;
    char shm[200];
    snprintf(shm, sizeof shm, "/dev/shm/lares-disk-%d", (int)getpid());
    if (statfs("/dev/shm", &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */ &&
        (size_t)fs.f_bavail * (size_t)fs.f_bsize > 4 * bytes) {
        write_file(shm, bytes);
        check_held(shm, bytes, "tmpfs");
        unlink(shm);
    }
#endif
    drop_root();
}

int main(void) {
    test_no_cgroup();
    test_cgroup_v1();
    test_cgroup_v2();
    test_android();
    test_real_profile();
    test_disk_cache();
    return check_finish("sched_profile");
}
