/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_trace.c — the trace reader of the replay tool (tools/trace.c, compiled in here):
 * header keys (unknown ones ignored), events, frees resolved to their allocation, dense streams, the
 * peak of live bytes, every malformed input refused with its line number; and the real gpt2 trace of
 * data/traces, read through the zlib loader, with the numbers its README states.
 * Hostile files: a gzip stream cut anywhere (mid-line, at a line's end, its trailer missing) is an error
 * that says "truncated" with the compressed offset, never a shorter trace (the loader once took zlib's
 * short read for the end of the file); a damaged one says "corrupt"; a line longer than
 * DMM_TRACE_MAX_LINE is refused; and the loader streams: 64 MiB of text cost no allocation above its
 * 1 MiB window (the malloc and realloc of trace.c are counted here). Bounds: the text and record bounds
 * hold to the byte and the record, in memory and from a file, and every shipped trace fits the defaults
 * (the endless inputs themselves are test_cli_files.c's, through the tool). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static size_t largest_request; /* the largest single malloc/realloc trace.c made */
static void *counted_malloc(size_t n) {
    if (n > largest_request) largest_request = n;
    return malloc(n);
}
static void *counted_realloc(void *p, size_t n) {
    if (n > largest_request) largest_request = n;
    return realloc(p, n);
}
#define malloc(n) counted_malloc(n)
#define realloc(p, n) counted_realloc((p), (n))
#include "../../tools/trace.c"
#undef malloc
#undef realloc

#include "testkit.h"

static int parse(const char *text, dmm_trace *t, char *err) {
    return dmm_trace_parse(text, strlen(text), t, err, 256);
}

static void a_small_trace_is_read_and_resolved(void **state) {
    (void)state;
    const char *text = "# dmm-trace v1\n"
                       "# workload: tiny\n"
                       "# native_peak_allocated: 3072\n"
                       "# native_peak_reserved: 4096\n"
                       "# some_future_key: whatever\n"
                       "0 a 1 1024 0\n"
                       "5 a 2 2048 7\r\n"
                       "\n"
                       "9 f 1\n"
                       "12 a 5 512 0\n"
                       "20 f 2\n";
    dmm_trace t;
    char err[256] = "";
    assert_int_equal(parse(text, &t, err), 0);
    assert_string_equal(t.workload, "tiny");
    assert_int_equal(t.native_peak_allocated, 3072);
    assert_int_equal(t.native_peak_reserved, 4096);
    assert_int_equal(t.n, 5);
    assert_int_equal(t.allocs, 3);
    assert_int_equal(t.frees, 2);
    assert_int_equal(t.peak_live_bytes, 3072);
    assert_int_equal(t.max_bytes, 2048);
    assert_int_equal(t.duration_us, 20);
    assert_int_equal(t.nstreams, 2);
    assert_int_equal(t.stream_ids[1], 7);
    /* the free of id 2 names allocation ordinal 1, its bytes and its stream */
    assert_int_equal(t.ev[4].kind, DMM_TRACE_FREE);
    assert_int_equal(t.ev[4].slot, 1);
    assert_int_equal(t.ev[4].bytes, 2048);
    assert_int_equal(t.ev[4].stream, 1);
    assert_int_equal(t.ev[3].slot, 2); /* id 5 is the third allocation: ids may skip */
    dmm_trace_free(&t);
}

static void malformed_traces_are_refused_with_their_line(void **state) {
    (void)state;
    struct {
        const char *text, *mentions;
    } bad[] = {
        {"0 a 1 10 0\n", "dmm-trace v1"},
        {"# dmm-trace v1\n0 f 3\n", "line 2: free of allocation id 3"},
        {"# dmm-trace v1\n0 a 1 10 0\n1 f 1\n2 f 1\n", "line 4: second free"},
        {"# dmm-trace v1\n0 a 4 10 0\n1 a 4 10 0\n", "line 3: allocation id 4 is not above"},
        {"# dmm-trace v1\n0 a 1 0 0\n", "line 2: an allocation needs"},
        {"# dmm-trace v1\n0 x 1\n", "line 2: expected"},
        {"# dmm-trace v1\nzero a 1 10 0\n", "line 2: expected"},
        {"# dmm-trace v1\n0 a 0 10 0\n", "positive id"},
        {"# dmm-trace v1\n0 a 1 9223372036854775808 0\n1 a 2 9223372036854775808 0\n", "line 3: 9223372036854775808 more bytes"},
        {"", "empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dmm_trace t;
        char err[256] = "";
        assert_int_equal(parse(bad[i].text, &t, err), -1);
        if (strstr(err, bad[i].mentions) == NULL) fail_msg("case %zu: '%s' does not mention '%s'", i, err, bad[i].mentions);
        assert_null(t.ev);
        dmm_trace_free(&t);
    }
}

static void the_real_gpt2_trace_reads_as_its_readme_says(void **state) {
    (void)state;
    const char *path = DMM_SOURCE_DIR "/data/traces/gpt2-train.trace.gz";
    dmm_trace t;
    char err[256] = "";
    if (dmm_trace_load(path, &t, err, sizeof err) != 0) fail_msg("%s", err);
    assert_string_equal(t.workload, "gpt2-train");
    assert_int_equal(t.allocs, 8989);
    assert_int_equal(t.frees, 8986);
    assert_int_equal(t.native_peak_allocated, 8132575232ull);
    assert_int_equal(t.native_peak_reserved, 9974054912ull);
    assert_int_equal(t.peak_live_bytes, 8113058504ull);
    assert_int_equal(t.nstreams, 1);
    dmm_trace_free(&t);
}

/* Writes `len` bytes of `data` to a fresh temporary file; its path into path[64]. */
static void write_file(char *path, const void *data, size_t len) {
    snprintf(path, 64, "/tmp/dmm-test-trace-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

/* The bytes of a file (malloc'd); its length into *len. */
static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *b = malloc(1 << 20);
    *len = fread(b, 1, 1 << 20, f);
    assert_true(*len < (1 << 20));
    fclose(f);
    return b;
}

static void expect_load_error(const unsigned char *gz, size_t len, const char *want, const char *want2) {
    char path[64], err[768] = "";
    write_file(path, gz, len);
    dmm_trace t;
    int rc = dmm_trace_load(path, &t, err, sizeof err);
    unlink(path);
    if (rc == 0) fail_msg("%zu bytes loaded as a trace of %zu events; wanted '%s'", len, t.n, want);
    if (strstr(err, want) == NULL || (want2 != NULL && strstr(err, want2) == NULL))
        fail_msg("%zu bytes: '%s' does not mention '%s' and '%s'", len, err, want, want2 ? want2 : "");
    assert_null(t.ev);
}

static void a_cut_gzip_trace_is_an_error_that_says_truncated(void **state) {
    (void)state;
    size_t len = 0;
    unsigned char *gz = read_all(DMM_SOURCE_DIR "/data/traces/gpt2-train.trace.gz", &len);
    /* a recorder killed mid-run: cut anywhere, the trailer missing or short by one byte */
    size_t cuts[] = {len * 45 / 100, len / 2 + 1, len - 8, len - 1, 40};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        expect_load_error(gz, cuts[i], "is truncated: its gzip stream stops in the middle", "compressed bytes");
    /* the whole file still reads */
    char path[64], err[512] = "";
    write_file(path, gz, len);
    dmm_trace t;
    if (dmm_trace_load(path, &t, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(t.n, 17975);
    dmm_trace_free(&t);
    unlink(path);
    /* damaged: a flipped byte of the checksum, one in the middle of the data */
    gz[len - 6] ^= 0xff;
    expect_load_error(gz, len, "is corrupt", "compressed byte");
    gz[len - 6] ^= 0xff;
    gz[len / 3] ^= 0x55;
    expect_load_error(gz, len, "trace '/tmp/dmm-test-trace-", NULL); /* corrupt, or garbage that reads wrong */
    free(gz);
}

/* The gzip of text[0..n) repeated `times` times, as a temporary file. */
static void write_gz(char *path, const char *head, const char *text, size_t n, size_t times) {
    snprintf(path, 64, "/tmp/dmm-test-trace-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    gzFile f = gzdopen(fd, "wb1");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, head, (unsigned)strlen(head)), (int)strlen(head));
    for (size_t i = 0; i < times; i++) assert_int_equal(gzwrite(f, text, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
}

static void a_long_line_is_refused_and_a_big_text_is_streamed(void **state) {
    (void)state;
    size_t n = DMM_TRACE_MAX_LINE + 10;
    char *line = malloc(n + 1);
    memset(line, 'x', n);
    line[0] = '#';
    line[n] = '\0';
    char *text = malloc(n + 64);
    snprintf(text, n + 64, "# dmm-trace v1\n%s\n0 a 1 512 0\n", line);
    dmm_trace t;
    char err[256] = "";
    assert_int_equal(parse(text, &t, err), -1);
    if (strstr(err, "line 2 is longer than 65536 bytes") == NULL) fail_msg("%s", err);
    char path[64];
    write_gz(path, "# dmm-trace v1\n", line, n, 1); /* and the loader, with no newline in sight */
    assert_int_equal(dmm_trace_load(path, &t, err, sizeof err), -1);
    unlink(path);
    if (strstr(err, "line 2 is longer than 65536 bytes") == NULL) fail_msg("%s", err);
    free(text);
    free(line);

    /* 64 MiB of blank lines in a 64 KiB file (a gzip bomb's shape): read through the window, never whole */
    char blank[1 << 16];
    memset(blank, '\n', sizeof blank);
    write_gz(path, "# dmm-trace v1\n0 a 1 512 0\n", blank, sizeof blank, 1024);
    largest_request = 0;
    if (dmm_trace_load(path, &t, err, sizeof err) != 0) fail_msg("%s", err);
    unlink(path);
    assert_int_equal(t.n, 1);
    if (largest_request > (1 << 20)) fail_msg("the loader asked for %zu bytes at once", largest_request);
    dmm_trace_free(&t);
}

/* The bounds of a reading (trace.h, dmm_trace_limits): exactly what they say, in memory and from a
 * file, and every trace the project ships fits the defaults. */
static void the_bounds_hold_exactly_and_the_shipped_traces_fit_the_defaults(void **state) {
    (void)state;
    const char *text = "# dmm-trace v1\n# workload: tiny\n0 a 1 1024 0\n5 a 2 2048 7\n9 f 1\n12 a 5 512 0\n20 f 2\n";
    size_t len = strlen(text);
    char path[64], err[512] = "";
    write_file(path, text, len);
    dmm_trace t;
    for (int from_file = 0; from_file < 2; from_file++) {
        struct {
            dmm_trace_limits limits;
            const char *refusal; /* NULL: accepted */
        } cases[] = {
            {{len, 5}, NULL},
            {{0, 0}, NULL}, /* the defaults */
            {{len - 1, 0}, "bytes of text"},
            {{0, 4}, "more than 4 records"},
            {{1, 1}, "more than 1 bytes of text"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            err[0] = '\0';
            int rc = from_file ? dmm_trace_load_limited(path, &cases[i].limits, &t, err, sizeof err)
                               : dmm_trace_parse_limited(text, len, &cases[i].limits, &t, err, sizeof err);
            if (cases[i].refusal == NULL) {
                if (rc != 0) fail_msg("case %zu (%s): %s", i, from_file ? "file" : "memory", err);
                assert_int_equal(t.n, 5);
            } else {
                if (rc == 0 || strstr(err, cases[i].refusal) == NULL)
                    fail_msg("case %zu (%s): rc %d, '%s'; wanted '%s'", i, from_file ? "file" : "memory", rc, err,
                             cases[i].refusal);
                assert_null(t.ev);
                if (strstr(err, strstr(cases[i].refusal, "records") ? "--max-records=N" : "--max-input-bytes=SIZE") == NULL)
                    fail_msg("the sentence names no flag that raises the bound: %s", err);
            }
            dmm_trace_free(&t);
        }
    }
    unlink(path);
    const char *shipped[] = {"bert-dynamic", "gpt2-steps", "gpt2-train", "models-train", "vit-steps"};
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, DMM_SOURCE_DIR "/data/traces/%s.trace.gz", shipped[i]);
        if (dmm_trace_load_limited(p, NULL, &t, err, sizeof err) != 0) fail_msg("%s: %s", shipped[i], err);
        assert_true(t.n > 0);
        dmm_trace_free(&t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_cut_gzip_trace_is_an_error_that_says_truncated),
        cmocka_unit_test(a_long_line_is_refused_and_a_big_text_is_streamed),
        cmocka_unit_test(a_small_trace_is_read_and_resolved),
        cmocka_unit_test(malformed_traces_are_refused_with_their_line),
        cmocka_unit_test(the_real_gpt2_trace_reads_as_its_readme_says),
        cmocka_unit_test(the_bounds_hold_exactly_and_the_shipped_traces_fit_the_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
