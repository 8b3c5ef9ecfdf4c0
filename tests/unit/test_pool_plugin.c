/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_pool_plugin.c — the pool over a plugin's mechanism behaves as over the built-in
 * arena (issue 16: the pool asks its mechanism for capabilities, never for an arena).
 *
 * Side by side, each scenario runs once over the arena and once over the test plugin's "mock"
 * mechanism (tests/plugin/mock_plugin.c), both over the fault driver over the host driver, with the
 * same pool config; what the pool decided (where blocks land, chunks aliased and moved, committed
 * and physical bytes, unmaps) and the bytes visible at each place must be the same.
 *  - a plugin of ABI minor 1 that fills the optional virtual-backing slots (variant ALIAS): with
 *    every fence pending, a stream reuses its own free chunk at once through an alias (the plugin's
 *    alias slot really called), the old place unmapped once the fence completes; a full retention
 *    limit moves a free chunk; a seeded churn under pending fences gives the same pool statistics;
 *  - a plugin of minor 0 (variant GOOD, no such slots): no alias, the pool grows instead, exactly
 *    as the arena's pool does with aliases turned off (no_alias), and still works;
 *  - a plugin that hands back a VA range 256 bytes off its alignment (issue 11): the pool is
 *    refused at creation, before it could carve misaligned blocks and read past its chunk table.
 * Every case ends with nothing live: pools and mechanisms destroyed, the plugin unloaded, the
 * driver's census zero.
 */
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#include "../plugin/mock_plugin.h"

#define MIB ((size_t)1 << 20)
#define C (2 * MIB) /* the host driver's default granularity: one chunk */

/* Over which mechanism a fixture's pool runs. */
typedef enum { OVER_ARENA, OVER_PLUGIN_ALIAS, OVER_PLUGIN_MINOR0 } over;

typedef struct fx {
    dmm_driver *host, *drv; /* drv = the fault driver over host */
    dmm_plugin *plugin;     /* NULL over the arena */
    const char *path;       /* the plugin's file */
    dmm_mechanism *mech;
    dmm_pool *pool;
} fx;

static fx *fx_open(over o, const dmm_pool_config *given, uint64_t arena_cache) {
    fx *f = calloc(1, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(f->host, &f->drv));
    if (o == OVER_ARENA) {
        dmm_arena_config ac;
        memset(&ac, 0, sizeof ac);
        ac.size = sizeof ac;
        ac.reserve_bytes = (uint64_t)16 << 30;
        ac.cache_limit_bytes = arena_cache;
        DMM_OK_OR_FAIL(dmm_arena_create(f->drv, &ac, &f->mech));
    } else {
        f->path = o == OVER_PLUGIN_ALIAS ? DMM_TEST_PLUGIN_ALIAS : DMM_TEST_PLUGIN_GOOD;
        DMM_OK_OR_FAIL(dmm_plugin_load(f->path, &f->plugin));
        assert_int_equal(dmm_plugin_abi_minor(f->plugin), o == OVER_PLUGIN_ALIAS ? 1 : 0);
        DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(f->plugin, "mock", f->drv, NULL, &f->mech));
    }
    /* the same VA for both (the arena's reservation would otherwise size it) */
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    if (given != NULL) pc = *given;
    pc.size = sizeof pc;
    pc.va_bytes = (uint64_t)1 << 30;
    DMM_OK_OR_FAIL(dmm_pool_create(f->mech, f->drv, &pc, &f->pool));
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    return f;
}

static dmm_pool_stats stats(fx *f) { return dmm_test_pool_stats(f->pool); }

static void fx_close(fx *f) {
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    dmm_pool_stats s = stats(f);
    assert_int_equal(s.allocations.current, 0);
    DMM_OK_OR_FAIL(dmm_pool_destroy(f->pool));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->mech));
    if (f->plugin != NULL) DMM_OK_OR_FAIL(dmm_plugin_unload(f->plugin));
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->drv);
    dmm_driver_destroy(f->host);
    free(f);
}

static uint64_t calls(fx *f, dmm_driver_op op) { return dmm_fault_calls(f->drv, op); }

static char *xmalloc(fx *f, size_t bytes, dmm_stream s) { return dmm_test_pool_malloc(f->pool, bytes, s); }
static void xfree(fx *f, void *p, dmm_stream s) { dmm_test_pool_free(f->pool, p, s); }

/* How often the plugin's 1.1 slot `slot` was called. */
static uint64_t plugin_slot_calls(const fx *f, const char *slot) {
    uint64_t n = mock_slot_calls(f->path, slot);
    if (n == UINT64_MAX) fail_msg("%s: no mock_test_slot_calls or no slot '%s'", f->path, slot);
    return n;
}

static void poll_until_reaped(fx *f) { dmm_test_pool_poll_until_reaped(f->pool); }

/* What one scenario saw; compared field by field between the two mechanisms. */
typedef struct seen {
    int64_t y_at;                            /* where the growth landed, in chunks from x1 */
    uint64_t aliased, moved, decommitted;    /* pool stats after the growth (decommitted: after the reap) */
    int64_t committed, physical, physical_peak;
    uint64_t unmaps;                         /* driver unmaps during the growth */
    int byte_new, byte_old;                  /* bytes visible at the new place, and at the old after a write */
    int64_t committed_after;                 /* after the reap */
    uint64_t unmaps_after, releases_after;   /* driver calls of the reap */
    int byte_after;                          /* at the new place after the reap */
} seen;

static void same(const seen *a, const seen *b) {
#define SAME(field)                                                                                    \
    if (a->field != b->field)                                                                         \
        fail_msg("%s differs: %lld over the arena, %lld over the plugin", #field, (long long)a->field, \
                 (long long)b->field)
    SAME(y_at);
    SAME(aliased);
    SAME(moved);
    SAME(decommitted);
    SAME(committed);
    SAME(physical);
    SAME(physical_peak);
    SAME(unmaps);
    SAME(byte_new);
    SAME(byte_old);
    SAME(committed_after);
    SAME(unmaps_after);
    SAME(releases_after);
    SAME(byte_after);
#undef SAME
}

/* What the pool decided in the growth just made. */
static void note_growth(fx *f, seen *v) {
    dmm_pool_stats s = stats(f);
    v->aliased = s.chunks_aliased;
    v->moved = s.chunks_moved;
    v->committed = s.committed_bytes.current;
    v->physical = s.physical_bytes.current;
    v->physical_peak = s.physical_bytes.peak;
}

/* test_pool's alias scenario: x1 x2 x3 on stream a, every fence held pending, x1 (filled with 0x11)
 * and x3 freed; 2 chunks fit nowhere, the limit is full and x1's chunk may not move, but a's own
 * new work runs after a's old work: the pool aliases x1's chunk behind x3's. Then the fence
 * completes and the polls unmap the old place. */
static seen alias_scenario(fx *f) {
    seen v;
    memset(&v, 0, sizeof v);
    dmm_stream a = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    char *x1 = xmalloc(f, C, a), *x2 = xmalloc(f, C, a), *x3 = xmalloc(f, C, a);
    assert_ptr_equal(x3, x1 + 2 * C);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true));
    memset(x1, 0x11, C);
    xfree(f, x1, a);
    xfree(f, x3, a);
    uint64_t unmaps = calls(f, DMM_OP_UNMAP), releases = calls(f, DMM_OP_RELEASE);
    char *y = xmalloc(f, 2 * C, a);
    v.y_at = (y - x1) / (int64_t)C;
    v.unmaps = calls(f, DMM_OP_UNMAP) - unmaps;
    note_growth(f, &v);
    v.byte_new = (unsigned char)y[C + 5];
    memset(y, 0x22, 2 * C);
    v.byte_old = (unsigned char)x1[7]; /* the old place, still mapped: the same memory where aliased */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    poll_until_reaped(f);
    dmm_pool_stats s = stats(f);
    v.committed_after = s.committed_bytes.current;
    v.decommitted = s.chunks_decommitted;
    v.unmaps_after = calls(f, DMM_OP_UNMAP) - unmaps - v.unmaps;
    v.releases_after = calls(f, DMM_OP_RELEASE) - releases;
    v.byte_after = (unsigned char)y[C + 5];
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, y, a);
    xfree(f, x2, a);
    return v;
}

static void a_plugin_that_fills_the_slots_aliases_a_free_chunk_as_the_arena_does(void **state) {
    (void)state;
    fx *f = fx_open(OVER_ARENA, NULL, 4 * C);
    seen arena = alias_scenario(f);
    fx_close(f);
    /* what the arena's pool does (tests/unit/test_pool.c checks the same numbers) */
    assert_int_equal(arena.y_at, 2);
    assert_int_equal(arena.aliased, 1);
    assert_int_equal(arena.moved, 0);
    assert_int_equal(arena.committed, 4 * C); /* the old place is still mapped */
    assert_int_equal(arena.physical, 3 * C);
    assert_int_equal(arena.unmaps, 0);   /* nothing unmapped under a's work */
    assert_int_equal(arena.byte_new, 0x11); /* one memory at two places */
    assert_int_equal(arena.byte_old, 0x22);
    assert_int_equal(arena.committed_after, 3 * C);
    assert_int_equal(arena.unmaps_after, 1);
    assert_int_equal(arena.releases_after, 0); /* the memory lives on at y */

    f = fx_open(OVER_PLUGIN_ALIAS, NULL, 0);
    assert_true(dmm_mechanism_has_slot(f->mech, DMM_SLOT_ALIAS));
    uint64_t aliases = plugin_slot_calls(f, "alias");
    seen plugin = alias_scenario(f);
    aliases = plugin_slot_calls(f, "alias") - aliases;
    fx_close(f);
    same(&arena, &plugin);
    assert_int_equal(aliases, 1); /* the plugin's slot did it */
}

/* test_pool's move scenario: no stream, so every fence is complete; the limit is full, so x1's free
 * chunk moves behind x3's (decommit there, commit here) instead of growing. */
static seen move_scenario(fx *f) {
    seen v;
    memset(&v, 0, sizeof v);
    char *x1 = xmalloc(f, C, NULL), *x2 = xmalloc(f, C, NULL), *x3 = xmalloc(f, C, NULL);
    assert_ptr_equal(x3, x1 + 2 * C);
    memset(x2, 0x33, C);
    xfree(f, x1, NULL);
    xfree(f, x3, NULL);
    uint64_t unmaps = calls(f, DMM_OP_UNMAP);
    char *y = xmalloc(f, 2 * C, NULL);
    v.y_at = (y - x1) / (int64_t)C;
    v.unmaps = calls(f, DMM_OP_UNMAP) - unmaps;
    note_growth(f, &v);
    memset(y, 0x44, 2 * C);
    v.byte_new = (unsigned char)y[2 * C - 1];
    v.byte_old = (unsigned char)x2[C - 1]; /* the neighbour is untouched */
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    xfree(f, y, NULL);
    xfree(f, x2, NULL);
    return v;
}

static void a_plugin_that_fills_the_slots_moves_a_free_chunk_as_the_arena_does(void **state) {
    (void)state;
    fx *f = fx_open(OVER_ARENA, NULL, 4 * C);
    seen arena = move_scenario(f);
    fx_close(f);
    assert_int_equal(arena.y_at, 2);
    assert_int_equal(arena.moved, 1);
    assert_int_equal(arena.aliased, 0);
    assert_int_equal(arena.committed, 3 * C);
    assert_int_equal(arena.physical_peak, 3 * C);
    assert_int_equal(arena.unmaps, 1);
    assert_int_equal(arena.byte_old, 0x33);

    f = fx_open(OVER_PLUGIN_ALIAS, NULL, 0);
    seen plugin = move_scenario(f);
    fx_close(f);
    same(&arena, &plugin);
}

/* A seeded churn of whole-chunk blocks (1-4 chunks, at most `cap` chunks live) on one stream, with
 * every fence pending; the pool's statistics say what it decided. */
static dmm_pool_stats churn_under_pending_fences(fx *f, unsigned seed) {
    enum { MAXB = 64, CAP = 16 };
    dmm_stream a = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &a));
    char *w[4];
    for (int i = 0; i < 4; i++) w[i] = xmalloc(f, 4 * C, a); /* warm-up: a reaches its peak */
    for (int i = 0; i < 4; i++) xfree(f, w[i], a);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true));
    char *b[MAXB];
    int sz[MAXB], n = 0, live = 0;
    for (int r = 0; r < 600; r++) {
        int k = 1 + (int)(rand_r(&seed) % 4);
        if (n < MAXB && live + k <= CAP && (rand_r(&seed) % 2 == 0 || n == 0)) {
            b[n] = xmalloc(f, (size_t)k * C, a);
            memset(b[n], r & 0x7f, (size_t)k * C);
            sz[n++] = k;
            live += k;
        } else if (n > 0) {
            int i = (int)(rand_r(&seed) % (unsigned)n);
            assert_int_equal((unsigned char)b[i][(size_t)sz[i] * C - 1], (unsigned char)b[i][0]); /* intact */
            xfree(f, b[i], a);
            live -= sz[i];
            b[i] = b[--n];
            sz[i] = sz[n];
        }
    }
    while (n > 0) xfree(f, b[--n], a);
    dmm_pool_stats s = stats(f);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    poll_until_reaped(f);
    DMM_OK_OR_FAIL(dmm_pool_check(f->pool));
    return s;
}

static void a_churn_under_pending_fences_gives_the_same_pool_over_both(void **state) {
    (void)state;
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.retain_permille = 1; /* every growth beyond the live peak must reuse what the pool holds */
    pc.settle_permille = 1; /* a fixed limit */
    fx *f = fx_open(OVER_ARENA, &pc, 0);
    dmm_pool_stats arena = churn_under_pending_fences(f, 7);
    fx_close(f);
    assert_true(arena.chunks_aliased > 0);
    f = fx_open(OVER_PLUGIN_ALIAS, &pc, 0);
    uint64_t aliases = plugin_slot_calls(f, "alias");
    dmm_pool_stats plugin = churn_under_pending_fences(f, 7);
    aliases = plugin_slot_calls(f, "alias") - aliases;
    fx_close(f);
    print_message("  churn: %llu grows, %llu aliased, %llu moved, physical peak %lld MiB (both)\n",
                  (unsigned long long)arena.grows, (unsigned long long)arena.chunks_aliased,
                  (unsigned long long)arena.chunks_moved, (long long)arena.physical_bytes.peak >> 20);
    assert_int_equal(plugin.grows, arena.grows);
    assert_int_equal(plugin.chunks_aliased, arena.chunks_aliased);
    assert_int_equal(plugin.chunks_moved, arena.chunks_moved);
    assert_int_equal(plugin.chunks_committed, arena.chunks_committed);
    assert_int_equal(plugin.chunks_decommitted, arena.chunks_decommitted);
    assert_int_equal(plugin.committed_bytes.current, arena.committed_bytes.current);
    assert_int_equal(plugin.committed_bytes.peak, arena.committed_bytes.peak);
    assert_int_equal(plugin.physical_bytes.peak, arena.physical_bytes.peak);
    assert_int_equal(aliases, plugin.chunks_aliased); /* each through the plugin's slot */
}

/* A plugin of minor 0 has no alias slot: the pool cannot reuse a fenced chunk, so it grows — what
 * the arena's pool does with aliases turned off — and the memory is still good. */
static void a_minor_0_plugin_never_aliases_and_the_pool_still_works(void **state) {
    (void)state;
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.no_alias = 1;
    fx *f = fx_open(OVER_ARENA, &pc, 4 * C);
    seen arena = alias_scenario(f);
    fx_close(f);
    assert_int_equal(arena.aliased, 0);
    assert_int_equal(arena.moved, 0);
    assert_int_equal(arena.y_at, 2);
    assert_int_equal(arena.committed, 4 * C); /* new memory for the second chunk */
    assert_int_equal(arena.physical, 4 * C);
    assert_int_equal(arena.byte_old, 0x11); /* another memory: x1's old bytes stay */

    f = fx_open(OVER_PLUGIN_MINOR0, NULL, 0);
    assert_false(dmm_mechanism_has_slot(f->mech, DMM_SLOT_ALIAS));
    uint64_t creates = calls(f, DMM_OP_CREATE);
    seen plugin = alias_scenario(f);
    assert_true(calls(f, DMM_OP_CREATE) > creates);
    fx_close(f);
    same(&arena, &plugin);
}

/* The mock plugin (flags: MOCK_FLAG_*) loaded over a new host driver: its mechanism. */
static dmm_mechanism *mock_over_host(uint32_t flags, dmm_driver **host, dmm_plugin **p) {
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, host));
    DMM_OK_OR_FAIL(dmm_plugin_load(DMM_TEST_PLUGIN_GOOD, p));
    mock_config mc = {sizeof mc, flags, 0};
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(*p, "mock", *host, &mc, &m));
    return m;
}

/* Issue 11, defect 1: the plugin's range for the pool's VA is MOCK_SKEW bytes off the chunk
 * alignment the pool asked for. The host refuses it (and gives it back) so the pool is never made
 * over it; before, the pool handed out misaligned blocks and read past its chunk-length table. */
static void a_pool_over_a_plugin_with_a_misaligned_range_is_refused(void **state) {
    (void)state;
    dmm_driver *host = NULL;
    dmm_plugin *p = NULL;
    dmm_mechanism *m = mock_over_host(MOCK_FLAG_MISALIGN, &host, &p);
    dmm_pool_config pc = {.size = sizeof pc, .va_bytes = (uint64_t)1 << 30};
    dmm_pool *pool = NULL;
    dmm_status s = dmm_pool_create(m, host, &pc, &pool);
    if (s == DMM_OK) /* the defect: its blocks would be misaligned and its chunk table read past */
        fail_msg("dmm_pool_create over a VA range %u bytes off its alignment succeeded", MOCK_SKEW);
    assert_int_equal(s, DMM_ERR_DRIVER);
    dmm_test_error_mentions("dmm_pool_create", "256 bytes off its", "plugin 'mock'", NULL);
    assert_null(pool);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m)); /* nothing live: the range was given back */
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    dmm_test_census_zero(host);
    dmm_driver_destroy(host);
}

/* Issue 35 item 18: a plugin whose counts went below zero never drives the pool's statistics
 * negative (its physical bytes are the mechanism's owned bytes). */
static void a_pool_over_a_plugin_with_negative_counts_reports_none(void **state) {
    (void)state;
    dmm_driver *host = NULL;
    dmm_plugin *p = NULL;
    dmm_mechanism *m = mock_over_host(MOCK_FLAG_NEGATIVE_STATS, &host, &p);
    dmm_pool_config pc = {.size = sizeof pc, .va_bytes = (uint64_t)1 << 30};
    dmm_pool *pool = NULL;
    DMM_OK_OR_FAIL(dmm_pool_create(m, host, &pc, &pool));
    dmm_pool_stats ps = dmm_test_pool_stats(pool);
    assert_true(ps.physical_bytes.current >= 0);
    assert_true(ps.physical_bytes.peak >= 0);
    DMM_OK_OR_FAIL(dmm_pool_destroy(pool));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    dmm_test_census_zero(host);
    dmm_driver_destroy(host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_plugin_that_fills_the_slots_aliases_a_free_chunk_as_the_arena_does),
        cmocka_unit_test(a_plugin_that_fills_the_slots_moves_a_free_chunk_as_the_arena_does),
        cmocka_unit_test(a_churn_under_pending_fences_gives_the_same_pool_over_both),
        cmocka_unit_test(a_minor_0_plugin_never_aliases_and_the_pool_still_works),
        cmocka_unit_test(a_pool_over_a_plugin_with_a_misaligned_range_is_refused),
        cmocka_unit_test(a_pool_over_a_plugin_with_negative_counts_reports_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
