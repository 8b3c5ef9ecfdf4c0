/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/graphs.c — the memory CUDA graph captures are served from (DESIGN §4.10).
 *
 * What it owns: graph segments, each one segment (segment.c) committed OUTSIDE any capture
 * (dmm_device_graph_reserve), the blocks captures place in them, shared pools and the fit.
 *
 * Why not the pool: during a capture nothing may map, unmap or set access, and no event may be
 * queried (each would invalidate the capture), so a capture can only use memory that is mapped
 * already and that no one will unmap while the graph lives. The pool moves and trims free chunks
 * behind completed events, which is right for eager work and wrong for a graph whose replays write
 * the same addresses later. So a capture takes an idle segment for itself (by capture id); blocks
 * freed during the capture are reused by that capture only (stream order inside the graph makes that
 * safe); after the capture the segment stays the graph's — whatever is freed — until the graph is
 * released (dmm_device_graph_release, called by the Python wrapper when the graph object dies). A
 * capture that finds no room fails with a sentence that says how to reserve, instead of mapping.
 * A reserve promises its segment to the next capture: trims (empty_cache, the retry after a refusal)
 * keep it until a capture takes it, since torch.cuda.graph itself empties the cache between
 * dmm.torch.graph's reserve and the capture; the context's destroy releases it.
 *
 * Shared graph pools (dmm_device_graph_share): captures that join one pool, as PyTorch's
 * `pool=graph_pool_handle()` asks, take from the pool's segments, where the blocks an earlier capture of
 * the pool freed (its intermediates) serve the next ones: graphs replayed one at a time (one per batch
 * size, as a serving engine has them) need the memory of the largest, not of all. The pool's segments
 * stay its own until every graph of the pool is released. Replaying two graphs of one pool at once is
 * the caller's error, as with PyTorch's shared pools.
 *
 * Fit (dmm_device_graph_fit): graph segments are committed in 2 MiB pieces, and after a capture the
 * pieces past the highest byte its blocks reached go back (`usable`, the mapped front, shrinks): a graph
 * holds what it used, not its reserve. A reserve maps a fitted idle segment up again; a reserve made for
 * a pool (dmm_device_graph_reserve_pool) that the pool's own memory made unnecessary goes back at the
 * fit. A pool's first segment reserves POOL_ROOM times its reserve as address space, and a later reserve
 * of the pool maps that segment's tail again instead of a segment of its own, so that the pool's
 * captures stay in one segment, fitted once (a segment per spill was rounded up to a piece each).
 * Sleep and wake are graph_sleep.c's.
 *
 * Invariants (dev.lock): capture_id = 0 ⇔ idle ⇒ nothing live, !released; an idle segment with an
 * event (its graph's last replay may still run) is handed to a new capture only after a poll outside
 * any capture found the event complete; graph malloc makes no driver call at all; seg.committed =
 * usable while AWAKE, 0 while ASLEEP; usable ≤ seg.a.bytes, and no block reaches past it; high ≤ the
 * end of the highest block any capture took since the segment went idle; host ≠ NULL only after a sleep
 * (or a wake whose wait failed), its bytes charged to the host lease and counted in c->host_bytes;
 * graphs_moving ⇔ some segment is MOVING; a join per live graph of a shared pool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "driver/call.h"
#include "graphs.h"
#include "jobs.h"
#include "segment.h"

/* A block of `len` in g's mapped front [0, usable) (first fit); false: nothing changed. */
static bool take_within(graph_segment *g, uint64_t len, uint64_t req, uint64_t *off) {
    if (!dmm__device_segment_take(&g->seg, len, req, off)) return false;
    if (*off + len <= g->usable) return true;
    dmm__device_segment_give(&g->seg, *off, NULL, NULL); /* past what is mapped (a fit gave it back) */
    return false;
}

/* ---- shared graph pools: who joined which ---- */
uint64_t dmm__device_graph_pool_of(const dmm_device *c, uint64_t id) {
    for (uint32_t i = 0; i < c->njoins; i++)
        if (c->graph_joins[i].capture_id == id) return c->graph_joins[i].pool;
    return 0;
}

static bool pool_alive(const dmm_device *c, uint64_t pool) {
    for (uint32_t i = 0; i < c->njoins; i++)
        if (c->graph_joins[i].pool == pool) return true;
    return false;
}

dmm_status dmm__device_graph_malloc(dmm_device *c, size_t bytes, dmm_stream stream, uint64_t capture_id, void **out) {
    uint64_t len = dmm__device_round_block(c, bytes);
    if (capture_id == 0) {
        dmm_atomic_add_relaxed(&c->capture_refusals, 1);
        return dmm_error_set(DMM_ERR_UNSUPPORTED,
                             "dmm device: allocating %zu bytes on stream %p while a CUDA graph capture is under way "
                             "that the driver would not name (another stream captures in global mode); allocate on "
                             "the capturing stream, or outside the capture",
                             bytes, stream);
    }
    pthread_mutex_lock(&c->lock);
    uint64_t off = 0, reserved = 0, mine_free = 0, pool = dmm__device_graph_pool_of(c, capture_id);
    graph_segment *g = NULL;
    uint64_t asleep = 0;
    for (graph_segment *x = c->graphs; x != NULL && g == NULL; x = x->next) {
        reserved += x->usable;
        if (x->sleep != GSEG_AWAKE) {
            asleep += x->usable;
            continue;
        }
        if (!x->released && (pool != 0 ? x->pool == pool : x->capture_id == capture_id && x->pool == 0)) {
            mine_free += x->usable - x->seg.live_bytes;
            if (take_within(x, len, bytes, &off)) g = x;
        }
    }
    for (graph_segment *x = c->graphs; x != NULL && g == NULL; x = x->next)
        if (x->sleep == GSEG_AWAKE && x->capture_id == 0 && x->ev == NULL && x->seg.count == 0 &&
            take_within(x, len, bytes, &off)) {
            x->capture_id = capture_id;
            x->capture_stream = stream;
            x->pool = pool;
            x->reserved = false;
            g = x;
        }
    if (g == NULL) {
        uint64_t idle = 0;
        for (graph_segment *x = c->graphs; x != NULL; x = x->next)
            if (x->sleep == GSEG_AWAKE && x->capture_id == 0 && x->ev == NULL) idle += x->usable;
        pthread_mutex_unlock(&c->lock);
        dmm_atomic_add_relaxed(&c->capture_refusals, 1);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "dmm device: CUDA graph capture %llu on stream %p (device %d) asked for %zu bytes, but a "
                             "capture can only use memory mapped before it began, and none is free for it (%llu "
                             "bytes reserved for graphs, %llu free in this capture's segments, %llu in idle "
                             "segments, %llu asleep); mapping now would invalidate the capture, so nothing was "
                             "mapped: reserve enough before capturing with dmm_device_graph_reserve (under "
                             "PyTorch: dmm.torch.reserve_graph_memory(bytes) or dmm.torch.graph(g, "
                             "reserve_bytes=...))%s",
                             (unsigned long long)capture_id, stream, (int)c->dev.index, bytes,
                             (unsigned long long)reserved, (unsigned long long)mine_free, (unsigned long long)idle,
                             (unsigned long long)asleep, asleep > 0 ? ", and wake graph memory that sleeps first" : "");
    }
    g->capture_stream = stream;
    if (off + len > g->high) g->high = off + len; /* (what a fit keeps) */
    pthread_mutex_unlock(&c->lock);
    dmm_atomic_add_relaxed(&c->capture_mallocs, 1);
    *out = (char *)g->seg.a.ptr + off;
    return DMM_OK;
}

dmm_status dmm__device_graph_free_locked(dmm_device *c, void *ptr, uint64_t *len, uint64_t *req) {
    for (graph_segment *g = c->graphs; g != NULL; g = g->next) {
        uint64_t off = 0;
        if (!dmm__device_segment_holds(&g->seg, ptr, &off)) continue;
        if (!dmm__device_segment_give(&g->seg, off, len, req)) return DMM_ERR_UNKNOWN_ALLOCATION;
        if (g->released && g->seg.count == 0) {
            g->capture_id = 0;
            g->pool = 0;
            g->released = false;
            g->high = 0;
        }
        return DMM_OK;
    }
    return DMM_ERR_UNKNOWN_ALLOCATION;
}

dmm_status dmm_device_graph_reserve(dmm_device *c, uint64_t bytes, dmm_stream stream) {
    return dmm_device_graph_reserve_pool(c, bytes, 0, stream);
}

/* Whether a capture of `pool` other than `except` is going on (dev.lock held): then nothing of the pool
 * is mapped or unmapped under it. A status the driver cannot give counts as going on. */
static bool pool_capturing(dmm_device *c, uint64_t pool, uint64_t except) {
    bool busy = false;
    for (uint32_t i = 0; i < c->njoins && !busy; i++) {
        if (c->graph_joins[i].pool != pool || c->graph_joins[i].capture_id == except) continue;
        bool on = false;
        uint64_t now = 0;
        busy = dmm_device_capture_status(c, c->graph_joins[i].stream, &on, &now) != DMM_OK ||
               (on && now == c->graph_joins[i].capture_id);
        dmm_clear_error();
    }
    return busy;
}

static void gseg_host_drop(dmm_device *c, graph_segment *g);

/* Maps g's front up to `bytes` (dev.lock held; g awake, bytes within its range): the tail a fit gave back.
 * A pinned copy a failed wake kept no longer has g's size and goes. False when the driver refused:
 * nothing changed (its sentence is set). */
static bool map_front_locked(dmm_device *c, graph_segment *g, uint64_t bytes) {
    if (bytes <= g->usable) return true;
    uint64_t mapped = 0;
    if (dmm__device_commit_pieces(c, &g->seg.a, (dmm_range){(size_t)g->usable, (size_t)(bytes - g->usable)},
                                  &mapped) != DMM_OK)
        return false;
    g->usable = bytes;
    g->seg.committed = bytes;
    if (g->host != NULL && g->host_bytes != g->usable) gseg_host_drop(c, g);
    return true;
}

#define POOL_ROOM 4 /* a shared pool's first segment reserves this many times its first reserve as VA */

/* A reserve for a pool that has a segment of its own (dev.lock held, no capture of it going on): when the
 * segment's address range has `len` bytes past the highest byte its captures reached, its unmapped tail
 * (a fit gave it back) is mapped again up to there, so that the next capture continues in the pool's
 * own memory instead of spilling into a segment of its own (whose fit would round it up to a piece
 * again); the fit after the capture gives back what it did not reach. False (nothing mapped) when no
 * segment of the pool has that room: a reserve of its own then, as for any capture. */
static bool extend_pool_locked(dmm_device *c, uint64_t pool, uint64_t len) {
    for (graph_segment *x = c->graphs; x != NULL; x = x->next) {
        if (x->pool != pool || x->capture_id == 0 || x->sleep != GSEG_AWAKE || x->released || x->broken) continue;
        uint64_t want = dmm__device_round_granule(c, x->high) + len;
        if (want > x->seg.a.bytes) continue; /* no room in its range */
        return map_front_locked(c, x, want); /* refused: a segment of its own below, or its refusal */
    }
    return false;
}

dmm_status dmm_device_graph_reserve_pool(dmm_device *c, uint64_t bytes, uint64_t pool, dmm_stream stream) {
    if (c == NULL) return dmm__device_null("dmm_device_graph_reserve", "a device");
    if (bytes == 0) return DMM_OK;
    if (bytes > c->reserve) return dmm__device_too_large(c, bytes, "reserving graph memory of"); /* (rounding wraps) */
    dmm_status s = dmm__device_refuse_capturing(c, "reserving graph memory", stream);
    if (s != DMM_OK) return s;
    uint64_t len = dmm__device_round_granule(c, bytes);
    if ((s = dmm__device_lock_and_poll(c, "graph reserve")) != DMM_OK) return s;
    dmm__device_graphs_sweep_locked(c);
    if (pool != 0 && !pool_capturing(c, pool, 0) && extend_pool_locked(c, pool, len)) {
        pthread_mutex_unlock(&c->lock);
        dmm_clear_error();
        return DMM_OK;
    }
    for (graph_segment *x = c->graphs; x != NULL; x = x->next)
        if (x->sleep == GSEG_AWAKE && x->capture_id == 0 && x->ev == NULL && x->seg.a.bytes >= len) {
            /* an idle one, awake, is large enough (a fit left it smaller: its tail is mapped again) */
            if (!map_front_locked(c, x, len)) continue; /* (a new segment below, or its refusal) */
            x->reserved = true;
            x->reserved_for = pool;
            pthread_mutex_unlock(&c->lock);
            dmm_clear_error();
            return DMM_OK;
        }
    graph_segment *g = calloc(1, sizeof *g);
    /* a pool's segment gets room to grow into (address space only: POOL_ROOM × the reserve), so that a
     * later reserve of the pool maps its tail instead of a segment of its own (extend_pool_locked) */
    uint64_t va = pool != 0 && len <= c->reserve / POOL_ROOM ? len * POOL_ROOM : len;
    s = g != NULL ? dmm__device_segment_open(c, &g->seg, va, len, "a graph segment", "graph memory on device %d",
                                             (int)c->dev.index)
                  : dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for a graph segment");
    if (s != DMM_OK) {
        free(g);
        pthread_mutex_unlock(&c->lock);
        return s;
    }
    g->reserved = true;
    g->reserved_for = pool;
    g->usable = len;
    g->next = c->graphs;
    c->graphs = g;
    pthread_mutex_unlock(&c->lock);
    dmm_clear_error();
    return DMM_OK;
}

dmm_status dmm_device_graph_release(dmm_device *c, uint64_t capture_id, dmm_stream stream) {
    if (c == NULL) return dmm__device_null("dmm_device_graph_release", "a device");
    if (capture_id == 0) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: graph release of capture id 0");
    dmm_status ls = dmm__device_refuse_lost(c, "graph release");
    if (ls != DMM_OK) return ls;
    pthread_mutex_lock(&c->lock);
    dmm_status s = DMM_OK;
    uint64_t pool = dmm__device_graph_pool_of(c, capture_id);
    /* the graph's last replay may still run on `stream`: its segments are reusable behind this event (which,
     * re-recorded for a pool, first waits for the one before: an earlier graph's replay on another stream) */
    for (graph_segment *g = c->graphs; g != NULL && s == DMM_OK; g = g->next) {
        if (pool != 0 ? g->pool != pool : g->capture_id != capture_id || g->pool != 0) continue;
        if (g->ev == NULL) s = dmm__drv_event_create(c->drv, &g->ev);
        else if (dmm__drv_can_wait_event(c->drv)) s = dmm__drv_stream_wait_event(c->drv, stream, g->ev);
        if (s == DMM_OK) s = dmm__drv_event_record(c->drv, g->ev, stream);
    }
    bool last = s == DMM_OK; /* of a pool: the last of its graphs went (its segments are the pool's until then) */
    if (s == DMM_OK && pool != 0) { /* (a failure above left the join: a retry finds the pool again) */
        for (uint32_t i = 0; i < c->njoins; i++)
            if (c->graph_joins[i].capture_id == capture_id) {
                c->graph_joins[i] = c->graph_joins[--c->njoins];
                break;
            }
        last = !pool_alive(c, pool);
    }
    for (graph_segment *g = c->graphs; g != NULL && last; g = g->next) {
        if (pool != 0 ? g->pool != pool : g->capture_id != capture_id || g->pool != 0) continue;
        if (g->seg.count == 0) {
            g->capture_id = 0;
            g->pool = 0;
            g->high = 0;
        } else {
            g->released = true;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (s == DMM_ERR_DEVICE_LOST)
        return dmm__error_wrap(s, "dmm device: graph release of capture %llu on device %d: the device is lost (no "
                                  "driver call from now on)",
                               (unsigned long long)capture_id, (int)c->dev.index);
    return s;
}

/* Gives a segment's pinned copy back (dev.lock held). */
static void gseg_host_drop(dmm_device *c, graph_segment *g) { dmm__device_copy_drop(c, &g->host, &g->host_bytes); }

static void gseg_free(dmm_device *c, graph_segment *g) {
    gseg_host_drop(c, g);
    dmm__device_segment_close(&g->seg);
    free(g);
}

/* The finish of an idle segment's queued release: gone, back in service, or dropped after a loss. */
static void gseg_release_finished(dmm_device *c, device_job *j, device_job_end how, dmm_status status) {
    (void)status;
    graph_segment *g = j->owner;
    if (how == DEVICE_JOB_FAILED) { /* not released: back in service */
        g->next = c->graphs;
        c->graphs = g;
        return;
    }
    gseg_free(c, g);
}

/* ---- shared graph pools ---- */
dmm_status dmm_device_graph_share(dmm_device *c, dmm_stream stream, uint64_t pool) {
    const char *op = "dmm_device_graph_share";
    if (c == NULL) return dmm__device_null(op, "a device");
    if (pool == 0) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: pool 0 refused: name a pool by any other "
                                        "number; nothing changed", op);
    bool capturing = false;
    uint64_t id = 0;
    dmm_status s = dmm_device_capture_status(c, stream, &capturing, &id);
    if (s != DMM_OK) return s;
    if (!capturing || id == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: stream %p is not capturing a CUDA graph; call it inside "
                             "the capture, before it allocates; nothing changed", op, stream);
    pthread_mutex_lock(&c->lock);
    uint64_t had = dmm__device_graph_pool_of(c, id);
    bool own = false; /* the capture took a segment of its own already */
    for (graph_segment *g = c->graphs; g != NULL; g = g->next) own |= g->capture_id == id && g->pool == 0;
    if (had == pool) s = DMM_OK;
    else if (had != 0 || own)
        s = dmm_error_set(DMM_ERR_BUSY, "%s: capture %llu %s; join a pool before the capture allocates; nothing "
                          "changed", op, (unsigned long long)id, had != 0 ? "is in another pool already"
                                                                          : "has allocated from memory of its own");
    else if (c->njoins == DMM_DEVICE_GRAPH_JOINS)
        s = dmm_error_set(DMM_ERR_BUSY, "%s: %d graphs of shared pools are alive on device %d, the most there can be; "
                          "release graphs first; nothing changed", op, DMM_DEVICE_GRAPH_JOINS, (int)c->dev.index);
    else {
        c->graph_joins[c->njoins].capture_id = id;
        c->graph_joins[c->njoins].pool = pool;
        c->graph_joins[c->njoins].stream = stream;
        c->njoins++;
    }
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* ---- fit ---- */
dmm_status dmm_device_graph_fit(dmm_device *c, uint64_t capture_id, dmm_stream stream) {
    const char *op = "dmm_device_graph_fit";
    if (c == NULL) return dmm__device_null(op, "a device");
    if (capture_id == 0) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: capture id 0 names no capture; nothing "
                                              "changed", op);
    dmm_status s = dmm__device_refuse_lost(c, op);
    if (s == DMM_OK) s = dmm__device_refuse_capturing(c, op, stream);
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&c->lock);
    uint64_t pool = dmm__device_graph_pool_of(c, capture_id);
    /* a capture of the pool still going on (another stream): nothing is unmapped under it */
    bool busy = pool != 0 && pool_capturing(c, pool, capture_id);
    dmm_error_kept why = {0};
    for (graph_segment *g = c->graphs; g != NULL && !busy; g = g->next) {
        bool mine = pool != 0 ? g->pool == pool : g->capture_id == capture_id && g->pool == 0;
        if (mine && g->sleep == GSEG_AWAKE && !g->released) {
            uint64_t keep = dmm__device_round_granule(c, g->high);
            if (keep >= g->usable) continue;
            dmm_release_outcome o = dmm_mechanism_decommit(c->arena, &g->seg.a,
                                                           (dmm_range){(size_t)keep, (size_t)(g->usable - keep)});
            dmm_release_state st = dmm_release_state_of(&o);
            if (st == DMM_RELEASE_FAILED) {
                (void)dmm__error_keep(&why, o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER);
                continue;
            }
            /* COMPLETE: a tail of whole pieces went; QUARANTINED: some of [keep, usable) stays, out of use */
            g->usable = st == DMM_RELEASE_COMPLETE ? g->usable - o.unmapped_bytes : keep;
            g->seg.committed = g->usable;
            if (g->host != NULL && g->host_bytes != g->usable) gseg_host_drop(c, g); /* a kept copy: no longer its size */
            if (st != DMM_RELEASE_COMPLETE) (void)dmm__error_keep(&why, DMM_ERR_QUARANTINED);
        } else if (pool != 0 && g->reserved && g->reserved_for == pool && g->capture_id == 0 && g->seg.count == 0 &&
                   g->sleep == GSEG_AWAKE && g->ev == NULL) {
            g->reserved = false; /* the reserve made for this pool's capture, which its memory served: a trim's */
        }
    }
    if (pool != 0 && !busy) (void)dmm__device_graphs_trim_locked(c);
    pthread_mutex_unlock(&c->lock);
    if (why.status == DMM_OK) return DMM_OK;
    s = dmm__error_restore(&why);
    return dmm__error_wrap(s, "%s of capture %llu on device %d: a tail could not be given back (it stays mapped, or "
                           "quarantined), the rest was", op, (unsigned long long)capture_id, (int)c->dev.index);
}

typedef enum { SWEEP_ONLY, TRIM_UNRESERVED, TRIM_ALL } sweep_mode;

/* Idle segments whose event completed lose it (they may serve a new capture); a trim gives idle
 * segments back to the arena (behind their event, through the queue), except, for TRIM_UNRESERVED,
 * one a reserve promised to the next capture: torch.cuda.graph itself empties the cache between
 * dmm.torch.graph's reserve and the capture. */
static uint64_t sweep_locked(dmm_device *c, sweep_mode mode) {
    uint64_t freed = 0;
    if (c->jobs_taken_back) return 0; /* (before: the callers refuse a lost device) */
    graph_segment **pp = &c->graphs;
    while (*pp != NULL) {
        graph_segment *g = *pp;
        if (g->sleep == GSEG_MOVING) { /* a sleep or wake works on it outside the lock: not touched */
            pp = &g->next;
            continue;
        }
        bool idle = g->capture_id == 0 && g->seg.count == 0;
        if (idle && g->ev != NULL && dmm__drv_event_query(c->drv, g->ev) == DMM_OK) {
            (void)dmm__drv_event_destroy(c->drv, g->ev);
            g->ev = NULL;
        }
        /* an idle segment asleep can serve no capture: a trim gives it back (and its copy), reserved or not */
        bool promised = g->reserved && g->sleep == GSEG_AWAKE;
        if (!idle || mode == SWEEP_ONLY || (mode == TRIM_UNRESERVED && promised)) {
            pp = &g->next;
            continue;
        }
        if (g->ev == NULL) { /* never used since, or its event completed: release now */
            if (!dmm__device_segment_release(c, &g->seg)) {
                pp = &g->next;
                continue;
            }
            freed += g->seg.committed;
            *pp = g->next;
            gseg_free(c, g);
            continue;
        }
        if (dmm__device_segment_release_behind(c, &g->seg, g->ev, gseg_release_finished, g) != DMM_OK) {
            pp = &g->next;
            continue;
        }
        g->ev = NULL; /* the job owns it now */
        freed += g->seg.committed;
        *pp = g->next;
    }
    dmm_clear_error();
    return freed;
}

uint64_t dmm__device_graphs_trim_locked(dmm_device *c) { return sweep_locked(c, TRIM_UNRESERVED); }

uint64_t dmm__device_graphs_fini_locked(dmm_device *c) { return sweep_locked(c, TRIM_ALL); }

void dmm__device_graphs_sweep_locked(dmm_device *c) { (void)sweep_locked(c, SWEEP_ONLY); }

void dmm__device_graphs_drop_lost(dmm_device *c) {
    while (c->graphs != NULL) {
        graph_segment *g = c->graphs;
        c->graphs = g->next;
        gseg_free(c, g); /* its event went with the context */
    }
}

void dmm__device_graphs_json_locked(dmm_device *c, dmm_json *j, bool blocks) {
    uint64_t n = 0, reserved = 0, live = 0, idle = 0, largest_idle = 0, owned = 0, asleep = 0, host = 0;
    for (graph_segment *g = c->graphs; g != NULL; g = g->next) {
        n++;
        reserved += g->usable;
        live += g->seg.live_bytes;
        if (g->sleep == GSEG_ASLEEP) asleep += g->usable;
        host += g->host_bytes;
        if (g->capture_id != 0) owned++;
        else if (g->sleep == GSEG_AWAKE) {
            idle += g->usable;
            if (g->ev == NULL && g->usable > largest_idle) largest_idle = g->usable;
        }
    }
    dmm__json_put(j,
                  "{\"segments\":%llu,\"reserved_bytes\":%llu,\"live_bytes\":%llu,\"idle_bytes\":%llu,"
                  "\"largest_idle_bytes\":%llu,\"segments_owned_by_graphs\":%llu,\"asleep_bytes\":%llu,"
                  "\"host_bytes\":%llu,\"sleeps\":%llu,\"wakes\":%llu",
                  (unsigned long long)n, (unsigned long long)reserved, (unsigned long long)live, (unsigned long long)idle,
                  (unsigned long long)largest_idle, (unsigned long long)owned, (unsigned long long)asleep,
                  (unsigned long long)host, (unsigned long long)c->graph_sleeps, (unsigned long long)c->graph_wakes);
    if (blocks) { /* the snapshot: every segment (its mapped front) and its blocks [address, bytes, requested] */
        dmm__json_put(j, ",\"segment_list\":[");
        for (graph_segment *g = c->graphs; g != NULL; g = g->next) {
            dmm__json_put(j, "%s{\"address\":%llu,\"bytes\":%llu,\"capture_id\":%llu,\"blocks\":[",
                          g == c->graphs ? "" : ",", (unsigned long long)(uintptr_t)g->seg.a.ptr,
                          (unsigned long long)g->usable, (unsigned long long)g->capture_id);
            dmm__device_segment_json_blocks(&g->seg, j);
            dmm__json_put(j, "],\"pool\":%llu,\"asleep\":%s,\"broken\":%s}", (unsigned long long)g->pool,
                          g->sleep == GSEG_ASLEEP ? "true" : "false", g->broken ? "true" : "false");
        }
        dmm__json_put(j, "]");
    }
    dmm__json_put(j, "}");
}

void dmm__device_graphs_totals_locked(dmm_device *c, uint64_t *live, uint64_t *committed) {
    *live = *committed = 0;
    for (graph_segment *g = c->graphs; g != NULL; g = g->next) {
        *live += g->seg.live_bytes;
        *committed += g->seg.committed;
    }
}
