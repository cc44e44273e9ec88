/*
 * Process and machine memory figures. Linux and Android read /proc; elsewhere
 * getrusage gives peak RSS and faults and the rest is reported unknown.
 */
#include "mem/mem.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

static int64_t meminfo_field(const char *buf, const char *name) {
    const char *p = strstr(buf, name);
    if (p == NULL) {
        return -1;
    }
    p += strlen(name);
    while (*p == ' ' || *p == ':') {
        p++;
    }
    long long kb = -1;
    if (sscanf(p, "%lld", &kb) != 1 || kb < 0) {
        return -1;
    }
    return (int64_t)kb * 1024;
}

void mem_sample_now(mem_sample *out) {
    memset(out, 0, sizeof *out);
    out->read_bytes = -1;
    out->mem_total_bytes = -1;
    out->mem_available_bytes = -1;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
#if defined(__APPLE__)
        out->peak_rss_bytes = (uint64_t)ru.ru_maxrss; /* bytes on macOS */
#else
        out->peak_rss_bytes = (uint64_t)ru.ru_maxrss * 1024; /* KiB elsewhere */
#endif
        out->major_faults = (uint64_t)ru.ru_majflt;
    }
    char buf[4096];
    if (lares_read_small_file("/proc/self/io", buf, sizeof buf) > 0) {
        const char *p = strstr(buf, "\nread_bytes:");
        long long v;
        if (p != NULL && sscanf(p + 12, "%lld", &v) == 1) {
            out->read_bytes = v;
        }
    }
    if (lares_read_small_file("/proc/self/statm", buf, sizeof buf) > 0) {
        long long pages_total, pages_res;
        if (sscanf(buf, "%lld %lld", &pages_total, &pages_res) == 2) {
            out->rss_bytes = (uint64_t)pages_res * (uint64_t)sysconf(_SC_PAGESIZE);
        }
    }
    /* The kernel updates its high-water mark (ru_maxrss, VmHWM) lazily, when
     * the resident set shrinks, and counts pages per CPU; read right after
     * growth it can be below the resident set measured a moment later. The
     * peak is at least every figure seen, so take the largest. */
    if (lares_read_small_file("/proc/self/status", buf, sizeof buf) > 0) {
        const int64_t hwm = meminfo_field(buf, "\nVmHWM");
        if (hwm > 0 && (uint64_t)hwm > out->peak_rss_bytes) {
            out->peak_rss_bytes = (uint64_t)hwm;
        }
    }
    if (out->rss_bytes > out->peak_rss_bytes) {
        out->peak_rss_bytes = out->rss_bytes;
    }
    if (lares_read_small_file("/proc/meminfo", buf, sizeof buf) > 0) {
        out->mem_total_bytes = meminfo_field(buf, "MemTotal");
        out->mem_available_bytes = meminfo_field(buf, "MemAvailable");
    }
}

void mem_pressure_begin(mem_pressure *p) {
    mem_sample s;
    mem_sample_now(&s);
    p->total = s.mem_total_bytes;
    p->start_available = s.mem_available_bytes;
    p->min_available = s.mem_available_bytes;
}

void mem_pressure_update(mem_pressure *p) {
    mem_sample s;
    mem_sample_now(&s);
    if (s.mem_available_bytes >= 0 && s.mem_available_bytes < p->min_available) {
        p->min_available = s.mem_available_bytes;
    }
}

double mem_pressure_value(const mem_pressure *p) {
    if (p->total <= 0 || p->start_available < 0 || p->min_available >= p->start_available) {
        return 0.0;
    }
    return (double)(p->start_available - p->min_available) / (double)p->total;
}
