/*
 * app: the lares command-line program. One file per sub-command, each thin:
 * parse arguments, call the library, print. Only this folder talks to the
 * user: text streams to stdout, diagnostics and figures to stderr, and with
 * --json one JSON object on stdout at the end.
 */
#ifndef LARES_APP_H
#define LARES_APP_H

#include "lares.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* exit codes */
/* lares plan --check (plan_check.c) */
typedef struct app_plan_check_opts {
    const char *model;
    const char *ring;       /* an automatic ring.json (no windows) */
    bool insecure;
    const char *placements; /* "halda memory single even" */
    int32_t n_tokens;
    int32_t n_threads;      /* 0: every core */
    int32_t n_ctx;          /* 0: the model's */
    bool json;
    bool verbose;
} app_plan_check_opts;
int app_plan_check(const app_plan_check_opts *o);

#define APP_OK    0
#define APP_FAIL  1 /* the work failed: the message says why */
#define APP_USAGE 2 /* the command line was wrong */

/* Prints "lares: error: <msg>" on one line of stderr. */
void app_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reports a library error; returns APP_FAIL. */
int app_fail(const lares_error *err);

/* Argument parsing: each returns false (after printing why) on a bad value. */
bool app_parse_i32(const char *opt, const char *s, int32_t lo, int32_t hi, int32_t *out);
bool app_parse_u64(const char *opt, const char *s, uint64_t *out);
bool app_parse_f32(const char *opt, const char *s, float lo, float hi, float *out);
/* "1024", "512M", "2G", "1.5GiB": a size with a unit; bare numbers below 4096
 * are refused as almost certainly missing their unit */
bool app_parse_size(const char *opt, const char *s, uint64_t *out);
/* --expert-cache: heat or lru */
bool app_parse_expert_cache(const char *opt, const char *s, lares_expert_cache *out);
/* --stream-io: auto, mmap or direct */
bool app_parse_stream_io(const char *opt, const char *s, lares_stream_io *out);
/* the value after an option, or an error naming the option */
const char *app_need_value(int argc, char **argv, int *i);

/* Reads a whole file or stdin ("-") into a NUL-terminated buffer (free()). */
char *app_read_all(const char *path, size_t *len);

/* Sets up logging: quiet (errors only), default (warnings), verbose (info). */
void app_setup_log(int verbosity);
/* Where device profiles are cached: $XDG_CACHE_HOME/lares, else ~/.cache/lares;
 * NULL when neither is set (then nothing is cached). The same for `lares
 * profile`, `lares worker` and the head of an automatic ring. */
const char *app_profile_cache_default(void);
/* Where the head of the ring in ring_json keeps its live picture for lares
 * ring status: $XDG_RUNTIME_DIR/lares (else /tmp/lares-UID, made 0700 and
 * refused when another user owns it or others may write it), a file named
 * by the SHA-256 of the ring.json's real path. False (said) when there is
 * none. */
bool app_ring_state_path(const char *ring_json, char *out, size_t cap);

/* Human-readable byte size into buf ("12.3 MiB"). */
const char *app_fmt_bytes(uint64_t n, char *buf, size_t cap);

/* stream_io auto's probe as {"direct_Bps": .., "mmap_Bps": ..} (--json) */
json_t *app_probe_json(const lares_stats *st);
/* MoE streaming: {"io": "direct"|"mmap", "probe": {...}|null}; null otherwise */
json_t *app_expert_io_json(const lares_stats *st);

/* progress bar for lares_progress_fn; user points at an int initialised to -1 */
void app_progress(const char *what, uint64_t done, uint64_t total, void *user);

int cmd_run(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
/* ring_report.c: a ring session's figures; NULL / nothing for one device */
struct json_t *app_ring_json(const lares_session *s);
void app_ring_print(const lares_session *s);

int cmd_keygen(int argc, char **argv);
int cmd_ring(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_pair(int argc, char **argv);
int cmd_unpair(int argc, char **argv);

#endif
