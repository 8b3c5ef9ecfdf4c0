/* SPDX-License-Identifier: Apache-2.0 */
/* The provider: one mechanism per consumer and device, chosen at creation (arena where the driver has
 * VMM, else eager) or replaced once before first use; replacement refused for another device, after an
 * allocation, or while the mechanism holds memory; allocations stay bound to their mechanism. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bind/provider_internal.h"
#include "core/atomics.h"
#include "testkit.h"

#define MiB (1024ull * 1024ull)

/* A driver without VMM: forwards eager alloc/free to the host driver, and claims any device. */
typedef struct novmm {
    dmm_driver base;
    dmm_driver *inner;
} novmm;

static dmm_status nv_alloc(dmm_driver *d, size_t bytes, uintptr_t *ptr) {
    dmm_driver *in = ((novmm *)d)->inner;
    return in->ops->alloc(in, bytes, ptr);
}
static dmm_status nv_free(dmm_driver *d, uintptr_t ptr, size_t bytes) {
    dmm_driver *in = ((novmm *)d)->inner;
    return in->ops->free(in, ptr, bytes);
}
static dmm_status nv_census(dmm_driver *d, dmm_driver_census *out) {
    dmm_driver *in = ((novmm *)d)->inner;
    return in->ops->census(in, out);
}
static void nv_destroy(dmm_driver *d) { (void)d; }

static const dmm_driver_ops novmm_ops = {
    .size = sizeof(dmm_driver_ops),
    .name = "novmm",
    .alloc = nv_alloc,
    .free = nv_free,
    .census = nv_census,
    .destroy = nv_destroy,
};

static dmm_driver *host;

static int setup(void **state) {
    (void)state;
    dmm_host_driver_config hc = {sizeof hc, 0};
    return dmm_host_driver_create(&hc, &host) == DMM_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    dmm_driver_census c = {.size = sizeof c};
    host->ops->census(host, &c);
    dmm_driver_destroy(host);
    /* Nothing live at the end of every test group. */
    return c.handles == 0 && c.eager_bytes == 0 && c.mapped_bytes == 0 && c.reserved_bytes == 0 ? 0 : -1;
}

static novmm novmm_for(dmm_device_id dev) {
    novmm n = {{.ops = &novmm_ops, .device = dev}, host};
    return n;
}

/* ---------------------------------------------------------------------------------------------- */

static void default_is_arena_with_vmm_else_eager(void **state) {
    (void)state;
    dmm_provider *p = NULL;
    dmm_provider_config cfg = {.size = sizeof cfg, .name = "ep"};
    DMM_OK_OR_FAIL(dmm_provider_create(host, &cfg, &p));
    assert_string_equal(dmm_mechanism_name(dmm_provider_mechanism(p)), "arena");
    assert_true(dmm_mechanism_capabilities(dmm_provider_mechanism(p)) & DMM_CAP_VIRTUAL_BACKING);
    assert_string_equal(dmm__provider_name(p), "ep");
    assert_int_equal(dmm_mechanism_device(dmm_provider_mechanism(p)).tier, DMM_TIER_HOST);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_provider_allocate(p, 3 * MiB, 0, &a));
    assert_ptr_equal(a.mechanism, dmm_provider_mechanism(p));
    memset(a.ptr, 0x5a, a.bytes);
    /* destroy refused while the allocation lives; nothing changed */
    assert_int_equal(dmm_provider_destroy(p), DMM_ERR_BUSY);
    dmm_release_outcome o = dmm_provider_release(p, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_provider_destroy(p));

    novmm nv = novmm_for(host->device);
    DMM_OK_OR_FAIL(dmm_provider_create(&nv.base, NULL, &p));
    assert_string_equal(dmm_mechanism_name(dmm_provider_mechanism(p)), "eager");
    assert_string_equal(dmm__provider_name(p), "provider");
    DMM_OK_OR_FAIL(dmm_provider_allocate(p, 1000, 0, &a));
    assert_int_equal(dmm_provider_allocate_committed(p, 4096, 0, NULL, 0, &a), DMM_ERR_UNSUPPORTED);
    o = dmm_provider_release(p, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_provider_destroy(p));
}

static void replacement_allowed_before_use(void **state) {
    (void)state;
    dmm_provider *p = NULL;
    DMM_OK_OR_FAIL(dmm_provider_create(host, NULL, &p));
    dmm_mechanism *eager = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &eager));
    assert_false(dmm__provider_in_use(p));
    DMM_OK_OR_FAIL(dmm_provider_replace_mechanism(p, eager)); /* the default arena is destroyed */
    assert_ptr_equal(dmm_provider_mechanism(p), eager);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_provider_allocate(p, 4096, 0, &a));
    assert_ptr_equal(a.mechanism, eager);
    assert_true(dmm__provider_in_use(p));
    assert_int_equal(dmm_provider_release(p, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_provider_destroy(p)); /* the caller's mechanism survives */
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(eager, 64, 0, &a));
    assert_int_equal(dmm_mechanism_release(eager, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(eager));
}

static void replacement_refused_after_one_allocation(void **state) {
    (void)state;
    dmm_provider *p = NULL;
    DMM_OK_OR_FAIL(dmm_provider_create(host, NULL, &p));
    dmm_mechanism *first = dmm_provider_mechanism(p);
    dmm_mechanism *eager = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &eager));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_provider_allocate(p, 2 * MiB, 0, &a));
    assert_int_equal(dmm_provider_replace_mechanism(p, eager), DMM_ERR_BUSY);
    dmm_test_error_mentions("keeps mechanism 'arena'", "nothing changed", "served an allocation", NULL);
    assert_ptr_equal(dmm_provider_mechanism(p), first);
    /* Still refused after the allocation is gone: it has been used. */
    assert_int_equal(dmm_provider_release(p, &a).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_provider_replace_mechanism(p, eager), DMM_ERR_BUSY);
    assert_ptr_equal(dmm_provider_mechanism(p), first);
    DMM_OK_OR_FAIL(dmm_provider_destroy(p));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(eager));
}

static void replacement_refused_for_another_device(void **state) {
    (void)state;
    dmm_provider *p = NULL;
    DMM_OK_OR_FAIL(dmm_provider_create(host, NULL, &p));
    novmm nv = novmm_for((dmm_device_id){DMM_TIER_DEVICE, 3});
    dmm_mechanism *other = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(&nv.base, NULL, &other));
    dmm_mechanism *first = dmm_provider_mechanism(p);
    assert_int_equal(dmm_provider_replace_mechanism(p, other), DMM_ERR_WRONG_DEVICE);
    dmm_test_error_mentions("host:0", "device:3", "nothing changed", NULL);
    assert_ptr_equal(dmm_provider_mechanism(p), first);
    /* ... and a provider over one device refuses a config mechanism of another */
    dmm_provider *q = NULL;
    dmm_provider_config cfg = {.size = sizeof cfg, .mechanism = other};
    assert_int_equal(dmm_provider_create(host, &cfg, &q), DMM_ERR_WRONG_DEVICE);
    assert_null(q);
    /* the refused provider is still usable and unused: a same-device replacement still works */
    dmm_mechanism *eager = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &eager));
    DMM_OK_OR_FAIL(dmm_provider_replace_mechanism(p, eager));
    DMM_OK_OR_FAIL(dmm_provider_destroy(p));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(eager));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(other));
}

static void replacement_only_once_and_not_of_a_used_mechanism(void **state) {
    (void)state;
    dmm_mechanism *e1 = NULL, *e2 = NULL, *e3 = NULL;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &e1));
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &e2));
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &e3));
    dmm_provider *p = NULL;
    dmm_provider_config cfg = {.size = sizeof cfg, .name = "session", .mechanism = e1};
    DMM_OK_OR_FAIL(dmm_provider_create(NULL, &cfg, &p));
    assert_int_equal(dmm_mechanism_device(dmm_provider_mechanism(p)).tier, DMM_TIER_HOST);
    /* e1 served an allocation directly (not through the provider): its stats say so. */
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e1, 128, 0, &a));
    assert_int_equal(dmm_provider_replace_mechanism(p, e2), DMM_ERR_BUSY);
    dmm_test_error_mentions("'session'", "served 1 allocations (1 live)", NULL);
    assert_int_equal(dmm_mechanism_release(e1, &a).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_provider_replace_mechanism(p, e2), DMM_ERR_BUSY); /* total stays 1 */
    dmm_provider_destroy(p);

    cfg.mechanism = e2;
    DMM_OK_OR_FAIL(dmm_provider_create(host, &cfg, &p));
    assert_int_equal(dmm_provider_replace_mechanism(p, e2), DMM_ERR_INVALID_ARGUMENT); /* itself */
    DMM_OK_OR_FAIL(dmm_provider_replace_mechanism(p, e3));
    assert_int_equal(dmm_provider_replace_mechanism(p, e2), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("replaced once already", NULL);
    assert_ptr_equal(dmm_provider_mechanism(p), e3);
    DMM_OK_OR_FAIL(dmm_provider_destroy(p));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e1));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e2));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e3));
}

static void replacement_refused_while_memory_is_committed(void **state) {
    (void)state;
    dmm_mechanism *arena = NULL, *eager = NULL;
    DMM_OK_OR_FAIL(dmm_arena_create(host, NULL, &arena));
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &eager));
    dmm_provider *p = NULL;
    dmm_provider_config cfg = {.size = sizeof cfg, .mechanism = arena};
    DMM_OK_OR_FAIL(dmm_provider_create(host, &cfg, &p));
    dmm_range r = {0, 2 * MiB};
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(arena, 4 * MiB, 0, &r, 1, &a));
    assert_int_equal(dmm_provider_replace_mechanism(p, eager), DMM_ERR_BUSY);
    assert_ptr_equal(dmm_provider_mechanism(p), arena);
    /* the provider releases it, since it is its mechanism's */
    assert_int_equal(dmm_provider_release(p, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_provider_destroy(p));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(arena));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(eager));
}

static void allocations_stay_bound_to_their_mechanism(void **state) {
    (void)state;
    dmm_provider *p = NULL, *q = NULL;
    DMM_OK_OR_FAIL(dmm_provider_create(host, NULL, &p));
    novmm nv = novmm_for(host->device);
    DMM_OK_OR_FAIL(dmm_provider_create(&nv.base, NULL, &q));
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_provider_allocate(p, 1 * MiB, 0, &a));
    DMM_OK_OR_FAIL(dmm_provider_allocate(q, 1 * MiB, 0, &b));
    /* q's allocation through p: refused, nothing changed */
    dmm_release_outcome o = dmm_provider_release(p, &b);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_WRONG_MECHANISM);
    dmm_test_error_mentions("nothing changed", NULL);
    memset(b.ptr, 1, b.bytes); /* still live */
    /* a forged handle claiming p's mechanism: p's mechanism refuses it, still nothing changed */
    dmm_allocation forged = b;
    forged.mechanism = a.mechanism;
    assert_int_equal(dmm_provider_release(p, &forged).state, DMM_RELEASE_FAILED);
    assert_int_equal(dmm_provider_release(q, &b).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_provider_release(p, &a).state, DMM_RELEASE_COMPLETE);
    /* a second release of the same allocation is FAILED */
    assert_int_equal(dmm_provider_release(p, &a).state, DMM_RELEASE_FAILED);
    DMM_OK_OR_FAIL(dmm_provider_destroy(p));
    DMM_OK_OR_FAIL(dmm_provider_destroy(q));
}

static void default_mechanism_charges_the_governor(void **state) {
    (void)state;
    dmm_governor *g = NULL;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &g));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(g, host->device, DMM_AXIS_OWNED, 8 * MiB));
    dmm_holder_config hc = {sizeof hc, "ep", 0, NULL, NULL};
    dmm_holder *h = NULL;
    DMM_OK_OR_FAIL(dmm_governor_holder_register(g, &hc, &h));
    dmm_lease_id l = 0;
    DMM_OK_OR_FAIL(dmm_lease_reserve(h, host->device, DMM_ROLE_ACTIVATION, 0, 0, &l));
    dmm_accounting acct;
    DMM_OK_OR_FAIL(dmm_governor_accounting(g, l, &acct));
    dmm_provider *p = NULL;
    dmm_provider_config cfg = {.size = sizeof cfg, .accounting = &acct};
    DMM_OK_OR_FAIL(dmm_provider_create(host, &cfg, &p));
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_provider_allocate(p, 6 * MiB, 0, &a));
    uint64_t owned = 0, mapped = 0;
    DMM_OK_OR_FAIL(dmm_lease_usage(g, l, &owned, &mapped));
    assert_int_equal(owned, 6 * MiB);
    assert_int_equal(mapped, 6 * MiB);
    assert_int_equal(dmm_provider_allocate(p, 4 * MiB, 0, &b), DMM_ERR_BUDGET);
    dmm_test_error_mentions("tier host:0", "role activation", NULL);
    assert_int_equal(dmm_provider_release(p, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_provider_destroy(p)); /* the arena gives back its cache, refunding the rest */
    DMM_OK_OR_FAIL(dmm_lease_usage(g, l, &owned, &mapped));
    assert_int_equal(owned, 0);
    assert_int_equal(mapped, 0);
    DMM_OK_OR_FAIL(dmm_lease_release(g, l));
    DMM_OK_OR_FAIL(dmm_governor_holder_unregister(h));
    DMM_OK_OR_FAIL(dmm_governor_destroy(g));
}


/* Threads racing their first allocations against one replacement: either the replacement won before
 * any allocation (all of them come from the new mechanism) or it was refused (all from the old one);
 * never a mix, and never an allocation from a mechanism that was destroyed. */
#define RACERS 4
typedef struct racer {
    dmm_provider *p;
    atomic_int *go;
    dmm_allocation a;
    dmm_status s;
} racer;

static void *race_allocate(void *arg) {
    racer *r = arg;
    while (dmm_atomic_load_seq_cst(r->go) == 0) {
    }
    r->s = dmm_provider_allocate(r->p, 4096, 0, &r->a);
    return NULL;
}

static void replacement_races_first_allocations(void **state) {
    (void)state;
    int replaced = 0, refused = 0;
    for (int round = 0; round < 40; round++) {
        novmm nv = novmm_for(host->device);
        dmm_provider *p = NULL;
        DMM_OK_OR_FAIL(dmm_provider_create(&nv.base, NULL, &p)); /* eager default: cheap */
        dmm_mechanism *old = dmm_provider_mechanism(p), *fresh = NULL;
        DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &fresh));
        atomic_int go = 0;
        racer r[RACERS];
        pthread_t t[RACERS];
        for (int i = 0; i < RACERS; i++) {
            r[i] = (racer){p, &go, {0}, DMM_OK};
            assert_int_equal(pthread_create(&t[i], NULL, race_allocate, &r[i]), 0);
        }
        dmm_atomic_store_seq_cst(&go, 1);
        dmm_status s = dmm_provider_replace_mechanism(p, fresh);
        for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
        dmm_mechanism *expect = s == DMM_OK ? fresh : old;
        if (s == DMM_OK) replaced++;
        else {
            assert_int_equal(s, DMM_ERR_BUSY);
            refused++;
        }
        for (int i = 0; i < RACERS; i++) {
            DMM_OK_OR_FAIL(r[i].s);
            assert_ptr_equal(r[i].a.mechanism, expect);
            assert_int_equal(dmm_provider_release(p, &r[i].a).state, DMM_RELEASE_COMPLETE);
        }
        DMM_OK_OR_FAIL(dmm_provider_destroy(p));
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(fresh));
    }
    assert_int_equal(replaced + refused, 40);
}

static void bad_arguments(void **state) {
    (void)state;
    dmm_provider *p = NULL;
    assert_int_equal(dmm_provider_create(NULL, NULL, &p), DMM_ERR_INVALID_ARGUMENT);
    dmm_provider_config cfg = {.size = 4};
    assert_int_equal(dmm_provider_create(host, &cfg, &p), DMM_ERR_SHORT_STRUCT);
    assert_int_equal(dmm_provider_create(host, NULL, NULL), DMM_ERR_INVALID_ARGUMENT);
    DMM_OK_OR_FAIL(dmm_provider_create(host, NULL, &p));
    assert_int_equal(dmm_provider_replace_mechanism(p, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_provider_release(p, NULL).state, DMM_RELEASE_FAILED);
    assert_null(dmm_provider_mechanism(NULL));
    DMM_OK_OR_FAIL(dmm_provider_destroy(p));
    DMM_OK_OR_FAIL(dmm_provider_destroy(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_is_arena_with_vmm_else_eager),
        cmocka_unit_test(replacement_allowed_before_use),
        cmocka_unit_test(replacement_refused_after_one_allocation),
        cmocka_unit_test(replacement_refused_for_another_device),
        cmocka_unit_test(replacement_only_once_and_not_of_a_used_mechanism),
        cmocka_unit_test(replacement_refused_while_memory_is_committed),
        cmocka_unit_test(allocations_stay_bound_to_their_mechanism),
        cmocka_unit_test(default_mechanism_charges_the_governor),
        cmocka_unit_test(replacement_races_first_allocations),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
