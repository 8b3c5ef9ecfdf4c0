/* tools/replay.c — replays a trace through driver → arena → pool (contract: replay.h).
 *
 * Idea: one pass over the trace's events; allocation k's pointer lives in slot k (the reader
 * resolved every free to its slot), each trace stream gets a driver stream (stream 0 is the default
 * stream), and the timeline samples the pool's committed bytes and the arena's owned bytes every
 * n/samples events. Peaks come from the pool's and the arena's own counters (exact), not from the
 * samples. The replay never touches block memory.
 *
 * Honesty: "physical" is the arena's owned bytes — every physical handle held, mapped or cached —
 * not only what is mapped; both are reported. At the end the pool's invariant check must pass,
 * everything is freed and destroyed, and the driver's census must be back to zero.
 */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static uint64_t pow2_at_least(uint64_t x) {
    uint64_t p = 1;
    while (p < x) p <<= 1;
    return p;
}

void dmm_replay_result_free(dmm_replay_result *r) {
    if (r == NULL) return;
    free(r->timeline);
    r->timeline = NULL;
    r->npoints = 0;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errcap, __VA_ARGS__);                                                        \
        goto out;                                                                                  \
    } while (0)

int dmm_replay_run(const dmm_trace *t, const dmm_replay_opts *o, dmm_replay_result *r, char *err, size_t errcap) {
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

    dmm_status s;
    if (strcmp(dname, "host") == 0) {
        dmm_host_driver_config hc = {sizeof hc, (size_t)(o->granule ? o->granule : (2u << 20))};
        s = dmm_host_driver_create(&hc, &drv);
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

    /* VA: 32 × the trace's peak (rounded up to a power of two), at least 64 GiB; the pool takes half */
    uint64_t reserve = pow2_at_least(t->peak_live_bytes > t->max_bytes ? t->peak_live_bytes : t->max_bytes) * 32;
    if (reserve < ((uint64_t)64 << 30)) reserve = (uint64_t)64 << 30;
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
    pc.max_chunk_bytes = maxc;
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
    if (o->time_ops) {
        lat_m = malloc((t->allocs ? t->allocs : 1) * sizeof *lat_m);
        lat_f = malloc((t->frees ? t->frees : 1) * sizeof *lat_f);
        if (lat_m == NULL || lat_f == NULL) FAIL("out of host memory for the latency tables");
    }
    size_t stride = t->n / samples + 1, nm = 0, nf = 0;
    uint64_t live = 0, window_max = 0; /* the live peak inside each sample window, so spikes show */
    double t0 = now_s();
    for (size_t i = 0; i < t->n; i++) {
        const dmm_trace_event *e = &t->ev[i];
        dmm_stream st = streams[e->stream];
        if (e->kind == DMM_TRACE_ALLOC) {
            uint64_t a = o->time_ops ? now_ns() : 0;
            s = dmm_pool_malloc(pool, (size_t)e->bytes, st, &ptrs[e->slot]);
            if (o->time_ops) {
                uint64_t d = now_ns() - a;
                lat_m[nm++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
            }
            if (s != DMM_OK)
                FAIL("event %zu: malloc of %llu bytes failed: %s", i, (unsigned long long)e->bytes, dmm_last_error());
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
        if (i % stride == 0 || i + 1 == t->n) {
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
    r->wall_s = now_s() - t0;

    memset(&r->pool, 0, sizeof r->pool);
    r->pool.size = sizeof r->pool;
    dmm_pool_stats_get(pool, &r->pool);
    dmm_stats as;
    memset(&as, 0, sizeof as);
    as.size = sizeof as;
    if (dmm_mechanism_stats(arena, &as) != DMM_OK) FAIL("reading the arena's stats failed: %s", dmm_last_error());
    r->events = t->n;
    r->allocs = t->allocs;
    r->frees = t->frees;
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
    r->est_h200_driver_s = 1e-6 * (14.0 * (double)as.driver_create + 1.3 * (double)as.driver_map +
                                   35.0 * (double)as.driver_set_access + 23.0 * (double)as.driver_unmap +
                                   16.0 * (double)as.driver_release);
    if (o->time_ops) {
        percentiles(lat_m, nm, &r->malloc_p50, &r->malloc_p90, &r->malloc_p99, &r->malloc_max);
        percentiles(lat_f, nf, &r->free_p50, &r->free_p90, &r->free_p99, &r->free_max);
    }
    if (dmm_pool_check(pool) != DMM_OK) FAIL("the pool's invariant check failed after the replay: %s", dmm_last_error());
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
