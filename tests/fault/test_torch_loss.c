/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_torch_loss.c — the torch adapter core after a device loss (adapters/torch/adapter.h,
 * "Device loss"), over fault(host) with a sticky DMM_ERR_DEVICE_LOST plan on every op.
 *
 * Compiled like tests/fault/test_torch_faults.c (the adapter's sources are included). The context
 * before the loss holds: live pool blocks and a cached one; a tag offloaded to host whose decommits are
 * queued behind events held incomplete (dmm_fault_hold_events); a resident tag with a live block; an
 * emptied tag segment and an idle graph segment queued for release behind held events; a graph
 * segment with a live capture block. Then the events are let go (without the loss every queued
 * request would run at the next poll) and the loss strikes; the first call that meets it is, by
 * variant, the deferred queue's event query (dmm_device_poll), another user of the arena (the pool's
 * own growth), or the adapter's own driver call (graph_release's event). Then:
 *   - every adapter call that would reach the driver returns DMM_ERR_DEVICE_LOST with a sentence;
 *     stats still answer; frees are accepted (pool, tag and graph blocks);
 *   - destroy before the confirmation: DMM_ERR_DEVICE_LOST, nothing changed (still queued);
 *   - the confirmation (dmm_device_confirm_lost, or dmm_arena_confirm_context_terminated directly)
 *     takes every queued request back unrun (queued = 0), the offloaded tag is OFFLOADED with the
 *     failure DEVICE_LOST; destroy then succeeds with blocks still live;
 *   - the driver saw NO call after the one that found the loss (dmm_fault_calls), through the
 *     confirmation and the destroy; every pinned copy went back through ext.host_free; the governor's
 *     leases are back to zero and it is destroyed; LeakSanitizer (the ASan build) finds nothing.
 * And on a healthy context, confirm_lost is refused (INVALID_ARGUMENT) and the normal teardown works. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#include "device/device_internal.h"

#define MIB ((uint64_t)1 << 20)

#include "torch_kit.h"

static const char *OFF = "loss-offloaded", *RES = "loss-resident", *EMPTY = "loss-emptied";

typedef struct fx {
    dmm_driver *host, *drv;
    dmm_governor *gov;
    dmm_device *c;
    dmm_stream s1;
    void *pool[3], *off[3], *res, *gblk;
} fx;

static void *tmalloc(fx *f, const char *tag, size_t bytes) {
    void *p = NULL;
    if (tag != NULL) DMM_OK_OR_FAIL(dmm_device_tag_begin(tag));
    DMM_OK_OR_FAIL(dmm_device_malloc(f->c, bytes, f->s1, &p));
    if (tag != NULL) DMM_OK_OR_FAIL(dmm_device_tag_end());
    memset(p, 0x5a, bytes);
    return p;
}

static void *capture_malloc(fx *f, uint64_t id, size_t bytes) {
    kit_capture(f->drv, f->s1, id);
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f->c, bytes, f->s1, &p));
    kit_capture(f->drv, NULL, 0);
    return p;
}

static void fx_open(fx *f) {
    memset(f, 0, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(f->host, &f->drv));
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &f->gov));
    dmm_device_config k = kit_torch_config(0);
    DMM_OK_OR_FAIL(dmm_device_create(f->drv, f->gov, &k, &f->c));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &f->s1));
}

/* The busy context of the header, everything queued behind held events. */
static void fx_busy(fx *f) {
    f->pool[0] = tmalloc(f, NULL, 2 * MIB);
    f->pool[1] = tmalloc(f, NULL, 5000);
    f->pool[2] = tmalloc(f, NULL, 6 * MIB);
    DMM_OK_OR_FAIL(dmm_device_free(f->c, f->pool[2], f->s1)); /* cached */
    f->pool[2] = NULL;
    f->off[0] = tmalloc(f, OFF, 1 * MIB);
    f->off[1] = tmalloc(f, OFF, 3 * MIB + 100);
    f->off[2] = tmalloc(f, OFF, 5000);
    f->res = tmalloc(f, RES, 2 * MIB);
    void *e = tmalloc(f, EMPTY, 1 * MIB);
    DMM_OK_OR_FAIL(dmm_device_free(f->c, e, f->s1)); /* its segment is empty */
    /* graphs: A holds capture 77's live block; B was capture 78's, released and idle behind its event */
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f->c, 4 * MIB, f->s1));
    f->gblk = capture_malloc(f, 77, 1 * MIB);
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f->c, 4 * MIB, f->s1));
    void *g = capture_malloc(f, 78, 1 * MIB);
    DMM_OK_OR_FAIL(dmm_device_free(f->c, g, f->s1));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f->c, 78, f->s1));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f->c, NULL)); /* the empty tag segment and B: queued */
    DMM_OK_OR_FAIL(dmm_device_offload(f->c, OFF, DMM_DEVICE_TO_HOST, f->s1));
    assert_int_equal(f->c->tags[dmm__device_tag_find(OFF)].state, TAG_OFFLOADING);
    assert_true(dmm_atomic_load_relaxed(&f->c->queued) >= 3); /* a decommit, a tag segment's release, a graph segment's release */
    assert_true(kit_host_allocs(f->drv) > 0);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false)); /* complete now: only the loss keeps them queued */
}

enum { BY_QUEUE, BY_POOL, BY_ADAPTER, NVARIANTS };
static const char *variant_name[NVARIANTS] = {"the deferred queue's event query", "the pool's growth",
                                              "the adapter's own event (graph_release)"};

static void expect_lost(dmm_status s, const char *what) {
    if (s != DMM_ERR_DEVICE_LOST)
        fail_msg("after the loss, %s returned %s (%s), not DMM_ERR_DEVICE_LOST", what, dmm_status_str(s),
                 dmm_last_error());
    if (strlen(dmm_last_error()) == 0) fail_msg("after the loss, %s gave no sentence", what);
    dmm_test_error_mentions("lost", NULL);
}

/* Driver calls since `calls` (the ANY count, which leaves out host_free: a pinned copy goes back to the
 * host whether or not the device lives, src/driver/call.h): none may follow the loss. */
static void calls_unchanged(fx *f, uint64_t calls, const char *when) {
    uint64_t now = dmm_fault_calls(f->drv, DMM_OP_ANY);
    if (now != calls) fail_msg("%s: %llu driver call(s) after the loss", when, (unsigned long long)(now - calls));
}

static void run_loss(int variant, bool confirm_on_arena) {
    fx f;
    fx_open(&f);
    fx_busy(&f);
    uint64_t queued = dmm_atomic_load_relaxed(&f.c->queued);
    DMM_OK_OR_FAIL(dmm_fault_plan(f.drv, DMM_OP_ANY, 1, UINT32_MAX, DMM_ERR_DEVICE_LOST));
    uint64_t before = dmm_fault_calls(f.drv, DMM_OP_ANY);
    /* the first call that meets the loss */
    if (variant == BY_QUEUE) {
        expect_lost(dmm_device_poll(f.c, NULL), "the poll that finds the loss");
    } else if (variant == BY_POOL) {
        void *p = NULL;
        dmm_status s = dmm_pool_malloc(f.c->pool, 64 * MIB, f.s1, &p); /* growth: the arena's calls */
        assert_int_equal(s, DMM_ERR_DEVICE_LOST);
        assert_null(p);
    } else {
        expect_lost(dmm_device_graph_release(f.c, 77, f.s1), "the graph_release that finds the loss");
    }
    uint64_t calls = dmm_fault_calls(f.drv, DMM_OP_ANY);
    if (calls <= before) fail_msg("%s made no driver call", variant_name[variant]);
    assert_true(dmm__device_lost(f.c));

    /* the battery: no driver call, DEVICE_LOST with a sentence */
    uint64_t q = 99;
    expect_lost(dmm_device_poll(f.c, &q), "poll");
    assert_int_equal(q, queued); /* nothing ran, nothing was dropped */
    uint64_t released = 99;
    expect_lost(dmm_device_empty_cache(f.c, &released), "empty_cache");
    assert_int_equal(released, 0);
    expect_lost(dmm_device_offload(f.c, RES, DMM_DEVICE_TO_HOST, f.s1), "offload of a resident tag");
    expect_lost(dmm_device_offload_wait(f.c, OFF), "offload_wait");
    expect_lost(dmm_device_restore(f.c, OFF, f.s1), "restore");
    expect_lost(dmm_device_release_host(f.c, RES), "release_host");
    expect_lost(dmm_device_graph_reserve(f.c, 8 * MIB, f.s1), "graph_reserve");
    expect_lost(dmm_device_graph_release(f.c, 77, f.s1), "graph_release");
    void *p = NULL;
    assert_int_equal(dmm_device_malloc(f.c, 64 * MIB, f.s1, &p), DMM_ERR_DEVICE_LOST); /* needs growth */
    assert_null(p);
    DMM_OK_OR_FAIL(dmm_device_tag_begin(RES));
    assert_int_equal(dmm_device_malloc(f.c, 64 * MIB, f.s1, &p), DMM_ERR_DEVICE_LOST); /* a new tag segment */
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    assert_null(p);
    char buf[16384];
    size_t need = 0;
    DMM_OK_OR_FAIL(dmm_device_stats_json(f.c, buf, sizeof buf, &need)); /* stats still answer */
    /* frees are bookkeeping: a pool block, the resident tag's block, the capture's block */
    DMM_OK_OR_FAIL(dmm_device_free(f.c, f.pool[0], f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.c, f.res, f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.c, f.gblk, f.s1));
    /* destroy before the confirmation: refused, nothing changed */
    assert_int_equal(dmm_device_destroy(f.c), DMM_ERR_DEVICE_LOST);
    dmm_test_error_mentions("destroy", "lost", "confirm", "nothing changed", NULL);
    assert_int_equal(dmm_atomic_load_relaxed(&f.c->queued), queued);
    calls_unchanged(&f, calls, "the battery");

    /* the confirmation: queue taken back, tags marked */
    if (confirm_on_arena) {
        DMM_OK_OR_FAIL(dmm_arena_confirm_context_terminated(f.c->arena)); /* destroy does the rest */
    } else {
        DMM_OK_OR_FAIL(dmm_device_confirm_lost(f.c));
        assert_int_equal(dmm_atomic_load_relaxed(&f.c->queued), 0);
        size_t n = 99;
        DMM_OK_OR_FAIL(dmm_deferred_pending(f.c->q, &n));
        assert_int_equal(n, 0);
        device_tag *t = &f.c->tags[dmm__device_tag_find(OFF)];
        assert_int_equal(t->state, TAG_OFFLOADED);
        assert_int_equal(t->pending, 0);
        assert_int_equal(t->failure, DMM_ERR_DEVICE_LOST);
        expect_lost(dmm_device_restore(f.c, OFF, f.s1), "restore after the confirmation");
        expect_lost(dmm_device_poll(f.c, NULL), "poll after the confirmation");
        DMM_OK_OR_FAIL(dmm_device_free(f.c, f.off[0], f.s1)); /* still bookkeeping */
    }
    calls_unchanged(&f, calls, "the confirmation");
    /* destroy: with blocks still live (a pool block, two of the offloaded tag's) */
    assert_true(dmm_atomic_load_relaxed(&f.c->blocks.cur) > 0);
    DMM_OK_OR_FAIL(dmm_device_destroy(f.c));
    f.c = NULL;
    calls_unchanged(&f, calls, "the destroy");
    assert_int_equal(kit_host_frees(f.drv), kit_host_allocs(f.drv)); /* every pinned copy went back */
    DMM_OK_OR_FAIL(dmm_governor_destroy(f.gov));
    dmm_driver_destroy(f.drv); /* the host driver gives back what the context took (its warning) */
    dmm_driver_destroy(f.host);
}

static void loss_found_by_the_queue(void **state) {
    (void)state;
    run_loss(BY_QUEUE, false);
}

static void loss_found_by_the_pool(void **state) {
    (void)state;
    run_loss(BY_POOL, false);
}

static void loss_found_by_the_adapter(void **state) {
    (void)state;
    run_loss(BY_ADAPTER, false);
}

static void loss_confirmed_on_the_arena_directly(void **state) {
    (void)state;
    run_loss(BY_QUEUE, true);
}

/* No loss: confirm_lost refuses, and the normal teardown works (the queue drains, the pinned copies go). */
static void no_loss_no_confirmation(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    fx_busy(&f);
    assert_false(dmm__device_lost(f.c));
    assert_int_equal(dmm_device_confirm_lost(f.c), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("not lost", NULL);
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f.c, OFF));
    DMM_OK_OR_FAIL(dmm_device_restore(f.c, OFF, f.s1));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f.c, 77, f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.c, f.pool[0], f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.c, f.pool[1], f.s1));
    for (int i = 0; i < 3; i++) DMM_OK_OR_FAIL(dmm_device_free(f.c, f.off[i], f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.c, f.res, f.s1));
    DMM_OK_OR_FAIL(dmm_device_free(f.c, f.gblk, f.s1));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f.c, NULL));
    DMM_OK_OR_FAIL(dmm_device_poll(f.c, NULL));
    DMM_OK_OR_FAIL(dmm_device_destroy(f.c));
    assert_int_equal(kit_host_frees(f.drv), kit_host_allocs(f.drv));
    DMM_OK_OR_FAIL(f.drv->ops->stream_destroy(f.drv, f.s1));
    DMM_OK_OR_FAIL(dmm_governor_destroy(f.gov));
    dmm_test_census_zero(f.host);
    dmm_driver_destroy(f.drv);
    dmm_driver_destroy(f.host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loss_found_by_the_queue),
        cmocka_unit_test(loss_found_by_the_pool),
        cmocka_unit_test(loss_found_by_the_adapter),
        cmocka_unit_test(loss_confirmed_on_the_arena_directly),
        cmocka_unit_test(no_loss_no_confirmation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
