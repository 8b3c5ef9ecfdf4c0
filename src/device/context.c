/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/context.c — the context floor: counts with resettable peaks, the clock, and the
 * device-loss questions every floor above asks.
 *
 * What it owns: nothing but these answers (and the sentence that refuses a request above the reservation). Device loss has one owner, the driver (src/driver/call.h):
 * every call into it goes through its wrappers, the first DMM_ERR_DEVICE_LOST latches there, and
 * every later call is refused without reaching the driver. So the device keeps no loss flag: it asks
 * the driver before its slow paths, and refuses with a sentence of its own that says what to do.
 *
 * Invariants: a device_count's peak ≥ cur at every add (a reset lowers the peak to cur).
 */
#include <time.h>

#include "context.h"
#include "driver/call.h"

void dmm__device_count_add(device_count *t, uint64_t v) {
    uint64_t now = dmm_atomic_add_relaxed(&t->cur, v) + v;
    dmm_atomic_add_relaxed(&t->total, v);
    dmm_atomic_max_relaxed(&t->peak, now);
}

void dmm__device_count_sub(device_count *t, uint64_t v) { dmm_atomic_sub_relaxed(&t->cur, v); }

void dmm__device_count_reset(device_count *t) {
    dmm_atomic_store_relaxed(&t->peak, dmm_atomic_load_relaxed(&t->cur));
}

uint64_t dmm_device_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool dmm__device_lost(const dmm_device *c) { return dmm__drv_lost(c->drv); }

bool dmm__device_terminated(const dmm_device *c) { return dmm__drv_terminated(c->drv); }

dmm_status dmm_device_capture_status(dmm_device *c, dmm_stream stream, bool *capturing, uint64_t *id) {
    if (c == NULL || capturing == NULL || id == NULL) return dmm__device_null("dmm_device_capture_status", "a device and outputs for capturing and id");
    *capturing = false;
    *id = 0;
    if (stream == NULL || !dmm__drv_can_capture(c->drv)) return DMM_OK;
    return dmm__drv_capture_status(c->drv, stream, capturing, id);
}

dmm_status dmm__device_refuse_capturing(dmm_device *c, const char *op, dmm_stream stream) {
    bool capturing = false;
    uint64_t id = 0;
    dmm_status s = dmm_device_capture_status(c, stream, &capturing, &id);
    if (s != DMM_OK || !capturing) return s;
    return dmm_error_set(DMM_ERR_BUSY, "dmm device: %s refused: stream %p is capturing a CUDA graph, and mapping or "
                         "unmapping memory now would invalidate the capture; call it after the capture; nothing "
                         "changed", op, stream);
}

dmm_status dmm__device_refuse_lost(dmm_device *c, const char *op) {
    if (!dmm__device_lost(c)) return DMM_OK;
    return dmm_error_set(DMM_ERR_DEVICE_LOST,
                         "dmm device: %s on device %d refused: the device is lost (a driver call reported a sticky "
                         "context error), so nothing is asked of the driver any more; free what you hold, tear "
                         "the context down, then confirm (dmm_device_confirm_lost) and destroy",
                         op, (int)c->dev.index);
}

dmm_status dmm__device_too_large(const dmm_device *c, uint64_t bytes, const char *what) {
    return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                         "dmm device: %s %llu bytes on device %d refused: more than the %llu bytes of address space "
                         "the device reserved (4 x its pool VA: dmm_device_config.pool_va_bytes, DMM_TORCH_POOL_VA under "
                         "PyTorch), so nothing could hold it; "
                         "nothing was allocated",
                         what, (unsigned long long)bytes, (int)c->dev.index, (unsigned long long)c->reserve);
}

dmm_status dmm__device_null(const char *op, const char *needs) {
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: needs %s (a NULL was passed); nothing changed", op, needs);
}
