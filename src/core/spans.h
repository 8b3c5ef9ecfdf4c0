/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/spans.h — a set of byte ranges (spans) of one address range, kept sorted by offset and
 * coalesced: the one span container of the tree (the arena's free list and its quarantine, the torch
 * adapter's segments). Never installed.
 *
 * Offsets are relative to the reservation's base; `base` is passed where absolute alignment matters.
 * Operations that may grow the array have a reserve step first (dmm__spans_reserve), so that the
 * arena can make every allocation it needs BEFORE the driver calls of an operation and never has
 * to fail a bookkeeping step after the driver succeeded.
 *
 * Invariants (dmm__spans_check): v[i].len > 0; v[i].off + v[i].len < v[i+1].off (sorted, disjoint,
 * and never touching: touching spans are always merged); n ≤ cap.
 */
#ifndef DMM_CORE_SPANS_H
#define DMM_CORE_SPANS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dmm_span {
    uint64_t off; /* from the reservation's base */
    uint64_t len; /* > 0 */
} dmm_span;

typedef struct dmm_spans {
    dmm_span *v;
    size_t n, cap;
    uint64_t total; /* Σ len */
} dmm_spans;

void dmm__spans_init(dmm_spans *s);
void dmm__spans_fini(dmm_spans *s);

/* Makes room for `extra` more entries; false (nothing changed) when out of memory. */
bool dmm__spans_reserve(dmm_spans *s, size_t extra);

/* Adds [off, off+len), merging with neighbours it touches. Needs one free entry (reserve first);
 * false (nothing changed) if it overlaps a span already in the set or there is no room. */
bool dmm__spans_insert(dmm_spans *s, uint64_t off, uint64_t len);

/* Best fit: takes `len` bytes starting at an address (base + off) aligned to `align` (a power of
 * two) from the smallest span that can hold them (lowest address among equals), splitting it. Needs
 * one free entry. False (nothing changed) when no span fits. */
bool dmm__spans_take_best_fit(dmm_spans *s, uint64_t base, uint64_t len, uint64_t align, uint64_t *off);

/* First fit: as best fit, but from the lowest span that can hold them, so that blocks pack at the
 * low end of the range (a torch segment's backed prefix is there). */
bool dmm__spans_take_first_fit(dmm_spans *s, uint64_t base, uint64_t len, uint64_t align, uint64_t *off);

/* Removes the intersection of [off, off+len) with the set and returns its bytes; each removed piece
 * is reported through `piece` (may be NULL). Needs one free entry (a span may split in two). */
uint64_t dmm__spans_carve(dmm_spans *s, uint64_t off, uint64_t len,
                          void (*piece)(void *user, uint64_t off, uint64_t len), void *user);

/* How many spans of the set overlap [off, off+len): the pieces a carve of that range would make. */
size_t dmm__spans_count_overlapping(const dmm_spans *s, uint64_t off, uint64_t len);

/* Whether any byte of [off, off+len) is in the set. */
bool dmm__spans_overlaps(const dmm_spans *s, uint64_t off, uint64_t len);

/* Whether all of [off, off+len) is inside one span of the set. */
bool dmm__spans_contains(const dmm_spans *s, uint64_t off, uint64_t len);

/* The invariants above, plus every span inside [0, limit). NULL when they hold, else a sentence
 * fragment naming the first broken one (static storage per thread). */
const char *dmm__spans_check(const dmm_spans *s, uint64_t limit);

#endif /* DMM_CORE_SPANS_H */
