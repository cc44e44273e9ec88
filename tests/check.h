/*
 * A small test harness: CHECK records a failure and goes on; a test program
 * returns check_finish(), non-zero when anything failed. Fixtures come from
 * LARES_MODELS_DIR (set by CMake); a missing fixture is a failure that says
 * where it looked, never a silent pass.
 */
#ifndef LARES_TEST_CHECK_H
#define LARES_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
        }                                                                                          \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* a status call that must succeed; prints the library's message otherwise */
#define CHECK_OK(expr, errp)                                                                       \
    do {                                                                                           \
        check_count++;                                                                             \
        int st_ = (int)(expr);                                                                     \
        if (st_ != 0) {                                                                            \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: %s failed (%d): %s\n", __FILE__, __LINE__, #expr, st_,       \
                    (errp)->msg);                                                                  \
        }                                                                                          \
    } while (0)

static inline int check_finish(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures, check_count);
        return 1;
    }
    printf("%s: %d checks passed\n", name, check_count);
    return 0;
}

#ifndef LARES_MODELS_DIR
#define LARES_MODELS_DIR "../shared/models"
#endif

/* Path of a fixture under the models directory (env LARES_MODELS_DIR wins).
 * Returns a static buffer; aborts the test with a message when missing. */
static inline const char *fixture(const char *rel) {
    static char buf[8][1024];
    static int slot;
    const char *dir = getenv("LARES_MODELS_DIR");
    if (dir == NULL || dir[0] == '\0') {
        dir = LARES_MODELS_DIR;
    }
    char *p = buf[slot++ % 8];
    snprintf(p, 1024, "%s/%s", dir, rel);
    FILE *f = fopen(p, "rb");
    if (f == NULL) {
        fprintf(stderr, "fixture missing: %s (looked in %s; set LARES_MODELS_DIR)\n", rel, dir);
        exit(1);
    }
    fclose(f);
    return p;
}

/* Reads a whole file into a malloc'd buffer (tests only). */
static inline char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b != NULL && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b != NULL) {
        b[n] = '\0';
        *len = (size_t)n;
    }
    fclose(f);
    return b;
}

#endif
