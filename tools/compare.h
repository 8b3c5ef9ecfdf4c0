/* SPDX-License-Identifier: Apache-2.0 */
/* tools/compare.h — `dmm compare`: reads two bench results (the JSON of a bench's --json, format in
 * docs/benchmarks.md) and judges each metric's change against a threshold calibrated on the noise
 * both runs measured.
 *
 * For a metric in both files, with medians m_old, m_new and median absolute deviations d_old, d_new:
 *   worse_by  = (m_new − m_old) / m_old     when lower is better (the sign flips when higher is)
 *   noise     = 1.4826 × sqrt((d_old/m_old)² + (d_new/m_new)²)   (MAD × 1.4826 estimates a sigma)
 *   threshold = max(K × noise, floor)                             (defaults K = 3, floor = 2 %)
 *   verdict   = WORSE if worse_by > threshold, better if worse_by < −threshold, else same.
 * Metrics in one file only are listed as added / removed and never fail the comparison.
 * Thread contract: none needed (no globals).
 */
#ifndef DMM_TOOLS_COMPARE_H
#define DMM_TOOLS_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DMM_CMP_DEFAULT_K 3.0
#define DMM_CMP_DEFAULT_FLOOR 0.02 /* 2 % */
#define DMM_CMP_MAD_TO_SIGMA 1.4826

typedef struct dmm_bench_metric {
    char *name;         /* stable id, e.g. "pool.pair_ns.65536" */
    char *unit;         /* e.g. "ns" */
    bool higher_better; /* "better": "higher" (else "lower") */
    double median;
    double mad;         /* median absolute deviation of the samples, same unit */
    long samples;
    bool has_reference;
    double reference;   /* the same run's reference median, when has_reference */
} dmm_bench_metric;

typedef struct dmm_bench_file {
    char *bench, *version, *host;
    dmm_bench_metric *m;
    size_t n;
} dmm_bench_file;

/* Reads one bench result from text[0..len); `what` names it in errors (the file's path). 0, or -1
 * with one sentence in err naming `what` and the problem (JSON errors with jansson's line and column). */
int dmm_bench_parse(const char *text, size_t len, const char *what, dmm_bench_file *out, char *err, size_t errcap);
/* The largest bench result file dmm_bench_load reads by default (bench results are a few kilobytes;
 * jansson's tree takes up to ~75 times the text, for a file of empty objects, so the bound is also
 * one on memory). */
#define DMM_BENCH_MAX_FILE (4 << 20)

/* The same from a file of at most DMM_BENCH_MAX_FILE bytes (input_file.h: a larger regular file is
 * refused unread, an endless one where it passes the bound). */
int dmm_bench_load(const char *path, dmm_bench_file *out, char *err, size_t errcap);
/* The same from a file of at most max_bytes (dmm compare --max-input-bytes). */
int dmm_bench_load_bounded(const char *path, uint64_t max_bytes, dmm_bench_file *out, char *err, size_t errcap);
void dmm_bench_file_free(dmm_bench_file *f);

typedef enum dmm_cmp_verdict {
    DMM_CMP_SAME,
    DMM_CMP_BETTER,
    DMM_CMP_WORSE,
    DMM_CMP_ADDED,   /* only in the new file */
    DMM_CMP_REMOVED, /* only in the old file */
} dmm_cmp_verdict;

typedef struct dmm_cmp_row {
    const dmm_bench_metric *old_m, *new_m; /* either may be NULL (added / removed); point into the files */
    double change;    /* (new − old) / old: the median's signed relative change */
    double worse_by;  /* the change in the worse direction (positive = worse) */
    double noise;     /* combined relative sigma of both runs */
    double threshold; /* max(K × noise, floor) */
    dmm_cmp_verdict verdict;
} dmm_cmp_row;

typedef struct dmm_cmp_opts {
    double k;     /* threshold = max(k × noise, floor) */
    double floor; /* a fraction: 0.02 = 2 % */
} dmm_cmp_opts;

typedef struct dmm_cmp_result {
    dmm_cmp_row *rows; /* the new file's metrics in its order, then the removed ones */
    size_t n;
    size_t count[5]; /* per dmm_cmp_verdict */
} dmm_cmp_result;

/* Compares old `a` with new `b` (named a_name, b_name in errors). 0, or -1 with a sentence when they
 * cannot be compared: different benches, or one metric with different units or directions. */
int dmm_compare(const dmm_bench_file *a, const dmm_bench_file *b, const char *a_name, const char *b_name,
                const dmm_cmp_opts *o, dmm_cmp_result *out, char *err, size_t errcap);
void dmm_cmp_result_free(dmm_cmp_result *r);

const char *dmm_cmp_verdict_str(dmm_cmp_verdict v);

/* The table (metric, old, new, change %, threshold %, verdict) and a summary line. */
void dmm_cmp_print(FILE *f, const dmm_cmp_result *r, const dmm_bench_file *a, const dmm_bench_file *b,
                   const dmm_cmp_opts *o);

#endif /* DMM_TOOLS_COMPARE_H */
