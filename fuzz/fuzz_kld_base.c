/*
 * libFuzzer target: the KL-divergence base file reader (src/api/kld_file.c)
 * on arbitrary bytes, through a memory stream. Whatever opens must read every
 * chunk, or refuse it, without reading past the bytes given.
 */
#include "api/score.h"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) {
        return 0;
    }
    FILE *f = fmemopen((void *)data, size, "rb");
    if (f == NULL) {
        return 0;
    }
    lares_error err;
    kld_base *b = NULL;
    if (kld_base_read(f, size, "fuzz.kld", &b, &err) == LARES_OK &&
        kld_base_verify(b, &err) != LARES_OK) {
        kld_base_free(b);
        b = NULL;
    }
    if (b != NULL) {
        /* the exact size was checked, so the rows of a chunk fit in the input */
        float *rows = lares_alloc_array((size_t)b->n_scored * b->n_vocab, sizeof *rows);
        volatile float sink = 0;
        for (uint32_t k = 0; rows != NULL && k < b->n_chunks; k++) {
            if (kld_base_read_chunk(b, rows, &err) != LARES_OK) {
                break;
            }
            sink += rows[0];
        }
        (void)sink;
        lares_free(rows);
        kld_base_free(b);
    }
    fclose(f);
    return 0;
}
