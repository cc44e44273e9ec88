/*
 * Fault injection (SQLite's way): the n-th allocation, or the n-th read of a
 * file or socket, fails, for every n a path takes, across opening a GGUF file,
 * loading a model, creating a session and generating, reading a ring's key and
 * ring.json, a ring hello and a server request. Every failure must end in a
 * clean error (a status and a message), nothing may leak (ASan), nothing may
 * crash; and a model file that shrinks while mapped must fail the next
 * evaluation with LARES_EIO instead of killing the process with SIGBUS.
 *
 * The sweeps size themselves by counting what a clean run does, so they grow
 * with the code instead of going stale; each run is a tiny model, so the
 * whole program takes seconds optimised and well under a minute under ASan.
 */
#include "check.h"
#include "cluster/cluster.h"
#include "cluster_harness.h"
#include "core/core.h"
#include "gguf/gguf.h"
#include "lares.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef LARES_TEST_SERVER
#include "server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#endif

static char tmp_dir[256];

static void tmp_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmp_dir, name);
}

static bool copy_file(const char *from, const char *to) {
    size_t n;
    char *buf = slurp(from, &n);
    if (buf == NULL) {
        return false;
    }
    FILE *f = fopen(to, "wb");
    bool ok = f != NULL && fwrite(buf, 1, n, f) == n;
    ok = f != NULL && fclose(f) == 0 && ok;
    free(buf);
    return ok;
}

/* ---- the read gate itself ---- */

static void test_read_gate(void) {
    char path[300];
    tmp_path(path, sizeof path, "gate.txt");
    FILE *w = fopen(path, "wb");
    CHECK(w != NULL && fputs("0123456789abcdef", w) >= 0 && fclose(w) == 0);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    char buf[32];
    lares_read_fail_after(2, LARES_READ_FAULT_EIO);
    CHECK(lares_read(fd, buf, 4) == 4); /* the first read is not the second */
    errno = 0;
    CHECK(lares_read(fd, buf, 4) == -1 && errno == EIO);
    CHECK(lares_read(fd, buf, 4) == 4); /* one fault, then reads work again */
    lares_read_fail_after(1, LARES_READ_FAULT_SHORT);
    CHECK(lares_pread(fd, buf, 10, 0) == 5 && memcmp(buf, "01234", 5) == 0);
    CHECK(lares_pread(fd, buf, 10, 0) == 10);
    close(fd);

    FILE *f = fopen(path, "rb");
    bool failed;
    lares_read_fail_after(1, LARES_READ_FAULT_EIO);
    CHECK(lares_fread(buf, 16, f, &failed) == 0 && failed);
    rewind(f);
    lares_read_fail_after(1, LARES_READ_FAULT_SHORT);
    CHECK(lares_fread(buf, 16, f, &failed) == 8 && !failed);
    fclose(f);
    lares_read_fail_after(1, LARES_READ_FAULT_EIO);
    CHECK(lares_read_small_file(path, buf, sizeof buf) == -1);
    CHECK(lares_read_small_file(path, buf, sizeof buf) == 16 && strcmp(buf, "0123456789abcdef") == 0);
    lares_read_fail_after(0, LARES_READ_FAULT_EIO);
    unlink(path);
}

/* ---- sweeps ---- */

typedef lares_status (*step_fn)(void *arg, lares_error *err);

/* The n-th allocation fails, for every allocation a clean run makes: each
 * run is an ENOMEM with a message, or a success where the failure is one the
 * step may do without (a cache it skips). */
static void sweep_allocs(const char *what, step_fn fn, void *arg) {
    lares_error err = {0};
    const long before = lares_allocs_seen();
    lares_status st = fn(arg, &err);
    CHECKF(st == LARES_OK, "%s: %s", what, err.msg);
    const long allocs = lares_allocs_seen() - before;
    long failed = 0;
    for (long n = 1; n <= allocs; n++) {
        memset(&err, 0, sizeof err);
        lares_alloc_fail_after(n);
        st = fn(arg, &err);
        lares_alloc_fail_after(0);
        failed += st != LARES_OK;
        CHECKF(st == LARES_OK || (st == LARES_ENOMEM && err.msg[0] != '\0'),
               "%s, allocation %ld failing: %s (%s)", what, n, lares_status_name(st), err.msg);
    }
    printf("%s: %ld allocations, %ld of them fatal, each a clean ENOMEM\n", what, allocs, failed);
}

/* The n-th read fails (EIO, then short), for every read a clean run makes. */
static void sweep_reads(const char *what, step_fn fn, void *arg) {
    lares_error err = {0};
    const long before = lares_reads_seen();
    lares_status st = fn(arg, &err);
    CHECKF(st == LARES_OK, "%s: %s", what, err.msg);
    const long reads = lares_reads_seen() - before;
    CHECKF(reads > 0, "%s reads nothing through the gate", what);
    for (int kind = LARES_READ_FAULT_EIO; kind <= LARES_READ_FAULT_SHORT; kind++) {
        for (long n = 1; n <= reads; n++) {
            memset(&err, 0, sizeof err);
            lares_read_fail_after(n, (lares_read_fault)kind);
            st = fn(arg, &err);
            lares_read_fail_after(0, LARES_READ_FAULT_EIO);
            CHECKF(st == LARES_OK || err.msg[0] != '\0', "%s, read %ld failing (%s): %s without "
                   "a message", what, n, kind == LARES_READ_FAULT_EIO ? "EIO" : "short",
                   lares_status_name(st));
            if (kind == LARES_READ_FAULT_EIO) {
                CHECKF(st != LARES_OK, "%s, read %ld failing with EIO succeeded", what, n);
            }
        }
    }
    printf("%s: %ld reads, each failed with EIO and cut short\n", what, reads);
}

static lares_status step_gguf_open(void *arg, lares_error *err) {
    gguf_file *f = NULL;
    const lares_status st = gguf_open(arg, NULL, &f, err);
    gguf_close(f);
    return st;
}

static lares_status step_model_open(void *arg, lares_error *err) {
    lares_model *m = NULL;
    const lares_status st = lares_model_open(arg, NULL, &m, err);
    lares_model_close(m);
    return st;
}

/* a session, and a few greedy tokens */
static lares_status step_session(void *arg, lares_error *err) {
    lares_model *m = arg;
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = 32;
    so.n_threads = 1;
    lares_session *s = NULL;
    lares_status st = lares_session_create(m, &so, &s, err);
    if (st != LARES_OK) {
        return st;
    }
    int32_t prompt[8], out[8];
    size_t n_prompt = 0, n_out = 0;
    prompt[n_prompt++] = lares_token_bos(m);
    lares_generate_opts go = lares_generate_opts_default();
    go.n_predict = 4;
    go.sampler.temperature = 0;
    st = lares_generate(s, prompt, n_prompt, &go, out, 8, &n_out, NULL, err);
    lares_session_free(s);
    return st;
}

static lares_status step_key_read(void *arg, lares_error *err) {
    cluster_keypair k;
    return cluster_key_read(arg, &k, err);
}

static lares_status step_ring_load(void *arg, lares_error *err) {
    cluster_ring_config c;
    return cluster_ring_load(arg, &c, err);
}

static void test_sweeps(void) {
    const char *model = fixture("stories260K.gguf");
    sweep_allocs("gguf_open", step_gguf_open, (void *)model);
    sweep_allocs("lares_model_open", step_model_open, (void *)model);
    lares_model *m = NULL;
    lares_error err = {0};
    CHECK_OK(lares_model_open(model, NULL, &m, &err), &err);
    if (m != NULL) {
        sweep_allocs("session and generate", step_session, m);
    }
    lares_model_close(m);

    char key[300], ring[300];
    tmp_path(key, sizeof key, "head.key");
    tmp_path(ring, sizeof ring, "ring.json");
    char pub[LARES_KEY_Z85_LEN + 1];
    CHECK_OK(lares_keygen(key, pub, &err), &err);
    FILE *f = fopen(ring, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fprintf(f, "{\"devices\": [{\"name\": \"head\", \"key\": \"head.key\"},\n"
                   " {\"name\": \"w1\", \"address\": \"127.0.0.1:1\", \"public_key\": \"%s\"}]}\n",
                pub);
        fclose(f);
    }
    sweep_reads("key file", step_key_read, key);
    sweep_allocs("key file", step_key_read, key);
    sweep_reads("ring.json", step_ring_load, ring);
    sweep_allocs("ring.json", step_ring_load, ring);
    unlink(ring);
    char key_pub[310];
    snprintf(key_pub, sizeof key_pub, "%s.pub", key);
    unlink(key);
    unlink(key_pub);
}

/* ---- a ring hello ---- */

typedef enum ring_fault { RING_FAULT_READ, RING_FAULT_ALLOC } ring_fault;

/* A head says hello to a fresh worker thread while the n-th read (socket or
 * file) or allocation of the process fails; the session either starts (with
 * the worker, or alone when the worker's hello failed) or fails with a
 * message; the worker thread ends when told to. */
static lares_status ring_hello(lares_model *m, ring_fault fault, long n, lares_error *err) {
    tworker w;
    if (!worker_start(&w, 1, NULL, NULL)) {
        return lares_fail(err, LARES_EINVAL, "worker did not start");
    }
    const int win[] = {2, 3}; /* the model has 5 layers */
    const char *ring = write_ring("hello.json", &w, 1, win, fixture("stories260K.gguf"),
                                  "\"connect_timeout_ms\": 1500, \"timeout_ms\": 1500");
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = 32;
    so.n_threads = 1;
    so.ring = ring;
    lares_session *s = NULL;
    if (fault == RING_FAULT_READ) {
        lares_read_fail_after(n, LARES_READ_FAULT_EIO);
    } else {
        lares_alloc_fail_after(n);
    }
    const lares_status st = lares_session_create(m, &so, &s, err);
    lares_read_fail_after(0, LARES_READ_FAULT_EIO);
    lares_alloc_fail_after(0);
    lares_session_free(s);
    worker_stop(&w);
    return st;
}

static void test_ring_hello(void) {
    if (!harness_begin()) {
        CHECK(false);
        return;
    }
    lares_model *m = NULL;
    lares_error err = {0};
    CHECK_OK(lares_model_open(fixture("stories260K.gguf"), NULL, &m, &err), &err);
    if (m == NULL) {
        harness_end();
        return;
    }
    /* a clean hello, counted: the reads and allocations between the head's
     * first and the session's start (both sides: the worker is a thread) */
    const long r0 = lares_reads_seen(), a0 = lares_allocs_seen();
    CHECK_OK(ring_hello(m, RING_FAULT_READ, 0, &err), &err);
    const long reads = lares_reads_seen() - r0, allocs = lares_allocs_seen() - a0;
    CHECKF(reads > 0, "a ring hello reads nothing through the gate");
    long failed_reads = 0, failed_allocs = 0;
    for (long n = 1; n <= reads; n++) {
        memset(&err, 0, sizeof err);
        const lares_status st = ring_hello(m, RING_FAULT_READ, n, &err);
        failed_reads += st != LARES_OK;
        CHECKF(st == LARES_OK || err.msg[0] != '\0', "ring hello, read %ld failing: %s without "
               "a message", n, lares_status_name(st));
    }
    /* every allocation would take minutes under ASan: a spread of them */
    const long step = allocs > 64 ? allocs / 64 : 1;
    for (long n = 1; n <= allocs; n += step) {
        memset(&err, 0, sizeof err);
        const lares_status st = ring_hello(m, RING_FAULT_ALLOC, n, &err);
        failed_allocs += st != LARES_OK;
        CHECKF(st == LARES_OK || err.msg[0] != '\0', "ring hello, allocation %ld failing: %s "
               "without a message", n, lares_status_name(st));
    }
    printf("ring hello: %ld reads (%ld failed the session), %ld allocations every %ld-th tried "
           "(%ld failed the session)\n", reads, failed_reads, allocs, step, failed_allocs);
    lares_model_close(m);
    harness_end();
}

/* ---- a model file that shrinks while mapped ---- */

static void test_truncated_while_mapped(void) {
    char path[300];
    tmp_path(path, sizeof path, "shrinks.gguf");
    CHECK(copy_file(fixture("stories260K.gguf"), path));
    lares_model *m = NULL;
    lares_error err = {0};
    CHECK_OK(lares_model_open(path, NULL, &m, &err), &err);
    if (m == NULL) {
        return;
    }
    CHECK_OK(step_session(m, &err), &err); /* works while the file is whole */
    /* keep the header, drop every tensor */
    gguf_file *g = NULL;
    CHECK_OK(gguf_open(path, NULL, &g, &err), &err);
    const off_t keep = g != NULL ? (off_t)gguf_data_offset(g) : 4096;
    gguf_close(g);
    CHECK(truncate(path, keep) == 0);
    memset(&err, 0, sizeof err);
    const lares_status st = step_session(m, &err);
    CHECKF(st == LARES_EIO && strstr(err.msg, "shrank") != NULL, "%s: %s", lares_status_name(st),
           err.msg);
    /* it stays refused: the pages hold zeros now */
    memset(&err, 0, sizeof err);
    CHECK(step_session(m, &err) == LARES_EIO);
    lares_model_close(m);
    /* and the short file is refused at open, before anything is mapped past its end */
    memset(&err, 0, sizeof err);
    CHECK(lares_model_open(path, NULL, &m, &err) == LARES_EFORMAT);
    CHECKF(strstr(err.msg, "truncated") != NULL, "%s", err.msg);
    unlink(path);
}

#ifdef LARES_TEST_SERVER
/* ---- a server request ---- */

/* One HTTP request on a fresh connection; the status code, or -1. */
static int http_post(uint16_t port, const char *path, const char *body) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        return -1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char req[1024];
    const int n = snprintf(req, sizeof req,
                           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                           path, strlen(body), body);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    char resp[256];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof resp - 1 && (r = read(fd, resp + got, sizeof resp - 1 - got)) > 0) {
        got += (size_t)r;
    }
    resp[got] = '\0';
    if (getenv("FAULT_VERBOSE")) {
        fprintf(stderr, "%s\n", resp);
    }
    char drain[4096];
    while (read(fd, drain, sizeof drain) > 0) {
    }
    close(fd);
    int code = -1;
    return sscanf(resp, "HTTP/1.%*d %d", &code) == 1 ? code : -1;
}

static void test_server_request(void) {
    const char *model = fixture("stories260K.gguf");
    lares_model *m = NULL;
    lares_error err = {0};
    CHECK_OK(lares_model_open(model, NULL, &m, &err), &err);
    lares_session_opts so = lares_session_opts_default();
    so.n_ctx = 64;
    so.n_threads = 1;
    lares_session *s = NULL;
    if (m != NULL) {
        CHECK_OK(lares_session_create(m, &so, &s, &err), &err);
    }
    server *sv = NULL;
    server_opts o = server_opts_default();
    if (s != NULL) {
        CHECK_OK(server_start(m, s, model, &o, &sv, &err), &err);
    }
    if (sv != NULL) {
        const uint16_t port = server_port(sv);
        const char *body = "{\"model\":\"stories260K\",\"max_tokens\":3,\"temperature\":0,"
                           "\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}]}";
        CHECK(http_post(port, "/v1/chat/completions", body) == 200);
        /* the n-th allocation of the library fails while the request runs
         * (MHD's and jansson's own allocations are not ours to fail) */
        const long before = lares_allocs_seen();
        CHECK(http_post(port, "/v1/chat/completions", body) == 200);
        const long allocs = lares_allocs_seen() - before;
        long errors = 0;
        for (long n = 1; n <= allocs; n++) {
            lares_alloc_fail_after(n);
            const int code = http_post(port, "/v1/chat/completions", body);
            lares_alloc_fail_after(0);
            CHECKF(code == 200 || code == 500, "allocation %ld: status %d", n, code);
            errors += code != 200;
        }
        printf("server request: %ld allocations, %ld answered with an error\n", allocs, errors);
        /* the server still answers */
        CHECK(http_post(port, "/v1/chat/completions", body) == 200);
        server_stop(sv);
    }
    lares_session_free(s);
    lares_model_close(m);
}
#endif

static void quiet(lares_log_level level, const char *line, void *user) {
    (void)level;
    (void)line;
    (void)user;
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/lares-fault-test.XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        fprintf(stderr, "cannot make a temporary folder\n");
        return 1;
    }
    lares_set_log(quiet, NULL, LARES_LOG_ERROR); /* the sweeps' errors are expected */
    test_read_gate();
    test_sweeps();
    test_truncated_while_mapped();
    test_ring_hello();
#ifdef LARES_TEST_SERVER
    test_server_request();
#endif
    rmdir(tmp_dir);
    return check_finish("test_fault");
}
