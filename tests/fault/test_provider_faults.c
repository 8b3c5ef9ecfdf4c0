/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_provider_faults.c — the fault SWEEP of the provider (dmm/provider.h, DESIGN §4.7, §8)
 * over its default arena over fault(host), charging a tallying accounting hook: create, allocate (the
 * first one, which fixes the mechanism; one with live neighbours; one served from the handle cache),
 * allocate_committed, commit through the provider's mechanism, release (handles released; into the
 * cache) and destroy.
 *
 * For each operation and n = 1, 2, … the n-th driver call fails — once, or sticky (every call from n
 * on, so that every undo fails too) — and after EVERY step:
 *   - an error has a sentence and changed nothing: the driver's census and the arena's stats are as
 *     before (unless the arena says its undo could not fully unwind: then the sentence says so), no
 *     allocation was handed out, and a first allocation that failed left the provider NOT in use;
 *     a failed create left no provider and no reservation; a refused destroy left a provider that works;
 *   - an outcome is honest: FAILED changed nothing; COMPLETE and QUARANTINED: the driver's mapped bytes
 *     fell by exactly unmapped_bytes, and QUARANTINED's residual_owned_bytes = the new poisoned +
 *     quarantined bytes;
 *   - dmm_arena_check passes; the driver's census = the arena's stats = the tally;
 *   - every live allocation keeps its committed bytes and its contents;
 * then, with the plan cleared, 24 allocations through the provider never land on quarantined or
 * poisoned VA, and everything tears down to a zero census and a zero tally. The loop stops when the
 * operation makes fewer than n driver calls. */
#include "arena_kit.h"
#include "bind/provider_internal.h"

#include <stdio.h>
#include <stdlib.h>

enum { MAX_LIVE = 8 };

static int drained_in_part; /* refused destroys that gave back (or quarantined) cached handles first */

typedef struct env {
    dmm_driver *host, *fault;
    dmm_provider *p; /* NULL before create / once destroyed */
    uint64_t cache_limit;
    kit_tally tally;
    dmm_accounting acct;
    dmm_allocation live[MAX_LIVE];
    bool is_live[MAX_LIVE];
    size_t filled[MAX_LIVE]; /* [0, filled) carries the pattern */
} env;

static unsigned char pat(int i, size_t k) { return (unsigned char)(i * 29 + k * 13 + (k >> 12)); }

static dmm_mechanism *mech(env *e) { return dmm_provider_mechanism(e->p); }

static dmm_status provider_make(env *e, dmm_provider **out) {
    dmm_arena_config ac = kit_config(1 * GIB, 2 * MIB, e->cache_limit, NULL); /* 2 MiB chunks: more calls */
    dmm_provider_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.name = "sweep";
    pc.arena = &ac;
    pc.accounting = &e->acct;
    return dmm_provider_create(e->fault, &pc, out);
}

static void env_init(env *e, uint64_t cache_limit, bool with_provider) {
    memset(e, 0, sizeof *e);
    e->cache_limit = cache_limit;
    kit_fault_drivers_open(&e->host, &e->fault);
    e->acct = kit_accounting(&e->tally);
    if (with_provider) DMM_OK_OR_FAIL(provider_make(e, &e->p));
}

static int env_add(env *e, dmm_allocation a, size_t filled) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (!e->is_live[i]) {
            e->live[i] = a;
            e->is_live[i] = true;
            e->filled[i] = filled;
            for (size_t k = 0; k < filled; k++) ((unsigned char *)a.ptr)[k] = pat(i, k);
            return i;
        }
    fail_msg("%s", "too many live allocations");
    return -1;
}

static int env_allocate(env *e, size_t bytes) {
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_provider_allocate(e->p, bytes, 0, &a));
    return env_add(e, a, bytes);
}

static void env_release(env *e, int i) {
    dmm_release_outcome o = dmm_provider_release(e->p, &e->live[i]);
    if (o.state != DMM_RELEASE_COMPLETE) fail_msg("release of live %d: %s", i, dmm_last_error());
    e->is_live[i] = false;
}

static void contents_intact(env *e) {
    for (int i = 0; i < MAX_LIVE; i++) {
        if (!e->is_live[i]) continue;
        const unsigned char *p = e->live[i].ptr;
        for (size_t k = 0; k < e->filled[i]; k++)
            if (p[k] != pat(i, k)) fail_msg("live allocation %d lost its contents at byte %zu", i, k);
    }
}

static void conserved(env *e, const char *what) {
    if (e->p == NULL) {
        dmm_driver_census c = kit_census(e->fault);
        if (c.reserved_bytes || c.handles || c.mapped_bytes) fail_msg("%s: no provider, but the driver holds memory", what);
        assert_int_equal(dmm_atomic_load_seq_cst(&e->tally.owned), 0);
        assert_int_equal(dmm_atomic_load_seq_cst(&e->tally.mapped), 0);
        return;
    }
    if (dmm_arena_check(mech(e)) != DMM_OK) fail_msg("%s: dmm_arena_check: %s", what, dmm_last_error());
    kit_stats_match_census(mech(e), e->fault);
    kit_tally_matches(&e->tally, mech(e));
}

typedef struct snapshot {
    dmm_driver_census c;
    dmm_stats s;
    bool in_use;
    uint64_t committed[MAX_LIVE];
} snapshot;

static snapshot snap(env *e) {
    snapshot x;
    memset(&x, 0, sizeof x);
    x.c = kit_census(e->fault);
    if (e->p == NULL) return x;
    x.s = kit_stats(mech(e));
    x.in_use = dmm__provider_in_use(e->p);
    for (int i = 0; i < MAX_LIVE; i++)
        if (e->is_live[i]) DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(mech(e), &e->live[i], &x.committed[i]));
    return x;
}

/* With the plan cleared: 24 allocations of several sizes never touch quarantined or poisoned VA. */
static void no_quarantined_reissue(env *e) {
    enum { N = 24 };
    dmm_allocation a[N];
    size_t sizes[] = {4 * KIB, 3 * MIB, 300 * KIB, 2 * MIB, 9 * MIB};
    for (int i = 0; i < N; i++) {
        size_t bytes = sizes[i % 5];
        DMM_OK_OR_FAIL(dmm_provider_allocate(e->p, bytes, 0, &a[i]));
        bool q = true;
        DMM_OK_OR_FAIL(dmm_arena_is_quarantined(mech(e), a[i].ptr, bytes, &q));
        if (q) fail_msg("allocation %d at %p was handed out over quarantined or poisoned VA", i, a[i].ptr);
        ((volatile char *)a[i].ptr)[0] = 1;
        ((volatile char *)a[i].ptr)[bytes - 1] = 2;
    }
    for (int i = 0; i < N; i++) assert_int_equal(dmm_provider_release(e->p, &a[i]).state, DMM_RELEASE_COMPLETE);
    conserved(e, "after the reissue check");
}

static void env_end(env *e) {
    DMM_OK_OR_FAIL(dmm_fault_clear(e->fault));
    if (e->p != NULL) {
        for (int i = 0; i < MAX_LIVE; i++)
            if (e->is_live[i]) {
                dmm_release_outcome o = dmm_provider_release(e->p, &e->live[i]);
                if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) fail_msg("teardown release: %s", dmm_last_error());
                e->is_live[i] = false;
            }
        conserved(e, "before the teardown");
        DMM_OK_OR_FAIL(dmm_provider_destroy(e->p));
        e->p = NULL;
    }
    kit_fault_drivers_close(e->host, e->fault, &e->tally);
}

/* ---- the operations ---- */

typedef struct result {
    bool is_outcome;
    dmm_status status;
    dmm_release_outcome o;
    int target; /* the live allocation the op acts on (commit, release), or -1 */
} result;

typedef struct sweep_case {
    const char *name;
    uint64_t cache_limit;
    bool provider; /* the setup starts with a provider */
    void (*setup)(env *e);
    result (*run)(env *e);
} sweep_case;

static result op_create(env *e) {
    result r = {false, DMM_OK, {0}, -1};
    dmm_provider *p = (dmm_provider *)(uintptr_t)1;
    r.status = provider_make(e, &p);
    if (r.status == DMM_OK) e->p = p;
    else assert_null(p);
    return r;
}

static result op_allocate(env *e) {
    result r = {false, DMM_OK, {0}, -1};
    dmm_allocation a;
    r.status = dmm_provider_allocate(e->p, 5 * MIB, 0, &a);
    if (r.status == DMM_OK) env_add(e, a, 5 * MIB);
    return r;
}

static result op_allocate_committed(env *e) {
    result r = {false, DMM_OK, {0}, -1};
    dmm_allocation a;
    dmm_range ranges[2] = {{0, 2 * MIB}, {4 * MIB, 4 * MIB}};
    r.status = dmm_provider_allocate_committed(e->p, 8 * MIB, 0, ranges, 2, &a);
    if (r.status == DMM_OK) {
        int i = env_add(e, a, 2 * MIB);
        uint64_t c = 0;
        DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(mech(e), &a, &c));
        assert_int_equal(c, 6 * MIB);
        memset((char *)a.ptr + 4 * MIB, 3, 4 * MIB);
        (void)i;
    }
    return r;
}

static void setup_some_live(env *e) {
    env_allocate(e, 1000);
    env_allocate(e, 3 * MIB + 512);
}

static void setup_cached(env *e) { /* 8 MiB of handles in the cache, one allocation live */
    setup_some_live(e);
    int i = env_allocate(e, 8 * MIB);
    env_release(e, i);
    assert_int_equal(kit_stats(mech(e)).cached_bytes.current, e->cache_limit > 0 ? 8 * MIB : 0);
}

static void setup_va_only(env *e) { /* an 8 MiB VA-only allocation to commit into */
    setup_some_live(e);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_provider_allocate_committed(e->p, 8 * MIB, 0, NULL, 0, &a));
    env_add(e, a, 0);
}

static void setup_va_only_cached(env *e) { /* the same, with 8 MiB of handles in the cache */
    setup_cached(e);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_provider_allocate_committed(e->p, 8 * MIB, 0, NULL, 0, &a));
    assert_int_equal(env_add(e, a, 0), 2);
}

static result op_commit(env *e) {
    result r = {false, DMM_OK, {0}, 2};
    uint64_t newly = 99;
    r.status = dmm_mechanism_commit(mech(e), &e->live[2], (dmm_range){2 * MIB, 4 * MIB}, &newly);
    if (r.status == DMM_OK) {
        assert_int_equal(newly, 4 * MIB);
        memset((char *)e->live[2].ptr + 2 * MIB, 5, 4 * MIB);
    }
    return r;
}

static void setup_releasable(env *e) {
    setup_some_live(e);
    env_allocate(e, 6 * MIB);
}

static result op_release(env *e) {
    result r = {true, DMM_OK, {0}, 2};
    r.o = dmm_provider_release(e->p, &e->live[2]);
    if (dmm_release_state_of(&r.o) != DMM_RELEASE_FAILED) e->is_live[2] = false;
    return r;
}

static void setup_destroyable(env *e) { /* nothing live; handles cached when the cache allows */
    setup_cached(e);
    for (int i = 0; i < MAX_LIVE; i++)
        if (e->is_live[i]) env_release(e, i);
}

static result op_destroy(env *e) {
    result r = {false, DMM_OK, {0}, -1};
    r.status = dmm_provider_destroy(e->p);
    if (r.status == DMM_OK) e->p = NULL;
    return r;
}

/* ---- the checks of one step ---- */

static void honest(env *e, const sweep_case *k, const result *r, const snapshot *b, const char *what) {
    if (!r->is_outcome && r->status != DMM_OK && dmm_last_error()[0] == '\0') fail_msg("%s: an error without a sentence", what);
    conserved(e, what);
    contents_intact(e);
    snapshot a = snap(e);
    if (k->run == op_create) {
        if (r->status != DMM_OK) assert_null(e->p);
        return;
    }
    if (k->run == op_destroy) {
        if (r->status == DMM_OK) return;
        /* kept: the provider and its arena are intact (the handle cache may have been given back in part:
         * the arena's drain is best effort; a cached handle whose release failed is quarantined) */
        dmm_test_error_mentions("dmm_provider_destroy", "kept", NULL);
        assert_int_equal(a.c.mapped_bytes, b->c.mapped_bytes);
        assert_int_equal(a.c.reserved_bytes, b->c.reserved_bytes);
        assert_int_equal(a.s.allocations.current, 0);
        uint64_t quarantined = a.s.quarantined_bytes - b->s.quarantined_bytes;
        assert_int_equal(b->c.handle_bytes - a.c.handle_bytes,
                         (uint64_t)(b->s.cached_bytes.current - a.s.cached_bytes.current) - quarantined);
        if (b->c.handle_bytes != a.c.handle_bytes || quarantined != 0) drained_in_part++;
        return;
    }
    /* live allocations other than the target keep their committed bytes */
    for (int i = 0; i < MAX_LIVE; i++)
        if (e->is_live[i] && i != r->target && b->committed[i] != 0 && a.committed[i] != b->committed[i])
            fail_msg("%s: live allocation %d went from %llu to %llu committed bytes", what, i,
                     (unsigned long long)b->committed[i], (unsigned long long)a.committed[i]);
    bool leaked = a.s.rollback_leaks != b->s.rollback_leaks;
    if (r->is_outcome) {
        dmm_release_state st = dmm_release_state_of(&r->o);
        uint64_t fell = b->c.mapped_bytes - a.c.mapped_bytes;
        if (st == DMM_RELEASE_FAILED) {
            assert_int_not_equal(r->o.failure, DMM_OK);
            assert_int_equal(fell, 0);
            assert_int_equal(a.c.handles, b->c.handles);
            assert_int_equal(a.s.allocations.current, b->s.allocations.current);
            assert_int_equal(a.committed[r->target], b->committed[r->target]);
        } else {
            assert_int_equal(fell, r->o.unmapped_bytes);
            assert_int_equal(a.s.allocations.current, b->s.allocations.current - 1);
            uint64_t stuck = a.s.poisoned_bytes + a.s.quarantined_bytes - b->s.poisoned_bytes - b->s.quarantined_bytes;
            if (st == DMM_RELEASE_COMPLETE) {
                assert_int_equal(r->o.failure, DMM_OK);
                assert_int_equal(r->o.residual_owned_bytes, 0);
            } else {
                assert_int_not_equal(r->o.failure, DMM_OK);
                assert_int_equal(r->o.residual_owned_bytes, stuck);
            }
        }
        return;
    }
    if (r->status == DMM_OK) {
        if (k->run == op_allocate || k->run == op_allocate_committed) {
            assert_int_equal(a.s.allocations.current, b->s.allocations.current + 1);
            assert_true(dmm__provider_in_use(e->p));
        }
        return;
    }
    /* an error: nothing handed out, nothing changed (or the arena says its undo leaked) */
    assert_int_equal(a.s.allocations.current, b->s.allocations.current);
    assert_int_equal(a.in_use, b->in_use); /* a failed first allocation does not fix the mechanism */
    if (r->target >= 0) assert_int_equal(a.committed[r->target], b->committed[r->target]);
    if (leaked) {
        dmm_test_error_mentions("could not fully undo", NULL);
        return;
    }
    if (a.c.mapped_bytes != b->c.mapped_bytes || a.c.handles != b->c.handles || a.c.handle_bytes != b->c.handle_bytes ||
        a.s.cached_bytes.current != b->s.cached_bytes.current)
        fail_msg("%s: a failed call changed the memory: mapped %llu -> %llu, handles %llu -> %llu, cached %lld -> %lld",
                 what, (unsigned long long)b->c.mapped_bytes, (unsigned long long)a.c.mapped_bytes,
                 (unsigned long long)b->c.handles, (unsigned long long)a.c.handles, (long long)b->s.cached_bytes.current,
                 (long long)a.s.cached_bytes.current);
}

static int sweep(const sweep_case *k, bool sticky, int seen[2], uint64_t *calls_made) {
    int steps = 0;
    for (uint64_t n = 1;; n++) {
        if (n > 400) fail_msg("%s: the sweep did not end", k->name);
        env e;
        env_init(&e, k->cache_limit, k->provider);
        if (k->setup) k->setup(&e);
        conserved(&e, "after the setup");
        snapshot before = snap(&e);
        uint64_t injected = dmm_fault_injected(e.fault), calls0 = dmm_fault_calls(e.fault, DMM_OP_ANY);
        DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, n, sticky ? UINT32_MAX : 1, DMM_ERR_DRIVER));
        dmm_clear_error();
        result r = k->run(&e);
        uint64_t made = dmm_fault_calls(e.fault, DMM_OP_ANY) - calls0;
        bool hit = dmm_fault_injected(e.fault) != injected;
        DMM_OK_OR_FAIL(dmm_fault_clear(e.fault));
        bool ok = r.is_outcome ? dmm_release_state_of(&r.o) == DMM_RELEASE_COMPLETE : r.status == DMM_OK;
        seen[ok ? 0 : 1]++;
        steps++;
        char what[160];
        snprintf(what, sizeof what, "%s, %s fault at call %llu (%s)", k->name, sticky ? "sticky" : "one",
                 (unsigned long long)n,
                 r.is_outcome ? dmm_release_state_str(r.o.state) : dmm_status_str(r.status));
        honest(&e, k, &r, &before, what);
        if (!hit) {
            if (!ok) fail_msg("%s: failed without a fault: %s", what, dmm_last_error());
            *calls_made = made;
        }
        if (e.p != NULL) no_quarantined_reissue(&e);
        env_end(&e);
        if (!hit) break;
    }
    return steps;
}

static const sweep_case cases[] = {
    {"create", 0, false, NULL, op_create},
    {"allocate (the first)", 0, true, NULL, op_allocate},
    {"allocate (live neighbours)", 0, true, setup_some_live, op_allocate},
    {"allocate (from the handle cache)", 16 * MIB, true, setup_cached, op_allocate},
    {"allocate_committed (2 ranges)", 0, true, setup_some_live, op_allocate_committed},
    {"commit (VA-only allocation)", 0, true, setup_va_only, op_commit},
    {"commit (from the handle cache)", 16 * MIB, true, setup_va_only_cached, op_commit},
    {"release", 0, true, setup_releasable, op_release},
    {"release (into the cache)", 16 * MIB, true, setup_releasable, op_release},
    {"destroy", 0, true, setup_destroyable, op_destroy},
    {"destroy (cached handles)", 16 * MIB, true, setup_destroyable, op_destroy},
};

static void fault_sweep_every_provider_operation(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int seen[2] = {0, 0};
        uint64_t made = 0;
        int a = sweep(&cases[i], false, seen, &made), b = sweep(&cases[i], true, seen, &made);
        print_message("  %-34s %3d + %3d steps (once, sticky; %llu driver calls): %d ok, %d errors\n", cases[i].name, a,
                      b, (unsigned long long)made, seen[0], seen[1]);
        if (drained_in_part > 0)
            print_message("    (%d refused destroys had drained the handle cache in part first; the provider and "
                          "its live allocations were kept)\n",
                          drained_in_part);
        drained_in_part = 0;
        assert_true(made > 0 && seen[0] >= 2 && seen[1] > 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fault_sweep_every_provider_operation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
