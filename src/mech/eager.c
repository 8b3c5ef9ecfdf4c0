/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/eager.c — the eager mechanism: one driver alloc per allocation (malloc-like on host,
 * cuMemAlloc on CUDA). No capabilities: no virtual backing, no sharing.
 *
 * Idea: a record table keyed by the user pointer holds (ptr, bytes, align, id, base, driver_bytes)
 * for every live allocation; a release must present all of ptr, bytes, align and id, else FAILED
 * with nothing changed. A release claims its record under the lock (state RELEASING) before the
 * driver call, so two threads racing on one allocation make exactly one driver free; the loser gets
 * FAILED. The record is removed and the accounting refunded only after the driver's free succeeded.
 * Records are found by (ptr, id): between the driver's free and the removal of its record, the
 * driver may already have handed the same address to another allocation.
 *
 * Alignment: drivers hand out at least 256-byte-aligned memory (cuMemAlloc's promise; host gives
 * pages), so align ≤ 256 costs nothing; a larger align over-allocates bytes + align - 1 and hands
 * out the first aligned address. The accounting is charged, and a release reports as unmapped, the
 * driver's bytes (= bytes unless padded).
 *
 * Invariants (under `lock`):
 *   stats.allocations.current   = #records;  stats.allocated_bytes.current = Σ record.bytes
 *   stats.owned_bytes.current   = stats.mapped_bytes.current = Σ record.driver_bytes
 *   charged (owned and mapped axes) = Σ record.driver_bytes
 *   ids are issued once from next_id (starting at 1) and never reused.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/sorted.h"
#include "mech/mech_internal.h"
#include "driver/call.h"

#define EAGER_DEFAULT_ALIGN ((size_t)256)

typedef struct eager_rec {
    uintptr_t ptr;         /* the user pointer: the key */
    uintptr_t base;        /* what the driver returned */
    size_t bytes;          /* as requested */
    size_t align;          /* as handed out */
    size_t driver_bytes;   /* what the driver allocated and the accounting was charged */
    uint64_t id;
    bool releasing;        /* a release owns this record and is calling the driver */
} eager_rec;

typedef struct eager {
    dmm_driver *driver; /* not owned */
    dmm_accounting acct;
    bool has_acct;
    dmm_lock lock;
    eager_rec *recs; /* sorted by ptr */
    size_t n, cap;
    _Atomic uint64_t next_id;
    dmm_stats stats;
} eager;

/* First record at or after ptr (the one search: core/sorted.h). */
static size_t rec_lower(const eager *e, uintptr_t ptr) { return DMM_LOWER_BOUND(e->recs, e->n, eager_rec, ptr, ptr); }

/* The record at ptr with generation id, else the first record at ptr (index n if none). Several
 * records may share ptr for a moment: once the driver's free of a release in flight returned, the
 * driver may hand the address to a new allocation before the release has taken its record out. */
static size_t rec_find(const eager *e, uintptr_t ptr, uint64_t id) {
    size_t i = rec_lower(e, ptr);
    for (size_t j = i; j < e->n && e->recs[j].ptr == ptr; j++)
        if (e->recs[j].id == id) return j;
    return i;
}

static bool rec_insert(eager *e, const eager_rec *r) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        eager_rec *v = realloc(e->recs, cap * sizeof *v);
        if (v == NULL) return false;
        e->recs = v;
        e->cap = cap;
    }
    size_t i = rec_lower(e, r->ptr);
    memmove(&e->recs[i + 1], &e->recs[i], (e->n - i) * sizeof *e->recs);
    e->recs[i] = *r;
    e->n++;
    return true;
}

static void rec_remove(eager *e, size_t i) {
    memmove(&e->recs[i], &e->recs[i + 1], (e->n - i - 1) * sizeof *e->recs);
    e->n--;
}

/* Charges both axes, or neither. */
static dmm_status charge(eager *e, uint64_t bytes) {
    if (!e->has_acct) return DMM_OK;
    dmm_device_id dev = e->driver->device;
    dmm_status s = e->acct.charge(e->acct.user, dev, DMM_AXIS_OWNED, bytes);
    if (s != DMM_OK) return s;
    s = e->acct.charge(e->acct.user, dev, DMM_AXIS_MAPPED, bytes);
    if (s != DMM_OK) e->acct.refund(e->acct.user, dev, DMM_AXIS_OWNED, bytes);
    return s;
}

static void refund(eager *e, uint64_t bytes) {
    if (!e->has_acct) return;
    dmm_device_id dev = e->driver->device;
    e->acct.refund(e->acct.user, dev, DMM_AXIS_MAPPED, bytes);
    e->acct.refund(e->acct.user, dev, DMM_AXIS_OWNED, bytes);
}

/* Gives back a driver block that cannot become an allocation (its alloc already counted): freed and
 * refunded, or, when the free fails, left charged and counted as a rollback leak. True when it went. */
static bool undo_alloc(eager *e, uintptr_t base, size_t driver_bytes) {
    dmm_status fs = dmm__drv_free(e->driver, base, driver_bytes);
    if (fs == DMM_OK) refund(e, driver_bytes);
    dmm_lock_acquire(&e->lock);
    e->stats.driver_free++;
    if (fs != DMM_OK) {
        e->stats.driver_failures++;
        e->stats.rollback_leaks++;
    }
    dmm_lock_release(&e->lock);
    return fs == DMM_OK;
}

static dmm_status eager_allocate(void *impl, size_t bytes, size_t align, dmm_allocation *out) {
    eager *e = impl;
    if (align == 0) align = EAGER_DEFAULT_ALIGN;
    size_t driver_bytes = bytes;
    if (align > EAGER_DEFAULT_ALIGN && __builtin_add_overflow(bytes, align - 1, &driver_bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "eager: allocate of %zu bytes aligned to %zu overflows", bytes,
                             align);
    dmm_status s = charge(e, driver_bytes);
    if (s != DMM_OK) {
        char b[32];
        /* the hook's own sentence (a governor names tier, role, limit, …) when it wrote one */
        const char *why = dmm_last_status() == s ? dmm_last_error() : dmm_status_str(s);
        return dmm_error_set(s, "eager: allocate of %s (%zu bytes) refused by the accounting hook, nothing "
                                "allocated: %s",
                             dmm__fmt_bytes(driver_bytes, b, sizeof b), driver_bytes, why);
    }
    uintptr_t base = 0;
    s = dmm__drv_alloc(e->driver, driver_bytes, &base);
    if (s != DMM_OK) {
        refund(e, driver_bytes);
        dmm_lock_acquire(&e->lock);
        e->stats.driver_alloc++;
        e->stats.driver_failures++;
        dmm_lock_release(&e->lock);
        return dmm__error_wrap(s, "eager: allocate of %zu bytes (align %zu) on device (tier %d, index %d): the "
                                  "driver's alloc failed",
                               bytes, align, (int)e->driver->device.tier, (int)e->driver->device.index);
    }
    uintptr_t ptr = (base + align - 1) & ~(uintptr_t)(align - 1);
    bool fits = ptr + bytes <= base + driver_bytes; /* false: a driver below the 256-byte promise */
    eager_rec r = {ptr, base, bytes, align, driver_bytes, dmm_atomic_add_relaxed(&e->next_id, 1), false};
    dmm_lock_acquire(&e->lock);
    e->stats.driver_alloc++;
    bool ok = fits && rec_insert(e, &r);
    if (ok) {
        dmm_count_add(&e->stats.allocations, 1);
        dmm_count_add(&e->stats.allocated_bytes, (int64_t)bytes);
        dmm_count_add(&e->stats.owned_bytes, (int64_t)driver_bytes);
        dmm_count_add(&e->stats.mapped_bytes, (int64_t)driver_bytes);
    }
    dmm_lock_release(&e->lock);
    if (!ok) {
        const char *tail = undo_alloc(e, base, driver_bytes)
                               ? ""
                               : "; freeing it failed too, so it stays charged (counted in rollback_leaks)";
        if (!fits)
            return dmm_error_set(DMM_ERR_DRIVER,
                                 "eager: allocate of %zu bytes: driver '%s' returned %#llx, not %zu-byte aligned "
                                 "(drivers must give at least 256)%s",
                                 bytes, e->driver->ops->name, (unsigned long long)base, align, tail);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "eager: allocate of %zu bytes: no memory for the record table%s",
                             bytes, tail);
    }
    out->ptr = (void *)ptr;
    out->bytes = bytes;
    out->align = align;
    out->id = r.id;
    out->device = e->driver->device;
    return DMM_OK;
}

/* A release that fails with s, its sentence already set: called under the lock, counts it, lets the
 * lock go and returns FAILED. */
static dmm_release_outcome release_failed(eager *e, const dmm_allocation *a, dmm_status s) {
    e->stats.releases_failed++;
    dmm_lock_release(&e->lock);
    return dmm__outcome_failed(a->bytes, s);
}

static dmm_release_outcome eager_release(void *impl, const dmm_allocation *a) {
    eager *e = impl;
    uintptr_t ptr = (uintptr_t)a->ptr;
    dmm_lock_acquire(&e->lock);
    size_t i = rec_find(e, ptr, a->id);
    if (i >= e->n || e->recs[i].ptr != ptr) {
        dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                      "eager: release of %zu bytes at %p (id %llu) refused: no live allocation starts there "
                      "(released already, or never allocated here); nothing changed",
                      a->bytes, a->ptr, (unsigned long long)a->id);
        return release_failed(e, a, DMM_ERR_UNKNOWN_ALLOCATION);
    }
    eager_rec r = e->recs[i];
    /* A wrong id (a stale copy) or, at the right id, a wrong size (an altered handle): either way no
     * live allocation matches (ptr, bytes, align, id), DMM_ERR_UNKNOWN_ALLOCATION (status.h), the
     * same code the arena gives. */
    if (r.id != a->id) {
        dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                      "eager: release at %p refused: the handle carries id %llu but the live allocation there has "
                      "id %llu (bytes %zu, align %zu): the handle is a stale copy of an earlier allocation at the "
                      "same address and cannot release the new one; release the handle allocate returned for it; "
                      "nothing changed",
                      a->ptr, (unsigned long long)a->id, (unsigned long long)r.id, r.bytes, r.align);
        return release_failed(e, a, DMM_ERR_UNKNOWN_ALLOCATION);
    }
    if (r.bytes != a->bytes || r.align != a->align) {
        dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                      "eager: release at %p (id %llu) refused: the handle says bytes %zu, align %zu but the live "
                      "allocation there has bytes %zu, align %zu: the handle was altered after allocate; pass the "
                      "value allocate returned, unmodified; nothing changed",
                      a->ptr, (unsigned long long)a->id, a->bytes, a->align, r.bytes, r.align);
        return release_failed(e, a, DMM_ERR_UNKNOWN_ALLOCATION);
    }
    if (r.releasing) {
        dmm_error_set(DMM_ERR_BUSY,
                      "eager: release of %zu bytes at %p (id %llu) refused: another release of it is in flight; "
                      "nothing changed",
                      a->bytes, a->ptr, (unsigned long long)a->id);
        return release_failed(e, a, DMM_ERR_BUSY);
    }
    e->recs[i].releasing = true; /* claimed: exactly one driver free per allocation */
    dmm_lock_release(&e->lock);

    dmm_status s = dmm__drv_free(e->driver, r.base, r.driver_bytes);

    dmm_lock_acquire(&e->lock);
    i = rec_find(e, ptr, r.id); /* others may have moved the table, or reused the address */
    e->stats.driver_free++;
    if (s != DMM_OK) {
        e->recs[i].releasing = false;
        e->stats.driver_failures++;
        dmm__error_wrap(s,
                        "eager: release of %zu bytes at %p (id %llu): the driver's free failed, so nothing changed "
                        "and the allocation is still live (release it again later)",
                        a->bytes, a->ptr, (unsigned long long)a->id);
        return release_failed(e, a, s);
    }
    rec_remove(e, i);
    dmm_count_sub(&e->stats.allocations, 1);
    dmm_count_sub(&e->stats.allocated_bytes, (int64_t)r.bytes);
    dmm_count_sub(&e->stats.owned_bytes, (int64_t)r.driver_bytes);
    dmm_count_sub(&e->stats.mapped_bytes, (int64_t)r.driver_bytes);
    e->stats.releases_complete++;
    dmm_lock_release(&e->lock);
    refund(e, r.driver_bytes); /* outside the lock: the hook may take its own */
    return dmm__outcome_complete(r.bytes, r.driver_bytes);
}

static dmm_device_id eager_device(void *impl) { return ((eager *)impl)->driver->device; }

static dmm_status eager_stats(void *impl, dmm_stats *out) {
    eager *e = impl;
    dmm_lock_acquire(&e->lock);
    dmm_stats s = e->stats;
    dmm_lock_release(&e->lock);
    s.size = sizeof s;
    return dmm__stats_copy_out(&s, out);
}

static dmm_status eager_destroy(void *impl) {
    eager *e = impl;
    dmm_lock_acquire(&e->lock);
    size_t n = e->n;
    int64_t bytes = e->stats.allocated_bytes.current;
    dmm_lock_release(&e->lock);
    if (n != 0)
        return dmm_error_set(DMM_ERR_BUSY,
                             "eager: destroy refused: %zu allocation(s) of %lld bytes are still live; release them "
                             "first (nothing changed)",
                             n, (long long)bytes);
    dmm_lock_destroy(&e->lock);
    free(e->recs);
    free(e);
    return DMM_OK;
}

static const dmm_mechanism_ops eager_ops = {
    .size = sizeof(dmm_mechanism_ops),
    .name = "eager",
    .allocate = eager_allocate,
    .release = eager_release,
    .device = eager_device,
    .stats = eager_stats,
    .destroy = eager_destroy,
    .virtual_backing = NULL,
    .shared_mapping = NULL,
    .deferred_release = NULL,
};

dmm_status dmm_eager_create(dmm_driver *driver, const dmm_eager_config *cfg, dmm_mechanism **out) {
    if (driver == NULL || driver->ops == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_eager_create: the driver (%p) and the output (%p) must be non-NULL", (void *)driver,
                             (void *)out);
    if (driver->ops->alloc == NULL || driver->ops->free == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_eager_create: driver '%s' has no eager alloc/free; the eager mechanism needs both",
                             driver->ops->name ? driver->ops->name : "(unnamed)");
    const dmm_accounting *acct = NULL;
    if (cfg != NULL) {
        if (cfg->size < sizeof *cfg)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "dmm_eager_create: the config's size is %u bytes; set .size = "
                                 "sizeof(dmm_eager_config) (%zu)",
                                 cfg->size, sizeof *cfg);
        acct = cfg->accounting;
        if (acct != NULL && (acct->charge == NULL || acct->refund == NULL))
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "dmm_eager_create: the accounting hook needs both charge and refund");
    }
    eager *e = calloc(1, sizeof *e);
    if (e == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_eager_create: out of memory");
    e->driver = driver;
    if (acct != NULL) {
        e->acct = *acct;
        e->has_acct = true;
    }
    dmm_lock_init(&e->lock);
    atomic_init(&e->next_id, 1);
    e->stats.size = sizeof e->stats;
    dmm_status s = dmm_mechanism_create(&eager_ops, e, out);
    if (s != DMM_OK) {
        dmm_lock_destroy(&e->lock);
        free(e);
    }
    return s;
}
