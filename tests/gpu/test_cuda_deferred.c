/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_cuda_deferred.c — issue 3, acceptance 4: a decommit never unmaps a range while work
 * that uses it is still queued, and the caller is never blocked on a synchronize.
 *
 * The arena itself has no event gating (that is the job of the pool and of the deferred-release
 * queue); this test proves the primitive the higher layers use, over the real GPU:
 *   1. a long chain of cuMemcpyAsync reads the arena range A into a buffer B on a stream; an event
 *      is recorded after it;
 *   2. the decommit of A is requested through the deferred queue, gated by that event; the request
 *      returns at once, and the event is still pending right after it (work is queued);
 *   3. polls (event_query only) leave A mapped while the event is pending; the poll that unmaps A
 *      is one after which the event is complete (completion is permanent, so it was complete when
 *      the queue asked); not one stream or event synchronize was made through the driver meanwhile;
 *   4. B holds A's pattern: every queued copy read mapped memory with the right contents (an unmap
 *      under them would have faulted the context or produced other bytes).
 * The arena's driver and the queue's are one fault(cuda) driver, used as a call counter only. */
#include <time.h>

#include "cuda_kit.h"
#include "dmm/deferred.h"

static dmm_driver *g_cuda;

typedef struct done_box {
    int calls;
    dmm_release_outcome outcome;
} done_box;

static void on_done(void *user, const dmm_deferred_request *r, const dmm_release_outcome *o) {
    (void)r;
    done_box *b = user;
    b->calls++;
    b->outcome = *o;
}

static void pause_briefly(void) {
    struct timespec ts = {0, 200 * 1000}; /* 200 µs between polls: a poll loop, not a timed assertion */
    nanosleep(&ts, NULL);
}

static void decommit_waits_for_the_work_event(void **state) {
    (void)state;
    dmm_driver *f = NULL;
    DMM_OK_OR_FAIL(dmm_fault_driver_create(g_cuda, &f));
    dmm_arena_config cfg = kit_config(4 * GIB, 0, 0, NULL);
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(f, &cfg, &m));
    done_box box = {0, {0}};
    dmm_deferred_config qc = {sizeof qc, f, 16, on_done, &box};
    dmm_deferred *q = NULL;
    DMM_OK_OR_FAIL(dmm_deferred_create(&qc, &q));

    const size_t n = 256 * MIB;
    const int copies = 1500; /* each reads all of A: ~0.1-0.2 ms apiece on an H200, far longer than the enqueue */
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, n, 0, &a));
    uintptr_t b = 0;
    DMM_OK_OR_FAIL(g_cuda->ops->alloc(g_cuda, n, &b));
    unsigned char *p = kit_pattern(50, n);
    kit_put(g_cuda, (uintptr_t)a.ptr, p, n);

    dmm_stream s = NULL;
    dmm_event e = NULL;
    DMM_OK_OR_FAIL(f->ops->stream_create(f, &s));
    DMM_OK_OR_FAIL(f->ops->event_create(f, &e));
    for (int i = 0; i < copies; i++) DMM_OK_OR_FAIL(f->ops->copy(f, b, (uintptr_t)a.ptr, n, s));
    DMM_OK_OR_FAIL(f->ops->event_record(f, e, s));

    const uint64_t unmaps0 = dmm_fault_calls(f, DMM_OP_UNMAP);
    const uint64_t syncs0 =
        dmm_fault_calls(f, DMM_OP_STREAM_SYNCHRONIZE) + dmm_fault_calls(f, DMM_OP_EVENT_SYNCHRONIZE);

    dmm_deferred_request r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.kind = DMM_DEFERRED_DECOMMIT;
    r.mechanism = m;
    r.allocation = a;
    r.range.offset = 0;
    r.range.bytes = n;
    r.n_events = 1;
    r.events[0] = e;
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(q, &r)); /* returns at once: no driver call at all */
    dmm_status right_after = g_cuda->ops->event_query(g_cuda, e);
    if (right_after != DMM_ERR_BUSY)
        fail_msg("the copy chain had already finished when the decommit was requested (%s): the test proves "
                 "nothing; lengthen the chain",
                 dmm_status_str(right_after));
    assert_int_equal(dmm_fault_calls(f, DMM_OP_UNMAP), unmaps0);

    int busy_polls = 0, polls = 0;
    size_t pending = 1;
    while (pending > 0) {
        size_t ran = 0;
        DMM_OK_OR_FAIL(dmm_deferred_poll(q, &ran));
        polls++;
        uint64_t unmaps = dmm_fault_calls(f, DMM_OP_UNMAP);
        dmm_status now = g_cuda->ops->event_query(g_cuda, e);
        assert_true(now == DMM_OK || now == DMM_ERR_BUSY);
        if (unmaps == unmaps0) {
            assert_int_equal(ran, 0);
            if (now == DMM_ERR_BUSY) busy_polls++;
        } else {
            /* The unmap happened in this poll: the event is complete now, and since completion is
             * permanent and the queue asked event_query before decommitting, it was complete then. */
            assert_int_equal(now, DMM_OK);
            assert_int_equal(ran, 1);
        }
        DMM_OK_OR_FAIL(dmm_deferred_pending(q, &pending));
        if (pending > 0) pause_briefly();
        if (polls > 10 * 1000 * 1000) fail_msg("%s", "the event never completed");
    }
    printf("decommit requested with the work still queued; %d polls saw the event pending and left the range "
           "mapped; poll %d unmapped it after the event completed\n",
           busy_polls, polls);
    assert_true(busy_polls >= 1);
    assert_int_equal(box.calls, 1);
    assert_int_equal(box.outcome.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(box.outcome.unmapped_bytes, n);
    /* Never a synchronize on the way: readiness came from event_query alone. */
    assert_int_equal(dmm_fault_calls(f, DMM_OP_STREAM_SYNCHRONIZE) + dmm_fault_calls(f, DMM_OP_EVENT_SYNCHRONIZE),
                     syncs0);
    /* Every copy read mapped memory holding the pattern; the context is healthy. */
    kit_expect(g_cuda, b, p, n, "the buffer the copy chain wrote");
    uint64_t committed = 1;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(m, &a, &committed));
    assert_int_equal(committed, 0);

    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_deferred_destroy(q));
    DMM_OK_OR_FAIL(f->ops->event_destroy(f, e));
    DMM_OK_OR_FAIL(f->ops->stream_destroy(f, s));
    DMM_OK_OR_FAIL(g_cuda->ops->free(g_cuda, b, n));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    dmm_driver_destroy(f);
    kit_census_zero(g_cuda);
    free(p);
}

/* A whole release (not only a decommit) through the queue, with two streams' events. */
static void release_waits_for_every_stream(void **state) {
    (void)state;
    dmm_driver *f = NULL;
    DMM_OK_OR_FAIL(dmm_fault_driver_create(g_cuda, &f));
    dmm_arena_config cfg = kit_config(4 * GIB, 0, 0, NULL);
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(f, &cfg, &m));
    done_box box = {0, {0}};
    dmm_deferred_config qc = {sizeof qc, f, 16, on_done, &box};
    dmm_deferred *q = NULL;
    DMM_OK_OR_FAIL(dmm_deferred_create(&qc, &q));
    const size_t n = 128 * MIB;
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, n, 0, &a));
    uintptr_t b[2] = {0, 0};
    dmm_stream s[2] = {NULL, NULL};
    dmm_event e[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        DMM_OK_OR_FAIL(g_cuda->ops->alloc(g_cuda, n, &b[k]));
        DMM_OK_OR_FAIL(f->ops->stream_create(f, &s[k]));
        DMM_OK_OR_FAIL(f->ops->event_create(f, &e[k]));
    }
    unsigned char *p = kit_pattern(60, n);
    kit_put(g_cuda, (uintptr_t)a.ptr, p, n);
    /* stream 0: short work; stream 1: long work. The release must wait for both. */
    for (int i = 0; i < 10; i++) DMM_OK_OR_FAIL(f->ops->copy(f, b[0], (uintptr_t)a.ptr, n, s[0]));
    for (int i = 0; i < 1500; i++) DMM_OK_OR_FAIL(f->ops->copy(f, b[1], (uintptr_t)a.ptr, n, s[1]));
    for (int k = 0; k < 2; k++) DMM_OK_OR_FAIL(f->ops->event_record(f, e[k], s[k]));
    const uint64_t unmaps0 = dmm_fault_calls(f, DMM_OP_UNMAP);
    dmm_deferred_request r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.kind = DMM_DEFERRED_RELEASE;
    r.mechanism = m;
    r.allocation = a;
    r.n_events = 2;
    r.events[0] = e[0];
    r.events[1] = e[1];
    DMM_OK_OR_FAIL(dmm_deferred_enqueue(q, &r));
    if (g_cuda->ops->event_query(g_cuda, e[1]) != DMM_ERR_BUSY)
        fail_msg("%s", "the long chain had already finished when the release was requested: lengthen it");
    size_t pending = 1;
    int polls = 0;
    while (pending > 0) {
        DMM_OK_OR_FAIL(dmm_deferred_poll(q, NULL));
        polls++;
        if (dmm_fault_calls(f, DMM_OP_UNMAP) != unmaps0) {
            DMM_OK_OR_FAIL(g_cuda->ops->event_query(g_cuda, e[0]));
            DMM_OK_OR_FAIL(g_cuda->ops->event_query(g_cuda, e[1]));
        }
        DMM_OK_OR_FAIL(dmm_deferred_pending(q, &pending));
        if (pending > 0) pause_briefly();
        if (polls > 10 * 1000 * 1000) fail_msg("%s", "the events never completed");
    }
    assert_int_equal(box.calls, 1);
    assert_int_equal(box.outcome.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_fault_calls(f, DMM_OP_STREAM_SYNCHRONIZE) + dmm_fault_calls(f, DMM_OP_EVENT_SYNCHRONIZE), 0);
    for (int k = 0; k < 2; k++) {
        kit_expect(g_cuda, b[k], p, n, "a stream's copy of the released allocation");
        DMM_OK_OR_FAIL(g_cuda->ops->free(g_cuda, b[k], n));
        DMM_OK_OR_FAIL(f->ops->event_destroy(f, e[k]));
        DMM_OK_OR_FAIL(f->ops->stream_destroy(f, s[k]));
    }
    DMM_OK_OR_FAIL(dmm_deferred_destroy(q));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    dmm_driver_destroy(f);
    kit_census_zero(g_cuda);
    free(p);
}

int main(void) {
    g_cuda = kit_cuda_open_or_skip("test_cuda_deferred");
    if (g_cuda->ops->reserve == NULL) {
        printf("test_cuda_deferred: device 0 has no VMM\n");
        dmm_driver_destroy(g_cuda);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decommit_waits_for_the_work_event),
        cmocka_unit_test(release_waits_for_every_stream),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dmm_driver_destroy(g_cuda);
    return rc;
}
