/*
 * What the operating system says about this device: its OS (Android is Linux
 * underneath and must be told apart: its page cache and swap behave
 * differently), free memory honouring the memory cgroup the process runs in
 * (v1 and v2), swap, the CPU quota, the CPU model, and the fingerprint that
 * keys the profile cache.
 *
 * Every path is read under `root` so tests can hand in a fake /proc and /sys.
 */
#include "mem/mem.h"
#include "sched/sched_impl.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

/* Reads root/rel into buf; returns the bytes read or -1. */
static long read_under(const char *root, const char *rel, char *buf, size_t cap) {
    char path[1024];
    const int n = snprintf(path, sizeof path, "%s%s", root ? root : "", rel);
    return n > 0 && (size_t)n < sizeof path ? lares_read_small_file(path, buf, cap) : -1;
}

static bool exists_under(const char *root, const char *rel) {
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s%s", root ? root : "", rel);
    return stat(path, &st) == 0;
}

sched_os sched_detect_os(const char *root) {
#if defined(__APPLE__)
    (void)root;
    return SCHED_OS_MACOS;
#elif defined(__ANDROID__)
    (void)root;
    return SCHED_OS_ANDROID;
#else
    /* a Linux build running on Android (Termux, a chroot): the system
     * partition's build properties, or Android's process starter where
     * build.prop is not readable (the library reads no environment: only
     * app/ does) */
    if (exists_under(root, "/system/build.prop") ||
        exists_under(root, "/system/bin/app_process64") ||
        exists_under(root, "/system/bin/app_process32")) {
        return SCHED_OS_ANDROID;
    }
    return SCHED_OS_LINUX;
#endif
}

/* "Name:   1234 kB" -> bytes; -1 when absent */
static int64_t meminfo_bytes(const char *buf, const char *name) {
    size_t n = strlen(name);
    for (const char *p = buf; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            long long kb;
            if (sscanf(p + n + 1, "%lld", &kb) == 1 && kb >= 0) {
                return (int64_t)kb * 1024;
            }
            return -1;
        }
    }
    return -1;
}

/* a whole-file integer ("max" -> -1 meaning unlimited; missing -> -2) */
static int64_t file_i64(const char *root, const char *dir, const char *file) {
    char rel[1024], buf[64];
    snprintf(rel, sizeof rel, "%s/%s", dir, file);
    if (read_under(root, rel, buf, sizeof buf) <= 0) {
        return -2;
    }
    if (strncmp(buf, "max", 3) == 0) {
        return -1;
    }
    long long v;
    if (sscanf(buf, "%lld", &v) != 1) {
        return -2;
    }
    return v;
}

/* "key value" line of a memory.stat file */
static int64_t stat_i64(const char *root, const char *dir, const char *key) {
    char rel[1024], buf[8192];
    snprintf(rel, sizeof rel, "%s/memory.stat", dir);
    if (read_under(root, rel, buf, sizeof buf) <= 0) {
        return -1;
    }
    size_t n = strlen(key);
    for (const char *p = buf; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, n) == 0 && p[n] == ' ') {
            long long v;
            return sscanf(p + n + 1, "%lld", &v) == 1 && v >= 0 ? v : -1;
        }
    }
    return -1;
}

/* The cgroup path of a controller from /proc/self/cgroup: v2 ("0::/x") when
 * controller is NULL, else the v1 hierarchy listing it ("4:memory:/x"). */
static bool cgroup_path(const char *root, const char *controller, char *out, size_t cap) {
    char buf[4096];
    if (read_under(root, "/proc/self/cgroup", buf, sizeof buf) <= 0) {
        return false;
    }
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL) {
            continue;
        }
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        bool match = false;
        if (controller == NULL) {
            match = strncmp(line, "0:", 2) == 0 && ctrls[0] == '\0';
        } else {
            /* comma-separated list: "cpu,cpuacct" */
            size_t n = strlen(controller);
            const char *p = ctrls;
            while (!match && p != NULL) {
                match = strncmp(p, controller, n) == 0 && (p[n] == ',' || p[n] == '\0');
                p = strchr(p, ',');
                p = p ? p + 1 : NULL;
            }
        }
        if (match) {
            snprintf(out, cap, "%s", strcmp(path, "/") == 0 ? "" : path);
            return true;
        }
    }
    return false;
}

typedef struct cg_mem {
    int64_t room;      /* bytes the cgroup can still take (-1: no limit) */
    int64_t limit;     /* -1: none */
    int64_t swap_room; /* -1: no limit */
} cg_mem;

/* cgroup v2: the tightest of the process's cgroup and its ancestors */
static void cg2_memory(const char *root, const char *path, cg_mem *out) {
    char dir[1024];
    snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", path);
    for (;;) {
        int64_t max = file_i64(root, dir, "memory.max");
        int64_t cur = file_i64(root, dir, "memory.current");
        if (max >= 0 && cur >= 0) {
            int64_t inactive = stat_i64(root, dir, "inactive_file");
            int64_t room = max - cur + (inactive > 0 ? inactive : 0);
            room = room < 0 ? 0 : room;
            if (out->room < 0 || room < out->room) {
                out->room = room;
            }
            if (out->limit < 0 || max < out->limit) {
                out->limit = max;
            }
        }
        int64_t smax = file_i64(root, dir, "memory.swap.max");
        int64_t scur = file_i64(root, dir, "memory.swap.current");
        if (smax >= 0 && scur >= 0) {
            int64_t room = smax > scur ? smax - scur : 0;
            if (out->swap_room < 0 || room < out->swap_room) {
                out->swap_room = room;
            }
        }
        char *slash = strrchr(dir, '/');
        if (slash == NULL || strcmp(dir, "/sys/fs/cgroup") == 0) {
            break;
        }
        *slash = '\0';
    }
}

/* cgroup v1: memory.limit_in_bytes (and the hierarchical limit in memory.stat) */
static void cg1_memory(const char *root, const char *path, cg_mem *out) {
    char dir[1024];
    snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory%s", path);
    if (file_i64(root, dir, "memory.usage_in_bytes") < 0) {
        snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory"); /* a container's own root */
    }
    int64_t limit = file_i64(root, dir, "memory.limit_in_bytes");
    int64_t usage = file_i64(root, dir, "memory.usage_in_bytes");
    int64_t hier = stat_i64(root, dir, "hierarchical_memory_limit");
    if (hier >= 0 && (limit < 0 || hier < limit)) {
        limit = hier;
    }
    /* "unlimited" is a page-rounded LLONG_MAX; anything beyond 2^60 is no limit */
    if (limit < 0 || usage < 0 || limit >= ((int64_t)1 << 60)) {
        return;
    }
    int64_t inactive = stat_i64(root, dir, "total_inactive_file");
    if (inactive < 0) {
        inactive = stat_i64(root, dir, "inactive_file");
    }
    int64_t room = limit - usage + (inactive > 0 ? inactive : 0);
    out->room = room < 0 ? 0 : room;
    out->limit = limit;
    int64_t swl = file_i64(root, dir, "memory.memsw.limit_in_bytes");
    int64_t swu = file_i64(root, dir, "memory.memsw.usage_in_bytes");
    if (swl >= 0 && swu >= 0 && swl < ((int64_t)1 << 60)) {
        /* memsw counts memory + swap: the swap room is what memsw leaves beyond memory */
        int64_t r = (swl - swu) - (limit - usage);
        out->swap_room = r < 0 ? 0 : r;
    }
}

lares_status sched_probe_memory(const char *root, sched_device *d, uint64_t *cgroup_limit,
                                lares_error *err) {
    *cgroup_limit = 0;
#if defined(__APPLE__)
    if (root == NULL || root[0] == '\0') {
        return sched_probe_memory_macos(d, err);
    }
#endif
    char buf[8192];
    if (read_under(root, "/proc/meminfo", buf, sizeof buf) <= 0) {
        return lares_fail(err, LARES_EIO, "%s/proc/meminfo: cannot read", root ? root : "");
    }
    int64_t total = meminfo_bytes(buf, "MemTotal");
    int64_t avail = meminfo_bytes(buf, "MemAvailable");
    int64_t swap = meminfo_bytes(buf, "SwapFree");
    if (avail < 0) { /* kernels before 3.14: free + page cache is the usual estimate */
        int64_t fr = meminfo_bytes(buf, "MemFree"), ca = meminfo_bytes(buf, "Cached");
        avail = fr >= 0 ? fr + (ca > 0 ? ca : 0) : -1;
    }
    if (total <= 0 || avail < 0) {
        return lares_fail(err, LARES_EFORMAT, "%s/proc/meminfo: no MemTotal or MemAvailable",
                          root ? root : "");
    }
    /* The memory the device gives is the budget the executor will take
     * (mem_limit_read, as api/budget.c and the ring worker do): the tightest
     * cgroup limit above the process, at most MEM_AVAILABLE_SHARE of
     * MemAvailable. The same function reads the same files, so the planner's
     * figure and the executor's budget cannot disagree. */
    char f_cgroup[1100], f_mount[1100], f_meminfo[1100];
    snprintf(f_cgroup, sizeof f_cgroup, "%s/proc/self/cgroup", root ? root : "");
    snprintf(f_mount, sizeof f_mount, "%s/proc/self/mountinfo", root ? root : "");
    snprintf(f_meminfo, sizeof f_meminfo, "%s/proc/meminfo", root ? root : "");
    const mem_limit_src src = {.proc_cgroup = f_cgroup,
                               .proc_mountinfo = f_mount,
                               .proc_meminfo = f_meminfo,
                               .root = root ? root : ""};
    mem_limit lim;
    mem_limit_read(&src, &lim);
    uint64_t give = (uint64_t)((double)avail * MEM_AVAILABLE_SHARE);
    if (lim.cgroup_bytes < give) {
        give = lim.cgroup_bytes;
    }
    /* swap: the cgroup's swap room (Android counts zram swap as memory) */
    cg_mem cg = {-1, -1, -1};
    char path[512];
    if (cgroup_path(root, "memory", path, sizeof path)) {
        cg1_memory(root, path, &cg);
    }
    if (cg.limit < 0 && cgroup_path(root, NULL, path, sizeof path)) {
        cg2_memory(root, path, &cg);
    }
    if (cg.swap_room >= 0 && swap >= 0 && cg.swap_room < swap) {
        swap = cg.swap_room;
    }
    d->ram_total_bytes = (uint64_t)total;
    d->ram_avail_bytes = give;
    d->swap_avail_bytes = swap > 0 ? (uint64_t)swap : 0;
    *cgroup_limit = lim.cgroup_bytes != UINT64_MAX ? lim.cgroup_bytes : 0;
    return LARES_OK;
}

double sched_probe_cpu_quota(const char *root, double *period_s) {
    char path[512], dir[1024];
    *period_s = 0;
    if (cgroup_path(root, "cpu", path, sizeof path)) {
        static const char *const mounts[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"};
        for (size_t i = 0; i < 2; i++) {
            snprintf(dir, sizeof dir, "%s%s", mounts[i], path);
            int64_t q = file_i64(root, dir, "cpu.cfs_quota_us");
            int64_t p = file_i64(root, dir, "cpu.cfs_period_us");
            if (q > 0 && p > 0) {
                *period_s = (double)p / 1e6;
                return (double)q / (double)p;
            }
            if (q == -1 || (q == -2 && p > 0)) { /* -1: no quota */
                return 0.0;
            }
        }
    }
    if (cgroup_path(root, NULL, path, sizeof path)) {
        snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", path);
        char rel[1100], buf[64];
        snprintf(rel, sizeof rel, "%s/cpu.max", dir);
        long long q, p;
        if (read_under(root, rel, buf, sizeof buf) > 0 && sscanf(buf, "%lld %lld", &q, &p) == 2 &&
            q > 0 && p > 0) {
            *period_s = (double)p / 1e6;
            return (double)q / (double)p;
        }
    }
    return 0.0;
}

/* The CPU's marketing name (x86 "model name", arm "Hardware" or "CPU part"). */
void sched_probe_cpu_model(const char *root, char *out, size_t cap) {
    out[0] = '\0';
#if defined(__APPLE__)
    if (root == NULL || root[0] == '\0') {
        size_t n = cap;
        if (sysctlbyname("machdep.cpu.brand_string", out, &n, NULL, 0) == 0) {
            return;
        }
    }
#endif
    char buf[16384]; /* the first processor's block names the model */
    if (read_under(root, "/proc/cpuinfo", buf, sizeof buf) <= 0) {
        return;
    }
    static const char *const keys[] = {"model name", "Hardware", "CPU part"};
    for (size_t k = 0; k < 3 && out[0] == '\0'; k++) {
        const char *p = strstr(buf, keys[k]);
        if (p == NULL || (p != buf && p[-1] != '\n')) {
            continue;
        }
        p = strchr(p, ':');
        if (p == NULL) {
            continue;
        }
        p++;
        while (*p == ' ' || *p == '\t') {
            p++;
        }
        size_t n = strcspn(p, "\n");
        snprintf(out, cap, "%.*s", (int)LARES_MIN(n, cap - 1), p);
    }
}

uint64_t sched_fingerprint(const sched_device *d) {
    char s[1024];
    /* RAM in whole GiB: MemTotal moves by a few pages between kernel builds */
    /* "p5": the profile's format (full-speed rates with the quota beside them,
     * the streaming read, rates calibrated on a model's windows; since p4 the
     * disk figures time only what the page cache did not hold, with the
     * direct-read bound beside them; since p5 direct reads are timed as the
     * executor streams, several in flight); an older cache never answers. The CPU's
     * features (a VM moved to another host) and the model the rates were
     * calibrated on count too. */
    snprintf(s, sizeof s, "p5|%s|%d|%d|%" PRIu64 "|%s|%s|%.3f|%.3f|%s|%s|%s|%" PRIu64,
             d->cpu_model, d->cores, d->threads, d->ram_total_bytes >> 30, d->isa,
             sched_os_name(d->os), d->cpu_quota, d->cpu_quota_period_s, lares_version(),
             d->cpu_flags, d->cal.model, d->cal.model_bytes);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (const char *p = s; *p; p++) {
        h ^= (uint8_t)*p;
        h *= 0x100000001b3ull;
    }
    return h;
}
