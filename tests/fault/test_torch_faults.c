/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_torch_faults.c — the fault SWEEP of the torch adapter core's operations that make
 * driver calls (adapters/torch/adapter.h): offload (to host, discard; one and two pieces),
 * offload_wait, restore, empty_cache, graph reserve, malloc (pool, tag segment) and destroy.
 *
 * Compiled like tests/unit/test_torch_adapter.c: the adapter's sources are included (they are not part
 * of libdmm), over fault(host) with the same host extras (malloc for pinned memory, a capture switch),
 * so it builds and runs wherever that test does, with or without cuda.h.
 *
 * For each operation and n = 1, 2, … the n-th driver call fails (once, or sticky: every call from n
 * on) and after EVERY step:
 *   - dmm_arena_check and dmm_pool_check pass;
 *   - accounting is conserved: the driver's census (mapped, handle bytes) = the arena's stats = the
 *     adapter's hook counts = the governor's lease usage = the device tier's used, and the host lease
 *     = the pinned bytes held;
 *   - the outcome is honest: an offload that failed "before anything was decommitted" left the tag
 *     resident with every byte mapped; a failed restore left the tag offloaded; a failed graph reserve
 *     added no segment; a failed malloc handed nothing out; a refused destroy left a context that works;
 *   - the live blocks the operation promises to keep hold their contents;
 * then, with the plan cleared, the object works again (an offload completes, a restore brings back the
 * same bytes at the same addresses, a capture is served from reserved memory) and everything tears
 * down to a zero census. The loop stops when the operation makes fewer than n driver calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#include "device/device_internal.h"

#define MIB ((uint64_t)1 << 20)

#include "torch_kit.h"

enum { MAX_LIVE = 8 };

typedef struct blk {
    unsigned char *p;
    size_t bytes;
    unsigned seed;
    bool live, tagged;
} blk;

typedef struct fx {
    dmm_driver *host, *drv;
    dmm_governor *gov;
    dmm_device *c; /* NULL once destroyed */
    dmm_stream s1;
    blk b[MAX_LIVE];
    bool contents_gone; /* the tag was discarded */
} fx;

static const char *TAG = "sweep";
static int quarantined_tags; /* steps whose tag was quarantined by a failed offload (see works_again) */
static int late_destroys;    /* destroys refused after the pool went, then resumed */

static unsigned char pat(unsigned seed, size_t k) { return (unsigned char)(seed * 41u + k * 7u + (k >> 12)); }

static void fx_open(fx *f) {
    memset(f, 0, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(f->host, &f->drv));
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &f->gov));
    dmm_device_config k = kit_torch_config(0);
    DMM_OK_OR_FAIL(dmm_device_create(f->drv, f->gov, &k, &f->c));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &f->s1));
}

static int fx_malloc(fx *f, size_t bytes, bool tagged) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (!f->b[i].live) {
            void *p = NULL;
            if (tagged) DMM_OK_OR_FAIL(dmm_device_tag_begin(TAG));
            DMM_OK_OR_FAIL(dmm_device_malloc(f->c, bytes, f->s1, &p));
            if (tagged) DMM_OK_OR_FAIL(dmm_device_tag_end());
            blk *b = &f->b[i];
            b->p = p;
            b->bytes = bytes;
            b->seed = (unsigned)i + 3u;
            b->live = true;
            b->tagged = tagged;
            for (size_t k = 0; k < bytes; k++) b->p[k] = pat(b->seed, k);
            return i;
        }
    fail_msg("%s", "too many live blocks");
    return -1;
}

static void fx_free(fx *f, int i) {
    DMM_OK_OR_FAIL(dmm_device_free(f->c, f->b[i].p, f->s1));
    f->b[i].live = false;
}

static int nlive(const fx *f) {
    int n = 0;
    for (int i = 0; i < MAX_LIVE; i++) n += f->b[i].live;
    return n;
}

static device_tag *tag_of(fx *f) {
    int id = dmm__device_tag_find(TAG);
    return id >= 0 ? &f->c->tags[id] : NULL;
}

static bool tag_resident(fx *f) {
    device_tag *t = tag_of(f);
    return t == NULL || t->state == TAG_RESIDENT;
}

static void contents_intact(fx *f, bool tagged_too) {
    for (int i = 0; i < MAX_LIVE; i++) {
        blk *b = &f->b[i];
        if (!b->live || (b->tagged && (!tagged_too || f->contents_gone))) continue;
        for (size_t k = 0; k < b->bytes; k++)
            if (b->p[k] != pat(b->seed, k))
                fail_msg("live block %d (%zu bytes at %p%s) lost its contents at byte %zu", i, b->bytes, (void *)b->p,
                         b->tagged ? ", tagged" : "", k);
    }
}

static dmm_driver_census census(fx *f) {
    dmm_driver_census c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    DMM_OK_OR_FAIL(f->host->ops->census(f->host, &c));
    return c;
}

/* The equalities every step keeps. */
static void conserved(fx *f, const char *what) {
    dmm_device *c = f->c;
    if (dmm_arena_check(c->arena) != DMM_OK) fail_msg("%s: dmm_arena_check: %s", what, dmm_last_error());
    if (dmm_pool_check(c->pool) != DMM_OK) fail_msg("%s: dmm_pool_check: %s", what, dmm_last_error());
    dmm_driver_census cen = census(f);
    dmm_stats as;
    memset(&as, 0, sizeof as);
    as.size = sizeof as;
    DMM_OK_OR_FAIL(dmm_mechanism_stats(c->arena, &as));
    uint64_t owned = 0, mapped = 0, howned = 0, hmapped = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(c->gov, c->lease, &owned, &mapped));
    DMM_OK_OR_FAIL(dmm_lease_usage(c->gov, c->host_lease, &howned, &hmapped));
    dmm_tier_usage tu;
    memset(&tu, 0, sizeof tu);
    tu.size = sizeof tu;
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(c->gov, c->dev, &tu)); /* the host driver's device is the host
                                                                      tier: it holds the pinned copies too */
    if (cen.mapped_bytes != (uint64_t)as.mapped_bytes.current || cen.mapped_bytes != dmm__device_mapped(c) ||
        cen.mapped_bytes != mapped || cen.mapped_bytes + hmapped != tu.used[DMM_AXIS_MAPPED] ||
        cen.handle_bytes != (uint64_t)as.owned_bytes.current || cen.handle_bytes != dmm__device_owned(c) ||
        cen.handle_bytes != owned || cen.handle_bytes + howned != tu.used[DMM_AXIS_OWNED])
        fail_msg("%s: mapped: census %llu, arena %lld, hook %llu, lease %llu, tier %llu; owned: census %llu, arena "
                 "%lld, hook %llu, lease %llu, tier %llu",
                 what, (unsigned long long)cen.mapped_bytes, (long long)as.mapped_bytes.current,
                 (unsigned long long)dmm__device_mapped(c), (unsigned long long)mapped,
                 (unsigned long long)tu.used[DMM_AXIS_MAPPED], (unsigned long long)cen.handle_bytes,
                 (long long)as.owned_bytes.current, (unsigned long long)dmm__device_owned(c), (unsigned long long)owned,
                 (unsigned long long)tu.used[DMM_AXIS_OWNED]);
    if (howned != c->host_bytes || hmapped != c->host_bytes)
        fail_msg("%s: the host lease holds %llu / %llu bytes, the pinned copies %llu", what, (unsigned long long)howned,
                 (unsigned long long)hmapped, (unsigned long long)c->host_bytes);
    if (dmm_atomic_load_relaxed(&c->blocks.cur) != (uint64_t)nlive(f))
        fail_msg("%s: the adapter counts %llu live blocks, the test %d", what, (unsigned long long)dmm_atomic_load_relaxed(&c->blocks.cur),
                 nlive(f));
    device_tag *t = tag_of(f);
    if (t != NULL && (t->state == TAG_OFFLOADING) != (t->pending > 0))
        fail_msg("%s: the tag is %s with %u segment(s) pending", what, dmm__device_tag_state_name(t->state), (unsigned)t->pending);
}

/* With the plan cleared: the tag comes back (same addresses, same bytes unless discarded), an offload
 * cycle completes, a capture is served from reserved memory, and every block frees. */
static void works_again(fx *f, const char *what) {
    DMM_OK_OR_FAIL(dmm_fault_clear(f->drv));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    device_tag *t = tag_of(f);
    if (t != NULL) {
        (void)dmm_device_offload_wait(f->c, TAG); /* a failure it reports was checked by the step */
        dmm_status s = dmm_device_restore(f->c, TAG, f->s1);
        dmm_stats as;
        memset(&as, 0, sizeof as);
        as.size = sizeof as;
        DMM_OK_OR_FAIL(dmm_mechanism_stats(f->c->arena, &as));
        if (s == DMM_ERR_QUARANTINED && (t->failure == DMM_ERR_QUARANTINED || as.rollback_leaks > 0)) {
            /* KNOWN LIMITATION (reported; needs an arena change, not a fix here). Two ways a fault leaves a
             * tag that can never come back at its addresses, although its bytes are safe in the host copy:
             *  - a piece's decommit whose unmap failed part-way and whose remap failed too quarantines the
             *    segment's allocation (DESIGN §4.5), and the arena refuses every commit of a quarantined
             *    allocation (the offload reports it: t->failure, offload_wait);
             *  - a restore's commit whose undo failed (rollback leak) leaves a poisoned chunk at the
             *    segment's addresses, which the arena never commits again (the restore reported the
             *    failure).
             * What is checked: the failure was reported, the restore now refuses with DMM_ERR_QUARANTINED
             * changing nothing, and everything still tears down to zero. */
            quarantined_tags++;
            assert_int_equal(t->state, TAG_OFFLOADED);
            conserved(f, "after the refused restore of a quarantined tag");
            f->contents_gone = true;
        } else {
            if (s != DMM_OK) fail_msg("%s: the restore that follows: %s", what, dmm_last_error());
            assert_int_equal(t->state, TAG_RESIDENT);
            contents_intact(f, true);
            conserved(f, "after the restore that follows");
            DMM_OK_OR_FAIL(dmm_device_offload(f->c, TAG, DMM_DEVICE_TO_HOST, f->s1));
            DMM_OK_OR_FAIL(dmm_device_offload_wait(f->c, TAG));
            DMM_OK_OR_FAIL(dmm_device_restore(f->c, TAG, f->s1));
            contents_intact(f, true);
        }
    }
    int p = fx_malloc(f, 3 * MIB, false);
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f->c, 4 * MIB, f->s1));
    kit_capture(f->drv, f->s1, 77);
    void *g = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f->c, 1 * MIB, f->s1, &g));
    memset(g, 1, 1 * MIB);
    kit_capture(f->drv, NULL, 0);
    DMM_OK_OR_FAIL(dmm_device_free(f->c, g, f->s1));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f->c, 77, f->s1));
    fx_free(f, p);
    conserved(f, "after working again");
}

static void fx_close(fx *f) {
    DMM_OK_OR_FAIL(dmm_fault_clear(f->drv));
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
    if (f->c != NULL) {
        for (int i = 0; i < MAX_LIVE; i++)
            if (f->b[i].live) fx_free(f, i);
        DMM_OK_OR_FAIL(dmm_device_empty_cache(f->c, NULL));
        DMM_OK_OR_FAIL(dmm_device_poll(f->c, NULL));
        conserved(f, "before the teardown");
        DMM_OK_OR_FAIL(dmm_device_destroy(f->c));
        f->c = NULL;
    }
    DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, f->s1));
    DMM_OK_OR_FAIL(dmm_governor_destroy(f->gov));
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->drv);
    dmm_driver_destroy(f->host);
}

/* ---- the sweep ---- */

typedef struct before {
    dmm_driver_census c;
    int state;
    uint64_t graph_bytes;
    int nlive;
} before;

static uint64_t graph_bytes(fx *f) {
    uint64_t n = 0;
    for (graph_segment *g = f->c->graphs; g != NULL; g = g->next) n += g->seg.a.bytes;
    return n;
}

typedef struct sweep_case {
    const char *name;
    void (*setup)(fx *f);
    dmm_status (*run)(fx *f);
    void (*honest)(fx *f, dmm_status s, const before *b);
} sweep_case;

static int sweep(const sweep_case *k, bool sticky, int seen[2], uint64_t *calls_made) {
    int steps = 0;
    for (uint64_t n = 1;; n++) {
        if (n > 600) fail_msg("%s: the sweep did not end", k->name);
        fx f;
        fx_open(&f);
        k->setup(&f);
        conserved(&f, "after the setup");
        before b;
        b.c = census(&f);
        b.state = tag_of(&f) != NULL ? tag_of(&f)->state : -1;
        b.graph_bytes = graph_bytes(&f);
        b.nlive = nlive(&f);
        uint64_t injected = dmm_fault_injected(f.drv), calls0 = dmm_fault_calls(f.drv, DMM_OP_ANY);
        DMM_OK_OR_FAIL(dmm_fault_plan(f.drv, DMM_OP_ANY, n, sticky ? UINT32_MAX : 1, DMM_ERR_DRIVER));
        dmm_clear_error();
        dmm_status s = k->run(&f);
        uint64_t made = dmm_fault_calls(f.drv, DMM_OP_ANY) - calls0;
        bool hit = dmm_fault_injected(f.drv) != injected;
        DMM_OK_OR_FAIL(dmm_fault_clear(f.drv));
        seen[s == DMM_OK ? 0 : 1]++;
        steps++;
        char what[200];
        snprintf(what, sizeof what, "%s, %s fault at call %llu (%s)", k->name, sticky ? "sticky" : "one",
                 (unsigned long long)n, dmm_status_str(s));
        if (s != DMM_OK && dmm_last_error()[0] == '\0') fail_msg("%s: an error without a sentence", what);
        if (f.c != NULL && f.c->pool != NULL) { /* (a destroy that failed late leaves only destroy to call) */
            conserved(&f, what);
            contents_intact(&f, tag_resident(&f));
        }
        if (k->honest) k->honest(&f, s, &b);
        if (!hit) {
            if (s != DMM_OK) fail_msg("%s: failed without a fault: %s", what, dmm_last_error());
            *calls_made = made;
        }
        if (f.c != NULL) works_again(&f, what);
        fx_close(&f);
        if (!hit) break;
    }
    return steps;
}

/* ---- setups ---- */
static void setup_tag(fx *f, size_t big) {
    fx_malloc(f, 1 * MIB, true);
    fx_malloc(f, big, true);
    fx_malloc(f, 5000, true);
    fx_malloc(f, 2 * MIB, false); /* the pool: untouched by everything the tag goes through */
}

static void setup_small_tag(fx *f) { setup_tag(f, 3 * MIB + 100); }
static void setup_two_piece_tag(fx *f) { setup_tag(f, 66 * MIB); } /* 64 MiB + the rest: two pieces */

static void setup_offloading(fx *f) { /* the decommits are queued behind a held event */
    setup_small_tag(f);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, true));
    DMM_OK_OR_FAIL(dmm_device_offload(f->c, TAG, DMM_DEVICE_TO_HOST, f->s1));
    assert_int_equal(tag_of(f)->state, TAG_OFFLOADING);
    DMM_OK_OR_FAIL(dmm_fault_hold_events(f->drv, false));
}

static void setup_offloaded(fx *f) {
    setup_small_tag(f);
    DMM_OK_OR_FAIL(dmm_device_offload(f->c, TAG, DMM_DEVICE_TO_HOST, f->s1));
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f->c, TAG));
    assert_int_equal(tag_of(f)->state, TAG_OFFLOADED);
}

static void setup_two_piece_offloaded(fx *f) {
    setup_two_piece_tag(f);
    DMM_OK_OR_FAIL(dmm_device_offload(f->c, TAG, DMM_DEVICE_TO_HOST, f->s1));
    DMM_OK_OR_FAIL(dmm_device_offload_wait(f->c, TAG));
}

/* cached pool chunks, an emptied tag segment and an idle graph segment (its graph captured and
 * released: a reservation no capture took would stay), one pool block live */
static void setup_cached(fx *f) {
    setup_small_tag(f);
    int p = fx_malloc(f, 6 * MIB, false);
    for (int i = 0; i < 3; i++) fx_free(f, i);
    fx_free(f, p);
    DMM_OK_OR_FAIL(dmm_device_graph_reserve(f->c, 4 * MIB, f->s1));
    kit_capture(f->drv, f->s1, 9);
    void *g = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f->c, 1 * MIB, f->s1, &g));
    kit_capture(f->drv, NULL, 0);
    DMM_OK_OR_FAIL(dmm_device_free(f->c, g, f->s1));
    DMM_OK_OR_FAIL(dmm_device_graph_release(f->c, 9, f->s1));
}

static void setup_nothing(fx *f) { (void)f; }

static void setup_all_freed(fx *f) {
    setup_cached(f);
    fx_free(f, 3);
}

/* ---- operations and their promises ---- */
static dmm_status op_offload_host(fx *f) { return dmm_device_offload(f->c, TAG, DMM_DEVICE_TO_HOST, f->s1); }

static dmm_status op_offload_discard(fx *f) {
    dmm_status s = dmm_device_offload(f->c, TAG, DMM_DEVICE_DISCARD, f->s1);
    if (s == DMM_OK || !tag_resident(f)) f->contents_gone = true;
    return s;
}

static void honest_offload(fx *f, dmm_status s, const before *b) {
    device_tag *t = tag_of(f);
    if (s == DMM_OK) {
        assert_true(t->state == TAG_OFFLOADING || t->state == TAG_OFFLOADED);
        return;
    }
    if (strstr(dmm_last_error(), "before anything was decommitted") != NULL) {
        assert_int_equal(t->state, TAG_RESIDENT);
        assert_int_equal(census(f).mapped_bytes, b->c.mapped_bytes); /* every byte still on the device */
        contents_intact(f, true);
    } else {
        dmm_test_error_mentions("offload of tag", "restore", NULL);
    }
}

static dmm_status op_offload_wait(fx *f) { return dmm_device_offload_wait(f->c, TAG); }

static void honest_offload_wait(fx *f, dmm_status s, const before *b) {
    (void)b;
    device_tag *t = tag_of(f);
    if (s == DMM_OK) {
        assert_int_equal(t->state, TAG_OFFLOADED);
        assert_int_equal(t->failure, DMM_OK);
        for (tag_segment *g = t->segs; g != NULL; g = g->next) {
            uint64_t committed = 1;
            DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->c->arena, &g->seg.a, &committed));
            assert_int_equal(committed, 0); /* really off the device */
        }
        return;
    }
    dmm_test_error_mentions("offload of tag", "stay mapped", NULL);
    assert_true(t->state == TAG_OFFLOADING || t->state == TAG_OFFLOADED);
}

static dmm_status op_restore(fx *f) { return dmm_device_restore(f->c, TAG, f->s1); }

static void honest_restore(fx *f, dmm_status s, const before *b) {
    (void)b;
    device_tag *t = tag_of(f);
    if (s == DMM_OK) {
        assert_int_equal(t->state, TAG_RESIDENT);
        contents_intact(f, true);
        return;
    }
    dmm_test_error_mentions("restore of tag", "call restore again", NULL);
    assert_int_equal(t->state, TAG_OFFLOADED); /* never called resident when it is not */
    for (tag_segment *g = t->segs; g != NULL; g = g->next) assert_true(g->restored <= g->seg.committed);
}

static dmm_status op_empty_cache(fx *f) { return dmm_device_empty_cache(f->c, NULL); }

static void honest_empty_cache(fx *f, dmm_status s, const before *b) {
    (void)s;
    (void)b;
    /* the live pool block stays (contents checked by the sweep); what is left goes at the next clean call */
    DMM_OK_OR_FAIL(dmm_fault_clear(f->drv));
    DMM_OK_OR_FAIL(dmm_device_empty_cache(f->c, NULL));
    DMM_OK_OR_FAIL(dmm_device_poll(f->c, NULL));
    conserved(f, "after a clean empty_cache");
    dmm_pool_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.size = sizeof ps;
    DMM_OK_OR_FAIL(dmm_pool_stats_get(f->c->pool, &ps));
    uint64_t tag_live = 0, tag_committed = 0, g_live = 0, g_committed = 0;
    dmm__device_tags_totals_locked(f->c, &tag_live, &tag_committed);
    dmm__device_graphs_totals_locked(f->c, &g_live, &g_committed);
    dmm_stats as;
    memset(&as, 0, sizeof as);
    as.size = sizeof as;
    DMM_OK_OR_FAIL(dmm_mechanism_stats(f->c->arena, &as));
    /* everything cached went back, except what a fault poisoned or quarantined for good */
    assert_int_equal(tag_committed + g_committed, 0);
    assert_int_equal(as.cached_bytes.current, 0);
    if (as.poisoned_chunks == 0) assert_int_equal(census(f).mapped_bytes, (uint64_t)ps.committed_bytes.current);
}

static dmm_status op_graph_reserve(fx *f) { return dmm_device_graph_reserve(f->c, 6 * MIB, f->s1); }

static void honest_graph_reserve(fx *f, dmm_status s, const before *b) {
    if (s == DMM_OK) {
        assert_int_equal(graph_bytes(f), b->graph_bytes + 6 * MIB);
        kit_capture(f->drv, f->s1, 5); /* served from it, without a driver call */
        uint64_t calls = dmm_fault_calls(f->drv, DMM_OP_ANY);
        void *p = NULL;
        DMM_OK_OR_FAIL(dmm_device_malloc(f->c, 5 * MIB, f->s1, &p));
        memset(p, 2, 5 * MIB);
        assert_int_equal(dmm_fault_calls(f->drv, DMM_OP_ANY), calls);
        kit_capture(f->drv, NULL, 0);
        DMM_OK_OR_FAIL(dmm_device_free(f->c, p, f->s1));
        DMM_OK_OR_FAIL(dmm_device_graph_release(f->c, 5, f->s1));
        return;
    }
    dmm_test_error_mentions("graph memory", NULL);
    assert_int_equal(graph_bytes(f), b->graph_bytes);
    dmm_stats as;
    memset(&as, 0, sizeof as);
    as.size = sizeof as;
    DMM_OK_OR_FAIL(dmm_mechanism_stats(f->c->arena, &as));
    if (as.rollback_leaks == 0) assert_int_equal(census(f).mapped_bytes, b->c.mapped_bytes);
    else dmm_test_error_mentions("could not fully undo", NULL); /* the arena's poisoned chunks, said so */
}

static dmm_status op_malloc_pool(fx *f) {
    void *p = NULL;
    dmm_status s = dmm_device_malloc(f->c, 9 * MIB, f->s1, &p);
    if (s == DMM_OK) {
        int i = 0;
        while (f->b[i].live) i++;
        f->b[i] = (blk){p, 9 * MIB, 9, true, false};
        for (size_t k = 0; k < 9 * MIB; k++) f->b[i].p[k] = pat(9, k);
    } else {
        assert_null(p);
    }
    return s;
}

static dmm_status op_malloc_tag(fx *f) {
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_tag_begin(TAG));
    dmm_status s = dmm_device_malloc(f->c, 5 * MIB, f->s1, &p);
    DMM_OK_OR_FAIL(dmm_device_tag_end());
    if (s == DMM_OK) {
        int i = 0;
        while (f->b[i].live) i++;
        f->b[i] = (blk){p, 5 * MIB, 11, true, true};
        for (size_t k = 0; k < 5 * MIB; k++) f->b[i].p[k] = pat(11, k);
    } else {
        assert_null(p);
    }
    return s;
}

static void honest_malloc(fx *f, dmm_status s, const before *b) {
    if (s != DMM_OK) assert_int_equal(nlive(f), b->nlive);
    else assert_int_equal(nlive(f), b->nlive + 1);
}

static dmm_status op_destroy(fx *f) {
    dmm_status s = dmm_device_destroy(f->c);
    if (s == DMM_OK) f->c = NULL;
    return s;
}

static void honest_destroy(fx *f, dmm_status s, const before *b) {
    (void)b;
    if (s == DMM_OK) {
        assert_null(f->c);
        return;
    }
    assert_non_null(f->c);
    dmm_test_error_mentions("destroy", NULL);
    if (f->c->pool != NULL) return; /* refused early: the context is intact (conserved ran) and works again */
    /* refused late (the pool went, the arena could not): the one call left resumes and finishes */
    dmm_test_error_mentions("call destroy again", NULL);
    DMM_OK_OR_FAIL(dmm_fault_clear(f->drv));
    DMM_OK_OR_FAIL(dmm_device_destroy(f->c));
    f->c = NULL;
    late_destroys++;
}

static const sweep_case cases[] = {
    {"offload to host (1 piece)", setup_small_tag, op_offload_host, honest_offload},
    {"offload to host (2 pieces)", setup_two_piece_tag, op_offload_host, honest_offload},
    {"offload, discard", setup_small_tag, op_offload_discard, honest_offload},
    {"offload_wait", setup_offloading, op_offload_wait, honest_offload_wait},
    {"restore (1 piece)", setup_offloaded, op_restore, honest_restore},
    {"restore (3 pieces)", setup_two_piece_offloaded, op_restore, honest_restore},
    {"empty_cache (pool, tag, graph)", setup_cached, op_empty_cache, honest_empty_cache},
    {"graph reserve", setup_nothing, op_graph_reserve, honest_graph_reserve},
    {"malloc (pool growth)", setup_small_tag, op_malloc_pool, honest_malloc},
    {"malloc (tag segment)", setup_nothing, op_malloc_tag, honest_malloc},
    {"destroy", setup_all_freed, op_destroy, honest_destroy},
};

static void fault_sweep_every_torch_operation(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int seen[2] = {0, 0};
        uint64_t made = 0;
        int a = sweep(&cases[i], false, seen, &made), b = sweep(&cases[i], true, seen, &made);
        print_message("  %-34s %3d + %3d steps (once, sticky; %llu driver calls): %d ok, %d errors; %d tags "
                      "quarantined\n",
                      cases[i].name, a, b, (unsigned long long)made, seen[0], seen[1], quarantined_tags);
        if (late_destroys > 0) print_message("    (%d destroys refused late and resumed)\n", late_destroys);
        quarantined_tags = late_destroys = 0;
        assert_true(made > 0 && seen[0] >= 2);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fault_sweep_every_torch_operation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
