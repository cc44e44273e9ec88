/* Sampling and session options shared by lares run, lares chat and lares serve. */
#include "opts.h"

#include "discover.h"

#include <string.h>
#include <time.h>

static bool is(const char *a, const char *s1, const char *s2) {
    return strcmp(a, s1) == 0 || (s2 != NULL && strcmp(a, s2) == 0);
}

void app_sampling_usage(FILE *to) {
    fputs("      --temp T            temperature; 0 = greedy (default 0.8)\n"
          "      --top-k N           keep the N most likely tokens (default 40; 0 = off)\n"
          "      --top-p P           nucleus sampling (default 0.95; 1 = off)\n"
          "      --min-p P           drop tokens below P x the best (default 0.05; 0 = off)\n"
          "      --repeat-penalty R  penalise recent tokens (default 1 = off)\n"
          "      --repeat-last-n N   how far back the penalties look (default 64)\n"
          "      --presence-penalty F, --frequency-penalty F   (default 0)\n"
          "  -s, --seed S            random seed (default: from the clock)\n",
          to);
}

void app_session_usage(FILE *to) {
    fputs("  -c, --ctx-size N        context length in tokens (default: the model's)\n"
          "  -t, --threads N         threads (default: all cores)\n"
          "  -b, --batch-size N      prompt tokens per forward pass (default 128)\n"
          "      --kv-type T         KV cache precision: auto, f16, f32 (default auto: f32 while\n"
          "                          the cache is under 64 MiB, else f16)\n"
          "      --mem-budget SIZE   memory for the whole run, e.g. 2G, 512M (default: the\n"
          "                          cgroup limit or 80% of available memory); weights that do\n"
          "                          not fit stream from disk, read ahead layer by layer\n"
          "      --mem-window N      streamed units (parts of layers) in memory at once\n"
          "                          (default: as fits)\n"
          "      --mem-lock          lock the weights that stay resident in memory (mlock)\n"
          "      --no-mmap           read the model into memory (2 MiB pages where the OS\n"
          "                          offers them) instead of mapping the file; the weights\n"
          "                          then cannot stream under a smaller --mem-budget\n"
          "      --stream-io M       how streamed weights are read: direct (O_DIRECT into\n"
          "                          buffers lares owns), mmap (the page cache) or auto\n"
          "                          (the default: direct where the file system allows it\n"
          "                          and a probe of the file does not find the page cache\n"
          "                          more than 1.25x faster; MoE expert slices direct where\n"
          "                          their own probe finds that at least as fast)\n"
          "      --expert-cache P    MoE while streaming: evict the least recently used\n"
          "                          experts (lru, the default) or the coldest per byte (heat)\n"
          "      --expert-guess G    MoE while streaming: read the experts the next layer\n"
          "                          will likely pick while this one computes: auto (the\n"
          "                          default: while at least half the guesses are picked),\n"
          "                          on (always) or off\n"
          "      --ring FILE|auto    run as the head of the ring FILE describes (docs/ring.md);\n"
          "                          auto: every paired device that answers (lares pair;\n"
          "                          --peer, --discovery, ... as lares devices --help)\n"
          "      --insecure          the ring without encryption or keys (test networks only)\n"
          "      --rebalance on|off  move layers when a device slows down or speeds up\n"
          "                          (default: ring.json's \"rebalance\", else on)\n"
          "      --failover on|off   go on over the others when a worker is lost\n"
          "                          (default: ring.json's \"failover\", else on)\n"
          "      --placement P       a ring without windows: halda, memory, single or even\n"
          "                          (default: ring.json's \"placement\", else halda)\n",
          to);
    app_gpu_usage(to);
}

/* "on" / "off" into > 0 / < 0 */
bool app_parse_on_off(const char *opt, const char *v, int *out) {
    if (strcmp(v, "on") == 0) {
        *out = 1;
        return true;
    }
    if (strcmp(v, "off") == 0) {
        *out = -1;
        return true;
    }
    app_error("%s: '%s' is not on or off", opt, v);
    return false;
}

/* "auto" / "on" / "off" into 0 / > 0 / < 0 */
bool app_parse_auto_on_off(const char *opt, const char *v, int *out) {
    if (strcmp(v, "auto") == 0) {
        *out = 0;
        return true;
    }
    if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0) {
        return app_parse_on_off(opt, v, out);
    }
    app_error("%s: '%s' is not auto, on or off", opt, v);
    return false;
}

int app_sampling_opt(int argc, char **argv, int *i, lares_sampler_opts *s, bool *seed_given) {
    const char *a = argv[*i];
    const char *v;
    bool ok;
    if (is(a, "--temp", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) &&
             app_parse_f32(a, v, 0.0f, 100.0f, &s->temperature);
    } else if (is(a, "--top-k", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) && app_parse_i32(a, v, 0, INT32_MAX, &s->top_k);
    } else if (is(a, "--top-p", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) && app_parse_f32(a, v, 0.0f, 1.0f, &s->top_p);
    } else if (is(a, "--min-p", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) && app_parse_f32(a, v, 0.0f, 1.0f, &s->min_p);
    } else if (is(a, "--repeat-penalty", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) &&
             app_parse_f32(a, v, 0.01f, 100.0f, &s->repeat_penalty);
    } else if (is(a, "--repeat-last-n", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) &&
             app_parse_i32(a, v, 0, 1 << 24, &s->repeat_last_n);
    } else if (is(a, "--presence-penalty", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) &&
             app_parse_f32(a, v, -2.0f, 2.0f, &s->presence_penalty);
    } else if (is(a, "--frequency-penalty", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) &&
             app_parse_f32(a, v, -2.0f, 2.0f, &s->frequency_penalty);
    } else if (is(a, "-s", "--seed")) {
        ok = (v = app_need_value(argc, argv, i)) && app_parse_u64(a, v, &s->seed);
        *seed_given = true;
    } else {
        return 0;
    }
    return ok ? 1 : -1;
}

/* how the commands that take the session options open their models */
static lares_model_opts model_opts;

const lares_model_opts *app_model_opts(void) {
    return &model_opts;
}

int app_session_opt(int argc, char **argv, int *i, lares_session_opts *o) {
    const char *a = argv[*i];
    const char *v;
    bool ok;
    if (is(a, "-c", "--ctx-size")) {
        ok = (v = app_need_value(argc, argv, i)) && app_parse_i32(a, v, 1, 1 << 24, &o->n_ctx);
    } else if (is(a, "-t", "--threads")) {
        ok = (v = app_need_value(argc, argv, i)) && app_parse_i32(a, v, 1, 512, &o->n_threads);
    } else if (is(a, "-b", "--batch-size")) {
        ok = (v = app_need_value(argc, argv, i)) && app_parse_i32(a, v, 1, 1 << 16, &o->n_batch);
    } else if (is(a, "--kv-type", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) != NULL;
        if (ok && strcmp(v, "auto") == 0) {
            o->kv_type = LARES_KV_AUTO;
        } else if (ok && strcmp(v, "f16") == 0) {
            o->kv_type = LARES_KV_F16;
        } else if (ok && strcmp(v, "f32") == 0) {
            o->kv_type = LARES_KV_F32;
        } else if (ok) {
            app_error("--kv-type: '%s' is not auto, f16 or f32", v);
            ok = false;
        }
    } else if (is(a, "--mem-budget", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) && app_parse_size(a, v, &o->mem_budget);
        if (ok && o->mem_budget == 0) {
            app_error("%s: a budget of 0 bytes leaves nothing to run in", a);
            ok = false;
        }
    } else if (is(a, "--mem-window", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) &&
             app_parse_i32(a, v, 1, 1 << 20, &o->mem_window);
    } else if (is(a, "--stream-io", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) != NULL && app_parse_stream_io(a, v, &o->stream_io);
    } else if (is(a, "--mem-lock", NULL)) {
        ok = true;
        o->mem_lock = true;
    } else if (is(a, "--no-mmap", NULL)) {
        ok = true;
        model_opts.no_mmap = true;
    } else if (is(a, "--expert-cache", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) != NULL &&
             app_parse_expert_cache(a, v, &o->expert_cache);
    } else if (is(a, "--expert-guess", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) != NULL &&
             app_parse_auto_on_off(a, v, &o->expert_guess);
    } else if (is(a, "--ring", NULL)) { /* the head of a ring (docs/ring.md) */
        ok = (v = app_need_value(argc, argv, i)) != NULL;
        o->ring = v;
    } else if (is(a, "--insecure", NULL)) {
        ok = true;
        o->ring_insecure = true;
    } else if (is(a, "--rebalance", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) != NULL &&
             app_parse_on_off(a, v, &o->ring_rebalance);
    } else if (is(a, "--failover", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) != NULL &&
             app_parse_on_off(a, v, &o->ring_failover);
    } else if (is(a, "--placement", NULL)) {
        ok = (v = app_need_value(argc, argv, i)) != NULL;
        o->ring_placement = v;
    } else {
        const int r = app_disc_opt(argc, argv, i, app_session_disc()); /* --ring auto's */
        return r != 0 ? r : app_gpu_opt(argc, argv, i, o);
    }
    return ok ? 1 : -1;
}

uint64_t app_clock_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
}
