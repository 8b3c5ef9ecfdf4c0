/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/history.h — the pool's recent events, for device_traces in PyTorch's layout. Internal. */
#ifndef DMM_DEVICE_HISTORY_H
#define DMM_DEVICE_HISTORY_H

#include "core/json.h"
#include "types.h"

void dmm__device_history_init(dmm_device *c);
void dmm__device_history_fini(dmm_device *c);
/* An event (cheap when off: one relaxed load); `context` is the context function's number (0: none). */
void dmm__device_history_add(dmm_device *c, uint32_t action, uint64_t addr, uint64_t size, dmm_stream stream,
                             uint32_t context);
/* The context of a pool block event: the context function's number, 0 when there is none. Call it with
 * no lock of dmm held (the function may take the caller's own locks: Python's). */
uint32_t dmm__device_history_context(dmm_device *c, uint32_t action);
static inline bool dmm__device_history_on(dmm_device *c) {
    return dmm_atomic_load_relaxed(&c->hist.on) != 0;
}
/* Appends `"history":{"on":…,"dropped":…,"events":[[action,addr,size,stream,t_us,context],…]}` (oldest
 * first; action 0 alloc, 1 free, 2 map, 3 unmap). */
void dmm__device_history_json(dmm_device *c, dmm_json *j);

#endif /* DMM_DEVICE_HISTORY_H */
