/* SPDX-License-Identifier: Apache-2.0 */
/* src/gov/leases.c — leases and the accounting hook (include/dmm/governor.h; the invariants are in
 * governor.c).
 *
 * The idea: a lease is one holder's claim on one tier for one role; it is found by id through the
 * governor's dmm_u64map (ids are never reused, so a stale id is simply "not live"). Growing goes
 * through the charge (reclaim.c); shrinking and releasing refund under the lock and never fail for
 * lack of room. The accounting hook lets a mechanism charge and refund a lease itself: those bytes
 * are "bound", and a lease with bound bytes cannot be released or shrunk below them by hand.
 * A refund the lease cannot take (released, another device, more than bound) is ignored, counted as
 * stray and logged: the hook has no way to report it.
 */
#include <stdlib.h>
#include <string.h>

#include "gov/gov_internal.h"

/* ---------------------------------------------------------------------------------------------- */
/* refunds */

typedef enum refund_kind { REFUND_SHRINK, REFUND_RELEASE, REFUND_ACCOUNTING } refund_kind;

/* Under the lock. */
static void unlink_lease_locked(dmm_governor *g, lease *l) {
    dmm_holder *h = l->holder;
    if (l->prev != NULL) l->prev->next = l->next;
    else h->leases = l->next;
    if (l->next != NULL) l->next->prev = l->prev;
    h->nleases--;
    l->tier->leases--;
    (void)dmm__u64map_remove(&g->leases_by_id, l->id, NULL);
}

static void apply_refund_locked(dmm_governor *g, lease *l, const uint64_t sub[2], bool bound) {
    for (int x = 0; x < 2; x++) {
        l->used[x] -= sub[x];
        if (bound) l->bound[x] -= sub[x];
        l->tier->used[x] -= sub[x];
        l->tier->role_used[l->role][x] -= sub[x];
    }
    g->c.refunds++;
}

/* ---------------------------------------------------------------------------------------------- */
/* leases */

dmm_status dmm_lease_reserve(dmm_holder *h, dmm_device_id device, dmm_role role, uint64_t owned, uint64_t mapped,
                             dmm_lease_id *out) {
    if (h == NULL || out == NULL || (unsigned)role >= DMM_ROLE_COUNT || !dmm__gov_device_valid(device))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_lease_reserve: holder %p, out %p, role %d, tier %d index %d: pass a holder, "
                             "an out pointer, a dmm_role and a valid device",
                             (void *)h, (void *)out, (int)role, (int)device.tier, (int)device.index);
    *out = 0;
    dmm_governor *g = h->g;
    lease *l = calloc(1, sizeof *l);
    if (l == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_lease_reserve: out of host memory");
    dmm_lock_acquire(&g->lock);
    tier *t = dmm__gov_tier_find(g, device);
    bool leaving = h->leaving;
    if (t != NULL && !leaving) h->pins++; /* the holder stays alive while the ladder runs unlocked */
    dmm_lock_release(&g->lock);
    if (t == NULL || leaving) {
        free(l);
        if (leaving)
            return dmm_error_set(DMM_ERR_BUSY, "dmm_lease_reserve: holder '%s' is being unregistered", h->name);
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "dmm_lease_reserve: tier %s:%d has no budget in this governor; add it with "
                             "dmm_governor_add_device or dmm_governor_set_limit",
                             dmm__gov_tier_name(device.tier), (int)device.index);
    }
    l->holder = h;
    l->tier = t;
    l->role = role;
    charge_req r = {.op = "dmm_lease_reserve", .fresh = l, .add = {owned, mapped}};
    dmm_status st = dmm__gov_charge(g, &r);
    dmm_lock_acquire(&g->lock);
    dmm__gov_unpin_locked(g, h);
    dmm_lock_release(&g->lock);
    if (st != DMM_OK) {
        free(l); /* never entered the map */
        return st;
    }
    *out = r.id;
    return DMM_OK;
}

dmm_status dmm_lease_grow(dmm_governor *g, dmm_lease_id id, uint64_t owned, uint64_t mapped) {
    if (g == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_grow: the governor is NULL");
    charge_req r = {.op = "dmm_lease_grow", .id = id, .add = {owned, mapped}};
    return dmm__gov_charge(g, &r);
}

dmm_status dmm_lease_shrink(dmm_governor *g, dmm_lease_id id, uint64_t owned, uint64_t mapped) {
    if (g == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_shrink: the governor is NULL");
    uint64_t sub[2] = {owned, mapped};
    dmm_lock_acquire(&g->lock);
    lease *l = dmm__gov_lease_find(g, id);
    uint64_t free_by_hand[2] = {0, 0};
    int bad = -1;
    if (l != NULL)
        for (int x = 0; x < 2; x++) {
            free_by_hand[x] = l->used[x] - l->bound[x];
            if (sub[x] > free_by_hand[x] && bad < 0) bad = x;
        }
    if (l != NULL && bad < 0) apply_refund_locked(g, l, sub, false);
    uint64_t bound = l != NULL && bad >= 0 ? l->bound[bad] : 0;
    dmm_lock_release(&g->lock);
    if (l == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_lease_shrink: lease %llu is not live in this governor (released already, or "
                             "never issued by it); nothing changed",
                             (unsigned long long)id);
    if (bad >= 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_lease_shrink: lease %llu holds %llu bytes on the %s axis by hand (plus %llu "
                             "bound by a mechanism's accounting), fewer than the %llu asked; nothing changed",
                             (unsigned long long)id, (unsigned long long)free_by_hand[bad], dmm__gov_axis_name(bad),
                             (unsigned long long)bound, (unsigned long long)sub[bad]);
    return DMM_OK;
}

dmm_status dmm_lease_release(dmm_governor *g, dmm_lease_id id) {
    if (g == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_release: the governor is NULL");
    dmm_lock_acquire(&g->lock);
    lease *l = dmm__gov_lease_find(g, id);
    uint64_t bound[2] = {0, 0};
    bool busy = false;
    if (l != NULL) {
        bound[0] = l->bound[0];
        bound[1] = l->bound[1];
        busy = bound[0] != 0 || bound[1] != 0;
        if (!busy) {
            uint64_t sub[2] = {l->used[0], l->used[1]};
            apply_refund_locked(g, l, sub, false);
            unlink_lease_locked(g, l);
        }
    }
    dmm_lock_release(&g->lock);
    if (l == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_lease_release: lease %llu is not live in this governor (released already, or "
                             "never issued by it); nothing changed",
                             (unsigned long long)id);
    if (busy)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_lease_release: lease %llu still has %llu owned and %llu mapped bytes charged by "
                             "a mechanism through its accounting hook; release that memory (destroy the "
                             "mechanism) first; nothing changed",
                             (unsigned long long)id, (unsigned long long)bound[0], (unsigned long long)bound[1]);
    free(l);
    return DMM_OK;
}

dmm_status dmm_lease_usage(dmm_governor *g, dmm_lease_id id, uint64_t *owned, uint64_t *mapped) {
    if (g == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_usage: the governor is NULL");
    dmm_lock_acquire(&g->lock);
    const lease *l = dmm__gov_lease_find(g, id);
    uint64_t o = l ? l->used[0] : 0, m = l ? l->used[1] : 0;
    dmm_lock_release(&g->lock);
    if (l == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_lease_usage: lease %llu is not live in this governor", (unsigned long long)id);
    if (owned) *owned = o;
    if (mapped) *mapped = m;
    return DMM_OK;
}

dmm_status dmm_lease_stats_get(dmm_governor *g, dmm_lease_id id, dmm_lease_stats *out) {
    if (g == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_stats_get: the governor is NULL");
    dmm_status s = dmm__stats_out_check(out, sizeof *out, sizeof *out, "dmm_lease_stats", "dmm_lease_stats_get");
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&g->lock);
    const lease *l = dmm__gov_lease_find(g, id);
    dmm_lease_stats st = {.size = (uint32_t)sizeof st};
    if (l != NULL)
        for (int x = 0; x < 2; x++) {
            st.used[x] = l->used[x];
            st.peak[x] = l->peak[x];
            st.charged[x] = l->charged[x];
        }
    dmm_lock_release(&g->lock);
    if (l == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_stats_get: lease %llu is not live in this governor",
                             (unsigned long long)id);
    dmm__stats_out_copy(&st, sizeof st, out);
    return DMM_OK;
}

dmm_status dmm_lease_reset_peak(dmm_governor *g, dmm_lease_id id) {
    if (g == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_reset_peak: the governor is NULL");
    dmm_lock_acquire(&g->lock);
    lease *l = dmm__gov_lease_find(g, id);
    if (l != NULL)
        for (int x = 0; x < 2; x++) l->peak[x] = l->used[x];
    dmm_lock_release(&g->lock);
    if (l == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_reset_peak: lease %llu is not live in this governor",
                             (unsigned long long)id);
    return DMM_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* the accounting hook */

static dmm_status acct_charge(void *user, dmm_device_id device, dmm_axis axis, uint64_t bytes) {
    binding *b = user;
    if (axis != DMM_AXIS_OWNED && axis != DMM_AXIS_MAPPED)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "governor accounting charge: axis %d is neither owned "
                                                       "nor mapped", (int)axis);
    charge_req r = {.op = "governor accounting charge", .id = b->lease, .bound = true, .expect = &device};
    r.add[axis] = bytes;
    return dmm__gov_charge(b->g, &r);
}

static void acct_refund(void *user, dmm_device_id device, dmm_axis axis, uint64_t bytes) {
    binding *b = user;
    dmm_governor *g = b->g;
    if (bytes == 0) return;
    bool stray = axis != DMM_AXIS_OWNED && axis != DMM_AXIS_MAPPED;
    uint64_t bound = 0;
    dmm_lock_acquire(&g->lock);
    lease *l = stray ? NULL : dmm__gov_lease_find(g, b->lease);
    if (l == NULL || dmm__gov_device_cmp(l->tier->device, device) != 0 || bytes > l->bound[axis]) {
        stray = true;
        bound = l != NULL ? l->bound[axis] : 0;
        g->c.stray_refunds++;
    } else {
        uint64_t sub[2] = {0, 0};
        sub[axis] = bytes;
        apply_refund_locked(g, l, sub, true);
    }
    dmm_lock_release(&g->lock);
    if (stray)
        dmm_log(DMM_LOG_WARN,
                 "governor accounting refund: %llu bytes on the %s axis of %s:%d for lease %llu, which has only "
                 "%llu bound bytes there (released, another device, or refunded twice); ignored and counted as "
                 "stray",
                 (unsigned long long)bytes, dmm__gov_axis_name(axis), dmm__gov_tier_name(device.tier),
                 (int)device.index,
                 (unsigned long long)b->lease, (unsigned long long)bound);
}

dmm_status dmm_governor_accounting(dmm_governor *g, dmm_lease_id id, dmm_accounting *out) {
    if (g == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_governor_accounting: governor %p, out %p: pass both",
                             (void *)g, (void *)out);
    binding *b = calloc(1, sizeof *b);
    if (b == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_governor_accounting: out of host memory");
    b->g = g;
    b->lease = id;
    dmm_lock_acquire(&g->lock);
    bool live = dmm__gov_lease_find(g, id) != NULL;
    if (live) {
        b->next = g->bindings;
        g->bindings = b;
    }
    dmm_lock_release(&g->lock);
    if (!live) {
        free(b);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_governor_accounting: lease %llu is not live in this governor; reserve a lease "
                             "(dmm_lease_reserve, 0 bytes is fine) and pass its id",
                             (unsigned long long)id);
    }
    out->user = b;
    out->charge = acct_charge;
    out->refund = acct_refund;
    return DMM_OK;
}
