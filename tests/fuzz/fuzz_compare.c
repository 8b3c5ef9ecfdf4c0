/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fuzz_compare.c — the bench comparator (tools/compare.c) on hostile bench results.
 *
 * The input is two bench result files separated by the first NUL byte (without one, the file is
 * compared with itself), each in a buffer of exactly its length. Each is read with dmm_bench_parse;
 * when both are accepted they are compared with thresholds chosen by the input's last two bytes, and
 * the table is printed (to /dev/null). What must hold:
 *   - a refusal names the file and says why, and leaves an empty dmm_bench_file;
 *   - an accepted file has unique, non-empty metric names, units, samples ≥ 1 and mad ≥ 0;
 *   - a comparison (compare.h's rule): rows = the new file's metrics in order, then the removed ones;
 *     every row has one verdict and count[v] = the rows with verdict v; a row in both files is judged
 *     by worse_by against threshold = max(k × noise, floor); a file compared with itself is "same"
 *     everywhere; a refused comparison leaves no rows.
 */
#include <math.h>

#include "compare.h"
#include "fuzzkit.h"

static int parse_part(fuzz_in part, const char *what, dmm_bench_file *f, char *err, size_t cap) {
    char *text = fuzz_exact_copy(part.p, part.n);
    int rc = dmm_bench_parse(text, part.n, what, f, err, cap);
    free(text);
    if (rc != 0) {
        FUZZ_ASSERT(f->m == NULL && f->n == 0 && f->bench == NULL, "a refused file keeps its metrics");
        FUZZ_ASSERT(strncmp(err, what, strlen(what)) == 0, "a refusal that does not name the file: '%s'", err);
        return rc;
    }
    FUZZ_ASSERT(f->bench != NULL && f->version != NULL && f->host != NULL, "an accepted file without its names");
    for (size_t i = 0; i < f->n; i++) {
        const dmm_bench_metric *m = &f->m[i];
        FUZZ_ASSERT(m->name != NULL && m->name[0] != '\0' && m->unit != NULL, "metric %zu without a name or unit", i);
        FUZZ_ASSERT(m->samples >= 1 && m->mad >= 0 && isfinite(m->median) && isfinite(m->mad),
                    "metric %s: samples %ld, median %g, mad %g", m->name, m->samples, m->median, m->mad);
        for (size_t j = 0; j < i; j++) FUZZ_ASSERT(strcmp(f->m[j].name, m->name) != 0, "metric %s twice", m->name);
    }
    return 0;
}

static const dmm_bench_metric *find(const dmm_bench_file *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->m[i].name, name) == 0) return &f->m[i];
    return NULL;
}

static void check_result(const dmm_cmp_result *r, const dmm_bench_file *a, const dmm_bench_file *b,
                         const dmm_cmp_opts *o, bool self) {
    size_t count[5] = {0};
    size_t removed = 0;
    for (size_t i = 0; i < a->n; i++) removed += find(b, a->m[i].name) == NULL;
    FUZZ_ASSERT(r->n == b->n + removed, "%zu rows for %zu new metrics and %zu removed", r->n, b->n, removed);
    for (size_t i = 0; i < r->n; i++) {
        const dmm_cmp_row *row = &r->rows[i];
        FUZZ_ASSERT(row->verdict <= DMM_CMP_REMOVED, "row %zu: verdict %d", i, (int)row->verdict);
        count[row->verdict]++;
        if (i < b->n) {
            FUZZ_ASSERT(row->new_m == &b->m[i], "row %zu is not the new file's metric %zu", i, i);
            FUZZ_ASSERT(row->old_m == find(a, b->m[i].name), "row %zu: the wrong old metric", i);
        } else {
            FUZZ_ASSERT(row->new_m == NULL && row->old_m != NULL && row->verdict == DMM_CMP_REMOVED,
                        "row %zu past the new metrics is not a removed one", i);
        }
        if (row->old_m == NULL) FUZZ_ASSERT(row->verdict == DMM_CMP_ADDED, "row %zu: new, not added", i);
        if (row->old_m == NULL || row->new_m == NULL) continue;
        FUZZ_ASSERT(row->verdict <= DMM_CMP_WORSE, "row %zu in both files is %s", i, dmm_cmp_verdict_str(row->verdict));
        FUZZ_ASSERT(row->threshold >= o->floor && !isnan(row->noise) && row->noise >= 0,
                    "row %zu: threshold %g below the floor %g, noise %g", i, row->threshold, o->floor, row->noise);
        dmm_cmp_verdict want = row->worse_by > row->threshold    ? DMM_CMP_WORSE
                               : row->worse_by < -row->threshold ? DMM_CMP_BETTER
                                                                 : DMM_CMP_SAME;
        FUZZ_ASSERT(row->verdict == want, "row %zu: worse_by %g, threshold %g, verdict %s", i, row->worse_by,
                    row->threshold, dmm_cmp_verdict_str(row->verdict));
        if (self) FUZZ_ASSERT(row->verdict == DMM_CMP_SAME, "row %zu: a file compared with itself is %s", i,
                              dmm_cmp_verdict_str(row->verdict));
    }
    for (int v = 0; v < 5; v++)
        FUZZ_ASSERT(count[v] == r->count[v], "count[%d] = %zu, rows say %zu", v, r->count[v], count[v]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in pa, pb;
    bool two = fuzz_split(data, size, 0, &pa, &pb);
    if (!two) pb = pa;
    dmm_bench_file a, b;
    char err[512] = "";
    memset(&b, 0, sizeof b);
    if (parse_part(pa, "old.json", &a, err, sizeof err) != 0) return 0;
    if (parse_part(pb, "new.json", &b, err, sizeof err) != 0) {
        dmm_bench_file_free(&a);
        return 0;
    }
    /* k and floor from the last two bytes: the defaults, 0, or something odd */
    uint8_t kb = size >= 2 ? data[size - 2] : 0, fb = size >= 1 ? data[size - 1] : 0;
    dmm_cmp_opts o = {DMM_CMP_DEFAULT_K, DMM_CMP_DEFAULT_FLOOR};
    if (kb % 4 == 1) o.k = 0;
    if (kb % 4 == 2) o.k = (double)kb * 1e6;
    if (fb % 4 == 1) o.floor = 0;
    if (fb % 4 == 2) o.floor = (double)fb / 7.0;
    dmm_cmp_result r;
    int rc = dmm_compare(&a, &b, "old.json", "new.json", &o, &r, err, sizeof err);
    if (rc != 0) {
        FUZZ_ASSERT(r.rows == NULL && r.n == 0, "a refused comparison keeps %zu rows", r.n);
        FUZZ_ASSERT(err[0] != '\0', "a refused comparison without a sentence");
    } else {
        check_result(&r, &a, &b, &o, !two && o.floor > 0);
        FILE *null = fopen("/dev/null", "w");
        FUZZ_ASSERT(null != NULL, "cannot open /dev/null");
        dmm_cmp_print(null, &r, &a, &b, &o);
        fclose(null);
        dmm_cmp_result_free(&r);
    }
    dmm_bench_file_free(&a);
    dmm_bench_file_free(&b);
    return 0;
}
