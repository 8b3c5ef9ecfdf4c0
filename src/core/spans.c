/* SPDX-License-Identifier: Apache-2.0 */
/* src/core/spans.c — the span set (core/spans.h): the arena's free list and quarantine, and more.
 *
 * Idea: a sorted array of disjoint, non-touching byte ranges. Lookups are binary searches; an insert
 * coalesces with both neighbours, so the free list of an empty arena is exactly one span and the
 * count of spans is a direct measure of fragmentation. Allocation is best fit (smallest span that
 * holds the aligned request; lowest address among equals), which keeps large spans whole, or first
 * fit (the lowest span that holds it), which packs blocks at the low end of the range.
 *
 * Trade-off: best fit scans the whole array (O(n)) and inserts move the tail (O(n)). The arena is
 * the slow path under a pool that caches blocks, so n stays small (tens to hundreds of spans); a
 * size-ordered tree would buy nothing measurable and cost a second structure to keep in sync.
 *
 * Invariants: v[i].len > 0; v[i].off + v[i].len < v[i+1].off; total = Σ v[i].len.
 */
#include "core/spans.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sorted.h"

void dmm__spans_init(dmm_spans *s) { memset(s, 0, sizeof *s); }

void dmm__spans_fini(dmm_spans *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}

bool dmm__spans_reserve(dmm_spans *s, size_t extra) {
    if (extra > SIZE_MAX / 2 - s->n) return false;
    if (s->n + extra <= s->cap) return true;
    size_t cap = s->cap ? s->cap * 2 : 16;
    while (cap < s->n + extra) cap *= 2;
    dmm_span *v = realloc(s->v, cap * sizeof *v);
    if (v == NULL) return false;
    s->v = v;
    s->cap = cap;
    return true;
}

/* First index whose span starts at or after off (the one search: core/sorted.h). */
static size_t lower(const dmm_spans *s, uint64_t off) { return DMM_LOWER_BOUND(s->v, s->n, dmm_span, off, off); }

static void remove_at(dmm_spans *s, size_t i) {
    memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof *s->v);
    s->n--;
}

static void insert_at(dmm_spans *s, size_t i, uint64_t off, uint64_t len) {
    memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof *s->v);
    s->v[i] = (dmm_span){off, len};
    s->n++;
}

bool dmm__spans_insert(dmm_spans *s, uint64_t off, uint64_t len) {
    if (len == 0) return true;
    if (off + len < off) return false;
    size_t i = lower(s, off);
    dmm_span *prev = i > 0 ? &s->v[i - 1] : NULL;
    dmm_span *next = i < s->n ? &s->v[i] : NULL;
    if (prev != NULL && prev->off + prev->len > off) return false;
    if (next != NULL && off + len > next->off) return false;
    bool join_prev = prev != NULL && prev->off + prev->len == off;
    bool join_next = next != NULL && off + len == next->off;
    if (join_prev && join_next) {
        prev->len += len + next->len;
        remove_at(s, i);
    } else if (join_prev) {
        prev->len += len;
    } else if (join_next) {
        next->off = off;
        next->len += len;
    } else {
        if (s->n == s->cap) return false;
        insert_at(s, i, off, len);
    }
    s->total += len;
    return true;
}

/* Takes `len` bytes at an aligned start from the span `pick` chooses: the smallest that fits (best
 * fit; lowest address among equals) or the lowest that fits (first fit). */
static bool take_fit(dmm_spans *s, uint64_t base, uint64_t len, uint64_t align, bool first_fit, uint64_t *off) {
    if (len == 0 || align == 0 || (align & (align - 1)) != 0) return false;
    size_t best = SIZE_MAX;
    uint64_t best_start = 0;
    for (size_t i = 0; i < s->n; i++) {
        const dmm_span *sp = &s->v[i];
        if (sp->len < len) continue;
        if (best != SIZE_MAX && sp->len >= s->v[best].len) continue;
        uint64_t abs = base + sp->off, aligned = (abs + align - 1) & ~(align - 1);
        if (aligned < abs) continue; /* wrapped */
        uint64_t start = aligned - base, end = sp->off + sp->len;
        if (start > end || end - start < len) continue;
        best = i;
        best_start = start;
        if (first_fit) break;
    }
    if (best == SIZE_MAX) return false;
    dmm_span sp = s->v[best];
    uint64_t head = best_start - sp.off, tail = sp.off + sp.len - (best_start + len);
    if (head > 0 && tail > 0) {
        if (s->n == s->cap) return false;
        s->v[best].len = head;
        insert_at(s, best + 1, best_start + len, tail);
    } else if (head > 0) {
        s->v[best].len = head;
    } else if (tail > 0) {
        s->v[best].off = best_start + len;
        s->v[best].len = tail;
    } else {
        remove_at(s, best);
    }
    s->total -= len;
    *off = best_start;
    return true;
}

bool dmm__spans_take_best_fit(dmm_spans *s, uint64_t base, uint64_t len, uint64_t align, uint64_t *off) {
    return take_fit(s, base, len, align, false, off);
}

bool dmm__spans_take_first_fit(dmm_spans *s, uint64_t base, uint64_t len, uint64_t align, uint64_t *off) {
    return take_fit(s, base, len, align, true, off);
}

uint64_t dmm__spans_carve(dmm_spans *s, uint64_t off, uint64_t len,
                          void (*piece)(void *user, uint64_t off, uint64_t len), void *user) {
    if (len == 0) return 0;
    uint64_t end = off + len < off ? UINT64_MAX : off + len, removed = 0;
    size_t i = lower(s, off);
    if (i > 0 && s->v[i - 1].off + s->v[i - 1].len > off) i--;
    while (i < s->n && s->v[i].off < end) {
        dmm_span sp = s->v[i];
        uint64_t sp_end = sp.off + sp.len;
        uint64_t lo = sp.off > off ? sp.off : off, hi = sp_end < end ? sp_end : end;
        if (sp.off < lo && sp_end > hi) { /* the span strictly contains the cut: split it */
            if (s->n == s->cap) break;
            s->v[i].len = lo - sp.off;
            insert_at(s, i + 1, hi, sp_end - hi);
            i += 2;
        } else if (sp.off < lo) { /* keep the head */
            s->v[i].len = lo - sp.off;
            i++;
        } else if (sp_end > hi) { /* keep the tail */
            s->v[i].off = hi;
            s->v[i].len = sp_end - hi;
            i++;
        } else {
            remove_at(s, i);
        }
        removed += hi - lo;
        s->total -= hi - lo;
        if (piece != NULL) piece(user, lo, hi - lo);
    }
    return removed;
}

size_t dmm__spans_count_overlapping(const dmm_spans *s, uint64_t off, uint64_t len) {
    if (len == 0) return 0;
    uint64_t end = off + len < off ? UINT64_MAX : off + len;
    size_t i = lower(s, off), n = 0;
    if (i > 0 && s->v[i - 1].off + s->v[i - 1].len > off) i--;
    for (; i < s->n && s->v[i].off < end; i++) n++;
    return n;
}

bool dmm__spans_overlaps(const dmm_spans *s, uint64_t off, uint64_t len) {
    if (len == 0) return false;
    size_t i = lower(s, off);
    if (i < s->n && s->v[i].off < off + len) return true;
    return i > 0 && s->v[i - 1].off + s->v[i - 1].len > off;
}

bool dmm__spans_contains(const dmm_spans *s, uint64_t off, uint64_t len) {
    size_t i = lower(s, off + 1);
    if (i == 0) return false;
    const dmm_span *sp = &s->v[i - 1];
    return sp->off <= off && sp->off + sp->len >= off + len;
}

const char *dmm__spans_check(const dmm_spans *s, uint64_t limit) {
    static _Thread_local char why[160];
    uint64_t total = 0;
    if (s->n > s->cap) return "the span count exceeds the capacity";
    for (size_t i = 0; i < s->n; i++) {
        const dmm_span *sp = &s->v[i];
        if (sp->len == 0) {
            snprintf(why, sizeof why, "span %zu is empty", i);
            return why;
        }
        if (sp->off + sp->len < sp->off || sp->off + sp->len > limit) {
            snprintf(why, sizeof why, "span %zu [%#llx, +%#llx) lies outside the reservation of %#llx bytes", i,
                     (unsigned long long)sp->off, (unsigned long long)sp->len, (unsigned long long)limit);
            return why;
        }
        if (i + 1 < s->n && sp->off + sp->len >= s->v[i + 1].off) {
            snprintf(why, sizeof why, "spans %zu and %zu are unsorted, overlapping or not coalesced (%#llx+%#llx vs %#llx)",
                     i, i + 1, (unsigned long long)sp->off, (unsigned long long)sp->len,
                     (unsigned long long)s->v[i + 1].off);
            return why;
        }
        total += sp->len;
    }
    if (total != s->total) {
        snprintf(why, sizeof why, "the span total %llu differs from the sum of the spans %llu",
                 (unsigned long long)s->total, (unsigned long long)total);
        return why;
    }
    return NULL;
}
