/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/types.h — the device front's data: one dmm_device and everything it holds.
 * Internal; the ground floor every file of src/device stands on.
 *
 * The device is written over any dmm_driver; what it needs beyond memory are optional slots of the
 * driver (a stream's capture status, host memory for copies, a stream waiting for an event), called
 * through the driver's funnel (src/driver/call.h). The cuda driver fills them from libcuda; the host
 * driver has host memory and no captures; the fault driver makes a stream capture on purpose
 * (dmm_fault_capture), so every decision of the device runs on a machine without a GPU.
 *
 * The floors, each calling only those below it:
 *   device.c    routing of malloc/free (capture → graphs, a tag → tags, else the pool), the API, stats
 *   graph_sleep.c  graph memory asleep (copied to pinned memory or dropped) and awake at the same addresses
 *   graphs.c    graph segments: memory mapped before a capture, the only memory a capture is served from;
 *               shared pools, the fit after a capture
 *   offload.c   offload (copy, event, deferred decommit) and restore of a tag
 *   tags.c      tag names and scopes, tagged allocations in tag segments
 *   segment.c   one segment: a VA allocation of the arena, its blocks (a span set and a table of live
 *               blocks), its release now or behind an event — what tag and graph segments share
 *   jobs.c      the deferred queue: our requests, polled and taken back; each job's own finish
 *   context.c   counts, the clock, and device loss (asked of the driver: it latches the first loss)
 * Beside them, called by device.c only: record.c, the recorder (a trace of every malloc and free);
 * blocks.c, the pool's live blocks;
 * history.c, the pool's recent events; stream_uses.c, the blocks torch's record_stream holds back;
 * imports.c, regions of a holder process (dmm hold) mapped into the arena.
 *
 * Lock order: dev.lock → (pool → arena → driver). The hot path (pool malloc/free) takes no ctx lock.
 * The recorder's locks (rec.mu → rec.file_mu) and the block shards' are leaves, taken with no other
 * lock held; the history's lock is a leaf (the pool's observer takes it with no pool lock held).
 */
#ifndef DMM_DEVICE_TYPES_H
#define DMM_DEVICE_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/atomics.h"
#include "core/spans.h"
#include "core/u64map.h"
#include "dmm/dmm.h"
#include "dmm/device.h"

/* Largest number of distinct tag names per process, and of nested tag scopes per thread. */
#define DMM_DEVICE_MAX_TAGS 32
#define DMM_DEVICE_TAG_DEPTH 8
#define DMM_DEVICE_TAG_NAME 64
/* Most pieces one segment's offload is cut into (each: a copy, an event, a queued decommit). */
#define DMM_DEVICE_OFFLOAD_PIECES 16
/* A committed segment's handles (graphs): a tail of whole pieces can go back (dmm_device_graph_fit). */
#define DMM_DEVICE_SEGMENT_PIECE ((uint64_t)2 << 20)
/* Graphs alive at once in shared graph pools (dmm_device_graph_share), per device. */
#define DMM_DEVICE_GRAPH_JOINS 1024

typedef struct dmm_device dmm_device;

/* ---- jobs: our requests in the deferred queue (jobs.c) ---- */
typedef enum device_job_end {
    DEVICE_JOB_RAN = 0,        /* the queue ran it: status DMM_OK (COMPLETE) or DMM_ERR_QUARANTINED */
    DEVICE_JOB_FAILED = 1,     /* it FAILED (nothing changed) and was taken out: status = the failure */
    DEVICE_JOB_TAKEN_BACK = 2, /* taken back unrun after a confirmed loss: no driver call may follow */
} device_job_end;

typedef struct device_job device_job;
/* Called once, when the job leaves the queue (dev.lock held by the poller); the job is freed after. */
typedef void (*device_job_finish)(dmm_device *c, device_job *j, device_job_end how, dmm_status status);

struct device_job {
    device_job_finish finish;
    void *owner; /* the segment (tag or graph) the job works on */
    dmm_event ev; /* the job's own event, destroyed after its finish (none after a loss); NULL = none */
    bool last;    /* a decommit covering the whole segment (its failure is the segment's) */
};

/* ---- segments (segment.c) ---- */
/* One live block of a segment: its offset, rounded and requested sizes. */

typedef struct device_segment {
    dmm_allocation a;    /* an allocation of the arena: VA only (tags) or committed in pieces (graphs) */
    uint64_t committed;  /* [0, committed) is backed (while resident) */
    dmm_spans free;      /* the free spans of [0, a.bytes), coalesced */
    dmm_u64map lens;     /* the live blocks: offset → length */
    dmm_u64map reqs;     /* offset → requested bytes (the same offsets as lens) */
    size_t count;        /* live blocks */
    uint64_t live_bytes; /* Σ live len */
} device_segment;

/* ---- tags (tags.c, offload.c) ---- */
enum { SEG_RESIDENT = 0, SEG_PENDING = 1, SEG_OFFLOADED = 2 };
enum { TAG_RESIDENT = 0, TAG_OFFLOADING = 1, TAG_OFFLOADED = 2 };

typedef struct tag_segment {
    struct tag_segment *next;
    int tag;                 /* the tag's id */
    dmm_stream stream;       /* the stream its blocks are allocated on: a block freed is reused only in that
                                stream's order, as the pool's heaps are (no other stream's malloc takes it) */
    device_segment seg;       /* VA-only; [0, seg.committed) backed while resident */
    uint64_t restored;       /* while OFFLOADED: [0, restored) is mapped again (a restore in progress) */
    int state;               /* SEG_* */
    void *host;              /* pinned copy (offload to host) */
    uint64_t host_bytes;     /* its size */
    uint64_t saved_bytes;    /* bytes the last offload copied */
    uint64_t decommit_ns;    /* CLOCK_MONOTONIC when the last decommit ran */
    dmm_stream last_stream;  /* the stream of the last free (gates the segment's release) */
    /* offload pieces: piece_ev[k] is recorded after piece k's copy and gates the decommit of [0, end of
     * piece k); the last piece's decommit covers [0, committed) */
    dmm_event piece_ev[DMM_DEVICE_OFFLOAD_PIECES];
    uint32_t jobs_queued;    /* decommits the last offload queued */
    uint32_t jobs_left;      /* of those, still in the queue (SEG_PENDING ⇔ jobs_left > 0) */
} tag_segment;

typedef struct device_tag {
    int state;               /* TAG_* */
    int mode;                /* of the last offload */
    tag_segment *segs;
    dmm_event ev;            /* recorded after the offload's copies */
    uint32_t pending;        /* segments with decommits queued */
    uint64_t offloads, restores;
    uint64_t offload_call_ns, offload_done_ns, restore_ns; /* CLOCK_MONOTONIC */
    /* polls that found the offload still in progress: while OFFLOADING, polls − polls_mark (the
     * context's polls when it began); frozen here when it ends */
    uint64_t pending_polls, polls_mark;
    dmm_status failure;      /* a segment's last decommit failed, or one was quarantined: memory stays mapped */
} device_tag;

/* ---- graphs (graphs.c) ---- */
enum { GSEG_AWAKE = 0, GSEG_MOVING = 1, GSEG_ASLEEP = 2 };

typedef struct graph_segment {
    struct graph_segment *next;
    device_segment seg;       /* [0, usable) committed before any capture (while AWAKE) */
    uint64_t usable;         /* the segment's mapped front, where blocks go: a.bytes until a fit gave the rest
                                back (dmm_device_graph_fit); sleep and wake move [0, usable) */
    uint64_t high;           /* the highest end any block of it reached since a capture took it */
    uint64_t capture_id;     /* the capture that owns it (of a shared pool: the first that took it); 0 = idle */
    uint64_t pool;           /* ≠ 0: it belongs to that shared graph pool, whose captures all take from it */
    bool released;           /* the owner's graph is gone (of a pool: every graph of it): idle once nothing is
                                live */
    bool reserved;           /* idle and promised to the next capture by a reserve: trims keep it */
    uint64_t reserved_for;   /* the shared pool the reserve was made for (0: any capture); a fit of that pool's
                                capture hands it to trims when the pool's memory served the capture */
    dmm_event ev;            /* recorded at the release: the segment is reusable once it completed */
    dmm_stream capture_stream; /* the stream of the last capture served from it (a sleep asks whether it
                                  still captures) */
    int sleep;               /* GSEG_*: MOVING while a sleep or wake works on it outside the lock (no capture,
                                reserve or trim touches it then); ASLEEP: decommitted, its range kept */
    bool broken;             /* a sleep's unmap was quarantined: it never wakes (its graphs cannot replay) */
    void *host;              /* ASLEEP after a sleep to host: its bytes, pinned */
    uint64_t host_bytes;
} graph_segment;

/* ---- the pool's live blocks (blocks.c) ---- */
/* The pool keeps its blocks to itself; once block tracking is on, the device keeps their addresses,
 * sizes and streams too, so that a snapshot can lay every block out in address order (tag and graph
 * blocks are in their segments already). Sharded by address, one lock each, so threads on their own
 * streams rarely meet. Off by default: it costs a device malloc/free pair 35-75 ns (measured on the
 * host driver: 40 → 75-115 ns). */
#define DMM_DEVICE_BLOCK_SHARDS 64

typedef struct device_block {
    uint64_t len;      /* rounded bytes; 0 marks a free record */
    uint64_t req;      /* requested bytes; in a free record: the next free record's index + 1 (0: none) */
    dmm_stream stream; /* the stream it was allocated on */
    uint32_t context;  /* the history's context number of its allocation (0: none) */
} device_block;

typedef struct device_block_shard {
    _Alignas(128) pthread_mutex_t mu; /* a shard per line pair (the array comes from aligned_alloc) */
    dmm_u64map at;                    /* address → index in recs */
    device_block *recs;
    size_t n, cap;                    /* records used (live or free) and allocated */
    size_t free_head;                 /* the first free record's index + 1 (0: none) */
} device_block_shard;

/* ---- the pool's recent events (history.c) ---- */
/* While on, a ring of the pool's last events in PyTorch's trace vocabulary, for device_traces of a
 * snapshot in PyTorch's layout: blocks handed out and freed, chunks mapped and unmapped. */
enum { DEVICE_EV_ALLOC = DMM_DEVICE_EVENT_ALLOC, DEVICE_EV_FREE = DMM_DEVICE_EVENT_FREE, DEVICE_EV_MAP = DMM_DEVICE_EVENT_MAP,
       DEVICE_EV_UNMAP = DMM_DEVICE_EVENT_UNMAP };

typedef struct history_event {
    uint64_t addr, size; /* a block: its address and rounded size; a map or unmap: its range */
    uint64_t stream;     /* a block's stream (0 for maps and unmaps: the pool's runs are shared by streams) */
    uint64_t t_us;       /* CLOCK_MONOTONIC in µs */
    uint32_t action;     /* DEVICE_EV_* */
    uint32_t context;    /* the context function's number for a block event (0: none) */
} history_event;

/* A context function and its argument, as set together; kept until the device goes (a thread may still
 * be calling one that was replaced). */
typedef struct history_context {
    dmm_device_context_fn fn;
    void *arg;
    struct history_context *older; /* every record made before it (freed with the device) */
} history_context;

typedef struct device_history {
    _Atomic int on;      /* read without the lock by the hooks */
    pthread_mutex_t mu;  /* a leaf */
    history_event *ring;   /* cap entries; the oldest at (head + cap - count) % cap */
    size_t cap, head, count;
    uint64_t dropped;    /* events the ring let go of (the oldest) since it was turned on */
    uint32_t skip;       /* 1 << DEVICE_EV_* of the kinds not kept */
    history_context *_Atomic context; /* NULL: none; read without the lock by malloc and free */
    history_context *made;            /* the newest record made (a list through `older`) */
} device_history;

/* ---- the recorder (record.c) ---- */
struct gzFile_s; /* zlib's gzFile, without zlib.h here */

/* Distinct stream ids a trace may carry (the reader's limit, tools/trace.h): the default stream is
 * 0, the others 1..63 in order of first use; later streams share id 63 (counted in streams_folded). */
#define DMM_DEVICE_RECORD_STREAMS 64

typedef struct device_recorder {
    _Atomic int active;        /* 1 while recording: written under mu, read without it by the hooks */
    _Atomic int broken;        /* a write failed: events are no longer formatted (the file is lost) */
    pthread_mutex_t mu;        /* the events: ids, maps, counts, the buffer being filled */
    pthread_mutex_t file_mu;   /* the gzip stream, the spare buffer, write_failure (order: mu → file_mu) */
    struct gzFile_s *gz;
    char *path;                /* the file's, for sentences */
    char *buf, *spare;         /* the buffer being filled (mu) and the other one (file_mu; NULL while written) */
    size_t used;               /* bytes of buf filled */
    dmm_u64map ids, bytes;     /* live recorded blocks: address → trace id, address → rounded bytes */
    uint64_t next_id;          /* the next allocation's id (ids start at 1) */
    uint64_t t0_ns;            /* the clock at the first event (t_us counts from it) */
    bool started;              /* an event was recorded (t0_ns is set) */
    bool default_used;         /* an allocation on the default stream (id 0) was recorded */
    uint64_t live, peak;       /* Σ bytes of live recorded blocks, and its maximum */
    uint64_t allocs, frees, untracked_frees, folded;
    dmm_stream streams[DMM_DEVICE_RECORD_STREAMS]; /* streams[k] has id k; streams[0] = NULL (default) */
    uint32_t nstreams;
    dmm_status failure;        /* the first failure (mu): host memory */
    char why[512];             /* its sentence */
    dmm_status write_failure;  /* the first failed write (file_mu) */
    char write_why[512];
} device_recorder;

typedef struct device_import device_import; /* imports.c */

/* ---- the context ---- */
/* A count with a resettable peak. */
typedef struct device_count {
    _Atomic uint64_t cur, peak, total;
} device_count;

/* The counts of one of torch's size classes (its stats' large_pool / small_pool): blocks whose rounded
 * size is above 1 MiB are large, the others small, as in torch's caching allocator. */
#define DEVICE_SMALL_BYTES ((uint64_t)1 << 20)
enum { DEVICE_CLASS_LARGE = 0, DEVICE_CLASS_SMALL = 1 };
typedef struct size_class {
    device_count alloc_bytes, req_bytes, blocks;
    _Atomic uint64_t freed_bytes, req_freed, frees;
} size_class;

struct dmm_device {
    /* what every malloc and free reads, in the first cache line */
    dmm_pool *pool;
    uint64_t reserve;        /* the arena's VA reservation (≤ 2^63): no request above it is served */
    _Atomic uint64_t queued; /* our jobs in the deferred queue */
    _Atomic int track_blocks; /* 1 once block tracking is on (never off again): the table is kept */
    _Atomic int capture_check; /* 1: malloc asks a non-default stream's capture status (dmm_device_set_capture_check) */
    bool can_capture;        /* the driver tells a capturing stream (its stream_capture_status slot) */
    bool pool_only;          /* dmm_device_config.pool_only: the pool serves and counts every malloc */
    bool exportable;         /* dmm_device_config.exportable: the arena's handles can be exported */

    dmm_driver *drv;         /* not owned; its latch says whether the device is lost */
    dmm_device_id dev;
    uint64_t granule, pool_va, tag_va, block_align;
    uintptr_t va;            /* where the reservation starts (dmm_device_contains) */
    uint64_t restore_piece, restore_first, restore_copy; /* dmm_device_config's restore_*_bytes */

    dmm_governor *gov;       /* not owned */
    dmm_holder *holder;      /* the device's own, or the config's (own_holder false: not ours to unregister) */
    bool own_holder;
    dmm_lease_id lease;      /* device: charged by the arena through `accounting` (its stats: mapped, owned) */
    dmm_lease_id host_lease; /* host tier: the pinned copies */
    dmm_accounting accounting; /* the governor's hook for `lease`, handed to the arena */

    dmm_mechanism *arena;
    device_history hist;      /* off unless dmm_device_history (history.c) */
    dmm_deferred *q;

    /* what the arena has mapped (= committed) and owns is the lease's, counted by the governor
     * (dmm_lease_stats_get, with resettable peaks; dmm__device_mapped / _owned) */
    /* counted by malloc/free across pool, tags and graphs: rounded bytes, requested bytes, blocks; and the
     * same by torch's size classes, by_class[DEVICE_CLASS_LARGE / _SMALL] (rounded size > / ≤ 1 MiB) */
    device_count alloc_bytes, req_bytes, blocks;
    size_class by_class[2];
    _Atomic uint64_t freed_bytes, req_freed, frees, ooms, retries, capture_mallocs, capture_refusals, tag_mallocs;

    pthread_mutex_t lock;    /* tags, graphs, polls of the queue */
    uint64_t polls;          /* polls that found jobs queued (dev.lock) */
    bool jobs_taken_back;    /* after a confirmed loss: every job was taken back unrun (dev.lock) */
    device_tag tags[DMM_DEVICE_MAX_TAGS];
    graph_segment *graphs;
    bool graphs_moving;      /* a graph sleep or wake is under way (one at a time) */
    uint64_t graph_sleeps, graph_wakes;
    struct {
        uint64_t capture_id, pool;
        dmm_stream stream; /* the capture's stream (a fit asks whether it still captures) */
    } graph_joins[DMM_DEVICE_GRAPH_JOINS]; /* live graphs of shared pools */
    uint32_t njoins;
    uint64_t host_bytes;     /* Σ pinned copies (tags' and graphs') */
    device_recorder rec;      /* off unless dmm_device_record_start (record.c); its own locks, leaves */
    device_block_shard *pool_blocks; /* DMM_DEVICE_BLOCK_SHARDS shards (blocks.c); their locks are leaves */
    device_import *imports;               /* regions of a holder process mapped here (imports.c; dev.lock) */
};

#endif /* DMM_DEVICE_TYPES_H */
