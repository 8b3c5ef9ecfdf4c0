/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/mech_internal.h — what mechanism implementations (eager, arena, prefix, …) may know about
 * the generic wrapper of src/mech/mechanism.c. Never installed.
 *
 * The contract between the wrapper and an implementation:
 *  - dmm_mechanism_create() stores (ops, impl) in a dmm_mechanism; that public pointer is the
 *    mechanism's identity.
 *  - allocate / allocate_committed: the implementation fills ptr, bytes, align, id (and may leave
 *    mechanism/device unset). After the implementation returned DMM_OK, THE WRAPPER sets
 *    out->mechanism = the public dmm_mechanism* and out->device = ops->device(impl). So an
 *    implementation never needs to know its wrapper to hand out allocations.
 *  - release / commit / decommit / committed_bytes / mapped_bytes_for_ranges: the wrapper has
 *    already checked that a != NULL and a->mechanism == this mechanism (else WRONG_MECHANISM, for
 *    release-shaped calls as a FAILED outcome) before calling the implementation; the
 *    implementation validates everything else (ptr, bytes, align, id against its live record).
 *  - release-outcome counters (releases_complete/quarantined/failed) are kept by the
 *    implementation in its own stats; the wrapper counts nothing.
 *  - dmm_mechanism_create() on failure takes no ownership: the caller still owns impl and must
 *    destroy it. Required slots: name, allocate, release, device; destroy may be NULL (nothing to
 *    destroy). dmm_mechanism_destroy() frees the wrapper only if ops->destroy returned DMM_OK.
 *  - the wrapper refuses bytes == 0 and a non-power-of-two align before calling allocate /
 *    allocate_committed (align 0 reaches the implementation: "your default"), and ranges that do not
 *    lie inside [0, a->bytes) before commit / decommit / mapped_bytes_for_ranges.
 *  - typed helpers that take a public dmm_mechanism* (e.g. dmm_arena_check) find their impl with
 *    dmm__mechanism_impl_if(m, &their_ops): NULL (→ WRONG_MECHANISM) for another kind of mechanism.
 */
#ifndef DMM_MECH_INTERNAL_H
#define DMM_MECH_INTERNAL_H

#include "dmm/mechanism.h"

struct dmm_mechanism {
    const dmm_mechanism_ops *ops; /* the caller's table (outlives the mechanism) */
    void *impl;                   /* owned; destroyed through ops->destroy */
    uint32_t caps;                /* dmm_capability bits, computed once at create */
};

/* impl of `m` if `m` was built from exactly the table `ops`, else NULL (also for m == NULL). */
static inline void *dmm__mechanism_impl_if(const dmm_mechanism *m, const dmm_mechanism_ops *ops) {
    return m != NULL && m->ops == ops ? m->impl : NULL;
}

/* A FAILED outcome (nothing changed) for `bytes`, with the status that explains it. */
static inline dmm_release_outcome dmm__outcome_failed(uint64_t bytes, dmm_status failure) {
    dmm_release_outcome o = {DMM_RELEASE_FAILED, bytes, 0, 0, failure, 0};
    return o;
}

/* A COMPLETE outcome. */
static inline dmm_release_outcome dmm__outcome_complete(uint64_t bytes, uint64_t unmapped) {
    dmm_release_outcome o = {DMM_RELEASE_COMPLETE, bytes, unmapped, 0, DMM_OK, 0};
    return o;
}

#endif /* DMM_MECH_INTERNAL_H */
