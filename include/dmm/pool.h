/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/pool.h — the caching allocator (docs/guide.md): malloc/free at caching-allocator speed on top of
 * any mechanism with virtual backing (the arena).
 *
 * The pool takes one VA-only allocation from the mechanism and manages it itself: blocks are placed
 * by best fit, free blocks coalesce, and physical memory is committed and decommitted in chunks (one
 * physical handle each; by default one granule, configurable up to one handle per need) that are
 * mapped where they are needed. VA and
 * physical memory are decoupled: when the pool needs memory in one place and holds whole free chunks
 * elsewhere, it moves them (decommit there, commit here; the arena's handle cache hands the same
 * physical handle back) instead of growing, so the physical memory it holds stays close to the peak
 * of what is live. A move waits for the chunk's fence (see below); when the chunks it wants belong
 * to the requesting stream's own heap and their fence is still pending (on a GPU the CPU runs ahead
 * of the work, so it usually is), the pool aliases them instead (over a mechanism that fills the
 * optional `alias` slot, as the arena does: dmm_mechanism_alias):
 * the same physical memory is mapped at the new place at once, usable by that stream because stream
 * order puts its new work after the old, and the old place is decommitted once its fence completed
 * (its VA then returns to the heap). No physical memory is duplicated: only the mapped bytes (and
 * committed_bytes, which counts mappings) count both places meanwhile.
 *
 * Streams and events (docs/guide.md, "The pool (the fast path)"):
 *  - every stream that allocates gets its own heap (free lists, lock, VA regions); a block freed on
 *    the stream it was allocated on is reusable at once by that stream;
 *  - a block freed on another stream records an event there and is reused (by any stream) only once
 *    that event has completed;
 *  - physical memory leaves a heap (trim, empty_cache, or a move to where it is needed) only as
 *    whole free chunks whose heap's last free is covered by a completed event (a "fence" the pool
 *    records on the heap's stream and polls): never a device synchronize, never an unmap under work
 *    that may still use the memory. Within its own heap a stream may reuse a fenced free chunk at
 *    another address at once (an alias); its old place is unmapped only behind the fence, and the
 *    memory goes to another stream only once the fence covers it too.
 *
 * Hot path: malloc and free served from mapped free memory make no driver call and take one lock:
 * the heap's, uncontended when each thread uses its own stream, and biased to the thread that uses
 * the stream: that thread takes it without a locked instruction (another thread pays a system call,
 * membarrier, to take it over; where membarrier is missing the lock is a plain mutex). A
 * thread-local cache finds the heap of the last (pool, stream) without any lock. A block freed on
 * its own stream is parked unmerged for a while, and a malloc of exactly its size on that stream
 * takes it back at once (deferred coalescing; a parked block is free in every stat, and is merged
 * before anything else could be placed differently because of it). They allocate host memory only
 * when the number of blocks reaches a new high (block records come from slabs; the live-block hash
 * doubles).
 *
 * Thread contract: thread-safe. Streams scale independently (one heap and lock each); threads that
 * share a stream share its lock. Growth, moves and trim make driver calls (through the mechanism)
 * outside every heap lock: the chunks being committed or decommitted are taken out of the heap
 * first, so other threads on that stream keep allocating from what is mapped. Event records and
 * queries also run outside the heap lock. Lock order: heap → pool (regions, events); the mechanism
 * and the driver are called with no pool lock held.
 *
 * Device loss (docs/guide.md, "Device loss"). The loss is the driver's (dmm_driver_lost): the first driver call that
 * reports a sticky context error (DMM_ERR_DEVICE_LOST) — one the pool made itself (events), one the
 * mechanism made for it, or one another user of the same driver made — latches it there, and every
 * later call through the library is refused without reaching the driver. The pool asks its driver
 * before anything that would reach it, so it makes no driver call from then on, directly or through
 * the mechanism: events are neither recorded, queried nor destroyed (the context took them); the
 * arena over the same driver stops as well, and accepts dmm_arena_confirm_context_terminated. The
 * pool notices a loss another user met at the entry of malloc's slow path, trim, empty_cache,
 * destroy or a cross-stream free. From then on:
 *  - dmm_pool_malloc, dmm_pool_trim and dmm_pool_empty_cache return DMM_ERR_DEVICE_LOST with a
 *    sentence naming what the pool was doing when it noticed, and the call that first saw the loss,
 *    and hand out nothing. malloc refuses also when
 *    a mapped free block would fit: serving it would cost no driver call, but the memory behind it
 *    is gone, and a pointer handed out now only fails later, in a kernel; one answer for every
 *    malloc is what a caller can act on. (A malloc racing with the thread that discovers the loss
 *    may still be served from mapped memory.) A call the loss cuts short leaves the bookkeeping as
 *    a driver failure would (trim counts in *released what it freed before);
 *  - dmm_pool_free is ACCEPTED (DMM_OK) on any stream, as bookkeeping only (no event is recorded):
 *    a framework or serving engine tearing down its tensors after its GPU fell off the bus must not
 *    get an error from every free. The free that itself discovers the loss (its event record reports
 *    it) is accepted too. A pointer that is not a live block is still DMM_ERR_UNKNOWN_ALLOCATION;
 *  - dmm_pool_block_size, the stats and dmm_pool_check keep answering (they make no driver call);
 *  - dmm_pool_destroy, until the caller confirmed the context terminated: DMM_ERR_DEVICE_LOST, nothing
 *    changed. After dmm_arena_confirm_context_terminated on the arena (which discharged the pool's VA
 *    and chunks): DMM_OK without any driver call; blocks still live or waiting for an event are
 *    forgotten (their memory went with the context; a warning is logged), and the pool's host memory
 *    is freed. The arena's own destroy then succeeds too. Before the confirmation destroy asks the
 *    mechanism to release the VA (once per call; the arena refuses, without a driver call) and goes
 *    when that does not fail.
 * Teardown after a loss: free what you can, tear the context down, dmm_arena_confirm_context_terminated,
 * dmm_pool_destroy, dmm_mechanism_destroy, dmm_driver_destroy.
 */
#ifndef DMM_POOL_H
#define DMM_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/driver.h"
#include "dmm/mechanism.h"
#include "dmm/stats.h"
#include "dmm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmm_pool dmm_pool;

typedef struct dmm_pool_config {
    uint32_t size;          /* sizeof(dmm_pool_config) */
    uint64_t va_bytes;      /* VA the pool takes from the mechanism, at most its reservation (where it
                               names one); 0 = half the arena's reservation (for an arena), else 64 GiB */
    uint64_t chunk_bytes;   /* commit quantum: every chunk (one physical handle) is a whole number of
                               them; a power-of-two multiple of the driver's granularity, at most
                               va_bytes; 0 = the granularity */
    uint64_t region_bytes;  /* VA a heap takes at a time (a power of two ≥ chunk_bytes); 0 = va_bytes/64
                               rounded down to a power of two. A block larger than a region takes several */
    size_t block_align;     /* alignment and size quantum of blocks (a power of two); 0 = 512 */
    uint32_t retain_permille; /* physical memory the pool keeps mapped while free, as a share of the
                               highest live bytes seen so far: beyond (1 + permille/1000) × that peak,
                               growth moves whole free chunks instead of adding new ones (another
                               stream's heap keeps the one free chunk it reuses next, so the limit may
                               be passed by up to a chunk per stream). 0 = 20 (2 %) */
    uint64_t max_chunk_bytes; /* the largest chunk a growth commits as one handle: new memory is one
                               chunk sized to the need, split at this size; a multiple of chunk_bytes.
                               0 = chunk_bytes: every chunk one quantum, so any free chunk can move
                               anywhere (lowest fragmentation). Larger values cut the driver calls of
                               growth (one handle per need) but a partly used big chunk cannot move:
                               on the real traces 8 MiB gives 1.03-1.08 × live, 128 MiB 1.05-1.25 ×,
                               against 1.02 × at 2 MiB (docs: dmm replay --max-chunk) */
    uint32_t no_alias;        /* 1: never alias chunks (a growth that wants fenced chunks of its own
                               stream then grows instead, as before aliases); for comparisons.
                               0 = alias where it saves memory (over an arena) */
    uint32_t settle_permille; /* how far the retention limit may rise, in per mille of the live peak,
                               while the pool keeps re-mapping memory: each chunk a growth moves or
                               aliases raises the limit by its bytes, up to (1 + permille/1000) × the
                               live peak, so that a repeating workload (training steps, generation
                               rounds) settles into a layout it serves with no driver call at all,
                               instead of re-mapping ~1 GiB every step. 0 = 100 (10 %); a value at or
                               below retain_permille keeps the limit fixed (the lowest memory, with
                               moves every iteration) */
    uint32_t handle_divisor;  /* with max_chunk_bytes above chunk_bytes: the new handles of a growth for
                               a request of n bytes are at most n / handle_divisor (rounded down to
                               chunk_bytes, at least one quantum, at most max_chunk_bytes), so only
                               large requests get large handles (their interior) and small ones keep
                               movable quanta. 0 = no divisor: handles up to max_chunk_bytes for any
                               request. On the real traces: 32 MiB ÷ 8 creates 1.7-3.3 × fewer handles
                               than one quantum each at +0.001-0.013 of fragmentation; 128 MiB ÷ 4
                               2.6-5.4 × fewer at up to +0.08 (docs/benchmarks.md) */
    uint64_t min_chunk_bytes; /* with handle_divisor: the smallest handle the divisor cuts a growth into
                               (a piece of growth smaller than this is one handle of its own size); a
                               multiple of chunk_bytes, at most max_chunk_bytes. A handle costs the
                               same up to 64 MiB (~45 µs on the H200), so handles below a few MiB buy
                               only mobility: 8 MiB under 32 MiB ÷ 8 creates 1.35-2.5 × fewer handles
                               on the real traces at ±0.005 of fragmentation, but +0.009 to +0.029
                               on random shapes (bert-dynamic, which then re-maps half as much in its
                               steady state; docs/benchmarks.md). 0 = chunk_bytes */
    uint32_t floor_divisor;   /* with handle_divisor: the floor rises with the pool, to the highest live
                               bytes seen so far / floor_divisor (rounded down to chunk_bytes, between
                               min_chunk_bytes and max_chunk_bytes): in a large pool a handle of a few
                               MiB is noise in its fragmentation but costs a driver call, so a pool
                               that has grown large grows in handles in proportion. 256 (each handle
                               ≤ 0.4 % of the live peak) under 64 MiB ÷ 8 with an 8 MiB floor creates
                               1.2-1.4 × fewer handles on the growth traces than 32 MiB ÷ 8 with the
                               fixed floor, at the same or lower fragmentation in their replays, but
                               on the H200 it raised the peak of real GPT-2 training by 2.3 % (10,408
                               -> 10,650 MiB), so the device front keeps a fixed floor
                               (docs/benchmarks.md). 0 = a fixed floor */
    uint64_t stock_bytes;     /* > 0: a thread of the pool's own keeps up to this many bytes (rounded
                               down to chunk_bytes, and at most 1/128 of the highest live bytes seen so
                               far) committed right after the place where a growing pool last grew, so
                               that the mallocs of a workload's growth (a training's first step: ~150
                               growths, ~870 handles for GPT-2) find memory mapped instead of paying
                               create + map + set-access on their own thread; a fit that leaves less
                               than half of it asks the thread for more, and a malloc that would grow
                               first waits (at most 20 ms) for the stock being committed for its stream.
                               Each stock growth is one handle (a handle costs the same for 2 MiB and
                               256 MiB). Costs up to that much more memory, at the peak too (the
                               retention limit rises by as much; no stock takes the pool above it).
                               Only a growth for a request no larger than the stock posts one (the
                               VA after a larger one is where the next of its kind grows). 256 MiB
                               on the H200, GPT-2 training's regrowth: 152 -> 28 growths on the
                               allocating thread, 868 -> 292 handles, the step 89.2 -> 68.8 ms
                               (native 68.0) at the same peak; ViT's 68.8 -> 44.1 ms (native 46.4)
                               at +3.5 % peak. 0 = no stock, no thread (the default) */
    /* Optional (NULL: none): told of every range of the pool's VA the pool mapped (mapped = true: a
     * commit, an alias's destination) or unmapped (a decommit that let all of it go), right after the
     * mechanism did it, from the thread that did it, with no pool lock held; it must not call the pool.
     * The device front's history of ranges mapped and unmapped is made of these. */
    void (*on_map)(void *user, uintptr_t addr, uint64_t bytes, bool mapped);
    void *on_map_user;
    uint32_t plan_loops;      /* 1 (experimental): a heap whose mallocs repeat (a training step, a
                               generate round) and that still grows or re-maps memory in its loop has
                               one turn of it placed by plan (offsets from the recorded lifetimes, on a
                               planner thread of the pool's own) and follows that plan, with no driver
                               call once the plan's places are mapped; what the plan does not place
                               goes where the plan places nothing; a loop that goes elsewhere suspends
                               the plan until it comes back. Costs a thread, and per stream while it
                               grows or follows a plan: 2 MiB of host memory (the record of its last
                               131,072 mallocs; 16 MiB, the last 1,048,576, for a stream that grew
                               within them and found nothing to plan: a loop that long is found
                               then) and the hot path (its mallocs and frees take the paths that
                               record them, with the quick lists while no plan is followed, without
                               them while one is: slower on the CPU); a stream that went a whole
                               ring without growing and follows no plan stops recording, and costs
                               nothing more (most first widen it: about 1.2 million mallocs). Not yet the
                               default: the move to a plan's layout re-maps memory once, and only with
                               a fixed retention limit (settle_permille ~ 25) does a repeating loop need
                               a plan at all (docs/architecture.md, "The plan of a loop"). 0 = off */
    uint64_t move_batch_bytes; /* where the mechanism has commit_pieces: the most bytes of same-sized free
                               chunks a growth moves at once. Each is unmapped at its old place (the
                               mechanism keeps its handle meanwhile: the arena's handle cache), then
                               all are mapped at the new place in one call, access granted once instead
                               of once per chunk (cuMemSetAccess is the costliest call of a move). At
                               most the arena's cache_limit_bytes: beyond it, a handle is released and
                               a new one created in its place (correct, two calls more). The device
                               front passes its cache limit. 0 = one chunk at a time */
} dmm_pool_config;

/* Creates a pool over `mech` (not owned; must support virtual backing, else DMM_ERR_UNSUPPORTED) and
 * `driver` (not owned: the driver of mech's device, whose streams the caller passes and whose events
 * the pool records). Both must outlive the pool. cfg may be NULL. DMM_ERR_DEVICE_LOST when the driver
 * lost its device (dmm_driver_lost). */
DMM_API dmm_status dmm_pool_create(dmm_mechanism *mech, dmm_driver *driver, const dmm_pool_config *cfg,
                                   dmm_pool **out);

/* Refused with DMM_ERR_BUSY (nothing changed) while blocks are live, or while a block freed on another
 * stream, or the last free of some stream, waits for its event: synchronize the streams and retry.
 * Otherwise gives every chunk and the VA back to the mechanism and frees the pool. A failed release
 * of the VA is reported, nothing changed (retry); when the mechanism quarantined part of it instead,
 * the pool is freed all the same and the call returns DMM_ERR_QUARANTINED (the pool is gone: do not
 * retry; the mechanism keeps the quarantined memory out of use).
 * After a device loss (see "Device loss" above): DMM_ERR_DEVICE_LOST (nothing changed) until the
 * context was confirmed terminated on the arena, then DMM_OK without a driver call, live blocks
 * or not. */
DMM_API dmm_status dmm_pool_destroy(dmm_pool *pool);

/* A block of at least `bytes` (rounded up to block_align), aligned to block_align, usable by work
 * ordered on `stream` (NULL = the default stream). DMM_ERR_DEVICE_LOST once the device is lost, also
 * for a size a mapped free block would fit. */
DMM_API dmm_status dmm_pool_malloc(dmm_pool *pool, size_t bytes, dmm_stream stream, void **ptr);

/* Frees a block; `stream` is the stream whose queued work may still use it (the one it was allocated
 * on, or another). DMM_ERR_UNKNOWN_ALLOCATION (nothing changed) for a pointer that is not a live block
 * of this pool. After a device loss: accepted (DMM_OK), bookkeeping only, on any stream. */
DMM_API dmm_status dmm_pool_free(dmm_pool *pool, void *ptr, dmm_stream stream);
/* dmm_pool_free, also telling the bytes requested at the block's malloc (*requested, set only when the
 * free is accepted), so that a caller above the pool needs no table of its own to count what it frees. */
DMM_API dmm_status dmm_pool_free_requested(dmm_pool *pool, void *ptr, dmm_stream stream, uint64_t *requested);

/* The block's usable bytes (its rounded size). */
DMM_API dmm_status dmm_pool_block_size(dmm_pool *pool, const void *ptr, size_t *bytes);
/* The stream the live block at ptr was allocated on (its heap's): for a framework whose free names no
 * stream, to free it where the pool reuses it at once. DMM_ERR_UNKNOWN_ALLOCATION for anything else. */
DMM_API dmm_status dmm_pool_block_stream(dmm_pool *pool, const void *ptr, dmm_stream *stream);

/* Exports the memory of the live block at ptr to another process (dmm/share.h): the whole chunks
 * (handles) that back it, as one export of the pool's mechanism; *lead = where the block begins inside
 * the export. The importer sees every byte of those chunks, also other blocks' that share them (as a
 * CUDA IPC handle shows its whole segment). The chunks are marked exported: never cached again; the
 * memory stays the importer's until it unmaps it, also after the block is freed, and the pool may hand
 * the same memory out again once the block is freed: keep the block live while another process uses
 * it. DMM_ERR_UNKNOWN_ALLOCATION for anything but a live block; the mechanism's refusal (dmm_export_range:
 * not exportable, more than DMM_EXPORT_MAX_CHUNKS chunks, a poisoned chunk) otherwise; nothing changed. */
struct dmm_export;
DMM_API dmm_status dmm_pool_export_block(dmm_pool *pool, const void *ptr, dmm_access access, struct dmm_export *out,
                                         uint64_t *lead);

/* Decommits whole free chunks whose events have completed until the pool's committed bytes are at
 * most `target_bytes` (0 = everything it can). *released (may be NULL) = bytes decommitted by this
 * call. Chunks whose event is still pending stay mapped: the call does not wait; trim again later.
 * Like every poll, it also unmaps the old places of aliased chunks whose fence has completed (that
 * frees no physical memory and is not counted in *released).
 * DMM_OK also when the target could not be reached (compare released with what you asked).
 * DMM_ERR_DEVICE_LOST after a device loss (so is dmm_pool_empty_cache). */
DMM_API dmm_status dmm_pool_trim(dmm_pool *pool, uint64_t target_bytes, uint64_t *released);

/* trim(0), then gives the VA of streams that hold nothing back to the pool, and the mechanism's
 * cached physical handles back to the driver (the mechanism's optional `drain_cache` slot; for an
 * arena: dmm_arena_drain_cache). *released (may be
 * NULL) = bytes decommitted. */
DMM_API dmm_status dmm_pool_empty_cache(dmm_pool *pool, uint64_t *released);

/* Waits until the stock thread (stock_bytes) has done every request posted before the call, pending
 * or in flight: at once without a stock. For replays and benchmarks that want the stock's work in a
 * fixed order (`dmm replay --stock`); no malloc needs it. DMM_ERR_BUSY when the thread is still busy
 * after 20 ms (call again; never from a budget callback, which the stock thread may be running);
 * DMM_ERR_INVALID_ARGUMENT for a NULL pool. */
DMM_API dmm_status dmm_pool_stock_sync(dmm_pool *pool);
/* With plan_loops: waits until the pool's planner thread has planned every loop it was given and the
 * heaps follow what it found (a replay calls it after every malloc, so that a plan is followed from
 * the same malloc on every run). DMM_OK at once without plan_loops; DMM_ERR_BUSY after 60 s. */
DMM_API dmm_status dmm_pool_plan_sync(dmm_pool *pool);

/* Warm start: a pool told a workload's steady state — e.g. its last run's committed peak (the stats'
 * committed_bytes.peak) — commits memory on `stream`'s heap until the pool's committed bytes reach
 * target_bytes, at once and in handles of up to handle_bytes (0 = DMM_POOL_WARM_HANDLE_BYTES; rounded
 * down to whole chunks, at least one), whatever the retention limit says, so the workload's first
 * iteration is served from mapped memory instead of growing in thousands of small handles. The memory
 * is free for every malloc on that stream and stays mapped like all free memory (dmm_pool_trim and
 * dmm_pool_empty_cache give it back; a growth over the retention limit may move its whole free chunks). *committed (may be
 * NULL) = bytes committed now (0 when the pool already holds target_bytes). Errors: DMM_ERR_INVALID_ARGUMENT
 * (a target above the pool's VA, handles above DMM_POOL_WARM_HANDLE_BYTES; nothing changed), or a growth's
 * (budget, driver: what was committed before it stays, free). */
#define DMM_POOL_WARM_HANDLE_BYTES ((uint64_t)1 << 30) /* the largest handle an arena makes by default */
DMM_API dmm_status dmm_pool_warm(dmm_pool *pool, dmm_stream stream, uint64_t target_bytes, uint64_t handle_bytes,
                                 uint64_t *committed);

/* Warm layout: a warm start that costs no memory. A pool records where it created handles for its
 * growths (its layout: the offset of each from the pool's VA base, and its bytes); a later run of the
 * same workload, told that layout, commits those handles at once, each at its place and unmapped in
 * the pool's eyes ("ahead"): the growths then plan as the first run did (where the fences complete
 * as they did then: a plan reads which old places were reaped), and a growth that
 * would create a handle where one lies ahead takes it (and every other ahead handle lying wholly
 * inside its chunk, committing new handles only for the gaps) without a driver call for them. The
 * peak is the first run's (the same handles, committed earlier), the first iteration's growth makes
 * no create, map or set-access for them, and nothing else changes: moves and aliases work as before.
 * A growth that plans differently (fences that complete at other times, another workload) gives back
 * the ahead handles reaching past its chunk before it commits; dmm_pool_trim and dmm_pool_empty_cache
 * give back all that are left, first. Each stream's heap takes its own spans: call it once per
 * stream, in the order the streams first allocated in the recorded run (one call for one stream).
 *
 * dmm_pool_layout: the spans the pool created for its growths, in address order, left out those
 * that overlap an earlier one and those a trim gave back. *count = how many there are; up to `cap`
 * are written to `spans` (spans NULL: only *count, DMM_OK); DMM_ERR_INVALID_ARGUMENT when an array
 * is passed and cap is less than *count (nothing written; call again with a larger array). */
typedef struct dmm_pool_span {
    uint64_t offset; /* from the pool's VA base: a multiple of chunk_bytes */
    uint64_t bytes;  /* a multiple of chunk_bytes, 1 to DMM_POOL_WARM_HANDLE_BYTES */
    uint32_t heap;   /* the heap whose growth made it, in the order the pool made heaps (0: the first
                        stream that allocated); a warm layout commits only its stream's heap's spans */
} dmm_pool_span;
DMM_API dmm_status dmm_pool_layout(dmm_pool *pool, dmm_pool_span *spans, size_t cap, size_t *count);

/* What of its VA the pool has mapped now: every chunk under blocks handed out, free, waiting for their
 * event, being decommitted, aliased or poisoned, and a warm layout's handles lying ahead, as coalesced
 * ranges in address order: ranges[2i] = an address, ranges[2i + 1] = its bytes. *count = how many
 * ranges there are; `cap` counts ranges (the array holds 2 × cap numbers); all of them are written, or
 * none (ranges NULL: only *count; DMM_ERR_INVALID_ARGUMENT when cap is less than *count: call again
 * with a larger array, the count may have grown meanwhile). Each heap is read under its own lock:
 * while other threads allocate, the answer is a moment's, not one instant's. */
DMM_API dmm_status dmm_pool_committed(dmm_pool *pool, uint64_t *ranges, size_t cap, size_t *count);

/* dmm_pool_warm_layout: commits each span of `stream`'s heap (heap = that heap's place in the order
 * the pool made heaps) ahead, one handle each, where that VA is still unmapped (spans over memory the
 * pool holds are skipped: call it before the first iteration, after the model is loaded or before);
 * the heap first extends its VA over its spans, as its growths would; other heaps' spans are left.
 * The spans are untrusted (a file): each must be whole quanta inside the pool's VA, at most
 * DMM_POOL_WARM_HANDLE_BYTES, none overlapping another; otherwise DMM_ERR_INVALID_ARGUMENT names the
 * span and the fault, and nothing changed. *committed (may be NULL) = the bytes committed ahead now.
 * A commit that fails (budget, driver) stops there: what was committed before it stays ahead, and
 * its error is returned. */
DMM_API dmm_status dmm_pool_warm_layout(dmm_pool *pool, dmm_stream stream, const dmm_pool_span *spans, size_t count,
                                        uint64_t *committed);

/* ---------------------------------------------------------------------------------------------- */
/* Stats, declared once. Counts are {current, peak, total}; counters only go up (new ones are added
 * at the end, so that a caller's older, shorter struct reads the same fields).
 *   allocated_bytes ≤ committed_bytes: committed = chunks the pool holds mapped (live or free; an
 *   aliased chunk counts at both places until its old place is decommitted);
 *   physical_bytes = the mechanism's owned bytes (mapped + its handle cache + quarantined), read from
 *   the mechanism's stats at each growth, trim and stats call (so its peak is exact when the pool is
 *   the mechanism's only user); the driver_* counters are the mechanism's too. */
#define DMM_POOL_STAT_COUNTS(X)                                                                  \
    X(allocations, "live blocks")                                                                \
    X(allocated_bytes, "bytes of live blocks (rounded to block_align)")                          \
    X(requested_bytes, "bytes of live blocks as requested")                                      \
    X(committed_bytes, "bytes of chunks the pool holds mapped (live and free)")                  \
    X(physical_bytes, "the mechanism's owned bytes: mapped plus cached physical handles")        \
    X(pending_blocks, "blocks freed on another stream, waiting for their event")                 \
    X(heaps, "streams with a heap")

#define DMM_POOL_STAT_COUNTERS(X)                                                                \
    X(mallocs, "successful malloc calls")                                                        \
    X(frees, "successful free calls")                                                            \
    X(cached_mallocs, "mallocs served from mapped free blocks, without a driver call")           \
    X(grows, "mallocs that committed chunks")                                                    \
    X(chunks_committed, "chunks committed (new, moved or aliased)")                              \
    X(chunks_decommitted, "chunks decommitted (moved, trimmed)")                                 \
    X(chunks_moved, "chunks decommitted to be committed where they were needed")                 \
    X(trims, "trim and empty_cache calls")                                                       \
    X(cross_stream_frees, "frees on a stream other than the block's heap's")                     \
    X(events_recorded, "events the pool recorded (fences and cross-stream frees)")               \
    X(events_pending, "event queries that found the event still pending")                        \
    X(chunks_poisoned, "chunks whose decommit failed: kept out of use")                          \
    X(driver_create, "the mechanism's driver handle creations")                                  \
    X(driver_map, "the mechanism's driver map calls")                                            \
    X(driver_set_access, "the mechanism's driver set-access calls")                              \
    X(driver_unmap, "the mechanism's driver unmap calls")                                        \
    X(driver_release, "the mechanism's driver handle releases")                                  \
    X(driver_cache_hits, "chunks the mechanism served from its handle cache")                    \
    X(chunks_aliased, "chunks mapped again at once where their own stream needed them, the old place "   \
                      "decommitted behind its fence (no new physical memory)")                                 \
    X(driver_ns, "nanoseconds the mechanism spent in those driver calls")                         \
    X(lock_slow_paths, "heap lock acquisitions through the mutex, by a thread the lock is not biased to "  \
                       "(a stream shared by threads, a stats read) or where membarrier is missing; 0 in "     \
                       "builds whose locks are the mutex alone (ThreadSanitizer)")                            \
    X(slow_path_ns, "nanoseconds mallocs spent on their slow path (poll, plan, moves, commits, retries, "   \
                    "waits for the stock), the driver calls in it included: what growth costs the "         \
                    "allocating thread")           \
    X(stock_grows, "growths the stock thread made ahead of the mallocs (stock_bytes > 0)")             \
    X(stock_ns, "nanoseconds the stock thread spent in them: growth taken off the allocating threads")    \
    X(stock_wait_ns, "nanoseconds mallocs waited for a stock being committed before they grew (in "       \
                     "slow_path_ns too)")                                                                     \
    X(layout_adopted, "handles a warm layout committed ahead that a growth took, with no driver call")       \
    X(layout_released, "handles a warm layout committed ahead that were given back unused (a growth "         \
                       "planned over them differently, a trim)")                                            \
    X(plans, "plans of a repeating loop a heap made and followed (dmm_pool_config.plan_loops)")             \
    X(planned_mallocs, "mallocs that went where their heap's plan placed them")                          \
    X(plan_misses, "mallocs a plan expected that went elsewhere (another size, or the place taken)")

typedef struct dmm_pool_stats {
    uint32_t size; /* sizeof(dmm_pool_stats), set by the caller */
#define DMM_POOL_STAT_COUNT_FIELD(name, desc) dmm_count name;
    DMM_POOL_STAT_COUNTS(DMM_POOL_STAT_COUNT_FIELD)
#undef DMM_POOL_STAT_COUNT_FIELD
#define DMM_POOL_STAT_COUNTER_FIELD(name, desc) uint64_t name;
    DMM_POOL_STAT_COUNTERS(DMM_POOL_STAT_COUNTER_FIELD)
#undef DMM_POOL_STAT_COUNTER_FIELD
} dmm_pool_stats;

/* Fills `out` (set out->size first). Peaks of allocated/requested bytes are exact for one stream;
 * with several streams they are the peak of the sum sampled at every growth, trim and stats call,
 * and never below any single heap's peak. */
DMM_API dmm_status dmm_pool_stats_get(dmm_pool *pool, dmm_pool_stats *out);

/* The pool's stats in the shared dmm_stats shape (allocations, allocated, committed, mapped = the
 * pool's committed, owned = physical, and the driver counters), for tools that read every component
 * alike. */
DMM_API dmm_status dmm_pool_stats_common(dmm_pool *pool, dmm_stats *out);

/* Writes stats as one JSON object (same contract as dmm_stats_json). */
DMM_API dmm_status dmm_pool_stats_json(const dmm_pool_stats *stats, char *buf, size_t cap, size_t *needed);

/* The expensive invariant check: blocks tile every heap's VA, free blocks are coalesced and in the
 * right bins, chunk states agree with the blocks, counters equal the sums they stand for. It checks
 * the blocks parked for exact repeats (see "Hot path") as they are, then merges them and checks
 * again. DMM_OK, or DMM_ERR_INVALID_ARGUMENT with a sentence naming the first broken invariant. */
DMM_API dmm_status dmm_pool_check(dmm_pool *pool);

#ifdef __cplusplus
}
#endif
#endif /* DMM_POOL_H */
