/* SPDX-License-Identifier: Apache-2.0 */
/* src/kv/preempt.c — preemption of a KV arena's request (contract: include/dmm/kv.h, dmm_kv_offload
 * and dmm_kv_restore; docs/kv.md, "Preemption"): its own granules to host memory and back, at the same
 * addresses.
 *
 * Idea: a request's own bytes are one contiguous range, [shared, backed): one copy to host memory the
 * governor charges to the host tier by hand (dmm_lease_grow / _shrink on the arena's host lease),
 * waited for, then one decommit; restore backs the same range again (from the reserve where it can),
 * copies back, waits, and gives the host memory back. A request whose granules back a prefix that
 * other requests map is not moved.
 *
 * With zero_tail the zeros go where the request's own granules went (offload, a failed restore) and
 * leave where they come back (restore, through dmm__kv_back_to).
 *
 * Release contract: a decommit the driver refused leaves the granules mapped and their contents
 * there (offload fails, nothing changed); a host free the driver refused keeps the copy charged, in
 * the arena's `stuck` list for destroy.
 */
#include <stdio.h>

#include "kv/kv_internal.h"

void dmm__kv_host_drop(dmm_kv *kv, dmm_kv_request *r) {
    if (r->host == NULL) return;
    void *host = r->host;
    uint64_t bytes = r->host_bytes;
    pthread_mutex_lock(&kv->lock);
    r->host = NULL;
    r->host_bytes = 0;
    kv->noffloaded--;
    pthread_mutex_unlock(&kv->lock);
    if (dmm__drv_host_free(kv->drv, host) != DMM_OK) { /* the driver holds it still: so does the charge */
        dmm__kv_keep_host(kv, host, bytes);
        return;
    }
    (void)dmm_lease_shrink(kv->gov, kv->host_lease, bytes, 0);
    pthread_mutex_lock(&kv->lock);
    kv->host_bytes -= bytes;
    pthread_mutex_unlock(&kv->lock);
}

/* Whether r is open, offloaded as `want_offloaded` says, and lends no granule to a prefix. */
static dmm_status check_movable(dmm_kv *kv, const char *op, const dmm_kv_request *r, bool want_offloaded) {
    pthread_mutex_lock(&kv->lock);
    bool open = dmm__kv_request_open_locked(kv, r), away = open && r->host != NULL;
    uint64_t lent = open ? r->lent : 0;
    pthread_mutex_unlock(&kv->lock);
    if (!open) return dmm__kv_unknown_request(op, r);
    if (away != want_offloaded)
        return dmm_error_set(DMM_ERR_BUSY, "%s: request %p is %s; nothing changed", op, (const void *)r,
                             away ? "offloaded already (restore it first)" : "resident (nothing to restore)");
    if (lent > 0)
        return dmm_error_set(DMM_ERR_BUSY, "%s: request %p holds the memory of a prefix (%llu bytes), which other "
                             "requests may map; release the prefix first; nothing changed",
                             op, (const void *)r, (unsigned long long)lent);
    return DMM_OK;
}

dmm_status dmm_kv_offload(dmm_kv *kv, dmm_kv_request *r, dmm_stream stream) {
    const char *op = "dmm_kv_offload";
    if (kv == NULL || r == NULL) return dmm__kv_null(op, "an arena and a request");
    if (!dmm__drv_can_host_alloc(kv->drv))
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s: driver '%s' has no host memory for copies (its host_alloc "
                             "slot); nothing changed", op, kv->drv->ops->name);
    dmm_status s = check_movable(kv, op, r, false);
    if (s != DMM_OK) return s;
    uint64_t bytes = r->backed - r->shared;
    if (bytes == 0) return dmm__kv_zero_fill(kv, r); /* nothing of its own (a hole an earlier call left: filled) */
    s = dmm_lease_grow(kv->gov, kv->host_lease, bytes, 0);
    if (s != DMM_OK) {
        dmm__kv_refused(kv, s);
        return dmm__error_wrap(s, "%s: no room on the host tier for the %llu bytes of request %p; it stays on the "
                               "device", op, (unsigned long long)bytes, (void *)r);
    }
    void *host = NULL;
    s = dmm__drv_host_alloc(kv->drv, (size_t)bytes, &host);
    if (s == DMM_OK) s = dmm__kv_copy_and_wait(kv, (uintptr_t)host, (uintptr_t)r->a.ptr + r->shared, bytes, stream);
    dmm_release_outcome o = {.state = DMM_RELEASE_FAILED, .failure = s};
    if (s == DMM_OK) o = dmm_mechanism_decommit(kv->arena, &r->a, (dmm_range){(size_t)r->shared, (size_t)bytes});
    if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) { /* the request keeps its memory and contents */
        dmm_error_kept why = {0};
        dmm__error_wrap(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER, "%s: request %p stays on the device",
                        op, (void *)r);
        dmm__error_keep(&why, dmm_last_status());
        if (host != NULL && dmm__drv_host_free(kv->drv, host) != DMM_OK) {
            pthread_mutex_lock(&kv->lock);
            kv->host_bytes += bytes; /* still held: charged, kept for destroy */
            pthread_mutex_unlock(&kv->lock);
            dmm__kv_keep_host(kv, host, bytes);
        } else {
            (void)dmm_lease_shrink(kv->gov, kv->host_lease, bytes, 0);
        }
        return dmm__error_restore(&why);
    }
    /* COMPLETE, or QUARANTINED (a granule could not be given back: it stays charged, never reused) */
    pthread_mutex_lock(&kv->lock);
    r->host = host;
    r->host_bytes = bytes;
    r->backed = r->shared;
    kv->host_bytes += bytes;
    kv->noffloaded++;
    pthread_mutex_unlock(&kv->lock);
    char quarantined[128] = "";
    if (dmm_release_state_of(&o) != DMM_RELEASE_COMPLETE)
        snprintf(quarantined, sizeof quarantined, "; %llu bytes of its granules could not be given back (quarantined, "
                 "never reused)", (unsigned long long)o.residual_owned_bytes);
    if (dmm__kv_zero_fill(kv, r) != DMM_OK)
        return dmm__error_wrap(dmm_last_status(), "%s: request %p is offloaded (its host copy holds its tokens)%s, but "
                               "not all of its range reads zeros (restore maps them)", op, (void *)r, quarantined);
    if (quarantined[0] == '\0') return DMM_OK;
    return dmm_error_set(DMM_ERR_QUARANTINED, "%s: request %p is offloaded%s", op, (void *)r, quarantined);
}

dmm_status dmm_kv_restore(dmm_kv *kv, dmm_kv_request *r, dmm_stream stream) {
    const char *op = "dmm_kv_restore";
    if (kv == NULL || r == NULL) return dmm__kv_null(op, "an arena and a request");
    dmm_status s = check_movable(kv, op, r, true);
    if (s != DMM_OK) return s;
    uint64_t bytes = r->host_bytes;
    s = dmm__kv_back_to(kv, r, r->shared + bytes);
    if (s == DMM_OK) s = dmm__kv_copy_and_wait(kv, (uintptr_t)r->a.ptr + r->shared, (uintptr_t)r->host, bytes, stream);
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_wrap(s, "%s: request %p stays offloaded (its host copy kept)", op, (void *)r);
        dmm__error_keep(&why, s);
        if (r->backed > r->shared) { /* what this call backed goes back; where the driver refuses, it stays */
            dmm_release_outcome o =
                dmm_mechanism_decommit(kv->arena, &r->a, (dmm_range){(size_t)r->shared, (size_t)(r->backed - r->shared)});
            if (dmm_release_state_of(&o) != DMM_RELEASE_FAILED) {
                pthread_mutex_lock(&kv->lock);
                r->backed = r->shared;
                pthread_mutex_unlock(&kv->lock);
            }
        }
        bool hole = dmm__kv_zero_fill(kv, r) != DMM_OK;
        s = dmm__error_restore(&why);
        if (hole)
            s = dmm__error_wrap(s, "(and zeros could not be mapped back over %llu bytes of its range: reading them "
                                "faults)", (unsigned long long)(r->zero_from - r->backed));
        return s;
    }
    dmm__kv_host_drop(kv, r);
    return DMM_OK;
}
