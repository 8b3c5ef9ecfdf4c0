/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fault/test_kv_faults.c — a fault sweep of the KV arena (dmm/kv.h) over the fault driver over
 * the host driver: for n = 1, 2, ... fail the n-th driver call (once, or every call from the n-th on)
 * of a fixed program that opens, grows, shares, opens with the prefix, offloads, restores, closes and
 * releases, until the program runs without a fault.
 *
 * What is proven after every step of every pass: a call either succeeds, and then every request that
 * maps the prefix reads its bytes, or fails with a sentence; the governor's owned bytes on the tier
 * equal the driver's census of handle bytes plus the host copies the arena holds (nothing charged
 * that is not held, nothing held that is not charged), and its mapped bytes the driver's mappings; the
 * arena's counts never wrap. After the pass,
 * with the faults cleared, every request closes, every prefix is released and the arena is destroyed
 * (what failed releases left is given back then), and the census is zero. Swept twice more with
 * zero_tail: then every resident request's range also reads zeros past what it backs, unless it says
 * how many bytes do not (a hole a failed call left).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#include "dmm/dmm.h"

#define MIB ((uint64_t)1 << 20)
#define GRAN (2 * MIB)
#define TOKEN ((uint64_t)2048)
#define PER_GRANULE (GRAN / TOKEN)
#define P (PER_GRANULE + PER_GRANULE / 2) /* the prefix: a whole granule and a tail */
#define NREQ 4

typedef struct pass {
    dmm_driver *host, *fault;
    dmm_governor *gov;
    dmm_device *dev;
    dmm_kv *kv;
    dmm_kv_request *r[NREQ];
    bool mapped_prefix[NREQ];
    dmm_kv_prefix *p;
    bool zero_tail;
    int failures;
} pass;

static unsigned char pat(uint64_t t) { return (unsigned char)(t * 7 + 3); }

static dmm_kv_request_info info(pass *x, const dmm_kv_request *r) {
    dmm_kv_request_info i = {.size = sizeof i};
    DMM_OK_OR_FAIL(dmm_kv_request_get(x->kv, r, &i));
    return i;
}

/* The invariants of the opening, checked after every step. */
static void check(pass *x) {
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(x->fault->ops->census(x->fault, &c));
    dmm_tier_usage tu = {.size = sizeof tu};
    DMM_OK_OR_FAIL(dmm_governor_tier_usage(x->gov, x->host->device, &tu));
    dmm_kv_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_kv_stats_get(x->kv, &st));
    if (tu.used[DMM_AXIS_OWNED] != c.handle_bytes + st.host_bytes)
        fail_msg("the governor charges %llu owned bytes; the driver holds %llu in handles and the arena %llu in "
                 "host copies", (unsigned long long)tu.used[DMM_AXIS_OWNED], (unsigned long long)c.handle_bytes,
                 (unsigned long long)st.host_bytes);
    if (tu.used[DMM_AXIS_MAPPED] != c.mapped_bytes)
        fail_msg("the governor charges %llu mapped bytes; the driver maps %llu",
                 (unsigned long long)tu.used[DMM_AXIS_MAPPED], (unsigned long long)c.mapped_bytes);
    if (st.private_bytes > ((uint64_t)1 << 40) || st.shared_bytes > ((uint64_t)1 << 40))
        fail_msg("a count wrapped: private %llu, shared %llu", (unsigned long long)st.private_bytes,
                 (unsigned long long)st.shared_bytes);
    for (int i = 0; i < NREQ; i++) {
        if (x->r[i] == NULL || !x->mapped_prefix[i] || info(x, x->r[i]).offloaded_bytes > 0) continue;
        const unsigned char *b = info(x, x->r[i]).base;
        for (uint64_t t = 0; t < P; t += 97)
            if (b[t * TOKEN] != pat(t)) fail_msg("request %d reads 0x%02x at token %llu", i, b[t * TOKEN],
                                                 (unsigned long long)t);
    }
    for (int i = 0; i < NREQ && x->zero_tail; i++) {
        if (x->r[i] == NULL) continue;
        dmm_kv_request_info in = info(x, x->r[i]);
        if (in.unreadable_bytes > 0) continue; /* said: a hole, which a read would fault on */
        const unsigned char *b = in.base;
        for (uint64_t at = in.backed_tokens * TOKEN; at < 4 * PER_GRANULE * TOKEN; at += GRAN / 2)
            if (b[at] != 0) fail_msg("request %d reads 0x%02x at byte %llu, past its tokens", i, b[at],
                                     (unsigned long long)at);
    }
}

static void step(pass *x, dmm_status s) {
    if (s != DMM_OK) {
        x->failures++;
        if (dmm_last_error()[0] == '\0') fail_msg("a failure without a sentence (%s)", dmm_status_str(s));
    }
    check(x);
}

static void step_outcome(pass *x, dmm_release_outcome o) {
    step(x, dmm_release_state_of(&o) == DMM_RELEASE_COMPLETE ? DMM_OK : o.failure ? o.failure : DMM_ERR_DRIVER);
}

/* The program; each call may fail, the next ones go on with what exists. */
static void program(pass *x) {
    dmm_status s = dmm_kv_open(x->kv, NULL, 2 * PER_GRANULE, NULL, &x->r[0]);
    step(x, s);
    if (x->r[0] == NULL) return;
    unsigned char *b = info(x, x->r[0]).base;
    for (uint64_t t = 0; t < 2 * PER_GRANULE; t++) b[t * TOKEN] = pat(t);
    x->mapped_prefix[0] = true;
    step(x, dmm_kv_grow(x->kv, x->r[0], 3 * PER_GRANULE));
    step(x, dmm_kv_share(x->kv, x->r[0], P, NULL, &x->p));
    for (int i = 1; i < 3 && x->p != NULL; i++) {
        s = dmm_kv_open(x->kv, x->p, P + 1, NULL, &x->r[i]);
        x->mapped_prefix[i] = s == DMM_OK;
        step(x, s);
    }
    step(x, dmm_kv_refill(x->kv, NULL));
    s = dmm_kv_open(x->kv, NULL, PER_GRANULE, NULL, &x->r[3]);
    step(x, s);
    if (x->r[3] != NULL) {
        step(x, dmm_kv_grow(x->kv, x->r[3], 3 * PER_GRANULE));
        step(x, dmm_kv_offload(x->kv, x->r[3], NULL));
        if (info(x, x->r[3]).offloaded_bytes > 0) step(x, dmm_kv_restore(x->kv, x->r[3], NULL));
    }
    if (x->r[1] != NULL) {
        step(x, dmm_kv_offload(x->kv, x->r[1], NULL));
        if (info(x, x->r[1]).offloaded_bytes > 0) step(x, dmm_kv_restore(x->kv, x->r[1], NULL));
    }
    /* the owner closes first, then a sharer; the prefix goes while one still maps it (refused) */
    dmm_release_outcome o = dmm_kv_close(x->kv, x->r[0]);
    if (dmm_release_state_of(&o) != DMM_RELEASE_FAILED) x->r[0] = NULL;
    step_outcome(x, o);
    if (x->r[1] != NULL) {
        o = dmm_kv_close(x->kv, x->r[1]);
        if (dmm_release_state_of(&o) != DMM_RELEASE_FAILED) x->r[1] = NULL;
        step_outcome(x, o);
    }
    if (x->p != NULL && x->r[2] == NULL && x->r[1] == NULL) {
        o = dmm_kv_prefix_release(x->kv, x->p);
        if (dmm_release_state_of(&o) != DMM_RELEASE_FAILED) x->p = NULL;
        step_outcome(x, o);
    }
}

/* With the faults cleared: everything goes, and the driver holds nothing. */
static void teardown(pass *x) {
    DMM_OK_OR_FAIL(dmm_fault_clear(x->fault));
    for (int i = 0; i < NREQ; i++) {
        if (x->r[i] == NULL) continue;
        dmm_release_outcome o = dmm_kv_close(x->kv, x->r[i]);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) fail_msg("teardown close FAILED: %s", dmm_last_error());
        x->r[i] = NULL;
        check(x);
    }
    if (x->p != NULL) {
        dmm_release_outcome o = dmm_kv_prefix_release(x->kv, x->p);
        if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) fail_msg("teardown prefix FAILED: %s", dmm_last_error());
    }
    DMM_OK_OR_FAIL(dmm_kv_destroy(x->kv));
    DMM_OK_OR_FAIL(dmm_device_destroy(x->dev));
    DMM_OK_OR_FAIL(dmm_governor_destroy(x->gov));
    dmm_driver_census c = {.size = sizeof c};
    DMM_OK_OR_FAIL(x->host->ops->census(x->host, &c));
    if (c.handles != 0 || c.mapped_bytes != 0)
        fail_msg("after the teardown the driver still holds %llu handles, %llu bytes mapped",
                 (unsigned long long)c.handles, (unsigned long long)c.mapped_bytes);
    dmm_driver_destroy(x->fault);
    dmm_driver_destroy(x->host);
}

static void sweep(bool sticky, bool zero_tail) {
    bool clean = false;
    int passes = 0, failures = 0;
    for (uint64_t nth = 1; !clean && nth < 2000; nth++) {
        pass x;
        memset(&x, 0, sizeof x);
        x.zero_tail = zero_tail;
        DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &x.host));
        DMM_OK_OR_FAIL(dmm_fault_driver_create(x.host, &x.fault));
        DMM_OK_OR_FAIL(dmm_governor_create(NULL, &x.gov));
        dmm_device_config dc = {.size = sizeof dc, .pool_va_bytes = 256 * MIB};
        DMM_OK_OR_FAIL(dmm_device_create(x.fault, x.gov, &dc, &x.dev));
        dmm_kv_config kc = {.size = sizeof kc, .token_bytes = TOKEN, .max_tokens = 4 * PER_GRANULE,
                            .max_requests = NREQ, .reserve_bytes = 2 * GRAN,
                            .flags = zero_tail ? DMM_KV_ZERO_TAIL : 0};
        DMM_OK_OR_FAIL(dmm_kv_create(x.dev, &kc, &x.kv));
        uint64_t injected0 = dmm_fault_injected(x.fault);
        DMM_OK_OR_FAIL(dmm_fault_plan(x.fault, DMM_OP_ANY, nth, sticky ? UINT32_MAX : 1, DMM_ERR_DRIVER));
        program(&x);
        clean = dmm_fault_injected(x.fault) == injected0;
        failures += x.failures;
        teardown(&x);
        passes++;
    }
    assert_true(clean);
    assert_true(failures > 0);
    printf("kv fault sweep (%s%s): %d passes, %d failed steps\n", sticky ? "sticky" : "once",
           zero_tail ? ", zero_tail" : "", passes, failures);
}

static void every_step_is_honest_under_one_fault(void **state) {
    (void)state;
    sweep(false, false);
}

static void every_step_is_honest_under_a_fault_that_stays(void **state) {
    (void)state;
    sweep(true, false);
}

static void zero_tails_are_honest_under_one_fault(void **state) {
    (void)state;
    sweep(false, true);
}

static void zero_tails_are_honest_under_a_fault_that_stays(void **state) {
    (void)state;
    sweep(true, true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_step_is_honest_under_one_fault),
        cmocka_unit_test(every_step_is_honest_under_a_fault_that_stays),
        cmocka_unit_test(zero_tails_are_honest_under_one_fault),
        cmocka_unit_test(zero_tails_are_honest_under_a_fault_that_stays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
