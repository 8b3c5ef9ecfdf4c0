/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/sorted.h — the one binary search over a sorted array of records: the lower bound of a
 * 64-bit key. Internal; never installed.
 *
 * The arrays it serves (the host driver's tables, the eager mechanism's records, the arena's spans)
 * are arrays of structs sorted by one 64-bit field (an address or an offset). The search is written
 * once, over (base, count, record size, key offset); DMM_LOWER_BOUND names the type and field so a
 * call site reads as what it means. Inlined with constant size and offset, it compiles to the same
 * loop as a hand-written one.
 *
 * Contract: v[0..n) is sorted ascending by the key (duplicates allowed); the key field is 8 bytes
 * (uint64_t, or uintptr_t on LP64: checked at compile time below).
 * Result: the first index i with key(v[i]) ≥ key, or n when there is none.
 */
#ifndef DMM_CORE_SORTED_H
#define DMM_CORE_SORTED_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline size_t dmm__lower_bound(const void *v, size_t n, size_t record_size, size_t key_offset, uint64_t key) {
    const unsigned char *base = v;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t k;
        memcpy(&k, base + mid * record_size + key_offset, sizeof k); /* no aliasing or alignment games */
        if (k < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* dmm__lower_bound over `n` records of `type` at `v`, keyed by `type.field` (uint64_t or uintptr_t). */
#define DMM_LOWER_BOUND(v, n, type, field, key)                                                              \
    dmm__lower_bound((v), (n), sizeof(type), offsetof(type, field), (uint64_t)(key))

_Static_assert(sizeof(uintptr_t) == sizeof(uint64_t), "sorted.h: address keys are read as 64-bit keys");

#endif /* DMM_CORE_SORTED_H */
