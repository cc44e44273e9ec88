/* lares quantize: re-encode a GGUF model in another mix of block types. */
#include "app.h"

#include <string.h>

int cmd_quantize(int argc, char **argv) {
    lares_quantize_opts o = lares_quantize_opts_default();
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: lares quantize IN.gguf OUT.gguf TYPE [-t THREADS]\n  types: %s\n",
                   lares_quantize_types());
            return APP_OK;
        }
        if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if ((v = app_need_value(argc, argv, &i)) == NULL ||
                !app_parse_i32(a, v, 1, 512, &o.n_threads)) {
                return APP_USAGE;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            app_error("quantize: unknown option '%s'", a);
            return APP_USAGE;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            app_error("quantize: too many arguments (IN.gguf OUT.gguf TYPE)");
            return APP_USAGE;
        }
    }
    if (n_pos != 3) {
        app_error("usage: lares quantize IN.gguf OUT.gguf TYPE (types: %s)", lares_quantize_types());
        return APP_USAGE;
    }
    app_setup_log(0);
    int last = -1;
    o.progress = app_progress;
    o.user = &last;
    lares_error err = {0};
    if (lares_quantize(pos[0], pos[1], pos[2], &o, &err) != LARES_OK) {
        if (last >= 0) {
            fputc('\n', stderr);
        }
        return app_fail(&err);
    }
    fprintf(stderr, "lares: wrote %s\n", pos[1]);
    return APP_OK;
}
