/* src/gov/governor.c — budgets per tier, leases per holder and role, and the reclaim ladder
 * (DESIGN §4.8, include/dmm/governor.h).
 *
 * The idea: every byte a holder or a mechanism may hold is charged to a lease before it is taken and
 * refunded after it is really gone. A lease belongs to one holder, one tier and one role; the tier
 * keeps the sums. All counters live under ONE lock per governor: charges come from slow paths (a
 * commit, a lease change), never from the pool's hot path, so a single lock costs nothing measurable
 * and buys snapshots that are consistent across tiers, roles and holders.
 *
 * The trade-off: the ladder runs with the lock dropped (a holder's reclaim callback trims, decommits
 * and refunds through this very governor), so a charge is checked, the lock released, a holder asked,
 * and the charge checked again from scratch; concurrent charges may take the room a callback made.
 * Holders are pinned (pins > 0) while a thread may call them, and unregistering waits for the pins.
 * No dmm_error_set (which calls the user's log callback) happens under the lock either: sentences are
 * built from values captured under the lock, after it is released.
 *
 * Invariants (per tier t and axis x, whenever the lock is free):
 *   t.used[x] = Σ_{live leases l on t} l.used[x] = Σ_role t.role_used[role][x]
 *   l.bound[x] ≤ l.used[x]                       (bytes a mechanism charged through accounting)
 *   t.used[x] ≤ t.limit[x] unless the limit was lowered below it (nothing is ever revoked)
 *   t.peak[x] ≥ t.used[x];  no counter wraps: every increase is checked on t.used, which bounds the rest
 *   a lease id is in the map ⇔ the lease is live; ids come from a 64-bit counter and are never reused
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/json.h"
#include "dmm/governor.h"

#define HOLDER_NAME_MAX 64

typedef struct tier {
    dmm_device device;
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
    lease **map; /* open addressing, linear probing, keyed by lease id */
    size_t map_cap, map_count;
    uint64_t next_lease_id;
    binding *bindings;
    dmm_governor_counters c;
};

/* The holder whose reclaim callback this thread is running (NULL outside callbacks). */
static _Thread_local const dmm_holder *tls_in_reclaim;

/* ---------------------------------------------------------------------------------------------- */
/* names */

const char *dmm_role_name(dmm_role role) {
    switch (role) {
    case DMM_ROLE_WEIGHTS: return "weights";
    case DMM_ROLE_KV_CACHE: return "kv-cache";
    case DMM_ROLE_WORKSPACE: return "workspace";
    case DMM_ROLE_ACTIVATION: return "activation";
    }
    return "unknown";
}

const char *dmm_reclaim_step_name(dmm_reclaim_step step) {
    switch (step) {
    case DMM_RECLAIM_CACHED: return "cached free memory";
    case DMM_RECLAIM_IDLE: return "idle chunks";
    case DMM_RECLAIM_OFFLOAD: return "offload";
    case DMM_RECLAIM_DISCARD: return "discard";
    }
    return "unknown";
}

static const char *tier_name(dmm_tier t) {
    switch (t) {
    case DMM_TIER_DEVICE: return "device";
    case DMM_TIER_HOST: return "host";
    case DMM_TIER_DISK: return "disk";
    }
    return "unknown";
}

static const char *axis_name(int axis) { return axis == DMM_AXIS_MAPPED ? "mapped" : "owned"; }

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

/* ---------------------------------------------------------------------------------------------- */
/* the lease map: id → lease, open addressing with backward-shift deletion (no tombstones) */

static size_t map_home(uint64_t id, size_t cap) {
    uint64_t x = id;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (size_t)x & (cap - 1);
}

static lease *map_find(const dmm_governor *g, dmm_lease_id id) {
    if (g->map_cap == 0 || id == 0) return NULL;
    for (size_t i = map_home(id, g->map_cap);; i = (i + 1) & (g->map_cap - 1)) {
        lease *l = g->map[i];
        if (l == NULL) return NULL;
        if (l->id == id) return l;
    }
}

static void map_put(lease **slots, size_t cap, lease *l) {
    size_t i = map_home(l->id, cap);
    while (slots[i] != NULL) i = (i + 1) & (cap - 1);
    slots[i] = l;
}

/* Makes room for one more entry (load ≤ 1/2). False when memory ran out (nothing changed). */
static bool map_reserve_one(dmm_governor *g) {
    if ((g->map_count + 1) * 2 <= g->map_cap) return true;
    size_t cap = g->map_cap ? g->map_cap * 2 : 64;
    lease **slots = calloc(cap, sizeof *slots);
    if (slots == NULL) return false;
    for (size_t i = 0; i < g->map_cap; i++)
        if (g->map[i] != NULL) map_put(slots, cap, g->map[i]);
    free(g->map);
    g->map = slots;
    g->map_cap = cap;
    return true;
}

static void map_remove(dmm_governor *g, dmm_lease_id id) {
    size_t mask = g->map_cap - 1;
    size_t i = map_home(id, g->map_cap);
    while (g->map[i]->id != id) i = (i + 1) & mask; /* present by the caller's contract */
    for (size_t j = (i + 1) & mask; g->map[j] != NULL; j = (j + 1) & mask) {
        size_t k = map_home(g->map[j]->id, g->map_cap);
        /* Move j back into the hole at i unless its home k lies cyclically in (i, j]. */
        bool k_in_range = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!k_in_range) {
            g->map[i] = g->map[j];
            i = j;
        }
    }
    g->map[i] = NULL;
    g->map_count--;
}

/* ---------------------------------------------------------------------------------------------- */
/* tiers */

static int device_cmp(dmm_device a, dmm_device b) {
    if (a.tier != b.tier) return (int)a.tier < (int)b.tier ? -1 : 1;
    if (a.index != b.index) return a.index < b.index ? -1 : 1;
    return 0;
}

static tier *tier_find(const dmm_governor *g, dmm_device d) {
    for (size_t i = 0; i < g->ntiers; i++)
        if (device_cmp(g->tiers[i]->device, d) == 0) return g->tiers[i];
    return NULL;
}

/* Under the lock. NULL when memory ran out. */
static tier *tier_find_or_add(dmm_governor *g, dmm_device d) {
    tier *t = tier_find(g, d);
    if (t != NULL) return t;
    if (g->ntiers == g->tiers_cap) {
        size_t cap = g->tiers_cap ? g->tiers_cap * 2 : 8;
        tier **a = realloc(g->tiers, cap * sizeof *a);
        if (a == NULL) return NULL;
        g->tiers = a;
        g->tiers_cap = cap;
    }
    t = calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    t->device = d;
    t->limit[0] = t->limit[1] = DMM_UNLIMITED;
    size_t at = g->ntiers;
    while (at > 0 && device_cmp(g->tiers[at - 1]->device, d) > 0) {
        g->tiers[at] = g->tiers[at - 1];
        at--;
    }
    g->tiers[at] = t;
    g->ntiers++;
    return t;
}

static bool device_valid(dmm_device d) {
    return (d.tier == DMM_TIER_DEVICE || d.tier == DMM_TIER_HOST || d.tier == DMM_TIER_DISK) && d.index >= 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* create / destroy / limits */

dmm_status dmm_governor_create(const dmm_governor_config *cfg, dmm_governor **out) {
    if (out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_governor_create: out is NULL; pass the address "
                                                       "of a dmm_governor pointer");
    *out = NULL;
    uint32_t margin = DMM_GOVERNOR_DEFAULT_MARGIN_PERMILLE;
    if (cfg != NULL) {
        if (cfg->size < offsetof(dmm_governor_config, device_margin_permille) + sizeof(uint32_t))
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "dmm_governor_create: the config's size is %u bytes; set .size = "
                                 "sizeof(dmm_governor_config) (%zu in this build)",
                                 cfg->size, sizeof(dmm_governor_config));
        if (cfg->device_margin_permille > 1000)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "dmm_governor_create: device_margin_permille is %u, above 1000 (100 %%); "
                                 "pass 1..1000, or 0 for the default %u",
                                 cfg->device_margin_permille, DMM_GOVERNOR_DEFAULT_MARGIN_PERMILLE);
        if (cfg->device_margin_permille != 0) margin = cfg->device_margin_permille;
    }
    dmm_governor *g = calloc(1, sizeof *g);
    if (g == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_governor_create: out of host memory for %zu bytes",
                             sizeof *g);
    dmm_lock_init(&g->lock);
    pthread_cond_init(&g->unpinned, NULL);
    g->margin_permille = margin;
    g->next_lease_id = 1;
    g->c.size = sizeof g->c;
    dmm_device host = {DMM_TIER_HOST, 0}, disk = {DMM_TIER_DISK, 0};
    if (tier_find_or_add(g, host) == NULL || tier_find_or_add(g, disk) == NULL) {
        g->holders = NULL;
        dmm_governor_destroy(g);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_governor_create: out of host memory for its tiers");
    }
    *out = g;
    return DMM_OK;
}

dmm_status dmm_governor_destroy(dmm_governor *g) {
    if (g == NULL) return DMM_OK;
    dmm_lock_acquire(&g->lock);
    if (g->holders != NULL) {
        char name[HOLDER_NAME_MAX];
        snprintf(name, sizeof name, "%s", g->holders->name);
        uint32_t n = g->holders->nleases;
        dmm_lock_release(&g->lock);
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_governor_destroy: holder '%s' (with %u live leases) is still registered; "
                             "release its leases and unregister every holder first",
                             name, n);
    }
    dmm_lock_release(&g->lock);
    for (size_t i = 0; i < g->ntiers; i++) free(g->tiers[i]);
    free(g->tiers);
    free(g->map);
    for (binding *b = g->bindings, *next; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    pthread_cond_destroy(&g->unpinned);
    dmm_lock_destroy(&g->lock);
    free(g);
    return DMM_OK;
}

static dmm_status set_limit_locked(dmm_governor *g, dmm_device device, dmm_axis axis, uint64_t limit) {
    tier *t = tier_find_or_add(g, device);
    if (t == NULL) return DMM_ERR_OUT_OF_MEMORY;
    t->limit[axis] = limit;
    return DMM_OK;
}

dmm_status dmm_governor_set_limit(dmm_governor *g, dmm_device device, dmm_axis axis, uint64_t limit) {
    if (g == NULL || !device_valid(device) || (axis != DMM_AXIS_OWNED && axis != DMM_AXIS_MAPPED))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_governor_set_limit: governor %p, tier %d index %d, axis %d: pass a governor, "
                             "a device tier (device/host/disk, index ≥ 0) and DMM_AXIS_OWNED or DMM_AXIS_MAPPED",
                             (void *)g, (int)device.tier, (int)device.index, (int)axis);
    dmm_lock_acquire(&g->lock);
    dmm_status st = set_limit_locked(g, device, axis, limit);
    dmm_lock_release(&g->lock);
    if (st != DMM_OK)
        return dmm_error_set(st, "dmm_governor_set_limit: out of host memory adding tier %s:%d",
                             tier_name(device.tier), (int)device.index);
    return DMM_OK;
}

/* free × permille / 1000 without overflow. */
static uint64_t apply_margin(uint64_t free_bytes, uint32_t permille) {
    return free_bytes / 1000 * permille + free_bytes % 1000 * permille / 1000;
}

dmm_status dmm_governor_add_device(dmm_governor *g, dmm_driver *driver) {
    if (g == NULL || driver == NULL || driver->ops == NULL || !device_valid(driver->device))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_governor_add_device: governor %p, driver %p: pass a governor and a driver "
                             "with ops and a valid device",
                             (void *)g, (void *)driver);
    if (driver->ops->mem_info == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_governor_add_device: driver '%s' has no mem_info, so the free memory of "
                             "%s:%d is unknown; set the limit with dmm_governor_set_limit instead",
                             driver->ops->name ? driver->ops->name : "?", tier_name(driver->device.tier),
                             (int)driver->device.index);
    uint64_t free_bytes = 0, total_bytes = 0;
    dmm_status st = driver->ops->mem_info(driver, &free_bytes, &total_bytes); /* no lock held */
    if (st != DMM_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        return dmm_error_set(st,
                             "dmm_governor_add_device: reading the free memory of %s:%d failed (%s: %s); "
                             "set the limit with dmm_governor_set_limit instead",
                             tier_name(driver->device.tier), (int)driver->device.index, dmm_status_str(st), why);
    }
    uint64_t limit = apply_margin(free_bytes, g->margin_permille);
    dmm_lock_acquire(&g->lock);
    st = set_limit_locked(g, driver->device, DMM_AXIS_OWNED, limit);
    dmm_lock_release(&g->lock);
    if (st != DMM_OK)
        return dmm_error_set(st, "dmm_governor_add_device: out of host memory adding tier %s:%d",
                             tier_name(driver->device.tier), (int)driver->device.index);
    dmm__log(DMM_LOG_INFO, "governor: tier %s:%d limited to %llu bytes (%u per mille of %llu free)",
             tier_name(driver->device.tier), (int)driver->device.index, (unsigned long long)limit,
             g->margin_permille, (unsigned long long)free_bytes);
    return DMM_OK;
}

static void usage_of(const tier *t, dmm_tier_usage *u) {
    for (int x = 0; x < 2; x++) {
        u->limit[x] = t->limit[x];
        u->used[x] = t->used[x];
        u->peak[x] = t->peak[x];
        u->available[x] = t->limit[x] == DMM_UNLIMITED ? DMM_UNLIMITED
                          : t->used[x] >= t->limit[x]  ? 0
                                                       : t->limit[x] - t->used[x];
        u->oversubscribed[x] = t->used[x] > t->limit[x] ? t->used[x] - t->limit[x] : 0;
    }
    u->leases = t->leases;
}

dmm_status dmm_governor_tier_usage(dmm_governor *g, dmm_device device, dmm_tier_usage *out) {
    if (g == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_governor_tier_usage: governor %p, out %p: pass both",
                             (void *)g, (void *)out);
    if (out->size < offsetof(dmm_tier_usage, leases) + sizeof(uint32_t))
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "dmm_governor_tier_usage: out->size is %u; set .size = sizeof(dmm_tier_usage) "
                             "(%zu in this build)",
                             out->size, sizeof(dmm_tier_usage));
    dmm_tier_usage u;
    memset(&u, 0, sizeof u);
    dmm_lock_acquire(&g->lock);
    const tier *t = tier_find(g, device);
    if (t != NULL) usage_of(t, &u);
    dmm_lock_release(&g->lock);
    if (t == NULL)
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "dmm_governor_tier_usage: tier %s:%d has no budget in this governor; add it with "
                             "dmm_governor_add_device or dmm_governor_set_limit",
                             tier_name(device.tier), (int)device.index);
    uint32_t size = out->size;
    memcpy(out, &u, size < sizeof u ? size : sizeof u);
    out->size = size;
    return DMM_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* holders */

dmm_status dmm_governor_holder_register(dmm_governor *g, const dmm_holder_config *cfg, dmm_holder **out) {
    if (g == NULL || cfg == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_governor_holder_register: governor %p, config %p, out %p: pass all three",
                             (void *)g, (const void *)cfg, (void *)out);
    *out = NULL;
    if (cfg->size < offsetof(dmm_holder_config, user) + sizeof(void *))
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "dmm_governor_holder_register: the config's size is %u; set .size = "
                             "sizeof(dmm_holder_config) (%zu in this build)",
                             cfg->size, sizeof(dmm_holder_config));
    dmm_holder *h = calloc(1, sizeof *h);
    if (h == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_governor_holder_register: out of host memory");
    h->g = g;
    snprintf(h->name, sizeof h->name, "%s", cfg->name != NULL && cfg->name[0] != '\0' ? cfg->name : "holder");
    h->priority = cfg->priority;
    h->reclaim = cfg->reclaim;
    h->user = cfg->user;
    dmm_lock_acquire(&g->lock);
    h->seq = ++g->holder_seq;
    dmm_holder **at = &g->holders;
    while (*at != NULL && (*at)->priority <= h->priority) at = &(*at)->next;
    h->next = *at;
    *at = h;
    dmm_lock_release(&g->lock);
    *out = h;
    return DMM_OK;
}

/* Under the lock: drops one pin and wakes an unregister waiting for the last one. */
static void unpin_locked(dmm_governor *g, dmm_holder *h) {
    h->pins--;
    if (h->pins == 0 && h->leaving) pthread_cond_broadcast(&g->unpinned);
}

dmm_status dmm_governor_holder_unregister(dmm_holder *h) {
    if (h == NULL) return DMM_OK;
    dmm_governor *g = h->g;
    if (tls_in_reclaim != NULL)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_governor_holder_unregister: called from inside the reclaim callback of holder "
                             "'%s'; unregister after the callback returned",
                             tls_in_reclaim->name);
    dmm_lock_acquire(&g->lock);
    if (h->nleases > 0 || h->leaving) {
        uint32_t n = h->nleases;
        bool leaving = h->leaving;
        dmm_lock_release(&g->lock);
        if (leaving)
            return dmm_error_set(DMM_ERR_BUSY, "dmm_governor_holder_unregister: holder '%s' is being "
                                               "unregistered by another thread", h->name);
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_governor_holder_unregister: holder '%s' still has %u live leases; release "
                             "them (and destroy the mechanisms charging them) first",
                             h->name, n);
    }
    h->leaving = true; /* no ladder pins it from now on, and no lease can be taken */
    while (h->pins > 0) pthread_cond_wait(&g->unpinned, &g->lock.m);
    dmm_holder **at = &g->holders;
    while (*at != h) at = &(*at)->next;
    *at = h->next;
    dmm_lock_release(&g->lock);
    free(h);
    return DMM_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* charging: one attempt under the lock, the ladder around it */

typedef enum attempt {
    ATTEMPT_GRANTED,
    ATTEMPT_SHORT,        /* does not fit: climb the ladder or refuse */
    ATTEMPT_OVERFLOW,     /* a counter would wrap */
    ATTEMPT_GONE,         /* the lease is not live (anymore) */
    ATTEMPT_WRONG_DEVICE, /* an accounting charge for another device than the lease's */
    ATTEMPT_LEAVING,      /* a new lease for a holder being unregistered */
    ATTEMPT_NO_MEMORY,    /* the lease map could not grow */
} attempt;

typedef struct charge_req {
    const char *op;
    dmm_lease_id id;         /* the lease (0 while is_new) */
    lease *fresh;            /* a new lease not yet in the map (reserve), else NULL */
    uint64_t add[2];
    bool bound;              /* through accounting: counts toward the lease's bound bytes */
    const dmm_device *expect; /* accounting: the device the mechanism charges */
    /* captured under the lock for the sentence */
    tier *tier;
    dmm_holder *holder; /* valid only under the lock of the attempt that set it */
    char holder_name[HOLDER_NAME_MAX];
    dmm_role role;
    int axis;
    uint64_t used, limit, deficit;
} charge_req;

static attempt attempt_locked(dmm_governor *g, charge_req *r) {
    lease *l = r->fresh != NULL ? r->fresh : map_find(g, r->id);
    r->holder = NULL;
    if (l == NULL) return ATTEMPT_GONE;
    tier *t = l->tier;
    r->tier = t;
    r->holder = l->holder;
    memcpy(r->holder_name, l->holder->name, HOLDER_NAME_MAX);
    r->role = l->role;
    if (r->expect != NULL && device_cmp(*r->expect, t->device) != 0) return ATTEMPT_WRONG_DEVICE;
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
        if (!map_reserve_one(g)) return ATTEMPT_NO_MEMORY;
        l->id = g->next_lease_id++;
        map_put(g->map, g->map_cap, l);
        g->map_count++;
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
        if (r->bound) l->bound[x] += r->add[x];
    }
    g->c.charges++;
    return ATTEMPT_GRANTED;
}

/* Runs outside the lock. Returns the status; on failure the thread's last error is set. */
static dmm_status charge(dmm_governor *g, charge_req *r) {
    uint64_t freed[DMM_RECLAIM_STEP_COUNT] = {0};
    bool laddered = false, inside_callback = tls_in_reclaim != NULL;
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
        dmm_device device = r->tier->device;
        dmm_lock_release(&g->lock);
        laddered = n > 0;
        for (int step = 0; step < DMM_RECLAIM_STEP_COUNT && a == ATTEMPT_SHORT; step++)
            for (size_t i = 0; i < n && a == ATTEMPT_SHORT; i++) {
                tls_in_reclaim = ask[i];
                uint64_t got = ask[i]->reclaim(ask[i]->user, device, (dmm_reclaim_step)step, r->deficit);
                tls_in_reclaim = NULL;
                freed[step] = sat_add(freed[step], got);
                dmm_lock_acquire(&g->lock);
                g->c.reclaim_calls[step]++;
                g->c.reclaim_freed[step] = sat_add(g->c.reclaim_freed[step], got);
                a = attempt_locked(g, r);
                dmm_lock_release(&g->lock);
            }
        dmm_lock_acquire(&g->lock);
        for (size_t i = 0; i < n; i++) unpin_locked(g, ask[i]);
        if (a == ATTEMPT_GRANTED && laddered) g->c.grants_after_reclaim++;
        free(ask);
    }
    if (a == ATTEMPT_SHORT) g->c.refusals++;
    const char *holder = r->holder_name[0] != '\0' ? r->holder_name : "?";
    dmm_device device = r->tier != NULL ? r->tier->device : (dmm_device){DMM_TIER_DEVICE, -1};
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
            r->op, tier_name(device.tier), (int)device.index, axis_name(r->axis), dmm_role_name(r->role), holder,
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
                             r->op, (unsigned long long)r->add[r->axis], axis_name(r->axis),
                             tier_name(device.tier), (int)device.index, (unsigned long long)r->used);
    case ATTEMPT_GONE:
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: lease %llu is not live in this governor (released already, or never issued "
                             "by it); nothing was charged",
                             r->op, (unsigned long long)r->id);
    case ATTEMPT_WRONG_DEVICE:
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "%s: a charge for %s:%d through lease %llu, which is on tier %s:%d; give each "
                             "device's mechanism an accounting hook of a lease on that device",
                             r->op, tier_name(r->expect->tier), (int)r->expect->index,
                             (unsigned long long)r->id, tier_name(device.tier), (int)device.index);
    case ATTEMPT_LEAVING:
        return dmm_error_set(DMM_ERR_BUSY, "%s: holder '%s' is being unregistered; no new lease is granted",
                             r->op, holder);
    case ATTEMPT_NO_MEMORY:
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: out of host memory growing the lease table", r->op);
    }
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: internal error", r->op);
}

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
    map_remove(g, l->id);
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

dmm_status dmm_lease_reserve(dmm_holder *h, dmm_device device, dmm_role role, uint64_t owned, uint64_t mapped,
                             dmm_lease_id *out) {
    if (h == NULL || out == NULL || (unsigned)role >= DMM_ROLE_COUNT || !device_valid(device))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_lease_reserve: holder %p, out %p, role %d, tier %d index %d: pass a holder, "
                             "an out pointer, a dmm_role and a valid device",
                             (void *)h, (void *)out, (int)role, (int)device.tier, (int)device.index);
    *out = 0;
    dmm_governor *g = h->g;
    lease *l = calloc(1, sizeof *l);
    if (l == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_lease_reserve: out of host memory");
    dmm_lock_acquire(&g->lock);
    tier *t = tier_find(g, device);
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
                             tier_name(device.tier), (int)device.index);
    }
    l->holder = h;
    l->tier = t;
    l->role = role;
    charge_req r = {.op = "dmm_lease_reserve", .fresh = l, .add = {owned, mapped}};
    dmm_status st = charge(g, &r);
    dmm_lock_acquire(&g->lock);
    unpin_locked(g, h);
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
    return charge(g, &r);
}

dmm_status dmm_lease_shrink(dmm_governor *g, dmm_lease_id id, uint64_t owned, uint64_t mapped) {
    if (g == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_shrink: the governor is NULL");
    uint64_t sub[2] = {owned, mapped};
    dmm_lock_acquire(&g->lock);
    lease *l = map_find(g, id);
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
                             (unsigned long long)id, (unsigned long long)free_by_hand[bad], axis_name(bad),
                             (unsigned long long)bound, (unsigned long long)sub[bad]);
    return DMM_OK;
}

dmm_status dmm_lease_release(dmm_governor *g, dmm_lease_id id) {
    if (g == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_lease_release: the governor is NULL");
    dmm_lock_acquire(&g->lock);
    lease *l = map_find(g, id);
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
    const lease *l = map_find(g, id);
    uint64_t o = l ? l->used[0] : 0, m = l ? l->used[1] : 0;
    dmm_lock_release(&g->lock);
    if (l == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_lease_usage: lease %llu is not live in this governor", (unsigned long long)id);
    if (owned) *owned = o;
    if (mapped) *mapped = m;
    return DMM_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* the accounting hook */

static dmm_status acct_charge(void *user, dmm_device device, dmm_axis axis, uint64_t bytes) {
    binding *b = user;
    if (axis != DMM_AXIS_OWNED && axis != DMM_AXIS_MAPPED)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "governor accounting charge: axis %d is neither owned "
                                                       "nor mapped", (int)axis);
    charge_req r = {.op = "governor accounting charge", .id = b->lease, .bound = true, .expect = &device};
    r.add[axis] = bytes;
    return charge(b->g, &r);
}

static void acct_refund(void *user, dmm_device device, dmm_axis axis, uint64_t bytes) {
    binding *b = user;
    dmm_governor *g = b->g;
    if (bytes == 0) return;
    bool stray = axis != DMM_AXIS_OWNED && axis != DMM_AXIS_MAPPED;
    uint64_t bound = 0;
    dmm_lock_acquire(&g->lock);
    lease *l = stray ? NULL : map_find(g, b->lease);
    if (l == NULL || device_cmp(l->tier->device, device) != 0 || bytes > l->bound[axis]) {
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
        dmm__log(DMM_LOG_WARN,
                 "governor accounting refund: %llu bytes on the %s axis of %s:%d for lease %llu, which has only "
                 "%llu bound bytes there (released, another device, or refunded twice); ignored and counted as "
                 "stray",
                 (unsigned long long)bytes, axis_name(axis), tier_name(device.tier), (int)device.index,
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
    bool live = map_find(g, id) != NULL;
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

/* ---------------------------------------------------------------------------------------------- */
/* observing */

dmm_status dmm_governor_counters_get(dmm_governor *g, dmm_governor_counters *out) {
    if (g == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_governor_counters_get: governor %p, out %p: pass both", (void *)g, (void *)out);
    if (out->size < offsetof(dmm_governor_counters, reclaim_freed) + sizeof out->reclaim_freed)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "dmm_governor_counters_get: out->size is %u; set .size = "
                             "sizeof(dmm_governor_counters) (%zu in this build)",
                             out->size, sizeof(dmm_governor_counters));
    uint32_t size = out->size;
    dmm_lock_acquire(&g->lock);
    memcpy(out, &g->c, size < sizeof g->c ? size : sizeof g->c);
    dmm_lock_release(&g->lock);
    out->size = size;
    return DMM_OK;
}

static void put_limit(dmm_json *o, const char *key, uint64_t v) {
    if (v == DMM_UNLIMITED) dmm__json_put(o, "\"%s\":null", key);
    else dmm__json_put(o, "\"%s\":%llu", key, (unsigned long long)v);
}

dmm_status dmm_governor_snapshot_json(dmm_governor *g, char *buf, size_t cap, size_t *needed) {
    if (g == NULL || (buf == NULL && cap > 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_governor_snapshot_json: governor %p, buf %p with cap %zu: pass a governor and "
                             "a buffer (or cap 0 to ask for the length)",
                             (void *)g, (void *)buf, cap);
    dmm_json o = {buf, cap, 0};
    dmm_lock_acquire(&g->lock);
    dmm__json_put(&o, "{\"tiers\":[");
    for (size_t i = 0; i < g->ntiers; i++) {
        const tier *t = g->tiers[i];
        dmm_tier_usage u;
        usage_of(t, &u);
        dmm__json_put(&o, "%s{\"tier\":\"%s\",\"index\":%d,\"leases\":%u", i ? "," : "", tier_name(t->device.tier),
            (int)t->device.index, t->leases);
        for (int x = 0; x < 2; x++) {
            dmm__json_put(&o, ",\"%s\":{", axis_name(x));
            put_limit(&o, "limit", u.limit[x]);
            dmm__json_put(&o, ",\"used\":%llu,", (unsigned long long)u.used[x]);
            put_limit(&o, "available", u.available[x]);
            dmm__json_put(&o, ",\"peak\":%llu,\"oversubscribed\":%llu}", (unsigned long long)u.peak[x],
                (unsigned long long)u.oversubscribed[x]);
        }
        dmm__json_put(&o, ",\"roles\":{");
        for (int r = 0; r < DMM_ROLE_COUNT; r++)
            dmm__json_put(&o, "%s\"%s\":{\"owned\":%llu,\"mapped\":%llu}", r ? "," : "", dmm_role_name((dmm_role)r),
                (unsigned long long)t->role_used[r][0], (unsigned long long)t->role_used[r][1]);
        dmm__json_put(&o, "}}");
    }
    dmm__json_put(&o, "],\"holders\":[");
    const char *hsep = "";
    for (const dmm_holder *h = g->holders; h != NULL; h = h->next) {
        dmm__json_put(&o, "%s{\"name\":", hsep);
        dmm__json_string(&o, h->name);
        dmm__json_put(&o, ",\"priority\":%d,\"leases\":%u,\"usage\":[", (int)h->priority, h->nleases);
        const char *usep = "";
        for (size_t i = 0; i < g->ntiers; i++)
            for (int r = 0; r < DMM_ROLE_COUNT; r++) {
                uint64_t sum[2] = {0, 0};
                uint32_t n = 0;
                for (const lease *l = h->leases; l != NULL; l = l->next)
                    if (l->tier == g->tiers[i] && l->role == (dmm_role)r) {
                        n++;
                        sum[0] += l->used[0];
                        sum[1] += l->used[1];
                    }
                if (n == 0) continue;
                dmm__json_put(&o, "%s{\"tier\":\"%s\",\"index\":%d,\"role\":\"%s\",\"leases\":%u,\"owned\":%llu,\"mapped\":%llu}",
                    usep, tier_name(g->tiers[i]->device.tier), (int)g->tiers[i]->device.index,
                    dmm_role_name((dmm_role)r), n, (unsigned long long)sum[0], (unsigned long long)sum[1]);
                usep = ",";
            }
        dmm__json_put(&o, "]}");
        hsep = ",";
    }
    dmm__json_put(&o, "]}");
    dmm_lock_release(&g->lock);
    return dmm__json_finish(&o, needed, "dmm_governor_snapshot_json");
}
