/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/heap.c — one heap's bookkeeping: block records, bins, the live-block hash, the quick
 * lists, and the splitting, carving and merging of blocks. No driver call and no lock here: every
 * function runs under the heap's lock (pool.c takes it). The hot path's lookups and the quick lists'
 * push and pop are inline (the hash's in types.h, the quick lists' in hot.h), over the tables kept
 * here.
 *
 * Idea: the hot path is a bin lookup and a hash insert (malloc) or a hash remove and a coalesce
 * (free); an exact repeat (a malloc of the size just freed on the stream) is less: the free parks the
 * block on its quick list, still in the hash, and the malloc takes it back (deferred coalescing, as
 * dlmalloc's fastbins); the merge happens once, when something needs the free layout. Bins are
 * TLSF-like: exact classes for small sizes (LIFO: a block freed a moment ago is the next one handed
 * out, still warm), then 16 classes per power of two kept sorted by (size,
 * address) so that the head of the first non-empty class above a request is its best fit, and the
 * lowest address among equals (address-ordered best fit keeps memory packed towards the start of a
 * run, which is what lets whole chunks at the end fall free and move). Two bitmap levels find the
 * next non-empty class in two `ctz`.
 *
 * Trade-off: sorted insertion in range classes costs a walk of the class; classes are narrow (1/16
 * of an octave) so walks are short, and exact classes (the hot, small sizes) never walk.
 *
 * Invariants: bit c of binmap ⇔ bins[c] != NULL; bit w of binsum ⇔ binmap[w] != 0; a range class
 * is sorted by (size, addr); hcount = #LIVE + #QUICK blocks = Σ chain lengths; bit c of quickmap ⇔
 * quick[c] != NULL; nquick and quick_bytes count and sum the quick lists and the hot block (when
 * QUICK; hot.h parks and pops it).
 */
#include <stdlib.h>
#include <string.h>

#include "pool/types.h"

#define SLAB_BLOCKS 255u

/* The heap's own tables (record slabs, the hash) take whole line pairs (core.h, DMM_SHARING_BYTES):
 * another heap's table, or anything else glibc puts next to them (its arenas are shared by threads,
 * and reused by the next thread once one exits), shares none of their lines, so that threads on
 * distinct streams never write next to each other. Sizes here are multiples of the alignment. */
static void *table_alloc(size_t bytes, bool zeroed) {
    void *t = aligned_alloc(DMM_SHARING_BYTES, bytes);
    if (t != NULL && zeroed) memset(t, 0, bytes);
    return t;
}
_Static_assert(sizeof(pool_block) * (SLAB_BLOCKS + 1) % DMM_SHARING_BYTES == 0, "a slab is whole line pairs");

bool dmm__heap_init(pool_heap *h, struct dmm_pool *p, dmm_stream stream) {
    memset(h, 0, sizeof *h);
    h->pool = p;
    h->align_shift = p->align_shift;
    h->stream = stream;
    h->quick_cap = POOL_QUICK_MAX_BLOCKS;
    h->next_look = UINT64_MAX; /* nothing records (follow.c's init sets both otherwise) */
    size_t nb = 1024;
    h->hash = table_alloc(nb * sizeof *h->hash, true); /* 8 KiB: whole line pairs */
    if (h->hash == NULL) return false;
    h->hmask = nb - 1;
    dmm_biased_lock_init(&h->lock);
    return true;
}

void dmm__heap_fini(pool_heap *h) {
    pslab *s = h->slabs;
    while (s != NULL) {
        pslab *n = s->next;
        free(s);
        s = n;
    }
    free(h->hash);
    free(h->runs);
    free(h->scratch);
    dmm_biased_lock_destroy(&h->lock);
}

pool_block *dmm__heap_block_at(const pool_heap *h, uintptr_t at) {
    for (size_t r = 0; r < h->nruns; r++) {
        if (at < h->runs[r].lo || at >= h->runs[r].hi) continue;
        for (pool_block *b = h->runs[r].first; b != NULL; b = b->next)
            if (at < b->addr + b->size) return b;
    }
    return NULL;
}

/* ---- block records ---- */
static bool refill(pool_heap *h) {
    /* one allocation: the slab header, then SLAB_BLOCKS records */
    pslab *s = table_alloc(sizeof(pool_block) * (SLAB_BLOCKS + 1), false);
    if (s == NULL) return false;
    s->next = h->slabs;
    h->slabs = s;
    pool_block *v = (pool_block *)(void *)s + 1;
    for (size_t i = 0; i < SLAB_BLOCKS; i++) {
        v[i].lnext = h->spare;
        h->spare = &v[i];
    }
    return true;
}

bool dmm__heap_reserve_blocks(pool_heap *h, size_t n) {
    size_t have = 0;
    for (pool_block *b = h->spare; b != NULL && have < n; b = b->lnext) have++;
    while (have < n) {
        if (!refill(h)) return false;
        have += SLAB_BLOCKS;
    }
    return true;
}

pool_block *dmm__heap_block_new(pool_heap *h) {
    if (h->spare == NULL && !refill(h)) return NULL;
    pool_block *b = h->spare;
    h->spare = b->lnext;
    memset(b, 0, sizeof *b);
    return b;
}

void dmm__heap_block_put(pool_heap *h, pool_block *b) {
    b->kind = 0;
    b->lnext = h->spare;
    h->spare = b;
}

/* ---- bins ---- */
static inline void bit_set(pool_heap *h, uint32_t c) {
    h->binmap[c / 64] |= (uint64_t)1 << (c % 64);
    h->binsum |= (uint64_t)1 << (c / 64);
}
static inline void bit_clear(pool_heap *h, uint32_t c) {
    h->binmap[c / 64] &= ~((uint64_t)1 << (c % 64));
    if (h->binmap[c / 64] == 0) h->binsum &= ~((uint64_t)1 << (c / 64));
}

void dmm__heap_bin_insert(pool_heap *h, pool_block *b) {
    uint32_t c = pool_bin_of(b->size >> h->pool->align_shift);
    b->bin = (uint16_t)c;
    b->kind = BK_FREE;
    pool_block **head = &h->bins[c];
    if (c >= POOL_EXACT_BINS) {
        /* sorted by (size, addr): walk to the first block that must follow b */
        pool_block *prev = NULL, *x = *head;
        while (x != NULL && (x->size < b->size || (x->size == b->size && x->addr < b->addr))) {
            prev = x;
            x = x->lnext;
        }
        b->lprev = prev;
        b->lnext = x;
        if (x != NULL) x->lprev = b;
        if (prev != NULL) prev->lnext = b;
        else *head = b;
    } else {
        b->lprev = NULL;
        b->lnext = *head;
        if (*head != NULL) (*head)->lprev = b;
        *head = b;
    }
    bit_set(h, c);
}

void dmm__heap_bin_remove(pool_heap *h, pool_block *b) {
    uint32_t c = b->bin;
    if (b->lprev != NULL) b->lprev->lnext = b->lnext;
    else h->bins[c] = b->lnext;
    if (b->lnext != NULL) b->lnext->lprev = b->lprev;
    b->lnext = b->lprev = NULL;
    if (h->bins[c] == NULL) bit_clear(h, c);
}

static uint32_t next_nonempty(const pool_heap *h, uint32_t c) {
    if (c >= POOL_NBINS) return POOL_NBINS;
    uint32_t w = c / 64;
    uint64_t m = h->binmap[w] & (~(uint64_t)0 << (c % 64));
    if (m != 0) return w * 64 + (uint32_t)__builtin_ctzll(m);
    if (w + 1 >= POOL_BINWORDS) return POOL_NBINS;
    uint64_t s = h->binsum & (~(uint64_t)0 << (w + 1));
    if (s == 0) return POOL_NBINS;
    w = (uint32_t)__builtin_ctzll(s);
    return w * 64 + (uint32_t)__builtin_ctzll(h->binmap[w]);
}

pool_block *dmm__heap_bin_find(const pool_heap *h, uint64_t bytes) {
    uint32_t c = pool_bin_of(bytes >> h->pool->align_shift);
    if (c < POOL_EXACT_BINS) {
        if (h->bins[c] != NULL) return h->bins[c];
    } else {
        for (pool_block *x = h->bins[c]; x != NULL; x = x->lnext)
            if (x->size >= bytes) return x;
    }
    c = next_nonempty(h, c + 1);
    return c < POOL_NBINS ? h->bins[c] : NULL;
}

/* ---- plain lists (unmapped, pending) ---- */
void dmm__heap_list_push(pool_block **head, pool_block *b) {
    b->lprev = NULL;
    b->lnext = *head;
    if (*head != NULL) (*head)->lprev = b;
    *head = b;
}

void dmm__heap_list_remove(pool_block **head, pool_block *b) {
    if (b->lprev != NULL) b->lprev->lnext = b->lnext;
    else *head = b->lnext;
    if (b->lnext != NULL) b->lnext->lprev = b->lprev;
    b->lnext = b->lprev = NULL;
}

/* ---- the live-block hash (its lookups: types.h) ---- */

static bool hash_grow(pool_heap *h) {
    size_t nb = (h->hmask + 1) * 4;
    if (nb > SIZE_MAX / sizeof(pool_block *)) return false;
    pool_block **t = table_alloc(nb * sizeof *t, true);
    if (t == NULL) return false;
    pool_block **old = h->hash;
    size_t oldn = h->hmask + 1;
    h->hash = t;
    h->hmask = nb - 1;
    for (size_t i = 0; i < oldn; i++) {
        pool_block *b = old[i];
        while (b != NULL) {
            pool_block *n = b->lnext;
            size_t k = heap_hash_of(h, b->addr);
            b->lnext = t[k];
            t[k] = b;
            b = n;
        }
    }
    free(old);
    return true;
}

bool dmm__heap_hash_insert(pool_heap *h, pool_block *b) {
    if (h->hcount >= h->hmask + 1 && !hash_grow(h) && h->hcount >= 4 * (h->hmask + 1)) return false;
    size_t k = heap_hash_of(h, b->addr);
    b->lnext = h->hash[k];
    b->lprev = NULL;
    h->hash[k] = b;
    h->hcount++;
    return true;
}

pool_block *dmm__heap_hash_remove(pool_heap *h, uintptr_t addr) {
    pool_block **pp = &h->hash[heap_hash_of(h, addr)];
    for (pool_block *b = *pp; b != NULL; pp = &b->lnext, b = b->lnext)
        if (b->addr == addr) {
            *pp = b->lnext;
            b->lnext = NULL;
            h->hcount--;
            return b;
        }
    return NULL;
}

/* ---- splitting, carving, merging ---- */
pool_block *dmm__heap_split(pool_heap *h, pool_block *b, uint64_t at) {
    pool_block *r = dmm__heap_block_new(h);
    if (r == NULL) return NULL; /* callers reserve first, so this does not happen */
    r->addr = b->addr + at;
    r->size = b->size - at;
    r->kind = b->kind;
    r->seq = b->seq;
    r->prev = b;
    r->next = b->next;
    if (b->next != NULL) b->next->prev = r;
    b->next = r;
    b->size = at;
    return r;
}

/* Absorbs b->next into b (both out of every list). */
static void absorb_next(pool_heap *h, pool_block *b) {
    pool_block *n = b->next;
    b->size += n->size;
    if (n->seq > b->seq) b->seq = n->seq;
    b->next = n->next;
    if (n->next != NULL) n->next->prev = b;
    dmm__heap_block_put(h, n);
}

pool_block *dmm__heap_make_free(pool_heap *h, pool_block *b) {
    b->kind = BK_FREE;
    if (b->prev != NULL && b->prev->kind == BK_FREE) {
        pool_block *p = b->prev;
        dmm__heap_bin_remove(h, p);
        absorb_next(h, p);
        b = p;
    }
    if (b->next != NULL && b->next->kind == BK_FREE) {
        dmm__heap_bin_remove(h, b->next);
        absorb_next(h, b);
    }
    dmm__heap_bin_insert(h, b);
    bool quick_near = (b->prev != NULL && b->prev->kind == BK_QUICK) ||
                      (b->next != NULL && b->next->kind == BK_QUICK);
    if (h->nquick > 0 && quick_near) heap_note_reach(h, b); /* a merge of the QUICK neighbour reaches further */
    return b;
}

pool_block *dmm__heap_make_unmapped(pool_heap *h, pool_block *b) {
    b->kind = BK_UNMAPPED;
    b->seq = 0;
    if (b->prev != NULL && b->prev->kind == BK_UNMAPPED) {
        pool_block *p = b->prev;
        dmm__heap_list_remove(&h->unmapped, p);
        absorb_next(h, p);
        b = p;
    }
    if (b->next != NULL && b->next->kind == BK_UNMAPPED) {
        dmm__heap_list_remove(&h->unmapped, b->next);
        absorb_next(h, b);
    }
    dmm__heap_list_push(&h->unmapped, b);
    return b;
}

static void relist(pool_heap *h, pool_block *b) {
    if (b->kind == BK_FREE) dmm__heap_bin_insert(h, b);
    else dmm__heap_list_push(&h->unmapped, b);
}

pool_block *dmm__heap_carve(pool_heap *h, pool_block *b, uintptr_t addr, uint64_t len, uint8_t kind) {
    if (b->kind == BK_FREE) dmm__heap_bin_remove(h, b);
    else dmm__heap_list_remove(&h->unmapped, b);
    pool_block *mid = b;
    if (addr > b->addr) {
        mid = dmm__heap_split(h, b, addr - b->addr);
        relist(h, b);
    }
    if (mid->size > len) {
        pool_block *after = dmm__heap_split(h, mid, len);
        relist(h, after);
    }
    mid->kind = kind;
    return mid;
}

/* ---- quick lists (push and pop: hot.h) ---- */
void dmm__heap_quick_flush(pool_heap *h) {
    /* the hot block first goes to its list's head, where it stands in the order: the merges below
     * then insert into the bins in the order they did before there was a hot block */
    pool_block *hot = h->hot;
    if (hot != NULL && hot->kind == BK_QUICK) {
        hot->qnext = h->quick[hot->bin];
        h->quick[hot->bin] = hot;
        h->quickmap[hot->bin / 64] |= (uint64_t)1 << (hot->bin % 64);
    }
    h->hot = NULL;
    for (uint32_t w = 0; w < POOL_BINWORDS && h->nquick > 0; w++) {
        while (h->quickmap[w] != 0) {
            uint32_t c = w * 64 + (uint32_t)__builtin_ctzll(h->quickmap[w]);
            pool_block *b = h->quick[c];
            h->quick[c] = NULL;
            h->quickmap[w] &= h->quickmap[w] - 1;
            while (b != NULL) {
                pool_block *n = b->qnext;
                b->qnext = NULL;
                (void)dmm__heap_hash_remove(h, b->addr);
                h->nquick--;
                h->quick_bytes -= b->size;
                dmm__heap_make_free(h, b); /* seq kept: the fence that covers its free gates it as before */
                b = n;
            }
        }
    }
    h->quick_reach = 0;
    h->reach_known = NULL;
}
