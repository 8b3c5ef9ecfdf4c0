/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/blocks.h — the pool's live blocks as the device saw them handed out. Internal. */
#ifndef DMM_DEVICE_BLOCKS_H
#define DMM_DEVICE_BLOCKS_H

#include "types.h"

/* One block of a collection: its address and record. */
typedef struct device_block_at {
    uintptr_t addr;
    device_block b;
} device_block_at;

/* The table (at create: DMM_ERR_OUT_OF_MEMORY with a sentence when there is no host memory for it). */
dmm_status dmm__device_blocks_open(dmm_device *c);
void dmm__device_blocks_close(dmm_device *c);
static inline bool dmm__device_blocks_tracking(dmm_device *c) {
    return dmm_atomic_load_relaxed(&c->track_blocks) != 0;
}
/* Adds a block the pool handed out; never fails the caller: without host memory the block is left
 * out (a snapshot counts it as untracked). */
void dmm__device_blocks_add(dmm_device *c, const void *ptr, uint64_t len, uint64_t req, dmm_stream stream,
                            uint32_t context);
/* Takes the block at ptr out of the table (before the pool frees it, so that the address cannot be
 * handed out and added again first); false when it is not there. *out (may be NULL) = its record. */
bool dmm__device_blocks_take(dmm_device *c, const void *ptr, device_block *out);
/* Every block, sorted by address, in a malloc'd array (*out; free() it); SIZE_MAX when host memory is
 * short (*out NULL). Each shard is read under its lock; blocks added or taken meanwhile may or may not
 * be in it. */
size_t dmm__device_blocks_collect(dmm_device *c, device_block_at **out);

#endif /* DMM_DEVICE_BLOCKS_H */
