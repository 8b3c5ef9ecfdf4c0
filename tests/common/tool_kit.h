/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/tool_kit.h — running the built `dmm` tool from a test, as a user would: in a child
 * process, with its own standard output and error captured, under a time limit that is only a safety
 * net (a run that does not end within it is a failure that says so; no test asserts on a time).
 */
#ifndef DMM_TEST_TOOL_KIT_H
#define DMM_TEST_TOOL_KIT_H

#include <stdbool.h>
#include <stddef.h>

/* build/tools/dmm, found from this test's own path (build/tests/<test>); false when it was not built
 * (DMM_BUILD_TOOLS=OFF: the caller skips). */
bool dmm_test_tool_find(void);
const char *dmm_test_tool_path(void);

typedef struct dmm_test_tool_run {
    int rc; /* the exit code; 128 + the signal when one ended it */
    char out[1 << 16], err[1 << 14];
} dmm_test_tool_run;

/* Runs the tool with args (NULL-terminated, after argv[0]) and waits, for at most 60 s. stdout_fd ≥ 0:
 * the child's standard output is that descriptor (r->out stays empty), else a file read into r->out. */
void dmm_test_tool_run_argv(dmm_test_tool_run *r, int stdout_fd, const char *const *args);
/* The same with the arguments listed, NULL last, and the output captured. */
void dmm_test_tool_run_args(dmm_test_tool_run *r, const char *first, ...);

/* A file's content into buf (NUL-terminated, at most cap - 1 bytes), then the file removed. */
void dmm_test_slurp(const char *path, char *buf, size_t cap);
/* Fails, printing both streams, unless the run exited rc and its stdout / stderr hold the fragments
 * given (NULL: anything). */
void dmm_test_tool_expect(const dmm_test_tool_run *r, int rc, const char *in_out, const char *in_err);

#endif
