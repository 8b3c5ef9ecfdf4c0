/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/mapping.c — what of its VA the pool has mapped: the one way its files ask the mechanism to
 * map or unmap a range (each followed by the observer's event, dmm_pool_config.on_map), and the answer
 * to "what is committed now" (dmm_pool_committed).
 *
 * What it owns: the three calls that change the pool's mapping (commit, decommit, alias) and the walk
 * behind dmm_pool_committed. The other files call these instead of dmm_mechanism_commit / _decommit /
 * _alias, so that an observer (the device front's history: the ranges mapped and unmapped, in
 * PyTorch's trace vocabulary) sees every change, with no mechanism wrapped around the arena to watch.
 *
 * The idea of the walk: the pool's invariants (types.h) say that every quantum a LIVE, QUICK,
 * PENDING, FREE, DECOMMITTING, ALIASED or POISONED block touches lies in a mapped chunk and that no
 * chunk reaches into an UNMAPPED block (COMMITTING blocks are not mapped yet, in the pool's eyes). So
 * the union of those blocks, with a warm layout's handles lying ahead (mapped, over UNMAPPED blocks),
 * is exactly the committed memory. Each heap is read under its own lock, the layout under its mutex:
 * while other threads allocate, the answer is a moment's, not one instant's.
 *
 * Trade-off: the observer is told after the mechanism answered, with no pool lock held (the callers
 * hold none around their mechanism calls): events of two threads may reach it in either order.
 * A decommit is reported as an unmap only when every byte of its range left (COMPLETE, or QUARANTINED
 * with all of it unmapped): a chunk that stays mapped is still committed memory.
 */
#include <stdlib.h>
#include <string.h>

#include "pool/types.h"

static void observe(dmm_pool *p, dmm_range r, bool mapped) {
    if (p->on_map != NULL && r.bytes > 0) p->on_map(p->on_map_user, p->base + r.offset, r.bytes, mapped);
}

dmm_status dmm__pool_map_commit(dmm_pool *p, dmm_range r, uint64_t piece, uint64_t *newly) {
    uint64_t fresh = 0;
    dmm_status s = piece < r.bytes ? dmm_mechanism_commit_pieces(p->mech, &p->va, r, piece, &fresh)
                                   : dmm_mechanism_commit(p->mech, &p->va, r, &fresh);
    if (s == DMM_OK) observe(p, r, true);
    if (newly != NULL) *newly = fresh;
    return s;
}

dmm_release_outcome dmm__pool_map_decommit(dmm_pool *p, dmm_range r) {
    dmm_release_outcome o = dmm_mechanism_decommit(p->mech, &p->va, r);
    dmm_release_state st = dmm_release_state_of(&o);
    if (st == DMM_RELEASE_COMPLETE || (st == DMM_RELEASE_QUARANTINED && o.unmapped_bytes == r.bytes))
        observe(p, r, false);
    return o;
}

dmm_status dmm__pool_map_alias(dmm_pool *p, dmm_range dst, dmm_range src) {
    dmm_status s = dmm_mechanism_alias(p->mech, &p->va, dst, src);
    if (s == DMM_OK) observe(p, dst, true);
    return s;
}

/* ---- dmm_pool_committed ---- */
typedef struct range_list {
    uint64_t *v; /* pairs: address, bytes */
    size_t n, cap;
    bool short_of_memory;
} range_list;

static void range_add(range_list *l, uintptr_t addr, uint64_t bytes) {
    if (l->n > 0 && l->v[2 * l->n - 2] + l->v[2 * l->n - 1] == addr) { /* joins the last one */
        l->v[2 * l->n - 1] += bytes;
        return;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        uint64_t *v = realloc(l->v, cap * 2 * sizeof *v);
        if (v == NULL) {
            l->short_of_memory = true;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[2 * l->n] = addr;
    l->v[2 * l->n + 1] = bytes;
    l->n++;
}

static bool block_mapped(const pool_block *b) { return b->kind != BK_UNMAPPED && b->kind != BK_COMMITTING; }

static int by_address(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

dmm_status dmm_pool_committed(dmm_pool *p, uint64_t *ranges, size_t cap, size_t *count) {
    static const char op[] = "dmm_pool_committed";
    if (p == NULL || count == NULL || (ranges == NULL && cap > 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the pool and count are required, and ranges when cap is "
                                                       "above 0", op);
    range_list l = {0};
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        heap_lock(h);
        for (size_t i = 0; i < h->nruns; i++)
            for (const pool_block *b = h->runs[i].first; b != NULL; b = b->next)
                if (block_mapped(b)) range_add(&l, b->addr, b->size);
        heap_unlock(h);
    }
    playout *lay = &p->layout;
    if (dmm_atomic_load_acquire(&lay->entries) > 0) {
        pthread_mutex_lock(&lay->m);
        for (size_t q = 0; lay->ahead != NULL && q < p->va_bytes / p->chunk; q++)
            if (lay->ahead[q] != 0)
                range_add(&l, p->base + (uint64_t)q * p->chunk, (uint64_t)(lay->ahead[q] & ~LAYOUT_BUSY) * p->chunk);
        pthread_mutex_unlock(&lay->m);
    }
    if (l.short_of_memory) {
        free(l.v);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: out of host memory for the list of committed ranges; nothing "
                                                    "was written", op);
    }
    /* in address order across heaps and the layout, then joined where they touch */
    if (l.n > 1) qsort(l.v, l.n, 2 * sizeof *l.v, by_address);
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (n > 0 && l.v[2 * n - 2] + l.v[2 * n - 1] == l.v[2 * i]) {
            l.v[2 * n - 1] += l.v[2 * i + 1];
            continue;
        }
        l.v[2 * n] = l.v[2 * i];
        l.v[2 * n + 1] = l.v[2 * i + 1];
        n++;
    }
    *count = n;
    dmm_status s = DMM_OK;
    if (ranges != NULL && cap < n)
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: %zu ranges are committed but the array holds %zu; nothing "
                                                    "was written: call again with a larger one", op, n, cap);
    else if (ranges != NULL && n > 0)
        memcpy(ranges, l.v, n * 2 * sizeof *ranges);
    free(l.v);
    return s;
}
