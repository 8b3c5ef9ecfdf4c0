/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/ort/allocator.c — the OrtAllocator over two dmm devices (dmm_ort.h, dmm/device.h).
 *
 * What it owns: per allocator, one governor holder and under it two devices (dmm_device: arena, pool,
 * lease), one for weights (DMM_ROLE_WEIGHTS) and one for activations (DMM_ROLE_ACTIVATION); the
 * OrtMemoryInfo it answers Info with; the map of blocks allocated on a stream; the last refusal's
 * sentence; the counters of what the devices' pools cannot count (refusals, bad frees, zero-byte
 * requests, the largest request).
 *
 * Routing: Reserve → the weights device (initializers); Alloc and AllocOnStream → the run device. Free
 * routes by address (dmm_device_contains: each device's one VA reservation), and a pointer of neither is
 * refused without a device call. A block allocated on a stream is freed on that stream (the pool says
 * which, dmm_pool_block_stream: asked only once AllocOnStream was used), so the pool reuses it at once
 * on its own stream; every other block is freed on the default stream.
 *
 * Refusals (NULL to ONNX Runtime): a size above the pool's VA (nothing could hold it), a device refusal
 * (budget, driver memory). The ladder before a refusal is the device's (dmm_device_malloc: its own cache
 * given back, then this holder's reclaim, which trims both devices' pools, then one retry; the governor
 * never asks the holder that is charging). The sentence goes to last_error, the config's log callback and
 * dmm's log.
 *
 * Invariants: in_use = Σ pools' allocated_bytes.current; the OrtAllocator is the first member, so ONNX
 * Runtime's pointer to it is the allocator's. Only dmm's public API is called (ort_internal.h). Nothing
 * here aborts, exits or prints.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_internal.h"

#define GIB ((uint64_t)1 << 30)

#ifndef DMM_ORT_HAVE_SHIM
#define DMM_ORT_HAVE_SHIM 0 /* no C++ compiler: the plain C entry points (NULL on refusal) */
#endif
#if !DMM_ORT_HAVE_SHIM /* never called, but named by the selection below */
void *dmm__ort_throwing_alloc(struct OrtAllocator *self, size_t bytes) { return dmm__ort_c_alloc(self, bytes); }
void *dmm__ort_throwing_reserve(struct OrtAllocator *self, size_t bytes) { return dmm__ort_c_reserve(self, bytes); }
void *dmm__ort_throwing_alloc_on_stream(struct OrtAllocator *self, size_t bytes, struct OrtSyncStream *s) {
    return dmm__ort_c_alloc_on_stream(self, bytes, s);
}
#endif
#define ORT_BLOCK_ALIGN 512u

static inline uint64_t ld(_Atomic uint64_t *x) { return atomic_load_explicit(x, memory_order_relaxed); }
static inline void inc(_Atomic uint64_t *x) { atomic_fetch_add_explicit(x, 1, memory_order_relaxed); }

static dmm_ort_allocator *of(const struct OrtAllocator *self) { return (dmm_ort_allocator *)(uintptr_t)self; }

dmm_status dmm__ort_wrap(dmm_status s, const char *fmt, ...) {
    char cause[DMM_ORT_ERROR_CAP], context[512];
    snprintf(cause, sizeof cause, "%s", dmm_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    return dmm_error_set(s, "%s: %s", context, cause);
}

/* Keeps the thread's last error as the allocator's last refusal, and logs it. */
static void record(dmm_ort_allocator *a, dmm_status s) {
    const char *msg = dmm_last_error();
    pthread_mutex_lock(&a->error_lock);
    snprintf(a->last_error, sizeof a->last_error, "%s", msg);
    a->last_status = s;
    pthread_mutex_unlock(&a->error_lock);
    if (a->log != NULL) a->log(a->log_user, DMM_LOG_WARN, msg);
    dmm_log(DMM_LOG_WARN, "%s", msg);
}

static const char *pool_role(int which) { return which == DMM_ORT_POOL_WEIGHTS ? "weights" : "activation"; }

/* Trims both devices' pools (the holder's reclaim: the pools only, never a device lock a charging
 * thread may hold). Asked while devices[] is being made or taken down, it gives nothing back. */
static uint64_t trim_all(dmm_ort_allocator *a) {
    if (pthread_mutex_trylock(&a->devices_lock) != 0) return 0;
    uint64_t total = 0;
    for (int i = 0; i < DMM_ORT_POOLS; i++) {
        uint64_t r = 0;
        if (a->devices[i] != NULL && dmm_pool_trim(dmm_device_pool(a->devices[i]), 0, &r) == DMM_OK) total += r;
    }
    pthread_mutex_unlock(&a->devices_lock);
    dmm_clear_error();
    return total;
}

/* The one request path of Alloc, AllocOnStream and Reserve. */
static void *serve(dmm_ort_allocator *a, int which, size_t bytes, dmm_stream stream, const char *op) {
    if (bytes == 0) {
        inc(&a->zero_requests);
        return NULL;
    }
    dmm_device *d = a->devices[which];
    if ((uint64_t)bytes > a->pool_va) {
        dmm_status s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                                     "dmm ort: %s of %zu bytes for '%s' refused: more than the %llu bytes of address "
                                     "space of its %s pool, so nothing could hold it (the config's va_bytes sets "
                                     "it); nothing changed",
                                     op, bytes, a->name, (unsigned long long)a->pool_va, pool_role(which));
        inc(&a->refusals);
        record(a, s);
        return NULL;
    }
    void *ptr = NULL;
    dmm_status s = dmm_device_malloc(d, bytes, stream, &ptr);
    if (s != DMM_OK) {
        dmm__ort_wrap(s, "dmm ort: %s of %zu bytes on %s %d for '%s' (%s pool) refused", op,
                        bytes, a->dev.tier == DMM_TIER_DEVICE ? "device" : "host", (int)a->dev.index, a->name,
                        pool_role(which));
        inc(&a->refusals);
        record(a, s);
        return NULL;
    }
    uint64_t m = ld(&a->max_alloc);
    while ((uint64_t)bytes > m &&
           !atomic_compare_exchange_weak_explicit(&a->max_alloc, &m, (uint64_t)bytes, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
    if (stream != NULL && !atomic_load_explicit(&a->stream_blocks, memory_order_relaxed))
        atomic_store_explicit(&a->stream_blocks, 1, memory_order_relaxed);
    return ptr;
}

void *dmm__ort_c_alloc(struct OrtAllocator *self, size_t bytes) {
    return serve(of(self), DMM_ORT_POOL_RUN, bytes, NULL, "Alloc");
}

void *dmm__ort_c_reserve(struct OrtAllocator *self, size_t bytes) {
    return serve(of(self), DMM_ORT_POOL_WEIGHTS, bytes, NULL, "Reserve");
}

void *dmm__ort_c_alloc_on_stream(struct OrtAllocator *self, size_t bytes, struct OrtSyncStream *stream) {
    dmm_ort_allocator *a = of(self);
    dmm_stream handle = NULL;
    if (stream != NULL && a->rt->calls.SyncStream_GetHandle != NULL) handle = a->rt->calls.SyncStream_GetHandle(stream);
    return serve(a, DMM_ORT_POOL_RUN, bytes, handle, "AllocOnStream");
}

static int device_of(const dmm_ort_allocator *a, const void *ptr) {
    for (int i = 0; i < DMM_ORT_POOLS; i++)
        if (dmm_device_contains(a->devices[i], ptr)) return i;
    return -1;
}

/* Frees ptr on its remembered stream, or on `explicit_stream` when `has_explicit` (the caller knows the
 * stream whose work may still use it). */
static void free_block(dmm_ort_allocator *a, void *ptr, bool has_explicit, dmm_stream explicit_stream) {
    if (ptr == NULL) return;
    int which = device_of(a, ptr);
    if (which < 0) {
        dmm_status s = dmm_error_set(DMM_ERR_UNKNOWN_ALLOCATION,
                                     "dmm ort: Free of %p for '%s' refused: the pointer is in neither of its pools "
                                     "(not allocated by this allocator); nothing changed",
                                     ptr, a->name);
        inc(&a->bad_frees);
        record(a, s);
        return;
    }
    dmm_device *d = a->devices[which];
    dmm_stream stream = explicit_stream; /* the caller knows the stream whose work may still use it */
    if (!has_explicit) { /* else the one the block was allocated on, where the pool reuses it at once */
        stream = NULL;
        if (atomic_load_explicit(&a->stream_blocks, memory_order_relaxed) &&
            dmm_pool_block_stream(dmm_device_pool(d), ptr, &stream) != DMM_OK) {
            stream = NULL; /* not a live block: the free below refuses it with its sentence */
            dmm_clear_error();
        }
    }
    dmm_status s = dmm_device_free(d, ptr, stream);
    if (s != DMM_OK) {
        dmm__ort_wrap(s, "dmm ort: Free of %p for '%s' (%s pool) refused (a double free, or a pointer inside a "
                           "block rather than its start); nothing changed",
                        ptr, a->name, pool_role(which));
        inc(&a->bad_frees);
        record(a, s);
    }
}

static void ort_free(struct OrtAllocator *self, void *ptr) { free_block(of(self), ptr, false, NULL); }

void *dmm__ort_alloc_native_stream(dmm_ort_allocator *a, size_t bytes, dmm_stream stream) {
    return serve(a, DMM_ORT_POOL_RUN, bytes, stream, "gpu_external_alloc");
}

void dmm__ort_free_native_stream(dmm_ort_allocator *a, void *ptr, dmm_stream stream) {
    free_block(a, ptr, true, stream);
}

static const struct OrtMemoryInfo *ort_info(const struct OrtAllocator *self) { return of(self)->info; }

static void add_u64(dmm_ort_runtime *rt, struct OrtKeyValuePairs *kv, const char *key, uint64_t v) {
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    rt->calls.AddKeyValuePair(kv, key, text);
}

static struct OrtStatus *ort_get_stats(const struct OrtAllocator *self, struct OrtKeyValuePairs **out) {
    dmm_ort_allocator *a = of(self);
    dmm_ort_runtime *rt = a->rt;
    if (out == NULL) return dmm__ort_make_status(rt, DMM_ORT_INVALID_ARGUMENT, "dmm ort: GetStats got no output pointer");
    *out = NULL;
    dmm_ort_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (dmm_ort_allocator_stats(a, &st) != DMM_OK) return dmm__ort_make_status(rt, DMM_ORT_FAIL, dmm_last_error());
    struct OrtKeyValuePairs *kv = NULL;
    rt->calls.CreateKeyValuePairs(&kv);
    if (kv == NULL) return dmm__ort_make_status(rt, DMM_ORT_FAIL, "dmm ort: GetStats: ONNX Runtime made no key-value pairs");
    dmm_tier_usage tu;
    memset(&tu, 0, sizeof tu);
    tu.size = sizeof tu;
    if (dmm_governor_tier_usage(a->gov, a->dev, &tu) == DMM_OK && tu.limit[DMM_AXIS_OWNED] != DMM_UNLIMITED)
        add_u64(rt, kv, "Limit", tu.limit[DMM_AXIS_OWNED]);
    dmm_clear_error();
    add_u64(rt, kv, "InUse", st.in_use);
    add_u64(rt, kv, "TotalAllocated", st.total_allocated);
    add_u64(rt, kv, "MaxInUse", st.max_in_use);
    add_u64(rt, kv, "NumAllocs", st.allocs + st.reserves);
    add_u64(rt, kv, "NumReserves", st.reserves);
    add_u64(rt, kv, "NumArenaExtensions", st.weights.grows + st.run.grows);
    add_u64(rt, kv, "NumArenaShrinkages", st.weights.trims + st.run.trims);
    add_u64(rt, kv, "MaxAllocSize", st.max_alloc);
    *out = kv;
    return NULL;
}

static struct OrtStatus *ort_shrink(struct OrtAllocator *self) {
    dmm_ort_allocator *a = of(self);
    if (dmm_ort_allocator_trim(a, NULL) != DMM_OK) return dmm__ort_make_status(a->rt, DMM_ORT_FAIL, dmm_last_error());
    return NULL;
}

/* The holder's reclaim: the first rung (cached free memory) trims both pools. */
static uint64_t reclaim(void *user, dmm_device_id device, dmm_reclaim_step step, uint64_t wanted) {
    (void)wanted;
    dmm_ort_allocator *a = user;
    if (step != DMM_RECLAIM_CACHED || device.tier != a->dev.tier || device.index != a->dev.index) return 0;
    return trim_all(a);
}

dmm_status dmm_ort_allocator_stats(dmm_ort_allocator *a, dmm_ort_stats *out) {
    if (a == NULL || out == NULL || out->size < sizeof *out)
        return dmm_error_set(out != NULL && out->size < sizeof *out ? DMM_ERR_SHORT_STRUCT : DMM_ERR_INVALID_ARGUMENT,
                             "dmm ort: dmm_ort_allocator_stats needs an allocator and a dmm_ort_stats whose size is "
                             "sizeof(dmm_ort_stats)");
    dmm_ort_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    st.weights.size = sizeof st.weights;
    st.run.size = sizeof st.run;
    dmm_status s = dmm_pool_stats_get(dmm_device_pool(a->devices[DMM_ORT_POOL_WEIGHTS]), &st.weights);
    if (s == DMM_OK) s = dmm_pool_stats_get(dmm_device_pool(a->devices[DMM_ORT_POOL_RUN]), &st.run);
    if (s != DMM_OK) return s;
    st.reserves = st.weights.mallocs;
    st.allocs = st.run.mallocs;
    st.frees = st.weights.frees + st.run.frees;
    st.refusals = ld(&a->refusals);
    st.bad_frees = ld(&a->bad_frees);
    st.zero_requests = ld(&a->zero_requests);
    st.in_use = (uint64_t)st.weights.allocated_bytes.current + (uint64_t)st.run.allocated_bytes.current;
    st.max_in_use = (uint64_t)st.weights.allocated_bytes.peak + (uint64_t)st.run.allocated_bytes.peak;
    st.total_allocated = (uint64_t)st.weights.allocated_bytes.total + (uint64_t)st.run.allocated_bytes.total;
    st.max_alloc = ld(&a->max_alloc);
    st.shrinks = ld(&a->shrinks);
    *out = st;
    return DMM_OK;
}

dmm_status dmm_ort_allocator_trim(dmm_ort_allocator *a, uint64_t *released) {
    if (released != NULL) *released = 0;
    if (a == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm ort: dmm_ort_allocator_trim needs an allocator");
    inc(&a->shrinks);
    uint64_t total = 0;
    for (int i = 0; i < DMM_ORT_POOLS; i++) {
        uint64_t r = 0;
        dmm_status s = dmm_device_empty_cache(a->devices[i], &r);
        total += r;
        if (s != DMM_OK) {
            if (released != NULL) *released = total;
            return dmm__ort_wrap(s, "dmm ort: trimming the %s pool of '%s'", pool_role(i), a->name);
        }
    }
    if (released != NULL) *released = total;
    return DMM_OK;
}

dmm_status dmm_ort_allocator_last_error(dmm_ort_allocator *a, char *buf, size_t cap) {
    if (a == NULL) return DMM_OK;
    pthread_mutex_lock(&a->error_lock);
    if (buf != NULL && cap > 0) snprintf(buf, cap, "%s", a->last_error);
    dmm_status s = a->last_status;
    pthread_mutex_unlock(&a->error_lock);
    return s;
}

struct OrtAllocator *dmm_ort_allocator_ort(dmm_ort_allocator *a) { return a != NULL ? &a->ort : NULL; }

static dmm_status open_device(dmm_ort_allocator *a, int which, dmm_role role) {
    dmm_device_config dc;
    memset(&dc, 0, sizeof dc);
    dc.size = sizeof dc;
    dc.pool_va_bytes = a->pool_va;
    dc.cache_limit_bytes = UINT64_MAX; /* a trim gives the memory back to the governor at once */
    dc.max_chunk_bytes = UINT64_MAX;   /* the pool's own handles: ONNX Runtime's requests are its own shapes */
    dc.name = a->name;
    dc.holder = a->holder;
    dc.role_given = true;
    dc.role = role;
    dc.pool_only = true; /* ONNX Runtime has its own graph capture; GetStats reads the pools' own stats */
    return dmm_device_create(a->drv, a->gov, &dc, &a->devices[which]);
}

dmm_status dmm_ort_allocator_create(dmm_ort_runtime *rt, dmm_driver *driver, dmm_governor *gov,
                                    const dmm_ort_config *cfg, dmm_ort_allocator **out) {
    if (out != NULL) *out = NULL;
    if (rt == NULL || driver == NULL || gov == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm ort: dmm_ort_allocator_create needs a runtime, a driver, a "
                                                       "governor and an output pointer");
    dmm_ort_config k;
    memset(&k, 0, sizeof k);
    if (cfg != NULL) {
        if (cfg->size < offsetof(dmm_ort_config, log))
            return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm ort: the dmm_ort_config's size %u is too small: set it to "
                                                       "sizeof(dmm_ort_config)", cfg->size);
        memcpy(&k, cfg, cfg->size < sizeof k ? cfg->size : sizeof k);
    }
    if (k.allocator_type != DMM_ORT_DEVICE_ALLOCATOR)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm ort: allocator_type %d refused: a registered allocator's memory info must say "
                             "OrtDeviceAllocator (0); ONNX Runtime refuses an arena type (1) at RegisterAllocator, and "
                             "dmm's pool is the cache already; nothing was created",
                             (int)k.allocator_type);
    size_t gran = 0;
    dmm_status s = driver->ops->granularity(driver, &gran);
    if (s != DMM_OK || gran == 0)
        return dmm_error_set(s != DMM_OK ? s : DMM_ERR_UNSUPPORTED,
                             "dmm ort: the '%s' driver has no virtual memory management; the adapter's pools need it",
                             driver->ops->name);
    uint64_t va = k.va_bytes ? k.va_bytes : 8 * GIB;
    if (va % gran != 0 || va > ((uint64_t)1 << 46))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm ort: va_bytes %llu refused: it must be a multiple of the driver's granularity %zu "
                             "and at most 2^46; nothing was created",
                             (unsigned long long)va, gran);
    dmm_ort_allocator *a = calloc(1, sizeof *a);
    if (a == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm ort: out of host memory");
    a->rt = rt;
    a->drv = driver;
    a->gov = gov;
    a->dev = driver->device;
    a->pool_va = va;
    a->log = k.log;
    a->log_user = k.log_user;
    snprintf(a->name, sizeof a->name, "%s", k.name != NULL ? k.name : "ort");
    pthread_mutex_init(&a->error_lock, NULL);
    pthread_mutex_init(&a->devices_lock, NULL);

    if (a->dev.tier == DMM_TIER_DEVICE)
        s = dmm__ort_status(rt, rt->calls.CreateMemoryInfo(DMM_ORT_NAME_CUDA, DMM_ORT_DEVICE_ALLOCATOR, (int)a->dev.index,
                                                     DMM_ORT_MEM_DEFAULT, &a->info),
                            DMM_ERR_INVALID_ARGUMENT, "dmm ort: creating the memory info of device memory");
    else
        s = dmm__ort_status(rt, rt->calls.CreateCpuMemoryInfo(DMM_ORT_DEVICE_ALLOCATOR, DMM_ORT_MEM_DEFAULT, &a->info),
                            DMM_ERR_INVALID_ARGUMENT, "dmm ort: creating the memory info of CPU memory");
    if (s != DMM_OK) goto fail;
    dmm_holder_config hc = {sizeof hc, a->name, k.priority, reclaim, a};
    s = dmm_governor_holder_register(gov, &hc, &a->holder);
    if (s != DMM_OK) goto fail;
    pthread_mutex_lock(&a->devices_lock);
    s = open_device(a, DMM_ORT_POOL_WEIGHTS, DMM_ROLE_WEIGHTS);
    if (s == DMM_OK) s = open_device(a, DMM_ORT_POOL_RUN, DMM_ROLE_ACTIVATION);
    pthread_mutex_unlock(&a->devices_lock);
    if (s != DMM_OK) goto fail;

    uint32_t v = rt->api_version < DMM_ORT_API_KNOWN ? rt->api_version : DMM_ORT_API_KNOWN;
    a->ort.version = v;
    bool throwing = DMM_ORT_HAVE_SHIM && !k.null_on_refusal;
    a->ort.Alloc = throwing ? dmm__ort_throwing_alloc : dmm__ort_c_alloc;
    a->ort.Free = ort_free;
    a->ort.Info = ort_info;
    if (v >= DMM_ORT_ALLOCATOR_V_RESERVE) a->ort.Reserve = throwing ? dmm__ort_throwing_reserve : dmm__ort_c_reserve;
    if (v >= DMM_ORT_ALLOCATOR_V_STATS && rt->calls.CreateKeyValuePairs != NULL && rt->calls.AddKeyValuePair != NULL)
        a->ort.GetStats = ort_get_stats;
    if (v >= DMM_ORT_ALLOCATOR_V_ON_STREAM)
        a->ort.AllocOnStream = throwing ? dmm__ort_throwing_alloc_on_stream : dmm__ort_c_alloc_on_stream;
    if (v >= DMM_ORT_ALLOCATOR_V_SHRINK) a->ort.Shrink = ort_shrink;
    *out = a;
    return DMM_OK;
fail:
    dmm__ort_wrap(s, "dmm ort: creating allocator '%s' on %s %d failed", a->name,
                    a->dev.tier == DMM_TIER_DEVICE ? "device" : "host", (int)a->dev.index);
    {
        char kept[DMM_ORT_ERROR_CAP]; /* the sentence, kept across the undo's own calls */
        snprintf(kept, sizeof kept, "%s", dmm_last_error());
        pthread_mutex_lock(&a->devices_lock);
        for (int i = DMM_ORT_POOLS - 1; i >= 0; i--) (void)dmm_device_destroy(a->devices[i]);
        pthread_mutex_unlock(&a->devices_lock);
        if (a->holder != NULL) (void)dmm_governor_holder_unregister(a->holder);
        if (a->info != NULL) rt->calls.ReleaseMemoryInfo(a->info);
        pthread_mutex_destroy(&a->error_lock);
        pthread_mutex_destroy(&a->devices_lock);
        free(a);
        return dmm_error_set(s, "%s", kept);
    }
}

dmm_status dmm_ort_allocator_destroy(dmm_ort_allocator *a) {
    if (a == NULL) return DMM_OK;
    uint64_t live = 0, pending = 0;
    for (int i = 0; i < DMM_ORT_POOLS; i++) {
        if (a->devices[i] == NULL) continue; /* destroyed by an earlier call that failed after it */
        dmm_pool_stats st;
        memset(&st, 0, sizeof st);
        st.size = sizeof st;
        dmm_status s = dmm_pool_stats_get(dmm_device_pool(a->devices[i]), &st);
        if (s != DMM_OK) return s;
        live += (uint64_t)st.allocations.current;
        pending += (uint64_t)st.pending_blocks.current;
    }
    if (live != 0 || pending != 0)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm ort: destroying allocator '%s' refused: %llu block(s) are live and %llu wait for "
                             "their stream; release every session that used it (and unregister it from its "
                             "environments) first; nothing changed",
                             a->name, (unsigned long long)live, (unsigned long long)pending);
    pthread_mutex_lock(&a->devices_lock);
    for (int i = 0; i < DMM_ORT_POOLS; i++) {
        if (a->devices[i] == NULL) continue; /* destroyed by an earlier call that failed after it */
        dmm_status s = dmm_device_destroy(a->devices[i]);
        if (s != DMM_OK) { /* the device is as it was (or can only be destroyed again): so is the allocator */
            pthread_mutex_unlock(&a->devices_lock);
            return dmm__ort_wrap(s, "dmm ort: destroying allocator '%s' (call destroy again once the cause is "
                                      "gone)", a->name);
        }
        a->devices[i] = NULL;
    }
    pthread_mutex_unlock(&a->devices_lock);
    dmm_status first = dmm_governor_holder_unregister(a->holder); /* waits for a reclaim in flight */
    a->rt->calls.ReleaseMemoryInfo(a->info);
    pthread_mutex_destroy(&a->error_lock);
    pthread_mutex_destroy(&a->devices_lock);
    free(a);
    return first;
}

dmm_status dmm_ort_allocator_register(dmm_ort_allocator *a, struct OrtEnv *env) {
    if (a == NULL || env == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm ort: registering needs an allocator and an OrtEnv");
    return dmm__ort_status(a->rt, a->rt->calls.RegisterAllocator(env, &a->ort), DMM_ERR_INVALID_ARGUMENT,
                           "dmm ort: RegisterAllocator of dmm's allocator refused");
}

dmm_status dmm_ort_allocator_unregister(dmm_ort_allocator *a, struct OrtEnv *env) {
    if (a == NULL || env == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm ort: unregistering needs an allocator and an OrtEnv");
    return dmm__ort_status(a->rt, a->rt->calls.UnregisterAllocator(env, a->info), DMM_ERR_INVALID_ARGUMENT,
                           "dmm ort: UnregisterAllocator of dmm's allocator refused");
}
