/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/testkit.h — shared helpers for the cmocka tests. */
#ifndef DMM_TESTKIT_H
#define DMM_TESTKIT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
/* cmocka.h needs the includes above */
#include <cmocka.h>

#include "dmm/dmm.h"

/* Asserts the call returned DMM_OK, printing the last error otherwise. */
#define DMM_OK_OR_FAIL(call)                                                                       \
    do {                                                                                           \
        dmm_status s_ = (call);                                                                    \
        if (s_ != DMM_OK) fail_msg("%s -> %s: %s", #call, dmm_status_str(s_), dmm_last_error());  \
    } while (0)

/* Asserts the thread's last error sentence contains every one of the NULL-terminated fragments. */
void dmm_test_error_mentions(const char *first, ...);

/* Asserts the driver holds nothing: no reservation, handle, mapping or eager allocation (names what is
 * left otherwise). */
void dmm_test_census_zero(dmm_driver *d);

/* The pool's stats (asserting the call worked). */
dmm_pool_stats dmm_test_pool_stats(dmm_pool *pool);
/* A pool block that must be handed out (asserting it was), and its free (asserting it was accepted). */
void *dmm_test_pool_malloc(dmm_pool *pool, size_t bytes, dmm_stream stream);
void dmm_test_pool_free(dmm_pool *pool, void *ptr, dmm_stream stream);
/* The pool fixture of the pool tests: a pool over an arena (16 GiB reserved, cache_limit bytes of
 * cache) over the fault driver over the host driver. Open checks the new pool; close checks it, asserts
 * nothing is allocated, destroys all and asserts the host driver holds nothing. pc may be NULL. */
typedef struct dmm_test_pool_fx {
    dmm_driver *host, *drv; /* drv = the fault driver over host */
    dmm_mechanism *arena;
    dmm_pool *pool;
} dmm_test_pool_fx;
dmm_test_pool_fx *dmm_test_pool_fx_open(const dmm_pool_config *pc, uint64_t cache_limit);
void dmm_test_pool_fx_close(dmm_test_pool_fx *f);
/* Trims until no old place of an alias is left (a fence recorded by one poll completes by the next
 * on the host driver). */
void dmm_test_pool_poll_until_reaped(dmm_pool *pool);

/* The permissions ("rw-p", "---p", "r--s", …) of this process's mapping that contains addr, from
 * /proc/self/maps ("????": none). */
void dmm_test_prot_at(const void *addr, char out[5]);

/* Starts this binary again (/proc/self/exe) in a new process, over an AF_UNIX SOCK_SEQPACKET
 * socketpair: the child's argv is argv0, then the NULL-terminated args (NULL: none), then the number of
 * the child's end of the socket, in decimal. The child keeps only its end (ours is FD_CLOEXEC and closed
 * there before the exec; a failed exec exits 126). Returns the child's pid; *sock = our end (the child's
 * end is closed here). */
pid_t dmm_test_spawn_self(const char *argv0, const char *const *args, int *sock);

/* Exit code that CTest reads as "skipped" (SKIP_RETURN_CODE). */
#define DMM_TEST_SKIP 77

#endif
