/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/atomics.h — the one spelling of atomic operations in dmm: wrappers whose names carry the
 * memory order (mimalloc's atomic.h). Never installed.
 *
 * What it owns: every atomic read-modify-write, load, store and fence under src/, tests/ and bench/
 * goes through these names; a bare atomic_*_explicit, a C11 default-order atomic_load or a
 * __atomic builtin elsewhere is a second spelling (the driver's latch in src/driver/ and the
 * adapters keep theirs until they are converted; a plugin module of tests/plugin/ sees only the
 * public headers and keeps stdatomic.h).
 *
 * Idea: the order is part of the name, so a reader sees at every call what it synchronises with
 * (dmm_atomic_store_release ... dmm_atomic_load_acquire), and a relaxed counter cannot be mistaken
 * for a publication. They are macros over C11 <stdatomic.h>, so one name serves every atomic type
 * (counters, pointers, flags) and compiles to the same instruction as the call it replaces.
 *
 * Conventions: add / sub / exchange return the value before the operation (C11's fetch_*);
 * dmm_atomic_cas_<strong|weak>_<order>(p, expected, desired) returns whether it swapped, and on
 * failure loads *expected with the strongest order C11 allows for that success order (acq_rel →
 * acquire, release → relaxed, relaxed → relaxed, seq_cst → seq_cst). Only atomic_init (not an atomic
 * operation) and the _Atomic types are spelled as C11 spells them.
 */
#ifndef DMM_CORE_ATOMICS_H
#define DMM_CORE_ATOMICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- loads ---- */
#define dmm_atomic_load_relaxed(p) atomic_load_explicit((p), memory_order_relaxed)
#define dmm_atomic_load_acquire(p) atomic_load_explicit((p), memory_order_acquire)
#define dmm_atomic_load_seq_cst(p) atomic_load_explicit((p), memory_order_seq_cst)

/* ---- stores ---- */
#define dmm_atomic_store_relaxed(p, x) atomic_store_explicit((p), (x), memory_order_relaxed)
#define dmm_atomic_store_release(p, x) atomic_store_explicit((p), (x), memory_order_release)
#define dmm_atomic_store_seq_cst(p, x) atomic_store_explicit((p), (x), memory_order_seq_cst)

/* ---- read-modify-write (each returns the value before) ---- */
#define dmm_atomic_add_relaxed(p, x) atomic_fetch_add_explicit((p), (x), memory_order_relaxed)
#define dmm_atomic_add_release(p, x) atomic_fetch_add_explicit((p), (x), memory_order_release)
#define dmm_atomic_add_acq_rel(p, x) atomic_fetch_add_explicit((p), (x), memory_order_acq_rel)
#define dmm_atomic_add_seq_cst(p, x) atomic_fetch_add_explicit((p), (x), memory_order_seq_cst)
#define dmm_atomic_sub_relaxed(p, x) atomic_fetch_sub_explicit((p), (x), memory_order_relaxed)
#define dmm_atomic_sub_release(p, x) atomic_fetch_sub_explicit((p), (x), memory_order_release)
#define dmm_atomic_sub_seq_cst(p, x) atomic_fetch_sub_explicit((p), (x), memory_order_seq_cst)
#define dmm_atomic_exchange_seq_cst(p, x) atomic_exchange_explicit((p), (x), memory_order_seq_cst)

/* ---- compare and swap (true = swapped; else *expected holds what was there) ---- */
#define dmm_atomic_cas_strong_acq_rel(p, expected, desired)                                                  \
    atomic_compare_exchange_strong_explicit((p), (expected), (desired), memory_order_acq_rel,                 \
                                            memory_order_acquire)
#define dmm_atomic_cas_weak_relaxed(p, expected, desired)                                                    \
    atomic_compare_exchange_weak_explicit((p), (expected), (desired), memory_order_relaxed, memory_order_relaxed)

/* Raises *p to x if x is larger (a peak); relaxed: a peak is a statistic, it orders nothing. */
static inline void dmm_atomic_max_relaxed(_Atomic uint64_t *p, uint64_t x) {
    uint64_t current = dmm_atomic_load_relaxed(p);
    while (x > current && !dmm_atomic_cas_weak_relaxed(p, &current, x)) {
    }
}

/* ---- fences ---- */
/* Keeps the compiler from moving memory accesses across it; no instruction (the other half of the
 * ordering is another mechanism's, e.g. membarrier in src/core/biased_lock.h). */
#define dmm_atomic_signal_fence_seq_cst() atomic_signal_fence(memory_order_seq_cst)

#endif /* DMM_CORE_ATOMICS_H */
