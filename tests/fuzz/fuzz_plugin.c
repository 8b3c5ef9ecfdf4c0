/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fuzz_plugin.c — plugin negotiation and every plugin-returned structure (src/plugin/),
 * against a fake plugin whose answers the input chooses (fake_plugin.c, loaded as a real plugin).
 *
 * One input: dmm_plugin_load (negotiation), up to three dmm_plugin_mechanism_create (the factory and
 * its tables), then the mechanism's slots in the order the input says (allocate, release, stats,
 * every virtual-backing slot of 1.0 and 1.1, destroy), each answered as the input says. Then the
 * plugin is told to behave, and everything must tear down: live allocations release COMPLETE, the
 * mechanism destroys, the plugin unloads. What must hold after every call:
 *   - a status is a dmm_status, and a failure has a sentence;
 *   - a load that succeeded has a name and version shorter than 64 characters, 1 to 32 kinds, an
 *     agreed minor no higher than the host's; capabilities match the tables (virtual backing iff
 *     the table was accepted), and a missing optional slot answers DMM_ERR_UNSUPPORTED;
 *   - an allocation handed out has a non-zero address and id and the bytes asked for;
 *   - a release outcome has a known state, and a failure code exactly when it is not COMPLETE;
 *   - the host never destroys a mechanism that has live allocations (its own count), and never
 *     calls a plugin slot the plugin did not offer or the agreed minor does not have (the fake plugin
 *     checks that side, and the sanitizer every read past what the plugin handed over).
 * Forged handles (allocations the host never handed out) are not passed: that contract belongs to
 * the mechanism wrapper's callers.
 */
#include <dlfcn.h>

#include "dmm/dmm.h"
#include "fake_plugin.h"
#include "fuzzkit.h"

#ifndef FAKE_PLUGIN_PATH
#error "FAKE_PLUGIN_PATH names the fake plugin's module (tests/fuzz/CMakeLists.txt)"
#endif

static fake_plugin_feed_fn *feed;
static fake_plugin_byte_fn *byte;
static fake_plugin_behave_fn *behave;
static dmm_driver *host; /* the driver a mechanism is made for (the fake never calls it) */

static void *sym(void *lib, const char *name) {
    void *s = dlsym(lib, name);
    FUZZ_ASSERT(s != NULL, "the fake plugin lacks %s", name);
    return s;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    void *lib = dlopen(FAKE_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL); /* kept open: dmm's loads share it */
    FUZZ_ASSERT(lib != NULL, "cannot open the fake plugin %s: %s", FAKE_PLUGIN_PATH, dlerror());
    void *f = sym(lib, FAKE_PLUGIN_FEED), *b = sym(lib, FAKE_PLUGIN_BYTE), *h = sym(lib, FAKE_PLUGIN_BEHAVE);
    memcpy(&feed, &f, sizeof f);
    memcpy(&byte, &b, sizeof b);
    memcpy(&behave, &h, sizeof h);
    FUZZ_ASSERT(dmm_host_driver_create(NULL, &host) == DMM_OK, "no host driver: %s", dmm_last_error());
    return 0;
}

static void check_status(dmm_status s, const char *what) {
    FUZZ_ASSERT((int)s >= 0 && (int)s < DMM_STATUS_COUNT, "%s returned %d, no dmm_status", what, (int)s);
    FUZZ_ASSERT(s == DMM_OK || dmm_last_error()[0] != '\0', "%s failed (%s) without a sentence", what,
                dmm_status_str(s));
}

static void check_outcome(const dmm_release_outcome *o, const char *what) {
    FUZZ_ASSERT(o->state == DMM_RELEASE_COMPLETE || o->state == DMM_RELEASE_QUARANTINED ||
                    o->state == DMM_RELEASE_FAILED,
                "%s: state %u", what, o->state);
    FUZZ_ASSERT((o->state == DMM_RELEASE_COMPLETE) == (o->failure == DMM_OK), "%s: %s with failure %s", what,
                dmm_release_state_str(o->state), dmm_status_str(o->failure));
    check_status(o->failure, what);
}

enum { LIVE = 8 };
typedef struct mech {
    dmm_mechanism *m;
    dmm_allocation live[LIVE];
    size_t n;
} mech;

/* A range of an allocation of `bytes`: all of it, its second half, or any granule-ish range. */
static dmm_range a_range(size_t bytes) {
    uint8_t how = byte();
    dmm_range r = {0, bytes};
    if (how % 3 == 1) r = (dmm_range){bytes / 2, bytes - bytes / 2};
    if (how % 3 == 2) r = (dmm_range){(size_t)byte() << 12, (size_t)byte() << 12};
    return r;
}

static void take(mech *x, dmm_status s, const dmm_allocation *a, size_t bytes, const char *what) {
    check_status(s, what);
    if (s != DMM_OK) return;
    FUZZ_ASSERT(a->ptr != NULL && a->id != 0 && a->bytes == bytes && a->mechanism == x->m,
                "%s handed out ptr %p id %llu bytes %zu (asked %zu)", what, a->ptr, (unsigned long long)a->id, a->bytes,
                bytes);
    FUZZ_ASSERT(x->n < LIVE, "more than %d live", LIVE);
    x->live[x->n++] = *a;
}

static void release(mech *x, size_t k) {
    dmm_release_outcome o = dmm_mechanism_release(x->m, &x->live[k]);
    check_outcome(&o, "dmm_mechanism_release");
    if (o.state != DMM_RELEASE_FAILED) x->live[k] = x->live[--x->n]; /* gone (or kept out of use for good) */
}

static bool vb(const mech *x) { return (dmm_mechanism_capabilities(x->m) & DMM_CAP_VIRTUAL_BACKING) != 0; }

/* One slot call, chosen by the input; false when the mechanism is gone. */
static bool step(mech *x, uint8_t op) {
    dmm_status s;
    size_t k = x->n ? byte() % x->n : 0;
    dmm_allocation *a = x->n ? &x->live[k] : NULL;
    switch (op % 14) {
    case 1:
    case 2: {
        if (x->n == LIVE) return true;
        size_t bytes = (size_t)1 << (byte() % 40), align = op % 14 == 2 ? (size_t)1 << (byte() % 24) : 0;
        dmm_allocation out;
        memset(&out, 0, sizeof out);
        if (op % 14 == 1 || !vb(x)) {
            take(x, dmm_mechanism_allocate(x->m, bytes, align, &out), &out, bytes, "dmm_mechanism_allocate");
        } else {
            dmm_range r[12];
            size_t n = byte() % 12;
            for (size_t i = 0; i < n; i++) r[i] = a_range(bytes);
            take(x, dmm_mechanism_allocate_committed(x->m, bytes, align, r, n, &out), &out, bytes,
                 "dmm_mechanism_allocate_committed");
        }
        return true;
    }
    case 3:
        if (a != NULL) release(x, k);
        return true;
    case 4: {
        dmm_stats st;
        memset(&st, 0, sizeof st);
        st.size = sizeof st;
        check_status(dmm_mechanism_stats(x->m, &st), "dmm_mechanism_stats");
        FUZZ_ASSERT(st.size == sizeof st, "the stats' size became %u", st.size);
        return true;
    }
    case 5:
        if (a != NULL) {
            uint64_t newly = 0;
            check_status(dmm_mechanism_commit(x->m, a, a_range(a->bytes), &newly), "dmm_mechanism_commit");
        }
        return true;
    case 6:
        if (a != NULL) {
            dmm_release_outcome o = dmm_mechanism_decommit(x->m, a, a_range(a->bytes));
            check_outcome(&o, "dmm_mechanism_decommit");
        }
        return true;
    case 7:
        if (a != NULL) {
            uint64_t b = 0;
            check_status(dmm_mechanism_committed_bytes(x->m, a, &b), "dmm_mechanism_committed_bytes");
        }
        return true;
    case 8:
        if (a != NULL) {
            dmm_range r[12];
            size_t n = byte() % 12;
            for (size_t i = 0; i < n; i++) r[i] = a_range(a->bytes);
            uint64_t b = 0;
            check_status(dmm_mechanism_mapped_bytes_for_ranges(x->m, a, r, n, &b),
                         "dmm_mechanism_mapped_bytes_for_ranges");
        }
        return true;
    case 9:
        if (a != NULL) {
            s = dmm_mechanism_alias(x->m, a, a_range(a->bytes), a_range(a->bytes));
            check_status(s, "dmm_mechanism_alias");
            if (!dmm_mechanism_has_slot(x->m, DMM_SLOT_ALIAS))
                FUZZ_ASSERT(s == DMM_ERR_UNSUPPORTED, "alias without the slot: %s", dmm_status_str(s));
        }
        return true;
    case 10: {
        bool q = false;
        s = dmm_mechanism_is_quarantined(x->m, a ? a->ptr : (void *)4096, a ? a->bytes : 1, &q);
        check_status(s, "dmm_mechanism_is_quarantined");
        if (!dmm_mechanism_has_slot(x->m, DMM_SLOT_IS_QUARANTINED))
            FUZZ_ASSERT(s == DMM_ERR_UNSUPPORTED, "is_quarantined without the slot: %s", dmm_status_str(s));
        return true;
    }
    case 11:
        s = dmm_mechanism_drain_cache(x->m);
        check_status(s, "dmm_mechanism_drain_cache");
        if (!dmm_mechanism_has_slot(x->m, DMM_SLOT_DRAIN_CACHE))
            FUZZ_ASSERT(s == DMM_ERR_UNSUPPORTED, "drain_cache without the slot: %s", dmm_status_str(s));
        return true;
    case 12: {
        uintptr_t va = 0;
        uint64_t bytes = 0;
        s = dmm_mechanism_reservation(x->m, &va, &bytes);
        check_status(s, "dmm_mechanism_reservation");
        if (!dmm_mechanism_has_slot(x->m, DMM_SLOT_RESERVATION))
            FUZZ_ASSERT(s == DMM_ERR_UNSUPPORTED, "reservation without the slot: %s", dmm_status_str(s));
        return true;
    }
    case 13:
        s = dmm_mechanism_destroy(x->m);
        check_status(s, "dmm_mechanism_destroy");
        if (x->n > 0) FUZZ_ASSERT(s == DMM_ERR_BUSY, "destroyed with %zu live allocations (%s)", x->n, dmm_status_str(s));
        if (s == DMM_OK) x->m = NULL;
        return s != DMM_OK;
    default: return true;
    }
}

/* Everything back, with the plugin behaving: nothing may be refused now. */
static void teardown(mech *x) {
    behave();
    if (x->m == NULL) return;
    while (x->n > 0) {
        dmm_release_outcome o = dmm_mechanism_release(x->m, &x->live[x->n - 1]);
        FUZZ_ASSERT(o.state == DMM_RELEASE_COMPLETE, "a behaving plugin's release: %s (%s)",
                    dmm_release_state_str(o.state), dmm_last_error());
        x->n--;
    }
    dmm_status s = dmm_mechanism_destroy(x->m);
    FUZZ_ASSERT(s == DMM_OK, "a behaving plugin's destroy: %s", dmm_last_error());
    x->m = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    feed(data, size);
    dmm_plugin *p = NULL;
    dmm_clear_error();
    dmm_status s = dmm_plugin_load(FAKE_PLUGIN_PATH, &p);
    check_status(s, "dmm_plugin_load");
    if (s != DMM_OK) {
        FUZZ_ASSERT(p == NULL, "a refused load set its output");
        return 0;
    }
    FUZZ_ASSERT(strlen(dmm_plugin_name(p)) < 64 && strlen(dmm_plugin_version(p)) < 64, "name or version too long");
    size_t kinds = dmm_plugin_kind_count(p);
    FUZZ_ASSERT(kinds >= 1 && kinds <= 32 && dmm_plugin_kind(p, kinds) == NULL, "%zu kinds", kinds);
    for (size_t i = 0; i < kinds; i++) FUZZ_ASSERT(dmm_plugin_kind(p, i) != NULL, "kind %zu is NULL", i);
    FUZZ_ASSERT(dmm_plugin_abi_minor(p) <= DMM_PLUGIN_ABI_MINOR, "agreed minor %u", dmm_plugin_abi_minor(p));

    mech x;
    memset(&x, 0, sizeof x);
    for (int round = 0; round < 3 && x.m == NULL; round++) {
        uint8_t how = byte();
        const char *kind = how % 4 == 3 ? "no-such-kind" : dmm_plugin_kind(p, how % 4 == 0 ? 0 : byte() % kinds);
        s = dmm_plugin_mechanism_create(p, kind, host, NULL, &x.m);
        check_status(s, "dmm_plugin_mechanism_create");
        FUZZ_ASSERT(dmm_plugin_live_mechanisms(p) == (s == DMM_OK ? 1u : 0u), "%zu live mechanisms after %s",
                    dmm_plugin_live_mechanisms(p), dmm_status_str(s));
        if (s != DMM_OK) x.m = NULL;
    }
    if (x.m != NULL) {
        FUZZ_ASSERT((dmm_mechanism_capabilities(x.m) & ~(uint32_t)DMM_CAP_VIRTUAL_BACKING) == 0,
                    "capabilities %#x: a plugin mechanism offers virtual backing at most",
                    dmm_mechanism_capabilities(x.m));
        for (int n = 0; n < 64; n++) {
            uint8_t op = byte();
            if (op == 0 || !step(&x, op)) break;
        }
    }
    teardown(&x);
    FUZZ_ASSERT(dmm_plugin_live_mechanisms(p) == 0, "live mechanisms after the teardown");
    s = dmm_plugin_unload(p);
    FUZZ_ASSERT(s == DMM_OK, "a behaving plugin's unload: %s", dmm_last_error());
    return 0;
}
