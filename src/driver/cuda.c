/* src/driver/cuda.c — the `cuda` driver: libcuda.so.1 opened with dlopen, the primary context of one
 * device, and the driver ops of dmm/driver.h over the CUDA driver API.
 *
 * The idea: no link-time dependency on CUDA. cuda.h is used for types and constants only; every entry
 * point is resolved once per process with dlsym under the versioned name cuda.h itself would bind to
 * (cuMemAlloc_v2, cuStreamDestroy_v2, …), and every one is checked. A binary built with CUDA headers
 * runs on a machine without a GPU and reports DMM_ERR_UNSUPPORTED "no CUDA driver: <reason>";
 * one built without them reports "built without CUDA headers".
 *
 * Each driver object retains the primary context of its device and makes it current on the calling
 * thread at the start of every op (cuCtxSetCurrent is a cheap thread-local store), so any thread may
 * call any op. Where the device lacks VMM (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
 * the object gets an ops table whose VMM slots are NULL.
 *
 * The driver keeps its own records of what it holds — reservations (va → bytes), physical handles
 * (handle → bytes), mappings (va → handle), how often each handle is mapped, and eager allocations
 * (ptr → bytes) — in small hash maps under one lock that is never held across a CUDA call. They give
 * the census (tallies of successful calls), the byte count a handle release needs, and the same
 * argument checks as the host driver, refusing what CUDA would either reject late or silently accept
 * (unmapping two mappings at once, releasing a handle that is still mapped, giving back a reservation
 * with mappings inside, freeing a stale pointer).
 * The trade-off: one short lock per VMM op, paid on the slow path only.
 *
 * Error mapping: CUDA_ERROR_OUT_OF_MEMORY → DMM_ERR_OUT_OF_MEMORY; CUDA_ERROR_NOT_READY from a query →
 * DMM_ERR_BUSY; sticky context errors (illegal address, launch failure, …) → DMM_ERR_DEVICE_LOST, and
 * from then on this driver refuses every op with DMM_ERR_DEVICE_LOST without calling CUDA; anything
 * else → DMM_ERR_DRIVER. Every sentence names the op, its values and CUDA's own code and name.
 *
 * Invariants (under `lock`):
 *   census.reserved_bytes = Σ reservations.bytes      census.handles = |handles|
 *   census.handle_bytes   = Σ handles.bytes           census.mapped_bytes = Σ handles[mappings.handle].bytes
 *   map_count[h] = |{va : mappings[va] = h}| (absent = 0)
 *   census.eager_bytes    = Σ eager.bytes
 *   a record is added only after its CUDA call succeeded; it is taken out before the undoing call
 *   (CUDA may hand the same VA or handle value to another thread the moment that call returns) and
 *   put back if the call failed; either way its slot is promised beforehand, so no bookkeeping step
 *   after a CUDA call can fail.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dmm/driver.h"

#ifndef DMM_HAVE_CUDA_H

/* ---- built without cuda.h: every entry point says so ---------------------------------------- */

dmm_status dmm_cuda_driver_create(int ordinal, dmm_driver **out) {
    if (out != NULL) *out = NULL;
    return dmm_error_set(DMM_ERR_UNSUPPORTED,
                         "dmm_cuda_driver_create(ordinal=%d): no CUDA driver: dmm was built without CUDA "
                         "headers (cuda.h was not found at configure time); rebuild with cuda.h on the "
                         "include path or use the host driver",
                         ordinal);
}

dmm_status dmm_cuda_device_count(int *count) {
    if (count == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_cuda_device_count: count is NULL");
    *count = 0;
    return DMM_OK;
}

dmm_status dmm_cuda_device_query(int ordinal, dmm_cuda_device_info *out) {
    (void)out;
    return dmm_error_set(DMM_ERR_UNSUPPORTED,
                         "dmm_cuda_device_query(ordinal=%d): no CUDA driver: dmm was built without CUDA "
                         "headers",
                         ordinal);
}

dmm_status dmm_cuda_driver_set_peer_access(dmm_driver *cuda, const int *peers, size_t n) {
    (void)cuda;
    (void)peers;
    (void)n;
    return dmm_error_set(DMM_ERR_UNSUPPORTED,
                         "dmm_cuda_driver_set_peer_access: no CUDA driver: dmm was built without CUDA headers");
}

#else /* DMM_HAVE_CUDA_H */

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

/* ---- the entry points, resolved once per process -------------------------------------------- */

typedef struct cu_api {
    CUresult (*init)(unsigned int flags);
    CUresult (*driverGetVersion)(int *version);
    CUresult (*getErrorName)(CUresult r, const char **s);
    CUresult (*getErrorString)(CUresult r, const char **s);
    CUresult (*deviceGetCount)(int *count);
    CUresult (*deviceGet)(CUdevice *dev, int ordinal);
    CUresult (*deviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*deviceGetAttribute)(int *value, CUdevice_attribute attr, CUdevice dev);
    CUresult (*deviceCanAccessPeer)(int *can, CUdevice dev, CUdevice peer);
    CUresult (*primaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*primaryCtxRelease)(CUdevice dev);
    CUresult (*ctxSetCurrent)(CUcontext ctx);
    CUresult (*memGetAllocationGranularity)(size_t *g, const CUmemAllocationProp *prop,
                                            CUmemAllocationGranularity_flags flags);
    CUresult (*memAddressReserve)(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                  unsigned long long flags);
    CUresult (*memAddressFree)(CUdeviceptr ptr, size_t size);
    CUresult (*memCreate)(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                          unsigned long long flags);
    CUresult (*memRelease)(CUmemGenericAllocationHandle h);
    CUresult (*memMap)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                       unsigned long long flags);
    CUresult (*memUnmap)(CUdeviceptr ptr, size_t size);
    CUresult (*memSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
    CUresult (*memAlloc)(CUdeviceptr *ptr, size_t bytes);
    CUresult (*memFree)(CUdeviceptr ptr);
    CUresult (*memGetInfo)(size_t *free_bytes, size_t *total_bytes);
    CUresult (*streamCreate)(CUstream *s, unsigned int flags);
    CUresult (*streamDestroy)(CUstream s);
    CUresult (*streamSynchronize)(CUstream s);
    CUresult (*eventCreate)(CUevent *e, unsigned int flags);
    CUresult (*eventDestroy)(CUevent e);
    CUresult (*eventRecord)(CUevent e, CUstream s);
    CUresult (*eventQuery)(CUevent e);
    CUresult (*eventSynchronize)(CUevent e);
    CUresult (*memcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
} cu_api;

/* The exported names: the ABI versions that CUDA 12/13's cuda.h binds the plain names to. */
static const struct {
    const char *name;
    size_t offset;
} cu_symbols[] = {
#define CU_SYM(field, name) {name, offsetof(cu_api, field)}
    CU_SYM(init, "cuInit"),
    CU_SYM(driverGetVersion, "cuDriverGetVersion"),
    CU_SYM(getErrorName, "cuGetErrorName"),
    CU_SYM(getErrorString, "cuGetErrorString"),
    CU_SYM(deviceGetCount, "cuDeviceGetCount"),
    CU_SYM(deviceGet, "cuDeviceGet"),
    CU_SYM(deviceGetName, "cuDeviceGetName"),
    CU_SYM(deviceGetAttribute, "cuDeviceGetAttribute"),
    CU_SYM(deviceCanAccessPeer, "cuDeviceCanAccessPeer"),
    CU_SYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    CU_SYM(primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    CU_SYM(ctxSetCurrent, "cuCtxSetCurrent"),
    CU_SYM(memGetAllocationGranularity, "cuMemGetAllocationGranularity"),
    CU_SYM(memAddressReserve, "cuMemAddressReserve"),
    CU_SYM(memAddressFree, "cuMemAddressFree"),
    CU_SYM(memCreate, "cuMemCreate"),
    CU_SYM(memRelease, "cuMemRelease"),
    CU_SYM(memMap, "cuMemMap"),
    CU_SYM(memUnmap, "cuMemUnmap"),
    CU_SYM(memSetAccess, "cuMemSetAccess"),
    CU_SYM(memAlloc, "cuMemAlloc_v2"),
    CU_SYM(memFree, "cuMemFree_v2"),
    CU_SYM(memGetInfo, "cuMemGetInfo_v2"),
    CU_SYM(streamCreate, "cuStreamCreate"),
    CU_SYM(streamDestroy, "cuStreamDestroy_v2"),
    CU_SYM(streamSynchronize, "cuStreamSynchronize"),
    CU_SYM(eventCreate, "cuEventCreate"),
    CU_SYM(eventDestroy, "cuEventDestroy_v2"),
    CU_SYM(eventRecord, "cuEventRecord"),
    CU_SYM(eventQuery, "cuEventQuery"),
    CU_SYM(eventSynchronize, "cuEventSynchronize"),
    CU_SYM(memcpyAsync, "cuMemcpyAsync"),
#undef CU_SYM
};

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static cu_api cu;               /* valid when cu_ready */
static bool cu_ready;           /* library loaded, every symbol found, cuInit succeeded */
static char cu_reason[512];     /* why not, when !cu_ready */
static int cu_driver_version;   /* cuDriverGetVersion, when cu_ready */

static const char *cu_name(CUresult r) {
    const char *s = NULL;
    if (cu.getErrorName == NULL || cu.getErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_?";
    return s;
}

static const char *cu_text(CUresult r) {
    const char *s = NULL;
    if (cu.getErrorString == NULL || cu.getErrorString(r, &s) != CUDA_SUCCESS || s == NULL)
        return "unknown CUDA error";
    return s;
}

static void cu_load(void) {
    const char *path = getenv("DMM_CUDA_LIBRARY"); /* for tests and unusual installs */
    if (path == NULL || path[0] == '\0') path = "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        snprintf(cu_reason, sizeof cu_reason, "dlopen(\"%s\") failed: %s", path, e != NULL ? e : "unknown error");
        return;
    }
    cu_api api;
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
    cu = api; /* error names are usable from here on, also in the sentences below */
    CUresult r = cu.init(0);
    if (r != CUDA_SUCCESS) {
        snprintf(cu_reason, sizeof cu_reason, "cuInit(0) failed with %s (%d): %s", cu_name(r), (int)r,
                 cu_text(r));
        return; /* the library stays loaded: unloading libcuda after cuInit is not safe */
    }
    r = cu.driverGetVersion(&cu_driver_version);
    if (r != CUDA_SUCCESS) cu_driver_version = 0;
    cu_ready = true; /* never dlclose'd: CUDA keeps threads and state for the life of the process */
}

/* DMM_OK when the library is usable; else UNSUPPORTED with "no CUDA driver: <reason>". */
static dmm_status cu_require(const char *op, int ordinal) {
    pthread_once(&cu_once, cu_load);
    if (cu_ready) return DMM_OK;
    return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s(ordinal=%d): no CUDA driver: %s; use the host driver", op,
                         ordinal, cu_reason);
}

/* ---- a small u64 → u64 hash map (open addressing, linear probing, backward-shift deletion) ----- */

typedef struct u64slot {
    uint64_t key;
    uint64_t val;
    bool used;
} u64slot;

typedef struct u64map {
    u64slot *slots;
    size_t cap;     /* 0 or a power of two */
    size_t count;   /* used slots */
    size_t pending; /* slots promised to calls in flight (reserved, not yet put) */
} u64map;

static size_t map_hash(uint64_t k, size_t cap) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static void map_insert_raw(u64slot *slots, size_t cap, uint64_t key, uint64_t val) {
    size_t i = map_hash(key, cap);
    while (slots[i].used && slots[i].key != key) i = (i + 1) & (cap - 1);
    slots[i].key = key;
    slots[i].val = val;
    slots[i].used = true;
}

/* Makes room for `need` entries at a load of at most 1/2. */
static bool map_fit(u64map *m, size_t need) {
    if (need * 2 <= m->cap) return true;
    size_t cap = m->cap != 0 ? m->cap : 16;
    while (cap < need * 2) cap *= 2;
    u64slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL) return false;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].used) map_insert_raw(slots, cap, m->slots[i].key, m->slots[i].val);
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return true;
}

/* Promises one slot to a call about to be made; false (nothing changed) when memory is short. */
static bool map_reserve(u64map *m) {
    if (!map_fit(m, m->count + m->pending + 1)) return false;
    m->pending++;
    return true;
}

static void map_unreserve(u64map *m) { m->pending--; }

/* Fills a promised slot (cannot fail). */
static void map_put_reserved(u64map *m, uint64_t key, uint64_t val) {
    m->pending--;
    size_t i = map_hash(key, m->cap);
    while (m->slots[i].used && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    if (!m->slots[i].used) m->count++;
    m->slots[i].key = key;
    m->slots[i].val = val;
    m->slots[i].used = true;
}

static bool map_get(const u64map *m, uint64_t key, uint64_t *val) {
    if (m->cap == 0) return false;
    for (size_t i = map_hash(key, m->cap); m->slots[i].used; i = (i + 1) & (m->cap - 1))
        if (m->slots[i].key == key) {
            if (val != NULL) *val = m->slots[i].val;
            return true;
        }
    return false;
}

static bool map_del(u64map *m, uint64_t key) {
    if (m->cap == 0) return false;
    size_t mask = m->cap - 1, i = map_hash(key, m->cap);
    while (m->slots[i].used && m->slots[i].key != key) i = (i + 1) & mask;
    if (!m->slots[i].used) return false;
    /* Backward shift: pull later members of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (hole + 1) & mask; m->slots[j].used; j = (j + 1) & mask) {
        size_t home = map_hash(m->slots[j].key, m->cap);
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].used = false;
    m->count--;
    return true;
}

/* Takes a record out before the call that undoes it, keeping its slot promised (pending), so that
 * (a) a key CUDA hands out again the moment the call returns (a VA, a handle value) is never confused
 * with the stale record, and (b) putting the record back when the call fails cannot fail. */
static bool map_take(u64map *m, uint64_t key, uint64_t *val) {
    if (!map_get(m, key, val) || !map_del(m, key)) return false;
    m->pending++;
    return true;
}

/* Overwrites the value of a present key (no allocation). */
static bool map_set(u64map *m, uint64_t key, uint64_t val) {
    if (m->cap == 0) return false;
    for (size_t i = map_hash(key, m->cap); m->slots[i].used; i = (i + 1) & (m->cap - 1))
        if (m->slots[i].key == key) {
            m->slots[i].val = val;
            return true;
        }
    return false;
}

/* Whether any key lies in [lo, hi). O(capacity): for rare calls only. */
static bool map_any_in(const u64map *m, uint64_t lo, uint64_t hi) {
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].used && m->slots[i].key >= lo && m->slots[i].key < hi) return true;
    return false;
}

static void map_free(u64map *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- the driver object ---------------------------------------------------------------------- */

#define CUDA_MAX_PEERS 64

typedef struct cuda_driver {
    dmm_driver base;                 /* first: ops and device */
    CUdevice dev;
    CUcontext ctx;                   /* the retained primary context */
    bool vmm;                        /* VMM ops present */
    size_t granule;                  /* minimum VMM granularity (0 without VMM) */
    CUmemAllocationProp prop;        /* pinned device memory on `dev` */
    _Atomic int lost;                /* 0, or the sticky CUresult that lost the device */
    dmm_lock lock;                   /* guards everything below; never held across a CUDA call */
    u64map reservations;             /* va → bytes */
    u64map handles;                  /* handle → bytes */
    u64map mappings;                 /* va → handle */
    u64map map_count;                /* handle → times mapped (absent = 0) */
    u64map eager;                    /* ptr → bytes */
    dmm_driver_census census;        /* tallies of successful calls (size unused) */
    int peers[CUDA_MAX_PEERS];       /* ordinals also granted access by set_access */
    size_t n_peers;
} cuda_driver;

static const dmm_driver_ops cuda_ops_vmm;
static const dmm_driver_ops cuda_ops_eager;

static cuda_driver *as_cuda(dmm_driver *d) { return (cuda_driver *)d; }

static bool is_sticky(CUresult r) {
    switch ((int)r) {
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case 226: /* CUDA_ERROR_CONTAINED (CUDA 12.4+): the process must end */
    case 721: /* CUDA_ERROR_TENSOR_MEMORY_LEAK (CUDA 12.8+): the context is unusable */
    case 911: /* CUDA_ERROR_EXTERNAL_DEVICE: the context is unusable */
        return true;
    default:
        return false;
    }
}

/* The refusal once the device is lost: no CUDA call is made. */
static dmm_status lost_error(cuda_driver *c, const char *call) {
    CUresult r = (CUresult)atomic_load_explicit(&c->lost, memory_order_acquire);
    return dmm_error_set(DMM_ERR_DEVICE_LOST,
                         "cuda driver (device %d): %s refused without calling CUDA: the device was lost "
                         "earlier (%s (%d): %s); tear the context down and confirm it terminated",
                         (int)c->base.device.index, call, cu_name(r), (int)r, cu_text(r));
}

/* Maps a failed CUresult to a dmm code and sets the sentence: op, values, CUDA's code and name. */
static dmm_status cu_fail(cuda_driver *c, CUresult r, const char *call, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static dmm_status cu_fail(cuda_driver *c, CUresult r, const char *call, const char *fmt, ...) {
    char values[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(values, sizeof values, fmt, ap);
    va_end(ap);
    dmm_status s;
    const char *advice;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        s = DMM_ERR_OUT_OF_MEMORY;
        advice = "free device memory or ask for less";
    } else if (is_sticky(r)) {
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
                         (int)c->base.device.index, call, values, cu_name(r), (int)r, cu_text(r), advice);
}

/* Refuses when lost; else makes the primary context current on this thread. */
static dmm_status enter(cuda_driver *c, const char *call) {
    if (atomic_load_explicit(&c->lost, memory_order_acquire) != 0) return lost_error(c, call);
    CUresult r = cu.ctxSetCurrent(c->ctx);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuCtxSetCurrent", "primary context of device %d", (int)c->dev);
    return DMM_OK;
}

static dmm_status no_memory(cuda_driver *c, const char *call) {
    return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                         "cuda driver (device %d): %s: no host memory for the driver's own record; nothing "
                         "was done",
                         (int)c->base.device.index, call);
}

/* ---- VMM ------------------------------------------------------------------------------------- */

static dmm_status op_granularity(dmm_driver *d, size_t *bytes) {
    cuda_driver *c = as_cuda(d);
    if (bytes == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda granularity: bytes is NULL");
    if (atomic_load_explicit(&c->lost, memory_order_acquire) != 0) return lost_error(c, "granularity");
    *bytes = c->granule;
    return DMM_OK;
}

static bool granular(const cuda_driver *c, uint64_t x) { return x % c->granule == 0; }

/* The alignment of a reservation made with align = 0: the largest power of two ≤ bytes, capped at
 * 1 GiB, and at least the granularity (which is all the contract promises). VA costs nothing, and a
 * large handle mapped at a VA aligned to its size grows faster: on the H200, a 1 GiB handle right
 * after an equal release took 100 µs (create+map+access) at a 1 GiB-aligned VA and 138 µs at 32 MiB
 * past a 1 GiB boundary (bench_growth, the same run; the arena's own allocation: 92 vs 147 µs). */
#define CUDA_RESERVE_ALIGN_MAX ((size_t)1 << 30)

static size_t default_align(const cuda_driver *c, size_t bytes) {
    size_t a = c->granule;
    while (a < CUDA_RESERVE_ALIGN_MAX && a * 2 <= bytes) a *= 2;
    return a;
}

static dmm_status op_reserve(dmm_driver *d, size_t bytes, size_t align, uintptr_t *va) {
    cuda_driver *c = as_cuda(d);
    if (va == NULL || bytes == 0 || !granular(c, bytes) || (align != 0 && (!dmm_is_pow2(align))))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda reserve(bytes=%zu, align=%zu): bytes must be a non-zero multiple of the "
                             "granularity %zu, align 0 or a power of two, va not NULL",
                             bytes, align, c->granule);
    dmm_status s = enter(c, "cuMemAddressReserve");
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&c->lock);
    bool room = map_reserve(&c->reservations);
    dmm_lock_release(&c->lock);
    if (!room) return no_memory(c, "cuMemAddressReserve");
    CUdeviceptr p = 0;
    if (align == 0) align = default_align(c, bytes);
    CUresult r = cu.memAddressReserve(&p, bytes, align, 0, 0);
    dmm_lock_acquire(&c->lock);
    if (r == CUDA_SUCCESS) {
        map_put_reserved(&c->reservations, (uint64_t)p, bytes);
        c->census.reserved_bytes += bytes;
    } else {
        map_unreserve(&c->reservations);
    }
    dmm_lock_release(&c->lock);
    if (r != CUDA_SUCCESS)
        return cu_fail(c, r, "cuMemAddressReserve", "bytes=%zu, align=%zu", bytes, align);
    *va = (uintptr_t)p;
    return DMM_OK;
}

static dmm_status op_unreserve(dmm_driver *d, uintptr_t va, size_t bytes) {
    cuda_driver *c = as_cuda(d);
    uint64_t have = 0;
    dmm_lock_acquire(&c->lock);
    bool known = map_get(&c->reservations, va, &have);
    bool busy = known && have == bytes && map_any_in(&c->mappings, va, (uint64_t)va + bytes);
    bool taken = known && have == bytes && !busy && map_take(&c->reservations, va, &have);
    dmm_lock_release(&c->lock);
    if (!taken)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda unreserve(va=0x%llx, bytes=%zu): %s; nothing was done",
                             (unsigned long long)va, bytes,
                             !known ? "no reservation starts there"
                             : busy ? "mappings remain inside it: unmap them first"
                                    : "the bytes differ from the reservation's");
    dmm_status s = enter(c, "cuMemAddressFree");
    CUresult r = s == DMM_OK ? cu.memAddressFree((CUdeviceptr)va, bytes) : CUDA_SUCCESS;
    dmm_lock_acquire(&c->lock);
    if (s == DMM_OK && r == CUDA_SUCCESS) {
        map_unreserve(&c->reservations);
        c->census.reserved_bytes -= bytes;
    } else {
        map_put_reserved(&c->reservations, va, have); /* still reserved: the record comes back */
    }
    dmm_lock_release(&c->lock);
    if (s != DMM_OK) return s;
    if (r != CUDA_SUCCESS)
        return cu_fail(c, r, "cuMemAddressFree", "va=0x%llx, bytes=%zu", (unsigned long long)va, bytes);
    return DMM_OK;
}

static dmm_status op_create(dmm_driver *d, size_t bytes, dmm_phys *handle) {
    cuda_driver *c = as_cuda(d);
    if (handle == NULL || bytes == 0 || !granular(c, bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda create(bytes=%zu): bytes must be a non-zero multiple of the granularity %zu "
                             "and handle not NULL",
                             bytes, c->granule);
    dmm_status s = enter(c, "cuMemCreate");
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&c->lock);
    bool room = map_reserve(&c->handles);
    dmm_lock_release(&c->lock);
    if (!room) return no_memory(c, "cuMemCreate");
    CUmemGenericAllocationHandle h = 0;
    CUresult r = cu.memCreate(&h, bytes, &c->prop, 0);
    dmm_lock_acquire(&c->lock);
    if (r == CUDA_SUCCESS) {
        map_put_reserved(&c->handles, (uint64_t)h, bytes);
        c->census.handles++;
        c->census.handle_bytes += bytes;
    } else {
        map_unreserve(&c->handles);
    }
    dmm_lock_release(&c->lock);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuMemCreate", "bytes=%zu, pinned device memory", bytes);
    *handle = (dmm_phys)h;
    return DMM_OK;
}

static dmm_status op_release(dmm_driver *d, dmm_phys handle) {
    cuda_driver *c = as_cuda(d);
    uint64_t bytes = 0, maps = 0;
    dmm_lock_acquire(&c->lock);
    bool known = map_get(&c->handles, handle, &bytes);
    (void)map_get(&c->map_count, handle, &maps);
    bool taken = known && maps == 0 && map_take(&c->handles, handle, &bytes);
    dmm_lock_release(&c->lock);
    if (!known)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda release(handle=0x%llx): not a live handle of this driver; nothing was done",
                             (unsigned long long)handle);
    if (!taken)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda release(handle=0x%llx): the handle is still mapped %llu time(s); unmap it first; "
                             "nothing was done",
                             (unsigned long long)handle, (unsigned long long)maps);
    dmm_status s = enter(c, "cuMemRelease");
    CUresult r = s == DMM_OK ? cu.memRelease((CUmemGenericAllocationHandle)handle) : CUDA_SUCCESS;
    dmm_lock_acquire(&c->lock);
    if (s == DMM_OK && r == CUDA_SUCCESS) {
        map_unreserve(&c->handles);
        c->census.handles--;
        c->census.handle_bytes -= bytes;
    } else {
        map_put_reserved(&c->handles, handle, bytes);
    }
    dmm_lock_release(&c->lock);
    if (s != DMM_OK) return s;
    if (r != CUDA_SUCCESS)
        return cu_fail(c, r, "cuMemRelease", "handle=0x%llx, bytes=%llu", (unsigned long long)handle,
                       (unsigned long long)bytes);
    return DMM_OK;
}

static dmm_status op_map(dmm_driver *d, uintptr_t va, size_t bytes, dmm_phys handle) {
    cuda_driver *c = as_cuda(d);
    uint64_t hbytes = 0;
    dmm_lock_acquire(&c->lock);
    bool known = map_get(&c->handles, handle, &hbytes);
    bool room = known && hbytes == bytes && va != 0 && map_reserve(&c->mappings);
    if (room && !map_reserve(&c->map_count)) {
        map_unreserve(&c->mappings);
        room = false;
    }
    dmm_lock_release(&c->lock);
    if (!known || hbytes != bytes || va == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda map(va=0x%llx, bytes=%zu, handle=0x%llx): %s; nothing was done",
                             (unsigned long long)va, bytes, (unsigned long long)handle,
                             !known ? "not a live handle of this driver"
                             : va == 0 ? "va is 0"
                                       : "bytes must equal the handle's size");
    if (!room) return no_memory(c, "cuMemMap");
    dmm_status s = enter(c, "cuMemMap");
    if (s != DMM_OK) {
        dmm_lock_acquire(&c->lock);
        map_unreserve(&c->mappings);
        map_unreserve(&c->map_count);
        dmm_lock_release(&c->lock);
        return s;
    }
    CUresult r = cu.memMap((CUdeviceptr)va, bytes, 0, (CUmemGenericAllocationHandle)handle, 0);
    dmm_lock_acquire(&c->lock);
    if (r == CUDA_SUCCESS) {
        uint64_t n = 0;
        (void)map_get(&c->map_count, handle, &n);
        map_put_reserved(&c->mappings, va, handle);
        map_put_reserved(&c->map_count, handle, n + 1);
        c->census.mapped_bytes += bytes;
    } else {
        map_unreserve(&c->mappings);
        map_unreserve(&c->map_count);
    }
    dmm_lock_release(&c->lock);
    if (r != CUDA_SUCCESS)
        return cu_fail(c, r, "cuMemMap", "va=0x%llx, bytes=%zu, offset=0, handle=0x%llx", (unsigned long long)va,
                       bytes, (unsigned long long)handle);
    return DMM_OK;
}

static dmm_status op_unmap(dmm_driver *d, uintptr_t va, size_t bytes) {
    cuda_driver *c = as_cuda(d);
    uint64_t handle = 0, have = 0;
    dmm_lock_acquire(&c->lock);
    bool known = map_get(&c->mappings, va, &handle) && map_get(&c->handles, handle, &have);
    bool taken = known && have == bytes && map_take(&c->mappings, va, &handle);
    dmm_lock_release(&c->lock);
    if (!taken)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda unmap(va=0x%llx, bytes=%zu): %s; nothing was done", (unsigned long long)va,
                             bytes, known ? "bytes differ from the mapping's" : "no mapping starts there");
    dmm_status s = enter(c, "cuMemUnmap");
    CUresult r = s == DMM_OK ? cu.memUnmap((CUdeviceptr)va, bytes) : CUDA_SUCCESS;
    dmm_lock_acquire(&c->lock);
    if (s == DMM_OK && r == CUDA_SUCCESS) {
        map_unreserve(&c->mappings);
        c->census.mapped_bytes -= bytes;
        uint64_t n = 0;
        if (map_get(&c->map_count, handle, &n)) {
            if (n <= 1) (void)map_del(&c->map_count, handle);
            else (void)map_set(&c->map_count, handle, n - 1);
        }
    } else {
        map_put_reserved(&c->mappings, va, handle); /* still mapped */
    }
    dmm_lock_release(&c->lock);
    if (s != DMM_OK) return s;
    if (r != CUDA_SUCCESS)
        return cu_fail(c, r, "cuMemUnmap", "va=0x%llx, bytes=%zu", (unsigned long long)va, bytes);
    return DMM_OK;
}

static dmm_status op_set_access(dmm_driver *d, uintptr_t va, size_t bytes, dmm_access access) {
    cuda_driver *c = as_cuda(d);
    CUmemAccess_flags flags;
    switch (access) {
    case DMM_ACCESS_NONE: flags = CU_MEM_ACCESS_FLAGS_PROT_NONE; break;
    case DMM_ACCESS_READ: flags = CU_MEM_ACCESS_FLAGS_PROT_READ; break;
    case DMM_ACCESS_READ_WRITE: flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE; break;
    default:
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda set_access(va=0x%llx, bytes=%zu, access=%d): access must be NONE, READ or "
                             "READ_WRITE",
                             (unsigned long long)va, bytes, (int)access);
    }
    if (va == 0 || bytes == 0 || !granular(c, va) || !granular(c, bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "cuda set_access(va=0x%llx, bytes=%zu): va and bytes must be non-zero multiples of "
                             "the granularity %zu",
                             (unsigned long long)va, bytes, c->granule);
    CUmemAccessDesc desc[1 + CUDA_MAX_PEERS];
    size_t n = 0;
    desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc[n].location.id = (int)c->dev;
    desc[n].flags = flags;
    n++;
    dmm_lock_acquire(&c->lock);
    for (size_t i = 0; i < c->n_peers; i++, n++) {
        desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        desc[n].location.id = c->peers[i];
        desc[n].flags = flags;
    }
    dmm_lock_release(&c->lock);
    dmm_status s = enter(c, "cuMemSetAccess");
    if (s != DMM_OK) return s;
    CUresult r = cu.memSetAccess((CUdeviceptr)va, bytes, desc, n);
    if (r != CUDA_SUCCESS)
        return cu_fail(c, r, "cuMemSetAccess", "va=0x%llx, bytes=%zu, access=%s, device %d + %zu peer(s)",
                       (unsigned long long)va, bytes,
                       access == DMM_ACCESS_READ_WRITE ? "READ_WRITE" : access == DMM_ACCESS_READ ? "READ" : "NONE",
                       (int)c->dev, n - 1);
    return DMM_OK;
}

/* ---- eager memory ---------------------------------------------------------------------------- */

static dmm_status op_alloc(dmm_driver *d, size_t bytes, uintptr_t *ptr) {
    cuda_driver *c = as_cuda(d);
    if (ptr == NULL || bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda alloc(bytes=%zu): bytes must be > 0 and ptr not NULL",
                             bytes);
    dmm_status s = enter(c, "cuMemAlloc");
    if (s != DMM_OK) return s;
    dmm_lock_acquire(&c->lock);
    bool room = map_reserve(&c->eager);
    dmm_lock_release(&c->lock);
    if (!room) return no_memory(c, "cuMemAlloc");
    CUdeviceptr p = 0;
    CUresult r = cu.memAlloc(&p, bytes);
    dmm_lock_acquire(&c->lock);
    if (r == CUDA_SUCCESS) {
        map_put_reserved(&c->eager, (uint64_t)p, bytes);
        c->census.eager_bytes += bytes;
    } else {
        map_unreserve(&c->eager);
    }
    dmm_lock_release(&c->lock);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuMemAlloc", "bytes=%zu", bytes);
    *ptr = (uintptr_t)p;
    return DMM_OK;
}

static dmm_status op_free(dmm_driver *d, uintptr_t ptr, size_t bytes) {
    cuda_driver *c = as_cuda(d);
    uint64_t have = 0;
    dmm_lock_acquire(&c->lock);
    bool known = map_get(&c->eager, ptr, &have);
    bool taken = known && have == bytes && map_take(&c->eager, ptr, &have);
    dmm_lock_release(&c->lock);
    if (!taken)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda free(ptr=0x%llx, bytes=%zu): %s; nothing was done",
                             (unsigned long long)ptr, bytes,
                             known ? "bytes differ from the allocation's" : "not a live allocation of this driver");
    dmm_status s = enter(c, "cuMemFree");
    CUresult r = s == DMM_OK ? cu.memFree((CUdeviceptr)ptr) : CUDA_SUCCESS;
    dmm_lock_acquire(&c->lock);
    if (s == DMM_OK && r == CUDA_SUCCESS) {
        map_unreserve(&c->eager);
        c->census.eager_bytes -= bytes;
    } else {
        map_put_reserved(&c->eager, ptr, have);
    }
    dmm_lock_release(&c->lock);
    if (s != DMM_OK) return s;
    if (r != CUDA_SUCCESS)
        return cu_fail(c, r, "cuMemFree", "ptr=0x%llx, bytes=%zu", (unsigned long long)ptr, bytes);
    return DMM_OK;
}

/* ---- streams, events, copies ----------------------------------------------------------------- */

static dmm_status op_stream_create(dmm_driver *d, dmm_stream *stream) {
    cuda_driver *c = as_cuda(d);
    if (stream == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda stream_create: stream is NULL");
    dmm_status s = enter(c, "cuStreamCreate");
    if (s != DMM_OK) return s;
    CUstream st = NULL;
    CUresult r = cu.streamCreate(&st, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuStreamCreate", "flags=CU_STREAM_NON_BLOCKING");
    *stream = (dmm_stream)st;
    return DMM_OK;
}

static dmm_status op_stream_destroy(dmm_driver *d, dmm_stream stream) {
    cuda_driver *c = as_cuda(d);
    if (stream == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda stream_destroy: the default stream cannot be destroyed");
    dmm_status s = enter(c, "cuStreamDestroy");
    if (s != DMM_OK) return s;
    CUresult r = cu.streamDestroy((CUstream)stream);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuStreamDestroy", "stream=%p", stream);
    return DMM_OK;
}

static dmm_status op_event_create(dmm_driver *d, dmm_event *event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_create: event is NULL");
    dmm_status s = enter(c, "cuEventCreate");
    if (s != DMM_OK) return s;
    CUevent e = NULL;
    CUresult r = cu.eventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuEventCreate", "flags=CU_EVENT_DISABLE_TIMING");
    *event = (dmm_event)e;
    return DMM_OK;
}

static dmm_status op_event_destroy(dmm_driver *d, dmm_event event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_destroy: event is NULL");
    dmm_status s = enter(c, "cuEventDestroy");
    if (s != DMM_OK) return s;
    CUresult r = cu.eventDestroy((CUevent)event);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuEventDestroy", "event=%p", event);
    return DMM_OK;
}

static dmm_status op_event_record(dmm_driver *d, dmm_event event, dmm_stream stream) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_record: event is NULL");
    dmm_status s = enter(c, "cuEventRecord");
    if (s != DMM_OK) return s;
    CUresult r = cu.eventRecord((CUevent)event, (CUstream)stream);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuEventRecord", "event=%p, stream=%p", event, stream);
    return DMM_OK;
}

static dmm_status op_event_query(dmm_driver *d, dmm_event event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_query: event is NULL");
    dmm_status s = enter(c, "cuEventQuery");
    if (s != DMM_OK) return s;
    CUresult r = cu.eventQuery((CUevent)event);
    if (r == CUDA_SUCCESS) return DMM_OK;
    if (r == CUDA_ERROR_NOT_READY)
        return dmm_error_set(DMM_ERR_BUSY, "cuda driver (device %d): cuEventQuery(event=%p): the work before the "
                             "event is still queued (CUDA_ERROR_NOT_READY (600)); query again later",
                             (int)c->base.device.index, event);
    return cu_fail(c, r, "cuEventQuery", "event=%p", event);
}

static dmm_status op_event_synchronize(dmm_driver *d, dmm_event event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_synchronize: event is NULL");
    dmm_status s = enter(c, "cuEventSynchronize");
    if (s != DMM_OK) return s;
    CUresult r = cu.eventSynchronize((CUevent)event);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuEventSynchronize", "event=%p", event);
    return DMM_OK;
}

static dmm_status op_copy(dmm_driver *d, uintptr_t dst, uintptr_t src, size_t bytes, dmm_stream stream) {
    cuda_driver *c = as_cuda(d);
    if (bytes != 0 && (dst == 0 || src == 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda copy(dst=0x%llx, src=0x%llx, bytes=%zu): a NULL pointer",
                             (unsigned long long)dst, (unsigned long long)src, bytes);
    dmm_status s = enter(c, "cuMemcpyAsync");
    if (s != DMM_OK || bytes == 0) return s;
    CUresult r = cu.memcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, (CUstream)stream);
    if (r != CUDA_SUCCESS)
        return cu_fail(c, r, "cuMemcpyAsync", "dst=0x%llx, src=0x%llx, bytes=%zu, stream=%p", (unsigned long long)dst,
                       (unsigned long long)src, bytes, stream);
    return DMM_OK;
}

static dmm_status op_stream_synchronize(dmm_driver *d, dmm_stream stream) {
    cuda_driver *c = as_cuda(d);
    dmm_status s = enter(c, "cuStreamSynchronize");
    if (s != DMM_OK) return s;
    CUresult r = cu.streamSynchronize((CUstream)stream);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuStreamSynchronize", "stream=%p", stream);
    return DMM_OK;
}

/* ---- information ----------------------------------------------------------------------------- */

static dmm_status op_mem_info(dmm_driver *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    cuda_driver *c = as_cuda(d);
    if (free_bytes == NULL || total_bytes == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda mem_info: an output is NULL");
    dmm_status s = enter(c, "cuMemGetInfo");
    if (s != DMM_OK) return s;
    size_t f = 0, t = 0;
    CUresult r = cu.memGetInfo(&f, &t);
    if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuMemGetInfo", "device %d", (int)c->dev);
    *free_bytes = f;
    *total_bytes = t;
    return DMM_OK;
}

static dmm_status op_census(dmm_driver *d, dmm_driver_census *out) {
    cuda_driver *c = as_cuda(d);
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda census: out is NULL");
    if (out->size < sizeof *out)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "cuda census: out->size is %u, at least %zu needed",
                             (unsigned)out->size, sizeof *out);
    dmm_lock_acquire(&c->lock); /* the driver's own tally: answered also after a device loss */
    dmm_driver_census t = c->census;
    dmm_lock_release(&c->lock);
    t.size = (uint32_t)sizeof t;
    memcpy(out, &t, sizeof t);
    return DMM_OK;
}

static void op_destroy(dmm_driver *d) {
    cuda_driver *c = as_cuda(d);
    /* Gives back this object's reference on the primary context (bookkeeping, not memory: also after
     * a device loss, so that whoever resets the device finds no stale reference of ours). */
    (void)cu.primaryCtxRelease(c->dev);
    map_free(&c->reservations);
    map_free(&c->handles);
    map_free(&c->mappings);
    map_free(&c->map_count);
    map_free(&c->eager);
    dmm_lock_destroy(&c->lock);
    free(c);
}

#define CUDA_COMMON_OPS                                                                                     \
    .alloc = op_alloc, .free = op_free, .stream_create = op_stream_create,                                  \
    .stream_destroy = op_stream_destroy, .event_create = op_event_create, .event_destroy = op_event_destroy, \
    .event_record = op_event_record, .event_query = op_event_query,                                          \
    .event_synchronize = op_event_synchronize, .copy = op_copy, .stream_synchronize = op_stream_synchronize,  \
    .mem_info = op_mem_info, .census = op_census, .destroy = op_destroy

static const dmm_driver_ops cuda_ops_vmm = {
    .size = sizeof(dmm_driver_ops),
    .name = "cuda",
    .granularity = op_granularity,
    .reserve = op_reserve,
    .unreserve = op_unreserve,
    .create = op_create,
    .release = op_release,
    .map = op_map,
    .unmap = op_unmap,
    .set_access = op_set_access,
    CUDA_COMMON_OPS,
};

/* A device without VMM: the VMM slots stay NULL ("absent"). */
static const dmm_driver_ops cuda_ops_eager = {
    .size = sizeof(dmm_driver_ops),
    .name = "cuda",
    CUDA_COMMON_OPS,
};

/* ---- public entry points --------------------------------------------------------------------- */

dmm_status dmm_cuda_device_count(int *count) {
    if (count == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_cuda_device_count: count is NULL");
    *count = 0;
    pthread_once(&cu_once, cu_load);
    if (!cu_ready) return DMM_OK; /* no driver: zero devices */
    int n = 0;
    CUresult r = cu.deviceGetCount(&n);
    if (r != CUDA_SUCCESS) return DMM_OK; /* a driver that cannot count has no usable device */
    *count = n;
    return DMM_OK;
}

/* Looks the device up: UNSUPPORTED without a driver or devices, INVALID_ARGUMENT for a bad ordinal. */
static dmm_status find_device(const char *op, int ordinal, CUdevice *dev) {
    dmm_status s = cu_require(op, ordinal);
    if (s != DMM_OK) return s;
    int n = 0;
    CUresult r = cu.deviceGetCount(&n);
    if (r != CUDA_SUCCESS)
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s(ordinal=%d): no CUDA driver: cuDeviceGetCount failed with %s (%d): %s",
                             op, ordinal, cu_name(r), (int)r, cu_text(r));
    if (n == 0)
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "%s(ordinal=%d): no CUDA driver: the driver sees no CUDA device", op,
                             ordinal);
    if (ordinal < 0 || ordinal >= n)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s(ordinal=%d): there are %d CUDA device(s), 0 to %d", op,
                             ordinal, n, n - 1);
    r = cu.deviceGet(dev, ordinal);
    if (r != CUDA_SUCCESS)
        return dmm_error_set(DMM_ERR_DRIVER, "%s(ordinal=%d): cuDeviceGet failed with %s (%d): %s", op, ordinal,
                             cu_name(r), (int)r, cu_text(r));
    return DMM_OK;
}

static void device_prop(CUdevice dev, CUmemAllocationProp *prop) {
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = (int)dev;
}

/* VMM support and minimum granularity of a device (granule 0 without VMM). */
static CUresult device_vmm(CUdevice dev, bool *vmm, size_t *granule) {
    int attr = 0;
    *vmm = false;
    *granule = 0;
    CUresult r = cu.deviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    if (r != CUDA_SUCCESS || attr == 0) return r;
    CUmemAllocationProp prop;
    device_prop(dev, &prop);
    r = cu.memGetAllocationGranularity(granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) return r;
    *vmm = *granule != 0;
    return CUDA_SUCCESS;
}

dmm_status dmm_cuda_driver_create(int ordinal, dmm_driver **out) {
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_cuda_driver_create: out is NULL");
    *out = NULL;
    CUdevice dev = 0;
    dmm_status s = find_device("dmm_cuda_driver_create", ordinal, &dev);
    if (s != DMM_OK) return s;
    cuda_driver *c = calloc(1, sizeof *c);
    if (c == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_cuda_driver_create(ordinal=%d): no host memory for the driver",
                             ordinal);
    c->base.device.tier = DMM_TIER_DEVICE;
    c->base.device.index = ordinal;
    c->dev = dev;
    CUresult r = cu.primaryCtxRetain(&c->ctx, dev);
    if (r != CUDA_SUCCESS) {
        s = cu_fail(c, r, "cuDevicePrimaryCtxRetain", "device %d", ordinal);
        free(c);
        return s;
    }
    r = cu.ctxSetCurrent(c->ctx);
    if (r == CUDA_SUCCESS) r = device_vmm(dev, &c->vmm, &c->granule);
    if (r != CUDA_SUCCESS) {
        s = cu_fail(c, r, "cuDeviceGetAttribute/cuMemGetAllocationGranularity", "device %d", ordinal);
        (void)cu.primaryCtxRelease(dev);
        free(c);
        return s;
    }
    device_prop(dev, &c->prop);
    atomic_init(&c->lost, 0);
    dmm_lock_init(&c->lock);
    c->census.size = (uint32_t)sizeof c->census;
    c->base.ops = c->vmm ? &cuda_ops_vmm : &cuda_ops_eager;
    *out = &c->base;
    return DMM_OK;
}

dmm_status dmm_cuda_device_query(int ordinal, dmm_cuda_device_info *out) {
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_cuda_device_query: out is NULL");
    if (out->size < sizeof *out)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_cuda_device_query: out->size is %u, at least %zu needed",
                             (unsigned)out->size, sizeof *out);
    CUdevice dev = 0;
    dmm_status s = find_device("dmm_cuda_device_query", ordinal, &dev);
    if (s != DMM_OK) return s;
    dmm_cuda_device_info info;
    memset(&info, 0, sizeof info);
    info.size = (uint32_t)sizeof info;
    info.ordinal = ordinal;
    info.driver_version = cu_driver_version;
    const char *step = "cuDeviceGetName";
    CUresult r = cu.deviceGetName(info.name, (int)sizeof info.name, dev);
    int major = 0, minor = 0;
    if (r == CUDA_SUCCESS) {
        step = "cuDeviceGetAttribute(COMPUTE_CAPABILITY)";
        r = cu.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        if (r == CUDA_SUCCESS) r = cu.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    }
    CUcontext ctx = NULL;
    bool retained = false;
    if (r == CUDA_SUCCESS) {
        step = "cuDevicePrimaryCtxRetain";
        r = cu.primaryCtxRetain(&ctx, dev);
        retained = r == CUDA_SUCCESS;
    }
    if (r == CUDA_SUCCESS) {
        step = "cuCtxSetCurrent";
        r = cu.ctxSetCurrent(ctx);
    }
    bool vmm = false;
    size_t granule = 0, f = 0, t = 0;
    if (r == CUDA_SUCCESS) {
        step = "VMM attribute / granularity";
        r = device_vmm(dev, &vmm, &granule);
    }
    if (r == CUDA_SUCCESS) {
        step = "cuMemGetInfo";
        r = cu.memGetInfo(&f, &t);
    }
    if (retained) (void)cu.primaryCtxRelease(dev);
    if (r != CUDA_SUCCESS)
        return dmm_error_set(is_sticky(r) ? DMM_ERR_DEVICE_LOST : DMM_ERR_DRIVER,
                             "dmm_cuda_device_query(ordinal=%d): %s failed with %s (%d): %s", ordinal, step,
                             cu_name(r), (int)r, cu_text(r));
    info.compute_major = major;
    info.compute_minor = minor;
    info.vmm_supported = vmm;
    info.granularity = granule;
    info.free_bytes = f;
    info.total_bytes = t;
    memcpy(out, &info, sizeof info);
    return DMM_OK;
}

dmm_status dmm_cuda_driver_set_peer_access(dmm_driver *cuda, const int *peers, size_t n) {
    if (cuda == NULL || (cuda->ops != &cuda_ops_vmm && cuda->ops != &cuda_ops_eager))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_cuda_driver_set_peer_access: the driver is %s, not a cuda driver",
                             cuda == NULL ? "NULL" : cuda->ops != NULL && cuda->ops->name != NULL ? cuda->ops->name : "?");
    cuda_driver *c = as_cuda(cuda);
    if ((n != 0 && peers == NULL) || n > CUDA_MAX_PEERS)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_cuda_driver_set_peer_access(device %d, n=%zu): peers is NULL or more than %d",
                             (int)c->base.device.index, n, CUDA_MAX_PEERS);
    if (!c->vmm)
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm_cuda_driver_set_peer_access(device %d): the device has no VMM, so access is not "
                             "set per mapping",
                             (int)c->base.device.index);
    if (atomic_load_explicit(&c->lost, memory_order_acquire) != 0)
        return lost_error(c, "dmm_cuda_driver_set_peer_access");
    int count = 0;
    (void)dmm_cuda_device_count(&count);
    for (size_t i = 0; i < n; i++) {
        if (peers[i] < 0 || peers[i] >= count || peers[i] == (int)c->base.device.index)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "dmm_cuda_driver_set_peer_access(device %d): peer %d is not another device "
                                 "(there are %d); nothing changed",
                                 (int)c->base.device.index, peers[i], count);
        for (size_t j = 0; j < i; j++)
            if (peers[j] == peers[i])
                return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                     "dmm_cuda_driver_set_peer_access(device %d): peer %d listed twice; nothing "
                                     "changed",
                                     (int)c->base.device.index, peers[i]);
        CUdevice pd = 0;
        int can = 0;
        CUresult r = cu.deviceGet(&pd, peers[i]);
        if (r == CUDA_SUCCESS) r = cu.deviceCanAccessPeer(&can, pd, c->dev);
        if (r != CUDA_SUCCESS) return cu_fail(c, r, "cuDeviceCanAccessPeer", "device %d from peer %d", (int)c->dev, peers[i]);
        if (!can)
            return dmm_error_set(DMM_ERR_UNSUPPORTED,
                                 "dmm_cuda_driver_set_peer_access(device %d): device %d cannot access its memory "
                                 "(cuDeviceCanAccessPeer = 0); nothing changed",
                                 (int)c->base.device.index, peers[i]);
    }
    dmm_lock_acquire(&c->lock);
    for (size_t i = 0; i < n; i++) c->peers[i] = peers[i];
    c->n_peers = n;
    dmm_lock_release(&c->lock);
    return DMM_OK;
}

#endif /* DMM_HAVE_CUDA_H */
