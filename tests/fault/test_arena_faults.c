/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_arena_faults.c — the arena over fault(host): the fault SWEEP of every public
 * arena operation, the partial-failure contracts, and device loss.
 *
 * The sweep (SQLite's "fail call n" loop): for each operation and n = 1, 2, … plan "fail call n of
 * any driver op" (once; or every call from n on, so that the undo fails too; or a sticky device
 * loss), run the operation, and check that it was honest: FAILED (or an error status without a
 * rollback leak) ⇒ the driver's census and the stats are unchanged; QUARANTINED ⇒ the mapped bytes
 * fell by exactly unmapped_bytes and residual_owned_bytes equals the new poisoned + quarantined
 * bytes; always: the expensive check passes, the stats equal the census, the accounting tally
 * equals the stats, and the next 1,000 allocations never touch a quarantined or poisoned address.
 * The loop stops when the operation makes fewer than n calls. Every step ends with nothing live.
 * Aliases (one handle mapped at two places) are swept too: the alias itself, the decommit of the
 * old place, and the release of both places; the census equality (owned = the driver's handle
 * bytes, mapped = its mapped bytes) holds after every step although mapped exceeds owned. */
#include "arena_kit.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- environment ---- */

enum { MAX_LIVE = 8 };

typedef struct env {
    dmm_driver *host, *fault;
    dmm_mechanism *m; /* NULL once destroyed */
    kit_tally tally;
    dmm_accounting acct;
    dmm_allocation live[MAX_LIVE];
    bool is_live[MAX_LIVE];
    unsigned char *pattern[MAX_LIVE]; /* expected contents of live[i] (all of it committed), or NULL */
    bool aliased;                     /* some handle is mapped at two places */
} env;

static void env_init(env *e, uint64_t chunk_limit, uint64_t cache_limit) {
    memset(e, 0, sizeof *e);
    kit_fault_drivers_open(&e->host, &e->fault);
    e->acct = kit_accounting(&e->tally);
    dmm_arena_config c = kit_config(1 * GIB, chunk_limit, cache_limit, &e->acct);
    DMM_OK_OR_FAIL(dmm_arena_create(e->fault, &c, &e->m));
}

static int env_add(env *e, dmm_allocation a, bool fill) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (!e->is_live[i]) {
            e->live[i] = a;
            e->is_live[i] = true;
            if (fill) {
                e->pattern[i] = malloc(a.bytes);
                for (size_t k = 0; k < a.bytes; k++) e->pattern[i][k] = (unsigned char)(k * 31 + i * 7 + (k >> 12));
                memcpy(a.ptr, e->pattern[i], a.bytes);
            }
            return i;
        }
    fail_msg("%s", "too many live allocations in the test env");
    return -1;
}

static void env_drop(env *e, int i) {
    e->is_live[i] = false;
    free(e->pattern[i]);
    e->pattern[i] = NULL;
}

static void env_contents_intact(env *e) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (e->is_live[i] && e->pattern[i] != NULL && memcmp(e->live[i].ptr, e->pattern[i], e->live[i].bytes) != 0)
            fail_msg("live allocation %d lost its contents", i);
}

/* Ends the env: releases what is live (never FAILED now that no fault is planned), destroys the
 * arena, and checks that nothing is left anywhere. */
static void env_end(env *e) {
    DMM_OK_OR_FAIL(dmm_fault_clear(e->fault));
    if (e->m != NULL) {
        for (int i = 0; i < MAX_LIVE; i++)
            if (e->is_live[i]) {
                dmm_release_outcome o = dmm_mechanism_release(e->m, &e->live[i]);
                if (o.state == DMM_RELEASE_FAILED)
                    fail_msg("cleanup release FAILED: %s", dmm_last_error());
                env_drop(e, i);
            }
        kit_arena_close(&e->m, e->fault);
    }
    kit_fault_drivers_close(e->host, e->fault, &e->tally);
}

/* ---- one step of a sweep ---- */

typedef kit_result result;
typedef kit_snapshot snapshot;

static snapshot snap(env *e) { return kit_snap(e->fault, e->m, &e->tally); }

/* The honesty checks every step makes. */
static void honest(env *e, const result *r, const snapshot *b, bool lost) {
    kit_honest(e->fault, e->m, &e->tally, r, b, lost, e->aliased);
}

typedef struct sweep_case {
    const char *name;
    uint64_t chunk_limit, cache_limit;
    void (*setup)(env *e);
    result (*run)(env *e);
    /* the env's live set after the run (remove what the op released); may assert more. `lost`: the
     * arena lost its device (queries answer DEVICE_LOST) */
    void (*after)(env *e, const result *r, bool lost);
} sweep_case;

typedef enum mode { ONCE, STICKY, LOST } mode;

/* Every op of a lost arena reports DEVICE_LOST and makes no driver call; nothing is refunded. */
static void lost_battery(env *e) {
    uint64_t calls = dmm_fault_calls(e->fault, DMM_OP_ANY);
    int64_t owned = dmm_atomic_load_seq_cst(&e->tally.owned), mapped = dmm_atomic_load_seq_cst(&e->tally.mapped);
    dmm_allocation x;
    assert_int_equal(dmm_mechanism_allocate(e->m, 4096, 0, &x), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("lost its device", "dmm_arena_confirm_context_terminated", NULL);
    assert_int_equal(dmm_mechanism_allocate_committed(e->m, 4096, 0, NULL, 0, &x), DMM_ERR_DEVICE_LOST);
    for (int i = 0; i < MAX_LIVE; i++) {
        if (!e->is_live[i]) continue;
        uint64_t v;
        assert_int_equal(dmm_mechanism_commit(e->m, &e->live[i], (dmm_range){0, 1}, &v), DMM_ERR_DEVICE_LOST);
        assert_int_equal(dmm_mechanism_committed_bytes(e->m, &e->live[i], &v), DMM_ERR_DEVICE_LOST);
        dmm_release_outcome o = dmm_mechanism_decommit(e->m, &e->live[i], (dmm_range){0, e->live[i].bytes});
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
        o = dmm_mechanism_release(e->m, &e->live[i]);
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
    }
    assert_int_equal(dmm_arena_drain_cache(e->m), DMM_ERR_DEVICE_LOST);
    assert_int_equal(dmm_mechanism_destroy(e->m), DMM_ERR_BUSY);
    dmm_test_error_mentions("arena destroy", "lost its device", "confirm_context_terminated", NULL);
    /* the context is torn down: discharge everything, without a driver call */
    kit_lost_confirm_destroy(e->fault, e->m, &e->tally, calls, owned, mapped);
    e->m = NULL;
    for (int i = 0; i < MAX_LIVE; i++)
        if (e->is_live[i]) env_drop(e, i);
    /* the host "context" goes with its driver: what the arena held is given back there */
    dmm_driver_destroy(e->fault);
    dmm_driver_destroy(e->host);
}

/* seen[state] counts the outcomes (or, for status calls: [0] OK, [2] errors) a sweep produced */
static int sweep(const sweep_case *k, mode md, int seen[3]) {
    int steps = 0;
    for (uint64_t n = 1;; n++) {
        if (n > 400) fail_msg("%s: the sweep did not end", k->name);
        env e;
        env_init(&e, k->chunk_limit, k->cache_limit);
        if (k->setup) k->setup(&e);
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
        if (e.m == NULL) { /* destroy succeeded */
            if (hit) fail_msg("%s: destroy succeeded although call %llu failed", k->name, (unsigned long long)n);
            env_end(&e);
            break;
        }
        honest(&e, &r, &before, md == LOST);
        if (k->after) k->after(&e, &r, md == LOST && hit);
        env_contents_intact(&e);
        if (md == LOST && hit) {
            lost_battery(&e);
            continue;
        }
        DMM_OK_OR_FAIL(dmm_fault_clear(e.fault));
        kit_reissue_check(e.m);
        env_end(&e);
        if (!hit) {
            if (r.is_outcome) assert_int_equal(r.o.state, DMM_RELEASE_COMPLETE);
            else if (r.status != DMM_OK) fail_msg("%s: failed without a fault: %s", k->name, dmm_last_error());
            break;
        }
    }
    return steps;
}

static void run_sweeps(const sweep_case *k, int seen[3]) {
    int a = sweep(k, ONCE, seen), b = sweep(k, STICKY, seen), c = sweep(k, LOST, seen);
    print_message("  %-34s %3d + %3d + %3d steps (once, sticky, device lost): %d complete/ok, %d quarantined, "
                  "%d failed\n",
                  k->name, a, b, c, seen[0], seen[1], seen[2]);
}

/* ---- the operations ---- */

static void keep_if_ok(env *e, const result *r, bool lost) {
    (void)e;
    (void)r;
    (void)lost;
}

static result op_allocate(env *e) {
    result r = {false, DMM_OK, {0}, false};
    dmm_allocation a;
    r.status = dmm_mechanism_allocate(e->m, 5 * MIB, 0, &a);
    if (r.status == DMM_OK) env_add(e, a, true);
    return r;
}

static void setup_cache(env *e) {
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e->m, 4 * MIB, 0, &a));
    dmm_release_outcome o = dmm_mechanism_release(e->m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(kit_stats(e->m).cached_bytes.current, 4 * MIB);
}

static result op_allocate_committed(env *e) {
    result r = {false, DMM_OK, {0}, false};
    dmm_range ranges[] = {{0, 1}, {6 * MIB, 5 * MIB}, {7 * MIB, 1 * MIB}};
    dmm_allocation a;
    r.status = dmm_mechanism_allocate_committed(e->m, 16 * MIB, 0, ranges, 3, &a);
    if (r.status == DMM_OK) env_add(e, a, false);
    return r;
}

static void setup_va_slot(env *e) {
    dmm_range keep = {4 * MIB, 2 * MIB}; /* granule 2 already committed: the commit shares it */
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e->m, 16 * MIB, 0, &keep, 1, &a));
    env_add(e, a, false);
}

static result op_commit(env *e) {
    result r = {false, DMM_OK, {0}, false};
    uint64_t newly = 0;
    r.status = dmm_mechanism_commit(e->m, &e->live[0], (dmm_range){1 * MIB, 9 * MIB}, &newly);
    if (r.status == DMM_OK) assert_int_equal(newly, 8 * MIB);
    return r;
}

static void after_commit(env *e, const result *r, bool lost) {
    uint64_t committed = 0;
    if (lost) return;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e->m, &e->live[0], &committed));
    if (r->status == DMM_OK) {
        assert_int_equal(committed, 10 * MIB);
        memset(e->live[0].ptr, 3, 10 * MIB);
    } else {
        assert_int_equal(committed, 2 * MIB); /* the failed commit took nothing */
        ((volatile char *)e->live[0].ptr)[4 * MIB] = 1;
    }
}

static void setup_three_chunks(env *e) {
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e->m, 6 * MIB, 0, &a));
    env_add(e, a, true);
}

static result op_decommit(env *e) {
    result r = {true, DMM_OK, {0}, false};
    r.o = dmm_mechanism_decommit(e->m, &e->live[0], (dmm_range){0, 6 * MIB});
    return r;
}

static void after_decommit(env *e, const result *r, bool lost) {
    dmm_release_state st = dmm_release_state_of(&r->o);
    uint64_t committed = 0;
    if (lost) {
        if (st != DMM_RELEASE_FAILED) {
            free(e->pattern[0]);
            e->pattern[0] = NULL;
        }
        return;
    }
    if (st == DMM_RELEASE_FAILED) {
        DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e->m, &e->live[0], &committed));
        assert_int_equal(committed, 6 * MIB); /* restored: contents are checked by env_contents_intact */
        dmm_test_error_mentions("mapped again", "nothing was changed", NULL);
    } else {
        free(e->pattern[0]); /* the contents are gone (entirely or partly) */
        e->pattern[0] = NULL;
        if (st == DMM_RELEASE_COMPLETE) {
            DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e->m, &e->live[0], &committed));
            assert_int_equal(committed, 0);
            uint64_t newly;
            DMM_OK_OR_FAIL(dmm_mechanism_commit(e->m, &e->live[0], (dmm_range){0, 6 * MIB}, &newly));
            assert_int_equal(newly, 6 * MIB);
        }
    }
}

static result op_release(env *e) {
    result r = {true, DMM_OK, {0}, false};
    r.o = dmm_mechanism_release(e->m, &e->live[0]);
    return r;
}

static void after_release(env *e, const result *r, bool lost) {
    dmm_release_state st = dmm_release_state_of(&r->o);
    bool q = false;
    DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e->m, e->live[0].ptr, e->live[0].bytes, &q));
    if (st == DMM_RELEASE_FAILED) {
        assert_false(q); /* still live, contents checked by env_contents_intact */
        return;
    }
    if (st == DMM_RELEASE_QUARANTINED) assert_true(q);
    if (lost) {
        env_drop(e, 0);
        return;
    }
    dmm_release_outcome again = dmm_mechanism_release(e->m, &e->live[0]);
    assert_int_equal(again.state, DMM_RELEASE_FAILED);
    env_drop(e, 0);
}

static result op_drain(env *e) {
    result r = {false, DMM_OK, {0}, true};
    r.status = dmm_arena_drain_cache(e->m);
    return r;
}

static void setup_cache_and_poison(env *e) {
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e->m, 4 * MIB, 0, &a));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e->m, 4 * MIB, 0, &b));
    assert_int_equal(dmm_mechanism_release(e->m, &a).state, DMM_RELEASE_COMPLETE); /* two cached handles */
    DMM_OK_OR_FAIL(dmm_fault_plan(e->fault, DMM_OP_UNMAP, 2, 1, DMM_ERR_DRIVER));
    dmm_release_outcome o = dmm_mechanism_release(e->m, &b); /* one chunk poisoned */
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    DMM_OK_OR_FAIL(dmm_fault_clear(e->fault));
    dmm_stats s = kit_stats(e->m);
    assert_int_equal(s.poisoned_chunks, 1);
}

static result op_destroy(env *e) {
    result r = {false, DMM_OK, {0}, true};
    r.status = dmm_mechanism_destroy(e->m);
    if (r.status == DMM_OK) e->m = NULL;
    return r;
}

/* aliases: 6 MiB committed as 3 chunks at [0, 6 MiB), mapped again at [6 MiB, 12 MiB) */
static void setup_committed_half(env *e) {
    dmm_range keep = {0, 6 * MIB};
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e->m, 12 * MIB, 0, &keep, 1, &a));
    memset(a.ptr, 0x5a, 6 * MIB);
    env_add(e, a, false);
}

static result op_alias(env *e) {
    result r = {false, DMM_OK, {0}, false};
    r.status = dmm_arena_alias(e->m, &e->live[0], (dmm_range){6 * MIB, 6 * MIB}, (dmm_range){0, 6 * MIB});
    return r;
}

static void after_alias(env *e, const result *r, bool lost) {
    if (lost) return;
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e->m, &e->live[0], &committed));
    char *p = e->live[0].ptr;
    assert_int_equal(p[5 * MIB], 0x5a); /* the source is untouched either way */
    if (r->status == DMM_OK) {
        assert_int_equal(committed, 12 * MIB);
        assert_int_equal(p[6 * MIB + 5 * MIB], 0x5a);
        p[6 * MIB + 3] = 9; /* one memory, two places */
        assert_int_equal(p[3], 9);
        assert_int_equal(kit_census(e->fault).handles, 3);
    } else {
        assert_int_equal(committed, 6 * MIB); /* the failed alias took nothing */
    }
}

static void setup_aliased(env *e) {
    setup_committed_half(e);
    e->aliased = true;
    DMM_OK_OR_FAIL(dmm_arena_alias(e->m, &e->live[0], (dmm_range){6 * MIB, 6 * MIB}, (dmm_range){0, 6 * MIB}));
    assert_int_equal(kit_census(e->fault).mapped_bytes, 12 * MIB);
}

static result op_decommit_old_place(env *e) {
    result r = {true, DMM_OK, {0}, false};
    r.o = dmm_mechanism_decommit(e->m, &e->live[0], (dmm_range){0, 6 * MIB});
    return r;
}

static void after_decommit_old_place(env *e, const result *r, bool lost) {
    if (lost) return;
    dmm_release_state st = dmm_release_state_of(&r->o);
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e->m, &e->live[0], &committed));
    char *p = e->live[0].ptr;
    assert_int_equal(p[6 * MIB + 5 * MIB], 0x5a); /* the new place keeps the memory whatever happened */
    assert_int_equal(kit_census(e->fault).handles, 3); /* no handle goes while the new place maps it */
    if (st == DMM_RELEASE_FAILED) assert_int_equal(committed, 12 * MIB);
    if (st == DMM_RELEASE_COMPLETE) assert_int_equal(committed, 6 * MIB);
}

static const sweep_case cases[] = {
    {"allocate (3 chunks)", 2 * MIB, 0, NULL, op_allocate, keep_if_ok},
    {"allocate (2 cached + 1 new)", 2 * MIB, 8 * MIB, setup_cache, op_allocate, keep_if_ok},
    {"allocate_committed (3 ranges)", 2 * MIB, 0, NULL, op_allocate_committed, keep_if_ok},
    {"commit (shares a granule)", 4 * MIB, 0, setup_va_slot, op_commit, after_commit},
    {"decommit (3 chunks)", 2 * MIB, 0, setup_three_chunks, op_decommit, after_decommit},
    {"decommit (into the cache)", 2 * MIB, 4 * MIB, setup_three_chunks, op_decommit, after_decommit},
    {"release (3 chunks)", 2 * MIB, 0, setup_three_chunks, op_release, after_release},
    {"release (1 chunk)", 0, 0, setup_three_chunks, op_release, after_release},
    {"release (into the cache)", 2 * MIB, 4 * MIB, setup_three_chunks, op_release, after_release},
    {"alias (3 chunks)", 2 * MIB, 0, setup_committed_half, op_alias, after_alias},
    {"decommit (the old place of an alias)", 2 * MIB, 0, setup_aliased, op_decommit_old_place,
     after_decommit_old_place},
    {"release (aliased, into the cache)", 2 * MIB, 4 * MIB, setup_aliased, op_release, after_release},
    {"drain_cache", 2 * MIB, 8 * MIB, setup_cache, op_drain, NULL},
    {"destroy (cache + poisoned chunk)", 2 * MIB, 8 * MIB, setup_cache_and_poison, op_destroy, NULL},
};

static void fault_sweep_every_operation(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int seen[3] = {0, 0, 0};
        run_sweeps(&cases[i], seen);
        assert_true(seen[0] >= 3 && seen[2] > 0); /* each sweep ends in success, after failures */
        if (cases[i].run == op_release || cases[i].run == op_decommit || cases[i].run == op_decommit_old_place)
            assert_true(seen[1] > 0);
    }
}

/* ---- acceptance 7: poisoned chunks and quarantined handles ---- */

static void failed_unmap_poisons_the_chunk(void **state) {
    (void)state;
    env e;
    env_init(&e, 2 * MIB, 0);
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 5 * MIB, 0, &a)); /* granules 0-2, the last one half used */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e.m, 512 * KIB, 0, NULL, 0, &b)); /* VA only, in a's tail */
    assert_ptr_equal(b.ptr, (char *)a.ptr + 5 * MIB);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_UNMAP, 3, 1, DMM_ERR_DRIVER)); /* the chunk of granule 2 */
    snapshot before = snap(&e);
    dmm_release_outcome o = dmm_mechanism_release(e.m, &a);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.unmapped_bytes, 4 * MIB);
    assert_int_equal(o.residual_owned_bytes, 2 * MIB);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    dmm_test_error_mentions("QUARANTINED", "poisoned", "never handed out again", NULL);
    result r = {true, DMM_OK, o, false};
    honest(&e, &r, &before, false);
    dmm_stats s = kit_stats(e.m);
    assert_int_equal(s.poisoned_chunks, 1);
    assert_int_equal(s.poisoned_bytes, 2 * MIB);
    assert_int_equal(s.mapped_bytes.current, 2 * MIB);
    assert_int_equal(s.committed_bytes.current, 0);
    assert_int_equal(s.releases_quarantined, 1);
    assert_int_equal(kit_census(e.fault).mapped_bytes, 2 * MIB); /* really still mapped */
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.mapped), 2 * MIB);      /* and still charged */
    bool q = false;
    DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e.m, a.ptr, a.bytes, &q));
    assert_true(q);
    DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e.m, b.ptr, b.bytes, &q));
    assert_true(q); /* b's VA lies in the poisoned granule */
    /* the poisoned chunk is never committed again, not even for b, which was there before */
    uint64_t newly = 0;
    assert_int_equal(dmm_mechanism_commit(e.m, &b, (dmm_range){0, 4096}, &newly), DMM_ERR_QUARANTINED);
    dmm_test_error_mentions("arena commit", "poisoned", "nothing was changed", NULL);
    KIT_CHECK(e.m);
    /* b's release gives its span back, except the poisoned granule's part */
    o = dmm_mechanism_release(e.m, &b);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 0);
    KIT_CHECK(e.m);
    kit_reissue_check(e.m);
    env_end(&e); /* destroy unmaps and releases the poisoned chunk: the census and tally reach 0 */
}

static void failed_handle_release_quarantines_the_handle(void **state) {
    (void)state;
    env e;
    env_init(&e, 0, 0);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 2 * MIB, 0, &a));
    uint64_t refunds = dmm_atomic_load_seq_cst(&e.tally.refunds);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_RELEASE, 1, 1, DMM_ERR_DRIVER));
    snapshot before = snap(&e);
    dmm_release_outcome o = dmm_mechanism_release(e.m, &a);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.unmapped_bytes, 2 * MIB);
    assert_int_equal(o.residual_owned_bytes, 2 * MIB);
    result r = {true, DMM_OK, o, false};
    honest(&e, &r, &before, false);
    /* mapped refunded exactly once, owned kept */
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.refunds), refunds + 1);
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.mapped), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.owned), 2 * MIB);
    dmm_stats s = kit_stats(e.m);
    assert_int_equal(s.quarantined_handles, 1);
    assert_int_equal(s.quarantined_bytes, 2 * MIB);
    assert_int_equal(s.owned_bytes.current, 2 * MIB);
    assert_int_equal(s.mapped_bytes.current, 0);
    assert_int_equal(s.handles.current, 1);
    assert_int_equal(kit_census(e.fault).handles, 1);
    bool q = false;
    DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e.m, a.ptr, a.bytes, &q));
    assert_true(q); /* a QUARANTINED release never hands its range out again */
    /* the quarantined handle is never reused */
    dmm_allocation b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 2 * MIB, 0, &b));
    s = kit_stats(e.m);
    assert_int_equal(s.cache_hits, 0);
    assert_int_equal(s.driver_create, 2);
    assert_int_equal(dmm_mechanism_release(e.m, &b).state, DMM_RELEASE_COMPLETE);
    kit_reissue_check(e.m);
    env_end(&e);
}

/* ---- acceptance 8: transactional decommit ---- */

static void prot_rw_at(const void *addr) {
    FILE *fp = fopen("/proc/self/maps", "r");
    char line[512];
    bool found = false;
    while (fp && fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
            assert_string_equal(perms, "rw-s");
            found = true;
        }
    }
    if (fp) fclose(fp);
    assert_true(found);
}

static void decommit_restores_on_a_failed_unmap(void **state) {
    (void)state;
    env e;
    env_init(&e, 2 * MIB, 0);
    setup_three_chunks(&e);
    dmm_allocation a = e.live[0];
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_UNMAP, 2, 1, DMM_ERR_DRIVER));
    uint64_t maps = dmm_fault_calls(e.fault, DMM_OP_MAP);
    snapshot before = snap(&e);
    dmm_release_outcome o = dmm_mechanism_decommit(e.m, &a, (dmm_range){0, 6 * MIB});
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    assert_int_equal(o.unmapped_bytes, 0);
    dmm_test_error_mentions("arena decommit", "chunk 2 of 3", "mapped again", "contents", "nothing was changed", NULL);
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_MAP), maps + 1); /* chunk 1 was remapped */
    result r = {true, DMM_OK, o, false};
    honest(&e, &r, &before, false);
    env_contents_intact(&e); /* byte-identical: the same physical handle */
    for (size_t off = 0; off < 6 * MIB; off += 2 * MIB) prot_rw_at((char *)a.ptr + off);
    memset(a.ptr, 9, 6 * MIB); /* and writable */
    memset(e.pattern[0], 9, 6 * MIB);
    /* a retry without the fault succeeds */
    o = dmm_mechanism_decommit(e.m, &a, (dmm_range){0, 6 * MIB});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 6 * MIB);
    env_drop(&e, 0);
    e.is_live[0] = true; /* still live, without contents */
    env_end(&e);
}

static void decommit_quarantines_when_the_restore_fails(void **state) {
    (void)state;
    dmm_driver_op second[] = {DMM_OP_MAP, DMM_OP_SET_ACCESS};
    for (int v = 0; v < 2; v++) {
        env e;
        env_init(&e, 2 * MIB, 0);
        setup_three_chunks(&e);
        dmm_allocation a = e.live[0];
        DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_UNMAP, 2, 1, DMM_ERR_DRIVER));
        DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, second[v], 1, 1, DMM_ERR_DRIVER));
        snapshot before = snap(&e);
        dmm_release_outcome o = dmm_mechanism_decommit(e.m, &a, (dmm_range){0, 6 * MIB});
        assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
        assert_int_equal(o.unmapped_bytes, 2 * MIB); /* chunk 1 stays unmapped; chunks 2 and 3 untouched */
        assert_int_equal(o.residual_owned_bytes, 0);
        dmm_test_error_mentions("QUARANTINED", "commits are refused", NULL);
        result r = {true, DMM_OK, o, false};
        honest(&e, &r, &before, false);
        DMM_OK_OR_FAIL(dmm_fault_clear(e.fault));
        /* the allocation is quarantined: commits refused, the rest stays readable */
        uint64_t newly = 0;
        assert_int_equal(dmm_mechanism_commit(e.m, &a, (dmm_range){0, 1}, &newly), DMM_ERR_QUARANTINED);
        assert_int_equal(memcmp((char *)a.ptr + 2 * MIB, e.pattern[0] + 2 * MIB, 4 * MIB), 0);
        /* a later release works best effort and quarantines the span */
        o = dmm_mechanism_release(e.m, &a);
        assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
        assert_int_equal(o.unmapped_bytes, 4 * MIB);
        bool q = false;
        DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e.m, a.ptr, 1, &q));
        assert_true(q);
        env_drop(&e, 0);
        KIT_CHECK(e.m);
        kit_reissue_check(e.m);
        env_end(&e);
    }
}

/* ---- budget refusals in the middle of a commit ---- */

static void refused_charge_midway_undoes_everything(void **state) {
    (void)state;
    env e;
    env_init(&e, 2 * MIB, 0);
    e.tally.owned_limit = 5 * MIB; /* the third chunk's charge is refused */
    snapshot before = snap(&e);
    dmm_allocation a;
    result r = {false, dmm_mechanism_allocate(e.m, 6 * MIB, 0, &a), {0}, false};
    assert_int_equal(r.status, DMM_ERR_BUDGET);
    dmm_test_error_mentions("arena allocate", "accounting hook refused", "owned limit", NULL);
    honest(&e, &r, &before, false);
    assert_int_equal(kit_stats(e.m).driver_create, 0); /* charged ahead for the whole call: nothing created */
    assert_int_equal(kit_census(e.fault).handles, 0);
    size_t spans = 0;
    DMM_OK_OR_FAIL(dmm_arena_free_spans(e.m, &spans));
    assert_int_equal(spans, 1);
    env_end(&e);
}

/* ---- device loss, outside the sweep ---- */

static void device_loss_stops_every_driver_call(void **state) {
    (void)state;
    env e;
    env_init(&e, 2 * MIB, 8 * MIB);
    setup_cache(&e); /* 4 MiB cached */
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 6 * MIB, 0, &a));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 1 * MIB, 0, &b));
    env_add(&e, a, true);
    env_add(&e, b, true);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    snapshot before = snap(&e);
    dmm_release_outcome o = dmm_mechanism_release(e.m, &a);
    assert_int_equal(o.state, DMM_RELEASE_FAILED); /* the first unmap was lost: nothing changed */
    assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), before.s.driver_reserve + before.s.driver_create +
                                                             before.s.driver_map +
                                                             before.s.driver_set_access + before.s.driver_unmap +
                                                             before.s.driver_release + 1);
    result r = {true, DMM_OK, o, false};
    honest(&e, &r, &before, true);
    lost_battery(&e);
}

/* A poisoned chunk moves the free VA of its granules into the quarantine, however many pieces that
 * VA is in: here its tail granule holds 20 free gaps between VA-only allocations, more pieces than
 * the quarantine has room for without growing. Every byte must stay tiled (free, live or
 * quarantined), and none of the gaps may be handed out again. */
static void poisoning_a_fragmented_granule_keeps_every_byte(void **state) {
    (void)state;
    enum { NX = 40 };
    env e;
    env_init(&e, 2 * MIB, 0);
    dmm_allocation a, x[NX];
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.m, 5 * MIB, 0, &a)); /* chunks of granules 0, 1, 2 */
    for (int i = 0; i < NX; i++) {
        DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e.m, 4 * KIB, 0, NULL, 0, &x[i])); /* VA only */
        assert_ptr_equal(x[i].ptr, (char *)a.ptr + 5 * MIB + (size_t)i * 4 * KIB);
    }
    for (int i = 0; i < NX; i += 2) assert_int_equal(dmm_mechanism_release(e.m, &x[i]).state, DMM_RELEASE_COMPLETE);
    KIT_CHECK(e.m);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_UNMAP, 3, 1, DMM_ERR_DRIVER)); /* the chunk of granule 2 */
    dmm_release_outcome o = dmm_mechanism_release(e.m, &a);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.residual_owned_bytes, 2 * MIB);
    KIT_CHECK(e.m);
    for (int i = 0; i < NX; i += 2) {
        bool q = false;
        DMM_OK_OR_FAIL(dmm_arena_is_quarantined(e.m, x[i].ptr, x[i].bytes, &q));
        assert_true(q);
    }
    for (int i = 1; i < NX; i += 2) assert_int_equal(dmm_mechanism_release(e.m, &x[i]).state, DMM_RELEASE_COMPLETE);
    KIT_CHECK(e.m);
    kit_reissue_check(e.m);
    env_end(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failed_unmap_poisons_the_chunk),
        cmocka_unit_test(poisoning_a_fragmented_granule_keeps_every_byte),
        cmocka_unit_test(failed_handle_release_quarantines_the_handle),
        cmocka_unit_test(decommit_restores_on_a_failed_unmap),
        cmocka_unit_test(decommit_quarantines_when_the_restore_fails),
        cmocka_unit_test(refused_charge_midway_undoes_everything),
        cmocka_unit_test(device_loss_stops_every_driver_call),
        cmocka_unit_test(fault_sweep_every_operation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
