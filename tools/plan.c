/* SPDX-License-Identifier: Apache-2.0 */
/* tools/plan.c — offline placement of a whole trace in a fixed layout (contract: plan.h): the trace's
 * allocations as items of the pool's placement (src/pool/placement.h), lifetimes in event ordinals.
 *
 * Lifetimes are half-open event ranges [start, end): an allocation's event to its free's event (the
 * trace's end for one never freed).
 */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/placement.h"

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
    if (t->allocs == 0) return 0;
    dmm_place_limits pl = {
        .max_work = limits != NULL && limits->max_work ? limits->max_work : DMM_PLAN_MAX_WORK,
        .max_index = limits != NULL && limits->max_index ? limits->max_index : DMM_PLAN_MAX_INDEX,
        .restarts = limits != NULL ? limits->restarts : DMM_PLAN_RESTARTS,
        .restart_work = limits != NULL && limits->restart_work ? limits->restart_work : DMM_PLAN_RESTART_WORK,
    };
    dmm_place_item *items = calloc(t->allocs, sizeof *items);
    if (items == NULL) {
        snprintf(err, errcap, "plan: out of memory planning %zu allocations", t->allocs);
        return -1;
    }
    /* lifetimes and the live peak (sizes rounded as placed; each at most 2^58, so no sum wraps) */
    uint32_t horizon = (uint32_t)t->n;
    uint64_t live = 0;
    for (size_t i = 0; i < t->n; i++) {
        const dmm_trace_event *e = &t->ev[i];
        dmm_place_item *x = &items[e->slot];
        if (e->kind == DMM_TRACE_ALLOC) {
            x->size = (e->bytes + align - 1) & ~(align - 1);
            x->start = (uint32_t)i;
            x->end = horizon;
            live += x->size;
            if (live > out->peak_live) out->peak_live = live;
        } else {
            x->end = (uint32_t)i; /* after its allocation's event */
            live -= x->size;
        }
    }
    uint64_t extent = 0;
    unsigned orders = 0;
    dmm_place_outcome o = dmm__place(items, t->allocs, horizon, &pl, &extent, &orders);
    if (o == DMM_PLACE_OK) {
        out->extent = extent;
        out->orders = orders;
        if (offsets != NULL)
            for (size_t i = 0; i < t->allocs; i++) offsets[i] = items[i].off;
    } else {
        out->peak_live = 0;
        if (o == DMM_PLACE_TOO_MUCH_WORK)
            snprintf(err, errcap,
                     "plan: the trace's lifetimes overlap too much to plan within the planner's bounds (%llu "
                     "index steps, %llu index entries; %zu allocations, of which those that live across much of "
                     "the trace cost the most): plan a shorter part of the trace",
                     (unsigned long long)pl.max_work, (unsigned long long)pl.max_index, t->allocs);
        else
            snprintf(err, errcap, "plan: out of memory planning %zu allocations", t->allocs);
    }
    free(items);
    return o == DMM_PLACE_OK ? 0 : -1;
}
