/* SPDX-License-Identifier: Apache-2.0 */
/* src/device/graphs.h — the memory CUDA graph captures are served from (graphs.c; its sleep and wake:
 * graph_sleep.c). Internal. */
#ifndef DMM_DEVICE_GRAPHS_H
#define DMM_DEVICE_GRAPHS_H

#include "core/json.h"
#include "types.h"

dmm_status dmm__device_graph_malloc(dmm_device *c, size_t bytes, dmm_stream stream, uint64_t capture_id, void **out);
/* DMM_ERR_UNKNOWN_ALLOCATION when ptr is in no graph segment (dev.lock held). */
dmm_status dmm__device_graph_free_locked(dmm_device *c, void *ptr, uint64_t *len, uint64_t *req);
/* Releases idle graph segments but reserved ones (dev.lock held; behind their events); returns their
 * bytes. */
uint64_t dmm__device_graphs_trim_locked(dmm_device *c);
/* The same, reserved ones included (the context's destroy). */
uint64_t dmm__device_graphs_fini_locked(dmm_device *c);
/* Idle segments whose event completed become reusable (dev.lock held; never during a capture). */
void dmm__device_graphs_sweep_locked(dmm_device *c);
void dmm__device_graphs_json_locked(dmm_device *c, dmm_json *j, bool blocks);
void dmm__device_graphs_totals_locked(dmm_device *c, uint64_t *live, uint64_t *committed);
/* The shared pool capture `id` joined, or 0 (dev.lock held). */
uint64_t dmm__device_graph_pool_of(const dmm_device *c, uint64_t id);
/* After a confirmed loss: frees every graph segment; no driver call. */
void dmm__device_graphs_drop_lost(dmm_device *c);

#endif /* DMM_DEVICE_GRAPHS_H */
