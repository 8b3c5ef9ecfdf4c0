/* SPDX-License-Identifier: Apache-2.0 */
/* tools/cuda_ref.c — cuMemAllocAsync / cuMemFreeAsync as the reference (contract: cuda_ref.h).
 *
 * The few CUDA driver entry points used have dmm's own declarations (src/driver/cuda_decl.h, compared
 * with cuda.h where one is installed) and are resolved with dlsym under the names cuda.h binds to.
 * Nothing here is part of the library: the library's own CUDA driver is src/driver/cuda.c; this file
 * only measures the driver's pool for comparison.
 */
#include "cuda_ref.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/cuda_decl.h"

typedef dmm_cu_result cu_result;
typedef dmm_cu_deviceptr cu_ptr;

struct dmm_cuda_ref {
    void *lib;
    dmm_cu_context ctx;
    dmm_cu_device dev;
    dmm_cuInit_fn *init;
    dmm_cuDeviceGet_fn *device_get;
    dmm_cuDevicePrimaryCtxRetain_fn *ctx_retain;
    dmm_cuDevicePrimaryCtxRelease_fn *ctx_release;
    dmm_cuCtxSetCurrent_fn *ctx_set;
    dmm_cuStreamCreate_fn *stream_create;
    dmm_cuStreamDestroy_fn *stream_destroy;
    dmm_cuStreamSynchronize_fn *stream_sync;
    dmm_cuMemAllocAsync_fn *alloc_async;
    dmm_cuMemFreeAsync_fn *free_async;
    dmm_cuDeviceGetDefaultMemPool_fn *default_pool; /* these three may be absent: no reserved peak then */
    dmm_cuMemPoolGetAttribute_fn *pool_get;
    dmm_cuMemPoolSetAttribute_fn *pool_set;
    dmm_cuGetErrorName_fn *error_name;
};

static const char *cu_name(dmm_cuda_ref *r, cu_result e) {
    const char *s = NULL;
    if (r->error_name != NULL && r->error_name(e, &s) == DMM_CUDA_SUCCESS && s != NULL) return s;
    return "CUDA_ERROR_?";
}

#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)(&r->field) = dlsym(r->lib, name);                                               \
        if (r->field == NULL) {                                                                    \
            snprintf(err, errcap, "no CUDA driver: libcuda.so.1 lacks %s", name);                  \
            dmm_cuda_ref_close(r);                                                                 \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

int dmm_cuda_ref_open(dmm_cuda_ref **out, char *err, size_t errcap) {
    *out = NULL;
    dmm_cuda_ref *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errcap, "out of host memory");
        return -1;
    }
    r->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (r->lib == NULL) {
        snprintf(err, errcap, "no CUDA driver: %s", dlerror());
        free(r);
        return -1;
    }
    SYM(init, "cuInit");
    SYM(device_get, "cuDeviceGet");
    SYM(ctx_retain, "cuDevicePrimaryCtxRetain");
    SYM(ctx_release, "cuDevicePrimaryCtxRelease_v2");
    SYM(ctx_set, "cuCtxSetCurrent");
    SYM(stream_create, "cuStreamCreate");
    SYM(stream_destroy, "cuStreamDestroy_v2");
    SYM(stream_sync, "cuStreamSynchronize");
    SYM(alloc_async, "cuMemAllocAsync");
    SYM(free_async, "cuMemFreeAsync");
    *(void **)(&r->error_name) = dlsym(r->lib, "cuGetErrorName");
    *(void **)(&r->default_pool) = dlsym(r->lib, "cuDeviceGetDefaultMemPool");
    *(void **)(&r->pool_get) = dlsym(r->lib, "cuMemPoolGetAttribute");
    *(void **)(&r->pool_set) = dlsym(r->lib, "cuMemPoolSetAttribute");
    cu_result e = r->init(0);
    if (e == DMM_CUDA_SUCCESS) e = r->device_get(&r->dev, 0);
    if (e != DMM_CUDA_SUCCESS) {
        snprintf(err, errcap, "no CUDA device: cuInit/cuDeviceGet failed with %s (%d)", cu_name(r, e), (int)e);
        dmm_cuda_ref_close(r);
        return -1;
    }
    e = r->ctx_retain(&r->ctx, r->dev);
    if (e != DMM_CUDA_SUCCESS) {
        snprintf(err, errcap, "cuDevicePrimaryCtxRetain failed with %s (%d)", cu_name(r, e), (int)e);
        r->ctx = NULL;
        dmm_cuda_ref_close(r);
        return -1;
    }
    dmm_cuda_ref_bind(r);
    *out = r;
    return 0;
}

void dmm_cuda_ref_close(dmm_cuda_ref *r) {
    if (r == NULL) return;
    if (r->ctx != NULL && r->ctx_release != NULL) r->ctx_release(r->dev);
    if (r->lib != NULL) dlclose(r->lib);
    free(r);
}

int dmm_cuda_ref_bind(dmm_cuda_ref *r) { return r->ctx_set(r->ctx) == DMM_CUDA_SUCCESS ? 0 : -1; }

void *dmm_cuda_ref_stream_create(dmm_cuda_ref *r) {
    dmm_cu_stream s = NULL;
    return r->stream_create(&s, DMM_CU_STREAM_NON_BLOCKING) == DMM_CUDA_SUCCESS ? (void *)s : NULL;
}

void dmm_cuda_ref_stream_destroy(dmm_cuda_ref *r, void *stream) {
    if (stream != NULL) r->stream_destroy((dmm_cu_stream)stream);
}

int dmm_cuda_ref_sync(dmm_cuda_ref *r, void *stream) {
    return r->stream_sync((dmm_cu_stream)stream) == DMM_CUDA_SUCCESS ? 0 : -1;
}

static double ref_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int ref_cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dmm_cuda_ref_pair_ns(dmm_cuda_ref *r, size_t bytes, void *stream, int samples, int batch) {
    double *v = malloc((size_t)samples * sizeof *v);
    if (v == NULL) return -1;
    cu_ptr p = 0;
    /* warm the driver pool */
    if (r->alloc_async(&p, bytes, stream) != 0 || r->free_async(p, stream) != 0) {
        free(v);
        return -1;
    }
    r->stream_sync(stream);
    for (int s = 0; s < samples; s++) {
        double t0 = ref_now_s();
        for (int i = 0; i < batch; i++) {
            r->alloc_async(&p, bytes, stream);
            r->free_async(p, stream);
        }
        v[s] = (ref_now_s() - t0) * 1e9 / batch;
        r->stream_sync(stream);
    }
    qsort(v, (size_t)samples, sizeof *v, ref_cmp_d);
    double med = v[samples / 2];
    free(v);
    return med;
}

/* The device's default pool (the one cuMemAllocAsync uses), or NULL when the driver lacks the calls. */
static dmm_cu_mem_pool default_pool(dmm_cuda_ref *r) {
    dmm_cu_mem_pool pool = NULL;
    if (r->default_pool == NULL || r->pool_get == NULL || r->pool_set == NULL) return NULL;
    return r->default_pool(&pool, r->dev) == DMM_CUDA_SUCCESS ? pool : NULL;
}

double dmm_cuda_ref_replay(dmm_cuda_ref *r, const dmm_trace *t, uint64_t *peak_reserved, char *err, size_t errcap) {
    void *streams[64] = {0};
    dmm_cu_mem_pool pool = default_pool(r);
    uint64_t zero = 0;
    if (peak_reserved != NULL) *peak_reserved = 0;
    if (pool != NULL && r->pool_set(pool, DMM_CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero) != DMM_CUDA_SUCCESS) pool = NULL;
    cu_ptr *ptrs = calloc(t->allocs ? t->allocs : 1, sizeof *ptrs);
    uint8_t *sidx = calloc(t->allocs ? t->allocs : 1, 1);
    double secs = -1;
    if (ptrs == NULL || sidx == NULL) {
        snprintf(err, errcap, "out of host memory");
        goto out;
    }
    for (uint32_t i = 0; i < t->nstreams; i++)
        if (t->stream_ids[i] != 0 && (streams[i] = dmm_cuda_ref_stream_create(r)) == NULL) {
            snprintf(err, errcap, "cuStreamCreate failed");
            goto out;
        }
    double t0 = ref_now_s();
    for (size_t i = 0; i < t->n; i++) {
        const dmm_trace_event *e = &t->ev[i];
        cu_result c;
        if (e->kind == DMM_TRACE_ALLOC) {
            c = r->alloc_async(&ptrs[e->slot], (size_t)e->bytes, streams[e->stream]);
            sidx[e->slot] = (uint8_t)e->stream;
        } else {
            c = r->free_async(ptrs[e->slot], streams[e->stream]);
            ptrs[e->slot] = 0;
        }
        if (c != DMM_CUDA_SUCCESS) {
            snprintf(err, errcap, "event %zu: cuMem%sAsync of %llu bytes failed with %s (%d)", i,
                     e->kind == DMM_TRACE_ALLOC ? "Alloc" : "Free", (unsigned long long)e->bytes, cu_name(r, c), (int)c);
            goto out;
        }
    }
    for (uint32_t i = 0; i < t->nstreams; i++) r->stream_sync(streams[i]);
    secs = ref_now_s() - t0;
    if (pool != NULL && peak_reserved != NULL &&
        r->pool_get(pool, DMM_CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, peak_reserved) != DMM_CUDA_SUCCESS)
        *peak_reserved = 0;
out:
    if (ptrs != NULL)
        for (size_t k = 0; k < t->allocs; k++)
            if (ptrs[k] != 0) r->free_async(ptrs[k], streams[sidx[k]]);
    for (uint32_t i = 0; i < 64; i++)
        if (i < t->nstreams) {
            r->stream_sync(streams[i]);
            if (streams[i] != NULL) dmm_cuda_ref_stream_destroy(r, streams[i]);
        }
    free(ptrs);
    free(sidx);
    return secs;
}
