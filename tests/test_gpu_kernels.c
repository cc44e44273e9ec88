/*
 * CUDA kernels (issue 10) against the CPU oracle: dequantization bit for bit
 * against quant's scalar reference for every device type, products against
 * the reference dot products (the same integer sums; only the order of the
 * float accumulation differs, so within a tolerance scaled by the row's sum of
 * magnitudes), RMSNorm, RoPE and attention against ops/. Without a CUDA device
 * (or in a build without CUDA) it prints why and returns 77 (CTest: skipped).
 */
#include "check.h"
#include "gpu_layer_checks.h"
#include "gpu/gpu_impl.h"
#include "quant/half.h"
#include "quant/quant.h"

#include <math.h>

static const uint32_t types[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K,
                                 GGUF_TYPE_F16,  GGUF_TYPE_F32};

static void test_dequant(void) {
    const int64_t n = 4096;
    float *x = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float)),
          *b = malloc(n * sizeof(float));
    void *q = malloc(quant_row_bytes(GGUF_TYPE_F32, n));
    for (size_t k = 0; k < LARES_ARRAY_LEN(types); k++) {
        const quant_traits *qt = quant_traits_ref(types[k]);
        for (int64_t i = 0; i < n; i++) {
            x[i] = glc_rand() * (1 + (float)(i % 7));
        }
        qt->from_float_ref(x, q, n);
        qt->to_float(q, a, n);
        lares_error err = {0};
        CHECK_OK(gpu_cuda_check_dequant(types[k], q, quant_row_bytes(types[k], n), n, b, &err),
                 &err);
        CHECKF(memcmp(a, b, n * sizeof(float)) == 0, "%s: device dequantization differs", qt->name);
    }
    free(x), free(a), free(b), free(q);
}

static void test_matmul(void) {
    const gpu_device_ops *ops = gpu_cuda_ops();
    lares_error err = {0};
    gpu_device *d = NULL;
    char name[96];
    uint64_t vfree;
    CHECK_OK(ops->open(0, &d, name, sizeof name, &vfree, &err), &err);
    if (d == NULL) {
        return;
    }
    /* shapes: mat-vecs and mat-mats of 256-multiple widths, rows not a multiple of the
     * kernel's warps, batches not a multiple of its rows per pass, and a 7B-sized
     * mat-vec (grid and index sizes) */
    const int64_t shapes[][3] = {{512, 96, 1},  {1024, 40, 5},   {256, 33, 8},
                                 {2048, 7, 37}, {4096, 4101, 1}, {11008, 64, 2}};
    for (size_t k = 0; k < LARES_ARRAY_LEN(types); k++) {
        const quant_traits *qt = quant_traits_ref(types[k]);
        const quant_traits *at = quant_traits_ref(qt->vec_dot_type);
        for (size_t sh = 0; sh < LARES_ARRAY_LEN(shapes); sh++) {
            const int64_t n_in = shapes[sh][0], n_out = shapes[sh][1], n_rows = shapes[sh][2];
            const size_t wrow = quant_row_bytes(types[k], n_in);
            float *wf = malloc((size_t)(n_in * n_out) * sizeof(float));
            float *xf = malloc((size_t)(n_in * n_rows) * sizeof(float));
            uint8_t *w = malloc(wrow * (size_t)n_out);
            void *xa = malloc(ops_act_bytes(qt->vec_dot_type, n_rows, n_in));
            float *ycpu = malloc((size_t)(n_out * n_rows) * sizeof(float));
            float *ygpu = malloc((size_t)(n_out * n_rows) * sizeof(float));
            for (int64_t i = 0; i < n_in * n_out; i++) {
                wf[i] = glc_rand();
            }
            for (int64_t i = 0; i < n_in * n_rows; i++) {
                xf[i] = glc_rand() * 3;
            }
            qt->from_float_ref(wf, w, n_in * n_out);
            ops_act act;
            ops_act_prepare(NULL, xf, n_rows, n_in, qt->vec_dot_type, xa, &act);
            for (int64_t r = 0; r < n_rows; r++) {
                for (int64_t o = 0; o < n_out; o++) {
                    qt->vec_dot(n_in, &ycpu[r * n_out + o], w + (size_t)o * wrow,
                                (const uint8_t *)act.data + (size_t)r * act.row_bytes);
                }
            }
            void *wd = NULL;
            CHECK_OK(ops->upload(d, w, wrow * (size_t)n_out, &wd, &err), &err);
            CHECK_OK(ops->matmul(d, wd, types[k], n_in, n_out, &act, ygpu, &err), &err);
            ops->release(d, wd);
            /* tolerance: the float sums' order, relative to sum |w| |x| of the row */
            float *wrow_f = malloc((size_t)n_in * sizeof(float));
            float *xrow_f = malloc((size_t)n_in * sizeof(float));
            int bad = 0;
            for (int64_t r = 0; r < n_rows; r++) {
                at->to_float((const uint8_t *)act.data + (size_t)r * act.row_bytes, xrow_f, n_in);
                for (int64_t o = 0; o < n_out; o++) {
                    qt->to_float(w + (size_t)o * wrow, wrow_f, n_in);
                    double mag = 0;
                    for (int64_t i = 0; i < n_in; i++) {
                        mag += fabs((double)wrow_f[i] * xrow_f[i]);
                    }
                    const double diff = fabs((double)ycpu[r * n_out + o] - ygpu[r * n_out + o]);
                    if (!(diff <= 1e-5 * mag + 1e-6)) {
                        if (bad++ < 3) {
                            fprintf(stderr, "%s %lldx%lld r%lld o%lld: cpu %g gpu %g\n", qt->name,
                                    (long long)n_out, (long long)n_in, (long long)r, (long long)o,
                                    ycpu[r * n_out + o], ygpu[r * n_out + o]);
                        }
                    }
                }
            }
            CHECKF(bad == 0, "%s: %d of %lld products off", qt->name, bad,
                   (long long)(n_out * n_rows));
            free(wrow_f), free(xrow_f), free(wf), free(xf), free(w), free(xa), free(ycpu),
                free(ygpu);
        }
    }
    ops->close(d);
}

static void test_rmsnorm_rope(void) {
    const int64_t n = 288, rows = 3;
    float x[288 * 3], w[288], a[288 * 3], b[288 * 3];
    for (int64_t i = 0; i < n * rows; i++) {
        x[i] = glc_rand() * 4;
    }
    for (int64_t i = 0; i < n; i++) {
        w[i] = glc_rand();
    }
    for (int64_t r = 0; r < rows; r++) {
        ops_rmsnorm(x + r * n, w, n, 1e-5f, a + r * n);
    }
    lares_error err = {0};
    CHECK_OK(gpu_cuda_check_rmsnorm(x, w, n, rows, 1e-5f, b, &err), &err);
    for (int64_t i = 0; i < n * rows; i++) {
        CHECKF(fabsf(a[i] - b[i]) <= 1e-6f * (1 + fabsf(a[i])), "rmsnorm %lld: %g vs %g",
               (long long)i, a[i], b[i]);
    }
    /* 6 heads of 48, 32 rotated dims, both modes */
    const int64_t hd = 48, nh = 6, n_rot = 32;
    float cs[32], inv[16];
    for (int i = 0; i < 16; i++) {
        inv[i] = powf(10000.f, -2.f * (float)i / (float)n_rot);
    }
    ops_rope_angles(37.f, inv, n_rot, cs);
    for (int mode = 0; mode <= 2; mode += 2) {
        memcpy(a, x, sizeof(float) * (size_t)(hd * nh));
        memcpy(b, x, sizeof(float) * (size_t)(hd * nh));
        for (int64_t h = 0; h < nh; h++) {
            ops_rope(a + h * hd, hd, n_rot, cs, (ops_rope_mode)mode);
        }
        CHECK_OK(gpu_cuda_check_rope(b, nh, hd, n_rot, cs, (ops_rope_mode)mode, &err), &err);
        for (int64_t i = 0; i < hd * nh; i++) {
            CHECKF(fabsf(a[i] - b[i]) <= 1e-6f * (1 + fabsf(a[i])), "rope mode %d %lld: %g vs %g",
                   mode, (long long)i, a[i], b[i]);
        }
    }
}

static void test_attention(void) {
    /* 3 tokens at positions 5..7 over an F16 and an F32 cache, 4 heads sharing 2 */
    enum { N_TOK = 3, NH = 4, NKV = 2, HD = 32, CTX = 8 };
    float q[N_TOK * NH * HD], kf[CTX * NKV * HD], vf[CTX * NKV * HD];
    float oa[N_TOK * NH * HD], ob[N_TOK * NH * HD];
    lares_f16 kh[CTX * NKV * HD], vh[CTX * NKV * HD];
    for (size_t i = 0; i < LARES_ARRAY_LEN(q); i++) {
        q[i] = glc_rand();
    }
    for (size_t i = 0; i < LARES_ARRAY_LEN(kf); i++) {
        kf[i] = glc_rand();
        vf[i] = glc_rand();
    }
    const quant_traits *f16 = quant_traits_ref(GGUF_TYPE_F16);
    f16->from_float_ref(kf, kh, CTX * NKV * HD);
    f16->from_float_ref(vf, vh, CTX * NKV * HD);
    const int32_t pos[N_TOK] = {5, 6, 7};
    float scratch[2 * (CTX + HD)];
    for (int kvt = 0; kvt < 2; kvt++) {
        ops_attn_args a = {.q = q,
                           .out = oa,
                           .pos = pos,
                           .n_tok = N_TOK,
                           .n_head = NH,
                           .n_head_kv = NKV,
                           .head_dim = HD,
                           .scale = 1.f / sqrtf(HD),
                           .kv = {.k = kvt ? (void *)kh : kf,
                                  .v = kvt ? (void *)vh : vf,
                                  .type = kvt ? GGUF_TYPE_F16 : GGUF_TYPE_F32,
                                  .row_elems = NKV * HD},
                           .scratch = scratch,
                           .scratch_stride = CTX + HD};
        ops_attention(NULL, &a);
        a.out = ob;
        lares_error err = {0};
        CHECK_OK(gpu_cuda_check_attention(&a, CTX, &err), &err);
        for (size_t i = 0; i < LARES_ARRAY_LEN(oa); i++) {
            CHECKF(fabsf(oa[i] - ob[i]) <= 1e-5f * (1 + fabsf(oa[i])), "attention %s %zu: %g vs %g",
                   kvt ? "f16" : "f32", i, oa[i], ob[i]);
        }
    }
}

int main(void) {
    lares_error err = {0};
    char name[128];
    uint64_t vfree = 0;
    if (gpu_cuda_probe(name, sizeof name, &vfree, &err) != LARES_OK) {
        printf("test_gpu_kernels: skipped: %s\n", err.msg);
        return 77;
    }
    printf("test_gpu_kernels: %s, %" PRIu64 " MiB free\n", name, vfree >> 20);
    test_dequant();
    test_matmul();
    test_rmsnorm_rope();
    test_attention();
    {
        const gpu_device_ops *o = gpu_cuda_ops();
        gpu_device *d = NULL;
        CHECK_OK(o->open(0, &d, name, sizeof name, &vfree, &err), &err);
        if (d != NULL) {
            gpu_layer_checks(o, d);
            o->close(d);
        }
    }
    return check_finish("test_gpu_kernels");
}
