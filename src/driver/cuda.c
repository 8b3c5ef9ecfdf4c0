/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda.c — the `cuda` driver: libcuda.so.1 opened with dlopen, the primary context of one
 * device, and the driver ops of dmm/driver.h over the CUDA driver API.
 *
 * This file owns the driver object: its creation, the ops tables, census, mem_info and destroy.
 * Beside it (cuda_types.h lists them): cuda_decl.h (dmm's own declarations of the CUDA driver API),
 * cuda_api.c (the loader, CUresult naming and the error mapping every op shares), cuda_memory.c (VMM
 * and eager ops with their records), cuda_stream.c (streams, events, copies), cuda_device.c (device
 * queries and peer access).
 *
 * The idea: no dependency on CUDA at build or link time. The types, constants and signatures come
 * from cuda_decl.h (compared with cuda.h at build time wherever one is installed: cuda_decl_check.c);
 * every entry point is resolved once per process with dlsym under the versioned name cuda.h binds to
 * (cuMemAlloc_v2, cuStreamDestroy_v2, …), and every one is checked. So every build has this driver,
 * and on a machine without a GPU or libcuda.so.1 it reports DMM_ERR_UNSUPPORTED "no CUDA driver:
 * <reason>".
 *
 * Each driver object retains the primary context of its device and makes it current on the calling
 * thread at the start of every op (cuCtxSetCurrent is a cheap thread-local store), so any thread may
 * call any op. Where the device lacks VMM (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
 * the object gets an ops table whose VMM slots are NULL.
 *
 * The driver keeps its own records of what it holds — reservations (va → bytes), physical handles
 * (handle → bytes), mappings (va → handle), how often each handle is mapped, and eager allocations
 * (ptr → bytes) — in dmm_u64map tables (src/core/u64map.h) under one lock that is never held across
 * a CUDA call. They give
 * the census (tallies of successful calls), the byte count a handle release needs, and the same
 * argument checks as the host driver, refusing what CUDA would either reject late or silently accept
 * (unmapping two mappings at once, releasing a handle that is still mapped, giving back a reservation
 * with mappings inside, freeing a stale pointer).
 * The trade-off: one short lock per VMM op, paid on the slow path only.
 *
 * Error mapping: CUDA_ERROR_OUT_OF_MEMORY → DMM_ERR_OUT_OF_MEMORY; CUDA_ERROR_NOT_READY from a query →
 * DMM_ERR_BUSY; sticky context errors (illegal address, launch failure, …) → DMM_ERR_DEVICE_LOST, and
 * from then on this driver refuses every op with DMM_ERR_DEVICE_LOST without calling CUDA; anything
 * else → DMM_ERR_DRIVER. Every sentence names the op, its values and CUDA's own code and name.
 *
 * Invariants (under `lock`):
 *   census.reserved_bytes = Σ reservations.bytes      census.handles = |handles|
 *   census.handle_bytes   = Σ handles.bytes           census.mapped_bytes = Σ handles[mappings.handle].bytes
 *   map_count[h] = |{va : mappings[va] = h}| (absent = 0)
 *   census.eager_bytes    = Σ eager.bytes
 *   a record is added only after its CUDA call succeeded; it is taken out before the undoing call
 *   (CUDA may hand the same VA or handle value to another thread the moment that call returns) and
 *   put back if the call failed; either way its slot is promised beforehand, so no bookkeeping step
 *   after a CUDA call can fail.
 */
#include <stdlib.h>
#include <string.h>

#include "driver/cuda_types.h"

/* ---- information ----------------------------------------------------------------------------- */

static dmm_status op_mem_info(dmm_driver *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    cuda_driver *c = as_cuda(d);
    if (free_bytes == NULL || total_bytes == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda mem_info: an output is NULL");
    dmm_status s = dmm__cuda_enter(c, "cuMemGetInfo");
    if (s != DMM_OK) return s;
    size_t f = 0, t = 0;
    dmm_cu_result r = dmm__cu.cuMemGetInfo(&f, &t);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuMemGetInfo", "device %d", (int)c->dev);
    *free_bytes = f;
    *total_bytes = t;
    return DMM_OK;
}

static dmm_status op_census(dmm_driver *d, dmm_driver_census *out) {
    cuda_driver *c = as_cuda(d);
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda census: out is NULL");
    if (out->size < sizeof *out)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "cuda census: out->size is %u, at least %zu needed",
                             (unsigned)out->size, sizeof *out);
    dmm_lock_acquire(&c->lock); /* the driver's own tally: answered also after a device loss */
    dmm_driver_census t = c->census;
    dmm_lock_release(&c->lock);
    t.size = (uint32_t)sizeof t;
    memcpy(out, &t, sizeof t);
    return DMM_OK;
}

static void op_destroy(dmm_driver *d) {
    cuda_driver *c = as_cuda(d);
    /* Gives back this object's reference on the primary context (bookkeeping, not memory: also after
     * a device loss, so that whoever resets the device finds no stale reference of ours). */
    (void)dmm__cu.cuDevicePrimaryCtxRelease(c->dev);
    dmm__u64map_fini(&c->reservations);
    dmm__u64map_fini(&c->handles);
    dmm__u64map_fini(&c->imported);
    dmm__u64map_fini(&c->mappings);
    dmm__u64map_fini(&c->map_count);
    dmm__u64map_fini(&c->eager);
    dmm_lock_destroy(&c->lock);
    free(c);
}

/* ---- the ops tables -------------------------------------------------------------------------- */

#define CUDA_COMMON_OPS                                                                             \
    .alloc = dmm__cuda_alloc, .free = dmm__cuda_free, .stream_create = dmm__cuda_stream_create,     \
    .stream_destroy = dmm__cuda_stream_destroy, .event_create = dmm__cuda_event_create,             \
    .event_destroy = dmm__cuda_event_destroy, .event_record = dmm__cuda_event_record,               \
    .event_query = dmm__cuda_event_query, .event_synchronize = dmm__cuda_event_synchronize,         \
    .copy = dmm__cuda_copy, .stream_synchronize = dmm__cuda_stream_synchronize,                     \
    .mem_info = op_mem_info, .census = op_census, .destroy = op_destroy,                            \
    .stream_capture_status = dmm__cuda_stream_capture_status, .host_alloc = dmm__cuda_host_alloc,   \
    .host_free = dmm__cuda_host_free, .stream_wait_event = dmm__cuda_stream_wait_event,           \
    .device_synchronize = dmm__cuda_device_synchronize

const dmm_driver_ops dmm__cuda_ops_vmm = {
    .size = sizeof(dmm_driver_ops),
    .name = "cuda",
    .granularity = dmm__cuda_granularity,
    .reserve = dmm__cuda_reserve,
    .unreserve = dmm__cuda_unreserve,
    .create = dmm__cuda_create,
    .release = dmm__cuda_release,
    .map = dmm__cuda_map,
    .unmap = dmm__cuda_unmap,
    .set_access = dmm__cuda_set_access,
    CUDA_COMMON_OPS,
    .create_exportable = dmm__cuda_create_exportable,
    .export_handle = dmm__cuda_export,
    .import_handle = dmm__cuda_import,
};

/* A device without VMM: the VMM slots stay NULL ("absent"). */
const dmm_driver_ops dmm__cuda_ops_eager = {
    .size = sizeof(dmm_driver_ops),
    .name = "cuda",
    CUDA_COMMON_OPS,
};

/* ---- creation -------------------------------------------------------------------------------- */

dmm_status dmm_cuda_driver_create(int ordinal, dmm_driver **out) {
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_cuda_driver_create: out is NULL");
    *out = NULL;
    dmm_cu_device dev = 0;
    dmm_status s = dmm__cuda_find_device("dmm_cuda_driver_create", ordinal, &dev);
    if (s != DMM_OK) return s;
    cuda_driver *c = calloc(1, sizeof *c);
    if (c == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_cuda_driver_create(ordinal=%d): no host memory for the driver",
                             ordinal);
    c->base.device.tier = DMM_TIER_DEVICE;
    c->base.device.index = ordinal;
    c->dev = dev;
    dmm_cu_result r = dmm__cu.cuDevicePrimaryCtxRetain(&c->ctx, dev);
    if (r != DMM_CUDA_SUCCESS) {
        s = dmm__cuda_fail(c, r, "cuDevicePrimaryCtxRetain", "device %d", ordinal);
        free(c);
        return s;
    }
    r = dmm__cu.cuCtxSetCurrent(c->ctx);
    if (r == DMM_CUDA_SUCCESS) r = dmm__cuda_device_vmm(dev, &c->vmm, &c->granule);
    if (r != DMM_CUDA_SUCCESS) {
        s = dmm__cuda_fail(c, r, "cuDeviceGetAttribute/cuMemGetAllocationGranularity", "device %d", ordinal);
        (void)dmm__cu.cuDevicePrimaryCtxRelease(dev);
        free(c);
        return s;
    }
    dmm__cuda_device_prop(dev, &c->prop);
    atomic_init(&c->lost, 0);
    dmm_lock_init(&c->lock);
    c->census.size = (uint32_t)sizeof c->census;
    c->base.ops = c->vmm ? &dmm__cuda_ops_vmm : &dmm__cuda_ops_eager;
    *out = &c->base;
    return DMM_OK;
}
