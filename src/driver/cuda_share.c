/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda_share.c — the `cuda` driver's sharing ops: handles created for export, exported
 * as POSIX file descriptors and imported from them (cuMemCreate with requestedHandleTypes = POSIX
 * file descriptor, cuMemExportToShareableHandle, cuMemImportFromShareableHandle).
 *
 * The idea: an exported handle is an ordinary handle of this driver (its record in `handles`, mapped,
 * unmapped and released by cuda_memory.c); an imported one is too, and is also noted in `imported`
 * so that the census says which handles hold another process's memory (cuda_memory.c's release drops
 * the note: this file stands above that one, using its create path). CUDA keeps the physical
 * memory alive while any process holds a handle or a mapping of it, so a release here drops this
 * process's reference only.
 *
 * Trade-off: the descriptor carries no access (CUDA has no read-only export): an importer's
 * read-only mapping is its own cuMemSetAccess(PROT_READ), a protection against mistakes, not against
 * a hostile process of the same user (docs/ipc.md, threat model).
 *
 * Invariant (under the driver's lock): imported ⊆ handles (by key); census.imported_handles =
 * |imported|, census.imported_bytes = Σ their bytes. Untested on this machine (no GPU): the GPU test
 * tests/gpu/test_cuda_ipc.c runs it on a real device.
 */
#include <unistd.h>

#include "driver/cuda_types.h"

dmm_status dmm__cuda_create_exportable(dmm_driver *d, size_t bytes, dmm_phys *handle) {
    cuda_driver *c = as_cuda(d);
    dmm_cu_mem_allocation_prop prop = c->prop;
    prop.requested_handle_types = DMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return dmm__cuda_create_with(c, "create_exportable", bytes, &prop,
                                 "pinned device memory exportable as a POSIX file descriptor", handle);
}

dmm_status dmm__cuda_export(dmm_driver *d, dmm_phys handle, dmm_access access, int *fd) {
    cuda_driver *c = as_cuda(d);
    uint64_t bytes = 0;
    if (fd == NULL || (access != DMM_ACCESS_READ && access != DMM_ACCESS_READ_WRITE))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda export(handle=0x%llx): access must be READ or READ_WRITE (got %d) and fd not NULL",
                             (unsigned long long)handle, (int)access);
    dmm_lock_acquire(&c->lock);
    bool known = dmm__u64map_find(&c->handles, handle, &bytes);
    dmm_lock_release(&c->lock);
    if (!known)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda export(handle=0x%llx): not a live handle of this driver; nothing was done",
                             (unsigned long long)handle);
    dmm_status s = dmm__cuda_enter(c, "cuMemExportToShareableHandle");
    if (s != DMM_OK) return s;
    int out = -1;
    dmm_cu_result r = dmm__cu.cuMemExportToShareableHandle(&out, (dmm_cu_mem_handle)handle,
                                                           DMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r == DMM_CUDA_ERROR_NOT_SUPPORTED || r == 1 /* CUDA_ERROR_INVALID_VALUE */)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "cuda export(handle=0x%llx, %llu bytes): cuMemExportToShareableHandle refused (%s, %d): "
                             "the handle was not created exportable; create the arena with exportable = true",
                             (unsigned long long)handle, (unsigned long long)bytes, dmm__cu_name(r), (int)r);
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemExportToShareableHandle", "handle=0x%llx, %llu bytes",
                              (unsigned long long)handle, (unsigned long long)bytes);
    *fd = out;
    return DMM_OK;
}

dmm_status dmm__cuda_import(dmm_driver *d, int fd, size_t bytes, dmm_access access, dmm_phys *handle) {
    cuda_driver *c = as_cuda(d);
    if (handle == NULL || fd < 0 || bytes == 0 || bytes % c->granule != 0 ||
        (access != DMM_ACCESS_READ && access != DMM_ACCESS_READ_WRITE))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda import(fd=%d, bytes=%zu, access=%d): the descriptor must be valid, the size a "
                             "non-zero multiple of the granularity %zu, the access READ or READ_WRITE",
                             fd, bytes, (int)access, c->granule);
    dmm_status s = dmm__cuda_enter(c, "cuMemImportFromShareableHandle");
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&c->lock);
    bool room = dmm__u64map_reserve(&c->handles, 1) && dmm__u64map_reserve(&c->imported, 1);
    dmm_lock_release(&c->lock);
    if (!room) return dmm__cuda_no_memory(c, "cuMemImportFromShareableHandle");
    dmm_cu_mem_handle h = 0;
    dmm_cu_result r = dmm__cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                                             DMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    dmm_lock_acquire(&c->lock);
    if (r == DMM_CUDA_SUCCESS) {
        dmm__u64map_insert_reserved(&c->handles, (uint64_t)h, bytes);
        dmm__u64map_insert_reserved(&c->imported, (uint64_t)h, bytes);
        c->census.handles++;
        c->census.handle_bytes += bytes;
        c->census.imported_handles++;
        c->census.imported_bytes += bytes;
    } else {
        dmm__u64map_unreserve(&c->handles, 1);
        dmm__u64map_unreserve(&c->imported, 1);
    }
    dmm_lock_release(&c->lock);
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemImportFromShareableHandle", "fd=%d, %zu bytes", fd, bytes);
    *handle = (dmm_phys)h;
    return DMM_OK;
}
