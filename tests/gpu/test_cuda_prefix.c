/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_cuda_prefix.c — shared prefixes (DESIGN §4.6) over the real CUDA driver.
 *
 * What it proves on a GPU: the owner fills a prefix through the driver's copy, and every sharer's
 * own address reads the same bytes back (cuMemSetAccess with READ really maps them readable); the
 * owner's later writes show through at every sharer (one physical memory, not copies); the driver's
 * census keeps one set of handles while its mapped bytes grow per sharer, and cuMemGetInfo's free
 * memory does not fall by another prefix per sharer; the memory stays until the owner, the sharers
 * and the prefix object are all gone, and a prefix whose owner and sharers are gone maps into a new
 * sharer with its bytes intact. Nothing is ever written through a read-only mapping here (a fault
 * would kill the context; the host test checks that writes fault). Every test ends with the real
 * driver's census at zero. Exit 77 (skipped) without a GPU. */
#include "cuda_kit.h"

static dmm_driver *g_cuda;
static size_t g_granule;

typedef struct genv {
    dmm_mechanism *m;
    kit_tally tally;
    dmm_accounting acct;
} genv;

static void genv_init(genv *e, uint64_t chunk_limit) {
    memset(e, 0, sizeof *e);
    e->acct = kit_accounting(&e->tally);
    dmm_arena_config c = kit_config(8 * GIB, chunk_limit, 0, &e->acct);
    DMM_OK_OR_FAIL(dmm_arena_create(g_cuda, &c, &e->m));
}

static void step(genv *e) {
    KIT_CHECK(e->m);
    kit_stats_match_census(e->m, g_cuda);
    kit_tally_matches(&e->tally, e->m);
}

static void genv_end(genv *e) {
    step(e);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e->m));
    kit_tally_zero(&e->tally);
    kit_census_zero(g_cuda);
}

static uintptr_t at(const dmm_allocation *a, size_t off) { return (uintptr_t)a->ptr + off; }

static uint64_t free_bytes(void) {
    uint64_t f = 0, t = 0;
    DMM_OK_OR_FAIL(g_cuda->ops->mem_info(g_cuda, &f, &t));
    return f;
}

static void release_ok(genv *e, const dmm_allocation *a) {
    dmm_release_outcome o = dmm_mechanism_release(e->m, a);
    if (o.state != DMM_RELEASE_COMPLETE) fail_msg("release: %s: %s", dmm_release_state_str(o.state), dmm_last_error());
    step(e);
}

static void sharers_read_one_physical_copy(void **state) {
    (void)state;
    enum { SHARERS = 4 };
    const size_t n = 256 * MIB;
    genv e;
    genv_init(&e, 0); /* 1 GiB chunks: the prefix is one handle */
    uint64_t free0 = free_bytes();
    dmm_allocation owner;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, n, 0, &owner));
    unsigned char *p = kit_pattern(40, n);
    kit_put(g_cuda, at(&owner, 0), p, n);
    dmm_prefix pre;
    DMM_OK_OR_FAIL(dmm_prefix_create(e.m, &owner, (dmm_range){0, n}, &pre));
    step(&e);
    dmm_driver_census c0 = kit_census(g_cuda);
    uint64_t free1 = free_bytes();
    assert_true(free0 - free1 >= n); /* the owner's copy is real memory */

    dmm_allocation s[SHARERS];
    for (int i = 0; i < SHARERS; i++) {
        DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e.m, n, 0, NULL, 0, &s[i]));
        DMM_OK_OR_FAIL(dmm_prefix_commit(e.m, &pre, &s[i], 0));
        step(&e);
    }
    dmm_driver_census c = kit_census(g_cuda);
    assert_int_equal(c.handles, c0.handles);
    assert_int_equal(c.handle_bytes, c0.handle_bytes);
    assert_int_equal(c.mapped_bytes, c0.mapped_bytes + SHARERS * n);
    uint64_t free2 = free_bytes();
    if (free1 > free2 && free1 - free2 >= n / 2)
        fail_msg("cuMemGetInfo: free memory fell by %llu bytes for %d read-only mappings of one %zu-byte prefix",
                 (unsigned long long)(free1 - free2), SHARERS, n);
    for (int i = 0; i < SHARERS; i++) kit_expect(g_cuda, at(&s[i], 0), p, n, "a sharer's copy back to the host");

    /* the owner writes; every sharer reads the new bytes at its own address */
    unsigned char *q = kit_pattern(41, 2 * MIB);
    kit_put(g_cuda, at(&owner, n - 2 * MIB), q, 2 * MIB);
    memcpy(p + n - 2 * MIB, q, 2 * MIB);
    for (int i = 0; i < SHARERS; i++)
        kit_expect(g_cuda, at(&s[i], n - 2 * MIB), q, 2 * MIB, "the owner's later write, at a sharer");

    /* the owner goes first: the sharers keep the memory */
    release_ok(&e, &owner);
    assert_int_equal(kit_census(g_cuda).handles, c0.handles);
    kit_expect(g_cuda, at(&s[0], 0), p, n, "a sharer after the owner's release");
    for (int i = 0; i < SHARERS; i++) release_ok(&e, &s[i]);
    assert_int_equal(kit_census(g_cuda).handles, c0.handles); /* the prefix object still holds it */
    assert_int_equal(kit_census(g_cuda).mapped_bytes, 0);

    /* parked: a new sharer maps it again, bytes intact */
    dmm_allocation late;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e.m, n, 0, NULL, 0, &late));
    DMM_OK_OR_FAIL(dmm_prefix_commit(e.m, &pre, &late, 0));
    kit_expect(g_cuda, at(&late, 0), p, n, "a sharer of a parked prefix");
    dmm_release_outcome o = dmm_prefix_release(e.m, &pre);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    step(&e);
    assert_int_equal(kit_census(g_cuda).handles, c0.handles); /* the late sharer still maps it */
    release_ok(&e, &late);
    assert_int_equal(kit_census(g_cuda).handles, 0);
    free(p);
    free(q);
    genv_end(&e);
}

static void a_prefix_of_several_chunks_at_an_offset(void **state) {
    (void)state;
    genv e;
    genv_init(&e, 2 * g_granule); /* chunks of 2 granules */
    const size_t n = 6 * g_granule;
    dmm_allocation owner, t;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, n + 2 * g_granule, 0, &owner)); /* 4 chunks */
    unsigned char *p = kit_pattern(42, n);
    kit_put(g_cuda, at(&owner, 0), p, n);
    dmm_prefix pre;
    DMM_OK_OR_FAIL(dmm_prefix_create(e.m, &owner, (dmm_range){0, n}, &pre));
    dmm_range keep = {0, g_granule};
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e.m, n + 4 * g_granule, 0, &keep, 1, &t));
    uint64_t own = 1, map = 0;
    DMM_OK_OR_FAIL(dmm_prefix_cost(e.m, &pre, &t, 2 * g_granule, &own, &map));
    assert_int_equal(own, 0);
    assert_int_equal(map, n);
    assert_int_equal(dmm_prefix_commit(e.m, &pre, &t, g_granule / 2), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_prefix_commit(e.m, &pre, &t, 0), DMM_ERR_INVALID_ARGUMENT); /* granule 0 committed */
    step(&e);
    DMM_OK_OR_FAIL(dmm_prefix_commit(e.m, &pre, &t, 2 * g_granule));
    step(&e);
    kit_expect(g_cuda, at(&t, 2 * g_granule), p, n, "a 3-chunk prefix at an offset");
    /* the sharer's range decommits on its own; the owner's bytes stay */
    dmm_release_outcome o = dmm_mechanism_decommit(e.m, &t, (dmm_range){2 * g_granule, n});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, n);
    step(&e);
    kit_expect(g_cuda, at(&owner, 0), p, n, "the owner after a sharer's decommit");
    o = dmm_prefix_release(e.m, &pre);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    release_ok(&e, &t);
    release_ok(&e, &owner);
    free(p);
    genv_end(&e);
}

int main(void) {
    g_cuda = kit_cuda_open_or_skip("test_cuda_prefix");
    if (g_cuda->ops->granularity == NULL || g_cuda->ops->granularity(g_cuda, &g_granule) != DMM_OK ||
        g_granule != 2 * MIB) {
        printf("test_cuda_prefix: these tests assume VMM with a 2 MiB granule (got %zu): %s\n", g_granule,
               dmm_last_error());
        dmm_driver_destroy(g_cuda);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sharers_read_one_physical_copy),
        cmocka_unit_test(a_prefix_of_several_chunks_at_an_offset),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dmm_driver_destroy(g_cuda);
    return rc;
}
