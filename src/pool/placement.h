/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/placement.h — placing blocks of known lifetimes in one address range, each at a fixed
 * offset, so that two blocks alive at once never overlap: the pool's plan of a repeating loop
 * (follow.c) and the offline plan of a whole trace (tools/plan.c). Never installed.
 *
 * The problem (dynamic storage allocation, as compilers place activations): items with a size and a
 * lifetime — one half-open time interval [start, end), or two at the same offset (an item of a loop
 * that lives across the loop's end: [start, T) and, in the next turn, [start2, end2)) — and items
 * whose offset is fixed (blocks already in place). Find offsets whose extent (the highest end) is
 * smallest. NP-hard. The placement tries three greedy orders (largest first, longest-lived first,
 * largest size × lifetime first; each item at the best-fitting gap among those already placed whose
 * lifetimes overlap its own, else above them all; fixed items first, where they are), then restarts
 * with shaken orders (size × a root of the lifetime × a random factor, from a fixed seed: the same
 * placement on every run and machine) while the work allows, and keeps the smallest extent. The greedy
 * orders alone get stuck: on gpt2-train all three give 1.069 × the live peak, a few shaken orders
 * 1.019 to 1.024.
 *
 * Cost: per order, O(n log n) plus, per item, the placed items whose lifetimes overlap its own (found
 * through a time index that lists each interval at most 4 times), radix-sorted by offset. The cost
 * grows with the overlaps, so the work is bounded (max_work, max_index): past them the placement is
 * refused rather than run for hours.
 *
 * Invariants of a result: items whose lifetimes overlap never overlap in [off, off + size); a fixed
 * item keeps its offset; extent = max(off + size).
 */
#ifndef DMM_POOL_PLACEMENT_H
#define DMM_POOL_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The largest item (sums of sizes then never wrap). */
#define DMM_PLACE_MAX_BYTES ((uint64_t)1 << 58)

typedef struct dmm_place_item {
    uint64_t size;
    uint32_t start, end;   /* [start, end), within [0, horizon]; end > start */
    uint32_t start2, end2; /* a second interval at the same offset (end2 == 0: none) */
    uint64_t off;          /* out: the offset; in, for a fixed item: its offset */
    bool fixed;
} dmm_place_item;

typedef struct dmm_place_limits {
    uint64_t max_work;     /* index entries scanned and buckets visited, over every order */
    uint64_t max_index;    /* index entries one order lists (4 bytes each) */
    unsigned restarts;     /* shaken orders after the greedy three */
    uint64_t restart_work; /* the work up to which restarts go on (at most max_work) */
    const _Atomic bool *cancel; /* NULL, or set (by another thread) to give up at the next 4,096 items */
} dmm_place_limits;

typedef enum dmm_place_outcome {
    DMM_PLACE_OK = 0,
    DMM_PLACE_OUT_OF_MEMORY = -1,
    DMM_PLACE_TOO_MUCH_WORK = -2, /* the greedy three did not fit the bounds */
    DMM_PLACE_BAD_ITEM = -3,      /* a size above DMM_PLACE_MAX_BYTES, or an interval outside the horizon */
    DMM_PLACE_CANCELLED = -4,     /* *cancel was set */
} dmm_place_outcome;

/* Places items[0..n) over times [0, horizon) (horizon < UINT32_MAX): the offsets of the smallest
 * extent found go to items[].off, the extent to *extent and the orders tried to *orders. Nothing but
 * the items is touched; on an error their offsets mean nothing. */
dmm_place_outcome dmm__place(dmm_place_item *items, size_t n, uint32_t horizon, const dmm_place_limits *limits,
                             uint64_t *extent, unsigned *orders);

#endif /* DMM_POOL_PLACEMENT_H */
