/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/history.c — the pool's recent events: a ring, on only when asked for.
 *
 * What it owns: while on, a ring of the last N events of the pool in PyTorch's trace vocabulary —
 * a block handed out (alloc) or freed (free), a range of the pool's VA mapped (segment_map) or
 * unmapped (segment_unmap) — which a snapshot in PyTorch's layout turns into device_traces. The
 * device's malloc and free add the block events, the pool's observer (dmm_pool_config.on_map) the map
 * events at the moment its map changes, so the order of the ring is the order of the pool's state changes: replayed
 * backwards from the snapshot's segments (as PyTorch's viewer does), every freed block lies in a
 * mapped range. Tag and graph memory have no events (their segments appear as they are at the end).
 * A caller's context function (dmm.torch's stack frames) numbers each block event; the number rides
 * with the event and with the live block (blocks.c), and the caller maps it back. Kinds in `skip`
 * take no entry.
 *
 * The context function is one atomic pointer to a record of function and argument (read without the
 * lock on every tracked malloc and free); a replaced record lives until the device goes.
 *
 * Invariants (mu): count ≤ cap; the events are ring[(head − count + k) mod cap] for k = 0..count−1,
 * oldest first; on ⇔ cap > 0.
 */
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "context.h"
#include "history.h"

#define HISTORY_MAX ((uint64_t)1 << 26)

void dmm__device_history_init(dmm_device *c) { pthread_mutex_init(&c->hist.mu, NULL); }

void dmm__device_history_fini(dmm_device *c) {
    free(c->hist.ring);
    c->hist.ring = NULL;
    for (history_context *k = c->hist.made, *next; k != NULL; k = next) {
        next = k->older;
        free(k);
    }
    c->hist.made = NULL;
    pthread_mutex_destroy(&c->hist.mu);
}

dmm_status dmm_device_history(dmm_device *c, uint64_t max_entries) {
    if (c == NULL) return dmm__device_null("dmm_device_history", "a device");
    if (max_entries > HISTORY_MAX)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: a history of %llu events is more than the %llu kept at most (%llu MiB of "
                             "host memory); ask for fewer",
                             (unsigned long long)max_entries, (unsigned long long)HISTORY_MAX,
                             (unsigned long long)(HISTORY_MAX * sizeof(history_event) >> 20));
    history_event *ring = NULL;
    if (max_entries > 0 && (ring = calloc((size_t)max_entries, sizeof *ring)) == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "dmm device: out of host memory for a history of %llu events; nothing changed",
                             (unsigned long long)max_entries);
    if (max_entries > 0) dmm_device_track_blocks(c); /* the block events come with the table */
    device_history *h = &c->hist;
    pthread_mutex_lock(&h->mu);
    free(h->ring);
    h->ring = ring;
    h->cap = (size_t)max_entries;
    h->head = h->count = 0;
    h->dropped = 0;
    dmm_atomic_store_relaxed(&h->on, max_entries > 0);
    pthread_mutex_unlock(&h->mu);
    return DMM_OK;
}

dmm_status dmm_device_history_context(dmm_device *c, uint32_t skip, dmm_device_context_fn fn, void *arg) {
    if (c == NULL) return dmm__device_null("dmm_device_history_context", "a device");
    if (skip > 15)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm device: history skip mask %#x has bits beyond the four event kinds (1 << "
                             "DMM_DEVICE_EVENT_ALLOC ... 1 << DMM_DEVICE_EVENT_UNMAP); nothing changed",
                             (unsigned)skip);
    history_context *k = NULL;
    if (fn != NULL && (k = malloc(sizeof *k)) == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for a history context; nothing "
                                                    "changed");
    device_history *h = &c->hist;
    pthread_mutex_lock(&h->mu);
    h->skip = skip;
    if (k != NULL) {
        *k = (history_context){fn, arg, h->made};
        h->made = k;
    }
    atomic_store_explicit(&h->context, k, memory_order_release);
    pthread_mutex_unlock(&h->mu);
    return DMM_OK;
}

uint32_t dmm__device_history_context(dmm_device *c, uint32_t action) {
    const history_context *k = atomic_load_explicit(&c->hist.context, memory_order_acquire);
    return k != NULL ? k->fn(k->arg, (int)action) : 0;
}

void dmm__device_history_add(dmm_device *c, uint32_t action, uint64_t addr, uint64_t size, dmm_stream stream,
                             uint32_t context) {
    device_history *h = &c->hist;
    if (!dmm__device_history_on(c)) return;
    uint64_t t = dmm_device_clock_ns() / 1000;
    pthread_mutex_lock(&h->mu);
    if (h->cap > 0 && !(h->skip & (1u << action))) {
        h->ring[h->head] = (history_event){addr, size, (uint64_t)(uintptr_t)stream, t, action, context};
        h->head = (h->head + 1) % h->cap;
        if (h->count < h->cap) h->count++;
        else h->dropped++;
    }
    pthread_mutex_unlock(&h->mu);
}

void dmm__device_history_json(dmm_device *c, dmm_json *j) {
    device_history *h = &c->hist;
    pthread_mutex_lock(&h->mu);
    dmm__json_put(j, "\"history\":{\"on\":%s,\"dropped\":%llu,\"events\":[", h->cap > 0 ? "true" : "false",
                  (unsigned long long)h->dropped);
    for (size_t k = 0; k < h->count; k++) {
        const history_event *e = &h->ring[(h->head + h->cap - h->count + k) % h->cap];
        dmm__json_put(j, "%s[%u,%llu,%llu,%llu,%llu,%u]", k ? "," : "", e->action, (unsigned long long)e->addr,
                      (unsigned long long)e->size, (unsigned long long)e->stream, (unsigned long long)e->t_us,
                      e->context);
    }
    dmm__json_put(j, "]}");
    pthread_mutex_unlock(&h->mu);
}
