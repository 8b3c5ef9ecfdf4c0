/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_pool_quick.c — the pool's quick lists: a block freed on its own stream is parked
 * unmerged and an exact repeat takes it back (types.h, QUICK), over the arena over the host driver
 * (wrapped in the fault driver to count calls and hold events).
 *
 * What is proven: an exact repeat gets the parked block back, with no driver call, and merges nothing;
 * a miss is placed where it would be with the parked blocks merged (also when a neighbour of a parked
 * block turns free later, and when one turns free while the block is taken back by repeats); a parked
 * block is refused like any freed one (a second free on its stream or another, its size), changing
 * nothing; the stats count a parked block as free, exactly, without merging anything to read them; a growth
 * plans over the parked blocks merged (the window starts where the merged free block does); trim and
 * empty_cache decommit parked chunks (merged first, behind the same fence); dmm_pool_check checks
 * the quick lists, then merges them; a broken quick count is caught; the last parked block (the hot
 * one, on no list) is still its class's last in every respect; a block freed on another stream
 * is never parked and never handed out before its event, while the stream's own parked block is; the
 * bounds hold (64 blocks, 64 MiB, nothing above 8 MiB parked); a stream whose parked blocks keep
 * merging unused stops parking for a while, then parks again. Every test ends with the check and
 * nothing live: the driver's census back to zero.
 */
#include <stdlib.h>
#include <string.h>

#include "pool/types.h"
#include "testkit.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define C (2 * MIB)

typedef dmm_test_pool_fx fx;
static fx *fx_open_cfg(uint64_t cache, const dmm_pool_config *pc) { return dmm_test_pool_fx_open(pc, cache); }
static fx *fx_open(uint64_t cache) { return fx_open_cfg(cache, NULL); }
static void fx_close(fx *f) { dmm_test_pool_fx_close(f); }
static dmm_pool_stats stats(fx *f) { return dmm_test_pool_stats(f->pool); }

static void *xmalloc(fx *f, size_t bytes, dmm_stream s) { return dmm_test_pool_malloc(f->pool, bytes, s); }
static void xfree(fx *f, void *p, dmm_stream s) { dmm_test_pool_free(f->pool, p, s); }
static uint64_t calls(fx *f) { return dmm_fault_calls(f->drv, DMM_OP_ANY); }

/* The heap of `stream` (it must exist). */
static pool_heap *heap_of(fx *f, dmm_stream stream) {
    for (pool_heap *h = heaps_head(f->pool); h != NULL; h = heap_next(h))
        if (h->stream == stream) return h;
    fail_msg("no heap for stream %p", stream);
    return NULL;
}

/* dmm__heap_check_locked on h (the pool's check would merge the parked blocks after checking). */
static void check_heap(pool_heap *h) {
    heap_lock(h);
    const char *why = dmm__heap_check_locked(h);
    heap_unlock(h);
    if (why != NULL) fail_msg("heap check: %s", why);
}

static uint8_t kind_at(pool_heap *h, const void *p) {
    const pool_block *b = dmm__heap_hash_find(h, (uintptr_t)p);
    return b != NULL ? b->kind : 0;
}

static void an_exact_repeat_takes_the_parked_block_back_without_a_driver_call(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    char *a = xmalloc(f, 64 * KIB, NULL);
    pool_heap *h = heap_of(f, NULL);
    xfree(f, a, NULL);
    assert_int_equal(h->nquick, 1); /* parked, unmerged, still in the hash */
    assert_int_equal(h->quick_bytes, 64 * KIB);
    assert_int_equal(kind_at(h, a), BK_QUICK);
    assert_int_equal(h->hcount, 1);
    uint64_t before = calls(f);
    dmm_pool_stats s0 = stats(f);
    for (int i = 0; i < 1000; i++) {
        char *b = xmalloc(f, 64 * KIB - 100, NULL); /* rounds to the same size */
        assert_ptr_equal(b, a);
        assert_int_equal(h->nquick, 0);
        assert_int_equal(kind_at(h, b), BK_LIVE);
        xfree(f, b, NULL);
    }
    assert_int_equal(calls(f), before);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.mallocs, s0.mallocs + 1000);
    assert_int_equal(s.cached_mallocs, s0.cached_mallocs + 1000);
    assert_int_equal(s.frees, s0.frees + 1000);
    /* two parked: a repeat of one takes it and leaves the other parked (a hit merges nothing) */
    char *a2 = xmalloc(f, 64 * KIB, NULL), *c = xmalloc(f, 8 * KIB, NULL);
    xfree(f, c, NULL);
    xfree(f, a2, NULL);
    assert_int_equal(h->nquick, 2);
    a2 = xmalloc(f, 64 * KIB, NULL);
    assert_ptr_equal(a2, a);
    assert_int_equal(h->nquick, 1);
    assert_int_equal(kind_at(h, c), BK_QUICK);
    xfree(f, a2, NULL);
    fx_close(f);
}

static void a_miss_is_placed_as_if_the_parked_blocks_were_merged(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    /* one chunk: [b0 | b1 | b2 | free 512 KiB], then b1 parked between live blocks */
    char *b[3];
    for (int i = 0; i < 3; i++) b[i] = xmalloc(f, MIB / 2, NULL);
    xfree(f, b[1], NULL);
    pool_heap *h = heap_of(f, NULL);
    assert_int_equal(h->nquick, 1);
    /* 256 KiB: best fit among the free 512 KiB blocks, lowest address first: b1's place, as it would be
     * had b1 merged at its free (not the free tail, which the bins alone would offer) */
    char *x = xmalloc(f, 256 * KIB, NULL);
    assert_ptr_equal(x, b[1]);
    xfree(f, x, NULL);
    /* a parked block whose neighbour turns free later: the merge it could make grows (quick_reach,
     * which the check verifies), so a miss still sees it */
    char *big = xmalloc(f, POOL_QUICK_MAX_BLOCK + 512, NULL); /* too big to park: merged at its free */
    char *small = xmalloc(f, 4096, NULL);
    xfree(f, small, NULL); /* parked, next to big */
    assert_int_equal(kind_at(h, small), BK_QUICK);
    xfree(f, big, NULL);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, b[0], NULL);
    xfree(f, b[2], NULL);
    fx_close(f);
}

/* The hot path's re-park of the block it parked last skips the walk of its neighbours (types.h,
 * reach_known) only while nothing else ran: a neighbour that turned free between the repeat's malloc
 * and free (a free past the hot path) makes the re-park count the larger run. */
static void a_repeat_recounts_its_reach_after_a_neighbour_turns_free(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    char *a = xmalloc(f, 64 * KIB, NULL);
    char *big = xmalloc(f, POOL_QUICK_MAX_BLOCK + 512, NULL); /* too big to park: merged at its free */
    pool_heap *h = heap_of(f, NULL);
    for (int i = 0; i < 3; i++) { /* repeats: parked, taken back, parked again */
        xfree(f, a, NULL);
        assert_ptr_equal(xmalloc(f, 64 * KIB, NULL), a);
    }
    xfree(f, big, NULL); /* a's neighbour is free now (a is live: nothing parked to note it) */
    xfree(f, a, NULL);   /* parked: its free run reaches over big's place */
    assert_int_equal(kind_at(h, a), BK_QUICK);
    assert_true(h->quick_reach >= 64 * KIB + POOL_QUICK_MAX_BLOCK + 512);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* a miss that only the merged run fits goes where the bins would place it with a merged */
    char *x = xmalloc(f, POOL_QUICK_MAX_BLOCK + 64 * KIB, NULL);
    assert_ptr_equal(x, a);
    xfree(f, x, NULL);
    fx_close(f);
}

/* The last parked block waits ahead of the quick lists (types.h, hot) and is still its class's last:
 * repeats take the blocks of a class last parked first, a block of another class parked after it
 * moves it to its list, a parked hot block is refused like any freed one, and a repeat whose class's
 * last parked block has another size misses (and merges) as it would with the lists alone. */
static void the_last_parked_block_is_still_its_class_last(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    char *keep = xmalloc(f, 4096, NULL); /* something live below, so that nothing here starts a run */
    char *a = xmalloc(f, 64 * KIB, NULL), *b = xmalloc(f, 64 * KIB, NULL), *c = xmalloc(f, 8 * KIB, NULL);
    pool_heap *h = heap_of(f, NULL);
    xfree(f, a, NULL);
    xfree(f, b, NULL); /* b hot, a on its list */
    assert_ptr_equal(h->hot, dmm__heap_hash_find(h, (uintptr_t)b));
    check_heap(h);
    assert_ptr_equal(xmalloc(f, 64 * KIB, NULL), b);
    assert_ptr_equal(xmalloc(f, 64 * KIB, NULL), a);
    xfree(f, a, NULL);
    xfree(f, c, NULL); /* c hot, a still on its list */
    assert_int_equal(dmm_pool_free(f->pool, c, NULL), DMM_ERR_UNKNOWN_ALLOCATION); /* the hot block, freed twice */
    assert_int_equal(h->nquick, 2);
    check_heap(h);
    assert_ptr_equal(xmalloc(f, 64 * KIB, NULL), a);
    assert_ptr_equal(xmalloc(f, 8 * KIB, NULL), c);
    assert_int_equal(h->nquick, 0);
    /* 64 KiB and 64.5 KiB share a size class: the class's last parked block (hot) has the other size */
    char *d = xmalloc(f, 64 * KIB + 512, NULL);
    xfree(f, a, NULL);
    xfree(f, d, NULL);
    assert_int_equal(h->nquick, 2);
    char *x = xmalloc(f, 64 * KIB, NULL); /* a miss: every parked block merges first */
    assert_int_equal(h->nquick, 0);
    assert_int_equal(kind_at(h, x), BK_LIVE);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, x, NULL);
    xfree(f, b, NULL);
    xfree(f, c, NULL);
    xfree(f, keep, NULL);
    fx_close(f);
}

static void a_parked_block_is_refused_like_any_freed_one(void **state) {
    (void)state;
    fx *f = fx_open(0);
    dmm_stream other = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &other));
    char *a = xmalloc(f, 4096, NULL);
    char *keep = xmalloc(f, 4096, NULL);
    xfree(f, a, NULL);
    pool_heap *h = heap_of(f, NULL);
    assert_int_equal(kind_at(h, a), BK_QUICK);
    dmm_pool_stats s0 = stats(f);
    assert_int_equal(dmm_pool_free(f->pool, a, NULL), DMM_ERR_UNKNOWN_ALLOCATION); /* double free */
    dmm_test_error_mentions("not a live block", "already freed", NULL);
    assert_int_equal(dmm_pool_free(f->pool, a, other), DMM_ERR_UNKNOWN_ALLOCATION); /* on another stream too */
    size_t bytes = 0;
    assert_int_equal(dmm_pool_block_size(f->pool, a, &bytes), DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("not a live block", NULL);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.frees, s0.frees);
    assert_int_equal(s.allocations.current, 1);
    assert_int_equal(s.pending_blocks.current, 0);
    assert_int_equal(h->nquick, 1); /* nothing changed */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, keep, NULL);
    fx_close(f);
    (void)0;
}

static void stats_count_a_parked_block_as_free_exactly(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    size_t req[3] = {1000, 70000, MIB + 1}, got[3] = {1024, 70144, MIB + 512}; /* rounded to 512 */
    char *p[3];
    for (int i = 0; i < 3; i++) p[i] = xmalloc(f, req[i], NULL);
    xfree(f, p[0], NULL);
    xfree(f, p[2], NULL);
    pool_heap *h = heap_of(f, NULL);
    assert_int_equal(h->nquick, 2);
    dmm_pool_stats s = stats(f);
    assert_int_equal(h->nquick, 2); /* reading the stats merged nothing */
    assert_int_equal(s.allocations.current, 1);
    assert_int_equal(s.allocations.peak, 3);
    assert_int_equal(s.allocations.total, 3);
    assert_int_equal(s.allocated_bytes.current, got[1]);
    assert_int_equal(s.allocated_bytes.peak, got[0] + got[1] + got[2]);
    assert_int_equal(s.requested_bytes.current, req[1]);
    assert_int_equal(s.requested_bytes.peak, req[0] + req[1] + req[2]);
    assert_int_equal(s.frees, 2);
    /* the repeats take them back: counted live again, peaks kept, totals grow */
    char *q0 = xmalloc(f, req[0], NULL), *q2 = xmalloc(f, req[2], NULL);
    assert_ptr_equal(q0, p[0]);
    assert_ptr_equal(q2, p[2]);
    s = stats(f);
    assert_int_equal(s.allocations.current, 3);
    assert_int_equal(s.allocations.peak, 3);
    assert_int_equal(s.allocations.total, 5);
    assert_int_equal(s.allocated_bytes.current, got[0] + got[1] + got[2]);
    assert_int_equal(s.allocated_bytes.total, 2 * (got[0] + got[2]) + got[1]);
    assert_int_equal(s.requested_bytes.total, 2 * (req[0] + req[2]) + req[1]);
    assert_int_equal(s.mallocs, 5);
    xfree(f, q0, NULL);
    xfree(f, p[1], NULL);
    xfree(f, q2, NULL);
    s = stats(f);
    assert_int_equal(s.allocations.current, 0);
    assert_int_equal(s.allocated_bytes.current, 0);
    assert_int_equal(s.requested_bytes.current, 0);
    assert_int_equal(s.frees, 5);
    fx_close(f);
}

static void a_growth_plans_over_the_parked_blocks_merged(void **state) {
    (void)state;
    /* a retention limit far above what is live: the growth moves nothing (no carving of sources, which
     * would merge the parked blocks on its own), so only the plan's own merge can be seen */
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.retain_permille = 100000;
    fx *f = fx_open_cfg(4 * C, &pc);
    /* one chunk: [x 1.5 MiB | y 256 KiB | free 256 KiB], then y parked: a free run of 512 KiB */
    char *x = xmalloc(f, 3 * MIB / 2, NULL);
    char *y = xmalloc(f, 256 * KIB, NULL);
    assert_ptr_equal(y, x + 3 * MIB / 2);
    xfree(f, y, NULL);
    pool_heap *h = heap_of(f, NULL);
    assert_int_equal(h->nquick, 1);
    /* 1 MiB fits nowhere mapped: a growth of one chunk, its window starting where the free run does
     * once y is merged (at y, the lowest place of the cheapest windows), not after y */
    uint64_t chunks = stats(f).chunks_committed;
    char *z = xmalloc(f, MIB, NULL);
    assert_ptr_equal(z, y);
    assert_int_equal(stats(f).chunks_committed, chunks + 1);
    assert_int_equal(stats(f).chunks_moved, 0);
    assert_int_equal(h->nquick, 0);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, z, NULL);
    xfree(f, x, NULL);
    fx_close(f);
}

static void trim_and_empty_cache_decommit_parked_chunks(void **state) {
    (void)state;
    fx *f = fx_open(0);
    char *a = xmalloc(f, C, NULL), *b = xmalloc(f, C, NULL); /* a chunk each */
    xfree(f, a, NULL);
    pool_heap *h = heap_of(f, NULL);
    assert_int_equal(h->nquick, 1);
    uint64_t released = 0, total = 0;
    for (int i = 0; i < 4 && total < C; i++) { /* the first poll records the fence after a's free */
        DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, &released));
        total += released;
    }
    assert_int_equal(total, C); /* a's chunk, merged back and decommitted behind its fence */
    assert_int_equal(h->nquick, 0);
    assert_int_equal(stats(f).committed_bytes.current, C);
    memset(b, 1, C); /* b is still mapped */
    xfree(f, b, NULL);
    assert_int_equal(h->nquick, 1);
    total = 0;
    for (int i = 0; i < 4 && total < C; i++) {
        DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
        total += released;
    }
    assert_int_equal(total, C);
    assert_int_equal(stats(f).committed_bytes.current, 0);
    fx_close(f);
}

static void the_check_checks_the_quick_lists_then_merges_them(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    char *b[4];
    for (int i = 0; i < 4; i++) b[i] = xmalloc(f, MIB / 2, NULL); /* one chunk, four blocks */
    xfree(f, b[1], NULL);
    xfree(f, b[3], NULL);
    xfree(f, b[2], NULL);
    pool_heap *h = heap_of(f, NULL);
    assert_int_equal(h->nquick, 3);
    /* a broken count is caught (the check reads the lists as they are) */
    h->quick_bytes += 512;
    assert_int_equal(dmm_pool_check(f->pool), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("quick blocks", NULL);
    h->quick_bytes -= 512;
    assert_int_equal(h->nquick, 3); /* a failed check merges nothing */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    assert_int_equal(h->nquick, 0);
    assert_int_equal(h->hcount, 1);
    const pool_block *m = dmm__heap_bin_find(h, 3 * MIB / 2); /* b[1..3] coalesced into one free block */
    assert_non_null(m);
    assert_int_equal(m->addr, (uintptr_t)b[1]);
    assert_int_equal(m->size, 3 * MIB / 2);
    assert_int_equal(m->kind, BK_FREE);
    xfree(f, b[0], NULL);
    fx_close(f);
}

static void a_cross_stream_free_is_never_parked_and_still_waits_for_its_event(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    dmm_stream a = NULL, b = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &b));
    char *x = xmalloc(f, MIB, a), *y = xmalloc(f, MIB, a);
    pool_heap *h = heap_of(f, a);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true)); /* work on b "still runs" */
    xfree(f, x, b);                                       /* waits for b's event */
    xfree(f, y, a);                                       /* parked: a's own stream */
    assert_int_equal(h->nquick, 1);
    assert_int_equal(kind_at(h, x), 0); /* PENDING: out of the hash */
    assert_int_equal(stats(f).pending_blocks.current, 1);
    assert_int_equal(dmm_pool_free(f->pool, x, b), DMM_ERR_UNKNOWN_ALLOCATION); /* freed already */
    char *r1 = xmalloc(f, MIB, a), *r2 = xmalloc(f, MIB, a);
    assert_ptr_equal(r1, y); /* the stream's own parked block, at once */
    assert_true(r2 + MIB <= x || x + MIB <= r2); /* never x while b's event is pending */
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL)); /* polls: still pending */
    char *r3 = xmalloc(f, MIB, a);
    assert_true(r3 + MIB <= x || x + MIB <= r3);
    xfree(f, r3, a);
    assert_int_equal(stats(f).pending_blocks.current, 1);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false)); /* b's work is done */
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL));
    assert_int_equal(stats(f).pending_blocks.current, 0);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, r1, a);
    xfree(f, r2, a);
    fx_close(f);
}

static void the_bounds_keep_parked_memory_small(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    enum { N = 100 };
    char *p[N];
    for (int i = 0; i < N; i++) p[i] = xmalloc(f, 4096 + 512 * (size_t)i, NULL); /* distinct sizes */
    pool_heap *h = heap_of(f, NULL);
    size_t most = 0;
    for (int i = 0; i < N; i++) {
        xfree(f, p[i], NULL);
        assert_true(h->nquick <= POOL_QUICK_MAX_BLOCKS);
        if (h->nquick > most) most = h->nquick;
    }
    assert_int_equal(most, POOL_QUICK_MAX_BLOCKS); /* full, then merged at the next park */
    assert_int_equal(h->nquick, N - POOL_QUICK_MAX_BLOCKS);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool)); /* merges them */
    assert_int_equal(h->nquick, 0);
    /* bytes: nine blocks of 8 MiB are more than 64 MiB parked */
    char *big[9];
    for (int i = 0; i < 9; i++) big[i] = xmalloc(f, POOL_QUICK_MAX_BLOCK, NULL);
    for (int i = 0; i < 9; i++) {
        xfree(f, big[i], NULL);
        assert_true(h->quick_bytes <= POOL_QUICK_MAX_BYTES);
    }
    assert_int_equal(h->quick_bytes, POOL_QUICK_MAX_BLOCK); /* the ninth merged the eight first */
    /* above 8 MiB nothing is parked */
    char *huge = xmalloc(f, POOL_QUICK_MAX_BLOCK + 512, NULL);
    size_t n = h->nquick;
    xfree(f, huge, NULL);
    assert_int_equal(h->nquick, n);
    fx_close(f);
}

static void a_stream_that_does_not_repeat_stops_parking_for_a_while(void **state) {
    (void)state;
    fx *f = fx_open(4 * C);
    char *x = xmalloc(f, 8 * KIB, NULL);
    pool_heap *h = heap_of(f, NULL);
    /* every free parked, every malloc another size: each miss merges the block parked for nothing */
    unsigned rounds = 0;
    while (h->quick_skip == 0 && rounds < 1000) {
        xfree(f, x, NULL);
        assert_int_equal(h->nquick, 1);
        x = xmalloc(f, rounds % 2 ? 8 * KIB : 12 * KIB, NULL);
        assert_int_equal(h->nquick, 0);
        rounds++;
    }
    assert_int_equal(rounds, POOL_QUICK_WASTE_LIMIT);
    /* now the frees merge at once, for a while */
    for (unsigned i = 0; i < POOL_QUICK_SKIP; i++) {
        xfree(f, x, NULL);
        assert_int_equal(h->nquick, 0);
        assert_int_equal(kind_at(h, x), 0);
        x = xmalloc(f, 8 * KIB, NULL);
    }
    assert_int_equal(h->quick_skip, 0);
    /* then they park again (and merge for nothing again), until a repeat takes one back: that
     * forgives the misses */
    for (unsigned i = 0; i < 5; i++) {
        xfree(f, x, NULL);
        assert_int_equal(h->nquick, 1);
        x = xmalloc(f, i % 2 ? 8 * KIB : 12 * KIB, NULL);
    }
    assert_int_equal(h->quick_wasted, 5);
    xfree(f, x, NULL); /* 12 KiB, the last round's */
    char *y = xmalloc(f, 12 * KIB, NULL);
    assert_ptr_equal(y, x);
    assert_int_equal(h->quick_wasted, 0);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, y, NULL);
    fx_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_exact_repeat_takes_the_parked_block_back_without_a_driver_call),
        cmocka_unit_test(a_parked_block_is_refused_like_any_freed_one),
        cmocka_unit_test(a_miss_is_placed_as_if_the_parked_blocks_were_merged),
        cmocka_unit_test(a_repeat_recounts_its_reach_after_a_neighbour_turns_free),
        cmocka_unit_test(the_last_parked_block_is_still_its_class_last),
        cmocka_unit_test(stats_count_a_parked_block_as_free_exactly),
        cmocka_unit_test(a_growth_plans_over_the_parked_blocks_merged),
        cmocka_unit_test(trim_and_empty_cache_decommit_parked_chunks),
        cmocka_unit_test(the_check_checks_the_quick_lists_then_merges_them),
        cmocka_unit_test(a_cross_stream_free_is_never_parked_and_still_waits_for_its_event),
        cmocka_unit_test(the_bounds_keep_parked_memory_small),
        cmocka_unit_test(a_stream_that_does_not_repeat_stops_parking_for_a_while),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
