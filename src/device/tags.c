/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/tags.c — tag names and scopes, and tagged allocations in tag segments (DESIGN §4.11).
 *
 * Each segment serves one stream (the one its blocks were allocated on): a freed block is reused in that
 * stream's order only, as the pool's per-stream heaps are, so no other stream's work can overwrite
 * memory a kernel still reads (a block used on other streams was made to wait for them at its free).
 *
 * What it owns: the tag names of the process, the default tag (every thread's outside its scopes),
 * each thread's stack of tag scopes (an untagged one is -1), and per device the
 * tag segments: VA-only segments (segment.c) whose low end [0, committed) is backed. Allocations made
 * inside `dmm.torch.tag("weights")` live there, not in the pool, so the tag can leave the device as
 * whole ranges and come back at the same addresses (offload.c). Empty segments go back behind an event
 * on the stream of their last free (empty_cache), and at destroy.
 *
 * Growth: a segment commits its prefix in steps of max(granule, committed/16) up to 64 MiB, so that
 * a model's weights take few handles and the tail wasted is at most 1/16 of what is committed.
 *
 * Invariants (dev.lock): a tag is RESIDENT ⇔ every segment is RESIDENT; OFFLOADING ⇔ pending > 0
 * (pending = its segments in SEG_PENDING = those with jobs_left > 0 decommits in the queue); a
 * segment's piece events and its tag's event (recorded after the copies of its last offload) outlive
 * every request that names them (they are destroyed with the segment or the tag).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "driver/call.h"
#include "segment.h"
#include "tags.h"

#define MIB ((uint64_t)1 << 20)

/* ---- names and scopes ---- */
static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;
static char names[DMM_DEVICE_MAX_TAGS][DMM_DEVICE_TAG_NAME];
static int nnames;

_Thread_local int dmm__device_tag_stack[DMM_DEVICE_TAG_DEPTH];
_Thread_local int dmm__device_tag_depth;
_Atomic int dmm__device_tag_default_id = -1;

static int intern(const char *name) {
    pthread_mutex_lock(&names_mu);
    int id = -1;
    for (int i = 0; i < nnames; i++)
        if (strcmp(names[i], name) == 0) id = i;
    if (id < 0 && nnames < DMM_DEVICE_MAX_TAGS) {
        id = nnames++;
        snprintf(names[id], sizeof names[id], "%s", name);
    }
    pthread_mutex_unlock(&names_mu);
    return id;
}

int dmm__device_tag_find(const char *name) {
    if (name == NULL) return -1;
    pthread_mutex_lock(&names_mu);
    int id = -1;
    for (int i = 0; i < nnames; i++)
        if (strcmp(names[i], name) == 0) id = i;
    pthread_mutex_unlock(&names_mu);
    return id;
}

const char *dmm__device_tag_name(int id) { return id >= 0 && id < DMM_DEVICE_MAX_TAGS ? names[id] : "?"; }

/* The id of a tag name (interned), or -1 with the sentence set. */
static int checked_id(const char *name, const char *op) {
    size_t n = name != NULL ? strnlen(name, DMM_DEVICE_TAG_NAME) : 0;
    if (n == 0 || n >= DMM_DEVICE_TAG_NAME) {
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: %s: a tag name must have 1 to %d characters; nothing "
                      "changed", op, DMM_DEVICE_TAG_NAME - 1);
        return -1;
    }
    int id = intern(name);
    if (id < 0)
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: %s: tag '%s' would be the %dth tag name of the process; "
                      "at most %d exist; reuse a name; nothing changed", op, name, DMM_DEVICE_MAX_TAGS + 1,
                      DMM_DEVICE_MAX_TAGS);
    return id;
}

static dmm_status too_deep(void) {
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: tag scopes nest at most %d deep on one thread; "
                         "nothing changed", DMM_DEVICE_TAG_DEPTH);
}

dmm_status dmm_device_tag_begin(const char *name) {
    if (dmm__device_tag_depth >= DMM_DEVICE_TAG_DEPTH) return too_deep();
    int id = checked_id(name, "tag begin");
    if (id < 0) return DMM_ERR_INVALID_ARGUMENT;
    dmm__device_tag_stack[dmm__device_tag_depth++] = id;
    return DMM_OK;
}

dmm_status dmm_device_untagged_begin(void) {
    if (dmm__device_tag_depth >= DMM_DEVICE_TAG_DEPTH) return too_deep();
    dmm__device_tag_stack[dmm__device_tag_depth++] = -1;
    return DMM_OK;
}

dmm_status dmm_device_tag_default(const char *name) {
    int id = -1;
    if (name != NULL && (id = checked_id(name, "the default tag")) < 0) return DMM_ERR_INVALID_ARGUMENT;
    atomic_store_explicit(&dmm__device_tag_default_id, id, memory_order_release); /* (its name written before) */
    return DMM_OK;
}

dmm_status dmm_device_tag_end(void) {
    if (dmm__device_tag_depth == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: tag end without a tag begin on this thread");
    dmm__device_tag_depth--;
    return DMM_OK;
}

const char *dmm__device_tag_state_name(int s) {
    return s == TAG_RESIDENT ? "resident" : s == TAG_OFFLOADING ? "offloading" : "offloaded";
}

device_tag *dmm__device_tag_lookup(dmm_device *c, const char *name, const char *op, int *id_out) {
    int id = dmm__device_tag_find(name);
    if (id < 0) {
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm device: %s: no allocation was ever made in tag '%s'", op,
                      name != NULL ? name : "(null)");
        return NULL;
    }
    if (id_out != NULL) *id_out = id;
    return &c->tags[id];
}

uint64_t dmm__device_tag_pending_polls(const dmm_device *c, const device_tag *t) {
    return t->state == TAG_OFFLOADING ? c->polls - t->polls_mark : t->pending_polls;
}

/* ---- allocation ---- */
static uint64_t step_for(const dmm_device *c, uint64_t committed) {
    uint64_t st = committed / 16;
    if (st > 64 * MIB) st = 64 * MIB;
    if (st < c->granule) st = c->granule;
    return dmm__device_round_granule(c, st);
}

/* Where a growth of the segment to back [0, end) commits up to (end > committed). */
static uint64_t grow_target(const dmm_device *c, const tag_segment *g, uint64_t end) {
    uint64_t target = dmm__device_round_granule(c, end);
    uint64_t stepped = g->seg.committed + step_for(c, g->seg.committed);
    if (stepped > target) target = stepped;
    if (target > g->seg.a.bytes) target = g->seg.a.bytes;
    return target;
}

/* Whether growing the segment to back [0, end) would commit over a chunk the arena keeps POISONED: a
 * growth whose commit failed and whose undo failed too (the arena's rollback leak) leaves its chunk
 * mapped there, and the arena refuses every later commit over it (DMM_ERR_QUARANTINED). Such a growth
 * is never tried again: the block goes to another segment, or a fresh one (the segment keeps serving
 * from its committed prefix, and goes back at empty_cache once empty). Asked only when a malloc needs
 * growth, over the range that growth would commit (at most one step or the request). */
static bool growth_poisoned(dmm_device *c, const tag_segment *g, uint64_t end) {
    if (end <= g->seg.committed) return false;
    uint64_t target = grow_target(c, g, end);
    bool q = false;
    if (dmm_mechanism_is_quarantined(c->arena, (const char *)g->seg.a.ptr + g->seg.committed,
                                     (size_t)(target - g->seg.committed), &q) != DMM_OK)
        q = false; /* (cannot fail for our own arena) the commit would say why */
    dmm_clear_error();
    return q;
}

/* Backs [0, end) of the segment; a failure changes nothing (but a failed undo: growth_poisoned). */
static dmm_status grow_commit(dmm_device *c, tag_segment *g, uint64_t end) {
    if (end <= g->seg.committed) return DMM_OK;
    uint64_t target = grow_target(c, g, end);
    dmm_range r = {(size_t)g->seg.committed, (size_t)(target - g->seg.committed)};
    uint64_t newly = 0;
    dmm_status s = dmm_mechanism_commit(c->arena, &g->seg.a, r, &newly);
    if (s == DMM_ERR_BUDGET || s == DMM_ERR_OUT_OF_MEMORY) {
        /* the pool's cached chunks first; then the exact size, without the step */
        (void)dmm_pool_empty_cache(c->pool, NULL);
        s = dmm_mechanism_commit(c->arena, &g->seg.a, r, &newly);
        if (s != DMM_OK && target > dmm__device_round_granule(c, end)) {
            target = dmm__device_round_granule(c, end);
            r.bytes = (size_t)(target - g->seg.committed);
            s = dmm_mechanism_commit(c->arena, &g->seg.a, r, &newly);
        }
    }
    if (s != DMM_OK) return s;
    g->seg.committed = target;
    return DMM_OK;
}

dmm_status dmm__device_tag_malloc(dmm_device *c, int tag, size_t bytes, dmm_stream stream, void **out) {
    uint64_t len = dmm__device_round_block(c, bytes);
    pthread_mutex_lock(&c->lock);
    device_tag *t = &c->tags[tag];
    if (t->state != TAG_RESIDENT) {
        pthread_mutex_unlock(&c->lock);
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm device: allocating %zu bytes in tag '%s' on device %d refused: the tag is %s; "
                             "restore it (dmm_device_restore; dmm.torch.restore under PyTorch) before allocating in it",
                             bytes, dmm__device_tag_name(tag), (int)c->dev.index, dmm__device_tag_state_name(t->state));
    }
    tag_segment *g = NULL, **tail = &t->segs;
    uint64_t off = 0;
    for (tag_segment *x = t->segs; x != NULL; x = x->next) {
        if (x->stream == stream && dmm__device_segment_take(&x->seg, len, bytes, &off)) {
            if (!growth_poisoned(c, x, off + len)) {
                g = x;
                break;
            }
            dmm__device_segment_give(&x->seg, off, NULL, NULL); /* its growth would fail forever: the next segment */
        }
        tail = &x->next;
    }
    dmm_status s = DMM_OK;
    if (g == NULL) {
        uint64_t va = c->tag_va;
        if (va < len) va = dmm__device_round_granule(c, len);
        g = calloc(1, sizeof *g);
        s = g != NULL ? dmm__device_segment_open(c, &g->seg, va, 0, "a tag segment", "VA for a segment of tag '%s'",
                                                dmm__device_tag_name(tag))
                      : dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm device: out of host memory for a tag segment");
        if (s != DMM_OK) {
            free(g);
            pthread_mutex_unlock(&c->lock);
            return s;
        }
        g->tag = tag;
        g->stream = stream;
        *tail = g;
        (void)dmm__device_segment_take(&g->seg, len, bytes, &off); /* the segment is empty and large enough */
    }
    s = grow_commit(c, g, off + len);
    if (s != DMM_OK) {
        dmm__error_wrap(s, "dmm device: allocating %zu bytes in tag '%s' on device %d failed", bytes,
                        dmm__device_tag_name(tag), (int)c->dev.index);
        dmm__device_segment_give(&g->seg, off, NULL, NULL);
        pthread_mutex_unlock(&c->lock);
        dmm_atomic_add_relaxed(&c->ooms, 1);
        return s;
    }
    pthread_mutex_unlock(&c->lock);
    *out = (char *)g->seg.a.ptr + off;
    return DMM_OK;
}

dmm_status dmm__device_tag_free_locked(dmm_device *c, void *ptr, dmm_stream stream, uint64_t *len, uint64_t *req) {
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS; i++)
        for (tag_segment *g = c->tags[i].segs; g != NULL; g = g->next) {
            uint64_t off = 0;
            if (!dmm__device_segment_holds(&g->seg, ptr, &off)) continue;
            if (!dmm__device_segment_give(&g->seg, off, len, req)) return DMM_ERR_UNKNOWN_ALLOCATION;
            g->last_stream = stream; /* an emptied segment is released only behind an event on it */
            return DMM_OK;
        }
    return DMM_ERR_UNKNOWN_ALLOCATION;
}

/* ---- giving segments back ---- */
void dmm__device_tseg_host_drop(dmm_device *c, tag_segment *g) { dmm__device_copy_drop(c, &g->host, &g->host_bytes); }

void dmm__device_tseg_free(dmm_device *c, tag_segment *g) {
    dmm__device_tseg_host_drop(c, g);
    for (int k = 0; k < DMM_DEVICE_OFFLOAD_PIECES; k++)
        if (g->piece_ev[k] != NULL) (void)dmm__drv_event_destroy(c->drv, g->piece_ev[k]);
    dmm__device_segment_close(&g->seg);
    free(g);
}

void dmm__device_tseg_free_lost(dmm_device *c, tag_segment *g) {
    dmm__device_tseg_host_drop(c, g);
    dmm__device_segment_close(&g->seg);
    free(g);
}

/* The finish of an empty segment's queued release: gone, back in service, or dropped after a loss. */
static void tseg_release_finished(dmm_device *c, device_job *j, device_job_end how, dmm_status status) {
    (void)status;
    tag_segment *g = j->owner;
    if (how == DEVICE_JOB_RAN) {
        dmm__device_tseg_free(c, g);
    } else if (how == DEVICE_JOB_FAILED) { /* not released: the empty segment goes back to its tag, in service */
        g->next = c->tags[g->tag].segs;
        c->tags[g->tag].segs = g;
    } else {
        dmm__device_tseg_free_lost(c, g); /* out of its tag already */
    }
}

dmm_status dmm__device_tags_trim_locked(dmm_device *c, uint64_t *freed) {
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS; i++) {
        device_tag *t = &c->tags[i];
        if (t->state != TAG_RESIDENT) continue;
        tag_segment **pp = &t->segs;
        while (*pp != NULL) {
            tag_segment *g = *pp;
            if (g->seg.count > 0 || g->state != SEG_RESIDENT) {
                pp = &g->next;
                continue;
            }
            dmm_event ev = NULL;
            dmm_status s = dmm__drv_event_create(c->drv, &ev);
            if (s == DMM_OK) s = dmm__drv_event_record(c->drv, ev, g->last_stream);
            if (s == DMM_ERR_DEVICE_LOST) return s; /* the loss: no further call */
            if (s == DMM_OK) s = dmm__device_segment_release_behind(c, &g->seg, ev, tseg_release_finished, g);
            if (s != DMM_OK) {
                if (ev != NULL) (void)dmm__drv_event_destroy(c->drv, ev);
                pp = &g->next;
                continue;
            }
            *freed += g->seg.committed;
            *pp = g->next;
        }
    }
    return DMM_OK;
}

void dmm__device_tags_fini(dmm_device *c) {
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS; i++) {
        device_tag *t = &c->tags[i];
        tag_segment **pp = &t->segs;
        while (*pp != NULL) {
            tag_segment *g = *pp;
            if (!dmm__device_segment_release(c, &g->seg)) { /* FAILED, nothing changed: it stays the tag's */
                pp = &g->next;
                continue;
            }
            *pp = g->next;
            dmm__device_tseg_free(c, g);
        }
        if (t->segs != NULL) continue; /* destroy reports it and may be called again */
        if (t->ev != NULL) (void)dmm__drv_event_destroy(c->drv, t->ev);
        memset(t, 0, sizeof *t);
    }
}

/* ---- after a confirmed device loss (dmm/device.h): no driver call; the events went with the context ---- */
void dmm__device_tags_mark_lost(dmm_device *c) {
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS; i++) {
        device_tag *t = &c->tags[i];
        if (t->segs == NULL) continue;
        for (tag_segment *g = t->segs; g != NULL; g = g->next) { /* nothing is mapped any more */
            g->state = SEG_OFFLOADED;
            g->restored = 0;
            g->jobs_left = 0;
        }
        t->pending_polls = dmm__device_tag_pending_polls(c, t);
        t->state = TAG_OFFLOADED;
        t->pending = 0;
        t->failure = DMM_ERR_DEVICE_LOST;
    }
}

void dmm__device_tags_drop_lost(dmm_device *c) {
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS; i++) {
        device_tag *t = &c->tags[i];
        while (t->segs != NULL) {
            tag_segment *g = t->segs;
            t->segs = g->next;
            dmm__device_tseg_free_lost(c, g);
        }
        memset(t, 0, sizeof *t); /* its event went with the context */
    }
}

/* ---- JSON ---- */
void dmm__device_tags_json_locked(dmm_device *c, dmm_json *j, bool blocks) {
    dmm__json_put(j, "{");
    bool first = true;
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS; i++) {
        device_tag *t = &c->tags[i];
        if (t->segs == NULL && t->offloads == 0) continue;
        uint64_t live = 0, nblocks = 0, committed = 0, mapped = 0, host = 0, decommit_ns = 0, nsegs = 0, queued = 0;
        for (tag_segment *g = t->segs; g != NULL; g = g->next) {
            nsegs++;
            queued += g->state == SEG_PENDING ? g->jobs_left : 0;
            live += g->seg.live_bytes;
            nblocks += g->seg.count;
            committed += g->seg.committed;
            mapped += g->state != SEG_OFFLOADED ? g->seg.committed : g->restored;
            host += g->host_bytes;
            if (g->decommit_ns > decommit_ns) decommit_ns = g->decommit_ns;
        }
        dmm__json_put(j, "%s", first ? "" : ",");
        dmm__json_string(j, dmm__device_tag_name(i)); /* the caller's text: escaped */
        dmm__json_put(j,
                      ":{\"state\":\"%s\",\"mode\":\"%s\",\"segments\":%llu,\"live_blocks\":%llu,"
                      "\"live_bytes\":%llu,\"committed_bytes\":%llu,\"mapped_bytes\":%llu,\"host_bytes\":%llu,"
                      "\"offloads\":%llu,\"restores\":%llu,\"offload_call_ns\":%llu,\"offload_done_ns\":%llu,"
                      "\"last_decommit_ns\":%llu,\"restore_ns\":%llu,\"pending_decommits\":%llu,\"pending_polls\":%llu,"
                      "\"failure\":\"%s\"",
                      dmm__device_tag_state_name(t->state),
                      t->mode == DMM_DEVICE_DISCARD ? "discard" : "host", (unsigned long long)nsegs,
                      (unsigned long long)nblocks, (unsigned long long)live, (unsigned long long)committed,
                      (unsigned long long)mapped, (unsigned long long)host, (unsigned long long)t->offloads,
                      (unsigned long long)t->restores, (unsigned long long)t->offload_call_ns,
                      (unsigned long long)t->offload_done_ns, (unsigned long long)decommit_ns,
                      (unsigned long long)t->restore_ns, (unsigned long long)queued,
                      (unsigned long long)dmm__device_tag_pending_polls(c, t),
                      t->failure == DMM_OK ? "" : dmm_status_str(t->failure));
        if (blocks) {
            dmm__json_put(j, ",\"segment_list\":[");
            bool fs = true;
            for (tag_segment *g = t->segs; g != NULL; g = g->next) {
                dmm__json_put(j,
                              "%s{\"address\":%llu,\"va_bytes\":%llu,\"committed_bytes\":%llu,"
                              "\"mapped_bytes\":%llu,\"blocks\":[",
                              fs ? "" : ",", (unsigned long long)(uintptr_t)g->seg.a.ptr,
                              (unsigned long long)g->seg.a.bytes, (unsigned long long)g->seg.committed,
                              (unsigned long long)(g->state != SEG_OFFLOADED ? g->seg.committed : g->restored));
                dmm__device_segment_json_blocks(&g->seg, j);
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

void dmm__device_tags_totals_locked(dmm_device *c, uint64_t *live, uint64_t *committed) {
    *live = *committed = 0;
    for (int i = 0; i < DMM_DEVICE_MAX_TAGS; i++)
        for (tag_segment *g = c->tags[i].segs; g != NULL; g = g->next) {
            *live += g->seg.live_bytes;
            *committed += g->state != SEG_OFFLOADED ? g->seg.committed : g->restored;
        }
}
