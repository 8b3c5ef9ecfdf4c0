/* src/device/poolview.h — the mechanism the pool is created over: the arena, watched. Internal. */
#ifndef DMM_DEVICE_POOLVIEW_H
#define DMM_DEVICE_POOLVIEW_H

#include "types.h"

/* Builds the view over c->arena into c->view (which owns c->pv). DMM_ERR_OUT_OF_MEMORY with a sentence. */
dmm_status dmm__device_poolview_open(dmm_device *c);
/* The committed runs of the pool's VA as absolute [addr, addr+len) pairs, coalesced and sorted, in a
 * malloc'd array of 2n uint64_t (*runs; free() it); *exact = whether the map is exact (false after a
 * shortage of host memory, or when the pool made more than one allocation). SIZE_MAX when host memory
 * is short. 0 runs before the pool's first growth. */
size_t dmm__device_poolview_runs(dmm_device *c, uint64_t **runs, bool *exact);

#endif /* DMM_DEVICE_POOLVIEW_H */
