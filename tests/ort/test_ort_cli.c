/* SPDX-License-Identifier: Apache-2.0 */
/* tests/ort/test_ort_cli.c — `dmm ort` (tools/cmd_ort.c), the built tool run in a child process against
 * the real ONNX Runtime.
 *
 * What is proven: --write-model writes a model the tool then runs (exit 0) printing dmm's and ONNX
 * Runtime's stats side by side (NumAllocs, InUse beside dmm's counts); a --limit below a Run's need fails
 * with exit 1 and dmm's sentence (tier, requested, limit) in ONNX Runtime's error; bad usage is exit 2
 * with a sentence naming what was wrong.
 */
#include <sys/wait.h>

#include "ort_kit.h"

static int run_with(bool set_lib, const char *args, char *out, size_t cap) {
    char cmd[2048];
    const char *lib = getenv(DMM_ORT_LIB_ENV);
    if (set_lib)
        snprintf(cmd, sizeof cmd, "DMM_ORT_LIB='%s' '%s' %s 2>&1", lib != NULL && lib[0] ? lib : DMM_ORT_LIB_DEFAULT,
                 DMM_CLI_PATH, args);
    else
        snprintf(cmd, sizeof cmd, "env -u DMM_ORT_LIB '%s' %s 2>&1", DMM_CLI_PATH, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run(const char *args, char *out, size_t cap) { return run_with(true, args, out, cap); }

static void dmm_ort_runs_a_written_model_and_reports_both_sides(void **state) {
    (void)state;
    dmm_ort_runtime *rt = kit_ort_open_or_skip("test_ort_cli"); /* skipped without ONNX Runtime */
    dmm_ort_runtime_close(rt);
    char model[] = "/tmp/dmm-ort-cli-XXXXXX";
    int fd = mkstemp(model);
    assert_true(fd >= 0);
    close(fd);
    static char out[16384];
    char args[512];
    snprintf(args, sizeof args, "ort --write-model %s", model);
    assert_int_equal(run(args, out, sizeof out), 0);
    assert_non_null(strstr(out, "MatMul-Add-Relu"));
    /* DMM_ORT_LIB unset: the tool finds the .ort/ of the tree it was built from (scripts/ort.sh) */
    if (access(DMM_ORT_LIB_DEFAULT, R_OK) == 0) {
        snprintf(args, sizeof args, "ort %s --runs 1 --batch 2", model);
        int rc = run_with(false, args, out, sizeof out);
        if (rc != 0) fail_msg("dmm ort without DMM_ORT_LIB exited %d:\n%s", rc, out);
    }
    snprintf(args, sizeof args, "ort %s --runs 3 --batch 4", model);
    assert_int_equal(run(args, out, sizeof out), 0);
    assert_non_null(strstr(out, "3 run(s)"));
    assert_non_null(strstr(out, "NumAllocs "));
    assert_non_null(strstr(out, "InUse 1572864")); /* the two weight matrices, as dmm counts them */
    snprintf(args, sizeof args, "ort %s --limit 1600K --batch 64", model);
    assert_int_equal(run(args, out, sizeof out), 1);
    assert_non_null(strstr(out, "Run 1 failed"));
    assert_non_null(strstr(out, "tier host:0"));
    assert_non_null(strstr(out, "limit 1638400"));
    assert_int_equal(run("ort", out, sizeof out), 2);
    assert_non_null(strstr(out, "give exactly one MODEL.onnx"));
    assert_int_equal(run("ort --runs 0 x.onnx", out, sizeof out), 2);
    assert_non_null(strstr(out, "--runs"));
    unlink(model);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dmm_ort_runs_a_written_model_and_reports_both_sides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
