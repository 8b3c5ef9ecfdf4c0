/* adapters/torch/graphs.h — the memory CUDA graph captures are served from. Internal. */
#ifndef DMM_TORCH_GRAPHS_H
#define DMM_TORCH_GRAPHS_H

#include "core/json.h"
#include "types.h"

dmm_status dmm__torch_graph_malloc(tctx *c, size_t bytes, dmm_stream stream, uint64_t capture_id, void **out);
/* DMM_ERR_UNKNOWN_ALLOCATION when ptr is in no graph segment (ctx.lock held). */
dmm_status dmm__torch_graph_free_locked(tctx *c, void *ptr, uint64_t *len, uint64_t *req);
/* Maps `bytes` now (outside any capture) for the next capture to use (kept through trims until one
 * takes it). */
dmm_status dmm__torch_graph_reserve(tctx *c, uint64_t bytes, dmm_stream stream);
/* The graph of capture `id` is gone: its segments become idle once nothing in them is live, and
 * reusable once an event recorded now on `stream` (where its last replay ran) completed. */
dmm_status dmm__torch_graph_release(tctx *c, uint64_t capture_id, dmm_stream stream);
/* Releases idle graph segments but reserved ones (ctx.lock held; behind their events); returns their
 * bytes. */
uint64_t dmm__torch_graphs_trim_locked(tctx *c);
/* The same, reserved ones included (the context's destroy). */
uint64_t dmm__torch_graphs_fini_locked(tctx *c);
/* Idle segments whose event completed become reusable (ctx.lock held; never during a capture). */
void dmm__torch_graphs_sweep_locked(tctx *c);
void dmm__torch_graphs_json_locked(tctx *c, dmm_json *j, bool blocks);
void dmm__torch_graphs_totals_locked(tctx *c, uint64_t *live, uint64_t *committed);
/* After a confirmed loss: frees every graph segment; no driver call. */
void dmm__torch_graphs_drop_lost(tctx *c);

#endif /* DMM_TORCH_GRAPHS_H */
