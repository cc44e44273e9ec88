/*
 * bench_mem_read: how fast each way of bringing a mapped file into memory
 * reads from disk, cold. For each method the file's pages are dropped from
 * the page cache (posix_fadvise DONTNEED; run as the only user of the file),
 * then the file is read unit by unit (a "layer" of --unit bytes) through
 * mem_prefetch, optionally releasing each unit after it was read (what
 * streaming does), and the wall time, the bytes the kernel read
 * (/proc/self/io) and the major faults are printed. This is what chose
 * MEM_READ_DEFAULT (docs/memory.md).
 *
 *   ninja -C build bench_mem_read
 *   build/bench/bench_mem_read FILE [--unit 32M] [--release] [--passes N] [--chunk 2M]
 *                              [--repeat 3] [--method NAME] [--fadvise-sequential]
 * With --release and --passes N the file is read N times over one mapping, as
 * streaming re-reads its layers every token. The methods "direct-io_uring"
 * and "direct-threads" read each unit with mem_direct_read into one reused
 * buffer instead (what --stream-io direct does), past the page cache.
 */
#include "mem/mem.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1048576; break;
    case 'g': case 'G': v *= 1073741824; break;
    default: break;
    }
    return (uint64_t)v;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [--unit SIZE] [--release] [--chunk SIZE] [--repeat N] "
                        "[--method NAME]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    uint64_t unit = 32u << 20, chunk = 0;
    bool release = false, seq = false;
    int repeat = 3, passes = 1;
    const char *only = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--unit") == 0 && i + 1 < argc) {
            unit = parse_size(argv[++i]);
        } else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
            chunk = parse_size(argv[++i]);
        } else if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
            passes = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--method") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--fadvise-sequential") == 0) {
            seq = true; /* doubles the file's read-ahead window */
        } else if (strcmp(argv[i], "--release") == 0) {
            release = true;
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size == 0) {
        perror(path);
        return 1;
    }
    const uint64_t bytes = (uint64_t)sb.st_size;
    if (seq) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    void *base = mmap(NULL, (size_t)bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    mem_file mf;
    mem_file_init(&mf, base, bytes, fd, path);
    if (chunk != 0) {
        mf.ra_chunk = (size_t)chunk;
    }
    printf("file %s: %.1f MiB, unit %.1f MiB, WILLNEED chunk %.1f MiB, release %s\n", path,
           bytes / 1048576.0, unit / 1048576.0, mf.ra_chunk / 1048576.0, release ? "yes" : "no");
    printf("%-18s %8s %10s %10s %8s\n", "method", "GB/s", "read MiB", "majflt", "wall s");
    void *scratch = malloc(4u << 20);
    mem_span all = {0};
    lares_error err = {0};
    mem_span_add(&all, 0, bytes, &err);
    for (int r = 0; r < repeat; r++) {
        for (int m = 1; m < MEM_READ_COUNT; m++) {
            if (only != NULL && strcmp(only, mem_read_method_name((mem_read_method)m)) != 0) {
                continue;
            }
            munmap(base, (size_t)bytes); /* a fresh mapping: no page tables left */
            base = mmap(NULL, (size_t)bytes, PROT_READ, MAP_SHARED, fd, 0);
            mem_file_init(&mf, base, bytes, fd, path);
            if (chunk != 0) {
                mf.ra_chunk = (size_t)chunk;
            }
            mem_release(&mf, &all);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            mem_sample s0, s1;
            mem_sample_now(&s0);
            const uint64_t t0 = lares_now_ns();
            for (int p = 0; p < passes; p++) {
                for (uint64_t off = 0; off < bytes; off += unit) {
                    mem_span u = {0};
                    mem_span_add(&u, off, LARES_MIN(off + unit, bytes), &err);
                    mem_prefetch(&mf, &u, (mem_read_method)m, scratch, 4u << 20, NULL, &err);
                    if (release) {
                        mem_release(&mf, &u);
                    }
                    mem_span_free(&u);
                }
            }
            const double s = (double)(lares_now_ns() - t0) / 1e9;
            mem_sample_now(&s1);
            printf("%-18s %8.2f %10.1f %10llu %8.2f\n", mem_read_method_name((mem_read_method)m),
                   (double)bytes * passes / s / 1e9,
                   s1.read_bytes >= 0 ? (double)(s1.read_bytes - s0.read_bytes) / 1048576.0 : -1,
                   (unsigned long long)(s1.major_faults - s0.major_faults), s);
        }
        for (int e = MEM_DIRECT_URING; e <= MEM_DIRECT_THREADS; e++) {
            char name[32];
            snprintf(name, sizeof name, "direct-%s", mem_direct_engine_name((mem_direct_engine)e));
            mem_direct *d = NULL;
            if ((only != NULL && strcmp(only, name) != 0) ||
                mem_direct_open(path, (mem_direct_engine)e, &d, &err) != LARES_OK) {
                continue;
            }
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            const size_t cap = (size_t)unit + 2 * MEM_DIRECT_ALIGN;
            void *buf = mem_buffer_map(cap);
            mem_sample s0, s1;
            mem_sample_now(&s0);
            const uint64_t t0 = lares_now_ns();
            for (int p = 0; p < passes && buf != NULL; p++) {
                for (uint64_t off = 0; off < bytes; off += unit) {
                    mem_span u = {0};
                    mem_layout l = {0};
                    mem_span_add(&u, off, LARES_MIN(off + unit, bytes), &err);
                    if (mem_layout_of(&u, MEM_DIRECT_ALIGN, &l, &err) == LARES_OK &&
                        mem_direct_read(d, &l, buf, NULL, &err) != LARES_OK) {
                        fprintf(stderr, "%s\n", err.msg);
                    }
                    mem_layout_free(&l);
                    mem_span_free(&u);
                }
            }
            const double s = (double)(lares_now_ns() - t0) / 1e9;
            mem_sample_now(&s1);
            printf("%-18s %8.2f %10.1f %10llu %8.2f\n", name, (double)bytes * passes / s / 1e9,
                   s1.read_bytes >= 0 ? (double)(s1.read_bytes - s0.read_bytes) / 1048576.0 : -1,
                   (unsigned long long)(s1.major_faults - s0.major_faults), s);
            mem_buffer_unmap(buf, cap);
            mem_direct_close(d);
        }
    }
    mem_span_free(&all);
    free(scratch);
    munmap(base, (size_t)bytes);
    close(fd);
    return 0;
}
