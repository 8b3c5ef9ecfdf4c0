/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/records.c — the arena's allocation records: one arena_record per live allocation, in a
 * hash by offset, and the spans a record gives back when it goes.
 *
 * What it owns: the hash (buckets, nbuckets, nrecords), finding a record by its offset, checking an
 * allocation value against its record (ptr, bytes, align and id must all match: a stale copy of a
 * released value, or an altered one, touches nothing) and a range of it that a prefix or an export
 * takes as whole granules, and giving a record's span back to the free list or the quarantine.
 *
 * Invariants: nrecords = the records in the buckets ≤ nbuckets (load ≤ 1; nbuckets a power of two
 * or 0); a record's offset is unique among live records; a granule backed by a poisoned chunk never
 * returns to the free list (span_free sends it to the quarantine).
 *
 * Calls no other arena file: it reads the chunk table (arena_types.h) and the span sets (core).
 * All functions run under the arena's lock.
 */
#include <stdlib.h>

#include "mech/records.h"

/* ---- the hash ---- */

static size_t bucket_of(const dmm_arena *a, uint64_t off) {
    uint64_t h = (off / a->min_align) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (a->nbuckets - 1);
}

arena_record *dmm__arena_find(const dmm_arena *a, uint64_t off) {
    if (a->nbuckets == 0) return NULL;
    for (arena_record *r = a->buckets[bucket_of(a, off)]; r != NULL; r = r->next)
        if (r->off == off) return r;
    return NULL;
}

/* The hash stays at load ≤ 1: it doubles when one more record would not fit. */
bool dmm__arena_records_room(dmm_arena *a) {
    if (a->nrecords + 1 <= a->nbuckets) return true;
    size_t n = a->nbuckets ? a->nbuckets * 2 : 64;
    arena_record **b = calloc(n, sizeof *b);
    if (b == NULL) return false;
    size_t old = a->nbuckets;
    arena_record **ob = a->buckets;
    a->buckets = b;
    a->nbuckets = n;
    for (size_t i = 0; i < old; i++)
        for (arena_record *r = ob[i], *next; r != NULL; r = next) {
            next = r->next;
            size_t k = bucket_of(a, r->off);
            r->next = b[k];
            b[k] = r;
        }
    free(ob);
    return true;
}

void dmm__arena_records_insert(dmm_arena *a, arena_record *r) {
    size_t k = bucket_of(a, r->off);
    r->next = a->buckets[k];
    a->buckets[k] = r;
    a->nrecords++;
}

void dmm__arena_forget(dmm_arena *a, arena_record *r) {
    arena_record **p = &a->buckets[bucket_of(a, r->off)];
    while (*p != r) p = &(*p)->next;
    *p = r->next;
    a->nrecords--;
    free(r->bits);
    free(r);
}

dmm_status dmm__arena_lookup(dmm_arena *a, const dmm_allocation *al, const char *op, arena_record **out) {
    if (al == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the allocation is NULL; pass the value that "
                                                       "allocate returned", op);
    uintptr_t p = (uintptr_t)al->ptr;
    arena_record *r = NULL;
    if (p >= a->base && p - a->base < a->reserve) r = dmm__arena_find(a, p - a->base);
    if (r == NULL || r->state == RECORD_RELEASING)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s: no live allocation of the %s starts at %p (id %llu): it was already "
                             "released, or never made here; nothing was changed",
                             op, a->where, al->ptr, (unsigned long long)al->id);
    if (r->id != al->id)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s: the allocation at %p has id %llu but the handle carries id %llu: it is a stale "
                             "copy of an earlier allocation at the same address and cannot touch the new one; "
                             "nothing was changed",
                             op, al->ptr, (unsigned long long)r->id, (unsigned long long)al->id);
    /* Right place and id, wrong size: an altered (forged or corrupted) handle. Like a stale one, it
     * matches no live allocation in (ptr, bytes, align, id): DMM_ERR_UNKNOWN_ALLOCATION (status.h),
     * the same code the eager mechanism gives. */
    if (r->bytes != al->bytes || r->align != al->align)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s: the handle for %p (id %llu) says %zu bytes aligned to %zu, but the allocation "
                             "has %llu bytes aligned to %llu: the handle was altered after allocate; pass the "
                             "value allocate returned, unmodified; nothing was changed",
                             op, al->ptr, (unsigned long long)al->id, al->bytes, al->align,
                             (unsigned long long)r->bytes, (unsigned long long)r->align);
    *out = r;
    return DMM_OK;
}

dmm_status dmm__arena_range_refused(dmm_status code, const char *op, const dmm_allocation *al, dmm_range range) {
    return dmm__error_wrap(code, "%s of [%zu, +%zu) of the allocation at %p refused, nothing was changed", op,
                           range.offset, range.bytes, al->ptr);
}

dmm_status dmm__arena_range_granules(const dmm_arena *a, const arena_record *r, const dmm_allocation *al,
                                     dmm_range range, const char *what, const char *op, uint64_t *g0,
                                     uint64_t *ng) {
    uint64_t lo = r->off + range.offset;
    if (r->state == RECORD_QUARANTINED) {
        dmm_error_set(DMM_ERR_QUARANTINED, "the allocation is quarantined (a decommit could not restore what it "
                                           "unmapped)");
        return dmm__arena_range_refused(DMM_ERR_QUARANTINED, op, al, range);
    }
    if (range.bytes == 0 || (a->base + lo) % a->gran || range.bytes % a->gran) {
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s must be non-empty, start on a granule and be whole granules of "
                                                "%llu bytes", what, (unsigned long long)a->gran);
        return dmm__arena_range_refused(DMM_ERR_INVALID_ARGUMENT, op, al, range);
    }
    *g0 = lo / a->gran;
    *ng = range.bytes / a->gran;
    return DMM_OK;
}

void dmm__arena_records_free(dmm_arena *a) {
    for (size_t i = 0; i < a->nbuckets; i++) {
        for (arena_record *r = a->buckets[i], *next; r != NULL; r = next) {
            next = r->next;
            free(r->bits);
            free(r);
        }
        a->buckets[i] = NULL;
    }
    a->nrecords = 0;
}

/* ---- spans of records ---- */

size_t dmm__arena_span_room(const dmm_arena *a, uint64_t off, uint64_t len) {
    size_t n = 2;
    uint64_t g_end = (off + len - 1) / a->gran + 1;
    for (uint64_t g = off / a->gran; g < g_end; g++) {
        arena_chunk *c = arena_chunk_at(a, g);
        if (c != NULL && c->state == CHUNK_POISONED) {
            n += 2;
            g = c->first + c->n - 1;
        }
    }
    return n;
}

static void quarantine_add(dmm_arena *a, uint64_t off, uint64_t len) {
    if (len == 0) return;
    dmm__spans_insert(&a->quarantine, off, len);
    dmm_count_add(&a->st.quarantined_span_bytes, (int64_t)len);
}

void dmm__arena_span_free(dmm_arena *a, uint64_t off, uint64_t len) {
    uint64_t end = off + len, cur = off, free_from = off;
    while (cur < end) {
        uint64_t g = cur / a->gran;
        arena_chunk *c = arena_chunk_at(a, g);
        if (c != NULL && c->state == CHUNK_POISONED) {
            uint64_t c_end = (c->first + c->n) * a->gran, q_end = c_end < end ? c_end : end;
            dmm__spans_insert(&a->free, free_from, cur - free_from);
            quarantine_add(a, cur, q_end - cur);
            cur = free_from = q_end;
        } else {
            cur = (g + 1) * a->gran;
        }
    }
    dmm__spans_insert(&a->free, free_from, end - free_from);
}

void dmm__arena_span_quarantine(dmm_arena *a, uint64_t off, uint64_t len) { quarantine_add(a, off, len); }
