/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/deferred.h — deferred release: a queue of release requests, each gated by events (docs/guide.md).
 *
 * `cuMemUnmap` and `cuMemRelease` do not wait for work still queued on the device, so memory that a
 * stream may still touch is released through this queue: the caller records an event on every
 * stream that used the memory, enqueues the request with those events and returns at once; a later
 * `dmm_deferred_poll` (from any thread, e.g. the next allocation or a housekeeping tick) runs each
 * request once all its events have completed. Nothing here ever synchronizes a stream or the device:
 * readiness is only ever asked with the driver's `event_query`.
 *
 * Promises:
 *  - drained in order: requests run in the order they were enqueued; a poll stops at the first
 *    request with a pending event (head-of-line: one queue per independent stream set if it matters);
 *  - bounded: one poll runs at most the requests that were queued when it started; requests enqueued
 *    while it runs (by on_done, or by other threads) run at the next poll, so an on_done that
 *    re-enqueues a ready request cannot keep a poll from returning;
 *  - a queue that refuses (full) hands the exact request back: the caller's struct is untouched and
 *    still the caller's to run, requeue or keep;
 *  - nothing is ever freed by dropping a request: a request leaves the queue only by running with a
 *    COMPLETE or QUARANTINED outcome, or through dmm_deferred_take (which hands it back unrun). A
 *    FAILED outcome (nothing changed) keeps it at the head and the poll reports the failure; so does
 *    an event query that fails (e.g. DMM_ERR_DEVICE_LOST).
 *
 * Device loss: the loss is latched on the driver (dmm_driver_lost, dmm/driver.h), whichever of its
 * users met it first — an event query of this queue, a request's mechanism over the same driver, a
 * pool; a loss only a request's outcome reports is latched on the queue's driver too. From then on
 * the queue asks the driver nothing more (a poll returns DMM_ERR_DEVICE_LOST at once, with a
 * sentence naming the call that first saw the loss, and runs nothing), and neither does an arena over
 * that driver (which accepts dmm_arena_confirm_context_terminated). The requests stay queued:
 * dmm_deferred_take still hands each back unrun, so that the owner, once the context is confirmed
 * terminated, drops them and destroys the queue (the events they name went with the context: do not
 * destroy them through the driver).
 *
 * Thread contract: thread-safe. Polls are serialized (a poll that finds another one running returns
 * at once, having run nothing). `on_done` is called from the polling thread, under no queue lock: it
 * may enqueue (what it enqueues runs at the next poll); a poll or take it makes returns at once having
 * done nothing.
 */
#ifndef DMM_DEFERRED_H
#define DMM_DEFERRED_H

#include <stddef.h>
#include <stdint.h>

#include "dmm/driver.h"
#include "dmm/mechanism.h"
#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmm_deferred dmm_deferred;

/* The most events one request may wait for (one per stream that used the memory). */
#define DMM_DEFERRED_MAX_EVENTS 8

typedef enum dmm_deferred_kind {
    DMM_DEFERRED_RELEASE = 0,  /* dmm_mechanism_release(mechanism, &allocation) */
    DMM_DEFERRED_DECOMMIT = 1, /* dmm_mechanism_decommit(mechanism, &allocation, range) */
} dmm_deferred_kind;

typedef struct dmm_deferred_request {
    uint32_t size;             /* sizeof(dmm_deferred_request) */
    uint32_t kind;             /* a dmm_deferred_kind */
    dmm_mechanism *mechanism;  /* not owned; outlives the request */
    dmm_allocation allocation; /* the live allocation to release or decommit */
    dmm_range range;           /* DECOMMIT only */
    uint32_t n_events;         /* 0..DMM_DEFERRED_MAX_EVENTS; 0 = ready at the next poll */
    dmm_event events[DMM_DEFERRED_MAX_EVENTS]; /* not owned: kept alive by the caller until done */
    void *user;                /* handed to on_done with the request */
} dmm_deferred_request;

/* Called once per request that ran (COMPLETE or QUARANTINED outcome), in queue order. */
typedef void (*dmm_deferred_done_fn)(void *user, const dmm_deferred_request *request,
                                     const dmm_release_outcome *outcome);

typedef struct dmm_deferred_config {
    uint32_t size;                /* sizeof(dmm_deferred_config) */
    dmm_driver *driver;           /* answers event_query; not owned; outlives the queue */
    size_t capacity;              /* most requests queued at once; 0 = 1024 */
    dmm_deferred_done_fn on_done; /* optional */
    void *user;                   /* first argument of on_done */
} dmm_deferred_config;

DMM_API dmm_status dmm_deferred_create(const dmm_deferred_config *cfg, dmm_deferred **out);

/* Refused (DMM_ERR_BUSY, nothing changed) while requests are queued: take or run them first. */
DMM_API dmm_status dmm_deferred_destroy(dmm_deferred *q);

/* Copies the request into the queue and returns at once (no driver call). Full: DMM_ERR_BUSY and the
 * request stays the caller's, untouched. Malformed: DMM_ERR_INVALID_ARGUMENT. */
DMM_API dmm_status dmm_deferred_enqueue(dmm_deferred *q, const dmm_deferred_request *request);

/* Runs, in order, every request at the head whose events have all completed, among those queued
 * when the call started; stops at the first with a pending event. *ran (optional) = requests that
 * left the queue by running (≤ the requests pending at the start). Returns DMM_OK,
 * or the failure that stopped it (an event query's error, or a FAILED outcome's `failure`), with the
 * request concerned still at the head. After a device loss (see "Device loss" above):
 * DMM_ERR_DEVICE_LOST at once, no driver call. */
DMM_API dmm_status dmm_deferred_poll(dmm_deferred *q, size_t *ran);

/* Requests queued now. */
DMM_API dmm_status dmm_deferred_pending(dmm_deferred *q, size_t *count);

/* Removes the head request without running it and hands it back in *out (nothing is released).
 * DMM_ERR_INVALID_ARGUMENT when the queue is empty; DMM_ERR_BUSY while a poll is running. */
DMM_API dmm_status dmm_deferred_take(dmm_deferred *q, dmm_deferred_request *out);

#ifdef __cplusplus
}
#endif
#endif /* DMM_DEFERRED_H */
