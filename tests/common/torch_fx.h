/* SPDX-License-Identifier: Apache-2.0 */
/* tests/common/torch_fx.h — the context fixture of the torch adapter's unit tests (test_torch_adapter,
 * test_torch_record, test_torch_snapshot): an adapter context with the host extras of torch_kit.h over
 * the host driver, or over the fault driver over it, with two streams; the malloc and free that must
 * work; and the teardown that ends with the host driver's census at zero. Include after torch_kit.h.
 * Header-only, static. */
#ifndef DMM_TORCH_FX_H
#define DMM_TORCH_FX_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testkit.h"

typedef struct kit_torch_fx {
    dmm_driver *host, *fault; /* the fault driver over host that the device uses (transparent unless
                                 a test plans failures or a capture) */
    dmm_driver *drv;          /* what the device and the streams are over: the fault driver */
    dmm_governor *gov;
    dmm_device *c; /* NULL once a test destroyed it itself */
    dmm_stream s1, s2;
} kit_torch_fx;

/* A device under a budget of `limit` bytes (0: none), over the fault driver over the host driver
 * (over_fault: the test plans failures; either way the fault driver is there for its capture switch). */
static inline void kit_torch_fx_open(kit_torch_fx *f, bool over_fault, uint64_t limit) {
    (void)over_fault;
    memset(f, 0, sizeof *f);
    DMM_OK_OR_FAIL(dmm_host_driver_create(NULL, &f->host));
    DMM_OK_OR_FAIL(dmm_fault_driver_create(f->host, &f->fault));
    f->drv = f->fault;
    DMM_OK_OR_FAIL(dmm_governor_create(NULL, &f->gov));
    dmm_device_config k = kit_torch_config(limit);
    DMM_OK_OR_FAIL(dmm_device_create(f->drv, f->gov, &k, &f->c));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &f->s1));
    DMM_OK_OR_FAIL(f->drv->ops->stream_create(f->drv, &f->s2));
}

/* Destroys the context (unless the test did), the streams, the governor and the drivers, asserting
 * each worked and that the host driver holds nothing. The test's own checks come before. */
static inline void kit_torch_fx_close(kit_torch_fx *f) {
    if (f->c != NULL) DMM_OK_OR_FAIL(dmm_device_destroy(f->c));
    f->c = NULL;
    DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, f->s1));
    DMM_OK_OR_FAIL(f->drv->ops->stream_destroy(f->drv, f->s2));
    DMM_OK_OR_FAIL(dmm_governor_destroy(f->gov));
    dmm_test_census_zero(f->host);
    dmm_driver_destroy(f->fault);
    dmm_driver_destroy(f->host);
}

/* A block that must be handed out: not NULL, 512-aligned like torch's own. */
static inline void *kit_torch_malloc(kit_torch_fx *f, size_t bytes, dmm_stream s) {
    void *p = NULL;
    DMM_OK_OR_FAIL(dmm_device_malloc(f->c, bytes, s, &p));
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 512, 0);
    return p;
}

/* Its free, which must be accepted. */
static inline void kit_torch_free(kit_torch_fx *f, void *p, dmm_stream s) {
    DMM_OK_OR_FAIL(dmm_device_free(f->c, p, s));
}

/* The recorder's stop, which must work, and the stats it gives back. */
static inline dmm_device_record_stats kit_torch_record_stop(kit_torch_fx *f) {
    dmm_device_record_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    DMM_OK_OR_FAIL(dmm_device_record_stop(f->c, &st));
    return st;
}

/* A new empty file /tmp/<stem>-XXXXXX, its name in path (64 bytes). */
static inline void kit_temp_file(char path[64], const char *stem) {
    snprintf(path, 64, "/tmp/%s-XXXXXX", stem);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

#endif
