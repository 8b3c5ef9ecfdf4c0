/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/tags.h — tag names and scopes, tagged allocations in tag segments. Internal. */
#ifndef DMM_DEVICE_TAGS_H
#define DMM_DEVICE_TAGS_H

#include "core/json.h"
#include "types.h"

/* The calling thread's tag scopes (tags.c), inline for the malloc path; an untagged scope is -1. The
 * default tag (-1: none) is every thread's outside all scopes. */
extern _Thread_local int dmm__device_tag_stack[DMM_DEVICE_TAG_DEPTH];
extern _Thread_local int dmm__device_tag_depth;
extern _Atomic int dmm__device_tag_default_id;

/* The tag this thread's mallocs are in now (its id ≥ 0), or -1 (the pool's); *by_default = it is the
 * default tag's (no scope). */
static inline int dmm__device_tag_current(bool *by_default) {
    *by_default = dmm__device_tag_depth == 0;
    return dmm__device_tag_depth > 0 ? dmm__device_tag_stack[dmm__device_tag_depth - 1]
                                     : atomic_load_explicit(&dmm__device_tag_default_id, memory_order_acquire);
}
/* The id of a name, or -1 when no allocation was ever tagged with it. */
int dmm__device_tag_find(const char *name);
const char *dmm__device_tag_name(int id);
const char *dmm__device_tag_state_name(int state);
/* The tag of `name` in this context; NULL (INVALID_ARGUMENT, a sentence naming `op`) when no
 * allocation was ever made in it. *id_out (optional) = its id. */
device_tag *dmm__device_tag_lookup(dmm_device *c, const char *name, const char *op, int *id_out);
/* Polls that found the tag's offload in progress (dev.lock held). */
uint64_t dmm__device_tag_pending_polls(const dmm_device *c, const device_tag *t);

/* A block of tag `tag` for `stream`, from a segment of that stream's. DMM_ERR_BUSY (a sentence, nothing
 * changed) while the tag is not resident. */
dmm_status dmm__device_tag_malloc(dmm_device *c, int tag, size_t bytes, dmm_stream stream, void **out);
/* DMM_ERR_UNKNOWN_ALLOCATION when ptr is in no tag segment (dev.lock held); else the block is free
 * and its segment remembers `stream` (an emptied segment goes only behind an event on it). */
dmm_status dmm__device_tag_free_locked(dmm_device *c, void *ptr, dmm_stream stream, uint64_t *len, uint64_t *req);

/* Gives the pinned copy of a segment back (host lease shrunk). */
void dmm__device_tseg_host_drop(dmm_device *c, tag_segment *g);

/* Empty segments of resident tags go back behind an event on the stream of their last free (dev.lock
 * held); *freed += their bytes. DMM_ERR_DEVICE_LOST when the event's calls found the loss (what was
 * queued before stays queued). */
dmm_status dmm__device_tags_trim_locked(dmm_device *c, uint64_t *freed);
/* Releases every segment of every tag that holds nothing live (for destroy). */
void dmm__device_tags_fini(dmm_device *c);
/* After a confirmed loss: every tag offloaded, its segments gone (kept for their bookkeeping). */
void dmm__device_tags_mark_lost(dmm_device *c);
/* After a confirmed loss: frees every tag segment (pinned copies included) and tag; no driver call. */
void dmm__device_tags_drop_lost(dmm_device *c);
/* Frees a segment without a driver call (its events went with the context). */
void dmm__device_tseg_free_lost(dmm_device *c, tag_segment *g);
/* Frees a segment's host copy, piece events, blocks and itself (its allocation is gone). */
void dmm__device_tseg_free(dmm_device *c, tag_segment *g);

/* JSON of the tags (appended to j with the core writer, core/json.h). */
void dmm__device_tags_json_locked(dmm_device *c, dmm_json *j, bool blocks);
void dmm__device_tags_totals_locked(dmm_device *c, uint64_t *live, uint64_t *committed);

#endif /* DMM_DEVICE_TAGS_H */
