/* SPDX-License-Identifier: Apache-2.0 */
/* tests/ort/test_ort_cuda.c — issue 12, acceptance 8 (label gpu): the adapter's device allocator and the
 * CUDA provider's gpu_external_* entry points over the real CUDA driver. Skipped (exit 77, never passed)
 * without a GPU or without ONNX Runtime (the memory info is made through it).
 *
 * What is proven on a GPU: an allocator over the cuda driver names its memory "Cuda" with the device's
 * ordinal; gpu_external_alloc hands out device memory that holds what is copied into it; a block freed
 * on a stream other than its own is reused only after that stream's event (the pool's contract), and
 * one allocated and freed on the same stream is reused at once; gpu_external_empty_cache gives every
 * free chunk back (committed bytes 0, the governor's used bytes 0 once nothing is live); shutdown is
 * refused while a block is live; at the end the driver's census is zero. What cannot run here: a
 * session on the CUDA execution provider (the npm ONNX Runtime is a CPU build; docs/ort.md).
 */
#include "ort_kit.h"

static void the_device_allocator_and_gpu_external_run_over_cuda(void **state) {
    (void)state;
    dmm_driver *cuda = NULL;
    dmm_status s = dmm_cuda_driver_create(0, &cuda);
    if (s == DMM_ERR_UNSUPPORTED) {
        printf("test_ort_cuda: skipped: %s\n", dmm_last_error());
        exit(DMM_TEST_SKIP);
    }
    DMM_OK_OR_FAIL(s);
    dmm_ort_runtime *rt = kit_ort_open_or_skip("test_ort_cuda");
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    dmm_device_id dev = {DMM_TIER_DEVICE, 0};
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, dev, DMM_AXIS_OWNED, 8ull << 30));

    /* the device allocator's memory info */
    dmm_ort_config c = {.size = sizeof c, .name = "cuda-ext", .null_on_refusal = 1};
    DMM_OK_OR_FAIL(dmm_ort_gpu_external_init(rt, cuda, g, &c));
    assert_int_equal(dmm_ort_gpu_external_init(rt, cuda, g, &c), DMM_ERR_BUSY);
    dmm_ort_allocator *a = dmm_ort_gpu_external_allocator();
    assert_non_null(a);
    const struct OrtMemoryInfo *mi = dmm_ort_allocator_ort(a)->Info(dmm_ort_allocator_ort(a));
    const char *name = NULL;
    int id = -1;
    ORT_OK(rt, rt->calls.MemoryInfoGetName(mi, &name));
    ORT_OK(rt, rt->calls.MemoryInfoGetId(mi, &id));
    assert_string_equal(name, DMM_ORT_NAME_CUDA);
    assert_int_equal(id, 0);

    /* alloc, copy in and out, free */
    size_t n = 4u << 20;
    unsigned char *src = malloc(n), *back = malloc(n);
    assert_non_null(src);
    assert_non_null(back);
    for (size_t k = 0; k < n; k++) src[k] = (unsigned char)(k * 131 + 7);
    void *p = dmm_ort_gpu_external_alloc(n);
    assert_non_null(p);
    DMM_OK_OR_FAIL(cuda->ops->copy(cuda, (uintptr_t)p, (uintptr_t)src, n, NULL));
    DMM_OK_OR_FAIL(cuda->ops->copy(cuda, (uintptr_t)back, (uintptr_t)p, n, NULL));
    DMM_OK_OR_FAIL(cuda->ops->stream_synchronize(cuda, NULL));
    assert_memory_equal(src, back, n);
    assert_int_equal(dmm_ort_gpu_external_shutdown(), DMM_ERR_BUSY);
    dmm_ort_gpu_external_free(p);

    /* on a stream: freed on its own stream, reused at once; freed on another, only behind an event */
    dmm_stream st = NULL;
    DMM_OK_OR_FAIL(cuda->ops->stream_create(cuda, &st));
    void *q = dmm_ort_gpu_external_alloc_on(1u << 20, st);
    assert_non_null(q);
    dmm_ort_gpu_external_free_on(q, st);
    void *q2 = dmm_ort_gpu_external_alloc_on(1u << 20, st);
    assert_ptr_equal(q, q2);
    dmm_ort_gpu_external_free_on(q2, NULL); /* another stream: an event is recorded on it */
    DMM_OK_OR_FAIL(cuda->ops->stream_synchronize(cuda, NULL));
    DMM_OK_OR_FAIL(cuda->ops->stream_synchronize(cuda, st));
    dmm_ort_stats stats = kit_stats(a);
    assert_int_equal(stats.in_use, 0);
    assert_int_equal(stats.bad_frees, 0);

    /* empty the cache: nothing stays committed or charged */
    dmm_ort_gpu_external_empty_cache();
    stats = kit_stats(a);
    assert_int_equal(stats.run.committed_bytes.current, 0);
    dmm_tier_usage tu = {.size = sizeof tu};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(g, dev, &tu));
    assert_int_equal(tu.used[DMM_AXIS_OWNED], 0);
    DMM_OK_OR_FAIL(dmm_ort_gpu_external_shutdown());
    assert_null(dmm_ort_gpu_external_allocator());
    assert_null(dmm_ort_gpu_external_alloc(16)); /* none set up: NULL with a sentence */
    dmm_test_error_mentions("no allocator is set up", NULL);
    DMM_OK_OR_FAIL(cuda->ops->stream_destroy(cuda, st));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
    dmm_test_census_zero(cuda);
    dmm_driver_destroy(cuda);
    free(src);
    free(back);
    dmm_ort_runtime_close(rt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_device_allocator_and_gpu_external_run_over_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
