/*
 * api/score: the statistics of perplexity and KL divergence against values
 * worked out by hand, and the KL-divergence base file: a round trip, then
 * truncated, corrupted and hostile files refused with a message naming the
 * fault (issue 14).
 */
#include "api/score.h"
#include "check.h"

#include <unistd.h>

#define NEAR(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol))

static void test_acc(void) {
    score_acc a = {0};
    CHECK(score_acc_mean(&a) == 0 && score_acc_err(&a) == 0);
    score_acc_add(&a, 1);
    CHECK(score_acc_err(&a) == 0); /* one value: no spread known */
    score_acc_add(&a, 2);
    score_acc_add(&a, 3);
    score_acc_add(&a, 4);
    /* mean 2.5; E[x^2] - E[x]^2 = 7.5 - 6.25 = 1.25; sqrt(1.25 / 3) */
    CHECK(NEAR(score_acc_mean(&a), 2.5, 1e-12));
    CHECKF(NEAR(score_acc_err(&a), 0.6454972243679028, 1e-12), "%.17g", score_acc_err(&a));
    score_acc c = {0};
    for (int i = 0; i < 5; i++) {
        score_acc_add(&c, 0.7);
    }
    CHECK(score_acc_err(&c) == 0); /* equal values: rounding never gives a negative variance */
}

static void test_log_softmax(void) {
    /* p = 1/4, 3/4 from logits 0, ln 3; shifted by 1000 to need the max trick */
    const float logits[2] = {1000.0f, 1000.0f + 1.0986122886681098f};
    float lp[2];
    CHECK(score_log_softmax(logits, 2, lp) == 1);
    /* float logits near 1000 are 6e-5 apart: that, not the sum, bounds the error */
    CHECKF(NEAR(lp[0], log(0.25), 1e-4) && NEAR(lp[1], log(0.75), 1e-4), "%g %g", lp[0], lp[1]);
    const float small[2] = {0.0f, 1.0986122886681098f};
    score_log_softmax(small, 2, lp);
    CHECKF(NEAR(lp[0], log(0.25), 1e-6) && NEAR(lp[1], log(0.75), 1e-6), "%g %g", lp[0], lp[1]);
    /* in place, ties to the first */
    float v[4] = {2, 5, 5, -1};
    CHECK(score_log_softmax(v, 4, v) == 1);
    double sum = 0;
    for (int i = 0; i < 4; i++) {
        CHECK(v[i] <= 0);
        sum += exp(v[i]);
    }
    CHECKF(NEAR(sum, 1, 1e-6), "%g", sum);
    CHECK(NEAR(v[1] - v[0], 3, 1e-5));
}

static void test_kld(void) {
    /* base p = 1/2, 1/2; q = 1/4, 3/4: KL = 0.5 ln 2 + 0.5 ln(2/3) = 0.5 ln(4/3) */
    const float base[2] = {(float)log(0.5), (float)log(0.5)};
    const float q[2] = {(float)log(0.25), (float)log(0.75)};
    score_kld_row r;
    score_kld(base, q, 2, 1, &r);
    CHECKF(NEAR(r.kld, 0.5 * log(4.0 / 3.0), 1e-6), "%.9g", r.kld);
    CHECK(!r.same_top); /* the base's tie goes to token 0, q's top is 1 */
    CHECK(NEAR(r.dp, 0.25, 1e-6));
    CHECK(NEAR(r.base_nll, log(2.0), 1e-6));
    score_kld(q, q, 2, 0, &r);
    CHECK(r.kld == 0 && r.same_top && r.dp == 0);
    /* KL is not symmetric: KL(q || base) = 0.25 ln(1/2) + 0.75 ln(3/2) */
    score_kld(q, base, 2, 0, &r);
    CHECKF(NEAR(r.kld, 0.25 * log(0.5) + 0.75 * log(1.5), 1e-6), "%.9g", r.kld);
}

static void test_quantile(void) {
    const float v[5] = {1, 2, 3, 4, 5};
    CHECK(score_quantile(v, 5, 0.5) == 3);
    CHECK(score_quantile(v, 5, 0.25) == 2);
    CHECK(NEAR(score_quantile(v, 5, 0.1), 1.4, 1e-9));
    CHECK(score_quantile(v, 5, 0) == 1 && score_quantile(v, 5, 1) == 5);
    CHECK(score_quantile(v, 1, 0.5) == 1);
    CHECK(score_quantile(v, 0, 0.5) == 0);
}

/* ---- the base file ---- */

#define NV   7
#define NCTX 8
#define NCH  2
#define NSC  3 /* NCTX - 1 - NCTX / 2 */

static char path[256];

static void write_good(void) {
    int32_t tok[NCTX * NCH];
    for (int i = 0; i < NCTX * NCH; i++) {
        tok[i] = (i * 5 + 1) % NV;
    }
    float rows[NSC * NV];
    lares_error err;
    kld_base *b = NULL;
    CHECK_OK(kld_base_create(path, NV, NCTX, NCH, tok, &b, &err), &err);
    if (b == NULL) {
        return;
    }
    for (int k = 0; k < NCH; k++) {
        for (int i = 0; i < NSC * NV; i++) {
            rows[i] = -(float)(k * 100 + i) / 8;
        }
        CHECK_OK(kld_base_write_chunk(b, rows, &err), &err);
    }
    CHECK(kld_base_write_chunk(b, rows, &err) == LARES_EINVAL); /* one chunk too many */
    CHECK_OK(kld_base_finish(b, path, &err), &err);
    kld_base_free(b);
}

static long file_size(void) {
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void patch(long off, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    fseek(f, off, SEEK_SET);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

/* opens and reads every chunk; the status of the first failure */
static lares_status read_all(lares_error *err) {
    kld_base *b = NULL;
    lares_status st = kld_base_open(path, &b, err);
    float rows[NSC * NV];
    for (uint32_t k = 0; st == LARES_OK && k < b->n_chunks; k++) {
        st = kld_base_read_chunk(b, rows, err);
    }
    kld_base_free(b);
    return st;
}

static void test_file(void) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/lares_test_score_%d.kld", dir && *dir ? dir : "/tmp",
             (int)getpid());
    lares_error err;
    write_good();
    const long want = 40 + 4 * NCTX * NCH + 8 + NCH * (NSC * NV * 4 + 8);
    CHECKF(file_size() == want, "%ld bytes, %ld expected", file_size(), want);

    kld_base *b = NULL;
    CHECK_OK(kld_base_open(path, &b, &err), &err);
    if (b != NULL) {
        CHECK(b->n_vocab == NV && b->n_ctx == NCTX && b->n_chunks == NCH && b->n_scored == NSC);
        CHECK(b->tokens[0] == 1 && b->tokens[3] == 16 % NV);
        float rows[NSC * NV];
        for (int k = 0; k < NCH; k++) {
            CHECK_OK(kld_base_read_chunk(b, rows, &err), &err);
            CHECK(rows[0] == -(float)(k * 100) / 8 &&
                  rows[NSC * NV - 1] == -(float)(k * 100 + NSC * NV - 1) / 8);
        }
        CHECK(kld_base_read_chunk(b, rows, &err) == LARES_EINVAL);
        kld_base_free(b);
    }

    /* every allocation of the writer and the reader failing in turn: an error, nothing
     * leaked (the bytes in use come back), never a crash */
    const size_t in_use = lares_mem_in_use();
    for (long k = 1; k <= 4; k++) {
        lares_alloc_fail_after(k);
        lares_status st = kld_base_open(path, &b, &err);
        lares_alloc_fail_after(0);
        CHECKF(st == LARES_OK || (st == LARES_ENOMEM && strstr(err.msg, "memory")), "%d: %s", st,
               err.msg);
        if (st == LARES_OK) {
            kld_base_free(b);
        }
        int32_t tok[NCTX * NCH] = {0};
        char other[300];
        snprintf(other, sizeof other, "%s.alloc", path);
        lares_alloc_fail_after(k);
        st = kld_base_create(other, NV, NCTX, NCH, tok, &b, &err);
        lares_alloc_fail_after(0);
        CHECK(st == LARES_OK || st == LARES_ENOMEM);
        if (st == LARES_OK) {
            kld_base_finish(b, other, NULL);
            kld_base_free(b);
        }
        CHECKF(lares_mem_in_use() == in_use, "after failing allocation %ld: %zu bytes, %zu before",
               k, lares_mem_in_use(), in_use);
        char part[320];
        snprintf(part, sizeof part, "%s.part", other);
        CHECK(access(other, F_OK) != 0 && access(part, F_OK) != 0); /* incomplete: removed */
    }
    /* truncated: refused at open, before any row is read */
    CHECK(truncate(path, want - 1) == 0);
    CHECK(kld_base_open(path, &b, &err) == LARES_EFORMAT && strstr(err.msg, "truncated"));
    /* a byte of a row flipped: that chunk's checksum */
    write_good();
    patch(want - 20, "\x11", 1);
    CHECKF(read_all(&err) == LARES_EFORMAT && strstr(err.msg, "chunk 2 checksum"), "%s", err.msg);
    /* ... and found by the check before any work, which leaves a good file where it was */
    b = NULL;
    CHECK_OK(kld_base_open(path, &b, &err), &err);
    if (b != NULL) {
        CHECK(kld_base_verify(b, &err) == LARES_EFORMAT && strstr(err.msg, "chunk 2 checksum"));
        kld_base_free(b);
    }
    write_good();
    CHECK_OK(kld_base_open(path, &b, &err), &err);
    if (b != NULL) {
        float rows[NSC * NV];
        CHECK_OK(kld_base_verify(b, &err), &err);
        CHECK_OK(kld_base_read_chunk(b, rows, &err), &err);
        CHECK(rows[1] == -1.0f / 8);
        kld_base_free(b);
    }
    /* a token flipped inside the vocabulary: the header checksum */
    write_good();
    patch(40, "\x02", 1);
    CHECKF(read_all(&err) == LARES_EFORMAT && strstr(err.msg, "header checksum"), "%s", err.msg);
    /* a token outside the vocabulary */
    write_good();
    patch(44, "\xff\x00\x00\x00", 4);
    CHECKF(read_all(&err) == LARES_EFORMAT && strstr(err.msg, "outside the vocabulary"), "%s",
           err.msg);
    /* a positive "log-probability" (the checksum would catch it too; the value is named first) */
    write_good();
    patch(40 + 4 * NCTX * NCH + 8, "\x00\x00\x80\x3f", 4); /* 1.0f */
    CHECKF(read_all(&err) == LARES_EFORMAT && strstr(err.msg, "not a log-probability"), "%s",
           err.msg);
    /* magic, version, a header whose counts disagree */
    write_good();
    patch(0, "GGUF", 4);
    CHECK(read_all(&err) == LARES_EFORMAT && strstr(err.msg, "magic"));
    write_good();
    patch(8, "\x09", 1);
    CHECK(read_all(&err) == LARES_EUNSUPPORTED && strstr(err.msg, "version 9"));
    write_good();
    patch(24, "\x04", 1); /* n_scored 4 with a context of 8 */
    CHECK(read_all(&err) == LARES_EFORMAT && strstr(err.msg, "scored"));
    write_good();
    patch(12, "\xff\xff\xff\x7f", 4); /* a huge vocabulary */
    CHECK(read_all(&err) == LARES_EFORMAT && strstr(err.msg, "out of range"));
    /* a file shorter than the header, and none at all */
    CHECK(truncate(path, 10) == 0);
    CHECK(read_all(&err) == LARES_EFORMAT && strstr(err.msg, "too short"));
    unlink(path);
    CHECK(read_all(&err) == LARES_ENOTFOUND);

    /* a writer closed before every chunk: an error, no file, no part file */
    int32_t tok[NCTX * NCH] = {0};
    CHECK_OK(kld_base_create(path, NV, NCTX, NCH, tok, &b, &err), &err);
    if (b != NULL) {
        CHECK(kld_base_finish(b, path, &err) == LARES_EINVAL && strstr(err.msg, "0 of 2"));
        kld_base_free(b);
    }
    char part[300];
    snprintf(part, sizeof part, "%s.part", path);
    CHECK(access(path, F_OK) != 0 && access(part, F_OK) != 0);
}

int main(void) {
    test_acc();
    test_log_softmax();
    test_kld();
    test_quantile();
    test_file();
    return check_finish("test_score");
}
