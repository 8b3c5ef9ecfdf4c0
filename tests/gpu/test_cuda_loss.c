/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_cuda_loss.c — issue 3, acceptance 5: device loss over the real GPU.
 *
 * 1. A fault plan makes fault(cuda) answer every call with a sticky DMM_ERR_DEVICE_LOST (what the
 *    cuda driver reports for CUDA_ERROR_ILLEGAL_ADDRESS and the other sticky context errors). After
 *    the arena saw it: no more driver calls (the fault driver's counters stand still), nothing is
 *    refunded (the accounting tally stands still), every operation reports DEVICE_LOST, and CUDA
 *    really still holds every handle and mapping (the real census, and the contents read through
 *    the real driver). dmm_arena_confirm_context_terminated then discharges the ownership, and
 *    destroying the cuda driver gives back the last reference on the primary context, which tears
 *    it down with everything in it.
 * 2. A real sticky error: a one-instruction PTX kernel stores to an unmapped address; the cuda
 *    driver maps CUDA_ERROR_ILLEGAL_ADDRESS to DMM_ERR_DEVICE_LOST, keeps CUDA's name in the
 *    sentence, and from then on refuses every op without calling CUDA; an arena over it reports
 *    DEVICE_LOST too. It runs last: it ruins this process's context on purpose.
 * Exit 77 without a GPU. */
#include <dlfcn.h>

#include "cuda_kit.h"
#include "driver/cuda_decl.h"

static void lost_arena_makes_no_driver_call(void **state) {
    (void)state;
    dmm_driver *cuda = kit_cuda_open_or_skip("test_cuda_loss");
    dmm_driver *f = NULL;
    DMM_OK_OR_FAIL(dmm_fault_driver_create(cuda, &f));
    kit_tally tally;
    memset(&tally, 0, sizeof tally);
    dmm_accounting acct = kit_accounting(&tally);
    dmm_arena_config cfg = kit_config(4 * GIB, 2 * MIB, 8 * MIB, &acct);
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(f, &cfg, &m));
    /* a cached handle, a 3-chunk allocation with contents, a small one, a VA-only slot */
    dmm_allocation c, a, b, w;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * MIB, 0, &c));
    assert_int_equal(dmm_mechanism_release(m, &c).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 6 * MIB, 0, &a));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 1 * MIB, 0, &b));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(m, 8 * MIB, 0, NULL, 0, &w));
    unsigned char *p = kit_pattern(70, 6 * MIB);
    kit_put(cuda, (uintptr_t)a.ptr, p, 6 * MIB);

    DMM_OK_OR_FAIL(dmm_fault_plan(f, DMM_OP_ANY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_FAILED); /* the first unmap was lost: nothing changed */
    assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
    assert_int_equal(dmm_fault_injected(f), 1);

    const uint64_t calls = dmm_fault_calls(f, DMM_OP_ANY);
    const int64_t owned = dmm_atomic_load_seq_cst(&tally.owned), mapped = dmm_atomic_load_seq_cst(&tally.mapped);
    const uint64_t refunds = dmm_atomic_load_seq_cst(&tally.refunds);
    const dmm_driver_census real = kit_census(cuda);
    assert_true(real.mapped_bytes >= 7 * MIB && real.handles >= 4);

    dmm_allocation x;
    uint64_t v = 0;
    assert_int_equal(dmm_mechanism_allocate(m, 4096, 0, &x), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("lost its device", NULL);
    assert_int_equal(dmm_mechanism_allocate_committed(m, 4096, 0, NULL, 0, &x), DMM_ERR_DEVICE_LOST);
    const dmm_allocation *live[] = {&a, &b, &w};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dmm_mechanism_commit(m, live[i], (dmm_range){0, 1}, &v), DMM_ERR_DEVICE_LOST);
        assert_int_equal(dmm_mechanism_committed_bytes(m, live[i], &v), DMM_ERR_DEVICE_LOST);
        o = dmm_mechanism_decommit(m, live[i], (dmm_range){0, live[i]->bytes});
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
        o = dmm_mechanism_release(m, live[i]);
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
    }
    assert_int_equal(dmm_arena_drain_cache(m), DMM_ERR_DEVICE_LOST);
    assert_int_equal(dmm_mechanism_destroy(m), DMM_ERR_BUSY);
    dmm_test_error_mentions("confirm_context_terminated", NULL);

    /* no driver call, no refund, and CUDA really holds all of it still */
    assert_int_equal(dmm_fault_calls(f, DMM_OP_ANY), calls);
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.owned), owned);
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.mapped), mapped);
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.refunds), refunds);
    dmm_driver_census now = kit_census(cuda);
    assert_memory_equal(&now, &real, sizeof now);
    kit_expect(cuda, (uintptr_t)a.ptr, p, 6 * MIB, "a lost arena's allocation, read through the real driver");

    /* the context is torn down: the arena discharges without a driver call */
    DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(m));
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&tally.mapped), 0);
    assert_int_equal(dmm_fault_calls(f, DMM_OP_ANY), calls);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    assert_int_equal(dmm_fault_calls(f, DMM_OP_ANY), calls);
    dmm_driver_destroy(f);
    /* Our reference was the only one on the primary context: destroying the driver tears the
     * context down, and CUDA frees every handle, mapping and the reservation with it. */
    dmm_driver_destroy(cuda);
    free(p);
}

/* ---- a real sticky context error ---- */

static const char bad_store_ptx[] = ".version 7.0\n"
                                    ".target sm_70\n"
                                    ".address_size 64\n"
                                    ".visible .entry dmm_bad_store()\n"
                                    "{\n"
                                    "  .reg .b64 %rd<2>;\n"
                                    "  .reg .b32 %r<2>;\n"
                                    "  mov.u64 %rd1, 64;\n"
                                    "  mov.u32 %r1, 7;\n"
                                    "  st.global.u32 [%rd1], %r1;\n"
                                    "  ret;\n"
                                    "}\n";


static void sym(void *lib, const char *name, void *out) {
    void *s = dlsym(lib, name);
    if (s == NULL) fail_msg("libcuda.so.1 lacks %s", name);
    memcpy(out, &s, sizeof s);
}

static void real_sticky_error_loses_the_device(void **state) {
    (void)state;
    dmm_driver *cuda = kit_cuda_open_or_skip("test_cuda_loss");
    dmm_mechanism *m = NULL;
    dmm_arena_config cfg = kit_config(1 * GIB, 0, 0, NULL);
    DMM_OK_OR_FAIL(dmm_arena_create(cuda, &cfg, &m));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 2 * MIB, 0, &a));
    dmm_stream s = NULL;
    DMM_OK_OR_FAIL(cuda->ops->stream_create(cuda, &s)); /* also makes the primary context current here */

    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    dmm_cuModuleLoadData_fn *load;
    dmm_cuModuleGetFunction_fn *get;
    dmm_cuLaunchKernel_fn *launch;
    sym(lib, "cuModuleLoadData", &load);
    sym(lib, "cuModuleGetFunction", &get);
    sym(lib, "cuLaunchKernel", &launch);
    dmm_cu_module mod = NULL;
    dmm_cu_function fn = NULL;
    assert_int_equal(load(&mod, bad_store_ptx), DMM_CUDA_SUCCESS);
    assert_int_equal(get(&fn, mod, "dmm_bad_store"), DMM_CUDA_SUCCESS);
    assert_int_equal(launch(fn, 1, 1, 1, 1, 1, 1, 0, (dmm_cu_stream)s, NULL, NULL), DMM_CUDA_SUCCESS);

    dmm_status st = cuda->ops->stream_synchronize(cuda, s);
    assert_int_equal(st, DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("cuStreamSynchronize", "CUDA_ERROR_", "device is lost", NULL); /* 700: ILLEGAL_ADDRESS */
    printf("sentence: %s\n", dmm_last_error());
    /* from now on: refused without calling CUDA, and the sentence says why */
    uintptr_t p = 0;
    assert_int_equal(cuda->ops->alloc(cuda, 4096, &p), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("refused without calling CUDA", "lost earlier", "CUDA_ERROR_", NULL);
    uint64_t fb = 0, tb = 0;
    assert_int_equal(cuda->ops->mem_info(cuda, &fb, &tb), DMM_ERR_DEVICE_LOST);
    assert_int_equal(cuda->ops->event_query(cuda, (dmm_event)1), DMM_ERR_DEVICE_LOST);
    size_t g = 0;
    assert_int_equal(cuda->ops->granularity(cuda, &g), DMM_ERR_DEVICE_LOST);
    dmm_driver_census before = kit_census(cuda); /* the driver's own tally still answers */
    assert_int_equal(before.handles, 1);
    /* the arena over the lost driver: DEVICE_LOST, nothing changed */
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_DEVICE_LOST);
    dmm_driver_census after = kit_census(cuda);
    assert_memory_equal(&before, &after, sizeof before);
    assert_int_equal(dmm_mechanism_allocate(m, 4096, 0, &a), DMM_ERR_DEVICE_LOST);
    DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(m));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    dmm_driver_destroy(cuda); /* the last reference on the ruined primary context */
}

int main(void) {
    dmm_driver *probe = kit_cuda_open_or_skip("test_cuda_loss");
    dmm_driver_destroy(probe);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lost_arena_makes_no_driver_call),
        cmocka_unit_test(real_sticky_error_loses_the_device), /* last: it ruins the context on purpose */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
