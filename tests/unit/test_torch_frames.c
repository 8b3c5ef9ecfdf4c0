/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_torch_frames.c — the history's context function of libdmm_torch.so
 * (adapters/torch/frames.c), compiled in here, without a GPU or Python.
 *
 * What is proven: a device's slot calls its hook only for the event kinds it wants (a free nobody
 * records makes no call), passes the native frames asked for (at most that many), and answers 0 with
 * no hook, for another device's empty slot and for an event kind out of range; clearing a hook returns
 * only after a call in flight has returned; a native frame is named (a libc function by its symbol and
 * object), and a NULL address or a missing buffer is refused.
 */
#include "../../adapters/torch/frames.c"

#include <pthread.h>
#include <unistd.h>

#include "testkit.h"

static int g_calls, g_last_n;

static uint32_t counting_hook(int event, void *const *native, int n) {
    (void)native;
    g_calls++;
    g_last_n = n;
    return 40 + (uint32_t)event;
}

static void a_slot_calls_its_hook_for_the_kinds_it_wants(void **state) {
    (void)state;
    g_calls = 0;
    void *slot = dmm__torch_context_set(3, counting_hook, 1u << DMM_DEVICE_EVENT_ALLOC, 0);
    assert_int_equal(dmm__torch_context(slot, DMM_DEVICE_EVENT_ALLOC), 40);
    assert_int_equal(g_last_n, 0);
    assert_int_equal(dmm__torch_context(slot, DMM_DEVICE_EVENT_FREE), 0); /* not wanted: no call */
    assert_int_equal(g_calls, 1);
    slot = dmm__torch_context_set(3, counting_hook, (1u << DMM_DEVICE_EVENT_ALLOC) | (1u << DMM_DEVICE_EVENT_FREE), 16);
    assert_int_equal(dmm__torch_context(slot, DMM_DEVICE_EVENT_FREE), 41);
    assert_true(g_last_n > 0 && g_last_n <= 16); /* native frames, no more than asked */
    void *other = dmm__torch_context_set(4, NULL, 0, 0);
    assert_ptr_not_equal(other, slot);
    assert_int_equal(dmm__torch_context(other, DMM_DEVICE_EVENT_ALLOC), 0); /* another device's: empty */
    assert_int_equal(dmm__torch_context(slot, DMM_DEVICE_EVENT_ALLOC), 40);
    assert_int_equal(dmm__torch_context(slot, -1), 0);
    assert_int_equal(dmm__torch_context(slot, 40), 0);
    g_calls = 0;
    dmm__torch_context_set(3, NULL, 0, 0);
    assert_int_equal(dmm__torch_context(slot, DMM_DEVICE_EVENT_ALLOC), 0);
    assert_int_equal(g_calls, 0);
}

static atomic_int g_inside, g_release, g_cleared;

static uint32_t slow_hook(int event, void *const *native, int n) {
    (void)event;
    (void)native;
    (void)n;
    atomic_store(&g_inside, 1);
    while (!atomic_load(&g_release)) sched_yield();
    return 7;
}

static void *call_in_flight(void *slot) { return (void *)(uintptr_t)dmm__torch_context(slot, DMM_DEVICE_EVENT_ALLOC); }

static void *clear(void *unused) {
    (void)unused;
    dmm__torch_context_set(5, NULL, 0, 0);
    atomic_store(&g_cleared, 1);
    return NULL;
}

static void clearing_waits_for_a_call_in_flight(void **state) {
    (void)state;
    void *slot = dmm__torch_context_set(5, slow_hook, 1u << DMM_DEVICE_EVENT_ALLOC, 0);
    pthread_t caller, clearer;
    assert_int_equal(pthread_create(&caller, NULL, call_in_flight, slot), 0);
    while (!atomic_load(&g_inside)) sched_yield();
    assert_int_equal(pthread_create(&clearer, NULL, clear, NULL), 0);
    usleep(50 * 1000);
    assert_int_equal(atomic_load(&g_cleared), 0); /* the hook is still running: the clear has not returned */
    atomic_store(&g_release, 1);
    void *got = NULL;
    assert_int_equal(pthread_join(caller, &got), 0);
    assert_int_equal(pthread_join(clearer, NULL), 0);
    assert_int_equal((uintptr_t)got, 7);
    assert_int_equal(atomic_load(&g_cleared), 1);
}

static void a_native_frame_is_named(void **state) {
    (void)state;
    char name[256], object[256];
    uint64_t offset = 1;
    void *f = NULL;
    pid_t (*p)(void) = getpid;
    memcpy(&f, &p, sizeof f);
    assert_int_equal(dmm_torch_native_symbol(f, name, sizeof name, object, sizeof object, &offset), 0);
    assert_non_null(strstr(name, "getpid"));
    assert_non_null(strstr(object, "libc"));
    assert_int_equal(offset, 0);
    assert_int_equal(dmm_torch_native_symbol(NULL, name, sizeof name, object, sizeof object, &offset), -1);
    assert_int_equal(dmm_torch_native_symbol(f, NULL, sizeof name, object, sizeof object, &offset), -1);
    assert_int_equal(dmm_torch_native_symbol(f, name, 0, object, sizeof object, &offset), -1);
    assert_int_equal(dmm_torch_native_symbol(f, name, sizeof name, object, sizeof object, NULL), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_slot_calls_its_hook_for_the_kinds_it_wants),
        cmocka_unit_test(clearing_waits_for_a_call_in_flight),
        cmocka_unit_test(a_native_frame_is_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
