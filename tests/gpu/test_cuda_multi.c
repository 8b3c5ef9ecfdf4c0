/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_cuda_multi.c — two GPUs in one process: one governor with a tier per device, an
 * arena and a pool per device, and peer access per mapping.
 *
 * What is proven (exit 77 with fewer than two GPUs):
 *  - each device's arena takes its memory from that device: device 1's free memory (cuMemGetInfo in
 *    its context) falls by what device 1's arena committed, device 0's does not move, and the other
 *    way round; a pattern written through each device's driver reads back from that device;
 *  - the governor's tiers are per device: device 1's tier at its limit refuses device 1's commit
 *    (nothing changed) while device 0 commits the same size;
 *  - a pool per device serves each device's stream from that device's memory;
 *  - peer access: with dmm_cuda_driver_set_peer_access(driver 1, {0}) every mapping device 1's arena
 *    makes grants device 0 the same access, so device 0's copy engine copies device 1's memory into
 *    device 0's (NVLink / PCIe peer), byte-identical. Where cuDeviceCanAccessPeer says no, that part
 *    reports it and is skipped.
 * Every test ends with every arena destroyed and both drivers' census at zero. */
#include <time.h>

#include "cuda_kit.h"

static dmm_driver *g_dev[2];

static uint64_t free_of(int i) {
    uint64_t f = 0, t = 0;
    DMM_OK_OR_FAIL(g_dev[i]->ops->mem_info(g_dev[i], &f, &t));
    return f;
}

static dmm_mechanism *arena_on(int i, const dmm_accounting *acct) {
    dmm_arena_config c = kit_config(8 * GIB, 0, 0, acct);
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(g_dev[i], &c, &m));
    return m;
}

static void each_device_holds_its_own_memory(void **state) {
    (void)state;
    const size_t n = 1 * GIB;
    for (int i = 0; i < 2; i++) {
        int other = 1 - i;
        dmm_mechanism *m = arena_on(i, NULL);
        uint64_t mine0 = free_of(i), other0 = free_of(other);
        dmm_allocation a;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, n, 0, &a));
        uint64_t mine1 = free_of(i), other1 = free_of(other);
        printf("device %d: 1 GiB committed: its free memory %llu -> %llu MiB, device %d's %llu -> %llu MiB\n", i,
               (unsigned long long)(mine0 >> 20), (unsigned long long)(mine1 >> 20), other,
               (unsigned long long)(other0 >> 20), (unsigned long long)(other1 >> 20));
        assert_true(mine0 - mine1 >= n);
        assert_true(other1 + 64 * MIB >= other0 && other0 + 64 * MIB >= other1); /* the other one: unmoved */
        unsigned char *p = kit_pattern(40 + (uint64_t)i, 8 * MIB);
        kit_put(g_dev[i], (uintptr_t)a.ptr + n - 8 * MIB, p, 8 * MIB);
        kit_expect(g_dev[i], (uintptr_t)a.ptr + n - 8 * MIB, p, 8 * MIB, "the pattern on its own device");
        free(p);
        assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
        kit_census_zero(g_dev[i]);
    }
}

static void the_governor_limits_each_device_apart(void **state) {
    (void)state;
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    DMM_OK_OR_FAIL(dmm_governor_add_device(g, g_dev[0]));
    DMM_OK_OR_FAIL(dmm_governor_add_device(g, g_dev[1]));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, g_dev[1]->device, DMM_AXIS_OWNED, 256 * MIB));
    dmm_holder_config hc = {sizeof hc, "two-gpu test", 0, NULL, NULL};
    dmm_holder *h = NULL;
    DMM_OK_OR_FAIL(dmm_governor_holder_register(g, &hc, &h));
    dmm_lease_id lease[2];
    dmm_accounting acct[2];
    dmm_mechanism *m[2];
    for (int i = 0; i < 2; i++) {
        DMM_OK_OR_FAIL(dmm_lease_reserve(h, g_dev[i]->device, DMM_ROLE_WORKSPACE, 0, 0, &lease[i]));
        DMM_OK_OR_FAIL(dmm_governor_accounting(g, lease[i], &acct[i]));
        m[i] = arena_on(i, &acct[i]);
    }
    dmm_allocation a0, a1;
    uint64_t free1 = free_of(1);
    assert_int_equal(dmm_mechanism_allocate(m[1], 512 * MIB, 0, &a1), DMM_ERR_BUDGET);
    dmm_test_error_mentions("governor refused", "device:1", NULL);
    assert_true(free_of(1) + 64 * MIB >= free1); /* nothing was created on device 1 */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m[0], 512 * MIB, 0, &a0)); /* device 0's tier has room */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m[1], 128 * MIB, 0, &a1));
    uint64_t owned[2];
    for (int i = 0; i < 2; i++) DMM_OK_OR_FAIL(dmm_lease_usage(g, lease[i], &owned[i], NULL));
    assert_int_equal(owned[0], 512 * MIB);
    assert_int_equal(owned[1], 128 * MIB);
    assert_int_equal(dmm_mechanism_release(m[0], &a0).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_mechanism_release(m[1], &a1).state, DMM_RELEASE_COMPLETE);
    for (int i = 0; i < 2; i++) {
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(m[i]));
        DMM_OK_OR_FAIL(dmm_lease_release(g, lease[i]));
        kit_census_zero(g_dev[i]);
    }
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}

/* The streams are idle: the events after their last frees complete within moments; destroy refuses
 * (changing nothing) until the pool has seen them complete. */
static void destroy_when_idle(dmm_pool *pool) {
    dmm_status s = dmm_pool_destroy(pool);
    for (int i = 0; s == DMM_ERR_BUSY && i < 5000; i++) {
        struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
        s = dmm_pool_destroy(pool);
    }
    DMM_OK_OR_FAIL(s);
}

static void a_pool_per_device(void **state) {
    (void)state;
    dmm_mechanism *m[2];
    dmm_pool *pool[2];
    dmm_stream s[2];
    void *p[2];
    uint64_t free0[2];
    for (int i = 0; i < 2; i++) {
        m[i] = arena_on(i, NULL);
        DMM_OK_OR_FAIL(dmm_pool_create(m[i], g_dev[i], NULL, &pool[i]));
        DMM_OK_OR_FAIL(g_dev[i]->ops->stream_create(g_dev[i], &s[i]));
        free0[i] = free_of(i);
    }
    for (int i = 0; i < 2; i++) DMM_OK_OR_FAIL(dmm_pool_malloc(pool[i], 256 * MIB, s[i], &p[i]));
    for (int i = 0; i < 2; i++) {
        assert_true(free0[i] - free_of(i) >= 256 * MIB); /* each from its own device */
        unsigned char *pat = kit_pattern(50 + (uint64_t)i, 4 * MIB);
        kit_put(g_dev[i], (uintptr_t)p[i], pat, 4 * MIB);
        kit_expect(g_dev[i], (uintptr_t)p[i], pat, 4 * MIB, "pool memory on its own device");
        free(pat);
    }
    for (int i = 0; i < 2; i++) {
        DMM_OK_OR_FAIL(dmm_pool_free(pool[i], p[i], s[i]));
        DMM_OK_OR_FAIL(g_dev[i]->ops->stream_synchronize(g_dev[i], s[i]));
        destroy_when_idle(pool[i]);
        DMM_OK_OR_FAIL(g_dev[i]->ops->stream_destroy(g_dev[i], s[i]));
        DMM_OK_OR_FAIL(dmm_arena_drain_cache(m[i]));
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(m[i]));
        kit_census_zero(g_dev[i]);
    }
}

static void device0_copies_device1_memory_through_peer_mappings(void **state) {
    (void)state;
    const int peer0 = 0;
    dmm_status s = dmm_cuda_driver_set_peer_access(g_dev[1], &peer0, 1);
    if (s == DMM_ERR_UNSUPPORTED) {
        printf("peer access: skipped: %s\n", dmm_last_error());
        return;
    }
    DMM_OK_OR_FAIL(s);
    dmm_mechanism *m0 = arena_on(0, NULL), *m1 = arena_on(1, NULL);
    const size_t n = 256 * MIB;
    dmm_allocation a0, a1;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m1, n, 0, &a1)); /* mapped with access for devices 1 and 0 */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m0, n, 0, &a0));
    unsigned char *pat = kit_pattern(60, n);
    kit_put(g_dev[1], (uintptr_t)a1.ptr, pat, n);
    /* device 0's context and stream copy device 1's memory into device 0's */
    DMM_OK_OR_FAIL(g_dev[0]->ops->copy(g_dev[0], (uintptr_t)a0.ptr, (uintptr_t)a1.ptr, n, NULL));
    DMM_OK_OR_FAIL(g_dev[0]->ops->stream_synchronize(g_dev[0], NULL));
    kit_expect(g_dev[0], (uintptr_t)a0.ptr, pat, n, "device 1's bytes copied by device 0");
    free(pat);
    assert_int_equal(dmm_mechanism_release(m0, &a0).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_mechanism_release(m1, &a1).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m0));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m1));
    DMM_OK_OR_FAIL(dmm_cuda_driver_set_peer_access(g_dev[1], NULL, 0));
    kit_census_zero(g_dev[0]);
    kit_census_zero(g_dev[1]);
}

int main(void) {
    int count = 0;
    if (dmm_cuda_device_count(&count) != DMM_OK || count < 2) {
        printf("test_cuda_multi: skipped: %d CUDA device(s); this test needs two\n", count);
        return DMM_TEST_SKIP;
    }
    for (int i = 0; i < 2; i++)
        if (dmm_cuda_driver_create(i, &g_dev[i]) != DMM_OK) {
            fprintf(stderr, "test_cuda_multi: dmm_cuda_driver_create(%d) failed: %s\n", i, dmm_last_error());
            return 1;
        }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_device_holds_its_own_memory),
        cmocka_unit_test(the_governor_limits_each_device_apart),
        cmocka_unit_test(a_pool_per_device),
        cmocka_unit_test(device0_copies_device1_memory_through_peer_mappings),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dmm_driver_destroy(g_dev[0]);
    dmm_driver_destroy(g_dev[1]);
    return rc;
}
