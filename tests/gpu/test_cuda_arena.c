/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_cuda_arena.c — the arena's contracts (issue 2) over the real CUDA driver, and over
 * fault(cuda) for the partial failures; the eager mechanism over CUDA.
 *
 * Contents are written and read with the driver's copies (device memory is not CPU-addressable):
 * a pattern survives commit/decommit/recommit of its neighbours; decommit keeps the VA; a failed
 * unmap poisons its chunk (which CUDA really still maps: the census says so); a failed 2nd unmap of
 * a 3-chunk decommit maps the 1st back with its contents byte-identical and writable. Every test
 * ends with the arena destroyed and the real driver's census at zero. Exit 77 without a GPU. */
#include "cuda_kit.h"

static dmm_driver *g_cuda;
static size_t g_granule;

typedef struct genv {
    dmm_driver *fault; /* fault(cuda), counting every call */
    dmm_mechanism *m;
    kit_tally tally;
    dmm_accounting acct;
} genv;

static void genv_init(genv *e, uint64_t chunk_limit, uint64_t cache_limit) {
    memset(e, 0, sizeof *e);
    DMM_OK_OR_FAIL(dmm_fault_driver_create(g_cuda, &e->fault));
    e->acct = kit_accounting(&e->tally);
    dmm_arena_config c = kit_config(4 * GIB, chunk_limit, cache_limit, &e->acct);
    DMM_OK_OR_FAIL(dmm_arena_create(e->fault, &c, &e->m));
}

static void genv_end(genv *e) {
    DMM_OK_OR_FAIL(dmm_fault_clear(e->fault));
    KIT_CHECK(e->m);
    kit_stats_match_census(e->m, e->fault);
    DMM_OK_OR_FAIL(dmm_arena_drain_cache(e->m));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e->m));
    dmm_driver_destroy(e->fault);
    kit_tally_zero(&e->tally);
    kit_census_zero(g_cuda); /* what CUDA really holds: nothing */
}

static uintptr_t at(const dmm_allocation *a, size_t off) { return (uintptr_t)a->ptr + off; }

static void commit_decommit_recommit_keeps_neighbours(void **state) {
    (void)state;
    genv e;
    genv_init(&e, 2 * MIB, 0);
    const size_t n = 6 * MIB;
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, n, 0, &a)); /* 3 chunks of 2 MiB */
    assert_int_equal(kit_stats(e.m).driver_create, 3);
    kit_stats_match_census(e.m, e.fault);
    unsigned char *p = kit_pattern(10, n);
    kit_put(g_cuda, at(&a, 0), p, n);
    kit_expect(g_cuda, at(&a, 0), p, n, "whole allocation after commit");

    /* decommit the middle chunk: COMPLETE, VA kept, neighbours intact */
    dmm_release_outcome o = dmm_mechanism_decommit(e.m, &a, (dmm_range){2 * MIB, 2 * MIB});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 2 * MIB);
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e.m, &a, &committed));
    assert_int_equal(committed, 4 * MIB);
    assert_int_equal(kit_census(g_cuda).mapped_bytes, 4 * MIB);
    kit_expect(g_cuda, at(&a, 0), p, 2 * MIB, "chunk 1 after decommitting chunk 2");
    kit_expect(g_cuda, at(&a, 4 * MIB), p + 4 * MIB, 2 * MIB, "chunk 3 after decommitting chunk 2");

    /* recommit: same VA, fresh backing, writable; the whole range reads as written */
    uint64_t newly = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_commit(e.m, &a, (dmm_range){2 * MIB, 2 * MIB}, &newly));
    assert_int_equal(newly, 2 * MIB);
    unsigned char *q = kit_pattern(11, 2 * MIB);
    kit_put(g_cuda, at(&a, 2 * MIB), q, 2 * MIB);
    memcpy(p + 2 * MIB, q, 2 * MIB);
    kit_expect(g_cuda, at(&a, 0), p, n, "whole allocation after recommit");
    /* committing what is committed maps nothing new */
    DMM_OK_OR_FAIL(dmm_mechanism_commit(e.m, &a, (dmm_range){0, n}, &newly));
    assert_int_equal(newly, 0);
    KIT_CHECK(e.m);
    kit_stats_match_census(e.m, e.fault);

    o = dmm_mechanism_release(e.m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, n);
    free(p);
    free(q);
    genv_end(&e);
}

static void va_only_slot_pages_in_and_out(void **state) {
    (void)state;
    genv e;
    genv_init(&e, 0, 0);
    const size_t n = 64 * MIB;
    dmm_allocation w;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e.m, n, 0, NULL, 0, &w)); /* VA only */
    uint64_t committed = 1;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e.m, &w, &committed));
    assert_int_equal(committed, 0);
    assert_int_equal(kit_census(g_cuda).mapped_bytes, 0);
    unsigned char *p = kit_pattern(20, n);
    for (int round = 0; round < 3; round++) {
        uint64_t newly = 0;
        int64_t creates = kit_stats(e.m).driver_create;
        DMM_OK_OR_FAIL(dmm_mechanism_commit(e.m, &w, (dmm_range){0, n}, &newly));
        assert_int_equal(newly, n);
        assert_int_equal(kit_stats(e.m).driver_create, creates + 1); /* one chunk per page-in */
        kit_put(g_cuda, at(&w, 0), p, n);
        kit_expect(g_cuda, at(&w, 0), p, n, "paged-in weights");
        dmm_release_outcome o = dmm_mechanism_decommit(e.m, &w, (dmm_range){0, n});
        assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
        assert_int_equal(o.unmapped_bytes, n);
        assert_int_equal(kit_census(g_cuda).mapped_bytes, 0);
        /* the VA stays reserved for this allocation: nobody else gets it */
        dmm_allocation other;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 2 * MIB, 0, &other));
        assert_true((uintptr_t)other.ptr + other.bytes <= (uintptr_t)w.ptr ||
                    (uintptr_t)other.ptr >= (uintptr_t)w.ptr + n);
        assert_int_equal(dmm_mechanism_release(e.m, &other).state, DMM_RELEASE_COMPLETE);
    }
    assert_int_equal(dmm_mechanism_release(e.m, &w).state, DMM_RELEASE_COMPLETE);
    free(p);
    genv_end(&e);
}

static void large_commits_make_few_handles(void **state) {
    (void)state;
    genv e;
    genv_init(&e, 0 /* 1 GiB chunks */, 512 * MIB);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 512 * MIB, 0, &a));
    assert_int_equal(kit_stats(e.m).driver_create, 1);
    assert_int_equal(kit_census(g_cuda).handles, 1);
    uint64_t word = 0x0123456789abcdefull, back = 0;
    kit_put(g_cuda, at(&a, 512 * MIB - 8), &word, 8);
    kit_get(g_cuda, &back, at(&a, 512 * MIB - 8), 8);
    assert_int_equal(back, word);
    assert_int_equal(dmm_mechanism_release(e.m, &a).state, DMM_RELEASE_COMPLETE);
    /* the handle went to the cache; the next allocation of that size reuses it */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 512 * MIB, 0, &a));
    assert_int_equal(kit_stats(e.m).cache_hits, 1);
    assert_int_equal(kit_stats(e.m).driver_create, 1);
    assert_int_equal(dmm_mechanism_release(e.m, &a).state, DMM_RELEASE_COMPLETE);
    genv_end(&e);
}

static void failed_unmap_poisons_the_chunk(void **state) {
    (void)state;
    genv e;
    genv_init(&e, 2 * MIB, 0);
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 5 * MIB, 0, &a)); /* 3 chunks, the last half used */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e.m, 512 * KIB, 0, NULL, 0, &b)); /* in a's tail */
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_UNMAP, 3, 1, DMM_ERR_DRIVER));
    dmm_release_outcome o = dmm_mechanism_release(e.m, &a);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.unmapped_bytes, 4 * MIB);
    assert_int_equal(o.residual_owned_bytes, 2 * MIB);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    dmm_stats s = kit_stats(e.m);
    assert_int_equal(s.poisoned_chunks, 1);
    assert_int_equal(s.poisoned_bytes, 2 * MIB);
    /* CUDA really still maps the poisoned chunk, and it stays charged */
    assert_int_equal(kit_census(g_cuda).mapped_bytes, 2 * MIB);
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.mapped), 2 * MIB);
    kit_stats_match_census(e.m, e.fault);
    bool q = false;
    DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e.m, b.ptr, b.bytes, &q));
    assert_true(q);
    uint64_t newly = 0;
    assert_int_equal(dmm_mechanism_commit(e.m, &b, (dmm_range){0, 4096}, &newly), DMM_ERR_QUARANTINED);
    assert_int_equal(dmm_mechanism_release(e.m, &b).state, DMM_RELEASE_COMPLETE);
    /* later allocations never land on the poisoned VA */
    for (int i = 0; i < 16; i++) {
        dmm_allocation x;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 1 * MIB, 0, &x));
        DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e.m, x.ptr, x.bytes, &q));
        assert_false(q);
        assert_int_equal(dmm_mechanism_release(e.m, &x).state, DMM_RELEASE_COMPLETE);
    }
    KIT_CHECK(e.m);
    genv_end(&e); /* destroy unmaps and releases the poisoned chunk: CUDA's census reaches 0 */
}

static void decommit_restores_the_first_chunk_byte_identically(void **state) {
    (void)state;
    genv e;
    genv_init(&e, 2 * MIB, 0);
    const size_t n = 6 * MIB;
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, n, 0, &a));
    unsigned char *p = kit_pattern(30, n);
    kit_put(g_cuda, at(&a, 0), p, n);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_UNMAP, 2, 1, DMM_ERR_DRIVER));
    uint64_t maps = dmm_fault_calls(e.fault, DMM_OP_MAP), unmaps = dmm_fault_calls(e.fault, DMM_OP_UNMAP);
    dmm_release_outcome o = dmm_mechanism_decommit(e.m, &a, (dmm_range){0, n});
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.unmapped_bytes, 0);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    dmm_test_error_mentions("arena decommit", "chunk 2 of 3", "mapped again", NULL);
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_UNMAP), unmaps + 2); /* the 1st went, the 2nd failed */
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_MAP), maps + 1);     /* the 1st was mapped again */
    assert_int_equal(kit_census(g_cuda).mapped_bytes, n);
    /* byte-identical: the same physical handle came back, with its access */
    kit_expect(g_cuda, at(&a, 0), p, n, "after the restored decommit");
    unsigned char *q = kit_pattern(31, n);
    kit_put(g_cuda, at(&a, 0), q, n); /* and writable */
    kit_expect(g_cuda, at(&a, 0), q, n, "written after the restore");
    KIT_CHECK(e.m);
    kit_stats_match_census(e.m, e.fault);
    /* without the fault the decommit goes through */
    o = dmm_mechanism_decommit(e.m, &a, (dmm_range){0, n});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, n);
    assert_int_equal(dmm_mechanism_release(e.m, &a).state, DMM_RELEASE_COMPLETE);
    free(p);
    free(q);
    genv_end(&e);
}

static void eager_mechanism_over_cuda(void **state) {
    (void)state;
    kit_tally t;
    memset(&t, 0, sizeof t);
    dmm_accounting acct = kit_accounting(&t);
    dmm_eager_config cfg = {sizeof cfg, &acct};
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(g_cuda, &cfg, &m));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 3 * MIB + 5, 0, &a));
    assert_int_equal(a.device.tier, DMM_TIER_DEVICE);
    assert_int_equal(kit_census(g_cuda).eager_bytes, a.bytes);
    unsigned char *p = kit_pattern(40, a.bytes);
    kit_put(g_cuda, at(&a, 0), p, a.bytes);
    kit_expect(g_cuda, at(&a, 0), p, a.bytes, "eager allocation");
    uint64_t cb = 0;
    assert_int_equal(dmm_mechanism_committed_bytes(m, &a, &cb), DMM_ERR_UNSUPPORTED);
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_FAILED); /* twice: refused */
    assert_int_equal(dmm_atomic_load_seq_cst(&t.owned) + dmm_atomic_load_seq_cst(&t.mapped), 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    kit_census_zero(g_cuda);
    free(p);
}

int main(void) {
    g_cuda = kit_cuda_open_or_skip("test_cuda_arena");
    if (g_cuda->ops->granularity == NULL || g_cuda->ops->granularity(g_cuda, &g_granule) != DMM_OK ||
        g_granule != 2 * MIB) {
        printf("test_cuda_arena: these tests assume VMM with a 2 MiB granule (got %zu): %s\n", g_granule,
               dmm_last_error());
        dmm_driver_destroy(g_cuda);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(commit_decommit_recommit_keeps_neighbours),
        cmocka_unit_test(va_only_slot_pages_in_and_out),
        cmocka_unit_test(large_commits_make_few_handles),
        cmocka_unit_test(failed_unmap_poisons_the_chunk),
        cmocka_unit_test(decommit_restores_the_first_chunk_byte_identically),
        cmocka_unit_test(eager_mechanism_over_cuda),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dmm_driver_destroy(g_cuda);
    return rc;
}
