/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/arena_types.h — the arena's data, shared by its files. Never installed.
 *
 * The arena's files form a tower; each calls only the files below it (its header says what it
 * offers):
 *   arena.c        top: create/destroy, the ops table, allocate, queries, stats, the public
 *                  dmm_arena_* entry points, device loss and its confirmation
 *   share.c        export of committed chunks as descriptors, import of another process's (dmm/share.h)
 *   prefix.c       shared prefixes (DESIGN §4.6): the owner's chunks held by a prefix object and
 *                  mapped read-only into other allocations (the shared_mapping capability)
 *   release.c      the release state machine: whole release and decommit, and their outcomes
 *   commit.c       the one transaction (log, undo, charge ahead outside the lock, look again) that
 *                  commit, alias and prefix commit run; commit's plan and steps, alias's
 *   arena_check.c  the expensive invariant check (reads the data; calls no arena file)
 *   chunks.c       physical chunks: the granule map, chunk birth (charge, create or take from the
 *                  cache or join an alias ring, map; access granted per run) and death (unmap, leave the ring,
 *                  cache or release), poisoning, the handle cache, quarantined handles, every driver
 *                  call and every charge and refund
 *   records.c      the allocation records (a hash by offset) and the spans they give back
 *   this header    the data and the few inline readers of it that every file uses
 *
 * Vocabulary: offsets are bytes from the reservation's base; a granule index g covers
 * [g·G, (g+1)·G). A chunk is one MAPPING of a driver handle over granules [first, first+n), mapped as
 * one unit. A handle is usually mapped by one chunk; dmm_arena_alias maps it at a second place, and
 * the chunks that map one handle form a ring (chunk.twin: the next one, chunk.back: the one before;
 * itself when alone). A ring owns its handle: OWNED is charged once per handle (at its creation),
 * MAPPED once per chunk; a chunk that dies while its ring has other members only unmaps and leaves
 * the ring (its handle stays); the last one out caches or releases the handle.
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
 *   chunks[twin].back = the chunk; a ring's members are LIVE or POISONED chunks with the same phys, n
 *   and piece; distinct rings, the cache, the quarantined handles and the parked pieces hold distinct handles (a handle's mapping
 *   count = its ring's length); piece.ring ≠ 0 ⇒ that slot is a member of a ring mapping piece.phys
 *   whose chunks point at the piece; a chunk's piece belongs to a live prefix
 *   stats.committed = Σ LIVE chunk bytes;  stats.mapped = Σ (LIVE + POISONED) chunk bytes (an alias
 *   counts once per mapping: mapped may exceed owned)
 *   stats.owned = Σ ring handle bytes + cache.bytes + qhandles.bytes + Σ parked piece bytes;
 *   stats.handles = #rings + #cache + #qhandles + #parked pieces   (rings of imported handles excluded)
 *   stats.imported = Σ imported ring handle bytes + qimported.bytes; imported chunks hold no piece
 *   unless lost: charged[OWNED] = stats.owned, charged[MAPPED] = stats.mapped
 */
#ifndef DMM_MECH_ARENA_TYPES_H
#define DMM_MECH_ARENA_TYPES_H

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
    uint32_t back;   /* the previous one (the ring is doubly linked: a mapping leaves it in O(1), and a handle
                        may have thousands, e.g. a KV arena's granule of zeros) */
    uint8_t state;   /* chunk_state */
    bool mapped;     /* the handle is mapped at the chunk's VA (false only inside an operation) */
    bool from_cache; /* meaningful only in the operation that bore it: an undo puts the handle back */
    uint8_t access;  /* the dmm_access it is mapped with: READ_WRITE, or READ for a prefix's sharer */
    struct arena_piece *piece; /* the prefix piece holding its handle, or NULL (same in the whole ring) */
    bool imported;   /* the handle is another process's memory (dmm_import): MAPPED charged, OWNED not; never
                        cached; same in the whole ring */
    bool exported;   /* the handle was exported (dmm_export_range): never cached; same in the whole ring */
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
    dmm_device_id device;
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
    handle_vec qimported; /* imported handles whose release failed: never charged OWNED, never reused */
    bool exportable;      /* chunks are created with the driver's create_exportable (dmm_arena_config) */

    arena_prefix *prefixes; /* live prefixes (a list: few, and only the slow path looks) */
    size_t nprefixes;

    arena_record **buckets; /* hash of live records by offset */
    size_t nbuckets, nrecords;
    uint64_t next_id;

    dmm_stats st;
    /* given back later (destroy retries): so that counters never go down and the check still holds */
    uint64_t poison_cleared, poison_cleared_bytes, qhandles_cleared, qhandles_cleared_bytes;
} dmm_arena;


/* ---- readers of the data ---- */
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
/* The arena is lost when its driver is (the latch of driver/call.h: whichever user of the driver met
 * the loss, the arena stops with it). */
static inline bool dmm__arena_lost(const dmm_arena *a) { return dmm__drv_lost(a->drv); }

#endif /* DMM_MECH_ARENA_TYPES_H */
