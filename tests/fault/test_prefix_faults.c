/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_prefix_faults.c — shared prefixes over fault(host): the fault SWEEP of every
 * prefix operation and of every release that touches a prefix's memory.
 *
 * The sweep (the house pattern of test_arena_faults.c): for each operation and n = 1, 2, … plan
 * "fail call n of any driver op" (once; or every call from n on, so that the undo fails too; or a
 * sticky device loss), run the operation, and check after each step: the outcome is honest (FAILED
 * or an error without a rollback leak ⇒ census, stats and accounting unchanged; COMPLETE ⇒ the
 * census's mapped bytes fell by exactly unmapped_bytes; QUARANTINED ⇒ the same, and
 * residual_owned_bytes is accounted for by new poisoned or quarantined bytes); dmm_arena_check
 * passes; the stats equal the driver's census and the accounting tally equals the stats; every
 * mapping that is still there shows the prefix's bytes; the next 1,000 allocations never touch a
 * quarantined or poisoned address; and the teardown (releases, the prefix's release, destroy)
 * leaves the driver and the tally at zero. A lost device answers every prefix call DEVICE_LOST
 * without a driver call, and confirm_context_terminated discharges the prefix too.
 *
 * Operations swept: prefix_create (makes no driver call), prefix_commit of mapped pieces and of
 * parked pieces (the owner gone), the decommit and the release of a sharer, the release of the
 * owner while a sharer maps the prefix, prefix_release of parked pieces (with and without a cache)
 * and of mapped ones, and the release of the last sharer once owner and prefix are gone. */
#include "arena_kit.h"

#include <stdio.h>
#include <stdlib.h>

enum { PBYTES = 6 * 1024 * 1024, OBYTES = 8 * 1024 * 1024 };

typedef struct env {
    dmm_driver *host, *fault;
    dmm_mechanism *m; /* NULL once destroyed */
    kit_tally tally;
    dmm_accounting acct;
    dmm_allocation owner, s1, s2;
    bool owner_live, s1_live, s2_live;
    bool s1_mapped, s2_mapped; /* the sharer maps the prefix at its offset 0 */
    dmm_prefix p;
    bool p_live;
} env;

static unsigned char pat(size_t k) { return (unsigned char)(k * 29 + (k >> 12) * 3 + 5); }

static void env_init(env *e, uint64_t cache_limit) {
    memset(e, 0, sizeof *e);
    kit_fault_drivers_open(&e->host, &e->fault);
    e->acct = kit_accounting(&e->tally);
    dmm_arena_config c = kit_config(2 * GIB, 2 * MIB, cache_limit, &e->acct);
    DMM_OK_OR_FAIL(dmm_arena_create(e->fault, &c, &e->m));
}

static void expect_prefix_bytes(const void *p, const char *what) {
    const unsigned char *q = p;
    for (size_t k = 0; k < PBYTES; k += 4093)
        if (q[k] != pat(k)) fail_msg("%s: byte %zu is 0x%02x, expected 0x%02x", what, k, q[k], pat(k));
}

/* Every place that still maps the prefix shows its bytes. */
static void env_contents_intact(env *e) {
    if (e->owner_live) expect_prefix_bytes(e->owner.ptr, "the owner");
    if (e->s1_live && e->s1_mapped) expect_prefix_bytes(e->s1.ptr, "sharer 1");
    if (e->s2_live && e->s2_mapped) expect_prefix_bytes(e->s2.ptr, "sharer 2");
}

static void release_live(env *e, dmm_allocation *a, bool *live) {
    if (!*live) return;
    dmm_release_outcome o = dmm_mechanism_release(e->m, a);
    if (o.state == DMM_RELEASE_FAILED) fail_msg("cleanup release FAILED: %s", dmm_last_error());
    *live = false;
}

static void env_end(env *e) {
    DMM_OK_OR_FAIL(dmm_fault_clear(e->fault));
    if (e->m != NULL) {
        release_live(e, &e->s1, &e->s1_live);
        release_live(e, &e->owner, &e->owner_live);
        release_live(e, &e->s2, &e->s2_live);
        if (e->p_live) {
            dmm_release_outcome o = dmm_prefix_release(e->m, &e->p);
            if (o.state == DMM_RELEASE_FAILED) fail_msg("cleanup prefix release FAILED: %s", dmm_last_error());
            e->p_live = false;
        }
        kit_arena_close(&e->m, e->fault);
    }
    kit_fault_drivers_close(e->host, e->fault, &e->tally);
}

/* ---- one step of a sweep ---- */

typedef kit_result result;
typedef kit_snapshot snapshot;

static snapshot snap(env *e) { return kit_snap(e->fault, e->m, &e->tally); }

/* A handle mapped at several places is owned once, however many of its mappings stick: aliased. */
static void honest(env *e, const result *r, const snapshot *b, bool lost) {
    kit_honest(e->fault, e->m, &e->tally, r, b, lost, true);
}

typedef struct sweep_case {
    const char *name;
    uint64_t cache_limit;
    void (*setup)(env *e);
    result (*run)(env *e);
    void (*after)(env *e, const result *r, bool lost); /* update the env's live set; may assert more */
    bool makes_driver_calls;
} sweep_case;

typedef enum mode { ONCE, STICKY, LOST } mode;

/* A lost arena answers every call DEVICE_LOST without a driver call; confirm discharges it all. */
static void lost_battery(env *e) {
    uint64_t calls = dmm_fault_calls(e->fault, DMM_OP_ANY);
    int64_t owned = dmm_atomic_load_seq_cst(&e->tally.owned), mapped = dmm_atomic_load_seq_cst(&e->tally.mapped);
    dmm_allocation *live[] = {e->owner_live ? &e->owner : NULL, e->s1_live ? &e->s1 : NULL,
                              e->s2_live ? &e->s2 : NULL};
    for (size_t i = 0; i < 3; i++) {
        if (live[i] == NULL) continue;
        dmm_release_outcome o = dmm_mechanism_release(e->m, live[i]);
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
        dmm_prefix q;
        assert_int_equal(dmm_prefix_create(e->m, live[i], (dmm_range){0, 2 * MIB}, &q), DMM_ERR_DEVICE_LOST);
        if (e->p_live) {
            assert_int_equal(dmm_prefix_commit(e->m, &e->p, live[i], 0), DMM_ERR_DEVICE_LOST);
            uint64_t own, map;
            assert_int_equal(dmm_prefix_cost(e->m, &e->p, live[i], 0, &own, &map), DMM_ERR_DEVICE_LOST);
        }
    }
    if (e->p_live) {
        dmm_release_outcome o = dmm_prefix_release(e->m, &e->p);
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
    }
    assert_int_equal(dmm_mechanism_destroy(e->m), DMM_ERR_BUSY);
    kit_lost_confirm_destroy(e->fault, e->m, &e->tally, calls, owned, mapped); /* the prefix went with it */
    e->m = NULL;
    dmm_driver_destroy(e->fault);
    dmm_driver_destroy(e->host);
}

static int sweep(const sweep_case *k, mode md, int seen[3]) {
    int steps = 0;
    for (uint64_t n = 1;; n++) {
        if (n > 400) fail_msg("%s: the sweep did not end", k->name);
        env e;
        env_init(&e, k->cache_limit);
        k->setup(&e);
        KIT_CHECK(e.m);
        snapshot before = snap(&e);
        uint64_t injected = dmm_fault_injected(e.fault);
        DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, n, md == ONCE ? 1 : UINT32_MAX,
                                      md == LOST ? DMM_ERR_DEVICE_LOST : DMM_ERR_DRIVER));
        result r = k->run(&e);
        seen[r.is_outcome ? dmm_release_state_of(&r.o) : r.status == DMM_OK ? 0 : 2]++;
        bool hit = dmm_fault_injected(e.fault) != injected;
        if (md != LOST || !hit) DMM_OK_OR_FAIL(dmm_fault_clear(e.fault));
        steps++;
        honest(&e, &r, &before, md == LOST);
        k->after(&e, &r, md == LOST && hit);
        env_contents_intact(&e);
        if (md == LOST && hit) {
            lost_battery(&e);
            continue;
        }
        DMM_OK_OR_FAIL(dmm_fault_clear(e.fault));
        kit_reissue_check(e.m);
        env_contents_intact(&e);
        env_end(&e);
        if (!hit) {
            if (r.is_outcome) assert_int_equal(r.o.state, DMM_RELEASE_COMPLETE);
            else if (r.status != DMM_OK) fail_msg("%s: failed without a fault: %s", k->name, dmm_last_error());
            break;
        }
    }
    return steps;
}

/* ---- setups ---- */

/* The owner (8 MiB, 4 chunks of 2 MiB) fills its first 6 MiB; the prefix is those 3 chunks. */
static void setup_prefix(env *e) {
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e->m, OBYTES, 0, &e->owner));
    e->owner_live = true;
    for (size_t k = 0; k < PBYTES; k++) ((unsigned char *)e->owner.ptr)[k] = pat(k);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e->m, OBYTES, 0, NULL, 0, &e->s1));
    e->s1_live = true;
}

static void setup_owner_and_prefix(env *e) {
    setup_prefix(e);
    DMM_OK_OR_FAIL(dmm_prefix_create(e->m, &e->owner, (dmm_range){0, PBYTES}, &e->p));
    e->p_live = true;
}

/* ... and the owner released: the prefix's handles are parked */
static void setup_parked(env *e) {
    setup_owner_and_prefix(e);
    assert_int_equal(dmm_mechanism_release(e->m, &e->owner).state, DMM_RELEASE_COMPLETE);
    e->owner_live = false;
    assert_int_equal(kit_census(e->fault).mapped_bytes, 0);
    /* the prefix's 3 handles are parked (the owner's 4th went to the cache, if there is one) */
    assert_int_equal(kit_census(e->fault).handles, 3 + (uint64_t)kit_stats(e->m).cached_bytes.current / (2 * MIB));
}

/* ... and committed into sharer 1 (and a second sharer, sharer 2) */
static void setup_shared(env *e) {
    setup_owner_and_prefix(e);
    DMM_OK_OR_FAIL(dmm_prefix_commit(e->m, &e->p, &e->s1, 0));
    e->s1_mapped = true;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e->m, OBYTES, 0, NULL, 0, &e->s2));
    e->s2_live = true;
    DMM_OK_OR_FAIL(dmm_prefix_commit(e->m, &e->p, &e->s2, 0));
    e->s2_mapped = true;
}

/* sharer 2 only: the owner and the prefix object are gone */
static void setup_last_sharer(env *e) {
    setup_shared(e);
    assert_int_equal(dmm_mechanism_release(e->m, &e->owner).state, DMM_RELEASE_COMPLETE);
    e->owner_live = false;
    assert_int_equal(dmm_mechanism_release(e->m, &e->s1).state, DMM_RELEASE_COMPLETE);
    e->s1_live = false;
    assert_int_equal(dmm_prefix_release(e->m, &e->p).state, DMM_RELEASE_COMPLETE);
    e->p_live = false;
}

/* ---- operations ---- */

static result op_create(env *e) {
    result r = {false, DMM_OK, {0}, false};
    r.status = dmm_prefix_create(e->m, &e->owner, (dmm_range){0, PBYTES}, &e->p);
    return r;
}

static void after_create(env *e, const result *r, bool lost) {
    (void)lost;
    e->p_live = r->status == DMM_OK;
}

static result op_commit(env *e) {
    result r = {false, DMM_OK, {0}, false};
    r.status = dmm_prefix_commit(e->m, &e->p, &e->s1, 0);
    return r;
}

static void after_commit(env *e, const result *r, bool lost) {
    uint64_t committed = 0;
    e->s1_mapped = r->status == DMM_OK;
    if (lost) return;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e->m, &e->s1, &committed));
    assert_int_equal(committed, r->status == DMM_OK ? PBYTES : 0); /* a failed commit maps nothing */
    assert_int_equal(kit_census(e->fault).handles, e->owner_live ? 4 : 3); /* never a new handle */
}

static result op_decommit_sharer(env *e) {
    result r = {true, DMM_OK, {0}, false};
    r.o = dmm_mechanism_decommit(e->m, &e->s1, (dmm_range){0, PBYTES});
    return r;
}

static void after_decommit_sharer(env *e, const result *r, bool lost) {
    dmm_release_state st = dmm_release_state_of(&r->o);
    if (st != DMM_RELEASE_FAILED) e->s1_mapped = false; /* wholly or partly unmapped */
    if (lost) return;
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e->m, &e->s1, &committed));
    if (st == DMM_RELEASE_FAILED) {
        assert_int_equal(committed, PBYTES); /* restored, read-only again: contents checked after */
        dmm_test_error_mentions("mapped again", NULL);
    }
    if (st == DMM_RELEASE_COMPLETE) assert_int_equal(committed, 0);
    assert_int_equal(kit_census(e->fault).handles, 4); /* the owner and sharer 2 keep the memory */
}

static result op_release_sharer(env *e) {
    result r = {true, DMM_OK, {0}, false};
    r.o = dmm_mechanism_release(e->m, &e->s1);
    return r;
}

static void after_release_sharer(env *e, const result *r, bool lost) {
    dmm_release_state st = dmm_release_state_of(&r->o);
    if (st != DMM_RELEASE_FAILED) e->s1_live = false;
    if (st == DMM_RELEASE_QUARANTINED) {
        bool q = false;
        DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e->m, e->s1.ptr, e->s1.bytes, &q));
        assert_true(q);
    }
    if (!lost && st != DMM_RELEASE_FAILED)
        assert_int_equal(dmm_mechanism_release(e->m, &e->s1).state, DMM_RELEASE_FAILED); /* a second release */
}

static result op_release_owner(env *e) {
    result r = {true, DMM_OK, {0}, false};
    r.o = dmm_mechanism_release(e->m, &e->owner);
    return r;
}

static void after_release_owner(env *e, const result *r, bool lost) {
    (void)lost;
    if (dmm_release_state_of(&r->o) != DMM_RELEASE_FAILED) e->owner_live = false;
    if (!lost) assert_true(kit_census(e->fault).handles >= 3); /* the sharers keep the prefix's memory */
}

static result op_release_last_sharer(env *e) {
    result r = {true, DMM_OK, {0}, false};
    r.o = dmm_mechanism_release(e->m, &e->s2);
    return r;
}

static void after_release_last_sharer(env *e, const result *r, bool lost) {
    (void)lost;
    dmm_release_state st = dmm_release_state_of(&r->o);
    if (st != DMM_RELEASE_FAILED) e->s2_live = false;
    if (st == DMM_RELEASE_COMPLETE) assert_int_equal(kit_census(e->fault).handles, 0); /* the last holder */
}

static result op_prefix_release(env *e) {
    result r = {true, DMM_OK, {0}, false};
    r.o = dmm_prefix_release(e->m, &e->p);
    return r;
}

static void after_prefix_release(env *e, const result *r, bool lost) {
    dmm_release_state st = dmm_release_state_of(&r->o);
    assert_int_equal(r->o.unmapped_bytes, 0);
    if (st != DMM_RELEASE_FAILED) e->p_live = false;
    if (lost) return;
    if (st == DMM_RELEASE_FAILED) {
        dmm_test_error_mentions("nothing was changed", NULL);
        return;
    }
    dmm_release_outcome again = dmm_prefix_release(e->m, &e->p); /* a second release */
    assert_int_equal(again.state, DMM_RELEASE_FAILED);
    assert_int_equal(again.failure, DMM_ERR_UNKNOWN_ALLOCATION);
}

static const sweep_case cases[] = {
    {"prefix_create", 0, setup_prefix, op_create, after_create, false},
    {"prefix_commit (mapped pieces)", 0, setup_owner_and_prefix, op_commit, after_commit, true},
    {"prefix_commit (parked pieces)", 0, setup_parked, op_commit, after_commit, true},
    {"decommit of a sharer", 0, setup_shared, op_decommit_sharer, after_decommit_sharer, true},
    {"release of a sharer", 0, setup_shared, op_release_sharer, after_release_sharer, true},
    {"release of the owner (shared)", 0, setup_shared, op_release_owner, after_release_owner, true},
    {"release of the last sharer", 0, setup_last_sharer, op_release_last_sharer, after_release_last_sharer, true},
    {"prefix_release (parked)", 0, setup_parked, op_prefix_release, after_prefix_release, true},
    {"prefix_release (parked, cache 4 MiB)", 4 * MIB, setup_parked, op_prefix_release, after_prefix_release, true},
    {"prefix_release (mapped)", 0, setup_shared, op_prefix_release, after_prefix_release, false},
};

static void fault_sweep_every_prefix_operation(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int seen[3] = {0, 0, 0};
        int a = sweep(&cases[i], ONCE, seen), b = sweep(&cases[i], STICKY, seen), c = sweep(&cases[i], LOST, seen);
        print_message("  %-40s %3d + %3d + %3d steps (once, sticky, device lost): %d complete/ok, %d quarantined, "
                      "%d failed\n",
                      cases[i].name, a, b, c, seen[0], seen[1], seen[2]);
        assert_true(seen[0] >= 3); /* each sweep ends in success */
        if (cases[i].makes_driver_calls) assert_true(seen[2] > 0 || seen[1] > 0);
        else assert_true(a == 1 && b == 1 && c == 1); /* no driver call: nothing to fail */
    }
}

/* A failed handle release of a parked prefix: QUARANTINED with the handle owned, never reused. */
static void a_failed_handle_release_quarantines_the_prefix_handle(void **state) {
    (void)state;
    env e;
    env_init(&e, 0);
    setup_parked(&e);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_RELEASE, 2, 1, DMM_ERR_DRIVER)); /* the 2nd of 3 */
    snapshot before = snap(&e);
    dmm_release_outcome o = dmm_prefix_release(e.m, &e.p);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.residual_owned_bytes, 2 * MIB);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    dmm_test_error_mentions("dmm_prefix_release", "QUARANTINED", "stay owned", NULL);
    e.p_live = false;
    result r = {true, DMM_OK, o, false};
    honest(&e, &r, &before, false);
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.owned), 2 * MIB);
    assert_int_equal(kit_stats(e.m).quarantined_handles, 1);
    assert_int_equal(kit_census(e.fault).handles, 1);
    /* every release failing changes nothing: FAILED, the prefix stays live */
    env e2;
    env_init(&e2, 0);
    setup_parked(&e2);
    DMM_OK_OR_FAIL(dmm_fault_plan(e2.fault, DMM_OP_RELEASE, 1, UINT32_MAX, DMM_ERR_DRIVER));
    before = snap(&e2);
    o = dmm_prefix_release(e2.m, &e2.p);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    dmm_test_error_mentions("every one of its 3 handle release(s) failed", "may be released again", NULL);
    r.o = o;
    honest(&e2, &r, &before, false);
    DMM_OK_OR_FAIL(dmm_fault_clear(e2.fault));
    DMM_OK_OR_FAIL(dmm_prefix_commit(e2.m, &e2.p, &e2.s1, 0)); /* still a prefix */
    e2.s1_mapped = true;
    env_contents_intact(&e2);
    env_end(&e2);
    kit_reissue_check(e.m);
    env_end(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fault_sweep_every_prefix_operation),
        cmocka_unit_test(a_failed_handle_release_quarantines_the_prefix_handle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
