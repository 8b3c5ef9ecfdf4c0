/* SPDX-License-Identifier: Apache-2.0 */
/* tools/plan.c — offline placement of a whole trace in a fixed layout (contract and idea: plan.h).
 *
 * Each order of placing (largest first, longest-lived first, largest size × lifetime first, then the
 * shaken restarts) puts every allocation at the best-fitting gap among those already placed whose
 * lifetimes overlap its own; the plan keeps the order whose extent is smallest. No one order wins on
 * every trace (largest first does on activation graphs, longest-lived first on random shapes, a
 * shaken one on gpt2-train).
 *
 * Lifetimes are half-open event ranges [start, end): an allocation's event to its free's event (the
 * trace's end for one never freed). Time is cut into buckets at several levels, each 16 × coarser than
 * the one below; a placed allocation is listed in the buckets it touches at the finest level where it
 * touches at most 4, so the allocations that may overlap a new one in time are those of its buckets
 * at every level (deduplicated by a stamp, then checked exactly).
 *
 * Invariants: in one order's placement, allocations whose lifetimes overlap never overlap in
 * [off, off + size); extent = max(off + size) over the placed ones.
 */
#include "plan.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct plan_alloc {
    uint64_t size, off;
    uint32_t start, end; /* event ordinals, [start, end) */
} plan_alloc;

typedef struct time_bucket {
    uint32_t *ids; /* the placed allocations whose lifetimes touch this bucket */
    uint32_t n, cap;
} time_bucket;

typedef struct placed_span {
    uint64_t lo, hi;
} placed_span;

/* One entry of a placing order: sorted by key descending, then by start. */
typedef struct order_key {
    double key;
    uint32_t start, id;
} order_key;

/* The three greedy orders, then ORDER_SHAKEN: size × lifetime^a × a random factor per allocation
 * (a and the factor's spread drawn per restart from a generator seeded by the restart's number). */
typedef enum plan_order { ORDER_SIZE, ORDER_LIFETIME, ORDER_AREA, ORDER_GREEDY_COUNT_, ORDER_SHAKEN = ORDER_GREEDY_COUNT_ } plan_order;

/* The index's levels: level 0's buckets are `width` events wide, each next level's 16 × wider, up to
 * one bucket; an allocation is listed at the lowest level where it touches at most 4 buckets, so it is
 * listed at most 4 times and a long-lived allocation does not fill every narrow bucket. */
#define PLAN_LEVELS 8
#define PLAN_LEVEL_FACTOR 16
#define PLAN_MAX_SPAN 4

typedef struct planner {
    plan_alloc *allocs;
    size_t nallocs;
    order_key *order;
    uint32_t *stamp; /* stamp[o] == id: allocation o was already looked at for allocation id */
    placed_span *overlapping, *sorting; /* the spans overlapping the one being placed; room to sort them */
    time_bucket *buckets;        /* every level's, level 0 first */
    size_t level_first[PLAN_LEVELS]; /* index in buckets of each level's first */
    size_t level_count[PLAN_LEVELS], level_width[PLAN_LEVELS];
    size_t nbuckets;
    unsigned levels;
    uint64_t work;   /* index entries scanned and listed so far, over every order: at most max_work */
    uint64_t listed; /* index entries of the order being placed: at most max_index */
    uint64_t max_work, max_index;
} planner;

static int by_key_desc(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Sorts n spans by lo (tmp: room for n): insertion sort when short, else least-significant-digit radix,
 * 8 bits a pass, over the bits in which the spans' lo differ (offsets share the alignment's zero bits).
 * The placement's hot spot: qsort's comparisons through a pointer cost ~10 × as much on the real traces. */
static void sort_by_lo(placed_span *s, placed_span *tmp, size_t n) {
    if (n < 32) {
        for (size_t i = 1; i < n; i++) {
            placed_span v = s[i];
            size_t j = i;
            for (; j > 0 && s[j - 1].lo > v.lo; j--) s[j] = s[j - 1];
            s[j] = v;
        }
        return;
    }
    uint64_t any = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        any |= s[i].lo;
        if (s[i].lo > top) top = s[i].lo;
    }
    unsigned low = any != 0 ? (unsigned)__builtin_ctzll(any) : 0;
    placed_span *from = s, *to = tmp;
    for (unsigned shift = low; shift < 64 && (top >> shift) != 0; shift += 8) {
        uint32_t count[256] = {0};
        for (size_t i = 0; i < n; i++) count[(from[i].lo >> shift) & 255]++;
        uint32_t sum = 0;
        for (unsigned d = 0; d < 256; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) to[count[(from[i].lo >> shift) & 255]++] = from[i];
        placed_span *t = from;
        from = to;
        to = t;
    }
    if (from != s) memcpy(s, from, n * sizeof *s);
}

static bool bucket_push(time_bucket *b, uint32_t id) {
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? b->cap * 2 : 16;
        uint32_t *ids = realloc(b->ids, (size_t)cap * sizeof *ids);
        if (ids == NULL) return false;
        b->ids = ids;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
    return true;
}

/* The lowest offset of the smallest gap among `n` spans (sorted by lo) that holds `size`, else the
 * offset above them all. */
static uint64_t best_gap(const placed_span *s, size_t n, uint64_t size) {
    uint64_t prev = 0, best = UINT64_MAX, best_len = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (s[i].lo > prev && s[i].lo - prev >= size && s[i].lo - prev < best_len) {
            best = prev;
            best_len = s[i].lo - prev;
        }
        if (s[i].hi > prev) prev = s[i].hi;
    }
    return best != UINT64_MAX ? best : prev;
}

enum { PLACE_OUT_OF_MEMORY = -1, PLACE_TOO_MUCH_WORK = -2 };

/* splitmix64: a fixed sequence per seed, so a plan is the same on every run and machine */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* in [0, 1) */
static double uniform(uint64_t *state) { return (double)(next_random(state) >> 11) * 0x1.0p-53; }

/* x^(k/8) for k in 0..4, from square roots only: IEEE rounds them exactly, so keys (and the plan) are
 * the same on every machine, which pow() does not promise */
static double root_eighths(double x, unsigned k) {
    double r2 = sqrt(x), r4 = sqrt(r2), r8 = sqrt(r4);
    return k == 0 ? 1 : k == 1 ? r8 : k == 2 ? r4 : k == 3 ? r4 * r8 : r2;
}

/* Places every allocation in `which` order (offsets in allocs[].off). 0 with the extent in *extent, or
 * PLACE_OUT_OF_MEMORY, or PLACE_TOO_MUCH_WORK when the work bound is reached. */
static int place(planner *p, plan_order which, uint64_t seed, uint64_t *extent_out) {
    uint64_t rng = seed;
    unsigned eighths = 0; /* the lifetime's exponent, in eighths: 0 to 4 */
    double spread = 0;
    if (which == ORDER_SHAKEN) {
        eighths = (unsigned)(next_random(&rng) % 5);
        spread = 0.05 + 0.45 * uniform(&rng);
    }
    for (size_t i = 0; i < p->nallocs; i++) {
        const plan_alloc *x = &p->allocs[i];
        double size = (double)x->size, life = (double)(x->end - x->start) + 1;
        double key = which == ORDER_SIZE       ? size
                     : which == ORDER_LIFETIME ? life
                     : which == ORDER_AREA     ? size * life
                                               : size * root_eighths(life, eighths) * (1 + spread * (2 * uniform(&rng) - 1));
        p->order[i] = (order_key){key, x->start, (uint32_t)i};
        p->stamp[i] = UINT32_MAX;
    }
    qsort(p->order, p->nallocs, sizeof *p->order, by_key_desc);
    for (size_t b = 0; b < p->nbuckets; b++) p->buckets[b].n = 0;
    p->listed = 0;
    uint64_t extent = 0;
    for (size_t k = 0; k < p->nallocs; k++) {
        uint32_t id = p->order[k].id;
        plan_alloc *x = &p->allocs[id];
        uint32_t last = x->end > x->start ? x->end - 1 : x->start;
        size_t n = 0;
        unsigned home = p->levels - 1; /* the level it is listed at */
        for (unsigned l = 0; l < p->levels; l++) {
            size_t b0 = x->start / p->level_width[l], b1 = last / p->level_width[l];
            if (b1 >= p->level_count[l]) b1 = p->level_count[l] - 1;
            if (home == p->levels - 1 && b1 - b0 < PLAN_MAX_SPAN) home = l;
            for (size_t b = b0; b <= b1; b++) {
                const time_bucket *bucket = &p->buckets[p->level_first[l] + b];
                p->work += bucket->n + 1; /* its entries scanned, and the bucket visited */
                if (p->work > p->max_work) return PLACE_TOO_MUCH_WORK;
                for (uint32_t j = 0; j < bucket->n; j++) {
                    uint32_t other = bucket->ids[j];
                    if (p->stamp[other] == id) continue;
                    p->stamp[other] = id;
                    const plan_alloc *y = &p->allocs[other];
                    if (y->start < x->end && x->start < y->end)
                        p->overlapping[n++] = (placed_span){y->off, y->off + y->size};
                }
            }
        }
        sort_by_lo(p->overlapping, p->sorting, n);
        x->off = best_gap(p->overlapping, n, x->size);
        if (x->off + x->size > extent) extent = x->off + x->size;
        size_t h0 = x->start / p->level_width[home], h1 = last / p->level_width[home];
        if (h1 >= p->level_count[home]) h1 = p->level_count[home] - 1;
        p->listed += h1 - h0 + 1;
        if (p->listed > p->max_index) return PLACE_TOO_MUCH_WORK;
        for (size_t b = h0; b <= h1; b++)
            if (!bucket_push(&p->buckets[p->level_first[home] + b], id)) return PLACE_OUT_OF_MEMORY;
    }
    *extent_out = extent;
    return 0;
}

int dmm_plan_trace(const dmm_trace *t, uint64_t align, dmm_plan_result *out, uint64_t *offsets, char *err,
                   size_t errcap) {
    return dmm_plan_trace_limited(t, align, NULL, out, offsets, err, errcap);
}

int dmm_plan_trace_limited(const dmm_trace *t, uint64_t align, const dmm_plan_limits *limits, dmm_plan_result *out,
                           uint64_t *offsets, char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    if (align == 0) align = 512;
    if ((align & (align - 1)) != 0 || align > DMM_PLAN_MAX_BYTES) {
        snprintf(err, errcap, "plan: alignment %llu is not a power of two up to 2^58", (unsigned long long)align);
        return -1;
    }
    if (t->n > UINT32_MAX - 1) {
        snprintf(err, errcap, "plan: %zu events are more than the planner indexes (at most %u)", t->n,
                 UINT32_MAX - 1);
        return -1;
    }
    if (t->max_bytes > DMM_PLAN_MAX_BYTES) {
        snprintf(err, errcap, "plan: an allocation of %llu bytes is above the planner's bound of 2^58 bytes",
                 (unsigned long long)t->max_bytes);
        return -1;
    }
    planner p = {.nallocs = t->allocs,
                 .max_work = limits != NULL && limits->max_work ? limits->max_work : DMM_PLAN_MAX_WORK,
                 .max_index = limits != NULL && limits->max_index ? limits->max_index : DMM_PLAN_MAX_INDEX};
    unsigned restarts = limits != NULL ? limits->restarts : DMM_PLAN_RESTARTS;
    uint64_t restart_work = limits != NULL && limits->restart_work ? limits->restart_work : DMM_PLAN_RESTART_WORK;
    if (p.nallocs == 0) return 0;
    size_t count = t->n / 64 + 1, width;
    if (count > 65536) count = 65536;
    width = (t->n + count - 1) / count;
    if (width == 0) width = 1;
    for (;;) {
        unsigned l = p.levels++;
        p.level_first[l] = p.nbuckets;
        p.level_width[l] = width;
        p.level_count[l] = (t->n + width - 1) / width;
        if (p.level_count[l] == 0) p.level_count[l] = 1;
        p.nbuckets += p.level_count[l];
        if (p.level_count[l] == 1 || p.levels == PLAN_LEVELS) break;
        width *= PLAN_LEVEL_FACTOR;
    }
    p.allocs = calloc(p.nallocs, sizeof *p.allocs);
    p.order = malloc(p.nallocs * sizeof *p.order);
    p.stamp = malloc(p.nallocs * sizeof *p.stamp);
    p.overlapping = malloc(p.nallocs * sizeof *p.overlapping);
    p.sorting = malloc(p.nallocs * sizeof *p.sorting);
    p.buckets = calloc(p.nbuckets, sizeof *p.buckets);
    uint64_t *best_off = malloc(p.nallocs * sizeof *best_off);
    int rc = -1;
    if (p.allocs == NULL || p.order == NULL || p.stamp == NULL || p.overlapping == NULL || p.sorting == NULL || p.buckets == NULL ||
        best_off == NULL)
        goto oom;

    /* lifetimes and the live peak (sizes rounded as placed; each at most 2^58, so no sum wraps) */
    uint64_t live = 0;
    for (size_t i = 0; i < t->n; i++) {
        const dmm_trace_event *e = &t->ev[i];
        plan_alloc *x = &p.allocs[e->slot];
        if (e->kind == DMM_TRACE_ALLOC) {
            x->size = (e->bytes + align - 1) & ~(align - 1);
            x->start = (uint32_t)i;
            x->end = (uint32_t)t->n;
            live += x->size;
            if (live > out->peak_live) out->peak_live = live;
        } else {
            x->end = (uint32_t)i;
            live -= x->size;
        }
    }
    out->extent = UINT64_MAX;
    /* the greedy orders must fit the bounds; the shaken restarts go on while they fit */
    for (unsigned k = 0; k < ORDER_GREEDY_COUNT_ + restarts; k++) {
        bool shaken = k >= ORDER_GREEDY_COUNT_;
        if (shaken && p.max_work > restart_work) p.max_work = restart_work;
        uint64_t extent = 0, work_before = p.work;
        int placed = place(&p, shaken ? ORDER_SHAKEN : (plan_order)k, k, &extent);
        if (placed == PLACE_OUT_OF_MEMORY) goto oom;
        if (placed == PLACE_TOO_MUCH_WORK && shaken) {
            p.work = work_before;
            break;
        }
        if (placed == PLACE_TOO_MUCH_WORK) {
            memset(out, 0, sizeof *out);
            snprintf(err, errcap,
                     "plan: the trace's lifetimes overlap too much to plan within the planner's bounds (%llu "
                     "index steps, %llu index entries; %zu allocations, of which those that live across much of "
                     "the trace cost the most): plan a shorter part of the trace",
                     (unsigned long long)p.max_work, (unsigned long long)p.max_index, p.nallocs);
            goto done;
        }
        out->orders++;
        if (extent < out->extent) {
            out->extent = extent;
            for (size_t i = 0; i < p.nallocs; i++) best_off[i] = p.allocs[i].off;
        }
    }
    if (offsets != NULL) memcpy(offsets, best_off, p.nallocs * sizeof *offsets);
    rc = 0;
    goto done;
oom:
    memset(out, 0, sizeof *out);
    snprintf(err, errcap, "plan: out of memory planning %zu allocations", p.nallocs);
done:
    if (p.buckets != NULL)
        for (size_t b = 0; b < p.nbuckets; b++) free(p.buckets[b].ids);
    free(p.buckets);
    free(p.overlapping);
    free(p.sorting);
    free(p.stamp);
    free(p.order);
    free(p.allocs);
    free(best_off);
    return rc;
}
