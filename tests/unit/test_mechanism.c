/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_mechanism.c — the generic mechanism: create validation, capability checks
 * (UNSUPPORTED, never a silent no-op), WRONG_MECHANISM, identity stamping, a custom ops table
 * with a virtual-backing sub-table driven through the public wrappers, and the built-in mechanisms
 * (eager, arena) giving the same code, UNKNOWN_ALLOCATION, for the same wrong handle. */
#include "testkit.h"

#include <stdlib.h>
#include <string.h>

/* ---- a toy mechanism with virtual backing: malloc for memory, counters for everything ---- */
typedef struct toy {
    int allocs, releases, commits, decommits, queries;
    int live;
    uint64_t committed;
    uint64_t next_id;
} toy;

static dmm_status toy_allocate(void *impl, size_t bytes, size_t align, dmm_allocation *out) {
    toy *t = impl;
    t->allocs++;
    if (align == 0) align = 64;
    out->ptr = aligned_alloc(align, (bytes + align - 1) / align * align);
    if (out->ptr == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "toy: out of memory");
    out->bytes = bytes;
    out->align = align;
    out->id = ++t->next_id;
    t->live++;
    return DMM_OK;
}
static dmm_status toy_allocate_committed(void *impl, size_t bytes, size_t align, const dmm_range *r, size_t n,
                                         dmm_allocation *out) {
    toy *t = impl;
    dmm_status s = toy_allocate(impl, bytes, align, out);
    for (size_t i = 0; s == DMM_OK && i < n; i++) t->committed += r[i].bytes;
    return s;
}
static dmm_release_outcome toy_release(void *impl, const dmm_allocation *a) {
    toy *t = impl;
    t->releases++;
    t->live--;
    free(a->ptr);
    dmm_release_outcome o = {DMM_RELEASE_COMPLETE, a->bytes, a->bytes, 0, DMM_OK, 0};
    return o;
}
static dmm_device_id toy_device(void *impl) {
    (void)impl;
    return (dmm_device_id){DMM_TIER_DEVICE, 3};
}
static dmm_status toy_commit(void *impl, const dmm_allocation *a, dmm_range r, uint64_t *newly) {
    (void)a;
    toy *t = impl;
    t->commits++;
    t->committed += r.bytes;
    *newly = r.bytes;
    return DMM_OK;
}
static dmm_release_outcome toy_decommit(void *impl, const dmm_allocation *a, dmm_range r) {
    (void)a;
    toy *t = impl;
    t->decommits++;
    t->committed -= r.bytes;
    dmm_release_outcome o = {DMM_RELEASE_COMPLETE, r.bytes, r.bytes, 0, DMM_OK, 0};
    return o;
}
static dmm_status toy_committed_bytes(void *impl, const dmm_allocation *a, uint64_t *bytes) {
    (void)a;
    toy *t = impl;
    t->queries++;
    *bytes = t->committed;
    return DMM_OK;
}
static dmm_status toy_mapped_for_ranges(void *impl, const dmm_allocation *a, const dmm_range *r, size_t n,
                                        uint64_t *bytes) {
    (void)a;
    toy *t = impl;
    t->queries++;
    *bytes = 0;
    for (size_t i = 0; i < n; i++) *bytes += r[i].bytes;
    return DMM_OK;
}
static dmm_status toy_destroy(void *impl) {
    toy *t = impl;
    if (t->live != 0) return dmm_error_set(DMM_ERR_BUSY, "toy: %d allocations live", t->live);
    free(t);
    return DMM_OK;
}

static const dmm_virtual_backing_ops toy_vb = {
    .size = sizeof(dmm_virtual_backing_ops),
    .allocate_committed = toy_allocate_committed,
    .commit = toy_commit,
    .decommit = toy_decommit,
    .committed_bytes = toy_committed_bytes,
    .mapped_bytes_for_ranges = toy_mapped_for_ranges,
};

static const dmm_mechanism_ops toy_ops = {
    .size = sizeof(dmm_mechanism_ops),
    .name = "toy",
    .allocate = toy_allocate,
    .release = toy_release,
    .device = toy_device,
    .stats = NULL,
    .destroy = toy_destroy,
    .virtual_backing = &toy_vb,
};

static dmm_mechanism *new_toy(toy **out) {
    toy *t = calloc(1, sizeof *t);
    assert_non_null(t);
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_mechanism_create(&toy_ops, t, &m));
    if (out) *out = t;
    return m;
}

static void test_create_validation(void **state) {
    (void)state;
    toy t = {0};
    dmm_mechanism *m = NULL;
    assert_int_equal(dmm_mechanism_create(NULL, &t, &m), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_mechanism_create(&toy_ops, NULL, &m), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_mechanism_create(&toy_ops, &t, NULL), DMM_ERR_INVALID_ARGUMENT);

    dmm_mechanism_ops o = toy_ops;
    o.size = 8;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_SHORT_STRUCT);
    dmm_test_error_mentions("ops->size is 8", NULL);

    o = toy_ops;
    o.allocate = NULL;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("'toy'", "'allocate'", NULL);
    o = toy_ops;
    o.release = NULL;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("'release'", NULL);
    o = toy_ops;
    o.device = NULL;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("'device'", NULL);

    dmm_virtual_backing_ops vb = toy_vb;
    o = toy_ops;
    o.virtual_backing = &vb;
    vb.decommit = NULL;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("virtual_backing", "'decommit'", NULL);
    vb = toy_vb;
    vb.mapped_bytes_for_ranges = NULL;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("'mapped_bytes_for_ranges'", NULL);
    vb = toy_vb;
    vb.size = 4;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_SHORT_STRUCT);

    /* a shared_mapping table must fill every slot (dmm/prefix.h) */
    dmm_shared_mapping_ops sm = {sizeof sm, NULL, NULL, NULL, NULL};
    o = toy_ops;
    o.shared_mapping = &sm;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("shared_mapping", "'prefix_create'", NULL);
    sm.size = 4;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_SHORT_STRUCT);
    o = toy_ops;
    o.deferred_release = &vb;
    assert_int_equal(dmm_mechanism_create(&o, &t, &m), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("deferred_release", "reserved", NULL);
    assert_null(m); /* nothing was created by any refusal */
}

static void test_custom_virtual_backing_through_wrappers(void **state) {
    (void)state;
    toy *t = NULL;
    dmm_mechanism *m = new_toy(&t);
    assert_string_equal(dmm_mechanism_name(m), "toy");
    assert_int_equal(dmm_mechanism_capabilities(m), DMM_CAP_VIRTUAL_BACKING);
    assert_ptr_equal(dmm_mechanism_impl(m), t);
    assert_int_equal(dmm_mechanism_device(m).index, 3);

    dmm_range ranges[2] = {{0, 4096}, {8192, 4096}};
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(m, 65536, 0, ranges, 2, &a));
    assert_ptr_equal(a.mechanism, m); /* stamped by the wrapper */
    assert_int_equal(a.device.tier, DMM_TIER_DEVICE);
    assert_int_equal(a.device.index, 3);
    uint64_t v = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(m, &a, &v));
    assert_int_equal(v, 8192);
    DMM_OK_OR_FAIL(dmm_mechanism_commit(m, &a, (dmm_range){16384, 16384}, &v));
    assert_int_equal(v, 16384);
    DMM_OK_OR_FAIL(dmm_mechanism_mapped_bytes_for_ranges(m, &a, ranges, 2, &v));
    assert_int_equal(v, 8192);
    dmm_release_outcome o = dmm_mechanism_decommit(m, &a, (dmm_range){16384, 16384});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 16384);
    assert_int_equal(t->commits, 1);
    assert_int_equal(t->decommits, 1);

    /* ranges outside the allocation never reach the implementation */
    assert_int_equal(dmm_mechanism_commit(m, &a, (dmm_range){65536 - 4096, 8192}, &v), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_mechanism_commit", "does not lie inside", "65536", NULL);
    assert_int_equal(dmm_mechanism_commit(m, &a, (dmm_range){SIZE_MAX, 2}, &v), DMM_ERR_INVALID_ARGUMENT);
    o = dmm_mechanism_decommit(m, &a, (dmm_range){0, 65537});
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_mechanism_allocate_committed(m, 4096, 0, NULL, 1, &a), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(t->commits, 1);
    assert_int_equal(t->decommits, 1);
    assert_int_equal(t->allocs, 1);

    /* no stats slot: UNSUPPORTED, named */
    dmm_stats st = {.size = sizeof st};
    assert_int_equal(dmm_mechanism_stats(m, &st), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("'toy'", "no stats", NULL);

    /* destroy is refused while the implementation says so; the mechanism stays usable */
    assert_int_equal(dmm_mechanism_destroy(m), DMM_ERR_BUSY);
    o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(NULL));
}

static void test_argument_checks(void **state) {
    (void)state;
    toy *t = NULL;
    dmm_mechanism *m = new_toy(&t);
    dmm_allocation a;
    assert_int_equal(dmm_mechanism_allocate(m, 0, 0, &a), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("0 bytes", "'toy'", NULL);
    assert_int_equal(dmm_mechanism_allocate(m, 100, 48, &a), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("alignment 48", "power of two", NULL);
    assert_int_equal(dmm_mechanism_allocate(m, 100, 0, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_mechanism_allocate(NULL, 100, 0, &a), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(t->allocs, 0);
    dmm_release_outcome o = dmm_mechanism_release(m, NULL);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_INVALID_ARGUMENT);

    /* an altered device field is caught before the implementation */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 100, 128, &a));
    assert_int_equal((uintptr_t)a.ptr % 128, 0);
    dmm_allocation bad = a;
    bad.device.index = 0;
    o = dmm_mechanism_release(m, &bad);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_WRONG_DEVICE);
    assert_int_equal(t->releases, 0);
    o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
}

static void test_wrong_mechanism(void **state) {
    (void)state;
    toy *t1 = NULL, *t2 = NULL;
    dmm_mechanism *m1 = new_toy(&t1), *m2 = new_toy(&t2);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m1, 4096, 0, &a));
    dmm_release_outcome o = dmm_mechanism_release(m2, &a);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_WRONG_MECHANISM);
    assert_int_equal(o.unmapped_bytes, 0);
    assert_int_equal(o.allocation_bytes, 4096);
    dmm_test_error_mentions("belongs to mechanism", "not to 'toy'", NULL);
    assert_int_equal(t1->releases + t2->releases, 0);
    uint64_t v;
    assert_int_equal(dmm_mechanism_commit(m2, &a, (dmm_range){0, 4096}, &v), DMM_ERR_WRONG_MECHANISM);
    assert_int_equal(dmm_mechanism_committed_bytes(m2, &a, &v), DMM_ERR_WRONG_MECHANISM);
    o = dmm_mechanism_decommit(m2, &a, (dmm_range){0, 4096});
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_WRONG_MECHANISM);
    assert_int_equal(t2->commits + t2->decommits + t2->queries, 0);

    /* an eager allocation given to the toy, and the other way round */
    dmm_driver *host = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_mechanism *e = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &e));
    o = dmm_mechanism_release(e, &a);
    assert_int_equal(o.failure, DMM_ERR_WRONG_MECHANISM);
    dmm_test_error_mentions("not to 'eager'", NULL);
    dmm_allocation ea;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e, 4096, 0, &ea));
    o = dmm_mechanism_release(m1, &ea);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_WRONG_MECHANISM);
    assert_int_equal(dmm_mechanism_release(e, &ea).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_mechanism_release(m1, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m1));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m2));
    dmm_driver_destroy(host);
}

/* The optional virtual-backing slots: absent on a table that leaves them NULL (the toy), on a table of
 * the required size only (an older table: the slots beyond its size are never read) and on a
 * mechanism without virtual backing (eager): UNSUPPORTED, named, never a call; present on the arena. */
static void test_optional_virtual_backing_slots(void **state) {
    (void)state;
    toy *t = NULL;
    dmm_mechanism *m = new_toy(&t);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(m, 65536, 0, NULL, 0, &a));
    const dmm_optional_slot slots[] = {DMM_SLOT_ALIAS, DMM_SLOT_IS_QUARANTINED, DMM_SLOT_DRAIN_CACHE,
                                       DMM_SLOT_RESERVATION};
    for (size_t i = 0; i < 4; i++) assert_false(dmm_mechanism_has_slot(m, slots[i]));
    assert_int_equal(dmm_mechanism_alias(m, &a, (dmm_range){32768, 4096}, (dmm_range){0, 4096}), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("dmm_mechanism_alias", "'toy'", "'alias'", NULL);
    bool q = true;
    assert_int_equal(dmm_mechanism_is_quarantined(m, a.ptr, 4096, &q), DMM_ERR_UNSUPPORTED);
    assert_true(q);
    assert_int_equal(dmm_mechanism_drain_cache(m), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("dmm_mechanism_drain_cache", "'drain_cache'", NULL);
    uintptr_t va = 7;
    uint64_t bytes = 7;
    assert_int_equal(dmm_mechanism_reservation(m, &va, &bytes), DMM_ERR_UNSUPPORTED);
    assert_int_equal(va, 7);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));

    /* a table of the required size only, whose memory beyond it would read as filled slots */
    struct {
        dmm_virtual_backing_ops vb;
    } old;
    memset(&old, 0xff, sizeof old);
    old.vb = toy_vb;
    old.vb.size = (uint32_t)DMM_VIRTUAL_BACKING_OPS_REQUIRED_SIZE;
    memset((char *)&old.vb + DMM_VIRTUAL_BACKING_OPS_REQUIRED_SIZE, 0xff,
           sizeof old.vb - DMM_VIRTUAL_BACKING_OPS_REQUIRED_SIZE);
    dmm_mechanism_ops ops = toy_ops;
    ops.virtual_backing = &old.vb;
    t = calloc(1, sizeof *t);
    assert_non_null(t);
    DMM_OK_OR_FAIL(dmm_mechanism_create(&ops, t, &m));
    for (size_t i = 0; i < 4; i++) assert_false(dmm_mechanism_has_slot(m, slots[i]));
    assert_int_equal(dmm_mechanism_drain_cache(m), DMM_ERR_UNSUPPORTED);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    /* one byte short of the required slots: refused */
    old.vb.size = (uint32_t)DMM_VIRTUAL_BACKING_OPS_REQUIRED_SIZE - 1;
    t = calloc(1, sizeof *t);
    assert_non_null(t);
    assert_int_equal(dmm_mechanism_create(&ops, t, &m), DMM_ERR_SHORT_STRUCT);
    free(t);

    dmm_driver *host = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_mechanism *e = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &e));
    for (size_t i = 0; i < 4; i++) assert_false(dmm_mechanism_has_slot(e, slots[i]));
    assert_int_equal(dmm_mechanism_drain_cache(e), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("'eager'", "'drain_cache'", NULL);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e));
    assert_false(dmm_mechanism_has_slot(NULL, DMM_SLOT_ALIAS));
    assert_int_equal(dmm_mechanism_drain_cache(NULL), DMM_ERR_INVALID_ARGUMENT);

    dmm_mechanism *ar = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(host, NULL, &ar));
    for (size_t i = 0; i < 4; i++) assert_true(dmm_mechanism_has_slot(ar, slots[i]));
    assert_false(dmm_mechanism_has_slot(ar, (dmm_optional_slot)99)); /* no such slot, even where all are */
    uintptr_t rva = 0, ava = 0;
    uint64_t rbytes = 0, abytes = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_reservation(ar, &rva, &rbytes));
    DMM_OK_OR_FAIL(dmm_arena_reservation(ar, &ava, &abytes));
    assert_true(rva == ava && rbytes == abytes && rbytes > 0);
    DMM_OK_OR_FAIL(dmm_mechanism_drain_cache(ar));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(ar));
    dmm_driver_destroy(host);
}

static void test_eager_lacks_virtual_backing(void **state) {
    (void)state;
    dmm_driver *host = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_mechanism *e = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &e));
    assert_int_equal(dmm_mechanism_capabilities(e), 0);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e, 8192, 0, &a));
    uint64_t v = 77;
    dmm_range r = {0, 4096};
    assert_int_equal(dmm_mechanism_commit(e, &a, r, &v), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("dmm_mechanism_commit", "'eager'", "virtual_backing", NULL);
    assert_int_equal(v, 77);
    dmm_release_outcome o = dmm_mechanism_decommit(e, &a, r);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("dmm_mechanism_decommit", "'eager'", NULL);
    assert_int_equal(dmm_mechanism_committed_bytes(e, &a, &v), DMM_ERR_UNSUPPORTED);
    assert_int_equal(dmm_mechanism_mapped_bytes_for_ranges(e, &a, &r, 1, &v), DMM_ERR_UNSUPPORTED);
    dmm_allocation b;
    assert_int_equal(dmm_mechanism_allocate_committed(e, 8192, 0, &r, 1, &b), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("allocate_committed", "'eager'", "virtual_backing", NULL);
    assert_int_equal(dmm_mechanism_release(e, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e));
    dmm_driver_destroy(host);
}

/* The built-in mechanisms agree on the code for a handle that matches no live allocation in
 * (ptr, bytes, align, id) (status.h): an altered size or alignment, a stale id, a double release all
 * give FAILED with DMM_ERR_UNKNOWN_ALLOCATION, change nothing, and say how to fix the handle. */
static void test_builtin_mechanisms_agree_on_wrong_handles(void **state) {
    (void)state;
    dmm_driver *host = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_mechanism *m[2] = {NULL, NULL};
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &m[0]));
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = (uint64_t)1 << 30;
    DMM_OK_OR_FAIL(dmm_arena_create(host, &ac, &m[1]));
    for (int k = 0; k < 2; k++) {
        dmm_allocation a;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(m[k], 3 << 20, 4096, &a));
        dmm_allocation bad[3] = {a, a, a};
        bad[0].bytes += 1;
        bad[1].align *= 2;
        bad[2].id += 1;
        for (int i = 0; i < 3; i++) {
            dmm_release_outcome o = dmm_mechanism_release(m[k], &bad[i]);
            assert_int_equal(o.state, DMM_RELEASE_FAILED);
            if (o.failure != DMM_ERR_UNKNOWN_ALLOCATION)
                fail_msg("%s, wrong handle %d: %s: %s", dmm_mechanism_name(m[k]), i, dmm_status_str(o.failure),
                         dmm_last_error());
            assert_int_equal(o.unmapped_bytes, 0);
            dmm_test_error_mentions(i < 2 ? "unmodified" : "stale", "nothing", "changed", NULL);
        }
        memset(a.ptr, 1, a.bytes); /* still live */
        assert_int_equal(dmm_mechanism_release(m[k], &a).state, DMM_RELEASE_COMPLETE);
        dmm_release_outcome o = dmm_mechanism_release(m[k], &a); /* released already */
        assert_int_equal(o.state, DMM_RELEASE_FAILED);
        assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(m[k]));
    }
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(host->ops->census(host, &c));
    assert_int_equal(c.reserved_bytes + c.handles + c.mapped_bytes + c.eager_bytes, 0);
    dmm_driver_destroy(host);
}

static void test_release_state_names(void **state) {
    (void)state;
    assert_string_equal(dmm_release_state_str(DMM_RELEASE_COMPLETE), "DMM_RELEASE_COMPLETE");
    assert_string_equal(dmm_release_state_str(DMM_RELEASE_QUARANTINED), "DMM_RELEASE_QUARANTINED");
    assert_string_equal(dmm_release_state_str(DMM_RELEASE_FAILED), "DMM_RELEASE_FAILED");
    assert_non_null(strstr(dmm_release_state_str(9), "QUARANTINED"));
    dmm_release_outcome o = {9, 0, 0, 0, DMM_OK, 0};
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_QUARANTINED);
    assert_string_equal(dmm_mechanism_name(NULL), "(null mechanism)");
    assert_int_equal(dmm_mechanism_capabilities(NULL), 0);
    assert_null(dmm_mechanism_impl(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_validation),
        cmocka_unit_test(test_custom_virtual_backing_through_wrappers),
        cmocka_unit_test(test_argument_checks),
        cmocka_unit_test(test_wrong_mechanism),
        cmocka_unit_test(test_eager_lacks_virtual_backing),
        cmocka_unit_test(test_optional_virtual_backing_slots),
        cmocka_unit_test(test_builtin_mechanisms_agree_on_wrong_handles),
        cmocka_unit_test(test_release_state_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
