/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda_device.c — the `cuda` driver's device queries and peer access: how many devices,
 * what one of them is (name, compute capability, VMM and its granularity, memory), the lookup every
 * entry point shares, and which other devices a driver's mappings are opened to.
 *
 * The idea: a query retains the device's primary context only for its own duration, so asking about a
 * device costs nothing afterwards. Peer access is checked whole (every peer valid, distinct, able to
 * access the device) before anything changes, then swapped in under the driver's lock; set_access
 * reads it there.
 * Invariant: n_peers ≤ CUDA_MAX_PEERS and no peer is the driver's own device or listed twice.
 */
#include <string.h>

#include "driver/cuda_types.h"

dmm_status dmm_cuda_device_count(int *count) {
    if (count == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_cuda_device_count: count is NULL");
    *count = 0;
    if (!dmm__cu_ready()) return DMM_OK; /* no driver: zero devices */
    int n = 0;
    dmm_cu_result r = dmm__cu.cuDeviceGetCount(&n);
    if (r != DMM_CUDA_SUCCESS) return DMM_OK; /* a driver that cannot count has no usable device */
    *count = n;
    return DMM_OK;
}

/* Looks the device up: UNSUPPORTED without a driver or devices, INVALID_ARGUMENT for a bad ordinal. */
dmm_status dmm__cuda_find_device(const char *op, int ordinal, dmm_cu_device *dev) {
    dmm_status s = dmm__cu_require(op, ordinal);
    if (s != DMM_OK) return s;
    int n = 0;
    dmm_cu_result r = dmm__cu.cuDeviceGetCount(&n);
    if (r != DMM_CUDA_SUCCESS)
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s(ordinal=%d): no CUDA driver: cuDeviceGetCount failed with %s (%d): %s",
                             op, ordinal, dmm__cu_name(r), (int)r, dmm__cu_text(r));
    if (n == 0)
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s(ordinal=%d): no CUDA driver: the driver sees no CUDA device", op,
                             ordinal);
    if (ordinal < 0 || ordinal >= n)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s(ordinal=%d): there are %d CUDA device(s), 0 to %d", op,
                             ordinal, n, n - 1);
    r = dmm__cu.cuDeviceGet(dev, ordinal);
    if (r != DMM_CUDA_SUCCESS)
        return dmm_error_set(DMM_ERR_DRIVER, "%s(ordinal=%d): cuDeviceGet failed with %s (%d): %s", op, ordinal,
                             dmm__cu_name(r), (int)r, dmm__cu_text(r));
    return DMM_OK;
}

void dmm__cuda_device_prop(dmm_cu_device dev, dmm_cu_mem_allocation_prop *prop) {
    memset(prop, 0, sizeof *prop);
    prop->type = DMM_CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requested_handle_types = DMM_CU_MEM_HANDLE_TYPE_NONE;
    prop->location.type = DMM_CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = (int)dev;
}

/* VMM support and minimum granularity of a device (granule 0 without VMM). */
dmm_cu_result dmm__cuda_device_vmm(dmm_cu_device dev, bool *vmm, size_t *granule) {
    int attr = 0;
    *vmm = false;
    *granule = 0;
    dmm_cu_result r =
        dmm__cu.cuDeviceGetAttribute(&attr, DMM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    if (r != DMM_CUDA_SUCCESS || attr == 0) return r;
    dmm_cu_mem_allocation_prop prop;
    dmm__cuda_device_prop(dev, &prop);
    r = dmm__cu.cuMemGetAllocationGranularity(granule, &prop, DMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != DMM_CUDA_SUCCESS) return r;
    *vmm = *granule != 0;
    return DMM_CUDA_SUCCESS;
}

dmm_status dmm_cuda_device_query(int ordinal, dmm_cuda_device_info *out) {
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_cuda_device_query: out is NULL");
    const size_t least = offsetof(dmm_cuda_device_info, posix_fd_export); /* a caller from before that field */
    if (out->size < least)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_cuda_device_query: out->size is %u, at least %zu needed",
                             (unsigned)out->size, least);
    dmm_cu_device dev = 0;
    dmm_status s = dmm__cuda_find_device("dmm_cuda_device_query", ordinal, &dev);
    if (s != DMM_OK) return s;
    dmm_cuda_device_info info;
    memset(&info, 0, sizeof info);
    info.size = (uint32_t)sizeof info;
    info.ordinal = ordinal;
    info.driver_version = dmm__cu_driver_version();
    const char *step = "cuDeviceGetName";
    dmm_cu_result r = dmm__cu.cuDeviceGetName(info.name, (int)sizeof info.name, dev);
    int major = 0, minor = 0;
    if (r == DMM_CUDA_SUCCESS) {
        step = "cuDeviceGetAttribute(COMPUTE_CAPABILITY)";
        r = dmm__cu.cuDeviceGetAttribute(&major, DMM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        if (r == DMM_CUDA_SUCCESS)
            r = dmm__cu.cuDeviceGetAttribute(&minor, DMM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    }
    dmm_cu_context ctx = NULL;
    bool retained = false;
    if (r == DMM_CUDA_SUCCESS) {
        step = "cuDevicePrimaryCtxRetain";
        r = dmm__cu.cuDevicePrimaryCtxRetain(&ctx, dev);
        retained = r == DMM_CUDA_SUCCESS;
    }
    if (r == DMM_CUDA_SUCCESS) {
        step = "cuCtxSetCurrent";
        r = dmm__cu.cuCtxSetCurrent(ctx);
    }
    bool vmm = false;
    size_t granule = 0, f = 0, t = 0;
    if (r == DMM_CUDA_SUCCESS) {
        step = "VMM attribute / granularity";
        r = dmm__cuda_device_vmm(dev, &vmm, &granule);
    }
    int fd_export = 0;
    if (r == DMM_CUDA_SUCCESS) {
        step = "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)";
        r = dmm__cu.cuDeviceGetAttribute(&fd_export, DMM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                         dev);
    }
    if (r == DMM_CUDA_SUCCESS) {
        step = "cuMemGetInfo";
        r = dmm__cu.cuMemGetInfo(&f, &t);
    }
    if (retained) (void)dmm__cu.cuDevicePrimaryCtxRelease(dev);
    if (r != DMM_CUDA_SUCCESS)
        return dmm_error_set(dmm__cu_sticky(r) ? DMM_ERR_DEVICE_LOST : DMM_ERR_DRIVER,
                             "dmm_cuda_device_query(ordinal=%d): %s failed with %s (%d): %s", ordinal, step,
                             dmm__cu_name(r), (int)r, dmm__cu_text(r));
    info.compute_major = major;
    info.compute_minor = minor;
    info.vmm_supported = vmm;
    info.granularity = granule;
    info.free_bytes = f;
    info.total_bytes = t;
    info.posix_fd_export = fd_export != 0;
    uint32_t size = out->size;
    memcpy(out, &info, size < sizeof info ? size : sizeof info); /* what the caller's struct has room for */
    out->size = size;
    return DMM_OK;
}

dmm_status dmm_cuda_driver_set_peer_access(dmm_driver *cuda, const int *peers, size_t n) {
    if (cuda == NULL || (cuda->ops != &dmm__cuda_ops_vmm && cuda->ops != &dmm__cuda_ops_eager))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_cuda_driver_set_peer_access: the driver is %s, not a cuda driver",
                             cuda == NULL ? "NULL" : cuda->ops != NULL && cuda->ops->name != NULL ? cuda->ops->name : "?");
    cuda_driver *c = as_cuda(cuda);
    if ((n != 0 && peers == NULL) || n > CUDA_MAX_PEERS)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_cuda_driver_set_peer_access(device %d, n=%zu): peers is NULL or more than %d",
                             (int)c->base.device.index, n, CUDA_MAX_PEERS);
    if (!c->vmm)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_cuda_driver_set_peer_access(device %d): the device has no VMM, so access is not "
                             "set per mapping",
                             (int)c->base.device.index);
    if (dmm__cuda_is_lost(c))
        return dmm__cuda_lost_error(c, "dmm_cuda_driver_set_peer_access");
    int count = 0;
    (void)dmm_cuda_device_count(&count);
    for (size_t i = 0; i < n; i++) {
        if (peers[i] < 0 || peers[i] >= count || peers[i] == (int)c->base.device.index)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "dmm_cuda_driver_set_peer_access(device %d): peer %d is not another device "
                                 "(there are %d); nothing changed",
                                 (int)c->base.device.index, peers[i], count);
        for (size_t j = 0; j < i; j++)
            if (peers[j] == peers[i])
                return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                     "dmm_cuda_driver_set_peer_access(device %d): peer %d listed twice; nothing "
                                     "changed",
                                     (int)c->base.device.index, peers[i]);
        dmm_cu_device pd = 0;
        int can = 0;
        dmm_cu_result r = dmm__cu.cuDeviceGet(&pd, peers[i]);
        if (r == DMM_CUDA_SUCCESS) r = dmm__cu.cuDeviceCanAccessPeer(&can, pd, c->dev);
        if (r != DMM_CUDA_SUCCESS)
            return dmm__cuda_fail(c, r, "cuDeviceCanAccessPeer", "device %d from peer %d", (int)c->dev, peers[i]);
        if (!can)
            return dmm_error_set(DMM_ERR_UNSUPPORTED,
                                 "dmm_cuda_driver_set_peer_access(device %d): device %d cannot access its memory "
                                 "(cuDeviceCanAccessPeer = 0); nothing changed",
                                 (int)c->base.device.index, peers[i]);
    }
    dmm_lock_acquire(&c->lock);
    for (size_t i = 0; i < n; i++) c->peers[i] = peers[i];
    c->n_peers = n;
    dmm_lock_release(&c->lock);
    return DMM_OK;
}
