/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/record.h — the recorder: every malloc and free the device serves, written as a dmm
 * trace (`# dmm-trace v1`, gzip; docs/trace-format.md) while it is on. Internal; the public face is
 * dmm_device_record_start / _stop (dmm/device.h).
 *
 * Thread contract: thread-safe. The hooks run on every malloc and free; off, each costs one relaxed
 * load. The recorder's locks are leaves: nothing is called under them but zlib and the host heap.
 */
#ifndef DMM_DEVICE_RECORD_H
#define DMM_DEVICE_RECORD_H

#include "types.h"

/* Whether a recording is on (a relaxed read: for the hooks' callers and tests). */
static inline bool dmm__device_recording(dmm_device *c) { return dmm_atomic_load_relaxed(&c->rec.active) != 0; }

/* The hooks (device.c): a block handed out (after the route served it), a block about to be freed
 * (before the route frees it, so that its address cannot be handed out again and recorded before its
 * free is; free returns whether it wrote the free, and a free the route then refuses is answered with
 * a new allocation of the same block, so that the trace stays true). `bytes` is the block's rounded
 * size. They never fail: a failure is kept for stop. */
void dmm__device_record_alloc(dmm_device *c, const void *ptr, uint64_t bytes, dmm_stream stream);
bool dmm__device_record_free(dmm_device *c, const void *ptr);

/* The recorder's locks and state, at create; at destroy (a recording still on is stopped, its result
 * dropped: the context is going). */
void dmm__device_record_init(dmm_device *c);
void dmm__device_record_fini(dmm_device *c);

#endif /* DMM_DEVICE_RECORD_H */
