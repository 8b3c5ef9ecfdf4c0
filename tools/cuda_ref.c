/* tools/cuda_ref.c — cuMemAllocAsync / cuMemFreeAsync as the reference (contract: cuda_ref.h).
 *
 * The few CUDA driver entry points used are declared here by their C ABI (CUresult = int,
 * CUdeviceptr = unsigned long long, handles are pointers), resolved with dlsym under the names
 * cuda.h binds to. Nothing here is part of the library: the library's own CUDA driver is
 * src/driver/cuda.c; this file only measures the driver's pool for comparison.
 */
#include "cuda_ref.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int cu_result;
typedef unsigned long long cu_ptr;

struct dmm_cuda_ref {
    void *lib;
    void *ctx;
    int dev;
    cu_result (*init)(unsigned);
    cu_result (*device_get)(int *, int);
    cu_result (*ctx_retain)(void **, int);
    cu_result (*ctx_release)(int);
    cu_result (*ctx_set)(void *);
    cu_result (*stream_create)(void **, unsigned);
    cu_result (*stream_destroy)(void *);
    cu_result (*stream_sync)(void *);
    cu_result (*alloc_async)(cu_ptr *, size_t, void *);
    cu_result (*free_async)(cu_ptr, void *);
    cu_result (*error_name)(cu_result, const char **);
};

static const char *cu_name(dmm_cuda_ref *r, cu_result e) {
    const char *s = NULL;
    if (r->error_name != NULL && r->error_name(e, &s) == 0 && s != NULL) return s;
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
    cu_result e = r->init(0);
    if (e == 0) e = r->device_get(&r->dev, 0);
    if (e != 0) {
        snprintf(err, errcap, "no CUDA device: cuInit/cuDeviceGet failed with %s (%d)", cu_name(r, e), e);
        dmm_cuda_ref_close(r);
        return -1;
    }
    e = r->ctx_retain(&r->ctx, r->dev);
    if (e != 0) {
        snprintf(err, errcap, "cuDevicePrimaryCtxRetain failed with %s (%d)", cu_name(r, e), e);
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

int dmm_cuda_ref_bind(dmm_cuda_ref *r) { return r->ctx_set(r->ctx) == 0 ? 0 : -1; }

void *dmm_cuda_ref_stream_create(dmm_cuda_ref *r) {
    void *s = NULL;
    return r->stream_create(&s, 1 /* CU_STREAM_NON_BLOCKING */) == 0 ? s : NULL;
}

void dmm_cuda_ref_stream_destroy(dmm_cuda_ref *r, void *stream) {
    if (stream != NULL) r->stream_destroy(stream);
}

int dmm_cuda_ref_sync(dmm_cuda_ref *r, void *stream) { return r->stream_sync(stream) == 0 ? 0 : -1; }

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

double dmm_cuda_ref_replay(dmm_cuda_ref *r, const dmm_trace *t, char *err, size_t errcap) {
    void *streams[64] = {0};
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
        if (c != 0) {
            snprintf(err, errcap, "event %zu: cuMem%sAsync of %llu bytes failed with %s (%d)", i,
                     e->kind == DMM_TRACE_ALLOC ? "Alloc" : "Free", (unsigned long long)e->bytes, cu_name(r, c), c);
            goto out;
        }
    }
    for (uint32_t i = 0; i < t->nstreams; i++) r->stream_sync(streams[i]);
    secs = ref_now_s() - t0;
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
