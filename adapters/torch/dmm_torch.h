/* SPDX-License-Identifier: Apache-2.0 */
/* dmm_torch.h — the C interface of libdmm_torch.so: dmm behind torch.cuda.memory.CUDAPluggableAllocator.
 *
 * torch calls dmm_torch_malloc / dmm_torch_free (the signatures CUDAPluggableAllocator expects; a
 * cudaStream_t is passed as a pointer). Everything else is for the Python package python/dmm (ctypes)
 * or any other host: stats, peaks, empty_cache, a budget, tags with offload/restore, and the memory
 * CUDA graph captures are served from. docs/torch.md explains the whole thing.
 *
 * Per device, created on first use: the CUDA driver → an arena (one VA reservation) → a pool, a lease
 * with a process-wide governor (the budget), and a deferred-release queue for event-gated decommits.
 *
 * Statuses are dmm_status codes (0 = OK). A failure's sentence is kept process-wide: read it with
 * dmm_torch_last_error (torch gives an allocator no way to return one).
 *
 * Thread contract: thread-safe. Don't call anything but malloc/free while a stream captures a CUDA
 * graph (stats and polls ask events, which would invalidate a capture in global mode).
 */
#ifndef DMM_TORCH_H
#define DMM_TORCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dmm/device.h"
#include "dmm/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DMM_TORCH_API __attribute__((visibility("default")))

/* The allocator pair. malloc of 0 bytes returns NULL (as torch's own allocator does). On failure,
 * the C++ build throws std::runtime_error with the sentence (torch turns it into a Python
 * RuntimeError), unless DMM_TORCH_OOM=null is set; the C-only build returns NULL. */
DMM_TORCH_API void *dmm_torch_malloc(ssize_t size, int device, void *stream);
DMM_TORCH_API void dmm_torch_free(void *ptr, ssize_t size, int device, void *stream);
/* torch's record_stream: work queued on `stream` may use the block at `ptr` until it is freed; dmm
 * hands the block out again only after that work (an event on `stream`). enable() installs it as the
 * pluggable allocator's record_stream function. A failure (host memory) is kept in last_error. */
DMM_TORCH_API void dmm_torch_record_stream(void *ptr, void *stream);
/* torch's out-of-memory observer (torch._C._cuda_attach_out_of_memory_observer): called on the
 * allocating thread, after a malloc the budget or the device refused and before the refusal is raised,
 * with the device and the bytes asked. NULL: none. The refusal's sentence is kept across the call. */
typedef void (*dmm_torch_oom_observer)(int device, uint64_t bytes);
DMM_TORCH_API void dmm_torch_set_oom_observer(dmm_torch_oom_observer fn);
/* malloc that never throws: NULL on failure, with the sentence in dmm_torch_last_error. */
DMM_TORCH_API void *dmm_torch_malloc_nothrow(ssize_t size, int device, void *stream);

/* The last failure's sentence (process-wide), copied into buf (NUL-terminated when cap > 0); returns
 * its length. "" when nothing failed. */
DMM_TORCH_API size_t dmm_torch_last_error(char *buf, size_t cap);
DMM_TORCH_API int dmm_torch_last_status(void);

/* Budget of the device's physical memory (owned bytes, pool + tags + graphs + handle cache); 0 =
 * unlimited. device < 0: every device, also those not used yet. */
DMM_TORCH_API int dmm_torch_set_limit(int device, uint64_t bytes);

/* Stats as one JSON object (keys: docs/torch.md); the snapshot adds every tagged block. *needed gets
 * the length without the NUL; a too-small buffer gives 1 (INVALID_ARGUMENT) and the length needed. */
DMM_TORCH_API int dmm_torch_stats_json(int device, char *buf, size_t cap, size_t *needed);
DMM_TORCH_API int dmm_torch_snapshot_json(int device, char *buf, size_t cap, size_t *needed);
DMM_TORCH_API int dmm_torch_reset_peaks(int device);
/* *mask = the devices dmm serves (bit i: device i has a context, created by its first allocation). */
DMM_TORCH_API int dmm_torch_devices(uint64_t *mask);
/* torch's reset_accumulated_memory_stats: totals (allocated, freed) and num_ooms / num_alloc_retries
 * start again from 0; current values and peaks stay. */
DMM_TORCH_API int dmm_torch_reset_accumulated(int device);
/* Gives back every cached chunk, empty tag segment and idle graph segment (behind events); memory
 * reserved for a capture that has not begun stays (torch.cuda.graph empties the cache itself). */
DMM_TORCH_API int dmm_torch_empty_cache(int device, uint64_t *released);
/* Warm start (dmm_pool_warm): commits memory for `stream` until the device's pool holds `bytes` (e.g. the
 * last run's physical peak), at once and in handles of up to 1 GiB, so that the first step does not grow
 * in thousands of small handles. *committed (may be NULL) = bytes committed now. */
DMM_TORCH_API int dmm_torch_warm(int device, uint64_t bytes, void *stream, uint64_t *committed);
/* Warm layout (dmm_pool_layout, dmm_pool_warm_layout): the handles the device's pool created for its
 * growths as (offset, bytes, heap) triples, flat in `spans3` (3 × cap numbers; *count = the spans;
 * NULL: only the count; too small an array: an error, nothing written), and a later run's commit of
 * such a layout ahead, each handle at its place, for the growths of `stream` to take: the first step
 * then makes no driver call for them, at the first run's peak. *committed (may be NULL) = bytes
 * committed ahead now. */
DMM_TORCH_API int dmm_torch_layout(int device, uint64_t *spans3, size_t cap, size_t *count);
DMM_TORCH_API int dmm_torch_warm_layout(int device, const uint64_t *spans3, size_t count, void *stream,
                                        uint64_t *committed);

/* Tag scopes of the calling thread: allocations in between go to the tag's segments (an untagged scope:
 * to the pool); each begin is ended by dmm_torch_tag_end. The default tag (NULL: none) holds every
 * allocation made outside all scopes, on every thread (dmm_device_tag_default). */
DMM_TORCH_API int dmm_torch_tag_begin(const char *name);
DMM_TORCH_API int dmm_torch_untagged_begin(void);
DMM_TORCH_API int dmm_torch_tag_end(void);
DMM_TORCH_API int dmm_torch_tag_default(const char *name);
/* mode 0 = copy to pinned host memory, 1 = discard. Returns at once; the decommits wait for an
 * event recorded on `stream` after the copies (never a device synchronize). */
DMM_TORCH_API int dmm_torch_offload(int device, const char *tag, int mode, void *stream);
/* Waits on the offload's own event (not the device), then runs its decommits. */
DMM_TORCH_API int dmm_torch_offload_wait(int device, const char *tag);
/* Recommits and copies back on `stream`, at the same addresses. */
DMM_TORCH_API int dmm_torch_restore(int device, const char *tag, void *stream);
/* Frees the pinned copies of a resident tag. */
DMM_TORCH_API int dmm_torch_release_host(int device, const char *tag);
/* Runs decommits and releases whose events completed; *queued = those still waiting. */
DMM_TORCH_API int dmm_torch_poll(int device, uint64_t *queued);

/* Graph memory: make sure an idle segment of `bytes` is mapped for the next capture (not during one). */
DMM_TORCH_API int dmm_torch_graph_reserve(int device, uint64_t bytes, void *stream);
/* The same for the next capture of shared pool `pool` (dmm_device_graph_reserve_pool). */
DMM_TORCH_API int dmm_torch_graph_reserve_pool(int device, uint64_t bytes, uint64_t pool, void *stream);
/* The graph of capture `capture_id` is gone; its memory is reusable behind an event on `stream`. */
DMM_TORCH_API int dmm_torch_graph_release(int device, uint64_t capture_id, void *stream);
/* Graph memory asleep (mode 0: copied to pinned host memory first, 1: discarded) and awake again at the
 * same addresses, each waited for, ordered on `stream` (dmm_device_graphs_sleep / _wake). */
DMM_TORCH_API int dmm_torch_graphs_sleep(int device, int mode, void *stream);
/* After capture `capture_id`: its graph segments give back what its blocks never reached. */
DMM_TORCH_API int dmm_torch_graph_fit(int device, uint64_t capture_id, void *stream);
/* Inside a capture on `stream`, before it allocates: it joins shared graph pool `pool` (≠ 0). */
DMM_TORCH_API int dmm_torch_graph_share(int device, void *stream, uint64_t pool);
DMM_TORCH_API int dmm_torch_graphs_wake(int device, void *stream);
/* The id of the capture `stream` of `device` is in (0 when it is not capturing; the NULL stream never
 * captures). Callable inside a capture. */
DMM_TORCH_API int dmm_torch_capture_id(int device, void *stream, uint64_t *id);
/* Whether malloc asks the capture status of non-default streams (default 1). */
DMM_TORCH_API void dmm_torch_set_capture_check(int on);

/* Recording: a dmm trace (`# dmm-trace v1`, gzip; docs/trace-format.md) of every allocation and free
 * this device's allocator serves between start and stop, for `dmm replay`. Sizes are the blocks'
 * rounded sizes (multiples of 512 bytes), streams are numbered in order of first use (the default
 * stream is 0), times are microseconds since the first event. start opens `path` at once: a path that
 * cannot be written fails there (INVALID_ARGUMENT, the sentence names it); a second start while one
 * records is BUSY. Frees of blocks allocated before start are not in the trace (counted). Memory:
 * two 1 MiB text buffers and one entry per live recorded block; zlib compresses a full buffer with
 * only the file's lock held. A failure while recording (a write, host memory) never reaches malloc
 * or free: stop returns it, with the counts so far. A process that exits while recording leaves a
 * truncated file (the reader says so): stop first. */
typedef dmm_device_record_stats dmm_torch_record_stats; /* dmm/device.h */
DMM_TORCH_API int dmm_torch_record_start(int device, const char *path, const char *workload);
DMM_TORCH_API int dmm_torch_record_stop(int device, dmm_torch_record_stats *out);

/* Block tracking, for snapshots that lay out the pool's blocks (pool_blocks; PyTorch's layout): from
 * now on every pool block's address, sizes and stream are kept, at 35-75 ns more per malloc/free pair;
 * off until asked for, and never turned off again. device < 0: every device, also those not used yet
 * (call it before the first allocation to have every block: one live before is counted untracked). */
DMM_TORCH_API int dmm_torch_track_blocks(int device);
/* The pool's recent events for the snapshot's "history" (PyTorch's device_traces): from now on the
 * last `max_entries` blocks handed out and freed and ranges mapped and unmapped (0 = off; an earlier
 * history is dropped). At most 2^26 entries (40 bytes each, allocated at once). Turns block tracking
 * on for the device. */
DMM_TORCH_API int dmm_torch_history(int device, uint64_t max_entries);
/* Who allocated each block (adapters/torch/frames.c; python/dmm/_stacks.py): while `hook` is set, every
 * pool block this device hands out (and frees) with block tracking on calls hook(event, native, n) for
 * the kinds in `events` (bits 1 << DMM_DEVICE_EVENT_ALLOC / _FREE), on the allocating thread, with no
 * lock of dmm held (native: the thread's n return addresses, innermost first, n ≤ native_depth, when
 * native_depth > 0; not called once the process's Python is finalized), and keeps the number it returns
 * with the block and the event (the snapshot's last value; 0 = none: a free then shows its
 * allocation's). One hook per device. `skip`: bits 1 << DMM_DEVICE_EVENT_* of the history's kinds not
 * kept. native_depth 0 … DMM_TORCH_NATIVE_FRAMES_MAX, else INVALID_ARGUMENT. hook NULL: none, and the call
 * returns once no call into a hook is in flight (call it without locks a hook may wait for: through
 * ctypes, the GIL is released). */
#define DMM_TORCH_NATIVE_FRAMES_MAX 64
typedef uint32_t (*dmm_torch_context_fn)(int event, void *const *native, int n);
DMM_TORCH_API int dmm_torch_history_context(int device, uint32_t skip, uint32_t events, int native_depth,
                                            dmm_torch_context_fn hook);
/* Names a native frame: the symbol (C++ names demangled; "" when the object exports none), the object
 * file and the offset from the symbol (from the object's base when no symbol). -1 when nothing is
 * known of `addr` (or a buffer is missing). */
DMM_TORCH_API int dmm_torch_native_symbol(const void *addr, char *name, size_t name_cap, char *object,
                                          size_t object_cap, uint64_t *offset);

/* Regions of a holder process (`dmm hold --socket PATH --cuda N`, docs/ipc.md), mapped into this device's
 * arena: the memory stays on the device when this process exits or crashes, and another process
 * attaches it by name and token in milliseconds (dmm.torch.hold_create / attach / drop).
 * create: a new named region of `bytes` (rounded up to the granule), mapped read-write at *ptr
 * (*mapped = its size); token (16 bytes) receives its token: keep it, attach and drop need it.
 * attach: an existing region, read-only unless `writable` (*bytes = its size). detach: unmaps this
 * process's mapping at ptr (the holder keeps the region). drop: the holder lets the region go (the
 * memory leaves once no process maps it). One connection per call. Imports charge this process's
 * MAPPED bytes only: the holder owns the memory. */
DMM_TORCH_API int dmm_torch_hold_create(int device, const char *socket, const char *name, uint64_t bytes,
                                        uint8_t *token, void **ptr, uint64_t *mapped);
DMM_TORCH_API int dmm_torch_hold_attach(int device, const char *socket, const char *name, const uint8_t *token,
                                        int writable, void **ptr, uint64_t *bytes);
DMM_TORCH_API int dmm_torch_hold_detach(int device, void *ptr);
DMM_TORCH_API int dmm_torch_hold_drop(const char *socket, const char *name, const uint8_t *token);

/* The KV arena (dmm/kv.h, docs/kv.md) on this device's front: its memory is charged to the same
 * governor, under the same budget, as torch's tensors. Each call is the dmm_kv_* call of the same
 * name, with a cudaStream_t passed as a pointer; python/dmm/kv.py wraps them. close and
 * prefix_release fill *out (may be NULL) with the release's outcome and return 0 for COMPLETE or
 * QUARANTINED (the memory is not reused before the driver let go of it), the failure's status for
 * FAILED (nothing changed; the sentence in last_error). */
DMM_TORCH_API int dmm_torch_kv_create(int device, const dmm_kv_config *cfg, dmm_kv **out);
DMM_TORCH_API int dmm_torch_kv_destroy(dmm_kv *kv);
DMM_TORCH_API int dmm_torch_kv_open(dmm_kv *kv, const dmm_kv_prefix *prefix, uint64_t tokens, void *stream,
                                    dmm_kv_request **out);
DMM_TORCH_API int dmm_torch_kv_grow(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens);
DMM_TORCH_API int dmm_torch_kv_close(dmm_kv *kv, dmm_kv_request *r, dmm_release_outcome *out);
DMM_TORCH_API int dmm_torch_kv_share(dmm_kv *kv, dmm_kv_request *r, uint64_t tokens, void *stream,
                                     dmm_kv_prefix **out);
DMM_TORCH_API int dmm_torch_kv_prefix_release(dmm_kv *kv, dmm_kv_prefix *p, dmm_release_outcome *out);
DMM_TORCH_API int dmm_torch_kv_offload(dmm_kv *kv, dmm_kv_request *r, void *stream);
DMM_TORCH_API int dmm_torch_kv_restore(dmm_kv *kv, dmm_kv_request *r, void *stream);
DMM_TORCH_API int dmm_torch_kv_request_get(dmm_kv *kv, const dmm_kv_request *r, dmm_kv_request_info *out);
DMM_TORCH_API int dmm_torch_kv_stats(dmm_kv *kv, dmm_kv_stats *out);
DMM_TORCH_API int dmm_torch_kv_refill(dmm_kv *kv, uint64_t *created);

/* ONNX Runtime on this library's governor (ort_front.c; python/dmm/ort.py): the ONNX Runtime adapter
 * (adapters/ort/dmm_ort.h) built in, so that a process's ORT sessions are charged to the same governor as
 * torch's (and CuPy's) tensors: CPU memory to its host tier, CUDA memory to the device's tier. The calls:
 * ort_open / ort_close / ort_api = dmm_ort_runtime_open / _close / _api (ort_api: the OrtApi table, const
 * OrtApi *); ort_use_dmm = dmm_ort_session_options_use_dmm; ort_allocator_create = dmm_ort_allocator_create
 * with the library's governor and its own driver for `device` (-1: host memory; else a CUDA ordinal);
 * ort_allocator_destroy, ort_register, ort_unregister = dmm_ort_allocator_destroy / _register /
 * _unregister; ort_usage: dmm_ort_allocator_stats' live bytes, their peak and the refusals. And two calls
 * of the governor's: set_host_limit, the host tier's budget (owned bytes; 0 = unlimited); tier_usage, a
 * tier's owned bytes used, their peak and its limit (UINT64_MAX: none); device -1 is the host tier. A CUDA allocator's memory is under the same budget
 * as torch's tensors of that device. Destroy every allocator before closing its runtime (an allocator
 * calls ONNX Runtime through it). Without the adapter in the build, the ort calls answer
 * DMM_ERR_UNSUPPORTED with a sentence. */
typedef struct dmm_ort_runtime dmm_ort_runtime;
typedef struct dmm_ort_allocator dmm_ort_allocator;
struct dmm_ort_config;
DMM_TORCH_API int dmm_torch_ort_open(const char *path, dmm_ort_runtime **out);
DMM_TORCH_API void dmm_torch_ort_close(dmm_ort_runtime *rt);
DMM_TORCH_API const void *dmm_torch_ort_api(const dmm_ort_runtime *rt);
DMM_TORCH_API int dmm_torch_ort_use_dmm(dmm_ort_runtime *rt, void *session_options);
DMM_TORCH_API int dmm_torch_ort_allocator_create(dmm_ort_runtime *rt, int device, const struct dmm_ort_config *cfg,
                                                 dmm_ort_allocator **out);
DMM_TORCH_API int dmm_torch_ort_allocator_destroy(dmm_ort_allocator *a);
DMM_TORCH_API int dmm_torch_ort_register(dmm_ort_allocator *a, void *env);
DMM_TORCH_API int dmm_torch_ort_unregister(dmm_ort_allocator *a, void *env);
DMM_TORCH_API int dmm_torch_ort_usage(dmm_ort_allocator *a, uint64_t *in_use, uint64_t *max_in_use,
                                      uint64_t *refusals);
DMM_TORCH_API int dmm_torch_set_host_limit(uint64_t bytes);
DMM_TORCH_API int dmm_torch_tier_usage(int device, uint64_t *used, uint64_t *peak, uint64_t *limit);

/* Tensors for other processes (torch.multiprocessing; python/dmm/_share.py). export: the pool block at ptr
 * of `device` for another process (dmm_device_export: the whole handles under it, *lead = where the
 * block begins; keep the block live while the other process uses it); `out` holds descriptors the
 * caller closes (dmm_export_close). import: such an export mapped here, read-write unless !writable
 * (*ptr = where it begins; the caller keeps its descriptors); unimport: that mapping undone. */
DMM_TORCH_API int dmm_torch_export(int device, const void *ptr, int writable, dmm_export *out, uint64_t *lead);
DMM_TORCH_API int dmm_torch_import(int device, const dmm_export *ex, int writable, void **ptr);
DMM_TORCH_API int dmm_torch_unimport(int device, void *ptr);
DMM_TORCH_API void dmm_torch_export_close(dmm_export *ex);

/* CLOCK_MONOTONIC in ns (the clock of the *_ns stats). */
DMM_TORCH_API uint64_t dmm_torch_now_ns(void);

/* Where the pinned copy of [ptr, ptr + bytes) lies while its tag is offloaded to host; *host = NULL when
 * there is none (dmm_device_host_copy; torch_memory_saver's get_cpu_backup). */
DMM_TORCH_API int dmm_torch_host_copy(int device, const void *ptr, uint64_t bytes, void **host);
/* Orders `waiter` after the work queued on `on` so far (an event `waiter` waits for; `on` is synchronized
 * where the driver cannot). For a consumer of memory ordered on another stream (dmm.buffer's DLPack). */
DMM_TORCH_API int dmm_torch_stream_wait(int device, void *waiter, void *on);

/* ---- claims and DLPack (adapters/torch/dlpack.c; python/dmm/_dlpack.py) ----
 * A claim is memory with a count of holders: its creator and each DLPack tensor made from it not yet
 * deleted. With the last holder the memory goes once: freed (dmm_torch_free) when `owns` is
 * DMM_TORCH_CLAIM_FREES, unmapped (dmm_torch_unimport) when DMM_TORCH_CLAIM_UNIMPORTS, left alone when
 * DMM_TORCH_CLAIM_BORROWS; another value is bad input. The DLPack
 * tensors are plain C (struct and deleter): a consumer may delete one on any thread, with or without
 * the GIL, while an exception is pending or at interpreter exit. -1 on bad input or no host memory. */
typedef struct dmm_torch_claim dmm_torch_claim;
enum { DMM_TORCH_CLAIM_BORROWS = 0, DMM_TORCH_CLAIM_FREES = 1, DMM_TORCH_CLAIM_UNIMPORTS = 2 };
DMM_TORCH_API int dmm_torch_claim_create(void *ptr, uint64_t bytes, int device, void *stream, int owns,
                                         dmm_torch_claim **out);
DMM_TORCH_API void dmm_torch_claim_drop(dmm_torch_claim *c);
/* The claim takes `fd` (an eventfd of the process that sent the memory: dmm._share): once the last holder
 * has released the memory, it writes one 8-byte count of 1 there and closes it. A second call replaces
 * (and closes) the first descriptor. -1 for a NULL claim or a negative fd. */
DMM_TORCH_API int dmm_torch_claim_notify(dmm_torch_claim *c, int fd);
DMM_TORCH_API uint64_t dmm_torch_claim_holders(const dmm_torch_claim *c);
/* Claims of the process not gone yet (tests, leak checks). */
DMM_TORCH_API uint64_t dmm_torch_claims_live(void);
/* A DLManagedTensor (1-D uint8, stride 1, the whole claim; device (device_type, the claim's device))
 * holding one count of the claim; NULL without host memory. */
DMM_TORCH_API void *dmm_torch_claim_dlpack(dmm_torch_claim *c, int device_type);
/* The same over [offset, offset + bytes) of the claim (a storage inside memory the claim covers whole: an
 * import); NULL when that range leaves the claim or is empty. */
DMM_TORCH_API void *dmm_torch_claim_dlpack_range(dmm_torch_claim *c, uint64_t offset, uint64_t bytes,
                                                 int device_type);
/* The destructor of a "dltensor" capsule made over dmm_torch_claim_dlpack's tensor: deletes the tensor
 * when no consumer took it (the capsule still named "dltensor"). */
DMM_TORCH_API void dmm_torch_dlpack_capsule_destructor(void *capsule);

#ifdef __cplusplus
}
#endif
#endif /* DMM_TORCH_H */
