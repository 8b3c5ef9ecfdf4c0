/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_arena.c — the arena over the real host driver: reservation without resident
 * memory, commit/decommit with real protections and memfds, the release contract (COMPLETE with 0
 * unmapped bytes, FAILED for wrong handles and double release, ids never reused), granule sharing,
 * one handle per chunk-limit of a commit, the handle cache, aliases (one handle mapped at two places:
 * owned once, mapped twice, the handle cached only after its last mapping), and the error sentences.
 * Every test
 * runs the expensive check after each step and ends with nothing live. */
#include "arena_kit.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct fixture {
    dmm_driver *host;
    dmm_mechanism *m;
    kit_tally tally;
    dmm_accounting acct;
} fixture;

static fixture *fx_new(uint64_t reserve, uint64_t chunk_limit, uint64_t cache_limit) {
    fixture *f = calloc(1, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    f->acct = kit_accounting(&f->tally);
    dmm_arena_config c = kit_config(reserve, chunk_limit, cache_limit, &f->acct);
    DMM_OK_OR_FAIL(dmm_arena_create(f->host, &c, &f->m));
    KIT_CHECK(f->m);
    return f;
}

/* Ends a test: nothing live, the tally back to zero, the driver holds nothing. */
static void fx_end(fixture *f) {
    KIT_CHECK(f->m);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.allocations.current, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->m));
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.mapped), 0);
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->host);
    free(f);
}

static void step(fixture *f) {
    KIT_CHECK(f->m);
    kit_stats_match_census(f->m, f->host);
    kit_tally_matches(&f->tally, f->m);
}

static long rss_kib(void) {
    FILE *fp = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    assert_non_null(fp);
    assert_int_equal(fscanf(fp, "%ld %ld", &size, &res), 2);
    fclose(fp);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int fd_count(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    assert_non_null(d);
    while (readdir(d) != NULL) n++;
    closedir(d);
    return n;
}

static dmm_allocation alloc_ok(fixture *f, size_t bytes) {
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, bytes, 0, &a));
    step(f);
    return a;
}

static void release_complete(fixture *f, const dmm_allocation *a, uint64_t unmapped) {
    dmm_release_outcome o = dmm_mechanism_release(f->m, a);
    if (o.state != DMM_RELEASE_COMPLETE)
        fail_msg("release: %s (%s): %s", dmm_release_state_str(o.state), dmm_status_str(o.failure), dmm_last_error());
    assert_int_equal(o.allocation_bytes, a->bytes);
    assert_int_equal(o.unmapped_bytes, unmapped);
    assert_int_equal(o.residual_owned_bytes, 0);
    step(f);
}

/* ---- acceptance 2: 64 GiB of VA without resident memory; real protections and memfds ---- */

static void reserves_64_gib_without_rss(void **state) {
    (void)state;
    dmm_driver *host;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    long before = rss_kib();
    dmm_mechanism *m;
    DMM_OK_OR_FAIL(dmm_arena_create(host, NULL, &m)); /* default: 64 GiB */
    long after = rss_kib();
    dmm_driver_census c = kit_census(host);
    assert_true(c.reserved_bytes >= 64 * GIB);
    dmm_stats s = kit_stats(m);
    assert_true((uint64_t)s.reserved_bytes.current >= 64 * GIB);
    assert_true(after - before < 4 * 1024); /* the granule map is calloc'd: untouched pages stay free */
    uintptr_t va;
    uint64_t bytes;
    DMM_OK_OR_FAIL(dmm_arena_reservation(m, &va, &bytes));
    assert_int_equal(bytes, 64 * GIB);
    char perms[5];
    dmm_test_prot_at((void *)(va + 17 * GIB), perms);
    assert_string_equal(perms, "---p");
    size_t spans;
    DMM_OK_OR_FAIL(dmm_arena_free_spans(m, &spans));
    assert_int_equal(spans, 1);
    KIT_CHECK(m);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    assert_int_equal(kit_census(host).reserved_bytes, 0);
    dmm_driver_destroy(host);
}

static void commit_and_decommit_are_real(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 2 * MIB, 0); /* one chunk per granule */
    int fds0 = fd_count();
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 16 * MIB, 0, NULL, 0, &a)); /* VA only */
    step(f);
    uint64_t committed = 1;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->m, &a, &committed));
    assert_int_equal(committed, 0);
    assert_int_equal(fd_count(), fds0);
    char perms[5];
    dmm_test_prot_at(a.ptr, perms);
    assert_string_equal(perms, "---p");

    uint64_t need = 0;
    dmm_range r = {2 * MIB, 6 * MIB};
    DMM_OK_OR_FAIL(dmm_mechanism_mapped_bytes_for_ranges(f->m, &a, &r, 1, &need));
    assert_int_equal(need, 6 * MIB);
    uint64_t newly = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_commit(f->m, &a, r, &newly));
    step(f);
    assert_int_equal(newly, 6 * MIB);
    assert_int_equal(fd_count(), fds0 + 3);
    DMM_OK_OR_FAIL(dmm_mechanism_mapped_bytes_for_ranges(f->m, &a, &r, 1, &need));
    assert_int_equal(need, 0);
    char *p = (char *)a.ptr;
    dmm_test_prot_at(p + 2 * MIB, perms);
    assert_string_equal(perms, "rw-s");
    dmm_test_prot_at(p, perms);
    assert_string_equal(perms, "---p");
    for (size_t i = 2 * MIB; i < 8 * MIB; i += 4096) p[i] = (char)(i >> 12);
    for (size_t i = 2 * MIB; i < 8 * MIB; i += 4096) assert_int_equal(p[i], (char)(i >> 12));
    /* a commit of what is already committed maps nothing */
    DMM_OK_OR_FAIL(dmm_mechanism_commit(f->m, &a, (dmm_range){3 * MIB, 100}, &newly));
    assert_int_equal(newly, 0);
    step(f);

    /* decommit the middle granule: PROT_NONE again, its memfd gone, the VA still reserved */
    dmm_release_outcome o = dmm_mechanism_decommit(f->m, &a, (dmm_range){4 * MIB, 2 * MIB});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 2 * MIB);
    step(f);
    dmm_test_prot_at(p + 4 * MIB, perms);
    assert_string_equal(perms, "---p");
    assert_int_equal(fd_count(), fds0 + 2);
    assert_int_equal(kit_census(f->host).reserved_bytes, 1 * GIB);
    assert_int_equal(p[2 * MIB], (char)(2 * MIB >> 12)); /* neighbours keep their contents */
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->m, &a, &committed));
    assert_int_equal(committed, 4 * MIB);
    /* a range holding no whole chunk: COMPLETE with 0 bytes */
    o = dmm_mechanism_decommit(f->m, &a, (dmm_range){2 * MIB + 4096, 2 * MIB});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 0);
    step(f);
    /* recommit: fresh, zeroed memory at the same address */
    DMM_OK_OR_FAIL(dmm_mechanism_commit(f->m, &a, (dmm_range){4 * MIB, 1}, &newly));
    assert_int_equal(newly, 2 * MIB);
    assert_int_equal(p[4 * MIB], 0);
    step(f);
    release_complete(f, &a, 6 * MIB);
    assert_int_equal(fd_count(), fds0);
    fx_end(f);
}

/* ---- acceptance 3, 4, 5: outcomes, identity ---- */

static void complete_with_zero_unmapped_bytes(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 0);
    dmm_allocation a = alloc_ok(f, 4096), b = alloc_ok(f, 4096);
    assert_int_equal((uintptr_t)a.ptr / (2 * MIB), (uintptr_t)b.ptr / (2 * MIB)); /* same granule */
    release_complete(f, &a, 0); /* the granule is still b's */
    release_complete(f, &b, 2 * MIB);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.releases_complete, 2);
    fx_end(f);
}

static void wrong_handles_fail_and_change_nothing(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 0);
    dmm_allocation a = alloc_ok(f, 3 * MIB);
    dmm_stats s0 = kit_stats(f->m);
    dmm_driver_census c0 = kit_census(f->host);
    struct {
        dmm_allocation h;
        dmm_status want;
    } bad[5];
    for (int i = 0; i < 5; i++) bad[i].h = a;
    /* an altered size matches no live allocation either: the same code as a stale id (status.h) */
    bad[0].h.bytes += 1, bad[0].want = DMM_ERR_UNKNOWN_ALLOCATION;
    bad[1].h.align *= 2, bad[1].want = DMM_ERR_UNKNOWN_ALLOCATION;
    bad[2].h.id += 1, bad[2].want = DMM_ERR_UNKNOWN_ALLOCATION;
    bad[3].h.ptr = (char *)a.ptr + 256, bad[3].want = DMM_ERR_UNKNOWN_ALLOCATION;
    bad[4].h.ptr = (void *)&f, bad[4].want = DMM_ERR_UNKNOWN_ALLOCATION; /* not even in the reservation */
    for (int i = 0; i < 5; i++) {
        dmm_release_outcome o = dmm_mechanism_release(f->m, &bad[i].h);
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, bad[i].want);
        assert_int_equal(o.unmapped_bytes, 0);
        if (i < 2) dmm_test_error_mentions("arena release", "altered", "pass the value allocate returned", NULL);
        if (i == 2) dmm_test_error_mentions("stale copy", NULL);
        o = dmm_mechanism_decommit(f->m, &bad[i].h, (dmm_range){0, 2 * MIB});
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, bad[i].want);
        uint64_t newly;
        assert_int_equal(dmm_mechanism_commit(f->m, &bad[i].h, (dmm_range){0, 1}, &newly), bad[i].want);
        step(f);
    }
    dmm_stats s1 = kit_stats(f->m);
    dmm_driver_census c1 = kit_census(f->host);
    assert_int_equal(s1.committed_bytes.current, s0.committed_bytes.current);
    assert_int_equal(s1.allocations.current, 1);
    assert_int_equal(s1.driver_unmap, s0.driver_unmap);
    assert_int_equal(c1.mapped_bytes, c0.mapped_bytes);
    assert_int_equal(c1.handles, c0.handles);
    ((char *)a.ptr)[3 * MIB - 1] = 7; /* still live and writable */
    release_complete(f, &a, 4 * MIB);
    /* double release */
    dmm_release_outcome o = dmm_mechanism_release(f->m, &a);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("no live allocation", NULL);
    step(f);
    fx_end(f);
}

static void reused_address_gets_a_new_id(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 0);
    dmm_allocation a = alloc_ok(f, 5 * MIB);
    release_complete(f, &a, 6 * MIB);
    dmm_allocation b = alloc_ok(f, 5 * MIB);
    assert_ptr_equal(a.ptr, b.ptr);
    assert_int_not_equal(a.id, b.id);
    dmm_release_outcome o = dmm_mechanism_release(f->m, &a); /* the stale handle */
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    o = dmm_mechanism_decommit(f->m, &a, (dmm_range){0, 5 * MIB});
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    step(f);
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->m, &b, &committed));
    assert_int_equal(committed, 6 * MIB);
    memset(b.ptr, 1, b.bytes); /* b is untouched and writable */
    release_complete(f, &b, 6 * MIB);
    fx_end(f);
}

/* ---- acceptance 9: sharing and chunk sizes ---- */

static void small_allocations_share_one_granule(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 0);
    enum { N = 512 };
    dmm_allocation *a = calloc(N, sizeof *a);
    for (int i = 0; i < N; i++) {
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 4 * KIB, 0, &a[i]));
        memset(a[i].ptr, i & 0xff, 4 * KIB);
    }
    step(f);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.committed_bytes.current, 2 * MIB);
    assert_int_equal(s.handles.current, 1);
    assert_int_equal(s.driver_create, 1);
    for (int i = 0; i < N; i++) assert_int_equal(((unsigned char *)a[i].ptr)[4095], i & 0xff);
    /* free in a scattered order; the free list must coalesce back to one span */
    for (int i = 0; i < N; i += 2) release_complete(f, &a[i], 0);
    for (int i = N - 1; i > 1; i -= 2) release_complete(f, &a[i], 0);
    release_complete(f, &a[1], 2 * MIB);
    s = kit_stats(f->m);
    assert_int_equal(s.committed_bytes.current, 0);
    size_t spans = 0;
    DMM_OK_OR_FAIL(dmm_arena_free_spans(f->m, &spans));
    assert_int_equal(spans, 1);
    free(a);
    fx_end(f);
}

static void one_gib_commit_uses_few_handles(void **state) {
    (void)state;
    uint64_t limits[] = {0 /* 1 GiB */, 256 * MIB, 64 * MIB, 2 * MIB};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        fixture *f = fx_new(4 * GIB, limits[i], 0);
        uint64_t lim = limits[i] ? limits[i] : GIB;
        dmm_allocation a;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, GIB, 0, NULL, 0, &a));
        uint64_t newly = 0;
        DMM_OK_OR_FAIL(dmm_mechanism_commit(f->m, &a, (dmm_range){0, GIB}, &newly));
        step(f);
        assert_int_equal(newly, GIB);
        dmm_stats s = kit_stats(f->m);
        assert_int_equal(s.driver_create, (GIB + lim - 1) / lim);
        assert_int_equal(s.handles.current, (GIB + lim - 1) / lim);
        assert_int_equal(s.driver_map, s.driver_create);
        assert_int_equal(s.driver_set_access, 1); /* one grant over the whole run of chunks */
        ((char *)a.ptr)[0] = 1;                   /* (the host driver maps without access until then) */
        ((char *)a.ptr)[GIB - 1] = 1;
        release_complete(f, &a, GIB);
        fx_end(f);
    }
}

/* commit_pieces: the range in chunks of at most the piece (the arena's limit where smaller), access
 * granted once; each piece a chunk of its own (a decommit of one gives back that one alone). Bad
 * pieces are refused with a sentence, changing nothing. */
static void commit_pieces_cuts_the_chunks_and_grants_access_once(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 64 * MIB, 0);
    assert_true(dmm_mechanism_has_slot(f->m, DMM_SLOT_COMMIT_PIECES));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 128 * MIB, 0, NULL, 0, &a));
    uint64_t newly = 0;
    assert_int_equal(dmm_mechanism_commit_pieces(f->m, &a, (dmm_range){0, 10 * MIB}, MIB, &newly),
                     DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("commit_pieces", "granul", NULL);
    assert_int_equal(dmm_mechanism_commit_pieces(f->m, &a, (dmm_range){0, 10 * MIB}, 0, &newly),
                     DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(kit_stats(f->m).driver_create, 0);
    /* 22 MiB in 4 MiB pieces: five of 4 MiB and one of 2 MiB, one grant */
    DMM_OK_OR_FAIL(dmm_mechanism_commit_pieces(f->m, &a, (dmm_range){2 * MIB, 22 * MIB}, 4 * MIB, &newly));
    step(f);
    assert_int_equal(newly, 22 * MIB);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.driver_create, 6);
    assert_int_equal(s.driver_map, 6);
    assert_int_equal(s.driver_set_access, 1);
    memset((char *)a.ptr + 2 * MIB, 7, 22 * MIB);
    /* pieces larger than the arena's limit: the limit cuts */
    DMM_OK_OR_FAIL(dmm_mechanism_commit_pieces(f->m, &a, (dmm_range){32 * MIB, 96 * MIB}, 96 * MIB, &newly));
    assert_int_equal(kit_stats(f->m).driver_create, 6 + 2);
    /* one piece's decommit gives back that chunk only */
    dmm_release_outcome o = dmm_mechanism_decommit(f->m, &a, (dmm_range){6 * MIB, 4 * MIB});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 4 * MIB);
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->m, &a, &committed));
    assert_int_equal(committed, 18 * MIB + 96 * MIB);
    assert_int_equal(((unsigned char *)a.ptr)[2 * MIB], 7);
    assert_int_equal(((unsigned char *)a.ptr)[24 * MIB - 1], 7);
    release_complete(f, &a, 18 * MIB + 96 * MIB);
    fx_end(f);
    /* pieces above the limit and not a multiple of it: each piece is cut at the limit on its own, so no
     * chunk crosses a piece (12 MiB in 6 MiB pieces, limit 4 MiB: 4 + 2 and 4 + 2), and a piece's
     * decommit gives back exactly that piece */
    f = fx_new(1 * GIB, 4 * MIB, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 64 * MIB, 0, NULL, 0, &a));
    DMM_OK_OR_FAIL(dmm_mechanism_commit_pieces(f->m, &a, (dmm_range){0, 12 * MIB}, 6 * MIB, &newly));
    step(f);
    assert_int_equal(kit_stats(f->m).driver_create, 4);
    o = dmm_mechanism_decommit(f->m, &a, (dmm_range){0, 6 * MIB});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 6 * MIB);
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->m, &a, &committed));
    assert_int_equal(committed, 6 * MIB);
    step(f);
    release_complete(f, &a, 6 * MIB);
    fx_end(f);
}

static void allocate_committed_commits_only_the_ranges(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 2 * MIB, 0);
    dmm_range ranges[] = {{0, 1}, {10 * MIB, 3 * MIB}, {11 * MIB, 1 * MIB} /* overlaps */};
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 32 * MIB, 0, ranges, 3, &a));
    step(f);
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->m, &a, &committed));
    assert_int_equal(committed, 2 * MIB + 4 * MIB); /* granule 0; granules 5 and 6 */
    char perms[5];
    dmm_test_prot_at((char *)a.ptr + 2 * MIB, perms);
    assert_string_equal(perms, "---p");
    ((char *)a.ptr)[12 * MIB] = 1;
    /* decommit of the whole allocation releases every chunk, including the tail granule */
    dmm_release_outcome o = dmm_mechanism_decommit(f->m, &a, (dmm_range){0, a.bytes});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 6 * MIB);
    step(f);
    release_complete(f, &a, 0);
    fx_end(f);
}

static void tail_granule_shared_is_not_decommitted(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 0);
    dmm_allocation big = alloc_ok(f, 3 * MIB); /* granules 0-1, one chunk, tail 1 MiB free */
    dmm_allocation small = alloc_ok(f, 4 * KIB);
    assert_true((uintptr_t)small.ptr >= (uintptr_t)big.ptr + 3 * MIB);
    assert_true((uintptr_t)small.ptr < (uintptr_t)big.ptr + 4 * MIB); /* best fit: the tail */
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.driver_create, 1); /* small shares big's chunk */
    dmm_release_outcome o = dmm_mechanism_decommit(f->m, &big, (dmm_range){0, big.bytes});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 0); /* the chunk is shared: not big's alone */
    step(f);
    release_complete(f, &big, 0);
    ((char *)small.ptr)[0] = 1;
    release_complete(f, &small, 4 * MIB);
    fx_end(f);
}

static void handle_cache_reuses_and_drains(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 8 * MIB);
    dmm_allocation a = alloc_ok(f, 4 * MIB);
    release_complete(f, &a, 4 * MIB);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.cached_bytes.current, 4 * MIB);
    assert_int_equal(s.owned_bytes.current, 4 * MIB);
    assert_int_equal(s.mapped_bytes.current, 0);
    assert_int_equal(kit_census(f->host).handles, 1);
    dmm_allocation b = alloc_ok(f, 4 * MIB); /* same size: from the cache */
    s = kit_stats(f->m);
    assert_int_equal(s.cache_hits, 1);
    assert_int_equal(s.driver_create, 1);
    assert_int_equal(s.cached_bytes.current, 0);
    dmm_allocation c = alloc_ok(f, 6 * MIB);
    release_complete(f, &b, 4 * MIB);
    release_complete(f, &c, 6 * MIB); /* 4 + 6 > 8: c's handle is released, not cached */
    s = kit_stats(f->m);
    assert_int_equal(s.cached_bytes.current, 4 * MIB);
    assert_int_equal(s.handles.current, 1);
    DMM_OK_OR_FAIL(dmm_arena_drain_cache(f->m));
    step(f);
    s = kit_stats(f->m);
    assert_int_equal(s.cached_bytes.current, 0);
    assert_int_equal(s.owned_bytes.current, 0);
    assert_int_equal(kit_census(f->host).handles, 0);
    fx_end(f);
}

/* ---- aliases: one handle mapped at two places ---- */

static void alias_maps_the_same_memory_twice_and_owns_it_once(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 4 * MIB, 8 * MIB); /* chunks of up to 4 MiB, a cache for 8 MiB */
    dmm_allocation a;
    dmm_range src = {0, 6 * MIB}, dst = {10 * MIB, 6 * MIB};
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 16 * MIB, 0, &src, 1, &a)); /* chunks: 4 + 2 MiB */
    int fds0 = fd_count();
    char *p = a.ptr;
    for (size_t i = 0; i < 6 * MIB; i += 4096) p[i] = (char)(i >> 12);
    dmm_stats s0 = kit_stats(f->m);
    assert_int_equal(s0.handles.current, 2);
    DMM_OK_OR_FAIL(dmm_arena_alias(f->m, &a, dst, src));
    step(f);
    /* the same bytes at both places, both writable, no new handle or memfd */
    for (size_t i = 0; i < 6 * MIB; i += 4096) assert_int_equal(p[10 * MIB + i], (char)(i >> 12));
    p[10 * MIB + 5 * MIB] = 42;
    assert_int_equal(p[5 * MIB], 42);
    char perms[5];
    dmm_test_prot_at(p + 10 * MIB, perms);
    assert_string_equal(perms, "rw-s");
    assert_int_equal(fd_count(), fds0);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.driver_create, s0.driver_create);
    assert_int_equal(s.driver_map, s0.driver_map + 2); /* the same chunk layout: 4 + 2 MiB */
    assert_int_equal(s.handles.current, 2);
    assert_int_equal(s.owned_bytes.current, 6 * MIB);
    assert_int_equal(s.mapped_bytes.current, 12 * MIB); /* mapped may exceed owned */
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.owned), 6 * MIB);
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.mapped), 12 * MIB);
    dmm_driver_census c = kit_census(f->host);
    assert_int_equal(c.handle_bytes, 6 * MIB);
    assert_int_equal(c.mapped_bytes, 12 * MIB);
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->m, &a, &committed));
    assert_int_equal(committed, 12 * MIB);
    /* the old place goes: unmapped there, but its handles stay (the new place maps them) */
    dmm_release_outcome o = dmm_mechanism_decommit(f->m, &a, src);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 6 * MIB);
    step(f);
    s = kit_stats(f->m);
    assert_int_equal(s.driver_release, 0);
    assert_int_equal(s.cached_bytes.current, 0);
    assert_int_equal(s.owned_bytes.current, 6 * MIB);
    assert_int_equal(s.mapped_bytes.current, 6 * MIB);
    dmm_test_prot_at(p, perms);
    assert_string_equal(perms, "---p");
    assert_int_equal(p[10 * MIB + 5 * MIB], 42);
    for (size_t i = 4096; i < 5 * MIB; i += 4096) assert_int_equal(p[10 * MIB + i], (char)(i >> 12));
    /* the old place may be committed again: new memory */
    uint64_t newly = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_commit(f->m, &a, (dmm_range){0, 2 * MIB}, &newly));
    assert_int_equal(newly, 2 * MIB);
    assert_int_equal(p[4096], 0);
    step(f);
    /* the release unmaps the rest: only now do the aliased handles reach the cache */
    release_complete(f, &a, 8 * MIB);
    s = kit_stats(f->m);
    assert_int_equal(s.cached_bytes.current, 8 * MIB);
    assert_int_equal(s.driver_release, 0);
    DMM_OK_OR_FAIL(dmm_arena_drain_cache(f->m));
    step(f);
    fx_end(f);
}

static void an_alias_of_an_alias_and_any_order_of_teardown(void **state) {
    (void)state;
    /* three places of one handle; each torn down in a different way and order */
    for (int order = 0; order < 3; order++) {
        fixture *f = fx_new(1 * GIB, 2 * MIB, 0); /* no cache: the last mapping releases the handle */
        dmm_allocation a;
        dmm_range p0 = {0, 2 * MIB}, p1 = {4 * MIB, 2 * MIB}, p2 = {8 * MIB, 2 * MIB};
        DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 12 * MIB, 0, &p0, 1, &a));
        memset(a.ptr, 7, 2 * MIB);
        DMM_OK_OR_FAIL(dmm_arena_alias(f->m, &a, p1, p0));
        DMM_OK_OR_FAIL(dmm_arena_alias(f->m, &a, p2, p1)); /* an alias of the alias */
        step(f);
        assert_int_equal(kit_stats(f->m).mapped_bytes.current, 6 * MIB);
        assert_int_equal(kit_census(f->host).handles, 1);
        assert_int_equal(((char *)a.ptr)[8 * MIB + 5], 7);
        dmm_range first = order == 0 ? p0 : order == 1 ? p1 : p2, second = order == 2 ? p0 : p2;
        dmm_release_outcome o = dmm_mechanism_decommit(f->m, &a, first);
        assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
        step(f);
        o = dmm_mechanism_decommit(f->m, &a, second);
        assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
        step(f);
        assert_int_equal(kit_stats(f->m).driver_release, 0); /* one mapping is left */
        assert_int_equal(kit_census(f->host).handles, 1);
        release_complete(f, &a, 2 * MIB);
        assert_int_equal(kit_stats(f->m).driver_release, 1);
        fx_end(f);
    }
}

static void alias_refuses_what_it_cannot_do_and_changes_nothing(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 4 * MIB, 0);
    dmm_allocation a, b, small;
    dmm_range ranges[] = {{0, 4 * MIB}, {8 * MIB, 2 * MIB}};
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 20 * MIB - 4096, 0, ranges, 2, &a));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 4096, 0, &small)); /* shares a's last granule */
    assert_ptr_equal(small.ptr, (char *)a.ptr + 20 * MIB - 4096);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 2 * MIB, 0, &b));
    step(f);
    dmm_stats s0 = kit_stats(f->m);
    struct {
        dmm_range dst, src;
        dmm_status code;
        const char *why;
    } bad[] = {
        {{12 * MIB, 2 * MIB}, {0, 2 * MIB}, DMM_ERR_INVALID_ARGUMENT, "reaches past the source range"},
        {{12 * MIB, 4 * MIB}, {4 * MIB, 4 * MIB}, DMM_ERR_INVALID_ARGUMENT, "not committed"},
        {{12 * MIB, 2 * MIB}, {8 * MIB, 4 * MIB}, DMM_ERR_INVALID_ARGUMENT, "same size"},
        {{8 * MIB, 4 * MIB}, {0, 4 * MIB}, DMM_ERR_INVALID_ARGUMENT, "already backed"},
        {{2 * MIB, 4 * MIB}, {0, 4 * MIB}, DMM_ERR_INVALID_ARGUMENT, "overlap"},
        {{12 * MIB + 4096, 2 * MIB}, {8 * MIB, 2 * MIB}, DMM_ERR_INVALID_ARGUMENT, "start on a granule"},
        {{12 * MIB, 2 * MIB}, {8 * MIB, 2 * MIB - 4096}, DMM_ERR_INVALID_ARGUMENT, "same size"},
        {{19 * MIB, 2 * MIB}, {8 * MIB, 2 * MIB}, DMM_ERR_INVALID_ARGUMENT, "inside the allocation"},
        {{12 * MIB, 0}, {8 * MIB, 0}, DMM_ERR_INVALID_ARGUMENT, "non-empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(dmm_arena_alias(f->m, &a, bad[i].dst, bad[i].src), bad[i].code);
        dmm_test_error_mentions("dmm_arena_alias", "refused", bad[i].why, "nothing was changed", NULL);
    }
    /* the tail granule shared with `small` is never a whole granule of a: no range can name it */
    assert_int_equal(dmm_arena_alias(f->m, &a, (dmm_range){12 * MIB, 2 * MIB}, (dmm_range){18 * MIB, 2 * MIB}),
                     DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("inside the allocation", NULL);
    /* a stale value, another arena's allocation, not an arena */
    dmm_allocation stale = a;
    stale.id++;
    assert_int_equal(dmm_arena_alias(f->m, &stale, (dmm_range){12 * MIB, 2 * MIB}, (dmm_range){8 * MIB, 2 * MIB}),
                     DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_mechanism *eager = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(f->host, NULL, &eager));
    assert_int_equal(dmm_arena_alias(eager, &a, (dmm_range){12 * MIB, 2 * MIB}, (dmm_range){8 * MIB, 2 * MIB}),
                     DMM_ERR_WRONG_MECHANISM);
    dmm_test_error_mentions("not an arena", NULL);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(eager));
    /* a budget that refuses the mapping */
    dmm_atomic_store_seq_cst(&f->tally.refuse, 1);
    assert_int_equal(dmm_arena_alias(f->m, &a, (dmm_range){12 * MIB, 2 * MIB}, (dmm_range){8 * MIB, 2 * MIB}),
                     DMM_ERR_BUDGET);
    dmm_test_error_mentions("dmm_arena_alias", "mapped axis", NULL);
    dmm_atomic_store_seq_cst(&f->tally.refuse, 0);
    step(f);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.driver_map, s0.driver_map);
    assert_int_equal(s.mapped_bytes.current, s0.mapped_bytes.current);
    assert_int_equal(s.owned_bytes.current, s0.owned_bytes.current);
    release_complete(f, &b, 2 * MIB);
    release_complete(f, &small, 2 * MIB);
    release_complete(f, &a, 6 * MIB);
    fx_end(f);
}

static void destroy_is_refused_while_live(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 4 * MIB);
    dmm_allocation a = alloc_ok(f, 100);
    assert_int_equal(dmm_mechanism_destroy(f->m), DMM_ERR_BUSY);
    dmm_test_error_mentions("arena destroy", "still live", "release them first", NULL);
    step(f);
    release_complete(f, &a, 2 * MIB);
    fx_end(f); /* destroy drains the cached handle */
}

static void alignment_and_placement(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 0);
    dmm_allocation a = alloc_ok(f, 1);
    assert_int_equal(a.align, 256);
    assert_int_equal((uintptr_t)a.ptr % 256, 0);
    dmm_allocation b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 1000, 64 * KIB, &b));
    step(f);
    assert_int_equal((uintptr_t)b.ptr % (64 * KIB), 0);
    assert_int_equal(b.align, 64 * KIB);
    dmm_allocation c = alloc_ok(f, 2 * MIB + 1); /* ≥ 1 granule: starts on a granule */
    assert_int_equal((uintptr_t)c.ptr % (2 * MIB), 0);
    dmm_allocation d;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 4096, 16 * MIB, &d));
    assert_int_equal((uintptr_t)d.ptr % (16 * MIB), 0);
    step(f);
    dmm_release_outcome o = dmm_mechanism_release(f->m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    o = dmm_mechanism_release(f->m, &b);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    o = dmm_mechanism_release(f->m, &c);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    o = dmm_mechanism_release(f->m, &d);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    step(f);
    size_t spans = 0;
    DMM_OK_OR_FAIL(dmm_arena_free_spans(f->m, &spans));
    assert_int_equal(spans, 1);
    fx_end(f);
}

static void address_space_exhaustion_is_an_error(void **state) {
    (void)state;
    fixture *f = fx_new(8 * MIB, 0, 0);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 6 * MIB, 0, NULL, 0, &a));
    dmm_allocation b;
    assert_int_equal(dmm_mechanism_allocate_committed(f->m, 4 * MIB, 0, NULL, 0, &b), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("arena allocate_committed", "no free span", "reserve_bytes", NULL);
    assert_int_equal(dmm_mechanism_allocate(f->m, 16 * MIB, 0, &b), DMM_ERR_OUT_OF_MEMORY);
    step(f);
    release_complete(f, &a, 0);
    fx_end(f);
}

/* ---- acceptance 11: the sentences ---- */

static void error_sentences_name_op_values_and_remedy(void **state) {
    (void)state;
    fixture *f = fx_new(1 * GIB, 0, 0);
    /* budget: the hook refuses; nothing changes */
    dmm_atomic_store_seq_cst(&f->tally.refuse, 1);
    dmm_allocation a;
    assert_int_equal(dmm_mechanism_allocate(f->m, 3 * MIB, 0, &a), DMM_ERR_BUDGET);
    dmm_test_error_mentions("arena allocate", "accounting hook refused", "4.0 MiB", "owned", "arena on host 0",
                            "refusing 4194304 bytes on purpose", "raise the budget", NULL);
    step(f);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.allocations.current, 0);
    assert_int_equal(s.driver_create, 0);
    size_t spans = 0;
    DMM_OK_OR_FAIL(dmm_arena_free_spans(f->m, &spans));
    assert_int_equal(spans, 1);
    dmm_atomic_store_seq_cst(&f->tally.refuse, 0);

    /* argument */
    dmm_allocation b = alloc_ok(f, 4096);
    dmm_allocation bad = b;
    bad.bytes = 8192;
    dmm_release_outcome o = dmm_mechanism_release(f->m, &bad);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("arena release", "8192 bytes", "4096 bytes", "unmodified", "nothing was changed", NULL);

    /* wrong mechanism: an eager mechanism is not an arena; an arena's allocation cannot go there */
    dmm_mechanism *eager;
    DMM_OK_OR_FAIL(dmm_eager_create(f->host, NULL, &eager));
    assert_int_equal(dmm_arena_check(eager), DMM_ERR_WRONG_MECHANISM);
    dmm_test_error_mentions("dmm_arena_check", "not an arena", "dmm_arena_create", NULL);
    o = dmm_mechanism_release(eager, &b);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_WRONG_MECHANISM);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(eager));
    release_complete(f, &b, 2 * MIB);

    /* driver error, through a fault driver: the sentence carries the driver's own words */
    dmm_driver *fault;
    DMM_OK_OR_FAIL(dmm_fault_driver_create(f->host, &fault));
    dmm_mechanism *m2;
    DMM_OK_OR_FAIL(dmm_fault_plan(fault, DMM_OP_RESERVE, 1, 1, DMM_ERR_DRIVER));
    assert_int_equal(dmm_arena_create(fault, NULL, &m2), DMM_ERR_DRIVER);
    dmm_test_error_mentions("dmm_arena_create", "64.0 GiB", "68719476736 bytes", "host 0", "fault",
                            "smaller reserve_bytes", "no fall back to eager", NULL);
    dmm_arena_config c = kit_config(64 * MIB, 0, 0, NULL);
    DMM_OK_OR_FAIL(dmm_arena_create(fault, &c, &m2));
    DMM_OK_OR_FAIL(dmm_fault_plan(fault, DMM_OP_MAP, 1, 1, DMM_ERR_DRIVER));
    assert_int_equal(dmm_mechanism_allocate(m2, 4096, 0, &b), DMM_ERR_DRIVER);
    dmm_test_error_mentions("map", "fault", NULL);
    KIT_CHECK(m2);
    kit_stats_match_census(m2, fault);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m2));
    dmm_driver_destroy(fault);
    fx_end(f);
}

static void create_validates_its_config(void **state) {
    (void)state;
    dmm_driver *host;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_mechanism *m;
    dmm_arena_config c = kit_config(64 * MIB, 3 * MIB, 0, NULL);
    assert_int_equal(dmm_arena_create(host, &c, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("chunk_limit_bytes", "granularity", NULL);
    c = kit_config(64 * MIB, 0, 0, NULL);
    c.min_align = 100;
    assert_int_equal(dmm_arena_create(host, &c, &m), DMM_ERR_INVALID_ARGUMENT);
    c = kit_config(64 * MIB, 0, 0, NULL);
    c.size = 8;
    assert_int_equal(dmm_arena_create(host, &c, &m), DMM_ERR_SHORT_STRUCT);
    assert_int_equal(dmm_arena_create(NULL, NULL, &m), DMM_ERR_INVALID_ARGUMENT);
    /* a hook that can charge but never refund would leak its budget silently: refused, like eager */
    kit_tally t;
    memset(&t, 0, sizeof t);
    dmm_accounting half = kit_accounting(&t);
    half.refund = NULL;
    c = kit_config(64 * MIB, 0, 0, &half);
    assert_int_equal(dmm_arena_create(host, &c, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_arena_create", "charge and refund", NULL);
    half = kit_accounting(&t);
    half.charge = NULL;
    assert_int_equal(dmm_arena_create(host, &c, &m), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(kit_census(host).reserved_bytes, 0);
    dmm_driver_destroy(host);
}

/* ---- the accounting hook may call back into the arena (the governor's reclaim ladder does) ---- */

typedef struct reentrant_hook {
    kit_tally tally;
    dmm_mechanism *m;
    dmm_allocation victim;
    bool armed;
    int reentered;
} reentrant_hook;

static dmm_status reentrant_charge(void *user, dmm_device_id dev, dmm_axis axis, uint64_t bytes) {
    reentrant_hook *h = user;
    if (h->armed) { /* "reclaim": release another allocation of the same arena, from inside the charge */
        h->armed = false;
        h->reentered++;
        dmm_release_outcome o = dmm_mechanism_release(h->m, &h->victim);
        if (o.state != DMM_RELEASE_COMPLETE) return dmm_error_set(DMM_ERR_DRIVER, "reclaim failed");
    }
    return kit_charge(&h->tally, dev, axis, bytes);
}

static void reentrant_refund(void *user, dmm_device_id dev, dmm_axis axis, uint64_t bytes) {
    kit_refund(&((reentrant_hook *)user)->tally, dev, axis, bytes);
}

static void charge_runs_outside_the_lock_and_replans(void **state) {
    (void)state;
    alarm(120); /* a charge made under the arena's lock would deadlock here: fail instead of hanging */
    dmm_driver *host;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    reentrant_hook h;
    memset(&h, 0, sizeof h);
    dmm_accounting acct = {&h, reentrant_charge, reentrant_refund};
    dmm_arena_config c = kit_config(1 * GIB, 2 * MIB, 0, &acct);
    DMM_OK_OR_FAIL(dmm_arena_create(host, &c, &h.m));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(h.m, 3 * MIB, 0, NULL, 0, &a)); /* granules 0-1, VA only */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(h.m, 4 * KIB, 0, &h.victim));             /* in a's tail: granule 1 */
    assert_ptr_equal(h.victim.ptr, (char *)a.ptr + 3 * MIB);
    /* committing a plans one new chunk (granule 0) and shares granule 1 with the victim; the charge
     * releases the victim, so granule 1 is unbacked when the commit runs: it must plan again */
    h.armed = true;
    uint64_t newly = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_commit(h.m, &a, (dmm_range){0, 3 * MIB}, &newly));
    assert_int_equal(h.reentered, 1);
    assert_int_equal(newly, 4 * MIB);
    memset(a.ptr, 5, 3 * MIB);
    KIT_CHECK(h.m);
    kit_stats_match_census(h.m, host);
    kit_tally_matches(&h.tally, h.m);
    dmm_release_outcome o = dmm_mechanism_release(h.m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 4 * MIB);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(h.m));
    assert_int_equal(dmm_atomic_load_seq_cst(&h.tally.owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&h.tally.mapped), 0);
    dmm_driver_destroy(host);
    alarm(0);
}

/* Each charge of a commit takes a cached handle away (from inside the hook, as a holder of the reclaim
 * ladder might): every new plan needs 2 MiB more on the owned axis than the last one. The commit tops
 * its charge up and plans again until the arena holds still, however often that is (it used to give
 * up with BUSY after three tries). */
typedef struct taking_hook {
    kit_tally tally;
    dmm_mechanism *m;
    dmm_allocation taken[8];
    int ntaken, charges;
    bool armed, inside;
} taking_hook;

static dmm_status taking_charge(void *user, dmm_device_id dev, dmm_axis axis, uint64_t bytes) {
    taking_hook *h = user;
    dmm_status s = kit_charge(&h->tally, dev, axis, bytes);
    if (s != DMM_OK || !h->armed || h->inside) return s;
    h->charges++;
    if (h->ntaken < 8) {
        h->inside = true; /* the allocation below charges too */
        s = dmm_mechanism_allocate(h->m, 2 * MIB, 2 * MIB, &h->taken[h->ntaken]);
        h->inside = false;
        if (s != DMM_OK) return s;
        h->ntaken++;
    }
    return DMM_OK;
}

static void taking_refund(void *user, dmm_device_id dev, dmm_axis axis, uint64_t bytes) {
    kit_refund(&((taking_hook *)user)->tally, dev, axis, bytes);
}

static void a_commit_keeps_planning_while_the_arena_changes(void **state) {
    (void)state;
    alarm(120);
    dmm_driver *host;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    taking_hook h;
    memset(&h, 0, sizeof h);
    dmm_accounting acct = {&h, taking_charge, taking_refund};
    dmm_arena_config c = kit_config(1 * GIB, 2 * MIB, 20 * MIB, &acct);
    DMM_OK_OR_FAIL(dmm_arena_create(host, &c, &h.m));
    dmm_allocation warm[10], a;
    for (int i = 0; i < 10; i++) DMM_OK_OR_FAIL(dmm_mechanism_allocate(h.m, 2 * MIB, 2 * MIB, &warm[i]));
    for (int i = 0; i < 10; i++) assert_int_equal(dmm_mechanism_release(h.m, &warm[i]).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(h.m, 20 * MIB, 2 * MIB, NULL, 0, &a));
    h.armed = true;
    uint64_t newly = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_commit(h.m, &a, (dmm_range){0, 20 * MIB}, &newly));
    h.armed = false;
    assert_int_equal(newly, 20 * MIB);
    assert_int_equal(h.ntaken, 8);
    assert_true(h.charges >= 9); /* the first charge, then one top-up per handle taken */
    memset(a.ptr, 7, 20 * MIB);
    KIT_CHECK(h.m);
    kit_stats_match_census(h.m, host);
    kit_tally_matches(&h.tally, h.m);
    assert_int_equal(dmm_mechanism_release(h.m, &a).state, DMM_RELEASE_COMPLETE);
    for (int i = 0; i < h.ntaken; i++)
        assert_int_equal(dmm_mechanism_release(h.m, &h.taken[i]).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(h.m));
    assert_int_equal(dmm_atomic_load_seq_cst(&h.tally.owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&h.tally.mapped), 0);
    dmm_driver_destroy(host);
    alarm(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reserves_64_gib_without_rss),
        cmocka_unit_test(commit_and_decommit_are_real),
        cmocka_unit_test(complete_with_zero_unmapped_bytes),
        cmocka_unit_test(wrong_handles_fail_and_change_nothing),
        cmocka_unit_test(reused_address_gets_a_new_id),
        cmocka_unit_test(small_allocations_share_one_granule),
        cmocka_unit_test(one_gib_commit_uses_few_handles),
        cmocka_unit_test(allocate_committed_commits_only_the_ranges),
        cmocka_unit_test(tail_granule_shared_is_not_decommitted),
        cmocka_unit_test(handle_cache_reuses_and_drains),
        cmocka_unit_test(alias_maps_the_same_memory_twice_and_owns_it_once),
        cmocka_unit_test(an_alias_of_an_alias_and_any_order_of_teardown),
        cmocka_unit_test(alias_refuses_what_it_cannot_do_and_changes_nothing),
        cmocka_unit_test(destroy_is_refused_while_live),
        cmocka_unit_test(alignment_and_placement),
        cmocka_unit_test(address_space_exhaustion_is_an_error),
        cmocka_unit_test(error_sentences_name_op_values_and_remedy),
        cmocka_unit_test(create_validates_its_config),
        cmocka_unit_test(charge_runs_outside_the_lock_and_replans),
        cmocka_unit_test(a_commit_keeps_planning_while_the_arena_changes),
        cmocka_unit_test(commit_pieces_cuts_the_chunks_and_grants_access_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
