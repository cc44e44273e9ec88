/*
 * mem: the residency of weights and the memory figures users see.
 *
 * Owns (so far): process-level counters read from the OS: peak resident set,
 * major page faults, bytes read from storage, and the machine's MemTotal /
 * MemAvailable (memory pressure = the drop of MemAvailable during a run,
 * relative to MemTotal). Prefetch, release and budgets come with the
 * memory-budget work.
 *
 * Knows nothing about what a layer computes.
 */
#ifndef LARES_MEM_H
#define LARES_MEM_H

#include "core/core.h"

typedef struct mem_sample {
    uint64_t peak_rss_bytes;  /* high-water mark of the resident set */
    uint64_t rss_bytes;       /* current resident set (0 when unknown) */
    uint64_t major_faults;    /* since the process started */
    int64_t read_bytes;       /* from storage since the process started; -1 unknown */
    int64_t mem_total_bytes;  /* -1 unknown */
    int64_t mem_available_bytes; /* -1 unknown */
} mem_sample;

/* Reads the counters now. Never fails: what the OS will not tell is -1/0. */
void mem_sample_now(mem_sample *out);

/* Tracks the lowest MemAvailable seen between begin and the last update. */
typedef struct mem_pressure {
    int64_t total;
    int64_t start_available;
    int64_t min_available;
} mem_pressure;

void mem_pressure_begin(mem_pressure *p);
void mem_pressure_update(mem_pressure *p);
/* (start - min) / total, 0 when unknown or when MemAvailable only rose */
double mem_pressure_value(const mem_pressure *p);

#endif /* LARES_MEM_H */
