/* SPDX-License-Identifier: Apache-2.0 */
/* src/kv/granules.c — the bottom of the KV arena's files (kv_internal.h): what every operation does to
 * a request's granules and to what a failed release left. Backing a request (one commit at its end,
 * which wakes the refill thread when the reserve ran low), the zeros mapped where a request holds no
 * tokens (zero_tail: the arena's zero granule, made and given back here), one copy waited for,
 * keeping what a failed undo left for destroy, the refusal count, and the shared sentences.
 * prefixes.c, preempt.c and kv.c stand above it; it calls none of them.
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_internal.h"

uint64_t dmm__kv_round_up(uint64_t x, uint64_t g) { return (x + g - 1) / g * g; }

dmm_status dmm__kv_null(const char *op, const char *needs) {
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: needs %s (NULL given); nothing changed", op, needs);
}

dmm_status dmm__kv_unknown_request(const char *op, const dmm_kv_request *r) {
    return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "%s: %p is not an open request of this arena; nothing changed",
                         op, (const void *)r);
}

void dmm__kv_refused(dmm_kv *kv, dmm_status s) {
    if (s != DMM_ERR_BUDGET && s != DMM_ERR_OUT_OF_MEMORY) return;
    pthread_mutex_lock(&kv->lock);
    kv->refusals++;
    pthread_mutex_unlock(&kv->lock);
}

bool dmm__kv_request_open_locked(const dmm_kv *kv, const dmm_kv_request *r) {
    for (const dmm_kv_request *x = kv->requests; x != NULL; x = x->next)
        if (x == r) return true;
    return false;
}

/* ---- what a failed undo left ---- */
static void keep(dmm_kv *kv, const kv_stuck *k) {
    pthread_mutex_lock(&kv->lock);
    if (kv->nstuck == kv->stuck_cap) {
        size_t cap = kv->stuck_cap ? 2 * kv->stuck_cap : 8;
        kv_stuck *v = realloc(kv->stuck, cap * sizeof *v);
        if (v != NULL) {
            kv->stuck = v;
            kv->stuck_cap = cap;
        }
    }
    if (kv->nstuck < kv->stuck_cap) kv->stuck[kv->nstuck++] = *k; /* else: without host memory, forgotten */
    pthread_mutex_unlock(&kv->lock);
}

void dmm__kv_keep_allocation(dmm_kv *kv, const dmm_allocation *a) {
    kv_stuck k = {.kind = KV_STUCK_ALLOCATION, .a = *a};
    keep(kv, &k);
}

void dmm__kv_keep_prefix(dmm_kv *kv, const dmm_prefix *p) {
    kv_stuck k = {.kind = KV_STUCK_PREFIX, .p = *p};
    keep(kv, &k);
}

void dmm__kv_keep_host(dmm_kv *kv, void *host, uint64_t bytes) {
    kv_stuck k = {.kind = KV_STUCK_HOST, .host = host, .host_bytes = bytes};
    keep(kv, &k);
}

/* After growth: wakes the refill thread when the reserve fell to half or less. */
static void maybe_wake_refill(dmm_kv *kv) {
    if (!kv->has_thread) return;
    dmm_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (dmm_mechanism_stats(kv->arena, &st) != DMM_OK) {
        dmm_clear_error();
        return;
    }
    if ((uint64_t)st.cached_bytes.current * 2 > kv->reserve_bytes) return;
    pthread_mutex_lock(&kv->lock);
    kv->wanted = true;
    pthread_cond_signal(&kv->wake);
    pthread_mutex_unlock(&kv->lock);
}

/* ---- the zeros where a request holds no tokens (zero_tail) ---- */
dmm_status dmm__kv_zero_make(dmm_kv *kv) {
    if (!dmm__drv_can_host_alloc(kv->drv))
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "DMM_KV_ZERO_TAIL needs host memory to fill its granule of zeros "
                             "from, and driver '%s' has none (its host_alloc slot); create the arena without "
                             "DMM_KV_ZERO_TAIL", kv->drv->ops->name);
    dmm_range all = {0, (size_t)kv->granule};
    dmm_status s = dmm_mechanism_allocate_committed(kv->arena, (size_t)kv->granule, (size_t)kv->granule, &all, 1,
                                                    &kv->zero_owner);
    if (s != DMM_OK) return dmm__error_wrap(s, "making the granule of zeros");
    kv->has_zero_owner = true;
    s = dmm_lease_grow(kv->gov, kv->host_lease, kv->granule, 0); /* the zeros copied from, for one copy */
    if (s != DMM_OK) return dmm__error_wrap(s, "no room on the host tier for the %llu bytes the zeros are copied from",
                                            (unsigned long long)kv->granule);
    void *host = NULL;
    s = dmm__drv_host_alloc(kv->drv, (size_t)kv->granule, &host);
    if (s == DMM_OK) {
        memset(host, 0, (size_t)kv->granule);
        s = dmm__kv_copy_and_wait(kv, (uintptr_t)kv->zero_owner.ptr, (uintptr_t)host, kv->granule, NULL);
    }
    if (host != NULL && dmm__drv_host_free(kv->drv, host) != DMM_OK) { /* held still: charged, kept for destroy */
        pthread_mutex_lock(&kv->lock);
        kv->host_bytes += kv->granule;
        pthread_mutex_unlock(&kv->lock);
        dmm__kv_keep_host(kv, host, kv->granule);
    } else {
        (void)dmm_lease_shrink(kv->gov, kv->host_lease, kv->granule, 0);
    }
    if (s == DMM_OK) s = dmm_prefix_create(kv->arena, &kv->zero_owner, all, &kv->zero);
    if (s != DMM_OK) return dmm__error_wrap(s, "filling the granule of zeros");
    kv->has_zero = true;
    return DMM_OK;
}

/* The owner goes first: the prefix alone then holds the zeros, and can still map them when its own
 * release fails (the arena stays usable); the prefix's release gives the handle back. */
bool dmm__kv_zero_drop(dmm_kv *kv) {
    if (kv->has_zero_owner) {
        dmm_release_outcome o = dmm_mechanism_release(kv->arena, &kv->zero_owner);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) return false;
        kv->has_zero_owner = false;
    }
    if (kv->has_zero) {
        dmm_release_outcome o = dmm_prefix_release(kv->arena, &kv->zero);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) return false;
        kv->has_zero = false;
    }
    return true;
}

/* Maps the zeros over r's granules from zero_from down to `down_to` (at least backed), top first. */
static dmm_status zero_fill_to(dmm_kv *kv, dmm_kv_request *r, uint64_t down_to) {
    if (!kv->zero_tail) return DMM_OK;
    if (down_to < r->backed) down_to = r->backed;
    while (r->zero_from > down_to) {
        uint64_t at = r->zero_from - kv->granule;
        dmm_status s = kv->has_zero ? dmm_prefix_commit(kv->arena, &kv->zero, &r->a, (size_t)at)
                                    : dmm_error_set(DMM_ERR_BUSY, "the arena's granule of zeros is gone (a destroy "
                                                    "that failed half-way could not make it again)");
        if (s != DMM_OK) {
            dmm__kv_refused(kv, s);
            return dmm__error_wrap(s, "mapping zeros at byte %llu of request %p failed: %llu bytes of its range fault "
                                   "when read until a later grow, restore or offload maps them",
                                   (unsigned long long)at, (void *)r, (unsigned long long)(r->zero_from - r->backed));
        }
        pthread_mutex_lock(&kv->lock);
        r->zero_from = at;
        pthread_mutex_unlock(&kv->lock);
    }
    return DMM_OK;
}

dmm_status dmm__kv_zero_fill(dmm_kv *kv, dmm_kv_request *r) {
    dmm_status s = zero_fill_to(kv, r, r->backed);
    if (kv->zero_tail && !r->zeroed) {
        pthread_mutex_lock(&kv->lock);
        r->zeroed = true;
        pthread_mutex_unlock(&kv->lock);
    }
    return s;
}

/* zero_tail: unmaps the zeros in [backed, to) so that r's own granules can be mapped there. FAILED:
 * nothing changed; QUARANTINED: the driver kept some of those mappings (out of use), which r cannot
 * grow over: the whole span counts as a hole then (not known to read zeros; a later fill fails where
 * a kept mapping is, and the hole stays counted). */
static dmm_status unzero(dmm_kv *kv, dmm_kv_request *r, uint64_t to) {
    uint64_t lo = r->zero_from > r->backed ? r->zero_from : r->backed;
    if (to <= lo) return DMM_OK; /* none mapped there (always so without zero_tail: zero_from = range_bytes) */
    dmm_release_outcome o = dmm_mechanism_decommit(kv->arena, &r->a, (dmm_range){(size_t)lo, (size_t)(to - lo)});
    dmm_release_state st = dmm_release_state_of(&o);
    if (st == DMM_RELEASE_FAILED)
        return dmm__error_wrap(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER, "unmapping the zeros at bytes "
                               "[%llu, %llu) of request %p failed; nothing changed",
                               (unsigned long long)lo, (unsigned long long)to, (void *)r);
    pthread_mutex_lock(&kv->lock);
    r->zero_from = to;
    pthread_mutex_unlock(&kv->lock);
    if (st == DMM_RELEASE_COMPLETE) return DMM_OK;
    return dmm_error_set(DMM_ERR_QUARANTINED, "unmapping the zeros at bytes [%llu, %llu) of request %p did not "
                         "complete: the driver kept some of those mappings (out of use), and the request cannot grow "
                         "over them", (unsigned long long)lo, (unsigned long long)to, (void *)r);
}

dmm_status dmm__kv_back_to(dmm_kv *kv, dmm_kv_request *r, uint64_t bytes) {
    if (bytes <= r->backed) return DMM_OK;
    const uint64_t was = r->zero_from; /* the zeros this call may take away, and puts back if it fails */
    dmm_status s = unzero(kv, r, bytes);
    if (s != DMM_OK) return s;
    dmm_range range = {(size_t)r->backed, (size_t)(bytes - r->backed)};
    uint64_t mapped = 0;
    s = dmm_mechanism_commit(kv->arena, &r->a, range, &mapped);
    if (s == DMM_ERR_BUDGET || s == DMM_ERR_OUT_OF_MEMORY) {
        /* the arena's lease is the device holder's own, which the governor never asks to give back for
         * its own charge: what the device's pool caches (a framework's freed tensors) goes first here */
        dmm_error_kept refused = {0};
        dmm__error_keep(&refused, s);
        uint64_t released = 0;
        (void)dmm_device_empty_cache(kv->dev, &released);
        dmm_clear_error();
        if (released > 0) {
            mapped = 0;
            s = dmm_mechanism_commit(kv->arena, &r->a, range, &mapped);
        } else {
            s = dmm__error_restore(&refused);
        }
    }
    if (s != DMM_OK) {
        dmm__kv_refused(kv, s);
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        bool hole = zero_fill_to(kv, r, was) != DMM_OK; /* the zeros back where this call took them */
        s = dmm__error_restore(&why);
        if (hole)
            s = dmm__error_wrap(s, "(and zeros could not be mapped back over %llu bytes of request %p's range: "
                                "reading them faults)", (unsigned long long)(r->zero_from - r->backed), (void *)r);
        return s;
    }
    pthread_mutex_lock(&kv->lock);
    r->backed = bytes;
    kv->grows++;
    pthread_mutex_unlock(&kv->lock);
    if (r->zeroed && r->zero_from > r->backed && dmm__kv_zero_fill(kv, r) != DMM_OK)
        dmm_clear_error(); /* a hole an earlier call left, filled where it can be; what stays is counted */
    maybe_wake_refill(kv);
    return DMM_OK;
}

dmm_status dmm__kv_copy_and_wait(dmm_kv *kv, uintptr_t dst, uintptr_t src, uint64_t bytes, dmm_stream stream) {
    dmm_event ev = NULL;
    dmm_status s = dmm__drv_copy(kv->drv, dst, src, (size_t)bytes, stream);
    if (s == DMM_OK) s = dmm__drv_event_create(kv->drv, &ev);
    if (s == DMM_OK) s = dmm__drv_event_record(kv->drv, ev, stream);
    if (s == DMM_OK) s = dmm__drv_event_synchronize(kv->drv, ev);
    if (ev != NULL) {
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        (void)dmm__drv_event_destroy(kv->drv, ev);
        s = dmm__error_restore(&why);
    }
    return s;
}

