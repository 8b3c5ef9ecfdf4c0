/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_driver_latch.c — the device-loss latch at the driver funnel (src/driver/call.h,
 * dmm_driver_lost in dmm/driver.h), over fault(host).
 *
 *   - a usable driver is not lost and its funnel calls reach the driver;
 *   - the first DMM_ERR_DEVICE_LOST a call reports latches the driver: its sentence (the op's name and
 *     the driver's words) is the one dmm_driver_lost reports, and stays the last error;
 *   - every later call of every op is refused with DEVICE_LOST and that first sentence, without a call
 *     to the driver (the fault driver's counters do not move), also once the fault plan is gone;
 *   - other failures (out of memory, a busy event) latch nothing;
 *   - a NULL slot is UNSUPPORTED with a sentence, never a call;
 *   - the latch is never undone; a confirmation is refused while usable and sticks once lost;
 *   - many threads meeting the loss at once latch it once, with one whole sentence (TSan-clean).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "driver/call.h"
#include "testkit.h"

typedef struct env {
    dmm_driver *host, *fault;
} env;

static env make(void) {
    env e = {0};
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &e.host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(e.host, &e.fault));
    return e;
}

static void drop(env *e) {
    dmm_driver_destroy(e->fault);
    dmm_test_census_zero(e->host);
    dmm_driver_destroy(e->host);
}

static void a_usable_driver_is_not_lost(void **state) {
    (void)state;
    env e = make();
    const char *why = "x";
    assert_false(dmm_driver_lost(e.fault, &why));
    assert_string_equal(why, "");
    assert_false(dmm_driver_lost(NULL, &why));
    dmm_event ev = NULL;
    DMM_OK_OR_FAIL(dmm__drv_event_create(e.fault, &ev));
    DMM_OK_OR_FAIL(dmm__drv_event_record(e.fault, ev, NULL));
    DMM_OK_OR_FAIL(dmm__drv_event_query(e.fault, ev));
    DMM_OK_OR_FAIL(dmm__drv_event_destroy(e.fault, ev));
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), 4);
    assert_false(dmm__drv_confirm_terminated(e.fault)); /* nothing to confirm without a loss */
    assert_false(dmm__drv_lost(e.fault));
    drop(&e);
}

static void the_first_loss_latches_and_every_later_call_is_refused_without_a_driver_call(void **state) {
    (void)state;
    env e = make();
    dmm_event ev = NULL;
    DMM_OK_OR_FAIL(dmm__drv_event_create(e.fault, &ev));
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_EVENT_QUERY, 1, 1, DMM_ERR_DEVICE_LOST)); /* once only */
    assert_int_equal(dmm__drv_event_query(e.fault, ev), DMM_ERR_DEVICE_LOST);
    const char *first = dmm_last_error();
    assert_non_null(strstr(first, "event_query")); /* the latch keeps the driver's sentence */
    const char *why = NULL;
    assert_true(dmm_driver_lost(e.fault, &why));
    assert_non_null(strstr(why, "event_query: "));
    char kept[sizeof e.fault->latch.why];
    snprintf(kept, sizeof kept, "%s", why);

    /* the plan is spent: the fault driver would answer now, but nothing reaches it */
    uint64_t calls = dmm_fault_calls(e.fault, DMM_OP_ANY);
    uintptr_t va = 0, p = 0;
    dmm_phys h = 0;
    size_t g = 0;
    uint64_t fb = 0, tb = 0;
    dmm_stream st = NULL;
    dmm_status got[] = {
        dmm__drv_granularity(e.fault, &g),           dmm__drv_reserve(e.fault, 2u << 20, 0, &va),
        dmm__drv_unreserve(e.fault, 0, 2u << 20),    dmm__drv_create(e.fault, 2u << 20, &h),
        dmm__drv_release(e.fault, 1),                dmm__drv_map(e.fault, 0, 2u << 20, 1),
        dmm__drv_unmap(e.fault, 0, 2u << 20),        dmm__drv_set_access(e.fault, 0, 2u << 20, DMM_ACCESS_READ),
        dmm__drv_alloc(e.fault, 4096, &p),           dmm__drv_free(e.fault, 0, 4096),
        dmm__drv_stream_create(e.fault, &st),        dmm__drv_stream_destroy(e.fault, NULL),
        dmm__drv_event_create(e.fault, &ev),         dmm__drv_event_destroy(e.fault, ev),
        dmm__drv_event_record(e.fault, ev, NULL),    dmm__drv_event_query(e.fault, ev),
        dmm__drv_event_synchronize(e.fault, ev),     dmm__drv_copy(e.fault, 0, 0, 1, NULL),
        dmm__drv_stream_synchronize(e.fault, NULL),  dmm__drv_mem_info(e.fault, &fb, &tb),
    };
    for (size_t i = 0; i < sizeof got / sizeof *got; i++) {
        if (got[i] != DMM_ERR_DEVICE_LOST) fail_msg("funnel call %zu answered %s", i, dmm_status_str(got[i]));
    }
    assert_int_equal(dmm_fault_calls(e.fault, DMM_OP_ANY), calls);
    dmm_test_error_mentions("mem_info refused without a driver call", "device was lost", "first seen at",
                            "event_query", NULL);
    assert_true(dmm_driver_lost(e.fault, &why));
    assert_string_equal(why, kept); /* the first sentence, never a later one */

    assert_true(dmm__drv_confirm_terminated(e.fault));
    assert_true(dmm__drv_terminated(e.fault));
    assert_true(dmm_driver_lost(e.fault, NULL)); /* confirmed is still lost */
    /* the test's own teardown: the event through the driver itself (the context goes with it) */
    DMM_OK_OR_FAIL(e.fault->ops->event_destroy(e.fault, ev));
    drop(&e);
}

static void other_failures_latch_nothing(void **state) {
    (void)state;
    env e = make();
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_CREATE, 1, 1, DMM_ERR_OUT_OF_MEMORY));
    dmm_phys h = 0;
    assert_int_equal(dmm__drv_create(e.fault, 2u << 20, &h), DMM_ERR_OUT_OF_MEMORY);
    assert_false(dmm_driver_lost(e.fault, NULL));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(e.fault, true));
    dmm_event ev = NULL;
    DMM_OK_OR_FAIL(dmm__drv_event_create(e.fault, &ev));
    assert_int_equal(dmm__drv_event_query(e.fault, ev), DMM_ERR_BUSY);
    assert_false(dmm_driver_lost(e.fault, NULL));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(e.fault, false));
    DMM_OK_OR_FAIL(dmm__drv_event_destroy(e.fault, ev));
    DMM_OK_OR_FAIL(dmm__drv_create(e.fault, 2u << 20, &h));
    DMM_OK_OR_FAIL(dmm__drv_release(e.fault, h));
    drop(&e);
}

/* A driver of one's own with only granularity filled: every other funnel call is UNSUPPORTED. */
static dmm_status only_granularity(dmm_driver *d, size_t *bytes) {
    (void)d;
    *bytes = 4096;
    return DMM_OK;
}

static void an_absent_slot_is_unsupported(void **state) {
    (void)state;
    static const dmm_driver_ops ops = {.size = sizeof ops, .name = "sparse", .granularity = only_granularity};
    dmm_driver d = {.ops = &ops, .device = {DMM_TIER_HOST, 0}};
    size_t g = 0;
    DMM_OK_OR_FAIL(dmm__drv_granularity(&d, &g));
    assert_int_equal(g, 4096);
    dmm_event ev = NULL;
    assert_int_equal(dmm__drv_event_create(&d, &ev), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("driver 'sparse'", "has no event_create", NULL);
    assert_false(dmm_driver_lost(&d, NULL));
}

enum { THREADS = 8 };

typedef struct racer {
    dmm_driver *fault;
    dmm_event ev;
    dmm_status got;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    r->got = dmm__drv_event_query(r->fault, r->ev);
    const char *why = NULL;
    if (!dmm_driver_lost(r->fault, &why) || strstr(why, "event_query: ") != why) r->got = DMM_ERR_INVALID_ARGUMENT;
    return NULL;
}

static void threads_meeting_the_loss_at_once_latch_it_once(void **state) {
    (void)state;
    env e = make();
    dmm_event ev = NULL;
    DMM_OK_OR_FAIL(dmm__drv_event_create(e.fault, &ev));
    DMM_OK_OR_FAIL(dmm_fault_plan(e.fault, DMM_OP_EVENT_QUERY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    pthread_t t[THREADS];
    racer r[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (racer){e.fault, ev, DMM_OK};
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(r[i].got, DMM_ERR_DEVICE_LOST);
    }
    /* at least one query reached the driver and at most all of them; the rest were refused */
    uint64_t q = dmm_fault_calls(e.fault, DMM_OP_EVENT_QUERY);
    assert_true(q >= 1 && q <= THREADS);
    DMM_OK_OR_FAIL(e.fault->ops->event_destroy(e.fault, ev));
    drop(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_usable_driver_is_not_lost),
        cmocka_unit_test(the_first_loss_latches_and_every_later_call_is_refused_without_a_driver_call),
        cmocka_unit_test(other_failures_latch_nothing),
        cmocka_unit_test(an_absent_slot_is_unsupported),
        cmocka_unit_test(threads_meeting_the_loss_at_once_latch_it_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
