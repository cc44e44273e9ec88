/*
 * mem: spans, advice and limits against outside truth.
 *
 *   - spans merge and sort like the interval arithmetic says (hand-worked
 *     cases, then random ranges against a byte map);
 *   - a layer's span holds exactly its tensors' bytes as the GGUF directory
 *     lists them; an expert's slice of a stacked expert tensor equals, byte
 *     for byte, the dense FFN tensor the "identical experts" file was made
 *     from (stories260K.gguf);
 *   - prefetch, release and residency as the kernel reports them (mincore,
 *     /proc/self/io) on a private file whose pages were dropped;
 *   - locking refused by RLIMIT_MEMLOCK gives a message naming the limit;
 *   - the layout of direct reads (ragged ranges rounded out to blocks, each
 *     byte at its file offset modulo the block) by hand and against random
 *     spans, and direct reads with each engine equal to plain reads, short
 *     reads resumed and failures reported;
 *   - cgroup v1/v2 limits and MemAvailable read from fake trees laid out
 *     like the kernel's, including nesting, "max" and garbage.
 */
#include "check.h"
#include "gguf/gguf.h"
#include "mem/mem.h"

#include <fcntl.h>
#include <pwd.h>

/* AddressSanitizer replaces mlock with a no-op that reports success */
#if defined(__SANITIZE_ADDRESS__)
#define MLOCK_WORKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLOCK_WORKS 0
#endif
#endif
#ifndef MLOCK_WORKS
#define MLOCK_WORKS 1
#endif
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- spans ---- */

static void check_span_cases(void) {
    lares_error err = {0};
    mem_span s = {0};
    CHECK_OK(mem_span_add(&s, 100, 200, &err), &err);
    CHECK_OK(mem_span_add(&s, 300, 400, &err), &err);
    CHECK_OK(mem_span_add(&s, 0, 50, &err), &err);
    CHECK(s.n == 3 && s.r[0].lo == 0 && s.r[1].lo == 100 && s.r[2].lo == 300);
    CHECK(s.bytes == 50 + 100 + 100);
    CHECK_OK(mem_span_add(&s, 200, 300, &err), &err); /* touching both neighbours: one range */
    CHECK(s.n == 2 && s.r[1].lo == 100 && s.r[1].hi == 400 && s.bytes == 350);
    CHECK_OK(mem_span_add(&s, 40, 120, &err), &err); /* overlapping two */
    CHECK(s.n == 1 && s.r[0].lo == 0 && s.r[0].hi == 400 && s.bytes == 400);
    CHECK_OK(mem_span_add(&s, 500, 500, &err), &err); /* empty: ignored */
    CHECK(s.n == 1);
    CHECK(mem_span_add(&s, 9, 3, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "[9, 3)") != NULL, "message: %s", err.msg);
    mem_span t = {0};
    CHECK_OK(mem_span_add(&t, 400, 410, &err), &err);
    CHECK(!mem_span_overlaps(&s, &t));
    CHECK_OK(mem_span_add(&t, 399, 400, &err), &err);
    CHECK(mem_span_overlaps(&s, &t));
    mem_span_free(&s);
    mem_span_free(&t);
    mem_span_free(NULL);
    /* growth failure leaves the span as it was */
    CHECK_OK(mem_span_add(&s, 0, 1, &err), &err);
    for (uint64_t i = 1; i < 8; i++) {
        CHECK_OK(mem_span_add(&s, 10 * i, 10 * i + 1, &err), &err);
    }
    lares_alloc_fail_after(1);
    CHECK(mem_span_add(&s, 1000, 1001, &err) == LARES_ENOMEM);
    lares_alloc_fail_after(0);
    CHECK(s.n == 8 && s.bytes == 8);
    mem_span_free(&s);
}

/* random ranges against a byte map: the span covers exactly the marked bytes */
static void check_span_random(void) {
    enum { N = 4096 };
    static unsigned char map[N];
    uint64_t seed = 0x9e3779b97f4a7c15u;
    lares_error err = {0};
    size_t max_ranges = 0;
    for (int round = 0; round < 200; round++) {
        memset(map, 0, sizeof map);
        mem_span s = {0};
        const int n = 1 + round % 40;
        for (int i = 0; i < n; i++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            const uint64_t lo = (seed >> 33) % N;
            const uint64_t len = (seed >> 20) % 200;
            const uint64_t hi = lo + len > N ? N : lo + len;
            memset(map + lo, 1, (size_t)(hi - lo));
            CHECK_OK(mem_span_add(&s, lo, hi, &err), &err);
        }
        uint64_t marked = 0;
        for (int i = 0; i < N; i++) {
            marked += map[i];
        }
        bool ok = s.bytes == marked;
        for (size_t i = 0; i < s.n; i++) {
            ok = ok && s.r[i].lo < s.r[i].hi && (i == 0 || s.r[i - 1].hi < s.r[i].lo);
            for (uint64_t b = s.r[i].lo; b < s.r[i].hi; b++) {
                ok = ok && map[b];
            }
        }
        CHECKF(ok, "round %d: span of %zu ranges does not match the byte map", round, s.n);
        max_ranges = s.n > max_ranges ? s.n : max_ranges;
        mem_span_free(&s);
    }
    CHECKF(max_ranges > 5, "random ranges never split into many (%zu)", max_ranges);
}

/* ---- spans of a real file ---- */

/* a layer's span from its plan covers exactly the file's blk.N.* tensors */
static void check_layers(void) {
    lares_error err = {0};
    gguf_file *f = NULL;
    model_plan *p = NULL;
    CHECK_OK(gguf_open(fixture("stories260K.gguf"), NULL, &f, &err), &err);
    if (f == NULL) {
        return;
    }
    CHECK_OK(model_plan_make(f, &p, &err), &err);
    if (p == NULL) {
        gguf_close(f);
        return;
    }
    uint64_t all = 0;
    for (int32_t l = 0; l < 5; l++) {
        mem_span s = {0};
        CHECK_OK(mem_span_of_layer(p, l, true, &s, &err), &err);
        char prefix[16];
        snprintf(prefix, sizeof prefix, "blk.%d.", (int)l);
        uint64_t want = 0;
        for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            if (strncmp(t->name, prefix, strlen(prefix)) == 0) {
                want += t->nbytes;
                const mem_range r = mem_tensor_range(f, t);
                mem_span one = {0};
                CHECK_OK(mem_span_add(&one, r.lo, r.hi, &err), &err);
                CHECKF(mem_span_overlaps(&s, &one), "layer %d misses %s", l, t->name);
                mem_span_free(&one);
            }
        }
        /* tensors are padded to the alignment: the span's gaps are that padding */
        CHECKF(s.bytes == want, "layer %d: span %llu bytes, tensors %llu", l,
               (unsigned long long)s.bytes, (unsigned long long)want);
        all += s.bytes;
        mem_span_free(&s);
    }
    CHECK(all > 0);
    mem_span s = {0};
    CHECK(mem_span_of_layer(p, 5, true, &s, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "layer 5") != NULL, "message: %s", err.msg);
    /* expert ranges refuse a plain matrix */
    mem_range r;
    CHECK(mem_expert_range(&p->layers[0].w[MODEL_ROLE_UP], 0, &r, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, "blk.0.ffn_up.weight") != NULL, "message: %s", err.msg);
    model_plan_free(p);
    gguf_close(f);
}

/* the identical-experts file was made by copying each dense FFN tensor into
 * every expert: each expert's slice must equal the dense tensor's bytes */
static void check_experts(void) {
    lares_error err = {0};
    gguf_file *dense = NULL, *moe = NULL;
    model_plan *p = NULL;
    CHECK_OK(gguf_open(fixture("stories260K.gguf"), NULL, &dense, &err), &err);
    CHECK_OK(gguf_open(fixture("derived/stories260K-moe4top2-identical-experts.gguf"), NULL, &moe,
                       &err), &err);
    if (moe != NULL) {
        CHECK_OK(model_plan_make(moe, &p, &err), &err);
    }
    if (dense == NULL || moe == NULL || p == NULL) {
        gguf_close(dense);
        gguf_close(moe);
        return;
    }
    static const char *const kinds[] = {"gate", "up", "down"};
    static const model_role roles[] = {MODEL_ROLE_EXP_GATE, MODEL_ROLE_EXP_UP,
                                       MODEL_ROLE_EXP_DOWN};
    int compared = 0;
    for (int l = 0; l < 5; l++) {
        for (int k = 0; k < 3; k++) {
            char dn[64], en[64];
            snprintf(dn, sizeof dn, "blk.%d.ffn_%s.weight", l, kinds[k]);
            snprintf(en, sizeof en, "blk.%d.ffn_%s_exps.weight", l, kinds[k]);
            const gguf_tensor *dt = gguf_find_tensor(dense, dn), *et = gguf_find_tensor(moe, en);
            CHECKF(dt != NULL && et != NULL, "missing %s / %s", dn, en);
            if (dt == NULL || et == NULL) {
                continue;
            }
            const model_weight *w = &p->layers[l].w[roles[k]];
            CHECK(w->t == et);
            mem_range prev = {0, 0};
            for (int64_t e = 0; e < et->ne[2]; e++) {
                mem_range r;
                CHECK_OK(mem_expert_range(w, e, &r, &err), &err);
                CHECK(r.hi - r.lo == dt->nbytes);
                CHECK(e == 0 || r.lo == prev.hi); /* slices tile the tensor */
                CHECK(r.hi <= gguf_file_bytes(moe));
                CHECKF(memcmp(gguf_base(moe) + r.lo, dt->data, (size_t)dt->nbytes) == 0,
                       "%s expert %lld differs from %s", en, (long long)e, dn);
                compared++;
                prev = r;
            }
            mem_range r;
            CHECK(mem_expert_range(w, et->ne[2], &r, &err) == LARES_EINVAL);
            CHECK(mem_expert_range(w, -1, &r, &err) == LARES_EINVAL);
            CHECKF(strstr(err.msg, "expert -1") != NULL, "message: %s", err.msg);
        }
    }
    CHECK(compared == 5 * 3 * 4);
    /* a layer's span without its experts leaves out exactly the three tensors */
    mem_span with = {0}, without = {0};
    CHECK_OK(mem_span_of_layer(p, 0, true, &with, &err), &err);
    CHECK_OK(mem_span_of_layer(p, 0, false, &without, &err), &err);
    uint64_t exps = 0;
    for (int k = 0; k < 3; k++) {
        char en[64];
        snprintf(en, sizeof en, "blk.0.ffn_%s_exps.weight", kinds[k]);
        exps += gguf_find_tensor(moe, en)->nbytes;
    }
    CHECK(with.bytes - without.bytes == exps);
    mem_span_free(&with);
    mem_span_free(&without);
    model_plan_free(p);
    gguf_close(dense);
    gguf_close(moe);
}

/* ---- advice on a private file ---- */

#define FILE_BYTES (24u << 20)

static int make_file(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        return -1;
    }
    static unsigned char block[1 << 16];
    for (size_t i = 0; i < sizeof block; i++) {
        block[i] = (unsigned char)(i * 131u + 7u);
    }
    for (size_t off = 0; off < FILE_BYTES; off += sizeof block) {
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block) {
            close(fd);
            return -1;
        }
    }
    fsync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* clean pages: dropped */
    return fd;
}

static void check_advice(void) {
    const char *path = "test_mem.advice.bin";
    int fd = make_file(path);
    CHECKF(fd >= 0, "cannot write %s", path);
    if (fd < 0) {
        return;
    }
    void *base = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(base != MAP_FAILED);
    if (base == MAP_FAILED) {
        close(fd);
        unlink(path);
        return;
    }
    mem_file mf;
    mem_file_init(&mf, base, FILE_BYTES, fd, path);
    CHECK(mf.page >= 4096 && mf.ra_chunk >= 128 * 1024 && mf.ra_chunk % mf.page == 0);
    lares_error err = {0};
    mem_span all = {0}, part = {0};
    CHECK_OK(mem_span_add(&all, 0, FILE_BYTES, &err), &err);
    /* an unaligned range in the middle: 5 MiB + 100 bytes on */
    const uint64_t lo = (5u << 20) + 100, hi = (13u << 20) + 3000;
    CHECK_OK(mem_span_add(&part, lo, hi, &err), &err);
    CHECKF(mem_resident_bytes(&mf, &all) < (1u << 20), "%llu bytes resident after the drop",
           (unsigned long long)mem_resident_bytes(&mf, &all));
    for (int m = MEM_READ_DEFAULT; m < MEM_READ_COUNT; m++) {
        mem_release(&mf, &all);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        mem_sample s0, s1;
        mem_sample_now(&s0);
        mem_io io = {0};
        static unsigned char scratch[1 << 20];
        CHECK_OK(mem_prefetch(&mf, &part, (mem_read_method)m, scratch, sizeof scratch, &io, &err),
                 &err);
        mem_sample_now(&s1);
        const uint64_t want = ((hi + mf.page - 1) / mf.page - lo / mf.page) * mf.page;
        CHECKF(io.bytes == want, "%s: %llu bytes asked, the range rounds out to %llu",
               mem_read_method_name((mem_read_method)m), (unsigned long long)io.bytes,
               (unsigned long long)want);
        /* the kernel says the whole range is in memory, and it did read it */
        CHECKF(mem_resident_bytes(&mf, &part) == want, "%s: %llu of %llu bytes resident",
               mem_read_method_name((mem_read_method)m),
               (unsigned long long)mem_resident_bytes(&mf, &part), (unsigned long long)want);
        if (s0.read_bytes >= 0) {
            CHECKF((uint64_t)(s1.read_bytes - s0.read_bytes) >= want,
                   "%s: the disk gave %lld bytes for %llu", mem_read_method_name((mem_read_method)m),
                   (long long)(s1.read_bytes - s0.read_bytes), (unsigned long long)want);
        }
        /* release rounds in: the two partial pages at the ends stay */
        const uint64_t freed = mem_release(&mf, &part);
        CHECK(freed == want - 2 * mf.page);
        CHECKF(mem_resident_bytes(&mf, &part) <= 2 * mf.page, "%s: %llu bytes left after release",
               mem_read_method_name((mem_read_method)m),
               (unsigned long long)mem_resident_bytes(&mf, &part));
    }
    /* the data read through the mapping is the file's */
    bool same = true;
    for (uint64_t off = lo; off < hi; off += 4099) {
        same = same && ((const unsigned char *)base)[off] == (unsigned char)((off % 65536) * 131u + 7u);
    }
    CHECK(same);
    /* asynchronous prefetch: issued, then resident without touching */
    mem_release(&mf, &all);
    mem_prefetch_async(&mf, &part);
    uint64_t res = 0;
    for (int i = 0; i < 200 && res < part.bytes; i++) {
        usleep(5000);
        res = mem_resident_bytes(&mf, &part);
    }
    CHECKF(res >= part.bytes, "async prefetch left %llu of %llu bytes resident",
           (unsigned long long)res, (unsigned long long)part.bytes);
    /* a range outside the mapping is refused, naming the file */
    mem_span bad = {0};
    CHECK_OK(mem_span_add(&bad, FILE_BYTES - 10, FILE_BYTES + 10, &err), &err);
    CHECK(mem_prefetch(&mf, &bad, MEM_READ_DEFAULT, NULL, 0, NULL, &err) == LARES_EINVAL);
    CHECKF(strstr(err.msg, path) != NULL, "message: %s", err.msg);
    CHECK(mem_lock(&mf, &bad, &err) == LARES_EINVAL);
    /* locking within the limit works and shows as resident */
    mem_span small = {0};
    CHECK_OK(mem_span_add(&small, 0, 64 * 1024, &err), &err);
    if (mem_lock(&mf, &small, &err) == LARES_OK) {
        CHECK(!MLOCK_WORKS || mem_resident_bytes(&mf, &small) == 64 * 1024);
        mem_unlock(&mf, &small);
    } else {
        CHECKF(strstr(err.msg, "RLIMIT_MEMLOCK") != NULL, "message: %s", err.msg);
    }
    mem_span_free(&small);
    mem_span_free(&bad);
    mem_span_free(&all);
    mem_span_free(&part);
    munmap(base, FILE_BYTES);
    close(fd);
    unlink(path);
}

/* A lock beyond RLIMIT_MEMLOCK, in a child that cannot override the limit
 * (a root child gives up its privilege first), is refused with the limit in
 * the message; nothing stays locked. */
static void check_lock_refused(void) {
    if (!MLOCK_WORKS) {
        printf("mem: lock refusal not checked: this sanitizer build makes mlock a no-op\n");
        return;
    }
    const char *path = "test_mem.lock.bin";
    int fd = make_file(path);
    CHECK(fd >= 0);
    if (fd < 0) {
        return;
    }
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        struct rlimit rl = {.rlim_cur = 64 * 1024, .rlim_max = 64 * 1024};
        setrlimit(RLIMIT_MEMLOCK, &rl);
        if (geteuid() == 0) {
            const struct passwd *pw = getpwnam("nobody");
            if (pw == NULL || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
                _exit(3);
            }
        }
        void *base = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
        mem_file mf;
        mem_file_init(&mf, base, FILE_BYTES, fd, path);
        mem_span s = {0};
        lares_error err = {0};
        mem_span_add(&s, 0, 4u << 20, &err);
        const lares_status st = mem_lock(&mf, &s, &err);
        char out[LARES_ERROR_MSG_MAX + 8];
        snprintf(out, sizeof out, "%d %s", (int)st, err.msg);
        if (write(pipefd[1], out, strlen(out) + 1) < 0) {
            _exit(4);
        }
        _exit(0);
    }
    close(pipefd[1]);
    char got[LARES_ERROR_MSG_MAX + 8] = {0};
    ssize_t n = read(pipefd[0], got, sizeof got - 1);
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "lock child exited %d", status);
    CHECKF(n > 0 && atoi(got) == LARES_ENOMEM, "lock beyond the limit gave '%s'", got);
    CHECKF(strstr(got, "RLIMIT_MEMLOCK is 64 KiB") != NULL && strstr(got, path) != NULL &&
               strstr(got, "4096 KiB") != NULL,
           "message: %s", got);
    close(fd);
    unlink(path);
}

/* ---- limits from fake /proc and /sys trees ---- */

static void put(const char *dir, const char *rel, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    char *slash = strrchr(p, '/');
    for (char *c = p + strlen(dir) + 1; c < slash; c++) { /* mkdir -p */
        if (*c == '/') {
            *c = '\0';
            mkdir(p, 0700);
            *c = '/';
        }
    }
    *slash = '\0';
    mkdir(p, 0700);
    *slash = '/';
    FILE *f = fopen(p, "w");
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static mem_limit read_fake(const char *dir) {
    char cg[512], mi[512], me[512];
    snprintf(cg, sizeof cg, "%s/proc/cgroup", dir);
    snprintf(mi, sizeof mi, "%s/proc/mountinfo", dir);
    snprintf(me, sizeof me, "%s/proc/meminfo", dir);
    mem_limit_src src = {.proc_cgroup = cg, .proc_mountinfo = mi, .proc_meminfo = me,
                         .root = dir};
    mem_limit lim;
    mem_limit_read(&src, &lim);
    return lim;
}

static void check_limits(void) {
    char dir[] = "test_mem.limits.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *meminfo = "MemTotal:       24683624 kB\nMemFree:        20000000 kB\n"
                          "MemAvailable:   10000000 kB\n";
    /* v1, nested: the parent's limit is the tighter one */
    put(dir, "proc/cgroup", "12:pids:/\n4:memory:/work/job7\n0::/\n");
    put(dir, "proc/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "35 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "36 30 0:32 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n");
    put(dir, "proc/meminfo", meminfo);
    put(dir, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put(dir, "sys/fs/cgroup/memory/work/memory.limit_in_bytes", "3221225472\n");
    put(dir, "sys/fs/cgroup/memory/work/job7/memory.limit_in_bytes", "4294967296\n");
    /* the mount point in mountinfo is absolute: the fake root is prepended */
    mem_limit lim = read_fake(dir);
    CHECKF(lim.cgroup_version == 1 && lim.cgroup_bytes == 3221225472u,
           "v1: version %d, %llu bytes", lim.cgroup_version, (unsigned long long)lim.cgroup_bytes);
    CHECK(lim.available_bytes == 10000000ull * 1024 && lim.total_bytes == 24683624ull * 1024);
    CHECK(lim.auto_bytes == 3221225472u); /* below 80 % of MemAvailable */
    /* v1 without a limit: MemAvailable decides */
    put(dir, "sys/fs/cgroup/memory/work/memory.limit_in_bytes", "9223372036854771712\n");
    put(dir, "sys/fs/cgroup/memory/work/job7/memory.limit_in_bytes", "garbage\n");
    lim = read_fake(dir);
    CHECK(lim.cgroup_version == 0 && lim.cgroup_bytes == UINT64_MAX);
    CHECK(lim.auto_bytes == (uint64_t)(10000000ull * 1024 * MEM_AVAILABLE_SHARE));
    /* v2: memory.high tighter than memory.max, "max" above */
    put(dir, "proc/cgroup", "0::/user.slice/lares.scope\n");
    put(dir, "proc/mountinfo", "40 25 0:40 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n");
    put(dir, "sys/fs/cgroup/user.slice/memory.max", "max\n");
    put(dir, "sys/fs/cgroup/user.slice/lares.scope/memory.max", "2147483648\n");
    put(dir, "sys/fs/cgroup/user.slice/lares.scope/memory.high", "1610612736\n");
    lim = read_fake(dir);
    CHECKF(lim.cgroup_version == 2 && lim.cgroup_bytes == 1610612736u, "v2: version %d, %llu",
           lim.cgroup_version, (unsigned long long)lim.cgroup_bytes);
    /* a container: the mount's root is our own cgroup, so the path is the mount */
    put(dir, "proc/cgroup", "0::/docker/abc\n");
    put(dir, "proc/mountinfo",
        "50 25 0:50 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put(dir, "sys/fs/cgroup/memory.max", "1073741824\n");
    put(dir, "sys/fs/cgroup/memory.high", "max\n");
    lim = read_fake(dir);
    CHECKF(lim.cgroup_version == 2 && lim.cgroup_bytes == 1073741824u, "container: %llu",
           (unsigned long long)lim.cgroup_bytes);
    /* nothing readable: no limit, never a failure */
    mem_limit_src none = {.proc_cgroup = "/nonexistent/a", .proc_mountinfo = "/nonexistent/b",
                          .proc_meminfo = "/nonexistent/c", .root = ""};
    mem_limit_read(&none, &lim);
    CHECK(lim.cgroup_bytes == UINT64_MAX && lim.auto_bytes == UINT64_MAX &&
          lim.available_bytes == UINT64_MAX);
    /* this process: whatever it is, consistent */
    mem_limit_read(NULL, &lim);
    CHECK(lim.auto_bytes <= lim.cgroup_bytes);
    CHECK(lim.available_bytes == UINT64_MAX || lim.auto_bytes <= lim.available_bytes);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* The peak is never below the resident set (issue 21: /metrics showed it
 * lower, read from the kernel's lazily updated high-water mark). Memory is
 * touched in steps and each sample taken right after the growth. */
static void check_peak_covers_resident(void) {
    enum { STEP = 8 << 20, STEPS = 8 };
    unsigned char *p[STEPS] = {0};
    for (int i = 0; i < STEPS; i++) {
        p[i] = malloc(STEP);
        CHECK(p[i] != NULL);
        if (p[i] == NULL) {
            break;
        }
        memset(p[i], i + 1, STEP);
        mem_sample s;
        mem_sample_now(&s);
        CHECKF(s.rss_bytes > 0 && s.peak_rss_bytes >= s.rss_bytes,
               "step %d: peak %llu below resident %llu", i, (unsigned long long)s.peak_rss_bytes,
               (unsigned long long)s.rss_bytes);
    }
    for (int i = 0; i < STEPS; i++) {
        free(p[i]);
    }
}


/* ---- direct reads ---- */

static void check_layout_cases(void) {
    lares_error err = {0};
    mem_span s = {0};
    mem_layout l = {0};
    static const uint8_t buf[5 * 4096] = {0}; /* only addresses are compared */
    CHECK(mem_layout_of(&s, 3000, &l, &err) == LARES_EINVAL);
    CHECK(mem_layout_of(&s, 0, &l, &err) == LARES_EINVAL);
    CHECK_OK(mem_layout_of(&s, 4096, &l, &err), &err);
    CHECK(l.n == 0 && l.bytes == 0 && mem_layout_addr(&l, buf, 0, 1) == NULL);
    /* one ragged range inside a block */
    CHECK_OK(mem_span_add(&s, 100, 200, &err), &err);
    CHECK_OK(mem_layout_of(&s, 4096, &l, &err), &err);
    CHECK(l.n == 1 && l.x[0].lo == 0 && l.x[0].hi == 4096 && l.x[0].at == 0 && l.bytes == 4096);
    CHECK(mem_layout_addr(&l, buf, 100, 100) == buf + 100);
    /* two ranges whose rounded extents touch share one extent */
    mem_span_clear(&s);
    CHECK_OK(mem_span_add(&s, 5000, 9000, &err), &err);
    CHECK_OK(mem_span_add(&s, 9100, 12000, &err), &err);
    CHECK_OK(mem_layout_of(&s, 4096, &l, &err), &err);
    CHECK(l.n == 1 && l.x[0].lo == 4096 && l.x[0].hi == 12288 && l.bytes == 8192);
    CHECK(mem_layout_addr(&l, buf, 9100, 2900) == buf + (9100 - 4096));
    /* apart: back to back in the buffer, each byte at its offset modulo 4096 */
    mem_span_clear(&s);
    CHECK_OK(mem_span_add(&s, 0, 4096, &err), &err);
    CHECK_OK(mem_span_add(&s, 3 * 4096 + 1, 5 * 4096 - 7, &err), &err);
    CHECK_OK(mem_layout_of(&s, 4096, &l, &err), &err);
    CHECK(l.n == 2 && l.x[1].lo == 3 * 4096 && l.x[1].hi == 5 * 4096 && l.x[1].at == 4096);
    CHECK(l.bytes == 3 * 4096);
    CHECK(mem_layout_addr(&l, buf, 3 * 4096 + 1, 100) == buf + 4096 + 1);
    CHECK(mem_layout_addr(&l, buf, 4000, 200) == NULL);  /* runs out of the first extent */
    CHECK(mem_layout_addr(&l, buf, 5000, 1) == NULL);    /* in the gap */
    CHECK(mem_layout_addr(&l, buf, 5 * 4096, 1) == NULL); /* past the last */
    mem_layout_free(&l);
    mem_span_free(&s);
}

static uint64_t lcg(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

static void check_layout_random(void) {
    uint64_t seed = 42;
    lares_error err = {0};
    for (int round = 0; round < 300; round++) {
        const size_t align = (size_t)512 << (lcg(&seed) % 8); /* 512 B .. 64 KiB */
        mem_span s = {0};
        const int n = 1 + (int)(lcg(&seed) % 12);
        for (int i = 0; i < n; i++) {
            const uint64_t lo = lcg(&seed) % (8u << 20);
            CHECK_OK(mem_span_add(&s, lo, lo + 1 + lcg(&seed) % (1u << 20), &err), &err);
        }
        mem_layout l = {0};
        CHECK_OK(mem_layout_of(&s, align, &l, &err), &err);
        uint64_t sum = 0;
        bool ok = true;
        for (size_t i = 0; i < l.n; i++) {
            const mem_extent *x = &l.x[i];
            ok = ok && x->lo % align == 0 && x->hi % align == 0 && x->at % align == 0 &&
                 x->lo < x->hi && x->at == sum && (i == 0 || l.x[i - 1].hi < x->lo);
            sum += x->hi - x->lo;
        }
        CHECKF(ok && sum == l.bytes, "round %d: extents not aligned, ordered and back to back",
               round);
        CHECK(l.bytes <= s.bytes + 2 * align * s.n);
        uint8_t *base = malloc(l.bytes); /* never touched: only addresses are compared */
        CHECK(base != NULL);
        for (size_t i = 0; i < s.n && base != NULL; i++) {
            const uint64_t lo = s.r[i].lo, len = s.r[i].hi - s.r[i].lo;
            const uint8_t *at = mem_layout_addr(&l, base, lo, len);
            CHECKF(at != NULL && (uint64_t)(at - base) % align == lo % align &&
                       (uint64_t)(at - base) + len <= l.bytes,
                   "round %d: range [%llu, +%llu) not placed", round, (unsigned long long)lo,
                   (unsigned long long)len);
        }
        free(base);
        mem_layout_free(&l);
        mem_span_free(&s);
    }
}

/* the byte at offset i of the direct-read test file */
static uint8_t direct_byte(uint64_t i) {
    return (uint8_t)((i * 2654435761u) >> 13);
}

#define DIRECT_FILE_BYTES ((9u << 20) + 1234) /* ragged: the last block is partial */

static bool equal_to_file(const mem_span *s, const mem_layout *l, const uint8_t *buf) {
    for (size_t i = 0; i < s->n; i++) {
        const uint8_t *at = mem_layout_addr(l, buf, s->r[i].lo, s->r[i].hi - s->r[i].lo);
        if (at == NULL) {
            return false;
        }
        for (uint64_t o = s->r[i].lo; o < s->r[i].hi; o++) {
            if (at[o - s->r[i].lo] != direct_byte(o)) {
                return false;
            }
        }
    }
    return true;
}

/* Reads in flight while the caller goes on (mem_direct_submit): several
 * tickets finished out of order, one layout gathered from three, more
 * tickets than stay unfinished, and (threads engine) a failing read. */
static void check_direct_async(mem_direct *d, const char *path) {
    lares_error err = {0};
    mem_span s[3] = {{0}};
    CHECK_OK(mem_span_add(&s[0], 100, 5000, &err), &err);
    CHECK_OK(mem_span_add(&s[0], 9000, 70000, &err), &err);
    CHECK_OK(mem_span_add(&s[1], (2u << 20) + 5, (2u << 20) + 300000, &err), &err);
    CHECK_OK(mem_span_add(&s[2], DIRECT_FILE_BYTES - 300, DIRECT_FILE_BYTES, &err), &err);
    mem_layout l[3] = {{0}}, g = {0};
    uint64_t at = 0;
    for (int i = 2; i >= 0; i--) { /* appended last first: the gathered one sorts them */
        CHECK_OK(mem_layout_of(&s[i], MEM_DIRECT_ALIGN, &l[i], &err), &err);
        CHECK_OK(mem_layout_append(&g, &l[i], at, &err), &err);
        at += l[i].bytes;
    }
    CHECK(g.bytes == at && g.align == MEM_DIRECT_ALIGN && g.n == l[0].n + l[1].n + l[2].n);
    bool sorted = true;
    for (size_t i = 1; i < g.n; i++) {
        sorted = sorted && g.x[i - 1].lo < g.x[i].lo;
    }
    CHECK(sorted);
    mem_layout odd = {.align = 8192};
    CHECK(mem_layout_append(&odd, &l[0], 0, &err) == LARES_OK && odd.align == MEM_DIRECT_ALIGN);
    odd.align = 8192;
    CHECK(mem_layout_append(&odd, &l[0], 0, &err) == LARES_EINVAL);
    mem_layout_free(&odd);
    uint8_t *big = mem_buffer_reserve(g.bytes), *one[3];
    CHECK(big != NULL && (uintptr_t)big % MEM_DIRECT_ALIGN == 0);
    for (int i = 0; i < 3; i++) {
        one[i] = mem_buffer_map(l[i].bytes);
        CHECK(one[i] != NULL);
    }
    if (big == NULL || one[0] == NULL || one[1] == NULL || one[2] == NULL) {
        return;
    }
    memset(big, 0xa5, g.bytes);
    uint64_t t[4];
    CHECK_OK(mem_direct_submit(d, &g, big, &t[3], &err), &err);
    for (int i = 0; i < 3; i++) {
        memset(one[i], 0xa5, l[i].bytes);
        CHECK_OK(mem_direct_submit(d, &l[i], one[i], &t[i], &err), &err);
    }
    const int order[4] = {2, 3, 0, 1};
    for (int k = 0; k < 4; k++) {
        CHECK_OK(mem_direct_finish(d, t[order[k]], &err), &err);
    }
    CHECK_OK(mem_direct_finish(d, 0, &err), &err); /* ticket 0: done */
    bool same = true;
    for (int i = 0; i < 3; i++) {
        same = same && equal_to_file(&s[i], &l[i], one[i]) && equal_to_file(&s[i], &g, big);
    }
    CHECKF(same, "%s: bytes of reads in flight differ from the file",
           mem_direct_engine_name(mem_direct_engine_of(d)));
    /* more tickets than stay unfinished: the oldest are waited for. Every
     * one is finished before its buffer goes (tickets finish in any order:
     * the last one done says nothing of the others) */
    uint64_t many[70];
    for (int k = 0; k < 70; k++) {
        CHECK_OK(mem_direct_submit(d, &l[k % 3], one[k % 3], &many[k], &err), &err);
    }
    for (int k = 69; k >= 0; k--) {
        CHECK_OK(mem_direct_finish(d, many[k], &err), &err);
    }
    CHECK(equal_to_file(&s[0], &l[0], one[0]) && equal_to_file(&s[1], &l[1], one[1]));
    if (mem_direct_engine_of(d) == MEM_DIRECT_THREADS) { /* read on submit, through the gate */
        lares_read_fail_after(1, LARES_READ_FAULT_EIO);
        CHECK(mem_direct_submit(d, &g, big, &t[0], &err) == LARES_EIO && strstr(err.msg, path));
        lares_read_fail_after(0, LARES_READ_FAULT_EIO);
    }
    /* a buffer off the block is refused */
    CHECK(mem_direct_submit(d, &l[0], one[0] + 512, &t[0], &err) == LARES_EINVAL);
    /* trimmed pages read as zeros again */
    mem_buffer_trim(big, g.bytes);
    bool zeros = true;
    for (uint64_t i = 0; i < g.bytes; i += 997) {
        zeros = zeros && big[i] == 0;
    }
    CHECK(zeros);
    mem_buffer_unmap(big, g.bytes);
    for (int i = 0; i < 3; i++) {
        mem_buffer_unmap(one[i], l[i].bytes);
        mem_layout_free(&l[i]);
        mem_span_free(&s[i]);
    }
    mem_layout_free(&g);
}

static void check_direct(void) {
    const char *path = "test_mem.direct.bin";
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECKF(fd >= 0, "cannot write %s", path);
    if (fd < 0) {
        return;
    }
    uint8_t *data = malloc(DIRECT_FILE_BYTES);
    for (uint64_t i = 0; data != NULL && i < DIRECT_FILE_BYTES; i++) {
        data[i] = direct_byte(i);
    }
    CHECK(data != NULL && write(fd, data, DIRECT_FILE_BYTES) == (ssize_t)DIRECT_FILE_BYTES);
    free(data);
    close(fd);
    lares_error err = {0};
    /* ragged ranges: inside a block, across several 4 MiB requests, up to the end */
    mem_span s = {0};
    CHECK_OK(mem_span_add(&s, 100, 5000, &err), &err);
    CHECK_OK(mem_span_add(&s, 3 * 4096 + 17, 3 * 4096 + 17 + (9u << 19) + 5, &err), &err);
    CHECK_OK(mem_span_add(&s, DIRECT_FILE_BYTES - 300, DIRECT_FILE_BYTES, &err), &err);
    mem_layout l = {0};
    CHECK_OK(mem_layout_of(&s, MEM_DIRECT_ALIGN, &l, &err), &err);
    uint8_t *buf = mem_buffer_map(l.bytes);
    CHECK(buf != NULL && (uintptr_t)buf % MEM_DIRECT_ALIGN == 0);
    CHECK(strcmp(mem_direct_engine_name(MEM_DIRECT_URING), "io_uring") == 0 &&
          strcmp(mem_direct_engine_name(MEM_DIRECT_COUNT), "?") == 0);
    mem_direct *d = NULL;
    CHECK(mem_direct_open(path, MEM_DIRECT_COUNT, &d, &err) == LARES_EINVAL && d == NULL);
    CHECK(mem_direct_open("test_mem.no-such-file", MEM_DIRECT_AUTO, &d, &err) ==
              LARES_EUNSUPPORTED &&
          strstr(err.msg, "no-such-file") != NULL);
    /* a file system that takes the flag and refuses the reads: the open's one read fails */
    lares_read_fail_after(1, LARES_READ_FAULT_EIO);
    CHECK(mem_direct_open(path, MEM_DIRECT_THREADS, &d, &err) == LARES_EUNSUPPORTED && d == NULL &&
          strstr(err.msg, "a first read failed") != NULL);
    lares_read_fail_after(0, LARES_READ_FAULT_EIO);
    for (int e = MEM_DIRECT_AUTO; e < MEM_DIRECT_COUNT && buf != NULL; e++) {
        lares_status st = mem_direct_open(path, (mem_direct_engine)e, &d, &err);
        if (st == LARES_EUNSUPPORTED && e == MEM_DIRECT_URING) {
            fprintf(stderr, "test_mem: no io_uring here: %s\n", err.msg);
            continue;
        }
        CHECK_OK(st, &err); /* the build directory is on a file system with direct I/O */
        if (st != LARES_OK) {
            continue;
        }
        CHECK(e == MEM_DIRECT_AUTO || mem_direct_engine_of(d) == (mem_direct_engine)e);
        memset(buf, 0xa5, l.bytes);
        mem_io io = {0};
        CHECK_OK(mem_direct_read(d, &l, buf, &io, &err), &err);
        CHECKF(equal_to_file(&s, &l, buf), "%s: bytes differ from the file",
               mem_direct_engine_name(mem_direct_engine_of(d)));
        CHECK(io.bytes == l.bytes);
        /* past the end of the file: zeros */
        const uint8_t *end = mem_layout_addr(&l, buf, DIRECT_FILE_BYTES - 1, 1) + 1;
        bool zeros = true;
        for (const uint8_t *p = end; p < buf + l.bytes; p++) {
            zeros = zeros && *p == 0;
        }
        CHECK(zeros && end < buf + l.bytes);
        /* a buffer off the block is refused */
        CHECK(mem_direct_read(d, &l, buf + 512, NULL, &err) == LARES_EINVAL);
        if (mem_direct_engine_of(d) == MEM_DIRECT_THREADS) {
            /* the fallback engine reads through the fault gate: a short read is
             * resumed, a failed one reported naming the file */
            memset(buf, 0xa5, l.bytes);
            lares_read_fail_after(2, LARES_READ_FAULT_SHORT);
            CHECK_OK(mem_direct_read(d, &l, buf, NULL, &err), &err);
            CHECK(equal_to_file(&s, &l, buf));
            lares_read_fail_after(3, LARES_READ_FAULT_EIO);
            CHECK(mem_direct_read(d, &l, buf, NULL, &err) == LARES_EIO &&
                  strstr(err.msg, path) != NULL);
            lares_read_fail_after(0, LARES_READ_FAULT_EIO);
        }
        check_direct_async(d, path);
        mem_direct_close(d);
        d = NULL;
    }
    mem_buffer_unmap(buf, l.bytes);
    mem_layout_free(&l);
    mem_span_free(&s);
    unlink(path);
}

int main(void) {
    check_peak_covers_resident();
    check_span_cases();
    check_span_random();
    check_layers();
    check_experts();
    check_advice();
    check_lock_refused();
    check_limits();
    check_layout_cases();
    check_layout_random();
    check_direct();
    return check_finish("mem");
}
