/* adapters/torch/adapter.h — the torch adapter's core, internal to libdmm_torch.so and its tests.
 *
 * One context per device (types.h: the data; its floors, each over the ones below: context.c, jobs.c,
 * segment.c, tags.c, offload.c, graphs.c, and adapter.c on top). This header is the core's whole
 * interface: the entry points of adapter.c below, the tags' and graphs' (tags.h, offload.h, graphs.h)
 * the loss questions of context.h, and the recorder's (record.h).
 *
 * Lock order: ctx.lock → (pool → arena → driver). The hot path (pool malloc/free) takes no ctx lock.
 */
#ifndef DMM_TORCH_ADAPTER_H
#define DMM_TORCH_ADAPTER_H

#include "context.h"
#include "graphs.h"
#include "history.h"
#include "offload.h"
#include "record.h"
#include "tags.h"
#include "types.h"

dmm_status dmm__torch_create(dmm_driver *drv, const dmm_torch_ext *ext, dmm_governor *gov,
                             const dmm_torch_config *cfg, tctx **out);
/* BUSY (nothing changed) while anything is live or queued. */
dmm_status dmm__torch_destroy(tctx *c);
/* Device loss (dmm/pool.h "Device loss"). Once a driver call of this context — the pool's, the
 * arena's, the deferred queue's or the adapter's own — reported DMM_ERR_DEVICE_LOST, the driver has
 * latched it (dmm_driver_lost; dmm__torch_lost asks it) and the adapter makes no driver call any
 * more: offload, offload_wait, restore, release_host, empty_cache, graph_reserve, graph_release and
 * poll return DMM_ERR_DEVICE_LOST with a sentence, malloc is refused (by the pool or the arena), frees are accepted as bookkeeping, destroy
 * is refused (DMM_ERR_DEVICE_LOST, nothing changed) until the confirmation. confirm_lost, called once
 * the caller tore the CUDA context down: confirms it on the arena (dmm_arena_confirm_context_terminated,
 * which refunds everything), takes every queued decommit and release back unrun, marks every tag
 * offloaded (its failure DMM_ERR_DEVICE_LOST: the contents are gone, save the pinned copies) and its
 * segments gone; then destroy succeeds with blocks still live, without a driver call, and frees all
 * host memory (pinned copies through ext.host_free). Confirming the arena directly works too (destroy
 * then does the rest). DMM_ERR_INVALID_ARGUMENT when the device was not lost. Events are never
 * destroyed after the loss (the context took them). */
dmm_status dmm__torch_confirm_lost(tctx *c);
dmm_status dmm__torch_malloc(tctx *c, size_t bytes, dmm_stream stream, void **out);
dmm_status dmm__torch_free(tctx *c, void *ptr, size_t bytes, dmm_stream stream);
/* Gives back the pool's free chunks (trim + the arena's handle cache), empty tag segments and idle graph
 * segments but reserved ones (graphs.c). The segments go behind an event (recorded on the stream of
 * their last use) through the deferred queue: those whose event completed are released by this call's
 * poll, the others at a later poll. *released (optional) = the pool's bytes that left the mapping +
 * the bytes of the segments given back or QUEUED to go: not a count of what has already left the
 * device; a queued release that then fails puts its segment back in service (the poll reports it).
 * The driver's census, or the stats' mapped bytes after a poll, say what really left. */
dmm_status dmm__torch_empty_cache(tctx *c, uint64_t *released);
dmm_status dmm__torch_reset_peaks(tctx *c);
/* Zeroes the totals (allocated, freed) and num_ooms / num_alloc_retries; currents and peaks stay. */
dmm_status dmm__torch_reset_accumulated(tctx *c);
dmm_status dmm__torch_set_limit(tctx *c, uint64_t bytes); /* 0 = unlimited */
dmm_status dmm__torch_stats_json(tctx *c, char *buf, size_t cap, size_t *needed);
dmm_status dmm__torch_snapshot_json(tctx *c, char *buf, size_t cap, size_t *needed);
/* Runs the decommits whose events completed; *queued = decommits still waiting. Never waits. */
dmm_status dmm__torch_poll(tctx *c, uint64_t *queued);
/* Whether the capture check runs on every malloc (default on). */
void dmm__torch_set_capture_check(bool on);

#endif /* DMM_TORCH_ADAPTER_H */
