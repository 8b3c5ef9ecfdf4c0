/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/pool.c — the caching allocator's API and hot path (DESIGN §4.9; contract: include/dmm/pool.h).
 *
 * What it owns: the pool object (create, destroy), one VA-only allocation of a mechanism with virtual
 * backing, the heaps (one per stream, found through a thread-local cache) that tile it with blocks,
 * and malloc/free with their hot path, under the heap's (biased) lock and with no driver call: an
 * exact repeat takes back the block the stream's last free parked (the heap's hot block, still in the
 * hash; older parked blocks wait on the quick list of their size), anything else is a bin lookup, a
 * split and a hash insert. The rest lives below
 * (types.h lists the files): growth.c grows, regions.c hands out VA and trims, fences.c gates reuse
 * behind events, moves.c moves chunks, pool_stats.c reports. This opening is the pool's overview.
 *
 * The idea. VA is plentiful and physical memory is not, and the two are decoupled: a heap places
 * blocks by best fit in its own VA, and only the chunks that blocks touch need physical backing.
 * A malloc that finds no mapped free block big enough plans a growth: the fewest new chunks that
 * make a fit, next to a free block when one borders unmapped VA (so free blocks coalesce across
 * chunk boundaries). If committing them would take the pool's mapped memory above its retention
 * limit — (1 + retain_permille/1000) × the highest live bytes seen so far — it first takes whole
 * free chunks whose fence has completed (from this heap, then from others, each of which keeps the
 * free chunk its own stream reuses next) and moves them:
 * decommit there, commit here, one chunk at a time so that the mechanism's handle cache hands the
 * same physical handle back without creating a new one. Physical memory therefore tracks the peak
 * of live memory plus the sub-chunk slack of partly used chunks, and the driver calls are spent only
 * where live memory really moves.
 *
 * Aliases. A move must wait for the chunk's fence (never unmap under work that may still use it).
 * On a GPU the CPU runs ahead of the work, so the fences of recent frees are usually pending when
 * memory is needed, and the pool would grow instead. But the requesting heap's own free chunks are
 * safe for its own stream at once (stream order), only not at their old address until the fence.
 * So when a growth wants chunks of its own heap whose fence is pending, it aliases them: the
 * mechanism maps the same handles at the new place now (its optional `alias` slot), the old place
 * becomes ALIASED (mapped, out of use) and a poll decommits it once a completed fence covers its last
 * free; its VA then returns UNMAPPED. Chunks behind a completed fence still move (nothing is left
 * to reap), and chunks of other heaps still wait. Physical memory is never duplicated; the mapped
 * (and committed) bytes count both places for a while. The aliased memory's free blocks carry the
 * old place's seq, so that it reaches another stream, or is trimmed, only behind the same fence.
 *
 * Trade-offs. Chunks of one quantum (the granule, the default) make every physical handle fit every
 * place, at the cost of one create + map + set-access per granule on growth; with max_chunk_bytes
 * above the quantum a growth commits one handle sized to the need (far fewer calls) and a moved
 * chunk keeps its size (the cache matches sizes), but a partly used big chunk cannot move, so
 * fragmentation rises (measured on the real traces: 1.02 × live at 2 MiB, 1.03-1.08 × at 8 MiB,
 * 1.05-1.25 × at 128 MiB). The retention limit trades a little memory (2 % by default) for far
 * fewer moves. Blocks freed on a heap's own stream are
 * reused at once by that stream; they reach other streams only as whole chunks behind a completed
 * fence, so a stream never gets memory another stream's queued work may still touch.
 *
 * Invariants (see types.h for the heap's): p.committed = Σ heap.committed = Σ chunk bytes
 * (clen) once no growth or trim is in flight; a chunk is committed or decommitted only while its block is COMMITTING or
 * DECOMMITTING, by the one thread that carved it, outside every heap lock; a DECOMMITTING chunk came
 * from a FREE block with seq ≤ safe_seq of its heap (its last free is behind a completed fence), or
 * is an ALIASED old place whose seq ≤ safe_seq; an aliased chunk came from a FREE block of the heap
 * whose growth it joined; p.aliased_bytes = Σ ALIASED sizes.
 *
 * Device loss (pool.h, "Device loss"; loss.c). The loss is the driver's: its wrappers latch the
 * first DMM_ERR_DEVICE_LOST and refuse every later call, whoever makes it. Every pool path that would
 * reach the driver, directly or through the mechanism, first asks dmm__drv_lost(p->drv) and stops,
 * so the pool makes no driver call after a loss; the bookkeeping stays exact (a free after the loss
 * is a bookkeeping free). The hot path asks only p->refusing, which the pool sets when it first
 * notices the loss. Destroy waits until the context is confirmed torn down (dmm__drv_terminated), or
 * until the mechanism gives the VA back, and then frees the host memory without a driver call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmm/share.h"
#include "pool/hot.h"

#define GIB ((uint64_t)1 << 30)

static _Atomic uint64_t pool_uids = 1;

typedef struct tl_heap_cache {
    const dmm_pool *pool;
    uint64_t uid;
    dmm_stream stream;
    pool_heap *heap;
} tl_heap_cache;
static _Thread_local tl_heap_cache tl_cache;

/* ---- create / destroy ---- */
dmm_status dmm_pool_create(dmm_mechanism *mech, dmm_driver *drv, const dmm_pool_config *cfg, dmm_pool **out) {
    if (out == NULL || mech == NULL || drv == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: mechanism %p, driver %p, out %p: all three are required",
                             (void *)mech, (void *)drv, (void *)out);
    *out = NULL;
    if ((dmm_mechanism_capabilities(mech) & DMM_CAP_VIRTUAL_BACKING) == 0)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_pool_create: mechanism '%s' has no virtual backing; a pool commits and "
                             "decommits ranges of its VA, so give it an arena (dmm_arena_create)",
                             dmm_mechanism_name(mech));
    dmm_pool_config c;
    memset(&c, 0, sizeof c);
    if (cfg != NULL) {
        if (cfg->size < offsetof(dmm_pool_config, retain_permille) + sizeof cfg->retain_permille)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "dmm_pool_create: the config's size is %u bytes; set .size = "
                                 "sizeof(dmm_pool_config) (%zu in this build)",
                                 cfg->size, sizeof(dmm_pool_config));
        memcpy(&c, cfg, cfg->size < sizeof c ? cfg->size : sizeof c);
    }
    if (dmm__drv_lost(drv))
        return dmm_error_set(DMM_ERR_DEVICE_LOST,
                             "dmm_pool_create: the driver lost its device (first seen at %s); no pool can be made on "
                             "it: tear the context down, confirm with dmm_arena_confirm_context_terminated() and make "
                             "a new arena on a working device",
                             dmm__drv_lost_why(drv));
    if (drv->ops == NULL || drv->ops->granularity == NULL || drv->ops->event_create == NULL ||
        drv->ops->event_record == NULL || drv->ops->event_query == NULL || drv->ops->event_destroy == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_pool_create: driver '%s' lacks granularity or events; the pool needs both "
                             "(to size chunks and to gate reuse behind streams)",
                             drv->ops != NULL && drv->ops->name != NULL ? drv->ops->name : "?");
    size_t gran = 0;
    dmm_status s = dmm__drv_granularity(drv, &gran);
    if (s != DMM_OK) return s;
    uint64_t chunk = c.chunk_bytes ? c.chunk_bytes : gran;
    if (!dmm_is_pow2(chunk) || gran == 0 || chunk % gran != 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: chunk_bytes %llu must be a power of two and a multiple of the "
                             "driver's granularity %zu",
                             (unsigned long long)chunk, gran);
    uint64_t max_chunk = c.max_chunk_bytes ? c.max_chunk_bytes : chunk;
    if (max_chunk % chunk != 0 || max_chunk / chunk > UINT32_MAX)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: max_chunk_bytes %llu must be a multiple of chunk_bytes %llu and at "
                             "most 2^32 - 1 of them (%llu bytes)",
                             (unsigned long long)max_chunk, (unsigned long long)chunk,
                             (unsigned long long)(chunk > UINT64_MAX / UINT32_MAX ? UINT64_MAX : chunk * UINT32_MAX));
    uint64_t min_chunk = c.min_chunk_bytes ? c.min_chunk_bytes : chunk;
    if (min_chunk % chunk != 0 || min_chunk > max_chunk)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: min_chunk_bytes %llu must be a multiple of chunk_bytes %llu and at "
                             "most max_chunk_bytes %llu (0 = one chunk_bytes)",
                             (unsigned long long)min_chunk, (unsigned long long)chunk,
                             (unsigned long long)max_chunk);
    uint64_t align = c.block_align ? c.block_align : 512;
    if (!dmm_is_pow2(align) || align < 64 || align > chunk)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: block_align %llu must be a power of two from 64 to chunk_bytes "
                             "(%llu)",
                             (unsigned long long)align, (unsigned long long)chunk);
    uint64_t va = c.va_bytes;
    uintptr_t rva = 0;
    uint64_t rbytes = 0; /* the mechanism's reservation; 0: it names none */
    if (dmm_mechanism_reservation(mech, &rva, &rbytes) != DMM_OK) rbytes = 0;
    dmm_clear_error();
    if (va == 0) va = rbytes > 0 ? rbytes / 2 : 64 * GIB;
    if (rbytes > 0 && va > rbytes) /* refused before the tables sized by it are allocated */
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: va_bytes %llu is more than mechanism '%s' reserved (%llu bytes); pass "
                             "at most that (0 = half of it), or give the arena a larger reserve_bytes",
                             (unsigned long long)va, dmm_mechanism_name(mech), (unsigned long long)rbytes);
    if (chunk > va)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: chunk_bytes %llu is larger than the pool's VA (%llu bytes): every "
                             "chunk lies inside the VA; pass a smaller chunk_bytes or a larger va_bytes",
                             (unsigned long long)chunk, (unsigned long long)va);
    uint64_t region = c.region_bytes;
    if (region == 0) { /* the largest power of two ≤ va/64, at least a chunk; the test cannot overflow */
        region = chunk;
        while (region <= va / 128) region *= 2;
    }
    if (!dmm_is_pow2(region) || region < chunk || va < region)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: region_bytes %llu must be a power of two, at least chunk_bytes "
                             "(%llu) and at most va_bytes (%llu)",
                             (unsigned long long)region, (unsigned long long)chunk, (unsigned long long)va);
    va -= va % region;

    dmm_pool *p = aligned_alloc(DMM_SHARING_BYTES, sizeof *p); /* whole line pairs (types.h: the hot fields' own) */
    if (p == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_create: out of host memory");
    memset(p, 0, sizeof *p);
    p->mech = mech;
    p->drv = drv;
    p->va_bytes = va;
    p->chunk = chunk;
    p->max_chunk = max_chunk;
    p->handle_divisor = c.handle_divisor;
    p->min_chunk = min_chunk;
    p->floor_divisor = c.floor_divisor;
    p->region = region;
    p->region_shift = (unsigned)__builtin_ctzll(region);
    p->nregions = (size_t)(va / region);
    p->align = align;
    p->align_shift = (unsigned)__builtin_ctzll(align);
    p->retain_permille = c.retain_permille ? c.retain_permille : 20;
    p->settle_permille = c.settle_permille ? c.settle_permille : 100;
    if (p->settle_permille < p->retain_permille) p->settle_permille = p->retain_permille;
    p->can_alias = !c.no_alias && dmm_mechanism_has_slot(mech, DMM_SLOT_ALIAS); /* a capability, not a probe */
    p->can_commit_pieces = dmm_mechanism_has_slot(mech, DMM_SLOT_COMMIT_PIECES);
    p->move_batch = c.move_batch_bytes;
    p->plan_loops = c.plan_loops != 0;
    if (cfg != NULL && cfg->size >= offsetof(dmm_pool_config, on_map_user) + sizeof cfg->on_map_user) {
        p->on_map = c.on_map;
        p->on_map_user = c.on_map_user;
    }
    dmm_clear_error();
    p->uid = dmm_atomic_add_relaxed(&pool_uids, 1);
    p->owner = calloc(p->nregions, sizeof *p->owner);
    p->clen = calloc((size_t)(va / chunk), sizeof *p->clen); /* untouched pages cost nothing */
    if (p->owner == NULL || p->clen == NULL) {
        free(p->owner);
        free(p->clen);
        size_t nr = p->nregions;
        free(p);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_create: out of host memory for %zu regions", nr);
    }
    if (!dmm__pool_layout_init(p)) {
        free(p->owner);
        free(p->clen);
        free(p);
        return dmm_last_status();
    }
    s = dmm_mechanism_allocate_committed(mech, (size_t)va, (size_t)chunk, NULL, 0, &p->va);
    if (s != DMM_OK) {
        dmm__pool_layout_fini(p);
        free(p->owner);
        free(p->clen);
        free(p);
        return dmm__error_wrap(s,
                               "dmm_pool_create: reserving %llu bytes of VA from mechanism '%s' failed (%s); "
                               "configure a smaller va_bytes or a larger reservation",
                               (unsigned long long)va, dmm_mechanism_name(mech), dmm_status_str(s));
    }
    p->base = (uintptr_t)p->va.ptr;
    dmm_lock_init(&p->lock);
    p->stock_cap = cfg != NULL && cfg->size >= offsetof(dmm_pool_config, stock_bytes) + sizeof cfg->stock_bytes
                       ? align_down_c(p, c.stock_bytes) : 0;
    if ((p->stock_cap > 0 && !dmm__pool_stock_start(p)) || (p->plan_loops && !dmm__planner_start(p))) {
        dmm__pool_stock_stop(p); /* (a no-op when it did not start) */
        dmm_error_kept cause = {0};
        dmm__error_keep(&cause, dmm_last_status());
        (void)dmm_mechanism_release(mech, &p->va); /* VA only, nothing committed in it */
        dmm_lock_destroy(&p->lock);
        dmm__pool_layout_fini(p);
        free(p->owner);
        free(p->clen);
        free(p);
        return dmm_error_set(cause.status, "%s", dmm__error_kept_text(&cause));
    }
    *out = p;
    return DMM_OK;
}

/* The heap of `stream` when the thread's cache does not hold it: found, or created on first use. */
__attribute__((noinline)) static pool_heap *heap_find(dmm_pool *p, dmm_stream stream) {
    pool_heap *h;
    for (h = heaps_head(p); h != NULL; h = heap_next(h))
        if (h->stream == stream) break;
    if (h == NULL) {
        dmm_lock_acquire(&p->lock);
        for (h = heaps_head(p); h != NULL; h = heap_next(h))
            if (h->stream == stream) break;
        if (h == NULL) {
            h = aligned_alloc(DMM_SHARING_BYTES, sizeof *h); /* whole line pairs (types.h): heaps share none */
            if (h == NULL || !dmm__heap_init(h, p, stream)) {
                free(h);
                dmm_lock_release(&p->lock);
                dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool: out of host memory creating the heap of stream %p",
                              stream);
                return NULL;
            }
            h->ordinal = (uint32_t)p->nheaps;
            dmm_atomic_store_relaxed(&h->next_heap, heaps_head(p));
            dmm_atomic_store_release(&p->heaps, h);
            p->nheaps++;
        }
        dmm_lock_release(&p->lock);
    }
    tl_cache.pool = p;
    tl_cache.uid = p->uid;
    tl_cache.stream = stream;
    tl_cache.heap = h;
    return h;
}

/* The heap of `stream` (NULL: out of host memory, error set). */
static inline pool_heap *heap_for(dmm_pool *p, dmm_stream stream) {
    if (__builtin_expect(tl_cache.pool == p && tl_cache.uid == p->uid && tl_cache.stream == stream, 1))
        return tl_cache.heap;
    return heap_find(p, stream);
}

/* The heap whose VA holds `addr`, or NULL. */
static inline pool_heap *heap_of_addr(const dmm_pool *p, uintptr_t addr) {
    if (addr < p->base || addr - p->base >= p->va_bytes) return NULL;
    return dmm_atomic_load_acquire(&p->owner[(addr - p->base) >> p->region_shift]);
}

/* The hot path (dmm_pool_malloc, dmm_pool_free) is the pair's common case only, inline: the thread's
 * cached heap, its lock through the owner's slot, an exact repeat off (or onto) a quick list. Anything
 * else leaves it by a tail call into an out-of-line function that does the whole operation, so the hot
 * path keeps no register across a call (no prologue: measured with callgrind). */
__attribute__((noinline, cold)) static dmm_status malloc_refused_args(const dmm_pool *p, size_t bytes,
                                                                      void **out) {
    if (p == NULL || out == NULL || bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_malloc: pool %p, %zu bytes, out %p: a pool, a size above 0 and an output "
                             "pointer are required",
                             (void *)p, bytes, (void *)out);
    return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                         "dmm_pool_malloc: %zu bytes is more than the pool's VA (%llu bytes); create the "
                         "pool with a larger va_bytes",
                         bytes, (unsigned long long)p->va_bytes);
}

/* A malloc served by parked block b (an exact repeat: no bin, split or hash work; h's lock held). */
static inline void quick_hit(pool_heap *h, pool_block *b, size_t bytes) {
    h->quick_wasted = 0;
    b->kind = BK_LIVE;
    b->requested = bytes;
    count_live(h, b, bytes);
    count_malloc(h, b);
}

/* Releases h's lock, taken through the hot path's slot (non-NULL) or heap_lock (NULL). */
static inline void unlock_by(pool_heap *h, dmm_biased_slot *slot) {
    if (slot != NULL) dmm_biased_lock_release_slot(slot);
    else heap_unlock(h);
}

/* malloc past the hot block: a quick list, else best fit in the bins, else the slow path (h's lock
 * held, taken either way: `slot` is the hot path's, or NULL; released). */
static __attribute__((noinline)) dmm_status malloc_rest(dmm_pool *p, pool_heap *h, uint64_t n, size_t bytes, void **out,
                                                        dmm_biased_slot *slot) {
    uintptr_t planned_at = 0;
    bool planned = false;
    if (h->follow != NULL) { /* the heap follows the plan of its loop (follow.c): its place, if mapped and free */
        pool_block *b = dmm__follow_place(h, n, bytes, &planned_at, &planned);
        if (b != NULL) {
            pfollow *f = h->follow;
            bool shed = f->shed_due;
            f->shed_due = false;
            unlock_by(h, slot);
            *out = (void *)b->addr;
            if (shed) dmm__pool_shed_unplanned(p, h); /* after a turn with no growth: what the plan leaves unused */
            return DMM_OK;
        }
    }
    pool_block *b = h->nquick > 0 ? quick_pop(h, n) : NULL; /* none parked: no size class to compute */
    if (b != NULL) {
        quick_hit(h, b, bytes);
        if (look_due(h)) dmm__follow_look(p, h);
        unlock_by(h, slot);
        *out = (void *)b->addr;
        return DMM_OK;
    }
    h->reach_known = NULL; /* the free layout may change from here on (types.h) */
    /* A miss places the block where it would go with every parked block merged: it merges them first
     * when they could make a free block it fits (types.h, QUICK) — so that parking never changes a
     * placement, nor the moves and growths that follow from placements. */
    if (n <= h->quick_reach) {
        h->quick_wasted += (uint32_t)h->nquick; /* parked for nothing: no repeat came */
        dmm__heap_quick_flush(h);
        if (h->quick_wasted >= POOL_QUICK_WASTE_LIMIT) {
            h->quick_wasted = 0;
            h->quick_skip = POOL_QUICK_SKIP;
        }
    }
    b = planned_at == 0 ? dmm__heap_bin_find(h, n) : NULL; /* a planned place goes to the slow path */
    if (b != NULL && take(h, b, n, bytes)) {
        *out = (void *)b->addr;
        if (look_due(h)) dmm__follow_look(p, h);
        uintptr_t stock_at = h->stock_end != 0 ? dmm__pool_stock_refill_at(p, h, b) : 0; /* 0 without a stock */
        unlock_by(h, slot);
        dmm__pool_stock_post(p, h, stock_at);
        return DMM_OK;
    }
    unlock_by(h, slot);
    uint64_t waited = dmm__pool_stock_wait(p, h); /* the stock being committed for h may fit */
    uintptr_t stock_at = 0;
    dmm_status s = dmm__pool_malloc_slow(p, h, n, bytes, planned_at, planned, out, &stock_at);
    dmm__pool_stock_post(p, h, stock_at);
    if (waited > 0) {
        dmm_atomic_add_relaxed(&p->stock_wait_ns, waited);
        dmm_atomic_add_relaxed(&p->slow_path_ns, waited);
    }
    return s;
}

static inline uint64_t round_to_align(const dmm_pool *p, size_t bytes) {
    return ((uint64_t)bytes + p->align - 1) & ~(p->align - 1);
}

/* The whole malloc, for every case the hot path leaves (arguments checked, the pool not refusing): the
 * stream's heap found (or made), its lock taken by any path. */
static __attribute__((noinline)) dmm_status malloc_locking(dmm_pool *p, size_t bytes, dmm_stream stream, void **out) {
    uint64_t n = round_to_align(p, bytes);
    pool_heap *h = heap_for(p, stream);
    if (__builtin_expect(h == NULL, 0)) return dmm_last_status();
    heap_lock(h);
    return malloc_rest(p, h, n, bytes, out, NULL);
}

dmm_status dmm_pool_malloc(dmm_pool *p, size_t bytes, dmm_stream stream, void **out) {
    /* bytes - 1 ≥ va_bytes: 0, or more than the VA. va_bytes is a multiple of align: bytes ≤ va_bytes ⇒
     * its rounding neither overflows nor passes it */
    if (__builtin_expect(p == NULL || out == NULL || bytes - 1 >= p->va_bytes, 0))
        return malloc_refused_args(p, bytes, out);
    if (__builtin_expect(dmm_atomic_load_acquire(&p->refusing) != NULL, 0))
        return dmm__pool_malloc_refused(p, bytes, stream); /* cached too: pool.h */
    if (__builtin_expect(tl_cache.pool != p || tl_cache.uid != p->uid || tl_cache.stream != stream, 0))
        return malloc_locking(p, bytes, stream, out);
    pool_heap *h = tl_cache.heap;
    dmm_biased_slot *slot = dmm_biased_lock_try_owner(&h->lock);
    if (__builtin_expect(slot == NULL, 0)) return malloc_locking(p, bytes, stream, out);
    uint64_t n = round_to_align(p, bytes);
    if (__builtin_expect(!quick_hot_fits(h, n), 0)) return malloc_rest(p, h, n, bytes, out, slot);
    pool_block *b = quick_take_hot(h); /* the exact repeat of the last free: no list, bin, split or hash work */
    quick_hit(h, b, bytes); /* (a heap that records never gets here: it has no hot block) */
    dmm_biased_lock_release_slot(slot);
    *out = (void *)b->addr;
    return DMM_OK;
}

static inline void uncount_live(pool_heap *h, const pool_block *b) {
    h->live_blocks--;
    h->requested_bytes -= b->requested;
    dmm_atomic_store_relaxed(&h->live_bytes, dmm_atomic_load_relaxed(&h->live_bytes) - b->size);
}

__attribute__((noinline, cold)) static dmm_status free_refused(const dmm_pool *p, const void *ptr) {
    if (p == NULL || ptr == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_free: pool %p, ptr %p: both are required",
                             (const void *)p, ptr);
    return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                         "dmm_pool_free: %p is not a live block of this pool (never allocated, already freed, or "
                         "not the block's start); nothing changed",
                         ptr);
}

/* Whether LIVE block b, freed on `stream`, parks without further work: on its heap's own stream,
 * parking on, and room to park it (quick_room). */
static inline bool parks_at_once(const pool_heap *h, const pool_block *b, dmm_stream stream) {
    return stream == h->stream && h->quick_skip == 0 && quick_room(h, b);
}

/* The own-stream free of LIVE block b that parks at once (h's lock held). */
static inline void free_park(pool_heap *h, pool_block *b) {
    uncount_live(h, b);
    b->seq = ++h->free_seq;
    h->frees++;
    quick_park(h, b); /* the merge is deferred (types.h, QUICK) */
}

/* free past the quick lists (h's lock held, taken either way; released): a refusal, a block parked
 * after the parked ones merged (the bounds), one too big to park, or a free on another stream.
 * `link`: heap_hash_link's, or NULL (not looked up yet, or nothing found); `slot`: as malloc_rest's. */
static __attribute__((noinline)) dmm_status free_rest(dmm_pool *p, pool_heap *h, pool_block **link, const void *ptr,
                                                      dmm_stream stream, dmm_biased_slot *slot, uint64_t *requested) {
    h->reach_known = NULL; /* the free layout may change from here on (types.h) */
    if (link == NULL) link = heap_hash_link(h, (uintptr_t)ptr);
    pool_block *b = link != NULL ? *link : NULL;
    if (b == NULL || b->kind != BK_LIVE) { /* QUICK: freed already */
        unlock_by(h, slot);
        return free_refused(p, ptr);
    }
    uint64_t asked = b->requested; /* (b may be another's once the lock is gone) */
    uncount_live(h, b);
    if (stream == h->stream) {
        count_free(h, b); /* (frees of a heap that records all come here: quick_cap 0, no hot path) */
        b->seq = ++h->free_seq;
        h->frees++;
        bool parked = false;
        if (h->quick_skip > 0) h->quick_skip--; /* the stream does not repeat: merge it now */
        else parked = quick_push(h, b); /* false: too big to park, or the heap parks nothing (nothing changed) */
        if (!parked) {
            heap_hash_unlink(h, link);
            dmm__heap_make_free(h, b);
        }
        unlock_by(h, slot);
        if (requested != NULL) *requested = asked;
        return DMM_OK;
    }
    heap_hash_unlink(h, link);
    if (dmm__drv_lost(p->drv)) { /* after a loss a cross-stream free is bookkeeping only (pool.h) */
        count_free(h, b);
        b->seq = ++h->free_seq;
        dmm__heap_make_free(h, b);
        h->frees++;
        unlock_by(h, slot);
        dmm__pool_notice_loss(p, "freeing a block on another stream");
        if (requested != NULL) *requested = asked;
        return DMM_OK;
    }
    b->kind = BK_PENDING;
    unlock_by(h, slot);
    dmm_status s = dmm__pool_free_cross(p, h, b, stream);
    if (s == DMM_OK && requested != NULL) *requested = asked;
    return s;
}

/* The whole free of ptr in heap h (which owns its region), for every case the hot path leaves. */
static __attribute__((noinline)) dmm_status free_locking(dmm_pool *p, pool_heap *h, const void *ptr, dmm_stream stream,
                                                         uint64_t *requested) {
    heap_lock(h);
    pool_block **link = heap_hash_link(h, (uintptr_t)ptr);
    pool_block *b = link != NULL ? *link : NULL;
    if (b == NULL || b->kind != BK_LIVE || !parks_at_once(h, b, stream))
        return free_rest(p, h, link, ptr, stream, NULL, requested);
    if (requested != NULL) *requested = b->requested;
    free_park(h, b);
    heap_unlock(h);
    return DMM_OK;
}

/* The one free: `requested` (NULL: not wanted) gets the block's requested bytes when it is accepted. */
static inline __attribute__((always_inline)) dmm_status pool_free(dmm_pool *p, void *ptr, dmm_stream stream,
                                                                  uint64_t *requested) {
    if (__builtin_expect(p == NULL || ptr == NULL, 0)) return free_refused(p, ptr);
    pool_heap *h = heap_of_addr(p, (uintptr_t)ptr);
    if (__builtin_expect(h == NULL, 0)) return free_refused(p, ptr);
    dmm_biased_slot *slot = dmm_biased_lock_try_owner(&h->lock);
    if (__builtin_expect(slot == NULL, 0)) return free_locking(p, h, ptr, stream, requested);
    /* the hot block, taken back by the last malloc, is the repeat's; else the hash says */
    pool_block *b = h->hot, **link = NULL;
    if (__builtin_expect(b == NULL || b->addr != (uintptr_t)ptr || b->kind != BK_LIVE, 0)) {
        link = heap_hash_link(h, (uintptr_t)ptr);
        b = link != NULL ? *link : NULL;
    }
    /* LIVE (a QUICK block was freed already), and it parks at once */
    if (__builtin_expect(b == NULL || b->kind != BK_LIVE || !parks_at_once(h, b, stream), 0))
        return free_rest(p, h, link, ptr, stream, slot, requested);
    if (requested != NULL) *requested = b->requested;
    free_park(h, b);
    dmm_biased_lock_release_slot(slot);
    return DMM_OK;
}

dmm_status dmm_pool_free(dmm_pool *p, void *ptr, dmm_stream stream) { return pool_free(p, ptr, stream, NULL); }

dmm_status dmm_pool_free_requested(dmm_pool *p, void *ptr, dmm_stream stream, uint64_t *requested) {
    return pool_free(p, ptr, stream, requested);
}

dmm_status dmm_pool_block_size(dmm_pool *p, const void *ptr, size_t *bytes) {
    if (p == NULL || ptr == NULL || bytes == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_block_size: pool, ptr and bytes are required");
    pool_heap *h = heap_of_addr(p, (uintptr_t)ptr);
    if (h != NULL) {
        heap_lock(h);
        pool_block *b = dmm__heap_hash_find(h, (uintptr_t)ptr);
        if (b != NULL && b->kind != BK_LIVE) b = NULL; /* QUICK: freed */
        if (b != NULL) *bytes = (size_t)b->size;
        heap_unlock(h);
        if (b != NULL) return DMM_OK;
    }
    return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm_pool_block_size: %p is not a live block of this pool", ptr);
}

/* The whole chunks under [lo, hi) (addresses of committed memory): the first one's start and the last
 * one's end; false when a quantum there lies in no chunk. Under the lock of the heap that owns them. */
static bool chunks_covering(const dmm_pool *p, uintptr_t lo, uintptr_t hi, uintptr_t *start, uintptr_t *end) {
    size_t q0 = qidx(p, lo), q1 = qidx(p, hi - 1), s = q0;
    size_t back = (size_t)(DMM_POOL_WARM_HANDLE_BYTES / p->chunk); /* the longest chunk there is */
    while (p->clen[s] == 0 && s > 0 && q0 - s < back) s--;
    if (p->clen[s] == 0 || s + p->clen[s] <= q0) return false;
    size_t e = s;
    while (e <= q1) {
        if (p->clen[e] == 0) return false;
        e += p->clen[e];
    }
    *start = p->base + (uintptr_t)(s * p->chunk);
    *end = p->base + (uintptr_t)(e * p->chunk);
    return true;
}

dmm_status dmm_pool_export_block(dmm_pool *p, const void *ptr, dmm_access access, struct dmm_export *out,
                                 uint64_t *lead) {
    if (p == NULL || ptr == NULL || out == NULL || lead == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_export_block: pool, ptr, out and lead are required");
    pool_heap *h = heap_of_addr(p, (uintptr_t)ptr);
    if (h == NULL)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm_pool_export_block: %p is not a live block of this pool",
                             ptr);
    heap_lock(h);
    pool_block *b = dmm__heap_hash_find(h, (uintptr_t)ptr);
    uintptr_t start = 0, end = 0;
    dmm_status s;
    if (b == NULL || b->kind != BK_LIVE)
        s = dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm_pool_export_block: %p is not a live block of this pool",
                          ptr);
    else if (!chunks_covering(p, b->addr, b->addr + b->size, &start, &end))
        s = dmm_error_set(DMM_ERR_UNSUPPORTED, "dmm_pool_export_block: the live block at %p (%llu bytes) lies outside "
                                            "the pool's chunks; nothing was exported", ptr,
                          (unsigned long long)b->size);
    else
        s = dmm_export_range(p->mech, &p->va, (dmm_range){(size_t)(start - p->base), (size_t)(end - start)}, access,
                             out);
    heap_unlock(h);
    if (s == DMM_OK) *lead = (uint64_t)((uintptr_t)ptr - start);
    return s;
}

dmm_status dmm_pool_block_stream(dmm_pool *p, const void *ptr, dmm_stream *stream) {
    if (p == NULL || ptr == NULL || stream == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_block_stream: pool, ptr and stream are required");
    pool_heap *h = heap_of_addr(p, (uintptr_t)ptr);
    if (h != NULL) {
        heap_lock(h);
        pool_block *b = dmm__heap_hash_find(h, (uintptr_t)ptr);
        bool live = b != NULL && b->kind == BK_LIVE;
        heap_unlock(h);
        if (live) {
            *stream = h->stream;
            return DMM_OK;
        }
    }
    return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm_pool_block_stream: %p is not a live block of this pool", ptr);
}

/* ---- destroy ---- */
/* Frees the pool's host memory; `driver`: also destroys its events first (never once the device is
 * lost: the context took them). */
static void pool_free_all(dmm_pool *p, bool driver) {
    dmm__pool_stock_stop(p);
    dmm__planner_stop(p);
    if (driver) dmm__pool_destroy_events(p);
    pool_heap *h = heaps_head(p);
    while (h != NULL) {
        pool_heap *n = heap_next(h);
        dmm__follow_fini(h);
        dmm__heap_fini(h);
        free(h);
        h = n;
    }
    free(p->events);
    free(p->owner);
    free(p->clen);
    dmm__pool_layout_fini(p);
    dmm_lock_destroy(&p->lock);
    free(p);
}

/* Destroy once the device is lost: the pool goes, without a driver call, once its memory is no longer
 * the mechanism's to give back: the context was confirmed torn down (dmm__drv_terminated: over an
 * arena, dmm_arena_confirm_context_terminated discharged the VA and chunks), or the mechanism's release
 * of the VA did not fail (asked once per call, unless `released`: this call asked already; an arena
 * refuses it until the confirmation, without a driver call). */
static dmm_status destroy_lost(dmm_pool *p, bool released) {
    bool gone = dmm__drv_terminated(p->drv);
    if (!gone && !released) {
        dmm_release_outcome o = dmm_mechanism_release(p->mech, &p->va);
        gone = dmm_release_state_of(&o) != DMM_RELEASE_FAILED;
    }
    if (!gone) /* the last error is the mechanism's refusal of the release */
        return dmm__error_wrap(DMM_ERR_DEVICE_LOST,
                               "dmm_pool_destroy: the pool's device was lost (first seen at %s) and its memory is still "
                               "the mechanism's; nothing changed: tear the context down, call "
                               "dmm_arena_confirm_context_terminated() on the arena, then destroy the pool again",
                               dmm__drv_lost_why(p->drv));
    uint64_t live = 0, pend = 0;
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        heap_lock(h);
        live += h->live_blocks;
        pend += h->npending;
        heap_unlock(h);
    }
    if (live > 0 || pend > 0)
        dmm_log(DMM_LOG_WARN,
                 "dmm_pool_destroy after a confirmed device loss: %llu live block(s) and %llu cross-stream free(s) "
                 "were forgotten (their memory went with the context)",
                 (unsigned long long)live, (unsigned long long)pend);
    pool_free_all(p, false);
    dmm_clear_error();
    return DMM_OK;
}

/* Destroy's fallback for heaps whose fence cannot be recorded (their stream was destroyed after frees
 * on it: its queued work still runs, and no event can follow it there): once the device is
 * synchronized, every free so far is behind completed work. Nothing is freed during a destroy, so
 * every heap's frees are covered. DMM_OK, or why not (nothing changed). */
static dmm_status fence_by_synchronizing(dmm_pool *p, pool_heap *gone) {
    dmm_status s = dmm__drv_device_synchronize(p->drv);
    if (s != DMM_OK)
        return dmm__error_wrap(s, "dmm_pool_destroy: the heap of stream %p has frees after its last fence, and no fence "
                                  "can be recorded on its stream (was it destroyed?); synchronizing the device instead "
                                  "failed, so the pool stays (nothing changed): synchronize the device and retry",
                               gone->stream);
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        dmm__pool_poll(p, h); /* first: cross-stream frees now complete become free blocks (free_seq moves) */
        heap_lock(h);
        if (h->fence_state == FENCE_IDLE) h->safe_seq = h->free_seq;
        heap_unlock(h);
        dmm__pool_poll(p, h); /* then the old places of aliased chunks that the new safe_seq covers */
    }
    return DMM_OK;
}

dmm_status dmm_pool_destroy(dmm_pool *p) {
    if (p == NULL) return DMM_OK;
    dmm__pool_stock_wait(p, NULL); /* no stock growth in flight from here on (none is posted: no malloc) */
    if (dmm__pool_lost(p, "entering dmm_pool_destroy")) return destroy_lost(p, false);
    /* first the live blocks of every heap: a pool that holds any is refused before anything is tried */
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        dmm__pool_poll(p, h);
        dmm__pool_poll(p, h); /* a fence recorded by the first poll may be complete at once */
        if (dmm__pool_lost(p, "entering dmm_pool_destroy")) return destroy_lost(p, false);
        heap_lock(h);
        dmm__heap_quick_flush(h); /* parked blocks are free; a refused destroy leaves them merged */
        uint64_t live = h->live_blocks;
        heap_unlock(h);
        if (live > 0)
            return dmm_error_set(DMM_ERR_BUSY,
                                 "dmm_pool_destroy: stream %p still has %llu live block(s); free them first (nothing "
                                 "changed)",
                                 h->stream, (unsigned long long)live);
    }
    /* then the frees' events */
    bool synchronized = false;
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        heap_lock(h);
        uint64_t pend = h->npending;
        bool fence = h->safe_seq < h->free_seq, unrecorded = fence && h->fence_state == FENCE_IDLE;
        heap_unlock(h);
        if (unrecorded && !synchronized) { /* two polls could not record its fence */
            dmm_status s = fence_by_synchronizing(p, h);
            if (s != DMM_OK) return dmm__pool_lost(p, "synchronizing the device") ? destroy_lost(p, false) : s;
            synchronized = true; /* (once: it covers every heap, the ones after this one too) */
            heap_lock(h);
            fence = h->safe_seq < h->free_seq;
            pend = h->npending;
            heap_unlock(h);
        }
        if (pend > 0 || fence)
            return dmm_error_set(DMM_ERR_BUSY,
                                 "dmm_pool_destroy: the heap of stream %p waits for %s (%llu cross-stream free(s)); "
                                 "synchronize the streams and retry (nothing changed)",
                                 h->stream, fence ? "the event after its last free" : "events of frees on other streams",
                                 (unsigned long long)pend);
    }
    dmm_release_outcome o = dmm_mechanism_release(p->mech, &p->va);
    dmm_release_state state = dmm_release_state_of(&o);
    if (state == DMM_RELEASE_FAILED && o.failure == DMM_ERR_DEVICE_LOST) {
        dmm__pool_notice_loss(p, "releasing the pool's VA and chunks");
        return destroy_lost(p, true);
    }
    if (state == DMM_RELEASE_FAILED)
        return dmm__error_wrap(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER,
                               "dmm_pool_destroy: releasing the pool's VA and chunks failed and nothing changed; the "
                               "pool is intact, retry");
    /* the release's sentence must outlive the event destroys below (a failed one sets its own error) */
    dmm_error_kept cause = {0};
    dmm__error_keep(&cause, dmm_last_status());
    /* a loss the release met half-way: its events went with the context (the mechanism reported it in
     * the outcome; the driver makes no more calls, nor do we) */
    if (o.failure == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "releasing the pool's VA and chunks");
    pool_free_all(p, !dmm__drv_lost(p->drv));
    if (state == DMM_RELEASE_QUARANTINED)
        return dmm_error_set(DMM_ERR_QUARANTINED,
                             "dmm_pool_destroy: the pool is gone, but the mechanism quarantined part of its memory "
                             "(%llu bytes unmapped, %llu still owned): %s",
                             (unsigned long long)o.unmapped_bytes, (unsigned long long)o.residual_owned_bytes,
                             dmm__error_kept_text(&cause));
    dmm_clear_error();
    return DMM_OK;
}

/* ---- trim and empty_cache (regions.c does them), once the stock thread is still ---- */

dmm_status dmm_pool_trim(dmm_pool *p, uint64_t target, uint64_t *released) {
    if (p != NULL) dmm__pool_stock_wait(p, NULL);
    return dmm__pool_trim(p, target, released);
}

dmm_status dmm_pool_empty_cache(dmm_pool *p, uint64_t *released) {
    if (p != NULL) dmm__pool_stock_wait(p, NULL);
    return dmm__pool_empty_cache(p, released);
}

dmm_status dmm_pool_stock_sync(dmm_pool *p) {
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_stock_sync: the pool is NULL");
    if (!dmm__pool_stock_drain(p))
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_pool_stock_sync: the stock thread was still committing after 20 ms; call again "
                             "(not from a budget callback: the stock thread may be the one running it)");
    return DMM_OK;
}

dmm_status dmm_pool_plan_sync(dmm_pool *p) {
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_plan_sync: the pool is NULL");
    return dmm__planner_sync(p);
}

/* ---- warm start (growth.c does the growth) ---- */

dmm_status dmm_pool_warm(dmm_pool *p, dmm_stream stream, uint64_t target_bytes, uint64_t handle_bytes,
                         uint64_t *committed) {
    if (committed != NULL) *committed = 0;
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_warm: the pool is NULL");
    if (target_bytes > p->va_bytes)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_warm: a target of %llu bytes is more than the pool's VA (%llu bytes); "
                             "create the pool with a larger va_bytes (nothing changed)",
                             (unsigned long long)target_bytes, (unsigned long long)p->va_bytes);
    if (handle_bytes > DMM_POOL_WARM_HANDLE_BYTES)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_warm: handles of %llu bytes are more than the %llu an arena makes by default; "
                             "pass 0 or less (nothing changed)",
                             (unsigned long long)handle_bytes, (unsigned long long)DMM_POOL_WARM_HANDLE_BYTES);
    uint64_t most = handle_bytes ? handle_bytes : DMM_POOL_WARM_HANDLE_BYTES;
    most = most < p->chunk ? p->chunk : most / p->chunk * p->chunk;
    uint64_t target = (target_bytes + p->chunk - 1) / p->chunk * p->chunk; /* ≤ va_bytes: a multiple of chunk */
    if (dmm_atomic_load_acquire(&p->refusing) != NULL)
        return dmm__pool_malloc_refused(p, (size_t)target, stream);
    pool_heap *h = heap_for(p, stream);
    if (h == NULL) return dmm_last_status();
    uint64_t before = committed_once(p);
    dmm_status s = DMM_OK;
    /* each growth commits unmapped VA only; another thread may trim meanwhile: grow for what is still missing */
    for (int round = 0; round < 4 && s == DMM_OK; round++) {
        uint64_t now = committed_once(p);
        if (now >= target) break;
        s = dmm__pool_warm_grow(p, h, target - now, most);
    }
    uint64_t after = committed_once(p);
    if (committed != NULL) *committed = after > before ? after - before : 0;
    return s;
}

/* ---- warm layout (layout.c commits it; the heap's VA is extended here, as a growth would) ---- */

dmm_status dmm_pool_warm_layout(dmm_pool *p, dmm_stream stream, const dmm_pool_span *spans, size_t count,
                                uint64_t *committed) {
    if (committed != NULL) *committed = 0;
    if (p == NULL || (spans == NULL && count > 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_warm_layout: pool %p, spans %p (count %zu): a pool is required, and spans "
                             "when count is above 0",
                             (void *)p, (const void *)spans, count);
    uint64_t lo = 0, end = 0;
    dmm_status s = dmm__pool_layout_check(p, spans, count, UINT32_MAX, &lo, &end); /* every span checked */
    if (s != DMM_OK || count == 0) return s;
    if (dmm_atomic_load_acquire(&p->refusing) != NULL)
        return dmm__pool_malloc_refused(p, (size_t)p->chunk, stream);
    pool_heap *h = heap_for(p, stream);
    if (h == NULL) return dmm_last_status();
    (void)dmm__pool_layout_check(p, spans, count, h->ordinal, &lo, &end); /* where this heap's spans lie */
    if (end == 0) return DMM_OK; /* none of them its heap's */
    /* VA up to its last span's end: the run that holds its lowest span grows over them, as the first
     * run's growths made it grow (a heap with no VA yet takes a new run, where its first growth would) */
    heap_lock(h);
    size_t run = SIZE_MAX;
    for (size_t r = 0; r < h->nruns && run == SIZE_MAX; r++)
        if (h->runs[r].lo <= p->base + lo && p->base + lo < h->runs[r].hi) run = r;
    uintptr_t have = run != SIZE_MAX ? h->runs[run].hi
                     : h->nruns == 0 ? p->base      /* a new run, from the lowest free VA as a first growth's */
                                     : p->base + end; /* its runs lie elsewhere: only the spans in them count */
    if (p->base + end > have) {
        size_t regions = (size_t)((p->base + end - have + p->region - 1) >> p->region_shift);
        if (!dmm__pool_grow_va(p, h, regions, run)) dmm_clear_error(); /* no VA there: only the spans it holds */
    }
    heap_unlock(h);
    return dmm__pool_layout_warm(p, h, spans, count, committed);
}
