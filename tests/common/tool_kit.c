/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/tool_kit.c — the built tool run in a child process (contract: tool_kit.h).
 * posix_spawn with the child's stdout and stderr on files (or a descriptor the test holds), a wait
 * polled every 100 ms up to 60 s, then SIGKILL and a failure: a hang cannot stall the suite.
 */
#include "tool_kit.h"

#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testkit.h"

extern char **environ;

static char tool[4200];

bool dmm_test_tool_find(void) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return false;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL) return false;
    *slash = '\0';
    snprintf(tool, sizeof tool, "%s/../tools/dmm", self);
    return access(tool, X_OK) == 0;
}

const char *dmm_test_tool_path(void) { return tool; }

void dmm_test_slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f != NULL ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f != NULL) fclose(f);
    unlink(path);
}

void dmm_test_tool_run_argv(dmm_test_tool_run *r, int stdout_fd, const char *const *args) {
    char *argv[40];
    int argc = 0;
    argv[argc++] = tool;
    for (size_t i = 0; args[i] != NULL; i++) {
        assert_true(argc < 39);
        argv[argc++] = (char *)args[i];
    }
    argv[argc] = NULL;
    char out_path[] = "/tmp/dmm-test-tool-out-XXXXXX", err_path[] = "/tmp/dmm-test-tool-err-XXXXXX";
    int fo = mkstemp(out_path), fe = mkstemp(err_path);
    assert_true(fo >= 0 && fe >= 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, stdout_fd >= 0 ? stdout_fd : fo, 1);
    posix_spawn_file_actions_adddup2(&fa, fe, 2);
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, tool, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fo);
    close(fe);
    int status = 0;
    for (int waited = 0;; waited++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (waited == 600) { /* 60 s: a safety net, not a measurement */
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            unlink(out_path);
            unlink(err_path);
            fail_msg("dmm %s ... did not finish within 60 s", args[0] != NULL ? args[0] : "");
        }
        usleep(100 * 1000);
    }
    r->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    dmm_test_slurp(out_path, r->out, sizeof r->out);
    dmm_test_slurp(err_path, r->err, sizeof r->err);
}

void dmm_test_tool_run_args(dmm_test_tool_run *r, const char *first, ...) {
    const char *args[40];
    size_t n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a != NULL; a = va_arg(ap, const char *)) {
        assert_true(n < 39);
        args[n++] = a;
    }
    va_end(ap);
    args[n] = NULL;
    dmm_test_tool_run_argv(r, -1, args);
}

void dmm_test_tool_expect(const dmm_test_tool_run *r, int rc, const char *in_out, const char *in_err) {
    if (r->rc != rc || (in_out != NULL && strstr(r->out, in_out) == NULL) ||
        (in_err != NULL && strstr(r->err, in_err) == NULL))
        fail_msg("rc %d (wanted %d)\nstdout: %.600s\nstderr: %.600s\nwanted stdout '%s', stderr '%s'", r->rc, rc, r->out,
                 r->err, in_out ? in_out : "", in_err ? in_err : "");
}
