/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/arena.c — the arena mechanism (DESIGN §4.3, §4.5): one VA reservation, allocation
 * records with 64-bit generations, and commit as one transaction per call.
 *
 * Idea: an allocation is a span of the reservation (best fit from the coalescing free list of
 * spans.c). Physical backing is tracked per granule: gmap[g] names the chunk backing granule g, and
 * each allocation record has a bitmap of the granules it references. A commit backs every granule
 * its range touches that the allocation does not reference yet: granules already backed by a LIVE
 * chunk just take a reference (so 512 allocations of 4 KiB share one 2 MiB granule), maximal runs of
 * unbacked granules get new chunks as large as the chunk limit allows (so 1 GiB is one handle, not
 * 512). Everything a commit did is logged in a transaction and undone on any failure; an undo step
 * that fails is counted (rollback_leaks) and leaves the bookkeeping equal to what is mapped.
 *
 * Alignment: max(align, min_align); an allocation of at least one granule starts on a granule, so a
 * big allocation never straddles a granule it shares with a small one at its head. Its tail may share.
 *
 * Identity: ids come from a 64-bit counter, never from the address; a record is found by its offset
 * and must match ptr, bytes, align and id, so a stale copy of a released allocation's value cannot
 * touch the next allocation at the same address.
 *
 * Where the rest lives (the arena's files are a tower; each calls only those below it, see
 * arena_types.h): this file is the top: create and destroy, the ops table, allocate and the
 * queries, stats, the public dmm_arena_* entry points and the device loss's confirmation. The
 * records are records.c's; commit and alias are kinds of the one transaction of commit.c (log,
 * undo, the charge ahead outside the lock and the second look), prefix commit its third kind
 * (prefix.c, the shared_mapping capability: same lock, same chunk rings); release and decommit are
 * release.c's; every driver call, charge and refund is chunks.c's.
 *
 * Thread contract: thread-safe. One mutex per arena, held across the driver calls of one operation
 * (never across an accounting charge): the arena is the slow path (the pool above it serves the hot
 * path from mapped memory), and holding the lock makes every operation atomic with respect to the
 * others, so e.g. 8 threads releasing one allocation make exactly one driver-level release. Lock
 * order: pool → provider → arena → driver; the governor's lock is never held while calling us.
 *
 * Invariants: arena_types.h; checked by dmm_arena_check (arena_check.c).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mech/arena_check.h"
#include "mech/chunks.h"
#include "mech/commit.h"
#include "mech/prefix.h"
#include "mech/records.h"
#include "mech/release.h"
#include "mech/share.h"

#define ARENA_DEFAULT_RESERVE ((uint64_t)64 << 30)
#define ARENA_DEFAULT_CHUNK_LIMIT ((uint64_t)1 << 30)
#define ARENA_DEFAULT_MIN_ALIGN 256u

static dmm_arena *A(void *impl) { return impl; }

static uint64_t div_up(uint64_t x, uint64_t d) { return x / d + (x % d != 0); }

static const char *tier_name(dmm_tier t) {
    switch (t) {
    case DMM_TIER_DEVICE: return "device";
    case DMM_TIER_HOST: return "host";
    case DMM_TIER_DISK: return "disk";
    }
    return "unknown-tier";
}

/* ---- mechanism ops ---- */

static dmm_status check_ranges(const char *op, size_t bytes, const dmm_range *ranges, size_t n) {
    if (n > 0 && ranges == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: %zu ranges announced but the range array is NULL", op, n);
    for (size_t i = 0; i < n; i++) {
        size_t end;
        if (__builtin_add_overflow(ranges[i].offset, ranges[i].bytes, &end) || end > bytes)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: range %zu [%zu, +%zu) runs past the allocation's %zu bytes; nothing was "
                                 "changed: pass ranges inside the allocation",
                                 op, i, ranges[i].offset, ranges[i].bytes, bytes);
    }
    return DMM_OK;
}

/* allocate (whole = true: commit all of it) and allocate_committed (commit `ranges`). */
static dmm_status allocate(dmm_arena *a, size_t bytes, size_t align, bool whole, const dmm_range *ranges, size_t n,
                           dmm_allocation *out) {
    const char *op = whole ? "arena allocate" : "arena allocate_committed";
    if (out == NULL || bytes == 0 || (align != 0 && !dmm_is_pow2(align)))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s of %zu bytes aligned to %zu refused: the size must be non-zero, the alignment 0 "
                             "or a power of two, and the output non-NULL; nothing was changed",
                             op, bytes, align);
    dmm_status s = check_ranges(op, bytes, ranges, n);
    if (s != DMM_OK) return s;
    uint64_t eff = align > a->min_align ? align : a->min_align, span;
    if (!dmm_align_up(bytes, a->min_align, &span) || span > a->reserve)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "%s of %zu bytes refused: the %s reserved only %llu bytes of address space; create "
                             "the arena with a larger reserve_bytes",
                             op, bytes, a->where, (unsigned long long)a->reserve);
    if (span >= a->gran && eff < a->gran) eff = a->gran;

    uint64_t maxg = (span - 1) / a->gran + 2;
    arena_record *r = calloc(1, sizeof *r);
    uint64_t *bits = r != NULL ? calloc(div_up(maxg, 64), sizeof *bits) : NULL;
    if (bits == NULL) {
        free(r);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s of %zu bytes: no host memory for the allocation record; "
                                                    "nothing was changed", op, bytes);
    }
    r->bits = bits;

    dmm_lock_acquire(&a->lock);
    uint64_t off = 0;
    if (dmm__arena_lost(a)) {
        s = dmm__arena_lost_error(a, op);
    } else if (!dmm__arena_records_room(a) || !dmm__spans_reserve(&a->free, 1)) {
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s of %zu bytes: no host memory for the record table; nothing "
                                                 "was changed", op, bytes);
    } else if (!dmm__spans_take_best_fit(&a->free, a->base, span, eff, &off)) {
        char b1[32], b2[32];
        uint64_t largest = 0;
        for (size_t i = 0; i < a->free.n; i++)
            if (a->free.v[i].len > largest) largest = a->free.v[i].len;
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                          "%s of %zu bytes aligned to %llu: the %s has no free span that large (largest free "
                          "span %s of %s reserved); release allocations, or create the arena with a larger "
                          "reserve_bytes",
                          op, bytes, (unsigned long long)eff, a->where, dmm__fmt_bytes(largest, b1, sizeof b1),
                          dmm__fmt_bytes(a->reserve, b2, sizeof b2));
    }
    if (s != DMM_OK) {
        dmm_lock_release(&a->lock);
        free(r->bits);
        free(r);
        return s;
    }
    r->off = off;
    r->bytes = bytes;
    r->span = span;
    r->align = eff;
    r->g0 = off / a->gran;
    r->ng = (off + span - 1) / a->gran - r->g0 + 1;
    r->state = RECORD_LIVE;
    r->id = ++a->next_id;
    dmm__arena_records_insert(a, r);
    dmm_count_add(&a->st.allocations, 1); /* counted at once: the check may run while the lock is dropped */
    dmm_count_add(&a->st.allocated_bytes, (int64_t)bytes);

    uint64_t id = r->id, newly = 0;
    s = dmm__arena_commit(a, off, id, whole, ranges, n, 0, op, &newly);
    if (s != DMM_OK) { /* the record goes; nothing below sets an error, so the commit's stays the last */
        r = dmm__arena_find(a, off);
        if (r != NULL && r->id == id) {
            /* commit_range reserved room for the span's pieces; this only matters if poisoning split more */
            size_t room = dmm__arena_span_room(a, off, span);
            (void)(dmm__spans_reserve(&a->free, room) && dmm__spans_reserve(&a->quarantine, room));
            dmm__arena_span_free(a, off, span);
            dmm__arena_forget(a, r);
            dmm_count_sub(&a->st.allocations, 1);
            dmm_count_sub(&a->st.allocated_bytes, (int64_t)bytes);
        }
        dmm_lock_release(&a->lock);
        return s;
    }
    out->ptr = (void *)(a->base + off);
    out->bytes = bytes;
    out->align = (size_t)eff;
    out->id = id;
    out->device = a->device;
    dmm_lock_release(&a->lock);
    return DMM_OK;
}

static dmm_status arena_allocate_committed(void *impl, size_t bytes, size_t align, const dmm_range *ranges,
                                           size_t n, dmm_allocation *out) {
    return allocate(A(impl), bytes, align, false, ranges, n, out);
}

static dmm_status arena_allocate(void *impl, size_t bytes, size_t align, dmm_allocation *out) {
    return allocate(A(impl), bytes, align, true, NULL, 0, out);
}

/* commit (piece_bytes 0) and commit_pieces (new chunks of at most piece_bytes). */
static dmm_status commit_in_pieces(dmm_arena *a, const dmm_allocation *al, dmm_range range, uint64_t piece_bytes,
                                   uint64_t *newly_mapped, const char *op) {
    uint64_t dummy;
    if (newly_mapped == NULL) newly_mapped = &dummy;
    *newly_mapped = 0;
    if (piece_bytes % a->gran != 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: pieces of %llu bytes are not whole granules of %llu bytes; nothing was committed: "
                             "pass a multiple of the granularity",
                             op, (unsigned long long)piece_bytes, (unsigned long long)a->gran);
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s == DMM_OK) s = check_ranges(op, r->bytes, &range, 1);
    if (s == DMM_OK && range.bytes > 0)
        s = dmm__arena_commit(a, r->off, r->id, false, &range, 1, piece_bytes / a->gran, op, newly_mapped);
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_status arena_commit(void *impl, const dmm_allocation *al, dmm_range range, uint64_t *newly_mapped) {
    return commit_in_pieces(A(impl), al, range, 0, newly_mapped, "arena commit");
}

static dmm_status arena_commit_pieces(void *impl, const dmm_allocation *al, dmm_range range, uint64_t piece_bytes,
                                      uint64_t *newly_mapped) {
    if (piece_bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "arena commit_pieces: pieces of 0 bytes; nothing was committed: pass the largest chunk "
                             "wanted, a multiple of the granularity");
    return commit_in_pieces(A(impl), al, range, piece_bytes, newly_mapped, "arena commit_pieces");
}

static dmm_status arena_committed_bytes(void *impl, const dmm_allocation *al, uint64_t *bytes) {
    dmm_arena *a = A(impl);
    const char *op = "arena committed_bytes";
    if (bytes == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output pointer is NULL", op);
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s == DMM_OK) *bytes = r->nrefs * a->gran;
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_status arena_mapped_bytes_for_ranges(void *impl, const dmm_allocation *al, const dmm_range *ranges,
                                                size_t n, uint64_t *bytes) {
    dmm_arena *a = A(impl);
    const char *op = "arena mapped_bytes_for_ranges";
    if (bytes == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output pointer is NULL", op);
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s == DMM_OK) s = check_ranges(op, r->bytes, ranges, n);
    uint64_t *seen = NULL;
    if (s == DMM_OK && (seen = calloc(div_up(r->ng, 64), sizeof *seen)) == NULL)
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for a scratch bitmap", op);
    if (s == DMM_OK) {
        memcpy(seen, r->bits, div_up(r->ng, 64) * sizeof *seen);
        uint64_t need = 0;
        for (size_t i = 0; i < n; i++) {
            if (ranges[i].bytes == 0) continue;
            uint64_t lo = r->off + ranges[i].offset, hi = lo + ranges[i].bytes;
            for (uint64_t g = lo / a->gran; g <= (hi - 1) / a->gran; g++) {
                uint64_t k = g - r->g0;
                if ((seen[k / 64] >> (k % 64)) & 1u) continue;
                seen[k / 64] |= (uint64_t)1 << (k % 64);
                arena_chunk *c = arena_chunk_at(a, g);
                if (c == NULL || c->state != CHUNK_LIVE) need++;
            }
        }
        *bytes = need * a->gran;
    }
    free(seen);
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_device_id arena_device(void *impl) { return A(impl)->device; }

static dmm_status arena_stats(void *impl, dmm_stats *out) {
    dmm_arena *a = A(impl);
    dmm_lock_acquire(&a->lock);
    dmm_stats copy = a->st;
    dmm_lock_release(&a->lock);
    copy.size = sizeof copy;
    return dmm__stats_copy_out(&copy, out);
}

static void arena_free_all(dmm_arena *a) {
    dmm__arena_records_free(a);
    dmm__arena_prefixes_free(a);
    free(a->buckets);
    free(a->gmap);
    free(a->chunks);
    free(a->free_slots);
    free(a->cache.v);
    free(a->qhandles.v);
    free(a->qimported.v);
    dmm__spans_fini(&a->free);
    dmm__spans_fini(&a->quarantine);
    dmm_lock_destroy(&a->lock);
    free(a);
}

static dmm_status arena_destroy(void *impl) {
    dmm_arena *a = A(impl);
    const char *op = "arena destroy";
    dmm_lock_acquire(&a->lock);
    dmm_status s = DMM_OK;
    if (dmm__arena_lost(a) && !a->confirmed) {
        s = dmm_error_set(DMM_ERR_BUSY,
                          "%s refused: the %s lost its device and still owns %llu bytes it cannot give back; tear "
                          "the context down and call dmm_arena_confirm_context_terminated() first",
                          op, a->where, (unsigned long long)a->st.owned_bytes.current);
    } else if (!dmm__arena_lost(a) && a->nprefixes > 0) {
        s = dmm_error_set(DMM_ERR_BUSY,
                          "%s refused: %zu shared prefix(es) of the %s are still live; nothing was changed: release "
                          "them with dmm_prefix_release() first",
                          op, a->nprefixes, a->where);
    } else if (!dmm__arena_lost(a) && a->nrecords > 0) {
        s = dmm_error_set(DMM_ERR_BUSY,
                          "%s refused: %zu allocations (%lld bytes) of the %s are still live; nothing was changed: "
                          "release them first",
                          op, a->nrecords, (long long)a->st.allocated_bytes.current, a->where);
    } else if (!dmm__arena_lost(a)) {
        if (!dmm__arena_room(a, 0, a->cache.n + 1, 0, op)) s = DMM_ERR_OUT_OF_MEMORY;
        if (s == DMM_OK) s = dmm__arena_drain(a);
        if (s == DMM_OK) s = dmm__arena_give_back(a);
        if (s == DMM_OK && a->reserved) {
            s = dmm__drv_unreserve(a->drv, a->base, (size_t)a->reserve);
            if (s != DMM_OK) {
                a->st.driver_failures++;
                dmm__error_wrap(s, "%s: giving back the %s's %llu bytes of address space failed, the arena is "
                                   "intact: retry the destroy later",
                                op, a->where, (unsigned long long)a->reserve);
            } else {
                a->reserved = false;
                dmm_count_sub(&a->st.reserved_bytes, (int64_t)a->reserve);
            }
        }
    }
    dmm_lock_release(&a->lock);
    if (s != DMM_OK) return s;
    arena_free_all(a);
    return DMM_OK;
}

static dmm_status arena_reservation(void *impl, uintptr_t *va, uint64_t *bytes);
static dmm_status arena_is_quarantined(void *impl, const void *ptr, size_t bytes, bool *out);
static dmm_status arena_drain_cache(void *impl);

/* dmm_import: a VA-only allocation of the export's size, then the import transaction (share.c); a
 * failed import gives the VA back (a release of an allocation with nothing committed is COMPLETE). */
static dmm_status arena_import(void *impl, const dmm_export *ex, dmm_access access, dmm_allocation *out) {
    dmm_arena *a = A(impl);
    dmm_status s = dmm__arena_import_check(a, ex, access, "dmm_import");
    if (s != DMM_OK) return s;
    dmm_allocation al = {0};
    s = allocate(a, (size_t)ex->bytes, (size_t)a->gran, false, NULL, 0, &al);
    if (s != DMM_OK) return dmm__error_wrap(s, "dmm_import of %llu bytes: no address space for it",
                                            (unsigned long long)ex->bytes);
    s = dmm__arena_import_commit(a, &al, ex, access, "dmm_import");
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        dmm_release_outcome o = dmm__arena_release(a, &al);
        if (o.state != DMM_RELEASE_COMPLETE)
            dmm__error_wrap(s, "dmm_import: giving back the address space of the failed import was %s too",
                            dmm_release_state_str(o.state));
        else
            s = dmm__error_restore(&why);
        return s;
    }
    *out = al;
    return DMM_OK;
}

static const dmm_virtual_backing_ops arena_vb_ops = {
    .size = sizeof(dmm_virtual_backing_ops),
    .allocate_committed = arena_allocate_committed,
    .commit = arena_commit,
    .decommit = dmm__arena_decommit,
    .committed_bytes = arena_committed_bytes,
    .mapped_bytes_for_ranges = arena_mapped_bytes_for_ranges,
    .alias = dmm__arena_alias,
    .is_quarantined = arena_is_quarantined,
    .drain_cache = arena_drain_cache,
    .reservation = arena_reservation,
    .export_range = dmm__arena_export,
    .import = arena_import,
    .commit_pieces = arena_commit_pieces,
};

static const dmm_mechanism_ops arena_ops = {
    sizeof(dmm_mechanism_ops),
    "arena",
    arena_allocate,
    dmm__arena_release,
    arena_device,
    arena_stats,
    arena_destroy,
    &arena_vb_ops,
    &dmm__arena_shared_ops,
    NULL,
};

/* ---- public ---- */

dmm_status dmm_arena_create(dmm_driver *driver, const dmm_arena_config *cfg, dmm_mechanism **out) {
    const char *op = "dmm_arena_create";
    if (driver == NULL || driver->ops == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the driver or the output pointer is NULL", op);
    dmm_arena_config c = {sizeof c, 0, 0, 0, 0, NULL, false};
    if (cfg != NULL) {
        size_t least = offsetof(dmm_arena_config, exportable); /* a config from before `exportable` */
        if (cfg->size < least)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "%s: the config's size is %u bytes; set .size = sizeof(dmm_arena_config) (%zu)",
                                 op, cfg->size, sizeof c);
        memcpy(&c, cfg, cfg->size < sizeof c ? cfg->size : sizeof c);
        c.size = sizeof c;
        if (c.accounting != NULL && (c.accounting->charge == NULL || c.accounting->refund == NULL))
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: the accounting hook needs both charge and refund (charge %s, refund %s); "
                                 "fill both, or pass no hook",
                                 op, c.accounting->charge != NULL ? "set" : "NULL",
                                 c.accounting->refund != NULL ? "set" : "NULL");
    }
    const dmm_driver_ops *o = driver->ops;
    char where[48];
    snprintf(where, sizeof where, "arena on %s %d", tier_name(driver->device.tier), (int)driver->device.index);
    if (o->granularity == NULL || o->reserve == NULL || o->unreserve == NULL || o->create == NULL ||
        o->release == NULL || o->map == NULL || o->unmap == NULL || o->set_access == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "%s: the '%s' driver of %s %d has no virtual memory management; use "
                             "dmm_eager_create() for this device",
                             op, o->name ? o->name : "?", tier_name(driver->device.tier), (int)driver->device.index);
    if (c.exportable && !dmm__drv_can_export(driver))
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "%s: exportable = true, but the '%s' driver of %s %d cannot create handles for export "
                             "to other processes; create the arena without exportable",
                             op, o->name ? o->name : "?", tier_name(driver->device.tier), (int)driver->device.index);
    size_t gran = 0;
    dmm_status s = dmm__drv_granularity(driver, &gran);
    if (s != DMM_OK) return s;
    if (!dmm_is_pow2(gran))
        return dmm_error_set(DMM_ERR_DRIVER, "%s: the '%s' driver reports a granularity of %zu bytes, not a power "
                                             "of two", op, o->name, gran);
    uint64_t reserve = c.reserve_bytes ? c.reserve_bytes : ARENA_DEFAULT_RESERVE;
    if (!dmm_align_up(reserve, gran, &reserve))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: reserve_bytes %llu overflows", op,
                             (unsigned long long)c.reserve_bytes);
    uint64_t limit = c.chunk_limit_bytes;
    if (limit == 0) limit = ARENA_DEFAULT_CHUNK_LIMIT > gran ? ARENA_DEFAULT_CHUNK_LIMIT : gran;
    if (limit < gran || limit % gran != 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: chunk_limit_bytes %llu is not a positive multiple of the granularity (%zu bytes)",
                             op, (unsigned long long)limit, gran);
    uint64_t min_align = c.min_align ? c.min_align : ARENA_DEFAULT_MIN_ALIGN;
    if (!dmm_is_pow2(min_align) || min_align > gran)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: min_align %zu must be a power of two no larger than the granularity (%zu bytes)",
                             op, c.min_align, gran);
    uint64_t ngran = reserve / gran;
    if (ngran > UINT32_MAX - 2)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: reserve_bytes %llu is %llu granules of %zu bytes, more than the arena tracks "
                             "(%u); reserve less",
                             op, (unsigned long long)reserve, (unsigned long long)ngran, gran, UINT32_MAX - 2);

    dmm_arena *a = calloc(1, sizeof *a);
    uint32_t *gmap = a != NULL ? calloc(ngran, sizeof *gmap) : NULL;
    if (gmap == NULL || !dmm__spans_reserve(&a->free, 16) || !dmm__spans_reserve(&a->quarantine, 16)) {
        if (a != NULL) {
            dmm__spans_fini(&a->free);
            dmm__spans_fini(&a->quarantine);
        }
        free(gmap);
        free(a);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the arena's tables (%llu granules)", op,
                             (unsigned long long)ngran);
    }
    dmm_lock_init(&a->lock);
    a->drv = driver;
    a->device = driver->device;
    memcpy(a->where, where, sizeof where);
    if (c.accounting != NULL) {
        a->acct = *c.accounting;
        a->has_acct = true;
    }
    a->gran = gran;
    a->reserve = reserve;
    a->limit_g = limit / gran;
    a->cache_limit = c.cache_limit_bytes;
    a->min_align = min_align;
    a->exportable = c.exportable;
    a->gmap = gmap;
    a->ngran = ngran;
    a->st.size = sizeof a->st;

    uintptr_t va = 0;
    a->st.driver_reserve++;
    s = dmm__drv_reserve(driver, (size_t)reserve, 0, &va);
    if (s != DMM_OK) {
        char b[32];
        dmm__error_wrap(s,
                        "%s: reserving %s (%llu bytes) of address space on %s %d failed, so the arena was not "
                        "created (no fall back to eager memory): pass a smaller reserve_bytes in dmm_arena_config",
                        op, dmm__fmt_bytes(reserve, b, sizeof b), (unsigned long long)reserve,
                        tier_name(driver->device.tier), (int)driver->device.index);
        arena_free_all(a); /* sets no error */
        return s;
    }
    a->base = va;
    a->reserved = true;
    dmm__spans_insert(&a->free, 0, reserve);
    dmm_count_add(&a->st.reserved_bytes, (int64_t)reserve);

    s = dmm_mechanism_create(&arena_ops, a, out);
    if (s != DMM_OK) {
        /* a good unreserve sets no error: the mechanism's failure stays the last error */
        if (dmm__drv_unreserve(driver, va, (size_t)reserve) == DMM_OK)
            dmm__error_wrap(s, "%s: the %s could not become a mechanism; its address space was given back", op,
                            where);
        else
            dmm__error_wrap(s, "%s: the %s could not become a mechanism (%s), and giving its address space back "
                               "failed too", op, where, dmm_status_str(s));
        arena_free_all(a);
        return s;
    }
    return DMM_OK;
}

static dmm_status arena_of(dmm_mechanism *m, const char *op, dmm_arena **out) {
    dmm_arena *a = dmm__mechanism_impl_if(m, &arena_ops);
    if (a == NULL)
        return dmm_error_set(m == NULL ? DMM_ERR_INVALID_ARGUMENT : DMM_ERR_WRONG_MECHANISM,
                             "%s: %s is not an arena; pass a mechanism made by dmm_arena_create()", op,
                             m == NULL ? "NULL" : dmm_mechanism_name(m));
    *out = a;
    return DMM_OK;
}

/* The arena-typed forms of the optional virtual-backing slots (dmm/arena.h); the pool reaches the
 * same code through dmm_mechanism_alias & co., which work over any mechanism that fills the slots. */
dmm_status dmm_arena_alias(dmm_mechanism *m, const dmm_allocation *al, dmm_range dst, dmm_range src) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_alias", &a);
    return s != DMM_OK ? s : dmm__arena_alias(a, al, dst, src);
}

dmm_status dmm_arena_reservation(dmm_mechanism *m, uintptr_t *va, uint64_t *bytes) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_reservation", &a);
    return s != DMM_OK ? s : arena_reservation(a, va, bytes);
}

dmm_status dmm_arena_is_quarantined(dmm_mechanism *m, const void *ptr, size_t bytes, bool *out) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_is_quarantined", &a);
    return s != DMM_OK ? s : arena_is_quarantined(a, ptr, bytes, out);
}

dmm_status dmm_arena_drain_cache(dmm_mechanism *m) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_drain_cache", &a);
    return s != DMM_OK ? s : arena_drain_cache(a);
}

dmm_status dmm_arena_check(dmm_mechanism *m) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_check", &a);
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&a->lock);
    const char *why = dmm__arena_check_locked(a);
    if (why != NULL) s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_arena_check: %s: %s", a->where, why);
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_status arena_reservation(void *impl, uintptr_t *va, uint64_t *bytes) {
    dmm_arena *a = A(impl);
    if (va) *va = a->base;
    if (bytes) *bytes = a->reserve;
    return DMM_OK;
}

dmm_status dmm_arena_free_spans(dmm_mechanism *m, size_t *count) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_free_spans", &a);
    if (s != DMM_OK) return s;
    if (count == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_arena_free_spans: count is NULL");
    dmm_lock_acquire(&a->lock);
    *count = a->free.n;
    dmm_lock_release(&a->lock);
    return DMM_OK;
}

static dmm_status arena_is_quarantined(void *impl, const void *ptr, size_t bytes, bool *out) {
    dmm_arena *a = A(impl);
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_arena_is_quarantined: out is NULL");
    *out = false;
    uintptr_t p = (uintptr_t)ptr;
    if (bytes == 0) return DMM_OK;
    dmm_lock_acquire(&a->lock);
    uint64_t lo = p > a->base ? p - a->base : 0, hi = p + bytes - a->base;
    if (p + bytes > a->base && a->reserved && lo < a->reserve) {
        if (hi > a->reserve) hi = a->reserve;
        *out = dmm__spans_overlaps(&a->quarantine, lo, hi - lo);
        for (uint64_t g = lo / a->gran; !*out && g <= (hi - 1) / a->gran; g++) {
            arena_chunk *c = arena_chunk_at(a, g);
            if (c != NULL && c->state == CHUNK_POISONED) *out = true;
        }
    }
    dmm_lock_release(&a->lock);
    return DMM_OK;
}

static dmm_status arena_drain_cache(void *impl) {
    dmm_arena *a = A(impl);
    dmm_status s = DMM_OK;
    dmm_lock_acquire(&a->lock);
    if (dmm__arena_lost(a)) s = dmm__arena_lost_error(a, "dmm_arena_drain_cache");
    else if (dmm__arena_room(a, 0, a->cache.n, 0, "dmm_arena_drain_cache")) s = dmm__arena_drain(a);
    else s = DMM_ERR_OUT_OF_MEMORY;
    dmm_lock_release(&a->lock);
    return s;
}

dmm_status dmm_arena_confirm_context_terminated(dmm_mechanism *m) {
    dmm_arena *a = NULL;
    const char *op = "dmm_arena_confirm_context_terminated";
    dmm_status s = arena_of(m, op, &a);
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&a->lock);
    if (!dmm__arena_lost(a)) {
        dmm_lock_release(&a->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: the %s has not lost its device, so there is nothing to discharge; release its "
                             "allocations and destroy it normally",
                             op, a->where);
    }
    if (!a->confirmed) {
        /* the context is gone and took every handle, mapping and the reservation with it */
        for (int axis = 0; axis < 2; axis++) {
            if (a->charged[axis] > 0 && a->has_acct)
                a->acct.refund(a->acct.user, a->device, (dmm_axis)axis, a->charged[axis]);
            a->charged[axis] = 0;
        }
        dmm__arena_records_free(a);
        dmm__arena_prefixes_free(a);
        memset(a->gmap, 0, a->ngran * sizeof *a->gmap);
        a->nslots = a->nfree = 0;
        a->live_chunks = a->poisoned_chunks = 0;
        a->cache.n = a->qhandles.n = a->qimported.n = 0;
        a->cache.bytes = a->qhandles.bytes = a->qimported.bytes = 0;
        a->free.n = a->quarantine.n = 0;
        a->free.total = a->quarantine.total = 0;
        a->reserved = false;
        dmm_count *zero[] = {&a->st.allocations,  &a->st.allocated_bytes, &a->st.reserved_bytes,
                             &a->st.committed_bytes, &a->st.mapped_bytes, &a->st.owned_bytes,
                             &a->st.handles,      &a->st.cached_bytes,    &a->st.quarantined_span_bytes,
                             &a->st.imported_bytes};
        for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) zero[i]->current = 0;
        a->confirmed = true;
    }
    (void)dmm__drv_confirm_terminated(a->drv); /* the context is the driver's: its other users may go too */
    dmm_lock_release(&a->lock);
    return DMM_OK;
}
