/* adapters/torch/adapter.h — the torch adapter's core, internal to libdmm_torch.so and its tests.
 *
 * The core is written over any dmm_driver plus a small table of extras (`dmm_torch_ext`) that the
 * driver contract does not have: the capture status of a stream, and pinned host memory. The CUDA
 * entry points (torch_cuda.c) fill the extras from libcuda; the host unit test fills them with malloc
 * and a capture switch of its own, so every decision of the adapter runs on a machine without a GPU.
 *
 *   adapter.c   one context per device: arena → pool, the governor's lease, routing of malloc/free
 *               (capture → graph segments, a tag → tag segments, else the pool), stats, JSON
 *   tags.c      tagged allocations in tag segments, offload (copy, event, deferred decommit) and restore
 *   graphs.c    graph segments: memory mapped before a capture, the only memory a capture is served from
 *   suballoc.c  the first-fit span allocator that tag and graph segments share
 *
 * Lock order: ctx.lock → (pool → arena → driver). The hot path (pool malloc/free) takes no ctx lock.
 */
#ifndef DMM_TORCH_ADAPTER_H
#define DMM_TORCH_ADAPTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/json.h"
#include "dmm/dmm.h"

/* ---- extras beyond the driver contract ---- */
typedef struct dmm_torch_ext {
    void *user;
    /* *capturing = true while `stream` captures a CUDA graph; *id = the capture's id (0 = unknown).
     * NULL slot: streams never capture. */
    dmm_status (*capture_status)(void *user, dmm_stream stream, bool *capturing, uint64_t *id);
    /* Page-locked host memory for offload copies (NULL slots: offload to host is unsupported). */
    dmm_status (*host_alloc)(void *user, size_t bytes, void **out);
    void (*host_free)(void *user, void *p);
} dmm_torch_ext;

typedef struct dmm_torch_config {
    uint32_t size;              /* sizeof(dmm_torch_config) */
    uint64_t pool_va_bytes;     /* VA of the pool; 0 = the device's total memory rounded up to a power of two */
    uint64_t reserve_bytes;     /* the arena's VA reservation; 0 = 4 × pool_va_bytes */
    uint64_t tag_segment_bytes; /* VA of one tag segment; 0 = pool_va_bytes / 2 */
    uint64_t cache_limit_bytes; /* the arena's handle cache; 0 = 8 MiB */
    uint64_t limit_bytes;       /* the device's budget (owned bytes); 0 = unlimited */
    uint32_t retain_permille;   /* the pool's retention (dmm_pool_config); 0 = the pool's default */
    /* restore's pieces (tags.c restore_piece): 0 = the default; UINT64_MAX = one commit per segment;
     * else the largest piece, rounded up to the granule */
    uint64_t restore_piece_bytes;
    uint64_t restore_first_bytes; /* 0 = every piece the same; else the first piece, doubling up to the largest */
    uint64_t restore_copy_bytes;  /* 0 = one copy per piece; else each piece's copy in parts of this many bytes */
} dmm_torch_config;

/* Offload modes (the `mode` of dmm__torch_offload). */
enum { DMM_TORCH_TO_HOST = 0, DMM_TORCH_DISCARD = 1 };

/* Largest number of distinct tag names per process, and of nested tag scopes per thread. */
#define DMM_TORCH_MAX_TAGS 32
#define DMM_TORCH_TAG_DEPTH 8
#define DMM_TORCH_TAG_NAME 64
/* Most pieces one segment's offload is cut into (each: a copy, an event, a queued decommit). */
#define DMM_TORCH_OFFLOAD_PIECES 16

/* ---- the span allocator (suballoc.c) ---- */
typedef struct sa_span {
    uint64_t off, len;
    struct sa_span *next; /* address order */
} sa_span;

typedef struct sa_live {
    uint64_t off, len, req;
    bool used;
} sa_live;

typedef struct suballoc {
    uint64_t size;       /* bytes managed: [0, size) */
    sa_span *free;       /* free spans, address-ordered, coalesced */
    sa_live *slots;      /* live blocks by offset (open addressing) */
    size_t cap, count;   /* slots, live blocks */
    uint64_t live_bytes; /* Σ live len */
} suballoc;

bool dmm__sa_init(suballoc *sa, uint64_t size);
void dmm__sa_fini(suballoc *sa);
/* First fit: the lowest free offset with `len` bytes (len a multiple of the caller's alignment). */
bool dmm__sa_alloc(suballoc *sa, uint64_t len, uint64_t req, uint64_t *off);
/* false when `off` is not a live block (nothing changed). */
bool dmm__sa_free(suballoc *sa, uint64_t off, uint64_t *len, uint64_t *req);
/* The end of the highest live block (0 when none). */
uint64_t dmm__sa_high(const suballoc *sa);
/* Calls fn for every live block (any order). */
void dmm__sa_each(const suballoc *sa, void (*fn)(void *u, uint64_t off, uint64_t len, uint64_t req), void *u);

/* ---- segments ---- */
enum { SEG_RESIDENT = 0, SEG_PENDING = 1, SEG_OFFLOADED = 2 };
enum { TAG_RESIDENT = 0, TAG_OFFLOADING = 1, TAG_OFFLOADED = 2 };

typedef struct tseg {
    struct tseg *next;
    int tag;                 /* the tag's id */
    dmm_allocation a;        /* a VA-only allocation of the arena */
    uint64_t committed;      /* [0, committed) is backed (while resident) */
    uint64_t restored;       /* while OFFLOADED: [0, restored) is mapped again (a restore in progress) */
    suballoc sa;
    int state;               /* SEG_* */
    void *host;              /* pinned copy (offload to host) */
    uint64_t host_bytes;     /* its size */
    uint64_t saved_bytes;    /* bytes the last offload copied */
    uint64_t decommit_ns;    /* CLOCK_MONOTONIC when the last decommit ran */
    dmm_stream last_stream;  /* the stream of the last free (gates the segment's release) */
    /* offload pieces: piece_ev[k] is recorded after piece k's copy and gates the decommit of [0, end of
     * piece k); the last piece's decommit covers [0, committed) */
    dmm_event piece_ev[DMM_TORCH_OFFLOAD_PIECES];
    uint32_t jobs_queued;    /* decommits the last offload queued */
    uint32_t jobs_left;      /* of those, still in the queue (SEG_PENDING ⇔ jobs_left > 0) */
} tseg;

typedef struct ttag {
    int state;               /* TAG_* */
    int mode;                /* of the last offload */
    tseg *segs;
    dmm_event ev;            /* recorded after the offload's copies */
    uint32_t pending;        /* segments with decommits queued */
    uint64_t offloads, restores;
    uint64_t offload_call_ns, offload_done_ns, restore_ns; /* CLOCK_MONOTONIC */
    uint64_t pending_polls;  /* polls that found the offload still in progress */
    dmm_status failure;      /* a segment's last decommit failed, or one was quarantined: memory stays mapped */
} ttag;

typedef struct gseg {
    struct gseg *next;
    dmm_allocation a;        /* fully committed before any capture */
    suballoc sa;
    uint64_t capture_id;     /* the capture that owns it; 0 = idle */
    bool released;           /* the owner's graph is gone: idle once nothing is live */
    dmm_event ev;            /* recorded at the release: the segment is reusable once it completed */
} gseg;

/* A request of ours in the deferred queue (its `user`). */
enum { JOB_DECOMMIT = 0, JOB_RELEASE_TSEG = 1, JOB_RELEASE_GSEG = 2 };
typedef struct tjob {
    int kind;
    tseg *ts;
    gseg *gs;
    dmm_event ev; /* the job's own event (releases); decommits use their segment's piece events */
    bool last;    /* a decommit covering the whole segment (its failure is the segment's) */
} tjob;

/* A count with a resettable peak. */
typedef struct tcount {
    _Atomic uint64_t cur, peak, total;
} tcount;

typedef struct tctx {
    dmm_driver *drv;
    dmm_torch_ext ext;
    dmm_device dev;
    uint64_t granule, pool_va, tag_va, block_align;
    uint64_t restore_piece, restore_first, restore_copy; /* dmm_torch_config's restore_*_bytes */

    dmm_governor *gov;       /* not owned */
    dmm_holder *holder;
    dmm_lease_id lease;      /* device: charged by the arena through `acct` */
    dmm_lease_id host_lease; /* host tier: the pinned copies */
    dmm_accounting inner;    /* the governor's hook for `lease` */
    dmm_accounting acct;     /* ours: counts, then forwards to `inner` */

    dmm_mechanism *arena;
    dmm_pool *pool;
    dmm_deferred *q;

    /* counted by the hook: what the arena has mapped (= committed) and owns, with resettable peaks */
    tcount mapped, owned;
    /* counted by malloc/free across pool, tags and graphs: rounded bytes, requested bytes, blocks */
    tcount alloc_bytes, req_bytes, blocks;
    _Atomic uint64_t freed_bytes, frees, ooms, retries, capture_mallocs, capture_refusals, tag_mallocs;
    _Atomic uint64_t queued; /* decommits in the deferred queue */

    pthread_mutex_t lock;    /* tags, graphs, polls of the queue */
    ttag tags[DMM_TORCH_MAX_TAGS];
    gseg *graphs;
    uint64_t host_bytes;     /* Σ pinned copies */
    bool lost_confirmed;     /* the device was lost and the context confirmed terminated (ctx.lock) */
} tctx;

/* ---- adapter.c ---- */
dmm_status dmm__torch_create(dmm_driver *drv, const dmm_torch_ext *ext, dmm_governor *gov,
                             const dmm_torch_config *cfg, tctx **out);
/* BUSY (nothing changed) while anything is live or queued. */
dmm_status dmm__torch_destroy(tctx *c);
/* Device loss (dmm/pool.h "Device loss"). Once a driver call of this context — the pool's, the
 * arena's, the deferred queue's or the adapter's own — reported DMM_ERR_DEVICE_LOST, the arena is
 * marked lost and the adapter makes no driver call any more: offload, offload_wait, restore,
 * release_host, empty_cache, graph_reserve, graph_release and poll return DMM_ERR_DEVICE_LOST with a
 * sentence, malloc is refused (by the pool or the arena), frees are accepted as bookkeeping, destroy
 * is refused (DMM_ERR_DEVICE_LOST, nothing changed) until the confirmation. confirm_lost, called once
 * the caller tore the CUDA context down: confirms it on the arena (dmm_arena_confirm_context_terminated,
 * which refunds everything), takes every queued decommit and release back unrun, marks every tag
 * offloaded (its failure DMM_ERR_DEVICE_LOST: the contents are gone, save the pinned copies) and its
 * segments gone; then destroy succeeds with blocks still live, without a driver call, and frees all
 * host memory (pinned copies through ext.host_free). Confirming the arena directly works too (destroy
 * then does the rest). DMM_ERR_INVALID_ARGUMENT when the device was not lost. Events are never
 * destroyed after the loss (the context took them). */
dmm_status dmm__torch_confirm_lost(tctx *c);
/* Whether the device was lost (asks the arena; no driver call). */
bool dmm__torch_lost(tctx *c);
/* DMM_OK, or DMM_ERR_DEVICE_LOST with a sentence naming `op`, when the device was lost. */
dmm_status dmm__torch_refuse_lost(tctx *c, const char *op);
/* When s is DMM_ERR_DEVICE_LOST: the arena is marked lost (the last error stays). Returns s. */
dmm_status dmm__torch_note_loss(tctx *c, dmm_status s);
dmm_status dmm__torch_malloc(tctx *c, size_t bytes, dmm_stream stream, void **out);
dmm_status dmm__torch_free(tctx *c, void *ptr, size_t bytes, dmm_stream stream);
/* Gives back the pool's free chunks (trim + the arena's handle cache), empty tag segments and idle graph
 * segments. The segments go behind an event (recorded on the stream of their last use) through the
 * deferred queue: those whose event completed are released by this call's poll, the others at a later
 * poll. *released (optional) = the pool's bytes that left the mapping + the bytes of the segments given
 * back or QUEUED to go: not a count of what has already left the device; a queued release that then
 * fails puts its segment back in service (the poll reports it). The driver's census, or the stats'
 * mapped bytes after a poll, say what really left. */
dmm_status dmm__torch_empty_cache(tctx *c, uint64_t *released);
dmm_status dmm__torch_reset_peaks(tctx *c);
dmm_status dmm__torch_set_limit(tctx *c, uint64_t bytes); /* 0 = unlimited */
dmm_status dmm__torch_stats_json(tctx *c, char *buf, size_t cap, size_t *needed);
dmm_status dmm__torch_snapshot_json(tctx *c, char *buf, size_t cap, size_t *needed);
/* Runs the decommits whose events completed; *queued = decommits still waiting. Never waits. */
dmm_status dmm__torch_poll(tctx *c, uint64_t *queued);
/* Whether the capture check runs on every malloc (default on). */
void dmm__torch_set_capture_check(bool on);

void dmm__torch_count_add(tcount *t, uint64_t v);
void dmm__torch_count_sub(tcount *t, uint64_t v);
uint64_t dmm__torch_now_ns(void);
/* Polls with ctx.lock held; a failure is a queued request that failed and was taken out. */
dmm_status dmm__torch_poll_locked(tctx *c);

/* ---- tags.c ---- */
/* Tag scopes of the calling thread (names are interned per process). */
dmm_status dmm__torch_tag_begin(const char *name);
dmm_status dmm__torch_tag_end(void);
/* The innermost tag of this thread (its id ≥ 0), or -1. */
int dmm__torch_tag_current(void);
/* The id of a name, or -1 when no allocation was ever tagged with it. */
int dmm__torch_tag_find(const char *name);
const char *dmm__torch_tag_name(int id);
dmm_status dmm__torch_tag_malloc(tctx *c, int tag, size_t bytes, void **out);
/* DMM_ERR_UNKNOWN_ALLOCATION when ptr is in no tag segment (ctx.lock held). */
dmm_status dmm__torch_tag_free_locked(tctx *c, void *ptr, uint64_t *len, uint64_t *req);
dmm_status dmm__torch_offload(tctx *c, const char *tag, int mode, dmm_stream stream);
dmm_status dmm__torch_restore(tctx *c, const char *tag, dmm_stream stream);
/* Blocks until the tag's offload has decommitted (waits on the offload's own event, never on the
 * device or a stream). */
dmm_status dmm__torch_offload_wait(tctx *c, const char *tag);
dmm_status dmm__torch_release_host(tctx *c, const char *tag);
/* on_done of the deferred queue (runs inside a poll, ctx.lock held by the poller). */
void dmm__torch_decommit_done(void *user, const dmm_deferred_request *r, const dmm_release_outcome *o);
/* A segment's queued decommit left the queue: ran (`failure` = DMM_OK, or DMM_ERR_QUARANTINED) or was
 * taken out after it FAILED (`failure` = its status). The segment is offloaded once its last one left. */
void dmm__torch_decommit_finished(tctx *c, tjob *j, dmm_status failure);
/* Frees a segment's host copy, piece events, span allocator and itself (its allocation is gone). */
void dmm__torch_tseg_free(tctx *c, tseg *g);
/* Releases every segment of every tag that holds nothing live (for destroy). */
void dmm__torch_tags_fini(tctx *c);
/* After a confirmed loss: a queued decommit of `j` was taken back unrun (ctx.lock held). */
void dmm__torch_decommit_lost(tctx *c, tjob *j);
/* After a confirmed loss: every tag offloaded, its segments gone (kept for their bookkeeping). */
void dmm__torch_tags_mark_lost(tctx *c);
/* After a confirmed loss: frees every tag segment (pinned copies included) and tag; no driver call. */
void dmm__torch_tags_drop_lost(tctx *c);
/* Frees a segment without a driver call (its events went with the context). */
void dmm__torch_tseg_free_lost(tctx *c, tseg *g);
/* JSON of the tags (appended to j with the core writer, core/json.h). */
void dmm__torch_tags_json_locked(tctx *c, dmm_json *j, bool blocks);
void dmm__torch_tags_totals_locked(tctx *c, uint64_t *live, uint64_t *committed);

/* ---- graphs.c ---- */
dmm_status dmm__torch_graph_malloc(tctx *c, size_t bytes, dmm_stream stream, uint64_t capture_id, void **out);
dmm_status dmm__torch_graph_free_locked(tctx *c, void *ptr, uint64_t *len, uint64_t *req);
/* Maps `bytes` now (outside any capture) for later captures to use. */
dmm_status dmm__torch_graph_reserve(tctx *c, uint64_t bytes, dmm_stream stream);
/* The graph of capture `id` is gone: its segments become idle once nothing in them is live, and
 * reusable once an event recorded now on `stream` (where its last replay ran) completed. */
dmm_status dmm__torch_graph_release(tctx *c, uint64_t capture_id, dmm_stream stream);
/* Releases idle graph segments (ctx.lock held; behind their events); returns their bytes. */
uint64_t dmm__torch_graphs_trim_locked(tctx *c);
/* Idle segments whose event completed become reusable (ctx.lock held; never during a capture). */
void dmm__torch_graphs_sweep_locked(tctx *c);
void dmm__torch_graphs_json_locked(tctx *c, dmm_json *j);
void dmm__torch_graphs_totals_locked(tctx *c, uint64_t *live, uint64_t *committed);
/* After a confirmed loss: frees every graph segment; no driver call. */
void dmm__torch_graphs_drop_lost(tctx *c);

#endif /* DMM_TORCH_ADAPTER_H */
