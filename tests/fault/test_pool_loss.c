/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_pool_loss.c — the pool's device-loss contract (include/dmm/pool.h, "Device loss";
 * DESIGN §4.10), over an arena over fault(host).
 *
 * A sticky DMM_ERR_DEVICE_LOST plan models a context that died. The sweep: a pool holding live
 * blocks on two streams, mapped free (cached) blocks, a cross-stream free waiting for its event and
 * the old places of aliased chunks waiting for their fence; the loss hits the n-th driver call
 * (n = 1, 2, … until the workload below makes fewer calls) of a workload that grows, moves, aliases,
 * frees across streams, trims and drains. After EVERY step in which the loss hit:
 *   - the call that met the loss, and every malloc, trim and empty_cache after it, report
 *     DMM_ERR_DEVICE_LOST with a sentence (frees are accepted: DMM_OK, bookkeeping only);
 *   - the driver saw no call after the failing one: dmm_fault_calls = calls before the plan + n,
 *     through the battery, the confirmation, the pool's destroy and the arena's destroy;
 *   - nothing is refunded before the confirmation; dmm_pool_check passes; live blocks still answer
 *     dmm_pool_block_size; a destroy before the confirmation is refused (DEVICE_LOST, and the
 *     arena's BUSY) and changes nothing;
 *   - dmm_arena_confirm_context_terminated discharges everything (tally back to 0), then
 *     dmm_pool_destroy succeeds (odd n: every block freed first; even n: half left live, forgotten),
 *     then the arena's destroy. The host driver under the fault driver really still holds the
 *     mappings (the fault driver only pretends the context died), as in test_arena_faults: destroying
 *     the host driver gives them back, the "context" going with its driver. Under ASan, LeakSanitizer
 *     then proves the pool's and the arena's host memory freed.
 * A step in which the loss did not hit ends the sweep with a normal teardown to a zero census.
 * Three more cases: the loss found by the pool's own event call is shared with the arena (which
 * accepts the confirmation although its own calls never failed); a mapped free block that would fit
 * is refused once the pool saw the loss; a loss the arena saw through another of its users stops the
 * pool's next slow path before any driver call. */
#include "arena_kit.h"

#include <stdio.h>
#include <stdlib.h>

enum { MAX_LIVE = 24 };

typedef struct blk {
    unsigned char *p;
    size_t bytes;
    dmm_stream stream;
    bool live;
} blk;

typedef struct env {
    dmm_driver *host, *fault;
    dmm_mechanism *arena; /* NULL once destroyed */
    dmm_pool *pool;       /* NULL once destroyed */
    dmm_stream s2;        /* a second stream (the first is NULL, the default) */
    kit_tally tally;
    dmm_accounting acct;
    blk b[MAX_LIVE];
} env;

static void env_init(env *e) {
    memset(e, 0, sizeof *e);
    kit_fault_drivers_open(&e->host, &e->fault);
    e->acct = kit_accounting(&e->tally);
    dmm_arena_config c = kit_config(4 * GIB, 0, 8 * MIB, &e->acct); /* a handle cache: drain makes calls */
    DMM_OK_OR_FAIL(dmm_arena_create(e->fault, &c, &e->arena));
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.va_bytes = 1 * GIB;
    DMM_OK_OR_FAIL(dmm_pool_create(e->arena, e->fault, &pc, &e->pool));
    DMM_OK_OR_FAIL(e->fault->ops->stream_create(e->fault, &e->s2));
}

static int env_slot(env *e) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (!e->b[i].live) return i;
    fail_msg("%s", "too many live blocks in the test env");
    return -1;
}

/* A malloc that must succeed. */
static int env_malloc(env *e, size_t bytes, dmm_stream s) {
    int i = env_slot(e);
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(e->pool, bytes, s, &p));
    e->b[i] = (blk){p, bytes, s, true};
    memset(p, 0x5a, bytes);
    return i;
}

static void env_free(env *e, int i, dmm_stream s) {
    DMM_OK_OR_FAIL(dmm_pool_free(e->pool, e->b[i].p, s));
    e->b[i].live = false;
}

static int env_nlive(const env *e) {
    int n = 0;
    for (int i = 0; i < MAX_LIVE; i++) n += e->b[i].live;
    return n;
}

static dmm_pool_stats pstats(env *e) { return dmm_test_pool_stats(e->pool); }

static void pool_consistent(env *e, const char *what) {
    if (dmm_pool_check(e->pool) != DMM_OK) fail_msg("%s: dmm_pool_check: %s", what, dmm_last_error());
    if (dmm_arena_check(e->arena) != DMM_OK) fail_msg("%s: dmm_arena_check: %s", what, dmm_last_error());
    if (pstats(e).allocations.current != env_nlive(e))
        fail_msg("%s: the pool counts %lld live blocks, the test %d", what, (long long)pstats(e).allocations.current,
                 env_nlive(e));
    for (int i = 0; i < MAX_LIVE; i++) {
        size_t n = 0;
        if (e->b[i].live && dmm_pool_block_size(e->pool, e->b[i].p, &n) != DMM_OK)
            fail_msg("%s: live block %d is not live in the pool: %s", what, i, dmm_last_error());
    }
}

/* The normal teardown (no loss): everything freed and destroyed, a zero census and tally. */
static void env_end(env *e) {
    DMM_OK_OR_FAIL(dmm_fault_clear(e->fault));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(e->fault, false));
    for (int i = 0; i < MAX_LIVE; i++)
        if (e->b[i].live) env_free(e, i, e->b[i].stream);
    dmm_status s = DMM_ERR_BUSY;
    for (int k = 0; k < 4 && s == DMM_ERR_BUSY; k++) s = dmm_pool_destroy(e->pool); /* fences complete at once */
    if (s != DMM_OK) fail_msg("pool destroy at the teardown: %s", dmm_last_error());
    DMM_OK_OR_FAIL(dmm_arena_drain_cache(e->arena));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e->arena));
    DMM_OK_OR_FAIL(e->fault->ops->stream_destroy(e->fault, e->s2));
    kit_fault_drivers_close(e->host, e->fault, &e->tally);
}

/* ---- the state before the loss ---- */

/* Live blocks on both streams, mapped free blocks on both, the old places of two aliased chunks and
 * a cross-stream free, both waiting for events held incomplete. */
static void setup_everything(env *e) {
    /* aliases: the stream's own free chunks behind a pending fence are mapped again where it grows */
    int x1 = env_malloc(e, 2 * MIB, NULL);
    env_malloc(e, 2 * MIB, NULL);
    int x3 = env_malloc(e, 2 * MIB, NULL);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(e->fault, true));
    env_free(e, x1, NULL);
    env_free(e, x3, NULL);
    env_malloc(e, 4 * MIB, NULL);
    dmm_pool_stats s = pstats(e);
    assert_true(s.chunks_aliased >= 1);
    env_malloc(e, 1000, NULL);
    env_malloc(e, 3 * MIB + 512, NULL);
    env_malloc(e, 700 * KIB, e->s2);
    env_malloc(e, 2 * MIB, e->s2);
    int c1 = env_malloc(e, 256 * KIB, e->s2);
    env_free(e, c1, e->s2); /* cached on s2 */
    /* cached on NULL: freed on its own stream (reusable at once by it) */
    int c2 = env_malloc(e, 1 * MIB, NULL);
    env_free(e, c2, NULL);
    /* a cross-stream free waiting for its event */
    int x = env_malloc(e, 1 * MIB, NULL);
    env_free(e, x, e->s2);
    s = pstats(e);
    assert_int_equal(s.pending_blocks.current, 1);
    pool_consistent(e, "after the setup");
}

/* ---- the workload the loss hits ---- */

typedef enum opkind { OP_MALLOC, OP_FREE, OP_TRIM, OP_EMPTY, OP_RELEASE_EVENTS } opkind;

typedef struct step {
    opkind kind;
    size_t bytes;  /* malloc */
    int stream;    /* 0 = NULL, 1 = s2 */
    int blk;       /* free: the block made by workload step `blk` (≥ 0) or setup block -1 - blk */
} step;

/* grows, frees across streams, polls (fences complete, pending frees and aliased old places are
 * reaped), moves, trims, drains, grows again */
static const step workload[] = {
    {OP_MALLOC, 9 * MIB, 0, 0},       /* 0: growth on NULL */
    {OP_FREE, 0, 1, -1 - 2},          /* 1: setup block 2 (700 KiB of s2) freed on NULL: an event */
    {OP_MALLOC, 3 * MIB, 1, 0},       /* 2: growth on s2 */
    {OP_RELEASE_EVENTS, 0, 0, 0},     /* 3: the held events complete (no driver call) */
    {OP_TRIM, UINT64_MAX, 0, 0},      /* 4: polls only: fences, the pending free, aliased old places */
    {OP_MALLOC, 12 * MIB, 0, 0},      /* 5: growth that moves free chunks */
    {OP_FREE, 0, 0, 0},               /* 6: step 0's block, on its own stream */
    {OP_FREE, 0, 0, 2},               /* 7: step 2's block, on NULL: an event */
    {OP_TRIM, 0, 0, 0},               /* 8: decommits what it can */
    {OP_EMPTY, 0, 0, 0},              /* 9: trim + drain of the arena's cache */
    {OP_MALLOC, 5 * MIB, 1, 0},       /* 10: growth on s2 again */
};
enum { NSTEPS = sizeof workload / sizeof *workload };

/* Runs the workload; returns whether the loss hit. Checks each call's answer against the contract:
 * before the loss OK; the call that met it and every later one: DEVICE_LOST, frees OK. */
static bool run_workload(env *e, uint64_t injected0, const char *what) {
    int made[NSTEPS];
    bool lost = false;
    for (int k = 0; k < NSTEPS; k++) {
        const step *st = &workload[k];
        dmm_stream s = st->stream ? e->s2 : NULL;
        made[k] = -1;
        dmm_status r = DMM_OK;
        dmm_clear_error();
        switch (st->kind) {
        case OP_MALLOC: {
            void *p = NULL;
            r = dmm_pool_malloc(e->pool, st->bytes, s, &p);
            if (r == DMM_OK) {
                int i = env_slot(e);
                e->b[i] = (blk){p, st->bytes, s, true};
                memset(p, 0x33, st->bytes);
                made[k] = i;
            } else {
                assert_null(p);
            }
            break;
        }
        case OP_FREE: {
            int i = st->blk >= 0 ? made[st->blk] : -1 - st->blk;
            if (i < 0 || !e->b[i].live) continue; /* its malloc was refused */
            r = dmm_pool_free(e->pool, e->b[i].p, s);
            if (r == DMM_OK) e->b[i].live = false;
            break;
        }
        case OP_TRIM: {
            uint64_t released = 12345;
            r = dmm_pool_trim(e->pool, st->bytes, &released);
            if (r == DMM_ERR_DEVICE_LOST && lost) assert_int_equal(released, 0);
            break;
        }
        case OP_EMPTY: r = dmm_pool_empty_cache(e->pool, NULL); break;
        case OP_RELEASE_EVENTS: DMM_OK_OR_FAIL(dmm_fault_hold_events(e->fault, false)); continue;
        }
        bool hit = dmm_fault_injected(e->fault) != injected0;
        if (!hit) {
            if (r != DMM_OK) fail_msg("%s: workload step %d failed before the loss: %s", what, k, dmm_last_error());
            continue;
        }
        lost = true;
        if (st->kind == OP_FREE) {
            if (r != DMM_OK) fail_msg("%s: workload step %d (a free) after the loss: %s, not accepted: %s", what, k,
                                      dmm_status_str(r), dmm_last_error());
        } else {
            if (r != DMM_ERR_DEVICE_LOST)
                fail_msg("%s: workload step %d after the loss answered %s, not DMM_ERR_DEVICE_LOST: %s", what, k,
                         dmm_status_str(r), dmm_last_error());
            dmm_test_error_mentions("lost", NULL);
        }
    }
    return lost;
}

/* ---- after the loss ---- */

/* Everything the contract promises between the loss and the end; `calls` = the driver calls up to and
 * including the one that failed; free_all: free every block before the destroy (else half). */
static bool lost_battery(env *e, uint64_t calls, bool free_all, const char *what) {
    if (dmm_fault_calls(e->fault, DMM_OP_ANY) != calls)
        fail_msg("%s: %llu driver calls were made after the loss", what,
                 (unsigned long long)(dmm_fault_calls(e->fault, DMM_OP_ANY) - calls));
    const int64_t owned = dmm_atomic_load_seq_cst(&e->tally.owned), mapped = dmm_atomic_load_seq_cst(&e->tally.mapped);
    const uint64_t refunds = dmm_atomic_load_seq_cst(&e->tally.refunds);
    pool_consistent(e, what);
    dmm_pool_stats before = pstats(e);

    /* every call that would reach the driver: DEVICE_LOST with a sentence, nothing handed out */
    dmm_stream streams[] = {NULL, e->s2, (dmm_stream)(uintptr_t)0x7777}; /* the last has no heap yet */
    size_t sizes[] = {512, 64 * KIB, 20 * MIB};
    for (size_t a = 0; a < 3; a++)
        for (size_t z = 0; z < 3; z++) {
            void *p = (void *)(uintptr_t)1;
            assert_int_equal(dmm_pool_malloc(e->pool, sizes[z], streams[a], &p), DMM_ERR_DEVICE_LOST);
            dmm_test_error_mentions("dmm_pool_malloc", "device was lost", "first seen at",
                                    "dmm_arena_confirm_context_terminated", NULL);
        }
    /* the sentence names the call that first saw the loss */
    const char *seen = strstr(dmm_last_error(), "first seen at");
    bool by_event = seen != NULL && strstr(seen, "event") != NULL;
    uint64_t released = 99;
    assert_int_equal(dmm_pool_trim(e->pool, 0, &released), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("dmm_pool_trim", "device was lost", NULL);
    assert_int_equal(released, 0);
    assert_int_equal(dmm_pool_empty_cache(e->pool, &released), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("dmm_pool_empty_cache", "device was lost", NULL);
    assert_int_equal(released, 0);
    dmm_pool_stats now = pstats(e);
    assert_int_equal(now.mallocs, before.mallocs);
    assert_int_equal(now.allocations.current, before.allocations.current);

    /* destroy before the confirmation: refused, nothing changed; the arena's too */
    assert_int_equal(dmm_pool_destroy(e->pool), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("dmm_pool_destroy", "lost", "dmm_arena_confirm_context_terminated", "nothing changed",
                            NULL);
    pool_consistent(e, "after a refused destroy");
    assert_int_equal(dmm_mechanism_destroy(e->arena), DMM_ERR_BUSY);
    dmm_test_error_mentions("confirm_context_terminated", NULL);

    /* frees: accepted on any stream, bookkeeping only; a pointer that is no live block still refused */
    int freed = 0, kept = 0;
    for (int i = 0; i < MAX_LIVE; i++) {
        if (!e->b[i].live) continue;
        if (!free_all && (kept + freed) % 2 == 1) {
            kept++;
            continue;
        }
        void *p = e->b[i].p;
        dmm_stream other = e->b[i].stream == NULL ? e->s2 : NULL;
        env_free(e, i, freed % 2 == 0 ? e->b[i].stream : other);
        assert_int_equal(dmm_pool_free(e->pool, p, NULL), DMM_ERR_UNKNOWN_ALLOCATION); /* twice */
        freed++;
    }
    int dummy = 0;
    assert_int_equal(dmm_pool_free(e->pool, &dummy, NULL), DMM_ERR_UNKNOWN_ALLOCATION);
    now = pstats(e);
    assert_int_equal(now.frees, before.frees + (uint64_t)freed);
    pool_consistent(e, "after the frees");

    /* no driver call, no refund: the arena refunds nothing before the confirmation */
    assert_int_equal(dmm_fault_calls(e->fault, DMM_OP_ANY), calls);
    assert_int_equal(dmm_atomic_load_seq_cst(&e->tally.owned), owned);
    assert_int_equal(dmm_atomic_load_seq_cst(&e->tally.mapped), mapped);
    assert_int_equal(dmm_atomic_load_seq_cst(&e->tally.refunds), refunds);

    /* the context is torn down: confirm, then the pool goes, then the arena, without a driver call */
    DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(e->arena));
    kit_tally_zero(&e->tally);
    DMM_OK_OR_FAIL(dmm_pool_destroy(e->pool));
    e->pool = NULL;
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e->arena));
    e->arena = NULL;
    assert_int_equal(dmm_fault_calls(e->fault, DMM_OP_ANY), calls);
    /* the fault driver only pretended: the host driver really still holds what the arena mapped (and
     * the stream); its "context" goes with it, as in test_arena_faults */
    (void)kit_census(e->fault);
    dmm_driver_destroy(e->fault);
    dmm_driver_destroy(e->host);
    return by_event;
}

static void sweep_the_loss_over_a_busy_pool(void **state) {
    (void)state;
    int hits = 0, by_pool_event = 0;
    uint64_t n;
    for (n = 1;; n++) {
        if (n > 600) fail_msg("%s", "the sweep did not end");
        char what[64];
        snprintf(what, sizeof what, "loss at call %llu", (unsigned long long)n);
        env e;
        env_init(&e);
        setup_everything(&e);
        uint64_t calls0 = dmm_fault_calls(e.fault, DMM_OP_ANY), injected0 = dmm_fault_injected(e.fault);
        DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, n, UINT32_MAX, DMM_ERR_DEVICE_LOST));
        bool hit = run_workload(&e, injected0, what);
        if (!hit) {
            assert_int_equal(dmm_fault_injected(e.fault), injected0);
            env_end(&e);
            break;
        }
        hits++;
        by_pool_event += lost_battery(&e, calls0 + n, n % 2 == 1, what);
    }
    print_message("  the loss swept over the %llu driver calls of the workload: every step ended lost, confirmed and "
                  "destroyed without a driver call after the loss (%d found by the pool's own event call, %d by a "
                  "call the arena made for it)\n",
                  (unsigned long long)(n - 1), by_pool_event, hits - by_pool_event);
    assert_true(hits >= 20);
    assert_true(by_pool_event > 0 && hits - by_pool_event > 0); /* both ways a loss reaches the pool */
}

/* ---- the loss found by the pool's own event call ---- */

/* A cross-stream free finds the loss (its event record fails): the free is accepted, a mapped free
 * block that would fit is refused from now on, and the arena, whose own calls never failed, accepts
 * the confirmation because the pool shared the loss with it. */
static void a_loss_the_pool_found_is_the_arenas_too(void **state) {
    (void)state;
    env e;
    env_init(&e);
    int a = env_malloc(&e, 1 * MIB, NULL);
    int c = env_malloc(&e, 1 * MIB, NULL);
    env_free(&e, c, NULL); /* a mapped free block of 1 MiB on NULL */
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(e.pool, 1 * MIB, NULL, &p)); /* served from it: no driver call */
    DMM_OK_OR_FAIL(dmm_pool_free(e.pool, p, NULL));
    dmm_pool_stats s0 = pstats(&e);
    uint64_t calls0 = dmm_fault_calls(e.fault, DMM_OP_ANY);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    env_free(&e, a, e.s2); /* event_create fails: the device is lost, the free accepted */
    assert_int_equal(dmm_fault_injected(e.fault), 1);
    assert_true(dmm_fault_calls(e.fault, DMM_OP_EVENT_CREATE) + dmm_fault_calls(e.fault, DMM_OP_EVENT_RECORD) >= 1);
    /* the cached 1 MiB block would fit: refused all the same */
    p = (void *)(uintptr_t)1;
    assert_int_equal(dmm_pool_malloc(e.pool, 1 * MIB, NULL, &p), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("device was lost", "cross-stream free", NULL);
    dmm_pool_stats s1 = pstats(&e);
    assert_int_equal(s1.cached_mallocs, s0.cached_mallocs);
    assert_int_equal(s1.mallocs, s0.mallocs);
    assert_int_equal(s1.frees, s0.frees + 1);
    assert_int_equal(s1.pending_blocks.current, 0);
    /* the arena knows: its own calls now answer DEVICE_LOST without a driver call */
    dmm_allocation x;
    assert_int_equal(dmm_mechanism_allocate(e.arena, 4096, 0, &x), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("lost its device", NULL);
    lost_battery(&e, calls0 + 1, true, "the loss found by an event call");
}

/* ---- a loss the arena saw through another user ---- */

/* Another user of the arena meets the loss; the pool has not seen it. A malloc served from mapped
 * memory is still served (the hot path asks nobody), but the first slow path asks the arena and stops
 * before any driver call; from then on the pool refuses like any lost pool. */
static void a_loss_the_arena_saw_stops_the_pools_slow_path(void **state) {
    (void)state;
    env e;
    env_init(&e);
    int c = env_malloc(&e, 1 * MIB, NULL);
    env_free(&e, c, NULL);
    dmm_allocation other;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e.arena, 2 * MIB, 0, &other));
    uint64_t calls0 = dmm_fault_calls(e.fault, DMM_OP_ANY);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    dmm_release_outcome o = dmm_mechanism_release(e.arena, &other);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), calls0 + 1);
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(e.pool, 1 * MIB, NULL, &p)); /* the pool has not seen it: served */
    DMM_OK_OR_FAIL(dmm_pool_free(e.pool, p, NULL));
    p = (void *)(uintptr_t)1;
    assert_int_equal(dmm_pool_malloc(e.pool, 5 * MIB, NULL, &p), DMM_ERR_DEVICE_LOST); /* a growth: asks */
    dmm_test_error_mentions("device was lost", "arena", NULL);
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), calls0 + 1);
    p = (void *)(uintptr_t)1;
    assert_int_equal(dmm_pool_malloc(e.pool, 1 * MIB, NULL, &p), DMM_ERR_DEVICE_LOST); /* now refused */
    assert_int_equal(dmm_pool_free(e.pool, (void *)(uintptr_t)0x1000, NULL), DMM_ERR_UNKNOWN_ALLOCATION);
    lost_battery(&e, calls0 + 1, false, "the loss the arena saw");
}

/* ---- destroy with blocks still live and pending, right after the confirmation ---- */

/* The confirmation first, without freeing anything: destroy forgets the live blocks, the pending
 * cross-stream free and the aliased old places, frees the host memory, and makes no driver call. */
static void destroy_after_the_confirmation_forgets_what_is_live(void **state) {
    (void)state;
    env e;
    env_init(&e);
    setup_everything(&e);
    uint64_t calls0 = dmm_fault_calls(e.fault, DMM_OP_ANY);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    assert_int_equal(dmm_pool_trim(e.pool, 0, NULL), DMM_ERR_DEVICE_LOST); /* its first poll meets the loss */
    dmm_test_error_mentions("dmm_pool_trim", "lost", NULL);
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), calls0 + 1);
    assert_true(pstats(&e).allocations.current > 0 && pstats(&e).pending_blocks.current == 1);
    DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(e.arena));
    DMM_OK_OR_FAIL(dmm_pool_destroy(e.pool));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e.arena));
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), calls0 + 1);
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.mapped), 0);
    dmm_driver_destroy(e.fault);
    dmm_driver_destroy(e.host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sweep_the_loss_over_a_busy_pool),
        cmocka_unit_test(a_loss_the_pool_found_is_the_arenas_too),
        cmocka_unit_test(a_loss_the_arena_saw_stops_the_pools_slow_path),
        cmocka_unit_test(destroy_after_the_confirmation_forgets_what_is_live),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
