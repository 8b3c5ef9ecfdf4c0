/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/mechanism.c — the generic mechanism: one implementation object behind one ops table,
 * with optional capability sub-tables of the same table (DESIGN §4.4).
 *
 * What it owns: the wrapper (ops, impl, capability bits), the argument checks every mechanism
 * shares, and the allocation identity fields the wrapper is responsible for (mechanism, device).
 *
 * Idea: the wrapper is immutable after create, so every call is a few checks and one indirect
 * call: no lock. It checks what is generic (NULLs, power-of-two alignments, ranges inside the
 * allocation, "does this allocation belong to me", "do I have this capability") and leaves the
 * allocation's identity (ptr, bytes, align, id against the live record) to the implementation.
 * After an implementation's allocate succeeds, the wrapper stamps out->mechanism and out->device,
 * so an implementation never needs to know its wrapper (src/mech/mech_internal.h). The optional
 * virtual-backing slots are asked for by number (dmm_optional_slot): one table maps each number to
 * its place in the ops table and its name, so a lookup is an index, never a string compare.
 *
 * Invariants: caps has DMM_CAP_VIRTUAL_BACKING ⇔ ops->virtual_backing != NULL (with all its slots),
 * DMM_CAP_SHARED_MAPPING ⇔ ops->shared_mapping != NULL (with all its slots);
 * a call for a missing capability returns DMM_ERR_UNSUPPORTED and never reaches the implementation;
 * a release-shaped call refused here reports FAILED (nothing changed). Release-outcome counters are
 * kept by the implementations, which see every outcome they produce.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dmm/prefix.h"
#include "dmm/share.h"
#include "mech/mech_internal.h"

#define NAME(m) ((m)->ops->name)

const char *dmm_release_state_str(uint32_t state) {
    switch (state) {
    case DMM_RELEASE_COMPLETE: return "DMM_RELEASE_COMPLETE";
    case DMM_RELEASE_QUARANTINED: return "DMM_RELEASE_QUARANTINED";
    case DMM_RELEASE_FAILED: return "DMM_RELEASE_FAILED";
    }
    return "DMM_RELEASE_UNKNOWN (read as QUARANTINED)";
}

dmm_status dmm_mechanism_create(const dmm_mechanism_ops *ops, void *impl, dmm_mechanism **out) {
    if (out == NULL || ops == NULL || impl == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_mechanism_create: ops (%p), impl (%p) and out (%p) must all be non-NULL",
                             (const void *)ops, impl, (void *)out);
    if (ops->size < sizeof *ops)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "dmm_mechanism_create: ops->size is %u bytes, below sizeof(dmm_mechanism_ops) = %zu; "
                             "set .size = sizeof(dmm_mechanism_ops)",
                             ops->size, sizeof *ops);
    const char *name = ops->name != NULL ? ops->name : "(unnamed)";
    const char *missing = ops->name == NULL       ? "name"
                          : ops->allocate == NULL ? "allocate"
                          : ops->release == NULL  ? "release"
                          : ops->device == NULL   ? "device"
                                                  : NULL;
    if (missing != NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_mechanism_create: mechanism '%s' lacks the required slot '%s' (name, allocate, "
                             "release and device are required)",
                             name, missing);
    uint32_t caps = 0;
    const dmm_virtual_backing_ops *vb = ops->virtual_backing;
    if (vb != NULL) {
        if (vb->size < DMM_VIRTUAL_BACKING_OPS_REQUIRED_SIZE)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "dmm_mechanism_create: mechanism '%s': virtual_backing->size is %u bytes, below "
                                 "the %zu bytes of its required slots; set .size = sizeof(dmm_virtual_backing_ops)",
                                 name, vb->size, (size_t)DMM_VIRTUAL_BACKING_OPS_REQUIRED_SIZE);
        missing = vb->allocate_committed == NULL        ? "allocate_committed"
                  : vb->commit == NULL                  ? "commit"
                  : vb->decommit == NULL                ? "decommit"
                  : vb->committed_bytes == NULL         ? "committed_bytes"
                  : vb->mapped_bytes_for_ranges == NULL ? "mapped_bytes_for_ranges"
                                                        : NULL;
        if (missing != NULL)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "dmm_mechanism_create: mechanism '%s': its virtual_backing table lacks the slot "
                                 "'%s'; a capability table must fill every slot",
                                 name, missing);
        caps |= DMM_CAP_VIRTUAL_BACKING;
    }
    const dmm_shared_mapping_ops *sm = ops->shared_mapping;
    if (sm != NULL) {
        if (sm->size < sizeof *sm)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "dmm_mechanism_create: mechanism '%s': shared_mapping->size is %u bytes, below "
                                 "sizeof(dmm_shared_mapping_ops) = %zu",
                                 name, sm->size, sizeof *sm);
        missing = sm->prefix_create == NULL    ? "prefix_create"
                  : sm->prefix_commit == NULL  ? "prefix_commit"
                  : sm->prefix_cost == NULL    ? "prefix_cost"
                  : sm->prefix_release == NULL ? "prefix_release"
                                               : NULL;
        if (missing != NULL)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "dmm_mechanism_create: mechanism '%s': its shared_mapping table lacks the slot "
                                 "'%s'; a capability table must fill every slot",
                                 name, missing);
        caps |= DMM_CAP_SHARED_MAPPING;
    }
    if (ops->deferred_release != NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_mechanism_create: mechanism '%s': the deferred_release table is reserved in this "
                             "version and must be NULL",
                             name);
    dmm_mechanism *m = calloc(1, sizeof *m);
    if (m == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_mechanism_create: mechanism '%s': out of memory", name);
    m->ops = ops;
    m->impl = impl;
    m->caps = caps;
    *out = m;
    return DMM_OK;
}

dmm_status dmm_mechanism_destroy(dmm_mechanism *m) {
    if (m == NULL) return DMM_OK;
    if (m->ops->destroy != NULL) {
        dmm_status s = m->ops->destroy(m->impl);
        if (s != DMM_OK) return s; /* the implementation said why; the mechanism stays usable */
    }
    /* after a successful destroy neither m->ops nor m->impl is read again: an implementation may free
     * the ops table with itself (the plugin wrapper does, src/plugin/plugin_mechanism.c) */
    free(m);
    return DMM_OK;
}

const char *dmm_mechanism_name(const dmm_mechanism *m) { return m != NULL ? NAME(m) : "(null mechanism)"; }

dmm_device_id dmm_mechanism_device(const dmm_mechanism *m) {
    if (m == NULL) return (dmm_device_id){DMM_TIER_DEVICE, -1};
    return m->ops->device(m->impl);
}

uint32_t dmm_mechanism_capabilities(const dmm_mechanism *m) { return m != NULL ? m->caps : 0; }

void *dmm_mechanism_impl(const dmm_mechanism *m) { return m != NULL ? m->impl : NULL; }

/* ---- shared checks ---- */

static bool same_device(dmm_device_id a, dmm_device_id b) { return a.tier == b.tier && a.index == b.index; }

/* m and a are usable and a belongs to m. `op` names the public call for the sentence. */
static dmm_status check_allocation(const dmm_mechanism *m, const dmm_allocation *a, const char *op) {
    if (m == NULL || a == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the mechanism (%p) and the allocation (%p) must be non-NULL",
                             op, (const void *)m, (const void *)a);
    if (a->mechanism != m)
        return dmm_error_set(DMM_ERR_WRONG_MECHANISM,
                             "%s: the allocation at %p (%zu bytes, id %llu) belongs to mechanism %p, not to "
                             "'%s' (%p); release it through the mechanism that made it",
                             op, a->ptr, a->bytes, (unsigned long long)a->id, (void *)a->mechanism, NAME(m),
                             (const void *)m);
    dmm_device_id d = m->ops->device(m->impl);
    if (!same_device(a->device, d))
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "%s: the allocation at %p (id %llu) says device (tier %d, index %d) but mechanism "
                             "'%s' is on (tier %d, index %d); the handle was altered",
                             op, a->ptr, (unsigned long long)a->id, (int)a->device.tier, (int)a->device.index,
                             NAME(m), (int)d.tier, (int)d.index);
    return DMM_OK;
}

static dmm_status check_capability(const dmm_mechanism *m, uint32_t cap, const char *capname, const char *op) {
    if (m == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the mechanism is NULL", op);
    if ((m->caps & cap) == 0)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "%s: mechanism '%s' has no %s capability; use a mechanism built with it (e.g. the "
                             "arena)",
                             op, NAME(m), capname);
    return DMM_OK;
}

static dmm_status check_size_align(const dmm_mechanism *m, size_t bytes, size_t align, const char *op) {
    if (bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: mechanism '%s': an allocation of 0 bytes is refused", op,
                             NAME(m));
    if (align != 0 && !dmm_is_pow2(align))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: mechanism '%s': alignment %zu is not a power of two (0 = the mechanism's default)",
                             op, NAME(m), align);
    return DMM_OK;
}

/* Every range lies inside [0, bytes). */
static dmm_status check_ranges(const dmm_mechanism *m, size_t bytes, const dmm_range *ranges, size_t n, const char *op) {
    if (n > 0 && ranges == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: mechanism '%s': %zu ranges announced but ranges is NULL", op,
                             NAME(m), n);
    for (size_t i = 0; i < n; i++) {
        size_t end;
        if (__builtin_add_overflow(ranges[i].offset, ranges[i].bytes, &end) || end > bytes)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: mechanism '%s': range %zu [%zu, +%zu) does not lie inside the allocation's "
                                 "%zu bytes",
                                 op, NAME(m), i, ranges[i].offset, ranges[i].bytes, bytes);
    }
    return DMM_OK;
}

/* ---- allocate / release / stats ---- */

static void stamp(dmm_mechanism *m, dmm_allocation *out) {
    out->mechanism = m;
    out->device = m->ops->device(m->impl);
}

dmm_status dmm_mechanism_allocate(dmm_mechanism *m, size_t bytes, size_t align, dmm_allocation *out) {
    if (m == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_mechanism_allocate: the mechanism (%p) and the output (%p) must be non-NULL",
                             (void *)m, (void *)out);
    dmm_status s = check_size_align(m, bytes, align, "dmm_mechanism_allocate");
    if (s != DMM_OK) return s;
    memset(out, 0, sizeof *out);
    s = m->ops->allocate(m->impl, bytes, align, out);
    if (s != DMM_OK) {
        memset(out, 0, sizeof *out);
        return s;
    }
    stamp(m, out);
    return DMM_OK;
}

dmm_release_outcome dmm_mechanism_release(dmm_mechanism *m, const dmm_allocation *a) {
    dmm_status s = check_allocation(m, a, "dmm_mechanism_release");
    if (s != DMM_OK) return dmm__outcome_failed(a != NULL ? a->bytes : 0, s);
    return m->ops->release(m->impl, a);
}

dmm_status dmm_mechanism_stats(dmm_mechanism *m, dmm_stats *out) {
    if (m == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_mechanism_stats: the mechanism (%p) and the output (%p) must be non-NULL",
                             (void *)m, (void *)out);
    if (m->ops->stats == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "dmm_mechanism_stats: mechanism '%s' keeps no stats", NAME(m));
    return m->ops->stats(m->impl, out);
}

/* ---- virtual backing ---- */

#define VB_CHECK(m, op)                                                                             \
    check_capability(m, DMM_CAP_VIRTUAL_BACKING, "virtual_backing", op)

dmm_status dmm_mechanism_allocate_committed(dmm_mechanism *m, size_t bytes, size_t align, const dmm_range *ranges,
                                            size_t n, dmm_allocation *out) {
    static const char op[] = "dmm_mechanism_allocate_committed";
    dmm_status s = VB_CHECK(m, op);
    if (s != DMM_OK) return s;
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output allocation is NULL", op);
    if ((s = check_size_align(m, bytes, align, op)) != DMM_OK) return s;
    if ((s = check_ranges(m, bytes, ranges, n, op)) != DMM_OK) return s;
    memset(out, 0, sizeof *out);
    s = m->ops->virtual_backing->allocate_committed(m->impl, bytes, align, ranges, n, out);
    if (s != DMM_OK) {
        memset(out, 0, sizeof *out);
        return s;
    }
    stamp(m, out);
    return DMM_OK;
}

dmm_status dmm_mechanism_commit(dmm_mechanism *m, const dmm_allocation *a, dmm_range range, uint64_t *newly_mapped) {
    static const char op[] = "dmm_mechanism_commit";
    dmm_status s = VB_CHECK(m, op);
    if (s != DMM_OK) return s;
    if ((s = check_allocation(m, a, op)) != DMM_OK) return s;
    if (newly_mapped == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: newly_mapped is NULL", op);
    if ((s = check_ranges(m, a->bytes, &range, 1, op)) != DMM_OK) return s;
    return m->ops->virtual_backing->commit(m->impl, a, range, newly_mapped);
}

dmm_release_outcome dmm_mechanism_decommit(dmm_mechanism *m, const dmm_allocation *a, dmm_range range) {
    static const char op[] = "dmm_mechanism_decommit";
    dmm_status s = VB_CHECK(m, op);
    if (s == DMM_OK) s = check_allocation(m, a, op);
    if (s == DMM_OK) s = check_ranges(m, a->bytes, &range, 1, op);
    if (s != DMM_OK) return dmm__outcome_failed(range.bytes, s);
    return m->ops->virtual_backing->decommit(m->impl, a, range);
}

dmm_status dmm_mechanism_committed_bytes(dmm_mechanism *m, const dmm_allocation *a, uint64_t *bytes) {
    static const char op[] = "dmm_mechanism_committed_bytes";
    dmm_status s = VB_CHECK(m, op);
    if (s != DMM_OK) return s;
    if ((s = check_allocation(m, a, op)) != DMM_OK) return s;
    if (bytes == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output is NULL", op);
    return m->ops->virtual_backing->committed_bytes(m->impl, a, bytes);
}

dmm_status dmm_mechanism_mapped_bytes_for_ranges(dmm_mechanism *m, const dmm_allocation *a, const dmm_range *ranges,
                                                 size_t n, uint64_t *bytes) {
    static const char op[] = "dmm_mechanism_mapped_bytes_for_ranges";
    dmm_status s = VB_CHECK(m, op);
    if (s != DMM_OK) return s;
    if ((s = check_allocation(m, a, op)) != DMM_OK) return s;
    if (bytes == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output is NULL", op);
    if ((s = check_ranges(m, a->bytes, ranges, n, op)) != DMM_OK) return s;
    return m->ops->virtual_backing->mapped_bytes_for_ranges(m->impl, a, ranges, n, bytes);
}

/* ---- the optional virtual-backing slots ---- */

/* Each optional slot's place in dmm_virtual_backing_ops and its name (for sentences), by its
 * dmm_optional_slot number: one table, so a slot added to the enum is added here once. */
static const struct {
    size_t offset;
    const char *name;
} optional_slots[] = {
    [DMM_SLOT_ALIAS] = {offsetof(dmm_virtual_backing_ops, alias), "alias"},
    [DMM_SLOT_IS_QUARANTINED] = {offsetof(dmm_virtual_backing_ops, is_quarantined), "is_quarantined"},
    [DMM_SLOT_DRAIN_CACHE] = {offsetof(dmm_virtual_backing_ops, drain_cache), "drain_cache"},
    [DMM_SLOT_RESERVATION] = {offsetof(dmm_virtual_backing_ops, reservation), "reservation"},
    [DMM_SLOT_EXPORT_RANGE] = {offsetof(dmm_virtual_backing_ops, export_range), "export_range"},
    [DMM_SLOT_IMPORT] = {offsetof(dmm_virtual_backing_ops, import), "import"},
    [DMM_SLOT_COMMIT_PIECES] = {offsetof(dmm_virtual_backing_ops, commit_pieces), "commit_pieces"},
};
#define OPTIONAL_SLOT_COUNT (sizeof optional_slots / sizeof optional_slots[0])
_Static_assert(OPTIONAL_SLOT_COUNT == DMM_SLOT_COMMIT_PIECES + 1, "a row of optional_slots for every dmm_optional_slot");

/* Whether m's virtual-backing table fills the optional slot: false where the table is absent,
 * shorter than the slot (an older table) or leaves it NULL, and for a number outside the enum. */
static bool has_optional_slot(const dmm_mechanism *m, dmm_optional_slot slot) {
    const dmm_virtual_backing_ops *vb = m != NULL ? m->ops->virtual_backing : NULL;
    if (vb == NULL || (size_t)slot >= OPTIONAL_SLOT_COUNT || optional_slots[slot].name == NULL) return false;
    size_t offset = optional_slots[slot].offset;
    if (vb->size < offset + sizeof(void (*)(void))) return false;
    const void *filled;
    memcpy(&filled, (const char *)vb + offset, sizeof filled);
    return filled != NULL;
}

static dmm_status optional_absent(const dmm_mechanism *m, dmm_optional_slot slot, const char *op) {
    if (m == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the mechanism is NULL", op);
    return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s: mechanism '%s' has no virtual-backing slot '%s'", op,
                         dmm_mechanism_name(m), optional_slots[slot].name);
}

bool dmm_mechanism_has_slot(const dmm_mechanism *m, dmm_optional_slot slot) { return has_optional_slot(m, slot); }

dmm_status dmm_mechanism_alias(dmm_mechanism *m, const dmm_allocation *a, dmm_range dst, dmm_range src) {
    static const char op[] = "dmm_mechanism_alias";
    if (!has_optional_slot(m, DMM_SLOT_ALIAS)) return optional_absent(m, DMM_SLOT_ALIAS, op);
    dmm_status s = check_allocation(m, a, op);
    if (s != DMM_OK) return s;
    return m->ops->virtual_backing->alias(m->impl, a, dst, src);
}

dmm_status dmm_mechanism_is_quarantined(dmm_mechanism *m, const void *ptr, size_t bytes, bool *out) {
    static const char op[] = "dmm_mechanism_is_quarantined";
    if (!has_optional_slot(m, DMM_SLOT_IS_QUARANTINED)) return optional_absent(m, DMM_SLOT_IS_QUARANTINED, op);
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    return m->ops->virtual_backing->is_quarantined(m->impl, ptr, bytes, out);
}

dmm_status dmm_mechanism_drain_cache(dmm_mechanism *m) {
    if (!has_optional_slot(m, DMM_SLOT_DRAIN_CACHE))
        return optional_absent(m, DMM_SLOT_DRAIN_CACHE, "dmm_mechanism_drain_cache");
    return m->ops->virtual_backing->drain_cache(m->impl);
}

dmm_status dmm_mechanism_reservation(dmm_mechanism *m, uintptr_t *va, uint64_t *bytes) {
    if (!has_optional_slot(m, DMM_SLOT_RESERVATION))
        return optional_absent(m, DMM_SLOT_RESERVATION, "dmm_mechanism_reservation");
    return m->ops->virtual_backing->reservation(m->impl, va, bytes);
}

dmm_status dmm_mechanism_commit_pieces(dmm_mechanism *m, const dmm_allocation *a, dmm_range range,
                                       uint64_t piece_bytes, uint64_t *newly_mapped) {
    static const char op[] = "dmm_mechanism_commit_pieces";
    if (!has_optional_slot(m, DMM_SLOT_COMMIT_PIECES)) return optional_absent(m, DMM_SLOT_COMMIT_PIECES, op);
    dmm_status s = check_allocation(m, a, op);
    if (s != DMM_OK) return s;
    if (newly_mapped == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: newly_mapped is NULL", op);
    if ((s = check_ranges(m, a->bytes, &range, 1, op)) != DMM_OK) return s;
    return m->ops->virtual_backing->commit_pieces(m->impl, a, range, piece_bytes, newly_mapped);
}

/* ---- export and import (dmm/share.h) ---- */

dmm_status dmm_export_range(dmm_mechanism *m, const dmm_allocation *a, dmm_range range, dmm_access access,
                            dmm_export *out) {
    static const char op[] = "dmm_export_range";
    if (!has_optional_slot(m, DMM_SLOT_EXPORT_RANGE))
        return m == NULL ? optional_absent(m, DMM_SLOT_EXPORT_RANGE, op)
                         : dmm_error_set(DMM_ERR_UNSUPPORTED,
                                         "%s: mechanism '%s' cannot export memory to other processes (no "
                                         "virtual-backing slot 'export_range'); allocate what you share from an "
                                         "arena",
                                         op, dmm_mechanism_name(m));
    dmm_status s = check_allocation(m, a, op);
    if (s != DMM_OK) return s;
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output export is NULL", op);
    if (access != DMM_ACCESS_READ && access != DMM_ACCESS_READ_WRITE)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: access %d is neither DMM_ACCESS_READ nor "
                                                       "DMM_ACCESS_READ_WRITE", op, (int)access);
    if ((s = check_ranges(m, a->bytes, &range, 1, op)) != DMM_OK) return s;
    return m->ops->virtual_backing->export_range(m->impl, a, range, access, out);
}

dmm_status dmm_import(dmm_mechanism *m, const dmm_export *ex, dmm_access access, dmm_allocation *out) {
    static const char op[] = "dmm_import";
    if (!has_optional_slot(m, DMM_SLOT_IMPORT))
        return m == NULL ? optional_absent(m, DMM_SLOT_IMPORT, op)
                         : dmm_error_set(DMM_ERR_UNSUPPORTED,
                                         "%s: mechanism '%s' cannot import another process's memory (no "
                                         "virtual-backing slot 'import'); import into an arena",
                                         op, dmm_mechanism_name(m));
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output allocation is NULL", op);
    if (access != DMM_ACCESS_READ && access != DMM_ACCESS_READ_WRITE)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: access %d is neither DMM_ACCESS_READ nor "
                                                       "DMM_ACCESS_READ_WRITE", op, (int)access);
    dmm_status s = dmm_export_check(ex, true);
    if (s != DMM_OK) return dmm__error_wrap(s, "%s refused, nothing was changed", op);
    s = m->ops->virtual_backing->import(m->impl, ex, access, out);
    if (s == DMM_OK) stamp(m, out);
    return s;
}

/* ---- shared mapping (dmm/prefix.h) ---- */

#define SM_CHECK(m, op) check_capability(m, DMM_CAP_SHARED_MAPPING, "shared_mapping", op)

/* The prefix belongs to m: a prefix of another mechanism (another arena, so another budget, or
 * another device) is refused here, before the implementation could read it as its own. */
static dmm_status check_prefix(const dmm_mechanism *m, const dmm_prefix *p, const char *op) {
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the prefix is NULL", op);
    dmm_device_id d = m->ops->device(m->impl);
    if (!same_device(p->device, d))
        return dmm_error_set(DMM_ERR_WRONG_DEVICE,
                             "%s: prefix id %llu (%llu bytes) lives on device (tier %d, index %d) but mechanism "
                             "'%s' is on (tier %d, index %d): a prefix is mapped only on its own device; nothing "
                             "was changed",
                             op, (unsigned long long)p->id, (unsigned long long)p->bytes, (int)p->device.tier,
                             (int)p->device.index, NAME(m), (int)d.tier, (int)d.index);
    if (p->mechanism != m)
        return dmm_error_set(DMM_ERR_WRONG_MECHANISM,
                             "%s: prefix id %llu (%llu bytes) belongs to mechanism %p, not to '%s' (%p): a foreign "
                             "prefix (another arena, with its own budget) cannot be mapped or released here; "
                             "nothing was changed: use the mechanism that made it",
                             op, (unsigned long long)p->id, (unsigned long long)p->bytes, (void *)p->mechanism,
                             NAME(m), (const void *)m);
    return DMM_OK;
}

dmm_status dmm_prefix_create(dmm_mechanism *m, const dmm_allocation *owner, dmm_range range, dmm_prefix *out) {
    static const char op[] = "dmm_prefix_create";
    dmm_status s = SM_CHECK(m, op);
    if (s != DMM_OK) return s;
    if ((s = check_allocation(m, owner, op)) != DMM_OK) return s;
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output prefix is NULL", op);
    if ((s = check_ranges(m, owner->bytes, &range, 1, op)) != DMM_OK) return s;
    memset(out, 0, sizeof *out);
    s = m->ops->shared_mapping->prefix_create(m->impl, owner, range, out);
    if (s != DMM_OK) {
        memset(out, 0, sizeof *out);
        return s;
    }
    out->mechanism = m;
    out->device = m->ops->device(m->impl);
    return DMM_OK;
}

dmm_status dmm_prefix_commit(dmm_mechanism *m, const dmm_prefix *p, const dmm_allocation *target, size_t offset) {
    static const char op[] = "dmm_prefix_commit";
    dmm_status s = SM_CHECK(m, op);
    if (s == DMM_OK) s = check_allocation(m, target, op);
    if (s == DMM_OK) s = check_prefix(m, p, op);
    if (s != DMM_OK) return s;
    return m->ops->shared_mapping->prefix_commit(m->impl, p, target, offset);
}

dmm_status dmm_prefix_cost(dmm_mechanism *m, const dmm_prefix *p, const dmm_allocation *target, size_t offset,
                           uint64_t *newly_owned, uint64_t *newly_mapped) {
    static const char op[] = "dmm_prefix_cost";
    dmm_status s = SM_CHECK(m, op);
    if (s == DMM_OK) s = check_allocation(m, target, op);
    if (s == DMM_OK) s = check_prefix(m, p, op);
    if (s == DMM_OK && (newly_owned == NULL || newly_mapped == NULL))
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: newly_owned and newly_mapped must be non-NULL", op);
    if (s != DMM_OK) return s;
    return m->ops->shared_mapping->prefix_cost(m->impl, p, target, offset, newly_owned, newly_mapped);
}

dmm_release_outcome dmm_prefix_release(dmm_mechanism *m, const dmm_prefix *p) {
    static const char op[] = "dmm_prefix_release";
    dmm_status s = SM_CHECK(m, op);
    if (s == DMM_OK) s = check_prefix(m, p, op);
    if (s != DMM_OK) return dmm__outcome_failed(p != NULL ? p->bytes : 0, s);
    return m->ops->shared_mapping->prefix_release(m->impl, p);
}
