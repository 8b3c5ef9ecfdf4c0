/* SPDX-License-Identifier: Apache-2.0 */
/* tests/ort/test_ort_allocator.c — issue 12, acceptance 2-5: the OrtAllocator under real sessions, the
 * governor, other holders and bad input.
 *
 * What is proven, against the real libonnxruntime.so.1:
 *  2. sixteen Runs of the model with a symbolic batch (its shape changes every Run) hold dmm's committed
 *     bytes at a plateau once the largest shape has run (no growth after), and GetStats read through
 *     ONNX Runtime's own AllocatorGetStats agrees key by key with dmm's stats;
 *  3. under a governor limit below what a Run needs, the Run fails with ONNX Runtime's error, the
 *     allocator's last error is dmm's sentence naming the tier, the requested bytes and the limit, the
 *     pools hold no block of the failed Run, and after raising the limit the next Run of the same session
 *     succeeds with the right output; at the teardown the driver's census is zero;
 *  4. two sessions, each on its own allocator (a holder each), and a pool of a third holder share one
 *     governor: a Run that does not fit takes the other pool's cached memory first (its reclaim is asked
 *     and gives back), and the governor attributes each holder's bytes to it (its leases = its pools);
 *  5. an arena-type config, a wrong device, a double free, Free(NULL), size 0 and huge sizes each get the
 *     documented answer, with a clear sentence where one is due, and change nothing.
 */
#include "ort_kit.h"

static uint64_t committed(dmm_ort_allocator *a) {
    dmm_ort_stats st = kit_stats(a);
    return (uint64_t)st.weights.committed_bytes.current + (uint64_t)st.run.committed_bytes.current;
}

static uint64_t kv_u64(dmm_ort_runtime *rt, struct OrtKeyValuePairs *kv, const char *key) {
    const char *v = rt->calls.GetKeyValue(kv, key);
    if (v == NULL) fail_msg("GetStats has no key '%s'", key);
    return strtoull(v, NULL, 10);
}

static void sixteen_runs_of_varying_shape_hold_a_plateau(void **state) {
    (void)state;
    kit_world w = kit_world_open("test_ort_allocator", "varying");
    dmm_ort_runtime *rt = w.rt;
    dmm_ort_allocator *a = w.a;
    DMM_OK_OR_FAIL(dmm_governor_set_limit(w.g, KIT_HOST, DMM_AXIS_OWNED, 512 * MIB));
    const dmm_onnx_model_desc dyn = {128, 256, 2, 0, 3};
    struct OrtSession *s = kit_session(rt, w.env, &dyn, true, NULL, 0);
    const uint32_t batches[16] = {64, 1, 33, 7, 64, 2, 50, 19, 5, 64, 12, 40, 3, 27, 64, 9};
    uint64_t plateau = 0;
    for (int r = 0; r < 16; r++) {
        assert_int_equal(kit_run(rt, s, &dyn, batches[r], (uint64_t)r, NULL, NULL, 0), 0);
        uint64_t c = committed(a);
        if (r == 0) plateau = c; /* the largest shape ran first */
        else if (c > plateau) fail_msg("run %d (batch %u) grew committed bytes from %llu to %llu", r, batches[r],
                                      (unsigned long long)plateau, (unsigned long long)c);
    }
    /* GetStats through ONNX Runtime's AllocatorGetStats (OrtApi slot 319) = dmm's stats */
    struct OrtKeyValuePairs *kv = NULL;
    ORT_OK(rt, rt->calls.AllocatorGetStats(dmm_ort_allocator_ort(a), &kv));
    dmm_ort_stats st = kit_stats(a);
    assert_int_equal(kv_u64(rt, kv, "InUse"), st.in_use);
    assert_int_equal(kv_u64(rt, kv, "NumAllocs"), st.allocs + st.reserves);
    assert_int_equal(kv_u64(rt, kv, "NumReserves"), st.reserves);
    assert_int_equal(kv_u64(rt, kv, "TotalAllocated"), st.total_allocated);
    assert_int_equal(kv_u64(rt, kv, "MaxInUse"), st.max_in_use);
    assert_int_equal(kv_u64(rt, kv, "MaxAllocSize"), st.max_alloc);
    assert_int_equal(kv_u64(rt, kv, "Limit"), 512 * MIB);
    assert_int_equal(kv_u64(rt, kv, "NumArenaExtensions"), st.weights.grows + st.run.grows);
    assert_true(st.allocs >= 16);
    assert_true(st.in_use > 0); /* the initializers */
    rt->calls.ReleaseKeyValuePairs(kv);
    rt->calls.ReleaseSession(s);
    assert_int_equal(kit_stats(a).in_use, 0);
    kit_world_close(&w);
}

static void a_run_over_the_limit_fails_and_the_next_one_succeeds(void **state) {
    (void)state;
    kit_world w = kit_world_open("test_ort_allocator", "limited");
    dmm_ort_runtime *rt = w.rt;
    dmm_governor *g = w.g;
    const dmm_onnx_model_desc mlp = {256, 512, 2, 64, 4};
    struct OrtSession *own = kit_session(rt, w.env, &mlp, false, NULL, 0);
    size_t n = (size_t)mlp.batch * mlp.hidden;
    float *want = calloc(n, sizeof *want), *got = calloc(n, sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    assert_int_equal(kit_run(rt, own, &mlp, mlp.batch, 5, want, NULL, 0), 0);
    rt->calls.ReleaseSession(own);

    struct OrtSession *s = kit_session(rt, w.env, &mlp, true, NULL, 0);
    dmm_tier_usage tu = {.size = sizeof tu};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(g, KIT_HOST, &tu));
    uint64_t limit = tu.used[DMM_AXIS_OWNED]; /* the weights: nothing left for a Run */
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, KIT_HOST, DMM_AXIS_OWNED, limit));
    dmm_ort_stats before = kit_stats(w.a);
    char err[1024] = "";
    assert_int_equal(kit_run(rt, s, &mlp, mlp.batch, 5, got, err, sizeof err), -1);
    printf("ONNX Runtime said: %s\n", err);
    char mine[DMM_ORT_ERROR_CAP] = "";
    assert_int_equal(dmm_ort_allocator_last_error(w.a, mine, sizeof mine), DMM_ERR_BUDGET);
    printf("dmm said: %s\n", mine);
    char lim[64];
    snprintf(lim, sizeof lim, "limit %llu", (unsigned long long)limit);
    assert_non_null(strstr(mine, "tier host:0"));
    assert_non_null(strstr(mine, "requested "));
    assert_non_null(strstr(mine, lim));
    assert_non_null(strstr(mine, "limited"));
    dmm_ort_stats after = kit_stats(w.a);
    assert_true(after.refusals > before.refusals);
    assert_int_equal(after.run.allocations.current, before.run.allocations.current); /* the failed Run left nothing */
    assert_int_equal(after.in_use, before.in_use);
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(g, KIT_HOST, &tu));
    assert_true(tu.used[DMM_AXIS_OWNED] <= limit);

    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, KIT_HOST, DMM_AXIS_OWNED, limit + 64 * MIB));
    assert_int_equal(kit_run(rt, s, &mlp, mlp.batch, 5, got, NULL, 0), 0);
    assert_memory_equal(got, want, n * sizeof *got);
    rt->calls.ReleaseSession(s);
    free(want);
    free(got);
    kit_world_close(&w);
}

/* The third holder: a plain pool whose reclaim is its trim. */
typedef struct other {
    dmm_pool *pool;
    dmm_mechanism *arena;
    dmm_lease_id lease;
    int asked;
    uint64_t released;
} other;

static uint64_t other_reclaim(void *user, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted) {
    (void)device;
    (void)wanted;
    other *o = user;
    if (step != DMM_RECLAIM_CACHED) return 0;
    o->asked++;
    uint64_t r = 0;
    if (dmm_pool_trim(o->pool, 0, &r) != DMM_OK) return 0;
    o->released += r;
    return r;
}

static uint64_t lease_owned(dmm_governor *g, dmm_lease_id l) {
    uint64_t owned = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(g, l, &owned, NULL));
    return owned;
}

static void two_sessions_and_another_pool_share_one_governor(void **state) {
    (void)state;
    dmm_ort_runtime *rt = kit_ort_open_or_skip("test_ort_allocator");
    dmm_driver *host = kit_host();
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    dmm_ort_allocator *a1 = kit_alloc(rt, host, g, "session-1");
    dmm_ort_allocator *a2 = kit_alloc(rt, host, g, "session-2");
    struct OrtEnv *env = kit_env(rt);
    const dmm_onnx_model_desc mlp = {256, 512, 2, 64, 8};
    /* a session takes the env allocator registered when it is created */
    DMM_OK_OR_FAIL(dmm_ort_allocator_register(a1, env));
    struct OrtSession *s1 = kit_session(rt, env, &mlp, true, NULL, 0);
    DMM_OK_OR_FAIL(dmm_ort_allocator_unregister(a1, env));
    DMM_OK_OR_FAIL(dmm_ort_allocator_register(a2, env));
    struct OrtSession *s2 = kit_session(rt, env, &mlp, true, NULL, 0);
    assert_int_equal(kit_run(rt, s2, &mlp, mlp.batch, 1, NULL, NULL, 0), 0);
    assert_true(kit_stats(a2).allocs > 0);
    assert_int_equal(kit_stats(a1).allocs, 0);

    /* the other holder: 16 MiB mapped and free in its pool */
    other o;
    memset(&o, 0, sizeof o);
    dmm_holder *ho = NULL;
    dmm_holder_config hc = {sizeof hc, "other-pool", -1, other_reclaim, &o}; /* asked first */
    DMM_OK_OR_FAIL(dmm_governor_holder_register(g, &hc, &ho));
    DMM_OK_OR_FAIL(dmm_lease_reserve(ho, KIT_HOST, DMM_ROLE_WORKSPACE, 0, 0, &o.lease));
    dmm_accounting acct;
    DMM_OK_OR_FAIL(dmm_governor_accounting(g, o.lease, &acct));
    dmm_arena_config ac = {.size = sizeof ac, .reserve_bytes = 1ull << 30, .accounting = &acct};
    DMM_OK_OR_FAIL(dmm_arena_create(host, &ac, &o.arena));
    dmm_pool_config pc = {.size = sizeof pc, .va_bytes = 1ull << 30};
    DMM_OK_OR_FAIL(dmm_pool_create(o.arena, host, &pc, &o.pool));
    void *big = NULL;
    DMM_OK_OR_FAIL(dmm_pool_malloc(o.pool, 16 * MIB, NULL, &big));
    DMM_OK_OR_FAIL(dmm_pool_free(o.pool, big, NULL));
    assert_true(lease_owned(g, o.lease) >= 16 * MIB);

    /* the limit leaves no room for session 1's first Run unless the other pool gives back */
    dmm_tier_usage tu = {.size = sizeof tu};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(g, KIT_HOST, &tu));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, KIT_HOST, DMM_AXIS_OWNED, tu.used[DMM_AXIS_OWNED]));
    assert_int_equal(kit_run(rt, s1, &mlp, mlp.batch, 1, NULL, NULL, 0), 0);
    assert_true(o.asked >= 1);
    assert_true(o.released >= 8 * MIB);
    assert_true(lease_owned(g, o.lease) < 16 * MIB); /* it gave its cache back */
    assert_true(kit_stats(a1).allocs > 0);
    dmm_governor_counters gc = {.size = sizeof gc};
    DMM_OK_OR_FAIL(dmm_governor_counters_get(g, &gc));
    assert_true(gc.grants_after_reclaim >= 1);

    /* per holder: each allocator's leases hold exactly what its pools hold; the snapshot names all three */
    dmm_ort_allocator *as[2] = {a1, a2};
    for (int i = 0; i < 2; i++) {
        dmm_ort_stats st = kit_stats(as[i]);
        dmm_device **d = as[i]->devices;
        assert_int_equal(lease_owned(g, dmm_device_lease(d[DMM_ORT_POOL_WEIGHTS])), st.weights.physical_bytes.current);
        assert_int_equal(lease_owned(g, dmm_device_lease(d[DMM_ORT_POOL_RUN])), st.run.physical_bytes.current);
        assert_true(st.weights.physical_bytes.current > 0);
    }
    char json[8192];
    size_t need = 0;
    DMM_OK_OR_FAIL(dmm_governor_snapshot_json(g, json, sizeof json, &need));
    assert_non_null(strstr(json, "\"session-1\""));
    assert_non_null(strstr(json, "\"session-2\""));
    assert_non_null(strstr(json, "\"other-pool\""));

    rt->calls.ReleaseSession(s1);
    rt->calls.ReleaseSession(s2);
    DMM_OK_OR_FAIL(dmm_ort_allocator_unregister(a2, env));
    rt->calls.ReleaseEnv(env);
    DMM_OK_OR_FAIL(dmm_ort_allocator_destroy(a1));
    DMM_OK_OR_FAIL(dmm_ort_allocator_destroy(a2));
    DMM_OK_OR_FAIL(dmm_pool_destroy(o.pool));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(o.arena));
    DMM_OK_OR_FAIL(dmm_lease_release(g, o.lease));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(ho));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
    dmm_test_census_zero(host);
    dmm_driver_destroy(host);
    dmm_ort_runtime_close(rt);
}

static void assert_same(const dmm_ort_stats *x, const dmm_ort_stats *y) {
    assert_int_equal(x->in_use, y->in_use);
    assert_int_equal(x->allocs, y->allocs);
    assert_int_equal(x->reserves, y->reserves);
    assert_int_equal(x->frees, y->frees);
    assert_int_equal(x->weights.committed_bytes.current, y->weights.committed_bytes.current);
    assert_int_equal(x->run.committed_bytes.current, y->run.committed_bytes.current);
}

static void bad_requests_get_their_documented_answer_and_change_nothing(void **state) {
    (void)state;
    dmm_ort_runtime *rt = kit_ort_open_or_skip("test_ort_allocator");
    dmm_driver *host = kit_host();
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));

    /* an arena-type memory info: refused at creation, nothing created */
    dmm_ort_config c = {.size = sizeof c, .name = "arena", .allocator_type = DMM_ORT_ARENA_ALLOCATOR};
    dmm_ort_allocator *bad = (dmm_ort_allocator *)0x1;
    assert_int_equal(dmm_ort_allocator_create(rt, host, g, &c, &bad), DMM_ERR_INVALID_ARGUMENT);
    assert_null(bad);
    dmm_test_error_mentions("allocator_type 1 refused", "OrtDeviceAllocator", "arena", NULL);
    /* a wrong device: the CUDA provider's entry points need a cuda driver */
    assert_int_equal(dmm_ort_gpu_external_init(rt, host, g, NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("needs a cuda driver", "'host'", NULL);
    assert_null(dmm_ort_gpu_external_allocator());

    dmm_ort_config nc = {.size = sizeof nc, .va_bytes = 1ull << 30, .null_on_refusal = 1, .name = "bad-input"};
    dmm_ort_allocator *a = NULL, *b = NULL;
    DMM_OK_OR_FAIL(dmm_ort_allocator_create(rt, host, g, &nc, &a)); /* called from C here: NULL, no exception */
    nc.name = "elsewhere";
    DMM_OK_OR_FAIL(dmm_ort_allocator_create(rt, host, g, &nc, &b));
    struct OrtAllocator *o = dmm_ort_allocator_ort(a);
    assert_int_equal(o->version, 30);
    assert_non_null(o->Reserve);
    assert_non_null(o->GetStats);
    assert_non_null(o->AllocOnStream);
    assert_non_null(o->Shrink);
    void *keep = o->Alloc(o, 4096);
    assert_non_null(keep);
    /* a thread inside a tag scope of the device front (torch's sleep / wake) does not move ONNX Runtime's
     * blocks into tag segments: its devices are the pool's alone (pool_only), counted and destroyed as such */
    DMM_OK_OR_FAIL(dmm_device_tag_begin("not-ort"));
    void *tagged = o->Alloc(o, 1 << 20);
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    assert_non_null(tagged);
    assert_true(kit_stats(a).in_use >= (1u << 20) + 4096);
    o->Free(o, tagged);
    dmm_ort_stats st0 = kit_stats(a);
    char msg[DMM_ORT_ERROR_CAP];

    /* Free(NULL): nothing, no error */
    o->Free(o, NULL);
    dmm_ort_stats st = kit_stats(a);
    assert_same(&st0, &st);
    assert_int_equal(st.bad_frees, 0);
    assert_int_equal(dmm_ort_allocator_last_error(a, msg, sizeof msg), DMM_OK);

    /* size 0: NULL, counted, nothing charged, no error */
    assert_null(o->Alloc(o, 0));
    assert_null(o->Reserve(o, 0));
    st = kit_stats(a);
    assert_same(&st0, &st);
    assert_int_equal(st.zero_requests, 2);
    assert_int_equal(dmm_ort_allocator_last_error(a, msg, sizeof msg), DMM_OK);

    /* huge sizes: NULL with a sentence */
    assert_null(o->Alloc(o, SIZE_MAX));
    assert_int_equal(dmm_ort_allocator_last_error(a, msg, sizeof msg), DMM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(msg, "more than the 1073741824 bytes of address space"));
    assert_null(o->Reserve(o, (size_t)(1ull << 30) + 1));
    st = kit_stats(a);
    assert_same(&st0, &st);
    assert_int_equal(st.refusals, 2);

    /* double free: refused, counted, the sentence kept, nothing changed */
    void *p = o->Alloc(o, 10000);
    assert_non_null(p);
    o->Free(o, p);
    dmm_ort_stats st1 = kit_stats(a);
    o->Free(o, p);
    st = kit_stats(a);
    assert_same(&st1, &st);
    assert_int_equal(st.bad_frees, 1);
    assert_int_equal(dmm_ort_allocator_last_error(a, msg, sizeof msg), DMM_ERR_UNKNOWN_ALLOCATION);
    assert_non_null(strstr(msg, "double free"));
    /* a pointer of another allocator, and one inside a block: refused, the owner's block intact */
    struct OrtAllocator *ob = dmm_ort_allocator_ort(b);
    void *q = ob->Alloc(ob, 8192);
    assert_non_null(q);
    memset(q, 0x3c, 8192);
    o->Free(o, q);
    assert_int_equal(dmm_ort_allocator_last_error(a, msg, sizeof msg), DMM_ERR_UNKNOWN_ALLOCATION);
    assert_non_null(strstr(msg, "in neither of its pools"));
    o->Free(o, (char *)keep + 512);
    st = kit_stats(a);
    assert_same(&st1, &st);
    assert_int_equal(st.bad_frees, 3);
    assert_int_equal(((unsigned char *)q)[8191], 0x3c);
    ob->Free(ob, q);
    assert_int_equal(kit_stats(b).bad_frees, 0);
    o->Free(o, keep);
    assert_int_equal(kit_stats(a).in_use, 0);
    /* destroy while a block is live: BUSY, nothing changed */
    void *live = o->Reserve(o, 100);
    assert_int_equal(dmm_ort_allocator_destroy(a), DMM_ERR_BUSY);
    dmm_test_error_mentions("1 block(s) are live", NULL);
    o->Free(o, live);
    DMM_OK_OR_FAIL(dmm_ort_allocator_destroy(a));
    DMM_OK_OR_FAIL(dmm_ort_allocator_destroy(b));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
    dmm_test_census_zero(host);
    dmm_driver_destroy(host);
    dmm_ort_runtime_close(rt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sixteen_runs_of_varying_shape_hold_a_plateau),
        cmocka_unit_test(a_run_over_the_limit_fails_and_the_next_one_succeeds),
        cmocka_unit_test(two_sessions_and_another_pool_share_one_governor),
        cmocka_unit_test(bad_requests_get_their_documented_answer_and_change_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
