/* SPDX-License-Identifier: Apache-2.0 */
/* tests/ort/test_ort_faults.c — issue 12, acceptance 6: a fault sweep of the OrtAllocator's Alloc,
 * Reserve and Free over the fault driver (fail the 1st, 2nd, ... driver call of a fixed program until
 * the program runs without a fault).
 *
 * What is proven after every step of every pass: a request either returns a usable block (written
 * end to end) or NULL with the refusal counted and a sentence kept; the governor's used bytes equal the
 * driver's census of handle bytes and the pools' physical bytes (census = stats); the pools pass their
 * expensive check; after the pass's frees and a trim nothing is live; at the end the census is zero.
 * The entry points are the plain C ones (null_on_refusal = 1): the test calls them from C.
 */
#include "ort_kit.h"

static void census_equals_stats(dmm_driver *fault, dmm_governor *g, dmm_ort_allocator *a) {
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(fault->ops->census(fault, &c));
    dmm_tier_usage tu = {.size = sizeof tu};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(g, KIT_HOST, &tu));
    dmm_ort_stats st = kit_stats(a);
    assert_int_equal(tu.used[DMM_AXIS_OWNED], c.handle_bytes);
    assert_int_equal((uint64_t)st.weights.physical_bytes.current + (uint64_t)st.run.physical_bytes.current,
                     c.handle_bytes);
    DMM_OK_OR_FAIL(dmm_pool_check(dmm_device_pool(a->devices[DMM_ORT_POOL_WEIGHTS])));
    DMM_OK_OR_FAIL(dmm_pool_check(dmm_device_pool(a->devices[DMM_ORT_POOL_RUN])));
}

static void every_step_is_honest_under_injected_faults(void **state) {
    (void)state;
    dmm_ort_runtime *rt = kit_ort_open_or_skip("test_ort_faults");
    dmm_driver *host = kit_host();
    dmm_driver *fault = NULL;
    DMM_OK_OR_FAIL(dmm_fault_driver_create(host, &fault));
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    dmm_ort_config c = {.size = sizeof c, .name = "faults", .va_bytes = 1ull << 30, .null_on_refusal = 1};
    dmm_ort_allocator *a = NULL;
    DMM_OK_OR_FAIL(dmm_ort_allocator_create(rt, fault, g, &c, &a));
    struct OrtAllocator *o = dmm_ort_allocator_ort(a);
    const struct { int reserve; size_t bytes; } program[] = {
        {1, 300 * KIB}, {0, 200 * KIB}, {0, 1 * MIB}, {1, 64 * KIB}, {0, 3000}, {0, 5 * MIB},
    };
    enum { STEPS = sizeof program / sizeof program[0] };
    bool clean = false;
    uint64_t passes = 0, failures_seen = 0;
    for (uint64_t nth = 1; !clean && nth < 500; nth++) {
        passes++;
        DMM_OK_OR_FAIL(dmm_fault_clear(fault));
        uint64_t injected0 = dmm_fault_injected(fault);
        DMM_OK_OR_FAIL(dmm_fault_plan(fault, DMM_OP_ANY, nth, 1, DMM_ERR_DRIVER));
        void *got[STEPS] = {0};
        for (int k = 0; k < STEPS; k++) {
            uint64_t refusals0 = kit_stats(a).refusals;
            got[k] = program[k].reserve ? o->Reserve(o, program[k].bytes) : o->Alloc(o, program[k].bytes);
            if (got[k] != NULL) {
                memset(got[k], 0xa5, program[k].bytes);
            } else {
                failures_seen++;
                assert_int_equal(kit_stats(a).refusals, refusals0 + 1);
                char msg[DMM_ORT_ERROR_CAP];
                assert_int_not_equal(dmm_ort_allocator_last_error(a, msg, sizeof msg), DMM_OK);
                assert_non_null(strstr(msg, "dmm ort: "));
            }
            census_equals_stats(fault, g, a);
        }
        for (int k = STEPS - 1; k >= 0; k--) {
            o->Free(o, got[k]);
            census_equals_stats(fault, g, a);
        }
        uint64_t bad = kit_stats(a).bad_frees;
        assert_int_equal(bad, 0);
        DMM_OK_OR_FAIL(dmm_fault_clear(fault));
        DMM_OK_OR_FAIL(dmm_ort_allocator_trim(a, NULL));
        census_equals_stats(fault, g, a);
        assert_int_equal(kit_stats(a).in_use, 0);
        clean = dmm_fault_injected(fault) == injected0;
    }
    assert_true(clean);
    assert_true(failures_seen > 0);
    printf("fault sweep: %llu passes, %llu refused steps\n", (unsigned long long)passes,
           (unsigned long long)failures_seen);
    DMM_OK_OR_FAIL(dmm_ort_allocator_destroy(a));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
    dmm_test_census_zero(fault);
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
    dmm_ort_runtime_close(rt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_step_is_honest_under_injected_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
