/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/layout.c — the pool's layout: where it created handles for its growths (recorded), and a
 * warm layout's handles committed ahead of the growths that take them (DESIGN §4.9; pool.h, "Warm
 * layout").
 *
 * What it owns: the per-quantum tables of p->layout (types.h: `grown` with `grown_heap`, `ahead`),
 * their mutex, and the mechanism calls that commit ahead and give ahead handles back.
 *
 * The idea. A workload that repeats its run (a training job started again, a server restarted)
 * grows through the same handles at the same offsets each time. The first run's growth is ~870
 * handles for GPT-2's first step, ~50 µs of driver calls each on the allocating thread. A warm start
 * that commits the peak as one free region (dmm_pool_warm) saves them, but best fit in one large
 * region places blocks differently and holds ~4 % more than growing as needed did. A warm layout
 * commits the first run's own handles at their own places instead, and leaves them unmapped in the
 * heaps' eyes: every plan, move and alias is the first run's, and where a growth commits a fresh
 * chunk, commit_one (moves.c) takes every ahead handle lying wholly inside it and creates only the
 * gaps. Same handles, same peak, no driver call for them in the first iteration. What is ahead and not
 * taken goes back when a commit or alias overlaps it, or at the next trim. Each handle is recorded
 * with its heap's place in the order heaps were made, so that a stream's heap takes its own.
 *
 * Invariants: an `ahead` entry is a handle the mechanism holds committed in the pool's VA over VA
 * the pool's blocks call UNMAPPED (or COMMITTING by the one thread that is about to take it), and
 * no chunk of the pool's (clen) overlaps it; ahead_bytes = Σ non-busy entries' bytes. An entry marked
 * LAYOUT_BUSY is being given back by one thread; every other thread that meets it waits, so no
 * commit runs over a handle still mapped. The mutex is never held across a mechanism call (a
 * commit may climb the governor's reclaim ladder, whose trim comes back here). `grown` spans never
 * overlap each other.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/types.h"

static size_t quanta(const dmm_pool *p) { return (size_t)(p->va_bytes / p->chunk); }

bool dmm__pool_layout_init(dmm_pool *p) {
    playout *l = &p->layout;
    memset(l, 0, sizeof *l);
    if (pthread_mutex_init(&l->m, NULL) != 0) {
        dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_create: the layout's mutex could not be made");
        return false;
    }
    if (pthread_cond_init(&l->done, NULL) != 0) {
        pthread_mutex_destroy(&l->m);
        dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_create: the layout's condition could not be made");
        return false;
    }
    l->grown = calloc(quanta(p), sizeof *l->grown); /* NULL: nothing is recorded (dmm_pool_layout says 0) */
    l->grown_heap = calloc(quanta(p), sizeof *l->grown_heap);
    if (l->grown_heap == NULL) {
        free(l->grown);
        l->grown = NULL;
    }
    return true;
}

void dmm__pool_layout_fini(dmm_pool *p) {
    playout *l = &p->layout;
    free(l->grown);
    free(l->grown_heap);
    free(l->ahead);
    pthread_cond_destroy(&l->done);
    pthread_mutex_destroy(&l->m);
}

/* The first entry of table t that overlaps quanta [q0, q1), scanning from `from` (≥ q0 - most + 1),
 * or SIZE_MAX (under the mutex). */
static size_t first_overlap(const playout *l, const uint32_t *t, size_t q0, size_t q1, size_t from) {
    size_t start = q0 >= l->most ? q0 - l->most + 1 : 0;
    if (from < start) from = start;
    for (size_t q = from; q < q1; q++) {
        uint32_t len = t[q] & ~LAYOUT_BUSY;
        if (len != 0 && q + len > q0) return q;
    }
    return SIZE_MAX;
}

static void note_most(playout *l, uint32_t len) {
    if (len > l->most) l->most = len;
}

#define GONE ((size_t)1 << (sizeof(size_t) * 8 - 1)) /* give_back's mark on an entry it cleared */

/* Gives the ahead handles at `at[0..n)` back (no lock held; each marked busy by the caller, its bytes
 * already out of ahead_bytes): the mechanism decommits each. Then, under the mutex, each entry that is
 * gone (or quarantined) is cleared, one whose decommit failed with nothing changed stays ahead, and
 * the waiters wake. Returns the first failure (its sentence set); *released (may be NULL) += the
 * bytes given back. */
static dmm_status give_back(dmm_pool *p, size_t *at, size_t n, uint64_t *released) {
    playout *l = &p->layout;
    dmm_status first = DMM_OK;
    dmm_error_kept fail = {0};
    uint64_t gone_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)(l->ahead[at[i]] & ~LAYOUT_BUSY) * p->chunk; /* busy: no other thread writes it */
        dmm_range r = {(size_t)((uint64_t)at[i] * p->chunk), (size_t)bytes};
        if (dmm__pool_lost(p, "giving a warm layout's handle back")) { /* no call: the handle stays ahead */
            if (first == DMM_OK) dmm__error_keep(&fail, first = dmm__pool_lost_error(p, "pool"));
            continue;
        }
        dmm_release_outcome o = dmm__pool_map_decommit(p, r);
        if (o.failure == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "giving a warm layout's handle back");
        dmm_release_state st = dmm_release_state_of(&o);
        if (st != DMM_RELEASE_FAILED) at[i] |= GONE; /* QUARANTINED: the mechanism keeps it out of use */
        if (st == DMM_RELEASE_COMPLETE) {
            gone_bytes += bytes;
        } else if (first == DMM_OK) {
            first = o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER;
            dmm__error_keep(&fail, first);
        }
    }
    pthread_mutex_lock(&l->m);
    for (size_t i = 0; i < n; i++) {
        size_t q = at[i] & ~GONE;
        uint32_t len = l->ahead[q] & ~LAYOUT_BUSY;
        if (at[i] & GONE) {
            l->ahead[q] = 0;
            dmm_atomic_sub_release(&l->entries, 1);
            dmm_atomic_add_relaxed(&l->released, 1);
        } else {
            l->ahead[q] = len; /* FAILED, nothing changed: still ahead */
            dmm_atomic_add_relaxed(&l->ahead_bytes, (uint64_t)len * p->chunk);
        }
    }
    pthread_cond_broadcast(&l->done);
    pthread_mutex_unlock(&l->m);
    if (released != NULL) *released += gone_bytes;
    if (first != DMM_OK)
        return dmm_error_set(first,
                             "pool: giving back a handle a warm layout committed ahead failed (it stays ahead if "
                             "nothing changed, out of use if the mechanism quarantined it): %s",
                             dmm__error_kept_text(&fail));
    return DMM_OK;
}

/* Whether entry q of `ahead` lies wholly inside quanta [q0, q1) (under the mutex). */
static bool inside(const playout *l, size_t q, size_t q0, size_t q1) {
    return q >= q0 && q + (l->ahead[q] & ~LAYOUT_BUSY) <= q1;
}

/* Marks the non-busy entries overlapping quanta [q0, q1) busy (with spare_inside: only those that
 * reach past it) and lists them in *at (under the mutex; their bytes leave ahead_bytes); *busy =
 * whether an entry there is busy already (another thread gives it back). False: out of host memory
 * for the list (nothing marked). */
static bool claim(playout *l, const dmm_pool *p, size_t q0, size_t q1, bool spare_inside, size_t **at, size_t *n,
                  bool *busy) {
    *n = 0;
    *busy = false;
    size_t cap = 0;
    for (size_t q = first_overlap(l, l->ahead, q0, q1, 0); q != SIZE_MAX; q = first_overlap(l, l->ahead, q0, q1, q + 1)) {
        if (l->ahead[q] & LAYOUT_BUSY) {
            *busy = true;
            continue;
        }
        if (spare_inside && inside(l, q, q0, q1)) continue;
        if (*n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            size_t *v = realloc(*at, nc * sizeof *v);
            if (v == NULL) {
                *n = 0;
                return false;
            }
            *at = v;
            cap = nc;
        }
        (*at)[(*n)++] = q;
    }
    for (size_t i = 0; i < *n; i++) {
        dmm_atomic_sub_relaxed(&l->ahead_bytes, (uint64_t)l->ahead[(*at)[i]] * p->chunk);
        l->ahead[(*at)[i]] |= LAYOUT_BUSY;
    }
    return true;
}

dmm_status dmm__pool_layout_take(dmm_pool *p, uintptr_t addr, uint64_t bytes, bool fresh, layout_piece **pieces,
                                 size_t *n) {
    playout *l = &p->layout;
    *pieces = NULL;
    *n = 0;
    if (dmm_atomic_load_acquire(&l->entries) == 0) return DMM_OK;
    size_t q0 = qidx(p, addr), q1 = q0 + (size_t)(bytes / p->chunk);
    size_t *at = NULL, nat = 0;
    dmm_status s = DMM_OK;
    pthread_mutex_lock(&l->m);
    for (;;) { /* first, the handles that reach past the span (not fresh: every one there) go back */
        bool busy = false;
        if (!claim(l, p, q0, q1, fresh, &at, &nat, &busy)) {
            s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool: out of host memory to give a warm layout's handles back");
            break;
        }
        if (nat > 0) {
            pthread_mutex_unlock(&l->m);
            s = give_back(p, at, nat, NULL);
            pthread_mutex_lock(&l->m);
            if (s != DMM_OK) break;
            continue;
        }
        if (!busy) break;
        pthread_cond_wait(&l->done, &l->m); /* another thread gives one back: wait, look again */
    }
    if (s == DMM_OK && fresh) { /* then the ones wholly inside are this commit's */
        size_t cap = 0;
        for (size_t q = first_overlap(l, l->ahead, q0, q1, 0); q != SIZE_MAX; q = first_overlap(l, l->ahead, q0, q1, q + 1)) {
            if (*n == cap) {
                size_t nc = cap ? 2 * cap : 4;
                layout_piece *v = realloc(*pieces, nc * sizeof *v);
                if (v == NULL) {
                    free(*pieces);
                    *pieces = NULL;
                    *n = 0;
                    s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool: out of host memory to take a warm layout's handles");
                    break;
                }
                *pieces = v;
                cap = nc;
            }
            (*pieces)[(*n)++] = (layout_piece){q, l->ahead[q], true};
        }
        for (size_t i = 0; i < *n; i++) { /* (none is busy: the loop above waited them out) */
            l->ahead[(*pieces)[i].q] = 0;
            dmm_atomic_sub_release(&l->entries, 1);
            dmm_atomic_sub_relaxed(&l->ahead_bytes, (uint64_t)(*pieces)[i].len * p->chunk);
        }
    }
    pthread_mutex_unlock(&l->m);
    free(at);
    return s;
}

void dmm__pool_layout_put_back(dmm_pool *p, const layout_piece *pieces, size_t n) {
    playout *l = &p->layout;
    if (n == 0) return;
    pthread_mutex_lock(&l->m);
    if (l->ahead == NULL) l->ahead = calloc(quanta(p), sizeof *l->ahead);
    for (size_t i = 0; i < n; i++) {
        if (l->ahead == NULL) break; /* out of host memory: the pieces stay committed, the pool's VA unmapped */
        l->ahead[pieces[i].q] = pieces[i].len;
        note_most(l, pieces[i].len);
        dmm_atomic_add_release(&l->entries, 1);
        dmm_atomic_add_relaxed(&l->ahead_bytes, (uint64_t)pieces[i].len * p->chunk);
    }
    pthread_mutex_unlock(&l->m);
}

void dmm__pool_layout_record(dmm_pool *p, uintptr_t addr, uint64_t bytes) {
    playout *l = &p->layout;
    if (l->grown == NULL) return;
    size_t q0 = qidx(p, addr);
    uint32_t len = (uint32_t)(bytes / p->chunk);
    pthread_mutex_lock(&l->m);
    const pool_heap *h = dmm_atomic_load_acquire(&p->owner[(addr - p->base) >> p->region_shift]);
    if (first_overlap(l, l->grown, q0, q0 + len, 0) == SIZE_MAX) {
        l->grown[q0] = len;
        l->grown_heap[q0] = h != NULL ? h->ordinal : 0;
        note_most(l, len);
    }
    pthread_mutex_unlock(&l->m);
}

void dmm__pool_layout_forget(dmm_pool *p, uintptr_t addr, uint64_t bytes) {
    playout *l = &p->layout;
    if (l->grown == NULL) return;
    size_t q0 = qidx(p, addr), q1 = q0 + (size_t)(bytes / p->chunk);
    pthread_mutex_lock(&l->m);
    for (size_t q = first_overlap(l, l->grown, q0, q1, 0); q != SIZE_MAX; q = first_overlap(l, l->grown, q0, q1, q + 1))
        l->grown[q] = 0;
    pthread_mutex_unlock(&l->m);
}

dmm_status dmm__pool_layout_release_all(dmm_pool *p, uint64_t *released) {
    playout *l = &p->layout;
    if (dmm_atomic_load_acquire(&l->entries) == 0) return DMM_OK;
    size_t *at = NULL, n = 0;
    bool busy = false;
    pthread_mutex_lock(&l->m);
    bool ok = claim(l, p, 0, quanta(p), false, &at, &n, &busy); /* busy ones: another thread gives them back */
    pthread_mutex_unlock(&l->m);
    dmm_status s = ok ? give_back(p, at, n, released)
                      : dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "pool: out of host memory to give a warm layout's handles back");
    free(at);
    return s;
}

const char *dmm__pool_layout_invariants(dmm_pool *p) {
    static _Thread_local char why[160];
    playout *l = &p->layout;
    if (l->ahead == NULL) return NULL;
    uint64_t entries = 0, bytes = 0;
    size_t nq = quanta(p), covered_until = 0; /* the end of the last entry or chunk seen, in quanta */
    const char *bad = NULL;
    pthread_mutex_lock(&l->m);
    for (size_t q = 0; q < nq && bad == NULL; q++) {
        uint32_t len = l->ahead[q] & ~LAYOUT_BUSY;
        if (len != 0) {
            entries++;
            if ((l->ahead[q] & LAYOUT_BUSY) == 0) bytes += (uint64_t)len * p->chunk;
        }
        if ((len != 0 || p->clen[q] != 0) && q < covered_until) {
            snprintf(why, sizeof why, "the %s at quantum %zu lies inside an ahead handle or a chunk before it",
                     len != 0 ? "ahead handle" : "chunk", q);
            bad = why;
        }
        if (len != 0 && p->clen[q] != 0) {
            snprintf(why, sizeof why, "quantum %zu starts both an ahead handle and a chunk", q);
            bad = why;
        }
        uint32_t c = p->clen[q] > len ? p->clen[q] : len;
        if (c != 0 && q + c > covered_until) covered_until = q + c;
    }
    if (bad == NULL && (entries != dmm_atomic_load_relaxed(&l->entries) ||
                        bytes != dmm_atomic_load_relaxed(&l->ahead_bytes))) {
        snprintf(why, sizeof why, "%llu entries of %llu bytes, counted as %llu of %llu", (unsigned long long)entries,
                 (unsigned long long)bytes, (unsigned long long)dmm_atomic_load_relaxed(&l->entries),
                 (unsigned long long)dmm_atomic_load_relaxed(&l->ahead_bytes));
        bad = why;
    }
    pthread_mutex_unlock(&l->m);
    return bad;
}

/* ---- dmm_pool_layout and the warm layout ---- */

dmm_status dmm_pool_layout(dmm_pool *p, dmm_pool_span *spans, size_t cap, size_t *count) {
    if (count != NULL) *count = 0;
    if (p == NULL || count == NULL || (spans == NULL && cap > 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_layout: pool %p, spans %p (cap %zu), count %p: a pool and a count are required, "
                             "and spans when cap is above 0",
                             (void *)p, (void *)spans, cap, (void *)count);
    playout *l = &p->layout;
    if (l->grown == NULL) return DMM_OK;
    size_t n = 0, nq = quanta(p);
    pthread_mutex_lock(&l->m);
    for (size_t q = 0; q < nq; q++) n += l->grown[q] != 0;
    if (n <= cap) {
        size_t i = 0;
        for (size_t q = 0; q < nq; q++)
            if (l->grown[q] != 0)
                spans[i++] = (dmm_pool_span){(uint64_t)q * p->chunk, (uint64_t)l->grown[q] * p->chunk, l->grown_heap[q]};
    }
    pthread_mutex_unlock(&l->m);
    *count = n;
    if (n > cap && spans != NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_layout: the layout has %zu spans and the array holds %zu; pass an array of at "
                             "least %zu (nothing was written)",
                             n, cap, n);
    return DMM_OK;
}

static int by_offset(const void *a, const void *b) {
    const dmm_pool_span *x = *(const dmm_pool_span *const *)a, *y = *(const dmm_pool_span *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

dmm_status dmm__pool_layout_check(const dmm_pool *p, const dmm_pool_span *spans, size_t count, uint32_t ordinal,
                                  uint64_t *lo, uint64_t *end) {
    *lo = *end = 0;
    if (count > quanta(p))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_pool_warm_layout: %zu spans cannot fit the pool's %zu quanta without overlapping; "
                             "pass the layout of a pool like this one (nothing changed)",
                             count, quanta(p));
    for (size_t i = 0; i < count; i++) {
        uint64_t o = spans[i].offset, b = spans[i].bytes;
        const char *fault = b == 0                                  ? "has no bytes"
                            : o % p->chunk != 0 || b % p->chunk != 0 ? "is not whole quanta of the pool's chunk_bytes"
                            : b > DMM_POOL_WARM_HANDLE_BYTES         ? "is larger than DMM_POOL_WARM_HANDLE_BYTES"
                            : o > p->va_bytes || b > p->va_bytes - o ? "does not lie inside the pool's VA"
                                                                     : NULL;
        if (fault != NULL)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "dmm_pool_warm_layout: span %zu (offset %llu, %llu bytes) %s (chunk_bytes %llu, VA "
                                 "%llu bytes); pass the layout dmm_pool_layout gave for a pool like this one "
                                 "(nothing changed)",
                                 i, (unsigned long long)o, (unsigned long long)b, fault, (unsigned long long)p->chunk,
                                 (unsigned long long)p->va_bytes);
        if (spans[i].heap == ordinal && (*end == 0 || o < *lo)) *lo = o;
        if (spans[i].heap == ordinal && o + b > *end) *end = o + b;
    }
    if (count < 2 || ordinal != UINT32_MAX) return DMM_OK; /* (UINT32_MAX: the whole check) */
    const dmm_pool_span **v = malloc(count * sizeof *v);
    if (v == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_warm_layout: out of host memory to check the spans");
    for (size_t i = 0; i < count; i++) v[i] = &spans[i];
    qsort(v, count, sizeof *v, by_offset);
    dmm_status s = DMM_OK;
    for (size_t i = 1; i < count && s == DMM_OK; i++) {
        if (v[i - 1]->offset + v[i - 1]->bytes > v[i]->offset)
            s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                              "dmm_pool_warm_layout: spans %zu (offset %llu, %llu bytes) and %zu (offset %llu) "
                              "overlap; a layout's spans never do (nothing changed)",
                              (size_t)(v[i - 1] - spans), (unsigned long long)v[i - 1]->offset,
                              (unsigned long long)v[i - 1]->bytes, (size_t)(v[i] - spans),
                              (unsigned long long)v[i]->offset);
    }
    free(v);
    return s;
}

/* The UNMAPPED block of h that holds [a, a + len) whole, or NULL (under h's lock). */
static pool_block *unmapped_holding(const pool_heap *h, uintptr_t a, uint64_t len) {
    for (size_t r = 0; r < h->nruns; r++) {
        if (a < h->runs[r].lo || a + len > h->runs[r].hi) continue;
        for (pool_block *b = h->runs[r].first; b != NULL && b->addr <= a; b = b->next)
            if (a + len <= b->addr + b->size) return b->kind == BK_UNMAPPED ? b : NULL;
        return NULL;
    }
    return NULL;
}

dmm_status dmm__pool_layout_warm(dmm_pool *p, pool_heap *h, const dmm_pool_span *spans, size_t count,
                                 uint64_t *committed) {
    playout *l = &p->layout;
    if (count == 0) return DMM_OK;
    pthread_mutex_lock(&l->m);
    if (l->ahead == NULL) l->ahead = calloc(quanta(p), sizeof *l->ahead);
    bool table = l->ahead != NULL;
    pthread_mutex_unlock(&l->m);
    pool_block **carved = calloc(count, sizeof *carved);
    if (!table || carved == NULL) {
        free(carved);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_warm_layout: out of host memory for its tables");
    }
    /* carve: each span over unmapped VA of h becomes COMMITTING (no growth plans over it meanwhile) */
    heap_lock(h);
    if (!dmm__heap_reserve_blocks(h, 2 * count + 2)) {
        heap_unlock(h);
        free(carved);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_pool_warm_layout: out of host memory for block records");
    }
    pthread_mutex_lock(&l->m); /* heap → layout: the order every path keeps (none takes a heap lock under it) */
    for (size_t i = 0; i < count; i++) {
        if (spans[i].heap != h->ordinal) continue; /* another stream's: its own heap grows there */
        uintptr_t a = p->base + spans[i].offset;
        size_t q0 = qidx(p, a), q1 = q0 + (size_t)(spans[i].bytes / p->chunk);
        pool_block *b = unmapped_holding(h, a, spans[i].bytes);
        if (b != NULL && first_overlap(l, l->ahead, q0, q1, 0) == SIZE_MAX) /* not ahead already */
            carved[i] = dmm__heap_carve(h, b, a, spans[i].bytes, BK_COMMITTING);
    }
    pthread_mutex_unlock(&l->m);
    heap_unlock(h);
    /* drive (no lock): one handle each; the first failure stops the rest */
    dmm_status s = DMM_OK;
    size_t failed_at = count;
    for (size_t i = 0; i < count && s == DMM_OK; i++) {
        if (carved[i] == NULL) continue;
        uint64_t newly = 0;
        dmm_range r = {(size_t)spans[i].offset, (size_t)spans[i].bytes};
        s = dmm__pool_lost(p, "committing a warm layout") ? dmm__pool_lost_error(p, "dmm_pool_warm_layout")
                                                          : dmm__pool_map_commit(p, r, r.bytes, &newly);
        if (s == DMM_ERR_DEVICE_LOST) dmm__pool_notice_loss(p, "committing a warm layout");
        if (s != DMM_OK) failed_at = i;
    }
    /* the entries first, then the blocks back to UNMAPPED: a growth that plans over them finds them */
    uint64_t done = 0;
    pthread_mutex_lock(&l->m);
    for (size_t i = 0; i < count && i < failed_at; i++) {
        if (carved[i] == NULL) continue;
        uint32_t len = (uint32_t)(spans[i].bytes / p->chunk);
        l->ahead[qidx(p, p->base + spans[i].offset)] = len;
        note_most(l, len);
        dmm_atomic_add_release(&l->entries, 1);
        dmm_atomic_add_relaxed(&l->ahead_bytes, spans[i].bytes);
        done += spans[i].bytes;
    }
    pthread_mutex_unlock(&l->m);
    heap_lock(h);
    for (size_t i = 0; i < count; i++)
        if (carved[i] != NULL) dmm__heap_make_unmapped(h, carved[i]);
    heap_unlock(h);
    free(carved);
    if (committed != NULL) *committed = done;
    if (s != DMM_OK)
        return dmm__error_wrap(s, "dmm_pool_warm_layout: committing span %zu failed (the %llu bytes committed before it "
                                  "stay ahead)",
                               failed_at, (unsigned long long)done);
    return DMM_OK;
}
