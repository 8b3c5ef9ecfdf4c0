/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_compare.c — `dmm compare`'s module (tools/compare.c, compiled in here, as
 * test_trace.c does with tools/trace.c; it reads JSON with jansson): the verdicts against the
 * noise-calibrated threshold in both directions, added/removed metrics, malformed JSON (refused by
 * jansson, strictly: repeated keys and "\u0000" too) and wrong shapes refused with one sentence
 * that says where, different benches refused; and bench/common/results.c's output read back (the
 * writer and the reader agree on the format). Crafted files: a repeated key is found among 20,000,
 * repeated metric names are found, and metrics looked up, in n log n string comparisons (they were
 * n²), and a file above DMM_BENCH_MAX_FILE is refused before it is read whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned long long strcmps; /* the string comparisons the comparator made */
static int counted_strcmp(const char *a, const char *b) {
    strcmps++;
    return strcmp(a, b);
}
#undef strcmp
#define strcmp(a, b) counted_strcmp((a), (b))
#include "../../tools/compare.c"
#include "../../tools/input_file.c"
#include "../../tools/output_file.c"
#undef strcmp
#include "../../bench/common/results.c"

#include "testkit.h"

/* One metric's JSON. */
static const char *metric(char *buf, size_t cap, const char *name, const char *better, double median, double mad) {
    snprintf(buf, cap, "{\"name\":\"%s\",\"unit\":\"ns\",\"better\":\"%s\",\"median\":%.17g,\"samples\":101,\"mad\":%.17g}",
             name, better, median, mad);
    return buf;
}

/* A bench result with the given metrics (comma-separated JSON objects). */
static const char *doc(char *buf, size_t cap, const char *bench, const char *metrics) {
    snprintf(buf, cap, "{\"bench\":\"%s\",\"version\":\"0.1.0\",\"host\":\"test\",\"metrics\":[%s]}", bench,
             metrics);
    return buf;
}

static void parse_ok(const char *text, dmm_bench_file *f) {
    char err[512] = "";
    if (dmm_bench_parse(text, strlen(text), "t.json", f, err, sizeof err) != 0) fail_msg("%s", err);
}

/* Compares one metric old → new; returns the verdict (and the row in *row_out when not NULL). */
static dmm_cmp_verdict one(const char *better, double m_old, double mad_old, double m_new, double mad_new,
                           const dmm_cmp_opts *o, dmm_cmp_row *row_out) {
    char m1[256], m2[256], d1[512], d2[512], err[512] = "";
    dmm_bench_file a, b;
    parse_ok(doc(d1, sizeof d1, "bench_x", metric(m1, sizeof m1, "x.t", better, m_old, mad_old)), &a);
    parse_ok(doc(d2, sizeof d2, "bench_x", metric(m2, sizeof m2, "x.t", better, m_new, mad_new)), &b);
    dmm_cmp_result r;
    dmm_cmp_opts def = {DMM_CMP_DEFAULT_K, DMM_CMP_DEFAULT_FLOOR};
    if (dmm_compare(&a, &b, "a.json", "b.json", o ? o : &def, &r, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(r.n, 1);
    dmm_cmp_verdict v = r.rows[0].verdict;
    if (row_out != NULL) *row_out = r.rows[0];
    assert_int_equal(r.count[v], 1);
    dmm_cmp_result_free(&r);
    dmm_bench_file_free(&a);
    dmm_bench_file_free(&b);
    return v;
}

static void a_slowdown_above_the_noise_is_worse_and_within_it_is_same(void **state) {
    (void)state;
    dmm_cmp_row row;
    /* 10 % slower, 1 % relative MAD in both runs: noise = 1.4826 x sqrt(0.01^2 + 0.01^2) = 2.1 %,
     * threshold = 3 x 2.1 = 6.3 % < 10 % */
    assert_int_equal(one("lower", 100, 1, 110, 1.1, NULL, &row), DMM_CMP_WORSE);
    assert_true(abs_d(row.change - 0.10) < 1e-12);
    assert_true(abs_d(row.worse_by - 0.10) < 1e-12);
    assert_true(abs_d(row.noise - 1.4826 * 1.4142135623730951 * 0.01) < 1e-12);
    assert_true(abs_d(row.threshold - 3 * row.noise) < 1e-12);
    /* the same slowdown with 8 % MAD: threshold 3 x 16.8 % = 50 %: not distinguishable from noise */
    assert_int_equal(one("lower", 100, 8, 110, 8.8, NULL, &row), DMM_CMP_SAME);
    assert_true(row.threshold > 0.45);
    /* K decides: with K = 0.5 the 8 % noise no longer hides it */
    dmm_cmp_opts k_half = {0.5, DMM_CMP_DEFAULT_FLOOR};
    assert_int_equal(one("lower", 100, 8, 110, 8.8, &k_half, NULL), DMM_CMP_WORSE);
}

static void the_floor_holds_when_a_metric_has_no_spread(void **state) {
    (void)state;
    dmm_cmp_row row;
    /* MAD 0 (e.g. a count measured once): the floor of 2 % is the threshold */
    assert_int_equal(one("lower", 100, 0, 101.5, 0, NULL, &row), DMM_CMP_SAME);
    assert_true(abs_d(row.threshold - 0.02) < 1e-12);
    assert_int_equal(one("lower", 100, 0, 103, 0, NULL, NULL), DMM_CMP_WORSE);
    dmm_cmp_opts floor5 = {DMM_CMP_DEFAULT_K, 0.05};
    assert_int_equal(one("lower", 100, 0, 103, 0, &floor5, NULL), DMM_CMP_SAME);
    /* a count that was 0 and is not any more is worse (infinitely), and 0 → 0 is the same */
    assert_int_equal(one("lower", 0, 0, 3, 0, NULL, NULL), DMM_CMP_WORSE);
    assert_int_equal(one("lower", 0, 0, 0, 0, NULL, NULL), DMM_CMP_SAME);
}

static void the_direction_decides_what_is_worse(void **state) {
    (void)state;
    dmm_cmp_row row;
    /* higher is better (a throughput) and it dropped by 20 %: WORSE */
    assert_int_equal(one("higher", 100, 1, 80, 1, NULL, &row), DMM_CMP_WORSE);
    assert_true(abs_d(row.change + 0.20) < 1e-12);
    assert_true(abs_d(row.worse_by - 0.20) < 1e-12);
    /* it rose by 20 %: better */
    assert_int_equal(one("higher", 100, 1, 120, 1, NULL, NULL), DMM_CMP_BETTER);
    /* lower is better and it dropped by 20 %: a speedup, better */
    assert_int_equal(one("lower", 100, 1, 80, 0.8, NULL, &row), DMM_CMP_BETTER);
    assert_true(abs_d(row.worse_by + 0.20) < 1e-12);
}

static void metrics_in_one_file_are_added_or_removed_not_failures(void **state) {
    (void)state;
    char m[4][256], both[1024], d1[2048], d2[2048], err[512] = "";
    snprintf(both, sizeof both, "%s,%s", metric(m[0], sizeof m[0], "kept", "lower", 50, 0.5),
             metric(m[1], sizeof m[1], "gone", "lower", 10, 0.1));
    dmm_bench_file a, b;
    parse_ok(doc(d1, sizeof d1, "bench_x", both), &a);
    snprintf(both, sizeof both, "%s,%s", metric(m[2], sizeof m[2], "new", "higher", 7, 0),
             metric(m[3], sizeof m[3], "kept", "lower", 50.1, 0.5));
    parse_ok(doc(d2, sizeof d2, "bench_x", both), &b);
    dmm_cmp_opts o = {DMM_CMP_DEFAULT_K, DMM_CMP_DEFAULT_FLOOR};
    dmm_cmp_result r;
    if (dmm_compare(&a, &b, "a.json", "b.json", &o, &r, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(r.n, 3);
    /* the new file's order, then the removed */
    assert_string_equal(r.rows[0].new_m->name, "new");
    assert_int_equal(r.rows[0].verdict, DMM_CMP_ADDED);
    assert_null(r.rows[0].old_m);
    assert_string_equal(r.rows[1].new_m->name, "kept");
    assert_int_equal(r.rows[1].verdict, DMM_CMP_SAME);
    assert_string_equal(r.rows[2].old_m->name, "gone");
    assert_int_equal(r.rows[2].verdict, DMM_CMP_REMOVED);
    assert_null(r.rows[2].new_m);
    assert_int_equal(r.count[DMM_CMP_WORSE], 0);
    assert_int_equal(r.count[DMM_CMP_ADDED], 1);
    assert_int_equal(r.count[DMM_CMP_REMOVED], 1);
    /* the table prints every row and the summary */
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    assert_non_null(f);
    dmm_cmp_print(f, &r, &a, &b, &o);
    fclose(f);
    assert_non_null(strstr(out, "added"));
    assert_non_null(strstr(out, "removed"));
    assert_non_null(strstr(out, "1 compared: 0 WORSE, 0 better, 1 same; 1 added, 1 removed"));
    free(out);
    dmm_cmp_result_free(&r);
    dmm_bench_file_free(&a);
    dmm_bench_file_free(&b);
}

/* The error is one sentence: names the file, says the problem, ends with '.', one line. */
static void assert_sentence(const char *err, const char *mentions) {
    if (strstr(err, "t.json") != err) fail_msg("'%s' does not start with the file's name", err);
    if (strstr(err, mentions) == NULL) fail_msg("'%s' does not mention '%s'", err, mentions);
    size_t n = strlen(err);
    if (n < 2 || err[n - 1] != '.') fail_msg("'%s' does not end a sentence", err);
    if (strchr(err, '\n') != NULL) fail_msg("'%s' spans lines", err);
}

static void malformed_json_and_wrong_shapes_are_refused_with_a_sentence(void **state) {
    (void)state;
    const char *metric_ok = "{\"name\":\"a\",\"unit\":\"ns\",\"better\":\"lower\",\"median\":1,\"samples\":3,\"mad\":0}";
    char buf[1024];
    struct {
        const char *text, *mentions;
    } bad[] = {
        /* not JSON (jansson's sentences, with where) */
        {"", "line 1, column 0: unexpected token near end of file"},
        {"{\"bench\":\"b\",\"metrics\":[", "']' expected near end of file"},
        {"{\"bench\":\"b\",\"metrics\":[]", "'}' expected near end of file"},
        {"{\"bench\":\"b\\q\",\"metrics\":[]}", "line 1, column 13: invalid escape"},
        {"{\"bench\":\"b\\u12\",\"metrics\":[]}", "invalid escape"},
        {"{\"bench\":\"\\ud800x\",\"metrics\":[]}", "invalid Unicode '\\uD800'"},
        {"{\"bench\":\"\\u0000\",\"metrics\":[]}", "\\u0000 is not allowed"},
        {"{\"bench\":\"a\nb\",\"metrics\":[]}", "unexpected newline"},
        {"{\"bench\":\"\xff\",\"metrics\":[]}", "unable to decode byte 0xff"},
        {"{\"bench\":\"b\",\n \"metrics\":[1,]}", "line 2, column 15: unexpected token near ']'"},
        {"{\"bench\":\"b\",\"metrics\":[01]}", "invalid token near '0'"},
        {"{\"bench\":\"b\",\"metrics\":[1.]}", "invalid token near '1.'"},
        {"{\"bench\":\"b\",\"metrics\":[1e999]}", "real number overflow"},
        {"{\"bench\":\"b\",\"metrics\":[tru]}", "invalid token near 'tru'"},
        {"{\"bench\":\"b\",\"bench\":\"c\",\"metrics\":[]}", "duplicate object key near '\"bench\"'"},
        {"{\"bench\":\"b\",\"metrics\":[]} x", "end of file expected near 'x'"},
        {"{'bench':1}", "string or '}' expected"},
        /* JSON, but not a bench result */
        {"[1,2]", "not a bench result: the JSON is an array"},
        {"{\"metrics\":[]}", "has no \"bench\""},
        {"{\"bench\":3,\"metrics\":[]}", "\"bench\" of the top-level object is a number, not a string"},
        {"{\"bench\":\"b\",\"metrics\":{}}", "\"metrics\" of the top-level object is an object, not an array"},
        {"{\"bench\":\"b\",\"metrics\":[7]}", "metric 1 is a number, not an object"},
        {"{\"bench\":\"b\",\"metrics\":[{\"name\":\"a\",\"unit\":\"ns\",\"better\":\"lower\",\"median\":\"1\","
         "\"samples\":3,\"mad\":0}]}",
         "\"median\" of metric \"a\" is a string, not a number"},
        {"{\"bench\":\"b\",\"metrics\":[{\"name\":\"a\",\"unit\":\"ns\",\"better\":\"up\",\"median\":1,"
         "\"samples\":3,\"mad\":0}]}",
         "must be \"lower\" or \"higher\""},
        {"{\"bench\":\"b\",\"metrics\":[{\"name\":\"a\",\"unit\":\"ns\",\"better\":\"lower\",\"median\":1,"
         "\"samples\":0.5,\"mad\":0}]}",
         "whole number >= 1"},
        {"{\"bench\":\"b\",\"metrics\":[{\"name\":\"a\",\"unit\":\"ns\",\"better\":\"lower\",\"median\":1,"
         "\"samples\":3,\"mad\":-1}]}",
         "\"mad\" of metric \"a\" is -1"},
        {"{\"bench\":\"b\",\"metrics\":[{\"name\":\"a\",\"unit\":\"ns\",\"better\":\"lower\",\"median\":1,"
         "\"samples\":3}]}",
         "metric \"a\" has no \"mad\""},
        {"{\"bench\":\"b\",\"metrics\":[{\"name\":\"a\",\"unit\":\"ns\",\"better\":\"lower\",\"median\":1,"
         "\"samples\":3,\"mad\":0,\"reference\":null}]}",
         "\"reference\" of metric \"a\" is null"},
        {NULL, "appears twice"}, /* filled below: one metric twice */
    };
    size_t nbad = sizeof bad / sizeof bad[0];
    snprintf(buf, sizeof buf, "{\"bench\":\"b\",\"metrics\":[%s,%s]}", metric_ok, metric_ok);
    bad[nbad - 1].text = buf;
    for (size_t i = 0; i < nbad; i++) {
        dmm_bench_file f;
        memset(&f, 0xA5, sizeof f);
        char err[512] = "";
        if (dmm_bench_parse(bad[i].text, strlen(bad[i].text), "t.json", &f, err, sizeof err) == 0)
            fail_msg("case %zu ('%s') was accepted", i, bad[i].text);
        assert_sentence(err, bad[i].mentions);
        /* nothing else: no half-read result */
        assert_null(f.m);
        assert_null(f.bench);
        assert_int_equal(f.n, 0);
    }
    /* an embedded NUL byte ends nothing early: the reader sees it as a byte where a value cannot be */
    const char nul[] = "{\"bench\":\"b\",\"metrics\":[]}\0";
    dmm_bench_file f;
    char err[512] = "";
    assert_int_equal(dmm_bench_parse(nul, sizeof nul - 1, "t.json", &f, err, sizeof err), -1);
    assert_sentence(err, "byte 0x00");
    /* the smallest valid result */
    parse_ok("{\"bench\":\"b\",\"metrics\":[]}", &f);
    assert_string_equal(f.bench, "b");
    assert_string_equal(f.host, "");
    dmm_bench_file_free(&f);
}

/* Names come back decoded (every escape, surrogate pairs to UTF-8) and numbers in every JSON form. */
static void escapes_and_numbers_read_as_written(void **state) {
    (void)state;
    const char *text = " {\"bench\":\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t \\u00e9 \\uD83D\\uDE00\", \"metrics\":["
                       "{\"name\":\"a\",\"unit\":\"ns\",\"better\":\"lower\",\"median\":-0,\"samples\":3,\"mad\":1.5e3},"
                       "{\"name\":\"b\",\"unit\":\"ns\",\"better\":\"higher\",\"median\":-2E-2,\"samples\":1,\"mad\":0,"
                       "\"reference\":7},"
                       "{\"name\":\"c\",\"unit\":\"B\",\"better\":\"lower\",\"median\":10000000000000000000,"
                       "\"samples\":1,\"mad\":0}], \"extra\":{\"t\":true,\"f\":false,\"z\":null,\"o\":{}}} \r\n";
    dmm_bench_file f;
    parse_ok(text, &f);
    assert_string_equal(f.bench, "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xf0\x9f\x98\x80");
    assert_int_equal(f.n, 3);
    assert_true(f.m[0].median == 0);
    assert_true(f.m[0].mad == 1500.0);
    assert_int_equal(f.m[0].samples, 3);
    assert_true(f.m[1].median == -0.02);
    assert_true(f.m[1].has_reference);
    assert_true(f.m[1].reference == 7);
    assert_true(f.m[2].median == 1e19); /* an integer past 2^63: a number like any other */
    dmm_bench_file_free(&f);
    /* nesting is bounded (jansson's parser stops at its depth limit instead of overflowing the stack) */
    size_t deep_n = 100000;
    char *deep = malloc(deep_n);
    assert_non_null(deep);
    memset(deep, '[', deep_n);
    char err[512] = "";
    assert_int_equal(dmm_bench_parse(deep, deep_n, "t.json", &f, err, sizeof err), -1);
    assert_non_null(strstr(err, "t.json: not valid JSON: line 1"));
    free(deep);
}

static void different_benches_or_meanings_are_refused(void **state) {
    (void)state;
    char m1[256], d1[512], d2[512], err[512] = "";
    dmm_bench_file a, b;
    dmm_cmp_opts o = {DMM_CMP_DEFAULT_K, DMM_CMP_DEFAULT_FLOOR};
    dmm_cmp_result r;
    parse_ok(doc(d1, sizeof d1, "bench_pool", metric(m1, sizeof m1, "x", "lower", 1, 0)), &a);
    parse_ok(doc(d2, sizeof d2, "bench_growth", metric(m1, sizeof m1, "x", "lower", 1, 0)), &b);
    assert_int_equal(dmm_compare(&a, &b, "old.json", "new.json", &o, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "old.json holds results of bench_pool but new.json holds results of bench_growth"));
    assert_null(r.rows);
    dmm_bench_file_free(&b);
    /* the same metric id with another direction */
    parse_ok(doc(d2, sizeof d2, "bench_pool", metric(m1, sizeof m1, "x", "higher", 1, 0)), &b);
    assert_int_equal(dmm_compare(&a, &b, "old.json", "new.json", &o, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "the metric \"x\" is in ns (lower is better) in old.json but in ns (higher is better)"));
    assert_null(r.rows);
    dmm_bench_file_free(&a);
    dmm_bench_file_free(&b);
    /* an unreadable file is named */
    assert_int_equal(dmm_bench_load("/nonexistent/dir/r.json", &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/dir/r.json: cannot open it: No such file or directory."));
}

static void what_a_bench_writes_reads_back(void **state) {
    (void)state;
    char path[] = "/tmp/dmm_test_compare_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    bench_results *w = bench_results_create("bench_\"quoted\"");
    assert_non_null(w);
    bench_results_host(w, "GPU \\ test");
    bench_results_add(w, "pool.pair_ns.512", "ns", true, 41.25, 301, 0.5, 10.0);
    bench_results_add(w, "pool.threads.8.mpairs_per_s", "Mpair/s", false, 27.5, 1, 0.25, -1);
    bench_results_add(w, "dropped", "ns", true, NAN, 3, 0, -1); /* a non-finite median is not written */
    assert_int_equal(bench_results_finish(w, path), 0);
    dmm_bench_file f;
    char err[512] = "";
    if (dmm_bench_load(path, &f, err, sizeof err) != 0) fail_msg("%s", err);
    unlink(path);
    assert_string_equal(f.bench, "bench_\"quoted\"");
    assert_string_equal(f.version, dmm_version_string());
    assert_non_null(strstr(f.host, ", GPU \\ test"));
    assert_int_equal(f.n, 2);
    assert_string_equal(f.m[0].name, "pool.pair_ns.512");
    assert_false(f.m[0].higher_better);
    assert_true(f.m[0].median == 41.25);
    assert_int_equal(f.m[0].samples, 301);
    assert_true(f.m[0].mad == 0.5);
    assert_true(f.m[0].has_reference);
    assert_true(f.m[0].reference == 10.0);
    assert_string_equal(f.m[1].unit, "Mpair/s");
    assert_true(f.m[1].higher_better);
    assert_false(f.m[1].has_reference);
    dmm_bench_file_free(&f);
    /* the MAD helper: |v - 3| of {1, 2, 3, 4, 10} = {2, 1, 0, 1, 7}: median 1 */
    double v[] = {1, 2, 3, 4, 10};
    assert_true(bench_mad(v, 5, 3) == 1.0);
    char id[16];
    bench_id(id, sizeof id, "gpt2 train/x");
    assert_string_equal(id, "gpt2_train_x");
}

static void repeats_and_lookups_cost_n_log_n_comparisons_not_n_squared(void **state) {
    (void)state;
    enum { KEYS = 20000, METRICS = 4000 };
    size_t cap = (size_t)KEYS * 16 + 256;
    char *text = malloc(cap);
    size_t len = (size_t)snprintf(text, cap, "{\"bench\":\"b\",\"metrics\":[],\"x\":{");
    for (int i = 0; i < KEYS; i++) len += (size_t)snprintf(text + len, cap - len, "%s\"k%d\":0", i ? "," : "", i);
    snprintf(text + len, cap - len, "}}");
    dmm_bench_file f;
    char err[512] = "";
    parse_ok(text, &f);
    dmm_bench_file_free(&f);
    snprintf(text + len, cap - len, ",\"k7\":1}}"); /* a repeat at the end, named where it is (its last byte) */
    assert_int_equal(dmm_bench_parse(text, strlen(text), "t.json", &f, err, sizeof err), -1);
    char want[128];
    snprintf(want, sizeof want, "line 1, column %zu: duplicate object key near '\"k7\"'", len + 5);
    assert_sentence(err, want);
    free(text);

    /* two files of METRICS metrics, the second in the reverse order, compared */
    cap = (size_t)METRICS * 128 + 256;
    char *t1 = malloc(cap), *t2 = malloc(cap), m[256];
    size_t l1 = (size_t)snprintf(t1, cap, "{\"bench\":\"b\",\"metrics\":["), l2 = (size_t)snprintf(t2, cap, "%s", t1);
    for (int i = 0; i < METRICS; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%d", i);
        l1 += (size_t)snprintf(t1 + l1, cap - l1, "%s%s", i ? "," : "", metric(m, sizeof m, name, "lower", 10, 1));
        snprintf(name, sizeof name, "m%d", METRICS - 1 - i);
        l2 += (size_t)snprintf(t2 + l2, cap - l2, "%s%s", i ? "," : "", metric(m, sizeof m, name, "lower", 10, 1));
    }
    snprintf(t1 + l1, cap - l1, "]}");
    snprintf(t2 + l2, cap - l2, "]}");
    dmm_bench_file a, b;
    dmm_cmp_opts o = {DMM_CMP_DEFAULT_K, DMM_CMP_DEFAULT_FLOOR};
    dmm_cmp_result r;
    strcmps = 0;
    parse_ok(t1, &a);
    parse_ok(t2, &b);
    if (dmm_compare(&a, &b, "a", "b", &o, &r, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(r.count[DMM_CMP_SAME], METRICS);
    if (strcmps > 400ull * METRICS) fail_msg("%llu comparisons for %d metrics", strcmps, METRICS);
    dmm_cmp_result_free(&r);
    dmm_bench_file_free(&a);
    dmm_bench_file_free(&b);
    /* a repeated metric name, named where the second one is */
    snprintf(t1 + l1, cap - l1, ",%s]}", metric(m, sizeof m, "m5", "lower", 10, 1));
    assert_int_equal(dmm_bench_parse(t1, strlen(t1), "t.json", &a, err, sizeof err), -1);
    snprintf(want, sizeof want, "not a bench result: the metric \"m5\" appears twice (metric %d repeats it)",
             METRICS + 1);
    assert_sentence(err, want);
    /* a name three times and another twice, interleaved: the first repeat in the file's order is named */
    char m1[256], m2[256], m3[256], m4[256], m5[256], few[1400];
    snprintf(few, sizeof few, "{\"bench\":\"b\",\"metrics\":[%s,%s,%s,%s,%s]}",
             metric(m1, sizeof m1, "x", "lower", 1, 0), metric(m2, sizeof m2, "a", "lower", 1, 0),
             metric(m3, sizeof m3, "x", "lower", 1, 0), metric(m4, sizeof m4, "a", "lower", 1, 0),
             metric(m5, sizeof m5, "x", "lower", 1, 0));
    assert_int_equal(dmm_bench_parse(few, strlen(few), "t.json", &a, err, sizeof err), -1);
    assert_sentence(err, "not a bench result: the metric \"x\" appears twice (metric 3 repeats it)");
    free(t1);
    free(t2);
}

static void a_file_above_the_limit_is_refused_unread(void **state) {
    (void)state;
    char path[] = "/tmp/dmm_test_compare_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, DMM_BENCH_MAX_FILE + 1), 0); /* a sparse file: costs nothing */
    close(fd);
    dmm_bench_file f;
    char err[512] = "";
    assert_int_equal(dmm_bench_load(path, &f, err, sizeof err), -1);
    unlink(path);
    if (strstr(err, "larger than 4 MiB, the most a bench result may be") == NULL) fail_msg("%s", err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(repeats_and_lookups_cost_n_log_n_comparisons_not_n_squared),
        cmocka_unit_test(a_file_above_the_limit_is_refused_unread),
        cmocka_unit_test(a_slowdown_above_the_noise_is_worse_and_within_it_is_same),
        cmocka_unit_test(the_floor_holds_when_a_metric_has_no_spread),
        cmocka_unit_test(the_direction_decides_what_is_worse),
        cmocka_unit_test(metrics_in_one_file_are_added_or_removed_not_failures),
        cmocka_unit_test(malformed_json_and_wrong_shapes_are_refused_with_a_sentence),
        cmocka_unit_test(escapes_and_numbers_read_as_written),
        cmocka_unit_test(different_benches_or_meanings_are_refused),
        cmocka_unit_test(what_a_bench_writes_reads_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
