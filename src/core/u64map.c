/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/u64map.c — the u64 → u64 hash map (contract and invariants: u64map.h).
 *
 * The idea: linear probing keeps a probe run in one or two cache lines at a load of 1/2; deletion by
 * backward shift (Knuth 6.4, algorithm R) keeps the table free of tombstones, so a lookup ends at the
 * first empty slot however many keys came and went. The trade-off: a removal may move several
 * slots, and iteration must not interleave with removals.
 *
 * Invariant kept by every function here: count + pending ≤ cap / 2 (so a probe always finds an empty
 * slot and a promised insert always has room).
 */
#include "core/u64map.h"

#include <stdlib.h>
#include <string.h>

#define U64MAP_MIN_CAP 16

static size_t home_of(uint64_t k, size_t cap) {
    k ^= k >> 33; /* the murmur3 finalizer: ids and page-aligned addresses spread over the table */
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

/* The slot holding key, or the empty slot that ends its probe run. Needs cap > 0. */
static size_t probe(const dmm_u64map *m, uint64_t key) {
    size_t mask = m->cap - 1, i = home_of(key, m->cap);
    while (m->slots[i].used && m->slots[i].key != key) i = (i + 1) & mask;
    return i;
}

/* Makes room for `need` keys at a load of at most 1/2; false (nothing changed) when memory is short. */
static bool fit(dmm_u64map *m, size_t need) {
    if (need > SIZE_MAX / 4) return false;
    if (need * 2 <= m->cap) return true;
    size_t cap = m->cap != 0 ? m->cap : U64MAP_MIN_CAP;
    while (cap < need * 2) cap *= 2;
    dmm_u64map_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used) continue;
        size_t j = home_of(m->slots[i].key, cap);
        while (slots[j].used) j = (j + 1) & (cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return true;
}

/* Puts key → value where probe() says; the room is the caller's (fit or a promise). */
static void put(dmm_u64map *m, uint64_t key, uint64_t value) {
    size_t i = probe(m, key);
    if (!m->slots[i].used) m->count++;
    m->slots[i] = (dmm_u64map_slot){key, value, true};
}

void dmm__u64map_init(dmm_u64map *m) { memset(m, 0, sizeof *m); }

void dmm__u64map_fini(dmm_u64map *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

bool dmm__u64map_find(const dmm_u64map *m, uint64_t key, uint64_t *value) {
    if (m->cap == 0) return false;
    size_t i = probe(m, key);
    if (!m->slots[i].used) return false;
    if (value != NULL) *value = m->slots[i].value;
    return true;
}

bool dmm__u64map_insert(dmm_u64map *m, uint64_t key, uint64_t value) {
    if (dmm__u64map_set(m, key, value)) return true; /* present: no room needed */
    if (!fit(m, m->count + m->pending + 1)) return false;
    put(m, key, value);
    return true;
}

bool dmm__u64map_set(dmm_u64map *m, uint64_t key, uint64_t value) {
    if (m->cap == 0) return false;
    size_t i = probe(m, key);
    if (!m->slots[i].used) return false;
    m->slots[i].value = value;
    return true;
}

bool dmm__u64map_remove(dmm_u64map *m, uint64_t key, uint64_t *value) {
    if (m->cap == 0) return false;
    size_t mask = m->cap - 1, hole = probe(m, key);
    if (!m->slots[hole].used) return false;
    if (value != NULL) *value = m->slots[hole].value;
    /* Backward shift: a later member j of the run moves into the hole unless its home lies
     * cyclically in (hole, j], where it is still reachable without passing the hole. */
    for (size_t j = (hole + 1) & mask; m->slots[j].used; j = (j + 1) & mask) {
        size_t home = home_of(m->slots[j].key, m->cap);
        bool reachable = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!reachable) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].used = false;
    m->count--;
    return true;
}

bool dmm__u64map_reserve(dmm_u64map *m, size_t n) {
    if (n > SIZE_MAX / 4 - m->count - m->pending) return false;
    if (!fit(m, m->count + m->pending + n)) return false;
    m->pending += n;
    return true;
}

void dmm__u64map_unreserve(dmm_u64map *m, size_t n) { m->pending -= n < m->pending ? n : m->pending; }

void dmm__u64map_insert_reserved(dmm_u64map *m, uint64_t key, uint64_t value) {
    if (m->pending > 0) m->pending--;
    put(m, key, value);
}

bool dmm__u64map_take(dmm_u64map *m, uint64_t key, uint64_t *value) {
    if (!dmm__u64map_remove(m, key, value)) return false;
    m->pending++;
    return true;
}

bool dmm__u64map_next(const dmm_u64map *m, size_t *at, uint64_t *key, uint64_t *value) {
    for (size_t i = *at; i < m->cap; i++) {
        if (!m->slots[i].used) continue;
        if (key != NULL) *key = m->slots[i].key;
        if (value != NULL) *value = m->slots[i].value;
        *at = i + 1;
        return true;
    }
    *at = m->cap;
    return false;
}
