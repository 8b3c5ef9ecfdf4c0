/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/fences.c — events: the event free list, the heaps' fences and polls, cross-stream frees
 * (DESIGN §4.9; contract: pool.h, "Streams and events").
 *
 * What it owns: every event the pool records. A block freed on another stream than its heap's
 * records an event there and waits, PENDING, until the event completes (then it is FREE for every
 * stream). Every heap has one fence: an event recorded on the heap's stream after frees happened,
 * whose completion moves safe_seq up to the free_seq it was recorded at; physical memory leaves a
 * heap only as whole free chunks whose seq ≤ safe_seq. Events are recycled through a free list
 * under the pool lock.
 *
 * The idea: never wait. A poll queries, and records the next fence at once when a query found the
 * last one complete, so every poll moves safe_seq on; the driver calls run outside the heap lock
 * (the pending list is taken out, the fence marked BUSY, while they run).
 *
 * Invariants: fence_state BUSY ⇔ one poller owns the fence; RECORDED ⇒ fence_seq ≤ free_seq and the
 * fence was recorded after the free that set free_seq = fence_seq; safe_seq only grows; a PENDING block
 * in `pending` holds a recorded event that only its poller (or destroy) touches. Once the driver is
 * lost, nothing is recorded, queried or destroyed (the context took the events).
 */
#include <stdlib.h>
#include <string.h>

#include "pool/hot.h"

static dmm_status event_get(dmm_pool *p, dmm_event *ev) {
    dmm_lock_acquire(&p->lock);
    if (p->nevents > 0) {
        *ev = p->events[--p->nevents];
        dmm_lock_release(&p->lock);
        return DMM_OK;
    }
    dmm_lock_release(&p->lock);
    return dmm__drv_event_create(p->drv, ev);
}

/* Keeps a completed (or never recorded) event for reuse. Called under no heap lock: when the free
 * list cannot grow it destroys the event, a driver call, after dropping the pool lock. */
static void event_put(dmm_pool *p, dmm_event ev) {
    dmm_lock_acquire(&p->lock);
    if (p->nevents == p->capevents) {
        size_t nc = p->capevents ? p->capevents * 2 : 16;
        dmm_event *nv = realloc(p->events, nc * sizeof *nv);
        if (nv == NULL) {
            dmm_lock_release(&p->lock);
            if (!dmm__drv_lost(p->drv)) dmm__drv_event_destroy(p->drv, ev); /* once lost, the context took it */
            return;
        }
        p->events = nv;
        p->capevents = nc;
    }
    p->events[p->nevents++] = ev;
    dmm_lock_release(&p->lock);
}

static void heap_fence(dmm_pool *p, pool_heap *h);

/* Polls the heap's pending cross-stream frees, then its fence, recording a new fence when frees
 * happened since the last one (the frees that completed pending blocks included), then decommits the
 * old places of aliased chunks that a completed fence covers. Driver calls run outside the heap
 * lock: the pending list (and the old places) are taken out while they run. Never waits. */
void dmm__pool_poll(dmm_pool *p, pool_heap *h) {
    if (dmm__pool_lost(p, "polling a stream's events")) return; /* nothing completes any more, and nothing is asked */
    /* 1: cross-stream frees whose event completed become free blocks */
    heap_lock(h);
    pool_block *list = h->pending;
    h->pending = NULL;
    h->npending = 0;
    heap_unlock(h);
    if (list != NULL) {
        for (pool_block *b = list; b != NULL; b = b->lnext) {
            dmm_status q = dmm__drv_event_query(p->drv, b->ev); /* once lost: refused, no call */
            b->requested = q == DMM_OK; /* a PENDING block's `requested` is free to hold the answer */
            if (q == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "querying a cross-stream free's event");
            else if (q != DMM_OK) dmm_atomic_add_relaxed(&p->events_pending, 1);
        }
        dmm_clear_error();
        /* Completed events go back to the free list before the heap lock is taken: event_put may
         * have to destroy one (no room for it), a driver call that must not run under the heap lock.
         * The blocks are held by this poller, so nobody else reads their ev meanwhile. */
        for (pool_block *b = list; b != NULL; b = b->lnext)
            if (b->requested) {
                event_put(p, b->ev);
                b->ev = NULL;
            }
        heap_lock(h);
        pool_block *b = list;
        while (b != NULL) {
            pool_block *n = b->lnext;
            if (b->requested) {
                b->requested = 0;
                b->lnext = b->lprev = NULL;
                b->seq = ++h->free_seq;
                dmm__heap_make_free(h, b);
                dmm_atomic_sub_relaxed(&p->pending_now, 1);
            } else {
                dmm__heap_list_push(&h->pending, b);
                h->npending++;
            }
            b = n;
        }
        heap_unlock(h);
    }
    heap_fence(p, h);      /* 2 */
    dmm__pool_reap_aliased(p, h); /* 3 */
}

/* The heap's fence: records one when frees happened since the last, or queries the recorded one; a
 * recorded fence found complete is followed at once by the next (when frees happened since), so
 * that every poll moves safe_seq on, not every second one. */
static void heap_fence(dmm_pool *p, pool_heap *h) {
    for (int round = 0; round < 2 && !dmm__drv_lost(p->drv); round++) {
        enum { NONE, RECORD, QUERY } action = NONE;
        uint64_t s = 0;
        heap_lock(h);
        if (h->fence_state == FENCE_IDLE && h->safe_seq < h->free_seq) {
            action = RECORD;
            s = h->free_seq;
            h->fence_state = FENCE_BUSY;
        } else if (h->fence_state == FENCE_RECORDED) {
            action = QUERY;
            s = h->fence_seq;
            h->fence_state = FENCE_BUSY;
        }
        heap_unlock(h);
        if (action == NONE) return;
        dmm_status fq = DMM_ERR_BUSY;
        bool recorded = action == QUERY;
        if (action == RECORD) {
            dmm_status rs = DMM_OK;
            if (h->fence == NULL) rs = dmm__drv_event_create(p->drv, &h->fence);
            if (rs == DMM_OK) rs = dmm__drv_event_record(p->drv, h->fence, h->stream);
            if (rs == DMM_OK) {
                recorded = true;
                dmm_atomic_add_relaxed(&p->events_recorded, 1);
            } else if (rs == DMM_ERR_DEVICE_LOST) {
                dmm__pool_notice_loss(p, "recording a stream's fence");
            }
        }
        if (recorded && !dmm__drv_lost(p->drv)) {
            fq = dmm__drv_event_query(p->drv, h->fence);
            if (fq == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "querying a stream's fence");
            else if (fq != DMM_OK) dmm_atomic_add_relaxed(&p->events_pending, 1);
        }
        dmm_clear_error();
        heap_lock(h);
        if (!recorded) h->fence_state = FENCE_IDLE; /* the record failed: try again next time */
        else if (fq == DMM_OK) {
            if (s > h->safe_seq) h->safe_seq = s;
            h->fence_state = FENCE_IDLE;
        } else {
            h->fence_seq = s;
            h->fence_state = FENCE_RECORDED;
        }
        heap_unlock(h);
        if (action != QUERY || fq != DMM_OK) return; /* only a completed query is followed by a record */
    }
}

/* The cross-stream free: record an event on `stream` and park the block until it completes. */
dmm_status dmm__pool_free_cross(dmm_pool *p, pool_heap *h, pool_block *b, dmm_stream stream) {
    dmm_event ev = NULL;
    dmm_status s = event_get(p, &ev);
    if (s == DMM_OK) {
        s = dmm__drv_event_record(p->drv, ev, stream);
        if (s == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "recording the event of a cross-stream free");
        if (s != DMM_OK) event_put(p, ev);
    } else if (s == DMM_ERR_DEVICE_LOST) {
        dmm__pool_notice_loss(p, "creating the event of a cross-stream free");
    }
    heap_lock(h);
    if (s == DMM_OK || dmm__drv_lost(p->drv)) count_free(h, b); /* the free is final (the ring's record of it) */
    if (s != DMM_OK && dmm__drv_lost(p->drv)) { /* the free that found the loss is accepted like every later one */
        b->seq = ++h->free_seq;
        dmm__heap_make_free(h, b);
        h->frees++;
        heap_unlock(h);
        dmm_clear_error();
        return DMM_OK;
    }
    if (s != DMM_OK) {
        /* nothing changed: the block is live again */
        b->kind = BK_LIVE;
        (void)dmm__heap_hash_insert(h, b);
        count_live(h, b, b->requested);
        h->requested_total -= b->requested;
        h->live_total -= b->size;
        heap_unlock(h);
        return dmm__error_wrap(s, "pool free of %p on stream %p (the block's heap is stream %p): recording the "
                                  "event that gates its reuse failed, so the block stays live; free it again",
                               (void *)b->addr, stream, h->stream); /* the bookkeeping above set no error */
    }
    b->ev = ev;
    b->requested = 0;
    dmm__heap_list_push(&h->pending, b);
    h->npending++;
    h->frees++;
    h->cross_frees++;
    heap_unlock(h);
    dmm_atomic_add_relaxed(&p->events_recorded, 1);
    uint64_t now = dmm_atomic_add_relaxed(&p->pending_now, 1) + 1;
    dmm_atomic_add_relaxed(&p->pending_total, 1);
    dmm_atomic_max_relaxed(&p->pending_peak, now);
    return DMM_OK;
}


void dmm__pool_destroy_events(dmm_pool *p) {
    for (pool_heap *h = heaps_head(p); h != NULL; h = heap_next(h))
        if (h->fence != NULL) dmm__drv_event_destroy(p->drv, h->fence);
    for (size_t i = 0; i < p->nevents; i++) dmm__drv_event_destroy(p->drv, p->events[i]);
}
