/*
 * The memory limit this process lives under: the tightest memory cgroup limit
 * on the path from its cgroup to the root of the hierarchy (v1:
 * memory.limit_in_bytes; v2: memory.max and memory.high, "max" meaning none),
 * and MemAvailable from /proc/meminfo. Where the cgroup directory is comes
 * from /proc/self/cgroup (the path) and /proc/self/mountinfo (where that
 * hierarchy is mounted), so containers with their own mount roots work too.
 * Anything unreadable counts as "no limit": a wrong guess here only changes
 * whether lares streams, never what it computes. Every file is read through
 * the read gate (core/fault.c), so fault injection reaches these reads too.
 */
#include "mem/mem.h"

#include <stdio.h>

#define TEXT_MAX_BYTES (64u << 10)
/* a container's mount table can be long */
#define MOUNTINFO_MAX_BYTES (1u << 20)
/* v1 reports "no limit" as a huge page-rounded number */
#define V1_UNLIMITED ((uint64_t)1 << 62)

static const mem_limit_src default_src = {.proc_cgroup = "/proc/self/cgroup",
                                          .proc_mountinfo = "/proc/self/mountinfo",
                                          .proc_meminfo = "/proc/meminfo",
                                          .root = ""};

/* A text file read whole (at most cap - 1 bytes): lares_alloc'd, NULL when
 * it cannot be read. */
static char *read_text(const char *path, size_t cap) {
    char *buf = lares_alloc(cap);
    if (buf != NULL && lares_read_small_file(path, buf, cap) < 0) {
        lares_free(buf);
        buf = NULL;
    }
    return buf;
}

/* The next line of the text at *p, cut in place; NULL after the last. */
static char *next_line(char **p) {
    char *line = *p;
    if (*line == '\0') {
        return NULL;
    }
    char *nl = strchr(line, '\n');
    if (nl != NULL) {
        *nl = '\0';
        *p = nl + 1;
    } else {
        *p = line + strlen(line);
    }
    return line;
}

/* a number, or "max"; false when the file is missing or holds neither */
static bool read_limit_file(const char *path, uint64_t *out) {
    char buf[64] = {0};
    if (lares_read_small_file(path, buf, sizeof buf) <= 0) {
        return false;
    }
    if (strncmp(buf, "max", 3) == 0) {
        *out = UINT64_MAX;
        return true;
    }
    unsigned long long v;
    if (sscanf(buf, "%llu", &v) != 1) {
        return false;
    }
    *out = v >= V1_UNLIMITED ? UINT64_MAX : (uint64_t)v;
    return true;
}

/* does the comma-separated list contain word? */
static bool has_word(const char *list, size_t len, const char *word) {
    const size_t wl = strlen(word);
    const char *p = list, *end = list + len;
    while (p < end) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        const size_t n = c ? (size_t)(c - p) : (size_t)(end - p);
        if (n == wl && memcmp(p, word, wl) == 0) {
            return true;
        }
        p += n + 1;
    }
    return false;
}

/* The cgroup path of this process in the v1 memory hierarchy (version 1) or
 * the unified one (version 2), from /proc/self/cgroup. */
static bool cgroup_path(const char *file, int version, char *out, size_t cap) {
    char *text = read_text(file, TEXT_MAX_BYTES);
    if (text == NULL) {
        return false;
    }
    bool found = false;
    char *at = text, *line;
    while (!found && (line = next_line(&at)) != NULL) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL) {
            continue;
        }
        const char *ctrl = c1 + 1;
        const size_t ctrl_len = (size_t)(c2 - ctrl);
        const bool v2 = strncmp(line, "0:", 2) == 0 && ctrl_len == 0;
        if ((version == 2 && v2) || (version == 1 && has_word(ctrl, ctrl_len, "memory"))) {
            found = snprintf(out, cap, "%s", c2 + 1) < (int)cap;
        }
    }
    lares_free(text);
    return found;
}

/* The mount point and mount root of the v1 memory hierarchy or of cgroup2. */
static bool cgroup_mount(const char *file, int version, char *mnt, size_t mcap, char *root,
                         size_t rcap) {
    char *text = read_text(file, MOUNTINFO_MAX_BYTES);
    if (text == NULL) {
        return false;
    }
    bool found = false;
    char *at = text, *line;
    while (!found && (line = next_line(&at)) != NULL) {
        /* id parent maj:min root mountpoint options [optional...] - fstype source superopts */
        char *sep = strstr(line, " - ");
        if (sep == NULL) {
            continue;
        }
        *sep = '\0';
        char fstype[32], source[256], superopts[1024] = "";
        if (sscanf(sep + 3, "%31s %255s %1023s", fstype, source, superopts) < 2) {
            continue;
        }
        const bool want = version == 2 ? strcmp(fstype, "cgroup2") == 0
                                       : strcmp(fstype, "cgroup") == 0 &&
                                             has_word(superopts, strlen(superopts), "memory");
        if (!want) {
            continue;
        }
        char r[1024], m[1024];
        if (sscanf(line, "%*s %*s %*s %1023s %1023s", r, m) != 2) {
            continue;
        }
        found = snprintf(mnt, mcap, "%s", m) < (int)mcap && snprintf(root, rcap, "%s", r) < (int)rcap;
    }
    lares_free(text);
    return found;
}

/* the tightest limit from our cgroup directory up to the mount point */
static uint64_t hierarchy_limit(const mem_limit_src *src, int version) {
    char path[1024], mnt[1024], mroot[1024];
    if (!cgroup_path(src->proc_cgroup, version, path, sizeof path) ||
        !cgroup_mount(src->proc_mountinfo, version, mnt, sizeof mnt, mroot, sizeof mroot)) {
        return UINT64_MAX;
    }
    /* the part of our path below the mount's root; outside it (another
     * namespace's view) the mount point itself is our cgroup */
    const char *rel = "";
    const size_t rl = strlen(mroot);
    if (strcmp(mroot, "/") == 0) {
        rel = path;
    } else if (strncmp(path, mroot, rl) == 0 && (path[rl] == '/' || path[rl] == '\0')) {
        rel = path + rl;
    }
    char top[2048], dir[2048];
    if (snprintf(top, sizeof top, "%s%s", src->root, mnt) >= (int)sizeof top ||
        snprintf(dir, sizeof dir, "%s%s", top, strcmp(rel, "/") == 0 ? "" : rel) >=
            (int)sizeof dir) {
        return UINT64_MAX;
    }
    static const char *const v1_files[] = {"memory.limit_in_bytes"};
    static const char *const v2_files[] = {"memory.max", "memory.high"};
    const char *const *files = version == 1 ? v1_files : v2_files;
    const size_t n_files = version == 1 ? 1 : 2;
    uint64_t best = UINT64_MAX;
    const size_t top_len = strlen(top);
    for (;;) {
        for (size_t i = 0; i < n_files; i++) {
            char p[2100];
            uint64_t v;
            snprintf(p, sizeof p, "%s/%s", dir, files[i]);
            if (read_limit_file(p, &v) && v < best) {
                best = v;
            }
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top_len || slash == NULL || (size_t)(slash - dir) < top_len) {
            break;
        }
        *slash = '\0';
    }
    return best;
}

static void read_meminfo(const char *file, uint64_t *total, uint64_t *avail) {
    *total = UINT64_MAX;
    *avail = UINT64_MAX;
    char *text = read_text(file, TEXT_MAX_BYTES);
    if (text == NULL) {
        return;
    }
    char *at = text, *line;
    while ((line = next_line(&at)) != NULL) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
            *total = (uint64_t)kb * 1024;
        } else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *avail = (uint64_t)kb * 1024;
        }
    }
    lares_free(text);
}

void mem_limit_read(const mem_limit_src *src, mem_limit *out) {
    if (src == NULL) {
        src = &default_src;
    }
    memset(out, 0, sizeof *out);
    out->cgroup_bytes = UINT64_MAX;
    const uint64_t v2 = hierarchy_limit(src, 2);
    const uint64_t v1 = hierarchy_limit(src, 1);
    if (v2 < out->cgroup_bytes) {
        out->cgroup_bytes = v2;
        out->cgroup_version = 2;
    }
    if (v1 < out->cgroup_bytes) {
        out->cgroup_bytes = v1;
        out->cgroup_version = 1;
    }
    read_meminfo(src->proc_meminfo, &out->total_bytes, &out->available_bytes);
    out->auto_bytes = out->cgroup_bytes;
    if (out->available_bytes != UINT64_MAX) {
        const uint64_t share = (uint64_t)((double)out->available_bytes * MEM_AVAILABLE_SHARE);
        out->auto_bytes = LARES_MIN(out->auto_bytes, share);
    }
}
