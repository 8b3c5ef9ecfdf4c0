/* tests/common/arena_kit.h — helpers shared by the arena's tests (unit, fault, stress): what the
 * driver really holds (census), the arena's stats, the expensive check, and a tallying accounting
 * hook that can be told to refuse. Header-only, static. */
#ifndef DMM_ARENA_KIT_H
#define DMM_ARENA_KIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

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
    if ((uint64_t)s.mapped_bytes.current != c.mapped_bytes || (uint64_t)s.owned_bytes.current != c.handle_bytes ||
        (uint64_t)s.handles.current != c.handles)
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

static inline dmm_status kit_charge(void *user, dmm_device dev, dmm_axis axis, uint64_t bytes) {
    (void)dev;
    kit_tally *t = user;
    if (atomic_load(&t->refuse))
        return dmm_error_set(DMM_ERR_BUDGET, "test budget: refusing %llu bytes on purpose",
                             (unsigned long long)bytes);
    if (axis == DMM_AXIS_OWNED && t->owned_limit && atomic_load(&t->owned) + (int64_t)bytes > t->owned_limit)
        return dmm_error_set(DMM_ERR_BUDGET, "test budget: owned limit %lld reached", (long long)t->owned_limit);
    atomic_fetch_add(axis == DMM_AXIS_OWNED ? &t->owned : &t->mapped, (int64_t)bytes);
    atomic_fetch_add(&t->charges, 1);
    return DMM_OK;
}

static inline void kit_refund(void *user, dmm_device dev, dmm_axis axis, uint64_t bytes) {
    (void)dev;
    kit_tally *t = user;
    atomic_fetch_sub(axis == DMM_AXIS_OWNED ? &t->owned : &t->mapped, (int64_t)bytes);
    atomic_fetch_add(&t->refunds, 1);
}

static inline dmm_accounting kit_accounting(kit_tally *t) {
    dmm_accounting a = {t, kit_charge, kit_refund};
    return a;
}

/* The tally equals the arena's owned and mapped stats (what it charged = what it holds). */
static inline void kit_tally_matches(const kit_tally *t, dmm_mechanism *m) {
    dmm_stats s = kit_stats(m);
    assert_int_equal(atomic_load(&t->owned), s.owned_bytes.current);
    assert_int_equal(atomic_load(&t->mapped), s.mapped_bytes.current);
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
