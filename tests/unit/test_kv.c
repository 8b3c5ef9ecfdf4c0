/* SPDX-License-Identifier: Apache-2.0 */
/* tests/unit/test_kv.c — the KV arena (dmm/kv.h) on a device over the fault driver over the host
 * driver: its bookkeeping, on any Linux machine (issue 38, acceptance 6).
 *
 * What it proves: a request's range is reserved and backed granule by granule as it grows, at a
 * fixed address, its bytes kept; a prefix of a request is held once and mapped read-only into new
 * requests (the same physical bytes: a write through the owner shows in the sharer, a write into the
 * sharer's shared granules faults), its last partial granule copied into each sharer's private one
 * (copy-on-write at the first divergent granule); the owner may close before its sharers; growth from
 * the reserve creates no handle; a request beyond the governor's limit is refused with a sentence and
 * changes nothing; a request is preempted to host memory and restored at the same addresses with its
 * bytes; with zero_tail every granule of a request's range that holds none of its tokens reads zeros
 * (and faults when written), through growth, preemption and a failed growth, and a hole a failure left
 * is counted and filled by the next growth; a release the driver fails is reported FAILED and the
 * request stays open; every
 * test ends with the arena and the device destroyed and the host driver's census at zero.
 */
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "holder_kit.h" /* dmm_test_sleep_ms */
#include "testkit.h"

#include "dmm/dmm.h"

#define MIB ((uint64_t)1 << 20)
#define GRAN (2 * MIB) /* the host driver's default granularity */

/* A small decoder's token: 2 (K, V) × 4 layers × 2 heads × 64 dims × 2 bytes = 2 KiB, so 1024 tokens a
 * granule; a request holds up to 4096 tokens (four granules). */
#define TOKEN ((uint64_t)2048)
#define PER_GRANULE (GRAN / TOKEN)

typedef struct fx {
    dmm_driver *host, *fault;
    dmm_governor *gov;
    dmm_device *dev;
    dmm_kv *kv;
} fx;

static void fx_open_with(fx *f, uint32_t max_requests, bool zero_tail) {
    memset(f, 0, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(f->host, &f->fault));
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &f->gov));
    dmm_device_config dc = {.size = sizeof dc, .pool_va_bytes = 256 * MIB};
    DMM_OK_OR_FAIL(dmm_device_create(f->fault, f->gov, &dc, &f->dev));
    dmm_kv_config kc = {.size = sizeof kc, .token_bytes = TOKEN, .max_tokens = 4 * PER_GRANULE,
                        .max_requests = max_requests, .reserve_bytes = 4 * GRAN,
                        .flags = zero_tail ? DMM_KV_ZERO_TAIL : 0};
    DMM_OK_OR_FAIL(dmm_kv_create(f->dev, &kc, &f->kv));
}

static void fx_open(fx *f, uint32_t max_requests) { fx_open_with(f, max_requests, false); }

static void fx_close(fx *f) {
    DMM_OK_OR_FAIL(dmm_kv_destroy(f->kv));
    DMM_OK_OR_FAIL(dmm_device_destroy(f->dev));
    DMM_OK_OR_FAIL(dmm_governor_destroy(f->gov));
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->fault);
    dmm_driver_destroy(f->host);
}

static dmm_kv_request_info info(fx *f, const dmm_kv_request *r) {
    dmm_kv_request_info i = {.size = sizeof i};
    DMM_OK_OR_FAIL(dmm_kv_request_get(f->kv, r, &i));
    return i;
}

static dmm_kv_stats stats(fx *f) {
    dmm_kv_stats s = {.size = sizeof s};
    DMM_OK_OR_FAIL(dmm_kv_stats_get(f->kv, &s));
    return s;
}

/* Token t's first byte of request base b. */
static unsigned char *token(void *b, uint64_t t) { return (unsigned char *)b + t * TOKEN; }

static void close_ok(fx *f, dmm_kv_request *r) {
    dmm_release_outcome o = dmm_kv_close(f->kv, r);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
}

/* A request grows granule by granule under one address and keeps what it wrote. */
static void a_request_grows_in_place(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 8);
    dmm_kv_request *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 10, NULL, &r));
    dmm_kv_request_info i = info(&f, r);
    void *base = i.base;
    assert_non_null(base);
    assert_int_equal((uintptr_t)base % GRAN, 0);
    assert_int_equal(i.backed_tokens, PER_GRANULE); /* one granule backs the first 1024 tokens */
    assert_int_equal(i.private_bytes, GRAN);
    memset(token(base, 0), 0xA1, 10 * TOKEN);
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, PER_GRANULE)); /* still one granule: nothing to do */
    assert_int_equal(stats(&f).grows, 1);
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, 3 * PER_GRANULE + 1));
    i = info(&f, r);
    assert_ptr_equal(i.base, base);
    assert_int_equal(i.backed_tokens, 4 * PER_GRANULE);
    memset(token(base, 3 * PER_GRANULE), 0xA2, TOKEN);
    assert_int_equal(*token(base, 9), 0xA1);
    assert_int_equal(dmm_kv_grow(f.kv, r, 4 * PER_GRANULE + 1), DMM_ERR_INVALID_ARGUMENT); /* past max_tokens */
    dmm_test_error_mentions("max_tokens", "nothing changed", NULL);
    dmm_kv_stats s = stats(&f);
    assert_int_equal(s.requests, 1);
    assert_int_equal(s.private_bytes, 4 * GRAN);
    assert_int_equal(s.owned_bytes, 4 * GRAN);
    close_ok(&f, r);
    assert_int_equal(stats(&f).reserve_bytes, 4 * GRAN); /* its granules wait in the reserve */
    assert_int_equal(dmm_kv_grow(f.kv, r, 1), DMM_ERR_UNKNOWN_ALLOCATION);
    fx_close(&f);
}

static sigjmp_buf fault_jump;
static void on_fault(int sig) {
    (void)sig;
    siglongjmp(fault_jump, 1);
}

/* Whether writing one byte at p faults (the shared granules are mapped read-only). */
static bool write_faults(unsigned char *p) {
    struct sigaction sa, old_segv, old_bus;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fault;
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    bool faulted = true;
    if (sigsetjmp(fault_jump, 1) == 0) {
        *(volatile unsigned char *)p = 0x77;
        faulted = false;
    }
    sigaction(SIGSEGV, &old_segv, NULL);
    sigaction(SIGBUS, &old_bus, NULL);
    return faulted;
}

/* A prefix of 1.5 granules: its whole granule is held once and mapped read-only into each sharer, its
 * half granule copied into each sharer's private one; sharers grow past it on their own memory; the
 * owner closes first and the sharers still read the prefix; the memory goes with the last of them. */
static void a_prefix_is_held_once_and_copied_at_its_last_granule(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 8);
    const uint64_t P = PER_GRANULE + PER_GRANULE / 2;
    dmm_kv_request *owner = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, P, NULL, &owner));
    void *ob = info(&f, owner).base;
    for (uint64_t t = 0; t < P; t++) memset(token(ob, t), (int)(t % 251), TOKEN);
    dmm_kv_prefix *p = NULL;
    DMM_OK_OR_FAIL(dmm_kv_share(f.kv, owner, P, NULL, &p));

    dmm_kv_request *s[3];
    uint64_t owned_before = stats(&f).owned_bytes;
    for (int i = 0; i < 3; i++) {
        DMM_OK_OR_FAIL(dmm_kv_open(f.kv, p, P + 1, NULL, &s[i]));
        dmm_kv_request_info in = info(&f, s[i]);
        assert_int_equal(in.prefix_tokens, P);
        assert_int_equal(in.shared_bytes, GRAN);  /* the whole granule, mapped */
        assert_int_equal(in.private_bytes, GRAN); /* the copied one */
        for (uint64_t t = 0; t < P; t += 97) assert_int_equal(*token(in.base, t), (int)(t % 251));
        assert_int_equal(*token(in.base, P - 1), (int)((P - 1) % 251));
        memset(token(in.base, P), 0x10 + i, TOKEN);     /* each writes its own first private token */
    }
    /* three sharers cost one private granule each: the prefix's granule is not owned again */
    assert_int_equal(stats(&f).owned_bytes - owned_before, 3 * GRAN);
    dmm_kv_stats st = stats(&f);
    assert_int_equal(st.prefixes, 1);
    assert_int_equal(st.shared_bytes, 2 * GRAN); /* the owner's whole granule and the tail's copy */
    assert_int_equal(st.mapped_shared_bytes, 3 * GRAN);

    /* the same physical bytes: a write through the owner shows in every sharer; a sharer cannot write */
    void *b0 = info(&f, s[0]).base;
    *token(ob, 5) = 0x5A;
    assert_int_equal(*token(b0, 5), 0x5A);
    assert_true(write_faults(token(b0, 6)));
    assert_false(write_faults(token(b0, P)));
    for (int i = 0; i < 3; i++) assert_int_equal(*token(info(&f, s[i]).base, P), i == 0 ? 0x77 : 0x10 + i);

    /* the owner closes first; the sharers keep reading the prefix */
    close_ok(&f, owner);
    assert_int_equal(*token(info(&f, s[2]).base, 5), 0x5A);
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, s[2], 2 * PER_GRANULE + 5));
    assert_int_equal(info(&f, s[2]).private_bytes, 2 * GRAN);

    dmm_release_outcome o = dmm_kv_prefix_release(f.kv, p); /* still mapped: refused */
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_FAILED);
    assert_int_equal(o.failure, DMM_ERR_BUSY);
    assert_int_equal(dmm_kv_destroy(f.kv), DMM_ERR_BUSY);
    for (int i = 0; i < 3; i++) close_ok(&f, s[i]);
    o = dmm_kv_prefix_release(f.kv, p);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
    st = stats(&f);
    assert_int_equal(st.prefixes, 0);
    assert_int_equal(st.shared_bytes, 0);
    assert_int_equal(st.owned_bytes, st.reserve_bytes); /* only the reserve is left */
    fx_close(&f);
}

/* A prefix that ends on a granule has no tail: a sharer maps it and grows from the next granule. */
static void a_prefix_on_a_granule_is_only_mapped(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 4);
    dmm_kv_request *owner = NULL, *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 2 * PER_GRANULE, NULL, &owner));
    dmm_kv_prefix *p = NULL;
    DMM_OK_OR_FAIL(dmm_kv_share(f.kv, owner, 2 * PER_GRANULE, NULL, &p));
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, p, 2 * PER_GRANULE, NULL, &r));
    dmm_kv_request_info in = info(&f, r);
    assert_int_equal(in.shared_bytes, 2 * GRAN);
    assert_int_equal(in.private_bytes, 0);
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, 2 * PER_GRANULE + 1));
    assert_int_equal(info(&f, r).private_bytes, GRAN);
    /* a prefix of a sharer is refused: share from the owner of the memory */
    dmm_kv_prefix *q = NULL;
    assert_int_equal(dmm_kv_share(f.kv, r, 2 * PER_GRANULE + 1, NULL, &q), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("prefix of a prefix", "nothing changed", NULL);
    /* a request shorter than its prefix, a prefix longer than what is backed: refused */
    dmm_kv_request *bad = NULL;
    assert_int_equal(dmm_kv_open(f.kv, p, 5, NULL, &bad), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_kv_share(f.kv, owner, 3 * PER_GRANULE, NULL, &q), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("backed", NULL);
    assert_int_equal(stats(&f).requests, 2);
    close_ok(&f, r);
    close_ok(&f, owner);
    dmm_release_outcome o = dmm_kv_prefix_release(f.kv, p);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
    fx_close(&f);
}

/* The reserve: refilled ahead, growth maps its handles and creates none. */
static void growth_from_the_reserve_creates_no_handle(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 4);
    uint64_t created = 0;
    DMM_OK_OR_FAIL(dmm_kv_refill(f.kv, &created));
    assert_int_equal(created, 4 * GRAN);
    assert_int_equal(stats(&f).reserve_bytes, 4 * GRAN);
    DMM_OK_OR_FAIL(dmm_kv_refill(f.kv, &created)); /* full: nothing to do */
    assert_int_equal(created, 0);
    uint64_t creates = stats(&f).driver_creates, calls = dmm_fault_calls(f.fault, DMM_OP_CREATE);
    dmm_kv_request *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, NULL, &r));
    for (uint64_t t = 2; t <= 4 * PER_GRANULE; t++) DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, t)); /* a decode */
    assert_int_equal(stats(&f).driver_creates, creates);
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_CREATE), calls);
    assert_int_equal(stats(&f).reserve_bytes, 0);
    assert_int_equal(stats(&f).grows, 4);
    close_ok(&f, r);
    fx_close(&f);
}

/* The governor decides what fits: a request beyond the limit is refused with a sentence, nothing
 * changed; so is one beyond max_requests; after a close the next one fits. */
static void the_budget_decides_how_many_requests_fit(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 3);
    DMM_OK_OR_FAIL(dmm_governor_set_limit(f.gov, f.host->device, DMM_AXIS_OWNED, 5 * GRAN));
    dmm_kv_request *r[3] = {NULL, NULL, NULL};
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 2 * PER_GRANULE, NULL, &r[0]));
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 2 * PER_GRANULE, NULL, &r[1]));
    dmm_kv_request *no = NULL;
    assert_int_equal(dmm_kv_open(f.kv, NULL, 2 * PER_GRANULE, NULL, &no), DMM_ERR_BUDGET);
    assert_null(no);
    dmm_test_error_mentions("dmm_kv_open", "not opened", "limit", NULL);
    dmm_kv_stats s = stats(&f);
    assert_int_equal(s.requests, 2);
    assert_int_equal(s.refusals, 1);
    assert_int_equal(s.owned_bytes, 4 * GRAN);
    assert_int_equal(dmm_kv_grow(f.kv, r[1], 3 * PER_GRANULE), DMM_OK);  /* the fifth granule fits */
    assert_int_equal(dmm_kv_grow(f.kv, r[1], 4 * PER_GRANULE), DMM_ERR_BUDGET); /* the sixth does not */
    assert_int_equal(info(&f, r[1]).backed_tokens, 3 * PER_GRANULE);            /* kept what it had */
    close_ok(&f, r[0]);
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, PER_GRANULE, NULL, &r[0]));
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 0, NULL, &r[2])); /* no memory yet: fits */
    assert_int_equal(dmm_kv_open(f.kv, NULL, 0, NULL, &no), DMM_ERR_BUSY); /* max_requests */
    dmm_test_error_mentions("max_requests", NULL);
    for (int i = 0; i < 3; i++) close_ok(&f, r[i]);
    fx_close(&f);
}

/* One budget with the device's tensors: memory the device's pool caches (freed tensors) goes back
 * when a request's growth would pass the limit, and the growth succeeds; with nothing cached the
 * refusal stands. */
static void growth_takes_back_what_the_device_caches(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 2);
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f.dev, 3 * GRAN, NULL, &p));
    DMM_OK_OR_FAIL(dmm_device_free(f.dev, p, NULL)); /* cached by the pool, still charged */
    DMM_OK_OR_FAIL(dmm_governor_set_limit(f.gov, f.host->device, DMM_AXIS_OWNED, 4 * GRAN));
    dmm_kv_request *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 2 * PER_GRANULE, NULL, &r)); /* 3 cached + 2 > 4: the cache goes */
    assert_int_equal(info(&f, r).backed_tokens, 2 * PER_GRANULE);
    assert_int_equal(stats(&f).refusals, 0);
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, 4 * PER_GRANULE));             /* 4 of 4 */
    dmm_kv_request *no = NULL;
    assert_int_equal(dmm_kv_open(f.kv, NULL, PER_GRANULE, NULL, &no), DMM_ERR_BUDGET); /* nothing left to take */
    dmm_test_error_mentions("dmm_kv_open", "limit", NULL);
    assert_int_equal(stats(&f).refusals, 1);
    close_ok(&f, r);
    DMM_OK_OR_FAIL(dmm_governor_set_limit(f.gov, f.host->device, DMM_AXIS_OWNED, DMM_UNLIMITED));
    fx_close(&f);
}

/* A release the driver fails (an unmap) is FAILED: the request stays open and usable, and closes
 * when the driver lets go. */
static void a_failed_close_keeps_the_request(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 2);
    dmm_kv_request *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, PER_GRANULE, NULL, &r));
    memset(token(info(&f, r).base, 0), 0x42, TOKEN);
    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_UNMAP, 1, 1, DMM_ERR_DRIVER));
    dmm_release_outcome o = dmm_kv_close(f.kv, r); /* the unmap fails: nothing changed */
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_FAILED);
    assert_int_equal(stats(&f).requests, 1);
    assert_int_equal(*token(info(&f, r).base, 0), 0x42);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    close_ok(&f, r); /* the driver lets go now */
    fx_close(&f);
}

/* Whether every granule of r's range from byte `from` on reads zeros at its first and last byte. */
static bool reads_zeros_from(fx *f, const dmm_kv_request *r, uint64_t from) {
    const unsigned char *b = info(f, r).base;
    for (uint64_t at = from; at < 4 * GRAN; at += GRAN)
        if (b[at] != 0 || b[at + GRAN - 1] != 0) return false;
    return true;
}

/* zero_tail: a kernel may read a request up to its maximum length (a graph captured once): the
 * granules holding none of its tokens read zeros, from one granule of zeros (writes there fault);
 * growth, offload and restore swap the zeros for the request's own granules and back; a growth whose
 * commit fails maps the zeros back, and where it cannot, says so and counts the hole, which the next
 * growth fills. Without zero_tail the unbacked tail is counted unreadable. */
static void fixed_length_reads_see_zeros(void **state) {
    (void)state;
    fx f;
    fx_open_with(&f, 4, true);
    dmm_kv_request *r = NULL, *q = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, PER_GRANULE + 1, NULL, &r)); /* two granules backed */
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, NULL, &q));
    unsigned char *base = info(&f, r).base;
    assert_int_equal(info(&f, r).unreadable_bytes, 0);
    assert_true(reads_zeros_from(&f, r, 2 * GRAN));
    assert_true(reads_zeros_from(&f, q, GRAN));
    assert_true(write_faults(base + 3 * GRAN)); /* the zeros are read-only */
    dmm_kv_stats st = stats(&f);
    assert_int_equal(st.owned_bytes - st.reserve_bytes - st.private_bytes, GRAN); /* one granule of zeros */

    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, 2 * PER_GRANULE + 1)); /* the third granule becomes its own */
    memset(base + 2 * GRAN, 0x5a, GRAN);
    assert_int_equal(base[3 * GRAN - 1], 0x5a);
    assert_true(reads_zeros_from(&f, r, 3 * GRAN));
    assert_true(reads_zeros_from(&f, q, GRAN)); /* the zeros themselves untouched */

    DMM_OK_OR_FAIL(dmm_kv_offload(f.kv, r, NULL));
    assert_true(reads_zeros_from(&f, r, 0)); /* away: the whole range reads zeros */
    assert_int_equal(info(&f, r).unreadable_bytes, 0);
    DMM_OK_OR_FAIL(dmm_kv_restore(f.kv, r, NULL));
    assert_int_equal(base[2 * GRAN], 0x5a);
    assert_true(reads_zeros_from(&f, r, 3 * GRAN));

    /* the growth's map fails once: refused, the zeros mapped back */
    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_MAP, 1, 1, DMM_ERR_DRIVER));
    assert_int_equal(dmm_kv_grow(f.kv, r, 3 * PER_GRANULE + 1), DMM_ERR_DRIVER);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    assert_int_equal(info(&f, r).backed_tokens, 3 * PER_GRANULE);
    assert_int_equal(info(&f, r).unreadable_bytes, 0);
    assert_true(reads_zeros_from(&f, r, 3 * GRAN));
    /* every map fails: the zeros cannot come back either: said, and the hole counted */
    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_MAP, 1, UINT32_MAX, DMM_ERR_DRIVER));
    assert_int_equal(dmm_kv_grow(f.kv, r, 3 * PER_GRANULE + 1), DMM_ERR_DRIVER);
    dmm_test_error_mentions("zeros could not be mapped back", "reading them faults", NULL);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    assert_int_equal(info(&f, r).unreadable_bytes, GRAN);
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, 3 * PER_GRANULE + 1)); /* the next growth backs the hole */
    assert_int_equal(info(&f, r).unreadable_bytes, 0);
    close_ok(&f, r);
    close_ok(&f, q);
    fx_close(&f);

    /* a create whose n-th driver call fails: refused with a sentence, nothing left behind */
    bool made = false;
    for (uint64_t nth = 1; !made && nth < 64; nth++) {
        memset(&f, 0, sizeof f);
        DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f.host));
        DMM_OK_OR_FAIL(dmm_fault_driver_create(f.host, &f.fault));
        DMM_OK_OR_FAIL(dmm_governor_create(NULL, &f.gov));
        dmm_device_config dc = {.size = sizeof dc, .pool_va_bytes = 256 * MIB};
        DMM_OK_OR_FAIL(dmm_device_create(f.fault, f.gov, &dc, &f.dev));
        DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_ANY, nth, 1, DMM_ERR_DRIVER));
        dmm_kv_config kc = {.size = sizeof kc, .token_bytes = TOKEN, .max_tokens = 4 * PER_GRANULE,
                            .flags = DMM_KV_ZERO_TAIL};
        dmm_status s = dmm_kv_create(f.dev, &kc, &f.kv);
        made = s == DMM_OK;
        if (!made) {
            assert_null(f.kv);
            assert_true(dmm_last_error()[0] != '\0');
            f.kv = NULL; /* dmm_kv_destroy(NULL) is a no-op */
        }
        DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
        fx_close(&f); /* the census is zero */
    }
    assert_true(made);

    fx_open(&f, 2); /* without zero_tail: the unbacked tail is unreadable, and counted */
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, NULL, &r));
    assert_int_equal(info(&f, r).unreadable_bytes, 3 * GRAN);
    close_ok(&f, r);
    dmm_kv_destroy(f.kv);
    /* a caller built before flags: its size stops before them, and what lies past it is not read */
    dmm_kv_config *old = malloc(sizeof *old);
    assert_non_null(old);
    memset(old, 0xab, sizeof *old);
    old->size = (uint32_t)offsetof(dmm_kv_config, flags);
    old->token_bytes = TOKEN;
    old->max_tokens = 4 * PER_GRANULE;
    old->max_requests = 2;
    old->reserve_bytes = 0;
    old->refill_thread = false;
    DMM_OK_OR_FAIL(dmm_kv_create(f.dev, old, &f.kv));
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, NULL, &r));
    assert_int_equal(info(&f, r).unreadable_bytes, 3 * GRAN); /* no zeros */
    close_ok(&f, r);
    DMM_OK_OR_FAIL(dmm_kv_destroy(f.kv));
    old->size = sizeof *old; /* flags it does not know: refused */
    old->flags = DMM_KV_ZERO_TAIL | 4;
    f.kv = NULL;
    assert_int_equal(dmm_kv_create(f.dev, old, &f.kv), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("flags", "DMM_KV_ZERO_TAIL", "nothing was created", NULL);
    assert_null(f.kv);
    free(old);
    fx_close(&f);
}

/* zero_tail when calls fail: a refused open maps no zeros; a hole a failed growth left is filled by the
 * next growth, also a shorter one; a destroy the driver refuses leaves the arena usable, zeros
 * included, whether the zeros' owner stayed or the arena's own teardown failed after they went. */
static void zero_tails_through_failures(void **state) {
    (void)state;
    fx f;
    fx_open_with(&f, 4, true);
    dmm_kv_request *r = NULL, *q = NULL;
    dmm_device_id dev = f.host->device;
    dmm_tier_usage tu = {.size = sizeof tu};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(f.gov, dev, &tu));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(f.gov, dev, DMM_AXIS_OWNED, tu.used[DMM_AXIS_OWNED] + GRAN));
    uint64_t maps = dmm_fault_calls(f.fault, DMM_OP_MAP);
    assert_int_equal(dmm_kv_open(f.kv, NULL, 2 * PER_GRANULE, NULL, &r), DMM_ERR_BUDGET);
    assert_int_equal(dmm_fault_calls(f.fault, DMM_OP_MAP), maps); /* refused before any zeros were mapped */
    DMM_OK_OR_FAIL(dmm_governor_set_limit(f.gov, dev, DMM_AXIS_OWNED, DMM_UNLIMITED));

    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, NULL, &r)); /* one granule backed, zeros over three */
    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_MAP, 1, UINT32_MAX, DMM_ERR_DRIVER));
    assert_int_equal(dmm_kv_grow(f.kv, r, 2 * PER_GRANULE + 1), DMM_ERR_DRIVER);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    assert_int_equal(info(&f, r).unreadable_bytes, 2 * GRAN); /* [1, 3) granules: a hole */
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, PER_GRANULE + 1));  /* backs [1, 2) and fills [2, 3) */
    assert_int_equal(info(&f, r).unreadable_bytes, 0);
    assert_true(reads_zeros_from(&f, r, 2 * GRAN));
    close_ok(&f, r);

    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_UNMAP, 1, 1, DMM_ERR_DRIVER)); /* the zeros' owner stays */
    assert_int_equal(dmm_kv_destroy(f.kv), DMM_ERR_BUSY);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, NULL, &q));
    assert_true(reads_zeros_from(&f, q, GRAN));
    close_ok(&f, q);
    /* the zeros go (to the arena's cache), then the arena's own teardown fails at its first release */
    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_RELEASE, 1, 1, DMM_ERR_DRIVER));
    assert_int_equal(dmm_kv_destroy(f.kv), DMM_ERR_DRIVER);
    dmm_test_error_mentions("could not be destroyed", "stays usable", NULL);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, NULL, &q)); /* the zeros were made again */
    assert_true(reads_zeros_from(&f, q, GRAN));
    close_ok(&f, q);
    fx_close(&f);
}

/* A prefix released while its owner is open: the owner counts its granules as its own again and can be
 * offloaded; a prefix pointer once released is refused (not read); a tail whose release the driver
 * refuses leaves the prefix whole (FAILED), to be released again. */
static void a_prefix_released_under_its_open_owner(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 4);
    dmm_kv_request *owner = NULL, *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 2 * PER_GRANULE, NULL, &owner));
    dmm_kv_prefix *p = NULL;
    DMM_OK_OR_FAIL(dmm_kv_share(f.kv, owner, PER_GRANULE + 5, NULL, &p)); /* a whole granule and a tail */
    assert_int_equal(info(&f, owner).private_bytes, GRAN); /* one of its two granules is the prefix's */
    assert_int_equal(dmm_kv_offload(f.kv, owner, NULL), DMM_ERR_BUSY);
    dmm_test_error_mentions("release the prefix first", NULL);

    DMM_OK_OR_FAIL(dmm_fault_plan(f.fault, DMM_OP_UNMAP, 1, 1, DMM_ERR_DRIVER)); /* the tail's unmap */
    dmm_release_outcome o = dmm_kv_prefix_release(f.kv, p);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_FAILED);
    DMM_OK_OR_FAIL(dmm_fault_clear(f.fault));
    assert_int_equal(stats(&f).prefixes, 1);
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, p, PER_GRANULE + 6, NULL, &r)); /* still whole: a request opens with it */
    close_ok(&f, r);

    o = dmm_kv_prefix_release(f.kv, p);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
    assert_int_equal(info(&f, owner).private_bytes, 2 * GRAN); /* its own again */
    assert_int_equal(stats(&f).shared_bytes, 0);
    assert_int_equal(dmm_kv_open(f.kv, p, PER_GRANULE + 6, NULL, &r), DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_test_error_mentions("not an open prefix", NULL);
    DMM_OK_OR_FAIL(dmm_kv_share(f.kv, owner, PER_GRANULE, NULL, &p)); /* shared again: the counts stay whole */
    o = dmm_kv_prefix_release(f.kv, p);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
    assert_int_equal(info(&f, owner).private_bytes, 2 * GRAN);
    DMM_OK_OR_FAIL(dmm_kv_offload(f.kv, owner, NULL));
    DMM_OK_OR_FAIL(dmm_kv_restore(f.kv, owner, NULL));
    close_ok(&f, owner);
    assert_int_equal(stats(&f).unreleased, 0);
    fx_close(&f);
}

/* Preemption: offload copies a request's own granules to host memory (charged to the host tier) and
 * gives them back; the range stays reserved; grow is refused meanwhile; restore brings the same
 * bytes back to the same addresses; a host tier without room refuses the offload, nothing changed;
 * close of an offloaded request gives its host copy back. */
static void a_request_is_preempted_and_restored_in_place(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 4);
    dmm_kv_request *owner = NULL, *r = NULL, *q = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, PER_GRANULE, NULL, &owner));
    dmm_kv_prefix *p = NULL;
    DMM_OK_OR_FAIL(dmm_kv_share(f.kv, owner, PER_GRANULE / 2, NULL, &p)); /* a tail only: copied, not mapped */
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, p, 3 * PER_GRANULE, NULL, &r));
    void *base = info(&f, r).base;
    for (uint64_t t = PER_GRANULE / 2; t < 3 * PER_GRANULE; t += 7) memset(token(base, t), (int)(t % 253), TOKEN);
    uint64_t owned = stats(&f).owned_bytes, reserve = stats(&f).reserve_bytes;

    DMM_OK_OR_FAIL(dmm_kv_offload(f.kv, r, NULL));
    dmm_kv_request_info in = info(&f, r);
    assert_int_equal(in.offloaded_bytes, 3 * GRAN);
    assert_int_equal(in.private_bytes, 0);
    assert_ptr_equal(in.base, base);
    dmm_kv_stats st = stats(&f);
    assert_int_equal(st.offloaded, 1);
    assert_int_equal(st.host_bytes, 3 * GRAN);
    assert_int_equal(st.owned_bytes - st.reserve_bytes, owned - reserve - 3 * GRAN); /* off the device */
    dmm_tier_usage tu = {.size = sizeof tu};
    dmm_device_id host = {DMM_TIER_HOST, 0};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(f.gov, host, &tu));
    assert_true(tu.used[DMM_AXIS_OWNED] >= 3 * GRAN); /* the governor counts the host copy */
    assert_int_equal(dmm_kv_grow(f.kv, r, 3 * PER_GRANULE + 1), DMM_ERR_BUSY);
    dmm_test_error_mentions("offloaded", "restore it first", NULL);
    assert_int_equal(dmm_kv_offload(f.kv, r, NULL), DMM_ERR_BUSY);
    assert_int_equal(dmm_kv_offload(f.kv, owner, NULL), DMM_OK); /* its tail was copied: it lends nothing */

    DMM_OK_OR_FAIL(dmm_kv_restore(f.kv, r, NULL));
    in = info(&f, r);
    assert_ptr_equal(in.base, base);
    assert_int_equal(in.offloaded_bytes, 0);
    assert_int_equal(in.backed_tokens, 3 * PER_GRANULE);
    for (uint64_t t = PER_GRANULE / 2; t < 3 * PER_GRANULE; t += 7) assert_int_equal(*token(base, t), (int)(t % 253));
    assert_int_equal(stats(&f).host_bytes, GRAN); /* the owner's, still away */
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, 3 * PER_GRANULE + 1));

    /* no room on the host tier: refused, the request keeps its memory */
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(f.gov, host, &tu));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(f.gov, host, DMM_AXIS_OWNED, tu.used[DMM_AXIS_OWNED] + GRAN));
    assert_int_equal(dmm_kv_offload(f.kv, r, NULL), DMM_ERR_BUDGET);
    dmm_test_error_mentions("host tier", "stays on the device", NULL);
    assert_int_equal(info(&f, r).offloaded_bytes, 0);
    const uint64_t w = PER_GRANULE / 2 + 7 * 300; /* a token written above */
    assert_int_equal(*token(base, w), (int)(w % 253));
    DMM_OK_OR_FAIL(dmm_governor_set_limit(f.gov, host, DMM_AXIS_OWNED, DMM_UNLIMITED));

    /* an offloaded request closes: its host copy goes too */
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, PER_GRANULE, NULL, &q));
    DMM_OK_OR_FAIL(dmm_kv_offload(f.kv, q, NULL));
    close_ok(&f, q);
    close_ok(&f, owner);
    assert_int_equal(stats(&f).host_bytes, 0);
    assert_int_equal(stats(&f).offloaded, 0);
    close_ok(&f, r);
    dmm_release_outcome o = dmm_kv_prefix_release(f.kv, p);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
    fx_close(&f);
}

/* The refill thread: it fills the reserve at once, and again whenever growth took half of it; the
 * caller never calls dmm_kv_refill. (Waits for a state, never for a time: up to 10 s of 1 ms polls.) */
static void the_refill_thread_keeps_the_reserve_full(void **state) {
    (void)state;
    dmm_driver *host = NULL, *fault = NULL;
    dmm_governor *gov = NULL;
    dmm_device *dev = NULL;
    dmm_kv *kv = NULL;
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(host, &fault));
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &gov));
    dmm_device_config dc = {.size = sizeof dc, .pool_va_bytes = 256 * MIB};
    DMM_OK_OR_FAIL(dmm_device_create(fault, gov, &dc, &dev));
    dmm_kv_config kc = {.size = sizeof kc, .token_bytes = TOKEN, .max_tokens = 4 * PER_GRANULE, .max_requests = 2,
                        .reserve_bytes = 4 * GRAN, .refill_thread = true};
    DMM_OK_OR_FAIL(dmm_kv_create(dev, &kc, &kv));
    dmm_kv_stats st = {.size = sizeof st};
    for (int i = 0; i < 10000; i++) {
        DMM_OK_OR_FAIL(dmm_kv_stats_get(kv, &st));
        if (st.reserve_bytes == 4 * GRAN) break;
        dmm_test_sleep_ms(1);
    }
    assert_int_equal(st.reserve_bytes, 4 * GRAN); /* the first refill, made by the thread */
    dmm_kv_request *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(kv, NULL, 3 * PER_GRANULE, NULL, &r)); /* takes three of the four */
    for (int i = 0; i < 10000; i++) {
        DMM_OK_OR_FAIL(dmm_kv_stats_get(kv, &st));
        if (st.reserve_bytes == 4 * GRAN && st.refills >= 2) break;
        dmm_test_sleep_ms(1);
    }
    assert_int_equal(st.reserve_bytes, 4 * GRAN);
    assert_true(st.refills >= 2);
    dmm_release_outcome o = dmm_kv_close(kv, r);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
    DMM_OK_OR_FAIL(dmm_kv_destroy(kv)); /* stops and joins the thread */
    DMM_OK_OR_FAIL(dmm_device_destroy(dev));
    DMM_OK_OR_FAIL(dmm_governor_destroy(gov));
    dmm_test_census_zero(host);
    dmm_driver_destroy(fault);
    dmm_driver_destroy(host);
}

/* Bad input: a sentence, nothing changed. */
static void bad_input_is_refused(void **state) {
    (void)state;
    fx f;
    fx_open(&f, 2);
    dmm_kv *kv = NULL;
    dmm_kv_config bad = {.size = sizeof bad, .token_bytes = 0, .max_tokens = 10};
    assert_int_equal(dmm_kv_create(f.dev, &bad, &kv), DMM_ERR_INVALID_ARGUMENT);
    dmm_test_error_mentions("token_bytes", "nothing was created", NULL);
    bad.token_bytes = (uint64_t)1 << 40;
    bad.max_tokens = (uint64_t)1 << 10;
    assert_int_equal(dmm_kv_create(f.dev, &bad, &kv), DMM_ERR_INVALID_ARGUMENT);
    dmm_kv_config old = {.size = 8};
    assert_int_equal(dmm_kv_create(f.dev, &old, &kv), DMM_ERR_SHORT_STRUCT);
    assert_null(kv);
    dmm_kv_request *r = NULL;
    assert_int_equal(dmm_kv_open(NULL, NULL, 1, NULL, &r), DMM_ERR_INVALID_ARGUMENT);
    assert_int_equal(dmm_kv_open(f.kv, NULL, 4 * PER_GRANULE + 1, NULL, &r), DMM_ERR_INVALID_ARGUMENT);
    int local = 0;
    assert_int_equal(dmm_kv_grow(f.kv, (dmm_kv_request *)(void *)&local, 1), DMM_ERR_UNKNOWN_ALLOCATION);
    dmm_release_outcome o = dmm_kv_close(f.kv, (dmm_kv_request *)(void *)&local);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_FAILED);
    o = dmm_kv_prefix_release(f.kv, (dmm_kv_prefix *)(void *)&local);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_FAILED);
    assert_int_equal(stats(&f).requests, 0);
    fx_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_request_grows_in_place),
        cmocka_unit_test(a_prefix_is_held_once_and_copied_at_its_last_granule),
        cmocka_unit_test(a_prefix_on_a_granule_is_only_mapped),
        cmocka_unit_test(growth_from_the_reserve_creates_no_handle),
        cmocka_unit_test(the_budget_decides_how_many_requests_fit),
        cmocka_unit_test(a_request_is_preempted_and_restored_in_place),
        cmocka_unit_test(the_refill_thread_keeps_the_reserve_full),
        cmocka_unit_test(growth_takes_back_what_the_device_caches),
        cmocka_unit_test(fixed_length_reads_see_zeros),
        cmocka_unit_test(zero_tails_through_failures),
        cmocka_unit_test(a_failed_close_keeps_the_request),
        cmocka_unit_test(a_prefix_released_under_its_open_owner),
        cmocka_unit_test(bad_input_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
