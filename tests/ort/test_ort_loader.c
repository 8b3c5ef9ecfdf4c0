/* SPDX-License-Identifier: Apache-2.0 */
/* tests/ort/test_ort_loader.c — the runtime loader (adapters/ort/loader.c) and the slots it pins
 * (dmm_ort_abi.h), against the real libonnxruntime.so.1.
 *
 * What is proven: a path that does not exist, and a library that is not ONNX Runtime (no OrtGetApiBase),
 * are refused with DMM_ERR_UNSUPPORTED and a sentence naming the path, the reason and the way out
 * (DMM_ORT_LIB, scripts/ort.sh), leaving nothing open; the real library grants API version 30 and says
 * "1.30.0". Each pinned slot is called and must behave as the function it names: CreateStatus /
 * GetErrorCode / GetErrorMessage / ReleaseStatus round-trip a code and a message; GetBuildInfoString
 * answers ONNX Runtime's build line; the memory-info slots give back the name, id, memory type,
 * allocator type and device type they were made with, and CompareMemoryInfo tells CPU from CUDA; the
 * key-value slots store and list pairs; the default allocator's AllocatorAlloc / AllocatorFree /
 * AllocatorGetInfo / AllocatorGetStats work on it; session-option slots accept their arguments. A wrong
 * index calls another function with these arguments, which crashes or answers differently.
 */
#include "ort_kit.h"

static void a_missing_library_is_refused_with_the_way_out(void **state) {
    (void)state;
    dmm_ort_runtime *rt = (dmm_ort_runtime *)0x1;
    assert_int_equal(dmm_ort_runtime_open("/nonexistent/dir/libonnxruntime.so.1", &rt), DMM_ERR_UNSUPPORTED);
    assert_null(rt);
    dmm_test_error_mentions("/nonexistent/dir/libonnxruntime.so.1", "dlopen failed", "DMM_ORT_LIB", "scripts/ort.sh",
                            NULL);
}

static void a_library_without_the_entry_point_is_refused(void **state) {
    (void)state;
    dmm_ort_runtime *rt = (dmm_ort_runtime *)0x1;
    assert_int_equal(dmm_ort_runtime_open("libz.so.1", &rt), DMM_ERR_UNSUPPORTED);
    assert_null(rt);
    dmm_test_error_mentions("libz.so.1", "no symbol OrtGetApiBase", "DMM_ORT_LIB", NULL);
    assert_int_equal(dmm_ort_runtime_open(NULL, NULL), DMM_ERR_INVALID_ARGUMENT);
}

static void the_real_runtime_grants_version_30(void **state) {
    (void)state;
    dmm_ort_runtime *rt = kit_ort_open_or_skip("test_ort_loader");
    assert_int_equal(dmm_ort_runtime_api_version(rt), 30);
    assert_string_equal(dmm_ort_runtime_version(rt), "1.30.0");
    assert_non_null(dmm_ort_runtime_api(rt));
    /* every slot of the table up to the granted version was read */
#define KIT_SLOT_SET(name, slot, version, ret, params) assert_non_null(dmm_ort_runtime_calls(rt)->name);
    DMM_ORT_SLOTS(KIT_SLOT_SET)
#undef KIT_SLOT_SET
    dmm_ort_runtime_close(rt);
}

static void every_pinned_slot_is_the_function_it_names(void **state) {
    (void)state;
    dmm_ort_runtime *rt = kit_ort_open_or_skip("test_ort_loader");
    /* 0, 1, 2, 93 */
    struct OrtStatus *st = rt->calls.CreateStatus(DMM_ORT_INVALID_ARGUMENT, "dmm slot check");
    assert_non_null(st);
    assert_int_equal(rt->calls.GetErrorCode(st), DMM_ORT_INVALID_ARGUMENT);
    assert_string_equal(rt->calls.GetErrorMessage(st), "dmm slot check");
    rt->calls.ReleaseStatus(st);
    /* 254 */
    const char *build = rt->calls.GetBuildInfoString();
    assert_non_null(build);
    assert_non_null(strstr(build, "ORT Build Info"));
    /* 68..74, 94, 225 */
    struct OrtMemoryInfo *cpu = NULL, *cuda = NULL;
    ORT_OK(rt, rt->calls.CreateCpuMemoryInfo(DMM_ORT_DEVICE_ALLOCATOR, DMM_ORT_MEM_DEFAULT, &cpu));
    ORT_OK(rt, rt->calls.CreateMemoryInfo(DMM_ORT_NAME_CUDA, DMM_ORT_DEVICE_ALLOCATOR, 1, DMM_ORT_MEM_DEFAULT, &cuda));
    const char *name = NULL;
    int id = -1, mt = 99, at = 99, dt = 99;
    ORT_OK(rt, rt->calls.MemoryInfoGetName(cpu, &name));
    assert_string_equal(name, DMM_ORT_NAME_CPU);
    ORT_OK(rt, rt->calls.MemoryInfoGetName(cuda, &name));
    assert_string_equal(name, DMM_ORT_NAME_CUDA);
    ORT_OK(rt, rt->calls.MemoryInfoGetId(cuda, &id));
    assert_int_equal(id, 1);
    ORT_OK(rt, rt->calls.MemoryInfoGetMemType(cuda, &mt));
    assert_int_equal(mt, DMM_ORT_MEM_DEFAULT);
    ORT_OK(rt, rt->calls.MemoryInfoGetType(cpu, &at));
    assert_int_equal(at, DMM_ORT_DEVICE_ALLOCATOR);
    rt->calls.MemoryInfoGetDeviceType(cuda, &dt);
    assert_int_equal(dt, DMM_ORT_DEVICE_GPU);
    rt->calls.MemoryInfoGetDeviceType(cpu, &dt);
    assert_int_equal(dt, DMM_ORT_DEVICE_CPU);
    int cmp = -7;
    ORT_OK(rt, rt->calls.CompareMemoryInfo(cpu, cpu, &cmp));
    assert_int_equal(cmp, 0);
    ORT_OK(rt, rt->calls.CompareMemoryInfo(cpu, cuda, &cmp));
    assert_int_not_equal(cmp, 0);
    rt->calls.ReleaseMemoryInfo(cuda);
    /* 295..298, 300 */
    struct OrtKeyValuePairs *kv = NULL;
    rt->calls.CreateKeyValuePairs(&kv);
    assert_non_null(kv);
    rt->calls.AddKeyValuePair(kv, "InUse", "42");
    rt->calls.AddKeyValuePair(kv, "Limit", "7");
    assert_string_equal(rt->calls.GetKeyValue(kv, "InUse"), "42");
    assert_null(rt->calls.GetKeyValue(kv, "absent"));
    const char *const *keys = NULL, *const *values = NULL;
    size_t nkv = 0;
    rt->calls.GetKeyValuePairs(kv, &keys, &values, &nkv);
    assert_int_equal(nkv, 2);
    rt->calls.ReleaseKeyValuePairs(kv);
    /* 75..78, 319 on ONNX Runtime's own default allocator */
    struct OrtAllocator *def = NULL;
    ORT_OK(rt, rt->calls.GetAllocatorWithDefaultOptions(&def));
    void *p = NULL;
    ORT_OK(rt, rt->calls.AllocatorAlloc(def, 1000, &p));
    assert_non_null(p);
    memset(p, 0x5a, 1000);
    const struct OrtMemoryInfo *di = NULL;
    ORT_OK(rt, rt->calls.AllocatorGetInfo(def, &di));
    ORT_OK(rt, rt->calls.CompareMemoryInfo(di, cpu, &cmp));
    ORT_OK(rt, rt->calls.AllocatorFree(def, p));
    struct OrtKeyValuePairs *dstats = NULL;
    ORT_OK(rt, rt->calls.AllocatorGetStats(def, &dstats));
    assert_non_null(dstats);
    rt->calls.ReleaseKeyValuePairs(dstats);
    rt->calls.ReleaseMemoryInfo(cpu);
    /* 3, 92 (CreateEnv/ReleaseEnv), 10, 19, 24, 130, 100 */
    struct OrtEnv *env = kit_env(rt);
    struct OrtSessionOptions *so = NULL;
    ORT_OK(rt, rt->calls.CreateSessionOptions(&so));
    ORT_OK(rt, rt->calls.DisableCpuMemArena(so));
    ORT_OK(rt, rt->calls.SetIntraOpNumThreads(so, 1));
    ORT_OK(rt, rt->calls.AddSessionConfigEntry(so, "session.use_env_allocators", "1"));
    rt->calls.ReleaseSessionOptions(so);
    rt->calls.ReleaseEnv(env);
    dmm_ort_runtime_close(rt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_missing_library_is_refused_with_the_way_out),
        cmocka_unit_test(a_library_without_the_entry_point_is_refused),
        cmocka_unit_test(the_real_runtime_grants_version_30),
        cmocka_unit_test(every_pinned_slot_is_the_function_it_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
