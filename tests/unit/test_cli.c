/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_cli.c — the dmm tool's command line: the one numeric-option parser (tools/options.c,
 * compiled in here) and the built tool itself (build/tools/dmm, found beside this test's folder, run
 * in a child process by tests/common/tool_kit.c; the tool cases are skipped when it was not built).
 * What the tool does with output files that are not regular and with endless inputs is
 * test_cli_files.c's.
 *
 * What is proven: numeric options refuse trailing junk, signs, exponents, hex, NaN, fractions that are
 * not whole units, values beyond 64 bits or their range, each in a sentence naming the option, the
 * value and the range, and read "2M", "1.5G", "2MiB" exactly; `dmm help`, `dmm --version`, `dmm
 * COMMAND --help` answer on stdout with 0; options take --opt VALUE and --opt=VALUE; an unwritable
 * --report or --json=FILE, or one that names the trace, fails at once, before the trace is read (the
 * trace named here does not exist, and the sentence is the output's); a replay that fails leaves an
 * existing output as it was; `--chunk 9223372036854775808` is refused by the pool (it looped for ever);
 * the old spellings (--json to stdout, --granule 8M, --threshold-floor 5) still work.
 */
#include "../../tools/options.c"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testkit.h"
#include "tool_kit.h"

static const dmm_opt_range SIZES = {1, (uint64_t)1 << 63, true, "a size in bytes", "2M"};
static const dmm_opt_range COUNT = {1, 1000, false, "a number of repetitions", "4"};

static void whole_numbers_and_sizes_are_read_exactly(void **state) {
    (void)state;
    struct {
        const char *text;
        uint64_t want;
    } ok[] = {
        {"1", 1},
        {"2097152", 2097152},
        {"2M", 2u << 20},
        {"2m", 2u << 20},
        {"2MiB", 2u << 20},
        {"2Mi", 2u << 20},
        {"2MB", 2u << 20},
        {"8K", 8192},
        {"1.5G", 3ull << 29},
        {"0.5K", 512},
        {"9223372036854775808", 1ull << 63},
        {"8589934592G", 1ull << 63},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 0;
        char err[256] = "";
        if (dmm_opt_u64("--chunk", ok[i].text, &SIZES, &v, err, sizeof err) != 0) fail_msg("'%s': %s", ok[i].text, err);
        if (v != ok[i].want) fail_msg("'%s' read as %llu", ok[i].text, (unsigned long long)v);
    }
    uint64_t v = 0;
    char err[256];
    assert_int_equal(dmm_opt_u64("--repeat", "1000", &COUNT, &v, err, sizeof err), 0);
    assert_int_equal(v, 1000);
    double x = 0;
    assert_int_equal(dmm_opt_real("--k", "2.5", 0, 1e9, &x, err, sizeof err), 0);
    assert_true(x == 2.5);
    assert_int_equal(dmm_opt_real("--k", "0", 0, 1e9, &x, err, sizeof err), 0);
    assert_true(x == 0);
}

static void junk_signs_and_overflow_are_refused_naming_the_option(void **state) {
    (void)state;
    struct {
        const char *text;
        const dmm_opt_range *r;
        const char *why;
    } bad[] = {
        {"", &SIZES, "it is empty"},
        {"2Q", &SIZES, "'Q' follows the number"},
        {"2M junk", &SIZES, "' junk' follows"},
        {"-1", &SIZES, "it is negative"},
        {"+1", &SIZES, "does not start with a digit"},
        {" 2", &SIZES, "does not start with a digit"},
        {"2 ", &SIZES, "' ' follows"},
        {"nan", &SIZES, "does not start with a digit"},
        {"inf", &SIZES, "does not start with a digit"},
        {"1e3", &SIZES, "'e3' follows"},
        {"0x10", &SIZES, "'x10' follows"},
        {"1.", &SIZES, "a digit must follow the decimal point"},
        {"1.3", &SIZES, "not a whole number of bytes"},
        {"0", &SIZES, "below the least, 1"},
        {"9223372036854775809", &SIZES, "above the most, 9223372036854775808"},
        {"18446744073709551616", &SIZES, "does not fit in 64 bits"},
        {"17179869184G", &SIZES, "does not fit in 64 bits"},
        {"1.0000000001K", &SIZES, "more than 9 decimals"},
        {"4M", &COUNT, "'M' follows"}, /* no suffixes on counts */
        {"1.5", &COUNT, "not a whole number"},
        {"1001", &COUNT, "above the most, 1000"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 12345;
        char err[256] = "";
        if (dmm_opt_u64("--opt", bad[i].text, bad[i].r, &v, err, sizeof err) == 0)
            fail_msg("'%s' was accepted as %llu", bad[i].text, (unsigned long long)v);
        assert_int_equal(v, 12345); /* untouched */
        char quoted[64];
        snprintf(quoted, sizeof quoted, "not '%s'", bad[i].text);
        if (strstr(err, "--opt wants ") != err || strstr(err, quoted) == NULL || strstr(err, bad[i].why) == NULL ||
            strstr(err, "from ") == NULL)
            fail_msg("'%s': the sentence '%s' lacks the option, the value, the range or '%s'", bad[i].text, err,
                     bad[i].why);
    }
    double x = 7;
    char err[256] = "";
    const char *reals[] = {"-1", "abc", "1e9", "2.5x", "nan", "1000000001"};
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        if (dmm_opt_real("--k", reals[i], 0, 1e9, &x, err, sizeof err) == 0) fail_msg("--k '%s' was accepted", reals[i]);
        if (strstr(err, "--k wants a number from 0 to 1000000000") != err) fail_msg("%s", err);
    }
    assert_true(x == 7);
}

/* ---- the built tool ---- */

/* The runner is tests/common/tool_kit.h's, under the short names these tests use. */
typedef dmm_test_tool_run run_out;
#define run_tool(r, ...) dmm_test_tool_run_args((r), __VA_ARGS__)
#define expect dmm_test_tool_expect
#define find_tool dmm_test_tool_find

#define slurp dmm_test_slurp

#define NEED_TOOL()                                                                                \
    do {                                                                                           \
        if (!find_tool()) skip(); /* DMM_BUILD_TOOLS=OFF */                                        \
    } while (0)

static void help_and_version_answer_on_stdout(void **state) {
    (void)state;
    NEED_TOOL();
    static run_out r;
    run_tool(&r, "--version", NULL);
    expect(&r, 0, "dmm ", NULL);
    run_tool(&r, "version", NULL);
    expect(&r, 0, "dmm ", NULL);
    run_tool(&r, "help", NULL);
    expect(&r, 0, "commands:", NULL);
    run_tool(&r, "--help", NULL);
    expect(&r, 0, "replay", NULL);
    run_tool(&r, "help", "replay", NULL);
    expect(&r, 0, "--max-chunk", NULL);
    const char *cmds[] = {"replay", "compare", "info", "version", "help"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        run_tool(&r, cmds[i], "--help", NULL);
        expect(&r, 0, "usage: dmm ", NULL);
    }
    run_tool(&r, NULL);
    expect(&r, 2, NULL, "usage: dmm COMMAND");
    run_tool(&r, "frobnicate", NULL);
    expect(&r, 2, NULL, "unknown command 'frobnicate'");
    run_tool(&r, "help", "frobnicate", NULL);
    expect(&r, 2, NULL, "unknown command 'frobnicate'");
    run_tool(&r, "info", "extra", NULL);
    expect(&r, 2, NULL, "takes no arguments");
    /* a mistyped command or flag: the nearest known spelling, when one is near; none for a far one */
    run_tool(&r, "replpay", NULL);
    expect(&r, 2, NULL, "unknown command 'replpay'; did you mean 'replay'?");
    run_tool(&r, "help", "hodl", NULL);
    expect(&r, 2, NULL, "did you mean 'hold'?");
    run_tool(&r, "hold", "--sockt", "/nonexistent/s", NULL);
    expect(&r, 2, NULL, "unknown or ambiguous option '--sockt'; did you mean '--socket'?");
    run_tool(&r, "replay", "x.gz", "--granuel=2M", NULL);
    expect(&r, 2, NULL, "did you mean '--granule'?");
    run_tool(&r, "frobnicate", NULL);
    assert_null(strstr(r.err, "did you mean"));
}

/* The HTML report (--report): its axes are round ticks in one unit (0, step, 2 × step, ... with a step
 * of 1, 2 or 5 times a power of ten), and dmm's ratio is coloured by the goal the chart draws,
 * PyTorch's own ratio (vit-steps: 1.016 under PyTorch's 1.076: good). */
static void the_report_has_round_ticks_in_one_unit(void **state) {
    (void)state;
    NEED_TOOL();
    static run_out r;
    char path[] = "/tmp/dmm-test-report-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    run_tool(&r, "replay", DMM_SOURCE_DIR "/data/traces/vit-steps.trace.gz", "--report", path, NULL);
    expect(&r, 0, NULL, NULL);
    static char html[8 << 20];
    slurp(path, html, sizeof html);
    const char *axes[2] = {"text-anchor=\"end\">", "text-anchor=\"middle\">"};
    for (int a = 0; a < 2; a++) {
        double v[32];
        char unit[32][8];
        int n = 0;
        for (const char *p = strstr(html, axes[a]); p != NULL && n < 32; p = strstr(p + 1, axes[a])) {
            if (sscanf(p + strlen(axes[a]), "%lf %7[A-Za-z]</text>", &v[n], unit[n]) == 2) n++;
        }
        if (a == 0) n -= 1; /* the last end-anchored text is the PyTorch line's label, not a tick */
        assert_true(n >= 4);
        if (a == 0 && !(v[n - 1] >= 2 && v[n - 1] < 2048)) /* the unit fits the axis: 2 to 2047 of it at the top */
            fail_msg("the bytes axis ends at %g %s: the unit does not fit it", v[n - 1], unit[n - 1]);
        double step = v[1] - v[0];
        double m = step;
        while (m >= 10) m /= 10;
        while (m < 1) m *= 10;
        if (!(fabs(m - 1) < 1e-9 || fabs(m - 2) < 1e-9 || fabs(m - 5) < 1e-9))
            fail_msg("axis %d: the step %g is not 1, 2 or 5 times a power of ten", a, step);
        for (int i = 0; i < n; i++) {
            if (fabs(v[i] - i * step) > 1e-9 * step) fail_msg("axis %d: tick %d is %g, not %g", a, i, v[i], i * step);
            if (strcmp(unit[i], unit[0]) != 0) fail_msg("axis %d mixes units: %s and %s", a, unit[0], unit[i]);
        }
    }
    assert_non_null(strstr(html, "class=\"n good\">1.0160"));
}

/* A small trace file (one step of three allocations), gzip or not: zlib reads both. */
static void small_trace(char *path) {
    snprintf(path, 64, "/tmp/dmm-test-cli-trace-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "# dmm-trace v1\n0 a 1 4194304 0\n1 a 2 1048576 0\n2 f 1\n3 a 3 6291456 0\n4 f 2\n5 f 3\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void bad_options_fail_with_their_name(void **state) {
    (void)state;
    NEED_TOOL();
    static run_out r;
    char trace[64];
    small_trace(trace);
    run_tool(&r, "replay", trace, "--chunk", "2Q", NULL);
    expect(&r, 2, NULL, "--chunk wants a size in bytes");
    run_tool(&r, "replay", trace, "--chunk=-1", NULL);
    expect(&r, 2, NULL, "it is negative");
    run_tool(&r, "replay", trace, "--lag", "18446744073709551616", NULL);
    expect(&r, 2, NULL, "--lag wants a number of allocations");
    run_tool(&r, "replay", trace, "--repeat=0", NULL);
    expect(&r, 2, NULL, "--repeat wants a number of repetitions from 1 to 1000");
    run_tool(&r, "replay", trace, "--granule", "nan", NULL);
    expect(&r, 2, NULL, "--granule wants");
    run_tool(&r, "replay", trace, "--chunk", NULL);
    expect(&r, 2, NULL, "--chunk needs a value");
    run_tool(&r, "replay", trace, "--frob", NULL);
    expect(&r, 2, NULL, "unknown or ambiguous option '--frob' (dmm replay --help"); /* nothing near it */
    run_tool(&r, "compare", "--k", "-1", "a.json", "b.json", NULL);
    expect(&r, 2, NULL, "--k wants a number from 0 to");
    run_tool(&r, "compare", "a.json", "b.json", "--threshold-floor=5x", NULL);
    expect(&r, 2, NULL, "--threshold-floor wants a number");
    /* 2^63 passes the power-of-two and granule checks; the pool refuses it (its doubling looped for ever) */
    run_tool(&r, "replay", trace, "--chunk", "9223372036854775808", NULL);
    expect(&r, 1, NULL, "chunk_bytes 9223372036854775808 is larger than the pool's VA");
    unlink(trace);
}

static void outputs_are_checked_before_the_trace_is_read(void **state) {
    (void)state;
    NEED_TOOL();
    static run_out r;
    const char *missing = "/tmp/dmm-test-cli-no-such-trace.gz";
    run_tool(&r, "replay", missing, "--report", "/nonexistent-dir/r.html", NULL);
    expect(&r, 2, NULL, "--report /nonexistent-dir/r.html cannot be written");
    run_tool(&r, "replay", missing, "--json=/nonexistent-dir/r.json", NULL);
    expect(&r, 2, NULL, "--json /nonexistent-dir/r.json cannot be written");
    char trace[64];
    small_trace(trace);
    run_tool(&r, "replay", trace, "--report", trace, NULL); /* would truncate the trace before reading it */
    expect(&r, 2, NULL, "is the input");
    run_tool(&r, "replay", "--json", "out.json", trace, NULL);
    expect(&r, 2, NULL, "--json takes its file as --json=FILE");
    /* a failed replay leaves an existing output as it was */
    char keep[] = "/tmp/dmm-test-cli-keep-XXXXXX";
    int fd = mkstemp(keep);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "keep", 4), 4);
    close(fd);
    run_tool(&r, "replay", missing, "--json", "--report", keep, NULL);
    expect(&r, 1, NULL, "cannot open trace");
    char buf[16];
    slurp(keep, buf, sizeof buf);
    assert_string_equal(buf, "keep");
    unlink(trace);
}

static void the_old_spellings_still_work(void **state) {
    (void)state;
    NEED_TOOL();
    static run_out r;
    char trace[64];
    small_trace(trace);
    run_tool(&r, "replay", trace, "--json", NULL); /* JSON on stdout, as scripts/device/gpu-check.sh reads it */
    expect(&r, 0, "{\"trace\":", NULL);
    run_tool(&r, "replay", "--granule", "8M", trace, "--chunk=8M", "--max-chunk", "16MiB", "--handle-div=2", "--retain",
             "20", "--settle=100", "--lag", "2", "--repeat", "3", "--no-alias", NULL);
    expect(&r, 0, "granule 8.0 MiB", NULL);
    char json[] = "/tmp/dmm-test-cli-json-XXXXXX";
    int fd = mkstemp(json);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "an older and much longer content than the result", 48), 48);
    close(fd);
    char opt[96];
    snprintf(opt, sizeof opt, "--json=%s", json);
    run_tool(&r, "replay", trace, opt, NULL);
    expect(&r, 0, "peak live", NULL); /* the text on stdout, the JSON in the file, cut to its length */
    static char body[1 << 16];
    slurp(json, body, sizeof body);
    if (body[0] != '{' || strstr(body, "longer content") != NULL) fail_msg("the JSON file holds '%.200s'", body);
    unlink(trace);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(whole_numbers_and_sizes_are_read_exactly),
        cmocka_unit_test(junk_signs_and_overflow_are_refused_naming_the_option),
        cmocka_unit_test(help_and_version_answer_on_stdout),
        cmocka_unit_test(the_report_has_round_ticks_in_one_unit),
        cmocka_unit_test(bad_options_fail_with_their_name),
        cmocka_unit_test(outputs_are_checked_before_the_trace_is_read),
        cmocka_unit_test(the_old_spellings_still_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
