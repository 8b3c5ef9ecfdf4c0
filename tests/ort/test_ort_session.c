/* SPDX-License-Identifier: Apache-2.0 */
/* tests/ort/test_ort_session.c — issue 12, acceptance 1: a real ONNX Runtime session with
 * session.use_env_allocators=1 builds and runs through dmm.
 *
 * What is proven, against the real libonnxruntime.so.1: the session's creation allocates through dmm
 * (the initializers through Reserve, from the pool charged to the governor as weights: the weights
 * lease holds at least the initializers' bytes), every Run allocates through Alloc (the run pool's
 * malloc count rises by at least one per Run, charged as activation), the outputs equal those of the same
 * model in a session on ONNX Runtime's own allocator bit for bit, and when every session is released the
 * pools hold no block, and after the teardown the governor and the driver hold nothing. Control: the
 * same session without the option leaves dmm's counters exactly as they were.
 */
#include "ort_kit.h"

static const dmm_onnx_model_desc MLP = {256, 512, 2, 4, 7}; /* W0 512 KiB, W1 1 MiB, B 2 KiB each */

static void a_session_with_env_allocators_runs_through_dmm(void **state) {
    (void)state;
    kit_world w = kit_world_open("test_ort_session", "session");
    dmm_ort_runtime *rt = w.rt;
    dmm_ort_allocator *a = w.a;

    /* Reference: ONNX Runtime's own allocator (no option); dmm's counters do not move. */
    dmm_ort_stats before = kit_stats(a);
    struct OrtSession *own = kit_session(rt, w.env, &MLP, false, NULL, 0);
    size_t n = (size_t)MLP.batch * MLP.hidden;
    float *want = calloc(n, sizeof *want), *got = calloc(n, sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    assert_int_equal(kit_run(rt, own, &MLP, MLP.batch, 11, want, NULL, 0), 0);
    dmm_ort_stats control = kit_stats(a);
    assert_int_equal(control.reserves, before.reserves);
    assert_int_equal(control.allocs, before.allocs);
    assert_int_equal(control.in_use, before.in_use);
    assert_int_equal(control.weights.committed_bytes.current, before.weights.committed_bytes.current);
    assert_int_equal(control.run.committed_bytes.current, before.run.committed_bytes.current);

    /* With the option: creation reserves the initializers as weights. */
    struct OrtSession *s = kit_session(rt, w.env, &MLP, true, NULL, 0);
    dmm_ort_stats created = kit_stats(a);
    /* the two weight matrices (ONNX Runtime may keep the 2 KiB biases elsewhere) */
    uint64_t init_bytes = ((uint64_t)MLP.in * MLP.hidden + (uint64_t)MLP.hidden * MLP.hidden) * 4;
    printf("after creation: reserves %llu allocs %llu in_use %llu\n", (unsigned long long)created.reserves,
           (unsigned long long)created.allocs, (unsigned long long)created.in_use);
    assert_true(created.reserves >= 2); /* W0, W1 at least */
    assert_true((uint64_t)created.weights.allocated_bytes.current >= init_bytes);
    uint64_t w_owned = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(w.g, dmm_device_lease(a->devices[DMM_ORT_POOL_WEIGHTS]), &w_owned, NULL));
    assert_true(w_owned >= init_bytes);

    for (int r = 0; r < 3; r++) {
        dmm_ort_stats st0 = kit_stats(a);
        memset(got, 0xff, n * sizeof *got);
        assert_int_equal(kit_run(rt, s, &MLP, MLP.batch, 11, got, NULL, 0), 0);
        dmm_ort_stats st1 = kit_stats(a);
        printf("run %d: allocs %llu -> %llu\n", r, (unsigned long long)st0.allocs, (unsigned long long)st1.allocs);
        assert_true(st1.allocs > st0.allocs);
        assert_memory_equal(got, want, n * sizeof *got); /* bit for bit */
    }
    rt->calls.ReleaseSession(s);
    rt->calls.ReleaseSession(own);
    dmm_ort_stats end = kit_stats(a);
    assert_int_equal(end.in_use, 0);
    assert_int_equal(end.weights.allocations.current + end.run.allocations.current, 0);
    assert_int_equal(end.bad_frees, 0);
    assert_int_equal(end.refusals, 0);

    kit_world_drop_allocator(&w);
    dmm_tier_usage tu = {.size = sizeof tu};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(w.g, KIT_HOST, &tu));
    assert_int_equal(tu.used[DMM_AXIS_OWNED], 0);
    assert_int_equal(tu.leases, 0);
    free(want);
    free(got);
    kit_world_close(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_session_with_env_allocators_runs_through_dmm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
