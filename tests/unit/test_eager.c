/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_eager.c — the eager mechanism's release contract: a release must match ptr,
 * bytes, align and id of the live record, else FAILED with nothing changed; double release FAILED;
 * ids never reused; a refused charge or a failed driver call changes nothing; racing releases make
 * exactly one driver free. */
#include "testkit.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

/* An accounting hook with a limit per axis. */
typedef struct ledger {
    uint64_t limit;
    uint64_t owned, mapped;
    int charges, refunds;
} ledger;

static dmm_status ledger_charge(void *user, dmm_device_id dev, dmm_axis axis, uint64_t bytes) {
    (void)dev;
    ledger *l = user;
    uint64_t *used = axis == DMM_AXIS_OWNED ? &l->owned : &l->mapped;
    if (*used + bytes > l->limit)
        return dmm_error_set(DMM_ERR_BUDGET, "ledger: %s axis: %llu used + %llu requested > limit %llu",
                             axis == DMM_AXIS_OWNED ? "owned" : "mapped", (unsigned long long)*used,
                             (unsigned long long)bytes, (unsigned long long)l->limit);
    *used += bytes;
    l->charges++;
    return DMM_OK;
}

static void ledger_refund(void *user, dmm_device_id dev, dmm_axis axis, uint64_t bytes) {
    (void)dev;
    ledger *l = user;
    uint64_t *used = axis == DMM_AXIS_OWNED ? &l->owned : &l->mapped;
    assert_true(*used >= bytes);
    *used -= bytes;
    l->refunds++;
}

typedef struct fixture {
    dmm_driver *host, *fault;
    dmm_mechanism *m;
    ledger led;
    dmm_accounting acct;
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (fx == NULL) return -1;
    fx->led.limit = UINT64_MAX / 4;
    fx->acct = (dmm_accounting){&fx->led, ledger_charge, ledger_refund};
    dmm_eager_config cfg = {.size = sizeof cfg, .accounting = &fx->acct};
    if (dmm_host_driver_create(NULL, &fx->host) != DMM_OK) return -1;
    if (dmm_fault_driver_create(fx->host, &fx->fault) != DMM_OK) return -1;
    if (dmm_eager_create(fx->fault, &cfg, &fx->m) != DMM_OK) return -1;
    *state = fx;
    return 0;
}

static dmm_stats stats_of(dmm_mechanism *m) {
    dmm_stats s = {.size = sizeof s};
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &s));
    return s;
}

static dmm_driver_census census(dmm_driver *d) {
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(d->ops->census(d, &c));
    return c;
}

static int teardown(void **state) {
    fixture *fx = *state;
    dmm_stats s = stats_of(fx->m);
    assert_int_equal(s.allocations.current, 0);
    assert_int_equal(s.owned_bytes.current, 0);
    assert_int_equal(fx->led.owned, 0);
    assert_int_equal(fx->led.mapped, 0);
    assert_int_equal(census(fx->host).eager_bytes, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(fx->m));
    dmm_driver_destroy(fx->fault);
    dmm_driver_destroy(fx->host);
    free(fx);
    return 0;
}

/* Everything the mechanism, the driver and the ledger hold, for "nothing changed" checks. */
typedef struct snapshot {
    int64_t allocations, allocated, owned, mapped;
    uint64_t eager_bytes, led_owned, led_mapped;
} snapshot;

static snapshot snap(fixture *fx) {
    dmm_stats s = stats_of(fx->m);
    return (snapshot){s.allocations.current, s.allocated_bytes.current, s.owned_bytes.current,
                      s.mapped_bytes.current, census(fx->host).eager_bytes, fx->led.owned, fx->led.mapped};
}

static void assert_snap_equal(snapshot a, snapshot b) { assert_memory_equal(&a, &b, sizeof a); }

static void test_allocate_release(void **state) {
    fixture *fx = *state;
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(fx->m, 10000, 0, &a));
    assert_int_equal(a.bytes, 10000);
    assert_int_equal(a.align, 256);
    assert_true(a.id != 0);
    assert_ptr_equal(a.mechanism, fx->m);
    assert_int_equal(a.device.tier, DMM_TIER_HOST);
    memset(a.ptr, 0x5a, a.bytes);
    dmm_stats s = stats_of(fx->m);
    assert_int_equal(s.allocations.current, 1);
    assert_int_equal(s.allocated_bytes.current, 10000);
    assert_int_equal(s.owned_bytes.current, 10000);
    assert_int_equal(s.mapped_bytes.current, 10000);
    assert_int_equal(s.driver_alloc, 1);
    assert_int_equal(fx->led.owned, 10000);
    assert_int_equal(fx->led.mapped, 10000);
    assert_int_equal(census(fx->host).eager_bytes, 10000);

    dmm_release_outcome o = dmm_mechanism_release(fx->m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.allocation_bytes, 10000);
    assert_int_equal(o.unmapped_bytes, 10000);
    assert_int_equal(o.residual_owned_bytes, 0);
    assert_int_equal(o.failure, DMM_OK);
    s = stats_of(fx->m);
    assert_int_equal(s.releases_complete, 1);
    assert_int_equal(s.driver_free, 1);
    assert_int_equal(s.allocations.peak, 1);
    assert_int_equal(s.allocations.total, 1);
}

static void test_alignment(void **state) {
    fixture *fx = *state;
    size_t aligns[] = {1, 64, 256, 4096, 1 * MiB};
    dmm_allocation a[5];
    for (int i = 0; i < 5; i++) {
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(fx->m, 3000, aligns[i], &a[i]));
        assert_int_equal((uintptr_t)a[i].ptr % aligns[i], 0);
        assert_int_equal(a[i].align, aligns[i]);
        memset(a[i].ptr, 1, 3000);
    }
    /* above 256 the driver allocation is padded, and that is what is charged and unmapped */
    assert_int_equal(fx->led.owned, 3 * 3000 + (3000 + 4095) + (3000 + MiB - 1));
    for (int i = 0; i < 5; i++) {
        dmm_release_outcome o = dmm_mechanism_release(fx->m, &a[i]);
        assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
        assert_int_equal(o.unmapped_bytes, aligns[i] > 256 ? 3000 + aligns[i] - 1 : 3000);
    }
}

static void test_mismatch_changes_nothing(void **state) {
    fixture *fx = *state;
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(fx->m, 8192, 512, &a));
    snapshot before = snap(fx);
    dmm_allocation bad;

    bad = a;
    bad.bytes = 4096;
    dmm_release_outcome o = dmm_mechanism_release(fx->m, &bad);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(o.unmapped_bytes, 0);
    dmm_test_error_mentions("eager", "bytes 4096", "bytes 8192", "altered", "unmodified", "nothing changed", NULL);

    bad = a;
    bad.align = 256;
    o = dmm_mechanism_release(fx->m, &bad);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION); /* the arena's code for the same case */
    dmm_test_error_mentions("align 256", "align 512", "unmodified", NULL);

    bad = a;
    bad.id = a.id + 1000;
    o = dmm_mechanism_release(fx->m, &bad);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("stale", "nothing changed", NULL);

    bad = a;
    bad.ptr = (char *)a.ptr + 512;
    o = dmm_mechanism_release(fx->m, &bad);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    dmm_test_error_mentions("no live allocation starts there", NULL);

    assert_snap_equal(snap(fx), before);
    assert_int_equal(stats_of(fx->m).releases_failed, 4);
    assert_int_equal(dmm_fault_calls(fx->fault, DMM_OP_FREE), 0); /* the driver was never asked */
    ((char *)a.ptr)[8191] = 1;                                   /* still live and writable */

    assert_int_equal(dmm_mechanism_release(fx->m, &a).state, DMM_RELEASE_COMPLETE);
    /* double release */
    o = dmm_mechanism_release(fx->m, &a);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("released already", NULL);
    assert_int_equal(dmm_fault_calls(fx->fault, DMM_OP_FREE), 1);
}

static void test_ids_never_reused(void **state) {
    fixture *fx = *state;
    uint64_t last = 0;
    dmm_allocation prev = {0};
    int same_ptr = 0;
    for (int i = 0; i < 50; i++) {
        dmm_allocation a;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(fx->m, 4096, 0, &a));
        assert_true(a.id > last);
        last = a.id;
        if (i > 0 && a.ptr == prev.ptr) {
            same_ptr++;
            /* the stale handle of the previous allocation at this address cannot release this one */
            dmm_release_outcome o = dmm_mechanism_release(fx->m, &prev);
            assert_int_equal(o.state, DMM_RELEASE_FAILED);
            assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
        }
        assert_int_equal(dmm_mechanism_release(fx->m, &a).state, DMM_RELEASE_COMPLETE);
        prev = a;
    }
    (void)same_ptr; /* the OS usually hands the same address back; the check above runs when it does */
}

static void test_accounting_refused_changes_nothing(void **state) {
    fixture *fx = *state;
    fx->led.limit = 64 * 1024;
    dmm_allocation keep, a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(fx->m, 40 * 1024, 0, &keep));
    snapshot before = snap(fx);
    int charges = fx->led.charges;
    assert_int_equal(dmm_mechanism_allocate(fx->m, 40 * 1024, 0, &a), DMM_ERR_BUDGET);
    dmm_test_error_mentions("eager", "accounting hook", "owned axis", "limit 65536", NULL);
    assert_snap_equal(snap(fx), before);
    assert_int_equal(fx->led.charges, charges);
    assert_int_equal(dmm_fault_calls(fx->fault, DMM_OP_ALLOC), 1); /* no driver call for the refused one */

    /* the mapped axis refuses: the owned charge already made is refunded */
    fx->led.limit = UINT64_MAX / 4;
    fx->led.mapped = UINT64_MAX / 4 - 1000;
    assert_int_equal(dmm_mechanism_allocate(fx->m, 4096, 0, &a), DMM_ERR_BUDGET);
    dmm_test_error_mentions("mapped axis", NULL);
    fx->led.mapped = 40 * 1024;
    before.led_mapped = 40 * 1024;
    assert_snap_equal(snap(fx), before);
    assert_int_equal(dmm_mechanism_release(fx->m, &keep).state, DMM_RELEASE_COMPLETE);
}

static void test_driver_failures(void **state) {
    fixture *fx = *state;
    /* alloc fails: the charge is refunded, nothing live */
    DMM_OK_OR_FAIL(dmm_fault_plan(fx->fault, DMM_OP_ALLOC, 1, 1, DMM_ERR_OUT_OF_MEMORY));
    dmm_allocation a;
    snapshot empty = snap(fx);
    assert_int_equal(dmm_mechanism_allocate(fx->m, 4096, 0, &a), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("eager", "alloc failed", "injected", NULL);
    assert_snap_equal(snap(fx), empty);
    assert_null(a.ptr);

    /* free fails: FAILED, still live and charged, may be released again */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(fx->m, 4096, 0, &a));
    snapshot live = snap(fx);
    DMM_OK_OR_FAIL(dmm_fault_plan(fx->fault, DMM_OP_FREE, 1, 1, DMM_ERR_DRIVER));
    dmm_release_outcome o = dmm_mechanism_release(fx->m, &a);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    assert_int_equal(o.unmapped_bytes, 0);
    dmm_test_error_mentions("free failed", "still live", "injected DMM_ERR_DRIVER on free", NULL);
    assert_snap_equal(snap(fx), live);
    dmm_stats s = stats_of(fx->m);
    assert_int_equal(s.driver_failures, 2);
    assert_int_equal(s.releases_failed, 1);
    ((char *)a.ptr)[0] = 1;
    o = dmm_mechanism_release(fx->m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_snap_equal(snap(fx), empty);
}

static void test_destroy_busy_and_config(void **state) {
    fixture *fx = *state;
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(fx->m, 4096, 0, &a));
    assert_int_equal(dmm_mechanism_destroy(fx->m), DMM_ERR_BUSY);
    dmm_test_error_mentions("eager", "1 allocation", "still live", NULL);
    assert_int_equal(dmm_mechanism_release(fx->m, &a).state, DMM_RELEASE_COMPLETE); /* still usable */

    dmm_mechanism *m = NULL;
    dmm_eager_config cfg = {.size = 4};
    assert_int_equal(dmm_eager_create(fx->host, &cfg, &m), DMM_ERR_SHORT_STRUCT);
    dmm_accounting half = {NULL, ledger_charge, NULL};
    cfg = (dmm_eager_config){.size = sizeof cfg, .accounting = &half};
    assert_int_equal(dmm_eager_create(fx->host, &cfg, &m), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_eager_create(NULL, NULL, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_driver_ops no_eager = *fx->host->ops;
    no_eager.alloc = NULL;
    const dmm_driver_ops *saved = fx->host->ops;
    fx->host->ops = &no_eager;
    assert_int_equal(dmm_eager_create(fx->host, NULL, &m), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("'host'", "alloc", NULL);
    fx->host->ops = saved;
    assert_null(m);
    dmm_stats tiny = {.size = 2};
    assert_int_equal(dmm_mechanism_stats(fx->m, &tiny), DMM_ERR_SHORT_STRUCT);
}

/* Two threads release the same allocation: exactly one driver free, exactly one COMPLETE. */
typedef struct racer {
    dmm_mechanism *m;
    dmm_allocation a;
    pthread_barrier_t *go;
    dmm_release_outcome o;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    pthread_barrier_wait(r->go);
    r->o = dmm_mechanism_release(r->m, &r->a);
    return NULL;
}

/* A host driver whose free dawdles, so that the second releaser arrives while the first is inside
 * the driver (the window the claim protects). Not a timed assertion: only widens the race. */
static dmm_status (*host_free)(dmm_driver *, uintptr_t, size_t);
static dmm_status slow_free(dmm_driver *d, uintptr_t ptr, size_t bytes) {
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return host_free(d, ptr, bytes);
}

static void test_racing_releases(void **state) {
    fixture *fx = *state;
    enum { ROUNDS = 100 };
    static dmm_driver_ops slow;
    slow = *fx->host->ops;
    host_free = slow.free;
    slow.free = slow_free;
    const dmm_driver_ops *saved = fx->host->ops;
    fx->host->ops = &slow;
    uint64_t frees0 = dmm_fault_calls(fx->fault, DMM_OP_FREE);
    for (int i = 0; i < ROUNDS; i++) {
        dmm_allocation a;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(fx->m, 4096, 0, &a));
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        racer r[2] = {{fx->m, a, &go, {0}}, {fx->m, a, &go, {0}}};
        pthread_t t[2];
        for (int k = 0; k < 2; k++) assert_int_equal(pthread_create(&t[k], NULL, race, &r[k]), 0);
        for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
        pthread_barrier_destroy(&go);
        int complete = (r[0].o.state == DMM_RELEASE_COMPLETE) + (r[1].o.state == DMM_RELEASE_COMPLETE);
        int failed = (r[0].o.state == DMM_RELEASE_FAILED) + (r[1].o.state == DMM_RELEASE_FAILED);
        assert_int_equal(complete, 1);
        assert_int_equal(failed, 1);
    }
    assert_int_equal(dmm_fault_calls(fx->fault, DMM_OP_FREE) - frees0, ROUNDS);
    fx->host->ops = saved;
}

/* A one-block driver: alloc hands out the same block every time it is free (as mmap and cuMemAlloc
 * readily do with an address just given back), and free can run a hook after the block is free:
 * a deterministic "another thread allocates the moment the driver's free returned". */
typedef struct one_block {
    dmm_driver base; /* first */
    _Alignas(4096) unsigned char mem[8192];
    bool taken;
    size_t offset;            /* added to the block's address: a driver below the 256-byte promise */
    dmm_status free_fails;    /* DMM_OK, or what free answers */
    void (*after_free)(void *user);
    void *user;
} one_block;

static dmm_status ob_alloc(dmm_driver *d, size_t bytes, uintptr_t *ptr) {
    one_block *b = (one_block *)d;
    if (b->taken || bytes + b->offset > sizeof b->mem) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "one_block: taken");
    b->taken = true;
    *ptr = (uintptr_t)b->mem + b->offset;
    return DMM_OK;
}

static dmm_status ob_free(dmm_driver *d, uintptr_t ptr, size_t bytes) {
    (void)ptr;
    (void)bytes;
    one_block *b = (one_block *)d;
    if (b->free_fails != DMM_OK) return dmm_error_set(b->free_fails, "one_block: free fails on purpose");
    b->taken = false;
    void (*hook)(void *) = b->after_free;
    b->after_free = NULL;
    if (hook != NULL) hook(b->user);
    return DMM_OK;
}

static const dmm_driver_ops one_block_ops = {.size = sizeof(dmm_driver_ops), .name = "one_block",
                                             .alloc = ob_alloc, .free = ob_free};

typedef struct reuse {
    dmm_mechanism *m;
    dmm_allocation b;
    dmm_status s;
} reuse;

static void allocate_again(void *user) {
    reuse *r = user;
    r->s = dmm_mechanism_allocate(r->m, 4096, 0, &r->b);
}

/* The driver hands the address of a release in flight to a new allocation before the release has
 * taken its record out: the release must remove its own record (by id), not the new one. */
static void test_address_reused_during_release(void **state) {
    (void)state;
    static one_block blk;
    memset(&blk, 0, sizeof blk);
    blk.base.ops = &one_block_ops;
    blk.base.device = (dmm_device_id){DMM_TIER_HOST, 0};
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(&blk.base, NULL, &m));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4096, 0, &a));
    reuse r = {m, {0}, DMM_ERR_BUSY};
    blk.after_free = allocate_again;
    blk.user = &r;
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(r.s);
    assert_ptr_equal(r.b.ptr, a.ptr); /* the same address, a new id */
    assert_true(r.b.id != a.id);
    dmm_stats s = stats_of(m);
    assert_int_equal(s.allocations.current, 1);
    /* the stale value is refused, the new one releases */
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_FAILED);
    o = dmm_mechanism_release(m, &r.b);
    if (o.state != DMM_RELEASE_COMPLETE) fail_msg("the new allocation's release: %s", dmm_last_error());
    assert_int_equal(stats_of(m).allocations.current, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
}

/* A driver below the 256-byte promise whose free then fails too: the block stays charged and the
 * stats say so (driver calls counted, a rollback leak). */
static void test_misaligned_driver_counts_its_leak(void **state) {
    (void)state;
    static one_block blk;
    memset(&blk, 0, sizeof blk);
    blk.base.ops = &one_block_ops;
    blk.base.device = (dmm_device_id){DMM_TIER_HOST, 0};
    blk.offset = 16;
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(&blk.base, NULL, &m));
    dmm_allocation a;
    assert_int_equal(dmm_mechanism_allocate(m, 4096, 0, &a), DMM_ERR_DRIVER);
    dmm_test_error_mentions("not 256-byte aligned", NULL);
    dmm_stats s = stats_of(m);
    assert_int_equal(s.driver_alloc, 1);
    assert_int_equal(s.driver_free, 1);
    assert_int_equal(s.rollback_leaks, 0);
    blk.free_fails = DMM_ERR_DRIVER;
    assert_int_equal(dmm_mechanism_allocate(m, 4096, 0, &a), DMM_ERR_DRIVER);
    dmm_test_error_mentions("not 256-byte aligned", "stays charged", NULL);
    s = stats_of(m);
    assert_int_equal(s.driver_alloc, 2);
    assert_int_equal(s.driver_free, 2);
    assert_int_equal(s.driver_failures, 1);
    assert_int_equal(s.rollback_leaks, 1);
    assert_int_equal(s.allocations.current, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_allocate_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alignment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mismatch_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ids_never_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_accounting_refused_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_driver_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_busy_and_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_racing_releases, setup, teardown),
        cmocka_unit_test(test_address_reused_during_release),
        cmocka_unit_test(test_misaligned_driver_counts_its_leak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
