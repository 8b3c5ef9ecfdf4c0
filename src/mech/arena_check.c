/* SPDX-License-Identifier: Apache-2.0 */
/* src/mech/arena_check.c — the arena's expensive invariant check (dmm_arena_check).
 *
 * It recomputes from scratch everything the arena maintains incrementally and compares: the free
 * list and quarantine are sorted and coalesced, free ∪ live ∪ quarantine tile the reservation, the
 * granule map and the chunk table agree, each chunk's refs equal the references the live records'
 * bitmaps hold, the chunks mapping one handle form one ring (a handle's mapping count = the chunks
 * that name it), no handle is both mapped and cached or quarantined, a prefix's pieces name rings
 * that map their handles or are parked (held by nothing else), owned = the distinct handles,
 * and every stat equals the sum it stands for. O(granules + chunks + records · span);
 * tests call it after every step, production code never needs to.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mech/arena_check.h"

static _Thread_local char why[512];

#define BROKEN(...)                                                                                             \
    do {                                                                                                        \
        snprintf(why, sizeof why, __VA_ARGS__);                                                                 \
        goto out;                                                                                               \
    } while (0)

static int cmp_span(const void *x, const void *y) {
    const dmm_span *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

static int cmp_phys(const void *x, const void *y) {
    dmm_phys a = *(const dmm_phys *)x, b = *(const dmm_phys *)y;
    return a < b ? -1 : a > b;
}

static uint64_t popcount_words(const uint64_t *w, size_t n) {
    uint64_t c = 0;
    for (size_t i = 0; i < n; i++) c += (uint64_t)__builtin_popcountll(w[i]);
    return c;
}

const char *dmm__arena_check_locked(dmm_arena *a) {
    const char *res = NULL;
    uint64_t *refs = NULL;
    dmm_span *tiles = NULL;
    dmm_phys *phys = NULL;
    const char *sp;

    if (a->confirmed) {
        if (a->nrecords || a->nslots || a->cache.n || a->qhandles.n || a->nprefixes || a->st.owned_bytes.current ||
            a->st.mapped_bytes.current || a->charged[0] || a->charged[1])
            BROKEN("the device loss was confirmed but the arena still holds records, chunks, handles or charges");
        return NULL;
    }
    if ((sp = dmm__spans_check(&a->free, a->reserve)) != NULL) BROKEN("free list: %s", sp);
    if ((sp = dmm__spans_check(&a->quarantine, a->reserve)) != NULL) BROKEN("quarantine: %s", sp);

    /* records: shape, bitmaps, and the references they hold per chunk */
    refs = calloc(a->nslots ? a->nslots : 1, sizeof *refs);
    size_t ntiles = a->free.n + a->quarantine.n + a->nrecords;
    tiles = malloc((ntiles ? ntiles : 1) * sizeof *tiles);
    if (refs == NULL || tiles == NULL) BROKEN("no host memory to run the check");
    size_t nt = 0, nrec = 0;
    uint64_t allocated = 0;
    for (size_t b = 0; b < a->nbuckets; b++)
        for (const arena_record *r = a->buckets[b]; r != NULL; r = r->next) {
            nrec++;
            allocated += r->bytes;
            if (r->state == RECORD_RELEASING) BROKEN("record at %#llx is RELEASING between operations",
                                                     (unsigned long long)r->off);
            if (r->bytes == 0 || r->span < r->bytes || r->span % a->min_align || r->off + r->span > a->reserve ||
                (a->base + r->off) % r->align)
                BROKEN("record at %#llx has an impossible shape (bytes %llu, span %llu, align %llu)",
                       (unsigned long long)r->off, (unsigned long long)r->bytes, (unsigned long long)r->span,
                       (unsigned long long)r->align);
            if (r->g0 != r->off / a->gran || r->g0 + r->ng != (r->off + r->span - 1) / a->gran + 1)
                BROKEN("record at %#llx has a wrong granule range", (unsigned long long)r->off);
            if (nt < ntiles) tiles[nt++] = (dmm_span){r->off, r->span};
            size_t words = (size_t)((r->ng + 63) / 64);
            if (popcount_words(r->bits, words) != r->nrefs)
                BROKEN("record at %#llx: nrefs %llu differs from its bitmap's %llu bits", (unsigned long long)r->off,
                       (unsigned long long)r->nrefs, (unsigned long long)popcount_words(r->bits, words));
            if (r->ng % 64 && (r->bits[words - 1] >> (r->ng % 64)) != 0)
                BROKEN("record at %#llx references granules past its span", (unsigned long long)r->off);
            for (uint64_t g = r->g0; g < r->g0 + r->ng; g++) {
                if (!rec_bit(r, g)) continue;
                const arena_chunk *c = arena_chunk_at(a, g);
                if (c == NULL || c->state != CHUNK_LIVE)
                    BROKEN("record at %#llx references granule %llu, which is not backed by a LIVE chunk",
                           (unsigned long long)r->off, (unsigned long long)g);
                refs[chunk_slot(a, c)]++;
            }
        }
    if (nrec != a->nrecords) BROKEN("the hash holds %zu records but counts %zu", nrec, a->nrecords);

    /* tiling: free ∪ live ∪ quarantine = [0, reserve), no overlap */
    if (a->reserved) {
        for (size_t i = 0; i < a->free.n; i++) tiles[nt++] = a->free.v[i];
        for (size_t i = 0; i < a->quarantine.n; i++) tiles[nt++] = a->quarantine.v[i];
        qsort(tiles, nt, sizeof *tiles, cmp_span);
        uint64_t at = 0;
        for (size_t i = 0; i < nt; i++) {
            if (tiles[i].off != at)
                BROKEN("the address space is not tiled at offset %#llx (next piece starts at %#llx: %s)",
                       (unsigned long long)at, (unsigned long long)tiles[i].off,
                       tiles[i].off < at ? "overlap" : "hole");
            at += tiles[i].len;
        }
        if (at != a->reserve)
            BROKEN("the pieces cover %#llx of %#llx reserved bytes", (unsigned long long)at,
                   (unsigned long long)a->reserve);
    }

    /* chunks and the granule map */
    uint64_t live = 0, pois = 0, live_b = 0, pois_b = 0, nfree = 0;
    for (uint32_t k = 0; k < a->nslots; k++) {
        const arena_chunk *c = &a->chunks[k];
        if (c->state == CHUNK_FREE) {
            nfree++;
            continue;
        }
        if (c->state != CHUNK_LIVE && c->state != CHUNK_POISONED) BROKEN("chunk %u is mid-birth between operations", k);
        if (c->access != DMM_ACCESS_READ_WRITE && c->access != DMM_ACCESS_READ)
            BROKEN("chunk %u has access %u, neither READ_WRITE nor READ", k, (unsigned)c->access);
        if (c->n == 0 || c->n > a->limit_g || c->first + c->n > a->ngran || !c->mapped)
            BROKEN("chunk %u has an impossible shape (granules %llu+%llu, mapped %d)", k,
                   (unsigned long long)c->first, (unsigned long long)c->n, c->mapped);
        for (uint64_t g = c->first; g < c->first + c->n; g++)
            if (a->gmap[g] != k + 1) BROKEN("granule %llu does not point back to its chunk %u", (unsigned long long)g, k);
        if (c->refs != refs[k])
            BROKEN("chunk %u has refs %llu but the live allocations hold %llu references in it", k,
                   (unsigned long long)c->refs, (unsigned long long)refs[k]);
        if (c->state == CHUNK_LIVE) {
            if (c->refs == 0) BROKEN("LIVE chunk %u has no references (it should have been unmapped)", k);
            live++;
            live_b += chunk_bytes(a, c);
        } else {
            pois++;
            pois_b += chunk_bytes(a, c);
            if (dmm__spans_overlaps(&a->free, c->first * a->gran, chunk_bytes(a, c)))
                BROKEN("poisoned chunk %u's address range is in the free list", k);
        }
    }
    if (nfree != a->nfree) BROKEN("%llu free chunk slots but %u on the free-slot stack", (unsigned long long)nfree, a->nfree);
    for (uint64_t g = 0; g < a->ngran; g++) {
        uint32_t v = a->gmap[g];
        if (v == 0) continue;
        if (v > a->nslots) BROKEN("granule %llu points to chunk slot %u past the table", (unsigned long long)g, v - 1);
        const arena_chunk *c = &a->chunks[v - 1];
        if (c->state == CHUNK_FREE || g < c->first || g >= c->first + c->n)
            BROKEN("granule %llu points to chunk %u, which does not cover it", (unsigned long long)g, v - 1);
    }
    /* rings: the chunks that map one handle; one handle per ring, counted once */
    uint64_t rings = 0, ring_b = 0, imported_b = 0;
    size_t nphys = 0;
    size_t npieces = 0;
    for (const arena_prefix *p = a->prefixes; p != NULL; p = p->next) npieces += p->n;
    phys = malloc(((size_t)a->nslots + a->cache.n + a->qhandles.n + a->qimported.n + npieces + 1) * sizeof *phys);
    if (phys == NULL) BROKEN("no host memory to run the check");
    for (uint32_t k = 0; k < a->nslots; k++) {
        const arena_chunk *c = &a->chunks[k];
        if (c->state == CHUNK_FREE) continue;
        if (c->twin >= a->nslots || a->chunks[c->twin].back != k)
            BROKEN("chunk %u's ring is not linked both ways (its next, slot %u, does not point back at it)", k, c->twin);
        uint32_t lowest = k, len = 0;
        for (uint32_t j = k;;) {
            if (j >= a->nslots || a->chunks[j].state == CHUNK_FREE)
                BROKEN("chunk %u's ring of mappings leads to slot %u, which is not a chunk", k, j);
            if (a->chunks[j].phys != c->phys || a->chunks[j].n != c->n)
                BROKEN("chunks %u and %u are in one ring but map different handles or sizes", k, j);
            if (a->chunks[j].piece != c->piece)
                BROKEN("chunks %u and %u are in one ring but disagree on the prefix holding their handle", k, j);
            if (a->chunks[j].imported != c->imported || a->chunks[j].exported != c->exported)
                BROKEN("chunks %u and %u are in one ring but disagree on whether its handle is imported or exported",
                       k, j);
            if (j < lowest) lowest = j;
            len++;
            if (len > a->nslots) BROKEN("chunk %u's ring of mappings does not come back to it", k);
            j = a->chunks[j].twin;
            if (j == k) break;
        }
        if (lowest != k) continue; /* the ring is counted at its lowest slot */
        if (c->imported && c->piece != NULL) BROKEN("chunk %u maps an imported handle that a prefix holds", k);
        phys[nphys++] = c->phys;
        if (c->imported) { /* another process's memory: held, never owned here */
            imported_b += chunk_bytes(a, c);
            continue;
        }
        rings++;
        ring_b += chunk_bytes(a, c);
    }
    for (size_t i = 0; i < a->cache.n; i++) phys[nphys++] = a->cache.v[i].phys;
    for (size_t i = 0; i < a->qhandles.n; i++) phys[nphys++] = a->qhandles.v[i].phys;
    for (size_t i = 0; i < a->qimported.n; i++) phys[nphys++] = a->qimported.v[i].phys;

    /* prefixes: every piece names a ring that maps its handle and points back at it, or is parked
     * (then its handle is held by nothing else); every chunk's piece belongs to a live prefix */
    uint64_t parked = 0, parked_b = 0;
    size_t nprefixes = 0;
    for (const arena_prefix *p = a->prefixes; p != NULL; p = p->next) {
        nprefixes++;
        uint64_t pb = 0;
        for (size_t i = 0; i < p->n; i++) {
            const arena_piece *pc = &p->pieces[i];
            pb += pc->n * a->gran;
            if (pc->ring == 0) {
                parked++;
                parked_b += pc->n * a->gran;
                phys[nphys++] = pc->phys;
                continue;
            }
            if (pc->ring > a->nslots || a->chunks[pc->ring - 1].state == CHUNK_FREE)
                BROKEN("prefix %llu's piece %zu names chunk slot %u, which is not a chunk", (unsigned long long)p->id,
                       i, pc->ring - 1);
            const arena_chunk *c = &a->chunks[pc->ring - 1];
            if (c->piece != pc || c->phys != pc->phys || c->n != pc->n)
                BROKEN("prefix %llu's piece %zu names chunk %u, which maps another handle or does not point back",
                       (unsigned long long)p->id, i, pc->ring - 1);
        }
        if (pb != p->bytes) BROKEN("prefix %llu's pieces sum to %llu bytes, not %llu", (unsigned long long)p->id,
                                   (unsigned long long)pb, (unsigned long long)p->bytes);
        for (const arena_prefix *q = p->next; q != NULL; q = q->next)
            if (q->id == p->id) BROKEN("two live prefixes have id %llu", (unsigned long long)p->id);
    }
    if (nprefixes != a->nprefixes) BROKEN("the prefix list holds %zu prefixes but counts %zu", nprefixes, a->nprefixes);
    for (uint32_t k = 0; k < a->nslots; k++) {
        const arena_chunk *c = &a->chunks[k];
        if (c->state == CHUNK_FREE || c->piece == NULL) continue;
        bool found = false;
        for (const arena_prefix *p = a->prefixes; p != NULL && !found; p = p->next)
            found = c->piece >= p->pieces && c->piece < p->pieces + p->n;
        if (!found) BROKEN("chunk %u points at a prefix piece that belongs to no live prefix", k);
    }
    qsort(phys, nphys, sizeof *phys, cmp_phys);
    for (size_t i = 1; i < nphys; i++)
        if (phys[i] == phys[i - 1])
            BROKEN("handle %#llx is held twice (by two rings of mappings, or mapped and also cached or quarantined)",
                   (unsigned long long)phys[i]);

    if (live != a->live_chunks || pois != a->poisoned_chunks)
        BROKEN("chunk counts %llu live / %llu poisoned differ from the table's %llu / %llu",
               (unsigned long long)a->live_chunks, (unsigned long long)a->poisoned_chunks, (unsigned long long)live,
               (unsigned long long)pois);

    /* handles */
    uint64_t cb = 0, qb = 0;
    for (size_t i = 0; i < a->cache.n; i++) cb += a->cache.v[i].bytes;
    for (size_t i = 0; i < a->qhandles.n; i++) qb += a->qhandles.v[i].bytes;
    if (cb != a->cache.bytes || qb != a->qhandles.bytes) BROKEN("the handle lists' byte totals are wrong");
    if (cb > a->cache_limit) BROKEN("the cache holds %llu bytes, over its limit %llu", (unsigned long long)cb,
                                    (unsigned long long)a->cache_limit);

    /* stats = the sums they stand for */
#define EQ(stat, value)                                                                                         \
    if ((uint64_t)(stat) != (uint64_t)(value))                                                                  \
    BROKEN("stat %s is %llu but the tables say %llu", #stat, (unsigned long long)(stat), (unsigned long long)(value))
    const dmm_stats *st = &a->st;
    EQ(st->allocations.current, a->nrecords);
    EQ(st->allocated_bytes.current, allocated);
    EQ(st->reserved_bytes.current, a->reserved ? a->reserve : 0);
    EQ(st->committed_bytes.current, live_b);
    EQ(st->mapped_bytes.current, live_b + pois_b);
    EQ(st->owned_bytes.current, ring_b + cb + qb + parked_b);
    EQ(st->handles.current, rings + a->cache.n + a->qhandles.n + parked);
    EQ(st->cached_bytes.current, cb);
    EQ(st->quarantined_span_bytes.current, a->quarantine.total);
    EQ(st->poisoned_chunks, pois + a->poison_cleared);
    EQ(st->poisoned_bytes, pois_b + a->poison_cleared_bytes);
    EQ(st->imported_bytes.current, imported_b + a->qimported.bytes);
    EQ(st->quarantined_handles, a->qhandles.n + a->qimported.n + a->qhandles_cleared);
    EQ(st->quarantined_bytes, qb + a->qimported.bytes + a->qhandles_cleared_bytes);
    if (!dmm__arena_lost(a)) {
        EQ(a->charged[DMM_AXIS_OWNED], st->owned_bytes.current);
        EQ(a->charged[DMM_AXIS_MAPPED], st->mapped_bytes.current);
    }
#undef EQ
    res = NULL;
    goto done;
out:
    res = why;
done:
    free(refs);
    free(tiles);
    free(phys);
    return res;
}
