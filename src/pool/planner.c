/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/planner.c — the planner thread: turns a heap's loop, as follow.c snapshotted it (a job),
 * into the plan the heap follows, off the threads that allocate.
 *
 * Why a thread. Placing a turn of a few thousand mallocs well takes the placement's restarts (on
 * gpt2-train the greedy orders stop at 1.069 × the live peak, shaken ones reach 1.019): tens to
 * hundreds of milliseconds, which a malloc must not wait for. The heap goes on best fit meanwhile.
 *
 * What it owns: the thread (started at create with plan_loops, stopped at destroy before the heaps
 * go), the queue of jobs (FIFO; a heap has at most one job queued or in flight: follow.c's
 * plan_posted), and what a plan is made of beside the offsets: the anchors (a sweep of the turn in
 * event order), the resync table, the chunks the plan uses and the gaps it leaves, and the install
 * (under the heap's lock: followed from the next turn on unless stale; follow.c, "Install").
 *
 * dmm_pool_plan_sync waits until the queue is empty and no job is in flight (replays call it after
 * every malloc, so that a plan is followed from the same malloc on every run).
 *
 * Invariants: queue and w.stop change only under w.m, w.running only at start and stop (worker.c);
 * the thread holds no heap lock while it holds w.m; outstanding = jobs queued + the one in flight.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool/types.h"

/* the bounds of one plan's placement, off the allocating threads: the offline planner's restarts */
#define PLAN_MAX_WORK ((uint64_t)1 << 30)
#define PLAN_MAX_INDEX ((uint64_t)1 << 24)
#define PLAN_RESTARTS 61u
#define PLAN_RESTART_WORK ((uint64_t)1 << 28)
#define PLAN_SYNC_NS ((uint64_t)60 * 1000 * 1000 * 1000) /* dmm_pool_plan_sync's bound */

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


/* The table from a window of sizes to the slot it ends at (the first such slot: layers repeat). */
static bool build_grams(pfollow *f) {
    size_t cap = 16;
    while (cap < 2 * f->period) cap *= 2;
    f->gram_key = calloc(cap, sizeof *f->gram_key);
    f->gram_slot = malloc(cap * sizeof *f->gram_slot);
    if (f->gram_key == NULL || f->gram_slot == NULL) return false;
    f->gram_mask = cap - 1;
    for (uint64_t k = 0; k < f->period; k++) {
        uint64_t w[POOL_RESYNC_GRAM];
        for (unsigned i = 0; i < POOL_RESYNC_GRAM; i++)
            w[i] = f->slots[(k + f->period * POOL_RESYNC_GRAM - (POOL_RESYNC_GRAM - 1 - i)) % f->period].size;
        uint64_t key = dmm__plan_gram_hash(w);
        size_t j = (size_t)key & f->gram_mask;
        while (f->gram_key[j] != 0 && f->gram_key[j] != key) j = (j + 1) & f->gram_mask;
        if (f->gram_key[j] == 0) {
            f->gram_key[j] = key;
            f->gram_slot[j] = (uint32_t)k;
        }
    }
    return true;
}

/* The chunks the plan places something in (bit q: the q-th chunk from base): kept mapped. */
static bool mark_used(pfollow *f, const dmm_place_item *items, size_t planned, uint64_t chunk) {
    f->used_chunks = (size_t)((f->extent + chunk - 1) / chunk);
    f->used = calloc(f->used_chunks / 64 + 1, sizeof *f->used);
    if (f->used == NULL) return false;
    for (size_t i = 0; i < planned; i++)
        for (size_t q = (size_t)(items[i].off / chunk); q * chunk < items[i].off + items[i].size; q++)
            f->used[q / 64] |= (uint64_t)1 << (q % 64);
    return true;
}

static int by_off(const void *a, const void *b) {
    const dmm_place_item *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The gaps: where in [0, extent) no planned item ever lies, then [extent, UINT64_MAX). */
static bool find_gaps(pfollow *f, const dmm_place_item *items, size_t planned) {
    dmm_place_item *sorted = malloc((planned + 1) * sizeof *sorted);
    f->gaps = malloc(2 * (planned + 1) * sizeof *f->gaps);
    if (sorted == NULL || f->gaps == NULL) {
        free(sorted);
        return false;
    }
    memcpy(sorted, items, planned * sizeof *sorted);
    qsort(sorted, planned, sizeof *sorted, by_off);
    uint64_t covered = 0; /* the union of the planned ranges reaches here */
    f->ngaps = 0;
    for (size_t i = 0; i < planned; i++) {
        if (sorted[i].off > covered) {
            f->gaps[2 * f->ngaps] = covered;
            f->gaps[2 * f->ngaps + 1] = sorted[i].off;
            f->ngaps++;
        }
        if (sorted[i].off + sorted[i].size > covered) covered = sorted[i].off + sorted[i].size;
    }
    f->gaps[2 * f->ngaps] = covered > f->extent ? covered : f->extent;
    f->gaps[2 * f->ngaps + 1] = UINT64_MAX;
    f->ngaps++;
    free(sorted);
    return true;
}

static void job_free(pplan_job *j) {
    if (j == NULL) return;
    free(j->items);
    free(j->slot_of);
    free(j->slots);
    free(j);
}

void dmm__plan_follow_free(pfollow *f) {
    if (f == NULL) return;
    free(f->slots);
    free(f->gram_key);
    free(f->gram_slot);
    free(f->used);
    free(f->gaps);
    free(f);
}

/* The plan of job j (NULL: none worth following, or out of memory). Takes j's slots. */
static pfollow *plan_job(pplan_job *j, const _Atomic bool *cancel) {
    dmm_place_limits lim = {PLAN_MAX_WORK, PLAN_MAX_INDEX, PLAN_RESTARTS, PLAN_RESTART_WORK, cancel};
    uint64_t extent = 0;
    unsigned orders = 0;
    if (dmm__place(j->items, j->nitems, j->horizon, &lim, &extent, &orders) != DMM_PLACE_OK) return NULL;
    if ((extent + j->chunk - 1) / j->chunk * j->chunk > j->ceiling) return NULL; /* more than the pool settles at */
    pfollow *f = calloc(1, sizeof *f);
    if (f == NULL) return NULL;
    f->slots = j->slots;
    j->slots = NULL;
    f->period = j->period;
    f->phase = j->phase;
    f->base = j->base;
    f->extent = extent;
    f->turn = UINT64_MAX;
    for (size_t i = 0; i < j->planned; i++) f->slots[j->slot_of[i]].off = j->items[i].off;
    if (!build_grams(f) || !mark_used(f, j->items, j->planned, j->chunk) || !find_gaps(f, j->items, j->planned) ||
        !find_anchors(f, j->items, j->nitems, j->slot_of, j->horizon)) {
        dmm__plan_follow_free(f);
        return NULL;
    }
    return f;
}

/* The answer to a job of heap h posted at `serial` (no lock held): the heap follows plan f from the
 * next turn on when nothing changed since (else f is freed); f NULL: no plan (the heap looks again). */
static void install(dmm_pool *p, pool_heap *h, uint64_t serial, pfollow *f) {
    heap_lock(h);
    h->plan_posted = false;
    h->next_look = h->mallocs + 1; /* (looks again at its next malloc: its own pace from then on) */
    bool stale = f == NULL || serial != h->plan_serial || h->nruns == 0 || h->records == NULL ||
                 h->runs[0].lo != f->base ||
                 (h->follow != NULL && h->follow->period >= f->period);
    if (!stale && f->base + f->extent > h->runs[0].hi) { /* the plan reaches past the run: its VA first */
        size_t more = (size_t)((f->base + f->extent - h->runs[0].hi + p->region - 1) >> p->region_shift);
        stale = !dmm__pool_grow_va(p, h, more, 0) || h->runs[0].lo != f->base ||
                h->runs[0].hi < f->base + f->extent;
        if (stale) dmm_clear_error();
    }
    if (stale) {
        heap_unlock(h);
        dmm__plan_follow_free(f);
        return;
    }
    f->from = f->phase + ((h->mallocs - f->phase + f->period - 1) / f->period) * f->period; /* the next turn */
    dmm__plan_follow_free(h->follow); /* a longer loop's plan replaces a shorter one's */
    dmm__heap_quick_flush(h); /* a heap that follows a plan parks nothing: its anchors need merged free runs */
    h->follow = f;
    h->plans++;
    heap_unlock(h);
}

static void *planner_main(void *arg) {
    dmm_pool *p = arg;
    pplanner *pl = &p->planner;
    pthread_mutex_lock(&pl->w.m);
    for (;;) {
        while (!pl->w.stop && pl->queue == NULL) pthread_cond_wait(&pl->w.wake, &pl->w.m);
        if (pl->w.stop) break;
        pplan_job *j = pl->queue;
        pl->queue = j->next;
        pthread_mutex_unlock(&pl->w.m);
        pfollow *f = plan_job(j, &pl->cancel);
        install(p, j->h, j->serial, f); /* takes f */
        job_free(j);
        pthread_mutex_lock(&pl->w.m);
        dmm_atomic_sub_relaxed(&pl->outstanding, 1);
        pthread_cond_broadcast(&pl->w.idle);
    }
    pthread_mutex_unlock(&pl->w.m);
    return NULL;
}

bool dmm__planner_start(dmm_pool *p) {
    return dmm__pool_worker_start(&p->planner.w, planner_main, p, "the planner thread", "plan_loops = 0");
}

void dmm__planner_stop(dmm_pool *p) {
    pplanner *pl = &p->planner;
    if (!pl->w.running) return;
    dmm_atomic_store_relaxed(&pl->cancel, true); /* the job in flight gives up */
    dmm__pool_worker_stop(&pl->w);
    while (pl->queue != NULL) { /* never planned: their heaps go with the pool */
        pplan_job *j = pl->queue;
        pl->queue = j->next;
        job_free(j);
    }
}

bool dmm__planner_post(dmm_pool *p, pplan_job *j) {
    pplanner *pl = &p->planner;
    if (!pl->w.running) return false;
    j->next = NULL;
    pthread_mutex_lock(&pl->w.m);
    pplan_job **tail = &pl->queue;
    while (*tail != NULL) tail = &(*tail)->next;
    *tail = j;
    dmm_atomic_add_relaxed(&pl->outstanding, 1);
    pthread_cond_signal(&pl->w.wake);
    pthread_mutex_unlock(&pl->w.m);
    return true;
}

void dmm__planner_job_free(pplan_job *j) { job_free(j); }

dmm_status dmm__planner_sync(dmm_pool *p) {
    pplanner *pl = &p->planner;
    if (!pl->w.running || dmm_atomic_load_acquire(&pl->outstanding) == 0) return DMM_OK;
    if (pthread_equal(pthread_self(), pl->w.thread))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_pool_plan_sync: called on the planner thread itself");
    uint64_t deadline = dmm_now_ns() + PLAN_SYNC_NS;
    struct timespec until = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
    bool late = false;
    pthread_mutex_lock(&pl->w.m);
    while (dmm_atomic_load_relaxed(&pl->outstanding) != 0 && !late)
        late = pthread_cond_timedwait(&pl->w.idle, &pl->w.m, &until) == ETIMEDOUT;
    late = dmm_atomic_load_relaxed(&pl->outstanding) != 0;
    pthread_mutex_unlock(&pl->w.m);
    if (late)
        return dmm_error_set(DMM_ERR_BUSY, "dmm_pool_plan_sync: the planner thread was still planning after 60 s; "
                                           "call again");
    return DMM_OK;
}
