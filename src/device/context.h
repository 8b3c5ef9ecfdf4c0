/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/context.h — the context floor of the device front: counts, the clock, device loss.
 * Internal. */
#ifndef DMM_DEVICE_CONTEXT_H
#define DMM_DEVICE_CONTEXT_H

#include "core/core.h"
#include "types.h"

/* The counters are relaxed atomics (statistics: they order nothing), through core/atomics.h. */
void dmm__device_count_add(device_count *t, uint64_t v); /* cur, total and peak */
void dmm__device_count_sub(device_count *t, uint64_t v);
void dmm__device_count_reset(device_count *t); /* peak = cur */

/* DMM_ERR_INVALID_ARGUMENT for a public call `op` given a NULL where it `needs` something. */
dmm_status dmm__device_null(const char *op, const char *needs);

/* What the arena has mapped (= committed) and owns now: the device's lease, as the governor counts it. */
uint64_t dmm__device_mapped(dmm_device *c);
uint64_t dmm__device_owned(dmm_device *c);

/* Device loss (dmm/device.h "Device loss"). Whether the device was lost: asked of the driver, which
 * latched the first DMM_ERR_DEVICE_LOST any call over it reported (the pool's, the arena's, the
 * deferred queue's or ours); no driver call, the last error untouched. */
bool dmm__device_lost(const dmm_device *c);
/* Whether the lost context was confirmed torn down (dmm_arena_confirm_context_terminated). */
bool dmm__device_terminated(const dmm_device *c);
/* DMM_OK, or DMM_ERR_DEVICE_LOST with a sentence naming `op`, when the device was lost. */
dmm_status dmm__device_refuse_lost(dmm_device *c, const char *op);
/* DMM_ERR_BUSY with a sentence naming `op` (e.g. "offload of tag 'w'") while `stream` captures a CUDA
 * graph: mapping or unmapping memory then would invalidate the capture. */
dmm_status dmm__device_refuse_capturing(dmm_device *c, const char *op, dmm_stream stream);


/* DMM_ERR_OUT_OF_MEMORY for a request above the reservation (`what`: "allocating", ...): nothing changes. */
dmm_status dmm__device_too_large(const dmm_device *c, uint64_t bytes, const char *what);

/* Rounds a request up to the block alignment (torch's 512 bytes), and a length up to the granule. */
static inline uint64_t dmm__device_round_block(const dmm_device *c, uint64_t bytes) {
    return (bytes + c->block_align - 1) & ~(c->block_align - 1);
}
static inline uint64_t dmm__device_round_granule(const dmm_device *c, uint64_t bytes) {
    return (bytes + c->granule - 1) / c->granule * c->granule;
}

#endif /* DMM_DEVICE_CONTEXT_H */
