/* SPDX-License-Identifier: Apache-2.0 */
/* Stress: 8 threads reserve, grow, shrink and release leases (and charge through accounting hooks)
 * against a tight limit, each also keeping a "cache" that the others' ladders ask it to give back,
 * while a monitor thread reads the tier and must never see used > limit on either axis. At the end
 * everything is released and used = 0. Seeded, so a failure replays; run under TSan by `make test`. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomics.h"
#include "testkit.h"

#define MiB (1024ull * 1024ull)
#define THREADS 8
#define ITERATIONS 6000
#define LIVE 4

static const dmm_device_id DEV0 = {DMM_TIER_DEVICE, 0};
static const uint64_t LIMIT_OWNED = 64 * MiB;
static const uint64_t LIMIT_MAPPED = 48 * MiB;

typedef struct worker {
    dmm_governor *g;
    dmm_holder *holder;
    uint64_t seed;
    dmm_lease_id live[LIVE];
    dmm_lease_id cache;            /* bytes it keeps "cached" and gives back when asked */
    _Atomic uint64_t cache_bytes;  /* what the cache lease holds by hand that may be taken */
    dmm_lease_id acct_lease;
    dmm_accounting acct;
    uint64_t acct_owned, acct_mapped;
    uint64_t budget_refusals, granted, unexpected;
    char unexpected_msg[256];
} worker;

static atomic_bool done;
static _Atomic uint64_t violations, samples, reclaim_given;
static char violation_msg[256];

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void note(worker *w, dmm_status s) {
    if (s == DMM_OK) {
        w->granted++;
    } else if (s == DMM_ERR_BUDGET) {
        w->budget_refusals++;
    } else if (w->unexpected++ == 0) {
        strncpy(w->unexpected_msg, dmm_last_error(), sizeof w->unexpected_msg - 1);
    }
}

/* Another thread's ladder asks this worker to give back its cache. */
static uint64_t give_cache(void *user, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted) {
    (void)device;
    (void)wanted;
    worker *w = user;
    if (step != DMM_RECLAIM_CACHED) return 0;
    uint64_t n = dmm_atomic_exchange_seq_cst(&w->cache_bytes, 0);
    if (n == 0) return 0;
    if (dmm_lease_shrink(w->g, w->cache, n, 0) != DMM_OK) return 0;
    dmm_atomic_add_seq_cst(&reclaim_given, n);
    return n;
}

static void *work(void *arg) {
    worker *w = arg;
    for (int it = 0; it < ITERATIONS; it++) {
        uint64_t r = rnd(&w->seed);
        size_t slot = (size_t)(r % LIVE);
        uint64_t bytes = (rnd(&w->seed) % (16 * MiB)) + 1;
        switch ((r >> 8) % 6) {
        case 0: /* reserve or release a lease */
            if (w->live[slot] == 0) {
                uint64_t mapped = (r >> 16) & 1 ? bytes / 2 : 0;
                dmm_status s = dmm_lease_reserve(w->holder, DEV0, (dmm_role)((r >> 20) % DMM_ROLE_COUNT), bytes,
                                                 mapped, &w->live[slot]);
                note(w, s);
            } else {
                note(w, dmm_lease_release(w->g, w->live[slot]));
                w->live[slot] = 0;
            }
            break;
        case 1: /* grow */
            if (w->live[slot] != 0) note(w, dmm_lease_grow(w->g, w->live[slot], bytes / 4, bytes / 8));
            break;
        case 2: { /* shrink by what it holds at most */
            uint64_t o = 0, m = 0;
            if (w->live[slot] == 0) break;
            note(w, dmm_lease_usage(w->g, w->live[slot], &o, &m));
            note(w, dmm_lease_shrink(w->g, w->live[slot], o / 2, m / 2));
            break;
        }
        case 3: /* fill the cache */
            if (dmm_lease_grow(w->g, w->cache, bytes / 2, 0) == DMM_OK)
                dmm_atomic_add_seq_cst(&w->cache_bytes, bytes / 2);
            break;
        case 4: /* a mechanism's charge and refund through the accounting hook */
            if ((r >> 12) & 1) {
                dmm_axis axis = (r >> 13) & 1 ? DMM_AXIS_MAPPED : DMM_AXIS_OWNED;
                dmm_status s = w->acct.charge(w->acct.user, DEV0, axis, bytes / 2);
                note(w, s);
                if (s == DMM_OK) *(axis == DMM_AXIS_OWNED ? &w->acct_owned : &w->acct_mapped) += bytes / 2;
            } else {
                w->acct.refund(w->acct.user, DEV0, DMM_AXIS_OWNED, w->acct_owned);
                w->acct.refund(w->acct.user, DEV0, DMM_AXIS_MAPPED, w->acct_mapped);
                w->acct_owned = w->acct_mapped = 0;
            }
            break;
        default: { /* drop some of its own cache */
            uint64_t n = dmm_atomic_exchange_seq_cst(&w->cache_bytes, 0);
            if (n) note(w, dmm_lease_shrink(w->g, w->cache, n, 0));
            break;
        }
        }
    }
    return NULL;
}

static void sample(dmm_governor *g) {
    dmm_tier_usage u;
    memset(&u, 0, sizeof u);
    u.size = sizeof u;
    if (dmm_governor_tier_usage(g, DEV0, &u) != DMM_OK) {
        dmm_atomic_add_seq_cst(&violations, 1);
        return;
    }
    {
        for (int x = 0; x < 2; x++)
            if (u.used[x] > u.limit[x] || u.used[x] + u.available[x] != u.limit[x] || u.peak[x] > u.limit[x]) {
                if (dmm_atomic_add_seq_cst(&violations, 1) == 0)
                    snprintf(violation_msg, sizeof violation_msg,
                             "axis %d: used %llu, available %llu, peak %llu, limit %llu", x,
                             (unsigned long long)u.used[x], (unsigned long long)u.available[x],
                             (unsigned long long)u.peak[x], (unsigned long long)u.limit[x]);
            }
        dmm_atomic_add_seq_cst(&samples, 1);
    }
}

static void *monitor(void *arg) {
    while (!dmm_atomic_load_seq_cst(&done)) sample(arg);
    return NULL;
}

static void eight_threads_at_the_limit(void **state) {
    (void)state;
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, DEV0, DMM_AXIS_OWNED, LIMIT_OWNED));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, DEV0, DMM_AXIS_MAPPED, LIMIT_MAPPED));
    static worker w[THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < THREADS; i++) {
        char name[16];
        snprintf(name, sizeof name, "worker-%d", i);
        dmm_holder_config hc = {sizeof hc, name, i % 3, give_cache, &w[i]};
        w[i].g = g;
        w[i].seed = 0x5eed0000u + (uint64_t)i;
        DMM_OK_OR_FAIL(dmm_governor_holder_register(g, &hc, &w[i].holder));
        DMM_OK_OR_FAIL(dmm_lease_reserve(w[i].holder, DEV0, DMM_ROLE_WORKSPACE, 0, 0, &w[i].cache));
        DMM_OK_OR_FAIL(dmm_lease_reserve(w[i].holder, DEV0, DMM_ROLE_KV_CACHE, 0, 0, &w[i].acct_lease));
        DMM_OK_OR_FAIL(dmm_governor_accounting(g, w[i].acct_lease, &w[i].acct));
    }
    dmm_atomic_store_seq_cst(&done, false);
    pthread_t mon, t[THREADS];
    assert_int_equal(pthread_create(&mon, NULL, monitor, g), 0);
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    dmm_atomic_store_seq_cst(&done, true);
    pthread_join(mon, NULL);
    sample(g); /* and once more after the last worker's last change */

    if (dmm_atomic_load_seq_cst(&violations) != 0) fail_msg("the monitor saw used > limit: %s", violation_msg);
    uint64_t refusals = 0, granted = 0;
    for (int i = 0; i < THREADS; i++) {
        if (w[i].unexpected) fail_msg("worker %d: unexpected status: %s", i, w[i].unexpected_msg);
        refusals += w[i].budget_refusals;
        granted += w[i].granted;
    }
    print_message("refusals %llu, granted %llu, samples %llu, given back %llu\n", (unsigned long long)refusals,
                  (unsigned long long)granted, (unsigned long long)dmm_atomic_load_seq_cst(&samples),
                  (unsigned long long)dmm_atomic_load_seq_cst(&reclaim_given));
    /* The limit was really reached (refusals) and really worked under (grants), the ladder really ran. */
    assert_true(refusals > 100);
    assert_true(granted > 1000);
    assert_true(dmm_atomic_load_seq_cst(&samples) > 0);
    dmm_governor_counters c = {.size = sizeof c};
    DMM_OK_OR_FAIL(dmm_governor_counters_get(g, &c));
    assert_true(c.reclaim_calls[DMM_RECLAIM_CACHED] > 0);
    assert_int_equal(c.stray_refunds, 0);
    assert_true(dmm_atomic_load_seq_cst(&reclaim_given) > 0);

    /* Tear down: every byte comes back, used = 0 on both axes. */
    for (int i = 0; i < THREADS; i++) {
        for (int s = 0; s < LIVE; s++)
            if (w[i].live[s]) DMM_OK_OR_FAIL(dmm_lease_release(g, w[i].live[s]));
        w[i].acct.refund(w[i].acct.user, DEV0, DMM_AXIS_OWNED, w[i].acct_owned);
        w[i].acct.refund(w[i].acct.user, DEV0, DMM_AXIS_MAPPED, w[i].acct_mapped);
        DMM_OK_OR_FAIL(dmm_lease_release(g, w[i].acct_lease));
        DMM_OK_OR_FAIL(dmm_lease_release(g, w[i].cache));
        DMM_OK_OR_FAIL(dmm_governor_holder_unregister(w[i].holder));
    }
    dmm_tier_usage u = {.size = sizeof u};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(g, DEV0, &u));
    assert_int_equal(u.used[0], 0);
    assert_int_equal(u.used[1], 0);
    assert_int_equal(u.leases, 0);
    assert_true(u.peak[0] <= LIMIT_OWNED);
    assert_true(u.peak[0] > LIMIT_OWNED / 2);
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eight_threads_at_the_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
