/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/arena_kit.h — helpers shared by the arena's tests (unit, fault, stress): what the
 * driver really holds (census), the arena's stats, the expensive check, and a tallying accounting
 * hook that can be told to refuse. Header-only, static. */
#ifndef DMM_ARENA_KIT_H
#define DMM_ARENA_KIT_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomics.h"
#include "testkit.h"

static inline dmm_driver_census kit_census(dmm_driver *d) {
    dmm_driver_census c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    DMM_OK_OR_FAIL(d->ops->census(d, &c));
    return c;
}

static inline dmm_stats kit_stats(dmm_mechanism *m) {
    dmm_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &s));
    return s;
}

#define KIT_CHECK(m) DMM_OK_OR_FAIL(dmm_arena_check(m))

/* The arena's view of physical memory equals what the driver really has. */
static inline void kit_stats_match_census(dmm_mechanism *m, dmm_driver *d) {
    dmm_stats s = kit_stats(m);
    dmm_driver_census c = kit_census(d);
    /* imported handles are the driver's but not the arena's to own (dmm/share.h) */
    if ((uint64_t)s.mapped_bytes.current != c.mapped_bytes ||
        (uint64_t)s.owned_bytes.current != c.handle_bytes - c.imported_bytes ||
        (uint64_t)s.imported_bytes.current != c.imported_bytes || (uint64_t)s.handles.current != c.handles - c.imported_handles)
        fail_msg("stats (mapped %lld, owned %lld, handles %lld) differ from the driver's census (mapped %llu, "
                 "handle bytes %llu, handles %llu)",
                 (long long)s.mapped_bytes.current, (long long)s.owned_bytes.current, (long long)s.handles.current,
                 (unsigned long long)c.mapped_bytes, (unsigned long long)c.handle_bytes,
                 (unsigned long long)c.handles);
}

/* An accounting hook that tallies both axes and refuses when told to (or above a limit). */
typedef struct kit_tally {
    _Atomic int64_t owned, mapped;
    _Atomic uint64_t charges, refunds;
    _Atomic int refuse;          /* refuse every charge */
    _Atomic int64_t owned_limit; /* 0 = none */
} kit_tally;

static inline dmm_status kit_charge(void *user, dmm_device_id dev, dmm_axis axis, uint64_t bytes) {
    (void)dev;
    kit_tally *t = user;
    if (dmm_atomic_load_seq_cst(&t->refuse))
        return dmm_error_set(DMM_ERR_BUDGET, "test budget: refusing %llu bytes on purpose",
                             (unsigned long long)bytes);
    if (axis == DMM_AXIS_OWNED && t->owned_limit &&
        dmm_atomic_load_seq_cst(&t->owned) + (int64_t)bytes > t->owned_limit)
        return dmm_error_set(DMM_ERR_BUDGET, "test budget: owned limit %lld reached", (long long)t->owned_limit);
    dmm_atomic_add_seq_cst(axis == DMM_AXIS_OWNED ? &t->owned : &t->mapped, (int64_t)bytes);
    dmm_atomic_add_seq_cst(&t->charges, 1);
    return DMM_OK;
}

static inline void kit_refund(void *user, dmm_device_id dev, dmm_axis axis, uint64_t bytes) {
    (void)dev;
    kit_tally *t = user;
    dmm_atomic_sub_seq_cst(axis == DMM_AXIS_OWNED ? &t->owned : &t->mapped, (int64_t)bytes);
    dmm_atomic_add_seq_cst(&t->refunds, 1);
}

static inline dmm_accounting kit_accounting(kit_tally *t) {
    dmm_accounting a = {t, kit_charge, kit_refund};
    return a;
}

/* The tally equals the arena's owned and mapped stats (what it charged = what it holds). */
static inline void kit_tally_matches(const kit_tally *t, dmm_mechanism *m) {
    dmm_stats s = kit_stats(m);
    assert_int_equal(dmm_atomic_load_seq_cst(&t->owned), s.owned_bytes.current);
    assert_int_equal(dmm_atomic_load_seq_cst(&t->mapped), s.mapped_bytes.current);
}

/* Everything charged was refunded. */
static inline void kit_tally_zero(const kit_tally *t) {
    assert_int_equal(dmm_atomic_load_seq_cst(&t->owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&t->mapped), 0);
}

/* What a fault sweep compares around one step: the driver's census, the arena's stats, the tally. */
typedef struct kit_snapshot {
    dmm_driver_census c;
    dmm_stats s;
    int64_t owned, mapped;
} kit_snapshot;

static inline kit_snapshot kit_snap(dmm_driver *d, dmm_mechanism *m, const kit_tally *t) {
    kit_snapshot x;
    x.c = kit_census(d);
    x.s = kit_stats(m);
    x.owned = dmm_atomic_load_seq_cst(&t->owned);
    x.mapped = dmm_atomic_load_seq_cst(&t->mapped);
    return x;
}

/* A step that claimed "nothing changed" changed nothing. `lost`: a lost arena refunds nothing, so the
 * tally may stay above the stats (confirm discharges it) but never falls. */
static inline void kit_unchanged(const kit_snapshot *b, const kit_snapshot *a, const char *what, bool lost) {
    if (b->c.mapped_bytes != a->c.mapped_bytes || b->c.handles != a->c.handles ||
        b->c.handle_bytes != a->c.handle_bytes || b->s.committed_bytes.current != a->s.committed_bytes.current ||
        b->s.mapped_bytes.current != a->s.mapped_bytes.current || b->s.owned_bytes.current != a->s.owned_bytes.current ||
        b->s.allocations.current != a->s.allocations.current || b->s.cached_bytes.current != a->s.cached_bytes.current ||
        b->s.handles.current != a->s.handles.current ||
        (!lost && (b->owned != a->owned || b->mapped != a->mapped)) || a->owned < b->owned || a->mapped < b->mapped)
        fail_msg("%s claimed nothing changed, but: census mapped %llu -> %llu, handles %llu -> %llu; committed %lld -> "
                 "%lld, owned %lld -> %lld, allocations %lld -> %lld, tally owned %lld -> %lld, mapped %lld -> %lld",
                 what, (unsigned long long)b->c.mapped_bytes, (unsigned long long)a->c.mapped_bytes,
                 (unsigned long long)b->c.handles, (unsigned long long)a->c.handles,
                 (long long)b->s.committed_bytes.current, (long long)a->s.committed_bytes.current,
                 (long long)b->s.owned_bytes.current, (long long)a->s.owned_bytes.current,
                 (long long)b->s.allocations.current, (long long)a->s.allocations.current, (long long)b->owned,
                 (long long)a->owned, (long long)b->mapped, (long long)a->mapped);
}

/* The fault tests' drivers: the host driver and the fault driver over it. */
static inline void kit_fault_drivers_open(dmm_driver **host, dmm_driver **fault) {
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(*host, fault));
}

/* Their end: the driver holds nothing, everything charged to t (NULL: no tally) was refunded, both
 * destroyed. */
static inline void kit_fault_drivers_close(dmm_driver *host, dmm_driver *fault, const kit_tally *t) {
    dmm_test_census_zero(fault);
    if (t != NULL) kit_tally_zero(t);
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
}

/* The end of an arena with nothing live: the expensive check, the stats = the census, destroyed (*m = NULL). */
static inline void kit_arena_close(dmm_mechanism **m, dmm_driver *d) {
    KIT_CHECK(*m);
    kit_stats_match_census(*m, d);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(*m));
    *m = NULL;
}

/* What one step of a fault sweep returned: a release outcome, or a status. */
typedef struct kit_result {
    bool is_outcome;
    dmm_status status;
    dmm_release_outcome o;
    bool best_effort; /* drain/destroy: each handle given back counts; the stats must say which */
} kit_result;

/* The honesty checks every step of an arena's fault sweep makes (b: the snapshot before the step;
 * `lost`: the device may be lost, so the tally may stay above the stats). Always: the expensive check,
 * the stats = the census, the tally = the stats. FAILED (or an error status without a rollback leak, not
 * best effort) ⇒ nothing changed; COMPLETE ⇒ the mapped bytes fell by exactly unmapped_bytes;
 * QUARANTINED ⇒ the same, and residual_owned_bytes = the new poisoned + quarantined bytes, or, where
 * `aliased` (a handle mapped at several places is owned once, however many of its mappings stick),
 * between the new quarantined bytes and that sum. */
static inline void kit_honest(dmm_driver *d, dmm_mechanism *m, const kit_tally *t, const kit_result *r,
                              const kit_snapshot *b, bool lost, bool aliased) {
    KIT_CHECK(m);
    kit_stats_match_census(m, d);
    kit_snapshot a = kit_snap(d, m, t);
    if (!lost) kit_tally_matches(t, m);
    if (r->is_outcome) {
        dmm_release_state st = dmm_release_state_of(&r->o);
        int64_t fell = (int64_t)b->c.mapped_bytes - (int64_t)a.c.mapped_bytes;
        if (st == DMM_RELEASE_FAILED) {
            assert_int_not_equal(r->o.failure, DMM_OK);
            kit_unchanged(b, &a, "a FAILED outcome", lost);
        } else if (st == DMM_RELEASE_COMPLETE) {
            assert_int_equal(r->o.failure, DMM_OK);
            assert_int_equal(r->o.residual_owned_bytes, 0);
            assert_int_equal(fell, (int64_t)r->o.unmapped_bytes);
        } else {
            assert_int_not_equal(r->o.failure, DMM_OK);
            assert_int_equal(fell, (int64_t)r->o.unmapped_bytes);
            uint64_t newly_q = a.s.quarantined_bytes - b->s.quarantined_bytes;
            uint64_t newly_stuck = (a.s.poisoned_bytes - b->s.poisoned_bytes) + newly_q;
            if (!aliased) {
                assert_int_equal(r->o.residual_owned_bytes, newly_stuck);
            } else {
                assert_true(r->o.residual_owned_bytes <= newly_stuck);
                assert_true(r->o.residual_owned_bytes >= newly_q);
                assert_true(newly_stuck == 0 || r->o.residual_owned_bytes > 0);
            }
            assert_true(a.c.handle_bytes >= r->o.residual_owned_bytes);
        }
    } else if (r->status != DMM_OK && !r->best_effort) {
        if (a.s.rollback_leaks == b->s.rollback_leaks) kit_unchanged(b, &a, "a failed call without a rollback leak", lost);
        else dmm_test_error_mentions("could not fully undo", NULL);
    }
}

/* The end of a lost arena (its destroy was just refused): it made no driver call since `calls` and
 * refunded nothing (the tally still at owned / mapped); confirming the context's end discharges
 * everything without a driver call, and then the arena destroys. */
static inline void kit_lost_confirm_destroy(dmm_driver *d, dmm_mechanism *m, const kit_tally *t, uint64_t calls,
                                            int64_t owned, int64_t mapped) {
    KIT_CHECK(m);
    kit_stats_match_census(m, d);
    assert_int_equal(dmm_fault_calls(d, DMM_OP_ANY), calls);
    assert_int_equal(dmm_atomic_load_seq_cst(&t->owned), owned);
    assert_int_equal(dmm_atomic_load_seq_cst(&t->mapped), mapped);
    DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(m));
    kit_tally_zero(t);
    dmm_stats s = kit_stats(m);
    assert_int_equal(s.owned_bytes.current, 0);
    assert_int_equal(s.allocations.current, 0);
    KIT_CHECK(m);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    assert_int_equal(dmm_fault_calls(d, DMM_OP_ANY), calls);
}

/* Over the next 1,000 allocations of the arena (committed and VA-only, several sizes) no address is
 * quarantined or poisoned, and every one releases COMPLETE. */
static inline void kit_reissue_check(dmm_mechanism *m) {
    enum { N = 1000 };
    dmm_allocation *a = calloc(N, sizeof *a);
    assert_non_null(a);
    for (int i = 0; i < N; i++) {
        size_t sizes[] = {4 * 1024, 3 << 20, 300 * 1024, 64 * 1024};
        size_t bytes = sizes[i % 4];
        dmm_status s = i % 2 == 0 ? dmm_mechanism_allocate(m, bytes, 0, &a[i])
                                  : dmm_mechanism_allocate_committed(m, bytes, 0, NULL, 0, &a[i]);
        if (s != DMM_OK) fail_msg("allocation %d of the reissue check failed: %s", i, dmm_last_error());
        bool q = true;
        DMM_OK_OR_FAIL(dmm_arena_is_quarantined(m, a[i].ptr, a[i].bytes, &q));
        if (q) fail_msg("allocation %d at %p was handed out over quarantined or poisoned VA", i, a[i].ptr);
        if (i % 2 == 0) ((volatile char *)a[i].ptr)[bytes - 1] = 1;
    }
    KIT_CHECK(m);
    for (int i = 0; i < N; i++) {
        dmm_release_outcome o = dmm_mechanism_release(m, &a[i]);
        if (o.state != DMM_RELEASE_COMPLETE) fail_msg("reissue release %d: %s", i, dmm_last_error());
    }
    KIT_CHECK(m);
    free(a);
}

static inline dmm_arena_config kit_config(uint64_t reserve, uint64_t chunk_limit, uint64_t cache_limit,
                                          const dmm_accounting *acct) {
    dmm_arena_config c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.reserve_bytes = reserve;
    c.chunk_limit_bytes = chunk_limit;
    c.cache_limit_bytes = cache_limit;
    c.accounting = acct;
    return c;
}

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

#endif
