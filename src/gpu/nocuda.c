/*
 * A build without CUDA (-DLARES_CUDA=OFF, the default): no device table, and
 * every CUDA entry point says why. CMake leaves this file out when CUDA is on
 * (cuda/device.cu defines the same functions).
 */
#include "gpu/gpu_impl.h"

#define NO_CUDA "this lares was built without CUDA (configure with -DLARES_CUDA=ON)"

const gpu_device_ops *gpu_cuda_ops(void) {
    return NULL;
}

lares_status gpu_cuda_probe(char *name, size_t cap, uint64_t *vram_free, lares_error *err) {
    if (name != NULL && cap > 0) {
        name[0] = '\0';
    }
    if (vram_free != NULL) {
        *vram_free = 0;
    }
    return lares_fail(err, LARES_EUNSUPPORTED, NO_CUDA);
}

lares_status gpu_cuda_measure(gpu_est_rates *r, lares_error *err) {
    (void)r;
    return lares_fail(err, LARES_EUNSUPPORTED, NO_CUDA);
}

lares_status gpu_cuda_check_dequant(uint32_t type, const void *src, size_t src_bytes, int64_t n,
                                    float *out, lares_error *err) {
    (void)type, (void)src, (void)src_bytes, (void)n, (void)out;
    return lares_fail(err, LARES_EUNSUPPORTED, NO_CUDA);
}

lares_status gpu_cuda_check_rmsnorm(const float *x, const float *w, int64_t n, int64_t rows,
                                    float eps, float *out, lares_error *err) {
    (void)x, (void)w, (void)n, (void)rows, (void)eps, (void)out;
    return lares_fail(err, LARES_EUNSUPPORTED, NO_CUDA);
}

lares_status gpu_cuda_check_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                                 const float *cs, ops_rope_mode mode, lares_error *err) {
    (void)x, (void)n_heads, (void)head_dim, (void)n_rot, (void)cs, (void)mode;
    return lares_fail(err, LARES_EUNSUPPORTED, NO_CUDA);
}

lares_status gpu_cuda_check_attention(const ops_attn_args *a, int64_t n_kv_rows, lares_error *err) {
    (void)a, (void)n_kv_rows;
    return lares_fail(err, LARES_EUNSUPPORTED, NO_CUDA);
}
