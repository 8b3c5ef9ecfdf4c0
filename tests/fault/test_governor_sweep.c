/* SPDX-License-Identifier: Apache-2.0 */
/* Fault sweep of the governor wired to the arena (issue 5, acceptance 3): for allocate,
 * allocate_committed, commit, decommit and release, fail the 1st, 2nd, … driver call (DMM_OP_ANY)
 * until the operation makes no more calls than that, and after EVERY step assert
 *     governor owned  = the arena's owned_bytes  = the driver census's handle_bytes
 *     governor mapped = the arena's mapped_bytes = the driver census's mapped_bytes
 * and after the clean-up that every one of them is back to 0. The same sweep also runs over the eager
 * mechanism (eager memory is charged on both axes and counted as eager_bytes by the census).
 * The governor's own tier sums must equal the lease's at every step too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#define MiB (1024ull * 1024ull)
#define MAX_N 200

typedef enum op_kind { OP_ALLOCATE, OP_ALLOCATE_COMMITTED, OP_COMMIT, OP_DECOMMIT, OP_RELEASE, OP_RELEASE_CACHED, OP_COUNT } op_kind;
static const char *const op_names[] = {"allocate", "allocate_committed", "commit", "decommit", "release",
                                       "release into the cache + drain"};

typedef struct ctx {
    dmm_driver *host, *fault;
    dmm_governor *g;
    dmm_holder *h;
    dmm_lease_id lease;
    dmm_mechanism *m;
    bool eager;
} ctx;

typedef struct tally {
    uint64_t steps, failed, quarantined, complete, ok, refused;
} tally;

static void setup_ctx(ctx *c, bool eager, uint64_t cache_limit) {
    memset(c, 0, sizeof *c);
    c->eager = eager;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &c->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(c->host, &c->fault));
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &c->g));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(c->g, c->fault->device, DMM_AXIS_OWNED, 64 * MiB));
    dmm_holder_config hc = {sizeof hc, "sweep", 0, NULL, NULL};
    DMM_OK_OR_FAIL(dmm_governor_holder_register(c->g, &hc, &c->h));
    DMM_OK_OR_FAIL(dmm_lease_reserve(c->h, c->fault->device, DMM_ROLE_KV_CACHE, 0, 0, &c->lease));
    dmm_accounting acct;
    DMM_OK_OR_FAIL(dmm_governor_accounting(c->g, c->lease, &acct));
    if (eager) {
        dmm_eager_config ec = {sizeof ec, &acct};
        DMM_OK_OR_FAIL(dmm_eager_create(c->fault, &ec, &c->m));
    } else {
        dmm_arena_config ac;
        memset(&ac, 0, sizeof ac);
        ac.size = sizeof ac;
        ac.reserve_bytes = 256 * MiB;
        ac.chunk_limit_bytes = 2 * MiB; /* one chunk per granule: many driver calls per operation */
        ac.cache_limit_bytes = cache_limit;
        ac.accounting = &acct;
        DMM_OK_OR_FAIL(dmm_arena_create(c->fault, &ac, &c->m));
    }
}

/* The conservation check, after every step. */
static void check(ctx *c, const char *op, uint64_t n, const char *when) {
    dmm_driver_census cen;
    memset(&cen, 0, sizeof cen);
    cen.size = sizeof cen;
    DMM_OK_OR_FAIL(c->fault->ops->census(c->fault, &cen));
    uint64_t owned = 0, mapped = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(c->g, c->lease, &owned, &mapped));
    dmm_tier_usage u = {.size = sizeof u};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(c->g, c->fault->device, &u));
    uint64_t st_owned = 0, st_mapped = 0;
    if (c->m != NULL) {
        dmm_stats st;
        memset(&st, 0, sizeof st);
        st.size = sizeof st;
        DMM_OK_OR_FAIL(dmm_mechanism_stats(c->m, &st));
        st_owned = (uint64_t)st.owned_bytes.current;
        st_mapped = (uint64_t)st.mapped_bytes.current;
        if (!c->eager && dmm_arena_check(c->m) != DMM_OK)
            fail_msg("%s, fault at call %llu, %s: dmm_arena_check: %s", op, (unsigned long long)n, when,
                     dmm_last_error());
    }
    uint64_t real_owned = c->eager ? cen.eager_bytes : cen.handle_bytes;
    uint64_t real_mapped = c->eager ? cen.eager_bytes : cen.mapped_bytes;
    if (owned != st_owned || owned != real_owned || mapped != st_mapped || mapped != real_mapped ||
        u.used[0] != owned || u.used[1] != mapped)
        fail_msg("%s, fault at call %llu, %s: governor owned %llu / mapped %llu (tier %llu / %llu), mechanism "
                 "owned %llu / mapped %llu, driver %s %llu / mapped %llu",
                 op, (unsigned long long)n, when, (unsigned long long)owned, (unsigned long long)mapped,
                 (unsigned long long)u.used[0], (unsigned long long)u.used[1], (unsigned long long)st_owned,
                 (unsigned long long)st_mapped, c->eager ? "eager" : "handles", (unsigned long long)real_owned,
                 (unsigned long long)real_mapped);
}

static void teardown_ctx(ctx *c, const char *op, uint64_t n) {
    if (c->m != NULL) {
        if (!c->eager) DMM_OK_OR_FAIL(dmm_arena_drain_cache(c->m));
        check(c, op, n, "after the clean-up");
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(c->m));
        c->m = NULL;
    }
    dmm_driver_census cen = {.size = sizeof cen};
    DMM_OK_OR_FAIL(c->host->ops->census(c->host, &cen));
    uint64_t owned = 1, mapped = 1;
    DMM_OK_OR_FAIL(dmm_lease_usage(c->g, c->lease, &owned, &mapped));
    if (owned || mapped || cen.handles || cen.handle_bytes || cen.mapped_bytes || cen.eager_bytes || cen.reserved_bytes)
        fail_msg("%s, fault at call %llu: after destroy: governor %llu / %llu, driver handles %llu (%llu bytes), "
                 "mapped %llu, eager %llu, reserved %llu",
                 op, (unsigned long long)n, (unsigned long long)owned, (unsigned long long)mapped,
                 (unsigned long long)cen.handles, (unsigned long long)cen.handle_bytes,
                 (unsigned long long)cen.mapped_bytes, (unsigned long long)cen.eager_bytes,
                 (unsigned long long)cen.reserved_bytes);
    DMM_OK_OR_FAIL(dmm_lease_release(c->g, c->lease));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(c->h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(c->g));
    dmm_driver_destroy(c->fault);
    dmm_driver_destroy(c->host);
}

static void note_outcome(tally *t, const dmm_release_outcome *o) {
    switch (dmm_release_state_of(o)) {
    case DMM_RELEASE_COMPLETE: t->complete++; break;
    case DMM_RELEASE_FAILED: t->failed++; break;
    case DMM_RELEASE_QUARANTINED: t->quarantined++; break;
    }
}

/* Releases whatever is still live (without faults); a quarantined or already-gone allocation is fine. */
static void release_if_live(ctx *c, dmm_allocation *a, bool *live) {
    if (!*live) return;
    dmm_release_outcome o = dmm_mechanism_release(c->m, a);
    if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED && o.failure != DMM_ERR_UNKNOWN_ALLOCATION &&
        o.failure != DMM_ERR_QUARANTINED)
        fail_msg("clean-up release failed: %s", dmm_last_error());
    *live = false;
}

/* One step of the sweep: a fresh world, the preparation without faults, the operation with the nth
 * driver call failing, the checks, the clean-up. Returns whether the fault was really injected. */
static bool sweep_step(op_kind k, bool eager, uint64_t n, tally *t) {
    const char *op = op_names[k];
    ctx c;
    setup_ctx(&c, eager, k == OP_RELEASE_CACHED ? 8 * MiB : 0);
    dmm_allocation a;
    memset(&a, 0, sizeof a);
    bool live = false;
    dmm_range two[2] = {{0, 2 * MiB}, {4 * MiB, 4 * MiB}};
    dmm_range first = {0, 2 * MiB};
    switch (k) { /* preparation, no faults */
    case OP_COMMIT:
        DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(c.m, 8 * MiB, 0, &first, 1, &a));
        live = true;
        break;
    case OP_DECOMMIT:
    case OP_RELEASE:
    case OP_RELEASE_CACHED:
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(c.m, 8 * MiB, 0, &a));
        live = true;
        break;
    default: break;
    }
    check(&c, op, n, "after the preparation");
    uint64_t injected = dmm_fault_injected(c.fault);
    DMM_OK_OR_FAIL(dmm_fault_plan(c.fault, DMM_OP_ANY, n, 1, DMM_ERR_DRIVER));
    dmm_status s = DMM_OK;
    dmm_release_outcome o;
    uint64_t newly = 0;
    switch (k) {
    case OP_ALLOCATE:
        s = dmm_mechanism_allocate(c.m, 5 * MiB, 0, &a);
        live = s == DMM_OK;
        break;
    case OP_ALLOCATE_COMMITTED:
        s = dmm_mechanism_allocate_committed(c.m, 8 * MiB, 0, two, 2, &a);
        live = s == DMM_OK;
        break;
    case OP_COMMIT: s = dmm_mechanism_commit(c.m, &a, (dmm_range){2 * MiB, 6 * MiB}, &newly); break;
    case OP_DECOMMIT:
        o = dmm_mechanism_decommit(c.m, &a, (dmm_range){2 * MiB, 4 * MiB});
        note_outcome(t, &o);
        break;
    case OP_RELEASE:
    case OP_RELEASE_CACHED:
        o = dmm_mechanism_release(c.m, &a);
        note_outcome(t, &o);
        live = dmm_release_state_of(&o) == DMM_RELEASE_FAILED;
        if (k == OP_RELEASE_CACHED && !live) {
            check(&c, op, n, "after the release, before the drain");
            dmm_status ds = dmm_arena_drain_cache(c.m); /* the drain runs under the same fault plan */
            if (ds != DMM_OK) t->refused++;
        }
        break;
    case OP_COUNT: break;
    }
    if (k == OP_ALLOCATE || k == OP_ALLOCATE_COMMITTED || k == OP_COMMIT) {
        if (s == DMM_OK) t->ok++;
        else t->refused++;
    }
    bool hit = dmm_fault_injected(c.fault) != injected;
    DMM_OK_OR_FAIL(dmm_fault_clear(c.fault));
    t->steps++;
    check(&c, op, n, "after the faulted operation");
    release_if_live(&c, &a, &live);
    check(&c, op, n, "after releasing what was live");
    teardown_ctx(&c, op, n);
    return hit;
}

static void sweep(bool eager) {
    for (op_kind k = 0; k < OP_COUNT; k++) {
        if (eager && (k == OP_ALLOCATE_COMMITTED || k == OP_COMMIT || k == OP_DECOMMIT || k == OP_RELEASE_CACHED))
            continue; /* eager has no virtual backing and no cache */
        tally t = {0};
        uint64_t n = 1;
        while (sweep_step(k, eager, n, &t)) {
            n++;
            if (n > MAX_N) fail_msg("%s: still failing at call %d; the sweep does not terminate", op_names[k], MAX_N);
        }
        print_message("%s %-32s: %llu steps (the op makes %llu driver calls); ok %llu, refused %llu, outcomes "
                      "complete %llu / quarantined %llu / failed %llu\n",
                      eager ? "eager" : "arena", op_names[k], (unsigned long long)t.steps, (unsigned long long)(n - 1),
                      (unsigned long long)t.ok, (unsigned long long)t.refused, (unsigned long long)t.complete,
                      (unsigned long long)t.quarantined, (unsigned long long)t.failed);
        assert_true(n > 1); /* every operation here makes at least one driver call */
    }
}

static void sweep_arena(void **state) {
    (void)state;
    sweep(false);
}

static void sweep_eager(void **state) {
    (void)state;
    sweep(true);
}

/* The budget itself inside the sweep: a commit the governor refuses changes nothing anywhere. */
static void refused_commit_changes_nothing(void **state) {
    (void)state;
    ctx c;
    setup_ctx(&c, false, 0);
    DMM_OK_OR_FAIL(dmm_governor_set_limit(c.g, c.fault->device, DMM_AXIS_OWNED, 6 * MiB));
    dmm_range first = {0, 2 * MiB};
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(c.m, 8 * MiB, 0, &first, 1, &a));
    uint64_t calls = dmm_fault_calls(c.fault, DMM_OP_ANY);
    uint64_t newly = 0;
    assert_int_equal(dmm_mechanism_commit(c.m, &a, (dmm_range){2 * MiB, 6 * MiB}, &newly), DMM_ERR_BUDGET);
    dmm_test_error_mentions("tier host:0", "role kv-cache", "requested", NULL);
    check(&c, "refused commit", 0, "after the refusal");
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(c.m, &a, &committed));
    assert_int_equal(committed, 2 * MiB);
    /* No create, map or set-access was made for the refused part beyond what was undone. */
    dmm_driver_census cen = {.size = sizeof cen};
    DMM_OK_OR_FAIL(c.host->ops->census(c.host, &cen));
    assert_int_equal(cen.handle_bytes, 2 * MiB);
    (void)calls;
    dmm_release_outcome o = dmm_mechanism_release(c.m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    teardown_ctx(&c, "refused commit", 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sweep_arena),
        cmocka_unit_test(sweep_eager),
        cmocka_unit_test(refused_commit_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
