/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/arena.h — the built-in VMM mechanism (docs/guide.md, "The arena (virtual backing)").
 *
 * One VA reservation per arena; allocations are spans of it. Physical backing comes in chunks: one
 * driver handle of a whole number of granules, created, mapped and unmapped as one unit. Small
 * allocations share granules (reference counted); a commit of a contiguous range creates as few
 * chunks as the chunk limit allows. Released handles go to a bounded cache.
 *
 * The release state machine never lies: an address goes back to the free list, and a refund is
 * made, only after the driver's unmap / handle release for it succeeded. A chunk whose unmap failed
 * stays mapped and is poisoned (never committed again); a handle whose release failed after a good
 * unmap is quarantined (mapped axis refunded once, owned axis still charged, never reused); the VA
 * of a QUARANTINED release is never handed out again.
 *
 * Thread contract: thread-safe. One lock per arena, held across the driver calls of one operation
 * (the arena is the slow path; the pool above it is the fast one).
 */
#ifndef DMM_ARENA_H
#define DMM_ARENA_H

#include "dmm/mechanism.h"
#include "dmm/prefix.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmm_arena_config {
    uint32_t size;                    /* sizeof(dmm_arena_config) */
    uint64_t reserve_bytes;           /* VA to reserve; 0 = 64 GiB */
    uint64_t chunk_limit_bytes;       /* largest single handle; 0 = 1 GiB; a multiple of the granule */
    uint64_t cache_limit_bytes;       /* released handles kept for reuse; 0 = none cached */
    size_t min_align;                 /* smallest alignment of an allocation; 0 = 256 */
    const dmm_accounting *accounting; /* optional; copied */
    bool exportable;                  /* create every handle exportable to other processes (dmm/share.h;
                                         CUDA: requestedHandleTypes = POSIX fd); UNSUPPORTED where the
                                         driver cannot. The host driver can export any handle. */
} dmm_arena_config;

/* Creates an arena over `driver` (not owned; must outlive the arena). A VA reservation failure is
 * an error whose sentence names the device, the driver error and the way out: never a silent
 * fall back to eager memory. cfg may be NULL. */
DMM_API dmm_status dmm_arena_create(dmm_driver *driver, const dmm_arena_config *cfg, dmm_mechanism **out);

/* The arena has the shared_mapping capability (dmm/prefix.h): dmm_prefix_create, _commit, _cost and
 * _release work on an arena; a prefix's sharers map its handles READ-only.
 *
 * Maps the physical memory behind `src` a second time, at `dst`, in the same allocation: the handles
 * of the chunks that exactly cover src are also mapped at dst, with the same chunk layout and
 * READ_WRITE access, so both places show the same bytes at once. Ranges are relative to the
 * allocation's start; both must start on a granule (absolute address), be whole granules, have the
 * same size and not overlap. src must be committed by `a` as whole chunks that no other allocation
 * references; dst must be wholly uncommitted. No physical memory is created: OWNED is unchanged,
 * MAPPED is charged (before mapping) for dst, so mapped may exceed owned while both places exist.
 * Each place then lives on its own: a decommit (or the release) of one place unmaps that place only,
 * and a handle goes to the cache, or is released, when its last mapping is gone.
 * Use: reuse memory at another address without waiting for work that may still use the old one
 * (the pool, when the work is ordered on the same stream), then decommit the old place later.
 * Transactional like commit: on any failure every mapping this call made is undone (an undo that
 * fails is counted in rollback_leaks and said in the sentence); refused, changing nothing, with a
 * sentence naming the range and the reason, for anything else (DMM_ERR_INVALID_ARGUMENT, also for a
 * source that is a read-only mapping of a shared prefix, which an alias would make writable; a
 * quarantined allocation or a poisoned chunk: DMM_ERR_QUARANTINED; WRONG_MECHANISM for a non-arena). */
DMM_API dmm_status dmm_arena_alias(dmm_mechanism *arena, const dmm_allocation *a, dmm_range dst, dmm_range src);

/* The expensive invariant check (free list sorted and coalesced, no overlaps, chunk reference
 * counts = live references, every handle's mappings = the chunks that name it, owned = the distinct
 * handles, counters = the sums they stand for). DMM_OK or DMM_ERR_INVALID_ARGUMENT
 * with a sentence naming the first broken invariant. WRONG_MECHANISM for a non-arena. */
DMM_API dmm_status dmm_arena_check(dmm_mechanism *arena);

/* The arena's VA reservation (for tests and tools). */
DMM_API dmm_status dmm_arena_reservation(dmm_mechanism *arena, uintptr_t *va, uint64_t *bytes);

/* Number of spans in the free list (1 when the arena is empty and nothing is quarantined). */
DMM_API dmm_status dmm_arena_free_spans(dmm_mechanism *arena, size_t *count);

/* Whether [ptr, ptr+bytes) overlaps VA that is quarantined or backed by a poisoned chunk. */
DMM_API dmm_status dmm_arena_is_quarantined(dmm_mechanism *arena, const void *ptr, size_t bytes, bool *out);

/* Releases every cached handle (refunding the owned axis for each release that succeeded). */
DMM_API dmm_status dmm_arena_drain_cache(dmm_mechanism *arena);

/* After a device loss (DMM_ERR_DEVICE_LOST), the caller confirms the context was torn down: the
 * arena then discharges its ownership (refunds everything still charged) without driver calls. */
DMM_API dmm_status dmm_arena_confirm_context_terminated(dmm_mechanism *arena);

#ifdef __cplusplus
}
#endif
#endif /* DMM_ARENA_H */
