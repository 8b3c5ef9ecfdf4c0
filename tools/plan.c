/* SPDX-License-Identifier: Apache-2.0 */
/* tools/plan.c — offline placement of a whole trace in a fixed layout (contract and idea: plan.h).
 *
 * Each order of placing (largest first, longest-lived first, largest size × lifetime first) puts every
 * allocation at the best-fitting gap among those already placed whose lifetimes overlap its own; the
 * plan keeps the order whose extent is smallest. No one order wins on every trace (largest first
 * does on activation graphs, longest-lived first on random shapes).
 *
 * Lifetimes are half-open event ranges [start, end): an allocation's event to its free's event (the
 * trace's end for one never freed). Time is cut into buckets; each placed allocation is listed in
 * every bucket its lifetime touches, so the allocations that may overlap a new one in time are those
 * of its buckets (deduplicated by a stamp, then checked exactly).
 *
 * Invariants: in one order's placement, allocations whose lifetimes overlap never overlap in
 * [off, off + size); extent = max(off + size) over the placed ones.
 */
#include "plan.h"

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
    uint64_t key;
    uint32_t start, id;
} order_key;

typedef enum plan_order { ORDER_SIZE, ORDER_LIFETIME, ORDER_AREA, ORDER_COUNT_ } plan_order;

typedef struct planner {
    plan_alloc *allocs;
    size_t nallocs;
    order_key *order;
    uint32_t *stamp; /* stamp[o] == id: allocation o was already looked at for allocation id */
    placed_span *overlapping;
    time_bucket *buckets;
    size_t nbuckets, width;
    uint64_t work;   /* index entries scanned and listed so far, over every order: at most max_work */
    uint64_t listed; /* index entries of the order being placed: at most max_index */
    uint64_t max_work, max_index;
} planner;

static int by_key_desc(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int by_lo(const void *a, const void *b) {
    const placed_span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
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

/* Places every allocation in `which` order (offsets in allocs[].off). 0 with the extent in *extent, or
 * PLACE_OUT_OF_MEMORY, or PLACE_TOO_MUCH_WORK when the work bound is reached. */
static int place(planner *p, plan_order which, uint64_t *extent_out) {
    for (size_t i = 0; i < p->nallocs; i++) {
        const plan_alloc *x = &p->allocs[i];
        uint64_t life = (uint64_t)(x->end - x->start) + 1;
        uint64_t key = which == ORDER_SIZE ? x->size : which == ORDER_LIFETIME ? life : x->size * life;
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
        size_t b0 = x->start / p->width, b1 = (x->end > x->start ? x->end - 1 : x->start) / p->width;
        if (b1 >= p->nbuckets) b1 = p->nbuckets - 1;
        size_t n = 0;
        for (size_t b = b0; b <= b1; b++) {
            p->work += p->buckets[b].n + 1; /* its entries scanned, and this allocation listed in it */
            if (p->work > p->max_work) return PLACE_TOO_MUCH_WORK;
            for (uint32_t j = 0; j < p->buckets[b].n; j++) {
                uint32_t other = p->buckets[b].ids[j];
                if (p->stamp[other] == id) continue;
                p->stamp[other] = id;
                const plan_alloc *y = &p->allocs[other];
                if (y->start < x->end && x->start < y->end) p->overlapping[n++] = (placed_span){y->off, y->off + y->size};
            }
        }
        qsort(p->overlapping, n, sizeof *p->overlapping, by_lo);
        x->off = best_gap(p->overlapping, n, x->size);
        if (x->off + x->size > extent) extent = x->off + x->size;
        p->listed += b1 - b0 + 1;
        if (p->listed > p->max_index) return PLACE_TOO_MUCH_WORK;
        for (size_t b = b0; b <= b1; b++)
            if (!bucket_push(&p->buckets[b], id)) return PLACE_OUT_OF_MEMORY;
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
    if (p.nallocs == 0) return 0;
    p.nbuckets = t->n / 64 + 1;
    if (p.nbuckets > 65536) p.nbuckets = 65536;
    p.width = (t->n + p.nbuckets - 1) / p.nbuckets;
    if (p.width == 0) p.width = 1;
    p.allocs = calloc(p.nallocs, sizeof *p.allocs);
    p.order = malloc(p.nallocs * sizeof *p.order);
    p.stamp = malloc(p.nallocs * sizeof *p.stamp);
    p.overlapping = malloc(p.nallocs * sizeof *p.overlapping);
    p.buckets = calloc(p.nbuckets, sizeof *p.buckets);
    uint64_t *best_off = malloc(p.nallocs * sizeof *best_off);
    int rc = -1;
    if (p.allocs == NULL || p.order == NULL || p.stamp == NULL || p.overlapping == NULL || p.buckets == NULL ||
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
    for (int which = 0; which < ORDER_COUNT_; which++) {
        uint64_t extent = 0;
        int placed = place(&p, (plan_order)which, &extent);
        if (placed == PLACE_OUT_OF_MEMORY) goto oom;
        if (placed == PLACE_TOO_MUCH_WORK) {
            memset(out, 0, sizeof *out);
            snprintf(err, errcap,
                     "plan: the trace's lifetimes overlap too much to plan within the planner's bounds (%llu "
                     "index steps, %llu index entries; %zu allocations, of which those that live across much of "
                     "the trace cost the most): plan a shorter part of the trace",
                     (unsigned long long)p.max_work, (unsigned long long)p.max_index, p.nallocs);
            goto done;
        }
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
    free(p.stamp);
    free(p.order);
    free(p.allocs);
    free(best_off);
    return rc;
}
