/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_pool_stock.c — the pool's stock thread (stock_bytes, src/pool/stock.c), over the
 * arena over the host driver (wrapped in the fault driver to count and fail calls).
 *
 * What is proven: after a malloc no larger than the stock grew, the stock thread commits the stock
 * right after the growth's window (the live peak / 128, at most stock_bytes) as one handle, and after a
 * larger one it commits none; the next malloc that fits is served from it with no driver call on its
 * own thread, at the place the growth would have taken (without a stock the same malloc grows); a fit
 * that leaves less than half the stock asks for more, so that mallocs that keep coming never grow on
 * their own thread; the stock never takes the pool above its retention limit; a pool too small for one
 * quantum of stock keeps none; empty_cache gives the stock back and nothing grows it again behind it,
 * also with the thread's request still pending or in flight when it is called; a stock commit that
 * fails leaves the pool as it was (checked, nothing committed, the next malloc grows itself);
 * dmm_pool_stock_sync waits for every request, pending or in flight, and drops none; destroy stops the
 * thread. Each wait for the thread is on its request (dmm__pool_stock_wait), not on time.
 */
#include <stdlib.h>
#include <string.h>

#include "pool/types.h"
#include "testkit.h"

#define MIB ((size_t)1 << 20)

typedef dmm_test_pool_fx fx;
static void fx_close(fx *f) { dmm_test_pool_fx_close(f); }
static dmm_pool_stats stats(fx *f) { return dmm_test_pool_stats(f->pool); }
static void *xmalloc(fx *f, size_t bytes) { return dmm_test_pool_malloc(f->pool, bytes, NULL); }
static void xfree(fx *f, void *p) { dmm_test_pool_free(f->pool, p, NULL); }
static uint64_t calls(fx *f, dmm_driver_op op) { return dmm_fault_calls(f->drv, op); }

/* The torch adapter's handles (≤ 32 MiB, ≤ 1/8 of the request, ≥ 8 MiB) with a stock of `stock` bytes,
 * and a retention limit of `retain` per mille (0: the default), fixed when given. */
static fx *fx_open_stock_retain(uint64_t stock, uint32_t retain) {
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.max_chunk_bytes = 32 * MIB;
    pc.handle_divisor = 8;
    pc.min_chunk_bytes = 8 * MIB;
    pc.stock_bytes = stock;
    pc.retain_permille = retain;
    pc.settle_permille = retain;
    return dmm_test_pool_fx_open(&pc, 0);
}
static fx *fx_open_stock(uint64_t stock) { return fx_open_stock_retain(stock, 0); }

/* Until the stock thread has done the request of the default stream's heap (the only heap here). */
static void stock_done(fx *f) { dmm__pool_stock_wait(f->pool, heaps_head(f->pool)); }

/* 960 MiB live in a run of 1 GiB (8 regions of 128 MiB): the window ends 64 MiB before the run's end.
 * BIG's growth posts no stock (it is larger than one); SMALL's, right after it, does: the live peak /
 * 128 = 7.5 MiB, rounded down to 6 MiB (3 quanta). */
#define BIG (960 * MIB)
#define SMALL (2 * MIB)
#define STOCK (6 * MIB)

/* BIG, then SMALL right after it, until the stock thread has done SMALL's request: what a growing
 * workload leaves, BIG + SMALL (+ STOCK with a stock) committed. Returns BIG's block. */
static char *grow_big_then_small(fx *f, char **small) {
    char *big = xmalloc(f, BIG);
    *small = xmalloc(f, SMALL);
    assert_ptr_equal(*small, big + BIG);
    stock_done(f);
    return big;
}

static void a_growing_pool_finds_its_next_mallocs_in_the_stock(void **state) {
    (void)state;
    for (int with = 0; with < 2; with++) {
        fx *f = fx_open_stock(with ? 64 * MIB : 0);
        char *big = xmalloc(f, BIG);
        stock_done(f);
        dmm_pool_stats s = stats(f);
        assert_int_equal(s.stock_grows, 0); /* the VA after a large request is left for the next of its kind */
        assert_int_equal(s.committed_bytes.current, BIG);
        char *small = xmalloc(f, SMALL);
        assert_ptr_equal(small, big + BIG);
        stock_done(f);
        s = stats(f);
        assert_int_equal(s.committed_bytes.current, BIG + SMALL + (with ? STOCK : 0));
        assert_int_equal(s.stock_grows, with ? 1 : 0);
        assert_int_equal(s.grows, 2); /* the stock's growth is not a malloc's */
        assert_int_equal(calls(f, DMM_OP_CREATE), 31 + (with ? 1 : 0)); /* 32 MiB handles, and the stock in one */
        if (with) assert_true(s.stock_ns > 0);
        uint64_t before = calls(f, DMM_OP_ANY), slow = s.slow_path_ns;
        char *next = xmalloc(f, 2 * MIB); /* leaves 4 of the stock's 6 MiB: more than half, no refill */
        assert_ptr_equal(next, small + SMALL); /* where the growth would have put it */
        memset(next, 7, 2 * MIB);              /* real memory */
        s = stats(f);
        if (with) {
            assert_int_equal(calls(f, DMM_OP_ANY), before); /* no driver call on this thread */
            assert_int_equal(s.slow_path_ns, slow);         /* nor a slow path */
        } else {
            assert_true(calls(f, DMM_OP_CREATE) > 0 && calls(f, DMM_OP_ANY) > before);
        }
        stock_done(f);
        DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
        xfree(f, next);
        xfree(f, small);
        xfree(f, big);
        fx_close(f); /* destroy stops the thread */
    }
}

static void a_stock_running_low_is_refilled_before_a_malloc_must_grow(void **state) {
    (void)state;
    fx *f = fx_open_stock(64 * MIB);
    char *small, *big = grow_big_then_small(f, &small);
    char *next[8];
    for (int i = 0; i < 8; i++) { /* 32 MiB in all, five stocks of 6 MiB; each fit leaves 2 MiB of it */
        uint64_t slow = stats(f).slow_path_ns;
        next[i] = xmalloc(f, 4 * MIB);
        assert_ptr_equal(next[i], small + SMALL + (size_t)i * 4 * MIB); /* still where growth would put it */
        memset(next[i], i, 4 * MIB);
        dmm_pool_stats s = stats(f);
        assert_int_equal(s.grows, 2);              /* only BIG and SMALL grew on this thread */
        assert_int_equal(s.slow_path_ns, slow);    /* every later one was a fit */
        stock_done(f);                             /* the refill the fit asked for, if any */
    }
    dmm_pool_stats s = stats(f);
    assert_true(s.stock_grows >= 3); /* the first stock, and at least two refills */
    /* the stock is full again, no more: 6 MiB free right after the last malloc */
    assert_int_equal(s.committed_bytes.current, BIG + SMALL + 32 * MIB + STOCK);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    for (int i = 0; i < 8; i++) xfree(f, next[i]);
    xfree(f, small);
    xfree(f, big);
    fx_close(f);
}

static void the_stock_stays_inside_the_retention_limit(void **state) {
    (void)state;
    fx *f = fx_open_stock_retain(64 * MIB, 1); /* limit: the live peak + 0.1 % + the stock */
    char *small, *big = grow_big_then_small(f, &small);
    assert_int_equal(stats(f).committed_bytes.current, BIG + SMALL + STOCK); /* the limit, to the quantum */
    uint64_t stocks = stats(f).stock_grows;
    xfree(f, big); /* 960 MiB free: the pool has stopped growing */
    char *c = xmalloc(f, 4 * MIB); /* best fit: the stock, leaving 2 MiB of it (less than half) */
    assert_ptr_equal(c, small + SMALL);
    stock_done(f);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.stock_grows, stocks); /* a refill would take the pool above its limit */
    assert_int_equal(s.committed_bytes.current, BIG + SMALL + STOCK);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, c);
    xfree(f, small);
    fx_close(f);
}

static void a_small_pool_keeps_no_stock(void **state) {
    (void)state;
    fx *f = fx_open_stock((uint64_t)1 << 30);
    char *p = xmalloc(f, 100 * MIB); /* 100 MiB / 128 is less than one 2 MiB quantum */
    stock_done(f);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.stock_grows, 0);
    assert_int_equal(s.committed_bytes.current, 100 * MIB);
    xfree(f, p);
    fx_close(f);
}

static void empty_cache_gives_the_stock_back_for_good(void **state) {
    (void)state;
    fx *f = fx_open_stock(64 * MIB);
    char *small, *big = grow_big_then_small(f, &small);
    assert_int_equal(stats(f).committed_bytes.current, BIG + SMALL + STOCK);
    xfree(f, small);
    xfree(f, big);
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    assert_int_equal(released, BIG + SMALL + STOCK);
    stock_done(f);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.committed_bytes.current, 0);
    assert_int_equal(s.stock_grows, 1);
    /* the same with the request still pending or in flight: empty_cache drops it or waits for it, so
     * nothing is committed behind it (without that wait this fails whenever the thread comes late) */
    for (int round = 0; round < 20; round++) {
        big = xmalloc(f, BIG);
        small = xmalloc(f, SMALL);
        xfree(f, small);
        xfree(f, big);
        DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, NULL));
        stock_done(f);
        assert_int_equal(stats(f).committed_bytes.current, 0);
    }
    fx_close(f);
}

static void a_failed_stock_commit_changes_nothing(void **state) {
    (void)state;
    fx *f = fx_open_stock(64 * MIB);
    /* BIG creates 30 handles of 32 MiB, SMALL one; the stock thread's first create fails */
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_CREATE, 32, 1, DMM_ERR_OUT_OF_MEMORY));
    char *small, *big = grow_big_then_small(f, &small);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.stock_grows, 0);
    assert_int_equal(s.committed_bytes.current, BIG + SMALL);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* the malloc's thread saw nothing of it; its next malloc grows itself, where the stock would be */
    char *next = xmalloc(f, 4 * MIB);
    assert_ptr_equal(next, small + SMALL);
    memset(next, 9, 4 * MIB);
    stock_done(f);
    xfree(f, next);
    xfree(f, small);
    xfree(f, big);
    fx_close(f);
}

static void stock_sync_waits_for_every_request(void **state) {
    (void)state;
    assert_int_equal(dmm_pool_stock_sync(NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_pool_stock_sync", "NULL", NULL);
    fx *f = fx_open_stock(0);
    DMM_OK_OR_FAIL(dmm_pool_stock_sync(f->pool)); /* no stock: nothing to wait for */
    fx_close(f);
    /* each round's request is still pending or in flight when sync is called: it waits for it, and
     * drops nothing (as a trim would) */
    f = fx_open_stock(64 * MIB);
    for (int round = 0; round < 20; round++) {
        char *big = xmalloc(f, BIG), *small = xmalloc(f, SMALL);
        DMM_OK_OR_FAIL(dmm_pool_stock_sync(f->pool));
        dmm_pool_stats s = stats(f);
        assert_int_equal(s.committed_bytes.current, BIG + SMALL + STOCK);
        assert_int_equal(s.stock_grows, (uint64_t)round + 1);
        xfree(f, small);
        xfree(f, big);
        DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, NULL));
    }
    fx_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_growing_pool_finds_its_next_mallocs_in_the_stock),
        cmocka_unit_test(a_stock_running_low_is_refilled_before_a_malloc_must_grow),
        cmocka_unit_test(the_stock_stays_inside_the_retention_limit),
        cmocka_unit_test(a_small_pool_keeps_no_stock),
        cmocka_unit_test(empty_cache_gives_the_stock_back_for_good),
        cmocka_unit_test(a_failed_stock_commit_changes_nothing),
        cmocka_unit_test(stock_sync_waits_for_every_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
