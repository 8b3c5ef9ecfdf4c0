/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda_types.h — what the files of the `cuda` driver share (never installed):
 *   cuda_decl.h    dmm's own declarations of the CUDA driver API (types, constants, signatures);
 *                  cuda_decl_check.c compares them with cuda.h where one is found at configure time
 *   cuda_api.c     libcuda.so.1 opened with dlopen: the table of entry points, CUresult naming,
 *                  which CUresults are sticky (the context is lost), and the error mapping every op
 *                  uses (lost → refuse without a CUDA call)
 *   cuda.c         the driver object: creation, the ops tables, census, mem_info, destroy
 *   cuda_memory.c  the ops that hand out memory and keep records of it: VMM and eager alloc/free
 *   cuda_stream.c  streams, events, copies
 *   cuda_device.c  device count and queries, peer access
 * The driver's invariants (records under `lock`) are stated in cuda.c.
 */
#ifndef DMM_DRIVER_CUDA_TYPES_H
#define DMM_DRIVER_CUDA_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>

#include "core/core.h"
#include "core/u64map.h"
#include "dmm/driver.h"
#include "driver/cuda_decl.h"

/* ---- libcuda (cuda_api.c) ---- */

/* One field per entry point of DMM_CU_DRIVER_ENTRY_POINTS, named as documented: dmm__cu.cuMemAlloc. */
#define DMM_CU_API_FIELD(name, symbol, params) dmm_##name##_fn *name;
typedef struct dmm_cu_api {
    DMM_CU_DRIVER_ENTRY_POINTS(DMM_CU_API_FIELD)
} dmm_cu_api;

/* The entry points; valid once dmm__cu_ready() or dmm__cu_require() said yes. */
extern dmm_cu_api dmm__cu;

/* Optional entry points, NULL where the library lacks them: cuStreamGetCaptureInfo's two ABIs (the id
 * of a capture; cuda_decl.h). */
extern dmm_cuStreamGetCaptureInfo_v3_fn *dmm__cu_capture_info_v3;
extern dmm_cuStreamGetCaptureInfo_v2_fn *dmm__cu_capture_info_v2;

/* Loads libcuda once per process (DMM_CUDA_LIBRARY overrides the path); whether it is usable. */
bool dmm__cu_ready(void);
/* DMM_OK when the library is usable; else UNSUPPORTED with "<op>(ordinal=N): no CUDA driver: <reason>". */
dmm_status dmm__cu_require(const char *op, int ordinal);
/* cuDriverGetVersion, once loaded (0 when unknown). */
int dmm__cu_driver_version(void);
/* CUDA's name ("CUDA_ERROR_OUT_OF_MEMORY") and text of a result; placeholders before the load. */
const char *dmm__cu_name(dmm_cu_result r);
const char *dmm__cu_text(dmm_cu_result r);
/* Whether a result leaves the context unusable (the device is lost). */
bool dmm__cu_sticky(dmm_cu_result r);

/* ---- the driver object (cuda.c) ---- */

#define CUDA_MAX_PEERS 64

typedef struct cuda_driver {
    dmm_driver base;                 /* first: ops and device */
    dmm_cu_device dev;               /* the device's handle (cuDeviceGet of the ordinal) */
    dmm_cu_context ctx;              /* the retained primary context */
    bool vmm;                        /* VMM ops present */
    size_t granule;                  /* minimum VMM granularity (0 without VMM) */
    dmm_cu_mem_allocation_prop prop; /* pinned device memory on `dev` */
    _Atomic int lost;                /* 0, or the sticky CUresult that lost the device */
    dmm_lock lock;                   /* guards everything below; never held across a CUDA call */
    dmm_u64map reservations;             /* va → bytes */
    dmm_u64map handles;                  /* handle → bytes */
    dmm_u64map mappings;                 /* va → handle */
    dmm_u64map map_count;                /* handle → times mapped (absent = 0) */
    dmm_u64map eager;                    /* ptr → bytes */
    dmm_u64map imported;                 /* handle → bytes, of the handles made by import (cuda_share.c) */
    dmm_driver_census census;        /* tallies of successful calls (size unused) */
    int peers[CUDA_MAX_PEERS];       /* ordinals also granted access by set_access */
    size_t n_peers;
} cuda_driver;

extern const dmm_driver_ops dmm__cuda_ops_vmm;
extern const dmm_driver_ops dmm__cuda_ops_eager; /* a device without VMM: the VMM slots are NULL */

static inline cuda_driver *as_cuda(dmm_driver *d) { return (cuda_driver *)d; }
static inline bool dmm__cuda_is_lost(cuda_driver *c) {
    return atomic_load_explicit(&c->lost, memory_order_acquire) != 0;
}

/* The refusal once the device is lost: no CUDA call is made. */
dmm_status dmm__cuda_lost_error(cuda_driver *c, const char *call);
/* Maps a failed CUresult to a dmm code (a sticky one marks the device lost) and sets the sentence:
 * op, values, CUDA's code and name. */
dmm_status dmm__cuda_fail(cuda_driver *c, dmm_cu_result r, const char *call, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Refuses when lost; else makes the primary context current on this thread. */
dmm_status dmm__cuda_enter(cuda_driver *c, const char *call);
/* OUT_OF_MEMORY: no host memory for one of the driver's own records (nothing was done). */
dmm_status dmm__cuda_no_memory(cuda_driver *c, const char *call);

/* ---- memory ops (cuda_memory.c) ---- */
dmm_status dmm__cuda_granularity(dmm_driver *d, size_t *bytes);
dmm_status dmm__cuda_reserve(dmm_driver *d, size_t bytes, size_t align, uintptr_t *va);
dmm_status dmm__cuda_unreserve(dmm_driver *d, uintptr_t va, size_t bytes);
dmm_status dmm__cuda_create(dmm_driver *d, size_t bytes, dmm_phys *handle);
/* cuMemCreate of `bytes` with `prop`, recorded and counted like every handle; `op` and `what` name the
 * call and the memory in the sentences (create uses the driver's prop, create_exportable adds the
 * POSIX file descriptor handle type). */
dmm_status dmm__cuda_create_with(cuda_driver *c, const char *op, size_t bytes, const dmm_cu_mem_allocation_prop *prop,
                                 const char *what, dmm_phys *handle);
dmm_status dmm__cuda_release(dmm_driver *d, dmm_phys handle);
/* pinned host memory (cuda_memory.c) */
dmm_status dmm__cuda_host_alloc(dmm_driver *d, size_t bytes, void **out);
dmm_status dmm__cuda_host_free(dmm_driver *d, void *ptr);
/* ---- sharing ops (cuda_share.c) ---- */
dmm_status dmm__cuda_create_exportable(dmm_driver *d, size_t bytes, dmm_phys *handle);
dmm_status dmm__cuda_export(dmm_driver *d, dmm_phys handle, dmm_access access, int *fd);
dmm_status dmm__cuda_import(dmm_driver *d, int fd, size_t bytes, dmm_access access, dmm_phys *handle);
dmm_status dmm__cuda_map(dmm_driver *d, uintptr_t va, size_t bytes, dmm_phys handle);
dmm_status dmm__cuda_unmap(dmm_driver *d, uintptr_t va, size_t bytes);
dmm_status dmm__cuda_set_access(dmm_driver *d, uintptr_t va, size_t bytes, dmm_access access);
dmm_status dmm__cuda_alloc(dmm_driver *d, size_t bytes, uintptr_t *ptr);
dmm_status dmm__cuda_free(dmm_driver *d, uintptr_t ptr, size_t bytes);

/* ---- stream ops (cuda_stream.c) ---- */
dmm_status dmm__cuda_stream_create(dmm_driver *d, dmm_stream *stream);
dmm_status dmm__cuda_stream_destroy(dmm_driver *d, dmm_stream stream);
dmm_status dmm__cuda_event_create(dmm_driver *d, dmm_event *event);
dmm_status dmm__cuda_event_destroy(dmm_driver *d, dmm_event event);
dmm_status dmm__cuda_event_record(dmm_driver *d, dmm_event event, dmm_stream stream);
dmm_status dmm__cuda_event_query(dmm_driver *d, dmm_event event);
dmm_status dmm__cuda_event_synchronize(dmm_driver *d, dmm_event event);
dmm_status dmm__cuda_copy(dmm_driver *d, uintptr_t dst, uintptr_t src, size_t bytes, dmm_stream stream);
dmm_status dmm__cuda_stream_synchronize(dmm_driver *d, dmm_stream stream);
/* Whether a stream captures a graph (no context switch: asked on every malloc of a device front on a
 * non-default stream), and a stream waiting for an event. */
dmm_status dmm__cuda_stream_capture_status(dmm_driver *d, dmm_stream stream, bool *capturing, uint64_t *id);
dmm_status dmm__cuda_stream_wait_event(dmm_driver *d, dmm_stream waiter, dmm_event event);
dmm_status dmm__cuda_device_synchronize(dmm_driver *d);

/* ---- devices (cuda_device.c) ---- */
/* Looks the device up: UNSUPPORTED without a driver or devices, INVALID_ARGUMENT for a bad ordinal. */
dmm_status dmm__cuda_find_device(const char *op, int ordinal, dmm_cu_device *dev);
/* The allocation properties of pinned device memory on dev. */
void dmm__cuda_device_prop(dmm_cu_device dev, dmm_cu_mem_allocation_prop *prop);
/* VMM support and minimum granularity of a device (granule 0 without VMM). */
dmm_cu_result dmm__cuda_device_vmm(dmm_cu_device dev, bool *vmm, size_t *granule);

#endif /* DMM_DRIVER_CUDA_TYPES_H */
