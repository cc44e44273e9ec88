/*
 * The CUDA device behind gpu_impl.h's table: discovery and free memory,
 * uploads, products with activations copied per call (host -> device, the
 * product, device -> host on one stream), and the kernel checks the tests
 * call. Built only with -DLARES_CUDA=ON (replacing nocuda.c).
 */
#include <cuda_runtime.h>

/* the C headers of the library: C linkage, and C99's restrict spelled for C++ */
#define restrict __restrict__
extern "C" {
#include "gpu/gpu_impl.h"
}
#undef restrict
#include "gpu/cuda/cuda_impl.h"
#include "gpu/gpu_types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct gpu_device {
    int ordinal;
    cudaStream_t stream;
    void *act;       /* activations of one product, grown to the largest seen */
    size_t act_cap;
    float *y;        /* its outputs */
    size_t y_cap;
};

static lares_status cuda_fail(lares_error *err, cudaError_t e, const char *what) {
    return lares_fail(err, e == cudaErrorMemoryAllocation ? LARES_ENOMEM : LARES_EIO,
                      "cuda: %s: %s", what, cudaGetErrorString(e));
}

extern "C" lares_status gpu_cuda_probe(char *name, size_t cap, uint64_t *vram_free,
                                       lares_error *err) {
    if (name != nullptr && cap > 0) {
        name[0] = '\0';
    }
    if (vram_free != nullptr) {
        *vram_free = 0;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        return lares_fail(err, LARES_ENOTFOUND, "cuda: no device (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    }
    cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess ||
        (e = cudaSetDevice(0)) != cudaSuccess || (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
        return lares_fail(err, LARES_ENOTFOUND, "cuda: device 0 unusable (%s)",
                          cudaGetErrorString(e));
    }
    if (name != nullptr && cap > 0) {
        snprintf(name, cap, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
    }
    if (vram_free != nullptr) {
        *vram_free = free_b;
    }
    return LARES_OK;
}

static void cuda_close(gpu_device *d) {
    if (d == nullptr) {
        return;
    }
    cudaFree(d->act);
    cudaFree(d->y);
    if (d->stream != nullptr) {
        cudaStreamDestroy(d->stream);
    }
    lares_free(d);
}

static lares_status cuda_open(uint64_t, gpu_device **out, char *name, size_t cap,
                              uint64_t *vram_free, lares_error *err) {
    lares_status st = gpu_cuda_probe(name, cap, vram_free, err);
    if (st != LARES_OK) {
        return st;
    }
    gpu_device *d = (gpu_device *)lares_calloc(1, sizeof(*d));
    if (d == nullptr) {
        return lares_fail(err, LARES_ENOMEM, "cuda: out of host memory");
    }
    cudaError_t e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cuda_close(d);
        return cuda_fail(err, e, "creating a stream");
    }
    *out = d;
    return LARES_OK;
}

static lares_status cuda_upload(gpu_device *, const void *host, size_t bytes, void **dev,
                                lares_error *err) {
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        return cuda_fail(err, e, "allocating device memory");
    }
    if ((e = cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
        cudaFree(p);
        return cuda_fail(err, e, "uploading weights");
    }
    *dev = p;
    return LARES_OK;
}

static void cuda_release(gpu_device *, void *dev) {
    cudaFree(dev);
}

/* grows a device buffer to at least `bytes` (only ever up: sized once by the
 * largest product of the first pass) */
static cudaError_t ensure(void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) {
        return cudaSuccess;
    }
    cudaFree(*buf);
    *buf = nullptr;
    *cap = 0;
    cudaError_t e = cudaMalloc(buf, bytes);
    if (e == cudaSuccess) {
        *cap = bytes;
    }
    return e;
}

static lares_status cuda_matmul(gpu_device *d, const void *w_dev, uint32_t w_type, int64_t n_in,
                                int64_t n_out, const ops_act *a, float *y, lares_error *err) {
    const quant_traits *qt = quant_traits_ref(w_type);
    if (!cu_type_ok(w_type) || qt == nullptr || qt->vec_dot_type != a->type || a->n_in != n_in) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "cuda: no product of a type %u matrix with type %u activations",
                          (unsigned)w_type, (unsigned)a->type);
    }
    const size_t act_bytes = a->row_bytes * (size_t)a->n_rows;
    const size_t y_bytes = sizeof(float) * (size_t)n_out * (size_t)a->n_rows;
    void *ybuf = d->y;
    cudaError_t e = ensure(&d->act, &d->act_cap, act_bytes);
    if (e == cudaSuccess) {
        e = ensure(&ybuf, &d->y_cap, y_bytes);
        d->y = (float *)ybuf;
    }
    if (e != cudaSuccess) {
        return cuda_fail(err, e, "allocating product buffers");
    }
    if ((e = cudaMemcpyAsync(d->act, a->data, act_bytes, cudaMemcpyHostToDevice, d->stream)) !=
            cudaSuccess ||
        (e = cu_matmul(w_dev, w_type, n_in, n_out, d->act, a->row_bytes, a->n_rows, d->y,
                       d->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(y, d->y, y_bytes, cudaMemcpyDeviceToHost, d->stream)) !=
            cudaSuccess ||
        (e = cudaStreamSynchronize(d->stream)) != cudaSuccess) {
        return cuda_fail(err, e, "a product");
    }
    return LARES_OK;
}

/* ---- whole-layer ops: queued on the stream; `get` waits ---- */

static lares_status launched(cudaError_t e, const char *what, lares_error *err) {
    return e == cudaSuccess ? LARES_OK : cuda_fail(err, e, what);
}

static lares_status cuda_alloc(gpu_device *d, size_t bytes, void **dev, lares_error *err) {
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess && (e = cudaMemsetAsync(p, 0, bytes, d->stream)) != cudaSuccess) {
        cudaFree(p);
    }
    if (e != cudaSuccess) {
        return cuda_fail(err, e, "allocating device memory");
    }
    *dev = p;
    return LARES_OK;
}

static lares_status cuda_put(gpu_device *d, void *dev, const void *host, size_t bytes,
                             lares_error *err) {
    /* from pageable memory the call returns once the bytes are staged */
    return launched(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, d->stream),
                    "a copy to the device", err);
}

static lares_status cuda_get(gpu_device *d, void *host, const void *dev, size_t bytes,
                             lares_error *err) {
    cudaError_t e = cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, d->stream);
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(d->stream);
    }
    return launched(e, "a copy from the device", err);
}

static lares_status cuda_norm(gpu_device *d, const float *x, const float *w, int64_t n,
                              int64_t rows, float eps, float *out, lares_error *err) {
    return launched(cu_rmsnorm(x, w, n, rows, eps, out, d->stream), "rmsnorm", err);
}

static lares_status cuda_quant(gpu_device *d, const float *x, int64_t rows, int64_t n,
                               uint32_t type, void *out, lares_error *err) {
    return launched(cu_quant(x, rows, n, type, out, d->stream), "quantizing activations", err);
}

static lares_status cuda_mm(gpu_device *d, const void *w, uint32_t w_type, int64_t n_in,
                            int64_t n_out, const void *act, size_t act_row_bytes, int64_t rows,
                            float *y, lares_error *err) {
    return launched(cu_matmul(w, w_type, n_in, n_out, act, act_row_bytes, rows, y, d->stream),
                    "a product", err);
}

static lares_status cuda_rope(gpu_device *d, float *x, int64_t n_tok, int64_t n_heads,
                              int64_t head_dim, int64_t n_rot, const float *cs,
                              ops_rope_mode mode, lares_error *err) {
    return launched(cu_rope(x, n_tok, n_heads, head_dim, n_rot, cs, (int)mode, d->stream),
                    "rope", err);
}

static lares_status cuda_kv_store(gpu_device *d, const float *src, int64_t n_tok,
                                  int64_t row_elems, const int32_t *pos, void *dst, bool f16,
                                  lares_error *err) {
    return launched(cu_kv_store(src, n_tok, row_elems, pos, dst, f16, d->stream),
                    "storing K and V", err);
}

static lares_status cuda_attend(gpu_device *d, const gpu_attend_args *a, lares_error *err) {
    return launched(cu_attention(a, d->stream), "attention", err);
}

static lares_status cuda_add(gpu_device *d, float *x, const float *y, int64_t n,
                             lares_error *err) {
    return launched(cu_add(x, y, n, d->stream), "a residual", err);
}

static lares_status cuda_swiglu(gpu_device *d, float *g, const float *u, int64_t n,
                                lares_error *err) {
    return launched(cu_swiglu(g, u, n, d->stream), "swiglu", err);
}

static const gpu_device_ops cuda_ops = {
    "cuda",     cuda_open, cuda_close,    cuda_upload, cuda_release, cuda_matmul,
    cuda_alloc, cuda_put,  cuda_get,      cuda_norm,   cuda_quant,   cuda_mm,
    cuda_rope,  cuda_kv_store, cuda_attend, cuda_add,  cuda_swiglu,
};

extern "C" const gpu_device_ops *gpu_cuda_ops(void) {
    return &cuda_ops;
}

/* ---- the device profiler: its own kernels and copies timed ---- */

namespace {
__global__ void empty_kernel() {}

double seconds_since(uint64_t t0_ns) {
    return (double)(lares_now_ns() - t0_ns) / 1e9;
}

/* the seconds of one copy, waited for; *e its status */
double timed_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st,
                  cudaError_t *e) {
    const uint64_t t0 = lares_now_ns();
    *e = cudaMemcpyAsync(dst, src, bytes, kind, st);
    if (*e == cudaSuccess) {
        *e = cudaStreamSynchronize(st);
    }
    return seconds_since(t0);
}
} // namespace

extern "C" lares_status gpu_cuda_measure(gpu_est_rates *r, lares_error *err) {
    cudaStream_t st;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        return cuda_fail(err, e, "profiling: a stream");
    }
    const size_t big = (size_t)64 << 20, small = 4096;
    const int64_t n = 4096; /* a 4096 x 4096 matrix per type */
    void *host = malloc(big), *dbuf = nullptr, *dact = nullptr;
    float *dy = nullptr;
    lares_status res = LARES_OK;
    if (host == nullptr) {
        cudaStreamDestroy(st);
        return lares_fail(err, LARES_ENOMEM, "profiling: host memory");
    }
    memset(host, 1, big);
    if ((e = cudaMalloc(&dbuf, big)) != cudaSuccess ||
        (e = cudaMalloc(&dact, (size_t)32 * n * 4)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dy, (size_t)32 * n * sizeof(float))) != cudaSuccess ||
        (e = cudaMemsetAsync(dact, 0, (size_t)32 * n * 4, st)) != cudaSuccess) {
        res = cuda_fail(err, e, "profiling: device memory");
        goto done;
    }
    {
        /* copies: a small one waited for (latency), then 64 MiB each way */
        double best = 1e9;
        for (int i = 0; i < 20 && e == cudaSuccess; i++) {
            best = fmin(best, timed_copy(dbuf, host, small, cudaMemcpyHostToDevice, st, &e));
        }
        r->link.latency_s = best;
        double h2d = 1e9, d2h = 1e9;
        for (int i = 0; i < 3 && e == cudaSuccess; i++) {
            h2d = fmin(h2d, timed_copy(dbuf, host, big, cudaMemcpyHostToDevice, st, &e));
            if (e == cudaSuccess) {
                d2h = fmin(d2h, timed_copy(host, dbuf, big, cudaMemcpyDeviceToHost, st, &e));
            }
        }
        r->link.h2d_Bps = (double)big / h2d;
        r->link.d2h_Bps = (double)big / d2h;
        /* a kernel waited for, and kernels queued behind each other */
        double launch = 1e9;
        for (int i = 0; i < 20 && e == cudaSuccess; i++) {
            const uint64_t t0 = lares_now_ns();
            empty_kernel<<<1, 32, 0, st>>>();
            e = cudaStreamSynchronize(st);
            launch = fmin(launch, seconds_since(t0));
        }
        const uint64_t t0 = lares_now_ns();
        for (int i = 0; i < 200 && e == cudaSuccess; i++) {
            empty_kernel<<<1, 32, 0, st>>>();
        }
        if (e == cudaSuccess) {
            e = cudaStreamSynchronize(st);
        }
        r->gpu_launch_s = launch;
        r->gpu_queue_s = seconds_since(t0) / 200;
        /* each type's mat-vec (bytes per second) and a 32-row Q4_K product (FLOP/s) */
        cudaEvent_t a, b;
        if (e == cudaSuccess && (e = cudaEventCreate(&a)) == cudaSuccess &&
            (e = cudaEventCreate(&b)) == cudaSuccess) {
const uint32_t types[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K,
                                      GGUF_TYPE_F16};
            for (size_t k = 0; k < sizeof(types) / sizeof(types[0]) && e == cudaSuccess; k++) {
                const uint32_t type = types[k];
                const size_t wbytes = quant_row_bytes(type, n) * (size_t)n;
                const size_t arow = quant_row_bytes(quant_traits_ref(type)->vec_dot_type, n);
                for (int rows = 1; rows <= 32 && e == cudaSuccess; rows += 31) {
                    float best_t = 1e9f;
                    for (int i = 0; i < 5 && e == cudaSuccess; i++) {
                        float ms = 0;
                        cudaEventRecord(a, st);
                        e = cu_matmul(dbuf, type, n, n, dact, arow, rows, dy, st);
                        cudaEventRecord(b, st);
                        if (e == cudaSuccess && (e = cudaEventSynchronize(b)) == cudaSuccess) {
                            cudaEventElapsedTime(&ms, a, b);
                            best_t = fminf(best_t, ms * 1e-3f);
                        }
                    }
                    if (rows == 1) {
                        r->gpu_Bps_type[type] = (double)wbytes / best_t;
                    } else if (type == GGUF_TYPE_Q4_K) {
                        r->gpu_flops = 2.0 * (double)n * (double)n * 32 / best_t;
                    }
                }
            }
            cudaEventDestroy(a);
            cudaEventDestroy(b);
        }
        double bw = 0;
        for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
            bw = fmax(bw, r->gpu_Bps_type[t]);
        }
        if (bw > 0) {
            r->gpu_bw_Bps = bw;
        }
        if (e != cudaSuccess) {
            res = cuda_fail(err, e, "profiling");
        }
    }
done:
    cudaFree(dbuf);
    cudaFree(dact);
    cudaFree(dy);
    cudaStreamDestroy(st);
    free(host);
    return res;
}

/* ---- kernel checks (tests/test_gpu_kernels.c) ---- */

/* device copies of host buffers for one check; freed together */
struct scratch {
    void *p[8] = {};
    int n = 0;
    cudaError_t e = cudaSuccess;
    void *put(const void *host, size_t bytes) {
        void *q = nullptr;
        if (e == cudaSuccess && (e = cudaMalloc(&q, bytes)) == cudaSuccess) {
            p[n++] = q;
            if (host != nullptr) {
                e = cudaMemcpy(q, host, bytes, cudaMemcpyHostToDevice);
            }
        }
        return q;
    }
    ~scratch() {
        for (int i = 0; i < n; i++) {
            cudaFree(p[i]);
        }
    }
};

static lares_status finish(scratch &s, void *host, const void *dev, size_t bytes,
                           cudaError_t launch, const char *what, lares_error *err) {
    cudaError_t e = s.e != cudaSuccess ? s.e : launch;
    if (e == cudaSuccess) {
        e = cudaDeviceSynchronize();
    }
    if (e == cudaSuccess) {
        e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    }
    return e == cudaSuccess ? LARES_OK : cuda_fail(err, e, what);
}

extern "C" lares_status gpu_cuda_check_dequant(uint32_t type, const void *src, size_t src_bytes,
                                               int64_t n, float *out, lares_error *err) {
    scratch s;
    void *ds = s.put(src, src_bytes);
    float *dy = (float *)s.put(nullptr, sizeof(float) * (size_t)n);
    const cudaError_t l = s.e == cudaSuccess ? cu_dequant(ds, type, n, dy, 0) : s.e;
    return finish(s, out, dy, sizeof(float) * (size_t)n, l, "dequantization", err);
}

extern "C" lares_status gpu_cuda_check_rmsnorm(const float *x, const float *w, int64_t n,
                                               int64_t rows, float eps, float *out,
                                               lares_error *err) {
    scratch s;
    const size_t bytes = sizeof(float) * (size_t)(n * rows);
    float *dx = (float *)s.put(x, bytes);
    float *dw = w != nullptr ? (float *)s.put(w, sizeof(float) * (size_t)n) : nullptr;
    float *dy = (float *)s.put(nullptr, bytes);
    const cudaError_t l = s.e == cudaSuccess ? cu_rmsnorm(dx, dw, n, rows, eps, dy, 0) : s.e;
    return finish(s, out, dy, bytes, l, "rmsnorm", err);
}

extern "C" lares_status gpu_cuda_check_rope(float *x, int64_t n_heads, int64_t head_dim,
                                            int64_t n_rot, const float *cs, ops_rope_mode mode,
                                            lares_error *err) {
    scratch s;
    const size_t bytes = sizeof(float) * (size_t)(n_heads * head_dim);
    float *dx = (float *)s.put(x, bytes);
    float *dc = (float *)s.put(cs, sizeof(float) * (size_t)n_rot);
    const cudaError_t l =
        s.e == cudaSuccess ? cu_rope(dx, 1, n_heads, head_dim, n_rot, dc, (int)mode, 0) : s.e;
    return finish(s, x, dx, bytes, l, "rope", err);
}

extern "C" lares_status gpu_cuda_check_attention(const ops_attn_args *a, int64_t n_kv_rows,
                                                 lares_error *err) {
    scratch s;
    const size_t qbytes = sizeof(float) * (size_t)(a->n_tok * a->n_head * a->head_dim);
    const size_t esz = a->kv.type == GGUF_TYPE_F16 ? 2 : 4;
    const size_t kvbytes = esz * a->kv.row_elems * (size_t)n_kv_rows;
    int64_t n_kv_max = 0;
    for (int64_t t = 0; t < a->n_tok; t++) {
        n_kv_max = a->pos[t] + 1 > n_kv_max ? a->pos[t] + 1 : n_kv_max;
    }
    if (n_kv_max > n_kv_rows) {
        return lares_fail(err, LARES_EINVAL, "cuda attention check: position %lld past %lld rows",
                          (long long)(n_kv_max - 1), (long long)n_kv_rows);
    }
    gpu_attend_args c;
    c.q = (const float *)s.put(a->q, qbytes);
    c.out = (float *)s.put(nullptr, qbytes);
    c.pos = (const int32_t *)s.put(a->pos, sizeof(int32_t) * (size_t)a->n_tok);
    c.k = s.put(a->kv.k, kvbytes);
    c.v = s.put(a->kv.v, kvbytes);
    c.n_tok = a->n_tok;
    c.n_head = a->n_head;
    c.n_head_kv = a->n_head_kv;
    c.head_dim = a->head_dim;
    c.scale = a->scale;
    c.kv_f16 = a->kv.type == GGUF_TYPE_F16;
    c.n_kv_max = n_kv_max;
    const cudaError_t l = s.e == cudaSuccess ? cu_attention(&c, 0) : s.e;
    return finish(s, a->out, c.out, qbytes, l, "attention", err);
}
