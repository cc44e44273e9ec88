/* lares: the command-line program. Dispatches to one sub-command per file. */
#include "app.h"

#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"tokenize", cmd_tokenize, "show the token ids of a text"},
    {"convert", cmd_convert, "convert a llama2.c checkpoint to GGUF"},
    {"chat", cmd_chat, "talk with a model, using its chat template"},
    {"serve", cmd_serve, "serve the OpenAI-compatible HTTP API"},
    {"bench", cmd_bench, "measure prompt and generation speed"},
    {"perplexity", cmd_perplexity, "perplexity over a text; KL divergence from a base model"},
    {"quantize", cmd_quantize, "re-encode a model in another block type mix"},
    {"synth", cmd_synth, "write a benchmark model with a real shape and synthetic weights"},
    {"keygen", cmd_keygen, "make a key pair for a ring's head or worker"},
    {"worker", cmd_worker, "serve as a worker of a ring (several devices, one model)"},
    {"ring", cmd_ring, "ring status: which devices of a ring.json would serve now"},
    {"devices", cmd_devices, "list the lares devices on the local network"},
    {"pair", cmd_pair, "pair once with a worker (a code it shows, typed here)"},
    {"unpair", cmd_unpair, "forget a paired device"},
    {"profile", cmd_profile, "measure what this device can do (for plans)"},
    {"plan", cmd_plan, "place a model's layers on devices and predict its speed"},
};

static void usage(FILE *to) {
    fprintf(to, "lares %s: run large language models on the devices you own\n\n"
                "usage: lares COMMAND [options]   (lares COMMAND --help for its options)\n\n",
            lares_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        fprintf(to, "  %-10s %s\n", commands[i].name, commands[i].what);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? APP_USAGE : APP_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("lares %s\n", lares_version());
        return APP_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            return commands[i].fn(argc - 1, argv + 1);
        }
    }
    app_error("unknown command '%s' (lares --help lists them)", argv[1]);
    return APP_USAGE;
}
