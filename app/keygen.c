/* lares keygen: a CURVE key pair for a ring's head or worker (docs/ring.md). */
#include "app.h"

#include <string.h>

static void keygen_usage(FILE *to) {
    fputs("usage: lares keygen -o FILE\n"
          "  writes a CURVE key pair to FILE (mode 0600; never over an existing file) and its\n"
          "  public half to FILE.pub, and prints the public key. Give FILE to the device's\n"
          "  lares (worker --key, or \"key\" of the head in ring.json) and FILE.pub to its peers\n"
          "  (worker --allow HEAD.pub, \"public_key\" of a worker in ring.json).\n",
          to);
}

int cmd_keygen(int argc, char **argv) {
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            keygen_usage(stdout);
            return APP_OK;
        } else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--out") == 0) {
            if ((out = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else {
            app_error("keygen: unknown option '%s' (lares keygen --help)", argv[i]);
            return APP_USAGE;
        }
    }
    if (out == NULL) {
        app_error("keygen: no output file (-o FILE)");
        return APP_USAGE;
    }
    lares_error err = {0};
    char pub[LARES_KEY_Z85_LEN + 1];
    if (lares_keygen(out, pub, &err) != LARES_OK) {
        return app_fail(&err);
    }
    printf("%s\n", pub);
    fprintf(stderr, "lares: key pair written to %s (keep it secret), public key to %s.pub\n", out,
            out);
    return APP_OK;
}
