/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_pool_layout.c — the pool's layout and the warm layout (pool.h, "Warm layout":
 * dmm_pool_layout, dmm_pool_warm_layout, the stats layout_adopted / layout_released; src/pool/layout.c
 * and its callers in moves.c and regions.c), over the arena over the host driver (wrapped in the fault
 * driver to count and fail driver calls).
 *
 * What is proven: a pool records the handles its growths created (one span per driver create, in
 * address order, whole quanta, covering every block it handed out) and refuses a NULL pool or count
 * and an array too small (the count it needs, nothing written); a trim forgets the spans it gave back.
 * The same malloc/free sequence replayed on a second pool told the first's layout takes every handle
 * ahead and gives none back, places every block at the same offset from the pool's VA base, reaches
 * the same physical and committed peaks and records the same layout; without moves it makes no
 * create, map or set-access, with moves it creates exactly the handles the layout does not hold. A
 * different sequence gives back the ahead handles its growths overlap and still works; a trim (any
 * target) and empty_cache give back all that are left (physical memory back to what live blocks
 * need). A growth whose handle covers several handles ahead takes them and creates the gaps, and
 * when that create fails puts them back ahead (nothing changed). A create that fails stops a warm
 * layout, keeping what it committed before ahead. Bad spans (no bytes, not whole quanta, larger than
 * DMM_POOL_WARM_HANDLE_BYTES, outside the VA, an offset near UINT64_MAX, overlapping, more spans than
 * quanta) are refused naming the span, with no driver call, no heap and nothing committed; spans over
 * memory the pool holds are skipped, and a second warm layout of the same spans commits nothing;
 * destroy gives back ahead handles never taken (the host driver then holds no handle and maps
 * nothing, before the arena goes). Every pool passes dmm_pool_check.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pool/types.h" /* the pool's VA base and size (p->base, p->va_bytes): what span offsets count from */
#include "testkit.h"

#define MIB ((size_t)1 << 20)
#define C (2 * MIB) /* the commit quantum of every pool here (chunk_bytes) */

typedef dmm_test_pool_fx fx;
static void fx_close(fx *f) { dmm_test_pool_fx_close(f); }
static dmm_pool_stats stats(fx *f) { return dmm_test_pool_stats(f->pool); }
static void *xmalloc(fx *f, size_t bytes) { return dmm_test_pool_malloc(f->pool, bytes, NULL); }
static void xfree(fx *f, void *p) { dmm_test_pool_free(f->pool, p, NULL); }
static uint64_t calls(fx *f, dmm_driver_op op) { return dmm_fault_calls(f->drv, op); }
static uint64_t offset_of(fx *f, const void *p) { return (uint64_t)((uintptr_t)p - f->pool->base); }

/* One quantum per handle (handles 0), or the torch adapter's handles (≤ 32 MiB, ≤ 1/8 of the request,
 * ≥ 8 MiB): handles larger than one quantum, of several sizes. retain: per mille (0: the default). */
static fx *fx_open_with(int handles, uint32_t retain) {
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.chunk_bytes = C;
    pc.retain_permille = retain;
    if (handles) {
        pc.max_chunk_bytes = 32 * MIB;
        pc.handle_divisor = 8;
        pc.min_chunk_bytes = 8 * MIB;
    }
    return dmm_test_pool_fx_open(&pc, 0);
}

/* How many spans the pool's layout has: asked with no array, which only counts (DMM_OK). */
static size_t count_of(fx *f) {
    size_t n = SIZE_MAX;
    DMM_OK_OR_FAIL(dmm_pool_layout(f->pool, NULL, 0, &n));
    return n;
}

/* The pool's layout, in a new array (free it); *n = its spans. */
static dmm_pool_span *layout_of(fx *f, size_t *n) {
    *n = count_of(f);
    dmm_pool_span *v = calloc(*n ? *n : 1, sizeof *v);
    assert_non_null(v);
    size_t again = 0;
    DMM_OK_OR_FAIL(dmm_pool_layout(f->pool, v, *n, &again));
    assert_int_equal(again, *n);
    return v;
}

static uint64_t span_bytes(const dmm_pool_span *v, size_t n) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i].bytes;
    return sum;
}

static bool spans_overlap(dmm_pool_span a, dmm_pool_span b) {
    return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

/* A layout's shape: in address order, not overlapping, whole quanta, each at most
 * DMM_POOL_WARM_HANDLE_BYTES, inside the pool's VA. */
static void assert_well_formed(fx *f, const dmm_pool_span *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        assert_true(v[i].bytes > 0 && v[i].bytes <= DMM_POOL_WARM_HANDLE_BYTES);
        assert_int_equal(v[i].offset % C, 0);
        assert_int_equal(v[i].bytes % C, 0);
        assert_true(v[i].offset + v[i].bytes <= f->pool->va_bytes);
        if (i > 0) assert_true(v[i - 1].offset + v[i - 1].bytes <= v[i].offset);
    }
}

/* ---- the layout recorded ---- */

static void a_pool_records_the_handles_its_growths_created(void **state) {
    (void)state;
    assert_int_equal(dmm_pool_layout(NULL, NULL, 0, NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_pool_layout", "a pool and a count are required", NULL);
    size_t n = 99;
    assert_int_equal(dmm_pool_layout(NULL, NULL, 0, &n), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(n, 0);
    for (int handles = 0; handles < 2; handles++) {
        fx *f = fx_open_with(handles, 0);
        assert_int_equal(dmm_pool_layout(f->pool, NULL, 0, NULL), DMM_ERR_INVALID_ARGUMENT);
        n = 99;
        DMM_OK_OR_FAIL(dmm_pool_layout(f->pool, NULL, 0, &n)); /* nothing grown yet */
        assert_int_equal(n, 0);
        uint64_t creates = calls(f, DMM_OP_CREATE);
        static const size_t sizes[] = {24 * MIB, 6 * MIB, 100 * MIB, MIB + 512, 40 * MIB};
        char *b[5];
        for (int i = 0; i < 5; i++) {
            b[i] = xmalloc(f, sizes[i]);
            memset(b[i], i + 1, sizes[i]);
        }
        xfree(f, b[1]);
        char *again = xmalloc(f, 4 * MIB); /* fits in b[1]'s place: no growth, no new span */
        DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
        dmm_pool_span *v = layout_of(f, &n);
        /* one span per handle created, together all the pool committed (no move, no trim here) */
        assert_int_equal(n, calls(f, DMM_OP_CREATE) - creates);
        assert_true(n >= 5);
        assert_int_equal(span_bytes(v, n), stats(f).committed_bytes.current);
        assert_well_formed(f, v, n);
        if (handles) { /* the torch handles: larger than one quantum, and not all alike */
            bool larger = false, unlike = false;
            for (size_t i = 0; i < n; i++) {
                larger |= v[i].bytes > C;
                unlike |= v[i].bytes != v[0].bytes;
            }
            assert_true(larger && unlike);
        } else {
            for (size_t i = 0; i < n; i++) assert_int_equal(v[i].bytes, C);
        }
        /* the offsets count from the pool's VA base: every block lies in the spans */
        for (int i = 0; i < 5; i++) {
            if (i == 1) continue;
            size_t bytes = 0;
            DMM_OK_OR_FAIL(dmm_pool_block_size(f->pool, b[i], &bytes));
            uint64_t lo = offset_of(f, b[i]), hi = lo + bytes, covered = 0;
            for (size_t k = 0; k < n; k++) {
                uint64_t end = v[k].offset + v[k].bytes;
                uint64_t a = v[k].offset > lo ? v[k].offset : lo, e = end < hi ? end : hi;
                if (a < e) covered += e - a;
            }
            assert_int_equal(covered, bytes);
        }
        /* an array too small: refused with the count it needs, nothing written */
        dmm_pool_span *small = malloc(n * sizeof *small); /* room for n, told n - 1 */
        assert_non_null(small);
        memset(small, 0xab, n * sizeof *small);
        size_t need = 0;
        assert_int_equal(dmm_pool_layout(f->pool, small, n - 1, &need), DMM_ERR_INVALID_ARGUMENT);
        assert_int_equal(need, n);
        dmm_test_error_mentions("dmm_pool_layout", "nothing was written", NULL);
        for (size_t k = 0; k < n * sizeof *small; k++) assert_int_equal(((unsigned char *)small)[k], 0xab);
        free(small);
        assert_int_equal(dmm_pool_layout(f->pool, NULL, 1, &need), DMM_ERR_INVALID_ARGUMENT); /* spans NULL, cap 1 */
        /* a larger array: the same spans, the rest untouched */
        dmm_pool_span *big = calloc(n + 1, sizeof *big);
        assert_non_null(big);
        memset(&big[n], 0xab, sizeof big[n]);
        DMM_OK_OR_FAIL(dmm_pool_layout(f->pool, big, n + 1, &need));
        assert_int_equal(need, n);
        assert_memory_equal(big, v, n * sizeof *v);
        for (size_t k = 0; k < sizeof big[n]; k++) assert_int_equal(((unsigned char *)&big[n])[k], 0xab);
        free(big);
        free(v);
        xfree(f, again);
        for (int i = 0; i < 5; i++)
            if (i != 1) xfree(f, b[i]);
        fx_close(f);
    }
}

static void a_trim_forgets_the_spans_it_gave_back(void **state) {
    (void)state;
    fx *f = fx_open_with(1, 0);
    char *keep = xmalloc(f, 24 * MIB), *gone = xmalloc(f, 100 * MIB);
    size_t n = 0;
    dmm_pool_span *before = layout_of(f, &n);
    uint64_t kept_bytes = 0;
    for (size_t i = 0; i < n; i++)
        if (before[i].offset < offset_of(f, keep) + 24 * MIB) kept_bytes += before[i].bytes;
    assert_int_equal(kept_bytes, 24 * MIB); /* keep's handles, and gone's after them */
    xfree(f, gone);
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, &released));
    assert_int_equal(released, 100 * MIB);
    size_t m = 0;
    dmm_pool_span *after = layout_of(f, &m);
    /* the spans left are keep's, as they were */
    assert_true(m > 0 && m < n);
    assert_int_equal(span_bytes(after, m), 24 * MIB);
    assert_memory_equal(after, before, m * sizeof *after);
    free(before);
    free(after);
    xfree(f, keep);
    fx_close(f);
}

/* ---- the warm layout ---- */

/* A workload with frees between its mallocs: some fit where a free block was, others grow (a new
 * place, or extending a free block next to unmapped VA). slot: which block; bytes 0: free it. */
typedef struct wop {
    int slot;
    size_t bytes;
} wop;
static const wop WORKLOAD[] = {
    {0, 24 * MIB}, {1, 6 * MIB},  {2, 300 * MIB}, {1, 0},          {3, 10 * MIB}, {4, 3 * MIB},
    {0, 0},        {5, 40 * MIB}, {6, MIB + 512}, {2, 0},          {7, 64 * MIB}, {6, 0},
    {8, 90 * MIB}, {9, 17 * MIB}, {3, 0},         {10, 200 * MIB}, {11, 5 * MIB},
};
#define WORKLOAD_N (sizeof WORKLOAD / sizeof WORKLOAD[0])
#define SLOTS 12

/* Runs WORKLOAD; off[i] = the offset of the block of op i from the pool's VA base (malloc ops).
 * Leaves the blocks of `live` (the slots still live) to the caller. */
static void run_workload(fx *f, uint64_t off[WORKLOAD_N], char *live[SLOTS]) {
    memset(live, 0, SLOTS * sizeof live[0]);
    for (size_t i = 0; i < WORKLOAD_N; i++) {
        int s = WORKLOAD[i].slot;
        if (WORKLOAD[i].bytes == 0) {
            xfree(f, live[s]);
            live[s] = NULL;
            off[i] = 0;
            continue;
        }
        live[s] = xmalloc(f, WORKLOAD[i].bytes);
        memset(live[s], (int)i, WORKLOAD[i].bytes); /* real memory */
        off[i] = offset_of(f, live[s]);
    }
}

static void free_all(fx *f, char *live[SLOTS]) {
    for (int s = 0; s < SLOTS; s++)
        if (live[s] != NULL) xfree(f, live[s]);
}

/* Twice per handle size: with retention at 2 × the live peak, where no growth moves chunks (every
 * chunk is a handle created where it is), and at 1.001 ×, where growths move chunks (a move makes a
 * handle again: the arena keeps no cache here), which the second run repeats, creating exactly the
 * handles the layout does not hold. */
static void the_same_workload_takes_every_handle_ahead_at_the_same_places(void **state) {
    (void)state;
    for (int run = 0; run < 4; run++) {
        int handles = run & 1, moves = run >> 1;
        uint32_t retain = moves ? 1 : 1000;
        fx *f1 = fx_open_with(handles, retain);
        uint64_t creates1 = calls(f1, DMM_OP_CREATE);
        uint64_t off1[WORKLOAD_N], off2[WORKLOAD_N];
        char *live[SLOTS];
        run_workload(f1, off1, live);
        DMM_OK_OR_FAIL(dmm_pool_check(f1->pool));
        dmm_pool_stats s1 = stats(f1);
        assert_int_equal(s1.chunks_aliased, 0);
        if (moves) assert_true(s1.chunks_moved > 0);
        else assert_int_equal(s1.chunks_moved, 0);
        creates1 = calls(f1, DMM_OP_CREATE) - creates1;
        size_t n = 0;
        dmm_pool_span *spans = layout_of(f1, &n);
        if (moves) assert_true(n > 0 && n < creates1);
        else assert_int_equal(n, creates1);
        free_all(f1, live);
        fx_close(f1);

        /* second run: a fresh arena and pool, told the first's layout */
        fx *f2 = fx_open_with(handles, retain);
        uint64_t got = 0, creates = calls(f2, DMM_OP_CREATE);
        DMM_OK_OR_FAIL(dmm_pool_warm_layout(f2->pool, NULL, spans, n, &got));
        assert_int_equal(got, span_bytes(spans, n));
        assert_int_equal(calls(f2, DMM_OP_CREATE) - creates, n); /* one handle per span */
        dmm_pool_stats w = stats(f2);
        assert_int_equal(w.committed_bytes.current, 0); /* ahead: unmapped in the pool's eyes */
        assert_int_equal(w.physical_bytes.current, (int64_t)got);
        DMM_OK_OR_FAIL(dmm_pool_check(f2->pool));
        uint64_t c0 = calls(f2, DMM_OP_CREATE), m0 = calls(f2, DMM_OP_MAP), a0 = calls(f2, DMM_OP_SET_ACCESS);
        run_workload(f2, off2, live);
        /* the sequence made no handle the layout holds: without moves, no create, map or set-access */
        assert_int_equal(calls(f2, DMM_OP_CREATE) - c0, creates1 - n);
        if (!moves) {
            assert_int_equal(calls(f2, DMM_OP_MAP) - m0, 0);
            assert_int_equal(calls(f2, DMM_OP_SET_ACCESS) - a0, 0);
        }
        DMM_OK_OR_FAIL(dmm_pool_check(f2->pool));
        dmm_pool_stats s2 = stats(f2);
        assert_int_equal(s2.layout_adopted, n);
        assert_int_equal(s2.layout_released, 0);
        assert_int_equal(s2.chunks_moved, s1.chunks_moved);
        assert_int_equal(s2.physical_bytes.peak, s1.physical_bytes.peak);
        assert_int_equal(s2.committed_bytes.peak, s1.committed_bytes.peak);
        assert_int_equal(s2.physical_bytes.current, s2.committed_bytes.current); /* nothing left ahead */
        /* every block where the first run put it */
        assert_memory_equal(off2, off1, sizeof off1);
        /* and the second pool records the handles it took: the same layout again */
        size_t n2 = 0;
        dmm_pool_span *spans2 = layout_of(f2, &n2);
        assert_int_equal(n2, n);
        assert_memory_equal(spans2, spans, n * sizeof *spans);
        print_message("  %s handles, %s: %zu spans (%llu MiB) all taken; %llu handles made in the first run\n",
                      handles ? "torch" : "quantum", moves ? "moves" : "no moves", n,
                      (unsigned long long)(got >> 20), (unsigned long long)creates1);
        free(spans2);
        free(spans);
        free_all(f2, live);
        fx_close(f2);
    }
}

static void a_different_workload_gives_back_the_handles_it_overlaps_and_a_trim_the_rest(void **state) {
    (void)state;
    /* the first run: 256 + 512 MiB, in 32 MiB handles */
    fx *f1 = fx_open_with(1, 0);
    char *x = xmalloc(f1, 256 * MIB), *y = xmalloc(f1, 512 * MIB);
    size_t n = 0;
    dmm_pool_span *spans = layout_of(f1, &n);
    xfree(f1, x);
    xfree(f1, y);
    fx_close(f1);

    /* the second: 24 then 100 MiB, in 8 and 12 MiB handles where the first run's 32 MiB ones lie ahead */
    fx *f = fx_open_with(1, 0);
    uint64_t ahead = 0;
    DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, spans, n, &ahead));
    assert_int_equal(ahead, span_bytes(spans, n));
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    uint64_t creates = calls(f, DMM_OP_CREATE);
    char *a = xmalloc(f, 24 * MIB);
    memset(a, 1, 24 * MIB);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    assert_true(stats(f).layout_released > 0);
    char *b = xmalloc(f, 100 * MIB);
    memset(b, 2, 100 * MIB);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* what went back: exactly the ahead spans that the growths overlap in part; what was taken: those
     * wholly inside a growth (the 100 MiB one at 24 MiB commits its span in one call: the handles at
     * 32 and 64 MiB lie in it), which the pool records as it grew them */
    size_t m = 0;
    dmm_pool_span *grown = layout_of(f, &m);
    uint64_t overlapped = 0, same = 0, left = 0;
    for (size_t i = 0; i < n; i++) {
        bool hit = false, equal = false;
        for (size_t k = 0; k < m; k++) {
            hit |= spans_overlap(spans[i], grown[k]);
            equal |= spans[i].offset == grown[k].offset && spans[i].bytes == grown[k].bytes;
        }
        overlapped += hit && !equal;
        same += equal;
        if (!hit) left += spans[i].bytes;
    }
    dmm_pool_stats s = stats(f);
    assert_int_equal(same, 2);
    assert_int_equal(s.layout_adopted, same);
    assert_true(overlapped > 0);
    assert_int_equal(s.layout_released, overlapped);
    assert_int_equal(calls(f, DMM_OP_CREATE) - creates, m - same); /* every handle it grew was made */
    assert_true(left > 0);
    assert_int_equal(s.physical_bytes.current, s.committed_bytes.current + (int64_t)left);
    /* a trim gives back every handle still ahead first, whatever its target */
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, UINT64_MAX, &released));
    assert_int_equal(released, left);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    s = stats(f);
    assert_int_equal(s.layout_released, n - same);
    assert_int_equal(s.physical_bytes.current, s.committed_bytes.current);
    /* and empty_cache leaves what the live block needs */
    xfree(f, b);
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    assert_int_equal(released, 100 * MIB);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    s = stats(f);
    assert_int_equal(s.physical_bytes.current, 24 * MIB);
    assert_int_equal(s.committed_bytes.current, s.allocated_bytes.current);
    assert_int_equal(s.layout_released, n - same);
    free(grown);
    free(spans);
    xfree(f, a);
    fx_close(f);
}

static void empty_cache_gives_back_every_handle_still_ahead(void **state) {
    (void)state;
    fx *f = fx_open_with(1, 0);
    static const dmm_pool_span spans[] = {{0, 32 * MIB, 0}, {64 * MIB, 8 * MIB, 0}, {200 * MIB, 2 * MIB, 0}};
    uint64_t ahead = 0;
    DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, spans, 3, &ahead));
    assert_int_equal(ahead, 42 * MIB);
    assert_int_equal(stats(f).physical_bytes.current, 42 * MIB);
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    assert_int_equal(released, 42 * MIB);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.physical_bytes.current, 0);
    assert_int_equal(s.layout_released, 3);
    assert_int_equal(s.layout_adopted, 0);
    /* nothing is ahead any more: a growth there creates its handle */
    uint64_t creates = calls(f, DMM_OP_CREATE);
    void *p = xmalloc(f, 32 * MIB);
    assert_true(calls(f, DMM_OP_CREATE) > creates);
    assert_int_equal(stats(f).layout_adopted, 0);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, p);
    fx_close(f);
}

/* A growth whose one handle covers several handles ahead (a pool with larger handles than the run
 * that recorded them) takes those wholly inside it as they are and creates one handle for each gap;
 * when that create fails, the malloc fails and what it took goes back ahead (nothing changed). */
static void a_growth_over_several_handles_ahead_takes_them_and_fills_the_gaps(void **state) {
    (void)state;
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.chunk_bytes = C;
    pc.max_chunk_bytes = 64 * MIB; /* a 24 MiB growth: one handle of 24 MiB */
    fx *f = dmm_test_pool_fx_open(&pc, 0);
    /* [0, 8) and [16, 24) MiB lie inside the growth below, [40, 44) MiB outside it */
    static const dmm_pool_span spans[] = {{0, 8 * MIB, 0}, {16 * MIB, 8 * MIB, 0}, {40 * MIB, 4 * MIB, 0}};
    DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, spans, 3, NULL));
    dmm_pool_stats s0 = stats(f);
    assert_int_equal(s0.physical_bytes.current, 20 * MIB);
    /* the gap's create fails: the malloc fails, the two handles it took are ahead again */
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_CREATE, 1, 1, DMM_ERR_OUT_OF_MEMORY));
    uint64_t creates = calls(f, DMM_OP_CREATE);
    void *p = NULL;
    assert_int_equal(dmm_pool_malloc(f->pool, 24 * MIB, NULL, &p), DMM_ERR_OUT_OF_MEMORY);
    assert_null(p);
    assert_int_equal(calls(f, DMM_OP_CREATE) - creates, 1);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.layout_adopted, 0);
    assert_int_equal(s.layout_released, 0);
    assert_int_equal(s.physical_bytes.current, 20 * MIB);
    assert_int_equal(s.committed_bytes.current, 0);
    assert_int_equal(count_of(f), 0);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* the plan is spent: the same malloc takes both and creates the gap [8, 16) MiB */
    creates = calls(f, DMM_OP_CREATE);
    char *a = xmalloc(f, 24 * MIB);
    assert_int_equal(offset_of(f, a), 0);
    memset(a, 4, 24 * MIB);
    assert_int_equal(calls(f, DMM_OP_CREATE) - creates, 1);
    s = stats(f);
    assert_int_equal(s.layout_adopted, 2);
    assert_int_equal(s.layout_released, 0);
    assert_int_equal(s.physical_bytes.current, 28 * MIB); /* 24 MiB committed, 4 still ahead */
    assert_int_equal(s.committed_bytes.current, 24 * MIB);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* the layout records the three handles as they are */
    size_t n = 0;
    dmm_pool_span *v = layout_of(f, &n);
    assert_int_equal(n, 3);
    static const dmm_pool_span want[] = {{0, 8 * MIB, 0}, {8 * MIB, 8 * MIB, 0}, {16 * MIB, 8 * MIB, 0}};
    assert_memory_equal(v, want, sizeof want);
    free(v);
    /* the handle ahead goes first, then the three chunks; the layout forgets them */
    xfree(f, a);
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_trim(f->pool, 0, &released));
    assert_int_equal(released, 28 * MIB);
    s = stats(f);
    assert_int_equal(s.layout_released, 1);
    assert_int_equal(s.physical_bytes.current, 0);
    assert_int_equal(count_of(f), 0);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    fx_close(f);
}

/* A create that fails stops the warm layout: the spans before it stay ahead, the error names the span,
 * and the same call again commits the rest. */
static void a_failed_commit_stops_the_warm_layout_and_keeps_what_it_committed_ahead(void **state) {
    (void)state;
    fx *f = fx_open_with(0, 0);
    static const dmm_pool_span spans[] = {{0, C, 0}, {4 * C, 2 * C, 0}, {10 * C, C, 0}};
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_CREATE, 2, 1, DMM_ERR_OUT_OF_MEMORY));
    uint64_t got = 0;
    assert_int_equal(dmm_pool_warm_layout(f->pool, NULL, spans, 3, &got), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("dmm_pool_warm_layout", "committing span 1 failed", NULL);
    assert_int_equal(got, C);
    assert_int_equal(stats(f).physical_bytes.current, C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, spans, 3, &got));
    assert_int_equal(got, 3 * C); /* span 0 is ahead already */
    assert_int_equal(stats(f).physical_bytes.current, 4 * C);
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(f->pool, &released));
    assert_int_equal(released, 4 * C);
    assert_int_equal(stats(f).layout_released, 3);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    fx_close(f);
}

/* Each bad list is refused before anything: no driver call, no heap, nothing committed. */
static void a_warm_layout_refuses_bad_spans_and_changes_nothing(void **state) {
    (void)state;
    fx *f = fx_open_with(0, 0);
    const uint64_t va = f->pool->va_bytes, top = UINT64_MAX - C + 1; /* top: whole quanta, 2^64 - C */
    const struct {
        dmm_pool_span spans[3];
        size_t count;
        const char *span, *fault;
    } bad[] = {
        {{{0, 2 * C, 0}, {4 * C, 0, 0}}, 2, "span 1 ", "has no bytes"},
        {{{C + 4096, C, 0}}, 1, "span 0 ", "is not whole quanta"},
        {{{0, C, 0}, {2 * C, C + 512, 0}}, 2, "span 1 ", "is not whole quanta"},
        {{{0, C, 0}, {2 * C, DMM_POOL_WARM_HANDLE_BYTES + C, 0}}, 2, "span 1 ", "is larger than DMM_POOL_WARM_HANDLE_BYTES"},
        {{{0, C, 0}, {4 * C, C, 0}, {va - C, 2 * C, 0}}, 3, "span 2 ", "does not lie inside the pool's VA"},
        {{{va, C, 0}}, 1, "span 0 ", "does not lie inside the pool's VA"},
        {{{top, 2 * C, 0}}, 1, "span 0 ", "does not lie inside the pool's VA"}, /* offset + bytes wraps to C */
        {{{0, C, 0}, {top, C, 0}}, 2, "span 1 ", "does not lie inside the pool's VA"},
        {{{10 * C, 2 * C, 0}, {0, 4 * C, 0}, {2 * C, 2 * C, 0}}, 3, "spans 1 ", "and 2 "},
        {{{0, C, 0}, {0, C, 0}}, 2, "spans ", "overlap"},
    };
    uint64_t made = calls(f, DMM_OP_ANY);
    dmm_pool_stats s0 = stats(f);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t got = 1;
        assert_int_equal(dmm_pool_warm_layout(f->pool, NULL, bad[i].spans, bad[i].count, &got),
                         DMM_ERR_INVALID_ARGUMENT);
        dmm_test_error_mentions("dmm_pool_warm_layout", bad[i].span, bad[i].fault, "nothing changed", NULL);
        assert_int_equal(got, 0);
    }
    /* more spans than the VA has quanta cannot help overlapping */
    size_t many = (size_t)(va / C) + 1;
    dmm_pool_span *v = calloc(many, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < many; i++) v[i] = (dmm_pool_span){(uint64_t)i * C, C, 0};
    assert_int_equal(dmm_pool_warm_layout(f->pool, NULL, v, many, NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_pool_warm_layout", "cannot fit", NULL);
    free(v);
    assert_int_equal(dmm_pool_warm_layout(NULL, NULL, bad[0].spans, 1, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_pool_warm_layout(f->pool, NULL, NULL, 1, NULL), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_pool_warm_layout", "spans", NULL);
    /* nothing reached the driver, nothing was committed, no heap was made */
    assert_int_equal(calls(f, DMM_OP_ANY), made);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.physical_bytes.current, s0.physical_bytes.current);
    assert_int_equal(s.committed_bytes.current, 0);
    assert_int_equal(s.heaps.current, s0.heaps.current);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* while the same pool commits a good list (the checks above were not vacuous) */
    uint64_t got = 0;
    DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, bad[0].spans, 1, &got));
    assert_int_equal(got, 2 * C);
    assert_int_equal(calls(f, DMM_OP_CREATE), 1);
    assert_int_equal(stats(f).physical_bytes.current, s0.physical_bytes.current + (int64_t)(2 * C));
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    fx_close(f);
}

static void spans_over_held_memory_are_skipped_and_a_second_warm_layout_commits_nothing(void **state) {
    (void)state;
    fx *f = fx_open_with(0, 0);
    char *a = xmalloc(f, 4 * C); /* the pool holds [0, 4C) live */
    assert_int_equal(offset_of(f, a), 0);
    char *b = xmalloc(f, 2 * C); /* and [4C, 6C) free, mapped */
    assert_int_equal(offset_of(f, b), 4 * C);
    xfree(f, b);
    /* [0, C) and [2C, 3C) are held; [3C, 5C) is held in part; [5C, 6C) is free but mapped; [8C, 10C) and
     * [12C, 13C) are unmapped */
    static const dmm_pool_span spans[] = {{0, C, 0}, {2 * C, C, 0}, {3 * C, 2 * C, 0}, {5 * C, C, 0}, {8 * C, 2 * C, 0},
                                          {12 * C, C, 0}};
    uint64_t got = 0, creates = calls(f, DMM_OP_CREATE);
    dmm_pool_stats s0 = stats(f);
    DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, spans, 6, &got));
    assert_int_equal(got, 3 * C);
    assert_int_equal(calls(f, DMM_OP_CREATE) - creates, 2);
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.physical_bytes.current, s0.physical_bytes.current + (int64_t)(3 * C));
    assert_int_equal(s.committed_bytes.current, 6 * C);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    /* again: all of it is held or ahead now */
    uint64_t before = calls(f, DMM_OP_ANY);
    got = 1;
    DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, spans, 6, &got));
    assert_int_equal(got, 0);
    assert_int_equal(calls(f, DMM_OP_ANY), before);
    assert_int_equal(stats(f).physical_bytes.current, s.physical_bytes.current);
    /* the handles ahead are no part of the layout until a growth takes them */
    assert_int_equal(count_of(f), 6); /* a: 4 handles of C, b: 2 */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, a);
    fx_close(f);
}

static void destroy_gives_back_the_handles_still_ahead(void **state) {
    (void)state;
    for (int take = 0; take < 2; take++) {
        fx *f = fx_open_with(1, 0);
        static const dmm_pool_span spans[] = {
            {0, 8 * MIB, 0}, {8 * MIB, 8 * MIB, 0}, {16 * MIB, 8 * MIB, 0}, {64 * MIB, 32 * MIB, 0}};
        DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, spans, 4, NULL));
        if (take) { /* the first three are taken by a growth, then freed: the pool's own free chunks */
            void *p = xmalloc(f, 24 * MIB);
            assert_int_equal(offset_of(f, p), 0);
            xfree(f, p);
            assert_int_equal(stats(f).layout_adopted, 3);
        }
        dmm_driver_census c;
        memset(&c, 0, sizeof c);
        c.size = sizeof c;
        DMM_OK_OR_FAIL(f->host->ops->census(f->host, &c));
        assert_int_equal(c.handles, 4);
        assert_int_equal(c.mapped_bytes, 56 * MIB);
        DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
        DMM_OK_OR_FAIL(dmm_pool_destroy(f->pool));
        /* the pool's handles went with it, before the arena's own destroy */
        memset(&c, 0, sizeof c);
        c.size = sizeof c;
        DMM_OK_OR_FAIL(f->host->ops->census(f->host, &c));
        assert_int_equal(c.handles, 0);
        assert_int_equal(c.handle_bytes, 0);
        assert_int_equal(c.mapped_bytes, 0);
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->arena));
        dmm_test_census_zero(f->host);
        dmm_driver_destroy(f->drv);
        dmm_driver_destroy(f->host);
        free(f);
    }
}

/* A layout is one stream's: a two-stream pool's layout, warmed on the first stream, commits ahead only
 * the first heap's cluster of spans (the second heap's VA began a region further), so the second
 * stream grows where it did the first time, and the peak is the first run's. */
static void another_streams_spans_are_left_to_it(void **state) {
    (void)state;
    dmm_pool_span *spans = NULL;
    size_t n = 0;
    int64_t peak[2] = {0, 0};
    uint64_t where_b[2] = {0, 0};
    for (int run = 0; run < 2; run++) {
        fx *f = fx_open_with(1, 0);
        dmm_stream b = NULL;
        DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &b));
        uint64_t ahead = 0;
        if (run) DMM_OK_OR_FAIL(dmm_pool_warm_layout(f->pool, NULL, spans, n, &ahead));
        void *p[4];
        p[0] = xmalloc(f, 24 * MIB);
        p[1] = dmm_test_pool_malloc(f->pool, 40 * MIB, b);
        p[2] = xmalloc(f, 100 * MIB);
        p[3] = dmm_test_pool_malloc(f->pool, 10 * MIB, b);
        where_b[run] = offset_of(f, p[1]);
        peak[run] = stats(f).physical_bytes.peak;
        if (run == 0) {
            spans = layout_of(f, &n);
            assert_true(n > 2);
        } else {
            uint64_t first_heap = 0; /* the spans below stream b's first block */
            for (size_t i = 0; i < n; i++)
                if (spans[i].offset < where_b[0]) first_heap += spans[i].bytes;
            assert_int_equal(ahead, first_heap);
            assert_int_equal(stats(f).layout_released, 0);
        }
        xfree(f, p[0]);
        dmm_test_pool_free(f->pool, p[1], b);
        xfree(f, p[2]);
        dmm_test_pool_free(f->pool, p[3], b);
        DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
        dmm_status ds = dmm_pool_destroy(f->pool); /* b's last free waits for its event: sync and retry */
        for (int tries = 0; ds == DMM_ERR_BUSY && tries < 100; tries++) {
            DMM_OK_OR_FAIL(f->drv->ops->stream_synchronize(f->drv, b));
            ds = dmm_pool_destroy(f->pool);
        }
        DMM_OK_OR_FAIL(ds);
        DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, b));
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->arena));
        dmm_test_census_zero(f->host);
        dmm_driver_destroy(f->drv);
        dmm_driver_destroy(f->host);
        free(f);
    }
    assert_int_equal(where_b[1], where_b[0]);
    assert_int_equal(peak[1], peak[0]);
    free(spans);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_pool_records_the_handles_its_growths_created),
        cmocka_unit_test(a_trim_forgets_the_spans_it_gave_back),
        cmocka_unit_test(the_same_workload_takes_every_handle_ahead_at_the_same_places),
        cmocka_unit_test(a_different_workload_gives_back_the_handles_it_overlaps_and_a_trim_the_rest),
        cmocka_unit_test(empty_cache_gives_back_every_handle_still_ahead),
        cmocka_unit_test(a_growth_over_several_handles_ahead_takes_them_and_fills_the_gaps),
        cmocka_unit_test(a_failed_commit_stops_the_warm_layout_and_keeps_what_it_committed_ahead),
        cmocka_unit_test(a_warm_layout_refuses_bad_spans_and_changes_nothing),
        cmocka_unit_test(spans_over_held_memory_are_skipped_and_a_second_warm_layout_commits_nothing),
        cmocka_unit_test(destroy_gives_back_the_handles_still_ahead),
        cmocka_unit_test(another_streams_spans_are_left_to_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
