/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/segment.c — one segment: what tag segments and graph segments have in common.
 *
 * What it owns: a segment's arena allocation (VA only, or committed in full, in 2 MiB pieces that can go
 * back one by one), the placement of blocks inside it, its pinned copy's return, and giving it back —
 * now, or behind an event through the jobs floor. Tags (tags.c) grow
 * a backed prefix at the low end and offload it; graphs (graphs.c) hand a whole segment to a capture;
 * both place blocks and give segments back the same way, here.
 *
 * Placement: the free spans are a span set (core/spans.h) taken first fit, so blocks pack at the low
 * end; the live blocks are two u64 maps by offset (core/u64map.h: their lengths and their requested
 * sizes). The trade-off: O(free spans) per call, never on the pool's hot path —
 * segments hold few, long-lived blocks (weights) or the blocks of one capture.
 *
 * Invariants: free.total + live_bytes = a.bytes; count = |lens| = |reqs| (the same keys); no live
 * block overlaps a free span; a failed take or give changes nothing (both reserve what they need
 * first).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "driver/call.h"
#include "jobs.h"
#include "segment.h"

/* ---- the live blocks: offset → len and offset → req, two maps of the core's one u64 map ---- */

/* Promises a slot in both maps (so that recording a block cannot fail halfway); false: none. */
static bool blocks_promise(device_segment *s) {
    if (!dmm__u64map_reserve(&s->lens, 1)) return false;
    if (dmm__u64map_reserve(&s->reqs, 1)) return true;
    dmm__u64map_unreserve(&s->lens, 1);
    return false;
}

static void blocks_unpromise(device_segment *s) {
    dmm__u64map_unreserve(&s->lens, 1);
    dmm__u64map_unreserve(&s->reqs, 1);
}

/* ---- placement ---- */
bool dmm__device_segment_place(device_segment *s, uint64_t bytes) {
    dmm__spans_init(&s->free);
    return dmm__spans_reserve(&s->free, 1) && dmm__spans_insert(&s->free, 0, bytes);
}

bool dmm__device_segment_take(device_segment *s, uint64_t len, uint64_t req, uint64_t *off) {
    if (len == 0 || !blocks_promise(s)) return false;
    uint64_t at = 0;
    if (!dmm__spans_reserve(&s->free, 1) || !dmm__spans_take_first_fit(&s->free, 0, len, 1, &at)) {
        blocks_unpromise(s);
        return false;
    }
    dmm__u64map_insert_reserved(&s->lens, at, len);
    dmm__u64map_insert_reserved(&s->reqs, at, req);
    s->count++;
    s->live_bytes += len;
    *off = at;
    return true;
}

bool dmm__device_segment_give(device_segment *s, uint64_t off, uint64_t *len, uint64_t *req) {
    if (!dmm__spans_reserve(&s->free, 1)) return false; /* first, so that a failure changes nothing */
    uint64_t blen = 0, breq = 0;
    if (!dmm__u64map_remove(&s->lens, off, &blen)) return false;
    (void)dmm__u64map_remove(&s->reqs, off, &breq); /* (the two maps hold the same offsets) */
    (void)dmm__spans_insert(&s->free, off, blen); /* (room reserved; a live block overlaps no free span) */
    s->count--;
    s->live_bytes -= blen;
    if (len != NULL) *len = blen;
    if (req != NULL) *req = breq;
    return true;
}

bool dmm__device_segment_holds(const device_segment *s, const void *ptr, uint64_t *off) {
    uintptr_t p = (uintptr_t)ptr, b = (uintptr_t)s->a.ptr;
    if (p < b || p >= b + s->a.bytes) return false;
    if (off != NULL) *off = p - b;
    return true;
}

uint64_t dmm__device_segment_high(const device_segment *s) {
    uint64_t hi = 0, off, len;
    size_t at = 0;
    while (dmm__u64map_next(&s->lens, &at, &off, &len))
        if (off + len > hi) hi = off + len;
    return hi;
}

void dmm__device_segment_each(const device_segment *s, void (*fn)(void *u, uint64_t off, uint64_t len, uint64_t req),
                             void *u) {
    uint64_t off, len, req = 0;
    size_t at = 0;
    while (dmm__u64map_next(&s->lens, &at, &off, &len)) {
        (void)dmm__u64map_find(&s->reqs, off, &req);
        fn(u, off, len, req);
    }
}

typedef struct json_blocks {
    dmm_json *j;
    uintptr_t base;
    bool first;
} json_blocks;

static void put_block(void *u, uint64_t off, uint64_t len, uint64_t req) {
    json_blocks *b = u;
    dmm__json_put(b->j, "%s[%llu,%llu,%llu]", b->first ? "" : ",", (unsigned long long)(b->base + off),
                  (unsigned long long)len, (unsigned long long)req);
    b->first = false;
}

void dmm__device_segment_json_blocks(const device_segment *s, dmm_json *j) {
    json_blocks b = {j, (uintptr_t)s->a.ptr, true};
    dmm__device_segment_each(s, put_block, &b);
}

/* ---- the allocation ---- */
void dmm__device_copy_drop(dmm_device *c, void **host, uint64_t *bytes) {
    if (*host == NULL) return;
    (void)dmm__drv_host_free(c->drv, *host); /* (a failure is the driver's to report: the copy is dropped) */
    (void)dmm_lease_shrink(c->gov, c->host_lease, *bytes, *bytes);
    c->host_bytes -= *bytes;
    *host = NULL;
    *bytes = 0;
}

dmm_status dmm__device_commit_pieces(dmm_device *c, const dmm_allocation *a, dmm_range range, uint64_t *mapped) {
    uint64_t piece = c->granule > DMM_DEVICE_SEGMENT_PIECE ? c->granule : DMM_DEVICE_SEGMENT_PIECE;
    if (!dmm_mechanism_has_slot(c->arena, DMM_SLOT_COMMIT_PIECES)) return dmm_mechanism_commit(c->arena, a, range, mapped);
    return dmm_mechanism_commit_pieces(c->arena, a, range, piece, mapped);
}

dmm_status dmm__device_segment_open(dmm_device *c, device_segment *s, uint64_t bytes, uint64_t commit,
                                   const char *kind, const char *fmt, ...) {
    memset(s, 0, sizeof *s);
    if (!dmm__device_segment_place(s, bytes)) {
        dmm__device_segment_close(s);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for %s", kind);
    }
    dmm_status st;
    if (commit == 0) {
        st = dmm_mechanism_allocate_committed(c->arena, (size_t)bytes, (size_t)c->granule, NULL, 0, &s->a);
    } else { /* committed in pieces, so that a tail its users never reach can go back (graphs: fit) */
        st = dmm_mechanism_allocate_committed(c->arena, (size_t)bytes, (size_t)c->granule, NULL, 0, &s->a);
        if (st == DMM_OK) {
            dmm_range all = {0, (size_t)(commit < bytes ? commit : bytes)};
            uint64_t mapped = 0;
            st = dmm__device_commit_pieces(c, &s->a, all, &mapped);
            if (st == DMM_ERR_BUDGET || st == DMM_ERR_OUT_OF_MEMORY) {
                (void)dmm_pool_empty_cache(c->pool, NULL);
                st = dmm__device_commit_pieces(c, &s->a, all, &mapped);
            }
            if (st != DMM_OK) { /* the VA goes back (a release the driver refuses leaves it to the arena) */
                dmm_error_kept why = {0};
                dmm__error_keep(&why, st);
                (void)dmm_mechanism_release(c->arena, &s->a);
                st = dmm__error_restore(&why);
            }
        }
    }
    if (st != DMM_OK) {
        char what[160]; /* the segment's own description, not a copy of the error */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        dmm__error_wrap(st, "dmm device: reserving %llu bytes of %s failed", (unsigned long long)bytes, what);
        dmm__device_segment_close(s);
        return st;
    }
    s->committed = commit < bytes ? commit : bytes;
    return DMM_OK;
}

void dmm__device_segment_close(device_segment *s) {
    dmm__spans_fini(&s->free);
    dmm__u64map_fini(&s->lens);
    dmm__u64map_fini(&s->reqs);
    memset(s, 0, sizeof *s);
}

bool dmm__device_segment_release(dmm_device *c, device_segment *s) {
    dmm_release_outcome o = dmm_mechanism_release(c->arena, &s->a);
    return dmm_release_state_of(&o) != DMM_RELEASE_FAILED;
}

dmm_status dmm__device_segment_release_behind(dmm_device *c, device_segment *s, dmm_event ev, device_job_finish finish,
                                             void *owner) {
    device_job *j = dmm__device_job_new(finish, owner);
    if (j == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory queueing a release");
    j->ev = ev;
    dmm_deferred_request r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.kind = DMM_DEFERRED_RELEASE;
    r.mechanism = c->arena;
    r.allocation = s->a;
    r.n_events = 1;
    r.events[0] = ev;
    dmm_status st = dmm__device_job_queue(c, &r, j);
    if (st != DMM_OK) free(j);
    return st;
}
