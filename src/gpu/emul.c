/*
 * The emulated device: "device memory" is host memory (counted by the
 * allocation gate and capped at the size asked for), products run with the
 * scalar reference kernels of quant/. It drives the session's orchestration
 * (placement, upload, the ops_matmul hook) in builds and on machines without
 * CUDA, so those are tested everywhere. The whole-layer ops run quant/'s and
 * ops/'s CPU code on host memory, one thread, so a layer on the emulated
 * device computes what the CPU path computes (the products with the scalar
 * reference dots, summed in another order than the CPU's vector kernels).
 */
#include "gpu/gpu_impl.h"
#include "quant/half.h"

#include <stddef.h>

struct gpu_device {
    uint64_t vram_bytes;
    uint64_t used_bytes;
};

static lares_status emul_open(uint64_t emul_vram_bytes, gpu_device **out, char *name, size_t cap,
                              uint64_t *vram_free, lares_error *err) {
    gpu_device *d = lares_calloc(1, sizeof(*d));
    if (d == NULL) {
        return lares_fail(err, LARES_ENOMEM, "emulated gpu: out of memory");
    }
    d->vram_bytes = emul_vram_bytes > 0 ? emul_vram_bytes : (uint64_t)1 << 30;
    if (name != NULL && cap > 0) {
        snprintf(name, cap, "emulated (%" PRIu64 " MiB, reference kernels)", d->vram_bytes >> 20);
    }
    *vram_free = d->vram_bytes;
    *out = d;
    return LARES_OK;
}

static void emul_close(gpu_device *d) {
    lares_free(d);
}

/* a buffer remembers its size so release can give the bytes back; the
 * device handle is the data itself, so handles plus offsets are pointers */
typedef struct emul_buf {
    size_t bytes;
    _Alignas(64) unsigned char data[];
} emul_buf;

static emul_buf *buf_of(void *dev) {
    return (emul_buf *)(void *)((unsigned char *)dev - offsetof(emul_buf, data));
}

static lares_status emul_alloc(gpu_device *d, size_t bytes, void **dev, lares_error *err) {
    size_t total;
    if (!lares_add_size(sizeof(emul_buf), bytes, &total) || d->used_bytes + bytes > d->vram_bytes) {
        return lares_fail(err, LARES_ENOMEM,
                          "emulated gpu: %zu bytes do not fit (%" PRIu64 " of %" PRIu64 " used)",
                          bytes, d->used_bytes, d->vram_bytes);
    }
    emul_buf *b = lares_alloc_aligned(total, 64);
    if (b == NULL) {
        return lares_fail(err, LARES_ENOMEM, "emulated gpu: %zu bytes: out of host memory", bytes);
    }
    b->bytes = bytes;
    memset(b->data, 0, bytes);
    d->used_bytes += bytes;
    *dev = b->data;
    return LARES_OK;
}

static lares_status emul_upload(gpu_device *d, const void *host, size_t bytes, void **dev,
                                lares_error *err) {
    lares_status st = emul_alloc(d, bytes, dev, err);
    if (st == LARES_OK) {
        memcpy(*dev, host, bytes);
    }
    return st;
}

static void emul_release(gpu_device *d, void *dev) {
    if (dev == NULL) {
        return;
    }
    emul_buf *b = buf_of(dev);
    d->used_bytes -= b->bytes;
    lares_free_aligned(b);
}

/* rows of activations (any vec_dot_type) against a matrix, scalar reference dots */
static void mm_rows(const void *w, uint32_t w_type, int64_t n_in, int64_t n_out, const void *act,
                    size_t act_row_bytes, int64_t rows, float *y) {
    const quant_traits *qt = quant_traits_ref(w_type);
    const size_t row_bytes = quant_row_bytes(w_type, n_in);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *x = (const uint8_t *)act + (size_t)r * act_row_bytes;
        for (int64_t o = 0; o < n_out; o++) {
            qt->vec_dot(n_in, &y[r * n_out + o], (const uint8_t *)w + (size_t)o * row_bytes, x);
        }
    }
}

static lares_status emul_matmul(gpu_device *d, const void *w_dev, uint32_t w_type, int64_t n_in,
                                int64_t n_out, const ops_act *a, float *y, lares_error *err) {
    (void)d;
    const quant_traits *qt = quant_traits_ref(w_type);
    if (qt == NULL || qt->vec_dot == NULL || qt->vec_dot_type != a->type || a->n_in != n_in) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "emulated gpu: no product of a type %u matrix with type %u activations",
                          (unsigned)w_type, (unsigned)a->type);
    }
    mm_rows(w_dev, w_type, n_in, n_out, a->data, a->row_bytes, a->n_rows, y);
    return LARES_OK;
}

/* ---- whole-layer ops: host memory, the CPU's own code ---- */

static lares_status emul_put(gpu_device *d, void *dev, const void *host, size_t bytes,
                             lares_error *err) {
    (void)d, (void)err;
    memcpy(dev, host, bytes);
    return LARES_OK;
}

static lares_status emul_get(gpu_device *d, void *host, const void *dev, size_t bytes,
                             lares_error *err) {
    (void)d, (void)err;
    memcpy(host, dev, bytes);
    return LARES_OK;
}

static lares_status emul_norm(gpu_device *d, const float *x, const float *w, int64_t n,
                              int64_t rows, float eps, float *out, lares_error *err) {
    (void)d, (void)err;
    for (int64_t r = 0; r < rows; r++) {
        ops_rmsnorm(x + r * n, w, n, eps, out + r * n);
    }
    return LARES_OK;
}

static lares_status emul_quant(gpu_device *d, const float *x, int64_t rows, int64_t n,
                               uint32_t type, void *out, lares_error *err) {
    (void)d;
    const quant_traits *qt = quant_traits_of(type);
    if (qt == NULL || qt->from_float == NULL) {
        return lares_fail(err, LARES_EUNSUPPORTED, "emulated gpu: no quantizer for type %u",
                          (unsigned)type);
    }
    const size_t rb = quant_row_bytes(type, n);
    for (int64_t r = 0; r < rows; r++) {
        qt->from_float(x + r * n, (uint8_t *)out + (size_t)r * rb, n);
    }
    return LARES_OK;
}

static lares_status emul_mm(gpu_device *d, const void *w, uint32_t w_type, int64_t n_in,
                            int64_t n_out, const void *act, size_t act_row_bytes, int64_t rows,
                            float *y, lares_error *err) {
    (void)d, (void)err;
    mm_rows(w, w_type, n_in, n_out, act, act_row_bytes, rows, y);
    return LARES_OK;
}

static lares_status emul_rope(gpu_device *d, float *x, int64_t n_tok, int64_t n_heads,
                              int64_t head_dim, int64_t n_rot, const float *cs,
                              ops_rope_mode mode, lares_error *err) {
    (void)d, (void)err;
    for (int64_t t = 0; t < n_tok; t++) {
        for (int64_t h = 0; h < n_heads; h++) {
            ops_rope(x + (t * n_heads + h) * head_dim, head_dim, n_rot, cs + t * n_rot, mode);
        }
    }
    return LARES_OK;
}

static lares_status emul_kv_store(gpu_device *d, const float *src, int64_t n_tok,
                                  int64_t row_elems, const int32_t *pos, void *dst, bool f16,
                                  lares_error *err) {
    (void)d, (void)err;
    for (int64_t t = 0; t < n_tok; t++) {
        const float *s = src + t * row_elems;
        if (f16) {
            quant_traits_of(GGUF_TYPE_F16)->from_float(
                s, (lares_f16 *)dst + (size_t)pos[t] * (size_t)row_elems, row_elems);
        } else {
            memcpy((float *)dst + (size_t)pos[t] * (size_t)row_elems, s,
                   (size_t)row_elems * sizeof(float));
        }
    }
    return LARES_OK;
}

static lares_status emul_attend(gpu_device *d, const gpu_attend_args *a, lares_error *err) {
    (void)d;
    const size_t stride =
        ops_attention_scratch(a->n_head, a->n_head_kv, a->head_dim, a->n_kv_max);
    float *scratch = lares_alloc_aligned(stride * sizeof(float), 64);
    if (scratch == NULL) {
        return lares_fail(err, LARES_ENOMEM, "emulated gpu: attention scratch");
    }
    ops_attn_args oa = {.q = a->q,
                        .out = a->out,
                        .pos = a->pos,
                        .n_tok = a->n_tok,
                        .n_head = a->n_head,
                        .n_head_kv = a->n_head_kv,
                        .head_dim = a->head_dim,
                        .scale = a->scale,
                        .kv = {.k = (void *)a->k,
                               .v = (void *)a->v,
                               .type = a->kv_f16 ? GGUF_TYPE_F16 : GGUF_TYPE_F32,
                               .row_elems = (size_t)(a->n_head_kv * a->head_dim)},
                        .scratch = scratch,
                        .scratch_stride = stride};
    ops_attention(NULL, &oa);
    lares_free_aligned(scratch);
    return LARES_OK;
}

static lares_status emul_add(gpu_device *d, float *x, const float *y, int64_t n,
                             lares_error *err) {
    (void)d, (void)err;
    ops_add(x, y, n);
    return LARES_OK;
}

static lares_status emul_swiglu(gpu_device *d, float *g, const float *u, int64_t n,
                                lares_error *err) {
    (void)d, (void)err;
    ops_swiglu(g, u, n);
    return LARES_OK;
}

const gpu_device_ops gpu_emul_ops = {
    .name = "emulated",
    .open = emul_open,
    .close = emul_close,
    .upload = emul_upload,
    .release = emul_release,
    .matmul = emul_matmul,
    .alloc = emul_alloc,
    .put = emul_put,
    .get = emul_get,
    .norm = emul_norm,
    .quant = emul_quant,
    .mm = emul_mm,
    .rope = emul_rope,
    .kv_store = emul_kv_store,
    .attend = emul_attend,
    .add = emul_add,
    .swiglu = emul_swiglu,
};
