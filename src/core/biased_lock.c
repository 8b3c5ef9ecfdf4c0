/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/biased_lock.c — the biased lock's mutex path: revocation, re-bias, and the threads'
 * records (the protocol and its invariants: biased_lock.h).
 *
 * What it owns: whether this process can bias locks at all (membarrier(2) queried and registered
 * once), the per-thread records (taken from a free list, given back at thread exit through a pthread
 * key, never freed), and every decision to bias, re-bias or unbias a lock — all under the lock's
 * mutex, so that only one thread at a time changes `bias`.
 *
 * Trade-off: the owner's way in and out costs a few plain loads and stores; any other thread pays a
 * mutex plus one membarrier system call (~1-10 µs: it interrupts every CPU that runs a thread of this
 * process), so a lock that threads really share is unbiased after UNBIAS_AFTER revocations and costs
 * a plain mutex from then on.
 *
 * Invariants (besides the header's): records on the free list belong to no live thread and hold no
 * lock; `available` goes from unknown to a final answer once; when it is false no lock is biased by
 * this file (the fallback is the mutex alone).
 */
#include "core/biased_lock.h"

#include "core/core.h"

#include <sched.h>
#include <stdlib.h>

#ifndef DMM_BIASED_LOCK_MUTEX_ONLY
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

enum {
    BIAS_AFTER = 64,   /* mutex-path acquisitions in a row by one thread that bias a lock unbiased for being shared */
    REBIAS_AFTER = 8,  /* revocations in a row by one thread, the owner idle, that move the bias to that thread */
    UNBIAS_AFTER = 64, /* revocations without a move after which the lock counts as shared */
};

enum { MODE_PLAIN = 0, MODE_REVOKED = 1 };

void dmm_biased_lock_init(dmm_biased_lock *l) {
    dmm_atomic_store_relaxed(&l->bias, 0);
    l->run = 0;
    l->revokes = 0;
    l->last = NULL;
    l->bias_epoch = 0;
    l->held = 0;
    l->slow = 0;
    l->mode = MODE_PLAIN;
    l->shared = false;
    pthread_mutex_init(&l->m, NULL);
}

void dmm_biased_lock_destroy(dmm_biased_lock *l) { pthread_mutex_destroy(&l->m); }

#ifdef DMM_BIASED_LOCK_MUTEX_ONLY

void dmm__biased_lock_acquire_slow(dmm_biased_lock *l) { pthread_mutex_lock(&l->m); }
void dmm__biased_lock_release_slow(dmm_biased_lock *l) { pthread_mutex_unlock(&l->m); }
bool dmm__biased_lock_try_slow(dmm_biased_lock *l) { return pthread_mutex_trylock(&l->m) == 0; }
bool dmm__biased_lock_available(void) { return false; }
void dmm__biased_lock_force_mutex(bool on) { (void)on; }
bool dmm__biased_lock_biased_to_me(dmm_biased_lock *l) {
    (void)l;
    return false;
}

#else

_Thread_local dmm_bias_thread *dmm__bias_self;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_membarrier;          /* registered for MEMBARRIER_CMD_PRIVATE_EXPEDITED (set once, in setup) */
static bool g_global;              /* MEMBARRIER_CMD_GLOBAL is there too (the fallback of a failed command) */
static _Atomic bool g_forced_off;  /* tests: the fallback forced */
static pthread_key_t g_key;        /* its destructor gives a thread's record back */
static _Atomic bool g_key_made;    /* g_key exists (read at unload, by whichever thread unloads) */
static pthread_mutex_t g_free_mu = PTHREAD_MUTEX_INITIALIZER;
static dmm_bias_thread *g_free;    /* records of exited threads (under g_free_mu) */

static void record_put(void *rec) {
    dmm_bias_thread *r = rec;
    dmm__bias_self = NULL; /* a later destructor that takes a lock gets a record again */
    dmm_atomic_add_relaxed(&r->epoch, 1); /* its locks' owner is gone */
    pthread_mutex_lock(&g_free_mu);
    r->next_free = g_free;
    g_free = r;
    pthread_mutex_unlock(&g_free_mu);
}

static void setup(void) {
    long mask = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0);
    if (mask < 0 || (mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 ||
        (mask & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
        return;
    /* the registration is the process's (its mm): inherited across fork, reset only by exec */
    if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) != 0) return;
    g_global = (mask & MEMBARRIER_CMD_GLOBAL) != 0;
    if (pthread_key_create(&g_key, record_put) != 0) return; /* records could not be given back */
    dmm_atomic_store_release(&g_key_made, true);
    g_membarrier = true;
}

/* At unload (dlclose of the library): no exiting thread may call record_put once its code is gone.
 * The records of threads still alive are then never given back (they leak, as the library goes). */
__attribute__((destructor)) static void unload(void) {
    if (dmm_atomic_load_acquire(&g_key_made)) pthread_key_delete(g_key);
}

static bool available(void) {
    pthread_once(&g_once, setup);
    return g_membarrier && !dmm_atomic_load_relaxed(&g_forced_off);
}

bool dmm__biased_lock_available(void) { return available(); }

void dmm__biased_lock_force_mutex(bool on) { dmm_atomic_store_relaxed(&g_forced_off, on); }

bool dmm__biased_lock_biased_to_me(dmm_biased_lock *l) {
    uintptr_t b = dmm_atomic_load_acquire(&l->bias);
    return dmm__bias_self != NULL && b == (uintptr_t)dmm__bias_self;
}

/* This thread's record, taken on its first mutex-path acquisition; NULL when biasing is off or no
 * memory is left (the thread then always takes the mutex path). */
static dmm_bias_thread *record_get(void) {
    dmm_bias_thread *r = dmm__bias_self;
    if (r != NULL || !available()) return r;
    pthread_mutex_lock(&g_free_mu);
    r = g_free;
    if (r != NULL) g_free = r->next_free;
    pthread_mutex_unlock(&g_free_mu);
    if (r == NULL) {
        r = aligned_alloc(DMM_SHARING_BYTES, DMM_SHARING_BYTES); /* only its thread writes it: nothing shares its lines */
        if (r == NULL) return NULL;
        dmm_atomic_store_relaxed(&r->epoch, 0);
    }
    dmm_atomic_store_relaxed(&r->inside[0], NULL);
    dmm_atomic_store_relaxed(&r->inside[1], NULL);
    r->next_free = NULL;
    if (pthread_setspecific(g_key, r) != 0) { /* could not be given back at exit: keep it unused */
        record_put(r);
        return NULL;
    }
    dmm__bias_self = r;
    return r;
}

static bool holds(const dmm_bias_thread *o, const dmm_biased_lock *l) {
    return dmm_atomic_load_acquire((struct dmm_biased_lock *_Atomic *)&o->inside[0]) == l ||
           dmm_atomic_load_acquire((struct dmm_biased_lock *_Atomic *)&o->inside[1]) == l;
}

/* A full barrier on every running thread of the process, and in this one. After the registration the
 * expedited command fails only for want of kernel memory (its CPU mask): then the global one (which
 * allocates nothing, slower: it waits for a grace period), or the expedited one again. It does not
 * return before one succeeded: exclusion depends on it. */
static void barrier_everywhere(void) {
    for (;;) {
        if (syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0) return;
        if (g_global && syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0) == 0) return;
        sched_yield();
    }
}

/* Under m: revokes the owner's bias (its fast path backs off from now on); true once the owner is
 * out. `may_wait` false: gives up (and restores the bias) instead of waiting for an owner inside. */
static bool revoke_owner(dmm_biased_lock *l, uintptr_t b, bool may_wait) {
    dmm_atomic_store_relaxed(&l->bias, b | 1);
    barrier_everywhere(); /* the owner's store of its slot is visible to the loads below from here on */
    const dmm_bias_thread *o = (const dmm_bias_thread *)b;
    for (unsigned spins = 0; holds(o, l); spins++) {
        if (!may_wait) {
            dmm_atomic_store_release(&l->bias, b);
            return false;
        }
        if (spins >= 64) sched_yield(); /* the owner's critical section is short, unless it was preempted */
    }
    return true;
}

/* Under m, having taken it: the holder's kind and the run bookkeeping. */
static void taken(dmm_biased_lock *l, const dmm_bias_thread *me, uintptr_t b, uint8_t mode) {
    l->held = b;
    l->mode = mode;
    l->slow++;
    if (mode == MODE_REVOKED) l->revokes++;
    if (b != 0 && b == (uintptr_t)me) { /* the owner itself, both slots busy or it just lost a race */
        l->run = 0;
        return;
    }
    if (me != NULL && me == l->last) {
        l->run++;
    } else {
        l->last = me;
        l->run = 1;
    }
}

void dmm__biased_lock_acquire_slow(dmm_biased_lock *l) {
    dmm_bias_thread *me = record_get();
    pthread_mutex_lock(&l->m);
    uintptr_t b = dmm_atomic_load_relaxed(&l->bias); /* only m's holder changes it */
    bool other = b != 0 && b != (uintptr_t)me;
    if (other) (void)revoke_owner(l, b, true);
    taken(l, me, b, other ? MODE_REVOKED : MODE_PLAIN);
}

bool dmm__biased_lock_try_slow(dmm_biased_lock *l) {
    dmm_bias_thread *me = record_get();
    if (pthread_mutex_trylock(&l->m) != 0) return false;
    uintptr_t b = dmm_atomic_load_relaxed(&l->bias);
    bool other = b != 0 && b != (uintptr_t)me;
    if (other && !revoke_owner(l, b, false)) {
        pthread_mutex_unlock(&l->m);
        return false;
    }
    taken(l, me, b, other ? MODE_REVOKED : MODE_PLAIN);
    return true;
}

void dmm__biased_lock_release_slow(dmm_biased_lock *l) {
    const dmm_bias_thread *me = dmm__bias_self;
    uintptr_t b = l->held, nb = b;
    bool mine = me != NULL && me == l->last;
    if (l->mode == MODE_REVOKED) {
        /* the owner's thread exited (the epoch of the record the lock is biased to moved on) */
        bool gone = dmm_atomic_load_relaxed(&((const dmm_bias_thread *)(b & ~(uintptr_t)1))->epoch) != l->bias_epoch;
        if (mine && (gone || l->run >= REBIAS_AFTER) && available()) nb = (uintptr_t)me; /* owner idle or gone: move */
        else if (l->revokes >= UNBIAS_AFTER) { /* shared: the mutex alone */
            nb = 0;
            l->shared = true;
        }
    } else if (b == 0 && mine && l->run >= (l->shared ? (uint32_t)BIAS_AFTER : 1u) && available()) {
        nb = (uintptr_t)me; /* the first thread to take it, or one that has it to itself again */
    }
    if (nb != b) {
        l->revokes = 0;
        l->run = 0;
        if (nb != 0) l->bias_epoch = dmm_atomic_load_relaxed(&me->epoch);
    }
    if (l->mode == MODE_REVOKED || nb != b) dmm_atomic_store_release(&l->bias, nb);
    pthread_mutex_unlock(&l->m);
}

#endif
