/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/placement.c — blocks of known lifetimes placed at fixed offsets (contract and idea:
 * placement.h).
 *
 * Each order of placing (largest first, longest-lived first, largest size × lifetime first, then the
 * shaken restarts) puts every item at the best-fitting gap among those already placed whose lifetimes
 * overlap its own; fixed items go first, at their offsets. The placement keeps the order whose extent
 * is smallest. No one order wins on every input (largest first does on activation graphs, longest-lived
 * first on random shapes, a shaken one on gpt2-train).
 *
 * Time is cut into buckets at several levels, each 16 × coarser than the one below; a placed interval
 * is listed in the buckets it touches at the finest level where it touches at most 4, so the items
 * that may overlap a new one in time are those of its buckets at every level (deduplicated by a stamp,
 * then checked exactly, both intervals of each).
 *
 * Invariants: in one order's placement, items whose lifetimes overlap never overlap in
 * [off, off + size); extent = max(off + size) over the placed ones.
 */
#include "pool/placement.h"

#include <math.h>
#include "core/atomics.h"
#include <stdlib.h>
#include <string.h>

typedef struct time_bucket {
    uint32_t *ids; /* the placed items with an interval that touches this bucket */
    uint32_t n, cap;
} time_bucket;

typedef struct placed_span {
    uint64_t lo, hi;
} placed_span;

/* One entry of a placing order: sorted by key descending, then by start. */
typedef struct order_key {
    double key;
    uint32_t start, id;
} order_key;

/* The three greedy orders, then ORDER_SHAKEN: size × lifetime^a × a random factor per item (a and
 * the factor's spread drawn per restart from a generator seeded by the restart's number). */
typedef enum place_order { ORDER_SIZE, ORDER_LIFETIME, ORDER_AREA, ORDER_GREEDY_COUNT_, ORDER_SHAKEN = ORDER_GREEDY_COUNT_ } place_order;

/* The index's levels: level 0's buckets are `width` time units wide, each next level's 16 × wider, up
 * to one bucket; an interval is listed at the lowest level where it touches at most 4 buckets, so it
 * is listed at most 4 times and a long-lived item does not fill every narrow bucket. */
#define PLACE_LEVELS 8
#define PLACE_LEVEL_FACTOR 16
#define PLACE_MAX_SPAN 4

typedef struct placer {
    dmm_place_item *items;
    size_t n;
    order_key *order;
    uint32_t *stamp; /* stamp[o] == id: item o was already looked at for item id */
    placed_span *overlapping, *sorting; /* the spans overlapping the one being placed; room to sort them */
    time_bucket *buckets;        /* every level's, level 0 first */
    size_t level_first[PLACE_LEVELS]; /* index in buckets of each level's first */
    size_t level_count[PLACE_LEVELS], level_width[PLACE_LEVELS];
    size_t nbuckets;
    unsigned levels;
    uint64_t work;   /* index entries scanned and listed so far, over every order: at most max_work */
    uint64_t listed; /* index entries of the order being placed: at most max_index */
    uint64_t max_work, max_index;
    const _Atomic bool *cancel;
} placer;

static int by_key_desc(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Sorts n spans by lo (tmp: room for n): insertion sort when short, else least-significant-digit radix,
 * 8 bits a pass, over the bits in which the spans' lo differ (offsets share the alignment's zero bits).
 * The placement's hot spot: qsort's comparisons through a pointer cost ~10 × as much on the real traces. */
static void sort_by_lo(placed_span *s, placed_span *tmp, size_t n) {
    if (n < 32) {
        for (size_t i = 1; i < n; i++) {
            placed_span v = s[i];
            size_t j = i;
            for (; j > 0 && s[j - 1].lo > v.lo; j--) s[j] = s[j - 1];
            s[j] = v;
        }
        return;
    }
    uint64_t any = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        any |= s[i].lo;
        if (s[i].lo > top) top = s[i].lo;
    }
    unsigned low = any != 0 ? (unsigned)__builtin_ctzll(any) : 0;
    placed_span *from = s, *to = tmp;
    for (unsigned shift = low; shift < 64 && (top >> shift) != 0; shift += 8) {
        uint32_t count[256] = {0};
        for (size_t i = 0; i < n; i++) count[(from[i].lo >> shift) & 255]++;
        uint32_t sum = 0;
        for (unsigned d = 0; d < 256; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) to[count[(from[i].lo >> shift) & 255]++] = from[i];
        placed_span *t = from;
        from = to;
        to = t;
    }
    if (from != s) memcpy(s, from, n * sizeof *s);
}

static bool bucket_push(time_bucket *b, uint32_t id) {
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? b->cap * 2 : 16;
        uint32_t *ids = realloc(b->ids, (size_t)cap * sizeof *ids);
        if (ids == NULL) return false;
        b->ids = ids;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
    return true;
}

/* The lowest offset of the smallest gap among `n` spans (sorted by lo) that holds `size`, else the
 * offset above them all. */
static uint64_t best_gap(const placed_span *s, size_t n, uint64_t size) {
    uint64_t prev = 0, best = UINT64_MAX, best_len = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (s[i].lo > prev && s[i].lo - prev >= size && s[i].lo - prev < best_len) {
            best = prev;
            best_len = s[i].lo - prev;
        }
        if (s[i].hi > prev) prev = s[i].hi;
    }
    return best != UINT64_MAX ? best : prev;
}

/* splitmix64: a fixed sequence per seed, so a placement is the same on every run and machine */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* in [0, 1) */
static double uniform(uint64_t *state) { return (double)(next_random(state) >> 11) * 0x1.0p-53; }

/* x^(k/8) for k in 0..4, from square roots only: IEEE rounds them exactly, so keys (and the placement)
 * are the same on every machine, which pow() does not promise */
static double root_eighths(double x, unsigned k) {
    double r2 = sqrt(x), r4 = sqrt(r2), r8 = sqrt(r4);
    return k == 0 ? 1 : k == 1 ? r8 : k == 2 ? r4 : k == 3 ? r4 * r8 : r2;
}

static bool has_second(const dmm_place_item *x) { return x->end2 > x->start2; }

static bool lives_overlap(const dmm_place_item *x, const dmm_place_item *y) {
    if (y->start < x->end && x->start < y->end) return true;
    if (has_second(y) && y->start2 < x->end && x->start < y->end2) return true;
    if (has_second(x) && y->start < x->end2 && x->start2 < y->end) return true;
    return has_second(x) && has_second(y) && y->start2 < x->end2 && x->start2 < y->end2;
}

/* Collects into p->overlapping the placed items (stamped for `id`) whose lifetimes overlap item id's,
 * from the buckets interval [start, end) touches at every level. False: past the work bound. */
static bool gather(placer *p, uint32_t id, uint32_t start, uint32_t end, size_t *n) {
    const dmm_place_item *x = &p->items[id];
    uint32_t last = end - 1;
    for (unsigned l = 0; l < p->levels; l++) {
        size_t b0 = start / p->level_width[l], b1 = last / p->level_width[l];
        if (b1 >= p->level_count[l]) b1 = p->level_count[l] - 1;
        for (size_t b = b0; b <= b1; b++) {
            const time_bucket *bucket = &p->buckets[p->level_first[l] + b];
            p->work += bucket->n + 1; /* its entries scanned, and the bucket visited */
            if (p->work > p->max_work) return false;
            for (uint32_t j = 0; j < bucket->n; j++) {
                uint32_t other = bucket->ids[j];
                if (p->stamp[other] == id) continue;
                p->stamp[other] = id;
                const dmm_place_item *y = &p->items[other];
                if (lives_overlap(x, y)) p->overlapping[(*n)++] = (placed_span){y->off, y->off + y->size};
            }
        }
    }
    return true;
}

/* Lists interval [start, end) of item id in the index. */
static dmm_place_outcome list(placer *p, uint32_t id, uint32_t start, uint32_t end) {
    uint32_t last = end - 1;
    unsigned home = p->levels - 1;
    for (unsigned l = 0; l < p->levels; l++)
        if (last / p->level_width[l] - start / p->level_width[l] < PLACE_MAX_SPAN) {
            home = l;
            break;
        }
    size_t h0 = start / p->level_width[home], h1 = last / p->level_width[home];
    if (h1 >= p->level_count[home]) h1 = p->level_count[home] - 1;
    p->listed += h1 - h0 + 1;
    if (p->listed > p->max_index) return DMM_PLACE_TOO_MUCH_WORK;
    for (size_t b = h0; b <= h1; b++)
        if (!bucket_push(&p->buckets[p->level_first[home] + b], id)) return DMM_PLACE_OUT_OF_MEMORY;
    return DMM_PLACE_OK;
}

/* Places every item in `which` order (offsets in items[].off; fixed items first, where they are).
 * DMM_PLACE_OK with the extent in *extent_out, or why not. */
static dmm_place_outcome place(placer *p, place_order which, uint64_t seed, uint64_t *extent_out) {
    uint64_t rng = seed;
    unsigned eighths = 0; /* the lifetime's exponent, in eighths: 0 to 4 */
    double spread = 0;
    if (which == ORDER_SHAKEN) {
        eighths = (unsigned)(next_random(&rng) % 5);
        spread = 0.05 + 0.45 * uniform(&rng);
    }
    for (size_t i = 0; i < p->n; i++) {
        const dmm_place_item *x = &p->items[i];
        double size = (double)x->size, life = (double)(x->end - x->start) + (double)(x->end2 - x->start2) + 1;
        double key = x->fixed                  ? INFINITY
                     : which == ORDER_SIZE     ? size
                     : which == ORDER_LIFETIME ? life
                     : which == ORDER_AREA     ? size * life
                                               : size * root_eighths(life, eighths) * (1 + spread * (2 * uniform(&rng) - 1));
        p->order[i] = (order_key){key, x->start, (uint32_t)i};
        p->stamp[i] = UINT32_MAX;
    }
    qsort(p->order, p->n, sizeof *p->order, by_key_desc);
    for (size_t b = 0; b < p->nbuckets; b++) p->buckets[b].n = 0;
    p->listed = 0;
    uint64_t extent = 0;
    for (size_t k = 0; k < p->n; k++) {
        if ((k & 4095) == 0 && p->cancel != NULL && dmm_atomic_load_relaxed(p->cancel))
            return DMM_PLACE_CANCELLED;
        uint32_t id = p->order[k].id;
        dmm_place_item *x = &p->items[id];
        if (!x->fixed) {
            size_t n = 0;
            if (!gather(p, id, x->start, x->end, &n) || (has_second(x) && !gather(p, id, x->start2, x->end2, &n)))
                return DMM_PLACE_TOO_MUCH_WORK;
            sort_by_lo(p->overlapping, p->sorting, n);
            x->off = best_gap(p->overlapping, n, x->size);
        }
        if (x->off + x->size > extent) extent = x->off + x->size;
        dmm_place_outcome o = list(p, id, x->start, x->end);
        if (o == DMM_PLACE_OK && has_second(x)) o = list(p, id, x->start2, x->end2);
        if (o != DMM_PLACE_OK) return o;
    }
    *extent_out = extent;
    return DMM_PLACE_OK;
}

dmm_place_outcome dmm__place(dmm_place_item *items, size_t n, uint32_t horizon, const dmm_place_limits *limits,
                             uint64_t *extent, unsigned *orders) {
    *extent = 0;
    *orders = 0;
    if (n == 0) return DMM_PLACE_OK;
    if (n > UINT32_MAX - 1 || horizon == 0 || horizon == UINT32_MAX) return DMM_PLACE_BAD_ITEM;
    for (size_t i = 0; i < n; i++) {
        const dmm_place_item *x = &items[i];
        if (x->size > DMM_PLACE_MAX_BYTES || x->end <= x->start || x->end > horizon ||
            (x->end2 != 0 && (x->end2 <= x->start2 || x->end2 > horizon)) ||
            (x->fixed && x->off > DMM_PLACE_MAX_BYTES))
            return DMM_PLACE_BAD_ITEM;
    }
    placer p = {.items = items, .n = n, .max_work = limits->max_work, .max_index = limits->max_index,
                .cancel = limits->cancel};
    size_t count = horizon / 64 + 1, width;
    if (count > 65536) count = 65536;
    width = (horizon + count - 1) / count;
    if (width == 0) width = 1;
    for (;;) {
        unsigned l = p.levels++;
        p.level_first[l] = p.nbuckets;
        p.level_width[l] = width;
        p.level_count[l] = (horizon + width - 1) / width;
        if (p.level_count[l] == 0) p.level_count[l] = 1;
        p.nbuckets += p.level_count[l];
        if (p.level_count[l] == 1 || p.levels == PLACE_LEVELS) break;
        width *= PLACE_LEVEL_FACTOR;
    }
    p.order = malloc(n * sizeof *p.order);
    p.stamp = malloc(n * sizeof *p.stamp);
    p.overlapping = malloc(n * sizeof *p.overlapping);
    p.sorting = malloc(n * sizeof *p.sorting);
    p.buckets = calloc(p.nbuckets, sizeof *p.buckets);
    uint64_t *best_off = malloc(n * sizeof *best_off);
    dmm_place_outcome rc = DMM_PLACE_OUT_OF_MEMORY;
    if (p.order == NULL || p.stamp == NULL || p.overlapping == NULL || p.sorting == NULL || p.buckets == NULL ||
        best_off == NULL)
        goto done;
    for (size_t i = 0; i < n; i++) best_off[i] = items[i].off; /* the fixed ones' */
    uint64_t best = UINT64_MAX;
    /* the greedy orders must fit the bounds; the shaken restarts go on while they fit */
    for (unsigned k = 0; k < ORDER_GREEDY_COUNT_ + limits->restarts; k++) {
        bool shaken = k >= ORDER_GREEDY_COUNT_;
        if (shaken && p.max_work > limits->restart_work) p.max_work = limits->restart_work;
        uint64_t e = 0, work_before = p.work;
        rc = place(&p, shaken ? ORDER_SHAKEN : (place_order)k, k, &e);
        if (rc == DMM_PLACE_TOO_MUCH_WORK && shaken) {
            p.work = work_before;
            break;
        }
        if (rc != DMM_PLACE_OK) goto done;
        (*orders)++;
        if (e < best) {
            best = e;
            for (size_t i = 0; i < n; i++) best_off[i] = items[i].off;
        }
    }
    for (size_t i = 0; i < n; i++) items[i].off = best_off[i];
    *extent = best;
    rc = DMM_PLACE_OK;
done:
    if (p.buckets != NULL)
        for (size_t b = 0; b < p.nbuckets; b++) free(p.buckets[b].ids);
    free(p.buckets);
    free(p.overlapping);
    free(p.sorting);
    free(p.stamp);
    free(p.order);
    free(best_off);
    if (rc != DMM_PLACE_OK) *orders = 0;
    return rc;
}
