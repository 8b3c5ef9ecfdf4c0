/* adapters/torch/suballoc.c — the span allocator of tag and graph segments.
 *
 * What it owns: the placement of blocks inside one segment [0, size): an address-ordered list of free
 * spans (first fit, coalesced on free) and a table of live blocks by offset.
 *
 * The idea: segments hold few, long-lived blocks (weights) or the blocks of one graph capture, so a
 * linked list is enough, and first fit keeps blocks packed at the low end, where a segment's committed
 * prefix is. The trade-off: O(free spans) per call, never on the pool's hot path.
 *
 * Invariants: free spans are sorted, disjoint, non-adjacent (coalesced) and non-empty; Σ free len +
 * live_bytes = size; count = live blocks; no live block overlaps a free span.
 */
#include <stdlib.h>
#include <string.h>

#include "adapter.h"

static size_t slot_of(uint64_t off, size_t cap) {
    uint64_t k = off * 0x9E3779B97F4A7C15ull;
    return (size_t)(k ^ (k >> 31)) & (cap - 1);
}

static bool table_fit(suballoc *sa, size_t need) {
    if (need * 2 <= sa->cap) return true;
    size_t cap = sa->cap ? sa->cap : 64;
    while (cap < need * 2) cap *= 2;
    sa_live *s = calloc(cap, sizeof *s);
    if (s == NULL) return false;
    for (size_t i = 0; i < sa->cap; i++) {
        if (!sa->slots[i].used) continue;
        size_t j = slot_of(sa->slots[i].off, cap);
        while (s[j].used) j = (j + 1) & (cap - 1);
        s[j] = sa->slots[i];
    }
    free(sa->slots);
    sa->slots = s;
    sa->cap = cap;
    return true;
}

bool dmm__sa_init(suballoc *sa, uint64_t size) {
    memset(sa, 0, sizeof *sa);
    sa->size = size;
    sa->free = malloc(sizeof *sa->free);
    if (sa->free == NULL) return false;
    sa->free->off = 0;
    sa->free->len = size;
    sa->free->next = NULL;
    return true;
}

void dmm__sa_fini(suballoc *sa) {
    sa_span *s = sa->free;
    while (s != NULL) {
        sa_span *n = s->next;
        free(s);
        s = n;
    }
    free(sa->slots);
    memset(sa, 0, sizeof *sa);
}

bool dmm__sa_alloc(suballoc *sa, uint64_t len, uint64_t req, uint64_t *off) {
    if (len == 0 || !table_fit(sa, sa->count + 1)) return false;
    sa_span **pp = &sa->free;
    while (*pp != NULL && (*pp)->len < len) pp = &(*pp)->next;
    if (*pp == NULL) return false;
    sa_span *s = *pp;
    uint64_t at = s->off;
    if (s->len == len) {
        *pp = s->next;
        free(s);
    } else {
        s->off += len;
        s->len -= len;
    }
    size_t i = slot_of(at, sa->cap);
    while (sa->slots[i].used) i = (i + 1) & (sa->cap - 1);
    sa->slots[i].off = at;
    sa->slots[i].len = len;
    sa->slots[i].req = req;
    sa->slots[i].used = true;
    sa->count++;
    sa->live_bytes += len;
    *off = at;
    return true;
}

/* Removes the live record at `off` (backward-shift deletion). */
static bool table_take(suballoc *sa, uint64_t off, sa_live *out) {
    if (sa->cap == 0) return false;
    size_t mask = sa->cap - 1, i = slot_of(off, sa->cap);
    while (sa->slots[i].used && sa->slots[i].off != off) i = (i + 1) & mask;
    if (!sa->slots[i].used) return false;
    *out = sa->slots[i];
    size_t hole = i;
    for (size_t j = (hole + 1) & mask; sa->slots[j].used; j = (j + 1) & mask) {
        size_t home = slot_of(sa->slots[j].off, sa->cap);
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            sa->slots[hole] = sa->slots[j];
            hole = j;
        }
    }
    sa->slots[hole].used = false;
    return true;
}

bool dmm__sa_free(suballoc *sa, uint64_t off, uint64_t *len, uint64_t *req) {
    /* a span record first, so that a failure changes nothing */
    sa_span *n = malloc(sizeof *n);
    if (n == NULL) return false;
    sa_live b;
    if (!table_take(sa, off, &b)) {
        free(n);
        return false;
    }
    sa->count--;
    sa->live_bytes -= b.len;
    if (len != NULL) *len = b.len;
    if (req != NULL) *req = b.req;
    sa_span *prev = NULL, *next = sa->free;
    while (next != NULL && next->off < b.off) {
        prev = next;
        next = next->next;
    }
    n->off = b.off;
    n->len = b.len;
    n->next = next;
    if (prev != NULL) prev->next = n;
    else sa->free = n;
    if (next != NULL && n->off + n->len == next->off) { /* merge with the span after */
        n->len += next->len;
        n->next = next->next;
        free(next);
    }
    if (prev != NULL && prev->off + prev->len == n->off) { /* and with the one before */
        prev->len += n->len;
        prev->next = n->next;
        free(n);
    }
    return true;
}

uint64_t dmm__sa_high(const suballoc *sa) {
    uint64_t hi = 0;
    for (size_t i = 0; i < sa->cap; i++)
        if (sa->slots[i].used && sa->slots[i].off + sa->slots[i].len > hi) hi = sa->slots[i].off + sa->slots[i].len;
    return hi;
}

void dmm__sa_each(const suballoc *sa, void (*fn)(void *u, uint64_t off, uint64_t len, uint64_t req), void *u) {
    for (size_t i = 0; i < sa->cap; i++)
        if (sa->slots[i].used) fn(u, sa->slots[i].off, sa->slots[i].len, sa->slots[i].req);
}
