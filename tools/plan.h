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
 * Finding the smallest fixed layout is NP-hard: the allocations are placed by the pool's placement
 * (src/pool/placement.h: three greedy orders, then seeded shaken restarts while the work allows; the
 * smallest extent kept), an upper bound of that floor and never below the live peak.
 * Lifetimes are event ordinals. Streams are not told apart (one address space: memory one stream
 * frees is reused by another at once, which an event-gated pool cannot do), so on a trace with
 * several streams the plan is optimistic.
 *
 * Used by `dmm replay --plan` and bench_replay: 1-5 s a trace shipped on this project's 2-core machine.
 * The cost grows with the overlaps, so thousands of allocations that live across millions of events
 * would cost minutes: past DMM_PLAN_MAX_WORK the plan is refused.
 */
#ifndef DMM_TOOLS_PLAN_H
#define DMM_TOOLS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "pool/placement.h"
#include "trace.h"

/* The largest allocation the planner takes (sums of sizes then never wrap). */
#define DMM_PLAN_MAX_BYTES DMM_PLACE_MAX_BYTES
/* The most work one plan does (index entries scanned, buckets visited, over every order) and the most
 * index entries one order lists (4 bytes each: 512 MiB). A hostile or unusual trace (thousands of
 * allocations living across millions of events) would otherwise take hours and gigabytes; it is
 * refused with a sentence instead. The largest trace shipped, llama-generate, needs 3.5e8 steps for
 * the greedy three (1/25 of the bound). */
#define DMM_PLAN_MAX_WORK ((uint64_t)1 << 33)
#define DMM_PLAN_MAX_INDEX ((uint64_t)1 << 27)
/* Shaken orders tried after the greedy three, while the work of the whole plan stays within
 * DMM_PLAN_RESTART_WORK: a small trace gets all of them (gpt2-train: 1.069 → 1.019 × its live peak, found
 * at the 31st; ~4 s), the largest shipped none (llama-generate's greedy three take 3.5e8 steps). */
#define DMM_PLAN_RESTARTS 61
#define DMM_PLAN_RESTART_WORK ((uint64_t)1 << 29)

typedef struct dmm_plan_result {
    uint64_t extent;    /* bytes from 0 to the end of the highest placed allocation */
    uint64_t peak_live; /* the trace's live peak, sizes rounded up as the plan places them */
    unsigned orders;    /* the placing orders tried (the greedy three, then the restarts that fit) */
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
    unsigned restarts;     /* shaken orders after the greedy three (0 here: none) */
    uint64_t restart_work; /* the work up to which restarts go on (0: DMM_PLAN_RESTART_WORK) */
} dmm_plan_limits;
int dmm_plan_trace_limited(const dmm_trace *t, uint64_t align, const dmm_plan_limits *limits, dmm_plan_result *out,
                           uint64_t *offsets, char *err, size_t errcap);

#endif
