/* SPDX-License-Identifier: Apache-2.0 */
/* tools/replay.c — replays a trace through driver → arena → pool (contract: replay.h).
 *
 * Idea: one pass over the trace's events; allocation k's pointer lives in slot k (the reader
 * resolved every free to its slot), each trace stream gets a driver stream (stream 0 is the default
 * stream), and the timeline samples the pool's committed bytes and the arena's owned bytes every
 * n/samples events. Peaks come from the pool's and the arena's own counters (exact), not from the
 * samples. The replay never touches block memory.
 *
 * Lag (--lag N): on a GPU the CPU runs ahead of the work, so the events the pool records (fences,
 * cross-stream frees) are still pending when it next looks; on the host every event completes at
 * once. A small wrapping driver (below) makes an event complete only N allocations after it was
 * recorded, so the host replay sees the GPU's pending fences. Its clock is the replay's allocation
 * count; a stream synchronize completes everything recorded so far.
 *
 * Repeat (--repeat K): the trace taken as one iteration of a workload that repeats (training steps,
 * generation rounds), replayed K times over the same pool, the allocations one repetition leaves live
 * freed before the next starts. The driver calls, aliases and moves of the last repetition alone say
 * whether the pool reached a steady state (none) or pays them every iteration; with --lag the fences
 * are pending as on a GPU, where a replay with every fence complete would hide the cost.
 *
 * Stock (--stock BYTES): the pool's stock thread (stock_bytes), synced after every malloc, so that
 * each stock growth is done before the next event: a stock that keeps up with the mallocs (on the
 * H200 it mostly does, in one handle a growth), and the same layout in every run.
 *
 * Warm start (--warm BYTES): the pool commits that much at once, in handles of up to 1 GiB, before the
 * first event (dmm_pool_warm), inside the timed loop: what a pool that knows the workload's last peak
 * would do, and what it costs.
 *
 * Sizes (dmm_replay_check, before anything is created): the VA reserved is 32 × the trace's peak
 * rounded up to a power of two, so a peak above 2^58 is refused rather than rounded or multiplied past
 * 64 bits; on the host driver a peak that needs more handles than the open-file limit allows even at
 * the largest handle size is refused rather than paid for in driver calls until the limit stops it.
 *
 * Honesty: "physical" is the arena's owned bytes — every physical handle held, mapped or cached —
 * not only what is mapped; both are reported. At the end the pool's invariant check must pass,
 * everything is freed and destroyed, and the driver's census must be back to zero.
 */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/core.h"
#include "plan.h"

#define REPLAY_HOST_GRANULE ((uint64_t)2 << 20) /* the host driver's granularity unless --granule says */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void percentiles(uint32_t *v, size_t n, double *p50, double *p90, double *p99, double *mx) {
    if (n == 0) {
        *p50 = *p90 = *p99 = *mx = 0;
        return;
    }
    qsort(v, n, sizeof *v, cmp_u32);
    *p50 = v[n / 2];
    *p90 = v[(size_t)((double)n * 0.9)];
    *p99 = v[(size_t)((double)n * 0.99)];
    *mx = v[n - 1];
}

/* The host driver holds one open file per physical handle (a memfd). */
static int host_files_fit(const dmm_trace *t, const dmm_replay_opts *o, char *err, size_t errcap) {
    uint64_t quantum = o->chunk_bytes ? o->chunk_bytes : o->granule ? o->granule : REPLAY_HOST_GRANULE;
    uint64_t largest = o->max_chunk_bytes ? o->max_chunk_bytes : quantum;
    uint64_t least = t->peak_live_bytes / largest; /* handles live at the peak, even were each the largest */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || least < (uint64_t)rl.rlim_cur) return 0;
    snprintf(err, errcap, "the trace's peak of %llu live bytes needs at least %llu physical handles of at most %llu "
                          "bytes, and the host driver holds one open file per handle, but the open-file limit is %llu: "
                          "raise it (ulimit -n) or pass a larger --granule or --max-chunk",
             (unsigned long long)t->peak_live_bytes, (unsigned long long)least, (unsigned long long)largest,
             (unsigned long long)rl.rlim_cur);
    return -1;
}

int dmm_replay_check(const dmm_trace *t, const dmm_replay_opts *o, uint64_t *reserve, char *err, size_t errcap) {
    uint64_t need = t->peak_live_bytes > t->max_bytes ? t->peak_live_bytes : t->max_bytes, p2 = 0, va = 0;
    if (need > DMM_REPLAY_MAX_PEAK || !dmm_pow2_up(need, &p2) || dmm_mul_overflows(p2, 32, &va)) {
        snprintf(err, errcap, "the trace's %s, %llu bytes, is above %llu (2^58), the most a replay takes: it reserves "
                              "32 times that in address space, more than 64 bits hold; the trace's bytes fields are "
                              "corrupt",
                 t->peak_live_bytes >= t->max_bytes ? "peak of live bytes" : "largest allocation",
                 (unsigned long long)need, (unsigned long long)DMM_REPLAY_MAX_PEAK);
        return -1;
    }
    if (reserve != NULL) *reserve = va > ((uint64_t)64 << 30) ? va : (uint64_t)64 << 30;
    const char *dname = o->driver != NULL ? o->driver : "host";
    if (strcmp(dname, "host") == 0) return host_files_fit(t, o, err, errcap);
    return 0;
}

void dmm_replay_result_free(dmm_replay_result *r) {
    if (r == NULL) return;
    free(r->timeline);
    r->timeline = NULL;
    r->npoints = 0;
    free(r->layout);
    r->layout = NULL;
    r->nlayout = 0;
}

/* ---- the lag driver: forwards everything to `inner`, but events complete `lag` allocations late ---- */
typedef struct lag_event {
    dmm_event inner;
    uint64_t at; /* the clock when recorded; UINT64_MAX: never recorded (complete) */
} lag_event;

typedef struct lag_driver {
    dmm_driver base; /* first */
    dmm_driver_ops ops;
    dmm_driver *inner; /* owned */
    uint64_t lag;
    uint64_t clock;     /* allocations replayed (the replay is one thread) */
    uint64_t synced_to; /* events recorded at or before this clock have completed (synchronize) */
} lag_driver;

static lag_driver *LD(dmm_driver *d) { return (lag_driver *)d; }
static dmm_driver *IN(dmm_driver *d) { return LD(d)->inner; }

static dmm_status lag_granularity(dmm_driver *d, size_t *b) { return IN(d)->ops->granularity(IN(d), b); }
static dmm_status lag_reserve(dmm_driver *d, size_t b, size_t al, uintptr_t *va) {
    return IN(d)->ops->reserve(IN(d), b, al, va);
}
static dmm_status lag_unreserve(dmm_driver *d, uintptr_t va, size_t b) { return IN(d)->ops->unreserve(IN(d), va, b); }
static dmm_status lag_create(dmm_driver *d, size_t b, dmm_phys *h) { return IN(d)->ops->create(IN(d), b, h); }
static dmm_status lag_release(dmm_driver *d, dmm_phys h) { return IN(d)->ops->release(IN(d), h); }
static dmm_status lag_map(dmm_driver *d, uintptr_t va, size_t b, dmm_phys h) { return IN(d)->ops->map(IN(d), va, b, h); }
static dmm_status lag_unmap(dmm_driver *d, uintptr_t va, size_t b) { return IN(d)->ops->unmap(IN(d), va, b); }
static dmm_status lag_set_access(dmm_driver *d, uintptr_t va, size_t b, dmm_access a) {
    return IN(d)->ops->set_access(IN(d), va, b, a);
}
static dmm_status lag_stream_create(dmm_driver *d, dmm_stream *s) { return IN(d)->ops->stream_create(IN(d), s); }
static dmm_status lag_stream_destroy(dmm_driver *d, dmm_stream s) { return IN(d)->ops->stream_destroy(IN(d), s); }
static dmm_status lag_census(dmm_driver *d, dmm_driver_census *c) { return IN(d)->ops->census(IN(d), c); }

static dmm_status lag_event_create(dmm_driver *d, dmm_event *ev) {
    lag_event *e = malloc(sizeof *e);
    if (e == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "lag driver: event_create: out of host memory");
    dmm_status s = IN(d)->ops->event_create(IN(d), &e->inner);
    if (s != DMM_OK) {
        free(e);
        return s;
    }
    e->at = UINT64_MAX;
    *ev = e;
    return DMM_OK;
}
static dmm_status lag_event_destroy(dmm_driver *d, dmm_event ev) {
    lag_event *e = ev;
    dmm_status s = IN(d)->ops->event_destroy(IN(d), e->inner);
    free(e);
    return s;
}
static dmm_status lag_event_record(dmm_driver *d, dmm_event ev, dmm_stream st) {
    lag_event *e = ev;
    dmm_status s = IN(d)->ops->event_record(IN(d), e->inner, st);
    if (s == DMM_OK) e->at = LD(d)->clock;
    return s;
}
static bool lag_done(lag_driver *l, const lag_event *e) { /* clock ≥ at: the difference cannot wrap, a sum could */
    return e->at == UINT64_MAX || e->at <= l->synced_to || l->clock - e->at >= l->lag;
}
static dmm_status lag_event_query(dmm_driver *d, dmm_event ev) {
    lag_event *e = ev;
    if (!lag_done(LD(d), e))
        return dmm_error_set(DMM_ERR_BUSY, "lag driver: event %p still pending (recorded at allocation %llu, "
                                           "completes %llu allocations later)", ev, (unsigned long long)e->at,
                             (unsigned long long)LD(d)->lag);
    return IN(d)->ops->event_query(IN(d), e->inner);
}
static dmm_status lag_event_synchronize(dmm_driver *d, dmm_event ev) {
    lag_event *e = ev;
    if (e->at != UINT64_MAX && e->at > LD(d)->synced_to) LD(d)->synced_to = e->at;
    return IN(d)->ops->event_synchronize(IN(d), e->inner);
}
static dmm_status lag_stream_synchronize(dmm_driver *d, dmm_stream st) {
    LD(d)->synced_to = LD(d)->clock; /* every stream at once: the replay only drains at its end */
    return IN(d)->ops->stream_synchronize(IN(d), st);
}
static void lag_destroy(dmm_driver *d) {
    dmm_driver_destroy(IN(d));
    free(d);
}

/* Wraps `inner` (taken over: destroyed with the wrapper, also when this fails). */
static dmm_status lag_driver_create(dmm_driver *inner, uint64_t lag, dmm_driver **out) {
    lag_driver *l = calloc(1, sizeof *l);
    if (l == NULL) {
        dmm_driver_destroy(inner);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "lag driver: out of host memory");
    }
    const dmm_driver_ops *o = inner->ops;
    l->ops = *o;
    l->ops.size = sizeof l->ops;
    l->ops.name = "lag";
    l->ops.granularity = o->granularity ? lag_granularity : NULL;
    l->ops.reserve = o->reserve ? lag_reserve : NULL;
    l->ops.unreserve = o->unreserve ? lag_unreserve : NULL;
    l->ops.create = o->create ? lag_create : NULL;
    l->ops.release = o->release ? lag_release : NULL;
    l->ops.map = o->map ? lag_map : NULL;
    l->ops.unmap = o->unmap ? lag_unmap : NULL;
    l->ops.set_access = o->set_access ? lag_set_access : NULL;
    l->ops.alloc = NULL; /* the replay's arena and pool use none of these */
    l->ops.free = NULL;
    l->ops.copy = NULL;
    l->ops.mem_info = NULL;
    l->ops.stream_create = o->stream_create ? lag_stream_create : NULL;
    l->ops.stream_destroy = o->stream_destroy ? lag_stream_destroy : NULL;
    l->ops.event_create = lag_event_create;
    l->ops.event_destroy = lag_event_destroy;
    l->ops.event_record = lag_event_record;
    l->ops.event_query = lag_event_query;
    l->ops.event_synchronize = lag_event_synchronize;
    l->ops.stream_synchronize = lag_stream_synchronize;
    l->ops.census = o->census ? lag_census : NULL;
    l->ops.destroy = lag_destroy;
    l->base.ops = &l->ops;
    l->base.device = inner->device;
    l->inner = inner;
    l->lag = lag;
    *out = &l->base;
    return DMM_OK;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errcap, __VA_ARGS__);                                                        \
        goto out;                                                                                  \
    } while (0)

static int replay_once(const dmm_trace *t, const dmm_replay_opts *o, const dmm_replay_result *last,
                       dmm_replay_result *r, char *err, size_t errcap);

/* With o->plan: the offline plan's extent and its ratio in whole chunks (plan.h). */
static int replay_plan(const dmm_trace *t, const dmm_replay_opts *o, dmm_replay_result *r, char *err, size_t errcap) {
    if (!o->plan) return 0;
    dmm_plan_result pr;
    if (dmm_plan_trace(t, 0, &pr, NULL, err, errcap) != 0) return -1;
    uint64_t chunk = r->chunk ? r->chunk : REPLAY_HOST_GRANULE;
    r->plan_extent_bytes = (pr.extent + chunk - 1) / chunk * chunk;
    r->plan_ratio = r->peak_live_bytes ? (double)r->plan_extent_bytes / (double)r->peak_live_bytes : 0.0;
    return 0;
}

int dmm_replay_run(const dmm_trace *t, const dmm_replay_opts *o, dmm_replay_result *r, char *err, size_t errcap) {
    if (!o->warm_layout) {
        if (replay_once(t, o, NULL, r, err, errcap) != 0) return -1;
        return replay_plan(t, o, r, err, errcap);
    }
    /* the warm layout's "last run": the same replay once, untimed; its pool's layout goes ahead */
    dmm_replay_opts first = *o;
    first.warm_layout = false;
    first.repeat = 1;
    first.time_ops = false;
    first.warm_bytes = 0;
    dmm_replay_result last;
    if (replay_once(t, &first, NULL, &last, err, errcap) != 0) return -1;
    int rc = replay_once(t, o, &last, r, err, errcap);
    dmm_replay_result_free(&last);
    return rc != 0 ? rc : replay_plan(t, o, r, err, errcap);
}

/* One replay; `last` (with o->warm_layout): the first pass, whose layout is committed ahead. */
static int replay_once(const dmm_trace *t, const dmm_replay_opts *o, const dmm_replay_result *last,
                       dmm_replay_result *r, char *err, size_t errcap) {
    memset(r, 0, sizeof *r);
    int rc = -1;
    dmm_driver *drv = NULL;
    dmm_mechanism *arena = NULL;
    dmm_pool *pool = NULL;
    void **ptrs = NULL;
    uint16_t *slot_stream = NULL;
    uint32_t *lat_m = NULL, *lat_f = NULL;
    dmm_stream streams[64] = {0};
    const char *dname = o->driver != NULL ? o->driver : "host";
    snprintf(r->driver, sizeof r->driver, "%s", dname);

    uint64_t reserve = 0;
    if (dmm_replay_check(t, o, &reserve, err, errcap) != 0) return -1;
    dmm_status s;
    r->lag = o->lag;
    r->no_alias = o->no_alias;
    lag_driver *lagd = NULL;
    if (strcmp(dname, "host") == 0) {
        dmm_host_driver_config hc = {sizeof hc, (size_t)(o->granule ? o->granule : REPLAY_HOST_GRANULE)};
        s = dmm_host_driver_create(&hc, &drv);
        if (s == DMM_OK && o->lag > 0) {
            s = lag_driver_create(drv, o->lag, &drv);
            if (s == DMM_OK) lagd = LD(drv);
            else drv = NULL;
        }
    } else if (o->lag > 0) {
        FAIL("--lag imitates a GPU's pending events on the host driver; the %s driver has real ones", dname);
    } else if (strcmp(dname, "cuda") == 0) {
        s = dmm_cuda_driver_create(0, &drv);
    } else {
        FAIL("unknown driver '%s': use host or cuda", dname);
    }
    if (s != DMM_OK) FAIL("creating the %s driver failed: %s", dname, dmm_last_error());
    size_t gran = 0;
    if (drv->ops->granularity == NULL || drv->ops->granularity(drv, &gran) != DMM_OK)
        FAIL("the %s driver has no VMM granularity: %s", dname, dmm_last_error());
    r->granule = gran;
    r->chunk = o->chunk_bytes ? o->chunk_bytes : gran;

    /* VA (dmm_replay_check): 32 × the trace's peak rounded up to a power of two, at least 64 GiB; the pool
     * takes half */
    dmm_arena_config ac;
    memset(&ac, 0, sizeof ac);
    ac.size = sizeof ac;
    ac.reserve_bytes = reserve;
    uint64_t maxc = o->max_chunk_bytes ? o->max_chunk_bytes : r->chunk;
    ac.cache_limit_bytes = o->cache_bytes ? o->cache_bytes : (maxc > 4 * r->chunk ? maxc : 4 * r->chunk);
    if (dmm_arena_create(drv, &ac, &arena) != DMM_OK) FAIL("creating the arena failed: %s", dmm_last_error());
    dmm_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.size = sizeof pc;
    pc.va_bytes = reserve / 2;
    pc.chunk_bytes = o->chunk_bytes;
    pc.retain_permille = o->retain_permille;
    pc.settle_permille = o->settle_permille;
    pc.max_chunk_bytes = maxc;
    pc.handle_divisor = o->handle_divisor;
    pc.min_chunk_bytes = o->min_chunk_bytes;
    pc.floor_divisor = o->floor_divisor;
    pc.no_alias = o->no_alias ? 1u : 0u;
    pc.plan_loops = o->plan_loops ? 1u : 0u;
    pc.stock_bytes = o->stock_bytes;
    pc.move_batch_bytes = ac.cache_limit_bytes; /* moves pass through the arena's cache */
    if (dmm_pool_create(arena, drv, &pc, &pool) != DMM_OK) FAIL("creating the pool failed: %s", dmm_last_error());

    for (uint32_t i = 0; i < t->nstreams; i++) {
        if (t->stream_ids[i] == 0) continue; /* the default stream */
        if (drv->ops->stream_create == NULL || drv->ops->stream_create(drv, &streams[i]) != DMM_OK)
            FAIL("creating a stream for trace stream %llu failed: %s", (unsigned long long)t->stream_ids[i],
                 dmm_last_error());
    }
    ptrs = calloc(t->allocs ? t->allocs : 1, sizeof *ptrs);
    slot_stream = calloc(t->allocs ? t->allocs : 1, sizeof *slot_stream);
    size_t samples = o->samples ? o->samples : 1500;
    r->timeline = calloc(samples + 2, sizeof *r->timeline);
    if (ptrs == NULL || slot_stream == NULL || r->timeline == NULL) FAIL("out of host memory for the replay's tables");
    uint32_t reps = o->repeat > 1 ? o->repeat : 1;
    r->repeat = reps;
    if (o->time_ops) { /* one latency per operation of every repetition */
        uint64_t nlat_m = 0, nlat_f = 0;
        if (dmm_mul_overflows(t->allocs ? t->allocs : 1, (uint64_t)reps * sizeof *lat_m, &nlat_m) ||
            dmm_mul_overflows(t->frees ? t->frees : 1, (uint64_t)reps * sizeof *lat_f, &nlat_f) || nlat_m > SIZE_MAX ||
            nlat_f > SIZE_MAX)
            FAIL("%zu allocations repeated %u times are more latencies than 64 bits count; repeat less", t->allocs, reps);
        lat_m = malloc((size_t)nlat_m);
        lat_f = malloc((size_t)nlat_f);
        if (lat_m == NULL || lat_f == NULL)
            FAIL("out of host memory for the latency tables (%llu bytes)", (unsigned long long)(nlat_m + nlat_f));
    }
    size_t stride = t->n / samples + 1, nm = 0, nf = 0;
    uint64_t live = 0, window_max = 0; /* the live peak inside each sample window, so spikes show */
    dmm_stats before;
    dmm_pool_stats pbefore;
    memset(&before, 0, sizeof before);
    memset(&pbefore, 0, sizeof pbefore);
    double t0 = now_s();
    if (o->warm_bytes > 0) { /* timed: what it costs is part of the replay */
        dmm_stream first = NULL;
        for (size_t i = 0; i < t->n; i++)
            if (t->ev[i].kind == DMM_TRACE_ALLOC) {
                first = streams[t->ev[i].stream];
                break;
            }
        if (dmm_pool_warm(pool, first, o->warm_bytes, 0, NULL) != DMM_OK)
            FAIL("the warm start of %llu bytes failed: %s", (unsigned long long)o->warm_bytes, dmm_last_error());
    }
    if (last != NULL) { /* timed too */
        dmm_stream first = NULL;
        for (size_t i = 0; i < t->n; i++)
            if (t->ev[i].kind == DMM_TRACE_ALLOC) {
                first = streams[t->ev[i].stream];
                break;
            }
        r->warm_spans = last->nlayout;
        if (dmm_pool_warm_layout(pool, first, last->layout, last->nlayout, &r->warm_ahead_bytes) != DMM_OK)
            FAIL("the warm layout of %zu spans failed: %s", last->nlayout, dmm_last_error());
    }
    for (uint32_t rep = 0; rep < reps; rep++) {
        if (rep > 0) { /* the previous repetition's leftovers go, on the stream of their allocation */
            for (size_t k = 0; k < t->allocs; k++)
                if (ptrs[k] != NULL) {
                    if (dmm_pool_free(pool, ptrs[k], streams[slot_stream[k]]) != DMM_OK)
                        FAIL("repetition %u: freeing a leftover failed: %s", rep + 1, dmm_last_error());
                    ptrs[k] = NULL;
                }
            live = 0;
        }
        if (rep + 1 == reps) { /* the last repetition: what it costs alone */
            memset(&before, 0, sizeof before);
            before.size = sizeof before;
            memset(&pbefore, 0, sizeof pbefore);
            pbefore.size = sizeof pbefore;
            if (dmm_mechanism_stats(arena, &before) != DMM_OK || dmm_pool_stats_get(pool, &pbefore) != DMM_OK)
                FAIL("reading the stats before the last repetition failed: %s", dmm_last_error());
        }
        for (size_t i = 0; i < t->n; i++) {
            const dmm_trace_event *e = &t->ev[i];
            dmm_stream st = streams[e->stream];
            if (e->kind == DMM_TRACE_ALLOC) {
                if (lagd != NULL) lagd->clock++;
                uint64_t a = o->time_ops ? now_ns() : 0;
                s = dmm_pool_malloc(pool, (size_t)e->bytes, st, &ptrs[e->slot]);
                if (o->time_ops) {
                    uint64_t d = now_ns() - a;
                    lat_m[nm++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
                }
                if (s != DMM_OK)
                    FAIL("event %zu: malloc of %llu bytes failed: %s", i, (unsigned long long)e->bytes, dmm_last_error());
                if (o->stock_bytes > 0) { /* BUSY: the thread is still at it after 20 ms; wait on */
                    do {
                        s = dmm_pool_stock_sync(pool);
                    } while (s == DMM_ERR_BUSY);
                    if (s != DMM_OK) FAIL("event %zu: syncing the stock failed: %s", i, dmm_last_error());
                }
                if (o->plan_loops) { /* the plan of a loop, followed from the same malloc on every run */
                    s = dmm_pool_plan_sync(pool);
                    if (s != DMM_OK) FAIL("event %zu: waiting for the planner failed: %s", i, dmm_last_error());
                }
                live += e->bytes;
                if (live > window_max) window_max = live;
                slot_stream[e->slot] = e->stream;
            } else {
                uint64_t a = o->time_ops ? now_ns() : 0;
                s = dmm_pool_free(pool, ptrs[e->slot], st);
                if (o->time_ops) {
                    uint64_t d = now_ns() - a;
                    lat_f[nf++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
                }
                if (s != DMM_OK) FAIL("event %zu: free failed: %s", i, dmm_last_error());
                ptrs[e->slot] = NULL;
                live -= e->bytes;
            }
            if (rep == 0 && (i % stride == 0 || i + 1 == t->n)) {
                dmm_pool_stats ps;
                memset(&ps, 0, sizeof ps);
                ps.size = sizeof ps;
                dmm_pool_stats_get(pool, &ps);
                dmm_replay_point *pt = &r->timeline[r->npoints++];
                pt->t_us = e->t_us;
                pt->live = window_max > live ? window_max : live;
                window_max = live;
                pt->committed = (uint64_t)ps.committed_bytes.current;
                pt->physical = (uint64_t)ps.physical_bytes.current;
            }
        }
    }
    r->wall_s = now_s() - t0;

    memset(&r->pool, 0, sizeof r->pool);
    r->pool.size = sizeof r->pool;
    dmm_pool_stats_get(pool, &r->pool);
    dmm_stats as;
    memset(&as, 0, sizeof as);
    as.size = sizeof as;
    if (dmm_mechanism_stats(arena, &as) != DMM_OK) FAIL("reading the arena's stats failed: %s", dmm_last_error());
    r->steady_create = as.driver_create - before.driver_create;
    r->steady_map = as.driver_map - before.driver_map;
    r->steady_set_access = as.driver_set_access - before.driver_set_access;
    r->steady_unmap = as.driver_unmap - before.driver_unmap;
    r->steady_release = as.driver_release - before.driver_release;
    r->steady_aliased = r->pool.chunks_aliased - pbefore.chunks_aliased;
    r->steady_moved = r->pool.chunks_moved - pbefore.chunks_moved;
    r->steady_grows = r->pool.grows - pbefore.grows;
    r->events = t->n * reps;
    r->allocs = t->allocs * reps;
    r->frees = t->frees * reps + (uint64_t)(reps - 1) * (t->allocs - t->frees);
    r->peak_live_bytes = t->peak_live_bytes;
    r->peak_committed_bytes = (uint64_t)r->pool.committed_bytes.peak;
    r->peak_physical_bytes = (uint64_t)as.owned_bytes.peak;
    r->peak_mapped_bytes = (uint64_t)as.mapped_bytes.peak;
    r->ratio = t->peak_live_bytes ? (double)r->peak_physical_bytes / (double)t->peak_live_bytes : 0;
    r->ratio_committed = t->peak_live_bytes ? (double)r->peak_committed_bytes / (double)t->peak_live_bytes : 0;
    r->native_ratio =
        t->native_peak_allocated ? (double)t->native_peak_reserved / (double)t->native_peak_allocated : 0;
    r->calls_create = as.driver_create;
    r->calls_map = as.driver_map;
    r->calls_set_access = as.driver_set_access;
    r->calls_unmap = as.driver_unmap;
    r->calls_release = as.driver_release;
    r->cache_hits = as.cache_hits;
    r->est_h200_driver_s =
        1e-6 * (DMM_REPLAY_H200_US_CREATE * (double)as.driver_create + DMM_REPLAY_H200_US_MAP * (double)as.driver_map +
                DMM_REPLAY_H200_US_SET_ACCESS * (double)as.driver_set_access +
                DMM_REPLAY_H200_US_UNMAP * (double)as.driver_unmap +
                DMM_REPLAY_H200_US_RELEASE * (double)as.driver_release);
    if (o->time_ops) {
        percentiles(lat_m, nm, &r->malloc_p50, &r->malloc_p90, &r->malloc_p99, &r->malloc_max);
        percentiles(lat_f, nf, &r->free_p50, &r->free_p90, &r->free_p99, &r->free_max);
    }
    if (dmm_pool_check(pool) != DMM_OK) FAIL("the pool's invariant check failed after the replay: %s", dmm_last_error());
    if (dmm_pool_layout(pool, NULL, 0, &r->nlayout) != DMM_OK) FAIL("reading the pool's layout failed: %s", dmm_last_error());
    r->layout = calloc(r->nlayout ? r->nlayout : 1, sizeof *r->layout);
    if (r->layout == NULL) FAIL("out of host memory for the pool's layout (%zu spans)", r->nlayout);
    if (dmm_pool_layout(pool, r->layout, r->nlayout, &r->nlayout) != DMM_OK)
        FAIL("reading the pool's layout failed: %s", dmm_last_error());
    rc = 0;
out:
    if (pool != NULL && ptrs != NULL) {
        for (size_t k = 0; k < t->allocs; k++)
            if (ptrs[k] != NULL) /* the trace's leftovers, freed on the stream of their allocation */
                dmm_pool_free(pool, ptrs[k], streams[slot_stream[k]]);
    }
    if (pool != NULL) {
        /* the pool refuses while the event after a stream's last free is pending: let the streams
         * drain (a replay queues no work, so this is quick) and ask again */
        dmm_status ds = dmm_pool_destroy(pool);
        for (int tries = 0; ds == DMM_ERR_BUSY && tries < 5000; tries++) {
            for (uint32_t i = 0; i < t->nstreams && i < 64; i++)
                if (drv->ops->stream_synchronize != NULL) drv->ops->stream_synchronize(drv, streams[i]);
            struct timespec ms = {0, 1000 * 1000};
            nanosleep(&ms, NULL);
            ds = dmm_pool_destroy(pool);
        }
        if (ds != DMM_OK && rc == 0) {
            snprintf(err, errcap, "destroying the pool failed: %s", dmm_last_error());
            rc = -1;
        }
    }
    for (uint32_t i = 0; i < 64; i++)
        if (streams[i] != NULL) drv->ops->stream_destroy(drv, streams[i]);
    if (arena != NULL && dmm_mechanism_destroy(arena) != DMM_OK && rc == 0) {
        snprintf(err, errcap, "destroying the arena failed: %s", dmm_last_error());
        rc = -1;
    }
    if (drv != NULL) {
        dmm_driver_census c;
        memset(&c, 0, sizeof c);
        c.size = sizeof c;
        if (drv->ops->census != NULL && drv->ops->census(drv, &c) == DMM_OK && rc == 0 &&
            (c.reserved_bytes || c.handles || c.mapped_bytes))
        {
            snprintf(err, errcap, "the driver still holds %llu reserved, %llu handles, %llu mapped bytes after the "
                                  "replay",
                     (unsigned long long)c.reserved_bytes, (unsigned long long)c.handles,
                     (unsigned long long)c.mapped_bytes);
            rc = -1;
        }
        dmm_driver_destroy(drv);
    }
    free(ptrs);
    free(slot_stream);
    free(lat_m);
    free(lat_f);
    if (rc != 0) dmm_replay_result_free(r);
    return rc;
}
