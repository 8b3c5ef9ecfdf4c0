/* SPDX-License-Identifier: Apache-2.0 */
/* tests/gpu/cuda_kit.h — helpers of the GPU tests: open the cuda driver or SKIP (exit 77), move
 * bytes between host buffers and device addresses through the driver's own copy, and patterns.
 * Header-only, static. */
#ifndef DMM_CUDA_KIT_H
#define DMM_CUDA_KIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena_kit.h"

/* Opens device 0, or reports the test skipped (CTest SKIP_RETURN_CODE 77) when there is no CUDA
 * driver or device: skipped, never passed. Any other failure is a failure. */
static inline dmm_driver *kit_cuda_open_or_skip(const char *test) {
    dmm_driver *d = NULL;
    dmm_status s = dmm_cuda_driver_create(0, &d);
    if (s == DMM_ERR_UNSUPPORTED) {
        printf("%s: skipped: %s\n", test, dmm_last_error());
        exit(DMM_TEST_SKIP);
    }
    if (s != DMM_OK) {
        fprintf(stderr, "%s: dmm_cuda_driver_create(0) failed: %s: %s\n", test, dmm_status_str(s), dmm_last_error());
        exit(1);
    }
    return d;
}

/* Byte k of pattern `seed`. */
static inline unsigned char kit_byte(uint64_t seed, size_t k) {
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17) ^ (k >> 12));
}

static inline unsigned char *kit_pattern(uint64_t seed, size_t bytes) {
    unsigned char *p = malloc(bytes);
    assert_non_null(p);
    for (size_t k = 0; k < bytes; k++) p[k] = kit_byte(seed, k);
    return p;
}

/* host → device, finished when it returns (copy on the default stream, then synchronize it). */
static inline void kit_put(dmm_driver *d, uintptr_t dst, const void *src, size_t bytes) {
    DMM_OK_OR_FAIL(d->ops->copy(d, dst, (uintptr_t)src, bytes, NULL));
    DMM_OK_OR_FAIL(d->ops->stream_synchronize(d, NULL));
}

/* device → host, finished when it returns. */
static inline void kit_get(dmm_driver *d, void *dst, uintptr_t src, size_t bytes) {
    DMM_OK_OR_FAIL(d->ops->copy(d, (uintptr_t)dst, src, bytes, NULL));
    DMM_OK_OR_FAIL(d->ops->stream_synchronize(d, NULL));
}

/* Reads `bytes` at device address `src` and asserts they equal `expect` (names the first difference). */
static inline void kit_expect(dmm_driver *d, uintptr_t src, const unsigned char *expect, size_t bytes,
                              const char *what) {
    unsigned char *got = malloc(bytes);
    assert_non_null(got);
    memset(got, 0xEE, bytes);
    kit_get(d, got, src, bytes);
    if (memcmp(got, expect, bytes) != 0) {
        size_t k = 0;
        while (got[k] == expect[k]) k++;
        unsigned g = got[k], e = expect[k];
        free(got);
        fail_msg("%s: byte %zu of %zu differs: read 0x%02x, expected 0x%02x", what, k, bytes, g, e);
    }
    free(got);
}

#define kit_census_zero dmm_test_census_zero /* testkit.h */

#endif
