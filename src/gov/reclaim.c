/* SPDX-License-Identifier: Apache-2.0 */
/* src/gov/reclaim.c — charging a lease: one attempt under the governor's lock, and the reclaim ladder
 * around it (DESIGN §4.8; the invariants are in governor.c).
 *
 * The idea: an attempt either grants the whole charge (both axes) or refuses it with nothing changed,
 * capturing under the lock what the refusal's sentence needs. When the tier is short, the ladder pins
 * every other holder with a reclaim callback and a lease on that tier, drops the lock, and asks them
 * step by step (cached memory, idle chunks, offload, discard) for the deficit, retrying the attempt
 * from scratch after each answer.
 * The trade-off: concurrent charges may take the room a callback made; a charge from inside a
 * callback is never laddered (no recursion into holders).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gov/gov_internal.h"

static uint64_t sat_add(uint64_t a, uint64_t b) {
    uint64_t s;
    return dmm_add_overflows(a, b, &s) ? UINT64_MAX : s;
}

/* "12345 bytes (12.1 KiB)" or "unlimited". */
static const char *fmt_amount(uint64_t bytes, bool unlimited_if_max, char *buf, size_t cap) {
    if (unlimited_if_max && bytes == DMM_UNLIMITED) {
        snprintf(buf, cap, "unlimited");
        return buf;
    }
    char h[32];
    snprintf(buf, cap, "%llu bytes (%s)", (unsigned long long)bytes, dmm__fmt_bytes(bytes, h, sizeof h));
    return buf;
}

typedef enum attempt {
    ATTEMPT_GRANTED,
    ATTEMPT_SHORT,        /* does not fit: climb the ladder or refuse */
    ATTEMPT_OVERFLOW,     /* a counter would wrap */
    ATTEMPT_GONE,         /* the lease is not live (anymore) */
    ATTEMPT_WRONG_DEVICE, /* an accounting charge for another device than the lease's */
    ATTEMPT_LEAVING,      /* a new lease for a holder being unregistered */
    ATTEMPT_NO_MEMORY,    /* the lease map could not grow */
} attempt;

static attempt attempt_locked(dmm_governor *g, charge_req *r) {
    lease *l = r->fresh != NULL ? r->fresh : dmm__gov_lease_find(g, r->id);
    r->holder = NULL;
    if (l == NULL) return ATTEMPT_GONE;
    tier *t = l->tier;
    r->tier = t;
    r->holder = l->holder;
    memcpy(r->holder_name, l->holder->name, HOLDER_NAME_MAX);
    r->role = l->role;
    if (r->expect != NULL && dmm__gov_device_cmp(*r->expect, t->device) != 0) return ATTEMPT_WRONG_DEVICE;
    if (r->fresh != NULL && l->holder->leaving) return ATTEMPT_LEAVING;
    for (int x = 0; x < 2; x++) {
        uint64_t sum;
        if (r->add[x] == 0) continue;
        if (dmm_add_overflows(t->used[x], r->add[x], &sum)) {
            r->axis = x;
            r->used = t->used[x];
            g->c.overflow_refusals++;
            return ATTEMPT_OVERFLOW;
        }
    }
    /* Only an axis that grows is checked: a zero charge fits even on an oversubscribed tier. */
    for (int x = 0; x < 2; x++) {
        if (r->add[x] == 0 || t->used[x] + r->add[x] <= t->limit[x]) continue;
        r->axis = x;
        r->used = t->used[x];
        r->limit = t->limit[x];
        uint64_t deficit = 0;
        for (int y = 0; y < 2; y++)
            if (r->add[y] != 0 && t->used[y] + r->add[y] > t->limit[y] &&
                t->used[y] + r->add[y] - t->limit[y] > deficit)
                deficit = t->used[y] + r->add[y] - t->limit[y];
        r->deficit = deficit;
        return ATTEMPT_SHORT;
    }
    if (r->fresh != NULL) {
        /* the id is taken only once the map holds it: a refusal uses no id */
        if (!dmm__u64map_insert(&g->leases_by_id, g->next_lease_id, (uint64_t)(uintptr_t)l))
            return ATTEMPT_NO_MEMORY;
        l->id = g->next_lease_id++;
        dmm_holder *h = l->holder;
        l->prev = NULL;
        l->next = h->leases;
        if (h->leases != NULL) h->leases->prev = l;
        h->leases = l;
        h->nleases++;
        t->leases++;
        r->id = l->id;
        r->fresh = NULL; /* now owned by the map */
    }
    for (int x = 0; x < 2; x++) {
        t->used[x] += r->add[x];
        if (t->used[x] > t->peak[x]) t->peak[x] = t->used[x];
        t->role_used[l->role][x] += r->add[x];
        l->used[x] += r->add[x];
        if (l->used[x] > l->peak[x]) l->peak[x] = l->used[x];
        l->charged[x] = l->charged[x] + r->add[x] < l->charged[x] ? UINT64_MAX : l->charged[x] + r->add[x];
        if (r->bound) l->bound[x] += r->add[x];
    }
    g->c.charges++;
    return ATTEMPT_GRANTED;
}

dmm_status dmm__gov_charge(dmm_governor *g, charge_req *r) {
    uint64_t freed[DMM_RECLAIM_STEP_COUNT] = {0};
    bool laddered = false, inside_callback = dmm__gov_in_reclaim != NULL;
    dmm_lock_acquire(&g->lock);
    attempt a = attempt_locked(g, r);
    if (a == ATTEMPT_SHORT && !inside_callback) {
        /* Pin the holders to ask: those with a lease on this tier and a callback, except the charger. */
        size_t n = 0;
        for (dmm_holder *h = g->holders; h != NULL; h = h->next) n++;
        dmm_holder **ask = n ? malloc(n * sizeof *ask) : NULL;
        n = 0;
        if (ask != NULL)
            for (dmm_holder *h = g->holders; h != NULL; h = h->next) {
                if (h->reclaim == NULL || h->leaving || h == r->holder) continue;
                bool on_tier = false;
                for (const lease *l = h->leases; l != NULL && !on_tier; l = l->next) on_tier = l->tier == r->tier;
                if (!on_tier) continue;
                h->pins++;
                ask[n++] = h;
            }
        dmm_device_id device = r->tier->device;
        dmm_lock_release(&g->lock);
        laddered = n > 0;
        for (int step = 0; step < DMM_RECLAIM_STEP_COUNT && a == ATTEMPT_SHORT; step++)
            for (size_t i = 0; i < n && a == ATTEMPT_SHORT; i++) {
                dmm__gov_in_reclaim = ask[i];
                uint64_t got = ask[i]->reclaim(ask[i]->user, device, (dmm_reclaim_step)step, r->deficit);
                dmm__gov_in_reclaim = NULL;
                freed[step] = sat_add(freed[step], got);
                dmm_lock_acquire(&g->lock);
                g->c.reclaim_calls[step]++;
                g->c.reclaim_freed[step] = sat_add(g->c.reclaim_freed[step], got);
                a = attempt_locked(g, r);
                dmm_lock_release(&g->lock);
            }
        dmm_lock_acquire(&g->lock);
        for (size_t i = 0; i < n; i++) dmm__gov_unpin_locked(g, ask[i]);
        if (a == ATTEMPT_GRANTED && laddered) g->c.grants_after_reclaim++;
        free(ask);
    }
    if (a == ATTEMPT_SHORT) g->c.refusals++;
    const char *holder = r->holder_name[0] != '\0' ? r->holder_name : "?";
    dmm_device_id device = r->tier != NULL ? r->tier->device : (dmm_device_id){DMM_TIER_DEVICE, -1};
    uint64_t available = r->limit > r->used ? r->limit - r->used : 0;
    dmm_lock_release(&g->lock);

    char b1[64], b2[64], b3[64], b4[64];
    switch (a) {
    case ATTEMPT_GRANTED: return DMM_OK;
    case ATTEMPT_SHORT:
        return dmm_error_set(
            DMM_ERR_BUDGET,
            "%s: the governor refused: tier %s:%d, %s axis, role %s of holder '%s': requested %s, used %s, "
            "limit %s, available %s; the reclaim ladder freed: %s %llu, %s %llu, %s %llu, %s %llu bytes%s; "
            "release or shrink leases, raise the limit (dmm_governor_set_limit), or register holders that "
            "can give memory back",
            r->op, dmm__gov_tier_name(device.tier), (int)device.index, dmm__gov_axis_name(r->axis),
            dmm_role_name(r->role), holder,
            fmt_amount(r->add[r->axis], false, b1, sizeof b1), fmt_amount(r->used, false, b2, sizeof b2),
            fmt_amount(r->limit, true, b3, sizeof b3), fmt_amount(available, false, b4, sizeof b4),
            dmm_reclaim_step_name(DMM_RECLAIM_CACHED), (unsigned long long)freed[0],
            dmm_reclaim_step_name(DMM_RECLAIM_IDLE), (unsigned long long)freed[1],
            dmm_reclaim_step_name(DMM_RECLAIM_OFFLOAD), (unsigned long long)freed[2],
            dmm_reclaim_step_name(DMM_RECLAIM_DISCARD), (unsigned long long)freed[3],
            inside_callback ? " (not asked: the charge came from inside a reclaim callback)"
            : laddered      ? ""
                            : " (no other holder with a reclaim callback has a lease on this tier)");
    case ATTEMPT_OVERFLOW:
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: charging %llu bytes on the %s axis of tier %s:%d (used %llu) would overflow "
                             "a 64-bit counter; nothing was charged; check the size (a negative value cast to "
                             "unsigned?)",
                             r->op, (unsigned long long)r->add[r->axis], dmm__gov_axis_name(r->axis),
                             dmm__gov_tier_name(device.tier), (int)device.index, (unsigned long long)r->used);
    case ATTEMPT_GONE:
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: lease %llu is not live in this governor (released already, or never issued "
                             "by it); nothing was charged",
                             r->op, (unsigned long long)r->id);
    case ATTEMPT_WRONG_DEVICE:
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "%s: a charge for %s:%d through lease %llu, which is on tier %s:%d; give each "
                             "device's mechanism an accounting hook of a lease on that device",
                             r->op, dmm__gov_tier_name(r->expect->tier), (int)r->expect->index,
                             (unsigned long long)r->id, dmm__gov_tier_name(device.tier), (int)device.index);
    case ATTEMPT_LEAVING:
        return dmm_error_set(DMM_ERR_BUSY, "%s: holder '%s' is being unregistered; no new lease is granted",
                             r->op, holder);
    case ATTEMPT_NO_MEMORY:
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: out of host memory growing the lease table", r->op);
    }
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: internal error", r->op);
}
