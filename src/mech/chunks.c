/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/chunks.c — the arena's physical chunks: where a chunk is born (charge, create or take
 * from the cache, map; its access is granted over the caller's whole run: dmm__arena_grant), where
 * it is unmapped, cached, released, poisoned, and where every driver call, charge and refund of the
 * arena happens.
 *
 * Idea: a chunk is one driver handle over a run of granules, mapped as one unit. Each step of its
 * life is a driver call that may fail, and each failure leaves the bookkeeping equal to what the
 * driver really holds: the stats and the accounting hook move only after the driver call that
 * changes reality has succeeded (a charge comes before the call it pays for and is refunded if the
 * call fails). A chunk whose unmap fails stays mapped and becomes POISONED (never committed again,
 * its free VA quarantined); a handle whose release fails is quarantined (owned, never reused).
 *
 * Prefixes (prefix.c): a ring whose handle a prefix holds points at the prefix's piece; its last
 * member out parks the handle in the piece (owned, unmapped) instead of caching or releasing it, and
 * a sharer's chunk is born into the ring (or, from a parked piece, as a new ring), and prefix.c grants
 * it READ access.
 *
 * Aliases: a chunk may map the handle of another chunk (dmm_arena_alias). The chunks mapping one
 * handle form a ring; the handle is created, charged (OWNED) and counted once, each mapping is charged
 * (MAPPED) and counted on its own. A dying chunk unmaps first; only the last member of a ring caches
 * or releases the handle, so a handle never reaches the cache (or the driver's release) while it is
 * still mapped somewhere, and the contents seen through the other mappings stay intact.
 *
 * Device loss: latched on the driver (driver/call.h), whichever user of it met it first; once the
 * driver is lost no driver call is made (every wrapper below answers DMM_ERR_DEVICE_LOST itself) and
 * nothing is refunded (dmm_arena_confirm_context_terminated discharges everything at once).
 *
 * Trade-off: chunks are as large as the chunk limit allows (one handle costs the same whether it is
 * 2 MiB or 64 MiB on the H200), so an unmap or release failure affects a larger unit; in exchange a
 * 1 GiB commit is one create + map + set-access instead of 512.
 *
 * Invariants: see arena_types.h. All functions here run under the arena's lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mech/chunks.h"
#include "mech/records.h"

/* ---- driver calls ---- */

static const char *axis_name(dmm_axis axis) { return axis == DMM_AXIS_OWNED ? "owned" : "mapped"; }

dmm_status dmm__arena_lost_error(dmm_arena *a, const char *op) {
    return dmm_error_set(DMM_ERR_DEVICE_LOST,
                         "%s: the %s lost its device (a driver call reported a sticky context error; first seen at "
                         "%s); it makes no more driver calls and refunds nothing: tear the context down, then call "
                         "dmm_arena_confirm_context_terminated() to discharge its memory",
                         op, a->where, dmm__drv_lost_why(a->drv));
}

/* Every call below goes through the driver's funnel (driver/call.h), which refuses once the driver
 * is lost and latches a loss the call reports; its time (from `t0`) counts in driver_ns. */
static dmm_status drv_done(dmm_arena *a, uint64_t t0, dmm_status s) {
    a->st.driver_ns += dmm_now_ns() - t0;
    if (s != DMM_OK) a->st.driver_failures++;
    return s;
}

dmm_status dmm__arena_drv_create(dmm_arena *a, uint64_t bytes, dmm_phys *phys) {
    if (dmm__arena_lost(a)) return dmm__arena_lost_error(a, "arena: create of a physical handle");
    a->st.driver_create++;
    uint64_t t0 = dmm_now_ns();
    return drv_done(a, t0, dmm__drv_create(a->drv, (size_t)bytes, phys));
}

dmm_status dmm__arena_drv_create_exportable(dmm_arena *a, uint64_t bytes, dmm_phys *phys) {
    if (dmm__arena_lost(a)) return dmm__arena_lost_error(a, "arena: create of an exportable physical handle");
    a->st.driver_create++;
    uint64_t t0 = dmm_now_ns();
    return drv_done(a, t0, dmm__drv_create_exportable(a->drv, (size_t)bytes, phys));
}

dmm_status dmm__arena_drv_export(dmm_arena *a, dmm_phys phys, dmm_access access, int *fd) {
    if (dmm__arena_lost(a)) return dmm__arena_lost_error(a, "arena: export of a physical handle");
    uint64_t t0 = dmm_now_ns();
    dmm_status s = drv_done(a, t0, dmm__drv_export(a->drv, phys, access, fd));
    if (s == DMM_OK) a->st.exported_handles++;
    return s;
}

dmm_status dmm__arena_drv_import(dmm_arena *a, int fd, uint64_t bytes, dmm_access access, dmm_phys *phys) {
    if (dmm__arena_lost(a)) return dmm__arena_lost_error(a, "arena: import of a physical handle");
    uint64_t t0 = dmm_now_ns();
    return drv_done(a, t0, dmm__drv_import(a->drv, fd, (size_t)bytes, access, phys));
}

dmm_status dmm__arena_drv_release(dmm_arena *a, dmm_phys phys, uint64_t bytes) {
    (void)bytes;
    if (dmm__arena_lost(a)) return dmm__arena_lost_error(a, "arena: release of a physical handle");
    a->st.driver_release++;
    uint64_t t0 = dmm_now_ns();
    return drv_done(a, t0, dmm__drv_release(a->drv, phys));
}

dmm_status dmm__arena_drv_map(dmm_arena *a, uint64_t off, uint64_t bytes, dmm_phys phys) {
    if (dmm__arena_lost(a)) return dmm__arena_lost_error(a, "arena: map");
    a->st.driver_map++;
    uint64_t t0 = dmm_now_ns();
    return drv_done(a, t0, dmm__drv_map(a->drv, a->base + off, (size_t)bytes, phys));
}

dmm_status dmm__arena_drv_unmap(dmm_arena *a, uint64_t off, uint64_t bytes) {
    if (dmm__arena_lost(a)) return dmm__arena_lost_error(a, "arena: unmap");
    a->st.driver_unmap++;
    uint64_t t0 = dmm_now_ns();
    return drv_done(a, t0, dmm__drv_unmap(a->drv, a->base + off, (size_t)bytes));
}

dmm_status dmm__arena_drv_set_access(dmm_arena *a, uint64_t off, uint64_t bytes, dmm_access access) {
    if (dmm__arena_lost(a)) return dmm__arena_lost_error(a, "arena: set_access");
    a->st.driver_set_access++;
    uint64_t t0 = dmm_now_ns();
    return drv_done(a, t0, dmm__drv_set_access(a->drv, a->base + off, (size_t)bytes, access));
}

/* ---- accounting ---- */

dmm_status dmm__arena_hook_charge(dmm_arena *a, dmm_axis axis, uint64_t bytes, const char *op) {
    if (!a->has_acct || bytes == 0) return DMM_OK;
    dmm_clear_error();
    dmm_status s = a->acct.charge(a->acct.user, a->device, axis, bytes);
    if (s == DMM_OK) return DMM_OK;
    char b[32];
    bool said = dmm_last_status() != DMM_OK && dmm_last_error()[0] != '\0';
    return dmm_error_set(s,
                         "%s: the accounting hook refused to charge %s (%llu bytes) on the %s axis of the %s "
                         "(%s%s%s); nothing was changed: free or trim memory, or raise the budget",
                         op, dmm__fmt_bytes(bytes, b, sizeof b), (unsigned long long)bytes, axis_name(axis),
                         a->where, dmm_status_str(s), said ? ": " : "", said ? dmm_last_error() : "");
}

void dmm__arena_hook_refund(dmm_arena *a, dmm_axis axis, uint64_t bytes) {
    if (a->has_acct && bytes > 0) a->acct.refund(a->acct.user, a->device, axis, bytes);
}

dmm_status dmm__arena_charge(dmm_arena *a, dmm_axis axis, uint64_t bytes, const char *op) {
    if (a->pot != NULL) {
        if (a->pot->bytes[axis] < bytes) {
            char b[32];
            a->pot->short_of = true;
            return dmm_error_set(DMM_ERR_BUSY,
                                 "%s: the %s changed between planning and committing (%s more on the %s axis "
                                 "than was charged ahead); nothing was changed: retry",
                                 op, a->where, dmm__fmt_bytes(bytes - a->pot->bytes[axis], b, sizeof b),
                                 axis_name(axis));
        }
        a->pot->bytes[axis] -= bytes;
    } else {
        dmm_status s = dmm__arena_hook_charge(a, axis, bytes, op);
        if (s != DMM_OK) return s;
    }
    a->charged[axis] += bytes;
    return DMM_OK;
}

void dmm__arena_refund(dmm_arena *a, dmm_axis axis, uint64_t bytes) {
    if (dmm__arena_lost(a) || bytes == 0) return;
    a->charged[axis] -= bytes;
    if (a->pot != NULL) a->pot->bytes[axis] += bytes;
    else dmm__arena_hook_refund(a, axis, bytes);
}

/* ---- tables ---- */

static bool handles_reserve(handle_vec *h, size_t extra) {
    if (h->n + extra <= h->cap) return true;
    size_t cap = h->cap ? h->cap * 2 : 8;
    while (cap < h->n + extra) cap *= 2;
    arena_handle *v = realloc(h->v, cap * sizeof *v);
    if (v == NULL) return false;
    h->v = v;
    h->cap = cap;
    return true;
}

static void handles_push(handle_vec *h, dmm_phys phys, uint64_t bytes) {
    h->v[h->n++] = (arena_handle){phys, bytes};
    h->bytes += bytes;
}

static void handles_remove(handle_vec *h, size_t i) {
    h->bytes -= h->v[i].bytes;
    h->v[i] = h->v[--h->n];
}

bool dmm__arena_room(dmm_arena *a, size_t chunks, size_t handles, size_t spans, const char *op) {
    bool ok = true;
    size_t avail = a->nfree + (a->capslots - a->nslots);
    if (avail < chunks) {
        uint64_t want = (uint64_t)a->nslots + chunks, cap = a->capslots ? a->capslots : 16;
        while (cap < want) cap *= 2;
        if (cap > UINT32_MAX - 1) cap = UINT32_MAX - 1;
        if (cap < want) {
            ok = false;
        } else {
            arena_chunk *c = realloc(a->chunks, cap * sizeof *c);
            if (c != NULL) a->chunks = c;
            uint32_t *f = c != NULL ? realloc(a->free_slots, cap * sizeof *f) : NULL;
            if (f != NULL) {
                a->free_slots = f;
                a->capslots = (uint32_t)cap;
            } else {
                ok = false;
            }
        }
    }
    ok = ok && handles_reserve(&a->qhandles, handles) && handles_reserve(&a->cache, handles) &&
         handles_reserve(&a->qimported, handles);
    ok = ok && dmm__spans_reserve(&a->free, spans) && dmm__spans_reserve(&a->quarantine, spans);
    if (!ok)
        dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                      "%s: no host memory for the %s's bookkeeping (%zu chunk slots, %zu handles, %zu spans); "
                      "nothing was changed: free host memory and retry",
                      op, a->where, chunks, handles, spans);
    return ok;
}

static uint32_t slot_take(dmm_arena *a) { return a->nfree > 0 ? a->free_slots[--a->nfree] : a->nslots++; }

static void slot_give(dmm_arena *a, uint32_t k) {
    a->chunks[k].state = CHUNK_FREE;
    a->free_slots[a->nfree++] = k;
}

static void gmap_set(dmm_arena *a, const arena_chunk *c, uint32_t v) {
    for (uint64_t g = c->first; g < c->first + c->n; g++) a->gmap[g] = v;
}

static void quarantine_piece(void *user, uint64_t off, uint64_t len) { dmm__arena_span_quarantine(user, off, len); }

/* ---- rings: the chunks that map one handle ---- */

static bool ring_alone(const dmm_arena *a, uint32_t k) { return a->chunks[k].twin == k; }

/* Takes chunk k out of its ring (which has other members). */
static void ring_leave(dmm_arena *a, uint32_t k) {
    uint32_t prev = a->chunks[k].back, next = a->chunks[k].twin;
    a->chunks[prev].twin = next;
    a->chunks[next].back = prev;
    a->chunks[k].twin = a->chunks[k].back = k;
}

/* ---- birth ---- */

dmm_status dmm__arena_grant(dmm_arena *a, uint64_t first, uint64_t end, dmm_access access, const char *op) {
    if (first == end) return DMM_OK;
    dmm_status s = dmm__arena_drv_set_access(a, first * a->gran, (end - first) * a->gran, access);
    if (s != DMM_OK)
        return dmm__error_wrap(s, "%s: granting access to granules [%llu, %llu) failed", op,
                               (unsigned long long)first, (unsigned long long)end);
    return DMM_OK;
}

/* The common tail of a birth: charge MAPPED, map the chunk's handle at its granules (its access comes
 * from the caller's dmm__arena_grant over the whole run); on failure undo the chunk
 * (dmm__arena_chunk_unwind). */
static dmm_status chunk_map_in(dmm_arena *a, uint32_t k, const char *op, bool *leaked) {
    arena_chunk *c = &a->chunks[k];
    uint64_t bytes = chunk_bytes(a, c), off = c->first * a->gran;
    gmap_set(a, c, k + 1);
    dmm_status s = dmm__arena_charge(a, DMM_AXIS_MAPPED, bytes, op);
    if (s == DMM_OK) {
        s = dmm__arena_drv_map(a, off, bytes, c->phys);
        if (s != DMM_OK) {
            dmm__arena_refund(a, DMM_AXIS_MAPPED, bytes);
        } else {
            c->mapped = true;
            dmm_count_add(&a->st.mapped_bytes, (int64_t)bytes);
        }
    }
    if (s != DMM_OK) {
        *leaked = !dmm__arena_chunk_unwind(a, k);
        return s;
    }
    c->state = CHUNK_LIVE;
    a->live_chunks++;
    dmm_count_add(&a->st.committed_bytes, (int64_t)bytes);
    return DMM_OK;
}

dmm_status dmm__arena_chunk_birth(dmm_arena *a, uint64_t first, uint64_t n, const char *op, uint32_t *slot,
                                  bool *leaked) {
    uint64_t bytes = n * a->gran;
    uint32_t k = slot_take(a);
    arena_chunk *c = &a->chunks[k];
    *c = (arena_chunk){first, n, 0, 0, k, k, CHUNK_BIRTH, false, false, DMM_ACCESS_READ_WRITE, NULL, false, false};
    *leaked = false;

    size_t hit = SIZE_MAX;
    for (size_t i = 0; i < a->cache.n; i++)
        if (a->cache.v[i].bytes == bytes) {
            hit = i;
            break;
        }
    dmm_status s;
    if (hit != SIZE_MAX) {
        c->phys = a->cache.v[hit].phys;
        c->from_cache = true;
        handles_remove(&a->cache, hit);
        dmm_count_sub(&a->st.cached_bytes, (int64_t)bytes);
        a->st.cache_hits++;
    } else {
        s = dmm__arena_charge(a, DMM_AXIS_OWNED, bytes, op);
        if (s != DMM_OK) {
            slot_give(a, k);
            return s;
        }
        s = a->exportable ? dmm__arena_drv_create_exportable(a, bytes, &c->phys)
                          : dmm__arena_drv_create(a, bytes, &c->phys);
        if (s != DMM_OK) {
            dmm__arena_refund(a, DMM_AXIS_OWNED, bytes);
            slot_give(a, k);
            return s;
        }
        dmm_count_add(&a->st.handles, 1);
        dmm_count_add(&a->st.owned_bytes, (int64_t)bytes);
    }
    s = chunk_map_in(a, k, op, leaked);
    if (s == DMM_OK) *slot = k;
    return s;
}

dmm_status dmm__arena_chunk_alias(dmm_arena *a, uint32_t src, uint64_t first, dmm_access access, const char *op,
                                  uint32_t *slot, bool *leaked) {
    uint32_t k = slot_take(a);
    arena_chunk *c = &a->chunks[k], *from = &a->chunks[src];
    *c = (arena_chunk){first, from->n, 0, from->phys, from->twin, src, CHUNK_BIRTH, false, false, (uint8_t)access,
                       from->piece, from->imported, from->exported};
    a->chunks[from->twin].back = k;
    from->twin = k; /* joins the ring after src: the handle now has one more mapping */
    *leaked = false;
    dmm_status s = chunk_map_in(a, k, op, leaked);
    if (s == DMM_OK) *slot = k;
    return s;
}

dmm_status dmm__arena_chunk_adopt(dmm_arena *a, arena_piece *piece, uint64_t first, dmm_access access,
                                  const char *op, uint32_t *slot, bool *leaked) {
    uint32_t k = slot_take(a);
    arena_chunk *c = &a->chunks[k];
    *c = (arena_chunk){first, piece->n, 0, piece->phys, k, k, CHUNK_BIRTH, false, false, (uint8_t)access, piece, false,
                       false};
    piece->ring = k + 1; /* a ring of one; an undo parks the handle again (dmm__arena_chunk_retire) */
    *leaked = false;
    dmm_status s = chunk_map_in(a, k, op, leaked);
    if (s == DMM_OK) *slot = k;
    return s;
}

dmm_status dmm__arena_chunk_import(dmm_arena *a, int fd, uint64_t first, uint64_t n, dmm_access access,
                                   const char *op, uint32_t *slot, bool *leaked) {
    uint64_t bytes = n * a->gran;
    uint32_t k = slot_take(a);
    arena_chunk *c = &a->chunks[k];
    *c = (arena_chunk){first, n, 0, 0, k, k, CHUNK_BIRTH, false, false, (uint8_t)access, NULL, true, false};
    *leaked = false;
    dmm_status s = dmm__arena_drv_import(a, fd, bytes, access, &c->phys);
    if (s != DMM_OK) {
        slot_give(a, k);
        return s;
    }
    dmm_count_add(&a->st.imported_bytes, (int64_t)bytes); /* held, not owned: OWNED is the exporter's */
    s = chunk_map_in(a, k, op, leaked);
    if (s == DMM_OK) *slot = k;
    return s;
}

bool dmm__arena_chunk_unwind(dmm_arena *a, uint32_t k) {
    arena_chunk *c = &a->chunks[k];
    uint64_t bytes = chunk_bytes(a, c);
    if (c->mapped) {
        if (dmm__arena_chunk_unmap(a, c) != DMM_OK) {
            (void)dmm__arena_chunk_poison(a, c);
            return false;
        }
        dmm__arena_refund(a, DMM_AXIS_MAPPED, bytes);
    }
    /* a handle taken from the cache goes back there (it fitted a moment ago); a new one is released */
    return dmm__arena_chunk_retire(a, c, c->from_cache) == 0;
}

/* ---- death ---- */

dmm_status dmm__arena_chunk_unmap(dmm_arena *a, arena_chunk *c) {
    uint64_t bytes = chunk_bytes(a, c);
    dmm_status s = dmm__arena_drv_unmap(a, c->first * a->gran, bytes);
    if (s == DMM_OK) {
        c->mapped = false;
        dmm_count_sub(&a->st.mapped_bytes, (int64_t)bytes);
    }
    return s;
}

dmm_status dmm__arena_chunk_remap(dmm_arena *a, arena_chunk *c, bool *still_mapped) {
    uint64_t bytes = chunk_bytes(a, c), off = c->first * a->gran;
    *still_mapped = false;
    dmm_status s = dmm__arena_drv_map(a, off, bytes, c->phys);
    if (s != DMM_OK) return s;
    c->mapped = true;
    dmm_count_add(&a->st.mapped_bytes, (int64_t)bytes);
    s = dmm__arena_drv_set_access(a, off, bytes, (dmm_access)c->access);
    if (s == DMM_OK) return DMM_OK;
    /* mapped but not accessible: take the map back so the chunk reads as "not restored" (a good
     * unmap sets no error: set_access's failure stays the last error) */
    if (dmm__arena_chunk_unmap(a, c) == DMM_OK) return s;
    *still_mapped = true;
    return dmm__error_wrap(s, "arena: set_access of a restored chunk failed (%s), and taking its map back failed too",
                           dmm_status_str(s));
}

uint64_t dmm__arena_chunk_retire(dmm_arena *a, arena_chunk *c, bool allow_cache) {
    uint64_t bytes = chunk_bytes(a, c), residual = 0;
    gmap_set(a, c, 0);
    if (c->state == CHUNK_LIVE) {
        a->live_chunks--;
        dmm_count_sub(&a->st.committed_bytes, (int64_t)bytes);
    }
    uint32_t k = chunk_slot(a, c);
    if (!ring_alone(a, k)) {
        uint32_t next = c->twin;
        ring_leave(a, k); /* other chunks still map the handle: it stays with them */
        if (c->piece != NULL && c->piece->ring == k + 1) c->piece->ring = next + 1;
    } else if (c->piece != NULL) {
        c->piece->ring = 0; /* parked: the prefix alone holds the handle now (owned stays charged) */
    } else if (c->imported) {
        /* another process's memory: this process drops its reference; nothing was charged OWNED */
        if (dmm__arena_drv_release(a, c->phys, bytes) == DMM_OK) {
            dmm_count_sub(&a->st.imported_bytes, (int64_t)bytes);
        } else {
            handles_push(&a->qimported, c->phys, bytes);
            a->st.quarantined_handles++;
            a->st.quarantined_bytes += bytes;
            residual = bytes; /* held (not charged): the outcome must not read COMPLETE */
        }
    } else if (allow_cache && !c->exported && a->cache.bytes + bytes <= a->cache_limit && a->cache.n < a->cache.cap) {
        handles_push(&a->cache, c->phys, bytes);
        dmm_count_add(&a->st.cached_bytes, (int64_t)bytes);
    } else if (dmm__arena_drv_release(a, c->phys, bytes) == DMM_OK) {
        dmm__arena_refund(a, DMM_AXIS_OWNED, bytes);
        dmm_count_sub(&a->st.handles, 1);
        dmm_count_sub(&a->st.owned_bytes, (int64_t)bytes);
        if (c->exported) a->st.exported_released_bytes += bytes; /* importers may still map it */
    } else {
        handles_push(&a->qhandles, c->phys, bytes);
        a->st.quarantined_handles++;
        a->st.quarantined_bytes += bytes;
        residual = bytes;
    }
    c->piece = NULL;
    c->imported = c->exported = false;
    slot_give(a, k);
    return residual;
}

size_t dmm__arena_poison_room(const dmm_arena *a, uint64_t first, uint64_t n) {
    return 2 + dmm__spans_count_overlapping(&a->free, first * a->gran, n * a->gran);
}

uint64_t dmm__arena_chunk_poison(dmm_arena *a, arena_chunk *c) {
    uint64_t bytes = chunk_bytes(a, c), kept = bytes;
    for (uint32_t j = c->twin; j != chunk_slot(a, c); j = a->chunks[j].twin)
        if (a->chunks[j].state == CHUNK_POISONED) kept = 0; /* the handle stays owned already */
    if (c->imported) kept = 0; /* held, never charged OWNED here (stats.imported_bytes still counts it) */
    if (c->state == CHUNK_LIVE) {
        a->live_chunks--;
        dmm_count_sub(&a->st.committed_bytes, (int64_t)bytes);
    }
    c->state = CHUNK_POISONED;
    c->refs = 0;
    a->poisoned_chunks++;
    a->st.poisoned_chunks++;
    a->st.poisoned_bytes += bytes;
    dmm__spans_carve(&a->free, c->first * a->gran, bytes, quarantine_piece, a);
    return kept;
}

/* ---- cache and give-back ---- */

dmm_status dmm__arena_drain(dmm_arena *a) {
    dmm_error_kept first = {0}; /* try every handle; report the first failure */
    size_t i = 0;
    while (i < a->cache.n) {
        arena_handle h = a->cache.v[i];
        dmm_status s = dmm__error_keep(&first, dmm__arena_drv_release(a, h.phys, h.bytes));
        if (s != DMM_OK && s != DMM_ERR_DEVICE_LOST && !handles_reserve(&a->qhandles, 1)) {
            i++; /* no room to quarantine it: it stays cached, reported through the status */
            continue;
        }
        if (s == DMM_ERR_DEVICE_LOST) break; /* nothing more may be called or moved */
        handles_remove(&a->cache, i);
        dmm_count_sub(&a->st.cached_bytes, (int64_t)h.bytes);
        if (s == DMM_OK) {
            dmm__arena_refund(a, DMM_AXIS_OWNED, h.bytes);
            dmm_count_sub(&a->st.handles, 1);
            dmm_count_sub(&a->st.owned_bytes, (int64_t)h.bytes);
        } else {
            handles_push(&a->qhandles, h.phys, h.bytes);
            a->st.quarantined_handles++;
            a->st.quarantined_bytes += h.bytes;
        }
    }
    return dmm__error_restore(&first);
}

dmm_status dmm__arena_give_back(dmm_arena *a) {
    dmm_error_kept first = {0}; /* try every handle and poisoned chunk; report the first failure */
    for (size_t i = 0; i < a->qhandles.n && !dmm__arena_lost(a);) {
        arena_handle h = a->qhandles.v[i];
        dmm_status s = dmm__error_keep(&first, dmm__arena_drv_release(a, h.phys, h.bytes));
        if (s != DMM_OK) {
            i++;
            continue;
        }
        handles_remove(&a->qhandles, i);
        dmm__arena_refund(a, DMM_AXIS_OWNED, h.bytes);
        dmm_count_sub(&a->st.handles, 1);
        dmm_count_sub(&a->st.owned_bytes, (int64_t)h.bytes);
        a->qhandles_cleared++;
        a->qhandles_cleared_bytes += h.bytes;
    }
    for (size_t i = 0; i < a->qimported.n && !dmm__arena_lost(a);) {
        arena_handle h = a->qimported.v[i];
        if (dmm__error_keep(&first, dmm__arena_drv_release(a, h.phys, h.bytes)) != DMM_OK) {
            i++;
            continue;
        }
        handles_remove(&a->qimported, i);
        dmm_count_sub(&a->st.imported_bytes, (int64_t)h.bytes);
        a->qhandles_cleared++;
        a->qhandles_cleared_bytes += h.bytes;
    }
    for (uint32_t k = 0; k < a->nslots && !dmm__arena_lost(a); k++) {
        arena_chunk *c = &a->chunks[k];
        if (c->state != CHUNK_POISONED) continue;
        uint64_t bytes = chunk_bytes(a, c);
        if (!handles_reserve(&a->qhandles, 1)) {
            dmm__error_keep(&first, dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "arena destroy: no host memory to retire "
                                                                         "a poisoned chunk; free host memory and retry"));
            continue;
        }
        dmm_status s = dmm__error_keep(&first, dmm__arena_chunk_unmap(a, c));
        if (s != DMM_OK) continue;
        dmm__arena_refund(a, DMM_AXIS_MAPPED, bytes);
        a->poisoned_chunks--;
        a->poison_cleared++;
        a->poison_cleared_bytes += bytes;
        if (dmm__arena_chunk_retire(a, c, false) != 0) dmm__error_keep(&first, dmm_last_status());
    }
    if (dmm__arena_lost(a) && first.status == DMM_OK) return dmm__arena_lost_error(a, "arena destroy");
    return dmm__error_restore(&first);
}
