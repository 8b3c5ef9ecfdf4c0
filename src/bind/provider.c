/* SPDX-License-Identifier: Apache-2.0 */
/* src/bind/provider.c — one consumer's binding to exactly one mechanism (DESIGN §4.7,
 * include/dmm/provider.h).
 *
 * The idea: the choice of mechanism is a one-time decision. Until the first allocation succeeds it
 * can be replaced once; from then on `mech` is frozen, `in_use` is set (release order), and the hot
 * path reads both without a lock. Before that, allocate counts itself in `inflight` under the lock so
 * that a replacement can never swap the mechanism under an allocation that is still running.
 *
 * The trade-off: "has the mechanism been used" is asked of the mechanism's own stats as well as of
 * this provider's counter, because a caller-supplied mechanism may have served allocations directly;
 * a mechanism without stats is judged by this provider's counter alone.
 *
 * Invariants:
 *   in_use ⇒ mech never changes again and replaced-or-not is final;
 *   replaced ≤ 1; inflight > 0 ⇒ no replacement; owns_mech ⇒ mech was created here and is destroyed here;
 *   every allocation made through the provider has a.mechanism == mech.
 * Lock order: provider → mechanism (a replacement consults the mechanism's stats under the lock).
 *
 * Exports: the calls of dmm/provider.h; the name and in-use queries are internal
 * (bind/provider_internal.h), for the tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bind/provider_internal.h"
#include "core/core.h"

struct dmm_provider {
    dmm_lock lock;
    char name[64];
    dmm_device_id device;
    dmm_mechanism *mech;
    bool owns_mech;    /* created by the provider (the default) */
    bool replaced;     /* the one replacement has happened */
    uint32_t inflight; /* allocations running before in_use (under lock) */
    atomic_bool in_use;
};

static bool same_device(dmm_device_id a, dmm_device_id b) { return a.tier == b.tier && a.index == b.index; }

static const char *tier_word(dmm_tier t) {
    return t == DMM_TIER_DEVICE ? "device" : t == DMM_TIER_HOST ? "host" : t == DMM_TIER_DISK ? "disk" : "?";
}

static bool driver_has_vmm(const dmm_driver *d) {
    return d->ops->reserve != NULL && d->ops->create != NULL && d->ops->map != NULL;
}

dmm_status dmm_provider_create(dmm_driver *driver, const dmm_provider_config *cfg, dmm_provider **out) {
    if (out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_provider_create: out is NULL; pass the address of a "
                                                       "dmm_provider pointer");
    *out = NULL;
    if (cfg != NULL && cfg->size < offsetof(dmm_provider_config, accounting) + sizeof(void *))
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "dmm_provider_create: the config's size is %u; set .size = sizeof(dmm_provider_config) "
                             "(%zu in this build)",
                             cfg->size, sizeof(dmm_provider_config));
    dmm_mechanism *given = cfg != NULL ? cfg->mechanism : NULL;
    const char *name = cfg != NULL && cfg->name != NULL && cfg->name[0] != '\0' ? cfg->name : "provider";
    if (given == NULL && (driver == NULL || driver->ops == NULL))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_provider_create: provider '%s' has neither a driver nor a mechanism; pass the "
                             "driver of its device (or a mechanism in the config)",
                             name);
    dmm_device_id device = given != NULL ? dmm_mechanism_device(given) : driver->device;
    if (given != NULL && driver != NULL && !same_device(driver->device, device))
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "dmm_provider_create: provider '%s': the mechanism '%s' is on %s:%d but the driver on "
                             "%s:%d; pass a mechanism of the provider's device",
                             name, dmm_mechanism_name(given), tier_word(device.tier), (int)device.index,
                             tier_word(driver->device.tier), (int)driver->device.index);
    dmm_provider *p = calloc(1, sizeof *p);
    if (p == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_provider_create: out of host memory");
    snprintf(p->name, sizeof p->name, "%s", name);
    p->device = device;
    if (given != NULL) {
        p->mech = given;
    } else {
        const dmm_accounting *acct = cfg != NULL ? cfg->accounting : NULL;
        dmm_status s;
        const char *kind;
        if (driver_has_vmm(driver)) {
            kind = "arena";
            dmm_arena_config ac;
            memset(&ac, 0, sizeof ac);
            if (cfg != NULL && cfg->arena != NULL) {
                uint32_t n = cfg->arena->size < sizeof ac ? cfg->arena->size : (uint32_t)sizeof ac;
                memcpy(&ac, cfg->arena, n);
            }
            ac.size = sizeof ac;
            if (acct != NULL) ac.accounting = acct;
            s = dmm_arena_create(driver, &ac, &p->mech);
        } else {
            kind = "eager";
            dmm_eager_config ec = {sizeof ec, acct};
            s = dmm_eager_create(driver, &ec, &p->mech);
        }
        if (s != DMM_OK) {
            dmm__error_wrap(s, "dmm_provider_create: provider '%s' could not create its default %s mechanism on %s:%d",
                            name, kind, tier_word(device.tier), (int)device.index);
            free(p);
            return s;
        }
        p->owns_mech = true;
    }
    dmm_lock_init(&p->lock);
    atomic_init(&p->in_use, false);
    *out = p;
    return DMM_OK;
}

dmm_status dmm_provider_destroy(dmm_provider *p) {
    if (p == NULL) return DMM_OK;
    dmm_lock_acquire(&p->lock);
    uint32_t inflight = p->inflight;
    dmm_lock_release(&p->lock);
    if (inflight > 0)
        return dmm_error_set(DMM_ERR_BUSY, "dmm_provider_destroy: provider '%s' has %u allocations in flight",
                             p->name, inflight);
    if (p->owns_mech) {
        dmm_status s = dmm_mechanism_destroy(p->mech);
        if (s != DMM_OK) /* the provider stays usable; the mechanism's destroy may have given cached memory back */
            return dmm__error_wrap(s,
                                   "dmm_provider_destroy: provider '%s' kept, with its live allocations: its mechanism "
                                   "'%s' could not be destroyed",
                                   p->name, dmm_mechanism_name(p->mech));
    }
    dmm_lock_destroy(&p->lock);
    free(p);
    return DMM_OK;
}

/* Under the lock: why the current mechanism can no longer be replaced, or NULL. */
static const char *in_use_reason(dmm_provider *p, char *buf, size_t cap) {
    if (dmm_atomic_load_acquire(&p->in_use)) {
        snprintf(buf, cap, "it has served an allocation through this provider");
        return buf;
    }
    if (p->inflight > 0) {
        snprintf(buf, cap, "%u allocations through this provider are in flight", p->inflight);
        return buf;
    }
    dmm_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (dmm_mechanism_stats(p->mech, &st) != DMM_OK) {
        dmm_clear_error(); /* no stats: judged by this provider's counters alone */
        return NULL;
    }
    if (st.allocations.total > 0 || st.allocations.current > 0) {
        snprintf(buf, cap, "it has served %lld allocations (%lld live)", (long long)st.allocations.total,
                 (long long)st.allocations.current);
        return buf;
    }
    if (st.committed_bytes.current > 0 || st.mapped_bytes.current > 0) {
        snprintf(buf, cap, "it holds %lld committed and %lld mapped bytes", (long long)st.committed_bytes.current,
                 (long long)st.mapped_bytes.current);
        return buf;
    }
    return NULL;
}

dmm_status dmm_provider_replace_mechanism(dmm_provider *p, dmm_mechanism *m) {
    if (p == NULL || m == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_provider_replace_mechanism: provider %p, mechanism %p: pass both", (void *)p,
                             (void *)m);
    dmm_device_id md = dmm_mechanism_device(m);
    if (!same_device(md, p->device))
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "dmm_provider_replace_mechanism: provider '%s' is bound to %s:%d, and mechanism '%s' is "
                             "on %s:%d; nothing changed; a provider's mechanism is of its own device",
                             p->name, tier_word(p->device.tier), (int)p->device.index, dmm_mechanism_name(m),
                             tier_word(md.tier), (int)md.index);
    char why[160];
    dmm_lock_acquire(&p->lock);
    const char *refusal = NULL;
    const char *cause = NULL; /* a failed destroy's sentence: still the last error at the refusal (nothing
                               * between sets one) */
    dmm_status code = DMM_OK;
    if (m == p->mech) {
        refusal = "it already is this provider's mechanism";
        code = DMM_ERR_INVALID_ARGUMENT;
    } else if (p->replaced) {
        refusal = "the mechanism was replaced once already (a provider's mechanism is chosen at creation or "
                  "replaced once before first use)";
        code = DMM_ERR_INVALID_ARGUMENT;
    } else if ((refusal = in_use_reason(p, why, sizeof why)) != NULL) {
        code = DMM_ERR_BUSY;
    }
    dmm_mechanism *old = p->mech;
    char old_name[64];
    snprintf(old_name, sizeof old_name, "%s", dmm_mechanism_name(old));
    if (refusal == NULL && p->owns_mech) {
        /* Destroyed under the lock so that no allocation can start on it meanwhile; it is unused. */
        if (dmm_mechanism_destroy(old) != DMM_OK) {
            refusal = "destroying the current mechanism failed";
            cause = dmm_last_error();
            code = DMM_ERR_BUSY;
        }
    }
    if (refusal == NULL) {
        p->mech = m;
        p->owns_mech = false;
        p->replaced = true;
    }
    dmm_lock_release(&p->lock);
    if (refusal != NULL)
        return dmm_error_set(code,
                             "dmm_provider_replace_mechanism: provider '%s' keeps mechanism '%s' (nothing changed): "
                             "%s%s%.100s; choose the mechanism before the first allocation, or create another "
                             "provider",
                             p->name, old_name, refusal, cause != NULL ? ": " : "", cause != NULL ? cause : "");
    return DMM_OK;
}

dmm_mechanism *dmm_provider_mechanism(dmm_provider *p) {
    if (p == NULL) return NULL;
    if (dmm_atomic_load_acquire(&p->in_use)) return p->mech;
    dmm_lock_acquire(&p->lock);
    dmm_mechanism *m = p->mech;
    dmm_lock_release(&p->lock);
    return m;
}

const char *dmm__provider_name(const dmm_provider *p) { return p != NULL ? p->name : "(null provider)"; }

bool dmm__provider_in_use(dmm_provider *p) {
    return p != NULL && dmm_atomic_load_acquire(&p->in_use);
}

/* The mechanism to allocate from; before first use it is pinned by inflight. */
static dmm_mechanism *begin_allocation(dmm_provider *p, bool *pinned) {
    if (dmm_atomic_load_acquire(&p->in_use)) {
        *pinned = false;
        return p->mech;
    }
    dmm_lock_acquire(&p->lock);
    p->inflight++;
    dmm_mechanism *m = p->mech;
    dmm_lock_release(&p->lock);
    *pinned = true;
    return m;
}

static void end_allocation(dmm_provider *p, bool pinned, dmm_status s) {
    if (!pinned) return;
    dmm_lock_acquire(&p->lock);
    p->inflight--;
    if (s == DMM_OK) dmm_atomic_store_release(&p->in_use, true);
    dmm_lock_release(&p->lock);
}

dmm_status dmm_provider_allocate(dmm_provider *p, size_t bytes, size_t align, dmm_allocation *out) {
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_provider_allocate: the provider is NULL");
    bool pinned;
    dmm_mechanism *m = begin_allocation(p, &pinned);
    dmm_status s = dmm_mechanism_allocate(m, bytes, align, out);
    end_allocation(p, pinned, s);
    return s;
}

dmm_status dmm_provider_allocate_committed(dmm_provider *p, size_t bytes, size_t align, const dmm_range *ranges,
                                           size_t n, dmm_allocation *out) {
    if (p == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_provider_allocate_committed: the provider is NULL");
    bool pinned;
    dmm_mechanism *m = begin_allocation(p, &pinned);
    dmm_status s = dmm_mechanism_allocate_committed(m, bytes, align, ranges, n, out);
    end_allocation(p, pinned, s);
    return s;
}

dmm_release_outcome dmm_provider_release(dmm_provider *p, const dmm_allocation *a) {
    dmm_release_outcome failed = {DMM_RELEASE_FAILED, 0, 0, 0, DMM_ERR_INVALID_ARGUMENT, 0};
    if (p == NULL || a == NULL) {
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_provider_release: provider %p, allocation %p: pass both; "
                                                "nothing changed", (void *)p, (const void *)a);
        return failed;
    }
    failed.allocation_bytes = a->bytes;
    dmm_mechanism *m = dmm_provider_mechanism(p);
    if (a->mechanism != m) {
        failed.failure = dmm_error_set(DMM_ERR_WRONG_MECHANISM,
                                       "dmm_provider_release: allocation %llu (%zu bytes at %p) belongs to mechanism "
                                       "%p, not to provider '%s''s mechanism '%s'; nothing changed; release it "
                                       "through the mechanism (or provider) that made it",
                                       (unsigned long long)a->id, a->bytes, a->ptr, (void *)a->mechanism, p->name,
                                       dmm_mechanism_name(m));
        return failed;
    }
    return dmm_mechanism_release(a->mechanism, a);
}
