/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/torch_kit.h — the host side of the device front's tests (unit and fault): the capture
 * switch (the fault driver's dmm_fault_capture), the count of host copies it made and gave back, and
 * the device's configuration. Include after the device's headers (device/device_internal.h).
 * Header-only, static. */
#ifndef DMM_TORCH_KIT_H
#define DMM_TORCH_KIT_H

#include <stdlib.h>
#include <string.h>

/* From now on `stream` of the fault driver `fault` captures graph `id` (NULL, 0: the capture ends). */
static inline void kit_capture(dmm_driver *fault, dmm_stream stream, uint64_t id) {
    DMM_OK_OR_FAIL(dmm_fault_capture(fault, stream, id));
}

/* Host copies (host_alloc) the device asked of the fault driver, and those it gave back (host_free). */
static inline uint64_t kit_host_allocs(dmm_driver *fault) { return dmm_fault_calls(fault, DMM_OP_HOST_ALLOC); }
static inline uint64_t kit_host_frees(dmm_driver *fault) { return dmm_fault_calls(fault, DMM_OP_HOST_FREE); }

/* The pool's committed ranges (dmm_pool_committed, which must work) in a new array of *n pairs. */
static inline uint64_t *kit_pool_runs(dmm_device *c, size_t *n) {
    DMM_OK_OR_FAIL(dmm_pool_committed(dmm_device_pool(c), NULL, 0, n));
    uint64_t *runs = calloc(2 * *n + 2, sizeof *runs);
    assert_non_null(runs);
    DMM_OK_OR_FAIL(dmm_pool_committed(dmm_device_pool(c), runs, *n + 1, n));
    return runs;
}

/* A small device: 1 GiB of pool VA in an 8 GiB reservation, 256 MiB tag segments, `limit` (0: none). */
static inline dmm_device_config kit_torch_config(uint64_t limit) {
    dmm_device_config k;
    memset(&k, 0, sizeof k);
    k.size = sizeof k;
    k.pool_va_bytes = (uint64_t)1 << 30;
    k.reserve_bytes = (uint64_t)8 << 30;
    k.tag_segment_bytes = (uint64_t)256 << 20;
    k.limit_bytes = limit;
    return k;
}

#endif
