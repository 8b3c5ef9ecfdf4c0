/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/graph_sleep.c — graph memory asleep and awake (issue 37; DESIGN §4.10).
 *
 * What it owns: dmm_device_graphs_sleep and dmm_device_graphs_wake. Graph memory leaves the device as
 * a tag's does (offload.c), but whole segments at a time and waited for: every awake segment is copied
 * to pinned host memory (or not: DISCARD), then decommitted, its range kept, so that every graph
 * captured over it stays valid; wake commits each again at the same addresses and copies its bytes
 * back. One sleep or wake at a time; the segments it works on are MOVING meanwhile (outside the lock):
 * no capture, reserve or trim takes them. While asleep no capture is served from them, and a replay of
 * their graphs would read unmapped memory: wake first. A decommit that FAILED leaves its segment awake
 * (its bytes there); one the driver quarantined is broken (it never wakes: its graphs must be captured
 * again). A commit that fails at wake leaves its segment asleep, its copy kept: wake again.
 *
 * A copy a failed wake kept (its wait failed) serves the next sleep when its size still fits.
 *
 * Invariants (dev.lock): those of graphs.c; only the sleep or wake that marked a segment MOVING touches
 * it until it puts it back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "driver/call.h"
#include "graphs.h"
#include "segment.h"

/* Checks a sleep or wake may start, then marks the segments in state `from` MOVING (dev.lock taken and
 * given back); *v = them (malloc'd, NULL when none). A sleep is refused while a capture on any stream
 * is served from graph memory (unmapping under it would invalidate it); broken segments never move. */
/* A segment a sleep or wake took: where it goes back to, and (a wake) whether it is mapped again without
 * its bytes (its copy stays). */
typedef struct moving {
    graph_segment *g;
    int to;
    bool bare;
} moving;

static dmm_status take_moving(dmm_device *c, const char *op, dmm_stream stream, int from, moving **v,
                              size_t *n) {
    *v = NULL;
    *n = 0;
    dmm_status s = dmm__device_refuse_lost(c, op);
    if (s == DMM_OK) s = dmm__device_refuse_capturing(c, op, stream);
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
                (id == g->capture_id || (g->pool != 0 && dmm__device_graph_pool_of(c, id) == g->pool))) {
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
    moving *w = k > 0 ? malloc(k * sizeof *w) : NULL;
    if (k > 0 && w == NULL) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: %s: out of host memory; nothing changed", op);
    }
    k = 0;
    for (graph_segment *g = c->graphs; g != NULL; g = g->next)
        if (g->sleep == from && !g->broken) {
            g->sleep = GSEG_MOVING;
            w[k++] = (moving){g, from, false};
        }
    c->graphs_moving = k > 0;
    pthread_mutex_unlock(&c->lock);
    *v = w;
    *n = k;
    return DMM_OK;
}

/* The segments a sleep or wake took go back to where their records say, and `done` (a count of the
 * device's, or NULL when the call changed nothing) counts one more (dev.lock taken). */
static void put_back(dmm_device *c, const moving *v, size_t n, uint64_t *done) {
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        graph_segment *g = v[i].g;
        g->sleep = v[i].to;
        g->seg.committed = v[i].to == GSEG_AWAKE ? g->usable : 0;
    }
    c->graphs_moving = false;
    if (done != NULL) (*done)++;
    pthread_mutex_unlock(&c->lock);
}

/* A pinned copy made for segment g (charged, counted in c->host_bytes) gives way (dev.lock taken). */
static void drop_copy(dmm_device *c, graph_segment *g) {
    pthread_mutex_lock(&c->lock);
    dmm__device_copy_drop(c, &g->host, &g->host_bytes);
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
    moving *v = NULL;
    size_t n = 0;
    dmm_status s = take_moving(c, op, stream, GSEG_AWAKE, &v, &n);
    if (s != DMM_OK || n == 0) return s;
    dmm_error_kept why = {0};
    /* 1. the last replays of released graphs (their events, on any stream) end first */
    for (size_t i = 0; i < n && why.status == DMM_OK; i++)
        if (v[i].g->ev != NULL) (void)dmm__error_keep(&why, dmm__drv_event_synchronize(c->drv, v[i].g->ev));
    /* 2. every pinned copy made before any is filled (a copy a failed wake kept is used again) */
    for (size_t i = 0; i < n && mode == DMM_DEVICE_TO_HOST && why.status == DMM_OK; i++) {
        graph_segment *g = v[i].g;
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
        graph_segment *g = v[i].g;
        queued = true;
        (void)dmm__error_keep(&why, dmm__drv_copy(c->drv, (uintptr_t)g->host, (uintptr_t)g->seg.a.ptr,
                                                  (size_t)g->usable, stream));
    }
    dmm_status waited = queued ? dmm__drv_stream_synchronize(c->drv, stream) : DMM_OK; /* (no lock held) */
    (void)dmm__error_keep(&why, waited);
    if (why.status != DMM_OK) { /* nothing changed; copies a copy may still fill (the wait failed) are kept */
        for (size_t i = 0; i < n && waited == DMM_OK; i++) drop_copy(c, v[i].g);
        put_back(c, v, n, NULL);
        free(v);
        s = dmm__error_restore(&why);
        return dmm__error_wrap(s, "dmm device: %s on device %d: nothing changed (graph memory awake%s)", op,
                               (int)c->dev.index, waited != DMM_OK ? "; its pinned copies are kept for the next sleep"
                                                                   : "");
    }
    /* 4. the unmaps: every segment's; one the driver refuses stays awake, one it quarantines is broken */
    size_t slept = 0;
    for (size_t i = 0; i < n; i++) {
        graph_segment *g = v[i].g;
        dmm_release_outcome o = dmm_mechanism_decommit(c->arena, &g->seg.a, (dmm_range){0, (size_t)g->usable});
        dmm_release_state st = dmm_release_state_of(&o);
        if (st == DMM_RELEASE_COMPLETE) {
            v[i].to = GSEG_ASLEEP;
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
        v[i].to = GSEG_ASLEEP;
        slept++;
        g->broken = true; /* (set while MOVING: no one else reads it) */
        (void)dmm__error_keep(&why, dmm_error_set(DMM_ERR_QUARANTINED, "dmm device: %s: the driver kept part of a "
                                                  "segment of %llu bytes (quarantined, never used again): the graphs "
                                                  "captured over it can never replay; release them and capture again",
                                                  op, (unsigned long long)g->usable));
    }
    put_back(c, v, n, slept > 0 ? &c->graph_sleeps : NULL);
    free(v);
    if (slept > 0) { /* the handles leave the device, not for the arena's cache (H100: 8 of 38 MiB stayed there) */
        (void)dmm_mechanism_drain_cache(c->arena);
        dmm_clear_error(); /* (what this call says is kept in `why`) */
    }
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
    moving *v = NULL;
    size_t n = 0;
    dmm_status s = take_moving(c, op, stream, GSEG_ASLEEP, &v, &n);
    if (s != DMM_OK || n == 0) return s;
    dmm_error_kept why = {0};
    size_t woke = 0, nbare = 0;
    for (size_t i = 0; i < n; i++) { /* each at the same addresses, its bytes copied back */
        graph_segment *g = v[i].g;
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
                    v[i].to = GSEG_AWAKE;
                    v[i].bare = true;
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
        v[i].to = GSEG_AWAKE;
        woke++;
    }
    /* the copies are done before their pinned memory goes; a failed wait keeps the copies */
    dmm_status waited = woke > 0 ? dmm__drv_stream_synchronize(c->drv, stream) : DMM_OK;
    if (waited != DMM_OK)
        (void)dmm__error_keep(&why, dmm__error_wrap(waited, "dmm device: %s: waiting for the copies back failed (the "
                                                    "pinned copies are kept for the next sleep)", op));
    for (size_t i = 0; i < n && waited == DMM_OK; i++)
        if (v[i].to == GSEG_AWAKE && !v[i].bare) drop_copy(c, v[i].g);
    put_back(c, v, n, woke > 0 ? &c->graph_wakes : NULL);
    free(v);
    if (why.status == DMM_OK) return DMM_OK;
    s = dmm__error_restore(&why);
    return dmm__error_wrap(s, "dmm device: %s on device %d: %zu of %zu segments awake with their bytes%s", op,
                           (int)c->dev.index, woke, n, woke + nbare < n ? "; wake again for the rest" : "");
}
