/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/prefix.c — the arena's shared_mapping capability (DESIGN §4.6): shared prefixes.
 *
 * What it owns: the prefix records (arena_prefix, one arena_piece per handle), and the four calls of
 * dmm_shared_mapping_ops: create, commit (map read-only into a target), cost, release.
 *
 * Idea: a prefix is not new memory. It is a hold on the handles of chunks its owner committed and
 * filled; chunks.c already keeps the chunks that map one handle in a ring (aliases), and a handle
 * lives as long as its ring. A prefix adds one more holder per handle: every chunk of a held ring
 * points at the prefix's piece, and when the ring's last chunk dies the handle is PARKED in the
 * piece (unmapped, still owned and charged) instead of going to the cache or the driver. Committing
 * the prefix into a target joins each handle's ring (or starts a new ring from a parked piece) with
 * READ access: the target's granules are then committed memory of the target like any other, so
 * decommit and release of a sharer are the existing release state machine (release.c), unchanged.
 * Releasing the prefix lets go of its pieces: parked ones are cached or released now; mapped ones
 * go with their ring's last chunk. So physical memory is freed exactly when the owner, every sharer
 * and the prefix object are all gone, in any order.
 *
 * Accounting: create charges nothing (the owner's commit charged OWNED). A commit charges MAPPED for
 * the prefix's bytes ahead, outside the lock (the hook may climb the governor's reclaim ladder,
 * which may call into this arena), then draws from that pot under the lock: it is one kind of the
 * arena's one transaction (commit.c), as commit and alias are; a parked handle mapped again is not charged OWNED twice. A prefix release
 * refunds OWNED for each handle it releases (after the driver's release succeeded).
 *
 * Trade-off: a prefix is whole chunks of its owner (the ranges of whole commits), so a sharer maps
 * whole handles (no sub-handle mapping, which CUDA does not allow for a different offset anyway),
 * and the owner's range must be referenced by the owner alone (no granule shared with a small
 * neighbour), so that no other allocation can ever see a read-only granule or write a shared one.
 *
 * Invariants (arena_types.h, checked by dmm_arena_check): a piece names a ring mapping its handle
 * whose chunks all point back at it, or is parked and its handle is held by nothing else;
 * owned = Σ rings + cache + quarantined handles + parked pieces (each handle once); mapped = Σ chunk
 * mappings (a prefix's bytes once per place: mapped may exceed owned).
 *
 * Thread contract: thread-safe; the arena's lock is held across each call's driver calls (never
 * across the accounting hook's charge).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mech/chunks.h"
#include "mech/commit.h"
#include "mech/prefix.h"
#include "mech/records.h"

/* ---- the prefix list ---- */

static arena_prefix *prefix_find(const dmm_arena *a, uint64_t id) {
    for (arena_prefix *p = a->prefixes; p != NULL; p = p->next)
        if (p->id == id) return p;
    return NULL;
}

static void prefix_unlink(dmm_arena *a, arena_prefix *p) {
    arena_prefix **q = &a->prefixes;
    while (*q != p) q = &(*q)->next;
    *q = p->next;
    a->nprefixes--;
    free(p->pieces);
    free(p);
}

void dmm__arena_prefixes_free(dmm_arena *a) {
    while (a->prefixes != NULL) prefix_unlink(a, a->prefixes);
}

/* The live prefix named by the value p (id and bytes must match). Sets the error naming op. */
static dmm_status prefix_lookup(dmm_arena *a, const dmm_prefix *p, const char *op, arena_prefix **out) {
    arena_prefix *pr = prefix_find(a, p->id);
    if (pr == NULL)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s: no live prefix of the %s has id %llu: it was already released, or never made "
                             "here; nothing was changed",
                             op, a->where, (unsigned long long)p->id);
    if (pr->bytes != p->bytes)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s: the handle of prefix id %llu says %llu bytes but the prefix has %llu: the handle "
                             "was altered after dmm_prefix_create; pass the value it returned; nothing was changed",
                             op, (unsigned long long)p->id, (unsigned long long)p->bytes,
                             (unsigned long long)pr->bytes);
    *out = pr;
    return DMM_OK;
}

/* ---- create ---- */

static dmm_status arena_prefix_create(void *impl, const dmm_allocation *owner, dmm_range range, dmm_prefix *out) {
    dmm_arena *a = impl;
    const char *op = "dmm_prefix_create";
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    uint64_t g0 = 0, ng = 0, bytes = range.bytes;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, owner, op, &r);
    if (s == DMM_OK) s = dmm__arena_range_granules(a, r, owner, range, "a prefix", op, &g0, &ng);
    if (s != DMM_OK) goto out;
#define REFUSE(code, ...)                                                                                      \
    do {                                                                                                       \
        dmm_error_set(code, __VA_ARGS__);                                                                      \
        s = dmm__arena_range_refused(code, op, owner, range);                                                  \
        goto out;                                                                                              \
    } while (0)
    size_t n = 0;
    for (uint64_t g = g0; g < g0 + ng; g++) {
        const arena_chunk *c = arena_chunk_at(a, g);
        unsigned long long at = (unsigned long long)(range.offset + (g - g0) * a->gran);
        if (c == NULL || !rec_bit(r, g))
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the granule at offset %llu is not committed by this allocation: commit "
                                             "and fill the prefix first", at);
        if (c->state != CHUNK_LIVE)
            REFUSE(DMM_ERR_QUARANTINED, "the granule at offset %llu is backed by a poisoned chunk", at);
        if (c->first < g0 || c->first + c->n > g0 + ng)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the chunk backing the granule at offset %llu (%llu granules) reaches "
                                             "past the range: a prefix is whole chunks (the ranges of whole commits)",
                   at, (unsigned long long)c->n);
        if (c->refs != c->n)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the chunk backing the granule at offset %llu is shared with other "
                                             "allocations: a prefix must be referenced by its owner alone", at);
        if (c->access != DMM_ACCESS_READ_WRITE)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the granule at offset %llu is a read-only mapping of another prefix: "
                                             "make the prefix from the owner's memory", at);
        if (c->piece != NULL)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the granule at offset %llu already belongs to a prefix: commit that "
                                             "prefix instead", at);
        if (c->imported || c->exported)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the granule at offset %llu is %s another process: a prefix is made of "
                                             "memory this process alone holds",
                   at, c->imported ? "imported from" : "exported to");
        if (g != c->first) continue;
        n++;
        /* one piece per handle: two places of one handle in the range (an alias of the owner) would
         * make two pieces that one ring cannot both point back at */
        uint32_t k = a->gmap[g] - 1;
        for (uint32_t j = c->twin; j != k; j = a->chunks[j].twin)
            if (a->chunks[j].first >= g0 && a->chunks[j].first < g0 + ng)
                REFUSE(DMM_ERR_INVALID_ARGUMENT, "the chunk at offset %llu and the one at offset %llu map the same "
                                                 "memory twice (an alias): a prefix holds each handle once; make it "
                                                 "of one of the two places",
                       at, (unsigned long long)(range.offset + (a->chunks[j].first - g0) * a->gran));
    }
#undef REFUSE
    arena_prefix *p = calloc(1, sizeof *p);
    arena_piece *pieces = p != NULL ? calloc(n, sizeof *pieces) : NULL;
    if (pieces == NULL) {
        free(p);
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the prefix's record; nothing was changed",
                          op);
        goto out;
    }
    p->id = ++a->next_id;
    p->bytes = bytes;
    p->n = n;
    p->pieces = pieces;
    for (uint64_t g = g0, i = 0; g < g0 + ng; i++) {
        uint32_t k = a->gmap[g] - 1;
        arena_chunk *c = &a->chunks[k];
        pieces[i] = (arena_piece){c->phys, c->n, k + 1};
        uint32_t j = k;
        do { /* every mapping of the handle (the owner's aliases too) now points at the piece */
            a->chunks[j].piece = &pieces[i];
            j = a->chunks[j].twin;
        } while (j != k);
        g += c->n;
    }
    p->next = a->prefixes;
    a->prefixes = p;
    a->nprefixes++;
    out->bytes = bytes;
    out->id = p->id;
out:
    dmm_lock_release(&a->lock);
    return s;
}

/* ---- commit and cost ---- */

/* Checks a commit of prefix pr into record r at offset (under the lock), changing nothing. */
static dmm_status commit_check(dmm_arena *a, const arena_prefix *pr, const arena_record *r, size_t offset,
                               const char *op) {
    void *at = (void *)(a->base + r->off);
    size_t end = 0;
#define REFUSE(code, ...)                                                                                      \
    do {                                                                                                       \
        dmm_error_set(code, __VA_ARGS__);                                                                      \
        return dmm__error_wrap(code, "%s of prefix id %llu (%llu bytes) into the allocation at %p at offset "  \
                                     "%zu refused, nothing was changed",                                       \
                               op, (unsigned long long)pr->id, (unsigned long long)pr->bytes, at, offset);     \
    } while (0)
    if (r->state == RECORD_QUARANTINED)
        REFUSE(DMM_ERR_QUARANTINED, "the allocation is quarantined (a decommit could not restore what it unmapped): "
                                    "release it");
    if ((a->base + r->off + offset) % a->gran)
        REFUSE(DMM_ERR_INVALID_ARGUMENT, "the offset is not on a granule (address %#llx; the granule is %llu bytes): "
                                         "pass an offset whose address is a multiple of the granule",
               (unsigned long long)(a->base + r->off + offset), (unsigned long long)a->gran);
    if (__builtin_add_overflow(offset, (size_t)pr->bytes, &end) || end > r->bytes)
        REFUSE(DMM_ERR_INVALID_ARGUMENT, "the prefix would overrun the allocation (it has %llu bytes)",
               (unsigned long long)r->bytes);
    uint64_t g0 = (r->off + offset) / a->gran, ng = pr->bytes / a->gran;
    for (uint64_t g = g0; g < g0 + ng; g++)
        if (a->gmap[g] != 0)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the target granule at offset %llu is already committed: a prefix is "
                                             "mapped only into wholly uncommitted ranges; decommit it first",
                   (unsigned long long)(offset + (g - g0) * a->gran));
#undef REFUSE
    return DMM_OK;
}

/* A prefix commit as a kind of the arena's one transaction (commit.c). */
typedef struct prefix_req {
    const dmm_prefix *p; /* the value: the prefix is looked up again at each plan */
    size_t offset;
    arena_prefix *pr; /* set by the plan */
} prefix_req;

/* The prefix and the target still fit (looked up again: the lock may have been dropped); the call
 * charges the prefix's bytes on MAPPED only (its handles exist, mapped or parked). */
static dmm_status prefix_plan(dmm_arena *a, arena_record *r, void *req, const char *op, uint64_t need[2]) {
    prefix_req *q = req;
    dmm_status s = prefix_lookup(a, q->p, op, &q->pr);
    if (s == DMM_OK) s = commit_check(a, q->pr, r, q->offset, op);
    if (s != DMM_OK) return s;
    need[DMM_AXIS_OWNED] = 0;
    need[DMM_AXIS_MAPPED] = q->pr->bytes;
    return DMM_OK;
}

/* Maps every piece read-only into r at the offset (joining its ring, or starting one from a parked
 * piece) and makes r reference those granules. */
static dmm_status prefix_apply(dmm_arena *a, arena_record *r, void *req, const char *op, arena_txn *t) {
    const prefix_req *q = req;
    arena_prefix *pr = q->pr;
    uint64_t lo = r->off + q->offset;
    size_t pieces = dmm__spans_count_overlapping(&a->free, lo, pr->bytes);
    if (!dmm__arena_room(a, pr->n, pr->n, 2 * pr->n + 4 + pieces, op)) return DMM_ERR_OUT_OF_MEMORY;
    if (!dmm__arena_txn_room(t, pr->n, 1))
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the commit's log; nothing was changed",
                             op);
    dmm_status s = DMM_OK;
    uint64_t g = lo / a->gran;
    for (size_t i = 0; i < pr->n && s == DMM_OK; i++) {
        arena_piece *pc = &pr->pieces[i];
        uint32_t slot = 0;
        bool lk = false;
        if (pc->ring != 0) s = dmm__arena_chunk_alias(a, pc->ring - 1, g, DMM_ACCESS_READ, op, &slot, &lk);
        else s = dmm__arena_chunk_adopt(a, pc, g, DMM_ACCESS_READ, op, &slot, &lk);
        t->leaked |= lk;
        if (s == DMM_OK) dmm__arena_txn_born(t, slot);
        g += pc->n;
    }
    if (s == DMM_OK) s = dmm__arena_grant(a, lo / a->gran, g, DMM_ACCESS_READ, op);
    if (s != DMM_OK)
        return dmm__error_wrap(s, "%s of prefix id %llu into the allocation at %#llx at offset %zu failed", op,
                               (unsigned long long)pr->id, (unsigned long long)(a->base + r->off), q->offset);
    for (g = lo / a->gran; g < (lo + pr->bytes) / a->gran; g++) dmm__arena_txn_ref(a, r, t, g); /* cannot fail */
    return DMM_OK;
}

static const arena_txn_kind prefix_kind = {prefix_plan, prefix_apply, "nothing was mapped"};

static dmm_status arena_prefix_commit(void *impl, const dmm_prefix *p, const dmm_allocation *t, size_t offset) {
    dmm_arena *a = impl;
    const char *op = "dmm_prefix_commit";
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    arena_prefix *pr = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : prefix_lookup(a, p, op, &pr);
    if (s == DMM_OK) s = dmm__arena_lookup(a, t, op, &r);
    prefix_req q = {p, offset, NULL};
    if (s == DMM_OK) s = dmm__arena_txn_run(a, r->off, r->id, &prefix_kind, &q, op, NULL);
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_status arena_prefix_cost(void *impl, const dmm_prefix *p, const dmm_allocation *t, size_t offset,
                                    uint64_t *newly_owned, uint64_t *newly_mapped) {
    dmm_arena *a = impl;
    const char *op = "dmm_prefix_cost";
    *newly_owned = *newly_mapped = 0;
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    arena_prefix *pr = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : prefix_lookup(a, p, op, &pr);
    if (s == DMM_OK) s = dmm__arena_lookup(a, t, op, &r);
    if (s == DMM_OK) s = commit_check(a, pr, r, offset, op);
    if (s == DMM_OK) *newly_mapped = pr->bytes; /* the handles exist (mapped or parked): nothing newly owned */
    dmm_lock_release(&a->lock);
    return s;
}

/* ---- release ---- */

enum { FATE_MAPPED = 0, FATE_CACHE = 1, FATE_RELEASED = 2, FATE_STUCK = 3 };

static dmm_release_outcome arena_prefix_release(void *impl, const dmm_prefix *p) {
    dmm_arena *a = impl;
    const char *op = "dmm_prefix_release";
    dmm_lock_acquire(&a->lock);
    arena_prefix *pr = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : prefix_lookup(a, p, op, &pr);
    size_t nparked = 0;
    for (size_t i = 0; s == DMM_OK && i < pr->n; i++) nparked += pr->pieces[i].ring == 0;
    uint8_t *fate = NULL; /* per piece: FATE_* */
    if (s == DMM_OK && (!dmm__arena_room(a, 0, nparked, 0, op) ||
                        (fate = calloc(pr->n ? pr->n : 1, sizeof *fate)) == NULL)) {
        if (dmm_last_status() != DMM_ERR_OUT_OF_MEMORY)
            dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory to plan the release; nothing was changed", op);
        s = DMM_ERR_OUT_OF_MEMORY;
    }
    if (s != DMM_OK) {
        a->st.releases_failed++;
        dmm_lock_release(&a->lock);
        return dmm__outcome_failed(p->bytes, s);
    }
    uint64_t bytes = pr->bytes;

    /* the parked handles (no mapping left): to the cache if it has room, else released; try them all */
    size_t tried = 0, failed_n = 0;
    uint64_t cache_room = a->cache_limit > a->cache.bytes ? a->cache_limit - a->cache.bytes : 0;
    dmm_error_kept first = {0}; /* try them all; report the first failure */
    for (size_t i = 0; i < pr->n; i++) {
        arena_piece *pc = &pr->pieces[i];
        uint64_t pb = pc->n * a->gran;
        if (pc->ring != 0) continue;
        if (pb <= cache_room) { /* moved there below, once it is sure the release goes ahead */
            cache_room -= pb;
            fate[i] = FATE_CACHE;
            continue;
        }
        tried++;
        s = dmm__error_keep(&first, dmm__arena_drv_release(a, pc->phys, pb));
        if (s == DMM_OK) {
            fate[i] = FATE_RELEASED;
        } else {
            fate[i] = FATE_STUCK;
            failed_n++;
        }
    }
    if (tried > 0 && failed_n == tried) {
        dmm_error_set(first.status,
                      "%s of prefix id %llu (%llu bytes): every one of its %zu handle release(s) failed (%s); nothing "
                      "was changed: the prefix is live and may be released again",
                      op, (unsigned long long)pr->id, (unsigned long long)bytes, tried, dmm__error_kept_text(&first));
        free(fate);
        a->st.releases_failed++;
        dmm_lock_release(&a->lock);
        return dmm__outcome_failed(bytes, first.status);
    }

    /* reconcile with what the driver did, piece by piece */
    uint64_t residual = 0;
    for (size_t i = 0; i < pr->n; i++) {
        arena_piece *pc = &pr->pieces[i];
        uint64_t pb = pc->n * a->gran;
        if (pc->ring != 0) { /* still mapped: the handle goes with its ring's last mapping */
            uint32_t k = pc->ring - 1, j = k;
            do {
                a->chunks[j].piece = NULL;
                j = a->chunks[j].twin;
            } while (j != k);
        } else if (fate[i] == FATE_RELEASED) {
            dmm__arena_refund(a, DMM_AXIS_OWNED, pb);
            dmm_count_sub(&a->st.handles, 1);
            dmm_count_sub(&a->st.owned_bytes, (int64_t)pb);
        } else if (fate[i] == FATE_CACHE) { /* room was made by dmm__arena_room; the bytes fit the limit */
            a->cache.v[a->cache.n++] = (arena_handle){pc->phys, pb};
            a->cache.bytes += pb;
            dmm_count_add(&a->st.cached_bytes, (int64_t)pb);
        } else {
            a->qhandles.v[a->qhandles.n++] = (arena_handle){pc->phys, pb};
            a->qhandles.bytes += pb;
            a->st.quarantined_handles++;
            a->st.quarantined_bytes += pb;
            residual += pb;
        }
    }
    prefix_unlink(a, pr);
    free(fate);
    dmm_release_outcome o;
    if (residual == 0) {
        a->st.releases_complete++;
        o = dmm__outcome_complete(bytes, 0);
    } else {
        dmm_error_set(first.status,
                      "%s of prefix id %llu (%llu bytes) is QUARANTINED: %zu of its handle release(s) failed (%s); "
                      "%llu bytes stay owned and charged, never reused; the prefix is gone",
                      op, (unsigned long long)p->id, (unsigned long long)bytes, failed_n, dmm__error_kept_text(&first),
                      (unsigned long long)residual);
        a->st.releases_quarantined++;
        dmm_release_outcome q = {DMM_RELEASE_QUARANTINED, bytes, 0, residual, first.status, 0};
        o = q;
    }
    dmm_lock_release(&a->lock);
    return o;
}

const dmm_shared_mapping_ops dmm__arena_shared_ops = {
    sizeof(dmm_shared_mapping_ops), arena_prefix_create, arena_prefix_commit, arena_prefix_cost,
    arena_prefix_release,
};
