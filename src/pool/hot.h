/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/hot.h — the hot path's steps under a heap's lock, inline: pool.c's malloc and free,
 * growth.c's slow path, follow.c's planned carve (take_at) and fences.c's cross-stream free (its
 * record, its undo) share them; the counts of a malloc and a free, with the records of a heap that
 * learns its loop (follow.c reads them); the quick lists' push and pop, the hot block's among them
 * (the lists are heap.c's; types.h, "QUICK" and `hot`). Never installed.
 *
 * Why a header of its own: these call heap.c, which stands below types.h; kept here they keep
 * types.h free of calls, and the pool's files free of loops.
 *
 * Invariants kept (types.h): heap.live_blocks = #LIVE, heap.live_bytes = Σ LIVE sizes, every LIVE
 * and QUICK block in the hash; the peaks never below the current values; the quick lists within
 * their bounds (a push that would pass them merges every parked block first; quick_park_cap says how
 * many may park); every QUICK block on
 * its quick list or the hot block, never both.
 */
#ifndef DMM_POOL_HOT_H
#define DMM_POOL_HOT_H

#include "pool/types.h"

static inline void count_live(pool_heap *h, pool_block *b, uint64_t requested) {
    h->live_blocks++;
    if (h->live_blocks > h->live_peak_blocks) h->live_peak_blocks = h->live_blocks;
    h->requested_bytes += requested;
    h->requested_total += requested;
    if (h->requested_bytes > h->requested_peak) h->requested_peak = h->requested_bytes;
    uint64_t lb = dmm_atomic_load_relaxed(&h->live_bytes) + b->size;
    dmm_atomic_store_relaxed(&h->live_bytes, lb);
    h->live_total += b->size;
    if (lb > dmm_atomic_load_relaxed(&h->live_peak)) dmm_atomic_store_relaxed(&h->live_peak, lb);
}

/* Counts a malloc of block b, now LIVE; a heap that records its mallocs (follow.c: h->records set)
 * writes its record. Such a heap has no hot block, so its mallocs never take dmm_pool_malloc's hot
 * path: their callers (malloc_rest, growth.c, follow.c) look for the loop when look_due says so. */
static inline void count_malloc(pool_heap *h, pool_block *b) {
    if (__builtin_expect(h->records != NULL, 0)) {
        b->ord = h->mallocs;
        precord *r = &h->records[h->mallocs & (h->nrecords - 1)];
        uint64_t units = b->size >> h->align_shift;
        r->units = units <= UINT32_MAX ? (uint32_t)units : 0;
        r->t_alloc = ++h->events;
        r->life = 0;
    }
    h->mallocs++;
}

/* Whether a heap that records is due to look for its loop (dmm__follow_look, by the malloc's caller,
 * under the lock; next_look is UINT64_MAX where nothing records). */
static inline bool look_due(const pool_heap *h) { return __builtin_expect(h->mallocs >= h->next_look, 0); }

/* Counts the free of block b, final now (free_rest, or a cross-stream free once its event is recorded),
 * in its record, while the ring still holds it. */
static inline void count_free(pool_heap *h, const pool_block *b) {
    if (__builtin_expect(h->records == NULL, 1)) return;
    if (b->ord < h->records_from || h->mallocs - b->ord > h->nrecords) return; /* its record is gone */
    precord *r = &h->records[b->ord & (h->nrecords - 1)];
    uint64_t life = ++h->events - r->t_alloc;
    r->life = life < UINT32_MAX ? (uint32_t)life : UINT32_MAX;
}

/* Hands out the front `n` bytes of FREE block b (under the lock). False: out of host memory. */
static inline bool take(pool_heap *h, pool_block *b, uint64_t n, uint64_t requested) {
    dmm__heap_bin_remove(h, b);
    if (b->size > n) {
        pool_block *r = dmm__heap_split(h, b, n);
        if (r != NULL) dmm__heap_bin_insert(h, r); /* no record: hand the whole block out */
    }
    b->kind = BK_LIVE;
    b->bin = (uint16_t)pool_bin_of(b->size >> h->align_shift); /* its quick list, should it be parked */
    b->requested = requested;
    if (!dmm__heap_hash_insert(h, b)) {
        dmm__heap_make_free(h, b);
        return false;
    }
    count_live(h, b, requested);
    count_malloc(h, b);
    return true;
}

/* Hands out [at, at + n) of FREE block b, which holds it (under the lock): the block, or NULL when out
 * of host memory (nothing changed). */
static inline pool_block *take_at(pool_heap *h, pool_block *b, uintptr_t at, uint64_t n, uint64_t requested) {
    if (!dmm__heap_reserve_blocks(h, 2)) return NULL;
    b = dmm__heap_carve(h, b, at, n, BK_LIVE);
    b->bin = (uint16_t)pool_bin_of(n >> h->align_shift);
    b->requested = requested;
    if (!dmm__heap_hash_insert(h, b)) {
        dmm__heap_make_free(h, b);
        return NULL;
    }
    count_live(h, b, requested);
    count_malloc(h, b);
    return b;
}

/* Whether LIVE block b could be parked without merging the parked ones first, with at most `cap`
 * blocks parked (the bounds). */
static inline bool quick_room_of(const pool_heap *h, const pool_block *b, size_t cap) {
    return b->size <= POOL_QUICK_MAX_BLOCK && h->nquick < cap && h->quick_bytes + b->size <= POOL_QUICK_MAX_BYTES;
}

/* quick_room_of the hot path's cap (quick_cap). */
static inline bool quick_room(const pool_heap *h, const pool_block *b) { return quick_room_of(h, b, h->quick_cap); }

/* Puts QUICK block b at the head of its quick list. */
static inline void quick_list_push(pool_heap *h, pool_block *b) {
    uint32_t c = b->bin; /* a LIVE block's bin is its size's class (take, quick_pop): kept while QUICK */
    b->qnext = h->quick[c];
    h->quick[c] = b;
    h->quickmap[c / 64] |= (uint64_t)1 << (c % 64);
}

/* Counts block b, just made QUICK, among the parked ones. */
static inline void quick_count_parked(pool_heap *h, pool_block *b) {
    h->nquick++;
    h->quick_bytes += b->size;
    if (h->reach_known != b) { /* its run changed, or never counted (types.h, reach_known) */
        heap_note_reach(h, b);
        h->reach_known = b;
    }
}

/* Parks block b — just freed on h's own stream, out of the live counts, seq set, still in the hash —
 * as the heap's hot block (types.h, hot): the block parked before it, if still parked, goes to the
 * head of its quick list, so that hot and lists together stay last-in first-out per class;
 * quick_room(h, b) holds. */
static inline void quick_park(pool_heap *h, pool_block *b) {
    pool_block *last = h->hot;
    if (last != NULL && last->kind == BK_QUICK) quick_list_push(h, last);
    b->kind = BK_QUICK;
    h->hot = b;
    quick_count_parked(h, b);
}

/* Parks b as quick_park does (true), merging the parked blocks first when it would pass the bounds (a
 * heap that records: at the head of its quick list, not as the hot block); false (nothing changed) when
 * b is too big to park or the heap parks nothing. */
static inline bool quick_push(pool_heap *h, pool_block *b) {
    const size_t cap = quick_park_cap(h);
    if (b->size > POOL_QUICK_MAX_BLOCK || cap == 0) return false;
    if (!quick_room_of(h, b, cap)) dmm__heap_quick_flush(h);
    if (h->quick_cap != 0) {
        quick_park(h, b);
        return true;
    }
    b->kind = BK_QUICK; /* a heap that records: on its list, not hot (the hot path does not record) */
    quick_list_push(h, b);
    quick_count_parked(h, b);
    return true;
}

/* Whether the hot block is parked with exactly `n` bytes (then it is the last parked block of its
 * class, and quick_pop would take it). */
static inline bool quick_hot_fits(const pool_heap *h, uint64_t n) {
    const pool_block *b = h->hot;
    return b != NULL && b->kind == BK_QUICK && b->size == n;
}

/* Takes the hot block, parked (quick_hot_fits): still in the hash, still QUICK, still h->hot (as a
 * hint for its free); the caller makes it LIVE. */
static inline pool_block *quick_take_hot(pool_heap *h) {
    pool_block *b = h->hot;
    h->nquick--;
    h->quick_bytes -= b->size;
    return b;
}

/* Takes the last parked block of its class if it has exactly `n` bytes (still in the hash, still
 * QUICK: the caller makes it LIVE), or NULL: the hot block when it is parked in that class (it is the
 * class's last), else the head of the class's quick list. */
static inline pool_block *quick_pop(pool_heap *h, uint64_t n) {
    uint32_t c = pool_bin_of(n >> h->align_shift);
    pool_block *b = h->hot;
    if (b != NULL && b->kind == BK_QUICK && b->bin == c) return b->size == n ? quick_take_hot(h) : NULL;
    b = h->quick[c];
    if (b == NULL || b->size != n) return NULL;
    h->quick[c] = b->qnext;
    if (b->qnext == NULL) h->quickmap[c / 64] &= ~((uint64_t)1 << (c % 64));
    b->qnext = NULL;
    h->nquick--;
    h->quick_bytes -= n;
    return b;
}

#endif /* DMM_POOL_HOT_H */
