/*
 * The CPU side of the placement's figures, measured: how many weight bytes per
 * second this machine's kernels get through in a mat-vec, per weight type, and
 * the FLOP/s of a mat-mat. The OATO study measures per tensor type and shape;
 * the shapes here are one large square (the per-byte rate of a mat-vec barely
 * depends on the shape once the matrix exceeds the caches).
 */
#include "gpu/gpu_impl.h"
#include "gpu/gpu_types.h"

#include <math.h>

enum { N_IN = 4096, N_OUT = 4096, MM_ROWS = 32 };

/* the types the GPU runs (gpu_types.h): the CPU's rate for each */
#define TYPE_OF(type, dot, block, qk) type,
static const uint32_t device_types[] = {GPU_TYPE_TABLE(TYPE_OF)};
#undef TYPE_OF

/* seconds per product of w with a, the best of a few runs of >= 20 ms each */
static double time_product(ops_pool *pool, const ops_matrix *w, const ops_act *a, float *y) {
    const ops_matrix *ws[] = {w};
    const ops_act *as[] = {a};
    float *ys[] = {y};
    ops_matmul(pool, 1, ws, as, ys); /* warm: pages, caches, threads */
    double best = INFINITY;
    for (int round = 0; round < 3; round++) {
        int reps = 0;
        const uint64_t t0 = lares_now_ns();
        uint64_t t1;
        do {
            ops_matmul(pool, 1, ws, as, ys);
            reps++;
            t1 = lares_now_ns();
        } while (t1 - t0 < 20000000u);
        best = fmin(best, (double)(t1 - t0) * 1e-9 / reps);
    }
    return best;
}

lares_status gpu_measure_cpu(ops_pool *pool, gpu_est_rates *r, lares_error *err) {
    float *x = lares_alloc_array((size_t)N_IN * N_OUT, sizeof(float));
    float *y = lares_alloc_array((size_t)N_OUT * MM_ROWS, sizeof(float));
    void *w = lares_alloc_aligned((size_t)N_IN * N_OUT * 4, 64); /* F32: the largest */
    void *act = lares_alloc_aligned(ops_act_bytes(GGUF_TYPE_F32, MM_ROWS, N_IN) + 64, 64);
    lares_status st = LARES_OK;
    if (x == NULL || y == NULL || w == NULL || act == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "gpu: measuring the cpu: out of memory");
        goto done;
    }
    /* deterministic values with spread (the kernels' speed does not depend on them) */
    for (size_t i = 0; i < (size_t)N_IN * N_OUT; i++) {
        x[i] = sinf((float)i * 0.618f);
    }
    for (size_t k = 0; k < LARES_ARRAY_LEN(device_types); k++) {
        const uint32_t type = device_types[k];
        const quant_traits *qt = quant_traits_of(type);
        ops_matrix m;
        if (qt == NULL ||
            (st = ops_matrix_init(&m, w, type, N_IN, N_OUT, "measure", err)) != LARES_OK) {
            st = st != LARES_OK ? st : lares_fail(err, LARES_EUNSUPPORTED, "gpu: type %u", type);
            goto done;
        }
        /* one row quantized by the reference rules, copied to every row: the
         * speed does not depend on the values, and K-quant fitting is slow */
        qt->from_float_ref(x, w, N_IN);
        for (int64_t o = 1; o < N_OUT; o++) {
            memcpy((uint8_t *)w + (size_t)o * m.row_bytes, w, m.row_bytes);
        }
        ops_act a;
        ops_act_prepare(pool, x, 1, N_IN, qt->vec_dot_type, act, &a);
        const double s = time_product(pool, &m, &a, y);
        r->cpu_Bps_type[type] = (double)m.row_bytes * N_OUT / s;
        if (type == GGUF_TYPE_Q4_K) {
            ops_act_prepare(pool, x, MM_ROWS, N_IN, qt->vec_dot_type, act, &a);
            r->cpu_flops = 2.0 * N_IN * N_OUT * MM_ROWS / time_product(pool, &m, &a, y);
        }
    }
done:
    lares_free(x);
    lares_free(y);
    lares_free_aligned(w);
    lares_free_aligned(act);
    return st;
}
