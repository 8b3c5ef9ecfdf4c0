/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/device.h — the device front: one object per device that every framework adapter sits on.
 *
 * A dmm_device owns the choice made once for a device — its driver, an arena (one VA reservation), a
 * pool over it, a lease with a governor, a deferred-release queue — and offers, framework-neutral, what
 * every serving engine needs whatever its framework:
 *   - malloc / free on a stream, routed: a stream that captures a CUDA graph is served from graph
 *     segments mapped before the capture; a thread inside a tag scope from the tag's segments (so the
 *     tag can sleep and wake at the same addresses); everything else from the pool (no driver call on
 *     its hot path);
 *   - stream-use fences (a block used on other streams is handed out again only after their work);
 *   - tags: offload to pinned host memory or discard, restore at the same addresses;
 *   - graph-capture pools: memory reserved before a capture, released when the graph goes;
 *   - regions of a holder process (dmm hold) mapped into the device's address space;
 *   - block tracking and a history of recent events, a recorder of traces, stats and snapshots (JSON).
 * An adapter (adapters/torch: one device per GPU; adapters/ort: two devices, weights and activations,
 * under one governor holder) only translates its framework's allocator interface onto these calls;
 * docs/device.md shows how one is written.
 *
 * Statuses are dmm_status codes; a failure's sentence is the thread's last error (dmm_last_error).
 *
 * Device loss: once a driver call of the device reported DMM_ERR_DEVICE_LOST, the driver latched it
 * (dmm_driver_lost) and the device makes no driver call any more but giving its pinned host copies
 * back: offload, offload_wait, restore, release_host, empty_cache, graph_reserve, graph_release and
 * poll return DMM_ERR_DEVICE_LOST with a sentence, malloc is refused, frees are accepted as
 * bookkeeping, destroy is refused until dmm_device_confirm_lost (called once the caller tore the
 * driver's context down), after which destroy goes without a driver call, blocks still live.
 *
 * Thread contract: thread-safe. The hot path (a pool malloc/free) takes no device lock. While a stream
 * captures a CUDA graph, call only malloc, free and capture_status (stats and polls query events,
 * which would invalidate a capture in global mode).
 */
#ifndef DMM_DEVICE_H
#define DMM_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/driver.h"
#include "dmm/governor.h"
#include "dmm/pool.h"
#include "dmm/share.h"
#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmm_device dmm_device;

/* The device's configuration; every 0 is a default. Read min(size, sizeof) bytes. */
typedef struct dmm_device_config {
    uint32_t size;              /* sizeof(dmm_device_config) */
    uint64_t pool_va_bytes;     /* VA of the pool; 0 = the device's total memory rounded up to a power of two */
    uint64_t reserve_bytes;     /* the arena's VA reservation; 0 = 4 × pool_va_bytes */
    uint64_t tag_segment_bytes; /* VA of one tag segment; 0 = pool_va_bytes / 2 */
    uint64_t cache_limit_bytes; /* the arena's handle cache; 0 = 8 MiB; UINT64_MAX = none (what a trim
                                   gives back goes back to the governor at once) */
    uint64_t limit_bytes;       /* the owned-bytes limit of the device's tier in the governor (shared with
                                   every other holder there); 0 = leave it as it is (unlimited if unset) */
    uint32_t retain_permille;   /* the pool's retention (dmm_pool_config); 0 = the pool's default */
    uint32_t settle_permille;   /* the pool's retention ceiling (dmm_pool_config); 0 = the pool's default */
    /* the pool's handles (dmm_pool_config max_chunk_bytes, handle_divisor, min_chunk_bytes,
     * floor_divisor): 0 = the device's default, handles of up to 32 MiB and at most an 8th of the
     * request but at least 8 MiB (measured on the H200: GPT-2's first training step 957 -> 682 ms, its
     * second 125 -> 62 ms, the same peak, with the 8th; the 8 MiB floor then cut its handles 1,402 ->
     * 933; docs/benchmarks.md); UINT64_MAX = one granule */
    uint64_t max_chunk_bytes;
    uint32_t handle_divisor;  /* 0 = the default (8 with the default max_chunk_bytes, else none) */
    uint64_t min_chunk_bytes; /* 0 = the default (8 MiB with the default max_chunk_bytes, else one granule) */
    uint32_t floor_divisor;   /* 0 = none: a fixed floor (64 MiB / 8 / 8 MiB / 256 raised gpu/torch_models'
                                 peaks 2-3 % above native's on the H200, docs/benchmarks.md) */
    /* restore's pieces: 0 = the default; UINT64_MAX = one commit per segment; else the largest piece,
     * rounded up to the granule */
    uint64_t restore_piece_bytes;
    uint64_t restore_first_bytes; /* 0 = every piece the same; else the first piece, doubling up to the largest */
    uint64_t restore_copy_bytes;  /* 0 = one copy per piece; else each piece's copy in parts of this many bytes */
    uint64_t stock_bytes; /* the pool's stock (dmm_pool_config stock_bytes): 0 = none, the default */
    const char *name;     /* the governor holder's name, in its sentences (copied); NULL = "device" */
    /* several devices under one holder (the ONNX Runtime adapter's weights and activations): */
    dmm_holder *holder; /* the governor holder whose leases the device takes (not owned: registered on `gov` by
                           the caller); a malloc refused for budget or memory also asks its reclaim
                           (dmm_holder_reclaim, step CACHED) before the retry. NULL = a holder of the device's
                           own, named `name`, without a reclaim */
    bool role_given;    /* false: the device's lease has the role DMM_ROLE_WORKSPACE */
    dmm_role role;      /* with role_given: the role of the device's lease */
    bool pool_only; /* true: every malloc is served from the pool: tag scopes and graph captures are not this
                       device's (no tag or graph segment is made for a malloc, no capture is asked), no host
                       lease is taken, and the device keeps no counts of its own (the pool counts them:
                       dmm_pool_stats_get; its stats JSON counts nothing). For an adapter whose framework has
                       its own graph and sleep machinery and reports its pools' stats (ONNX Runtime): a
                       malloc/free pair costs about 40 ns less (bench_ort) */
    uint32_t plan_loops; /* 1 (experimental): the pool plans repeating loops (dmm_pool_config plan_loops) */
    bool exportable;     /* every physical handle is created exportable, so that dmm_device_export can send
                            pool blocks to other processes (CUDA: requestedHandleTypes = POSIX file
                            descriptor; the host driver can export every handle): false by default */
} dmm_device_config;

/* ---- life ---- */
/* A device over `drv` (not owned: destroy it after the device), charged to a lease of `gov` (not owned;
 * its limit for the device's tier is set from cfg->limit_bytes). The driver needs virtual memory
 * management (UNSUPPORTED otherwise). What the device uses of the driver beyond memory are its optional
 * slots: stream_capture_status (absent: no stream captures), host_alloc / host_free (absent: no offload
 * to host), stream_wait_event (absent: a block used on several streams synchronizes them). */
DMM_API dmm_status dmm_device_create(dmm_driver *drv, dmm_governor *gov, const dmm_device_config *cfg,
                                     dmm_device **out);
/* BUSY (nothing changed) while anything is live or queued; see "Device loss" above. */
DMM_API dmm_status dmm_device_destroy(dmm_device *dev);
/* After a loss, once the driver's context is torn down: refunds what the arena held, takes every queued
 * release back unrun, marks every tag offloaded (contents gone, pinned copies kept). INVALID_ARGUMENT
 * when the device was not lost. */
DMM_API dmm_status dmm_device_confirm_lost(dmm_device *dev);

/* ---- allocation ---- */
/* A block of `bytes` (rounded up to 512, torch's rounding) usable on `stream`; 0 bytes gives NULL. A
 * request refused for budget or memory gives back what the pool caches and tries once more. */
DMM_API dmm_status dmm_device_malloc(dmm_device *dev, size_t bytes, dmm_stream stream, void **out);
/* Frees a block of this device (`stream`: where it was last used; its size is the device's to know). A
 * pointer the device does not know is refused, nothing changed. */
DMM_API dmm_status dmm_device_free(dmm_device *dev, void *ptr, dmm_stream stream);
/* Work queued on `stream` may use the block at `ptr` until it is freed (a stream-use fence): the block
 * is handed out again only after that work. The table is process-wide (a pointer names one block). */
DMM_API dmm_status dmm_device_record_stream(void *ptr, dmm_stream stream);
/* Orders `waiter` after the work queued on `on` so far: an event recorded on `on` that `waiter` waits
 * for, or, where the driver cannot wait on events (or a call fails), `on` synchronized. For memory
 * ordered on one stream that another is to use (a DLPack consumer's stream). */
DMM_API dmm_status dmm_device_stream_wait(dmm_device *dev, dmm_stream waiter, dmm_stream on);
/* Gives back the pool's free chunks, empty tag segments and idle graph segments but reserved ones,
 * behind events (never a wait). *released (optional) = bytes that left the mapping or are queued to. */
DMM_API dmm_status dmm_device_empty_cache(dmm_device *dev, uint64_t *released);
/* Runs the releases whose events completed; *queued (optional) = releases still waiting. Never waits. */
DMM_API dmm_status dmm_device_poll(dmm_device *dev, uint64_t *queued);
/* The owned-bytes limit of the device's tier in its governor (0 = unlimited; the limit is the tier's,
 * shared with every other holder there); lowering it below what the device owns empties its cache. */
DMM_API dmm_status dmm_device_set_limit(dmm_device *dev, uint64_t bytes);
/* Whether malloc asks a non-default stream's capture status (default on). Off saves that query on every
 * malloc on a side stream, for a framework that never captures graphs. */
DMM_API void dmm_device_set_capture_check(dmm_device *dev, bool on);

/* ---- tags: sleep / wake ---- */
/* Tag scopes of the calling thread (nested up to 8; names interned per process, at most 32): a malloc
 * inside one is served from the tag's own segments. An untagged scope (dmm_device_untagged_begin) is
 * one whose mallocs come from the pool whatever the scopes around it and the default tag say; each
 * begin is ended by dmm_device_tag_end. */
DMM_API dmm_status dmm_device_tag_begin(const char *name);
DMM_API dmm_status dmm_device_untagged_begin(void);
DMM_API dmm_status dmm_device_tag_end(void);
/* The tag of every thread outside all tag scopes, for every device of the process but pool_only ones
 * (NULL: none, as at start): with one set, every malloc outside a scope is in that tag, so all of a
 * process's memory can sleep (torch_memory_saver's TMS_INIT_ENABLE). Graph captures still take theirs
 * from graph segments; while the default tag is offloaded, mallocs outside a scope come from the pool
 * (they stay awake). Tag memory costs more per malloc than the pool's (the device lock, a first-fit
 * search) and keeps each segment's high-water mark mapped until the segment empties; a block freed is
 * reused only by mallocs on its own stream. */
DMM_API dmm_status dmm_device_tag_default(const char *name);
enum { DMM_DEVICE_TO_HOST = 0, DMM_DEVICE_DISCARD = 1 }; /* the `mode` of dmm_device_offload */
/* Copies the tag's memory to pinned host memory (TO_HOST) or not (DISCARD), then decommits it behind
 * an event: the call returns at once; every address stays reserved. */
DMM_API dmm_status dmm_device_offload(dmm_device *dev, const char *tag, int mode, dmm_stream stream);
/* Blocks until the tag's offload has decommitted (waits on the offload's own event only). */
DMM_API dmm_status dmm_device_offload_wait(dmm_device *dev, const char *tag);
/* Maps the tag's memory again at the same addresses and copies the saved contents back, on `stream`. */
DMM_API dmm_status dmm_device_restore(dmm_device *dev, const char *tag, dmm_stream stream);
/* Gives back the tag's pinned copies. */
DMM_API dmm_status dmm_device_release_host(dmm_device *dev, const char *tag);
/* Where the pinned copy of [ptr, ptr + bytes) lies while its tag is offloaded to host (the copies done):
 * *host = that address, to read only while the tag stays offloaded (a restore, the next offload, a trim
 * or release_host may rewrite or free it); *host = NULL when the range is in no tag, or its tag is
 * resident, discarded, still offloading or failed, or the copy does not cover the whole range, or the
 * device is lost (torch_memory_saver's get_cpu_backup). */
DMM_API dmm_status dmm_device_host_copy(dmm_device *dev, const void *ptr, uint64_t bytes, void **host);

/* ---- graph-capture pools ---- */
/* Whether `stream` is capturing a graph now (the driver's stream_capture_status; never for the default
 * stream, nor for a driver without the slot); *id = the capture's id (0 = unknown). */
DMM_API dmm_status dmm_device_capture_status(dmm_device *dev, dmm_stream stream, bool *capturing, uint64_t *id);
/* Maps `bytes` now (outside any capture) for the next capture to be served from (an idle segment that a
 * fit left smaller is mapped up to `bytes` again). */
DMM_API dmm_status dmm_device_graph_reserve(dmm_device *dev, uint64_t bytes, dmm_stream stream);
/* The same, for the next capture of shared pool `pool` (dmm_device_graph_share): when that capture is
 * served from the pool's own memory, its fit gives this reserve back. */
DMM_API dmm_status dmm_device_graph_reserve_pool(dmm_device *dev, uint64_t bytes, uint64_t pool, dmm_stream stream);
/* The graph of capture `capture_id` is gone: its memory becomes reusable once an event recorded now on
 * `stream` (where its last replay ran) completed. */
DMM_API dmm_status dmm_device_graph_release(dmm_device *dev, uint64_t capture_id, dmm_stream stream);
/* After capture `capture_id` ended (not during a capture on `stream`): the graph segments it took (of its
 * shared pool: the pool's) give back what lies past the highest byte any of their blocks reached (whole
 * pieces of 2 MiB), so that a graph holds what it uses, not its reserve, and a reserve made for the pool
 * that its capture did not need goes back. Later captures served from those segments fit in what is
 * left; a reserve maps more. Nothing is unmapped while another capture of the pool is under way. */
DMM_API dmm_status dmm_device_graph_fit(dmm_device *dev, uint64_t capture_id, dmm_stream stream);
/* Called inside a capture on `stream`, before it allocates: the capture joins shared graph pool `pool`
 * (any number but 0, the caller's name for it): it is served from the pool's memory, where blocks that
 * earlier captures of the pool freed are reused, and that memory stays the pool's until every graph of
 * it is released. For graphs replayed one at a time (one per batch size): their memory is that of the
 * largest, not the sum. BUSY when the capture allocated already or joined another pool. */
DMM_API dmm_status dmm_device_graph_share(dmm_device *dev, dmm_stream stream, uint64_t pool);
/* Graph memory asleep: every graph segment (the memory of the graphs captured on this device, and of
 * reserves) leaves the device — copied to pinned host memory first (DMM_DEVICE_TO_HOST) or not
 * (DMM_DEVICE_DISCARD: contents undefined at wake; a graph that rewrites all it reads in each replay
 * replays the same after wake) — after the work queued on `stream` (its replays), waited for; its
 * address ranges stay reserved, so every graph stays valid and replays after dmm_device_graphs_wake
 * without a new capture. While asleep, no capture is served from them and a replay would read unmapped
 * memory. Wake maps them again at the same addresses and copies the bytes back on `stream` (waited
 * for). BUSY while `stream` captures, while a capture on any stream is served from graph memory, or
 * while another sleep or wake runs; a segment the driver does not let go stays awake, one it
 * quarantines never wakes (its graphs must be captured again), one it does not map again stays asleep
 * (said; call again). A sleep drains the arena's handle cache: the memory leaves the device. */
DMM_API dmm_status dmm_device_graphs_sleep(dmm_device *dev, int mode, dmm_stream stream);
DMM_API dmm_status dmm_device_graphs_wake(dmm_device *dev, dmm_stream stream);

/* ---- regions of another process ---- */
/* Exports the pool block at `ptr` (a live allocation of this device) to another process, read-write
 * unless !writable: the whole handles backing it (dmm_pool_export_block: the importer sees their every
 * byte), *lead = where the block begins in the export. Keep the block live while the other process uses
 * it: freed, its memory may be handed out again. Refused with a sentence, nothing changed: anything but
 * a live pool block (UNKNOWN_ALLOCATION: tag and graph blocks too), a device not created exportable over
 * a driver that exports only such handles (CUDA). `out` holds new descriptors the caller owns
 * (dmm_export_close). */
DMM_API dmm_status dmm_device_export(dmm_device *dev, const void *ptr, bool writable, dmm_export *out, uint64_t *lead);
/* Maps `ex` (its descriptors stay the caller's) into the device's address space, read-only unless
 * `writable`; charges the mapped axis only (the exporter owns the memory). */
DMM_API dmm_status dmm_device_import(dmm_device *dev, const dmm_export *ex, bool writable, void **ptr);
/* Unmaps the region imported at `ptr`, after the device's queued work (every stream: a kernel may still
 * read it). */
DMM_API dmm_status dmm_device_unimport(dmm_device *dev, void *ptr);

/* ---- observation ---- */
/* Block tracking: from now on every pool block's address, sizes and stream are kept for snapshots (35-75
 * ns more per malloc/free pair); never turned off again. */
DMM_API void dmm_device_track_blocks(dmm_device *dev);
/* Keeps the last `max_entries` events (blocks handed out and freed, ranges mapped and unmapped) for the
 * snapshot's history; 0 = off. At most 2^26. Turns block tracking on. */
DMM_API dmm_status dmm_device_history(dmm_device *dev, uint64_t max_entries);
/* The history's event kinds, for dmm_device_history_context's `skip` and its context function. */
enum { DMM_DEVICE_EVENT_ALLOC = 0, DMM_DEVICE_EVENT_FREE = 1, DMM_DEVICE_EVENT_MAP = 2, DMM_DEVICE_EVENT_UNMAP = 3 };
/* Returns the caller's context of a pool block handed out or freed (DMM_DEVICE_EVENT_ALLOC or _FREE):
 * a number the caller maps to what it wants to know of it (dmm.torch: the stack frames), 0 for none. */
typedef uint32_t (*dmm_device_context_fn)(void *arg, int event);
/* What the history keeps with its events: events of the kinds in `skip` (bits 1 << DMM_DEVICE_EVENT_*)
 * are not kept (they take no entry); `fn` (NULL: none) is called for every pool block handed out or
 * freed while block tracking is on, on the allocating thread with no lock of dmm held, and its number
 * is kept with the event and the live block (the snapshot's last value of each). A thread that read
 * the old function before a change may still call it once. skip > 15: INVALID_ARGUMENT. */
DMM_API dmm_status dmm_device_history_context(dmm_device *dev, uint32_t skip, dmm_device_context_fn fn, void *arg);

/* The recorder: every malloc and free the device serves, written as a dmm trace (gzip,
 * docs/trace-format.md). */
typedef struct dmm_device_record_stats {
    uint32_t size;              /* sizeof(dmm_device_record_stats), set by the caller */
    uint64_t allocations;       /* allocation events written */
    uint64_t frees;             /* free events written */
    uint64_t untracked_frees;   /* frees of blocks allocated before the recording began (not written) */
    uint64_t live_bytes;        /* bytes of recorded blocks still live at stop */
    uint64_t peak_live_bytes;   /* the trace's peak live bytes (what `dmm replay` computes from it) */
    uint64_t streams;           /* distinct stream ids in the trace */
    uint64_t streams_folded;    /* allocations on streams beyond the 64th, written as stream 63 */
} dmm_device_record_stats;
/* Opens `path` (gzip) and records from now on; `workload` (may be NULL) goes into the header. BUSY when a
 * recording is on. */
DMM_API dmm_status dmm_device_record_start(dmm_device *dev, const char *path, const char *workload);
/* Ends the recording; *out (optional, out->size set) gets its counts, also when it failed. */
DMM_API dmm_status dmm_device_record_stop(dmm_device *dev, dmm_device_record_stats *out);

/* Stats as one JSON object (keys: docs/torch.md, "Stats", which the PyTorch adapter passes through); the snapshot adds every block and segment. *needed
 * = the length without the NUL; a too-small buffer gives INVALID_ARGUMENT and the length needed. */
DMM_API dmm_status dmm_device_stats_json(dmm_device *dev, char *buf, size_t cap, size_t *needed);
DMM_API dmm_status dmm_device_snapshot_json(dmm_device *dev, char *buf, size_t cap, size_t *needed);
/* The clock of the stats' *_ns values (CLOCK_MONOTONIC, in ns). */
DMM_API uint64_t dmm_device_clock_ns(void);
/* The device's pool (dmm/pool.h), for the pool's own calls: warm start, layout, warm layout, stats. Owned
 * by the device. */
DMM_API dmm_pool *dmm_device_pool(dmm_device *dev);
/* The governor lease the device's memory is charged to (dmm_lease_usage, dmm_lease_stats_get). */
DMM_API dmm_lease_id dmm_device_lease(const dmm_device *dev);
/* Whether `ptr` lies in the device's address space (its one VA reservation): for an adapter with several
 * devices, which one a pointer is to be freed on. No lock, no driver call. */
DMM_API bool dmm_device_contains(const dmm_device *dev, const void *ptr);
/* Peaks back to the current values. */
DMM_API dmm_status dmm_device_reset_peaks(dmm_device *dev);
/* Totals (allocated, freed) and the oom / retry counters back to 0; currents and peaks stay. The
 * reserved bytes' totals are the governor lease's (dmm_lease_stats_get) and are not reset. */
DMM_API dmm_status dmm_device_reset_accumulated(dmm_device *dev);

#ifdef __cplusplus
}
#endif
#endif /* DMM_DEVICE_H */
