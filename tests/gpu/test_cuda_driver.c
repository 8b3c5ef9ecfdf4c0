/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_cuda_driver.c — the cuda driver's own ops on a real GPU (DESIGN §5, issue 3 item 1).
 *
 * VMM round trip with contents checked through copies (a handle keeps its bytes across unmap and a
 * map elsewhere), census = what really is held, argument refusals that never reach CUDA, CUDA's own
 * error code and name in the sentence (OUT_OF_MEMORY mapped), eager memory, streams and events
 * (query → BUSY while work is queued, OK after), mem_info, the device query of `dmm info`, peer
 * access validation, and many threads at once (each op makes the primary context current on the
 * calling thread). Exit 77 (skipped) without a CUDA driver or GPU. */
#include <pthread.h>

#include "cuda_kit.h"

static dmm_driver *g_cuda;
static size_t g_granule;

static void identity_and_device_query(void **state) {
    (void)state;
    assert_string_equal(g_cuda->ops->name, "cuda");
    assert_int_equal(g_cuda->device.tier, DMM_TIER_DEVICE);
    assert_int_equal(g_cuda->device.index, 0);
    int n = 0;
    DMM_OK_OR_FAIL(dmm_cuda_device_count(&n));
    assert_true(n >= 1);
    dmm_driver *d = NULL;
    assert_int_equal(dmm_cuda_driver_create(n, &d), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("ordinal", NULL);
    assert_null(d);
    assert_int_equal(dmm_cuda_driver_create(-1, &d), DMM_ERR_INVALID_ARGUMENT);
    assert_non_null(g_cuda->ops->reserve); /* every NVIDIA GPU dmm targets has VMM */
    assert_true((g_granule & (g_granule - 1)) == 0 && g_granule >= 4096);
    dmm_cuda_device_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    DMM_OK_OR_FAIL(dmm_cuda_device_query(0, &info));
    assert_true(info.name[0] != '\0');
    assert_true(info.vmm_supported);
    assert_int_equal(info.granularity, g_granule);
    assert_true(info.driver_version >= 11000);
    assert_true(info.total_bytes > 0 && info.free_bytes <= info.total_bytes);
    printf("device 0: %s, compute %d.%d, driver %d, granularity %llu, %llu of %llu bytes free\n", info.name,
           info.compute_major, info.compute_minor, info.driver_version, (unsigned long long)info.granularity,
           (unsigned long long)info.free_bytes, (unsigned long long)info.total_bytes);
    info.size = 4;
    assert_int_equal(dmm_cuda_device_query(0, &info), DMM_ERR_SHORT_STRUCT);
}

static void vmm_round_trip_keeps_contents(void **state) {
    (void)state;
    dmm_driver *d = g_cuda;
    const size_t g = g_granule, rb = 8 * g;
    uintptr_t va = 0;
    DMM_OK_OR_FAIL(d->ops->reserve(d, rb, 0, &va));
    assert_true(va != 0 && va % rb == 0); /* align 0: aligned to the size (a power of two, ≤ 1 GiB) */
    dmm_phys h1 = 0, h2 = 0;
    DMM_OK_OR_FAIL(d->ops->create(d, g, &h1));
    DMM_OK_OR_FAIL(d->ops->create(d, 2 * g, &h2));
    DMM_OK_OR_FAIL(d->ops->map(d, va, g, h1));
    DMM_OK_OR_FAIL(d->ops->map(d, va + g, 2 * g, h2));
    DMM_OK_OR_FAIL(d->ops->set_access(d, va, 3 * g, DMM_ACCESS_READ_WRITE));
    dmm_driver_census c = kit_census(d);
    assert_int_equal(c.reserved_bytes, rb);
    assert_int_equal(c.handles, 2);
    assert_int_equal(c.handle_bytes, 3 * g);
    assert_int_equal(c.mapped_bytes, 3 * g);

    /* write across both handles, read back; device-to-device copy within the mapping */
    unsigned char *p = kit_pattern(1, 3 * g);
    kit_put(d, va, p, 3 * g);
    kit_expect(d, va, p, 3 * g, "3 granules over two handles");
    DMM_OK_OR_FAIL(d->ops->copy(d, va, va + 2 * g, g, NULL)); /* granule 2 → granule 0 */
    DMM_OK_OR_FAIL(d->ops->stream_synchronize(d, NULL));
    kit_expect(d, va, p + 2 * g, g, "device-to-device copy");

    /* read-only access still reads */
    DMM_OK_OR_FAIL(d->ops->set_access(d, va + g, 2 * g, DMM_ACCESS_READ));
    kit_expect(d, va + g, p + g, 2 * g, "read through a READ mapping");

    /* unmap h2, map it again elsewhere in the reservation: the physical handle kept its bytes */
    DMM_OK_OR_FAIL(d->ops->unmap(d, va + g, 2 * g));
    assert_int_equal(kit_census(d).mapped_bytes, g);
    DMM_OK_OR_FAIL(d->ops->map(d, va + 5 * g, 2 * g, h2));
    DMM_OK_OR_FAIL(d->ops->set_access(d, va + 5 * g, 2 * g, DMM_ACCESS_READ_WRITE));
    kit_expect(d, va + 5 * g, p + g, 2 * g, "the same handle mapped at another address");

    DMM_OK_OR_FAIL(d->ops->unmap(d, va, g));
    DMM_OK_OR_FAIL(d->ops->unmap(d, va + 5 * g, 2 * g));
    DMM_OK_OR_FAIL(d->ops->release(d, h1));
    DMM_OK_OR_FAIL(d->ops->release(d, h2));
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, rb));
    kit_census_zero(d);
    free(p);
}

static void refusals_never_reach_cuda(void **state) {
    (void)state;
    dmm_driver *d = g_cuda;
    const size_t g = g_granule;
    uintptr_t va = 0;
    dmm_phys h = 0;
    assert_int_equal(d->ops->reserve(d, g + 1, 0, &va), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->create(d, g / 2, &h), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(d->ops->reserve(d, 4 * g, 0, &va));
    DMM_OK_OR_FAIL(d->ops->create(d, g, &h));
    assert_int_equal(d->ops->map(d, va, 2 * g, h), DMM_ERR_INVALID_ARGUMENT); /* bytes ≠ the handle's */
    dmm_test_error_mentions("cuda map", "the handle's size", NULL);
    assert_int_equal(d->ops->map(d, va, g, h + 12345), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->unmap(d, va, g), DMM_ERR_INVALID_ARGUMENT); /* nothing mapped there */
    dmm_test_error_mentions("no mapping starts there", NULL);
    DMM_OK_OR_FAIL(d->ops->map(d, va, g, h));
    assert_int_equal(d->ops->unmap(d, va, 2 * g), DMM_ERR_INVALID_ARGUMENT); /* more than the mapping */
    assert_int_equal(d->ops->unreserve(d, va, 2 * g), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->unreserve(d, va, 4 * g), DMM_ERR_INVALID_ARGUMENT); /* a mapping inside */
    dmm_test_error_mentions("mappings remain inside it", NULL);
    assert_int_equal(d->ops->release(d, h), DMM_ERR_INVALID_ARGUMENT); /* still mapped */
    dmm_test_error_mentions("still mapped 1 time", NULL);
    assert_int_equal(d->ops->release(d, h + 12345), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(d->ops->free(d, va, g), DMM_ERR_INVALID_ARGUMENT); /* not an eager allocation */
    assert_int_equal(d->ops->set_access(d, va, g, (dmm_access)7), DMM_ERR_INVALID_ARGUMENT);
    /* nothing changed: the census is as it was */
    dmm_driver_census c = kit_census(d);
    assert_int_equal(c.mapped_bytes, g);
    assert_int_equal(c.handles, 1);
    DMM_OK_OR_FAIL(d->ops->unmap(d, va, g));
    DMM_OK_OR_FAIL(d->ops->release(d, h));
    DMM_OK_OR_FAIL(d->ops->unreserve(d, va, 4 * g));
    kit_census_zero(d);
}

static void cuda_errors_keep_their_code_and_name(void **state) {
    (void)state;
    dmm_driver *d = g_cuda;
    const size_t g = g_granule;
    /* far more than any GPU has: CUDA says out of memory, dmm says OUT_OF_MEMORY with CUDA's name */
    uintptr_t p = 0;
    assert_int_equal(d->ops->alloc(d, (size_t)1 << 44, &p), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("cuMemAlloc", "bytes=17592186044416", "CUDA_ERROR_OUT_OF_MEMORY", "(2)", NULL);
    printf("sentence: %s\n", dmm_last_error());
    /* a map at an address no reservation covers: CUDA refuses, dmm reports DRIVER with CUDA's code */
    dmm_phys h = 0;
    DMM_OK_OR_FAIL(d->ops->create(d, g, &h));
    uintptr_t nowhere = (uintptr_t)1 << 46;
    dmm_status s = d->ops->map(d, nowhere, g, h);
    assert_int_equal(s, DMM_ERR_DRIVER);
    dmm_test_error_mentions("cuMemMap", "va=0x400000000000", "CUDA_ERROR_", NULL);
    printf("sentence: %s\n", dmm_last_error());
    assert_int_equal(kit_census(d).mapped_bytes, 0); /* the failed map is not counted */
    DMM_OK_OR_FAIL(d->ops->release(d, h));
    /* neither error is sticky: the device still works */
    DMM_OK_OR_FAIL(d->ops->alloc(d, g, &p));
    DMM_OK_OR_FAIL(d->ops->free(d, p, g));
    kit_census_zero(d);
}

static void eager_memory_and_mem_info(void **state) {
    (void)state;
    dmm_driver *d = g_cuda;
    uint64_t f0 = 0, t0 = 0;
    DMM_OK_OR_FAIL(d->ops->mem_info(d, &f0, &t0));
    assert_true(t0 > 0 && f0 <= t0);
    const size_t n = 3 * 1000 * 1000 + 7; /* odd size: eager memory has no granularity */
    uintptr_t a = 0, b = 0;
    DMM_OK_OR_FAIL(d->ops->alloc(d, n, &a));
    DMM_OK_OR_FAIL(d->ops->alloc(d, n, &b));
    assert_int_equal(kit_census(d).eager_bytes, 2 * n);
    unsigned char *p = kit_pattern(2, n);
    kit_put(d, a, p, n);
    DMM_OK_OR_FAIL(d->ops->copy(d, b, a, n, NULL));
    kit_expect(d, b, p, n, "eager device-to-device");
    assert_int_equal(d->ops->free(d, a, n + 1), DMM_ERR_INVALID_ARGUMENT); /* wrong size: refused */
    DMM_OK_OR_FAIL(d->ops->free(d, a, n));
    DMM_OK_OR_FAIL(d->ops->free(d, b, n));
    assert_int_equal(d->ops->free(d, b, n), DMM_ERR_INVALID_ARGUMENT); /* a second free: refused */
    kit_census_zero(d);
    free(p);
}

static void streams_and_events(void **state) {
    (void)state;
    dmm_driver *d = g_cuda;
    dmm_stream s = NULL;
    dmm_event e = NULL;
    DMM_OK_OR_FAIL(d->ops->stream_create(d, &s));
    DMM_OK_OR_FAIL(d->ops->event_create(d, &e));
    const size_t n = 256u << 20;
    uintptr_t a = 0, b = 0;
    DMM_OK_OR_FAIL(d->ops->alloc(d, n, &a));
    DMM_OK_OR_FAIL(d->ops->alloc(d, n, &b));
    /* a recorded, never-reached event would be BUSY; one recorded after queued work is BUSY or OK */
    for (int i = 0; i < 64; i++) DMM_OK_OR_FAIL(d->ops->copy(d, b, a, n, s));
    DMM_OK_OR_FAIL(d->ops->event_record(d, e, s));
    dmm_status q = d->ops->event_query(d, e);
    assert_true(q == DMM_OK || q == DMM_ERR_BUSY);
    if (q == DMM_ERR_BUSY) dmm_test_error_mentions("cuEventQuery", "CUDA_ERROR_NOT_READY", NULL);
    printf("event right after 64 x 256 MiB copies: %s\n", dmm_status_str(q));
    DMM_OK_OR_FAIL(d->ops->event_synchronize(d, e));
    DMM_OK_OR_FAIL(d->ops->event_query(d, e));
    DMM_OK_OR_FAIL(d->ops->stream_synchronize(d, s));
    DMM_OK_OR_FAIL(d->ops->free(d, a, n));
    DMM_OK_OR_FAIL(d->ops->free(d, b, n));
    DMM_OK_OR_FAIL(d->ops->event_destroy(d, e));
    DMM_OK_OR_FAIL(d->ops->stream_destroy(d, s));
    assert_int_equal(d->ops->stream_destroy(d, NULL), DMM_ERR_INVALID_ARGUMENT);
    kit_census_zero(d);
}

static void peer_access_is_validated(void **state) {
    (void)state;
    int n = 0;
    DMM_OK_OR_FAIL(dmm_cuda_device_count(&n));
    int self = 0, beyond = n;
    assert_int_equal(dmm_cuda_driver_set_peer_access(g_cuda, &self, 1), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not another device", NULL);
    assert_int_equal(dmm_cuda_driver_set_peer_access(g_cuda, &beyond, 1), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(dmm_cuda_driver_set_peer_access(g_cuda, NULL, 0));
    dmm_driver *f = NULL;
    DMM_OK_OR_FAIL(dmm_fault_driver_create(g_cuda, &f));
    assert_int_equal(dmm_cuda_driver_set_peer_access(f, NULL, 0), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not a cuda driver", NULL);
    dmm_driver_destroy(f);
    if (n >= 2) { /* several GPUs: grant device 1 access to device 0's mappings and copy through it */
        int peer = 1;
        dmm_status s = dmm_cuda_driver_set_peer_access(g_cuda, &peer, 1);
        if (s == DMM_OK) {
            uintptr_t va = 0;
            dmm_phys h = 0;
            DMM_OK_OR_FAIL(g_cuda->ops->reserve(g_cuda, g_granule, 0, &va));
            DMM_OK_OR_FAIL(g_cuda->ops->create(g_cuda, g_granule, &h));
            DMM_OK_OR_FAIL(g_cuda->ops->map(g_cuda, va, g_granule, h));
            DMM_OK_OR_FAIL(g_cuda->ops->set_access(g_cuda, va, g_granule, DMM_ACCESS_READ_WRITE));
            DMM_OK_OR_FAIL(g_cuda->ops->unmap(g_cuda, va, g_granule));
            DMM_OK_OR_FAIL(g_cuda->ops->release(g_cuda, h));
            DMM_OK_OR_FAIL(g_cuda->ops->unreserve(g_cuda, va, g_granule));
        } else {
            printf("peer access 0 <- 1 not available: %s\n", dmm_last_error());
        }
        DMM_OK_OR_FAIL(dmm_cuda_driver_set_peer_access(g_cuda, NULL, 0));
    }
}

/* Many threads, none of which ever made a context current itself. */
#define THREADS 8
#define ROUNDS 40

static void *churn(void *arg) {
    dmm_driver *d = g_cuda;
    uintptr_t seed = (uintptr_t)arg;
    size_t g = g_granule;
    for (int r = 0; r < ROUNDS; r++) {
        size_t chunks = 1 + (size_t)((seed + (uintptr_t)r) % 3);
        uintptr_t va = 0;
        dmm_phys h = 0;
        if (d->ops->reserve(d, chunks * g, 0, &va) != DMM_OK) return (void *)dmm_last_error();
        if (d->ops->create(d, chunks * g, &h) != DMM_OK) return (void *)dmm_last_error();
        if (d->ops->map(d, va, chunks * g, h) != DMM_OK) return (void *)dmm_last_error();
        if (d->ops->set_access(d, va, chunks * g, DMM_ACCESS_READ_WRITE) != DMM_OK) return (void *)dmm_last_error();
        uint64_t word = seed * 1000 + (uint64_t)r, back = 0;
        if (d->ops->copy(d, va + g / 2, (uintptr_t)&word, sizeof word, NULL) != DMM_OK) return (void *)dmm_last_error();
        if (d->ops->copy(d, (uintptr_t)&back, va + g / 2, sizeof back, NULL) != DMM_OK) return (void *)dmm_last_error();
        if (d->ops->stream_synchronize(d, NULL) != DMM_OK) return (void *)dmm_last_error();
        if (back != word) return (void *)"a word read back differs";
        if (d->ops->unmap(d, va, chunks * g) != DMM_OK) return (void *)dmm_last_error();
        if (d->ops->release(d, h) != DMM_OK) return (void *)dmm_last_error();
        if (d->ops->unreserve(d, va, chunks * g) != DMM_OK) return (void *)dmm_last_error();
    }
    return NULL;
}

static void threads_share_one_driver(void **state) {
    (void)state;
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, churn, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++) {
        void *why = NULL;
        pthread_join(t[i], &why);
        if (why != NULL) fail_msg("thread %d: %s", i, (const char *)why);
    }
    kit_census_zero(g_cuda);
}

int main(void) {
    g_cuda = kit_cuda_open_or_skip("test_cuda_driver");
    if (g_cuda->ops->granularity == NULL || g_cuda->ops->granularity(g_cuda, &g_granule) != DMM_OK) {
        printf("test_cuda_driver: device 0 has no VMM: %s\n", dmm_last_error());
        dmm_driver_destroy(g_cuda);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(identity_and_device_query),
        cmocka_unit_test(vmm_round_trip_keeps_contents),
        cmocka_unit_test(refusals_never_reach_cuda),
        cmocka_unit_test(cuda_errors_keep_their_code_and_name),
        cmocka_unit_test(eager_memory_and_mem_info),
        cmocka_unit_test(streams_and_events),
        cmocka_unit_test(peer_access_is_validated),
        cmocka_unit_test(threads_share_one_driver),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kit_census_zero(g_cuda);
    dmm_driver_destroy(g_cuda);
    return rc;
}
