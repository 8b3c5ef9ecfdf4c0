/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/growth.c — malloc's slow path: growth planning, then plan → carve → drive → fix-up
 * (DESIGN §4.9).
 *
 * What it owns: what a malloc does when no mapped free block fits. A growth plans the fewest new
 * chunks that make a fit, next to a free block when one borders unmapped VA (so free blocks coalesce
 * across chunk boundaries), asking for more VA (regions.c) when the cheapest place is a run's end
 * that is too short. If committing them would take the pool's mapped memory above its retention
 * limit — (1 + retain_permille/1000) × the highest live bytes seen so far — it first takes whole free
 * chunks (moves.c): from this heap (those of its own whose fence is pending are aliased: usable at
 * once by its own stream), then from other heaps (only behind a completed fence, and never the one
 * free chunk a heap's own stream reuses next: streams in use with less live memory than a chunk each
 * would otherwise take each other's last chunk in turn, a move on every switch), and moves them
 * into the window one at a time, so that the mechanism's handle cache hands the same physical
 * handle back. New chunks fill the rest, split at max_chunk (or, with a handle divisor, at that share
 * of the request but at least the floor: only large requests get large handles, and none is cut
 * finer than min_chunk, below which a handle costs as much as a larger one, nor, with a floor
 * divisor, than that share of the live peak: a large pool grows in handles in proportion to it).
 *
 * Settling. Under a fixed limit a repeating workload can re-map memory every iteration: the growth
 * of step k moves chunks from the places step k+1 then needs (measured: GPT-2 training aliased
 * ~1 GiB a step). So every chunk a growth moves or aliases raises the limit by its bytes (settled),
 * up to settle_permille of the live peak: a workload that repeats stops re-mapping within an
 * iteration or two and is then served with no driver call, at a peak at most that much higher; one
 * that never repeats pays at most that much memory for fewer moves.
 *
 * The steps of one attempt, each a function below:
 *   plan    (under the heap's lock) the parked (QUICK) blocks merged, then the window [lo, hi) and
 *           the chunks k it needs; more VA if needed;
 *   carve   (under the heap's lock) the window's unmapped chunks as COMMITTING pieces, and the
 *           sources of moves out of this heap; then out of the others, one lock at a time;
 *   drive   (no lock) alias, move, commit new chunks; stops at the first failed commit;
 *   fix-up  (under the locks) committed parts FREE, the rest UNMAPPED (or POISONED where the
 *           mechanism quarantined a failed commit), sources back as their outcome made them.
 * Another thread on the stream may take the grown memory before this one looks again: up to 16
 * attempts, then DMM_ERR_BUSY. All scratch is freed at the one exit.
 *
 * Warm start (dmm_pool_warm → dmm__pool_warm_grow): a pool told a workload's steady state (its last
 * run's committed peak) commits it at once, as one growth in a few large handles, so the first
 * iteration is served from mapped memory without thousands of small handles. Same plan → carve →
 * drive → fix-up, one attempt, no fit taken (the memory is left FREE), and no sources: the retention
 * limit, which would have it move free chunks rather than grow, does not apply to what it was told.
 *
 * Invariants: between carve and fix-up the pieces are COMMITTING and the sources DECOMMITTING, so no
 * other thread touches them; a piece's committed prefix is tv[j].done bytes from its start; a failed
 * drive leaves its sentence as the thread's last error until the next attempt reports it (nothing in
 * between sets one, unless the quarantine query itself fails: then that is said).
 */
#include <stdlib.h>
#include <string.h>

#include "pool/hot.h"

/* A growth plan: the window [lo, lo + n) inside one gap (a maximal sequence of FREE and UNMAPPED
 * blocks) that needs the fewest unmapped chunks committed; ties go to the lowest address. */
typedef struct plan {
    uintptr_t lo, hi;
    uint64_t k;    /* chunks to commit */
    pool_block *first; /* the gap's first block */
    bool found;
    size_t extend_run;       /* extend_regions > 0: first extend this run by that many regions */
    uint64_t extend_regions;
} plan;

typedef struct tgtvec {
    ptarget *v;
    size_t cap;
} tgtvec;

/* Unmapped chunks inside [x, e) over the gap first..last. */
static uint64_t window_cost(const dmm_pool *p, const pool_block *first, const pool_block *last, uintptr_t x, uintptr_t e) {
    uint64_t k = 0;
    for (const pool_block *b = first;; b = b->next) {
        if (b->addr >= e) break;
        if (b->kind == BK_UNMAPPED) {
            uintptr_t a = x > b->addr ? x : b->addr, z = e < b->addr + b->size ? e : b->addr + b->size;
            if (a < z) k += (align_up_c(p, z) - align_down_c(p, a)) / p->chunk;
        }
        if (b == last) break;
    }
    return k;
}

static void plan_gap(const dmm_pool *p, const pool_block *first, const pool_block *last, uint64_t n, plan *best) {
    uintptr_t glo = first->addr, ghi = last->addr + last->size;
    for (const pool_block *b = first;; b = b->next) {
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
                best->first = (pool_block *)(uintptr_t)first;
            }
        }
        if (b == last) break;
    }
}

/* The growth needing the fewest new chunks to make a free block of `n` bytes (under the lock). A
 * run's tail counts as unbounded: when the cheapest place is the end of a run whose VA is too short,
 * the plan asks for that run to be extended first (extend_regions > 0). */
static bool plan_growth(const dmm_pool *p, const pool_heap *h, uint64_t n, bool allow_extend, plan *best) {
    memset(best, 0, sizeof *best);
    const uint64_t C = p->chunk;
    for (size_t r = 0; r < h->nruns; r++) {
        const pool_block *first = NULL, *prevb = NULL;
        uint64_t total = 0;
        bool any_unmapped = false;
        for (const pool_block *b = h->runs[r].first;; prevb = b, b = b->next) {
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

/* A warm start's plan (under the lock): `n` bytes of unmapped VA only — the lowest unmapped block of
 * at least n bytes; else, with allow_extend, the run whose unmapped tail is nearest n, extended first.
 * (plan_growth would take the cheapest window, and a free block already mapped costs nothing.) */
static bool plan_fresh(const dmm_pool *p, const pool_heap *h, uint64_t n, bool allow_extend, plan *best) {
    memset(best, 0, sizeof *best);
    for (size_t r = 0; r < h->nruns; r++)
        for (pool_block *b = h->runs[r].first; b != NULL; b = b->next)
            if (b->kind == BK_UNMAPPED && b->size >= n && (!best->found || b->addr < best->lo)) {
                best->found = true;
                best->lo = b->addr;
                best->hi = b->addr + n;
                best->k = n / p->chunk;
                best->first = b;
            }
    if (best->found || !allow_extend) return best->found;
    uint64_t fewest = UINT64_MAX;
    for (size_t r = 0; r < h->nruns; r++) {
        const pool_block *tail = h->runs[r].first;
        while (tail != NULL && tail->next != NULL) tail = tail->next;
        uint64_t missing = n - (tail != NULL && tail->kind == BK_UNMAPPED ? tail->size : 0);
        if (missing < fewest) {
            fewest = missing;
            best->found = true;
            best->k = n / p->chunk;
            best->extend_run = r;
            best->extend_regions = (missing + p->region - 1) >> p->region_shift;
        }
    }
    return best->found;
}

/* The highest live bytes the pool has seen (sampled across heaps; exact for one heap). */
static uint64_t live_peak_estimate(dmm_pool *p) {
    uint64_t sum = 0, mx = 0;
    for (pool_heap *g = heaps_head(p); g != NULL; g = heap_next(g)) {
        sum += dmm_atomic_load_relaxed(&g->live_bytes);
        uint64_t pk = dmm_atomic_load_relaxed(&g->live_peak);
        if (pk > mx) mx = pk;
    }
    dmm_atomic_max_relaxed(&p->sampled_live_peak, sum);
    uint64_t s = dmm_atomic_load_relaxed(&p->sampled_live_peak);
    return s > mx ? s : mx;
}

/* The stock a growing pool keeps mapped ahead of its mallocs (stock.c): stock_bytes, at most the
 * live peak / POOL_STOCK_SHARE (whole quanta; 0 below one quantum, and without a stock). */
static uint64_t stock_target(const dmm_pool *p, uint64_t live_peak) {
    uint64_t share = align_down_c(p, live_peak / POOL_STOCK_SHARE);
    return share < p->stock_cap ? share : p->stock_cap;
}

/* a + b, or UINT64_MAX when that does not fit: a limit too large to state is no limit */
static uint64_t add_saturated(uint64_t a, uint64_t b) {
    uint64_t sum;
    return dmm_add_overflows(a, b, &sum) ? UINT64_MAX : sum;
}

/* x × permille / 1000 without the overflow of x × permille (saturated: permille is the caller's, up to 2^32) */
static uint64_t permille_of(uint64_t x, uint32_t permille) {
    uint64_t whole;
    if (dmm_mul_overflows(x / 1000, permille, &whole)) return UINT64_MAX;
    return add_saturated(whole, (x % 1000) * permille / 1000);
}

/* The retention limit: (1 + retain/1000) × the live peak, plus what re-mapping taught it (settled),
 * at most (1 + settle/1000) × the live peak (saturated at UINT64_MAX: no limit). */
uint64_t dmm__pool_retention_limit(dmm_pool *p) {
    uint64_t peak = live_peak_estimate(p), learned = dmm_atomic_load_relaxed(&p->settled);
    uint64_t room = permille_of(peak, p->settle_permille - p->retain_permille);
    uint64_t limit = add_saturated(peak, permille_of(peak, p->retain_permille));
    return add_saturated(add_saturated(limit, learned < room ? learned : room), stock_target(p, peak));
}

/* One malloc's growth, across its attempts. */
typedef struct growth {
    dmm_pool *p;
    pool_heap *h;
    uint64_t n;       /* bytes, rounded to align */
    size_t requested; /* bytes as requested */
    uint64_t most;    /* > 0: a warm start's handle size (else handle_most) */
    bool told;        /* a warm start or the stock: commits what it was told to, moves nothing */
    plan pl;
    tgtvec tv;  /* the window's COMMITTING pieces */
    size_t nt;
    srcvec sv;  /* the chunks moved or aliased into them */
    pool_block *rec, *rec2; /* records held privately for the fix-up's splits */
    dmm_status fail;    /* the last drive's failed commit (its sentence is the thread's last error) */
    size_t fail_j;      /* the piece whose commit failed, at [fail_at, fail_at + fail_len), in handles of */
    uintptr_t fail_at;  /* fail_handle bytes (the last one the rest) */
    uint64_t fail_len;
    uint64_t fail_handle;
    uintptr_t stock_at; /* where the stock thread should commit next (0: nowhere): see malloc_slow */
    uintptr_t at;       /* > 0: the place a heap's plan has for this malloc (follow.c): grown and taken there */
    bool at_planned;    /* at is the plan's place for it (else the place of what the plan does not place) */
} growth;

/* Whether [at, at + n) lies in h's VA (or at its first run's end) over FREE and UNMAPPED blocks only. */
static bool place_growable(const pool_heap *h, uintptr_t at, uint64_t n) {
    const pool_block *b = dmm__heap_block_at(h, at);
    for (; b != NULL && b->addr < at + n; b = b->next)
        if (b->kind != BK_FREE && b->kind != BK_UNMAPPED) return false;
    return true; /* what passes the run's end is VA the plan asks for (growth_plan_at) */
}

/* A growth of `n` bytes on h for a malloc of `requested` bytes (0: the stock's), nothing planned yet. */
static void growth_init(growth *g, dmm_pool *p, pool_heap *h, uint64_t n, size_t requested) {
    memset(g, 0, sizeof *g);
    g->p = p;
    g->h = h;
    g->n = n;
    g->requested = requested;
    g->fail_j = SIZE_MAX;
}

/* Under h's lock: takes a block that fits (true; *s = DMM_OK, or out of host memory), or reports the
 * last growth's failure when nothing fits (true); false: grow. */
static bool growth_fit(growth *g, int attempt, void **out, dmm_status *s) {
    pool_heap *h = g->h;
    dmm__heap_quick_flush(h); /* the plan below reads the free layout: the parked blocks merge first */
    while (g->at != 0) {
        pool_block *f = dmm__heap_block_at(h, g->at);
        bool planned = g->at_planned;
        if (f != NULL && f->kind == BK_FREE && f->addr + f->size >= g->at + g->n) {
            pool_block *b = take_at(h, f, g->at, g->n, g->requested);
            if (b != NULL) {
                h->grown_mallocs += attempt != 0;
                h->planned_mallocs += planned;
                if (look_due(h)) dmm__follow_look(g->p, h);
                *out = (void *)b->addr;
                if (g->fail != DMM_OK) dmm_clear_error();
                *s = DMM_OK;
                return true;
            }
        }
        if (g->fail == DMM_OK && place_growable(h, g->at, g->n) && (attempt == 0 || !planned))
            return false; /* grow it there */
        /* taken, or the growth there failed: the plan's spill place (outside its range), then best fit */
        if (planned) dmm__follow_missed(h, false);
        g->at = planned && g->fail == DMM_OK ? dmm__follow_spill_at(h, g->n) : 0;
        g->at_planned = false;
        attempt = 0;
    }
    pool_block *b = dmm__heap_bin_find(h, g->n);
    if (b != NULL) {
        if (take(h, b, g->n, g->requested)) {
            h->grown_mallocs += attempt != 0;
            if (look_due(h)) dmm__follow_look(g->p, h);
            if (g->stock_at == 0 && h->stock_end != 0) g->stock_at = dmm__pool_stock_refill_at(g->p, h, b);
            *out = (void *)b->addr;
            if (g->fail != DMM_OK) dmm_clear_error(); /* the failed commit is moot: another thread's memory fit */
            *s = DMM_OK;
        } else {
            *s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool malloc of %zu bytes: out of host memory for the block table",
                               g->requested);
        }
        return true;
    }
    if (g->fail != DMM_OK) { /* the last growth failed and nothing fits: report it (its sentence is set) */
        *s = g->fail;
        return true;
    }
    return false;
}

/* plan (under h's lock): the window; when there is no place at all, or the cheapest is a run's end
 * whose VA is too short, more VA first, preferably right after that run (once; if that is taken, a
 * new run of its own). */
static dmm_status growth_plan_at(growth *g);

static dmm_status growth_plan(growth *g) {
    dmm_pool *p = g->p;
    if (g->at != 0) return growth_plan_at(g);
    bool extended = false;
    for (;;) {
        bool found = g->most ? plan_fresh(p, g->h, g->n, !extended, &g->pl)
                             : plan_growth(p, g->h, g->n, !extended, &g->pl);
        if (found && g->pl.extend_regions == 0) return DMM_OK;
        size_t regions = found ? (size_t)g->pl.extend_regions : (size_t)((g->n + p->region - 1) >> p->region_shift);
        size_t prefer = found ? g->pl.extend_run : SIZE_MAX;
        if (!dmm__pool_grow_va(p, g->h, regions, prefer)) return dmm_last_status();
        extended = true;
    }
}

/* plan, at the place a heap's plan has for the malloc (under h's lock; place_growable held): the window
 * is [at, at + n); VA first where it passes the end of its run (the run must grow in place). */
static dmm_status growth_plan_at(growth *g) {
    dmm_pool *p = g->p;
    pool_heap *h = g->h;
    memset(&g->pl, 0, sizeof g->pl);
    size_t r = 0;
    while (r < h->nruns && (g->at < h->runs[r].lo || g->at > h->runs[r].hi)) r++; /* (its end: grown there) */
    if (r == h->nruns) return dmm_error_set(DMM_ERR_BUSY, "pool: the planned place %p is not in the heap's VA",
                                            (void *)g->at);
    if (g->at + g->n > h->runs[r].hi) {
        const uintptr_t lo = h->runs[r].lo;
        size_t more = (size_t)((g->at + g->n - h->runs[r].hi + p->region - 1) >> p->region_shift);
        if (!dmm__pool_grow_va(p, h, more, r)) return dmm_last_status();
        if (h->runs[r].lo != lo || h->runs[r].hi < g->at + g->n)
            return dmm_error_set(DMM_ERR_BUSY, "pool: the VA after the planned place %p is taken", (void *)g->at);
    }
    pool_block *first = dmm__heap_block_at(h, g->at), *last = first;
    if (first == NULL) return dmm_error_set(DMM_ERR_BUSY, "pool: no block holds the planned place %p", (void *)g->at);
    while (last->next != NULL && last->addr + last->size < g->at + g->n) last = last->next;
    g->pl.found = true;
    g->pl.lo = g->at;
    g->pl.hi = g->at + g->n;
    g->pl.first = first;
    g->pl.k = window_cost(p, first, last, g->pl.lo, g->pl.hi);
    return DMM_OK;
}

/* carve (under h's lock): the unmapped chunks inside the window become COMMITTING pieces, then, as far
 * as the retention limit asks, whole free chunks of this heap become sources. Returns the bytes of
 * sources still wanted from other heaps in *want_more. */
static dmm_status growth_carve(growth *g, uint64_t *want_more) {
    dmm_pool *p = g->p;
    pool_heap *h = g->h;
    const plan *pl = &g->pl;
    *want_more = 0;
    g->nt = 0;
    if (g->tv.cap < pl->k + 1) {
        ptarget *nv = realloc(g->tv.v, ((size_t)pl->k + 1) * sizeof *nv);
        if (nv == NULL)
            return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool malloc of %zu bytes: out of host memory", g->requested);
        g->tv.v = nv;
        g->tv.cap = (size_t)pl->k + 1;
    }
    if (!dmm__heap_reserve_blocks(h, 2 * (size_t)pl->k + 2))
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool malloc of %zu bytes: out of host memory", g->requested);
    for (pool_block *x = pl->first, *nx; x != NULL && x->addr < pl->hi; x = nx) {
        nx = x->next;
        if (x->kind != BK_UNMAPPED || x->addr + x->size <= pl->lo) continue;
        uintptr_t a = align_down_c(p, pl->lo > x->addr ? pl->lo : x->addr);
        uintptr_t z = align_up_c(p, pl->hi < x->addr + x->size ? pl->hi : x->addr + x->size);
        if (a < x->addr) a = x->addr;
        ptarget *t = &g->tv.v[g->nt++];
        t->b = dmm__heap_carve(h, x, a, z - a, BK_COMMITTING);
        t->room = z - a;
        t->done = 0;
        t->seq = 0;
    }
    g->rec = dmm__heap_block_new(h);  /* for the fix-up's split: held privately */
    g->rec2 = dmm__heap_block_new(h); /* and for cutting out a chunk the failed commit left poisoned */
    /* the retention limit: move whole free chunks rather than grow beyond it */
    uint64_t cap = dmm__pool_retention_limit(p);
    uint64_t committed = committed_once(p), need = pl->k * p->chunk, want = 0;
    if (committed + need > cap && !g->told) /* a warm start or the stock commits what it was told to */
        want = committed + need - cap < need ? committed + need - cap : need;
    g->sv.n = 0;
    /* a heap that follows a plan moves what its plan leaves unused first, then, when that is not enough
     * (its first turns, while the last unplanned turn's blocks still hold the plan's places), the rest */
    uint64_t got = dmm__pool_carve_sources(p, h, want, pl->lo, pl->hi, g->tv.v, g->nt, p->can_alias, false, true, &g->sv);
    if (got < want && h->follow != NULL)
        got += dmm__pool_carve_sources(p, h, want - got, pl->lo, pl->hi, g->tv.v, g->nt, p->can_alias, false, false,
                                       &g->sv);
    *want_more = got < want ? want - got : 0;
    return DMM_OK;
}

/* carve, continued (no lock held): sources from other heaps, one lock at a time. */
static uint64_t growth_carve_others(growth *g, uint64_t want) {
    uint64_t got = 0;
    for (pool_heap *o = heaps_head(g->p); o != NULL && got < want; o = heap_next(o)) {
        if (o == g->h) continue;
        dmm__pool_poll(g->p, o); /* its fence decides which of its free chunks may move */
        heap_lock(o);
        got += dmm__pool_carve_sources(g->p, o, want - got, 0, 0, g->tv.v, g->nt, false, true, true, &g->sv);
        heap_unlock(o);
    }
    return got;
}

/* drive: a commit failed (the sentence is set, the caller's context added) */
static void growth_failed(growth *g, dmm_status s, size_t j, const commit_failure *f) {
    g->fail = dmm__error_wrap(s, "pool malloc of %zu bytes on stream %p: committing memory for it failed",
                              g->requested, g->h->stream);
    g->fail_j = j;
    g->fail_at = f->at;
    g->fail_len = f->len;
    g->fail_handle = f->handle;
}

/* The largest new handle a growth for `n` bytes commits: max_chunk, or with a divisor n / divisor
 * rounded down to the quantum, between the floor and max_chunk; the floor is min_chunk, or with a
 * floor divisor the live peak / that when larger (at most max_chunk). */
static uint64_t handle_most(dmm_pool *p, uint64_t n) {
    if (p->handle_divisor == 0) return p->max_chunk;
    uint64_t floor = p->min_chunk;
    if (p->floor_divisor != 0) {
        uint64_t share = align_down_c(p, live_peak_estimate(p) / p->floor_divisor);
        if (share > floor) floor = share < p->max_chunk ? share : p->max_chunk;
    }
    uint64_t most = align_down_c(p, n / p->handle_divisor);
    return most < floor ? floor : most > p->max_chunk ? p->max_chunk : most;
}

/* Whether source s was re-mapped by the drive: aliased at its new place, or moved (decommitted there). */
static bool source_remapped(const source *s) {
    return s->aliased || (s->role == SRC_MOVE && dmm__pool_source_gone(s));
}

/* Moves the sources of piece j that are like sv[first] (untried moves of the same size), up to the
 * batch the mechanism can hold unmapped, into [cur, ...): each decommitted at its old place, then those
 * that went committed here in one call (access granted once). Returns the new cur. */
static uintptr_t move_batch(growth *g, size_t j, size_t first, uintptr_t cur) {
    dmm_pool *p = g->p;
    uint64_t size = g->sv.v[first].bytes, limit = p->can_commit_pieces ? p->move_batch : 0, gone = 0, taken = 0;
    for (size_t i = first; i < g->sv.n; i++) {
        source *src = &g->sv.v[i];
        if (src->piece != j || src->role != SRC_MOVE || src->tried || src->bytes != size) continue;
        if (taken > 0 && taken + size > limit) break;
        taken += size;
        dmm__pool_decommit_one(p, src);
        if (!dmm__pool_source_gone(src)) continue; /* its room is filled with new memory below */
        dmm_atomic_add_relaxed(&p->chunks_moved, 1);
        gone += size;
    }
    if (gone == 0) return cur;
    commit_failure f;
    dmm_status s = dmm__pool_commit_one(p, cur, gone, false, size, &f);
    if (s != DMM_OK) {
        growth_failed(g, s, j, &f);
        return cur;
    }
    return cur + gone;
}

/* drive (no lock held). Each piece: first the chunks aliased into it (mapped here at once, the old
 * place decommitted once its fence completed), then those moved into it (decommitted there, committed
 * here: the mechanism's cache hands the same handles back; same-sized ones in batches of up to
 * move_batch bytes, one commit and one grant each), then new chunks for the rest (split at
 * handle_most; in one call where the mechanism has commit_pieces, so that access is granted once, not
 * per handle). Stops at the first failed commit. */
static void growth_drive(growth *g) {
    dmm_pool *p = g->p;
    g->fail_j = SIZE_MAX;
    if (g->requested != 0) dmm_atomic_add_relaxed(&p->grows, 1); /* a malloc's or a warm start's (not the stock's) */
    for (size_t j = 0; j < g->nt && g->fail == DMM_OK; j++) {
        ptarget *t = &g->tv.v[j];
        uintptr_t cur = t->b->addr, end = cur + t->b->size;
        for (size_t i = 0; i < g->sv.n && g->fail == DMM_OK; i++) {
            source *src = &g->sv.v[i];
            if (src->piece != j || src->role != SRC_ALIAS) continue;
            if (dmm__pool_alias_one(p, src, cur) != DMM_OK) continue; /* its room gets new memory below */
            if (src->seq > t->seq) t->seq = src->seq;
            cur += src->bytes;
        }
        for (size_t i = 0; i < g->sv.n && g->fail == DMM_OK; i++)
            if (g->sv.v[i].piece == j && g->sv.v[i].role == SRC_MOVE && !g->sv.v[i].tried) cur = move_batch(g, j, i, cur);
        uint64_t most = g->most ? g->most : handle_most(p, g->n);
        while (g->fail == DMM_OK && cur < end) { /* one call where the mechanism cuts the handles itself */
            uint64_t len = p->can_commit_pieces || end - cur < most ? end - cur : most;
            commit_failure f;
            dmm_status s = dmm__pool_commit_one(p, cur, len, true, most, &f);
            if (s != DMM_OK) growth_failed(g, s, j, &f);
            else cur += len;
        }
        t->done = cur - t->b->addr;
    }
    /* the limit made this growth re-map memory: let it rise by as much (see dmm_pool.settled) */
    uint64_t remapped = 0;
    for (size_t i = 0; i < g->sv.n; i++)
        if (source_remapped(&g->sv.v[i])) remapped += g->sv.v[i].bytes;
    if (remapped > 0) dmm_atomic_add_relaxed(&p->settled, remapped);
}

/* Whether the drive changed the mapping: a piece committed in part, or a source re-mapped. */
static bool growth_mapped_any(const growth *g) {
    for (size_t j = 0; j < g->nt; j++)
        if (g->tv.v[j].done > 0) return true;
    for (size_t i = 0; i < g->sv.n; i++)
        if (source_remapped(&g->sv.v[i])) return true;
    return false;
}

/* The flags of a failed span taken as one handle. */
static const bool one_poisoned = true;

/* The failed commit's handles (of fail_handle bytes) that the mechanism keeps mapped and poisoned (its
 * undo could not unmap them), asked outside every pool lock like every mechanism call: *poisoned =
 * NULL when none is (or the mechanism cannot say), else one flag per handle; *n = their count. A
 * question that fails adds its sentence to g->fail and counts as none. Out of host memory for the
 * flags: the whole failed span counts as one poisoned handle (kept out of use rather than planned
 * over, where a later commit would fail). */
static void failed_poisoned(growth *g, const bool **poisoned, size_t *n) {
    dmm_pool *p = g->p;
    *poisoned = NULL;
    *n = 0;
    bool any = false;
    if (g->fail_j == SIZE_MAX || !dmm_mechanism_has_slot(p->mech, DMM_SLOT_IS_QUARANTINED)) return;
    if (dmm_mechanism_is_quarantined(p->mech, (const void *)g->fail_at, (size_t)g->fail_len, &any) != DMM_OK) {
        g->fail = dmm__error_wrap(g->fail, "pool malloc of %zu bytes on stream %p: committing memory for it failed, "
                                           "and asking the mechanism whether it quarantined the chunk failed too",
                                  g->requested, g->h->stream);
        return;
    }
    if (!any) return;
    size_t count = (size_t)((g->fail_len + g->fail_handle - 1) / g->fail_handle);
    bool *v = count > 1 ? calloc(count, sizeof *v) : NULL;
    if (v == NULL) { /* one handle, or no host memory: the span as one */
        g->fail_handle = g->fail_len;
        *poisoned = &one_poisoned;
        *n = 1;
        return;
    }
    for (size_t k = 0; k < count; k++) {
        uintptr_t at = g->fail_at + (uint64_t)k * g->fail_handle;
        uint64_t len = g->fail_at + g->fail_len - at < g->fail_handle ? g->fail_at + g->fail_len - at : g->fail_handle;
        if (dmm_mechanism_is_quarantined(p->mech, (const void *)at, (size_t)len, &v[k]) != DMM_OK) v[k] = true;
    }
    *poisoned = v;
    *n = count;
}

/* fix-up, under h's lock: block b holds the failed span; its handles flagged in `poisoned` become
 * POISONED blocks (out of use forever; requested = 1: still mapped, so they count in committed, as a
 * trimmed chunk whose unmap failed does), the rest of the span UNMAPPED. Returns what of b lies past
 * the span (NULL: nothing). The splits draw on records the caller reserved. */
static pool_block *cut_poisoned(growth *g, pool_block *b, const bool *poisoned) {
    dmm_pool *p = g->p;
    pool_heap *h = g->h;
    uintptr_t end = g->fail_at + g->fail_len;
    pool_block *after = b->addr + b->size > end ? dmm__heap_split(h, b, end - b->addr) : NULL;
    size_t k = 0;
    for (uintptr_t x = g->fail_at; x < end && b != NULL; x += g->fail_handle, k++) {
        uint64_t len = end - x < g->fail_handle ? end - x : g->fail_handle;
        if (!poisoned[k]) continue;
        pool_block *cut = b->addr < x ? dmm__heap_split(h, b, x - b->addr) : b;
        if (cut != b) dmm__heap_make_unmapped(h, b); /* the good handles before it */
        b = cut->size > len ? dmm__heap_split(h, cut, len) : NULL;
        cut->kind = BK_POISONED;
        cut->requested = 1;
        p->clen[qidx(p, x)] = (uint32_t)(len / p->chunk);
        h->committed += len;
        committed_add(p, len);
        dmm_atomic_add_relaxed(&p->chunks_poisoned, 1);
    }
    if (b != NULL) dmm__heap_make_unmapped(h, b);
    return after;
}

/* fix-up: committed parts become FREE (merging with their neighbours), the rest UNMAPPED; sources never
 * decommitted (a commit failed first) go back as they were.
 * A commit whose undo failed (the arena's rollback leak) leaves its handles mapped and poisoned in the
 * mechanism: those are never committed again, so they must not go back UNMAPPED (every later growth
 * planned over them would fail), and they are mapped (they count in committed). */
static void growth_fixup(growth *g) {
    dmm_pool *p = g->p;
    pool_heap *h = g->h;
    const bool *poisoned = NULL;
    size_t npoisoned = 0;
    failed_poisoned(g, &poisoned, &npoisoned);
    heap_lock(h);
    const bool grew = growth_mapped_any(g);
    if (grew) h->grown_at = h->mallocs + 1; /* (follow.c: a heap that grows may plan) */
    dmm__heap_block_put(h, g->rec); /* back to the spares: a split below takes it */
    dmm__heap_block_put(h, g->rec2);
    if (npoisoned > 1 && !dmm__heap_reserve_blocks(h, 2 * npoisoned + 2)) { /* no host memory: the span as one */
        free((void *)poisoned);
        poisoned = &one_poisoned;
        npoisoned = 1;
        g->fail_handle = g->fail_len;
    }
    for (size_t j = 0; j < g->nt; j++) {
        pool_block *t = g->tv.v[j].b;
        uint64_t done = g->tv.v[j].done;
        if (done < t->size) {
            pool_block *rest = done > 0 ? dmm__heap_split(h, t, done) : t;
            if (poisoned != NULL && j == g->fail_j && rest->addr <= g->fail_at &&
                rest->addr + rest->size >= g->fail_at + g->fail_len) /* (a warm layout's gap: inside rest) */
                rest = cut_poisoned(g, rest, poisoned);
            if (rest != NULL) dmm__heap_make_unmapped(h, rest);
        }
        if (done > 0) {
            h->committed += done;
            t->seq = g->tv.v[j].seq; /* aliased memory: the old place's last free (moving it elsewhere waits) */
            dmm__heap_make_free(h, t);
        }
    }
    /* a heap of a pool that plans records its mallocs while it grows (follow.c stops it once it has
     * settled); without room for the records it does not plan, and grows as any heap does */
    if (grew && p->plan_loops) (void)dmm__follow_init(h);
    heap_unlock(h);
    if (npoisoned > 1) free((void *)poisoned);
    for (size_t i = 0; i < g->sv.n; i++)
        if (!g->sv.v[i].tried) g->sv.v[i].o = dmm__pool_outcome_untouched();
    dmm__pool_sources_fixup(p, &g->sv, 0);
}

dmm_status dmm__pool_warm_grow(dmm_pool *p, pool_heap *h, uint64_t n, uint64_t most) {
    growth g;
    growth_init(&g, p, h, n, (size_t)n);
    g.most = most;
    g.told = true;
    if (dmm__pool_lost(p, "entering dmm_pool_warm")) return dmm__pool_malloc_refused(p, (size_t)n, h->stream);
    heap_lock(h);
    dmm__heap_quick_flush(h); /* the plan reads the free layout */
    uint64_t want_more = 0;
    dmm_status s = growth_plan(&g);
    if (s == DMM_OK) s = growth_carve(&g, &want_more); /* no sources: want_more stays 0 */
    heap_unlock(h);
    if (s == DMM_OK) {
        growth_drive(&g);
        growth_fixup(&g);
        s = g.fail;
    }
    free(g.sv.v);
    free(g.tv.v);
    return s;
}

uintptr_t dmm__pool_stock_refill_at(dmm_pool *p, const pool_heap *h, const pool_block *b) {
    uintptr_t end = h->stock_end;
    if (end == 0 || b->addr >= end) return 0;
    uint64_t left; /* the FREE bytes the fit left right before the stock's end */
    if (b->addr + b->size == end) left = 0;
    else if (b->next != NULL && b->next->kind == BK_FREE && b->next->addr + b->next->size == end) left = b->next->size;
    else return 0; /* the fit was not at the stock's end: the stock is as it was */
    return left < stock_target(p, live_peak_estimate(p)) / 2 ? end : 0;
}

/* The stock's plan (under the lock): [at, at + n) where `at` starts an UNMAPPED block (the VA right
 * after a growth's window or the last stock), n = the target less the FREE bytes that end at `at`
 * (what is left there), in whole quanta, at most that block's bytes and at most what the retention
 * limit leaves room for (a pool that stopped growing keeps no more than its limit). False: no such
 * block (another thread used or trimmed the place since). k = 0: nothing to commit (enough is free
 * there, or no room). */
static bool plan_stock(dmm_pool *p, const pool_heap *h, uintptr_t at, uint64_t target, plan *pl) {
    memset(pl, 0, sizeof *pl);
    for (size_t r = 0; r < h->nruns; r++) {
        if (at <= h->runs[r].lo || at >= h->runs[r].hi) continue; /* it extends a window: not at a run's ends */
        for (pool_block *b = h->runs[r].first; b != NULL; b = b->next) {
            if (b->addr + b->size != at) continue;
            pool_block *u = b->next;
            if (u == NULL || u->kind != BK_UNMAPPED) return false;
            uint64_t have = b->kind == BK_FREE ? b->size : 0;
            uint64_t n = have < target ? align_up_c(p, target - have) : 0;
            if (n > u->size) n = u->size; /* UNMAPPED blocks are whole quanta */
            uint64_t cap = dmm__pool_retention_limit(p), committed = committed_once(p);
            uint64_t room = committed < cap ? align_down_c(p, cap - committed) : 0;
            if (n > room) n = room;
            pl->found = true;
            pl->lo = at;
            pl->hi = at + n;
            pl->k = n / p->chunk;
            pl->first = u;
            return true;
        }
    }
    return false;
}

uint64_t dmm__pool_stock_grow(dmm_pool *p, pool_heap *h, uintptr_t at) {
    growth g;
    growth_init(&g, p, h, 0, 0);
    g.told = true;
    if (dmm__pool_lost(p, "growing the stock")) return 0;
    uint64_t target = stock_target(p, live_peak_estimate(p)), grown = 0;
    heap_lock(h);
    dmm__heap_quick_flush(h); /* the plan reads the free layout */
    uint64_t want_more = 0;
    bool found = target > 0 && plan_stock(p, h, at, target, &g.pl), go = found && g.pl.k > 0;
    g.n = g.pl.hi - g.pl.lo;
    /* one handle: a handle costs the same for 2 MiB and 256 MiB (DESIGN §6), and the driver serialises
     * this thread's calls with the mallocs', so the fewer the stock's handles the less they wait (GPT-2's
     * regrowth on the H200: 1.30 x native's time with the stock in handles of <= 1/8 of it, 0.97 x in one) */
    g.most = g.n;
    dmm_status s = go ? growth_carve(&g, &want_more) : DMM_OK; /* no sources: want_more stays 0 */
    if (!go) h->stock_end = found ? g.pl.hi : 0; /* enough there already: the stock ends at `at` */
    heap_unlock(h);
    if (go && s == DMM_OK) {
        growth_drive(&g);
        growth_fixup(&g);
        for (size_t j = 0; j < g.nt; j++) grown += g.tv.v[j].done;
        heap_lock(h); /* the next refill goes where this stock ends, if all of it was committed */
        h->stock_end = grown == g.n ? g.pl.hi : 0;
        heap_unlock(h);
    }
    free(g.sv.v);
    free(g.tv.v);
    dmm_clear_error(); /* nobody waits for the stock: a failure only means the next malloc grows itself */
    return grown;
}

dmm_status dmm__pool_malloc_slow(dmm_pool *p, pool_heap *h, uint64_t n, size_t requested, uintptr_t at, bool at_planned, void **out,
                                 uintptr_t *stock_at) {
    static const char entering[] = "entering dmm_pool_malloc's slow path";
    const uint64_t t0 = dmm_now_ns();
    growth g;
    growth_init(&g, p, h, n, requested);
    g.at = at;
    g.at_planned = at_planned;
    dmm_status s = DMM_OK;
    int attempt;
    for (attempt = 0; attempt < 16; attempt++) {
        if (attempt == 0 && !dmm__pool_lost(p, entering)) dmm__pool_poll(p, h);
        if (dmm__pool_lost(p, entering)) { /* before any call, or after a growth the loss cut short */
            s = dmm__pool_malloc_refused(p, requested, h->stream);
            break;
        }
        heap_lock(h);
        if (growth_fit(&g, attempt, out, &s)) {
            heap_unlock(h);
            break;
        }
        uint64_t want_more = 0;
        s = growth_plan(&g);
        if (s != DMM_OK && g.at != 0) { /* the planned place cannot grow: its spill place, then best fit */
            dmm_clear_error();
            bool planned = g.at_planned;
            if (planned) dmm__follow_missed(h, false);
            g.at = planned ? dmm__follow_spill_at(h, n) : 0;
            g.at_planned = false;
            heap_unlock(h);
            continue;
        }
        if (s == DMM_OK) s = growth_carve(&g, &want_more);
        heap_unlock(h);
        if (s != DMM_OK) break;
        if (growth_carve_others(&g, want_more) < want_more && g.at != 0 && g.at_planned) {
            /* a planned place that only new memory beyond the retention limit could map (the memory that
             * is to move there is still in use: a plan's first turns): best fit now, the place later */
            growth_fixup(&g); /* nothing driven: the pieces go back unmapped, the sources free */
            heap_lock(h);
            dmm__follow_missed(h, false);
            g.at = h->follow != NULL ? dmm__follow_spill_at(h, n) : 0;
            g.at_planned = false;
            heap_unlock(h);
            continue;
        }
        growth_drive(&g);
        growth_fixup(&g);
        /* a growth that only added memory (nothing moved or aliased: the pool is still growing) for a
         * request no larger than the stock ends where a stock would go next. Not after a larger one: the
         * VA after it is where the next, slightly larger request of its kind grows in place (GPT-2's
         * logits), and a stock there, with small blocks carved from it, makes that one all new memory */
        bool stockable = g.fail == DMM_OK && g.sv.n == 0 && g.at == 0 && n <= stock_target(p, live_peak_estimate(p));
        g.stock_at = stockable ? align_up_c(p, g.pl.hi) : 0;
    }
    if (attempt == 16)
        s = dmm_error_set(DMM_ERR_BUSY,
                          "pool malloc of %zu bytes on stream %p: other threads on the same stream took the memory "
                          "grown for it 16 times in a row; retry",
                          requested, h->stream);
    free(g.sv.v);
    free(g.tv.v);
    *stock_at = g.stock_at;
    dmm_atomic_add_relaxed(&p->slow_path_ns, dmm_now_ns() - t0);
    return s;
}
