/* SPDX-License-Identifier: Apache-2.0 */
/* tools/replay.h — replays a trace (trace.h) through a dmm pool over an arena, and measures it.
 *
 * The replay never writes into the blocks it allocates: on the host driver the memory is real
 * (memfd pages), and untouched pages cost no RSS, so a 7.6 GiB trace replays on a small machine.
 * Used by `dmm replay` (cmd_replay.c) and bench_replay, both through dmm_tools_lib (tools/CMakeLists.txt).
 */
#ifndef DMM_TOOLS_REPLAY_H
#define DMM_TOOLS_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/dmm.h"
#include "trace.h"

typedef struct dmm_replay_opts {
    const char *driver;       /* "host" or "cuda" */
    uint64_t granule;         /* host driver granularity; 0 = 2 MiB (CUDA: the device's) */
    uint64_t chunk_bytes;     /* pool commit quantum; 0 = the granule */
    uint64_t max_chunk_bytes; /* pool's largest chunk; 0 = the pool's default */
    uint32_t handle_divisor;  /* pool's handle divisor; 0 = none */
    uint64_t min_chunk_bytes; /* pool's smallest handle the divisor cuts to; 0 = one quantum */
    uint32_t floor_divisor;   /* pool's floor divisor (the floor rises to the live peak / this); 0 = none */
    uint32_t retain_permille; /* pool retention; 0 = the pool's default */
    uint32_t settle_permille; /* the retention limit's ceiling while re-mapping; 0 = the pool's default */
    uint64_t cache_bytes;     /* arena handle cache; 0 = the largest chunk (a moved chunk passes through it) */
    size_t samples;           /* timeline points; 0 = 1500 */
    bool time_ops;            /* time every malloc/free (percentiles); off: only the total */
    uint64_t lag;             /* > 0: an event completes only `lag` allocations after it was recorded
                                 (the GPU's view: the CPU runs ahead of the work); host driver only */
    bool no_alias;            /* the pool never aliases chunks (dmm_pool_config.no_alias) */
    bool plan_loops;          /* the pool's heaps plan repeating loops (dmm_pool_config.plan_loops) */
    uint32_t repeat;          /* > 1: the trace as one iteration, replayed this many times over the same
                                 pool (the leftovers of one freed before the next); 0 or 1 = once */
    uint64_t warm_bytes;      /* > 0: a warm start (dmm_pool_warm) to this many committed bytes on the first
                                 allocation's stream, in the largest handles, inside the timed replay */
    uint64_t stock_bytes;     /* > 0: the pool's stock (dmm_pool_config.stock_bytes), its thread synced
                                 after every malloc (dmm_pool_stock_sync): as if it kept up, in a fixed order */
    bool warm_layout;         /* a warm layout (dmm_pool_warm_layout): the trace is first replayed once,
                                 untimed, with the same options (its "last run"), and the layout that pool
                                 grew through is committed ahead before the first event, inside the timed
                                 replay */
    bool plan;                /* also plan the whole trace offline (plan.h): plan_* of the result */
} dmm_replay_opts;

typedef struct dmm_replay_point {
    uint64_t t_us;      /* trace time */
    uint64_t live;      /* bytes live in the trace (as requested): the peak since the previous point */
    uint64_t committed; /* pool committed bytes */
    uint64_t physical;  /* arena owned bytes */
} dmm_replay_point;

/* The median cost of one driver call on the H200 (driver 580), in microseconds: what the replay's
 * driver calls would cost there (est_h200_driver_s), and the text the reports print beside it. */
#define DMM_REPLAY_H200_US_CREATE 14.0
#define DMM_REPLAY_H200_US_MAP 1.3
#define DMM_REPLAY_H200_US_SET_ACCESS 35.0
#define DMM_REPLAY_H200_US_UNMAP 23.0
#define DMM_REPLAY_H200_US_RELEASE 16.0
#define DMM_REPLAY_H200_COSTS "create 14, map 1.3, set_access 35, unmap 23, release 16 us"

typedef struct dmm_replay_result {
    char driver[16];
    uint64_t lag;                  /* as asked */
    bool no_alias;
    uint64_t granule, chunk;
    uint64_t events, allocs, frees;
    uint64_t peak_live_bytes;      /* from the trace: Σ requested bytes, at its peak */
    uint64_t peak_committed_bytes; /* the pool's committed peak (mapped chunks it held) */
    uint64_t peak_physical_bytes;  /* the arena's owned peak (mapped + cached handles) */
    uint64_t peak_mapped_bytes;    /* the arena's mapped peak */
    double ratio;                  /* peak_physical / peak_live */
    double ratio_committed;        /* peak_committed / peak_live */
    double native_ratio;           /* the trace header's reserved / allocated (0 if absent) */
    dmm_pool_stats pool;           /* at the end, before the leftovers are freed */
    uint64_t calls_create, calls_map, calls_set_access, calls_unmap, calls_release, cache_hits;
    double wall_s;                 /* the replay loop */
    double est_h200_driver_s;      /* driver calls × their median cost on the H200 (DMM_REPLAY_H200_US_*) */
    /* per-op latencies in ns (time_ops) */
    double malloc_p50, malloc_p90, malloc_p99, malloc_max, free_p50, free_p90, free_p99, free_max;
    dmm_replay_point *timeline;    /* of the first repetition */
    size_t npoints;
    /* --repeat: the last repetition alone (the steady state, if the pool reaches one) */
    uint32_t repeat;               /* repetitions replayed (1 = once) */
    uint64_t steady_create, steady_map, steady_set_access, steady_unmap, steady_release;
    uint64_t steady_aliased, steady_moved, steady_grows;
    /* the layout the pool grew through (dmm_pool_layout, read at the end), and with warm_layout what
     * the warm layout committed ahead from the first pass's */
    dmm_pool_span *layout;
    size_t nlayout;
    size_t warm_spans;
    uint64_t warm_ahead_bytes;
    /* with plan: the offline plan's extent, and that extent in whole chunks ÷ peak_live_bytes: the floor
     * of any fixed layout (0 when not planned) */
    uint64_t plan_extent_bytes;
    double plan_ratio;
} dmm_replay_result;

/* The largest peak of live bytes (and allocation) a replay takes: it reserves 32 × the peak, rounded up
 * to a power of two, in address space, and 32 × 2^58 is 2^63. */
#define DMM_REPLAY_MAX_PEAK ((uint64_t)1 << 58)

/* Whether `t` can be replayed with `o`, before anything is created: the trace's peak at most
 * DMM_REPLAY_MAX_PEAK and, on the host driver, the open-file limit above the fewest handles the peak
 * needs (one memfd each). 0 with the VA to reserve in *reserve (may be NULL), or -1 with a sentence
 * naming the value, the limit and the remedy. dmm_replay_run calls it first. */
int dmm_replay_check(const dmm_trace *t, const dmm_replay_opts *o, uint64_t *reserve, char *err, size_t errcap);

/* Replays `t` (o->repeat times, the counts and peaks over all of them; steady_* of the last one).
 * Returns 0, or -1 with a sentence in err. Frees what the trace never frees, checks the
 * pool's invariants, destroys pool, arena and driver, and checks the driver holds nothing. */
int dmm_replay_run(const dmm_trace *t, const dmm_replay_opts *o, dmm_replay_result *r, char *err, size_t errcap);
void dmm_replay_result_free(dmm_replay_result *r);

/* Calls per 1,000 allocations. */
static inline double dmm_replay_per_1k(uint64_t calls, uint64_t allocs) {
    return allocs ? 1000.0 * (double)calls / (double)allocs : 0.0;
}

#endif /* DMM_TOOLS_REPLAY_H */
