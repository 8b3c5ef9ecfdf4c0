/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/graphs.c — the memory CUDA graph captures are served from (DESIGN §4.10).
 *
 * What it owns: graph segments, each one segment (segment.c) committed in full OUTSIDE any capture
 * (dmm_device_graph_reserve), and the blocks captures place in them.
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
 *
 * Shared graph pools (dmm_device_graph_share): captures that join one pool, as PyTorch's
 * `pool=graph_pool_handle()` asks, take from the pool's segments, where the blocks an earlier capture of
 * the pool freed (its intermediates) serve the next ones: graphs replayed one at a time (one per batch
 * size, as a serving engine has them) need the memory of the largest, not of all. The pool's segments
 * stay its own until every graph of the pool is released. Replaying two graphs of one pool at once is
 * the caller's error, as with PyTorch's shared pools.
 *
 * Sleep and wake (dmm_device_graphs_sleep / _wake): graph memory leaves the device as a tag's does, but
 * whole segments at a time and waited for: every awake segment is copied to pinned host memory (or not:
 * DISCARD), then decommitted, its range kept, so that every graph captured over it stays valid; wake
 * commits each again at the same addresses and copies its bytes back. One sleep or wake at a time; the
 * segments it works on are MOVING meanwhile (outside the lock): no capture, reserve or trim takes them.
 * While asleep no capture is served from them, and a replay of their graphs would read unmapped memory:
 * wake first. A decommit that FAILED leaves its segment awake (its bytes there); one the driver
 * quarantined counts as asleep (the rest of it went). A commit that fails at wake leaves its segment
 * asleep, its copy kept: wake again.
 *
 * Invariants (dev.lock): capture_id = 0 ⇔ idle ⇒ nothing live, !released; an idle segment with an
 * event (its graph's last replay may still run) is handed to a new capture only after a poll outside
 * any capture found the event complete; graph malloc makes no driver call at all; seg.committed =
 * usable while AWAKE, 0 while ASLEEP; usable ≤ seg.a.bytes, and no block reaches past it; host ≠ NULL only while ASLEEP (or MOVING), its bytes charged
 * to the host lease and counted in c->host_bytes; graphs_moving ⇔ some segment is MOVING.
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
/* The pool capture `id` joined, or 0 (dev.lock held). */
static uint64_t pool_of(const dmm_device *c, uint64_t id) {
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
    uint64_t off = 0, reserved = 0, mine_free = 0, pool = pool_of(c, capture_id);
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

dmm_status dmm_device_graph_reserve_pool(dmm_device *c, uint64_t bytes, uint64_t pool, dmm_stream stream) {
    if (c == NULL) return dmm__device_null("dmm_device_graph_reserve", "a device");
    if (bytes == 0) return DMM_OK;
    if (bytes > c->reserve) return dmm__device_too_large(c, bytes, "reserving graph memory of"); /* (rounding wraps) */
    bool capturing = false;
    uint64_t id = 0;
    dmm_status s = dmm_device_capture_status(c, stream, &capturing, &id);
    if (s != DMM_OK) return s;
    if (capturing)
        return dmm_error_set(DMM_ERR_BUSY, "dmm device: reserving graph memory during a capture (stream %p) would "
                                           "invalidate it; reserve before the capture begins",
                             stream);
    uint64_t len = dmm__device_round_granule(c, bytes);
    if ((s = dmm__device_lock_and_poll(c, "graph reserve")) != DMM_OK) return s;
    dmm__device_graphs_sweep_locked(c);
    for (graph_segment *x = c->graphs; x != NULL; x = x->next)
        if (x->sleep == GSEG_AWAKE && x->capture_id == 0 && x->ev == NULL && x->seg.a.bytes >= len) {
            /* an idle one, awake, is large enough (a fit left it smaller: its tail is mapped again) */
            if (x->usable < len) {
                uint64_t mapped = 0;
                s = dmm__device_commit_pieces(c, &x->seg.a, (dmm_range){(size_t)x->usable, (size_t)(len - x->usable)},
                                              &mapped);
                if (s != DMM_OK) continue; /* (a new segment below, or its refusal) */
                x->usable = len;
                x->seg.committed = len;
            }
            x->reserved = true;
            x->reserved_for = pool;
            pthread_mutex_unlock(&c->lock);
            dmm_clear_error();
            return DMM_OK;
        }
    graph_segment *g = calloc(1, sizeof *g);
    s = g != NULL ? dmm__device_segment_open(c, &g->seg, len, true, "a graph segment",
                                                       "graph memory on device %d", (int)c->dev.index)
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
    uint64_t pool = pool_of(c, capture_id);
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
    uint64_t had = pool_of(c, id);
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
    if (s != DMM_OK) return s;
    bool capturing = false;
    uint64_t id = 0;
    if ((s = dmm_device_capture_status(c, stream, &capturing, &id)) != DMM_OK) return s;
    if (capturing)
        return dmm_error_set(DMM_ERR_BUSY, "%s: stream %p is capturing a CUDA graph, and unmapping now would invalidate "
                             "the capture; fit after it; nothing changed", op, stream);
    pthread_mutex_lock(&c->lock);
    uint64_t pool = pool_of(c, capture_id);
    bool busy = false; /* a capture of the pool still going on (another stream): nothing is unmapped under it */
    for (uint32_t i = 0; i < c->njoins && pool != 0; i++) {
        if (c->graph_joins[i].pool != pool || c->graph_joins[i].capture_id == capture_id) continue;
        bool on = false;
        uint64_t now = 0;
        if (dmm_device_capture_status(c, c->graph_joins[i].stream, &on, &now) != DMM_OK ||
            (on && now == c->graph_joins[i].capture_id))
            busy = true;
        dmm_clear_error();
    }
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

/* ---- sleep and wake ---- */
static dmm_status refuse_capturing(dmm_device *c, const char *op, dmm_stream stream) {
    bool capturing = false;
    uint64_t id = 0;
    dmm_status s = dmm_device_capture_status(c, stream, &capturing, &id);
    if (s != DMM_OK) return s;
    if (capturing)
        return dmm_error_set(DMM_ERR_BUSY, "dmm device: %s refused: stream %p is capturing a CUDA graph, and mapping "
                             "or unmapping memory now would invalidate the capture; call it after the capture; nothing "
                             "changed", op, stream);
    return DMM_OK;
}

/* Checks a sleep or wake may start, then marks the segments in state `from` MOVING (dev.lock taken and
 * given back); *v = them (malloc'd, NULL when none). A sleep is refused while a capture on any stream
 * is served from graph memory (unmapping under it would invalidate it); broken segments never move. */
static dmm_status take_moving(dmm_device *c, const char *op, dmm_stream stream, int from, graph_segment ***v,
                              size_t *n) {
    *v = NULL;
    *n = 0;
    dmm_status s = dmm__device_refuse_lost(c, op);
    if (s == DMM_OK) s = refuse_capturing(c, op, stream);
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&c->lock);
    if (c->graphs_moving) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_BUSY, "dmm device: %s refused: another graph memory sleep or wake is under way "
                             "on device %d; nothing changed", op, (int)c->dev.index);
    }
    size_t k = 0;
    for (graph_segment *g = c->graphs; g != NULL; g = g->next) {
        if (g->sleep != from || g->broken) continue;
        if (g->capture_id != 0 && !g->released && g->capture_stream != NULL) {
            bool capturing = false;
            uint64_t id = 0;
            if (dmm_device_capture_status(c, g->capture_stream, &capturing, &id) == DMM_OK && capturing &&
                (id == g->capture_id || (g->pool != 0 && pool_of(c, id) == g->pool))) {
                pthread_mutex_unlock(&c->lock);
                return dmm_error_set(DMM_ERR_BUSY, "dmm device: %s refused: capture %llu on stream %p is being served "
                                     "from graph memory, and mapping or unmapping it now would invalidate the capture; "
                                     "call it after the capture; nothing changed", op, (unsigned long long)id,
                                     g->capture_stream);
            }
            dmm_clear_error();
        }
        k++;
    }
    graph_segment **w = k > 0 ? malloc(k * sizeof *w) : NULL;
    if (k > 0 && w == NULL) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: %s: out of host memory; nothing changed", op);
    }
    k = 0;
    for (graph_segment *g = c->graphs; g != NULL; g = g->next)
        if (g->sleep == from && !g->broken) {
            g->sleep = GSEG_MOVING;
            w[k++] = g;
        }
    c->graphs_moving = k > 0;
    pthread_mutex_unlock(&c->lock);
    *v = w;
    *n = k;
    return DMM_OK;
}

/* The segments a sleep or wake took go back to `to[i]` (dev.lock taken). */
static void put_back(dmm_device *c, graph_segment **v, const int *to, size_t n, bool sleep) {
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        graph_segment *g = v[i];
        g->sleep = to[i];
        g->seg.committed = to[i] == GSEG_AWAKE ? g->usable : 0;
    }
    c->graphs_moving = false;
    if (sleep) c->graph_sleeps++;
    else c->graph_wakes++;
    pthread_mutex_unlock(&c->lock);
}

/* A pinned copy made for segment g (charged, counted in c->host_bytes) gives way (dev.lock taken). */
static void drop_copy(dmm_device *c, graph_segment *g) {
    pthread_mutex_lock(&c->lock);
    gseg_host_drop(c, g);
    pthread_mutex_unlock(&c->lock);
}

dmm_status dmm_device_graphs_sleep(dmm_device *c, int mode, dmm_stream stream) {
    const char *op = "graph memory sleep";
    if (c == NULL) return dmm__device_null("dmm_device_graphs_sleep", "a device");
    if (mode != DMM_DEVICE_TO_HOST && mode != DMM_DEVICE_DISCARD)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: %s: mode %d refused: DMM_DEVICE_TO_HOST (0) keeps "
                             "the bytes in pinned host memory, DMM_DEVICE_DISCARD (1) drops them; nothing changed",
                             op, mode);
    if (mode == DMM_DEVICE_TO_HOST && !dmm__drv_can_host_alloc(c->drv))
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "dmm device: %s to host: driver '%s' has no host memory for copies "
                             "(its host_alloc slot); use DMM_DEVICE_DISCARD; nothing changed", op, c->drv->ops->name);
    graph_segment **v = NULL;
    size_t n = 0;
    dmm_status s = take_moving(c, op, stream, GSEG_AWAKE, &v, &n);
    if (s != DMM_OK || n == 0) return s;
    int *to = malloc(n * sizeof *to);
    if (to == NULL) {
        int awake = GSEG_AWAKE; /* (one at a time: no host memory for the array) */
        for (size_t i = 0; i < n; i++) put_back(c, &v[i], &awake, 1, false);
        free(v);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: %s: out of host memory; nothing changed", op);
    }
    for (size_t i = 0; i < n; i++) to[i] = GSEG_AWAKE;
    dmm_error_kept why = {0};
    /* 1. the last replays of released graphs (their events, on any stream) end first */
    for (size_t i = 0; i < n && why.status == DMM_OK; i++)
        if (v[i]->ev != NULL) (void)dmm__error_keep(&why, dmm__drv_event_synchronize(c->drv, v[i]->ev));
    /* 2. every pinned copy made before any is filled (a copy a failed wake kept is used again) */
    for (size_t i = 0; i < n && mode == DMM_DEVICE_TO_HOST && why.status == DMM_OK; i++) {
        graph_segment *g = v[i];
        uint64_t b = g->usable;
        if (g->host != NULL && g->host_bytes == b) continue; /* kept by a failed wake: used again */
        if (g->host != NULL) drop_copy(c, g);
        dmm_status ls = dmm_lease_grow(c->gov, c->host_lease, b, b);
        if (ls != DMM_OK) {
            (void)dmm__error_keep(&why, dmm__error_wrap(ls, "dmm device: %s: no room on the host tier for a copy of "
                                                        "%llu bytes", op, (unsigned long long)b));
            break;
        }
        void *host = NULL;
        if (dmm__error_keep(&why, dmm__drv_host_alloc(c->drv, (size_t)b, &host)) != DMM_OK) {
            (void)dmm_lease_shrink(c->gov, c->host_lease, b, b);
            break;
        }
        pthread_mutex_lock(&c->lock);
        g->host = host;
        g->host_bytes = b;
        c->host_bytes += b;
        pthread_mutex_unlock(&c->lock);
    }
    /* 3. the copies, after the work queued on `stream` (the graphs' replays), waited for */
    bool queued = false;
    for (size_t i = 0; i < n && mode == DMM_DEVICE_TO_HOST && why.status == DMM_OK; i++) {
        graph_segment *g = v[i];
        queued = true;
        (void)dmm__error_keep(&why, dmm__drv_copy(c->drv, (uintptr_t)g->host, (uintptr_t)g->seg.a.ptr,
                                                  (size_t)g->usable, stream));
    }
    dmm_status waited = queued ? dmm__drv_stream_synchronize(c->drv, stream) : DMM_OK; /* (no lock held) */
    (void)dmm__error_keep(&why, waited);
    if (why.status != DMM_OK) { /* nothing changed; copies a copy may still fill (the wait failed) are kept */
        for (size_t i = 0; i < n && waited == DMM_OK; i++) drop_copy(c, v[i]);
        put_back(c, v, to, n, true);
        free(to);
        free(v);
        s = dmm__error_restore(&why);
        return dmm__error_wrap(s, "dmm device: %s on device %d: nothing changed (graph memory awake%s)", op,
                               (int)c->dev.index, waited != DMM_OK ? "; its pinned copies are kept for the next sleep"
                                                                   : "");
    }
    /* 4. the unmaps: every segment's; one the driver refuses stays awake, one it quarantines is broken */
    size_t slept = 0;
    for (size_t i = 0; i < n; i++) {
        graph_segment *g = v[i];
        dmm_release_outcome o = dmm_mechanism_decommit(c->arena, &g->seg.a, (dmm_range){0, (size_t)g->usable});
        dmm_release_state st = dmm_release_state_of(&o);
        if (st == DMM_RELEASE_COMPLETE) {
            to[i] = GSEG_ASLEEP;
            slept++;
            continue;
        }
        drop_copy(c, g);
        if (st == DMM_RELEASE_FAILED) {
            (void)dmm__error_keep(&why, dmm__error_wrap(o.failure != DMM_OK ? o.failure : DMM_ERR_DRIVER,
                                                        "dmm device: %s: a segment of %llu bytes stays awake (the "
                                                        "driver refused its unmap)", op,
                                                        (unsigned long long)g->usable));
            continue;
        }
        to[i] = GSEG_ASLEEP;
        slept++;
        g->broken = true; /* (set while MOVING: no one else reads it) */
        (void)dmm__error_keep(&why, dmm_error_set(DMM_ERR_QUARANTINED, "dmm device: %s: the driver kept part of a "
                                                  "segment of %llu bytes (quarantined, never used again): the graphs "
                                                  "captured over it can never replay; release them and capture again",
                                                  op, (unsigned long long)g->usable));
    }
    put_back(c, v, to, n, slept > 0);
    free(to);
    free(v);
    if (why.status == DMM_OK) return DMM_OK;
    s = dmm__error_restore(&why);
    if (slept == 0)
        return dmm__error_wrap(s, "dmm device: %s on device %d: nothing changed (graph memory awake)", op,
                               (int)c->dev.index);
    return dmm__error_wrap(s, "dmm device: %s on device %d: %zu of %zu segments asleep", op, (int)c->dev.index, slept,
                           n);
}

dmm_status dmm_device_graphs_wake(dmm_device *c, dmm_stream stream) {
    const char *op = "graph memory wake";
    if (c == NULL) return dmm__device_null("dmm_device_graphs_wake", "a device");
    graph_segment **v = NULL;
    size_t n = 0;
    dmm_status s = take_moving(c, op, stream, GSEG_ASLEEP, &v, &n);
    if (s != DMM_OK || n == 0) return s;
    int *to = malloc(n * sizeof *to);
    if (to == NULL) {
        int asleep = GSEG_ASLEEP;
        for (size_t i = 0; i < n; i++) put_back(c, &v[i], &asleep, 1, false);
        free(v);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: %s: out of host memory; nothing changed", op);
    }
    char *bare = calloc(n, 1); /* mapped again, but its bytes could not be copied back: its copy stays */
    if (bare == NULL) {
        int asleep = GSEG_ASLEEP;
        for (size_t i = 0; i < n; i++) put_back(c, &v[i], &asleep, 1, false);
        free(to);
        free(v);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: %s: out of host memory; nothing changed", op);
    }
    dmm_error_kept why = {0};
    size_t woke = 0, nbare = 0;
    for (size_t i = 0; i < n; i++) { /* each at the same addresses, its bytes copied back */
        graph_segment *g = v[i];
        to[i] = GSEG_ASLEEP;
        dmm_range all = {0, (size_t)g->usable};
        uint64_t mapped = 0;
        s = dmm__device_commit_pieces(c, &g->seg.a, all, &mapped);
        if (s == DMM_ERR_BUDGET || s == DMM_ERR_OUT_OF_MEMORY) { /* the pool's cache first, as a graph reserve does */
            (void)dmm_pool_empty_cache(c->pool, NULL);
            s = dmm__device_commit_pieces(c, &g->seg.a, all, &mapped);
        }
        if (s == DMM_OK && g->host != NULL) {
            s = dmm__drv_copy(c->drv, (uintptr_t)g->seg.a.ptr, (uintptr_t)g->host, (size_t)g->host_bytes, stream);
            if (s != DMM_OK) { /* mapped without its bytes: back to sleep, its copy kept */
                dmm_error_kept cause = {0};
                dmm__error_keep(&cause, s);
                dmm_release_outcome o = dmm_mechanism_decommit(c->arena, &g->seg.a, all);
                s = dmm__error_restore(&cause);
                if (dmm_release_state_of(&o) != DMM_RELEASE_COMPLETE) { /* it stays mapped: awake, without them */
                    to[i] = GSEG_AWAKE;
                    bare[i] = 1;
                    nbare++;
                    (void)dmm__error_keep(&why, dmm__error_wrap(s, "dmm device: %s: a segment of %llu bytes is "
                                                                "mapped again, but its bytes could not be copied back "
                                                                "(its pinned copy is kept)", op,
                                                                (unsigned long long)g->usable));
                    continue;
                }
            }
        }
        if (s != DMM_OK) {
            (void)dmm__error_keep(&why, dmm__error_wrap(s, "dmm device: %s: a segment of %llu bytes stays asleep", op,
                                                        (unsigned long long)g->usable));
            continue;
        }
        to[i] = GSEG_AWAKE;
        woke++;
    }
    /* the copies are done before their pinned memory goes; a failed wait keeps the copies */
    dmm_status waited = woke > 0 ? dmm__drv_stream_synchronize(c->drv, stream) : DMM_OK;
    if (waited != DMM_OK)
        (void)dmm__error_keep(&why, dmm__error_wrap(waited, "dmm device: %s: waiting for the copies back failed (the "
                                                    "pinned copies are kept for the next sleep)", op));
    for (size_t i = 0; i < n && waited == DMM_OK; i++)
        if (to[i] == GSEG_AWAKE && !bare[i]) drop_copy(c, v[i]);
    put_back(c, v, to, n, false);
    free(bare);
    free(to);
    free(v);
    if (why.status == DMM_OK) return DMM_OK;
    s = dmm__error_restore(&why);
    return dmm__error_wrap(s, "dmm device: %s on device %d: %zu of %zu segments awake with their bytes%s", op,
                           (int)c->dev.index, woke, n, woke + nbare < n ? "; wake again for the rest" : "");
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
    if (blocks) { /* the snapshot: every segment (committed in full) and its blocks [address, bytes, requested] */
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
