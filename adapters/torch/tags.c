/* adapters/torch/tags.c — tagged allocations, offload and restore (DESIGN §4.11).
 *
 * What it owns: the tag names of the process, each thread's stack of tag scopes, and per device the
 * tag segments: VA-only allocations of the arena whose low end [0, committed) is backed, placed by
 * the span allocator. Allocations made inside `dmm.torch.tag("weights")` live there, not in the pool,
 * so the tag can leave the device as whole ranges and come back at the same addresses.
 *
 * Offload (to host or discard): copies [0, highest live end) of each segment into pinned host memory
 * on the caller's stream — ordered after the work queued there that reads the tensors — in up to
 * DMM_TORCH_OFFLOAD_PIECES pieces, each followed by its own event, and enqueues per piece the
 * decommit of [0, end of that piece) in the deferred queue, gated by that event (the last piece's
 * covers the whole committed range). It returns at once: no stream or device synchronize, and no
 * unmap runs before the first event completed, i.e. before every kernel queued ahead of it (the ones
 * still reading the weights) ended. The decommits run in later polls (any malloc, stats call, poll or
 * wait; a wait decommits each piece as soon as its copy ended, so the unmaps hide behind the copy).
 * Restore recommits each segment's range in 32 MiB pieces (restore_piece: why that size), one handle
 * each, however the segment grew, queueing each piece's copy back on the caller's stream right after
 * its commit, at the same addresses: tensors and CUDA graphs that hold them stay valid.
 * tests/gpu/torch/restore_variants.py measures other piece sizes through DMM_TORCH_RESTORE_PIECE.
 * The pinned copies are kept after a restore (the next offload runs at copy speed); release_host
 * frees them. A decommit that FAILED changed nothing: the later pieces' ranges cover its chunks again;
 * if the last one fails too, what it could not unmap stays mapped, the tag reports the failure, and
 * restore maps the rest and copies everything back.
 *
 * Growth: a segment commits its prefix in steps of max(granule, committed/16) up to 64 MiB, so that
 * a model's weights take few handles and the tail wasted is at most 1/16 of what is committed.
 *
 * Invariants (ctx.lock): a tag is RESIDENT ⇔ every segment is RESIDENT; OFFLOADING ⇔ pending > 0
 * (pending = its segments in SEG_PENDING = those with jobs_left > 0 decommits in the queue); a
 * segment's piece events and its tag's event (recorded after the copies of its last offload) outlive
 * every request that names them (they are destroyed with the segment or the tag).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adapter.h"

#define MIB ((uint64_t)1 << 20)

/* ---- names and scopes ---- */
static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;
static char names[DMM_TORCH_MAX_TAGS][DMM_TORCH_TAG_NAME];
static int nnames;

static _Thread_local int tl_stack[DMM_TORCH_TAG_DEPTH];
static _Thread_local int tl_depth;

static int intern(const char *name) {
    pthread_mutex_lock(&names_mu);
    int id = -1;
    for (int i = 0; i < nnames; i++)
        if (strcmp(names[i], name) == 0) id = i;
    if (id < 0 && nnames < DMM_TORCH_MAX_TAGS) {
        id = nnames++;
        snprintf(names[id], sizeof names[id], "%s", name);
    }
    pthread_mutex_unlock(&names_mu);
    return id;
}

int dmm__torch_tag_find(const char *name) {
    if (name == NULL) return -1;
    pthread_mutex_lock(&names_mu);
    int id = -1;
    for (int i = 0; i < nnames; i++)
        if (strcmp(names[i], name) == 0) id = i;
    pthread_mutex_unlock(&names_mu);
    return id;
}

const char *dmm__torch_tag_name(int id) { return id >= 0 && id < DMM_TORCH_MAX_TAGS ? names[id] : "?"; }

dmm_status dmm__torch_tag_begin(const char *name) {
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n >= DMM_TORCH_TAG_NAME)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: a tag name must have 1 to %d characters",
                             DMM_TORCH_TAG_NAME - 1);
    if (tl_depth >= DMM_TORCH_TAG_DEPTH)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: tag scopes nest at most %d deep on one thread",
                             DMM_TORCH_TAG_DEPTH);
    int id = intern(name);
    if (id < 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: tag '%s' would be the %dth tag name of the "
                                                       "process; at most %d exist; reuse a name",
                             name, DMM_TORCH_MAX_TAGS + 1, DMM_TORCH_MAX_TAGS);
    tl_stack[tl_depth++] = id;
    return DMM_OK;
}

dmm_status dmm__torch_tag_end(void) {
    if (tl_depth == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: tag end without a tag begin on this thread");
    tl_depth--;
    return DMM_OK;
}

int dmm__torch_tag_current(void) { return tl_depth > 0 ? tl_stack[tl_depth - 1] : -1; }

static const char *state_name(int s) {
    return s == TAG_RESIDENT ? "resident" : s == TAG_OFFLOADING ? "offloading" : "offloaded";
}

/* ---- allocation ---- */
static uint64_t step_for(const tctx *c, uint64_t committed) {
    uint64_t st = committed / 16;
    if (st > 64 * MIB) st = 64 * MIB;
    if (st < c->granule) st = c->granule;
    return (st + c->granule - 1) / c->granule * c->granule;
}

/* Where a growth of the segment to back [0, end) commits up to (end > committed). */
static uint64_t grow_target(const tctx *c, const tseg *g, uint64_t end) {
    uint64_t target = (end + c->granule - 1) / c->granule * c->granule;
    uint64_t stepped = g->committed + step_for(c, g->committed);
    if (stepped > target) target = stepped;
    if (target > g->a.bytes) target = g->a.bytes;
    return target;
}

/* Whether growing the segment to back [0, end) would commit over a chunk the arena keeps POISONED: a
 * growth whose commit failed and whose undo failed too (the arena's rollback leak) leaves its chunk
 * mapped there, and the arena refuses every later commit over it (DMM_ERR_QUARANTINED). Such a growth
 * is never tried again: the block goes to another segment, or a fresh one (the segment keeps serving
 * from its committed prefix, and goes back at empty_cache once empty). Asked only when a malloc needs
 * growth, over the range that growth would commit (at most one step or the request). */
static bool growth_poisoned(tctx *c, const tseg *g, uint64_t end) {
    if (end <= g->committed) return false;
    uint64_t target = grow_target(c, g, end);
    bool q = false;
    if (dmm_arena_is_quarantined(c->arena, (const char *)g->a.ptr + g->committed, (size_t)(target - g->committed), &q) !=
        DMM_OK)
        q = false; /* (cannot fail for our own arena) the commit would say why */
    dmm_clear_error();
    return q;
}

/* Backs [0, end) of the segment; a failure changes nothing (but a failed undo: growth_poisoned). */
static dmm_status grow_commit(tctx *c, tseg *g, uint64_t end) {
    if (end <= g->committed) return DMM_OK;
    uint64_t target = grow_target(c, g, end);
    dmm_range r = {(size_t)g->committed, (size_t)(target - g->committed)};
    uint64_t newly = 0;
    dmm_status s = dmm_mechanism_commit(c->arena, &g->a, r, &newly);
    if (s == DMM_ERR_BUDGET || s == DMM_ERR_OUT_OF_MEMORY) {
        /* the pool's cached chunks first; then the exact size, without the step */
        (void)dmm_pool_empty_cache(c->pool, NULL);
        s = dmm_mechanism_commit(c->arena, &g->a, r, &newly);
        if (s != DMM_OK && target > (end + c->granule - 1) / c->granule * c->granule) {
            target = (end + c->granule - 1) / c->granule * c->granule;
            r.bytes = (size_t)(target - g->committed);
            s = dmm_mechanism_commit(c->arena, &g->a, r, &newly);
        }
    }
    if (s != DMM_OK) return s;
    g->committed = target;
    return DMM_OK;
}

dmm_status dmm__torch_tag_malloc(tctx *c, int tag, size_t bytes, void **out) {
    uint64_t len = ((uint64_t)bytes + c->block_align - 1) & ~(c->block_align - 1);
    pthread_mutex_lock(&c->lock);
    ttag *t = &c->tags[tag];
    if (t->state != TAG_RESIDENT) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm torch: allocating %zu bytes in tag '%s' on device %d refused: the tag is %s; "
                             "restore it (dmm.torch.restore) before allocating in it",
                             bytes, dmm__torch_tag_name(tag), (int)c->dev.index, state_name(t->state));
    }
    tseg *g = NULL, **tail = &t->segs;
    uint64_t off = 0;
    for (tseg *x = t->segs; x != NULL; x = x->next) {
        if (dmm__sa_alloc(&x->sa, len, bytes, &off)) {
            if (!growth_poisoned(c, x, off + len)) {
                g = x;
                break;
            }
            dmm__sa_free(&x->sa, off, NULL, NULL); /* its growth would fail forever: the next segment */
        }
        tail = &x->next;
    }
    dmm_status s = DMM_OK;
    if (g == NULL) {
        uint64_t va = c->tag_va;
        if (va < len) va = (len + c->granule - 1) / c->granule * c->granule;
        g = calloc(1, sizeof *g);
        if (g == NULL || !dmm__sa_init(&g->sa, va)) {
            free(g);
            pthread_mutex_unlock(&c->lock);
            return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm torch: out of host memory for a tag segment");
        }
        g->tag = tag;
        s = dmm_mechanism_allocate_committed(c->arena, (size_t)va, (size_t)c->granule, NULL, 0, &g->a);
        if (s != DMM_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", dmm_last_error());
            dmm__sa_fini(&g->sa);
            free(g);
            pthread_mutex_unlock(&c->lock);
            return dmm_error_set(s, "dmm torch: reserving %llu bytes of VA for a segment of tag '%s' failed: %s",
                                 (unsigned long long)va, dmm__torch_tag_name(tag), why);
        }
        *tail = g;
        (void)dmm__sa_alloc(&g->sa, len, bytes, &off); /* the segment is empty and large enough */
    }
    s = grow_commit(c, g, off + len);
    if (s != DMM_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        dmm__sa_free(&g->sa, off, NULL, NULL);
        pthread_mutex_unlock(&c->lock);
        atomic_fetch_add_explicit(&c->ooms, 1, memory_order_relaxed);
        return dmm_error_set(s, "dmm torch: allocating %zu bytes in tag '%s' on device %d failed: %s", bytes,
                             dmm__torch_tag_name(tag), (int)c->dev.index, why);
    }
    pthread_mutex_unlock(&c->lock);
    *out = (char *)g->a.ptr + off;
    return DMM_OK;
}

dmm_status dmm__torch_tag_free_locked(tctx *c, void *ptr, uint64_t *len, uint64_t *req) {
    uintptr_t p = (uintptr_t)ptr;
    for (int i = 0; i < DMM_TORCH_MAX_TAGS; i++)
        for (tseg *g = c->tags[i].segs; g != NULL; g = g->next) {
            uintptr_t b = (uintptr_t)g->a.ptr;
            if (p < b || p >= b + g->a.bytes) continue;
            if (dmm__sa_free(&g->sa, p - b, len, req)) return DMM_OK;
            return DMM_ERR_UNKNOWN_ALLOCATION;
        }
    return DMM_ERR_UNKNOWN_ALLOCATION;
}

/* ---- offload / restore ---- */
static dmm_status refuse_capturing(tctx *c, const char *op, const char *tag, dmm_stream stream) {
    if (stream == NULL || c->ext.capture_status == NULL) return DMM_OK;
    bool capturing = false;
    uint64_t id = 0;
    dmm_status s = c->ext.capture_status(c->ext.user, stream, &capturing, &id);
    if (s != DMM_OK) return s;
    if (capturing)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm torch: %s of tag '%s' refused: stream %p is capturing a CUDA graph, and mapping "
                             "or unmapping memory now would invalidate the capture; call it after the capture",
                             op, tag, stream);
    return DMM_OK;
}

static void host_drop(tctx *c, tseg *g) {
    if (g->host == NULL) return;
    c->ext.host_free(c->ext.user, g->host);
    (void)dmm_lease_shrink(c->gov, c->host_lease, g->host_bytes, g->host_bytes);
    c->host_bytes -= g->host_bytes;
    g->host = NULL;
    g->host_bytes = 0;
}

static ttag *find_tag(tctx *c, const char *name, const char *op, int *id_out) {
    int id = dmm__torch_tag_find(name);
    if (id < 0) {
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: %s: no allocation was ever made in tag '%s'", op,
                      name != NULL ? name : "(null)");
        return NULL;
    }
    if (id_out != NULL) *id_out = id;
    return &c->tags[id];
}

/* The unit of an offload's copy: at least 64 MiB, at most DMM_TORCH_OFFLOAD_PIECES pieces per segment.
 * Piece k's decommit runs while the copy engine still drains piece k+1, so the unmaps and handle
 * releases (~45 µs per handle on an H200) hide behind the copy instead of following it. */
static uint64_t offload_piece(const tctx *c, uint64_t saved) {
    uint64_t p = (saved + DMM_TORCH_OFFLOAD_PIECES - 1) / DMM_TORCH_OFFLOAD_PIECES;
    if (p < 64 * MIB) p = 64 * MIB;
    return (p + c->granule - 1) / c->granule * c->granule;
}

/* Pieces of a segment with `saved` bytes to copy (one, copying nothing, when discarded). */
static uint64_t pieces_of(uint64_t saved, uint64_t piece) { return saved == 0 ? 1 : (saved + piece - 1) / piece; }

dmm_status dmm__torch_offload(tctx *c, const char *name, int mode, dmm_stream stream) {
    if (mode != DMM_TORCH_TO_HOST && mode != DMM_TORCH_DISCARD)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm torch: offload mode %d is neither host (0) nor discard (1)",
                             mode);
    if (mode == DMM_TORCH_TO_HOST && (c->ext.host_alloc == NULL || c->ext.host_free == NULL))
        return dmm_error_set(DMM_ERR_UNSUPPORTED, "dmm torch: offload to host needs pinned host memory, which this "
                                                  "driver does not provide");
    int id = -1;
    ttag *t = find_tag(c, name, "offload", &id);
    if (t == NULL) return dmm_last_status();
    dmm_status s = refuse_capturing(c, "offload", name, stream);
    if (s == DMM_OK) s = dmm__torch_refuse_lost(c, "offload");
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&c->lock);
    if (dmm__torch_poll_locked(c) == DMM_ERR_DEVICE_LOST) { /* this poll found the loss */
        pthread_mutex_unlock(&c->lock);
        return dmm__torch_refuse_lost(c, "offload");
    }
    dmm_clear_error();
    if (t->state != TAG_RESIDENT) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_BUSY, "dmm torch: offload of tag '%s' refused: it is already %s; restore it first",
                             name, state_name(t->state));
    }
    t->offload_call_ns = dmm__torch_now_ns();
    const dmm_driver_ops *d = c->drv->ops;
    if (t->ev == NULL && (s = d->event_create(c->drv, &t->ev)) != DMM_OK) goto fail;
    /* 1: every pinned copy exists before any copy starts (a refusal changes nothing on the device) */
    for (tseg *g = t->segs; g != NULL; g = g->next) {
        uint64_t hi = dmm__sa_high(&g->sa);
        g->saved_bytes = mode == DMM_TORCH_TO_HOST ? hi : 0;
        if (g->saved_bytes == 0 || g->host_bytes >= g->saved_bytes) continue;
        host_drop(c, g);
        s = dmm_lease_grow(c->gov, c->host_lease, hi, hi);
        if (s != DMM_OK) goto fail;
        s = c->ext.host_alloc(c->ext.user, (size_t)hi, &g->host);
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
    for (tseg *g = t->segs; g != NULL; g = g->next) {
        if (g->committed == 0) continue;
        uint64_t piece = offload_piece(c, g->saved_bytes), n = pieces_of(g->saved_bytes, piece);
        for (uint64_t k = 0; k < n; k++) {
            uint64_t lo = k * piece, hi = lo + piece < g->saved_bytes ? lo + piece : g->saved_bytes;
            if (hi > lo &&
                (s = d->copy(c->drv, (uintptr_t)g->host + lo, (uintptr_t)g->a.ptr + lo, (size_t)(hi - lo), stream)) !=
                    DMM_OK)
                goto fail;
            if (g->piece_ev[k] == NULL && (s = d->event_create(c->drv, &g->piece_ev[k])) != DMM_OK) goto fail;
            if ((s = d->event_record(c->drv, g->piece_ev[k], stream)) != DMM_OK) goto fail;
        }
    }
    if ((s = d->event_record(c->drv, t->ev, stream)) != DMM_OK) goto fail;
    /* 3: per piece, the decommit of everything copied so far, gated by that piece's event */
    t->pending = 0;
    t->failure = DMM_OK;
    t->pending_polls = 0;
    t->mode = mode;
    t->offloads++;
    for (tseg *g = t->segs; g != NULL && s == DMM_OK; g = g->next) {
        g->jobs_queued = g->jobs_left = 0;
        if (g->committed == 0) continue;
        uint64_t piece = offload_piece(c, g->saved_bytes), n = pieces_of(g->saved_bytes, piece);
        for (uint64_t k = 0; k < n; k++) {
            tjob *j = calloc(1, sizeof *j);
            if (j == NULL) {
                s = dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm torch: out of host memory queueing a decommit");
                break;
            }
            j->kind = JOB_DECOMMIT;
            j->ts = g;
            j->last = k + 1 == n;
            dmm_deferred_request r;
            memset(&r, 0, sizeof r);
            r.size = sizeof r;
            r.kind = DMM_DEFERRED_DECOMMIT;
            r.mechanism = c->arena;
            r.allocation = g->a;
            r.range.offset = 0;
            r.range.bytes = (size_t)(j->last ? g->committed : (k + 1) * piece);
            r.n_events = 1;
            r.events[0] = g->piece_ev[k];
            r.user = j;
            s = dmm_deferred_enqueue(c->q, &r);
            if (s != DMM_OK) {
                free(j);
                break;
            }
            g->jobs_queued++;
            g->jobs_left++;
            atomic_fetch_add_explicit(&c->queued, 1, memory_order_relaxed);
        }
        if (g->jobs_left > 0) { /* (queued in part: restore maps again what the queued ones unmapped) */
            g->state = SEG_PENDING;
            t->pending++;
        }
    }
    if (t->pending > 0) t->state = TAG_OFFLOADING;
    else {
        t->state = TAG_OFFLOADED;
        t->offload_done_ns = dmm__torch_now_ns();
    }
    if (s != DMM_OK) { /* some segments stay resident: the tag is offloaded in part; restore brings all back */
        char why[512];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        dmm__torch_poll_locked(c);
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(s, "dmm torch: offload of tag '%s' queued only part of its segments (restore it and "
                                "retry): %s",
                             name, why);
    }
    dmm__torch_poll_locked(c); /* the event may already be complete */
    pthread_mutex_unlock(&c->lock);
    dmm_clear_error();
    return DMM_OK;
fail:;
    dmm__torch_note_loss(c, s);
    char why[512];
    snprintf(why, sizeof why, "%s", dmm_last_error());
    pthread_mutex_unlock(&c->lock);
    return dmm_error_set(s, "dmm torch: offload of tag '%s' on device %d failed before anything was decommitted "
                            "(the tag stays resident): %s",
                         name, (int)c->dev.index, why);
}

/* The event of the tag's first decommit still queued (segments drain in queue order), or NULL. */
static dmm_event next_decommit_event(const ttag *t) {
    for (const tseg *g = t->segs; g != NULL; g = g->next)
        if (g->state == SEG_PENDING && g->jobs_left > 0) return g->piece_ev[g->jobs_queued - g->jobs_left];
    return NULL;
}

/* Waits (ctx.lock held) until the tag has no decommit queued: the host waits on the tag's own piece
 * events, one after the other, and decommits each piece as soon as its copy ended; never on a stream
 * or the device. */
static dmm_status wait_locked(tctx *c, ttag *t) {
    while (t->pending > 0) {
        if (dmm__torch_poll_locked(c) == DMM_ERR_DEVICE_LOST) return DMM_ERR_DEVICE_LOST; /* ask nothing more */
        if (t->pending == 0) break;
        dmm_event ev = next_decommit_event(t);
        dmm_status s = ev != NULL ? c->drv->ops->event_query(c->drv, ev) : DMM_OK;
        if (s == DMM_ERR_BUSY) s = c->drv->ops->event_synchronize(c->drv, ev); /* its decommit: the next poll */
        else if (s == DMM_OK) { /* complete, not run yet: an earlier request of another stream is at the head */
            pthread_mutex_unlock(&c->lock);
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&c->lock);
        }
        if (s != DMM_OK) return dmm__torch_note_loss(c, s);
    }
    dmm_clear_error();
    return t->failure;
}

dmm_status dmm__torch_offload_wait(tctx *c, const char *name) {
    ttag *t = find_tag(c, name, "offload wait", NULL);
    if (t == NULL) return dmm_last_status();
    dmm_status ls = dmm__torch_refuse_lost(c, "offload wait");
    if (ls != DMM_OK) return ls;
    pthread_mutex_lock(&c->lock);
    dmm_status s = wait_locked(c, t);
    pthread_mutex_unlock(&c->lock);
    if (s == DMM_ERR_DEVICE_LOST) return dmm__torch_refuse_lost(c, "offload wait");
    if (s != DMM_OK)
        return dmm_error_set(s, "dmm torch: the offload of tag '%s' did not decommit all of its segments (%s); they "
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
 * 2.8, 5.2 and 15 ms. dmm_torch_config may override it (restore_piece_bytes; UINT64_MAX = one commit
 * per segment) and make the pieces grow (restore_first_bytes: the first piece, doubling up to the
 * largest). */
static uint64_t restore_piece(const tctx *c, uint64_t committed) {
    uint64_t p = 32 * MIB;
    if (c->restore_piece != 0) p = c->restore_piece;
    if (p > committed) p = committed;
    return (p + c->granule - 1) / c->granule * c->granule;
}

/* The piece that starts at `off` (the size of the pieces before it decides it when they grow). */
static uint64_t restore_piece_at(const tctx *c, uint64_t committed, uint64_t off) {
    uint64_t max = restore_piece(c, committed);
    if (c->restore_first == 0 || c->restore_first >= max) return max; /* (rounding a huge one up would wrap) */
    uint64_t p = (c->restore_first + c->granule - 1) / c->granule * c->granule;
    while (p < max && p <= off) p *= 2; /* pieces first, 2 first, 4 first, ...: piece k starts at (2^k - 1) first */
    return p < max ? p : max;
}

dmm_status dmm__torch_restore(tctx *c, const char *name, dmm_stream stream) {
    ttag *t = find_tag(c, name, "restore", NULL);
    if (t == NULL) return dmm_last_status();
    dmm_status s = refuse_capturing(c, "restore", name, stream);
    if (s == DMM_OK) s = dmm__torch_refuse_lost(c, "restore");
    if (s != DMM_OK) return s;
    pthread_mutex_lock(&c->lock);
    if (dmm__torch_poll_locked(c) == DMM_ERR_DEVICE_LOST) { /* this poll found the loss */
        pthread_mutex_unlock(&c->lock);
        return dmm__torch_refuse_lost(c, "restore");
    }
    if (t->state == TAG_RESIDENT) {
        pthread_mutex_unlock(&c->lock);
        dmm_clear_error();
        return DMM_OK;
    }
    s = wait_locked(c, t); /* what a failed decommit left mapped: committing it again is a no-op */
    if (s != DMM_OK && t->pending > 0) {
        /* the wait itself failed with decommits still queued: they would unmap a tag called resident */
        char why[512];
        snprintf(why, sizeof why, "%s", dmm_last_error());
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(s, "dmm torch: restore of tag '%s' on device %d refused: waiting for its offload's "
                                "copies failed (%s) while %u segment(s) still have decommits queued; nothing was "
                                "restored: call restore again once the copies ended",
                             name, (int)c->dev.index, why, (unsigned)t->pending);
    }
    const dmm_driver_ops *d = c->drv->ops;
    for (tseg *g = t->segs; g != NULL; g = g->next) {
        if (g->state != SEG_OFFLOADED) continue;
        /* piece by piece: the driver maps piece k+1 while the copy engine fills piece k */
        while (g->restored < g->committed) {
            uint64_t off = g->restored, piece = restore_piece_at(c, g->committed, off);
            uint64_t len = g->committed - off < piece ? g->committed - off : piece;
            dmm_range r = {(size_t)off, (size_t)len};
            uint64_t newly = 0;
            s = dmm_mechanism_commit(c->arena, &g->a, r, &newly);
            if (s == DMM_ERR_BUDGET || s == DMM_ERR_OUT_OF_MEMORY) {
                (void)dmm_pool_empty_cache(c->pool, NULL);
                s = dmm_mechanism_commit(c->arena, &g->a, r, &newly);
            }
            if (s != DMM_OK) goto fail;
            uint64_t cend = g->saved_bytes < off + len ? g->saved_bytes : off + len;
            uint64_t part = c->restore_copy != 0 ? c->restore_copy : len;
            for (uint64_t at = off, n = 0; t->mode == DMM_TORCH_TO_HOST && at < cend; at += n) { /* (+= part may wrap) */
                n = cend - at < part ? cend - at : part;
                if ((s = d->copy(c->drv, (uintptr_t)g->a.ptr + at, (uintptr_t)g->host + at, (size_t)n, stream)) !=
                    DMM_OK)
                    goto fail; /* mapped but not filled: the next restore commits it again (a no-op) and copies */
            }
            g->restored = off + len;
        }
        g->state = SEG_RESIDENT;
    }
    /* the pinned copies must outlive the copies back: release_host waits on this event */
    if (t->ev != NULL && (s = d->event_record(c->drv, t->ev, stream)) != DMM_OK) goto fail;
    t->state = TAG_RESIDENT;
    t->restores++;
    t->restore_ns = dmm__torch_now_ns();
    pthread_mutex_unlock(&c->lock);
    dmm_clear_error();
    return DMM_OK;
fail:;
    dmm__torch_note_loss(c, s);
    char why[512];
    snprintf(why, sizeof why, "%s", dmm_last_error());
    pthread_mutex_unlock(&c->lock);
    return dmm_error_set(s, "dmm torch: restore of tag '%s' on device %d stopped (segments restored so far stay "
                            "restored; call restore again to continue): %s",
                         name, (int)c->dev.index, why);
}

dmm_status dmm__torch_release_host(tctx *c, const char *name) {
    ttag *t = find_tag(c, name, "release_host", NULL);
    if (t == NULL) return dmm_last_status();
    dmm_status ls = dmm__torch_refuse_lost(c, "release_host");
    if (ls != DMM_OK) return ls;
    pthread_mutex_lock(&c->lock);
    if (t->state != TAG_RESIDENT) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_BUSY, "dmm torch: the host copies of tag '%s' hold its contents while it is %s; "
                                           "restore it first",
                             name, state_name(t->state));
    }
    dmm_status s = t->ev != NULL ? c->drv->ops->event_synchronize(c->drv, t->ev) : DMM_OK;
    if (s == DMM_OK)
        for (tseg *g = t->segs; g != NULL; g = g->next) host_drop(c, g);
    pthread_mutex_unlock(&c->lock);
    return dmm__torch_note_loss(c, s);
}

/* ---- the queue's callback ---- */
void dmm__torch_decommit_finished(tctx *c, tjob *j, dmm_status failure) {
    tseg *g = j->ts;
    ttag *t = &c->tags[g->tag];
    g->decommit_ns = dmm__torch_now_ns();
    /* a failed piece changed nothing and the later pieces' ranges cover it again: only the last counts,
     * and any quarantine */
    if (failure != DMM_OK && (j->last || failure == DMM_ERR_QUARANTINED)) t->failure = failure;
    if (g->jobs_left > 0 && --g->jobs_left > 0) return;
    /* what the queued decommits could not unmap stays mapped: restore maps the rest and copies it all */
    g->state = SEG_OFFLOADED;
    g->restored = 0;
    if (t->pending > 0 && --t->pending == 0) {
        t->state = TAG_OFFLOADED;
        t->offload_done_ns = g->decommit_ns;
        /* the handles go back to the device, not to the arena's cache: that is the point of offload */
        (void)dmm_arena_drain_cache(c->arena);
    }
}

void dmm__torch_tseg_free(tctx *c, tseg *g) {
    host_drop(c, g);
    for (int k = 0; k < DMM_TORCH_OFFLOAD_PIECES; k++)
        if (g->piece_ev[k] != NULL) c->drv->ops->event_destroy(c->drv, g->piece_ev[k]);
    dmm__sa_fini(&g->sa);
    free(g);
}

void dmm__torch_decommit_done(void *user, const dmm_deferred_request *r, const dmm_release_outcome *o) {
    tctx *c = user;
    tjob *j = r->user;
    atomic_fetch_sub_explicit(&c->queued, 1, memory_order_relaxed);
    if (j->kind == JOB_DECOMMIT)
        dmm__torch_decommit_finished(c, j, dmm_release_state_of(o) == DMM_RELEASE_COMPLETE ? DMM_OK
                                                                                             : DMM_ERR_QUARANTINED);
    else if (j->kind == JOB_RELEASE_TSEG)
        dmm__torch_tseg_free(c, j->ts);
    else {
        dmm__sa_fini(&j->gs->sa);
        free(j->gs);
    }
    if (j->ev != NULL) c->drv->ops->event_destroy(c->drv, j->ev);
    free(j);
}

void dmm__torch_tags_fini(tctx *c) {
    for (int i = 0; i < DMM_TORCH_MAX_TAGS; i++) {
        ttag *t = &c->tags[i];
        tseg **pp = &t->segs;
        while (*pp != NULL) {
            tseg *g = *pp;
            dmm_release_outcome o = dmm_mechanism_release(c->arena, &g->a);
            if (dmm_release_state_of(&o) == DMM_RELEASE_FAILED) { /* nothing changed: it stays the tag's */
                pp = &g->next;
                continue;
            }
            *pp = g->next;
            dmm__torch_tseg_free(c, g);
        }
        if (t->segs != NULL) continue; /* destroy reports it and may be called again */
        if (t->ev != NULL) c->drv->ops->event_destroy(c->drv, t->ev);
        memset(t, 0, sizeof *t);
    }
}

/* ---- after a confirmed device loss (adapter.h): no driver call; the events went with the context ---- */
void dmm__torch_tseg_free_lost(tctx *c, tseg *g) {
    host_drop(c, g);
    dmm__sa_fini(&g->sa);
    free(g);
}

void dmm__torch_decommit_lost(tctx *c, tjob *j) {
    tseg *g = j->ts;
    ttag *t = &c->tags[g->tag];
    if (g->jobs_left > 0 && --g->jobs_left > 0) return;
    g->state = SEG_OFFLOADED;
    g->restored = 0;
    if (t->pending > 0) t->pending--;
}

void dmm__torch_tags_mark_lost(tctx *c) {
    for (int i = 0; i < DMM_TORCH_MAX_TAGS; i++) {
        ttag *t = &c->tags[i];
        if (t->segs == NULL) continue;
        for (tseg *g = t->segs; g != NULL; g = g->next) { /* nothing is mapped any more */
            g->state = SEG_OFFLOADED;
            g->restored = 0;
            g->jobs_left = 0;
        }
        t->state = TAG_OFFLOADED;
        t->pending = 0;
        t->failure = DMM_ERR_DEVICE_LOST;
    }
}

void dmm__torch_tags_drop_lost(tctx *c) {
    for (int i = 0; i < DMM_TORCH_MAX_TAGS; i++) {
        ttag *t = &c->tags[i];
        while (t->segs != NULL) {
            tseg *g = t->segs;
            t->segs = g->next;
            dmm__torch_tseg_free_lost(c, g);
        }
        memset(t, 0, sizeof *t); /* its event went with the context */
    }
}

/* ---- JSON ---- */
typedef struct blk_ctx {
    dmm_json *j;
    uintptr_t base;
    bool first;
} blk_ctx;

static void put_block(void *u, uint64_t off, uint64_t len, uint64_t req) {
    blk_ctx *b = u;
    dmm__json_put(b->j, "%s[%llu,%llu,%llu]", b->first ? "" : ",", (unsigned long long)(b->base + off),
                  (unsigned long long)len, (unsigned long long)req);
    b->first = false;
}

void dmm__torch_tags_json_locked(tctx *c, dmm_json *j, bool blocks) {
    dmm__json_put(j, "{");
    bool first = true;
    for (int i = 0; i < DMM_TORCH_MAX_TAGS; i++) {
        ttag *t = &c->tags[i];
        if (t->segs == NULL && t->offloads == 0) continue;
        uint64_t live = 0, nblocks = 0, committed = 0, mapped = 0, host = 0, decommit_ns = 0, nsegs = 0, queued = 0;
        for (tseg *g = t->segs; g != NULL; g = g->next) {
            nsegs++;
            queued += g->state == SEG_PENDING ? g->jobs_left : 0;
            live += g->sa.live_bytes;
            nblocks += g->sa.count;
            committed += g->committed;
            mapped += g->state != SEG_OFFLOADED ? g->committed : g->restored;
            host += g->host_bytes;
            if (g->decommit_ns > decommit_ns) decommit_ns = g->decommit_ns;
        }
        dmm__json_put(j, "%s", first ? "" : ",");
        dmm__json_string(j, dmm__torch_tag_name(i)); /* the caller's text: escaped */
        dmm__json_put(j,
                      ":{\"state\":\"%s\",\"mode\":\"%s\",\"segments\":%llu,\"live_blocks\":%llu,"
                      "\"live_bytes\":%llu,\"committed_bytes\":%llu,\"mapped_bytes\":%llu,\"host_bytes\":%llu,"
                      "\"offloads\":%llu,\"restores\":%llu,\"offload_call_ns\":%llu,\"offload_done_ns\":%llu,"
                      "\"last_decommit_ns\":%llu,\"restore_ns\":%llu,\"pending_decommits\":%llu,\"pending_polls\":%llu,"
                      "\"failure\":\"%s\"",
                      state_name(t->state),
                      t->mode == DMM_TORCH_DISCARD ? "discard" : "host", (unsigned long long)nsegs,
                      (unsigned long long)nblocks, (unsigned long long)live, (unsigned long long)committed,
                      (unsigned long long)mapped, (unsigned long long)host, (unsigned long long)t->offloads,
                      (unsigned long long)t->restores, (unsigned long long)t->offload_call_ns,
                      (unsigned long long)t->offload_done_ns, (unsigned long long)decommit_ns,
                      (unsigned long long)t->restore_ns, (unsigned long long)queued, (unsigned long long)t->pending_polls,
                      t->failure == DMM_OK ? "" : dmm_status_str(t->failure));
        if (blocks) {
            dmm__json_put(j, ",\"segment_list\":[");
            bool fs = true;
            for (tseg *g = t->segs; g != NULL; g = g->next) {
                dmm__json_put(j, "%s{\"address\":%llu,\"va_bytes\":%llu,\"committed_bytes\":%llu,\"blocks\":[",
                              fs ? "" : ",", (unsigned long long)(uintptr_t)g->a.ptr, (unsigned long long)g->a.bytes,
                              (unsigned long long)g->committed);
                blk_ctx b = {j, (uintptr_t)g->a.ptr, true};
                dmm__sa_each(&g->sa, put_block, &b);
                dmm__json_put(j, "]}");
                fs = false;
            }
            dmm__json_put(j, "]");
        }
        dmm__json_put(j, "}");
        first = false;
    }
    dmm__json_put(j, "}");
}

void dmm__torch_tags_totals_locked(tctx *c, uint64_t *live, uint64_t *committed) {
    *live = *committed = 0;
    for (int i = 0; i < DMM_TORCH_MAX_TAGS; i++)
        for (tseg *g = c->tags[i].segs; g != NULL; g = g->next) {
            *live += g->sa.live_bytes;
            *committed += g->state != SEG_OFFLOADED ? g->committed : g->restored;
        }
}
