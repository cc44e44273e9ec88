/*
 * Options that several sub-commands share (chat, serve): sampling and the
 * session. Each parser looks at argv[*i]; it returns 1 when that was one of
 * its options (its value consumed, *i moved past it), 0 when not, and -1
 * after printing why a value was bad.
 */
#ifndef LARES_APP_OPTS_H
#define LARES_APP_OPTS_H

#include "app.h"

int app_sampling_opt(int argc, char **argv, int *i, lares_sampler_opts *s, bool *seed_given);
int app_session_opt(int argc, char **argv, int *i, lares_session_opts *o);
/* the model options the session options set (--no-mmap) */
const lares_model_opts *app_model_opts(void);
/* "on" / "off" (--rebalance, --failover) into > 0 / < 0; false (and a message) otherwise */
bool app_parse_on_off(const char *opt, const char *v, int *out);
bool app_parse_auto_on_off(const char *opt, const char *v, int *out);
void app_sampling_usage(FILE *to);
void app_session_usage(FILE *to);
/* --offload, --gpu-mem, --gpu-layers (gpu_opts.c, issue 10); app_gpu_check
 * after parsing: false (after printing why) when they do not go together. */
int app_gpu_opt(int argc, char **argv, int *i, lares_session_opts *o);
bool app_gpu_check(const lares_session_opts *o);
void app_gpu_usage(FILE *to);
/* A seed from the clock, for runs that were given none. */
uint64_t app_clock_seed(void);

#endif
