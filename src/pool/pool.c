/* src/pool/pool.c — the caching allocator (DESIGN §4.9; contract: include/dmm/pool.h).
 *
 * What it owns: one VA-only allocation of a mechanism with virtual backing, the heaps (one per
 * stream) that tile it with blocks, and the decisions of when physical chunks are committed,
 * moved and decommitted.
 *
 * The idea. VA is plentiful and physical memory is not, and the two are decoupled: a heap places
 * blocks by best fit in its own VA, and only the chunks that blocks touch need physical backing.
 * A malloc that finds no mapped free block big enough plans a growth: the fewest new chunks that
 * make a fit, next to a free block when one borders unmapped VA (so free blocks coalesce across
 * chunk boundaries). If committing them would take the pool's mapped memory above its retention
 * limit — (1 + retain_permille/1000) × the highest live bytes seen so far — it first takes whole
 * free chunks whose fence has completed (from this heap, then from others) and moves them:
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
 * arena maps the same handles at the new place now (dmm_arena_alias), the old place becomes
 * ALIASED (mapped, out of use) and heap_poll decommits it once a completed fence covers its last
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
 * Invariants (see pool_internal.h for the heap's): p.committed = Σ heap.committed = Σ chunk bytes
 * (clen) once no growth or trim is in flight; a chunk is committed or decommitted only while its block is COMMITTING or
 * DECOMMITTING, by the one thread that carved it, outside every heap lock; a DECOMMITTING chunk came
 * from a FREE block with seq ≤ safe_seq of its heap (its last free is behind a completed fence), or
 * is an ALIASED old place whose seq ≤ safe_seq; an aliased chunk came from a FREE block of the heap
 * whose growth it joined; p.aliased_bytes = Σ ALIASED sizes.
 *
 * Device loss (pool.h, "Device loss"). p.lost goes from 0 to 1 once, when a call of the pool reports
 * DMM_ERR_DEVICE_LOST: one of its own driver calls (events), a mechanism call made for it, or, over an
 * arena, the arena's state asked before a slow path. From then on every path that would reach the
 * driver stops at a check of p.lost (heap_poll, heap_fence, heap_reap_aliased, decommit_one,
 * commit_one, alias_one, event_put, free_cross, and the entry of malloc's slow path, trim, empty_cache
 * and destroy), so the pool makes no driver call, directly or through the mechanism. The bookkeeping
 * stays exact (a free after the loss is a bookkeeping free); destroy waits for the caller's
 * confirmation on the arena and then frees the host memory without a driver call. A loss the pool
 * saw itself is passed to the arena (it stops calling the driver too, and accepts the confirmation).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmm/arena.h"
#include "core/json.h"
#include "mech/arena_loss.h"
#include "pool/pool_internal.h"

#define GIB ((uint64_t)1 << 30)

static _Atomic uint64_t pool_uids = 1;

typedef struct tl_heap_cache {
    const dmm_pool *pool;
    uint64_t uid;
    dmm_stream stream;
    pheap *heap;
} tl_heap_cache;
static _Thread_local tl_heap_cache tl_cache;

/* ---- small helpers ---- */
static inline uint64_t ld(const _Atomic uint64_t *x) { return atomic_load_explicit(x, memory_order_relaxed); }
static inline void st(_Atomic uint64_t *x, uint64_t v) { atomic_store_explicit(x, v, memory_order_relaxed); }
static inline void add(_Atomic uint64_t *x, uint64_t v) { atomic_fetch_add_explicit(x, v, memory_order_relaxed); }
static inline void sub(_Atomic uint64_t *x, uint64_t v) { atomic_fetch_sub_explicit(x, v, memory_order_relaxed); }
static inline void max_into(_Atomic uint64_t *x, uint64_t v) {
    uint64_t cur = ld(x);
    while (v > cur && !atomic_compare_exchange_weak_explicit(x, &cur, v, memory_order_relaxed, memory_order_relaxed)) {
    }
}
static inline pheap *heaps_head(const dmm_pool *p) {
    return atomic_load_explicit((pheap *_Atomic *)&p->heaps, memory_order_acquire);
}
static inline pheap *heap_next(const pheap *h) {
    return atomic_load_explicit((pheap *_Atomic *)&h->next_heap, memory_order_acquire);
}
static inline uint64_t align_down_c(const dmm_pool *p, uint64_t x) { return x & ~(p->chunk - 1); }
static inline uint64_t align_up_c(const dmm_pool *p, uint64_t x) { return (x + p->chunk - 1) & ~(p->chunk - 1); }

static void committed_add(dmm_pool *p, uint64_t v) {
    uint64_t now = atomic_fetch_add_explicit(&p->committed, v, memory_order_relaxed) + v;
    add(&p->committed_total, v);
    max_into(&p->committed_peak, now);
}

/* ---- device loss ---- */
static inline bool pool_lost(const dmm_pool *p) { return dmm_atomic_load_acquire(&p->lost) != 0; }

/* Records that `what` (a call the pool made, or the mechanism made for it) reported DMM_ERR_DEVICE_LOST
 * (the thread's last error is its sentence, and stays): from now on the pool makes no driver call.
 * Over an arena the loss is the arena's too. Call it with no pool lock held (it takes p->lock, then
 * the arena's). */
static void pool_note_lost(dmm_pool *p, const char *what) {
    char why[sizeof p->lost_why];
    snprintf(why, sizeof why, "%s: %s", what, dmm_last_error());
    bool first = false;
    dmm_lock_acquire(&p->lock);
    if (!pool_lost(p)) {
        memcpy(p->lost_why, why, sizeof why);
        dmm_atomic_store_release(&p->lost, 1);
        first = true;
    }
    dmm_lock_release(&p->lock);
    if (p->is_arena && dmm__arena_device_loss(p->mech, true, NULL, NULL) != DMM_OK) dmm_clear_error();
    if (first)
        dmm__log(DMM_LOG_WARN, "pool %p: the device was lost (%s); the pool makes no more driver calls, and frees only "
                               "its bookkeeping",
                 (void *)p, why);
}

/* Whether the device is lost: the pool knows it, or (over an arena) the arena saw it, e.g. through
 * another of its users. Asked at the entry of the slow paths, so that no driver call follows a loss
 * someone else saw. No driver call; takes the arena's lock (call it with no pool lock held). */
static bool pool_check_lost(dmm_pool *p) {
    if (pool_lost(p)) return true;
    if (!p->is_arena) return false;
    bool lost = false;
    if (dmm__arena_device_loss(p->mech, false, &lost, NULL) != DMM_OK) {
        dmm_clear_error();
        return false;
    }
    if (lost) {
        dmm_error_set(DMM_ERR_DEVICE_LOST, "the arena under the pool lost its device (a driver call it made reported a "
                                           "sticky context error)");
        pool_note_lost(p, "the pool's arena");
    }
    return lost;
}

/* The refusal of `op` once the device is lost: what to do about it. */
static dmm_status pool_lost_error(dmm_pool *p, const char *op) {
    return dmm_error_set(DMM_ERR_DEVICE_LOST,
                         "%s: refused without a driver call: the pool's device was lost (first seen at %s); its memory "
                         "is gone and the pool serves nothing more. Free what is live if you can (frees are accepted, "
                         "bookkeeping only), tear the context down, call dmm_arena_confirm_context_terminated() on the "
                         "arena, then dmm_pool_destroy()",
                         op, p->lost_why);
}

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
    bool arena_lost = false, is_arena = dmm__arena_device_loss(mech, false, &arena_lost, NULL) == DMM_OK;
    dmm_clear_error();
    if (arena_lost)
        return dmm_error_set(DMM_ERR_DEVICE_LOST,
                             "dmm_pool_create: the arena lost its device (a driver call reported a sticky context "
                             "error); no pool can be made on it: tear the context down, confirm with "
                             "dmm_arena_confirm_context_terminated() and make a new arena on a working device");
    if (drv->ops == NULL || drv->ops->granularity == NULL || drv->ops->event_create == NULL ||
        drv->ops->event_record == NULL || drv->ops->event_query == NULL || drv->ops->event_destroy == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_pool_create: driver '%s' lacks granularity or events; the pool needs both "
                             "(to size chunks and to gate reuse behind streams)",
                             drv->ops != NULL && drv->ops->name != NULL ? drv->ops->name : "?");
    size_t gran = 0;
    dmm_status s = drv->ops->granularity(drv, &gran);
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
                             "dmm_pool_create: max_chunk_bytes %llu must be a multiple of chunk_bytes %llu",
                             (unsigned long long)max_chunk, (unsigned long long)chunk);
    uint64_t align = c.block_align ? c.block_align : 512;
    if (!dmm_is_pow2(align) || align < 64 || align > chunk)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: block_align %llu must be a power of two from 64 to chunk_bytes "
                             "(%llu)",
                             (unsigned long long)align, (unsigned long long)chunk);
    uint64_t va = c.va_bytes;
    if (va == 0) {
        uintptr_t rva = 0;
        uint64_t rbytes = 0;
        if (dmm_mechanism_reservation(mech, &rva, &rbytes) == DMM_OK && rbytes > 0) va = rbytes / 2;
        else va = 64 * GIB;
        dmm_clear_error();
    }
    uint64_t region = c.region_bytes;
    if (region == 0) {
        region = chunk;
        while (region * 2 <= va / 64) region *= 2;
    }
    if (!dmm_is_pow2(region) || region < chunk || va < region)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_create: region_bytes %llu must be a power of two, at least chunk_bytes "
                             "(%llu) and at most va_bytes (%llu)",
                             (unsigned long long)region, (unsigned long long)chunk, (unsigned long long)va);
    va -= va % region;

    dmm_pool *p = calloc(1, sizeof *p);
    if (p == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_create: out of host memory");
    p->mech = mech;
    p->drv = drv;
    p->va_bytes = va;
    p->chunk = chunk;
    p->max_chunk = max_chunk;
    p->region = region;
    p->region_shift = (unsigned)__builtin_ctzll(region);
    p->nregions = (size_t)(va / region);
    p->align = align;
    p->align_shift = (unsigned)__builtin_ctzll(align);
    p->retain_permille = c.retain_permille ? c.retain_permille : 20;
    p->can_alias = !c.no_alias && dmm_mechanism_has_slot(mech, "alias"); /* a capability, not a probe */
    p->is_arena = is_arena;
    dmm_clear_error();
    p->uid = atomic_fetch_add_explicit(&pool_uids, 1, memory_order_relaxed);
    p->owner = calloc(p->nregions, sizeof *p->owner);
    p->clen = calloc((size_t)(va / chunk), sizeof *p->clen); /* untouched pages cost nothing */
    if (p->owner == NULL || p->clen == NULL) {
        free(p->owner);
        free(p->clen);
        size_t nr = p->nregions;
        free(p);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_create: out of host memory for %zu regions", nr);
    }
    s = dmm_mechanism_allocate_committed(mech, (size_t)va, (size_t)chunk, NULL, 0, &p->va);
    if (s != DMM_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        free(p->owner);
        free(p->clen);
        free(p);
        return dmm_error_set(s,
                             "dmm_pool_create: reserving %llu bytes of VA from mechanism '%s' failed (%s); "
                             "configure a smaller va_bytes or a larger reservation: %s",
                             (unsigned long long)va, dmm_mechanism_name(mech), dmm_status_str(s), why);
    }
    p->base = (uintptr_t)p->va.ptr;
    dmm_lock_init(&p->lock);
    *out = p;
    return DMM_OK;
}

/* The heap of `stream`, created on first use. */
static pheap *heap_for(dmm_pool *p, dmm_stream stream) {
    if (tl_cache.pool == p && tl_cache.uid == p->uid && tl_cache.stream == stream) return tl_cache.heap;
    pheap *h;
    for (h = heaps_head(p); h != NULL; h = heap_next(h))
        if (h->stream == stream) break;
    if (h == NULL) {
        dmm_lock_acquire(&p->lock);
        for (h = heaps_head(p); h != NULL; h = heap_next(h))
            if (h->stream == stream) break;
        if (h == NULL) {
            h = aligned_alloc(64, (sizeof *h + 63) / 64 * 64);
            if (h == NULL || !dmm__heap_init(h, p, stream)) {
                free(h);
                dmm_lock_release(&p->lock);
                dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool: out of host memory creating the heap of stream %p",
                              stream);
                return NULL;
            }
            atomic_store_explicit(&h->next_heap, heaps_head(p), memory_order_relaxed);
            atomic_store_explicit(&p->heaps, h, memory_order_release);
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

/* The heap whose VA holds `addr`, or NULL. */
static inline pheap *heap_of_addr(const dmm_pool *p, uintptr_t addr) {
    if (addr < p->base || addr - p->base >= p->va_bytes) return NULL;
    return atomic_load_explicit(&p->owner[(addr - p->base) >> p->region_shift], memory_order_acquire);
}

/* ---- events ---- */
static dmm_status event_get(dmm_pool *p, dmm_event *ev) {
    dmm_lock_acquire(&p->lock);
    if (p->nevents > 0) {
        *ev = p->events[--p->nevents];
        dmm_lock_release(&p->lock);
        return DMM_OK;
    }
    dmm_lock_release(&p->lock);
    return p->drv->ops->event_create(p->drv, ev);
}

/* Keeps a completed (or never recorded) event for reuse. Called under no heap lock: when the free
 * list cannot grow it destroys the event, a driver call, after dropping the pool lock. */
static void event_put(dmm_pool *p, dmm_event ev) {
    dmm_lock_acquire(&p->lock);
    if (p->nevents == p->capevents) {
        size_t nc = p->capevents ? p->capevents * 2 : 16;
        dmm_event *nv = realloc(p->events, nc * sizeof *nv);
        if (nv == NULL) {
            dmm_lock_release(&p->lock);
            if (!pool_lost(p)) p->drv->ops->event_destroy(p->drv, ev); /* once lost, the context took it */
            return;
        }
        p->events = nv;
        p->capevents = nc;
    }
    p->events[p->nevents++] = ev;
    dmm_lock_release(&p->lock);
}

static void heap_fence(dmm_pool *p, pheap *h);
static void heap_reap_aliased(dmm_pool *p, pheap *h);

/* Polls the heap's pending cross-stream frees, then its fence, recording a new fence when frees
 * happened since the last one (the frees that completed pending blocks included), then decommits the
 * old places of aliased chunks that a completed fence covers. Driver calls run outside the heap
 * lock: the pending list (and the old places) are taken out while they run. Never waits. */
static void heap_poll(dmm_pool *p, pheap *h) {
    if (pool_lost(p)) return; /* nothing completes any more, and nothing is asked */
    /* 1: cross-stream frees whose event completed become free blocks */
    dmm_lock_acquire(&h->lock);
    pblock *list = h->pending;
    h->pending = NULL;
    h->npending = 0;
    dmm_lock_release(&h->lock);
    if (list != NULL) {
        for (pblock *b = list; b != NULL; b = b->lnext) {
            dmm_status q = pool_lost(p) ? DMM_ERR_DEVICE_LOST : p->drv->ops->event_query(p->drv, b->ev);
            b->requested = q == DMM_OK; /* a PENDING block's `requested` is free to hold the answer */
            if (q == DMM_ERR_DEVICE_LOST && !pool_lost(p)) pool_note_lost(p, "pool: the query of a cross-stream free's event");
            else if (q != DMM_OK) add(&p->events_pending, 1);
        }
        dmm_clear_error();
        /* Completed events go back to the free list before the heap lock is taken: event_put may
         * have to destroy one (no room for it), a driver call that must not run under the heap lock.
         * The blocks are held by this poller, so nobody else reads their ev meanwhile. */
        for (pblock *b = list; b != NULL; b = b->lnext)
            if (b->requested) {
                event_put(p, b->ev);
                b->ev = NULL;
            }
        dmm_lock_acquire(&h->lock);
        pblock *b = list;
        while (b != NULL) {
            pblock *n = b->lnext;
            if (b->requested) {
                b->requested = 0;
                b->lnext = b->lprev = NULL;
                b->seq = ++h->free_seq;
                dmm__heap_make_free(h, b);
                sub(&p->pending_now, 1);
            } else {
                dmm__heap_list_push(&h->pending, b);
                h->npending++;
            }
            b = n;
        }
        dmm_lock_release(&h->lock);
    }
    heap_fence(p, h);      /* 2 */
    heap_reap_aliased(p, h); /* 3 */
}

/* The heap's fence: records one when frees happened since the last, or queries the recorded one; a
 * recorded fence found complete is followed at once by the next (when frees happened since), so
 * that every poll moves safe_seq on, not every second one. */
static void heap_fence(dmm_pool *p, pheap *h) {
    for (int round = 0; round < 2 && !pool_lost(p); round++) {
        enum { NONE, RECORD, QUERY } action = NONE;
        uint64_t s = 0;
        dmm_lock_acquire(&h->lock);
        if (h->fence_state == FENCE_IDLE && h->safe_seq < h->free_seq) {
            action = RECORD;
            s = h->free_seq;
            h->fence_state = FENCE_BUSY;
        } else if (h->fence_state == FENCE_RECORDED) {
            action = QUERY;
            s = h->fence_seq;
            h->fence_state = FENCE_BUSY;
        }
        dmm_lock_release(&h->lock);
        if (action == NONE) return;
        dmm_status fq = DMM_ERR_BUSY;
        bool recorded = action == QUERY;
        if (action == RECORD) {
            dmm_status rs = DMM_OK;
            if (h->fence == NULL) rs = p->drv->ops->event_create(p->drv, &h->fence);
            if (rs == DMM_OK) rs = p->drv->ops->event_record(p->drv, h->fence, h->stream);
            if (rs == DMM_OK) {
                recorded = true;
                add(&p->events_recorded, 1);
            } else if (rs == DMM_ERR_DEVICE_LOST) {
                pool_note_lost(p, "pool: recording a stream's fence");
            }
        }
        if (recorded && !pool_lost(p)) {
            fq = p->drv->ops->event_query(p->drv, h->fence);
            if (fq == DMM_ERR_DEVICE_LOST) pool_note_lost(p, "pool: the query of a stream's fence");
            else if (fq != DMM_OK) add(&p->events_pending, 1);
        }
        dmm_clear_error();
        dmm_lock_acquire(&h->lock);
        if (!recorded) h->fence_state = FENCE_IDLE; /* the record failed: try again next time */
        else if (fq == DMM_OK) {
            if (s > h->safe_seq) h->safe_seq = s;
            h->fence_state = FENCE_IDLE;
        } else {
            h->fence_seq = s;
            h->fence_state = FENCE_RECORDED;
        }
        dmm_lock_release(&h->lock);
        if (action != QUERY || fq != DMM_OK) return; /* only a completed query is followed by a record */
    }
}

/* ---- regions ---- */
/* Gives back the regions of g's runs that hold nothing but one UNMAPPED block (under g's lock; takes
 * the pool lock). Returns the number of regions given back. */
static size_t heap_shed_empty_runs(dmm_pool *p, pheap *g) {
    size_t freed = 0;
    for (size_t i = 0; i < g->nruns;) {
        prun *r = &g->runs[i];
        pblock *b = r->first;
        if (b->kind != BK_UNMAPPED || b->next != NULL) {
            i++;
            continue;
        }
        dmm__heap_list_remove(&g->unmapped, b);
        dmm__heap_block_put(g, b);
        size_t r0 = (size_t)((r->lo - p->base) >> p->region_shift), n = (size_t)((r->hi - r->lo) >> p->region_shift);
        dmm_lock_acquire(&p->lock);
        for (size_t k = 0; k < n; k++) atomic_store_explicit(&p->owner[r0 + k], NULL, memory_order_release);
        dmm_lock_release(&p->lock);
        freed += n;
        g->runs[i] = g->runs[--g->nruns];
    }
    return freed;
}

/* Gives heap h `n` more contiguous regions (under h's lock; takes the pool lock). Prefers the regions
 * right after one of h's runs (the run grows), else the lowest free run of regions that leaves the
 * most room after other heaps. False when the VA is exhausted (error set). */
static bool heap_grow_va(dmm_pool *p, pheap *h, size_t n, size_t prefer) {
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
            while (k < n && r0 + k < p->nregions && atomic_load_explicit(&p->owner[r0 + k], memory_order_relaxed) == NULL)
                k++;
            if (k == n) {
                at = r0;
                extend = &h->runs[prefer];
            }
        }
        for (size_t i = 0; i < h->nruns && at == p->nregions; i++) {
            size_t r0 = (size_t)((h->runs[i].hi - p->base) >> p->region_shift);
            size_t k = 0;
            while (k < n && r0 + k < p->nregions && atomic_load_explicit(&p->owner[r0 + k], memory_order_relaxed) == NULL) k++;
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
                if (atomic_load_explicit(&p->owner[i], memory_order_relaxed) != NULL) {
                    i++;
                    continue;
                }
                size_t j = i;
                while (j < p->nregions && atomic_load_explicit(&p->owner[j], memory_order_relaxed) == NULL) j++;
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
            for (pheap *g = heaps_head(p); g != NULL; g = heap_next(g)) {
                if (g == h || pthread_mutex_trylock(&g->lock.m) != 0) continue;
                shed += heap_shed_empty_runs(p, g);
                dmm_lock_release(&g->lock);
            }
            if (shed > 0) continue;
            dmm_lock_acquire(&p->lock);
        }
        if (at == p->nregions) {
            size_t used = 0;
            for (size_t i = 0; i < p->nregions; i++) used += atomic_load_explicit(&p->owner[i], memory_order_relaxed) != NULL;
            dmm_lock_release(&p->lock);
            dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                          "pool: the VA is exhausted: stream %p needs %zu more region(s) of %llu bytes and %zu of %zu are "
                          "taken by streams that hold memory; call dmm_pool_empty_cache, or create the pool with a "
                          "larger va_bytes (or a smaller region_bytes)",
                          h->stream, n, (unsigned long long)p->region, used, p->nregions);
            return false;
        }
        for (size_t k = 0; k < n; k++) atomic_store_explicit(&p->owner[at + k], h, memory_order_release);
        dmm_lock_release(&p->lock);

        uintptr_t lo = p->base + ((uint64_t)at << p->region_shift);
        uint64_t len = (uint64_t)n << p->region_shift;
        if (extend != NULL) {
            pblock *last = extend->first;
            while (last->next != NULL) last = last->next;
            extend->hi += len;
            if (last->kind == BK_UNMAPPED) {
                last->size += len;
                return true;
            }
            pblock *b = dmm__heap_block_new(h);
            b->addr = lo;
            b->size = len;
            b->prev = last;
            last->next = b;
            dmm__heap_make_unmapped(h, b);
            return true;
        }
        pblock *b = dmm__heap_block_new(h);
        b->addr = lo;
        b->size = len;
        dmm__heap_make_unmapped(h, b);
        prun *r = &h->runs[h->nruns++];
        r->lo = lo;
        r->hi = lo + len;
        r->first = b;
        return true;
    }
}

/* ---- malloc / free ---- */
static inline void count_live(pheap *h, pblock *b, uint64_t requested) {
    h->live_blocks++;
    h->live_blocks_total++;
    if (h->live_blocks > h->live_peak_blocks) h->live_peak_blocks = h->live_blocks;
    h->requested_bytes += requested;
    h->requested_total += requested;
    if (h->requested_bytes > h->requested_peak) h->requested_peak = h->requested_bytes;
    uint64_t lb = ld(&h->live_bytes) + b->size;
    st(&h->live_bytes, lb);
    h->live_total += b->size;
    if (lb > ld(&h->live_peak)) st(&h->live_peak, lb);
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

/* A growth plan: the window [lo, lo + n) inside one gap (a maximal sequence of FREE and UNMAPPED
 * blocks) that needs the fewest unmapped chunks committed; ties go to the lowest address. */
typedef struct plan {
    uintptr_t lo, hi;
    uint64_t k;    /* chunks to commit */
    pblock *first; /* the gap's first block */
    bool found;
    size_t extend_run;       /* extend_regions > 0: first extend this run by that many regions */
    uint64_t extend_regions;
} plan;

typedef struct tgtvec {
    ptarget *v;
    size_t cap;
} tgtvec;

/* Unmapped chunks inside [x, e) over the gap first..last. */
static uint64_t window_cost(const dmm_pool *p, const pblock *first, const pblock *last, uintptr_t x, uintptr_t e) {
    uint64_t k = 0;
    for (const pblock *b = first;; b = b->next) {
        if (b->addr >= e) break;
        if (b->kind == BK_UNMAPPED) {
            uintptr_t a = x > b->addr ? x : b->addr, z = e < b->addr + b->size ? e : b->addr + b->size;
            if (a < z) k += (align_up_c(p, z) - align_down_c(p, a)) / p->chunk;
        }
        if (b == last) break;
    }
    return k;
}

static void plan_gap(const dmm_pool *p, const pblock *first, const pblock *last, uint64_t n, plan *best) {
    uintptr_t glo = first->addr, ghi = last->addr + last->size;
    for (const pblock *b = first;; b = b->next) {
        uintptr_t cand[2] = {b->addr, b->addr + b->size >= glo + n ? b->addr + b->size - n : 0};
        for (int i = 0; i < 2; i++) {
            uintptr_t x = cand[i];
            if (x < glo || x + n > ghi || (i == 1 && cand[1] == 0)) continue;
            uint64_t k = window_cost(p, first, last, x, x + n);
            if (!best->found || k < best->k || (k == best->k && best->extend_regions == 0 && x < best->lo)) {
                best->found = true;
                best->extend_regions = 0;
                best->lo = x;
                best->hi = x + n;
                best->k = k;
                best->first = (pblock *)(uintptr_t)first;
            }
        }
        if (b == last) break;
    }
}

/* The growth needing the fewest new chunks to make a free block of `n` bytes (under the lock). A
 * run's tail counts as unbounded: when the cheapest place is the end of a run whose VA is too short,
 * the plan asks for that run to be extended first (extend_regions > 0). */
static bool plan_growth(const dmm_pool *p, const pheap *h, uint64_t n, bool allow_extend, plan *best) {
    memset(best, 0, sizeof *best);
    const uint64_t C = p->chunk;
    for (size_t r = 0; r < h->nruns; r++) {
        const pblock *first = NULL, *prevb = NULL;
        uint64_t total = 0;
        bool any_unmapped = false;
        for (const pblock *b = h->runs[r].first;; prevb = b, b = b->next) {
            bool gapish = b != NULL && (b->kind == BK_FREE || b->kind == BK_UNMAPPED);
            if (gapish) {
                if (first == NULL) {
                    first = b;
                    total = 0;
                    any_unmapped = false;
                }
                total += b->size;
                any_unmapped |= b->kind == BK_UNMAPPED;
                continue;
            }
            if (first != NULL && any_unmapped && total >= n) plan_gap(p, first, prevb, n, best);
            if (allow_extend && b == NULL && prevb != NULL && (first == NULL || total < n)) {
                /* the run's tail is too short: what would extending it cost? */
                uint64_t tail_free = 0, tail_unmapped = 0;
                if (prevb->kind == BK_FREE) tail_free = prevb->size;
                else if (prevb->kind == BK_UNMAPPED) {
                    tail_unmapped = prevb->size;
                    if (prevb->prev != NULL && prevb->prev->kind == BK_FREE) tail_free = prevb->prev->size;
                }
                uint64_t k = (n - (tail_free < n ? tail_free : n) + C - 1) / C;
                uint64_t missing = n - tail_free - tail_unmapped;
                if (!best->found || k < best->k) {
                    memset(best, 0, sizeof *best);
                    best->found = true;
                    best->k = k;
                    best->extend_run = r;
                    best->extend_regions = (missing + p->region - 1) >> p->region_shift;
                }
            }
            first = NULL;
            if (b == NULL) break;
        }
    }
    return best->found;
}

/* The highest live bytes the pool has seen (sampled across heaps; exact for one heap). */
static uint64_t live_peak_estimate(dmm_pool *p) {
    uint64_t sum = 0, mx = 0;
    for (pheap *g = heaps_head(p); g != NULL; g = heap_next(g)) {
        sum += ld(&g->live_bytes);
        uint64_t pk = ld(&g->live_peak);
        if (pk > mx) mx = pk;
    }
    max_into(&p->sampled_live_peak, sum);
    uint64_t s = ld(&p->sampled_live_peak);
    return s > mx ? s : mx;
}

/* ---- chunks: one physical handle each, a whole number of quanta (Q = p->chunk) ----
 * p->clen[q] = the length in quanta of the chunk that starts at quantum q (0: none starts there). An
 * entry is written only by the thread that holds the owning heap's lock, or that carved the range
 * (COMMITTING / DECOMMITTING) out of it; readers look only at FREE ranges under the heap's lock. */
static inline size_t qidx(const dmm_pool *p, uintptr_t addr) { return (size_t)((addr - p->base) / p->chunk); }

typedef enum source_role {
    SRC_MOVE = 0,  /* a FREE chunk behind a completed fence: decommitted (and committed elsewhere) */
    SRC_ALIAS = 1, /* a FREE chunk of the growing heap whose fence is pending: aliased into the growth */
    SRC_OLD = 2,   /* an ALIASED old place whose fence completed: decommitted */
} source_role;

typedef struct source {
    pheap *h;
    pblock *b;      /* a DECOMMITTING block of exactly one chunk */
    uint64_t bytes; /* its size */
    size_t piece;   /* growth: the target piece it moves into */
    uint64_t seq;   /* the block's seq when carved */
    uint8_t role;   /* source_role */
    bool tried;     /* decommit was called */
    bool aliased;   /* SRC_ALIAS: the alias succeeded, the block stays mapped as the old place */
    dmm_release_outcome o;
} source;

typedef struct srcvec {
    source *v;
    size_t n, cap;
} srcvec;

static int by_age(const void *a, const void *b) {
    const pcand *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1; /* oldest free first */
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1; /* then the biggest: fewer calls */
    return x->addr > y->addr ? -1 : x->addr < y->addr; /* then the highest: memory stays packed low */
}

/* Carves whole free chunks that are safe to decommit out of h's FREE blocks (under h's lock), oldest
 * frees first, until `want` bytes are carved, skipping blocks that overlap [ex_lo, ex_hi). With
 * target pieces (growth), a chunk is taken only if it fits in the room left in one of them, and is
 * assigned to it. `alias_ok` (a growth of h itself): chunks whose fence is still pending are taken
 * too, to be aliased (stream order makes their reuse by h's stream safe at once); the oldest frees,
 * those behind a completed fence, still come first and move. Returns the bytes carved. */
static uint64_t carve_sources(dmm_pool *p, pheap *h, uint64_t want, uintptr_t ex_lo, uintptr_t ex_hi, ptarget *tg,
                              size_t nt, bool alias_ok, srcvec *out) {
    if (want == 0) return 0;
    const uint64_t Q = p->chunk;
    size_t nc = 0;
    for (uint32_t c = 0; c < POOL_NBINS; c++) {
        if ((h->binmap[c / 64] >> (c % 64) & 1) == 0) continue;
        for (pblock *b = h->bins[c]; b != NULL; b = b->lnext) {
            if ((b->seq > h->safe_seq && !alias_ok) || (b->addr < ex_hi && b->addr + b->size > ex_lo)) continue;
            size_t q = qidx(p, align_up_c(p, b->addr)), qend = qidx(p, align_down_c(p, b->addr + b->size));
            while (q < qend) {
                uint32_t len = p->clen[q];
                if (len == 0) { /* inside a chunk that began before this block */
                    q++;
                    continue;
                }
                if (q + len > qend) break; /* runs past the block's end */
                if (nc == h->capscratch) {
                    size_t ncap = h->capscratch ? h->capscratch * 2 : 64;
                    pcand *ns = realloc(h->scratch, ncap * sizeof *ns);
                    if (ns == NULL) break;
                    h->scratch = ns;
                    h->capscratch = ncap;
                }
                h->scratch[nc++] = (pcand){b, p->base + q * Q, (uint64_t)len * Q, b->seq, b->seq > h->safe_seq};
                q += len;
            }
        }
    }
    if (nc == 0) return 0;
    qsort(h->scratch, nc, sizeof *h->scratch, by_age);
    if (out->n + nc > out->cap) {
        size_t ncap = out->n + nc;
        source *nv = realloc(out->v, ncap * sizeof *nv);
        if (nv == NULL) return 0;
        out->v = nv;
        out->cap = ncap;
    }
    if (!dmm__heap_reserve_blocks(h, 2 * nc + 2)) return 0;
    uint64_t got = 0;
    for (size_t i = 0; i < nc && got < want; i++) {
        const pcand *c = &h->scratch[i];
        size_t piece = SIZE_MAX;
        if (tg != NULL) {
            for (size_t j = 0; j < nt && piece == SIZE_MAX; j++)
                if (tg[j].room >= c->bytes) piece = j;
            if (piece == SIZE_MAX) continue;
        }
        /* earlier carves split the block: the piece holding this chunk follows the original record */
        pblock *b = c->b;
        while (b != NULL && b->addr + b->size <= c->addr) b = b->next;
        if (b == NULL || b->kind != BK_FREE || b->addr > c->addr || b->addr + b->size < c->addr + c->bytes) continue;
        pblock *mid = dmm__heap_carve(h, b, c->addr, c->bytes, BK_DECOMMITTING);
        if (tg != NULL) tg[piece].room -= c->bytes;
        source *s = &out->v[out->n++];
        memset(s, 0, sizeof *s);
        s->h = h;
        s->b = mid;
        s->bytes = c->bytes;
        s->piece = piece;
        s->seq = c->seq;
        s->role = c->alias ? SRC_ALIAS : SRC_MOVE;
        got += c->bytes;
    }
    return got;
}

/* The outcome of a source that was carved but never decommitted: it goes back FREE. */
static inline dmm_release_outcome dmm__pool_outcome_untouched(void) {
    dmm_release_outcome o = {DMM_RELEASE_FAILED, 0, 0, 0, DMM_OK};
    return o;
}

static inline bool source_gone(const source *s) {
    return dmm_release_state_of(&s->o) == DMM_RELEASE_COMPLETE && s->o.unmapped_bytes == s->bytes;
}

/* Decommits one source chunk (no heap lock held). Once the device is lost: FAILED with
 * DMM_ERR_DEVICE_LOST, without a call. */
static void decommit_one(dmm_pool *p, source *s) {
    dmm_range r = {(size_t)(s->b->addr - p->base), (size_t)s->bytes};
    s->tried = true;
    if (pool_lost(p)) {
        s->o = (dmm_release_outcome){DMM_RELEASE_FAILED, s->bytes, 0, 0,
                                     pool_lost_error(p, "pool: decommitting a free chunk")};
        return;
    }
    s->o = dmm_mechanism_decommit(p->mech, &p->va, r);
    if (s->o.failure == DMM_ERR_DEVICE_LOST) pool_note_lost(p, "pool: decommitting a free chunk");
    if (source_gone(s) || (dmm_release_state_of(&s->o) == DMM_RELEASE_QUARANTINED && s->o.unmapped_bytes == s->bytes)) {
        p->clen[qidx(p, s->b->addr)] = 0;
        sub(&p->committed, s->bytes);
        if (source_gone(s)) add(&p->chunks_decommitted, 1);
    }
}

/* Puts a decommitted, aliased (or untouched) source back into its heap (under that heap's lock). */
static void source_fixup(dmm_pool *p, source *s) {
    pheap *h = s->h;
    pblock *b = s->b;
    if (s->role == SRC_ALIAS) {
        if (s->aliased) { /* the old place: mapped until a completed fence covers its last free */
            b->kind = BK_ALIASED;
            dmm__heap_list_push(&h->aliased, b);
            h->naliased++;
        } else {
            dmm__heap_make_free(h, b); /* not aliased: still mapped, still free */
        }
        return;
    }
    dmm_release_state state = dmm_release_state_of(&s->o);
    if (source_gone(s)) {
        h->committed -= s->bytes;
        dmm__heap_make_unmapped(h, b);
    } else if (state == DMM_RELEASE_QUARANTINED) {
        /* something changed and something failed: never use this chunk again */
        b->kind = BK_POISONED;
        b->requested = s->o.unmapped_bytes < s->bytes; /* still mapped? */
        if (!b->requested) h->committed -= s->bytes;
        add(&p->chunks_poisoned, 1);
    } else if (s->role == SRC_OLD) {
        b->kind = BK_ALIASED; /* FAILED: still mapped, still the old place; the next poll tries again */
        dmm__heap_list_push(&h->aliased, b);
        h->naliased++;
        return;
    } else {
        dmm__heap_make_free(h, b); /* FAILED (or nothing to unmap): still mapped, still free */
    }
    if (s->role == SRC_OLD) sub(&p->aliased_bytes, s->bytes);
}

static void sources_fixup(dmm_pool *p, srcvec *sv, size_t from) {
    pheap *locked = NULL;
    for (size_t i = from; i < sv->n; i++) {
        if (sv->v[i].h != locked) {
            if (locked != NULL) dmm_lock_release(&locked->lock);
            locked = sv->v[i].h;
            dmm_lock_acquire(&locked->lock);
        }
        source_fixup(p, &sv->v[i]);
    }
    if (locked != NULL) dmm_lock_release(&locked->lock);
}

/* Decommits the old places of aliased chunks whose last free a completed fence covers: the memory
 * lives on where it was aliased to, and nothing queued on the stream can use the old place any more.
 * The VA comes back UNMAPPED; a decommit that failed leaves the block ALIASED, tried again next poll. */
static void heap_reap_aliased(dmm_pool *p, pheap *h) {
    if (pool_lost(p)) return;
    pblock *list = NULL;
    dmm_lock_acquire(&h->lock);
    for (pblock *b = h->aliased, *n; b != NULL; b = n) {
        n = b->lnext;
        if (b->seq > h->safe_seq) continue;
        dmm__heap_list_remove(&h->aliased, b);
        h->naliased--;
        b->kind = BK_DECOMMITTING;
        b->lnext = list;
        list = b;
    }
    dmm_lock_release(&h->lock);
    while (list != NULL) {
        pblock *b = list;
        list = b->lnext;
        b->lnext = NULL;
        source s;
        memset(&s, 0, sizeof s);
        s.h = h;
        s.b = b;
        s.bytes = b->size;
        s.seq = b->seq;
        s.role = SRC_OLD;
        decommit_one(p, &s); /* once lost: FAILED without a call, so the old place stays ALIASED */
        dmm_clear_error(); /* a failure is retried at the next poll; nobody asked for this call */
        dmm_lock_acquire(&h->lock);
        source_fixup(p, &s);
        dmm_lock_release(&h->lock);
    }
}

/* Commits one chunk of `bytes` at `addr` (no heap lock held). */
static dmm_status commit_one(dmm_pool *p, uintptr_t addr, uint64_t bytes) {
    if (pool_lost(p)) return pool_lost_error(p, "pool: committing a chunk");
    uint64_t newly = 0;
    dmm_range r = {(size_t)(addr - p->base), (size_t)bytes};
    dmm_status s = dmm_mechanism_commit(p->mech, &p->va, r, &newly);
    if (s == DMM_ERR_DEVICE_LOST) pool_note_lost(p, "pool: committing a chunk");
    if (s != DMM_OK) return s;
    p->clen[qidx(p, addr)] = (uint32_t)(bytes / p->chunk);
    committed_add(p, bytes);
    add(&p->chunks_committed, 1);
    return DMM_OK;
}

/* Maps the physical memory of alias source s a second time at `at` (no heap lock held): usable at
 * once by the heap's stream, whose queued work is all that may still use the old place. A failure
 * changes nothing (the caller commits new memory instead). */
static dmm_status alias_one(dmm_pool *p, source *s, uintptr_t at) {
    dmm_range dst = {(size_t)(at - p->base), (size_t)s->bytes}, src = {(size_t)(s->b->addr - p->base), (size_t)s->bytes};
    if (pool_lost(p)) return DMM_ERR_DEVICE_LOST; /* the commit that follows says why */
    dmm_status st = dmm_mechanism_alias(p->mech, &p->va, dst, src);
    if (st == DMM_ERR_DEVICE_LOST) pool_note_lost(p, "pool: aliasing a chunk");
    if (st != DMM_OK) {
        dmm_clear_error();
        return st;
    }
    s->aliased = true;
    p->clen[qidx(p, at)] = (uint32_t)(s->bytes / p->chunk);
    committed_add(p, s->bytes);
    add(&p->aliased_bytes, s->bytes);
    add(&p->chunks_committed, 1);
    add(&p->chunks_aliased, 1);
    return DMM_OK;
}

static dmm_status malloc_slow(dmm_pool *p, pheap *h, uint64_t n, size_t requested, void **out) {
    const uint64_t C = p->chunk;
    char why[512];
    why[0] = '\0';
    dmm_status fail = DMM_OK;
    srcvec sv = {NULL, 0, 0};
    tgtvec tv = {NULL, 0};
    for (int attempt = 0; attempt < 16; attempt++) {
        size_t fail_j = SIZE_MAX; /* the piece whose commit failed, at [fail_at, fail_at + fail_len) */
        uintptr_t fail_at = 0;
        uint64_t fail_len = 0;
        if (attempt == 0 && !pool_check_lost(p)) heap_poll(p, h);
        if (pool_lost(p)) { /* before any call, or after a growth the loss cut short: nothing handed out */
            free(sv.v);
            free(tv.v);
            char op[96];
            snprintf(op, sizeof op, "dmm_pool_malloc of %zu bytes on stream %p", requested, h->stream);
            return pool_lost_error(p, op);
        }
        dmm_lock_acquire(&h->lock);
        pblock *b = dmm__heap_bin_find(h, n);
        if (b != NULL) {
            bool ok = take(h, b, n, requested);
            if (ok) {
                h->cached_mallocs += attempt == 0;
                *out = (void *)b->addr;
            }
            dmm_lock_release(&h->lock);
            free(sv.v);
            free(tv.v);
            if (!ok)
                return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool malloc of %zu bytes: out of host memory for the "
                                                            "block table", requested);
            return DMM_OK;
        }
        if (fail != DMM_OK) { /* the last growth failed and nothing fits: report it */
            dmm_lock_release(&h->lock);
            free(sv.v);
            free(tv.v);
            return dmm_error_set(fail, "pool malloc of %zu bytes on stream %p: committing memory for it failed: %s",
                                 requested, h->stream, why);
        }
        plan pl;
        bool extended = false;
        for (;;) {
            bool found = plan_growth(p, h, n, !extended, &pl);
            if (found && pl.extend_regions == 0) break;
            /* no place at all, or the cheapest is a run's end whose VA is too short: more VA, preferably
             * right after that run (once; if that is taken, a new run of its own) */
            size_t regions = found ? (size_t)pl.extend_regions : (size_t)((n + p->region - 1) >> p->region_shift);
            size_t prefer = found ? pl.extend_run : SIZE_MAX;
            if (!heap_grow_va(p, h, regions, prefer)) {
                dmm_lock_release(&h->lock);
                free(sv.v);
                free(tv.v);
                return dmm_last_status();
            }
            extended = true;
        }
        /* carve the unmapped chunks inside the window out as COMMITTING targets */
        size_t nt = 0;
        if (tv.cap < pl.k + 1) {
            ptarget *nv = realloc(tv.v, ((size_t)pl.k + 1) * sizeof *nv);
            if (nv == NULL) {
                dmm_lock_release(&h->lock);
                free(sv.v);
                free(tv.v);
                return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool malloc of %zu bytes: out of host memory", requested);
            }
            tv.v = nv;
            tv.cap = (size_t)pl.k + 1;
        }
        if (!dmm__heap_reserve_blocks(h, 2 * (size_t)pl.k + 2)) {
            dmm_lock_release(&h->lock);
            free(sv.v);
            free(tv.v);
            return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool malloc of %zu bytes: out of host memory", requested);
        }
        {
            pblock *x = pl.first;
            while (x != NULL && x->addr < pl.hi) {
                pblock *nx = x->next;
                if (x->kind == BK_UNMAPPED && x->addr + x->size > pl.lo) {
                    uintptr_t a = align_down_c(p, pl.lo > x->addr ? pl.lo : x->addr);
                    uintptr_t z = align_up_c(p, pl.hi < x->addr + x->size ? pl.hi : x->addr + x->size);
                    if (a < x->addr) a = x->addr;
                    tv.v[nt].b = dmm__heap_carve(h, x, a, z - a, BK_COMMITTING);
                    tv.v[nt].room = z - a;
                    tv.v[nt].done = 0;
                    tv.v[nt].seq = 0;
                    nt++;
                }
                x = nx;
            }
        }
        pblock *rec = dmm__heap_block_new(h); /* for the fix-up's split: held privately */
        pblock *rec2 = dmm__heap_block_new(h); /* and for cutting out a chunk the failed commit left poisoned */
        /* the retention limit: move whole free chunks rather than grow beyond it */
        uint64_t cap = live_peak_estimate(p);
        cap += cap / 1000 * p->retain_permille + (cap % 1000) * p->retain_permille / 1000;
        uint64_t committed = ld(&p->committed), twice = ld(&p->aliased_bytes), need = pl.k * C, want = 0;
        committed -= twice < committed ? twice : committed; /* an aliased chunk's old place is no more memory */
        if (committed + need > cap) want = committed + need - cap < need ? committed + need - cap : need;
        sv.n = 0;
        uint64_t got = carve_sources(p, h, want, pl.lo, pl.hi, tv.v, nt, p->can_alias, &sv);
        dmm_lock_release(&h->lock);
        /* then from other heaps, one lock at a time */
        for (pheap *g = heaps_head(p); g != NULL && got < want; g = heap_next(g)) {
            if (g == h) continue;
            heap_poll(p, g); /* its fence decides which of its free chunks may move */
            dmm_lock_acquire(&g->lock);
            got += carve_sources(p, g, want - got, 0, 0, tv.v, nt, false, &sv);
            dmm_lock_release(&g->lock);
        }
        /* the driver work, outside every heap lock. Each piece: first the chunks moved into it (decommit
         * there, commit here: the mechanism's cache hands the same handle back) or aliased into it
         * (mapped here at once, the old place decommitted once its fence completed), then one new
         * chunk for the rest (split only at max_chunk) */
        add(&p->grows, 1);
        for (size_t j = 0; j < nt && fail == DMM_OK; j++) {
            uintptr_t cur = tv.v[j].b->addr, end = cur + tv.v[j].b->size;
            for (size_t i = 0; i < sv.n && fail == DMM_OK; i++) {
                if (sv.v[i].piece != j) continue;
                if (sv.v[i].role == SRC_ALIAS) {
                    if (alias_one(p, &sv.v[i], cur) != DMM_OK) continue; /* its room gets new memory below */
                    if (sv.v[i].seq > tv.v[j].seq) tv.v[j].seq = sv.v[i].seq;
                    cur += sv.v[i].bytes;
                    continue;
                }
                decommit_one(p, &sv.v[i]);
                if (!source_gone(&sv.v[i])) continue; /* its room is filled with new memory below */
                add(&p->chunks_moved, 1);
                dmm_status s = commit_one(p, cur, sv.v[i].bytes);
                if (s != DMM_OK) {
                    fail = s;
                    fail_j = j;
                    fail_at = cur;
                    fail_len = sv.v[i].bytes;
                    snprintf(why, sizeof why, "%s", dmm_last_error());
                    break;
                }
                cur += sv.v[i].bytes;
            }
            while (fail == DMM_OK && cur < end) {
                uint64_t len = end - cur < p->max_chunk ? end - cur : p->max_chunk;
                dmm_status s = commit_one(p, cur, len);
                if (s != DMM_OK) {
                    fail = s;
                    fail_j = j;
                    fail_at = cur;
                    fail_len = len;
                    snprintf(why, sizeof why, "%s", dmm_last_error());
                    break;
                }
                cur += len;
            }
            tv.v[j].done = cur - tv.v[j].b->addr;
        }
        /* A commit whose undo failed (the arena's rollback leak) leaves its chunk mapped and poisoned in
         * the arena: that chunk is never committed again, so it must not go back UNMAPPED (every later
         * growth planned over it would fail), and it is mapped (it counts in committed, as a trimmed
         * chunk whose unmap failed does). Asked outside every pool lock, like every mechanism call. */
        bool poisoned = false;
        if (fail_j != SIZE_MAX && dmm_mechanism_has_slot(p->mech, "is_quarantined")) {
            if (dmm_mechanism_is_quarantined(p->mech, (const void *)fail_at, (size_t)fail_len, &poisoned) != DMM_OK)
                poisoned = false;
            dmm_clear_error();
        }
        /* fix-up: committed parts become FREE (merging with their neighbours), the rest UNMAPPED */
        dmm_lock_acquire(&h->lock);
        dmm__heap_block_put(h, rec); /* back to the spares: a split below takes it */
        dmm__heap_block_put(h, rec2);
        for (size_t j = 0; j < nt; j++) {
            pblock *t = tv.v[j].b;
            uint64_t done = tv.v[j].done;
            if (done < t->size) {
                pblock *rest = done > 0 ? dmm__heap_split(h, t, done) : t;
                if (poisoned && j == fail_j && rest->addr == fail_at && rest->size >= fail_len) {
                    pblock *after = rest->size > fail_len ? dmm__heap_split(h, rest, fail_len) : NULL;
                    rest->kind = BK_POISONED; /* out of use forever; requested = 1: still mapped */
                    rest->requested = 1;
                    p->clen[qidx(p, fail_at)] = (uint32_t)(fail_len / p->chunk);
                    h->committed += fail_len;
                    committed_add(p, fail_len);
                    add(&p->chunks_poisoned, 1);
                    rest = after;
                }
                if (rest != NULL) dmm__heap_make_unmapped(h, rest);
            }
            if (done > 0) {
                h->committed += done;
                t->seq = tv.v[j].seq; /* aliased memory: the old place's last free (moving it elsewhere waits) */
                dmm__heap_make_free(h, t);
            }
        }
        dmm_lock_release(&h->lock);
        /* sources never decommitted (a commit failed first) go back as they were */
        for (size_t i = 0; i < sv.n; i++)
            if (!sv.v[i].tried) sv.v[i].o = dmm__pool_outcome_untouched();
        sources_fixup(p, &sv, 0);
    }
    free(sv.v);
    free(tv.v);
    return dmm_error_set(DMM_ERR_BUSY,
                         "pool malloc of %zu bytes on stream %p: other threads on the same stream took the memory "
                         "grown for it 16 times in a row; retry",
                         requested, h->stream);
}

/* The refusal of a malloc once the device is lost (out of line: the hot path only tests the flag). */
static __attribute__((noinline, cold)) dmm_status malloc_lost(dmm_pool *p, size_t bytes, dmm_stream stream) {
    char op[96];
    snprintf(op, sizeof op, "dmm_pool_malloc of %zu bytes on stream %p", bytes, stream);
    return pool_lost_error(p, op);
}

dmm_status dmm_pool_malloc(dmm_pool *p, size_t bytes, dmm_stream stream, void **out) {
    if (p == NULL || out == NULL || bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_malloc: pool %p, %zu bytes, out %p: a pool, a size above 0 and an output "
                             "pointer are required",
                             (void *)p, bytes, (void *)out);
    uint64_t n;
    if (!dmm_align_up(bytes, p->align, &n) || n > p->va_bytes)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "dmm_pool_malloc: %zu bytes is more than the pool's VA (%llu bytes); create the "
                             "pool with a larger va_bytes",
                             bytes, (unsigned long long)p->va_bytes);
    if (dmm_atomic_load_acquire(&p->lost) != 0) return malloc_lost(p, bytes, stream); /* cached too: pool.h */
    pheap *h = heap_for(p, stream);
    if (h == NULL) return dmm_last_status();
    dmm_lock_acquire(&h->lock);
    pblock *b = dmm__heap_bin_find(h, n);
    if (b != NULL && take(h, b, n, bytes)) {
        h->cached_mallocs++;
        *out = (void *)b->addr;
        dmm_lock_release(&h->lock);
        return DMM_OK;
    }
    dmm_lock_release(&h->lock);
    return malloc_slow(p, h, n, bytes, out);
}

static inline void uncount_live(pheap *h, const pblock *b) {
    h->live_blocks--;
    h->requested_bytes -= b->requested;
    st(&h->live_bytes, ld(&h->live_bytes) - b->size);
}

/* The cross-stream free: record an event on `stream` and park the block until it completes. */
static dmm_status free_cross(dmm_pool *p, pheap *h, pblock *b, dmm_stream stream) {
    dmm_event ev = NULL;
    dmm_status s = event_get(p, &ev);
    if (s == DMM_OK) {
        s = p->drv->ops->event_record(p->drv, ev, stream);
        if (s == DMM_ERR_DEVICE_LOST) pool_note_lost(p, "pool free: recording the event of a cross-stream free");
        if (s != DMM_OK) event_put(p, ev);
    } else if (s == DMM_ERR_DEVICE_LOST) {
        pool_note_lost(p, "pool free: creating the event of a cross-stream free");
    }
    dmm_lock_acquire(&h->lock);
    if (s != DMM_OK && pool_lost(p)) { /* the free that found the loss is accepted like every later one */
        b->seq = ++h->free_seq;
        dmm__heap_make_free(h, b);
        h->frees++;
        dmm_lock_release(&h->lock);
        dmm_clear_error();
        return DMM_OK;
    }
    if (s != DMM_OK) {
        /* nothing changed: the block is live again */
        char why[512];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        b->kind = BK_LIVE;
        (void)dmm__heap_hash_insert(h, b);
        count_live(h, b, b->requested);
        h->live_blocks_total--;
        h->requested_total -= b->requested;
        h->live_total -= b->size;
        dmm_lock_release(&h->lock);
        return dmm_error_set(s, "pool free of %p on stream %p (the block's heap is stream %p): recording the "
                                "event that gates its reuse failed, so the block stays live; free it again: %s",
                             (void *)b->addr, stream, h->stream, why);
    }
    b->ev = ev;
    b->requested = 0;
    dmm__heap_list_push(&h->pending, b);
    h->npending++;
    h->frees++;
    h->cross_frees++;
    dmm_lock_release(&h->lock);
    add(&p->events_recorded, 1);
    uint64_t now = atomic_fetch_add_explicit(&p->pending_now, 1, memory_order_relaxed) + 1;
    add(&p->pending_total, 1);
    max_into(&p->pending_peak, now);
    return DMM_OK;
}

dmm_status dmm_pool_free(dmm_pool *p, void *ptr, dmm_stream stream) {
    if (p == NULL || ptr == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_free: pool %p, ptr %p: both are required",
                             (void *)p, ptr);
    pheap *h = heap_of_addr(p, (uintptr_t)ptr);
    if (h != NULL) {
        dmm_lock_acquire(&h->lock);
        pblock *b = dmm__heap_hash_remove(h, (uintptr_t)ptr);
        if (b != NULL) {
            uncount_live(h, b);
            /* after a loss every free is this one: bookkeeping only, no event (pool.h) */
            if (stream == h->stream || pool_lost(p)) {
                b->seq = ++h->free_seq;
                dmm__heap_make_free(h, b);
                h->frees++;
                dmm_lock_release(&h->lock);
                return DMM_OK;
            }
            b->kind = BK_PENDING;
            dmm_lock_release(&h->lock);
            return free_cross(p, h, b, stream);
        }
        dmm_lock_release(&h->lock);
    }
    return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                         "dmm_pool_free: %p is not a live block of this pool (never allocated, already freed, or "
                         "not the block's start); nothing changed",
                         ptr);
}

dmm_status dmm_pool_block_size(dmm_pool *p, const void *ptr, size_t *bytes) {
    if (p == NULL || ptr == NULL || bytes == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_block_size: pool, ptr and bytes are required");
    pheap *h = heap_of_addr(p, (uintptr_t)ptr);
    if (h != NULL) {
        dmm_lock_acquire(&h->lock);
        pblock *b = dmm__heap_hash_find(h, (uintptr_t)ptr);
        if (b != NULL) *bytes = (size_t)b->size;
        dmm_lock_release(&h->lock);
        if (b != NULL) return DMM_OK;
    }
    return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION, "dmm_pool_block_size: %p is not a live block of this pool", ptr);
}

/* ---- trim ---- */
/* `op` names the public call in a loss's sentence. */
static dmm_status pool_trim(dmm_pool *p, uint64_t target, uint64_t *released, const char *op) {
    if (released != NULL) *released = 0;
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the pool is NULL", op);
    if (pool_check_lost(p)) return pool_lost_error(p, op);
    add(&p->trims, 1);
    uint64_t freed = 0;
    dmm_status fail = DMM_OK;
    char why[512];
    uintptr_t where = 0;
    srcvec sv = {NULL, 0, 0};
    for (pheap *h = heaps_head(p); h != NULL && !pool_lost(p); h = heap_next(h)) {
        heap_poll(p, h); /* also when there is nothing to trim: cross-stream frees become reusable */
        uint64_t committed = ld(&p->committed);
        if (committed <= target) continue;
        dmm_lock_acquire(&h->lock);
        sv.n = 0;
        carve_sources(p, h, committed - target, 0, 0, NULL, 0, false, &sv);
        dmm_lock_release(&h->lock);
        for (size_t i = 0; i < sv.n; i++) {
            decommit_one(p, &sv.v[i]);
            dmm_release_state st8 = dmm_release_state_of(&sv.v[i].o);
            if (st8 == DMM_RELEASE_COMPLETE) freed += sv.v[i].o.unmapped_bytes;
            else if (fail == DMM_OK) {
                fail = sv.v[i].o.failure != DMM_OK ? sv.v[i].o.failure : DMM_ERR_DRIVER;
                where = sv.v[i].b->addr;
                snprintf(why, sizeof why, "%s", dmm_last_error());
            }
        }
        sources_fixup(p, &sv, 0);
    }
    free(sv.v);
    if (released != NULL) *released = freed;
    if (pool_lost(p)) { /* the loss cut the trim short: what was released before it is counted */
        char what[128];
        snprintf(what, sizeof what, "%s (%llu bytes were released before the loss)", op, (unsigned long long)freed);
        return pool_lost_error(p, what);
    }
    if (fail != DMM_OK)
        return dmm_error_set(fail,
                             "dmm_pool_trim: decommitting the chunk at %p failed (the chunk stays in the pool: free "
                             "and mapped if nothing changed, never used again if the mechanism quarantined it); "
                             "%llu bytes were released: %s",
                             (void *)where, (unsigned long long)freed, why);
    return DMM_OK;
}

dmm_status dmm_pool_trim(dmm_pool *p, uint64_t target, uint64_t *released) {
    return pool_trim(p, target, released, "dmm_pool_trim");
}

dmm_status dmm_pool_empty_cache(dmm_pool *p, uint64_t *released) {
    dmm_status s = pool_trim(p, 0, released, "dmm_pool_empty_cache");
    if (s != DMM_OK) return s;
    for (pheap *h = heaps_head(p); h != NULL; h = heap_next(h)) { /* empty runs give their VA back */
        dmm_lock_acquire(&h->lock);
        heap_shed_empty_runs(p, h);
        dmm_lock_release(&h->lock);
    }
    if (pool_check_lost(p)) return pool_lost_error(p, "dmm_pool_empty_cache");
    s = dmm_mechanism_drain_cache(p->mech);
    if (s == DMM_ERR_UNSUPPORTED) { /* a mechanism that caches no handles */
        dmm_clear_error();
        return DMM_OK;
    }
    if (s == DMM_ERR_DEVICE_LOST) {
        pool_note_lost(p, "dmm_pool_empty_cache: draining the arena's handle cache");
        return pool_lost_error(p, "dmm_pool_empty_cache");
    }
    return s;
}

/* ---- destroy ---- */
/* Frees the pool's host memory; `driver`: also destroys its events (never once the device is lost:
 * the context took them). */
static void pool_free_all(dmm_pool *p, bool driver) {
    pheap *h = heaps_head(p);
    while (h != NULL) {
        pheap *n = heap_next(h);
        if (driver && h->fence != NULL) p->drv->ops->event_destroy(p->drv, h->fence);
        dmm__heap_fini(h);
        free(h);
        h = n;
    }
    if (driver)
        for (size_t i = 0; i < p->nevents; i++) p->drv->ops->event_destroy(p->drv, p->events[i]);
    free(p->events);
    free(p->owner);
    free(p->clen);
    dmm_lock_destroy(&p->lock);
    free(p);
}

/* Destroy once the device is lost: the pool goes, without a driver call, once the mechanism has
 * discharged its VA (over an arena: dmm_arena_confirm_context_terminated; over another mechanism:
 * its release of the VA, asked once per call unless `released` already tried it this call). */
static dmm_status destroy_lost(dmm_pool *p, bool released) {
    bool gone = false;
    char why[512] = "";
    if (p->is_arena) {
        if (dmm__arena_device_loss(p->mech, false, NULL, &gone) != DMM_OK) gone = false;
    } else if (!released) {
        dmm_release_outcome o = dmm_mechanism_release(p->mech, &p->va);
        gone = dmm_release_state_of(&o) != DMM_RELEASE_FAILED;
        if (!gone) snprintf(why, sizeof why, " (the mechanism: %s)", dmm_last_error());
    }
    if (!gone)
        return dmm_error_set(DMM_ERR_DEVICE_LOST,
                             "dmm_pool_destroy: the pool's device was lost (first seen at %s) and its memory is still "
                             "the mechanism's%s; nothing changed: tear the context down, call "
                             "dmm_arena_confirm_context_terminated() on the arena, then destroy the pool again",
                             p->lost_why, why);
    uint64_t live = 0, pend = 0;
    for (pheap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        dmm_lock_acquire(&h->lock);
        live += h->live_blocks;
        pend += h->npending;
        dmm_lock_release(&h->lock);
    }
    if (live > 0 || pend > 0)
        dmm__log(DMM_LOG_WARN,
                 "dmm_pool_destroy after a confirmed device loss: %llu live block(s) and %llu cross-stream free(s) "
                 "were forgotten (their memory went with the context)",
                 (unsigned long long)live, (unsigned long long)pend);
    pool_free_all(p, false);
    dmm_clear_error();
    return DMM_OK;
}

dmm_status dmm_pool_destroy(dmm_pool *p) {
    if (p == NULL) return DMM_OK;
    if (pool_check_lost(p)) return destroy_lost(p, false);
    for (pheap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        heap_poll(p, h);
        heap_poll(p, h); /* a fence recorded by the first poll may be complete at once */
        if (pool_lost(p)) return destroy_lost(p, false);
        dmm_lock_acquire(&h->lock);
        uint64_t live = h->live_blocks, pend = h->npending;
        bool fence = h->safe_seq < h->free_seq;
        dmm_lock_release(&h->lock);
        if (live > 0)
            return dmm_error_set(DMM_ERR_BUSY,
                                 "dmm_pool_destroy: stream %p still has %llu live block(s); free them first (nothing "
                                 "changed)",
                                 h->stream, (unsigned long long)live);
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
        pool_note_lost(p, "dmm_pool_destroy: releasing the pool's VA and chunks");
        return destroy_lost(p, true);
    }
    if (state == DMM_RELEASE_FAILED)
        return dmm_error_set(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER,
                             "dmm_pool_destroy: releasing the pool's VA and chunks failed and nothing changed; the "
                             "pool is intact, retry: %s",
                             dmm_last_error());
    char why[512];
    snprintf(why, sizeof why, "%s", dmm_last_error());
    /* a loss the release met half-way: its events went with the context (the arena reported it in the
     * outcome; it makes no more driver calls, nor do we) */
    if (o.failure == DMM_ERR_DEVICE_LOST) pool_note_lost(p, "dmm_pool_destroy: releasing the pool's VA and chunks");
    pool_free_all(p, !pool_lost(p));
    if (state == DMM_RELEASE_QUARANTINED)
        return dmm_error_set(DMM_ERR_QUARANTINED,
                             "dmm_pool_destroy: the pool is gone, but the mechanism quarantined part of its memory "
                             "(%llu bytes unmapped, %llu still owned): %s",
                             (unsigned long long)o.unmapped_bytes, (unsigned long long)o.residual_owned_bytes, why);
    dmm_clear_error();
    return DMM_OK;
}

/* ---- stats ---- */
#define POOL_STATS_MIN_SIZE (offsetof(dmm_pool_stats, allocations) + sizeof(dmm_count))

static void gather(dmm_pool *p, dmm_pool_stats *s) {
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    uint64_t maxlive = 0, maxreq = 0, maxblocks = 0, sumlive = 0, sumreq = 0;
    for (pheap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        dmm_lock_acquire(&h->lock);
        s->allocations.current += (int64_t)h->live_blocks;
        s->allocations.total += (int64_t)h->live_blocks_total;
        if (h->live_peak_blocks > maxblocks) maxblocks = h->live_peak_blocks;
        sumlive += ld(&h->live_bytes);
        s->allocated_bytes.total += (int64_t)h->live_total;
        if (ld(&h->live_peak) > maxlive) maxlive = ld(&h->live_peak);
        sumreq += h->requested_bytes;
        s->requested_bytes.total += (int64_t)h->requested_total;
        if (h->requested_peak > maxreq) maxreq = h->requested_peak;
        s->mallocs += h->mallocs;
        s->frees += h->frees;
        s->cached_mallocs += h->cached_mallocs;
        s->cross_stream_frees += h->cross_frees;
        dmm_lock_release(&h->lock);
    }
    max_into(&p->sampled_live_peak, sumlive);
    max_into(&p->sampled_requested_peak, sumreq);
    uint64_t lp = ld(&p->sampled_live_peak), rp = ld(&p->sampled_requested_peak);
    s->allocated_bytes.current = (int64_t)sumlive;
    s->allocated_bytes.peak = (int64_t)(lp > maxlive ? lp : maxlive);
    s->requested_bytes.current = (int64_t)sumreq;
    s->requested_bytes.peak = (int64_t)(rp > maxreq ? rp : maxreq);
    s->allocations.peak = (int64_t)maxblocks;
    if (s->allocations.peak < s->allocations.current) s->allocations.peak = s->allocations.current;
    s->committed_bytes.current = (int64_t)ld(&p->committed);
    s->committed_bytes.peak = (int64_t)ld(&p->committed_peak);
    s->committed_bytes.total = (int64_t)ld(&p->committed_total);
    s->pending_blocks.current = (int64_t)ld(&p->pending_now);
    s->pending_blocks.peak = (int64_t)ld(&p->pending_peak);
    s->pending_blocks.total = (int64_t)ld(&p->pending_total);
    dmm_lock_acquire(&p->lock);
    s->heaps.current = s->heaps.peak = s->heaps.total = (int64_t)p->nheaps;
    dmm_lock_release(&p->lock);
    s->grows = ld(&p->grows);
    s->chunks_committed = ld(&p->chunks_committed);
    s->chunks_decommitted = ld(&p->chunks_decommitted);
    s->chunks_moved = ld(&p->chunks_moved);
    s->chunks_aliased = ld(&p->chunks_aliased);
    s->trims = ld(&p->trims);
    s->events_recorded = ld(&p->events_recorded);
    s->events_pending = ld(&p->events_pending);
    s->chunks_poisoned = ld(&p->chunks_poisoned);
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
    } else {
        dmm_clear_error();
    }
}

dmm_status dmm_pool_stats_get(dmm_pool *p, dmm_pool_stats *out) {
    if (p == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_stats_get: pool and out are required");
    uint32_t want = out->size;
    if (want < POOL_STATS_MIN_SIZE)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "dmm_pool_stats_get: the output struct's size is %u bytes; set .size = "
                             "sizeof(dmm_pool_stats) (%zu in this build)",
                             want, sizeof(dmm_pool_stats));
    dmm_pool_stats s;
    gather(p, &s);
    size_t n = want < sizeof s ? want : sizeof s;
    memcpy(out, &s, n);
    if (want > sizeof s) memset((char *)out + sizeof s, 0, want - sizeof s);
    out->size = want;
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
    return dmm__stats_copy_out(&c, out);
}

dmm_status dmm_pool_stats_json(const dmm_pool_stats *s, char *buf, size_t cap, size_t *needed) {
    if (s == NULL || (buf == NULL && cap > 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_stats_json: stats is NULL or buf is NULL with cap %zu", cap);
    dmm_json o = {buf, cap, 0};
    const char *sep = "";
    dmm__json_put(&o, "{");
#define POOL_JSON_COUNT(name, desc)                                                                 \
    dmm__json_count(&o, sep, #name, &s->name);                                                     \
    sep = ",";
    DMM_POOL_STAT_COUNTS(POOL_JSON_COUNT)
#undef POOL_JSON_COUNT
#define POOL_JSON_COUNTER(name, desc)                                                               \
    dmm__json_put(&o, "%s\"" #name "\":%llu", sep, (unsigned long long)s->name);                              \
    sep = ",";
    DMM_POOL_STAT_COUNTERS(POOL_JSON_COUNTER)
#undef POOL_JSON_COUNTER
    dmm__json_put(&o, "}");
    return dmm__json_finish(&o, needed, "dmm_pool_stats_json");
}

/* ---- check ---- */
dmm_status dmm_pool_check(dmm_pool *p) {
    if (p == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_check: the pool is NULL");
    uint64_t sum = 0, twice = 0;
    for (pheap *h = heaps_head(p); h != NULL; h = heap_next(h)) {
        dmm_lock_acquire(&h->lock);
        const char *bad = dmm__heap_check_locked(h);
        sum += h->committed;
        for (const pblock *b = h->aliased; b != NULL; b = b->lnext) twice += b->size;
        dmm_lock_release(&h->lock);
        if (bad != NULL)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_check: heap of stream %p: %s", h->stream, bad);
    }
    if (sum != ld(&p->committed))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_check: the heaps hold %llu committed bytes but the pool counts %llu (call the "
                             "check while no other thread uses the pool)",
                             (unsigned long long)sum, (unsigned long long)ld(&p->committed));
    if (twice != ld(&p->aliased_bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_check: the heaps hold %llu bytes of aliased old places but the pool counts %llu "
                             "(call the check while no other thread uses the pool)",
                             (unsigned long long)twice, (unsigned long long)ld(&p->aliased_bytes));
    return DMM_OK;
}
