/* SPDX-License-Identifier: Apache-2.0 */
/* docs/kv.md's example, run: a system prompt's KV held once and mapped into four requests that start
 * with it, each growing token by token at a fixed address. On the host driver here; on a GPU the same
 * calls over dmm_cuda_driver_create(0, &drv). */
#include <dmm/dmm.h>
#include <stdio.h>
#include <string.h>

#define TOKEN 2048 /* a small decoder's K and V of one token over every layer */

int main(void) {
    dmm_driver *drv = NULL;
    dmm_governor *gov = NULL;
    dmm_device *dev = NULL;
    dmm_kv *kv = NULL;
    dmm_kv_request *sys = NULL, *r[4] = {NULL};
    dmm_kv_prefix *p = NULL;
    dmm_device_config dc = {.size = sizeof dc, .pool_va_bytes = 1u << 30};
    dmm_kv_config kc = {.size = sizeof kc, .token_bytes = TOKEN, .max_tokens = 8192, .max_requests = 8};
    if (dmm_host_driver_create(NULL, &drv) || dmm_governor_create(NULL, &gov) ||
        dmm_device_create(drv, gov, &dc, &dev) || dmm_kv_create(dev, &kc, &kv))
        goto fail;
    const uint64_t prompt = 1500; /* tokens of the system prompt */
    if (dmm_kv_open(kv, NULL, prompt, NULL, &sys)) goto fail;
    dmm_kv_request_info in = {.size = sizeof in};
    if (dmm_kv_request_get(kv, sys, &in)) goto fail;
    memset(in.base, 0x5a, prompt * TOKEN); /* the prefill: the prompt's K and V */
    if (dmm_kv_share(kv, sys, prompt, NULL, &p)) goto fail;
    for (int i = 0; i < 4; i++) {
        if (dmm_kv_open(kv, p, prompt + 1, NULL, &r[i])) goto fail;
        for (uint64_t t = prompt + 1; t <= prompt + 600; t++) /* decode: usually nothing to back */
            if (dmm_kv_grow(kv, r[i], t)) goto fail;
    }
    dmm_kv_stats st = {.size = sizeof st};
    if (dmm_kv_stats_get(kv, &st)) goto fail;
    printf("4 requests of %llu prompt + 600 tokens: the prompt held once (%llu KiB), mapped into each "
           "(%llu KiB in all); their own tokens %llu KiB; %llu commits\n",
           (unsigned long long)prompt, (unsigned long long)(st.shared_bytes >> 10),
           (unsigned long long)(st.mapped_shared_bytes >> 10), (unsigned long long)(st.private_bytes >> 10),
           (unsigned long long)st.grows);
    for (int i = 0; i < 4; i++) (void)dmm_kv_close(kv, r[i]);
    (void)dmm_kv_close(kv, sys);
    dmm_release_outcome o = dmm_kv_prefix_release(kv, p);
    if (dmm_release_state_of(&o) != DMM_RELEASE_COMPLETE || dmm_kv_destroy(kv) || dmm_device_destroy(dev) ||
        dmm_governor_destroy(gov))
        goto fail;
    dmm_driver_destroy(drv);
    return 0;
fail:
    fprintf(stderr, "dmm: %s\n", dmm_last_error());
    return 1;
}
