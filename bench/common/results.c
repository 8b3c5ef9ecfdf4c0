/* SPDX-License-Identifier: Apache-2.0 */
/* bench/common/results.c — collects a bench's metrics and writes them as one JSON object through the
 * project's one JSON writer (src/core/json.h).
 *
 * Idea: the bench keeps printing its human table; beside each printed median it calls
 * bench_results_add, and at the end bench_results_finish serializes everything once: a first pass
 * with no buffer measures the length (dmm__json_* keep counting past the end), a second fills it.
 * Trade-off: metrics are held in memory until the end (a few hundred at most), so a bench that
 * crashes halfway writes nothing rather than a truncated file. The file is written as every output of
 * the tools is (tools/output_file.h): a temporary created exclusively beside a regular file and renamed
 * over it, a device or FIFO in place, nothing else created, cut or removed.
 * Invariants: every number written is finite; every string goes through dmm__json_string.
 */
#include "results.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "dmm/dmm.h"
#include "../../tools/output_file.h" /* (also compiled into tests/unit/test_compare.c) */

typedef struct result_metric {
    char name[128];
    char unit[16];
    bool lower_better;
    double median, mad, reference; /* reference < 0: none */
    long samples;
} result_metric;

struct bench_results {
    char bench[64];
    char host[512];
    result_metric *m;
    size_t n, cap;
};

static void cpu_model(char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (v == NULL) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(out, cap, "%s", v);
        out[strcspn(out, "\n")] = '\0';
        break;
    }
    fclose(f);
}

bench_results *bench_results_create(const char *bench) {
    bench_results *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    snprintf(r->bench, sizeof r->bench, "%s", bench);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char model[256];
    cpu_model(model, sizeof model);
    snprintf(r->host, sizeof r->host, "%ld core%s%s%s", cores, cores == 1 ? "" : "s", model[0] ? " " : "", model);
    return r;
}

void bench_results_host(bench_results *r, const char *part) {
    if (r == NULL) return;
    size_t len = strlen(r->host);
    snprintf(r->host + len, sizeof r->host - len, ", %s", part);
}

void bench_results_add(bench_results *r, const char *name, const char *unit, bool lower_better, double median,
                       long samples, double mad, double reference) {
    if (r == NULL || !isfinite(median)) return;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        result_metric *m = realloc(r->m, cap * sizeof *m);
        if (m == NULL) return; /* the metric is lost; finish still writes the others */
        r->m = m;
        r->cap = cap;
    }
    result_metric *m = &r->m[r->n++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->unit, sizeof m->unit, "%s", unit);
    m->lower_better = lower_better;
    m->median = median;
    m->samples = samples < 1 ? 1 : samples;
    m->mad = isfinite(mad) && mad >= 0 ? mad : 0;
    m->reference = isfinite(reference) && reference > 0 ? reference : -1;
}

static void write_all(const bench_results *r, dmm_json *o) {
    dmm__json_put(o, "{\"bench\":");
    dmm__json_string(o, r->bench);
    dmm__json_put(o, ",\"version\":");
    dmm__json_string(o, dmm_version_string());
    dmm__json_put(o, ",\"host\":");
    dmm__json_string(o, r->host);
    dmm__json_put(o, ",\"metrics\":[");
    for (size_t i = 0; i < r->n; i++) {
        const result_metric *m = &r->m[i];
        dmm__json_put(o, "%s\n  {\"name\":", i ? "," : "");
        dmm__json_string(o, m->name);
        dmm__json_put(o, ",\"unit\":");
        dmm__json_string(o, m->unit);
        dmm__json_put(o, ",\"better\":\"%s\",\"median\":%.9g,\"samples\":%ld,\"mad\":%.9g",
                      m->lower_better ? "lower" : "higher", m->median, m->samples, m->mad);
        double ratio = m->reference > 0 ? m->median / m->reference : NAN;
        if (m->reference > 0 && isfinite(ratio))
            dmm__json_put(o, ",\"reference\":%.9g,\"ratio\":%.9g", m->reference, ratio);
        dmm__json_put(o, "}");
    }
    dmm__json_put(o, "%s]}\n", r->n ? "\n" : "");
}

int bench_results_finish(bench_results *r, const char *path) {
    int rc = 0;
    if (r == NULL) {
        if (path != NULL) {
            fprintf(stderr, "%s: the results could not be collected (out of memory); nothing written.\n", path);
            return -1;
        }
        return 0;
    }
    if (path != NULL) {
        dmm_json sizing = {NULL, 0, 0};
        write_all(r, &sizing);
        char *buf = malloc(sizing.len + 1);
        char err[1024] = "out of memory";
        dmm_output_file out;
        if (buf == NULL || dmm_output_open("--json", path, NULL, 0, &out, err, sizeof err) != 0) {
            fprintf(stderr, "%s: cannot write the JSON results: %s.\n", path, err);
            rc = -1;
        } else {
            dmm_json o = {buf, sizing.len + 1, 0};
            write_all(r, &o);
            bool written = fwrite(buf, 1, o.len, out.f) == o.len;
            if (dmm_output_close(&out, written, err, sizeof err) != 0 || !written) {
                fprintf(stderr, "%s: writing the JSON results failed: %s.\n", path,
                        written ? err : "the write failed (disk full?)");
                rc = -1;
            }
        }
        free(buf);
    }
    free(r->m);
    free(r);
    return rc;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of t[0..n), n >= 1, sorting t. */
static double median_sorting(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

double bench_median(const double *v, int n) {
    if (n < 1) return 0;
    double *t = malloc((size_t)n * sizeof *t);
    if (t == NULL) return 0;
    memcpy(t, v, (size_t)n * sizeof *t);
    double m = median_sorting(t, n);
    free(t);
    return m;
}

double bench_mad(double *v, int n, double median) {
    if (n < 1) return 0;
    double *d = malloc((size_t)n * sizeof *d);
    if (d == NULL) return 0;
    for (int i = 0; i < n; i++) d[i] = v[i] > median ? v[i] - median : median - v[i]; /* no libm for the tests */
    double m = median_sorting(d, n);
    free(d);
    return m;
}

void bench_id(char *out, unsigned cap, const char *text) {
    if (cap == 0) return;
    unsigned i = 0;
    for (; text[i] != '\0' && i + 1 < cap; i++) {
        char c = text[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '.' || c == '-';
        out[i] = ok ? c : '_';
    }
    out[i] = '\0';
}
