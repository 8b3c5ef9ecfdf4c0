/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/follow.c — a heap that learns its loop: it records its mallocs, finds the period at which
 * they repeat, places one turn of the loop by plan (placement.h) and follows that plan from then on.
 *
 * Why. A training step, a generate round and a serving iteration repeat: after a turn or two the heap
 * has seen the whole sequence of sizes and lifetimes. An online policy (best fit) either keeps a few
 * per cent of slack or re-maps memory every turn (measured: GPT-2 training re-maps ~500 chunks a step
 * at 2 % slack, none at 10 %). A plan of the turn places it within a few per cent of the live peak with
 * no driver call once its places are mapped.
 *
 * Record. Every malloc writes (size, event) at records[ordinal mod POOL_RECORDS]; its free writes the
 * free's event there (if the record is still in the ring). Events are the heap's mallocs and frees
 * counted from 1: a loop's turn repeats them exactly.
 *
 * Look (every POOL_LOOK_EVERY mallocs while no plan is followed). A period d is found when the sizes of
 * the last 3d mallocs repeat at distance d and every malloc of the oldest turn lived as long as the one
 * d later (freed after as many events, or both still live). Of the candidate distances (earlier mallocs
 * of the newest size pair) the smallest that passes wins, so a layer that repeats inside a step (whose
 * activations live until the backward pass) is not taken for the loop. Only a heap that grew since the
 * turn it would plan looks further: one that serves its loop from mapped memory already needs no plan.
 *
 * Plan. The turn planned starts where the fewest of its own bytes are still live one turn later (the
 * loop's quietest point): its mallocs are the items, their lifetimes event ranges from the turn's
 * start; one freed during the next turn lives twice at one offset ([start, T) and [0, end - T)); one
 * that outlives its own next malloc, or is never freed, is not planned (best fit). Every block of the
 * heap's first run that will still be there (live before the turn's end, or in any state but free) is a
 * fixed item at its address. Offsets count from the run's start, so the plan reuses the memory mapped
 * there. A plan whose extent passes the pool's settled ceiling ((1 + settle/1000) × the live peak) is
 * dropped. For each planned malloc the plan also notes its anchor: the block right below the free run
 * that holds its place when it comes, found by sweeping the turn in event order.
 *
 * Follow (from the next turn's start). The k-th malloc of a turn asks the planned size: its place is
 * found through the anchor (a hash lookup: the anchor is LIVE and its next block the free run) and
 * carved there; a place not mapped yet is grown there by the slow path (growth.c), moving free chunks
 * from elsewhere under the retention limit; a size that differs, or a place taken, goes best fit (a
 * miss). While a plan is followed no block is parked (every free merges at once, so anchors hold). A
 * turn with more than 1/8 of its mallocs of another size than planned drops the plan: the loop changed;
 * the heap looks again. (A place taken is only a miss: the first turn followed finds the last turn's
 * blocks where they were.)
 *
 * Invariants: h->follow != NULL ⇒ no QUICK block in h; a planned malloc takes only a FREE range (its
 * place is checked against the blocks, never assumed), so a stale or wrong plan costs memory or
 * speed, never correctness. All under the heap's lock.
 */
#include <stdlib.h>
#include <string.h>

#include "pool/hot.h"
#include "pool/placement.h"

/* the fewest mallocs of a turn worth planning, and how often (in mallocs) the heap looks for a loop */
#define POOL_LOOP_MIN 4u
#define POOL_LOOK_EVERY 256u
/* the bounds of one plan's placement: a turn of a few thousand mallocs takes milliseconds */
#define POOL_PLAN_MAX_WORK ((uint64_t)1 << 25)
#define POOL_PLAN_MAX_INDEX ((uint64_t)1 << 22)
#define POOL_PLAN_RESTARTS 8u
#define POOL_PLAN_RESTART_WORK ((uint64_t)1 << 23)

static const precord *rec_at(const pool_heap *h, uint64_t ord) { return &h->records[ord & (POOL_RECORDS - 1)]; }

bool dmm__follow_init(pool_heap *h) {
    h->records = calloc(POOL_RECORDS, sizeof *h->records);
    h->next_look = h->records != NULL ? POOL_LOOK_EVERY : UINT64_MAX;
    return h->records != NULL;
}

void dmm__follow_drop(pool_heap *h) {
    if (h->follow == NULL) return;
    free(h->follow->slots);
    free(h->follow);
    h->follow = NULL;
    h->next_look = h->records != NULL ? h->mallocs + POOL_LOOK_EVERY : UINT64_MAX;
}

void dmm__follow_fini(pool_heap *h) {
    dmm__follow_drop(h);
    free(h->records);
    h->records = NULL;
}

/* ---- the look: is the heap in a loop? ---- */

/* Whether records [i - 3d + 1, i] repeat at distance d in size and in the events between mallocs, and
 * the oldest turn's lifetimes match the next turn's (i = the newest ordinal; 3d ≤ POOL_RECORDS). */
static bool repeats(const pool_heap *h, uint64_t i, uint64_t d) {
    for (uint64_t k = 0; k < 2 * d; k++) {
        const precord *a = rec_at(h, i - k), *b = rec_at(h, i - k - d);
        if (a->size != b->size) return false;
    }
    const uint64_t T = rec_at(h, i)->t_alloc - rec_at(h, i - d)->t_alloc;
    for (uint64_t j = i - 3 * d + 1; j <= i - d; j++) {
        const precord *a = rec_at(h, j), *b = rec_at(h, j + d);
        if (b->t_alloc - a->t_alloc != T) return false;
        if (a->t_free == 0) {
            if (b->t_free != 0) return false;
        } else if (b->t_free != 0) {
            if (b->t_free - b->t_alloc != a->t_free - a->t_alloc) return false;
        } else if (h->events - b->t_alloc >= a->t_free - a->t_alloc) {
            return false; /* b has lived longer than a did */
        }
    }
    return true;
}

/* The smallest period the newest mallocs repeat at, or 0. */
static uint64_t find_period(const pool_heap *h) {
    uint64_t i = h->mallocs - 1, most = POOL_RECORDS / 3;
    if (h->mallocs < 3 * POOL_LOOP_MIN) return 0;
    if (most > h->mallocs / 3) most = h->mallocs / 3;
    const precord *last = rec_at(h, i), *before = rec_at(h, i - 1);
    for (uint64_t d = POOL_LOOP_MIN; d <= most; d++) {
        if (rec_at(h, i - d)->size != last->size || rec_at(h, i - d - 1)->size != before->size) continue;
        bool near = true; /* a cheap look at the last 32 before the whole check */
        for (uint64_t k = 2; k < 32 && k < d && near; k++) near = rec_at(h, i - k)->size == rec_at(h, i - k - d)->size;
        if (near && repeats(h, i, d)) return d;
    }
    return 0;
}

/* The bytes of turn [b, b + d) still live when the next turn starts (records in the ring). */
static uint64_t carried(const pool_heap *h, uint64_t b, uint64_t d) {
    uint64_t t = rec_at(h, b + d)->t_alloc, sum = 0;
    for (uint64_t j = b; j < b + d; j++) {
        const precord *r = rec_at(h, j);
        if (r->t_free == 0 || r->t_free > t) sum += r->size;
    }
    return sum;
}

/* ---- the plan ---- */

typedef struct sweep_event {
    uint64_t t;
    uint32_t item;
    bool in; /* the item's interval starts (else ends) */
} sweep_event;

static int by_time(const void *a, const void *b) {
    const sweep_event *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->in != y->in) return x->in ? 1 : -1; /* ends first */
    return x->item < y->item ? -1 : x->item > y->item;
}

/* Anchors of the planned slots: the turn swept in event order with the items alive held sorted by
 * offset; a slot's anchor is the item alive right below its offset when it starts. False: out of memory. */
static bool find_anchors(pfollow *f, const dmm_place_item *items, size_t nitems, const uint32_t *slot_of,
                         uint32_t horizon) {
    size_t ne = 0;
    sweep_event *ev = malloc(4 * nitems * sizeof *ev);
    uint32_t *alive = malloc(nitems * sizeof *alive);
    if (ev == NULL || alive == NULL) {
        free(ev);
        free(alive);
        return false;
    }
    for (size_t i = 0; i < nitems; i++) {
        const dmm_place_item *x = &items[i];
        if (x->fixed) {
            ev[ne++] = (sweep_event){0, (uint32_t)i, true};
            continue;
        }
        ev[ne++] = (sweep_event){x->start, (uint32_t)i, true};
        ev[ne++] = (sweep_event){x->end, (uint32_t)i, false};
        if (x->end2 > x->start2) { /* the previous turn's, alive from the start */
            ev[ne++] = (sweep_event){0, (uint32_t)i, true};
            ev[ne++] = (sweep_event){x->end2, (uint32_t)i, false};
        }
    }
    qsort(ev, ne, sizeof *ev, by_time);
    size_t na = 0;
    for (size_t e = 0; e < ne; e++) {
        const dmm_place_item *x = &items[ev[e].item];
        size_t lo = 0, hi = na; /* the first alive item at or above x's offset */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (items[alive[mid]].off < x->off) lo = mid + 1;
            else hi = mid;
        }
        if (!ev[e].in) {
            if (lo < na && alive[lo] == ev[e].item) {
                memmove(&alive[lo], &alive[lo + 1], (na - lo - 1) * sizeof *alive);
                na--;
            }
            continue;
        }
        if (!x->fixed && ev[e].t == x->start && ev[e].t < horizon) {
            pslot *s = &f->slots[slot_of[ev[e].item]];
            s->anchor = lo > 0 ? f->base + items[alive[lo - 1]].off : 0;
        }
        memmove(&alive[lo + 1], &alive[lo], (na - lo) * sizeof *alive);
        alive[lo] = ev[e].item;
        na++;
    }
    free(ev);
    free(alive);
    return true;
}

/* The fixed items: every block of run `r` that will still be there when the plan is followed — live
 * from before the turn's end (ordinal below `keep_below`), or in any state but FREE or UNMAPPED. */
static size_t add_fixed(const pool_heap *h, const prun *run, uint64_t keep_below, dmm_place_item *items,
                        size_t n, size_t cap, uint32_t horizon) {
    for (const pool_block *b = run->first; b != NULL; b = b->next) {
        if (b->kind == BK_FREE || b->kind == BK_UNMAPPED) continue;
        if (b->kind == BK_LIVE) {
            uint64_t ord = h->mallocs - (uint32_t)((uint32_t)h->mallocs - b->ord);
            if (ord >= keep_below) continue; /* this turn's or later: planned, gone by then */
        }
        if (n == cap) return SIZE_MAX;
        items[n++] = (dmm_place_item){.size = b->size, .start = 0, .end = horizon, .off = b->addr - run->lo,
                                      .fixed = true};
    }
    return n;
}

static size_t run_blocks(const prun *run) {
    size_t n = 0;
    for (const pool_block *b = run->first; b != NULL; b = b->next) n++;
    return n;
}

/* Plans turn [b, b + d) over run 0 and follows it from the next turn's start (a plan that cannot be
 * made, or that would need more than the settled ceiling, is not followed). */
static void make_plan(dmm_pool *p, pool_heap *h, uint64_t b, uint64_t d) {
    const prun *run = &h->runs[0];
    const uint64_t t0 = rec_at(h, b)->t_alloc, T = rec_at(h, b + d)->t_alloc - t0;
    if (T >= UINT32_MAX) return;
    const uint32_t horizon = (uint32_t)T;
    size_t cap = (size_t)d + run_blocks(run);
    dmm_place_item *items = malloc(cap * sizeof *items);
    uint32_t *slot_of = malloc(cap * sizeof *slot_of);
    pfollow *f = calloc(1, sizeof *f);
    pslot *slots = malloc((size_t)d * sizeof *slots);
    if (items == NULL || slot_of == NULL || f == NULL || slots == NULL) goto out;
    f->slots = slots;
    f->period = d;
    f->phase = b;
    f->base = run->lo;
    size_t n = 0;
    uint64_t turn_bytes = 0, planned_bytes = 0;
    for (uint64_t k = 0; k < d; k++) {
        const precord *r = rec_at(h, b + k);
        turn_bytes += r->size;
        uint64_t start = r->t_alloc - t0, end = r->t_free != 0 ? r->t_free - t0 : UINT64_MAX;
        slots[k] = (pslot){r->size, UINT64_MAX, 0};
        if (end == UINT64_MAX || end > T + start) continue; /* outlives its own next malloc: best fit */
        dmm_place_item *x = &items[n];
        *x = (dmm_place_item){.size = r->size, .start = (uint32_t)start};
        if (end <= T) {
            x->end = (uint32_t)end;
        } else {
            x->end = horizon;
            x->start2 = 0;
            x->end2 = (uint32_t)(end - T);
        }
        slot_of[n++] = (uint32_t)k;
        planned_bytes += r->size;
    }
    size_t planned = n;
    /* most of a loop's memory comes and goes within its turn; a run of mallocs that mostly stays (a
     * model's layers built one by one, the forward pass of a step) is not a loop to plan */
    if (planned_bytes < turn_bytes / 4 * 3) goto out;
    n = add_fixed(h, run, b + d, items, n, cap, horizon);
    if (n == SIZE_MAX) goto out;
    dmm_place_limits lim = {POOL_PLAN_MAX_WORK, POOL_PLAN_MAX_INDEX, POOL_PLAN_RESTARTS, POOL_PLAN_RESTART_WORK};
    uint64_t extent = 0;
    unsigned orders = 0;
    if (dmm__place(items, n, horizon, &lim, &extent, &orders) != DMM_PLACE_OK) goto out;
    /* worth following only within the ceiling the pool settles at anyway */
    uint64_t peak = dmm_atomic_load_relaxed(&h->live_peak);
    uint64_t ceiling = peak + peak / 1000 * p->settle_permille + p->chunk; /* (its last chunk, partly used) */
    if (align_up_c(p, extent) > ceiling) goto out;
    const uintptr_t lo = run->lo; /* (growing the VA may move the runs) */
    if (lo + extent > run->hi) {
        size_t more = (size_t)((lo + extent - run->hi + p->region - 1) >> p->region_shift);
        if (!dmm__pool_grow_va(p, h, more, 0) || h->runs[0].lo != lo || h->runs[0].hi < lo + extent) {
            dmm_clear_error();
            goto out;
        }
    }
    for (size_t i = 0; i < planned; i++) slots[slot_of[i]].off = items[i].off;
    f->extent = extent;
    if (!find_anchors(f, items, n, slot_of, horizon)) goto out;
    f->from = b + ((h->mallocs - b + d - 1) / d) * d; /* the next turn's start */
    f->turn = UINT64_MAX;
    dmm__heap_quick_flush(h); /* while following, nothing parks (anchors must see merged free runs) */
    h->follow = f;
    h->plans++;
    f = NULL;
    slots = NULL;
out:
    free(items);
    free(slot_of);
    free(slots);
    free(f);
}

void dmm__follow_look(dmm_pool *p, pool_heap *h) {
    h->next_look = h->mallocs + POOL_LOOK_EVERY;
    if (h->follow != NULL || h->records == NULL || h->nruns == 0) return;
    uint64_t d = find_period(h);
    if (d == 0) return;
    /* the turn to plan: within the oldest of the three seen, where the least stays live into the next */
    uint64_t oldest = h->mallocs - 3 * d, best_b = oldest, best = UINT64_MAX, step = d / 64 + 1;
    for (uint64_t b = oldest; b <= oldest + d; b += step) {
        uint64_t c = carried(h, b, d);
        if (c < best) {
            best = c;
            best_b = b;
        }
    }
    if (h->grown_at <= best_b) return; /* it served the turn from mapped memory: nothing to gain */
    make_plan(p, h, best_b, d);
}

/* ---- following ---- */

void dmm__follow_missed(pool_heap *h, bool other_size) {
    pfollow *f = h->follow;
    if (f == NULL) return;
    h->plan_misses++;
    f->turn_other++;
    if (other_size && ++f->turn_misses > f->period / 8) dmm__follow_drop(h);
}

pool_block *dmm__follow_place(dmm_pool *p, pool_heap *h, uint64_t n, size_t requested, uintptr_t *at) {
    (void)p;
    pfollow *f = h->follow;
    *at = 0;
    if (h->mallocs < f->from) return NULL;
    uint64_t k = (h->mallocs - f->phase) % f->period, turn = (h->mallocs - f->phase) / f->period;
    if (turn != f->turn) {
        /* a turn with no growth: what lies outside the plan is not needed (given back once the pool is
         * over its retention limit, i.e. the ceiling the plan was accepted under) */
        if (f->turn != UINT64_MAX && h->grown_at <= f->turn_start) f->shed_due = true;
        f->turn_start = h->mallocs;
        f->turn = turn;
        f->turn_misses = 0;
        f->turn_other = 0;
    }
    const pslot *s = &f->slots[k];
    if (s->size != n) {
        dmm__follow_missed(h, true);
        return NULL;
    }
    if (s->off == UINT64_MAX) {
        f->turn_other++; /* best fit: it may land outside the plan */
        return NULL;
    }
    uintptr_t want = f->base + s->off;
    pool_block *free_run = NULL;
    if (s->anchor != 0) {
        const pool_block *a = dmm__heap_hash_find(h, s->anchor);
        if (a != NULL && a->kind == BK_LIVE) free_run = a->next;
    } else {
        free_run = h->runs[0].first;
    }
    if (free_run != NULL && free_run->kind == BK_FREE && free_run->addr <= want &&
        free_run->addr + free_run->size >= want + n) {
        pool_block *b = take_at(h, free_run, want, n, requested);
        if (b != NULL) {
            h->planned_mallocs++;
            return b;
        }
    }
    *at = want; /* not mapped there yet, or not as the plan has it: the slow path looks closer */
    return NULL;
}
