/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/commit.c — the arena's one transaction, and the two kinds of it that live here: commit
 * (allocate, allocate_committed, commit) and alias (DESIGN §4.3, §4.5). Prefix commit (prefix.c) is
 * the third kind, run by the same runner.
 *
 * What it owns: the transaction log (arena_txn: the chunks a call bore, the reference runs it
 * added), its undo, the charge-ahead "pot" and its runner (dmm__arena_txn_run), commit's plan and
 * steps (backing every granule a range touches that the record does not reference yet: a granule
 * backed by a LIVE chunk just takes a reference, maximal runs of unbacked granules get new chunks as
 * large as the chunk limit allows), and alias's (mapping the handles of committed chunks a second
 * time elsewhere in the same allocation: chunks.c keeps the chunks of one handle in a ring).
 *
 * Accounting: a transaction first plans what it will charge (commit: the bytes of the chunks it
 * will create on MAPPED, and on OWNED those the handle cache cannot serve; alias and prefix commit:
 * MAPPED only, since no handle is created), drops the lock, charges the hook for the whole call,
 * takes the lock again, finds its record again and plans again. The hook may climb the governor's
 * reclaim ladder, whose holders (a pool, a KV store on the same device) may decommit or release
 * through this very arena: charging under the lock would deadlock. The per-chunk charges then draw
 * from that pre-charged pot under the lock (chunks.c: dmm__arena_charge); the undo of a failure
 * refunds into it; what is left is refunded at the end. If the arena changed while the lock was
 * dropped (a shared granule lost its chunk, a cached handle was taken) so that the new plan needs
 * more, the runner tops the pot up by the difference and plans again (what it holds only grows, so
 * this ends). Refunds never call back, so they run under the lock.
 *
 * Invariants: between operations no transaction is running (a->pot = NULL, no BIRTH chunk); a log
 * holds exactly the changes its call made, so its undo leaves the bookkeeping as before, or, when
 * an undo step fails (rollback_leaks), equal to what is mapped (a chunk whose unmap failed stays
 * mapped and poisoned, a handle whose release failed stays owned and quarantined).
 *
 * Calls chunks.c (births, unwinds, charges) and records.c (finding the record again). Runs under
 * the arena's lock, except the charge ahead.
 */
#include <stdio.h>
#include <stdlib.h>

#include "mech/chunks.h"
#include "mech/commit.h"
#include "mech/records.h"

/* Most plans of one transaction: each one after the first follows a change another thread made
 * while the lock was dropped for the charge, and only tops the pot up by what the new plan needs
 * beyond it. */
#define TXN_ATTEMPTS 16

static uint64_t div_up(uint64_t x, uint64_t d) { return x / d + (x % d != 0); }

/* ---- the log ---- */

static void txn_fini(arena_txn *t) {
    free(t->born);
    free(t->runs);
}

bool dmm__arena_txn_room(arena_txn *t, size_t born, size_t runs) {
    if (t->nborn + born > t->capborn) {
        size_t cap = t->capborn ? t->capborn : 8;
        while (cap < t->nborn + born) cap *= 2;
        uint32_t *b = realloc(t->born, cap * sizeof *b);
        if (b == NULL) return false;
        t->born = b;
        t->capborn = cap;
    }
    if (t->nruns + runs > t->capruns) {
        size_t cap = t->capruns ? t->capruns : 8;
        while (cap < t->nruns + runs) cap *= 2;
        arena_ref_run *r = realloc(t->runs, cap * sizeof *r);
        if (r == NULL) return false;
        t->runs = r;
        t->capruns = cap;
    }
    return true;
}

void dmm__arena_txn_ref(dmm_arena *a, arena_record *r, arena_txn *t, uint64_t g) {
    rec_set(r, g);
    r->nrefs++;
    arena_chunk_at(a, g)->refs++;
    if (t->nruns > 0 && t->runs[t->nruns - 1].g + t->runs[t->nruns - 1].n == g) t->runs[t->nruns - 1].n++;
    else t->runs[t->nruns++] = (arena_ref_run){g, 1};
}

/* ---- undo ---- */

/* Undoes a failed transaction of record r and returns the status to report: the failure's, with its
 * sentence, or, when the failure was a commit's shortfall (BUSY: "nothing was changed: retry") and the
 * undo leaked, the undo's driver failure, since then something did change. */
static dmm_status txn_undo(dmm_arena *a, arena_record *r, arena_txn *t, const char *op) {
    dmm_error_kept kept = {0}; /* the failure, while the undo's own driver calls run */
    dmm_status failure = dmm__error_keep(&kept, dmm_last_status());
    dmm_status undo_failure = DMM_ERR_QUARANTINED; /* a leak of the commit itself */
    for (size_t i = t->nruns; i-- > 0;)
        for (uint64_t g = t->runs[i].g; g < t->runs[i].g + t->runs[i].n; g++) {
            rec_clear(r, g);
            r->nrefs--;
            arena_chunk_at(a, g)->refs--;
        }
    for (size_t i = t->nborn; i-- > 0;)
        if (!dmm__arena_chunk_unwind(a, t->born[i])) {
            if (!t->leaked && dmm_last_status() != DMM_OK) undo_failure = dmm_last_status();
            t->leaked = true;
        }
    if (!t->leaked) return dmm__error_restore(&kept);
    a->st.rollback_leaks++;
    static const char leak[] = "a chunk whose unmap failed stays mapped and poisoned, a handle whose release failed "
                               "stays owned (see the stats' rollback_leaks, poisoned_* and quarantined_*)";
    if (failure == DMM_ERR_BUSY)
        return dmm_error_set(undo_failure, "%s stopped: the arena changed while its charge was taken, and undoing "
                                           "what it had done so far failed (%s): %s",
                             op, dmm_status_str(undo_failure), leak);
    return dmm_error_set(failure, "%s; and %s could not fully undo it: %s", dmm__error_kept_text(&kept), op, leak);
}

/* ---- the pot and the runner ---- */

/* Gives back what the pot still holds (never used, or given back by an undo). */
static void pot_refund(dmm_arena *a, arena_pot *pot) {
    dmm__arena_hook_refund(a, DMM_AXIS_OWNED, pot->bytes[DMM_AXIS_OWNED]);
    dmm__arena_hook_refund(a, DMM_AXIS_MAPPED, pot->bytes[DMM_AXIS_MAPPED]);
    pot->bytes[DMM_AXIS_OWNED] = pot->bytes[DMM_AXIS_MAPPED] = 0;
}

/* Charges `more` into the pot ahead, outside the lock (the lock is dropped and taken again). On a
 * refusal nothing stays charged for this step. */
static dmm_status pot_charge_ahead(dmm_arena *a, arena_pot *pot, const uint64_t more[2], const char *op) {
    dmm_lock_release(&a->lock);
    dmm_status s = dmm__arena_hook_charge(a, DMM_AXIS_OWNED, more[DMM_AXIS_OWNED], op);
    if (s == DMM_OK) {
        s = dmm__arena_hook_charge(a, DMM_AXIS_MAPPED, more[DMM_AXIS_MAPPED], op);
        if (s != DMM_OK) dmm__arena_hook_refund(a, DMM_AXIS_OWNED, more[DMM_AXIS_OWNED]);
    }
    dmm_lock_acquire(&a->lock);
    if (s != DMM_OK) return s;
    pot->bytes[DMM_AXIS_OWNED] += more[DMM_AXIS_OWNED];
    pot->bytes[DMM_AXIS_MAPPED] += more[DMM_AXIS_MAPPED];
    return DMM_OK;
}

dmm_status dmm__arena_txn_run(dmm_arena *a, uint64_t off, uint64_t id, const arena_txn_kind *kind, void *req,
                              const char *op, uint64_t *newly) {
    if (newly != NULL) *newly = 0;
    arena_pot pot = {{0, 0}, false};
    for (int attempt = 0;; attempt++) {
        arena_record *r = dmm__arena_find(a, off);
        dmm_status s = DMM_OK;
        uint64_t need[2] = {0, 0};
        if (dmm__arena_lost(a)) s = dmm__arena_lost_error(a, op);
        else if (r == NULL || r->id != id || r->state == RECORD_RELEASING)
            s = dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                              "%s: the allocation at %#llx (id %llu) was released by another thread during the "
                              "call; %s",
                              op, (unsigned long long)(a->base + off), (unsigned long long)id, kind->nothing);
        else s = kind->plan(a, r, req, op, need);
        if (s != DMM_OK) {
            pot_refund(a, &pot);
            return s;
        }
        uint64_t more[2] = {need[0] > pot.bytes[0] ? need[0] - pot.bytes[0] : 0,
                            need[1] > pot.bytes[1] ? need[1] - pot.bytes[1] : 0};
        if (a->has_acct && (more[0] > 0 || more[1] > 0)) {
            s = pot_charge_ahead(a, &pot, more, op);
            if (s != DMM_OK) {
                pot_refund(a, &pot);
                return s;
            }
            continue; /* the lock was dropped: find the record and plan again, with the pot topped up */
        }
        if (a->has_acct) {
            pot.short_of = false;
            a->pot = &pot;
        }
        arena_txn t = {0};
        s = kind->apply(a, r, req, op, &t);
        if (s != DMM_OK) s = txn_undo(a, r, &t, op);
        else if (newly != NULL) *newly = t.newly_mapped;
        bool retry = s == DMM_ERR_BUSY && pot.short_of && !t.leaked && attempt + 1 < TXN_ATTEMPTS;
        txn_fini(&t);
        a->pot = NULL;
        if (!retry) {
            pot_refund(a, &pot);
            return s;
        }
    }
}

/* ---- commit ---- */

typedef struct commit_req {
    bool whole; /* all of the record, else `ranges` */
    const dmm_range *ranges;
    size_t n;
    uint64_t piece_g; /* new chunks never cross a multiple of this many granules from their run's start */
} commit_req;

/* The granules of the new chunk at g in the unbacked run [run0, e): the run is cut into pieces of
 * piece_g granules from its start and each piece at the arena's limit, so that no chunk crosses a
 * piece (a caller that named the pieces may decommit one of them alone). */
static uint64_t chunk_at(const dmm_arena *a, uint64_t run0, uint64_t g, uint64_t e, uint64_t piece_g) {
    uint64_t piece_end = run0 + ((g - run0) / piece_g + 1) * piece_g, end = piece_end < e ? piece_end : e;
    return end - g < a->limit_g ? end - g : a->limit_g;
}

/* The new chunks of an unbacked run of n granules (chunk_at's cut). */
static uint64_t chunks_of_run(const dmm_arena *a, uint64_t n, uint64_t piece_g) {
    return n / piece_g * div_up(piece_g, a->limit_g) + div_up(n % piece_g, a->limit_g);
}

/* What committing the ranges of r (whole: all of r) would charge, changing nothing: the bytes of
 * the chunks it would create (MAPPED) and of those the handle cache cannot serve (OWNED). */
static bool plan_need(const dmm_arena *a, const arena_record *r, const commit_req *req, uint64_t need[2]) {
    bool whole = req->whole;
    const dmm_range *ranges = req->ranges;
    size_t n = req->n;
    need[DMM_AXIS_OWNED] = need[DMM_AXIS_MAPPED] = 0;
    uint64_t *mark = calloc(div_up(r->ng, 64), sizeof *mark);
    bool *claimed = calloc(a->cache.n ? a->cache.n : 1, sizeof *claimed);
    bool ok = mark != NULL && claimed != NULL;
#define MARKED(g) ((mark[((g) - r->g0) / 64] >> (((g) - r->g0) % 64)) & 1u)
    for (size_t i = 0; ok && i < (whole ? 1 : n); i++) {
        uint64_t ro = whole ? 0 : ranges[i].offset, rb = whole ? r->bytes : ranges[i].bytes;
        if (rb == 0) continue;
        uint64_t lo = r->off + ro, g1 = (lo + rb - 1) / a->gran + 1;
        for (uint64_t g = lo / a->gran; g < g1;) {
            if (a->gmap[g] != 0 || MARKED(g)) {
                g++;
                continue;
            }
            uint64_t e = g, run0 = g;
            while (e < g1 && a->gmap[e] == 0 && !MARKED(e)) e++;
            while (g < e) {
                uint64_t k = chunk_at(a, run0, g, e, req->piece_g), bytes = k * a->gran;
                size_t hit = SIZE_MAX;
                for (size_t j = 0; j < a->cache.n && hit == SIZE_MAX; j++)
                    if (!claimed[j] && a->cache.v[j].bytes == bytes) hit = j;
                if (hit != SIZE_MAX) claimed[hit] = true;
                else need[DMM_AXIS_OWNED] += bytes;
                need[DMM_AXIS_MAPPED] += bytes;
                for (uint64_t q = g; q < g + k; q++) mark[(q - r->g0) / 64] |= (uint64_t)1 << ((q - r->g0) % 64);
                g += k;
            }
        }
    }
#undef MARKED
    free(mark);
    free(claimed);
    return ok;
}

/* Commits [lo, hi) (offsets, inside r's span) as part of transaction t, in new chunks cut as chunk_at
 * says; one access grant per maximal run of new chunks. On failure the transaction holds
 * what this call did so far; the caller undoes it. */
static dmm_status commit_range(dmm_arena *a, arena_record *r, uint64_t lo, uint64_t hi, uint64_t piece_g, arena_txn *t,
                               const char *op) {
    uint64_t g0 = lo / a->gran, g1 = (hi - 1) / a->gran + 1;
    /* pass 1: refuse poisoned granules; count the chunks and reference runs this range needs */
    uint64_t nnew = 0, run = 0, nruns = 0;
    bool in_ref_run = false;
    for (uint64_t g = g0; g < g1; g++) {
        if (rec_bit(r, g)) {
            nnew += chunks_of_run(a, run, piece_g);
            run = 0;
            in_ref_run = false;
            continue;
        }
        if (!in_ref_run) nruns++;
        in_ref_run = true;
        arena_chunk *c = arena_chunk_at(a, g);
        if (c == NULL) {
            run++;
            continue;
        }
        nnew += chunks_of_run(a, run, piece_g);
        run = 0;
        if (c->state != CHUNK_LIVE)
            return dmm_error_set(DMM_ERR_QUARANTINED,
                                 "%s: granule %llu (VA %#llx) of the allocation at %#llx is backed by a poisoned "
                                 "chunk (its unmap failed earlier; it is never committed again); nothing was "
                                 "changed: release this allocation and allocate a new one",
                                 op, (unsigned long long)g, (unsigned long long)(a->base + g * a->gran),
                                 (unsigned long long)(a->base + r->off));
    }
    nnew += chunks_of_run(a, run, piece_g);
    t->free_pieces += dmm__spans_count_overlapping(&a->free, g0 * a->gran, (g1 - g0) * a->gran);
    if (!dmm__arena_room(a, (size_t)nnew, (size_t)nnew, 2 * (t->nborn + (size_t)nnew) + 4 + t->free_pieces, op))
        return DMM_ERR_OUT_OF_MEMORY;
    if (!dmm__arena_txn_room(t, (size_t)nnew, (size_t)nruns))
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the commit's log; nothing was "
                                                    "changed: free host memory and retry", op);
    /* pass 2: new chunks for the maximal runs of unbacked granules, split by the chunk limit */
    for (uint64_t g = g0; g < g1;) {
        if (a->gmap[g] != 0) {
            g++;
            continue;
        }
        uint64_t e = g, run0 = g;
        while (e < g1 && a->gmap[e] == 0) e++;
        while (g < e) {
            uint64_t n = chunk_at(a, run0, g, e, piece_g);
            uint32_t slot;
            bool leaked = false;
            dmm_status s = dmm__arena_chunk_birth(a, g, n, op, &slot, &leaked);
            t->leaked |= leaked;
            if (s != DMM_OK) return s;
            dmm__arena_txn_born(t, slot);
            t->newly_mapped += n * a->gran;
            g += n;
        }
        dmm_status s = dmm__arena_grant(a, run0, e, DMM_ACCESS_READ_WRITE, op);
        if (s != DMM_OK) return s;
    }
    /* pass 3: references (cannot fail) */
    for (uint64_t g = g0; g < g1; g++) {
        if (!rec_bit(r, g)) dmm__arena_txn_ref(a, r, t, g);
    }
    return DMM_OK;
}

static dmm_status commit_plan(dmm_arena *a, arena_record *r, void *req, const char *op, uint64_t need[2]) {
    const commit_req *q = req;
    if (r->state == RECORD_QUARANTINED)
        return dmm_error_set(DMM_ERR_QUARANTINED,
                             "%s at %#llx refused: the allocation is quarantined (a decommit could not restore "
                             "what it unmapped); nothing was changed: release it and allocate a new one",
                             op, (unsigned long long)(a->base + r->off));
    if (!plan_need(a, r, q, need))
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory to plan the commit; nothing was changed",
                             op);
    return DMM_OK;
}

static dmm_status commit_apply(dmm_arena *a, arena_record *r, void *req, const char *op, arena_txn *t) {
    const commit_req *q = req;
    uint64_t off = r->off;
    dmm_status s = DMM_OK;
    if (q->whole) s = commit_range(a, r, off, off + r->bytes, q->piece_g, t, op);
    for (size_t i = 0; i < q->n && s == DMM_OK; i++)
        if (q->ranges[i].bytes > 0)
            s = commit_range(a, r, off + q->ranges[i].offset, off + q->ranges[i].offset + q->ranges[i].bytes, q->piece_g,
                             t, op);
    return s;
}

static const arena_txn_kind commit_kind = {commit_plan, commit_apply, "nothing was committed"};

dmm_status dmm__arena_commit(dmm_arena *a, uint64_t off, uint64_t id, bool whole, const dmm_range *ranges, size_t n,
                             uint64_t piece_g, const char *op, uint64_t *newly) {
    commit_req q = {whole, ranges, n, piece_g != 0 ? piece_g : a->limit_g};
    return dmm__arena_txn_run(a, off, id, &commit_kind, &q, op, newly);
}

/* ---- alias: the same handles mapped a second time ---- */

typedef struct alias_req {
    dmm_range dst, src;
    size_t nchunks; /* the chunks covering src (set by the plan) */
} alias_req;

/* Checks an alias request against record r, changing nothing; q->nchunks = the chunks covering src,
 * need = their bytes on the MAPPED axis (no handle is created). Sets the error (a sentence naming op,
 * the ranges and the reason) on a refusal. */
static dmm_status alias_plan(dmm_arena *a, arena_record *r, void *req, const char *op, uint64_t need[2]) {
    alias_req *q = req;
    dmm_range dst = q->dst, src = q->src;
    void *at = (void *)(a->base + r->off);
    size_t dend = 0, send = 0;
#define REFUSE(code, ...)                                                                                      \
    do {                                                                                                       \
        dmm_error_set(code, __VA_ARGS__);                                                                      \
        return dmm__error_wrap(code, "%s of [%zu, +%zu) to [%zu, +%zu) in the allocation at %p refused, "      \
                                     "nothing was changed",                                                    \
                               op, src.offset, src.bytes, dst.offset, dst.bytes, at);                          \
    } while (0)
    if (r->state == RECORD_QUARANTINED)
        REFUSE(DMM_ERR_QUARANTINED, "the allocation is quarantined (a decommit could not restore what it unmapped): "
                                    "release it");
    if (src.bytes == 0 || src.bytes != dst.bytes || __builtin_add_overflow(src.offset, src.bytes, &send) ||
        __builtin_add_overflow(dst.offset, dst.bytes, &dend) || send > r->bytes || dend > r->bytes)
        REFUSE(DMM_ERR_INVALID_ARGUMENT, "the ranges must be non-empty, of the same size and inside the allocation's "
                                         "%llu bytes", (unsigned long long)r->bytes);
    uint64_t so = r->off + src.offset, dof = r->off + dst.offset, bytes = src.bytes;
    if ((a->base + so) % a->gran || (a->base + dof) % a->gran || bytes % a->gran)
        REFUSE(DMM_ERR_INVALID_ARGUMENT, "both ranges must start on a granule and be whole granules of %llu bytes",
               (unsigned long long)a->gran);
    if (so < dof + bytes && dof < so + bytes) REFUSE(DMM_ERR_INVALID_ARGUMENT, "the ranges overlap");
    uint64_t sg0 = so / a->gran, dg0 = dof / a->gran, ng = bytes / a->gran;
    size_t n = 0;
    for (uint64_t g = sg0; g < sg0 + ng; g++) {
        const arena_chunk *c = arena_chunk_at(a, g);
        if (c == NULL || !rec_bit(r, g))
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "source granule %llu (offset %llu) is not committed by this allocation: "
                                             "only committed memory can be aliased",
                   (unsigned long long)(g - sg0), (unsigned long long)(src.offset + (g - sg0) * a->gran));
        if (c->state != CHUNK_LIVE)
            REFUSE(DMM_ERR_QUARANTINED, "source granule %llu is backed by a poisoned chunk (never mapped again)",
                   (unsigned long long)(g - sg0));
        if (c->access != DMM_ACCESS_READ_WRITE)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "source granule %llu is a read-only mapping of a shared prefix: an "
                                             "alias would make it writable; alias only memory this allocation owns",
                   (unsigned long long)(g - sg0));
        if (c->first < sg0 || c->first + c->n > sg0 + ng)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the chunk backing source granule %llu (%llu granules) reaches past the "
                                             "source range: alias whole chunks (the ranges of whole commits)",
                   (unsigned long long)(g - sg0), (unsigned long long)c->n);
        if (c->refs != c->n)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "the chunk backing source granule %llu is shared with other allocations "
                                             "(%llu references in its %llu granules): alias only memory that this "
                                             "allocation alone references",
                   (unsigned long long)(g - sg0), (unsigned long long)c->refs, (unsigned long long)c->n);
        if (g == c->first) n++;
    }
    for (uint64_t g = dg0; g < dg0 + ng; g++)
        if (a->gmap[g] != 0)
            REFUSE(DMM_ERR_INVALID_ARGUMENT, "destination granule %llu (offset %llu) is already backed: the "
                                             "destination must be wholly uncommitted",
                   (unsigned long long)(g - dg0), (unsigned long long)(dst.offset + (g - dg0) * a->gran));
#undef REFUSE
    q->nchunks = n;
    need[DMM_AXIS_OWNED] = 0;
    need[DMM_AXIS_MAPPED] = src.bytes;
    return DMM_OK;
}

/* Maps every chunk covering src again at dst and makes r reference dst, as one transaction (under
 * the lock; alias_check passed). */
static dmm_status alias_apply(dmm_arena *a, arena_record *r, void *req, const char *op, arena_txn *t) {
    const alias_req *q = req;
    dmm_range dst = q->dst, src = q->src;
    size_t nch = q->nchunks;
    size_t pieces = dmm__spans_count_overlapping(&a->free, r->off + dst.offset, dst.bytes);
    if (!dmm__arena_room(a, nch, 0, 2 * nch + 4 + pieces, op)) return DMM_ERR_OUT_OF_MEMORY;
    if (!dmm__arena_txn_room(t, nch, 1))
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the alias's log; nothing was changed: "
                                                    "free host memory and retry", op);
    uint64_t sg0 = (r->off + src.offset) / a->gran, dg0 = (r->off + dst.offset) / a->gran, ng = src.bytes / a->gran;
    dmm_status s = DMM_OK;
    for (uint64_t g = sg0; g < sg0 + ng && s == DMM_OK;) {
        uint32_t from = a->gmap[g] - 1, slot = 0;
        uint64_t n = a->chunks[from].n;
        bool leaked = false;
        s = dmm__arena_chunk_alias(a, from, dg0 + (g - sg0), DMM_ACCESS_READ_WRITE, op, &slot, &leaked);
        t->leaked |= leaked;
        if (s == DMM_OK) dmm__arena_txn_born(t, slot);
        g += n;
    }
    if (s == DMM_OK) s = dmm__arena_grant(a, dg0, dg0 + ng, DMM_ACCESS_READ_WRITE, op);
    if (s != DMM_OK)
        return dmm__error_wrap(s, "%s of [%zu, +%zu) to [%zu, +%zu) in the allocation at %#llx failed", op, src.offset,
                               src.bytes, dst.offset, dst.bytes, (unsigned long long)(a->base + r->off));
    for (uint64_t g = dg0; g < dg0 + ng; g++) dmm__arena_txn_ref(a, r, t, g); /* references (cannot fail) */
    return DMM_OK;
}

static const arena_txn_kind alias_kind = {alias_plan, alias_apply, "nothing was mapped"};

dmm_status dmm__arena_alias(void *impl, const dmm_allocation *al, dmm_range dst, dmm_range src) {
    const char *op = "dmm_arena_alias";
    dmm_arena *a = impl;
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    alias_req q = {dst, src, 0};
    if (s == DMM_OK) s = dmm__arena_txn_run(a, r->off, r->id, &alias_kind, &q, op, NULL);
    dmm_lock_release(&a->lock);
    return s;
}
