/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/commit.h — the arena's one transaction (commit.c): what commit, alias and prefix commit
 * share. Never installed. Everything here runs under the arena's lock, except where said. */
#ifndef DMM_MECH_COMMIT_H
#define DMM_MECH_COMMIT_H

#include "mech/arena_types.h"

typedef struct arena_ref_run {
    uint64_t g, n;
} arena_ref_run;

/* The log of one transaction: what it did, so that a failure undoes exactly that. */
typedef struct arena_txn {
    uint32_t *born; /* chunk slots born by this call, in order */
    size_t nborn, capborn;
    arena_ref_run *runs; /* granules of the record that this call made referenced */
    size_t nruns, capruns;
    uint64_t newly_mapped;
    size_t free_pieces; /* free spans among the granules of the ranges committed so far (poison room) */
    bool leaked;        /* an undo step could not be undone */
} arena_txn;

/* Makes room in the log for `born` more chunks and `runs` more reference runs (false: no host
 * memory; nothing changed). */
bool dmm__arena_txn_room(arena_txn *t, size_t born, size_t runs);
/* Logs a chunk the call bore (room made). */
static inline void dmm__arena_txn_born(arena_txn *t, uint32_t slot) { t->born[t->nborn++] = slot; }
/* Makes r reference granule g (backed by a LIVE chunk, not referenced by r yet), logged: a run
 * continues the last one or needs one more run of room. Cannot fail. */
void dmm__arena_txn_ref(dmm_arena *a, arena_record *r, arena_txn *t, uint64_t g);

/* One kind of transaction: its two steps, both under the lock. */
typedef struct arena_txn_kind {
    /* Checks the request against r (found again, maybe after the lock was dropped) and says what
     * the call will charge: need[DMM_AXIS_OWNED], need[DMM_AXIS_MAPPED]. Changes nothing; sets the
     * error on a refusal. */
    dmm_status (*plan)(dmm_arena *a, arena_record *r, void *req, const char *op, uint64_t need[2]);
    /* Does it, logging every step in t and drawing its charges from the pot. On failure t holds
     * what was done (the runner undoes it) and the error names the failure. */
    dmm_status (*apply)(dmm_arena *a, arena_record *r, void *req, const char *op, arena_txn *t);
    const char *nothing; /* what did not happen when the record went while the lock was dropped */
} arena_txn_kind;

/* Runs one transaction of `kind` on the record at `off` with generation `id`: plan; charge the
 * plan's need ahead OUTSIDE the lock (the hook may climb the governor's reclaim ladder, whose
 * holders may call into this very arena), then take the lock, find the record again and plan again
 * (the arena may have changed meanwhile; a plan that needs more tops the pot up by the difference:
 * what it holds only grows, so this ends); apply with the charges drawn from the pot; undo the
 * whole log on failure; refund what the pot still holds. A shortfall (BUSY, the arena changed
 * between plan and apply) is undone and planned again unless its undo leaked. Called and returns
 * with the lock held. *newly (may be NULL) = the bytes newly mapped on success. */
dmm_status dmm__arena_txn_run(dmm_arena *a, uint64_t off, uint64_t id, const arena_txn_kind *kind, void *req,
                              const char *op, uint64_t *newly);

/* Commits the ranges of the record at off/id (whole: all of it) as one transaction; each unbacked run
 * is cut into pieces of piece_g granules from its start (0: the arena's limit) and each piece into
 * chunks at the limit, so that no chunk crosses a piece. */
dmm_status dmm__arena_commit(dmm_arena *a, uint64_t off, uint64_t id, bool whole, const dmm_range *ranges, size_t n,
                             uint64_t piece_g, const char *op, uint64_t *newly);

/* The virtual-backing slot `alias` (dmm_arena_alias and dmm_mechanism_alias both land here): maps
 * the committed chunks of src a second time at dst of the same allocation, as one transaction.
 * Takes the lock. */
dmm_status dmm__arena_alias(void *impl, const dmm_allocation *al, dmm_range dst, dmm_range src);

#endif /* DMM_MECH_COMMIT_H */
