/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_deferred_faults.c — the fault SWEEP of dmm_deferred_poll (DESIGN §4.10, §8): a queue
 * of four requests over an arena over fault(host) — the decommit of [2 MiB, 6 MiB) of an 8 MiB
 * allocation (gated by events on two streams), the release of a 6 MiB allocation, the release of the
 * decommitted 8 MiB one, and an ungated release of a 300 KiB one — run by ONE poll while the n-th driver
 * call of that poll fails: once, sticky (every call from n on, so that every undo fails too), or with
 * a sticky device loss. The poll's calls are the event queries and the arena's unmaps, remaps and
 * handle releases.
 *
 * After EVERY step:
 *   - the poll is honest: *ran = the on_done calls, in queue order, = the requests that left the
 *     queue; DMM_OK ⇔ all four ran; an error has a sentence, and the request it names stays at the
 *     head (the retry below runs it first);
 *   - every outcome handed to on_done is COMPLETE (failure OK, nothing residual) or QUARANTINED (a
 *     failure named); the driver's mapped bytes fell by exactly Σ unmapped_bytes of those outcomes,
 *     and Σ residual_owned_bytes = the new poisoned + quarantined bytes;
 *   - the requests that did not run changed nothing: their allocations are live with the committed
 *     bytes they had, and every live byte keeps its contents;
 *   - dmm_arena_check passes; the arena's stats = the driver's census = the accounting tally;
 * then, with the plan cleared, one poll runs every request left (the failed head first), the queue
 * is empty, and everything tears down to a zero census and a zero tally. After a device loss the plan
 * stays (the device is gone): a second poll reports DEVICE_LOST again and the arena makes no driver
 * call; the requests are taken back unrun (nothing is dropped), confirm_context_terminated discharges
 * the arena and the tally reaches zero. The loop stops when the poll makes fewer than n driver calls. */
#include "arena_kit.h"

#include <stdio.h>
#include <stdlib.h>

enum { NREQ = 4, NALLOC = 3 };

typedef struct env {
    dmm_driver *host, *fault;
    dmm_mechanism *m; /* NULL once destroyed */
    kit_tally tally;
    dmm_accounting acct;
    dmm_deferred *q;
    dmm_stream s1, s2;
    dmm_event ev[3];
    dmm_allocation a[NALLOC];
    bool gone[NALLOC];            /* released (COMPLETE or QUARANTINED) */
    dmm_deferred_request req[NREQ];
    int done;                     /* on_done calls so far */
    int order[NREQ * 2];          /* the request index of each on_done call */
    dmm_release_outcome out[NREQ];
} env;

static const int alloc_of[NREQ] = {0, 1, 0, 2};
static const size_t alloc_bytes[NALLOC] = {8 * MIB, 6 * MIB, 300 * KIB};

static unsigned char pat(int i, size_t k) { return (unsigned char)(i * 53 + k * 11 + (k >> 13)); }

static void on_done(void *user, const dmm_deferred_request *r, const dmm_release_outcome *o) {
    env *e = user;
    int i = (int)(uintptr_t)r->user - 1;
    assert_true(i >= 0 && i < NREQ);
    e->order[e->done++] = i;
    e->out[i] = *o;
    if (r->kind == DMM_DEFERRED_RELEASE) e->gone[alloc_of[i]] = true;
}

static void request(env *e, int i, uint32_t kind, dmm_range range, int n_events, const int *evs) {
    dmm_deferred_request *r = &e->req[i];
    memset(r, 0, sizeof *r);
    r->size = sizeof *r;
    r->kind = kind;
    r->mechanism = e->m;
    r->allocation = e->a[alloc_of[i]];
    r->range = range;
    r->n_events = (uint32_t)n_events;
    for (int k = 0; k < n_events; k++) r->events[k] = e->ev[evs[k]];
    r->user = (void *)(uintptr_t)(i + 1);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(e->q, r));
}

static void env_init(env *e, uint64_t cache_limit) {
    memset(e, 0, sizeof *e);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &e->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(e->host, &e->fault));
    e->acct = kit_accounting(&e->tally);
    dmm_arena_config c = kit_config(1 * GIB, 2 * MIB, cache_limit, &e->acct); /* 2 MiB chunks: more calls */
    DMM_OK_OR_FAIL(dmm_arena_create(e->fault, &c, &e->m));
    dmm_deferred_config qc = {sizeof qc, e->fault, 16, on_done, e};
    DMM_OK_OR_FAIL(dmm_deferred_create(&qc, &e->q));
    const dmm_driver_ops *d = e->fault->ops;
    DMM_OK_OR_FAIL(d->stream_create(e->fault, &e->s1));
    DMM_OK_OR_FAIL(d->stream_create(e->fault, &e->s2));
    dmm_range all = {0, 8 * MIB};
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e->m, 8 * MIB, 0, &all, 1, &e->a[0]));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e->m, 6 * MIB, 0, &e->a[1]));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e->m, 300 * KIB, 0, &e->a[2]));
    for (int i = 0; i < NALLOC; i++)
        for (size_t k = 0; k < alloc_bytes[i]; k++) ((unsigned char *)e->a[i].ptr)[k] = pat(i, k);
    for (int k = 0; k < 3; k++) DMM_OK_OR_FAIL(d->event_create(e->fault, &e->ev[k]));
    DMM_OK_OR_FAIL(d->event_record(e->fault, e->ev[0], e->s1));
    DMM_OK_OR_FAIL(d->event_record(e->fault, e->ev[1], e->s2));
    DMM_OK_OR_FAIL(d->event_record(e->fault, e->ev[2], e->s1));
    request(e, 0, DMM_DEFERRED_DECOMMIT, (dmm_range){2 * MIB, 4 * MIB}, 2, (const int[]){0, 1});
    request(e, 1, DMM_DEFERRED_RELEASE, (dmm_range){0, 0}, 1, (const int[]){0});
    request(e, 2, DMM_DEFERRED_RELEASE, (dmm_range){0, 0}, 1, (const int[]){2});
    request(e, 3, DMM_DEFERRED_RELEASE, (dmm_range){0, 0}, 0, NULL);
}

static size_t pending(env *e) {
    size_t n = 0;
    DMM_OK_OR_FAIL(dmm_deferred_pending(e->q, &n));
    return n;
}

/* Every byte of a live allocation that no request has decommitted keeps its contents. */
static void contents_intact(env *e, bool decommitted) {
    for (int i = 0; i < NALLOC; i++) {
        if (e->gone[i]) continue;
        const unsigned char *p = e->a[i].ptr;
        for (size_t k = 0; k < alloc_bytes[i]; k++) {
            if (i == 0 && decommitted && k >= 2 * MIB && k < 6 * MIB) continue;
            if (p[k] != pat(i, k)) fail_msg("allocation %d lost its contents at byte %zu", i, k);
        }
    }
}

/* `lost`: a lost arena refunds nothing, so the tally may stay above the stats (confirm discharges it). */
static void conserved_lost(env *e, const char *what, bool lost) {
    if (dmm_arena_check(e->m) != DMM_OK) fail_msg("%s: dmm_arena_check: %s", what, dmm_last_error());
    kit_stats_match_census(e->m, e->fault);
    dmm_stats s = kit_stats(e->m);
    int64_t to = dmm_atomic_load_seq_cst(&e->tally.owned), tm = dmm_atomic_load_seq_cst(&e->tally.mapped);
    if (lost ? to < s.owned_bytes.current || tm < s.mapped_bytes.current
             : to != s.owned_bytes.current || tm != s.mapped_bytes.current)
        fail_msg("%s: the tally (owned %lld, mapped %lld) differs from the arena's stats (owned %lld, mapped %lld)", what,
                 (long long)dmm_atomic_load_seq_cst(&e->tally.owned),
                 (long long)dmm_atomic_load_seq_cst(&e->tally.mapped),
                 (long long)s.owned_bytes.current, (long long)s.mapped_bytes.current);
}

static void conserved(env *e, const char *what) { conserved_lost(e, what, false); }

static uint64_t committed_of(env *e, int i) {
    uint64_t b = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(e->m, &e->a[i], &b));
    return b;
}

/* The queue is empty: the rest of the allocations are gone; the arena and the drivers go. */
static void env_end(env *e) {
    DMM_OK_OR_FAIL(dmm_fault_clear(e->fault));
    assert_int_equal(pending(e), 0);
    DMM_OK_OR_FAIL(dmm_deferred_destroy(e->q));
    for (int i = 0; i < NALLOC; i++) assert_true(e->gone[i]);
    if (e->m != NULL) {
        dmm_stats s = kit_stats(e->m);
        assert_int_equal(s.allocations.current, 0);
        DMM_OK_OR_FAIL(dmm_arena_drain_cache(e->m));
        conserved(e, "before the teardown");
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(e->m));
    }
    const dmm_driver_ops *d = e->fault->ops;
    for (int k = 0; k < 3; k++) DMM_OK_OR_FAIL(d->event_destroy(e->fault, e->ev[k]));
    DMM_OK_OR_FAIL(d->stream_destroy(e->fault, e->s1));
    DMM_OK_OR_FAIL(d->stream_destroy(e->fault, e->s2));
    dmm_driver_census c = kit_census(e->fault);
    if (e->m != NULL) { /* (after a device loss the host "context" goes with its driver) */
        assert_int_equal(c.reserved_bytes, 0);
        assert_int_equal(c.handles, 0);
        assert_int_equal(c.mapped_bytes, 0);
    }
    kit_tally_zero(&e->tally);
    dmm_driver_destroy(e->fault);
    dmm_driver_destroy(e->host);
}

typedef enum mode { ONCE, STICKY, LOST } mode;
static const char *mode_name[] = {"one", "sticky", "device-lost"};

/* After a device loss (the plan stays): a second poll fails again and the arena makes no driver call;
 * the requests are handed back unrun; confirm discharges the arena. */
static void lost_end(env *e, int ran) {
    uint64_t calls = dmm_fault_calls(e->fault, DMM_OP_ANY) - dmm_fault_calls(e->fault, DMM_OP_EVENT_QUERY);
    int64_t owned = dmm_atomic_load_seq_cst(&e->tally.owned), mapped = dmm_atomic_load_seq_cst(&e->tally.mapped);
    size_t n = 9, left = pending(e);
    assert_int_equal(left, (size_t)(NREQ - ran));
    if (left > 0) {
        assert_int_equal(dmm_deferred_poll(e->q, &n), DMM_ERR_DEVICE_LOST);
        assert_int_equal(n, 0);
        assert_int_equal(pending(e), left);
    }
    /* the arena may not have seen the loss yet (the event query failed first): one release tells it */
    for (int i = 0; i < NALLOC; i++)
        if (!e->gone[i]) {
            dmm_release_outcome o = dmm_mechanism_release(e->m, &e->a[i]);
            assert_int_equal(o.state, DMM_RELEASE_FAILED);
            assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
            calls = dmm_fault_calls(e->fault, DMM_OP_ANY) - dmm_fault_calls(e->fault, DMM_OP_EVENT_QUERY);
            owned = dmm_atomic_load_seq_cst(&e->tally.owned);
            mapped = dmm_atomic_load_seq_cst(&e->tally.mapped);
            break;
        }
    if (left > 0) assert_int_equal(dmm_deferred_poll(e->q, &n), DMM_ERR_DEVICE_LOST);
    assert_int_equal(dmm_fault_calls(e->fault, DMM_OP_ANY) - dmm_fault_calls(e->fault, DMM_OP_EVENT_QUERY), calls);
    assert_int_equal(dmm_atomic_load_seq_cst(&e->tally.owned), owned); /* nothing refunded */
    assert_int_equal(dmm_atomic_load_seq_cst(&e->tally.mapped), mapped);
    for (int k = ran; k < NREQ; k++) { /* handed back unrun, in order */
        dmm_deferred_request r;
        DMM_OK_OR_FAIL(dmm_deferred_take(e->q, &r));
        assert_int_equal((int)(uintptr_t)r.user - 1, k);
        assert_int_equal(r.allocation.id, e->req[k].allocation.id);
        if (r.kind == DMM_DEFERRED_RELEASE) e->gone[alloc_of[k]] = true; /* discharged below */
    }
    DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(e->m));
    kit_tally_zero(&e->tally);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e->m));
    e->m = NULL;
    env_end(e);
}

static int sweep(uint64_t cache_limit, mode md, int seen[3], uint64_t *calls_made) {
    int steps = 0;
    for (uint64_t n = 1;; n++) {
        if (n > 200) fail_msg("%s", "the sweep did not end");
        env e;
        env_init(&e, cache_limit);
        conserved(&e, "after the setup");
        dmm_driver_census c0 = kit_census(e.fault);
        dmm_stats s0 = kit_stats(e.m);
        uint64_t committed0[NALLOC];
        for (int i = 0; i < NALLOC; i++) committed0[i] = committed_of(&e, i);
        uint64_t injected = dmm_fault_injected(e.fault), calls0 = dmm_fault_calls(e.fault, DMM_OP_ANY);
        DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, n, md == ONCE ? 1 : UINT32_MAX,
                                      md == LOST ? DMM_ERR_DEVICE_LOST : DMM_ERR_DRIVER));
        dmm_clear_error();
        size_t ran = 99;
        dmm_status s = dmm_deferred_poll(e.q, &ran);
        uint64_t made = dmm_fault_calls(e.fault, DMM_OP_ANY) - calls0;
        bool hit = dmm_fault_injected(e.fault) != injected;
        bool lost = md == LOST && hit;
        if (!lost) DMM_OK_OR_FAIL(dmm_fault_clear(e.fault));
        steps++;
        char what[160];
        snprintf(what, sizeof what, "cache %llu MiB, %s fault at call %llu (%s, %zu ran)",
                 (unsigned long long)(cache_limit / MIB), mode_name[md], (unsigned long long)n, dmm_status_str(s), ran);
        /* the poll's own report */
        if (ran != (size_t)e.done) fail_msg("%s: *ran %zu, on_done called %d times", what, ran, e.done);
        for (int k = 0; k < e.done; k++)
            if (e.order[k] != k) fail_msg("%s: on_done call %d was request %d (out of order)", what, k, e.order[k]);
        if (pending(&e) != NREQ - ran) fail_msg("%s: %zu pending after %zu ran", what, pending(&e), ran);
        if ((s == DMM_OK) != (ran == NREQ)) fail_msg("%s: status and the requests run disagree", what);
        if (s != DMM_OK && dmm_last_error()[0] == '\0') fail_msg("%s: an error without a sentence", what);
        if (lost && s != DMM_OK) assert_int_equal(s, DMM_ERR_DEVICE_LOST); /* (OK: the last request took the loss,
                                                                          and its outcome says so) */
        seen[s == DMM_OK ? 0 : 1]++;
        /* the outcomes */
        uint64_t unmapped = 0, residual = 0;
        for (int k = 0; k < e.done; k++) {
            const dmm_release_outcome *o = &e.out[k];
            if (o->state == DMM_RELEASE_COMPLETE) {
                if (o->failure != DMM_OK || o->residual_owned_bytes != 0)
                    fail_msg("%s: request %d COMPLETE with failure %s and %llu residual bytes", what, k,
                             dmm_status_str(o->failure), (unsigned long long)o->residual_owned_bytes);
            } else if (o->state == DMM_RELEASE_QUARANTINED) {
                if (o->failure == DMM_OK) fail_msg("%s: request %d QUARANTINED without a failure", what, k);
                seen[2]++;
            } else {
                fail_msg("%s: request %d reached on_done with state %u", what, k, (unsigned)o->state);
            }
            unmapped += o->unmapped_bytes;
            residual += o->residual_owned_bytes;
        }
        dmm_driver_census c1 = kit_census(e.fault);
        dmm_stats s1 = kit_stats(e.m);
        if (c0.mapped_bytes - c1.mapped_bytes != unmapped)
            fail_msg("%s: the outcomes say %llu bytes were unmapped, the driver's mapped bytes fell by %llu", what,
                     (unsigned long long)unmapped, (unsigned long long)(c0.mapped_bytes - c1.mapped_bytes));
        uint64_t kept = s1.poisoned_bytes + s1.quarantined_bytes - s0.poisoned_bytes - s0.quarantined_bytes;
        if (residual != kept)
            fail_msg("%s: the outcomes say %llu bytes stay owned, the arena poisoned or quarantined %llu", what,
                     (unsigned long long)residual, (unsigned long long)kept);
        /* what did not run changed nothing */
        bool decommitted = e.done > 0;
        if (!lost) {
            for (int i = 1; i < NALLOC; i++)
                if (!e.gone[i] && committed_of(&e, i) != committed0[i])
                    fail_msg("%s: allocation %d, whose release did not run, changed", what, i);
            if (!e.gone[0] && (e.done == 0 || e.out[0].state == DMM_RELEASE_COMPLETE)) {
                uint64_t want = committed0[0] - (e.done > 0 ? e.out[0].unmapped_bytes : 0);
                if (committed_of(&e, 0) != want)
                    fail_msg("%s: the 8 MiB allocation commits %llu bytes, %llu expected", what,
                             (unsigned long long)committed_of(&e, 0), (unsigned long long)want);
            }
        }
        contents_intact(&e, decommitted);
        conserved_lost(&e, what, lost);
        if (!hit) {
            if (s != DMM_OK) fail_msg("%s: failed without a fault: %s", what, dmm_last_error());
            *calls_made = made;
        }
        if (lost) {
            lost_end(&e, (int)ran);
            continue;
        }
        /* the plan cleared: one poll runs the rest, the failed head first */
        int before = e.done;
        size_t ran2 = 0;
        DMM_OK_OR_FAIL(dmm_deferred_poll(e.q, &ran2));
        assert_int_equal(ran2, NREQ - ran);
        assert_int_equal(e.done, NREQ);
        for (int k = before; k < NREQ; k++) assert_int_equal(e.order[k], k);
        for (int k = before; k < NREQ; k++)
            if (e.out[k].state == DMM_RELEASE_COMPLETE) assert_int_equal(e.out[k].failure, DMM_OK);
        conserved(&e, "after the retry");
        env_end(&e);
        if (!hit) break;
    }
    return steps;
}

static void fault_sweep_deferred_poll(void **state) {
    (void)state;
    uint64_t caches[2] = {0, 16 * MIB};
    for (int c = 0; c < 2; c++) {
        int seen[3] = {0, 0, 0};
        uint64_t made = 0;
        int a = sweep(caches[c], ONCE, seen, &made), b = sweep(caches[c], STICKY, seen, &made),
            l = sweep(caches[c], LOST, seen, &made);
        print_message("  poll of 4 requests, cache %2llu MiB: %3d + %3d + %3d steps (once, sticky, lost; %llu driver "
                      "calls): %d ok, %d errors, %d quarantined outcomes\n",
                      (unsigned long long)(caches[c] / MIB), a, b, l, (unsigned long long)made, seen[0], seen[1],
                      seen[2]);
        assert_true(made > 0 && seen[0] >= 3 && seen[1] > 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fault_sweep_deferred_poll),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
