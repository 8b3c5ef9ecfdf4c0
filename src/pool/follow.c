/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/follow.c — a heap that learns its loop (dmm_pool_config.plan_loops): it records its mallocs,
 * finds the period at which they repeat, has one turn of the loop placed by plan (planner.c, off the
 * allocating threads) and follows that plan.
 *
 * Why. A training step, a generate round and a serving iteration repeat: after a turn or two the heap
 * has seen the whole sequence of sizes and lifetimes. An online policy (best fit) either keeps a few
 * per cent of slack or re-maps memory every turn (GPT-2 training: ~500 chunks a step at 2 % slack,
 * none at 10 %). A plan of the turn places it within a few per cent of the live peak, with no driver
 * call once its places are mapped.
 *
 * Record (hot.h's count_malloc and count_free). Every malloc writes (size, event) at
 * records[ordinal mod the ring's size]; its free, once final, writes the free's event there while the
 * ring still holds it. The ring starts at POOL_RECORDS_FIRST records (2 MiB) and widens once, to
 * POOL_RECORDS_MOST (16 MiB), at a look that finds nothing to plan in a full ring of a heap that still
 * grows: a loop longer than half the first ring (a generate workload's whole round of varying
 * batches: 432,459 of its heap's mallocs for llama-generate) is found once the ring holds two turns of it
 * (records_from: the oldest ordinal the widened ring may hold). A heap that records keeps off the
 * hot path, which does not record (quick_cap 0: no hot block): its frees take free_rest, which records
 * them and, while no plan is followed, parks them on the quick lists (hot.h, quick_park_cap), and its
 * mallocs take malloc_rest, which records them, takes exact repeats from those lists and asks for the
 * look; a heap that follows a plan parks nothing (its anchors need merged free runs). A heap records
 * only while it is worth it: from its first growth or move (growth.c's fix-up starts the ring, its
 * parked blocks merged first) until a look finds no growth in a whole ring and no plan followed
 * (records_stop: the ring goes, the hot path comes back); a settled heap's mallocs and frees cost what
 * they cost without plans, and its next growth starts a new ring.
 * Events are the heap's mallocs and frees while it records, counted from 1: a loop's turn repeats them
 * exactly.
 *
 * Look (every POOL_LOOK_EVERY mallocs, or a 128th of a wider ring, by the malloc's caller: look_due;
 * while no job is being planned, and only in a heap that grew lately: one that serves its loop from
 * mapped memory needs no plan, nor a period whose latest turn grew nothing; while a plan is followed,
 * only for a longer period that is not a multiple of the plan's: the heap's larger loop; at most
 * POOL_LOOK_READS record reads per record held, multiples of the periods found skipped). A period d
 * passes when the sizes of the last 2d mallocs repeat at distance d and every malloc of the older turn
 * lived as long as the one d later (freed after as many events, or both still live). A part of a step
 * that happens to repeat twice passes too, and so would multiples of the loop's period (a look skips
 * them): the loop's is the largest passing period. The turn planned is the
 * older one; with a third turn in the ring, it starts where the least of its bytes stay live into the
 * next (the loop's quietest point). It is snapshotted as a job (the mallocs as items, lifetimes in
 * events from the turn's start; one freed during the next turn lives twice at one offset, [start, T)
 * and [0, end - T); one that outlives its own next malloc is not planned; every block of the heap's
 * first run that will still be there is a fixed item at its address) and posted to the planner. A turn
 * most of whose bytes stay (a model's layers built one by one) is not a loop.
 *
 * Install (the planner thread's answer, under the heap's lock): the plan is followed from the next turn
 * on, replacing a shorter plan, unless it is stale: a run was added or given back since the job was
 * made (plan_serial), the first run is not where the plan starts, or an equal or longer plan is
 * followed already. A plan reaching past the first run grows its VA first.
 *
 * Follow. The k-th malloc of a turn asks the planned size: its place is found through its anchor (one
 * hash lookup: the block the plan has right below the free run that holds the place; its next block is
 * that run) and carved there; a place not mapped yet is grown there by the slow path (growth.c), which
 * moves what the plan leaves unused first; a place taken, or one that only new memory beyond the
 * retention limit could map, is a miss. What the plan does not place (a miss, another size, a malloc
 * that is not planned) goes where the plan places nothing (dmm__follow_spill_at), so that it never takes
 * a place the plan needs. After a turn with no growth the chunks the plan leaves unused are given back
 * as far as the pool is above its retention limit.
 *
 * Lose and find the loop. Four mallocs in a row, or more than 1/8 of a turn, of other sizes than
 * planned suspend the plan (the loop went elsewhere: an evaluation, the next epoch's setup); its mallocs
 * then go where the plan places nothing, until the last POOL_RESYNC_GRAM sizes match the plan's
 * somewhere, and it goes on from there. A plan suspended for three turns, one that does not fit its
 * turns (more than 1/8 of their mallocs elsewhere, POOL_UNFIT_TURNS turns in a row), or one that keeps
 * losing the loop is dropped, and its period is not planned again for a while.
 *
 * Invariants: h->records != NULL ⇒ quick_cap = 0 and no QUICK hot block; h->follow != NULL ⇒ no QUICK
 * block in h (install and post_job merge them first); a planned malloc takes only a
 * FREE range (its place is checked against the blocks, never assumed), so a stale or wrong plan costs
 * memory or driver calls, never correctness. All under the heap's lock.
 */
#include <stdlib.h>
#include <string.h>

#include "pool/hot.h"

/* the fewest mallocs of a turn worth planning, and how often (in mallocs) the heap looks for a loop */
#define POOL_LOOP_MIN 4u
#define POOL_LOOK_EVERY 1024u
/* a look reads at most this many records per record held (find_period's budget) */
#define POOL_LOOK_READS 4u
/* the most periods a look weighs; a plan dropped for missing too much is not made again for this long */
#define POOL_PERIODS 16u
#define POOL_BAD_FOR ((uint64_t)4 * POOL_RECORDS_FIRST)
/* a plan that finds its loop again more often than this without a whole turn that fits goes */
#define POOL_RESYNCS 4u
/* turns in a row that do not fit the plan (more than 1/8 of their mallocs elsewhere) that drop it: its
 * first turns may not fit while the last unplanned turn's blocks are still where they were */
#define POOL_UNFIT_TURNS 4u
/* mallocs in a row of other sizes than planned that suspend a plan: the loop went elsewhere */
#define POOL_MISSES_IN_A_ROW 4u

/* A record, decoded: bytes, the malloc's event and the free's (0: not freed yet). */
typedef struct rec {
    uint64_t size, t_alloc, t_free;
} rec;

static rec rec_at(const pool_heap *h, uint64_t ord) {
    const precord *r = &h->records[ord & (h->nrecords - 1)];
    return (rec){(uint64_t)r->units << h->align_shift, r->t_alloc, r->life != 0 ? r->t_alloc + r->life : 0};
}

bool dmm__follow_init(pool_heap *h) {
    if (h->records != NULL) return true;
    precord *v = calloc(POOL_RECORDS_FIRST, sizeof *v);
    if (v == NULL) return false;
    dmm__heap_quick_flush(h); /* nothing parks: the frees take free_rest, which records them */
    h->records = v;
    h->nrecords = POOL_RECORDS_FIRST;
    h->records_from = h->mallocs; /* (a block of an earlier ordinal has no record: count_free skips it) */
    h->next_look = h->mallocs + POOL_LOOK_EVERY;
    h->quick_cap = 0;
    return true;
}

/* A heap that recorded a whole ring without growing and follows no plan has settled: it stops recording
 * (its ring goes, its quick lists come back) until it grows again (growth.c). */
static void records_stop(pool_heap *h) {
    free(h->records);
    h->records = NULL;
    h->nrecords = 0;
    h->records_from = h->mallocs;
    h->next_look = UINT64_MAX;
    h->quick_cap = POOL_QUICK_MAX_BLOCKS;
}

void dmm__follow_drop(pool_heap *h) {
    if (h->follow == NULL) return;
    dmm__plan_follow_free(h->follow);
    h->follow = NULL;
    h->next_look = h->records != NULL ? h->mallocs + POOL_LOOK_EVERY : UINT64_MAX;
}

void dmm__follow_fini(pool_heap *h) {
    dmm__follow_drop(h);
    free(h->records);
    h->records = NULL;
}

/* ---- the look: is the heap in a loop? ---- */

/* The newest mallocs whose records the ring holds. */
static uint64_t held(const pool_heap *h) {
    uint64_t n = h->mallocs - h->records_from;
    return n < h->nrecords ? n : h->nrecords;
}

/* Widens the ring to POOL_RECORDS_MOST (under the heap's lock), keeping the records it holds; false:
 * at its most, or no host memory (it stays as it was). */
static bool records_widen(pool_heap *h) {
    const uint64_t n = POOL_RECORDS_MOST;
    if (h->nrecords >= n) return false;
    precord *v = calloc(n, sizeof *v);
    if (v == NULL) return false;
    for (uint64_t ord = h->mallocs - held(h); ord < h->mallocs; ord++)
        v[ord & (n - 1)] = h->records[ord & (h->nrecords - 1)];
    h->records_from = h->mallocs - held(h);
    free(h->records);
    h->records = v;
    h->nrecords = n;
    return true;
}

/* Whether records [i - 2d + 1, i] repeat at distance d in size and in the events between mallocs, and
 * the older turn's lifetimes match the newer's (i = the newest ordinal; 2d ≤ the records held). */
static bool repeats(const pool_heap *h, uint64_t i, uint64_t d) {
    for (uint64_t k = 0; k < d; k++) {
        const rec a = rec_at(h, i - k), b = rec_at(h, i - k - d);
        if (a.size != b.size) return false;
    }
    const uint64_t T = rec_at(h, i).t_alloc - rec_at(h, i - d).t_alloc;
    for (uint64_t j = i - 2 * d + 1; j <= i - d; j++) {
        const rec a = rec_at(h, j), b = rec_at(h, j + d);
        if (b.t_alloc - a.t_alloc != T) return false;
        if (a.t_free == 0) {
            if (b.t_free != 0) return false;
        } else if (b.t_free != 0) {
            if (b.t_free - b.t_alloc != a.t_free - a.t_alloc) return false;
        } else if (h->events - b.t_alloc >= a.t_free - a.t_alloc) {
            return false; /* b has lived longer than a did */
        }
    }
    return true;
}

/* The smallest period from `from` on at which the newest mallocs repeat, or 0; multiples of skip[0..nskip)
 * (the plan's period, the periods this look found already) are not looked at: a loop's multiples pass
 * too, and a long loop with a short one inside (a generate round's decode steps) would otherwise be
 * reached only through every multiple of the short one. *budget: the record reads this look may still
 * make (every d costs two; a full check, 3d more): spent, the look ends with 0. */
static uint64_t find_period(const pool_heap *h, uint64_t from, const uint64_t *skip, size_t nskip, uint64_t *budget) {
    uint64_t i = h->mallocs - 1, most = held(h) / 2;
    if (held(h) < 2 * POOL_LOOP_MIN + 1) return 0;
    const rec last = rec_at(h, i), before = rec_at(h, i - 1);
    for (uint64_t d = from < POOL_LOOP_MIN ? POOL_LOOP_MIN : from; d <= most; d++) {
        if (*budget < 2) return 0;
        *budget -= 2;
        if (rec_at(h, i - d).size != last.size || rec_at(h, i - d - 1).size != before.size) continue;
        bool multiple = false;
        for (size_t s = 0; s < nskip && !multiple; s++) multiple = d % skip[s] == 0;
        if (multiple) continue;
        bool near = true; /* cheap looks first: the last 32, then 64 spread over the turn */
        for (uint64_t k = 2; k < 32 && k < d && near; k++) near = rec_at(h, i - k).size == rec_at(h, i - k - d).size;
        for (uint64_t k = 0; k < d && near; k += d / 64 + 1) near = rec_at(h, i - k).size == rec_at(h, i - k - d).size;
        if (!near) continue;
        if (*budget < 3 * d) return 0;
        *budget -= 3 * d;
        if (repeats(h, i, d)) return d;
    }
    return 0;
}

/* The bytes of turn [b, b + d) still live when the next turn starts (records in the ring). */
static uint64_t carried(const pool_heap *h, uint64_t b, uint64_t d) {
    uint64_t t = rec_at(h, b + d).t_alloc, sum = 0;
    for (uint64_t j = b; j < b + d; j++) {
        const rec r = rec_at(h, j);
        if (r.t_free == 0 || r.t_free > t) sum += r.size;
    }
    return sum;
}

/* ---- the plan ---- */


/* The fixed items: every block of run `r` that will still be there when the plan is followed — live
 * from before the turn's end (ordinal below `keep_below`), or in any state but FREE or UNMAPPED. */
static size_t add_fixed(const prun *run, uint64_t keep_below, dmm_place_item *items,
                        size_t n, size_t cap, uint32_t horizon) {
    for (const pool_block *b = run->first; b != NULL; b = b->next) {
        if (b->kind == BK_FREE || b->kind == BK_UNMAPPED) continue;
        if (b->kind == BK_LIVE) {
            if (b->ord >= keep_below) continue; /* this turn's or later: planned, gone by then */
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






/* Snapshots turn [b, b + d) over run 0 as a job for the planner thread and posts it (false: not a
 * loop worth planning, or no room to say it). */
static bool post_job(dmm_pool *p, pool_heap *h, uint64_t b, uint64_t d) {
    const prun *run = &h->runs[0];
    const uint64_t t0 = rec_at(h, b).t_alloc, T = rec_at(h, b + d).t_alloc - t0;
    if (T >= UINT32_MAX) return false;
    const uint32_t horizon = (uint32_t)T;
    /* most of a loop's memory comes and goes within its turn; a run of mallocs that mostly stays (a
     * model's layers built one by one, the forward pass of a step) is not a loop to plan */
    uint64_t turn_bytes = 0, planned_bytes = 0;
    for (uint64_t k = 0; k < d; k++) {
        const rec r = rec_at(h, b + k);
        turn_bytes += r.size;
        if (r.t_free != 0 && r.t_free - t0 <= T + (r.t_alloc - t0)) planned_bytes += r.size;
    }
    if (planned_bytes < turn_bytes / 4 * 3) return false;
    dmm__heap_quick_flush(h); /* a parked block is free, not a fixed item (add_fixed) */
    size_t cap = (size_t)d + run_blocks(run);
    pplan_job *j = calloc(1, sizeof *j);
    if (j == NULL) return false;
    j->items = malloc(cap * sizeof *j->items);
    j->slot_of = malloc(cap * sizeof *j->slot_of);
    j->slots = malloc((size_t)d * sizeof *j->slots);
    if (j->items == NULL || j->slot_of == NULL || j->slots == NULL) {
        dmm__planner_job_free(j);
        return false;
    }
    size_t n = 0;
    for (uint64_t k = 0; k < d; k++) {
        const rec r = rec_at(h, b + k);
        uint64_t start = r.t_alloc - t0, end = r.t_free != 0 ? r.t_free - t0 : UINT64_MAX;
        j->slots[k] = (pslot){r.size, UINT64_MAX, 0};
        if (end == UINT64_MAX || end > T + start) continue; /* outlives its own next malloc: not planned */
        dmm_place_item *x = &j->items[n];
        *x = (dmm_place_item){.size = r.size, .start = (uint32_t)start};
        if (end <= T) {
            x->end = (uint32_t)end;
        } else { /* freed in the next turn: alive from that turn's start too, at the same place */
            x->end = horizon;
            x->start2 = 0;
            x->end2 = (uint32_t)(end - T);
        }
        j->slot_of[n++] = (uint32_t)k;
    }
    j->planned = n;
    j->nitems = add_fixed(run, b + d, j->items, n, cap, horizon);
    uint64_t peak = dmm_atomic_load_relaxed(&h->live_peak);
    j->h = h;
    j->serial = h->plan_serial;
    j->period = d;
    j->phase = b;
    j->horizon = horizon;
    j->base = run->lo;
    j->ceiling = peak + peak / 1000 * p->settle_permille + p->chunk; /* (its last chunk, partly used) */
    j->chunk = p->chunk;
    if (j->nitems == SIZE_MAX || !dmm__planner_post(p, j)) {
        dmm__planner_job_free(j);
        return false;
    }
    h->plan_posted = true;
    return true;
}

static bool plan_period(dmm_pool *p, pool_heap *h, uint64_t d);

void dmm__follow_look(dmm_pool *p, pool_heap *h) {
    /* a long ring is looked through less often: a look reads up to POOL_LOOK_READS records per one held */
    h->next_look = h->mallocs + (h->nrecords / 128 > POOL_LOOK_EVERY ? h->nrecords / 128 : POOL_LOOK_EVERY);
    if (h->plan_posted || h->records == NULL || h->nruns == 0) return;
    if (h->grown_at + h->nrecords < h->mallocs) { /* no growth for a while: nothing to plan for */
        if (h->follow == NULL) records_stop(h);
        return;
    }
    /* a heap that follows a plan and still grows may be in a larger loop (the plan's turns, then
     * something else: an evaluation, the next epoch's setup): only a longer period, not a multiple of
     * the plan's, is looked for */
    const uint64_t current = h->follow != NULL ? h->follow->period : 0;
    /* The periods that pass, none a multiple of one found before it (a loop's multiples pass too): a
     * part of a step that happens to repeat twice passes (ViT's 236 mallocs inside its 1,385-malloc
     * step), and so does the step, found after it. The loop's is the smallest of which every larger
     * one is a multiple; with the multiples skipped, that is the largest passing one. found[]: the
     * plan's period, a bad one, and the passing ones. */
    uint64_t found[POOL_PERIODS + 2], loop = 0, budget = POOL_LOOK_READS * held(h);
    size_t nf = 0, np = 0;
    if (current != 0) found[nf++] = current;
    for (uint64_t d = find_period(h, current + 1, found, nf, &budget);
         d != 0 && np < POOL_PERIODS && nf < POOL_PERIODS + 2; d = find_period(h, d + 1, found, nf, &budget)) {
        found[nf++] = d;
        if (d != h->bad_period || h->mallocs >= h->bad_until) {
            loop = d;
            np++;
        }
    }
    if (loop != 0 && plan_period(p, h, loop)) return;
    /* a full ring, nothing to plan in it, and the heap grew within it (the cut-off above): perhaps a
     * loop longer than half of it. (Asking for a growth more recent than that came too late for
     * llama-generate, whose round grows first after 145,000 mallocs: the widened ring then held too
     * little of its first turn, and the loop was found two turns later.) */
    if (held(h) == h->nrecords) (void)records_widen(h);
}

/* Posts a turn of period d to the planner (true: posted). */
static bool plan_period(dmm_pool *p, pool_heap *h, uint64_t d) {
    /* the turn to plan: the older of the two seen; with a third in the ring, where in it the least stays
     * live into the next turn */
    bool three = 3 * d <= held(h);
    uint64_t oldest = h->mallocs - (three ? 3 : 2) * d, best_b = oldest, best = UINT64_MAX, step = d / 64 + 1;
    for (uint64_t b = oldest; three && b <= oldest + d; b += step) {
        uint64_t c = carried(h, b, d);
        if (c < best) {
            best = c;
            best_b = b;
        }
    }
    /* a loop served from mapped memory needs no plan: only one that grew (or re-mapped) in its latest
     * turn, after its growth to its peak, is worth the move to a plan's layout */
    if (h->grown_at + d <= h->mallocs) return false;
    return post_job(p, h, best_b, d);
}

/* ---- following ---- */

uintptr_t dmm__follow_spill_at(const pool_heap *h, uint64_t n) {
    const pfollow *f = h->follow;
    if (f == NULL) return 0;
    uintptr_t growable = 0; /* the first place where free and unmapped VA together hold n */
    uintptr_t best = 0;     /* the smallest mapped free range that holds n (best fit: the places the plan
                               left to what it does not place are reused as they were) */
    uint64_t best_len = UINT64_MAX;
    for (size_t i = 0; i < f->ngaps; i++) {
        uintptr_t glo = f->base + f->gaps[2 * i];
        uintptr_t ghi = f->gaps[2 * i + 1] == UINT64_MAX ? UINTPTR_MAX : f->base + f->gaps[2 * i + 1];
        if (ghi - glo < n) continue;
        uintptr_t seq = 0; /* where the free or unmapped VA the walk is in starts (0: in none) */
        for (const pool_block *b = dmm__heap_block_at(h, glo); b != NULL && b->addr < ghi; b = b->next) {
            if (b->kind != BK_FREE && b->kind != BK_UNMAPPED) {
                seq = 0;
                continue;
            }
            uintptr_t lo = b->addr < glo ? glo : b->addr, hi = b->addr + b->size > ghi ? ghi : b->addr + b->size;
            if (seq == 0) seq = lo;
            if (b->kind == BK_FREE && hi - lo >= n && hi - lo < best_len) { /* mapped and free: no driver call */
                best = lo;
                best_len = hi - lo;
            }
            if (growable == 0 && hi - seq >= n) growable = seq;
        }
        if (growable == 0 && seq != 0 && f->gaps[2 * i + 1] == UINT64_MAX) growable = seq; /* the run's end grows */
    }
    if (best != 0) return best;
    if (growable != 0) return growable;
    return h->runs[0].hi; /* past the run's end: its VA grows there */
}

/* A plan that does not fit its loop (a turn followed with more than 1/8 of its mallocs elsewhere, or
 * one that keeps losing the loop) goes, and its period is not planned again for a while. */
static void drop_bad(pool_heap *h) {
    h->bad_period = h->follow->period;
    h->bad_until = h->mallocs + POOL_BAD_FOR;
    dmm__follow_drop(h);
}

void dmm__follow_missed(pool_heap *h, bool other_size) {
    pfollow *f = h->follow;
    if (f == NULL) return;
    h->plan_misses++;
    f->turn_other++;
    f->misses_in_a_row = other_size ? f->misses_in_a_row + 1 : 0;
    if (other_size && (++f->turn_misses > f->period / 8 || f->misses_in_a_row >= POOL_MISSES_IN_A_ROW) &&
        !f->suspended) {
        f->suspended = true; /* the loop changed: wait for it to come back */
        f->suspended_at = h->mallocs;
    }
}

/* While suspended: whether the last sizes asked (the one of malloc `now` the newest) are the plan's
 * somewhere; if so the plan goes on from there (malloc now + 1 is the next slot). */
static bool resync(pfollow *f, uint64_t now) {
    if (now + 1 < POOL_RESYNC_GRAM) return false;
    uint64_t w[POOL_RESYNC_GRAM];
    for (unsigned i = 0; i < POOL_RESYNC_GRAM; i++) w[i] = f->recent[(now - (POOL_RESYNC_GRAM - 1 - i)) % POOL_RESYNC_GRAM];
    uint64_t key = dmm__plan_gram_hash(w);
    for (size_t j = (size_t)key & f->gram_mask; f->gram_key[j] != 0; j = (j + 1) & f->gram_mask) {
        if (f->gram_key[j] != key) continue;
        uint64_t k = f->gram_slot[j]; /* malloc `now` is slot k */
        f->phase = now >= k ? now - k : now + f->period - k;
        f->from = now + 1;
        f->turn = UINT64_MAX;
        f->turn_misses = 0;
        f->suspended = false;
        f->resyncs++;
        return true;
    }
    return false;
}

pool_block *dmm__follow_place(pool_heap *h, uint64_t n, size_t requested, uintptr_t *at,
                              bool *planned) {
    pfollow *f = h->follow;
    *at = 0;
    *planned = false;
    f->recent[h->mallocs % POOL_RESYNC_GRAM] = n;
    if (f->suspended) {
        if (resync(f, h->mallocs)) {
            *at = dmm__follow_spill_at(h, n); /* this one still above the plan; the next one planned */
            return NULL;
        }
        if (h->mallocs - f->suspended_at > 3 * f->period + POOL_LOOK_EVERY) { /* it did not come back */
            dmm__follow_drop(h);
            return NULL;
        }
        *at = dmm__follow_spill_at(h, n);
        return NULL;
    }
    if (h->mallocs < f->from) return NULL;
    if (h->nruns == 0 || h->runs[0].lo != f->base) { /* empty_cache gave the plan's run back */
        dmm__follow_drop(h);
        return NULL;
    }
    uint64_t k = (h->mallocs - f->phase) % f->period, turn = (h->mallocs - f->phase) / f->period;
    if (turn != f->turn) {
        /* a turn with no growth: what lies outside the plan is not needed (given back once the pool is
         * over its retention limit, i.e. the ceiling the plan was accepted under) */
        if (f->turn != UINT64_MAX && h->grown_at <= f->turn_start) f->shed_due = true;
        f->turn_start = h->mallocs;
        if (f->turn != UINT64_MAX) { /* a whole turn followed: did the plan fit it? */
            bool fit = f->turn_other <= f->period / 8;
            if (fit) f->resyncs = f->unfit_turns = 0;
            if ((!fit && ++f->unfit_turns > POOL_UNFIT_TURNS) || f->resyncs > POOL_RESYNCS) {
                drop_bad(h);
                return NULL;
            }
        }
        f->turn = turn;
        f->turn_misses = 0;
        f->turn_other = 0;
    }
    const pslot *s = &f->slots[k];
    if (s->size == n) f->misses_in_a_row = 0;
    if (s->size != n || s->off == UINT64_MAX) { /* a miss, or not planned: above the plan's range */
        if (s->size != n) dmm__follow_missed(h, true);
        else f->turn_other++;
        *at = h->follow != NULL ? dmm__follow_spill_at(h, n) : 0;
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
            if (look_due(h)) dmm__follow_look(h->pool, h); /* a longer loop than the plan's? */
            return b;
        }
    }
    *at = want; /* not mapped there yet, or not as the plan has it: the slow path looks closer */
    *planned = true;
    return NULL;
}
