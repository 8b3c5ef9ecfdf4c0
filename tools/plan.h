/* SPDX-License-Identifier: Apache-2.0 */
/* tools/plan.h — an offline placement of a whole trace: the floor a fixed layout reaches.
 *
 * An allocator that never re-maps keeps one layout for the whole run: each allocation sits at one
 * offset, and two allocations whose lifetimes overlap never overlap in address. The memory it needs
 * is that layout's extent. Knowing the whole trace in advance (a planner, as compilers place
 * activations) is the best such an allocator can do, so the extent of a good offline plan is the
 * floor for every policy that serves a repeating loop with no driver call; only re-mapping (moving
 * physical pages under the VA, driver calls) goes below it, down to the live peak itself.
 *
 * The plan is greedy by size (the largest allocation first, each at the best-fitting gap among the
 * allocations already placed whose lifetimes overlap its own, else above them all), the heuristic
 * that places within a few per cent of the live peak on activation graphs. It is a heuristic: its
 * extent is an upper bound of the true optimum (which is NP-hard to find) and never below the live
 * peak. Lifetimes are event ordinals; streams are not told apart (one address space).
 *
 * Used by `dmm replay --plan` and bench_replay. Cost: O(n log n) plus, per allocation, the placed
 * allocations that share a time bucket with it; seconds for the largest trace shipped.
 */
#ifndef DMM_TOOLS_PLAN_H
#define DMM_TOOLS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

typedef struct dmm_plan_result {
    uint64_t extent;    /* bytes from 0 to the end of the highest placed allocation */
    uint64_t peak_live; /* the trace's live peak, sizes rounded up as the plan places them */
} dmm_plan_result;

/* Plans the trace with every size rounded up to `align` (a power of two; 0 = 512, PyTorch's block
 * rounding). `offsets` (NULL, or t->allocs entries) receives each allocation's offset, by ordinal.
 * Returns 0, or -1 with a sentence in err (out of memory, a bad alignment). */
int dmm_plan_trace(const dmm_trace *t, uint64_t align, dmm_plan_result *out, uint64_t *offsets, char *err,
                   size_t errcap);

#endif
