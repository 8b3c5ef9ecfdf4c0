/* SPDX-License-Identifier: Apache-2.0 */
/* tools/plan.c — greedy-by-size offline placement of a whole trace (contract and idea: plan.h).
 *
 * Lifetimes are half-open event ranges [start, end): an allocation's event to its free's event (the
 * trace's end for one never freed). Time is cut into buckets; each placed allocation is listed in
 * every bucket its lifetime touches, so the allocations that may overlap a new one in time are those
 * of its buckets (deduplicated by a stamp, then checked exactly).
 *
 * Invariants: placed allocations whose lifetimes overlap never overlap in [off, off + size);
 * extent = max(off + size) over the placed ones.
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

typedef struct bucket {
    uint32_t *ids;
    uint32_t n, cap;
} bucket;

typedef struct span {
    uint64_t lo, hi;
} span;

/* One entry of the placing order: the largest first, then the earliest. */
typedef struct order_key {
    uint64_t size;
    uint32_t start, id;
} order_key;

static int by_size_desc(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int by_lo(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static bool bucket_push(bucket *b, uint32_t id) {
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
static uint64_t best_gap(const span *s, size_t n, uint64_t size) {
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

int dmm_plan_trace(const dmm_trace *t, uint64_t align, dmm_plan_result *out, uint64_t *offsets, char *err,
                   size_t errcap) {
    memset(out, 0, sizeof *out);
    if (align == 0) align = 512;
    if ((align & (align - 1)) != 0) {
        snprintf(err, errcap, "plan: alignment %llu is not a power of two", (unsigned long long)align);
        return -1;
    }
    if (t->n > UINT32_MAX - 1) {
        snprintf(err, errcap, "plan: %zu events are more than the planner indexes (at most %u)", t->n,
                 UINT32_MAX - 1);
        return -1;
    }
    size_t na = t->allocs;
    if (na == 0) return 0;
    plan_alloc *a = calloc(na, sizeof *a);
    order_key *order = malloc(na * sizeof *order);
    uint32_t *stamp = malloc(na * sizeof *stamp);
    span *cand = malloc(na * sizeof *cand);
    size_t nb = t->n / 64 + 1;
    if (nb > 65536) nb = 65536;
    bucket *bk = calloc(nb, sizeof *bk);
    int rc = -1;
    if (a == NULL || order == NULL || stamp == NULL || cand == NULL || bk == NULL) goto oom;

    /* lifetimes and the live peak (sizes rounded as placed) */
    uint64_t live = 0;
    for (size_t i = 0; i < t->n; i++) {
        const dmm_trace_event *e = &t->ev[i];
        plan_alloc *x = &a[e->slot];
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
    for (size_t i = 0; i < na; i++) {
        order[i] = (order_key){a[i].size, a[i].start, (uint32_t)i};
        stamp[i] = UINT32_MAX;
    }
    qsort(order, na, sizeof *order, by_size_desc);

    size_t width = (t->n + nb - 1) / nb;
    if (width == 0) width = 1;
    for (size_t k = 0; k < na; k++) {
        uint32_t id = order[k].id;
        plan_alloc *x = &a[id];
        size_t b0 = x->start / width, b1 = (x->end > x->start ? x->end - 1 : x->start) / width;
        if (b1 >= nb) b1 = nb - 1;
        size_t nc = 0;
        for (size_t b = b0; b <= b1; b++)
            for (uint32_t j = 0; j < bk[b].n; j++) {
                uint32_t o = bk[b].ids[j];
                if (stamp[o] == id) continue;
                stamp[o] = id;
                const plan_alloc *y = &a[o];
                if (y->start < x->end && x->start < y->end) cand[nc++] = (span){y->off, y->off + y->size};
            }
        qsort(cand, nc, sizeof *cand, by_lo);
        x->off = best_gap(cand, nc, x->size);
        if (x->off + x->size > out->extent) out->extent = x->off + x->size;
        for (size_t b = b0; b <= b1; b++)
            if (!bucket_push(&bk[b], id)) goto oom;
    }
    if (offsets != NULL)
        for (size_t i = 0; i < na; i++) offsets[i] = a[i].off;
    rc = 0;
    goto done;
oom:
    snprintf(err, errcap, "plan: out of memory planning %zu allocations", na);
done:
    if (bk != NULL)
        for (size_t b = 0; b < nb; b++) free(bk[b].ids);
    free(bk);
    free(cand);
    free(stamp);
    free(order);
    free(a);
    return rc;
}
