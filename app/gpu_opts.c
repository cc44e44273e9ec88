/* GPU offload options (issue 10, docs/gpu.md), shared by run, chat, serve and plan. */
#include "opts.h"

#include <string.h>

void app_gpu_usage(FILE *to) {
    fputs("      --offload METHOD    put weight matrices on the CUDA GPU: layers (whole layers\n"
          "                          from the last, like -ngl) or affinity (the matrices that\n"
          "                          save most time per byte); default none. Needs a build\n"
          "                          with -DLARES_CUDA=ON\n"
          "      --gpu-mem SIZE      device memory for weights, e.g. 4G (default: 90% of free)\n"
          "      --gpu-layers N      with --offload layers: exactly N layers (default: as fit)\n",
          to);
}

int app_gpu_opt(int argc, char **argv, int *i, lares_session_opts *o) {
    const char *a = argv[*i];
    const char *v;
    if (strcmp(a, "--offload") == 0) {
        if ((v = app_need_value(argc, argv, i)) == NULL) {
            return -1;
        }
        if (strcmp(v, "none") != 0 && strcmp(v, "layers") != 0 && strcmp(v, "affinity") != 0) {
            app_error("--offload: '%s' is not none, layers or affinity", v);
            return -1;
        }
        o->offload = v;
        return 1;
    }
    if (strcmp(a, "--gpu-mem") == 0) {
        if ((v = app_need_value(argc, argv, i)) == NULL || !app_parse_size(a, v, &o->gpu_mem)) {
            return -1;
        }
        if (o->gpu_mem == 0) {
            app_error("--gpu-mem: 0 bytes places nothing (use --offload none)");
            return -1;
        }
        return 1;
    }
    if (strcmp(a, "--gpu-layers") == 0) {
        if ((v = app_need_value(argc, argv, i)) == NULL ||
            !app_parse_i32(a, v, 1, 1 << 20, &o->gpu_layers)) {
            return -1;
        }
        return 1;
    }
    return 0;
}

bool app_gpu_check(const lares_session_opts *o) {
    const bool on = o->offload != NULL && strcmp(o->offload, "none") != 0;
    if (!on && (o->gpu_mem != 0 || o->gpu_layers != 0)) {
        app_error("--gpu-mem and --gpu-layers need --offload layers or affinity");
        return false;
    }
    if (o->gpu_layers != 0 && strcmp(o->offload, "layers") != 0) {
        app_error("--gpu-layers goes with --offload layers");
        return false;
    }
    return true;
}
