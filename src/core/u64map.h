/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/u64map.h — the one hash map of the tree: uint64_t key → uint64_t value (a pointer fits:
 * store (uint64_t)(uintptr_t)p). Internal; never installed.
 *
 * Open addressing with linear probing at a load of at most 1/2, and backward-shift deletion: a
 * removal pulls the later members of its probe run into the hole, so there are no tombstones, a
 * lookup stops at the first empty slot, and insert/remove churn never degrades the table. Any key
 * is valid (0 and UINT64_MAX too: a slot's use is a flag, not a sentinel key).
 *
 * Memory: only dmm__u64map_insert and dmm__u64map_reserve allocate; when the host is out of memory
 * they report false and change nothing. Nothing here aborts, exits or prints.
 *
 * Promises (for callers that must not fail after an outside call, e.g. a driver that records what
 * CUDA handed out): dmm__u64map_reserve(m, n) makes room for n more keys beforehand; each
 * dmm__u64map_insert_reserved then fills one promised slot and cannot fail; dmm__u64map_unreserve
 * gives unused promises back; dmm__u64map_take removes a key but keeps its slot promised, so putting
 * it back (insert_reserved) cannot fail either.
 *
 * Invariants: cap is 0 or a power of two; count + pending ≤ cap / 2; every used slot is reachable
 * from its home slot through used slots only.
 *
 * Thread contract: one owner (callers lock around it).
 */
#ifndef DMM_CORE_U64MAP_H
#define DMM_CORE_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dmm_u64map_slot {
    uint64_t key;
    uint64_t value;
    bool used;
} dmm_u64map_slot;

typedef struct dmm_u64map {
    dmm_u64map_slot *slots; /* cap slots, or NULL while cap == 0 */
    size_t cap;             /* 0 or a power of two */
    size_t count;           /* keys present */
    size_t pending;         /* slots promised (reserve, take) and not yet filled or given back */
} dmm_u64map;

/* An empty map (allocates nothing). A zeroed dmm_u64map is also an empty map. */
void dmm__u64map_init(dmm_u64map *m);
/* Frees the slots; the map is empty (and usable) again. */
void dmm__u64map_fini(dmm_u64map *m);

static inline size_t dmm__u64map_count(const dmm_u64map *m) { return m->count; }

/* Whether key is present; its value into *value (may be NULL). */
bool dmm__u64map_find(const dmm_u64map *m, uint64_t key, uint64_t *value);

/* Inserts key → value, or overwrites the value of a present key. False when the table had to grow
 * and the host is out of memory: then nothing changed. */
bool dmm__u64map_insert(dmm_u64map *m, uint64_t key, uint64_t value);

/* Overwrites the value of a present key; false (nothing changed) when absent. Never allocates. */
bool dmm__u64map_set(dmm_u64map *m, uint64_t key, uint64_t value);

/* Removes key; its value into *value (may be NULL). False when absent. Never allocates. */
bool dmm__u64map_remove(dmm_u64map *m, uint64_t key, uint64_t *value);

/* ---- promises ---- */

/* Makes room for n more keys and promises them; false (nothing changed) when memory is short. */
bool dmm__u64map_reserve(dmm_u64map *m, size_t n);
/* Gives n unused promises back. */
void dmm__u64map_unreserve(dmm_u64map *m, size_t n);
/* Fills one promised slot with key → value (overwrites a present key); cannot fail. */
void dmm__u64map_insert_reserved(dmm_u64map *m, uint64_t key, uint64_t value);
/* Removes key like dmm__u64map_remove but keeps its slot promised (pending + 1). False when absent. */
bool dmm__u64map_take(dmm_u64map *m, uint64_t key, uint64_t *value);

/* ---- iteration ----
 *   size_t at = 0; uint64_t k, v;
 *   while (dmm__u64map_next(m, &at, &k, &v)) { ... }
 * Visits every key once, in no particular order. The map must not change during the walk
 * (dmm__u64map_set of a visited key is fine). key and value may be NULL. */
bool dmm__u64map_next(const dmm_u64map *m, size_t *at, uint64_t *key, uint64_t *value);

#endif /* DMM_CORE_U64MAP_H */
