/* SPDX-License-Identifier: Apache-2.0 */
/* src/bind/deferred.c — the deferred-release queue: release requests gated by events, run in order.
 *
 * The idea: a release that must not run under in-flight work (cuMemUnmap does not wait) is recorded
 * with the events of the streams that used the memory and returned from at once; polls ask the
 * driver's event_query — never a stream or device synchronize — and run the request when every event
 * has completed.
 *
 * A fixed ring of `capacity` requests (allocated once, so enqueue never allocates and a refusal is
 * always "full", handing the request back untouched). `lock` guards the ring and is never held across
 * a driver call or callback; `poll_lock` serializes the runners (poll, take), is only ever try-locked
 * (so a callback that polls cannot deadlock), and is held across event queries, the mechanism call and
 * on_done. Only the holder of poll_lock removes the head, so the head is stable while it works.
 *
 * Trade-off: strict FIFO. A request whose stream is slow holds back later ones; in exchange a
 * decommit and a later release of the same allocation can never run out of order.
 *
 * A poll's work is bounded: it runs at most the `count` requests queued when it took poll_lock (the
 * first ones, as only it pops), never what is enqueued while it runs, e.g. by its own on_done.
 *
 * Device loss lives on the driver (driver/call.h): once any user of the queue's driver — an event
 * query of this queue, the arena running a request, a pool over the same driver — met
 * DMM_ERR_DEVICE_LOST, the driver is latched lost and the queue makes no driver call from then on (a
 * poll returns DMM_ERR_DEVICE_LOST at once, naming the call that first saw it) and keeps its requests
 * for dmm_deferred_take (the owner drops them once the context is confirmed terminated). A loss that
 * only a request's outcome reports (a mechanism over another driver) is latched on the queue's driver.
 *
 * Invariants: 0 ≤ count ≤ capacity; slots [head, head+count) mod capacity hold the queued requests in
 * enqueue order; for each, events[0 .. seen) have been observed complete (completion is permanent, so
 * they are never asked again).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dmm/deferred.h"
#include "driver/call.h"

typedef struct deferred_slot {
    dmm_deferred_request req;
    uint32_t seen; /* events[0..seen) observed complete */
} deferred_slot;

struct dmm_deferred {
    dmm_driver *driver;
    dmm_deferred_done_fn on_done;
    void *user;
    dmm_lock lock;             /* guards head, count, slots */
    pthread_mutex_t poll_lock; /* try-locked by poll and take */
    size_t capacity;
    size_t head;
    size_t count;
    deferred_slot *slots;
};

dmm_status dmm_deferred_create(const dmm_deferred_config *cfg, dmm_deferred **out) {
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_create: out is NULL");
    *out = NULL;
    if (cfg == NULL || cfg->driver == NULL || cfg->driver->ops == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_deferred_create: a config with the driver that answers event_query is required");
    if (cfg->size < sizeof *cfg)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_deferred_create: cfg->size is %u, at least %zu needed",
                             (unsigned)cfg->size, sizeof *cfg);
    if (cfg->driver->ops->event_query == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_deferred_create: driver '%s' has no event_query, so no request could ever be "
                             "known safe to run",
                             cfg->driver->ops->name != NULL ? cfg->driver->ops->name : "?");
    size_t cap = cfg->capacity != 0 ? cfg->capacity : 1024;
    if (cap > SIZE_MAX / sizeof(deferred_slot))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_create: capacity %zu is too large", cap);
    dmm_deferred *q = calloc(1, sizeof *q);
    deferred_slot *slots = calloc(cap, sizeof *slots);
    if (q == NULL || slots == NULL) {
        free(q);
        free(slots);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_deferred_create: no host memory for %zu request slots", cap);
    }
    q->driver = cfg->driver;
    q->on_done = cfg->on_done;
    q->user = cfg->user;
    q->capacity = cap;
    q->slots = slots;
    dmm_lock_init(&q->lock);
    pthread_mutex_init(&q->poll_lock, NULL);
    *out = q;
    return DMM_OK;
}

dmm_status dmm_deferred_destroy(dmm_deferred *q) {
    if (q == NULL) return DMM_OK;
    dmm_lock_acquire(&q->lock);
    size_t n = q->count;
    dmm_lock_release(&q->lock);
    if (n != 0)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_deferred_destroy: %zu request(s) still queued; poll until they ran or take them "
                             "(dropping them would leak what they release)",
                             n);
    pthread_mutex_destroy(&q->poll_lock);
    dmm_lock_destroy(&q->lock);
    free(q->slots);
    free(q);
    return DMM_OK;
}

static dmm_status check_request(const dmm_deferred_request *r) {
    if (r == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_enqueue: request is NULL");
    if (r->size < sizeof *r)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_deferred_enqueue: request->size is %u, at least %zu needed",
                             (unsigned)r->size, sizeof *r);
    if (r->kind != DMM_DEFERRED_RELEASE && r->kind != DMM_DEFERRED_DECOMMIT)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_deferred_enqueue: kind %u is neither RELEASE (0) nor DECOMMIT (1)", (unsigned)r->kind);
    if (r->mechanism == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_enqueue: the request names no mechanism");
    if (r->n_events > DMM_DEFERRED_MAX_EVENTS)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_enqueue: %u events, at most %d",
                             (unsigned)r->n_events, DMM_DEFERRED_MAX_EVENTS);
    for (uint32_t i = 0; i < r->n_events; i++)
        if (r->events[i] == NULL)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_enqueue: event %u of %u is NULL",
                                 (unsigned)i, (unsigned)r->n_events);
    return DMM_OK;
}

dmm_status dmm_deferred_enqueue(dmm_deferred *q, const dmm_deferred_request *request) {
    if (q == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_enqueue: queue is NULL");
    dmm_status s = check_request(request);
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&q->lock);
    if (q->count == q->capacity) {
        size_t cap = q->capacity;
        dmm_lock_release(&q->lock);
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_deferred_enqueue: the queue is full (%zu requests); the request was not taken "
                             "and is still yours: poll, then enqueue it again",
                             cap);
    }
    deferred_slot *slot = &q->slots[(q->head + q->count) % q->capacity];
    slot->req = *request;
    slot->req.size = (uint32_t)sizeof slot->req;
    slot->seen = 0;
    q->count++;
    dmm_lock_release(&q->lock);
    return DMM_OK;
}

dmm_status dmm_deferred_pending(dmm_deferred *q, size_t *count) {
    if (q == NULL || count == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_pending: queue or count is NULL");
    dmm_lock_acquire(&q->lock);
    *count = q->count;
    dmm_lock_release(&q->lock);
    return DMM_OK;
}

/* The head slot, or NULL when empty. Only the poll_lock holder calls this, so the slot stays put. */
static deferred_slot *head_slot(dmm_deferred *q) {
    dmm_lock_acquire(&q->lock);
    deferred_slot *s = q->count != 0 ? &q->slots[q->head] : NULL;
    dmm_lock_release(&q->lock);
    return s;
}

static void pop_head(dmm_deferred *q) {
    dmm_lock_acquire(&q->lock);
    q->head = (q->head + 1) % q->capacity;
    q->count--;
    dmm_lock_release(&q->lock);
}

/* The poll (poll_lock held) saw DMM_ERR_DEVICE_LOST in a request's outcome, whose sentence is the
 * last error: the loss is latched on the queue's driver (where the mechanism calls the same driver,
 * its funnel latched it already), so the queue asks that driver nothing more. The last error stays. */
static void note_lost(dmm_deferred *q, const dmm_deferred_request *r) {
    char what[96];
    snprintf(what, sizeof what, "the %s of allocation %llu", r->kind == DMM_DEFERRED_RELEASE ? "release" : "decommit",
             (unsigned long long)r->allocation.id);
    dmm__drv_latch(q->driver, what);
}

dmm_status dmm_deferred_poll(dmm_deferred *q, size_t *ran) {
    if (ran != NULL) *ran = 0;
    if (q == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_poll: queue is NULL");
    if (pthread_mutex_trylock(&q->poll_lock) != 0) return DMM_OK; /* another poll is draining */
    if (dmm__drv_lost(q->driver)) {
        size_t n = 0;
        dmm_deferred_pending(q, &n);
        pthread_mutex_unlock(&q->poll_lock);
        return dmm_error_set(DMM_ERR_DEVICE_LOST,
                             "dmm_deferred_poll: the device is lost (first seen: %s); the queue asks the driver "
                             "nothing more and runs none of its %zu request(s): confirm the context terminated, "
                             "then take them (dmm_deferred_take) and drop them",
                             dmm__drv_lost_why(q->driver), n);
    }
    dmm_status result = DMM_OK;
    size_t done = 0;
    /* This poll runs at most the requests queued when it started: what on_done (or another thread)
     * enqueues meanwhile waits for the next poll, so a callback that re-enqueues a ready request
     * cannot keep one poll running forever. Only this runner pops, so those are the first `budget`. */
    dmm_lock_acquire(&q->lock);
    size_t budget = q->count;
    dmm_lock_release(&q->lock);
    for (deferred_slot *slot = done < budget ? head_slot(q) : NULL; slot != NULL;
         slot = done < budget ? head_slot(q) : NULL) {
        dmm_deferred_request *r = &slot->req;
        dmm_status s = DMM_OK;
        while (slot->seen < r->n_events) { /* refused at once, without a driver call, once the driver is lost */
            s = dmm__drv_event_query(q->driver, r->events[slot->seen]);
            if (s != DMM_OK) break;
            slot->seen++;
        }
        if (s == DMM_ERR_BUSY) { /* pending work: not an error, the request waits */
            dmm_clear_error();   /* the query's "not ready" must not read as this poll's failure */
            break;
        }
        if (s != DMM_OK) {            /* the driver's sentence stays as the last error */
            result = s; /* a loss the query met, or met before, is latched on the driver */
            break;
        }
        dmm_release_outcome o =
            r->kind == DMM_DEFERRED_RELEASE ? dmm_mechanism_release(r->mechanism, &r->allocation)
                                            : dmm_mechanism_decommit(r->mechanism, &r->allocation, r->range);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) {
            /* Nothing changed: the request stays at the head, the mechanism's sentence explains why. */
            result = o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER;
            if (o.failure == DMM_OK)
                dmm_error_set(result, "dmm_deferred_poll: the %s of allocation %llu failed without a reason",
                              r->kind == DMM_DEFERRED_RELEASE ? "release" : "decommit",
                              (unsigned long long)r->allocation.id);
            if (result == DMM_ERR_DEVICE_LOST) note_lost(q, r);
            break;
        }
        dmm_deferred_request copy = *r; /* the slot may be reused by an enqueue once popped */
        pop_head(q);
        done++;
        if (q->on_done != NULL) q->on_done(q->user, &copy, &o);
    }
    pthread_mutex_unlock(&q->poll_lock);
    if (ran != NULL) *ran = done;
    return result;
}

dmm_status dmm_deferred_take(dmm_deferred *q, dmm_deferred_request *out) {
    if (q == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_take: queue or out is NULL");
    if (pthread_mutex_trylock(&q->poll_lock) != 0)
        return dmm_error_set(DMM_ERR_BUSY, "dmm_deferred_take: a poll is running the queue; try again after it");
    deferred_slot *slot = head_slot(q);
    if (slot == NULL) {
        pthread_mutex_unlock(&q->poll_lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_deferred_take: the queue is empty");
    }
    *out = slot->req;
    pop_head(q);
    pthread_mutex_unlock(&q->poll_lock);
    return DMM_OK;
}
