/* adapters/torch/blocks.h — the pool's live blocks as the adapter saw them handed out. Internal. */
#ifndef DMM_TORCH_BLOCKS_H
#define DMM_TORCH_BLOCKS_H

#include "types.h"

/* One block of a collection: its address and record. */
typedef struct torch_block_at {
    uintptr_t addr;
    torch_block b;
} torch_block_at;

/* The table (at create: DMM_ERR_OUT_OF_MEMORY with a sentence when there is no host memory for it). */
dmm_status dmm__torch_blocks_open(tctx *c);
void dmm__torch_blocks_close(tctx *c);
/* Turns tracking on (for good): blocks handed out from now on are kept; those live before are not
 * (a snapshot counts them as untracked). */
void dmm__torch_blocks_track(tctx *c);
static inline bool dmm__torch_blocks_tracking(tctx *c) {
    return atomic_load_explicit(&c->track_blocks, memory_order_relaxed) != 0;
}
/* Adds a block the pool handed out; never fails the caller: without host memory the block is left
 * out (a snapshot counts it as untracked). */
void dmm__torch_blocks_add(tctx *c, const void *ptr, uint64_t len, uint64_t req, dmm_stream stream);
/* Takes the block at ptr out of the table (before the pool frees it, so that the address cannot be
 * handed out and added again first); false when it is not there. *out (may be NULL) = its record. */
bool dmm__torch_blocks_take(tctx *c, const void *ptr, torch_block *out);
/* Every block, sorted by address, in a malloc'd array (*out; free() it); SIZE_MAX when host memory is
 * short (*out NULL). Each shard is read under its lock; blocks added or taken meanwhile may or may not
 * be in it. */
size_t dmm__torch_blocks_collect(tctx *c, torch_block_at **out);

#endif /* DMM_TORCH_BLOCKS_H */
