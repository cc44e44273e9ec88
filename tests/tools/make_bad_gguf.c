/*
 * Writes broken variants of a good GGUF file for the bad-input end-to-end
 * tests: make_bad_gguf KIND SRC OUT, KIND one of
 *   truncated       the first half of SRC
 *   offset-past-end the last tensor's offset moved beyond the file
 *   unknown-arch    general.architecture = "gpt-j-9000"
 *   unknown-type    the last tensor's type = 99
 *   missing-tensor  without blk.1.ffn_up.weight
 * Tensor directory fields are found by the GGUF layout (name, n_dims, dims,
 * type, offset), which is the file format, not lares internals.
 */
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>

static int die(const char *what, const lares_error *err) {
    fprintf(stderr, "make_bad_gguf: %s: %s\n", what, err ? err->msg : "");
    return 1;
}

static int copy_with(const gguf_file *src, const char *out, const char *skip_tensor,
                     const char *arch) {
    lares_error err = {0};
    gguf_writer *w = NULL;
    if (gguf_writer_create(&w, &err) != LARES_OK) {
        return die("writer", &err);
    }
    for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
        if (gguf_writer_copy_kv(w, src, i, &err) != LARES_OK) {
            return die("copy kv", &err);
        }
    }
    if (arch != NULL && gguf_writer_set_str(w, "general.architecture", arch, &err) != LARES_OK) {
        return die("arch", &err);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        if (skip_tensor != NULL && strcmp(t->name, skip_tensor) == 0) {
            continue;
        }
        if (gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err) !=
            LARES_OK) {
            return die("add tensor", &err);
        }
    }
    int rc = gguf_writer_write_file(w, out, &err) == LARES_OK ? 0 : die("write", &err);
    gguf_writer_free(w);
    return rc;
}

/* patches a field of the last tensor's directory entry in a file we just wrote */
static int patch_last_tensor(const gguf_file *src, const char *out, bool offset_field,
                             uint64_t value) {
    const gguf_tensor *t = gguf_tensor_at(src, gguf_n_tensors(src) - 1);
    size_t len;
    FILE *f = fopen(out, "r+b");
    if (f == NULL) {
        return die("reopen", NULL);
    }
    static unsigned char buf[1 << 22];
    len = fread(buf, 1, sizeof buf, f);
    const size_t nl = strlen(t->name);
    for (size_t i = 8; i + nl + 4 < len; i++) {
        if (rd_u64le(buf + i - 8) == nl && memcmp(buf + i, t->name, nl) == 0) {
            size_t p = i + nl;
            uint32_t nd = rd_u32le(buf + p);
            p += 4 + 8 * (size_t)nd;
            if (offset_field) {
                wr_u64le(buf + p + 4, value);
            } else {
                wr_u32le(buf + p, (uint32_t)value);
            }
            fseek(f, 0, SEEK_SET);
            fwrite(buf, 1, len, f);
            fclose(f);
            return 0;
        }
    }
    fclose(f);
    return die("tensor entry not found", NULL);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: make_bad_gguf KIND SRC OUT\n");
        return 2;
    }
    const char *kind = argv[1], *out = argv[3];
    lares_error err = {0};
    gguf_file *src = NULL;
    if (gguf_open(argv[2], NULL, &src, &err) != LARES_OK) {
        return die("open", &err);
    }
    int rc;
    if (strcmp(kind, "truncated") == 0) {
        FILE *f = fopen(out, "wb");
        rc = f == NULL || fwrite(gguf_base(src), 1, gguf_file_bytes(src) / 2, f) == 0;
        if (f != NULL) {
            fclose(f);
        }
    } else if (strcmp(kind, "offset-past-end") == 0) {
        rc = copy_with(src, out, NULL, NULL) || patch_last_tensor(src, out, true, 1ull << 40);
    } else if (strcmp(kind, "unknown-type") == 0) {
        rc = copy_with(src, out, NULL, NULL) || patch_last_tensor(src, out, false, 99);
    } else if (strcmp(kind, "unknown-arch") == 0) {
        rc = copy_with(src, out, NULL, "gpt-j-9000");
    } else if (strcmp(kind, "missing-tensor") == 0) {
        rc = copy_with(src, out, "blk.1.ffn_up.weight", NULL);
    } else {
        fprintf(stderr, "make_bad_gguf: unknown kind %s\n", kind);
        rc = 2;
    }
    gguf_close(src);
    return rc;
}
