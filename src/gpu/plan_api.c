/*
 * lares_gpu_plan (include/lares.h): the GPU part of `lares plan` -- a model's
 * matrices placed by both methods at one budget, from estimated figures.
 */
#include "gguf/gguf.h"
#include "gpu/gpu.h"

LARES_API lares_status lares_gpu_plan(const char *model_path, const char *method, uint64_t gpu_mem,
                                      int32_t n_tok, char **json_out, lares_error *err) {
    const int mth = gpu_method_from_name(method);
    if (mth != GPU_OFFLOAD_LAYERS && mth != GPU_OFFLOAD_AFFINITY) {
        return lares_fail(err, LARES_EINVAL, "offload method '%s' is not layers or affinity",
                          method != NULL ? method : "(null)");
    }
    if (n_tok < 1) {
        return lares_fail(err, LARES_EINVAL, "gpu plan: %d tokens per pass", (int)n_tok);
    }
    uint64_t budget = gpu_mem;
    if (budget == 0) {
        uint64_t vram_free = 0;
        lares_status st = gpu_cuda_probe(NULL, 0, &vram_free, err);
        if (st != LARES_OK) {
            lares_error_prefix(err, "no --gpu-mem and no device to size it from: ");
            return st;
        }
        budget = gpu_budget(vram_free, 0);
    }
    gguf_file *f = NULL;
    model *mdl = NULL;
    gpu_meas *m = NULL;
    lares_status st = gguf_open(model_path, NULL, &f, err);
    if (st == LARES_OK) {
        st = model_load(f, &mdl, err);
    }
    if (st == LARES_OK) {
        const gpu_est_rates r = gpu_est_rates_default();
        st = gpu_meas_estimate(mdl, &r, n_tok, &m, err);
    }
    if (st == LARES_OK) {
        st = gpu_plan_json(m, budget, (gpu_method)mth, json_out, err);
    }
    gpu_meas_free(m);
    model_free(mdl);
    gguf_close(f);
    return st;
}
