/* adapters/torch/history.h — the pool's recent events, for device_traces in PyTorch's layout. Internal. */
#ifndef DMM_TORCH_HISTORY_H
#define DMM_TORCH_HISTORY_H

#include "core/json.h"
#include "types.h"

void dmm__torch_history_init(tctx *c);
void dmm__torch_history_fini(tctx *c);
/* Keeps the last `max_entries` events from now on (an earlier history is dropped); 0 = off. Turns
 * block tracking on (blocks.h): the block events are the table's.
 * DMM_ERR_INVALID_ARGUMENT above 2^26 entries, DMM_ERR_OUT_OF_MEMORY without host memory for the ring
 * (nothing changed either way). */
dmm_status dmm__torch_history(tctx *c, uint64_t max_entries);
/* An event (cheap when off: one relaxed load). */
void dmm__torch_history_add(tctx *c, uint32_t action, uint64_t addr, uint64_t size, dmm_stream stream);
static inline bool dmm__torch_history_on(tctx *c) {
    return atomic_load_explicit(&c->hist.on, memory_order_relaxed) != 0;
}
/* Appends `"history":{"on":…,"dropped":…,"events":[[action,addr,size,stream,t_us],…]}` (oldest first;
 * action 0 alloc, 1 free, 2 map, 3 unmap). */
void dmm__torch_history_json(tctx *c, dmm_json *j);

#endif /* DMM_TORCH_HISTORY_H */
