/*
 * One product of an AArch64 kernel family, for counting the instructions it
 * executes under qemu (bench/rows_icount.sh): 4 weight rows of k = 2048 of a
 * type against n activation rows, by the type's dot product once per row
 * ("dots"), its row tiles of up to 4 x 4 as ops_matmul took them for 2-7
 * rows ("tiles"), the few-row product ("rows") or the packed GEMM
 * ("gemm-sdot", "gemm-i8mm"); with "-nodot" (dots, tiles, rows) without
 * SDOT. With a fifth argument it stops before the product, so that the
 * script can take the set-up off.
 *
 *   rows_icount dots|tiles|rows|gemm-sdot|gemm-i8mm[-nodot] TYPE_ID N_ROWS [setup]
 */
#include "quant/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K   2048
#define N_W 4

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: rows_icount dots|tiles|rows|gemm-sdot|gemm-i8mm[-nodot] TYPE_ID "
                        "N_ROWS [setup]\n");
        return 2;
    }
    const char *how = argv[1];
    const uint32_t type = (uint32_t)atoi(argv[2]);
    const int nc = atoi(argv[3]);
    const bool product = argc < 5;
    const quant_isa isa = strcmp(how, "gemm-i8mm") == 0   ? QUANT_ISA_NEON_I8MM
                          : strstr(how, "-nodot") != NULL ? QUANT_ISA_NEON_NODOT
                                                          : QUANT_ISA_NEON;
    const quant_traits *t = quant_traits_isa(type, isa);
    if (t == NULL || nc < 1 || nc > QUANT_ROWS_MAX) {
        fprintf(stderr, "rows_icount: no such type in this family, or rows not in 1..%d\n",
                QUANT_ROWS_MAX);
        return 2;
    }
    const size_t rb = quant_row_bytes(type, K);
    uint8_t *w = malloc(rb * N_W);
    float *x = malloc(sizeof(float) * K * QUANT_ROWS_MAX);
    unsigned s = 1;
    for (int64_t i = 0; i < K * QUANT_ROWS_MAX; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int64_t r = 0; r < N_W; r++) {
        t->from_float_ref(x + r * 64, w + (size_t)r * rb, K);
    }
    float y[N_W * QUANT_ROWS_MAX] = {0};
    if (strncmp(how, "dots", 4) == 0 || strncmp(how, "tiles", 5) == 0) {
        const quant_traits *at = quant_traits_isa(t->vec_dot_type, isa);
        const size_t ab = quant_row_bytes(t->vec_dot_type, K);
        uint8_t *a = malloc(ab * (size_t)nc);
        for (int c = 0; c < nc; c++) {
            at->from_float(x + (size_t)c * K, a + (size_t)c * ab, K);
        }
        if (how[0] == 't' && t->vec_dot_tile != NULL) {
            /* ops_matmul's row tiles: up to 4 weight rows x 4 activation rows a call */
            for (int64_t r = 0; r < N_W && product; r += QUANT_TILE_MAX) {
                for (int c = 0; c < nc; c += QUANT_TILE_MAX) {
                    const int nr = N_W - r < QUANT_TILE_MAX ? (int)(N_W - r) : QUANT_TILE_MAX;
                    const int n = nc - c < QUANT_TILE_MAX ? nc - c : QUANT_TILE_MAX;
                    t->vec_dot_tile(K, &y[c * N_W + r], N_W, w + (size_t)r * rb, rb,
                                    a + (size_t)c * ab, ab, nr, n);
                }
            }
        } else {
            for (int64_t r = 0; r < N_W && product; r++) {
                for (int c = 0; c < nc; c++) {
                    t->vec_dot(K, &y[c * N_W + r], w + (size_t)r * rb, a + (size_t)c * ab);
                }
            }
        }
    } else if (strncmp(how, "rows", 4) == 0 && t->rows != NULL) {
        const size_t ab = quant_rows_bytes(K);
        uint8_t *a = aligned_alloc(64, ab * (size_t)nc);
        for (int c = 0; c < nc; c++) {
            t->rows_fmt->from_float(x + (size_t)c * K, K, a + (size_t)c * ab);
        }
        if (product) {
            t->rows(K, w, rb, N_W, a, ab, nc, y, N_W);
        }
    } else if (strncmp(how, "gemm", 4) == 0 && t->gemm != NULL) {
        const quant_panel_fmt *f = t->panel;
        const size_t pb = quant_panel_bytes(f, K);
        const int np = (nc + f->lanes - 1) / f->lanes;
        uint8_t *p = aligned_alloc(64, pb * (size_t)np);
        for (int i = 0; i < np; i++) {
            const int n = nc - i * f->lanes < f->lanes ? nc - i * f->lanes : f->lanes;
            f->from_float(x + (size_t)i * f->lanes * K, K, n, K, p + (size_t)i * pb);
        }
        if (product) {
            t->gemm(K, w, rb, N_W, p, nc, y, N_W);
        }
    } else {
        fprintf(stderr, "rows_icount: %s: not in this family for this type\n", how);
        return 2;
    }
    printf("%g\n", (double)y[0]);
    return 0;
}
