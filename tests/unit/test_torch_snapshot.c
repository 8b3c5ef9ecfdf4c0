/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_torch_snapshot.c — what the device front's snapshot lays out (the pool's committed
 * ranges, dmm_pool_committed; src/device/blocks.c; the snapshot JSON of src/device/device.c) over the
 * host driver.
 *
 * What is proven: the pool's committed ranges sum to the pool's own committed bytes and every live
 * pool block lies inside one run, after growth, frees, trims and moves of 300 seeded rounds on three
 * streams; the table of pool blocks holds exactly the pool's live blocks (count and bytes) once tracking is on,
 * is empty while it is off, and a snapshot counts the blocks from before it as untracked; a free the
 * pool refuses (its cross-stream event fails) leaves the table as it was, and the recorder's trace
 * true (the block allocated again under a new id); the snapshot JSON carries the runs, the blocks, the tag and
 * graph segments, the history of the pool's events (alloc, free, map, unmap, in the order they
 * happened, each block event with the number a context function gave it, the kinds a skip mask names
 * left out), and says the map is exact. With DMM_TORCH_SNAPSHOT_FIXTURE set (CTest does), the
 * snapshot of a scenario with pool, tag and graph memory is written there for
 * tests/python/test_torch_layout.py, which turns it into PyTorch's layout and checks its totals.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testkit.h"

#include "device/device_internal.h"

#include "torch_kit.h"

#include "torch_fx.h"

typedef kit_torch_fx fx;

static fx *fx_open_with(bool fault, bool track) {
    fx *f = malloc(sizeof *f);
    kit_torch_fx_open(f, fault, 0);
    if (track) dmm_device_track_blocks(f->c); /* from the start: every pool block is in the table */
    return f;
}

static fx *fx_open(void) { return fx_open_with(false, true); }
static fx *fx_open_over_fault(void) { return fx_open_with(true, true); }

static void fx_close(fx *f) {
    assert_int_equal(dmm_atomic_load_relaxed(&f->c->blocks.cur), 0);
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f->c, NULL));
    kit_torch_fx_close(f);
    free(f);
}

static void *xmalloc(fx *f, size_t bytes, dmm_stream s) { return kit_torch_malloc(f, bytes, s); }
static void xfree(fx *f, void *p, dmm_stream s) { kit_torch_free(f, p, s); }

/* A context function: allocations numbered 1, 2, 3 …, frees 1001, 1002 … (0 with no_frees) */
typedef struct numbering {
    uint32_t allocs, frees;
    bool no_frees;
} numbering;

static uint32_t number_event(void *arg, int event) {
    numbering *k = arg;
    if (event != DMM_DEVICE_EVENT_FREE) return ++k->allocs;
    ++k->frees;
    return k->no_frees ? 0 : 1000 + k->frees;
}

/* The context number of the first (or, with `last`, the last) history event [action,addr,…] in the JSON
 * (UINT32_MAX: none). */
static uint32_t event_context_at(const char *js, int action, const void *addr, bool last) {
    char key[64];
    snprintf(key, sizeof key, "[%d,%llu,", action, (unsigned long long)(uintptr_t)addr);
    const char *e = NULL;
    for (const char *at = strstr(js, key); at != NULL && (last || e == NULL); at = strstr(at + 1, key)) e = at;
    unsigned long long size, stream, t;
    unsigned ctx;
    if (e == NULL || sscanf(e + strlen(key), "%llu,%llu,%llu,%u]", &size, &stream, &t, &ctx) != 4) return UINT32_MAX;
    return ctx;
}

static uint32_t event_context(const char *js, int action, const void *addr) {
    return event_context_at(js, action, addr, false);
}

/* The pool's committed ranges against its own stats, and the table's blocks against both. */
static void check_pool_layout(fx *f) {
    dmm_pool_stats ps = dmm_test_pool_stats(f->c->pool);
    size_t n = 0;
    uint64_t *runs = kit_pool_runs(f->c, &n);
    uint64_t committed = 0;
    for (size_t i = 0; i < n; i++) {
        committed += runs[2 * i + 1];
        assert_int_equal(runs[2 * i] % f->c->granule, 0);
        if (i > 0) assert_true(runs[2 * i - 2] + runs[2 * i - 1] < runs[2 * i]); /* sorted, coalesced */
    }
    assert_int_equal(committed, ps.committed_bytes.current);
    device_block_at *b = NULL;
    size_t nb = dmm__device_blocks_collect(f->c, &b);
    assert_true(nb != SIZE_MAX);
    assert_int_equal(nb, ps.allocations.current);
    uint64_t bytes = 0;
    size_t r = 0;
    for (size_t i = 0; i < nb; i++) {
        bytes += b[i].b.len;
        if (i > 0) assert_true(b[i - 1].addr + b[i - 1].b.len <= b[i].addr);
        while (r < n && runs[2 * r] + runs[2 * r + 1] <= b[i].addr) r++;
        if (r == n || b[i].addr < runs[2 * r] || b[i].addr + b[i].b.len > runs[2 * r] + runs[2 * r + 1])
            fail_msg("pool block %#llx (+%llu) lies in no committed run", (unsigned long long)b[i].addr,
                     (unsigned long long)b[i].b.len);
    }
    assert_int_equal(bytes, ps.allocated_bytes.current);
    free(b);
    free(runs);
}

static void the_pool_view_follows_growth_frees_trims_and_moves(void **state) {
    (void)state;
    fx *f = fx_open();
    dmm_stream streams[3] = {NULL, f->s1, f->s2};
    enum { SLOTS = 24 };
    void *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    int st[SLOTS] = {0};
    unsigned seed = 12345;
    for (int round = 0; round < 300; round++) {
        int k = (int)(rand_r(&seed) % SLOTS);
        if (p[k] != NULL) {
            xfree(f, p[k], streams[st[k]]);
            p[k] = NULL;
        } else {
            /* small blocks and multi-granule ones, so that chunks are shared, freed whole and moved */
            sz[k] = rand_r(&seed) % 4 == 0 ? ((size_t)(1 + rand_r(&seed) % 6) << 20) + 4096
                                           : 512 * (size_t)(1 + rand_r(&seed) % 512);
            st[k] = (int)(rand_r(&seed) % 3);
            p[k] = xmalloc(f, sz[k], streams[st[k]]);
        }
        if (round % 37 == 36) DMM_OK_OR_FAIL(dmm_device_empty_cache(f->c, NULL));
        check_pool_layout(f);
    }
    dmm_pool_stats ps = dmm_test_pool_stats(f->c->pool);
    assert_true(ps.chunks_decommitted > 0); /* trims (and moves) happened: the decommit path was followed */
    for (int k = 0; k < SLOTS; k++)
        if (p[k] != NULL) xfree(f, p[k], streams[st[k]]);
    check_pool_layout(f);
    fx_close(f);
}

static void a_refused_free_leaves_the_table_and_the_trace_true(void **state) {
    (void)state;
    fx *f = fx_open_over_fault();
    void *a = xmalloc(f, 4096, f->s1);
    char trace[64];
    kit_temp_file(trace, "dmm-test-snapshot-trace");
    DMM_OK_OR_FAIL(dmm_device_record_start(f->c, trace, NULL));
    void *r = xmalloc(f, 2048, f->s1);
    /* a free on another stream records an event; when that fails, the pool refuses and the block stays live */
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_EVENT_RECORD, 1, 2, DMM_ERR_DRIVER));
    assert_int_equal(dmm_device_free(f->c, a, f->s2), DMM_ERR_DRIVER);
    assert_int_equal(dmm_device_free(f->c, r, f->s2), DMM_ERR_DRIVER);
    DMM_OK_OR_FAIL(dmm_fault_clear(f->drv));
    check_pool_layout(f); /* the table still holds both */
    device_block b;
    assert_true(dmm__device_blocks_take(f->c, a, &b));
    assert_int_equal(b.len, 4096);
    assert_ptr_equal(b.stream, f->s1);
    dmm__device_blocks_add(f->c, a, b.len, b.req, b.stream, b.context);
    xfree(f, r, f->s1);
    dmm_device_record_stats st = kit_torch_record_stop(f);
    /* r: allocated, freed (refused), allocated again under a new id, freed; a: from before, not in it */
    assert_int_equal(st.allocations, 2);
    assert_int_equal(st.frees, 2);
    assert_int_equal(st.untracked_frees, 1);
    assert_int_equal(st.live_bytes, 0);
    unlink(trace);
    xfree(f, a, f->s1);
    check_pool_layout(f);
    fx_close(f);
}

static char *snapshot_json(fx *f);

/* Kinds in the skip mask take no entry; a free the pool refuses keeps the block's context; off again,
 * events carry 0. */
static void the_history_skips_kinds_and_keeps_contexts(void **state) {
    (void)state;
    fx *f = fx_open_over_fault();
    numbering k = {0, 0, false};
    DMM_OK_OR_FAIL(dmm_device_history(f->c, 64));
    DMM_OK_OR_FAIL(dmm_device_history_context(f->c, 1u << DMM_DEVICE_EVENT_FREE, number_event, &k));
    void *a = xmalloc(f, 4096, f->s1);
    void *b = xmalloc(f, 2048, f->s1);
    xfree(f, b, f->s1);
    DMM_OK_OR_FAIL(dmm_fault_plan(f->drv, DMM_OP_EVENT_RECORD, 1, 1, DMM_ERR_DRIVER));
    assert_int_equal(dmm_device_free(f->c, a, f->s2), DMM_ERR_DRIVER); /* refused: a stays live */
    DMM_OK_OR_FAIL(dmm_fault_clear(f->drv));
    char *js = snapshot_json(f);
    assert_int_equal(event_context(js, 0, a), 1);
    assert_int_equal(event_context(js, 0, b), 2);
    assert_int_equal(event_context(js, 1, b), UINT32_MAX); /* frees skipped */
    assert_int_equal(k.frees, 2); /* the device asked (the torch adapter's function answers only what it records) */
    char blk[128];
    snprintf(blk, sizeof blk, "[%llu,4096,4096,%llu,1]", (unsigned long long)(uintptr_t)a,
             (unsigned long long)(uintptr_t)f->s1);
    assert_non_null(strstr(js, blk)); /* a, live again after the refusal, with its allocation's number */
    free(js);
    k.no_frees = true; /* a free without a context of its own shows its allocation's */
    DMM_OK_OR_FAIL(dmm_device_history_context(f->c, 0, number_event, &k));
    void *d = xmalloc(f, 1024, NULL);
    xfree(f, d, NULL);
    js = snapshot_json(f);
    assert_int_equal(event_context_at(js, 1, d, true), event_context_at(js, 0, d, true));
    assert_int_equal(event_context_at(js, 0, d, true), 3);
    free(js);
    DMM_OK_OR_FAIL(dmm_device_history_context(f->c, 0, NULL, NULL));
    void *c = xmalloc(f, 512, NULL);
    js = snapshot_json(f);
    assert_int_equal(event_context_at(js, 0, c, true), 0);
    free(js);
    xfree(f, c, NULL);
    xfree(f, a, f->s1);
    DMM_OK_OR_FAIL(dmm_device_history(f->c, 0));
    fx_close(f);
}

static void tracking_is_off_until_asked_and_counts_what_came_before(void **state) {
    (void)state;
    fx *f = fx_open_with(false, false);
    assert_false(dmm__device_blocks_tracking(f->c));
    void *a = xmalloc(f, 4096, NULL);
    char *js = snapshot_json(f);
    assert_non_null(strstr(js, "\"block_tracking\":false,\"pool_blocks_untracked\":1,\"pool_blocks\":[]"));
    free(js);
    dmm_device_track_blocks(f->c);
    void *b = xmalloc(f, 4096, NULL);
    js = snapshot_json(f);
    assert_non_null(strstr(js, "\"block_tracking\":true,\"pool_blocks_untracked\":1,"));
    free(js);
    xfree(f, a, NULL); /* from before: not in the table, its free takes nothing */
    js = snapshot_json(f);
    assert_non_null(strstr(js, "\"pool_blocks_untracked\":0,"));
    free(js);
    xfree(f, b, NULL);
    check_pool_layout(f);
    fx_close(f);
}

static char *snapshot_json(fx *f) {
    size_t need = 0;
    assert_int_equal(dmm_device_snapshot_json(f->c, NULL, 0, &need), DMM_ERR_INVALID_ARGUMENT);
    dmm_clear_error();
    char *buf = malloc(need + 1);
    DMM_OK_OR_FAIL(dmm_device_snapshot_json(f->c, buf, need + 1, &need));
    return buf;
}

static void the_snapshot_json_lays_out_pool_tags_and_graphs(void **state) {
    (void)state;
    fx *f = fx_open();
    assert_int_equal(dmm_device_history(f->c, ((uint64_t)1 << 26) + 1), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("ask for fewer", NULL);
    DMM_OK_OR_FAIL(dmm_device_history(f->c, 4096));
    numbering k = {0, 0, false};
    assert_int_equal(dmm_device_history_context(f->c, 16, number_event, &k), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("skip mask", NULL);
    DMM_OK_OR_FAIL(dmm_device_history_context(f->c, 0, number_event, &k));
    void *big = xmalloc(f, (size_t)8 << 20, NULL); /* mapped, freed and unmapped: map and unmap events */
    xfree(f, big, NULL);
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f->c, NULL));
    void *a = xmalloc(f, 1000, NULL);
    void *b = xmalloc(f, (size_t)3 << 20, f->s1);
    void *gap = xmalloc(f, 8192, f->s1);
    void *c = xmalloc(f, 5000, f->s1);
    assert_true((uintptr_t)gap < (uintptr_t)c);
    xfree(f, gap, f->s1); /* a hole between live blocks */
    DMM_OK_OR_FAIL(dmm_device_tag_begin("weights"));
    void *w1 = xmalloc(f, (size_t)1 << 20, NULL);
    void *w2 = xmalloc(f, 700, NULL);
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f->c, (uint64_t)4 << 20, f->s2));
    kit_capture(f->fault, f->s2, 9);
    void *g = xmalloc(f, 3000, f->s2);
    kit_capture(f->fault, NULL, 0);
    check_pool_layout(f);
    char *js = snapshot_json(f);
    assert_non_null(strstr(js, "\"pool_map_exact\":true"));
    assert_non_null(strstr(js, "\"pool_blocks_untracked\":0"));
    assert_non_null(strstr(js, "\"pool_segments\":[["));
    char blk[128];
    /* address, bytes, req, stream, context: a is the second allocation the context function numbered */
    snprintf(blk, sizeof blk, "[%llu,1024,1000,0,2]", (unsigned long long)(uintptr_t)a);
    assert_non_null(strstr(js, blk));
    snprintf(blk, sizeof blk, "[%llu,5120,5000,%llu,5]", (unsigned long long)(uintptr_t)c,
             (unsigned long long)(uintptr_t)f->s1);
    assert_non_null(strstr(js, blk));
    assert_int_equal(k.allocs, 5); /* big, a, b, gap, c: the tag's and the graph's blocks ask for none */
    assert_int_equal(event_context(js, 0, big), 1);
    assert_int_equal(event_context(js, 1, big), 1001);
    assert_int_equal(event_context(js, 1, gap), 1002);
    assert_int_equal(event_context(js, 0, c), 5);
    snprintf(blk, sizeof blk, "[%llu,1048576,1048576]", (unsigned long long)(uintptr_t)w1);
    assert_non_null(strstr(js, blk)); /* the tag's block, in its segment */
    assert_non_null(strstr(js, "\"mapped_bytes\":"));
    snprintf(blk, sizeof blk, "\"capture_id\":9,\"blocks\":[[%llu,3072,3000]]", (unsigned long long)(uintptr_t)g);
    assert_non_null(strstr(js, blk));
    /* the history: the big block's alloc, free, its range's map and unmap, then the rest */
    snprintf(blk, sizeof blk, "[0,%llu,8388608,0,", (unsigned long long)(uintptr_t)big);
    assert_non_null(strstr(js, blk));
    snprintf(blk, sizeof blk, "[1,%llu,8388608,0,", (unsigned long long)(uintptr_t)big);
    assert_non_null(strstr(js, blk));
    assert_non_null(strstr(js, "\"history\":{\"on\":true,\"dropped\":0,\"events\":[[2,"));
    assert_non_null(strstr(js, "[3,"));
    const char *out = getenv("DMM_TORCH_SNAPSHOT_FIXTURE");
    if (out != NULL && out[0] != '\0') {
        FILE *fp = fopen(out, "w");
        if (fp == NULL) fail_msg("cannot write the fixture '%s'", out);
        fputs(js, fp);
        fclose(fp);
    }
    free(js);
    xfree(f, g, f->s2);
    DMM_OK_OR_FAIL(dmm_device_graph_release(f->c, 9, f->s2));
    xfree(f, w1, NULL);
    xfree(f, w2, NULL);
    xfree(f, a, NULL);
    xfree(f, b, f->s1);
    xfree(f, c, f->s1);
    fx_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_pool_view_follows_growth_frees_trims_and_moves),
        cmocka_unit_test(a_refused_free_leaves_the_table_and_the_trace_true),
        cmocka_unit_test(the_snapshot_json_lays_out_pool_tags_and_graphs),
        cmocka_unit_test(the_history_skips_kinds_and_keeps_contexts),
        cmocka_unit_test(tracking_is_off_until_asked_and_counts_what_came_before),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
