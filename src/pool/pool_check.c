/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/pool_check.c — the expensive invariant check of one heap (types.h lists the
 * invariants). Walks every run, every bin, the quick, unmapped and pending lists and the hash;
 * O(blocks), for tests and debugging only. */
#include <stdio.h>

#include "pool/types.h"

static _Thread_local char why[256];

#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, sizeof why, __VA_ARGS__);                                                    \
        return why;                                                                                \
    } while (0)

static bool maps_its_chunks(uint8_t kind, const pool_block *b) {
    switch (kind) {
    case BK_LIVE:
    case BK_QUICK:
    case BK_PENDING:
    case BK_FREE:
    case BK_DECOMMITTING:
    case BK_ALIASED: return true;
    case BK_POISONED: return b->requested != 0; /* still mapped */
    default: return false;
    }
}

const char *dmm__heap_check_locked(const pool_heap *h) {
    const dmm_pool *p = h->pool;
    const uint64_t Q = p->chunk;
    uint64_t nfree = 0, nunmapped = 0, nlive = 0, npending = 0, naliased = 0, live_bytes = 0, chunk_bytes = 0;
    uint64_t nquick = 0, quick_bytes = 0;
    for (size_t r = 0; r < h->nruns; r++) {
        const prun *run = &h->runs[r];
        uintptr_t at = run->lo;
        const pool_block *prev = NULL;
        size_t covered = (size_t)((run->lo - p->base) / Q); /* quanta below this are covered by chunks seen */
        for (const pool_block *b = run->first; b != NULL; prev = b, b = b->next) {
            if (b->addr != at) BAD("block at %#llx follows a block ending at %#llx", (unsigned long long)b->addr,
                                   (unsigned long long)at);
            if (b->prev != prev) BAD("block at %#llx has a wrong prev link", (unsigned long long)b->addr);
            if (b->size == 0 || b->size % p->align != 0 || b->addr % p->align != 0)
                BAD("block at %#llx of %llu bytes is not aligned to %llu", (unsigned long long)b->addr,
                    (unsigned long long)b->size, (unsigned long long)p->align);
            if (prev != NULL && prev->kind == b->kind && (b->kind == BK_FREE || b->kind == BK_UNMAPPED))
                BAD("two adjacent %s blocks at %#llx were not coalesced", b->kind == BK_FREE ? "free" : "unmapped",
                    (unsigned long long)b->addr);
            switch (b->kind) {
            case BK_FREE:
                nfree++;
                if (b->bin != pool_bin_of(b->size >> p->align_shift))
                    BAD("free block at %#llx of %llu bytes sits in bin %u", (unsigned long long)b->addr,
                        (unsigned long long)b->size, b->bin);
                break;
            case BK_UNMAPPED: nunmapped++; break;
            case BK_LIVE:
                nlive++;
                live_bytes += b->size;
                if (dmm__heap_hash_find(h, b->addr) != b)
                    BAD("live block at %#llx is not in the hash", (unsigned long long)b->addr);
                if (b->bin != pool_bin_of(b->size >> p->align_shift))
                    BAD("live block at %#llx of %llu bytes names quick list %u", (unsigned long long)b->addr,
                        (unsigned long long)b->size, b->bin);
                break;
            case BK_QUICK:
                nquick++;
                quick_bytes += b->size;
                if (dmm__heap_hash_find(h, b->addr) != b)
                    BAD("quick block at %#llx is not in the hash (a second free would not be refused)",
                        (unsigned long long)b->addr);
                if (b->bin != pool_bin_of(b->size >> p->align_shift) || b->size > POOL_QUICK_MAX_BLOCK ||
                    b->seq == 0 || b->seq > h->free_seq)
                    BAD("quick block at %#llx of %llu bytes: list %u, seq %llu (free_seq %llu)",
                        (unsigned long long)b->addr, (unsigned long long)b->size, b->bin,
                        (unsigned long long)b->seq, (unsigned long long)h->free_seq);
                if (heap_free_run_bytes(b) > h->quick_reach)
                    BAD("quick block at %#llx: its free run holds %llu bytes, above quick_reach %llu (a miss "
                        "could be placed where it would not be with the parked blocks merged)",
                        (unsigned long long)b->addr, (unsigned long long)heap_free_run_bytes(b),
                        (unsigned long long)h->quick_reach);
                break;
            case BK_PENDING: npending++; break;
            case BK_ALIASED:
                naliased++;
                if ((b->addr - p->base) % Q != 0 || p->clen[(b->addr - p->base) / Q] * Q != b->size || b->seq == 0)
                    BAD("the aliased block at %#llx of %llu bytes is not exactly one chunk, or has no free to wait for",
                        (unsigned long long)b->addr, (unsigned long long)b->size);
                break;
            case BK_COMMITTING:
            case BK_DECOMMITTING:
            case BK_POISONED: break;
            default: BAD("block at %#llx has unknown kind %u", (unsigned long long)b->addr, b->kind);
            }
            size_t q0 = (size_t)((b->addr - p->base) / Q), q1 = (size_t)((b->addr + b->size - 1 - p->base) / Q);
            if (maps_its_chunks(b->kind, b)) {
                /* every quantum it touches lies in a chunk */
                for (size_t q = q0 > covered ? q0 : covered; q <= q1;) {
                    uint32_t len = p->clen[q];
                    if (len == 0)
                        BAD("the %s block at %#llx touches quantum %zu, which no chunk covers",
                            b->kind == BK_FREE ? "free" : "mapped", (unsigned long long)b->addr, q);
                    chunk_bytes += (uint64_t)len * Q;
                    covered = q + len;
                    q = covered;
                }
            } else if (b->kind == BK_UNMAPPED || b->kind == BK_COMMITTING || b->kind == BK_POISONED) {
                /* whole quanta, and no chunk inside or reaching in */
                if ((b->addr - p->base) % Q != 0 || b->size % Q != 0)
                    BAD("unmapped, committing or poisoned block at %#llx of %llu bytes is not made of whole quanta",
                        (unsigned long long)b->addr, (unsigned long long)b->size);
                if (covered > q0)
                    BAD("a chunk reaches into the unmapped block at %#llx", (unsigned long long)b->addr);
                if (b->kind != BK_COMMITTING) /* a commit in flight writes its entries before the fix-up */
                    for (size_t q = q0; q <= q1; q++)
                        if (p->clen[q] != 0) BAD("a chunk starts inside the unmapped block at %#llx", (unsigned long long)b->addr);
                covered = q1 + 1;
            }
            at = b->addr + b->size;
        }
        if (at != run->hi) BAD("the blocks of run [%#llx, %#llx) end at %#llx", (unsigned long long)run->lo,
                               (unsigned long long)run->hi, (unsigned long long)at);
    }
    /* bins */
    uint64_t inbins = 0;
    for (uint32_t c = 0; c < POOL_NBINS; c++) {
        bool bit = (h->binmap[c / 64] >> (c % 64)) & 1;
        if (bit != (h->bins[c] != NULL)) BAD("bin %u's bitmap bit disagrees with its list", c);
        const pool_block *prev = NULL;
        for (const pool_block *b = h->bins[c]; b != NULL; prev = b, b = b->lnext) {
            inbins++;
            if (b->kind != BK_FREE || b->bin != c) BAD("bin %u holds a block that is not free in that bin", c);
            if (b->lprev != prev) BAD("bin %u has a wrong back link", c);
            if (c >= POOL_EXACT_BINS && prev != NULL &&
                (prev->size > b->size || (prev->size == b->size && prev->addr > b->addr)))
                BAD("bin %u is not sorted by (size, address)", c);
        }
    }
    for (uint32_t w = 0; w < POOL_BINWORDS; w++)
        if (((h->binsum >> w) & 1) != (h->binmap[w] != 0)) BAD("bin summary word %u disagrees", w);
    if (inbins != nfree) BAD("%llu free blocks but %llu in the bins", (unsigned long long)nfree,
                             (unsigned long long)inbins);
    uint64_t inquick = 0, inquick_bytes = 0;
    for (uint32_t c = 0; c < POOL_NBINS; c++) {
        bool bit = (h->quickmap[c / 64] >> (c % 64)) & 1;
        if (bit != (h->quick[c] != NULL)) BAD("quick list %u's bitmap bit disagrees with its list", c);
        for (const pool_block *b = h->quick[c]; b != NULL; b = b->qnext) {
            inquick++;
            if (b == h->hot) BAD("the hot block at %#llx is on quick list %u too", (unsigned long long)b->addr, c);
            inquick_bytes += b->size;
            if (b->kind != BK_QUICK || b->bin != c)
                BAD("quick list %u holds a block that is not quick in that list", c);
            if (inquick > nquick) BAD("the quick lists hold more blocks than the runs (a cycle, or one twice)");
        }
    }
    if (h->hot != NULL && h->hot->kind == BK_QUICK) { /* parked, on no list */
        inquick++;
        inquick_bytes += h->hot->size;
    }
    if (inquick != nquick || inquick != h->nquick || inquick_bytes != quick_bytes ||
        inquick_bytes != h->quick_bytes)
        BAD("%llu quick blocks of %llu bytes, %llu of %llu bytes in the lists, counters %zu and %llu",
            (unsigned long long)nquick, (unsigned long long)quick_bytes, (unsigned long long)inquick,
            (unsigned long long)inquick_bytes, h->nquick, (unsigned long long)h->quick_bytes);
    if (h->quick_cap != (h->records != NULL ? 0 : POOL_QUICK_MAX_BLOCKS))
        BAD("the heap may park %zu blocks while it %s its mallocs", h->quick_cap,
            h->records != NULL ? "records" : "does not record");
    if (nquick > quick_park_cap(h))
        BAD("%llu blocks are parked in a heap that may park %zu", (unsigned long long)nquick, quick_park_cap(h));
    if (h->follow != NULL && h->records == NULL)
        BAD("%s", "the heap follows a plan but records nothing");
    if (h->quick_cap == 0 && h->hot != NULL && h->hot->kind == BK_QUICK)
        BAD("%s", "a heap that records its mallocs has a parked hot block (the hot path does not record)");
    if (h->nquick > POOL_QUICK_MAX_BLOCKS || h->quick_bytes > POOL_QUICK_MAX_BYTES)
        BAD("the quick lists hold %zu blocks of %llu bytes, above their bounds", h->nquick,
            (unsigned long long)h->quick_bytes);
    uint64_t inlist = 0;
    for (const pool_block *b = h->unmapped; b != NULL; b = b->lnext) {
        inlist++;
        if (b->kind != BK_UNMAPPED) BAD("the unmapped list holds a block of kind %u", b->kind);
    }
    if (inlist != nunmapped) BAD("%llu unmapped blocks but %llu in the list", (unsigned long long)nunmapped,
                                 (unsigned long long)inlist);
    uint64_t inpending = 0;
    for (const pool_block *b = h->pending; b != NULL; b = b->lnext) {
        inpending++;
        if (b->kind != BK_PENDING) BAD("the pending list holds a block of kind %u", b->kind);
    }
    if (inpending != npending || inpending != h->npending)
        BAD("%llu pending blocks, %llu in the list, counter %zu", (unsigned long long)npending,
            (unsigned long long)inpending, h->npending);
    uint64_t inaliased = 0;
    for (const pool_block *b = h->aliased; b != NULL; b = b->lnext) {
        inaliased++;
        if (b->kind != BK_ALIASED) BAD("the aliased list holds a block of kind %u", b->kind);
    }
    if (inaliased != naliased || inaliased != h->naliased)
        BAD("%llu aliased blocks, %llu in the list, counter %zu", (unsigned long long)naliased,
            (unsigned long long)inaliased, h->naliased);
    if (nlive + nquick != h->hcount || nlive != h->live_blocks)
        BAD("%llu live and %llu quick blocks, %zu in the hash, live counter %llu", (unsigned long long)nlive,
            (unsigned long long)nquick, h->hcount, (unsigned long long)h->live_blocks);
    if (live_bytes != dmm_atomic_load_relaxed(&h->live_bytes))
        BAD("live blocks sum to %llu bytes but the counter says %llu", (unsigned long long)live_bytes,
            (unsigned long long)dmm_atomic_load_relaxed(&h->live_bytes));
    if (chunk_bytes != h->committed)
        BAD("the chunks under the heap's blocks hold %llu bytes but the heap counts %llu committed bytes",
            (unsigned long long)chunk_bytes, (unsigned long long)h->committed);
    return NULL;
}
