/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/torch_cuda.c — the exported entry points of libdmm_torch.so: PyTorch's pluggable
 * allocator interface translated onto the device front (dmm/device.h) over the cuda driver.
 *
 * What it owns: one dmm_device per CUDA device (created on its first use, never destroyed: torch frees
 * tensors until the process ends), the process-wide governor, and the last failure's sentence (torch
 * gives an allocator no way to return one). Everything the device needs of CUDA beyond memory (capture
 * status, pinned host memory, stream waits) is an optional slot of the cuda driver: this file opens no
 * library of its own. It lends its governor, its devices and its record of the last failure to the
 * library's other entry points through front.h (ort_front.c: ONNX Runtime on the same governor). The KV arena's entry points (dmm_torch_kv_*) put dmm/kv.h on the same devices, for
 * python/dmm/kv.py.
 *
 * The trade-off: the per-device slot is read with one acquire load on every call, and a context is
 * created under a global lock once; after that no entry point takes a global lock except to record a
 * failure.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmm/device.h"
#include "dmm/pool.h"
#include "dmm_torch.h"
#include "dmm/ipc.h"
#include "dmm/kv.h"
#include "core/options.h"
#include "env.h"
#include "frames.h"
#include "front.h"


/* ---- contexts ---- */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static dmm_device *_Atomic g_ctx[DMM_TORCH_MAX_DEVICES];
static dmm_governor *g_gov;
static uint64_t g_limit[DMM_TORCH_MAX_DEVICES]; /* limits set before the device's first use */
static uint64_t g_limit_all;
static bool g_track[DMM_TORCH_MAX_DEVICES]; /* block tracking asked for before the device's first use */
static bool g_track_all;
static bool g_no_capture_check; /* dmm_torch_set_capture_check(0): also for devices not used yet */

static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_err[2048];
static int g_status;

static int record(dmm_status s) {
    return dmm__torch_record(s);
}

int dmm__torch_record(dmm_status s) {
    if (s == DMM_OK) return 0;
    pthread_mutex_lock(&err_mu);
    snprintf(g_err, sizeof g_err, "%s", dmm_last_error());
    g_status = (int)s;
    pthread_mutex_unlock(&err_mu);
    return (int)s;
}

/* Creates the process-wide governor if there is none yet (under g_mu). */
static dmm_status governor_locked(void) { return g_gov == NULL ? dmm_governor_create(NULL, &g_gov) : DMM_OK; }

static dmm_device *create_slow(int device) {
    pthread_mutex_lock(&g_mu);
    dmm_device *c = atomic_load_explicit(&g_ctx[device], memory_order_acquire);
    if (c != NULL) {
        pthread_mutex_unlock(&g_mu);
        return c;
    }
    /* The environment first: a malformed knob fails this call before anything is loaded or created. */
    dmm_device_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.size = sizeof cfg;
    cfg.exportable = true; /* DMM_TORCH_SHAREABLE's default: shareable where the device can (below) */
    dmm_status s = dmm__torch_config_from_env(&cfg, dmm__option_env_named, NULL);
    if (s != DMM_OK) {
        pthread_mutex_unlock(&g_mu);
        record(s);
        return NULL;
    }
    s = governor_locked();
    dmm_driver *drv = NULL;
    if (s == DMM_OK) s = dmm_cuda_driver_create(device, &drv);
    if (s == DMM_OK && cfg.exportable) { /* tensors for torch.multiprocessing, where the device exports them */
        dmm_cuda_device_info info;
        memset(&info, 0, sizeof info);
        info.size = sizeof info;
        cfg.exportable = dmm_cuda_device_query(device, &info) == DMM_OK && info.posix_fd_export;
        dmm_clear_error();
    }
    if (s == DMM_OK) {
        cfg.limit_bytes = g_limit[device] ? g_limit[device] : g_limit_all;
        cfg.name = "torch";
        s = dmm_device_create(drv, g_gov, &cfg, &c);
        if (s != DMM_OK) dmm_driver_destroy(drv);
        else if (g_track_all || g_track[device]) dmm_device_track_blocks(c);
        if (s == DMM_OK && g_no_capture_check) dmm_device_set_capture_check(c, false);
    }
    if (s == DMM_OK) atomic_store_explicit(&g_ctx[device], c, memory_order_release);
    pthread_mutex_unlock(&g_mu);
    if (s != DMM_OK) record(s);
    return c;
}

static dmm_device *ctx_for(int device) {
    if (device < 0 || device >= DMM_TORCH_MAX_DEVICES) {
        record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: device %d is out of range (0..%d)", device,
                             DMM_TORCH_MAX_DEVICES - 1));
        return NULL;
    }
    dmm_device *c = atomic_load_explicit(&g_ctx[device], memory_order_acquire);
    return c != NULL ? c : create_slow(device);
}

dmm_device *dmm__torch_device(int device) { return ctx_for(device); }

dmm_governor *dmm__torch_governor(void) {
    pthread_mutex_lock(&g_mu);
    dmm_status s = governor_locked();
    dmm_governor *g = g_gov;
    pthread_mutex_unlock(&g_mu);
    if (s != DMM_OK) record(s);
    return s == DMM_OK ? g : NULL;
}

/* ---- the allocator pair ---- */
static _Atomic(dmm_torch_oom_observer) g_oom_observer;
static _Thread_local bool tl_in_observer; /* this thread runs the observer now */

void dmm_torch_set_oom_observer(dmm_torch_oom_observer fn) {
    atomic_store_explicit(&g_oom_observer, fn, memory_order_release);
}

void *dmm_torch_malloc_nothrow(ssize_t size, int device, void *stream) {
    if (size <= 0) return NULL;
    dmm_device *c = ctx_for(device);
    if (c == NULL) return NULL;
    void *p = NULL;
    dmm_status s = dmm_device_malloc(c, (size_t)size, (dmm_stream)stream, &p);
    if (s != DMM_OK) {
        dmm_torch_oom_observer fn = atomic_load_explicit(&g_oom_observer, memory_order_acquire);
        if (fn != NULL && !tl_in_observer && (s == DMM_ERR_BUDGET || s == DMM_ERR_OUT_OF_MEMORY)) {
            /* the observer may call dmm itself: the refusal's sentence is kept across it; a refusal
             * inside the observer (it allocated) is not observed again */
            char why[2048];
            snprintf(why, sizeof why, "%s", dmm_last_error());
            tl_in_observer = true;
            fn(device, (uint64_t)size);
            tl_in_observer = false;
            (void)dmm_error_set(s, "%s", why);
        }
        record(s);
        return NULL;
    }
    return p;
}

#ifndef DMM_TORCH_CXX_SHIM
void *dmm_torch_malloc(ssize_t size, int device, void *stream) { return dmm_torch_malloc_nothrow(size, device, stream); }
#endif

void dmm_torch_free(void *ptr, ssize_t size, int device, void *stream) {
    (void)size; /* the device knows the block's size */
    if (ptr == NULL) return;
    dmm_device *c = ctx_for(device);
    if (c == NULL) return;
    dmm_status s = dmm_device_free(c, ptr, (dmm_stream)stream);
    if (s != DMM_OK) record(s);
}

void dmm_torch_record_stream(void *ptr, void *stream) {
    dmm_status s = dmm_device_record_stream(ptr, (dmm_stream)stream);
    if (s != DMM_OK) record(s);
}

/* ---- the rest ---- */
size_t dmm_torch_last_error(char *buf, size_t cap) {
    pthread_mutex_lock(&err_mu);
    size_t n = strlen(g_err);
    if (buf != NULL && cap > 0) snprintf(buf, cap, "%s", g_err);
    pthread_mutex_unlock(&err_mu);
    return n;
}

int dmm_torch_last_status(void) {
    pthread_mutex_lock(&err_mu);
    int s = g_status;
    pthread_mutex_unlock(&err_mu);
    return s;
}

#define WITH_CTX(device)                                                                           \
    dmm_device *c = ctx_for(device);                                                                     \
    if (c == NULL) return dmm_torch_last_status()

int dmm_torch_set_limit(int device, uint64_t bytes) {
    if (device < 0) {
        pthread_mutex_lock(&g_mu);
        g_limit_all = bytes;
        memset(g_limit, 0, sizeof g_limit); /* the latest call wins, also for devices not used yet */
        pthread_mutex_unlock(&g_mu);
        for (int i = 0; i < DMM_TORCH_MAX_DEVICES; i++) {
            dmm_device *c = atomic_load_explicit(&g_ctx[i], memory_order_acquire);
            if (c != NULL) {
                int s = record(dmm_device_set_limit(c, bytes));
                if (s != 0) return s;
            }
        }
        return 0;
    }
    if (device >= DMM_TORCH_MAX_DEVICES) return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: device %d", device));
    /* under g_mu, which create_slow holds while it reads g_limit: a context created meanwhile gets the
     * limit either way (from g_limit, or from the call below) */
    pthread_mutex_lock(&g_mu);
    dmm_device *c = atomic_load_explicit(&g_ctx[device], memory_order_acquire);
    if (c == NULL) g_limit[device] = bytes;
    pthread_mutex_unlock(&g_mu);
    return c == NULL ? 0 : record(dmm_device_set_limit(c, bytes));
}

int dmm_torch_stats_json(int device, char *buf, size_t cap, size_t *needed) {
    WITH_CTX(device);
    return record(dmm_device_stats_json(c, buf, cap, needed));
}

int dmm_torch_snapshot_json(int device, char *buf, size_t cap, size_t *needed) {
    WITH_CTX(device);
    return record(dmm_device_snapshot_json(c, buf, cap, needed));
}

int dmm_torch_devices(uint64_t *mask) {
    if (mask == NULL) return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_torch_devices: mask is NULL"));
    uint64_t m = 0;
    for (int i = 0; i < DMM_TORCH_MAX_DEVICES; i++)
        if (atomic_load_explicit(&g_ctx[i], memory_order_acquire) != NULL) m |= (uint64_t)1 << i;
    *mask = m;
    return DMM_OK;
}

int dmm_torch_reset_peaks(int device) {
    WITH_CTX(device);
    return record(dmm_device_reset_peaks(c));
}

int dmm_torch_reset_accumulated(int device) {
    WITH_CTX(device);
    return record(dmm_device_reset_accumulated(c));
}

int dmm_torch_empty_cache(int device, uint64_t *released) {
    WITH_CTX(device);
    return record(dmm_device_empty_cache(c, released));
}

int dmm_torch_warm(int device, uint64_t bytes, void *stream, uint64_t *committed) {
    if (committed != NULL) *committed = 0;
    WITH_CTX(device);
    return record(dmm_pool_warm(dmm_device_pool(c), (dmm_stream)stream, bytes, 0, committed));
}

int dmm_torch_layout(int device, uint64_t *spans3, size_t cap, size_t *count) {
    if (count != NULL) *count = 0;
    if (count == NULL || (spans3 == NULL && cap > 0))
        return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                    "dmm_torch_layout: a count is required, and spans3 when cap is above 0"));
    WITH_CTX(device);
    dmm_pool_span *v = cap > 0 ? calloc(cap, sizeof *v) : NULL;
    if (cap > 0 && v == NULL)
        return record(dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_torch_layout: out of host memory for %zu spans", cap));
    dmm_status s = dmm_pool_layout(dmm_device_pool(c), v, cap, count);
    for (size_t i = 0; s == DMM_OK && v != NULL && i < *count; i++) { /* no array: only the count */
        spans3[3 * i] = v[i].offset;
        spans3[3 * i + 1] = v[i].bytes;
        spans3[3 * i + 2] = v[i].heap;
    }
    free(v);
    return record(s);
}

int dmm_torch_warm_layout(int device, const uint64_t *spans3, size_t count, void *stream, uint64_t *committed) {
    if (committed != NULL) *committed = 0;
    if (spans3 == NULL && count > 0)
        return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_torch_warm_layout: spans3 are required when count "
                                                              "is above 0"));
    WITH_CTX(device);
    dmm_pool_span *v = calloc(count ? count : 1, sizeof *v);
    if (v == NULL)
        return record(dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_torch_warm_layout: out of host memory for %zu spans",
                                    count));
    for (size_t i = 0; i < count; i++) {
        if (spans3[3 * i + 2] > UINT32_MAX) {
            free(v);
            return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                        "dmm_torch_warm_layout: span %zu names heap %llu, which no pool has; pass the "
                                        "layout dmm_torch_layout gave (nothing changed)",
                                        i, (unsigned long long)spans3[3 * i + 2]));
        }
        v[i] = (dmm_pool_span){spans3[3 * i], spans3[3 * i + 1], (uint32_t)spans3[3 * i + 2]};
    }
    dmm_status s = dmm_pool_warm_layout(dmm_device_pool(c), (dmm_stream)stream, v, count, committed);
    free(v);
    return record(s);
}

int dmm_torch_tag_begin(const char *name) { return record(dmm_device_tag_begin(name)); }
int dmm_torch_tag_end(void) { return record(dmm_device_tag_end()); }
int dmm_torch_untagged_begin(void) { return record(dmm_device_untagged_begin()); }
int dmm_torch_tag_default(const char *name) { return record(dmm_device_tag_default(name)); }

int dmm_torch_offload(int device, const char *tag, int mode, void *stream) {
    WITH_CTX(device);
    return record(dmm_device_offload(c, tag, mode, (dmm_stream)stream));
}

int dmm_torch_offload_wait(int device, const char *tag) {
    WITH_CTX(device);
    return record(dmm_device_offload_wait(c, tag));
}

int dmm_torch_restore(int device, const char *tag, void *stream) {
    WITH_CTX(device);
    return record(dmm_device_restore(c, tag, (dmm_stream)stream));
}

int dmm_torch_release_host(int device, const char *tag) {
    WITH_CTX(device);
    return record(dmm_device_release_host(c, tag));
}

int dmm_torch_poll(int device, uint64_t *queued) {
    WITH_CTX(device);
    return record(dmm_device_poll(c, queued));
}

int dmm_torch_graph_reserve(int device, uint64_t bytes, void *stream) {
    WITH_CTX(device);
    return record(dmm_device_graph_reserve(c, bytes, (dmm_stream)stream));
}

int dmm_torch_graph_reserve_pool(int device, uint64_t bytes, uint64_t pool, void *stream) {
    WITH_CTX(device);
    return record(dmm_device_graph_reserve_pool(c, bytes, pool, (dmm_stream)stream));
}

int dmm_torch_graph_release(int device, uint64_t capture_id, void *stream) {
    WITH_CTX(device);
    return record(dmm_device_graph_release(c, capture_id, (dmm_stream)stream));
}

int dmm_torch_graphs_sleep(int device, int mode, void *stream) {
    WITH_CTX(device);
    return record(dmm_device_graphs_sleep(c, mode, (dmm_stream)stream));
}

int dmm_torch_graph_fit(int device, uint64_t capture_id, void *stream) {
    WITH_CTX(device);
    return record(dmm_device_graph_fit(c, capture_id, (dmm_stream)stream));
}

int dmm_torch_graph_share(int device, void *stream, uint64_t pool) {
    WITH_CTX(device);
    return record(dmm_device_graph_share(c, (dmm_stream)stream, pool));
}

int dmm_torch_graphs_wake(int device, void *stream) {
    WITH_CTX(device);
    return record(dmm_device_graphs_wake(c, (dmm_stream)stream));
}

int dmm_torch_capture_id(int device, void *stream, uint64_t *id) {
    if (id == NULL) return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: capture_id: id is NULL"));
    *id = 0;
    if (stream == NULL) return 0; /* the legacy default stream never captures */
    WITH_CTX(device);
    bool capturing = false;
    return record(dmm_device_capture_status(c, (dmm_stream)stream, &capturing, id));
}

int dmm_torch_record_start(int device, const char *path, const char *workload) {
    WITH_CTX(device);
    return record(dmm_device_record_start(c, path, workload));
}

int dmm_torch_record_stop(int device, dmm_device_record_stats *out) {
    WITH_CTX(device);
    return record(dmm_device_record_stop(c, out));
}

int dmm_torch_track_blocks(int device) {
    if (device >= DMM_TORCH_MAX_DEVICES) return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: device %d", device));
    pthread_mutex_lock(&g_mu); /* as set_limit: a context created meanwhile gets it either way */
    if (device < 0) g_track_all = true;
    else g_track[device] = true;
    for (int i = 0; i < DMM_TORCH_MAX_DEVICES; i++) {
        dmm_device *c = atomic_load_explicit(&g_ctx[i], memory_order_acquire);
        if (c != NULL && (device < 0 || i == device)) dmm_device_track_blocks(c);
    }
    pthread_mutex_unlock(&g_mu);
    return 0;
}

int dmm_torch_history(int device, uint64_t max_entries) {
    WITH_CTX(device);
    return record(dmm_device_history(c, max_entries));
}

int dmm_torch_history_context(int device, uint32_t skip, uint32_t events, int native_depth,
                              dmm_torch_context_fn hook) {
    if (native_depth < 0 || native_depth > DMM_TORCH_NATIVE_FRAMES_MAX)
        return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                    "dmm torch: %d native frames per event asked; 0 to %d are kept (0: none)",
                                    native_depth, DMM_TORCH_NATIVE_FRAMES_MAX));
    WITH_CTX(device);
    if (hook == NULL) { /* the device stops calling first; the slot then waits out the calls in flight */
        int s = record(dmm_device_history_context(c, skip, NULL, NULL));
        dmm__torch_context_set(device, NULL, 0, 0);
        return s;
    }
    void *slot = dmm__torch_context_set(device, hook, events, native_depth);
    return record(dmm_device_history_context(c, skip, dmm__torch_context, slot));
}

void dmm_torch_set_capture_check(int on) { /* every device, also those not used yet */
    pthread_mutex_lock(&g_mu);
    g_no_capture_check = on == 0;
    for (int i = 0; i < DMM_TORCH_MAX_DEVICES; i++) {
        dmm_device *c = atomic_load_explicit(&g_ctx[i], memory_order_acquire);
        if (c != NULL) dmm_device_set_capture_check(c, on != 0);
    }
    pthread_mutex_unlock(&g_mu);
}

uint64_t dmm_torch_now_ns(void) { return dmm_device_clock_ns(); }

/* ---- regions of a holder process (dmm hold) ---- */
/* One connection per call: a named region outlives it (only DMM_IPC_PRIVATE ones die with it). */
static int hold_map(int device, dmm_ipc_client *cl, dmm_status s, dmm_export *ex, bool writable, void **ptr,
                    uint64_t *bytes) {
    if (s == DMM_OK) {
        dmm_device *c = ctx_for(device);
        s = c != NULL ? dmm_device_import(c, ex, writable, ptr) : (dmm_status)dmm_torch_last_status();
        if (s == DMM_OK && bytes != NULL) *bytes = ex->bytes;
    }
    dmm_export_close(ex);
    dmm_ipc_disconnect(cl);
    return record(s);
}

int dmm_torch_hold_create(int device, const char *socket, const char *name, uint64_t bytes, uint8_t *token,
                          void **ptr, uint64_t *mapped) {
    if (socket == NULL || name == NULL || token == NULL || ptr == NULL)
        return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: hold_create needs a socket, a name, a "
                                    "16-byte token buffer and ptr"));
    dmm_ipc_client *cl = NULL;
    dmm_status s = dmm_ipc_connect(socket, &cl);
    if (s != DMM_OK) return record(s);
    dmm_export ex;
    dmm_export_init(&ex);
    s = dmm_ipc_create(cl, name, bytes, 0, &ex);
    if (s == DMM_OK) memcpy(token, ex.token, DMM_EXPORT_TOKEN_BYTES);
    return hold_map(device, cl, s, &ex, true, ptr, mapped);
}

int dmm_torch_hold_attach(int device, const char *socket, const char *name, const uint8_t *token, int writable,
                          void **ptr, uint64_t *bytes) {
    if (socket == NULL || name == NULL || token == NULL || ptr == NULL)
        return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: hold_attach needs a socket, a name, the "
                                    "region's 16-byte token and ptr"));
    dmm_ipc_client *cl = NULL;
    dmm_status s = dmm_ipc_connect(socket, &cl);
    if (s != DMM_OK) return record(s);
    dmm_export ex;
    dmm_export_init(&ex);
    s = dmm_ipc_attach(cl, name, token, writable ? DMM_ACCESS_READ_WRITE : DMM_ACCESS_READ, &ex);
    return hold_map(device, cl, s, &ex, writable != 0, ptr, bytes);
}

int dmm_torch_export(int device, const void *ptr, int writable, dmm_export *out, uint64_t *lead) {
    WITH_CTX(device);
    return record(dmm_device_export(c, ptr, writable != 0, out, lead));
}

int dmm_torch_import(int device, const dmm_export *ex, int writable, void **ptr) {
    WITH_CTX(device);
    return record(dmm_device_import(c, ex, writable != 0, ptr));
}

int dmm_torch_unimport(int device, void *ptr) {
    WITH_CTX(device);
    return record(dmm_device_unimport(c, ptr));
}

void dmm_torch_export_close(dmm_export *ex) { dmm_export_close(ex); }

int dmm_torch_hold_detach(int device, void *ptr) {
    WITH_CTX(device);
    return record(dmm_device_unimport(c, ptr));
}

int dmm_torch_hold_drop(const char *socket, const char *name, const uint8_t *token) {
    if (socket == NULL || name == NULL || token == NULL)
        return record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: hold_drop needs a socket, a name and the "
                                    "region's 16-byte token"));
    dmm_ipc_client *cl = NULL;
    dmm_status s = dmm_ipc_connect(socket, &cl);
    if (s == DMM_OK) s = dmm_ipc_drop(cl, name, token);
    dmm_ipc_disconnect(cl);
    return record(s);
}

int dmm_torch_host_copy(int device, const void *ptr, uint64_t bytes, void **host) {
    WITH_CTX(device);
    return record(dmm_device_host_copy(c, ptr, bytes, host));
}

int dmm_torch_stream_wait(int device, void *waiter, void *on) {
    WITH_CTX(device);
    return record(dmm_device_stream_wait(c, (dmm_stream)waiter, (dmm_stream)on));
}

/* ---- the KV arena on this device's front (dmm/kv.h) ---- */
int dmm_torch_kv_create(int device, const dmm_kv_config *cfg, dmm_kv **out) {
    WITH_CTX(device);
    return record(dmm_kv_create(c, cfg, out));
}

int dmm_torch_kv_destroy(dmm_kv *kv) { return record(dmm_kv_destroy(kv)); }

int dmm_torch_kv_open(dmm_kv *kv, const dmm_kv_prefix *prefix, uint64_t tokens, void *stream, dmm_kv_request **out) {
    return record(dmm_kv_open(kv, prefix, tokens, (dmm_stream)stream, out));
}

int dmm_torch_kv_grow(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens) { return record(dmm_kv_grow(kv, r, tokens)); }

/* 0 unless the release FAILED (then its status, the sentence kept). */
static int release_status(dmm_release_outcome o, dmm_release_outcome *out) {
    if (out != NULL) *out = o;
    if (dmm_release_state_of(&o) != DMM_RELEASE_FAILED) return 0;
    return record(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER);
}

int dmm_torch_kv_close(dmm_kv *kv, dmm_kv_request *r, dmm_release_outcome *out) {
    return release_status(dmm_kv_close(kv, r), out);
}

int dmm_torch_kv_share(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens, void *stream, dmm_kv_prefix **out) {
    return record(dmm_kv_share(kv, r, tokens, (dmm_stream)stream, out));
}

int dmm_torch_kv_prefix_release(dmm_kv *kv, dmm_kv_prefix *p, dmm_release_outcome *out) {
    return release_status(dmm_kv_prefix_release(kv, p), out);
}

int dmm_torch_kv_offload(dmm_kv *kv, dmm_kv_request *r, void *stream) {
    return record(dmm_kv_offload(kv, r, (dmm_stream)stream));
}

int dmm_torch_kv_restore(dmm_kv *kv, dmm_kv_request *r, void *stream) {
    return record(dmm_kv_restore(kv, r, (dmm_stream)stream));
}

int dmm_torch_kv_request_get(dmm_kv *kv, const dmm_kv_request *r, dmm_kv_request_info *out) {
    return record(dmm_kv_request_get(kv, r, out));
}

int dmm_torch_kv_stats(dmm_kv *kv, dmm_kv_stats *out) { return record(dmm_kv_stats_get(kv, out)); }

int dmm_torch_kv_refill(dmm_kv *kv, uint64_t *created) { return record(dmm_kv_refill(kv, created)); }
