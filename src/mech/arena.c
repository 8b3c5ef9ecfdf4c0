/* src/mech/arena.c — the arena mechanism (DESIGN §4.3, §4.5): one VA reservation, allocation
 * records with 64-bit generations, and commit as one transaction per call.
 *
 * Idea: an allocation is a span of the reservation (best fit from the coalescing free list of
 * spans.c). Physical backing is tracked per granule: gmap[g] names the chunk backing granule g, and
 * each allocation record has a bitmap of the granules it references. A commit backs every granule
 * its range touches that the allocation does not reference yet: granules already backed by a LIVE
 * chunk just take a reference (so 512 allocations of 4 KiB share one 2 MiB granule), maximal runs of
 * unbacked granules get new chunks as large as the chunk limit allows (so 1 GiB is one handle, not
 * 512). Everything a commit did is logged in a transaction and undone on any failure; an undo step
 * that fails is counted (rollback_leaks) and leaves the bookkeeping equal to what is mapped.
 *
 * Alignment: max(align, min_align); an allocation of at least one granule starts on a granule, so a
 * big allocation never straddles a granule it shares with a small one at its head. Its tail may share.
 *
 * Identity: ids come from a 64-bit counter, never from the address; a record is found by its offset
 * and must match ptr, bytes, align and id, so a stale copy of a released allocation's value cannot
 * touch the next allocation at the same address.
 *
 * Prefixes: the shared_mapping capability lives in prefix.c (same lock, same chunk rings).
 *
 * Aliases: dmm_arena_alias maps the handles of committed chunks a second time elsewhere in the same
 * allocation (chunks.c keeps the chunks of one handle in a ring). It is a transaction like a commit
 * (same log, same undo) that charges MAPPED only, since no handle is created.
 *
 * Accounting: a commit first plans what it will create (chunk bytes; OWNED only for those the handle
 * cache cannot serve), drops the lock, charges the hook for the whole call, and takes the lock again.
 * The hook may climb the governor's reclaim ladder, whose holders (a pool, a KV store on the same
 * device) may decommit or release through this very arena: charging under the lock would deadlock.
 * The per-chunk charges then draw from that pre-charged "pot" under the lock; the undo of a failure
 * refunds into it; what is left is refunded at the end. Having charged, the commit plans again under
 * the lock; if the arena changed while the lock was dropped (a shared granule lost its chunk, a
 * cached handle was taken) so that the new plan needs more, it tops the pot up by the difference and
 * plans again (what it holds only grows, so this ends). Refunds never call back, so they run under
 * the lock.
 *
 * Thread contract: thread-safe. One mutex per arena, held across the driver calls of one operation
 * (never across an accounting charge): the arena is the slow path (the pool above it serves the hot
 * path from mapped memory), and holding the lock makes every operation atomic with respect to the
 * others, so e.g. 8 threads releasing one allocation make exactly one driver-level release. Lock
 * order: pool → provider → arena → driver; the governor's lock is never held while calling us.
 *
 * Invariants: arena_internal.h; checked by dmm_arena_check (arena_check.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mech/arena_internal.h"
#include "mech/arena_loss.h"

#define ARENA_DEFAULT_RESERVE ((uint64_t)64 << 30)
#define ARENA_DEFAULT_CHUNK_LIMIT ((uint64_t)1 << 30)
#define ARENA_DEFAULT_MIN_ALIGN 256u

static dmm_arena *A(void *impl) { return impl; }

static const char *tier_name(dmm_tier t) {
    switch (t) {
    case DMM_TIER_DEVICE: return "device";
    case DMM_TIER_HOST: return "host";
    case DMM_TIER_DISK: return "disk";
    }
    return "unknown-tier";
}

/* ---- records ---- */

static size_t bucket_of(const dmm_arena *a, uint64_t off) {
    uint64_t h = (off / a->min_align) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (a->nbuckets - 1);
}

arena_record *dmm__arena_find(const dmm_arena *a, uint64_t off) {
    if (a->nbuckets == 0) return NULL;
    for (arena_record *r = a->buckets[bucket_of(a, off)]; r != NULL; r = r->next)
        if (r->off == off) return r;
    return NULL;
}

/* Grows the hash so that one more record fits at load ≤ 1. */
static bool records_room(dmm_arena *a) {
    if (a->nrecords + 1 <= a->nbuckets) return true;
    size_t n = a->nbuckets ? a->nbuckets * 2 : 64;
    arena_record **b = calloc(n, sizeof *b);
    if (b == NULL) return false;
    size_t old = a->nbuckets;
    arena_record **ob = a->buckets;
    a->buckets = b;
    a->nbuckets = n;
    for (size_t i = 0; i < old; i++)
        for (arena_record *r = ob[i], *next; r != NULL; r = next) {
            next = r->next;
            size_t k = bucket_of(a, r->off);
            r->next = b[k];
            b[k] = r;
        }
    free(ob);
    return true;
}

static void records_insert(dmm_arena *a, arena_record *r) {
    size_t k = bucket_of(a, r->off);
    r->next = a->buckets[k];
    a->buckets[k] = r;
    a->nrecords++;
}

void dmm__arena_forget(dmm_arena *a, arena_record *r) {
    arena_record **p = &a->buckets[bucket_of(a, r->off)];
    while (*p != r) p = &(*p)->next;
    *p = r->next;
    a->nrecords--;
    free(r->bits);
    free(r);
}

dmm_status dmm__arena_lookup(dmm_arena *a, const dmm_allocation *al, const char *op, arena_record **out) {
    if (al == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the allocation is NULL; pass the value that "
                                                       "allocate returned", op);
    uintptr_t p = (uintptr_t)al->ptr;
    arena_record *r = NULL;
    if (p >= a->base && p - a->base < a->reserve) r = dmm__arena_find(a, p - a->base);
    if (r == NULL || r->state == RECORD_RELEASING)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s: no live allocation of the %s starts at %p (id %llu): it was already "
                             "released, or never made here; nothing was changed",
                             op, a->where, al->ptr, (unsigned long long)al->id);
    if (r->id != al->id)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s: the allocation at %p has id %llu but the handle carries id %llu: it is a stale "
                             "copy of an earlier allocation at the same address and cannot touch the new one; "
                             "nothing was changed",
                             op, al->ptr, (unsigned long long)r->id, (unsigned long long)al->id);
    /* Right place and id, wrong size: an altered (forged or corrupted) handle. Like a stale one, it
     * matches no live allocation in (ptr, bytes, align, id): DMM_ERR_UNKNOWN_ALLOCATION (status.h),
     * the same code the eager mechanism gives. */
    if (r->bytes != al->bytes || r->align != al->align)
        return dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                             "%s: the handle for %p (id %llu) says %zu bytes aligned to %zu, but the allocation "
                             "has %llu bytes aligned to %llu: the handle was altered after allocate; pass the "
                             "value allocate returned, unmodified; nothing was changed",
                             op, al->ptr, (unsigned long long)al->id, al->bytes, al->align,
                             (unsigned long long)r->bytes, (unsigned long long)r->align);
    *out = r;
    return DMM_OK;
}

/* ---- spans of records ---- */

size_t dmm__arena_span_room(const dmm_arena *a, uint64_t off, uint64_t len) {
    size_t n = 2;
    uint64_t g_end = (off + len - 1) / a->gran + 1;
    for (uint64_t g = off / a->gran; g < g_end; g++) {
        arena_chunk *c = arena_chunk_at(a, g);
        if (c != NULL && c->state == CHUNK_POISONED) {
            n += 2;
            g = c->first + c->n - 1;
        }
    }
    return n;
}

static void quarantine_add(dmm_arena *a, uint64_t off, uint64_t len) {
    if (len == 0) return;
    dmm__spans_insert(&a->quarantine, off, len);
    dmm_count_add(&a->st.quarantined_span_bytes, (int64_t)len);
}

void dmm__arena_span_free(dmm_arena *a, uint64_t off, uint64_t len) {
    uint64_t end = off + len, cur = off, free_from = off;
    while (cur < end) {
        uint64_t g = cur / a->gran;
        arena_chunk *c = arena_chunk_at(a, g);
        if (c != NULL && c->state == CHUNK_POISONED) {
            uint64_t c_end = (c->first + c->n) * a->gran, q_end = c_end < end ? c_end : end;
            dmm__spans_insert(&a->free, free_from, cur - free_from);
            quarantine_add(a, cur, q_end - cur);
            cur = free_from = q_end;
        } else {
            cur = (g + 1) * a->gran;
        }
    }
    dmm__spans_insert(&a->free, free_from, end - free_from);
}

void dmm__arena_span_quarantine(dmm_arena *a, uint64_t off, uint64_t len) { quarantine_add(a, off, len); }

/* ---- commit: one transaction per public call ---- */

typedef struct ref_run {
    uint64_t g, n;
} ref_run;

typedef struct txn {
    uint32_t *born; /* chunk slots born by this call, in order */
    size_t nborn, capborn;
    ref_run *runs; /* granules of the record that this call made referenced */
    size_t nruns, capruns;
    uint64_t newly_mapped;
    size_t free_pieces; /* free spans among the granules of the ranges committed so far (poison room) */
    bool leaked;        /* an undo step could not be undone */
} txn;

static void txn_fini(txn *t) {
    free(t->born);
    free(t->runs);
}

static bool txn_room(txn *t, size_t born, size_t runs) {
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
        ref_run *r = realloc(t->runs, cap * sizeof *r);
        if (r == NULL) return false;
        t->runs = r;
        t->capruns = cap;
    }
    return true;
}

static uint64_t div_up(uint64_t x, uint64_t d) { return x / d + (x % d != 0); }

/* Commits [lo, hi) (offsets, inside r's span) as part of transaction t. On failure the transaction
 * holds what this call did so far; the caller undoes it. */
static dmm_status commit_range(dmm_arena *a, arena_record *r, uint64_t lo, uint64_t hi, txn *t, const char *op) {
    uint64_t g0 = lo / a->gran, g1 = (hi - 1) / a->gran + 1;
    /* pass 1: refuse poisoned granules; count the chunks and reference runs this range needs */
    uint64_t nnew = 0, run = 0, nruns = 0;
    bool in_ref_run = false;
    for (uint64_t g = g0; g < g1; g++) {
        if (rec_bit(r, g)) {
            nnew += div_up(run, a->limit_g);
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
        nnew += div_up(run, a->limit_g);
        run = 0;
        if (c->state != CHUNK_LIVE)
            return dmm_error_set(DMM_ERR_QUARANTINED,
                                 "%s: granule %llu (VA %#llx) of the allocation at %#llx is backed by a poisoned "
                                 "chunk (its unmap failed earlier; it is never committed again); nothing was "
                                 "changed: release this allocation and allocate a new one",
                                 op, (unsigned long long)g, (unsigned long long)(a->base + g * a->gran),
                                 (unsigned long long)(a->base + r->off));
    }
    nnew += div_up(run, a->limit_g);
    t->free_pieces += dmm__spans_count_overlapping(&a->free, g0 * a->gran, (g1 - g0) * a->gran);
    if (!dmm__arena_room(a, (size_t)nnew, (size_t)nnew, 2 * (t->nborn + (size_t)nnew) + 4 + t->free_pieces, op))
        return DMM_ERR_OUT_OF_MEMORY;
    if (!txn_room(t, (size_t)nnew, (size_t)nruns))
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the commit's log; nothing was "
                                                    "changed: free host memory and retry", op);
    /* pass 2: new chunks for the maximal runs of unbacked granules, split by the chunk limit */
    for (uint64_t g = g0; g < g1;) {
        if (a->gmap[g] != 0) {
            g++;
            continue;
        }
        uint64_t e = g;
        while (e < g1 && a->gmap[e] == 0) e++;
        while (g < e) {
            uint64_t n = e - g < a->limit_g ? e - g : a->limit_g;
            uint32_t slot;
            bool leaked = false;
            dmm_status s = dmm__arena_chunk_birth(a, g, n, op, &slot, &leaked);
            t->leaked |= leaked;
            if (s != DMM_OK) return s;
            t->born[t->nborn++] = slot;
            t->newly_mapped += n * a->gran;
            g += n;
        }
    }
    /* pass 3: references (cannot fail) */
    for (uint64_t g = g0; g < g1; g++) {
        if (rec_bit(r, g)) continue;
        arena_chunk *c = arena_chunk_at(a, g);
        rec_set(r, g);
        r->nrefs++;
        c->refs++;
        if (t->nruns > 0 && t->runs[t->nruns - 1].g + t->runs[t->nruns - 1].n == g) t->runs[t->nruns - 1].n++;
        else t->runs[t->nruns++] = (ref_run){g, 1};
    }
    return DMM_OK;
}

/* Undoes a failed transaction of record r and returns the status to report: the failure's, with its
 * sentence, or, when the failure was a commit's shortfall (BUSY: "nothing was changed: retry") and the
 * undo leaked, the undo's driver failure, since then something did change. */
static dmm_status txn_undo(dmm_arena *a, arena_record *r, txn *t, const char *op) {
    char why[1024];
    dmm_status failure = dmm_last_status(), undo_failure = DMM_ERR_QUARANTINED; /* a leak of the commit itself */
    snprintf(why, sizeof why, "%s", dmm_last_error());
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
    if (!t->leaked) return dmm_error_set(failure, "%s", why);
    a->st.rollback_leaks++;
    static const char leak[] = "a chunk whose unmap failed stays mapped and poisoned, a handle whose release failed "
                               "stays owned (see the stats' rollback_leaks, poisoned_* and quarantined_*)";
    if (failure == DMM_ERR_BUSY)
        return dmm_error_set(undo_failure, "%s stopped: the arena changed while its charge was taken, and undoing "
                                           "what it had done so far failed (%s): %s",
                             op, dmm_status_str(undo_failure), leak);
    return dmm_error_set(failure, "%s; and %s could not fully undo it: %s", why, op, leak);
}

/* What committing the ranges of r (whole: all of r) would charge, changing nothing: the bytes of
 * the chunks it would create (MAPPED) and of those the handle cache cannot serve (OWNED). */
static bool plan_need(dmm_arena *a, const arena_record *r, bool whole, const dmm_range *ranges, size_t n,
                      uint64_t need[2]) {
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
            uint64_t e = g;
            while (e < g1 && a->gmap[e] == 0 && !MARKED(e)) e++;
            while (g < e) {
                uint64_t k = e - g < a->limit_g ? e - g : a->limit_g, bytes = k * a->gran;
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

/* Gives back what the pot still holds (never used, or given back by an undo). */
static void pot_refund(dmm_arena *a, arena_pot *pot) {
    dmm__arena_hook_refund(a, DMM_AXIS_OWNED, pot->bytes[DMM_AXIS_OWNED]);
    dmm__arena_hook_refund(a, DMM_AXIS_MAPPED, pot->bytes[DMM_AXIS_MAPPED]);
    pot->bytes[DMM_AXIS_OWNED] = pot->bytes[DMM_AXIS_MAPPED] = 0;
}

/* Most plans of one commit: each one after the first follows a change another thread made while the
 * lock was dropped for the charge, and only tops the pot up by what the new plan needs beyond it. */
#define COMMIT_ATTEMPTS 16

/* Commits the ranges of the record at `off` with generation `id` (whole: all of it) as one
 * transaction. Called and returns with the lock held, but drops it while the accounting hook is
 * charged ahead for the whole call (the hook may climb the governor's reclaim ladder, whose holders
 * may call into this arena); the record is found again afterwards. If the arena changed in between
 * so that the charge falls short, the transaction is undone and planned again, keeping what was
 * charged. A shortfall whose undo leaked (a driver call of the undo failed) is not retried: it
 * reports the undo's failure, since something did change. */
static dmm_status do_commit(dmm_arena *a, uint64_t off, uint64_t id, bool whole, const dmm_range *ranges,
                            size_t n, const char *op, uint64_t *newly) {
    *newly = 0;
    arena_pot pot = {{0, 0}, false};
    for (int attempt = 0;; attempt++) {
        arena_record *r = dmm__arena_find(a, off);
        dmm_status s = DMM_OK;
        if (dmm__arena_lost(a)) s = dmm__arena_lost_error(a, op);
        else if (r == NULL || r->id != id)
            s = dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                              "%s: the allocation at %#llx (id %llu) was released by another thread during the "
                              "call; nothing was committed",
                              op, (unsigned long long)(a->base + off), (unsigned long long)id);
        else if (r->state == RECORD_QUARANTINED)
            s = dmm_error_set(DMM_ERR_QUARANTINED,
                              "%s at %#llx refused: the allocation is quarantined (a decommit could not restore "
                              "what it unmapped); nothing was changed: release it and allocate a new one",
                              op, (unsigned long long)(a->base + off));
        uint64_t need[2] = {0, 0};
        if (s == DMM_OK && !plan_need(a, r, whole, ranges, n, need))
            s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory to plan the commit; nothing was changed",
                              op);
        if (s != DMM_OK) {
            pot_refund(a, &pot);
            return s;
        }
        uint64_t more[2] = {need[0] > pot.bytes[0] ? need[0] - pot.bytes[0] : 0,
                            need[1] > pot.bytes[1] ? need[1] - pot.bytes[1] : 0};
        if (a->has_acct && (more[0] > 0 || more[1] > 0)) {
            dmm_lock_release(&a->lock);
            s = dmm__arena_hook_charge(a, DMM_AXIS_OWNED, more[DMM_AXIS_OWNED], op);
            if (s == DMM_OK) {
                s = dmm__arena_hook_charge(a, DMM_AXIS_MAPPED, more[DMM_AXIS_MAPPED], op);
                if (s != DMM_OK) dmm__arena_hook_refund(a, DMM_AXIS_OWNED, more[DMM_AXIS_OWNED]);
            }
            dmm_lock_acquire(&a->lock);
            if (s != DMM_OK) {
                pot_refund(a, &pot);
                return s;
            }
            pot.bytes[DMM_AXIS_OWNED] += more[DMM_AXIS_OWNED];
            pot.bytes[DMM_AXIS_MAPPED] += more[DMM_AXIS_MAPPED];
            continue; /* the lock was dropped: find the record and plan again, with the pot topped up */
        }
        if (a->has_acct) {
            pot.short_of = false;
            a->pot = &pot;
        }
        txn t = {0};
        if (whole) s = commit_range(a, r, off, off + r->bytes, &t, op);
        for (size_t i = 0; i < n && s == DMM_OK; i++)
            if (ranges[i].bytes > 0)
                s = commit_range(a, r, off + ranges[i].offset, off + ranges[i].offset + ranges[i].bytes, &t, op);
        if (s != DMM_OK) s = txn_undo(a, r, &t, op);
        else *newly = t.newly_mapped;
        bool retry = s == DMM_ERR_BUSY && pot.short_of && !t.leaked && attempt + 1 < COMMIT_ATTEMPTS;
        txn_fini(&t);
        a->pot = NULL;
        if (!retry) {
            pot_refund(a, &pot);
            return s;
        }
    }
}

/* ---- alias: the same handles mapped a second time ---- */

/* Checks an alias request against record r (under the lock), changing nothing; *nchunks = the chunks
 * covering src. Sets the error (a sentence naming op, the ranges and the reason) on a refusal. */
static dmm_status alias_check(dmm_arena *a, const arena_record *r, dmm_range dst, dmm_range src, const char *op,
                              size_t *nchunks) {
    void *at = (void *)(a->base + r->off);
    size_t dend = 0, send = 0;
#define REFUSE(code, ...)                                                                                      \
    do {                                                                                                       \
        char why_[512];                                                                                        \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                                              \
        return dmm_error_set(code, "%s of [%zu, +%zu) to [%zu, +%zu) in the allocation at %p refused: %s; "   \
                                   "nothing was changed",                                                      \
                             op, src.offset, src.bytes, dst.offset, dst.bytes, at, why_);                      \
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
    *nchunks = n;
    return DMM_OK;
}

/* Maps every chunk covering src again at dst and makes r reference dst, as one transaction (under
 * the lock; alias_check passed). */
static dmm_status alias_apply(dmm_arena *a, arena_record *r, dmm_range dst, dmm_range src, size_t nch,
                              const char *op) {
    size_t pieces = dmm__spans_count_overlapping(&a->free, r->off + dst.offset, dst.bytes);
    if (!dmm__arena_room(a, nch, 0, 2 * nch + 4 + pieces, op)) return DMM_ERR_OUT_OF_MEMORY;
    txn t = {0};
    if (!txn_room(&t, nch, 1)) {
        txn_fini(&t);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the alias's log; nothing was changed: "
                                                    "free host memory and retry", op);
    }
    uint64_t sg0 = (r->off + src.offset) / a->gran, dg0 = (r->off + dst.offset) / a->gran, ng = src.bytes / a->gran;
    dmm_status s = DMM_OK;
    for (uint64_t g = sg0; g < sg0 + ng && s == DMM_OK;) {
        uint32_t from = a->gmap[g] - 1, slot = 0;
        uint64_t n = a->chunks[from].n;
        bool leaked = false;
        s = dmm__arena_chunk_alias(a, from, dg0 + (g - sg0), DMM_ACCESS_READ_WRITE, op, &slot, &leaked);
        t.leaked |= leaked;
        if (s == DMM_OK) t.born[t.nborn++] = slot;
        g += n;
    }
    if (s == DMM_OK) {
        for (uint64_t g = dg0; g < dg0 + ng; g++) { /* references (cannot fail) */
            rec_set(r, g);
            r->nrefs++;
            arena_chunk_at(a, g)->refs++;
        }
    } else {
        char why[1024];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        dmm_error_set(s, "%s of [%zu, +%zu) to [%zu, +%zu) in the allocation at %#llx failed: %s", op, src.offset,
                      src.bytes, dst.offset, dst.bytes, (unsigned long long)(a->base + r->off), why);
        s = txn_undo(a, r, &t, op);
    }
    txn_fini(&t);
    return s;
}

/* The virtual-backing slot `alias` (dmm_arena_alias and dmm_mechanism_alias both land here). */
static dmm_status arena_alias(void *impl, const dmm_allocation *al, dmm_range dst, dmm_range src) {
    const char *op = "dmm_arena_alias";
    dmm_arena *a = A(impl);
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    size_t nch = 0;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s == DMM_OK) s = alias_check(a, r, dst, src, op, &nch);
    arena_pot pot = {{0, 0}, false};
    if (s == DMM_OK && a->has_acct) {
        /* charge MAPPED ahead, outside the lock (the hook may reclaim through this arena), then look
         * again: the arena may have changed meanwhile */
        uint64_t off = r->off, id = r->id;
        dmm_lock_release(&a->lock);
        s = dmm__arena_hook_charge(a, DMM_AXIS_MAPPED, src.bytes, op);
        dmm_lock_acquire(&a->lock);
        if (s == DMM_OK) {
            pot.bytes[DMM_AXIS_MAPPED] = src.bytes;
            r = dmm__arena_find(a, off);
            if (dmm__arena_lost(a)) s = dmm__arena_lost_error(a, op);
            else if (r == NULL || r->id != id)
                s = dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                                  "%s: the allocation at %#llx (id %llu) was released by another thread during the "
                                  "call; nothing was mapped",
                                  op, (unsigned long long)(a->base + off), (unsigned long long)id);
            else s = alias_check(a, r, dst, src, op, &nch);
            if (s == DMM_OK) a->pot = &pot;
        }
    }
    if (s == DMM_OK) s = alias_apply(a, r, dst, src, nch, op);
    a->pot = NULL;
    dmm__arena_hook_refund(a, DMM_AXIS_MAPPED, pot.bytes[DMM_AXIS_MAPPED]); /* what the pot still holds */
    dmm_lock_release(&a->lock);
    return s;
}

/* ---- mechanism ops ---- */

static dmm_status check_ranges(const char *op, size_t bytes, const dmm_range *ranges, size_t n) {
    if (n > 0 && ranges == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: %zu ranges announced but the range array is NULL", op, n);
    for (size_t i = 0; i < n; i++) {
        size_t end;
        if (__builtin_add_overflow(ranges[i].offset, ranges[i].bytes, &end) || end > bytes)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: range %zu [%zu, +%zu) runs past the allocation's %zu bytes; nothing was "
                                 "changed: pass ranges inside the allocation",
                                 op, i, ranges[i].offset, ranges[i].bytes, bytes);
    }
    return DMM_OK;
}

/* allocate (whole = true: commit all of it) and allocate_committed (commit `ranges`). */
static dmm_status allocate(dmm_arena *a, size_t bytes, size_t align, bool whole, const dmm_range *ranges, size_t n,
                           dmm_allocation *out) {
    const char *op = whole ? "arena allocate" : "arena allocate_committed";
    if (out == NULL || bytes == 0 || (align != 0 && !dmm_is_pow2(align)))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s of %zu bytes aligned to %zu refused: the size must be non-zero, the alignment 0 "
                             "or a power of two, and the output non-NULL; nothing was changed",
                             op, bytes, align);
    dmm_status s = check_ranges(op, bytes, ranges, n);
    if (s != DMM_OK) return s;
    uint64_t eff = align > a->min_align ? align : a->min_align, span;
    if (!dmm_align_up(bytes, a->min_align, &span) || span > a->reserve)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "%s of %zu bytes refused: the %s reserved only %llu bytes of address space; create "
                             "the arena with a larger reserve_bytes",
                             op, bytes, a->where, (unsigned long long)a->reserve);
    if (span >= a->gran && eff < a->gran) eff = a->gran;

    uint64_t maxg = (span - 1) / a->gran + 2;
    arena_record *r = calloc(1, sizeof *r);
    uint64_t *bits = r != NULL ? calloc(div_up(maxg, 64), sizeof *bits) : NULL;
    if (bits == NULL) {
        free(r);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s of %zu bytes: no host memory for the allocation record; "
                                                    "nothing was changed", op, bytes);
    }
    r->bits = bits;

    dmm_lock_acquire(&a->lock);
    uint64_t off = 0;
    if (dmm__arena_lost(a)) {
        s = dmm__arena_lost_error(a, op);
    } else if (!records_room(a) || !dmm__spans_reserve(&a->free, 1)) {
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s of %zu bytes: no host memory for the record table; nothing "
                                                 "was changed", op, bytes);
    } else if (!dmm__spans_take_best_fit(&a->free, a->base, span, eff, &off)) {
        char b1[32], b2[32];
        uint64_t largest = 0;
        for (size_t i = 0; i < a->free.n; i++)
            if (a->free.v[i].len > largest) largest = a->free.v[i].len;
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                          "%s of %zu bytes aligned to %llu: the %s has no free span that large (largest free "
                          "span %s of %s reserved); release allocations, or create the arena with a larger "
                          "reserve_bytes",
                          op, bytes, (unsigned long long)eff, a->where, dmm__fmt_bytes(largest, b1, sizeof b1),
                          dmm__fmt_bytes(a->reserve, b2, sizeof b2));
    }
    if (s != DMM_OK) {
        dmm_lock_release(&a->lock);
        free(r->bits);
        free(r);
        return s;
    }
    r->off = off;
    r->bytes = bytes;
    r->span = span;
    r->align = eff;
    r->g0 = off / a->gran;
    r->ng = (off + span - 1) / a->gran - r->g0 + 1;
    r->state = RECORD_LIVE;
    r->id = ++a->next_id;
    records_insert(a, r);
    dmm_count_add(&a->st.allocations, 1); /* counted at once: the check may run while the lock is dropped */
    dmm_count_add(&a->st.allocated_bytes, (int64_t)bytes);

    uint64_t id = r->id, newly = 0;
    s = do_commit(a, off, id, whole, ranges, n, op, &newly);
    if (s != DMM_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        r = dmm__arena_find(a, off);
        if (r != NULL && r->id == id) {
            /* commit_range reserved room for the span's pieces; this only matters if poisoning split more */
            (void)dmm__arena_room(a, 0, 0, dmm__arena_span_room(a, off, span), op);
            dmm__arena_span_free(a, off, span);
            dmm__arena_forget(a, r);
            dmm_count_sub(&a->st.allocations, 1);
            dmm_count_sub(&a->st.allocated_bytes, (int64_t)bytes);
        }
        dmm_error_set(s, "%s", why);
        dmm_lock_release(&a->lock);
        return s;
    }
    out->ptr = (void *)(a->base + off);
    out->bytes = bytes;
    out->align = (size_t)eff;
    out->id = id;
    out->device = a->device;
    dmm_lock_release(&a->lock);
    return DMM_OK;
}

static dmm_status arena_allocate_committed(void *impl, size_t bytes, size_t align, const dmm_range *ranges,
                                           size_t n, dmm_allocation *out) {
    return allocate(A(impl), bytes, align, false, ranges, n, out);
}

static dmm_status arena_allocate(void *impl, size_t bytes, size_t align, dmm_allocation *out) {
    return allocate(A(impl), bytes, align, true, NULL, 0, out);
}

static dmm_status arena_commit(void *impl, const dmm_allocation *al, dmm_range range, uint64_t *newly_mapped) {
    dmm_arena *a = A(impl);
    const char *op = "arena commit";
    uint64_t dummy;
    if (newly_mapped == NULL) newly_mapped = &dummy;
    *newly_mapped = 0;
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s == DMM_OK) s = check_ranges(op, r->bytes, &range, 1);
    if (s == DMM_OK && range.bytes > 0) s = do_commit(a, r->off, r->id, false, &range, 1, op, newly_mapped);
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_status arena_committed_bytes(void *impl, const dmm_allocation *al, uint64_t *bytes) {
    dmm_arena *a = A(impl);
    const char *op = "arena committed_bytes";
    if (bytes == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output pointer is NULL", op);
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s == DMM_OK) *bytes = r->nrefs * a->gran;
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_status arena_mapped_bytes_for_ranges(void *impl, const dmm_allocation *al, const dmm_range *ranges,
                                                size_t n, uint64_t *bytes) {
    dmm_arena *a = A(impl);
    const char *op = "arena mapped_bytes_for_ranges";
    if (bytes == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the output pointer is NULL", op);
    dmm_lock_acquire(&a->lock);
    arena_record *r = NULL;
    dmm_status s = dmm__arena_lost(a) ? dmm__arena_lost_error(a, op) : dmm__arena_lookup(a, al, op, &r);
    if (s == DMM_OK) s = check_ranges(op, r->bytes, ranges, n);
    uint64_t *seen = NULL;
    if (s == DMM_OK && (seen = calloc(div_up(r->ng, 64), sizeof *seen)) == NULL)
        s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for a scratch bitmap", op);
    if (s == DMM_OK) {
        memcpy(seen, r->bits, div_up(r->ng, 64) * sizeof *seen);
        uint64_t need = 0;
        for (size_t i = 0; i < n; i++) {
            if (ranges[i].bytes == 0) continue;
            uint64_t lo = r->off + ranges[i].offset, hi = lo + ranges[i].bytes;
            for (uint64_t g = lo / a->gran; g <= (hi - 1) / a->gran; g++) {
                uint64_t k = g - r->g0;
                if ((seen[k / 64] >> (k % 64)) & 1u) continue;
                seen[k / 64] |= (uint64_t)1 << (k % 64);
                arena_chunk *c = arena_chunk_at(a, g);
                if (c == NULL || c->state != CHUNK_LIVE) need++;
            }
        }
        *bytes = need * a->gran;
    }
    free(seen);
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_device arena_device(void *impl) { return A(impl)->device; }

static dmm_status arena_stats(void *impl, dmm_stats *out) {
    dmm_arena *a = A(impl);
    dmm_lock_acquire(&a->lock);
    dmm_stats copy = a->st;
    dmm_lock_release(&a->lock);
    copy.size = sizeof copy;
    return dmm__stats_copy_out(&copy, out);
}

static void arena_free_all(dmm_arena *a) {
    for (size_t i = 0; i < a->nbuckets; i++)
        for (arena_record *r = a->buckets[i], *next; r != NULL; r = next) {
            next = r->next;
            free(r->bits);
            free(r);
        }
    dmm__arena_prefixes_free(a);
    free(a->buckets);
    free(a->gmap);
    free(a->chunks);
    free(a->free_slots);
    free(a->cache.v);
    free(a->qhandles.v);
    dmm__spans_fini(&a->free);
    dmm__spans_fini(&a->quarantine);
    dmm_lock_destroy(&a->lock);
    free(a);
}

static dmm_status arena_destroy(void *impl) {
    dmm_arena *a = A(impl);
    const char *op = "arena destroy";
    dmm_lock_acquire(&a->lock);
    dmm_status s = DMM_OK;
    if (dmm__arena_lost(a) && !a->confirmed) {
        s = dmm_error_set(DMM_ERR_BUSY,
                          "%s refused: the %s lost its device and still owns %llu bytes it cannot give back; tear "
                          "the context down and call dmm_arena_confirm_context_terminated() first",
                          op, a->where, (unsigned long long)a->st.owned_bytes.current);
    } else if (!dmm__arena_lost(a) && a->nprefixes > 0) {
        s = dmm_error_set(DMM_ERR_BUSY,
                          "%s refused: %zu shared prefix(es) of the %s are still live; nothing was changed: release "
                          "them with dmm_prefix_release() first",
                          op, a->nprefixes, a->where);
    } else if (!dmm__arena_lost(a) && a->nrecords > 0) {
        s = dmm_error_set(DMM_ERR_BUSY,
                          "%s refused: %zu allocations (%lld bytes) of the %s are still live; nothing was changed: "
                          "release them first",
                          op, a->nrecords, (long long)a->st.allocated_bytes.current, a->where);
    } else if (!dmm__arena_lost(a)) {
        if (!dmm__arena_room(a, 0, a->cache.n + 1, 0, op)) s = DMM_ERR_OUT_OF_MEMORY;
        if (s == DMM_OK) s = dmm__arena_drain(a);
        if (s == DMM_OK) s = dmm__arena_give_back(a);
        if (s == DMM_OK && a->reserved) {
            s = dmm__drv_unreserve(a->drv, a->base, (size_t)a->reserve);
            if (s != DMM_OK) {
                a->st.driver_failures++;
                char why[1024];
                snprintf(why, sizeof why, "%s", dmm_last_error());
                dmm_error_set(s, "%s: giving back the %s's %llu bytes of address space failed (%s); the arena "
                                 "is intact: retry the destroy later",
                              op, a->where, (unsigned long long)a->reserve, why);
            } else {
                a->reserved = false;
                dmm_count_sub(&a->st.reserved_bytes, (int64_t)a->reserve);
            }
        }
    }
    dmm_lock_release(&a->lock);
    if (s != DMM_OK) return s;
    arena_free_all(a);
    return DMM_OK;
}

static dmm_status arena_alias(void *impl, const dmm_allocation *al, dmm_range dst, dmm_range src);
static dmm_status arena_reservation(void *impl, uintptr_t *va, uint64_t *bytes);
static dmm_status arena_is_quarantined(void *impl, const void *ptr, size_t bytes, bool *out);
static dmm_status arena_drain_cache(void *impl);

static const dmm_virtual_backing_ops arena_vb_ops = {
    .size = sizeof(dmm_virtual_backing_ops),
    .allocate_committed = arena_allocate_committed,
    .commit = arena_commit,
    .decommit = dmm__arena_decommit,
    .committed_bytes = arena_committed_bytes,
    .mapped_bytes_for_ranges = arena_mapped_bytes_for_ranges,
    .alias = arena_alias,
    .is_quarantined = arena_is_quarantined,
    .drain_cache = arena_drain_cache,
    .reservation = arena_reservation,
};

const dmm_mechanism_ops dmm__arena_ops = {
    sizeof(dmm_mechanism_ops),
    "arena",
    arena_allocate,
    dmm__arena_release,
    arena_device,
    arena_stats,
    arena_destroy,
    &arena_vb_ops,
    &dmm__arena_shared_ops,
    NULL,
};

/* ---- public ---- */

dmm_status dmm_arena_create(dmm_driver *driver, const dmm_arena_config *cfg, dmm_mechanism **out) {
    const char *op = "dmm_arena_create";
    if (driver == NULL || driver->ops == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the driver or the output pointer is NULL", op);
    dmm_arena_config c = {sizeof c, 0, 0, 0, 0, NULL};
    if (cfg != NULL) {
        if (cfg->size < sizeof c)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "%s: the config's size is %u bytes; set .size = sizeof(dmm_arena_config) (%zu)",
                                 op, cfg->size, sizeof c);
        memcpy(&c, cfg, sizeof c);
        if (c.accounting != NULL && (c.accounting->charge == NULL || c.accounting->refund == NULL))
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: the accounting hook needs both charge and refund (charge %s, refund %s); "
                                 "fill both, or pass no hook",
                                 op, c.accounting->charge != NULL ? "set" : "NULL",
                                 c.accounting->refund != NULL ? "set" : "NULL");
    }
    const dmm_driver_ops *o = driver->ops;
    char where[48];
    snprintf(where, sizeof where, "arena on %s %d", tier_name(driver->device.tier), (int)driver->device.index);
    if (o->granularity == NULL || o->reserve == NULL || o->unreserve == NULL || o->create == NULL ||
        o->release == NULL || o->map == NULL || o->unmap == NULL || o->set_access == NULL)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "%s: the '%s' driver of %s %d has no virtual memory management; use "
                             "dmm_eager_create() for this device",
                             op, o->name ? o->name : "?", tier_name(driver->device.tier), (int)driver->device.index);
    size_t gran = 0;
    dmm_status s = dmm__drv_granularity(driver, &gran);
    if (s != DMM_OK) return s;
    if (!dmm_is_pow2(gran))
        return dmm_error_set(DMM_ERR_DRIVER, "%s: the '%s' driver reports a granularity of %zu bytes, not a power "
                                             "of two", op, o->name, gran);
    uint64_t reserve = c.reserve_bytes ? c.reserve_bytes : ARENA_DEFAULT_RESERVE;
    if (!dmm_align_up(reserve, gran, &reserve))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: reserve_bytes %llu overflows", op,
                             (unsigned long long)c.reserve_bytes);
    uint64_t limit = c.chunk_limit_bytes;
    if (limit == 0) limit = ARENA_DEFAULT_CHUNK_LIMIT > gran ? ARENA_DEFAULT_CHUNK_LIMIT : gran;
    if (limit < gran || limit % gran != 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: chunk_limit_bytes %llu is not a positive multiple of the granularity (%zu bytes)",
                             op, (unsigned long long)limit, gran);
    uint64_t min_align = c.min_align ? c.min_align : ARENA_DEFAULT_MIN_ALIGN;
    if (!dmm_is_pow2(min_align) || min_align > gran)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: min_align %zu must be a power of two no larger than the granularity (%zu bytes)",
                             op, c.min_align, gran);
    uint64_t ngran = reserve / gran;
    if (ngran > UINT32_MAX - 2)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: reserve_bytes %llu is %llu granules of %zu bytes, more than the arena tracks "
                             "(%u); reserve less",
                             op, (unsigned long long)reserve, (unsigned long long)ngran, gran, UINT32_MAX - 2);

    dmm_arena *a = calloc(1, sizeof *a);
    uint32_t *gmap = a != NULL ? calloc(ngran, sizeof *gmap) : NULL;
    if (gmap == NULL || !dmm__spans_reserve(&a->free, 16) || !dmm__spans_reserve(&a->quarantine, 16)) {
        if (a != NULL) {
            dmm__spans_fini(&a->free);
            dmm__spans_fini(&a->quarantine);
        }
        free(gmap);
        free(a);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: no host memory for the arena's tables (%llu granules)", op,
                             (unsigned long long)ngran);
    }
    dmm_lock_init(&a->lock);
    a->drv = driver;
    a->device = driver->device;
    memcpy(a->where, where, sizeof where);
    if (c.accounting != NULL) {
        a->acct = *c.accounting;
        a->has_acct = true;
    }
    a->gran = gran;
    a->reserve = reserve;
    a->limit_g = limit / gran;
    a->cache_limit = c.cache_limit_bytes;
    a->min_align = min_align;
    a->gmap = gmap;
    a->ngran = ngran;
    a->st.size = sizeof a->st;

    uintptr_t va = 0;
    a->st.driver_reserve++;
    s = dmm__drv_reserve(driver, (size_t)reserve, 0, &va);
    if (s != DMM_OK) {
        char why[1024], b[32];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        arena_free_all(a);
        return dmm_error_set(s,
                             "%s: reserving %s (%llu bytes) of address space on %s %d failed: %s; the arena was "
                             "not created (no fall back to eager memory): pass a smaller reserve_bytes in "
                             "dmm_arena_config",
                             op, dmm__fmt_bytes(reserve, b, sizeof b), (unsigned long long)reserve,
                             tier_name(driver->device.tier), (int)driver->device.index, why);
    }
    a->base = va;
    a->reserved = true;
    dmm__spans_insert(&a->free, 0, reserve);
    dmm_count_add(&a->st.reserved_bytes, (int64_t)reserve);

    s = dmm_mechanism_create(&dmm__arena_ops, a, out);
    if (s != DMM_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        o->unreserve(driver, va, (size_t)reserve);
        arena_free_all(a);
        return dmm_error_set(s, "%s", why);
    }
    return DMM_OK;
}

static dmm_status arena_of(dmm_mechanism *m, const char *op, dmm_arena **out) {
    dmm_arena *a = dmm__mechanism_impl_if(m, &dmm__arena_ops);
    if (a == NULL)
        return dmm_error_set(m == NULL ? DMM_ERR_INVALID_ARGUMENT : DMM_ERR_WRONG_MECHANISM,
                             "%s: %s is not an arena; pass a mechanism made by dmm_arena_create()", op,
                             m == NULL ? "NULL" : dmm_mechanism_name(m));
    *out = a;
    return DMM_OK;
}

/* The arena-typed forms of the optional virtual-backing slots (dmm/arena.h); the pool reaches the
 * same code through dmm_mechanism_alias & co., which work over any mechanism that fills the slots. */
dmm_status dmm_arena_alias(dmm_mechanism *m, const dmm_allocation *al, dmm_range dst, dmm_range src) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_alias", &a);
    return s != DMM_OK ? s : arena_alias(a, al, dst, src);
}

dmm_status dmm_arena_reservation(dmm_mechanism *m, uintptr_t *va, uint64_t *bytes) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_reservation", &a);
    return s != DMM_OK ? s : arena_reservation(a, va, bytes);
}

dmm_status dmm_arena_is_quarantined(dmm_mechanism *m, const void *ptr, size_t bytes, bool *out) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_is_quarantined", &a);
    return s != DMM_OK ? s : arena_is_quarantined(a, ptr, bytes, out);
}

dmm_status dmm_arena_drain_cache(dmm_mechanism *m) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_drain_cache", &a);
    return s != DMM_OK ? s : arena_drain_cache(a);
}

dmm_status dmm_arena_check(dmm_mechanism *m) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_check", &a);
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&a->lock);
    const char *why = dmm__arena_check_locked(a);
    if (why != NULL) s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_arena_check: %s: %s", a->where, why);
    dmm_lock_release(&a->lock);
    return s;
}

static dmm_status arena_reservation(void *impl, uintptr_t *va, uint64_t *bytes) {
    dmm_arena *a = A(impl);
    if (va) *va = a->base;
    if (bytes) *bytes = a->reserve;
    return DMM_OK;
}

dmm_status dmm_arena_free_spans(dmm_mechanism *m, size_t *count) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "dmm_arena_free_spans", &a);
    if (s != DMM_OK) return s;
    if (count == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_arena_free_spans: count is NULL");
    dmm_lock_acquire(&a->lock);
    *count = a->free.n;
    dmm_lock_release(&a->lock);
    return DMM_OK;
}

static dmm_status arena_is_quarantined(void *impl, const void *ptr, size_t bytes, bool *out) {
    dmm_arena *a = A(impl);
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_arena_is_quarantined: out is NULL");
    *out = false;
    uintptr_t p = (uintptr_t)ptr;
    if (bytes == 0) return DMM_OK;
    dmm_lock_acquire(&a->lock);
    uint64_t lo = p > a->base ? p - a->base : 0, hi = p + bytes - a->base;
    if (p + bytes > a->base && a->reserved && lo < a->reserve) {
        if (hi > a->reserve) hi = a->reserve;
        *out = dmm__spans_overlaps(&a->quarantine, lo, hi - lo);
        for (uint64_t g = lo / a->gran; !*out && g <= (hi - 1) / a->gran; g++) {
            arena_chunk *c = arena_chunk_at(a, g);
            if (c != NULL && c->state == CHUNK_POISONED) *out = true;
        }
    }
    dmm_lock_release(&a->lock);
    return DMM_OK;
}

static dmm_status arena_drain_cache(void *impl) {
    dmm_arena *a = A(impl);
    dmm_status s = DMM_OK;
    dmm_lock_acquire(&a->lock);
    if (dmm__arena_lost(a)) s = dmm__arena_lost_error(a, "dmm_arena_drain_cache");
    else if (dmm__arena_room(a, 0, a->cache.n, 0, "dmm_arena_drain_cache")) s = dmm__arena_drain(a);
    else s = DMM_ERR_OUT_OF_MEMORY;
    dmm_lock_release(&a->lock);
    return s;
}

/* The pool's view of a loss (mech/arena_loss.h): a loss the pool saw through its own driver call is
 * the arena's too, since both call one driver. */
dmm_status dmm__arena_device_loss(dmm_mechanism *m, bool mark, bool *lost, bool *confirmed) {
    dmm_arena *a = NULL;
    dmm_status s = arena_of(m, "arena device-loss query", &a);
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&a->lock);
    if (mark && !dmm__arena_lost(a)) dmm__drv_latch(a->drv, "a user of the arena");
    if (lost != NULL) *lost = dmm__arena_lost(a);
    if (confirmed != NULL) *confirmed = a->confirmed;
    dmm_lock_release(&a->lock);
    return DMM_OK;
}

dmm_status dmm_arena_confirm_context_terminated(dmm_mechanism *m) {
    dmm_arena *a = NULL;
    const char *op = "dmm_arena_confirm_context_terminated";
    dmm_status s = arena_of(m, op, &a);
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&a->lock);
    if (!dmm__arena_lost(a)) {
        dmm_lock_release(&a->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: the %s has not lost its device, so there is nothing to discharge; release its "
                             "allocations and destroy it normally",
                             op, a->where);
    }
    if (!a->confirmed) {
        /* the context is gone and took every handle, mapping and the reservation with it */
        for (int axis = 0; axis < 2; axis++) {
            if (a->charged[axis] > 0 && a->has_acct)
                a->acct.refund(a->acct.user, a->device, (dmm_axis)axis, a->charged[axis]);
            a->charged[axis] = 0;
        }
        for (size_t i = 0; i < a->nbuckets; i++) {
            for (arena_record *r = a->buckets[i], *next; r != NULL; r = next) {
                next = r->next;
                free(r->bits);
                free(r);
            }
            a->buckets[i] = NULL;
        }
        a->nrecords = 0;
        dmm__arena_prefixes_free(a);
        memset(a->gmap, 0, a->ngran * sizeof *a->gmap);
        a->nslots = a->nfree = 0;
        a->live_chunks = a->poisoned_chunks = 0;
        a->cache.n = a->qhandles.n = 0;
        a->cache.bytes = a->qhandles.bytes = 0;
        a->free.n = a->quarantine.n = 0;
        a->free.total = a->quarantine.total = 0;
        a->reserved = false;
        dmm_count *zero[] = {&a->st.allocations,  &a->st.allocated_bytes, &a->st.reserved_bytes,
                             &a->st.committed_bytes, &a->st.mapped_bytes, &a->st.owned_bytes,
                             &a->st.handles,      &a->st.cached_bytes,    &a->st.quarantined_span_bytes};
        for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) zero[i]->current = 0;
        a->confirmed = true;
    }
    (void)dmm__drv_confirm_terminated(a->drv); /* the context is the driver's: its other users may go too */
    dmm_lock_release(&a->lock);
    return DMM_OK;
}
