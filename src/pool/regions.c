/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/regions.c — the pool's VA, handed to heaps in regions, and trim (DESIGN §4.9).
 *
 * What it owns: p->owner (per region: the heap whose runs hold it), the heaps' runs, and giving
 * memory back: trim decommits whole free chunks behind completed fences, empty_cache also sheds the
 * VA of runs that hold nothing and drains the mechanism's handle cache.
 *
 * The idea. VA is plentiful: a heap takes whole regions, preferably right after one of its runs (the
 * run grows, and free blocks coalesce across the seam), else a new run in the free gap with the most
 * room, starting half-way into it when it follows another heap, so that both can grow. Only when the
 * VA is exhausted do empty runs (of this heap, and of others whose lock is free) give theirs back.
 *
 * Invariants: owner[r] = h ⇔ region r lies in one of h's runs; a run is [lo, hi) of whole regions,
 * tiled by its blocks from `first`; owner entries change under the pool lock, the runs under their
 * heap's lock (heap → pool, the documented order).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/types.h"

/* Gives back the regions of g's runs that hold nothing but one UNMAPPED block (under g's lock; takes
 * the pool lock). Returns the number of regions given back. */
static size_t heap_shed_empty_runs(dmm_pool *p, pool_heap *g) {
    size_t freed = 0;
    for (size_t i = 0; i < g->nruns;) {
        prun *r = &g->runs[i];
        pool_block *b = r->first;
        if (b->kind != BK_UNMAPPED || b->next != NULL) {
            i++;
            continue;
        }
        dmm__heap_list_remove(&g->unmapped, b);
        dmm__heap_block_put(g, b);
        size_t r0 = (size_t)((r->lo - p->base) >> p->region_shift), n = (size_t)((r->hi - r->lo) >> p->region_shift);
        dmm_lock_acquire(&p->lock);
        for (size_t k = 0; k < n; k++) dmm_atomic_store_release(&p->owner[r0 + k], NULL);
        dmm_lock_release(&p->lock);
        freed += n;
        g->runs[i] = g->runs[--g->nruns];
        g->plan_serial++; /* a job posted before plans runs that are gone */
    }
    return freed;
}

/* Gives heap h `n` more contiguous regions (under h's lock; takes the pool lock). Prefers the regions
 * right after one of h's runs (the run grows), else the lowest free run of regions that leaves the
 * most room after other heaps. False when the VA is exhausted (error set). */
bool dmm__pool_grow_va(dmm_pool *p, pool_heap *h, size_t n, size_t prefer) {
    if (h->nruns == h->caprun) {
        size_t nc = h->caprun ? h->caprun * 2 : 4;
        prun *nr = realloc(h->runs, nc * sizeof *nr);
        if (nr == NULL) {
            dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool: out of host memory for the runs of stream %p", h->stream);
            return false;
        }
        h->runs = nr;
        h->caprun = nc;
    }
    if (!dmm__heap_reserve_blocks(h, 2)) {
        dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool: out of host memory for block records");
        return false;
    }
    for (int pass = 0;; pass++) {
        dmm_lock_acquire(&p->lock);
        size_t at = p->nregions;
        prun *extend = NULL;
        /* 1: right after one of h's runs (`prefer` when it is one and has room) */
        if (prefer < h->nruns) {
            size_t r0 = (size_t)((h->runs[prefer].hi - p->base) >> p->region_shift), k = 0;
            while (k < n && r0 + k < p->nregions && dmm_atomic_load_relaxed(&p->owner[r0 + k]) == NULL)
                k++;
            if (k == n) {
                at = r0;
                extend = &h->runs[prefer];
            }
        }
        for (size_t i = 0; i < h->nruns && at == p->nregions; i++) {
            size_t r0 = (size_t)((h->runs[i].hi - p->base) >> p->region_shift);
            size_t k = 0;
            while (k < n && r0 + k < p->nregions && dmm_atomic_load_relaxed(&p->owner[r0 + k]) == NULL) k++;
            if (k == n) {
                at = r0;
                extend = &h->runs[i];
            }
        }
        /* 2: a new run: the free gap of at least n regions with the most room, starting half-way into
         *    it when it follows another heap (so that both can grow), at its start otherwise */
        if (at == p->nregions) {
            size_t best_len = 0, best_at = p->nregions;
            size_t i = 0;
            while (i < p->nregions) {
                if (dmm_atomic_load_relaxed(&p->owner[i]) != NULL) {
                    i++;
                    continue;
                }
                size_t j = i;
                while (j < p->nregions && dmm_atomic_load_relaxed(&p->owner[j]) == NULL) j++;
                size_t len = j - i;
                if (len >= n && len > best_len) {
                    best_len = len;
                    best_at = i > 0 && len >= 2 * n ? i + (len - n) / 2 : i;
                }
                i = j;
            }
            at = best_at;
        }
        if (at == p->nregions && pass == 0) {
            /* the VA is taken: runs that hold nothing (of this heap, and of others that are not busy) go back */
            dmm_lock_release(&p->lock);
            size_t shed = heap_shed_empty_runs(p, h);
            for (pool_heap *g = heaps_head(p); g != NULL; g = heap_next(g)) {
                if (g == h || !heap_trylock(g)) continue;
                shed += heap_shed_empty_runs(p, g);
                heap_unlock(g);
            }
            if (shed > 0) continue;
            dmm_lock_acquire(&p->lock);
        }
        if (at == p->nregions) {
            size_t used = 0;
            for (size_t i = 0; i < p->nregions; i++) used += dmm_atomic_load_relaxed(&p->owner[i]) != NULL;
            dmm_lock_release(&p->lock);
            dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                          "pool: the VA is exhausted: stream %p needs %zu more region(s) of %llu bytes and %zu of %zu are "
                          "taken by streams that hold memory; call dmm_pool_empty_cache, or create the pool with a "
                          "larger va_bytes (or a smaller region_bytes)",
                          h->stream, n, (unsigned long long)p->region, used, p->nregions);
            return false;
        }
        for (size_t k = 0; k < n; k++) dmm_atomic_store_release(&p->owner[at + k], h);
        dmm_lock_release(&p->lock);

        uintptr_t lo = p->base + ((uint64_t)at << p->region_shift);
        uint64_t len = (uint64_t)n << p->region_shift;
        if (extend != NULL) {
            pool_block *last = extend->first;
            while (last->next != NULL) last = last->next;
            extend->hi += len;
            if (last->kind == BK_UNMAPPED) {
                last->size += len;
                return true;
            }
            pool_block *b = dmm__heap_block_new(h);
            b->addr = lo;
            b->size = len;
            b->prev = last;
            last->next = b;
            dmm__heap_make_unmapped(h, b);
            return true;
        }
        pool_block *b = dmm__heap_block_new(h);
        b->addr = lo;
        b->size = len;
        dmm__heap_make_unmapped(h, b);
        prun *r = &h->runs[h->nruns++];
        h->plan_serial++;
        r->lo = lo;
        r->hi = lo + len;
        r->first = b;
        return true;
    }
}

/* `op` names the public call in a loss's sentence; `entering` is the notice's fragment. */
static dmm_status pool_trim(dmm_pool *p, uint64_t target, uint64_t *released, const char *op, const char *entering) {
    if (released != NULL) *released = 0;
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the pool is NULL", op);
    if (dmm__pool_lost(p, entering)) return dmm__pool_lost_error(p, op);
    dmm_atomic_add_relaxed(&p->trims, 1);
    uint64_t freed = 0;
    /* the first failure, kept: the decommits and polls that follow it (the trim goes on) set and clear
     * errors of their own before it is reported */
    dmm_error_kept fail = {0};
    uintptr_t where = 0;
    srcvec sv = {NULL, 0, 0};
    /* a warm layout's handles not grown into yet are the first to go: nothing uses them */
    if (dmm__pool_layout_release_all(p, &freed) != DMM_OK) dmm__error_keep(&fail, dmm_last_status());
    for (pool_heap *h = heaps_head(p); h != NULL && !dmm__drv_lost(p->drv); h = heap_next(h)) {
        dmm__pool_poll(p, h); /* also when there is nothing to trim: cross-stream frees become reusable */
        uint64_t committed = dmm_atomic_load_relaxed(&p->committed);
        heap_lock(h);
        h->stock_end = 0; /* what a trim gives back is not grown again before the pool grows (stock.c) */
        if (committed <= target) {
            heap_unlock(h);
            continue;
        }
        sv.n = 0;
        dmm__pool_carve_sources(p, h, committed - target, 0, 0, NULL, 0, false, false, false, &sv);
        heap_unlock(h);
        for (size_t i = 0; i < sv.n; i++) {
            dmm__pool_decommit_one(p, &sv.v[i]);
            dmm_release_state st8 = dmm_release_state_of(&sv.v[i].o);
            if (st8 == DMM_RELEASE_COMPLETE) {
                freed += sv.v[i].o.unmapped_bytes;
                dmm__pool_layout_forget(p, sv.v[i].b->addr, sv.v[i].bytes); /* given back: not grown through any more */
            } else if (fail.status == DMM_OK) {
                where = sv.v[i].b->addr;
                dmm__error_keep(&fail, sv.v[i].o.failure != DMM_OK ? sv.v[i].o.failure : DMM_ERR_DRIVER);
            }
        }
        dmm__pool_sources_fixup(p, &sv, 0);
    }
    free(sv.v);
    if (released != NULL) *released = freed;
    if (dmm__pool_lost(p, "trimming")) { /* the loss cut the trim short: what was released before it is counted */
        char what[128];
        snprintf(what, sizeof what, "%s (%llu bytes were released before the loss)", op, (unsigned long long)freed);
        return dmm__pool_lost_error(p, what);
    }
    if (fail.status != DMM_OK)
        return dmm_error_set(fail.status,
                             "dmm_pool_trim: decommitting the chunk at %p failed (the chunk stays in the pool: free "
                             "and mapped if nothing changed, never used again if the mechanism quarantined it); "
                             "%llu bytes were released: %s",
                             (void *)where, (unsigned long long)freed, dmm__error_kept_text(&fail));
    return DMM_OK;
}

void dmm__pool_shed_unplanned(dmm_pool *p, pool_heap *h) {
    if (dmm__pool_lost(p, "shedding memory a plan does not use")) return;
    dmm__pool_poll(p, h);
    srcvec sv = {NULL, 0, 0};
    heap_lock(h);
    uint64_t limit = dmm__pool_retention_limit(p), committed = committed_once(p);
    uint64_t over = committed > limit ? committed - limit : 0;
    if (over > 0) dmm__pool_carve_sources(p, h, over, 0, 0, NULL, 0, false, false, true, &sv);
    heap_unlock(h);
    for (size_t i = 0; i < sv.n; i++) {
        dmm__pool_decommit_one(p, &sv.v[i]);
        if (dmm_release_state_of(&sv.v[i].o) == DMM_RELEASE_COMPLETE)
            dmm__pool_layout_forget(p, sv.v[i].b->addr, sv.v[i].bytes);
    }
    dmm__pool_sources_fixup(p, &sv, 0);
    free(sv.v);
    dmm_clear_error(); /* a chunk that stayed is still free and mapped: the next turn sheds it again */
}

dmm_status dmm__pool_trim(dmm_pool *p, uint64_t target, uint64_t *released) {
    return pool_trim(p, target, released, "dmm_pool_trim", "entering dmm_pool_trim");
}

dmm_status dmm__pool_empty_cache(dmm_pool *p, uint64_t *released) {
    dmm_status s = pool_trim(p, 0, released, "dmm_pool_empty_cache", "entering dmm_pool_empty_cache");
    if (s != DMM_OK) return s;
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h)) { /* empty runs give their VA back */
        heap_lock(h);
        heap_shed_empty_runs(p, h);
        heap_unlock(h);
    }
    if (dmm__pool_lost(p, "entering dmm_pool_empty_cache")) return dmm__pool_lost_error(p, "dmm_pool_empty_cache");
    s = dmm_mechanism_drain_cache(p->mech);
    if (s == DMM_ERR_UNSUPPORTED) { /* a mechanism that caches no handles */
        dmm_clear_error();
        return DMM_OK;
    }
    if (s == DMM_ERR_DEVICE_LOST) {
        dmm__pool_notice_loss(p, "draining the mechanism's handle cache");
        return dmm__pool_lost_error(p, "dmm_pool_empty_cache");
    }
    return s;
}

