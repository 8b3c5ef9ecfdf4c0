/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/provider.h — one consumer's binding to exactly one mechanism on one device (docs/guide.md).
 *
 * A provider (an execution provider, a session, a framework's allocator) holds exactly one mechanism
 * for its device, chosen at creation — by default the built-in arena where the driver supports VMM
 * (it has reserve, create and map slots), else the eager mechanism — or replaced ONCE before first
 * use. A replacement is refused (nothing changes, with a sentence) for a mechanism of another device,
 * a second time, or once the current mechanism has served any allocation (through this provider or
 * directly: its stats are consulted) or holds committed or mapped bytes. After the first allocation
 * the mechanism never changes again, so an allocation always goes back to the mechanism that made it:
 * dmm_provider_release() forwards to a->mechanism after checking it is this provider's.
 *
 * Ownership: a mechanism the provider created (the default) is the provider's and is destroyed with
 * it or when it is replaced; a mechanism passed in (config or replacement) stays the caller's and
 * must outlive the provider.
 *
 * Thread contract: thread-safe. Before the first allocation, allocate and replace serialize on the
 * provider's lock; afterwards allocate and release take no provider lock at all.
 */
#ifndef DMM_PROVIDER_H
#define DMM_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/arena.h"
#include "dmm/driver.h"
#include "dmm/mechanism.h"
#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmm_provider dmm_provider;

typedef struct dmm_provider_config {
    uint32_t size;                    /* sizeof(dmm_provider_config) */
    const char *name;                 /* the consumer, for sentences; copied; NULL = "provider" */
    dmm_mechanism *mechanism;         /* use this one (the caller's; same device as the driver); NULL = default */
    const dmm_arena_config *arena;    /* config of the default arena; NULL = its defaults */
    const dmm_accounting *accounting; /* hook for the default mechanism (arena or eager); copied; overrides
                                         arena->accounting; NULL = arena->accounting or none */
} dmm_provider_config;

/* Creates a provider for driver->device (driver not owned; it must outlive the provider). With
 * cfg->mechanism set, driver may be NULL (the device is the mechanism's). A default arena that cannot
 * be created (e.g. the VA reservation failed) is an error, never a silent fall back to eager memory. */
DMM_API dmm_status dmm_provider_create(dmm_driver *driver, const dmm_provider_config *cfg, dmm_provider **out);

/* Destroys the provider and the mechanism it owns; DMM_ERR_BUSY (nothing changed) while that mechanism
 * still holds live allocations. NULL is ignored. */
DMM_API dmm_status dmm_provider_destroy(dmm_provider *p);

/* Replaces the mechanism once, before first use (see the header comment for the refusals). `m` stays the
 * caller's; a mechanism the provider owned is destroyed. */
DMM_API dmm_status dmm_provider_replace_mechanism(dmm_provider *p, dmm_mechanism *m);

/* The current mechanism (valid until the provider is destroyed or the mechanism replaced); use it for
 * capability calls (commit, decommit, stats) and for the provider's device
 * (dmm_mechanism_device(dmm_provider_mechanism(p)): a provider's mechanism is always of its device).
 * NULL for p == NULL. */
DMM_API dmm_mechanism *dmm_provider_mechanism(dmm_provider *p);

DMM_API dmm_status dmm_provider_allocate(dmm_provider *p, size_t bytes, size_t align, dmm_allocation *out);
/* Virtual backing through the provider's mechanism (DMM_ERR_UNSUPPORTED where it has none). */
DMM_API dmm_status dmm_provider_allocate_committed(dmm_provider *p, size_t bytes, size_t align,
                                                   const dmm_range *ranges, size_t n, dmm_allocation *out);
/* Releases through a->mechanism, which must be this provider's (else FAILED, DMM_ERR_WRONG_MECHANISM). */
DMM_API dmm_release_outcome dmm_provider_release(dmm_provider *p, const dmm_allocation *a);

#ifdef __cplusplus
}
#endif
#endif /* DMM_PROVIDER_H */
