/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/imports.c — memory shared with another process: regions of a holder (dmm hold) or of a
 * sender (torch.multiprocessing) mapped into this device's arena, for tensors over them
 * (dmm.torch.attach, dmm._share), and this device's pool blocks exported to others.
 *
 * What it owns: the list of this context's imports (dmm/share.h's dmm_import into c->arena), under
 * dev.lock. The arena charges an import's MAPPED bytes only (the exporter owns the memory: its
 * governor counts it once); its release is honest like any other (dmm_release_outcome), after the
 * device's queued work, and the physical memory stays with the exporter. An export is the pool's
 * (dmm_pool_export_block): this file only names what is not a pool block.
 *
 * Invariants (dev.lock): every entry is a live import of c->arena, listed once; an entry is out of the
 * list only while one unimport releases it (no driver call under the lock), and goes back only when
 * that release FAILED (nothing changed); COMPLETE and QUARANTINED ones are gone (the arena forgets a
 * quarantined allocation: its range is never handed out again).
 */
#include <stdlib.h>

#include "context.h"
#include "driver/call.h"
#include "imports.h"

struct device_import {
    dmm_allocation a;
    struct device_import *next;
};

dmm_status dmm_device_export(dmm_device *c, const void *ptr, bool writable, dmm_export *out, uint64_t *lead) {
    if (c == NULL || ptr == NULL || out == NULL || lead == NULL)
        return dmm__device_null("dmm_device_export", "a device, a block, an export and an output offset");
    dmm_access access = writable ? DMM_ACCESS_READ_WRITE : DMM_ACCESS_READ;
    dmm_status s = dmm_pool_export_block(c->pool, ptr, access, out, lead);
    if (s != DMM_ERR_UNKNOWN_ALLOCATION)
        return s == DMM_OK ? s
                           : dmm__error_wrap(s, "dmm device: exporting the block at %p of device %d%s", ptr,
                                             (int)c->dev.index,
                                             c->exportable ? "" : " (a device not created exportable: set "
                                                                  "dmm_device_config.exportable)");
    return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm device: %p is not a live pool block of device %d (tag and "
                                                     "graph memory is not exported: allocate what you send outside tag "
                                                     "scopes and captures); nothing was exported",
                         ptr, (int)c->dev.index);
}

dmm_status dmm_device_import(dmm_device *c, const dmm_export *ex, bool writable, void **ptr) {
    if (c == NULL || ex == NULL || ptr == NULL) return dmm__device_null("dmm_device_import", "a device, an export and an output pointer");
    device_import *im = calloc(1, sizeof *im);
    if (im == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for an import on device %d",
                             (int)c->dev.index);
    dmm_status s = dmm_import(c->arena, ex, writable ? DMM_ACCESS_READ_WRITE : DMM_ACCESS_READ, &im->a);
    if (s != DMM_OK) {
        free(im);
        return s;
    }
    pthread_mutex_lock(&c->lock);
    im->next = c->imports;
    c->imports = im;
    pthread_mutex_unlock(&c->lock);
    *ptr = im->a.ptr;
    return DMM_OK;
}

dmm_status dmm_device_unimport(dmm_device *c, void *ptr) {
    if (c == NULL) return dmm__device_null("dmm_device_unimport", "a device");
    /* taken out of the list under the lock, released without it (the unmap is a driver call), put back
     * when the release did not complete: a racing unimport of the same region finds nothing */
    pthread_mutex_lock(&c->lock);
    device_import **at = &c->imports;
    while (*at != NULL && (*at)->a.ptr != ptr) at = &(*at)->next;
    device_import *im = *at;
    if (im != NULL) *at = im->next;
    pthread_mutex_unlock(&c->lock);
    if (im == NULL)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm device: %p is not the address of a region this "
                             "process attached on device %d; nothing changed", ptr, (int)c->dev.index);
    /* work queued on any stream may still read the region (a tensor freed right after its kernel was
     * launched): the device's queued work first, where the driver can wait for all of it */
    if (dmm__drv_device_synchronize(c->drv) != DMM_OK) dmm_clear_error(); /* (a driver without it: at once) */
    dmm_release_outcome o = dmm_mechanism_release(c->arena, &im->a);
    dmm_release_state st = dmm_release_state_of(&o);
    if (st == DMM_RELEASE_QUARANTINED) { /* the arena let go of the record: nothing left to detach */
        free(im);
        return dmm_error_set(DMM_ERR_QUARANTINED,
                             "dmm device: detaching the region at %p on device %d: its release was QUARANTINED "
                             "(%s): what could not be unmapped stays accounted and that range is never handed out "
                             "again; the region is detached",
                             ptr, (int)c->dev.index, dmm_status_str(o.failure));
    }
    if (st == DMM_RELEASE_COMPLETE) {
        free(im);
        return DMM_OK;
    }
    pthread_mutex_lock(&c->lock); /* FAILED: nothing changed, the region is attached as before */
    im->next = c->imports;
    c->imports = im;
    pthread_mutex_unlock(&c->lock);
    return dmm_error_set(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER,
                         "dmm device: detaching the region at %p on device %d failed (%s); nothing changed: detach "
                         "again",
                         ptr, (int)c->dev.index, dmm_status_str(o.failure));
}

size_t dmm__device_imports_fini(dmm_device *c) {
    size_t kept = 0;
    device_import **at = &c->imports;
    while (*at != NULL) {
        device_import *im = *at;
        dmm_release_outcome o = dmm_mechanism_release(c->arena, &im->a);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) { /* still mapped: kept, the destroy stops */
            dmm_clear_error();
            at = &im->next;
            kept++;
            continue;
        }
        *at = im->next;
        free(im);
    }
    return kept;
}

void dmm__device_imports_drop_lost(dmm_device *c) {
    while (c->imports != NULL) {
        device_import *im = c->imports;
        c->imports = im->next;
        free(im); /* the arena's confirmation discharged its mapping */
    }
}
