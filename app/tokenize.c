/* lares tokenize: the token ids (or pieces) of a text, for a model or a vocab-only file. */
#include "app.h"

#include <stdlib.h>
#include <string.h>

static void tokenize_usage(FILE *to) {
    fputs("usage: lares tokenize -m MODEL_OR_VOCAB [-p TEXT | -f FILE] [options]\n"
          "  text comes from -p, -f FILE, or stdin when neither is given\n"
          "  --ids            print only the ids, as [1, 2, 3]\n"
          "  --no-bos         do not add BOS (and EOS) tokens\n"
          "  --parse-special  recognise control tokens written in the text\n",
          to);
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool ids_only = false, add_bos = true, special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            tokenize_usage(stdout);
            return APP_OK;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if ((model = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
            if ((text = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) {
            if ((file = app_need_value(argc, argv, &i)) == NULL) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--ids") == 0) {
            ids_only = true;
        } else if (strcmp(a, "--no-bos") == 0) {
            add_bos = false;
        } else if (strcmp(a, "--parse-special") == 0 || strcmp(a, "--special") == 0) {
            special = true;
        } else {
            app_error("tokenize: unknown option '%s'", a);
            return APP_USAGE;
        }
    }
    if (model == NULL) {
        app_error("tokenize: no model or vocabulary given (-m PATH)");
        return APP_USAGE;
    }
    app_setup_log(0);
    size_t len = 0;
    char *owned = NULL;
    if (text == NULL) {
        owned = app_read_all(file ? file : "-", &len);
        if (owned == NULL) {
            return APP_FAIL;
        }
        text = owned;
    } else {
        len = strlen(text);
    }
    lares_error err = {0};
    lares_model *m = NULL;
    lares_model_opts mo = {.vocab_only = true};
    int rc = APP_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    lares_tokenize_opts to = {.add_bos = add_bos, .parse_special = special};
    if (lares_model_open(model, &mo, &m, &err) != LARES_OK ||
        lares_tokenize(m, text, len, &to, &ids, &n, &err) != LARES_OK) {
        rc = app_fail(&err);
    } else if (ids_only) {
        putchar('[');
        for (size_t i = 0; i < n; i++) {
            printf(i ? ", %d" : "%d", ids[i]);
        }
        puts("]");
    } else {
        char piece[512];
        for (size_t i = 0; i < n; i++) {
            int32_t pl = lares_token_piece(m, ids[i], true, piece, sizeof piece);
            if (pl < 0 || (size_t)pl > sizeof piece) {
                pl = 0;
            }
            printf("%6d -> '%.*s'\n", ids[i], (int)pl, piece);
        }
    }
    lares_free(ids);
    lares_model_close(m);
    free(owned);
    return rc;
}
