/* SPDX-License-Identifier: Apache-2.0 */
/* src/gov/governor.c — budgets per tier, leases per holder and role, and the reclaim ladder
 * (DESIGN §4.8, include/dmm/governor.h). This file owns the governor object: create/destroy, the
 * tiers and their limits, the holders, and observing (counters, snapshot JSON); leases.c owns the
 * leases and the accounting hook, reclaim.c the charge and its ladder (gov_internal.h).
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
 *   l.used[x] ≤ l.peak[x] and l.used[x] ≤ l.charged[x] (the lease's stats: dmm_lease_stats_get)
 *   t.used[x] ≤ t.limit[x] unless the limit was lowered below it (nothing is ever revoked)
 *   t.peak[x] ≥ t.used[x];  no counter wraps: every increase is checked on t.used, which bounds the rest
 *   a lease id is in leases_by_id ⇔ the lease is live; ids come from a 64-bit counter and are never reused
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "driver/call.h"
#include "gov/gov_internal.h"

_Thread_local const dmm_holder *dmm__gov_in_reclaim;

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

/* ---------------------------------------------------------------------------------------------- */
/* tiers */

tier *dmm__gov_tier_find(const dmm_governor *g, dmm_device_id d) {
    for (size_t i = 0; i < g->ntiers; i++)
        if (dmm__gov_device_cmp(g->tiers[i]->device, d) == 0) return g->tiers[i];
    return NULL;
}

/* Under the lock. NULL when memory ran out. */
static tier *tier_find_or_add(dmm_governor *g, dmm_device_id d) {
    tier *t = dmm__gov_tier_find(g, d);
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
    while (at > 0 && dmm__gov_device_cmp(g->tiers[at - 1]->device, d) > 0) {
        g->tiers[at] = g->tiers[at - 1];
        at--;
    }
    g->tiers[at] = t;
    g->ntiers++;
    return t;
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
    dmm_device_id host = {DMM_TIER_HOST, 0}, disk = {DMM_TIER_DISK, 0};
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
    dmm__u64map_fini(&g->leases_by_id);
    for (binding *b = g->bindings, *next; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    pthread_cond_destroy(&g->unpinned);
    dmm_lock_destroy(&g->lock);
    free(g);
    return DMM_OK;
}

static dmm_status set_limit_locked(dmm_governor *g, dmm_device_id device, dmm_axis axis, uint64_t limit) {
    tier *t = tier_find_or_add(g, device);
    if (t == NULL) return DMM_ERR_OUT_OF_MEMORY;
    t->limit[axis] = limit;
    return DMM_OK;
}

dmm_status dmm_governor_set_limit(dmm_governor *g, dmm_device_id device, dmm_axis axis, uint64_t limit) {
    if (g == NULL || !dmm__gov_device_valid(device) || (axis != DMM_AXIS_OWNED && axis != DMM_AXIS_MAPPED))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_governor_set_limit: governor %p, tier %d index %d, axis %d: pass a governor, "
                             "a device tier (device/host/disk, index ≥ 0) and DMM_AXIS_OWNED or DMM_AXIS_MAPPED",
                             (void *)g, (int)device.tier, (int)device.index, (int)axis);
    dmm_lock_acquire(&g->lock);
    dmm_status st = set_limit_locked(g, device, axis, limit);
    dmm_lock_release(&g->lock);
    if (st != DMM_OK)
        return dmm_error_set(st, "dmm_governor_set_limit: out of host memory adding tier %s:%d",
                             dmm__gov_tier_name(device.tier), (int)device.index);
    return DMM_OK;
}

/* free × permille / 1000 without overflow. */
static uint64_t apply_margin(uint64_t free_bytes, uint32_t permille) {
    return free_bytes / 1000 * permille + free_bytes % 1000 * permille / 1000;
}

dmm_status dmm_governor_add_device(dmm_governor *g, dmm_driver *driver) {
    if (g == NULL || driver == NULL || driver->ops == NULL || !dmm__gov_device_valid(driver->device))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_governor_add_device: governor %p, driver %p: pass a governor and a driver "
                             "with ops and a valid device",
                             (void *)g, (void *)driver);
    if (driver->ops->mem_info == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_governor_add_device: driver '%s' has no mem_info, so the free memory of "
                             "%s:%d is unknown; set the limit with dmm_governor_set_limit instead",
                             driver->ops->name ? driver->ops->name : "?", dmm__gov_tier_name(driver->device.tier),
                             (int)driver->device.index);
    uint64_t free_bytes = 0, total_bytes = 0;
    dmm_status st = dmm__drv_mem_info(driver, &free_bytes, &total_bytes); /* no lock held */
    if (st != DMM_OK)
        return dmm__error_wrap(st,
                               "dmm_governor_add_device: reading the free memory of %s:%d failed (%s); set the "
                               "limit with dmm_governor_set_limit instead",
                               dmm__gov_tier_name(driver->device.tier), (int)driver->device.index,
                               dmm_status_str(st));
    uint64_t limit = apply_margin(free_bytes, g->margin_permille);
    dmm_lock_acquire(&g->lock);
    st = set_limit_locked(g, driver->device, DMM_AXIS_OWNED, limit);
    dmm_lock_release(&g->lock);
    if (st != DMM_OK)
        return dmm_error_set(st, "dmm_governor_add_device: out of host memory adding tier %s:%d",
                             dmm__gov_tier_name(driver->device.tier), (int)driver->device.index);
    dmm_log(DMM_LOG_INFO, "governor: tier %s:%d limited to %llu bytes (%u per mille of %llu free)",
             dmm__gov_tier_name(driver->device.tier), (int)driver->device.index, (unsigned long long)limit,
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

dmm_status dmm_governor_tier_usage(dmm_governor *g, dmm_device_id device, dmm_tier_usage *out) {
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
    const tier *t = dmm__gov_tier_find(g, device);
    if (t != NULL) usage_of(t, &u);
    dmm_lock_release(&g->lock);
    if (t == NULL)
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "dmm_governor_tier_usage: tier %s:%d has no budget in this governor; add it with "
                             "dmm_governor_add_device or dmm_governor_set_limit",
                             dmm__gov_tier_name(device.tier), (int)device.index);
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

uint64_t dmm_holder_reclaim(dmm_holder *h, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted) {
    /* reclaim and user are set once at registration: no lock; the caller owns h, so it is registered */
    if (h == NULL || h->reclaim == NULL) return 0;
    return h->reclaim(h->user, device, step, wanted);
}

dmm_status dmm_governor_holder_unregister(dmm_holder *h) {
    if (h == NULL) return DMM_OK;
    dmm_governor *g = h->g;
    if (dmm__gov_in_reclaim != NULL)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_governor_holder_unregister: called from inside the reclaim callback of holder "
                             "'%s'; unregister after the callback returned",
                             dmm__gov_in_reclaim->name);
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
        dmm__json_put(&o, "%s{\"tier\":\"%s\",\"index\":%d,\"leases\":%u", i ? "," : "",
            dmm__gov_tier_name(t->device.tier),
            (int)t->device.index, t->leases);
        for (int x = 0; x < 2; x++) {
            dmm__json_put(&o, ",\"%s\":{", dmm__gov_axis_name(x));
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
                    usep, dmm__gov_tier_name(g->tiers[i]->device.tier), (int)g->tiers[i]->device.index,
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
