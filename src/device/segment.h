/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/segment.h — one segment of the device front (tag and graph segments alike). Internal. */
#ifndef DMM_DEVICE_SEGMENT_H
#define DMM_DEVICE_SEGMENT_H

#include "core/json.h"
#include "types.h"

/* Allocates `bytes` of the arena's address space for the segment and commits its first `commit` bytes
 * (0: VA only, tags back a prefix later; graphs commit a front, in 2 MiB pieces: a refusal for budget or
 * memory gives back the pool's cached chunks and tries once more). Any failure leaves nothing behind,
 * with a sentence: "dmm device: out of host memory for <kind>", or "dmm device: reserving <bytes> bytes
 * of <fmt…> failed: <the arena's>". */
dmm_status dmm__device_segment_open(dmm_device *c, device_segment *s, uint64_t bytes, uint64_t commit,
                                   const char *kind, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* Gives a segment's pinned copy back: freed, the host lease shrunk, c->host_bytes counted down (dev.lock
 * held); nothing when *host is NULL. */
void dmm__device_copy_drop(dmm_device *c, void **host, uint64_t *bytes);
/* Commits `range` of segment allocation `a` in pieces of DMM_DEVICE_SEGMENT_PIECE (the granule when that is
 * larger), a handle each, so that a part can go back alone; in one commit where the mechanism cannot cut. */
dmm_status dmm__device_commit_pieces(dmm_device *c, const dmm_allocation *a, dmm_range range, uint64_t *mapped);
/* Frees the segment's host structures (its allocation is gone, or went with a lost context). */
void dmm__device_segment_close(device_segment *s);
/* Lays the free spans of a segment of `bytes` over [0, bytes) (what open does before it maps; alone: a
 * segment with no memory behind it, for tests of placement). False without host memory. */
bool dmm__device_segment_place(device_segment *s, uint64_t bytes);

/* First fit: the lowest free offset with `len` bytes (len a multiple of the block alignment), so
 * blocks pack at the low end, where a tag segment's backed prefix is. False: nothing changed. */
bool dmm__device_segment_take(device_segment *s, uint64_t len, uint64_t req, uint64_t *off);
/* Frees the live block at `off`; false (nothing changed) when there is none. */
bool dmm__device_segment_give(device_segment *s, uint64_t off, uint64_t *len, uint64_t *req);
/* Whether ptr lies in the segment's VA; *off = its offset. */
bool dmm__device_segment_holds(const device_segment *s, const void *ptr, uint64_t *off);
/* The end of the highest live block (0 when none). */
uint64_t dmm__device_segment_high(const device_segment *s);
/* Calls fn for every live block (any order). */
void dmm__device_segment_each(const device_segment *s, void (*fn)(void *u, uint64_t off, uint64_t len, uint64_t req),
                             void *u);

/* Appends the live blocks as "[address,bytes,requested],..." (absolute addresses, any order). */
void dmm__device_segment_json_blocks(const device_segment *s, dmm_json *j);

/* Gives the allocation back to the arena now; false when the release FAILED (nothing changed). */
bool dmm__device_segment_release(dmm_device *c, device_segment *s);
/* Queues the allocation's release behind `ev` as a job with `finish` and `owner` (dev.lock held). On
 * success the job owns `ev`; on failure nothing was queued and `ev` is still the caller's. */
dmm_status dmm__device_segment_release_behind(dmm_device *c, device_segment *s, dmm_event ev, device_job_finish finish,
                                             void *owner);

#endif /* DMM_DEVICE_SEGMENT_H */
