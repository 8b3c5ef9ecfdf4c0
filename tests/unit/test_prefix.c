/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_prefix.c — shared prefixes (DESIGN §4.6) over the real host driver.
 *
 * What it proves: an owner fills a prefix and every sharer reads the same bytes at its own address,
 * through ONE physical copy (the driver's census: handles and handle bytes unchanged by commits,
 * mapped bytes growing per sharer); a write through a sharer's read-only mapping faults (in a
 * fork()ed child, which must die of SIGSEGV/SIGBUS, while the same write through the owner survives);
 * every refusal (foreign prefix, unaligned offset, overrun, stale/altered target or prefix, target
 * already committed, refused budget, bad owner ranges) changes nothing (census, stats, tally and the
 * arena's check identical) and names the problem; the memory is freed exactly when the last of
 * owner, sharers and prefix object goes, in all six orders, and the accounting returns to zero; a
 * prefix whose owner and sharers are gone still maps into a new sharer; eager reports
 * DMM_ERR_UNSUPPORTED. Every step runs the expensive check; every test ends with nothing live. */
#include "arena_kit.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct fixture {
    dmm_driver *host;
    dmm_mechanism *m;
    kit_tally tally;
    dmm_accounting acct;
} fixture;

static fixture *fx_new(uint64_t chunk_limit, uint64_t cache_limit) {
    fixture *f = calloc(1, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    f->acct = kit_accounting(&f->tally);
    dmm_arena_config c = kit_config(1 * GIB, chunk_limit, cache_limit, &f->acct);
    DMM_OK_OR_FAIL(dmm_arena_create(f->host, &c, &f->m));
    KIT_CHECK(f->m);
    return f;
}

static void fx_end(fixture *f) {
    KIT_CHECK(f->m);
    assert_int_equal(kit_stats(f->m).allocations.current, 0);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(f->m));
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.owned), 0);
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.mapped), 0);
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->host);
    free(f);
}

/* The arena's check, census = stats, tally = stats. */
static void step(fixture *f) {
    KIT_CHECK(f->m);
    kit_stats_match_census(f->m, f->host);
    kit_tally_matches(&f->tally, f->m);
}

static unsigned char pat(size_t k) { return (unsigned char)(k * 131 + (k >> 12) * 7 + 1); }

static void fill(void *p, size_t bytes) {
    for (size_t k = 0; k < bytes; k++) ((unsigned char *)p)[k] = pat(k);
}

static void expect_pattern(const void *p, size_t bytes, const char *what) {
    const unsigned char *q = p;
    for (size_t k = 0; k < bytes; k++)
        if (q[k] != pat(k)) fail_msg("%s: byte %zu is 0x%02x, expected 0x%02x", what, k, q[k], pat(k));
}

static void on_fault(int sig) {
    (void)sig;
    _exit(42);
}

/* Writes one byte at p (its own value) in a fork()ed child: true when the child died of the write (SIGSEGV or
 * SIGBUS; under ASan the child's own handler reports it as exit 42), false when it survived. */
static bool write_faults(void *p) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fault;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        volatile unsigned char *q = p;
        *q = *q; /* the same value: a write that succeeds (shared memory) changes no byte */
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS;
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 42) return true;
    assert_int_equal(WEXITSTATUS(status), 0);
    return false;
}

static dmm_allocation va_only(fixture *f, size_t bytes) {
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, bytes, 0, NULL, 0, &a));
    return a;
}

static void release_ok(fixture *f, const dmm_allocation *a, uint64_t unmapped) {
    dmm_release_outcome o = dmm_mechanism_release(f->m, a);
    if (o.state != DMM_RELEASE_COMPLETE)
        fail_msg("release: %s (%s): %s", dmm_release_state_str(o.state), dmm_status_str(o.failure), dmm_last_error());
    assert_int_equal(o.unmapped_bytes, unmapped);
    step(f);
}

static void prefix_release_ok(fixture *f, const dmm_prefix *p) {
    dmm_release_outcome o = dmm_prefix_release(f->m, p);
    if (o.state != DMM_RELEASE_COMPLETE)
        fail_msg("prefix release: %s (%s): %s", dmm_release_state_str(o.state), dmm_status_str(o.failure),
                 dmm_last_error());
    assert_int_equal(o.allocation_bytes, p->bytes);
    assert_int_equal(o.unmapped_bytes, 0);
    assert_int_equal(o.residual_owned_bytes, 0);
    step(f);
}

/* ---- one physical copy, read-only sharers ---- */

static void sharers_read_the_owners_bytes_from_one_physical_copy(void **state) {
    (void)state;
    fixture *f = fx_new(2 * MIB, 0);
    assert_true((dmm_mechanism_capabilities(f->m) & DMM_CAP_SHARED_MAPPING) != 0);
    dmm_allocation owner, s1, s2;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 8 * MIB, 0, &owner)); /* 4 chunks of 2 MiB */
    fill(owner.ptr, 6 * MIB);
    step(f);
    dmm_driver_census c0 = kit_census(f->host);
    dmm_stats s0 = kit_stats(f->m);

    dmm_prefix p;
    DMM_OK_OR_FAIL(dmm_prefix_create(f->m, &owner, (dmm_range){0, 6 * MIB}, &p));
    assert_int_equal(p.bytes, 6 * MIB);
    assert_ptr_equal(p.mechanism, f->m);
    step(f);
    dmm_driver_census c = kit_census(f->host); /* making a prefix creates and charges nothing */
    assert_int_equal(c.handles, c0.handles);
    assert_int_equal(c.mapped_bytes, c0.mapped_bytes);
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.owned), 8 * MIB);
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.mapped), 8 * MIB);

    s1 = va_only(f, 6 * MIB);
    s2 = va_only(f, 10 * MIB);
    uint64_t own = 1, map = 0;
    DMM_OK_OR_FAIL(dmm_prefix_cost(f->m, &p, &s2, 4 * MIB, &own, &map));
    assert_int_equal(own, 0);
    assert_int_equal(map, 6 * MIB);
    DMM_OK_OR_FAIL(dmm_prefix_commit(f->m, &p, &s1, 0));
    step(f);
    DMM_OK_OR_FAIL(dmm_prefix_commit(f->m, &p, &s2, 4 * MIB));
    step(f);

    /* one physical copy: no new handle, no new driver create; mapped grows per sharer */
    c = kit_census(f->host);
    assert_int_equal(c.handles, c0.handles);
    assert_int_equal(c.handle_bytes, c0.handle_bytes);
    assert_int_equal(c.mapped_bytes, c0.mapped_bytes + 12 * MIB);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.driver_create, s0.driver_create);
    assert_int_equal(s.owned_bytes.current, 8 * MIB);
    assert_int_equal(s.mapped_bytes.current, 20 * MIB); /* mapped exceeds owned */
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.owned), 8 * MIB);
    assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.mapped), 20 * MIB);
    uint64_t committed = 0;
    DMM_OK_OR_FAIL(dmm_mechanism_committed_bytes(f->m, &s2, &committed));
    assert_int_equal(committed, 6 * MIB);

    /* the same bytes at each sharer's own address; the owner's later writes show through */
    unsigned char *o = owner.ptr, *a1 = s1.ptr, *a2 = s2.ptr;
    expect_pattern(a1, 6 * MIB, "sharer 1");
    expect_pattern(a2 + 4 * MIB, 6 * MIB, "sharer 2");
    o[5 * MIB + 3] = 0xAB;
    assert_int_equal(a1[5 * MIB + 3], 0xAB);
    assert_int_equal(a2[4 * MIB + 5 * MIB + 3], 0xAB);
    o[5 * MIB + 3] = pat(5 * MIB + 3);

    /* read-only at the sharers, read-write at the owner; a write through a sharer faults */
    char perms[5];
    dmm_test_prot_at(a1, perms);
    assert_string_equal(perms, "r--s");
    dmm_test_prot_at(o, perms);
    assert_string_equal(perms, "rw-s");
    assert_true(write_faults(a1 + 100));
    assert_true(write_faults(a2 + 4 * MIB + 2 * MIB));
    assert_false(write_faults(o + 100)); /* the harness can tell: the owner's write survives */
    expect_pattern(a1, 6 * MIB, "sharer 1 after the faulting child");

    /* a sharer's range can be decommitted (release-shaped) and the prefix committed again */
    dmm_release_outcome out = dmm_mechanism_decommit(f->m, &s2, (dmm_range){4 * MIB, 6 * MIB});
    assert_int_equal(out.state, DMM_RELEASE_COMPLETE);
    assert_int_equal(out.unmapped_bytes, 6 * MIB);
    step(f);
    assert_int_equal(kit_census(f->host).handles, c0.handles); /* the owner and s1 still map it */
    DMM_OK_OR_FAIL(dmm_prefix_commit(f->m, &p, &s2, 0));
    expect_pattern(a2, 6 * MIB, "sharer 2, committed again");
    step(f);

    release_ok(f, &s1, 6 * MIB);
    release_ok(f, &s2, 6 * MIB);
    release_ok(f, &owner, 8 * MIB);
    assert_int_equal(kit_census(f->host).handles, 3); /* the prefix object still holds its memory */
    prefix_release_ok(f, &p);
    assert_int_equal(kit_census(f->host).handles, 0);
    fx_end(f);
}

/* ---- release orders ---- */

static void memory_goes_exactly_when_the_last_holder_goes(void **state) {
    (void)state;
    static const char *orders[] = {"OSP", "OPS", "SOP", "SPO", "POS", "PSO"};
    for (size_t i = 0; i < sizeof orders / sizeof *orders; i++) {
        fixture *f = fx_new(2 * MIB, 0); /* no cache: a handle that goes is released */
        dmm_allocation owner, sharer;
        DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 8 * MIB, 0, &owner)); /* prefix 3 chunks + 1 more */
        fill(owner.ptr, 6 * MIB);
        dmm_prefix p;
        DMM_OK_OR_FAIL(dmm_prefix_create(f->m, &owner, (dmm_range){0, 6 * MIB}, &p));
        sharer = va_only(f, 6 * MIB);
        DMM_OK_OR_FAIL(dmm_prefix_commit(f->m, &p, &sharer, 0));
        step(f);
        bool o_live = true, s_live = true, p_live = true;
        for (const char *k = orders[i]; *k; k++) {
            if (*k == 'O') {
                release_ok(f, &owner, 8 * MIB);
                o_live = false;
            } else if (*k == 'S') {
                release_ok(f, &sharer, 6 * MIB);
                s_live = false;
            } else {
                prefix_release_ok(f, &p);
                p_live = false;
            }
            /* the prefix's 3 handles live while anyone holds them; the owner's 4th goes with it */
            uint64_t expect = (o_live ? 1 : 0) + (o_live || s_live || p_live ? 3 : 0);
            dmm_driver_census c = kit_census(f->host);
            if (c.handles != expect)
                fail_msg("order %s after %c: %llu handles, expected %llu", orders[i], *k,
                         (unsigned long long)c.handles, (unsigned long long)expect);
            assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.owned), (int64_t)(expect * 2 * MIB));
            if (s_live) expect_pattern(sharer.ptr, 6 * MIB, orders[i]);
            if (p_live && !o_live && !s_live) {
                /* parked: nobody maps it, the prefix holds it; a new sharer still sees the bytes */
                dmm_allocation late = va_only(f, 6 * MIB);
                DMM_OK_OR_FAIL(dmm_prefix_commit(f->m, &p, &late, 0));
                step(f);
                expect_pattern(late.ptr, 6 * MIB, "a sharer of a parked prefix");
                assert_true(write_faults(late.ptr));
                assert_int_equal(kit_census(f->host).handles, 3);
                release_ok(f, &late, 6 * MIB);
                assert_int_equal(kit_census(f->host).handles, 3);
            }
        }
        assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.mapped), 0);
        assert_int_equal(dmm_atomic_load_seq_cst(&f->tally.owned), 0);
        fx_end(f);
    }
}

static void a_released_prefix_leaves_its_memory_to_the_cache_rules(void **state) {
    (void)state;
    fixture *f = fx_new(2 * MIB, 4 * MIB); /* a cache for two of the three handles */
    dmm_allocation owner;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 6 * MIB, 0, &owner));
    dmm_prefix p;
    DMM_OK_OR_FAIL(dmm_prefix_create(f->m, &owner, (dmm_range){0, 6 * MIB}, &p));
    dmm_release_outcome o = dmm_mechanism_release(f->m, &owner);
    assert_int_equal(o.state, DMM_RELEASE_COMPLETE);
    step(f);
    dmm_stats s = kit_stats(f->m);
    assert_int_equal(s.cached_bytes.current, 0); /* parked in the prefix, not cached */
    assert_int_equal(s.owned_bytes.current, 6 * MIB);
    prefix_release_ok(f, &p);
    s = kit_stats(f->m);
    assert_int_equal(s.cached_bytes.current, 4 * MIB);
    assert_int_equal(s.owned_bytes.current, 4 * MIB);
    assert_int_equal(s.driver_release, 1);
    DMM_OK_OR_FAIL(dmm_arena_drain_cache(f->m));
    step(f);
    fx_end(f);
}

/* ---- refusals change nothing ---- */

typedef struct snapshot {
    dmm_driver_census c;
    dmm_stats s;
    int64_t owned, mapped;
} snapshot;

static snapshot snap(fixture *f) {
    snapshot x;
    KIT_CHECK(f->m);
    x.c = kit_census(f->host);
    x.s = kit_stats(f->m);
    x.owned = dmm_atomic_load_seq_cst(&f->tally.owned);
    x.mapped = dmm_atomic_load_seq_cst(&f->tally.mapped);
    return x;
}

static void same(fixture *f, const snapshot *b, const char *what) {
    snapshot a = snap(f);
    if (memcmp(&a.c, &b->c, sizeof a.c) != 0 || a.owned != b->owned || a.mapped != b->mapped ||
        a.s.mapped_bytes.current != b->s.mapped_bytes.current || a.s.owned_bytes.current != b->s.owned_bytes.current ||
        a.s.committed_bytes.current != b->s.committed_bytes.current || a.s.handles.current != b->s.handles.current ||
        a.s.driver_map != b->s.driver_map || a.s.driver_create != b->s.driver_create ||
        a.s.allocations.current != b->s.allocations.current)
        fail_msg("%s: a refusal changed something (census mapped %llu -> %llu, handles %llu -> %llu; tally mapped "
                 "%lld -> %lld; driver maps %llu -> %llu)",
                 what, (unsigned long long)b->c.mapped_bytes, (unsigned long long)a.c.mapped_bytes,
                 (unsigned long long)b->c.handles, (unsigned long long)a.c.handles, (long long)b->mapped,
                 (long long)a.mapped, (unsigned long long)b->s.driver_map, (unsigned long long)a.s.driver_map);
}

/* Both commit and cost refuse with `code` and a sentence naming `why`; nothing changes. */
static void refused(fixture *f, const dmm_prefix *p, const dmm_allocation *t, size_t offset, dmm_status code,
                    const char *why) {
    snapshot b = snap(f);
    dmm_status s = dmm_prefix_commit(f->m, p, t, offset);
    if (s != code) fail_msg("commit (%s): %s, expected %s: %s", why, dmm_status_str(s), dmm_status_str(code), dmm_last_error());
    dmm_test_error_mentions("dmm_prefix_commit", why, "nothing was changed", NULL);
    same(f, &b, why);
    uint64_t own = 7, map = 7;
    s = dmm_prefix_cost(f->m, p, t, offset, &own, &map);
    if (s != code) fail_msg("cost (%s): %s, expected %s", why, dmm_status_str(s), dmm_status_str(code));
    dmm_test_error_mentions(why, NULL);
    same(f, &b, why);
}

static void every_refusal_names_the_problem_and_changes_nothing(void **state) {
    (void)state;
    fixture *f = fx_new(2 * MIB, 0);
    dmm_allocation owner, t;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 6 * MIB, 0, &owner));
    fill(owner.ptr, 4 * MIB);
    dmm_prefix p;
    DMM_OK_OR_FAIL(dmm_prefix_create(f->m, &owner, (dmm_range){0, 4 * MIB}, &p));
    dmm_range keep = {6 * MIB, 1};
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 10 * MIB, 0, &keep, 1, &t)); /* granule 3 committed */
    step(f);

    /* a foreign prefix: another arena (its own budget) on the same device, and another device */
    kit_tally tally2;
    memset(&tally2, 0, sizeof tally2);
    dmm_accounting acct2 = kit_accounting(&tally2);
    dmm_arena_config c2 = kit_config(256 * MIB, 2 * MIB, 0, &acct2);
    dmm_mechanism *m2;
    dmm_driver *host2; /* its own driver, so that f->host's census stays f->m's alone */
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host2));
    DMM_OK_OR_FAIL(dmm_arena_create(host2, &c2, &m2));
    dmm_allocation o2;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m2, 2 * MIB, 0, &o2));
    dmm_prefix foreign;
    DMM_OK_OR_FAIL(dmm_prefix_create(m2, &o2, (dmm_range){0, 2 * MIB}, &foreign));
    refused(f, &foreign, &t, 0, DMM_ERR_WRONG_MECHANISM, "foreign prefix");
    dmm_release_outcome out = dmm_prefix_release(f->m, &foreign);
    assert_int_equal(out.state, DMM_RELEASE_FAILED);
    assert_int_equal(out.failure, DMM_ERR_WRONG_MECHANISM);
    dmm_prefix moved = p;
    moved.device.index = 5;
    refused(f, &moved, &t, 0, DMM_ERR_WRONG_DEVICE, "only on its own device");

    /* offsets and sizes */
    refused(f, &p, &t, 4096, DMM_ERR_INVALID_ARGUMENT, "not on a granule");
    refused(f, &p, &t, 8 * MIB, DMM_ERR_INVALID_ARGUMENT, "overrun");
    refused(f, &p, &t, SIZE_MAX & ~(size_t)(2 * MIB - 1), DMM_ERR_INVALID_ARGUMENT, "overrun"); /* wraps */
    refused(f, &p, &t, 4 * MIB, DMM_ERR_INVALID_ARGUMENT, "already committed");  /* its last granule */
    refused(f, &p, &t, 6 * MIB, DMM_ERR_INVALID_ARGUMENT, "already committed");  /* its first granule */
    refused(f, &p, &owner, 0, DMM_ERR_INVALID_ARGUMENT, "already committed");    /* the owner's own range */

    /* stale and altered handles */
    dmm_allocation gone = va_only(f, 4 * MIB);
    release_ok(f, &gone, 0);
    refused(f, &p, &gone, 0, DMM_ERR_UNKNOWN_ALLOCATION, "no live allocation");
    dmm_allocation forged = t;
    forged.bytes = 64 * MIB;
    refused(f, &p, &forged, 0, DMM_ERR_UNKNOWN_ALLOCATION, "altered");
    dmm_prefix stale = p;
    stale.id += 1000;
    refused(f, &stale, &t, 0, DMM_ERR_UNKNOWN_ALLOCATION, "no live prefix");
    dmm_prefix bigger = p;
    bigger.bytes = 8 * MIB;
    refused(f, &bigger, &t, 0, DMM_ERR_UNKNOWN_ALLOCATION, "altered");

    /* a budget that refuses the mapping */
    snapshot b = snap(f);
    dmm_atomic_store_seq_cst(&f->tally.refuse, 1);
    assert_int_equal(dmm_prefix_commit(f->m, &p, &t, 0), DMM_ERR_BUDGET);
    dmm_test_error_mentions("dmm_prefix_commit", "mapped axis", NULL);
    dmm_atomic_store_seq_cst(&f->tally.refuse, 0);
    same(f, &b, "refused budget");

    /* prefix_create refusals */
    struct {
        const dmm_allocation *owner;
        dmm_range range;
        dmm_status code;
        const char *why;
    } bad[] = {
        {&owner, {4096, 2 * MIB}, DMM_ERR_INVALID_ARGUMENT, "start on a granule"},
        {&owner, {0, 2 * MIB + 4096}, DMM_ERR_INVALID_ARGUMENT, "whole granules"},
        {&owner, {0, 0}, DMM_ERR_INVALID_ARGUMENT, "non-empty"},
        {&owner, {0, 2 * MIB}, DMM_ERR_INVALID_ARGUMENT, "already belongs to a prefix"},
        {&t, {0, 2 * MIB}, DMM_ERR_INVALID_ARGUMENT, "not committed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        b = snap(f);
        dmm_prefix q;
        assert_int_equal(dmm_prefix_create(f->m, bad[i].owner, bad[i].range, &q), bad[i].code);
        dmm_test_error_mentions("dmm_prefix_create", "refused", bad[i].why, "nothing was changed", NULL);
        same(f, &b, bad[i].why);
    }
    /* a chunk reaching past the range */
    dmm_mechanism *m3;
    dmm_arena_config c3 = kit_config(256 * MIB, 4 * MIB, 0, NULL);
    DMM_OK_OR_FAIL(dmm_arena_create(host2, &c3, &m3));
    dmm_allocation four;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(m3, 4 * MIB, 0, &four)); /* one chunk of 4 MiB */
    dmm_prefix q;
    assert_int_equal(dmm_prefix_create(m3, &four, (dmm_range){0, 2 * MIB}, &q), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("reaches past the range", NULL);
    KIT_CHECK(m3);
    assert_int_equal(dmm_mechanism_release(m3, &four).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m3));

    /* a sharer's read-only range can be neither a new prefix nor an alias source */
    dmm_allocation s1 = va_only(f, 8 * MIB);
    DMM_OK_OR_FAIL(dmm_prefix_commit(f->m, &p, &s1, 0));
    step(f);
    b = snap(f);
    assert_int_equal(dmm_prefix_create(f->m, &s1, (dmm_range){0, 2 * MIB}, &q), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("read-only", NULL);
    assert_int_equal(dmm_arena_alias(f->m, &s1, (dmm_range){4 * MIB, 2 * MIB}, (dmm_range){0, 2 * MIB}),
                     DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("read-only", "writable", NULL);
    same(f, &b, "read-only sources");
    release_ok(f, &s1, 4 * MIB);

    /* a second release of the prefix is FAILED and changes nothing */
    prefix_release_ok(f, &p);
    b = snap(f);
    out = dmm_prefix_release(f->m, &p);
    assert_int_equal(out.state, DMM_RELEASE_FAILED);
    assert_int_equal(out.failure, DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("no live prefix", NULL);
    same(f, &b, "second prefix release");
    refused(f, &p, &t, 0, DMM_ERR_UNKNOWN_ALLOCATION, "no live prefix");

    release_ok(f, &t, 2 * MIB);
    release_ok(f, &owner, 6 * MIB);
    assert_int_equal(dmm_mechanism_release(m2, &o2).state, DMM_RELEASE_COMPLETE);
    assert_int_equal(dmm_mechanism_destroy(m2), DMM_ERR_BUSY);
    dmm_test_error_mentions("prefix", "dmm_prefix_release", NULL);
    assert_int_equal(dmm_prefix_release(m2, &foreign).state, DMM_RELEASE_COMPLETE);
    KIT_CHECK(m2);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(m2));
    assert_int_equal(dmm_atomic_load_seq_cst(&tally2.owned), 0);
    dmm_driver_destroy(host2);
    fx_end(f);
}

/* A range holding two mappings of one handle (the owner aliased [0, 2M) at [2M, 4M)) would make two
 * pieces of one handle: the ring can point at only one, so the other would keep naming a chunk slot
 * after its chunks died (a freed or reused slot). Refused, changing nothing. */
static void a_range_mapping_one_handle_twice_is_refused(void **state) {
    (void)state;
    fixture *f = fx_new(2 * MIB, 0);
    dmm_allocation owner;
    dmm_range first = {0, 2 * MIB};
    DMM_OK_OR_FAIL(dmm_mechanism_allocate_committed(f->m, 4 * MIB, 0, &first, 1, &owner));
    DMM_OK_OR_FAIL(dmm_arena_alias(f->m, &owner, (dmm_range){2 * MIB, 2 * MIB}, first));
    step(f);
    snapshot b = snap(f);
    dmm_prefix p;
    dmm_status s = dmm_prefix_create(f->m, &owner, (dmm_range){0, 4 * MIB}, &p);
    if (s == DMM_OK) { /* the bug: let the check say what broke, then clean up as far as possible */
        KIT_CHECK(f->m);
        fail_msg("%s", "dmm_prefix_create of a range mapping one handle twice succeeded");
    }
    assert_int_equal(s, DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("dmm_prefix_create", "refused", "twice", "nothing was changed", NULL);
    same(f, &b, "one handle twice");
    /* either place alone is a prefix */
    DMM_OK_OR_FAIL(dmm_prefix_create(f->m, &owner, (dmm_range){2 * MIB, 2 * MIB}, &p));
    step(f);
    release_ok(f, &owner, 4 * MIB);
    prefix_release_ok(f, &p);
    fx_end(f);
}

static void destroy_is_refused_while_a_prefix_lives(void **state) {
    (void)state;
    fixture *f = fx_new(2 * MIB, 0);
    dmm_allocation owner;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(f->m, 2 * MIB, 0, &owner));
    dmm_prefix p;
    DMM_OK_OR_FAIL(dmm_prefix_create(f->m, &owner, (dmm_range){0, 2 * MIB}, &p));
    release_ok(f, &owner, 2 * MIB);
    assert_int_equal(dmm_mechanism_destroy(f->m), DMM_ERR_BUSY);
    dmm_test_error_mentions("prefix", "dmm_prefix_release", "nothing was changed", NULL);
    step(f);
    prefix_release_ok(f, &p);
    fx_end(f);
}

static void eager_has_no_shared_mapping(void **state) {
    (void)state;
    dmm_driver *host;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    dmm_mechanism *e;
    DMM_OK_OR_FAIL(dmm_eager_create(host, NULL, &e));
    assert_int_equal(dmm_mechanism_capabilities(e) & DMM_CAP_SHARED_MAPPING, 0);
    dmm_allocation a;
    DMM_OK_OR_FAIL(dmm_mechanism_allocate(e, 2 * MIB, 0, &a));
    dmm_prefix p;
    memset(&p, 0, sizeof p);
    assert_int_equal(dmm_prefix_create(e, &a, (dmm_range){0, 2 * MIB}, &p), DMM_ERR_UNSUPPORTED);
    dmm_test_error_mentions("dmm_prefix_create", "shared_mapping", NULL);
    p.mechanism = e;
    p.bytes = 2 * MIB;
    assert_int_equal(dmm_prefix_commit(e, &p, &a, 0), DMM_ERR_UNSUPPORTED);
    uint64_t own, map;
    assert_int_equal(dmm_prefix_cost(e, &p, &a, 0, &own, &map), DMM_ERR_UNSUPPORTED);
    dmm_release_outcome o = dmm_prefix_release(e, &p);
    assert_int_equal(o.state, DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_UNSUPPORTED);
    assert_int_equal(dmm_mechanism_release(e, &a).state, DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_mechanism_destroy(e));
    dmm_driver_destroy(host);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sharers_read_the_owners_bytes_from_one_physical_copy),
        cmocka_unit_test(memory_goes_exactly_when_the_last_holder_goes),
        cmocka_unit_test(a_released_prefix_leaves_its_memory_to_the_cache_rules),
        cmocka_unit_test(every_refusal_names_the_problem_and_changes_nothing),
        cmocka_unit_test(a_range_mapping_one_handle_twice_is_refused),
        cmocka_unit_test(destroy_is_refused_while_a_prefix_lives),
        cmocka_unit_test(eager_has_no_shared_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
