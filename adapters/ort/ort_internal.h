/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/ort/ort_internal.h — what the files of libdmm_ort share: the runtime (loader.c) with its
 * resolved slots, and the allocator object (allocator.c). Internal; never installed.
 *
 * Invariants: a resolved slot pointer is non-NULL only when its version ≤ api_version and the table
 * held a non-NULL pointer there; the required slots (every slot of version ≤ DMM_ORT_API_OLDEST) are all
 * non-NULL in an open runtime.
 *
 * libdmm_ort uses only dmm's public API (include/dmm/), so that it links against an installed libdmm.
 */
#ifndef DMM_ORT_INTERNAL_H
#define DMM_ORT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>

#include "dmm/device.h"
#include "dmm_ort.h"
#include "dmm_ort_abi.h"

#define DMM_ORT_ERROR_CAP 1024 /* the allocator's copy of its last refusal's sentence */

/* dmm_error_set with `fmt`'s context before the thread's last sentence: "context: sentence". */
dmm_status dmm__ort_wrap(dmm_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

struct dmm_ort_runtime {
    void *dl;                       /* dlopen handle */
    const dmm_ort_api_base *base;   /* OrtGetApiBase() */
    const void *api;                /* the OrtApi table granted */
    uint32_t api_version;           /* the version granted (DMM_ORT_API_OLDEST..DMM_ORT_API_KNOWN) */
    char version[32];               /* GetVersionString(), copied */
    char path[512];                 /* what was opened */
    dmm_ort_calls calls;            /* the resolved slots (dmm_ort_runtime_calls) */
};

/* ONNX Runtime's OrtStatus → dmm: NULL is DMM_OK; otherwise `code` with "<what>: ONNX Runtime said: <its
 * message>" as the last error, and the status released. */
dmm_status dmm__ort_status(const dmm_ort_runtime *rt, struct OrtStatus *st, dmm_status code, const char *what);
/* An OrtStatus carrying dmm's last error (for GetStats / Shrink), or NULL when the runtime cannot make
 * one (then the caller has nothing better to return than NULL = success; it logs). */
struct OrtStatus *dmm__ort_make_status(const dmm_ort_runtime *rt, int code, const char *msg);

/* The two devices' roles (each a dmm_device over the allocator's driver, under its one holder). */
enum { DMM_ORT_POOL_WEIGHTS = 0, DMM_ORT_POOL_RUN = 1, DMM_ORT_POOLS = 2 };

struct dmm_ort_allocator {
    struct OrtAllocator ort;   /* first: ONNX Runtime's pointer to it is ours */
    dmm_ort_runtime *rt;
    dmm_driver *drv;
    dmm_governor *gov;
    dmm_holder *holder;
    dmm_device_id dev;
    struct OrtMemoryInfo *info; /* created through the runtime; released at destroy */
    dmm_device *devices[DMM_ORT_POOLS]; /* Reserve's (weights) and Alloc's (activations) */
    pthread_mutex_t devices_lock; /* held while devices[] is made or taken down; the holder's reclaim, on
                                     another holder's thread, only tries it (never waits on it) */
    uint64_t pool_va;            /* each device's pool VA: the largest request */
    dmm_log_fn log;
    void *log_user;
    char name[64];

    _Atomic int stream_blocks;   /* 1 once a block was allocated on a stream (AllocOnStream): from then on
                                    a Free asks the pool which stream its block was allocated on */

    pthread_mutex_t error_lock;  /* guards last_error, last_status */
    char last_error[DMM_ORT_ERROR_CAP];
    dmm_status last_status;

    /* what the pools cannot count (the rest of dmm_ort_stats is the pools' own) */
    _Atomic uint64_t refusals, bad_frees, zero_requests, shrinks, max_alloc;
};

/* The entry points ONNX Runtime calls: plain C (NULL on refusal, allocator.c) and the throwing forms
 * (refusal_shim.cc: a C++ exception with the sentence; the defaults where a C++ compiler built them). */
void *dmm__ort_c_alloc(struct OrtAllocator *self, size_t bytes);
void *dmm__ort_c_reserve(struct OrtAllocator *self, size_t bytes);
void *dmm__ort_c_alloc_on_stream(struct OrtAllocator *self, size_t bytes, struct OrtSyncStream *stream);
void *dmm__ort_throwing_alloc(struct OrtAllocator *self, size_t bytes);
void *dmm__ort_throwing_reserve(struct OrtAllocator *self, size_t bytes);
void *dmm__ort_throwing_alloc_on_stream(struct OrtAllocator *self, size_t bytes, struct OrtSyncStream *stream);

/* The stream-ordered forms behind gpu_external_*_on (allocator.c): a native stream handle, no OrtSyncStream. */
void *dmm__ort_alloc_native_stream(dmm_ort_allocator *a, size_t bytes, dmm_stream stream);
void dmm__ort_free_native_stream(dmm_ort_allocator *a, void *ptr, dmm_stream stream);

#endif /* DMM_ORT_INTERNAL_H */
