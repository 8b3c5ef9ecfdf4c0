/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_host_driver.c — the host driver keeps real VMM semantics: reservations cost no
 * memory, mapped chunks are PROT_NONE until set_access, unmap puts PROT_NONE back (the hole stays
 * reserved), memfds are closed on release, refusals change nothing, and census is exact. */
#include "testkit.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static dmm_driver *new_host(void) {
    dmm_driver *d = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &d));
    return d;
}

static dmm_driver_census census(dmm_driver *d) {
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(d->ops->census(d, &c));
    return c;
}

static void assert_census(dmm_driver *d, uint64_t reserved, uint64_t handles, uint64_t handle_bytes,
                          uint64_t mapped, uint64_t eager) {
    dmm_driver_census c = census(d);
    assert_int_equal(c.reserved_bytes, reserved);
    assert_int_equal(c.handles, handles);
    assert_int_equal(c.handle_bytes, handle_bytes);
    assert_int_equal(c.mapped_bytes, mapped);
    assert_int_equal(c.eager_bytes, eager);
}

static void assert_census_equal(dmm_driver_census a, dmm_driver_census b) {
    assert_int_equal(a.reserved_bytes, b.reserved_bytes);
    assert_int_equal(a.handles, b.handles);
    assert_int_equal(a.handle_bytes, b.handle_bytes);
    assert_int_equal(a.mapped_bytes, b.mapped_bytes);
    assert_int_equal(a.eager_bytes, b.eager_bytes);
}

static long resident_pages(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    long size = 0, resident = 0;
    assert_int_equal(fscanf(f, "%ld %ld", &size, &resident), 2);
    fclose(f);
    return resident;
}

static int open_fds(void) {
    DIR *dir = opendir("/proc/self/fd");
    assert_non_null(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(dir);
    return n;
}

/* Writes one byte at addr in a forked child; returns the signal that killed it (0 if it lived). */
static int write_in_child(uintptr_t addr) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* cmocka's handler would catch the fault in the child */
        signal(SIGBUS, SIG_DFL);
        *(volatile char *)addr = 42;
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void test_reserve_costs_no_memory(void **state) {
    (void)state;
    dmm_driver *d = new_host();
    long before = resident_pages();
    uintptr_t va = 0;
    DMM_OK_OR_FAIL(d->ops->reserve(d, 64 * GiB, 0, &va));
    long after = resident_pages();
    long page = sysconf(_SC_PAGESIZE);
    /* a 64 GiB backed reservation would be 16 M pages; allow 1 MiB of noise from the test itself */
    assert_true((after - before) * page < (long)MiB);
    assert_int_equal(va % (2 * MiB), 0);
    assert_census(d, 64 * GiB, 0, 0, 0, 0);
    char p[5];
    dmm_test_prot_at((const void *)(va + 10 * GiB), p);
    assert_string_equal(p, "---p");
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, 64 * GiB));
    assert_census(d, 0, 0, 0, 0, 0);
    dmm_driver_destroy(d);
}

static void test_reserve_alignment(void **state) {
    (void)state;
    dmm_driver *d = new_host();
    uintptr_t va = 0;
    DMM_OK_OR_FAIL(d->ops->reserve(d, 4 * MiB, 1 * GiB, &va));
    assert_int_equal(va % GiB, 0);
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, 4 * MiB));
    assert_int_equal(d->ops->reserve(d, 4 * MiB, 3 * MiB, &va), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("reserve", "power of two", NULL);
    assert_int_equal(d->ops->reserve(d, 3 * MiB, 0, &va), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("reserve", "granularity", NULL);
    assert_census(d, 0, 0, 0, 0, 0);
    dmm_driver_destroy(d);
}

static void test_map_access_write_unmap(void **state) {
    (void)state;
    dmm_driver *d = new_host();
    int fds0 = open_fds();
    uintptr_t va = 0;
    DMM_OK_OR_FAIL(d->ops->reserve(d, 16 * MiB, 0, &va));
    dmm_phys h1 = 0, h2 = 0;
    DMM_OK_OR_FAIL(d->ops->create(d, 2 * MiB, &h1));
    DMM_OK_OR_FAIL(d->ops->create(d, 4 * MiB, &h2));
    assert_int_equal(open_fds(), fds0 + 2);
    assert_census(d, 16 * MiB, 2, 6 * MiB, 0, 0);

    DMM_OK_OR_FAIL(d->ops->map(d, va, 2 * MiB, h1));
    DMM_OK_OR_FAIL(d->ops->map(d, va + 2 * MiB, 4 * MiB, h2));
    assert_census(d, 16 * MiB, 2, 6 * MiB, 6 * MiB, 0);
    /* mapped with no access, like cuMemMap */
    char p[5];
    dmm_test_prot_at((const void *)va, p);
    assert_string_equal(p, "---s");
    assert_int_equal(write_in_child(va), SIGSEGV);

    /* one set_access may span several mappings */
    DMM_OK_OR_FAIL(d->ops->set_access(d, va, 6 * MiB, DMM_ACCESS_READ_WRITE));
    dmm_test_prot_at((const void *)(va + 3 * MiB), p);
    assert_string_equal(p, "rw-s");
    memset((void *)va, 0xab, 6 * MiB);
    assert_int_equal(write_in_child(va + 5 * MiB), 0);
    DMM_OK_OR_FAIL(d->ops->set_access(d, va, 2 * MiB, DMM_ACCESS_READ));
    assert_int_equal(write_in_child(va), SIGSEGV);
    assert_int_equal(((volatile unsigned char *)va)[100], 0xab);

    DMM_OK_OR_FAIL(d->ops->unmap(d, va, 2 * MiB));
    dmm_test_prot_at((const void *)va, p);
    assert_string_equal(p, "---p"); /* the hole is reserved again, with no access */
    assert_int_equal(write_in_child(va), SIGSEGV);
    assert_census(d, 16 * MiB, 2, 6 * MiB, 4 * MiB, 0);

    /* the physical handle keeps its contents across unmap / map elsewhere */
    DMM_OK_OR_FAIL(d->ops->map(d, va + 8 * MiB, 2 * MiB, h1));
    DMM_OK_OR_FAIL(d->ops->set_access(d, va + 8 * MiB, 2 * MiB, DMM_ACCESS_READ_WRITE));
    assert_int_equal(((volatile unsigned char *)(va + 8 * MiB))[12345], 0xab);
    DMM_OK_OR_FAIL(d->ops->unmap(d, va + 8 * MiB, 2 * MiB));
    DMM_OK_OR_FAIL(d->ops->unmap(d, va + 2 * MiB, 4 * MiB));
    dmm_test_prot_at((const void *)(va + 2 * MiB), p);
    assert_string_equal(p, "---p");

    DMM_OK_OR_FAIL(d->ops->release(d, h1));
    DMM_OK_OR_FAIL(d->ops->release(d, h2));
    assert_int_equal(open_fds(), fds0); /* the memfds are closed */
    assert_census(d, 16 * MiB, 0, 0, 0, 0);
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, 16 * MiB));
    assert_census(d, 0, 0, 0, 0, 0);
    dmm_driver_destroy(d);
}

static void test_shared_handle_two_views(void **state) {
    (void)state;
    dmm_driver *d = new_host();
    uintptr_t va = 0;
    DMM_OK_OR_FAIL(d->ops->reserve(d, 8 * MiB, 0, &va));
    dmm_phys h = 0;
    DMM_OK_OR_FAIL(d->ops->create(d, 2 * MiB, &h));
    DMM_OK_OR_FAIL(d->ops->map(d, va, 2 * MiB, h));
    DMM_OK_OR_FAIL(d->ops->map(d, va + 4 * MiB, 2 * MiB, h));
    assert_census(d, 8 * MiB, 1, 2 * MiB, 4 * MiB, 0); /* mapped may sum above owned */
    DMM_OK_OR_FAIL(d->ops->set_access(d, va, 2 * MiB, DMM_ACCESS_READ_WRITE));
    DMM_OK_OR_FAIL(d->ops->set_access(d, va + 4 * MiB, 2 * MiB, DMM_ACCESS_READ));
    ((volatile char *)va)[7] = 'x';
    assert_int_equal(((volatile char *)(va + 4 * MiB))[7], 'x');
    DMM_OK_OR_FAIL(d->ops->unmap(d, va, 2 * MiB));
    assert_int_equal(d->ops->release(d, h), DMM_ERR_INVALID_ARGUMENT); /* still mapped once */
    dmm_test_error_mentions("release", "still mapped 1 time", NULL);
    DMM_OK_OR_FAIL(d->ops->unmap(d, va + 4 * MiB, 2 * MiB));
    DMM_OK_OR_FAIL(d->ops->release(d, h));
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, 8 * MiB));
    assert_census(d, 0, 0, 0, 0, 0);
    dmm_driver_destroy(d);
}

static void test_refusals_change_nothing(void **state) {
    (void)state;
    dmm_driver *d = new_host();
    uintptr_t va = 0, other = 0;
    DMM_OK_OR_FAIL(d->ops->reserve(d, 8 * MiB, 0, &va));
    DMM_OK_OR_FAIL(d->ops->reserve(d, 8 * MiB, 0, &other));
    dmm_phys h = 0, h4 = 0;
    DMM_OK_OR_FAIL(d->ops->create(d, 2 * MiB, &h));
    DMM_OK_OR_FAIL(d->ops->create(d, 4 * MiB, &h4));
    DMM_OK_OR_FAIL(d->ops->map(d, va + 2 * MiB, 2 * MiB, h));
    DMM_OK_OR_FAIL(d->ops->set_access(d, va + 2 * MiB, 2 * MiB, DMM_ACCESS_READ_WRITE));
    ((volatile char *)(va + 2 * MiB))[0] = 1;
    dmm_driver_census c0 = census(d);
    int fds0 = open_fds();

    /* map outside any reservation */
    uintptr_t outside = 0x1000000000ull; /* 64 GiB: never one of ours after the reservations above */
    while (outside >= va && outside < va + 8 * MiB) outside += 1 * GiB;
    assert_int_equal(d->ops->map(d, outside, 2 * MiB, h4 == h ? h : h), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("map", "not inside one reservation", NULL);
    /* straddling the end of a reservation */
    assert_int_equal(d->ops->map(d, va + 6 * MiB, 4 * MiB, h4), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("map", "reservation", NULL);
    /* not a granule multiple */
    assert_int_equal(d->ops->map(d, va + 4096, 2 * MiB, h), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("map", "granularity", NULL);
    /* size differs from the handle's */
    assert_int_equal(d->ops->map(d, va + 4 * MiB, 2 * MiB, h4), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("map", "has 4194304 bytes", NULL);
    /* overlaps the existing mapping (from below and exactly) */
    assert_int_equal(d->ops->map(d, va, 4 * MiB, h4), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("overlaps", NULL);
    assert_int_equal(d->ops->map(d, va + 2 * MiB, 2 * MiB, h), DMM_ERR_INVALID_ARGUMENT);
    /* unknown handles: 0, garbage, a stale value */
    assert_int_equal(d->ops->map(d, va, 2 * MiB, 0), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("no live handle", NULL);
    assert_int_equal(d->ops->map(d, va, 2 * MiB, h + 77), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->release(d, 12345), DMM_ERR_INVALID_ARGUMENT);
    /* unmap that does not match one map */
    assert_int_equal(d->ops->unmap(d, va, 2 * MiB), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("unmap", "exactly one", NULL);
    assert_int_equal(d->ops->unmap(d, va, 4 * MiB), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->unmap(d, outside, 2 * MiB), DMM_ERR_INVALID_ARGUMENT);
    /* set_access on the reserved hole, partly mapped ranges, outside, bad value */
    assert_int_equal(d->ops->set_access(d, va, 2 * MiB, DMM_ACCESS_READ_WRITE), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("set_access", "not mapped", NULL);
    assert_int_equal(d->ops->set_access(d, va + 2 * MiB, 4 * MiB, DMM_ACCESS_READ), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->set_access(d, outside, 2 * MiB, DMM_ACCESS_READ), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->set_access(d, va + 2 * MiB, 2 * MiB, (dmm_access)2), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not a dmm_access", NULL);
    /* release of a mapped handle; unreserve with a mapping inside, or of a wrong size */
    assert_int_equal(d->ops->release(d, h), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("still mapped", NULL);
    assert_int_equal(d->ops->unreserve(d, va, 8 * MiB), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("unreserve", "still inside", NULL);
    assert_int_equal(d->ops->unreserve(d, other, 4 * MiB), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->unreserve(d, other + 2 * MiB, 6 * MiB), DMM_ERR_INVALID_ARGUMENT);
    /* create of a non-granule size */
    dmm_phys bad = 0;
    assert_int_equal(d->ops->create(d, 3 * MiB, &bad), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->create(d, 0, &bad), DMM_ERR_INVALID_ARGUMENT);
    /* eager free of something that is not an eager block */
    assert_int_equal(d->ops->free(d, va, 2 * MiB), DMM_ERR_INVALID_ARGUMENT);

    /* nothing changed: tallies, fds, the mapping still writable with its data, the hole still none */
    assert_census_equal(census(d), c0);
    assert_int_equal(open_fds(), fds0);
    assert_int_equal(((volatile char *)(va + 2 * MiB))[0], 1);
    char p[5];
    dmm_test_prot_at((const void *)va, p);
    assert_string_equal(p, "---p");
    dmm_test_prot_at((const void *)(va + 2 * MiB), p);
    assert_string_equal(p, "rw-s");

    DMM_OK_OR_FAIL(d->ops->unmap(d, va + 2 * MiB, 2 * MiB));
    DMM_OK_OR_FAIL(d->ops->release(d, h));
    assert_int_equal(d->ops->release(d, h), DMM_ERR_INVALID_ARGUMENT); /* double release */
    DMM_OK_OR_FAIL(d->ops->release(d, h4));
    /* a stale handle value never validates again, even when its slot is reused */
    dmm_phys again = 0;
    DMM_OK_OR_FAIL(d->ops->create(d, 2 * MiB, &again));
    assert_true(again != h && again != h4);
    assert_int_equal(d->ops->map(d, va, 2 * MiB, h), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(d->ops->release(d, again));
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, 8 * MiB));
    DMM_OK_OR_FAIL(d->ops->unreserve(d, other, 8 * MiB));
    assert_census(d, 0, 0, 0, 0, 0);
    dmm_driver_destroy(d);
}

static void test_eager_streams_events_copy(void **state) {
    (void)state;
    dmm_driver *d = new_host();
    uintptr_t a = 0, b = 0;
    DMM_OK_OR_FAIL(d->ops->alloc(d, 1000, &a));
    DMM_OK_OR_FAIL(d->ops->alloc(d, 3 * MiB, &b));
    assert_census(d, 0, 0, 0, 0, 3 * MiB + 1000);
    memset((void *)a, 7, 1000);
    dmm_stream s = NULL;
    dmm_event e = NULL;
    DMM_OK_OR_FAIL(d->ops->stream_create(d, &s));
    DMM_OK_OR_FAIL(d->ops->event_create(d, &e));
    DMM_OK_OR_FAIL(d->ops->copy(d, b + 10, a, 1000, s));
    assert_int_equal(((unsigned char *)b)[10 + 999], 7);
    DMM_OK_OR_FAIL(d->ops->event_record(d, e, s));
    DMM_OK_OR_FAIL(d->ops->event_query(d, e)); /* host copies are synchronous */
    DMM_OK_OR_FAIL(d->ops->event_synchronize(d, e));
    DMM_OK_OR_FAIL(d->ops->stream_synchronize(d, s));
    DMM_OK_OR_FAIL(d->ops->stream_synchronize(d, NULL));
    DMM_OK_OR_FAIL(d->ops->event_record(d, e, NULL));
    int x = 0;
    assert_int_equal(d->ops->event_query(d, (dmm_event)&x), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->stream_destroy(d, (dmm_stream)&x), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(d->ops->event_destroy(d, e));
    DMM_OK_OR_FAIL(d->ops->stream_destroy(d, s));
    assert_int_equal(d->ops->free(d, a, 999), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("free", "999", NULL);
    DMM_OK_OR_FAIL(d->ops->free(d, a, 1000));
    assert_int_equal(d->ops->free(d, a, 1000), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(d->ops->free(d, b, 3 * MiB));
    assert_census(d, 0, 0, 0, 0, 0);
    uint64_t fr = 0, tot = 0;
    DMM_OK_OR_FAIL(d->ops->mem_info(d, &fr, &tot));
    assert_true(tot > 0 && fr <= tot);
    dmm_driver_destroy(d);
}

static void test_config(void **state) {
    (void)state;
    dmm_driver *d = NULL;
    dmm_host_driver_config cfg = {.size = sizeof cfg, .granularity = 3 * 4096};
    assert_int_equal(dmm_host_driver_create(&cfg, &d), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("granularity", "12288", "power of two", NULL);
    cfg.granularity = 1024;
    assert_int_equal(dmm_host_driver_create(&cfg, &d), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("page size", NULL);
    cfg.size = 4;
    assert_int_equal(dmm_host_driver_create(&cfg, &d), DMM_ERR_SHORT_STRUCT);
    assert_null(d);
    cfg = (dmm_host_driver_config){.size = sizeof cfg, .granularity = 64 * 1024};
    DMM_OK_OR_FAIL(dmm_host_driver_create(&cfg, &d));
    size_t g = 0;
    DMM_OK_OR_FAIL(d->ops->granularity(d, &g));
    assert_int_equal(g, 64 * 1024);
    assert_string_equal(d->ops->name, "host");
    assert_int_equal(d->device.tier, DMM_TIER_HOST);
    uintptr_t va = 0;
    dmm_phys h = 0;
    DMM_OK_OR_FAIL(d->ops->reserve(d, 256 * 1024, 0, &va));
    assert_int_equal(va % (64 * 1024), 0);
    DMM_OK_OR_FAIL(d->ops->create(d, 64 * 1024, &h));
    DMM_OK_OR_FAIL(d->ops->map(d, va + 64 * 1024, 64 * 1024, h));
    DMM_OK_OR_FAIL(d->ops->unmap(d, va + 64 * 1024, 64 * 1024));
    DMM_OK_OR_FAIL(d->ops->release(d, h));
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, 256 * 1024));
    dmm_driver_destroy(d);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &d));
    DMM_OK_OR_FAIL(d->ops->granularity(d, &g));
    assert_int_equal(g, 2 * MiB);
    dmm_driver_census short_c = {.size = 8};
    assert_int_equal(d->ops->census(d, &short_c), DMM_ERR_SHORT_STRUCT);
    dmm_driver_destroy(d);
    dmm_driver_destroy(NULL);
}

/* ---- threads: every thread maps and unmaps its own slots of one reservation ---- */
typedef struct worker {
    dmm_driver *d;
    uintptr_t base;
    int iterations;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int i = 0; i < w->iterations; i++) {
        dmm_phys h = 0;
        if (w->d->ops->create(w->d, 2 * MiB, &h) != DMM_OK) return (void *)1;
        uintptr_t va = w->base + (size_t)(i % 4) * 2 * MiB;
        if (w->d->ops->map(w->d, va, 2 * MiB, h) != DMM_OK) return (void *)2;
        if (w->d->ops->set_access(w->d, va, 2 * MiB, DMM_ACCESS_READ_WRITE) != DMM_OK) return (void *)3;
        ((volatile char *)va)[i] = (char)i;
        if (w->d->ops->unmap(w->d, va, 2 * MiB) != DMM_OK) return (void *)4;
        if (w->d->ops->release(w->d, h) != DMM_OK) return (void *)5;
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    dmm_driver *d = new_host();
    enum { T = 4 };
    uintptr_t va = 0;
    DMM_OK_OR_FAIL(d->ops->reserve(d, T * 8 * MiB, 0, &va));
    pthread_t th[T];
    worker w[T];
    for (int i = 0; i < T; i++) {
        w[i] = (worker){d, va + (size_t)i * 8 * MiB, 200};
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        assert_null(r);
    }
    assert_census(d, T * 8 * MiB, 0, 0, 0, 0);
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, T * 8 * MiB));
    dmm_driver_destroy(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_costs_no_memory),
        cmocka_unit_test(test_reserve_alignment),
        cmocka_unit_test(test_map_access_write_unmap),
        cmocka_unit_test(test_shared_handle_two_views),
        cmocka_unit_test(test_refusals_change_nothing),
        cmocka_unit_test(test_eager_streams_events_copy),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
