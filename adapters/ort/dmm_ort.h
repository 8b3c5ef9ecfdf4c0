/* SPDX-License-Identifier: Apache-2.0 */
/* dmm_ort.h — ONNX Runtime on dmm (DESIGN §4.13; docs/ort.md): an OrtAllocator over dmm devices
 * (dmm/device.h), charged to a dmm governor, for the sessions of a runtime that loads ONNX Runtime itself.
 *
 * Three objects:
 *   - dmm_ort_runtime: libonnxruntime.so.1 opened at run time (dlopen, OrtGetApiBase, the newest API
 *     version the library grants up to the one dmm knows); the adapter calls only the OrtApi slots it
 *     declares itself (adapters/ort/dmm_ort_abi.h), each only when the granted version has it. No link-time
 *     dependency on ONNX Runtime, no ONNX Runtime header needed;
 *   - dmm_ort_allocator: one OrtAllocator (the struct ONNX Runtime calls) over two dmm devices on one
 *     driver (host for CPU memory, cuda for device memory), each with its own pool: `Reserve` (what a
 *     session allocates while it is created: initializers) from one charged to the governor as
 *     DMM_ROLE_WEIGHTS, `Alloc` / `AllocOnStream` (what a Run allocates) from one charged as
 *     DMM_ROLE_ACTIVATION, both under one governor holder (one per allocator: register one allocator per
 *     session, or share one). The holder's reclaim callback trims both pools, so another holder's
 *     shortage takes this one's cached memory first; a request of its own that falls short climbs the
 *     device's ladder (its cache, then that reclaim, then one retry). Fields are filled up to the newest
 *     version the loaded runtime knows (`version` says which), so that it calls GetStats, AllocOnStream
 *     and Shrink where it has them;
 *   - the process-wide device allocator behind ONNX Runtime's CUDA provider options gpu_external_alloc /
 *     gpu_external_free / gpu_external_empty_cache (plain function addresses without a context
 *     argument: dmm_ort_gpu_external_init sets up the one allocator they use).
 *
 * Answers to ONNX Runtime (which gets no dmm_status): a request dmm refuses (the governor's budget, the
 * driver's memory, a size too large) is, by the OrtAllocator contract, NULL. ONNX Runtime 1.30 does not
 * check that NULL where a Run allocates a tensor (its kernels write to address 0: measured), so by default
 * the entry points ONNX Runtime calls throw a C++ exception instead (refusal_shim.cc), which ONNX Runtime
 * turns into the Run's or the session creation's error status, with dmm's sentence as its message; the
 * config's null_on_refusal = 1 gives the plain NULL (for callers from C). Either way dmm's sentence is kept (dmm_ort_allocator_last_error, per allocator,
 * since ONNX Runtime may call from its own threads) and logged (the config's log callback, and dmm's
 * process-wide one, at DMM_LOG_WARN). Alloc/Reserve of 0 bytes is NULL with nothing changed and no
 * error (ONNX Runtime asks for no bytes only for empty tensors and never dereferences them; a block
 * for nothing would be charged and leaked by callers that skip Free(NULL)). Free(NULL) does nothing.
 * Free of a pointer that is not a live block of this allocator (a double free, a foreign pointer) changes
 * nothing: the devices refuse it, the sentence is kept and logged, and it is counted (bad_frees).
 *
 * Thread contract: a runtime and an allocator are thread-safe (ONNX Runtime calls from many threads);
 * create, register and destroy are one owner's.
 */
#ifndef DMM_ORT_H
#define DMM_ORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/driver.h"
#include "dmm/governor.h"
#include "dmm/pool.h"
#include "dmm/status.h"
#include "dmm_ort_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ONNX Runtime's own objects, by their tags (compatible with onnxruntime_c_api.h where a caller has it). */
struct OrtEnv;
struct OrtSessionOptions;
struct OrtAllocator;

typedef struct dmm_ort_runtime dmm_ort_runtime;
typedef struct dmm_ort_allocator dmm_ort_allocator;

/* The environment variable naming the library when dmm_ort_runtime_open gets path = NULL. */
#define DMM_ORT_LIB_ENV "DMM_ORT_LIB"

/* Opens ONNX Runtime: `path` (NULL: $DMM_ORT_LIB, else "libonnxruntime.so.1" by the loader's search).
 * DMM_ERR_UNSUPPORTED with a sentence naming the path, dlerror() and the way out (set DMM_ORT_LIB or run
 * scripts/ort.sh) when it cannot be opened or lacks OrtGetApiBase; DMM_ERR_VERSION_MISMATCH when it grants
 * no API version from 9 to the one dmm knows (30), or lacks a slot the adapter needs at the version it
 * granted. Nothing is left open on failure. */
DMM_API dmm_status dmm_ort_runtime_open(const char *path, dmm_ort_runtime **out);
/* Frees the runtime object; the library itself stays loaded (ONNX Runtime is not made to be unloaded: its
 * process-wide state outlives every OrtEnv). NULL is ignored. */
DMM_API void dmm_ort_runtime_close(dmm_ort_runtime *rt);
/* The API version granted (e.g. 30) and the library's version string (e.g. "1.30.0"). */
DMM_API uint32_t dmm_ort_runtime_api_version(const dmm_ort_runtime *rt);
DMM_API const char *dmm_ort_runtime_version(const dmm_ort_runtime *rt);
/* The OrtApi table (const OrtApi *) for a caller that drives ONNX Runtime itself. */
DMM_API const void *dmm_ort_runtime_api(const dmm_ort_runtime *rt);
/* The same, as the slots dmm resolved by name (dmm_ort_abi.h): for a caller written against dmm's
 * declaration of the ABI instead of ONNX Runtime's headers (the dmm tool, the benchmarks). */
DMM_API const dmm_ort_calls *dmm_ort_runtime_calls(const dmm_ort_runtime *rt);

/* Adds to `options` what makes a session use the allocators registered on its environment:
 * session.use_env_allocators = 1, and session.use_device_allocator_for_initializers = 1 (initializers
 * then come from the allocator's Reserve, charged as weights, instead of a buffer ONNX Runtime plans
 * itself). ONNX Runtime's sentence in DMM_ERR_INVALID_ARGUMENT when it refuses a key. */
DMM_API dmm_status dmm_ort_session_options_use_dmm(dmm_ort_runtime *rt, struct OrtSessionOptions *options);

typedef struct dmm_ort_config {
    uint32_t size;        /* sizeof(dmm_ort_config) */
    const char *name;     /* the governor holder's name (copied); NULL = "ort" */
    int32_t priority;     /* the holder's priority in the reclaim ladder (lower is asked first) */
    uint64_t va_bytes;    /* address space of each of the two pools; 0 = 8 GiB; every request larger than
                             it is refused (NULL, "more than the pool's address space") */
    int32_t allocator_type; /* the OrtAllocatorType the memory info says: 0 = device allocator (the one
                             ONNX Runtime accepts for a registered allocator); 1 (arena) is refused here
                             with a sentence, as ONNX Runtime would refuse it at RegisterAllocator */
    dmm_log_fn log;       /* optional: every refusal's sentence, at DMM_LOG_WARN */
    void *log_user;
    uint32_t null_on_refusal; /* 0 (default): Alloc / AllocOnStream / Reserve answer a refusal with a C++
                             exception carrying dmm's sentence, which ONNX Runtime turns into the Run's
                             error (ONNX Runtime 1.30 dereferences a NULL in a Run: see "Answers" above);
                             1: the plain OrtAllocator contract, NULL (for callers from C). Where libdmm_ort
                             was built without a C++ compiler, always NULL */
} dmm_ort_config;

/* Creates an allocator over `driver` (not owned; host: CPU memory; cuda: device memory of its ordinal,
 * named "Cuda" to ONNX Runtime) charged to `gov` (not owned) under a new holder. Both outlive it. Each
 * of its two devices reserves 4 × va_bytes of address space (the device's default: its pool, and room
 * for tag and graph segments).
 * DMM_ERR_INVALID_ARGUMENT for a bad config (arena type, va_bytes not a multiple of the granularity),
 * DMM_ERR_UNSUPPORTED for a driver without virtual memory management. */
DMM_API dmm_status dmm_ort_allocator_create(dmm_ort_runtime *rt, dmm_driver *driver, dmm_governor *gov,
                                            const dmm_ort_config *cfg, dmm_ort_allocator **out);
/* DMM_ERR_BUSY (nothing changed) while blocks are live: release every session that used it first, and
 * unregister it from every environment. Otherwise frees the devices, their memory, the holder and its
 * leases, and the memory info. NULL is ignored (DMM_OK). */
DMM_API dmm_status dmm_ort_allocator_destroy(dmm_ort_allocator *a);
/* The OrtAllocator to hand to ONNX Runtime (valid as long as `a`). */
DMM_API struct OrtAllocator *dmm_ort_allocator_ort(dmm_ort_allocator *a);
/* RegisterAllocator / UnregisterAllocator on `env` (ONNX Runtime's sentence on failure). A registered
 * allocator is never freed by ONNX Runtime; unregister it before destroying it. */
DMM_API dmm_status dmm_ort_allocator_register(dmm_ort_allocator *a, struct OrtEnv *env);
DMM_API dmm_status dmm_ort_allocator_unregister(dmm_ort_allocator *a, struct OrtEnv *env);

/* The sentence of the last request this allocator refused (from any thread; "" if none), copied into
 * buf (NUL-terminated, cut to cap). Returns the status of that refusal (DMM_OK if none). */
DMM_API dmm_status dmm_ort_allocator_last_error(dmm_ort_allocator *a, char *buf, size_t cap);

typedef struct dmm_ort_stats {
    uint32_t size;           /* sizeof(dmm_ort_stats), set by the caller */
    dmm_pool_stats weights;  /* the Reserve pool (its size field is set by the adapter) */
    dmm_pool_stats run;      /* the Alloc / AllocOnStream pool */
    uint64_t reserves;       /* Reserve calls served */
    uint64_t allocs;         /* Alloc and AllocOnStream calls served */
    uint64_t frees;          /* Free calls that freed a block */
    uint64_t refusals;       /* Alloc, AllocOnStream and Reserve calls answered NULL for a failure */
    uint64_t bad_frees;      /* Free calls refused (not a live block: double free, foreign pointer) */
    uint64_t zero_requests;  /* requests of 0 bytes (answered NULL) */
    uint64_t in_use;         /* bytes of live blocks, both pools (rounded) */
    uint64_t max_in_use;     /* the peak of in_use */
    uint64_t total_allocated; /* bytes of every block handed out (rounded), counted up */
    uint64_t max_alloc;      /* the largest request served */
    uint64_t shrinks;        /* Shrink / dmm_ort_allocator_trim calls */
} dmm_ort_stats;

DMM_API dmm_status dmm_ort_allocator_stats(dmm_ort_allocator *a, dmm_ort_stats *out);
/* Empties both devices' caches (dmm_device_empty_cache; what Shrink does): *released (may be NULL) =
 * bytes decommitted or queued to be. */
DMM_API dmm_status dmm_ort_allocator_trim(dmm_ort_allocator *a, uint64_t *released);

/* ---- the CUDA provider's external allocator (process-wide) ---- */
/* Sets up the one allocator the gpu_external_* functions use: over `cuda` (not owned, a cuda driver),
 * charged to `gov` (not owned). DMM_ERR_BUSY when one is set up already. */
DMM_API dmm_status dmm_ort_gpu_external_init(dmm_ort_runtime *rt, dmm_driver *cuda, dmm_governor *gov,
                                             const dmm_ort_config *cfg);
/* Tears it down: DMM_ERR_BUSY (nothing changed) while blocks are live. DMM_OK when none is set up. */
DMM_API dmm_status dmm_ort_gpu_external_shutdown(void);
/* The allocator behind them (NULL when none is set up), for its stats and last error. */
DMM_API dmm_ort_allocator *dmm_ort_gpu_external_allocator(void);
/* The three entry points, by the signatures the CUDA provider's options take (pass their addresses as
 * "gpu_external_alloc", "gpu_external_free", "gpu_external_empty_cache"). alloc answers NULL when none is
 * set up or dmm refuses (the sentence: dmm_ort_allocator_last_error of dmm_ort_gpu_external_allocator). */
DMM_API void *dmm_ort_gpu_external_alloc(size_t bytes);
DMM_API void dmm_ort_gpu_external_free(void *p);
DMM_API void dmm_ort_gpu_external_empty_cache(void);
/* The stream-ordered form, for a caller that knows its CUDA stream: free waits for `stream`'s work. */
DMM_API void *dmm_ort_gpu_external_alloc_on(size_t bytes, dmm_stream stream);
DMM_API void dmm_ort_gpu_external_free_on(void *p, dmm_stream stream);

#ifdef __cplusplus
}
#endif
#endif /* DMM_ORT_H */
