/* SPDX-License-Identifier: Apache-2.0 */
/* src/pool/types.h — the pool's types and their invariants, the hot path's inline helpers, and what
 * the pool's files offer each other. Never installed.
 *
 * The files, from the top down (a file calls only files below it; none calls back up):
 *   pool.c        the API: create/destroy, streams → heaps, malloc/free and the hot path, trim
 *   stock.c       the stock thread (stock_bytes > 0): commits memory ahead of a growing pool's mallocs
 *   pool_stats.c  stats (gather, get, common, JSON) and the dmm_pool_check entry
 *   growth.c      malloc's slow path: growth planning, then plan → carve → drive → fix-up; a planned
 *                 malloc's place grown and taken
 *   follow.c      a heap that learns its loop: records, the look for a period, the plan followed
 *   planner.c     the planner thread: a heap's loop (a job) planned off the allocating threads, the plan
 *                 installed
 *   placement.c   blocks of known lifetimes placed at fixed offsets (also tools/plan.c's)
 *   regions.c     VA regions (heaps take and shed them), trim and empty_cache
 *   fences.c      events: the event free list, fences, polls, cross-stream frees
 *   moves.c       chunks: commit, decommit and alias one chunk; the sources of moves and their fix-up;
 *                 reaping the old places of aliased chunks
 *   layout.c      the layout grown through (recorded), and a warm layout's handles committed ahead
 *                 of the growths that take them
 *   mapping.c     the one way the files above map and unmap the pool's VA (an observer is told of each
 *                 change), and what is mapped now (dmm_pool_committed)
 *   loss.c        the pool's side of a device loss (the loss itself is the driver's, src/driver/call.h)
 *   worker.c      the pool's own threads (the stock's, the planner's): start (signals blocked), stop
 *   hot.h         the hot path's inline steps (take a block, count it live), above heap.c
 *   pool_check.c  the expensive invariant check of one heap
 *   heap.c        one heap's bookkeeping: block records, bins (best fit), the live-block hash,
 *                 carving and merging of blocks; no driver call, no lock (callers hold the heap's)
 *
 * Vocabulary. The pool owns one VA-only allocation of the mechanism, [base, base + va_bytes),
 * split into regions of `region` bytes that heaps take when they need VA; physical memory is
 * committed in chunks — one handle each, a whole number of quanta Q = `chunk` bytes at Q-aligned
 * addresses, at most `max_chunk` — recorded in clen[] (length at the chunk's first quantum). A heap (one per stream)
 * tiles each run of its regions with blocks, linked in address order (prev/next):
 *
 *   LIVE          handed out; in the hash; every chunk it touches is mapped
 *   PENDING       freed on another stream; waits for its event (in `pending`, or held by a poller)
 *   FREE          free and mapped: every chunk it touches is mapped; in a bin
 *   UNMAPPED      free VA without backing; whole quanta, no chunk inside; in `unmapped`
 *   COMMITTING    whole quanta, unmapped, being committed by one thread outside the lock
 *   DECOMMITTING  one whole mapped chunk being decommitted (or aliased) by one thread outside the lock
 *   POISONED      one chunk whose decommit went wrong: kept out of use forever
 *   ALIASED       the old place of one whole chunk whose physical memory was mapped again where a
 *                 growth of this heap needed it (an alias: this stream's work may still use the old
 *                 place); still mapped, never handed out; in `aliased`; decommitted (→ UNMAPPED) once
 *                 a completed fence covers its seq
 *   QUICK         freed on the heap's own stream and parked, unmerged, for an exact repeat: a malloc
 *                 of exactly its size takes it back with no bin, split or hash work (deferred
 *                 coalescing); mapped; still in the hash (so a second free of it is refused) and on
 *                 quick[bin_of(size)], or, the last one parked, the heap's `hot` block instead (ahead
 *                 of its list: the next park moves it to its list's head; a heap that records its
 *                 mallocs parks on its lists only, never as `hot`); free in every stat
 *                 (counted out of the live ones at its free); its seq is its free's free_seq. Made
 *                 FREE (dmm__heap_quick_flush, seq kept) before anything reads or changes the free
 *                 layout: malloc's slow path, carving sources, the start of a heap's records, a loop's
 *                 snapshot and a plan's install (follow.c, planner.c)
 *                 (moves, trim, empty_cache), dmm_pool_check, destroy; a malloc that misses the quick
 *                 lists whenever it asks for at most quick_reach bytes (a merge of the parked blocks
 *                 could make a block it fits, or change the one it would take: merged first, a miss is
 *                 placed exactly where it would be without quick lists, so parking changes no
 *                 placement, nor the growths and moves that follow); and whenever parking one more
 *                 would pass the bounds (POOL_QUICK_MAX_*). A stream whose parked blocks keep merging
 *                 unused stops parking for a while (POOL_QUICK_WASTE_LIMIT, POOL_QUICK_SKIP)
 *
 * Invariants (pool_check.c, under the heap's lock):
 *   the blocks of a run tile [run.lo, run.hi) in address order; no two FREE blocks and no two
 *   UNMAPPED blocks are adjacent (coalesced); a FREE block is in bin bin_of(size), an UNMAPPED one
 *   in the unmapped list, a LIVE one in the hash; a QUICK one in the hash and either in quick[bin_of(size)]
 *   or heap.hot (never both);
 *   sizes and addresses are multiples of `align`;
 *   every quantum a LIVE, QUICK, PENDING, FREE, DECOMMITTING, ALIASED or (still mapped) POISONED block touches
 *   lies in a chunk, no chunk reaches into an UNMAPPED block, heap.committed = Σ bytes of those chunks
 *   (an aliased chunk counts at both places: committed counts mappings); an ALIASED block is exactly
 *   one chunk with seq > 0; heap.naliased = #ALIASED; pool.aliased_bytes = Σ ALIASED sizes;
 *   heap.live_bytes = Σ LIVE sizes; heap.live_blocks = #LIVE; heap.hcount = #LIVE + #QUICK;
 *   heap.nquick = #QUICK ≤ quick_park_cap(heap) ≤ POOL_QUICK_MAX_BLOCKS,
 *   heap.quick_bytes = Σ QUICK sizes ≤ POOL_QUICK_MAX_BYTES,
 *   every QUICK size ≤ POOL_QUICK_MAX_BLOCK; bit c of quickmap ⇔ quick[c] != NULL; heap.quick_reach ≥
 *   the bytes of every maximal sequence of FREE and QUICK blocks that holds a QUICK block (0 once merged).
 *   A heap that records its mallocs (follow.c: heap.records) keeps off the hot path: quick_cap = 0 and
 *   no QUICK hot block; one that follows a plan (heap.follow, which implies heap.records) parks nothing.
 *   A FREE block's seq ≥ the heap free_seq of every free merged into it; it is safe to decommit its
 *   whole chunks once seq ≤ heap.safe_seq (a completed fence on the heap's stream covers it).
 */
#ifndef DMM_POOL_TYPES_H
#define DMM_POOL_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/biased_lock.h"
#include "core/core.h"
#include "dmm/pool.h"
#include "driver/call.h"
#include "pool/placement.h"

enum {
    BK_FREE = 1,
    BK_UNMAPPED = 2,
    BK_LIVE = 3,
    BK_PENDING = 4,
    BK_COMMITTING = 5,
    BK_DECOMMITTING = 6,
    BK_POISONED = 7,
    BK_ALIASED = 8,
    BK_QUICK = 9,
};

/* Size classes, in units of `align`: exact below 64 units, then 16 classes per power of two. */
#define POOL_EXACT_BINS 64u
#define POOL_NBINS 896u
#define POOL_BINWORDS (POOL_NBINS / 64u)

/* The bounds of a heap's quick lists: memory parked unmerged stays small (it is free memory that
 * coalesces late, not memory held: every slow path merges it first), and the merge that an overflow
 * triggers stays bounded. Blocks above POOL_QUICK_MAX_BLOCK always merge at their free. */
#define POOL_QUICK_MAX_BLOCKS 64u
#define POOL_QUICK_MAX_BYTES ((uint64_t)64 << 20)
#define POOL_QUICK_MAX_BLOCK ((uint64_t)8 << 20)
/* A stream that does not repeat (POOL_QUICK_WASTE_LIMIT parked blocks merged by misses, no hit in
 * between) merges its next POOL_QUICK_SKIP frees at once, then parks again: parking costs a second
 * hash walk and a merge loop, worth it only when repeats come. */
#define POOL_QUICK_WASTE_LIMIT 32u
#define POOL_QUICK_SKIP 512u

/* The stock (stock.c) is at most the live peak / this: what it may add to the peak is bounded by the
 * pool's own size (1/128: 0.8 %), and a small pool keeps none. At 1/64 the replay of GPT-2's training
 * in gpu/torch_models (models-train) fragmented 0.02 more (docs/benchmarks.md). */
#define POOL_STOCK_SHARE 128u

typedef struct pool_block {
    uintptr_t addr;
    uint64_t size;
    struct pool_block *prev, *next;   /* address neighbours inside the run (NULL at the run's ends) */
    struct pool_block *lnext, *lprev; /* bin / unmapped / pending list links; lnext = hash chain when LIVE */
    uint64_t seq;                 /* FREE: highest free_seq merged in; PENDING: free_seq at the free */
    uint64_t requested;           /* LIVE: bytes as requested */
    union {
        dmm_event ev;             /* PENDING: the event recorded on the freeing stream */
        struct pool_block *qnext;     /* QUICK: the next block of its quick list */
    };
    uint16_t bin;                 /* FREE: its bin; LIVE: bin_of(size); QUICK: its quick list (the same) */
    uint8_t kind;
    uint64_t ord;                 /* LIVE, PENDING, where the heap records: its malloc's ordinal in its heap (hot.h) */
} pool_block;

typedef struct prun {
    uintptr_t lo, hi; /* whole regions */
    pool_block *first;    /* the block at lo (never merged into a predecessor, so stable) */
} prun;

typedef struct pslab {
    struct pslab *next;
} pslab;

/* A whole free chunk that could be decommitted, or aliased (slow path scratch). */
typedef struct pcand {
    pool_block *b; /* the FREE block that held it when listed */
    uintptr_t addr;
    uint64_t bytes;
    uint64_t seq;
    bool alias; /* its fence is pending: it may only be aliased, into a growth of its own heap */
} pcand;

/* A piece of a growth: an unmapped range carved out as COMMITTING, to be filled with moved chunks
 * and then new ones. */
typedef struct ptarget {
    pool_block *b;     /* COMMITTING */
    uint64_t room; /* bytes not yet promised to moved chunks */
    uint64_t done; /* bytes committed so far, from its start */
    uint64_t seq;  /* the highest seq of the chunks aliased into it (0: none): its free blocks' seq */
} ptarget;

/* follow.c: a heap's record of its last mallocs (a ring by malloc ordinal, of POOL_RECORDS_FIRST
 * records, widened once to POOL_RECORDS_MOST when the heap grows and finds no loop in it), and the plan
 * of a repeating loop that it follows. Times are the heap's events (its mallocs and frees, from 1). */
#define POOL_RECORDS_FIRST 131072u
#define POOL_RECORDS_MOST 1048576u
typedef struct precord {
    uint64_t t_alloc; /* the heap's event count at the malloc */
    uint32_t units;   /* bytes >> align_shift (a block of 2^32 units or more is recorded as 0: never planned) */
    uint32_t life;    /* events from the malloc to the free (0: not freed yet; UINT32_MAX: that many or more) */
} precord;

/* One malloc of the loop: its size and, planned, where it goes. */
typedef struct pslot {
    uint64_t size;
    uint64_t off;      /* from the plan's base; UINT64_MAX: not planned (best fit, as without a plan) */
    uintptr_t anchor;  /* the start of the block the plan has right below the free run that holds the
                          slot's place when it is allocated (0: the run's first block) */
} pslot;

typedef struct pfollow {
    pslot *slots;
    uint64_t period;   /* mallocs per turn of the loop */
    uint64_t phase;    /* a malloc ordinal where slot 0 falls; the plan is followed from `from` on */
    uint64_t from;
    uintptr_t base;    /* the run's start: offsets count from here */
    uint64_t extent;   /* the plan's extent (bytes from base) */
    uint64_t turn_misses; /* mallocs of the current turn that asked another size than planned */
    uint64_t turn;        /* the turn those are counted in */
    uint64_t turn_other;  /* mallocs of that turn that went elsewhere for any reason */
    uint64_t turn_start;  /* the malloc count when that turn started */
    bool shed_due;        /* a turn went by with no growth: give back what lies outside the plan */
    /* a turn of other sizes suspends the plan (its mallocs go above the plan's range) until the last
     * POOL_RESYNC_GRAM sizes match the plan's somewhere: it then goes on from there (the loop came back
     * after something else, as training does after an evaluation); one suspended for `give_up` mallocs
     * is dropped */
    bool suspended;
    uint64_t suspended_at;
    uint32_t misses_in_a_row; /* mallocs in a row of another size than planned */
    uint32_t resyncs;         /* since the last turn that fitted the plan */
    uint32_t unfit_turns;     /* whole turns in a row that did not fit the plan */
    uint64_t recent[32];  /* the last sizes asked (a ring, by malloc count) */
    uint64_t *used;       /* bit q: the plan places something in the q-th chunk from base (kept mapped) */
    size_t used_chunks;
    uint64_t *gaps;       /* pairs [lo, hi) from base where the plan places nothing, in order; the last
                             is [extent, UINT64_MAX) */
    size_t ngaps;
    uint64_t *gram_key;   /* hash of the POOL_RESYNC_GRAM sizes ending at slot gram_slot[i] (0: empty) */
    uint32_t *gram_slot;
    size_t gram_mask;
} pfollow;
#define POOL_RESYNC_GRAM 32u

/* The resync key of POOL_RESYNC_GRAM sizes, oldest first (never 0). */
static inline uint64_t dmm__plan_gram_hash(const uint64_t *sizes) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (unsigned i = 0; i < POOL_RESYNC_GRAM; i++) x = (x ^ sizes[i]) * 0x100000001B3ull;
    return x | 1;
}

/* A turn of a heap's loop to plan (follow.c snapshots it under the heap's lock; planner.c plans it). */
typedef struct pplan_job {
    struct pplan_job *next;
    struct pool_heap *h;
    uint64_t serial;       /* the heap's plan_serial when posted: the install drops a stale job's plan */
    dmm_place_item *items; /* the planned mallocs first (`planned` of them), then the fixed blocks */
    size_t nitems, planned;
    uint32_t *slot_of;     /* per planned item: its slot */
    pslot *slots;          /* `period` of them: sizes set, offsets UINT64_MAX (not planned) */
    uint64_t period, phase;
    uint32_t horizon;      /* the turn's events */
    uintptr_t base;
    uint64_t ceiling;      /* the most the plan's extent may reach (whole chunks) */
    uint64_t chunk;
} pplan_job;

/* A thread of the pool's own (worker.c starts and stops it; stock.c and planner.c run one each), under
 * its mutex `m`: it waits on `wake` for work or `stop`; a caller that waits for its work to be done
 * waits on `idle`, whose clock is CLOCK_MONOTONIC (those waits are bounded). */
typedef struct pworker {
    pthread_mutex_t m;
    pthread_cond_t wake, idle;
    pthread_t thread;
    bool running; /* started, not yet joined */
    bool stop;
} pworker;

/* The planner thread's state (planner.c), under w.m (dmm_pool_plan_sync waits on w.idle). */
typedef struct pplanner {
    pworker w;
    pplan_job *queue;    /* FIFO */
    _Atomic uint64_t outstanding; /* queued + in flight */
    _Atomic bool cancel;          /* set at stop: the placement in flight gives up */
} pplanner;

typedef enum fence_state { FENCE_IDLE = 0, FENCE_BUSY = 1, FENCE_RECORDED = 2 } fence_state;

typedef struct pool_heap {
    /* the heap's lock, biased to the thread that uses the stream (core/biased_lock.h); heaps are
     * aligned to line pairs (DMM_SHARING_BYTES): threads on distinct streams share no line, nor a
     * line's prefetch partner */
    _Alignas(DMM_SHARING_BYTES) dmm_biased_lock lock;
    struct dmm_pool *pool;
    unsigned align_shift; /* the pool's, kept here: the hot path reads no line of the pool's */
    dmm_stream stream;
    uint32_t ordinal; /* the heap's place in the pool's creation order (0: the first): a layout's `heap` */
    struct pool_heap *_Atomic next_heap; /* the pool's list (prepend; never removed before destroy) */

    /* bins of FREE blocks: exact classes are LIFO, range classes sorted by (size, addr) */
    pool_block *bins[POOL_NBINS];
    uint64_t binmap[POOL_BINWORDS];
    uint64_t binsum; /* bit w: binmap[w] != 0 */

    pool_block *unmapped; /* UNMAPPED blocks (unordered) */
    pool_block *pending;  /* PENDING blocks whose event is recorded (unordered) */
    size_t npending;
    pool_block *aliased;  /* ALIASED blocks: old places waiting for their fence (unordered) */
    size_t naliased;

    pool_block **hash; /* LIVE and QUICK blocks by address (chained through lnext) */
    size_t hmask, hcount;

    /* the last parked block, on no quick list while QUICK (its class's last: quick[bin]'s head in all
     * but storage, so that a repeat's malloc and free touch no list); once taken back a hint for its
     * free (a LIVE block of this heap at that address is the one the hash would find); any other
     * kind: stale, meaning nothing. Only a park sets it */
    pool_block *hot;
    /* QUICK blocks, per size class (LIFO through qnext): exact repeats skip bins, splits and the hash */
    pool_block *quick[POOL_NBINS];
    uint64_t quickmap[POOL_BINWORDS];
    size_t nquick;
    size_t quick_cap; /* the most blocks the hot path may park: POOL_QUICK_MAX_BLOCKS; 0 while the heap
                         records its mallocs (the hot path does not record: its frees take free_rest,
                         which parks on the lists only while no plan is followed; quick_park_cap) */
    uint64_t quick_bytes;
    uint64_t quick_reach; /* ≥ the largest free block a merge of the QUICK blocks would make */
    /* the one block whose free run quick_reach is known to cover, or NULL: the last block parked
     * (its park walked its neighbours), as long as nothing but the hot path's pops and parks ran
     * since (heap_lock, heap_trylock, the hot path's fall-backs and the flush clear it): its re-park
     * skips the walk */
    const pool_block *reach_known;
    uint32_t quick_wasted; /* parked blocks merged by misses since the last quick hit */
    uint32_t quick_skip;   /* frees still to merge at once (no parking): the stream does not repeat */

    pool_block *spare; /* unused block records */
    pslab *slabs;

    prun *runs;
    size_t nruns, caprun;

    /* fences: every free bumps free_seq; a completed fence recorded when free_seq was s sets safe_seq=s */
    uint64_t free_seq, safe_seq, fence_seq;
    uint8_t fence_state;
    dmm_event fence;

    /* counts under the lock; live_bytes/live_peak are mirrored atomically for other threads' policy */
    uint64_t live_blocks, live_peak_blocks; /* the total of live blocks is `mallocs` */
    uint64_t requested_bytes, requested_peak, requested_total;
    uint64_t live_total;
    _Atomic uint64_t live_bytes, live_peak;
    uint64_t committed; /* C × mapped chunks of this heap */
    uint64_t mallocs, frees, cross_frees;
    uint64_t grown_mallocs; /* mallocs that a growth served (the cached ones: mallocs - grown_mallocs) */
    uintptr_t stock_end;    /* where the stock the stock thread last committed here ends (0: none, or a
                               trim forgot it): a fit that leaves less than half the stock's target free
                               before it asks for more there (stock.c) */

    /* follow.c (under the lock): the record ring (NULL: not recording), the event clock, when the next
     * look for a loop is due (a malloc count), the malloc count at the last growth, and the plan
     * followed (NULL: none) */
    precord *records;
    uint64_t nrecords;     /* the ring's size (a power of two) */
    uint64_t records_from; /* the oldest ordinal the ring may hold (the widening kept only the newest) */
    uint64_t events;
    uint64_t next_look;
    uint64_t grown_at;
    pfollow *follow;
    uint64_t planned_mallocs, plan_misses, plans;
    bool plan_posted;     /* a job for this heap is queued or being planned: no look until it is done */
    uint64_t bad_period, bad_until; /* a period whose plan missed too much, not planned again before then */
    uint64_t plan_serial; /* bumped when a run is added or given back (a plan made before is stale) */

    pcand *scratch; /* slow-path candidate list */
    size_t capscratch;
    _Alignas(DMM_SHARING_BYTES) char end_[1]; /* pads the struct to whole line pairs (core.h) */
} pool_heap;

/* The most blocks heap h may park: its quick_cap; or, in a heap that records its mallocs and follows no
 * plan (quick_cap 0: its frees and mallocs keep off the hot path, which does not record), as many on
 * its quick lists alone, never as the hot block (follow.c). A heap that follows a plan parks nothing:
 * its anchors need merged free runs. */
static inline size_t quick_park_cap(const pool_heap *h) {
    if (h->quick_cap != 0) return h->quick_cap;
    return h->records != NULL && h->follow == NULL ? POOL_QUICK_MAX_BLOCKS : 0;
}

/* The stock thread's state (stock.c), under w.m: at most one request pending (the latest growth's
 * end: a newer one replaces it), at most one being grown (`busy`); mallocs and trims wait on w.idle
 * for a request to be done. */
typedef struct pstock {
    pworker w;
    struct pool_heap *want; /* the pending request: grow this heap at want_at (NULL: none) */
    uintptr_t want_at;
    struct pool_heap *busy; /* the heap the thread grows now (NULL: idle) */
} pstock;

/* The pool's layout (layout.c), under its own mutex `m` (never held across a mechanism call):
 * `grown` records where the pool created handles for its growths, `ahead` holds the handles a warm
 * layout committed before the growths that take them. Both are per quantum: the length (in quanta)
 * of the span starting there, 0 = none; an `ahead` entry with LAYOUT_BUSY set is being released by
 * one thread, and a thread that meets it waits on `done`. */
#define LAYOUT_BUSY ((uint32_t)1 << 31)
typedef struct playout {
    pthread_mutex_t m;
    pthread_cond_t done; /* a release of `ahead` entries finished */
    uint32_t *grown;     /* NULL: out of host memory at create (nothing is recorded) */
    uint32_t *grown_heap; /* per `grown` entry: the ordinal of the heap whose growth made it */
    uint32_t *ahead;     /* NULL until the first warm layout */
    uint32_t most;       /* the longest span either table ever held, in quanta: how far back an overlap starts */
    _Atomic uint64_t entries;    /* `ahead` entries, busy ones included (0: commits skip the mutex) */
    _Atomic uint64_t ahead_bytes; /* their bytes, busy ones left out */
    _Atomic uint64_t adopted, released; /* ahead handles a growth took, and those given back unused */
} playout;

struct dmm_pool {
    /* Fixed at create (refusing: once): what every malloc and free reads (uid, refusing, va_bytes,
     * align, base, owner, region_shift) and the configuration. No field written after create shares
     * their line pairs: the lock and everything after it start on a line pair of their own (the pool
     * is allocated aligned to one), so that threads on other streams writing those (a cross-stream
     * free's event, a growth, a stats read) do not take the hot path's lines away from every core. */
    uint64_t uid; /* distinguishes a pool from an earlier one at the same address (TLS cache) */
    /* NULL while the pool serves; once it noticed that its driver is lost (loss.c), what it was doing
     * then (a static sentence fragment): from then on even a malloc that a mapped free block would fit
     * is refused (pool.h). Written once (NULL → fragment, never back). The loss itself, its first
     * sentence and whether the context was confirmed torn down are the driver's (driver/call.h). */
    const char *_Atomic refusing;
    uintptr_t base;
    uint64_t va_bytes;
    uint64_t align;
    pool_heap *_Atomic *owner; /* per region: the heap that owns it, or NULL (the entries change, not the table) */
    unsigned region_shift;
    unsigned align_shift;
    dmm_mechanism *mech;
    dmm_driver *drv;
    dmm_allocation va; /* the VA-only allocation */
    uint64_t chunk;     /* Q: the commit quantum; every chunk is a whole number of them */
    uint64_t max_chunk; /* the largest chunk a growth commits as one handle */
    uint32_t handle_divisor; /* a growth for n bytes commits handles of at most n / this (0: max_chunk) */
    uint64_t min_chunk;      /* ... but at least this (chunk ≤ min_chunk ≤ max_chunk) */
    uint32_t floor_divisor;  /* ... and at least the live peak / this, up to max_chunk (0: no such floor) */
    uint32_t *clen;     /* per quantum: length (in quanta) of the chunk starting there, 0 = none */
    uint64_t region;
    size_t nregions;
    uint32_t retain_permille;
    uint32_t settle_permille; /* the retention limit's ceiling (≥ retain_permille): see settled */
    bool can_alias; /* the mechanism fills the optional `alias` slot, and no_alias is off */
    uint64_t move_batch;    /* bytes: the most a growth moves in one commit (dmm_pool_config.move_batch_bytes) */
    bool can_commit_pieces; /* the mechanism fills `commit_pieces`: a growth's new handles in one call */
    bool plan_loops; /* dmm_pool_config.plan_loops: heaps record their mallocs and follow plans (follow.c) */
    void (*on_map)(void *user, uintptr_t addr, uint64_t bytes, bool mapped); /* dmm_pool_config's observer */
    void *on_map_user;
    uint64_t stock_cap; /* stock_bytes: the most the stock thread keeps ahead (0: no stock, no thread) */

    /* written after create, from here on */
    _Alignas(DMM_SHARING_BYTES) dmm_lock lock; /* regions, heap creation, the event freelist, sampled peaks */
    struct pool_heap *_Atomic heaps;
    size_t nheaps;

    dmm_event *events; /* recycled events for cross-stream frees */
    size_t nevents, capevents;

    _Atomic uint64_t committed;   /* Σ heap.committed */
    _Atomic uint64_t aliased_bytes; /* Σ ALIASED sizes, and old places being decommitted: mapped twice */
    _Atomic uint64_t committed_peak, committed_total;
    /* bytes the retention limit rose by: every chunk a growth moved or aliased (the pool re-mapped it
     * because the limit was reached) adds its bytes; used up to (settle - retain) per mille of the live
     * peak. Only rises: a workload that repeats settles there and re-maps nothing any more */
    _Atomic uint64_t settled;
    _Atomic uint64_t sampled_live_peak, sampled_requested_peak;
    _Atomic uint64_t grows, chunks_committed, chunks_decommitted, chunks_moved, chunks_aliased, trims,
        events_recorded, events_pending, chunks_poisoned, pending_now, pending_peak, pending_total;
    _Atomic uint64_t slow_path_ns; /* wall time of dmm__pool_malloc_slow, summed over threads */
    _Atomic uint64_t stock_grows, stock_ns; /* the stock thread's growths and its time in them */
    _Atomic uint64_t stock_wait_ns;         /* mallocs' waits for it (also in slow_path_ns) */
    pstock stock;
    pplanner planner; /* planner.c: plans of the heaps' loops, off the allocating threads (plan_loops) */
    playout layout; /* layout.c: the handles grown through, and those a warm layout committed ahead */
};

/* The heap's lock (biased: the stream's usual thread takes it without a locked instruction). Every
 * holder but the hot path's quick pops and parks may change the free layout: heap_lock and
 * heap_trylock forget reach_known (the hot path takes the lock through its slot, pool.c, and
 * forgets it in its fall-backs). */
static inline void heap_lock(pool_heap *h) {
    dmm_biased_lock_acquire(&h->lock);
    h->reach_known = NULL;
}
static inline void heap_unlock(pool_heap *h) { dmm_biased_lock_release(&h->lock); }
static inline bool heap_trylock(pool_heap *h) {
    if (!dmm_biased_lock_try(&h->lock)) return false;
    h->reach_known = NULL;
    return true;
}

/* ---- heap.c ---- */
static inline uint32_t pool_bin_of(uint64_t units) {
    if (units < POOL_EXACT_BINS) return (uint32_t)units;
    unsigned fl = 63u - (unsigned)__builtin_clzll(units);
    return POOL_EXACT_BINS + (fl - 6u) * 16u + (uint32_t)((units >> (fl - 4u)) & 15u);
}

bool dmm__heap_init(pool_heap *h, struct dmm_pool *p, dmm_stream stream);
void dmm__heap_fini(pool_heap *h);

/* A block record (NULL when out of host memory and no spare is left). */
pool_block *dmm__heap_block_new(pool_heap *h);
void dmm__heap_block_put(pool_heap *h, pool_block *b);
/* Makes sure `n` records are spare, so that a sequence of splits cannot fail halfway. */
bool dmm__heap_reserve_blocks(pool_heap *h, size_t n);

void dmm__heap_bin_insert(pool_heap *h, pool_block *b);
void dmm__heap_bin_remove(pool_heap *h, pool_block *b);
/* The smallest FREE block of at least `bytes` (lowest address among equal sizes within range
 * classes), or NULL. */
pool_block *dmm__heap_bin_find(const pool_heap *h, uint64_t bytes);

/* The block of h that holds address `at`, or NULL (not in h's runs): a walk of its run (slow paths). */
pool_block *dmm__heap_block_at(const pool_heap *h, uintptr_t at);

void dmm__heap_list_push(pool_block **head, pool_block *b);
void dmm__heap_list_remove(pool_block **head, pool_block *b);

bool dmm__heap_hash_insert(pool_heap *h, pool_block *b); /* false: out of host memory growing the table */
pool_block *dmm__heap_hash_remove(pool_heap *h, uintptr_t addr);

/* The live-block hash's lookups, inline for the hot path (the table is heap.c's). */
static inline size_t heap_hash_of(const pool_heap *h, uintptr_t addr) {
    uint64_t x = (uint64_t)(addr >> h->align_shift) * 0x9E3779B97F4A7C15ull;
    return (size_t)(x ^ (x >> 29)) & h->hmask;
}
/* The link that points at the block at addr (LIVE or QUICK), or NULL: *link is the block, and
 * heap_hash_unlink takes it out without a second walk. */
static inline pool_block **heap_hash_link(pool_heap *h, uintptr_t addr) {
    for (pool_block **pp = &h->hash[heap_hash_of(h, addr)]; *pp != NULL; pp = &(*pp)->lnext)
        if ((*pp)->addr == addr) return pp;
    return NULL;
}
static inline void heap_hash_unlink(pool_heap *h, pool_block **link) {
    pool_block *b = *link;
    *link = b->lnext;
    b->lnext = NULL;
    h->hcount--;
}
static inline pool_block *dmm__heap_hash_find(const pool_heap *h, uintptr_t addr) {
    for (pool_block *b = h->hash[heap_hash_of(h, addr)]; b != NULL; b = b->lnext)
        if (b->addr == addr) return b;
    return NULL;
}

/* The bytes of the maximal sequence of FREE and QUICK blocks around b (b's own included): what a
 * merge of every QUICK block would make of b's neighbourhood. */
static inline uint64_t heap_free_run_bytes(const pool_block *b) {
    uint64_t sum = b->size;
    for (const pool_block *x = b->prev; x != NULL && (x->kind == BK_FREE || x->kind == BK_QUICK); x = x->prev)
        sum += x->size;
    for (const pool_block *x = b->next; x != NULL && (x->kind == BK_FREE || x->kind == BK_QUICK); x = x->next)
        sum += x->size;
    return sum;
}

/* Raises h's quick_reach to the free run around b (b is QUICK, or FREE next to a QUICK block). */
static inline void heap_note_reach(pool_heap *h, const pool_block *b) {
    uint64_t reach = heap_free_run_bytes(b);
    if (reach > h->quick_reach) h->quick_reach = reach;
}

/* Merges every QUICK block back: out of the hash, FREE (seq kept), coalesced with its neighbours. */
void dmm__heap_quick_flush(pool_heap *h);

/* Splits b at b->addr + at (0 < at < size): b keeps the front, the returned record (same kind,
 * seq, not in any list) the back. Needs a spare record. */
pool_block *dmm__heap_split(pool_heap *h, pool_block *b, uint64_t at);

/* Turns a block that is in no list into FREE (seq kept) and merges it with FREE neighbours;
 * returns the merged block (in its bin). */
pool_block *dmm__heap_make_free(pool_heap *h, pool_block *b);
/* Turns a block that is in no list into UNMAPPED and merges it with UNMAPPED neighbours. */
pool_block *dmm__heap_make_unmapped(pool_heap *h, pool_block *b);

/* Carves [addr, addr+len) out of block b (FREE or UNMAPPED, which must contain it): b leaves its
 * list, the pieces before and after go back to it, and the middle record (in no list) is returned
 * with kind `kind`. Needs two spare records. */
pool_block *dmm__heap_carve(pool_heap *h, pool_block *b, uintptr_t addr, uint64_t len, uint8_t kind);

/* ---- mapping.c: the pool's one way to map and unmap its VA (each change told to the observer) ---- */
/* One mechanism call: r as one handle (piece ≥ r.bytes), else in handles of at most piece bytes
 * (commit_pieces: only where p->can_commit_pieces). */
dmm_status dmm__pool_map_commit(dmm_pool *p, dmm_range r, uint64_t piece, uint64_t *newly);
dmm_release_outcome dmm__pool_map_decommit(dmm_pool *p, dmm_range r);
dmm_status dmm__pool_map_alias(dmm_pool *p, dmm_range dst, dmm_range src);

/* ---- pool_check.c ---- */
/* Under h->lock: NULL when every invariant holds, else a sentence fragment (static per thread). */
const char *dmm__heap_check_locked(const pool_heap *h);

/* The pool's heaps, newest first (a heap is never removed before destroy). */
static inline pool_heap *heaps_head(const dmm_pool *p) {
    return dmm_atomic_load_acquire((pool_heap *_Atomic *)&p->heaps);
}
static inline pool_heap *heap_next(const pool_heap *h) {
    return dmm_atomic_load_acquire((pool_heap *_Atomic *)&h->next_heap);
}

/* ---- chunks: one physical handle each, a whole number of quanta (Q = p->chunk) ----
 * p->clen[q] = the length in quanta of the chunk that starts at quantum q (0: none starts there). An
 * entry is written only by the thread that holds the owning heap's lock, or that carved the range
 * (COMMITTING / DECOMMITTING) out of it; readers look only at FREE ranges under the heap's lock. */
static inline uint64_t align_down_c(const dmm_pool *p, uint64_t x) { return x & ~(p->chunk - 1); }
static inline uint64_t align_up_c(const dmm_pool *p, uint64_t x) { return (x + p->chunk - 1) & ~(p->chunk - 1); }
static inline size_t qidx(const dmm_pool *p, uintptr_t addr) { return (size_t)((addr - p->base) / p->chunk); }

static inline void committed_add(dmm_pool *p, uint64_t v) {
    uint64_t now = dmm_atomic_add_relaxed(&p->committed, v) + v;
    dmm_atomic_add_relaxed(&p->committed_total, v);
    dmm_atomic_max_relaxed(&p->committed_peak, now);
}

/* The pool's committed bytes, an aliased chunk's old place not counted twice (it is no more memory). */
static inline uint64_t committed_once(const dmm_pool *p) {
    uint64_t committed = dmm_atomic_load_relaxed(&p->committed);
    uint64_t twice = dmm_atomic_load_relaxed(&p->aliased_bytes);
    return committed - (twice < committed ? twice : committed);
}

/* ---- loss.c: the pool's side of a device loss ----
 * The pool keeps no loss flag: it asks its driver (dmm__drv_lost), whose wrappers refuse every call
 * once the device is lost. What the pool adds is `refusing` (see struct dmm_pool) and the sentences. */
/* The pool noticed the loss while `where` (a static fragment: "committing a chunk"): the driver
 * latches it when it did not know yet (a mechanism's report; the last error is its sentence), and the
 * pool starts refusing (the first notice also logs a warning). No lock, no driver call. */
void dmm__pool_notice_loss(dmm_pool *p, const char *where);
/* Whether the pool's driver is lost; if so, the pool notices it (while `where`). */
static inline bool dmm__pool_lost(dmm_pool *p, const char *where) {
    if (__builtin_expect(!dmm__drv_lost(p->drv), 1)) return false;
    dmm__pool_notice_loss(p, where);
    return true;
}
/* The refusal of `op` once the device is lost (error set; returns DMM_ERR_DEVICE_LOST). */
dmm_status dmm__pool_lost_error(const dmm_pool *p, const char *op);
/* The refusal of a malloc (out of line: the hot path only tests `refusing`). */
dmm_status dmm__pool_malloc_refused(const dmm_pool *p, size_t bytes, dmm_stream stream);

/* ---- moves.c: one chunk at a time, and the sources of moves ---- */
typedef enum source_role {
    SRC_MOVE = 0,  /* a FREE chunk behind a completed fence: decommitted (and committed elsewhere) */
    SRC_ALIAS = 1, /* a FREE chunk of the growing heap whose fence is pending: aliased into the growth */
    SRC_OLD = 2,   /* an ALIASED old place whose fence completed: decommitted */
} source_role;

typedef struct source {
    pool_heap *h;
    pool_block *b;      /* a DECOMMITTING block of exactly one chunk */
    uint64_t bytes; /* its size */
    size_t piece;   /* growth: the target piece it moves into */
    uint64_t seq;   /* the block's seq when carved */
    uint8_t role;   /* source_role */
    bool tried;     /* decommit was called */
    bool aliased;   /* SRC_ALIAS: the alias succeeded, the block stays mapped as the old place */
    dmm_release_outcome o;
} source;

typedef struct srcvec {
    source *v;
    size_t n, cap;
} srcvec;

/* The outcome of a source that was carved but never decommitted: it goes back FREE. */
static inline dmm_release_outcome dmm__pool_outcome_untouched(void) {
    dmm_release_outcome o = {DMM_RELEASE_FAILED, 0, 0, 0, DMM_OK, 0};
    return o;
}
/* The source's chunk was decommitted whole. */
static inline bool dmm__pool_source_gone(const source *s) {
    return dmm_release_state_of(&s->o) == DMM_RELEASE_COMPLETE && s->o.unmapped_bytes == s->bytes;
}

/* Carves whole free chunks that are safe to decommit out of h's FREE blocks (under h's lock), oldest
 * frees first, until `want` bytes are carved, skipping chunks that overlap [ex_lo, ex_hi). With
 * target pieces (growth), a chunk is taken only if it fits in the room left in one of them, and is
 * assigned to it. `alias_ok` (a growth of h itself): chunks whose fence is still pending are taken
 * too, to be aliased. `keep_newest` (a growth of another heap): h keeps the free chunk its own
 * stream reuses next (the newest), so that streams in use do not take each other's last chunk in
 * turn. `keep_plan`: while h follows a plan (follow.c), chunks the plan places something in stay (a
 * trim passes false: it may take anything free). Returns the bytes carved. */
uint64_t dmm__pool_carve_sources(dmm_pool *p, pool_heap *h, uint64_t want, uintptr_t ex_lo, uintptr_t ex_hi,
                                 ptarget *tg, size_t nt, bool alias_ok, bool keep_newest, bool keep_plan, srcvec *out);
/* Decommits one source chunk (no heap lock held). Once the device is lost: FAILED with
 * DMM_ERR_DEVICE_LOST, without a call. */
void dmm__pool_decommit_one(dmm_pool *p, source *s);
/* What a failed dmm__pool_commit_one was committing: [at, at + len) in handles of `handle` bytes (the
 * last one the rest), which growth.c's fix-up asks the mechanism about, one by one. */
typedef struct commit_failure {
    uintptr_t at;
    uint64_t len, handle;
} commit_failure;
/* Commits `bytes` at `addr` (no heap lock held) as handles of at most `piece` bytes, in one call where
 * p->can_commit_pieces (else the caller passes bytes ≤ piece: one handle): `fresh` for new memory (a
 * handle a warm layout committed there ahead is taken as it is, new ones fill the gaps, one call each,
 * and the pool's layout records them), false for a moved chunk (piece = bytes: the mechanism's cache
 * hands the moved handle back). On failure *failed (may be NULL) says which call failed. */
dmm_status dmm__pool_commit_one(dmm_pool *p, uintptr_t addr, uint64_t bytes, bool fresh, uint64_t piece,
                                commit_failure *failed);
/* Maps alias source s a second time at `at` (no heap lock held); a failure changes nothing. */
dmm_status dmm__pool_alias_one(dmm_pool *p, source *s, uintptr_t at);
/* Puts the sources from `from` on back into their heaps (taking each heap's lock in turn). */
void dmm__pool_sources_fixup(dmm_pool *p, srcvec *sv, size_t from);
/* Decommits the old places of h's aliased chunks that a completed fence covers (no lock held). */
void dmm__pool_reap_aliased(dmm_pool *p, pool_heap *h);

/* ---- fences.c: events ---- */
/* Polls h's pending cross-stream frees and its fence, then reaps its aliased old places. Never
 * waits; no lock held by the caller. */
void dmm__pool_poll(dmm_pool *p, pool_heap *h);
/* The cross-stream free of block b (PENDING, out of the hash; no lock held): records an event on
 * `stream` and parks the block until it completes. */
dmm_status dmm__pool_free_cross(dmm_pool *p, pool_heap *h, pool_block *b, dmm_stream stream);
/* Destroys every heap's fence and the recycled events (driver calls; at destroy). */
void dmm__pool_destroy_events(dmm_pool *p);

/* ---- regions.c ---- */
/* Gives heap h `n` more contiguous regions (under h's lock; takes the pool lock), preferring the
 * regions right after run `prefer`. False when the VA is exhausted (error set). */
bool dmm__pool_grow_va(dmm_pool *p, pool_heap *h, size_t n, size_t prefer);
/* A heap that followed its plan through a turn with no growth (follow.c) gives back whole free chunks
 * that its plan places nothing in, behind their fence, as far as the pool is above its retention
 * limit (no lock held; failures keep the chunk, free and mapped). */
void dmm__pool_shed_unplanned(dmm_pool *p, pool_heap *h);
/* dmm_pool_trim and dmm_pool_empty_cache (pool.c calls them once the stock thread is still). */
dmm_status dmm__pool_trim(dmm_pool *p, uint64_t target, uint64_t *released);
dmm_status dmm__pool_empty_cache(dmm_pool *p, uint64_t *released);

/* ---- layout.c: the layout grown through, and a warm layout's handles committed ahead ---- */
/* At create: the tables and the mutex (false: out of host memory, error set). At destroy: frees them. */
bool dmm__pool_layout_init(dmm_pool *p);
void dmm__pool_layout_fini(dmm_pool *p);
/* A run of quanta [q, q + len): an ahead handle a fresh commit took, or a piece it committed. */
typedef struct layout_piece {
    size_t q;
    uint32_t len;
    bool taken; /* an ahead handle taken (else a handle the commit made) */
} layout_piece;
/* Before a commit (fresh) or an alias (not fresh) at [addr, addr + bytes) (no lock held): every ahead
 * handle overlapping the span is given back first, except, for a fresh commit, those lying wholly
 * inside it, which it takes: *pieces (malloc'ed, the caller frees; NULL when none) lists them in
 * address order, *n of them. An error: a give-back failed (the sentence says which), nothing taken. */
dmm_status dmm__pool_layout_take(dmm_pool *p, uintptr_t addr, uint64_t bytes, bool fresh, layout_piece **pieces,
                                 size_t *n);
/* A fresh commit that failed after it took ahead handles or made some of its pieces: each goes (back)
 * ahead, so that nothing it holds is lost to the pool (no lock held). */
void dmm__pool_layout_put_back(dmm_pool *p, const layout_piece *pieces, size_t n);
/* After a fresh commit: records the handle as grown through, unless it overlaps one recorded before. */
void dmm__pool_layout_record(dmm_pool *p, uintptr_t addr, uint64_t bytes);
/* After a trim gave [addr, addr + bytes) back: the grown spans there are forgotten. */
void dmm__pool_layout_forget(dmm_pool *p, uintptr_t addr, uint64_t bytes);
/* A trim's first step: gives every ahead handle back (no lock held). *released += the bytes given
 * back; an error keeps the handle (the sentence says which). */
dmm_status dmm__pool_layout_release_all(dmm_pool *p, uint64_t *released);
/* dmm_pool_check's look at the layout (no other thread using the pool): NULL when every ahead entry
 * lies over no chunk of the pool's (clen) nor another entry, and the counts are their sums; else a
 * sentence fragment (static per thread). */
const char *dmm__pool_layout_invariants(dmm_pool *p);
/* dmm_pool_warm_layout's check of its untrusted spans (nothing changes): DMM_OK and *lo, *end = where
 * the spans of heap `ordinal` begin and end (both 0: none), or DMM_ERR_INVALID_ARGUMENT with a sentence
 * naming the span and the fault. */
dmm_status dmm__pool_layout_check(const dmm_pool *p, const dmm_pool_span *spans, size_t count, uint32_t ordinal,
                                  uint64_t *lo, uint64_t *end);
/* dmm_pool_warm_layout on heap h (checked spans; pool.c found the heap and gave it the VA). */
dmm_status dmm__pool_layout_warm(dmm_pool *p, pool_heap *h, const dmm_pool_span *spans, size_t count,
                                 uint64_t *committed);

/* ---- stock.c: the stock thread (no-ops without a stock) ---- */
/* Starts the thread (at create, with stock_cap > 0); false: it could not start (error set). */
bool dmm__pool_stock_start(dmm_pool *p);
/* Stops and joins the thread (at destroy, before the heaps go). */
void dmm__pool_stock_stop(dmm_pool *p);
/* Asks the thread to commit h's stock at `at` (a malloc's stock_at; 0: nothing to ask; no lock held). */
void dmm__pool_stock_post(dmm_pool *p, pool_heap *h, uintptr_t at);
/* Before a malloc on h grows: waits (bounded) until the thread has done its request for h, if any,
 * so that the malloc sees the stock. h NULL (a trim, destroy): drops the pending request and waits
 * for the one in flight. Never waits on the thread itself. Returns the nanoseconds it waited. */
uint64_t dmm__pool_stock_wait(dmm_pool *p, const pool_heap *h);
/* Waits (bounded) until the thread has done every request, pending or in flight (dmm_pool_stock_sync);
 * false: it was still busy at the bound. Never waits on the thread itself. */
bool dmm__pool_stock_drain(dmm_pool *p);

/* ---- worker.c: the pool's own threads ---- */
/* Starts w's thread running main_fn(arg) with every signal blocked (the process's handlers run on its
 * own threads). False: nothing is left, the error set (`what` names the thread, `remedy` how to go
 * without it). */
bool dmm__pool_worker_start(pworker *w, void *(*main_fn)(void *), void *arg, const char *what, const char *remedy);
/* Sets stop, wakes the thread, joins it and destroys w (a no-op when it is not running). */
void dmm__pool_worker_stop(pworker *w);

/* ---- follow.c: the plan of a repeating loop (under the heap's lock) ---- */
/* At a growth of a heap of a pool that plans (growth.c's fix-up): the record ring, if the heap has none
 * (false: out of host memory; the heap grows as any does, and the next growth tries again). */
bool dmm__follow_init(pool_heap *h);
void dmm__follow_fini(pool_heap *h);
/* Looks for a loop in the records (hot.h's count_malloc and count_free write them) and, found, posts a
 * turn of it to the planner (the malloc's caller calls it when look_due says so). */
void dmm__follow_look(dmm_pool *p, pool_heap *h);
/* The planned place of a malloc of n bytes (h->follow set): the LIVE block carved there, or NULL with
 * *at = where the slow path is to grow or look: the planned address (*planned true) when the place is
 * not a mapped free range now, or the spill place of a malloc the plan does not place (0: best fit). */
pool_block *dmm__follow_place(pool_heap *h, uint64_t n, size_t requested, uintptr_t *at,
                              bool *planned);
/* A planned malloc went elsewhere: it asked another size than planned (too many of those in one turn
 * drop the plan), or (other_size false) its place was taken or could not grow. */
void dmm__follow_missed(pool_heap *h, bool other_size);
/* Where a malloc of n bytes that the plan does not place goes while it is followed: in VA the plan
 * places nothing in (the places of the blocks it kept fixed, gaps, and above its range), at a mapped
 * free range there first, else where free and unmapped VA there holds it (the slow path grows it),
 * else the run's end (0: no plan). Never where the plan places something, so that what the plan does
 * not place never takes a place it does. */
uintptr_t dmm__follow_spill_at(const pool_heap *h, uint64_t n);
/* Forgets the plan (the heap looks for a loop again). */
void dmm__follow_drop(pool_heap *h);

/* ---- planner.c: the planner thread ---- */
/* At create with plan_loops (false: it could not start, error set); at destroy, before the heaps go. */
bool dmm__planner_start(dmm_pool *p);
void dmm__planner_stop(dmm_pool *p);
/* Queues job j (taken); false (j not taken) when there is no thread. */
bool dmm__planner_post(dmm_pool *p, pplan_job *j);
void dmm__planner_job_free(pplan_job *j);
/* dmm_pool_plan_sync (the pool not NULL). */
dmm_status dmm__planner_sync(dmm_pool *p);
void dmm__plan_follow_free(pfollow *f);

/* ---- growth.c ---- */
/* The retention limit: (1 + retain/1000) × the live peak, plus what re-mapping taught it (settled), at
 * most (1 + settle/1000) × the live peak, plus the stock's share (UINT64_MAX: no limit). */
uint64_t dmm__pool_retention_limit(dmm_pool *p);
/* malloc of `n` bytes (rounded) when no mapped free block fits, or (at > 0) at the place the heap's plan
 * has for it (follow.c; where that cannot be, a miss, and best fit): poll, grow, move, alias. *stock_at:
 * where the stock thread should commit next (dmm__pool_stock_post), else 0: the end of a growth's
 * window when it only added memory, or dmm__pool_stock_refill_at's answer for the block it fitted. */
dmm_status dmm__pool_malloc_slow(dmm_pool *p, pool_heap *h, uint64_t n, size_t requested, uintptr_t at, bool at_planned, void **out,
                                 uintptr_t *stock_at);
/* Under h's lock, after a fit took block b: h's stock end when the fit left less than half the
 * stock's target free before it (the stock runs low: commit more ahead), else 0. */
uintptr_t dmm__pool_stock_refill_at(dmm_pool *p, const pool_heap *h, const pool_block *b);
/* The stock thread's growth (stock.c): commits FREE memory on h from `at` (the end of a growth's
 * window or of the last stock, if still unmapped) until stock_target bytes are free there, and
 * makes that place h's stock_end; never moves, never waits. Returns the bytes committed (0: enough
 * was there, nothing could be done, or it failed: the next malloc grows itself). */
uint64_t dmm__pool_stock_grow(dmm_pool *p, pool_heap *h, uintptr_t at);
/* growth.c: a warm start's one growth of `n` bytes (whole quanta) into h as FREE memory, in new handles
 * of at most `most` bytes (never moves: the retention limit does not apply to it). */
dmm_status dmm__pool_warm_grow(dmm_pool *p, pool_heap *h, uint64_t n, uint64_t most);

#endif /* DMM_POOL_TYPES_H */
