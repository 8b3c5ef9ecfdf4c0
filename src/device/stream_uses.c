/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/stream_uses.c — blocks used on streams other than their own (torch's record_stream).
 *
 * torch calls record_stream(ptr, stream) when a tensor allocated on one stream is used by work on
 * another (a copy stream, NCCL's stream in torch.distributed); the allocator must not hand the block
 * out again before that work is done. What it owns: the process-wide table block → the streams
 * recorded for it (a pointer names one block of one device, so one table serves every device), under
 * its own lock (a leaf), and the ordering of one stream after another.
 *
 * At the free (device.c), the block is freed on the first recorded stream — the pool's cross-stream
 * free then holds it back behind an event there, and the block's own stream needs nothing (its later
 * work is ordered after its earlier work) — after that stream was made to wait for each other recorded
 * stream's queued work. Tag blocks order their own stream too (their segment may leave the device
 * behind the free stream's event only). So no stream waits for another unless a block was recorded on
 * two or more, and the common case (one side stream) adds one event where torch's caching allocator
 * records one as well.
 *
 * The trade-off: the table costs nothing until the first record_stream; from then on every free takes
 * its lock once (torch's pluggable allocator takes a process-wide lock on every free anyway).
 *
 * Invariants (uses_mu): each entry lists distinct streams, none twice; an entry leaves at its block's
 * free, so a pointer handed out again starts with none.
 */
#include <pthread.h>
#include <stdlib.h>

#include "driver/call.h"
#include "stream_uses.h"

typedef struct uses_entry {
    size_t n, cap;
    dmm_stream *s;
} uses_entry;

static pthread_mutex_t uses_mu = PTHREAD_MUTEX_INITIALIZER;
static dmm_u64map uses_table; /* ptr → uses_entry * (uses_mu) */
_Atomic int dmm__device_uses_seen;

static uint64_t key_of(void *p) { return (uint64_t)(uintptr_t)p; }

static dmm_status no_memory(void *ptr, dmm_stream stream) {
    return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: record_stream(%p, stream %p): out of host memory for "
                         "the entry; the block is not held back for that stream", ptr, (void *)stream);
}

dmm_status dmm_device_record_stream(void *ptr, dmm_stream stream) {
    if (ptr == NULL) return DMM_OK; /* torch records the empty tensor's NULL too: nothing to hold back */
    pthread_mutex_lock(&uses_mu);
    uint64_t v = 0;
    uses_entry *e = dmm__u64map_find(&uses_table, key_of(ptr), &v) ? (uses_entry *)(uintptr_t)v : NULL;
    if (e != NULL)
        for (size_t i = 0; i < e->n; i++)
            if (e->s[i] == stream) {
                pthread_mutex_unlock(&uses_mu);
                return DMM_OK;
            }
    bool fresh = e == NULL;
    if (fresh) {
        e = calloc(1, sizeof *e);
        if (e == NULL || !dmm__u64map_insert(&uses_table, key_of(ptr), (uint64_t)(uintptr_t)e)) {
            free(e);
            pthread_mutex_unlock(&uses_mu);
            return no_memory(ptr, stream);
        }
    }
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 2;
        dmm_stream *s = realloc(e->s, cap * sizeof *s);
        if (s == NULL) {
            if (fresh) {
                (void)dmm__u64map_remove(&uses_table, key_of(ptr), NULL);
                free(e);
            }
            pthread_mutex_unlock(&uses_mu);
            return no_memory(ptr, stream);
        }
        e->s = s;
        e->cap = cap;
    }
    e->s[e->n++] = stream;
    dmm_atomic_store_relaxed(&dmm__device_uses_seen, 1);
    pthread_mutex_unlock(&uses_mu);
    return DMM_OK;
}

bool dmm__device_uses_take(void *ptr, dmm_stream own, dmm_stream **streams, size_t *n) {
    *streams = NULL;
    *n = 0;
    uint64_t v = 0;
    pthread_mutex_lock(&uses_mu);
    bool found = dmm__u64map_remove(&uses_table, key_of(ptr), &v);
    pthread_mutex_unlock(&uses_mu);
    if (!found) return false;
    uses_entry *e = (uses_entry *)(uintptr_t)v;
    size_t k = 0;
    for (size_t i = 0; i < e->n; i++)
        if (e->s[i] != own) e->s[k++] = e->s[i]; /* distinct already: only the own stream leaves */
    if (k == 0) {
        free(e->s);
        free(e);
        return false;
    }
    *streams = e->s;
    *n = k;
    free(e);
    return true;
}

dmm_status dmm_device_stream_wait(dmm_device *dev, dmm_stream waiter, dmm_stream on) {
    if (dev == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_device_stream_wait: needs a device (NULL given)");
    dmm__device_stream_wait(dev, waiter, on);
    return DMM_OK;
}

void dmm__device_stream_wait(dmm_device *c, dmm_stream waiter, dmm_stream on) {
    if (waiter == on) return;
    if (dmm__drv_can_wait_event(c->drv)) {
        dmm_event ev = NULL;
        dmm_status s = dmm__drv_event_create(c->drv, &ev);
        if (s == DMM_OK) s = dmm__drv_event_record(c->drv, ev, on);
        if (s == DMM_OK) s = dmm__drv_stream_wait_event(c->drv, waiter, ev);
        if (ev != NULL) (void)dmm__drv_event_destroy(c->drv, ev); /* legal once the wait is queued */
        if (s == DMM_OK) return;
    }
    (void)dmm__drv_stream_synchronize(c->drv, on); /* a failure here is the device's: the next call says so */
}
