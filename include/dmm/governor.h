/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/governor.h — one budget per tier, leases by holder and role, and the reclaim ladder (docs/guide.md).
 *
 * Tiers. A tier is a dmm_device_id: (DMM_TIER_DEVICE, GPU index), (DMM_TIER_HOST, 0), (DMM_TIER_DISK, 0).
 * The host and disk tiers exist from creation and are unlimited; a GPU tier is added with
 * dmm_governor_add_device() (limit = the driver's free memory at that moment × the margin,
 * DMM_GOVERNOR_DEFAULT_MARGIN_PERMILLE = 950 ‰ unless the config says otherwise) or with
 * dmm_governor_set_limit() (the caller names the limit).
 *
 * Two axes, kept apart everywhere (docs/guide.md): OWNED (physical handles held) and MAPPED (bytes
 * mapped into VA; aliases of a shared prefix may sum above owned). Each axis of each tier has its own
 * limit; the default mapped limit is unlimited, so by default only the owned axis is budgeted.
 *
 * Holders (a pool, a KV store, a weight store, …) register with a name, a priority and an optional
 * reclaim callback, and take leases by role (weights, kv-cache, workspace, activation) on one tier.
 * A lease is reserved, grown, shrunk and released exactly once; a second release of the same id is
 * refused (ids come from a 64-bit counter and are never reused).
 *
 * Invariants, per tier and axis, at every moment a caller can observe:
 *   used = Σ live leases' bytes = Σ over roles;  used ≤ limit, unless the limit was lowered below
 *   used (nothing is revoked; the snapshot reports the oversubscription); no counter ever wraps:
 *   an increase that would overflow is refused with DMM_ERR_INVALID_ARGUMENT and changes nothing.
 *
 * The reclaim ladder. A charge that does not fit asks, in order, every step of
 *   cached free memory (pool trim) → idle chunks (decommit) → offload → discard
 * and within a step every holder that has a lease on that tier, lowest priority value first (ties in
 * registration order), except the holder the charge is for: its own charge may come from under its
 * own lock (a pool growing), so asking it could deadlock; a holder short of budget gives back its own
 * cache itself before it retries. Each call is made outside every governor lock; after each call the charge is
 * re-checked and granted as soon as it fits. When the ladder is exhausted the charge is refused with
 * DMM_ERR_BUDGET and a sentence naming the tier, axis, role, holder, requested, used, limit, available
 * and what each step freed. The governor never frees anything itself: it only asks.
 * A charge made from inside a reclaim callback (on the same thread) does not climb the ladder again.
 *
 * Mechanisms charge through dmm_governor_accounting(): a dmm_accounting whose charge/refund go to one
 * lease (charge before the driver call, refund after it succeeded). Bytes charged that way are
 * "bound" to the lease: the holder cannot shrink them away by hand, and the lease cannot be released
 * while any are left (the mechanism still holds that memory).
 *
 * Thread contract: thread-safe. One lock per governor guards every counter; it is never held across
 * a reclaim callback or a driver call.
 */
#ifndef DMM_GOVERNOR_H
#define DMM_GOVERNOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/driver.h"
#include "dmm/mechanism.h"
#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmm_governor dmm_governor;
typedef struct dmm_holder dmm_holder;

/* A lease, named by a 64-bit id from the governor's counter; 0 is never a lease. */
typedef uint64_t dmm_lease_id;

/* A limit meaning "no limit". */
#define DMM_UNLIMITED UINT64_MAX

/* The default device limit is the driver's free memory × this margin, in per mille. */
#define DMM_GOVERNOR_DEFAULT_MARGIN_PERMILLE 950u

typedef enum dmm_role {
    DMM_ROLE_WEIGHTS = 0,
    DMM_ROLE_KV_CACHE = 1,
    DMM_ROLE_WORKSPACE = 2,
    DMM_ROLE_ACTIVATION = 3,
} dmm_role;
#define DMM_ROLE_COUNT 4

/* "weights", "kv-cache", "workspace", "activation"; "unknown" otherwise. */
DMM_API const char *dmm_role_name(dmm_role role);

/* The rungs of the ladder, asked in this order. */
typedef enum dmm_reclaim_step {
    DMM_RECLAIM_CACHED = 0,  /* give back cached free memory (a pool trims) */
    DMM_RECLAIM_IDLE = 1,    /* decommit idle chunks */
    DMM_RECLAIM_OFFLOAD = 2, /* offload tagged allocations to the next tier */
    DMM_RECLAIM_DISCARD = 3, /* discard tagged allocations */
} dmm_reclaim_step;
#define DMM_RECLAIM_STEP_COUNT 4

/* "cached free memory", "idle chunks", "offload", "discard"; "unknown" otherwise. */
DMM_API const char *dmm_reclaim_step_name(dmm_reclaim_step step);

/* Asked to give back up to (or at least) `bytes_wanted` bytes on `device` by doing `step`; returns
 * the bytes it freed (refunded through its own leases / accounting). Called outside every governor
 * lock, possibly from several threads at once; it may release, shrink, trim and refund. Return 0 for a
 * step it cannot do.
 * Careful: the charge that climbs the ladder may come from a mechanism or holder that holds one of its
 * own locks at that moment (the accounting hook does not forbid it), so a callback must never BLOCK on
 * a lock a charging thread may hold: take such locks with a try-lock and return 0 when they are busy.
 * Otherwise two holders growing at once on one tier can deadlock, each asking the other. */
typedef uint64_t (*dmm_reclaim_fn)(void *user, dmm_device_id device, dmm_reclaim_step step, uint64_t bytes_wanted);

typedef struct dmm_governor_config {
    uint32_t size;                   /* sizeof(dmm_governor_config) */
    uint32_t device_margin_permille; /* for dmm_governor_add_device; 0 = 950, at most 1000 */
} dmm_governor_config;

/* Creates a governor with an unlimited host tier and an unlimited disk tier. cfg may be NULL. */
DMM_API dmm_status dmm_governor_create(const dmm_governor_config *cfg, dmm_governor **out);

/* Destroys it; DMM_ERR_BUSY (nothing changed) while a holder is still registered. NULL is ignored. */
DMM_API dmm_status dmm_governor_destroy(dmm_governor *g);

/* Adds (or re-limits) the tier of driver->device with an owned limit of the driver's free memory
 * (mem_info) × the margin; the mapped limit of a new tier is unlimited. The driver is not kept. */
DMM_API dmm_status dmm_governor_add_device(dmm_governor *g, dmm_driver *driver);

/* Sets the limit of one axis of a tier, creating the tier (both axes unlimited) if it is new.
 * DMM_UNLIMITED removes the limit. Lowering a limit below what is used revokes nothing. */
DMM_API dmm_status dmm_governor_set_limit(dmm_governor *g, dmm_device_id device, dmm_axis axis, uint64_t limit);

/* One tier's counters, read consistently (under the governor's lock). Arrays are indexed by dmm_axis. */
typedef struct dmm_tier_usage {
    uint32_t size;         /* sizeof(dmm_tier_usage), set by the caller */
    uint64_t limit[2];     /* DMM_UNLIMITED for none */
    uint64_t used[2];
    uint64_t peak[2];
    uint64_t available[2]; /* limit − used, 0 when oversubscribed, DMM_UNLIMITED without a limit */
    uint64_t oversubscribed[2]; /* used − limit when a lowered limit left used above it, else 0 */
    uint32_t leases;       /* live leases on this tier */
} dmm_tier_usage;

DMM_API dmm_status dmm_governor_tier_usage(dmm_governor *g, dmm_device_id device, dmm_tier_usage *out);

/* ---- holders ---- */
typedef struct dmm_holder_config {
    uint32_t size;          /* sizeof(dmm_holder_config) */
    const char *name;       /* copied; for sentences and the snapshot */
    int32_t priority;       /* lower values are asked first within a ladder step */
    dmm_reclaim_fn reclaim; /* optional */
    void *user;             /* passed to reclaim */
} dmm_holder_config;

DMM_API dmm_status dmm_governor_holder_register(dmm_governor *g, const dmm_holder_config *cfg, dmm_holder **out);

/* Unregisters a holder: DMM_ERR_BUSY (nothing changed) while it has live leases, or when called from
 * inside its own reclaim callback. Otherwise waits for its callbacks in flight on other threads to
 * return; once this returns, its callback is never called again. NULL is ignored. */
DMM_API dmm_status dmm_governor_holder_unregister(dmm_holder *h);
/* Asks holder h's own reclaim callback to do `step` on `device`, as the governor asks the other holders
 * when one of them is short (it never asks the holder that is charging): for a holder short of budget
 * itself, before it retries. Returns the bytes it freed; 0 without a callback (or a NULL holder). Call it
 * where a charge of h may be refused, never from inside h's own callback. */
DMM_API uint64_t dmm_holder_reclaim(dmm_holder *h, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted);

/* ---- leases ---- */
/* Takes a lease for `role` on `device` charged with (owned, mapped) bytes (both or neither; 0 is fine:
 * an empty lease, e.g. for dmm_governor_accounting). Climbs the reclaim ladder if it does not fit. */
DMM_API dmm_status dmm_lease_reserve(dmm_holder *h, dmm_device_id device, dmm_role role, uint64_t owned,
                                     uint64_t mapped, dmm_lease_id *out);
/* Charges (owned, mapped) more to a live lease; ladder, refusal and overflow as for reserve. */
DMM_API dmm_status dmm_lease_grow(dmm_governor *g, dmm_lease_id lease, uint64_t owned, uint64_t mapped);
/* Refunds (owned, mapped) of a live lease; refused (nothing changed) for more than it holds by hand
 * (bytes bound by a mechanism's accounting are refunded by that mechanism only). */
DMM_API dmm_status dmm_lease_shrink(dmm_governor *g, dmm_lease_id lease, uint64_t owned, uint64_t mapped);
/* Refunds everything and ends the lease. Refused (nothing changed) for an id that is not live (a
 * second release), and with DMM_ERR_BUSY while a mechanism still holds bytes charged to it. */
DMM_API dmm_status dmm_lease_release(dmm_governor *g, dmm_lease_id lease);
/* The lease's bytes per axis (either pointer may be NULL). */
DMM_API dmm_status dmm_lease_usage(dmm_governor *g, dmm_lease_id lease, uint64_t *owned, uint64_t *mapped);
/* A lease's bytes per axis ([DMM_AXIS_OWNED], [DMM_AXIS_MAPPED]) now, at their peak, and charged in all,
 * whoever charged them (by hand or through the accounting hook). */
typedef struct dmm_lease_stats {
    uint32_t size;        /* sizeof(dmm_lease_stats), set by the caller */
    uint64_t used[2];     /* now */
    uint64_t peak[2];     /* the most since the lease was made or its peak was last reset */
    uint64_t charged[2];  /* every byte ever charged (saturating at UINT64_MAX): used + refunded */
} dmm_lease_stats;
DMM_API dmm_status dmm_lease_stats_get(dmm_governor *g, dmm_lease_id lease, dmm_lease_stats *out);
/* The lease's peaks back to its current bytes (torch.cuda.reset_peak_memory_stats). */
DMM_API dmm_status dmm_lease_reset_peak(dmm_governor *g, dmm_lease_id lease);

/* Fills *out with an accounting hook whose charges and refunds go to `lease` (both axes), for
 * dmm_arena_config.accounting / dmm_eager_config.accounting. A charge for a device other than the
 * lease's is refused with DMM_ERR_WRONG_DEVICE. The hook stays valid until the governor is destroyed;
 * after the lease is released its charges are refused and its refunds are counted as stray. */
DMM_API dmm_status dmm_governor_accounting(dmm_governor *g, dmm_lease_id lease, dmm_accounting *out);

/* ---- observing ---- */
/* Event counters (not part of the snapshot, so that a refused request leaves the snapshot equal). */
typedef struct dmm_governor_counters {
    uint32_t size;                   /* sizeof(dmm_governor_counters), set by the caller */
    uint64_t charges;                /* charges granted (reserve, grow, accounting) */
    uint64_t refusals;               /* charges refused with DMM_ERR_BUDGET */
    uint64_t overflow_refusals;      /* charges refused because a counter would have wrapped */
    uint64_t grants_after_reclaim;   /* charges granted only after the ladder freed memory */
    uint64_t refunds;                /* refunds applied (shrink, release, accounting) */
    uint64_t stray_refunds;          /* accounting refunds for a released lease or above its bound bytes */
    uint64_t reclaim_calls[DMM_RECLAIM_STEP_COUNT]; /* callbacks made per step */
    uint64_t reclaim_freed[DMM_RECLAIM_STEP_COUNT]; /* bytes the callbacks reported per step (saturating) */
} dmm_governor_counters;

DMM_API dmm_status dmm_governor_counters_get(dmm_governor *g, dmm_governor_counters *out);

/* The state as one JSON object: per tier (limit, used, available, peak, oversubscribed per axis,
 * per-role totals) and per holder (name, priority, leases, bytes per tier and role). A limit or an
 * available amount that is unlimited is written as null. Same buffer contract as dmm_stats_json:
 * *needed gets the length without the NUL; a too-small buffer gives DMM_ERR_INVALID_ARGUMENT. */
DMM_API dmm_status dmm_governor_snapshot_json(dmm_governor *g, char *buf, size_t cap, size_t *needed);

#ifdef __cplusplus
}
#endif
#endif /* DMM_GOVERNOR_H */
