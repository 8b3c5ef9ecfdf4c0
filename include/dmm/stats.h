/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/stats.h — statistics, declared once.
 *
 * Counts have a current value, a peak and a running total of increases; counters only go up. Both
 * lists are X-macros so that the struct, the JSON writer and the tests all come from one place.
 * Every mechanism and the pool (dmm_pool_stats_common) fill the same struct; a field a component
 * does not track stays 0.
 */
#ifndef DMM_STATS_H
#define DMM_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, description) */
#define DMM_STAT_COUNTS(X)                                                                       \
    X(allocations, "live allocations")                                                           \
    X(allocated_bytes, "bytes of live allocations, as requested")                                \
    X(reserved_bytes, "virtual address space reserved")                                          \
    X(committed_bytes, "bytes of physical chunks backing live allocations")                      \
    X(mapped_bytes, "bytes mapped into VA (committed plus poisoned chunks)")                     \
    X(owned_bytes, "bytes of physical handles held (mapped, cached and quarantined)")            \
    X(handles, "physical handles held")                                                          \
    X(cached_bytes, "bytes of released handles kept for reuse")                                  \
    X(quarantined_span_bytes, "virtual address bytes never handed out again")                    \
    X(imported_bytes, "bytes of handles imported from another process: mapped here, owned and charged there")

#define DMM_STAT_COUNTERS(X)                                                                     \
    X(driver_reserve, "driver reserve calls")                                                    \
    X(driver_create, "driver handle creations")                                                  \
    X(driver_map, "driver map calls")                                                            \
    X(driver_set_access, "driver set-access calls")                                              \
    X(driver_unmap, "driver unmap calls")                                                        \
    X(driver_release, "driver handle releases")                                                  \
    X(driver_alloc, "driver eager allocations")                                                  \
    X(driver_free, "driver eager frees")                                                         \
    X(driver_failures, "driver calls that failed")                                               \
    X(cache_hits, "chunks served from the handle cache")                                         \
    X(releases_complete, "release-shaped calls that reported COMPLETE")                          \
    X(releases_quarantined, "release-shaped calls that reported QUARANTINED")                    \
    X(releases_failed, "release-shaped calls that reported FAILED")                              \
    X(rollback_leaks, "failed operations whose undo could not fully unwind")                     \
    X(poisoned_chunks, "chunks left mapped after a failed unmap, never committed again")         \
    X(poisoned_bytes, "bytes of poisoned chunks")                                                \
    X(quarantined_handles, "handles whose release failed after a good unmap")                    \
    X(quarantined_bytes, "bytes of quarantined handles")                                         \
    X(refcount_underflows, "reference drops below zero caught and refused")                    \
    X(driver_ns, "nanoseconds spent in the physical driver calls above (create, map, set-access, unmap, release)") \
    X(exported_handles, "handles exported as descriptors to other processes")                    \
    X(exported_released_bytes, "bytes of exported handles released here while importers may still map them")

typedef struct dmm_count {
    int64_t current;
    int64_t peak;
    int64_t total; /* sum of every increase */
} dmm_count;

typedef struct dmm_stats {
    uint32_t size; /* sizeof(dmm_stats), set by the caller */
#define DMM_STAT_COUNT_FIELD(name, desc) dmm_count name;
    DMM_STAT_COUNTS(DMM_STAT_COUNT_FIELD)
#undef DMM_STAT_COUNT_FIELD
#define DMM_STAT_COUNTER_FIELD(name, desc) uint64_t name;
    DMM_STAT_COUNTERS(DMM_STAT_COUNTER_FIELD)
#undef DMM_STAT_COUNTER_FIELD
} dmm_stats;

/* Writes `stats` as one JSON object into buf (NUL-terminated when cap > 0). *needed receives the
 * length without the NUL; a too-small buffer gives DMM_ERR_INVALID_ARGUMENT and the length needed. */
DMM_API dmm_status dmm_stats_json(const dmm_stats *stats, char *buf, size_t cap, size_t *needed);

#ifdef __cplusplus
}
#endif
#endif /* DMM_STATS_H */
