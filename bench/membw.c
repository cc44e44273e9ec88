/*
 * membw: memory read bandwidth of this machine (not a test), the yardstick
 * of generation speed: each thread sums its share of a buffer far larger
 * than the caches, again and again; the figure is the best pass.
 *
 *   membw [--threads N] [--mib SIZE] [--reps R]     defaults: all cores, 1024 MiB, 5
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} job;

/* four independent accumulators keep several loads in flight; the compiler
 * vectorises the loop with the widest loads the target allows */
static void *reader(void *arg) {
    job *j = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        a += j->p[i];
        b += j->p[i + 1];
        c += j->p[i + 2];
        d += j->p[i + 3];
    }
    j->sum = a + b + c + d;
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 5;
    size_t mib = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--mib") == 0) {
            mib = (size_t)atol(argv[i + 1]);
        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);
        }
    }
    if (threads < 1 || threads > 256 || mib < 64 || reps < 1) {
        fprintf(stderr, "usage: membw [--threads N] [--mib SIZE>=64] [--reps R]\n");
        return 2;
    }
    const size_t n = mib * 1024 * 1024 / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof *buf);
    if (buf == NULL) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        buf[i] = i * 2654435761u;
    }
    double best = 0;
    uint64_t check = 0;
    for (int r = 0; r < reps; r++) {
        pthread_t th[256];
        job jobs[256];
        const double t0 = now();
        for (int t = 0; t < threads; t++) {
            size_t lo = n / (size_t)threads * (size_t)t;
            size_t hi = t + 1 == threads ? n : n / (size_t)threads * (size_t)(t + 1);
            jobs[t] = (job){.p = buf + lo, .n = hi - lo};
            pthread_create(&th[t], NULL, reader, &jobs[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            check += jobs[t].sum;
        }
        const double gbs = (double)(n * sizeof *buf) / (now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    printf("{\"threads\": %d, \"mib\": %zu, \"read_gb_s\": %.2f, \"check\": %llu}\n", threads, mib,
           best, (unsigned long long)(check & 0xff));
    free(buf);
    return 0;
}
