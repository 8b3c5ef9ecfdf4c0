/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/release.c — the arena's release state machine: whole release and decommit, and the
 * outcome each reports (DESIGN §4.3). This is where the arena decides what a failed unmap means.
 *
 * Idea: reconcile before mutating. Both operations first validate the allocation value against its
 * live record and pick the chunks to unmap (release: the chunks whose last reference is this
 * allocation's; decommit: the chunks wholly inside the range that only this allocation references),
 * make every host allocation they might need, and only then call the driver. Bookkeeping follows
 * the driver's answers chunk by chunk: granules become free, the MAPPED axis is refunded and a handle
 * goes to the cache or is released only after the unmap of its chunk succeeded.
 *
 *   release                                     decommit (transactional)
 *   ─ every unmap good, every handle gone   →  COMPLETE; the span returns to the free list
 *   ─ every unmap failed, nothing changed   →  FAILED; the record is LIVE again (may be retried)
 *   ─ some unmaps failed after others       →  QUARANTINED: failed chunks stay mapped, POISONED;
 *     succeeded, or a handle release failed     failed handles quarantined; the span is quarantined
 *
 *   decommit: unmap chunk 0..n-1 in order; if unmap k fails, map chunks 0..k-1 again with their own
 *   handles (never released before every unmap succeeded, so the contents are intact) and set
 *   each one's own access (READ_WRITE, or READ for a prefix's sharer) → FAILED ("restored"); if a
 *   restore fails → QUARANTINED and the record is quarantined (commits refused; a later release is
 *   best effort and quarantines the span). All unmaps good → refund, cache/release the handles →
 *   COMPLETE (or QUARANTINED with residual owned bytes if a handle release failed; the VA is fine
 *   then).
 *
 * residual_owned_bytes counts a handle once: two stuck mappings of one handle (an alias) keep one
 * handle owned, and a mapping stuck while another mapping of its handle was stuck already adds none.
 *
 * Release tries every chunk rather than stopping at the first failure, so as much as possible is
 * reclaimed; decommit stops at the first failure, because it must be able to undo.
 *
 * Thread contract: called with nothing held; takes the arena's lock for the whole operation. A
 * record is RELEASING while its release runs, so a racing release of the same value fails cleanly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mech/chunks.h"
#include "mech/records.h"
#include "mech/release.h"

typedef struct target {
    uint32_t slot;
    uint64_t cnt;   /* this record's references inside the chunk */
    bool unmapped;  /* the unmap of this call succeeded */
    bool restored;  /* decommit: mapped again after a later unmap failed */
    bool stuck;     /* decommit: a restore left it mapped without access (to be poisoned) */
} target;

static dmm_release_outcome outcome(uint32_t state, uint64_t bytes, uint64_t unmapped, uint64_t residual,
                                   dmm_status failure) {
    dmm_release_outcome o = {state, bytes, unmapped, residual, failure, 0};
    return o;
}

static dmm_release_outcome failed(dmm_arena *a, uint64_t bytes, dmm_status s) {
    a->st.releases_failed++;
    return dmm__outcome_failed(bytes, s);
}

/* The distinct chunks that record r references among granules [g_lo, g_hi), in address order, with
 * r's reference count in each. */
static target *collect(dmm_arena *a, arena_record *r, uint64_t g_lo, uint64_t g_hi, size_t *n) {
    *n = 0;
    uint64_t cap = r->nrefs ? r->nrefs : 1;
    target *t = malloc(cap * sizeof *t);
    if (t == NULL) return NULL;
    for (uint64_t g = g_lo; g < g_hi; g++) {
        if (!rec_bit(r, g)) continue;
        uint32_t slot = a->gmap[g] - 1;
        if (*n > 0 && t[*n - 1].slot == slot) t[*n - 1].cnt++;
        else t[(*n)++] = (target){slot, 1, false, false, false};
    }
    return t;
}

/* Drops r's references in chunk t (refusing to go below zero: a caught underflow is counted). */
static void drop_refs(dmm_arena *a, arena_record *r, const target *t) {
    arena_chunk *c = &a->chunks[t->slot];
    for (uint64_t g = c->first; g < c->first + c->n; g++) {
        if (g < r->g0 || g >= r->g0 + r->ng || !rec_bit(r, g)) continue;
        rec_clear(r, g);
        r->nrefs--;
        if (c->refs == 0) a->st.refcount_underflows++;
        else c->refs--;
    }
}

/* ---- whole release ---- */

dmm_release_outcome dmm__arena_release(void *impl, const dmm_allocation *al) {
    dmm_arena *a = impl;
    const char *op = "arena release";
    uint64_t bytes = al != NULL ? al->bytes : 0;
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s != DMM_OK) {
        dmm_release_outcome o = failed(a, bytes, s);
        dmm_lock_release(&a->lock);
        return o;
    }
    uint8_t prior = r->state;
    r->state = RECORD_RELEASING;

    /* plan, changing nothing: the chunks whose last references are r's die */
    size_t n = 0, ndying = 0, poison_room = 0;
    target *t = collect(a, r, r->g0, r->g0 + r->ng, &n);
    for (size_t i = 0; t != NULL && i < n; i++) {
        const arena_chunk *c = &a->chunks[t[i].slot];
        if (t[i].cnt > c->refs) a->st.refcount_underflows++;
        if (t[i].cnt >= c->refs) {
            ndying++;
            poison_room += dmm__arena_poison_room(a, c->first, c->n);
        }
    }
    if (t == NULL || !dmm__arena_room(a, 0, ndying, poison_room + dmm__arena_span_room(a, r->off, r->span), op)) {
        if (t == NULL)
            dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s of %p: no host memory to plan the release; nothing was "
                                                 "changed: free host memory and retry", op, al->ptr);
        free(t);
        r->state = prior;
        dmm_release_outcome o = failed(a, bytes, DMM_ERR_OUT_OF_MEMORY);
        dmm_lock_release(&a->lock);
        return o;
    }

    /* unmap every dying chunk; try them all */
    size_t n_ok = 0;
    dmm_error_kept first = {0}; /* the first failure: unmap here, handle release below */
    for (size_t i = 0; i < n; i++) {
        arena_chunk *c = &a->chunks[t[i].slot];
        if (t[i].cnt < c->refs) continue;
        s = dmm__error_keep(&first, dmm__arena_chunk_unmap(a, c));
        if (s == DMM_OK) {
            t[i].unmapped = true;
            n_ok++;
        }
    }
    if (ndying > 0 && n_ok == 0) {
        free(t);
        r->state = prior;
        dmm_error_set(first.status,
                      "%s of %p (%zu bytes): every one of its %zu unmap(s) failed (%s); nothing was changed: the "
                      "allocation is live and may be released again",
                      op, al->ptr, al->bytes, ndying, dmm__error_kept_text(&first));
        dmm_release_outcome o = failed(a, bytes, first.status);
        dmm_lock_release(&a->lock);
        return o;
    }

    /* reconcile, chunk by chunk, with what the driver did */
    uint64_t exported0 = a->st.exported_released_bytes;
    uint64_t unmapped = 0, residual = 0, poisoned = 0, stuck_handles = 0;
    for (size_t i = 0; i < n; i++) {
        arena_chunk *c = &a->chunks[t[i].slot];
        bool dying = t[i].cnt >= c->refs;
        uint64_t cb = chunk_bytes(a, c);
        drop_refs(a, r, &t[i]);
        if (!dying) continue;
        if (t[i].unmapped) {
            dmm__arena_refund(a, DMM_AXIS_MAPPED, cb);
            unmapped += cb;
            uint64_t left = dmm__arena_chunk_retire(a, c, true);
            if (left > 0) {
                stuck_handles++;
                residual += left;
                dmm__error_keep(&first, dmm_last_status());
            }
        } else {
            residual += dmm__arena_chunk_poison(a, c);
            poisoned++;
        }
    }
    free(t);
    dmm_count_sub(&a->st.allocations, 1);
    dmm_count_sub(&a->st.allocated_bytes, (int64_t)r->bytes);
    dmm_release_outcome o;
    if (poisoned == 0 && stuck_handles == 0 && prior != RECORD_QUARANTINED) {
        dmm__arena_span_free(a, r->off, r->span);
        a->st.releases_complete++;
        o = dmm__outcome_complete(bytes, unmapped);
    } else {
        dmm__arena_span_quarantine(a, r->off, r->span);
        a->st.releases_quarantined++;
        dmm_status failure = first.status;
        const char *why = dmm__error_kept_text(&first);
        if (failure == DMM_OK) {
            failure = DMM_ERR_QUARANTINED;
            why = "a decommit of this allocation had failed and could not be undone";
        }
        dmm_error_set(failure,
                      "%s of %p (%zu bytes) is QUARANTINED: %llu bytes were unmapped, %llu chunk(s) stay mapped "
                      "and poisoned, %llu handle(s) could not be released, %llu bytes stay owned (%s); the "
                      "address range is never handed out again",
                      op, al->ptr, al->bytes, (unsigned long long)unmapped, (unsigned long long)poisoned,
                      (unsigned long long)stuck_handles, (unsigned long long)residual, why);
        o = outcome(DMM_RELEASE_QUARANTINED, bytes, unmapped, residual, failure);
    }
    o.exported_bytes = a->st.exported_released_bytes - exported0;
    dmm__arena_forget(a, r);
    dmm_lock_release(&a->lock);
    return o;
}

/* ---- decommit ---- */

dmm_release_outcome dmm__arena_decommit(void *impl, const dmm_allocation *al, dmm_range range) {
    dmm_arena *a = impl;
    const char *op = "arena decommit";
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    size_t end = 0;
    if (s == DMM_OK && (__builtin_add_overflow(range.offset, range.bytes, &end) || end > r->bytes))
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                          "%s of [%zu, +%zu) at %p refused: the range runs past the allocation's %llu bytes; "
                          "nothing was changed",
                          op, range.offset, range.bytes, al->ptr, (unsigned long long)r->bytes);
    if (s == DMM_OK && r->state == RECORD_QUARANTINED)
        s = dmm_error_set(DMM_ERR_QUARANTINED,
                          "%s of [%zu, +%zu) at %p refused: the allocation is quarantined (an earlier decommit "
                          "could not be undone); nothing was changed: release it",
                          op, range.offset, range.bytes, al->ptr);
    if (s != DMM_OK) {
        dmm_release_outcome o = failed(a, range.bytes, s);
        dmm_lock_release(&a->lock);
        return o;
    }

    /* the chunks wholly inside the range (widened to the granule at an edge of the allocation, whose
     * bytes past the allocation nobody else may use while only r references them) that only r uses */
    uint64_t lo = r->off + range.offset, hi = lo + range.bytes;
    if (range.offset == 0) lo = dmm_align_down(lo, a->gran);
    if (end == r->bytes) dmm_align_up(hi, a->gran, &hi);
    size_t n = 0, k = 0;
    target *t = NULL;
    if (range.bytes > 0 && hi / a->gran > (lo + a->gran - 1) / a->gran) {
        t = collect(a, r, (lo + a->gran - 1) / a->gran, hi / a->gran, &n);
        if (t == NULL) {
            dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s at %p: no host memory to plan the decommit; nothing was "
                                                 "changed", op, al->ptr);
            dmm_release_outcome o = failed(a, range.bytes, DMM_ERR_OUT_OF_MEMORY);
            dmm_lock_release(&a->lock);
            return o;
        }
        for (size_t i = 0; i < n; i++) {
            arena_chunk *c = &a->chunks[t[i].slot];
            if (c->first * a->gran >= lo && (c->first + c->n) * a->gran <= hi && t[i].cnt == c->refs)
                t[k++] = t[i];
        }
        n = k;
    }
    if (n == 0) {
        free(t);
        a->st.releases_complete++;
        dmm_lock_release(&a->lock);
        return dmm__outcome_complete(range.bytes, 0);
    }
    size_t poison_room = 4;
    for (size_t i = 0; i < n; i++)
        poison_room += dmm__arena_poison_room(a, a->chunks[t[i].slot].first, a->chunks[t[i].slot].n);
    if (!dmm__arena_room(a, 0, n, poison_room, op)) {
        free(t);
        dmm_release_outcome o = failed(a, range.bytes, DMM_ERR_OUT_OF_MEMORY);
        dmm_lock_release(&a->lock);
        return o;
    }

    /* unmap in order; stop at the first failure */
    size_t bad = n;
    dmm_error_kept failure = {0}; /* the unmap that failed, or (all unmapped) the first handle release */
    for (size_t i = 0; i < n; i++) {
        s = dmm__error_keep(&failure, dmm__arena_chunk_unmap(a, &a->chunks[t[i].slot]));
        if (s != DMM_OK) {
            bad = i;
            break;
        }
        t[i].unmapped = true;
    }

    uint64_t unmapped = 0, residual = 0, exported0 = a->st.exported_released_bytes;
    dmm_release_outcome o;
    if (bad < n) {
        /* undo: map chunks 0..bad-1 again with their own handles (contents intact) */
        size_t lost_restores = 0;
        dmm_error_kept rfail = {0}; /* the first map back that failed */
        for (size_t i = 0; i < bad; i++) {
            bool still = false;
            s = dmm__error_keep(&rfail, dmm__arena_chunk_remap(a, &a->chunks[t[i].slot], &still));
            if (s == DMM_OK) {
                t[i].restored = true;
                continue;
            }
            t[i].stuck = still;
            lost_restores++;
        }
        if (lost_restores == 0) {
            dmm_error_set(failure.status,
                          "%s of [%zu, +%zu) at %p FAILED: unmapping chunk %zu of %zu failed (%s); the %zu chunk(s) "
                          "unmapped before it were mapped again with their own handles, contents and read/write "
                          "access intact: nothing was changed",
                          op, range.offset, range.bytes, al->ptr, bad + 1, n, dmm__error_kept_text(&failure), bad);
            a->st.releases_failed++;
            o = dmm__outcome_failed(range.bytes, failure.status);
        } else {
            /* some could not be restored: the allocation lost contents; quarantine it */
            r->state = RECORD_QUARANTINED;
            for (size_t i = 0; i < bad; i++) {
                if (t[i].restored) continue;
                arena_chunk *c = &a->chunks[t[i].slot];
                uint64_t cb = chunk_bytes(a, c);
                drop_refs(a, r, &t[i]);
                if (t[i].stuck) {
                    residual += dmm__arena_chunk_poison(a, c);
                } else {
                    dmm__arena_refund(a, DMM_AXIS_MAPPED, cb);
                    unmapped += cb;
                    residual += dmm__arena_chunk_retire(a, c, true);
                }
            }
            dmm_error_set(rfail.status,
                          "%s of [%zu, +%zu) at %p is QUARANTINED: unmapping chunk %zu of %zu failed (%s) and "
                          "mapping back %zu of the chunks unmapped before it failed too (%s); %llu bytes of the "
                          "allocation are no longer backed, %llu bytes stay owned; the allocation is quarantined: "
                          "commits are refused, release it",
                          op, range.offset, range.bytes, al->ptr, bad + 1, n, dmm__error_kept_text(&failure),
                          lost_restores, dmm__error_kept_text(&rfail), (unsigned long long)unmapped,
                          (unsigned long long)residual);
            a->st.releases_quarantined++;
            o = outcome(DMM_RELEASE_QUARANTINED, range.bytes, unmapped, residual, rfail.status);
        }
    } else {
        /* every unmap succeeded: now refund, and cache or release the handles */
        size_t stuck_handles = 0;
        for (size_t i = 0; i < n; i++) {
            arena_chunk *c = &a->chunks[t[i].slot];
            uint64_t cb = chunk_bytes(a, c);
            drop_refs(a, r, &t[i]);
            dmm__arena_refund(a, DMM_AXIS_MAPPED, cb);
            unmapped += cb;
            uint64_t left = dmm__arena_chunk_retire(a, c, true);
            if (left > 0) {
                residual += left;
                if (stuck_handles++ == 0) dmm__error_keep(&failure, dmm_last_status());
            }
        }
        if (stuck_handles == 0) {
            a->st.releases_complete++;
            o = dmm__outcome_complete(range.bytes, unmapped);
        } else {
            dmm_error_set(failure.status,
                          "%s of [%zu, +%zu) at %p is QUARANTINED: all %llu bytes were unmapped, but %zu handle(s) "
                          "could not be released (%s) and stay owned (%llu bytes, never reused); the address "
                          "range is fine",
                          op, range.offset, range.bytes, al->ptr, (unsigned long long)unmapped, stuck_handles,
                          dmm__error_kept_text(&failure), (unsigned long long)residual);
            a->st.releases_quarantined++;
            o = outcome(DMM_RELEASE_QUARANTINED, range.bytes, unmapped, residual, failure.status);
        }
    }
    o.exported_bytes = a->st.exported_released_bytes - exported0;
    free(t);
    dmm_lock_release(&a->lock);
    return o;
}
