/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/offload.c — a tag leaves the device and comes back (DESIGN §4.11).
 *
 * What it owns: offload, its wait, restore and release_host of a tag, and the finish of the
 * decommits an offload queues (jobs.c).
 *
 * Offload (to host or discard): copies [0, highest live end) of each segment into pinned host memory
 * on the caller's stream — ordered after the work queued there that reads the tensors — in up to
 * DMM_DEVICE_OFFLOAD_PIECES pieces, each followed by its own event, and enqueues per piece the
 * decommit of [0, end of that piece) in the deferred queue, gated by that event (the last piece's
 * covers the whole committed range). It returns at once: no stream or device synchronize, and no
 * unmap runs before the first event completed, i.e. before every kernel queued ahead of it (the ones
 * still reading the weights) ended. The decommits run in later polls (any malloc, stats call, poll or
 * wait; a wait asks the queued pieces' events and blocks, with the device lock dropped, on the tag's
 * own event, recorded after the last copy: its unmaps then follow the whole copy, where the polls'
 * overlap it).
 * Restore recommits each segment's range in 32 MiB pieces (restore_piece: why that size), one handle
 * each, however the segment grew, queueing each piece's copy back on the caller's stream right after
 * its commit, at the same addresses: tensors and CUDA graphs that hold them stay valid.
 * tests/gpu/torch/restore_variants.py measures other piece sizes through DMM_TORCH_RESTORE_PIECE.
 * The pinned copies are kept after a restore (the next offload runs at copy speed); release_host
 * frees them. A decommit that FAILED changed nothing: the later pieces' ranges cover its chunks again;
 * if the last one fails too, what it could not unmap stays mapped, the tag reports the failure, and
 * restore maps the rest and copies everything back.
 *
 * Invariants (dev.lock): those of tags.c; a segment's decommits leave the queue in order, so the
 * first still queued is piece jobs_queued − jobs_left.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "context.h"
#include "driver/call.h"
#include "jobs.h"
#include "segment.h"
#include "tags.h"

#define MIB ((uint64_t)1 << 20)

static dmm_status refuse_capturing(dmm_device *c, const char *op, const char *tag, dmm_stream stream) {
    char what[96];
    snprintf(what, sizeof what, "%s of tag '%s'", op, tag);
    return dmm__device_refuse_capturing(c, what, stream);
}

/* ---- the finish of a queued decommit (jobs.c) ---- */
/* It left the queue: ran (`failure` = DMM_OK, or DMM_ERR_QUARANTINED) or was taken out after it FAILED
 * (`failure` = its status), or was taken back unrun after a confirmed loss. The segment is offloaded
 * once its last one left. */
static void decommit_finished(dmm_device *c, device_job *j, device_job_end how, dmm_status failure) {
    tag_segment *g = j->owner;
    device_tag *t = &c->tags[g->tag];
    if (how == DEVICE_JOB_TAKEN_BACK) { /* no driver call: the tags are marked lost next */
        if (g->jobs_left > 0 && --g->jobs_left > 0) return;
        g->state = SEG_OFFLOADED;
        g->restored = 0;
        if (t->pending > 0) t->pending--;
        return;
    }
    g->decommit_ns = dmm_device_clock_ns();
    /* a failed piece changed nothing and the later pieces' ranges cover it again: only the last counts,
     * and any quarantine */
    if (failure != DMM_OK && (j->last || failure == DMM_ERR_QUARANTINED)) t->failure = failure;
    if (g->jobs_left > 0 && --g->jobs_left > 0) return;
    /* what the queued decommits could not unmap stays mapped: restore maps the rest and copies it all */
    g->state = SEG_OFFLOADED;
    g->restored = 0;
    if (t->pending > 0 && --t->pending == 0) {
        t->pending_polls = c->polls - t->polls_mark;
        t->state = TAG_OFFLOADED;
        t->offload_done_ns = g->decommit_ns;
        /* the handles go back to the device, not to the arena's cache: that is the point of offload */
        (void)dmm_mechanism_drain_cache(c->arena);
    }
}

/* The unit of an offload's copy: at least 64 MiB, at most DMM_DEVICE_OFFLOAD_PIECES pieces per segment.
 * Piece k's decommit runs while the copy engine still drains piece k+1, so the unmaps and handle
 * releases (~45 µs per handle on an H200) hide behind the copy instead of following it. */
static uint64_t offload_piece(const dmm_device *c, uint64_t saved) {
    uint64_t p = (saved + DMM_DEVICE_OFFLOAD_PIECES - 1) / DMM_DEVICE_OFFLOAD_PIECES;
    if (p < 64 * MIB) p = 64 * MIB;
    return dmm__device_round_granule(c, p);
}

/* Pieces of a segment with `saved` bytes to copy (one, copying nothing, when discarded). */
static uint64_t pieces_of(uint64_t saved, uint64_t piece) { return saved == 0 ? 1 : (saved + piece - 1) / piece; }

dmm_status dmm_device_offload(dmm_device *c, const char *name, int mode, dmm_stream stream) {
    if (c == NULL) return dmm__device_null("dmm_device_offload", "a device");
    if (mode != DMM_DEVICE_TO_HOST && mode != DMM_DEVICE_DISCARD)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: offload mode %d is neither host (0) nor discard (1)",
                             mode);
    if (mode == DMM_DEVICE_TO_HOST && !dmm__drv_can_host_alloc(c->drv))
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "dmm device: offload to host needs pinned host memory, which this "
                                                  "driver does not provide");
    int id = -1;
    device_tag *t = dmm__device_tag_lookup(c, name, "offload", &id);
    if (t == NULL) return dmm_last_status();
    dmm_status s = refuse_capturing(c, "offload", name, stream);
    if (s == DMM_OK) s = dmm__device_lock_and_poll(c, "offload");
    if (s != DMM_OK) return s;
    dmm_clear_error();
    if (t->state != TAG_RESIDENT) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_BUSY, "dmm device: offload of tag '%s' refused: it is already %s; restore it first",
                             name, dmm__device_tag_state_name(t->state));
    }
    t->offload_call_ns = dmm_device_clock_ns();
    if (t->ev == NULL && (s = dmm__drv_event_create(c->drv, &t->ev)) != DMM_OK) goto fail;
    /* 1: every pinned copy exists before any copy starts (a refusal changes nothing on the device) */
    for (tag_segment *g = t->segs; g != NULL; g = g->next) {
        uint64_t hi = dmm__device_segment_high(&g->seg);
        g->saved_bytes = mode == DMM_DEVICE_TO_HOST ? hi : 0;
        if (g->saved_bytes == 0 || g->host_bytes >= g->saved_bytes) continue;
        dmm__device_tseg_host_drop(c, g);
        s = dmm_lease_grow(c->gov, c->host_lease, hi, hi);
        if (s != DMM_OK) goto fail;
        s = dmm__drv_host_alloc(c->drv, (size_t)hi, &g->host);
        if (s != DMM_OK) {
            g->host = NULL;
            (void)dmm_lease_shrink(c->gov, c->host_lease, hi, hi);
            goto fail;
        }
        g->host_bytes = hi;
        c->host_bytes += hi;
    }
    /* 2: the copies in pieces, each followed by its event; all ordered after the work already queued on
     * the stream; the tag's event after the last (restore and release_host order on it) */
    for (tag_segment *g = t->segs; g != NULL; g = g->next) {
        if (g->seg.committed == 0) continue;
        uint64_t piece = offload_piece(c, g->saved_bytes), n = pieces_of(g->saved_bytes, piece);
        for (uint64_t k = 0; k < n; k++) {
            uint64_t lo = k * piece, hi = lo + piece < g->saved_bytes ? lo + piece : g->saved_bytes;
            if (hi > lo &&
                (s = dmm__drv_copy(c->drv, (uintptr_t)g->host + lo, (uintptr_t)g->seg.a.ptr + lo, (size_t)(hi - lo), stream)) !=
                    DMM_OK)
                goto fail;
            if (g->piece_ev[k] == NULL && (s = dmm__drv_event_create(c->drv, &g->piece_ev[k])) != DMM_OK) goto fail;
            if ((s = dmm__drv_event_record(c->drv, g->piece_ev[k], stream)) != DMM_OK) goto fail;
        }
    }
    if ((s = dmm__drv_event_record(c->drv, t->ev, stream)) != DMM_OK) goto fail;
    /* 3: per piece, the decommit of everything copied so far, gated by that piece's event */
    t->pending = 0;
    t->failure = DMM_OK;
    t->pending_polls = 0;
    t->mode = mode;
    t->offloads++;
    for (tag_segment *g = t->segs; g != NULL && s == DMM_OK; g = g->next) {
        g->jobs_queued = g->jobs_left = 0;
        if (g->seg.committed == 0) continue;
        uint64_t piece = offload_piece(c, g->saved_bytes), n = pieces_of(g->saved_bytes, piece);
        for (uint64_t k = 0; k < n; k++) {
            device_job *j = dmm__device_job_new(decommit_finished, g);
            if (j == NULL) {
                s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory queueing a decommit");
                break;
            }
            j->last = k + 1 == n;
            dmm_deferred_request r;
            memset(&r, 0, sizeof r);
            r.size = sizeof r;
            r.kind = DMM_DEFERRED_DECOMMIT;
            r.mechanism = c->arena;
            r.allocation = g->seg.a;
            r.range.offset = 0;
            r.range.bytes = (size_t)(j->last ? g->seg.committed : (k + 1) * piece);
            r.n_events = 1;
            r.events[0] = g->piece_ev[k];
            s = dmm__device_job_queue(c, &r, j);
            if (s != DMM_OK) {
                free(j);
                break;
            }
            g->jobs_queued++;
            g->jobs_left++;
        }
        if (g->jobs_left > 0) { /* (queued in part: restore maps again what the queued ones unmapped) */
            g->state = SEG_PENDING;
            t->pending++;
        }
    }
    if (t->pending > 0) {
        t->state = TAG_OFFLOADING;
        t->polls_mark = c->polls;
    } else {
        t->state = TAG_OFFLOADED;
        t->offload_done_ns = dmm_device_clock_ns();
    }
    if (s != DMM_OK) { /* some segments stay resident: the tag is offloaded in part; restore brings all back */
        dmm_error_kept why = {0}; /* the poll below sets errors of its own */
        dmm__error_keep(&why, s);
        dmm__device_jobs_poll_locked(c);
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(s, "dmm device: offload of tag '%s' queued only part of its segments (restore it and "
                                "retry): %s",
                             name, dmm__error_kept_text(&why));
    }
    dmm__device_jobs_poll_locked(c); /* the event may already be complete */
    pthread_mutex_unlock(&c->lock);
    dmm_clear_error();
    return DMM_OK;
fail:
    dmm__error_wrap(s, "dmm device: offload of tag '%s' on device %d failed before anything was decommitted (the tag "
                       "stays resident)",
                    name, (int)c->dev.index);
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* The event of the tag's first decommit still queued (segments drain in queue order), or NULL. */
static dmm_event next_decommit_event(const device_tag *t) {
    for (const tag_segment *g = t->segs; g != NULL; g = g->next)
        if (g->state == SEG_PENDING && g->jobs_left > 0) return g->piece_ev[g->jobs_queued - g->jobs_left];
    return NULL;
}

/* Waits, with dev.lock dropped (never held across a blocking driver call), for the tag's event t->ev,
 * recorded after its last copy. The tag's event lives as long as the device (a later offload or
 * restore records it again, never destroys it), so another thread can change nothing under this
 * wait that makes it invalid; a segment's piece events, which a free may take away, are only asked
 * under the lock. */
static dmm_status wait_tag_event_unlocked(dmm_device *c, device_tag *t) {
    dmm_event ev = t->ev;
    pthread_mutex_unlock(&c->lock);
    dmm_status s = ev != NULL ? dmm__drv_event_synchronize(c->drv, ev) : DMM_OK;
    pthread_mutex_lock(&c->lock);
    return s;
}

/* Waits (dev.lock held; dropped while it blocks) until the tag has no decommit queued: it asks the
 * tag's first queued piece event, decommits each piece as soon as its copy ended, and blocks only on
 * the tag's own event; never on a stream or the device. */
static dmm_status wait_locked(dmm_device *c, device_tag *t) {
    while (t->pending > 0) {
        if (dmm__device_jobs_poll_locked(c) == DMM_ERR_DEVICE_LOST) return DMM_ERR_DEVICE_LOST; /* ask nothing more */
        if (t->pending == 0) break;
        dmm_event ev = next_decommit_event(t);
        dmm_status s = ev != NULL ? dmm__drv_event_query(c->drv, ev) : DMM_OK;
        if (s == DMM_ERR_BUSY) s = wait_tag_event_unlocked(c, t); /* its copies run: their decommits, the next poll */
        else if (s == DMM_OK) { /* complete, not run yet: an earlier request of another stream is at the head */
            pthread_mutex_unlock(&c->lock);
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&c->lock);
        }
        if (s != DMM_OK) return s;
    }
    dmm_clear_error();
    return t->failure;
}

dmm_status dmm_device_offload_wait(dmm_device *c, const char *name) {
    if (c == NULL) return dmm__device_null("dmm_device_offload_wait", "a device");
    device_tag *t = dmm__device_tag_lookup(c, name, "offload wait", NULL);
    if (t == NULL) return dmm_last_status();
    dmm_status ls = dmm__device_refuse_lost(c, "offload wait");
    if (ls != DMM_OK) return ls;
    pthread_mutex_lock(&c->lock);
    dmm_status s = wait_locked(c, t);
    pthread_mutex_unlock(&c->lock);
    if (s == DMM_ERR_DEVICE_LOST) return dmm__device_refuse_lost(c, "offload wait");
    if (s != DMM_OK)
        return dmm_error_set(s, "dmm device: the offload of tag '%s' did not decommit all of its segments (%s); they "
                                "stay mapped with their contents",
                             name, dmm_status_str(s));
    return DMM_OK;
}

/* The unit of a restore: 32 MiB, one handle each, so that each piece's copy overlaps the next
 * piece's commit. Memory created right after a release takes copies more slowly while the driver's
 * background work on the released memory (scrubbing, we believe) still runs: on an H200, releasing
 * 1.6 GiB and at once restoring it into one handle ran at 89 % of the pinned copy, 97.7 % when 100 ms
 * separated the two. Offload decommits piece by piece behind its copy, so that work is mostly done
 * when a restore follows: with it, restore_variants.py measured (medians of 9, 1.6 GiB of Llama
 * weights) 99.4 % for 208 MiB pieces, 100.2 % for 32 MiB, 100.0 % for 16 MiB, 98.5 % for 8 MiB (there
 * the ~55 µs of create + map + access per piece catches up with the copy); a restore call took 0.6,
 * 2.8, 5.2 and 15 ms. dmm_device_config may override it (restore_piece_bytes; UINT64_MAX = one commit
 * per segment) and make the pieces grow (restore_first_bytes: the first piece, doubling up to the
 * largest). */
static uint64_t restore_piece(const dmm_device *c, uint64_t committed) {
    uint64_t p = 32 * MIB;
    if (c->restore_piece != 0) p = c->restore_piece;
    if (p > committed) p = committed;
    return dmm__device_round_granule(c, p);
}

/* The piece that starts at `off` (the size of the pieces before it decides it when they grow). */
static uint64_t restore_piece_at(const dmm_device *c, uint64_t committed, uint64_t off) {
    uint64_t max = restore_piece(c, committed);
    if (c->restore_first == 0 || c->restore_first >= max) return max; /* (rounding a huge one up would wrap) */
    uint64_t p = dmm__device_round_granule(c, c->restore_first);
    while (p < max && p <= off) p *= 2; /* pieces first, 2 first, 4 first, ...: piece k starts at (2^k - 1) first */
    return p < max ? p : max;
}

dmm_status dmm_device_restore(dmm_device *c, const char *name, dmm_stream stream) {
    if (c == NULL) return dmm__device_null("dmm_device_restore", "a device");
    device_tag *t = dmm__device_tag_lookup(c, name, "restore", NULL);
    if (t == NULL) return dmm_last_status();
    dmm_status s = refuse_capturing(c, "restore", name, stream);
    if (s == DMM_OK) s = dmm__device_lock_and_poll(c, "restore");
    if (s != DMM_OK) return s;
    if (t->state == TAG_RESIDENT) {
        pthread_mutex_unlock(&c->lock);
        dmm_clear_error();
        return DMM_OK;
    }
    s = wait_locked(c, t); /* what a failed decommit left mapped: committing it again is a no-op */
    if (s != DMM_OK && t->pending > 0) {
        /* the wait itself failed with decommits still queued: they would unmap a tag called resident */
        dmm__error_wrap(s, "dmm device: restore of tag '%s' on device %d refused: %u segment(s) still have decommits "
                           "queued; nothing was restored: call restore again once the copies ended; waiting for its "
                           "offload's copies failed",
                        name, (int)c->dev.index, (unsigned)t->pending);
        pthread_mutex_unlock(&c->lock);
        return s;
    }
    for (tag_segment *g = t->segs; g != NULL; g = g->next) {
        if (g->state != SEG_OFFLOADED) continue;
        /* piece by piece: the driver maps piece k+1 while the copy engine fills piece k */
        while (g->restored < g->seg.committed) {
            uint64_t off = g->restored, piece = restore_piece_at(c, g->seg.committed, off);
            uint64_t len = g->seg.committed - off < piece ? g->seg.committed - off : piece;
            dmm_range r = {(size_t)off, (size_t)len};
            uint64_t newly = 0;
            s = dmm_mechanism_commit(c->arena, &g->seg.a, r, &newly);
            if (s == DMM_ERR_BUDGET || s == DMM_ERR_OUT_OF_MEMORY) {
                (void)dmm_pool_empty_cache(c->pool, NULL);
                s = dmm_mechanism_commit(c->arena, &g->seg.a, r, &newly);
            }
            if (s != DMM_OK) goto fail;
            uint64_t cend = g->saved_bytes < off + len ? g->saved_bytes : off + len;
            uint64_t part = c->restore_copy != 0 ? c->restore_copy : len;
            for (uint64_t at = off, n = 0; t->mode == DMM_DEVICE_TO_HOST && at < cend; at += n) { /* (+= part may wrap) */
                n = cend - at < part ? cend - at : part;
                if ((s = dmm__drv_copy(c->drv, (uintptr_t)g->seg.a.ptr + at, (uintptr_t)g->host + at, (size_t)n, stream)) !=
                    DMM_OK)
                    goto fail; /* mapped but not filled: the next restore commits it again (a no-op) and copies */
            }
            g->restored = off + len;
        }
        g->state = SEG_RESIDENT;
    }
    /* the pinned copies must outlive the copies back: release_host waits on this event */
    if (t->ev != NULL && (s = dmm__drv_event_record(c->drv, t->ev, stream)) != DMM_OK) goto fail;
    t->state = TAG_RESIDENT;
    t->restores++;
    t->restore_ns = dmm_device_clock_ns();
    pthread_mutex_unlock(&c->lock);
    dmm_clear_error();
    return DMM_OK;
fail:
    dmm__error_wrap(s, "dmm device: restore of tag '%s' on device %d stopped (segments restored so far stay restored; "
                       "call restore again to continue)",
                    name, (int)c->dev.index);
    pthread_mutex_unlock(&c->lock);
    return s;
}

dmm_status dmm_device_host_copy(dmm_device *c, const void *ptr, uint64_t bytes, void **host) {
    if (c == NULL) return dmm__device_null("dmm_device_host_copy", "a device");
    if (host == NULL) return dmm__device_null("dmm_device_host_copy", "a place for the address");
    *host = NULL;
    if (dmm__drv_lost(c->drv)) return DMM_OK; /* after a loss the copies may predate the last restore */
    uintptr_t p = (uintptr_t)ptr;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS && *host == NULL; i++) {
        const device_tag *t = &c->tags[i];
        if (t->state != TAG_OFFLOADED || t->mode != DMM_DEVICE_TO_HOST || t->failure != DMM_OK) continue;
        for (const tag_segment *g = t->segs; g != NULL; g = g->next) {
            uintptr_t base = (uintptr_t)g->seg.a.ptr;
            if (p < base || p - base >= g->seg.a.bytes) continue;
            uint64_t off = p - base;
            /* only a segment whose offload finished holds a whole copy */
            if (g->state == SEG_OFFLOADED && g->host != NULL && bytes <= g->saved_bytes &&
                off <= g->saved_bytes - bytes)
                *host = (char *)g->host + off;
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return DMM_OK;
}

dmm_status dmm_device_release_host(dmm_device *c, const char *name) {
    if (c == NULL) return dmm__device_null("dmm_device_release_host", "a device");
    device_tag *t = dmm__device_tag_lookup(c, name, "release_host", NULL);
    if (t == NULL) return dmm_last_status();
    dmm_status ls = dmm__device_refuse_lost(c, "release_host");
    if (ls != DMM_OK) return ls;
    pthread_mutex_lock(&c->lock);
    if (t->state != TAG_RESIDENT) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_BUSY, "dmm device: the host copies of tag '%s' hold its contents while it is %s; "
                                           "restore it first",
                             name, dmm__device_tag_state_name(t->state));
    }
    /* the restore's copies read the host copies until the tag's event (waited for with the lock dropped);
     * an offload or restore another thread made meanwhile recorded the event again: wait once more */
    dmm_status s = DMM_OK;
    for (uint64_t offloads = t->offloads + 1, restores = 0; s == DMM_OK && t->state == TAG_RESIDENT &&
                                                            (offloads != t->offloads || restores != t->restores);) {
        offloads = t->offloads;
        restores = t->restores;
        s = wait_tag_event_unlocked(c, t);
    }
    if (s == DMM_OK && t->state != TAG_RESIDENT) /* another thread offloaded it meanwhile */
        s = dmm_error_set(DMM_ERR_BUSY, "dmm device: the host copies of tag '%s' hold its contents while it is %s; "
                                        "restore it first",
                          name, dmm__device_tag_state_name(t->state));
    if (s == DMM_OK)
        for (tag_segment *g = t->segs; g != NULL; g = g->next) dmm__device_tseg_host_drop(c, g);
    pthread_mutex_unlock(&c->lock);
    return s;
}

