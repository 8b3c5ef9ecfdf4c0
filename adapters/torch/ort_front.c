/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/ort_front.c — ONNX Runtime on the governor of libdmm_torch.so: the dmm_torch_ort_* entry
 * points (dmm_torch.h; python/dmm/ort.py wraps them).
 *
 * Why here. A process that runs torch (or CuPy) and ONNX Runtime sessions side by side wants one budget
 * for all of them; libdmm_torch.so carries its own copy of dmm (one self-contained library), so
 * libdmm_ort.so beside it would bring a second governor that knows nothing of the first. These entry
 * points build the ONNX Runtime adapter (adapters/ort, linked in, its dmm_ort_* symbols kept private)
 * over the library's own governor: CPU memory of ONNX Runtime's sessions is charged to that governor's
 * host tier, CUDA memory to the tier of the device torch's tensors are charged to.
 *
 * What it owns: one host driver and one cuda driver per device, made on the first allocator over them
 * and never destroyed (allocators may live until the process ends, as torch's tensors do). Runtimes
 * and allocators are the caller's: each is destroyed by its own call.
 *
 * Without the adapter (a fuzz build leaves adapters/ort out), opening a runtime and creating, using or
 * registering an allocator answer DMM_ERR_UNSUPPORTED with a sentence; close, api and a destroy of NULL
 * do nothing, and the governor's two calls work as with it.
 */
#include <pthread.h>
#include <string.h>

#ifdef DMM_TORCH_WITH_ORT
#include "dmm_ort.h"
#endif
#include "dmm_torch.h"
#include "front.h"

#ifdef DMM_TORCH_WITH_ORT
static pthread_mutex_t g_drv_mu = PTHREAD_MUTEX_INITIALIZER;
static dmm_driver *g_host;
static dmm_driver *g_cuda[DMM_TORCH_MAX_DEVICES];

/* The driver for `device` (-1: the host), made once. */
static dmm_status driver_for(int device, dmm_driver **out) {
    if (device < -1 || device >= DMM_TORCH_MAX_DEVICES)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm torch ort: device %d is out of range (-1 for host memory, or a CUDA ordinal 0..%d)",
                             device, DMM_TORCH_MAX_DEVICES - 1);
    pthread_mutex_lock(&g_drv_mu);
    dmm_driver **slot = device < 0 ? &g_host : &g_cuda[device];
    dmm_status s = DMM_OK;
    if (*slot == NULL) s = device < 0 ? dmm_host_driver_create(NULL, slot) : dmm_cuda_driver_create(device, slot);
    *out = *slot;
    pthread_mutex_unlock(&g_drv_mu);
    return s;
}

int dmm_torch_ort_open(const char *path, dmm_ort_runtime **out) {
    if (out == NULL) return dmm__torch_record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch ort: out is NULL"));
    *out = NULL;
    return dmm__torch_record(dmm_ort_runtime_open(path, out));
}

void dmm_torch_ort_close(dmm_ort_runtime *rt) { dmm_ort_runtime_close(rt); }

const void *dmm_torch_ort_api(const dmm_ort_runtime *rt) { return rt != NULL ? dmm_ort_runtime_api(rt) : NULL; }

int dmm_torch_ort_use_dmm(dmm_ort_runtime *rt, void *session_options) {
    if (rt == NULL || session_options == NULL)
        return dmm__torch_record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                               "dmm torch ort: use_dmm needs a runtime and session options"));
    return dmm__torch_record(dmm_ort_session_options_use_dmm(rt, session_options));
}

int dmm_torch_ort_allocator_create(dmm_ort_runtime *rt, int device, const struct dmm_ort_config *cfg,
                                   dmm_ort_allocator **out) {
    if (out == NULL || rt == NULL)
        return dmm__torch_record(
            dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch ort: allocator_create needs a runtime and out"));
    *out = NULL;
    dmm_governor *g = dmm__torch_governor();
    if (g == NULL) return dmm_torch_last_status();
    /* CUDA memory goes under torch's budget of the device: its front first (the tier then has the limit
     * dmm_torch_set_limit gave, and later calls change it for both) */
    if (device >= 0 && device < DMM_TORCH_MAX_DEVICES && dmm__torch_device(device) == NULL)
        return dmm_torch_last_status();
    dmm_driver *drv = NULL;
    dmm_status s = driver_for(device, &drv);
    if (s == DMM_OK) s = dmm_ort_allocator_create(rt, drv, g, cfg, out);
    return dmm__torch_record(s);
}

int dmm_torch_ort_allocator_destroy(dmm_ort_allocator *a) { return dmm__torch_record(dmm_ort_allocator_destroy(a)); }

int dmm_torch_ort_register(dmm_ort_allocator *a, void *env) {
    if (a == NULL || env == NULL)
        return dmm__torch_record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                               "dmm torch ort: register needs an allocator and an OrtEnv"));
    return dmm__torch_record(dmm_ort_allocator_register(a, env));
}

int dmm_torch_ort_unregister(dmm_ort_allocator *a, void *env) {
    if (a == NULL || env == NULL)
        return dmm__torch_record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                               "dmm torch ort: unregister needs an allocator and an OrtEnv"));
    return dmm__torch_record(dmm_ort_allocator_unregister(a, env));
}

int dmm_torch_ort_usage(dmm_ort_allocator *a, uint64_t *in_use, uint64_t *max_in_use, uint64_t *refusals) {
    if (a == NULL) return dmm__torch_record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch ort: no allocator"));
    dmm_ort_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    dmm_status s = dmm_ort_allocator_stats(a, &st);
    if (s == DMM_OK) {
        if (in_use != NULL) *in_use = st.in_use;
        if (max_in_use != NULL) *max_in_use = st.max_in_use;
        if (refusals != NULL) *refusals = st.refusals;
    }
    return dmm__torch_record(s);
}
#else
static int no_ort(void) {
    return dmm__torch_record(dmm_error_set(DMM_ERR_UNSUPPORTED,
                                           "dmm torch ort: this libdmm_torch.so was built without the ONNX Runtime "
                                           "adapter (adapters/ort, which a fuzz build leaves out); use a build "
                                           "without DMM_BUILD_FUZZ"));
}
int dmm_torch_ort_open(const char *path, dmm_ort_runtime **out) {
    (void)path;
    if (out != NULL) *out = NULL;
    return no_ort();
}
void dmm_torch_ort_close(dmm_ort_runtime *rt) { (void)rt; }
const void *dmm_torch_ort_api(const dmm_ort_runtime *rt) {
    (void)rt;
    return NULL;
}
int dmm_torch_ort_use_dmm(dmm_ort_runtime *rt, void *session_options) {
    (void)rt, (void)session_options;
    return no_ort();
}
int dmm_torch_ort_allocator_create(dmm_ort_runtime *rt, int device, const struct dmm_ort_config *cfg,
                                   dmm_ort_allocator **out) {
    (void)rt, (void)device, (void)cfg;
    if (out != NULL) *out = NULL;
    return no_ort();
}
int dmm_torch_ort_allocator_destroy(dmm_ort_allocator *a) { return a == NULL ? 0 : no_ort(); }
int dmm_torch_ort_register(dmm_ort_allocator *a, void *env) {
    (void)a, (void)env;
    return no_ort();
}
int dmm_torch_ort_unregister(dmm_ort_allocator *a, void *env) {
    (void)a, (void)env;
    return no_ort();
}
int dmm_torch_ort_usage(dmm_ort_allocator *a, uint64_t *in_use, uint64_t *max_in_use, uint64_t *refusals) {
    (void)a, (void)in_use, (void)max_in_use, (void)refusals;
    return no_ort();
}
#endif

int dmm_torch_set_host_limit(uint64_t bytes) {
    dmm_governor *g = dmm__torch_governor();
    if (g == NULL) return dmm_torch_last_status();
    dmm_device_id host = {DMM_TIER_HOST, 0};
    return dmm__torch_record(dmm_governor_set_limit(g, host, DMM_AXIS_OWNED, bytes ? bytes : DMM_UNLIMITED));
}

int dmm_torch_tier_usage(int device, uint64_t *used, uint64_t *peak, uint64_t *limit) {
    if (device < -1 || device >= DMM_TORCH_MAX_DEVICES)
        return dmm__torch_record(dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                               "dmm torch: device %d is out of range (-1 for the host tier, or a "
                                               "CUDA ordinal 0..%d)", device, DMM_TORCH_MAX_DEVICES - 1));
    dmm_governor *g = dmm__torch_governor();
    if (g == NULL) return dmm_torch_last_status();
    dmm_device_id id = {device < 0 ? DMM_TIER_HOST : DMM_TIER_DEVICE, device < 0 ? 0 : device};
    dmm_tier_usage u;
    memset(&u, 0, sizeof u);
    u.size = sizeof u;
    dmm_status s = dmm_governor_tier_usage(g, id, &u);
    if (s == DMM_OK) {
        if (used != NULL) *used = u.used[DMM_AXIS_OWNED];
        if (peak != NULL) *peak = u.peak[DMM_AXIS_OWNED];
        if (limit != NULL) *limit = u.limit[DMM_AXIS_OWNED];
    }
    return dmm__torch_record(s);
}
