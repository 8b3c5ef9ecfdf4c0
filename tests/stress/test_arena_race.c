/* SPDX-License-Identifier: Apache-2.0 */
/* tests/stress/test_arena_race.c — the arena under threads.
 *
 * 1. Eight threads race to release one allocation, many rounds: exactly one release succeeds and
 *    the driver sees exactly one set of unmaps and handle releases per round (counted by the fault
 *    driver, not by the arena).
 * 2. A seeded mix of allocate / allocate_committed / commit / decommit / alias / release / check on 8
 *    threads, without and with injected driver faults: allocations never overlap (a registry of
 *    live ranges, and a pattern in every fully committed allocation that must survive until its
 *    release), every outcome is one the contract allows, and at the end the check passes, the stats
 *    equal the census and nothing is left. Run it under TSan and ASan. */
#include "arena_kit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { THREADS = 8 };

/* ---- 1: racing releases ---- */

typedef struct race {
    dmm_mechanism *m;
    pthread_barrier_t start, done;
    dmm_allocation target;
    _Atomic int complete, failed, other;
    int rounds;
} race;

static void *racer(void *arg) {
    race *r = arg;
    for (int i = 0; i < r->rounds; i++) {
        pthread_barrier_wait(&r->start);
        dmm_allocation mine = r->target; /* every thread holds its own copy of the value */
        dmm_release_outcome o = dmm_mechanism_release(r->m, &mine);
        if (o.state == DMM_RELEASE_COMPLETE) dmm_atomic_add_seq_cst(&r->complete, 1);
        else if (o.state == DMM_RELEASE_FAILED && o.failure == DMM_ERR_UNKNOWN_ALLOCATION)
            dmm_atomic_add_seq_cst(&r->failed, 1);
        else dmm_atomic_add_seq_cst(&r->other, 1);
        pthread_barrier_wait(&r->done);
    }
    return NULL;
}

static void eight_threads_release_one_allocation(void **state) {
    (void)state;
    dmm_driver *host, *fault;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(host, &fault));
    dmm_arena_config c = kit_config(1 * GIB, 2 * MIB, 0, NULL);
    race r;
    memset(&r, 0, sizeof r);
    r.rounds = 300;
    DMM_OK_OR_FAIL(dmm_arena_create(fault, &c, &r.m));
    pthread_barrier_init(&r.start, NULL, THREADS + 1);
    pthread_barrier_init(&r.done, NULL, THREADS + 1);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, racer, &r);
    for (int i = 0; i < r.rounds; i++) {
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(r.m, 6 * MIB - 4096 * (size_t)(i % 3), 0, &r.target)); /* 3 chunks */
        uint64_t unmaps = dmm_fault_calls(fault, DMM_OP_UNMAP), releases = dmm_fault_calls(fault, DMM_OP_RELEASE);
        int complete = dmm_atomic_load_seq_cst(&r.complete);
        pthread_barrier_wait(&r.start);
        pthread_barrier_wait(&r.done);
        assert_int_equal(dmm_atomic_load_seq_cst(&r.complete), complete + 1);
        assert_int_equal(dmm_fault_calls(fault, DMM_OP_UNMAP), unmaps + 3);
        assert_int_equal(dmm_fault_calls(fault, DMM_OP_RELEASE), releases + 3);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    assert_int_equal(dmm_atomic_load_seq_cst(&r.complete), r.rounds);
    assert_int_equal(dmm_atomic_load_seq_cst(&r.failed), r.rounds * (THREADS - 1));
    assert_int_equal(dmm_atomic_load_seq_cst(&r.other), 0);
    dmm_stats s = kit_stats(r.m);
    assert_int_equal(s.releases_complete, r.rounds);
    assert_int_equal(s.releases_failed, r.rounds * (THREADS - 1));
    KIT_CHECK(r.m);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(r.m));
    pthread_barrier_destroy(&r.start);
    pthread_barrier_destroy(&r.done);
    assert_int_equal(kit_census(host).handles, 0);
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
}

/* ---- 2: a seeded mix ---- */

typedef struct live_range {
    uintptr_t lo, hi;
} live_range;

typedef struct registry {
    pthread_mutex_t lock;
    live_range *v;
    size_t n, cap;
} registry;

static void reg_add(registry *g, const dmm_allocation *a) {
    uintptr_t lo = (uintptr_t)a->ptr, hi = lo + a->bytes;
    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < g->n; i++)
        if (lo < g->v[i].hi && g->v[i].lo < hi) {
            pthread_mutex_unlock(&g->lock);
            fail_msg("allocation [%#lx, %#lx) overlaps a live one [%#lx, %#lx)", (unsigned long)lo,
                     (unsigned long)hi, (unsigned long)g->v[i].lo, (unsigned long)g->v[i].hi);
        }
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 256;
        g->v = realloc(g->v, g->cap * sizeof *g->v);
    }
    g->v[g->n++] = (live_range){lo, hi};
    pthread_mutex_unlock(&g->lock);
}

static void reg_remove(registry *g, const dmm_allocation *a) {
    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < g->n; i++)
        if (g->v[i].lo == (uintptr_t)a->ptr) {
            g->v[i] = g->v[--g->n];
            break;
        }
    pthread_mutex_unlock(&g->lock);
}

typedef struct held {
    dmm_allocation a;
    bool full;        /* committed whole at birth and never decommitted: carries a pattern */
    bool quarantined; /* a decommit could not be undone: commits are refused */
    uint64_t mark;
} held;

typedef struct mix {
    dmm_mechanism *m;
    dmm_driver *fault;
    registry reg;
    bool faults;
    _Atomic uint64_t ops, failures, quarantined, aliases;
} mix;

typedef struct worker {
    mix *x;
    unsigned seed;
    int id;
} worker;

static uint64_t rnd(unsigned *s) { return (uint64_t)rand_r(s); }

static void mark(held *h) {
    uint64_t *p = h->a.ptr;
    p[0] = h->mark;
    if (h->a.bytes >= 16) memcpy((char *)h->a.ptr + h->a.bytes - 8, &h->mark, 8);
}

static void verify(const held *h) {
    uint64_t first, last;
    memcpy(&first, h->a.ptr, 8);
    memcpy(&last, (char *)h->a.ptr + h->a.bytes - 8, 8);
    if (first != h->mark || last != h->mark)
        fail_msg("allocation %p (%zu bytes) lost its pattern: another allocation overlapped it", h->a.ptr, h->a.bytes);
}

/* Releases h; returns true if it is gone (COMPLETE or QUARANTINED). */
static bool release_held(mix *x, held *h) {
    if (h->full) verify(h);
    reg_remove(&x->reg, &h->a); /* before the release: another thread may get the address at once */
    dmm_release_outcome o = dmm_mechanism_release(x->m, &h->a);
    dmm_release_state st = dmm_release_state_of(&o);
    if (st == DMM_RELEASE_FAILED) {
        if (!x->faults) fail_msg("release FAILED without faults: %s", dmm_last_error());
        reg_add(&x->reg, &h->a); /* still live: nobody else can hold its range */
        return false;
    }
    if (st == DMM_RELEASE_QUARANTINED) {
        if (!x->faults && !h->quarantined) fail_msg("release QUARANTINED without faults: %s", dmm_last_error());
        dmm_atomic_add_seq_cst(&x->quarantined, 1);
    }
    return true;
}

static void *mixer(void *arg) {
    worker *w = arg;
    mix *x = w->x;
    enum { MAXH = 24, OPS = 2500 };
    held h[MAXH];
    int n = 0;
    uint64_t seq = 0;
    for (int op = 0; op < OPS; op++) {
        if (x->faults && rnd(&w->seed) % 40 == 0)
            dmm_fault_plan(x->fault, DMM_OP_ANY, 1 + rnd(&w->seed) % 6, 1, DMM_ERR_DRIVER);
        uint64_t r = rnd(&w->seed) % 100;
        dmm_atomic_add_seq_cst(&x->ops, 1);
        if ((r < 30 && n < MAXH) || n == 0) { /* allocate, committed */
            size_t bytes = 16 + (size_t)(rnd(&w->seed) % (r < 20 ? 64 * KIB : 5 * MIB));
            held *p = &h[n];
            memset(p, 0, sizeof *p);
            if (dmm_mechanism_allocate(x->m, bytes, (size_t)1 << (rnd(&w->seed) % 13), &p->a) != DMM_OK) {
                if (!x->faults) fail_msg("allocate failed without faults: %s", dmm_last_error());
                dmm_atomic_add_seq_cst(&x->failures, 1);
                continue;
            }
            reg_add(&x->reg, &p->a);
            p->full = true;
            p->mark = ((uint64_t)w->id << 48) | ++seq;
            mark(p);
            n++;
        } else if (r < 45 && n < MAXH) { /* VA only, later committed in pieces */
            size_t bytes = 4096 + (size_t)(rnd(&w->seed) % (24 * MIB));
            held *p = &h[n];
            memset(p, 0, sizeof *p);
            if (dmm_mechanism_allocate_committed(x->m, bytes, 0, NULL, 0, &p->a) != DMM_OK) {
                if (!x->faults) fail_msg("allocate_committed failed without faults: %s", dmm_last_error());
                continue;
            }
            reg_add(&x->reg, &p->a);
            n++;
        } else if (r < 65) { /* commit a random range of a VA-only allocation */
            held *p = &h[rnd(&w->seed) % (uint64_t)n];
            if (p->full) continue;
            size_t off = (size_t)(rnd(&w->seed) % p->a.bytes), len = 1 + (size_t)(rnd(&w->seed) % (p->a.bytes - off));
            uint64_t newly = 0;
            dmm_status s = dmm_mechanism_commit(x->m, &p->a, (dmm_range){off, len}, &newly);
            if (s == DMM_OK) {
                ((volatile char *)p->a.ptr)[off] = 1;
                ((volatile char *)p->a.ptr)[off + len - 1] = 2;
            } else if (!x->faults || (s != DMM_ERR_DRIVER && s != DMM_ERR_QUARANTINED)) {
                fail_msg("commit: %s", dmm_last_error());
            }
        } else if (r < 80) { /* decommit a random range of a VA-only allocation */
            held *p = &h[rnd(&w->seed) % (uint64_t)n];
            if (p->full) continue;
            size_t off = (size_t)(rnd(&w->seed) % p->a.bytes), len = 1 + (size_t)(rnd(&w->seed) % (p->a.bytes - off));
            if (rnd(&w->seed) % 4 == 0) off = 0, len = p->a.bytes;
            dmm_release_outcome o = dmm_mechanism_decommit(x->m, &p->a, (dmm_range){off, len});
            dmm_release_state st = dmm_release_state_of(&o);
            if (st != DMM_RELEASE_COMPLETE && !x->faults) fail_msg("decommit: %s", dmm_last_error());
            if (st == DMM_RELEASE_QUARANTINED) p->quarantined = true;
        } else if (r < 86) { /* alias: commit a whole-granule range, map it again elsewhere in p */
            held *p = &h[rnd(&w->seed) % (uint64_t)n];
            size_t G = 2 * MIB, ng = p->a.bytes / G;
            if (p->full || ng < 2) continue;
            size_t k = 1 + (size_t)(rnd(&w->seed) % (ng / 2)), s0 = (size_t)(rnd(&w->seed) % (ng - k + 1)),
                   d0 = (size_t)(rnd(&w->seed) % (ng - k + 1));
            dmm_range src = {s0 * G, k * G}, dst = {d0 * G, k * G};
            uint64_t newly = 0;
            (void)dmm_mechanism_decommit(x->m, &p->a, dst);
            if (dmm_mechanism_commit(x->m, &p->a, src, &newly) != DMM_OK) continue;
            ((volatile char *)p->a.ptr)[src.offset] = 3;
            dmm_status s = dmm_arena_alias(x->m, &p->a, dst, src);
            if (s == DMM_OK) {
                dmm_atomic_add_seq_cst(&x->aliases, 1);
                if (((volatile char *)p->a.ptr)[dst.offset] != 3) fail_msg("%s", "an alias does not show its source's bytes");
            } else if (s != DMM_ERR_INVALID_ARGUMENT && (!x->faults || (s != DMM_ERR_DRIVER && s != DMM_ERR_QUARANTINED))) {
                fail_msg("alias: %s", dmm_last_error());
            }
        } else if (r < 97) { /* release */
            int i = (int)(rnd(&w->seed) % (uint64_t)n);
            if (release_held(x, &h[i])) h[i] = h[--n];
        } else { /* the expensive check, concurrently with the others */
            DMM_OK_OR_FAIL(dmm_arena_check(x->m));
        }
    }
    if (x->faults) dmm_fault_clear(x->fault);
    for (int tries = 0; n > 0; tries++) {
        if (tries > 100) fail_msg("%s", "allocations could not be released");
        for (int i = n - 1; i >= 0; i--)
            if (release_held(x, &h[i])) h[i] = h[--n];
        if (x->faults) dmm_fault_clear(x->fault);
    }
    return NULL;
}

static void run_mix(bool faults, unsigned seed) {
    dmm_driver *host, *fault;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(host, &fault));
    kit_tally tally;
    memset(&tally, 0, sizeof tally);
    dmm_accounting acct = kit_accounting(&tally);
    dmm_arena_config c = kit_config(16 * GIB, 4 * MIB, 32 * MIB, &acct);
    mix x;
    memset(&x, 0, sizeof x);
    pthread_mutex_init(&x.reg.lock, NULL);
    x.fault = fault;
    x.faults = faults;
    DMM_OK_OR_FAIL(dmm_arena_create(fault, &c, &x.m));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){&x, seed * 1000u + (unsigned)i, i + 1};
        pthread_create(&t[i], NULL, mixer, &w[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    DMM_OK_OR_FAIL(dmm_fault_clear(fault));
    KIT_CHECK(x.m);
    kit_stats_match_census(x.m, fault);
    kit_tally_matches(&tally, x.m);
    dmm_stats s = kit_stats(x.m);
    assert_int_equal(s.allocations.current, 0);
    assert_int_equal(s.committed_bytes.current, 0);
    if (!faults) {
        assert_int_equal(s.mapped_bytes.current, 0);
        assert_int_equal(s.releases_quarantined, 0);
        assert_int_equal(s.rollback_leaks, 0);
        size_t spans = 0;
        DMM_OK_OR_FAIL(dmm_arena_free_spans(x.m, &spans));
        assert_int_equal(spans, 1);
    }
    assert_true(dmm_atomic_load_seq_cst(&x.aliases) > 0);
    print_message("  mix%s: %llu ops, %llu aliases, %llu failed allocations, %llu quarantined releases, %llu injected "
                  "faults, %llu poisoned chunks, %llu quarantined handles, peak committed %lld MiB\n",
                  faults ? " with faults" : "", (unsigned long long)dmm_atomic_load_seq_cst(&x.ops),
                  (unsigned long long)dmm_atomic_load_seq_cst(&x.aliases),
                  (unsigned long long)dmm_atomic_load_seq_cst(&x.failures),
                  (unsigned long long)dmm_atomic_load_seq_cst(&x.quarantined),
                  (unsigned long long)dmm_fault_injected(fault), (unsigned long long)s.poisoned_chunks,
                  (unsigned long long)s.quarantined_handles, (long long)(s.committed_bytes.peak >> 20));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(x.m));
    dmm_driver_census cs = kit_census(host);
    assert_int_equal(cs.handles, 0);
    assert_int_equal(cs.mapped_bytes, 0);
    assert_int_equal(cs.reserved_bytes, 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.mapped), 0);
    free(x.reg.v);
    pthread_mutex_destroy(&x.reg.lock);
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
}

static void seeded_mix_without_faults(void **state) {
    (void)state;
    run_mix(false, 7);
}

static void seeded_mix_with_faults(void **state) {
    (void)state;
    run_mix(true, 11);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eight_threads_release_one_allocation),
        cmocka_unit_test(seeded_mix_without_faults),
        cmocka_unit_test(seeded_mix_with_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
