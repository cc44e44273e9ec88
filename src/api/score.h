/*
 * api/score: perplexity and KL divergence over a text (lares_score in
 * include/lares.h; docs/perplexity.md).
 *
 * Owns: the pure statistics (score_stats.c: log-softmax of a logit row in
 * double, running means with their standard errors, the KL divergence of one
 * row against a base row, percentiles) and the KL-divergence base file
 * (kld_file.c: written chunk by chunk, read back with every size, token and
 * checksum checked before use). score.c joins them with a session.
 *
 * Knows nothing about printing: the program prints what lares_score returns.
 */
#ifndef LARES_API_SCORE_H
#define LARES_API_SCORE_H

#include "core/core.h"

#include <stdio.h>

/* ---- statistics (score_stats.c) ---- */

/* A running mean of x and of x^2, for the mean and its standard error. */
typedef struct score_acc {
    double sum, sum2;
    uint64_t n;
} score_acc;

void score_acc_add(score_acc *a, double x);
double score_acc_mean(const score_acc *a);
/* Standard error of the mean, sqrt((E[x^2] - E[x]^2) / (n - 1)): the
 * reference engine's estimate; 0 for fewer than two values. */
double score_acc_err(const score_acc *a);

/* lp[i] = logits[i] - log(sum_j exp(logits[j])), the sum taken in double
 * around the largest logit. Returns the index of the largest logit (the
 * first of ties). */
int32_t score_log_softmax(const float *logits, int32_t n_vocab, float *lp);

/* One scored token of a comparison: both rows are log-probabilities. */
typedef struct score_kld_row {
    double kld;      /* sum_i p_base(i) (lp_base(i) - lp(i)), >= 0 up to rounding */
    bool same_top;   /* both rows have their largest value at the same token */
    double dp;       /* p(token) - p_base(token) */
    double base_nll; /* -lp_base(token) */
} score_kld_row;

void score_kld(const float *lp_base, const float *lp, int32_t n_vocab, int32_t token,
               score_kld_row *out);

/* The q-quantile (0..1) of n sorted values, interpolated between neighbours. */
double score_quantile(const float *sorted, size_t n, double q);

/* ---- the base file (kld_file.c) ----
 *
 * Little-endian:
 *   header (40 bytes): "LARESKLD" | u32 version (1) | u32 n_vocab | u32 n_ctx
 *                      | u32 n_chunks | u32 n_scored (per chunk, n_ctx - 1 - n_ctx/2)
 *                      | u32 reserved (0) | u64 n_tokens (n_ctx * n_chunks)
 *   tokens: n_tokens x i32
 *   u64 FNV-1a of header and tokens
 *   per chunk: n_scored rows of n_vocab f32 log-probabilities, then u64 FNV-1a of
 *              those rows
 * The file size must be exactly what the header says. */

#define KLD_MAGIC        "LARESKLD"
#define KLD_VERSION      1u
#define KLD_HEADER_BYTES 40u
/* the largest vocabulary and chunk the reader accepts (sizes buffers) */
#define KLD_MAX_VOCAB (1u << 20)
#define KLD_MAX_CTX   (1u << 20)

typedef struct kld_base {
    FILE *f; /* borrowed or owned (see kld_base_open) */
    bool own_file;
    char name[160]; /* for messages */
    bool writing;
    uint32_t n_vocab, n_ctx, n_chunks, n_scored;
    int32_t *tokens; /* owned: n_ctx * n_chunks */
    uint32_t chunks_done;
    uint8_t *buf; /* owned: one row, encoded */
} kld_base;

/* Creates `path` and writes the header and tokens. */
lares_status kld_base_create(const char *path, uint32_t n_vocab, uint32_t n_ctx, uint32_t n_chunks,
                             const int32_t *tokens, kld_base **out, lares_error *err);
/* Appends one chunk: n_scored rows of n_vocab log-probabilities. */
lares_status kld_base_write_chunk(kld_base *b, const float *rows, lares_error *err);
/* Closes a file being written; fails (and removes it) when chunks are missing
 * or the last write failed. */
lares_status kld_base_finish(kld_base *b, const char *path, lares_error *err);

/* Opens `path` and reads the header and tokens, all checked. */
lares_status kld_base_open(const char *path, kld_base **out, lares_error *err);
/* The same over an open stream of `size` bytes (borrowed; the fuzz target
 * uses fmemopen). */
lares_status kld_base_read(FILE *f, uint64_t size, const char *name, kld_base **out,
                           lares_error *err);
/* Reads the next chunk's n_scored x n_vocab log-probabilities into rows and
 * checks its checksum and values (finite, at most 0). */
lares_status kld_base_read_chunk(kld_base *b, float *rows, lares_error *err);
/* Reads every chunk not yet read, checking values and checksums, and goes
 * back: a corrupted file is refused before any work. */
lares_status kld_base_verify(kld_base *b, lares_error *err);
void kld_base_free(kld_base *b);

#endif /* LARES_API_SCORE_H */
