/*
 * lares chat: an interactive conversation with the model's chat template.
 *
 * The conversation stays in the session's KV cache between turns: each turn
 * renders the whole conversation, keeps the part of the cache that matches
 * it (lares_session_reuse_prefix), and evaluates only the rest, which is the
 * new user turn plus the tail of the last answer that the cache lacks.
 *
 * Ctrl-C stops the answer being generated and keeps the conversation: the
 * SIGINT handler only writes a byte to a pipe (async-signal-safe); a watcher
 * thread reads it and calls lares_session_cancel, which is thread-safe.
 * Ctrl-D (end of input) quits.
 */
#include "opts.h"
#include "discover.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct chat_opts {
    const char *model;
    const char *template_name;
    const char *system;
    int32_t n_predict;
    lares_session_opts session;
    lares_sampler_opts sampler;
    bool seed_given;
    int verbosity;
} chat_opts;

static void chat_usage(FILE *to) {
    fputs("usage: lares chat -m MODEL [options]\n"
          "  Type a message and press Enter; Ctrl-C stops an answer, Ctrl-D quits,\n"
          "  /reset starts a new conversation.\n"
          "  -m, --model PATH        GGUF model file\n"
          "      --template NAME     chat format instead of the model's template: chatml,\n"
          "                          llama3, llama2, mistral, mistral-v7, gemma, phi3, zephyr,\n"
          "                          plain (models without a template get plain)\n"
          "      --system TEXT       system prompt\n"
          "  -n, --n-predict N       tokens per answer at most (default -1: until the end of\n"
          "                          the turn or a full context)\n",
          to);
    app_session_usage(to);
    app_sampling_usage(to);
    fputs("  -v, --verbose           per-turn figures on stderr / -q, --quiet\n", to);
}

static int parse_chat(int argc, char **argv, chat_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->session = lares_session_opts_default();
    o->session.ring_profile_cache = app_profile_cache_default(); /* an automatic ring's head */
    o->sampler = lares_sampler_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = app_sampling_opt(argc, argv, &i, &o->sampler, &o->seed_given);
        if (r == 0) {
            r = app_session_opt(argc, argv, &i, &o->session);
        }
        if (r < 0) {
            return APP_USAGE;
        }
        if (r > 0) {
            continue;
        }
        const char **target = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            chat_usage(stdout);
            return APP_OK;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            target = &o->model;
        } else if (strcmp(a, "--template") == 0) {
            target = &o->template_name;
        } else if (strcmp(a, "--system") == 0) {
            target = &o->system;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0) {
            const char *v = app_need_value(argc, argv, &i);
            if (v == NULL || !app_parse_i32(a, v, -1, INT32_MAX, &o->n_predict)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            o->verbosity++;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            o->verbosity = -1;
        } else {
            app_error("chat: unknown option '%s' (lares chat --help lists them)", a);
            return APP_USAGE;
        }
        if (target != NULL && (*target = app_need_value(argc, argv, &i)) == NULL) {
            return APP_USAGE;
        }
    }
    if (o->model == NULL) {
        app_error("chat: no model given (-m MODEL)");
        return APP_USAGE;
    }
    if (!app_ring_auto(&o->session)) { /* --ring auto: the paired devices that answer */
        return APP_FAIL;
    }
    if (!o->seed_given) {
        o->sampler.seed = app_clock_seed();
    }
    return -1;
}

/* ---- Ctrl-C: handler -> pipe -> watcher thread -> lares_session_cancel ---- */

static int sigint_pipe[2] = {-1, -1};

static void on_sigint(int sig) {
    (void)sig;
    const int saved = errno;
    const char c = 'c';
    ssize_t w = write(sigint_pipe[1], &c, 1); /* async-signal-safe */
    (void)w;
    errno = saved;
}

static void *watch_sigint(void *arg) {
    lares_session *s = arg;
    char c;
    for (;;) {
        ssize_t r = read(sigint_pipe[0], &c, 1);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0 || c == 'q') {
            return NULL;
        }
        lares_session_cancel(s);
    }
}

/* ---- the conversation ---- */

typedef struct conversation {
    lares_chat_msg *msg; /* contents owned (malloc) */
    size_t n, cap;
    size_t n_keep; /* the system prompt survives /reset */
} conversation;

static bool conv_add(conversation *c, const char *role, const char *text, size_t len) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        lares_chat_msg *m = realloc(c->msg, cap * sizeof *m);
        if (m == NULL) {
            return false;
        }
        c->msg = m;
        c->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        return false;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    c->msg[c->n++] = (lares_chat_msg){.role = role, .content = copy};
    return true;
}

static void conv_cut(conversation *c, size_t n) {
    while (c->n > n) {
        free((char *)c->msg[--c->n].content);
    }
}

/* the answer being streamed */
typedef struct answer {
    char *text;
    size_t len, cap;
    bool oom;
} answer;

static bool on_token(const lares_token_info *t, void *user) {
    answer *a = user;
    fwrite(t->piece, 1, t->piece_len, stdout);
    fflush(stdout);
    if (a->len + t->piece_len + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < a->len + t->piece_len + 1) {
            cap *= 2;
        }
        char *p = realloc(a->text, cap);
        if (p == NULL) {
            a->oom = true;
            return false;
        }
        a->text = p;
        a->cap = cap;
    }
    memcpy(a->text + a->len, t->piece, t->piece_len);
    a->len += t->piece_len;
    a->text[a->len] = '\0';
    return true;
}

typedef struct chat {
    const chat_opts *o;
    lares_model *m;
    lares_session *s;
    const char *tmpl; /* the family name used */
    conversation conv;
    int turn;
    bool tty;
} chat;

/* Tokenizes the conversation so far with the generation prompt. */
static lares_status render(chat *c, int32_t **ids, size_t *n, lares_error *err) {
    return lares_chat_tokenize(c->m, c->tmpl, c->conv.msg, c->conv.n, true, ids, n, err);
}

/* One user turn; returns false on an error that ends the program. */
static bool turn(chat *c, const char *line, size_t len) {
    lares_error err = {0};
    const int32_t n_ctx = lares_session_n_ctx(c->s);
    if (!conv_add(&c->conv, "user", line, len)) {
        app_error("out of memory");
        return false;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (render(c, &ids, &n, &err) != LARES_OK) {
        conv_cut(&c->conv, c->conv.n - 1);
        app_fail(&err);
        return true; /* a message the template refuses; the chat goes on */
    }
    if (n >= (size_t)n_ctx && c->conv.n > c->conv.n_keep + 1) {
        /* the conversation outgrew the context: start again from this message */
        fprintf(stderr,
                "lares: the conversation (%zu tokens) no longer fits the context of %d "
                "tokens; starting a new one with your last message\n",
                n, n_ctx);
        lares_chat_msg last = c->conv.msg[c->conv.n - 1];
        c->conv.n--; /* keep its content: it moves */
        conv_cut(&c->conv, c->conv.n_keep);
        c->conv.msg[c->conv.n++] = last;
        lares_free(ids);
        ids = NULL;
        if (render(c, &ids, &n, &err) != LARES_OK) {
            conv_cut(&c->conv, c->conv.n - 1);
            app_fail(&err);
            return true;
        }
    }
    if (n >= (size_t)n_ctx) {
        fprintf(stderr,
                "lares: this message needs %zu tokens with the conversation; the context "
                "holds %d (raise -c)\n",
                n, n_ctx);
        lares_free(ids);
        conv_cut(&c->conv, c->conv.n - 1);
        return true;
    }
    const size_t kept = lares_session_reuse_prefix(c->s, ids, n);
    lares_generate_opts go = lares_generate_opts_default();
    go.sampler = c->o->sampler;
    go.sampler.seed += (uint64_t)c->turn; /* a seeded chat replays; turns do not repeat */
    go.n_predict = c->o->n_predict;
    if (go.n_predict > n_ctx - (int32_t)n) {
        go.n_predict = n_ctx - (int32_t)n; /* what is left of the context */
    }
    answer a = {0};
    go.on_token = on_token;
    go.user = &a;
    lares_stats st;
    lares_status rc = lares_generate(c->s, ids + kept, n - kept, &go, NULL, 0, NULL, &st, &err);
    lares_free(ids);
    fputc('\n', stdout);
    fflush(stdout);
    c->turn++;
    if (rc != LARES_OK || a.oom) {
        free(a.text);
        conv_cut(&c->conv, c->conv.n - 1);
        if (a.oom) {
            app_error("out of memory");
        } else {
            app_fail(&err);
        }
        return rc != LARES_ENOMEM && !a.oom;
    }
    int32_t n_past = 0;
    lares_session_tokens(c->s, &n_past);
    if (st.stop == LARES_STOP_CANCELED) {
        fprintf(stderr, "lares: [stopped]\n");
    } else if (st.stop == LARES_STOP_LENGTH && n_past + 1 >= n_ctx) {
        fprintf(stderr,
                "lares: [the context of %d tokens is full: the answer was cut; the next "
                "message starts a new conversation]\n",
                n_ctx);
    }
    if (c->o->verbosity > 0) {
        fprintf(stderr,
                "lares: turn %d: %d prompt tokens evaluated, %zu reused from the cache, %d "
                "generated (%.1f tok/s), context %d of %d\n",
                c->turn, st.n_prompt, kept, st.n_generated, st.gen_tok_s, n_past, n_ctx);
    }
    bool ok = conv_add(&c->conv, "assistant", a.text ? a.text : "", a.len);
    free(a.text);
    if (!ok) {
        app_error("out of memory");
    }
    return ok;
}

static void reset(chat *c) {
    conv_cut(&c->conv, c->conv.n_keep);
    lares_session_truncate(c->s, 0);
    fprintf(stderr, "lares: new conversation\n");
}

/* Reads lines until end of input. */
static int loop(chat *c) {
    char *line = NULL;
    size_t cap = 0;
    int rc = APP_OK;
    for (;;) {
        if (c->tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        errno = 0;
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) {
            if (errno == EINTR) { /* Ctrl-C at the prompt */
                clearerr(stdin);
                fputs("\n(Ctrl-D quits)\n", stderr);
                continue;
            }
            if (c->tty) {
                fputc('\n', stdout);
            }
            break; /* Ctrl-D */
        }
        size_t len = (size_t)got;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) {
            len--;
        }
        if (len == 0) {
            continue;
        }
        if (len == 6 && memcmp(line, "/reset", 6) == 0) {
            reset(c);
            continue;
        }
        if (!turn(c, line, len)) {
            rc = APP_FAIL;
            break;
        }
    }
    free(line);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    int rc = parse_chat(argc, argv, &o);
    if (rc >= 0) {
        return rc;
    }
    app_setup_log(o.verbosity);
    lares_error err = {0};
    chat c = {.o = &o, .tty = isatty(STDIN_FILENO) != 0};
    pthread_t watcher;
    bool watching = false;
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    rc = APP_FAIL;
    if (lares_model_open(o.model, app_model_opts(), &c.m, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    lares_status st = lares_chat_template(c.m, o.template_name, &c.tmpl, &err);
    if (st == LARES_ENOTFOUND && o.template_name == NULL) {
        fprintf(stderr,
                "lares: warning: %s has no chat template; using the plain format "
                "('user: ...' lines, answers after 'assistant:'); --template chooses "
                "another\n",
                o.model);
        c.tmpl = "plain";
    } else if (st != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    if (o.verbosity > 0) {
        fprintf(stderr, "lares: chat template %s, seed %" PRIu64 "\n", c.tmpl, o.sampler.seed);
    }
    /* the pool threads and the watcher do not take SIGINT: it interrupts the
     * main thread's read of the next line */
    pthread_sigmask(SIG_BLOCK, &block, &old);
    st = lares_session_create(c.m, &o.session, &c.s, &err);
    if (st == LARES_OK && pipe(sigint_pipe) == 0) {
        watching = pthread_create(&watcher, NULL, watch_sigint, c.s) == 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (st != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    if (!watching) {
        app_error("chat: cannot start the Ctrl-C watcher");
        goto done;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C interrupts the read of a line */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    if (o.system != NULL) {
        if (!conv_add(&c.conv, "system", o.system, strlen(o.system))) {
            app_error("out of memory");
            goto done;
        }
        c.conv.n_keep = 1;
    }
    rc = loop(&c);
done:
    signal(SIGINT, SIG_DFL);
    if (watching) {
        const char q = 'q';
        if (write(sigint_pipe[1], &q, 1) == 1) {
            pthread_join(watcher, NULL);
        }
    }
    for (int k = 0; k < 2; k++) {
        if (sigint_pipe[k] >= 0) {
            close(sigint_pipe[k]);
            sigint_pipe[k] = -1;
        }
    }
    conv_cut(&c.conv, 0);
    free(c.conv.msg);
    lares_session_free(c.s);
    lares_model_close(c.m);
    return rc;
}
