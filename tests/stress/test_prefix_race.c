/* SPDX-License-Identifier: Apache-2.0 */
/* tests/stress/test_prefix_race.c — shared prefixes under threads (run it under TSan and ASan).
 *
 * Each round: an owner fills a 3-chunk prefix; eight threads each map it read-only into their own
 * targets, read it, and decommit or release them, over and over, while the main thread releases the
 * owner and three of the threads race to release the prefix object midway. Proves: a commit either
 * maps the prefix's bytes (never anything else) or is refused with UNKNOWN_ALLOCATION once the
 * prefix is gone; exactly one of the racing prefix releases is COMPLETE and the others FAILED with
 * nothing changed; the accounting hook is charged outside the lock without deadlock; and after every
 * round the check passes, stats = census = tally, and nothing but cached handles is left. */
#include "arena_kit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { THREADS = 8, ROUNDS = 30, ITERS = 12, PB = 6 * 1024 * 1024 };

typedef struct shared {
    dmm_mechanism *m;
    pthread_barrier_t start, done;
    dmm_prefix p;
    unsigned seed;
    _Atomic int mapped, refused, other, rel_complete, rel_failed, rel_other;
} shared;

static unsigned char pat(unsigned seed, size_t k) { return (unsigned char)(k * 13 + seed * 101 + (k >> 12)); }

typedef struct worker {
    shared *sh;
    int id;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    shared *sh = w->sh;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_wait(&sh->start);
        dmm_prefix p = sh->p; /* each thread holds its own copy of the value */
        for (int i = 0; i < ITERS; i++) {
            if (w->id < 3 && i == ITERS / 2) {
                dmm_release_outcome o = dmm_prefix_release(sh->m, &p);
                if (o.state == DMM_RELEASE_COMPLETE) dmm_atomic_add_seq_cst(&sh->rel_complete, 1);
                else if (o.state == DMM_RELEASE_FAILED && o.failure == DMM_ERR_UNKNOWN_ALLOCATION)
                    dmm_atomic_add_seq_cst(&sh->rel_failed, 1);
                else dmm_atomic_add_seq_cst(&sh->rel_other, 1);
            }
            dmm_allocation t;
            if (dmm_mechanism_allocate_committed(sh->m, 8 * MIB, 0, NULL, 0, &t) != DMM_OK) {
                dmm_atomic_add_seq_cst(&sh->other, 1);
                continue;
            }
            size_t off = (size_t)((w->id + i) % 2) * 2 * MIB;
            dmm_status s = dmm_prefix_commit(sh->m, &p, &t, off);
            if (s == DMM_OK) {
                const unsigned char *q = (const unsigned char *)t.ptr + off;
                bool ok = true;
                for (size_t k = 0; k < PB; k += 65521) ok &= q[k] == pat(sh->seed, k);
                dmm_atomic_add_seq_cst(ok ? &sh->mapped : &sh->other, 1);
            } else if (s == DMM_ERR_UNKNOWN_ALLOCATION) {
                dmm_atomic_add_seq_cst(&sh->refused, 1);
            } else {
                dmm_atomic_add_seq_cst(&sh->other, 1);
            }
            if (i % 3 == 0 && s == DMM_OK) {
                dmm_release_outcome o = dmm_mechanism_decommit(sh->m, &t, (dmm_range){off, PB});
                if (o.state != DMM_RELEASE_COMPLETE) dmm_atomic_add_seq_cst(&sh->other, 1);
            }
            if (i % 4 == 1 && dmm_arena_check(sh->m) != DMM_OK) dmm_atomic_add_seq_cst(&sh->other, 1);
            if (dmm_mechanism_release(sh->m, &t).state != DMM_RELEASE_COMPLETE) dmm_atomic_add_seq_cst(&sh->other, 1);
        }
        pthread_barrier_wait(&sh->done);
    }
    return NULL;
}

static void threads_share_and_release_a_prefix(void **state) {
    (void)state;
    dmm_driver *host;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    kit_tally tally;
    memset(&tally, 0, sizeof tally);
    dmm_accounting acct = kit_accounting(&tally);
    dmm_arena_config c = kit_config(4 * GIB, 2 * MIB, 4 * MIB, &acct);
    shared sh;
    memset(&sh, 0, sizeof sh);
    DMM_OK_OR_FAIL(dmm_arena_create(host, &c, &sh.m));
    pthread_barrier_init(&sh.start, NULL, THREADS + 1);
    pthread_barrier_init(&sh.done, NULL, THREADS + 1);
    worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){&sh, i};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int round = 0; round < ROUNDS; round++) {
        dmm_allocation owner;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(sh.m, PB, 0, &owner));
        sh.seed = (unsigned)round;
        for (size_t k = 0; k < PB; k++) ((unsigned char *)owner.ptr)[k] = pat(sh.seed, k);
        DMM_OK_OR_FAIL(dmm_prefix_create(sh.m, &owner, (dmm_range){0, PB}, &sh.p));
        int complete = dmm_atomic_load_seq_cst(&sh.rel_complete);
        pthread_barrier_wait(&sh.start);
        dmm_release_outcome o = dmm_mechanism_release(sh.m, &owner); /* while the sharers work */
        assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
        pthread_barrier_wait(&sh.done);
        assert_int_equal(dmm_atomic_load_seq_cst(&sh.rel_complete), complete + 1);
        assert_int_equal(dmm_atomic_load_seq_cst(&sh.other), 0);
        assert_int_equal(dmm_atomic_load_seq_cst(&sh.rel_other), 0);
        KIT_CHECK(sh.m);
        kit_stats_match_census(sh.m, host);
        kit_tally_matches(&tally, sh.m);
        dmm_stats s = kit_stats(sh.m);
        assert_int_equal(s.owned_bytes.current, s.cached_bytes.current); /* nothing but the cache */
        assert_int_equal(s.mapped_bytes.current, 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    print_message("  %d commits mapped the prefix, %d were refused after its release; %d racing prefix releases "
                  "failed cleanly\n",
                  dmm_atomic_load_seq_cst(&sh.mapped), dmm_atomic_load_seq_cst(&sh.refused),
                  dmm_atomic_load_seq_cst(&sh.rel_failed));
    assert_int_equal(dmm_atomic_load_seq_cst(&sh.rel_failed), ROUNDS * 2);
    assert_true(dmm_atomic_load_seq_cst(&sh.mapped) > 0);
    DMM_OK_OR_FAIL(dmm_arena_drain_cache(sh.m));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(sh.m));
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.mapped), 0);
    dmm_driver_census cz = kit_census(host);
    assert_int_equal(cz.handles, 0);
    assert_int_equal(cz.mapped_bytes, 0);
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.done);
    dmm_driver_destroy(host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_share_and_release_a_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
