/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/holder_kit.c — the holder tests' shared helpers (holder_kit.h). */
#include "holder_kit.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testkit.h"

void dmm_test_sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

size_t dmm_test_fd_count(pid_t pid) {
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(p);
    size_t n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    if (d != NULL) closedir(d);
    return n;
}

dmm_ipc_census dmm_test_holder_census(const char *sock_path) {
    dmm_ipc_client *c = NULL;
    DMM_OK_OR_FAIL(dmm_ipc_connect(sock_path, &c));
    dmm_ipc_census k = {.size = sizeof k};
    DMM_OK_OR_FAIL(dmm_ipc_census_get(c, &k));
    dmm_ipc_disconnect(c);
    return k;
}

int dmm_test_holder_refuses(const char *cli, const char *path, const char *log_path) {
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (log >= 0) dup2(log, 2);
        execl(cli, "dmm", "hold", "--socket", path, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 2000; i++) {
        int st;
        if (waitpid(p, &st, WNOHANG) == p) return st;
        dmm_test_sleep_ms(10);
    }
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    fail_msg("dmm hold --socket %s still runs after 20 s: it hangs where it should refuse", path);
    return -1;
}

pid_t dmm_test_holder_start(const char *cli, const char *path, const char *log_path, int err_fd,
                            unsigned long nofile, const char *const *extra, int *status) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int log = err_fd >= 0 ? err_fd : open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (log >= 0) dup2(log, 2);
        if (nofile > 0) {
            struct rlimit rl = {nofile, nofile};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(126);
        }
        const char *argv[16] = {"dmm", "hold", "--socket", path};
        int n = 4;
        for (int i = 0; extra != NULL && extra[i] != NULL && n < 15; i++) argv[n++] = extra[i];
        argv[n] = NULL;
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 2000; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            if (status != NULL) *status = st;
            return -1;
        }
        dmm_ipc_client *c;
        dmm_ipc_client_config cc = {sizeof cc, path, 1000};
        if (dmm_ipc_connect_with(&cc, &c) == DMM_OK) {
            dmm_ipc_disconnect(c);
            return pid;
        }
        dmm_test_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_msg("%s", "the holder did not start within 20 s");
    return -1;
}

void dmm_test_holder_stop(pid_t pid) {
    assert_true(pid > 0); /* never kill(-1) or kill(0): those signal every process we may signal */
    kill(pid, SIGTERM);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}
