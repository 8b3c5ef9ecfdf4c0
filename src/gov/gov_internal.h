/* SPDX-License-Identifier: Apache-2.0 */
/* src/gov/gov_internal.h — what the governor's files share (never installed):
 *   governor.c  the governor object: create/destroy, tiers and their limits, holders, observing
 *   leases.c    leases (reserve, grow, shrink, release, usage), refunds, the accounting hook
 *   reclaim.c   charging: one attempt under the lock and the reclaim ladder around it
 * The invariants are stated in governor.c; everything here is guarded by dmm_governor.lock unless a
 * comment says otherwise.
 */
#ifndef DMM_GOV_INTERNAL_H
#define DMM_GOV_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "core/core.h"
#include "core/u64map.h"
#include "dmm/governor.h"

#define HOLDER_NAME_MAX 64

typedef struct tier {
    dmm_device_id device;
    uint64_t limit[2]; /* per dmm_axis; DMM_UNLIMITED = none */
    uint64_t used[2];
    uint64_t peak[2];
    uint64_t role_used[DMM_ROLE_COUNT][2];
    uint32_t leases; /* live leases on this tier */
} tier;

typedef struct lease {
    dmm_lease_id id;
    dmm_holder *holder;
    tier *tier;
    dmm_role role;
    uint64_t used[2];
    uint64_t bound[2];        /* the part of used charged through dmm_governor_accounting */
    uint64_t peak[2];         /* the most used since the lease was made or dmm_lease_reset_peak */
    uint64_t charged[2];      /* every byte ever charged (saturating): used + what was refunded */
    struct lease *prev, *next; /* in the holder's list */
} lease;

struct dmm_holder {
    dmm_governor *g;
    char name[HOLDER_NAME_MAX];
    int32_t priority;
    dmm_reclaim_fn reclaim;
    void *user;
    uint64_t seq;      /* registration order: ties in priority keep it */
    lease *leases;     /* live leases, newest first */
    uint32_t nleases;
    uint32_t pins;     /* threads that may still touch this holder with the lock dropped */
    bool leaving;      /* unregister is waiting for pins to drop to 0 */
    dmm_holder *next;  /* sorted by (priority, seq) */
};

/* The user object of one dmm_accounting hook; owned by the governor until it is destroyed, because a
 * mechanism keeps its copy of the hook for its whole life and there is no hook to say it let go. */
typedef struct binding {
    dmm_governor *g;
    dmm_lease_id lease;
    struct binding *next;
} binding;

struct dmm_governor {
    dmm_lock lock;
    pthread_cond_t unpinned; /* broadcast when a leaving holder's pins drop to 0 */
    uint32_t margin_permille;
    tier **tiers; /* sorted by (tier, index); tiers are never removed, so pointers stay valid */
    size_t ntiers, tiers_cap;
    dmm_holder *holders;
    uint64_t holder_seq;
    dmm_u64map leases_by_id; /* lease id → lease * (src/core/u64map.h): a live lease is in it */
    uint64_t next_lease_id;
    binding *bindings;
    dmm_governor_counters c;
};

/* The holder whose reclaim callback this thread is running (NULL outside callbacks). */
extern _Thread_local const dmm_holder *dmm__gov_in_reclaim;

/* ---- names and devices ---- */
static inline const char *dmm__gov_tier_name(dmm_tier t) {
    switch (t) {
    case DMM_TIER_DEVICE: return "device";
    case DMM_TIER_HOST: return "host";
    case DMM_TIER_DISK: return "disk";
    }
    return "unknown";
}

static inline const char *dmm__gov_axis_name(int axis) { return axis == DMM_AXIS_MAPPED ? "mapped" : "owned"; }

static inline int dmm__gov_device_cmp(dmm_device_id a, dmm_device_id b) {
    if (a.tier != b.tier) return (int)a.tier < (int)b.tier ? -1 : 1;
    if (a.index != b.index) return a.index < b.index ? -1 : 1;
    return 0;
}

static inline bool dmm__gov_device_valid(dmm_device_id d) {
    return (d.tier == DMM_TIER_DEVICE || d.tier == DMM_TIER_HOST || d.tier == DMM_TIER_DISK) && d.index >= 0;
}

/* The tier of device d, or NULL (under the lock). */
tier *dmm__gov_tier_find(const dmm_governor *g, dmm_device_id d);

/* The live lease with this id, or NULL (under the lock). */
static inline lease *dmm__gov_lease_find(const dmm_governor *g, dmm_lease_id id) {
    uint64_t v = 0;
    if (id == 0 || !dmm__u64map_find(&g->leases_by_id, id, &v)) return NULL;
    return (lease *)(uintptr_t)v;
}

/* Under the lock: drops one pin and wakes an unregister waiting for the last one. */
static inline void dmm__gov_unpin_locked(dmm_governor *g, dmm_holder *h) {
    h->pins--;
    if (h->pins == 0 && h->leaving) pthread_cond_broadcast(&g->unpinned);
}

/* ---- charging (reclaim.c) ---- */

typedef struct charge_req {
    const char *op;
    dmm_lease_id id;         /* the lease (0 while is_new) */
    lease *fresh;            /* a new lease not yet in the map (reserve), else NULL */
    uint64_t add[2];
    bool bound;              /* through accounting: counts toward the lease's bound bytes */
    const dmm_device_id *expect; /* accounting: the device the mechanism charges */
    /* captured under the lock for the sentence */
    tier *tier;
    dmm_holder *holder; /* valid only under the lock of the attempt that set it */
    char holder_name[HOLDER_NAME_MAX];
    dmm_role role;
    int axis;
    uint64_t used, limit, deficit;
} charge_req;

/* Charges r->add to a lease (r->fresh: a new lease, entered into the map when granted), climbing the
 * reclaim ladder with the lock dropped when it does not fit. Called without the lock. Returns the
 * status; on failure the thread's last error is set. */
dmm_status dmm__gov_charge(dmm_governor *g, charge_req *r);

#endif /* DMM_GOV_INTERNAL_H */
