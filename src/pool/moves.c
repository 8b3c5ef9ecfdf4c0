/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/moves.c — chunks, one at a time, and the sources of moves (DESIGN §4.9).
 *
 * What it owns: the pool's mechanism calls on chunks — commit one chunk (or a growth's new handles in
 * one call, where the mechanism has commit_pieces: cut at the pool's handle size, access granted once),
 * decommit one, alias one (map its physical memory a second time) — with the pool's counts that follow
 * each (clen at every handle's first quantum, committed, aliased_bytes, the chunk counters); the
 * choice of which whole free chunks leave a heap (sources: oldest frees first, then the biggest,
 * then the highest address, so that memory stays packed low and the fewest calls move the most); and
 * the fix-up that puts a source back into its heap as what
 * its outcome made it (UNMAPPED, FREE, POISONED, ALIASED). A growth of another heap leaves each heap
 * its newest free chunk (the one its stream reuses next): a stream in use is never left to grow back
 * what was just taken from it, so physical memory may pass the retention limit by up to one chunk
 * per heap — the sub-chunk slack of a stream's partly used memory, which no move can avoid.
 * Carving merges the heap's parked (QUICK) blocks first, so that trim, empty_cache and moves see all
 * of its free memory. A commit or alias first asks layout.c about a warm layout's handles ahead in its
 * span (a fresh commit takes those wholly inside; the rest go back before it maps). Reaping: the old
 * place of an aliased chunk is decommitted once a completed fence covers its last free.
 *
 * The idea. A chunk is taken out of its heap (DECOMMITTING) under the heap's lock, then the call runs
 * with no pool lock held, then the fix-up takes the lock again: other threads on the stream keep
 * allocating from what is mapped meanwhile.
 *
 * Invariants: a DECOMMITTING block is exactly one chunk and is touched only by the thread that carved
 * it; it came from a FREE block with seq ≤ safe_seq of its heap (SRC_MOVE), from a FREE block of the
 * growing heap whose fence is pending (SRC_ALIAS: aliased only, never decommitted here), or from an
 * ALIASED old place with seq ≤ safe_seq (SRC_OLD). p.committed changes by a chunk's bytes exactly when
 * clen at its first quantum is set (commit, alias) or cleared (decommit that unmapped it all).
 * Once the driver is lost no call is made: decommit reports FAILED, commit and alias refuse.
 */
#include <stdlib.h>
#include <string.h>

#include "pool/types.h"

static int by_age(const void *a, const void *b) {
    const pcand *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1; /* oldest free first */
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1; /* then the biggest: fewer calls */
    return x->addr > y->addr ? -1 : x->addr < y->addr; /* then the highest: memory stays packed low */
}

/* Whether the plan h follows places something in [at, at + bytes) (whole chunks). */
static bool plan_uses(const pool_heap *h, const dmm_pool *p, uintptr_t at, uint64_t bytes) {
    const pfollow *f = h->follow;
    if (f == NULL || at + bytes <= f->base || at >= f->base + f->extent) return false;
    for (uint64_t off = at - f->base; off < at + bytes - f->base; off += p->chunk) {
        size_t q = (size_t)(off / p->chunk);
        if (q < f->used_chunks && (f->used[q / 64] >> (q % 64) & 1)) return true;
    }
    return false;
}

/* Carves whole free chunks that are safe to decommit out of h's FREE blocks (under h's lock), oldest
 * frees first, until `want` bytes are carved, skipping chunks that overlap [ex_lo, ex_hi). With
 * target pieces (growth), a chunk is taken only if it fits in the room left in one of them, and is
 * assigned to it. `alias_ok` (a growth of h itself): chunks whose fence is still pending are taken
 * too, to be aliased (stream order makes their reuse by h's stream safe at once); the oldest frees,
 * those behind a completed fence, still come first and move. `keep_newest` (a growth of another
 * heap): h keeps its newest candidate (the last in that order), the chunk its own stream reuses
 * next. `keep_plan` (a heap that follows a plan): chunks its plan places something in are skipped (the
 * caller carves again without it when that was not enough). Returns the bytes carved. */
uint64_t dmm__pool_carve_sources(dmm_pool *p, pool_heap *h, uint64_t want, uintptr_t ex_lo, uintptr_t ex_hi, ptarget *tg,
                              size_t nt, bool alias_ok, bool keep_newest, bool keep_plan, srcvec *out) {
    if (want == 0) return 0;
    dmm__heap_quick_flush(h); /* parked blocks are free memory too, once merged */
    const uint64_t Q = p->chunk;
    size_t nc = 0;
    for (uint32_t c = 0; c < POOL_NBINS; c++) {
        if ((h->binmap[c / 64] >> (c % 64) & 1) == 0) continue;
        for (pool_block *b = h->bins[c]; b != NULL; b = b->lnext) {
            if (b->seq > h->safe_seq && !alias_ok) continue;
            size_t q = qidx(p, align_up_c(p, b->addr)), qend = qidx(p, align_down_c(p, b->addr + b->size));
            while (q < qend) {
                uint32_t len = p->clen[q];
                if (len == 0) { /* inside a chunk that began before this block */
                    q++;
                    continue;
                }
                if (q + len > qend) break; /* runs past the block's end */
                uintptr_t at = p->base + q * Q;
                if ((at < ex_hi && at + (uint64_t)len * Q > ex_lo) || (keep_plan && plan_uses(h, p, at, (uint64_t)len * Q))) {
                    q += len; /* in the range kept, or the plan's */
                    continue;
                }
                if (nc == h->capscratch) {
                    size_t ncap = h->capscratch ? h->capscratch * 2 : 64;
                    pcand *ns = realloc(h->scratch, ncap * sizeof *ns);
                    if (ns == NULL) break;
                    h->scratch = ns;
                    h->capscratch = ncap;
                }
                h->scratch[nc++] = (pcand){b, at, (uint64_t)len * Q, b->seq, b->seq > h->safe_seq};
                q += len;
            }
        }
    }
    if (nc <= (size_t)keep_newest) return 0;
    qsort(h->scratch, nc, sizeof *h->scratch, by_age);
    if (keep_newest) nc--; /* the last: the newest free, the smallest, the lowest (where its stream allocates) */
    if (out->n + nc > out->cap) {
        size_t ncap = out->n + nc;
        source *nv = realloc(out->v, ncap * sizeof *nv);
        if (nv == NULL) return 0;
        out->v = nv;
        out->cap = ncap;
    }
    if (!dmm__heap_reserve_blocks(h, 2 * nc + 2)) return 0;
    uint64_t got = 0;
    for (size_t i = 0; i < nc && got < want; i++) {
        const pcand *c = &h->scratch[i];
        size_t piece = SIZE_MAX;
        if (tg != NULL) {
            for (size_t j = 0; j < nt && piece == SIZE_MAX; j++)
                if (tg[j].room >= c->bytes) piece = j;
            if (piece == SIZE_MAX) continue;
        }
        /* earlier carves split the block: the piece holding this chunk follows the original record */
        pool_block *b = c->b;
        while (b != NULL && b->addr + b->size <= c->addr) b = b->next;
        if (b == NULL || b->kind != BK_FREE || b->addr > c->addr || b->addr + b->size < c->addr + c->bytes) continue;
        pool_block *mid = dmm__heap_carve(h, b, c->addr, c->bytes, BK_DECOMMITTING);
        if (tg != NULL) tg[piece].room -= c->bytes;
        source *s = &out->v[out->n++];
        memset(s, 0, sizeof *s);
        s->h = h;
        s->b = mid;
        s->bytes = c->bytes;
        s->piece = piece;
        s->seq = c->seq;
        s->role = c->alias ? SRC_ALIAS : SRC_MOVE;
        got += c->bytes;
    }
    return got;
}

/* Decommits one source chunk (no heap lock held). Once the device is lost: FAILED with
 * DMM_ERR_DEVICE_LOST, without a call. */
void dmm__pool_decommit_one(dmm_pool *p, source *s) {
    dmm_range r = {(size_t)(s->b->addr - p->base), (size_t)s->bytes};
    s->tried = true;
    if (dmm__pool_lost(p, "decommitting a free chunk")) {
        s->o = (dmm_release_outcome){DMM_RELEASE_FAILED, s->bytes, 0, 0,
                                     dmm__pool_lost_error(p, "pool: decommitting a free chunk"), 0};
        return;
    }
    s->o = dmm__pool_map_decommit(p, r);
    if (s->o.failure == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "decommitting a free chunk");
    if (dmm__pool_source_gone(s) || (dmm_release_state_of(&s->o) == DMM_RELEASE_QUARANTINED && s->o.unmapped_bytes == s->bytes)) {
        p->clen[qidx(p, s->b->addr)] = 0;
        dmm_atomic_sub_relaxed(&p->committed, s->bytes);
        if (dmm__pool_source_gone(s)) dmm_atomic_add_relaxed(&p->chunks_decommitted, 1);
    }
}

/* Puts a decommitted, aliased (or untouched) source back into its heap (under that heap's lock). */
static void source_fixup(dmm_pool *p, source *s) {
    pool_heap *h = s->h;
    pool_block *b = s->b;
    if (s->role == SRC_ALIAS) {
        if (s->aliased) { /* the old place: mapped until a completed fence covers its last free */
            b->kind = BK_ALIASED;
            dmm__heap_list_push(&h->aliased, b);
            h->naliased++;
        } else {
            dmm__heap_make_free(h, b); /* not aliased: still mapped, still free */
        }
        return;
    }
    dmm_release_state state = dmm_release_state_of(&s->o);
    if (dmm__pool_source_gone(s)) {
        h->committed -= s->bytes;
        dmm__heap_make_unmapped(h, b);
    } else if (state == DMM_RELEASE_QUARANTINED) {
        /* something changed and something failed: never use this chunk again */
        b->kind = BK_POISONED;
        b->requested = s->o.unmapped_bytes < s->bytes; /* still mapped? */
        if (!b->requested) h->committed -= s->bytes;
        dmm_atomic_add_relaxed(&p->chunks_poisoned, 1);
    } else if (s->role == SRC_OLD) {
        b->kind = BK_ALIASED; /* FAILED: still mapped, still the old place; the next poll tries again */
        dmm__heap_list_push(&h->aliased, b);
        h->naliased++;
        return;
    } else {
        dmm__heap_make_free(h, b); /* FAILED (or nothing to unmap): still mapped, still free */
    }
    if (s->role == SRC_OLD) dmm_atomic_sub_relaxed(&p->aliased_bytes, s->bytes);
}

void dmm__pool_sources_fixup(dmm_pool *p, srcvec *sv, size_t from) {
    pool_heap *locked = NULL;
    for (size_t i = from; i < sv->n; i++) {
        if (sv->v[i].h != locked) {
            if (locked != NULL) heap_unlock(locked);
            locked = sv->v[i].h;
            heap_lock(locked);
        }
        source_fixup(p, &sv->v[i]);
    }
    if (locked != NULL) heap_unlock(locked);
}

/* Decommits the old places of aliased chunks whose last free a completed fence covers: the memory
 * lives on where it was aliased to, and nothing queued on the stream can use the old place any more.
 * The VA comes back UNMAPPED; a decommit that failed leaves the block ALIASED, tried again next poll. */
void dmm__pool_reap_aliased(dmm_pool *p, pool_heap *h) {
    if (dmm__pool_lost(p, "reaping the old places of aliased chunks")) return;
    pool_block *list = NULL;
    heap_lock(h);
    for (pool_block *b = h->aliased, *n; b != NULL; b = n) {
        n = b->lnext;
        if (b->seq > h->safe_seq) continue;
        dmm__heap_list_remove(&h->aliased, b);
        h->naliased--;
        b->kind = BK_DECOMMITTING;
        b->lnext = list;
        list = b;
    }
    heap_unlock(h);
    while (list != NULL) {
        pool_block *b = list;
        list = b->lnext;
        b->lnext = NULL;
        source s;
        memset(&s, 0, sizeof s);
        s.h = h;
        s.b = b;
        s.bytes = b->size;
        s.seq = b->seq;
        s.role = SRC_OLD;
        dmm__pool_decommit_one(p, &s); /* once lost: FAILED without a call, so the old place stays ALIASED */
        dmm_clear_error(); /* a failure is retried at the next poll; nobody asked for this call */
        heap_lock(h);
        source_fixup(p, &s);
        heap_unlock(h);
    }
}

/* New handles for quanta [q, q + len), of at most pq quanta each, in one call to the mechanism (no
 * lock held). */
static dmm_status commit_handles(dmm_pool *p, size_t q, size_t len, size_t pq) {
    uint64_t newly = 0;
    dmm_range r = {(size_t)((uint64_t)q * p->chunk), (size_t)((uint64_t)len * p->chunk)};
    dmm_status s = dmm__pool_map_commit(p, r, (uint64_t)pq * p->chunk, &newly);
    if (s == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "committing a chunk");
    return s;
}

/* The pool's record of a handle of quanta [q, q + len) that a commit made or took. */
static void note_handle(dmm_pool *p, size_t q, size_t len, bool fresh) {
    p->clen[q] = (uint32_t)len;
    dmm_atomic_add_relaxed(&p->chunks_committed, 1);
    if (fresh) dmm__pool_layout_record(p, p->base + (uint64_t)q * p->chunk, (uint64_t)len * p->chunk);
}

/* Commits `bytes` at `addr` (no heap lock held): handles of at most `piece` bytes, or, where a warm
 * layout's handles lie ahead wholly inside it (fresh only, layout.c), those handles as they are and
 * new ones for each gap between them. All or nothing: a failure puts what it took or made ahead
 * (layout.c), so the span stays unmapped in the pool's eyes. fresh: new memory, which the layout
 * records; not fresh: a moved chunk (the mechanism's cache hands the moved handle back). */
dmm_status dmm__pool_commit_one(dmm_pool *p, uintptr_t addr, uint64_t bytes, bool fresh, uint64_t piece,
                                commit_failure *failed) {
    commit_failure ignored;
    if (failed == NULL) failed = &ignored;
    *failed = (commit_failure){addr, bytes, bytes};
    if (dmm__pool_lost(p, "committing a chunk")) return dmm__pool_lost_error(p, "pool: committing a chunk");
    size_t q0 = qidx(p, addr), q1 = q0 + (size_t)(bytes / p->chunk), nt = 0, n = 0;
    size_t pq = piece < bytes && p->can_commit_pieces ? (size_t)(piece / p->chunk) : q1 - q0;
    if (pq == 0) pq = 1;
    layout_piece *taken = NULL, *all = NULL;
    dmm_status s = dmm__pool_layout_take(p, addr, bytes, fresh, &taken, &nt);
    if (s != DMM_OK) return s;
    if (nt == 0) {
        s = commit_handles(p, q0, q1 - q0, pq);
        if (s != DMM_OK) {
            failed->handle = (uint64_t)pq * p->chunk;
            return s;
        }
        for (size_t q = q0; q < q1; q += pq) note_handle(p, q, q1 - q < pq ? q1 - q : pq, fresh);
        committed_add(p, bytes);
        return DMM_OK;
    }
    size_t cap = 2 * nt + 1 + (q1 - q0) / pq; /* the taken handles, and the gaps' new ones */
    all = malloc(cap * sizeof *all);
    if (all == NULL) {
        dmm__pool_layout_put_back(p, taken, nt);
        free(taken);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool: out of host memory to commit a chunk");
    }
    size_t q = q0;
    for (size_t i = 0; i <= nt && s == DMM_OK; i++) {
        size_t next = i < nt ? taken[i].q : q1;
        while (q < next && s == DMM_OK) { /* the gap before the next ahead handle: new ones, one call each */
            size_t len = next - q < pq ? next - q : pq;
            s = commit_handles(p, q, len, len);
            if (s == DMM_OK) all[n++] = (layout_piece){q, (uint32_t)len, false};
            else *failed = (commit_failure){p->base + (uint64_t)q * p->chunk, (uint64_t)len * p->chunk,
                                            (uint64_t)len * p->chunk};
            q += len;
        }
        if (s == DMM_OK && i < nt) {
            all[n++] = taken[i];
            q = taken[i].q + taken[i].len;
        }
    }
    if (s != DMM_OK) { /* what it holds goes ahead: the taken handles not reached yet too */
        size_t reached = 0;
        for (size_t i = 0; i < n; i++) reached += all[i].taken;
        dmm__pool_layout_put_back(p, all, n);
        dmm__pool_layout_put_back(p, taken + reached, nt - reached);
        free(all);
        free(taken);
        return s;
    }
    free(taken);
    for (size_t i = 0; i < n; i++) note_handle(p, all[i].q, all[i].len, fresh);
    committed_add(p, bytes);
    dmm_atomic_add_relaxed(&p->layout.adopted, nt); /* counted once the commit holds: a failed one put them back */
    free(all);
    return DMM_OK;
}

/* Maps the physical memory of alias source s a second time at `at` (no heap lock held): usable at
 * once by the heap's stream, whose queued work is all that may still use the old place. A failure
 * changes nothing (the caller commits new memory instead). */
dmm_status dmm__pool_alias_one(dmm_pool *p, source *s, uintptr_t at) {
    dmm_range dst = {(size_t)(at - p->base), (size_t)s->bytes}, src = {(size_t)(s->b->addr - p->base), (size_t)s->bytes};
    if (dmm__pool_lost(p, "aliasing a chunk")) return DMM_ERR_DEVICE_LOST; /* the commit that follows says why */
    layout_piece *none = NULL;
    size_t nnone = 0;
    dmm_status st = dmm__pool_layout_take(p, at, s->bytes, false, &none, &nnone); /* a warm layout's handles there go back */
    if (st != DMM_OK) {
        dmm_clear_error();
        return st;
    }
    st = dmm__pool_map_alias(p, dst, src);
    if (st == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "aliasing a chunk");
    if (st != DMM_OK) {
        dmm_clear_error();
        return st;
    }
    s->aliased = true;
    p->clen[qidx(p, at)] = (uint32_t)(s->bytes / p->chunk);
    committed_add(p, s->bytes);
    dmm_atomic_add_relaxed(&p->aliased_bytes, s->bytes);
    dmm_atomic_add_relaxed(&p->chunks_committed, 1);
    dmm_atomic_add_relaxed(&p->chunks_aliased, 1);
    return DMM_OK;
}
