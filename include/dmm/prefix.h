/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/prefix.h — shared mapping: one physical prefix mapped read-only into several allocations
 * (docs/guide.md, "Shared prefix (shared mapping)"; the mechanism capability DMM_CAP_SHARED_MAPPING).
 *
 * A prefix is a set of chunks created and charged ONCE — the chunks of a range that its owner
 * allocation committed and filled (read-write) — then mapped READ-only into other allocations'
 * address space: N sequences share one physical KV prefix. Its physical memory is freed only when
 * the owner, every sharer and the prefix object are gone, in any order: a released owner leaves the
 * memory to the sharers (owned stays charged until the last mapping goes); a released prefix object
 * lets the memory go with the last mapping; a prefix object whose owner and sharers are gone keeps
 * the memory (unmapped, owned) so that it can still be committed into new allocations.
 *
 * A prefix is a value, like an allocation: `id` is a generation from the mechanism's counter, so a
 * stale copy of a released prefix can never name a new one (DMM_ERR_UNKNOWN_ALLOCATION).
 *
 * Accounting (docs/guide.md): OWNED is charged once, by the owner's commit (prefix_create creates and
 * charges nothing); MAPPED is charged per commit of the prefix, before mapping (a refused charge
 * changes nothing), so mapped may exceed owned.
 *
 * Thread contract: every function here is thread-safe.
 */
#ifndef DMM_PREFIX_H
#define DMM_PREFIX_H

#include "dmm/mechanism.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A prefix, as a value. The wrapper stamps mechanism and device. */
typedef struct dmm_prefix {
    uint64_t bytes;           /* the prefix's size: whole granules */
    uint64_t id;              /* generation: from the mechanism's counter, never reused */
    dmm_mechanism *mechanism; /* the mechanism that holds it; only its allocations can map it */
    dmm_device_id device;
} dmm_prefix;

/* The capability table (mechanism.h's `shared_mapping` slot). Every slot is required. */
struct dmm_shared_mapping_ops {
    uint32_t size; /* sizeof(dmm_shared_mapping_ops) */
    dmm_status (*prefix_create)(void *impl, const dmm_allocation *owner, dmm_range range, dmm_prefix *out);
    dmm_status (*prefix_commit)(void *impl, const dmm_prefix *p, const dmm_allocation *target, size_t offset);
    dmm_status (*prefix_cost)(void *impl, const dmm_prefix *p, const dmm_allocation *target, size_t offset,
                              uint64_t *newly_owned, uint64_t *newly_mapped);
    dmm_release_outcome (*prefix_release)(void *impl, const dmm_prefix *p);
};

/* Makes a prefix of the chunks that exactly cover `range` of `owner` (relative to its start): the
 * range must start on a granule (absolute address), be whole granules, be committed by the owner
 * as whole chunks (the ranges of whole commits) that no other allocation references, be mapped
 * read-write (not itself a sharer's mapping), map each handle once (not both places of an alias)
 * and belong to no other prefix. Creates and charges
 * nothing; the owner keeps its read-write mapping and fills the memory through it. Refused,
 * changing nothing, with a sentence naming the range and the reason (INVALID_ARGUMENT;
 * UNKNOWN_ALLOCATION for a stale or altered owner handle; QUARANTINED for a quarantined owner or a
 * poisoned chunk; UNSUPPORTED for a mechanism without the capability, e.g. eager). */
DMM_API dmm_status dmm_prefix_create(dmm_mechanism *m, const dmm_allocation *owner, dmm_range range,
                                     dmm_prefix *out);

/* Maps the prefix READ-only into `target` at `offset` (relative to its start), as one transaction:
 * on any failure every mapping this call made is undone (an undo that fails is counted in
 * rollback_leaks and said in the sentence). MAPPED is charged for the prefix's bytes before
 * mapping; OWNED is not (no memory is created). Refused, leaving no mapping and changing nothing,
 * with one sentence naming the problem, for: a prefix of another mechanism (another arena, another
 * budget: WRONG_MECHANISM; another device: WRONG_DEVICE); a stale or altered prefix or target
 * handle (UNKNOWN_ALLOCATION); an offset whose address is not on a granule, or a prefix that runs
 * past the target's bytes, or any target granule already committed (INVALID_ARGUMENT); a
 * quarantined target (QUARANTINED). Afterwards the range behaves as committed memory of the
 * target: dmm_mechanism_decommit of it, or the target's release, unmaps it (release-shaped
 * outcomes, docs/guide.md, "The release contract"); writes through it fault. */
DMM_API dmm_status dmm_prefix_commit(dmm_mechanism *m, const dmm_prefix *p, const dmm_allocation *target,
                                     size_t offset);

/* What dmm_prefix_commit(m, p, target, offset) would newly charge, changing nothing: OWNED (0: the
 * memory exists) and MAPPED (the prefix's bytes). Refuses exactly what the commit would refuse,
 * with the same sentence — a foreign prefix is an error, never reported free. */
DMM_API dmm_status dmm_prefix_cost(dmm_mechanism *m, const dmm_prefix *p, const dmm_allocation *target,
                                   size_t offset, uint64_t *newly_owned, uint64_t *newly_mapped);

/* Drops the prefix object. Memory still mapped (by the owner or a sharer) stays with its mappings
 * and goes, to the cache or the driver, with the last of them; memory no longer mapped anywhere is
 * cached or released now. Release-shaped (allocation_bytes = the prefix's bytes; unmapped_bytes is
 * always 0: the mappings belong to their allocations):
 *   COMPLETE     the prefix is gone; every handle it alone held is cached or released;
 *   QUARANTINED  the prefix is gone, but the release of some handle failed: residual_owned_bytes
 *                stay owned and charged (quarantined handles, never reused);
 *   FAILED       nothing changed (every release tried failed, a stale prefix, a second release,
 *                a lost device); the prefix is as live as before and may be released again. */
DMM_API dmm_release_outcome dmm_prefix_release(dmm_mechanism *m, const dmm_prefix *p);

#ifdef __cplusplus
}
#endif
#endif /* DMM_PREFIX_H */
