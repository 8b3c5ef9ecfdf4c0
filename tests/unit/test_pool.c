/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_pool.c — the pool over the arena over the host driver (wrapped in the fault driver
 * so that driver calls can be counted, failed and event completion held back).
 *
 * What is proven: the creation contract (refuses a mechanism without virtual backing, bad configs, a
 * chunk larger than the VA, 2^63 included, whose default region doubling once wrapped to 0 for ever);
 * blocks are aligned, usable memory, reused with no driver call at all; free blocks coalesce and
 * growth extends a free block next to unmapped VA; a full retention limit moves whole free chunks
 * (decommit there, commit here, the handle from the arena's cache) instead of growing, but never the
 * last free chunk of another stream in use (no move on every switch between streams); unknown and
 * double frees change nothing; trim decommits only chunks behind a completed fence and reports what
 * it freed; a block freed on another stream is not reused, and a chunk freed on a stream is neither
 * moved nor trimmed, while that stream's event is held incomplete; the events of completed
 * cross-stream frees are recycled (none destroyed, none created again); with every fence pending, a stream
 * reuses its own free chunks elsewhere at once through aliases (no new handle, nothing unmapped under
 * its work; the old places unmapped once the fences complete, then mapped = owned again), other
 * streams never get them, and without aliases the pool grows instead; a failed alias falls back to
 * new memory and a failed unmap of an old place is retried; commit and decommit failures leave
 * the pool consistent; destroy is refused while blocks are live. Every test runs the expensive check
 * and ends with nothing live: the driver's census back to zero.
 */
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#define MIB ((size_t)1 << 20)
#define C (2 * MIB)

typedef dmm_test_pool_fx fx;
static fx *fx_open(const dmm_pool_config *pc, uint64_t cache) { return dmm_test_pool_fx_open(pc, cache); }
static void fx_close(fx *f) { dmm_test_pool_fx_close(f); }
static dmm_pool_stats stats(fx *f) { return dmm_test_pool_stats(f->pool); }

static uint64_t calls(fx *f, dmm_driver_op op) { return dmm_fault_calls(f->drv, op); }

static void *xmalloc(fx *f, size_t bytes, dmm_stream s) { return dmm_test_pool_malloc(f->pool, bytes, s); }
static void xfree(fx *f, void *p, dmm_stream s) { dmm_test_pool_free(f->pool, p, s); }

/* ---- creation ---- */
static void create_refuses_what_it_cannot_use(void **state) {
    (void)state;
    dmm_driver *host = NULL;
    dmm_mechanism *eager = NULL;
    dmm_pool *pool = (dmm_pool *)&pool;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &eager));
    assert_int_equal(dmm_pool_create(eager, host, NULL, &pool), DMM_ERR_UNSUPPORTED);
    assert_null(pool);
    dmm_test_error_mentions("eager", "virtual backing", NULL);
    assert_int_equal(dmm_pool_create(NULL, host, NULL, &pool), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(eager));

    dmm_mechanism *arena = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(host, NULL, &arena));
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.chunk_bytes = 3 * MIB; /* not a power of two */
    assert_int_equal(dmm_pool_create(arena, host, &pc, &pool), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("chunk_bytes", "power of two", NULL);
    pc.chunk_bytes = (uint64_t)1 << 63; /* a power of two and a multiple of the granule: its doubling wraps */
    assert_int_equal(dmm_pool_create(arena, host, &pc, &pool), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("chunk_bytes 9223372036854775808", "larger than the pool's VA", "smaller chunk_bytes",
                            NULL);
    pc.chunk_bytes = 0;
    pc.va_bytes = (uint64_t)1 << 62; /* beyond the arena's reservation: once "out of host memory for 64 regions" */
    assert_int_equal(dmm_pool_create(arena, host, &pc, &pool), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("va_bytes 4611686018427387904 is more than mechanism 'arena' reserved", NULL);
    pc.va_bytes = 0;
    pc.max_chunk_bytes = (uint64_t)C << 33; /* a multiple of the quantum, but 2^33 of them */
    assert_int_equal(dmm_pool_create(arena, host, &pc, &pool), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("max_chunk_bytes", "at most 2^32 - 1 of them", NULL);
    pc.max_chunk_bytes = 0;
    pc.block_align = 100;
    assert_int_equal(dmm_pool_create(arena, host, &pc, &pool), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("block_align", NULL);
    pc.block_align = 0;
    pc.size = 4;
    assert_int_equal(dmm_pool_create(arena, host, &pc, &pool), DMM_ERR_SHORT_STRUCT);
    /* nothing was taken from the arena by the refusals */
    dmm_stats as;
    memset(&as, 0, sizeof as);
    as.size = sizeof as;
    DMM_OK_OR_FAIL(dmm_mechanism_stats(arena, &as));
    assert_int_equal(as.allocations.current, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(arena));
    dmm_driver_destroy(host);
}

/* ---- blocks ---- */
/* A growth of several handles is one mechanism call (commit_pieces): a handle per quantum, each a
 * create and a map, and one grant of access over them all. */
static void a_growth_of_several_handles_grants_access_once(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    uint64_t creates = calls(f, DMM_OP_CREATE), maps = calls(f, DMM_OP_MAP), grants = calls(f, DMM_OP_SET_ACCESS);
    char *p = xmalloc(f, 5 * C, NULL);
    memset(p, 3, 5 * C);
    assert_int_equal(calls(f, DMM_OP_CREATE) - creates, 5);
    assert_int_equal(calls(f, DMM_OP_MAP) - maps, 5);
    assert_int_equal(calls(f, DMM_OP_SET_ACCESS) - grants, 1);
    assert_int_equal(stats(f).chunks_committed, 5);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, p, NULL);
    uint64_t released = 0; /* and they stay handles of one quantum: a trim to 2 quanta keeps two */
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 2 * C, &released));
    assert_int_equal(released, 3 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    fx_close(f);
}

static void blocks_are_aligned_usable_and_reused_without_driver_calls(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    size_t sizes[] = {1, 511, 512, 513, 4096, 100000, MIB, 3 * MIB + 7};
    void *p[8];
    for (int i = 0; i < 8; i++) {
        p[i] = xmalloc(f, sizes[i], NULL);
        assert_int_equal((uintptr_t)p[i] % 512, 0);
        size_t got = 0;
        DMM_OK_OR_FAIL(dmm_pool_block_size(f->pool, p[i], &got));
        assert_true(got >= sizes[i] && got < sizes[i] + 512);
        memset(p[i], 0xA0 + i, sizes[i]); /* real memory on the host driver */
    }
    for (int i = 0; i < 8; i++) {
        const unsigned char *b = p[i];
        assert_int_equal(b[0], 0xA0 + i);
        assert_int_equal(b[sizes[i] - 1], 0xA0 + i);
        for (int j = 0; j < 8; j++) /* no overlap */
            if (j != i) assert_true((char *)p[j] + sizes[j] <= (char *)p[i] || (char *)p[i] + sizes[i] <= (char *)p[j]);
    }
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.allocations.current, 8);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    for (int i = 0; i < 8; i++) xfree(f, p[i], NULL);

    /* the growth's driver calls took time, and the stats say how much */
    uint64_t driver_ns = s.driver_ns, slow_ns = s.slow_path_ns;
    assert_true(driver_ns > 0);
    assert_true(slow_ns >= driver_ns); /* the slow path's wall time holds its driver calls */

    /* everything is mapped now: the same sizes again, and many pairs, make no driver call at all */
    uint64_t before = calls(f, DMM_OP_ANY);
    for (int round = 0; round < 1000; round++) {
        for (int i = 0; i < 8; i++) p[i] = xmalloc(f, sizes[i], NULL);
        for (int i = 7; i >= 0; i--) xfree(f, p[i], NULL);
    }
    assert_int_equal(calls(f, DMM_OP_ANY), before);
    s = stats(f);
    assert_int_equal(s.mallocs, 8 * 1001);
    assert_true(s.cached_mallocs >= 8 * 1000);
    assert_int_equal(s.driver_ns, driver_ns); /* no driver call, no driver time */
    assert_int_equal(s.slow_path_ns, slow_ns); /* cached mallocs never take the slow path */
    void *a = xmalloc(f, 4096, NULL), *b = xmalloc(f, 4096, NULL);
    xfree(f, a, NULL);
    void *c = xmalloc(f, 4096, NULL);
    assert_ptr_equal(a, c); /* the block just freed is the next one handed out */
    xfree(f, b, NULL);
    xfree(f, c, NULL);
    fx_close(f);
}

static void free_blocks_coalesce_and_growth_extends_a_free_block(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    /* four adjacent blocks of 512 KiB fill one chunk */
    char *b[4];
    for (int i = 0; i < 4; i++) b[i] = xmalloc(f, MIB / 2, NULL);
    for (int i = 1; i < 4; i++) assert_ptr_equal(b[i], b[0] + i * (MIB / 2));
    xfree(f, b[1], NULL);
    xfree(f, b[3], NULL);
    xfree(f, b[2], NULL); /* merges with both neighbours */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    uint64_t before = calls(f, DMM_OP_ANY);
    char *big = xmalloc(f, 3 * (MIB / 2), NULL); /* fits exactly in the coalesced 1.5 MiB */
    assert_ptr_equal(big, b[1]);
    assert_int_equal(calls(f, DMM_OP_ANY), before);
    xfree(f, big, NULL);
    /* 3 MiB does not fit in the 1.5 MiB free tail: one more chunk right after it makes it fit */
    char *g = xmalloc(f, 3 * MIB, NULL);
    assert_ptr_equal(g, b[1]);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.committed_bytes.current, 2 * C);
    assert_int_equal(s.chunks_committed, 2);
    xfree(f, g, NULL);
    xfree(f, b[0], NULL);
    fx_close(f);
}

static void a_full_retention_limit_moves_chunks_instead_of_growing(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    char *x1 = xmalloc(f, C, NULL), *x2 = xmalloc(f, C, NULL), *x3 = xmalloc(f, C, NULL);
    assert_ptr_equal(x2, x1 + C);
    assert_ptr_equal(x3, x2 + C);
    xfree(f, x1, NULL);
    xfree(f, x3, NULL);
    /* live peak 6 MiB, 6 MiB mapped, free: two separate chunks. 4 MiB fits nowhere: it takes x3's
     * chunk plus one more; the limit (peak + 2 %) is full, so x1's chunk moves there */
    uint64_t creates = calls(f, DMM_OP_CREATE), unmaps = calls(f, DMM_OP_UNMAP);
    char *y = xmalloc(f, 2 * C, NULL);
    assert_ptr_equal(y, x3);
    assert_int_equal(calls(f, DMM_OP_CREATE), creates); /* no new physical memory */
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps + 1);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.chunks_moved, 1);
    assert_int_equal(s.committed_bytes.current, 3 * C);
    assert_int_equal(s.physical_bytes.current, 3 * C);
    assert_int_equal(s.physical_bytes.peak, 3 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, y, NULL);
    xfree(f, x2, NULL);
    fx_close(f);
}

/* With move_batch_bytes, a growth moves several same-sized free chunks in one commit: each unmapped at
 * its old place (its handle waits in the arena's cache), then all mapped at the new place with one
 * grant of access. Without it (0), one commit per chunk, a grant each. A failed batch commit fails the
 * malloc; the moved chunks' handles stay in the cache and the pool stays consistent. */
static void moves_of_one_growth_share_one_grant(void **state) {
    (void)state;
    for (int batched = 1; batched >= 0; batched--) {
        dmm_pool_config pc = {.size = sizeof pc, .move_batch_bytes = batched ? 4 * C : 0};
        fx *f = fx_open(&pc, 4 * C);
        char *x[7];
        for (int i = 0; i < 7; i++) x[i] = xmalloc(f, C, NULL);
        for (int i = 0; i < 6; i += 2) xfree(f, x[i], NULL); /* three separate free chunks, peak 7 quanta */
        /* 3 quanta fit nowhere and the limit (peak + 2 %) is full: three free chunks move */
        uint64_t creates = calls(f, DMM_OP_CREATE), maps = calls(f, DMM_OP_MAP), grants = calls(f, DMM_OP_SET_ACCESS),
                 unmaps = calls(f, DMM_OP_UNMAP);
        char *y = xmalloc(f, 3 * C, NULL);
        memset(y, 5, 3 * C);
        assert_int_equal(stats(f).chunks_moved, 3);
        assert_int_equal(calls(f, DMM_OP_UNMAP) - unmaps, 3);
        assert_int_equal(calls(f, DMM_OP_CREATE) - creates, 0); /* the same handles, through the cache */
        assert_int_equal(calls(f, DMM_OP_MAP) - maps, 3);
        assert_int_equal(calls(f, DMM_OP_SET_ACCESS) - grants, batched ? 1 : 3);
        assert_int_equal(stats(f).committed_bytes.current, 7 * C);
        DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
        xfree(f, y, NULL);
        for (int i = 1; i < 7; i += 2) xfree(f, x[i], NULL);
        xfree(f, x[6], NULL);
        fx_close(f);
    }
    /* the batch's commit fails at its second map: the malloc fails, nothing leaks, the pool is whole */
    dmm_pool_config pc = {.size = sizeof pc, .move_batch_bytes = 4 * C};
    fx *f = fx_open(&pc, 4 * C);
    char *x[7];
    for (int i = 0; i < 7; i++) x[i] = xmalloc(f, C, NULL);
    for (int i = 0; i < 6; i += 2) xfree(f, x[i], NULL);
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_MAP, 2, 1, DMM_ERR_OUT_OF_MEMORY));
    void *y = NULL;
    assert_int_equal(dmm_pool_malloc(f->pool, 3 * C, NULL, &y), DMM_ERR_OUT_OF_MEMORY);
    assert_null(y);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    assert_int_equal(stats(f).allocations.current, 4);
    assert_int_equal(stats(f).committed_bytes.current, 4 * C); /* the three went: their handles wait cached */
    DMM_OK_OR_FAIL(dmm_fault_clear(f->drv));
    uint64_t creates = calls(f, DMM_OP_CREATE);
    y = xmalloc(f, 3 * C, NULL); /* the same malloc now works, with the cached handles */
    assert_int_equal(calls(f, DMM_OP_CREATE), creates);
    memset(y, 6, 3 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, y, NULL);
    for (int i = 1; i < 7; i += 2) xfree(f, x[i], NULL);
    xfree(f, x[6], NULL);
    fx_close(f);
}

/* Another stream's growth takes a heap's whole free chunks behind completed fences, but not the one
 * that heap's own stream reuses next: streams in use, each with less live memory than a chunk, once
 * took each other's only chunk in turn (a move and a growth on every switch, in the steady state). */
static void streams_in_use_do_not_take_each_others_last_chunk(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    dmm_stream a = NULL, b = NULL, c = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &b));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &c));
    /* a and b, 64 KiB each, one chunk each (b's growth, over the limit, left a's chunk to a) */
    char *x = xmalloc(f, 64 << 10, a);
    xfree(f, x, a);
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL)); /* polls: a's fence completes */
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL));
    uint64_t creates = calls(f, DMM_OP_CREATE);
    xfree(f, xmalloc(f, 64 << 10, b), b);
    assert_int_equal(calls(f, DMM_OP_CREATE), creates + 1);
    assert_int_equal(stats(f).chunks_moved, 0);
    /* switching between them, every fence complete (chunks could move), makes no driver call */
    uint64_t before = calls(f, DMM_OP_CREATE) + calls(f, DMM_OP_MAP) + calls(f, DMM_OP_UNMAP);
    for (int i = 0; i < 8; i++) {
        dmm_stream s = i % 2 ? b : a;
        char *p = xmalloc(f, 64 << 10, s);
        if (s == a) assert_ptr_equal(p, x);
        xfree(f, p, s);
        DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL));
    }
    assert_int_equal(calls(f, DMM_OP_CREATE) + calls(f, DMM_OP_MAP) + calls(f, DMM_OP_UNMAP), before);
    assert_int_equal(stats(f).chunks_moved, 0);
    /* a heap with more than that still gives its older chunks: a's two free chunks, c takes one */
    x = xmalloc(f, 2 * C, a);
    xfree(f, x, a);
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL));
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL));
    char *y = xmalloc(f, C, c);
    assert_int_equal(stats(f).chunks_moved, 1);
    char *z = xmalloc(f, 64 << 10, a); /* a kept the other */
    assert_int_equal(stats(f).chunks_moved, 1);
    xfree(f, z, a);
    xfree(f, y, c);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, NULL));
    DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, a));
    DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, b));
    DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, c));
    fx_close(f);
}

/* A pool config that sets only the handles: max_chunk_bytes, handle_divisor, min_chunk_bytes. */
static dmm_pool_config handles_config(uint64_t max_chunk, uint32_t divisor, uint64_t min_chunk) {
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.max_chunk_bytes = max_chunk;
    pc.handle_divisor = divisor;
    pc.min_chunk_bytes = min_chunk;
    return pc;
}

static void a_larger_max_chunk_grows_by_one_handle_sized_to_the_need(void **state) {
    (void)state;
    dmm_pool_config pc = handles_config(64 * MIB, 0, 0);
    fx *f = fx_open(&pc, 64 * MIB);
    uint64_t creates = calls(f, DMM_OP_CREATE), maps = calls(f, DMM_OP_MAP);
    char *x = xmalloc(f, 20 * MIB, NULL);
    assert_int_equal(calls(f, DMM_OP_CREATE), creates + 1); /* one handle of 20 MiB, not ten of 2 MiB */
    assert_int_equal(calls(f, DMM_OP_MAP), maps + 1);
    memset(x, 5, 20 * MIB);
    char *y = xmalloc(f, 100 * MIB, NULL); /* above max_chunk: two handles (64 + 36 MiB) */
    assert_int_equal(calls(f, DMM_OP_CREATE), creates + 3);
    xfree(f, x, NULL);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* trim gives chunks back whole: asking for 2 MiB releases x's 20 MiB */
    dmm_pool_stats s = stats(f);
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, (uint64_t)s.committed_bytes.current - C, &released));
    assert_int_equal(released, 20 * MIB);
    xfree(f, y, NULL);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    assert_int_equal(released, 100 * MIB);
    pc.max_chunk_bytes = 3 * MIB; /* not a multiple of the quantum */
    dmm_pool *bad = NULL;
    assert_int_equal(dmm_pool_create(f->arena, f->drv, &pc, &bad), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("max_chunk_bytes", NULL);
    fx_close(f);
}

/* A divisor cuts a growth into handles of n / divisor, but never below min_chunk_bytes: a piece below
 * the floor is one handle of its own size. */
static void a_divisor_cuts_handles_no_smaller_than_the_floor(void **state) {
    (void)state;
    for (int floored = 0; floored < 2; floored++) {
        dmm_pool_config pc = handles_config(32 * MIB, 8, floored ? 8 * MIB : 0);
        fx *f = fx_open(&pc, 64 * MIB);
        uint64_t creates = calls(f, DMM_OP_CREATE);
        char *x = xmalloc(f, 24 * MIB, NULL); /* 24/8 = 3 MiB: 2 MiB handles, or 8 MiB ones with the floor */
        assert_int_equal(calls(f, DMM_OP_CREATE) - creates, floored ? 3 : 12);
        memset(x, 5, 24 * MIB);
        creates = calls(f, DMM_OP_CREATE);
        char *y = xmalloc(f, 6 * MIB, NULL); /* below the floor: one handle of 6 MiB */
        assert_int_equal(calls(f, DMM_OP_CREATE) - creates, floored ? 1 : 3);
        creates = calls(f, DMM_OP_CREATE);
        char *z = xmalloc(f, 512 * MIB, NULL); /* 512/8 = 64 MiB: capped at max_chunk either way */
        assert_int_equal(calls(f, DMM_OP_CREATE) - creates, 16);
        xfree(f, x, NULL);
        xfree(f, y, NULL);
        xfree(f, z, NULL);
        DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
        DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, NULL));
        if (floored) { /* the floor must be whole quanta and at most max_chunk_bytes; refused, nothing taken */
            dmm_pool *bad = NULL;
            pc.min_chunk_bytes = 3 * MIB;
            assert_int_equal(dmm_pool_create(f->arena, f->drv, &pc, &bad), DMM_ERR_INVALID_ARGUMENT);
            dmm_test_error_mentions("min_chunk_bytes 3145728", "multiple of chunk_bytes", NULL);
            pc.min_chunk_bytes = 64 * MIB;
            assert_int_equal(dmm_pool_create(f->arena, f->drv, &pc, &bad), DMM_ERR_INVALID_ARGUMENT);
            dmm_test_error_mentions("min_chunk_bytes 67108864", "at most max_chunk_bytes 33554432", NULL);
            assert_null(bad);
        }
        fx_close(f);
    }
}

/* A floor divisor raises the floor with the live peak (up to max_chunk_bytes): once 256 MiB are live,
 * a 24 MiB growth under 32 MiB / 8 is cut into 2 MiB handles with no floor divisor, 16 + 8 MiB with
 * live / 16, and one handle with live / 4 (64 MiB, capped at 32). Before anything was live the floor
 * is min_chunk_bytes (one quantum here) whatever the divisor. */
static void a_floor_divisor_raises_the_floor_with_the_live_peak(void **state) {
    (void)state;
    static const uint32_t divisors[] = {0, 16, 4};
    static const uint64_t after_big[] = {12, 2, 1}, small_after_big[] = {3, 1, 1};
    for (size_t i = 0; i < sizeof divisors / sizeof divisors[0]; i++) {
        dmm_pool_config pc = handles_config(32 * MIB, 8, 0);
        pc.floor_divisor = divisors[i];
        fx *f = fx_open(&pc, 64 * MIB);
        uint64_t creates = calls(f, DMM_OP_CREATE);
        char *first = xmalloc(f, 24 * MIB, NULL); /* nothing live yet: 3 MiB / 2 MiB handles either way */
        assert_int_equal(calls(f, DMM_OP_CREATE) - creates, 12);
        char *big = xmalloc(f, 256 * MIB, NULL); /* 256 / 8 = 32 MiB handles; the live peak is now 280 MiB */
        memset(big, 3, 256 * MIB);
        creates = calls(f, DMM_OP_CREATE);
        char *x = xmalloc(f, 24 * MIB, NULL);
        assert_int_equal(calls(f, DMM_OP_CREATE) - creates, after_big[i]);
        creates = calls(f, DMM_OP_CREATE);
        char *y = xmalloc(f, 6 * MIB, NULL); /* below a raised floor: one handle of its own size */
        assert_int_equal(calls(f, DMM_OP_CREATE) - creates, small_after_big[i]);
        memset(x, 5, 24 * MIB);
        memset(y, 6, 6 * MIB);
        xfree(f, first, NULL);
        xfree(f, big, NULL);
        xfree(f, x, NULL);
        xfree(f, y, NULL);
        DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
        DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, NULL));
        fx_close(f);
    }
}

static void unknown_and_double_frees_change_nothing(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    char *p = xmalloc(f, 4096, NULL);
    int local = 0;
    assert_int_equal(dmm_pool_free(f->pool, &local, NULL), DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("not a live block", NULL);
    assert_int_equal(dmm_pool_free(f->pool, p + 512, NULL), DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(dmm_pool_free(f->pool, NULL, NULL), DMM_ERR_INVALID_ARGUMENT);
    void *out = NULL;
    assert_int_equal(dmm_pool_malloc(f->pool, 0, NULL, &out), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_pool_malloc(f->pool, SIZE_MAX, NULL, &out), DMM_ERR_OUT_OF_MEMORY);
    assert_int_equal(stats(f).allocations.current, 1);
    xfree(f, p, NULL);
    assert_int_equal(dmm_pool_free(f->pool, p, NULL), DMM_ERR_UNKNOWN_ALLOCATION); /* double free */
    assert_int_equal(stats(f).frees, 1);
    fx_close(f);
}

/* dmm_pool_free_requested tells the bytes asked for at the block's malloc, on every way a free goes:
 * parked at once, too big to park, on another stream; a refused free leaves *requested alone.
 * dmm_pool_block_stream tells the stream a live block was allocated on, and refuses a freed one. */
static void a_free_tells_what_was_requested(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    dmm_stream a = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    const size_t sizes[3] = {1000, 3 * MIB + 7, 64 * MIB - 1};
    for (int i = 0; i < 3; i++) {
        for (int other = 0; other < 2; other++) {
            void *p = xmalloc(f, sizes[i], other ? NULL : a);
            dmm_stream own = (dmm_stream)1;
            DMM_OK_OR_FAIL(dmm_pool_block_stream(f->pool, p, &own)); /* the stream it was allocated on */
            assert_ptr_equal(own, other ? NULL : a);
            uint64_t req = 0;
            DMM_OK_OR_FAIL(dmm_pool_free_requested(f->pool, p, a, &req)); /* its own stream, or another */
            assert_int_equal(req, sizes[i]);
            assert_int_equal(dmm_pool_block_stream(f->pool, p, &own), DMM_ERR_UNKNOWN_ALLOCATION); /* freed */
        }
    }
    int local = 0;
    uint64_t req = 42;
    assert_int_equal(dmm_pool_free_requested(f->pool, &local, NULL, &req), DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(req, 42);
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL)); /* the cross-stream frees' events */
    assert_int_equal(stats(f).allocations.current, 0);
    fx_close(f);
}

/* Frees on a stream after its last fence, then the stream destroyed (its queued work still runs, and no
 * event can follow it there): destroy synchronizes the device once and goes. While that fails, destroy
 * is refused with a sentence and the pool stays intact. (Before, destroy answered BUSY forever.) */
static void a_pool_is_torn_down_after_its_stream_was_destroyed(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    dmm_stream a = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    xfree(f, xmalloc(f, MIB, a), a);
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL)); /* a fence, recorded and complete */
    xfree(f, xmalloc(f, 2 * MIB, a), a);                      /* a free after it */
    DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, a));
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_DEVICE_SYNCHRONIZE, 1, 1, DMM_ERR_DRIVER));
    assert_int_equal(dmm_pool_destroy(f->pool), DMM_ERR_DRIVER);
    dmm_test_error_mentions("no fence can be recorded", "synchronizing the device", "nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    assert_int_equal(dmm_fault_calls(f->drv, DMM_OP_DEVICE_SYNCHRONIZE), 1);
    DMM_OK_OR_FAIL(dmm_pool_destroy(f->pool)); /* the plan is spent: the synchronization works */
    assert_int_equal(dmm_fault_calls(f->drv, DMM_OP_DEVICE_SYNCHRONIZE), 2);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->arena));
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->drv);
    dmm_driver_destroy(f->host);
    free(f);
}

static void destroy_is_refused_while_blocks_are_live(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    void *p = xmalloc(f, 4096, NULL);
    assert_int_equal(dmm_pool_destroy(f->pool), DMM_ERR_BUSY);
    dmm_test_error_mentions("live block", NULL);
    xfree(f, p, NULL); /* the pool still works */
    fx_close(f);
}

/* ---- trim ---- */
static void trim_decommits_whole_free_chunks_down_to_the_target(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    char *keep = xmalloc(f, MIB, NULL); /* pins chunk 0 */
    char *big = xmalloc(f, 5 * C, NULL);
    xfree(f, big, NULL);
    dmm_pool_stats s = stats(f);
    uint64_t committed = (uint64_t)s.committed_bytes.current;
    assert_true(committed >= 6 * C);
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, committed - 2 * C, &released));
    assert_int_equal(released, 2 * C);
    assert_int_equal(stats(f).committed_bytes.current, committed - 2 * C);
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, &released));
    s = stats(f);
    assert_int_equal(s.committed_bytes.current, C); /* only the chunk a live block touches */
    assert_int_equal(released, committed - 3 * C);
    memset(keep, 1, MIB); /* still mapped */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, keep, NULL);
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    assert_int_equal(released, C);
    s = stats(f);
    assert_int_equal(s.committed_bytes.current, 0);
    assert_int_equal(s.physical_bytes.current, 0); /* the arena's cache was drained too */
    fx_close(f);
}

/* The observer of dmm_pool_config.on_map: the mapped bytes it was told of, net. */
typedef struct map_tally {
    int64_t net;
    uint64_t maps, unmaps;
} map_tally;
static void tally_map(void *user, uintptr_t addr, uint64_t bytes, bool mapped) {
    map_tally *t = user;
    assert_true(addr != 0 && bytes % C == 0);
    t->net += mapped ? (int64_t)bytes : -(int64_t)bytes;
    if (mapped) t->maps++;
    else t->unmaps++;
}

/* The committed ranges, in a new array (*n of them), and their sum. */
static uint64_t *committed_ranges(fx *f, size_t *n, uint64_t *sum) {
    DMM_OK_OR_FAIL(dmm_pool_committed(f->pool, NULL, 0, n));
    uint64_t *v = calloc(2 * *n + 2, sizeof *v);
    assert_non_null(v);
    DMM_OK_OR_FAIL(dmm_pool_committed(f->pool, v, *n + 1, n));
    *sum = 0;
    for (size_t i = 0; i < *n; i++) {
        *sum += v[2 * i + 1];
        if (i > 0) assert_true(v[2 * i - 2] + v[2 * i - 1] < v[2 * i]); /* in order, coalesced */
    }
    return v;
}

static void the_pool_says_what_it_mapped(void **state) {
    (void)state;
    map_tally t = {0};
    dmm_pool_config pc = {.size = sizeof pc, .on_map = tally_map, .on_map_user = &t};
    fx *f = fx_open(&pc, 0);
    dmm_stream s2 = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &s2));
    char *a = xmalloc(f, 3 * C, NULL), *b = xmalloc(f, C, s2), *c = xmalloc(f, 5 * C, NULL);
    xfree(f, a, NULL);
    size_t n = 0;
    uint64_t sum = 0;
    uint64_t *v = committed_ranges(f, &n, &sum);
    assert_true(n >= 2); /* two heaps' regions */
    assert_int_equal(sum, stats(f).committed_bytes.current);
    assert_int_equal((uint64_t)t.net, sum); /* the observer saw every map */
    assert_true(t.maps > 0 && t.unmaps == 0);
    /* the live blocks lie inside the ranges */
    const char *live[2] = {b, c};
    const uint64_t len[2] = {C, 5 * C};
    for (int k = 0; k < 2; k++) {
        bool inside = false;
        for (size_t i = 0; i < n; i++)
            inside |= (uintptr_t)live[k] >= v[2 * i] && (uintptr_t)live[k] + len[k] <= v[2 * i] + v[2 * i + 1];
        assert_true(inside);
    }
    free(v);
    /* an array too small: refused, nothing written */
    uint64_t small[2] = {7, 7};
    assert_int_equal(dmm_pool_committed(f->pool, small, 1, &n), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("larger", NULL);
    assert_int_equal(small[0], 7);
    /* a trim unmaps, and says so */
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, &released));
    assert_true(released > 0 && t.unmaps > 0);
    v = committed_ranges(f, &n, &sum);
    assert_int_equal(sum, stats(f).committed_bytes.current);
    assert_int_equal((uint64_t)t.net, sum);
    free(v);
    xfree(f, b, s2);
    xfree(f, c, NULL);
    DMM_OK_OR_FAIL(f->drv->ops->stream_synchronize(f->drv, s2));
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    v = committed_ranges(f, &n, &sum);
    assert_int_equal(n, 0);
    assert_int_equal(t.net, 0);
    free(v);
    DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, s2));
    fx_close(f);
}

/* ---- streams and events ---- */
static void a_block_freed_on_another_stream_waits_for_its_event(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    dmm_stream a = NULL, b = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &b));
    char *x = xmalloc(f, MIB, a);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true)); /* work on b "still runs" */
    xfree(f, x, b);
    assert_int_equal(stats(f).pending_blocks.current, 1);
    /* a stream asking for the same size, again and again: never x while b's event is pending */
    char *y[4];
    for (int i = 0; i < 4; i++) {
        y[i] = xmalloc(f, MIB, a);
        assert_true(y[i] + MIB <= x || x + MIB <= y[i]);
        DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL)); /* polls: still pending */
    }
    assert_int_equal(stats(f).pending_blocks.current, 1);
    assert_int_equal(dmm_pool_destroy(f->pool), DMM_ERR_BUSY); /* live blocks, and a pending free */
    for (int i = 0; i < 4; i++) xfree(f, y[i], a);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false)); /* b's work is done */
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL));
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.pending_blocks.current, 0);
    assert_int_equal(s.cross_stream_frees, 1);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    fx_close(f);
    (void)0;
}

/* Events of completed cross-stream frees are recycled, more of them than the free-event list first
 * holds (16), so the list grows: no event is destroyed and the next round of cross-stream frees
 * creates none. The poll now hands them back before it takes the heap lock, because when the list
 * cannot grow (realloc fails) the event is destroyed, a driver call that must not run under the
 * heap lock. That branch itself is not reached here: realloc cannot be failed from a test (the fault
 * driver fails driver calls, not host allocations), so this guards the recycling path it sits on. */
static void completed_cross_stream_events_are_recycled(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    dmm_stream a = NULL, b = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &b));
    enum { N = 40 };
    char *x[N];
    uint64_t created = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) x[i] = xmalloc(f, 64 * 1024, a);
        DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true)); /* b's work "still runs": every free pends */
        uint64_t c0 = calls(f, DMM_OP_EVENT_CREATE);
        for (int i = 0; i < N; i++) xfree(f, x[i], b);
        assert_int_equal(stats(f).pending_blocks.current, N);
        if (round == 0) created = calls(f, DMM_OP_EVENT_CREATE) - c0;
        else assert_int_equal(calls(f, DMM_OP_EVENT_CREATE), c0); /* every event came from the free list */
        DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
        DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, NULL)); /* polls: the frees complete */
        assert_int_equal(stats(f).pending_blocks.current, 0);
        DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    }
    assert_int_equal(created, N);
    assert_int_equal(calls(f, DMM_OP_EVENT_DESTROY), 0); /* recycled, none destroyed before the pool */
    fx_close(f);
}

static void trim_and_moves_leave_a_chunk_mapped_until_its_stream_event_completes(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    dmm_stream a = NULL, b = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &b));
    char *x = xmalloc(f, 4 * C, a);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true)); /* work on a still uses x */
    xfree(f, x, a);
    uint64_t unmaps = calls(f, DMM_OP_UNMAP), released = 1;
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, &released));
    assert_int_equal(released, 0);
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps);
    /* stream b needs as much: the retention limit is full, but a's free chunks may not move */
    uint64_t creates = calls(f, DMM_OP_CREATE);
    char *y = xmalloc(f, 4 * C, b);
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps);
    assert_int_equal(calls(f, DMM_OP_CREATE), creates + 4); /* new memory instead */
    assert_true(y + 4 * C <= x || x + 4 * C <= y);
    memset(x, 7, 4 * C); /* x is still mapped: in-flight work on a could still use it */
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, &released));
    assert_int_equal(released, 4 * C);
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps + 4);
    xfree(f, y, b);
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, &released));
    fx_close(f);
}

/* ---- aliases: a stream reuses its own fenced chunks at once, elsewhere in VA ---- */
static dmm_driver_census census(fx *f) {
    dmm_driver_census c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    DMM_OK_OR_FAIL(f->host->ops->census(f->host, &c));
    return c;
}

static void poll_until_reaped(fx *f) { dmm_test_pool_poll_until_reaped(f->pool); }

static void a_stream_reuses_its_fenced_chunks_at_once_through_an_alias(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    dmm_stream a = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    char *x1 = xmalloc(f, C, a), *x2 = xmalloc(f, C, a), *x3 = xmalloc(f, C, a);
    assert_ptr_equal(x3, x1 + 2 * C);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true)); /* a's work still runs: every fence is pending */
    memset(x1, 0x11, C);
    xfree(f, x1, a);
    xfree(f, x3, a);
    /* 4 MiB fits nowhere: x3's chunk plus one more. The limit is full and x1's chunk may not move
     * (its fence is pending), but a's own new work runs after a's old work: alias it */
    uint64_t creates = calls(f, DMM_OP_CREATE), unmaps = calls(f, DMM_OP_UNMAP);
    char *y = xmalloc(f, 2 * C, a);
    assert_ptr_equal(y, x3);
    assert_int_equal(calls(f, DMM_OP_CREATE), creates); /* no new physical memory */
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps);   /* nothing unmapped under a's work */
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.chunks_aliased, 1);
    assert_int_equal(s.chunks_moved, 0);
    assert_int_equal(s.physical_bytes.current, 3 * C);
    assert_int_equal(s.physical_bytes.peak, 3 * C);
    assert_int_equal(s.committed_bytes.current, 4 * C); /* x1's old place is still mapped */
    dmm_driver_census c = census(f);
    assert_int_equal(c.handle_bytes, 3 * C);
    assert_int_equal(c.mapped_bytes, 4 * C);
    assert_int_equal(y[C + 5], 0x11); /* one memory at two places */
    memset(y, 0x22, 2 * C);
    assert_int_equal(x1[7], 0x22);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* the old place stays mapped while the fence is pending, trim or not */
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL));
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps);
    assert_int_equal(dmm_pool_destroy(f->pool), DMM_ERR_BUSY); /* y is live, and the fence pending */
    /* a's work is done: the next polls unmap the old place; its VA comes back to the heap */
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    poll_until_reaped(f);
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps + 1);
    assert_int_equal(calls(f, DMM_OP_RELEASE), 0); /* the handle lives on at y */
    c = census(f);
    assert_int_equal(c.mapped_bytes, 3 * C);
    assert_int_equal(c.handle_bytes, 3 * C);
    s = stats(f);
    assert_int_equal(s.committed_bytes.current, 3 * C);
    assert_int_equal(s.chunks_decommitted, 1);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    assert_int_equal(y[C + 5], 0x22);
    char *z = xmalloc(f, C, a); /* x1's VA is reusable (new memory from the cache: the limit allows it) */
    memset(z, 1, C);
    xfree(f, z, a);
    xfree(f, y, a);
    xfree(f, x2, a);
    fx_close(f);
}

/* A seeded churn of whole-chunk blocks (1-4 chunks, at most `cap` chunks live) on one stream, freed
 * on `free_on`. Returns the peak of live chunks. */
static int churn(fx *f, dmm_stream on, dmm_stream free_on, int cap, int rounds, unsigned seed) {
    enum { MAXB = 64 };
    char *b[MAXB];
    int sz[MAXB], n = 0, live = 0, peak = 0;
    for (int r = 0; r < rounds; r++) {
        int k = 1 + (int)(rand_r(&seed) % 4);
        if (n < MAXB && live + k <= cap && (rand_r(&seed) % 2 == 0 || n == 0)) {
            b[n] = xmalloc(f, (size_t)k * C, on);
            memset(b[n], r & 0x7f, (size_t)k * C);
            sz[n++] = k;
            live += k;
            if (live > peak) peak = live;
        } else if (n > 0) {
            int i = (int)(rand_r(&seed) % (unsigned)n);
            xfree(f, b[i], free_on);
            live -= sz[i];
            b[i] = b[--n];
            sz[i] = sz[n];
        }
    }
    while (n > 0) xfree(f, b[--n], free_on);
    return peak;
}

static void under_pending_fences_a_stream_churns_in_flat_physical_memory_and_other_streams_wait(void **state) {
    (void)state;
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.retain_permille = 1; /* every growth beyond the live peak must reuse what the pool holds */
    pc.settle_permille = 1; /* and the limit never rises (settling: its own test) */
    fx *f = fx_open(&pc, 0);
    dmm_stream a = NULL, b = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &b));
    /* warm-up: a reaches its peak of 16 chunks */
    char *w[4];
    for (int i = 0; i < 4; i++) w[i] = xmalloc(f, 4 * C, a);
    for (int i = 0; i < 4; i++) xfree(f, w[i], a);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true));
    uint64_t creates = calls(f, DMM_OP_CREATE), unmaps = calls(f, DMM_OP_UNMAP);
    int peak = churn(f, a, a, 16, 600, 7);
    dmm_pool_stats s = stats(f);
    print_message("  same stream: live peak %d chunks, %llu grows, %llu aliased, %llu moved, %llu creates, physical "
                  "peak %lld MiB, committed peak %lld MiB\n",
                  peak, (unsigned long long)s.grows, (unsigned long long)s.chunks_aliased,
                  (unsigned long long)s.chunks_moved, (unsigned long long)(calls(f, DMM_OP_CREATE) - creates),
                  (long long)s.physical_bytes.peak >> 20, (long long)s.committed_bytes.peak >> 20);
    assert_true(s.chunks_aliased > 0);
    assert_int_equal(calls(f, DMM_OP_CREATE), creates); /* physical memory flat: not one new handle */
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps);   /* and nothing unmapped under running work */
    assert_int_equal(s.physical_bytes.peak, 16 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* stream b needs as much while a's fences are pending: a's chunks neither move nor alias to b */
    uint64_t aliased = s.chunks_aliased;
    char *v[4];
    for (int i = 0; i < 4; i++) v[i] = xmalloc(f, 4 * C, b);
    s = stats(f);
    assert_int_equal(s.chunks_aliased, aliased);
    assert_int_equal(s.chunks_moved, 0);
    assert_int_equal(calls(f, DMM_OP_CREATE), creates + 16); /* b got new memory, all of it */
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps);
    for (int i = 0; i < 4; i++) xfree(f, v[i], b);
    /* blocks of a freed on b (cross-stream) are not reused, aliased or moved while b's events pend */
    uint64_t c1 = calls(f, DMM_OP_CREATE);
    char *x = xmalloc(f, 4 * C, a);
    xfree(f, x, b);
    char *y = xmalloc(f, 4 * C, a);
    assert_true(y + 4 * C <= x || x + 4 * C <= y);
    xfree(f, y, a);
    assert_int_equal(stats(f).chunks_aliased, aliased);
    assert_true(calls(f, DMM_OP_CREATE) >= c1);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* the work is done: polls unmap every old place; then mapped = owned again */
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    poll_until_reaped(f);
    dmm_driver_census c = census(f);
    assert_int_equal(c.mapped_bytes, c.handle_bytes);
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps + aliased);
    s = stats(f);
    assert_int_equal(s.committed_bytes.current, (int64_t)c.mapped_bytes);
    assert_int_equal(s.pending_blocks.current, 0);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    fx_close(f);
}

/* One iteration of a repeating workload: the churn with the same seed under pending fences, then the
 * work completes (a synchronize at the step's end) and polls reap. Returns its driver calls. */
static uint64_t one_step(fx *f, dmm_stream a, int *peak) {
    uint64_t before = calls(f, DMM_OP_CREATE) + calls(f, DMM_OP_MAP) + calls(f, DMM_OP_UNMAP);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true));
    *peak = churn(f, a, a, 16, 600, 7);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    poll_until_reaped(f);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    return calls(f, DMM_OP_CREATE) + calls(f, DMM_OP_MAP) + calls(f, DMM_OP_UNMAP) - before;
}

/* Settling: under a fixed retention limit the same step re-maps memory every time (its growths alias
 * the chunks the next step needs where they were); with settle_permille the limit rises by what was
 * re-mapped, and the step is soon served with no driver call at all, at a bounded peak. */
static void a_repeating_workload_settles_into_a_layout_without_driver_calls(void **state) {
    (void)state;
    uint64_t last[2] = {0, 0};
    int64_t phys[2] = {0, 0};
    for (int settle = 0; settle < 2; settle++) {
        dmm_pool_config pc;
        memset(&pc, 0, sizeof pc);
        pc.size = sizeof pc;
        pc.retain_permille = 1;
        pc.settle_permille = settle ? 500 : 1; /* may rise to 1.5 × the live peak; or stay fixed */
        fx *f = fx_open(&pc, 0);
        dmm_stream a = NULL;
        DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
        int peak = 0;
        uint64_t per[6];
        for (int i = 0; i < 6; i++) per[i] = one_step(f, a, &peak);
        dmm_pool_stats s = stats(f);
        print_message("  settle %s: driver calls per step %llu %llu %llu %llu %llu %llu; live peak %d chunks, physical "
                      "peak %lld MiB\n",
                      settle ? "500" : "off", (unsigned long long)per[0], (unsigned long long)per[1],
                      (unsigned long long)per[2], (unsigned long long)per[3], (unsigned long long)per[4],
                      (unsigned long long)per[5], peak, (long long)s.physical_bytes.peak >> 20);
        last[settle] = per[4] + per[5];
        phys[settle] = s.physical_bytes.peak;
        assert_true(s.physical_bytes.peak <= (int64_t)(peak * C * (settle ? 3 : 2) / 2) + (int64_t)C);
        DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, a));
        fx_close(f);
    }
    assert_true(last[0] > 0);  /* fixed: still re-mapping in steps 5 and 6 */
    assert_int_equal(last[1], 0); /* settled: not one call */
    assert_true(phys[1] >= phys[0]); /* bought with (bounded) memory */
}

/* Warm start: a pool told its last run's committed peak commits it at once, in a few large handles;
 * the same steps then make no driver call from the first one on, also under a fixed retention limit
 * that alone re-maps every step (the settle test above). */
static void a_warm_start_commits_the_last_peak_in_large_handles(void **state) {
    (void)state;
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.retain_permille = 1;
    pc.settle_permille = 500;
    uint64_t cold[6], warm[6], fixed[6], peak_committed = 0;
    uint64_t *per[3] = {cold, warm, fixed};
    int peak = 0;
    for (int run = 0; run < 3; run++) {
        /* run 2: a fixed limit */
        pc.settle_permille = run == 2 ? 1 : 500;
        fx *f = fx_open(&pc, 0);
        dmm_stream a = NULL;
        DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
        if (run > 0) {
            uint64_t creates = calls(f, DMM_OP_CREATE), got = 0;
            DMM_OK_OR_FAIL(dmm_pool_warm(f->pool, a, peak_committed, 8 * C, &got));
            assert_int_equal(got, peak_committed);
            assert_int_equal(calls(f, DMM_OP_CREATE) - creates, (peak_committed + 8 * C - 1) / (8 * C));
            DMM_OK_OR_FAIL(dmm_pool_warm(f->pool, a, peak_committed, 8 * C, &got)); /* already there */
            assert_int_equal(got, 0);
            DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
        }
        for (int i = 0; i < 6; i++) per[run][i] = one_step(f, a, &peak);
        dmm_pool_stats s = stats(f);
        if (run == 0) peak_committed = (uint64_t)s.committed_bytes.peak;
        else assert_true(s.committed_bytes.peak <= (int64_t)peak_committed + (int64_t)(8 * C)); /* at most one more */
        DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, a));
        fx_close(f);
    }
    for (int run = 0; run < 3; run++)
        print_message("  %s: driver calls per step %llu %llu %llu %llu %llu %llu\n",
                      run == 0   ? "cold"
                      : run == 1 ? "warm start of the cold run's committed peak"
                                 : "the same warm start, fixed limit",
                      (unsigned long long)per[run][0], (unsigned long long)per[run][1],
                      (unsigned long long)per[run][2], (unsigned long long)per[run][3],
                      (unsigned long long)per[run][4], (unsigned long long)per[run][5]);
    assert_true(cold[0] > 16);
    for (int i = 0; i < 6; i++) assert_int_equal(warm[i] + fixed[i], 0);
}

static void a_warm_start_refuses_bad_input_and_commits_only_what_is_missing(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    uint64_t got = 1, made = calls(f, DMM_OP_ANY); /* the pool's VA reservation */
    assert_int_equal(dmm_pool_warm(f->pool, NULL, (uint64_t)1 << 62, 0, &got), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_pool_warm", "more than the pool's VA", "larger va_bytes", NULL);
    assert_int_equal(got, 0);
    assert_int_equal(dmm_pool_warm(f->pool, NULL, 8 * C, (uint64_t)2 << 30, &got), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("handles of 2147483648 bytes", "pass 0 or less", NULL);
    assert_int_equal(dmm_pool_warm(NULL, NULL, 8 * C, 0, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(calls(f, DMM_OP_ANY), made);
    assert_int_equal(stats(f).committed_bytes.current, 0);
    /* a handle below one chunk is one chunk; a target is rounded up to whole chunks */
    DMM_OK_OR_FAIL(dmm_pool_warm(f->pool, NULL, 3 * C - 1, 1, &got));
    assert_int_equal(got, 3 * C);
    assert_int_equal(calls(f, DMM_OP_CREATE), 3);
    /* the memory is free for the stream's mallocs, with no driver call; empty_cache still gives it back */
    uint64_t before = calls(f, DMM_OP_ANY);
    void *x = xmalloc(f, 3 * C, NULL);
    assert_int_equal(calls(f, DMM_OP_ANY), before);
    xfree(f, x, NULL);
    /* with free memory mapped, a higher target commits what is missing in new VA (not the free block) */
    uint64_t creates = calls(f, DMM_OP_CREATE);
    DMM_OK_OR_FAIL(dmm_pool_warm(f->pool, NULL, 7 * C, 2 * C, &got));
    assert_int_equal(got, 4 * C);
    assert_int_equal(calls(f, DMM_OP_CREATE) - creates, 2);
    assert_int_equal(stats(f).committed_bytes.current, 7 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    assert_int_equal(released, 7 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    fx_close(f);
}

/* The same churn with no_alias: the growth cannot reuse fenced chunks, so it creates new memory
 * (what aliases save; this also shows the test above can fail). */
static void without_aliases_pending_fences_make_the_pool_grow(void **state) {
    (void)state;
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.retain_permille = 1;
    pc.no_alias = 1;
    pc.settle_permille = 1; /* a fixed limit */
    fx *f = fx_open(&pc, 0);
    dmm_stream a = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    char *w[4];
    for (int i = 0; i < 4; i++) w[i] = xmalloc(f, 4 * C, a);
    for (int i = 0; i < 4; i++) xfree(f, w[i], a);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true));
    uint64_t creates = calls(f, DMM_OP_CREATE);
    churn(f, a, a, 16, 600, 7);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.chunks_aliased, 0);
    assert_true(calls(f, DMM_OP_CREATE) > creates);
    assert_true(s.physical_bytes.peak > 16 * (int64_t)C);
    print_message("  no aliases: %llu creates, physical peak %lld MiB\n",
                  (unsigned long long)(calls(f, DMM_OP_CREATE) - creates), (long long)s.physical_bytes.peak >> 20);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    poll_until_reaped(f);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    fx_close(f);
}

static void a_failed_alias_grows_instead_and_a_failed_unmap_of_the_old_place_is_retried(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 4 * C);
    dmm_stream a = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    char *x1 = xmalloc(f, C, a), *x2 = xmalloc(f, C, a), *x3 = xmalloc(f, C, a);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true));
    xfree(f, x1, a);
    xfree(f, x3, a);
    /* the alias's map fails: the pool changes nothing there and commits new memory instead */
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_MAP, 1, 1, DMM_ERR_DRIVER));
    uint64_t creates = calls(f, DMM_OP_CREATE);
    char *y = xmalloc(f, 2 * C, a);
    assert_ptr_equal(y, x3);
    assert_int_equal(calls(f, DMM_OP_CREATE), creates + 1);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.chunks_aliased, 0);
    assert_int_equal(s.committed_bytes.current, 4 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    char *z = xmalloc(f, C, a); /* x1's chunk is still free and mapped: no driver call */
    assert_ptr_equal(z, x1);
    xfree(f, z, a);
    xfree(f, y, a);
    /* now an alias works (x1's chunk goes after the free tail at y), but the old place's unmap fails
     * once the fence completed: it stays mapped and out of use, and the next poll tries again */
    char *big = xmalloc(f, 4 * C, a);
    s = stats(f);
    assert_int_equal(s.chunks_aliased, 1);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    int64_t committed = s.committed_bytes.current;
    uint64_t injected = dmm_fault_injected(f->drv), unmaps = calls(f, DMM_OP_UNMAP);
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_UNMAP, 1, 1, DMM_ERR_DRIVER));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    for (int i = 0; i < 4 && dmm_fault_injected(f->drv) == injected; i++)
        DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, NULL)); /* the fence completes: the unmap fails */
    assert_int_equal(dmm_fault_injected(f->drv), injected + 1);
    assert_int_equal(stats(f).committed_bytes.current, committed); /* still mapped at both places */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    poll_until_reaped(f);
    assert_int_equal(calls(f, DMM_OP_UNMAP), unmaps + 2);
    dmm_driver_census c = census(f);
    s = stats(f);
    assert_int_equal(s.chunks_poisoned, 0);
    assert_int_equal(s.committed_bytes.current, committed - (int64_t)C);
    assert_int_equal(c.mapped_bytes, (uint64_t)s.committed_bytes.current);
    memset(big, 3, 4 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, big, a);
    xfree(f, x2, a);
    fx_close(f);
}

/* ---- driver failures ---- */
static void a_failed_commit_fails_the_malloc_and_changes_nothing(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    char *keep = xmalloc(f, 4096, NULL);
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_MAP, 1, 1, DMM_ERR_OUT_OF_MEMORY));
    void *p = NULL;
    dmm_pool_stats before = stats(f);
    dmm_status s = dmm_pool_malloc(f->pool, 8 * MIB, NULL, &p);
    assert_int_equal(s, DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("pool malloc", "8388608", NULL);
    dmm_pool_stats after = stats(f);
    assert_int_equal(after.allocations.current, before.allocations.current);
    assert_int_equal(after.committed_bytes.current, before.committed_bytes.current);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* the plan is spent: the same malloc now works */
    p = xmalloc(f, 8 * MIB, NULL);
    memset(p, 3, 8 * MIB);
    xfree(f, p, NULL);
    xfree(f, keep, NULL);
    fx_close(f);
}

static void a_failed_decommit_keeps_the_chunk_free_and_mapped(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    void *p = xmalloc(f, 2 * C, NULL);
    xfree(f, p, NULL);
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_UNMAP, 1, 1, DMM_ERR_DRIVER));
    uint64_t released = 0;
    assert_int_equal(dmm_pool_trim(f->pool, 0, &released), DMM_ERR_DRIVER);
    dmm_test_error_mentions("dmm_pool_trim", "2097152 bytes were released", "injected", NULL);
    dmm_pool_stats s = stats(f);
    /* the first chunk's unmap failed and the arena changed nothing (FAILED): it stays free and
     * mapped in the pool; the second went */
    assert_int_equal(released, C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    assert_int_equal(s.committed_bytes.current, C);
    assert_int_equal(s.chunks_poisoned, 0);
    DMM_OK_OR_FAIL(dmm_fault_clear(f->drv));
    void *q = xmalloc(f, 2 * C, NULL);
    memset(q, 1, 2 * C);
    xfree(f, q, NULL);
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, NULL));
    fx_close(f);
}

static void a_quarantined_decommit_poisons_the_chunk_forever(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0); /* no handle cache: a decommit releases the handle */
    char *p = xmalloc(f, C, NULL);
    xfree(f, p, NULL);
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_RELEASE, 1, 1, DMM_ERR_DRIVER));
    uint64_t released = 0;
    assert_int_equal(dmm_pool_trim(f->pool, 0, &released), DMM_ERR_DRIVER);
    dmm_test_error_mentions("QUARANTINED", NULL);
    dmm_pool_stats s = stats(f);
    assert_int_equal(released, 0);
    assert_int_equal(s.chunks_poisoned, 1);
    assert_int_equal(s.committed_bytes.current, 0);  /* unmapped */
    assert_int_equal(s.physical_bytes.current, C);   /* the handle stays owned */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    for (int i = 0; i < 8; i++) { /* that VA is never handed out again */
        char *q = xmalloc(f, C, NULL);
        assert_true(q + C <= p || p + C <= q);
        xfree(f, q, NULL);
    }
    fx_close(f);
}

/* ---- stats ---- */
static void stats_are_json_and_the_common_shape(void **state) {
    (void)state;
    fx *f = fx_open(NULL, 0);
    void *p = xmalloc(f, 1000, NULL);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.allocated_bytes.current, 1024);
    assert_int_equal(s.requested_bytes.current, 1000);
    assert_int_equal(s.committed_bytes.current, C);
    assert_int_equal(s.heaps.current, 1);
    char buf[8192];
    size_t need = 0;
    DMM_OK_OR_FAIL(dmm_pool_stats_json(&s, buf, sizeof buf, &need));
    assert_non_null(strstr(buf, "\"committed_bytes\":{\"current\":2097152"));
    assert_non_null(strstr(buf, "\"driver_map\":"));
    assert_int_equal(dmm_pool_stats_json(&s, buf, 8, &need), DMM_ERR_INVALID_ARGUMENT);
    assert_true(need > 8);
    dmm_stats c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    DMM_OK_OR_FAIL(dmm_pool_stats_common(f->pool, &c));
    assert_int_equal(c.allocations.current, 1);
    assert_int_equal(c.committed_bytes.current, C);
    assert_int_equal(c.owned_bytes.current, C);
    dmm_pool_stats small;
    memset(&small, 0, sizeof small);
    small.size = 4;
    assert_int_equal(dmm_pool_stats_get(f->pool, &small), DMM_ERR_SHORT_STRUCT);
    /* a newer caller's struct: this build's stats, its tail zeroed, its size kept */
    struct {
        dmm_pool_stats known;
        uint64_t newer[2];
    } big;
    memset(&big, 0xff, sizeof big);
    big.known.size = (uint32_t)sizeof big;
    DMM_OK_OR_FAIL(dmm_pool_stats_get(f->pool, &big.known));
    assert_int_equal(big.known.size, sizeof big);
    assert_int_equal(big.known.committed_bytes.current, C);
    assert_int_equal(big.newer[0], 0);
    assert_int_equal(big.newer[1], 0);
    /* an older caller's struct (the first version's size): its bytes only, the rest untouched */
    dmm_pool_stats old;
    memset(&old, 0xff, sizeof old);
    old.size = (uint32_t)(offsetof(dmm_pool_stats, allocations) + sizeof(dmm_count));
    DMM_OK_OR_FAIL(dmm_pool_stats_get(f->pool, &old));
    assert_int_equal(old.size, offsetof(dmm_pool_stats, allocations) + sizeof(dmm_count));
    assert_int_equal(old.allocations.current, 1);
    assert_int_equal((uint64_t)old.allocated_bytes.current, UINT64_MAX);
    xfree(f, p, NULL);
    fx_close(f);
}

static void va_exhaustion_is_an_error_and_empty_cache_gives_va_back(void **state) {
    (void)state;
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.va_bytes = 64 * MIB;
    pc.region_bytes = 16 * MIB; /* four regions */
    fx *f = fx_open(&pc, 0);
    void *p = NULL;
    assert_int_equal(dmm_pool_malloc(f->pool, 65 * MIB, NULL, &p), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("va_bytes", NULL);
    dmm_stream s[5];
    void *q[5];
    for (int i = 0; i < 5; i++) DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &s[i]));
    for (int i = 0; i < 4; i++) q[i] = xmalloc(f, MIB, s[i]); /* one region per stream */
    assert_int_equal(dmm_pool_malloc(f->pool, MIB, s[4], &p), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("VA is exhausted", "dmm_pool_empty_cache", NULL);
    for (int i = 0; i < 4; i++) xfree(f, q[i], s[i]);
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, NULL));
    q[4] = xmalloc(f, 40 * MIB, s[4]); /* three regions in a row */
    xfree(f, q[4], s[4]);
    fx_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(create_refuses_what_it_cannot_use),
        cmocka_unit_test(blocks_are_aligned_usable_and_reused_without_driver_calls),
        cmocka_unit_test(a_growth_of_several_handles_grants_access_once),
        cmocka_unit_test(free_blocks_coalesce_and_growth_extends_a_free_block),
        cmocka_unit_test(a_full_retention_limit_moves_chunks_instead_of_growing),
        cmocka_unit_test(moves_of_one_growth_share_one_grant),
        cmocka_unit_test(streams_in_use_do_not_take_each_others_last_chunk),
        cmocka_unit_test(a_larger_max_chunk_grows_by_one_handle_sized_to_the_need),
        cmocka_unit_test(a_divisor_cuts_handles_no_smaller_than_the_floor),
        cmocka_unit_test(a_floor_divisor_raises_the_floor_with_the_live_peak),
        cmocka_unit_test(unknown_and_double_frees_change_nothing),
        cmocka_unit_test(a_free_tells_what_was_requested),
        cmocka_unit_test(a_pool_is_torn_down_after_its_stream_was_destroyed),
        cmocka_unit_test(destroy_is_refused_while_blocks_are_live),
        cmocka_unit_test(trim_decommits_whole_free_chunks_down_to_the_target),
        cmocka_unit_test(the_pool_says_what_it_mapped),
        cmocka_unit_test(a_block_freed_on_another_stream_waits_for_its_event),
        cmocka_unit_test(completed_cross_stream_events_are_recycled),
        cmocka_unit_test(trim_and_moves_leave_a_chunk_mapped_until_its_stream_event_completes),
        cmocka_unit_test(a_stream_reuses_its_fenced_chunks_at_once_through_an_alias),
        cmocka_unit_test(under_pending_fences_a_stream_churns_in_flat_physical_memory_and_other_streams_wait),
        cmocka_unit_test(a_repeating_workload_settles_into_a_layout_without_driver_calls),
        cmocka_unit_test(a_warm_start_commits_the_last_peak_in_large_handles),
        cmocka_unit_test(a_warm_start_refuses_bad_input_and_commits_only_what_is_missing),
        cmocka_unit_test(without_aliases_pending_fences_make_the_pool_grow),
        cmocka_unit_test(a_failed_alias_grows_instead_and_a_failed_unmap_of_the_old_place_is_retried),
        cmocka_unit_test(a_failed_commit_fails_the_malloc_and_changes_nothing),
        cmocka_unit_test(a_failed_decommit_keeps_the_chunk_free_and_mapped),
        cmocka_unit_test(a_quarantined_decommit_poisons_the_chunk_forever),
        cmocka_unit_test(stats_are_json_and_the_common_shape),
        cmocka_unit_test(va_exhaustion_is_an_error_and_empty_cache_gives_va_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
