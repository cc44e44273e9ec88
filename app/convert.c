/* lares convert: other model formats to GGUF (so far llama2.c checkpoints). */
#include "app.h"

#include <string.h>

int cmd_convert(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        puts("usage: lares convert --from-llama2c CHECKPOINT.bin TOKENIZER.bin OUT.gguf");
        return APP_OK;
    }
    if (argc != 5 || strcmp(argv[1], "--from-llama2c") != 0) {
        app_error("usage: lares convert --from-llama2c CHECKPOINT.bin TOKENIZER.bin OUT.gguf");
        return APP_USAGE;
    }
    app_setup_log(0);
    lares_error err = {0};
    if (lares_convert_llama2c(argv[2], argv[3], argv[4], &err) != LARES_OK) {
        return app_fail(&err);
    }
    fprintf(stderr, "lares: wrote %s\n", argv[4]);
    return APP_OK;
}
