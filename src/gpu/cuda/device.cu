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

static const gpu_device_ops cuda_ops = {
    "cuda", cuda_open, cuda_close, cuda_upload, cuda_release, cuda_matmul,
};

extern "C" const gpu_device_ops *gpu_cuda_ops(void) {
    return &cuda_ops;
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
        s.e == cudaSuccess ? cu_rope(dx, n_heads, head_dim, n_rot, dc, (int)mode, 0) : s.e;
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
    cu_attn_args c;
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
