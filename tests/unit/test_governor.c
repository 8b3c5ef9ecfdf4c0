/* SPDX-License-Identifier: Apache-2.0 */
/* The governor: tiers and limits, leases by role, both axes, overflow, snapshot, the reclaim ladder's
 * order and its refusal sentence, the accounting hook, holder lifetimes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmm/pool.h"

#include "testkit.h"

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

static const dmm_device_id DEV0 = {DMM_TIER_DEVICE, 0};
static const dmm_device_id DEV1 = {DMM_TIER_DEVICE, 1};
static const dmm_device_id HOST = {DMM_TIER_HOST, 0};

static char *snapshot(dmm_governor *g) {
    size_t need = 0;
    assert_int_equal(dmm_governor_snapshot_json(g, NULL, 0, &need), DMM_ERR_INVALID_ARGUMENT);
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    DMM_OK_OR_FAIL(dmm_governor_snapshot_json(g, buf, need + 1, &need));
    assert_int_equal(strlen(buf), need);
    return buf;
}

static dmm_tier_usage usage(dmm_governor *g, dmm_device_id d) {
    dmm_tier_usage u;
    memset(&u, 0, sizeof u);
    u.size = sizeof u;
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(g, d, &u));
    return u;
}

static dmm_holder *holder(dmm_governor *g, const char *name, int32_t prio, dmm_reclaim_fn fn, void *user) {
    dmm_holder_config hc = {sizeof hc, name, prio, fn, user};
    dmm_holder *h = NULL;
    DMM_OK_OR_FAIL(dmm_governor_holder_register(g, &hc, &h));
    return h;
}

static dmm_governor *governor_with_device(uint64_t limit) {
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, DEV0, DMM_AXIS_OWNED, limit));
    return g;
}

/* A lease's stats: now, the peak (lowered by a reset to now), and everything charged, by hand or hook. */
static void lease_stats_count_peaks_and_totals(void **state) {
    (void)state;
    dmm_governor *g = governor_with_device(64 * MiB);
    dmm_holder *h = holder(g, "device", 0, NULL, NULL);
    dmm_lease_id l = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, DEV0, DMM_ROLE_WORKSPACE, 2 * MiB, 2 * MiB, &l));
    dmm_accounting acct;
    DMM_OK_OR_FAIL(dmm_governor_accounting(g, l, &acct));
    DMM_OK_OR_FAIL(acct.charge(acct.user, DEV0, DMM_AXIS_MAPPED, 8 * MiB));
    acct.refund(acct.user, DEV0, DMM_AXIS_MAPPED, 6 * MiB);
    dmm_lease_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_lease_stats_get(g, l, &st));
    assert_int_equal(st.used[DMM_AXIS_MAPPED], 4 * MiB);
    assert_int_equal(st.peak[DMM_AXIS_MAPPED], 10 * MiB);
    assert_int_equal(st.charged[DMM_AXIS_MAPPED], 10 * MiB);
    assert_int_equal(st.used[DMM_AXIS_OWNED], 2 * MiB);
    assert_int_equal(st.peak[DMM_AXIS_OWNED], 2 * MiB);
    DMM_OK_OR_FAIL(dmm_lease_reset_peak(g, l));
    DMM_OK_OR_FAIL(dmm_lease_stats_get(g, l, &st));
    assert_int_equal(st.peak[DMM_AXIS_MAPPED], 4 * MiB);  /* lowered to now */
    assert_int_equal(st.charged[DMM_AXIS_MAPPED], 10 * MiB); /* totals stay */
    /* refused, nothing changed: a short struct, a lease that is not live */
    dmm_lease_stats short_st = {.size = 4};
    assert_int_equal(dmm_lease_stats_get(g, l, &short_st), DMM_ERR_SHORT_STRUCT);
    assert_int_equal(dmm_lease_stats_get(g, l + 1000, &st), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not live", NULL);
    assert_int_equal(dmm_lease_reset_peak(g, l + 1000), DMM_ERR_INVALID_ARGUMENT);
    acct.refund(acct.user, DEV0, DMM_AXIS_MAPPED, 2 * MiB);
    DMM_OK_OR_FAIL(dmm_lease_release(g, l));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

/* ---------------------------------------------------------------------------------------------- */

static void leases_reserve_grow_shrink_release(void **state) {
    (void)state;
    dmm_governor *g = governor_with_device(1 * GiB);
    dmm_holder *h = holder(g, "kv", 0, NULL, NULL);
    dmm_lease_id a = 0, b = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, DEV0, DMM_ROLE_KV_CACHE, 256 * MiB, 128 * MiB, &a));
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, DEV0, DMM_ROLE_WEIGHTS, 100 * MiB, 0, &b));
    assert_true(a != 0 && b != 0 && a != b);
    dmm_tier_usage u = usage(g, DEV0);
    assert_int_equal(u.used[DMM_AXIS_OWNED], 356 * MiB);
    assert_int_equal(u.used[DMM_AXIS_MAPPED], 128 * MiB);
    assert_int_equal(u.limit[DMM_AXIS_OWNED], 1 * GiB);
    assert_true(u.limit[DMM_AXIS_MAPPED] == DMM_UNLIMITED);
    assert_int_equal(u.available[DMM_AXIS_OWNED], 1 * GiB - 356 * MiB);
    assert_int_equal(u.leases, 2);

    DMM_OK_OR_FAIL(dmm_lease_grow(g, a, 44 * MiB, 2 * MiB));
    DMM_OK_OR_FAIL(dmm_lease_shrink(g, a, 100 * MiB, 0));
    uint64_t o = 0, m = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(g, a, &o, &m));
    assert_int_equal(o, 200 * MiB);
    assert_int_equal(m, 130 * MiB);
    /* Shrinking more than held is refused and changes nothing. */
    assert_int_equal(dmm_lease_shrink(g, a, 201 * MiB, 0), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("holds 209715200 bytes on the owned axis", NULL);
    DMM_OK_OR_FAIL(dmm_lease_usage(g, a, &o, &m));
    assert_int_equal(o, 200 * MiB);

    char *js = snapshot(g);
    assert_non_null(strstr(js, "\"tier\":\"device\",\"index\":0,\"leases\":2,\"owned\":{\"limit\":1073741824,"
                               "\"used\":314572800,\"available\":759169024,\"peak\":419430400,"
                               "\"oversubscribed\":0},\"mapped\":{\"limit\":null,\"used\":136314880,"
                               "\"available\":null,"));
    assert_non_null(strstr(js, "\"kv-cache\":{\"owned\":209715200,\"mapped\":136314880}"));
    assert_non_null(strstr(js, "\"weights\":{\"owned\":104857600,\"mapped\":0}"));
    assert_non_null(strstr(js, "{\"name\":\"kv\",\"priority\":0,\"leases\":2,\"usage\":["));
    assert_non_null(strstr(js, "{\"tier\":\"device\",\"index\":0,\"role\":\"weights\",\"leases\":1,"
                               "\"owned\":104857600,\"mapped\":0}"));
    free(js);

    DMM_OK_OR_FAIL(dmm_lease_release(g, a));
    /* Exactly once: a second release is refused and changes nothing. */
    assert_int_equal(dmm_lease_release(g, a), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not live", NULL);
    assert_int_equal(dmm_lease_grow(g, a, 1, 0), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(usage(g, DEV0).used[DMM_AXIS_OWNED], 100 * MiB);
    DMM_OK_OR_FAIL(dmm_lease_release(g, b));
    /* Ids are never reused. */
    dmm_lease_id c = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, DEV0, DMM_ROLE_WORKSPACE, 0, 0, &c));
    assert_true(c != a && c != b);
    DMM_OK_OR_FAIL(dmm_lease_release(g, c));

    u = usage(g, DEV0);
    assert_int_equal(u.used[0], 0);
    assert_int_equal(u.used[1], 0);
    assert_int_equal(u.peak[0], 400 * MiB);
    assert_int_equal(u.leases, 0);
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

static void refused_request_changes_nothing(void **state) {
    (void)state;
    dmm_governor *g = governor_with_device(1 * GiB);
    dmm_holder *h = holder(g, "weights-store", 3, NULL, NULL);
    dmm_lease_id a = 0, z = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, DEV0, DMM_ROLE_WEIGHTS, 900 * MiB, 900 * MiB, &a));
    char *before = snapshot(g);
    dmm_governor_counters c0 = {.size = sizeof c0};
    DMM_OK_OR_FAIL(dmm_governor_counters_get(g, &c0));

    /* grow over the limit */
    assert_int_equal(dmm_lease_grow(g, a, 200 * MiB, 1), DMM_ERR_BUDGET);
    dmm_test_error_mentions("dmm_lease_grow", "tier device:0", "owned axis", "role weights", "'weights-store'",
                            "requested 209715200 bytes", "used 943718400 bytes", "limit 1073741824 bytes",
                            "available 130023424 bytes", "cached free memory 0", "idle chunks 0", "offload 0",
                            "discard 0", NULL);
    /* a new lease over the limit: no lease appears */
    assert_int_equal(dmm_lease_reserve(h, DEV0, DMM_ROLE_KV_CACHE, 125 * MiB, 0, &z), DMM_ERR_BUDGET);
    assert_int_equal(z, 0);
    dmm_test_error_mentions("role kv-cache", "requested 131072000 bytes", NULL);
    /* overflow: refused, not wrapped */
    assert_int_equal(dmm_lease_grow(g, a, 0, UINT64_MAX), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("overflow", "mapped axis", NULL);
    /* unknown tier */
    assert_int_equal(dmm_lease_reserve(h, DEV1, DMM_ROLE_KV_CACHE, 1, 0, &z), DMM_ERR_WRONG_DEVICE);
    dmm_test_error_mentions("device:1", "dmm_governor_add_device", NULL);
    /* bad role */
    assert_int_equal(dmm_lease_reserve(h, DEV0, (dmm_role)9, 1, 0, &z), DMM_ERR_INVALID_ARGUMENT);

    char *after = snapshot(g);
    assert_string_equal(before, after);
    dmm_governor_counters c1 = {.size = sizeof c1};
    DMM_OK_OR_FAIL(dmm_governor_counters_get(g, &c1));
    assert_int_equal(c1.refusals, c0.refusals + 2);
    assert_int_equal(c1.overflow_refusals, c0.overflow_refusals + 1);
    assert_int_equal(c1.charges, c0.charges);
    /* exactly at the limit fits */
    DMM_OK_OR_FAIL(dmm_lease_grow(g, a, 124 * MiB, 0));
    assert_int_equal(usage(g, DEV0).available[0], 0);
    free(before);
    free(after);
    DMM_OK_OR_FAIL(dmm_lease_release(g, a));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

static void overflow_on_unlimited_tier_is_refused(void **state) {
    (void)state;
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    dmm_holder *h = holder(g, "h", 0, NULL, NULL);
    dmm_lease_id a = 0, b = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, HOST, DMM_ROLE_ACTIVATION, UINT64_MAX - 10, 0, &a));
    assert_int_equal(usage(g, HOST).available[0], DMM_UNLIMITED);
    char *before = snapshot(g);
    assert_int_equal(dmm_lease_reserve(h, HOST, DMM_ROLE_ACTIVATION, 11, 0, &b), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("overflow", "owned axis", "tier host:0", NULL);
    assert_int_equal(dmm_lease_grow(g, a, 11, 0), DMM_ERR_INVALID_ARGUMENT);
    char *after = snapshot(g);
    assert_string_equal(before, after);
    DMM_OK_OR_FAIL(dmm_lease_grow(g, a, 10, 0)); /* UINT64_MAX exactly: no wrap, no refusal */
    assert_true(usage(g, HOST).used[0] == UINT64_MAX);
    free(before);
    free(after);
    DMM_OK_OR_FAIL(dmm_lease_release(g, a));
    assert_int_equal(usage(g, HOST).used[0], 0);
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

static void lowering_a_limit_revokes_nothing(void **state) {
    (void)state;
    dmm_governor *g = governor_with_device(1 * GiB);
    dmm_holder *h = holder(g, "h", 0, NULL, NULL);
    dmm_lease_id a = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, DEV0, DMM_ROLE_WEIGHTS, 600 * MiB, 600 * MiB, &a));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, DEV0, DMM_AXIS_OWNED, 512 * MiB));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, DEV0, DMM_AXIS_MAPPED, 256 * MiB));
    dmm_tier_usage u = usage(g, DEV0);
    assert_int_equal(u.used[0], 600 * MiB); /* nothing revoked */
    assert_int_equal(u.used[1], 600 * MiB);
    assert_int_equal(u.available[0], 0);
    assert_int_equal(u.oversubscribed[0], 88 * MiB);
    assert_int_equal(u.oversubscribed[1], 344 * MiB);
    uint64_t o = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(g, a, &o, NULL));
    assert_int_equal(o, 600 * MiB);
    char *js = snapshot(g);
    assert_non_null(strstr(js, "\"owned\":{\"limit\":536870912,\"used\":629145600,\"available\":0,"
                               "\"peak\":629145600,\"oversubscribed\":92274688}"));
    assert_non_null(strstr(js, "\"mapped\":{\"limit\":268435456,\"used\":629145600,\"available\":0,"
                               "\"peak\":629145600,\"oversubscribed\":360710144}"));
    free(js);
    /* more is refused; a zero charge and a shrink still work */
    assert_int_equal(dmm_lease_grow(g, a, 1, 0), DMM_ERR_BUDGET);
    dmm_test_error_mentions("available 0 bytes", NULL);
    DMM_OK_OR_FAIL(dmm_lease_grow(g, a, 0, 0));
    DMM_OK_OR_FAIL(dmm_lease_shrink(g, a, 100 * MiB, 400 * MiB));
    assert_int_equal(usage(g, DEV0).oversubscribed[0], 0);
    assert_int_equal(usage(g, DEV0).available[0], 12 * MiB);
    DMM_OK_OR_FAIL(dmm_lease_release(g, a));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

/* ---------------------------------------------------------------------------------------------- */
/* the ladder, with fake holders */

typedef struct call {
    const char *holder;
    dmm_reclaim_step step;
    uint64_t wanted;
} call;

static call calls[64];
static size_t ncalls;

typedef struct fake {
    const char *name;
    dmm_governor *g;
    dmm_lease_id lease;       /* what it holds */
    dmm_reclaim_step gives_on; /* the step at which it gives back */
    uint64_t gives;            /* how much it gives back then (at most what it holds) */
    bool lie;                  /* reports `gives` without refunding anything */
} fake;

static uint64_t fake_reclaim(void *user, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted) {
    fake *f = user;
    assert_int_equal(device.tier, DMM_TIER_DEVICE);
    assert_true(ncalls < 64);
    calls[ncalls++] = (call){f->name, step, wanted};
    if (step != f->gives_on || f->gives == 0) return 0;
    uint64_t n = f->gives;
    f->gives = 0;
    if (!f->lie) DMM_OK_OR_FAIL(dmm_lease_shrink(f->g, f->lease, n, 0));
    return n;
}

static void ladder_asks_in_order_and_grants(void **state) {
    (void)state;
    dmm_governor *g = governor_with_device(1 * GiB);
    fake pool = {"pool", g, 0, DMM_RECLAIM_CACHED, 0, false};
    fake kv = {"kv", g, 0, DMM_RECLAIM_DISCARD, 0, false};
    fake wts = {"weights", g, 0, DMM_RECLAIM_OFFLOAD, 300 * MiB, false};
    fake none = {"elsewhere", g, 0, DMM_RECLAIM_CACHED, 500 * MiB, false};
    /* Registered out of priority order: the ladder must sort them. */
    dmm_holder *hk = holder(g, "kv", 5, fake_reclaim, &kv);
    dmm_holder *hw = holder(g, "weights", 9, fake_reclaim, &wts);
    dmm_holder *hp = holder(g, "pool", 1, fake_reclaim, &pool);
    dmm_holder *he = holder(g, "elsewhere", 0, fake_reclaim, &none); /* no lease on device:0 */
    dmm_holder *hr = holder(g, "requester", 0, fake_reclaim, NULL);  /* never asked: it is the charger */
    DMM_OK_OR_FAIL(dmm_lease_reserve(hp, DEV0, DMM_ROLE_WORKSPACE, 100 * MiB, 0, &pool.lease));
    DMM_OK_OR_FAIL(dmm_lease_reserve(hk, DEV0, DMM_ROLE_KV_CACHE, 300 * MiB, 0, &kv.lease));
    DMM_OK_OR_FAIL(dmm_lease_reserve(hw, DEV0, DMM_ROLE_WEIGHTS, 400 * MiB, 0, &wts.lease));
    DMM_OK_OR_FAIL(dmm_lease_reserve(he, HOST, DMM_ROLE_WEIGHTS, 500 * MiB, 0, &none.lease));
    dmm_lease_id r = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(hr, DEV0, DMM_ROLE_ACTIVATION, 200 * MiB, 0, &r));
    /* device:0 now holds 1000 MiB of 1024. Ask for 200 more: 176 MiB short. */
    ncalls = 0;
    DMM_OK_OR_FAIL(dmm_lease_grow(g, r, 200 * MiB, 0));
    /* cached: pool (prio 1), kv (5), weights (9); idle: the same; offload: pool, kv, weights → freed. */
    const char *want[] = {"pool", "kv", "weights", "pool", "kv", "weights", "pool", "kv", "weights"};
    const dmm_reclaim_step steps[] = {0, 0, 0, 1, 1, 1, 2, 2, 2};
    assert_int_equal(ncalls, 9);
    for (size_t i = 0; i < 9; i++) {
        assert_string_equal(calls[i].holder, want[i]);
        assert_int_equal(calls[i].step, steps[i]);
        assert_int_equal(calls[i].wanted, 176 * MiB);
    }
    assert_int_equal(usage(g, DEV0).used[0], 900 * MiB);
    dmm_governor_counters c = {.size = sizeof c};
    DMM_OK_OR_FAIL(dmm_governor_counters_get(g, &c));
    assert_int_equal(c.grants_after_reclaim, 1);
    assert_int_equal(c.reclaim_calls[0], 3);
    assert_int_equal(c.reclaim_calls[2], 3);
    assert_int_equal(c.reclaim_calls[3], 0);
    assert_int_equal(c.reclaim_freed[2], 300 * MiB);

    /* Now nothing fits and only the kv store's discard and a lying pool help a little: refused, and
     * the sentence lists each step with what it freed. */
    kv.gives = 16 * MiB;
    pool.gives = 8 * MiB;
    pool.lie = true; /* reports 8 MiB without refunding: the governor re-checks, it does not trust */
    ncalls = 0;
    assert_int_equal(dmm_lease_grow(g, r, 200 * MiB, 0), DMM_ERR_BUDGET);
    dmm_test_error_mentions("the reclaim ladder freed: cached free memory 8388608, idle chunks 0, offload 0, "
                            "discard 16777216 bytes",
                            "requested 209715200 bytes", "used 926941184 bytes", "available 146800640 bytes",
                            "role activation", "'requester'", NULL);
    assert_int_equal(ncalls, 12);
    assert_int_equal(calls[0].wanted, 76 * MiB);
    assert_string_equal(calls[11].holder, "weights");
    assert_int_equal(calls[11].wanted, 60 * MiB);

    DMM_OK_OR_FAIL(dmm_lease_release(g, r));
    DMM_OK_OR_FAIL(dmm_lease_release(g, pool.lease));
    DMM_OK_OR_FAIL(dmm_lease_release(g, kv.lease));
    DMM_OK_OR_FAIL(dmm_lease_release(g, wts.lease));
    DMM_OK_OR_FAIL(dmm_lease_release(g, none.lease));
    assert_int_equal(dmm_governor_destroy(g), DMM_ERR_BUSY);
    dmm_test_error_mentions("unregister", NULL);
    dmm_holder *all[] = {hk, hw, hp, he, hr};
    for (size_t i = 0; i < 5; i++) DMM_OK_OR_FAIL(dmm_governor_holder_unregister(all[i]));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

/* A callback that charges and unregisters from inside: no second ladder, no self-deadlock. */
typedef struct nasty {
    dmm_governor *g;
    dmm_holder *self;
    dmm_lease_id lease;
    dmm_status charge_status;
    dmm_status unregister_status;
} nasty;

static uint64_t nasty_reclaim(void *user, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted) {
    (void)device;
    (void)wanted;
    nasty *n = user;
    if (step != DMM_RECLAIM_CACHED) return 0;
    n->charge_status = dmm_lease_grow(n->g, n->lease, 1 * GiB, 0);
    n->unregister_status = dmm_governor_holder_unregister(n->self);
    return 0;
}

static void charges_inside_a_callback_do_not_recurse(void **state) {
    (void)state;
    dmm_governor *g = governor_with_device(1 * GiB);
    nasty n = {g, NULL, 0, DMM_OK, DMM_OK};
    n.self = holder(g, "nasty", 0, nasty_reclaim, &n);
    dmm_holder *other = holder(g, "other", 0, NULL, NULL);
    dmm_lease_id a = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(n.self, DEV0, DMM_ROLE_WEIGHTS, 1 * GiB, 0, &n.lease));
    assert_int_equal(dmm_lease_reserve(other, DEV0, DMM_ROLE_WEIGHTS, 1, 0, &a), DMM_ERR_BUDGET);
    dmm_test_error_mentions("cached free memory 0", NULL);
    assert_int_equal(n.charge_status, DMM_ERR_BUDGET);
    assert_int_equal(n.unregister_status, DMM_ERR_BUSY);
    DMM_OK_OR_FAIL(dmm_lease_release(g, n.lease));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(n.self));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(other));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

/* ---------------------------------------------------------------------------------------------- */
/* the accounting hook */

static void accounting_charges_and_refunds_a_lease(void **state) {
    (void)state;
    dmm_governor *g = governor_with_device(64 * MiB);
    dmm_holder *h = holder(g, "arena", 0, NULL, NULL);
    dmm_lease_id l = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, DEV0, DMM_ROLE_KV_CACHE, 0, 0, &l));
    dmm_accounting acct;
    DMM_OK_OR_FAIL(dmm_governor_accounting(g, l, &acct));
    assert_int_equal(dmm_governor_accounting(g, l + 1000, &acct), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(acct.charge(acct.user, DEV0, DMM_AXIS_OWNED, 32 * MiB));
    DMM_OK_OR_FAIL(acct.charge(acct.user, DEV0, DMM_AXIS_MAPPED, 32 * MiB));
    DMM_OK_OR_FAIL(acct.charge(acct.user, DEV0, DMM_AXIS_MAPPED, 32 * MiB)); /* an alias: mapped > owned */
    assert_int_equal(acct.charge(acct.user, DEV0, DMM_AXIS_OWNED, 33 * MiB), DMM_ERR_BUDGET);
    dmm_test_error_mentions("governor accounting charge", "role kv-cache", NULL);
    assert_int_equal(acct.charge(acct.user, DEV1, DMM_AXIS_OWNED, 1), DMM_ERR_WRONG_DEVICE);
    dmm_tier_usage u = usage(g, DEV0);
    assert_int_equal(u.used[0], 32 * MiB);
    assert_int_equal(u.used[1], 64 * MiB);
    /* Bound bytes cannot be shrunk by hand nor the lease released under the mechanism. */
    assert_int_equal(dmm_lease_shrink(g, l, 1, 0), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("bound", NULL);
    assert_int_equal(dmm_lease_release(g, l), DMM_ERR_BUSY);
    /* A hand-made grow on top of bound bytes can be shrunk again. */
    DMM_OK_OR_FAIL(dmm_lease_grow(g, l, 1 * MiB, 0));
    DMM_OK_OR_FAIL(dmm_lease_shrink(g, l, 1 * MiB, 0));
    /* Refunds: a stray one (more than bound) changes nothing and is counted. */
    acct.refund(acct.user, DEV0, DMM_AXIS_OWNED, 33 * MiB);
    acct.refund(acct.user, DEV1, DMM_AXIS_OWNED, 1);
    acct.refund(acct.user, DEV0, DMM_AXIS_MAPPED, 64 * MiB);
    acct.refund(acct.user, DEV0, DMM_AXIS_OWNED, 32 * MiB);
    u = usage(g, DEV0);
    assert_int_equal(u.used[0], 0);
    assert_int_equal(u.used[1], 0);
    dmm_governor_counters c = {.size = sizeof c};
    DMM_OK_OR_FAIL(dmm_governor_counters_get(g, &c));
    assert_int_equal(c.stray_refunds, 2);
    DMM_OK_OR_FAIL(dmm_lease_release(g, l));
    /* After the release: charges refused, refunds stray. */
    assert_int_equal(acct.charge(acct.user, DEV0, DMM_AXIS_OWNED, 1), DMM_ERR_INVALID_ARGUMENT);
    acct.refund(acct.user, DEV0, DMM_AXIS_OWNED, 1);
    DMM_OK_OR_FAIL(dmm_governor_counters_get(g, &c));
    assert_int_equal(c.stray_refunds, 3);
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

/* ---------------------------------------------------------------------------------------------- */

static void holders_and_tiers(void **state) {
    (void)state;
    dmm_governor *g = NULL;
    dmm_governor_config cfg = {sizeof cfg, 1001};
    assert_int_equal(dmm_governor_create(&cfg, &g), DMM_ERR_INVALID_ARGUMENT);
    cfg.device_margin_permille = 500;
    DMM_OK_OR_FAIL(dmm_governor_create(&cfg, &g));
    /* host and disk exist and are unlimited; device:0 does not exist yet */
    assert_true(usage(g, HOST).limit[0] == DMM_UNLIMITED);
    dmm_device_id disk = {DMM_TIER_DISK, 0};
    assert_true(usage(g, disk).limit[1] == DMM_UNLIMITED);
    dmm_tier_usage u = {.size = sizeof u};
    assert_int_equal(dmm_governor_tier_usage(g, DEV0, &u), DMM_ERR_WRONG_DEVICE);

    /* A driver's free memory × the margin. The host driver reports the machine's memory. */
    dmm_driver *host = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    uint64_t free_bytes = 0, total = 0;
    DMM_OK_OR_FAIL(host->ops->mem_info(host, &free_bytes, &total));
    DMM_OK_OR_FAIL(dmm_governor_add_device(g, host));
    uint64_t lim = usage(g, HOST).limit[0];
    assert_true(lim <= free_bytes / 2 + free_bytes / 20 && lim + free_bytes / 20 >= free_bytes / 2); /* free moves */
    dmm_driver_destroy(host);

    /* A name with quotes is escaped in the snapshot. */
    dmm_holder *h = holder(g, "a \"quoted\" name", -1, NULL, NULL);
    dmm_holder *h2 = holder(g, NULL, 0, NULL, NULL);
    char *js = snapshot(g);
    assert_non_null(strstr(js, "\"name\":\"a \\\"quoted\\\" name\",\"priority\":-1"));
    assert_non_null(strstr(js, "\"name\":\"holder\""));
    assert_non_null(strstr(js, "{\"tier\":\"disk\",\"index\":0"));
    free(js);
    dmm_lease_id l = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, HOST, DMM_ROLE_WEIGHTS, 1, 1, &l));
    assert_int_equal(dmm_governor_holder_unregister(h), DMM_ERR_BUSY);
    dmm_test_error_mentions("1 live leases", NULL);
    DMM_OK_OR_FAIL(dmm_lease_release(g, l));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h2));
    /* a tiny buffer */
    char tiny[8];
    size_t need = 0;
    assert_int_equal(dmm_governor_snapshot_json(g, tiny, sizeof tiny, &need), DMM_ERR_INVALID_ARGUMENT);
    assert_true(need > sizeof tiny);
    assert_int_equal(tiny[7], '\0');
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

/* Many leases: the id map grows, deletes keep every other lease findable. */
static void many_leases(void **state) {
    (void)state;
    dmm_governor *g = governor_with_device(1 * GiB);
    dmm_holder *h = holder(g, "h", 0, NULL, NULL);
    enum { N = 3000 };
    static dmm_lease_id ids[N];
    for (size_t i = 0; i < N; i++) DMM_OK_OR_FAIL(dmm_lease_reserve(h, DEV0, (dmm_role)(i % 4), i, 0, &ids[i]));
    for (size_t i = 0; i < N; i += 3) DMM_OK_OR_FAIL(dmm_lease_release(g, ids[i]));
    for (size_t i = 0; i < N; i++) {
        uint64_t o = 0;
        dmm_status s = dmm_lease_usage(g, ids[i], &o, NULL);
        if (i % 3 == 0) {
            assert_int_equal(s, DMM_ERR_INVALID_ARGUMENT);
        } else {
            assert_int_equal(s, DMM_OK);
            assert_int_equal(o, i);
        }
    }
    for (size_t i = 0; i < N; i++)
        if (i % 3 != 0) DMM_OK_OR_FAIL(dmm_lease_release(g, ids[i]));
    assert_int_equal(usage(g, DEV0).used[0], 0);
    assert_int_equal(usage(g, DEV0).leases, 0);
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}


/* ---------------------------------------------------------------------------------------------- */
/* Issue 5, acceptance 4: a pool holding 1 GiB of free cached memory is a holder whose reclaim is its
 * trim; a request that needs that memory succeeds after the trim, and the stats show the trim. */

typedef struct pool_holder {
    dmm_pool *pool;
    uint64_t released;
    int calls[DMM_RECLAIM_STEP_COUNT];
} pool_holder;

static uint64_t pool_reclaim(void *user, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted) {
    (void)device;
    pool_holder *ph = user;
    ph->calls[step]++;
    if (step != DMM_RECLAIM_CACHED) return 0;
    dmm_pool_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (dmm_pool_stats_get(ph->pool, &st) != DMM_OK) return 0;
    uint64_t committed = (uint64_t)st.committed_bytes.current;
    uint64_t released = 0;
    if (dmm_pool_trim(ph->pool, committed > wanted ? committed - wanted : 0, &released) != DMM_OK) return 0;
    ph->released += released;
    return released;
}

static void pool_trim_is_the_first_rung(void **state) {
    (void)state;
    dmm_driver *host = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, HOST, DMM_AXIS_OWNED, 1536 * MiB));
    pool_holder ph;
    memset(&ph, 0, sizeof ph);
    dmm_holder *hp = holder(g, "pool", 0, pool_reclaim, &ph);
    dmm_holder *hw = holder(g, "weights", 1, NULL, NULL);
    dmm_lease_id pool_lease = 0, w = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(hp, HOST, DMM_ROLE_WORKSPACE, 0, 0, &pool_lease));
    dmm_accounting acct;
    DMM_OK_OR_FAIL(dmm_governor_accounting(g, pool_lease, &acct));
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = 4 * GiB;
    ac.accounting = &acct;
    dmm_mechanism *arena = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(host, &ac, &arena));
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.va_bytes = 2 * GiB;
    pc.chunk_bytes = 64 * MiB;
    DMM_OK_OR_FAIL(dmm_pool_create(arena, host, &pc, &ph.pool));

    /* The pool grows to 1 GiB, then holds it all free and mapped. */
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(ph.pool, 1 * GiB, NULL, &p));
    DMM_OK_OR_FAIL(dmm_pool_free(ph.pool, p, NULL));
    uint64_t owned = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(g, pool_lease, &owned, NULL));
    assert_true(owned >= 1 * GiB);
    dmm_pool_stats st0 = {.size = sizeof st0};
    DMM_OK_OR_FAIL(dmm_pool_stats_get(ph.pool, &st0));
    assert_int_equal(st0.allocated_bytes.current, 0);

    /* 1 GiB of weights on a 1.5 GiB tier: fits only after the pool trimmed. */
    DMM_OK_OR_FAIL(dmm_lease_reserve(hw, HOST, DMM_ROLE_WEIGHTS, 1 * GiB, 0, &w));
    assert_int_equal(ph.calls[DMM_RECLAIM_CACHED], 1);
    assert_int_equal(ph.calls[DMM_RECLAIM_IDLE], 0); /* granted after the first rung */
    assert_true(ph.released >= owned - 512 * MiB);
    dmm_pool_stats st1 = {.size = sizeof st1};
    DMM_OK_OR_FAIL(dmm_pool_stats_get(ph.pool, &st1));
    assert_true(st1.trims > st0.trims);
    assert_true(st1.chunks_decommitted >= st0.chunks_decommitted + 8);
    assert_true((uint64_t)st1.committed_bytes.current <= 512 * MiB);
    dmm_governor_counters c = {.size = sizeof c};
    DMM_OK_OR_FAIL(dmm_governor_counters_get(g, &c));
    assert_int_equal(c.grants_after_reclaim, 1);
    assert_int_equal(c.reclaim_freed[DMM_RECLAIM_CACHED], ph.released);
    dmm_tier_usage u = usage(g, HOST);
    assert_true(u.used[0] <= u.limit[0]);

    /* 1 GiB more cannot fit even with everything trimmed: refused, the sentence lists every rung. */
    uint64_t before = ph.released;
    assert_int_equal(dmm_lease_grow(g, w, 1 * GiB, 0), DMM_ERR_BUDGET);
    char expect[160];
    snprintf(expect, sizeof expect, "cached free memory %llu, idle chunks 0, offload 0, discard 0 bytes",
             (unsigned long long)(ph.released - before));
    dmm_test_error_mentions("tier host:0", "role weights", "requested 1073741824 bytes", expect, NULL);
    assert_true(ph.released > before); /* the rest of the cache went too */
    assert_int_equal(ph.calls[DMM_RECLAIM_DISCARD], 1);
    /* Nothing reclaimable now: every rung freed 0. */
    assert_int_equal(dmm_lease_grow(g, w, 1 * GiB, 0), DMM_ERR_BUDGET);
    dmm_test_error_mentions("cached free memory 0, idle chunks 0, offload 0, discard 0 bytes", NULL);

    DMM_OK_OR_FAIL(dmm_lease_release(g, w));
    DMM_OK_OR_FAIL(dmm_pool_destroy(ph.pool));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(arena));
    DMM_OK_OR_FAIL(dmm_lease_usage(g, pool_lease, &owned, NULL));
    assert_int_equal(owned, 0);
    DMM_OK_OR_FAIL(dmm_lease_release(g, pool_lease));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(hp));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(hw));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
    dmm_driver_census cen = {.size = sizeof cen};
    DMM_OK_OR_FAIL(host->ops->census(host, &cen));
    assert_int_equal(cen.handles + cen.mapped_bytes + cen.reserved_bytes, 0);
    dmm_driver_destroy(host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(leases_reserve_grow_shrink_release),
        cmocka_unit_test(refused_request_changes_nothing),
        cmocka_unit_test(overflow_on_unlimited_tier_is_refused),
        cmocka_unit_test(lowering_a_limit_revokes_nothing),
        cmocka_unit_test(ladder_asks_in_order_and_grants),
        cmocka_unit_test(charges_inside_a_callback_do_not_recurse),
        cmocka_unit_test(accounting_charges_and_refunds_a_lease),
        cmocka_unit_test(lease_stats_count_peaks_and_totals),
        cmocka_unit_test(holders_and_tiers),
        cmocka_unit_test(many_leases),
        cmocka_unit_test(pool_trim_is_the_first_rung),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
