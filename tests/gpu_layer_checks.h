/*
 * Checks of a device's whole-layer ops (gpu_impl.h) against the CPU's own
 * code, for any device: test_gpu_kernels runs them on CUDA, test_gpu_session
 * on the emulated device. Activation codes and F16 cache rows must be equal
 * byte for byte; float results within a few ulps of ops/'s.
 */
#ifndef LARES_TEST_GPU_LAYER_CHECKS_H
#define LARES_TEST_GPU_LAYER_CHECKS_H

#include "check.h"
#include "gpu/gpu_impl.h"
#include "quant/half.h"
#include "quant/quant.h"

#include <math.h>

static uint64_t glc_rng = 0x2545f4914f6cdd1du;

static float glc_rand(void) { /* xorshift64*, uniform in [-1, 1) */
    glc_rng ^= glc_rng >> 12;
    glc_rng ^= glc_rng << 25;
    glc_rng ^= glc_rng >> 27;
    return (float)((double)((glc_rng * 2685821657736338717u) >> 11) / 9007199254740992.0 * 2 - 1);
}

/* a device buffer holding host bytes (NULL: zeroed) */
static void *glc_put(const gpu_device_ops *o, gpu_device *d, const void *host, size_t bytes) {
    lares_error err = {0};
    void *p = NULL;
    CHECK_OK(o->alloc(d, bytes, &p, &err), &err);
    if (p != NULL && host != NULL) {
        CHECK_OK(o->put(d, p, host, bytes, &err), &err);
    }
    return p;
}

static void glc_get(const gpu_device_ops *o, gpu_device *d, void *host, const void *dev,
                    size_t bytes) {
    lares_error err = {0};
    CHECK_OK(o->get(d, host, dev, bytes, &err), &err);
}

static bool glc_close(float a, float b, float rel) {
    return fabsf(a - b) <= rel * (1 + fabsf(a));
}

static void gpu_layer_checks(const gpu_device_ops *o, gpu_device *d) {
    lares_error err = {0};
    /* activations: Q8_0 and Q8_K codes equal to the reference quantizer's, with
     * an all-zero block, ties of magnitude (+m and -m) and large values */
    enum { ROWS = 3, N = 768 };
    static float x[ROWS * N];
    for (int i = 0; i < ROWS * N; i++) {
        x[i] = glc_rand() * (1 + (float)(i % 11));
    }
    for (int i = 256; i < 512; i++) {
        x[i] = 0; /* row 0's second Q8_K block, eight Q8_0 blocks */
    }
    x[N + 5] = 40.f, x[N + 9] = -40.f; /* a tie: the first sets the sign */
    x[2 * N + 300] = -3e4f, x[2 * N + 301] = 3e4f;
    const uint32_t act_types[] = {GGUF_TYPE_Q8_0, GGUF_TYPE_Q8_K};
    float *dx = glc_put(o, d, x, sizeof x);
    for (size_t k = 0; k < LARES_ARRAY_LEN(act_types); k++) {
        const quant_traits *qt = quant_traits_ref(act_types[k]);
        const size_t rb = quant_row_bytes(act_types[k], N);
        uint8_t *want = malloc(rb * ROWS), *got = malloc(rb * ROWS);
        for (int r = 0; r < ROWS; r++) {
            qt->from_float_ref(x + r * N, want + (size_t)r * rb, N);
        }
        void *dq = glc_put(o, d, NULL, rb * ROWS);
        CHECK_OK(o->quant(d, dx, ROWS, N, act_types[k], dq, &err), &err);
        glc_get(o, d, got, dq, rb * ROWS);
        CHECKF(memcmp(want, got, rb * ROWS) == 0, "%s: device activation codes differ", qt->name);
        o->release(d, dq);
        free(want), free(got);
    }
    /* a product from activations quantized on the device: the CPU's dot of the
     * same codes (the order of the float sums differs) */
    {
        enum { NO = 37 };
        const quant_traits *wt = quant_traits_ref(GGUF_TYPE_Q4_K);
        const size_t wrb = quant_row_bytes(GGUF_TYPE_Q4_K, N),
                     arb = quant_row_bytes(GGUF_TYPE_Q8_K, N);
        float *wf = malloc(sizeof(float) * NO * N);
        uint8_t *w = malloc(wrb * NO), *a = malloc(arb * ROWS);
        for (int i = 0; i < NO * N; i++) {
            wf[i] = glc_rand();
        }
        wt->from_float_ref(wf, w, (int64_t)NO * N);
        for (int r = 0; r < ROWS; r++) {
            quant_traits_ref(GGUF_TYPE_Q8_K)->from_float_ref(x + r * N, a + (size_t)r * arb, N);
        }
        void *dw = glc_put(o, d, w, wrb * NO), *da = glc_put(o, d, NULL, arb * ROWS);
        float *dy = glc_put(o, d, NULL, sizeof(float) * NO * ROWS);
        CHECK_OK(o->quant(d, dx, ROWS, N, GGUF_TYPE_Q8_K, da, &err), &err);
        CHECK_OK(o->mm(d, dw, GGUF_TYPE_Q4_K, N, NO, da, arb, ROWS, dy, &err), &err);
        float y[NO * ROWS];
        glc_get(o, d, y, dy, sizeof y);
        int bad = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < NO; i++) {
                float c;
                wt->vec_dot(N, &c, w + (size_t)i * wrb, a + (size_t)r * arb);
                bad += !glc_close(c, y[r * NO + i], 1e-4f);
            }
        }
        CHECKF(bad == 0, "q4_K product of device activations: %d of %d off", bad, NO * ROWS);
        o->release(d, dw), o->release(d, da), o->release(d, dy);
        free(wf), free(w), free(a);
    }
    /* norm, add, swiglu */
    {
        float w[N], a[ROWS * N], b[ROWS * N];
        for (int i = 0; i < N; i++) {
            w[i] = glc_rand();
        }
        float *dw = glc_put(o, d, w, sizeof w), *dout = glc_put(o, d, NULL, sizeof b);
        CHECK_OK(o->norm(d, dx, dw, N, ROWS, 1e-6f, dout, &err), &err);
        glc_get(o, d, b, dout, sizeof b);
        int bad = 0;
        for (int r = 0; r < ROWS; r++) {
            ops_rmsnorm(x + r * N, w, N, 1e-6f, a + r * N);
        }
        for (int i = 0; i < ROWS * N; i++) {
            bad += !glc_close(a[i], b[i], 1e-6f);
        }
        CHECKF(bad == 0, "norm: %d values off", bad);
        /* add: out += x; swiglu: out = silu(out) * x */
        memcpy(a, b, sizeof a);
        ops_add(a, x, ROWS * N);
        CHECK_OK(o->add(d, dout, dx, ROWS * N, &err), &err);
        glc_get(o, d, b, dout, sizeof b);
        CHECKF(memcmp(a, b, sizeof a) == 0, "add differs");
        ops_swiglu(a, x, ROWS * N);
        CHECK_OK(o->swiglu(d, dout, dx, ROWS * N, &err), &err);
        glc_get(o, d, b, dout, sizeof b);
        bad = 0;
        for (int i = 0; i < ROWS * N; i++) {
            bad += !glc_close(a[i], b[i], 1e-6f);
        }
        CHECKF(bad == 0, "swiglu: %d values off", bad);
        o->release(d, dw), o->release(d, dout);
    }
    /* RoPE of several rows at their own angles, both modes; K and V rows into
     * a cache at scattered positions, F16 and F32 */
    {
        enum { NT = 3, NH = 4, HD = 64, NROT = 48, CTX = 8 };
        float q[NT * NH * HD], ref[NT * NH * HD], got[NT * NH * HD], cs[NT * NROT], inv[NROT / 2];
        for (int i = 0; i < NROT / 2; i++) {
            inv[i] = powf(10000.f, -2.f * (float)i / (float)NROT);
        }
        for (int t = 0; t < NT; t++) {
            ops_rope_angles((float)(3 + 11 * t), inv, NROT, cs + t * NROT);
        }
        for (int i = 0; i < NT * NH * HD; i++) {
            q[i] = glc_rand() * 3;
        }
        float *dcs = glc_put(o, d, cs, sizeof cs);
        for (int mode = 0; mode <= 2; mode += 2) {
            memcpy(ref, q, sizeof q);
            for (int t = 0; t < NT; t++) {
                for (int h = 0; h < NH; h++) {
                    ops_rope(ref + (t * NH + h) * HD, HD, NROT, cs + t * NROT, (ops_rope_mode)mode);
                }
            }
            float *dq = glc_put(o, d, q, sizeof q);
            CHECK_OK(o->rope(d, dq, NT, NH, HD, NROT, dcs, (ops_rope_mode)mode, &err), &err);
            glc_get(o, d, got, dq, sizeof got);
            int bad = 0;
            for (int i = 0; i < NT * NH * HD; i++) {
                bad += !glc_close(ref[i], got[i], 1e-6f);
            }
            CHECKF(bad == 0, "rope mode %d over %d rows: %d values off", mode, NT, bad);
            o->release(d, dq);
        }
        const int32_t pos[NT] = {4, 1, 6};
        const int64_t row = NH * HD;
        int32_t *dpos = glc_put(o, d, pos, sizeof pos);
        float *dsrc = glc_put(o, d, q, sizeof q);
        for (int f16 = 0; f16 < 2; f16++) {
            const size_t esz = f16 ? 2 : 4, bytes = esz * (size_t)(CTX * row);
            uint8_t *want = calloc(1, bytes), *have = malloc(bytes);
            for (int t = 0; t < NT; t++) {
                if (f16) {
                    quant_traits_ref(GGUF_TYPE_F16)
                        ->from_float_ref(q + t * row,
                                         (lares_f16 *)want + (size_t)pos[t] * (size_t)row, row);
                } else {
                    memcpy((float *)want + (size_t)pos[t] * (size_t)row, q + t * row,
                           sizeof(float) * (size_t)row);
                }
            }
            void *dkv = glc_put(o, d, NULL, bytes);
            CHECK_OK(o->kv_store(d, dsrc, NT, row, dpos, dkv, f16, &err), &err);
            glc_get(o, d, have, dkv, bytes);
            CHECKF(memcmp(want, have, bytes) == 0, "kv store (%s) differs", f16 ? "f16" : "f32");
            o->release(d, dkv);
            free(want), free(have);
        }
        o->release(d, dpos), o->release(d, dsrc), o->release(d, dcs);
    }
    /* attention over a device cache, positions on the device: ops_attention's */
    {
        enum { NT = 3, NH = 8, NKV = 2, HD = 64, CTX = 12 };
        static float q[NT * NH * HD], kf[CTX * NKV * HD], vf[CTX * NKV * HD], a[NT * NH * HD],
            b[NT * NH * HD], scratch[(NH / NKV) * CTX + HD];
        static lares_f16 kh[CTX * NKV * HD], vh[CTX * NKV * HD];
        for (int i = 0; i < NT * NH * HD; i++) {
            q[i] = glc_rand();
        }
        for (int i = 0; i < CTX * NKV * HD; i++) {
            kf[i] = glc_rand(), vf[i] = glc_rand();
        }
        quant_traits_ref(GGUF_TYPE_F16)->from_float_ref(kf, kh, CTX * NKV * HD);
        quant_traits_ref(GGUF_TYPE_F16)->from_float_ref(vf, vh, CTX * NKV * HD);
        const int32_t pos[NT] = {9, 10, 11};
        int32_t *dpos = glc_put(o, d, pos, sizeof pos);
        float *dq = glc_put(o, d, q, sizeof q), *dout = glc_put(o, d, NULL, sizeof b);
        for (int f16 = 0; f16 < 2; f16++) {
            const void *k = f16 ? (const void *)kh : kf, *v = f16 ? (const void *)vh : vf;
            const size_t bytes = (f16 ? 2 : 4) * (size_t)(CTX * NKV * HD);
            ops_attn_args oa = {.q = q,
                                .out = a,
                                .pos = pos,
                                .n_tok = NT,
                                .n_head = NH,
                                .n_head_kv = NKV,
                                .head_dim = HD,
                                .scale = 0.125f,
                                .kv = {.k = (void *)k,
                                       .v = (void *)v,
                                       .type = f16 ? GGUF_TYPE_F16 : GGUF_TYPE_F32,
                                       .row_elems = NKV * HD},
                                .scratch = scratch,
                                .scratch_stride = LARES_ARRAY_LEN(scratch)};
            ops_attention(NULL, &oa);
            void *dk = glc_put(o, d, k, bytes), *dv = glc_put(o, d, v, bytes);
            const gpu_attend_args ga = {.q = dq,
                                        .out = dout,
                                        .pos = dpos,
                                        .n_tok = NT,
                                        .n_head = NH,
                                        .n_head_kv = NKV,
                                        .head_dim = HD,
                                        .scale = 0.125f,
                                        .k = dk,
                                        .v = dv,
                                        .kv_f16 = f16,
                                        .n_kv_max = 12};
            CHECK_OK(o->attend(d, &ga, &err), &err);
            glc_get(o, d, b, dout, sizeof b);
            int bad = 0;
            for (int i = 0; i < NT * NH * HD; i++) {
                bad += !glc_close(a[i], b[i], 1e-5f);
            }
            CHECKF(bad == 0, "attention over a device cache (%s): %d values off",
                   f16 ? "f16" : "f32", bad);
            o->release(d, dk), o->release(d, dv);
        }
        o->release(d, dpos), o->release(d, dq), o->release(d, dout);
    }
    o->release(d, dx);
}

#endif /* LARES_TEST_GPU_LAYER_CHECKS_H */
