/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/mechanism.h — a mechanism allocates and releases memory on one device.
 *
 * A mechanism is built from ONE implementation object and its ops table: `name`, `allocate`,
 * `release` and `device` are required; capabilities (virtual backing, shared mapping) are
 * optional sub-tables of the same table, acting on the same object. There is no constructor that
 * takes two implementation objects, so one object's allocator can never be paired with another
 * object's virtual backing, and there is no self-reported identity to forge.
 *
 * Asking for a capability the mechanism lacks is DMM_ERR_UNSUPPORTED. Whole-allocation release
 * always goes through the mechanism's `release`, also for allocations made through virtual backing.
 *
 * Release outcomes (docs/guide.md, "The release contract"):
 *   COMPLETE     the memory is gone or back in a cache; unmapped_bytes (may be 0) may be refunded;
 *                the VA may be reused.
 *   QUARANTINED  something changed and something failed: only unmapped_bytes were really unmapped;
 *                residual_owned_bytes stay owned and charged; the range is never handed out again.
 *   FAILED       nothing changed; the allocation is exactly as live as before.
 * A reader treats any state it does not know as QUARANTINED (dmm_release_state_of()).
 *
 * Thread contract: every function here is thread-safe.
 */
#ifndef DMM_MECHANISM_H
#define DMM_MECHANISM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/driver.h"
#include "dmm/stats.h"
#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmm_mechanism dmm_mechanism;
/* An export of memory to another process (dmm/share.h defines it). */
typedef struct dmm_export dmm_export;

/* An allocation is a value. `id` is a 64-bit generation from a counter, never derived from ptr: a
 * reused address gets a new id, and a stale copy can never release the new allocation. */
typedef struct dmm_allocation {
    void *ptr;
    size_t bytes;
    size_t align;
    uint64_t id;
    dmm_mechanism *mechanism;
    dmm_device_id device;
} dmm_allocation;

typedef enum dmm_release_state {
    DMM_RELEASE_COMPLETE = 0,
    DMM_RELEASE_QUARANTINED = 1,
    DMM_RELEASE_FAILED = 2,
} dmm_release_state;

typedef struct dmm_release_outcome {
    uint32_t state;                /* a dmm_release_state; unknown values mean QUARANTINED */
    uint64_t allocation_bytes;     /* bytes of the allocation (or range) the call was about */
    uint64_t unmapped_bytes;       /* bytes really unmapped by this call; 0 is legal */
    uint64_t residual_owned_bytes; /* bytes still owned and charged because something failed */
    dmm_status failure;            /* DMM_OK for COMPLETE, else what went wrong */
    uint64_t exported_bytes;       /* of the bytes this call released: those exported to other processes
                                    * (dmm/share.h). This process no longer holds them (refunded), but an
                                    * importer that still maps them keeps the physical memory alive. */
} dmm_release_outcome;

/* The state as a reader must act on it: unknown values become QUARANTINED. */
static inline dmm_release_state dmm_release_state_of(const dmm_release_outcome *o) {
    return o->state == DMM_RELEASE_COMPLETE || o->state == DMM_RELEASE_FAILED
               ? (dmm_release_state)o->state
               : DMM_RELEASE_QUARANTINED;
}

DMM_API const char *dmm_release_state_str(uint32_t state);

/* A byte range relative to an allocation's start. */
typedef struct dmm_range {
    size_t offset;
    size_t bytes;
} dmm_range;

typedef enum dmm_capability {
    DMM_CAP_VIRTUAL_BACKING = 1u << 0,
    DMM_CAP_SHARED_MAPPING = 1u << 1,
    DMM_CAP_DEFERRED_RELEASE = 1u << 2,
} dmm_capability;

/* Virtual backing: reserve VA now, commit and decommit ranges later (docs/guide.md, "The arena (virtual backing)"). */
typedef struct dmm_virtual_backing_ops {
    uint32_t size; /* sizeof(dmm_virtual_backing_ops) */
    /* Reserves VA for one allocation and commits only `ranges` (n = 0: VA only). */
    dmm_status (*allocate_committed)(void *impl, size_t bytes, size_t align, const dmm_range *ranges,
                                     size_t n, dmm_allocation *out);
    /* Maps backing for every granule the range touches; *newly_mapped = bytes this call mapped. */
    dmm_status (*commit)(void *impl, const dmm_allocation *a, dmm_range range, uint64_t *newly_mapped);
    /* Releases the backing of every chunk wholly inside the range; keeps the VA. Transactional. */
    dmm_release_outcome (*decommit)(void *impl, const dmm_allocation *a, dmm_range range);
    /* Bytes of physical backing the allocation currently references. */
    dmm_status (*committed_bytes)(void *impl, const dmm_allocation *a, uint64_t *bytes);
    /* Conservative estimate of the bytes committing `ranges` would newly map (for admission). */
    dmm_status (*mapped_bytes_for_ranges)(void *impl, const dmm_allocation *a, const dmm_range *ranges,
                                          size_t n, uint64_t *bytes);

    /* --- optional (NULL, or beyond `size`, = absent: the dmm_mechanism_* call answers
     * DMM_ERR_UNSUPPORTED). What a caching pool on top uses where the mechanism offers it; the pool
     * asks for these, never for a particular mechanism. --- */
    /* Maps the physical memory behind `src` a second time at `dst`, in the same allocation (ranges
     * relative to its start, whole granules, same size, no overlap; src committed as whole chunks no
     * other allocation references, dst wholly uncommitted). Transactional like commit. The contract
     * in full: dmm_arena_alias (dmm/arena.h). */
    dmm_status (*alias)(void *impl, const dmm_allocation *a, dmm_range dst, dmm_range src);
    /* *out = whether [ptr, ptr+bytes) overlaps memory the mechanism keeps out of use for good
     * (quarantined VA, poisoned chunks). */
    dmm_status (*is_quarantined)(void *impl, const void *ptr, size_t bytes, bool *out);
    /* Gives back every physical handle the mechanism caches for reuse. */
    dmm_status (*drain_cache)(void *impl);
    /* The mechanism's VA reservation (either output may be NULL): a size hint for a pool's own VA. */
    dmm_status (*reservation)(void *impl, uintptr_t *va, uint64_t *bytes);
    /* Exports committed chunks of a range as descriptors; imports another process's export into a new
     * allocation (contracts in full: dmm_export_range and dmm_import, dmm/share.h). */
    dmm_status (*export_range)(void *impl, const dmm_allocation *a, dmm_range range, dmm_access access,
                               dmm_export *out);
    dmm_status (*import)(void *impl, const dmm_export *ex, dmm_access access, dmm_allocation *out);
    /* Commits like `commit`, with the new chunks cut into pieces of piece_bytes (a multiple of the
     * granularity; 0 or another size: DMM_ERR_INVALID_ARGUMENT, nothing changed), counted from the start of
     * each run of uncommitted granules, the last piece the rest; a piece larger than the mechanism's
     * largest chunk is cut at that size on its own, so no chunk ever crosses a piece and a piece can be
     * decommitted alone. A caller that wants small, movable handles commits a long range in one call,
     * and the mechanism grants access to each run of new chunks once instead of once per handle (on
     * CUDA, cuMemSetAccess is the costliest call of a growth). Transactional like commit. */
    dmm_status (*commit_pieces)(void *impl, const dmm_allocation *a, dmm_range range, uint64_t piece_bytes,
                                uint64_t *newly_mapped);
} dmm_virtual_backing_ops;

/* sizeof a dmm_virtual_backing_ops without the optional slots: the smallest `size` accepted. */
#define DMM_VIRTUAL_BACKING_OPS_REQUIRED_SIZE \
    (offsetof(dmm_virtual_backing_ops, mapped_bytes_for_ranges) + sizeof(void (*)(void)))

/* Shared mapping: one physical prefix mapped read-only into several allocations (docs/guide.md).
 * The table and the calls are declared in dmm/prefix.h; here only its name, so that the slot below
 * is typed (a pointer in the same place as the reserved `const void *` it replaces: ABI unchanged). */
typedef struct dmm_shared_mapping_ops dmm_shared_mapping_ops;

typedef struct dmm_mechanism_ops {
    uint32_t size;    /* sizeof(dmm_mechanism_ops) */
    const char *name; /* "arena", "eager", … */
    dmm_status (*allocate)(void *impl, size_t bytes, size_t align, dmm_allocation *out);
    dmm_release_outcome (*release)(void *impl, const dmm_allocation *a);
    dmm_device_id (*device)(void *impl);
    /* Fills stats (optional: NULL = the mechanism keeps none). */
    dmm_status (*stats)(void *impl, dmm_stats *out);
    /* Destroys impl; refused (DMM_ERR_BUSY) while it still owns memory it can give back. */
    dmm_status (*destroy)(void *impl);
    const dmm_virtual_backing_ops *virtual_backing; /* NULL = absent */
    const dmm_shared_mapping_ops *shared_mapping;   /* NULL = absent; dmm/prefix.h defines it */
    const void *deferred_release;                   /* reserved (must be NULL): stream-ordered release is
                                                     * the queue of dmm/deferred.h, over any mechanism */
} dmm_mechanism_ops;

/* Builds a mechanism from one implementation object. `ops` must outlive the mechanism; the
 * mechanism takes ownership of impl (destroyed through ops->destroy). Required slots missing, or a
 * capability table with a missing slot, give DMM_ERR_INVALID_ARGUMENT. */
DMM_API dmm_status dmm_mechanism_create(const dmm_mechanism_ops *ops, void *impl, dmm_mechanism **out);

/* Destroys the mechanism; DMM_ERR_BUSY (nothing changed) while it still holds live allocations. */
DMM_API dmm_status dmm_mechanism_destroy(dmm_mechanism *m);

DMM_API const char *dmm_mechanism_name(const dmm_mechanism *m);
DMM_API dmm_device_id dmm_mechanism_device(const dmm_mechanism *m);
/* Bit set of dmm_capability. */
DMM_API uint32_t dmm_mechanism_capabilities(const dmm_mechanism *m);
/* The implementation object (for the mechanism's own typed helpers, e.g. dmm_arena_check). */
DMM_API void *dmm_mechanism_impl(const dmm_mechanism *m);

DMM_API dmm_status dmm_mechanism_allocate(dmm_mechanism *m, size_t bytes, size_t align, dmm_allocation *out);
/* Releases a whole allocation; a handle of another mechanism gives FAILED with
 * DMM_ERR_WRONG_MECHANISM. */
DMM_API dmm_release_outcome dmm_mechanism_release(dmm_mechanism *m, const dmm_allocation *a);
DMM_API dmm_status dmm_mechanism_stats(dmm_mechanism *m, dmm_stats *out);

/* Virtual backing, through the same object; DMM_ERR_UNSUPPORTED where the mechanism has none. */
DMM_API dmm_status dmm_mechanism_allocate_committed(dmm_mechanism *m, size_t bytes, size_t align,
                                                    const dmm_range *ranges, size_t n, dmm_allocation *out);
DMM_API dmm_status dmm_mechanism_commit(dmm_mechanism *m, const dmm_allocation *a, dmm_range range,
                                        uint64_t *newly_mapped);
DMM_API dmm_release_outcome dmm_mechanism_decommit(dmm_mechanism *m, const dmm_allocation *a, dmm_range range);
DMM_API dmm_status dmm_mechanism_committed_bytes(dmm_mechanism *m, const dmm_allocation *a, uint64_t *bytes);
DMM_API dmm_status dmm_mechanism_mapped_bytes_for_ranges(dmm_mechanism *m, const dmm_allocation *a,
                                                         const dmm_range *ranges, size_t n, uint64_t *bytes);
/* The optional virtual-backing slots (DMM_ERR_UNSUPPORTED where the mechanism lacks one). */
DMM_API dmm_status dmm_mechanism_alias(dmm_mechanism *m, const dmm_allocation *a, dmm_range dst, dmm_range src);
DMM_API dmm_status dmm_mechanism_is_quarantined(dmm_mechanism *m, const void *ptr, size_t bytes, bool *out);
DMM_API dmm_status dmm_mechanism_drain_cache(dmm_mechanism *m);
DMM_API dmm_status dmm_mechanism_reservation(dmm_mechanism *m, uintptr_t *va, uint64_t *bytes);
DMM_API dmm_status dmm_mechanism_commit_pieces(dmm_mechanism *m, const dmm_allocation *a, dmm_range range,
                                               uint64_t piece_bytes, uint64_t *newly_mapped);
/* The optional slots of dmm_virtual_backing_ops, by name: what a layer above asks for with
 * dmm_mechanism_has_slot (a capability, never a test for a particular mechanism). Frozen numbers. */
typedef enum dmm_optional_slot {
    DMM_SLOT_ALIAS = 0,          /* dmm_virtual_backing_ops.alias → dmm_mechanism_alias */
    DMM_SLOT_IS_QUARANTINED = 1, /* .is_quarantined → dmm_mechanism_is_quarantined */
    DMM_SLOT_DRAIN_CACHE = 2,    /* .drain_cache → dmm_mechanism_drain_cache */
    DMM_SLOT_RESERVATION = 3,    /* .reservation → dmm_mechanism_reservation */
    DMM_SLOT_EXPORT_RANGE = 4,   /* .export_range → dmm_export_range (dmm/share.h) */
    DMM_SLOT_IMPORT = 5,         /* .import → dmm_import (dmm/share.h) */
    DMM_SLOT_COMMIT_PIECES = 6,  /* .commit_pieces → dmm_mechanism_commit_pieces */
} dmm_optional_slot;

/* Whether m has the optional virtual-backing slot `slot`; false for a value outside dmm_optional_slot,
 * a NULL mechanism or a mechanism without virtual backing. */
DMM_API bool dmm_mechanism_has_slot(const dmm_mechanism *m, dmm_optional_slot slot);

/* ---------------------------------------------------------------------------------------------- */
/* Accounting: how a mechanism charges a budget (dmm_governor_accounting makes one for a lease). Two axes:
 * OWNED (physical handles held) and MAPPED (bytes mapped into VA). A charge comes before the driver
 * call it pays for and may be refused (DMM_ERR_BUDGET, nothing changes); a refund comes only after
 * the driver call that frees the bytes has succeeded. */
typedef enum dmm_axis {
    DMM_AXIS_OWNED = 0,
    DMM_AXIS_MAPPED = 1,
} dmm_axis;

typedef struct dmm_accounting {
    void *user;
    dmm_status (*charge)(void *user, dmm_device_id device, dmm_axis axis, uint64_t bytes);
    void (*refund)(void *user, dmm_device_id device, dmm_axis axis, uint64_t bytes);
} dmm_accounting;

/* ---------------------------------------------------------------------------------------------- */
/* eager: one driver alloc per allocation (malloc on host, cuMemAlloc on CUDA). No capabilities. */
typedef struct dmm_eager_config {
    uint32_t size;                    /* sizeof(dmm_eager_config) */
    const dmm_accounting *accounting; /* optional; copied */
} dmm_eager_config;

/* `driver` is not owned and must outlive the mechanism. cfg may be NULL. */
DMM_API dmm_status dmm_eager_create(dmm_driver *driver, const dmm_eager_config *cfg, dmm_mechanism **out);

#ifdef __cplusplus
}
#endif
#endif /* DMM_MECHANISM_H */
