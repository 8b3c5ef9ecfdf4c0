/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_pool_plan.c — a heap that plans its loop (src/pool/follow.c, dmm_pool_config.plan_loops),
 * over the arena over the host driver (wrapped in the fault driver to count calls).
 *
 * What is proven: a loop whose turns repeat (an activation stack built and torn down, temporaries,
 * one block carried into the next turn) and that keeps re-mapping under a fixed retention limit gets a
 * plan, most of its mallocs go where the plan put them, and its later turns map nothing (without a
 * plan they re-map every turn); no
 * block is parked while a plan is followed; every live block keeps what was written into it (no two
 * overlap) and the pool's check passes after every turn; a loop that changes its sizes drops the plan
 * and stays correct; with plan_loops off nothing is recorded and nothing planned; a pool destroyed while
 * its planner is at work leaves nothing behind; a loop longer than half the first ring of records is
 * found once the ring widens; a heap records only while it grows (it stops once a whole ring went by
 * without a growth; a growth starts it again), and while it records and follows no plan it parks on its
 * quick lists, off the hot path, recording those frees and repeats; dmm_pool_plan_sync refuses no pool with a sentence; a
 * malloc's record says freed only once its own block's free is final.
 * Every test ends with nothing live.
 */
#include <stdlib.h>
#include <string.h>

#include "pool/types.h"
#include "testkit.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define C (2 * MIB)

typedef dmm_test_pool_fx fx;
/* The calls that map memory: what growth and moves cost (fences' event calls left out). */
static uint64_t calls(fx *f) {
    return dmm_fault_calls(f->drv, DMM_OP_CREATE) + dmm_fault_calls(f->drv, DMM_OP_MAP) +
           dmm_fault_calls(f->drv, DMM_OP_SET_ACCESS) + dmm_fault_calls(f->drv, DMM_OP_UNMAP) +
           dmm_fault_calls(f->drv, DMM_OP_RELEASE);
}

static pool_heap *heap_of(fx *f) {
    for (pool_heap *h = heaps_head(f->pool); h != NULL; h = heap_next(h))
        if (h->stream == NULL) return h;
    fail_msg("%s", "no heap for the default stream");
    return NULL;
}

typedef struct live_block {
    unsigned char *p;
    size_t bytes;
    unsigned char mark;
} live_block;

static unsigned char next_mark = 1;

static live_block take(fx *f, size_t bytes) {
    live_block b = {dmm_test_pool_malloc(f->pool, bytes, NULL), bytes, next_mark++};
    memset(b.p, b.mark, 64);
    memset(b.p + bytes - 64, b.mark, 64);
    return b;
}

static void give(fx *f, live_block *b) {
    for (size_t i = 0; i < 64; i++) {
        if (b->p[i] != b->mark || b->p[b->bytes - 64 + i] != b->mark)
            fail_msg("the block at %p (%zu bytes) was overwritten: two live blocks overlapped", (void *)b->p, b->bytes);
    }
    dmm_test_pool_free(f->pool, b->p, NULL);
    b->p = NULL;
}

/* One turn of a training-like loop: a stack of activations of `scale`-dependent sizes built and torn
 * down in reverse, a temporary beside each, and a block carried into the next turn (*carry). */
static void turn(fx *f, size_t scale, live_block *carry) {
    static const size_t sizes[] = {3, 7, 2, 5, 11, 1, 6, 9, 4, 8};
    enum { N = sizeof sizes / sizeof sizes[0] };
    live_block act[N];
    for (int i = 0; i < N; i++) {
        act[i] = take(f, sizes[i] * scale + 512);
        live_block tmp = take(f, sizes[(i + 3) % N] * scale / 2 + 4 * KIB);
        give(f, &tmp);
    }
    if (carry->p != NULL) give(f, carry); /* last turn's, freed early in this one */
    for (int i = N - 1; i >= 0; i--) {
        live_block tmp = take(f, sizes[(i + 5) % N] * scale / 3 + 8 * KIB);
        give(f, &act[i]);
        give(f, &tmp);
    }
    *carry = take(f, 3 * scale);
}

static dmm_pool_config loop_config(bool plan) {
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.retain_permille = 20;
    pc.settle_permille = 20; /* a fixed limit: without a plan this loop re-maps every turn */
    pc.plan_loops = plan ? 1u : 0u;
    return pc;
}

/* Runs the loop 100 turns (checking the pool after each) and returns the driver calls of the last ten. */
static uint64_t last_ten_turns(bool plan, dmm_pool_stats *out, bool *followed) {
    dmm_pool_config pc = loop_config(plan);
    fx *f = dmm_test_pool_fx_open(&pc, 64 * C);
    live_block carry = {0};
    uint64_t before = 0;
    for (int t = 0; t < 100; t++) {
        if (t == 90) before = calls(f);
        turn(f, 3 * MIB, &carry);
        assert_int_equal(dmm_pool_plan_sync(f->pool), DMM_OK); /* a plan, once made, followed from the next turn */
        pool_heap *h = heap_of(f);
        if (h->follow != NULL) assert_int_equal(h->nquick, 0); /* nothing parks while a plan is followed */
        assert_int_equal(dmm_pool_check(f->pool), DMM_OK);
    }
    uint64_t n = calls(f) - before;
    *out = dmm_test_pool_stats(f->pool);
    *followed = heap_of(f)->follow != NULL;
    if (!plan) assert_null(heap_of(f)->records); /* nothing recorded */
    give(f, &carry);
    dmm_test_pool_fx_close(f);
    return n;
}

static void a_repeating_loop_is_planned_and_then_maps_nothing(void **state) {
    (void)state;
    dmm_pool_stats with, without;
    bool followed = false, followed_without = false;
    uint64_t planned = last_ten_turns(true, &with, &followed);
    uint64_t unplanned = last_ten_turns(false, &without, &followed_without);
    print_message("driver calls of the last ten turns: %llu with a plan, %llu without\n", (unsigned long long)planned,
                  (unsigned long long)unplanned);
    assert_true(with.plans >= 1);
    assert_true(with.planned_mallocs > with.mallocs / 2);
    assert_true(followed);
    assert_int_equal(without.plans, 0);
    assert_int_equal(without.planned_mallocs, 0);
    assert_false(followed_without);
    assert_true(unplanned > 0);
    assert_int_equal(planned, 0);
}

/* A loop of more mallocs than half the first ring (a generate round of varying batches): the training
 * turn above, then 70,000 small temporaries in a fixed pseudo-random order of sizes (no shorter period).
 * The first ring cannot hold two turns: the heap, still re-mapping, widens it at a look that finds
 * nothing to plan, finds the loop, plans it, and its last turns map nothing. */
static void a_loop_longer_than_half_the_first_ring_is_planned_once_the_ring_widens(void **state) {
    (void)state;
    dmm_pool_config pc = loop_config(true);
    fx *f = dmm_test_pool_fx_open(&pc, 64 * C);
    live_block carry = {0};
    uint64_t before = 0;
    const int turns = 10;
    for (int t = 0; t < turns; t++) {
        if (t == turns - 3) before = calls(f);
        turn(f, 3 * MIB, &carry);
        uint32_t x = 12345; /* the same order every turn */
        for (int k = 0; k < 70000; k++) {
            x = x * 1103515245u + 12345u;
            live_block tmp = take(f, 512 * (1 + (x >> 16) % 64));
            give(f, &tmp);
        }
        assert_int_equal(dmm_pool_plan_sync(f->pool), DMM_OK);
        assert_int_equal(dmm_pool_check(f->pool), DMM_OK);
    }
    pool_heap *h = heap_of(f);
    assert_int_equal(h->nrecords, POOL_RECORDS_MOST);
    assert_non_null(h->follow);
    assert_true(h->follow->period > POOL_RECORDS_FIRST / 2);
    assert_int_equal(calls(f) - before, 0);
    give(f, &carry);
    dmm_test_pool_fx_close(f);
}

static void a_loop_that_changes_drops_its_plan_and_stays_correct(void **state) {
    (void)state;
    dmm_pool_config pc = loop_config(true);
    fx *f = dmm_test_pool_fx_open(&pc, 64 * C);
    live_block carry = {0};
    bool planned = false, dropped = false;
    for (int t = 0; t < 160; t++) {
        bool had = t > 0 && heap_of(f)->follow != NULL;
        turn(f, t < 80 ? 3 * MIB : 2 * MIB + 512 * KIB, &carry);
        assert_int_equal(dmm_pool_plan_sync(f->pool), DMM_OK);
        bool has = heap_of(f)->follow != NULL;
        planned |= has;
        dropped |= had && t >= 80 && (!has || heap_of(f)->plans > 1);
        assert_int_equal(dmm_pool_check(f->pool), DMM_OK);
    }
    assert_true(planned);
    assert_true(dropped);
    give(f, &carry);
    dmm_test_pool_fx_close(f);
}

/* A heap of a pool that plans records only while it grows: once a whole ring of mallocs went by without
 * a growth (and no plan is followed), it stops, and takes the hot path again; when it grows again it
 * records again, its parked blocks merged first. While it records and follows no plan it parks on its
 * quick lists (never as the hot block, whose path does not record), and records those frees and the
 * repeats that take them back. */
static void a_heap_records_while_it_grows_and_parks_off_the_hot_path(void **state) {
    (void)state;
    dmm_pool_config pc = loop_config(true);
    fx *f = dmm_test_pool_fx_open(&pc, 64 * C);
    live_block keep = take(f, 64 * KIB); /* the heap's first growth */
    pool_heap *h = heap_of(f);
    assert_non_null(h->records);
    assert_int_equal(h->quick_cap, 0); /* off the hot path */
    {
        void *q = dmm_test_pool_malloc(f->pool, 64 * KIB, NULL);
        const uint64_t ord = h->mallocs - 1;
        const precord *r = &h->records[ord & (h->nrecords - 1)];
        dmm_test_pool_free(f->pool, q, NULL);
        assert_int_equal(h->nquick, 1); /* parked on its list */
        assert_true(h->hot == NULL || h->hot->kind != BK_QUICK);
        assert_int_not_equal(r->life, 0); /* its free recorded */
        void *again = dmm_test_pool_malloc(f->pool, 64 * KIB, NULL); /* the repeat takes it back: recorded */
        assert_ptr_equal(again, q);
        assert_int_equal(h->nquick, 0);
        const precord *r2 = &h->records[(ord + 1) & (h->nrecords - 1)];
        assert_int_equal((uint64_t)r2->units << h->align_shift, 64 * KIB);
        assert_int_equal(r2->life, 0);
        dmm_test_pool_free(f->pool, again, NULL);
        assert_int_not_equal(r2->life, 0);
        assert_int_equal(dmm_pool_check(f->pool), DMM_OK);
    }
    /* exact repeats, served from mapped memory: the first full ring finds nothing worth a plan (no turn
     * grew) and widens; a whole widened ring later, with no growth, the heap stops recording */
    uint64_t n = 0;
    while (h->records != NULL && n < 2 * (uint64_t)POOL_RECORDS_MOST) {
        void *p = dmm_test_pool_malloc(f->pool, 64 * KIB, NULL);
        dmm_test_pool_free(f->pool, p, NULL);
        n++;
    }
    print_message("the heap stopped recording after %llu mallocs without a growth\n", (unsigned long long)n);
    assert_null(h->records);
    assert_true(n <= POOL_RECORDS_MOST + POOL_RECORDS_FIRST + 2 * (POOL_RECORDS_MOST / 128));
    assert_int_equal(h->quick_cap, POOL_QUICK_MAX_BLOCKS);
    assert_int_equal(h->next_look, UINT64_MAX);
    void *p = dmm_test_pool_malloc(f->pool, 64 * KIB, NULL);
    dmm_test_pool_free(f->pool, p, NULL);
    assert_int_equal(h->nquick, 1); /* its free parks again */
    assert_int_equal(dmm_pool_check(f->pool), DMM_OK);
    live_block big = take(f, 40 * MIB); /* a growth: it records again, nothing parked */
    assert_non_null(h->records);
    assert_int_equal(h->quick_cap, 0);
    assert_int_equal(h->nquick, 0);
    assert_true(h->records_from <= h->mallocs && h->mallocs - h->records_from <= 1);
    assert_int_equal(dmm_pool_check(f->pool), DMM_OK);
    give(f, &big);
    give(f, &keep);
    dmm_test_pool_fx_close(f);
}

/* A job of n items over heap h, each alive over the whole turn (so that they stack: real placement
 * work), posted to the planner (dmm__planner_post takes it). */
static void post_job(fx *f, pool_heap *h, size_t n) {
    pplan_job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    j->items = calloc(n, sizeof *j->items);
    j->slot_of = calloc(n, sizeof *j->slot_of);
    j->slots = calloc(n, sizeof *j->slots);
    assert_true(j->items != NULL && j->slot_of != NULL && j->slots != NULL);
    for (size_t i = 0; i < n; i++) {
        j->items[i] = (dmm_place_item){.size = 4096 * (i % 7 + 1), .start = (uint32_t)i, .end = (uint32_t)(n + i)};
        j->slot_of[i] = (uint32_t)i;
        j->slots[i] = (pslot){j->items[i].size, UINT64_MAX, 0};
    }
    j->nitems = j->planned = n;
    j->h = h;
    j->serial = h->plan_serial + 1; /* stale: its plan is dropped at the install */
    j->period = n;
    j->horizon = (uint32_t)(2 * n);
    j->base = h->runs[0].lo;
    j->ceiling = UINT64_MAX;
    j->chunk = C;
    assert_true(dmm__planner_post(f->pool, j));
}

static void a_pool_destroyed_while_its_planner_is_at_work_leaves_nothing(void **state) {
    (void)state;
    dmm_pool_config pc = loop_config(true);
    fx *f = dmm_test_pool_fx_open(&pc, 4 * C);
    live_block b = take(f, 64 * KIB); /* the heap */
    pool_heap *h = heap_of(f);
    post_job(f, h, 20000); /* in flight while the next ones wait */
    post_job(f, h, 10);
    post_job(f, h, 10);
    give(f, &b);
    dmm_test_pool_fx_close(f); /* stops the planner (its job in flight finishes), frees the queued ones */
}

static void plan_sync_refuses_no_pool_and_returns_at_once_without_plans(void **state) {
    (void)state;
    assert_int_equal(dmm_pool_plan_sync(NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dmm_last_error(), "dmm_pool_plan_sync: the pool is NULL"));
    dmm_pool_config pc = loop_config(false);
    fx *f = dmm_test_pool_fx_open(&pc, 4 * C);
    assert_int_equal(dmm_pool_plan_sync(f->pool), DMM_OK);
    dmm_test_pool_fx_close(f);
}

/* The record of a malloc says it was freed only once its free is final: a cross-stream free whose
 * event cannot be recorded leaves the block live, and its record live too; a block that stays live
 * while the ring wraps many times over (here: across 2^32 mallocs) writes no other malloc's record. */
static void a_record_says_freed_only_when_its_own_block_was(void **state) {
    (void)state;
    dmm_pool_config pc = loop_config(true);
    fx *f = dmm_test_pool_fx_open(&pc, 64 * C);
    dmm_stream side = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &side));
    void *a = dmm_test_pool_malloc(f->pool, 4 * KIB, NULL);
    pool_heap *h = heap_of(f);
    assert_non_null(h->records);
    const precord *r = &h->records[(h->mallocs - 1) & (h->nrecords - 1)];
    assert_int_equal(r->life, 0);
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_EVENT_RECORD, 1, 1, DMM_ERR_DRIVER));
    assert_int_not_equal(dmm_pool_free(f->pool, a, side), DMM_OK); /* the block stays live */
    dmm_fault_clear(f->drv);
    assert_int_equal(r->life, 0);
    dmm_test_pool_free(f->pool, a, NULL);
    assert_int_not_equal(r->life, 0);

    void *old = dmm_test_pool_malloc(f->pool, 4 * KIB, NULL);
    heap_lock(h);
    h->mallocs += ((uint64_t)1 << 32) - 5; /* as if 2^32 - 5 mallocs and frees had happened since */
    h->next_look = UINT64_MAX;
    heap_unlock(h);
    void *recent[10];
    uint32_t life[10];
    for (int i = 0; i < 10; i++) recent[i] = dmm_test_pool_malloc(f->pool, 8 * KIB, NULL);
    for (int i = 0; i < 10; i++) life[i] = h->records[(h->mallocs - 10 + (uint64_t)i) & (h->nrecords - 1)].life;
    dmm_test_pool_free(f->pool, old, NULL);
    for (int i = 0; i < 10; i++)
        assert_int_equal(h->records[(h->mallocs - 10 + (uint64_t)i) & (h->nrecords - 1)].life, life[i]);
    for (int i = 0; i < 10; i++) dmm_test_pool_free(f->pool, recent[i], NULL);
    f->drv->ops->stream_destroy(f->drv, side);
    dmm_test_pool_fx_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_repeating_loop_is_planned_and_then_maps_nothing),
        cmocka_unit_test(a_loop_longer_than_half_the_first_ring_is_planned_once_the_ring_widens),
        cmocka_unit_test(a_loop_that_changes_drops_its_plan_and_stays_correct),
        cmocka_unit_test(a_heap_records_while_it_grows_and_parks_off_the_hot_path),
        cmocka_unit_test(a_pool_destroyed_while_its_planner_is_at_work_leaves_nothing),
        cmocka_unit_test(plan_sync_refuses_no_pool_and_returns_at_once_without_plans),
        cmocka_unit_test(a_record_says_freed_only_when_its_own_block_was),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
