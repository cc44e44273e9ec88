/* gguf: the reader on real files, the writer round trip, and hostile input. */
#include "check.h"
#include "gguf/gguf.h"

#include <unistd.h>

static void test_real_file(void) {
    lares_error err = {0};
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(fixture("stories260K.gguf"), NULL, &f, &err), &err);
    if (f == NULL) {
        return;
    }
    CHECK(gguf_version(f) == 3);
    CHECK(gguf_n_tensors(f) == 48);
    CHECK(gguf_n_kv(f) == 19);
    uint32_t n_layer = 0;
    CHECK_OK(gguf_get_u32(f, "llama.block_count", &n_layer, &err), &err);
    CHECK(n_layer == 5);
    float eps = 0;
    CHECK_OK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, &err), &err);
    CHECK(fabsf(eps - 1e-5f) < 1e-9f);
    gguf_str arch;
    CHECK_OK(gguf_get_str(f, "general.architecture", &arch, &err), &err);
    CHECK(arch.len == 5 && memcmp(arch.ptr, "llama", 5) == 0);
    gguf_arr toks;
    CHECK_OK(gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, &err), &err);
    CHECK(toks.type == GGUF_VT_STRING && toks.n == 512);
    gguf_str t1 = gguf_arr_str(&toks, 1);
    CHECK(t1.len == 3 && memcmp(t1.ptr, "<s>", 3) == 0);
    gguf_arr types;
    CHECK_OK(gguf_get_arr(f, "tokenizer.ggml.token_type", &types, &err), &err);
    CHECK(gguf_arr_i64(&types, 0) == 2 && gguf_arr_i64(&types, 3) == 6);

    /* a wrong-type request is an error naming the key, not a silent cast */
    gguf_str s;
    CHECK(gguf_get_str(f, "llama.block_count", &s, &err) == LARES_EFORMAT);
    CHECK(strstr(err.msg, "llama.block_count") != NULL);
    uint32_t u;
    CHECK(gguf_get_u32(f, "no.such.key", &u, &err) == LARES_ENOTFOUND);

    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_k.weight");
    CHECK(t != NULL);
    if (t != NULL) {
        CHECK(t->type == GGUF_TYPE_F32 && t->ne[0] == 64 && t->ne[1] == 32);
        CHECK(t->nbytes == 64 * 32 * 4);
        CHECK((const uint8_t *)t->data == gguf_base(f) + gguf_data_offset(f) + t->offset);
    }
    CHECK(gguf_find_tensor(f, "blk.9.attn_k.weight") == NULL);
    gguf_close(f);
}

/* A file read into the caller's buffer (gguf_open_opts.into) holds the same
 * keys and tensor bytes as the mapped file, its tensors point into the
 * buffer; a buffer too small is refused with the sizes. */
static void test_read_into_memory(void) {
    lares_error err = {0};
    gguf_file *mapped = NULL, *copy = NULL;
    CHECK_OK(gguf_open(fixture("TinyStories-656K.f16.gguf"), NULL, &mapped, &err), &err);
    if (mapped == NULL) {
        return;
    }
    const uint64_t n = gguf_file_bytes(mapped);
    uint8_t *buf = malloc((size_t)n);
    CHECK(buf != NULL);
    gguf_open_opts o = {.into = buf, .into_bytes = n - 1};
    CHECK(gguf_open(fixture("TinyStories-656K.f16.gguf"), &o, &copy, &err) == LARES_EINVAL &&
          copy == NULL);
    CHECKF(strstr(err.msg, "do not fit a buffer of") != NULL, "message: %s", err.msg);
    o.into_bytes = n;
    CHECK_OK(gguf_open(fixture("TinyStories-656K.f16.gguf"), &o, &copy, &err), &err);
    if (copy != NULL) {
        CHECK(gguf_in_memory(copy) && !gguf_in_memory(mapped) && gguf_base(copy) == buf);
        CHECK(memcmp(buf, gguf_base(mapped), (size_t)n) == 0);
        CHECK(gguf_n_kv(copy) == gguf_n_kv(mapped) &&
              gguf_n_tensors(copy) == gguf_n_tensors(mapped));
        for (uint64_t i = 0; i < gguf_n_tensors(mapped); i++) {
            const gguf_tensor *a = gguf_tensor_at(mapped, i), *b = gguf_tensor_at(copy, i);
            CHECK(a->nbytes == b->nbytes && a->offset == b->offset && a->type == b->type);
            CHECK((const uint8_t *)b->data == buf + gguf_data_offset(copy) + b->offset);
            CHECK(memcmp(a->data, b->data, (size_t)a->nbytes) == 0);
        }
        gguf_str arch;
        CHECK_OK(gguf_get_str(copy, "general.architecture", &arch, &err), &err);
        CHECK(arch.ptr >= (const char *)buf && arch.ptr < (const char *)buf + n);
        gguf_close(copy);
    }
    free(buf);
    gguf_close(mapped);
}

/* Copies every key and tensor of a real file through the writer and checks
 * the result reads back identical. */
static void test_writer_round_trip(void) {
    lares_error err = {0};
    gguf_file *src = NULL;
    CHECK_OK(gguf_open(fixture("TinyStories-656K.f16.gguf"), NULL, &src, &err), &err);
    if (src == NULL) {
        return;
    }
    gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_create(&w, &err), &err);
    for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
        CHECK_OK(gguf_writer_copy_kv(w, src, i, &err), &err);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        CHECK_OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err),
                 &err);
    }
    char path[] = "/tmp/lares-test-gguf-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(gguf_writer_write_file(w, path, &err), &err);
    gguf_writer_free(w);

    gguf_file *back = NULL;
    CHECK_OK(gguf_open(path, NULL, &back, &err), &err);
    if (back != NULL) {
        CHECK(gguf_n_kv(back) == gguf_n_kv(src));
        CHECK(gguf_n_tensors(back) == gguf_n_tensors(src));
        for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
            const char *key = gguf_kv_key(src, i);
            int64_t j = gguf_find_kv(back, key);
            CHECKF(j >= 0 && gguf_kv_type(back, (uint64_t)j) == gguf_kv_type(src, i), "%s", key);
        }
        gguf_arr a, b;
        CHECK_OK(gguf_get_arr(src, "tokenizer.ggml.tokens", &a, &err), &err);
        CHECK_OK(gguf_get_arr(back, "tokenizer.ggml.tokens", &b, &err), &err);
        int same = a.n == b.n;
        for (uint64_t i = 0; same && i < a.n; i++) {
            same = a.strs[i].len == b.strs[i].len &&
                   memcmp(a.strs[i].ptr, b.strs[i].ptr, (size_t)a.strs[i].len) == 0;
        }
        CHECK(same);
        for (uint64_t i = 0; i < gguf_n_tensors(src); i++) {
            const gguf_tensor *x = gguf_tensor_at(src, i);
            const gguf_tensor *y = gguf_find_tensor(back, x->name);
            CHECKF(y != NULL && y->nbytes == x->nbytes && y->type == x->type &&
                       memcmp(x->data, y->data, (size_t)x->nbytes) == 0,
                   "%s", x->name);
        }
        gguf_close(back);
    }
    unlink(path);
    gguf_close(src);
}

/* ---- hostile input: hand-built headers ---- */

typedef struct buf {
    unsigned char b[4096];
    size_t n;
} buf;

static void put32(buf *b, uint32_t v) {
    wr_u32le(b->b + b->n, v);
    b->n += 4;
}
static void put64(buf *b, uint64_t v) {
    wr_u64le(b->b + b->n, v);
    b->n += 8;
}
static void putstr(buf *b, const char *s) {
    put64(b, strlen(s));
    memcpy(b->b + b->n, s, strlen(s));
    b->n += strlen(s);
}

static void header(buf *b, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    put32(b, GGUF_MAGIC);
    put32(b, 3);
    put64(b, n_tensors);
    put64(b, n_kv);
}

static lares_status parse(const buf *b, lares_error *err) {
    gguf_file *f = NULL;
    lares_status st = gguf_open_memory(b->b, b->n, "hostile.gguf", &f, err);
    gguf_close(f);
    return st;
}

static void expect_error(const buf *b, lares_status code, const char *needle) {
    lares_error err = {0};
    lares_status st = parse(b, &err);
    CHECKF(st == code, "got %d (%s), want %d", st, err.msg, code);
    CHECKF(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
}

static void tensor_entry(buf *b, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1,
                         uint64_t off) {
    putstr(b, name);
    put32(b, 2);
    put64(b, ne0);
    put64(b, ne1);
    put32(b, type);
    put64(b, off);
}

static void test_hostile(void) {
    buf b;
    /* too short */
    b.n = 10;
    memset(b.b, 0, 10);
    expect_error(&b, LARES_EFORMAT, "truncated");
    /* wrong magic */
    header(&b, 0, 0);
    b.b[0] = 'X';
    expect_error(&b, LARES_EFORMAT, "not a GGUF file");
    /* version 1 */
    header(&b, 0, 0);
    wr_u32le(b.b + 4, 1);
    expect_error(&b, LARES_EUNSUPPORTED, "version 1");
    /* absurd counts */
    header(&b, UINT64_MAX, 0);
    expect_error(&b, LARES_EFORMAT, "tensors cannot fit");
    header(&b, 0, 1ull << 60);
    expect_error(&b, LARES_EFORMAT, "metadata entries cannot fit");
    /* key longer than the file */
    header(&b, 0, 1);
    put64(&b, 1000);
    memset(b.b + b.n, 'a', 8);
    b.n += 8;
    expect_error(&b, LARES_EFORMAT, "truncated");
    /* unknown value type */
    header(&b, 0, 1);
    putstr(&b, "k");
    put32(&b, 99);
    expect_error(&b, LARES_EFORMAT, "unknown value type 99");
    /* array with a huge count */
    header(&b, 0, 1);
    putstr(&b, "arr");
    put32(&b, GGUF_VT_ARRAY);
    put32(&b, GGUF_VT_U32);
    put64(&b, 1ull << 62);
    expect_error(&b, LARES_EFORMAT, "overruns");
    /* string array with a huge count */
    header(&b, 0, 1);
    putstr(&b, "arr");
    put32(&b, GGUF_VT_ARRAY);
    put32(&b, GGUF_VT_STRING);
    put64(&b, 1ull << 40);
    expect_error(&b, LARES_EFORMAT, "cannot fit");
    /* duplicate key */
    header(&b, 0, 2);
    putstr(&b, "k");
    put32(&b, GGUF_VT_U8);
    b.b[b.n++] = 1;
    putstr(&b, "k");
    put32(&b, GGUF_VT_U8);
    b.b[b.n++] = 1;
    expect_error(&b, LARES_EFORMAT, "duplicate metadata key 'k'");
    /* bad alignment */
    header(&b, 0, 1);
    putstr(&b, "general.alignment");
    put32(&b, GGUF_VT_U32);
    put32(&b, 24);
    expect_error(&b, LARES_EFORMAT, "power of two");
    /* tensor with unknown type */
    header(&b, 1, 0);
    tensor_entry(&b, "w", 77, 32, 2, 0);
    expect_error(&b, LARES_EFORMAT, "unknown tensor type 77");
    /* tensor offset past the end */
    header(&b, 1, 0);
    tensor_entry(&b, "w", GGUF_TYPE_F32, 4, 2, 4096);
    b.n = (b.n + 31) & ~(size_t)31;
    memset(b.b + b.n - 16, 0, 16);
    b.n += 32;
    expect_error(&b, LARES_EFORMAT, "overruns");
    /* tensor dims whose product overflows */
    header(&b, 1, 0);
    tensor_entry(&b, "w", GGUF_TYPE_F32, 1ull << 40, 1ull << 40, 0);
    expect_error(&b, LARES_EFORMAT, "overflow");
    /* a row that is not a block multiple */
    header(&b, 1, 0);
    tensor_entry(&b, "w", GGUF_TYPE_Q4_0, 48, 1, 0);
    expect_error(&b, LARES_EFORMAT, "not a multiple");
    /* misaligned offset */
    header(&b, 1, 0);
    tensor_entry(&b, "w", GGUF_TYPE_F32, 4, 1, 4);
    b.n = (b.n + 31) & ~(size_t)31;
    b.n += 64;
    expect_error(&b, LARES_EFORMAT, "alignment");
    /* duplicate tensor names */
    header(&b, 2, 0);
    tensor_entry(&b, "w", GGUF_TYPE_F32, 4, 1, 0);
    tensor_entry(&b, "w", GGUF_TYPE_F32, 4, 1, 32);
    b.n = (b.n + 31) & ~(size_t)31;
    b.n += 64;
    expect_error(&b, LARES_EFORMAT, "duplicate tensor name 'w'");
    /* overlapping tensors */
    header(&b, 2, 0);
    tensor_entry(&b, "a", GGUF_TYPE_F32, 16, 1, 0);
    tensor_entry(&b, "b", GGUF_TYPE_F32, 16, 1, 32);
    b.n = (b.n + 31) & ~(size_t)31;
    b.n += 128;
    expect_error(&b, LARES_EFORMAT, "overlap");
    /* too many dims */
    header(&b, 1, 0);
    putstr(&b, "w");
    put32(&b, 5);
    memset(b.b + b.n, 0, 64);
    b.n += 64;
    expect_error(&b, LARES_EFORMAT, "dimensions");
    /* a well-formed minimal file parses */
    header(&b, 1, 1);
    putstr(&b, "general.architecture");
    put32(&b, GGUF_VT_STRING);
    putstr(&b, "llama");
    tensor_entry(&b, "w", GGUF_TYPE_F32, 4, 2, 0);
    b.n = (b.n + 31) & ~(size_t)31;
    b.n += 32;
    lares_error err = {0};
    CHECK_OK(parse(&b, &err), &err);
}

/* Every prefix of a real file's header must fail cleanly (never crash). */
static void test_truncations(void) {
    size_t len = 0;
    char *data = slurp(fixture("stories260K.gguf"), &len);
    CHECK(data != NULL);
    if (data == NULL) {
        return;
    }
    int errors = 0;
    for (size_t n = 0; n < 14200; n += (n < 400 ? 1 : 37)) {
        gguf_file *f = NULL;
        lares_error err = {0};
        lares_status st = gguf_open_memory(data, n, "cut.gguf", &f, &err);
        errors += st != LARES_OK;
        CHECKF(st != LARES_OK || f != NULL, "n=%zu", n);
        gguf_close(f);
    }
    CHECK(errors > 300);
    /* the header alone (no data) must report a tensor overrun */
    gguf_file *f = NULL;
    lares_error err = {0};
    CHECK(gguf_open_memory(data, 20000, "cut.gguf", &f, &err) == LARES_EFORMAT);
    CHECK(strstr(err.msg, "overruns") != NULL);
    free(data);
}

static void test_types(void) {
    CHECK(gguf_type_from_name("Q4_K") == GGUF_TYPE_Q4_K);
    CHECK(gguf_type_from_name("bf16") == GGUF_TYPE_BF16);
    CHECK(gguf_type_from_name("q4_2") == -1);
    CHECK(gguf_type_info_of(4) == NULL);
    uint64_t rb;
    CHECK(gguf_row_bytes(GGUF_TYPE_Q4_0, 64, &rb) && rb == 36);
    CHECK(!gguf_row_bytes(GGUF_TYPE_Q4_0, 33, &rb));
}

/* Float array elements read as integers: NaN, infinities and values beyond
 * int64 give 0 instead of an undefined cast (found by fuzz_gguf once the library
 * was instrumented for coverage); others truncate toward zero. */
static void test_float_as_int(void) {
    buf b;
    header(&b, 0, 2);
    putstr(&b, "d");
    put32(&b, GGUF_VT_ARRAY);
    put32(&b, GGUF_VT_F64);
    put64(&b, 4);
    const double d[4] = {NAN, 1e300, -7.9, -9223372036854775808.0};
    for (int i = 0; i < 4; i++) {
        uint64_t u;
        memcpy(&u, &d[i], 8);
        put64(&b, u);
    }
    putstr(&b, "f");
    put32(&b, GGUF_VT_ARRAY);
    put32(&b, GGUF_VT_F32);
    put64(&b, 2);
    const float fl[2] = {-INFINITY, 3.5f};
    for (int i = 0; i < 2; i++) {
        uint32_t u;
        memcpy(&u, &fl[i], 4);
        put32(&b, u);
    }
    gguf_file *f = NULL;
    lares_error err;
    CHECK_OK(gguf_open_memory(b.b, b.n, "floats.gguf", &f, &err), &err);
    if (f == NULL) {
        return;
    }
    gguf_arr a;
    CHECK_OK(gguf_kv_arr(f, (uint64_t)gguf_find_kv(f, "d"), &a, &err), &err);
    CHECK(gguf_arr_i64(&a, 0) == 0 && gguf_arr_i64(&a, 1) == 0 && gguf_arr_i64(&a, 2) == -7 &&
          gguf_arr_i64(&a, 3) == INT64_MIN);
    CHECK_OK(gguf_kv_arr(f, (uint64_t)gguf_find_kv(f, "f"), &a, &err), &err);
    CHECK(gguf_arr_i64(&a, 0) == 0 && gguf_arr_i64(&a, 1) == 3);
    gguf_close(f);
}

int main(void) {
    test_types();
    test_float_as_int();
    test_real_file();
    test_read_into_memory();
    test_writer_round_trip();
    test_hostile();
    test_truncations();
    return check_finish("test_gguf");
}
