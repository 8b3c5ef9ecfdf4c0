/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/pool_stats.c — the pool's stats (pool.h: DMM_POOL_STAT_COUNTS / _COUNTERS, declared once)
 * and the dmm_pool_check entry.
 *
 * What it owns: gathering the heaps' counts (under each heap's lock in turn) and the pool's atomic
 * counters into one dmm_pool_stats, the shared dmm_stats shape, the JSON form's field table, and
 * the check of the pool-wide sums behind dmm_pool_check (the
 * heaps' own invariants are pool_check.c's).
 *
 * The idea: counts that one heap keeps exactly (its live bytes and peak) are summed; peaks across
 * heaps are sampled (at every growth, trim and stats call) and never reported below any single
 * heap's peak. physical_bytes and the driver_* counters are the mechanism's own stats, read here.
 * Writing them out is shared with every stats struct: the copy-out to a caller's struct of any size
 * (dmm__stats_out_check / _copy, src/core/stats.c) and the JSON writer (dmm__json_stats, core/json.h).
 *
 * Invariants checked: Σ heap.committed = p.committed and Σ ALIASED sizes = p.aliased_bytes (exact
 * while no other thread uses the pool). The check merges every heap's parked (QUICK) blocks, after
 * checking them as they were; stats do not (the counts are exact at each free: a parked block is
 * free memory in every stat, so reading them needs no merge).
 */
#include <stddef.h>
#include <string.h>

#include "core/json.h"
#include "pool/types.h"

#define POOL_STATS_MIN_SIZE (offsetof(dmm_pool_stats, allocations) + sizeof(dmm_count))

/* The counters of dmm_pool_stats that the pool keeps pool-wide, as relaxed atomics of dmm_pool under
 * the same names (the others are the heaps' sums or the mechanism's). */
#define POOL_ATOMIC_COUNTERS(X)                                                                         \
    X(grows) X(chunks_committed) X(chunks_decommitted) X(chunks_moved) X(chunks_aliased) X(trims)           \
    X(events_recorded) X(events_pending) X(chunks_poisoned) X(slow_path_ns) X(stock_grows) X(stock_ns)      \
    X(stock_wait_ns)

static void gather(dmm_pool *p, dmm_pool_stats *s) {
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    uint64_t maxlive = 0, maxreq = 0, maxblocks = 0, sumlive = 0, sumreq = 0;
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        heap_lock(h);
        s->allocations.current += (int64_t)h->live_blocks;
        s->allocations.total += (int64_t)h->mallocs; /* every malloc made one live block */
        if (h->live_peak_blocks > maxblocks) maxblocks = h->live_peak_blocks;
        sumlive += dmm_atomic_load_relaxed(&h->live_bytes);
        s->allocated_bytes.total += (int64_t)h->live_total;
        if (dmm_atomic_load_relaxed(&h->live_peak) > maxlive) maxlive = dmm_atomic_load_relaxed(&h->live_peak);
        sumreq += h->requested_bytes;
        s->requested_bytes.total += (int64_t)h->requested_total;
        if (h->requested_peak > maxreq) maxreq = h->requested_peak;
        s->mallocs += h->mallocs;
        s->frees += h->frees;
        s->cached_mallocs += h->mallocs - h->grown_mallocs;
        s->cross_stream_frees += h->cross_frees;
        s->plans += h->plans;
        s->planned_mallocs += h->planned_mallocs;
        s->plan_misses += h->plan_misses;
        s->lock_slow_paths += h->lock.slow; /* written under the lock's mutex by a holder: we hold the lock */
        heap_unlock(h);
    }
    dmm_atomic_max_relaxed(&p->sampled_live_peak, sumlive);
    dmm_atomic_max_relaxed(&p->sampled_requested_peak, sumreq);
    uint64_t lp = dmm_atomic_load_relaxed(&p->sampled_live_peak);
    uint64_t rp = dmm_atomic_load_relaxed(&p->sampled_requested_peak);
    s->allocated_bytes.current = (int64_t)sumlive;
    s->allocated_bytes.peak = (int64_t)(lp > maxlive ? lp : maxlive);
    s->requested_bytes.current = (int64_t)sumreq;
    s->requested_bytes.peak = (int64_t)(rp > maxreq ? rp : maxreq);
    s->allocations.peak = (int64_t)maxblocks;
    if (s->allocations.peak < s->allocations.current) s->allocations.peak = s->allocations.current;
    s->committed_bytes.current = (int64_t)dmm_atomic_load_relaxed(&p->committed);
    s->committed_bytes.peak = (int64_t)dmm_atomic_load_relaxed(&p->committed_peak);
    s->committed_bytes.total = (int64_t)dmm_atomic_load_relaxed(&p->committed_total);
    s->pending_blocks.current = (int64_t)dmm_atomic_load_relaxed(&p->pending_now);
    s->pending_blocks.peak = (int64_t)dmm_atomic_load_relaxed(&p->pending_peak);
    s->pending_blocks.total = (int64_t)dmm_atomic_load_relaxed(&p->pending_total);
    dmm_lock_acquire(&p->lock);
    s->heaps.current = s->heaps.peak = s->heaps.total = (int64_t)p->nheaps;
    dmm_lock_release(&p->lock);
#define POOL_COUNTER_READ(name) s->name = dmm_atomic_load_relaxed(&p->name);
    POOL_ATOMIC_COUNTERS(POOL_COUNTER_READ)
#undef POOL_COUNTER_READ
    s->layout_adopted = dmm_atomic_load_relaxed(&p->layout.adopted);
    s->layout_released = dmm_atomic_load_relaxed(&p->layout.released);
    dmm_stats ms;
    memset(&ms, 0, sizeof ms);
    ms.size = sizeof ms;
    if (dmm_mechanism_stats(p->mech, &ms) == DMM_OK) {
        s->physical_bytes = ms.owned_bytes;
        s->driver_create = ms.driver_create;
        s->driver_map = ms.driver_map;
        s->driver_set_access = ms.driver_set_access;
        s->driver_unmap = ms.driver_unmap;
        s->driver_release = ms.driver_release;
        s->driver_cache_hits = ms.cache_hits;
        s->driver_ns = ms.driver_ns;
    } else {
        dmm_clear_error();
    }
}

dmm_status dmm_pool_stats_get(dmm_pool *p, dmm_pool_stats *out) {
    if (p == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_stats_get: pool and out are required");
    dmm_status st = dmm__stats_out_check(out, POOL_STATS_MIN_SIZE, sizeof(dmm_pool_stats), "dmm_pool_stats",
                                         "dmm_pool_stats_get");
    if (st != DMM_OK) return st; /* before gathering: a refused call samples no peak */
    dmm_pool_stats s;
    gather(p, &s);
    dmm__stats_out_copy(&s, sizeof s, out);
    return DMM_OK;
}

dmm_status dmm_pool_stats_common(dmm_pool *p, dmm_stats *out) {
    if (p == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_stats_common: pool and out are required");
    dmm_pool_stats s;
    gather(p, &s);
    dmm_stats c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.allocations = s.allocations;
    c.allocated_bytes = s.allocated_bytes;
    c.reserved_bytes.current = c.reserved_bytes.peak = c.reserved_bytes.total = (int64_t)p->va_bytes;
    c.committed_bytes = s.committed_bytes;
    c.mapped_bytes = s.committed_bytes;
    c.owned_bytes = s.physical_bytes;
    c.driver_create = s.driver_create;
    c.driver_map = s.driver_map;
    c.driver_set_access = s.driver_set_access;
    c.driver_unmap = s.driver_unmap;
    c.driver_release = s.driver_release;
    c.cache_hits = s.driver_cache_hits;
    c.driver_ns = s.driver_ns;
    return dmm__stats_copy_out(&c, out);
}

/* The pool's stats described once, from their X-macros, for the one stats writer (core/json.h). */
#define POOL_JSON_COUNT(name, desc) DMM_JSON_STAT_COUNT(dmm_pool_stats, name),
#define POOL_JSON_COUNTER(name, desc) DMM_JSON_STAT_COUNTER(dmm_pool_stats, name),
static const dmm_json_stat pool_json_fields[] = {DMM_POOL_STAT_COUNTS(POOL_JSON_COUNT)
                                                     DMM_POOL_STAT_COUNTERS(POOL_JSON_COUNTER)};
#undef POOL_JSON_COUNT
#undef POOL_JSON_COUNTER
static const dmm_json_stats pool_json_desc = DMM_JSON_STATS(dmm_pool_stats, pool_json_fields);

dmm_status dmm_pool_stats_json(const dmm_pool_stats *s, char *buf, size_t cap, size_t *needed) {
    return dmm__json_stats(&pool_json_desc, "dmm_pool_stats_json", s, buf, cap, needed);
}

/* ---- check: the pool-wide sums; each heap's own invariants are pool_check.c's ---- */
dmm_status dmm_pool_check(dmm_pool *p) {
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_check: the pool is NULL");
    uint64_t sum = 0, twice = 0;
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        heap_lock(h);
        const char *bad = dmm__heap_check_locked(h); /* with its parked blocks as they are, */
        if (bad == NULL && h->nquick > 0) {           /* then merged (pool.h: the check merges them) */
            dmm__heap_quick_flush(h);
            bad = dmm__heap_check_locked(h);
        }
        sum += h->committed;
        for (const pool_block *b = h->aliased; b != NULL; b = b->lnext) twice += b->size;
        heap_unlock(h);
        if (bad != NULL)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_check: heap of stream %p: %s", h->stream, bad);
    }
    if (sum != dmm_atomic_load_relaxed(&p->committed))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_check: the heaps hold %llu committed bytes but the pool counts %llu (call the "
                             "check while no other thread uses the pool)",
                             (unsigned long long)sum, (unsigned long long)dmm_atomic_load_relaxed(&p->committed));
    if (twice != dmm_atomic_load_relaxed(&p->aliased_bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_check: the heaps hold %llu bytes of aliased old places but the pool counts %llu "
                             "(call the check while no other thread uses the pool)",
                             (unsigned long long)twice, (unsigned long long)dmm_atomic_load_relaxed(&p->aliased_bytes));
    const char *bad = dmm__pool_layout_invariants(p);
    if (bad != NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_check: the warm layout: %s", bad);
    return DMM_OK;
}
