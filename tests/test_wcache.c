/*
 * wcache (issue 19): the weight cache without sockets. SHA-256 against the
 * FIPS 180-2 example; an entry made, written in pieces, verified, closed and
 * opened again (what was held stays, a partial item resumes at its offset);
 * a wrong hash drops the item; eviction under a size limit, other models
 * least recently used first, then unpinned items; damaged manifests and a
 * file of another size refused with a message naming the file; the listing;
 * and the frames TENSOR_GET / TENSOR_DATA: bytes, bounds, hostile lengths.
 */
#include "check.h"
#include "cluster/cluster.h"
#include "wcache/wcache.h"

#include <sys/stat.h>
#include <unistd.h>

static char root[256];

static bool has(const char *hay, const char *needle) {
    return strstr(hay, needle) != NULL;
}

static void sha_of(const void *p, size_t n, uint8_t out[WCACHE_SHA256_BYTES]) {
    CHECK(wcache_sha256_of(p, n, out));
}

static void check_sha(void) {
    uint8_t d[WCACHE_SHA256_BYTES];
    char hex[WCACHE_HEX_BYTES + 1];
    sha_of("abc", 3, d);
    wcache_hex(d, hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    /* in pieces: the same digest */
    wcache_sha256 *s = wcache_sha256_begin();
    CHECK(s != NULL);
    wcache_sha256_add(s, "a", 1);
    wcache_sha256_add(s, "bc", 2);
    uint8_t d2[WCACHE_SHA256_BYTES];
    wcache_sha256_end(s, d2);
    CHECK(memcmp(d, d2, sizeof d) == 0);
}

static void model_sha(int which, uint8_t sha[WCACHE_SHA256_BYTES]) {
    char name[32];
    snprintf(name, sizeof name, "model %d", which);
    sha_of(name, strlen(name), sha);
}

/* an entry of 3 items of a 10000-byte model: header 100, tensors 3000 and 5000 */
static const uint64_t OFF[3] = {0, 1024, 4096};
static const uint64_t BYTES[3] = {100, 3000, 5000};
#define FILE_BYTES 10000u

static void fill(uint8_t *b, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) {
        b[i] = (uint8_t)(i * 31 + (size_t)seed * 7);
    }
}

static void check_entry(void) {
    lares_error err = {0};
    uint8_t sha[WCACHE_SHA256_BYTES];
    model_sha(1, sha);
    wcache *c = NULL;
    CHECK_OK(wcache_open(root, sha, FILE_BYTES, 0, &c, &err), &err);
    if (c == NULL) {
        return;
    }
    struct stat sb;
    CHECK(stat(wcache_file(c), &sb) == 0 && sb.st_size == FILE_BYTES);
    CHECK_OK(wcache_set_items(c, 3, OFF, BYTES, &err), &err);
    wcache_set_name(c, "tiny\nmodel");
    uint8_t t1[3000], t2[5000];
    fill(t1, sizeof t1, 1);
    fill(t2, sizeof t2, 2);
    uint8_t s1[WCACHE_SHA256_BYTES], s2[WCACHE_SHA256_BYTES];
    sha_of(t1, sizeof t1, s1);
    sha_of(t2, sizeof t2, s2);
    /* in order only */
    CHECK(wcache_write(c, 1, 100, t1, 10, &err) == LARES_EINVAL && has(err.msg, "holds 0"));
    CHECK_OK(wcache_write(c, 1, 0, t1, 1000, &err), &err);
    CHECK_OK(wcache_write(c, 1, 1000, t1 + 1000, 2000, &err), &err);
    CHECK(wcache_write(c, 1, 3000, t1, 1, &err) == LARES_EINVAL); /* past the item */
    CHECK(!wcache_done(c, 1, NULL));
    CHECK_OK(wcache_verify(c, 1, s1, &err), &err);
    uint8_t got[WCACHE_SHA256_BYTES];
    CHECK(wcache_done(c, 1, got) && memcmp(got, s1, sizeof got) == 0);
    /* half of item 2, then closed: a transfer cut off */
    CHECK_OK(wcache_write(c, 2, 0, t2, 2500, &err), &err);
    CHECK(wcache_bytes(c) == 5500);
    wcache_close(c);

    /* opened again: item 1 whole and verified, item 2 resumes at 2500 */
    c = NULL;
    CHECK_OK(wcache_open(root, sha, FILE_BYTES, 0, &c, &err), &err);
    if (c == NULL) {
        return;
    }
    CHECK(wcache_n_items(c) == 3);
    CHECK(wcache_done(c, 1, got) && memcmp(got, s1, sizeof got) == 0);
    CHECK(wcache_have(c, 2) == 2500 && !wcache_done(c, 2, NULL));
    CHECK_OK(wcache_set_items(c, 3, OFF, BYTES, &err), &err); /* the same table keeps them */
    CHECK(wcache_have(c, 2) == 2500);
    CHECK_OK(wcache_write(c, 2, 2500, t2 + 2500, 2500, &err), &err);
    /* a wrong hash (a chunk damaged on its way): dropped, never done */
    CHECK(wcache_verify(c, 2, s1, &err) == LARES_EFORMAT && has(err.msg, "tampered"));
    CHECK(wcache_have(c, 2) == 0 && !wcache_done(c, 2, NULL));
    /* accepted by a hash the caller took as it wrote: a wrong one drops the item too */
    CHECK_OK(wcache_write(c, 2, 0, t2, 4000, &err), &err);
    CHECK(wcache_accept(c, 2, s2, s2, &err) == LARES_EINVAL && has(err.msg, "not held whole"));
    CHECK_OK(wcache_write(c, 2, 4000, t2 + 4000, 1000, &err), &err);
    CHECK(wcache_accept(c, 2, s1, s2, &err) == LARES_EFORMAT && has(err.msg, "tampered"));
    CHECK(wcache_have(c, 2) == 0 && !wcache_done(c, 2, NULL));
    CHECK_OK(wcache_write(c, 2, 0, t2, 5000, &err), &err);
    CHECK_OK(wcache_accept(c, 2, s2, s2, &err), &err);
    CHECK(wcache_done(c, 2, got) && memcmp(got, s2, sizeof got) == 0);
    CHECK_OK(wcache_verify(c, 2, s2, &err), &err); /* and read back, the same */
    /* the bytes on disk are the item's, at its offset */
    FILE *f = fopen(wcache_file(c), "rb");
    uint8_t back[5000];
    CHECK(f != NULL && fseek(f, 4096, SEEK_SET) == 0 && fread(back, 1, 5000, f) == 5000);
    if (f != NULL) {
        fclose(f);
    }
    CHECK(memcmp(back, t2, 5000) == 0);
    /* changed on disk: found by the next verification */
    int fd = -1;
    f = fopen(wcache_file(c), "r+b");
    if (f != NULL) {
        fseek(f, 1024 + 5, SEEK_SET);
        fputc(0, f);
        fclose(f);
    }
    (void)fd;
    CHECK(wcache_verify(c, 1, s1, &err) == LARES_EFORMAT && has(err.msg, "SHA-256"));
    /* another table drops what does not match */
    const uint64_t off2[2] = {0, 1024}, bytes2[2] = {100, 2000};
    CHECK_OK(wcache_set_items(c, 2, off2, bytes2, &err), &err);
    CHECK(wcache_n_items(c) == 2 && wcache_have(c, 1) == 0);
    const uint64_t bad_off[1] = {9000}, bad_bytes[1] = {2000};
    CHECK(wcache_set_items(c, 1, bad_off, bad_bytes, &err) == LARES_EFORMAT && has(err.msg, "past"));
    wcache_close(c);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static void check_damaged(void) {
    lares_error err = {0};
    uint8_t sha[WCACHE_SHA256_BYTES];
    model_sha(2, sha);
    wcache *c = NULL;
    CHECK_OK(wcache_open(root, sha, FILE_BYTES, 0, &c, &err), &err);
    if (c == NULL) {
        return;
    }
    char manifest[512];
    snprintf(manifest, sizeof manifest, "%s", wcache_file(c));
    char *slash = strrchr(manifest, '/');
    snprintf(slash + 1, manifest + sizeof manifest - slash - 1, "manifest");
    wcache_close(c);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"hello\n", "not a lares weight cache manifest"},
        {"lares-wcache 1\nfile_bytes 9999\n", "not the model's 10000 bytes"},
        {"lares-wcache 1\nfile_bytes 10000\ni 0 0 100 100 5\n", "5 numbers and a hash"},
        {"lares-wcache 1\nfile_bytes 10000\ni 1 9000 2000 0 5 -\n", "does not fit"},
        {"lares-wcache 1\nfile_bytes 10000\ni 1 0 200 300 5 -\n", "does not fit"},
        {"lares-wcache 1\nfile_bytes 10000\ni 1 0 200 100 5 abc\n", "not held whole"},
        {"lares-wcache 1\nfile_bytes 10000\ni 1 0 200 200 5 "
         "zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n",
         "hex"},
        {"lares-wcache 1\nfile_bytes 10000\ni 1 0 2 0 5 -\ni 1 0 2 0 5 -\n", "twice"},
        {"lares-wcache 1\nfile_bytes 10000\nzap\n", "unknown record"},
        {"lares-wcache 1\nfile_bytes 10000\ni 1 0 2 0 5 -", "cut short"},
        {"lares-wcache 1\n", "incomplete"},
        {"lares-wcache 1\nfile_bytes 10000\ni 99999999999 0 2 0 5 -\n", "does not fit"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(manifest, bad[i].text);
        c = NULL;
        lares_status st = wcache_open(root, sha, FILE_BYTES, 0, &c, &err);
        CHECKF(st == LARES_EFORMAT && has(err.msg, bad[i].want) && has(err.msg, "manifest"),
               "case %zu: %d %s", i, (int)st, err.msg);
        wcache_close(c);
    }
    /* removed, the entry starts over */
    CHECK_OK(wcache_remove_model(root, sha, &err), &err);
    c = NULL;
    CHECK_OK(wcache_open(root, sha, FILE_BYTES, 0, &c, &err), &err);
    CHECK(c != NULL && wcache_n_items(c) == 0);
    if (c != NULL) {
        CHECK_OK(wcache_set_items(c, 3, OFF, BYTES, &err), &err);
        uint8_t h[100];
        fill(h, sizeof h, 3);
        CHECK_OK(wcache_write(c, 0, 0, h, sizeof h, &err), &err);
        const char *file = wcache_file(c);
        char path[600];
        snprintf(path, sizeof path, "%s", file);
        wcache_close(c);
        /* the model file of another size than the manifest's: refused */
        CHECK(truncate(path, 5000) == 0);
        c = NULL;
        CHECK(wcache_open(root, sha, FILE_BYTES, 0, &c, &err) == LARES_EFORMAT &&
              has(err.msg, "damaged or changed"));
        wcache_close(c);
    }
}

static void check_evict(void) {
    lares_error err = {0};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/evict", root);
    uint8_t a[WCACHE_SHA256_BYTES], b[WCACHE_SHA256_BYTES];
    model_sha(10, a);
    model_sha(11, b);
    uint8_t t[5000];
    fill(t, sizeof t, 4);
    /* model a: 3100 bytes held, used long ago */
    wcache *c = NULL;
    CHECK_OK(wcache_open(dir, a, FILE_BYTES, 0, &c, &err), &err);
    if (c == NULL) {
        return;
    }
    CHECK_OK(wcache_set_items(c, 3, OFF, BYTES, &err), &err);
    CHECK_OK(wcache_write(c, 0, 0, t, 100, &err), &err);
    CHECK_OK(wcache_write(c, 1, 0, t, 3000, &err), &err);
    wcache_close(c);
    sleep(1); /* last-use times are in seconds */
    /* model b under a limit of 8200: needs 5100 (header + item 2) + 3000 (item 1) */
    c = NULL;
    CHECK_OK(wcache_open(dir, b, FILE_BYTES, 8200, &c, &err), &err);
    if (c == NULL) {
        return;
    }
    CHECK_OK(wcache_set_items(c, 3, OFF, BYTES, &err), &err);
    CHECK_OK(wcache_reserve(c, 100 + 5000, NULL, &err), &err); /* fits beside a */
    CHECK_OK(wcache_write(c, 0, 0, t, 100, &err), &err);
    CHECK_OK(wcache_write(c, 2, 0, t, 5000, &err), &err);
    wcache_model_info *v = NULL;
    size_t n = 0;
    CHECK_OK(wcache_list(dir, &v, &n, &err), &err);
    CHECK(n == 2);
    lares_free(v);
    /* a write past the limit without a reservation is refused */
    CHECK(wcache_write(c, 1, 0, t, 3000, &err) == LARES_ERANGE && has(err.msg, "size limit"));
    /* the reservation evicts model a, the least recently used */
    CHECK_OK(wcache_reserve(c, 3000, NULL, &err), &err);
    CHECK_OK(wcache_list(dir, &v, &n, &err), &err);
    CHECK(n == 1);
    lares_free(v);
    CHECK_OK(wcache_write(c, 1, 0, t, 3000, &err), &err);
    /* nothing else to evict but this model's items: unpinned ones go, pinned stay */
    wcache_touch(c, 2);
    bool pin[3] = {true, true, false};
    CHECK_OK(wcache_reserve(c, 1000, pin, &err), &err);
    CHECK(wcache_have(c, 2) == 0 && wcache_have(c, 1) == 3000);
    bool all[3] = {true, true, true};
    CHECK(wcache_reserve(c, 9000, all, &err) == LARES_ERANGE && has(err.msg, "--cache-size"));
    wcache_close(c);
}

static void check_list(void) {
    lares_error err = {0};
    wcache_model_info *v = NULL;
    size_t n = 0;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none", root);
    CHECK_OK(wcache_list(missing, &v, &n, &err), &err);
    CHECK(n == 0 && v == NULL);
    CHECK_OK(wcache_list(root, &v, &n, &err), &err);
    bool named = false;
    for (size_t i = 0; i < n; i++) {
        named = named || (strcmp(v[i].name, "tiny model") == 0 && v[i].file_bytes == FILE_BYTES &&
                          v[i].items == 2);
    }
    CHECK(named);
    lares_free(v);
}

/* ---- the frames ---- */

static void check_frames(void) {
    uint8_t buf[256];
    lares_error err = {0};
    cluster_frame *f = calloc(1, sizeof *f);
    if (f == NULL) {
        CHECK(false);
        return;
    }
    const cluster_tensor_get g = {.item = 7, .offset = 0x0102030405060708u, .length = 4096};
    size_t n = cluster_encode_tensor_get(buf, sizeof buf, &g);
    static const uint8_t want[] = {'L', 'R', 'N', 'G', 2, 0, 19, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                   16,  0,   0,   0,   7, 0, 0,  0, 8, 7, 6, 5, 4, 3, 2, 1,
                                   0,   16,  0,   0};
    CHECK(n == sizeof want && memcmp(buf, want, n) == 0);
    CHECK_OK(cluster_frame_decode(buf, n, f, &err), &err);
    CHECK(f->type == CLUSTER_TENSOR_GET && f->u.tensor_get.item == 7 &&
          f->u.tensor_get.length == 4096 && f->u.tensor_get.offset == g.offset);
    /* a chunk beyond the limit */
    const cluster_tensor_get big = {.item = 1, .length = CLUSTER_MAX_CHUNK + 1};
    n = cluster_encode_tensor_get(buf, sizeof buf, &big);
    CHECK(cluster_frame_decode(buf, n, f, &err) == LARES_EFORMAT && has(err.msg, "at most"));
    const cluster_tensor_get wrap = {.item = 1, .offset = UINT64_MAX - 2, .length = 8};
    n = cluster_encode_tensor_get(buf, sizeof buf, &wrap);
    CHECK(cluster_frame_decode(buf, n, f, &err) == LARES_EFORMAT && has(err.msg, "overflows"));

    const uint8_t data[5] = {1, 2, 3, 4, 5};
    cluster_tensor_data d = {.item = 3, .item_bytes = 100, .offset = 95, .length = 5, .data = data};
    memset(d.sha256, 0xab, sizeof d.sha256);
    n = cluster_encode_tensor_data(buf, sizeof buf, &d);
    CHECK(n == cluster_tensor_data_bytes(5));
    CHECK_OK(cluster_frame_decode(buf, n, f, &err), &err);
    CHECK(f->type == CLUSTER_TENSOR_DATA && f->u.tensor_data.length == 5 &&
          f->u.tensor_data.offset == 95 && memcmp(f->u.tensor_data.data, data, 5) == 0 &&
          f->u.tensor_data.sha256[31] == 0xab);
    /* every truncation refused */
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t t[256];
        memcpy(t, buf, cut);
        if (cut >= CLUSTER_HEADER_BYTES) {
            wr_u32le(t + 16, (uint32_t)(cut - CLUSTER_HEADER_BYTES));
        }
        CHECKF(cluster_frame_decode(t, cut, f, &err) != LARES_OK, "cut at %zu", cut);
    }
    /* bytes past the item's end, a length that disagrees with the bytes, a refusal with bytes */
    uint8_t h[256];
    memcpy(h, buf, n);
    wr_u64le(h + CLUSTER_HEADER_BYTES + 16, 96); /* offset 96 + 5 > 100 */
    CHECK(cluster_frame_decode(h, n, f, &err) == LARES_EFORMAT && has(err.msg, "past the item"));
    memcpy(h, buf, n);
    wr_u32le(h + CLUSTER_HEADER_BYTES + 56, 4); /* length 4, 5 bytes follow */
    CHECK(cluster_frame_decode(h, n, f, &err) == LARES_EFORMAT && has(err.msg, "left over"));
    memcpy(h, buf, n);
    wr_u32le(h + CLUSTER_HEADER_BYTES + 56, 0xffffffffu);
    CHECK(cluster_frame_decode(h, n, f, &err) == LARES_EFORMAT);
    memcpy(h, buf, n);
    wr_u32le(h + CLUSTER_HEADER_BYTES + 4, LARES_ENOTFOUND); /* a refusal carrying bytes */
    CHECK(cluster_frame_decode(h, n, f, &err) == LARES_EFORMAT && has(err.msg, "refusal"));
    /* a refusal */
    cluster_tensor_data r = {.item = 9, .status = LARES_ENOTFOUND};
    n = cluster_encode_tensor_data(buf, sizeof buf, &r);
    CHECK_OK(cluster_frame_decode(buf, n, f, &err), &err);
    CHECK(f->u.tensor_data.status == LARES_ENOTFOUND && f->u.tensor_data.length == 0);
    /* too small a buffer: nothing encoded */
    CHECK(cluster_encode_tensor_data(buf, 40, &d) == 0);
    free(f);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/lares_test_wcache.%ld", (long)getpid());
    check_sha();
    check_entry();
    check_damaged();
    check_evict();
    check_list();
    check_frames();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    return check_finish("test_wcache");
}
