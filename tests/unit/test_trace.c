/* tests/unit/test_trace.c — the trace reader of the replay tool (tools/trace.c, compiled in here):
 * header keys (unknown ones ignored), events, frees resolved to their allocation, dense streams, the
 * peak of live bytes, every malformed input refused with its line number; and the real gpt2 trace of
 * data/traces, read through the zlib loader, with the numbers its README states. */
#include "../../tools/trace.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_small_trace_is_read_and_resolved),
        cmocka_unit_test(malformed_traces_are_refused_with_their_line),
        cmocka_unit_test(the_real_gpt2_trace_reads_as_its_readme_says),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
