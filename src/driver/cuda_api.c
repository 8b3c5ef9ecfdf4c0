/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda_api.c — libcuda.so.1, opened with dlopen once per process: the table of entry
 * points, the names and texts of CUresults, which of them are sticky, and the error mapping every op
 * of the driver shares (dmm__cuda_fail and friends; all declared in cuda_types.h).
 *
 * The idea: no dependency on CUDA at build or link time. The types, constants and signatures are
 * dmm's own (cuda_decl.h); every entry point of DMM_CU_DRIVER_ENTRY_POINTS is resolved once per
 * process with dlsym under the versioned name cuda.h itself binds to (cuMemAlloc_v2,
 * cuStreamDestroy_v2, …), and every one is checked. Without the library, a symbol, or a working
 * cuInit, the reason is kept and every caller gets DMM_ERR_UNSUPPORTED "no CUDA driver: <reason>".
 *
 * Invariants: dmm__cu is written once, inside pthread_once, before cu_ready is set; cu_ready ⇒ every
 * entry point is non-NULL and cuInit succeeded; the library is never closed once cuInit ran.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "driver/cuda_types.h"

/* The exported names (cuda_decl.h): the ABI versions that cuda.h binds the documented names to. */
static const struct {
    const char *name;
    size_t offset;
} cu_symbols[] = {
#define CU_SYM(name, symbol, params) {#symbol, offsetof(dmm_cu_api, name)},
    DMM_CU_DRIVER_ENTRY_POINTS(CU_SYM)
#undef CU_SYM
};

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
dmm_cu_api dmm__cu;             /* valid when cu_ready */
dmm_cuStreamGetCaptureInfo_v3_fn *dmm__cu_capture_info_v3; /* optional: drivers of CUDA 12.3 and later */
dmm_cuStreamGetCaptureInfo_v2_fn *dmm__cu_capture_info_v2; /* optional: the fallback of older drivers */
static bool cu_ready;           /* library loaded, every symbol found, cuInit succeeded */
static char cu_reason[512];     /* why not, when !cu_ready */
static int cu_driver_version;   /* cuDriverGetVersion, when cu_ready */

const char *dmm__cu_name(dmm_cu_result r) {
    const char *s = NULL;
    if (dmm__cu.cuGetErrorName == NULL || dmm__cu.cuGetErrorName(r, &s) != DMM_CUDA_SUCCESS || s == NULL)
        return "CUDA_ERROR_?";
    return s;
}

const char *dmm__cu_text(dmm_cu_result r) {
    const char *s = NULL;
    if (dmm__cu.cuGetErrorString == NULL || dmm__cu.cuGetErrorString(r, &s) != DMM_CUDA_SUCCESS || s == NULL)
        return "unknown CUDA error";
    return s;
}

static void cu_load(void) {
    const char *path = dmm__option_env(DMM_OPTION_CUDA_LIBRARY); /* for tests and unusual installs */
    if (path == NULL) path = "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        snprintf(cu_reason, sizeof cu_reason, "dlopen(\"%s\") failed: %s", path, e != NULL ? e : "unknown error");
        return;
    }
    dmm_cu_api api;
    memset(&api, 0, sizeof api);
    for (size_t i = 0; i < sizeof cu_symbols / sizeof cu_symbols[0]; i++) {
        void *sym = dlsym(lib, cu_symbols[i].name);
        if (sym == NULL) {
            snprintf(cu_reason, sizeof cu_reason,
                     "%s lacks the entry point %s (a CUDA driver older than 11.0?); update the NVIDIA driver",
                     path, cu_symbols[i].name);
            dlclose(lib);
            return;
        }
        /* A data pointer to a function pointer: memcpy keeps ISO C quiet; POSIX guarantees the sizes. */
        memcpy((char *)&api + cu_symbols[i].offset, &sym, sizeof sym);
    }
    dmm__cu = api; /* error names are usable from here on, also in the sentences below */
    void *v3 = dlsym(lib, "cuStreamGetCaptureInfo_v3"), *v2 = dlsym(lib, "cuStreamGetCaptureInfo_v2");
    memcpy(&dmm__cu_capture_info_v3, &v3, sizeof v3);
    memcpy(&dmm__cu_capture_info_v2, &v2, sizeof v2);
    dmm_cu_result r = dmm__cu.cuInit(0);
    if (r != DMM_CUDA_SUCCESS) {
        snprintf(cu_reason, sizeof cu_reason, "cuInit(0) failed with %s (%d): %s", dmm__cu_name(r), (int)r,
                 dmm__cu_text(r));
        return; /* the library stays loaded: unloading libcuda after cuInit is not safe */
    }
    r = dmm__cu.cuDriverGetVersion(&cu_driver_version);
    if (r != DMM_CUDA_SUCCESS) cu_driver_version = 0;
    cu_ready = true; /* never dlclose'd: CUDA keeps threads and state for the life of the process */
}

dmm_status dmm__cu_require(const char *op, int ordinal) {
    pthread_once(&cu_once, cu_load);
    if (cu_ready) return DMM_OK;
    return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s(ordinal=%d): no CUDA driver: %s; use the host driver", op,
                         ordinal, cu_reason);
}

bool dmm__cu_ready(void) {
    pthread_once(&cu_once, cu_load);
    return cu_ready;
}

int dmm__cu_driver_version(void) { return dmm__cu_ready() ? cu_driver_version : 0; }

bool dmm__cu_sticky(dmm_cu_result r) {
    switch ((int)r) {
    case DMM_CUDA_ERROR_DEINITIALIZED:
    case DMM_CUDA_ERROR_ECC_UNCORRECTABLE:
    case DMM_CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case DMM_CUDA_ERROR_ILLEGAL_ADDRESS:
    case DMM_CUDA_ERROR_LAUNCH_TIMEOUT:
    case DMM_CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case DMM_CUDA_ERROR_ASSERT:
    case DMM_CUDA_ERROR_HARDWARE_STACK_ERROR:
    case DMM_CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case DMM_CUDA_ERROR_MISALIGNED_ADDRESS:
    case DMM_CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case DMM_CUDA_ERROR_INVALID_PC:
    case DMM_CUDA_ERROR_LAUNCH_FAILED:
    case DMM_CUDA_ERROR_CONTAINED:          /* the process must end */
    case DMM_CUDA_ERROR_TENSOR_MEMORY_LEAK: /* the context is unusable */
    case DMM_CUDA_ERROR_EXTERNAL_DEVICE:    /* the context is unusable */
        return true;
    default:
        return false;
    }
}

/* ---- the error mapping every op shares ------------------------------------------------------- */

/* The refusal once the device is lost: no CUDA call is made. */
dmm_status dmm__cuda_lost_error(cuda_driver *c, const char *call) {
    dmm_cu_result r = (dmm_cu_result)atomic_load_explicit(&c->lost, memory_order_acquire);
    return dmm_error_set(DMM_ERR_DEVICE_LOST,
                         "cuda driver (device %d): %s refused without calling CUDA: the device was lost "
                         "earlier (%s (%d): %s); tear the context down and confirm it terminated",
                         (int)c->base.device.index, call, dmm__cu_name(r), (int)r, dmm__cu_text(r));
}

/* Maps a failed CUresult to a dmm code and sets the sentence: op, values, CUDA's code and name. */
dmm_status dmm__cuda_fail(cuda_driver *c, dmm_cu_result r, const char *call, const char *fmt, ...) {
    char values[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(values, sizeof values, fmt, ap);
    va_end(ap);
    dmm_status s;
    const char *advice;
    if (r == DMM_CUDA_ERROR_OUT_OF_MEMORY) {
        s = DMM_ERR_OUT_OF_MEMORY;
        advice = "free device memory or ask for less";
    } else if (dmm__cu_sticky(r)) {
        int expected = 0;
        atomic_compare_exchange_strong_explicit(&c->lost, &expected, (int)r, memory_order_acq_rel,
                                                memory_order_acquire);
        s = DMM_ERR_DEVICE_LOST;
        advice = "the context is unusable: the device is lost and this driver makes no more CUDA calls";
    } else {
        s = DMM_ERR_DRIVER;
        advice = "check the values against the driver's rules";
    }
    return dmm_error_set(s, "cuda driver (device %d): %s(%s) failed with %s (%d): %s; %s",
                         (int)c->base.device.index, call, values, dmm__cu_name(r), (int)r, dmm__cu_text(r),
                         advice);
}

/* Refuses when lost; else makes the primary context current on this thread. */
dmm_status dmm__cuda_enter(cuda_driver *c, const char *call) {
    if (dmm__cuda_is_lost(c)) return dmm__cuda_lost_error(c, call);
    dmm_cu_result r = dmm__cu.cuCtxSetCurrent(c->ctx);
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuCtxSetCurrent", "primary context of device %d", (int)c->dev);
    return DMM_OK;
}

dmm_status dmm__cuda_no_memory(cuda_driver *c, const char *call) {
    return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                         "cuda driver (device %d): %s: no host memory for the driver's own record; nothing "
                         "was done",
                         (int)c->base.device.index, call);
}
