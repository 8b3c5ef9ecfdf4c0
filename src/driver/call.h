/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/call.h — the one funnel through which the library calls a driver, and the device-loss
 * latch that lives there. Never installed.
 *
 * Every call the library makes into a driver (the arena's and eager's physical calls, the pool's,
 * the deferred queue's and the device front's events, streams and copies, the governor's mem_info)
 * goes through a dmm__drv_<op> wrapper below. Each wrapper:
 *   - refuses at once, with DMM_ERR_DEVICE_LOST and the first loss's sentence, when `d` is lost
 *     (no driver call);
 *   - answers DMM_ERR_UNSUPPORTED with a sentence where the slot is NULL (absent, never a no-op);
 *   - latches the loss on `d` when the call itself reports DMM_ERR_DEVICE_LOST (its sentence, the
 *     thread's last error, is kept as the first one and stays the last error).
 *
 * Invariant: latch.state goes 0 → 1 → 2 (→ 3) once and never back; latch.why is written only
 * between 1 and 2 by the one thread that moved it to 1, and read only once the state is ≥ 2.
 * State 3: the owner confirmed that the context is torn down (dmm_arena_confirm_context_terminated),
 * so the layers above may forget what they held on the device without giving it back. So a layer
 * that asks dmm__drv_lost(d) needs no flag of its own: pool, queue, arena and device front over one
 * driver stop together, whichever of them met the loss first.
 *
 * Not wrapped: `census` (a tally of what the driver holds, asked also after a loss) and `destroy`.
 */
#ifndef DMM_DRIVER_CALL_H
#define DMM_DRIVER_CALL_H

#include <stddef.h>

#include "dmm/driver.h"

static inline bool dmm__drv_lost(const dmm_driver *d) {
    return __atomic_load_n(&d->latch.state, __ATOMIC_ACQUIRE) != 0;
}

/* The refusal of `op` on a lost driver (error set; returns DMM_ERR_DEVICE_LOST). */
dmm_status dmm__drv_refuse(dmm_driver *d, dmm_driver_op op);
/* The refusal of `op` where the driver has no such slot (DMM_ERR_UNSUPPORTED, error set). */
dmm_status dmm__drv_absent(dmm_driver *d, dmm_driver_op op);
/* Latches a loss that `what` reported (the thread's last error is its sentence, and stays). For a
 * layer that learns of a loss elsewhere than from a wrapper below (e.g. a mechanism's outcome). */
void dmm__drv_latch(dmm_driver *d, const char *what);
/* The first loss's sentence ("" while `d` is usable). */
const char *dmm__drv_lost_why(const dmm_driver *d);
/* Records that the lost driver's context was confirmed torn down (no-op while `d` is usable: a
 * confirmation needs a loss first; returns whether `d` is now confirmed). */
bool dmm__drv_confirm_terminated(dmm_driver *d);
static inline bool dmm__drv_terminated(const dmm_driver *d) {
    return __atomic_load_n(&d->latch.state, __ATOMIC_ACQUIRE) == 3u;
}

static inline dmm_status dmm__drv_done(dmm_driver *d, dmm_driver_op op, dmm_status s) {
    if (__builtin_expect(s == DMM_ERR_DEVICE_LOST, 0)) dmm__drv_latch(d, dmm_driver_op_name(op));
    return s;
}

#define DMM__DRV_GUARD(d, op, slot)                                                                          \
    do {                                                                                                     \
        if (__builtin_expect(dmm__drv_lost(d), 0)) return dmm__drv_refuse((d), (op));                        \
        if ((d)->ops->slot == NULL) return dmm__drv_absent((d), (op));                                       \
    } while (0)

static inline dmm_status dmm__drv_granularity(dmm_driver *d, size_t *bytes) {
    DMM__DRV_GUARD(d, DMM_OP_GRANULARITY, granularity);
    return dmm__drv_done(d, DMM_OP_GRANULARITY, d->ops->granularity(d, bytes));
}
static inline dmm_status dmm__drv_reserve(dmm_driver *d, size_t bytes, size_t align, uintptr_t *va) {
    DMM__DRV_GUARD(d, DMM_OP_RESERVE, reserve);
    return dmm__drv_done(d, DMM_OP_RESERVE, d->ops->reserve(d, bytes, align, va));
}
static inline dmm_status dmm__drv_unreserve(dmm_driver *d, uintptr_t va, size_t bytes) {
    DMM__DRV_GUARD(d, DMM_OP_UNRESERVE, unreserve);
    return dmm__drv_done(d, DMM_OP_UNRESERVE, d->ops->unreserve(d, va, bytes));
}
static inline dmm_status dmm__drv_create(dmm_driver *d, size_t bytes, dmm_phys *handle) {
    DMM__DRV_GUARD(d, DMM_OP_CREATE, create);
    return dmm__drv_done(d, DMM_OP_CREATE, d->ops->create(d, bytes, handle));
}
static inline dmm_status dmm__drv_release(dmm_driver *d, dmm_phys handle) {
    DMM__DRV_GUARD(d, DMM_OP_RELEASE, release);
    return dmm__drv_done(d, DMM_OP_RELEASE, d->ops->release(d, handle));
}
static inline dmm_status dmm__drv_map(dmm_driver *d, uintptr_t va, size_t bytes, dmm_phys handle) {
    DMM__DRV_GUARD(d, DMM_OP_MAP, map);
    return dmm__drv_done(d, DMM_OP_MAP, d->ops->map(d, va, bytes, handle));
}
static inline dmm_status dmm__drv_unmap(dmm_driver *d, uintptr_t va, size_t bytes) {
    DMM__DRV_GUARD(d, DMM_OP_UNMAP, unmap);
    return dmm__drv_done(d, DMM_OP_UNMAP, d->ops->unmap(d, va, bytes));
}
static inline dmm_status dmm__drv_set_access(dmm_driver *d, uintptr_t va, size_t bytes, dmm_access access) {
    DMM__DRV_GUARD(d, DMM_OP_SET_ACCESS, set_access);
    return dmm__drv_done(d, DMM_OP_SET_ACCESS, d->ops->set_access(d, va, bytes, access));
}
static inline dmm_status dmm__drv_alloc(dmm_driver *d, size_t bytes, uintptr_t *ptr) {
    DMM__DRV_GUARD(d, DMM_OP_ALLOC, alloc);
    return dmm__drv_done(d, DMM_OP_ALLOC, d->ops->alloc(d, bytes, ptr));
}
static inline dmm_status dmm__drv_free(dmm_driver *d, uintptr_t ptr, size_t bytes) {
    DMM__DRV_GUARD(d, DMM_OP_FREE, free);
    return dmm__drv_done(d, DMM_OP_FREE, d->ops->free(d, ptr, bytes));
}
static inline dmm_status dmm__drv_stream_create(dmm_driver *d, dmm_stream *stream) {
    DMM__DRV_GUARD(d, DMM_OP_STREAM_CREATE, stream_create);
    return dmm__drv_done(d, DMM_OP_STREAM_CREATE, d->ops->stream_create(d, stream));
}
static inline dmm_status dmm__drv_stream_destroy(dmm_driver *d, dmm_stream stream) {
    DMM__DRV_GUARD(d, DMM_OP_STREAM_DESTROY, stream_destroy);
    return dmm__drv_done(d, DMM_OP_STREAM_DESTROY, d->ops->stream_destroy(d, stream));
}
static inline dmm_status dmm__drv_event_create(dmm_driver *d, dmm_event *event) {
    DMM__DRV_GUARD(d, DMM_OP_EVENT_CREATE, event_create);
    return dmm__drv_done(d, DMM_OP_EVENT_CREATE, d->ops->event_create(d, event));
}
static inline dmm_status dmm__drv_event_destroy(dmm_driver *d, dmm_event event) {
    DMM__DRV_GUARD(d, DMM_OP_EVENT_DESTROY, event_destroy);
    return dmm__drv_done(d, DMM_OP_EVENT_DESTROY, d->ops->event_destroy(d, event));
}
static inline dmm_status dmm__drv_event_record(dmm_driver *d, dmm_event event, dmm_stream stream) {
    DMM__DRV_GUARD(d, DMM_OP_EVENT_RECORD, event_record);
    return dmm__drv_done(d, DMM_OP_EVENT_RECORD, d->ops->event_record(d, event, stream));
}
static inline dmm_status dmm__drv_event_query(dmm_driver *d, dmm_event event) {
    DMM__DRV_GUARD(d, DMM_OP_EVENT_QUERY, event_query);
    return dmm__drv_done(d, DMM_OP_EVENT_QUERY, d->ops->event_query(d, event));
}
static inline dmm_status dmm__drv_event_synchronize(dmm_driver *d, dmm_event event) {
    DMM__DRV_GUARD(d, DMM_OP_EVENT_SYNCHRONIZE, event_synchronize);
    return dmm__drv_done(d, DMM_OP_EVENT_SYNCHRONIZE, d->ops->event_synchronize(d, event));
}
static inline dmm_status dmm__drv_copy(dmm_driver *d, uintptr_t dst, uintptr_t src, size_t bytes, dmm_stream stream) {
    DMM__DRV_GUARD(d, DMM_OP_COPY, copy);
    return dmm__drv_done(d, DMM_OP_COPY, d->ops->copy(d, dst, src, bytes, stream));
}
static inline dmm_status dmm__drv_stream_synchronize(dmm_driver *d, dmm_stream stream) {
    DMM__DRV_GUARD(d, DMM_OP_STREAM_SYNCHRONIZE, stream_synchronize);
    return dmm__drv_done(d, DMM_OP_STREAM_SYNCHRONIZE, d->ops->stream_synchronize(d, stream));
}
static inline dmm_status dmm__drv_mem_info(dmm_driver *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    DMM__DRV_GUARD(d, DMM_OP_MEM_INFO, mem_info);
    return dmm__drv_done(d, DMM_OP_MEM_INFO, d->ops->mem_info(d, free_bytes, total_bytes));
}

/* The sharing slots sit after `destroy`: a table of an older `size` lacks them (absent). */
#define DMM__DRV_HAS(d, slot) \
    ((d)->ops->size >= offsetof(dmm_driver_ops, slot) + sizeof(void (*)(void)) && (d)->ops->slot != NULL)
#define DMM__DRV_GUARD_LATE(d, op, slot)                                                                     \
    do {                                                                                                     \
        if (__builtin_expect(dmm__drv_lost(d), 0)) return dmm__drv_refuse((d), (op));                        \
        if (!DMM__DRV_HAS(d, slot)) return dmm__drv_absent((d), (op));                                       \
    } while (0)

/* Whether `d` can create handles for export (create_exportable and export_handle both present). */
static inline bool dmm__drv_can_export(const dmm_driver *d) {
    return DMM__DRV_HAS(d, create_exportable) && DMM__DRV_HAS(d, export_handle);
}
static inline dmm_status dmm__drv_create_exportable(dmm_driver *d, size_t bytes, dmm_phys *handle) {
    DMM__DRV_GUARD_LATE(d, DMM_OP_CREATE, create_exportable);
    return dmm__drv_done(d, DMM_OP_CREATE, d->ops->create_exportable(d, bytes, handle));
}
static inline dmm_status dmm__drv_export(dmm_driver *d, dmm_phys handle, dmm_access access, int *fd) {
    DMM__DRV_GUARD_LATE(d, DMM_OP_EXPORT, export_handle);
    return dmm__drv_done(d, DMM_OP_EXPORT, d->ops->export_handle(d, handle, access, fd));
}
static inline dmm_status dmm__drv_import(dmm_driver *d, int fd, size_t bytes, dmm_access access, dmm_phys *handle) {
    DMM__DRV_GUARD_LATE(d, DMM_OP_IMPORT, import_handle);
    return dmm__drv_done(d, DMM_OP_IMPORT, d->ops->import_handle(d, fd, bytes, access, handle));
}

/* The slots beyond memory. Whether `d` can tell a capturing stream (absent: streams never capture). */
static inline bool dmm__drv_can_capture(const dmm_driver *d) { return DMM__DRV_HAS(d, stream_capture_status); }
static inline dmm_status dmm__drv_capture_status(dmm_driver *d, dmm_stream stream, bool *capturing, uint64_t *id) {
    DMM__DRV_GUARD_LATE(d, DMM_OP_CAPTURE_STATUS, stream_capture_status);
    return dmm__drv_done(d, DMM_OP_CAPTURE_STATUS, d->ops->stream_capture_status(d, stream, capturing, id));
}
/* Whether `d` has host memory for copies (host_alloc and host_free both present). */
static inline bool dmm__drv_can_host_alloc(const dmm_driver *d) {
    return DMM__DRV_HAS(d, host_alloc) && DMM__DRV_HAS(d, host_free);
}
static inline dmm_status dmm__drv_host_alloc(dmm_driver *d, size_t bytes, void **out) {
    DMM__DRV_GUARD_LATE(d, DMM_OP_HOST_ALLOC, host_alloc);
    return dmm__drv_done(d, DMM_OP_HOST_ALLOC, d->ops->host_alloc(d, bytes, out));
}
/* The one call made after a loss too: host memory is given back whether or not the device lives (the
 * driver's answer still latches a loss it reports). */
static inline dmm_status dmm__drv_host_free(dmm_driver *d, void *ptr) {
    if (!DMM__DRV_HAS(d, host_free)) return dmm__drv_absent(d, DMM_OP_HOST_FREE);
    return dmm__drv_done(d, DMM_OP_HOST_FREE, d->ops->host_free(d, ptr));
}
static inline bool dmm__drv_can_wait_event(const dmm_driver *d) { return DMM__DRV_HAS(d, stream_wait_event); }
static inline dmm_status dmm__drv_stream_wait_event(dmm_driver *d, dmm_stream waiter, dmm_event event) {
    DMM__DRV_GUARD_LATE(d, DMM_OP_STREAM_WAIT_EVENT, stream_wait_event);
    return dmm__drv_done(d, DMM_OP_STREAM_WAIT_EVENT, d->ops->stream_wait_event(d, waiter, event));
}
static inline dmm_status dmm__drv_device_synchronize(dmm_driver *d) {
    DMM__DRV_GUARD_LATE(d, DMM_OP_DEVICE_SYNCHRONIZE, device_synchronize);
    return dmm__drv_done(d, DMM_OP_DEVICE_SYNCHRONIZE, d->ops->device_synchronize(d));
}

#undef DMM__DRV_GUARD_LATE
#undef DMM__DRV_HAS
#undef DMM__DRV_GUARD
#endif /* DMM_DRIVER_CALL_H */
