/*
 * What the GPU placement predicts (issue 10) for a llama-7b-shaped Q4_K_M model
 * at device caps of 25, 50 and 75 % of its matrices: `layers` against
 * `affinity`, generation (1 token per pass) and a 128-token prompt pass. The
 * times are the cost model's (docs/gpu.md) with gpu_est_rates_default(): a
 * prediction, not a measurement -- the measured comparison needs a CUDA
 * machine (docs/gpu.md, "commands for a machine with a GPU").
 *
 * The model is built in memory from its shapes alone (no weights are read):
 * 32 layers, n_embd 4096, n_ff 11008, 32 heads; Q4_K_M as the reference
 * quantizer mixes it: Q4_K everywhere except attn_v and ffn_down in the first
 * and last eighth of the layers and every third layer between (Q6_K), and a
 * Q6_K output matrix.
 *
 *   ninja -C build bench_gpu_plan && build/bench/bench_gpu_plan [--measure-cpu THREADS]
 */
#include "gpu/gpu.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ops_matrix mat(uint32_t type, int64_t n_in, int64_t n_out) {
    static const char dummy[1];
    ops_matrix m;
    lares_error err = {0};
    if (ops_matrix_init(&m, dummy, type, n_in, n_out, "shape", &err) != LARES_OK) {
        fprintf(stderr, "bench_gpu_plan: %s\n", err.msg);
        exit(1);
    }
    return m;
}

static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

int main(int argc, char **argv) {
    enum { N_LAYER = 32, EMBD = 4096, FF = 11008, VOCAB = 32000 };
    model mdl = {0};
    mdl.hp.n_layer = N_LAYER;
    mdl.hp.n_embd = EMBD;
    mdl.hp.n_ff = FF;
    mdl.hp.n_head = mdl.hp.n_head_kv = 32;
    mdl.hp.head_dim = 128;
    model_layer layers[N_LAYER];
    for (int l = 0; l < N_LAYER; l++) {
        const uint32_t hi = more_bits(l, N_LAYER) ? GGUF_TYPE_Q6_K : GGUF_TYPE_Q4_K;
        layers[l] = (model_layer){0};
        layers[l].wq = mat(GGUF_TYPE_Q4_K, EMBD, EMBD);
        layers[l].wk = mat(GGUF_TYPE_Q4_K, EMBD, EMBD);
        layers[l].wv = mat(hi, EMBD, EMBD);
        layers[l].wo = mat(GGUF_TYPE_Q4_K, EMBD, EMBD);
        layers[l].w_gate = mat(GGUF_TYPE_Q4_K, EMBD, FF);
        layers[l].w_up = mat(GGUF_TYPE_Q4_K, EMBD, FF);
        layers[l].w_down = mat(hi, FF, EMBD);
    }
    mdl.layers = layers;
    mdl.output = mat(GGUF_TYPE_Q6_K, EMBD, VOCAB);
    gpu_est_rates r = gpu_est_rates_default();
    /* --measure-cpu [THREADS]: this machine's CPU kernels instead of the guess */
    if (argc > 1 && strcmp(argv[1], "--measure-cpu") == 0) {
        ops_pool *pool = NULL;
        lares_error err = {0};
        if (ops_pool_create(argc > 2 ? atoi(argv[2]) : 1, &pool, &err) != LARES_OK ||
            gpu_measure_cpu(pool, &r, &err) != LARES_OK) {
            fprintf(stderr, "bench_gpu_plan: %s\n", err.msg);
            return 1;
        }
        printf("cpu measured on %d thread(s): GB/s q4_0 %.1f q8_0 %.1f q4_K %.1f q6_K %.1f "
               "f16 %.1f; q4_K mat-mat %.1f GFLOP/s\n",
               ops_pool_size(pool), r.cpu_Bps_type[GGUF_TYPE_Q4_0] / 1e9,
               r.cpu_Bps_type[GGUF_TYPE_Q8_0] / 1e9, r.cpu_Bps_type[GGUF_TYPE_Q4_K] / 1e9,
               r.cpu_Bps_type[GGUF_TYPE_Q6_K] / 1e9, r.cpu_Bps_type[GGUF_TYPE_F16] / 1e9,
               r.cpu_flops / 1e9);
        ops_pool_free(pool);
    }
    printf("llama-7b shapes, Q4_K_M mix; rates: cpu %.0f GB/s %.0f GFLOP/s, gpu %.0f GB/s "
           "%.0f TFLOP/s, link %.0f GB/s %.0f us\n",
           r.cpu_bw_Bps / 1e9, r.cpu_flops / 1e9, r.gpu_bw_Bps / 1e9, r.gpu_flops / 1e12,
           r.link.h2d_Bps / 1e9, r.link.latency_s * 1e6);
    printf("%6s %5s %10s %12s %12s %9s %14s %14s\n", "tokens", "cap", "cap MiB", "layers ms",
           "affinity ms", "ratio", "layers tensors", "affinity tns");
    const int toks[] = {1, 128};
    for (int k = 0; k < 2; k++) {
        gpu_meas *m = NULL;
        lares_error err = {0};
        if (gpu_meas_estimate(&mdl, &r, toks[k], &m, &err) != LARES_OK) {
            fprintf(stderr, "bench_gpu_plan: %s\n", err.msg);
            return 1;
        }
        uint64_t total = 0;
        for (size_t i = 0; i < m->n_tensors; i++) {
            total += m->t[i].bytes;
        }
        for (int pct = 0; pct <= 100; pct += 25) {
            gpu_place_opts o = gpu_place_opts_default();
            o.budget_bytes = total / 100 * (uint64_t)pct;
            gpu_placement *pl = NULL, *pa = NULL;
            o.method = GPU_OFFLOAD_LAYERS;
            lares_status st = gpu_place(m, &o, &pl, &err);
            o.method = GPU_OFFLOAD_AFFINITY;
            if (st == LARES_OK) {
                st = gpu_place(m, &o, &pa, &err);
            }
            if (st != LARES_OK) {
                fprintf(stderr, "bench_gpu_plan: %s\n", err.msg);
                return 1;
            }
            printf("%6d %4d%% %10.0f %12.2f %12.2f %9.3f %14zu %14zu\n", toks[k], pct,
                   (double)o.budget_bytes / 1048576.0, pl->t_pass_s * 1e3, pa->t_pass_s * 1e3,
                   pl->t_pass_s / pa->t_pass_s, pl->n_placed, pa->n_placed);
            gpu_placement_free(pl);
            gpu_placement_free(pa);
        }
        gpu_meas_free(m);
    }
    return 0;
}
