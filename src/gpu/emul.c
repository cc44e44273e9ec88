/*
 * The emulated device: "device memory" is host memory (counted by the
 * allocation gate and capped at the size asked for), products run with the
 * scalar reference kernels of quant/. It drives the session's orchestration
 * (placement, upload, the ops_matmul hook) in builds and on machines without
 * CUDA, so those are tested everywhere.
 */
#include "gpu/gpu_impl.h"

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

/* a buffer remembers its size so release can give the bytes back */
typedef struct emul_buf {
    size_t bytes;
    _Alignas(64) unsigned char data[];
} emul_buf;

static lares_status emul_upload(gpu_device *d, const void *host, size_t bytes, void **dev,
                                lares_error *err) {
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
    memcpy(b->data, host, bytes);
    d->used_bytes += bytes;
    *dev = b;
    return LARES_OK;
}

static void emul_release(gpu_device *d, void *dev) {
    if (dev == NULL) {
        return;
    }
    emul_buf *b = dev;
    d->used_bytes -= b->bytes;
    lares_free_aligned(b);
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
    const emul_buf *b = w_dev;
    const size_t row_bytes = quant_row_bytes(w_type, n_in);
    for (int64_t r = 0; r < a->n_rows; r++) {
        const uint8_t *x = (const uint8_t *)a->data + (size_t)r * a->row_bytes;
        for (int64_t o = 0; o < n_out; o++) {
            qt->vec_dot(n_in, &y[r * n_out + o], b->data + (size_t)o * row_bytes, x);
        }
    }
    return LARES_OK;
}

const gpu_device_ops gpu_emul_ops = {
    .name = "emulated",
    .open = emul_open,
    .close = emul_close,
    .upload = emul_upload,
    .release = emul_release,
    .matmul = emul_matmul,
};
