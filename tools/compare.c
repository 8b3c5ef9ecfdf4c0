/* SPDX-License-Identifier: Apache-2.0 */
/* tools/compare.c — reads bench results and compares two of them (see compare.h for the rule).
 *
 * Idea: a run's own spread is the best estimate of how much its median could move by chance, so the
 * threshold for calling a change real is K sigmas of the combined relative noise of both runs,
 * never below a floor (a metric measured once has no spread of its own; medians of batches also
 * drift a little between runs even when the batches agree with each other).
 * Trade-off: MAD, not standard deviation: one descheduled batch does not widen the threshold.
 * Cost: n log n in the metrics (a sorted index for lookups, one sort for repeated names), and a file of
 * at most DMM_BENCH_MAX_FILE bytes (unless --max-input-bytes raises it), so a crafted file costs neither
 * hours nor gigabytes.
 * Invariants: every row has exactly one verdict; count[v] = the rows with verdict v; a file whose
 * shape is not a bench result is refused as a whole (nothing half-read is compared).
 */
#include "compare.h"

#include <jansson.h>
#include <math.h> /* macros only (isinf, INFINITY): no libm */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err_text.h"
#include "input_file.h"

void dmm_bench_file_free(dmm_bench_file *f) {
    if (f == NULL) return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->m[i].name);
        free(f->m[i].unit);
    }
    free(f->m);
    free(f->bench);
    free(f->version);
    free(f->host);
    memset(f, 0, sizeof *f);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

/* "an object", "a string", ... (for error sentences; JSON_REAL names any number). */
static const char *kind_name(json_type kind) {
    switch (kind) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Whether v is of `kind` (JSON_REAL: any number). */
static bool is_kind(const json_t *v, json_type kind) {
    return kind == JSON_REAL ? json_is_number(v) : json_typeof(v) == kind;
}

/* The member `key` of object v as kind `kind` (JSON_REAL: a number); NULL after a sentence in err
 * (missing or wrong type; optional members that are absent give NULL with err untouched). */
static json_t *member(const json_t *v, const char *key, json_type kind, bool optional, const char *what,
                      const char *where, char *err, size_t errcap, int *rc) {
    json_t *m = json_object_get(v, key);
    if (m == NULL) {
        if (!optional) *rc = dmm_tool_err(err, errcap, "%s: not a bench result: %s has no \"%s\".", what, where, key);
        return NULL;
    }
    if (!is_kind(m, kind)) {
        *rc = dmm_tool_err(err, errcap, "%s: not a bench result: \"%s\" of %s is %s, not %s.", what, key, where,
                           kind_name(json_typeof(m)), kind_name(kind));
        return NULL;
    }
    return m;
}

static int read_metric(const json_t *v, size_t i, const char *what, dmm_bench_metric *m, char *err, size_t errcap) {
    char where[200];
    int rc = 0;
    snprintf(where, sizeof where, "metric %zu", i + 1);
    if (!json_is_object(v))
        return dmm_tool_err(err, errcap, "%s: not a bench result: %s is %s, not an object.", what, where, kind_name(json_typeof(v)));
    const json_t *name = member(v, "name", JSON_STRING, false, what, where, err, errcap, &rc);
    if (name == NULL) return -1;
    if (json_string_value(name)[0] == '\0')
        return dmm_tool_err(err, errcap, "%s: not a bench result: %s has an empty name.", what, where);
    snprintf(where, sizeof where, "metric \"%s\"", json_string_value(name));
    const json_t *unit = member(v, "unit", JSON_STRING, false, what, where, err, errcap, &rc);
    const json_t *better = unit ? member(v, "better", JSON_STRING, false, what, where, err, errcap, &rc) : NULL;
    const json_t *median = better ? member(v, "median", JSON_REAL, false, what, where, err, errcap, &rc) : NULL;
    const json_t *samples = median ? member(v, "samples", JSON_REAL, false, what, where, err, errcap, &rc) : NULL;
    const json_t *mad = samples ? member(v, "mad", JSON_REAL, false, what, where, err, errcap, &rc) : NULL;
    if (mad == NULL) return -1;
    const json_t *ref = member(v, "reference", JSON_REAL, true, what, where, err, errcap, &rc);
    if (rc != 0) return -1;
    (void)member(v, "ratio", JSON_REAL, true, what, where, err, errcap, &rc);
    if (rc != 0) return -1;
    const char *b = json_string_value(better);
    bool higher = strcmp(b, "higher") == 0;
    if (!higher && strcmp(b, "lower") != 0)
        return dmm_tool_err(err, errcap, "%s: not a bench result: \"better\" of %s is \"%s\"; it must be \"lower\" or "
                            "\"higher\".", what, where, b);
    double n = json_number_value(samples), d = json_number_value(mad);
    if (!(n >= 1 && n <= 1e15) || n != (double)(long long)n)
        return dmm_tool_err(err, errcap, "%s: not a bench result: \"samples\" of %s is %g; it must be a whole number "
                            ">= 1.", what, where, n);
    if (d < 0)
        return dmm_tool_err(err, errcap, "%s: not a bench result: \"mad\" of %s is %g; it must be >= 0.", what, where, d);
    m->name = dup_str(json_string_value(name));
    m->unit = dup_str(json_string_value(unit));
    if (m->name == NULL || m->unit == NULL) return dmm_tool_err(err, errcap, "%s: out of memory reading %s.", what, where);
    m->higher_better = higher;
    m->median = json_number_value(median);
    m->mad = d;
    m->samples = (long)n;
    m->has_reference = ref != NULL;
    m->reference = ref != NULL ? json_number_value(ref) : 0;
    return 0;
}

/* A file's metrics sorted by name: repeated names found, and lookups made, in log time (a scan per
 * metric was quadratic). */
typedef struct by_name {
    const dmm_bench_metric **v;
    size_t n;
} by_name;

static int metric_ptr_cmp(const void *x, const void *y) {
    return strcmp((*(const dmm_bench_metric *const *)x)->name, (*(const dmm_bench_metric *const *)y)->name);
}

static bool by_name_make(by_name *s, const dmm_bench_file *f) {
    s->n = f->n;
    s->v = malloc((f->n ? f->n : 1) * sizeof *s->v);
    if (s->v == NULL) return false;
    for (size_t i = 0; i < f->n; i++) s->v[i] = &f->m[i];
    qsort(s->v, s->n, sizeof *s->v, metric_ptr_cmp);
    return true;
}

/* The first metric (in the file's order) whose name an earlier one has: its index; f->n when none
 * repeats; SIZE_MAX when out of memory. n log n (a sort). */
static size_t first_repeated(const dmm_bench_file *f) {
    by_name s;
    if (!by_name_make(&s, f)) return SIZE_MAX;
    size_t first = f->n;
    for (size_t i = 0, j; i < s.n; i = j) { /* each run of one name: its second in the file's order */
        size_t lo = SIZE_MAX, second = SIZE_MAX;
        for (j = i; j < s.n && strcmp(s.v[j]->name, s.v[i]->name) == 0; j++) {
            size_t k = (size_t)(s.v[j] - f->m);
            if (k < lo) {
                second = lo;
                lo = k;
            } else if (k < second) {
                second = k;
            }
        }
        if (second < first) first = second;
    }
    free(s.v);
    return first;
}

static int read_file_obj(const json_t *root, const char *what, dmm_bench_file *out, char *err, size_t errcap) {
    int rc = 0;
    if (!json_is_object(root))
        return dmm_tool_err(err, errcap, "%s: not a bench result: the JSON is %s, not an object with \"bench\" and "
                            "\"metrics\".", what, kind_name(json_typeof(root)));
    const json_t *bench = member(root, "bench", JSON_STRING, false, what, "the top-level object", err, errcap, &rc);
    const json_t *metrics =
        bench ? member(root, "metrics", JSON_ARRAY, false, what, "the top-level object", err, errcap, &rc) : NULL;
    if (metrics == NULL) return -1;
    const json_t *version = member(root, "version", JSON_STRING, true, what, "the top-level object", err, errcap, &rc);
    if (rc != 0) return -1;
    const json_t *host = member(root, "host", JSON_STRING, true, what, "the top-level object", err, errcap, &rc);
    if (rc != 0) return -1;
    size_t nm = json_array_size(metrics);
    out->bench = dup_str(json_string_value(bench));
    out->version = dup_str(version ? json_string_value(version) : "");
    out->host = dup_str(host ? json_string_value(host) : "");
    out->m = calloc(nm ? nm : 1, sizeof *out->m);
    if (out->bench == NULL || out->version == NULL || out->host == NULL || out->m == NULL)
        return dmm_tool_err(err, errcap, "%s: out of memory.", what);
    for (size_t i = 0; i < nm; i++) {
        if (read_metric(json_array_get(metrics, i), i, what, &out->m[i], err, errcap) != 0) {
            out->n = i + 1; /* frees what the failed metric got */
            return -1;
        }
        out->n = i + 1;
    }
    size_t dup = first_repeated(out);
    if (dup == SIZE_MAX) return dmm_tool_err(err, errcap, "%s: out of memory.", what);
    if (dup < out->n)
        return dmm_tool_err(err, errcap, "%s: not a bench result: the metric \"%s\" appears twice (metric %zu repeats "
                            "it).", what, out->m[dup].name, dup + 1);
    return 0;
}

int dmm_bench_parse(const char *text, size_t len, const char *what, dmm_bench_file *out, char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    const char *nul = memchr(text, '\0', len); /* jansson would read it as the end of the input */
    if (nul != NULL)
        return dmm_tool_err(err, errcap, "%s: not valid JSON: a byte 0x00 at offset %zu; a bench result is text.", what,
                            (size_t)(nul - text));
    json_error_t je;
    /* strict: a key twice in one object is refused; any value at the top (so that the shape's error
     * names it); "\u0000" is refused (names are C strings); every number a double (an integer past
     * 2^63 too, as JSON allows) */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    if (root == NULL)
        return dmm_tool_err(err, errcap, "%s: not valid JSON: line %d, column %d: %s.", what, je.line, je.column, je.text);
    int rc = read_file_obj(root, what, out, err, errcap);
    json_decref(root);
    if (rc != 0) dmm_bench_file_free(out);
    return rc;
}

int dmm_bench_load_bounded(const char *path, uint64_t max_bytes, dmm_bench_file *out, char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    dmm_input_bound bound = {max_bytes, "a bench result", "--max-input-bytes"};
    char *buf = NULL;
    size_t len = 0;
    if (dmm_input_read(path, &bound, &buf, &len, err, errcap) != 0) return -1;
    int rc = dmm_bench_parse(buf, len, path, out, err, errcap);
    free(buf);
    return rc;
}

int dmm_bench_load(const char *path, dmm_bench_file *out, char *err, size_t errcap) {
    return dmm_bench_load_bounded(path, DMM_BENCH_MAX_FILE, out, err, errcap);
}

const char *dmm_cmp_verdict_str(dmm_cmp_verdict v) {
    switch (v) {
    case DMM_CMP_SAME: return "same";
    case DMM_CMP_BETTER: return "better";
    case DMM_CMP_WORSE: return "WORSE";
    case DMM_CMP_ADDED: return "added";
    case DMM_CMP_REMOVED: return "removed";
    }
    return "?";
}

/* No libm here: the tests compile this file in and link without -lm. */
static double abs_d(double x) { return x < 0 ? -x : x; }

/* sqrt by Newton's iteration from above (monotone decreasing to the root; stops when it stops). */
static double sqrt_d(double x) {
    if (!(x > 0) || isinf(x)) return x > 0 ? x : 0;
    double r = x > 1 ? x : 1;
    for (int i = 0; i < 4096; i++) {
        double n = 0.5 * (r + x / r);
        if (!(n < r)) break;
        r = n;
    }
    return r;
}

static const dmm_bench_metric *find(const by_name *s, const char *name) {
    dmm_bench_metric key;
    key.name = (char *)(uintptr_t)name;
    const dmm_bench_metric *kp = &key;
    const dmm_bench_metric **hit = bsearch(&kp, s->v, s->n, sizeof *s->v, metric_ptr_cmp);
    return hit != NULL ? *hit : NULL;
}

static double rel_noise(const dmm_bench_metric *m) {
    return m->median != 0 ? m->mad / abs_d(m->median) : 0;
}

static void judge(dmm_cmp_row *row, const dmm_cmp_opts *o) {
    const dmm_bench_metric *a = row->old_m, *b = row->new_m;
    double sign = a->higher_better ? -1.0 : 1.0;
    if (a->median != 0) row->change = (b->median - a->median) / abs_d(a->median);
    else row->change = b->median == 0 ? 0 : b->median > 0 ? INFINITY : -INFINITY;
    row->worse_by = sign * row->change;
    double na = rel_noise(a), nb = rel_noise(b);
    row->noise = DMM_CMP_MAD_TO_SIGMA * sqrt_d(na * na + nb * nb);
    row->threshold = o->k * row->noise > o->floor ? o->k * row->noise : o->floor;
    row->verdict = row->worse_by > row->threshold    ? DMM_CMP_WORSE
                   : row->worse_by < -row->threshold ? DMM_CMP_BETTER
                                                     : DMM_CMP_SAME;
}

int dmm_compare(const dmm_bench_file *a, const dmm_bench_file *b, const char *a_name, const char *b_name,
                const dmm_cmp_opts *o, dmm_cmp_result *out, char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    if (strcmp(a->bench, b->bench) != 0)
        return dmm_tool_err(err, errcap, "%s holds results of %s but %s holds results of %s; compare two runs of the same "
                     "bench.", a_name, a->bench, b_name, b->bench);
    by_name sa = {NULL, 0}, sb = {NULL, 0};
    out->rows = calloc(a->n + b->n + 1, sizeof *out->rows);
    if (out->rows == NULL || !by_name_make(&sa, a) || !by_name_make(&sb, b)) {
        free(sa.v);
        dmm_cmp_result_free(out);
        return dmm_tool_err(err, errcap, "out of memory comparing %s with %s.", a_name, b_name);
    }
    for (size_t i = 0; i < b->n; i++) {
        dmm_cmp_row *row = &out->rows[out->n];
        row->new_m = &b->m[i];
        row->old_m = find(&sa, b->m[i].name);
        if (row->old_m == NULL) {
            row->verdict = DMM_CMP_ADDED;
        } else {
            if (strcmp(row->old_m->unit, row->new_m->unit) != 0 ||
                row->old_m->higher_better != row->new_m->higher_better) {
                int rc = dmm_tool_err(err, errcap, "the metric \"%s\" is in %s (%s is better) in %s but in %s (%s is better) "
                               "in %s; its meaning changed, so the two cannot be compared.", b->m[i].name,
                               row->old_m->unit, row->old_m->higher_better ? "higher" : "lower", a_name,
                               row->new_m->unit, row->new_m->higher_better ? "higher" : "lower", b_name);
                dmm_cmp_result_free(out);
                free(sa.v);
                free(sb.v);
                return rc;
            }
            judge(row, o);
        }
        out->count[row->verdict]++;
        out->n++;
    }
    for (size_t i = 0; i < a->n; i++) {
        if (find(&sb, a->m[i].name) != NULL) continue;
        dmm_cmp_row *row = &out->rows[out->n++];
        row->old_m = &a->m[i];
        row->verdict = DMM_CMP_REMOVED;
        out->count[DMM_CMP_REMOVED]++;
    }
    free(sa.v);
    free(sb.v);
    return 0;
}

void dmm_cmp_result_free(dmm_cmp_result *r) {
    if (r == NULL) return;
    free(r->rows);
    memset(r, 0, sizeof *r);
}

static void fmt_pct(char *buf, size_t cap, double x, bool sign) {
    if (isinf(x)) snprintf(buf, cap, "%sinf", x < 0 ? "-" : sign ? "+" : "");
    else snprintf(buf, cap, sign ? "%+.1f" : "%.1f", 100 * x);
}

void dmm_cmp_print(FILE *f, const dmm_cmp_result *r, const dmm_bench_file *a, const dmm_bench_file *b,
                   const dmm_cmp_opts *o) {
    int w = 6;
    for (size_t i = 0; i < r->n; i++) {
        const dmm_bench_metric *m = r->rows[i].new_m ? r->rows[i].new_m : r->rows[i].old_m;
        int len = (int)strlen(m->name);
        if (len > w) w = len;
    }
    fprintf(f, "%s: old dmm %s (%s), new dmm %s (%s)\n", b->bench, a->version[0] ? a->version : "?", a->host,
            b->version[0] ? b->version : "?", b->host);
    if (strcmp(a->host, b->host) != 0)
        fprintf(f, "note: the two runs were on different hosts; a change may be the machine's, not the code's\n");
    fprintf(f, "%-*s %-8s %12s %12s %9s %11s  %s\n", w, "metric", "unit", "old", "new", "change %", "threshold %",
            "verdict");
    for (size_t i = 0; i < r->n; i++) {
        const dmm_cmp_row *row = &r->rows[i];
        const dmm_bench_metric *m = row->new_m ? row->new_m : row->old_m;
        char old[32] = "-", neu[32] = "-", chg[32] = "", thr[32] = "";
        if (row->old_m) snprintf(old, sizeof old, "%.4g", row->old_m->median);
        if (row->new_m) snprintf(neu, sizeof neu, "%.4g", row->new_m->median);
        if (row->old_m && row->new_m) {
            fmt_pct(chg, sizeof chg, row->change, true);
            fmt_pct(thr, sizeof thr, row->threshold, false);
        }
        fprintf(f, "%-*s %-8s %12s %12s %9s %11s  %s%s\n", w, m->name, m->unit, old, neu, chg, thr,
                dmm_cmp_verdict_str(row->verdict),
                row->verdict == DMM_CMP_WORSE || row->verdict == DMM_CMP_BETTER
                    ? (m->higher_better ? " (higher is better)" : " (lower is better)")
                    : "");
    }
    fprintf(f, "\n%s: %zu compared: %zu WORSE, %zu better, %zu same; %zu added, %zu removed (threshold = max(%g x "
            "noise, %g %%), noise = 1.4826 x the runs' combined relative MAD)\n",
            b->bench, r->count[DMM_CMP_SAME] + r->count[DMM_CMP_BETTER] + r->count[DMM_CMP_WORSE],
            r->count[DMM_CMP_WORSE], r->count[DMM_CMP_BETTER], r->count[DMM_CMP_SAME], r->count[DMM_CMP_ADDED],
            r->count[DMM_CMP_REMOVED], o->k, 100 * o->floor);
}
