/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_biased_lock.c — the lock biased to its usual owner (src/core/biased_lock.h).
 *
 * What is proven: the first thread to take a lock owns it and from then on takes and drops it
 * without the mutex (the mutex-path count stays put); another thread that wants it waits while the
 * owner holds it, sees everything the owner wrote, and is refused by try instead of waiting; a
 * thread that keeps taking a lock whose owner went idle becomes its owner, and the old owner gets it
 * back the same way; a lock whose owner thread exited moves at the first revocation; many threads
 * in bursts exclude each other (a read-wait-write counter under the lock loses no increment); with
 * the fallback forced (as where membarrier is missing) no lock is biased and the mutex alone still
 * excludes. Under TSan the lock is the mutex alone: the bias
 * assertions are skipped there, the exclusion ones still run.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/atomics.h"
#include "core/biased_lock.h"
#include "testkit.h"

enum { REBIAS_AFTER = 8 }; /* biased_lock.c's: revocations in a row that move the bias */

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A counter incremented read, wait, write: two holders at once lose increments. */
static volatile uint64_t g_counter;

static void slow_increment(void) {
    uint64_t v = g_counter;
    for (volatile int i = 0; i < 40; i++) {
    }
    g_counter = v + 1;
}

static void the_owner_takes_its_lock_without_the_mutex(void **state) {
    (void)state;
    if (!dmm__biased_lock_available()) skip();
    dmm_biased_lock l;
    dmm_biased_lock_init(&l);
    dmm_biased_lock_acquire(&l); /* the first acquisition: the mutex path, then biased to this thread */
    dmm_biased_lock_release(&l);
    assert_true(dmm__biased_lock_biased_to_me(&l));
    uint64_t slow = l.slow;
    for (int i = 0; i < 100000; i++) {
        dmm_biased_lock_acquire(&l);
        slow_increment();
        dmm_biased_lock_release(&l);
    }
    assert_true(dmm_biased_lock_try(&l));
    dmm_biased_lock_release(&l);
    assert_int_equal(l.slow, slow); /* not once through the mutex */
    assert_true(dmm__biased_lock_biased_to_me(&l));
    dmm_biased_lock_destroy(&l);
}

typedef struct handoff {
    dmm_biased_lock *l;
    _Atomic int trying, got, tried_while_held;
    uint64_t seen; /* the owner's write, read under the lock */
    bool biased_after; /* the bias moved to this thread after its run of acquisitions */
} handoff;

static void *other_thread(void *arg) {
    handoff *h = arg;
    dmm_atomic_store_seq_cst(&h->tried_while_held, dmm_biased_lock_try(h->l) ? 2 : 1);
    if (dmm_atomic_load_seq_cst(&h->tried_while_held) == 2) dmm_biased_lock_release(h->l);
    dmm_atomic_store_seq_cst(&h->trying, 1);
    dmm_biased_lock_acquire(h->l);
    dmm_atomic_store_seq_cst(&h->got, 1);
    h->seen = g_counter;
    dmm_biased_lock_release(h->l);
    /* the owner stays away: a run of acquisitions moves the bias here */
    for (int i = 0; i < REBIAS_AFTER + 2; i++) {
        dmm_biased_lock_acquire(h->l);
        slow_increment();
        dmm_biased_lock_release(h->l);
    }
    h->biased_after = dmm__biased_lock_biased_to_me(h->l);
    return NULL;
}

static void another_thread_waits_for_the_owner_then_may_take_the_bias(void **state) {
    (void)state;
    bool biasing = dmm__biased_lock_available();
    dmm_biased_lock l;
    dmm_biased_lock_init(&l);
    dmm_biased_lock_acquire(&l);
    dmm_biased_lock_release(&l);
    if (biasing) assert_true(dmm__biased_lock_biased_to_me(&l));

    handoff h;
    memset(&h, 0, sizeof h);
    h.l = &l;
    dmm_biased_lock_acquire(&l); /* held by the owner, through the fast path */
    g_counter = 1000;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_thread, &h), 0);
    while (dmm_atomic_load_seq_cst(&h.trying) == 0) sleep_ms(1);
    sleep_ms(50);
    assert_int_equal(dmm_atomic_load_seq_cst(&h.tried_while_held), 1); /* try refused while the owner held it */
    assert_int_equal(dmm_atomic_load_seq_cst(&h.got), 0);              /* and acquire waits */
    g_counter = 4242;
    dmm_biased_lock_release(&l);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(h.seen, 4242); /* what the owner wrote under the lock */
    assert_int_equal(g_counter, 4242 + REBIAS_AFTER + 2);
    if (biasing) {
        assert_true(h.biased_after);
        assert_false(dmm__biased_lock_biased_to_me(&l));
        /* the old owner takes it back the same way */
        for (int i = 0; i < REBIAS_AFTER + 2; i++) {
            dmm_biased_lock_acquire(&l);
            dmm_biased_lock_release(&l);
        }
        assert_true(dmm__biased_lock_biased_to_me(&l));
    }
    dmm_biased_lock_destroy(&l);
}

/* A lock whose owner thread exited moves at the first revocation, even while a new thread holds the
 * exited thread's recycled record (thread pools recycle threads: without this, every heap of a new
 * thread paid REBIAS_AFTER revocations, each a membarrier interrupting every thread). */
static void *bias_and_exit(void *arg) {
    dmm_biased_lock *l = arg;
    dmm_biased_lock_acquire(l);
    dmm_biased_lock_release(l);
    return (void *)(uintptr_t)dmm__biased_lock_biased_to_me(l);
}

typedef struct recycler {
    dmm_biased_lock other; /* taken once: this thread gets a record (the exited thread's, recycled) */
    _Atomic int ready, done;
} recycler;

static void *hold_a_record(void *arg) {
    recycler *r = arg;
    dmm_biased_lock_acquire(&r->other);
    dmm_biased_lock_release(&r->other);
    dmm_atomic_store_seq_cst(&r->ready, 1);
    while (dmm_atomic_load_seq_cst(&r->done) == 0) sleep_ms(1);
    return NULL;
}

static void a_lock_whose_owner_exited_moves_at_the_first_revocation(void **state) {
    (void)state;
    if (!dmm__biased_lock_available()) skip();
    dmm_biased_lock l;
    dmm_biased_lock_init(&l);
    pthread_t a, b;
    void *was_biased = NULL;
    assert_int_equal(pthread_create(&a, NULL, bias_and_exit, &l), 0);
    assert_int_equal(pthread_join(a, &was_biased), 0);
    assert_true(was_biased != NULL); /* biased to a, which is gone now */
    recycler r;
    memset(&r, 0, sizeof r);
    dmm_biased_lock_init(&r.other);
    assert_int_equal(pthread_create(&b, NULL, hold_a_record, &r), 0);
    while (dmm_atomic_load_seq_cst(&r.ready) == 0) sleep_ms(1);
    dmm_biased_lock_acquire(&l); /* one revocation */
    dmm_biased_lock_release(&l);
    assert_true(dmm__biased_lock_biased_to_me(&l)); /* moved at once, not after REBIAS_AFTER */
    uint64_t slow = l.slow;
    dmm_biased_lock_acquire(&l);
    dmm_biased_lock_release(&l);
    assert_int_equal(l.slow, slow); /* and the fast path from now on */
    dmm_atomic_store_seq_cst(&r.done, 1);
    assert_int_equal(pthread_join(b, NULL), 0);
    dmm_biased_lock_destroy(&r.other);
    dmm_biased_lock_destroy(&l);
}

enum { THREADS = 8, BURSTS = 40, BURST = 500 };

typedef struct crowd {
    dmm_biased_lock *l;
    pthread_barrier_t *bar;
    int id;
    uint64_t mine; /* increments this thread made */
} crowd;

static void *crowd_thread(void *arg) {
    crowd *c = arg;
    pthread_barrier_wait(c->bar);
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(c->id + 1);
    for (int b = 0; b < BURSTS; b++) {
        for (int i = 0; i < BURST; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            bool got = true;
            if (x % 8 == 0) got = dmm_biased_lock_try(c->l);
            else dmm_biased_lock_acquire(c->l);
            if (!got) continue;
            slow_increment();
            c->mine++;
            dmm_biased_lock_release(c->l);
        }
        if (x % 3 == 0) sched_yield(); /* bursts: owners go idle, others take over */
    }
    return NULL;
}

static void run_crowd(dmm_biased_lock *l) {
    g_counter = 0;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, THREADS);
    crowd c[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        c[i] = (crowd){l, &bar, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, crowd_thread, &c[i]), 0);
    }
    uint64_t sum = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        sum += c[i].mine;
    }
    pthread_barrier_destroy(&bar);
    assert_true(sum >= (uint64_t)THREADS * BURSTS * BURST * 3 / 4); /* try succeeds mostly */
    assert_int_equal(g_counter, sum); /* no increment lost: never two holders */
}

static void many_threads_in_bursts_exclude_each_other(void **state) {
    (void)state;
    dmm_biased_lock l;
    dmm_biased_lock_init(&l);
    run_crowd(&l);
    if (dmm__biased_lock_available()) assert_true(l.slow > 0); /* revocations and hand-offs happened */
    dmm_biased_lock_destroy(&l);
}

static void without_membarrier_no_lock_is_biased_and_the_mutex_excludes(void **state) {
    (void)state;
    dmm__biased_lock_force_mutex(true);
    assert_false(dmm__biased_lock_available());
    dmm_biased_lock l;
    dmm_biased_lock_init(&l);
    for (int i = 0; i < 1000; i++) {
        dmm_biased_lock_acquire(&l);
        slow_increment();
        dmm_biased_lock_release(&l);
    }
    assert_false(dmm__biased_lock_biased_to_me(&l));
#ifndef DMM_BIASED_LOCK_MUTEX_ONLY
    assert_int_equal(l.slow, 1000); /* every acquisition through the mutex */
    assert_int_equal(dmm_atomic_load_seq_cst(&l.bias), 0);
#endif
    run_crowd(&l);
#ifndef DMM_BIASED_LOCK_MUTEX_ONLY
    assert_int_equal(dmm_atomic_load_seq_cst(&l.bias), 0);
#endif
    dmm_biased_lock_destroy(&l);
    dmm__biased_lock_force_mutex(false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_owner_takes_its_lock_without_the_mutex),
        cmocka_unit_test(another_thread_waits_for_the_owner_then_may_take_the_bias),
        cmocka_unit_test(a_lock_whose_owner_exited_moves_at_the_first_revocation),
        cmocka_unit_test(many_threads_in_bursts_exclude_each_other),
        cmocka_unit_test(without_membarrier_no_lock_is_biased_and_the_mutex_excludes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
