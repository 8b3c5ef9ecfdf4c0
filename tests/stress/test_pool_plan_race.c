/* SPDX-License-Identifier: Apache-2.0 */
/* tests/stress/test_pool_plan_race.c — heaps that plan their loops (dmm_pool_config.plan_loops) beside
 * threads that disturb them, over the fault driver over the real host driver.
 *
 * Two threads run a training-like loop each on its own stream (an activation stack built and torn
 * down, temporaries, a block carried into the next turn; every block stamped with a pattern unique to
 * it and verified right before its free), so that each heap finds its period and the planner thread
 * plans it while the loops go on (they go on until a plan has placed something). Every few turns a loop frees one of its blocks on the other stream
 * (a cross-stream free, its reuse behind an event); once a plan is followed, a third thread trims the
 * pool, empties its cache, reads its stats and waits for the planner at random, while the events are
 * held and released at random (fences pending for stretches, as on a GPU). A block handed out twice, or a chunk moved or
 * unmapped under a live block, breaks a pattern. At the end: a plan was made and followed, every
 * block is freed, the invariant check passes, and the driver's counts are back to zero. Run under
 * TSan and ASan by `make test`. Seed: DMM_STRESS_SEED (default 42).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomics.h"
#include "testkit.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define TURNS 160
#define LOOPS 2

typedef struct shared {
    dmm_driver *host, *drv;
    dmm_mechanism *arena;
    dmm_pool *pool;
    dmm_stream streams[LOOPS];
    uint64_t seed;
    _Atomic int loops_running;
    _Atomic uint64_t errors;
} shared;

typedef struct block {
    uint64_t *p;
    size_t bytes;
    uint64_t tag;
} block;

typedef struct loop_arg {
    shared *sh;
    int id;
    uint64_t next_tag;
    pthread_t th;
} loop_arg;

static uint64_t rnd(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void fail_once(shared *sh, const char *what, int id) {
    fprintf(stderr, "loop %d: %s: %s\n", id, what, dmm_last_error());
    dmm_atomic_add_seq_cst(&sh->errors, 1);
}

/* the first and last 64 words and one word per 64 KiB carry the pattern */
static void stamp(block *b) {
    size_t words = b->bytes / 8;
    for (size_t i = 0; i < words; i = i + 1 < 64 || i + 64 >= words ? i + 1 : i + 8 * KIB)
        b->p[i] = b->tag ^ i;
}

static bool intact(const block *b) {
    size_t words = b->bytes / 8;
    for (size_t i = 0; i < words; i = i + 1 < 64 || i + 64 >= words ? i + 1 : i + 8 * KIB)
        if (b->p[i] != (b->tag ^ i)) return false;
    return true;
}

static block take(loop_arg *a, size_t bytes) {
    block b = {NULL, bytes, ((uint64_t)a->id << 56) | ++a->next_tag};
    if (dmm_pool_malloc(a->sh->pool, bytes, a->sh->streams[a->id], (void **)&b.p) != DMM_OK) {
        fail_once(a->sh, "malloc", a->id);
        b.p = NULL;
        return b;
    }
    stamp(&b);
    return b;
}

static void give(loop_arg *a, block *b, dmm_stream on) {
    if (b->p == NULL) return;
    if (!intact(b)) {
        fprintf(stderr, "loop %d: the block at %p (%zu bytes) lost its pattern\n", a->id, (void *)b->p, b->bytes);
        dmm_atomic_add_seq_cst(&a->sh->errors, 1);
    }
    if (dmm_pool_free(a->sh->pool, b->p, on) != DMM_OK) fail_once(a->sh, "free", a->id);
    b->p = NULL;
}

static void *loop_main(void *arg) {
    loop_arg *a = arg;
    static const size_t sizes[] = {3, 7, 2, 5, 11, 1, 6, 9, 4, 8};
    enum { N = sizeof sizes / sizeof sizes[0] };
    const size_t scale = (size_t)(a->id + 1) * 512 * KIB;
    dmm_stream other = a->sh->streams[(a->id + 1) % LOOPS];
    block carry = {0};
    /* TURNS turns, and on (up to 8 × as many) until a plan has placed something: the planner thread
     * is slow under a sanitizer, and a plan installed while the loops run is what this test is about */
    for (int t = 0; t < TURNS || (t < 8 * TURNS && dmm_test_pool_stats(a->sh->pool).planned_mallocs == 0); t++) {
        block act[N];
        for (int i = 0; i < N; i++) {
            act[i] = take(a, sizes[i] * scale + 512);
            block tmp = take(a, sizes[(i + 3) % N] * scale / 2 + 4 * KIB);
            give(a, &tmp, a->sh->streams[a->id]);
        }
        give(a, &carry, t % 7 == 3 ? other : a->sh->streams[a->id]); /* now and then on the other stream */
        for (int i = N - 1; i >= 0; i--) {
            block tmp = take(a, sizes[(i + 5) % N] * scale / 3 + 8 * KIB);
            give(a, &act[i], a->sh->streams[a->id]);
            give(a, &tmp, a->sh->streams[a->id]);
        }
        carry = take(a, 3 * scale);
        /* until a plan is made, each turn gives its free memory back: the next one grows again, and a
         * loop that grows is what gets planned (the two heaps share one retention limit, and at times
         * both settle into turns served from mapped memory, which need no plan) */
        if (dmm_test_pool_stats(a->sh->pool).plans == 0 && dmm_pool_trim(a->sh->pool, 0, NULL) != DMM_OK)
            fail_once(a->sh, "trim", a->id);
    }
    give(a, &carry, a->sh->streams[a->id]);
    dmm_atomic_sub_seq_cst(&a->sh->loops_running, 1);
    return NULL;
}

static void *disturb_main(void *arg) {
    shared *sh = arg;
    uint64_t x = sh->seed * 0x9E3779B97F4A7C15ull + 1;
    /* first the loops are left alone until a plan is followed (fences held at random, and trims, can
     * keep a heap from finding a plan within its ceiling at all), then the disturbance races with it */
    while (dmm_atomic_load_seq_cst(&sh->loops_running) > 0 && dmm_test_pool_stats(sh->pool).planned_mallocs == 0) {
        struct timespec nap = {0, 200 * 1000};
        nanosleep(&nap, NULL);
    }
    while (dmm_atomic_load_seq_cst(&sh->loops_running) > 0) {
        uint64_t r = rnd(&x) % 100;
        dmm_status s = DMM_OK;
        if (r < 20) s = dmm_pool_trim(sh->pool, (rnd(&x) % 64) * MIB, NULL);
        else if (r < 22) s = dmm_pool_empty_cache(sh->pool, NULL);
        else if (r < 40) s = dmm_fault_hold_events(sh->drv, rnd(&x) % 4 != 0);
        else if (r < 50) s = dmm_pool_plan_sync(sh->pool);
        else {
            dmm_pool_stats st;
            memset(&st, 0, sizeof st);
            st.size = sizeof st;
            s = dmm_pool_stats_get(sh->pool, &st);
        }
        if (s != DMM_OK) {
            fprintf(stderr, "disturber: %s\n", dmm_last_error());
            dmm_atomic_add_seq_cst(&sh->errors, 1);
        }
        struct timespec nap = {0, 200 * 1000};
        nanosleep(&nap, NULL);
    }
    if (dmm_fault_hold_events(sh->drv, false) != DMM_OK) dmm_atomic_add_seq_cst(&sh->errors, 1);
    return NULL;
}

static void two_loops_plan_while_trims_and_cross_stream_frees_go_on(void **state) {
    (void)state;
    shared sh;
    memset(&sh, 0, sizeof sh);
    const char *seed = getenv("DMM_STRESS_SEED");
    sh.seed = seed != NULL ? strtoull(seed, NULL, 10) : 42;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &sh.host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(sh.host, &sh.drv));
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = (uint64_t)64 << 30;
    ac.cache_limit_bytes = 8 * MIB;
    DMM_OK_OR_FAIL(dmm_arena_create(sh.drv, &ac, &sh.arena));
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.retain_permille = 20;
    pc.settle_permille = 20; /* a fixed limit: without a plan the loops re-map every turn */
    pc.plan_loops = 1;
    DMM_OK_OR_FAIL(dmm_pool_create(sh.arena, sh.drv, &pc, &sh.pool));
    sh.streams[0] = NULL;
    for (int i = 1; i < LOOPS; i++) DMM_OK_OR_FAIL(sh.drv->ops->stream_create(sh.drv, &sh.streams[i]));
    loop_arg args[LOOPS];
    sh.loops_running = LOOPS;
    for (int i = 0; i < LOOPS; i++) {
        args[i] = (loop_arg){&sh, i, 0, 0};
        assert_int_equal(pthread_create(&args[i].th, NULL, loop_main, &args[i]), 0);
    }
    pthread_t disturber;
    assert_int_equal(pthread_create(&disturber, NULL, disturb_main, &sh), 0);
    for (int i = 0; i < LOOPS; i++) pthread_join(args[i].th, NULL);
    pthread_join(disturber, NULL);
    assert_int_equal(dmm_atomic_load_seq_cst(&sh.errors), 0);
    DMM_OK_OR_FAIL(dmm_pool_plan_sync(sh.pool));
    DMM_OK_OR_FAIL(dmm_pool_check(sh.pool));
    dmm_pool_stats st = dmm_test_pool_stats(sh.pool);
    print_message("plans %llu, planned mallocs %llu of %llu, misses %llu\n", (unsigned long long)st.plans,
                  (unsigned long long)st.planned_mallocs, (unsigned long long)st.mallocs,
                  (unsigned long long)st.plan_misses);
    assert_true(st.plans >= 1);
    assert_true(st.planned_mallocs > 0);
    assert_int_equal(st.allocations.current, 0);
    DMM_OK_OR_FAIL(dmm_pool_destroy(sh.pool));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(sh.arena));
    for (int i = 1; i < LOOPS; i++) DMM_OK_OR_FAIL(sh.drv->ops->stream_destroy(sh.drv, sh.streams[i]));
    dmm_test_census_zero(sh.drv);
    dmm_driver_destroy(sh.drv);
    dmm_driver_destroy(sh.host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_loops_plan_while_trims_and_cross_stream_frees_go_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
