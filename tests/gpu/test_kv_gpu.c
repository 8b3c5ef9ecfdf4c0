/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/test_kv_gpu.c — the KV arena (dmm/kv.h) over the real cuda driver: a Llama-3-8B-shaped
 * token (128 KiB: 16 tokens a 2 MiB granule); a request grown token by token in place with its bytes;
 * a prefix of 40 tokens (two whole granules and a tail) held once, mapped into three requests (the
 * same physical bytes: a write through the owner reads back through a sharer) with its tail copied;
 * growth from a refilled reserve creating no handle; a request preempted to pinned host memory and
 * restored at the same addresses with its bytes; with zero_tail, a request's whole range reads on the
 * device (zeros past its tokens) through growth and preemption. Every test ends with the arena and the device
 * destroyed and the cuda driver's census at zero. Exit 77 (skipped) without a GPU or CUDA driver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

#include "cuda_kit.h"
#include "dmm/dmm.h"

#define KIB ((uint64_t)1 << 10)
#define TOKEN (128 * KIB) /* 2 (K, V) × 32 layers × 8 heads × 128 dims × 2 bytes */

static dmm_driver *g_cuda;

typedef struct fx {
    dmm_governor *gov;
    dmm_device *dev;
    dmm_kv *kv;
    dmm_stream s;
    uint64_t per_granule;
} fx;

static void fx_open_with(fx *f, bool zero_tail) {
    memset(f, 0, sizeof *f);
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &f->gov));
    dmm_device_config dc = {.size = sizeof dc, .pool_va_bytes = (uint64_t)1 << 30};
    DMM_OK_OR_FAIL(dmm_device_create(g_cuda, f->gov, &dc, &f->dev));
    dmm_kv_config kc = {.size = sizeof kc, .token_bytes = TOKEN, .max_tokens = 4608, .max_requests = 8,
                        .reserve_bytes = (uint64_t)8 << 20,
                        .flags = zero_tail ? DMM_KV_ZERO_TAIL : 0};
    DMM_OK_OR_FAIL(dmm_kv_create(f->dev, &kc, &f->kv));
    dmm_kv_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_kv_stats_get(f->kv, &st));
    f->per_granule = st.granule / TOKEN;
    DMM_OK_OR_FAIL(g_cuda->ops->stream_create(g_cuda, &f->s));
}

static void fx_open(fx *f) { fx_open_with(f, false); }

static void fx_close(fx *f) {
    DMM_OK_OR_FAIL(g_cuda->ops->stream_synchronize(g_cuda, f->s));
    DMM_OK_OR_FAIL(dmm_kv_destroy(f->kv));
    DMM_OK_OR_FAIL(dmm_device_destroy(f->dev));
    DMM_OK_OR_FAIL(g_cuda->ops->stream_destroy(g_cuda, f->s));
    DMM_OK_OR_FAIL(dmm_governor_destroy(f->gov));
    kit_census_zero(g_cuda);
}

static void *base_of(fx *f, const dmm_kv_request *r) {
    dmm_kv_request_info i = {.size = sizeof i};
    DMM_OK_OR_FAIL(dmm_kv_request_get(f->kv, r, &i));
    return i.base;
}

static uintptr_t at(void *base, uint64_t t) { return (uintptr_t)base + t * TOKEN; }

static void close_ok(fx *f, dmm_kv_request *r) {
    dmm_release_outcome o = dmm_kv_close(f->kv, r);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
}

static void a_request_grows_token_by_token_in_place(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    dmm_kv_request *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, f.s, &r));
    void *base = base_of(&f, r);
    unsigned char *tok = kit_pattern(3, TOKEN);
    for (uint64_t t = 1; t <= 3 * f.per_granule; t++) { /* a decode: grow, then write the new token */
        DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, t));
        assert_ptr_equal(base_of(&f, r), base);
        tok[0] = (unsigned char)t;
        kit_put(g_cuda, at(base, t - 1), tok, TOKEN);
    }
    for (uint64_t t = 1; t <= 3 * f.per_granule; t += 5) {
        tok[0] = (unsigned char)t;
        kit_expect(g_cuda, at(base, t - 1), tok, TOKEN, "a token written during growth");
    }
    dmm_kv_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_kv_stats_get(f.kv, &st));
    assert_int_equal(st.grows, 3); /* one commit a granule */
    free(tok);
    close_ok(&f, r);
    fx_close(&f);
}

static void a_prefix_is_held_once_on_the_device(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    const uint64_t P = 2 * f.per_granule + f.per_granule / 2;
    dmm_kv_request *owner = NULL, *s[3];
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, P, f.s, &owner));
    void *ob = base_of(&f, owner);
    unsigned char *prompt = kit_pattern(5, P * TOKEN);
    kit_put(g_cuda, at(ob, 0), prompt, P * TOKEN);
    dmm_kv_prefix *p = NULL;
    DMM_OK_OR_FAIL(dmm_kv_share(f.kv, owner, P, f.s, &p));
    dmm_kv_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_kv_stats_get(f.kv, &st));
    uint64_t owned0 = st.owned_bytes - st.reserve_bytes;
    for (int i = 0; i < 3; i++) {
        DMM_OK_OR_FAIL(dmm_kv_open(f.kv, p, P + 1, f.s, &s[i]));
        DMM_OK_OR_FAIL(g_cuda->ops->stream_synchronize(g_cuda, f.s)); /* the tail's copy */
        kit_expect(g_cuda, at(base_of(&f, s[i]), 0), prompt, P * TOKEN, "the prefix read through a sharer");
    }
    DMM_OK_OR_FAIL(dmm_kv_stats_get(f.kv, &st));
    assert_int_equal(st.owned_bytes - st.reserve_bytes - owned0, 3 * st.granule); /* one private granule each */
    unsigned char mark[16];
    memset(mark, 0x5A, sizeof mark);
    kit_put(g_cuda, at(ob, 3), mark, sizeof mark); /* through the owner, in a shared granule */
    kit_expect(g_cuda, at(base_of(&f, s[1]), 3), mark, sizeof mark, "the owner's write read through a sharer");
    close_ok(&f, owner);
    for (int i = 0; i < 3; i++) close_ok(&f, s[i]);
    dmm_release_outcome o = dmm_kv_prefix_release(f.kv, p);
    assert_int_equal(dmm_release_state_of(&o), DMM_RELEASE_COMPLETE);
    free(prompt);
    fx_close(&f);
}

static void growth_from_the_reserve_and_preemption(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    DMM_OK_OR_FAIL(dmm_kv_refill(f.kv, NULL));
    dmm_kv_stats st = {.size = sizeof st};
    DMM_OK_OR_FAIL(dmm_kv_stats_get(f.kv, &st));
    uint64_t creates = st.driver_creates;
    dmm_kv_request *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, 1, f.s, &r));
    for (uint64_t t = 2; t <= 4 * f.per_granule; t++) DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, t));
    DMM_OK_OR_FAIL(dmm_kv_stats_get(f.kv, &st));
    assert_int_equal(st.driver_creates, creates); /* four granules, all from the reserve */
    void *base = base_of(&f, r);
    unsigned char *kv = kit_pattern(9, 4 * f.per_granule * TOKEN);
    kit_put(g_cuda, at(base, 0), kv, 4 * f.per_granule * TOKEN);
    DMM_OK_OR_FAIL(dmm_kv_offload(f.kv, r, f.s));
    DMM_OK_OR_FAIL(dmm_kv_restore(f.kv, r, f.s));
    assert_ptr_equal(base_of(&f, r), base);
    kit_expect(g_cuda, at(base, 0), kv, 4 * f.per_granule * TOKEN, "the request after its preemption");
    free(kv);
    close_ok(&f, r);
    fx_close(&f);
}

/* zero_tail: the device reads a request's whole range (4,608 tokens: 288 granules) as zeros past its
 * tokens, through growth and preemption; its own granules keep their bytes. */
static void the_whole_range_reads_on_the_device(void **state) {
    (void)state;
    fx f;
    fx_open_with(&f, true);
    dmm_kv_request *r = NULL;
    DMM_OK_OR_FAIL(dmm_kv_open(f.kv, NULL, f.per_granule + 1, f.s, &r));
    void *base = base_of(&f, r);
    const size_t range = 4608 * TOKEN, own = 2 * f.per_granule * TOKEN;
    unsigned char *zeros = calloc(1, range), *kv = kit_pattern(5, own);
    assert_non_null(zeros);
    kit_expect(g_cuda, at(base, 0) + own, zeros, range - own, "the tail past two granules");
    kit_put(g_cuda, at(base, 0), kv, own);
    DMM_OK_OR_FAIL(dmm_kv_grow(f.kv, r, 3 * f.per_granule));
    kit_expect(g_cuda, at(base, 0), kv, own, "the request's own granules after a growth");
    kit_expect(g_cuda, at(base, 0) + own + f.per_granule * TOKEN, zeros, range - own - f.per_granule * TOKEN,
               "the tail after a growth");
    DMM_OK_OR_FAIL(dmm_kv_offload(f.kv, r, f.s));
    kit_expect(g_cuda, at(base, 0), zeros, range, "the range while offloaded");
    DMM_OK_OR_FAIL(dmm_kv_restore(f.kv, r, f.s));
    kit_expect(g_cuda, at(base, 0), kv, own, "the request after its preemption");
    dmm_kv_request_info i = {.size = sizeof i};
    DMM_OK_OR_FAIL(dmm_kv_request_get(f.kv, r, &i));
    assert_int_equal(i.unreadable_bytes, 0);
    free(kv);
    free(zeros);
    close_ok(&f, r);
    fx_close(&f);
}

int main(void) {
    g_cuda = kit_cuda_open_or_skip("test_kv_gpu");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_request_grows_token_by_token_in_place),
        cmocka_unit_test(a_prefix_is_held_once_on_the_device),
        cmocka_unit_test(growth_from_the_reserve_and_preemption),
        cmocka_unit_test(the_whole_range_reads_on_the_device),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dmm_driver_destroy(g_cuda);
    return rc;
}
