/* src/mech/arena_internal.h — the arena's data, shared by its files. Never installed.
 *
 *   arena.c        the mechanism: create/destroy, allocation records, allocate, commit and alias
 *                  (one transaction per call), queries, stats, device loss
 *   chunks.c       physical chunks: the granule map, chunk birth (charge, create or take from the
 *                  cache or join an alias ring, map, set access) and death (unmap, leave the ring,
 *                  cache or release), poisoning, the handle cache, quarantined handles, every driver
 *                  call and every charge and refund
 *   release.c      the release state machine: whole release and decommit, and their outcomes
 *   arena_check.c  the expensive invariant check
 *   spans.c        the span set behind the free list and the quarantine
 *   prefix.c       shared prefixes (DESIGN §4.6): the owner's chunks held by a prefix object and
 *                  mapped read-only into other allocations (the shared_mapping capability)
 *
 * Vocabulary: offsets are bytes from the reservation's base; a granule index g covers
 * [g·G, (g+1)·G). A chunk is one MAPPING of a driver handle over granules [first, first+n), mapped as
 * one unit. A handle is usually mapped by one chunk; dmm_arena_alias maps it at a second place, and
 * the chunks that map one handle form a ring (chunk.twin: the next one; itself when alone). A ring
 * owns its handle: OWNED is charged once per handle (at its creation), MAPPED once per chunk; a
 * chunk that dies while its ring has other members only unmaps and leaves the ring (its handle
 * stays); the last one out caches or releases the handle.
 *
 * Prefixes: a prefix (prefix.c) holds the handles of some of its owner's chunks (one piece per
 * handle). Every chunk mapping a held handle points at its piece (chunk.piece); the piece names one
 * chunk of the ring (piece.ring = slot + 1), or none (0: PARKED: no mapping is left and the prefix
 * alone holds the handle, owned and charged). Sharers map the handles READ-only (chunk.access); the
 * last chunk of a held ring that dies parks the handle instead of caching or releasing it; a
 * released prefix lets go of its pieces: the parked ones are cached or released at once, the mapped
 * ones go with their ring's last mapping as any other handle.
 *
 * Invariants (checked by dmm_arena_check, between operations, under the lock):
 *   free ∪ live spans ∪ quarantine tile [0, reserve) without overlap; free is sorted and coalesced
 *   gmap[g] = k+1 ⇔ chunk k is LIVE or POISONED and first ≤ g < first+n; otherwise gmap[g] = 0
 *   chunk.refs = Σ over live records r of |{g ∈ chunk : bit(r, g)}|; LIVE ⇒ refs > 0; POISONED ⇒ refs = 0
 *   bit(r, g) ⇒ gmap[g] names a LIVE chunk;  r.nrefs = popcount(r.bits)
 *   a ring's members are LIVE or POISONED chunks with the same phys, n and piece; distinct rings, the
 *   cache, the quarantined handles and the parked pieces hold distinct handles (a handle's mapping
 *   count = its ring's length); piece.ring ≠ 0 ⇒ that slot is a member of a ring mapping piece.phys
 *   whose chunks point at the piece; a chunk's piece belongs to a live prefix
 *   stats.committed = Σ LIVE chunk bytes;  stats.mapped = Σ (LIVE + POISONED) chunk bytes (an alias
 *   counts once per mapping: mapped may exceed owned)
 *   stats.owned = Σ ring handle bytes + cache.bytes + qhandles.bytes + Σ parked piece bytes;
 *   stats.handles = #rings + #cache + #qhandles + #parked pieces
 *   unless lost: charged[OWNED] = stats.owned, charged[MAPPED] = stats.mapped
 */
#ifndef DMM_MECH_ARENA_INTERNAL_H
#define DMM_MECH_ARENA_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"
#include "driver/call.h"
#include "dmm/arena.h"
#include "mech/mech_internal.h"
#include "core/spans.h"

typedef enum chunk_state {
    CHUNK_FREE = 0,     /* the slot is unused */
    CHUNK_BIRTH = 1,    /* being created by the operation in progress (never seen between operations) */
    CHUNK_LIVE = 2,     /* mapped (with chunk.access), referenced by at least one live allocation */
    CHUNK_POISONED = 3, /* its unmap failed: still mapped and owned, never committed again */
} chunk_state;

struct arena_piece;

typedef struct arena_chunk {
    uint64_t first;  /* first granule */
    uint64_t n;      /* granules */
    uint64_t refs;   /* (live allocation, granule) references inside the chunk */
    dmm_phys phys;   /* the driver handle */
    uint32_t twin;   /* the next chunk slot mapping the same handle (a ring); its own slot when alone */
    uint8_t state;   /* chunk_state */
    bool mapped;     /* the handle is mapped at the chunk's VA (false only inside an operation) */
    bool from_cache; /* meaningful only in the operation that bore it: an undo puts the handle back */
    uint8_t access;  /* the dmm_access it is mapped with: READ_WRITE, or READ for a prefix's sharer */
    struct arena_piece *piece; /* the prefix piece holding its handle, or NULL (same in the whole ring) */
} arena_chunk;

/* One handle of a prefix. */
typedef struct arena_piece {
    dmm_phys phys;
    uint64_t n;    /* granules */
    uint32_t ring; /* slot + 1 of a chunk mapping the handle; 0 = parked (no mapping; the prefix holds it) */
} arena_piece;

/* A live prefix: created once from its owner's chunks, freed by dmm_prefix_release. */
typedef struct arena_prefix {
    struct arena_prefix *next;
    uint64_t id;         /* generation, from the arena's counter (never reused) */
    uint64_t bytes;      /* Σ pieces' bytes */
    size_t n;            /* pieces, in address order of the owner's range */
    arena_piece *pieces;
} arena_prefix;

/* A handle held without a mapping: in the cache, or quarantined after a failed release. */
typedef struct arena_handle {
    dmm_phys phys;
    uint64_t bytes;
} arena_handle;

typedef struct handle_vec {
    arena_handle *v;
    size_t n, cap;
    uint64_t bytes; /* Σ v[i].bytes */
} handle_vec;

typedef enum record_state {
    RECORD_LIVE = 0,
    RECORD_RELEASING = 1,   /* a whole release is in progress */
    RECORD_QUARANTINED = 2, /* a decommit could not restore what it unmapped: commits are refused */
} record_state;

/* One live allocation. Its span is [off, off + span) and touches granules [g0, g0 + ng). */
typedef struct arena_record {
    struct arena_record *next; /* hash chain */
    uint64_t off;              /* from the reservation's base */
    uint64_t bytes;            /* as requested */
    uint64_t span;             /* bytes rounded up to min_align: what the free list gave */
    uint64_t align;            /* effective alignment (what the allocation value carries) */
    uint64_t id;               /* generation: from the counter, never from the address */
    uint64_t g0, ng;
    uint64_t nrefs;   /* granules referenced (= popcount of bits) */
    uint8_t state;    /* record_state */
    uint64_t *bits;   /* bit i: granule g0 + i is referenced (committed) by this allocation */
} arena_record;

/* Budget charged to the accounting hook ahead of a commit, OUTSIDE the arena's lock (the hook may
 * climb the governor's reclaim ladder, whose callbacks may call into this very arena). The commit's
 * per-chunk charges then draw from it under the lock, and its undo refunds into it; what is left is
 * refunded at the end. `short_of` is set when the arena changed between the plan and the commit, so
 * that the commit is undone and planned again. */
typedef struct arena_pot {
    uint64_t bytes[2]; /* per dmm_axis */
    bool short_of;
} arena_pot;

typedef struct dmm_arena {
    dmm_lock lock; /* one per arena, held across the driver calls of one operation */
    dmm_driver *drv;
    dmm_device device;
    char where[48]; /* "arena on device 0", for sentences */
    dmm_accounting acct;
    bool has_acct;

    uintptr_t base;       /* the reservation */
    uint64_t reserve;     /* its bytes */
    bool reserved;        /* not yet given back */
    uint64_t gran;        /* G: the driver's granularity */
    uint64_t limit_g;     /* largest chunk, in granules */
    uint64_t cache_limit; /* bytes */
    uint64_t min_align;

    bool confirmed;        /* dmm_arena_confirm_context_terminated() discharged everything */
    uint64_t charged[2];   /* what the accounting hook holds for us, per dmm_axis (pots excluded) */
    arena_pot *pot;        /* the running commit's pre-charged budget, or NULL */

    dmm_spans free;       /* VA that may be handed out */
    dmm_spans quarantine; /* VA never handed out again */

    uint32_t *gmap; /* per granule: chunk slot + 1, 0 = not backed (calloc'd: untouched pages stay free) */
    uint64_t ngran;

    arena_chunk *chunks; /* slots */
    uint32_t *free_slots;
    uint32_t nslots, capslots, nfree;
    uint64_t live_chunks, poisoned_chunks; /* current counts by state */

    handle_vec cache;    /* released handles kept for reuse (owned stays charged) */
    handle_vec qhandles; /* handles whose release failed: owned stays charged, never reused */

    arena_prefix *prefixes; /* live prefixes (a list: few, and only the slow path looks) */
    size_t nprefixes;

    arena_record **buckets; /* hash of live records by offset */
    size_t nbuckets, nrecords;
    uint64_t next_id;

    dmm_stats st;
    /* given back later (destroy retries): so that counters never go down and the check still holds */
    uint64_t poison_cleared, poison_cleared_bytes, qhandles_cleared, qhandles_cleared_bytes;
} dmm_arena;

extern const dmm_mechanism_ops dmm__arena_ops;
extern const dmm_shared_mapping_ops dmm__arena_shared_ops; /* prefix.c */

/* ---- helpers (arena.c) ---- */
static inline uint64_t arena_g_of(const dmm_arena *a, uint64_t off) { return off / a->gran; }
static inline bool rec_bit(const arena_record *r, uint64_t g) {
    uint64_t i = g - r->g0;
    return (r->bits[i / 64] >> (i % 64)) & 1u;
}
static inline void rec_set(arena_record *r, uint64_t g) {
    uint64_t i = g - r->g0;
    r->bits[i / 64] |= (uint64_t)1 << (i % 64);
}
static inline void rec_clear(arena_record *r, uint64_t g) {
    uint64_t i = g - r->g0;
    r->bits[i / 64] &= ~((uint64_t)1 << (i % 64));
}
/* The chunk backing granule g, or NULL. */
static inline arena_chunk *arena_chunk_at(const dmm_arena *a, uint64_t g) {
    uint32_t k = a->gmap[g];
    return k ? &a->chunks[k - 1] : NULL;
}
static inline uint64_t chunk_bytes(const dmm_arena *a, const arena_chunk *c) { return c->n * a->gran; }
static inline uint32_t chunk_slot(const dmm_arena *a, const arena_chunk *c) { return (uint32_t)(c - a->chunks); }

/* Finds the live record at `off` (NULL if none). */
arena_record *dmm__arena_find(const dmm_arena *a, uint64_t off);
/* Removes r from the hash and frees it. */
void dmm__arena_forget(dmm_arena *a, arena_record *r);
/* Validates an allocation value against its live record under the lock: ptr, bytes, align and id
 * must all match. Sets the last error (naming `op`) and returns its status on a mismatch. */
dmm_status dmm__arena_lookup(dmm_arena *a, const dmm_allocation *al, const char *op, arena_record **out);
/* Gives a whole span back: granules backed by a poisoned chunk go to the quarantine, the rest to the
 * free list. Needs dmm__arena_span_room(). */
void dmm__arena_span_free(dmm_arena *a, uint64_t off, uint64_t len);
/* The free-list and quarantine entries dmm__arena_span_free may need for this span. */
size_t dmm__arena_span_room(const dmm_arena *a, uint64_t off, uint64_t len);
/* Puts a whole span into the quarantine (never handed out again). */
void dmm__arena_span_quarantine(dmm_arena *a, uint64_t off, uint64_t len);

/* ---- driver calls, accounting (chunks.c) ---- */
/* The arena is lost when its driver is (the latch of driver/call.h: whichever user of the driver met
 * the loss, the arena stops with it). */
static inline bool dmm__arena_lost(const dmm_arena *a) { return dmm__drv_lost(a->drv); }
/* Each counts itself in the stats and goes through the driver's funnel; a lost arena makes no call
 * and returns DMM_ERR_DEVICE_LOST. */
dmm_status dmm__arena_drv_create(dmm_arena *a, uint64_t bytes, dmm_phys *phys);
dmm_status dmm__arena_drv_release(dmm_arena *a, dmm_phys phys, uint64_t bytes);
dmm_status dmm__arena_drv_map(dmm_arena *a, uint64_t off, uint64_t bytes, dmm_phys phys);
dmm_status dmm__arena_drv_unmap(dmm_arena *a, uint64_t off, uint64_t bytes);
dmm_status dmm__arena_drv_set_access(dmm_arena *a, uint64_t off, uint64_t bytes, dmm_access access);
dmm_status dmm__arena_lost_error(dmm_arena *a, const char *op);

/* Charges before a driver call: from the running commit's pot if there is one (a shortfall sets
 * pot->short_of and fails with DMM_ERR_BUSY), else through the hook. A refusal changes nothing. */
dmm_status dmm__arena_charge(dmm_arena *a, dmm_axis axis, uint64_t bytes, const char *op);
/* Refunds after a driver call freed the bytes (into the pot while a commit runs); does nothing once
 * the arena is lost. */
void dmm__arena_refund(dmm_arena *a, dmm_axis axis, uint64_t bytes);
/* The hook itself (no pot, no arena state): charge with the sentence on refusal, and refund. Safe
 * to call without the arena's lock. */
dmm_status dmm__arena_hook_charge(dmm_arena *a, dmm_axis axis, uint64_t bytes, const char *op);
void dmm__arena_hook_refund(dmm_arena *a, dmm_axis axis, uint64_t bytes);

/* ---- chunks (chunks.c) ---- */
/* Makes room so that the next steps cannot fail for lack of host memory: `chunks` new chunk slots,
 * `handles` more quarantined handles and cached handles, `spans` more free-list and quarantine
 * entries. False (nothing changed, error set naming op) when out of memory. */
bool dmm__arena_room(dmm_arena *a, size_t chunks, size_t handles, size_t spans, const char *op);

/* Births a LIVE chunk over granules [first, first + n) (all unbacked): a cached handle of that size
 * or (after charging OWNED) a new one, then charge MAPPED, map, set access READ_WRITE. On failure it
 * undoes its own steps (see dmm__arena_chunk_unwind) and returns the error; *leaked is set when the
 * undo could not fully unwind. Needs dmm__arena_room(1, 1, 1). */
dmm_status dmm__arena_chunk_birth(dmm_arena *a, uint64_t first, uint64_t n, const char *op, uint32_t *slot,
                                  bool *leaked);

/* Births a LIVE chunk over granules [first, first + n(src)) (all unbacked) that maps the handle of
 * chunk `src` (LIVE, or POISONED for a prefix's piece) a second time: it joins src's ring (no handle
 * is created, OWNED is not charged), then charge MAPPED, map, set `access`. Failure and *leaked as
 * dmm__arena_chunk_birth. Needs dmm__arena_room(1, 0, 1). */
dmm_status dmm__arena_chunk_alias(dmm_arena *a, uint32_t src, uint64_t first, dmm_access access, const char *op,
                                  uint32_t *slot, bool *leaked);

/* Births a LIVE chunk over granules [first, first + piece->n) (all unbacked) that maps the PARKED
 * handle of a prefix piece: a new ring of one (OWNED is not charged: the handle is owned already),
 * then charge MAPPED, map, set `access`. On failure the handle is parked again (or, if its unmap
 * failed, stays in a poisoned chunk). Needs dmm__arena_room(1, 0, 1). */
dmm_status dmm__arena_chunk_adopt(dmm_arena *a, arena_piece *piece, uint64_t first, dmm_access access,
                                  const char *op, uint32_t *slot, bool *leaked);

/* Undoes a chunk born by the current operation (BIRTH or LIVE, refs 0): unmap, refund mapped, then
 * (unless other chunks of its ring still map the handle) the handle back to the cache it came from
 * or released (refund owned). An unmap that fails poisons the chunk; a release that fails
 * quarantines the handle. Returns false when something could not be undone. */
bool dmm__arena_chunk_unwind(dmm_arena *a, uint32_t slot);

/* Unmaps a chunk (the VA stays reserved; the chunk stays in the table, state unchanged). On success
 * the stats say so, but the MAPPED refund is the caller's: a decommit refunds only once every unmap
 * of the transaction succeeded. */
dmm_status dmm__arena_chunk_unmap(dmm_arena *a, arena_chunk *c);
/* Maps an unmapped LIVE chunk again with its own handle and its own access (a decommit's restore).
 * On a set-access failure the map is undone; returns the failure. */
dmm_status dmm__arena_chunk_remap(dmm_arena *a, arena_chunk *c, bool *still_mapped);
/* Ends an unmapped LIVE chunk with refs 0 (its MAPPED refund already made): its granules become
 * unbacked, its slot free. If other chunks of its ring still map the handle it just leaves the ring;
 * else, if a prefix holds the handle, the handle is parked in its piece (still owned); else it goes to the cache (if allowed and it fits) or is released (refund OWNED); a failed
 * release quarantines the handle. Returns the bytes that stay owned because of a failure (0 when the
 * handle was kept by its ring, cached or released). Needs dmm__arena_room(0, 1, 0). */
uint64_t dmm__arena_chunk_retire(dmm_arena *a, arena_chunk *c, bool allow_cache);
/* Marks a chunk that is still mapped as POISONED and moves the free VA of its granules into the
 * quarantine. Returns the bytes it newly keeps owned: the chunk's, unless another mapping of its
 * handle is poisoned already (a handle is owned once, however many of its mappings are stuck).
 * Needs dmm__arena_room(0, 0, dmm__arena_poison_room(chunk's granules)). */
uint64_t dmm__arena_chunk_poison(dmm_arena *a, arena_chunk *c);

/* The span entries that poisoning chunks over granules [first, first + n) may need: one split of
 * the free list, plus one quarantine entry per free piece there (the granules at the edge of an
 * allocation may hold many free gaps between small allocations). */
size_t dmm__arena_poison_room(const dmm_arena *a, uint64_t first, uint64_t n);

/* Releases every cached handle (refund OWNED per success; a failure quarantines it). DMM_OK when
 * all went, else the first failure. */
dmm_status dmm__arena_drain(dmm_arena *a);
/* Destroy's give-back: releases quarantined handles again, unmaps and releases poisoned chunks. */
dmm_status dmm__arena_give_back(dmm_arena *a);

/* ---- release state machine (release.c) ---- */
dmm_release_outcome dmm__arena_release(void *impl, const dmm_allocation *al);
dmm_release_outcome dmm__arena_decommit(void *impl, const dmm_allocation *al, dmm_range range);

/* ---- prefixes (prefix.c) ---- */
/* Frees every prefix record (destroy, or a confirmed device loss: no driver call). */
void dmm__arena_prefixes_free(dmm_arena *a);

/* ---- check (arena_check.c) ---- */
/* Under the lock: NULL when every invariant holds, else a sentence fragment. */
const char *dmm__arena_check_locked(dmm_arena *a);

#endif /* DMM_MECH_ARENA_INTERNAL_H */
