/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_pool_gpu.c — the pool's event gating on a real GPU (issue 4, acceptance 4).
 *
 * Stream A is held busy by a host function that blocks until the test lets it go (cuLaunchHostFunc,
 * resolved from libcuda.so.1 here: deterministic, no race against a timed kernel); behind it on A
 * a copy writes a pattern into block X. While that work is queued:
 *   - X is freed on A; a malloc of the same size on stream B gets other memory, and no chunk is
 *     moved or unmapped (the retention limit is full, so B would move A's chunks if it could);
 *   - trim(0) releases nothing and makes no unmap call;
 *   - a block of B freed on A (a cross-stream free) is not handed back to B.
 * Then A is let go and synchronized: X holds the pattern (the copy ran into mapped memory: an unmap
 * under it would have faulted the context), trim now releases X's chunks, and the cross-stream block
 * is reused by B. No device or stream synchronize is made by the pool. Also: the hot path makes no
 * driver call, and a warm layout's handles are taken by the same growths, with no call, as memory the
 * device writes and reads. Exit 77 (skipped) without a GPU or CUDA driver. */
#include <dlfcn.h>
#include <time.h>

#include "core/atomics.h"
#include "cuda_kit.h"
#include "driver/cuda_decl.h"

static dmm_driver *g_cuda;
static atomic_int g_release;

static void hold_stream(void *user) {
    (void)user;
    struct timespec ts = {0, 100 * 1000};
    for (int i = 0; i < 300000 && !dmm_atomic_load_seq_cst(&g_release); i++) nanosleep(&ts, NULL); /* at most ~30 s */
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

static dmm_pool_stats pstats(dmm_pool *p) {
    dmm_pool_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    DMM_OK_OR_FAIL(dmm_pool_stats_get(p, &s));
    return s;
}

static void freed_memory_waits_for_the_work_on_its_stream(void **state) {
    (void)state;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    dmm_cuLaunchHostFunc_fn *launch = NULL;
    *(void **)(&launch) = dlsym(lib, "cuLaunchHostFunc");
    assert_non_null(launch);

    dmm_driver *f = NULL; /* fault(cuda), used as a call counter */
    DMM_OK_OR_FAIL(dmm_fault_driver_create(g_cuda, &f));
    dmm_arena_config ac = kit_config(64 * GIB, 0, 64 * MIB, NULL);
    dmm_mechanism *arena = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(f, &ac, &arena));
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.retain_permille = 1;
    pc.settle_permille = 1; /* a fixed limit */
    dmm_pool *pool = NULL;
    DMM_OK_OR_FAIL(dmm_pool_create(arena, f, &pc, &pool));
    dmm_stream a = NULL, b = NULL;
    DMM_OK_OR_FAIL(f->ops->stream_create(f, &a));
    DMM_OK_OR_FAIL(f->ops->stream_create(f, &b));

    const size_t n = 64 * MIB;
    uintptr_t src = 0;
    DMM_OK_OR_FAIL(g_cuda->ops->alloc(g_cuda, n, &src));
    unsigned char *pat = kit_pattern(77, n);
    kit_put(g_cuda, src, pat, n);

    void *x = NULL, *z = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(pool, n, a, &x));
    DMM_OK_OR_FAIL(dmm_pool_malloc(pool, MIB, b, &z));
    /* A: blocked host function, then the copy into X, then our own event */
    dmm_atomic_store_seq_cst(&g_release, 0);
    assert_int_equal(launch(a, hold_stream, NULL), DMM_CUDA_SUCCESS);
    DMM_OK_OR_FAIL(f->ops->copy(f, (uintptr_t)x, src, n, a));
    dmm_event done = NULL;
    DMM_OK_OR_FAIL(f->ops->event_create(f, &done));
    DMM_OK_OR_FAIL(f->ops->event_record(f, done, a));

    DMM_OK_OR_FAIL(dmm_pool_free(pool, x, a)); /* work on A still uses X */
    DMM_OK_OR_FAIL(dmm_pool_free(pool, z, a)); /* a block of B, last used on A */
    const uint64_t unmaps0 = dmm_fault_calls(f, DMM_OP_UNMAP);
    const uint64_t syncs0 = dmm_fault_calls(f, DMM_OP_STREAM_SYNCHRONIZE) + dmm_fault_calls(f, DMM_OP_EVENT_SYNCHRONIZE);

    uint64_t released = 1;
    DMM_OK_OR_FAIL(dmm_pool_trim(pool, 0, &released));
    assert_int_equal(released, 0);
    void *y = NULL, *z2 = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(pool, n, b, &y));
    assert_true((char *)y + n <= (char *)x || (char *)x + n <= (char *)y);
    DMM_OK_OR_FAIL(dmm_pool_malloc(pool, MIB, b, &z2));
    assert_ptr_not_equal(z2, z);
    DMM_OK_OR_FAIL(dmm_pool_trim(pool, 0, &released));
    assert_int_equal(released, 0);
    dmm_pool_stats s = pstats(pool);
    assert_int_equal(s.chunks_moved, 0);
    assert_int_equal(s.pending_blocks.current, 1);
    assert_int_equal(dmm_fault_calls(f, DMM_OP_UNMAP), unmaps0);
    if (g_cuda->ops->event_query(g_cuda, done) != DMM_ERR_BUSY)
        fail_msg("%s", "stream A finished while it was held: the test proves nothing");

    /* let A go */
    dmm_atomic_store_seq_cst(&g_release, 1);
    DMM_OK_OR_FAIL(g_cuda->ops->event_synchronize(g_cuda, done)); /* the test waits; the pool never did */
    assert_int_equal(dmm_fault_calls(f, DMM_OP_STREAM_SYNCHRONIZE) + dmm_fault_calls(f, DMM_OP_EVENT_SYNCHRONIZE),
                     syncs0);
    kit_expect(g_cuda, (uintptr_t)x, pat, n, "X after the queued copy"); /* still mapped: nothing unmapped it */
    DMM_OK_OR_FAIL(dmm_pool_trim(pool, 0, &released));
    assert_true(released >= n); /* X's chunks */
    assert_int_equal(pstats(pool).pending_blocks.current, 0);
    DMM_OK_OR_FAIL(dmm_pool_free(pool, z2, b));
    void *z3 = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(pool, MIB, b, &z3)); /* B's heap has z and z2 free now */
    assert_true(z3 == z || z3 == z2);
    DMM_OK_OR_FAIL(dmm_pool_free(pool, z3, b));
    DMM_OK_OR_FAIL(dmm_pool_free(pool, y, b));
    DMM_OK_OR_FAIL(f->ops->stream_synchronize(f, b));
    DMM_OK_OR_FAIL(dmm_pool_check(pool));
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(pool, NULL));
    destroy_when_idle(pool);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(arena));
    DMM_OK_OR_FAIL(f->ops->event_destroy(f, done));
    DMM_OK_OR_FAIL(f->ops->stream_destroy(f, a));
    DMM_OK_OR_FAIL(f->ops->stream_destroy(f, b));
    DMM_OK_OR_FAIL(g_cuda->ops->free(g_cuda, src, n));
    free(pat);
    dmm_driver_destroy(f);
    kit_census_zero(g_cuda);
    dlclose(lib);
}

/* The replay harness's premise on the GPU: malloc/free served from mapped memory make no driver call. */
static void the_hot_path_makes_no_driver_call_on_the_gpu(void **state) {
    (void)state;
    dmm_driver *f = NULL;
    DMM_OK_OR_FAIL(dmm_fault_driver_create(g_cuda, &f));
    dmm_arena_config ac = kit_config(16 * GIB, 0, 0, NULL);
    dmm_mechanism *arena = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(f, &ac, &arena));
    dmm_pool *pool = NULL;
    DMM_OK_OR_FAIL(dmm_pool_create(arena, f, NULL, &pool));
    dmm_stream s = NULL;
    DMM_OK_OR_FAIL(f->ops->stream_create(f, &s));
    void *p[16];
    for (int i = 0; i < 16; i++) DMM_OK_OR_FAIL(dmm_pool_malloc(pool, (size_t)(i + 1) * 100000, s, &p[i]));
    for (int i = 0; i < 16; i++) DMM_OK_OR_FAIL(dmm_pool_free(pool, p[i], s));
    uint64_t calls = dmm_fault_calls(f, DMM_OP_ANY);
    for (int r = 0; r < 1000; r++) {
        for (int i = 0; i < 16; i++) DMM_OK_OR_FAIL(dmm_pool_malloc(pool, (size_t)(i + 1) * 100000, s, &p[i]));
        for (int i = 15; i >= 0; i--) DMM_OK_OR_FAIL(dmm_pool_free(pool, p[i], s));
    }
    assert_int_equal(dmm_fault_calls(f, DMM_OP_ANY), calls);
    DMM_OK_OR_FAIL(f->ops->stream_synchronize(f, s));
    destroy_when_idle(pool);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(arena));
    DMM_OK_OR_FAIL(f->ops->stream_destroy(f, s));
    dmm_driver_destroy(f);
    kit_census_zero(g_cuda);
}

/* A warm layout over the real driver: the first pool's growth handles, committed ahead in a second
 * pool, are taken by the same growths with no create, map or set-access, and the memory is the
 * device's to write and read (an API copy, which checks access when it is queued, runs into it). */
static void a_warm_layout_serves_the_same_growths_on_the_gpu(void **state) {
    (void)state;
    static const size_t sizes[] = {300 * MIB, 40 * MIB, 100 * MIB, 10 * MIB, 64 * MIB};
    enum { N = sizeof sizes / sizeof sizes[0] };
    dmm_pool_span *spans = NULL;
    size_t n = 0;
    for (int run = 0; run < 2; run++) {
        dmm_driver *f = NULL;
        DMM_OK_OR_FAIL(dmm_fault_driver_create(g_cuda, &f));
        dmm_arena_config ac = kit_config(16 * GIB, 0, 0, NULL);
        dmm_mechanism *arena = NULL;
        DMM_OK_OR_FAIL(dmm_arena_create(f, &ac, &arena));
        dmm_pool_config pc;
        memset(&pc, 0, sizeof pc);
        pc.size = sizeof pc;
        pc.max_chunk_bytes = 32 * MIB; /* the torch adapter's handles */
        pc.handle_divisor = 8;
        pc.min_chunk_bytes = 8 * MIB;
        dmm_pool *pool = NULL;
        DMM_OK_OR_FAIL(dmm_pool_create(arena, f, &pc, &pool));
        dmm_stream s = NULL;
        DMM_OK_OR_FAIL(f->ops->stream_create(f, &s));
        uint64_t ahead = 0;
        if (run == 1) {
            DMM_OK_OR_FAIL(dmm_pool_warm_layout(pool, s, spans, n, &ahead));
            uint64_t want = 0;
            for (size_t i = 0; i < n; i++) want += spans[i].bytes;
            assert_int_equal(ahead, want);
        }
        uint64_t creates = dmm_fault_calls(f, DMM_OP_CREATE), access = dmm_fault_calls(f, DMM_OP_SET_ACCESS);
        void *p[N];
        for (int i = 0; i < N; i++) DMM_OK_OR_FAIL(dmm_pool_malloc(pool, sizes[i], s, &p[i]));
        if (run == 0) {
            DMM_OK_OR_FAIL(dmm_pool_layout(pool, NULL, 0, &n));
            assert_true(n > N);
            spans = calloc(n, sizeof *spans);
            assert_non_null(spans);
            DMM_OK_OR_FAIL(dmm_pool_layout(pool, spans, n, &n));
        } else {
            assert_int_equal(dmm_fault_calls(f, DMM_OP_CREATE), creates);
            assert_int_equal(dmm_fault_calls(f, DMM_OP_SET_ACCESS), access);
            assert_int_equal(pstats(pool).layout_adopted, n);
            for (int i = 0; i < N; i++) { /* the ends of every block: written and read through the API */
                unsigned char *pat = kit_pattern((uint64_t)i + 1, 1 * MIB);
                kit_put(f, (uintptr_t)p[i], pat, 1 * MIB);
                kit_put(f, (uintptr_t)p[i] + sizes[i] - 1 * MIB, pat, 1 * MIB);
                kit_expect(f, (uintptr_t)p[i], pat, 1 * MIB, "a block in handles taken from the layout (start)");
                kit_expect(f, (uintptr_t)p[i] + sizes[i] - 1 * MIB, pat, 1 * MIB, "the same block (end)");
                free(pat);
            }
        }
        for (int i = 0; i < N; i++) DMM_OK_OR_FAIL(dmm_pool_free(pool, p[i], s));
        DMM_OK_OR_FAIL(f->ops->stream_synchronize(f, s));
        destroy_when_idle(pool);
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(arena));
        DMM_OK_OR_FAIL(f->ops->stream_destroy(f, s));
        dmm_driver_destroy(f);
        kit_census_zero(g_cuda);
    }
    free(spans);
}

int main(void) {
    g_cuda = kit_cuda_open_or_skip("test_pool_gpu");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(freed_memory_waits_for_the_work_on_its_stream),
        cmocka_unit_test(the_hot_path_makes_no_driver_call_on_the_gpu),
        cmocka_unit_test(a_warm_layout_serves_the_same_growths_on_the_gpu),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dmm_atomic_store_seq_cst(&g_release, 1);
    dmm_driver_destroy(g_cuda);
    return rc;
}
