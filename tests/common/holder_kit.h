/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/holder_kit.h — what the tests of the holder (`dmm hold`, dmm/ipc.h) share: a short sleep,
 * the descriptors a process holds, a holder's census asked on a connection of its own, and running
 * `dmm hold` where it must refuse to start. */
#ifndef DMM_TEST_HOLDER_KIT_H
#define DMM_TEST_HOLDER_KIT_H

#include <stddef.h>
#include <sys/types.h>

#include "dmm/ipc.h"

void dmm_test_sleep_ms(long ms);
/* The descriptors process `pid` holds now (its /proc/PID/fd entries). */
size_t dmm_test_fd_count(pid_t pid);
/* The census of the holder at `sock_path`, asked on a connection of its own (which must work). */
dmm_ipc_census dmm_test_holder_census(const char *sock_path);
/* Runs `CLI hold --socket path` (its stderr appended to log_path) expecting it to refuse to start:
 * returns its wait status; fails the test if it still runs after 20 s (it hung). */
int dmm_test_holder_refuses(const char *cli, const char *path, const char *log_path);
/* Starts `CLI hold --socket path EXTRA...` (extra: NULL-terminated, may be NULL) with its stderr to err_fd
 * (-1: appended to log_path) and, if nofile > 0, that descriptor limit; returns its pid once it answers a
 * connection (dialled with a 1 s deadline: a stuck holder fails the test instead of hanging it), or -1
 * if it exited (*status, may be NULL, = its wait status). Fails the test if it neither answers nor exits
 * within 20 s. */
pid_t dmm_test_holder_start(const char *cli, const char *path, const char *log_path, int err_fd,
                            unsigned long nofile, const char *const *extra, int *status);
/* Stops a holder with SIGTERM and asserts it exited 0. */
void dmm_test_holder_stop(pid_t pid);

#endif
