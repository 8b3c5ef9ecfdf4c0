/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/testkit.c — shared helpers for the cmocka tests. */
#include "testkit.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void dmm_test_error_mentions(const char *first, ...) {
    const char *err = dmm_last_error();
    va_list ap;
    va_start(ap, first);
    for (const char *frag = first; frag != NULL; frag = va_arg(ap, const char *))
        if (strstr(err, frag) == NULL) {
            va_end(ap);
            fail_msg("the error sentence does not mention '%s': \"%s\"", frag, err);
        }
    va_end(ap);
}

void dmm_test_census_zero(dmm_driver *d) {
    dmm_driver_census c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    DMM_OK_OR_FAIL(d->ops->census(d, &c));
    if (c.reserved_bytes || c.handles || c.handle_bytes || c.mapped_bytes || c.eager_bytes)
        fail_msg("the driver still holds: reserved %llu, handles %llu (%llu bytes), mapped %llu, eager %llu",
                 (unsigned long long)c.reserved_bytes, (unsigned long long)c.handles,
                 (unsigned long long)c.handle_bytes, (unsigned long long)c.mapped_bytes,
                 (unsigned long long)c.eager_bytes);
}

dmm_pool_stats dmm_test_pool_stats(dmm_pool *pool) {
    dmm_pool_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    DMM_OK_OR_FAIL(dmm_pool_stats_get(pool, &s));
    return s;
}

void *dmm_test_pool_malloc(dmm_pool *pool, size_t bytes, dmm_stream stream) {
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(pool, bytes, stream, &p));
    assert_non_null(p);
    return p;
}

void dmm_test_pool_free(dmm_pool *pool, void *ptr, dmm_stream stream) {
    DMM_OK_OR_FAIL(dmm_pool_free(pool, ptr, stream));
}

dmm_test_pool_fx *dmm_test_pool_fx_open(const dmm_pool_config *pc, uint64_t cache_limit) {
    dmm_test_pool_fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(f->host, &f->drv));
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = (uint64_t)16 << 30;
    ac.cache_limit_bytes = cache_limit;
    DMM_OK_OR_FAIL(dmm_arena_create(f->drv, &ac, &f->arena));
    DMM_OK_OR_FAIL(dmm_pool_create(f->arena, f->drv, pc, &f->pool));
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    return f;
}

void dmm_test_pool_fx_close(dmm_test_pool_fx *f) {
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    dmm_pool_stats s = dmm_test_pool_stats(f->pool);
    assert_int_equal(s.allocations.current, 0);
    assert_int_equal(s.allocated_bytes.current, 0);
    DMM_OK_OR_FAIL(dmm_pool_destroy(f->pool));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->arena));
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->drv);
    dmm_driver_destroy(f->host);
    free(f);
}

void dmm_test_pool_poll_until_reaped(dmm_pool *pool) {
    for (int i = 0; i < 4; i++) DMM_OK_OR_FAIL(dmm_pool_trim(pool, UINT64_MAX, NULL));
}

void dmm_test_prot_at(const void *addr, char out[5]) {
    FILE *fp = fopen("/proc/self/maps", "r");
    char line[512];
    uintptr_t p = (uintptr_t)addr;
    strcpy(out, "????");
    assert_non_null(fp);
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && p >= lo && p < hi) {
            memcpy(out, perms, 5);
            break;
        }
    }
    fclose(fp);
}

pid_t dmm_test_spawn_self(const char *argv0, const char *const *args, int *sock) {
    enum { MAX_ARGV = 16 };
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    fcntl(sv[0], F_SETFD, FD_CLOEXEC);
    /* the child's argv, built before the fork (the child only closes, execs or exits) */
    char fdtext[16];
    snprintf(fdtext, sizeof fdtext, "%d", sv[1]);
    char *argv[MAX_ARGV];
    size_t n = 0;
    argv[n++] = (char *)argv0;
    for (size_t i = 0; args != NULL && args[i] != NULL; i++) {
        assert_true(n < MAX_ARGV - 2);
        argv[n++] = (char *)args[i];
    }
    argv[n++] = fdtext;
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        execv("/proc/self/exe", argv);
        _exit(126);
    }
    close(sv[1]);
    *sock = sv[0];
    return pid;
}
