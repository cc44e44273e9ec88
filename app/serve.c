/*
 * lares serve: the OpenAI-compatible HTTP API on this device (src/server/).
 * SIGINT and SIGTERM stop it gracefully: they are blocked in every thread and
 * taken by sigwait on the main thread, which then stops the server.
 */
#include "opts.h"
#include "discover.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void serve_usage(FILE *to) {
    fputs("usage: lares serve -m MODEL [options]\n"
          "  -m, --model PATH        GGUF model file\n"
          "      --host ADDR         address to listen on (default 127.0.0.1; 0.0.0.0: all)\n"
          "      --port P            TCP port (default 8080; 0: any free port)\n"
          "      --api-key KEY       require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
          "                          (or set LARES_API_KEY)\n"
          "      --model-name NAME   the model id clients use (default: the file name)\n"
          "      --template NAME     chat format instead of the model's template (chatml, llama3,\n"
          "                          llama2, mistral, mistral-v7, gemma, phi3, zephyr, plain)\n"
          "      --queue N           requests that may wait behind the running ones (default 8)\n"
          "      --parallel N        requests that decode together, continuous batching (default 1)\n"
          "      --draft MODEL       speculative decoding with a draft model of the same\n"
          "                          vocabulary (with --parallel: each request its own draft\n"
          "                          cache, verified in the shared step)\n"
          "      --draft-n N         tokens the draft proposes per pass, at most (default 7)\n"
          "      --lookup N          speculative decoding without a draft model: up to N tokens\n"
          "                          that followed the context's last words earlier in it\n"
          "                          (prompt lookup; with or without --parallel)\n"
          "      --spec-always       greedy requests draft on every pass (default: only while\n"
          "                          passes with drafts measure faster; same tokens either way)\n"
          "      --prompt-share N    with --parallel: prompt tokens a step reads while other\n"
          "                          requests decode (default 8: they are not held up; 0: no limit);\n"
          "                          prompts that fit whole in 8N tokens are read at once\n"
          "      --ring-groups N     with --parallel and --ring: groups of requests in the ring at\n"
          "                          once, pipelined (default 0: as the measured costs say, one per\n"
          "                          device at first; 1: all in one pass)\n"
          "      --max-body SIZE     largest request body (default 1M)\n"
          "      --max-connections N connections served at once (default 64; 4 more are kept\n"
          "                          for /health and /metrics)\n"
          "      --max-connections-per-ip N  from one client address (default: half the limit)\n"
          "      --header-timeout S  seconds a client has to send a request head (default 10)\n"
          "      --body-timeout S    seconds it then has to send the body (default 30)\n"
          "      --idle-timeout S    seconds without a byte moved before closing (default 30)\n"
          "      --cors ORIGINS      let browser pages from these origins call the API\n"
          "                          (comma-separated, e.g. http://localhost:3000; '*': any)\n",
          to);
    app_session_usage(to);
    fputs("  -v, --verbose / -q, --quiet\n"
          "Sampling is chosen per request (temperature, top_p, top_k, min_p, seed, ...).\n",
          to);
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *draft = NULL;
    lares_session_opts so = lares_session_opts_default();
    so.ring_profile_cache = app_profile_cache_default(); /* an automatic ring's head */
    server_opts o = server_opts_default();
    int verbosity = 0;
    int32_t v32, parallel = 1, prompt_share = LARES_BATCH_SHARED_PROMPT_ROWS, ring_groups = -1;
    uint64_t v64;
    o.api_key = getenv("LARES_API_KEY");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = app_session_opt(argc, argv, &i, &so);
        if (r < 0) {
            return APP_USAGE;
        }
        if (r > 0) {
            continue;
        }
        const char *v = NULL;
#define VALUE()                                                                                    \
    if ((v = app_need_value(argc, argv, &i)) == NULL)                                              \
    return APP_USAGE
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            serve_usage(stdout);
            return APP_OK;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            VALUE();
            model = v;
        } else if (strcmp(a, "--host") == 0) {
            VALUE();
            o.host = v;
        } else if (strcmp(a, "--port") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 0, 65535, &v32)) {
                return APP_USAGE;
            }
            o.port = (uint16_t)v32;
        } else if (strcmp(a, "--api-key") == 0) {
            VALUE();
            o.api_key = v;
        } else if (strcmp(a, "--model-name") == 0) {
            VALUE();
            o.model_id = v;
        } else if (strcmp(a, "--template") == 0) {
            VALUE();
            o.template_name = v;
        } else if (strcmp(a, "--parallel") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 1, 256, &parallel)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--draft") == 0) {
            VALUE();
            draft = v;
        } else if (strcmp(a, "--draft-n") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 1, LARES_LOOKUP_MAX, &o.draft_n)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--spec-always") == 0) {
            o.spec_always = true;
        } else if (strcmp(a, "--lookup") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 1, LARES_LOOKUP_MAX, &o.lookup)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--ring-groups") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 0, 64, &ring_groups)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--prompt-share") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 0, 1 << 20, &prompt_share)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--queue") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 1, 4096, &o.queue_capacity)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--max-connections") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 2, 4096, &o.max_connections)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--max-connections-per-ip") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 1, 4096, &o.max_per_ip)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--header-timeout") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 1, 3600, &o.header_timeout_s)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--body-timeout") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 1, 3600, &o.body_timeout_s)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--idle-timeout") == 0) {
            VALUE();
            if (!app_parse_i32(a, v, 1, 3600, &o.idle_timeout_s)) {
                return APP_USAGE;
            }
        } else if (strcmp(a, "--cors") == 0) {
            VALUE();
            o.cors = v;
        } else if (strcmp(a, "--max-body") == 0) {
            VALUE();
            if (!app_parse_size(a, v, &v64)) {
                return APP_USAGE;
            }
            o.max_body_bytes = (size_t)v64;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbosity++;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            verbosity = -1;
        } else {
            app_error("serve: unknown option '%s' (lares serve --help lists them)", a);
            return APP_USAGE;
        }
#undef VALUE
    }
    if (model == NULL) {
        app_error("serve: no model given (-m MODEL)");
        return APP_USAGE;
    }
    if (o.draft_n > 0 && draft == NULL) {
        app_error("serve: --draft-n needs a draft model (--draft MODEL)");
        return APP_USAGE;
    }
    if (ring_groups >= 0 && (parallel < 2 || so.ring == NULL)) {
        app_error("serve: --ring-groups shares --parallel requests over a ring: it needs both "
                  "--parallel N (N > 1) and --ring");
        return APP_USAGE;
    }
    if (draft != NULL && o.lookup > 0) {
        app_error("serve: drafts come from --draft or from --lookup, not both");
        return APP_USAGE;
    }
    if (o.spec_always && draft == NULL && o.lookup == 0) {
        app_error("serve: --spec-always needs drafts: --lookup N or --draft MODEL");
        return APP_USAGE;
    }
    if (draft != NULL && o.draft_n == 0) {
        o.draft_n = 7; /* as lares run: 8 rows, the few-row product's reach */
    }
    if (!app_ring_auto(&so)) { /* --ring auto: the paired devices that answer */
        return APP_FAIL;
    }
    app_setup_log(verbosity);
    /* every thread started from here on inherits the blocked signals; the
     * main thread takes them with sigwait */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that leaves mid-reply is an error return, not a kill */

    lares_error err = {0};
    lares_model *m = NULL, *dm = NULL;
    lares_session *s = NULL;
    lares_batch *batch = NULL; /* --parallel > 1: it owns the session */
    server *sv = NULL;
    int rc = APP_FAIL;
    if (lares_model_open(model, app_model_opts(), &m, &err) != LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    if (parallel > 1) {
        if (lares_batch_create(m, &so, parallel, &batch, &err) != LARES_OK) {
            rc = app_fail(&err);
            goto done;
        }
        lares_batch_set_shared_prompt_rows(batch, prompt_share);
        lares_batch_set_ring_groups(batch, ring_groups > 0 ? ring_groups : 0);
        o.batch = batch;
    }
    if (draft != NULL && lares_model_open(draft, app_model_opts(), &dm, &err) != LARES_OK) {
        app_error("serve: draft model: %s", err.msg);
        goto done;
    }
    if ((batch == NULL && lares_session_create(m, &so, &s, &err) != LARES_OK) ||
        (dm != NULL && batch == NULL && lares_session_set_draft(s, dm, &err) != LARES_OK) ||
        (dm != NULL && batch != NULL && lares_batch_set_draft(batch, dm, &err) != LARES_OK) ||
        server_start(m, batch ? lares_batch_session(batch) : s, model, &o, &sv, &err) !=
            LARES_OK) {
        rc = app_fail(&err);
        goto done;
    }
    char pbuf[16];
    snprintf(pbuf, sizeof pbuf, "%d", parallel);
    fprintf(stderr,
            "lares: serving %s (chat template %s, context %d tokens%s%s) on http://%s%s%s:%u%s\n",
            model, server_template(sv),
            lares_session_n_ctx(batch ? lares_batch_session(batch) : s),
            batch ? ", requests decoding together: " : "", batch ? pbuf : "",
            strchr(o.host, ':') ? "[" : "",
            o.host, strchr(o.host, ':') ? "]" : "", (unsigned)server_port(sv),
            o.api_key ? " (API key required)" : "");
    lares_stats res;
    if (batch != NULL && (lares_batch_stats(batch, 0, &res), res.streaming)) {
        fprintf(stderr,
                "lares: the weights do not all fit a memory budget of %.1f MiB beside %d KV "
                "caches: %.1f MiB of them stream from disk each step, read once for every "
                "request decoding\n",
                res.mem_budget_bytes / 1048576.0, parallel, res.stream_bytes / 1048576.0);
    }
    fflush(stderr);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "lares: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = APP_OK;
done:
    server_stop(sv);
    lares_batch_free(batch);
    lares_session_free(s); /* with its draft session */
    lares_model_close(dm);
    lares_model_close(m);
    return rc;
}
