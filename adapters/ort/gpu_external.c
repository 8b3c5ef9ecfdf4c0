/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/ort/gpu_external.c — the CUDA execution provider's external allocator: three plain C
 * functions (gpu_external_alloc / _free / _empty_cache) whose addresses ONNX Runtime takes as provider
 * options and calls without any context argument.
 *
 * What it owns: the one process-wide dmm_ort_allocator behind them (over a cuda driver the caller
 * passes), published through an atomic pointer: init sets it once (refused while one is set),
 * shutdown clears it when no block is live.
 *
 * The trade-off: without a context argument the entry points cannot tell two sessions apart, so every
 * session of the process that uses them shares one holder; a runtime that wants a holder per session
 * registers a dmm_ort_allocator per session instead (OrtAllocator has a context: its own pointer).
 * free has no stream argument either: memory is freed on the default stream (the pool then reuses it on
 * another stream only after an event recorded there completed); the *_on forms take the stream.
 *
 * Invariants: `current` is NULL or a live allocator; the entry points never abort, exit or print:
 * alloc answers NULL with the sentence kept in the allocator (or in the thread's last error when none
 * is set up).
 */
#include <string.h>

#include "ort_internal.h"

static _Atomic(dmm_ort_allocator *) current = NULL;
static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;

static dmm_ort_allocator *get(void) { return atomic_load_explicit(&current, memory_order_acquire); }

dmm_status dmm_ort_gpu_external_init(dmm_ort_runtime *rt, dmm_driver *cuda, dmm_governor *gov, const dmm_ort_config *cfg) {
    if (cuda == NULL || cuda->device.tier != DMM_TIER_DEVICE)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm ort: gpu_external needs a cuda driver (device memory), "
                                                       "not '%s'", cuda != NULL ? cuda->ops->name : "NULL");
    pthread_mutex_lock(&setup_lock);
    dmm_status s = DMM_OK;
    if (get() != NULL) {
        s = dmm_error_set(DMM_ERR_BUSY, "dmm ort: the gpu_external allocator is set up already; shut it down first");
    } else {
        dmm_ort_allocator *a = NULL;
        s = dmm_ort_allocator_create(rt, cuda, gov, cfg, &a);
        if (s == DMM_OK) atomic_store_explicit(&current, a, memory_order_release);
    }
    pthread_mutex_unlock(&setup_lock);
    return s;
}

dmm_status dmm_ort_gpu_external_shutdown(void) {
    pthread_mutex_lock(&setup_lock);
    dmm_ort_allocator *a = get();
    dmm_status s = DMM_OK;
    if (a != NULL) {
        s = dmm_ort_allocator_destroy(a);
        if (s == DMM_OK) atomic_store_explicit(&current, NULL, memory_order_release);
    }
    pthread_mutex_unlock(&setup_lock);
    return s;
}

dmm_ort_allocator *dmm_ort_gpu_external_allocator(void) { return get(); }

void *dmm_ort_gpu_external_alloc_on(size_t bytes, dmm_stream stream) {
    dmm_ort_allocator *a = get();
    if (a == NULL) {
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                      "dmm ort: gpu_external_alloc of %zu bytes refused: no allocator is set up "
                      "(call dmm_ort_gpu_external_init before creating the session)", bytes);
        return NULL;
    }
    if (stream == NULL) return a->ort.Alloc(&a->ort, bytes);
    return dmm__ort_alloc_native_stream(a, bytes, stream);
}

void *dmm_ort_gpu_external_alloc(size_t bytes) { return dmm_ort_gpu_external_alloc_on(bytes, NULL); }

void dmm_ort_gpu_external_free_on(void *p, dmm_stream stream) {
    dmm_ort_allocator *a = get();
    if (a == NULL || p == NULL) return;
    if (stream == NULL) a->ort.Free(&a->ort, p); /* on the stream it was allocated on */
    else dmm__ort_free_native_stream(a, p, stream);
}

void dmm_ort_gpu_external_free(void *p) { dmm_ort_gpu_external_free_on(p, NULL); }

void dmm_ort_gpu_external_empty_cache(void) {
    dmm_ort_allocator *a = get();
    if (a == NULL) return;
    (void)dmm_ort_allocator_trim(a, NULL); /* both devices' empty_cache */
    dmm_clear_error();
}
