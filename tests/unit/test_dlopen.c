/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_dlopen.c — libdmm.so loaded by dlopen after the program started, as Python loads
 * the torch adapter: it loads (its thread-locals fit glibc's rules for a late-loaded library: no
 * static-TLS model, CMakeLists.txt), and its pool serves cached pairs on two threads, the second
 * one started after the load (its thread-locals are made on first use).
 *
 * What is proven: dlopen of the built libdmm.so succeeds; through it a host driver, an arena and a
 * pool are made, 1000 exact repeats per thread come back at one address, and everything is
 * destroyed. The program's own statically linked copy of dmm is not used. The library stays loaded:
 * the biased lock's record of the exited thread waits on the library's free list (records are never
 * freed: a lock may still point at one), which a dlclose would drop (core/biased_lock.c, unload).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "testkit.h"

#ifndef DMM_SHARED_LIB
#error "DMM_SHARED_LIB: the path of the built libdmm.so (tests/CMakeLists.txt)"
#endif

typedef struct api {
    dmm_status (*host_driver_create)(const dmm_host_driver_config *, dmm_driver **);
    void (*driver_destroy)(dmm_driver *);
    dmm_status (*arena_create)(dmm_driver *, const dmm_arena_config *, dmm_mechanism **);
    dmm_status (*mechanism_destroy)(dmm_mechanism *);
    dmm_status (*pool_create)(dmm_mechanism *, dmm_driver *, const dmm_pool_config *, dmm_pool **);
    dmm_status (*pool_destroy)(dmm_pool *);
    dmm_status (*pool_malloc)(dmm_pool *, size_t, dmm_stream, void **);
    dmm_status (*pool_free)(dmm_pool *, void *, dmm_stream);
} api;

static void *sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (f == NULL) fail_msg("dlsym(%s): %s", name, dlerror());
    return f;
}

typedef struct pairs_arg {
    const api *a;
    dmm_pool *pool;
    dmm_stream stream;
    int ok;
} pairs_arg;

static void *pairs(void *arg) {
    pairs_arg *pa = arg;
    void *first = NULL, *p = NULL;
    pa->ok = 1;
    for (int i = 0; i < 1000; i++) {
        if (pa->a->pool_malloc(pa->pool, 64 << 10, pa->stream, &p) != DMM_OK) pa->ok = 0;
        if (i == 0) first = p;
        if (p != first) pa->ok = 0; /* an exact repeat takes the parked block back */
        if (pa->a->pool_free(pa->pool, p, pa->stream) != DMM_OK) pa->ok = 0;
    }
    return NULL;
}

static void a_late_loaded_libdmm_serves_pairs(void **state) {
    (void)state;
    void *lib = dlopen(DMM_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) fail_msg("dlopen(%s): %s", DMM_SHARED_LIB, dlerror());
    api a;
    *(void **)&a.host_driver_create = sym(lib, "dmm_host_driver_create");
    *(void **)&a.driver_destroy = sym(lib, "dmm_driver_destroy");
    *(void **)&a.arena_create = sym(lib, "dmm_arena_create");
    *(void **)&a.mechanism_destroy = sym(lib, "dmm_mechanism_destroy");
    *(void **)&a.pool_create = sym(lib, "dmm_pool_create");
    *(void **)&a.pool_destroy = sym(lib, "dmm_pool_destroy");
    *(void **)&a.pool_malloc = sym(lib, "dmm_pool_malloc");
    *(void **)&a.pool_free = sym(lib, "dmm_pool_free");
    dmm_driver *drv = NULL;
    dmm_mechanism *arena = NULL;
    dmm_pool *pool = NULL;
    assert_int_equal(a.host_driver_create(NULL, &drv), DMM_OK);
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = (uint64_t)1 << 30;
    assert_int_equal(a.arena_create(drv, &ac, &arena), DMM_OK);
    assert_int_equal(a.pool_create(arena, drv, NULL, &pool), DMM_OK);
    dmm_stream other = NULL;
    assert_int_equal(drv->ops->stream_create(drv, &other), DMM_OK);
    pairs_arg here = {&a, pool, NULL, 0}, there = {&a, pool, other, 0};
    pairs(&here);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pairs, &there), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(here.ok);
    assert_true(there.ok);
    dmm_status s = a.pool_destroy(pool); /* the host driver's events complete at once */
    for (int i = 0; s == DMM_ERR_BUSY && i < 1000; i++) s = a.pool_destroy(pool);
    assert_int_equal(s, DMM_OK);
    drv->ops->stream_destroy(drv, other);
    assert_int_equal(a.mechanism_destroy(arena), DMM_OK);
    a.driver_destroy(drv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_late_loaded_libdmm_serves_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
