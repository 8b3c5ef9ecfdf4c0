/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/stream_uses.h — blocks used on streams other than their own (torch's record_stream).
 * Internal. */
#ifndef DMM_DEVICE_STREAM_USES_H
#define DMM_DEVICE_STREAM_USES_H

#include "types.h"

/* 1 once any block was recorded (stream_uses.c). */
extern _Atomic int dmm__device_uses_seen;

/* Whether any block was ever recorded (one relaxed load: until then the free path asks nothing more). */
static inline bool dmm__device_uses_any(void) { return dmm_atomic_load_relaxed(&dmm__device_uses_seen) != 0; }
/* At the block's free: takes its recorded streams out of the table, `own` (the stream it was
 * allocated on) and repeats left out: *n of them in *streams (malloc'd: the caller frees it). False
 * (and *streams = NULL) when the block has none. */
bool dmm__device_uses_take(void *ptr, dmm_stream own, dmm_stream **streams, size_t *n);
/* Orders `waiter` after the work queued on `on` so far: an event recorded on `on` that `waiter` waits
 * for (c's ext.stream_wait); without that extra, or when a call fails, `on` is synchronized instead
 * (slower, as correct). */
void dmm__device_stream_wait(dmm_device *c, dmm_stream waiter, dmm_stream on);

#endif /* DMM_DEVICE_STREAM_USES_H */
