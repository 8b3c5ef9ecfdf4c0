/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_fault_driver.c — the fault driver fails exactly the planned calls (nth, repeat,
 * sticky, DMM_OP_ANY), never forwards a failed call (the inner census does not move), reports the
 * inner census, names op / call / plan in its sentence, and holds events on request. */
#include "testkit.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

typedef struct fixture {
    dmm_driver *host;
    dmm_driver *fault;
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (fx == NULL) return -1;
    if (dmm_host_driver_create(NULL, &fx->host) != DMM_OK) return -1;
    if (dmm_fault_driver_create(fx->host, &fx->fault) != DMM_OK) return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(fx->host->ops->census(fx->host, &c));
    assert_int_equal(c.reserved_bytes + c.handles + c.mapped_bytes + c.eager_bytes, 0); /* nothing live */
    dmm_driver_destroy(fx->fault);
    dmm_driver_destroy(fx->host);
    free(fx);
    return 0;
}

static dmm_driver_census census(dmm_driver *d) {
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(d->ops->census(d, &c));
    return c;
}

static void test_nth_fails_once_and_is_not_forwarded(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_ALLOC, 2, 1, DMM_ERR_OUT_OF_MEMORY));
    uintptr_t a = 0, b = 0, c = 0;
    DMM_OK_OR_FAIL(f->ops->alloc(f, 4096, &a));
    dmm_driver_census before = census(fx->host);
    assert_int_equal(f->ops->alloc(f, 4096, &b), DMM_ERR_OUT_OF_MEMORY);
    assert_int_equal(b, 0); /* not forwarded: no output written, nothing held */
    assert_int_equal(census(fx->host).eager_bytes, before.eager_bytes);
    assert_int_equal(census(f).eager_bytes, before.eager_bytes); /* census = the inner's */
    assert_string_equal(dmm_last_error(),
                        "fault driver: injected DMM_ERR_OUT_OF_MEMORY on alloc call #2 (plan: fail call 2 of "
                        "alloc, 1 time)");
    DMM_OK_OR_FAIL(f->ops->alloc(f, 4096, &c));
    assert_int_equal(dmm_fault_calls(f, DMM_OP_ALLOC), 3);
    assert_int_equal(dmm_fault_injected(f), 1);
    DMM_OK_OR_FAIL(f->ops->free(f, a, 4096));
    DMM_OK_OR_FAIL(f->ops->free(f, c, 4096));
}

static void test_example_sentence_on_unmap(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    uintptr_t va = 0;
    dmm_phys h = 0;
    DMM_OK_OR_FAIL(f->ops->reserve(f, 8 * MiB, 0, &va));
    DMM_OK_OR_FAIL(f->ops->create(f, 2 * MiB, &h));
    DMM_OK_OR_FAIL(f->ops->map(f, va, 2 * MiB, h));
    DMM_OK_OR_FAIL(f->ops->map(f, va + 2 * MiB, 2 * MiB, h));
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_UNMAP, 2, 1, DMM_ERR_DRIVER));
    DMM_OK_OR_FAIL(f->ops->unmap(f, va, 2 * MiB));
    dmm_driver_census before = census(fx->host);
    assert_int_equal(f->ops->unmap(f, va + 2 * MiB, 2 * MiB), DMM_ERR_DRIVER);
    assert_string_equal(dmm_last_error(),
                        "fault driver: injected DMM_ERR_DRIVER on unmap call #2 (plan: fail call 2 of unmap, 1 time)");
    assert_int_equal(census(fx->host).mapped_bytes, before.mapped_bytes); /* still mapped for real */
    assert_int_equal(census(fx->host).mapped_bytes, 2 * MiB);
    DMM_OK_OR_FAIL(f->ops->unmap(f, va + 2 * MiB, 2 * MiB));
    DMM_OK_OR_FAIL(f->ops->release(f, h));
    DMM_OK_OR_FAIL(f->ops->unreserve(f, va, 8 * MiB));
}

static void test_plan_counts_from_now_and_repeat(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    uintptr_t p[6] = {0};
    for (int i = 0; i < 3; i++) DMM_OK_OR_FAIL(f->ops->alloc(f, 4096, &p[i]));
    /* counted from the plan: the very next call is #1 */
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_FREE, 1, 2, DMM_ERR_DRIVER));
    assert_int_equal(f->ops->free(f, p[0], 4096), DMM_ERR_DRIVER);
    dmm_test_error_mentions("free call #1", "fail call 1 of free, 2 times", NULL);
    assert_int_equal(f->ops->free(f, p[0], 4096), DMM_ERR_DRIVER);
    dmm_test_error_mentions("free call #2", NULL);
    DMM_OK_OR_FAIL(f->ops->free(f, p[0], 4096));
    DMM_OK_OR_FAIL(f->ops->free(f, p[1], 4096));
    /* a new plan replaces the old one for that op */
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_FREE, 5, 1, DMM_ERR_DRIVER));
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_FREE, 1, 1, DMM_ERR_BUSY));
    assert_int_equal(f->ops->free(f, p[2], 4096), DMM_ERR_BUSY);
    DMM_OK_OR_FAIL(f->ops->free(f, p[2], 4096));
    assert_int_equal(dmm_fault_calls(f, DMM_OP_FREE), 6);
    assert_int_equal(dmm_fault_injected(f), 3);
}

static void test_sticky_and_clear(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_CREATE, 2, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    dmm_phys h = 0, g = 0;
    DMM_OK_OR_FAIL(f->ops->create(f, 2 * MiB, &h));
    for (int i = 0; i < 50; i++) assert_int_equal(f->ops->create(f, 2 * MiB, &g), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("create call #51", "every call from then on", NULL);
    assert_int_equal(census(fx->host).handles, 1);
    assert_int_equal(dmm_fault_injected(f), 50);
    DMM_OK_OR_FAIL(dmm_fault_clear(f));
    DMM_OK_OR_FAIL(f->ops->create(f, 2 * MiB, &g));
    assert_int_equal(dmm_fault_calls(f, DMM_OP_CREATE), 52); /* counters stay */
    DMM_OK_OR_FAIL(f->ops->release(f, h));
    DMM_OK_OR_FAIL(f->ops->release(f, g));
}

static void test_any_counts_all_but_granularity_and_census(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_ANY, 3, 1, DMM_ERR_DRIVER));
    size_t g = 0;
    for (int i = 0; i < 5; i++) DMM_OK_OR_FAIL(f->ops->granularity(f, &g)); /* not counted */
    (void)census(f);                                                          /* not counted */
    uintptr_t a = 0;
    dmm_event e = NULL;
    DMM_OK_OR_FAIL(f->ops->alloc(f, 4096, &a));      /* any #1 */
    DMM_OK_OR_FAIL(f->ops->event_create(f, &e));     /* any #2 */
    assert_int_equal(f->ops->event_query(f, e), DMM_ERR_DRIVER); /* any #3 */
    dmm_test_error_mentions("event_query", "call #3 of any op", "fail call 3 of any op, 1 time", NULL);
    DMM_OK_OR_FAIL(f->ops->event_query(f, e));
    assert_int_equal(dmm_fault_calls(f, DMM_OP_ANY), 4);
    assert_int_equal(dmm_fault_calls(f, DMM_OP_GRANULARITY), 5);
    assert_int_equal(dmm_fault_calls(f, DMM_OP_EVENT_QUERY), 2);
    /* granularity can still be failed by its own plan */
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_GRANULARITY, 1, 1, DMM_ERR_DRIVER));
    assert_int_equal(f->ops->granularity(f, &g), DMM_ERR_DRIVER);
    DMM_OK_OR_FAIL(f->ops->event_destroy(f, e));
    DMM_OK_OR_FAIL(f->ops->free(f, a, 4096));
}

static void test_hold_events(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    dmm_event e = NULL;
    DMM_OK_OR_FAIL(f->ops->event_create(f, &e));
    DMM_OK_OR_FAIL(f->ops->event_record(f, e, NULL));
    DMM_OK_OR_FAIL(f->ops->event_query(f, e));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f, true));
    assert_int_equal(f->ops->event_query(f, e), DMM_ERR_BUSY);
    dmm_test_error_mentions("held", NULL);
    assert_int_equal(f->ops->event_synchronize(f, e), DMM_ERR_BUSY);
    assert_int_equal(dmm_fault_injected(f), 0); /* holding is not a failure */
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f, false));
    DMM_OK_OR_FAIL(f->ops->event_query(f, e));
    DMM_OK_OR_FAIL(f->ops->event_synchronize(f, e));
    DMM_OK_OR_FAIL(f->ops->event_destroy(f, e));
}

/* The capture switch: one stream captures (its id reported), others and the default one do not; a
 * second capture is refused while one is on; the queries count as their own op, not as ANY. */
static void test_a_capture_on_purpose(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    dmm_stream s1 = NULL, s2 = NULL;
    DMM_OK_OR_FAIL(f->ops->stream_create(f, &s1));
    DMM_OK_OR_FAIL(f->ops->stream_create(f, &s2));
    bool capturing = true;
    uint64_t id = 9;
    DMM_OK_OR_FAIL(f->ops->stream_capture_status(f, s1, &capturing, &id)); /* the host driver has no captures */
    assert_false(capturing);
    assert_int_equal(id, 0);
    DMM_OK_OR_FAIL(dmm_fault_capture(f, s1, 42));
    DMM_OK_OR_FAIL(f->ops->stream_capture_status(f, s1, &capturing, &id));
    assert_true(capturing);
    assert_int_equal(id, 42);
    DMM_OK_OR_FAIL(f->ops->stream_capture_status(f, s2, &capturing, &id));
    assert_false(capturing);
    assert_int_equal(dmm_fault_capture(f, s2, 43), DMM_ERR_BUSY);
    dmm_test_error_mentions("one capture at a time", NULL);
    assert_int_equal(dmm_fault_capture(f, s2, 0), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(dmm_fault_capture(f, NULL, 0));
    DMM_OK_OR_FAIL(f->ops->stream_capture_status(f, s1, &capturing, &id));
    assert_false(capturing);
    assert_int_equal(dmm_fault_calls(f, DMM_OP_CAPTURE_STATUS), 4);
    assert_int_equal(dmm_fault_calls(f, DMM_OP_ANY), 2); /* the two stream_create calls only */
    DMM_OK_OR_FAIL(f->ops->stream_destroy(f, s1));
    DMM_OK_OR_FAIL(f->ops->stream_destroy(f, s2));
}

static void test_bad_plans_and_names(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    assert_int_equal(dmm_fault_plan(f, DMM_OP_MAP, 0, 1, DMM_ERR_DRIVER), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("nth 0", NULL);
    assert_int_equal(dmm_fault_plan(f, DMM_OP_MAP, 1, 0, DMM_ERR_DRIVER), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_fault_plan(f, DMM_OP_MAP, 1, 1, DMM_OK), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_fault_plan(f, DMM_OP_COUNT, 1, 1, DMM_ERR_DRIVER), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_fault_plan(fx->host, DMM_OP_MAP, 1, 1, DMM_ERR_DRIVER), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not a fault driver", NULL);
    assert_int_equal(dmm_fault_hold_events(fx->host, true), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_fault_calls(fx->host, DMM_OP_ANY), 0);
    assert_int_equal(dmm_fault_driver_create(NULL, &f), DMM_ERR_INVALID_ARGUMENT);
    assert_string_equal(dmm_driver_op_name(DMM_OP_SET_ACCESS), "set_access");
    assert_string_equal(dmm_driver_op_name(DMM_OP_MEM_INFO), "mem_info");
    assert_string_equal(dmm_driver_op_name((dmm_driver_op)99), "unknown op");
    assert_string_equal(fx->fault->ops->name, "fault");
    assert_int_equal(fx->fault->device.tier, fx->host->device.tier);
}

/* A wrapped driver without VMM still reads as one without VMM. */
static void test_absent_slots_stay_absent(void **state) {
    fixture *fx = *state;
    dmm_driver_ops no_vmm = *fx->host->ops;
    no_vmm.granularity = NULL;
    no_vmm.reserve = NULL;
    no_vmm.unreserve = NULL;
    no_vmm.create = NULL;
    no_vmm.release = NULL;
    no_vmm.map = NULL;
    no_vmm.unmap = NULL;
    no_vmm.set_access = NULL;
    const dmm_driver_ops *saved = fx->host->ops;
    fx->host->ops = &no_vmm;
    dmm_driver *f = NULL;
    DMM_OK_OR_FAIL(dmm_fault_driver_create(fx->host, &f));
    assert_null(f->ops->map);
    assert_null(f->ops->granularity);
    assert_non_null(f->ops->alloc);
    assert_non_null(f->ops->census);
    dmm_driver_destroy(f);
    fx->host->ops = saved;
}

typedef struct caller {
    dmm_driver *f;
    int n;
} caller;

static void *call_many(void *arg) {
    caller *c = arg;
    for (int i = 0; i < c->n; i++) {
        uint64_t fr, tot;
        (void)c->f->ops->mem_info(c->f, &fr, &tot);
    }
    return NULL;
}

static void test_threads_count_exactly(void **state) {
    fixture *fx = *state;
    dmm_driver *f = fx->fault;
    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_MEM_INFO, 100, 50, DMM_ERR_DRIVER));
    enum { T = 4, N = 300 };
    pthread_t th[T];
    caller c = {f, N};
    for (int i = 0; i < T; i++) assert_int_equal(pthread_create(&th[i], NULL, call_many, &c), 0);
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    assert_int_equal(dmm_fault_calls(f, DMM_OP_MEM_INFO), T * N);
    assert_int_equal(dmm_fault_injected(f), 50);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nth_fails_once_and_is_not_forwarded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_example_sentence_on_unmap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_counts_from_now_and_repeat, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sticky_and_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_any_counts_all_but_granularity_and_census, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hold_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_capture_on_purpose, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_plans_and_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_absent_slots_stay_absent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_count_exactly, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
