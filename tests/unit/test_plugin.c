/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_plugin.c — the plugin ABI and its loader (DESIGN §4.12), over the test plugins of
 * tests/plugin/ (one shared object per variant of mock_plugin.c):
 *  - negotiation: the good plugin loads and says who it is; a newer minor is agreed down to the
 *    host's and its extra slot (which aborts) is never called; every refusal (missing file, missing export,
 *    another major, a short info, a NULL required field, a plugin that refuses) names the file and
 *    the problem, returns the right code, leaves *out alone and closes the library again;
 *  - mechanisms: the plugin's mechanism works through dmm_mechanism_* (allocate, release with
 *    identity checks, stats, virtual backing) and under a dmm_pool; an inline failure message reaches
 *    the thread's sentence with the plugin's name; absent optional slots are UNSUPPORTED; a status
 *    left unset is a failure and an outcome left unfilled reads as QUARANTINED; short tables and NULL
 *    required slots are refused and the factory's object destroyed;
 *  - the optional virtual-backing slots of 1.1 (alias, is_quarantined, drain_cache, reservation):
 *    present exactly where a plugin of minor 1 fills them (an alias shows one memory at two places,
 *    owned once), absent at minor 0 even where the table holds them;
 *  - hostile values (issue 11): the host checks every value a plugin hands back before it uses it
 *    (mock_config.flags teach the mock each misbehaviour): a misaligned, reused-id or wrong-sized
 *    allocation is refused and given back; a forged, stale or altered handle is refused by the host
 *    before the plugin is called (the host keeps its own record of what it issued, so a permissive
 *    plugin cannot lower the live count); an inconsistent outcome reads as QUARANTINED; another
 *    device than the driver's is refused at creation; an unterminated kind is refused at load;
 *  - unload: refused (nothing changed) while a mechanism or an allocation lives, or while the
 *    plugin says it still owns something on its last load; two loads of one file are independent.
 * Every test ends with nothing live (mechanisms destroyed, plugins unloaded, driver census zero). */
#include "testkit.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../plugin/mock_plugin.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GRAN (64 * KiB)

static dmm_driver *host_driver(void) {
    dmm_host_driver_config cfg = {sizeof cfg, GRAN};
    dmm_driver *d = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(&cfg, &d));
    return d;
}

/* The driver holds nothing any more, then is destroyed. */
static void driver_done(dmm_driver *d) {
    dmm_test_census_zero(d);
    dmm_driver_destroy(d);
}

/* Whether the library at `path` is mapped in this process now. */
static bool library_mapped(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) return false;
    dlclose(h);
    return true;
}

static dmm_plugin *load(const char *path) {
    dmm_plugin *p = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_load(path, &p));
    assert_non_null(p);
    return p;
}

/* A refused load: the code, *out untouched, the library closed again, the sentence names the file
 * and the problem. */
static void expect_refused(const char *path, dmm_status code, const char *problem, const char *problem2) {
    dmm_plugin *sentinel = (dmm_plugin *)(uintptr_t)0x1234;
    dmm_plugin *p = sentinel;
    dmm_status s = dmm_plugin_load(path, &p);
    if (s != code) fail_msg("loading %s: expected %s, got %s: %s", path, dmm_status_str(code), dmm_status_str(s),
                            dmm_last_error());
    assert_ptr_equal(p, sentinel);
    dmm_test_error_mentions(path, problem, problem2, NULL);
    assert_false(library_mapped(path));
}

/* Calls mock_test_hold in the plugin's library (already loaded). */
static void hold(const char *path, int held) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    void *sym = dlsym(h, "mock_test_hold");
    assert_non_null(sym);
    void (*fn)(int);
    memcpy(&fn, &sym, sizeof fn);
    fn(held);
    dlclose(h);
}

/* The 1.1 slot's call count in the plugin's library (already loaded). */
static uint64_t slot_calls(const char *path, const char *slot) {
    uint64_t n = mock_slot_calls(path, slot);
    if (n == UINT64_MAX) fail_msg("%s: no mock_test_slot_calls or no slot '%s'", path, slot);
    return n;
}

/* ---- negotiation ---- */

static void test_load_good(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    assert_string_equal(dmm_plugin_name(p), "mock");
    assert_string_equal(dmm_plugin_version(p), "1.0.0");
    assert_string_equal(dmm_plugin_path(p), DMM_TEST_PLUGIN_GOOD);
    assert_int_equal(dmm_plugin_abi_minor(p), 0);
    assert_int_equal(dmm_plugin_capabilities(p), DMM_CAP_VIRTUAL_BACKING);
    assert_int_equal(dmm_plugin_kind_count(p), 1);
    assert_string_equal(dmm_plugin_kind(p, 0), "mock");
    assert_null(dmm_plugin_kind(p, 1));
    assert_int_equal(dmm_plugin_live_mechanisms(p), 0);
    assert_true(library_mapped(DMM_TEST_PLUGIN_GOOD));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    assert_false(library_mapped(DMM_TEST_PLUGIN_GOOD));
    DMM_OK_OR_FAIL(dmm_plugin_unload(NULL));
}

static void test_load_refusals(void **state) {
    (void)state;
    expect_refused(DMM_TEST_PLUGIN_MISSING, DMM_ERR_INVALID_ARGUMENT, "cannot open plugin file", "No such file");
    expect_refused(DMM_TEST_PLUGIN_NO_CAN_UNLOAD, DMM_ERR_INVALID_ARGUMENT, "lacks the required export",
                   "'dmm_plugin_can_unload'");
    expect_refused(DMM_TEST_PLUGIN_MAJOR2, DMM_ERR_VERSION_MISMATCH, "speaks plugin ABI 2.0", "speaks 1.0");
    expect_refused(DMM_TEST_PLUGIN_SHORT_INFO, DMM_ERR_SHORT_STRUCT, "struct_size", "that plugin ABI 1.0 defines");
    expect_refused(DMM_TEST_PLUGIN_NULL_NAME, DMM_ERR_INVALID_ARGUMENT, "lacks the required field 'name'", NULL);
    expect_refused(DMM_TEST_PLUGIN_REFUSES, DMM_ERR_UNSUPPORTED, MOCK_NEGOTIATION_TEXT, "negotiation");
    /* a kind with no NUL in its first 64 bytes: bounded, never read past (issue 11) */
    expect_refused(DMM_TEST_PLUGIN_LONG_KIND, DMM_ERR_INVALID_ARGUMENT, "mechanism kind 2 (of 2)",
                   "longer than 63 characters");
    dmm_plugin *p = NULL;
    assert_int_equal(dmm_plugin_load(NULL, &p), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_plugin_load(DMM_TEST_PLUGIN_GOOD, NULL), DMM_ERR_INVALID_ARGUMENT);
    assert_false(library_mapped(DMM_TEST_PLUGIN_GOOD));
    /* Refusals changed nothing: the good plugin still loads and unloads. */
    p = load(DMM_TEST_PLUGIN_GOOD);
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
}

/* A plugin of a minor above the host's (a longer info, a table with one more slot that aborts)
 * agrees on the host's minor and works; the abort() proves the extra slot is never called; ASan
 * proves nothing past the host's layout is read into the host's locals. */
static void test_newer_minor(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_NEWER_MINOR);
    assert_string_equal(dmm_plugin_name(p), "mock-newer");
    assert_int_equal(dmm_plugin_abi_minor(p), DMM_PLUGIN_ABI_MINOR);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a));
    memset(a.ptr, 0x5a, a.bytes);
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* ---- mechanisms ---- */

static void test_mechanism(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    assert_int_equal(dmm_plugin_live_mechanisms(p), 1);
    assert_string_equal(dmm_mechanism_name(m), "mock");
    assert_int_equal(dmm_mechanism_capabilities(m), DMM_CAP_VIRTUAL_BACKING);
    assert_int_equal(dmm_mechanism_device(m).tier, DMM_TIER_HOST);

    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 10 * KiB, 0, &a));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 3 * KiB, 1024, &b));
    assert_ptr_equal(a.mechanism, m);
    assert_int_equal(a.bytes, 10 * KiB);
    assert_true(a.id != 0 && b.id != 0 && a.id != b.id);
    assert_int_equal(b.align, 1024);
    memset(a.ptr, 1, a.bytes);
    memset(b.ptr, 2, b.bytes);

    dmm_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &st));
    assert_int_equal(st.allocations.current, 2);
    assert_int_equal(st.allocated_bytes.current, 13 * KiB);

    /* Identity: a stale id is the host's refusal (it issued no such id), FAILED; nothing changed. */
    dmm_allocation stale = a;
    stale.id += 1000;
    dmm_release_outcome o = dmm_mechanism_release(m, &stale);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("plugin 'mock'", "no live allocation", "dmm_mechanism_release", "not called", NULL);

    o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 10 * KiB);
    o = dmm_mechanism_release(m, &a); /* a second release */
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    o = dmm_mechanism_release(m, &b);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &st));
    assert_int_equal(st.allocations.current, 0);

    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    assert_int_equal(dmm_plugin_live_mechanisms(p), 0);
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

static void test_virtual_backing(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    dmm_range first = {0, GRAN};
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(m, 8 * GRAN, 0, &first, 1, &a));
    uint64_t bytes = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(m, &a, &bytes));
    assert_int_equal(bytes, GRAN);
    memset(a.ptr, 7, GRAN);
    dmm_range more[2] = {{0, 2 * GRAN}, {4 * GRAN, GRAN}};
    DMM_OK_OR_FAIL(dmm_mechanism_mapped_bytes_for_ranges(m, &a, more, 2, &bytes));
    assert_int_equal(bytes, 2 * GRAN);
    uint64_t newly = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_commit(m, &a, (dmm_range){GRAN, 3 * GRAN}, &newly));
    assert_int_equal(newly, 3 * GRAN);
    memset((char *)a.ptr + GRAN, 8, 3 * GRAN);
    assert_int_equal(((unsigned char *)a.ptr)[0], 7);
    dmm_release_outcome o = dmm_mechanism_decommit(m, &a, (dmm_range){GRAN, 2 * GRAN});
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 2 * GRAN);
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(m, &a, &bytes));
    assert_int_equal(bytes, 2 * GRAN);
    o = dmm_mechanism_release(m, &a); /* whole release through `release`, also for virtual backing */
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 2 * GRAN);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* ---- the optional virtual-backing slots of 1.1 ---- */

static const char *const slot_names[4] = {"alias", "is_quarantined", "drain_cache", "reservation"};
/* The same four slots by number, for dmm_mechanism_has_slot (slot_names serve the mock's call counts). */
static const dmm_optional_slot slot_ids[4] = {DMM_SLOT_ALIAS, DMM_SLOT_IS_QUARANTINED, DMM_SLOT_DRAIN_CACHE,
                                              DMM_SLOT_RESERVATION};

/* A plugin of minor 1 that fills them: the wrapped mechanism has each slot, and each reaches the
 * plugin. An alias maps the same memory a second time (both places show the same bytes, one owned
 * handle per granule, mapped twice); each place then lives on its own; refusals change nothing. */
static void test_optional_slots_of_1_1(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_ALIAS);
    assert_int_equal(dmm_plugin_abi_minor(p), 1);
    assert_string_equal(dmm_plugin_version(p), "1.1.0");
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    for (int i = 0; i < 4; i++) assert_true(dmm_mechanism_has_slot(m, slot_ids[i]));
    assert_int_equal(dmm_mechanism_capabilities(m), DMM_CAP_VIRTUAL_BACKING);

    dmm_range first = {0, 2 * GRAN};
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(m, 6 * GRAN, 0, &first, 1, &a));
    unsigned char *b = a.ptr;
    memset(b, 0x3c, 2 * GRAN);
    uint64_t aliases = slot_calls(DMM_TEST_PLUGIN_ALIAS, "alias");
    DMM_OK_OR_FAIL(dmm_mechanism_alias(m, &a, (dmm_range){4 * GRAN, 2 * GRAN}, first));
    assert_int_equal(slot_calls(DMM_TEST_PLUGIN_ALIAS, "alias"), aliases + 1);
    assert_int_equal(b[4 * GRAN + 17], 0x3c); /* one memory at two places */
    b[5 * GRAN + 1] = 0x5d;
    assert_int_equal(b[GRAN + 1], 0x5d);
    dmm_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &st));
    assert_int_equal(st.owned_bytes.current, 2 * GRAN); /* no new memory */
    assert_int_equal(st.mapped_bytes.current, 4 * GRAN);
    assert_int_equal(st.handles.current, 2);
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(d->ops->census(d, &c));
    assert_int_equal(c.handle_bytes, 2 * GRAN);
    assert_int_equal(c.mapped_bytes, 4 * GRAN);

    /* The host's own checks refuse a bad pair of ranges without asking the plugin. */
    aliases = slot_calls(DMM_TEST_PLUGIN_ALIAS, "alias");
    assert_int_equal(dmm_mechanism_alias(m, &a, (dmm_range){GRAN, 2 * GRAN}, first), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_mechanism_alias", "overlap", NULL);
    assert_int_equal(dmm_mechanism_alias(m, &a, (dmm_range){4 * GRAN, GRAN}, first), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_mechanism_alias(m, &a, (dmm_range){5 * GRAN, 2 * GRAN}, first), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(slot_calls(DMM_TEST_PLUGIN_ALIAS, "alias"), aliases);
    /* The plugin's refusal (a destination already backed) is its sentence; nothing changed. */
    assert_int_equal(dmm_mechanism_alias(m, &a, (dmm_range){0, GRAN}, (dmm_range){4 * GRAN, GRAN}),
                     DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_mechanism_alias", "plugin 'mock'", "not wholly uncommitted", NULL);
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &st));
    assert_int_equal(st.mapped_bytes.current, 4 * GRAN);

    /* Each place lives on its own: the old one goes, the memory stays at the new one. */
    dmm_release_outcome o = dmm_mechanism_decommit(m, &a, first);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(o.unmapped_bytes, 2 * GRAN);
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &st));
    assert_int_equal(st.owned_bytes.current, 2 * GRAN);
    assert_int_equal(st.mapped_bytes.current, 2 * GRAN);
    assert_int_equal(b[5 * GRAN + 1], 0x5d);
    assert_int_equal(b[4 * GRAN], 0x3c);

    bool q = true;
    DMM_OK_OR_FAIL(dmm_mechanism_is_quarantined(m, b, GRAN, &q));
    assert_false(q);
    DMM_OK_OR_FAIL(dmm_mechanism_drain_cache(m));
    uintptr_t va = 0;
    uint64_t vbytes = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_reservation(m, &va, &vbytes));
    assert_int_equal(va, (uintptr_t)a.ptr);
    assert_int_equal(vbytes, 6 * GRAN);
    DMM_OK_OR_FAIL(dmm_mechanism_reservation(m, NULL, NULL));
    for (int i = 1; i < 4; i++) assert_true(slot_calls(DMM_TEST_PLUGIN_ALIAS, slot_names[i]) >= 1);

    o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* A plugin of minor 0 has none of them: absent (its table stops before them, or, in the
 * SLOTS_AT_MINOR0 variant, fills them with slots that abort: above the agreed minor, never copied). */
static void test_slots_of_1_1_absent_at_minor_0(void **state) {
    (void)state;
    const char *paths[2] = {DMM_TEST_PLUGIN_GOOD, DMM_TEST_PLUGIN_SLOTS_AT_MINOR0};
    for (int k = 0; k < 2; k++) {
        dmm_plugin *p = load(paths[k]);
        assert_int_equal(dmm_plugin_abi_minor(p), 0);
        dmm_driver *d = host_driver();
        dmm_mechanism *m = NULL;
        DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
        assert_int_equal(dmm_mechanism_capabilities(m), DMM_CAP_VIRTUAL_BACKING);
        for (int i = 0; i < 4; i++) assert_false(dmm_mechanism_has_slot(m, slot_ids[i]));
        dmm_range first = {0, GRAN};
        dmm_allocation a;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(m, 2 * GRAN, 0, &first, 1, &a));
        assert_int_equal(dmm_mechanism_alias(m, &a, (dmm_range){GRAN, GRAN}, first), DMM_ERR_UNSUPPORTED);
        dmm_test_error_mentions("dmm_mechanism_alias", "no virtual-backing slot 'alias'", NULL);
        bool q = false;
        assert_int_equal(dmm_mechanism_is_quarantined(m, a.ptr, GRAN, &q), DMM_ERR_UNSUPPORTED);
        assert_int_equal(dmm_mechanism_drain_cache(m), DMM_ERR_UNSUPPORTED);
        assert_int_equal(dmm_mechanism_reservation(m, NULL, NULL), DMM_ERR_UNSUPPORTED);
        assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
        DMM_OK_OR_FAIL(dmm_plugin_unload(p));
        driver_done(d);
    }
}

/* The plugin's mechanism under the caching allocator, unchanged. */
static void test_pool_over_plugin(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    dmm_pool_config cfg = {.size = sizeof cfg, .va_bytes = 64 * MiB};
    dmm_pool *pool = NULL;
    DMM_OK_OR_FAIL(dmm_pool_create(m, d, &cfg, &pool));
    void *blocks[16];
    for (int i = 0; i < 16; i++) {
        DMM_OK_OR_FAIL(dmm_pool_malloc(pool, (size_t)(i + 1) * 10 * KiB, NULL, &blocks[i]));
        memset(blocks[i], i, (size_t)(i + 1) * 10 * KiB);
    }
    for (int i = 0; i < 16; i++) assert_int_equal(((unsigned char *)blocks[i])[0], i);
    dmm_pool_stats ps = {.size = sizeof ps};
    DMM_OK_OR_FAIL(dmm_pool_stats_get(pool, &ps));
    assert_int_equal(ps.allocations.current, 16);
    assert_true(ps.committed_bytes.current >= ps.allocated_bytes.current);
    DMM_OK_OR_FAIL(dmm_pool_check(pool));
    /* The plugin owns the pool's VA: its unload is refused while the pool lives. */
    assert_int_equal(dmm_plugin_unload(p), DMM_ERR_BUSY);
    for (int i = 0; i < 16; i++) DMM_OK_OR_FAIL(dmm_pool_free(pool, blocks[i], NULL));
    uint64_t released = 0;
    DMM_OK_OR_FAIL(dmm_pool_trim(pool, 0, &released));
    assert_true(released > 0);
    DMM_OK_OR_FAIL(dmm_pool_empty_cache(pool, &released)); /* no arena cache to drain: still fine */
    DMM_OK_OR_FAIL(dmm_pool_destroy(pool));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* A provider takes the plugin's mechanism like any other. */
static void test_provider_over_plugin(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    dmm_provider_config pc = {.size = sizeof pc, .name = "plugin-consumer", .mechanism = m};
    dmm_provider *prov = NULL;
    DMM_OK_OR_FAIL(dmm_provider_create(d, &pc, &prov));
    assert_ptr_equal(dmm_provider_mechanism(prov), m);
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_provider_allocate(prov, 8 * KiB, 0, &a));
    dmm_range r = {0, GRAN};
    DMM_OK_OR_FAIL(dmm_provider_allocate_committed(prov, 4 * GRAN, 0, &r, 1, &b));
    memset(a.ptr, 1, a.bytes);
    memset(b.ptr, 2, GRAN);
    assert_int_equal(dmm_provider_release(prov, &a).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_provider_release(prov, &b).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_provider_destroy(prov));
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m)); /* the caller's, not the provider's */
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* Threads allocate and release through one plugin mechanism (plain and virtual backing) while the
 * main thread loads the same file again, makes and destroys mechanisms, and tries to unload: every
 * unload of the busy load is refused, every other succeeds, nothing is left (run under ASan/TSan). */
typedef struct churn {
    dmm_mechanism *m;
    unsigned seed;
    _Atomic int *failures;
} churn;

static void *churn_thread(void *arg) {
    churn *c = arg;
    for (int i = 0; i < 300; i++) {
        c->seed = c->seed * 1103515245u + 12345u;
        size_t bytes = 512 + (c->seed >> 8) % (32 * KiB);
        dmm_allocation a;
        dmm_status s = (i % 3 == 0) ? dmm_mechanism_allocate_committed(c->m, 2 * GRAN, 0,
                                                                       &(dmm_range){0, GRAN}, 1, &a)
                                    : dmm_mechanism_allocate(c->m, bytes, 0, &a);
        if (s != DMM_OK) {
            (*c->failures)++;
            continue;
        }
        memset(a.ptr, i & 0xff, i % 3 == 0 ? GRAN : bytes);
        if (dmm_mechanism_release(c->m, &a).state != DMM_RELEASE_COMPLETE) (*c->failures)++;
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    _Atomic int failures = 0;
    enum { N = 4 };
    pthread_t t[N];
    churn c[N];
    for (int i = 0; i < N; i++) {
        c[i] = (churn){m, (unsigned)i + 1, &failures};
        assert_int_equal(pthread_create(&t[i], NULL, churn_thread, &c[i]), 0);
    }
    for (int round = 0; round < 20; round++) {
        dmm_plugin *p2 = load(DMM_TEST_PLUGIN_GOOD);
        dmm_mechanism *m2 = NULL;
        DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p2, "mock", d, NULL, &m2));
        dmm_allocation a;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(m2, 4 * KiB, 0, &a));
        assert_int_equal(dmm_plugin_unload(p), DMM_ERR_BUSY);
        assert_int_equal(dmm_plugin_unload(p2), DMM_ERR_BUSY);
        assert_int_equal(dmm_mechanism_release(m2, &a).state, DMM_RELEASE_COMPLETE);
        DMM_OK_OR_FAIL(dmm_mechanism_destroy(m2));
        DMM_OK_OR_FAIL(dmm_plugin_unload(p2)); /* not the last load: p keeps the library */
    }
    for (int i = 0; i < N; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(failures, 0);
    dmm_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &st));
    assert_int_equal(st.allocations.current, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* A plugin call that fails with an inline message: the thread's sentence carries it, prefixed with
 * the plugin's name and file and the operation. */
static void test_inline_failure(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    mock_config cfg = {sizeof cfg, 0, 1 * MiB};
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, &cfg, &m));
    dmm_allocation a;
    assert_int_equal(dmm_mechanism_allocate(m, 2 * MiB, 0, &a), DMM_ERR_OUT_OF_MEMORY);
    dmm_test_error_mentions("dmm_mechanism_allocate", "plugin 'mock'", DMM_TEST_PLUGIN_GOOD, MOCK_REFUSAL_TEXT,
                            "DMM_ERR_OUT_OF_MEMORY", NULL);
    assert_null(a.ptr);
    /* The factory's own failure: a config the plugin finds too short. */
    mock_config bad = {4, 0, 0};
    dmm_mechanism *m2 = (dmm_mechanism *)(uintptr_t)0x99;
    assert_int_equal(dmm_plugin_mechanism_create(p, "mock", d, &bad, &m2), DMM_ERR_SHORT_STRUCT);
    dmm_test_error_mentions("dmm_plugin_mechanism_create of kind 'mock'", "plugin 'mock'", "mock_config", NULL);
    assert_ptr_equal(m2, (dmm_mechanism *)(uintptr_t)0x99);
    /* A kind the plugin does not list never reaches its factory. */
    assert_int_equal(dmm_plugin_mechanism_create(p, "other", d, NULL, &m2), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("no mechanism of kind 'other'", NULL);
    assert_int_equal(dmm_plugin_live_mechanisms(p), 1);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    /* A release that says COMPLETE but fails its status: read as QUARANTINED with the message. */
    mock_config contra = {sizeof contra, MOCK_FLAG_CONTRADICT, 0};
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, &contra, &m));
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a));
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    dmm_test_error_mentions("dmm_mechanism_release", "plugin 'mock'", MOCK_SNAG_TEXT, NULL);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* NULL optional slots are absent: UNSUPPORTED when asked, never a silent success. */
static void test_optional_absent(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_NO_OPTIONAL);
    assert_int_equal(dmm_plugin_capabilities(p), 0);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    assert_int_equal(dmm_mechanism_capabilities(m), 0);
    dmm_stats st = {.size = sizeof st};
    assert_int_equal(dmm_mechanism_stats(m, &st), DMM_ERR_UNSUPPORTED);
    dmm_allocation a;
    assert_int_equal(dmm_mechanism_allocate_committed(m, GRAN, 0, NULL, 0, &a), DMM_ERR_UNSUPPORTED);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a));
    uint64_t newly = 0;
    assert_int_equal(dmm_mechanism_commit(m, &a, (dmm_range){0, 4 * KiB}, &newly), DMM_ERR_UNSUPPORTED);
    assert_int_equal(dmm_mechanism_decommit(m, &a, (dmm_range){0, 4 * KiB}).state, DMM_RELEASE_FAILED);
    dmm_pool *pool = NULL;
    assert_int_equal(dmm_pool_create(m, d, NULL, &pool), DMM_ERR_UNSUPPORTED);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* A status left unset, or with a code that is no dmm_status, is a failure (DMM_ERR_DRIVER); an
 * outcome left unfilled reads as QUARANTINED. */
static void test_silent_plugin(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_SILENT);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    dmm_allocation a;
    assert_int_equal(dmm_mechanism_allocate(m, MOCK_SILENT_BYTES, 0, &a), DMM_ERR_DRIVER);
    dmm_test_error_mentions("did not set its status", "plugin 'mock'", NULL);
    assert_int_equal(dmm_mechanism_allocate(m, MOCK_SILENT_BYTES + 1, 0, &a), DMM_ERR_DRIVER);
    dmm_test_error_mentions("code 99, which is no dmm_status", "mock invents code 99", NULL);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a));
    dmm_release_outcome o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    dmm_test_error_mentions("left the outcome unfilled", "DMM_RELEASE_QUARANTINED", NULL);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* Tables refused at creation: the factory's object is destroyed again (the plugin then unloads). */
static void test_table_refusals(void **state) {
    (void)state;
    dmm_driver *d = host_driver();
    const char *paths[2] = {DMM_TEST_PLUGIN_SHORT_OPS, DMM_TEST_PLUGIN_NULL_RELEASE};
    dmm_status codes[2] = {DMM_ERR_SHORT_STRUCT, DMM_ERR_INVALID_ARGUMENT};
    const char *problems[2] = {"dmm_plugin_mechanism_ops says struct_size", "lacks the required slot 'release'"};
    for (int i = 0; i < 2; i++) {
        dmm_plugin *p = load(paths[i]);
        dmm_mechanism *m = (dmm_mechanism *)(uintptr_t)0x77;
        assert_int_equal(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m), codes[i]);
        dmm_test_error_mentions(problems[i], paths[i], "kind 'mock'", NULL);
        assert_ptr_equal(m, (dmm_mechanism *)(uintptr_t)0x77);
        assert_int_equal(dmm_plugin_live_mechanisms(p), 0);
        DMM_OK_OR_FAIL(dmm_plugin_unload(p)); /* the plugin's can_unload: its object was destroyed */
    }
    driver_done(d);
}

/* ---- hostile values (issue 11) ---- */

/* A table whose struct_size ends inside a slot: the host copies whole slots only, so the cut slot is
 * absent (never half a pointer, which would be called later) and the slots before it work. */
static void test_a_table_cut_inside_a_slot_lacks_that_slot(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_TORN_VB);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    assert_true(dmm_mechanism_has_slot(m, slot_ids[0]));                      /* alias: whole */
    for (int i = 1; i < 4; i++) assert_false(dmm_mechanism_has_slot(m, slot_ids[i])); /* cut, then beyond */
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

static dmm_mechanism *mock_with(dmm_plugin *p, dmm_driver *d, uint32_t flags) {
    mock_config cfg = {sizeof cfg, flags, 0};
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, &cfg, &m));
    return m;
}

/* The plugin's own count of its live allocations (its stats). */
static int64_t plugin_allocations(dmm_mechanism *m) {
    dmm_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &st));
    return st.allocations.current;
}

/* Defect 1: a range off its alignment (MOCK_SKEW bytes) is refused, never handed out, and given back
 * to the plugin; nothing is live afterwards. */
static void test_a_misaligned_range_is_refused_and_given_back(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = mock_with(p, d, MOCK_FLAG_MISALIGN);
    dmm_allocation a;
    assert_int_equal(dmm_mechanism_allocate_committed(m, 4 * GRAN, 0, NULL, 0, &a), DMM_ERR_DRIVER);
    dmm_test_error_mentions("dmm_mechanism_allocate_committed", "plugin 'mock'",
                            "256 bytes off its 65536-byte alignment", "gave the allocation back", NULL);
    assert_null(a.ptr);
    assert_int_equal(dmm_mechanism_allocate(m, 4 * KiB, 1024, &a), DMM_ERR_DRIVER);
    dmm_test_error_mentions("dmm_mechanism_allocate", "256 bytes off its 1024-byte alignment", NULL);
    assert_int_equal(plugin_allocations(m), 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* A reused id and a size other than the one asked are refused and given back too. */
static void test_a_reused_id_or_a_wrong_size_is_refused(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = mock_with(p, d, MOCK_FLAG_SAME_ID);
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a));
    assert_int_equal(a.id, MOCK_SAME_ID);
    assert_int_equal(dmm_mechanism_allocate(m, 8 * KiB, 0, &b), DMM_ERR_DRIVER);
    dmm_test_error_mentions("id 4242", "still live", "gave the allocation back", NULL);
    assert_int_equal(plugin_allocations(m), 1);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 8 * KiB, 0, &b)); /* the id is free again */
    assert_int_equal(dmm_mechanism_release(m, &b).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));

    m = mock_with(p, d, MOCK_FLAG_WRONG_BYTES);
    assert_int_equal(dmm_mechanism_allocate(m, 4 * KiB, 0, &a), DMM_ERR_DRIVER);
    dmm_test_error_mentions("a range of 4097 bytes where 4096 were asked", NULL);
    assert_int_equal(plugin_allocations(m), 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* Defect 2, count > 0: with two allocations live, a forged handle (right mechanism, made-up ptr and
 * id) and an altered one are refused by the host before the permissive plugin (which would say
 * COMPLETE) is called; the live count stays 2, so destroy is refused until both are released. */
static void test_a_forged_handle_is_refused_while_allocations_live(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = mock_with(p, d, MOCK_FLAG_PERMISSIVE);
    dmm_allocation a, b;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a));
    dmm_range first = {0, GRAN};
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(m, 2 * GRAN, 0, &first, 1, &b));
    uint64_t releases = slot_calls(DMM_TEST_PLUGIN_GOOD, "release");
    uint64_t decommits = slot_calls(DMM_TEST_PLUGIN_GOOD, "decommit");
    uint64_t commits = slot_calls(DMM_TEST_PLUGIN_GOOD, "commit");

    dmm_allocation forged = a;
    forged.ptr = (char *)a.ptr + 64 * KiB;
    forged.id = a.id + 1000;
    dmm_release_outcome o = dmm_mechanism_release(m, &forged);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("dmm_mechanism_release", "no live allocation with id", "forged", "not called", NULL);
    dmm_allocation altered = b; /* the right id, another size */
    altered.bytes = GRAN;
    o = dmm_mechanism_release(m, &altered);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("altered", "131072 bytes", NULL);
    /* every call that names an allocation is checked the same way */
    uint64_t newly = 0, bytes = 0;
    forged = b;
    forged.id += 1000;
    assert_int_equal(dmm_mechanism_commit(m, &forged, first, &newly), DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(dmm_mechanism_decommit(m, &forged, first).failure, DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(dmm_mechanism_committed_bytes(m, &forged, &bytes), DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(dmm_mechanism_mapped_bytes_for_ranges(m, &forged, &first, 1, &bytes),
                     DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(slot_calls(DMM_TEST_PLUGIN_GOOD, "release"), releases);
    assert_int_equal(slot_calls(DMM_TEST_PLUGIN_GOOD, "decommit"), decommits);
    assert_int_equal(slot_calls(DMM_TEST_PLUGIN_GOOD, "commit"), commits);

    assert_int_equal(dmm_mechanism_destroy(m), DMM_ERR_BUSY);
    dmm_test_error_mentions("2 live allocations", NULL);
    memset(a.ptr, 1, a.bytes); /* both still live and good */
    memset(b.ptr, 2, GRAN);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_mechanism_destroy(m), DMM_ERR_BUSY);
    dmm_test_error_mentions("1 live allocation", NULL);
    assert_int_equal(dmm_mechanism_release(m, &b).state, DMM_RELEASE_COMPLETE);
    /* a released handle is stale: the host refuses it, the plugin is not asked */
    releases = slot_calls(DMM_TEST_PLUGIN_GOOD, "release");
    assert_int_equal(dmm_mechanism_release(m, &a).failure, DMM_ERR_UNKNOWN_ALLOCATION);
    assert_int_equal(slot_calls(DMM_TEST_PLUGIN_GOOD, "release"), releases);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* Defect 2, count == 0: a forged release on a mechanism with nothing live changes nothing (the
 * count cannot wrap): destroy succeeds right after it. */
static void test_a_forged_handle_at_count_zero_changes_nothing(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = mock_with(p, d, MOCK_FLAG_PERMISSIVE);
    dmm_allocation forged = {(void *)(uintptr_t)0x10000, 4 * KiB, 256, 777, m, dmm_mechanism_device(m)};
    uint64_t releases = slot_calls(DMM_TEST_PLUGIN_GOOD, "release");
    dmm_release_outcome o = dmm_mechanism_release(m, &forged);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("no live allocation with id 777", NULL);
    assert_int_equal(slot_calls(DMM_TEST_PLUGIN_GOOD, "release"), releases);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* An outcome whose numbers contradict the call or its own state reads as QUARANTINED (the memory's
 * state is unknown), with nothing known unmapped and a sentence naming the numbers. */
static void test_an_inconsistent_outcome_reads_as_quarantined(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    /* a decommit that unmapped more than its range */
    dmm_mechanism *m = mock_with(p, d, MOCK_FLAG_OVERCOUNT);
    dmm_range all = {0, 4 * GRAN};
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(m, 4 * GRAN, 0, &all, 1, &a));
    dmm_release_outcome o = dmm_mechanism_decommit(m, &a, (dmm_range){0, 2 * GRAN});
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    assert_int_equal(o.unmapped_bytes, 0);
    assert_int_equal(o.residual_owned_bytes, 2 * GRAN);
    dmm_test_error_mentions("dmm_mechanism_decommit", "inconsistent outcome", "262144 bytes unmapped",
                            "more than the 131072 bytes of the range", NULL);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE); /* the allocation is still live */
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));

    /* "FAILED: nothing changed" while the plugin freed the memory: not FAILED (the handle would stay
     * live in the host and never be releasable), QUARANTINED; the host forgets it */
    m = mock_with(p, d, MOCK_FLAG_FAILED_BUT_FREED);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a));
    o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    dmm_test_error_mentions("FAILED (nothing changed) with 4096 bytes unmapped", "mock says nothing changed", NULL);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));

    /* COMPLETE with all of it still owned */
    m = mock_with(p, d, MOCK_FLAG_COMPLETE_OWNED);
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a));
    o = dmm_mechanism_release(m, &a);
    assert_int_equal(o.state, DMM_RELEASE_QUARANTINED);
    assert_int_equal(o.failure, DMM_ERR_DRIVER);
    dmm_test_error_mentions("COMPLETE with 4096 bytes still owned", NULL);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* Counts a plugin reports below zero read as 0, each counted as a reference underflow: no statistic
 * of dmm goes negative whatever a plugin says. */
static void test_negative_counts_of_a_plugin_read_as_zero(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = mock_with(p, d, MOCK_FLAG_NEGATIVE_STATS);
    dmm_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_mechanism_stats(m, &st));
    assert_int_equal(st.allocations.current, 0);
    assert_int_equal(st.owned_bytes.current, 0);
    assert_int_equal(st.handles.current, 0);
    assert_true(st.owned_bytes.peak >= 0);
    assert_int_equal(st.refcount_underflows, 3);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    driver_done(d);
}

/* A mechanism that says it is on another device than its driver's is refused at creation (its
 * allocations would be charged and checked against the wrong device). */
static void test_a_mechanism_on_another_device_is_refused(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    mock_config cfg = {sizeof cfg, MOCK_FLAG_OTHER_DEVICE, 0};
    dmm_mechanism *m = (dmm_mechanism *)(uintptr_t)0x55;
    assert_int_equal(dmm_plugin_mechanism_create(p, "mock", d, &cfg, &m), DMM_ERR_WRONG_DEVICE);
    dmm_test_error_mentions("dmm_plugin_mechanism_create", "reports device (tier 1, index 1)",
                            "driver of device (tier 1, index 0)", NULL);
    assert_ptr_equal(m, (dmm_mechanism *)(uintptr_t)0x55);
    assert_int_equal(dmm_plugin_live_mechanisms(p), 0);
    DMM_OK_OR_FAIL(dmm_plugin_unload(p)); /* the factory's object was destroyed again */
    driver_done(d);
}

/* ---- unload ---- */

static void test_unload_busy(void **state) {
    (void)state;
    dmm_plugin *p = load(DMM_TEST_PLUGIN_GOOD);
    dmm_driver *d = host_driver();
    dmm_mechanism *m = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p, "mock", d, NULL, &m));
    assert_int_equal(dmm_plugin_unload(p), DMM_ERR_BUSY);
    dmm_test_error_mentions("plugin 'mock'", DMM_TEST_PLUGIN_GOOD, "1 live mechanism", "nothing was changed", NULL);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m, 4 * KiB, 0, &a)); /* still usable */
    assert_int_equal(dmm_mechanism_destroy(m), DMM_ERR_BUSY);
    dmm_test_error_mentions("1 live allocation", NULL);
    assert_int_equal(dmm_plugin_unload(p), DMM_ERR_BUSY);
    memset(a.ptr, 3, a.bytes);
    assert_int_equal(dmm_mechanism_release(m, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m));

    /* The plugin's own readiness: it still owns something outside any mechanism. */
    hold(DMM_TEST_PLUGIN_GOOD, 1);
    assert_int_equal(dmm_plugin_unload(p), DMM_ERR_BUSY);
    dmm_test_error_mentions("mock still owns", "1 held objects", "unload readiness", NULL);
    assert_true(library_mapped(DMM_TEST_PLUGIN_GOOD));
    hold(DMM_TEST_PLUGIN_GOOD, 0);
    DMM_OK_OR_FAIL(dmm_plugin_unload(p));
    assert_false(library_mapped(DMM_TEST_PLUGIN_GOOD));
    driver_done(d);
}

/* Two loads of one file: two handles over one library, each with its own mechanisms; the plugin's
 * readiness is asked only when the last one goes. */
static void test_load_twice(void **state) {
    (void)state;
    dmm_plugin *p1 = load(DMM_TEST_PLUGIN_GOOD);
    dmm_plugin *p2 = load(DMM_TEST_PLUGIN_GOOD);
    assert_ptr_not_equal(p1, p2);
    dmm_driver *d = host_driver();
    dmm_mechanism *m1 = NULL, *m2 = NULL;
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p1, "mock", d, NULL, &m1));
    DMM_OK_OR_FAIL(dmm_plugin_mechanism_create(p2, "mock", d, NULL, &m2));
    assert_int_equal(dmm_plugin_live_mechanisms(p1), 1);
    assert_int_equal(dmm_plugin_live_mechanisms(p2), 1);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m1, 4 * KiB, 0, &a));
    /* An allocation of m1 is not m2's. */
    dmm_release_outcome o = dmm_mechanism_release(m2, &a);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_WRONG_MECHANISM);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m2));
    /* p2 has nothing alive; p1 keeps the library (and its memory) mapped: p2 may go. */
    DMM_OK_OR_FAIL(dmm_plugin_unload(p2));
    assert_true(library_mapped(DMM_TEST_PLUGIN_GOOD));
    memset(a.ptr, 9, a.bytes);
    assert_int_equal(dmm_plugin_unload(p1), DMM_ERR_BUSY);
    assert_int_equal(dmm_mechanism_release(m1, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m1));
    /* Readiness is asked on the last load only. */
    dmm_plugin *p3 = load(DMM_TEST_PLUGIN_GOOD);
    hold(DMM_TEST_PLUGIN_GOOD, 1);
    DMM_OK_OR_FAIL(dmm_plugin_unload(p3)); /* p1 remains: not asked */
    assert_int_equal(dmm_plugin_unload(p1), DMM_ERR_BUSY);
    hold(DMM_TEST_PLUGIN_GOOD, 0);
    DMM_OK_OR_FAIL(dmm_plugin_unload(p1));
    assert_false(library_mapped(DMM_TEST_PLUGIN_GOOD));
    driver_done(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_good),        cmocka_unit_test(test_load_refusals),
        cmocka_unit_test(test_newer_minor),      cmocka_unit_test(test_mechanism),
        cmocka_unit_test(test_virtual_backing),  cmocka_unit_test(test_pool_over_plugin),
        cmocka_unit_test(test_inline_failure),   cmocka_unit_test(test_optional_absent),
        cmocka_unit_test(test_silent_plugin),    cmocka_unit_test(test_table_refusals),
        cmocka_unit_test(test_unload_busy),      cmocka_unit_test(test_load_twice),
        cmocka_unit_test(test_provider_over_plugin), cmocka_unit_test(test_threads),
        cmocka_unit_test(test_optional_slots_of_1_1), cmocka_unit_test(test_a_table_cut_inside_a_slot_lacks_that_slot), cmocka_unit_test(test_slots_of_1_1_absent_at_minor_0),
        cmocka_unit_test(test_a_misaligned_range_is_refused_and_given_back),
        cmocka_unit_test(test_a_reused_id_or_a_wrong_size_is_refused),
        cmocka_unit_test(test_a_forged_handle_is_refused_while_allocations_live),
        cmocka_unit_test(test_a_forged_handle_at_count_zero_changes_nothing),
        cmocka_unit_test(test_an_inconsistent_outcome_reads_as_quarantined),
        cmocka_unit_test(test_negative_counts_of_a_plugin_read_as_zero),
        cmocka_unit_test(test_a_mechanism_on_another_device_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
