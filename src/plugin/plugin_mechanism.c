/* SPDX-License-Identifier: Apache-2.0 */
/* src/plugin/plugin_mechanism.c — a plugin's mechanism wrapped as a normal dmm_mechanism, so that
 * pools, providers and the governor use it unchanged (DESIGN §4.4, §4.12).
 *
 * What it owns: the host-side record of one plugin mechanism (`pmech`): a host dmm_mechanism_ops
 * built from the plugin's table, zeroed local copies of the plugin's tables, the device (asked once,
 * and it must be the driver's) and the host's own record of every allocation it handed out
 * (`issued`: id → ptr, bytes, align).
 *
 * Idea: translate, never trust. Each slot call lends the plugin plain-data structs pre-filled to read
 * as failure (status UNSET, outcome state UNSET = QUARANTINED), so a plugin that forgets to fill
 * them fails loudly instead of succeeding silently. The host table has a capability table only where
 * the plugin's table has one (so dmm_mechanism_capabilities reports exactly the slots present and
 * the generic wrapper answers DMM_ERR_UNSUPPORTED for the rest); optional slots left NULL stay NULL —
 * also the optional virtual-backing slots of 1.1 (alias, is_quarantined, drain_cache, reservation),
 * so dmm_mechanism_has_slot tells a pool on top exactly what the plugin offers. Tables are read by
 * the copy rule up to what the agreed minor defines: a slot of a later minor is never copied, so it
 * is never called (a plugin of minor 0 never has its 1.1 slots called, whatever its table holds).
 *
 * Every value the plugin hands back is checked before it is used:
 *   - an allocation (allocate, allocate_committed): a non-zero address that fits a pointer, a range
 *     that does not wrap, exactly the bytes asked, a power-of-two alignment of at least the one asked
 *     that the address keeps, and an id the host has not issued to a live allocation. A success
 *     that breaks one is refused (DMM_ERR_DRIVER, the value named) and the allocation given back
 *     through the plugin's release, so nothing is handed out and nothing stays owned;
 *   - a release outcome (release, decommit): the allocation_bytes of the call, at most the range's
 *     bytes unmapped or still owned (decommit), nothing unmapped or owned under FAILED, nothing owned
 *     and no failure under COMPLETE. An outcome that breaks one reads as QUARANTINED (DMM_ERR_DRIVER,
 *     nothing known to be unmapped, all of it possibly owned): the memory's state is unknown;
 *   - the device: the driver's device the mechanism was made on.
 * Every call that names an allocation is checked against `issued` first: a handle the host did not
 * issue (forged, stale, already released) or issued with other ptr/bytes/align (altered) is refused
 * with DMM_ERR_UNKNOWN_ALLOCATION before the plugin is called, changing nothing.
 *
 * Trade-off: one malloc'ed record and one map slot per live allocation, and a lock taken twice per
 * release (never across a plugin call), so that what the plugin says about its allocations cannot
 * change what the host believes is live: a destroy is refused while anything is live even if the
 * plugin's own destroy would not refuse it, and a permissive plugin's COMPLETE for a made-up handle
 * never reaches it.
 *
 * Invariants: |issued| = allocations handed out − releases whose outcome was not FAILED (an
 *   allocation is in `issued` from the moment the caller gets it until its release is not FAILED);
 *   a record marked `releasing` has exactly one release in flight;
 *   dmm_mechanism_destroy succeeds ⇒ |issued| = 0, the plugin's destroy said DMM_OK, and the plugin's
 *   `mechanisms` count was decremented exactly once.
 * Lock order: `lock` is a leaf (nothing is called under it: no plugin slot, no driver, no log).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/u64map.h"
#include "plugin/plugin_internal.h"

/* The host's record of one allocation it handed out (the plugin keeps its own). */
typedef struct pmech_issued {
    uint64_t ptr, bytes, align; /* as handed to the caller */
    bool releasing;             /* a release of it is in flight (lock) */
} pmech_issued;

typedef struct pmech {
    dmm_mechanism_ops ops;              /* the host's table over this record */
    dmm_virtual_backing_ops vb;         /* used only when the plugin has virtual backing */
    dmm_plugin *plugin;                 /* not owned; outlives us (its unload is refused meanwhile) */
    void *impl;                         /* the plugin's object */
    dmm_plugin_mechanism_ops pops;      /* zeroed local copy of the plugin's table */
    dmm_plugin_virtual_backing_ops pvb; /* zeroed local copy, when present */
    dmm_device_id device;                  /* asked once, at creation; the driver's */
    dmm_lock lock;                      /* guards `issued` (a leaf: nothing is called under it) */
    dmm_u64map issued;                  /* id → pmech_issued *: allocations handed out, not released */
    char name[DMM__PLUGIN_NAME_BYTES];  /* bounded copy of the plugin table's name */
} pmech;

/* Sizes the agreed minor defines: what is copied at most (a slot above it is never read). 1.1
 * appended the optional virtual-backing slots; the mechanism table did not grow. */
static size_t ops_size_for_minor(uint32_t minor) {
    (void)minor;
    return DMM_PLUGIN_MECHANISM_OPS_SIZE_1_0;
}
static size_t vb_size_for_minor(uint32_t minor) {
    return minor >= 1 ? DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_1 : DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_0;
}
/* The smallest virtual-backing table accepted in every minor: the 1.0 slots (required); a shorter
 * 1.1 table only lacks the optional slots. */
#define VB_SIZE_REQUIRED DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_0

static dmm_plugin_allocation to_plugin(const dmm_allocation *a) {
    dmm_plugin_allocation pa;
    memset(&pa, 0, sizeof pa);
    pa.struct_size = (uint32_t)sizeof pa;
    pa.ptr = (uint64_t)(uintptr_t)a->ptr;
    pa.bytes = a->bytes;
    pa.align = a->align;
    pa.id = a->id;
    return pa;
}

static void outcome_init(dmm_plugin_release_outcome *po) {
    memset(po, 0, sizeof *po);
    po->struct_size = (uint32_t)sizeof *po;
    po->state = DMM_PLUGIN_STATE_UNSET;
}

static dmm_release_outcome outcome_failed(uint64_t bytes, dmm_status failure) {
    dmm_release_outcome o = {DMM_RELEASE_FAILED, bytes, 0, 0, failure, 0};
    return o;
}

/* ---- the host's record of what it issued ---- */

/* The allocation `a` names is one the host issued, with the same ptr, bytes and align, and no
 * release of it is in flight; `start_release` marks it releasing. Otherwise the sentence says what
 * was wrong (the plugin is not called; nothing changed). */
static dmm_status issued_check(pmech *pm, const dmm_allocation *a, const char *op, bool start_release) {
    uint64_t ptr = (uint64_t)(uintptr_t)a->ptr, v = 0;
    dmm_lock_acquire(&pm->lock);
    pmech_issued *r = dmm__u64map_find(&pm->issued, a->id, &v) ? (pmech_issued *)(uintptr_t)v : NULL;
    pmech_issued seen = r != NULL ? *r : (pmech_issued){0, 0, 0, false};
    bool same = r != NULL && r->ptr == ptr && r->bytes == a->bytes && r->align == a->align;
    if (same && !r->releasing && start_release) r->releasing = true;
    dmm_lock_release(&pm->lock);
    if (r == NULL)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s of %zu bytes at %p (id %llu) refused: mechanism '%s' of plugin '%s' (%s) has no live "
                             "allocation with id %llu (the host never issued it, or it was released: a forged or "
                             "stale handle); pass the dmm_allocation the mechanism handed out; the plugin was not "
                             "called and nothing was changed",
                             op, a->bytes, a->ptr, (unsigned long long)a->id, pm->name, pm->plugin->name,
                             pm->plugin->path, (unsigned long long)a->id);
    if (!same)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s of %zu bytes at %p (align %zu, id %llu) refused: mechanism '%s' of plugin '%s' (%s) "
                             "issued id %llu as %llu bytes at 0x%llx (align %llu), so no live allocation matches "
                             "the handle (it was altered); pass the dmm_allocation unchanged; the plugin was not "
                             "called and nothing was changed",
                             op, a->bytes, a->ptr, a->align, (unsigned long long)a->id, pm->name, pm->plugin->name,
                             pm->plugin->path, (unsigned long long)a->id, (unsigned long long)seen.bytes,
                             (unsigned long long)seen.ptr, (unsigned long long)seen.align);
    if (seen.releasing)
        return dmm_error_set(DMM_ERR_BUSY,
                             "%s of %zu bytes at %p (id %llu) refused: mechanism '%s' of plugin '%s' (%s) is releasing "
                             "that allocation on another thread right now; nothing was changed",
                             op, a->bytes, a->ptr, (unsigned long long)a->id, pm->name, pm->plugin->name,
                             pm->plugin->path);
    return DMM_OK;
}

/* Ends the release that issued_check(…, true) started: `gone` forgets the allocation, otherwise
 * (FAILED: nothing changed) it is live and releasable again. */
static void issued_end_release(pmech *pm, uint64_t id, bool gone) {
    uint64_t v = 0;
    dmm_lock_acquire(&pm->lock);
    bool found = gone ? dmm__u64map_remove(&pm->issued, id, &v) : dmm__u64map_find(&pm->issued, id, &v);
    pmech_issued *r = found ? (pmech_issued *)(uintptr_t)v : NULL;
    if (r != NULL && !gone) r->releasing = false;
    dmm_lock_release(&pm->lock);
    if (gone) free(r);
}

/* Before an allocate-shaped plugin call: the record and its map slot, so that nothing can fail
 * once the plugin has allocated. */
static dmm_status issued_prepare(pmech *pm, pmech_issued **out, const char *op, size_t bytes) {
    pmech_issued *r = calloc(1, sizeof *r);
    bool room = false;
    if (r != NULL) {
        dmm_lock_acquire(&pm->lock);
        room = dmm__u64map_reserve(&pm->issued, 1);
        dmm_lock_release(&pm->lock);
    }
    if (!room) {
        free(r);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "%s of %zu bytes by mechanism '%s': no host memory for the host's record of the "
                             "allocation; the plugin was not called and nothing was changed",
                             op, bytes, pm->name);
    }
    *out = r;
    return DMM_OK;
}

static void issued_cancel(pmech *pm, pmech_issued *r) {
    dmm_lock_acquire(&pm->lock);
    dmm__u64map_unreserve(&pm->issued, 1);
    dmm_lock_release(&pm->lock);
    free(r);
}

/* ---- what the plugin hands back ---- */

/* The plugin's outcome as a dmm_release_outcome. `asked` is the bytes the call was about (the
 * allocation's, or the range's), `most` the most it may report unmapped or still owned (UINT64_MAX:
 * no bound). Unknown (or unset) states become QUARANTINED, a failed status turns COMPLETE into
 * QUARANTINED (something failed: the memory may not be gone), an inconsistent outcome (see the file
 * comment) becomes QUARANTINED with nothing known unmapped, and every non-COMPLETE outcome carries a
 * failure code and a sentence. */
static dmm_release_outcome read_outcome(const pmech *pm, const dmm_plugin_release_outcome *po,
                                        const dmm_plugin_status *st, const char *what, const dmm_allocation *a,
                                        uint64_t asked, uint64_t most) {
    dmm_release_outcome o = {po->state, po->allocation_bytes, po->unmapped_bytes, po->residual_owned_bytes,
                             (dmm_status)po->failure, 0};
    dmm_release_state state = dmm_release_state_of(&o);
    o.state = state;
    if (po->failure < 0 || po->failure >= DMM_STATUS_COUNT) o.failure = DMM_ERR_DRIVER;
    if (st->code != DMM_OK) {
        dmm_status s = dmm__plugin_check(pm->plugin, st, "%s of %zu bytes at %p (id %llu) by mechanism '%s'", what,
                                         a->bytes, a->ptr, (unsigned long long)a->id, pm->name);
        if (state == DMM_RELEASE_COMPLETE) o.state = DMM_RELEASE_QUARANTINED;
        if (o.failure == DMM_OK) o.failure = s;
    } else if (state != DMM_RELEASE_COMPLETE) {
        if (o.failure == DMM_OK) o.failure = DMM_ERR_DRIVER;
        dmm_error_set(o.failure,
                      "%s of %zu bytes at %p (id %llu) by mechanism '%s': plugin '%s' (%s) reported %s%s without a "
                      "failing status",
                      what, a->bytes, a->ptr, (unsigned long long)a->id, pm->name, pm->plugin->name,
                      pm->plugin->path, dmm_release_state_str(o.state),
                      po->state == DMM_PLUGIN_STATE_UNSET ? " (it left the outcome unfilled)" : "");
    }
    if (po->state == DMM_PLUGIN_STATE_UNSET) return o; /* unfilled: said above */
    /* the numbers must agree with the call and with the state the plugin reported */
    char why[192];
    why[0] = '\0';
    if (po->allocation_bytes != asked)
        snprintf(why, sizeof why, "allocation_bytes %llu for a call about %llu bytes",
                 (unsigned long long)po->allocation_bytes, (unsigned long long)asked);
    else if (po->unmapped_bytes > most || po->residual_owned_bytes > most)
        snprintf(why, sizeof why, "%llu bytes unmapped and %llu still owned, more than the %llu bytes of the range",
                 (unsigned long long)po->unmapped_bytes, (unsigned long long)po->residual_owned_bytes,
                 (unsigned long long)most);
    else if (state == DMM_RELEASE_FAILED && (po->unmapped_bytes != 0 || po->residual_owned_bytes != 0))
        snprintf(why, sizeof why, "FAILED (nothing changed) with %llu bytes unmapped and %llu still owned",
                 (unsigned long long)po->unmapped_bytes, (unsigned long long)po->residual_owned_bytes);
    else if (state == DMM_RELEASE_COMPLETE && po->residual_owned_bytes != 0)
        snprintf(why, sizeof why, "COMPLETE with %llu bytes still owned", (unsigned long long)po->residual_owned_bytes);
    else if (state == DMM_RELEASE_COMPLETE && st->code == DMM_OK && po->failure != DMM_OK)
        snprintf(why, sizeof why, "COMPLETE with failure code %d", (int)po->failure);
    if (why[0] == '\0') return o;
    const char *fmt = "%s of %zu bytes at %p (id %llu) by mechanism '%s': plugin '%s' (%s) reported an inconsistent "
                      "outcome, %s; read as DMM_RELEASE_QUARANTINED (the memory's state is unknown: nothing is "
                      "known to be unmapped, all of it may still be owned)";
    if (st->code != DMM_OK) /* the plugin's own failure, already the last error, follows */
        o.failure = dmm__error_wrap(o.failure, fmt, what, a->bytes, a->ptr, (unsigned long long)a->id, pm->name,
                                    pm->plugin->name, pm->plugin->path, why);
    else
        o.failure = dmm_error_set(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER, fmt, what, a->bytes, a->ptr,
                                  (unsigned long long)a->id, pm->name, pm->plugin->name, pm->plugin->path, why);
    o.state = DMM_RELEASE_QUARANTINED;
    o.allocation_bytes = asked;
    o.unmapped_bytes = 0;
    o.residual_owned_bytes = asked;
    return o;
}

/* Why a successful allocate-shaped call's allocation cannot be handed out (into why), or false. */
static bool allocation_problem(const dmm_plugin_allocation *pa, size_t bytes, size_t align, char *why, size_t cap) {
    uint64_t have = pa->align != 0 ? pa->align : align, end = 0;
    if (pa->ptr == 0 || pa->id == 0)
        snprintf(why, cap, "ptr 0x%llx, id %llu (an allocation needs a non-zero address and id)",
                 (unsigned long long)pa->ptr, (unsigned long long)pa->id);
    else if ((uint64_t)(uintptr_t)pa->ptr != pa->ptr || __builtin_add_overflow(pa->ptr, (uint64_t)bytes, &end) ||
             (uint64_t)(uintptr_t)end != end)
        snprintf(why, cap, "ptr 0x%llx, which with %zu bytes is no range of addresses here",
                 (unsigned long long)pa->ptr, bytes);
    else if (pa->bytes != bytes)
        snprintf(why, cap, "a range of %llu bytes where %zu were asked (bytes are handed back as asked)",
                 (unsigned long long)pa->bytes, bytes);
    else if (have != 0 && (!dmm_is_pow2(have) || have < align || (uint64_t)(size_t)have != have))
        snprintf(why, cap, "align %llu where %zu was asked (a power of two, at least the one asked)",
                 (unsigned long long)pa->align, align);
    else if (have != 0 && pa->ptr % have != 0)
        snprintf(why, cap, "ptr 0x%llx, which is %llu bytes off its %llu-byte alignment", (unsigned long long)pa->ptr,
                 (unsigned long long)(pa->ptr % have), (unsigned long long)have);
    else
        return false;
    return true;
}

/* A successful allocate-shaped call: checks what the plugin handed back and records it in `issued`
 * (r and its slot prepared by issued_prepare), or refuses it, gives it back through the plugin's
 * release (so the plugin owns nothing for it) and frees r. */
static dmm_status take_allocation(pmech *pm, const dmm_plugin_allocation *pa, size_t bytes, size_t align,
                                  dmm_allocation *out, const char *what, pmech_issued *r) {
    char why[160];
    bool bad = allocation_problem(pa, bytes, align, why, sizeof why);
    if (!bad) {
        r->ptr = pa->ptr;
        r->bytes = bytes;
        r->align = pa->align != 0 ? pa->align : align;
        dmm_lock_acquire(&pm->lock);
        bad = dmm__u64map_find(&pm->issued, pa->id, NULL);
        if (!bad) dmm__u64map_insert_reserved(&pm->issued, pa->id, (uint64_t)(uintptr_t)r);
        dmm_lock_release(&pm->lock);
        if (bad)
            snprintf(why, sizeof why, "id %llu, which the host issued already to an allocation that is still live (ids "
                                      "are never reused)",
                     (unsigned long long)pa->id);
    }
    if (!bad) {
        out->ptr = (void *)(uintptr_t)r->ptr;
        out->bytes = bytes;
        out->align = (size_t)r->align;
        out->id = pa->id;
        return DMM_OK;
    }
    issued_cancel(pm, r);
    /* Give it back, with the plugin's own values (the plugin checks all four against its record). */
    dmm_plugin_release_outcome po;
    outcome_init(&po);
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.release(pm->impl, pa, &po, &st);
    bool back = st.code == DMM_OK && po.state == DMM_RELEASE_COMPLETE;
    return dmm_error_set(DMM_ERR_DRIVER,
                         "%s of %zu bytes (align %zu) by mechanism '%s': plugin '%s' (%s) reported success but handed "
                         "back %s; refused, nothing was handed out, and the host %s",
                         what, bytes, align, pm->name, pm->plugin->name, pm->plugin->path, why,
                         back ? "gave the allocation back to the plugin (its release: COMPLETE)"
                              : "could not give the allocation back (the plugin's release did not say COMPLETE): "
                                "the plugin may still own it");
}

/* ---- the required slots ---- */

static dmm_status pm_allocate(void *impl, size_t bytes, size_t align, dmm_allocation *out) {
    static const char op[] = "dmm_mechanism_allocate";
    pmech *pm = impl;
    pmech_issued *r = NULL;
    dmm_status s = issued_prepare(pm, &r, op, bytes);
    if (s != DMM_OK) return s;
    dmm_plugin_allocation pa;
    memset(&pa, 0, sizeof pa);
    pa.struct_size = (uint32_t)sizeof pa;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.allocate(pm->impl, bytes, align, &pa, &st);
    s = dmm__plugin_check(pm->plugin, &st, "%s of %zu bytes (align %zu) by mechanism '%s'", op, bytes, align,
                          pm->name);
    if (s != DMM_OK) {
        issued_cancel(pm, r);
        return s;
    }
    return take_allocation(pm, &pa, bytes, align, out, op, r);
}

static dmm_release_outcome pm_release(void *impl, const dmm_allocation *a) {
    static const char op[] = "dmm_mechanism_release";
    pmech *pm = impl;
    dmm_status s = issued_check(pm, a, op, true);
    if (s != DMM_OK) return outcome_failed(a->bytes, s);
    dmm_plugin_allocation pa = to_plugin(a);
    dmm_plugin_release_outcome po;
    outcome_init(&po);
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.release(pm->impl, &pa, &po, &st);
    /* a whole release is not bounded by the allocation's bytes: a chunk it shared dies with it */
    dmm_release_outcome o = read_outcome(pm, &po, &st, op, a, a->bytes, UINT64_MAX);
    issued_end_release(pm, a->id, o.state != DMM_RELEASE_FAILED);
    return o;
}

static dmm_device_id pm_device(void *impl) { return ((pmech *)impl)->device; }

static dmm_status pm_stats(void *impl, dmm_stats *out) {
    pmech *pm = impl;
    dmm_stats local;
    memset(&local, 0, sizeof local);
    local.size = (uint32_t)sizeof local;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.stats(pm->impl, &local, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_stats of mechanism '%s'", pm->name);
    if (s != DMM_OK) return s;
    local.size = (uint32_t)sizeof local; /* the plugin must not change it; the host's own size counts */
    /* a count below zero is garbage (a plugin's counter that wrapped): reported as 0, and counted as a
     * reference underflow, so that no statistic of dmm, nor the pool's over it, ever goes negative */
#define DMM_PM_NO_NEGATIVE(name, desc)                                                                       \
    if (local.name.current < 0 || local.name.peak < 0) {                                                   \
        local.name.current = local.name.current < 0 ? 0 : local.name.current;                              \
        local.name.peak = local.name.peak < local.name.current ? local.name.current : local.name.peak;     \
        local.refcount_underflows++;                                                                        \
    }
    DMM_STAT_COUNTS(DMM_PM_NO_NEGATIVE)
#undef DMM_PM_NO_NEGATIVE
    return dmm__stats_copy_out(&local, out);
}

/* Frees the host's record (the plugin's object is gone or was never made). */
static void pm_free(pmech *pm) {
    dmm__u64map_fini(&pm->issued);
    dmm_lock_destroy(&pm->lock);
    free(pm);
}

/* Destroys the plugin's object; on success forgets it and frees the record. */
static dmm_status pm_destroy(void *impl) {
    pmech *pm = impl;
    dmm_lock_acquire(&pm->lock);
    size_t live = dmm__u64map_count(&pm->issued);
    dmm_lock_release(&pm->lock);
    if (live > 0)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_mechanism_destroy: mechanism '%s' of plugin '%s' (%s) still has %zu live "
                             "allocation%s (the host's own record); release them first; nothing was changed",
                             pm->name, pm->plugin->name, pm->plugin->path, live, live == 1 ? "" : "s");
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.destroy(pm->impl, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_destroy of mechanism '%s'", pm->name);
    if (s != DMM_OK) return s;
    dmm__plugin_lock();
    pm->plugin->mechanisms--;
    dmm__plugin_unlock();
    pm_free(pm);
    return DMM_OK;
}

/* ---- virtual backing ---- */

/* n dmm_range → 2n uint64 (offset, bytes); `buf` holds 8 ranges, larger lists are allocated. */
static uint64_t *flatten(const dmm_range *ranges, size_t n, uint64_t *buf) {
    uint64_t *flat = n <= 8 ? buf : malloc(2 * n * sizeof *flat);
    if (flat == NULL) return NULL;
    for (size_t i = 0; i < n; i++) {
        flat[2 * i] = ranges[i].offset;
        flat[2 * i + 1] = ranges[i].bytes;
    }
    return flat;
}

static dmm_status pm_allocate_committed(void *impl, size_t bytes, size_t align, const dmm_range *ranges, size_t n,
                                        dmm_allocation *out) {
    static const char op[] = "dmm_mechanism_allocate_committed";
    pmech *pm = impl;
    uint64_t buf[16];
    uint64_t *flat = flatten(ranges, n, buf);
    if (flat == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: mechanism '%s': no host memory for %zu ranges", op, pm->name,
                             n);
    pmech_issued *r = NULL;
    dmm_status s = issued_prepare(pm, &r, op, bytes);
    if (s != DMM_OK) {
        if (flat != buf) free(flat);
        return s;
    }
    dmm_plugin_allocation pa;
    memset(&pa, 0, sizeof pa);
    pa.struct_size = (uint32_t)sizeof pa;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.allocate_committed(pm->impl, bytes, align, flat, n, &pa, &st);
    if (flat != buf) free(flat);
    s = dmm__plugin_check(pm->plugin, &st, "%s of %zu bytes (align %zu, %zu ranges) by mechanism '%s'", op, bytes,
                          align, n, pm->name);
    if (s != DMM_OK) {
        issued_cancel(pm, r);
        return s;
    }
    return take_allocation(pm, &pa, bytes, align, out, op, r);
}

static dmm_status pm_commit(void *impl, const dmm_allocation *a, dmm_range range, uint64_t *newly_mapped) {
    pmech *pm = impl;
    dmm_status s = issued_check(pm, a, "dmm_mechanism_commit", false);
    if (s != DMM_OK) return s;
    dmm_plugin_allocation pa = to_plugin(a);
    uint64_t newly = 0;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.commit(pm->impl, &pa, range.offset, range.bytes, &newly, &st);
    s = dmm__plugin_check(pm->plugin, &st,
                          "dmm_mechanism_commit of [%zu, +%zu) of the allocation at %p by mechanism '%s'", range.offset,
                          range.bytes, a->ptr, pm->name);
    if (s == DMM_OK) *newly_mapped = newly;
    return s;
}

static dmm_release_outcome pm_decommit(void *impl, const dmm_allocation *a, dmm_range range) {
    static const char op[] = "dmm_mechanism_decommit";
    pmech *pm = impl;
    dmm_status s = issued_check(pm, a, op, false);
    if (s != DMM_OK) return outcome_failed(range.bytes, s);
    dmm_plugin_allocation pa = to_plugin(a);
    dmm_plugin_release_outcome po;
    outcome_init(&po);
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.decommit(pm->impl, &pa, range.offset, range.bytes, &po, &st);
    /* a decommit releases only chunks wholly inside the range: it unmaps and keeps at most its bytes */
    return read_outcome(pm, &po, &st, op, a, range.bytes, range.bytes);
}

static dmm_status pm_committed_bytes(void *impl, const dmm_allocation *a, uint64_t *bytes) {
    pmech *pm = impl;
    dmm_status s = issued_check(pm, a, "dmm_mechanism_committed_bytes", false);
    if (s != DMM_OK) return s;
    dmm_plugin_allocation pa = to_plugin(a);
    uint64_t v = 0;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.committed_bytes(pm->impl, &pa, &v, &st);
    s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_committed_bytes of the allocation at %p by mechanism '%s'",
                          a->ptr, pm->name);
    if (s == DMM_OK) *bytes = v;
    return s;
}

static dmm_status pm_mapped_bytes_for_ranges(void *impl, const dmm_allocation *a, const dmm_range *ranges, size_t n,
                                             uint64_t *bytes) {
    pmech *pm = impl;
    dmm_status s = issued_check(pm, a, "dmm_mechanism_mapped_bytes_for_ranges", false);
    if (s != DMM_OK) return s;
    uint64_t buf[16];
    uint64_t *flat = flatten(ranges, n, buf);
    if (flat == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "dmm_mechanism_mapped_bytes_for_ranges: mechanism '%s': no host memory for %zu ranges",
                             pm->name, n);
    dmm_plugin_allocation pa = to_plugin(a);
    uint64_t v = 0;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.mapped_bytes_for_ranges(pm->impl, &pa, flat, n, &v, &st);
    if (flat != buf) free(flat);
    s = dmm__plugin_check(pm->plugin, &st,
                          "dmm_mechanism_mapped_bytes_for_ranges (%zu ranges) of the allocation at %p by "
                          "mechanism '%s'",
                          n, a->ptr, pm->name);
    if (s == DMM_OK) *bytes = v;
    return s;
}

/* ---- the optional virtual-backing slots (since 1.1; each only where the plugin fills it) ---- */

static dmm_status pm_alias(void *impl, const dmm_allocation *a, dmm_range dst, dmm_range src) {
    pmech *pm = impl;
    size_t dend = 0, send = 0;
    bool inside = src.bytes > 0 && src.bytes == dst.bytes && !__builtin_add_overflow(src.offset, src.bytes, &send) &&
                  !__builtin_add_overflow(dst.offset, dst.bytes, &dend) && send <= a->bytes && dend <= a->bytes;
    if (!inside || (src.offset < dend && dst.offset < send))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_mechanism_alias of [%zu, +%zu) to [%zu, +%zu) in the allocation at %p (%zu bytes) "
                             "by mechanism '%s' refused: the ranges must be non-empty, of the same size, inside the "
                             "allocation and not overlap; nothing was changed",
                             src.offset, src.bytes, dst.offset, dst.bytes, a->ptr, a->bytes, pm->name);
    dmm_status s = issued_check(pm, a, "dmm_mechanism_alias", false);
    if (s != DMM_OK) return s;
    dmm_plugin_allocation pa = to_plugin(a);
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.alias(pm->impl, &pa, dst.offset, src.offset, src.bytes, &st);
    return dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_alias of [%zu, +%zu) to [%zu, +%zu) in the allocation at "
                                              "%p by mechanism '%s'",
                             src.offset, src.bytes, dst.offset, dst.bytes, a->ptr, pm->name);
}

static dmm_status pm_is_quarantined(void *impl, const void *ptr, size_t bytes, bool *out) {
    pmech *pm = impl;
    uint32_t q = DMM_PLUGIN_ANSWER_UNSET;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.is_quarantined(pm->impl, (uint64_t)(uintptr_t)ptr, bytes, &q, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_is_quarantined of [%p, +%zu) by mechanism '%s'",
                                     ptr, bytes, pm->name);
    if (s != DMM_OK) return s;
    if (q > 1)
        return dmm_error_set(DMM_ERR_DRIVER,
                             "dmm_mechanism_is_quarantined of [%p, +%zu) by mechanism '%s': plugin '%s' (%s) reported "
                             "success but answered %u%s (the answer is 0 or 1)",
                             ptr, bytes, pm->name, pm->plugin->name, pm->plugin->path, (unsigned)q,
                             q == DMM_PLUGIN_ANSWER_UNSET ? ", the unset value" : "");
    *out = q == 1;
    return DMM_OK;
}

static dmm_status pm_drain_cache(void *impl) {
    pmech *pm = impl;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.drain_cache(pm->impl, &st);
    return dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_drain_cache of mechanism '%s'", pm->name);
}

static dmm_status pm_reservation(void *impl, uintptr_t *va, uint64_t *bytes) {
    pmech *pm = impl;
    uint64_t v = 0, n = 0;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.reservation(pm->impl, &v, &n, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_reservation of mechanism '%s'", pm->name);
    if (s != DMM_OK) return s;
    if ((uint64_t)(uintptr_t)v != v)
        return dmm_error_set(DMM_ERR_DRIVER,
                             "dmm_mechanism_reservation of mechanism '%s': plugin '%s' (%s) answered va 0x%llx, which "
                             "is no address here",
                             pm->name, pm->plugin->name, pm->plugin->path, (unsigned long long)v);
    if (va != NULL) *va = (uintptr_t)v;
    if (bytes != NULL) *bytes = n;
    return DMM_OK;
}

/* ---- creation ---- */

/* Reads and checks the plugin's tables into pm; on failure the caller destroys the plugin's object
 * through pm->pops.destroy if the copy holds one. */
static dmm_status read_tables(pmech *pm, const dmm_plugin_mechanism_ops *theirs, const char *kind) {
    static const char op[] = "dmm_plugin_mechanism_create";
    const dmm_plugin *p = pm->plugin;
    size_t need = ops_size_for_minor(p->minor);
    dmm_plugin_mechanism_ops ops; /* locals of their own, so that a sanitizer sees any read past them */
    uint32_t announced = dmm__plugin_read(theirs, &ops, sizeof ops, need);
    pm->pops = ops;
    if (announced < need)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "%s: plugin '%s' (%s), kind '%s': its dmm_plugin_mechanism_ops says struct_size %u, "
                             "below the %zu bytes that plugin ABI %u.%u defines",
                             op, p->name, p->path, kind, announced, need, DMM_PLUGIN_ABI_MAJOR, p->minor);
    const dmm_plugin_mechanism_ops *o = &pm->pops;
    const char *missing = o->name == NULL       ? "name"
                          : o->allocate == NULL ? "allocate"
                          : o->release == NULL  ? "release"
                          : o->device == NULL   ? "device"
                          : o->destroy == NULL  ? "destroy"
                                                : NULL;
    if (missing != NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin '%s' (%s), kind '%s': its mechanism table lacks the required slot '%s' "
                             "(name, allocate, release, device and destroy are required)",
                             op, p->name, p->path, kind, missing);
    size_t nlen = strnlen(o->name, sizeof pm->name);
    if (nlen == sizeof pm->name)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin '%s' (%s), kind '%s': the mechanism's name is longer than %zu characters",
                             op, p->name, p->path, kind, sizeof pm->name - 1);
    memcpy(pm->name, o->name, nlen + 1);
    if (o->virtual_backing != NULL) {
        if ((p->info.capabilities & DMM_CAP_VIRTUAL_BACKING) == 0)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: plugin '%s' (%s), kind '%s': the mechanism has a virtual_backing table but the "
                                 "plugin did not declare DMM_CAP_VIRTUAL_BACKING in its info->capabilities",
                                 op, p->name, p->path, kind);
        size_t vneed = VB_SIZE_REQUIRED;
        dmm_plugin_virtual_backing_ops vb;
        announced = dmm__plugin_read(o->virtual_backing, &vb, sizeof vb, vb_size_for_minor(p->minor));
        pm->pvb = vb;
        if (announced < vneed)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "%s: plugin '%s' (%s), kind '%s': its dmm_plugin_virtual_backing_ops says struct_size "
                                 "%u, below the %zu bytes of its required slots (those of plugin ABI %u.0)",
                                 op, p->name, p->path, kind, announced, vneed, DMM_PLUGIN_ABI_MAJOR);
        const dmm_plugin_virtual_backing_ops *v = &pm->pvb;
        missing = v->allocate_committed == NULL        ? "allocate_committed"
                  : v->commit == NULL                  ? "commit"
                  : v->decommit == NULL                ? "decommit"
                  : v->committed_bytes == NULL         ? "committed_bytes"
                  : v->mapped_bytes_for_ranges == NULL ? "mapped_bytes_for_ranges"
                                                       : NULL;
        if (missing != NULL)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: plugin '%s' (%s), kind '%s': its virtual_backing table lacks the slot '%s'; a "
                                 "capability table fills every slot of 1.0 (or is NULL: absent); those of 1.1 are "
                                 "optional",
                                 op, p->name, p->path, kind, missing);
    }
    return DMM_OK;
}

static void build_host_table(pmech *pm) {
    dmm_mechanism_ops *h = &pm->ops;
    memset(h, 0, sizeof *h);
    h->size = (uint32_t)sizeof *h;
    h->name = pm->name;
    h->allocate = pm_allocate;
    h->release = pm_release;
    h->device = pm_device;
    h->stats = pm->pops.stats != NULL ? pm_stats : NULL; /* absent stays absent: UNSUPPORTED */
    h->destroy = pm_destroy;
    if (pm->pops.virtual_backing != NULL) {
        pm->vb = (dmm_virtual_backing_ops){.size = sizeof pm->vb,
                                           .allocate_committed = pm_allocate_committed,
                                           .commit = pm_commit,
                                           .decommit = pm_decommit,
                                           .committed_bytes = pm_committed_bytes,
                                           .mapped_bytes_for_ranges = pm_mapped_bytes_for_ranges};
        /* the optional slots only where the plugin filled them (pvb holds none above the agreed minor) */
        const dmm_plugin_virtual_backing_ops *v = &pm->pvb;
        pm->vb.alias = v->alias != NULL ? pm_alias : NULL;
        pm->vb.is_quarantined = v->is_quarantined != NULL ? pm_is_quarantined : NULL;
        pm->vb.drain_cache = v->drain_cache != NULL ? pm_drain_cache : NULL;
        pm->vb.reservation = v->reservation != NULL ? pm_reservation : NULL;
        h->virtual_backing = &pm->vb;
    }
}

static bool valid_tier(int32_t tier) {
    return tier == DMM_TIER_DEVICE || tier == DMM_TIER_HOST || tier == DMM_TIER_DISK;
}

dmm_status dmm_plugin_mechanism_create(dmm_plugin *p, const char *kind, dmm_driver *driver, const void *config,
                                       dmm_mechanism **out) {
    static const char op[] = "dmm_plugin_mechanism_create";
    if (p == NULL || kind == NULL || driver == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin (%p), kind (%p), driver (%p) and out (%p) must be non-NULL", op, (void *)p,
                             (const void *)kind, (void *)driver, (void *)out);
    bool known = false;
    for (size_t i = 0; i < p->kind_count && !known; i++) known = strcmp(p->kinds[i], kind) == 0;
    if (!known)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin '%s' (%s) makes no mechanism of kind '%s' (it lists %zu kind%s, the first "
                             "'%s'); nothing was changed",
                             op, p->name, p->path, kind, p->kind_count, p->kind_count == 1 ? "" : "s", p->kinds[0]);
    pmech *pm = calloc(1, sizeof *pm);
    if (pm == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: plugin '%s', kind '%s': out of host memory", op, p->name, kind);
    pm->plugin = p;
    dmm_lock_init(&pm->lock);
    dmm__u64map_init(&pm->issued);

    dmm_plugin_create_args args;
    memset(&args, 0, sizeof args);
    args.struct_size = (uint32_t)sizeof args;
    args.abi_minor = p->minor;
    args.kind = kind;
    args.driver = driver;
    args.config = config;
    const dmm_plugin_mechanism_ops *theirs = NULL;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    dmm__plugin_lock();
    p->mechanisms++; /* counted before the factory runs: an unload cannot slip in between */
    p->create(&args, &pm->impl, &theirs, &st);
    dmm__plugin_unlock();
    dmm_status s = dmm__plugin_check(p, &st, "%s of kind '%s'", op, kind);
    if (s == DMM_OK && (pm->impl == NULL || theirs == NULL))
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                          "%s: plugin '%s' (%s), kind '%s': dmm_plugin_create reported success but set impl %p and "
                          "ops %p (both are required)",
                          op, p->name, p->path, kind, pm->impl, (const void *)theirs);
    if (s != DMM_OK) {
        /* Nothing usable was made; an object without a table cannot be destroyed by the host. */
        dmm__plugin_lock();
        p->mechanisms--;
        dmm__plugin_unlock();
        pm_free(pm);
        return s;
    }
    s = read_tables(pm, theirs, kind);
    if (s == DMM_OK) {
        int32_t tier = -1, index = -1;
        dmm__plugin_status_init(&st);
        pm->pops.device(pm->impl, &tier, &index, &st);
        s = dmm__plugin_check(p, &st, "%s of kind '%s': asking the mechanism's device", op, kind);
        if (s == DMM_OK && !valid_tier(tier))
            s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                              "%s: plugin '%s' (%s), kind '%s': the mechanism reports tier %d, which is no dmm_tier",
                              op, p->name, p->path, kind, (int)tier);
        if (s == DMM_OK && (tier != (int32_t)driver->device.tier || index != driver->device.index))
            s = dmm_error_set(DMM_ERR_WRONG_DEVICE,
                              "%s: plugin '%s' (%s), kind '%s': the mechanism reports device (tier %d, index %d) but "
                              "it was made on the driver of device (tier %d, index %d); a mechanism is on its "
                              "driver's device",
                              op, p->name, p->path, kind, (int)tier, (int)index, (int)driver->device.tier,
                              (int)driver->device.index);
        pm->device = (dmm_device_id){(dmm_tier)tier, index};
    }
    if (s == DMM_OK) {
        build_host_table(pm);
        s = dmm_mechanism_create(&pm->ops, pm, out);
    }
    if (s != DMM_OK) {
        /* Undo the factory: the sentence above says why; the destroy's own failure is only logged. */
        if (pm->pops.destroy != NULL) {
            dmm_plugin_status dst;
            dmm__plugin_status_init(&dst);
            pm->pops.destroy(pm->impl, &dst);
            if (dst.code != DMM_OK)
                dmm_log(DMM_LOG_WARN, "%s: plugin '%s' (%s): destroying the refused mechanism of kind '%s' failed "
                                       "(code %d); its object leaks",
                         op, p->name, p->path, kind, (int)dst.code);
        }
        dmm__plugin_lock();
        p->mechanisms--;
        dmm__plugin_unlock();
        pm_free(pm);
        return s;
    }
    return DMM_OK;
}
