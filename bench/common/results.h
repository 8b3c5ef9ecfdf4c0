/* SPDX-License-Identifier: Apache-2.0 */
/* bench/common/results.h — the machine-readable side of a benchmark: `--json FILE` writes one JSON
 * object {"bench", "version", "host", "metrics": [...]} that `dmm compare` reads (docs/benchmarks.md).
 * A bench adds one metric per number it prints: a stable id, its unit, which direction is better, the
 * median, how many samples it is the median of and their median absolute deviation, and optionally
 * the same-run reference's median and the ratio. Thread contract: one owner (the bench's main). */
#ifndef DMM_BENCH_RESULTS_H
#define DMM_BENCH_RESULTS_H

#include <stdbool.h>

typedef struct bench_results bench_results;

/* A new collection for `bench` (e.g. "bench_pool"); NULL when out of memory. */
bench_results *bench_results_create(const char *bench);

/* Appends to the host description (", "-separated), e.g. the GPU's name once the CUDA part ran. */
void bench_results_host(bench_results *r, const char *part);

/* One metric. lower_better: true for times, false for throughputs. samples ≥ 1; mad ≥ 0 in the
 * metric's unit. reference < 0 means none; the ratio median / reference is written with it.
 * Non-finite values are dropped (JSON has no NaN): a non-finite median drops the whole metric. */
void bench_results_add(bench_results *r, const char *name, const char *unit, bool lower_better, double median,
                       long samples, double mad, double reference);

/* Writes the JSON to `path` (nothing when path is NULL) and frees r. 0, or -1 after printing a
 * sentence to stderr. */
int bench_results_finish(bench_results *r, const char *path);

/* The median of v[0..n), n ≥ 1 (v is not modified; 0 when out of memory). */
double bench_median(const double *v, int n);

/* The median absolute deviation of v[0..n) around `median` (v is not modified). */
double bench_mad(double *v, int n, double median);

/* A metric-id piece from free text: [A-Za-z0-9_.-] kept, anything else becomes '_'. */
void bench_id(char *out, unsigned cap, const char *text);

#endif /* DMM_BENCH_RESULTS_H */
