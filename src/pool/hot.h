/* src/pool/hot.h — the hot path's steps under a heap's lock, inline: pool.c's malloc, growth.c's slow
 * path and fences.c's undo of a failed cross-stream free share them. Never installed.
 *
 * Why a header of its own: these call heap.c, which stands below types.h; kept here they keep
 * types.h free of calls, and the pool's files free of loops.
 *
 * Invariants kept (types.h): heap.live_blocks = #LIVE, heap.live_bytes = Σ LIVE sizes, every LIVE
 * block in the hash; the peaks never below the current values.
 */
#ifndef DMM_POOL_HOT_H
#define DMM_POOL_HOT_H

#include "pool/types.h"

static inline void count_live(pheap *h, pblock *b, uint64_t requested) {
    h->live_blocks++;
    h->live_blocks_total++;
    if (h->live_blocks > h->live_peak_blocks) h->live_peak_blocks = h->live_blocks;
    h->requested_bytes += requested;
    h->requested_total += requested;
    if (h->requested_bytes > h->requested_peak) h->requested_peak = h->requested_bytes;
    uint64_t lb = load_relaxed(&h->live_bytes) + b->size;
    store_relaxed(&h->live_bytes, lb);
    h->live_total += b->size;
    if (lb > load_relaxed(&h->live_peak)) store_relaxed(&h->live_peak, lb);
}

/* Hands out the front `n` bytes of FREE block b (under the lock). False: out of host memory. */
static inline bool take(pheap *h, pblock *b, uint64_t n, uint64_t requested) {
    dmm__heap_bin_remove(h, b);
    if (b->size > n) {
        pblock *r = dmm__heap_split(h, b, n);
        if (r != NULL) dmm__heap_bin_insert(h, r); /* no record: hand the whole block out */
    }
    b->kind = BK_LIVE;
    b->requested = requested;
    if (!dmm__heap_hash_insert(h, b)) {
        dmm__heap_make_free(h, b);
        return false;
    }
    count_live(h, b, requested);
    h->mallocs++;
    return true;
}

#endif /* DMM_POOL_HOT_H */
