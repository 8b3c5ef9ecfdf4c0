/* SPDX-License-Identifier: Apache-2.0 */
/* tools/plan.h — an offline placement of a whole trace: the floor a fixed layout reaches.
 *
 * An allocator that never re-maps keeps one layout for the whole run: each allocation sits at one
 * offset, and two allocations whose lifetimes overlap never overlap in address. The memory it needs
 * is that layout's extent. Knowing the whole trace in advance (a planner, as compilers place
 * activations) is the best such an allocator can do: the smallest fixed layout is the floor for
 * every policy that serves a repeating loop with no driver call; only re-mapping (moving physical
 * pages under the VA, driver calls) goes below it, down to the live peak itself.
 *
 * Finding the smallest fixed layout is NP-hard. The plan tries three greedy orders (largest first,
 * longest-lived first, largest size × lifetime first; each allocation at the best-fitting gap among
 * those already placed whose lifetimes overlap its own, else above them all) and keeps the smallest
 * extent: the best fixed layout found, an upper bound of that floor and never below the live peak.
 * Lifetimes are event ordinals. Streams are not told apart (one address space: memory one stream
 * frees is reused by another at once, which an event-gated pool cannot do), so on a trace with
 * several streams the plan is optimistic.
 *
 * Used by `dmm replay --plan` and bench_replay. Cost: three placements, each O(n log n) plus, per
 * allocation, the placed allocations that share a time bucket with it, sorted; seconds for the
 * largest trace shipped (llama-generate, 432,000 allocations), but an allocation that lives across the
 * whole trace is listed in every bucket, so thousands of never-freed allocations would cost minutes:
 * past DMM_PLAN_MAX_WORK the plan is refused.
 */
#ifndef DMM_TOOLS_PLAN_H
#define DMM_TOOLS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

/* The largest allocation the planner takes (sums of sizes then never wrap). */
#define DMM_PLAN_MAX_BYTES ((uint64_t)1 << 58)
/* The most work one plan does (index entries scanned and listed, over all three orders) and the most
 * index entries one order lists (4 bytes each: 512 MiB). A hostile or unusual trace (thousands of
 * allocations living across millions of events) would otherwise take hours and gigabytes; it is
 * refused with a sentence instead. The largest trace shipped, llama-generate, needs 1.1e9 steps
 * (1/8 of the bound; a plan at the bound takes ~10 s on this project's 2-core machine) and 3.2
 * million entries. */
#define DMM_PLAN_MAX_WORK ((uint64_t)1 << 33)
#define DMM_PLAN_MAX_INDEX ((uint64_t)1 << 27)

typedef struct dmm_plan_result {
    uint64_t extent;    /* bytes from 0 to the end of the highest placed allocation */
    uint64_t peak_live; /* the trace's live peak, sizes rounded up as the plan places them */
} dmm_plan_result;

/* Plans the trace with every size rounded up to `align` (a power of two; 0 = 512, PyTorch's block
 * rounding). `offsets` (NULL, or t->allocs entries) receives each allocation's offset, by ordinal.
 * Returns 0, or -1 with a sentence in err (out of memory, a bad alignment, an allocation above
 * DMM_PLAN_MAX_BYTES, more work than DMM_PLAN_MAX_WORK or DMM_PLAN_MAX_INDEX allow). */
int dmm_plan_trace(const dmm_trace *t, uint64_t align, dmm_plan_result *out, uint64_t *offsets, char *err,
                   size_t errcap);
/* The same within other bounds (0: the default of each): the work and index entries above. */
typedef struct dmm_plan_limits {
    uint64_t max_work, max_index;
} dmm_plan_limits;
int dmm_plan_trace_limited(const dmm_trace *t, uint64_t align, const dmm_plan_limits *limits, dmm_plan_result *out,
                           uint64_t *offsets, char *err, size_t errcap);

#endif
