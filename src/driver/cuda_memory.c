/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda_memory.c — the `cuda` driver's ops that hand out memory: VMM (reserve, create,
 * map, set_access and their undoing) and eager cuMemAlloc/cuMemFree, each kept in the driver's own
 * records (dmm_u64map, under the driver's lock; the invariants are in cuda.c).
 *
 * The idea: the records let the driver refuse what CUDA would either reject late or silently accept
 * (unmapping two mappings at once, releasing a handle that is still mapped, giving back a reservation
 * with mappings inside, freeing a stale pointer), and give the census and the byte count a handle
 * release needs. The trade-off: one short lock per op (never held across a CUDA call), paid on the
 * slow path only.
 *
 * Invariant of every op here: a record's slot is promised (dmm__u64map_reserve or _take) before the
 * CUDA call, so no bookkeeping step after the call can fail; a record is added only after its call
 * succeeded and is taken out before the undoing call (CUDA may hand the same VA or handle value to
 * another thread the moment that call returns), and put back if the call failed.
 */
#include "driver/cuda_types.h"

/* Whether any key lies in [lo, hi). O(capacity): for rare calls only. */
static bool any_key_in(const dmm_u64map *m, uint64_t lo, uint64_t hi) {
    uint64_t key;
    for (size_t at = 0; dmm__u64map_next(m, &at, &key, NULL);)
        if (key >= lo && key < hi) return true;
    return false;
}

dmm_status dmm__cuda_granularity(dmm_driver *d, size_t *bytes) {
    cuda_driver *c = as_cuda(d);
    if (bytes == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda granularity: bytes is NULL");
    if (dmm__cuda_is_lost(c)) return dmm__cuda_lost_error(c, "granularity");
    *bytes = c->granule;
    return DMM_OK;
}

static bool granular(const cuda_driver *c, uint64_t x) { return x % c->granule == 0; }

/* The alignment of a reservation made with align = 0: the largest power of two ≤ bytes, capped at
 * 1 GiB, and at least the granularity (which is all the contract promises). VA costs nothing, and a
 * large handle mapped at a VA aligned to its size grows faster: on the H200, a 1 GiB handle right
 * after an equal release took 100 µs (create+map+access) at a 1 GiB-aligned VA and 138 µs at 32 MiB
 * past a 1 GiB boundary (bench_growth, the same run; the arena's own allocation: 92 vs 147 µs). */
#define CUDA_RESERVE_ALIGN_MAX ((size_t)1 << 30)

static size_t default_align(const cuda_driver *c, size_t bytes) {
    size_t a = c->granule;
    while (a < CUDA_RESERVE_ALIGN_MAX && a * 2 <= bytes) a *= 2;
    return a;
}

dmm_status dmm__cuda_reserve(dmm_driver *d, size_t bytes, size_t align, uintptr_t *va) {
    cuda_driver *c = as_cuda(d);
    if (va == NULL || bytes == 0 || !granular(c, bytes) || (align != 0 && (!dmm_is_pow2(align))))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda reserve(bytes=%zu, align=%zu): bytes must be a non-zero multiple of the "
                             "granularity %zu, align 0 or a power of two, va not NULL",
                             bytes, align, c->granule);
    dmm_status s = dmm__cuda_enter(c, "cuMemAddressReserve");
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&c->lock);
    bool room = dmm__u64map_reserve(&c->reservations, 1);
    dmm_lock_release(&c->lock);
    if (!room) return dmm__cuda_no_memory(c, "cuMemAddressReserve");
    dmm_cu_deviceptr p = 0;
    if (align == 0) align = default_align(c, bytes);
    dmm_cu_result r = dmm__cu.cuMemAddressReserve(&p, bytes, align, 0, 0);
    dmm_lock_acquire(&c->lock);
    if (r == DMM_CUDA_SUCCESS) {
        dmm__u64map_insert_reserved(&c->reservations, (uint64_t)p, bytes);
        c->census.reserved_bytes += bytes;
    } else {
        dmm__u64map_unreserve(&c->reservations, 1);
    }
    dmm_lock_release(&c->lock);
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemAddressReserve", "bytes=%zu, align=%zu", bytes, align);
    *va = (uintptr_t)p;
    return DMM_OK;
}

dmm_status dmm__cuda_unreserve(dmm_driver *d, uintptr_t va, size_t bytes) {
    cuda_driver *c = as_cuda(d);
    uint64_t have = 0;
    dmm_lock_acquire(&c->lock);
    bool known = dmm__u64map_find(&c->reservations, va, &have);
    bool busy = known && have == bytes && any_key_in(&c->mappings, va, (uint64_t)va + bytes);
    bool taken = known && have == bytes && !busy && dmm__u64map_take(&c->reservations, va, &have);
    dmm_lock_release(&c->lock);
    if (!taken)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda unreserve(va=0x%llx, bytes=%zu): %s; nothing was done",
                             (unsigned long long)va, bytes,
                             !known ? "no reservation starts there"
                             : busy ? "mappings remain inside it: unmap them first"
                                    : "the bytes differ from the reservation's");
    dmm_status s = dmm__cuda_enter(c, "cuMemAddressFree");
    dmm_cu_result r = s == DMM_OK ? dmm__cu.cuMemAddressFree((dmm_cu_deviceptr)va, bytes) : DMM_CUDA_SUCCESS;
    dmm_lock_acquire(&c->lock);
    if (s == DMM_OK && r == DMM_CUDA_SUCCESS) {
        dmm__u64map_unreserve(&c->reservations, 1);
        c->census.reserved_bytes -= bytes;
    } else {
        dmm__u64map_insert_reserved(&c->reservations, va, have); /* still reserved: the record comes back */
    }
    dmm_lock_release(&c->lock);
    if (s != DMM_OK) return s;
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemAddressFree", "va=0x%llx, bytes=%zu", (unsigned long long)va, bytes);
    return DMM_OK;
}

dmm_status dmm__cuda_create_with(cuda_driver *c, const char *op, size_t bytes, const dmm_cu_mem_allocation_prop *prop,
                                 const char *what, dmm_phys *handle) {
    if (handle == NULL || bytes == 0 || !granular(c, bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda %s(bytes=%zu): bytes must be a non-zero multiple of the granularity %zu "
                             "and handle not NULL",
                             op, bytes, c->granule);
    dmm_status s = dmm__cuda_enter(c, "cuMemCreate");
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&c->lock);
    bool room = dmm__u64map_reserve(&c->handles, 1);
    dmm_lock_release(&c->lock);
    if (!room) return dmm__cuda_no_memory(c, "cuMemCreate");
    dmm_cu_mem_handle h = 0;
    dmm_cu_result r = dmm__cu.cuMemCreate(&h, bytes, prop, 0);
    dmm_lock_acquire(&c->lock);
    if (r == DMM_CUDA_SUCCESS) {
        dmm__u64map_insert_reserved(&c->handles, (uint64_t)h, bytes);
        c->census.handles++;
        c->census.handle_bytes += bytes;
    } else {
        dmm__u64map_unreserve(&c->handles, 1);
    }
    dmm_lock_release(&c->lock);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuMemCreate", "bytes=%zu, %s", bytes, what);
    *handle = (dmm_phys)h;
    return DMM_OK;
}

dmm_status dmm__cuda_create(dmm_driver *d, size_t bytes, dmm_phys *handle) {
    cuda_driver *c = as_cuda(d);
    return dmm__cuda_create_with(c, "create", bytes, &c->prop, "pinned device memory", handle);
}

/* After a successful release of `handle`: drops its import note (cuda_share.c), if any (under the lock). */
static void forget_import(cuda_driver *c, dmm_phys handle, uint64_t bytes) {
    uint64_t v = 0;
    if (dmm__u64map_remove(&c->imported, handle, &v)) {
        c->census.imported_handles--;
        c->census.imported_bytes -= bytes;
    }
}

dmm_status dmm__cuda_release(dmm_driver *d, dmm_phys handle) {
    cuda_driver *c = as_cuda(d);
    uint64_t bytes = 0, maps = 0;
    dmm_lock_acquire(&c->lock);
    bool known = dmm__u64map_find(&c->handles, handle, &bytes);
    (void)dmm__u64map_find(&c->map_count, handle, &maps);
    bool taken = known && maps == 0 && dmm__u64map_take(&c->handles, handle, &bytes);
    dmm_lock_release(&c->lock);
    if (!known)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda release(handle=0x%llx): not a live handle of this driver; nothing was done",
                             (unsigned long long)handle);
    if (!taken)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda release(handle=0x%llx): the handle is still mapped %llu time(s); unmap it first; "
                             "nothing was done",
                             (unsigned long long)handle, (unsigned long long)maps);
    dmm_status s = dmm__cuda_enter(c, "cuMemRelease");
    dmm_cu_result r = s == DMM_OK ? dmm__cu.cuMemRelease((dmm_cu_mem_handle)handle) : DMM_CUDA_SUCCESS;
    dmm_lock_acquire(&c->lock);
    if (s == DMM_OK && r == DMM_CUDA_SUCCESS) {
        dmm__u64map_unreserve(&c->handles, 1);
        c->census.handles--;
        c->census.handle_bytes -= bytes;
        forget_import(c, handle, bytes);
    } else {
        dmm__u64map_insert_reserved(&c->handles, handle, bytes);
    }
    dmm_lock_release(&c->lock);
    if (s != DMM_OK) return s;
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemRelease", "handle=0x%llx, bytes=%llu", (unsigned long long)handle,
                       (unsigned long long)bytes);
    return DMM_OK;
}

dmm_status dmm__cuda_map(dmm_driver *d, uintptr_t va, size_t bytes, dmm_phys handle) {
    cuda_driver *c = as_cuda(d);
    uint64_t hbytes = 0;
    dmm_lock_acquire(&c->lock);
    bool known = dmm__u64map_find(&c->handles, handle, &hbytes);
    bool room = known && hbytes == bytes && va != 0 && dmm__u64map_reserve(&c->mappings, 1);
    if (room && !dmm__u64map_reserve(&c->map_count, 1)) {
        dmm__u64map_unreserve(&c->mappings, 1);
        room = false;
    }
    dmm_lock_release(&c->lock);
    if (!known || hbytes != bytes || va == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda map(va=0x%llx, bytes=%zu, handle=0x%llx): %s; nothing was done",
                             (unsigned long long)va, bytes, (unsigned long long)handle,
                             !known ? "not a live handle of this driver"
                             : va == 0 ? "va is 0"
                                       : "bytes must equal the handle's size");
    if (!room) return dmm__cuda_no_memory(c, "cuMemMap");
    dmm_status s = dmm__cuda_enter(c, "cuMemMap");
    if (s != DMM_OK) {
        dmm_lock_acquire(&c->lock);
        dmm__u64map_unreserve(&c->mappings, 1);
        dmm__u64map_unreserve(&c->map_count, 1);
        dmm_lock_release(&c->lock);
        return s;
    }
    dmm_cu_result r = dmm__cu.cuMemMap((dmm_cu_deviceptr)va, bytes, 0, (dmm_cu_mem_handle)handle, 0);
    dmm_lock_acquire(&c->lock);
    if (r == DMM_CUDA_SUCCESS) {
        uint64_t n = 0;
        (void)dmm__u64map_find(&c->map_count, handle, &n);
        dmm__u64map_insert_reserved(&c->mappings, va, handle);
        dmm__u64map_insert_reserved(&c->map_count, handle, n + 1);
        c->census.mapped_bytes += bytes;
    } else {
        dmm__u64map_unreserve(&c->mappings, 1);
        dmm__u64map_unreserve(&c->map_count, 1);
    }
    dmm_lock_release(&c->lock);
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemMap", "va=0x%llx, bytes=%zu, offset=0, handle=0x%llx", (unsigned long long)va,
                       bytes, (unsigned long long)handle);
    return DMM_OK;
}

dmm_status dmm__cuda_unmap(dmm_driver *d, uintptr_t va, size_t bytes) {
    cuda_driver *c = as_cuda(d);
    uint64_t handle = 0, have = 0;
    dmm_lock_acquire(&c->lock);
    bool known = dmm__u64map_find(&c->mappings, va, &handle) && dmm__u64map_find(&c->handles, handle, &have);
    bool taken = known && have == bytes && dmm__u64map_take(&c->mappings, va, &handle);
    dmm_lock_release(&c->lock);
    if (!taken)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda unmap(va=0x%llx, bytes=%zu): %s; nothing was done", (unsigned long long)va,
                             bytes, known ? "bytes differ from the mapping's" : "no mapping starts there");
    dmm_status s = dmm__cuda_enter(c, "cuMemUnmap");
    dmm_cu_result r = s == DMM_OK ? dmm__cu.cuMemUnmap((dmm_cu_deviceptr)va, bytes) : DMM_CUDA_SUCCESS;
    dmm_lock_acquire(&c->lock);
    if (s == DMM_OK && r == DMM_CUDA_SUCCESS) {
        dmm__u64map_unreserve(&c->mappings, 1);
        c->census.mapped_bytes -= bytes;
        uint64_t n = 0;
        if (dmm__u64map_find(&c->map_count, handle, &n)) {
            if (n <= 1) (void)dmm__u64map_remove(&c->map_count, handle, NULL);
            else (void)dmm__u64map_set(&c->map_count, handle, n - 1);
        }
    } else {
        dmm__u64map_insert_reserved(&c->mappings, va, handle); /* still mapped */
    }
    dmm_lock_release(&c->lock);
    if (s != DMM_OK) return s;
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemUnmap", "va=0x%llx, bytes=%zu", (unsigned long long)va, bytes);
    return DMM_OK;
}

dmm_status dmm__cuda_set_access(dmm_driver *d, uintptr_t va, size_t bytes, dmm_access access) {
    cuda_driver *c = as_cuda(d);
    dmm_cu_mem_access_flags flags;
    switch (access) {
    case DMM_ACCESS_NONE: flags = DMM_CU_MEM_ACCESS_FLAGS_PROT_NONE; break;
    case DMM_ACCESS_READ: flags = DMM_CU_MEM_ACCESS_FLAGS_PROT_READ; break;
    case DMM_ACCESS_READ_WRITE: flags = DMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE; break;
    default:
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda set_access(va=0x%llx, bytes=%zu, access=%d): access must be NONE, READ or "
                             "READ_WRITE",
                             (unsigned long long)va, bytes, (int)access);
    }
    if (va == 0 || bytes == 0 || !granular(c, va) || !granular(c, bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda set_access(va=0x%llx, bytes=%zu): va and bytes must be non-zero multiples of "
                             "the granularity %zu",
                             (unsigned long long)va, bytes, c->granule);
    dmm_cu_mem_access_desc desc[1 + CUDA_MAX_PEERS];
    size_t n = 0;
    desc[n].location.type = DMM_CU_MEM_LOCATION_TYPE_DEVICE;
    desc[n].location.id = (int)c->dev;
    desc[n].flags = flags;
    n++;
    dmm_lock_acquire(&c->lock);
    for (size_t i = 0; i < c->n_peers; i++, n++) {
        desc[n].location.type = DMM_CU_MEM_LOCATION_TYPE_DEVICE;
        desc[n].location.id = c->peers[i];
        desc[n].flags = flags;
    }
    dmm_lock_release(&c->lock);
    dmm_status s = dmm__cuda_enter(c, "cuMemSetAccess");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuMemSetAccess((dmm_cu_deviceptr)va, bytes, desc, n);
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemSetAccess", "va=0x%llx, bytes=%zu, access=%s, device %d + %zu peer(s)",
                       (unsigned long long)va, bytes,
                       access == DMM_ACCESS_READ_WRITE ? "READ_WRITE" : access == DMM_ACCESS_READ ? "READ" : "NONE",
                       (int)c->dev, n - 1);
    return DMM_OK;
}

/* ---- eager memory ---------------------------------------------------------------------------- */

dmm_status dmm__cuda_alloc(dmm_driver *d, size_t bytes, uintptr_t *ptr) {
    cuda_driver *c = as_cuda(d);
    if (ptr == NULL || bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda alloc(bytes=%zu): bytes must be > 0 and ptr not NULL",
                             bytes);
    dmm_status s = dmm__cuda_enter(c, "cuMemAlloc");
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&c->lock);
    bool room = dmm__u64map_reserve(&c->eager, 1);
    dmm_lock_release(&c->lock);
    if (!room) return dmm__cuda_no_memory(c, "cuMemAlloc");
    dmm_cu_deviceptr p = 0;
    dmm_cu_result r = dmm__cu.cuMemAlloc(&p, bytes);
    dmm_lock_acquire(&c->lock);
    if (r == DMM_CUDA_SUCCESS) {
        dmm__u64map_insert_reserved(&c->eager, (uint64_t)p, bytes);
        c->census.eager_bytes += bytes;
    } else {
        dmm__u64map_unreserve(&c->eager, 1);
    }
    dmm_lock_release(&c->lock);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuMemAlloc", "bytes=%zu", bytes);
    *ptr = (uintptr_t)p;
    return DMM_OK;
}

dmm_status dmm__cuda_free(dmm_driver *d, uintptr_t ptr, size_t bytes) {
    cuda_driver *c = as_cuda(d);
    uint64_t have = 0;
    dmm_lock_acquire(&c->lock);
    bool known = dmm__u64map_find(&c->eager, ptr, &have);
    bool taken = known && have == bytes && dmm__u64map_take(&c->eager, ptr, &have);
    dmm_lock_release(&c->lock);
    if (!taken)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda free(ptr=0x%llx, bytes=%zu): %s; nothing was done",
                             (unsigned long long)ptr, bytes,
                             known ? "bytes differ from the allocation's" : "not a live allocation of this driver");
    dmm_status s = dmm__cuda_enter(c, "cuMemFree");
    dmm_cu_result r = s == DMM_OK ? dmm__cu.cuMemFree((dmm_cu_deviceptr)ptr) : DMM_CUDA_SUCCESS;
    dmm_lock_acquire(&c->lock);
    if (s == DMM_OK && r == DMM_CUDA_SUCCESS) {
        dmm__u64map_unreserve(&c->eager, 1);
        c->census.eager_bytes -= bytes;
    } else {
        dmm__u64map_insert_reserved(&c->eager, ptr, have);
    }
    dmm_lock_release(&c->lock);
    if (s != DMM_OK) return s;
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemFree", "ptr=0x%llx, bytes=%zu", (unsigned long long)ptr, bytes);
    return DMM_OK;
}

/* ---- pinned host memory (portable: usable with every context) ---- */
dmm_status dmm__cuda_host_alloc(dmm_driver *d, size_t bytes, void **out) {
    cuda_driver *c = as_cuda(d);
    if (out == NULL || bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda host_alloc(%zu bytes): needs bytes > 0 and an output "
                                                       "pointer", bytes);
    dmm_status s = dmm__cuda_enter(c, "cuMemHostAlloc");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuMemHostAlloc(out, bytes, DMM_CU_MEMHOSTALLOC_PORTABLE);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuMemHostAlloc", "bytes=%zu, flags=PORTABLE", bytes);
    return DMM_OK;
}

dmm_status dmm__cuda_host_free(dmm_driver *d, void *ptr) {
    cuda_driver *c = as_cuda(d);
    if (ptr == NULL) return DMM_OK;
    /* also after a loss (call.h: host memory goes back whether or not the device lives), so no enter */
    dmm_cu_result r = dmm__cu.cuCtxSetCurrent(c->ctx);
    if (r == DMM_CUDA_SUCCESS) r = dmm__cu.cuMemFreeHost(ptr);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuMemFreeHost", "ptr=%p", ptr);
    return DMM_OK;
}
