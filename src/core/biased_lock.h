/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/biased_lock.h — a lock biased to its usual owner: the thread that takes it most takes and
 * drops it with plain loads and stores, no locked read-modify-write. Never installed.
 *
 * Why: a pthread mutex pays two locked atomics per lock/unlock pair in any process that has more than
 * one thread (every CUDA process: libcuda starts threads), ~10 ns each on the H200 host. A pool heap
 * is one stream, and a stream is nearly always used by one thread, so its lock is nearly always
 * uncontended and retaken by the same thread.
 *
 * The protocol (an asymmetric Dekker handshake; the heavy side is made heavy by membarrier(2)):
 *   bias       = the owner's thread record, | 1 while another thread revokes it; 0 = unbiased (the
 *                mutex alone). Changed only by a thread that holds `m`.
 *   owner in   — the owner stores `inside[k] = l` in its own record, a compiler barrier, then loads
 *                `bias` (acquire): if it still reads its own record, it holds the lock; else it stores
 *                NULL back and takes the mutex path. Out: `inside[k] = NULL` (release).
 *   other in   — mutex_lock(m); bias |= 1; membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a
 *                full barrier on every running thread of the process; then waits until the owner's
 *                record holds l in no slot (acquire). Out: bias = its value before (or a new owner's
 *                record, see re-bias), release; mutex_unlock(m).
 *   Why it excludes: the owner's store of inside[k] either precedes the barrier membarrier forces on
 *   it (then the revoker sees it and waits) or follows it (then the owner's load of bias follows too,
 *   and reads the revoker's bit, and the owner backs off). A thread whose read of `bias` was stale
 *   writes only its own record, and is let in only if the acquire load after its store reads its own
 *   record again: either the revoker's bit is not visible yet (then the revoker waits for it, above),
 *   or the lock was handed back to it.
 *   A hot path may keep the slot it went in by (dmm_biased_lock_try_owner) and leave by one store to
 *   it (dmm_biased_lock_release_slot), instead of finding the slot again.
 *   (Without membarrier, a store-buffered owner could miss the bit while the revoker misses its
 *   store: so where membarrier is missing or its registration fails, no lock is ever biased, and
 *   every acquisition is the mutex path.)
 * Re-bias, under m: an unbiased lock is biased to the first thread that takes it, or, once it was
 * unbiased for being shared, to a thread that took it BIAS_AFTER times in a row; a biased lock moves
 * to a thread that revoked it REBIAS_AFTER times in a row while the owner did not take it, or at the
 * first revocation when the owner's thread has exited since (its record's epoch moved on: the record
 * may serve a new thread, which never asked for this lock); a lock
 * revoked UNBIAS_AFTER times without moving is shared and becomes unbiased (each revocation costs a
 * membarrier, ~1-10 µs: a shared lock is cheaper as a plain mutex).
 * Thread records: one per thread that took a lock, from a free list (records are never freed: a lock
 * may point at a record whose thread exited; the next thread to need one takes it, and with it the
 * bias of those locks). A thread holds at most two biased locks through the fast path at once (two
 * slots; a third goes through the mutex).
 * Under ThreadSanitizer (which cannot see membarrier's ordering) and without Linux the lock is the
 * mutex alone (DMM_BIASED_LOCK_MUTEX_ONLY).
 *
 * Invariants: bias & 1 ⇒ the thread holding m is between its revocation and its release; a thread
 * holds l through the fast path ⇔ l is in one slot of its record ∧ bias = that record (it read so
 * after its store); at most one thread holds l (the fast-path holder, or m's holder once the owner's
 * slots are clear of l); `run`, `mode`, `held` are written only by the lock's holder.
 * Thread contract: like a mutex; not recursive; release by the thread that acquired.
 */
#ifndef DMM_BIASED_LOCK_H
#define DMM_BIASED_LOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/atomics.h"

#if defined(__SANITIZE_THREAD__) || !defined(__linux__)
#define DMM_BIASED_LOCK_MUTEX_ONLY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DMM_BIASED_LOCK_MUTEX_ONLY 1
#endif
#endif

struct dmm_biased_lock;

/* A thread's record: which biased locks it holds through the fast path. */
typedef struct dmm_bias_thread {
    struct dmm_biased_lock *_Atomic inside[2]; /* written by its thread only; NULL = free slot */
    struct dmm_bias_thread *next_free;         /* the free list of records of exited threads */
    _Atomic uint64_t epoch;                    /* bumped when its thread exits (the record is recycled) */
} dmm_bias_thread;

typedef struct dmm_biased_lock {
    _Atomic uintptr_t bias;      /* the owner's record (| 1 while revoked); 0 = unbiased */
    uint32_t run;                /* consecutive mutex-path acquisitions by `last` (the owner's fast path zeroes it) */
    uint32_t revokes;            /* revocations since the lock was last biased (under m) */
    const dmm_bias_thread *last; /* the last thread that took the mutex path (under m) */
    uint64_t bias_epoch;         /* the owner record's epoch when the lock was biased to it (under m) */
    uintptr_t held;              /* the holder's view of bias when it took the mutex path */
    uint64_t slow;               /* mutex-path acquisitions (under m; for tests and tuning) */
    uint8_t mode;                /* the mutex-path holder's kind: 0 plain, 1 revoked the owner */
    bool shared;                 /* was unbiased for being shared: re-bias needs BIAS_AFTER in a row */
    pthread_mutex_t m;
} dmm_biased_lock;

#ifndef DMM_BIASED_LOCK_MUTEX_ONLY
/* This thread's record, or NULL (none taken yet, or biasing is off). */
extern _Thread_local dmm_bias_thread *dmm__bias_self;
#endif

void dmm_biased_lock_init(dmm_biased_lock *l);
void dmm_biased_lock_destroy(dmm_biased_lock *l);
void dmm__biased_lock_acquire_slow(dmm_biased_lock *l);
void dmm__biased_lock_release_slow(dmm_biased_lock *l);
bool dmm__biased_lock_try_slow(dmm_biased_lock *l);

/* The slot through which this thread holds l, or NULL: the owner's way in for a hot path that keeps
 * the slot and gives it back with dmm_biased_lock_release_slot (one store, no look-up). NULL says
 * nothing was taken: take l another way (dmm_biased_lock_acquire; dmm_biased_lock_release then finds
 * the slot itself). Always NULL where locks are never biased. */
typedef struct dmm_biased_lock *_Atomic dmm_biased_slot;
static inline dmm_biased_slot *dmm_biased_lock_try_owner(dmm_biased_lock *l) {
#ifdef DMM_BIASED_LOCK_MUTEX_ONLY
    (void)l;
    return NULL;
#else
    dmm_bias_thread *me = dmm__bias_self;
    uintptr_t b = dmm_atomic_load_relaxed(&l->bias);
    if (__builtin_expect(me == NULL || b != (uintptr_t)me, 0)) return NULL;
    dmm_biased_slot *slot = &me->inside[0];
    if (dmm_atomic_load_relaxed(slot) != NULL) {
        slot = &me->inside[1];
        if (dmm_atomic_load_relaxed(slot) != NULL) return NULL;
    }
    dmm_atomic_store_relaxed(slot, l);
    dmm_atomic_signal_fence_seq_cst(); /* the store stays before the load; membarrier does the rest */
    if (__builtin_expect(dmm_atomic_load_acquire(&l->bias) != b, 0)) {
        dmm_atomic_store_relaxed(slot, NULL); /* revoked: the mutex path */
        return NULL;
    }
    l->run = 0; /* the owner took it: another thread's run of revocations starts over */
    return slot;
#endif
}

/* Releases a lock taken through dmm_biased_lock_try_owner's slot. */
static inline void dmm_biased_lock_release_slot(dmm_biased_slot *slot) {
    dmm_atomic_store_release(slot, NULL);
}

/* The owner's way in: true when this thread now holds l. */
static inline bool dmm__biased_lock_try_fast(dmm_biased_lock *l) { return dmm_biased_lock_try_owner(l) != NULL; }

static inline void dmm_biased_lock_acquire(dmm_biased_lock *l) {
#ifdef DMM_BIASED_LOCK_MUTEX_ONLY
    pthread_mutex_lock(&l->m);
#else
    if (__builtin_expect(dmm__biased_lock_try_fast(l), 1)) return;
    dmm__biased_lock_acquire_slow(l);
#endif
}

/* Never waits for another holder (it may fail while the lock is free but being revoked). */
static inline bool dmm_biased_lock_try(dmm_biased_lock *l) {
#ifdef DMM_BIASED_LOCK_MUTEX_ONLY
    return pthread_mutex_trylock(&l->m) == 0;
#else
    return dmm__biased_lock_try_fast(l) || dmm__biased_lock_try_slow(l);
#endif
}

static inline void dmm_biased_lock_release(dmm_biased_lock *l) {
#ifdef DMM_BIASED_LOCK_MUTEX_ONLY
    pthread_mutex_unlock(&l->m);
#else
    dmm_bias_thread *me = dmm__bias_self;
    if (__builtin_expect(me != NULL, 1)) {
        if (dmm_atomic_load_relaxed(&me->inside[0]) == l) {
            dmm_atomic_store_release(&me->inside[0], NULL);
            return;
        }
        if (dmm_atomic_load_relaxed(&me->inside[1]) == l) {
            dmm_atomic_store_release(&me->inside[1], NULL);
            return;
        }
    }
    dmm__biased_lock_release_slow(l);
#endif
}

/* ---- for tests ---- */
/* Whether locks can be biased in this process (membarrier registered, not forced off, not TSan). */
bool dmm__biased_lock_available(void);
/* Forces the no-membarrier fallback (true) for locks biased from now on, or lifts it (false). Locks
 * biased before stay so until they are revoked. */
void dmm__biased_lock_force_mutex(bool on);
/* Whether l is biased to the calling thread (read racily: for a test's own quiescent lock). */
bool dmm__biased_lock_biased_to_me(dmm_biased_lock *l);

#endif /* DMM_BIASED_LOCK_H */
