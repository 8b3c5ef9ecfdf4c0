/* adapters/torch/segment.c — one segment: what tag segments and graph segments have in common.
 *
 * What it owns: a segment's arena allocation (VA only, or committed in full), the placement of blocks
 * inside it, and giving it back — now, or behind an event through the jobs floor. Tags (tags.c) grow
 * a backed prefix at the low end and offload it; graphs (graphs.c) hand a whole segment to a capture;
 * both place blocks and give segments back the same way, here.
 *
 * Placement: the free spans are a span set (core/spans.h) taken first fit, so blocks pack at the low
 * end; the live blocks are a table by offset (one pair, block_put / block_take, over an
 * open-addressing table). The trade-off: O(free spans) per call, never on the pool's hot path —
 * segments hold few, long-lived blocks (weights) or the blocks of one capture.
 *
 * Invariants: free.total + live_bytes = a.bytes; count = live blocks; no live block overlaps a free
 * span; a failed take or give changes nothing (both reserve what they need first).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "jobs.h"
#include "segment.h"

/* ---- the live blocks: offset → (len, req) ---- */
static size_t slot_of(uint64_t off, size_t cap) {
    uint64_t k = off * 0x9E3779B97F4A7C15ull;
    return (size_t)(k ^ (k >> 31)) & (cap - 1);
}

/* Room for `need` blocks (the table at most half full); false when out of host memory. */
static bool blocks_fit(torch_segment *s, size_t need) {
    if (need * 2 <= s->cap) return true;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < need * 2) cap *= 2;
    torch_block *v = calloc(cap, sizeof *v);
    if (v == NULL) return false;
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->blocks[i].used) continue;
        size_t j = slot_of(s->blocks[i].off, cap);
        while (v[j].used) j = (j + 1) & (cap - 1);
        v[j] = s->blocks[i];
    }
    free(s->blocks);
    s->blocks = v;
    s->cap = cap;
    return true;
}

/* Records a live block (room made by blocks_fit). */
static void block_put(torch_segment *s, uint64_t off, uint64_t len, uint64_t req) {
    size_t i = slot_of(off, s->cap);
    while (s->blocks[i].used) i = (i + 1) & (s->cap - 1);
    s->blocks[i] = (torch_block){off, len, req, true};
}

/* Removes the live block at `off` (backward-shift deletion); false when there is none. */
static bool block_take(torch_segment *s, uint64_t off, torch_block *out) {
    if (s->cap == 0) return false;
    size_t mask = s->cap - 1, i = slot_of(off, s->cap);
    while (s->blocks[i].used && s->blocks[i].off != off) i = (i + 1) & mask;
    if (!s->blocks[i].used) return false;
    *out = s->blocks[i];
    size_t hole = i;
    for (size_t j = (hole + 1) & mask; s->blocks[j].used; j = (j + 1) & mask) {
        size_t home = slot_of(s->blocks[j].off, s->cap);
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            s->blocks[hole] = s->blocks[j];
            hole = j;
        }
    }
    s->blocks[hole].used = false;
    return true;
}

/* ---- placement ---- */
static bool place_init(torch_segment *s, uint64_t bytes) {
    dmm__spans_init(&s->free);
    return dmm__spans_reserve(&s->free, 1) && dmm__spans_insert(&s->free, 0, bytes);
}

bool dmm__torch_segment_take(torch_segment *s, uint64_t len, uint64_t req, uint64_t *off) {
    if (len == 0 || !blocks_fit(s, s->count + 1) || !dmm__spans_reserve(&s->free, 1)) return false;
    uint64_t at = 0;
    if (!dmm__spans_take_first_fit(&s->free, 0, len, 1, &at)) return false;
    block_put(s, at, len, req);
    s->count++;
    s->live_bytes += len;
    *off = at;
    return true;
}

bool dmm__torch_segment_give(torch_segment *s, uint64_t off, uint64_t *len, uint64_t *req) {
    if (!dmm__spans_reserve(&s->free, 1)) return false; /* first, so that a failure changes nothing */
    torch_block b;
    if (!block_take(s, off, &b)) return false;
    (void)dmm__spans_insert(&s->free, b.off, b.len); /* (room reserved; a live block overlaps no free span) */
    s->count--;
    s->live_bytes -= b.len;
    if (len != NULL) *len = b.len;
    if (req != NULL) *req = b.req;
    return true;
}

bool dmm__torch_segment_holds(const torch_segment *s, const void *ptr, uint64_t *off) {
    uintptr_t p = (uintptr_t)ptr, b = (uintptr_t)s->a.ptr;
    if (p < b || p >= b + s->a.bytes) return false;
    if (off != NULL) *off = p - b;
    return true;
}

uint64_t dmm__torch_segment_high(const torch_segment *s) {
    uint64_t hi = 0;
    for (size_t i = 0; i < s->cap; i++)
        if (s->blocks[i].used && s->blocks[i].off + s->blocks[i].len > hi) hi = s->blocks[i].off + s->blocks[i].len;
    return hi;
}

void dmm__torch_segment_each(const torch_segment *s, void (*fn)(void *u, uint64_t off, uint64_t len, uint64_t req),
                             void *u) {
    for (size_t i = 0; i < s->cap; i++)
        if (s->blocks[i].used) fn(u, s->blocks[i].off, s->blocks[i].len, s->blocks[i].req);
}

/* ---- the allocation ---- */
dmm_status dmm__torch_segment_open(tctx *c, torch_segment *s, uint64_t bytes, bool commit, const char *kind,
                                   const char *fmt, ...) {
    memset(s, 0, sizeof *s);
    if (!place_init(s, bytes)) {
        dmm__torch_segment_close(s);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm torch: out of host memory for %s", kind);
    }
    dmm_status st;
    if (!commit) {
        st = dmm_mechanism_allocate_committed(c->arena, (size_t)bytes, (size_t)c->granule, NULL, 0, &s->a);
    } else {
        st = dmm_mechanism_allocate(c->arena, (size_t)bytes, (size_t)c->granule, &s->a);
        if (st == DMM_ERR_BUDGET || st == DMM_ERR_OUT_OF_MEMORY) {
            (void)dmm_pool_empty_cache(c->pool, NULL);
            st = dmm_mechanism_allocate(c->arena, (size_t)bytes, (size_t)c->granule, &s->a);
        }
    }
    if (st != DMM_OK) {
        char what[160]; /* the segment's own description, not a copy of the error */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        dmm__error_wrap(st, "dmm torch: reserving %llu bytes of %s failed", (unsigned long long)bytes, what);
        dmm__torch_segment_close(s);
        return st;
    }
    s->committed = commit ? bytes : 0;
    return DMM_OK;
}

void dmm__torch_segment_close(torch_segment *s) {
    dmm__spans_fini(&s->free);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

bool dmm__torch_segment_release(tctx *c, torch_segment *s) {
    dmm_release_outcome o = dmm_mechanism_release(c->arena, &s->a);
    return dmm_release_state_of(&o) != DMM_RELEASE_FAILED;
}

dmm_status dmm__torch_segment_release_behind(tctx *c, torch_segment *s, dmm_event ev, torch_job_finish finish,
                                             void *owner) {
    tjob *j = dmm__torch_job_new(finish, owner);
    if (j == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm torch: out of host memory queueing a release");
    j->ev = ev;
    dmm_deferred_request r;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.kind = DMM_DEFERRED_RELEASE;
    r.mechanism = c->arena;
    r.allocation = s->a;
    r.n_events = 1;
    r.events[0] = ev;
    dmm_status st = dmm__torch_job_queue(c, &r, j);
    if (st != DMM_OK) free(j);
    return st;
}
