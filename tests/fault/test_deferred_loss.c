/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_deferred_loss.c — the deferred queue's device-loss contract (include/dmm/deferred.h,
 * "Device loss"), over an arena over fault(host), with a sticky DMM_ERR_DEVICE_LOST plan:
 *   - a loss an EVENT QUERY reports: the poll returns DEVICE_LOST with the driver's sentence; the
 *     queue tells the arena (so dmm_arena_confirm_context_terminated accepts, although no arena call
 *     ever failed); later polls return DEVICE_LOST at once with a sentence and make no driver call —
 *     also once the plan is cleared (a driver that would answer is still not asked); the requests are
 *     taken back unrun, the queue and the arena are destroyed, the tally is zero;
 *   - a loss ANOTHER user of the arena saw (the arena marked lost, as a pool does): the poll makes no
 *     driver call at all and reports DEVICE_LOST;
 *   - a loss a request's OUTCOME reports (the arena's unmap): the queue is lost from then on; a request
 *     enqueued behind, with an event, is never asked about;
 *   - over a mechanism that is not an arena (eager): the queue still stops asking the driver.
 * Nothing is dropped: every request comes back through dmm_deferred_take. */
#include "arena_kit.h"

#include <stdio.h>
#include <stdlib.h>


typedef struct env {
    dmm_driver *host, *fault;
    dmm_mechanism *m;
    kit_tally tally;
    dmm_accounting acct;
    dmm_deferred *q;
    dmm_stream s1;
    dmm_event ev[2];
    dmm_allocation a[2];
    int done;
} env;

static void on_done(void *user, const dmm_deferred_request *r, const dmm_release_outcome *o) {
    (void)r;
    (void)o;
    ((env *)user)->done++;
}

static void env_init(env *e) {
    memset(e, 0, sizeof *e);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &e->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(e->host, &e->fault));
    e->acct = kit_accounting(&e->tally);
    dmm_arena_config c = kit_config(1 * GIB, 2 * MIB, 0, &e->acct);
    DMM_OK_OR_FAIL(dmm_arena_create(e->fault, &c, &e->m));
    dmm_deferred_config qc = {sizeof qc, e->fault, 8, on_done, e};
    DMM_OK_OR_FAIL(dmm_deferred_create(&qc, &e->q));
    const dmm_driver_ops *d = e->fault->ops;
    DMM_OK_OR_FAIL(d->stream_create(e->fault, &e->s1));
    dmm_range all = {0, 4 * MIB};
    for (int i = 0; i < 2; i++) {
        DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(e->m, 4 * MIB, 0, &all, 1, &e->a[i]));
        DMM_OK_OR_FAIL(d->event_create(e->fault, &e->ev[i]));
        DMM_OK_OR_FAIL(d->event_record(e->fault, e->ev[i], e->s1));
    }
}

static void enqueue(env *e, int i, uint32_t kind, uint32_t n_events) {
    dmm_deferred_request r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.kind = kind;
    r.mechanism = e->m;
    r.allocation = e->a[i];
    r.range = (dmm_range){0, 2 * MIB};
    r.n_events = n_events;
    if (n_events) r.events[0] = e->ev[i];
    r.user = (void *)(uintptr_t)(i + 1);
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(e->q, &r));
}

static bool arena_lost(env *e) {
    return dmm_driver_lost(e->fault, NULL); /* the arena's driver: where the loss is latched */
}

/* Later polls: DEVICE_LOST at once, with a sentence, no driver call, nothing ran. */
static void later_polls_ask_nothing(env *e, size_t queued) {
    uint64_t calls = dmm_fault_calls(e->fault, DMM_OP_ANY);
    for (int k = 0; k < 3; k++) {
        size_t ran = 99;
        assert_int_equal(dmm_deferred_poll(e->q, &ran), DMM_ERR_DEVICE_LOST);
        assert_int_equal(ran, 0);
        dmm_test_error_mentions("dmm_deferred_poll", "lost", "dmm_deferred_take", NULL);
    }
    if (dmm_fault_calls(e->fault, DMM_OP_ANY) != calls)
        fail_msg("the lost queue made %llu driver call(s) after the loss",
                 (unsigned long long)(dmm_fault_calls(e->fault, DMM_OP_ANY) - calls));
    size_t n = 0;
    DMM_OK_OR_FAIL(dmm_deferred_pending(e->q, &n));
    assert_int_equal(n, queued);
    assert_int_equal(e->done, 0);
}

/* The teardown after a loss: confirm, take every request back, destroy; no driver call. */
static void teardown_lost(env *e, size_t queued) {
    uint64_t calls = dmm_fault_calls(e->fault, DMM_OP_ANY);
    DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(e->m));
    for (size_t k = 0; k < queued; k++) {
        dmm_deferred_request r;
        DMM_OK_OR_FAIL(dmm_deferred_take(e->q, &r));
        assert_int_equal((uintptr_t)r.user, k + 1); /* in queue order, unrun */
    }
    DMM_OK_OR_FAIL(dmm_deferred_destroy(e->q));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e->m));
    assert_int_equal(dmm_fault_calls(e->fault, DMM_OP_ANY), calls);
    kit_tally_zero(&e->tally);
    dmm_driver_destroy(e->fault); /* (the host driver frees the events and the stream the context took) */
    dmm_driver_destroy(e->host);
}

static void loss_seen_by_an_event_query(void **state) {
    (void)state;
    env e;
    env_init(&e);
    enqueue(&e, 0, DMM_DEFERRED_DECOMMIT, 1);
    enqueue(&e, 1, DMM_DEFERRED_RELEASE, 1);
    assert_false(arena_lost(&e));
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_EVENT_QUERY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    size_t ran = 99;
    assert_int_equal(dmm_deferred_poll(e.q, &ran), DMM_ERR_DEVICE_LOST);
    assert_int_equal(ran, 0);
    assert_true(strlen(dmm_last_error()) > 0);
    assert_true(arena_lost(&e)); /* the queue told the arena */
    later_polls_ask_nothing(&e, 2);
    DMM_OK_OR_FAIL(dmm_fault_clear(e.fault)); /* a driver that would answer is still not asked */
    later_polls_ask_nothing(&e, 2);
    /* a lost arena refuses its own calls without asking the driver either */
    uint64_t calls = dmm_fault_calls(e.fault, DMM_OP_ANY);
    dmm_release_outcome o = dmm_mechanism_release(e.m, &e.a[1]);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_FAILED);
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), calls);
    teardown_lost(&e, 2);
}

static void loss_seen_by_another_user_of_the_arena(void **state) {
    (void)state;
    env e;
    env_init(&e);
    enqueue(&e, 0, DMM_DEFERRED_DECOMMIT, 1);
    enqueue(&e, 1, DMM_DEFERRED_RELEASE, 1);
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_ANY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    dmm_allocation other; /* another user of the arena meets the loss (as a pool's growth would) */
    assert_int_equal(dmm_mechanism_allocate_committed(e.m, 2 * MIB, 0, &(dmm_range){0, 2 * MIB}, 1, &other),
                     DMM_ERR_DEVICE_LOST);
    uint64_t calls = dmm_fault_calls(e.fault, DMM_OP_ANY);
    size_t ran = 99;
    assert_int_equal(dmm_deferred_poll(e.q, &ran), DMM_ERR_DEVICE_LOST);
    assert_int_equal(ran, 0);
    dmm_test_error_mentions("dmm_deferred_poll", "lost", NULL);
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), calls); /* not even the head's event */
    later_polls_ask_nothing(&e, 2);
    teardown_lost(&e, 2);
}

static void loss_seen_by_a_request_outcome(void **state) {
    (void)state;
    env e;
    env_init(&e);
    enqueue(&e, 0, DMM_DEFERRED_DECOMMIT, 0); /* ready: its unmap finds the loss */
    enqueue(&e, 1, DMM_DEFERRED_RELEASE, 1);  /* behind it, gated by an event never asked about */
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_UNMAP, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    uint64_t queries = dmm_fault_calls(e.fault, DMM_OP_EVENT_QUERY);
    size_t ran = 99;
    assert_int_equal(dmm_deferred_poll(e.q, &ran), DMM_ERR_DEVICE_LOST);
    assert_int_equal(ran, 0);
    assert_true(arena_lost(&e));
    later_polls_ask_nothing(&e, 2);
    DMM_OK_OR_FAIL(dmm_deferred_take(e.q, &(dmm_deferred_request){0})); /* the failed head, unrun */
    later_polls_ask_nothing(&e, 1);                                     /* the next one's event: never asked */
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_EVENT_QUERY), queries);
    DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(e.m));
    dmm_deferred_request r;
    DMM_OK_OR_FAIL(dmm_deferred_take(e.q, &r));
    assert_int_equal((uintptr_t)r.user, 2);
    DMM_OK_OR_FAIL(dmm_deferred_destroy(e.q));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e.m));
    assert_int_equal(dmm_atomic_load_seq_cst(&e.tally.owned), 0);
    dmm_driver_destroy(e.fault);
    dmm_driver_destroy(e.host);
}

/* Over a mechanism that is not an arena (eager, over the host driver itself; the queue's events over
 * fault(host)): the queue still stops asking once its driver is latched lost. */
static void loss_over_an_eager_mechanism(void **state) {
    (void)state;
    dmm_driver *host = NULL, *fault = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(host, &fault));
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &m));
    dmm_deferred *q = NULL;
    dmm_deferred_config qc = {sizeof qc, fault, 4, NULL, NULL};
    DMM_OK_OR_FAIL(dmm_deferred_create(&qc, &q));
    dmm_stream s = NULL;
    dmm_event ev = NULL;
    DMM_OK_OR_FAIL(fault->ops->stream_create(fault, &s));
    DMM_OK_OR_FAIL(fault->ops->event_create(fault, &ev));
    DMM_OK_OR_FAIL(fault->ops->event_record(fault, ev, s));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 1 * MIB, 0, &a));
    dmm_deferred_request r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.kind = DMM_DEFERRED_RELEASE;
    r.mechanism = m;
    r.allocation = a;
    r.n_events = 1;
    r.events[0] = ev;
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(q, &r));
    DMM_OK_OR_FAIL(dmm_fault_plan(fault, DMM_OP_EVENT_QUERY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    assert_int_equal(dmm_deferred_poll(q, NULL), DMM_ERR_DEVICE_LOST);
    DMM_OK_OR_FAIL(dmm_fault_clear(fault));
    uint64_t calls = dmm_fault_calls(fault, DMM_OP_ANY);
    assert_int_equal(dmm_deferred_poll(q, NULL), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("dmm_deferred_poll", "lost", NULL);
    assert_int_equal(dmm_fault_calls(fault, DMM_OP_ANY), calls);
    DMM_OK_OR_FAIL(dmm_deferred_take(q, &r));
    DMM_OK_OR_FAIL(dmm_deferred_destroy(q));
    /* (the test's own teardown: the eager memory goes back through its own driver; the queue's
     * events and stream through the inner driver, as the context going with its driver would) */
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(fault->ops->event_destroy(fault, ev));
    DMM_OK_OR_FAIL(fault->ops->stream_destroy(fault, s));
    assert_true(dmm_driver_lost(fault, NULL));
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loss_seen_by_an_event_query),
        cmocka_unit_test(loss_seen_by_another_user_of_the_arena),
        cmocka_unit_test(loss_seen_by_a_request_outcome),
        cmocka_unit_test(loss_over_an_eager_mechanism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
